/*
 * The OpenCL program warm-up as the server sees it (issue 32). krylovd listens at once and builds
 * its programs behind that, on the warm-up's own threads (solver/runtime/programs.c); a request that
 * needs a program not built yet has it built first, or waits for the warm-up thread building it
 * (solver/runtime/ocl.c's program table), on the device worker, never on the loop thread.
 *
 * The warm-up threads report progress through an async handle; on the loop thread this file logs
 * it (the start, every KD_WARM_LOG_EVERY_MS, the end), keeps systemd's STATUS= line current and
 * answers the server.status requests that asked to wait for a warm server (wait_warm), at the end
 * or at their timeout_ms.
 *
 * Compiled programs are kept in --cache-dir, never in the state directory: a small state disk
 * filled with binaries refused the matrices it is for. A cache that cannot be opened or written
 * costs the next start its builds, never a request (one warning).
 */
#include "common/clock.h"
#include "common/log.h"
#include "protocol/writer.h"
#include "server/notify.h"
#include "server/handlers/replies.h"
#include "server/server.h"
#include "server/dispatch/status.h"
#include "server/dispatch/dispatch.h"
#include "solver/runtime/program_cache.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KD_WARM_LOG_EVERY_MS 10000

/* A server.status request waiting for the warm-up (wait_warm). */
struct kd_warm_waiter {
    uv_timer_t timer; /* its timeout_ms, when it has one */
    kd_conn_t *conn;  /* a reference is held until it is answered */
    uint64_t msgid;
    int admin;
    struct kd_warm_waiter *next;
};

/* Binaries earlier versions kept in STATE_DIR/programs: removed, so the state disk holds only
 * matrices (they are rebuilt into the cache directory). Only the program cache's own names. */
static void kd_warm_clear_old_programs(kd_server_t *server)
{
    char dir[KD_PATH_MAX + 16], path[KD_PATH_MAX + 300];
    snprintf(dir, sizeof(dir), "%s/programs", server->cfg.state_dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    size_t removed = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const size_t n = strlen(e->d_name);
        const int ours = (n == 36 && strcmp(e->d_name + 32, ".kdp") == 0) ||
                         (e->d_name[0] == '.' && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0);
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (ours && unlink(path) == 0)
            removed++;
    }
    closedir(d);
    const int gone = rmdir(dir) == 0;
    KD_INFO("server",
            "removed %zu compiled programs from %s (an older krylovd kept them in the state "
            "directory; they are now kept in --cache-dir)%s",
            removed, dir, gone ? "" : "; the folder holds other files and stays");
}

/* 1 when path is dir or under it. */
static int kd_warm_path_under(const char *path, const char *dir)
{
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/')
        n--;
    return n > 0 && strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

void kd_warm_open_cache(kd_server_t *server)
{
    const kd_config_t *cfg = &server->cfg;
    if (server->state != NULL)
        kd_warm_clear_old_programs(server);
    if (cfg->cache_dir[0] == '\0' || strcmp(cfg->cache_dir, "none") == 0) {
        KD_INFO("server", "no program cache (--cache-dir none): every start compiles");
        return;
    }
    if (cfg->state_dir[0] != '\0' && kd_warm_path_under(cfg->cache_dir, cfg->state_dir)) {
        KD_WARN("server",
                "--cache-dir %s is inside the state directory, which holds matrices only: no "
                "program cache (every start compiles)",
                cfg->cache_dir);
        return;
    }
    char identity[1024];
    kd_err_t err = {0};
    kd_ocl_device_identity(server->ocl, identity, sizeof(identity));
    if (kd_program_cache_open(cfg->cache_dir, identity, &server->programs, &err) != KD_OK) {
        KD_WARN("server", "no program cache, every start compiles: %s", err.message);
        return;
    }
    /* One that cannot be written (read-only, full) says so once, at its first failed store. */
    kd_ocl_set_program_cache(server->ocl, server->programs);
}

/* Called on a warm-up thread: wake the loop. */
static void kd_warm_progress_from_thread(void *ctx)
{
    kd_server_t *server = ctx;
    uv_async_send(&server->warm_async);
}

/* systemd's STATUS= line: where it serves, and how far the warm-up is. */
static void kd_warm_notify(kd_server_t *server, const kd_programs_progress_t *p)
{
    char status[320];
    if (server->warmup == NULL)
        snprintf(status, sizeof(status), "%s", server->ready_status);
    else if (!p->done)
        snprintf(status, sizeof(status), "%s; building OpenCL programs: %zu/%zu",
                 server->ready_status, p->built + p->failed, p->total);
    else
        snprintf(status, sizeof(status), "%s; OpenCL programs ready (%zu built in %.0f s%s)",
                 server->ready_status, p->built, p->ms / 1e3, p->failed ? ", some failed" : "");
    kd_notify_status(status);
}

static void kd_warm_waiter_closed(uv_handle_t *handle)
{
    free(handle->data);
}

/* Answer one waiter (code KD_OK: the status) and let it go. */
static void kd_warm_answer(kd_server_t *server, struct kd_warm_waiter *waiter, int code,
                           const char *message)
{
    struct kd_warm_waiter **at = &server->warm_waiters;
    while (*at != NULL && *at != waiter)
        at = &(*at)->next;
    if (*at == waiter)
        *at = waiter->next;
    kd_conn_t *conn = waiter->conn;
    conn->warm_waits--;
    conn->last_activity_ns = kd_clock_ns();
    if (code != KD_OK) { /* not counted as an error: a client polling the warm-up asks again */
        kd_net_send_error(conn, waiter->msgid, code, message);
    } else {
        kd_writer_t w;
        kd_writer_init(&w);
        kd_reply_status(&w, server, waiter->msgid, waiter->admin);
        size_t len;
        void *bytes = kd_writer_release(&w, &len);
        if (bytes != NULL)
            kd_net_send(conn, bytes, len);
        else
            kd_net_send_error(conn, waiter->msgid, KD_ENOMEM, "out of host memory");
    }
    kd_net_unref(conn);
    waiter->timer.data = waiter;
    uv_close((uv_handle_t *)&waiter->timer, kd_warm_waiter_closed);
}

static void kd_warm_waiter_expired(uv_timer_t *timer)
{
    struct kd_warm_waiter *waiter = timer->data;
    kd_server_t *server = waiter->conn->server;
    kd_programs_progress_t p;
    kd_programs_warmup_progress(server->warmup, &p);
    char message[160];
    snprintf(message, sizeof(message),
             "the program warm-up is not done: %zu of %zu OpenCL programs built after %.1f s",
             p.built, p.total, p.ms / 1e3);
    kd_warm_answer(server, waiter, KD_ETIMEOUT, message);
}

int kd_warm_done(kd_server_t *server)
{
    kd_programs_progress_t p;
    kd_programs_warmup_progress(server->warmup, &p);
    return server->warmup == NULL || p.done;
}

void kd_warm_wait(kd_conn_t *conn, const kd_request_t *req)
{
    kd_server_t *server = conn->server;
    const int admin = conn->user.role == KD_ROLE_ADMIN;
    struct kd_warm_waiter *waiter = calloc(1, sizeof(*waiter));
    if (waiter == NULL) {
        kd_net_send_error(conn, req->msgid, KD_ENOMEM, "out of host memory");
        return;
    }
    waiter->conn = conn;
    waiter->msgid = req->msgid;
    waiter->admin = admin;
    uv_timer_init(server->loop, &waiter->timer);
    waiter->timer.data = waiter;
    conn->refs++;
    conn->warm_waits++; /* not idle meanwhile (kd_conn_sweep) */
    waiter->next = server->warm_waiters;
    server->warm_waiters = waiter;
    if (kd_warm_done(server) || server->shutting_down) {
        kd_warm_answer(server, waiter, KD_OK, NULL);
        return;
    }
    if (req->timeout_ms > 0)
        uv_timer_start(&waiter->timer, kd_warm_waiter_expired, (uint64_t)req->timeout_ms, 0);
}

/* Answer every waiter: with the status (the warm-up is done), or CANCELLED (shutdown). */
static void kd_warm_release(kd_server_t *server, int code, const char *message)
{
    while (server->warm_waiters != NULL)
        kd_warm_answer(server, server->warm_waiters, code, message);
}

static void kd_warm_on_progress(uv_async_t *async)
{
    kd_server_t *server = async->data;
    kd_programs_progress_t p;
    kd_programs_warmup_progress(server->warmup, &p);
    const uint64_t now = kd_clock_ns();
    if (!p.done && now - server->warm_logged_ns >= (uint64_t)KD_WARM_LOG_EVERY_MS * 1000000u) {
        server->warm_logged_ns = now;
        KD_INFO("server", "building OpenCL programs: %zu/%zu built, %zu building, %.0f s so far",
                p.built + p.failed, p.total, p.building, p.ms / 1e3);
    }
    kd_warm_notify(server, &p);
    if (!p.done || server->warm_finished)
        return;
    server->warm_finished = 1;
    kd_ocl_program_stats_t s;
    kd_ocl_program_stats(server->ocl, &s);
    KD_INFO("server",
            "OpenCL programs ready: built=%zu failed=%zu from_cache_list=%zu compiled=%llu "
            "loaded=%llu rejected=%llu pruned=%zu ms=%.0f",
            p.built, p.failed, p.replayed, (unsigned long long)s.built_from_source,
            (unsigned long long)s.loaded_from_binary, (unsigned long long)s.binaries_rejected,
            p.pruned, p.ms);
    kd_warm_release(server, KD_OK, NULL);
}

void kd_warm_start(kd_server_t *server)
{
    const kd_config_t *cfg = &server->cfg;
    if (!cfg->warm_programs) {
        KD_INFO("server", "no program warm-up (--warm-programs none): each program is built on "
                          "first use");
        return;
    }
    if (uv_async_init(server->loop, &server->warm_async, kd_warm_on_progress) != 0) {
        KD_WARN("server", "no program warm-up: uv_async_init failed; programs are built on "
                          "first use");
        return;
    }
    server->warm_async.data = server;
    server->warm_async_open = 1;
    const char *only = cfg->warm_only[0] != '\0' ? cfg->warm_only : NULL;
    kd_err_t err = {0};
    if (kd_programs_warmup_start(server->ocl, server->programs, only, cfg->warm_threads,
                                 kd_warm_progress_from_thread, server, &server->warmup,
                                 &err) != KD_OK) {
        KD_WARN("server", "no program warm-up, programs are built on first use: %s", err.message);
        return;
    }
    kd_programs_progress_t p;
    kd_programs_warmup_progress(server->warmup, &p);
    server->warm_logged_ns = kd_clock_ns();
    KD_INFO("server", "building %zu OpenCL programs in the background (cache %s)", p.total,
            server->programs != NULL ? kd_program_cache_dir(server->programs) : "none");
}

void kd_warm_shutdown(kd_server_t *server)
{
    kd_programs_warmup_cancel(server->warmup);
    kd_warm_release(server, KD_ECANCELLED, "the server is shutting down");
}

void kd_warm_close(kd_server_t *server)
{
    /* Builds under way finish first: the device is closed after this. */
    kd_programs_warmup_stop(server->warmup);
    server->warmup = NULL;
    if (server->warm_async_open) {
        uv_close((uv_handle_t *)&server->warm_async, NULL);
        server->warm_async_open = 0;
    }
}

void kd_reply_warm_up(kd_writer_t *w, kd_server_t *server)
{
    kd_programs_progress_t p;
    kd_programs_warmup_progress(server->warmup, &p);
    enum { LIST_MAX = 64 };
    static char labels[LIST_MAX][KD_PROGRAM_LABEL_MAX]; /* loop thread only */
    kd_w_map(w, 8);
    kd_w_kv_str(w, "state", server->warmup == NULL ? "off" : (p.done ? "done" : "building"));
    kd_w_kv_int(w, "total", (int64_t)p.total);
    kd_w_kv_int(w, "built", (int64_t)p.built);
    kd_w_kv_int(w, "failed", (int64_t)p.failed);
    kd_w_kv_double(w, "elapsed_ms", p.ms);
    kd_w_kv_int(w, "pending_count", (int64_t)(p.total - p.built - p.failed - p.building));
    const kd_program_state_t states[2] = {KD_PROGRAM_BUILDING, KD_PROGRAM_PENDING};
    const char *names[2] = {"building", "pending"};
    for (int k = 0; k < 2; k++) {
        size_t n = kd_programs_warmup_labels(server->warmup, states[k], labels, LIST_MAX);
        kd_w_str(w, names[k]);
        kd_w_array(w, (uint32_t)n);
        for (size_t i = 0; i < n; i++)
            kd_w_str(w, labels[i]);
    }
}
