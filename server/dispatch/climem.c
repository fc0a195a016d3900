/*
 * Client memory: one cap on every byte the connections hold together (--client-memory) and a
 * share per connection (--connection-memory), as Redis bounds clients with maxmemory-clients and
 * client-output-buffer-limit. Without them a client that pipelines requests and never reads the
 * answers holds its requests' vectors, their results and the unread responses (200-290 MB per
 * connection with a 512k-row spmv), and --max-connections such clients take the host's memory.
 *
 * A connection whose jobs in flight and unread responses pass its share stops being read: the
 * kernel's socket buffer, then the client, wait. The check comes after a request is dispatched,
 * so one request larger than the share still runs. When all open connections together pass the
 * cap, the one holding most is closed at once (kd_conn_abort: its queued jobs leave the worker's
 * queue, its running ones stop at their next check, its unsent responses are dropped), so the
 * small honest clients keep being served. The eviction happens at once, in the call that counted
 * the bytes (after a read, a dispatch, a write, a job's completion): within one turn of the loop
 * every connection may read a whole message, so a deferred eviction would let them all pass the
 * cap together. Every caller leaves its connection consistent before counting and checks
 * `closing` after (as after a write that fails); a connection already closing evicts nothing.
 *
 * A closing connection's bytes stay counted (as `closing`) until its running jobs finish, but
 * only open connections' bytes decide an eviction: a job already on the device cannot be taken
 * back, and evicting others for it would not free it sooner.
 */
#include "common/checked.h"
#include "common/log.h"
#include "server/server.h"
#include "server/dispatch/dispatch.h"

#include <stdint.h>

#define KD_CLIMEM_SHARE_MAX ((size_t)32 << 20) /* the automatic share's ceiling */

static const char *const kd_evict_names[KD_EVICT_REASONS] = {
    [KD_EVICT_CLIENT_MEMORY] = "client_memory",
};

const char *kd_evict_reason_name(kd_evict_reason_t reason)
{
    return reason < KD_EVICT_REASONS ? kd_evict_names[reason] : "unknown";
}

static size_t kd_climem_open_bytes(const kd_client_mem_t *m)
{
    return m->used - m->closing;
}

static void kd_climem_evict(kd_server_t *server)
{
    kd_client_mem_t *m = &server->climem;
    if (m->evicting) /* closing a connection answers its jobs, which counts again */
        return;
    m->evicting = 1;
    /* Each pass closes one connection, which leaves the list: the loop ends. */
    while (kd_climem_open_bytes(m) > m->cap && server->conns != NULL) {
        kd_conn_t *largest = server->conns;
        for (kd_conn_t *c = largest->next; c != NULL; c = c->next)
            if (c->mem > largest->mem)
                largest = c;
        m->evictions[KD_EVICT_CLIENT_MEMORY]++;
        KD_WARN("conn",
                "evicting conn=%llu peer=%s: it holds %zu bytes (%zu in requests in flight, %zu in "
                "unread responses); open clients hold %zu bytes, over --client-memory %zu",
                (unsigned long long)largest->id, largest->peer, largest->mem, largest->mem_jobs,
                largest->write_pending, kd_climem_open_bytes(m), m->cap);
        kd_net_abort(largest);
    }
    m->evicting = 0;
}

int kd_climem_init(kd_server_t *server, kd_err_t *err)
{
    kd_client_mem_t *m = &server->climem;
    m->cap = server->cfg.client_memory; /* resolved by kd_hostmem_check */
    /* Default: what one client may have queued for the device (and so what an honest client may
     * wait behind per pipelining client) stays small; 32 MiB is still a few large requests. */
    m->share = server->cfg.connection_memory > 0  ? server->cfg.connection_memory
               : m->cap / 8 < KD_CLIMEM_SHARE_MAX ? m->cap / 8
                                                  : KD_CLIMEM_SHARE_MAX;
    if (m->share > m->cap)
        return kd_err_set(err, KD_EBADREQ,
                          "--connection-memory %zu is more than --client-memory %zu: one client "
                          "could be evicted for what its share allows",
                          m->share, m->cap);
    KD_INFO("server", "client memory cap=%zu bytes, per connection in flight %zu bytes", m->cap,
            m->share);
    return KD_OK;
}

/* Pause reading while the connection's jobs and responses pass its share (or its unread
 * responses pass --max-pending-write); resume at half of both. */
static void kd_climem_pressure(kd_conn_t *conn)
{
    kd_server_t *server = conn->server;
    const size_t share = server->climem.share;
    const size_t max_write = server->cfg.max_pending_write;
    const size_t in_flight = conn->mem_jobs + conn->write_pending;
    if (!conn->read_paused) {
        if (in_flight <= share && conn->write_pending <= max_write)
            return;
        conn->read_paused = 1;
        server->climem.pauses++;
        uv_read_stop((uv_stream_t *)&conn->tcp);
        KD_DEBUG("conn",
                 "pausing conn=%llu peer=%s: %zu bytes in flight (share %zu), %zu response bytes "
                 "unread (limit %zu)",
                 (unsigned long long)conn->id, conn->peer, in_flight, share, conn->write_pending,
                 max_write);
    } else if (in_flight <= share / 2 && conn->write_pending <= max_write / 2) {
        conn->read_paused = 0;
        kd_net_resume_reading(conn);
    }
}

void kd_climem_account(kd_conn_t *conn)
{
    kd_client_mem_t *m = &conn->server->climem;
    const size_t now = sizeof(*conn) + (conn->frame != NULL ? kd_frame_capacity(conn->frame) : 0) +
                       conn->write_pending + conn->mem_jobs;
    m->used = m->used - conn->mem + now;
    if (conn->closing)
        m->closing = m->closing - conn->mem + now;
    conn->mem = now;
    if (m->used > m->peak)
        m->peak = m->used;
    if (conn->closing)
        return;
    if (kd_climem_open_bytes(m) > m->open_peak)
        m->open_peak = kd_climem_open_bytes(m);
    kd_climem_pressure(conn); /* may read and dispatch more, which accounts again */
    if (kd_climem_open_bytes(m) > m->cap)
        kd_climem_evict(conn->server);
}

void kd_climem_conn_opened(kd_conn_t *conn)
{
    kd_client_mem_t *m = &conn->server->climem;
    conn->mem = sizeof(*conn);
    m->used += conn->mem;
    if (m->used > m->peak)
        m->peak = m->used;
}

void kd_climem_conn_closing(kd_conn_t *conn)
{
    conn->server->climem.closing += conn->mem;
}

void kd_climem_conn_freed(kd_conn_t *conn)
{
    kd_client_mem_t *m = &conn->server->climem;
    m->used -= conn->mem;
    if (conn->closing)
        m->closing -= conn->mem;
    conn->mem = 0;
}

/* a * b * c, saturating (a charge that overflows is simply larger than any cap). */
static size_t kd_climem_mul(size_t a, size_t b, size_t c)
{
    size_t ab, abc;
    if (kd_mul_overflow(a, b, &ab) || kd_mul_overflow(ab, c, &abc))
        return SIZE_MAX;
    return abc;
}

static size_t kd_climem_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

size_t kd_climem_job_bytes(kd_server_t *server, const kd_request_t *req)
{
    size_t bytes = kd_climem_add(kd_request_host_bytes(req), sizeof(kd_job_t));
    int64_t mrows, mcols;
    switch (req->method) {
    case KD_METHOD_SPMV: {
        /* y (rows x ncols) three times: converted from the matrix's dtype, in the request's,
         * and encoded in the response. Unknown matrix: x's length stands in for rows. */
        const kd_spmv_request_t *q = &req->u.spmv;
        int64_t k = q->ncols > 0 ? q->ncols : 1;
        int64_t rows = q->x.count / k;
        if (kd_store_get_shape(server->store, q->id, &mrows, &mcols) == KD_OK)
            rows = mrows;
        bytes = kd_climem_add(
            bytes, kd_climem_mul((size_t)(rows > 0 ? rows : 0), (size_t)k, 3 * sizeof(double)));
        break;
    }
    case KD_METHOD_SOLVE: {
        /* b, x0, x and the result in float64 (solve_job.c), and the encoded response. */
        const kd_solve_request_t *q = &req->u.solve;
        int64_t k = q->nrhs > 0 ? q->nrhs : 1;
        int64_t rows = q->b.count / k;
        if (kd_store_get_shape(server->store, q->id, &mrows, &mcols) == KD_OK)
            rows = mrows > mcols ? mrows : mcols;
        bytes = kd_climem_add(
            bytes, kd_climem_mul((size_t)(rows > 0 ? rows : 0), (size_t)k, 5 * sizeof(double)));
        break;
    }
    case KD_METHOD_SOLVE_BATCH: /* x and the result for every item's rows, and the response */
        bytes = kd_climem_add(
            bytes,
            kd_climem_mul((size_t)(req->u.solve_batch.rows > 0 ? req->u.solve_batch.rows : 0), 1,
                          4 * sizeof(double)));
        break;
    case KD_METHOD_MATRIX_PUT: {
        /* The worker copies values from a shared-memory region (kd_handlers_run), then builds
         * the CSR from the arrays: about as many bytes again. */
        size_t held = kd_request_host_bytes(req);
        kd_array_t *a;
        for (size_t i = 0; (a = kd_request_array((kd_request_t *)req, i)) != NULL; i++)
            if (a->present && a->shm != 0)
                held = kd_climem_add(held,
                                     kd_climem_mul((size_t)a->count, kd_dtype_size(a->dtype), 1));
        bytes = kd_climem_add(bytes, held);
        bytes = kd_climem_add(bytes, held - kd_request_host_bytes(req));
        break;
    }
    default:
        break;
    }
    return bytes;
}
