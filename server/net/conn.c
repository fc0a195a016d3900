/*
 * One client connection (TCP, or the Unix socket with its peer's uid) on the loop thread: read
 * bytes into the framer, hand whole messages to the decoder and dispatcher, and write responses.
 * Memory per client is bounded on both sides: the framer refuses messages over the size limit, and
 * when a client's requests in flight and unread responses pass its share of client memory (or its
 * unread responses pass max_pending_write) we stop reading its requests until it catches up;
 * every byte it holds is counted against --client-memory, over which the largest client is
 * evicted (climem.c). Time is bounded too (kd_conn_sweep): a message must arrive whole
 * within message_timeout_ms of its first byte, and a connection with nothing in flight that neither
 * sends nor takes bytes for idle_timeout_ms is closed.
 *
 * A failed `auth` whose answer login.c holds back stops reading too; what was already read waits
 * in the framer and is dispatched when reading resumes (kd_conn_resume_reading).
 *
 * A connection is freed when it is closed and no job of its is still in flight (refs).
 *
 * On a TLS listener (server/net/tls.c) the same path runs on plaintext: ciphertext read from the
 * stream is fed to the connection's TLS session and what it decrypts goes to the framer; each
 * response is encrypted and its ciphertext written. A connection whose first byte is a TLS
 * record header on a plaintext listener, or that is not TLS on a TLS one, is logged and closed.
 * The Unix socket is never TLS.
 *
 * The Unix socket's pipe is opened for IPC, so libuv reads it with recvmsg and queues the file
 * descriptors that come with the bytes (SCM_RIGHTS): a client's memfd for shm.register
 * (dispatch/shm.c). libuv hands a received descriptor out only through uv_accept into a handle,
 * so kd_conn_take_fds accepts each into a scratch pipe handle, duplicates its descriptor into
 * conn->fds and closes the handle, tagged with the bytes of the stream that read brought. The
 * kernel attaches descriptors to the first byte of the sendmsg that carried them and ends a
 * recvmsg after the bytes they came with, so the message they were sent with begins in that
 * read: an shm.register claims only a descriptor whose read holds its own first byte
 * (kd_shm_claim_fd; never one another message brought, whatever became of that message), and a
 * descriptor is closed once the framer has passed every byte of its read (the message it came with
 * was dispatched). Those past KD_CONN_FDS_MAX on a connection, or the server's cap
 * (server->fds_max), are closed at receipt: none leaks, and no client can make the server hold
 * many.
 */
#define _GNU_SOURCE /* struct ucred */
#include "common/log.h"
#include "common/clock.h"
#include "common/recycle.h"
#include "protocol/writer.h"
#include "server/server.h"
#include "server/net/tls.h"

#include "server/dispatch/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* One write of a message's parts: its head and perhaps a tail (a vector's bytes, sent from the
 * buffer the device wrote them to). */
typedef struct kd_write_req {
    uv_write_t req;
    kd_conn_t *conn;
    void *bytes, *tail;
    size_t len;
} kd_write_req_t;

/* The first byte of a TLS handshake record (content type 22). */
#define KD_TLS_RECORD_HANDSHAKE 0x16
/* Responses are encrypted this much at a time, so the ciphertext buffer stays small. */
#define KD_TLS_SEND_CHUNK ((size_t)256 << 10)

static void kd_conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void kd_conn_read_tls(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf);
static void kd_conn_drain(kd_conn_t *conn, uint64_t now);
static int kd_conn_flush_tls(kd_conn_t *conn);

static void kd_conn_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    kd_conn_t *conn = handle->data;
    char *base = NULL;
    size_t len = 0;
    if (kd_frame_reserve(conn->frame, suggested, &base, &len) != KD_OK) {
        buf->base = NULL;
        buf->len = 0; /* libuv reports UV_ENOBUFS to the read callback */
        return;
    }
    buf->base = base;
    buf->len = len;
}

/* Ciphertext lands in the server's buffer and is decrypted into the framer before the next read. */
static void kd_conn_alloc_tls(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
    kd_conn_t *conn = handle->data;
    buf->base = conn->server->tls_inbuf;
    buf->len = sizeof(conn->server->tls_inbuf);
    (void)suggested;
}

static void kd_conn_fd_pipe_closed(uv_handle_t *handle)
{
    free(handle);
}

/* At most one line a minute about descriptors closed unclaimed or refused (a client sending
 * them in a loop must not flood the log); the rest go to debug. */
#define KD_CONN_FDS_LOG_EVERY_NS (60ull * 1000000000ull)

static int kd_conn_fds_log_now(kd_server_t *server)
{
    const uint64_t now = kd_clock_ns();
    if (server->fds_logged_ns != 0 && now - server->fds_logged_ns < KD_CONN_FDS_LOG_EVERY_NS)
        return 0;
    server->fds_logged_ns = now;
    return 1;
}

/* How many received descriptors the server holds at most: KD_SERVER_FDS_MAX, or a quarter of the
 * soft RLIMIT_NOFILE when that is less (connections, files and the driver need the rest). */
static size_t kd_conn_fds_cap(kd_server_t *server)
{
    if (server->fds_max == 0) {
        struct rlimit rl;
        size_t cap = KD_SERVER_FDS_MAX;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            rl.rlim_cur / 4 < cap)
            cap = rl.rlim_cur / 4 > 0 ? (size_t)(rl.rlim_cur / 4) : 1;
        server->fds_max = cap;
    }
    return server->fds_max;
}

static void kd_conn_fd_close(kd_conn_t *conn, int i)
{
    close(conn->fds[i].fd);
    memmove(conn->fds + i, conn->fds + i + 1, (size_t)(conn->nfds - i - 1) * sizeof(conn->fds[0]));
    conn->nfds--;
    conn->server->fds_held--;
}

/* The descriptors libuv queued on the Unix socket's pipe with the read of [start, end), into
 * conn->fds (see the top). Past the connection's or the server's cap they are closed at once. */
static void kd_conn_take_fds(kd_conn_t *conn, uint64_t start, uint64_t end)
{
    kd_server_t *server = conn->server;
    while (uv_pipe_pending_count(&conn->pipe) > 0) {
        uv_pipe_t *scratch = malloc(sizeof(*scratch));
        if (scratch == NULL || uv_pipe_init(server->loop, scratch, 0) != 0) {
            free(scratch);
            KD_ERROR("conn", "out of memory taking a file descriptor conn=%llu",
                     (unsigned long long)conn->id);
            kd_conn_close(conn); /* the handle's close closes what libuv still queues */
            return;
        }
        int fd = -1;
        uv_os_fd_t raw;
        if (uv_accept((uv_stream_t *)&conn->pipe, (uv_stream_t *)scratch) == 0 &&
            uv_fileno((uv_handle_t *)scratch, &raw) == 0) {
            fd = fcntl(raw, F_DUPFD_CLOEXEC, 0);
            if (fd < 0 && kd_conn_fds_log_now(server))
                KD_WARN("conn", "cannot keep a file descriptor conn=%llu peer=%s: %s",
                        (unsigned long long)conn->id, conn->peer, strerror(errno));
        }
        uv_close((uv_handle_t *)scratch, kd_conn_fd_pipe_closed); /* closes raw */
        if (fd < 0)
            continue;
        if (conn->nfds < KD_CONN_FDS_MAX && server->fds_held < kd_conn_fds_cap(server)) {
            conn->fds[conn->nfds++] = (kd_conn_fd_t){.fd = fd, .start = start, .end = end};
            server->fds_held++;
            continue;
        }
        if (kd_conn_fds_log_now(server))
            KD_INFO("conn",
                    "closing a file descriptor conn=%llu peer=%s: %d wait on this connection, %zu "
                    "on the server (at most %d and %zu)",
                    (unsigned long long)conn->id, conn->peer, conn->nfds, server->fds_held,
                    KD_CONN_FDS_MAX, kd_conn_fds_cap(server));
        close(fd);
    }
}

/* Close the descriptors no shm.register claimed that came with bytes before `upto` (every
 * message they could belong to was dispatched); UINT64_MAX: all of them. */
static void kd_conn_close_fds(kd_conn_t *conn, uint64_t upto)
{
    int closed = 0;
    for (int i = 0; i < conn->nfds;) {
        if (conn->fds[i].end <= upto) {
            kd_conn_fd_close(conn, i);
            closed++;
        } else {
            i++;
        }
    }
    if (closed > 0 && !conn->closing)
        kd_log(kd_conn_fds_log_now(conn->server) ? KD_LOG_INFO : KD_LOG_DEBUG, "conn",
               "closed %d file descriptor(s) no shm.register claimed conn=%llu peer=%s", closed,
               (unsigned long long)conn->id, conn->peer);
}

static void kd_conn_read_start(kd_conn_t *conn)
{
    if (conn->tls != NULL)
        uv_read_start((uv_stream_t *)&conn->tcp, kd_conn_alloc_tls, kd_conn_read_tls);
    else
        uv_read_start((uv_stream_t *)&conn->tcp, kd_conn_alloc, kd_conn_read);
}

static void kd_conn_handle_closed(uv_handle_t *handle)
{
    kd_conn_unref(handle->data);
}

void kd_conn_unref(kd_conn_t *conn)
{
    if (--conn->refs > 0)
        return;
    kd_climem_conn_freed(conn);
    kd_frame_free(conn->frame); /* NULL when kd_conn_close freed it */
    kd_tls_free(conn->tls);
    free(conn);
}

static void kd_conn_close_now(kd_conn_t *conn)
{
    if (uv_is_closing((uv_handle_t *)&conn->tcp))
        return;
    uv_close((uv_handle_t *)&conn->tcp, kd_conn_handle_closed);
    uv_close((uv_handle_t *)&conn->linger, kd_conn_handle_closed);
}

static void kd_conn_flushed(uv_shutdown_t *req, int status)
{
    kd_conn_t *conn = req->data;
    free(req);
    kd_conn_close_now(conn);
    kd_conn_unref(conn);
}

static void kd_conn_linger_expired(uv_timer_t *timer)
{
    kd_conn_close_now(timer->data);
}

void kd_conn_close(kd_conn_t *conn)
{
    if (conn->closing)
        return;
    conn->closing = 1;
    kd_climem_conn_closing(conn);
    kd_server_t *server = conn->server;
    if (conn->prev != NULL)
        conn->prev->next = conn->next;
    else
        server->conns = conn->next;
    if (conn->next != NULL)
        conn->next->prev = conn->prev;
    conn->prev = conn->next = NULL;
    server->nconns--;
    KD_DEBUG("conn", "closing conn=%llu peer=%s", (unsigned long long)conn->id, conn->peer);
    uv_read_stop((uv_stream_t *)&conn->tcp);
    /* Nothing more is read: the framer's buffer (a message's worth, perhaps) goes now, not when
     * the last job running for the connection finishes. */
    kd_frame_free(conn->frame);
    conn->frame = NULL;
    kd_climem_account(conn);
    kd_login_conn_closed(conn);
    kd_conn_close_fds(conn, UINT64_MAX);
    kd_shm_conn_closed(conn); /* each region goes when the last job using it is done */
    if (conn->tls != NULL && kd_tls_established(conn->tls)) {
        kd_tls_shutdown(conn->tls); /* close_notify: the client can tell an end from a cut */
        kd_conn_flush_tls(conn);
    }
    /* Queued jobs leave the queue now; running ones stop at their next check. Their responses
     * are dropped. (The handles still hold references, so conn outlives this.) */
    kd_dispatch_stop_jobs(server, conn, KD_ECANCELLED, "the client disconnected", 1);
    if (conn->write_pending == 0) {
        kd_conn_close_now(conn);
        return;
    }
    /* Flush what is queued (an error response, say), but give a client that does not read at
     * most a few seconds. */
    uv_shutdown_t *req = malloc(sizeof(*req));
    if (req == NULL || uv_shutdown(req, (uv_stream_t *)&conn->tcp, kd_conn_flushed) != 0) {
        free(req);
        kd_conn_close_now(conn);
        return;
    }
    req->data = conn;
    conn->refs++;
    uv_timer_start(&conn->linger, kd_conn_linger_expired, 5000, 0);
}

void kd_conn_abort(kd_conn_t *conn)
{
    kd_conn_close(conn);
    kd_conn_close_now(conn); /* cancels the writes (and a flush kd_conn_close began) */
}

/* Who is at the other end, for logs and the backoff table's key. */
static void kd_conn_describe_peer(kd_conn_t *conn)
{
    if (conn->is_unix) {
        struct ucred cred;
        socklen_t len = sizeof(cred);
        uv_os_fd_t fd;
        if (uv_fileno((uv_handle_t *)&conn->pipe, &fd) == 0 &&
            getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
            conn->has_peer_uid = 1;
            conn->peer_uid = (uint32_t)cred.uid;
            snprintf(conn->peer, sizeof(conn->peer), "unix:uid=%u,pid=%d", (unsigned)cred.uid,
                     (int)cred.pid);
            snprintf(conn->peer_key, sizeof(conn->peer_key), "uid:%u", (unsigned)cred.uid);
        } else {
            snprintf(conn->peer, sizeof(conn->peer), "unix:?");
            snprintf(conn->peer_key, sizeof(conn->peer_key), "unix");
        }
        return;
    }
    struct sockaddr_storage peer;
    int len = sizeof(peer);
    if (uv_tcp_getpeername(&conn->tcp, (struct sockaddr *)&peer, &len) == 0) {
        char ip[48] = "?";
        int port = 0;
        if (peer.ss_family == AF_INET) {
            uv_ip4_name((struct sockaddr_in *)&peer, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&peer)->sin_port);
        } else if (peer.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&peer, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&peer)->sin6_port);
        }
        snprintf(conn->peer, sizeof(conn->peer), "%s:%d", ip, port);
        snprintf(conn->peer_key, sizeof(conn->peer_key), "%s", ip);
    }
}

void kd_conn_accept(kd_server_t *server, int is_unix)
{
    kd_conn_t *conn = calloc(1, sizeof(*conn));
    if (conn == NULL || kd_frame_new(&server->frame_limits, &conn->frame) != KD_OK) {
        KD_ERROR("conn", "out of memory accepting a connection");
        free(conn);
        return;
    }
    kd_frame_use_recycled(conn->frame); /* kd_request_free gives the buffers back */
    conn->server = server;
    conn->refs = 2; /* the stream and linger handles */
    conn->id = ++server->next_conn_id;
    conn->last_activity_ns = kd_clock_ns();
    conn->first_byte = -1;
    conn->is_unix = is_unix;
    int rc = is_unix ? uv_pipe_init(server->loop, &conn->pipe, 1) /* IPC: descriptors come */
                     : uv_tcp_init(server->loop, &conn->tcp);
    if (rc != 0) {
        kd_frame_free(conn->frame);
        free(conn);
        return;
    }
    uv_timer_init(server->loop, &conn->linger);
    conn->tcp.data = conn;
    conn->linger.data = conn;
    conn->next = server->conns;
    if (server->conns != NULL)
        server->conns->prev = conn;
    server->conns = conn;
    server->nconns++;
    kd_climem_conn_opened(conn);
    uv_stream_t *listener =
        is_unix ? (uv_stream_t *)&server->unix_listener : (uv_stream_t *)&server->listener;
    if (uv_accept(listener, (uv_stream_t *)&conn->tcp) != 0) {
        kd_conn_close(conn);
        return;
    }
    kd_conn_describe_peer(conn);
    kd_login_accepted(conn);
    server->counters.connections_total++;
    if (server->tls != NULL && !is_unix && kd_tls_new(server->tls, &conn->tls) != KD_OK) {
        KD_ERROR("conn", "out of memory for the TLS session of peer=%s", conn->peer);
        kd_conn_close(conn);
        return;
    }
    if (server->nconns > server->cfg.max_connections || server->shutting_down) {
        server->counters.connections_refused++;
        KD_WARN("conn", "refusing peer=%s: %zu connections (limit %zu)", conn->peer,
                server->nconns - 1, server->cfg.max_connections);
        kd_conn_send_error(conn, 0, KD_EBUSY, "too many connections; try again later");
        kd_conn_close(conn);
        return;
    }
    if (!is_unix)
        uv_tcp_nodelay(&conn->tcp, 1);
    KD_DEBUG("conn", "accepted conn=%llu peer=%s", (unsigned long long)conn->id, conn->peer);
    kd_conn_read_start(conn);
}

void kd_conn_resume_reading(kd_conn_t *conn)
{
    if (conn->closing || conn->read_paused || conn->hold != NULL)
        return;
    if (conn->message_start_ns != 0) /* the pause was ours: restart the message's clock */
        conn->message_start_ns = kd_clock_ns();
    kd_conn_read_start(conn);
    kd_conn_drain(conn, kd_clock_ns()); /* what arrived before the pause */
}

static void kd_conn_written(uv_write_t *req, int status)
{
    kd_write_req_t *w = (kd_write_req_t *)req;
    kd_conn_t *conn = w->conn;
    conn->write_pending -= w->len;
    if (status == 0)
        conn->last_activity_ns = kd_clock_ns();
    free(w->bytes);
    kd_recycle_free(w->tail);
    free(w);
    if (status < 0 && status != UV_ECANCELED && !conn->closing) {
        KD_DEBUG("conn", "write failed conn=%llu: %s", (unsigned long long)conn->id,
                 uv_strerror(status));
        kd_conn_close(conn);
    }
    kd_climem_account(conn); /* may resume reading */
    kd_conn_unref(conn);
}

/* Queue bytes for the stream as they are (ciphertext on a TLS connection), then tail's (NULL:
 * none); even while closing. Takes both. */
static void kd_conn_write2(kd_conn_t *conn, void *bytes, size_t len, void *tail, size_t tail_len)
{
    if (bytes == NULL) {
        kd_recycle_free(tail);
        return;
    }
    kd_write_req_t *w = malloc(sizeof(*w));
    if (w == NULL) {
        free(bytes);
        kd_recycle_free(tail);
        kd_conn_close(conn);
        return;
    }
    w->conn = conn;
    w->bytes = bytes;
    w->tail = tail;
    w->len = len + tail_len;
    uv_buf_t bufs[2] = {uv_buf_init(bytes, (unsigned int)len),
                        uv_buf_init(tail, (unsigned int)tail_len)};
    conn->refs++;
    conn->write_pending += w->len;
    int rc =
        uv_write(&w->req, (uv_stream_t *)&conn->tcp, bufs, tail != NULL ? 2 : 1, kd_conn_written);
    if (rc != 0) {
        conn->refs--;
        conn->write_pending -= w->len;
        free(bytes);
        kd_recycle_free(tail);
        free(w);
        kd_conn_close(conn);
        return;
    }
    kd_climem_account(conn); /* may pause reading */
}

static void kd_conn_write(kd_conn_t *conn, void *bytes, size_t len)
{
    kd_conn_write2(conn, bytes, len, NULL, 0);
}

static int kd_conn_flush_tls(kd_conn_t *conn)
{
    void *out;
    size_t n;
    int rc = kd_tls_take_output(conn->tls, &out, &n);
    if (rc == KD_OK)
        kd_conn_write(conn, out, n);
    return rc;
}

/* Encrypt bytes[0..len) in chunks and queue the ciphertext. */
static int kd_conn_encrypt(kd_conn_t *conn, const void *bytes, size_t len, kd_err_t *err)
{
    int rc = KD_OK;
    for (size_t off = 0; rc == KD_OK && off < len && !conn->closing; off += KD_TLS_SEND_CHUNK) {
        size_t n = len - off < KD_TLS_SEND_CHUNK ? len - off : KD_TLS_SEND_CHUNK;
        rc = kd_tls_write(conn->tls, (const char *)bytes + off, n, err);
        if (rc == KD_OK && (rc = kd_conn_flush_tls(conn)) != KD_OK)
            kd_err_set(err, rc, "out of memory for TLS output");
    }
    return rc;
}

/* TLS copies the plaintext anyway (into ciphertext): the parts are encrypted one after the other.
 */
static void kd_conn_send_tls(kd_conn_t *conn, void *bytes, size_t len, void *tail, size_t tail_len)
{
    kd_err_t err = {0};
    int rc = kd_conn_encrypt(conn, bytes, len, &err);
    if (rc == KD_OK && tail != NULL)
        rc = kd_conn_encrypt(conn, tail, tail_len, &err);
    free(bytes);
    kd_recycle_free(tail);
    if (rc == KD_EPROTO) /* an answer at accept (BUSY) to a client that has not said hello */
        KD_DEBUG("conn", "dropping a response to conn=%llu: %s", (unsigned long long)conn->id,
                 err.message);
    else if (rc != KD_OK) {
        KD_INFO("conn", "closing conn=%llu peer=%s: %s", (unsigned long long)conn->id, conn->peer,
                err.message);
        kd_conn_close(conn);
    }
}

void kd_conn_send_parts(kd_conn_t *conn, void *bytes, size_t len, void *tail, size_t tail_len)
{
    if (conn->closing || bytes == NULL) {
        free(bytes);
        kd_recycle_free(tail);
        return;
    }
    if (conn->tls != NULL)
        kd_conn_send_tls(conn, bytes, len, tail, tail_len);
    else
        kd_conn_write2(conn, bytes, len, tail, tail_len);
}

void kd_conn_send(kd_conn_t *conn, void *bytes, size_t len)
{
    kd_conn_send_parts(conn, bytes, len, NULL, 0);
}

void kd_conn_send_error(kd_conn_t *conn, uint64_t msgid, int code, const char *message)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_error_response(&w, msgid, code, message);
    size_t len;
    void *bytes = kd_writer_release(&w, &len);
    kd_conn_send(conn, bytes, len);
}

static void kd_conn_handle_message(kd_conn_t *conn, void *data, size_t len)
{
    kd_server_t *server = conn->server;
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    memset(&derr, 0, sizeof(derr));
    int rc = kd_request_decode(data, len, &server->proto_limits, &req, &derr);
    if (rc == KD_OK) {
        kd_dispatch_request(conn, req);
        return;
    }
    server->counters.requests++;
    kd_server_count_error(server, rc);
    if (derr.has_msgid) {
        KD_DEBUG("conn", "bad request conn=%llu msgid=%llu: %s", (unsigned long long)conn->id,
                 (unsigned long long)derr.msgid, derr.err.message);
        kd_conn_send_error(conn, derr.msgid, rc, derr.err.message);
    } else if (derr.is_notification) {
        KD_DEBUG("conn", "ignoring notification conn=%llu: %s", (unsigned long long)conn->id,
                 derr.err.message);
    } else {
        /* Nothing to address an answer to: not msgpack-rpc. A TLS ClientHello begins 0x16 0x03,
         * which msgpack reads as the integer 22: say what it really is. */
        const char *why = derr.err.message;
        if (conn->tls == NULL && conn->first_byte == KD_TLS_RECORD_HANDSHAKE)
            why = "looks like a TLS handshake on a plaintext port (krylovd serves TLS only with "
                  "--tls-cert and --tls-key)";
        KD_INFO("conn", "closing conn=%llu peer=%s: %s", (unsigned long long)conn->id, conn->peer,
                why);
        kd_conn_close(conn);
    }
}

/* Hand every whole message buffered to the dispatcher, until a held `auth` answer or a pause for
 * memory stops it (kd_conn_resume_reading goes on from there). */
static void kd_conn_drain(kd_conn_t *conn, uint64_t now)
{
    kd_frame_event_t ev;
    while (!conn->closing && conn->hold == NULL && !conn->read_paused) {
        kd_frame_kind_t kind = kd_frame_next(conn->frame, &ev);
        if (kind == KD_FRAME_NEED_MORE)
            break;
        conn->message_start_ns = 0; /* a message ended; the next one's clock starts below */
        /* where the framer stands in the stream: past this message (or into a refused one) */
        const uint64_t consumed = conn->bytes_in - kd_frame_buffered(conn->frame);
        if (kind == KD_FRAME_MESSAGE) {
            conn->msg_start = consumed - ev.len;
            kd_conn_handle_message(conn, ev.data, ev.len);
        } else if (kind == KD_FRAME_TOO_LARGE) {
            conn->server->counters.requests++;
            kd_server_count_error(conn->server, KD_ETOOLARGE);
            KD_INFO("conn", "too large conn=%llu peer=%s: %s", (unsigned long long)conn->id,
                    conn->peer, ev.message);
            if (ev.has_msgid)
                kd_conn_send_error(conn, ev.msgid, KD_ETOOLARGE, ev.message);
            else /* no msgid to address an answer to: not a request we can serve */
                kd_conn_close(conn);
        } else {
            KD_INFO("conn", "closing conn=%llu peer=%s: %s", (unsigned long long)conn->id,
                    conn->peer, ev.message);
            kd_conn_close(conn);
        }
    }
    /* A message's clock starts with its first byte (kd_conn_sweep); a TLS handshake counts. */
    int handshaking = conn->tls != NULL && !kd_tls_established(conn->tls);
    if (!conn->closing && (handshaking || kd_frame_in_message(conn->frame))) {
        if (conn->message_start_ns == 0)
            conn->message_start_ns = now;
    } else {
        conn->message_start_ns = 0;
    }
    if (conn->nfds > 0 && !conn->closing && conn->frame != NULL) /* dispatched with their message */
        kd_conn_close_fds(conn, conn->bytes_in - kd_frame_buffered(conn->frame));
    kd_climem_account(conn); /* the framer's buffer */
}

static void kd_conn_read(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    kd_conn_t *conn = stream->data;
    if (conn->is_unix) /* they came with this read's bytes */
        kd_conn_take_fds(conn, conn->bytes_in, conn->bytes_in + (nread > 0 ? (uint64_t)nread : 0));
    if (conn->closing)
        return;
    if (nread < 0) {
        if (nread != UV_EOF)
            KD_DEBUG("conn", "read error conn=%llu: %s", (unsigned long long)conn->id,
                     uv_strerror((int)nread));
        kd_conn_close(conn);
        return;
    }
    if (nread > 0 && conn->first_byte < 0)
        conn->first_byte = (unsigned char)buf->base[0];
    kd_frame_commit(conn->frame, (size_t)nread);
    conn->bytes_in += (uint64_t)nread;
    uint64_t now = kd_clock_ns();
    if (nread > 0)
        conn->last_activity_ns = now;
    kd_conn_drain(conn, now);
}

/* The handshake or a record failed: a client that got our ServerHello speaks TLS and gets the
 * alert; one that did not (plaintext on the TLS port) is just closed. */
static void kd_conn_tls_failed(kd_conn_t *conn, const kd_err_t *err)
{
    int tls_client = conn->first_byte == KD_TLS_RECORD_HANDSHAKE;
    KD_INFO("conn", "closing conn=%llu peer=%s: %s%s", (unsigned long long)conn->id, conn->peer,
            err->message, tls_client ? "" : " (not a TLS client: plaintext on the TLS port?)");
    if (tls_client)
        kd_conn_flush_tls(conn);
    kd_conn_close(conn);
}

static void kd_conn_read_tls(uv_stream_t *stream, ssize_t nread, const uv_buf_t *buf)
{
    kd_conn_t *conn = stream->data;
    if (nread < 0) {
        if (nread != UV_EOF)
            KD_DEBUG("conn", "read error conn=%llu: %s", (unsigned long long)conn->id,
                     uv_strerror((int)nread));
        kd_conn_close(conn);
        return;
    }
    if (nread == 0)
        return;
    uint64_t now = kd_clock_ns();
    conn->last_activity_ns = now;
    if (conn->first_byte < 0) {
        conn->first_byte = (unsigned char)buf->base[0];
        /* Every TLS 1.2+ client opens with a handshake record. Anything else would make OpenSSL
         * wait for bytes that never come (0x94, a msgpack-rpc request, reads as an SSLv2 hello
         * header announcing kilobytes): refuse it now. */
        if (conn->first_byte != KD_TLS_RECORD_HANDSHAKE) {
            kd_err_t err = {0};
            kd_err_set(&err, KD_EPROTO, "TLS handshake failed: the first byte is 0x%02x, not 0x16",
                       conn->first_byte);
            kd_conn_tls_failed(conn, &err);
            return;
        }
    }
    int was_established = kd_tls_established(conn->tls);
    if (kd_tls_feed(conn->tls, buf->base, (size_t)nread) != KD_OK) {
        KD_ERROR("conn", "out of memory for TLS input conn=%llu", (unsigned long long)conn->id);
        kd_conn_close(conn);
        return;
    }
    /* Everything decrypted goes to the framer; while a held `auth` answer stops the dispatch,
     * it waits there for kd_conn_resume_reading (at most one read's worth). */
    while (!conn->closing) {
        char *space;
        size_t room, got = 0;
        if (kd_frame_reserve(conn->frame, sizeof(conn->server->tls_inbuf), &space, &room) !=
            KD_OK) {
            KD_ERROR("conn", "out of memory reading conn=%llu", (unsigned long long)conn->id);
            kd_conn_close(conn);
            break;
        }
        kd_err_t err = {0};
        kd_tls_status_t st = kd_tls_read(conn->tls, space, room, &got, &err);
        if (st == KD_TLS_DATA) {
            kd_frame_commit(conn->frame, got);
            conn->bytes_in += got;
            kd_conn_drain(conn, now);
            continue;
        }
        if (st == KD_TLS_CLOSED) {
            KD_DEBUG("conn", "TLS close_notify conn=%llu", (unsigned long long)conn->id);
            kd_conn_close(conn);
        } else if (st == KD_TLS_FAILED) {
            kd_conn_tls_failed(conn, &err);
        }
        break;
    }
    if (!conn->closing && kd_conn_flush_tls(conn) != KD_OK) /* handshake records, alerts */
        kd_conn_close(conn);
    if (!was_established && kd_tls_established(conn->tls)) {
        char desc[192];
        kd_tls_describe(conn->tls, desc, sizeof(desc));
        KD_DEBUG("conn", "TLS conn=%llu peer=%s: %s", (unsigned long long)conn->id, conn->peer,
                 desc);
    }
    kd_conn_drain(conn, now); /* no message, but the handshake's clock */
}

void kd_conn_sweep(kd_server_t *server, uint64_t now)
{
    uint64_t idle = (uint64_t)server->cfg.idle_timeout_ms * 1000000u;
    uint64_t slow = (uint64_t)server->cfg.message_timeout_ms * 1000000u;
    kd_conn_t *c = server->conns;
    while (c != NULL) {
        kd_conn_t *next = c->next; /* closing unlinks c */
        if (slow > 0 && c->message_start_ns != 0 && !c->read_paused &&
            now - c->message_start_ns > slow) {
            server->counters.connections_slow++;
            KD_INFO("conn",
                    "closing conn=%llu peer=%s: a message took longer than %lld ms to arrive "
                    "(%zu bytes of it buffered)",
                    (unsigned long long)c->id, c->peer, (long long)server->cfg.message_timeout_ms,
                    kd_frame_buffered(c->frame));
            kd_conn_close(c);
        } else if (idle > 0 && c->jobs == NULL && c->warm_waits == 0 &&
                   now - c->last_activity_ns > idle) { /* a wait_warm is a request in flight */
            server->counters.connections_idle++;
            KD_INFO("conn", "closing conn=%llu peer=%s: idle for %lld ms%s",
                    (unsigned long long)c->id, c->peer, (long long)server->cfg.idle_timeout_ms,
                    c->write_pending > 0 ? " with responses unread" : "");
            kd_conn_close(c);
        }
        c = next;
    }
}
