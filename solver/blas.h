/*
 * BLAS-1 on device vectors. (The solvers' fused, multi-column steps are in
 * solver/methods/krylov.h.)
 *
 * A kd_blas_t belongs to one caller on one device and one value type. It owns two small device
 * buffers:
 *   partials  one VALUE per work-group of a reduction (at most groups_max),
 *   scalars   KD_BLAS_SLOT_COUNT VALUEs: where reductions land, so a result can stay on the
 *             device (kd_blas_dot_to) until the host asks for it.
 *
 * Reductions are two launches: every work-group reduces its strided share of the vectors in
 * local memory into partials[group], then one work-group sums the partials in a fixed order into
 * a slot. The group count depends only on n and the device, so results are bitwise reproducible
 * run to run; there are no atomics. Functions named kd_blas_* enqueue and return, except those
 * that return a host value (kd_blas_dot, kd_blas_nrm2, kd_blas_read_slot), which wait for the
 * queue.
 *
 * All vectors passed to one call have the same length and the kd_blas_t's dtype.
 */
#ifndef KD_SOLVER_BLAS_H
#define KD_SOLVER_BLAS_H

#include "solver/runtime/ocl.h"
#include "solver/vector.h"

/* Slots of the scalars buffer. */
typedef enum kd_blas_slot {
    KD_BLAS_SLOT_0 = 0, /* free for callers' device-side results */
    KD_BLAS_SLOT_1 = 1,
    KD_BLAS_SLOT_2 = 2,
    KD_BLAS_SLOT_3 = 3,
    KD_BLAS_SLOT_4 = 4,
    KD_BLAS_SLOT_RESULT = 5, /* scratch for kd_blas_dot / kd_blas_nrm2 */
    KD_BLAS_SLOT_COUNT = 6
} kd_blas_slot_t;

typedef struct kd_blas {
    kd_ocl_t *ocl;
    kd_dtype_t dtype;
    size_t work_group_size;
    size_t groups_max; /* work-groups per reduction at most: partials holds this many */
    cl_mem partials;
    cl_mem scalars;
    char options[48]; /* "-DKD_WG_SIZE=N" for kernels/blas.cl */
} kd_blas_t;

/* Allocate the small buffers and zero the scalars. */
int kd_blas_init(kd_ocl_t *ocl, kd_dtype_t dtype, kd_blas_t *blas, kd_err_t *err);
void kd_blas_release(kd_blas_t *blas); /* accepts a zeroed or released kd_blas_t */

/* ---- BLAS-1 with host scalars and host results ---- */

/* *out = x'y (blocking). */
int kd_blas_dot(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, double *out, kd_err_t *err);
/* *out = ||x||_2 = sqrt(x'x) (blocking). */
int kd_blas_nrm2(kd_blas_t *blas, const kd_vec_t *x, double *out, kd_err_t *err);
/* y = alpha * x + y */
int kd_blas_axpy(kd_blas_t *blas, double alpha, const kd_vec_t *x, kd_vec_t *y, kd_err_t *err);
/* y = x + alpha * y */
int kd_blas_xpay(kd_blas_t *blas, const kd_vec_t *x, double alpha, kd_vec_t *y, kd_err_t *err);
/* y = x */
int kd_blas_copy(kd_blas_t *blas, const kd_vec_t *x, kd_vec_t *y, kd_err_t *err);
/* x = alpha * x */
int kd_blas_scale(kd_blas_t *blas, double alpha, kd_vec_t *x, kd_err_t *err);

/* ---- device scalars ---- */

/* scalars[slot] = x'y, enqueued (no host wait). */
int kd_blas_dot_to(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, kd_blas_slot_t slot,
                   kd_err_t *err);
/* *out = scalars[slot] (blocking). */
int kd_blas_read_slot(kd_blas_t *blas, kd_blas_slot_t slot, double *out, kd_err_t *err);

#endif
