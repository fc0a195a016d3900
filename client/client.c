/*
 * libkrylov (see krylov.h): blocking msgpack-rpc over one TCP or Unix-socket connection. Each
 * call writes one request, then reads messages until the response with its msgid arrives, passing
 * solve.progress notifications for it to the caller's callback on the way. Responses are framed
 * by the same kd_frame scanner the server uses and unpacked with msgpack-c. A request's large
 * array leaves from the caller's memory in the same sendmsg() as the request's other bytes
 * (kd_client_tail); a reply's y or x payload is received straight into the caller's array
 * (kd_client_sink, reply_scan.c). On a Unix socket, arrays of 256 KiB or more go through shared
 * memory instead (client_shm.c: the region; here: its RPCs and the requests that name it). With
 * krylov_set_tls() the same bytes go through a TLS session on the socket (client_tls.c).
 */
#include "krylov.h"

#include "client/client_shm.h"
#include "client/client_tls.h"
#include "client/reply_scan.h"
#include "client/mtx_file.h"
#include "common/checked.h"
#include "common/csr.h"
#include "common/dtype.h"
#include "common/error.h"
#include "protocol/frame.h"
#include "protocol/object.h"
#include "protocol/pattern.h"
#include "protocol/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#define KRYLOV_MAX_FILE ((size_t)4 << 30)
/* One send() at most this much, so send progress is reported in steps a person can see. */
#define KRYLOV_SEND_STEP ((size_t)1 << 20)

struct krylov_client {
    int fd;
    int timeout_ms;
    uint64_t next_msgid;
    kd_frame_t *frame;
    krylov_send_progress_fn send_progress;
    void *send_progress_ctx;
    char code[32];
    char message[KD_ERR_MESSAGE_MAX];
    int tls;                           /* krylov_set_tls: connect with TLS */
    char *cafile, *certfile, *keyfile; /* its files (NULL: none) */
    kd_ctls_t *session;                /* the connection's TLS session, or NULL */
    /* A large bin of the caller's sent from where it is (kd_client_tail): the request's last
     * value, its header written, its bytes not copied into the request; NULL when none. */
    const void *tail;
    size_t tail_len;
    /* A descriptor to attach (SCM_RIGHTS) to the next request's first bytes, or -1: the memfd of
     * shm.register (not owned). */
    int send_fd;
    kd_cshm_t shm; /* shared memory over a Unix socket (client_shm.h) */
    /* Where the next response's large bin `field` of `len` bytes goes straight from the socket
     * (kd_client_recv_sink): the caller's output array; filled: it went there. */
    struct {
        void *dst;
        size_t len;
        const char *field;
        int filled;
        uint8_t *head; /* the response's first bytes (KD_SINK_HEAD), kept for the next call */
    } sink;
    int shm_rc; /* why the last shm.register failed, when the connection went with it */
    /* The last pattern krylov_put_like hashed (a copy) and its hash: a time-stepping loop sends
     * one pattern again and again, and comparing memory is several times cheaper than SHA-256. */
    struct {
        int64_t rows, cols, nnz;
        int32_t *indptr, *indices; /* NULL: none kept */
        char hex[KD_ID_HEX_LEN + 1];
    } memo;
};

/* One received response, kept alive while the caller reads its result. */
typedef struct kd_reply {
    void *buf;
    msgpack_unpacked up;
    const msgpack_object *result;
} kd_reply_t;

static int kd_client_fail(krylov_client_t *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int kd_client_fail(krylov_client_t *c, int code, const char *fmt, ...)
{
    snprintf(c->code, sizeof(c->code), "%s",
             code == KRYLOV_ECONNECTION ? "CONNECTION" : kd_error_wire_name(code));
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof(c->message), fmt, ap);
    va_end(ap);
    return code;
}

static void kd_client_ok(krylov_client_t *c)
{
    c->code[0] = '\0';
    c->message[0] = '\0';
}

krylov_client_t *krylov_client_new(void)
{
    krylov_client_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->fd = -1;
    c->send_fd = -1;
    c->next_msgid = 1;
    return c;
}

void krylov_close(krylov_client_t *c)
{
    if (c == NULL)
        return;
    kd_ctls_free(c->session);
    c->session = NULL;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    kd_frame_free(c->frame);
    c->frame = NULL;
    kd_cshm_disconnect(&c->shm); /* the server drops its mappings with the connection */
}

void krylov_client_free(krylov_client_t *c)
{
    krylov_close(c);
    if (c != NULL) {
        free(c->cafile);
        free(c->certfile);
        free(c->keyfile);
        free(c->memo.indptr);
        free(c->memo.indices);
        kd_cshm_free(&c->shm);
        free(c->sink.head);
    }
    free(c);
}

static int kd_client_copy_path(char **dst, const char *src)
{
    free(*dst);
    *dst = NULL;
    if (src == NULL)
        return KRYLOV_OK;
    *dst = strdup(src);
    return *dst != NULL ? KRYLOV_OK : KRYLOV_ENOMEM;
}

int krylov_set_tls(krylov_client_t *c, const krylov_tls_options_t *opt)
{
    c->tls = opt != NULL;
    int rc = KRYLOV_OK;
    if (kd_client_copy_path(&c->cafile, opt != NULL ? opt->cafile : NULL) != KRYLOV_OK ||
        kd_client_copy_path(&c->certfile, opt != NULL ? opt->certfile : NULL) != KRYLOV_OK ||
        kd_client_copy_path(&c->keyfile, opt != NULL ? opt->keyfile : NULL) != KRYLOV_OK)
        rc = kd_client_fail(c, KRYLOV_ENOMEM, "out of memory");
    return rc;
}

void krylov_set_timeout(krylov_client_t *c, int timeout_ms)
{
    c->timeout_ms = timeout_ms > 0 ? timeout_ms : 0;
}

void krylov_set_send_progress(krylov_client_t *c, krylov_send_progress_fn fn, void *ctx)
{
    c->send_progress = fn;
    c->send_progress_ctx = ctx;
}

const char *krylov_error_code(const krylov_client_t *c)
{
    return c->code;
}

const char *krylov_error_message(const krylov_client_t *c)
{
    return c->message;
}

static int kd_client_wait(krylov_client_t *c, short events);

/* The handshake on the connected socket, verifying the server's certificate for host. */
static int kd_client_start_tls(krylov_client_t *c, const char *host, const char *address)
{
    char why[KD_ERR_MESSAGE_MAX - 128];
    int flags = fcntl(c->fd, F_GETFL);
    if (flags < 0 || fcntl(c->fd, F_SETFL, flags | O_NONBLOCK) < 0 ||
        kd_ctls_new(c->fd, host, c->cafile, c->certfile, c->keyfile, &c->session, why,
                    sizeof(why)) != 0) {
        if (flags < 0)
            snprintf(why, sizeof(why), "fcntl: %s", strerror(errno));
        krylov_close(c);
        return kd_client_fail(c, KRYLOV_EBADREQ, "cannot set up TLS: %s", why);
    }
    for (;;) {
        short wait = 0;
        int st = kd_ctls_handshake(c->session, &wait, why, sizeof(why));
        if (st == 1)
            return KRYLOV_OK;
        if (st != KD_CTLS_AGAIN) {
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_ECONNECTION, "%s: %s", address, why);
        }
        int rc = kd_client_wait(c, wait);
        if (rc != KRYLOV_OK)
            return rc;
    }
}

static int kd_client_start(krylov_client_t *c, int fd)
{
    kd_frame_limits_t limits = {
        .max_message = (size_t)1 << 34, .max_elements = (size_t)1 << 28, .max_depth = 32};
    if (kd_frame_new(&limits, &c->frame) != KD_OK) {
        close(fd);
        return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory");
    }
    c->fd = fd;
    kd_client_ok(c);
    return KRYLOV_OK;
}

static int kd_connect_unix(krylov_client_t *c, const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    if (path[0] == '\0' || strlen(path) >= sizeof(sa.sun_path))
        return kd_client_fail(c, KRYLOV_EBADREQ, "unix:PATH needs a path of 1..%zu bytes",
                              sizeof(sa.sun_path) - 1);
    memcpy(sa.sun_path, path, strlen(path) + 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return kd_client_fail(c, KRYLOV_ECONNECTION, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        int e = errno;
        close(fd);
        return kd_client_fail(c, KRYLOV_ECONNECTION, "cannot connect to unix:%s: %s", path,
                              strerror(e));
    }
    int rc = kd_client_start(c, fd);
    c->shm.local = rc == KRYLOV_OK;
    return rc;
}

int krylov_connect(krylov_client_t *c, const char *address)
{
    krylov_close(c);
    if (strncmp(address, "unix:", 5) == 0)
        return kd_connect_unix(c, address + 5);
    char host[256], port[16] = "7373";
    const char *colon;
    if (address[0] == '[') {
        const char *close_br = strchr(address, ']');
        if (close_br == NULL)
            return kd_client_fail(c, KRYLOV_EBADREQ, "bad address '%s'", address);
        snprintf(host, sizeof(host), "%.*s", (int)(close_br - address - 1), address + 1);
        colon = close_br[1] == ':' ? close_br + 1 : NULL;
    } else {
        colon = strrchr(address, ':');
        size_t n = colon ? (size_t)(colon - address) : strlen(address);
        if (n >= sizeof(host))
            return kd_client_fail(c, KRYLOV_EBADREQ, "address '%s' is too long", address);
        memcpy(host, address, n);
        host[n] = '\0';
    }
    if (colon != NULL)
        snprintf(port, sizeof(port), "%s", colon + 1);

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai != 0)
        return kd_client_fail(c, KRYLOV_ECONNECTION, "cannot resolve %s: %s", address,
                              gai_strerror(gai));
    int fd = -1, saved = 0;
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        saved = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return kd_client_fail(c, KRYLOV_ECONNECTION, "cannot connect to %s: %s", address,
                              strerror(saved ? saved : ECONNREFUSED));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    int rc = kd_client_start(c, fd);
    if (rc == KRYLOV_OK && c->tls)
        rc = kd_client_start_tls(c, host, address);
    return rc;
}

static int kd_client_wait(krylov_client_t *c, short events)
{
    struct pollfd p = {.fd = c->fd, .events = events};
    for (;;) {
        int n = poll(&p, 1, c->timeout_ms > 0 ? c->timeout_ms : -1);
        if (n > 0)
            return KRYLOV_OK;
        if (n == 0) {
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_ETIMEOUT, "no answer from the server within %d ms",
                                  c->timeout_ms);
        }
        if (errno != EINTR) {
            int e = errno;
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_ECONNECTION, "poll: %s", strerror(e));
        }
    }
}

/* Send len bytes through the TLS session that are bytes [base, base + len) of a message of
 * `total` (the progress callback sees the whole message's). */
static int kd_client_send_part(krylov_client_t *c, const void *data, size_t len, size_t base,
                               size_t total)
{
    const char *p = data;
    const size_t end = base + len;
    while (len > 0) {
        size_t step = len < KRYLOV_SEND_STEP ? len : KRYLOV_SEND_STEP;
        char why[KD_ERR_MESSAGE_MAX - 64];
        short wait = 0;
        ssize_t n = kd_ctls_write(c->session, p, step, &wait, why, sizeof(why));
        if (n == KD_CTLS_AGAIN) {
            int rc = kd_client_wait(c, wait);
            if (rc != KRYLOV_OK)
                return rc;
            continue;
        }
        if (n < 0) {
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_ECONNECTION, "connection lost while sending: %s",
                                  n == KD_CTLS_CLOSED ? "closed by the server" : why);
        }
        p += n;
        len -= (size_t)n;
        if (c->send_progress != NULL)
            c->send_progress(c->send_progress_ctx, (uint64_t)(end - len), (uint64_t)total);
    }
    return KRYLOV_OK;
}

/* Attach c->send_fd (SCM_RIGHTS) to m, into space; the descriptor then goes with these bytes. */
static void kd_client_attach_fd(krylov_client_t *c, struct msghdr *m, char *space, size_t cap)
{
    if (c->send_fd < 0)
        return;
    m->msg_control = space;
    m->msg_controllen = cap;
    struct cmsghdr *cm = CMSG_FIRSTHDR(m);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &c->send_fd, sizeof(int));
}

/*
 * One message, head then tail (the caller's array, or NULL), straight from where they lie: each
 * sendmsg() carries both parts, so a request and its array usually leave in one system call and
 * nothing is copied. c->send_fd goes with the first bytes. With a send-progress callback a call
 * sends at most KRYLOV_SEND_STEP; with a timeout the socket is not waited on inside sendmsg.
 */
static int kd_client_send_message(krylov_client_t *c, const void *head, size_t head_len,
                                  const void *tail, size_t tail_len)
{
    const size_t total = head_len + tail_len;
    if (c->session != NULL) { /* TLS: the session encrypts chunk by chunk */
        int rc = kd_client_send_part(c, head, head_len, 0, total);
        if (rc == KRYLOV_OK && tail_len > 0)
            rc = kd_client_send_part(c, tail, tail_len, head_len, total);
        return rc;
    }
    const size_t limit = c->send_progress != NULL ? KRYLOV_SEND_STEP : SIZE_MAX;
    const int flags = MSG_NOSIGNAL | (c->timeout_ms > 0 ? MSG_DONTWAIT : 0);
    size_t done = 0;
    while (done < total) {
        struct iovec iov[2];
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = 0};
        size_t room = limit;
        if (done < head_len) {
            const size_t n = head_len - done < room ? head_len - done : room;
            iov[m.msg_iovlen++] = (struct iovec){.iov_base = (char *)head + done, .iov_len = n};
            room -= n;
        }
        if (room > 0 && tail_len > 0) {
            const size_t from = done > head_len ? done - head_len : 0;
            const size_t n = tail_len - from < room ? tail_len - from : room;
            iov[m.msg_iovlen++] = (struct iovec){.iov_base = (char *)tail + from, .iov_len = n};
        }
        char space[CMSG_SPACE(sizeof(int))];
        memset(space, 0, sizeof(space));
        kd_client_attach_fd(c, &m, space, sizeof(space));
        const ssize_t n = sendmsg(c->fd, &m, flags);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                int rc = kd_client_wait(c, POLLOUT);
                if (rc != KRYLOV_OK)
                    return rc;
                continue;
            }
            int e = errno;
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_ECONNECTION, "connection lost while sending: %s",
                                  strerror(e));
        }
        if (n > 0)
            c->send_fd = -1;
        done += (size_t)n;
        if (c->send_progress != NULL)
            c->send_progress(c->send_progress_ctx, (uint64_t)done, (uint64_t)total);
    }
    return KRYLOV_OK;
}

/* key: a bin of len bytes at data, sent from there by the next kd_client_call: it must be the
 * request's last value (the params map's last), and data must live until that call returns. */
static void kd_client_tail(krylov_client_t *c, kd_writer_t *w, const char *key, const void *data,
                           size_t len)
{
    kd_w_key(w, key);
    msgpack_pack_bin(&w->pk, len);
    c->tail = data;
    c->tail_len = len;
}

/* Decrypted bytes into space (what the session holds already, else after waiting for more). */
static int kd_client_recv_tls(krylov_client_t *c, char *space, size_t room)
{
    char why[KD_ERR_MESSAGE_MAX - 64];
    for (;;) {
        short wait = 0;
        ssize_t n = kd_ctls_read(c->session, space, room, &wait, why, sizeof(why));
        if (n > 0) {
            kd_frame_commit(c->frame, (size_t)n);
            return KRYLOV_OK;
        }
        if (n != KD_CTLS_AGAIN) {
            krylov_close(c);
            if (n == KD_CTLS_CLOSED)
                return kd_client_fail(c, KRYLOV_ECONNECTION, "connection closed by the server");
            return kd_client_fail(c, KRYLOV_ECONNECTION, "connection lost: %s", why);
        }
        int rc = kd_client_wait(c, wait);
        if (rc != KRYLOV_OK)
            return rc;
    }
}

/* Read until one whole message is framed; *buf is malloc'd. */
static int kd_client_recv(krylov_client_t *c, void **buf, size_t *len)
{
    for (;;) {
        kd_frame_event_t ev;
        kd_frame_kind_t kind = kd_frame_next(c->frame, &ev);
        if (kind == KD_FRAME_MESSAGE) {
            *buf = ev.data;
            *len = ev.len;
            return KRYLOV_OK;
        }
        if (kind != KD_FRAME_NEED_MORE) {
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_EPROTO, "bad response from the server: %s", ev.message);
        }
        char *space;
        size_t room;
        if (kd_frame_reserve(c->frame, 1 << 20, &space, &room) != KD_OK)
            return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory reading a response");
        if (c->session != NULL) {
            int rc = kd_client_recv_tls(c, space, room);
            if (rc != KRYLOV_OK)
                return rc;
            continue;
        }
        if (c->timeout_ms > 0) { /* else recv() waits: one system call a chunk */
            int rc = kd_client_wait(c, POLLIN);
            if (rc != KRYLOV_OK)
                return rc;
        }
        ssize_t n = recv(c->fd, space, room, 0);
        if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) {
            int e = n == 0 ? 0 : errno;
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_ECONNECTION, "connection closed by the server%s%s",
                                  e ? ": " : "", e ? strerror(e) : "");
        }
        if (n > 0)
            kd_frame_commit(c->frame, (size_t)n);
    }
}

/* The response's first bytes, at most this many, are read to find where the sink's bin is. */
#define KD_SINK_HEAD ((size_t)64 << 10)

/* recv() into buf, waiting (with the timeout) when nothing is there: bytes, or an error code
 * (the connection then closed). all: wait for all of room. */
static ssize_t kd_client_recv_some(krylov_client_t *c, void *buf, size_t room, int all)
{
    for (;;) {
        if (c->timeout_ms > 0) {
            int rc = kd_client_wait(c, POLLIN);
            if (rc != KRYLOV_OK)
                return rc;
        }
        ssize_t n = recv(c->fd, buf, room, all && c->timeout_ms == 0 ? MSG_WAITALL : 0);
        if (n > 0)
            return n;
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        int e = n == 0 ? 0 : errno;
        krylov_close(c);
        return kd_client_fail(c, KRYLOV_ECONNECTION, "connection closed by the server%s%s",
                              e ? ": " : "", e ? strerror(e) : "");
    }
}

/*
 * Receive the start of the response to msgid; when it is a result whose c->sink.field is a bin of
 * c->sink.len bytes, its payload is received straight into c->sink.dst (c->sink.filled) and the
 * frame gets the message with that bin emptied. Everything else goes to the frame as it came.
 */
static int kd_client_recv_sink(krylov_client_t *c, uint64_t msgid)
{
    if (c->sink.head == NULL && (c->sink.head = malloc(KD_SINK_HEAD)) == NULL)
        return KRYLOV_OK; /* the ordinary way */
    uint8_t *head = c->sink.head;
    size_t have = 0, at = 0, header = 0;
    kd_reply_scan_t scan = KD_REPLY_SCAN_MORE;
    while (scan == KD_REPLY_SCAN_MORE && have < KD_SINK_HEAD) {
        ssize_t n = kd_client_recv_some(c, head + have, KD_SINK_HEAD - have, 0);
        if (n < 0)
            return (int)n;
        have += (size_t)n;
        scan = kd_reply_scan(head, have, msgid, c->sink.field, c->sink.len, &at, &header);
    }
    int rc = KRYLOV_OK;
    if (scan != KD_REPLY_SCAN_FOUND) {
        if (kd_frame_feed(c->frame, head, have) != KD_OK)
            rc = kd_client_fail(c, KRYLOV_ENOMEM, "out of memory reading a response");
        return rc;
    }
    const size_t payload = at + header, len = c->sink.len;
    const size_t got = have - payload < len ? have - payload : len;
    memcpy(c->sink.dst, head + payload, got);
    kd_reply_scan_empty_bin(head + at, header);
    if (kd_frame_feed(c->frame, head, payload) != KD_OK ||
        kd_frame_feed(c->frame, head + payload + got, have - payload - got) != KD_OK)
        rc = kd_client_fail(c, KRYLOV_ENOMEM, "out of memory reading a response");
    for (size_t done = got; rc == KRYLOV_OK && done < len;) {
        ssize_t n = kd_client_recv_some(c, (char *)c->sink.dst + done, len - done, 1);
        if (n < 0)
            return (int)n;
        done += (size_t)n;
    }
    c->sink.filled = rc == KRYLOV_OK;
    return rc;
}

static void kd_reply_destroy(kd_reply_t *r)
{
    msgpack_unpacked_destroy(&r->up);
    free(r->buf);
    r->buf = NULL;
}

/*
 * Send the request in w (its msgid is `msgid`) and wait for its response. On KRYLOV_OK,
 * reply->result is the result object (destroy the reply after reading it). Error responses
 * become the call's error code and message.
 */
static int kd_client_call(krylov_client_t *c, kd_writer_t *w, uint64_t msgid,
                          const krylov_solve_options_t *progress, kd_reply_t *reply)
{
    if (c->fd < 0) {
        kd_writer_destroy(w);
        c->tail = NULL;
        c->tail_len = 0;
        c->send_fd = -1;
        c->sink.dst = NULL;
        return kd_client_fail(c, KRYLOV_ECONNECTION, "not connected");
    }
    const void *tail = c->tail;
    const size_t tail_len = c->tail_len;
    c->tail = NULL;
    c->tail_len = 0;
    size_t len;
    void *bytes = kd_writer_release(w, &len);
    if (bytes == NULL)
        return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory encoding the request");
    int rc = kd_client_send_message(c, bytes, len, tail, tail != NULL ? tail_len : 0);
    free(bytes);
    c->send_fd = -1;
    c->sink.filled = 0;
    if (rc == KRYLOV_OK && c->sink.dst != NULL && c->session == NULL &&
        kd_frame_buffered(c->frame) == 0)
        rc = kd_client_recv_sink(c, msgid);
    c->sink.dst = NULL;
    if (rc != KRYLOV_OK)
        return rc;
    for (;;) {
        memset(reply, 0, sizeof(*reply));
        rc = kd_client_recv(c, &reply->buf, &len);
        if (rc != KRYLOV_OK)
            return rc;
        msgpack_unpacked_init(&reply->up);
        size_t off = 0;
        if (msgpack_unpack_next(&reply->up, reply->buf, len, &off) != MSGPACK_UNPACK_SUCCESS) {
            kd_reply_destroy(reply);
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_EPROTO, "the server sent bytes that do not unpack");
        }
        kd_response_view_t resp;
        kd_notification_view_t note;
        int kind = kd_obj_parse_message(&reply->up.data, &resp, &note);
        if (kind == 2) {
            int64_t id = -1, rhs = 0, it = 0;
            double res = 0.0;
            if (progress != NULL && progress->progress != NULL && note.params != NULL &&
                kd_obj_int64(kd_obj_get(note.params, "msgid"), &id) == 0 && (uint64_t)id == msgid) {
                kd_obj_int64(kd_obj_get(note.params, "rhs"), &rhs);
                kd_obj_int64(kd_obj_get(note.params, "iteration"), &it);
                kd_obj_double(kd_obj_get(note.params, "residual"), &res);
                progress->progress(progress->progress_ctx, rhs, it, res);
            }
            kd_reply_destroy(reply);
            continue;
        }
        if (kind != 1) {
            kd_reply_destroy(reply);
            krylov_close(c);
            return kd_client_fail(c, KRYLOV_EPROTO,
                                  "the server sent a message that is not a "
                                  "msgpack-rpc response");
        }
        /* msgid 0 with an error: the server refused the connection itself (BUSY) */
        if (resp.msgid != msgid && !(resp.msgid == 0 && resp.error != NULL)) {
            /* an answer to an earlier, abandoned call */
            kd_reply_destroy(reply);
            continue;
        }
        if (resp.error != NULL) {
            const char *code = "INTERNAL", *msg = "";
            size_t code_len = 8, msg_len = 0;
            kd_obj_str(kd_obj_get(resp.error, "code"), &code, &code_len);
            kd_obj_str(kd_obj_get(resp.error, "message"), &msg, &msg_len);
            int err = kd_error_from_wire_name(code, code_len);
            snprintf(c->code, sizeof(c->code), "%.*s", (int)code_len, code);
            snprintf(c->message, sizeof(c->message), "%.*s", (int)msg_len, msg);
            kd_reply_destroy(reply);
            return err;
        }
        reply->result = resp.result;
        kd_client_ok(c);
        return KRYLOV_OK;
    }
}

static uint64_t kd_client_begin(krylov_client_t *c, kd_writer_t *w, const char *method,
                                uint32_t nparams)
{
    uint64_t msgid = c->next_msgid++;
    kd_writer_init(w);
    kd_w_request_begin(w, msgid, method);
    kd_w_array(w, 1);
    kd_w_map(w, nparams);
    return msgid;
}

static int kd_result_missing(krylov_client_t *c, kd_reply_t *reply, const char *field)
{
    kd_reply_destroy(reply);
    return kd_client_fail(c, KRYLOV_EPROTO, "the server's result has no valid '%s'", field);
}

/* Copy a str field, cut to fit (an absent or non-str field gives ""). */
static void kd_copy_str(const msgpack_object *o, char *dst, size_t cap)
{
    const char *s;
    size_t len;
    if (kd_obj_str(o, &s, &len) != 0)
        len = 0;
    if (len >= cap)
        len = cap - 1;
    if (len > 0)
        memcpy(dst, s, len);
    dst[len] = '\0';
}

static void kd_parse_candidates(const msgpack_object *list, krylov_matrix_info_t *info)
{
    if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY)
        return;
    for (uint32_t i = 0; i < list->via.array.size && info->ncandidates < KRYLOV_MAX_CANDIDATES;
         i++) {
        const msgpack_object *m = &list->via.array.ptr[i];
        krylov_format_candidate_t *cand = &info->candidates[info->ncandidates++];
        kd_copy_str(kd_obj_get(m, "format"), cand->format, sizeof(cand->format));
        kd_copy_str(kd_obj_get(m, "dropped"), cand->dropped, sizeof(cand->dropped));
        if (kd_obj_double(kd_obj_get(m, "time_ms"), &cand->time_ms) != 0)
            cand->time_ms = -1.0;
    }
}

static void kd_parse_info(const msgpack_object *m, krylov_matrix_info_t *info)
{
    memset(info, 0, sizeof(*info));
    kd_copy_str(kd_obj_get(m, "id"), info->id, sizeof(info->id));
    kd_copy_str(kd_obj_get(m, "name"), info->name, sizeof(info->name));
    kd_copy_str(kd_obj_get(m, "dtype"), info->dtype, sizeof(info->dtype));
    kd_copy_str(kd_obj_get(m, "format"), info->format, sizeof(info->format));
    kd_obj_int64(kd_obj_get(m, "rows"), &info->rows);
    kd_obj_int64(kd_obj_get(m, "cols"), &info->cols);
    kd_obj_int64(kd_obj_get(m, "nnz"), &info->nnz);
    kd_obj_int64(kd_obj_get(m, "device_bytes"), &info->device_bytes);
    kd_obj_bool(kd_obj_get(m, "pinned"), &info->pinned);
    kd_obj_bool(kd_obj_get(m, "created"), &info->created);
    const msgpack_object *st = kd_obj_get(m, "stats");
    kd_obj_int64(kd_obj_get(st, "min_row"), &info->min_row);
    kd_obj_int64(kd_obj_get(st, "max_row"), &info->max_row);
    kd_obj_int64(kd_obj_get(st, "empty_rows"), &info->empty_rows);
    kd_obj_double(kd_obj_get(st, "mean_row"), &info->mean_row);
    kd_obj_double(kd_obj_get(st, "stddev_row"), &info->stddev_row);
    kd_obj_int64(kd_obj_get(st, "nonfinite"), &info->nonfinite);
    info->resident = 1;
    kd_obj_bool(kd_obj_get(m, "resident"), &info->resident);
    kd_obj_int64(kd_obj_get(m, "uses"), &info->uses);
    kd_parse_candidates(kd_obj_get(m, "candidates"), info);
    kd_copy_str(kd_obj_get(m, "reorder"), info->reorder, sizeof(info->reorder));
    const msgpack_object *bw = kd_obj_get(m, "bandwidth");
    kd_obj_int64(kd_obj_get(bw, "before"), &info->bandwidth_before);
    kd_obj_int64(kd_obj_get(bw, "after"), &info->bandwidth_after);
    info->symmetric = -1; /* a server from before the flag, or a state file from before it */
    kd_obj_bool(kd_obj_get(m, "symmetric"), &info->symmetric);
    if (kd_obj_double(kd_obj_get(m, "time_ms"), &info->time_ms) != 0)
        info->time_ms = -1.0;
}

static void kd_put_options(kd_writer_t *w, const krylov_put_options_t *opt)
{
    if (opt == NULL)
        return;
    if (opt->name != NULL)
        kd_w_kv_str(w, "name", opt->name);
    if (opt->format != NULL)
        kd_w_kv_str(w, "format", opt->format);
    if (opt->dtype != NULL)
        kd_w_kv_str(w, "dtype", opt->dtype);
    if (opt->pin)
        kd_w_kv_bool(w, "pin", 1);
    if (opt->reorder != NULL)
        kd_w_kv_str(w, "reorder", opt->reorder);
}

static uint32_t kd_put_option_count(const krylov_put_options_t *opt)
{
    if (opt == NULL)
        return 0;
    return (opt->name != NULL) + (opt->format != NULL) + (opt->dtype != NULL) + (opt->pin != 0) +
           (opt->reorder != NULL);
}

static int kd_finish_info(krylov_client_t *c, kd_writer_t *w, uint64_t msgid,
                          krylov_matrix_info_t *info)
{
    kd_reply_t reply;
    int rc = kd_client_call(c, w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    if (reply.result == NULL || reply.result->type != MSGPACK_OBJECT_MAP)
        return kd_result_missing(c, &reply, "matrix info");
    if (info != NULL)
        kd_parse_info(reply.result, info);
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

static int kd_check_count(krylov_client_t *c, int64_t n, size_t elem, size_t *bytes)
{
    if (n < 0 || kd_mul_overflow((size_t)n, elem, bytes) || *bytes > UINT32_MAX)
        return kd_client_fail(c, KRYLOV_ETOOLARGE, "%lld values do not fit one message",
                              (long long)n);
    return KRYLOV_OK;
}

/* shm.register of fd (kd_cshm_ops_t's register_fd). */
static int kd_shm_register(void *ctx, int fd, size_t bytes, int64_t *id)
{
    krylov_client_t *c = ctx;
    if (bytes > INT64_MAX)
        return KRYLOV_ETOOLARGE;
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "shm.register", 1);
    kd_w_kv_int(&w, "bytes", (int64_t)bytes);
    c->send_fd = fd;
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK) {
        c->shm_rc = rc;
        return c->fd < 0 ? KRYLOV_ECONNECTION : rc;
    }
    int64_t size = 0;
    if (kd_obj_int64(kd_obj_get(reply.result, "shm"), id) != 0 || *id < 1 ||
        kd_obj_int64(kd_obj_get(reply.result, "bytes"), &size) != 0 || size != (int64_t)bytes)
        rc = KRYLOV_EPROTO; /* a server that says something else: never guess its id */
    kd_reply_destroy(&reply);
    return rc;
}

static void kd_shm_unregister(void *ctx, int64_t id)
{
    krylov_client_t *c = ctx;
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "shm.unregister", 1);
    kd_w_kv_int(&w, "shm", id);
    kd_reply_t reply;
    if (kd_client_call(c, &w, msgid, NULL, &reply) == KRYLOV_OK)
        kd_reply_destroy(&reply);
}

static kd_cshm_ops_t kd_shm_ops(krylov_client_t *c)
{
    return (kd_cshm_ops_t){
        .register_fd = kd_shm_register, .unregister = kd_shm_unregister, .ctx = c};
}

/* The caller's region that holds [p, p + len), registered on this connection (now, when it was
 * made on an earlier one), and p's offset in it; NULL: p is plain memory for this request. */
static kd_cshm_region_t *kd_shm_user(krylov_client_t *c, const void *p, size_t len, size_t *offset)
{
    kd_cshm_region_t *r = kd_cshm_find(&c->shm, p, len, offset);
    if (r == NULL || !kd_cshm_on(&c->shm))
        return NULL;
    if (r->id < 1) {
        const int rc = kd_shm_register(c, r->fd, r->bytes, &r->id);
        if (rc != KRYLOV_OK)
            r->id = 0; /* the request goes on with the bytes copied (or as bins) */
        if (rc != KRYLOV_OK && rc != KRYLOV_ETOOLARGE && rc != KRYLOV_ECONNECTION)
            c->shm.refused = 1; /* as for the arena: off for the connection */
    }
    return r->id > 0 ? r : NULL;
}

int krylov_shm_enabled(const krylov_client_t *c)
{
    return c->fd >= 0 && kd_cshm_on(&c->shm);
}

int64_t krylov_shm_requests(const krylov_client_t *c)
{
    return c->shm.uses;
}

void krylov_shm_set(krylov_client_t *c, int on)
{
    c->shm.off = !on;
    if (!on && c->shm.arena.id > 0 && c->fd >= 0)
        kd_shm_unregister(c, c->shm.arena.id);
    if (!on)
        kd_cshm_region_unmap(&c->shm.arena);
}

void *krylov_shm_alloc(krylov_client_t *c, size_t bytes)
{
    for (int i = 0; i < KD_CSHM_USER_MAX; i++) {
        kd_cshm_region_t *r = &c->shm.user[i];
        if (r->map != NULL)
            continue;
        int e = kd_cshm_region_create(r, bytes);
        if (e != 0) {
            kd_cshm_region_unmap(r);
            kd_client_fail(c, e == -EINVAL ? KRYLOV_EBADREQ : KRYLOV_ENOMEM,
                           "shared memory of %zu bytes: %s", bytes, strerror(-e));
            return NULL;
        }
        return r->map;
    }
    kd_client_fail(c, KRYLOV_ENOMEM, "shared memory: %d regions are held already (krylov_shm_free)",
                   KD_CSHM_USER_MAX);
    return NULL;
}

int krylov_shm_free(krylov_client_t *c, void *p)
{
    for (int i = 0; p != NULL && i < KD_CSHM_USER_MAX; i++) {
        kd_cshm_region_t *r = &c->shm.user[i];
        if (r->map != p)
            continue;
        if (r->id > 0 && c->fd >= 0)
            kd_shm_unregister(c, r->id);
        kd_cshm_region_unmap(r);
        return KRYLOV_OK;
    }
    return p == NULL ? KRYLOV_OK
                     : kd_client_fail(c, KRYLOV_EBADREQ,
                                      "krylov_shm_free: %p is not from "
                                      "krylov_shm_alloc",
                                      p);
}

/* key: the region reference {shm, offset, bytes}. */
static void kd_w_kv_ref(kd_writer_t *w, const char *key, int64_t region, size_t offset,
                        size_t bytes)
{
    kd_w_key(w, key);
    kd_w_map(w, 3);
    kd_w_kv_int(w, "shm", region);
    kd_w_kv_int(w, "offset", (int64_t)offset);
    kd_w_kv_int(w, "bytes", (int64_t)bytes);
}

/* The reply's field must be the very reference the request's `out` was: the result is then read
 * from where this client put it, never from an offset the server names. */
static int kd_check_ref(krylov_client_t *c, kd_reply_t *reply, const char *field, int64_t region,
                        size_t offset, size_t bytes)
{
    const msgpack_object *ref = kd_obj_get(reply->result, field);
    int64_t id = 0, off = -1, len = -1;
    if (ref == NULL || ref->type != MSGPACK_OBJECT_MAP ||
        kd_obj_int64(kd_obj_get(ref, "shm"), &id) != 0 ||
        kd_obj_int64(kd_obj_get(ref, "offset"), &off) != 0 ||
        kd_obj_int64(kd_obj_get(ref, "bytes"), &len) != 0 || id != region ||
        off != (int64_t)offset || len != (int64_t)bytes)
        return kd_result_missing(c, reply, field);
    return KRYLOV_OK;
}

/* Where one array of a request goes in shared memory: a region and an offset. */
typedef struct kd_shm_place {
    const kd_cshm_region_t *region; /* the caller's (no copy), or NULL: the arena */
    size_t offset;
} kd_shm_place_t;

/* Place len bytes at p: where they lie, in a region of the caller's, else next in the arena. */
static void kd_shm_place(krylov_client_t *c, kd_cshm_layout_t *lay, const void *p, size_t len,
                         kd_shm_place_t *at)
{
    at->region = kd_shm_user(c, p, len, &at->offset);
    if (at->region == NULL)
        at->offset = kd_cshm_layout_add(lay, len);
}

static int64_t kd_shm_id(const krylov_client_t *c, const kd_shm_place_t *at)
{
    return at->region != NULL ? at->region->id : c->shm.arena.id;
}

static char *kd_shm_at(krylov_client_t *c, const kd_shm_place_t *at)
{
    return (char *)(at->region != NULL ? at->region->map : c->shm.arena.map) + at->offset;
}

/* Two places that share a byte (the server refuses an `out` overlapping an input). */
static int kd_shm_overlap(const kd_shm_place_t *a, size_t alen, const kd_shm_place_t *b,
                          size_t blen)
{
    return a->region == b->region && a->offset < b->offset + blen && b->offset < a->offset + alen;
}

/*
 * The arena for a request (lay->bytes of it, when any array must be copied), the inputs copied in
 * (those at a caller's region stay where they are): 1; 0: the request goes as bins; or an error
 * code. inputs / places / lens: n arrays (NULL entries are skipped).
 */
static int kd_shm_stage(krylov_client_t *c, const kd_cshm_layout_t *lay, int n,
                        const void *const inputs[], const kd_shm_place_t places[],
                        const size_t lens[])
{
    if (lay->bytes > 0) {
        const kd_cshm_ops_t ops = kd_shm_ops(c);
        const int rc = kd_cshm_reserve(&c->shm, lay->bytes, &ops);
        if (rc == KRYLOV_ECONNECTION)
            return c->shm_rc != KRYLOV_OK ? c->shm_rc : KRYLOV_ECONNECTION;
        if (rc == 0)
            return 0;
    }
    for (int i = 0; i < n; i++)
        if (inputs[i] != NULL && places[i].region == NULL)
            memcpy(kd_shm_at(c, &places[i]), inputs[i], lens[i]);
    return 1;
}

/* krylov_spmm through shared memory: KRYLOV_OK, 1 (go as bins), or an error code. */
static int kd_spmm_shm(krylov_client_t *c, const char *id, int64_t k, double alpha, const double *x,
                       size_t xb, double beta, double *y, size_t yb, double *server_ms)
{
    const int with_y = beta != 0.0;
    if (!kd_cshm_on(&c->shm))
        return 1;
    kd_cshm_layout_t lay = {0};
    kd_shm_place_t px, py = {0}, out;
    kd_shm_place(c, &lay, x, xb, &px);
    if (with_y)
        kd_shm_place(c, &lay, y, yb, &py);
    /* y in a region of the caller's, not read: the result goes straight there */
    out.region = with_y ? NULL : kd_shm_user(c, y, yb, &out.offset);
    if (out.region != NULL && kd_shm_overlap(&out, yb, &px, xb))
        out.region = NULL;
    if (out.region == NULL)
        out.offset = kd_cshm_layout_add(&lay, yb);
    if (lay.bytes > 0 && !kd_cshm_usable(&c->shm, xb + yb) && px.region == NULL)
        return 1; /* small: bins are cheaper than a copy */
    const void *const inputs[2] = {x, with_y ? y : NULL};
    const kd_shm_place_t places[2] = {px, py};
    const size_t lens[2] = {xb, yb};
    int rc = kd_shm_stage(c, &lay, 2, inputs, places, lens);
    if (rc != 1)
        return rc == 0 ? 1 : rc;
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "spmv", (with_y ? 6 : 4) + (k > 1 ? 1 : 0));
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_double(&w, "alpha", alpha);
    if (k > 1)
        kd_w_kv_int(&w, "ncols", k);
    if (with_y) {
        kd_w_kv_double(&w, "beta", beta);
        kd_w_kv_ref(&w, "y", kd_shm_id(c, &py), py.offset, yb);
    }
    kd_w_kv_ref(&w, "x", kd_shm_id(c, &px), px.offset, xb);
    const int64_t out_id = kd_shm_id(c, &out);
    kd_w_kv_ref(&w, "out", out_id, out.offset, yb);
    kd_reply_t reply;
    if ((rc = kd_client_call(c, &w, msgid, NULL, &reply)) != KRYLOV_OK ||
        (rc = kd_check_ref(c, &reply, "y", out_id, out.offset, yb)) != KRYLOV_OK)
        return rc;
    if (out.region == NULL)
        memcpy(y, kd_shm_at(c, &out), yb);
    if (server_ms != NULL && kd_obj_double(kd_obj_get(reply.result, "time_ms"), server_ms) != 0)
        *server_ms = -1.0;
    kd_reply_destroy(&reply);
    c->shm.uses++;
    return KRYLOV_OK;
}

/*
 * matrix.put's values (count float64, sent as float32 when f32) through shared memory: *pv where
 * they are (a region of the caller's, float64) or where they were put in the arena (narrowed on
 * the way): 1; 0: as a bin; or an error code.
 */
static int kd_put_values_shm(krylov_client_t *c, const double *values, int64_t count, int f32,
                             size_t bytes, kd_shm_place_t *pv)
{
    if (!kd_cshm_on(&c->shm))
        return 0;
    kd_cshm_layout_t lay = {0};
    pv->region = f32 ? NULL : kd_shm_user(c, values, bytes, &pv->offset);
    if (pv->region != NULL)
        return 1;
    pv->offset = kd_cshm_layout_add(&lay, bytes);
    if (!kd_cshm_usable(&c->shm, bytes))
        return 0;
    const int rc = kd_shm_stage(c, &lay, 0, NULL, NULL, NULL);
    if (rc != 1)
        return rc;
    if (f32) {
        float *dst = (float *)(void *)kd_shm_at(c, pv);
        for (int64_t e = 0; e < count; e++)
            dst[e] = (float)values[e];
    } else {
        memcpy(kd_shm_at(c, pv), values, bytes);
    }
    return 1;
}

/* n float64 values as float32 in a new buffer (the caller frees it), NULL when memory is short:
 * float32 values travel as float32 (the wire's rule) and are hashed as the server keeps them. */
static float *kd_client_narrow(const double *values, int64_t n)
{
    float *out = malloc((size_t)(n > 0 ? n : 0) * sizeof(float) + 1);
    for (int64_t e = 0; out != NULL && e < n; e++)
        out[e] = (float)values[e];
    return out;
}

/* matrix.put of a shape and three arrays (two of int32, then the float64 values) of counts[i]
 * entries each, with the options. */
static int kd_put_arrays(krylov_client_t *c, int64_t rows, int64_t cols, const char *const names[3],
                         const void *const arrays[3], const int64_t counts[3],
                         const krylov_put_options_t *opt, krylov_matrix_info_t *info)
{
    /* The values travel in the dtype the matrix is kept in (the wire's rule): float32 ones are
     * narrowed here (sent as float64 bytes they were read as twice as many floats). */
    const int f32 = opt != NULL && opt->dtype != NULL && strcmp(opt->dtype, "float32") == 0;
    const size_t widths[3] = {4, 4, f32 ? 4 : 8};
    size_t bytes[3] = {0, 0, 0};
    for (int i = 0; i < 3; i++) {
        int rc = kd_check_count(c, counts[i], widths[i], &bytes[i]);
        if (rc != KRYLOV_OK)
            return rc;
    }
    kd_shm_place_t pv;
    const int shm = kd_put_values_shm(c, arrays[2], counts[2], f32, bytes[2], &pv);
    if (shm < 0)
        return shm;
    float *narrow = f32 && shm == 0 ? kd_client_narrow(arrays[2], counts[2]) : NULL;
    if (f32 && shm == 0 && narrow == NULL)
        return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory for %lld float32 values",
                              (long long)counts[2]);
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "matrix.put", 5 + kd_put_option_count(opt));
    kd_w_kv_int(&w, "rows", rows);
    kd_w_kv_int(&w, "cols", cols);
    for (int i = 0; i < 2; i++)
        kd_w_kv_bin(&w, names[i], arrays[i], bytes[i]);
    kd_put_options(&w, opt);
    if (shm == 1)
        kd_w_kv_ref(&w, names[2], kd_shm_id(c, &pv), pv.offset, bytes[2]);
    else /* the last value: sent from the caller's array */
        kd_client_tail(c, &w, names[2], narrow != NULL ? (const void *)narrow : arrays[2],
                       bytes[2]);
    const int rc = kd_finish_info(c, &w, msgid, info);
    free(narrow);
    return rc;
}

/*
 * The id the server would give these CSR arrays (docs/PROTOCOL.md, "Content id") into hex, or 0
 * when they are not canonical (a row's columns not strictly increasing, an index out of range,
 * bad row pointers: the server answers those itself) or memory is short.
 */
static int kd_client_local_id(int64_t rows, int64_t cols, const int32_t *indptr,
                              const int32_t *indices, const double *values, kd_dtype_t dtype,
                              char hex[KD_ID_HEX_LEN + 1])
{
    if (rows > KD_CSR_INDEX_MAX || cols > KD_CSR_INDEX_MAX || indptr[0] != 0)
        return 0;
    for (int64_t r = 0; r < rows; r++) {
        if (indptr[r + 1] < indptr[r])
            return 0;
        for (int32_t e = indptr[r]; e < indptr[r + 1]; e++)
            if (indices[e] < 0 || indices[e] >= cols ||
                (e > indptr[r] && indices[e] <= indices[e - 1]))
                return 0;
    }
    const int64_t nnz = indptr[rows];
    float *narrow = dtype == KD_DTYPE_F32 ? kd_client_narrow(values, nnz) : NULL;
    if (dtype == KD_DTYPE_F32 && narrow == NULL)
        return 0;
    kd_csr_t view = {.rows = rows,
                     .cols = cols,
                     .nnz = nnz,
                     .dtype = dtype,
                     .indptr = (int32_t *)indptr,
                     .indices = (int32_t *)indices,
                     .values = narrow != NULL ? (void *)narrow : (void *)values};
    uint8_t id[16];
    const int ok = kd_csr_hash(&view, id) == KD_OK;
    free(narrow);
    if (ok)
        kd_id_to_hex(id, hex);
    return ok;
}

int krylov_put_csr(krylov_client_t *c, int64_t rows, int64_t cols, const int32_t *indptr,
                   const int32_t *indices, const double *values, const krylov_put_options_t *opt,
                   krylov_matrix_info_t *info)
{
    if (rows < 0 || cols < 0)
        return kd_client_fail(c, KRYLOV_EBADREQ, "negative shape %lld x %lld", (long long)rows,
                              (long long)cols);
    /* Ask before sending: with no option that the stored copy could differ in, the same matrix
     * again costs a hash and a round trip instead of its arrays. */
    const char *dt = opt != NULL && opt->dtype != NULL ? opt->dtype : "float64";
    char hex[KD_ID_HEX_LEN + 1];
    if ((opt == NULL ||
         (opt->name == NULL && opt->format == NULL && !opt->pin && opt->reorder == NULL)) &&
        (strcmp(dt, "float64") == 0 || strcmp(dt, "float32") == 0) &&
        kd_client_local_id(rows, cols, indptr, indices, values,
                           strcmp(dt, "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64, hex) &&
        krylov_info(c, hex, info) == KRYLOV_OK) {
        info->created = 0;
        return KRYLOV_OK;
    }
    static const char *const names[3] = {"indptr", "indices", "values"};
    const void *const arrays[3] = {indptr, indices, values};
    const int64_t counts[3] = {rows + 1, indptr[rows], indptr[rows]};
    return kd_put_arrays(c, rows, cols, names, arrays, counts, opt, info);
}

/* The pattern hash of p as hex: the memo's when p is the pattern it kept, else computed (and p
 * kept, when there is memory for a copy). */
static int kd_client_pattern_hex(krylov_client_t *c, const kd_csr_t *p, char hex[KD_ID_HEX_LEN + 1])
{
    const size_t ptr_bytes = ((size_t)p->rows + 1) * sizeof(int32_t);
    const size_t idx_bytes = (size_t)p->nnz * sizeof(int32_t);
    if (c->memo.indptr != NULL && c->memo.rows == p->rows && c->memo.cols == p->cols &&
        c->memo.nnz == p->nnz && memcmp(c->memo.indptr, p->indptr, ptr_bytes) == 0 &&
        memcmp(c->memo.indices, p->indices, idx_bytes) == 0) {
        memcpy(hex, c->memo.hex, sizeof(c->memo.hex));
        return KRYLOV_OK;
    }
    uint8_t hash[16];
    if (kd_pattern_hash(p, hash) != KD_OK)
        return KRYLOV_ENOMEM;
    kd_id_to_hex(hash, hex);
    free(c->memo.indptr);
    free(c->memo.indices);
    c->memo.indptr = malloc(ptr_bytes);
    c->memo.indices = malloc(idx_bytes ? idx_bytes : 1);
    if (c->memo.indptr == NULL || c->memo.indices == NULL) { /* no memo: hash next time too */
        free(c->memo.indptr);
        free(c->memo.indices);
        c->memo.indptr = c->memo.indices = NULL;
        return KRYLOV_OK;
    }
    memcpy(c->memo.indptr, p->indptr, ptr_bytes);
    memcpy(c->memo.indices, p->indices, idx_bytes);
    c->memo.rows = p->rows;
    c->memo.cols = p->cols;
    c->memo.nnz = p->nnz;
    memcpy(c->memo.hex, hex, sizeof(c->memo.hex));
    return KRYLOV_OK;
}

int krylov_put_like(krylov_client_t *c, const char *like_id, int64_t rows, int64_t cols,
                    const int32_t *indptr, const int32_t *indices, const double *values,
                    const krylov_put_options_t *opt, krylov_matrix_info_t *info)
{
    if (like_id == NULL || strlen(like_id) != KD_ID_HEX_LEN)
        return kd_client_fail(c, KRYLOV_EBADREQ, "like: a matrix id of %d hex digits",
                              KD_ID_HEX_LEN);
    if (opt != NULL && (opt->format != NULL || opt->reorder != NULL))
        return kd_client_fail(c, KRYLOV_EBADREQ,
                              "with like, the format and the reordering are the like matrix's");
    if (rows < 0 || cols < 0 || rows >= INT32_MAX || cols > INT32_MAX || indptr[rows] < 0)
        return kd_client_fail(c, KRYLOV_EBADREQ, "shape %lld x %lld", (long long)rows,
                              (long long)cols);
    const kd_csr_t pattern = {.rows = rows,
                              .cols = cols,
                              .nnz = indptr[rows],
                              .indptr = (int32_t *)indptr,
                              .indices = (int32_t *)indices};
    char hex[KD_ID_HEX_LEN + 1];
    if (kd_client_pattern_hex(c, &pattern, hex) != KRYLOV_OK)
        return kd_client_fail(c, KRYLOV_ENOMEM, "hashing the pattern failed");
    const int f32 = opt != NULL && opt->dtype != NULL && strcmp(opt->dtype, "float32") == 0;
    size_t bytes = 0;
    int rc = kd_check_count(c, pattern.nnz, f32 ? 4 : 8, &bytes);
    if (rc != KRYLOV_OK)
        return rc;
    kd_shm_place_t pv;
    const int shm = kd_put_values_shm(c, values, pattern.nnz, f32, bytes, &pv);
    if (shm < 0)
        return shm;
    float *narrow = f32 && shm == 0 ? kd_client_narrow(values, pattern.nnz) : NULL;
    if (f32 && shm == 0 && narrow == NULL)
        return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory for %lld float32 values",
                              (long long)pattern.nnz);
    kd_writer_t w; /* format and reorder are NULL here: the options are name, dtype, pin */
    uint64_t msgid = kd_client_begin(c, &w, "matrix.put", 3 + kd_put_option_count(opt));
    kd_w_kv_str(&w, "like", like_id);
    kd_w_kv_str(&w, "pattern", hex);
    kd_put_options(&w, opt);
    if (shm == 1)
        kd_w_kv_ref(&w, "values", kd_shm_id(c, &pv), pv.offset, bytes);
    else /* the last value: sent from the caller's array */
        kd_client_tail(c, &w, "values",
                       narrow != NULL ? (const void *)narrow : (const void *)values, bytes);
    rc = kd_finish_info(c, &w, msgid, info);
    free(narrow);
    return rc;
}

int krylov_put_coo(krylov_client_t *c, int64_t rows, int64_t cols, int64_t nnz, const int32_t *row,
                   const int32_t *col, const double *values, const krylov_put_options_t *opt,
                   krylov_matrix_info_t *info)
{
    static const char *const names[3] = {"row", "col", "values"};
    const void *const arrays[3] = {row, col, values};
    const int64_t counts[3] = {nnz, nnz, nnz};
    return kd_put_arrays(c, rows, cols, names, arrays, counts, opt, info);
}

int krylov_put_mtx(krylov_client_t *c, const char *text, size_t len,
                   const krylov_put_options_t *opt, krylov_matrix_info_t *info)
{
    if (len > UINT32_MAX)
        return kd_client_fail(c, KRYLOV_ETOOLARGE, "Matrix Market text of %zu bytes is over 4 GiB",
                              len);
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "matrix.put", 1 + kd_put_option_count(opt));
    kd_w_kv_bin(&w, "mtx", text, len);
    kd_put_options(&w, opt);
    return kd_finish_info(c, &w, msgid, info);
}

int krylov_put_file(krylov_client_t *c, const char *path, const krylov_put_options_t *opt,
                    krylov_matrix_info_t *info)
{
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    int rc = kd_mtx_file_read(path, KRYLOV_MAX_FILE, &text, &len, &err);
    if (rc != KD_OK)
        return kd_client_fail(c, rc, "%s", err.message);
    rc = krylov_put_mtx(c, text, len, opt, info);
    free(text);
    return rc;
}

int krylov_multiply(krylov_client_t *c, const char *a, const char *b,
                    const krylov_multiply_options_t *opt, krylov_matrix_info_t *info,
                    krylov_multiply_stats_t *stats)
{
    krylov_multiply_options_t none = {0};
    if (opt == NULL)
        opt = &none;
    uint32_t n = 2 + (opt->transpose_a != 0) + (opt->name != NULL) + (opt->format != NULL) +
                 (opt->pin != 0) + (opt->reorder != NULL);
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "matrix.multiply", n);
    kd_w_kv_str(&w, "a", a);
    kd_w_kv_str(&w, "b", b);
    if (opt->transpose_a)
        kd_w_kv_bool(&w, "transpose_a", 1);
    if (opt->name != NULL)
        kd_w_kv_str(&w, "name", opt->name);
    if (opt->format != NULL)
        kd_w_kv_str(&w, "format", opt->format);
    if (opt->pin)
        kd_w_kv_bool(&w, "pin", 1);
    if (opt->reorder != NULL)
        kd_w_kv_str(&w, "reorder", opt->reorder);
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    if (reply.result == NULL || reply.result->type != MSGPACK_OBJECT_MAP)
        return kd_result_missing(c, &reply, "matrix info");
    if (info != NULL)
        kd_parse_info(reply.result, info);
    if (stats != NULL) {
        const msgpack_object *s = kd_obj_get(reply.result, "spgemm");
        memset(stats, 0, sizeof(*stats));
        kd_obj_int64(kd_obj_get(s, "products"), &stats->products);
        kd_obj_int64(kd_obj_get(s, "nnz"), &stats->nnz);
        kd_obj_double(kd_obj_get(s, "time_ms"), &stats->time_ms);
    }
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

static int kd_id_request(krylov_client_t *c, const char *method, const char *id, int pinned,
                         kd_reply_t *reply)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, method, pinned >= 0 ? 2 : 1);
    kd_w_kv_str(&w, "id", id);
    if (pinned >= 0)
        kd_w_kv_bool(&w, "pinned", pinned);
    return kd_client_call(c, &w, msgid, NULL, reply);
}

int krylov_info(krylov_client_t *c, const char *id, krylov_matrix_info_t *info)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "matrix.info", 1);
    kd_w_kv_str(&w, "id", id);
    return kd_finish_info(c, &w, msgid, info);
}

int krylov_pin(krylov_client_t *c, const char *id, int pinned)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "matrix.pin", 2);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bool(&w, "pinned", pinned != 0);
    return kd_finish_info(c, &w, msgid, NULL);
}

int krylov_auth(krylov_client_t *c, const char *name, const char *token, char *role,
                size_t role_cap)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "auth", 2);
    kd_w_kv_str(&w, "name", name);
    kd_w_kv_str(&w, "token", token);
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    if (role != NULL && role_cap > 0)
        kd_copy_str(kd_obj_get(reply.result, "role"), role, role_cap);
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

int krylov_drop(krylov_client_t *c, const char *id)
{
    kd_reply_t reply;
    int rc = kd_id_request(c, "matrix.drop", id, -1, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

int krylov_list(krylov_client_t *c, krylov_matrix_info_t **infos, size_t *count)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "matrix.list", 0);
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    const msgpack_object *list = kd_obj_get(reply.result, "matrices");
    if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY)
        return kd_result_missing(c, &reply, "matrices");
    size_t n = list->via.array.size;
    krylov_matrix_info_t *out = calloc(n ? n : 1, sizeof(*out));
    if (out == NULL) {
        kd_reply_destroy(&reply);
        return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n; i++)
        kd_parse_info(&list->via.array.ptr[i], &out[i]);
    kd_reply_destroy(&reply);
    *infos = out;
    *count = n;
    return KRYLOV_OK;
}

/* Receive the next call's bin `field` of len bytes straight into dst (kd_client_recv_sink). */
static void kd_client_sink(krylov_client_t *c, const char *field, void *dst, size_t len)
{
    c->sink.dst = dst;
    c->sink.len = len;
    c->sink.field = field;
}

/* Copy a float64 bin result of exactly n values into dst (there already when it was the call's
 * sink: its bin in the reply is then empty). */
static int kd_copy_vector(krylov_client_t *c, kd_reply_t *reply, const char *field, double *dst,
                          int64_t n)
{
    const void *data;
    size_t len;
    const int filled = c->sink.filled && strcmp(c->sink.field, field) == 0;
    c->sink.filled = 0;
    if (kd_obj_bytes(kd_obj_get(reply->result, field), &data, &len) != 0 ||
        len != (filled ? 0 : (size_t)n * sizeof(double)))
        return kd_result_missing(c, reply, field);
    if (!filled)
        memcpy(dst, data, len);
    return KRYLOV_OK;
}

int krylov_spmv(krylov_client_t *c, const char *id, double alpha, const double *x, int64_t nx,
                double beta, double *y, int64_t ny)
{
    return krylov_spmv_timed(c, id, alpha, x, nx, beta, y, ny, NULL);
}

int krylov_spmv_timed(krylov_client_t *c, const char *id, double alpha, const double *x, int64_t nx,
                      double beta, double *y, int64_t ny, double *server_ms)
{
    return krylov_spmm(c, id, 1, alpha, x, nx, beta, y, ny, server_ms);
}

int krylov_spmm(krylov_client_t *c, const char *id, int64_t k, double alpha, const double *x,
                int64_t nx, double beta, double *y, int64_t ny, double *server_ms)
{
    size_t xb = 0, yb = 0;
    int64_t xn = 0, yn = 0;
    if (k < 1 || __builtin_mul_overflow(nx, k, &xn) || __builtin_mul_overflow(ny, k, &yn))
        return kd_client_fail(c, KRYLOV_EBADREQ, "spmm: %lld columns of %lld and %lld values",
                              (long long)k, (long long)nx, (long long)ny);
    int rc = kd_check_count(c, xn, 8, &xb);
    if (rc == KRYLOV_OK)
        rc = kd_check_count(c, yn, 8, &yb);
    if (rc != KRYLOV_OK)
        return rc;
    if ((rc = kd_spmm_shm(c, id, k, alpha, x, xb, beta, y, yb, server_ms)) != 1)
        return rc;
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "spmv", (beta != 0.0 ? 5 : 3) + (k > 1 ? 1 : 0));
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_double(&w, "alpha", alpha);
    if (k > 1)
        kd_w_kv_int(&w, "ncols", k);
    if (beta != 0.0) {
        kd_w_kv_double(&w, "beta", beta);
        kd_w_kv_bin(&w, "y", y, yb);
    }
    kd_client_tail(c, &w, "x", x, xb); /* the last value: sent from the caller's array */
    kd_client_sink(c, "y", y, yb);     /* the answer: received into the caller's array */
    kd_reply_t reply;
    rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    rc = kd_copy_vector(c, &reply, "y", y, yn);
    if (rc != KRYLOV_OK)
        return rc;
    if (server_ms != NULL && kd_obj_double(kd_obj_get(reply.result, "time_ms"), server_ms) != 0)
        *server_ms = -1.0;
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

#define KD_CLIENT_OPTIONS_MAX 8

/* "name=value,name=value" into names and values (at most KD_CLIENT_OPTIONS_MAX). */
static int kd_parse_options(krylov_client_t *c, const char *list, char names[][32], double *values,
                            int *count)
{
    *count = 0;
    const char *p = list;
    while (*p != '\0') {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (end == NULL)
            end = p + strlen(p);
        if (eq == NULL || eq > end || eq == p || eq - p >= 32 || *count == KD_CLIENT_OPTIONS_MAX)
            return kd_client_fail(c, KRYLOV_EBADREQ,
                                  "preconditioner options '%s': expected name=value[,name=value]"
                                  " (at most %d)",
                                  list, KD_CLIENT_OPTIONS_MAX);
        char *stop = NULL;
        const double v = strtod(eq + 1, &stop);
        if (stop != end || eq + 1 == end)
            return kd_client_fail(c, KRYLOV_EBADREQ,
                                  "preconditioner options '%s': '%.*s' is not a number", list,
                                  (int)(end - eq - 1), eq + 1);
        memcpy(names[*count], p, (size_t)(eq - p));
        names[*count][eq - p] = '\0';
        values[(*count)++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return KRYLOV_OK;
}

void krylov_solve_options_init(krylov_solve_options_t *opt)
{
    memset(opt, 0, sizeof(*opt));
    opt->method = "cg";
    opt->rtol = 1e-8;
    opt->atol = 0.0;
    opt->maxiter = -1;
    opt->nrhs = 1;
}

void krylov_solve_result_free(krylov_solve_result_t *result)
{
    if (result == NULL)
        return;
    free(result->history);
    result->history = NULL;
    result->history_len = 0;
}

/* Element k of a field that is a scalar (nrhs == 1) or a list of nrhs. */
static const msgpack_object *kd_rhs_field(const msgpack_object *result, const char *key,
                                          int64_t nrhs, int64_t k)
{
    const msgpack_object *o = kd_obj_get(result, key);
    if (o == NULL || nrhs == 1)
        return o;
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != (uint32_t)nrhs)
        return NULL;
    return &o->via.array.ptr[k];
}

static int kd_parse_history(const msgpack_object *h, krylov_solve_result_t *r)
{
    if (h == NULL || h->type != MSGPACK_OBJECT_ARRAY)
        return 0;
    uint32_t n = h->via.array.size;
    r->history = malloc((n ? n : 1) * sizeof(double));
    if (r->history == NULL)
        return -1;
    r->history_len = n;
    for (uint32_t i = 0; i < n; i++)
        kd_obj_double(&h->via.array.ptr[i], &r->history[i]);
    return 0;
}

/* Where solve's b, x0 and x go in shared memory (b staged): 1; 0: as bins; or an error code. */
static int kd_solve_shm_plan(krylov_client_t *c, const double *b, const double *x0, double *x,
                             size_t bytes, kd_shm_place_t *pb, kd_shm_place_t *p0,
                             kd_shm_place_t *px)
{
    if (!kd_cshm_on(&c->shm))
        return 0;
    kd_cshm_layout_t lay = {0};
    kd_shm_place(c, &lay, b, bytes, pb);
    memset(p0, 0, sizeof(*p0));
    if (x0 != NULL)
        kd_shm_place(c, &lay, x0, bytes, p0);
    px->region = kd_shm_user(c, x, bytes, &px->offset);
    if (px->region != NULL && (kd_shm_overlap(px, bytes, pb, bytes) ||
                               (x0 != NULL && kd_shm_overlap(px, bytes, p0, bytes))))
        px->region = NULL;
    if (px->region == NULL)
        px->offset = kd_cshm_layout_add(&lay, bytes);
    if (lay.bytes > 0 && pb->region == NULL && !kd_cshm_usable(&c->shm, 2 * bytes))
        return 0;
    const void *const inputs[2] = {b, x0};
    const kd_shm_place_t places[2] = {*pb, *p0};
    const size_t lens[2] = {bytes, bytes};
    return kd_shm_stage(c, &lay, 2, inputs, places, lens);
}

int krylov_solve(krylov_client_t *c, const char *id, const double *b, int64_t n,
                 const krylov_solve_options_t *opt, double *x, krylov_solve_result_t *result)
{
    krylov_solve_options_t defaults;
    if (opt == NULL) {
        krylov_solve_options_init(&defaults);
        opt = &defaults;
    }
    int64_t nrhs = opt->nrhs > 0 ? opt->nrhs : 1;
    int64_t total;
    size_t bytes = 0;
    if (kd_mul_overflow_i64(n, nrhs, &total))
        return kd_client_fail(c, KRYLOV_ETOOLARGE, "n * nrhs overflows");
    int rc = kd_check_count(c, total, 8, &bytes);
    if (rc != KRYLOV_OK)
        return rc;
    char names[KD_CLIENT_OPTIONS_MAX][32];
    double values[KD_CLIENT_OPTIONS_MAX];
    int noptions = 0;
    if (opt->preconditioner_options != NULL &&
        (rc = kd_parse_options(c, opt->preconditioner_options, names, values, &noptions)) !=
            KRYLOV_OK)
        return rc;
    kd_shm_place_t pb, p0, px;
    const int shm = kd_solve_shm_plan(c, b, opt->x0, x, bytes, &pb, &p0, &px);
    if (shm < 0)
        return shm;
    uint32_t nparams = 6 + (shm == 1) + (opt->maxiter >= 0) + (nrhs > 1) + (opt->check_every > 0) +
                       (opt->x0 != NULL) + (opt->timeout_ms > 0) + (opt->progress != NULL) +
                       (opt->preconditioner != NULL) + (noptions > 0) + (opt->restart != 0);
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "solve", nparams);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_str(&w, "method", opt->method != NULL ? opt->method : "cg");
    kd_w_kv_double(&w, "rtol", opt->rtol);
    kd_w_kv_double(&w, "atol", opt->atol);
    kd_w_kv_bool(&w, "history", opt->history);
    if (opt->maxiter >= 0)
        kd_w_kv_int(&w, "maxiter", opt->maxiter);
    if (nrhs > 1)
        kd_w_kv_int(&w, "nrhs", nrhs);
    if (opt->check_every > 0)
        kd_w_kv_int(&w, "check_every", opt->check_every);
    if (opt->x0 != NULL && shm == 1)
        kd_w_kv_ref(&w, "x0", kd_shm_id(c, &p0), p0.offset, bytes);
    else if (opt->x0 != NULL)
        kd_w_kv_bin(&w, "x0", opt->x0, bytes);
    if (opt->timeout_ms > 0)
        kd_w_kv_int(&w, "timeout_ms", opt->timeout_ms);
    if (opt->progress != NULL)
        kd_w_kv_bool(&w, "progress", 1);
    if (opt->preconditioner != NULL)
        kd_w_kv_str(&w, "preconditioner", opt->preconditioner);
    if (opt->restart != 0) /* the server checks the range */
        kd_w_kv_int(&w, "restart", opt->restart);
    if (noptions > 0) {
        kd_w_str(&w, "preconditioner_options");
        kd_w_map(&w, (uint32_t)noptions);
        for (int i = 0; i < noptions; i++)
            kd_w_kv_double(&w, names[i], values[i]);
    }
    const int64_t out_id = shm == 1 ? kd_shm_id(c, &px) : 0;
    if (shm == 1) {
        kd_w_kv_ref(&w, "b", kd_shm_id(c, &pb), pb.offset, bytes);
        kd_w_kv_ref(&w, "out", out_id, px.offset, bytes);
    } else {
        kd_client_tail(c, &w, "b", b, bytes); /* the last value: sent from the caller's array */
        kd_client_sink(c, "x", x, bytes);     /* the answer: received into the caller's array */
    }
    kd_reply_t reply;
    rc = kd_client_call(c, &w, msgid, opt, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    if (shm == 1) {
        if ((rc = kd_check_ref(c, &reply, "x", out_id, px.offset, bytes)) != KRYLOV_OK)
            return rc;
        if (px.region == NULL)
            memcpy(x, kd_shm_at(c, &px), bytes);
        c->shm.uses++;
    } else if ((rc = kd_copy_vector(c, &reply, "x", x, total)) != KRYLOV_OK) {
        return rc;
    }
    double time_ms = 0.0;
    kd_obj_double(kd_obj_get(reply.result, "time_ms"), &time_ms);
    const msgpack_object *hist = kd_obj_get(reply.result, "history");
    for (int64_t k = 0; k < nrhs; k++) {
        krylov_solve_result_t *r = &result[k];
        memset(r, 0, sizeof(*r));
        r->time_ms = time_ms;
        if (kd_obj_str_copy(kd_rhs_field(reply.result, "status", nrhs, k), r->status,
                            sizeof(r->status)) != 0 ||
            kd_obj_int64(kd_rhs_field(reply.result, "iterations", nrhs, k), &r->iterations) != 0 ||
            kd_obj_double(kd_rhs_field(reply.result, "residual_norm", nrhs, k),
                          &r->residual_norm) != 0 ||
            kd_obj_double(kd_rhs_field(reply.result, "relative_residual", nrhs, k),
                          &r->relative_residual) != 0) {
            for (int64_t j = 0; j < k; j++)
                krylov_solve_result_free(&result[j]);
            return kd_result_missing(c, &reply, "status");
        }
        kd_copy_str(kd_rhs_field(reply.result, "message", nrhs, k), r->message, sizeof(r->message));
        kd_copy_str(kd_obj_get(reply.result, "method"), r->method, sizeof(r->method));
        kd_copy_str(kd_obj_get(reply.result, "preconditioner"), r->preconditioner,
                    sizeof(r->preconditioner));
        const msgpack_object *h = hist;
        if (h != NULL && nrhs > 1)
            h = (h->type == MSGPACK_OBJECT_ARRAY && h->via.array.size == (uint32_t)nrhs)
                    ? &h->via.array.ptr[k]
                    : NULL;
        if (kd_parse_history(h, r) != 0) {
            kd_reply_destroy(&reply);
            return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory");
        }
    }
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

/* Item k of a solve.batch reply into results[k] and items[k].x. */
static int kd_many_item(krylov_client_t *c, kd_reply_t *reply, const msgpack_object *o,
                        const krylov_solve_item_t *item, krylov_item_result_t *r)
{
    memset(r, 0, sizeof(*r));
    if (kd_obj_str_copy(kd_obj_get(o, "status"), r->status, sizeof(r->status)) != 0)
        return kd_result_missing(c, reply, "items[].status");
    kd_copy_str(kd_obj_get(o, "message"), r->message, sizeof(r->message));
    if (strcmp(r->status, "error") == 0) {
        kd_copy_str(kd_obj_get(o, "error"), r->error, sizeof(r->error));
        r->residual_norm = r->relative_residual = NAN;
        return KRYLOV_OK;
    }
    const void *data;
    size_t len;
    if (kd_obj_int64(kd_obj_get(o, "iterations"), &r->iterations) != 0 ||
        kd_obj_double(kd_obj_get(o, "residual_norm"), &r->residual_norm) != 0 ||
        kd_obj_double(kd_obj_get(o, "relative_residual"), &r->relative_residual) != 0 ||
        kd_obj_bytes(kd_obj_get(o, "x"), &data, &len) != 0 ||
        len != (size_t)item->n * sizeof(double))
        return kd_result_missing(c, reply, "items[].x");
    memcpy(item->x, data, len);
    return KRYLOV_OK;
}

/* solve.batch's b and x0 in shared memory (places[2k], places[2k + 1]; those outside a caller's
 * region copied into the arena): 1; 0: as bins; or an error code. */
static int kd_many_shm_plan(krylov_client_t *c, const krylov_solve_item_t *items, size_t count,
                            kd_shm_place_t *places)
{
    if (!kd_cshm_on(&c->shm))
        return 0;
    kd_cshm_layout_t lay = {0};
    size_t total = 0;
    for (size_t k = 0; k < count; k++) {
        const size_t bytes = (size_t)items[k].n * sizeof(double);
        kd_shm_place(c, &lay, items[k].b, bytes, &places[2 * k]);
        memset(&places[2 * k + 1], 0, sizeof(places[0]));
        if (items[k].x0 != NULL)
            kd_shm_place(c, &lay, items[k].x0, bytes, &places[2 * k + 1]);
        total += bytes * (items[k].x0 != NULL ? 2 : 1);
    }
    if (lay.bytes > 0 && !kd_cshm_usable(&c->shm, total))
        return 0;
    const int rc = kd_shm_stage(c, &lay, 0, NULL, NULL, NULL);
    if (rc != 1)
        return rc;
    for (size_t k = 0; k < count; k++) {
        const size_t bytes = (size_t)items[k].n * sizeof(double);
        if (places[2 * k].region == NULL)
            memcpy(kd_shm_at(c, &places[2 * k]), items[k].b, bytes);
        if (items[k].x0 != NULL && places[2 * k + 1].region == NULL)
            memcpy(kd_shm_at(c, &places[2 * k + 1]), items[k].x0, bytes);
    }
    return 1;
}

int krylov_solve_many(krylov_client_t *c, const krylov_solve_item_t *items, size_t count,
                      const krylov_solve_options_t *opt, krylov_item_result_t *results,
                      krylov_many_stats_t *stats)
{
    krylov_solve_options_t defaults;
    if (opt == NULL) {
        krylov_solve_options_init(&defaults);
        opt = &defaults;
    }
    if (count == 0 || count > UINT32_MAX)
        return kd_client_fail(c, KRYLOV_EBADREQ, "solve_many takes 1 or more items, not %zu",
                              count);
    for (size_t k = 0; k < count; k++) {
        size_t bytes;
        int rc = kd_check_count(c, items[k].n, 8, &bytes);
        if (rc != KRYLOV_OK)
            return rc;
    }
    if (count > SIZE_MAX / (2 * sizeof(kd_shm_place_t)))
        return kd_client_fail(c, KRYLOV_ETOOLARGE, "solve_many: %zu items", count);
    kd_shm_place_t *places = malloc(2 * count * sizeof(*places));
    if (places == NULL)
        return kd_client_fail(c, KRYLOV_ENOMEM, "out of memory");
    const int shm = kd_many_shm_plan(c, items, count, places);
    if (shm < 0) {
        free(places);
        return shm;
    }
    const uint32_t nparams = 4 + (opt->maxiter >= 0) + (opt->timeout_ms > 0) +
                             (opt->preconditioner != NULL) + (opt->restart != 0);
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "solve.batch", nparams);
    kd_w_str(&w, "items");
    kd_w_array(&w, (uint32_t)count);
    for (size_t k = 0; k < count; k++) {
        const size_t bytes = (size_t)items[k].n * sizeof(double);
        kd_w_map(&w, items[k].x0 != NULL ? 3 : 2);
        kd_w_kv_str(&w, "id", items[k].id);
        if (shm == 1)
            kd_w_kv_ref(&w, "b", kd_shm_id(c, &places[2 * k]), places[2 * k].offset, bytes);
        else
            kd_w_kv_bin(&w, "b", items[k].b, bytes);
        if (items[k].x0 != NULL && shm == 1)
            kd_w_kv_ref(&w, "x0", kd_shm_id(c, &places[2 * k + 1]), places[2 * k + 1].offset,
                        bytes);
        else if (items[k].x0 != NULL)
            kd_w_kv_bin(&w, "x0", items[k].x0, bytes);
    }
    free(places);
    kd_w_kv_str(&w, "method", opt->method != NULL ? opt->method : "cg");
    kd_w_kv_double(&w, "rtol", opt->rtol);
    kd_w_kv_double(&w, "atol", opt->atol);
    if (opt->maxiter >= 0)
        kd_w_kv_int(&w, "maxiter", opt->maxiter);
    if (opt->timeout_ms > 0)
        kd_w_kv_int(&w, "timeout_ms", opt->timeout_ms);
    if (opt->preconditioner != NULL)
        kd_w_kv_str(&w, "preconditioner", opt->preconditioner);
    if (opt->restart != 0)
        kd_w_kv_int(&w, "restart", opt->restart);
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, opt, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    c->shm.uses += shm == 1;
    const msgpack_object *list = kd_obj_get(reply.result, "items");
    if (list == NULL || list->type != MSGPACK_OBJECT_ARRAY || list->via.array.size != count)
        return kd_result_missing(c, &reply, "items");
    for (size_t k = 0; k < count; k++)
        if ((rc = kd_many_item(c, &reply, &list->via.array.ptr[k], &items[k], &results[k])) !=
            KRYLOV_OK)
            return rc;
    if (stats != NULL) {
        memset(stats, 0, sizeof(*stats));
        kd_obj_int64(kd_obj_get(reply.result, "converged"), &stats->converged);
        kd_obj_int64(kd_obj_get(reply.result, "failed"), &stats->failed);
        kd_obj_int64(kd_obj_get(reply.result, "groups"), &stats->groups);
        kd_obj_int64(kd_obj_get(reply.result, "launches"), &stats->launches);
        kd_obj_double(kd_obj_get(reply.result, "time_ms"), &stats->time_ms);
    }
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

int krylov_status(krylov_client_t *c, krylov_server_status_t *st)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "server.status", 0);
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    const msgpack_object *r = reply.result;
    memset(st, 0, sizeof(*st));
    kd_copy_str(kd_obj_get(r, "version"), st->version, sizeof(st->version));
    const msgpack_object *d = kd_obj_get(r, "device");
    kd_copy_str(kd_obj_get(d, "name"), st->device, sizeof(st->device));
    kd_copy_str(kd_obj_get(d, "type"), st->device_type, sizeof(st->device_type));
    kd_copy_str(kd_obj_get(d, "platform"), st->platform, sizeof(st->platform));
    kd_obj_int64(kd_obj_get(d, "global_mem_bytes"), &st->global_mem_bytes);
    kd_obj_int64(kd_obj_get(r, "matrices"), &st->matrices);
    kd_obj_int64(kd_obj_get(r, "device_bytes_used"), &st->device_bytes_used);
    kd_obj_int64(kd_obj_get(r, "requests"), &st->requests);
    kd_obj_int64(kd_obj_get(r, "errors"), &st->errors);
    kd_obj_int64(kd_obj_get(r, "connections"), &st->connections);
    kd_obj_int64(kd_obj_get(r, "queue_depth"), &st->queue_depth);
    kd_obj_double(kd_obj_get(r, "uptime_s"), &st->uptime_s);
    kd_copy_str(kd_obj_get(d, "vendor"), st->vendor, sizeof(st->vendor));
    kd_copy_str(kd_obj_get(d, "version"), st->device_version, sizeof(st->device_version));
    kd_obj_int64(kd_obj_get(d, "compute_units"), &st->compute_units);
    kd_obj_bool(kd_obj_get(d, "fp64"), &st->fp64);
    kd_obj_int64(kd_obj_get(r, "shm_regions"), &st->shm_regions);
    kd_obj_int64(kd_obj_get(r, "shm_mapped_bytes"), &st->shm_mapped_bytes);
    const msgpack_object *by = kd_obj_get(r, "requests_by_method");
    if (by != NULL && by->type == MSGPACK_OBJECT_MAP)
        for (uint32_t i = 0; i < by->via.map.size && st->nmethods < KRYLOV_MAX_METHODS; i++) {
            krylov_method_count_t *mc = &st->by_method[st->nmethods];
            if (kd_obj_str_copy(&by->via.map.ptr[i].key, mc->method, sizeof(mc->method)) != 0 ||
                kd_obj_int64(&by->via.map.ptr[i].val, &mc->requests) != 0)
                continue;
            st->nmethods++;
        }
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}

int krylov_warm_status(krylov_client_t *c, int64_t wait_ms, krylov_warm_status_t *out)
{
    kd_writer_t w;
    uint64_t msgid = kd_client_begin(c, &w, "server.status", wait_ms < 0 ? 0 : 1 + (wait_ms > 0));
    if (wait_ms >= 0)
        kd_w_kv_bool(&w, "wait_warm", 1);
    if (wait_ms > 0)
        kd_w_kv_int(&w, "timeout_ms", wait_ms);
    kd_reply_t reply;
    int rc = kd_client_call(c, &w, msgid, NULL, &reply);
    if (rc != KRYLOV_OK)
        return rc;
    const msgpack_object *warm = kd_obj_get(reply.result, "warm_up");
    if (warm == NULL || warm->type != MSGPACK_OBJECT_MAP)
        return kd_result_missing(c, &reply, "warm_up");
    memset(out, 0, sizeof(*out));
    kd_copy_str(kd_obj_get(warm, "state"), out->state, sizeof(out->state));
    kd_obj_int64(kd_obj_get(warm, "total"), &out->total);
    kd_obj_int64(kd_obj_get(warm, "built"), &out->built);
    kd_obj_int64(kd_obj_get(warm, "failed"), &out->failed);
    kd_obj_int64(kd_obj_get(warm, "pending_count"), &out->pending);
    kd_obj_double(kd_obj_get(warm, "elapsed_ms"), &out->elapsed_ms);
    const msgpack_object *building = kd_obj_get(warm, "building");
    if (building != NULL && building->type == MSGPACK_OBJECT_ARRAY)
        for (uint32_t i = 0; i < building->via.array.size; i++) {
            char one[160];
            kd_copy_str(&building->via.array.ptr[i], one, sizeof(one));
            size_t used = strlen(out->building);
            snprintf(out->building + used, sizeof(out->building) - used, "%s%s",
                     used > 0 ? ", " : "", one);
        }
    kd_reply_destroy(&reply);
    return KRYLOV_OK;
}
