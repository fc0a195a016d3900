/*
 * The private seam between solver/matrix.c and the storage formats. Each format lives in its own
 * solver/format_<name>.c with its kernels in kernels/<name>.cl, and exports one kd_format_ops
 * table; matrix.c lists the tables by kd_format_t, and a format is "available" when its entry is
 * not NULL. Adding a format is: write the .c and .cl, add the table to kd_format_table in
 * matrix.c. Nothing outside solver/ includes this header.
 *
 * matrix.c validates everything before calling an op: the dtype is supported by the device, the
 * shape fits int32 indices, x and y have the right lengths and dtype and do not alias, and the
 * matrix has at least one row (spmv on a 0-row matrix never reaches a format).
 */
#ifndef KD_SOLVER_FORMAT_H
#define KD_SOLVER_FORMAT_H

#include "solver/matrix.h"

typedef struct kd_format_ops {
    kd_format_t format;
    /* Build the format from csr on the device: set m->impl and add every allocated buffer's
     * size to m->device_bytes. On failure, leave m->impl as whatever `release` can free. */
    int (*upload)(kd_ocl_t *ocl, const kd_csr_t *csr, kd_matrix_t *m, kd_err_t *err);
    /* Enqueue y = alpha * A * x + beta * y; when beta == 0, y must not be read. rows > 0. */
    int (*spmv)(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x, double beta,
                kd_vec_t *y, kd_err_t *err);
    /* Free m->impl and its device buffers; m->impl may be NULL or partly built. */
    void (*release)(kd_matrix_t *m);
} kd_format_ops_t;

extern const kd_format_ops_t kd_format_csr_scalar_ops;

/*
 * A read-only device copy of `bytes` bytes of host data, for a format's arrays. bytes == 0 gives
 * *out = NULL (an empty array; kernels never dereference it). Adds the allocation to
 * m->device_bytes. `what` names the array in error messages ("column indices").
 */
int kd_format_upload_array(kd_ocl_t *ocl, kd_matrix_t *m, const void *host, size_t bytes,
                           const char *what, cl_mem *out, kd_err_t *err);

/* The global size for one work-item per item: count rounded up to a multiple of wg. */
static inline size_t kd_format_round_up(size_t count, size_t wg)
{
    return (count + wg - 1) / wg * wg;
}

#endif
