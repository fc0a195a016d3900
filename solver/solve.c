/*
 * The solve driver: what every Krylov method shares (solver/methods/method.h says what a method
 * does). kd_solve runs five steps:
 *
 *   setup    check the parameters, set up the preconditioner on the matrix
 *   pack     answer on the host the columns that need no device (NaN/Inf in b or x0, b = 0, a
 *            matrix holding NaN/Inf); pack the rest into k device columns; r = b - A x0; the
 *            method's setup
 *   loop     enqueue iterations in chunks of check_every and read the state after each chunk
 *            through a snapshot on a second queue, two chunks in flight, so the device never
 *            waits for the bus; at each check: statuses, convergence to confirm, history,
 *            progress, cancel and deadline
 *   account  after a stop the host decided (cancel, deadline, callback): each column's count
 *   unpack   r = b - A x once more for every column, its norm, x back to the caller
 *
 * Each column's convergence test is ||r|| = sqrt(r'r) <= max(rtol ||b||, atol), on the true
 * (unpreconditioned) residual, as SciPy's cg does. The device detects convergence, breakdown and
 * non-finite values at the exact iteration they happen, per column, and freezes that column from
 * then on, so the iterations between two checks never change its answer or its iteration count.
 * There is no periodic r = b - A x "refresh" (Shewchuk's every-50-iterations advice): replacing r
 * while keeping the direction perturbs the recurrence, and on the ill-conditioned 494_bus it cost
 * 21% more iterations than SciPy. Instead convergence of the recurrence is confirmed with
 * r = b - A x before it is believed; a column that misses (the recurrence drifts in float32 on
 * ill-conditioned systems) goes on from the true residual (the method's restart), its frozen
 * iterations not counted.
 */
#include "solver/solve.h"
#include "common/clock.h"
#include "solver/comm.h"
#include "solver/formats/format.h"
#include "solver/methods/method.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    case KD_SOLVE_STAGNATED:
        return "stagnated";
    }
    return "unknown";
}

void kd_solve_params_default(kd_solve_params_t *params)
{
    assert(params != NULL);
    memset(params, 0, sizeof(*params));
    params->method = kd_method_table[0];
    params->precond = &kd_precond_none;
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
    double best_miss; /* the best ||b - A x|| of a refuted convergence (INFINITY: none yet) */
    int misses;       /* refutations since best_miss last improved (stagnation) */
} kd_solve_column_t;

/* Everything one kd_solve call holds: the method's view (run) and the driver's own. */
typedef struct kd_solve_ctx {
    kd_solve_run_t run;
    const kd_solve_params_t *params;
    kd_solve_result_t *results; /* nrhs */
    int64_t nrhs, maxiter, check_every;
    size_t colbytes;
    kd_solve_column_t *cols; /* nrhs, of which the first run.k are device columns */
    unsigned char *seen;     /* k: the column ran up to the check being processed */
    int *mask;               /* k: scratch for masks */
    int64_t *iters;          /* k: each seen column's iteration count at the check */
    double *norms;           /* k */
    kd_krylov_column_t *state;
    void *pack;      /* k columns of host staging */
    int64_t it, enq; /* the iteration last checked, the last enqueued */
    kd_krylov_snapshot_t snaps[2];
    kd_multivec_t best_x; /* the best refuted iterates (stagnation), from the first refutation */
    int head, pending;
    uint64_t iterate_start_ns, iterate_end_ns;
    int64_t reductions; /* the method's kd_krylov_reduce calls in its iterations */
    kd_solve_anatomy_t anatomy;
    uint64_t mark_ns; /* the end of the last phase timed */
} kd_solve_ctx_t;

/* The phase that ended now adds its time to *slot (params.time_phases: the device drained first,
 * so its enqueued work counts here). */
static void kd_solve_mark(kd_solve_ctx_t *ctx, double *slot)
{
    if (ctx->params->time_phases && ctx->run.ocl != NULL)
        (void)clFinish(kd_ocl_queue(ctx->run.ocl));
    const uint64_t now = kd_clock_ns();
    *slot += (double)(now - ctx->mark_ns) / 1e6;
    ctx->mark_ns = now;
}

/* t = b - A x for the columns with which[c] (NULL: all). */
static int kd_solve_residual(kd_solve_run_t *run, kd_multivec_t *t, const unsigned char *which,
                             kd_err_t *err)
{
    int rc = kd_multivec_copy(run->ocl, &run->b, t, which, err);
    const kd_solve_spread_t *spread = run->params->spread;
    if (rc == KD_OK && spread != NULL)
        return spread->spmm(spread->ctx, run->ocl, -1.0, &run->x, 1.0, t, which, err);
    if (rc == KD_OK && which == NULL && run->k > 1)
        return kd_matrix_spmm_inner(run->ocl, run->A, -1.0, &run->x, 1.0, t, err);
    for (int64_t c = 0; rc == KD_OK && c < run->k; c++)
        if (which == NULL || which[c])
            rc = kd_matrix_spmv_inner(run->ocl, run->A, -1.0, &run->x.cols[c], 1.0, &t->cols[c],
                                      err);
    return rc;
}

/* ---- setup ----------------------------------------------------------------------------------- */

/* What a solve spread over ranks can run (kd_solve_spread_t). */
static int kd_solve_check_spread(const kd_solve_params_t *p, kd_err_t *err)
{
    const kd_solve_spread_t *s = p->spread;
    if (s->comm == NULL || s->spmm == NULL || s->b_norms == NULL)
        return kd_err_set(err, KD_EINTERNAL, "a spread solve without its comm, SpMV or norms");
    if (!p->method->spreads)
        return kd_err_set(err, KD_EBADREQ,
                          "method %s does not run on a matrix spread over ranks (cg, pcg, cg1 "
                          "and sd do)",
                          p->method->name);
    if ((p->precond->forms & (KD_PRECOND_IDENTITY | KD_PRECOND_DIAGONAL)) == 0)
        return kd_err_set(err, KD_EBADREQ,
                          "preconditioner %s does not run on a matrix spread over ranks (none "
                          "and jacobi do)",
                          p->precond->name);
    return KD_OK;
}

static int kd_solve_check_params(const kd_matrix_t *A, int64_t nrhs, const kd_solve_params_t *p,
                                 kd_err_t *err)
{
    if (p->method == NULL || p->precond == NULL)
        return kd_err_set(err, KD_EBADREQ, "solve needs a method and a preconditioner");
    int rc = kd_method_check_matrix(p->method, A, err);
    if (rc == KD_OK && p->precond->check != NULL)
        rc = p->precond->check(A, kd_method_needs_symmetry(p->method), err);
    if (rc != KD_OK)
        return rc;
    if (p->method->work_vectors > KD_METHOD_WORK_MAX)
        return kd_err_set(err, KD_EINTERNAL, "%s asks for %d work vectors", p->method->name,
                          p->method->work_vectors);
    if (nrhs < 1)
        return kd_err_set(err, KD_EBADREQ, "nrhs = %lld: at least one right-hand side",
                          (long long)nrhs);
    if (!(p->rtol >= 0.0) || !isfinite(p->rtol))
        return kd_err_set(err, KD_EBADREQ, "rtol = %g must be a finite number >= 0", p->rtol);
    if (!(p->atol >= 0.0) || !isfinite(p->atol))
        return kd_err_set(err, KD_EBADREQ, "atol = %g must be a finite number >= 0", p->atol);
    if (p->maxiter < 0 && p->maxiter != KD_SOLVE_MAXITER_AUTO)
        return kd_err_set(err, KD_EBADREQ, "maxiter = %lld is negative", (long long)p->maxiter);
    if (p->check_every < 0)
        return kd_err_set(err, KD_EBADREQ, "check_every = %lld is negative",
                          (long long)p->check_every);
    if (p->passes < 0 || p->passes > 3)
        return kd_err_set(err, KD_EBADREQ, "passes = %d: 0 (automatic), 1, 2 or 3", p->passes);
    if (p->restart < 0 || p->restart > KD_SOLVE_RESTART_MAX)
        return kd_err_set(err, KD_EBADREQ, "restart = %lld: 1..%d (0: the default, %d)",
                          (long long)p->restart, KD_SOLVE_RESTART_MAX, KD_SOLVE_RESTART_DEFAULT);
    if (p->reduction_groups < 0)
        return kd_err_set(err, KD_EBADREQ, "reduction_groups = %lld is negative",
                          (long long)p->reduction_groups);
    if ((p->method->precond_forms & p->precond->forms) == 0)
        return kd_err_set(err, KD_EBADREQ, "method %s takes no preconditioner %s", p->method->name,
                          p->precond->name);
    return p->spread != NULL ? kd_solve_check_spread(p, err) : KD_OK;
}

static int kd_solve_setup(kd_solve_ctx_t *ctx, kd_ocl_t *ocl, kd_matrix_t *A, kd_err_t *err)
{
    const kd_solve_params_t *p = ctx->params;
    int rc = kd_solve_check_params(A, ctx->nrhs, p, err);
    if (rc != KD_OK)
        return rc;
    ctx->run.ocl = ocl;
    ctx->run.A = A;
    ctx->run.method = p->method;
    ctx->run.params = p;
    kd_matrix_t *from = p->precond_matrix != NULL ? p->precond_matrix : A;
    if (from != A && (from->rows != A->rows || from->cols != A->cols || from->dtype != A->dtype))
        return kd_err_set(err, KD_EINTERNAL,
                          "a preconditioner of a %lld x %lld %s matrix for a %lld x %lld %s one",
                          (long long)from->rows, (long long)from->cols, kd_dtype_name(from->dtype),
                          (long long)A->rows, (long long)A->cols, kd_dtype_name(A->dtype));
    if ((rc = kd_precond_get(ocl, from, p->precond, p->precond_options, from == A ? p->csr : NULL,
                             &ctx->run.precond, err)) != KD_OK)
        return rc;
    if (p->spread != NULL && ctx->run.precond->diagonal == NULL &&
        ctx->run.precond->ops->apply != NULL)
        return kd_err_set(err, KD_EBADREQ,
                          "preconditioner %s is an operator here: it does not "
                          "run on a matrix spread over ranks",
                          p->precond->name);
    ctx->colbytes = (size_t)A->rows * kd_dtype_size(A->dtype);
    const int64_t rows = p->spread != NULL ? p->spread->rows : A->rows;
    ctx->maxiter =
        p->maxiter == KD_SOLVE_MAXITER_AUTO ? KD_SOLVE_MAXITER_PER_ROW * rows : p->maxiter;
    /* maxiter up to 2^63 - 1 is no more than "never stop counting": the limit plus a column's
     * skipped iterations and a chunk must not overflow */
    if (ctx->maxiter > INT64_MAX / 4)
        ctx->maxiter = INT64_MAX / 4;
    if (p->spread != NULL)
        p->spread->comm->stop_wanted = p->spread->comm->stop_agreed = 0;
    if ((ctx->cols = calloc((size_t)ctx->nrhs, sizeof(*ctx->cols))) == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld right-hand sides",
                          (long long)ctx->nrhs);
    return KD_OK;
}

/* ---- pack ------------------------------------------------------------------------------------ */

/* One pass over a host array: the first NaN/Inf's index (-1: none), and the sum of squares and
 * the largest magnitude of the values before it, in double. Typed loops: at 1M rows the generic
 * per-element load made b's scans 4.7 ms of a 31 ms solve on an H200. */
#define KD_SOLVE_SCAN(T)                                                                           \
    do {                                                                                           \
        const T *p = v;                                                                            \
        for (int64_t i = 0; i < n; i++) {                                                          \
            const double x = (double)p[i];                                                         \
            if (!isfinite(x))                                                                      \
                return i;                                                                          \
            const double a = fabs(x);                                                              \
            ss += x * x;                                                                           \
            vmax = a > vmax ? a : vmax;                                                            \
        }                                                                                          \
    } while (0)

static int64_t kd_solve_scan(const void *v, kd_dtype_t t, int64_t n, double *sum_squares,
                             double *max_abs)
{
    double ss = 0.0, vmax = 0.0;
    *sum_squares = *max_abs = 0.0;
    if (t == KD_DTYPE_F64)
        KD_SOLVE_SCAN(double);
    else
        KD_SOLVE_SCAN(float);
    *sum_squares = ss;
    *max_abs = vmax;
    return -1;
}

/* ||v|| from its scan: sqrt of the sum of squares, unless that over- or underflowed (huge or
 * tiny finite values), then again scaled by max |v_i|. */
static double kd_solve_norm(const void *v, kd_dtype_t t, int64_t n, double ss, double vmax)
{
    if (vmax == 0.0)
        return 0.0;
    if (isfinite(ss) && ss >= 1e-280 && vmax <= 1e150)
        return sqrt(ss);
    double scaled = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double vi = kd_load_real(v, t, (size_t)i) / vmax;
        scaled += vi * vi;
    }
    return vmax * sqrt(scaled);
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

/* Host-side answers that need no device: NaN/Inf in b or x0, b = 0, NaN/Inf in the matrix.
 * Returns 1 when the column is answered (x written), 0 when it needs the device. */
static int kd_solve_answer_on_host(const kd_matrix_t *A, const void *b, const void *x0, void *x,
                                   int record_history, kd_solve_result_t *res, int64_t *cap)
{
    const kd_dtype_t dtype = A->dtype;
    const int64_t n = A->rows;
    double ss, vmax, ss0, vmax0;
    int64_t bad = kd_solve_scan(b, dtype, n, &ss, &vmax);
    const char *bad_name = "b", *bad_what = "the right-hand side";
    const void *bad_array = b;
    if (bad < 0 && x0 != NULL) {
        bad = kd_solve_scan(x0, dtype, n, &ss0, &vmax0);
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
        res->b_norm = kd_solve_norm(b, dtype, n, ss, vmax);
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

/*
 * Iterations between checks when the caller leaves it to us. A check costs the device one tiny
 * kernel (the state is packed and read on a second queue while the iterations go on) and the host
 * one wake-up; the host runs at most two chunks behind, so after convergence up to two chunks of
 * frozen iterations (only the SpMV of a frozen right-hand side runs) are wasted. Large systems
 * check every 4 iterations, smaller ones, where an iteration is a few launches and little else,
 * every 8 or 16. With an operator preconditioner (AMG: an iteration is a whole V-cycle, even for
 * a frozen column) every iteration is checked: at most two iterations are wasted.
 */
static int64_t kd_solve_auto_check_every(int64_t rows, int64_t nnz, int64_t k,
                                         const kd_precond_t *P)
{
    if (P->diagonal == NULL && P->ops->apply != NULL)
        return 1;
    double work = ((double)nnz + 10.0 * (double)rows) * (double)k;
    if (work >= 1048576.0)
        return 4;
    if (work >= 65536.0)
        return 8;
    return 16;
}

/* The automatic check interval, from the whole matrix's size (the same on every rank). */
static int64_t kd_solve_params_check_every(const kd_solve_ctx_t *ctx)
{
    const kd_solve_spread_t *s = ctx->params->spread;
    const kd_matrix_t *A = ctx->run.A;
    return kd_solve_auto_check_every(s != NULL ? s->rows : A->rows, s != NULL ? s->nnz : A->nnz,
                                     ctx->run.k, ctx->run.precond);
}

/* The columns the host cannot answer become device columns 0..k-1. */
static void kd_solve_pick_columns(kd_solve_ctx_t *ctx, const void *b, const void *x0, void *x)
{
    const kd_matrix_t *A = ctx->run.A;
    for (int64_t j = 0; j < ctx->nrhs; j++) {
        const void *bj = (const char *)b + (size_t)j * ctx->colbytes;
        const void *x0j = x0 != NULL ? (const char *)x0 + (size_t)j * ctx->colbytes : NULL;
        void *xj = (char *)x + (size_t)j * ctx->colbytes;
        int64_t cap = 0;
        ctx->results[j].maxiter = ctx->maxiter;
        if (ctx->params->spread != NULL) /* the caller answered what the host can, alike */
            ctx->results[j].b_norm = ctx->params->spread->b_norms[j];
        else if (kd_solve_answer_on_host(A, bj, x0j, xj, ctx->params->record_history,
                                         &ctx->results[j], &cap))
            continue;
        kd_solve_column_t *col = &ctx->cols[ctx->run.k++];
        col->rhs = j;
        col->tol = fmax(ctx->params->rtol * ctx->results[j].b_norm, ctx->params->atol);
        col->threshold =
            A->dtype == KD_DTYPE_F32 ? (double)(float)(col->tol * col->tol) : col->tol * col->tol;
        col->history_cap = cap;
        col->best_miss = INFINITY;
    }
}

/* The k device columns' host and device memory. */
static int kd_solve_alloc(kd_solve_ctx_t *ctx, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    const int64_t k = run->k, n = run->A->rows;
    const kd_dtype_t dtype = run->A->dtype;
    if ((run->active = malloc((size_t)k)) == NULL || (ctx->seen = calloc((size_t)k, 1)) == NULL ||
        (ctx->mask = calloc((size_t)k, sizeof(int))) == NULL ||
        (ctx->iters = calloc((size_t)k, sizeof(int64_t))) == NULL ||
        (ctx->norms = calloc((size_t)k, sizeof(double))) == NULL ||
        (ctx->state = calloc((size_t)k, sizeof(*ctx->state))) == NULL ||
        (!(ctx->run.A->order.perm == NULL && k == ctx->nrhs) && /* kd_solve_direct: no staging */
         (ctx->pack = malloc((size_t)k * ctx->colbytes + 1)) == NULL))
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld vectors of %lld values",
                          (long long)k, (long long)n);
    memset(run->active, 1, (size_t)k);
    kd_multivec_t *vectors[4 + KD_METHOD_WORK_MAX] = {&run->b, &run->x, &run->r, &run->q};
    int count = 4;
    for (int i = 0; i < run->method->work_vectors; i++)
        vectors[count++] = &run->work[i];
    for (int i = 0; i < count; i++) {
        int rc = kd_multivec_alloc(run->ocl, n, k, dtype, vectors[i], err);
        if (rc != KD_OK)
            return rc;
    }
    double *thresholds = malloc((size_t)k * sizeof(double));
    if (thresholds == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld thresholds", (long long)k);
    for (int64_t c = 0; c < k; c++)
        thresholds[c] = ctx->cols[c].threshold;
    int rc = kd_krylov_init(run->ocl, dtype, n, run->b.ld, k, ctx->params->reduction_groups,
                            thresholds, ctx->maxiter, run->precond->diagonal,
                            ctx->params->kernel_options, &run->kr, err);
    free(thresholds);
    if (rc == KD_OK && ctx->params->spread != NULL)
        run->kr.comm = ctx->params->spread->comm;
    return rc;
}

/* One column between the caller's order and the matrix's: a reordered matrix (matrix.h) is
 * solved in its permuted order, b and x0 permuted in once and x out once (perm[new] = old). */
static void kd_solve_permute_column(const kd_matrix_t *A, const char *from, char *to, int out)
{
    const size_t v = kd_dtype_size(A->dtype);
    const int32_t *perm = A->order.perm;
    if (perm == NULL) {
        memcpy(to, from, (size_t)A->rows * v);
        return;
    }
    for (int64_t i = 0; i < A->rows; i++) {
        size_t at = (size_t)i * v, there = (size_t)perm[i] * v;
        memcpy(to + (out ? there : at), from + (out ? at : there), v);
    }
}

/* The caller's arrays can go to and from the device as they are: no ordering to apply, and
 * every right-hand side is a device column, in order (none was answered on the host). */
static int kd_solve_direct(const kd_solve_ctx_t *ctx)
{
    return ctx->run.A->order.perm == NULL && ctx->run.k == ctx->nrhs;
}

/* Column c of the caller's array `from` (NULL: zeros) into device multivector `to`. */
static int kd_solve_write_columns(kd_solve_ctx_t *ctx, const void *from, kd_multivec_t *to,
                                  kd_err_t *err)
{
    const int64_t k = ctx->run.k;
    if (from != NULL && kd_solve_direct(ctx))
        return kd_multivec_write(ctx->run.ocl, to, from, err); /* no staging copy */
    if (from == NULL) /* x0 = 0: filled on the device, not written on the host and sent */
        return kd_multivec_zero(ctx->run.ocl, to, err);
    for (int64_t c = 0; c < k; c++) {
        char *dst = (char *)ctx->pack + (size_t)c * ctx->colbytes;
        kd_solve_permute_column(
            ctx->run.A, (const char *)from + (size_t)ctx->cols[c].rhs * ctx->colbytes, dst, 0);
    }
    return kd_multivec_write(ctx->run.ocl, to, ctx->pack, err);
}

static int kd_solve_pack(kd_solve_ctx_t *ctx, const void *b, const void *x0, void *x, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    kd_solve_pick_columns(ctx, b, x0, x);
    kd_solve_mark(ctx, &ctx->anatomy.host_ms);
    if (run->k == 0)
        return KD_OK;
    ctx->check_every =
        ctx->params->check_every > 0 ? ctx->params->check_every : kd_solve_params_check_every(ctx);
    int rc = kd_solve_alloc(ctx, err);
    kd_solve_mark(ctx, &ctx->anatomy.alloc_ms);
    if (rc != KD_OK)
        return rc;
    /* Fused by default on a GPU for one column; for several, the SpMM launch reads the matrix
     * once for all of them where the fused passes would read it once per column. */
    const int fuse =
        ctx->params->spmv_fusion != 0
            ? ctx->params->spmv_fusion == KD_SOLVE_FUSION_ON
            : kd_ocl_desc(run->ocl)->is_gpu && (run->k == 1 || !kd_matrix_has_spmm(run->A));
    run->csr = fuse ? kd_format_csr_scalar_arrays(run->A) : NULL;
    if ((rc = kd_solve_write_columns(ctx, b, &run->b, err)) != KD_OK ||
        (rc = kd_solve_write_columns(ctx, x0, &run->x, err)) != KD_OK)
        return rc;
    kd_solve_mark(ctx, &ctx->anatomy.upload_ms);
    if ((rc = kd_solve_residual(run, &run->r, NULL, err)) != KD_OK ||
        (rc = run->method->setup(run, err)) != KD_OK)
        return rc;
    kd_solve_mark(ctx, &ctx->anatomy.start_ms);
    if (run->chunked && ctx->params->check_every <= 0)
        ctx->check_every = KD_SOLVE_SMALL_CHECK; /* one launch per check: make it a long one */
    return KD_OK;
}

/* ---- loop ------------------------------------------------------------------------------------ */

/* Enqueue iteration `it` of every column; nothing waits. */
static int kd_solve_iterate(kd_solve_ctx_t *ctx, int64_t it, int flush, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    const int64_t before = run->kr.reductions;
    int rc = run->method->iterate(run, it, err);
    ctx->reductions += run->kr.reductions - before;
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

/* The state after ctx->it (in ctx->state), column by column: a final status, a convergence to
 * confirm (its mask set), or the limit. Returns whether any column asks for confirmation. */
static int kd_solve_read_columns(kd_solve_ctx_t *ctx)
{
    const int64_t it = ctx->it;
    int confirm = 0;
    for (int64_t c = 0; c < ctx->run.k; c++) {
        kd_solve_column_t *col = &ctx->cols[c];
        kd_solve_result_t *res = &ctx->results[col->rhs];
        const kd_krylov_column_t *st = &ctx->state[c];
        /* A snapshot read before the column's restart says nothing about it now. */
        ctx->seen[c] = !col->done && it >= col->fresh_from;
        ctx->mask[c] = 0;
        ctx->iters[c] = it - col->skip;
        ctx->norms[c] = sqrt(st->rr);
        if (!ctx->seen[c])
            continue;
        if (ctx->run.method->check(&ctx->run, st, col->skip, res)) {
            col->done = 1;
        } else if (st->status == KD_KRYLOV_CONVERGED) {
            col->converged_at = st->iteration;
            ctx->mask[c] = KD_KRYLOV_MASK_PARTIALS;
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
            /* Converged at this check, before the device's next iteration says so. */
            col->converged_at = it;
            ctx->mask[c] = KD_KRYLOV_MASK_PARTIALS;
            confirm = 1;
        } else if (st->status == KD_KRYLOV_STOPPED || it - col->skip >= ctx->maxiter) {
            res->status = KD_SOLVE_MAX_ITERATIONS;
            res->iterations = ctx->maxiter;
            col->done = 1;
        }
    }
    return confirm;
}

/* What a refuted convergence does to the column's best iterate (kd_solve_stagnated). */
enum { KD_SOLVE_BEST_KEEP = 0, KD_SOLVE_BEST_SAVE = 1, KD_SOLVE_BEST_RESTORE = 2 };

/* A refuted convergence with true residual `truth`: whether the column has stagnated
 * (KD_SOLVE_STAGNATION_MISSES refutations without shrinking the best one's gap to the tolerance
 * by the factor KD_SOLVE_STAGNATION_GAIN);
 * if so its result says so, with the accuracy reached. *best: SAVE when x is the best refuted
 * iterate so far, RESTORE when the column stagnated on a worse x than that best. */
static int kd_solve_stagnated(const kd_solve_ctx_t *ctx, kd_solve_column_t *col, double truth,
                              kd_solve_result_t *res, int *best)
{
    *best = KD_SOLVE_BEST_KEEP;
    /* progress is the gap to the tolerance closing: a miss just above it (GMRES on watt_2 in
     * double, 1.0000x the tolerance each time) still counts while the gap shrinks */
    if (truth - col->tol < KD_SOLVE_STAGNATION_GAIN * (col->best_miss - col->tol)) {
        col->best_miss = truth;
        col->misses = 0;
        *best = KD_SOLVE_BEST_SAVE;
        return 0;
    }
    if (++col->misses < KD_SOLVE_STAGNATION_MISSES)
        return 0;
    /* x ends as the best refuted iterate: a stall is not a licence to return a worse one */
    if (truth > col->best_miss) {
        *best = KD_SOLVE_BEST_RESTORE;
        truth = col->best_miss;
    }
    res->status = KD_SOLVE_STAGNATED;
    snprintf(res->message, sizeof(res->message),
             "stagnated at ||r|| / ||b|| = %.3g after %lld iterations (tolerance %.3g): %lld "
             "restarts from b - A x, the last %d not beating %.3g: %s's limit on this A (or b "
             "is outside its range)",
             truth / res->b_norm, (long long)res->iterations, col->tol / res->b_norm,
             (long long)res->restarts, col->misses, col->best_miss / res->b_norm,
             kd_dtype_name(ctx->run.A->dtype));
    return 1;
}

/* x into ctx->best_x where best[c] is SAVE (allocated at the first), back where RESTORE. */
static int kd_solve_keep_best(kd_solve_ctx_t *ctx, const int *best, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    unsigned char *which = run->active; /* scratch: kd_solve_report resets it */
    int rc = KD_OK;
    if (ctx->best_x.mem == NULL)
        rc = kd_multivec_alloc(run->ocl, run->A->rows, run->k, run->A->dtype, &ctx->best_x, err);
    for (int64_t c = 0; c < run->k; c++)
        which[c] = best[c] == KD_SOLVE_BEST_SAVE;
    if (rc == KD_OK)
        rc = kd_multivec_copy(run->ocl, &run->x, &ctx->best_x, which, err);
    for (int64_t c = 0; c < run->k; c++)
        which[c] = best[c] == KD_SOLVE_BEST_RESTORE;
    if (rc == KD_OK)
        rc = kd_multivec_copy(run->ocl, &ctx->best_x, &run->x, which, err);
    return rc;
}

/*
 * The recurrence says converged for the masked columns: confirm with ||b - A x|| (in q, which the
 * next SpMV overwrites; x is frozen since the convergence). A miss goes on from the true residual
 * (the method's restart) from iteration ctx->enq, with its limit moved by the frozen iterations.
 */
static int kd_solve_confirm(kd_solve_ctx_t *ctx, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    const int64_t k = run->k;
    unsigned char *which = run->active;
    double *truth = malloc((size_t)k * sizeof(double));
    int *best = calloc((size_t)k, sizeof(int)), keep_any = 0;
    if (truth == NULL || best == NULL) {
        free(truth);
        free(best);
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    }
    for (int64_t c = 0; c < k; c++)
        which[c] = ctx->mask[c] != 0;
    int rc = kd_solve_residual(run, &run->q, which, err);
    if (rc == KD_OK)
        rc = kd_krylov_norms(&run->kr, &run->q, ctx->mask, truth, err);
    int restart = 0;
    for (int64_t c = 0; rc == KD_OK && c < k; c++) {
        kd_solve_column_t *col = &ctx->cols[c];
        kd_solve_result_t *res = &ctx->results[col->rhs];
        if (!ctx->mask[c])
            continue;
        ctx->norms[c] = sqrt(truth[c]);
        res->iterations = col->converged_at - col->skip;
        ctx->iters[c] = res->iterations;
        if (truth[c] <= col->threshold) {
            res->status = KD_SOLVE_CONVERGED;
            col->done = 1;
            ctx->mask[c] = 0;
            continue;
        }
        res->restarts++;
        if (res->iterations >= ctx->maxiter) {
            res->status = KD_SOLVE_MAX_ITERATIONS;
            col->done = 1;
            ctx->mask[c] = 0;
            continue;
        }
        const int stalled = kd_solve_stagnated(ctx, col, ctx->norms[c], res, &best[c]);
        keep_any |= best[c];
        if (stalled) {
            col->done = 1;
            ctx->mask[c] = 0;
            continue;
        }
        /* Frozen since converged_at, running again from enq: those iterations do not count. */
        col->skip += ctx->enq - col->converged_at;
        col->fresh_from = ctx->enq + 1;
        rc = kd_krylov_set_limit(&run->kr, c, ctx->maxiter + col->skip, err);
        ctx->mask[c] = KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART;
        restart = 1;
    }
    free(truth);
    if (rc == KD_OK && keep_any)
        rc = kd_solve_keep_best(ctx, best, err);
    free(best);
    if (rc == KD_OK && restart) {
        for (int64_t c = 0; c < k; c++)
            which[c] = ctx->mask[c] != 0;
        rc = kd_multivec_copy(run->ocl, &run->q, &run->r, which, err);
        if (rc == KD_OK)
            rc = run->method->restart(run, ctx->mask, ctx->enq, err);
    }
    return rc;
}

/* After a check: which columns still run, the history, and the column furthest from its
 * tolerance among those seen (*worst, -1 if none). Returns the number still running. */
static int kd_solve_report(kd_solve_ctx_t *ctx, int64_t *worst, kd_err_t *err)
{
    int running = 0;
    double worst_ratio = -1.0;
    *worst = -1;
    for (int64_t c = 0; c < ctx->run.k; c++) {
        kd_solve_column_t *col = &ctx->cols[c];
        ctx->run.active[c] = !col->done;
        running += !col->done;
        if (!ctx->seen[c])
            continue;
        if (ctx->params->record_history &&
            kd_solve_history_push(&ctx->results[col->rhs], &col->history_cap, ctx->norms[c]) !=
                KD_OK)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for the residual history");
        double ratio = col->tol > 0.0 ? ctx->norms[c] / col->tol : ctx->norms[c];
        if (*worst < 0 || !(ratio <= worst_ratio)) {
            *worst = c;
            worst_ratio = ratio;
        }
    }
    return running;
}

/* Spread over ranks: this rank's reason to stop rides on the next reduction, and the ranks stop
 * on what they agreed as of the last one, all at the same check. */
static int kd_solve_stop_agreed(kd_solve_ctx_t *ctx, int64_t worst, int progress_stop,
                                kd_err_t *err)
{
    const kd_solve_params_t *p = ctx->params;
    kd_comm_t *comm = p->spread->comm;
    if (progress_stop || (p->cancel != NULL && atomic_load(p->cancel) != 0))
        comm->stop_wanted = KD_ECANCELLED;
    else if (p->deadline_ns != 0 && kd_clock_ns() >= p->deadline_ns && comm->stop_wanted == 0)
        comm->stop_wanted = KD_ETIMEOUT;
    if (comm->stop_agreed == KD_ECANCELLED)
        return kd_err_set(err, KD_ECANCELLED, "solve cancelled at iteration %lld",
                          (long long)ctx->enq);
    if (comm->stop_agreed == KD_ETIMEOUT)
        return kd_err_set(err, KD_ETIMEOUT,
                          "solve passed its deadline at iteration %lld (||r|| = %g)",
                          (long long)ctx->enq, worst >= 0 ? ctx->norms[worst] : NAN);
    return KD_OK;
}

/* A stop the host decides at a check while columns run: the progress callback (which also sees
 * the last check, when none runs), the cancel flag, the deadline. Returns KD_OK to go on, else
 * the code, with err set. */
static int kd_solve_stop_reason(kd_solve_ctx_t *ctx, int64_t worst, int running, kd_err_t *err)
{
    const kd_solve_params_t *p = ctx->params;
    int progress_stop = 0;
    if (p->progress != NULL && worst >= 0) {
        const kd_solve_column_t *col = &ctx->cols[worst];
        int64_t iters = col->done ? ctx->results[col->rhs].iterations : ctx->iters[worst];
        progress_stop = p->progress(p->progress_ctx, col->rhs, iters, ctx->norms[worst]);
    }
    if (running == 0)
        return KD_OK;
    if (p->spread != NULL)
        return kd_solve_stop_agreed(ctx, worst, progress_stop, err);
    if (progress_stop)
        return kd_err_set(err, KD_ECANCELLED,
                          "solve cancelled by its progress callback at iteration %lld",
                          (long long)ctx->enq);
    if (p->cancel != NULL && atomic_load(p->cancel) != 0)
        return kd_err_set(err, KD_ECANCELLED, "solve cancelled at iteration %lld",
                          (long long)ctx->enq);
    if (p->deadline_ns != 0 && kd_clock_ns() >= p->deadline_ns)
        return kd_err_set(err, KD_ETIMEOUT,
                          "solve passed its deadline at iteration %lld (||r|| = %g)",
                          (long long)ctx->enq, worst >= 0 ? ctx->norms[worst] : NAN);
    return KD_OK;
}

/* Keep two chunks of iterations in flight, each followed by its snapshot's read. */
static int kd_solve_enqueue_chunks(kd_solve_ctx_t *ctx, kd_err_t *err)
{
    while (ctx->pending < 2) {
        int64_t reach = ctx->enq; /* the furthest a running column may go */
        for (int64_t c = 0; c < ctx->run.k; c++)
            if (!ctx->cols[c].done && ctx->maxiter + ctx->cols[c].skip > reach)
                reach = ctx->maxiter + ctx->cols[c].skip;
        const int64_t chunk =
            ctx->check_every < reach - ctx->enq ? ctx->check_every : reach - ctx->enq;
        if (chunk <= 0)
            break;
        if (ctx->run.chunked) {
            int rc = ctx->run.method->iterate_chunk(&ctx->run, ctx->enq + 1, chunk, err);
            if (rc != KD_OK)
                return rc;
            ctx->reductions += (int64_t)ctx->run.method->reductions * chunk;
        }
        for (int64_t i = ctx->enq + 1; !ctx->run.chunked && i <= ctx->enq + chunk; i++) {
            int rc = kd_solve_iterate(ctx, i, (i - ctx->enq - 1) % 4 == 0, err);
            if (rc != KD_OK)
                return rc;
        }
        ctx->enq += chunk;
        int rc = kd_krylov_read_start(&ctx->run.kr, ctx->enq,
                                      &ctx->snaps[(ctx->head + ctx->pending) % 2], err);
        if (rc != KD_OK)
            return rc;
        ctx->pending++;
    }
    if (ctx->pending == 0)
        return kd_err_set(err, KD_EINTERNAL, "solve: columns running with nothing to run");
    return KD_OK;
}

/*
 * The host checks the state after iteration ctx->it while the device runs ahead: up to two chunks
 * are enqueued beyond the last check (ctx->enq is the last iteration enqueued). A column's
 * decisions happen on the device at the exact iteration (limits included); what the host changes
 * (restarts) applies at ctx->enq. Returns an error, or KD_OK with *stopped the host's own stop
 * (KD_OK when every column finished).
 */
static int kd_solve_loop(kd_solve_ctx_t *ctx, int *stopped, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    int rc;
    *stopped = KD_OK;
    if ((rc = kd_krylov_snapshot_init(&run->kr, &ctx->snaps[0], 0, err)) != KD_OK ||
        (rc = kd_krylov_snapshot_init(&run->kr, &ctx->snaps[1], 1, err)) != KD_OK ||
        (rc = kd_krylov_read(&run->kr, 0, ctx->state, err)) != KD_OK)
        return rc;
    ctx->iterate_start_ns = ctx->iterate_end_ns = kd_clock_ns();
    for (;; ctx->anatomy.checks++) {
        int64_t worst;
        if (kd_solve_read_columns(ctx) && (rc = kd_solve_confirm(ctx, err)) != KD_OK)
            return rc;
        int running = kd_solve_report(ctx, &worst, err);
        if (running < 0)
            return running;
        int stop = kd_solve_stop_reason(ctx, worst, running, err);
        if (running == 0)
            return KD_OK;
        if (stop != KD_OK) {
            *stopped = stop;
            return KD_OK;
        }
        if ((rc = kd_solve_enqueue_chunks(ctx, err)) != KD_OK ||
            (rc = kd_krylov_read_finish(&run->kr, &ctx->snaps[ctx->head], ctx->state, err)) !=
                KD_OK)
            return rc;
        ctx->it = ctx->snaps[ctx->head].iteration;
        ctx->head ^= 1;
        ctx->pending--;
        ctx->iterate_end_ns = kd_clock_ns();
        if (ctx->params->yield != NULL) /* the next chunk runs meanwhile */
            ctx->params->yield(ctx->params->yield_ctx);
    }
}

/* ---- account, unpack ------------------------------------------------------------------------- */

/* Stopped with iterations in flight: x is the iterate after ctx->enq; say so per column. */
static int kd_solve_account(kd_solve_ctx_t *ctx, kd_err_t *err)
{
    int rc = kd_krylov_read(&ctx->run.kr, ctx->enq, ctx->state, err);
    for (int64_t c = 0; rc == KD_OK && c < ctx->run.k; c++) {
        const kd_solve_column_t *col = &ctx->cols[c];
        const kd_krylov_column_t *st = &ctx->state[c];
        if (col->done)
            continue;
        kd_solve_result_t *res = &ctx->results[col->rhs];
        res->status = KD_SOLVE_MAX_ITERATIONS;
        res->iterations = ctx->enq - col->skip;
        if (st->status == KD_KRYLOV_CONVERGED || st->status == KD_KRYLOV_STOPPED ||
            st->status == KD_KRYLOV_NON_FINITE_RESIDUAL)
            res->iterations = st->iteration - col->skip;
        else if (st->status != KD_KRYLOV_RUNNING)
            res->iterations = st->iteration - 1 - col->skip;
    }
    return rc;
}

/* The truthful numbers: r = b - A x from scratch for every column, and x to the caller. */
static int kd_solve_unpack(kd_solve_ctx_t *ctx, void *x, kd_err_t *err)
{
    kd_solve_run_t *run = &ctx->run;
    int rc;
    if ((rc = kd_solve_residual(run, &run->q, NULL, err)) != KD_OK ||
        (rc = kd_krylov_norms(&run->kr, &run->q, NULL, ctx->norms, err)) != KD_OK)
        return rc;
    kd_solve_mark(ctx, &ctx->anatomy.final_ms);
    const int direct = kd_solve_direct(ctx);
    if ((rc = kd_multivec_read(run->ocl, &run->x, direct ? x : ctx->pack, err)) != KD_OK)
        return rc;
    for (int64_t c = 0; c < run->k; c++) {
        kd_solve_result_t *res = &ctx->results[ctx->cols[c].rhs];
        if (!direct)
            kd_solve_permute_column(run->A, (const char *)ctx->pack + (size_t)c * ctx->colbytes,
                                    (char *)x + (size_t)ctx->cols[c].rhs * ctx->colbytes, 1);
        res->residual_norm = sqrt(ctx->norms[c]);
        res->relative_residual = res->residual_norm / res->b_norm;
        res->iterate_ms = (double)(ctx->iterate_end_ns - ctx->iterate_start_ns) / 1e6;
        res->spmv_fused = run->fused;
        res->chunked = run->chunked;
        res->reductions_per_iteration =
            ctx->enq > 0 ? (double)ctx->reductions / (double)ctx->enq : 0.0;
    }
    kd_solve_mark(ctx, &ctx->anatomy.download_ms);
    return KD_OK;
}

static void kd_solve_ctx_release(kd_solve_ctx_t *ctx)
{
    kd_solve_run_t *run = &ctx->run;
    kd_krylov_snapshot_release(&ctx->snaps[0]);
    kd_krylov_snapshot_release(&ctx->snaps[1]);
    if (run->method != NULL && run->method->finish != NULL)
        run->method->finish(run);
    if (run->precond != NULL && run->precond->ops->finish != NULL)
        run->precond->ops->finish(run->precond);
    kd_krylov_release(&run->kr);
    kd_multivec_release(&run->b);
    kd_multivec_release(&run->x);
    kd_multivec_release(&run->r);
    kd_multivec_release(&run->q);
    kd_multivec_release(&ctx->best_x);
    for (int i = 0; i < KD_METHOD_WORK_MAX; i++)
        kd_multivec_release(&run->work[i]);
    free(run->active);
    free(ctx->cols);
    free(ctx->seen);
    free(ctx->mask);
    free(ctx->iters);
    free(ctx->norms);
    free(ctx->state);
    free(ctx->pack);
}

int kd_solve(kd_ocl_t *ocl, kd_matrix_t *A, int64_t nrhs, const void *b, const void *x0, void *x,
             const kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && b != NULL && x != NULL && params != NULL);
    assert(results != NULL);
    const uint64_t start_ns = kd_clock_ns();
    kd_solve_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    kd_solve_params_t spread_params;
    if (params->spread != NULL) { /* the halo exchange sits between the SpMV and the passes */
        spread_params = *params;
        spread_params.spmv_fusion = KD_SOLVE_FUSION_OFF;
        spread_params.small = KD_SOLVE_SMALL_OFF;
        params = &spread_params;
    }
    ctx.params = params;
    ctx.results = results;
    ctx.nrhs = nrhs;
    if (nrhs > 0)
        memset(results, 0, (size_t)nrhs * sizeof(*results));
    int stopped = KD_OK;
    ctx.mark_ns = start_ns;
    int rc = kd_solve_setup(&ctx, ocl, A, err);
    kd_solve_mark(&ctx, &ctx.anatomy.setup_ms);
    if (rc == KD_OK)
        rc = kd_solve_pack(&ctx, b, x0, x, err);
    if (rc == KD_OK && ctx.run.k > 0) {
        rc = kd_solve_loop(&ctx, &stopped, err);
        if (rc == KD_OK && stopped != KD_OK)
            rc = kd_solve_account(&ctx, err);
        kd_solve_mark(&ctx, &ctx.anatomy.iterate_ms);
        if (rc == KD_OK)
            rc = kd_solve_unpack(&ctx, x, err);
        if (rc == KD_OK)
            rc = stopped;
    }
    if (rc != KD_OK && rc != stopped)
        (void)clFinish(kd_ocl_queue(ocl));
    for (int64_t j = 0; j < nrhs; j++) {
        results[j].time_ms = kd_clock_ms_since(start_ns);
        results[j].anatomy = ctx.anatomy;
    }
    kd_solve_ctx_release(&ctx);
    return rc;
}
