/*
 * The host-side sparse matrix: compressed sparse rows in canonical form (column indices strictly
 * increasing inside each row, duplicates summed, explicit zeros kept), with 32-bit indices as the
 * device kernels use them. Every matrix krylovd accepts — CSR or COO arrays from the wire, or a
 * Matrix Market file — becomes a kd_csr_t through the builders below, which validate every index
 * and size (the arrays come from the network) and say exactly what is wrong.
 *
 * The content id of a matrix is the XXH3-128 hash of its canonical form, so the same matrix
 * uploaded twice, in any order of entries, gets the same id.
 */
#ifndef KD_COMMON_CSR_H
#define KD_COMMON_CSR_H

#include "common/dtype.h"
#include "common/error.h"

#include <stdint.h>

/* The largest dimension or nonzero count a kd_csr_t can hold: indices and row pointers are int32.
 */
#define KD_CSR_INDEX_MAX INT32_MAX

typedef struct kd_csr {
    int64_t rows;
    int64_t cols;
    int64_t nnz;
    kd_dtype_t dtype; /* KD_DTYPE_F64 or KD_DTYPE_F32 */
    int32_t *indptr;  /* rows + 1 entries, indptr[0] = 0, indptr[rows] = nnz */
    int32_t *indices; /* nnz entries */
    void *values;     /* nnz entries of dtype */
    /* NULL, or the holder of indptr and indices when matrices of different values share them
     * (kd_csr_with_values): they are then read-only and freed with the last reference. */
    struct kd_csr_pattern *pattern;
    int holds; /* kd_csr_hold's references besides the owner's (atomic) */
} kd_csr_t;

/* One more reference to csr (a thread reading it meanwhile: the writer thread's file): the
 * matrix is freed by the last of the kd_csr_free calls, one for each hold and the owner's. The
 * arrays must not change while held. Returns csr. */
kd_csr_t *kd_csr_hold(kd_csr_t *csr);

/*
 * A new matrix with csr's pattern, shared (no copy: csr's arrays move into a reference-counted
 * holder the first time, so csr must not change them afterwards, which canonical matrices never
 * do), and values allocated, not filled. Either may be freed first; the references are atomic,
 * so they may be freed on different threads. KD_ENOMEM.
 */
int kd_csr_with_values(kd_csr_t *csr, kd_csr_t **out, kd_err_t *err);
/* The same with values NULL: a reference to csr's pattern alone. Values, where a matrix has
 * them, are freed by kd_csr_free only (they may come from common/recycle.h, which must see them
 * back: a plain free() of one corrupts the heap the next time its address is recycled). */
int kd_csr_pattern_ref(kd_csr_t *csr, kd_csr_t **out, kd_err_t *err);

/*
 * A square shared pattern's mirror map (what a scan of each new version's values for symmetry
 * needs, which depends on the pattern alone): for each entry k = (i, j) the position of (j, i),
 * or -1 where the pattern has none; for each row the position of its diagonal entry, or -1;
 * `complete` when every entry has its mirror (the pattern is symmetric). Built on the first
 * call (on kd_slices threads: one binary search per entry), kept with the pattern and freed with
 * it; 4 (nnz + rows) bytes. NULL when csr has no shared pattern (kd_csr_with_values makes one),
 * is not square or is empty, or memory ran out (the caller scans without it).
 */
typedef struct kd_csr_mirror {
    int32_t *mirror; /* nnz */
    int32_t *diag;   /* rows */
    int complete;
} kd_csr_mirror_t;
const kd_csr_mirror_t *kd_csr_pattern_mirror(const kd_csr_t *csr);

/* Caps applied on top of KD_CSR_INDEX_MAX (configured server limits). Zero means no extra cap. */
typedef struct kd_csr_limits {
    int64_t max_rows;
    int64_t max_cols;
    int64_t max_nnz;
    /* Charged by the builders below before they allocate (kd_csr_charge): the host bytes that
     * building one matrix may hold, and the device bytes of its smallest form (its CSR arrays,
     * kd_csr_bytes). A request's rows cost memory its bytes need not carry (a COO or Matrix
     * Market upload declares rows, it does not send them): these bound what it can make the
     * server hold. build_limit and device_limit name each limit and how to raise it. */
    size_t max_build_bytes;
    const char *build_limit;
    size_t max_device_bytes;
    const char *device_limit;
} kd_csr_limits_t;

/* Row-length statistics, for format selection and for matrix.info. */
typedef struct kd_csr_stats {
    int64_t min_row;
    int64_t max_row;
    double mean_row;
    double stddev_row;
    int64_t empty_rows;
    int64_t nonfinite; /* values that are NaN or +-Inf */
} kd_csr_stats_t;

/* Check rows/cols/nnz against KD_CSR_INDEX_MAX and limits (which may be NULL). KD_EBADREQ for a
 * negative size, KD_ETOOLARGE over a limit. */
int kd_csr_check_shape(int64_t rows, int64_t cols, int64_t nnz, const kd_csr_limits_t *limits,
                       kd_err_t *err);

/* Bytes of a canonical matrix's arrays: 4 (rows + 1) + (4 + value size) nnz, saturating at
 * SIZE_MAX. */
size_t kd_csr_bytes(int64_t rows, int64_t nnz, kd_dtype_t dtype);

/* Charge a build before it allocates: build_bytes (what the builder will hold on the host,
 * saturating) against limits->max_build_bytes (KD_ETOOLARGE), and kd_csr_bytes against
 * max_device_bytes (KD_EDEVMEM, as a matrix over the whole budget is once built), each naming
 * the figure, the limit and how to raise it; KD_OK when limits is NULL. */
int kd_csr_charge(int64_t rows, int64_t cols, int64_t nnz, kd_dtype_t dtype, size_t build_bytes,
                  const kd_csr_limits_t *limits, kd_err_t *err);

/*
 * Check that csr is canonical, as the builders make it: a shape within KD_CSR_INDEX_MAX,
 * indptr[0] = 0, indptr non-decreasing up to indptr[rows] = nnz, and each row's column indices
 * strictly increasing inside 0..cols-1. One O(rows + nnz) pass, for a matrix that did not come
 * through a builder (a product from the device) before anything analyses it. KD_EINTERNAL naming
 * the first fault (row, position, index).
 */
int kd_csr_validate(const kd_csr_t *csr, kd_err_t *err);

/* Allocate an uninitialised matrix of that shape (after kd_csr_check_shape). */
int kd_csr_alloc(int64_t rows, int64_t cols, int64_t nnz, kd_dtype_t dtype, kd_csr_t **out,
                 kd_err_t *err);

/* Free a matrix; accepts NULL. */
void kd_csr_free(kd_csr_t *csr);

/*
 * Build a canonical matrix from CSR arrays as they arrive on the wire (unaligned little-endian;
 * indptr and indices int32 or int64; values float32 or float64, converted to out_dtype). Checks:
 * indptr[0] = 0, indptr non-decreasing, indptr[rows] = nnz, every index in 0..cols-1. Rows need
 * not be sorted; duplicate entries in a row are summed.
 */
int kd_csr_from_csr_arrays(int64_t rows, int64_t cols, int64_t nnz, const void *indptr,
                           kd_dtype_t indptr_type, const void *indices, kd_dtype_t index_type,
                           const void *values, kd_dtype_t value_type, kd_dtype_t out_dtype,
                           const kd_csr_limits_t *limits, kd_csr_t **out, kd_err_t *err);

/* The most host memory kd_csr_from_coo_arrays holds for that shape (saturating), the triplets
 * it reads aside. */
size_t kd_csr_coo_build_bytes(int64_t rows, int64_t nnz, kd_dtype_t dtype);

/* Build a canonical matrix from COO triplets (any order; duplicates summed). `values` may be NULL
 * for a pattern matrix (all ones). row/col are int32 or int64 (index_type). */
int kd_csr_from_coo_arrays(int64_t rows, int64_t cols, int64_t nnz, const void *row,
                           const void *col, kd_dtype_t index_type, const void *values,
                           kd_dtype_t value_type, kd_dtype_t out_dtype,
                           const kd_csr_limits_t *limits, kd_csr_t **out, kd_err_t *err);

/* A deep copy with values converted to dtype. */
int kd_csr_convert(const kd_csr_t *csr, kd_dtype_t dtype, kd_csr_t **out, kd_err_t *err);

/* A^T as a new canonical matrix (cols x rows): one counting pass over the columns, then the
 * entries scattered in row order, so each row of A^T comes out sorted. O(nnz + cols). KD_ENOMEM. */
int kd_csr_transpose(const kd_csr_t *csr, kd_csr_t **out, kd_err_t *err);

/* Content id: XXH3-128 over (rows, cols, nnz, dtype, indptr, indices, values) of the canonical
 * form. Returns 0 or KD_ENOMEM. */
int kd_csr_hash(const kd_csr_t *csr, uint8_t id[16]);

#define KD_ID_HEX_LEN 32
/* 32 lower-case hex digits and a NUL. */
void kd_id_to_hex(const uint8_t id[16], char hex[KD_ID_HEX_LEN + 1]);
/* Parse 32 hex digits (either case); returns 0 or -1. */
int kd_id_from_hex(const char *hex, size_t len, uint8_t id[16]);

/* Row-length statistics in O(rows); nonfinite is left 0 (it needs a pass over the values: the
 * solver's upload scan counts them, solver/matrix_scan.c). */
void kd_csr_row_stats(const kd_csr_t *csr, kd_csr_stats_t *stats);
/* Row-length statistics and the count of non-finite values (one more pass over nnz values). */
void kd_csr_compute_stats(const kd_csr_t *csr, kd_csr_stats_t *stats);

/* Reference y = alpha * A * x + beta * y on the CPU in double precision (values widened), for
 * tests and for the final residual check. When beta == 0, y is not read (it may hold NaN). */
void kd_csr_spmv_ref(const kd_csr_t *csr, const double *x, double alpha, double beta, double *y);

/* Value i of the matrix widened to double. */
static inline double kd_csr_value(const kd_csr_t *csr, int64_t i)
{
    return kd_load_real(csr->values, csr->dtype, (size_t)i);
}

#endif
