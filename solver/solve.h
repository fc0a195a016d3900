/*
 * Iterative solvers on a resident matrix: conjugate gradient and steepest descent (as derived in
 * Shewchuk's "An Introduction to the Conjugate Gradient Method Without the Agonizing Pain"), and
 * Jacobi-preconditioned CG. Vectors stay on the device; the host reads back one small value per
 * convergence check. The residual reported at the end is recomputed as ||b - A x||.
 */
#ifndef KD_SOLVER_SOLVE_H
#define KD_SOLVER_SOLVE_H

#include "solver/matrix.h"

#include <stdatomic.h>

typedef enum kd_solve_method {
    KD_SOLVE_CG = 0,
    KD_SOLVE_SD = 1,
    KD_SOLVE_PCG = 2,
} kd_solve_method_t;

typedef enum kd_solve_status {
    KD_SOLVE_CONVERGED = 0,
    KD_SOLVE_MAX_ITERATIONS,
    KD_SOLVE_BREAKDOWN,  /* p'Ap <= 0 or a zero step: the matrix is not SPD */
    KD_SOLVE_NON_FINITE, /* NaN or Inf in b, x0, the matrix, or during iteration */
} kd_solve_status_t;

/* "converged", "max_iterations", "breakdown", "non_finite" */
const char *kd_solve_status_name(kd_solve_status_t status);

/* Called at each convergence check from the solving thread; return nonzero to stop the solve
 * (it then ends with KD_ECANCELLED). */
typedef int (*kd_solve_progress_fn)(void *ctx, int64_t iteration, double residual_norm);

typedef struct kd_solve_params {
    kd_solve_method_t method;
    double rtol;         /* stop when ||r|| <= rtol * ||b|| */
    double atol;         /* or when ||r|| <= atol */
    int64_t maxiter;     /* or after this many iterations (never more); KD_SOLVE_MAXITER_AUTO:
                            10 * rows */
    int64_t check_every; /* iterations between convergence checks; 0 = choose from the size
                            (see docs/ARCHITECTURE.md) */
    int record_history;  /* fill result.history with the residual norm at each check */
    kd_solve_progress_fn progress; /* may be NULL */
    void *progress_ctx;
    const atomic_int *cancel; /* may be NULL; nonzero stops the solve with KD_ECANCELLED */
    uint64_t deadline_ns;     /* CLOCK_MONOTONIC; 0 = none; passing it stops with KD_ETIMEOUT */
} kd_solve_params_t;

#define KD_SOLVE_MAXITER_AUTO (-1)

/* Defaults: cg, rtol 1e-8, atol 0, maxiter KD_SOLVE_MAXITER_AUTO (10 * rows), check_every 0
 * (automatic), no history, no callback, no cancel flag, no deadline. */
void kd_solve_params_default(kd_solve_params_t *params);

typedef struct kd_solve_result {
    kd_solve_status_t status;
    int64_t iterations;       /* updates of x performed */
    double residual_norm;     /* ||b - A x||, recomputed at the end */
    double relative_residual; /* residual_norm / ||b||; 0 when b = 0 */
    double b_norm;
    double *history; /* malloc'd when record_history, else NULL: ||r|| at each check,
                        the first at iteration 0 (the recurrence's r, recomputed from
                        b - A x every 50 iterations) */
    int64_t history_len;
    int64_t restarts; /* times the recurrence's convergence was not confirmed by
                         b - A x and the iteration went on from the true residual */
    double time_ms;
    char message[256]; /* for breakdown / non_finite: what happened, where */
} kd_solve_result_t;

/*
 * Solve A x = b for a square matrix. b, x0 (NULL: zero) and x are host arrays of A->rows values of
 * the matrix's dtype (they may be unaligned). Returns KD_OK with result->status set (breakdown and
 * non-finite are results, not errors), or KD_ECANCELLED, KD_ETIMEOUT, KD_EBADREQ (not square, bad
 * parameters), KD_EUNSUPPORTED (KD_SOLVE_PCG, not implemented yet), KD_EDEVMEM, KD_EDEVICE.
 * x holds the last iterate also when the solve was stopped, and result is filled then too (status
 * max_iterations, the iterations done, the history so far, the recomputed residual; the
 * caller frees it with kd_solve_result_free in every case). b = 0 gives x = 0, converged, 0
 * iterations, without touching the device.
 */
int kd_solve(kd_ocl_t *ocl, const kd_matrix_t *A, const void *b, const void *x0, void *x,
             const kd_solve_params_t *params, kd_solve_result_t *result, kd_err_t *err);

void kd_solve_result_free(kd_solve_result_t *result); /* frees history; accepts a zeroed result */

#endif
