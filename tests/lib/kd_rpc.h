/*
 * A raw msgpack-rpc connection for end-to-end tests and the load generator: write any request
 * (or any bytes), read whatever comes back — responses in any order, notifications, or the
 * connection closing — with a timeout, and read fields of the result. Unlike libkrylov it can
 * pipeline requests and see every message the server sends, so tests can check that each request
 * is answered exactly once.
 */
#ifndef KD_TEST_RPC_H
#define KD_TEST_RPC_H

#include "common/csr.h"
#include "common/clock.h"
#include "protocol/frame.h"
#include "protocol/object.h"
#include "protocol/writer.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct kd_rpc {
    int fd;
    kd_frame_t *frame;
} kd_rpc_t;

enum {
    KD_RPC_RESPONSE = 1,
    KD_RPC_NOTIFICATION = 2,
    KD_RPC_CLOSED = 0,   /* the server closed the connection (or reset it) */
    KD_RPC_TIMEOUT = -1, /* nothing within the timeout */
    KD_RPC_GARBAGE = -2, /* bytes that are not a msgpack-rpc response or notification */
};

typedef struct kd_rpc_msg {
    int kind;
    uint64_t msgid;
    const msgpack_object *error;  /* response: NULL on success */
    const msgpack_object *result; /* response: NULL on error */
    const msgpack_object *params; /* notification */
    char method[64];              /* notification */
    char code[32];                /* error code, "" on success */
    char message[512];            /* error message */
    void *buf;
    msgpack_unpacked up;
    int unpacked;
} kd_rpc_msg_t;

static inline void kd_rpc_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* A bare TCP socket connected to 127.0.0.1:port (TCP_NODELAY), for tests that write raw bytes;
 * -1 on failure. */
static inline int kd_rpc_socket(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

/* The first bytes of a hand-made matrix.put request, [0, msgid, "matrix.put", [{"mtx": ...,
 * into msg (room for 20 bytes); the caller appends the value's header. Returns the length. */
static inline size_t kd_rpc_put_mtx_prefix(unsigned char *msg, uint8_t msgid)
{
    /* "matrix.put" (fixstr 10), params: array of 1, map of 1, key "mtx" (fixstr 3) */
    static const unsigned char call[] = {0xaa, 'm', 'a',  't',  'r',  'i', 'x', '.', 'p',
                                         'u',  't', 0x91, 0x81, 0xa3, 'm', 't', 'x'};
    msg[0] = 0x94;  /* array of 4 */
    msg[1] = 0x00;  /* request */
    msg[2] = msgid; /* a positive fixint */
    memcpy(msg + 3, call, sizeof(call));
    return 3 + sizeof(call);
}

/* Connect to 127.0.0.1:port. Returns 0 or -1. */
static inline int kd_rpc_connect(kd_rpc_t *r, int port)
{
    memset(r, 0, sizeof(*r));
    r->fd = kd_rpc_socket(port);
    if (r->fd < 0)
        return -1;
    kd_frame_limits_t lim = {
        .max_message = (size_t)1 << 30, .max_elements = 1 << 24, .max_depth = 32};
    if (kd_frame_new(&lim, &r->frame) != 0) {
        close(r->fd);
        r->fd = -1;
        return -1;
    }
    return 0;
}

static inline void kd_rpc_close(kd_rpc_t *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    kd_frame_free(r->frame);
    r->frame = NULL;
}

/* Send all of it; 0, or -1 when the connection is gone. */
static inline int kd_rpc_send_raw(kd_rpc_t *r, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(r->fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Send what the writer holds (and reset it). */
static inline int kd_rpc_send(kd_rpc_t *r, kd_writer_t *w)
{
    size_t len;
    void *bytes = kd_writer_release(w, &len);
    if (bytes == NULL)
        return -1;
    int rc = kd_rpc_send_raw(r, bytes, len);
    free(bytes);
    return rc;
}

/* Begin a request with one params map of npairs entries; the caller writes the pairs. */
static inline void kd_rpc_begin(kd_writer_t *w, uint64_t msgid, const char *method, uint32_t npairs)
{
    kd_writer_init(w);
    kd_w_request_begin(w, msgid, method);
    kd_w_array(w, 1);
    kd_w_map(w, npairs);
}

static inline void kd_rpc_msg_free(kd_rpc_msg_t *m)
{
    if (m->unpacked)
        msgpack_unpacked_destroy(&m->up);
    free(m->buf);
    m->buf = NULL;
    m->unpacked = 0;
}

/* The next message, waiting at most timeout_ms. Free it with kd_rpc_msg_free (always safe). */
static inline int kd_rpc_read(kd_rpc_t *r, int timeout_ms, kd_rpc_msg_t *m)
{
    memset(m, 0, sizeof(*m));
    double deadline = kd_clock_ms() + (timeout_ms > 0 ? timeout_ms : 0);
    for (;;) {
        kd_frame_event_t ev;
        kd_frame_kind_t kind = kd_frame_next(r->frame, &ev);
        if (kind == KD_FRAME_MESSAGE) {
            m->buf = ev.data;
            msgpack_unpacked_init(&m->up);
            m->unpacked = 1;
            size_t off = 0;
            kd_response_view_t resp;
            kd_notification_view_t note;
            if (msgpack_unpack_next(&m->up, ev.data, ev.len, &off) != MSGPACK_UNPACK_SUCCESS)
                return m->kind = KD_RPC_GARBAGE;
            int k = kd_obj_parse_message(&m->up.data, &resp, &note);
            if (k == 1) {
                m->kind = KD_RPC_RESPONSE;
                m->msgid = resp.msgid;
                m->error = resp.error;
                m->result = resp.result;
                if (resp.error != NULL) {
                    kd_obj_str_copy(kd_obj_get(resp.error, "code"), m->code, sizeof(m->code));
                    kd_obj_str_copy(kd_obj_get(resp.error, "message"), m->message,
                                    sizeof(m->message));
                }
                return m->kind;
            }
            if (k == 2) {
                m->kind = KD_RPC_NOTIFICATION;
                snprintf(m->method, sizeof(m->method), "%.*s", (int)note.method_len, note.method);
                m->params = note.params;
                return m->kind;
            }
            return m->kind = KD_RPC_GARBAGE;
        }
        if (kind != KD_FRAME_NEED_MORE)
            return m->kind = KD_RPC_GARBAGE;
        double now = kd_clock_ms();
        struct pollfd p = {.fd = r->fd, .events = POLLIN};
        int n = poll(&p, 1, now >= deadline ? 0 : (int)(deadline - now)); /* 0: just look */
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return m->kind = KD_RPC_TIMEOUT;
        char *space;
        size_t room;
        if (kd_frame_reserve(r->frame, 1 << 16, &space, &room) != 0)
            return m->kind = KD_RPC_GARBAGE;
        ssize_t got = recv(r->fd, space, room, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return m->kind = KD_RPC_CLOSED;
        kd_frame_commit(r->frame, (size_t)got);
    }
}

/* Read until the response to msgid (notifications and other responses are dropped). */
static inline int kd_rpc_wait(kd_rpc_t *r, uint64_t msgid, int timeout_ms, kd_rpc_msg_t *m)
{
    double deadline = kd_clock_ms() + timeout_ms;
    for (;;) {
        double now = kd_clock_ms();
        int left = now >= deadline ? 0 : (int)(deadline - now);
        int kind = kd_rpc_read(r, left, m);
        if (kind != KD_RPC_RESPONSE && kind != KD_RPC_NOTIFICATION)
            return kind;
        if (kind == KD_RPC_RESPONSE && m->msgid == msgid)
            return kind;
        kd_rpc_msg_free(m);
    }
}

/* Send and wait for the answer. */
static inline int kd_rpc_call(kd_rpc_t *r, kd_writer_t *w, uint64_t msgid, int timeout_ms,
                              kd_rpc_msg_t *m)
{
    memset(m, 0, sizeof(*m));
    if (kd_rpc_send(r, w) != 0)
        return m->kind = KD_RPC_CLOSED;
    return kd_rpc_wait(r, msgid, timeout_ms, m);
}

/* o[k1][k2] as an integer (k2 may be NULL), or `missing`. */
static inline int64_t kd_rpc_int(const msgpack_object *o, const char *k1, const char *k2,
                                 int64_t missing)
{
    const msgpack_object *v = kd_obj_get(o, k1);
    if (k2 != NULL)
        v = kd_obj_get(v, k2);
    int64_t out;
    if (kd_obj_int64(v, &out) != 0) {
        int b;
        if (kd_obj_bool(v, &b) == 0)
            return b;
        return missing;
    }
    return out;
}

/* server.status's result (kd_rpc_msg_free it). */
static inline int kd_rpc_status(kd_rpc_t *r, kd_rpc_msg_t *m)
{
    static uint64_t next = 1u << 30;
    kd_writer_t w;
    uint64_t id = next++;
    kd_writer_init(&w);
    kd_w_request_begin(&w, id, "server.status");
    kd_w_array(&w, 0);
    int kind = kd_rpc_call(r, &w, id, 30000, m);
    return kind == KD_RPC_RESPONSE && m->result != NULL ? 0 : -1;
}

/* A matrix.put of csr's arrays (values in csr's dtype). name and reorder may be NULL; pin < 0
 * leaves it out. */
static inline void kd_rpc_write_put_reorder(kd_writer_t *w, uint64_t msgid, const kd_csr_t *m,
                                            const char *name, int pin, const char *reorder)
{
    kd_rpc_begin(w, msgid, "matrix.put", 6 + (name != NULL) + (pin >= 0) + (reorder != NULL));
    if (reorder != NULL)
        kd_w_kv_str(w, "reorder", reorder);
    kd_w_kv_int(w, "rows", m->rows);
    kd_w_kv_int(w, "cols", m->cols);
    kd_w_kv_str(w, "dtype", kd_dtype_name(m->dtype));
    kd_w_kv_bin(w, "indptr", m->indptr, ((size_t)m->rows + 1) * 4);
    kd_w_kv_bin(w, "indices", m->indices, (size_t)m->nnz * 4);
    kd_w_kv_bin(w, "values", m->values, (size_t)m->nnz * kd_dtype_size(m->dtype));
    if (name != NULL)
        kd_w_kv_str(w, "name", name);
    if (pin >= 0)
        kd_w_kv_bool(w, "pin", pin);
}

static inline void kd_rpc_write_put(kd_writer_t *w, uint64_t msgid, const kd_csr_t *m,
                                    const char *name, int pin)
{
    kd_rpc_write_put_reorder(w, msgid, m, name, pin, NULL);
}

/* An spmv y = A x with x in float64; timeout_ms 0 leaves it out. */
static inline void kd_rpc_write_spmv(kd_writer_t *w, uint64_t msgid, const char *id,
                                     const double *x, int64_t n, int64_t timeout_ms)
{
    kd_rpc_begin(w, msgid, "spmv", 2 + (timeout_ms > 0));
    kd_w_kv_str(w, "id", id);
    kd_w_kv_bin(w, "x", x, (size_t)n * sizeof(double));
    if (timeout_ms > 0)
        kd_w_kv_int(w, "timeout_ms", timeout_ms);
}

/* Copy a float64 bin field of exactly n values; 0 or -1. */
static inline int kd_rpc_vector(const msgpack_object *result, const char *field, double *out,
                                int64_t n)
{
    const void *data;
    size_t len;
    if (kd_obj_bytes(kd_obj_get(result, field), &data, &len) != 0 ||
        len != (size_t)n * sizeof(double))
        return -1;
    memcpy(out, data, len);
    return 0;
}

/* Put, wait; the matrix id (32 hex digits + NUL) into id. 0, or -1 with the error in m. */
static inline int kd_rpc_put(kd_rpc_t *r, uint64_t msgid, const kd_csr_t *m, const char *name,
                             int pin, char id[33], kd_rpc_msg_t *msg)
{
    kd_writer_t w;
    kd_rpc_write_put(&w, msgid, m, name, pin);
    int kind = kd_rpc_call(r, &w, msgid, 120000, msg);
    if (kind != KD_RPC_RESPONSE || msg->result == NULL)
        return -1;
    if (kd_obj_str_copy(kd_obj_get(msg->result, "id"), id, 33) != 0)
        return -1;
    return 0;
}

/* spmv, wait; y gets rows values. 0, or -1 with the error in msg (kept for the caller to read;
 * free it with kd_rpc_msg_free in both cases). */
static inline int kd_rpc_spmv(kd_rpc_t *r, uint64_t msgid, const char *id, const double *x,
                              int64_t cols, double *y, int64_t rows, kd_rpc_msg_t *msg)
{
    kd_writer_t w;
    kd_rpc_write_spmv(&w, msgid, id, x, cols, 0);
    int kind = kd_rpc_call(r, &w, msgid, 120000, msg);
    if (kind != KD_RPC_RESPONSE || msg->result == NULL)
        return -1;
    return kd_rpc_vector(msg->result, "y", y, rows);
}

/* A request with just an id (matrix.info, matrix.drop) or id + pinned (matrix.pin, pinned >= 0). */
static inline int kd_rpc_id_call(kd_rpc_t *r, uint64_t msgid, const char *method, const char *id,
                                 int pinned, kd_rpc_msg_t *msg)
{
    kd_writer_t w;
    kd_rpc_begin(&w, msgid, method, 1 + (pinned >= 0));
    kd_w_kv_str(&w, "id", id);
    if (pinned >= 0)
        kd_w_kv_bool(&w, "pinned", pinned);
    return kd_rpc_call(r, &w, msgid, 120000, msg);
}

#endif
