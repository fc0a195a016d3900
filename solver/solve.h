/*
 * Solving A X = B on a resident matrix with a Krylov method (solver/methods/method.h: cg, sd, ...)
 * and a preconditioner (solver/precond/precond.h: none, jacobi, ...), several right-hand sides in
 * lock step. Vectors stay on the device; the host reads back one small block per convergence check.
 * The residual reported at the end is recomputed as ||b - A x||.
 */
#ifndef KD_SOLVER_SOLVE_H
#define KD_SOLVER_SOLVE_H

#include "solver/matrix.h"

#include <stdatomic.h>

struct kd_method_ops;
struct kd_precond_ops;
struct kd_comm;

typedef enum kd_solve_status {
    KD_SOLVE_CONVERGED = 0,
    KD_SOLVE_MAX_ITERATIONS,
    KD_SOLVE_BREAKDOWN,  /* p'Ap <= 0 or a zero step: the matrix is not SPD */
    KD_SOLVE_NON_FINITE, /* NaN or Inf in b, x0, the matrix, or during iteration */
    KD_SOLVE_STAGNATED,  /* the residual stopped improving short of the tolerance (see below) */
} kd_solve_status_t;

/*
 * Stagnation: the recurrence claimed convergence and b - A x refuted it (the iterates cannot get
 * nearer in the dtype: float32 CG on a 16k-row Laplacian stalls at ||r|| / ||b|| ~ 1e-4), and
 * since the best true residual of such a refutation the next KD_SOLVE_STAGNATION_MISSES did not
 * shrink its distance to the tolerance (||r|| - tol) by the factor KD_SOLVE_STAGNATION_GAIN. A
 * solve still converging slowly never claims convergence early, so it never stagnates.
 */
#define KD_SOLVE_STAGNATION_MISSES 3
#define KD_SOLVE_STAGNATION_GAIN 0.8

/* "converged", "max_iterations", "breakdown", "non_finite", "stagnated" */
const char *kd_solve_status_name(kd_solve_status_t status);

/* Called once per convergence check from the solving thread, the first at iteration 0, with the
 * right-hand side furthest from its tolerance (largest ||r|| / tol) among those still running at
 * that check: its column `rhs` (0-based), its iteration count and ||r||. Return nonzero to stop
 * the solve (it then ends with KD_ECANCELLED). */
typedef int (*kd_solve_progress_fn)(void *ctx, int64_t rhs, int64_t iteration,
                                    double residual_norm);

/*
 * A matrix spread over ranks (dist/ fills this; docs/ARCHITECTURE.md, "Distributed matrices"):
 * kd_solve's A is this rank's diagonal block, its b, x0 and x this rank's rows, and every rank
 * calls kd_solve together. The driver is the single-process one; what differs goes through here:
 * the SpMV (the halo exchange and both blocks), the reductions (comm), the whole matrix's size
 * for the defaults that depend on it, and ||b||, which only the whole b has. Only methods whose
 * reductions are all krylov.c's passes (kd_method_ops_t.spreads) and preconditioners of
 * identity or diagonal form (Jacobi's 1/a_ii is local to a row) run spread; the SpMV is never
 * fused and the small-system path never taken.
 */
typedef struct kd_solve_spread {
    struct kd_comm *comm;
    int64_t rows, nnz;     /* the whole matrix's */
    const double *b_norms; /* nrhs: the whole ||b_j||, each finite and > 0: the caller answers
                              the columns with b = 0 or NaN/Inf in b or x0 itself, on every
                              rank alike */
    /* y = alpha A x + beta y on this rank's rows, for the columns with which[c] (NULL: all):
     * x and y are k columns of this rank's rows. Collective: every rank calls it with the same
     * columns. */
    int (*spmm)(void *ctx, kd_ocl_t *ocl, double alpha, const kd_multivec_t *x, double beta,
                kd_multivec_t *y, const unsigned char *which, kd_err_t *err);
    void *ctx;
} kd_solve_spread_t;

typedef struct kd_solve_params {
    const struct kd_method_ops *method;   /* a row of kd_method_table */
    const struct kd_precond_ops *precond; /* a row of kd_precond_table (kd_precond_none) */
    double rtol;                          /* stop when ||r|| <= rtol * ||b|| */
    double atol;                          /* or when ||r|| <= atol */
    int64_t maxiter;     /* or after this many iterations (never more), per right-hand side;
                            KD_SOLVE_MAXITER_AUTO: KD_SOLVE_MAXITER_PER_ROW * rows */
    int64_t check_every; /* iterations between convergence checks; 0 = choose from the size
                            (see docs/ARCHITECTURE.md) */
    int record_history;  /* fill result.history with the residual norm at each check */
    kd_solve_progress_fn progress; /* may be NULL */
    void *progress_ctx;
    const atomic_int *cancel; /* may be NULL; nonzero stops the solve with KD_ECANCELLED */
    uint64_t deadline_ns;     /* CLOCK_MONOTONIC; 0 = none; passing it stops with KD_ETIMEOUT */
    int64_t reduction_groups; /* tuning (benchmarks): work-groups per right-hand side in the
                                 vector kernels' reductions; 0 = automatic */
    int passes;      /* tuning (benchmarks): vector passes per CG iteration, 2 or 3, or 1 for two
                        lean ones (see solver/methods/cg.c); 0 = automatic (2) */
    int spmv_fusion; /* tuning (benchmarks, tests): for a csr_scalar matrix, KD_SOLVE_FUSION_ON
                        runs the SpMV inside the method's first vector pass (kd_krylov_dots3 with
                        the matrix), KD_SOLVE_FUSION_OFF apart; 0 = automatic: fused on GPUs,
                        apart on CPUs (measured both ways: docs/BENCHMARKS.md) */
    const struct kd_precond_options *precond_options; /* for the preconditioner's setup, or
                                                         NULL: its defaults */
    const kd_csr_t *csr; /* A's canonical host CSR in the client's order, for a preconditioner
                            whose setup needs it (amg) and has not run on A yet; may be NULL */
    kd_matrix_t *precond_matrix; /* NULL: the preconditioner is A's. Else the matrix whose held
                                    setup (of `precond` with `precond_options`) is applied as it
                                    is: one of A's pattern, order and dtype with other values
                                    (PETSc's reuse of a preconditioner across a Newton loop) */
    const char *kernel_options;  /* tuning (benchmarks): extra build options for the Krylov
                                    kernels on a new device ("-cl-nv-maxrregcount=32"), or NULL */
    int64_t restart; /* gmres: the Krylov basis size m of GMRES(m), 1..KD_SOLVE_RESTART_MAX;
                        0 = KD_SOLVE_RESTART_DEFAULT; other methods ignore it */
    int time_phases; /* benchmarks: drain the device between the phases of result.anatomy */
    void (*yield)(void *ctx); /* may be NULL: called after each check's read-back, when the
                                 device has the next chunk of iterations queued; the server
                                 serves short requests there (server/handlers/spmv.c) */
    void *yield_ctx;
    int small; /* tuning (benchmarks, tests): cg / pcg on a matrix whose format keeps CSR
                  arrays, KD_SOLVE_SMALL_ON runs many iterations per launch in one
                  work-group per right-hand side (kernels/methods/cg_small.cl), KD_SOLVE_SMALL_OFF
                  never; 0 = automatic: on GPUs for at most KD_SOLVE_SMALL_ROWS rows,
                  unless spmv_fusion is KD_SOLVE_FUSION_ON */
    const kd_solve_spread_t *spread; /* NULL: A is the whole matrix (see kd_solve_spread_t) */
} kd_solve_params_t;

#define KD_SOLVE_SMALL_ON 1
#define KD_SOLVE_SMALL_OFF (-1)
#define KD_SOLVE_SMALL_GLOBAL 2  /* on, the variant with the vectors in global memory (tests) */
#define KD_SOLVE_SMALL_ROWS 4096 /* the automatic choice's limit (docs/BENCHMARKS.md) */
#define KD_SOLVE_SMALL_CHECK 128 /* iterations per launch (and check) on that path */

#define KD_SOLVE_RESTART_DEFAULT 30
#define KD_SOLVE_RESTART_MAX 200

#define KD_SOLVE_MAXITER_AUTO (-1)
#define KD_SOLVE_MAXITER_PER_ROW 10 /* the one default: maxiter = 10 * rows */
#define KD_SOLVE_FUSION_ON 1
#define KD_SOLVE_FUSION_OFF (-1)

/* Defaults: cg, no preconditioner, rtol 1e-8, atol 0, maxiter KD_SOLVE_MAXITER_AUTO, check_every
 * 0 (automatic), no history, no callback, no cancel flag, no deadline. */
void kd_solve_params_default(kd_solve_params_t *params);

/* Where a solve's time went (kd_solve_result_t.anatomy), host wall clock in milliseconds, phase by
 * phase; with params.time_phases the device is drained at each boundary, so enqueued work counts
 * where it was enqueued (benchmarks), else it counts where the host next waited. */
typedef struct kd_solve_anatomy {
    double setup_ms;    /* parameter checks, the preconditioner's set-up on first use */
    double host_ms;     /* b's (and x0's) scans on the host: finite values, norms */
    double alloc_ms;    /* device vectors and the columns' state */
    double upload_ms;   /* b and x0 to the device */
    double start_ms;    /* r = b - A x0 and the method's set-up */
    double iterate_ms;  /* the iterations and their checks */
    double final_ms;    /* the true residual b - A x at the end */
    double download_ms; /* x back to the host */
    int64_t checks;     /* state reads during the iterations */
} kd_solve_anatomy_t;

typedef struct kd_solve_result {
    kd_solve_status_t status;
    int64_t iterations;       /* updates of x performed */
    int64_t maxiter;          /* the limit it ran under (KD_SOLVE_MAXITER_AUTO resolved) */
    double residual_norm;     /* ||b - A x||, recomputed at the end */
    double relative_residual; /* residual_norm / ||b||; 0 when b = 0 */
    double b_norm;
    double *history; /* malloc'd when record_history, else NULL: ||r|| at each check while this
                        right-hand side ran (but for the few whose state predates a restart),
                        the first at iteration 0 (the recurrence's r,
                        replaced by ||b - A x|| when the recurrence
                        claims convergence) */
    int64_t history_len;
    int64_t restarts;           /* times the recurrence's convergence was not confirmed by
                                   b - A x and the iteration went on from the true residual */
    double time_ms;             /* the whole solve (all right-hand sides), transfers included */
    double iterate_ms;          /* of which the iterations: from the first check to the last */
    int spmv_fused;             /* the SpMV ran fused with the method's first vector pass */
    int chunked;                /* many iterations ran per launch (cg's small-system path) */
    kd_solve_anatomy_t anatomy; /* the whole solve's (the same in every column's result) */
    double reductions_per_iteration; /* the method's kd_krylov_reduce calls per iteration run */
    char message[256]; /* for breakdown / non_finite / stagnated: what happened, where */
} kd_solve_result_t;

/*
 * Solve A X = B for a square matrix and nrhs >= 1 right-hand sides at once: B, X0 (NULL: zero)
 * and X are host arrays of nrhs * A->rows values of the matrix's dtype, column-major (column j
 * at j * rows; they may be unaligned). The columns run in lock step on the device, sharing every
 * launch except the SpMV, each with its own scalars, convergence test, status and iteration
 * count, and each frozen once it is done. results has nrhs entries, filled in every case (free
 * each with kd_solve_result_free).
 *
 * The preconditioner is set up on A on first use and kept with it (A->device_bytes grows).
 *
 * Returns KD_OK with each result's status set (breakdown and non-finite are results, not
 * errors), or KD_ECANCELLED, KD_ETIMEOUT (seen at a check, after the iterations already handed to
 * the device, at most two check intervals; X holds the last iterates and the results their
 * state, status max_iterations for the columns that were still running), KD_EBADREQ (not square,
 * bad parameters, a method that cannot take the preconditioner, Jacobi with a zero, missing or
 * non-finite diagonal entry: the message names the row), KD_ENOTSPD (Jacobi with a negative
 * diagonal entry), KD_EDEVMEM, KD_EDEVICE. A column with b = 0 gets x = 0, converged, 0
 * iterations; one with NaN or Inf in b or x0, or any column of a matrix holding NaN or Inf, gets
 * non_finite and x = x0, without iterating.
 */
int kd_solve(kd_ocl_t *ocl, kd_matrix_t *A, int64_t nrhs, const void *b, const void *x0, void *x,
             const kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err);

void kd_solve_result_free(kd_solve_result_t *result); /* frees history; accepts a zeroed result */

#endif
