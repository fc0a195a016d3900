/*
 * The private seam between solver/matrix.c, solver/formats/select.c and the storage formats. Each
 * format lives in its own solver/formats/<name>.c with its kernels in kernels/formats/<name>.cl,
 * and exports one kd_format_ops table; solver/formats/table.c lists the tables by kd_format_t, and
 * a format is "available" when its entry is not NULL. Adding a format is: write the .c and .cl, add
 * the table to kd_format_table in table.c. The helpers every format uses live in format.c and
 * launch.c, which name no format. Nothing outside solver/ includes this header.
 *
 * Every format is built from a kd_format_source: the host CSR, its row statistics, and the CSR
 * arrays on the device, uploaded once. The CSR formats keep references to those device arrays;
 * the others are converted from them by kernels on the device, so host work is O(rows) metadata
 * (row blocks, permutations, offsets) and the matrix crosses the bus once even when the
 * selection builds every candidate. The exception is tiled, whose per-tile analysis is O(nnz)
 * host work and whose arrays (about nnz * (value + 1) bytes) cross the bus themselves.
 *
 * matrix.c validates everything before calling an op: the dtype is supported by the device, the
 * shape fits int32 indices, x and y have the right lengths and dtype and do not alias, and the
 * matrix has at least one row (spmv on a 0-row matrix never reaches a format).
 */
#ifndef KD_SOLVER_FORMAT_H
#define KD_SOLVER_FORMAT_H

#include "solver/matrix.h"

#include <stdint.h>

/* What a format is built from (see the top of this file). */
typedef struct kd_format_source {
    const kd_csr_t *csr;  /* host CSR, canonical; borrowed */
    kd_csr_stats_t stats; /* row-length statistics of csr */
    cl_mem indptr;        /* rows + 1 int32; NULL until kd_format_source_device */
    cl_mem indices;       /* nnz int32; NULL when nnz == 0 */
    cl_mem values;        /* nnz VALUE; NULL when nnz == 0 */
    int on_device;        /* the three arrays are uploaded */
    double upload_ms;     /* host wall time the upload took (for the benchmark) */
    /* Host metadata made by a format's prepare op (row blocks, permutations, offsets), owned by
     * the source and freed with it; NULL until prepared. */
    void *prepared[KD_FMT_COUNT];
    /* The format-independent scan (solver/matrix_scan.c), made once per source however many
     * formats are built from it, and moved into the matrix that is kept. */
    int scanned;
    kd_matrix_scan_t scan;
    void *inv_diagonal; /* owned until a matrix adopts it */
} kd_format_source_t;

/* Borrow csr (it must outlive the source) and compute its statistics; nothing is allocated. */
void kd_format_source_init(kd_format_source_t *src, const kd_csr_t *csr);
/* The same, with statistics the caller already has. */
void kd_format_source_init_stats(kd_format_source_t *src, const kd_csr_t *csr,
                                 const kd_csr_stats_t *stats);
/* Upload the CSR arrays (once; later calls return at once). */
int kd_format_source_device(kd_ocl_t *ocl, kd_format_source_t *src, kd_err_t *err);
/* Release the source's references and prepared metadata; matrices built from it keep their own
 * device arrays. */
void kd_format_source_close(kd_format_source_t *src);

/* The source's CSR arrays as the CSR formats (csr_scalar, csr_vector, csr_adaptive) hold them:
 * shared by reference with the source, counted in the matrix's device_bytes. */
typedef struct kd_format_csr {
    cl_mem indptr;  /* rows + 1 int32 */
    cl_mem indices; /* nnz int32, NULL when nnz == 0 */
    cl_mem values;  /* nnz VALUE, NULL when nnz == 0 */
} kd_format_csr_t;

/* One device array of a matrix, for a new matrix on the same pattern (issue 22,
 * solver/matrix_values.c). A pattern array depends on the sparsity pattern alone and is shared
 * by reference; a values array holds entries of the matrix (and zeros in padding: slots in the
 * format's own order) and is made anew and filled by a gather from the new values; scratch is
 * made anew and not filled (partial sums a kernel writes before it reads them). */
typedef enum kd_format_array_kind {
    KD_ARRAY_PATTERN = 0,
    KD_ARRAY_VALUES,
    KD_ARRAY_SCRATCH,
} kd_format_array_kind_t;
typedef struct kd_format_array {
    cl_mem *mem; /* a field of m->impl; *mem may be NULL (an empty array) */
    kd_format_array_kind_t kind;
} kd_format_array_t;
#define KD_FORMAT_ARRAYS_MAX 16

typedef struct kd_format_ops {
    kd_format_t format;
    /* Optional, with `arrays` (issue 22: new values on a held pattern): the size of m->impl, a
     * struct with no host pointers in it, so that a copy of it is a matrix of the same format
     * once `arrays`' entries are replaced (shared or made anew). 0 or NULL: a new matrix on the
     * same pattern is built from its CSR as any other (tiled, whose impl holds a matrix). */
    size_t impl_size;
    /* Every device array in m->impl, in a fixed order; returns the count (<=
     * KD_FORMAT_ARRAYS_MAX). */
    int (*arrays)(kd_matrix_t *m, kd_format_array_t *out);
    /* Optional: make the format's host metadata from src->csr and src->stats (O(rows), or
     * O(nnz) for tiled, which builds its arrays on the host) into src->prepared[format]. It makes
     * no OpenCL call and touches nothing else in src, so the selection runs it on another thread
     * while the CSR arrays upload. upload prepares itself when this has not run. KD_ENOMEM. */
    int (*prepare)(const kd_ocl_t *ocl, kd_format_source_t *src);
    void (*prepared_free)(void *prepared);
    /* Optional: a cheap look (a sample) before plan_bytes, for a format whose prepare is O(nnz):
     * nonzero, with the reason in why, when the selection should drop the format unprepared.
     * Same threading rules as prepare. */
    int (*screen)(const kd_ocl_t *ocl, kd_format_source_t *src, char *why, size_t cap);
    /* The device memory the format would take, in bytes, from the host data alone (preparing
     * first when the format has a prepare op) before anything is allocated; SIZE_MAX when it does
     * not fit in memory. The selection compares it with CSR's to drop formats that waste memory
     * (ELL padding). Same threading rules as prepare. */
    size_t (*plan_bytes)(const kd_ocl_t *ocl, kd_format_source_t *src);
    /* Build the format on the device from src: set m->impl and add every allocated buffer's size
     * to m->device_bytes. On failure, leave m->impl as whatever `release` can free. Conversion
     * kernels may still be running when it returns (the queue is in order). */
    int (*upload)(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err);
    /* Enqueue y = alpha * A * x + beta * y; when beta == 0, y must not be read. rows > 0. */
    int (*spmv)(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x, double beta,
                kd_vec_t *y, kd_err_t *err);
    /* Optional: Y = alpha * A * X + beta * Y over k >= 1 columns in one launch (kernels/
     * spmm_lib.cl: the matrix read once per chunk of columns, not once per column). X and Y are
     * column-major with leading dimensions ldx >= cols and ldy >= rows (elements); column c
     * starts at c * ld. When beta == 0, Y is only written. rows > 0. Without it, kd_matrix_spmm
     * runs spmv column by column. */
    int (*spmm)(kd_ocl_t *ocl, const kd_matrix_t *m, int64_t k, double alpha, cl_mem x,
                int64_t ldx, double beta, cl_mem y, int64_t ldy, kd_err_t *err);
    /* Free m->impl and its device buffers; m->impl may be NULL or partly built. */
    void (*release)(kd_matrix_t *m);
    /* Optional: the CSR arrays as the format keeps them (the CSR formats share the source's),
     * for kernels that walk rows themselves (the small-system CG); NULL op: not kept. */
    const kd_format_csr_t *(*csr_arrays)(const kd_matrix_t *m);
    /* Optional: name/count pairs saying how m is stored (kd_matrix_describe; matrix.info). */
    void (*describe)(const kd_matrix_t *m, kd_format_detail_t *out);
} kd_format_ops_t;

extern const kd_format_ops_t kd_format_csr_scalar_ops;
extern const kd_format_ops_t kd_format_csr_vector_ops;
extern const kd_format_ops_t kd_format_csr_adaptive_ops;
extern const kd_format_ops_t kd_format_ell_ops;
extern const kd_format_ops_t kd_format_ellpack_r_ops;
extern const kd_format_ops_t kd_format_sell_c_sigma_ops;
extern const kd_format_ops_t kd_format_hyb_ops;
extern const kd_format_ops_t kd_format_coo_ops;
extern const kd_format_ops_t kd_format_tiled_ops;


void kd_format_share_csr(kd_matrix_t *m, const kd_format_source_t *src, kd_format_csr_t *out);
void kd_format_release_csr(kd_format_csr_t *csr);

/* A csr_scalar matrix's arrays (for the solver's fused SpMV); NULL for any other format or a
 * matrix without rows. */
const kd_format_csr_t *kd_format_csr_scalar_arrays(const kd_matrix_t *m);
/* The CSR arrays of a matrix whose format keeps them (csr_arrays op), else NULL (also for a
 * matrix without rows). */
const kd_format_csr_t *kd_format_csr_arrays(const kd_matrix_t *m);

/* The reordering's side of kd_matrix_spmv and kd_matrix_free (solver/matrix_reorder.c): gather
 * x, the format's SpMV on P A P^T, scatter y; release the order's buffers (m may be partly
 * built). */
int kd_matrix_order_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err);
void kd_matrix_order_release(kd_matrix_t *m);

/* The ops of an available format, or NULL. */
const kd_format_ops_t *kd_format_ops(kd_format_t format);

/* Build `format` from src (which may already be on the device) into a new matrix. The matrix
 * has no scan yet: give the one that is kept its scan with kd_matrix_adopt_scan. */
int kd_matrix_upload_source(kd_ocl_t *ocl, kd_format_source_t *src, kd_format_t format,
                            kd_matrix_t **out, kd_err_t *err);
/* Scan src's host CSR once (no OpenCL call, so it may run on another thread while the arrays
 * upload: it writes only src's scan fields). KD_ENOMEM. */
int kd_format_source_scan(kd_format_source_t *src, kd_err_t *err);
/* Scan src if that has not happened and move the scan (and the inverse diagonal) into m. */
int kd_matrix_adopt_scan(kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err);

/* A read-only device buffer holding a copy of `bytes` bytes of host data (kd_ocl_buffer_upload).
 * bytes == 0 gives *out = NULL. */
int kd_format_buffer_from_host(kd_ocl_t *ocl, const void *host, size_t bytes, const char *what,
                               cl_mem *out, kd_err_t *err);

/*
 * A read-only device copy of `bytes` bytes of host data, for a format's arrays. bytes == 0 gives
 * *out = NULL (an empty array; kernels never dereference it). Adds the allocation to
 * m->device_bytes. `what` names the array in error messages ("column indices").
 */
int kd_format_upload_array(kd_ocl_t *ocl, kd_matrix_t *m, const void *host, size_t bytes,
                           const char *what, cl_mem *out, kd_err_t *err);

/* An uninitialised device array of `bytes` bytes that kernels fill (conversions, partial sums);
 * bytes == 0 gives NULL. Adds the allocation to m->device_bytes. */
int kd_format_alloc_array(kd_ocl_t *ocl, kd_matrix_t *m, size_t bytes, const char *what,
                          cl_mem *out, kd_err_t *err);

/* A new reference to one of the source's arrays for a matrix (NULL stays NULL); its size counts
 * in m->device_bytes, since the matrix keeps it alive. */
cl_mem kd_format_share(kd_matrix_t *m, cl_mem mem, size_t bytes);

/* clReleaseMemObject on each non-NULL entry, which is set to NULL. */
void kd_format_release_mems(cl_mem *mems, size_t count);

/* The -D options some formats build with, for the start-up warm-up (solver/runtime/programs.c) to
 * build the same programs: csr_vector's -DKD_TPR for a mean row length, csr_adaptive's -DKD_CAP
 * on this device, sell_c_sigma's options. */
int kd_format_csr_vector_threads(double mean_row, size_t wg);
int kd_format_csr_adaptive_cap(const kd_ocl_t *ocl, kd_dtype_t dtype);
extern const char kd_format_sell_options[];

/* "-DKD_WG_SIZE=N" followed by `extra` (may be NULL) into buf. */
void kd_format_options(const kd_ocl_t *ocl, const char *extra, char *buf, size_t cap);

/*
 * Run kernel `name` of kernels/<program>.cl, built for dtype with kd_format_options(extra), over
 * one work-item per item (items rounded up to the work-group size), with the arguments
 * KD_ARGS(...) gives (solver/runtime/ocl.h).
 */
int kd_format_run(kd_ocl_t *ocl, kd_dtype_t dtype, const char *program, const char *extra,
                  const char *name, size_t items, const kd_ocl_arg_t *args, size_t nargs,
                  kd_err_t *err);

/* The global size for one work-item per item: count rounded up to a multiple of wg. */
static inline size_t kd_format_round_up(size_t count, size_t wg)
{
    return (count + wg - 1) / wg * wg;
}

/* Bytes of the CSR arrays of csr on the device: the yardstick for plan_bytes. */
size_t kd_format_csr_bytes(const kd_csr_t *csr);

/* a * b + c in size_t, SIZE_MAX on overflow (for plan_bytes). */
size_t kd_format_size_mad(size_t a, size_t b, size_t c);

/*
 * The part of an ELL matrix HYB shares with ELL: `width` slots per row, column-major with leading
 * dimension ld = rows rounded up to KD_ELL_ALIGN (kernels/formats/ell.cl), built on the device from the
 * source's CSR arrays by kd_ell_from_csr (a row longer than width keeps its first width entries:
 * HYB's COO part holds the rest). kd_ell_part_spmv enqueues y = alpha * A_part * x + beta * y.
 */
#define KD_ELL_ALIGN 32
typedef struct kd_ell_part {
    cl_mem indices, values; /* width * ld each, NULL when width == 0 */
    int width;
    int64_t ld;
} kd_ell_part_t;

/* Device bytes of an ELL part of `width` for `rows` rows; SIZE_MAX when it does not fit. */
size_t kd_ell_part_bytes(int64_t rows, int64_t width, kd_dtype_t dtype);
/* Allocate part's arrays (counted in m->device_bytes) and fill them from src's CSR arrays. */
int kd_ell_part_build(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, int width,
                      const char *what, kd_ell_part_t *part, kd_err_t *err);
int kd_ell_part_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, const kd_ell_part_t *part, double alpha,
                     const kd_vec_t *x, double beta, kd_vec_t *y, kd_err_t *err);
void kd_ell_part_release(kd_ell_part_t *part);

/*
 * The part of a COO matrix HYB shares with COO: entries sorted by row, in chunks of KD_WG_SIZE
 * entries (one work-group each), and two partial sums per chunk for the rows that cross a chunk
 * boundary. kd_coo_part_spmv enqueues y += alpha * A_part * x (y is read: it already holds
 * beta * y or the ELL part's result).
 */
typedef struct kd_coo_part {
    int64_t nnz;
    size_t chunks;
    cl_mem rows, cols, values; /* nnz each, NULL when nnz == 0 */
    cl_mem head, tail;         /* chunks VALUE each: the first and last row segment's sum */
} kd_coo_part_t;

int kd_coo_part_alloc_partials(kd_ocl_t *ocl, kd_matrix_t *m, kd_coo_part_t *part, kd_err_t *err);
int kd_coo_part_spmv(kd_ocl_t *ocl, kd_dtype_t dtype, const kd_coo_part_t *part, double alpha,
                     const kd_vec_t *x, kd_vec_t *y, kd_err_t *err);
void kd_coo_part_release(kd_coo_part_t *part);

#endif
