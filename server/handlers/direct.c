/*
 * `solve` with method "direct" (issue 37): the matrix's LU or Cholesky factorisation on the host
 * (solver/direct/direct.h), made on its first direct solve and kept with the device matrix (freed
 * with it, like a preconditioner's setup), then triangular solves for every right-hand side of the
 * request. The factorisation and the solves run on a helper thread while the device worker
 * serves the SpMV requests queued meanwhile (kd_spmv_yield, as at a Krylov solve's checks) and
 * Krylov solves, one at a time, so a long factorisation blocks neither the event loop nor the
 * SpMVs and Krylov solves of other matrices. The factor's
 * estimated size is charged to --factor-memory before it is computed. Never batched with other
 * solves: each request's right-hand sides are solved at once already.
 */
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/recycle.h"
#include "server/handlers/direct.h"
#include "server/handlers/handlers.h"
#include "server/handlers/spmv.h"
#include "solver/direct/direct.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_DIRECT_POLL_NS 1000000 /* the worker looks for SpMV requests this often meanwhile */
/* Work this small runs on the worker itself: a thread's start and wake-up cost more than it (up
 * to milliseconds on a loaded machine, measured on 494_bus: 0.05 ms of solve, 1-4 ms handed
 * over), and it delays no SpMV by more than a fraction of a millisecond. */
#define KD_DIRECT_INLINE_NNZ 32768 /* factorisations of matrices with fewer entries */
#define KD_DIRECT_INLINE_SOLVE ((int64_t)1 << 20) /* solves of factor entries x columns */

/* One piece of host work on the helper thread. */
typedef struct kd_direct_task {
    int (*fn)(struct kd_direct_task *t);
    kd_err_t err;
    int rc;
    /* factor */
    const kd_csr_t *csr;
    int looks_spd;
    const kd_direct_ops_t *ops;
    kd_direct_budget_t *budget;
    kd_direct_t *D;
    kd_direct_info_t info;
    /* refactor */
    kd_direct_t *like;
    int like_spent;
    /* solve */
    int64_t nrhs;
    const double *B;
    double *X, *norms;
    int *refinements;
    /* the handshake */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} kd_direct_task_t;

static int kd_direct_task_factor(kd_direct_task_t *t)
{
    return kd_direct_factor(t->csr, t->looks_spd, t->ops, t->budget, &t->D, &t->info, &t->err);
}

static int kd_direct_task_refactor(kd_direct_task_t *t)
{
    return kd_direct_refactor(t->like, t->csr, t->budget, &t->D, &t->info, &t->like_spent, &t->err);
}

static int kd_direct_task_solve(kd_direct_task_t *t)
{
    return kd_direct_solve(t->D, t->nrhs, t->B, t->X, t->norms, t->refinements, &t->err);
}

static void *kd_direct_thread(void *arg)
{
    kd_direct_task_t *t = arg;
    t->rc = t->fn(t);
    pthread_mutex_lock(&t->mu);
    t->done = 1;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

/* A Krylov solve queued meanwhile (not a direct one, not one waiting for device memory). */
static int kd_direct_match_solve(void *arg, const kd_job_t *job)
{
    int *blocked = arg;
    if (*blocked || job->req->method != KD_METHOD_SOLVE)
        return 0;
    if (job->mem_wait_ns != 0) { /* it waits for what requests in flight hold: after them */
        *blocked = 1;
        return 0;
    }
    return strcmp(job->req->u.solve.method, KD_METHOD_DIRECT) != 0;
}

/* While the helper thread works: the SpMV requests queued, and one Krylov solve, each served on
 * the worker as if it had taken them (a solve run here serves SpMVs at its checks, no solve). */
static void kd_direct_serve(kd_server_t *server)
{
    kd_spmv_yield(server);
    if (server->direct_serving > 0 || server->solve_alone > 0)
        return;
    kd_job_t *job;
    int blocked = 0;
    if (kd_worker_take(server->worker, kd_direct_match_solve, &blocked, &job, 1) != 1)
        return;
    server->direct_serving++;
    kd_worker_run(server->worker, job);
    kd_worker_finish(server->worker, job);
    server->direct_serving--;
}

/* Run t on a helper thread, serving queued SpMV requests and Krylov solves until it is done;
 * inline when it is small or no thread can be made. */
static int kd_direct_run(kd_server_t *server, kd_direct_task_t *t, int small)
{
    pthread_t tid;
    t->done = 0;
    if (small)
        return t->rc = t->fn(t);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    if (pthread_create(&tid, NULL, kd_direct_thread, t) != 0) {
        t->rc = t->fn(t);
    } else {
        pthread_mutex_lock(&t->mu);
        while (!t->done) {
            pthread_mutex_unlock(&t->mu);
            kd_direct_serve(server);
            pthread_mutex_lock(&t->mu);
            if (t->done)
                break;
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += KD_DIRECT_POLL_NS;
            if (until.tv_nsec >= 1000000000L) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&t->cv, &t->mu, &until);
        }
        pthread_mutex_unlock(&t->mu);
        pthread_join(tid, NULL);
    }
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    return t->rc;
}

/* The request's library (NULL: the server's choice), checked against the matrix. */
static int kd_direct_choose(const kd_solve_request_t *q, const kd_matrix_t *A,
                            const kd_direct_ops_t **ops, kd_err_t *err)
{
    char names[128];
    *ops = NULL;
    if (kd_direct_count == 0)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "method direct: this server was built without SuiteSparse "
                          "(-DKD_DIRECT=OFF)");
    if (q->preconditioner[0] != '\0' && strcmp(q->preconditioner, "none") != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "method direct takes no preconditioner (got %s): it factors the matrix",
                          q->preconditioner);
    if (q->direct_solver[0] == '\0')
        return KD_OK;
    if ((*ops = kd_direct_find(q->direct_solver)) == NULL) {
        kd_direct_names(names, sizeof(names));
        return kd_err_set(err, KD_EBADREQ,
                          "direct_options: unknown solver '%s': this server has %s (or leave it "
                          "out: cholmod for a symmetric matrix with a positive diagonal, else klu)",
                          q->direct_solver, names);
    }
    if ((*ops)->cholesky && !A->scan.symmetric)
        return kd_err_set(err, KD_EBADREQ,
                          "direct solver %s needs a symmetric matrix; this one is not (use klu or "
                          "umfpack)",
                          (*ops)->name);
    return KD_OK;
}

/* The factor of the matrix entry was put `like` (matrix.put with like), when it holds one by
 * `ops` (NULL: any), kept busy till the caller lets it go; else NULL. */
static kd_store_entry_t *kd_direct_like(kd_server_t *server, const kd_store_entry_t *entry,
                                        const kd_direct_ops_t *ops)
{
    kd_store_entry_t *like =
        entry->meta.has_like ? kd_store_find(server->store, entry->meta.like) : NULL;
    if (like == NULL || like->dev == NULL || like == entry ||
        !kd_direct_is(kd_direct_of(like->dev), ops))
        return NULL;
    like->busy++;
    return like;
}

/* The matrix's factor: held, refactored from the like matrix's, or made now (*info says which).
 * NULL with info->singular. */
static int kd_direct_get(kd_server_t *server, kd_store_entry_t *entry, const kd_direct_ops_t *ops,
                         kd_direct_t **out, kd_direct_info_t *info, kd_err_t *err)
{
    kd_matrix_t *A = entry->dev;
    kd_direct_t *held = kd_direct_of(A);
    *out = NULL;
    if (held != NULL && kd_direct_is(held, ops)) {
        kd_direct_describe(held, info);
        *out = held;
        return KD_OK;
    }
    const kd_csr_t *csr = NULL;
    kd_csr_t *owned = NULL;
    int rc = kd_cache_host_csr(server, entry->meta.id, &csr, &owned, err);
    if (rc != KD_OK)
        return rc;
    kd_store_entry_t *like = kd_direct_like(server, entry, ops);
    kd_direct_task_t t = {.fn = like != NULL ? kd_direct_task_refactor : kd_direct_task_factor,
                          .csr = csr,
                          .looks_spd = A->scan.looks_spd,
                          .ops = ops,
                          .budget = &server->factor_budget,
                          .like = like != NULL ? kd_direct_of(like->dev) : NULL};
    /* another library's factor goes first: its bytes are the budget's */
    kd_direct_keep(A, NULL);
    rc = kd_direct_run(server, &t, csr->nnz < KD_DIRECT_INLINE_NNZ);
    kd_csr_free(owned);
    *info = t.info;
    if (like != NULL) {
        if (t.like_spent) /* klu: its factor moved into this one's */
            kd_direct_keep(like->dev, NULL);
        like->busy--;
        if (rc == KD_OK && t.D != NULL) {
            char note[sizeof(info->message)];
            if (info->refactored)
                snprintf(note, sizeof(note), "refactored on the analysis of matrix %s%s",
                         like->meta.hex,
                         t.like_spent ? " (its factor moved here: its next direct solve "
                                        "factors again)"
                                      : "");
            else
                snprintf(note, sizeof(note), "%.200s (like %s)", info->message, like->meta.hex);
            snprintf(info->message, sizeof(info->message), "%s", note);
        }
    }
    if (rc != KD_OK) {
        *err = t.err;
        return rc;
    }
    if (t.D != NULL)
        kd_direct_keep(A, t.D);
    *out = t.D;
    KD_INFO("solve",
            "direct factor of matrix %s: %s%s%s entries=%lld bytes=%zu fill=%.2f analyze_ms=%.3f "
            "factor_ms=%.3f",
            entry->meta.hex, info->singular ? "singular " : "",
            info->refactored ? "refactored " : "", info->solver ? info->solver : "?",
            (long long)info->factor_entries, info->factor_bytes, info->fill, info->analyze_ms,
            info->factor_ms);
    return KD_OK;
}

void kd_direct_write(kd_writer_t *w, const kd_job_t *job, const kd_direct_info_t *info,
                     const kd_direct_column_t *cols, double solve_ms, const void *xout, uint64_t t0,
                     const kd_auto_trail_t *trail)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    const int64_t nrhs = q->nrhs;
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 12 + (trail != NULL ? 1 : 0));
    kd_w_str(w, "anatomy");
    kd_w_map(w, 3);
    kd_w_kv_double(w, "queue_ms", (double)(t0 - job->submitted_ns) / 1e6);
    kd_w_kv_double(w, "setup_ms", info->factored ? info->analyze_ms + info->factor_ms : 0.0);
    kd_w_kv_double(w, "solve_ms", solve_ms);
    kd_w_kv_str(w, "dtype", kd_dtype_name(q->dtype));
    kd_w_kv_str(w, "method", "direct");
    kd_w_kv_str(w, "preconditioner", "none");
    kd_w_str(w, "direct");
    kd_w_map(w, 11);
    kd_w_kv_str(w, "solver", info->solver != NULL ? info->solver : "");
    kd_w_kv_bool(w, "factored", info->factored);
    kd_w_kv_bool(w, "refactored", info->refactored);
    kd_w_kv_int(w, "factor_entries", info->factor_entries);
    kd_w_kv_uint(w, "factor_bytes", (uint64_t)info->factor_bytes);
    kd_w_kv_double(w, "estimate_bytes", info->estimate_bytes);
    kd_w_kv_double(w, "fill", info->fill);
    kd_w_kv_double(w, "analyze_ms", info->factored ? info->analyze_ms : 0.0);
    kd_w_kv_double(w, "factor_ms", info->factored ? info->factor_ms : 0.0);
    kd_w_kv_double(w, "solve_ms", solve_ms);
    kd_w_kv_str(w, "note", info->message);
    const char *keys[] = {"status", "iterations", "residual_norm", "relative_residual", "message"};
    for (int f = 0; f < 5; f++) {
        kd_w_str(w, keys[f]);
        if (nrhs > 1)
            kd_w_array(w, (uint32_t)nrhs);
        for (int64_t k = 0; k < nrhs; k++) {
            const kd_direct_column_t *c = &cols[k];
            switch (f) {
            case 0:
                kd_w_str(w, c->status);
                break;
            case 1:
                kd_w_int(w, c->refinements);
                break;
            case 2:
                kd_w_double(w, c->residual);
                break;
            case 3:
                kd_w_double(w, c->relative);
                break;
            default:
                kd_w_str(w, c->message);
                break;
            }
        }
    }
    kd_w_kv_double(w, "time_ms", kd_clock_ms_since(t0));
    if (trail != NULL)
        kd_auto_write_trail(w, trail);
    kd_handlers_kv_vector(w, "x", &q->out, (void *)xout,
                          (size_t)q->b.count * kd_dtype_size(q->dtype), 0);
}

/* ||b_k|| of each column. */
static double kd_direct_norm(const double *v, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

/* Each column's status from its residual: converged within max(rtol ||b||, atol), else
 * stagnated (the factor's accuracy is all there is: an ill-conditioned matrix). */
static void kd_direct_judge(const kd_solve_request_t *q, const double *B, int64_t n,
                            const double *norms, const int *refinements, int singular,
                            const char *why, kd_direct_column_t *cols)
{
    for (int64_t k = 0; k < q->nrhs; k++) {
        kd_direct_column_t *c = &cols[k];
        const double bnorm = kd_direct_norm(B + (size_t)(k * n), n);
        c->residual = singular ? bnorm : norms[k];
        c->relative = bnorm > 0.0 ? c->residual / bnorm : 0.0;
        c->refinements = singular ? 0 : refinements[k];
        const double tol = fmax(q->rtol * bnorm, q->atol);
        if (singular) {
            c->status = "singular";
            snprintf(c->message, sizeof(c->message), "the matrix is %.200s; x = 0", why);
        } else if (c->residual <= tol || bnorm == 0.0) {
            c->status = "converged";
            c->message[0] = '\0';
        } else {
            c->status = "stagnated";
            snprintf(c->message, sizeof(c->message),
                     "the factor's solution has ||b - A x|| / ||b|| = %.3g, above rtol = %.3g "
                     "after %d refinement steps: the matrix is ill-conditioned",
                     c->relative, q->rtol, c->refinements);
        }
    }
}

int kd_direct_solve_columns(kd_server_t *server, kd_store_entry_t *entry,
                            const kd_solve_request_t *q, const kd_direct_ops_t *ops,
                            const double *B, double *X, kd_direct_column_t *cols,
                            kd_direct_info_t *info, double *solve_ms, kd_err_t *err)
{
    kd_matrix_t *A = entry->dev;
    const int64_t n = A->rows;
    const size_t count = (size_t)q->b.count; /* n * nrhs, checked by the caller */
    double *norms = calloc((size_t)q->nrhs, sizeof(double));
    int *refinements = calloc((size_t)q->nrhs, sizeof(int));
    memset(info, 0, sizeof(*info));
    *solve_ms = 0.0;
    if (norms == NULL || refinements == NULL) {
        free(norms);
        free(refinements);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld columns",
                          (long long)q->nrhs);
    }
    entry->busy++;
    kd_direct_t *D = NULL;
    int rc = kd_direct_get(server, entry, ops, &D, info, err);
    if (rc == KD_OK && D != NULL) {
        kd_direct_task_t t = {.fn = kd_direct_task_solve,
                              .D = D,
                              .nrhs = q->nrhs,
                              .B = B,
                              .X = X,
                              .norms = norms,
                              .refinements = refinements};
        const uint64_t s0 = kd_clock_ns();
        kd_direct_info_t held;
        kd_direct_describe(D, &held);
        const int small = held.factor_entries <= KD_DIRECT_INLINE_SOLVE / q->nrhs;
        if ((rc = kd_direct_run(server, &t, small)) != KD_OK)
            *err = t.err;
        *solve_ms = kd_clock_ms_since(s0);
    } else if (rc == KD_OK) {
        memset(X, 0, count * sizeof(double));
    }
    entry->busy--;
    if (rc == KD_OK)
        kd_direct_judge(q, B, n, norms, refinements, D == NULL, info->message, cols);
    free(norms);
    free(refinements);
    return rc;
}

int kd_handle_solve_direct(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                           kd_writer_t *w, kd_err_t *err)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    const uint64_t t0 = kd_clock_ns();
    if (entry->dist != NULL || entry->dev == NULL || entry->dev->batch != NULL)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "method direct runs on a matrix held whole by this server, not on one "
                          "%s",
                          entry->dist != NULL ? "spread over ranks" : "of batched systems");
    kd_matrix_t *A = entry->dev;
    const kd_direct_ops_t *ops;
    int rc = kd_direct_choose(q, A, &ops, err);
    if (rc != KD_OK)
        return rc;
    const size_t count = (size_t)q->b.count; /* n * nrhs, checked by the caller */
    double *B = malloc((count > 0 ? count : 1) * sizeof(double));
    double *X = malloc((count > 0 ? count : 1) * sizeof(double));
    kd_direct_column_t *cols = calloc((size_t)q->nrhs, sizeof(*cols));
    void *xout = kd_handlers_alloc_values(q->b.count, q->dtype, err);
    if (B == NULL || X == NULL || cols == NULL || xout == NULL) {
        rc = xout == NULL ? err->code
                          : kd_err_set(err, KD_ENOMEM, "out of host memory for %lld x %lld values",
                                       (long long)A->rows, (long long)q->nrhs);
        goto done;
    }
    kd_convert_real(B, KD_DTYPE_F64, q->b.data, q->b.dtype, count);
    kd_direct_info_t info;
    double solve_ms;
    rc = kd_direct_solve_columns(server, entry, q, ops, B, X, cols, &info, &solve_ms, err);
    if (rc == KD_OK) {
        kd_convert_real(xout, q->dtype, X, KD_DTYPE_F64, count);
        kd_direct_write(w, job, &info, cols, solve_ms, xout, t0, NULL);
    }
done:
    free(B);
    free(X);
    free(cols);
    free(xout);
    return rc;
}
