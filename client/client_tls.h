/*
 * libkrylov's TLS transport (private): one OpenSSL session on the client's non-blocking socket.
 * Each call does what it can without blocking and says what to wait for when it cannot; the
 * caller (client.c) polls the socket with its own timeout and calls again. The server's
 * certificate is verified against the CA file (or the system's trust store) and must name the
 * host or IP address connected to.
 */
#ifndef KD_CLIENT_CLIENT_TLS_H
#define KD_CLIENT_CLIENT_TLS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct kd_ctls kd_ctls_t;

/* The result of a step that did not finish: wait for *wait (POLLIN or POLLOUT) and call again. */
#define KD_CTLS_AGAIN 0
#define KD_CTLS_FAILED (-1) /* why says what went wrong; the session is unusable */
#define KD_CTLS_CLOSED (-2) /* the server closed the connection */

/* A client session on connected socket fd (which must be non-blocking) for host. cafile NULL:
 * the system's trust store; certfile/keyfile: the client's own certificate, or NULL. */
int kd_ctls_new(int fd, const char *host, const char *cafile, const char *certfile,
                const char *keyfile, kd_ctls_t **out, char *why, size_t cap);
/* Sends close_notify if it can without blocking; accepts NULL. Does not close fd. */
void kd_ctls_free(kd_ctls_t *t);

/* 1 when the handshake is done, KD_CTLS_AGAIN, KD_CTLS_FAILED or KD_CTLS_CLOSED. */
int kd_ctls_handshake(kd_ctls_t *t, short *wait, char *why, size_t cap);
/* Bytes moved (> 0), KD_CTLS_AGAIN, KD_CTLS_FAILED or KD_CTLS_CLOSED. A write that returned
 * KD_CTLS_AGAIN must be repeated with the same arguments. */
ssize_t kd_ctls_read(kd_ctls_t *t, void *buf, size_t len, short *wait, char *why, size_t cap);
ssize_t kd_ctls_write(kd_ctls_t *t, const void *buf, size_t len, short *wait, char *why,
                      size_t cap);

#endif
