/*
 * The batched solve (solver/batch/batch.h): every system of a batched matrix at once, one
 * work-group per system (kernels/batch/batch.cl), in a few launches of `chunk` iterations each. The
 * host reads the k statuses only between launches; nothing inside a launch waits for it.
 *
 * Steps: check the parameters; sort the systems into those the host answers (b = 0, non-finite
 * input, an unusable Jacobi diagonal) and those that iterate; upload b, x0 and each system's
 * threshold and limit; launch chunks until no system runs; the true residual b - A x of every
 * system on the device; read x, the states and the histories back.
 */
#include "solver/batch/batch.h"

#include "common/checked.h"
#include "common/clock.h"
#include "kernels/batch/batch_abi.h"
#include "kernels/methods/krylov_abi.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device buffers of one solve. */
typedef struct kd_batch_run {
    cl_mem b, x, work, threshold, limits, state, scalars, hist, norms;
    cl_mem aux;      /* gmres: KD_BATCH_GMRES_AUX(m) values per system */
    int64_t m;       /* gmres: the basis size */
    int64_t hcap;    /* history values per system (0: none) */
    int64_t vectors; /* work vectors per system */
} kd_batch_run_t;

static void kd_batch_run_release(kd_batch_run_t *r)
{
    cl_mem mems[] = {r->b,     r->x,       r->work, r->threshold, r->limits,
                     r->state, r->scalars, r->hist, r->norms,     r->aux};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
        if (mems[i] != NULL)
            clReleaseMemObject(mems[i]);
}

static int kd_batch_check(const kd_batch_t *A, const kd_batch_params_t *p, kd_err_t *err)
{
    if (A->shared && A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "solve needs square systems, the batch's are %lldx%lld",
                          (long long)A->rows, (long long)A->cols);
    if (p->method != KD_BATCH_CG && p->method != KD_BATCH_BICGSTAB && p->method != KD_BATCH_GMRES)
        return kd_err_set(err, KD_EBADREQ, "batched solve: unknown method %d", (int)p->method);
    if (p->restart < 0 || p->restart > KD_SOLVE_RESTART_MAX)
        return kd_err_set(err, KD_EBADREQ, "restart = %lld: 1..%d (0: the default, %d)",
                          (long long)p->restart, KD_SOLVE_RESTART_MAX, KD_SOLVE_RESTART_DEFAULT);
    for (int64_t s = 0; s < A->count; s++) {
        if (!(p->rtol[s] >= 0.0) || !isfinite(p->rtol[s]))
            return kd_err_set(err, KD_EBADREQ, "rtol[%lld] = %g must be a finite number >= 0",
                              (long long)s, p->rtol[s]);
        if (!(p->atol[s] >= 0.0) || !isfinite(p->atol[s]))
            return kd_err_set(err, KD_EBADREQ, "atol[%lld] = %g must be a finite number >= 0",
                              (long long)s, p->atol[s]);
        if (p->maxiter[s] < 0 || p->maxiter[s] > INT32_MAX)
            return kd_err_set(err, KD_EBADREQ, "maxiter[%lld] = %lld must be in 0..%d",
                              (long long)s, (long long)p->maxiter[s], INT32_MAX);
    }
    return KD_OK;
}

/* 1 when any of the n values at p is NaN or Inf; *sq = their sum of squares. */
static int kd_batch_scan_vector(const void *p, kd_dtype_t dtype, size_t at, int64_t n, double *sq)
{
    double s = 0.0;
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        const double v = kd_load_real(p, dtype, at + (size_t)i);
        bad |= !isfinite(v);
        s += v * v;
    }
    *sq = s;
    return bad;
}

/* The number system s's messages call it. */
static long long kd_batch_label(const kd_batch_params_t *p, int64_t s)
{
    return (long long)(p->labels != NULL ? p->labels[s] : s);
}

/* System s answered on the host, or set running: its status, threshold and start x (in x). */
static int kd_batch_sort(const kd_batch_t *A, const kd_batch_params_t *p, int64_t s, const void *b,
                         const void *x0, void *x, double *threshold, kd_batch_result_t *res)
{
    const size_t at = (size_t)A->row_start[s], vsize = kd_dtype_size(A->dtype);
    const int64_t n = A->row_start[s + 1] - A->row_start[s];
    double bb, xx = 0.0;
    const int bad_b = kd_batch_scan_vector(b, A->dtype, at, n, &bb);
    const int bad_x = x0 != NULL && kd_batch_scan_vector(x0, A->dtype, at, n, &xx);
    res->b_norm = sqrt(bb);
    if (x0 != NULL)
        memcpy((char *)x + at * vsize, (const char *)x0 + at * vsize, (size_t)n * vsize);
    else
        memset((char *)x + at * vsize, 0, (size_t)n * vsize);
    if (A->non_finite_entry[s] >= 0 || bad_b || bad_x) {
        res->status = KD_SOLVE_NON_FINITE;
        snprintf(res->message, sizeof(res->message), "system %lld: a NaN or Inf in its %s",
                 kd_batch_label(p, s),
                 A->non_finite_entry[s] >= 0 ? "matrix"
                 : bad_b                     ? "b"
                                             : "x0");
        return 0;
    }
    if (p->jacobi && A->bad_diagonal_row[s] >= 0) {
        res->status = KD_SOLVE_BREAKDOWN;
        snprintf(res->message, sizeof(res->message),
                 "system %lld: jacobi needs a nonzero diagonal, row %lld has none",
                 kd_batch_label(p, s), (long long)A->bad_diagonal_row[s]);
        return 0;
    }
    if (p->jacobi && p->method == KD_BATCH_CG && A->negative_diagonal_row[s] >= 0) {
        res->status = KD_SOLVE_BREAKDOWN;
        snprintf(res->message, sizeof(res->message), "system %lld: not SPD, a_ii < 0 at row %lld",
                 kd_batch_label(p, s), (long long)A->negative_diagonal_row[s]);
        return 0;
    }
    if (bb == 0.0) {
        memset((char *)x + at * vsize, 0, (size_t)n * vsize);
        res->status = KD_SOLVE_CONVERGED;
        return 0;
    }
    const double tol = fmax(p->rtol[s] * res->b_norm, p->atol[s]);
    *threshold = A->dtype == KD_DTYPE_F32 ? (double)(float)(tol * tol) : tol * tol;
    return 1;
}

/* A device buffer of `bytes` filled from src (or left as it is when src is NULL). */
static int kd_batch_put(kd_ocl_t *ocl, size_t bytes, const void *src, const char *what, cl_mem *out,
                        kd_err_t *err)
{
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, what, out, err);
    if (rc == KD_OK && src != NULL)
        rc = kd_ocl_write(ocl, *out, 0, bytes, src, err);
    return rc;
}

/* The per-system inputs (threshold, limit, state) and the vectors on the device. */
static int kd_batch_setup(kd_ocl_t *ocl, const kd_batch_t *A, const kd_batch_params_t *p,
                          const void *b, const void *xstart, const double *threshold,
                          const int *running, kd_batch_run_t *r, kd_err_t *err)
{
    const int64_t k = A->count;
    const size_t vsize = kd_dtype_size(A->dtype);
    size_t vec, work;
    if (kd_mul_overflow((size_t)A->row_start[k], vsize, &vec) ||
        kd_mul_overflow(vec, (size_t)r->vectors, &work))
        return kd_err_set(err, KD_ETOOLARGE, "batch vectors overflow");
    void *thr = kd_malloc_array((size_t)k, vsize);
    cl_long *lim = kd_malloc_array((size_t)k, sizeof(cl_long));
    cl_long *st = kd_malloc_array((size_t)k * 2, sizeof(cl_long));
    void *zeros = calloc((size_t)k * KD_BATCH_SLOTS, vsize);
    int rc = KD_OK;
    if (thr == NULL || lim == NULL || st == NULL || zeros == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld systems", (long long)k);
        goto done;
    }
    for (int64_t s = 0; s < k; s++) {
        kd_store_real(thr, A->dtype, (size_t)s, running[s] ? threshold[s] : 0.0);
        lim[s] = p->maxiter[s];
        st[2 * s] = running[s] ? KD_KRYLOV_RUNNING : KD_KRYLOV_STOPPED;
        st[2 * s + 1] = 0;
    }
    if ((rc = kd_batch_put(ocl, vec, b, "batch b", &r->b, err)) != KD_OK ||
        (rc = kd_batch_put(ocl, vec, xstart, "batch x", &r->x, err)) != KD_OK ||
        (rc = kd_batch_put(ocl, work, NULL, "batch work vectors", &r->work, err)) != KD_OK ||
        (rc = kd_batch_put(ocl, (size_t)k * vsize, thr, "batch thresholds", &r->threshold, err)) !=
            KD_OK ||
        (rc = kd_batch_put(ocl, (size_t)k * sizeof(cl_long), lim, "batch limits", &r->limits,
                           err)) != KD_OK ||
        (rc = kd_batch_put(ocl, (size_t)k * 2 * sizeof(cl_long), st, "batch state", &r->state,
                           err)) != KD_OK ||
        (rc = kd_batch_put(ocl, (size_t)k * KD_BATCH_SLOTS * vsize, zeros, "batch scalars",
                           &r->scalars, err)) != KD_OK ||
        (rc = kd_batch_put(ocl, (size_t)k * vsize, NULL, "batch norms", &r->norms, err)) != KD_OK)
        goto done;
    if (r->hcap > 0)
        rc = kd_batch_put(ocl, (size_t)(k * r->hcap) * vsize, NULL, "batch histories", &r->hist,
                          err);
    if (rc == KD_OK && p->method == KD_BATCH_GMRES)
        rc = kd_batch_put(ocl, (size_t)(k * KD_BATCH_GMRES_AUX(r->m)) * vsize, NULL,
                          "batch gmres scalars", &r->aux, err);
done:
    free(thr);
    free(lim);
    free(st);
    free(zeros);
    return rc;
}

/* Between launches: the caller's cancel flag and deadline. */
static int kd_batch_stopped(const kd_batch_params_t *p, int64_t launches, kd_err_t *err)
{
    const int code = p->cancel != NULL ? atomic_load(p->cancel) : 0;
    if (code != 0)
        return kd_err_set(err, code, "batched solve cancelled after %lld launches",
                          (long long)launches);
    if (p->deadline_ns != 0 && kd_clock_ns() > p->deadline_ns)
        return kd_err_set(err, KD_ETIMEOUT,
                          "batched solve: the deadline passed after %lld launches",
                          (long long)launches);
    return KD_OK;
}

/* Launch chunks until every system has stopped (one read of the k states between chunks). */
static int kd_batch_iterate(kd_ocl_t *ocl, const kd_batch_t *A, const kd_batch_params_t *p,
                            kd_batch_run_t *r, int local, int64_t limit, cl_long *st,
                            kd_batch_report_t *report, kd_err_t *err)
{
    const int64_t k = A->count, n = A->rows; /* n: the largest system's rows */
    const size_t wg = kd_ocl_work_group_size(ocl), vsize = kd_dtype_size(A->dtype);
    char options[64];
    snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu", wg);
    char name[48];
    snprintf(name, sizeof(name), "kd_batch_%s%s", kd_batch_method_name(p->method),
             local ? "_local" : "");
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, "batch", A->dtype, options, name, &kernel, err);
    const int64_t chunk = p->chunk > 0 ? p->chunk : KD_BATCH_CHUNK;
    const size_t lm = (size_t)(r->vectors + 1) * (size_t)n * vsize;
    for (int64_t done = 0, first = 1; rc == KD_OK; done += chunk, first = 0) {
        if ((rc = kd_batch_stopped(p, report->launches, err)) != KD_OK)
            break;
        const int count = (int)(chunk < limit - done + 1 ? chunk : limit - done + 1);
        kd_ocl_arg_t args[20] = {
            KD_ARG_MEM(A->systems),   KD_ARG_INT(first),           KD_ARG_INT(count),
            KD_ARG_INT(p->jacobi),    KD_ARG_MEM(A->indptr),       KD_ARG_MEM(A->indices),
            KD_ARG_MEM(A->values),    KD_ARG_MEM(A->inv_diagonal), KD_ARG_MEM(r->b),
            KD_ARG_MEM(r->threshold), KD_ARG_MEM(r->limits),       KD_ARG_MEM(r->state),
            KD_ARG_MEM(r->scalars),   KD_ARG_MEM(r->hist),         KD_ARG_INT(r->hcap),
            KD_ARG_MEM(r->x),         KD_ARG_MEM(r->work)};
        size_t nargs = 17;
        const cl_int m = (cl_int)r->m;
        if (p->method == KD_BATCH_GMRES) { /* its basis size and small arrays */
            args[nargs++] = (kd_ocl_arg_t){sizeof(m), &m};
            args[nargs++] = kd_ocl_arg_mem_at(&r->aux);
        }
        if (local) /* the system's vectors in local memory: its size, no value */
            args[nargs++] = (kd_ocl_arg_t){lm, NULL};
        rc = kd_ocl_run(ocl, kernel, name, kd_ocl_range_1d(wg * (size_t)k, wg), args, nargs, NULL,
                        err);
        if (rc == KD_OK)
            rc = kd_ocl_read(ocl, r->state, 0, (size_t)k * 2 * sizeof(cl_long), st, err);
        report->launches++;
        int any = 0;
        for (int64_t s = 0; rc == KD_OK && s < k; s++)
            any |= st[2 * s] == KD_KRYLOV_RUNNING;
        /* every system stops by limit + 1 passes over it: a running one past that is a bug */
        if (rc == KD_OK && any && done + count > limit)
            return kd_err_set(err, KD_EINTERNAL, "batch: systems still running after %lld",
                              (long long)limit);
        if (!any)
            break;
    }
    return rc;
}

static kd_solve_status_t kd_batch_status(cl_long status)
{
    switch (status) {
    case KD_KRYLOV_CONVERGED:
        return KD_SOLVE_CONVERGED;
    case KD_KRYLOV_STOPPED:
    case KD_KRYLOV_RUNNING:
        return KD_SOLVE_MAX_ITERATIONS;
    case KD_KRYLOV_BREAKDOWN:
    case KD_KRYLOV_ZERO_STEP:
        return KD_SOLVE_BREAKDOWN;
    default:
        return KD_SOLVE_NON_FINITE;
    }
}

/* truth[s] = ||b_s - A_s x_s||^2 of every system, computed on the device. */
static int kd_batch_true_residuals(kd_ocl_t *ocl, const kd_batch_t *A, kd_batch_run_t *r,
                                   double *truth, kd_err_t *err)
{
    const int64_t k = A->count;
    const size_t wg = kd_ocl_work_group_size(ocl), vsize = kd_dtype_size(A->dtype);
    char options[64];
    snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu", wg);
    cl_kernel kernel;
    void *norms = kd_malloc_array((size_t)k, vsize);
    int rc = norms == NULL ? kd_err_set(err, KD_ENOMEM, "out of host memory")
                           : kd_ocl_kernel(ocl, "batch", A->dtype, options, "kd_batch_residual",
                                           &kernel, err);
    if (rc == KD_OK)
        rc = kd_ocl_run(ocl, kernel, "kd_batch_residual", kd_ocl_range_1d(wg * (size_t)k, wg),
                        KD_ARGS(KD_ARG_MEM(A->systems), KD_ARG_MEM(A->indptr),
                                KD_ARG_MEM(A->indices), KD_ARG_MEM(A->values), KD_ARG_MEM(r->b),
                                KD_ARG_MEM(r->x), KD_ARG_MEM(r->norms)),
                        NULL, err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, r->norms, 0, (size_t)k * vsize, norms, err);
    for (int64_t s = 0; rc == KD_OK && s < k; s++)
        truth[s] = kd_load_real(norms, A->dtype, (size_t)s);
    free(norms);
    return rc;
}

/* The iterating systems' results from the device: x, status, iterations, true residual,
 * history. */
static int kd_batch_collect(kd_ocl_t *ocl, const kd_batch_t *A, const kd_batch_params_t *p,
                            kd_batch_run_t *r, const int *running, const cl_long *st,
                            const double *truth, void *x, kd_batch_result_t *results, kd_err_t *err)
{
    const int64_t k = A->count, n = A->row_start[k];
    const size_t vsize = kd_dtype_size(A->dtype);
    void *sc = kd_malloc_array((size_t)k * KD_BATCH_SLOTS, vsize);
    void *hist = r->hcap > 0 ? kd_malloc_array((size_t)(k * r->hcap), vsize) : NULL;
    int rc = sc == NULL || (r->hcap > 0 && hist == NULL)
                 ? kd_err_set(err, KD_ENOMEM, "out of host memory")
                 : KD_OK;
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, r->scalars, 0, (size_t)k * KD_BATCH_SLOTS * vsize, sc, err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, r->x, 0, (size_t)n * vsize, x, err);
    if (rc == KD_OK && hist != NULL)
        rc = kd_ocl_read(ocl, r->hist, 0, (size_t)(k * r->hcap) * vsize, hist, err);
    for (int64_t s = 0; rc == KD_OK && s < k; s++) {
        kd_batch_result_t *res = &results[s];
        if (!running[s])
            continue;
        res->status = kd_batch_status(st[2 * s]);
        res->iterations = st[2 * s + 1];
        /* stopped short of maxiter with restarts: kd_batch_confirm's rounds were spent */
        if (res->status == KD_SOLVE_MAX_ITERATIONS && res->restarts > 0 &&
            res->iterations < p->maxiter[s])
            res->status = KD_SOLVE_STAGNATED;
        res->residual_norm = sqrt(truth[s]);
        res->relative_residual = res->b_norm > 0.0 ? res->residual_norm / res->b_norm : 0.0;
        const double fail =
            kd_load_real(sc, A->dtype, (size_t)(s * KD_BATCH_SLOTS + KD_BATCH_FAIL));
        if (res->status == KD_SOLVE_BREAKDOWN || res->status == KD_SOLVE_NON_FINITE)
            snprintf(res->message, sizeof(res->message),
                     "system %lld: %s at iteration %lld (%s, value %g)", kd_batch_label(p, s),
                     kd_solve_status_name(res->status), (long long)res->iterations,
                     p->method == KD_BATCH_CG         ? "p'Ap"
                     : p->method == KD_BATCH_BICGSTAB ? "a bicgstab denominator"
                                                      : "a gmres norm",
                     fail);
        if (hist != NULL) {
            const int64_t len = res->iterations + 1 < r->hcap ? res->iterations + 1 : r->hcap;
            res->history = kd_malloc_array((size_t)len, sizeof(double));
            if (res->history == NULL) {
                rc = kd_err_set(err, KD_ENOMEM, "out of host memory for histories");
                break;
            }
            for (int64_t i = 0; i < len; i++)
                res->history[i] = sqrt(kd_load_real(hist, A->dtype, (size_t)(s * r->hcap + i)));
            res->history_len = len;
        }
    }
    free(sc);
    free(hist);
    return rc;
}

/*
 * Iterate, then confirm every claimed convergence with the true residual b - A x: a system whose
 * recurrence drifted (float32, ill-conditioned systems) goes on from the true residual (the
 * kernel's start, its iteration count kept) for up to KD_BATCH_RESTARTS rounds, after which it
 * is reported as stagnated (max_iterations where it also reached its maxiter). truth: the final
 * ||b_s - A_s x_s||^2.
 */
static int kd_batch_confirm(kd_ocl_t *ocl, const kd_batch_t *A, const kd_batch_params_t *p,
                            kd_batch_run_t *r, int local, int64_t limit, const double *threshold,
                            const int *running, cl_long *st, double *truth,
                            kd_batch_result_t *results, kd_batch_report_t *report, kd_err_t *err)
{
    const int64_t k = A->count;
    for (int round = 0;; round++) {
        int rc = kd_batch_iterate(ocl, A, p, r, local, limit, st, report, err);
        if (rc == KD_OK)
            rc = kd_batch_true_residuals(ocl, A, r, truth, err);
        if (rc != KD_OK)
            return rc;
        int again = 0;
        for (int64_t s = 0; s < k; s++) {
            if (!running[s] || st[2 * s] != KD_KRYLOV_CONVERGED || truth[s] <= threshold[s])
                continue;
            if (round < KD_BATCH_RESTARTS && st[2 * s + 1] < p->maxiter[s]) {
                st[2 * s] = KD_KRYLOV_RUNNING;
                results[s].restarts++;
                again = 1;
            } else {
                st[2 * s] = KD_KRYLOV_STOPPED;
                snprintf(results[s].message, sizeof(results[s].message),
                         "system %lld: the recurrence converged but ||b - A x|| = %g stayed above "
                         "the tolerance %g after %lld restarts",
                         kd_batch_label(p, s), sqrt(truth[s]), sqrt(threshold[s]),
                         (long long)results[s].restarts);
            }
        }
        if (!again)
            return KD_OK;
        if ((rc = kd_ocl_write(ocl, r->state, 0, (size_t)k * 2 * sizeof(cl_long), st, err)) !=
            KD_OK)
            return rc;
    }
}

int64_t kd_batch_method_vectors(kd_batch_method_t method, int64_t restart)
{
    const int64_t m = restart > 0 ? restart : KD_SOLVE_RESTART_DEFAULT;
    return method == KD_BATCH_CG         ? KD_BATCH_CG_VECTORS
           : method == KD_BATCH_BICGSTAB ? KD_BATCH_BICGSTAB_VECTORS
                                         : KD_BATCH_GMRES_VECTORS(m);
}

double kd_batch_local_share(kd_ocl_t *ocl, int64_t rows, kd_dtype_t dtype, int64_t vectors)
{
    const size_t vsize = kd_dtype_size(dtype), wg = kd_ocl_work_group_size(ocl);
    const double need = (double)(vectors + 1) * (double)rows * (double)vsize +
                        (double)(3 * wg) * (double)vsize + 1024.0;
    return need / (double)kd_ocl_desc(ocl)->local_mem_bytes;
}

int kd_batch_local_fits(kd_ocl_t *ocl, int64_t rows, kd_dtype_t dtype, int64_t vectors)
{
    return kd_batch_local_share(ocl, rows, dtype, vectors) <= 1.0;
}

int kd_batch_solve(kd_ocl_t *ocl, const kd_batch_t *A, const void *b, const void *x0, void *x,
                   const kd_batch_params_t *params, kd_batch_result_t *results,
                   kd_batch_report_t *report, kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && b != NULL && x != NULL && params != NULL);
    const uint64_t t0 = kd_clock_ns();
    kd_batch_report_t local_report;
    if (report == NULL)
        report = &local_report;
    memset(report, 0, sizeof(*report));
    const int64_t k = A->count;
    memset(results, 0, (size_t)k * sizeof(*results));
    int rc = kd_batch_check(A, params, err);
    if (rc != KD_OK)
        return rc;
    kd_batch_run_t r;
    memset(&r, 0, sizeof(r));
    r.m = params->restart > 0 ? params->restart : KD_SOLVE_RESTART_DEFAULT;
    r.vectors = kd_batch_method_vectors(params->method, params->restart);
    double *threshold = kd_malloc_array((size_t)k, sizeof(double));
    int *running = kd_malloc_array((size_t)k, sizeof(int));
    cl_long *st = kd_malloc_array((size_t)k * 2, sizeof(cl_long));
    double *truth = kd_malloc_array((size_t)k, sizeof(double));
    if (threshold == NULL || running == NULL || st == NULL || truth == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld systems", (long long)k);
        goto done;
    }
    int64_t limit = 0, any = 0;
    for (int64_t s = 0; s < k; s++) {
        running[s] = kd_batch_sort(A, params, s, b, x0, x, &threshold[s], &results[s]);
        if (running[s] && params->maxiter[s] > limit)
            limit = params->maxiter[s];
        any |= running[s];
    }
    if (!any || A->row_start[k] == 0)
        goto done;
    if (params->record_history) {
        if (kd_batch_history_cells(k, limit) < 0) {
            rc = kd_err_set(err, KD_ETOOLARGE,
                            "history of %lld systems x %lld iterations: over %lld values",
                            (long long)k, (long long)(limit + 1), (long long)KD_BATCH_HISTORY_MAX);
            goto done;
        }
        r.hcap = limit + 1;
    }
    report->local = !params->force_global && kd_batch_local_fits(ocl, A->rows, A->dtype, r.vectors);
    if ((rc = kd_batch_setup(ocl, A, params, b, x, threshold, running, &r, err)) != KD_OK ||
        (rc = kd_batch_confirm(ocl, A, params, &r, report->local, limit, threshold, running, st,
                               truth, results, report, err)) != KD_OK)
        goto done;
    /* x holds the host-answered systems' values: the device's x was uploaded from it */
    rc = kd_batch_collect(ocl, A, params, &r, running, st, truth, x, results, err);
done:
    kd_batch_run_release(&r);
    free(threshold);
    free(running);
    free(st);
    free(truth);
    report->time_ms = (double)(kd_clock_ns() - t0) / 1e6;
    return rc;
}
