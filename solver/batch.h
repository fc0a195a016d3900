/*
 * Batched matrices and batched solves: k small systems that share one sparsity pattern (the
 * power-flow or chemistry case: one structure, many value sets), held on the device as one CSR
 * pattern and k x nnz values, and solved all at once, one work-group per system
 * (kernels/batch.cl). Each system iterates, stops and reports on its own: one that breaks down
 * or meets a non-finite value leaves the others untouched.
 *
 * solver/batch.c holds the matrix (upload, scan, SpMV); solver/batch_solve.c the solve.
 */
#ifndef KD_SOLVER_BATCH_H
#define KD_SOLVER_BATCH_H

#include "common/csr.h"
#include "solver/matrix.h"
#include "solver/ocl.h"
#include "solver/solve.h"

typedef struct kd_batch {
    int64_t count; /* k systems */
    int64_t rows, cols, nnz;
    kd_dtype_t dtype;
    cl_mem indptr, indices; /* the shared pattern (int32); NULL when nnz = 0 (indices) */
    cl_mem values;          /* count x nnz, system s at s * nnz; NULL when nnz = 0 */
    cl_mem inv_diagonal;    /* square: count x rows of 1 / a_ii (0 where not usable), else NULL */
    size_t device_bytes;
    /* Per system, from the host scan at upload: the first non-finite value's entry (-1: none),
     * and for square systems the first row whose a_ii is zero, missing or not finite (-1: none)
     * and the first with a_ii < 0 (-1: none). */
    int64_t *non_finite_entry;
    int64_t *bad_diagonal_row;
    int64_t *negative_diagonal_row;
} kd_batch_t;

/*
 * The device bytes a batch of `count` systems with this pattern takes (pattern, values, the
 * inverse diagonals), or SIZE_MAX when the product overflows: checked before anything is
 * allocated.
 */
size_t kd_batch_plan_bytes(int64_t count, int64_t rows, int64_t cols, int64_t nnz,
                           kd_dtype_t dtype);

/*
 * Upload `count` >= 1 systems: the pattern of `pattern` (its values are not read; its dtype is
 * the batch's) and `values`, count x pattern->nnz values of that dtype, system s at s * nnz.
 * The values are scanned on the host (non-finite entries, diagonals). KD_EBADREQ for count < 1,
 * KD_ETOOLARGE when the sizes overflow or a buffer is over the device's limit, KD_EDEVMEM.
 */
int kd_batch_upload(kd_ocl_t *ocl, const kd_csr_t *pattern, const void *values, int64_t count,
                    kd_batch_t **out, kd_err_t *err);
void kd_batch_free(kd_batch_t *batch); /* accepts NULL */

/*
 * The server's view of a batch: its canonical host form is the block-diagonal matrix of the k
 * systems (k rows x rows, k cols x cols, k x nnz entries, system s's values in entries
 * s nnz .. (s + 1) nnz - 1), which is what is hashed, persisted and reloaded.
 *
 * kd_batch_from_block_diagonal checks that csr is k equal blocks on the diagonal (the same
 * pattern in each; KD_EBADREQ naming the first difference otherwise), uploads the batch and
 * wraps it in a kd_matrix_t (ops NULL, format csr_scalar nominally, the block diagonal's shape,
 * device_bytes the batch's) that owns it: kd_matrix_free frees both. k >= 1.
 */
int kd_batch_from_block_diagonal(kd_ocl_t *ocl, const kd_csr_t *csr, int64_t k, kd_matrix_t **out,
                                 kd_err_t *err);

/* A batch's id: the block diagonal's content hash, changed by k so a batch never shares an id
 * with the plain block-diagonal matrix (nor with a batch of another size). */
static inline void kd_batch_id_mix(uint8_t id[16], int64_t k)
{
    id[15] ^= 0xB7;
    for (int i = 0; i < 8; i++)
        id[i] ^= (uint8_t)((uint64_t)k >> (8 * i));
}

/* y_s = A_s x_s for every system: x holds count x cols values, y count x rows (host arrays of
 * the batch's dtype). Blocking. */
int kd_batch_spmv(kd_ocl_t *ocl, const kd_batch_t *batch, const void *x, void *y, kd_err_t *err);

typedef enum kd_batch_method {
    KD_BATCH_CG = 0,
    KD_BATCH_BICGSTAB,
    KD_BATCH_GMRES, /* restarted GMRES(m), m = params.restart */
} kd_batch_method_t;

/* "cg", "bicgstab", "gmres"; -1 from the parse for any other name. */
int kd_batch_method_parse(const char *name, kd_batch_method_t *out);
const char *kd_batch_method_name(kd_batch_method_t method);

typedef struct kd_batch_params {
    kd_batch_method_t method;
    int jacobi;             /* 1: diagonal preconditioner, 0: none */
    const double *rtol;     /* count values: stop when ||r_s|| <= max(rtol_s ||b_s||, atol_s) */
    const double *atol;     /* count values */
    const int64_t *maxiter; /* count values, each >= 0 */
    int record_history;     /* results[s].history: r'r's norm after every iteration */
    int64_t chunk;          /* iterations per launch; 0 = KD_BATCH_CHUNK */
    int force_global;       /* tests: the vectors in global memory even where local fits */
    int64_t restart;        /* gmres: m, 1..KD_SOLVE_RESTART_MAX; 0 = KD_SOLVE_RESTART_DEFAULT */
} kd_batch_params_t;

#define KD_BATCH_CHUNK 512
/* Rounds of restarts from the true residual (a recurrence that claimed convergence b - A x did
 * not confirm) before such a system is reported as max_iterations. */
#define KD_BATCH_RESTARTS 4
/* record_history holds count x (max maxiter + 1) values on the device: at most this many. */
#define KD_BATCH_HISTORY_MAX ((int64_t)1 << 24)

typedef struct kd_batch_result {
    kd_solve_status_t status;
    int64_t iterations;
    double residual_norm;     /* ||b_s - A_s x_s|| on the device at the end */
    double relative_residual; /* over ||b_s||; 0 when b_s = 0 */
    double b_norm;
    double *history; /* malloc'd with record_history: ||r|| by the recurrence at 0..iterations */
    int64_t history_len;
    int64_t restarts;  /* times the recurrence's convergence was not confirmed by b - A x and
                          the system went on from the true residual */
    char message[160]; /* breakdown / non_finite: what and where */
} kd_batch_result_t;

/* What a batched solve did as a whole. */
typedef struct kd_batch_report {
    int local;        /* the vectors lived in local memory */
    int64_t launches; /* solve launches (chunks) */
    double time_ms;   /* the whole call, transfers included */
} kd_batch_report_t;

/*
 * Solve A_s x_s = b_s for every system: b, x0 (NULL: zero) and x hold count x rows values of
 * the batch's dtype (system s at s * rows). results: count entries, filled in every case (free
 * each history with kd_batch_result_free). A system with b_s = 0 gets x_s = 0, converged, 0
 * iterations; one with a non-finite value in its matrix, b_s or x0_s gets non_finite and x_s =
 * x0_s without iterating; with Jacobi, one whose diagonal has a zero, missing or non-finite
 * entry (or, for cg, a negative one) gets breakdown without iterating. Returns KD_OK (statuses
 * are results), KD_EBADREQ (not square, bad parameters: the message names the system),
 * KD_ETOOLARGE, KD_EDEVMEM, KD_EDEVICE. report may be NULL.
 */
int kd_batch_solve(kd_ocl_t *ocl, const kd_batch_t *batch, const void *b, const void *x0, void *x,
                   const kd_batch_params_t *params, kd_batch_result_t *results,
                   kd_batch_report_t *report, kd_err_t *err);

void kd_batch_result_free(kd_batch_result_t *result); /* accepts a zeroed result */

#endif
