/*
 * spmv requests on the device worker: one at a time costs a device synchronisation, two buffer
 * creations and their releases each, which on a GPU is most of a small request's time. So:
 *
 * - Groups. When the worker picks up an spmv, the spmv requests already waiting behind it come
 *   along (kd_worker_take; at most KD_SPMV_GROUP_MAX of them, KD_SPMV_GROUP_BYTES of vectors).
 *   Every transfer and launch of the group is enqueued without waiting and the group waits on the
 *   device once.
 * - Batches. Within a group, requests on the same matrix with the same alpha and beta = 0 become
 *   one run: their columns side by side in one multivector, one SpMM launch for all of them (the
 *   matrix is read once), as inference servers batch concurrent requests.
 * - Vectors come from the worker's pool (solver/runtime/pool.h) instead of the driver.
 * - Served beside a long solve. A solve calls kd_spmv_yield after each check's read-back: the
 *   spmv requests waiting then run as a group on the device's express queue, concurrently with
 *   the solve's queued iterations, so none waits for the solve to end (docs/ARCHITECTURE.md).
 *
 * - Large vectors go as they are. A run whose vectors pass KD_SPMV_DIRECT_BYTES skips the pinned
 *   image: x is written to the device from the request's own bytes (the framer received them in
 *   place), y is read back into the buffer the response's tail is sent from (protocol/writer.h),
 *   so a large spmv's vectors are copied once each way between the socket and the device.
 *
 * Every request of a group is checked on its own (its owner, its lengths, its cancel flag and
 * deadline) and gets its own answer; one that fails does not fail the others. The matrices a
 * group uses are marked busy while it runs, so that making room for one request's matrix cannot
 * evict another's from under it.
 *
 * Waiting for device memory. A request whose matrix (and vectors) would fit the budget once the
 * requests in flight release the matrices they use is not refused: it waits (job->mem_wait_ns).
 * In a group it runs alone after the group; beside a solve, when the solve's matrix still leaves
 * no room, it goes back to the head of the worker's queue and runs after the solve. Fair: the
 * requests of a group behind a waiting one that need a matrix loaded wait behind it too, and once
 * one waits at the queue's head a solve serves nothing more beside it. The wait ends at the
 * request's deadline (TIMEOUT), checked at every yield as well as by the loop's timer.
 */
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/recycle.h"
#include "server/handlers/handlers.h"
#include "server/handlers/spmv.h"
#include "server/handlers/spread.h"
#include "solver/runtime/pool.h"

#include <stdlib.h>
#include <string.h>

#define KD_SPMV_ALONE 1 /* kd_spmv_resolve: not for a group; kd_spmv_post runs it alone */
#define KD_SPMV_WAIT 2  /* kd_spmv_group: items[0] waits for memory (kd_handle_spmv: alone) */
/* x and y bytes of a run past which packing them into the pinned image costs more (a copy of
 * each on the host) than it saves (one transfer instead of one per request). */
#define KD_SPMV_DIRECT_BYTES ((size_t)4 << 20)

typedef struct kd_spmv_item {
    kd_job_t *job;
    kd_store_entry_t *entry; /* resolved and busy, or NULL */
    int64_t k, col0;         /* its columns, and where they start in its run */
    int run;                 /* index into the runs, -1 before it has one */
    int spread;              /* its matrix is spread over ranks: answered alone, in resolve */
    int64_t rows;            /* the matrix's rows */
    void *xconv, *yconv;     /* x, y converted to the matrix's dtype (alive until the wait) */
    void *out;               /* y in the request's dtype: the answer's tail (common/recycle.h's) */
    void *dev;               /* y in the matrix's dtype, when that differs */
    int rc;
    int budget; /* rc is a KD_EDEVMEM of the budget, not the driver's */
    int wait;   /* ... that fits once the requests in flight end: it runs after them */
    kd_err_t err;
} kd_spmv_item_t;

typedef struct kd_spmv_run {
    kd_store_entry_t *entry;
    double alpha, beta;
    int64_t k;
    kd_multivec_t x, y;
    char *stage_x, *stage_y; /* pinned host images of x and y (one copy each), or NULL */
    int rc;
    kd_err_t err;
} kd_spmv_run_t;

typedef struct kd_spmv_take {
    size_t bytes;
    int beside_solve; /* a yield: take nothing from the first request waiting for memory on */
    int blocked;
} kd_spmv_take_t;

/* Host bytes of a request's vectors: what a group may hold at once. */
static size_t kd_spmv_request_bytes(const kd_spmv_request_t *q)
{
    size_t x = (size_t)q->x.count, y = q->y.present ? (size_t)q->y.count : x;
    return (x + 2 * y) * 8;
}

static int kd_spmv_match(void *arg, const kd_job_t *job)
{
    kd_spmv_take_t *take = arg;
    if (job->req->method != KD_METHOD_SPMV)
        return 0;
    if (take->beside_solve && (take->blocked || job->mem_wait_ns != 0)) {
        take->blocked = 1;
        return 0;
    }
    size_t bytes = kd_spmv_request_bytes(&job->req->u.spmv);
    if (take->bytes + bytes > KD_SPMV_GROUP_BYTES)
        return 0;
    take->bytes += bytes;
    return 1;
}

/* y in the request's dtype: sent as the response's tail, so from the recycled buffers. */
static void *kd_spmv_alloc_out(int64_t n, kd_dtype_t dtype, kd_err_t *err)
{
    size_t bytes;
    if (n < 0 || kd_mul_overflow((size_t)n, kd_dtype_size(dtype), &bytes)) {
        kd_err_set(err, KD_ETOOLARGE, "vector of %lld values is too large", (long long)n);
        return NULL;
    }
    void *p = kd_recycle_alloc(bytes, NULL);
    if (p == NULL)
        kd_err_set(err, KD_ENOMEM, "out of host memory for a vector of %lld values", (long long)n);
    return p;
}

/* The request's checks that need its matrix: owner, shape, lengths. The entry comes back busy. */
static int kd_spmv_resolve(kd_server_t *server, kd_spmv_item_t *it, int check_owner)
{
    kd_job_t *job = it->job;
    const kd_spmv_request_t *q = &job->req->u.spmv;
    kd_err_t *err = &it->err;
    int rc = check_owner ? kd_handlers_precheck(server, job, err) : KD_OK;
    if (rc != KD_OK)
        return rc;
    const int64_t k = q->ncols;
    kd_store_entry_t *entry;
    server->budget_refused = 0;
    server->budget_wait = 0;
    rc = kd_cache_use(server, q->id, kd_handlers_vector_bytes(server, q->id, k, k), &entry, err);
    if (rc != KD_OK) {
        it->budget = server->budget_refused;
        it->wait = rc == KD_EDEVMEM && server->budget_wait;
        return rc;
    }
    /* the shape from the metadata: a spread matrix has no entry->dev */
    const int64_t arows = entry->meta.rows, acols = entry->meta.cols;
    const kd_dtype_t adtype = entry->meta.dtype;
    /* A batch's spmv is server/handlers/batch.c's: left unanswered here, kd_spmv_post runs it
     * alone. */
    if (entry->dev != NULL && entry->dev->batch != NULL)
        return KD_SPMV_ALONE;
    int64_t xwant, ywant;
    if (kd_mul_overflow_i64(acols, k, &xwant) || kd_mul_overflow_i64(arows, k, &ywant))
        return kd_err_set(err, KD_ETOOLARGE, "ncols = %lld columns of matrix %s do not fit",
                          (long long)k, entry->meta.hex);
    if (q->x.count != xwant)
        return kd_err_set(err, KD_EBADREQ,
                          "x has %lld entries but matrix %s has %lld columns (x: %lld x %lld)",
                          (long long)q->x.count, entry->meta.hex, (long long)acols,
                          (long long)acols, (long long)k);
    if (q->beta != 0.0 && !q->y.present)
        return kd_err_set(err, KD_EBADREQ, "beta = %g needs y (y = alpha*A*x + beta*y)", q->beta);
    if (q->beta != 0.0 && q->y.count != ywant)
        return kd_err_set(err, KD_EBADREQ,
                          "y has %lld entries but matrix %s has %lld rows (y: %lld x %lld)",
                          (long long)q->y.count, entry->meta.hex, (long long)arows,
                          (long long)arows, (long long)k);
    if ((rc = kd_handlers_check_out(&q->out, ywant, "y", &q->x, "x", &q->y, "y", err)) != KD_OK)
        return rc;
    it->rows = arows;
    if (entry->dev == NULL && entry->dist != NULL) { /* spread over ranks: alone, through them */
        it->spread = 1;
        it->k = k;
        return kd_spread_spmv(server, entry, q, &it->out, err);
    }
    const int convert = q->dtype != adtype;
    it->out = q->out.present ? (void *)q->out.data : NULL; /* y straight into the region */
    if ((it->out == NULL && (it->out = kd_spmv_alloc_out(ywant, q->dtype, err)) == NULL) ||
        (convert && (it->dev = kd_handlers_alloc_values(ywant, adtype, err)) == NULL))
        return err->code;
    it->entry = entry;
    it->k = k;
    entry->busy++;
    return KD_OK;
}

/* Which run the item joins: one on its matrix with its alpha when both have beta = 0 and the
 * columns fit, else a new one. Returns the run's index. */
static int kd_spmv_place(kd_spmv_item_t *it, kd_spmv_run_t *runs, int *nruns)
{
    const kd_spmv_request_t *q = &it->job->req->u.spmv;
    for (int r = 0; q->beta == 0.0 && r < *nruns; r++)
        if (runs[r].entry == it->entry && runs[r].beta == 0.0 && runs[r].alpha == q->alpha &&
            runs[r].k + it->k <= KD_SPMV_BATCH_COLUMNS) {
            it->col0 = runs[r].k;
            runs[r].k += it->k;
            return r;
        }
    kd_spmv_run_t *run = &runs[(*nruns)++];
    memset(run, 0, sizeof(*run));
    run->entry = it->entry;
    run->alpha = q->alpha;
    run->beta = q->beta;
    run->k = it->k;
    it->col0 = 0;
    return *nruns - 1;
}

/* A request's x (or y) columns into the run's multivector, converted when the dtypes differ:
 * packed into the run's pinned image when it has one (sent later in one copy), else enqueued. */
static int kd_spmv_write(kd_server_t *server, kd_multivec_t *mv, char *stage,
                         const kd_spmv_item_t *it, const kd_array_t *a, void **conv, kd_err_t *err)
{
    const size_t size = kd_dtype_size(mv->dtype);
    if (stage != NULL) {
        for (int64_t c = 0; c < it->k; c++)
            kd_convert_real(stage + (size_t)((it->col0 + c) * mv->ld) * size, mv->dtype,
                            (const char *)a->data + (size_t)(c * mv->n) * kd_dtype_size(a->dtype),
                            a->dtype, (size_t)mv->n);
        return KD_OK;
    }
    const void *src = a->data;
    if (a->dtype != mv->dtype) {
        if ((*conv = kd_handlers_alloc_values(a->count, mv->dtype, err)) == NULL)
            return err->code;
        kd_convert_real(*conv, mv->dtype, a->data, a->dtype, (size_t)a->count);
        src = *conv;
    }
    return kd_multivec_write_cols_async(server->ocl, mv, it->col0, it->k, src, err);
}

static size_t kd_spmv_mv_bytes(const kd_multivec_t *mv)
{
    return mv->mem == NULL ? 0 : (size_t)(mv->ld * mv->k) * kd_dtype_size(mv->dtype);
}

/* Enqueue run r (its vectors are there): the writes of its items' columns, the launch, the
 * reads. With pinned images, one copy each way for the whole run. */
static int kd_spmv_enqueue(kd_server_t *server, kd_spmv_run_t *run, int r, kd_spmv_item_t *items,
                           size_t n)
{
    const kd_matrix_t *A = run->entry->dev;
    kd_err_t *err = &run->err;
    int rc = KD_OK;
    for (size_t i = 0; rc == KD_OK && i < n; i++) {
        kd_spmv_item_t *it = &items[i];
        const kd_spmv_request_t *q = &it->job->req->u.spmv;
        if (it->run != r)
            continue;
        rc = kd_spmv_write(server, &run->x, run->stage_x, it, &q->x, &it->xconv, err);
        if (rc == KD_OK && run->beta != 0.0)
            rc = kd_spmv_write(server, &run->y, run->stage_y, it, &q->y, &it->yconv, err);
    }
    if (rc == KD_OK && run->stage_x != NULL && run->x.mem != NULL)
        rc = kd_ocl_write_async(server->ocl, run->x.mem, 0, kd_spmv_mv_bytes(&run->x), run->stage_x,
                                err);
    if (rc == KD_OK && run->stage_y != NULL && run->y.mem != NULL && run->beta != 0.0)
        rc = kd_ocl_write_async(server->ocl, run->y.mem, 0, kd_spmv_mv_bytes(&run->y), run->stage_y,
                                err);
    if (rc == KD_OK)
        rc = kd_matrix_spmm(server->ocl, A, run->alpha, &run->x, run->beta, &run->y, err);
    if (rc == KD_OK && run->stage_y != NULL && run->y.mem != NULL)
        return kd_ocl_read_async(server->ocl, run->y.mem, 0, kd_spmv_mv_bytes(&run->y),
                                 run->stage_y, err);
    for (size_t i = 0; rc == KD_OK && run->stage_y == NULL && i < n; i++) {
        kd_spmv_item_t *it = &items[i];
        if (it->run == r)
            rc = kd_multivec_read_cols_async(server->ocl, &run->y, it->col0, it->k,
                                             it->dev != NULL ? it->dev : it->out, err);
    }
    return rc;
}

/* After the wait: a staged run's y columns from its pinned image into its items' answers. */
static void kd_spmv_unpack(const kd_spmv_run_t *run, int r, kd_spmv_item_t *items, size_t n)
{
    const size_t size = kd_dtype_size(run->y.dtype);
    for (size_t i = 0; run->stage_y != NULL && i < n; i++) {
        kd_spmv_item_t *it = &items[i];
        if (it->run != r)
            continue;
        for (int64_t c = 0; c < it->k; c++)
            memcpy((char *)(it->dev != NULL ? it->dev : it->out) + (size_t)(c * run->y.n) * size,
                   run->stage_y + (size_t)((it->col0 + c) * run->y.ld) * size,
                   (size_t)run->y.n * size);
    }
}

static int kd_spmv_direct(const kd_spmv_run_t *run)
{
    return kd_spmv_mv_bytes(&run->x) + kd_spmv_mv_bytes(&run->y) >= KD_SPMV_DIRECT_BYTES;
}

/* Every run's vectors from the pool, and one pinned host area carved into the images of those
 * that are not direct. */
static void kd_spmv_vectors(kd_server_t *server, kd_spmv_run_t *runs, int nruns)
{
    size_t total = 0;
    for (int r = 0; r < nruns; r++) {
        kd_spmv_run_t *run = &runs[r];
        const kd_matrix_t *A = run->entry->dev;
        run->rc =
            kd_pool_get(server->pool, server->ocl, A->cols, run->k, A->dtype, &run->x, &run->err);
        if (run->rc == KD_OK)
            run->rc = kd_pool_get(server->pool, server->ocl, A->rows, run->k, A->dtype, &run->y,
                                  &run->err);
        if (run->rc == KD_OK && !kd_spmv_direct(run)) /* larger runs go direct */
            total += kd_spmv_mv_bytes(&run->x) + kd_spmv_mv_bytes(&run->y);
    }
    char *stage = kd_pool_host(server->pool, server->ocl, total);
    for (int r = 0; stage != NULL && r < nruns; r++) {
        if (runs[r].rc != KD_OK || kd_spmv_direct(&runs[r]))
            continue;
        runs[r].stage_x = stage;
        stage += kd_spmv_mv_bytes(&runs[r].x);
        runs[r].stage_y = stage;
        stage += kd_spmv_mv_bytes(&runs[r].y);
    }
}

static void kd_spmv_encode(kd_spmv_item_t *it, kd_writer_t *w, double ms)
{
    const kd_spmv_request_t *q = &it->job->req->u.spmv;
    const int64_t count = it->rows * it->k;
    if (it->dev != NULL)
        kd_convert_real(it->out, q->dtype, it->dev, it->entry->dev->dtype, (size_t)count);
    kd_w_result_begin(w, it->job->msgid);
    kd_w_map(w, 4);
    kd_w_kv_str(w, "dtype", kd_dtype_name(q->dtype));
    kd_w_kv_int(w, "ncols", it->k);
    kd_w_kv_double(w, "time_ms", ms);
    /* last: the response's tail, sent from it->out as it is (or where the region has it) */
    kd_handlers_kv_vector(w, "y", &q->out, it->out, (size_t)count * kd_dtype_size(q->dtype), 1);
    it->out = NULL;
}

/* Whether the job's matrix is resident (or spread): using it takes no room for a matrix. */
static int kd_spmv_resident(kd_server_t *server, const kd_job_t *job)
{
    const kd_store_entry_t *e = kd_store_find(server->store, job->req->u.spmv.id);
    return e == NULL || e->dev != NULL || e->dist != NULL;
}

/*
 * Serve items[0..n) as one group. Items from `checked` on are checked here for their owner,
 * cancel flag and deadline (the worker checked the one it runs). With w, items[0] answers
 * through w and the return value (it is the request the worker runs); every other item gets its
 * response in its job, except one the driver refused memory for: its response stays NULL, for
 * kd_spmv_post to run it again alone.
 */
static int kd_spmv_group(kd_server_t *server, kd_spmv_item_t *items, size_t n, size_t checked,
                         kd_writer_t *w, kd_err_t *err)
{
    uint64_t t0 = kd_clock_ns();
    kd_spmv_run_t runs[KD_SPMV_GROUP_MAX];
    int nruns = 0, waiting = 0;
    for (size_t i = 0; i < n; i++) {
        items[i].run = -1;
        if (waiting && !kd_spmv_resident(server, items[i].job)) { /* behind the one waiting */
            items[i].rc = KD_EDEVMEM;
            items[i].budget = items[i].wait = 1;
        } else {
            items[i].rc = kd_spmv_resolve(server, &items[i], i >= checked);
        }
        if (items[i].wait) {
            waiting = 1;
            kd_cache_wait_begin(server, &items[i].job->mem_wait_ns);
        }
        if (items[i].rc == KD_OK && !items[i].spread)
            items[i].run = kd_spmv_place(&items[i], runs, &nruns);
    }
    kd_spmv_vectors(server, runs, nruns);
    for (int r = 0; r < nruns; r++)
        if (runs[r].rc == KD_OK)
            runs[r].rc = kd_spmv_enqueue(server, &runs[r], r, items, n);
    /* One wait for the whole group (also after a failure: reads may be in flight into items). */
    kd_err_t ferr = {0};
    int frc = nruns > 0 ? kd_ocl_finish(server->ocl, &ferr) : KD_OK;
    const double ms = (double)(kd_clock_ns() - t0) / 1e6;
    uint64_t batched = 0;
    for (int r = 0; r < nruns; r++) {
        if (runs[r].rc == KD_OK && frc == KD_OK)
            kd_spmv_unpack(&runs[r], r, items, n);
        kd_pool_put(server->pool, &runs[r].x);
        kd_pool_put(server->pool, &runs[r].y);
        for (size_t i = 0; i < n; i++)
            if (items[i].run == r) {
                if (runs[r].rc != KD_OK) {
                    items[i].rc = runs[r].rc;
                    items[i].err = runs[r].err;
                } else if (frc != KD_OK) {
                    items[i].rc = frc;
                    items[i].err = ferr;
                }
                batched += runs[r].k > items[i].k;
            }
    }
    atomic_fetch_add(&server->spmv_stats.grouped, n > 1 ? (uint64_t)n : 0);
    atomic_fetch_add(&server->spmv_stats.batched, batched);
    atomic_fetch_add(&server->spmv_stats.launches, (uint64_t)nruns);
    int rc = KD_OK;
    for (size_t i = 0; i < n; i++) {
        kd_spmv_item_t *it = &items[i];
        if (i == 0 && w != NULL) {
            if ((rc = it->rc) == KD_OK)
                kd_spmv_encode(it, w, ms);
            else if (rc == KD_SPMV_ALONE) /* cannot happen: dispatch gives batches to batch.c */
                rc = kd_err_set(err, KD_EINTERNAL, "spmv on a batch reached the group path");
            else if (it->wait && n > 1)
                rc = KD_SPMV_WAIT;
            else
                *err = it->err;
        } else if (it->rc == KD_OK) {
            kd_writer_t iw;
            kd_writer_init(&iw);
            kd_spmv_encode(it, &iw, ms);
            kd_handlers_respond(server, it->job, KD_OK, &iw, &it->err);
            kd_cache_wait_end(server, &it->job->mem_wait_ns);
        } else if (it->rc != KD_SPMV_ALONE && !it->wait && !(it->rc == KD_EDEVMEM && !it->budget)) {
            kd_handlers_respond(server, it->job, it->rc, NULL, &it->err);
            kd_cache_wait_end(server, &it->job->mem_wait_ns);
        }
        if (it->entry != NULL)
            it->entry->busy--;
        free(it->xconv);
        free(it->yconv);
        free(it->dev);
        if (it->out != it->job->req->u.spmv.out.data)
            kd_recycle_free(it->out); /* NULL once the response took it; never the region */
    }
    return rc;
}

/* Whether the job's alone run (kd_handlers_run) was refused memory that requests in flight
 * still hold: its error response is dropped, for it to wait on. */
static int kd_spmv_still_waits(kd_server_t *server, kd_job_t *job)
{
    if (job->error_code != KD_EDEVMEM || !server->budget_wait)
        return 0;
    free(job->response);
    free(job->response_tail); /* none on an error */
    job->response = job->response_tail = NULL;
    job->response_len = job->response_tail_len = 0;
    job->error_code = KD_OK;
    return 1;
}

/* Post items[from..n)'s answers; one the driver refused memory for, or that waited for the
 * group's matrices, runs again on its own (through the worker's evict-and-retry) first. Beside a
 * solve (can_wait), one that still finds no room goes back to the queue's head, and so do the
 * waiting ones after it, in order. */
static void kd_spmv_post(kd_server_t *server, kd_spmv_item_t *items, size_t from, size_t n,
                         int can_wait)
{
    kd_job_t *again[KD_SPMV_GROUP_MAX];
    size_t nagain = 0;
    for (size_t i = from; i < n; i++) {
        kd_job_t *job = items[i].job;
        if (job->response == NULL && items[i].wait && nagain > 0) {
            again[nagain++] = job;
            continue;
        }
        if (job->response == NULL) {
            server->spmv_alone++;
            kd_worker_run(server->worker, job);
            server->spmv_alone--;
            if (can_wait && kd_spmv_still_waits(server, job)) {
                again[nagain++] = job;
                continue;
            }
        }
        kd_worker_finish(server->worker, job);
    }
    if (nagain > 0)
        KD_DEBUG("spmv", "%zu requests wait for device memory until the solve ends", nagain);
    kd_worker_requeue(server->worker, again, nagain);
}

static size_t kd_spmv_items(kd_spmv_item_t *items, kd_job_t **jobs, size_t n)
{
    memset(items, 0, n * sizeof(*items));
    for (size_t i = 0; i < n; i++)
        items[i].job = jobs[i];
    return n;
}

int kd_handle_spmv(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    kd_job_t *jobs[KD_SPMV_GROUP_MAX];
    kd_spmv_item_t items[KD_SPMV_GROUP_MAX];
    jobs[0] = job;
    size_t n = 1;
    if (server->spmv_alone == 0) {
        kd_spmv_take_t take = {.bytes = kd_spmv_request_bytes(&job->req->u.spmv)};
        n += kd_worker_take(server->worker, kd_spmv_match, &take, jobs + 1, KD_SPMV_GROUP_MAX - 1);
    }
    kd_spmv_items(items, jobs, n);
    int rc = kd_spmv_group(server, items, n, 1, w, err);
    if (rc == KD_SPMV_WAIT) { /* the group's other matrices are free now: the oldest goes first */
        kd_spmv_item_t first;
        kd_spmv_items(&first, jobs, 1);
        server->spmv_alone++;
        rc = kd_spmv_group(server, &first, 1, 1, w, err);
        server->spmv_alone--;
    }
    kd_spmv_post(server, items, 1, n, 0);
    return rc;
}

static int kd_spmv_expired(void *arg, const kd_job_t *job)
{
    (void)arg;
    return job->mem_wait_ns != 0 && (atomic_load(&job->cancel) != 0 ||
                                     (job->deadline_ns != 0 && kd_clock_ns() > job->deadline_ns));
}

/* Answer the requests waiting for memory at the queue's head whose deadline passed (or that were
 * cancelled) while a solve runs: the loop's timer may have fired while one was taken. */
static void kd_spmv_expire(kd_server_t *server)
{
    if (atomic_load(&server->mem_waiting) == 0) /* the common case: no queue scan per check */
        return;
    kd_job_t *jobs[KD_SPMV_GROUP_MAX];
    size_t n = kd_worker_take(server->worker, kd_spmv_expired, NULL, jobs, KD_SPMV_GROUP_MAX);
    for (size_t i = 0; i < n; i++) {
        kd_err_t err = {0};
        int rc = kd_handlers_precheck(server, jobs[i], &err); /* the cancel or the timeout */
        kd_handlers_respond(server, jobs[i], rc, NULL, &err);
        kd_cache_wait_end(server, &jobs[i]->mem_wait_ns);
        kd_worker_finish(server->worker, jobs[i]);
    }
}

void kd_spmv_yield(void *ctx)
{
    kd_server_t *server = ctx;
    if (server->spmv_alone != 0)
        return;
    kd_spmv_expire(server);
    kd_job_t *jobs[KD_SPMV_GROUP_MAX];
    kd_spmv_item_t items[KD_SPMV_GROUP_MAX];
    kd_spmv_take_t take = {.beside_solve = 1};
    size_t n = kd_worker_take(server->worker, kd_spmv_match, &take, jobs, KD_SPMV_GROUP_MAX);
    if (n == 0)
        return;
    kd_err_t xerr = {0};
    if (kd_ocl_express(server->ocl, 1, &xerr) != KD_OK) /* then behind the solve: slower, right */
        KD_WARN("spmv", "no express queue: %s", xerr.message);
    server->spmv_alone++; /* nothing below takes more jobs or yields again */
    kd_spmv_items(items, jobs, n);
    kd_spmv_group(server, items, n, 0, NULL, NULL);
    kd_spmv_post(server, items, 0, n, 1);
    server->spmv_alone--;
    kd_ocl_express(server->ocl, 0, &xerr);
    atomic_fetch_add(&server->spmv_stats.beside_solve, (uint64_t)n);
}
