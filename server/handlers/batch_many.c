/*
 * solve.batch (server/handlers/batch.h, docs/PROTOCOL.md "solve.batch"): many small systems of
 * their own patterns in one request, each item a resident matrix and its b. The items are checked
 * one by one against the store (an item that fails gets its own error entry and the others still
 * run), the request as a whole against the limits and the device budget before anything is
 * allocated for it, and the items that pass are solved together by kd_batch_solve_items
 * (solver/batch/batch.h: grouped by size class into a few launches). The matrices' canonical host CSR
 * arrays are what is uploaded into the groups: small by construction (KD_BATCH_SYSTEM_ROWS_MAX rows
 * an item).
 *
 * Steps: the method; each item's checks; the totals and the budget; the items' host CSRs (one
 * load per distinct matrix) and their b, x0 in the matrix's dtype; the solve; the answer, one
 * map per item in the request's order.
 */
#include "common/checked.h"
#include "common/clock.h"
#include "kernels/batch/batch_abi.h"
#include "server/handlers/batch.h"
#include "server/store/cache.h"
#include "server/handlers/handlers.h"
#include "server/server.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One item's state: its check's outcome, and once it runs, its place in the solve. */
typedef struct kd_item_state {
    int code; /* KD_OK: it runs; else its error */
    char message[200];
    int64_t rows, nnz;
    kd_dtype_t dtype;
    const kd_csr_t *csr;
    size_t at;    /* its values' byte offset in the b, x0 and x arenas */
    int64_t slot; /* its index among the items that run */
} kd_item_state_t;

/* Everything one request allocates, freed in one place. */
typedef struct kd_items_run {
    kd_item_state_t *state;
    kd_csr_t **owned; /* host CSRs read from state files, one per distinct matrix */
    int64_t nowned;
    int64_t *order; /* the running items sorted by matrix id */
    kd_batch_item_t *items;
    kd_batch_result_t *results;
    int64_t nrun;
    char *b, *x0, *x;
    void *xout;
} kd_items_run_t;

static void kd_item_fail(kd_item_state_t *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void kd_item_fail(kd_item_state_t *st, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    st->code = code;
    vsnprintf(st->message, sizeof(st->message), fmt, ap);
    va_end(ap);
}

/* Item i's checks against the store: visible to the user, a plain square matrix small enough for
 * a batch, b of its rows. */
static void kd_item_check(kd_server_t *server, const kd_job_t *job, const kd_solve_item_t *item,
                          kd_item_state_t *st)
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(item->id, hex);
    const kd_store_entry_t *e = kd_store_find(server->store, item->id); /* worker: in place */
    if (e == NULL || !kd_meta_visible(&e->meta, job->user, job->admin)) {
        kd_item_fail(st, KD_ENOTFOUND, "no matrix %s on this server", hex);
        return;
    }
    const kd_matrix_meta_t *m = &e->meta;
    st->rows = m->rows;
    st->nnz = m->nnz;
    st->dtype = m->dtype;
    if (m->batch > 0)
        kd_item_fail(st, KD_EBADREQ,
                     "matrix %s is a batch of %lld systems: solve it with `solve` (an item names "
                     "one plain matrix)",
                     hex, (long long)m->batch);
    else if (m->distributed || e->dist != NULL)
        kd_item_fail(st, KD_EBADREQ,
                     "matrix %s is spread over the ranks of an MPI job: solve it with `solve`",
                     hex);
    else if (m->rows != m->cols)
        kd_item_fail(st, KD_EBADREQ, "matrix %s is %lld x %lld: a solve needs a square matrix", hex,
                     (long long)m->rows, (long long)m->cols);
    else if (m->rows > KD_BATCH_SYSTEM_ROWS_MAX || m->rows < 1)
        kd_item_fail(st, KD_EBADREQ,
                     "matrix %s has %lld rows: solve.batch takes systems of 1..%lld rows (solve "
                     "a larger one with `solve`)",
                     hex, (long long)m->rows, (long long)KD_BATCH_SYSTEM_ROWS_MAX);
    else if (item->b.count != m->rows)
        kd_item_fail(st, KD_EBADREQ, "b has %lld values but matrix %s has %lld rows",
                     (long long)item->b.count, hex, (long long)m->rows);
}

static void kd_items_run_free(kd_items_run_t *r)
{
    for (int64_t i = 0; i < r->nowned; i++)
        kd_csr_free(r->owned[i]);
    for (int64_t i = 0; r->results != NULL && i < r->nrun; i++)
        kd_batch_result_free(&r->results[i]);
    free(r->state);
    free(r->owned);
    free(r->order);
    free(r->items);
    free(r->results);
    free(r->b);
    free(r->x0);
    free(r->x);
    free(r->xout);
}

/* The device bytes the solve may take at once: every running system's batch and vectors (the
 * groups run one at a time, so this bounds the largest), in float64. */
static size_t kd_items_plan_bytes(int64_t count, int64_t rows, int64_t nnz, int64_t max_rows,
                                  const kd_solve_batch_request_t *q, const kd_batch_params_t *prm)
{
    const size_t batch = kd_batch_systems_plan_bytes(count, rows, nnz, KD_DTYPE_F64);
    const int64_t vectors = 3 + kd_batch_method_vectors(prm->method, prm->restart); /* b, x */
    const int64_t m = prm->restart > 0 ? prm->restart : KD_SOLVE_RESTART_DEFAULT;
    const int64_t per_system = KD_BATCH_SLOTS + 4 + KD_BATCH_GMRES_AUX(m);
    size_t vec, small, total;
    if (batch == SIZE_MAX || kd_mul3_overflow((size_t)rows, (size_t)vectors, 8, &vec) ||
        kd_mul3_overflow((size_t)count, (size_t)per_system, 8, &small) ||
        kd_add_overflow(batch, vec, &total) || kd_add_overflow(total, small, &total))
        return SIZE_MAX;
    if (prm->record_history) { /* count x (the largest maxiter + 1) values, at most 2^24 */
        const int64_t maxiter = q->maxiter >= 0 ? q->maxiter : KD_SOLVE_MAXITER_PER_ROW * max_rows;
        const int64_t cells = kd_batch_history_cells(count, maxiter);
        size_t hist; /* more than the cap is refused by the solve: charged the cap */
        if (kd_mul_overflow((size_t)(cells < 0 ? KD_BATCH_HISTORY_MAX : cells), 8, &hist) ||
            kd_add_overflow(total, hist, &total))
            return SIZE_MAX;
    }
    return total;
}

/* Order of two running items by their matrix's id. */
static const kd_solve_item_t *kd_items_sorting;

static int kd_items_by_id(const void *a, const void *b)
{
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    const int c = memcmp(kd_items_sorting[x].id, kd_items_sorting[y].id, 16);
    return c != 0 ? c : (x < y ? -1 : x > y);
}

/* The running items' host CSRs, read once per distinct matrix (a state file is read in full);
 * an item whose matrix cannot be read gets that error. */
static int kd_items_load(kd_server_t *server, const kd_solve_batch_request_t *q, kd_items_run_t *r,
                         kd_err_t *err)
{
    int64_t n = 0;
    for (int64_t i = 0; i < q->nitems; i++)
        if (r->state[i].code == KD_OK)
            r->order[n++] = i;
    kd_items_sorting = q->items; /* the worker thread is the only caller */
    qsort(r->order, (size_t)n, sizeof(int64_t), kd_items_by_id);
    for (int64_t k = 0; k < n; k++) {
        kd_item_state_t *st = &r->state[r->order[k]];
        const kd_item_state_t *prev = k > 0 ? &r->state[r->order[k - 1]] : NULL;
        if (prev != NULL &&
            memcmp(q->items[r->order[k]].id, q->items[r->order[k - 1]].id, 16) == 0) {
            st->csr = prev->csr;
            if (prev->code != KD_OK)
                *st = *prev;
            continue;
        }
        kd_err_t lerr = {0};
        kd_csr_t *owned = NULL;
        const int rc = kd_cache_host_csr(server, q->items[r->order[k]].id, &st->csr, &owned, &lerr);
        if (owned != NULL)
            r->owned[r->nowned++] = owned;
        if (rc == KD_ENOMEM)
            return kd_err_set(err, rc, "%s", lerr.message);
        if (rc != KD_OK) {
            kd_item_fail(st, rc, "%.*s", (int)sizeof(st->message) - 1, lerr.message);
        }
    }
    return KD_OK;
}

/* The running items as the solver takes them, their b and x0 converted to the matrix's dtype. */
static int kd_items_prepare(const kd_solve_batch_request_t *q, kd_items_run_t *r, kd_err_t *err)
{
    size_t bytes = 0;
    int any_x0 = 0;
    for (int64_t i = 0; i < q->nitems; i++) {
        kd_item_state_t *st = &r->state[i];
        if (st->code != KD_OK)
            continue;
        st->at = bytes;
        st->slot = r->nrun++;
        bytes += (size_t)st->rows * kd_dtype_size(st->dtype);
        any_x0 |= q->items[i].x0.present;
    }
    r->items = calloc((size_t)r->nrun + 1, sizeof(*r->items));
    r->results = calloc((size_t)r->nrun + 1, sizeof(*r->results));
    r->b = malloc(bytes + 1);
    r->x = malloc(bytes + 1);
    r->x0 = any_x0 ? malloc(bytes + 1) : NULL;
    r->xout = kd_malloc_array((size_t)q->rows + 1, kd_dtype_size(q->dtype));
    if (r->items == NULL || r->results == NULL || r->b == NULL || r->x == NULL ||
        (any_x0 && r->x0 == NULL) || r->xout == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld items",
                          (long long)q->nitems);
    for (int64_t i = 0; i < q->nitems; i++) {
        const kd_item_state_t *st = &r->state[i];
        const kd_solve_item_t *qi = &q->items[i];
        if (st->code != KD_OK)
            continue;
        kd_batch_item_t *it = &r->items[st->slot];
        it->A = st->csr;
        it->b = r->b + st->at;
        it->x = r->x + st->at;
        kd_convert_real(r->b + st->at, st->dtype, qi->b.data, qi->b.dtype, (size_t)st->rows);
        if (qi->x0.present) {
            kd_convert_real(r->x0 + st->at, st->dtype, qi->x0.data, qi->x0.dtype, (size_t)st->rows);
            it->x0 = r->x0 + st->at;
        }
        it->rtol = q->rtol;
        it->atol = q->atol;
        it->maxiter = q->maxiter >= 0 ? q->maxiter : KD_SOLVE_MAXITER_PER_ROW * st->rows;
        it->label = i;
    }
    return KD_OK;
}

static void kd_items_reply(kd_writer_t *w, const kd_job_t *job, const kd_batch_params_t *prm,
                           kd_items_run_t *r, const kd_batch_items_report_t *rep, double ms)
{
    const kd_solve_batch_request_t *q = &job->req->u.solve_batch;
    const size_t osize = kd_dtype_size(q->dtype);
    int64_t converged = 0, failed = 0;
    for (int64_t i = 0; i < q->nitems; i++) {
        const kd_item_state_t *st = &r->state[i];
        failed += st->code != KD_OK;
        converged += st->code == KD_OK && r->results[st->slot].status == KD_SOLVE_CONVERGED;
    }
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 12);
    kd_w_str(w, "items");
    kd_w_array(w, (uint32_t)q->nitems);
    char *xout = r->xout;
    for (int64_t i = 0; i < q->nitems; i++) {
        const kd_item_state_t *st = &r->state[i];
        if (st->code != KD_OK) {
            kd_w_map(w, 3);
            kd_w_kv_str(w, "status", "error");
            kd_w_kv_str(w, "error", kd_error_wire_name(st->code));
            kd_w_kv_str(w, "message", st->message);
            continue;
        }
        const kd_batch_result_t *res = &r->results[st->slot];
        kd_convert_real(xout, q->dtype, r->x + st->at, st->dtype, (size_t)st->rows);
        kd_w_map(w, 6 + (q->history ? 1 : 0));
        kd_w_kv_str(w, "status", kd_solve_status_name(res->status));
        kd_w_kv_int(w, "iterations", res->iterations);
        kd_w_kv_double(w, "residual_norm", res->residual_norm);
        kd_w_kv_double(w, "relative_residual", res->relative_residual);
        kd_w_kv_str(w, "message", res->message);
        kd_w_kv_bin(w, "x", xout, (size_t)st->rows * osize);
        xout += (size_t)st->rows * osize;
        if (q->history) {
            kd_w_str(w, "history");
            kd_w_array(w, (uint32_t)res->history_len);
            for (int64_t h = 0; h < res->history_len; h++)
                kd_w_double(w, res->history[h]);
        }
    }
    kd_w_kv_str(w, "dtype", kd_dtype_name(q->dtype));
    kd_w_kv_str(w, "method", kd_batch_method_name(prm->method));
    kd_w_kv_str(w, "preconditioner", prm->jacobi ? "jacobi" : "none");
    kd_w_kv_int(w, "count", q->nitems);
    kd_w_kv_int(w, "converged", converged);
    kd_w_kv_int(w, "failed", failed);
    kd_w_kv_int(w, "groups", rep->groups);
    kd_w_kv_int(w, "local_groups", rep->local_groups);
    kd_w_kv_int(w, "launches", rep->launches);
    kd_w_kv_double(w, "solve_ms", rep->time_ms);
    kd_w_kv_double(w, "time_ms", ms);
}

/* Every item's checks, then the request's totals against the limits and the device budget. */
static int kd_items_check(kd_server_t *server, const kd_job_t *job, const kd_batch_params_t *prm,
                          kd_items_run_t *r, kd_err_t *err)
{
    const kd_solve_batch_request_t *q = &job->req->u.solve_batch;
    int64_t count = 0, rows = 0, nnz = 0, max_rows = 0;
    for (int64_t i = 0; i < q->nitems; i++) {
        kd_item_check(server, job, &q->items[i], &r->state[i]);
        if (r->state[i].code != KD_OK)
            continue;
        count++;
        if (r->state[i].rows > max_rows)
            max_rows = r->state[i].rows;
        rows += r->state[i].rows; /* each b's count: the decoder bounded their sum */
        if (kd_add_overflow_i64(nnz, r->state[i].nnz, &nnz))
            nnz = INT64_MAX;
    }
    const int64_t max_nnz = server->csr_limits.max_nnz;
    if (max_nnz > 0 && nnz > max_nnz)
        return kd_err_set(err, KD_ETOOLARGE,
                          "the items' matrices hold %lld nonzeros in all, over this server's limit "
                          "of %lld a request",
                          (long long)nnz, (long long)max_nnz);
    if (count == 0)
        return KD_OK;
    char what[96];
    snprintf(what, sizeof(what), "solve.batch of %lld systems (%lld rows)", (long long)count,
             (long long)rows);
    const size_t bytes = kd_items_plan_bytes(count, rows, nnz, max_rows, q, prm);
    if (bytes == SIZE_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "%s: its device sizes overflow", what);
    /* The items' CSRs are copied back to back on the host too: many items naming one matrix
     * make a batch far larger than the request, so it is held to what the host sets aside for
     * one request's copies (2 x --max-message, docs/OPERATIONS.md "Host memory"). */
    const size_t host = kd_batch_systems_plan_bytes(count, rows, nnz, KD_DTYPE_F64);
    const size_t host_max = server->csr_limits.max_build_bytes; /* 2 x --max-message */
    if (host == SIZE_MAX || host > host_max)
        return kd_err_set(err, KD_ETOOLARGE,
                          "%s: its items' matrices (%lld nonzeros in all) make a batch of %zu "
                          "bytes, over this server's %zu for one request's host copies "
                          "(2 x --max-message); send fewer items, or raise --max-message",
                          what, (long long)nnz, host, host_max);
    return kd_cache_reserve(server, bytes, NULL, what, err);
}

int kd_handlers_solve_items(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_solve_batch_request_t *q = &job->req->u.solve_batch;
    const uint64_t t0 = kd_clock_ns();
    kd_batch_params_t prm;
    memset(&prm, 0, sizeof(prm));
    int rc = kd_handlers_batch_choose(q->method, q->preconditioner, q->restart, &prm, err);
    if (rc != KD_OK)
        return rc;
    prm.record_history = q->history;
    prm.cancel = &job->cancel;
    prm.deadline_ns = job->deadline_ns;
    kd_items_run_t r;
    memset(&r, 0, sizeof(r));
    r.state = calloc((size_t)q->nitems, sizeof(*r.state));
    r.owned = calloc((size_t)q->nitems, sizeof(*r.owned));
    r.order = calloc((size_t)q->nitems, sizeof(*r.order));
    if (r.state == NULL || r.owned == NULL || r.order == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld items", (long long)q->nitems);
        goto done;
    }
    kd_batch_items_report_t rep;
    memset(&rep, 0, sizeof(rep));
    if ((rc = kd_items_check(server, job, &prm, &r, err)) != KD_OK ||
        (rc = kd_items_load(server, q, &r, err)) != KD_OK ||
        (rc = kd_items_prepare(q, &r, err)) != KD_OK)
        goto done;
    if (r.nrun > 0 && (rc = kd_batch_solve_items(server->ocl, r.items, r.nrun, &prm, r.results,
                                                 &rep, err)) != KD_OK)
        goto done;
    kd_items_reply(w, job, &prm, &r, &rep, (double)(kd_clock_ns() - t0) / 1e6);
done:
    kd_items_run_free(&r);
    return rc;
}
