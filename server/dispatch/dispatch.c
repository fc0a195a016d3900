/*
 * Routing decoded requests (loop thread). Questions the store can answer at once — matrix.info,
 * matrix.list, server.status, job.cancel — are answered here without waiting behind the device.
 * Everything that touches the device — put, drop, pin, multiply, spmv, solve — becomes a job on the
 * worker queue; a full queue (or a client with too many requests in flight) is answered BUSY at
 * once, so a slow device never makes the loop wait.
 *
 * A queued job can leave the queue without running: its timeout_ms passes (a timer per job with a
 * deadline answers TIMEOUT at once), job.cancel names it, its client disconnects or the server
 * shuts down. kd_worker_remove() takes it back under the worker's lock, so it is either answered
 * here or run by the worker, never both.
 */
#include "common/log.h"
#include "common/clock.h"
#include "protocol/writer.h"
#include "server/store/quota.h"
#include "server/handlers/replies.h"
#include "server/server.h"
#include "server/dispatch/dispatch.h"
#include "server/dispatch/shm.h"
#include "server/dispatch/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void kd_send_writer(kd_conn_t *conn, kd_writer_t *w, uint64_t msgid)
{
    size_t len;
    void *bytes = kd_writer_release(w, &len);
    if (bytes == NULL) {
        kd_net_send_error(conn, msgid, KD_ENOMEM, "out of host memory encoding a response");
        return;
    }
    kd_net_send(conn, bytes, len);
}

void kd_server_count_error(kd_server_t *server, int code)
{
    server->counters.errors++;
    if (code < 0 && -code < KD_ERROR_COUNT)
        server->counters.errors_by_code[-code]++;
}

static void kd_answer_error(kd_conn_t *conn, uint64_t msgid, int code, const char *message)
{
    kd_server_count_error(conn->server, code);
    kd_net_send_error(conn, msgid, code, message);
}

static void kd_answer_info(kd_conn_t *conn, const kd_request_t *req)
{
    kd_matrix_meta_t meta;
    const int admin = conn->user.role == KD_ROLE_ADMIN;
    if (kd_store_get_meta(conn->server->store, req->u.id.id, &meta) != KD_OK ||
        !kd_meta_visible(&meta, conn->user.name, admin)) {
        char hex[KD_ID_HEX_LEN + 1], msg[96];
        kd_id_to_hex(req->u.id.id, hex);
        snprintf(msg, sizeof(msg), "no matrix %s on this server", hex);
        kd_answer_error(conn, req->msgid, KD_ENOTFOUND, msg);
        return;
    }
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_result_begin(&w, req->msgid);
    kd_reply_meta_owned(&w, &meta, conn->user.name, kd_server_meta_scope(conn->server, admin),
                        admin && conn->server->auth != NULL);
    kd_send_writer(conn, &w, req->msgid);
}

/* list (every entry one of user's references) sorted by when each became user's: an insertion
 * sort, stable, on the few hundred entries a server holds at most. */
static void kd_answer_list_order(kd_matrix_meta_t *list, size_t count, const char *user)
{
    for (size_t i = 0; i < count; i++)
        list[i].created_ns = list[i].owners[kd_meta_owner(&list[i], user)].added_ns;
    for (size_t i = 1; i < count; i++) {
        kd_matrix_meta_t m = list[i];
        size_t j = i;
        for (; j > 0 && list[j - 1].created_ns > m.created_ns; j--)
            list[j] = list[j - 1];
        list[j] = m;
    }
}

static void kd_answer_list(kd_conn_t *conn, const kd_request_t *req)
{
    kd_matrix_meta_t *list;
    size_t count;
    if (kd_store_list(conn->server->store, &list, &count) != KD_OK) {
        kd_answer_error(conn, req->msgid, KD_ENOMEM, "out of host memory listing matrices");
        return;
    }
    const int admin = conn->user.role == KD_ROLE_ADMIN;
    const kd_meta_scope_t scope = kd_server_meta_scope(conn->server, admin);
    size_t shown = 0;
    for (size_t i = 0; i < count; i++)
        if (kd_meta_visible(&list[i], conn->user.name, admin))
            list[shown++] = list[i];
    if (scope == KD_META_OWN) /* in the order the user put them, not the content's first put */
        kd_answer_list_order(list, shown, conn->user.name);
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_result_begin(&w, req->msgid);
    kd_w_map(&w, 1);
    kd_w_str(&w, "matrices");
    kd_w_array(&w, (uint32_t)shown);
    for (size_t i = 0; i < shown; i++)
        kd_reply_meta_owned(&w, &list[i], conn->user.name, scope,
                            admin && conn->server->auth != NULL);
    free(list);
    kd_send_writer(conn, &w, req->msgid);
}

static void kd_job_unlink(kd_job_t *job)
{
    kd_conn_t *conn = job->conn;
    if (job->conn_prev != NULL)
        job->conn_prev->conn_next = job->conn_next;
    else
        conn->jobs = job->conn_next;
    if (job->conn_next != NULL)
        job->conn_next->conn_prev = job->conn_prev;
    job->conn_prev = job->conn_next = NULL;
    conn->njobs--;
    conn->mem_jobs -= job->mem_bytes;
}

static void kd_job_timer_closed(uv_handle_t *handle)
{
    free(handle->data);
}

/* Free a finished job (its timer, if any, is closed first). */
static void kd_job_free(kd_job_t *job)
{
    kd_request_free(job->req);
    job->req = NULL;
    kd_shm_job_release(job); /* the regions it used: unmapped now if their connection left */
    if (job->has_timer) {
        uv_timer_stop(&job->deadline_timer);
        uv_close((uv_handle_t *)&job->deadline_timer, kd_job_timer_closed);
        return;
    }
    free(job);
}

/* Answer a job that kd_worker_remove() took out of the queue, as if the worker had finished it. */
static void kd_job_answer(kd_server_t *server, kd_job_t *job, int code, const char *message)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_error_response(&w, job->msgid, code, message);
    job->error_code = code;
    job->response = kd_writer_release(&w, &job->response_len);
    kd_cache_wait_end(server, &job->mem_wait_ns); /* out of the queue: the worker is done with it */
    kd_dispatch_job_done(server, job);
}

static void kd_job_deadline(uv_timer_t *timer)
{
    kd_job_t *job = timer->data;
    kd_server_t *server = job->conn->server;
    if (kd_worker_remove(server->worker, job) != KD_OK)
        return; /* running: a solve checks its deadline itself; anything else finishes */
    char msg[160];
    snprintf(msg, sizeof(msg),
             "timeout_ms = %lld passed while the request waited for the device (%zu requests "
             "still queued)",
             (long long)job->req->timeout_ms, kd_worker_queued(server->worker));
    server->counters.timeouts_queued++;
    kd_job_answer(server, job, KD_ETIMEOUT, msg);
}

void kd_dispatch_stop_jobs(kd_server_t *server, kd_conn_t *conn, int code, const char *message,
                           int cancel_running)
{
    /* Collect first (through queue_next, free once out of the worker's queue): answering a job
     * can end the server's shutdown, which walks the same lists. */
    kd_job_t *removed = NULL;
    kd_conn_t *c = conn != NULL ? conn : server->conns;
    while (c != NULL) {
        for (kd_job_t *j = c->jobs; j != NULL; j = j->conn_next) {
            if (kd_worker_remove(server->worker, j) == KD_OK) {
                j->queue_next = removed;
                removed = j;
            } else if (cancel_running) {
                atomic_store(&j->cancel, code);
            }
        }
        c = conn != NULL ? NULL : c->next;
    }
    while (removed != NULL) {
        kd_job_t *next = removed->queue_next;
        removed->queue_next = NULL;
        kd_job_answer(server, removed, code, message);
        removed = next;
    }
}

static void kd_answer_cancel(kd_conn_t *conn, const kd_request_t *req)
{
    kd_server_t *server = conn->server;
    kd_job_t *target = NULL;
    for (kd_job_t *j = conn->jobs; j != NULL && target == NULL; j = j->conn_next)
        if (j->msgid == req->u.cancel.target_msgid)
            target = j;
    if (target == NULL) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "no request with msgid %llu is queued or running on this connection",
                 (unsigned long long)req->u.cancel.target_msgid);
        kd_answer_error(conn, req->msgid, KD_ENOTFOUND, msg);
        return;
    }
    /* The result first, then the cancelled request's CANCELLED (at once when it was queued). */
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_result_begin(&w, req->msgid);
    kd_w_map(&w, 1);
    kd_w_kv_bool(&w, "cancelled", 1);
    kd_send_writer(conn, &w, req->msgid);
    if (kd_worker_remove(server->worker, target) == KD_OK) {
        char msg[96];
        snprintf(msg, sizeof(msg), "cancelled by job.cancel (msgid %llu) before it started",
                 (unsigned long long)req->msgid);
        kd_job_answer(server, target, KD_ECANCELLED, msg);
    } else {
        atomic_store(&target->cancel, KD_ECANCELLED);
    }
}

static void kd_submit_job(kd_conn_t *conn, kd_request_t *req)
{
    kd_server_t *server = conn->server;
    if (conn->njobs >= server->cfg.max_connection_jobs) {
        char msg[160];
        snprintf(msg, sizeof(msg),
                 "this connection already has %zu requests waiting or running (limit %zu); wait "
                 "for some answers",
                 conn->njobs, server->cfg.max_connection_jobs);
        kd_answer_error(conn, req->msgid, KD_EBUSY, msg);
        kd_request_free(req);
        return;
    }
    if (conn->user.quota.max_jobs != 0) {
        kd_err_t qerr = {0};
        if (kd_quota_check_jobs(&conn->user.quota, conn->user.name,
                                kd_dispatch_user_jobs(server, conn->user.name), &qerr) != KD_OK) {
            kd_answer_error(conn, req->msgid, KD_EQUOTA, qerr.message);
            kd_request_free(req);
            return;
        }
    }
    kd_job_t *job = calloc(1, sizeof(*job));
    if (job == NULL) {
        kd_answer_error(conn, req->msgid, KD_ENOMEM, "out of host memory queueing the request");
        kd_request_free(req);
        return;
    }
    job->req = req;
    job->msgid = req->msgid;
    snprintf(job->user, sizeof(job->user), "%s", conn->user.name);
    job->admin = conn->user.role == KD_ROLE_ADMIN;
    job->quota = conn->user.quota;
    job->conn = conn;
    job->submitted_ns = kd_clock_ns();
    if (req->timeout_ms > 0)
        job->deadline_ns = job->submitted_ns + (uint64_t)req->timeout_ms * 1000000u;
    atomic_init(&job->cancel, 0);
    kd_err_t rerr = {0};
    if (kd_shm_resolve(conn, job, &rerr) != KD_OK) {
        kd_answer_error(conn, req->msgid, rerr.code, rerr.message);
        kd_shm_job_release(job);
        kd_request_free(req);
        free(job);
        return;
    }
    job->mem_bytes = kd_climem_job_bytes(server, req);
    int rc = kd_worker_submit(server->worker, job);
    if (rc != KD_OK) {
        kd_shm_job_release(job);
        char msg[160];
        if (rc == KD_EBUSY)
            snprintf(msg, sizeof(msg),
                     "%zu requests are already waiting for the device (limit %zu); try again later",
                     kd_worker_queued(server->worker), server->cfg.queue_depth);
        else
            snprintf(msg, sizeof(msg), "the server is shutting down");
        kd_answer_error(conn, req->msgid, rc, msg);
        kd_request_free(req);
        free(job);
        return;
    }
    /* Queued: the worker may already run it, but only the loop thread frees it (after the
     * completion comes back through the async handle), so linking it now is safe. */
    job->conn_next = conn->jobs;
    if (conn->jobs != NULL)
        conn->jobs->conn_prev = job;
    conn->jobs = job;
    conn->njobs++;
    conn->refs++;
    conn->mem_jobs += job->mem_bytes;
    server->jobs_in_flight++;
    if (req->timeout_ms > 0 && uv_timer_init(server->loop, &job->deadline_timer) == 0) {
        job->has_timer = 1;
        job->deadline_timer.data = job;
        uv_timer_start(&job->deadline_timer, kd_job_deadline, (uint64_t)req->timeout_ms, 0);
    }
    kd_climem_account(conn); /* may pause reading, or evict (conn itself, perhaps) */
}

static void kd_dispatch(kd_conn_t *conn, kd_request_t *req, int *fd);

void kd_dispatch_request(kd_conn_t *conn, kd_request_t *req)
{
    /* An shm.register takes the descriptor that came with it first, whatever its outcome: one
     * refused below (its user, shutdown) must not leave it for the next register to map. */
    int fd = req->method == KD_METHOD_SHM_REGISTER && conn->is_unix ? kd_shm_claim_fd(conn) : -1;
    kd_dispatch(conn, req, &fd);
    if (fd >= 0)
        close(fd);
}

static void kd_dispatch(kd_conn_t *conn, kd_request_t *req, int *fd)
{
    kd_server_t *server = conn->server;
    uint64_t t0 = kd_clock_ns();
    kd_method_t method = req->method;
    server->counters.requests++;
    server->counters.by_method[req->method]++;
    KD_DEBUG("dispatch", "request conn=%llu msgid=%llu method=%s", (unsigned long long)conn->id,
             (unsigned long long)req->msgid, kd_method_name(req->method));
    if (kd_login_check(conn, req)) { /* `auth`, or a request its user may not make */
        kd_request_free(req);
        return;
    }
    if (server->shutting_down && req->method != KD_METHOD_SERVER_STATUS) {
        kd_answer_error(conn, req->msgid, KD_ECANCELLED, "the server is shutting down");
        kd_request_free(req);
        return;
    }
    switch (req->method) {
    case KD_METHOD_SERVER_STATUS: {
        if (req->u.status.wait_warm) {
            kd_warm_wait(conn, req); /* answered now, at the warm-up's end, or at timeout_ms */
            break;
        }
        kd_writer_t w;
        kd_writer_init(&w);
        kd_reply_status(&w, server, req->msgid, conn->user.role == KD_ROLE_ADMIN);
        kd_send_writer(conn, &w, req->msgid);
        break;
    }
    case KD_METHOD_MATRIX_INFO:
        kd_answer_info(conn, req);
        break;
    case KD_METHOD_MATRIX_LIST:
        kd_answer_list(conn, req);
        break;
    case KD_METHOD_JOB_CANCEL:
        kd_answer_cancel(conn, req);
        break;
    case KD_METHOD_SHM_REGISTER:
    case KD_METHOD_SHM_UNREGISTER: {
        kd_writer_t w;
        kd_err_t err = {0};
        kd_writer_init(&w);
        int rc = KD_OK;
        if (req->method == KD_METHOD_SHM_REGISTER) {
            rc = kd_shm_register(conn, req, *fd, &w, &err); /* takes the descriptor */
            *fd = -1;
        } else {
            rc = kd_shm_unregister(conn, req, &w, &err);
        }
        if (rc == KD_OK) {
            kd_send_writer(conn, &w, req->msgid);
        } else {
            kd_writer_destroy(&w);
            kd_answer_error(conn, req->msgid, rc, err.message);
        }
        break;
    }
    case KD_METHOD_MATRIX_SHARE:
        /* Who exists is the loop thread's to know (SIGHUP reloads the table here). */
        if (server->auth == NULL || kd_auth_find(server->auth, req->u.id.user) == NULL) {
            char msg[160];
            snprintf(msg, sizeof(msg), "%s: no user '%s' in the auth file",
                     server->auth == NULL ? "matrix.share needs --auth-file" : "matrix.share",
                     req->u.id.user);
            kd_answer_error(conn, req->msgid, KD_EBADREQ, msg);
            break;
        }
        kd_submit_job(conn, req);
        return;
    default:
        kd_submit_job(conn, req); /* takes req; its latency is recorded when it is done */
        return;
    }
    kd_request_free(req);
    kd_latency_record(&server->latency[method], kd_clock_ns() - t0);
}

void kd_dispatch_job_done(void *ctx, kd_job_t *job)
{
    kd_server_t *server = ctx;
    kd_conn_t *conn = job->conn;
    kd_job_unlink(job);
    server->jobs_in_flight--;
    if (job->error_code != KD_OK)
        kd_server_count_error(server, job->error_code);
    uint64_t elapsed = kd_clock_ns() - job->submitted_ns;
    kd_latency_record(&server->latency[job->req->method], elapsed);
    double ms = (double)elapsed / 1e6;
    KD_DEBUG("dispatch", "done conn=%llu msgid=%llu method=%s ms=%.3f result=%s",
             (unsigned long long)conn->id, (unsigned long long)job->msgid,
             kd_method_name(job->req->method), ms, kd_error_wire_name(job->error_code));
    conn->last_activity_ns = kd_clock_ns();
    /* dropped if the client left */
    kd_net_send_parts(conn, job->response, job->response_len, job->response_tail,
                      job->response_tail_len);
    job->response = job->response_tail = NULL;
    kd_job_free(job);
    kd_climem_account(conn); /* its charge has gone (the response, if sent, is counted now) */
    kd_net_unref(conn);
    server->net->job_finished(server);
}

void kd_dispatch_job_notify(void *ctx, kd_job_t *job, void *bytes, size_t len)
{
    (void)ctx;
    kd_net_send(job->conn, bytes, len);
}
