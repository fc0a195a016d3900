/*
 * TLS for the listener (--tls-cert, --tls-key, --tls-ca): OpenSSL driven through memory BIOs, as
 * Node does, so the libuv stream keeps doing every read and write and nothing here touches a
 * socket. Per connection: ciphertext read from the stream goes in with kd_tls_feed(), plaintext
 * comes out of kd_tls_read() into the frame parser; responses go in with kd_tls_write() and the
 * ciphertext to write to the stream comes out of kd_tls_take_output(). The handshake happens
 * inside kd_tls_read(), whose output (ServerHello, ...) is taken like any other.
 *
 * Policy: TLS 1.2 and 1.3 only, the server's cipher order, no compression, no renegotiation, no
 * session tickets (clients do not resume). With a CA file, clients must present a certificate it
 * signed. Everything runs on the loop thread (OpenSSL's error queue is per thread).
 */
#ifndef KD_SERVER_TLS_H
#define KD_SERVER_TLS_H

#include "common/error.h"

#include <stddef.h>

typedef struct kd_tls_ctx kd_tls_ctx_t; /* the listener's certificate, key and policy */
typedef struct kd_tls kd_tls_t;         /* one connection's TLS state */

typedef enum kd_tls_status {
    KD_TLS_DATA = 0,   /* plaintext was read */
    KD_TLS_WANT = 1,   /* nothing more until more ciphertext arrives */
    KD_TLS_CLOSED = 2, /* the peer sent close_notify */
    KD_TLS_FAILED = 3, /* handshake or record error: close the connection (err says why) */
} kd_tls_status_t;

/* Load the PEM certificate chain and key (and the CA that client certificates must chain to, or
 * NULL/"" for none). KD_EBADREQ naming the file and OpenSSL's reason when one cannot be used. */
int kd_tls_ctx_new(const char *cert, const char *key, const char *ca, kd_tls_ctx_t **out,
                   kd_err_t *err);
void kd_tls_ctx_free(kd_tls_ctx_t *ctx); /* accepts NULL; live connections keep what they use */
/* Load the files again (SIGHUP): new connections use them, open ones keep theirs. On failure the
 * old ones stay in use. */
int kd_tls_ctx_reload(kd_tls_ctx_t *ctx, kd_err_t *err);
/* 1 when client certificates are required. */
int kd_tls_ctx_verifies_clients(const kd_tls_ctx_t *ctx);

/* A connection in the server role. KD_ENOMEM. */
int kd_tls_new(kd_tls_ctx_t *ctx, kd_tls_t **out);
void kd_tls_free(kd_tls_t *tls); /* accepts NULL */

/* Ciphertext from the peer (copied). KD_ENOMEM. */
int kd_tls_feed(kd_tls_t *tls, const void *data, size_t len);
/* Plaintext into buf (up to cap bytes; *got set on KD_TLS_DATA), advancing the handshake first. */
kd_tls_status_t kd_tls_read(kd_tls_t *tls, void *buf, size_t cap, size_t *got, kd_err_t *err);
/* Encrypt len bytes of plaintext (taken whole). KD_EPROTO before the handshake has finished (a
 * response has nobody to go to yet), KD_EIO on failure. */
int kd_tls_write(kd_tls_t *tls, const void *data, size_t len, kd_err_t *err);
/* The ciphertext waiting to be sent: *bytes is malloc'd (ownership passes), or NULL with *len 0
 * when there is none. KD_ENOMEM. */
int kd_tls_take_output(kd_tls_t *tls, void **bytes, size_t *len);
/* Queue a close_notify (after a finished handshake; otherwise nothing). */
void kd_tls_shutdown(kd_tls_t *tls);

/* 1 once the handshake has finished. */
int kd_tls_established(const kd_tls_t *tls);
/* 1 when ciphertext has gone to the peer (it got a ServerHello: it speaks TLS). */
int kd_tls_spoke(const kd_tls_t *tls);
/* "TLSv1.3 TLS_AES_128_GCM_SHA256 client=CN" for the log, after the handshake. */
void kd_tls_describe(const kd_tls_t *tls, char *buf, size_t cap);

#endif
