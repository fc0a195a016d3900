/*
 * Conjugate gradient and steepest descent on a resident matrix (see solve.h), following
 * Shewchuk's "An Introduction to the Conjugate Gradient Method Without the Agonizing Pain":
 *
 *   CG:  r = b - A x, d = r, delta = r'r
 *        loop: q = A d, alpha = delta / d'q, x += alpha d,
 *              r = b - A x every 50 iterations, else r -= alpha q,
 *              delta_new = r'r, beta = delta_new / delta, d = r + beta d
 *   SD:  r = b - A x; loop: q = A r, alpha = r'r / r'q, x += alpha r, r -= alpha q (same refresh)
 *
 * The host checks b and x0 for NaN/Inf and computes ||b|| in double before anything reaches the
 * device. Then every iteration is enqueued without waiting: the SpMV comes from the matrix's
 * format, the rest from the fused steps in solver/blas.h, whose alpha and beta live in a device
 * scalars buffer. Every `check_every` iterations the host reads back r'r and the device's status
 * word (one blocking read): convergence, breakdown and non-finite values are detected by the
 * device at the exact iteration they happen, and the device freezes x and r from then on, so the
 * iterations between two checks never spoil the answer or the reported iteration count. Cancel,
 * deadline and the progress callback are looked at only at checks.
 *
 * Convergence of the recurrence is confirmed before it is believed: r = b - A x is recomputed
 * and, when it misses the tolerance (the recurrence drifts in float32 on ill-conditioned
 * systems), the iteration goes on from the true residual with d = r. So "converged" means the
 * true residual met the tolerance in the device's arithmetic. At the end r = b - A x is
 * recomputed once more and its norm reported.
 */
#include "solver/solve.h"
#include "solver/blas.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Shewchuk's refresh interval: recompute r = b - A x to stop the recurrence drifting. */
#define KD_SOLVE_REFRESH_EVERY 50

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
 * Iterations between checks when the caller leaves it to us. A check costs one host round trip
 * (tens of microseconds on a GPU, more through PoCL); an iteration costs about nnz + 6 n element
 * accesses plus five or six launches. For large systems the iteration dwarfs the round trip and
 * we check every time; for small ones launch latency dominates and checking less often saves
 * most of the overhead, while the device-side freeze makes the extra iterations free of harm.
 */
static int64_t kd_solve_auto_check_every(const kd_matrix_t *A)
{
    double work = (double)A->nnz + 6.0 * (double)A->rows;
    if (work >= 1048576.0)
        return 1;
    if (work >= 65536.0)
        return 4;
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

typedef struct kd_solve_vectors {
    kd_vec_t b, x, r, q, d;
} kd_solve_vectors_t;

/* r = b - A x */
static int kd_solve_residual(kd_ocl_t *ocl, kd_blas_t *blas, const kd_matrix_t *A,
                             kd_solve_vectors_t *v, kd_err_t *err)
{
    int rc = kd_blas_copy(blas, &v->b, &v->r, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmv(ocl, A, -1.0, &v->x, 1.0, &v->r, err);
    return rc;
}

/* Enqueue iteration k (1-based) of CG or SD; nothing waits. */
static int kd_solve_iterate(kd_ocl_t *ocl, kd_blas_t *blas, const kd_matrix_t *A,
                            kd_solve_vectors_t *v, int cg, int64_t k, double threshold,
                            kd_err_t *err)
{
    kd_vec_t *p = cg ? &v->d : &v->r;
    int rc = kd_matrix_spmv(ocl, A, 1.0, p, 0.0, &v->q, err);
    if (rc == KD_OK)
        rc = kd_blas_step_alpha(blas, p, &v->q, k, threshold, err);
    if (rc == KD_OK)
        rc = kd_blas_step_update(blas, p, &v->q, &v->x, &v->r, err);
    if (rc != KD_OK)
        return rc;
    if (k % KD_SOLVE_REFRESH_EVERY == 0) {
        rc = kd_solve_residual(ocl, blas, A, v, err);
        if (rc == KD_OK)
            rc = kd_blas_step_residual_of(blas, &v->r, k, err);
    } else {
        rc = kd_blas_step_residual(blas, k, err);
    }
    if (rc == KD_OK && cg)
        rc = kd_blas_step_direction(blas, &v->r, &v->d, err);
    return rc;
}

static int kd_solve_check_params(const kd_matrix_t *A, const kd_solve_params_t *p, kd_err_t *err)
{
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "solve needs a square matrix, not %lld x %lld",
                          (long long)A->rows, (long long)A->cols);
    if (p->method == KD_SOLVE_PCG)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "method pcg (Jacobi-preconditioned CG) is not implemented yet; use cg");
    if (p->method != KD_SOLVE_CG && p->method != KD_SOLVE_SD)
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
    return KD_OK;
}

int kd_solve(kd_ocl_t *ocl, const kd_matrix_t *A, const void *b, const void *x0, void *x,
             const kd_solve_params_t *params, kd_solve_result_t *result, kd_err_t *err)
{
    kd_blas_t blas = {0};
    kd_solve_vectors_t v = {0};
    int64_t history_cap = 0;
    const uint64_t start_ns = kd_solve_now_ns();
    const kd_dtype_t dtype = A->dtype;
    const int64_t n = A->rows;
    const int cg = params->method == KD_SOLVE_CG;
    int rc;

    memset(result, 0, sizeof(*result));
    if ((rc = kd_solve_check_params(A, params, err)) != KD_OK)
        return rc;

    /* Host-side checks: NaN/Inf in b or x0, and ||b|| in double. */
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
        result->status = KD_SOLVE_NON_FINITE;
        snprintf(result->message, sizeof(result->message), "%s[%lld] = %g: %s holds NaN or Inf",
                 bad_name, (long long)bad, kd_load_real(bad_array, dtype, (size_t)bad), bad_what);
        for (int64_t i = 0; i < n; i++)
            kd_store_real(x, dtype, (size_t)i,
                          x0 != NULL ? kd_load_real(x0, dtype, (size_t)i) : 0.0);
        result->b_norm = NAN;
        result->residual_norm = NAN;
        result->relative_residual = NAN;
        result->time_ms = (double)(kd_solve_now_ns() - start_ns) / 1e6;
        return KD_OK;
    }
    /* Scaled by max |b_i| so that huge finite values cannot overflow the sum of squares. */
    double bmax = 0.0, bb = 0.0;
    for (int64_t i = 0; i < n; i++)
        bmax = fmax(bmax, fabs(kd_load_real(b, dtype, (size_t)i)));
    for (int64_t i = 0; i < n && bmax > 0.0; i++) {
        double bi = kd_load_real(b, dtype, (size_t)i) / bmax;
        bb += bi * bi;
    }
    result->b_norm = bmax * sqrt(bb);
    if (result->b_norm == 0.0) {
        /* A x = 0: x = 0 exactly, whatever x0 was. */
        for (int64_t i = 0; i < n; i++)
            kd_store_real(x, dtype, (size_t)i, 0.0);
        result->status = KD_SOLVE_CONVERGED;
        if (params->record_history && kd_solve_history_push(result, &history_cap, 0.0) != KD_OK)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for the residual history");
        result->time_ms = (double)(kd_solve_now_ns() - start_ns) / 1e6;
        return KD_OK;
    }

    const double tol = fmax(params->rtol * result->b_norm, params->atol);
    const double threshold = kd_solve_as_value(dtype, tol * tol);
    const int64_t maxiter = params->maxiter == KD_SOLVE_MAXITER_AUTO ? 10 * n : params->maxiter;
    const int64_t check_every =
        params->check_every > 0 ? params->check_every : kd_solve_auto_check_every(A);

    if ((rc = kd_blas_init(ocl, dtype, &blas, err)) != KD_OK)
        goto fail;
    if ((rc = kd_vec_alloc(ocl, n, dtype, &v.b, err)) != KD_OK ||
        (rc = kd_vec_alloc(ocl, n, dtype, &v.x, err)) != KD_OK ||
        (rc = kd_vec_alloc(ocl, n, dtype, &v.r, err)) != KD_OK ||
        (rc = kd_vec_alloc(ocl, n, dtype, &v.q, err)) != KD_OK ||
        (cg && (rc = kd_vec_alloc(ocl, n, dtype, &v.d, err)) != KD_OK))
        goto fail;
    if ((rc = kd_vec_write(ocl, &v.b, b, dtype, err)) != KD_OK)
        goto fail;
    rc = x0 != NULL ? kd_vec_write(ocl, &v.x, x0, dtype, err) : kd_vec_fill(ocl, &v.x, 0.0, err);
    if (rc != KD_OK)
        goto fail;
    if ((rc = kd_solve_residual(ocl, &blas, A, &v, err)) != KD_OK ||
        (rc = kd_blas_step_start(&blas, &v.r, err)) != KD_OK ||
        (cg && (rc = kd_blas_copy(&blas, &v.r, &v.d, err)) != KD_OK))
        goto fail;

    int64_t it = 0; /* iterations enqueued so far */
    int stopped = KD_OK;
    for (;;) {
        kd_blas_step_state_t st;
        if ((rc = kd_blas_step_read(&blas, &st, err)) != KD_OK)
            goto fail;
        int finished = 1;
        const char *pq_name = cg ? "p'Ap" : "r'Ar";
        switch (st.status) {
        case KD_BLAS_CONVERGED:
            result->status = KD_SOLVE_CONVERGED;
            result->iterations = st.iteration;
            break;
        case KD_BLAS_BREAKDOWN:
            result->status = KD_SOLVE_BREAKDOWN;
            result->iterations = st.iteration - 1;
            snprintf(result->message, sizeof(result->message),
                     "%s = %.2g <= 0 at iteration %lld: the matrix is not symmetric positive "
                     "definite",
                     pq_name, st.fail_value, (long long)st.iteration);
            break;
        case KD_BLAS_NON_FINITE_PQ:
            result->status = KD_SOLVE_NON_FINITE;
            result->iterations = st.iteration - 1;
            snprintf(result->message, sizeof(result->message),
                     "%s = %g at iteration %lld: the matrix or the iterate holds NaN or Inf",
                     pq_name, st.fail_value, (long long)st.iteration);
            break;
        case KD_BLAS_NON_FINITE_ALPHA:
            result->status = KD_SOLVE_NON_FINITE;
            result->iterations = st.iteration - 1;
            snprintf(result->message, sizeof(result->message),
                     "step length alpha = r'r / %s = %g at iteration %lld (%s = %g) overflows",
                     pq_name, st.fail_value, (long long)st.iteration, pq_name, st.pq);
            break;
        case KD_BLAS_NON_FINITE_RESIDUAL:
            result->status = KD_SOLVE_NON_FINITE;
            result->iterations = st.iteration;
            snprintf(result->message, sizeof(result->message),
                     "the residual became non-finite (r'r = %g) at iteration %lld", st.fail_value,
                     (long long)st.iteration);
            break;
        default:
            result->iterations = it;
            if (!isfinite(st.rr)) {
                /* Only reachable at iteration 0: later the device flags it itself. */
                result->status = KD_SOLVE_NON_FINITE;
                snprintf(result->message, sizeof(result->message),
                         "the initial residual b - A x0 is non-finite (r'r = %g) at iteration "
                         "%lld: the matrix holds NaN or Inf, or A x0 overflows",
                         st.rr, (long long)it);
            } else if (st.rr <= threshold) {
                result->status = KD_SOLVE_CONVERGED;
            } else if (it >= maxiter) {
                result->status = KD_SOLVE_MAX_ITERATIONS;
            } else {
                finished = 0;
            }
            break;
        }
        double norm = sqrt(st.rr);
        if (finished && result->status == KD_SOLVE_CONVERGED && result->iterations > 0) {
            /* The recurrence says converged: confirm with r = b - A x from scratch. If the
             * recurrence drifted (float32, ill-conditioned), go on from the true residual with
             * the direction restarted (d = r): a converged status always means the true
             * residual met the tolerance. */
            kd_blas_step_state_t truth;
            if ((rc = kd_solve_residual(ocl, &blas, A, &v, err)) != KD_OK ||
                (rc = kd_blas_step_start(&blas, &v.r, err)) != KD_OK ||
                (rc = kd_blas_step_read(&blas, &truth, err)) != KD_OK)
                goto fail;
            norm = sqrt(truth.rr);
            if (!(truth.rr <= threshold)) {
                it = result->iterations;
                result->restarts++;
                if (it >= maxiter) {
                    result->status = KD_SOLVE_MAX_ITERATIONS;
                } else {
                    finished = 0;
                    if (cg && (rc = kd_blas_copy(&blas, &v.r, &v.d, err)) != KD_OK)
                        goto fail;
                }
            }
        }
        if (params->record_history && kd_solve_history_push(result, &history_cap, norm) != KD_OK) {
            rc = kd_err_set(err, KD_ENOMEM, "out of host memory for the residual history");
            goto fail;
        }
        int progress_stop = 0;
        if (params->progress != NULL)
            progress_stop = params->progress(params->progress_ctx, result->iterations, norm);
        if (finished)
            break;
        if (progress_stop) {
            stopped = kd_err_set(err, KD_ECANCELLED,
                                 "solve cancelled by its progress callback at iteration %lld",
                                 (long long)it);
            break;
        }
        if (params->cancel != NULL && atomic_load(params->cancel) != 0) {
            stopped =
                kd_err_set(err, KD_ECANCELLED, "solve cancelled at iteration %lld", (long long)it);
            break;
        }
        if (params->deadline_ns != 0 && kd_solve_now_ns() >= params->deadline_ns) {
            stopped = kd_err_set(err, KD_ETIMEOUT,
                                 "solve passed its deadline at iteration %lld (||r|| = %g)",
                                 (long long)it, norm);
            break;
        }
        int64_t chunk = check_every < maxiter - it ? check_every : maxiter - it;
        for (int64_t k = it + 1; k <= it + chunk; k++)
            if ((rc = kd_solve_iterate(ocl, &blas, A, &v, cg, k, threshold, err)) != KD_OK)
                goto fail;
        it += chunk;
    }
    if (stopped != KD_OK)
        result->status = KD_SOLVE_MAX_ITERATIONS;

    /* The truthful numbers: r = b - A x from scratch. */
    if ((rc = kd_solve_residual(ocl, &blas, A, &v, err)) != KD_OK ||
        (rc = kd_blas_nrm2(&blas, &v.r, &result->residual_norm, err)) != KD_OK ||
        (rc = kd_vec_read(ocl, &v.x, x, dtype, err)) != KD_OK)
        goto fail;
    result->relative_residual = result->residual_norm / result->b_norm;
    result->time_ms = (double)(kd_solve_now_ns() - start_ns) / 1e6;
    kd_vec_release(&v.b);
    kd_vec_release(&v.x);
    kd_vec_release(&v.r);
    kd_vec_release(&v.q);
    kd_vec_release(&v.d);
    kd_blas_release(&blas);
    return stopped;
fail:
    (void)clFinish(kd_ocl_queue(ocl));
    kd_vec_release(&v.b);
    kd_vec_release(&v.x);
    kd_vec_release(&v.r);
    kd_vec_release(&v.q);
    kd_vec_release(&v.d);
    kd_blas_release(&blas);
    result->time_ms = (double)(kd_solve_now_ns() - start_ns) / 1e6;
    return rc;
}
