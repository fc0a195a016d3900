/*
 * The device worker's run callback (kd_handlers_run, which net/server.c gives the worker): each job
 * to its request family's handler (matrices.c, like.c, multiply.c, spmv.c, solve_job.c, batch.c).
 * Handlers check what needs the store (the id exists, vector lengths match the matrix), call the
 * solver, and leave an encoded response in the job; host buffers for vectors are converted
 * between the request's dtype and the matrix's there, so the solver only sees its own type.
 *
 * Matrices come through the cache (store/cache.c): kd_cache_use() makes one resident (reloading
 * it from the state directory if it was evicted) with room in the device budget for the
 * request's vectors, and kd_cache_admit() persists and registers a new one. When the driver
 * itself refuses an allocation, kd_handlers_run() evicts the other unpinned matrices and runs the
 * job once more.
 */
#include "common/checked.h"
#include "common/clock.h"
#include "common/recycle.h"
#include "common/log.h"
#include "common/slices.h"
#include "protocol/mtx.h"
#include "protocol/writer.h"
#include "server/handlers/batch.h"
#include "server/handlers/handlers.h"
#include "server/store/quota.h"
#include "server/store/state.h"
#include "server/handlers/replies.h"
#include "server/handlers/spmv.h"
#include "server/handlers/spread.h"
#include "solver/runtime/pool.h"
#include "server/server.h"
#include "solver/formats/select.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A put's arrays from a shared-memory region, copied here on the worker (never on the loop
 * thread) once, before the id is computed and the matrix built (a put with like's values are
 * copied by like.c the same way, into the matrix's own values, saving a pass): a client writing the region
 * meanwhile cannot make the values kept differ from those the id names. kd_shm_resolve holds
 * the region until the job ends. The copy goes to a buffer off the recycle shelf: a time step's
 * put of the same size finds its pages already mapped (a fresh 55 MB buffer's first-touch page
 * faults cost more than the copy). */
static int kd_handlers_own_regions(kd_job_t *job, kd_err_t *err)
{
    kd_array_t *a;
    const kd_put_request_t *put = &job->req->u.put;
    for (size_t i = 0; (a = kd_request_array(job->req, i)) != NULL; i++) {
        if (!a->present || a->shm == 0)
            continue;
        if (put->kind == KD_PUT_LIKE && a == &put->values)
            continue; /* like.c copies them once, straight into the new matrix's values */
        const size_t bytes = (size_t)a->count * kd_dtype_size(a->dtype);
        void *copy = kd_recycle_alloc(bytes > 0 ? bytes : 1, NULL);
        if (copy == NULL || kd_request_adopt(job->req, copy, bytes) != KD_OK)
            return kd_err_set(err, KD_ENOMEM,
                              "out of host memory copying a put's values from "
                              "its shared-memory region");
        kd_slices_memcpy(copy, a->data, bytes);
        a->data = copy;
        a->shm = 0; /* the request's own now */
    }
    return KD_OK;
}

static int kd_handlers_dispatch(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    int rc = kd_handlers_visible(server, job, err);
    if (rc != KD_OK)
        return rc;
    if (kd_handlers_batch_claims(server, job))
        return kd_handlers_batch_run(server, job, w, err); /* server/handlers/batch.c */
    switch (job->req->method) {
    case KD_METHOD_MATRIX_PUT:
        if ((rc = kd_handlers_own_regions(job, err)) == KD_OK)
            rc = kd_handle_put(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_DROP:
        rc = kd_handle_drop(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_PIN:
        rc = kd_handle_pin(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_MULTIPLY:
        rc = kd_handle_multiply(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_SHARE:
        rc = kd_handle_share(server, job, w, err);
        break;
    case KD_METHOD_SPMV:
        rc = kd_handle_spmv(server, job, w, err);
        break;
    case KD_METHOD_SOLVE:
        rc = kd_handle_solve(server, job, w, err);
        break;
    default:
        rc = kd_err_set(err, KD_EINTERNAL, "method %s reached the worker",
                        kd_method_name(job->req->method));
        break;
    }
    return rc;
}

/* The driver refused an allocation (not the budget): evict every other unpinned matrix and say
 * whether running the job again can help. */
static int kd_handlers_evict_for_retry(kd_server_t *server, kd_job_t *job, const kd_err_t *err)
{
    const uint8_t *id = NULL;
    if (job->req->method == KD_METHOD_SPMV)
        id = job->req->u.spmv.id;
    else if (job->req->method == KD_METHOD_SOLVE)
        id = job->req->u.solve.id;
    else if (job->req->method == KD_METHOD_MATRIX_PIN)
        id = job->req->u.id.id;
    kd_store_entry_t *keep = id != NULL ? kd_store_find(server->store, id) : NULL;
    kd_pool_clear(server->pool); /* pooled vectors first: they are the cheapest to give up */
    size_t evicted = kd_cache_evict_all(server, keep);
    KD_WARN("handlers", "msgid=%llu: the device refused an allocation (%s); evicted %zu matrices%s",
            (unsigned long long)job->msgid, err->message, evicted,
            evicted > 0 ? ", retrying once" : "");
    if (evicted > 0)
        kd_store_count(server->store, KD_STORE_DEVMEM_RETRIES);
    return evicted > 0;
}

void kd_handlers_run(void *ctx, kd_job_t *job)
{
    kd_server_t *server = ctx;
    kd_err_t err = {0};
    kd_writer_t w;
    kd_writer_init(&w);
    int stop = atomic_load(&job->cancel);
    int rc;
    if (stop != 0) {
        rc = kd_err_set(&err, stop, "cancelled before it started");
    } else if (job->deadline_ns != 0 && kd_clock_ns() > job->deadline_ns) {
        rc = kd_err_set(&err, KD_ETIMEOUT, "timeout_ms = %lld passed while the request waited",
                        (long long)job->req->timeout_ms);
    } else {
        server->budget_refused = 0;
        server->budget_wait = 0;
        rc = kd_handlers_dispatch(server, job, &w, &err);
        if (rc == KD_EDEVMEM && !server->budget_refused &&
            kd_handlers_evict_for_retry(server, job, &err)) {
            kd_writer_destroy(&w);
            kd_writer_init(&w);
            kd_err_clear(&err);
            server->budget_refused = 0;
            rc = kd_handlers_dispatch(server, job, &w, &err);
        }
    }
    kd_handlers_respond(server, job, rc, &w, &err);
    if (!(rc == KD_EDEVMEM && server->budget_wait)) /* else it may wait on: spmv.c */
        kd_cache_wait_end(server, &job->mem_wait_ns);
}
