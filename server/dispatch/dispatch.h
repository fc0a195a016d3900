/*
 * What the request layer (dispatch/: dispatch.c, login.c, climem.c, warm.c, status.c) asks of the
 * network layer above it. It answers and paces connections, but conn.c and server.c (net/) call
 * into it, so it reaches them only through these function pointers, which kd_server_init
 * (net/server.c) registers in server->net before the first connection: calls go one way, net/ ->
 * dispatch/.
 */
#ifndef KD_SERVER_DISPATCH_H
#define KD_SERVER_DISPATCH_H

#include "server/server.h"

typedef struct kd_dispatch_net {
    /* Queue bytes (malloc'd, ownership passes) on conn; dropped when it is closing. */
    void (*send)(kd_conn_t *conn, void *bytes, size_t len);
    /* ... and tail (owned the same way) after them, uncopied. */
    void (*send_parts)(kd_conn_t *conn, void *bytes, size_t len, void *tail, size_t tail_len);
    /* An error response for msgid. */
    void (*send_error)(kd_conn_t *conn, uint64_t msgid, int code, const char *message);
    /* Close conn gracefully (what is queued is flushed first). */
    void (*close)(kd_conn_t *conn);
    /* Close conn now, without flushing (climem.c's evictions). */
    void (*abort)(kd_conn_t *conn);
    /* Read from conn again after a pause. */
    void (*resume_reading)(kd_conn_t *conn);
    /* Drop a reference that a job or a waiter held. */
    void (*unref)(kd_conn_t *conn);
    /* A job was answered: shutdown may finish (the server's jobs in flight went down by one). */
    void (*job_finished)(kd_server_t *server);
} kd_dispatch_net_t;

static inline void kd_net_send(kd_conn_t *conn, void *bytes, size_t len)
{
    conn->server->net->send(conn, bytes, len);
}

static inline void kd_net_send_parts(kd_conn_t *conn, void *bytes, size_t len, void *tail,
                                     size_t tail_len)
{
    conn->server->net->send_parts(conn, bytes, len, tail, tail_len);
}

static inline void kd_net_send_error(kd_conn_t *conn, uint64_t msgid, int code, const char *message)
{
    conn->server->net->send_error(conn, msgid, code, message);
}

static inline void kd_net_close(kd_conn_t *conn)
{
    conn->server->net->close(conn);
}

static inline void kd_net_abort(kd_conn_t *conn)
{
    conn->server->net->abort(conn);
}

static inline void kd_net_resume_reading(kd_conn_t *conn)
{
    conn->server->net->resume_reading(conn);
}

static inline void kd_net_unref(kd_conn_t *conn)
{
    conn->server->net->unref(conn);
}

#endif
