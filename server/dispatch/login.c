/*
 * Who a connection is, on the loop thread: the `auth` method, the gate every other request
 * passes (kd_login_check), and the slowing down of token guessing.
 *
 * The connection keeps the user's name; its role is looked up in the current table on every
 * request, so a SIGHUP that changes a role applies at once and one that removes the user makes
 * its next request UNAUTHENTICATED, without dropping the connection.
 *
 * A failed `auth` is logged (name and peer, never the token) and counted; the third on one
 * connection closes it. Failures are also counted per client address (kd_login_backoff_t): from
 * the second on, the answer is held back 100 ms, doubling to 5 s, by a timer, while the
 * connection is not read, so the loop never waits and a client cannot pipeline guesses past the
 * delay. A success from the address, or a minute without failures, clears its count.
 */
#include "common/clock.h"
#include "common/log.h"
#include "protocol/writer.h"
#include "server/server.h"
#include "server/dispatch/dispatch.h"

#include <openssl/crypto.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_LOGIN_MAX_FAILURES 3
#define KD_LOGIN_DELAY_FIRST_MS 100
#define KD_LOGIN_DELAY_MAX_MS 5000
#define KD_LOGIN_FORGET_NS (60ull * 1000000000ull)

struct kd_login_hold {
    uv_timer_t timer;
    kd_conn_t *conn;
    uint64_t msgid;
    int close_after;
    char message[160];
};

int kd_login_load(kd_server_t *server, kd_err_t *err)
{
    kd_auth_table_t *table;
    int rc = kd_auth_load(server->cfg.auth_file, &table, err);
    if (rc != KD_OK)
        return rc;
    kd_auth_free(server->auth);
    server->auth = table;
    return KD_OK;
}

void kd_login_accepted(kd_conn_t *conn)
{
    kd_server_t *server = conn->server;
    memset(&conn->user, 0, sizeof(conn->user));
    if (server->auth == NULL) {
        snprintf(conn->user.name, sizeof(conn->user.name), "anonymous");
        conn->user.role = KD_ROLE_ADMIN;
        return;
    }
    if (!conn->has_peer_uid)
        return;
    const kd_user_t *user = kd_auth_find_uid(server->auth, conn->peer_uid);
    if (user == NULL)
        return; /* an unmapped uid authenticates with a token, like a TCP client */
    snprintf(conn->user.name, sizeof(conn->user.name), "%s", user->name);
    conn->user.role = user->role;
    KD_INFO("auth", "conn=%llu uid=%u is user=%s role=%s (peer credentials)",
            (unsigned long long)conn->id, conn->peer_uid, user->name, kd_role_name(user->role));
}

static kd_login_backoff_t *kd_backoff_entry(kd_server_t *server, const char *key, uint64_t now)
{
    kd_login_backoff_t *oldest = &server->backoff[0];
    for (size_t i = 0; i < KD_LOGIN_BACKOFF_SLOTS; i++) {
        kd_login_backoff_t *b = &server->backoff[i];
        if (b->key[0] != '\0' && now - b->last_ns > KD_LOGIN_FORGET_NS)
            b->key[0] = '\0';
        if (b->key[0] != '\0' && strcmp(b->key, key) == 0)
            return b;
        if (b->key[0] == '\0' || (oldest->key[0] != '\0' && b->last_ns < oldest->last_ns))
            oldest = b;
    }
    memset(oldest, 0, sizeof(*oldest));
    snprintf(oldest->key, sizeof(oldest->key), "%s", key);
    return oldest;
}

/* Record a failure from the connection's address; how long to hold its answer back. */
static uint64_t kd_backoff_failed(kd_conn_t *conn)
{
    uint64_t now = kd_clock_ns();
    kd_login_backoff_t *b = kd_backoff_entry(conn->server, conn->peer_key, now);
    b->failures++;
    b->last_ns = now;
    if (b->failures < 2)
        return 0;
    uint64_t ms = KD_LOGIN_DELAY_FIRST_MS;
    for (uint32_t i = 2; i < b->failures && ms < KD_LOGIN_DELAY_MAX_MS; i++)
        ms *= 2;
    return ms < KD_LOGIN_DELAY_MAX_MS ? ms : KD_LOGIN_DELAY_MAX_MS;
}

static void kd_backoff_clear(kd_conn_t *conn)
{
    kd_server_t *server = conn->server;
    for (size_t i = 0; i < KD_LOGIN_BACKOFF_SLOTS; i++)
        if (strcmp(server->backoff[i].key, conn->peer_key) == 0)
            memset(&server->backoff[i], 0, sizeof(server->backoff[i]));
}

static void kd_login_refuse(kd_conn_t *conn, uint64_t msgid, int code, const char *message)
{
    kd_server_count_error(conn->server, code);
    kd_net_send_error(conn, msgid, code, message);
}

static void kd_hold_closed(uv_handle_t *handle)
{
    struct kd_login_hold *hold = handle->data;
    kd_conn_t *conn = hold->conn;
    free(hold);
    kd_net_unref(conn);
}

static void kd_hold_release(struct kd_login_hold *hold)
{
    hold->conn->hold = NULL;
    uv_close((uv_handle_t *)&hold->timer, kd_hold_closed);
}

static void kd_hold_expired(uv_timer_t *timer)
{
    struct kd_login_hold *hold = timer->data;
    kd_conn_t *conn = hold->conn;
    kd_login_refuse(conn, hold->msgid, KD_EUNAUTH, hold->message);
    int close_after = hold->close_after;
    kd_hold_release(hold);
    if (close_after)
        kd_net_close(conn);
    else
        kd_net_resume_reading(conn);
}

void kd_login_conn_closed(kd_conn_t *conn)
{
    if (conn->hold != NULL) {
        uv_timer_stop(&conn->hold->timer);
        kd_hold_release(conn->hold);
    }
}

/* The name a client claimed, fit for one log line: anything outside the auth file's name
 * characters becomes '?', so a name cannot forge lines or fields. */
static const char *kd_login_loggable(const char *name, char out[KD_AUTH_NAME_MAX])
{
    size_t i = 0;
    for (; name[i] != '\0' && i < KD_AUTH_NAME_MAX - 1; i++) {
        char c = name[i];
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '@' || c == '-';
        out[i] = ok ? c : '?';
    }
    out[i] = '\0';
    return out;
}

/* Answer a failed `auth` now, or after the address's backoff with the connection not read. */
static void kd_login_failed(kd_conn_t *conn, uint64_t msgid, const char *name)
{
    char shown[KD_AUTH_NAME_MAX];
    kd_server_t *server = conn->server;
    server->counters.auth_failures++;
    conn->auth_failures++;
    memset(&conn->user, 0, sizeof(conn->user)); /* a failed auth also ends the old identity */
    int close_after = conn->auth_failures >= KD_LOGIN_MAX_FAILURES;
    uint64_t delay_ms = kd_backoff_failed(conn);
    KD_WARN("auth", "failed auth conn=%llu peer=%s name=%s failures=%d delay_ms=%llu%s",
            (unsigned long long)conn->id, conn->peer, kd_login_loggable(name, shown),
            conn->auth_failures, (unsigned long long)delay_ms, close_after ? " closing" : "");
    char message[160];
    snprintf(message, sizeof(message), "wrong name or token%s",
             close_after ? "; too many failures, closing the connection" : "");
    if (close_after)
        server->counters.connections_auth++;
    struct kd_login_hold *hold = delay_ms > 0 ? calloc(1, sizeof(*hold)) : NULL;
    if (hold == NULL || uv_timer_init(server->loop, &hold->timer) != 0) {
        free(hold);
        kd_login_refuse(conn, msgid, KD_EUNAUTH, message);
        if (close_after)
            kd_net_close(conn);
        return;
    }
    hold->conn = conn;
    hold->msgid = msgid;
    hold->close_after = close_after;
    snprintf(hold->message, sizeof(hold->message), "%s", message);
    hold->timer.data = hold;
    conn->hold = hold;
    conn->refs++;
    uv_read_stop((uv_stream_t *)&conn->tcp);
    uv_timer_start(&hold->timer, kd_hold_expired, delay_ms, 0);
}

static void kd_login_answer(kd_conn_t *conn, kd_request_t *req)
{
    kd_server_t *server = conn->server;
    kd_auth_request_t *auth = &req->u.auth;
    const kd_user_t *user = NULL;
    int rc = KD_OK;
    if (server->auth != NULL)
        rc = kd_auth_verify(server->auth, auth->name, auth->token, auth->token_len, &user);
    OPENSSL_cleanse((void *)auth->token, auth->token_len);
    if (rc != KD_OK) {
        kd_login_failed(conn, req->msgid, auth->name);
        return;
    }
    server->counters.auth_ok++;
    /* Without an auth file the server is open (protected mode keeps it local): `auth` succeeds
     * as the anonymous admin, so a client configured with a token works against it. */
    if (user != NULL) {
        kd_backoff_clear(conn);
        memset(&conn->user, 0, sizeof(conn->user));
        snprintf(conn->user.name, sizeof(conn->user.name), "%s", user->name);
        conn->user.role = user->role;
        KD_INFO("auth", "conn=%llu peer=%s is user=%s role=%s", (unsigned long long)conn->id,
                conn->peer, user->name, kd_role_name(user->role));
    }
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_result_begin(&w, req->msgid);
    kd_w_map(&w, 3);
    kd_w_kv_str(&w, "name", conn->user.name);
    kd_w_kv_str(&w, "role", kd_role_name(conn->user.role));
    kd_w_kv_bool(&w, "auth_required", server->auth != NULL);
    size_t len;
    void *bytes = kd_writer_release(&w, &len);
    if (bytes == NULL)
        kd_login_refuse(conn, req->msgid, KD_ENOMEM, "out of host memory encoding a response");
    else
        kd_net_send(conn, bytes, len);
}

int kd_login_check(kd_conn_t *conn, kd_request_t *req)
{
    kd_server_t *server = conn->server;
    if (req->method == KD_METHOD_AUTH) {
        kd_login_answer(conn, req);
        return 1;
    }
    if (server->auth == NULL)
        return 0;
    char message[200];
    const kd_user_t *user = NULL;
    if (conn->user.role != KD_ROLE_NONE &&
        (user = kd_auth_find(server->auth, conn->user.name)) == NULL) {
        KD_INFO("auth", "conn=%llu user=%s is no longer in the auth file",
                (unsigned long long)conn->id, conn->user.name);
        snprintf(message, sizeof(message),
                 "user '%s' is no longer in the server's auth file; auth again as another user",
                 conn->user.name);
        memset(&conn->user, 0, sizeof(conn->user));
        kd_login_refuse(conn, req->msgid, KD_EUNAUTH, message);
        return 1;
    }
    if (user == NULL) {
        snprintf(message, sizeof(message), "%s needs authentication: send auth {name, token} first",
                 kd_method_name(req->method));
        kd_login_refuse(conn, req->msgid, KD_EUNAUTH, message);
        return 1;
    }
    conn->user.role = user->role;
    conn->user.quota = user->quota; /* a reload's new limits apply at once too */
    kd_role_t need = kd_auth_method_role(req->method);
    if (user->role < need) {
        snprintf(message, sizeof(message), "%s needs role %s or higher; user '%s' has role %s",
                 kd_method_name(req->method), kd_role_name(need), user->name,
                 kd_role_name(user->role));
        kd_login_refuse(conn, req->msgid, KD_EFORBIDDEN, message);
        return 1;
    }
    return 0;
}
