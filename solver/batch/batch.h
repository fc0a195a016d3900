/*
 * Batched matrices and batched solves: k small systems solved all at once, one work-group per
 * system (kernels/batch/batch.cl). Either k systems that share one sparsity pattern (the power-flow
 * or chemistry case: one structure, many value sets), held on the device as one CSR pattern and k x
 * nnz values, or k square systems of their own patterns and sizes, their CSR arrays back to back
 * (solve.batch: many resident matrices in one request). A table on the device says where each
 * system's rows, pattern and values are (kernels/batch/batch_abi.h, KD_BATCH_SYS_*). Each system
 * iterates, stops and reports on its own: one that breaks down or meets a non-finite value
 * leaves the others untouched.
 *
 * solver/batch/batch.c holds the matrix (upload, scan, SpMV); solver/batch/solve.c the solve;
 * solver/batch/items.c sorts systems of different sizes into launches and solves each group.
 */
#ifndef KD_SOLVER_BATCH_H
#define KD_SOLVER_BATCH_H

#include "common/checked.h"
#include "common/csr.h"
#include "solver/matrix.h"
#include "solver/runtime/ocl.h"
#include "solver/solve.h"

typedef struct kd_batch {
    int64_t count; /* k systems */
    /* One pattern: one system's shape. Systems of their own: rows = cols = the largest system's
     * rows, nnz all systems' entries. */
    int64_t rows, cols, nnz;
    kd_dtype_t dtype;
    int shared;             /* 1: one pattern (kd_batch_upload); 0: kd_batch_upload_systems */
    int64_t *row_start;     /* count + 1: system s's rows are row_start[s] .. row_start[s + 1] - 1
                               of every vector of rows (b, x) */
    int64_t *col_start;     /* count + 1: the same for the columns (an SpMV's x) */
    cl_mem systems;         /* count x KD_BATCH_SYS int64: where each system is */
    cl_mem indptr, indices; /* the pattern(s) (int32); NULL when nnz = 0 (indices) */
    cl_mem values;          /* one pattern: count x nnz, system s at s * nnz; NULL when empty */
    cl_mem inv_diagonal;    /* square: 1 / a_ii of every row of every system (0 where not usable),
                               at the systems' rows; else NULL */
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

/* The largest system kd_batch_upload_systems takes: one work-group iterates a system, so a
 * larger one belongs to a solve of its own. */
#define KD_BATCH_SYSTEM_ROWS_MAX ((int64_t)1 << 16)

/* The device bytes kd_batch_upload_systems needs for systems of `rows` rows and `nnz` entries
 * in all, `count` of them (SIZE_MAX on overflow). */
size_t kd_batch_systems_plan_bytes(int64_t count, int64_t rows, int64_t nnz, kd_dtype_t dtype);

/*
 * Upload `count` >= 1 square systems of their own patterns (csrs[s]; one dtype, 1 ..
 * KD_BATCH_SYSTEM_ROWS_MAX rows each) as one batch: their CSR arrays back to back, the systems
 * table saying where each is, scanned as kd_batch_upload does. KD_EBADREQ (not square, empty,
 * too large, mixed dtypes: the message names the system), KD_ETOOLARGE, KD_EDEVMEM.
 */
int kd_batch_upload_systems(kd_ocl_t *ocl, const kd_csr_t *const *csrs, int64_t count,
                            kd_batch_t **out, kd_err_t *err);

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

/* y_s = A_s x_s for every system: x holds col_start[count] values, y row_start[count] (host
 * arrays of the batch's dtype, system s at its start). Blocking. */
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
    int jacobi;               /* 1: diagonal preconditioner, 0: none */
    const double *rtol;       /* count values: stop when ||r_s|| <= max(rtol_s ||b_s||, atol_s) */
    const double *atol;       /* count values */
    const int64_t *maxiter;   /* count values, each >= 0 */
    int record_history;       /* results[s].history: r'r's norm after every iteration */
    int64_t chunk;            /* iterations per launch; 0 = KD_BATCH_CHUNK */
    int force_global;         /* tests: the vectors in global memory even where local fits */
    int64_t restart;          /* gmres: m, 1..KD_SOLVE_RESTART_MAX; 0 = KD_SOLVE_RESTART_DEFAULT */
    const int64_t *labels;    /* count values: the number a system's messages call it (NULL: s) */
    const atomic_int *cancel; /* may be NULL; nonzero stops the solve between launches with that
                                 code (KD_ECANCELLED) */
    uint64_t deadline_ns;     /* CLOCK_MONOTONIC; 0 = none; checked between launches: KD_ETIMEOUT */
} kd_batch_params_t;

#define KD_BATCH_CHUNK 512
/* Rounds of restarts from the true residual (a recurrence that claimed convergence b - A x did
 * not confirm) before such a system is reported as stagnated. */
#define KD_BATCH_RESTARTS 4
/* record_history holds count x (max maxiter + 1) values on the device: at most this many. */
#define KD_BATCH_HISTORY_MAX ((int64_t)1 << 24)

/* The values the history of k systems to at most `limit` iterations holds, k x (limit + 1), or
 * -1 when that overflows or passes KD_BATCH_HISTORY_MAX (the solve refuses it). */
static inline int64_t kd_batch_history_cells(int64_t k, int64_t limit)
{
    int64_t cells;
    if (k < 0 || limit < 0 || limit == INT64_MAX || kd_mul_overflow_i64(k, limit + 1, &cells) ||
        cells > KD_BATCH_HISTORY_MAX)
        return -1;
    return cells;
}

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
 * Solve A_s x_s = b_s for every system: b, x0 (NULL: zero) and x hold row_start[count] values of
 * the batch's dtype (system s at row_start[s]). results: count entries, filled in every case (free
 * each history with kd_batch_result_free). A system with b_s = 0 gets x_s = 0, converged, 0
 * iterations; one with a non-finite value in its matrix, b_s or x0_s gets non_finite and x_s =
 * x0_s without iterating; with Jacobi, one whose diagonal has a zero, missing or non-finite
 * entry (or, for cg, a negative one) gets breakdown without iterating. Returns KD_OK (statuses
 * are results), KD_EBADREQ (not square, bad parameters: the message names the system),
 * KD_ETOOLARGE, KD_EDEVMEM, KD_EDEVICE, KD_ECANCELLED / KD_ETIMEOUT (params' cancel flag and
 * deadline, between launches). report may be NULL.
 */
int kd_batch_solve(kd_ocl_t *ocl, const kd_batch_t *batch, const void *b, const void *x0, void *x,
                   const kd_batch_params_t *params, kd_batch_result_t *results,
                   kd_batch_report_t *report, kd_err_t *err);

void kd_batch_result_free(kd_batch_result_t *result); /* accepts a zeroed result */

/* Work vectors per system of a method (restart: gmres's m, 0 = the default). */
int64_t kd_batch_method_vectors(kd_batch_method_t method, int64_t restart);

/* The share of the device's local memory a work-group needs to keep x and `vectors` work
 * vectors of a system of `rows` rows there (and the sums' scratch): over 1, they do not fit. */
double kd_batch_local_share(kd_ocl_t *ocl, int64_t rows, kd_dtype_t dtype, int64_t vectors);
/* 1 when they fit: kd_batch_local_share <= 1. */
int kd_batch_local_fits(kd_ocl_t *ocl, int64_t rows, kd_dtype_t dtype, int64_t vectors);

/* One system of a solve of systems of their own patterns (kd_batch_solve_items). */
typedef struct kd_batch_item {
    const kd_csr_t *A; /* square, 1..KD_BATCH_SYSTEM_ROWS_MAX rows */
    const void *b;     /* A->rows values of A's dtype */
    const void *x0;    /* the same, or NULL: zero */
    void *x;           /* out: A->rows values of A's dtype */
    double rtol, atol;
    int64_t maxiter; /* >= 0 */
    int64_t label;   /* the number its messages call it */
} kd_batch_item_t;

/* Where a solve of items went. */
typedef struct kd_batch_items_report {
    int64_t groups;       /* batches uploaded and solved, one after another */
    int64_t local_groups; /* of those, with the vectors in local memory */
    int64_t launches;     /* solve launches in all */
    double time_ms;       /* the whole call */
} kd_batch_items_report_t;

/* Local-memory classes (kd_batch_solve_items): the systems that need up to 1 / 2^KD_BATCH_CLASSES
 * of the local memory share a launch, then those up to twice that, and so on up to all of it. */
#define KD_BATCH_CLASSES 3

/*
 * Solve `count` >= 1 systems of their own patterns and sizes in as few groups as the device's
 * local memory allows, each group one kd_batch_upload_systems and one kd_batch_solve (a few
 * launches of every system of the group). A launch gives every work-group the local memory of
 * its largest system, so items of one dtype whose vectors fit local memory are grouped by the
 * share of it they need (KD_BATCH_CLASSES: up to an eighth, a quarter, a half, all of it); the
 * items that do not fit make one global-memory group per dtype. params: method, jacobi,
 * record_history, chunk, force_global, restart, cancel and deadline (its rtol, atol, maxiter and
 * labels are ignored: each item has its own). results: count entries, filled as kd_batch_solve
 * fills them (free each with kd_batch_result_free, also after an error). Errors as
 * kd_batch_solve's; KD_EBADREQ names the item by its label.
 */
int kd_batch_solve_items(kd_ocl_t *ocl, const kd_batch_item_t *items, int64_t count,
                         const kd_batch_params_t *params, kd_batch_result_t *results,
                         kd_batch_items_report_t *report, kd_err_t *err);

#endif
