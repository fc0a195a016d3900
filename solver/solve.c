/*
 * Conjugate gradient, Jacobi-preconditioned CG and steepest descent on a resident matrix, for
 * several right-hand sides at once (see solve.h). With z = M^-1 r (M = diag(A) for PCG, M = I
 * for CG), following Shewchuk's "An Introduction to the Conjugate Gradient Method Without the
 * Agonizing Pain":
 *
 *   CG / PCG:  r = b - A x, d = z, delta = r'z
 *              loop: q = A d, alpha = delta / d'q, r -= alpha q,
 *                    delta_new = r'z, beta = delta_new / delta, x += alpha d, d = z + beta d
 *   SD:        r = b - A x; loop: q = A r, alpha = r'r / r'q, x += alpha r, r -= alpha q
 *
 * Each column's convergence test is ||r|| = sqrt(r'r) <= max(rtol ||b||, atol), on the true
 * (unpreconditioned) residual, as SciPy's cg does. There is no periodic r = b - A x "refresh"
 * (Shewchuk's every-50-iterations advice): replacing r while keeping d perturbs the Krylov
 * recurrence, and on the ill-conditioned 494_bus it cost 21% more iterations than SciPy; the
 * confirmation below catches a drifted recurrence instead.
 *
 * The host checks b, x0 and the matrix for NaN/Inf and computes ||b|| in double before anything
 * reaches the device; columns with b = 0 or non-finite input are answered there. The others are
 * packed into k device columns and iterated in lock step: per iteration one SpMV per column from
 * the matrix's format and three fused launches for all columns (solver/krylov.h), nothing
 * waiting. Every `check_every` iterations the host reads the device state back (one blocking
 * read): convergence, breakdown and non-finite values are detected by the device at the exact
 * iteration they happen, per column, and the device freezes that column from then on, so the
 * iterations between two checks never change its answer or its iteration count.
 *
 * Convergence of the recurrence is confirmed before it is believed: r = b - A x is recomputed for
 * the columns that claim it, and one that misses the tolerance (the recurrence drifts in float32
 * on ill-conditioned systems) goes on from the true residual with d = z, its frozen iterations not
 * counted. So "converged" means the true residual met the tolerance in the device's arithmetic.
 * At the end r = b - A x is recomputed once more for every column and its norm reported.
 */
#include "solver/solve.h"
#include "solver/format.h"
#include "solver/krylov.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *kd_solve_status_name(kd_solve_status_t status)
{
    switch (status) {
    case KD_SOLVE_CONVERGED:
        return "converged";
    case KD_SOLVE_MAX_ITERATIONS:
        return "max_iterations";
    case KD_SOLVE_BREAKDOWN:
        return "breakdown";
    case KD_SOLVE_NON_FINITE:
        return "non_finite";
    }
    return "unknown";
}

void kd_solve_params_default(kd_solve_params_t *params)
{
    memset(params, 0, sizeof(*params));
    params->method = KD_SOLVE_CG;
    params->rtol = 1e-8;
    params->atol = 0.0;
    params->maxiter = KD_SOLVE_MAXITER_AUTO;
    params->check_every = 0;
}

void kd_solve_result_free(kd_solve_result_t *result)
{
    if (result == NULL)
        return;
    free(result->history);
    result->history = NULL;
    result->history_len = 0;
}

static uint64_t kd_solve_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * Iterations between checks when the caller leaves it to us. A check costs the device one tiny
 * kernel (the state is packed and read on a second queue while the iterations go on) and the host
 * one wake-up; the host runs at most two chunks behind, so after convergence up to two chunks of
 * frozen iterations (only the SpMV of a frozen right-hand side runs) are wasted. Large systems
 * check every 4 iterations, smaller ones, where an iteration is a few launches and little else,
 * every 8 or 16.
 */
static int64_t kd_solve_auto_check_every(const kd_matrix_t *A, int64_t k)
{
    double work = ((double)A->nnz + 10.0 * (double)A->rows) * (double)k;
    if (work >= 1048576.0)
        return 4;
    if (work >= 65536.0)
        return 8;
    return 16;
}

/* Scan a host array for NaN/Inf; returns the first bad index or -1. */
static int64_t kd_solve_first_non_finite(const void *v, kd_dtype_t t, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(kd_load_real(v, t, (size_t)i)))
            return i;
    return -1;
}

/* ||v|| in double, scaled by max |v_i| so that huge finite values cannot overflow. */
static double kd_solve_norm(const void *v, kd_dtype_t t, int64_t n)
{
    double vmax = 0.0, ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        vmax = fmax(vmax, fabs(kd_load_real(v, t, (size_t)i)));
    for (int64_t i = 0; i < n && vmax > 0.0; i++) {
        double vi = kd_load_real(v, t, (size_t)i) / vmax;
        ss += vi * vi;
    }
    return vmax * sqrt(ss);
}

static int kd_solve_history_push(kd_solve_result_t *result, int64_t *cap, double value)
{
    if (result->history_len == *cap) {
        int64_t grown_cap = *cap ? *cap * 2 : 64;
        double *grown = realloc(result->history, (size_t)grown_cap * sizeof(double));
        if (grown == NULL)
            return KD_ENOMEM;
        result->history = grown;
        *cap = grown_cap;
    }
    result->history[result->history_len++] = value;
    return KD_OK;
}

/* The value a VALUE-typed kernel argument will see (float rounding for float32). */
static double kd_solve_as_value(kd_dtype_t dtype, double v)
{
    return dtype == KD_DTYPE_F32 ? (double)(float)v : v;
}

/* Host bookkeeping of one device column. */
typedef struct kd_solve_column {
    int64_t rhs;          /* the caller's column */
    double tol;           /* on ||r|| */
    double threshold;     /* tol^2 in the dtype: the device's bound on r'r */
    int done;             /* finished: its result is final, the device has it frozen */
    int64_t skip;         /* frozen iterations not counted (a convergence confirmed late failed) */
    int64_t converged_at; /* while confirming: the iteration the recurrence converged at */
    int64_t fresh_from;   /* snapshots of earlier iterations predate a restart: ignored */
    int64_t history_cap;
} kd_solve_column_t;

/* One solve's device side. */
typedef struct kd_solve_run {
    kd_ocl_t *ocl;
    const kd_matrix_t *A;
    int method; /* kd_krylov_method_t */
    int64_t k;  /* device columns */
    kd_krylov_t kr;
    kd_multivec_t b, x, r, q, d;
    cl_mem inv; /* PCG: the matrix's inverse diagonal on the device, for this solve */
    int fused;  /* csr_scalar: the SpMV and the first vector pass in one launch */
    const kd_format_csr_t *csr; /* the matrix's arrays when fused */
    kd_solve_column_t *cols;
    unsigned char *active; /* k: 1 while the column is not done (its SpMV runs) */
    unsigned char *seen;   /* k: the column ran up to the check being processed */
    int *mask;             /* k: scratch for masks */
    int64_t *iters;        /* k: each seen column's iteration count at the check */
    double *norms;         /* k */
    kd_krylov_column_t *state;
} kd_solve_run_t;

/* t = b - A x for the columns with which[c] (NULL: all). */
static int kd_solve_residual(kd_solve_run_t *run, kd_multivec_t *t, const unsigned char *which,
                             kd_err_t *err)
{
    int rc = kd_multivec_copy(run->ocl, &run->b, t, which, err);
    for (int64_t c = 0; rc == KD_OK && c < run->k; c++)
        if (which == NULL || which[c])
            rc = kd_matrix_spmv(run->ocl, run->A, -1.0, &run->x.cols[c], 1.0, &t->cols[c], err);
    return rc;
}

/* Enqueue iteration `it` (1-based) for every column; nothing waits. */
static int kd_solve_iterate(kd_solve_run_t *run, int64_t it, int flush, kd_err_t *err)
{
    const int sd = run->method == KD_KRYLOV_SD;
    kd_multivec_t *p = sd ? &run->r : &run->d;
    cl_mem inv = run->inv;
    int rc = KD_OK;
    if (run->fused) {
        rc = kd_krylov_iterate_csr(&run->kr, run->csr, &run->q, &run->r, &run->x,
                                   sd ? NULL : &run->d, inv, it, err);
    } else {
        for (int64_t c = 0; rc == KD_OK && c < run->k; c++)
            if (run->active[c])
                rc = kd_matrix_spmv(run->ocl, run->A, 1.0, &p->cols[c], 0.0, &run->q.cols[c], err);
        if (rc == KD_OK)
            rc = kd_krylov_iterate(&run->kr, &run->q, &run->r, &run->x, sd ? NULL : &run->d, inv,
                                   it, err);
    }
    /* Hand the work to the device every few iterations: some runtimes (NVIDIA's) hold enqueued
     * work back until a flush or a blocking call, and the device would idle while the host
     * enqueues the rest of a chunk. */
    if (rc == KD_OK && flush) {
        cl_int st = clFlush(kd_ocl_queue(run->ocl));
        if (st != CL_SUCCESS)
            rc = kd_ocl_fail(err, st, "clFlush");
    }
    return rc;
}

static void kd_solve_run_release(kd_solve_run_t *run)
{
    kd_krylov_release(&run->kr);
    kd_multivec_release(&run->b);
    kd_multivec_release(&run->x);
    kd_multivec_release(&run->r);
    kd_multivec_release(&run->q);
    kd_multivec_release(&run->d);
    if (run->inv != NULL)
        clReleaseMemObject(run->inv);
    free(run->cols);
    free(run->active);
    free(run->seen);
    free(run->mask);
    free(run->iters);
    free(run->norms);
    free(run->state);
}

static int kd_solve_check_params(const kd_matrix_t *A, int64_t nrhs, const kd_solve_params_t *p,
                                 kd_err_t *err)
{
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "solve needs a square matrix, not %lld x %lld",
                          (long long)A->rows, (long long)A->cols);
    if (nrhs < 1)
        return kd_err_set(err, KD_EBADREQ, "nrhs = %lld: at least one right-hand side",
                          (long long)nrhs);
    if (p->method != KD_SOLVE_CG && p->method != KD_SOLVE_SD && p->method != KD_SOLVE_PCG)
        return kd_err_set(err, KD_EBADREQ, "unknown solve method %d", (int)p->method);
    if (!(p->rtol >= 0.0) || !isfinite(p->rtol))
        return kd_err_set(err, KD_EBADREQ, "rtol = %g must be a finite number >= 0", p->rtol);
    if (!(p->atol >= 0.0) || !isfinite(p->atol))
        return kd_err_set(err, KD_EBADREQ, "atol = %g must be a finite number >= 0", p->atol);
    if (p->maxiter < 0 && p->maxiter != KD_SOLVE_MAXITER_AUTO)
        return kd_err_set(err, KD_EBADREQ, "maxiter = %lld is negative", (long long)p->maxiter);
    if (p->check_every < 0)
        return kd_err_set(err, KD_EBADREQ, "check_every = %lld is negative",
                          (long long)p->check_every);
    if (p->passes != 0 && p->passes != 2 && p->passes != 3 && p->passes != KD_KRYLOV_PASSES_LEAN)
        return kd_err_set(err, KD_EBADREQ, "passes = %d: 0 (automatic), 1, 2 or 3", p->passes);
    if (p->reduction_groups < 0)
        return kd_err_set(err, KD_EBADREQ, "reduction_groups = %lld is negative",
                          (long long)p->reduction_groups);
    if (p->method == KD_SOLVE_PCG && A->rows > 0) {
        const kd_matrix_scan_t *s = &A->scan;
        if (s->bad_diagonal_row >= 0)
            return kd_err_set(err, KD_EBADREQ,
                              "pcg: the diagonal entry of row %lld is %g (%s): Jacobi "
                              "preconditioning divides by every diagonal entry",
                              (long long)s->bad_diagonal_row, s->bad_diagonal_value,
                              isfinite(s->bad_diagonal_value) ? "zero or missing" : "not finite");
        if (s->negative_diagonal_row >= 0)
            return kd_err_set(err, KD_ENOTSPD,
                              "pcg: the diagonal entry of row %lld is %g < 0: the matrix is not "
                              "symmetric positive definite",
                              (long long)s->negative_diagonal_row, s->negative_diagonal_value);
        if (A->inv_diagonal == NULL)
            return kd_err_set(err, KD_EINTERNAL, "pcg: the matrix has no inverse diagonal");
    }
    return KD_OK;
}

/* Host-side answers that need no device: NaN/Inf in b or x0, b = 0, NaN/Inf in the matrix.
 * Returns 1 when column j is answered (x written), 0 when it needs the device. */
static int kd_solve_answer_on_host(const kd_matrix_t *A, const void *b, const void *x0, void *x,
                                   int record_history, kd_solve_result_t *res, int64_t *cap)
{
    const kd_dtype_t dtype = A->dtype;
    const int64_t n = A->rows;
    int64_t bad = kd_solve_first_non_finite(b, dtype, n);
    const char *bad_name = "b", *bad_what = "the right-hand side";
    const void *bad_array = b;
    if (bad < 0 && x0 != NULL) {
        bad = kd_solve_first_non_finite(x0, dtype, n);
        bad_name = "x0";
        bad_what = "the initial guess";
        bad_array = x0;
    }
    if (bad >= 0) {
        res->status = KD_SOLVE_NON_FINITE;
        snprintf(res->message, sizeof(res->message), "%s[%lld] = %g: %s holds NaN or Inf", bad_name,
                 (long long)bad, kd_load_real(bad_array, dtype, (size_t)bad), bad_what);
        res->b_norm = res->residual_norm = res->relative_residual = NAN;
    } else {
        res->b_norm = kd_solve_norm(b, dtype, n);
        if (res->b_norm == 0.0) {
            /* A x = 0: x = 0 exactly, whatever x0 was. */
            for (int64_t i = 0; i < n; i++)
                kd_store_real(x, dtype, (size_t)i, 0.0);
            res->status = KD_SOLVE_CONVERGED;
            if (record_history)
                (void)kd_solve_history_push(res, cap, 0.0);
            return 1;
        }
        if (A->scan.non_finite_row < 0)
            return 0;
        res->status = KD_SOLVE_NON_FINITE;
        snprintf(res->message, sizeof(res->message),
                 "the matrix holds %g at row %lld, column %lld: A is not finite",
                 A->scan.non_finite_value, (long long)A->scan.non_finite_row,
                 (long long)A->scan.non_finite_col);
        res->residual_norm = res->relative_residual = NAN;
    }
    for (int64_t i = 0; i < n; i++)
        kd_store_real(x, dtype, (size_t)i, x0 != NULL ? kd_load_real(x0, dtype, (size_t)i) : 0.0);
    return 1;
}

/* Turn a column's final device status into its result; returns 1 when it is final. */
static int kd_solve_read_status(const kd_solve_run_t *run, const kd_krylov_column_t *st,
                                const kd_solve_column_t *col, kd_solve_result_t *res)
{
    const char *pq_name = run->method == KD_KRYLOV_SD ? "r'Ar" : "p'Ap";
    const char *rz_name = run->method == KD_KRYLOV_PCG ? "r'z" : "r'r";
    const long long at = (long long)st->iteration;
    switch (st->status) {
    case KD_KRYLOV_BREAKDOWN:
        res->status = KD_SOLVE_BREAKDOWN;
        res->iterations = st->iteration - 1 - col->skip;
        snprintf(res->message, sizeof(res->message),
                 "%s = %.2g <= 0 at iteration %lld: the matrix is not symmetric positive definite",
                 pq_name, st->fail, at);
        return 1;
    case KD_KRYLOV_ZERO_STEP:
        res->status = KD_SOLVE_BREAKDOWN;
        res->iterations = st->iteration - 1 - col->skip;
        snprintf(res->message, sizeof(res->message),
                 "zero step at iteration %lld: alpha = %s / %s = %g / %g underflows to 0: the "
                 "matrix is not symmetric positive definite (or is scaled beyond the dtype)",
                 at, rz_name, pq_name, st->fail, st->pq);
        return 1;
    case KD_KRYLOV_NON_FINITE_PQ:
        res->status = KD_SOLVE_NON_FINITE;
        res->iterations = st->iteration - 1 - col->skip;
        snprintf(res->message, sizeof(res->message),
                 "%s = %g at iteration %lld: the iterates overflowed during iteration", pq_name,
                 st->fail, at);
        return 1;
    case KD_KRYLOV_NON_FINITE_ALPHA:
        res->status = KD_SOLVE_NON_FINITE;
        res->iterations = st->iteration - 1 - col->skip;
        snprintf(res->message, sizeof(res->message),
                 "step length alpha = %s / %s = %g at iteration %lld (%s = %g) overflows during "
                 "iteration",
                 rz_name, pq_name, st->fail, at, pq_name, st->pq);
        return 1;
    case KD_KRYLOV_NON_FINITE_RESIDUAL:
        res->status = KD_SOLVE_NON_FINITE;
        res->iterations = st->iteration - col->skip;
        if (st->iteration == 0)
            snprintf(res->message, sizeof(res->message),
                     "the initial residual b - A x0 is non-finite (r'r = %g) at iteration 0: "
                     "A x0 overflows",
                     st->fail);
        else
            snprintf(res->message, sizeof(res->message),
                     "the residual became non-finite during iteration (r'r = %g) at iteration "
                     "%lld",
                     st->fail, at);
        return 1;
    default:
        return 0;
    }
}

/*
 * Process the state after iteration `it` (in run->state): for each column still running, its
 * final status, or a convergence to confirm with ||b - A x||; a confirmation that fails restarts
 * the column from its true residual at `enq`, the last iteration enqueued. Then the history.
 * *running: columns not finished; *worst: the column furthest from its tolerance among those
 * that ran up to this check (-1 if none).
 */
static int kd_solve_check(kd_solve_run_t *run, const kd_solve_params_t *params,
                          kd_solve_result_t *results, int64_t maxiter, int64_t it, int64_t enq,
                          int *running, int64_t *worst, kd_err_t *err)
{
    const int64_t k = run->k;
    const int sd = run->method == KD_KRYLOV_SD;
    int confirm = 0, rc = KD_OK;
    for (int64_t c = 0; c < k; c++) {
        kd_solve_column_t *col = &run->cols[c];
        kd_solve_result_t *res = &results[col->rhs];
        const kd_krylov_column_t *st = &run->state[c];
        /* A snapshot read before the column's restart says nothing about it now. */
        run->seen[c] = !col->done && it >= col->fresh_from;
        run->mask[c] = 0;
        run->iters[c] = it - col->skip;
        run->norms[c] = sqrt(st->rr);
        if (!run->seen[c])
            continue;
        if (kd_solve_read_status(run, st, col, res)) {
            col->done = 1;
        } else if (st->status == KD_KRYLOV_CONVERGED) {
            col->converged_at = st->iteration;
            run->mask[c] = KD_KRYLOV_MASK_PARTIALS;
            confirm = 1;
        } else if (!isfinite(st->rr)) {
            /* Only reachable at iteration 0: later the device flags it itself. */
            res->status = KD_SOLVE_NON_FINITE;
            res->iterations = it - col->skip;
            snprintf(res->message, sizeof(res->message),
                     "the initial residual b - A x0 is non-finite (r'r = %g) at iteration %lld: "
                     "A x0 overflows",
                     st->rr, (long long)it);
            col->done = 1;
        } else if (st->rr <= col->threshold) {
            col->converged_at = it;
            run->mask[c] = KD_KRYLOV_MASK_PARTIALS;
            confirm = 1;
        } else if (st->status == KD_KRYLOV_STOPPED || it - col->skip >= maxiter) {
            res->status = KD_SOLVE_MAX_ITERATIONS;
            res->iterations = maxiter;
            col->done = 1;
        }
    }
    if (confirm) {
        /* The recurrence says converged: confirm with ||b - A x|| (in q, which the next SpMV
         * overwrites; x is frozen since the convergence). A miss goes on from the true residual
         * with d = z, from iteration `enq`. */
        unsigned char *which = run->active;
        double *truth = malloc((size_t)k * sizeof(double));
        if (truth == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory");
        for (int64_t c = 0; c < k; c++)
            which[c] = run->mask[c] != 0;
        rc = kd_solve_residual(run, &run->q, which, err);
        if (rc == KD_OK)
            rc = kd_krylov_norms(&run->kr, &run->q, run->mask, truth, err);
        int restart = 0;
        for (int64_t c = 0; rc == KD_OK && c < k; c++) {
            kd_solve_column_t *col = &run->cols[c];
            kd_solve_result_t *res = &results[col->rhs];
            if (!run->mask[c])
                continue;
            run->norms[c] = sqrt(truth[c]);
            res->iterations = col->converged_at - col->skip;
            run->iters[c] = res->iterations;
            if (truth[c] <= col->threshold) {
                res->status = KD_SOLVE_CONVERGED;
                col->done = 1;
                run->mask[c] = 0;
                continue;
            }
            res->restarts++;
            if (res->iterations >= maxiter) {
                res->status = KD_SOLVE_MAX_ITERATIONS;
                col->done = 1;
                run->mask[c] = 0;
                continue;
            }
            /* Frozen since converged_at, running again from enq: those iterations do not
             * count, and the column's limit moves by as many. */
            col->skip += enq - col->converged_at;
            col->fresh_from = enq + 1;
            rc = kd_krylov_set_limit(&run->kr, c, maxiter + col->skip, err);
            run->mask[c] = KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART |
                           (sd ? 0 : KD_KRYLOV_MASK_DIRECTION);
            restart = 1;
        }
        free(truth);
        if (rc == KD_OK && restart) {
            for (int64_t c = 0; c < k; c++)
                which[c] = run->mask[c] != 0;
            rc = kd_multivec_copy(run->ocl, &run->q, &run->r, which, err);
            if (rc == KD_OK)
                rc = kd_krylov_residual(&run->kr, &run->r, run->inv, sd ? NULL : &run->d, run->mask,
                                        0, enq, err);
        }
        if (rc != KD_OK)
            return rc;
    }
    *running = 0;
    *worst = -1;
    double worst_ratio = -1.0;
    for (int64_t c = 0; c < k; c++) {
        kd_solve_column_t *col = &run->cols[c];
        run->active[c] = !col->done;
        *running += !col->done;
        if (!run->seen[c])
            continue;
        if (params->record_history &&
            kd_solve_history_push(&results[col->rhs], &col->history_cap, run->norms[c]) != KD_OK)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for the residual history");
        double ratio = col->tol > 0.0 ? run->norms[c] / col->tol : run->norms[c];
        if (*worst < 0 || !(ratio <= worst_ratio)) {
            *worst = c;
            worst_ratio = ratio;
        }
    }
    return KD_OK;
}

int kd_solve(kd_ocl_t *ocl, const kd_matrix_t *A, int64_t nrhs, const void *b, const void *x0,
             void *x, const kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err)
{
    const uint64_t start_ns = kd_solve_now_ns();
    kd_solve_run_t run = {0};
    int64_t *caps = NULL;
    void *pack = NULL;
    int rc;

    if (nrhs > 0)
        memset(results, 0, (size_t)nrhs * sizeof(*results));
    if ((rc = kd_solve_check_params(A, nrhs, params, err)) != KD_OK)
        return rc;
    const kd_dtype_t dtype = A->dtype;
    const int64_t n = A->rows;
    const size_t vsize = kd_dtype_size(dtype);
    const size_t colbytes = (size_t)n * vsize;
    const int64_t maxiter = params->maxiter == KD_SOLVE_MAXITER_AUTO ? 10 * n : params->maxiter;

    run.ocl = ocl;
    run.A = A;
    run.method = params->method == KD_SOLVE_SD    ? KD_KRYLOV_SD
                 : params->method == KD_SOLVE_PCG ? KD_KRYLOV_PCG
                                                  : KD_KRYLOV_CG;
    if ((caps = calloc((size_t)nrhs, sizeof(*caps))) == NULL ||
        (run.cols = calloc((size_t)nrhs, sizeof(*run.cols))) == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld right-hand sides",
                        (long long)nrhs);
        goto fail;
    }

    /* Host-side answers; the rest become device columns. */
    for (int64_t j = 0; j < nrhs; j++) {
        const void *bj = (const char *)b + (size_t)j * colbytes;
        const void *x0j = x0 != NULL ? (const char *)x0 + (size_t)j * colbytes : NULL;
        void *xj = (char *)x + (size_t)j * colbytes;
        if (kd_solve_answer_on_host(A, bj, x0j, xj, params->record_history, &results[j], &caps[j]))
            continue;
        kd_solve_column_t *col = &run.cols[run.k++];
        col->rhs = j;
        col->tol = fmax(params->rtol * results[j].b_norm, params->atol);
        col->threshold = kd_solve_as_value(dtype, col->tol * col->tol);
    }
    if (run.k == 0)
        goto done;
    const int64_t k = run.k;
    for (int64_t c = 0; c < k; c++)
        run.cols[c].history_cap = caps[run.cols[c].rhs];
    const int64_t check_every =
        params->check_every > 0 ? params->check_every : kd_solve_auto_check_every(A, k);

    /* Device columns: b, x0 packed; r = b - A x0; d = z. */
    double *thresholds = NULL;
    if ((run.active = malloc((size_t)k)) == NULL || (run.seen = calloc((size_t)k, 1)) == NULL ||
        (run.mask = calloc((size_t)k, sizeof(int))) == NULL ||
        (run.iters = calloc((size_t)k, sizeof(int64_t))) == NULL ||
        (run.norms = calloc((size_t)k, sizeof(double))) == NULL ||
        (run.state = calloc((size_t)k, sizeof(*run.state))) == NULL ||
        (thresholds = malloc((size_t)k * sizeof(double))) == NULL ||
        (pack = malloc((size_t)k * colbytes + 1)) == NULL) {
        free(thresholds);
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld vectors of %lld values",
                        (long long)k, (long long)n);
        goto fail;
    }
    memset(run.active, 1, (size_t)k);
    for (int64_t c = 0; c < k; c++)
        thresholds[c] = run.cols[c].threshold;
    const int sd = run.method == KD_KRYLOV_SD;
    if ((rc = kd_multivec_alloc(ocl, n, k, dtype, &run.b, err)) != KD_OK ||
        (rc = kd_multivec_alloc(ocl, n, k, dtype, &run.x, err)) != KD_OK ||
        (rc = kd_multivec_alloc(ocl, n, k, dtype, &run.r, err)) != KD_OK ||
        (rc = kd_multivec_alloc(ocl, n, k, dtype, &run.q, err)) != KD_OK ||
        (!sd && (rc = kd_multivec_alloc(ocl, n, k, dtype, &run.d, err)) != KD_OK) ||
        (rc = kd_krylov_init(ocl, dtype, (kd_krylov_method_t)run.method, n, run.b.ld, k,
                             params->reduction_groups, params->passes != 0 ? params->passes : 2,
                             thresholds, maxiter, &run.kr, err)) != KD_OK) {
        free(thresholds);
        goto fail;
    }
    free(thresholds);
    const int fuse = params->spmv_fusion != 0 ? params->spmv_fusion == KD_SOLVE_FUSION_ON
                                              : kd_ocl_desc(ocl)->is_gpu;
    run.csr = fuse ? kd_format_csr_scalar_arrays(A) : NULL;
    run.fused = run.csr != NULL;
    if (run.method == KD_KRYLOV_PCG &&
        (rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, colbytes,
                                   A->inv_diagonal, "inverse diagonal", &run.inv, err)) != KD_OK)
        goto fail;
    for (int64_t c = 0; c < k; c++)
        memcpy((char *)pack + (size_t)c * colbytes,
               (const char *)b + (size_t)run.cols[c].rhs * colbytes, colbytes);
    if ((rc = kd_multivec_write(ocl, &run.b, pack, err)) != KD_OK)
        goto fail;
    if (x0 != NULL) {
        for (int64_t c = 0; c < k; c++)
            memcpy((char *)pack + (size_t)c * colbytes,
                   (const char *)x0 + (size_t)run.cols[c].rhs * colbytes, colbytes);
    } else {
        for (int64_t i = 0; i < n * k; i++)
            kd_store_real(pack, dtype, (size_t)i, 0.0);
    }
    if ((rc = kd_multivec_write(ocl, &run.x, pack, err)) != KD_OK ||
        (rc = kd_solve_residual(&run, &run.r, NULL, err)) != KD_OK ||
        (rc = kd_krylov_residual(&run.kr, &run.r, run.inv, sd ? NULL : &run.d, NULL,
                                 KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_DIRECTION |
                                     KD_KRYLOV_MASK_RESTART,
                                 0, err)) != KD_OK)
        goto fail;

    /* The host checks the state after iteration `it` while the device runs ahead: up to two
     * chunks are enqueued beyond the last check (`enq` is the last iteration enqueued), so the
     * device never idles while an answer crosses the bus. A column's decisions happen on the
     * device at the exact iteration (limits included); what the host changes (restarts) applies
     * at `enq`. */
    int64_t it = 0, enq = 0;
    int stopped = KD_OK;
    kd_krylov_snapshot_t snaps[2];
    int head = 0, pending = 0;
    memset(snaps, 0, sizeof(snaps));
    if ((rc = kd_krylov_snapshot_init(&run.kr, &snaps[0], 0, err)) != KD_OK ||
        (rc = kd_krylov_snapshot_init(&run.kr, &snaps[1], 1, err)) != KD_OK ||
        (rc = kd_krylov_read(&run.kr, 0, run.state, err)) != KD_OK)
        goto fail_loop;
    const uint64_t iterate_start_ns = kd_solve_now_ns();
    uint64_t iterate_end_ns = iterate_start_ns;
    for (;;) {
        int running = 0;
        int64_t worst = -1;
        if ((rc = kd_solve_check(&run, params, results, maxiter, it, enq, &running, &worst, err)) !=
            KD_OK)
            goto fail_loop;
        int progress_stop = 0;
        if (params->progress != NULL && worst >= 0) {
            const kd_solve_column_t *col = &run.cols[worst];
            int64_t iters = col->done ? results[col->rhs].iterations : run.iters[worst];
            progress_stop =
                params->progress(params->progress_ctx, col->rhs, iters, run.norms[worst]);
        }
        if (running == 0)
            break;
        if (progress_stop) {
            stopped = kd_err_set(err, KD_ECANCELLED,
                                 "solve cancelled by its progress callback at iteration %lld",
                                 (long long)enq);
            break;
        }
        if (params->cancel != NULL && atomic_load(params->cancel) != 0) {
            stopped =
                kd_err_set(err, KD_ECANCELLED, "solve cancelled at iteration %lld", (long long)enq);
            break;
        }
        if (params->deadline_ns != 0 && kd_solve_now_ns() >= params->deadline_ns) {
            stopped = kd_err_set(err, KD_ETIMEOUT,
                                 "solve passed its deadline at iteration %lld (||r|| = %g)",
                                 (long long)enq, worst >= 0 ? run.norms[worst] : NAN);
            break;
        }
        while (pending < 2) {
            int64_t reach = enq; /* the furthest a running column may go */
            for (int64_t c = 0; c < k; c++)
                if (!run.cols[c].done && maxiter + run.cols[c].skip > reach)
                    reach = maxiter + run.cols[c].skip;
            const int64_t chunk = check_every < reach - enq ? check_every : reach - enq;
            if (chunk <= 0)
                break;
            for (int64_t i = enq + 1; i <= enq + chunk; i++)
                if ((rc = kd_solve_iterate(&run, i, (i - enq - 1) % 4 == 0, err)) != KD_OK)
                    goto fail_loop;
            enq += chunk;
            if ((rc = kd_krylov_read_start(&run.kr, enq, &snaps[(head + pending) % 2], err)) !=
                KD_OK)
                goto fail_loop;
            pending++;
        }
        if (pending == 0) {
            rc = kd_err_set(err, KD_EINTERNAL, "solve: columns running with nothing to run");
            goto fail_loop;
        }
        if ((rc = kd_krylov_read_finish(&run.kr, &snaps[head], run.state, err)) != KD_OK)
            goto fail_loop;
        it = snaps[head].iteration;
        head ^= 1;
        pending--;
        iterate_end_ns = kd_solve_now_ns();
    }
    if (stopped != KD_OK) {
        /* Stopped with iterations in flight: x is the iterate after `enq`; say so per column. */
        if ((rc = kd_krylov_read(&run.kr, enq, run.state, err)) != KD_OK)
            goto fail_loop;
        for (int64_t c = 0; c < k; c++) {
            const kd_solve_column_t *col = &run.cols[c];
            const kd_krylov_column_t *st = &run.state[c];
            if (col->done)
                continue;
            kd_solve_result_t *res = &results[col->rhs];
            res->status = KD_SOLVE_MAX_ITERATIONS;
            res->iterations = enq - col->skip;
            if (st->status == KD_KRYLOV_CONVERGED || st->status == KD_KRYLOV_STOPPED ||
                st->status == KD_KRYLOV_NON_FINITE_RESIDUAL)
                res->iterations = st->iteration - col->skip;
            else if (st->status != KD_KRYLOV_RUNNING)
                res->iterations = st->iteration - 1 - col->skip;
        }
    }
    kd_krylov_snapshot_release(&snaps[0]);
    kd_krylov_snapshot_release(&snaps[1]);

    /* The truthful numbers: r = b - A x from scratch, for every column. */
    if ((rc = kd_solve_residual(&run, &run.q, NULL, err)) != KD_OK ||
        (rc = kd_krylov_norms(&run.kr, &run.q, NULL, run.norms, err)) != KD_OK ||
        (rc = kd_multivec_read(ocl, &run.x, pack, err)) != KD_OK)
        goto fail;
    for (int64_t c = 0; c < k; c++) {
        kd_solve_result_t *res = &results[run.cols[c].rhs];
        memcpy((char *)x + (size_t)run.cols[c].rhs * colbytes, (char *)pack + (size_t)c * colbytes,
               colbytes);
        res->residual_norm = sqrt(run.norms[c]);
        res->relative_residual = res->residual_norm / res->b_norm;
        res->iterate_ms = (double)(iterate_end_ns - iterate_start_ns) / 1e6;
        res->spmv_fused = run.fused;
    }
    rc = stopped;
    goto done;
fail_loop:
    kd_krylov_snapshot_release(&snaps[0]);
    kd_krylov_snapshot_release(&snaps[1]);
fail:
    (void)clFinish(kd_ocl_queue(ocl));
done:
    for (int64_t j = 0; j < nrhs; j++)
        results[j].time_ms = (double)(kd_solve_now_ns() - start_ns) / 1e6;
    kd_solve_run_release(&run);
    free(caps);
    free(pack);
    return rc;
}
