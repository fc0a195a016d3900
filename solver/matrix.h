/*
 * A sparse matrix resident in device memory, in one storage format, and SpMV on it. Each format
 * lives in its own solver/format_*.c behind the private ops table in solver/formats/format.h; this
 * header is what the rest of krylovd sees.
 */
#ifndef KD_SOLVER_MATRIX_H
#define KD_SOLVER_MATRIX_H

#include "common/csr.h"
#include "common/reorder.h"
#include "solver/runtime/ocl.h"
#include "solver/vector.h"

typedef enum kd_format {
    KD_FMT_CSR_SCALAR = 0,
    KD_FMT_CSR_VECTOR,
    KD_FMT_CSR_ADAPTIVE,
    KD_FMT_ELL,
    KD_FMT_ELLPACK_R,
    KD_FMT_SELL_C_SIGMA,
    KD_FMT_HYB,
    KD_FMT_COO,
    KD_FMT_TILED,
    KD_FMT_COUNT
} kd_format_t;

/* "csr_scalar", "csr_vector", ... as used on the wire. */
const char *kd_format_name(kd_format_t format);
/* Returns 0 or -1 for an unknown name. */
int kd_format_parse(const char *name, kd_format_t *out);
/* 1 if this build implements the format. */
int kd_format_available(kd_format_t format);

/* What a format says about how it stored a matrix (matrix.info `format_detail`): a few named
 * counts, such as tiled's tiles per kind; count == 0 for formats with nothing to say. */
#define KD_FORMAT_DETAIL_MAX 12
#define KD_FORMAT_DETAIL_NAME 24
typedef struct kd_format_detail {
    int count;
    struct {
        char name[KD_FORMAT_DETAIL_NAME];
        int64_t value;
    } items[KD_FORMAT_DETAIL_MAX];
} kd_format_detail_t;

/* Append one name/count pair (ignored when full; the name is cut to fit). */
void kd_format_detail_add(kd_format_detail_t *detail, const char *name, int64_t value);

/* What kd_matrix_upload learnt scanning the host values once, whatever the format: the solver
 * refuses or reports on these without touching the device. Rows and columns are -1 when none. */
typedef struct kd_matrix_scan {
    int64_t non_finite_row, non_finite_col; /* the first NaN or Inf entry in row order */
    int64_t non_finite_count;               /* how many entries are NaN or Inf */
    double non_finite_value;
    int64_t bad_diagonal_row; /* square only: the first zero, missing or non-finite a_ii */
    double bad_diagonal_value;
    int64_t negative_diagonal_row; /* square only: the first a_ii < 0 */
    double negative_diagonal_value;
    /* Square and a_ij == a_ji to rounding for every (i, j) (within 256 ulps of the dtype,
     * solver/matrix_scan.c says why), the pattern exactly (an entry stored on one side only is
     * asymmetric even when it is 0; NaN mirrors NaN). A
     * reordered matrix keeps its client matrix's flag (P A P^T is symmetric when A is). */
    int symmetric;
    /* Symmetric, and every a_ii is finite and > 0 (necessary for SPD, not sufficient): what
     * method "auto" picks CG on. */
    int looks_spd;
    /* Square only: the first entry in row order whose mirror differs: a_ij = asymmetric_value,
     * a_ji = asymmetric_mirror (0 when not stored: asymmetric_mirror_stored == 0). */
    int64_t asymmetric_row, asymmetric_col;
    double asymmetric_value, asymmetric_mirror;
    int asymmetric_mirror_stored;
} kd_matrix_scan_t;

/* A symmetric reordering kept inside the matrix (solver/matrix_reorder.c): the format holds
 * P A P^T, kd_matrix_spmv permutes x in and y out on the device, and a solve runs in the permuted
 * order throughout. The scan's rows and columns stay in the original numbering; inv_diagonal is
 * in the permuted order. */
typedef struct kd_matrix_order {
    kd_reorder_t kind;          /* KD_REORDER_NONE: nothing below is allocated */
    int32_t *perm;              /* host, rows entries: perm[new] = old */
    cl_mem perm_dev, iperm_dev; /* rows int32 each, in device_bytes */
    /* x and y in the permuted order for kd_matrix_spmv, in device_bytes: one worker thread
     * uses a device's matrices (server/worker.c), so one pair per matrix suffices */
    kd_vec_t x_p, y_p;
} kd_matrix_order_t;

typedef struct kd_matrix {
    int64_t rows, cols, nnz;
    kd_dtype_t dtype;
    kd_format_t format;
    size_t device_bytes;             /* bytes of device memory this matrix holds */
    const struct kd_format_ops *ops; /* private */
    void *impl;                      /* private, format-specific */
    kd_matrix_scan_t scan;
    /* Square matrices with rows > 0: 1 / a_ii per row in the matrix's dtype (0 where a_ii is zero,
     * missing or not finite), in host memory, for Jacobi preconditioning (its setup copies it to
     * the device once); NULL otherwise. Format-independent: built from the host CSR by
     * solver/matrix_scan.c, not counted in device_bytes. */
    void *inv_diagonal;
    /* Preconditioners set up on this matrix (solver/precond/precond.h), counted in device_bytes and
     * freed with it; kd_precond_get adds to the list. */
    struct kd_precond *preconds;
    kd_matrix_order_t order;
    /* A batched matrix (solver/batch/batch.h), owned: ops is NULL and rows, cols, nnz are the block
     * diagonal's totals (kd_batch_matrix_wrap); NULL for every other matrix. */
    struct kd_batch *batch;
    /* The pattern arrays this matrix shares with matrices of other values (kd_matrix_with_values);
     * NULL when it shares nothing. */
    struct kd_matrix_share *share;
    /* Its LU or Cholesky factorisation on the host (solver/direct/direct.h: method "direct"),
     * made on first use and freed with it; its bytes are the factor budget's, not device_bytes.
     * NULL until then. */
    struct kd_direct *direct;
} kd_matrix_t;
typedef struct kd_matrix_share kd_matrix_share_t;

/* The device memory, in bytes, that `format` would take for csr on this device, computed on the
 * host from the row pointers alone (at most O(rows)) before anything is allocated: padding
 * included. SIZE_MAX when it does not fit in memory or the format is not available. */
size_t kd_matrix_plan_bytes(const kd_ocl_t *ocl, const kd_csr_t *csr, const kd_csr_stats_t *stats,
                            kd_format_t format);

/* Copy csr to the device in `format` (values in csr->dtype): the CSR arrays cross the bus and
 * the format is built from them on the device. KD_EDEVMEM when the device refuses the
 * allocation; KD_EUNSUPPORTED for float64 on a device without fp64. */
int kd_matrix_upload(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t format, kd_matrix_t **out,
                     kd_err_t *err);
void kd_matrix_free(kd_matrix_t *m); /* accepts NULL */

/* The format's description of m into *out (out->count == 0 when the format has none). */
void kd_matrix_describe(const kd_matrix_t *m, kd_format_detail_t *out);

/* Enqueue y = alpha * A * x + beta * y. x has cols entries and y rows entries, both of the
 * matrix's dtype. When beta == 0, y is only written (it may hold NaN before). */
int kd_matrix_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                   double beta, kd_vec_t *y, kd_err_t *err);
/* The same on the matrix as stored, P A P^T for a reordered one (x and y in the permuted order):
 * the solver's SpMV. */
int kd_matrix_spmv_inner(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err);

/*
 * Y = alpha * A * X + beta * Y for the k columns of X (the matrix's columns) and Y (its rows), one
 * launch where the format has an SpMM kernel (the matrix read once per chunk of 8 columns, not
 * once per column: solver/formats/format.h), column by column otherwise. When beta == 0, Y is only
 * written. kd_matrix_spmm takes the client's order; kd_matrix_spmm_inner the stored one (the
 * solver's; a reordered matrix's client-order SpMM runs column by column).
 */
int kd_matrix_spmm(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_multivec_t *x,
                   double beta, kd_multivec_t *y, kd_err_t *err);
int kd_matrix_spmm_inner(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_multivec_t *x,
                         double beta, kd_multivec_t *y, kd_err_t *err);
/* Whether m's format multiplies several columns in one launch. */
int kd_matrix_has_spmm(const kd_matrix_t *m);

/* kd_matrix_upload with a reordering: `kind` none uploads csr as it is; rcm or metis computes
 * the permutation (deterministic: a reload gets the same one), uploads P csr P^T and keeps the
 * permutation in the matrix. KD_EBADREQ for a non-square matrix, KD_EUNSUPPORTED for metis
 * without it. */
int kd_matrix_upload_reordered(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t format,
                               kd_reorder_t kind, kd_matrix_t **out, kd_err_t *err);
/* Keep perm (rows entries, perm[new] = old; ownership passes, also on failure) in m, which holds
 * P A P^T: upload it and its inverse, allocate the scratch vectors, and move the scan's rows and
 * columns back to the original numbering. KD_EDEVMEM, KD_ENOMEM. */
int kd_matrix_attach_order(kd_ocl_t *ocl, kd_matrix_t *m, kd_reorder_t kind, int32_t *perm,
                           kd_err_t *err);

/*
 * New values on a held pattern (issue 22; solver/matrix_values.c): a new matrix with like's
 * pattern, format and reordering and csr's values. csr must be like's canonical pattern exactly
 * (the caller checked: a pattern hash or the same arrays) with the new values in its dtype. The
 * device arrays that depend on the pattern alone are shared with like by reference, so the new
 * matrix's device_bytes are its values arrays (padding included) and scratch; the values reach
 * the format's slots by one gather through a map made once per pattern (the first call builds
 * the format once from the pattern to make it, about like's size for that moment). The shared
 * bytes count in one sharing matrix's device_bytes and move to another when it is freed
 * (kd_matrix_shares: whether a free may have changed another matrix's device_bytes). The scan and
 * the inverse diagonal come from csr's values. KD_EUNSUPPORTED when like's format does not share
 * (tiled), for a batched matrix, an empty matrix, or a pattern whose format arrays turn out to
 * depend on more than the pattern: build from csr instead. times (may be NULL) receives the
 * milliseconds of its steps for a log line: [0] the new arrays (and, the first time, the map's
 * build), [1] the values' scan (on host threads), [2] the values' transfer into the slots, [3]
 * all of it (the scan runs beside the transfer).
 */
int kd_matrix_with_values(kd_ocl_t *ocl, kd_matrix_t *like, const kd_csr_t *csr, kd_matrix_t **out,
                          double times[4], kd_err_t *err);
int kd_matrix_shares(const kd_matrix_t *m);
/* m's values in canonical CSR order (nnz values of m's dtype) into the device buffer out, from
 * the format's own values arrays through the maps of the pattern m shares (kd_matrix_with_values
 * made it, or a matrix values were put on): nothing crosses the bus. KD_EUNSUPPORTED when m
 * shares no pattern or is reordered (its slots hold P A P^T's entries): the caller uploads. */
int kd_matrix_values_canonical(kd_ocl_t *ocl, const kd_matrix_t *m, cl_mem out, kd_err_t *err);
/* The device bytes kd_matrix_with_values(like, ...) allocates at most, the moment's staging and
 * the first call's probe included (for a budget check before it). */
size_t kd_matrix_values_bytes(const kd_matrix_t *like);
/* kd_matrix_free's part: leave m's share, moving its count to another member. */
void kd_matrix_share_leave(kd_matrix_t *m);

#endif
