/*
 * `solve` on the device worker, and dynamic batching of concurrent solves.
 *
 * When the worker picks up a solve, the solves queued behind it on the same matrix with the same
 * parameters (method, preconditioner and its options, rtol, atol, maxiter, check_every, restart)
 * come along (kd_worker_take): their right-hand sides become the columns of one solve, which
 * runs them in lock step, each column with its own convergence test, status and iteration count
 * (solver/solve.c: a column answers exactly as it would alone), and each request gets its own
 * answer with its own columns. Several small solves then cost about what one does. Not batched:
 * `auto` (its fallback re-solves every column when one breaks down), requests that want history
 * (its points depend on the check interval, which depends on the column count) or progress, and
 * requests with a deadline; and no batch grows past the server's max-nrhs columns. A request in a
 * batch that its client cancels is answered CANCELLED at the end; the batch stops early only when
 * every request in it is cancelled.
 */
#include "common/checked.h"
#include "common/clock.h"
#include "common/recycle.h"
#include "server/handlers/handlers.h"
#include "server/handlers/spmv.h"
#include "server/handlers/spread.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_SOLVE_BATCH_MAX 64 /* requests in one batch */
#define KD_SOLVE_ALONE 1      /* kd_solve_batch: run every request alone instead */

typedef struct kd_progress_ctx {
    kd_server_t *server;
    kd_job_t *job;
    int enabled;
    uint64_t last_ns;
    /* a batch: its jobs; every check, the batch stops when all of them are cancelled */
    kd_job_t **batch;
    size_t nbatch;
    atomic_int *batch_cancel;
} kd_progress_ctx_t;

/* At most four solve.progress notifications a second per solve; with several right-hand sides
 * the solver reports the one furthest from its tolerance at each check. */
static int kd_on_progress(void *ctx, int64_t rhs, int64_t iteration, double residual)
{
    kd_progress_ctx_t *pc = ctx;
    if (pc->batch != NULL) {
        int code = 0;
        size_t cancelled = 0;
        for (size_t i = 0; i < pc->nbatch; i++) {
            int c = atomic_load(&pc->batch[i]->cancel);
            cancelled += c != 0;
            code = code != 0 ? code : c;
        }
        if (cancelled == pc->nbatch)
            atomic_store(pc->batch_cancel, code);
        return 0;
    }
    if (!pc->enabled)
        return 0;
    uint64_t now = kd_clock_ns();
    if (pc->last_ns != 0 && now - pc->last_ns < 250000000u)
        return 0;
    pc->last_ns = now;
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_notification_begin(&w, "solve.progress");
    kd_w_array(&w, 1);
    kd_w_map(&w, 4);
    kd_w_kv_int(&w, "msgid", (int64_t)pc->job->msgid);
    kd_w_kv_int(&w, "rhs", rhs);
    kd_w_kv_int(&w, "iteration", iteration);
    kd_w_kv_double(&w, "residual", residual);
    size_t len;
    void *bytes = kd_writer_release(&w, &len);
    if (bytes != NULL)
        kd_worker_notify(pc->server->worker, pc->job, bytes, len);
    return 0;
}

/* The request's preconditioner options into opt (checked against the preconditioner's names);
 * for one that is not set up on the matrix yet, room in the device budget for its setup and,
 * when its setup needs it, the matrix's host CSR (*owned: a copy read from the state file, for
 * the caller to free after the solve). */
static int64_t kd_solve_values_per_row(const kd_solve_request_t *q, int64_t columns,
                                       const kd_store_entry_t *entry);

/*
 * The request's preconditioner: options checked, device room reserved, the host CSR where setup
 * needs it. On a matrix put with like (server/handlers/like.c), the like matrix's setup where it
 * holds one: applied as it is with reuse_preconditioner (*held is the like entry, kept busy until
 * the caller lets it go), else refreshed onto this matrix. *setup says which for the reply
 * ("reused", "refreshed", "built fresh: ..."), or stays NULL where nothing was asked or done.
 */
static int kd_solve_job_precond(kd_server_t *server, kd_store_entry_t *entry,
                                const kd_solve_request_t *q, kd_solve_params_t *params,
                                kd_precond_options_t *opt, kd_csr_t **owned,
                                kd_store_entry_t **held, const char **setup, kd_err_t *err)
{
    memset(opt, 0, sizeof(*opt));
    for (int i = 0; i < q->noptions && i < KD_PRECOND_OPTIONS_MAX; i++) {
        snprintf(opt->items[i].name, sizeof(opt->items[i].name), "%s", q->options[i].name);
        opt->items[i].value = q->options[i].value;
        opt->count++;
    }
    params->precond_options = opt->count > 0 ? opt : NULL;
    int rc = kd_precond_check_options(params->precond, params->precond_options, err);
    kd_store_entry_t *like =
        entry->meta.has_like ? kd_store_find(server->store, entry->meta.like) : NULL;
    const int like_holds = like != NULL && like->dev != NULL &&
                           kd_precond_ready(like->dev, params->precond, params->precond_options);
    if (rc == KD_OK && q->reuse_preconditioner && params->precond != &kd_precond_none) {
        if (like_holds) { /* PETSc's KSPSetReusePreconditioner: like's setup, unchanged */
            params->precond_matrix = like->dev;
            like->busy++;
            *held = like;
            *setup = "reused";
            return KD_OK;
        }
        *setup = !entry->meta.has_like ? "built fresh: this matrix was not put with like"
                 : like == NULL        ? "built fresh: the like matrix is gone (dropped)"
                 : like->dev == NULL   ? "built fresh: the like matrix is not resident"
                                       : "built fresh: the like matrix holds no such "
                                         "preconditioner";
    }
    if (rc != KD_OK || kd_precond_ready(entry->dev, params->precond, params->precond_options))
        return rc;
    if (params->precond->plan_bytes != NULL) {
        char what[96];
        snprintf(what, sizeof(what), "preconditioner %s of matrix %s", params->precond->name,
                 entry->meta.hex);
        /* beside the solve's vectors: a reservation makes room, it does not hold it */
        const size_t vectors =
            kd_handlers_vector_bytes(server, q->id, kd_solve_values_per_row(q, q->nrhs, entry), 0);
        size_t bytes;
        if (kd_add_overflow(params->precond->plan_bytes(entry->dev), vectors, &bytes))
            bytes = SIZE_MAX;
        rc = kd_cache_reserve(server, bytes, entry, what, err);
        if (rc != KD_OK)
            return rc;
    }
    /* New values on a held pattern (matrix.put like): the like matrix's setup, refreshed */
    const int refresh = like_holds;
    if (!params->precond->needs_csr && !refresh)
        return KD_OK;
    const kd_csr_t *csr = NULL;
    if ((rc = kd_cache_host_csr(server, entry->meta.id, &csr, owned, err)) != KD_OK)
        return rc;
    params->csr = csr;
    if (!refresh)
        return KD_OK;
    const kd_precond_t *made = NULL;
    kd_precond_origin_t origin = KD_PRECOND_BUILT;
    rc = kd_precond_refresh(server->ocl, like->dev, entry->dev, params->precond,
                            params->precond_options, csr, &made, &origin, err);
    if (rc == KD_OK) {
        entry->meta.preconds_refreshed += origin == KD_PRECOND_REFRESHED;
        if (*setup == NULL)
            *setup = origin == KD_PRECOND_REFRESHED ? "refreshed" : "built fresh";
        KD_INFO("solve", "preconditioner %s of matrix %s: %s from like=%s", params->precond->name,
                entry->meta.hex, kd_precond_origin_name(origin), like->meta.hex);
    }
    return rc;
}

_Static_assert(KD_RESTART_MAX == KD_SOLVE_RESTART_MAX, "the wire's restart limit is the solver's");

/* ---- batching -------------------------------------------------------------------------------- */

typedef struct kd_solve_take {
    const kd_solve_request_t *q;
    int64_t columns, max_columns;
} kd_solve_take_t;

/* May a request join a batch at all (whatever it joins)? */
static int kd_solve_batchable(const kd_job_t *job)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    return job->deadline_ns == 0 && !q->history && !q->progress &&
           strcmp(q->method, KD_METHOD_AUTO) != 0 && !q->rtols.present && !q->atols.present &&
           !q->maxiters
                .present; /* per-system arrays are a batched matrix's (server/handlers/batch.c) */
}

static int kd_solve_same(const kd_solve_request_t *a, const kd_solve_request_t *b)
{
    if (memcmp(a->id, b->id, sizeof(a->id)) != 0 || strcmp(a->method, b->method) != 0 ||
        strcmp(a->preconditioner, b->preconditioner) != 0 || a->rtol != b->rtol ||
        a->atol != b->atol || a->maxiter != b->maxiter || a->check_every != b->check_every ||
        a->restart != b->restart || a->noptions != b->noptions ||
        a->reuse_preconditioner != b->reuse_preconditioner)
        return 0;
    for (int i = 0; i < a->noptions; i++)
        if (strcmp(a->options[i].name, b->options[i].name) != 0 ||
            a->options[i].value != b->options[i].value)
            return 0;
    return 1;
}

static int kd_solve_match(void *arg, const kd_job_t *job)
{
    kd_solve_take_t *take = arg;
    if (job->req->method != KD_METHOD_SOLVE || !kd_solve_batchable(job) ||
        !kd_solve_same(take->q, &job->req->u.solve))
        return 0;
    int64_t nrhs = job->req->u.solve.nrhs;
    if (nrhs < 1 || take->columns + nrhs > take->max_columns)
        return 0;
    take->columns += nrhs;
    return 1;
}

/* One request of a run: its columns in the batch, and what it is answered. */
typedef struct kd_solve_part {
    kd_job_t *job;
    int64_t col0, nrhs;
    int rc;
    kd_err_t err;
} kd_solve_part_t;

/* The request's own checks against the matrix: b and x0 lengths. */
static int kd_solve_check_lengths(const kd_solve_request_t *q, const kd_store_entry_t *entry,
                                  kd_err_t *err)
{
    const int64_t rows = entry->meta.rows; /* entry->dev is NULL for a spread matrix */
    int64_t want;
    if (kd_mul_overflow_i64(rows, q->nrhs, &want) || q->b.count != want)
        return kd_err_set(err, KD_EBADREQ,
                          "b has %lld values but %lld right-hand side(s) of matrix %s need %lld x "
                          "%lld",
                          (long long)q->b.count, (long long)q->nrhs, entry->meta.hex,
                          (long long)rows, (long long)q->nrhs);
    if (q->x0.present && q->x0.count != want)
        return kd_err_set(err, KD_EBADREQ, "x0 has %lld values but b has %lld",
                          (long long)q->x0.count, (long long)want);
    return kd_handlers_check_out(&q->out, want, "x", &q->b, "b", &q->x0, "x0", err);
}

/* The answer to one request: its columns [col0, col0 + nrhs) of x and of the results; x last,
 * copied from xout, or (xtail) sent from it as the response's tail. */
static void kd_solve_job_write(kd_writer_t *w, const kd_job_t *job, const kd_solve_params_t *params,
                               const kd_solve_result_t *results, const void *xout, void *xtail,
                               uint64_t t0, double prepare_ms, double total_ms, const char *setup,
                               const kd_auto_trail_t *trail)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    const int64_t nrhs = q->nrhs;
    const size_t want = (size_t)q->b.count, osize = kd_dtype_size(q->dtype);
    const int any_history = q->history;
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 11 + (any_history ? 1 : 0) + (setup != NULL ? 1 : 0) + (trail != NULL ? 1 : 0));
    /* Where the time went: waiting for the worker, then the solver's phases (docs/PROTOCOL.md) */
    const kd_solve_anatomy_t *an = &results[0].anatomy;
    kd_w_str(w, "anatomy");
    kd_w_map(w, 12);
    kd_w_kv_double(w, "queue_ms", (double)(t0 - job->submitted_ns) / 1e6);
    kd_w_kv_double(w, "prepare_ms", prepare_ms);
    kd_w_kv_double(w, "setup_ms", an->setup_ms);
    kd_w_kv_double(w, "host_ms", an->host_ms);
    kd_w_kv_double(w, "alloc_ms", an->alloc_ms);
    kd_w_kv_double(w, "upload_ms", an->upload_ms);
    kd_w_kv_double(w, "start_ms", an->start_ms);
    kd_w_kv_double(w, "iterate_ms", an->iterate_ms);
    kd_w_kv_int(w, "checks", an->checks);
    kd_w_kv_double(w, "final_ms", an->final_ms);
    kd_w_kv_double(w, "download_ms", an->download_ms);
    kd_w_kv_double(w, "solve_ms", results[0].time_ms);
    kd_w_kv_str(w, "dtype", kd_dtype_name(q->dtype));
    kd_w_kv_str(w, "method", params->method->name); /* what "auto" or an alias came to */
    kd_w_kv_str(w, "preconditioner", params->precond->name);
    if (setup != NULL)
        kd_w_kv_str(w, "preconditioner_setup", setup);
    if (nrhs == 1) {
        const kd_solve_result_t *r = &results[0];
        kd_w_kv_str(w, "status", kd_solve_status_name(r->status));
        kd_w_kv_int(w, "iterations", r->iterations);
        kd_w_kv_double(w, "residual_norm", r->residual_norm);
        kd_w_kv_double(w, "relative_residual", r->relative_residual);
        kd_w_kv_str(w, "message", r->message);
        if (any_history) {
            kd_w_str(w, "history");
            kd_w_array(w, (uint32_t)r->history_len);
            for (int64_t i = 0; i < r->history_len; i++)
                kd_w_double(w, r->history[i]);
        }
    } else {
        const char *keys[] = {"status", "iterations", "residual_norm", "relative_residual",
                              "message"};
        for (int f = 0; f < 5; f++) {
            kd_w_str(w, keys[f]);
            kd_w_array(w, (uint32_t)nrhs);
            for (int64_t k = 0; k < nrhs; k++) {
                const kd_solve_result_t *r = &results[k];
                switch (f) {
                case 0:
                    kd_w_str(w, kd_solve_status_name(r->status));
                    break;
                case 1:
                    kd_w_int(w, r->iterations);
                    break;
                case 2:
                    kd_w_double(w, r->residual_norm);
                    break;
                case 3:
                    kd_w_double(w, r->relative_residual);
                    break;
                default:
                    kd_w_str(w, r->message);
                    break;
                }
            }
        }
        if (any_history) {
            kd_w_str(w, "history");
            kd_w_array(w, (uint32_t)nrhs);
            for (int64_t k = 0; k < nrhs; k++) {
                kd_w_array(w, (uint32_t)results[k].history_len);
                for (int64_t i = 0; i < results[k].history_len; i++)
                    kd_w_double(w, results[k].history[i]);
            }
        }
    }
    kd_w_kv_double(w, "time_ms", total_ms);
    if (trail != NULL)
        kd_auto_write_trail(w, trail);
    if (xtail != NULL)
        kd_handlers_kv_vector(w, "x", &q->out, xtail, want * osize, 1);
    else
        kd_handlers_kv_vector(w, "x", &q->out, (void *)xout, want * osize, 0);
}

void kd_solve_job_reply(kd_writer_t *w, const kd_job_t *job, const kd_solve_params_t *params,
                        const kd_solve_result_t *results, const void *xout, uint64_t t0,
                        double total_ms, const char *setup)
{
    kd_solve_job_write(w, job, params, results, xout, NULL, t0, 0.0, total_ms, setup, NULL);
}

void kd_solve_job_reply_auto(kd_writer_t *w, const kd_job_t *job, const kd_solve_params_t *params,
                             const kd_solve_result_t *results, const void *xout, uint64_t t0,
                             const char *setup, const kd_auto_trail_t *trail)
{
    kd_solve_job_write(w, job, params, results, xout, NULL, t0, 0.0, kd_clock_ms_since(t0), setup,
                       trail);
}

static int kd_solve_aligned(const void *p, size_t size)
{
    return ((uintptr_t)p & (size - 1)) == 0;
}

/* A request's x in its own dtype, for the response's tail. */
static void *kd_solve_alloc_out(const kd_solve_request_t *q, kd_err_t *err)
{
    size_t bytes;
    void *p = NULL;
    if (q->b.count < 0 || kd_mul_overflow((size_t)q->b.count, kd_dtype_size(q->dtype), &bytes))
        kd_err_set(err, KD_ETOOLARGE, "vector of %lld values is too large", (long long)q->b.count);
    else if ((p = kd_recycle_alloc(bytes, NULL)) == NULL)
        kd_err_set(err, KD_ENOMEM, "out of host memory for a vector of %lld values",
                   (long long)q->b.count);
    return p;
}

/* Answer and post every taken request (parts[1..n)); parts[0] is the worker's own. One whose
 * answer failed with an error the worker would retry (the driver refused memory) runs again
 * alone. */
static void kd_solve_post(kd_server_t *server, kd_solve_part_t *parts, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        kd_job_t *job = parts[i].job;
        if (job->response == NULL) {
            server->solve_alone++;
            kd_worker_run(server->worker, job);
            server->solve_alone--;
        }
        kd_worker_finish(server->worker, job);
    }
}

/* The solve of items parts[0..n) that passed their checks, as one solve of all their columns.
 * parts[0] (the worker's own request) answers through w and the return value; the others get
 * responses in their jobs, except where running alone is the answer (their response stays NULL:
 * kd_solve_post runs them again). When the batch's solve itself fails (the matrix, the device, or
 * one request's values), KD_SOLVE_ALONE: the caller runs every request alone instead. */
static int kd_solve_batch(kd_server_t *server, kd_store_entry_t *entry, kd_solve_part_t *parts,
                          size_t n, int64_t columns, kd_writer_t *w, kd_err_t *err)
{
    kd_job_t *job = parts[0].job;
    const kd_solve_request_t *q = &job->req->u.solve;
    kd_matrix_t *A = entry->dev;
    const uint64_t t_start = kd_clock_ns(); /* the worker took it: time_ms counts from here */
    kd_solve_params_t params;
    kd_solve_params_default(&params);
    kd_precond_options_t opt;
    kd_csr_t *owned = NULL;
    kd_store_entry_t *held = NULL; /* the like matrix whose setup is reused: busy till done */
    const char *setup = NULL;
    int rc;
    if ((rc = kd_method_choose_for(A, q->method, q->preconditioner, &params.method, &params.precond,
                                   err)) != KD_OK ||
        (rc = kd_solve_job_precond(server, entry, q, &params, &opt, &owned, &held, &setup, err)) !=
            KD_OK) {
        if (held != NULL)
            held->busy--;
        return n > 1 ? KD_SOLVE_ALONE : rc;
    }
    params.rtol = q->rtol;
    params.atol = q->atol;
    params.maxiter = q->maxiter >= 0 ? q->maxiter : KD_SOLVE_MAXITER_AUTO;
    params.check_every = q->check_every;
    params.restart = q->restart;
    params.record_history = q->history;
    atomic_int batch_cancel;
    atomic_init(&batch_cancel, 0);
    kd_job_t *batch[KD_SOLVE_BATCH_MAX];
    size_t nbatch = 0;
    for (size_t i = 0; i < n; i++)
        if (parts[i].rc == KD_OK)
            batch[nbatch++] = parts[i].job;
    kd_progress_ctx_t pc = {.server = server, .job = job, .enabled = q->progress};
    if (nbatch > 1) {
        pc.batch = batch;
        pc.nbatch = nbatch;
        pc.batch_cancel = &batch_cancel;
    }
    params.progress = kd_on_progress;
    params.progress_ctx = &pc;
    params.cancel = nbatch > 1 ? &batch_cancel : &job->cancel;
    params.deadline_ns = job->deadline_ns;
    /* spmv requests waiting meanwhile are served at its checks (spmv.c); its matrix stays */
    params.yield = kd_spmv_yield;
    params.yield_ctx = server;

    const int64_t rows = A->rows;
    const size_t asize = kd_dtype_size(A->dtype);
    int64_t want = 0;
    (void)kd_mul_overflow_i64(rows, columns, &want); /* each part's own product was checked */
    int any_x0 = 0;
    for (size_t i = 0; i < n; i++)
        any_x0 |= parts[i].rc == KD_OK && parts[i].job->req->u.solve.x0.present;
    /* One request in the matrix's dtype: x comes back into the response's tail, and b and x0
     * go to the device from the request's bytes where they are aligned (kd_solve scans b on the
     * host through typed loads, whatever solve.h says of unaligned arrays; a bin's alignment is
     * the client's encoding's). */
    const int direct = columns == q->nrhs && q->dtype == A->dtype;
    const int direct_in = direct && kd_solve_aligned(q->b.data, asize) &&
                          (!q->x0.present || kd_solve_aligned(q->x0.data, asize));
    void *b = NULL, *x0 = NULL, *x = NULL;
    size_t xbytes = 0;
    /* x straight into the request's region when it named one and nothing needs converting */
    void *const xregion = direct && q->out.present ? (void *)q->out.data : NULL;
    if (xregion != NULL)
        x = xregion;
    else if (!kd_mul_overflow((size_t)want, asize, &xbytes))
        x = kd_recycle_alloc(xbytes, NULL);
    if (!direct_in) {
        b = kd_handlers_alloc_values(want, A->dtype, err);
        x0 = any_x0 ? kd_handlers_alloc_values(want, A->dtype, err) : NULL;
    }
    kd_solve_result_t *results = calloc((size_t)columns, sizeof(*results));
    if ((!direct_in && (b == NULL || (any_x0 && x0 == NULL))) || x == NULL || results == NULL) {
        rc = n > 1 ? KD_SOLVE_ALONE
                   : kd_err_set(err, KD_ENOMEM, "out of host memory for %lld x %lld vectors",
                                (long long)rows, (long long)columns);
        goto done;
    }
    uint64_t t0 = kd_clock_ns();
    /* All right-hand sides of every request in one solve: they share the device's launches. */
    for (size_t i = 0; i < n && !direct_in; i++) {
        const kd_solve_request_t *pq = &parts[i].job->req->u.solve;
        if (parts[i].rc != KD_OK)
            continue;
        const size_t at = (size_t)(parts[i].col0 * rows) * asize, count = (size_t)pq->b.count;
        kd_convert_real((char *)b + at, A->dtype, pq->b.data, pq->b.dtype, count);
        if (x0 != NULL && pq->x0.present)
            kd_convert_real((char *)x0 + at, A->dtype, pq->x0.data, pq->x0.dtype, count);
        else if (x0 != NULL)
            memset((char *)x0 + at, 0, count * asize); /* x0 = 0, as without one */
    }
    const void *bin = direct_in ? q->b.data : b;
    const void *x0in = direct_in ? (q->x0.present ? q->x0.data : NULL) : x0;
    rc = strcmp(q->method, KD_METHOD_AUTO) == 0
             ? kd_solve_auto(server->ocl, A, columns, bin, x0in, x, &params, results, err)
             : kd_solve(server->ocl, A, columns, bin, x0in, x, &params, results, err);
    if (rc != KD_OK && nbatch > 1 && atomic_load(&batch_cancel) == 0) {
        rc = KD_SOLVE_ALONE; /* perhaps one request's values: each alone says whose */
        goto done;
    }
    const double total_ms = (double)(kd_clock_ns() - t_start) / 1e6,
                 prepare_ms = (double)(t0 - t_start) / 1e6;
    if (nbatch > 1)
        atomic_fetch_add(&server->solves_batched, (uint64_t)nbatch);
    for (size_t i = 0; i < n; i++) {
        kd_solve_part_t *p = &parts[i];
        const kd_solve_request_t *pq = &p->job->req->u.solve;
        if (p->rc != KD_OK)
            continue; /* answered alone */
        int prc = rc;
        kd_err_t perr = *err;
        int stop = atomic_load(&p->job->cancel);
        if (prc == KD_OK && nbatch > 1 && stop != 0)
            prc = kd_err_set(&perr, stop, "solve cancelled (it ran in a batch of %zu requests)",
                             nbatch);
        kd_writer_t own, *pw = i == 0 ? w : &own;
        if (i > 0)
            kd_writer_init(&own);
        /* x in the request's dtype: x itself when direct, else its columns converted */
        void *xout = NULL;
        if (prc == KD_OK && direct) {
            xout = x;
            x = NULL;
        } else if (prc == KD_OK && (xout = kd_solve_alloc_out(pq, &perr)) == NULL) {
            prc = perr.code;
        } else if (prc == KD_OK) {
            kd_convert_real(xout, pq->dtype, (char *)x + (size_t)(p->col0 * rows) * asize, A->dtype,
                            (size_t)pq->b.count);
        }
        if (prc == KD_OK) /* the writer takes xout */
            kd_solve_job_write(pw, p->job, &params, results + p->col0, NULL, xout, t_start,
                               prepare_ms, total_ms, setup, NULL);
        if (i == 0) {
            rc = prc;
            *err = perr;
        } else {
            kd_handlers_respond(server, p->job, prc, prc == KD_OK ? pw : NULL, &perr);
        }
    }
done:
    if (held != NULL)
        held->busy--;
    kd_csr_free(owned);
    kd_store_refresh_bytes(server->store, entry); /* a preconditioner set up grew the matrix */
    if (results != NULL)
        for (int64_t k = 0; k < columns; k++)
            kd_solve_result_free(&results[k]);
    free(results);
    free(b);
    free(x0);
    if (x != xregion)
        kd_recycle_free(x);
    return rc;
}

/* The work vectors a column of the method a request names holds, resolved as the solve resolves
 * it (kd_method_choose: aliases, the default); the most any method holds for "auto", whose
 * fallback runs another, and for a choice the solve will refuse. */
static int64_t kd_solve_work_vectors(const kd_solve_request_t *q)
{
    const kd_method_ops_t *m;
    const kd_precond_ops_t *p;
    kd_err_t ignored = {0};
    if (kd_method_choose(q->method, q->preconditioner, &m, &p, &ignored) == KD_OK)
        return m->work_vectors;
    int64_t most = 0;
    for (size_t i = 0; i < kd_method_count; i++)
        if (kd_method_table[i]->work_vectors > most)
            most = kd_method_table[i]->work_vectors;
    return most;
}

/* Whether the solve runs GMRES: asked for, or "auto" on a matrix that is not symmetric. */
static int kd_solve_runs_gmres(const kd_solve_request_t *q, const kd_store_entry_t *entry)
{
    return strcmp(q->method, "gmres") == 0 ||
           (strcmp(q->method, KD_METHOD_AUTO) == 0 && entry->meta.symmetric != 1);
}

/* The values per row a solve of `columns` right-hand sides holds on the device beside its
 * matrix: b, x, r, q, the best x and the method's work vectors a column (at least the
 * documented 6 + columns), plus GMRES(m)'s basis, (m + 1) vectors a column and m more with a
 * preconditioner applied as an operator (amg, ilu0, ...): up to 401 x b's bytes for restart =
 * 200, so charged to the budget before the solve allocates it. "auto" counts the basis on a
 * matrix it would solve with gmres (not symmetric). restart <= 200, columns <= 4096. */
static int64_t kd_solve_values_per_row(const kd_solve_request_t *q, int64_t columns,
                                       const kd_store_entry_t *entry)
{
    int64_t per_row = (5 + kd_solve_work_vectors(q)) * columns;
    if (per_row < 6 + columns)
        per_row = 6 + columns;
    const kd_precond_ops_t *pc = kd_precond_find(q->preconditioner);
    if (columns > 1 && pc != NULL) /* amg's block V-cycle's vectors */
        per_row += pc->block_values * columns;
    if (!kd_solve_runs_gmres(q, entry))
        return per_row;
    const int64_t m = q->restart > 0 ? q->restart : KD_SOLVE_RESTART_DEFAULT;
    const int diagonal = q->preconditioner[0] == '\0' || strcmp(q->preconditioner, "none") == 0 ||
                         strcmp(q->preconditioner, "jacobi") == 0;
    const int64_t basis = m + 1 + (diagonal ? 0 : m) + 2; /* and its u and z vectors */
    return per_row + basis * columns;
}

/* Room for the solve's vectors and GMRES basis beside the matrix (KD_EDEVMEM naming restart). */
static int kd_solve_reserve(kd_server_t *server, const kd_solve_request_t *q, int64_t columns,
                            kd_store_entry_t *entry, kd_err_t *err)
{
    const int64_t per_row = kd_solve_values_per_row(q, columns, entry);
    if (per_row == 6 + columns)
        return KD_OK; /* kd_cache_use charged these */
    char what[160];
    if (kd_solve_runs_gmres(q, entry))
        snprintf(what, sizeof(what),
                 "gmres restart = %lld with %lld right-hand sides (its basis; use a smaller "
                 "restart)",
                 (long long)(q->restart > 0 ? q->restart : KD_SOLVE_RESTART_DEFAULT),
                 (long long)columns);
    else
        snprintf(what, sizeof(what), "the vectors of a %s solve of %lld right-hand sides",
                 q->method[0] != '\0' ? q->method : "cg", (long long)columns);
    return kd_cache_reserve(server, kd_handlers_vector_bytes(server, q->id, per_row, 0), entry,
                            what, err);
}

int kd_solve_job_krylov(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                        const kd_solve_request_t *qs, const void *b, const void *x0, void *x,
                        kd_solve_params_t *params, kd_solve_result_t *results, const char **setup,
                        kd_err_t *err)
{
    kd_precond_options_t opt;
    kd_csr_t *owned = NULL;
    kd_store_entry_t *held = NULL;
    assert(entry->dev != NULL && qs->nrhs >= 1);
    kd_solve_params_default(params);
    *setup = NULL;
    int rc = kd_solve_reserve(server, qs, qs->nrhs, entry, err);
    if (rc == KD_OK)
        rc = kd_method_choose(qs->method, qs->preconditioner, &params->method, &params->precond,
                              err);
    if (rc == KD_OK)
        rc = kd_solve_job_precond(server, entry, qs, params, &opt, &owned, &held, setup, err);
    if (rc == KD_OK) {
        kd_progress_ctx_t pc = {.server = server, .job = job, .enabled = qs->progress};
        params->rtol = qs->rtol;
        params->atol = qs->atol;
        params->maxiter = qs->maxiter >= 0 ? qs->maxiter : KD_SOLVE_MAXITER_AUTO;
        params->check_every = qs->check_every;
        params->restart = qs->restart;
        params->record_history = qs->history;
        params->progress = kd_on_progress;
        params->progress_ctx = &pc;
        params->cancel = &job->cancel;
        params->deadline_ns = job->deadline_ns;
        params->yield = kd_spmv_yield;
        params->yield_ctx = server;
        rc = kd_solve(server->ocl, entry->dev, qs->nrhs, b, x0, x, params, results, err);
    }
    if (held != NULL)
        held->busy--;
    kd_csr_free(owned);
    kd_store_refresh_bytes(server->store, entry);
    params->precond_options = NULL; /* opt and pc were this function's */
    params->progress_ctx = NULL;
    return rc;
}

int kd_handle_solve(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    kd_solve_part_t parts[KD_SOLVE_BATCH_MAX];
    kd_job_t *taken[KD_SOLVE_BATCH_MAX];
    memset(parts, 0, sizeof(parts[0]));
    parts[0].job = job;
    parts[0].nrhs = q->nrhs;
    size_t n = 1;
    kd_store_entry_t *entry;
    int rc = kd_cache_use(server, q->id, kd_handlers_vector_bytes(server, q->id, 6 + q->nrhs, 0),
                          &entry, err);
    if (rc != KD_OK)
        return rc;
    if (entry->meta.rows != entry->meta.cols)
        return kd_err_set(err, KD_EBADREQ, "solve needs a square matrix; %s is %lld x %lld",
                          entry->meta.hex, (long long)entry->meta.rows,
                          (long long)entry->meta.cols);
    if ((rc = kd_solve_check_lengths(q, entry, err)) != KD_OK)
        return rc;
    if (strcmp(q->method, KD_METHOD_DIRECT) == 0) /* a factorisation on the host (direct.c) */
        return kd_handle_solve_direct(server, entry, job, w, err);
    if ((rc = kd_solve_reserve(server, q, q->nrhs, entry, err)) != KD_OK)
        return rc;
    if (strcmp(q->method, KD_METHOD_AUTO) == 0 && entry->dist == NULL && entry->dev != NULL &&
        entry->dev->batch == NULL) { /* the choice and its fallbacks, direct among them */
        entry->busy++;
        rc = kd_handle_solve_auto(server, entry, job, w, err);
        entry->busy--;
        return rc;
    }
    if (entry->dist != NULL) { /* spread over ranks: alone, through them (never batched) */
        kd_progress_ctx_t pc = {.server = server, .job = job, .enabled = q->progress};
        return kd_spread_solve(server, entry, job, kd_on_progress, &pc, kd_solve_job_reply, w, err);
    }
    if (server->solve_alone == 0 && kd_solve_batchable(job)) {
        kd_solve_take_t take = {
            .q = q, .columns = q->nrhs, .max_columns = (int64_t)server->cfg.max_nrhs};
        n += kd_worker_take(server->worker, kd_solve_match, &take, taken, KD_SOLVE_BATCH_MAX - 1);
    }
    /* The others, each checked on its own (one that fails is answered alone, later). */
    int64_t columns = q->nrhs;
    for (size_t i = 1; i < n; i++) {
        kd_solve_part_t *p = &parts[i];
        memset(p, 0, sizeof(*p));
        p->job = taken[i - 1];
        p->nrhs = p->job->req->u.solve.nrhs;
        if ((p->rc = kd_handlers_precheck(server, p->job, &p->err)) == KD_OK)
            p->rc = kd_solve_check_lengths(&p->job->req->u.solve, entry, &p->err);
        if (p->rc == KD_OK) {
            p->col0 = columns;
            columns += p->nrhs;
            kd_store_count(server->store, KD_STORE_HITS); /* it found its matrix resident */
        }
    }
    /* Room for the batch's vectors beside its matrix; without it, each alone. */
    if (columns > q->nrhs) {
        kd_err_t room = {0};
        size_t bytes =
            kd_handlers_vector_bytes(server, q->id, kd_solve_values_per_row(q, columns, entry), 0);
        if (kd_cache_reserve(server, bytes, entry, "the vectors of a batch of solves", &room) !=
            KD_OK)
            columns = -1;
    }
    entry->busy++;
    rc = columns < 0 ? KD_SOLVE_ALONE : kd_solve_batch(server, entry, parts, n, columns, w, err);
    entry->busy--;
    if (rc == KD_SOLVE_ALONE) { /* every request alone, this one first */
        kd_err_clear(err);
        server->solve_alone++;
        rc = kd_handle_solve(server, job, w, err);
        server->solve_alone--;
    }
    kd_solve_post(server, parts, n);
    return rc;
}
