/*
 * Server lifecycle: open the device, the matrix cache and the state directory, start the worker,
 * listen, handle signals, sweep slow and idle connections, and shut down gracefully.
 * SIGINT/SIGTERM stop accepting, answer every queued request CANCELLED at once, let the running
 * one finish for up to shutdown_grace_ms and then cancel it (its client gets CANCELLED), flush and
 * close every connection, stop the worker and leave the loop with exit status 0. SIGHUP reopens
 * the log file, rereads the auth file (a bad one is logged and the old table kept) and reloads
 * the TLS certificate and key.
 *
 * Protected mode, as Redis has it: without an auth file the server is open to whoever reaches
 * it, so it listens only on loopback and Unix sockets unless --no-auth says otherwise.
 */
#include "server/server.h"
#include "server/dispatch/dispatch.h"
#include "server/handlers/spread.h"
#include "common/clock.h"
#include "common/checked.h"
#include "common/log.h"
#include "common/recycle.h"
#include "server/net/metrics.h"
#include "server/notify.h"
#include "solver/runtime/pool.h"
#include "solver/runtime/program_cache.h"
#include "server/net/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* "127.0.0.1:7373", "[::1]:7373", "localhost:7373" (numeric only for the host part besides
 * localhost: a daemon should not depend on DNS to start). */
int kd_server_parse_address(const char *text, struct sockaddr_storage *addr, const char *what,
                            kd_err_t *err)
{
    char host[256];
    const char *colon;
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (close == NULL || close[1] != ':')
            return kd_err_set(err, KD_EBADREQ, "%s '%s': expected [IPv6]:PORT", what, text);
        size_t n = (size_t)(close - text - 1);
        if (n >= sizeof(host))
            return kd_err_set(err, KD_EBADREQ, "%s '%s': address too long", what, text);
        memcpy(host, text + 1, n);
        host[n] = '\0';
        colon = close + 1;
    } else {
        colon = strrchr(text, ':');
        if (colon == NULL)
            return kd_err_set(err, KD_EBADREQ, "%s '%s': expected HOST:PORT", what, text);
        size_t n = (size_t)(colon - text);
        if (n >= sizeof(host))
            return kd_err_set(err, KD_EBADREQ, "%s '%s': address too long", what, text);
        memcpy(host, text, n);
        host[n] = '\0';
    }
    char *end;
    long port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || end == colon + 1 || port < 0 || port > 65535)
        return kd_err_set(err, KD_EBADREQ, "%s '%s': port must be 0..65535", what, text);
    if (strcmp(host, "localhost") == 0)
        snprintf(host, sizeof(host), "127.0.0.1");
    memset(addr, 0, sizeof(*addr));
    if (uv_ip4_addr(host, (int)port, (struct sockaddr_in *)addr) == 0)
        return KD_OK;
    if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)addr) == 0)
        return KD_OK;
    return kd_err_set(err, KD_EBADREQ, "%s '%s': '%s' is not an IPv4 or IPv6 address", what, text,
                      host);
}

static void kd_on_connection(uv_stream_t *listener, int status)
{
    kd_server_t *server = listener->data;
    if (status < 0) {
        KD_WARN("server", "accept failed: %s", uv_strerror(status));
        return;
    }
    kd_conn_accept(server, listener == (uv_stream_t *)&server->unix_listener);
}

static int kd_address_is_loopback(const struct sockaddr_storage *addr)
{
    if (addr->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)addr)->sin_addr.s_addr) >> 24) == 127;
    if (addr->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a))
            return a->s6_addr[12] == 127;
        return IN6_IS_ADDR_LOOPBACK(a);
    }
    return addr->ss_family == AF_UNIX;
}

/* Protected mode: no auth file means no clients beyond this machine, unless --no-auth. */
static int kd_server_check_exposure(kd_server_t *server, const struct sockaddr_storage *addr,
                                    const char *shown, kd_err_t *err)
{
    if (server->auth != NULL || kd_address_is_loopback(addr))
        return KD_OK;
    if (!server->cfg.no_auth)
        return kd_err_set(err, KD_EBADREQ,
                          "protected mode: refusing to listen on %s without authentication. Give "
                          "--auth-file FILE (users and token hashes; `krylov token new NAME ROLE` "
                          "makes one), listen on loopback (127.0.0.1) or a Unix socket, or pass "
                          "--no-auth to serve everyone who can reach %s",
                          shown, shown);
    KD_WARN("server",
            "--no-auth: listening on %s with no authentication; anyone who reaches it "
            "may upload, read and drop matrices",
            shown);
    return KD_OK;
}

/* The listening Unix socket systemd passed (socket activation). */
static int kd_server_open_unix(kd_server_t *server, int fd, kd_err_t *err)
{
    int uvrc = uv_pipe_init(server->loop, &server->unix_listener, 0);
    if (uvrc == 0) {
        server->unix_listener.data = server;
        server->unix_listening = 1;
        server->unix_passed = 1;
        uvrc = uv_pipe_open(&server->unix_listener, fd);
    }
    if (uvrc == 0)
        uvrc = uv_listen((uv_stream_t *)&server->unix_listener, 128, kd_on_connection);
    if (uvrc != 0)
        return kd_err_set(err, KD_EIO, "cannot use the Unix socket systemd passed: %s",
                          uv_strerror(uvrc));
    KD_INFO("server", "using the Unix socket passed by systemd (fd %d)", fd);
    return KD_OK;
}

/* --listen unix:PATH: mode 0660 from the start (umask around bind; the worker thread, the only
 * other creator of files, is not running yet), then the group. A stale socket file is replaced. */
static int kd_server_listen_unix(kd_server_t *server, kd_err_t *err)
{
    const char *path = server->cfg.listen_unix;
    gid_t gid = (gid_t)-1;
    if (server->cfg.unix_group[0] != '\0') {
        struct group *g = getgrnam(server->cfg.unix_group);
        if (g == NULL)
            return kd_err_set(err, KD_EBADREQ, "--unix-group '%s': no such group",
                              server->cfg.unix_group);
        gid = g->gr_gid;
    }
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode))
            return kd_err_set(err, KD_EIO, "--listen unix:%s: the path exists and is not a socket",
                              path);
        unlink(path);
    }
    int uvrc = uv_pipe_init(server->loop, &server->unix_listener, 0);
    if (uvrc != 0)
        return kd_err_set(err, KD_EIO, "uv_pipe_init: %s", uv_strerror(uvrc));
    server->unix_listener.data = server;
    server->unix_listening = 1;
    mode_t old = umask(0117);
    uvrc = uv_pipe_bind(&server->unix_listener, path);
    umask(old);
    if (uvrc == 0 && gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) != 0)
        return kd_err_set(err, KD_EIO, "--unix-group %s: chown %s: %s", server->cfg.unix_group,
                          path, strerror(errno));
    if (uvrc == 0)
        uvrc = uv_listen((uv_stream_t *)&server->unix_listener, 128, kd_on_connection);
    if (uvrc != 0)
        return kd_err_set(err, KD_EIO, "cannot listen on unix:%s: %s", path, uv_strerror(uvrc));
    KD_INFO("server", "listening unix=%s mode=0660%s%s", path,
            server->cfg.unix_group[0] ? " group=" : "", server->cfg.unix_group);
    return KD_OK;
}

static int kd_write_port_file(const char *path, int port, kd_err_t *err)
{
    char tmp[KD_PATH_MAX + 8];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return kd_err_set(err, KD_EIO, "--port-file path too long");
    FILE *f = fopen(tmp, "w");
    if (f == NULL)
        return kd_err_set(err, KD_EIO, "cannot write %s: %s", tmp, strerror(errno));
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        return kd_err_set(err, KD_EIO, "cannot write %s: %s", path, strerror(errno));
    return KD_OK;
}

static void kd_on_sweep(uv_timer_t *timer)
{
    kd_conn_sweep(timer->data, kd_clock_ns());
}

static void kd_on_signal(uv_signal_t *handle, int signum)
{
    kd_server_t *server = handle->data;
    if (signum == SIGHUP) {
        if (server->cfg.log_file[0] != '\0' && kd_log_open(server->cfg.log_file) != KD_OK)
            KD_ERROR("server", "cannot reopen log file %s", server->cfg.log_file);
        KD_INFO("server", "SIGHUP: log reopened");
        if (server->cfg.auth_file[0] != '\0') {
            kd_err_t err = {0};
            if (kd_login_load(server, &err) != KD_OK)
                KD_ERROR("server", "SIGHUP: auth file not reloaded, the old one stays: %s",
                         err.message);
            else
                KD_INFO("server", "SIGHUP: auth file reloaded users=%zu",
                        kd_auth_count(server->auth));
        }
        kd_err_t tls_err = {0};
        if (server->tls != NULL && kd_tls_ctx_reload(server->tls, &tls_err) != KD_OK)
            KD_ERROR("server", "SIGHUP: keeping the TLS certificate in use: %s", tls_err.message);
        else if (server->tls != NULL)
            KD_INFO("server", "SIGHUP: TLS certificate and key reloaded for new connections");
        return;
    }
    KD_INFO("server", "signal %d: shutting down", signum);
    kd_server_shutdown(server);
}

uint64_t kd_server_programs_built_on_request(const kd_server_t *server)
{
    uint64_t built, waited;
    kd_ocl_program_counts(server->ocl, &built, &waited);
    return built;
}

static void kd_server_job_finished(kd_server_t *server);

/* The layers below reach up only through these (dispatch.h, cache.h): registered first thing. */
static const kd_dispatch_net_t kd_server_net = {
    .send = kd_conn_send,
    .send_parts = kd_conn_send_parts,
    .send_error = kd_conn_send_error,
    .close = kd_conn_close,
    .abort = kd_conn_abort,
    .resume_reading = kd_conn_resume_reading,
    .unref = kd_conn_unref,
    .job_finished = kd_server_job_finished,
};

static const kd_cache_spread_t kd_server_spread = {
    .ranks = kd_spread_ranks,
    .again = kd_spread_again,
    .discard = kd_spread_discard,
    .forget = kd_spread_forget,
};

/* The writer thread finished a file: the worker publishes it (cache.h). Only after the worker
 * started can a write have been queued, so server->worker is set by then. */
static void kd_server_wake_worker(void *arg)
{
    kd_server_t *server = arg;
    kd_worker_wake(server->worker);
}

static int kd_server_open(kd_server_t *server, uv_loop_t *loop, const kd_config_t *cfg,
                          kd_err_t *err)
{
    memset(server, 0, sizeof(*server));
    server->net = &kd_server_net;
    server->spread = &kd_server_spread;
    server->loop = loop;
    server->cfg = *cfg;
    server->start_ns = kd_clock_ns();
    server->frame_limits.max_message = cfg->max_message;
    server->frame_limits.max_elements = cfg->max_array_elements + 64;
    server->frame_limits.max_depth = 16;
    server->proto_limits.max_rows = cfg->max_rows;
    server->proto_limits.max_cols = cfg->max_cols;
    server->proto_limits.max_nnz = cfg->max_nnz;
    server->proto_limits.max_nrhs = cfg->max_nrhs;
    server->proto_limits.max_array_elements = cfg->max_array_elements;
    server->csr_limits.max_rows = cfg->max_rows;
    server->csr_limits.max_cols = cfg->max_cols;
    server->csr_limits.max_nnz = cfg->max_nnz;

    if (cfg->default_format[0] != '\0') {
        kd_format_t f;
        if (kd_format_parse(cfg->default_format, &f) != 0 || !kd_format_available(f))
            return kd_err_set(err, KD_EBADREQ, "--format '%s' is not an available format",
                              cfg->default_format);
    }

    int rc;
    if (cfg->auth_file[0] != '\0') {
        if ((rc = kd_login_load(server, err)) != KD_OK)
            return rc;
        KD_INFO("server", "auth file %s users=%zu", cfg->auth_file, kd_auth_count(server->auth));
    }
    struct sockaddr_storage addr;
    if (cfg->listen[0] == '\0' && cfg->listen_unix[0] == '\0')
        return kd_err_set(err, KD_EBADREQ, "--listen: nothing to listen on");
    if (cfg->listen[0] != '\0' &&
        (rc = kd_server_parse_address(cfg->listen, &addr, "--listen", err)) != KD_OK)
        return rc;
    /* Before the device: a bad certificate file should stop the daemon at once. */
    if (cfg->tls_cert[0] != '\0' || cfg->tls_key[0] != '\0' || cfg->tls_ca[0] != '\0') {
        rc = kd_tls_ctx_new(cfg->tls_cert, cfg->tls_key, cfg->tls_ca, &server->tls, err);
        if (rc != KD_OK)
            return rc;
        KD_INFO("server", "TLS on: cert=%s client certificates %s", cfg->tls_cert,
                cfg->tls_ca[0] != '\0' ? "required" : "not asked for");
    }

    rc = kd_ocl_open(cfg->device, &server->ocl, err);
    if (rc != KD_OK)
        return kd_err_prefix(err, "opening OpenCL device '%s'", cfg->device);
    const kd_ocl_device_desc_t *desc = kd_ocl_desc(server->ocl);
    KD_INFO("server", "device \"%s\" platform=\"%s\" type=%s global_mem=%llu fp64=%d", desc->name,
            desc->platform, desc->is_gpu ? "gpu" : (desc->is_cpu ? "cpu" : "other"),
            (unsigned long long)desc->global_mem_bytes, desc->has_fp64);

    if (cfg->test_max_alloc > 0) {
        KD_WARN("server", "test knob: device allocations over %zu bytes are refused",
                cfg->test_max_alloc);
        kd_ocl_test_set_max_alloc(server->ocl, cfg->test_max_alloc);
    }

    /* Before the cache: it may lower a percentage budget to what the host's RAM can hold. */
    if ((rc = kd_hostmem_check(server, err)) != KD_OK ||
        (rc = kd_climem_init(server, err)) != KD_OK)
        return rc;
    /* Large message and response buffers kept for the next request (common/recycle.h): idle,
     * at most half the client memory cap (kd_hostmem_check leaves twice the cap for clients)
     * and 1 GiB. */
    kd_recycle_set_limit(
        server->climem.cap / 2 < ((size_t)1 << 30) ? server->climem.cap / 2 : (size_t)1 << 30, 4);
    rc = kd_store_new(&server->store);
    if (rc != KD_OK)
        return kd_err_set(err, rc, "cannot create the matrix store");
    rc = kd_cache_open(server, err);
    if (rc != KD_OK)
        return rc;
    /* Charged before a matrix is built from a request (common/csr.h): its build within one
     * upload's share of host memory (kd_hostmem_check reserves 2 x --max-message for it), its
     * CSR arrays within the device budget (the put handler scales that by the ranks a matrix
     * may be spread over). */
    server->csr_limits.max_build_bytes = kd_sat_add(cfg->max_message, cfg->max_message);
    server->csr_limits.build_limit = "2 x --max-message: raise --max-message";
    server->csr_limits.max_device_bytes = server->device_budget;
    server->csr_limits.device_limit = "--device-memory, or a larger device";
    kd_warm_open_cache(server); /* before the worker: requests build through it */

    /* Socket activation: systemd already listens (TCP, a Unix socket or both); take its sockets
     * instead of binding --listen. */
    char why[160] = "";
    int passed = -1, passed_unix = -1;
    const int activated = kd_notify_listen_fds(&passed, &passed_unix, why, sizeof(why));
    if (activated < 0)
        return kd_err_set(err, KD_EIO, "socket activation: %s", why);
    if (passed_unix >= 0 && (rc = kd_server_open_unix(server, passed_unix, err)) != KD_OK)
        return rc;
    if (activated == 0 && cfg->listen_unix[0] != '\0' &&
        (rc = kd_server_listen_unix(server, err)) != KD_OK)
        return rc;

    /* before the worker, which reads server->writer; it wakes the worker through the server */
    rc = kd_cache_start_writer(server, kd_server_wake_worker, server);
    if (rc != KD_OK)
        return kd_err_set(err, rc, "cannot start the state directory's writer thread");
    kd_worker_callbacks_t cb = {.run = kd_handlers_run,
                                .idle = kd_cache_write_behind, /* persist "behind" */
                                .done = kd_dispatch_job_done,
                                .notify = kd_dispatch_job_notify,
                                .ctx = server};
    /* NULL (out of memory) only means every request allocates its vectors */
    server->pool = kd_pool_new(KD_SERVER_POOL_BYTES, KD_SERVER_POOL_ITEM_BYTES);
    rc = kd_worker_start(loop, cfg->queue_depth, &cb, &server->worker);
    if (rc != KD_OK)
        return kd_err_set(err, rc, "cannot start the device worker thread");
    if (cfg->spin_us >= 0)
        kd_worker_set_spin(server->worker, (uint64_t)cfg->spin_us * 1000u);
    else if (kd_ocl_desc(server->ocl)->is_gpu)
        kd_worker_set_spin(server->worker, KD_SERVER_WORKER_SPIN_NS);

    int uvrc = uv_tcp_init(loop, &server->listener);
    if (uvrc != 0)
        return kd_err_set(err, KD_EIO, "uv_tcp_init: %s", uv_strerror(uvrc));
    server->listener.data = server;
    server->listening = 1;
    if (passed >= 0) {
        uvrc = uv_tcp_open(&server->listener, passed);
        if (uvrc == 0)
            uvrc = uv_listen((uv_stream_t *)&server->listener, 128, kd_on_connection);
        if (uvrc != 0)
            return kd_err_set(err, KD_EIO, "cannot use the socket systemd passed: %s",
                              uv_strerror(uvrc));
        KD_INFO("server", "using the listening socket passed by systemd (fd %d)", passed);
    } else if (activated == 0 && cfg->listen[0] != '\0') {
        /* Checked here, not at parse time: under socket activation `listen` is ignored. */
        if ((rc = kd_server_check_exposure(server, &addr, cfg->listen, err)) != KD_OK)
            return rc;
        uvrc = uv_tcp_bind(&server->listener, (const struct sockaddr *)&addr, 0);
        if (uvrc == 0)
            uvrc = uv_listen((uv_stream_t *)&server->listener, 128, kd_on_connection);
        if (uvrc != 0)
            return kd_err_set(err, KD_EIO, "cannot listen on %s: %s", cfg->listen,
                              uv_strerror(uvrc));
    }
    struct sockaddr_storage bound;
    int len = sizeof(bound);
    int port = 0;
    if ((passed >= 0 || (activated == 0 && cfg->listen[0] != '\0')) &&
        uv_tcp_getsockname(&server->listener, (struct sockaddr *)&bound, &len) == 0) {
        port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                 : ((struct sockaddr_in *)&bound)->sin_port);
        if (passed >= 0 && (rc = kd_server_check_exposure(
                                server, &bound, "the socket systemd passed", err)) != KD_OK)
            return rc;
    }

    uv_signal_t *sigs[] = {&server->sigint, &server->sigterm, &server->sighup};
    int signums[] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) {
        uv_signal_init(loop, sigs[i]);
        sigs[i]->data = server;
        uv_signal_start(sigs[i], kd_on_signal, signums[i]);
    }
    uv_timer_init(loop, &server->grace_timer);
    server->grace_timer.data = server;
    uv_timer_init(loop, &server->sweep_timer);
    server->sweep_timer.data = server;
    int64_t shortest = cfg->idle_timeout_ms;
    if (cfg->message_timeout_ms > 0 && (shortest == 0 || cfg->message_timeout_ms < shortest))
        shortest = cfg->message_timeout_ms;
    if (shortest > 0) {
        uint64_t every = (uint64_t)shortest / 8;
        every = every < 20 ? 20 : (every > 1000 ? 1000 : every);
        uv_timer_start(&server->sweep_timer, kd_on_sweep, every, every);
    }
    signal(SIGPIPE, SIG_IGN);
    if ((rc = kd_trim_start(server)) != KD_OK)
        return kd_err_set(err, rc, "cannot start the memory trim timer");

    if (cfg->metrics[0] != '\0') {
        int metrics_port = 0;
        rc = kd_metrics_start(server, cfg->metrics, &metrics_port, err);
        if (rc != KD_OK)
            return rc;
        if (cfg->metrics_port_file[0] != '\0' &&
            (rc = kd_write_port_file(cfg->metrics_port_file, metrics_port, err)) != KD_OK)
            return rc;
    }
    /* Last: a test (or a script) that sees the port file may use every listener at once. */
    if (cfg->port_file[0] != '\0') {
        rc = kd_write_port_file(cfg->port_file, port, err);
        if (rc != KD_OK)
            return rc;
    }
    kd_notify_watchdog_start(loop, &server->watchdog);

    KD_INFO("server", "listening addr=%s port=%d version=%s", passed >= 0 ? "systemd" : cfg->listen,
            port, KD_VERSION);
    snprintf(server->ready_status, sizeof(server->ready_status), "serving on port %d with %s", port,
             desc->name);
    /* READY now: programs are built in the background, requests meanwhile wait for theirs. */
    kd_warm_start(server);
    char status[320];
    snprintf(status, sizeof(status), "%s%s", server->ready_status,
             server->warmup != NULL ? "; building OpenCL programs" : "");
    kd_notify_ready(status);
    return KD_OK;
}

int kd_server_init(kd_server_t *server, uv_loop_t *loop, const kd_config_t *cfg, kd_err_t *err)
{
    int rc = kd_server_open(server, loop, cfg, err);
    if (rc != KD_OK) {
        kd_tls_ctx_free(server->tls);
        server->tls = NULL;
    }
    return rc;
}

static void kd_server_worker_closed(void *arg)
{
    kd_server_t *server = arg;
    server->worker = NULL;
    uv_close((uv_handle_t *)&server->sigint, NULL);
    uv_close((uv_handle_t *)&server->sigterm, NULL);
    uv_close((uv_handle_t *)&server->sighup, NULL);
    uv_close((uv_handle_t *)&server->grace_timer, NULL);
    uv_close((uv_handle_t *)&server->sweep_timer, NULL);
    kd_trim_stop(server);
    kd_notify_watchdog_stop(&server->watchdog);
    kd_warm_close(server);
}

/* Every job is done: close the clients (after their last responses are flushed) and the worker. */
static void kd_server_finish(kd_server_t *server)
{
    if (server->finishing)
        return;
    server->finishing = 1;
    uv_timer_stop(&server->grace_timer);
    uv_timer_stop(&server->sweep_timer);
    if (server->trim_timer_open)
        uv_timer_stop(&server->trim_timer);
    kd_conn_t *c = server->conns;
    while (c != NULL) {
        kd_conn_t *next = c->next;
        kd_conn_close(c);
        c = next;
    }
    if (server->worker != NULL) {
        kd_worker_stop(server->worker, kd_server_worker_closed, server);
        /* the worker has ended (its struct goes later, on the loop): the files still to be
         * written behind their replies are written and published before exit */
        kd_cache_stop_writer(server);
    }
}

static void kd_on_grace_expired(uv_timer_t *timer)
{
    kd_server_t *server = timer->data;
    KD_WARN("server", "shutdown grace period over: cancelling %zu job(s)", server->jobs_in_flight);
    kd_dispatch_stop_jobs(server, NULL, KD_ECANCELLED, "the server is shutting down", 1);
}

void kd_server_shutdown(kd_server_t *server)
{
    if (server->shutting_down)
        return;
    server->shutting_down = 1;
    kd_notify_stopping("shutting down");
    kd_metrics_stop(server);
    kd_warm_shutdown(server);
    if (server->listening) {
        uv_close((uv_handle_t *)&server->listener, NULL);
        server->listening = 0;
    }
    if (server->unix_listening) {
        uv_close((uv_handle_t *)&server->unix_listener, NULL);
        if (!server->unix_passed) /* systemd's socket file is systemd's */
            unlink(server->cfg.listen_unix);
        server->unix_listening = 0;
    }
    /* What has not started will not: answer it now. The running job gets the grace period. */
    kd_dispatch_stop_jobs(server, NULL, KD_ECANCELLED, "the server is shutting down", 0);
    if (server->finishing)
        return;
    if (server->jobs_in_flight == 0) {
        kd_server_finish(server);
        return;
    }
    KD_INFO("server", "waiting up to %d ms for %zu job(s)", server->cfg.shutdown_grace_ms,
            server->jobs_in_flight);
    uv_timer_start(&server->grace_timer, kd_on_grace_expired,
                   (uint64_t)server->cfg.shutdown_grace_ms, 0);
}

static void kd_server_job_finished(kd_server_t *server)
{
    if (server->shutting_down && server->jobs_in_flight == 0)
        kd_server_finish(server);
}

/*
 * The loop. On a GPU, after each wake-up it keeps polling without sleeping for
 * KD_SERVER_LOOP_SPIN_NS: a short request's answer comes back from the worker, and the same
 * client's next request arrives, within that time, and a thread woken from the poll's sleep
 * takes tens of microseconds to run again (docs/BENCHMARKS.md, "Many clients"). Idle, it sleeps.
 */
static void kd_server_loop(kd_server_t *server)
{
    const int spin_us = server->cfg.spin_us;
    const uint64_t spin = spin_us >= 0                       ? (uint64_t)spin_us * 1000u
                          : kd_ocl_desc(server->ocl)->is_gpu ? KD_SERVER_LOOP_SPIN_NS
                                                             : 0;
    if (spin == 0) {
        uv_run(server->loop, UV_RUN_DEFAULT);
        return;
    }
    while (uv_run(server->loop, UV_RUN_ONCE) != 0) {
        const uint64_t until = kd_clock_ns() + spin;
        int alive = 1;
        while (alive && kd_clock_ns() < until)
            alive = uv_run(server->loop, UV_RUN_NOWAIT) != 0;
        if (!alive)
            break;
    }
}

int kd_server_run(kd_server_t *server)
{
    kd_server_loop(server);
    kd_warm_close(server); /* the loop may end without a shutdown (a failed start): no-op then */
    kd_pool_free(server->pool);
    server->pool = NULL;
    kd_store_free(server->store);
    server->store = NULL;
    kd_cache_close(server);
    kd_ocl_close(server->ocl);
    server->ocl = NULL;
    kd_auth_free(server->auth);
    server->auth = NULL;
    kd_program_cache_close(server->programs);
    server->programs = NULL;
    kd_tls_ctx_free(server->tls);
    server->tls = NULL;
    KD_INFO("server", "stopped");
    return server->exit_code;
}
