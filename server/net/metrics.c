/*
 * The /metrics HTTP endpoint and the Prometheus exposition (see metrics.h). Names follow the
 * Prometheus conventions: krylovd_ prefix, _total for counters, _bytes and _seconds units.
 */
#include "server/net/metrics.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/server.h"
#include "server/stats.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_METRICS_MAX_REQUEST 8192
#define KD_METRICS_MAX_CONNS 16
#define KD_METRICS_DEADLINE_NS 10000000000ull

typedef struct kd_mconn {
    uv_tcp_t tcp;
    uv_write_t write;
    struct kd_metrics *owner;
    struct kd_mconn *prev, *next;
    uint64_t opened_ns;
    size_t len;
    int answered;
    char *response;
    char request[KD_METRICS_MAX_REQUEST];
} kd_mconn_t;

typedef struct kd_metrics {
    uv_tcp_t listener;
    uv_timer_t sweep;
    kd_server_t *server;
    kd_mconn_t *conns;
    size_t nconns;
    int closing;
    int handles_open;
} kd_metrics_t;

/* A growable text buffer with printf-style appends; `failed` sticks. */
typedef struct kd_text {
    char *buf;
    size_t len, cap;
    int failed;
} kd_text_t;

static void kd_text_add(kd_text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void kd_text_add(kd_text_t *t, const char *fmt, ...)
{
    if (t->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            t->failed = 1;
            return;
        }
        if (t->buf != NULL && t->len + (size_t)n < t->cap) {
            t->len += (size_t)n;
            return;
        }
        size_t cap = t->cap ? t->cap * 2 : 8192;
        while (cap < t->len + (size_t)n + 1)
            cap *= 2;
        char *grown = realloc(t->buf, cap);
        if (grown == NULL) {
            t->failed = 1;
            return;
        }
        t->buf = grown;
        t->cap = cap;
    }
}

/* A label value with \, " and newline escaped as the format requires. */
static void kd_text_label(kd_text_t *t, const char *value)
{
    for (const char *p = value; *p != '\0'; p++) {
        if (*p == '\\' || *p == '"')
            kd_text_add(t, "\\%c", *p);
        else if (*p == '\n')
            kd_text_add(t, "\\n");
        else
            kd_text_add(t, "%c", *p);
    }
}

static void kd_text_metric(kd_text_t *t, const char *name, const char *type, const char *help,
                           double value)
{
    kd_text_add(t, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, value);
}

/* Per-user use (with an auth file): a gauge family each, labelled by user. */
static void kd_metrics_users(kd_text_t *t, kd_server_t *server)
{
    static const struct {
        const char *name, *help;
    } families[4] = {
        {"krylovd_user_matrices", "Matrices the user holds a reference to."},
        {"krylovd_user_device_bytes", "Device bytes of the user's matrices, resident or not."},
        {"krylovd_user_state_bytes", "State-file bytes of the user's matrices."},
        {"krylovd_user_jobs_in_flight", "The user's requests queued or running."},
    };
    const size_t n = kd_auth_count(server->auth);
    if (n == 0)
        return;
    for (int f = 0; f < 4; f++) {
        kd_text_add(t, "# HELP %s %s\n# TYPE %s gauge\n", families[f].name, families[f].help,
                    families[f].name);
        for (size_t i = 0; i < n; i++) {
            const kd_user_t *u = kd_auth_user(server->auth, i);
            kd_usage_t use;
            kd_store_usage(server->store, u->name, &use);
            const size_t v = f == 0   ? use.matrices
                             : f == 1 ? use.device_bytes
                             : f == 2 ? use.state_bytes
                                      : kd_dispatch_user_jobs(server, u->name);
            kd_text_add(t, "%s{user=\"", families[f].name);
            kd_text_label(t, u->name);
            kd_text_add(t, "\"} %zu\n", v);
        }
    }
}

char *kd_metrics_render(kd_server_t *server, size_t *len)
{
    kd_text_t t = {0};
    const kd_server_counters_t *c = &server->counters;
    const kd_ocl_device_desc_t *d = kd_ocl_desc(server->ocl);
    kd_store_totals_t totals;
    kd_store_totals(server->store, &totals);

    kd_text_add(&t, "# HELP krylovd_info krylovd's version and OpenCL device.\n"
                    "# TYPE krylovd_info gauge\nkrylovd_info{version=\"");
    kd_text_label(&t, KD_VERSION);
    kd_text_add(&t, "\",device=\"");
    kd_text_label(&t, d->name);
    kd_text_add(&t, "\",platform=\"");
    kd_text_label(&t, d->platform);
    kd_text_add(&t, "\",type=\"%s\"} 1\n", d->is_gpu ? "gpu" : (d->is_cpu ? "cpu" : "other"));
    kd_text_metric(&t, "krylovd_uptime_seconds", "gauge", "Seconds since krylovd started.",
                   (double)(kd_clock_ns() - server->start_ns) / 1e9);

    kd_text_add(&t, "# HELP krylovd_requests_total Requests received, by method.\n"
                    "# TYPE krylovd_requests_total counter\n");
    for (int m = 0; m < KD_METHOD_COUNT; m++)
        kd_text_add(&t, "krylovd_requests_total{method=\"%s\"} %llu\n",
                    kd_method_name((kd_method_t)m), (unsigned long long)c->by_method[m]);
    kd_text_add(&t, "# HELP krylovd_errors_total Error responses, by wire error code.\n"
                    "# TYPE krylovd_errors_total counter\n");
    static const char *codes[] = {"BAD_REQUEST",  "NOT_FOUND", "TOO_LARGE",   "DEVICE_MEMORY",
                                  "DEVICE_ERROR", "BUSY",      "CANCELLED",   "TIMEOUT",
                                  "UNSUPPORTED",  "NOT_SPD",   "INTERNAL",    "UNAUTHENTICATED",
                                  "FORBIDDEN",    "QUOTA",     "STORAGE_FULL"};
    for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
        uint64_t n = 0;
        for (int e = 1; e < KD_ERROR_COUNT; e++)
            if (strcmp(kd_error_wire_name(-e), codes[i]) == 0)
                n += c->errors_by_code[e];
        kd_text_add(&t, "krylovd_errors_total{code=\"%s\"} %llu\n", codes[i],
                    (unsigned long long)n);
    }

    kd_text_add(&t, "# HELP krylovd_request_duration_seconds From decoding a request to handing "
                    "its response to the socket.\n"
                    "# TYPE krylovd_request_duration_seconds histogram\n");
    for (int m = 0; m < KD_METHOD_COUNT; m++) {
        const kd_latency_t *lat = &server->latency[m];
        const char *name = kd_method_name((kd_method_t)m);
        uint64_t cum = 0;
        for (int i = 0; i < KD_STATS_PROM_BUCKETS; i++) {
            cum += lat->prom[i];
            kd_text_add(&t,
                        "krylovd_request_duration_seconds_bucket{method=\"%s\",le=\"%g\"} %llu\n",
                        name, kd_stats_prom_bounds[i], (unsigned long long)cum);
        }
        kd_text_add(&t,
                    "krylovd_request_duration_seconds_bucket{method=\"%s\",le=\"+Inf\"} %llu\n"
                    "krylovd_request_duration_seconds_sum{method=\"%s\"} %.9g\n"
                    "krylovd_request_duration_seconds_count{method=\"%s\"} %llu\n",
                    name, (unsigned long long)lat->count, name, lat->sum_s, name,
                    (unsigned long long)lat->count);
    }

    kd_metrics_users(&t, server);

    kd_text_metric(&t, "krylovd_queue_depth", "gauge", "Requests waiting for the device.",
                   (double)kd_worker_queued(server->worker));
    kd_text_metric(&t, "krylovd_jobs_in_flight", "gauge",
                   "Requests queued or running on the device.", (double)server->jobs_in_flight);
    kd_text_metric(&t, "krylovd_connections", "gauge", "Clients connected now.",
                   (double)server->nconns);
    kd_text_metric(&t, "krylovd_shm_regions", "gauge",
                   "Shared-memory regions mapped (unregistered ones still in use included).",
                   (double)server->shm_regions);
    kd_text_metric(&t, "krylovd_shm_mapped_bytes", "gauge",
                   "Bytes of the shared-memory regions mapped.", (double)server->shm_mapped);
    kd_text_metric(&t, "krylovd_connections_accepted_total", "counter", "Connections accepted.",
                   (double)c->connections_total);
    kd_text_metric(&t, "krylovd_connections_refused_total", "counter",
                   "Connections refused (over the limit, or during shutdown).",
                   (double)c->connections_refused);
    kd_text_metric(&t, "krylovd_connections_timed_out_total", "counter",
                   "Connections closed for being idle or sending a message too slowly.",
                   (double)(c->connections_idle + c->connections_slow));
    kd_text_metric(&t, "krylovd_auth_failures_total", "counter",
                   "Failed `auth` requests (wrong name or token).", (double)c->auth_failures);
    kd_text_metric(&t, "krylovd_auth_successes_total", "counter", "Successful `auth` requests.",
                   (double)c->auth_ok);
    kd_text_metric(&t, "krylovd_connections_auth_closed_total", "counter",
                   "Connections closed after three failed `auth` requests.",
                   (double)c->connections_auth);
    kd_text_metric(&t, "krylovd_client_memory_bytes", "gauge",
                   "Bytes every connection holds: buffers, requests in flight, unread replies.",
                   (double)server->climem.used);
    kd_text_metric(&t, "krylovd_rss_bytes", "gauge",
                   "The process's resident memory (/proc/self/statm).",
                   (double)kd_trim_rss_bytes());
    kd_text_metric(&t, "krylovd_malloc_in_use_bytes", "gauge",
                   "Bytes malloc has handed out and not had back (mallinfo2; 0 where unknown).",
                   (double)kd_trim_malloc_in_use());
    kd_text_metric(&t, "krylovd_memory_trims_total", "counter",
                   "Times freed host memory was given back to the system after a load.",
                   (double)server->trim.trims);
    kd_text_metric(&t, "krylovd_client_memory_peak_bytes", "gauge",
                   "The most krylovd_client_memory_bytes has been.", (double)server->climem.peak);
    kd_text_metric(&t, "krylovd_client_memory_limit_bytes", "gauge",
                   "--client-memory: over it the connection holding most is closed.",
                   (double)server->climem.cap);
    kd_text_metric(&t, "krylovd_client_memory_pauses_total", "counter",
                   "Times a connection's reading paused for its share (--connection-memory).",
                   (double)server->climem.pauses);
    kd_text_add(&t, "# HELP krylovd_client_evictions_total Connections closed to bound memory, by "
                    "reason.\n"
                    "# TYPE krylovd_client_evictions_total counter\n");
    for (int r = 0; r < KD_EVICT_REASONS; r++)
        kd_text_add(&t, "krylovd_client_evictions_total{reason=\"%s\"} %llu\n",
                    kd_evict_reason_name((kd_evict_reason_t)r),
                    (unsigned long long)server->climem.evictions[r]);
    kd_text_metric(&t, "krylovd_matrices", "gauge",
                   "Matrices known (resident or in the state dir).", (double)totals.matrices);
    kd_text_metric(&t, "krylovd_matrices_resident", "gauge", "Matrices in device memory.",
                   (double)totals.resident);
    kd_text_metric(&t, "krylovd_device_memory_used_bytes", "gauge",
                   "Device memory held by resident matrices.", (double)totals.device_bytes);
    kd_text_metric(&t, "krylovd_device_memory_budget_bytes", "gauge",
                   "Device memory matrices and vectors may use (--device-memory).",
                   (double)server->device_budget);
    kd_text_metric(&t, "krylovd_device_memory_total_bytes", "gauge",
                   "Global memory of the OpenCL device.", (double)d->global_mem_bytes);
    kd_text_metric(&t, "krylovd_state_bytes", "gauge", "Bytes of matrix files in the state dir.",
                   (double)totals.file_bytes);
    static const struct {
        kd_store_counter_t counter;
        const char *name, *help;
    } cache[] = {
        {KD_STORE_HITS, "krylovd_cache_hits_total", "Requests that found their matrix resident."},
        {KD_STORE_MISSES, "krylovd_cache_misses_total", "Requests whose matrix had to be loaded."},
        {KD_STORE_RELOADS, "krylovd_cache_reloads_total", "Matrices loaded from the state dir."},
        {KD_STORE_EVICTIONS, "krylovd_cache_evictions_total",
         "Matrices moved out of device memory to make room."},
        {KD_STORE_DISK_EVICTIONS, "krylovd_cache_disk_evictions_total",
         "Matrices forgotten to keep the state dir under --state-max-bytes."},
        {KD_STORE_CORRUPT, "krylovd_state_corrupt_files_total", "State files moved aside."},
        {KD_STORE_DEVMEM_RETRIES, "krylovd_device_memory_retries_total",
         "Driver allocation failures retried after evicting."},
        {KD_STORE_MEMORY_WAITS, "krylovd_device_memory_waits_total",
         "Requests that waited for matrices in use by others to make room."},
        {KD_STORE_MEMORY_WAIT_MS, "krylovd_device_memory_wait_ms_total",
         "Milliseconds requests waited for device memory, summed."},
    };
    for (size_t i = 0; i < sizeof(cache) / sizeof(cache[0]); i++)
        kd_text_metric(&t, cache[i].name, "counter", cache[i].help,
                       (double)totals.counters[cache[i].counter]);
    kd_text_metric(&t, "krylovd_spmv_grouped_total", "counter",
                   "spmv requests served in a group of several (one device wait for all).",
                   (double)atomic_load(&server->spmv_stats.grouped));
    kd_text_metric(&t, "krylovd_spmv_batched_total", "counter",
                   "spmv requests that shared their SpMM launch with another request.",
                   (double)atomic_load(&server->spmv_stats.batched));
    kd_text_metric(&t, "krylovd_spmv_launches_total", "counter", "SpMM launches of the spmv path.",
                   (double)atomic_load(&server->spmv_stats.launches));
    kd_text_metric(&t, "krylovd_spmv_beside_solve_total", "counter",
                   "spmv requests served at a running solve's check, on the express queue.",
                   (double)atomic_load(&server->spmv_stats.beside_solve));
    kd_ocl_program_stats_t ps;
    kd_ocl_program_stats(server->ocl, &ps);
    kd_text_metric(&t, "krylovd_programs_built_on_request_total", "counter",
                   "OpenCL programs built for a request that needed one not built yet.",
                   (double)kd_server_programs_built_on_request(server));
    kd_text_metric(&t, "krylovd_programs_compiled_total", "counter",
                   "OpenCL programs compiled from source.", (double)ps.built_from_source);
    kd_text_metric(&t, "krylovd_programs_loaded_total", "counter",
                   "OpenCL programs loaded from the program cache's binaries.",
                   (double)ps.loaded_from_binary);
    kd_text_metric(&t, "krylovd_program_binaries_rejected_total", "counter",
                   "Cached program binaries found damaged or stale, or refused by the driver.",
                   (double)ps.binaries_rejected);
    kd_programs_progress_t wp;
    kd_programs_warmup_progress(server->warmup, &wp);
    kd_text_metric(&t, "krylovd_programs_warm_seconds", "gauge",
                   "Wall time of the background program warm-up (so far, while it runs).",
                   wp.ms / 1e3);
    kd_text_metric(&t, "krylovd_programs_warm_total", "gauge",
                   "OpenCL programs the background warm-up builds.", (double)wp.total);
    kd_text_metric(&t, "krylovd_programs_warm_built", "gauge",
                   "OpenCL programs the background warm-up has built so far.", (double)wp.built);
    if (t.failed) {
        free(t.buf);
        return NULL;
    }
    *len = t.len;
    return t.buf;
}

static void kd_metrics_maybe_free(kd_metrics_t *m)
{
    if (m->closing && m->handles_open == 0 && m->nconns == 0)
        free(m);
}

static void kd_mconn_closed(uv_handle_t *handle)
{
    kd_mconn_t *c = handle->data;
    kd_metrics_t *m = c->owner;
    if (c->prev != NULL)
        c->prev->next = c->next;
    else
        m->conns = c->next;
    if (c->next != NULL)
        c->next->prev = c->prev;
    m->nconns--;
    free(c->response);
    free(c);
    kd_metrics_maybe_free(m);
}

static void kd_mconn_close(kd_mconn_t *c)
{
    if (!uv_is_closing((uv_handle_t *)&c->tcp))
        uv_close((uv_handle_t *)&c->tcp, kd_mconn_closed);
}

static void kd_mconn_written(uv_write_t *req, int status)
{
    (void)status;
    kd_mconn_close(req->data);
}

static void kd_mconn_respond(kd_mconn_t *c, const char *status, const char *extra_headers,
                             const char *body, size_t body_len, int head_only)
{
    kd_text_t t = {0};
    kd_text_add(
        &t, "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
        status,
        strncmp(status, "200", 3) == 0 ? "text/plain; version=0.0.4; charset=utf-8"
                                       : "text/plain; charset=utf-8",
        body_len, extra_headers);
    if (!head_only && body_len > 0 && !t.failed) {
        char *grown = realloc(t.buf, t.len + body_len + 1);
        if (grown == NULL) {
            t.failed = 1;
        } else {
            t.buf = grown;
            memcpy(t.buf + t.len, body, body_len);
            t.len += body_len;
        }
    }
    if (t.failed) {
        free(t.buf);
        kd_mconn_close(c);
        return;
    }
    c->answered = 1;
    c->response = t.buf;
    c->write.data = c;
    uv_buf_t buf = uv_buf_init(t.buf, (unsigned int)t.len);
    uv_read_stop((uv_stream_t *)&c->tcp);
    if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, kd_mconn_written) != 0)
        kd_mconn_close(c);
}

static void kd_mconn_handle(kd_mconn_t *c)
{
    /* request line: METHOD SP TARGET SP VERSION */
    char method[16], target[256];
    char *eol = memchr(c->request, '\r', c->len);
    size_t line = eol ? (size_t)(eol - c->request) : c->len;
    char first[512];
    if (line >= sizeof(first))
        line = sizeof(first) - 1;
    memcpy(first, c->request, line);
    first[line] = '\0';
    if (sscanf(first, "%15s %255s HTTP/%*d.%*d", method, target) != 2) {
        const char *msg = "bad request\n";
        kd_mconn_respond(c, "400 Bad Request", "", msg, strlen(msg), 0);
        return;
    }
    int head = strcmp(method, "HEAD") == 0;
    char *query = strchr(target, '?');
    if (query != NULL)
        *query = '\0';
    if (strcmp(target, "/metrics") != 0) {
        const char *msg = "not found: krylovd serves /metrics\n";
        kd_mconn_respond(c, "404 Not Found", "", msg, strlen(msg), head);
        return;
    }
    if (strcmp(method, "GET") != 0 && !head) {
        const char *msg = "method not allowed\n";
        kd_mconn_respond(c, "405 Method Not Allowed", "Allow: GET, HEAD\r\n", msg, strlen(msg), 0);
        return;
    }
    size_t len = 0;
    char *body = kd_metrics_render(c->owner->server, &len);
    if (body == NULL) {
        const char *msg = "out of memory\n";
        kd_mconn_respond(c, "500 Internal Server Error", "", msg, strlen(msg), head);
        return;
    }
    kd_mconn_respond(c, "200 OK", "", body, len, head);
    free(body);
}

static void kd_mconn_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    kd_mconn_t *c = handle->data;
    (void)suggested;
    buf->base = c->request + c->len;
    buf->len = KD_METRICS_MAX_REQUEST - 1 - c->len;
}

static void kd_mconn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    kd_mconn_t *c = stream->data;
    (void)buf;
    if (nread < 0) {
        kd_mconn_close(c);
        return;
    }
    if (c->answered)
        return;
    c->len += (size_t)nread;
    c->request[c->len] = '\0';
    if (strstr(c->request, "\r\n\r\n") != NULL || strstr(c->request, "\n\n") != NULL) {
        kd_mconn_handle(c);
    } else if (c->len >= KD_METRICS_MAX_REQUEST - 1) {
        const char *msg = "request header too large\n";
        kd_mconn_respond(c, "431 Request Header Fields Too Large", "", msg, strlen(msg), 0);
    }
}

static void kd_metrics_accept(uv_stream_t *listener, int status)
{
    kd_metrics_t *m = listener->data;
    if (status < 0 || m->closing)
        return;
    kd_mconn_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return;
    c->owner = m;
    c->opened_ns = kd_clock_ns();
    if (uv_tcp_init(listener->loop, &c->tcp) != 0) {
        free(c);
        return;
    }
    c->tcp.data = c;
    c->next = m->conns;
    if (m->conns != NULL)
        m->conns->prev = c;
    m->conns = c;
    m->nconns++;
    if (uv_accept(listener, (uv_stream_t *)&c->tcp) != 0 || m->nconns > KD_METRICS_MAX_CONNS) {
        kd_mconn_close(c);
        return;
    }
    uv_read_start((uv_stream_t *)&c->tcp, kd_mconn_alloc, kd_mconn_read);
}

static void kd_metrics_sweep(uv_timer_t *timer)
{
    kd_metrics_t *m = timer->data;
    uint64_t now = kd_clock_ns();
    for (kd_mconn_t *c = m->conns; c != NULL; c = c->next)
        if (now - c->opened_ns > KD_METRICS_DEADLINE_NS)
            kd_mconn_close(c);
}

static void kd_metrics_handle_closed(uv_handle_t *handle)
{
    kd_metrics_t *m = handle->data;
    m->handles_open--;
    kd_metrics_maybe_free(m);
}

int kd_metrics_start(kd_server_t *server, const char *address, int *port, kd_err_t *err)
{
    struct sockaddr_storage addr;
    int rc = kd_server_parse_address(address, &addr, "--metrics", err);
    if (rc != KD_OK)
        return rc;
    kd_metrics_t *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of memory");
    m->server = server;
    uv_tcp_init(server->loop, &m->listener);
    uv_timer_init(server->loop, &m->sweep);
    m->listener.data = m;
    m->sweep.data = m;
    m->handles_open = 2;
    server->metrics = m;
    int uvrc = uv_tcp_bind(&m->listener, (const struct sockaddr *)&addr, 0);
    if (uvrc == 0)
        uvrc = uv_listen((uv_stream_t *)&m->listener, 16, kd_metrics_accept);
    if (uvrc != 0)
        return kd_err_set(err, KD_EIO, "--metrics: cannot listen on %s: %s", address,
                          uv_strerror(uvrc));
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    *port = 0;
    if (uv_tcp_getsockname(&m->listener, (struct sockaddr *)&bound, &len) == 0)
        *port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                  : ((struct sockaddr_in *)&bound)->sin_port);
    uv_timer_start(&m->sweep, kd_metrics_sweep, 1000, 1000);
    KD_INFO("metrics", "serving http://%s/metrics port=%d", address, *port);
    return KD_OK;
}

void kd_metrics_stop(kd_server_t *server)
{
    kd_metrics_t *m = server->metrics;
    if (m == NULL)
        return;
    server->metrics = NULL;
    m->closing = 1;
    for (kd_mconn_t *c = m->conns; c != NULL; c = c->next)
        kd_mconn_close(c);
    uv_close((uv_handle_t *)&m->listener, kd_metrics_handle_closed);
    uv_close((uv_handle_t *)&m->sweep, kd_metrics_handle_closed);
}
