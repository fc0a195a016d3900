/*
 * libkrylov's TLS transport (see client_tls.h): OpenSSL on the socket itself, non-blocking, with
 * the server's certificate verified (chain and host name or IP address). TLS 1.2 at least, as the
 * server requires.
 */
#include "client/client_tls.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kd_ctls {
    SSL_CTX *ctx;
    SSL *ssl;
};

/* OpenSSL's reasons (the queue is emptied), with the verification result when that failed. */
static void kd_ctls_why(const kd_ctls_t *t, const char *what, char *why, size_t cap)
{
    char reasons[256] = "";
    size_t used = 0;
    unsigned long e;
    while ((e = ERR_get_error()) != 0) {
        const char *r = ERR_reason_error_string(e);
        if (r != NULL && used + 1 < sizeof(reasons) && strstr(reasons, r) == NULL) {
            int n = snprintf(reasons + used, sizeof(reasons) - used, "%s%s", used ? "; " : "", r);
            used = n > 0 && (size_t)n < sizeof(reasons) - used ? used + (size_t)n
                                                               : sizeof(reasons) - 1;
        }
    }
    long verify = t != NULL && t->ssl != NULL ? SSL_get_verify_result(t->ssl) : X509_V_OK;
    if (verify != X509_V_OK)
        snprintf(why, cap, "%s: %s (%s)", what, reasons[0] ? reasons : "failed",
                 X509_verify_cert_error_string(verify));
    else
        snprintf(why, cap, "%s: %s", what, reasons[0] ? reasons : "failed");
}

void kd_ctls_free(kd_ctls_t *t)
{
    if (t == NULL)
        return;
    if (t->ssl != NULL && SSL_is_init_finished(t->ssl))
        SSL_shutdown(t->ssl);
    SSL_free(t->ssl);
    SSL_CTX_free(t->ctx);
    ERR_clear_error();
    free(t);
}

int kd_ctls_new(int fd, const char *host, const char *cafile, const char *certfile,
                const char *keyfile, kd_ctls_t **out, char *why, size_t cap)
{
    ERR_clear_error();
    kd_ctls_t *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        snprintf(why, cap, "out of memory");
        return KD_CTLS_FAILED;
    }
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (t->ctx == NULL) {
        kd_ctls_why(t, "TLS", why, cap);
        goto fail;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(t->ctx, SSL_VERIFY_PEER, NULL);
    int loaded = cafile != NULL ? SSL_CTX_load_verify_locations(t->ctx, cafile, NULL)
                                : SSL_CTX_set_default_verify_paths(t->ctx);
    if (loaded != 1) {
        kd_ctls_why(t, cafile != NULL ? cafile : "the system's CA certificates", why, cap);
        goto fail;
    }
    if (certfile != NULL && SSL_CTX_use_certificate_chain_file(t->ctx, certfile) != 1) {
        kd_ctls_why(t, certfile, why, cap);
        goto fail;
    }
    if (certfile != NULL || keyfile != NULL) {
        const char *key = keyfile != NULL ? keyfile : certfile;
        if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(t->ctx) != 1) {
            kd_ctls_why(t, key, why, cap);
            goto fail;
        }
    }
    /* A partial write returns what went out, so the caller can report progress and poll. */
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Read what the socket has, not one record header and then its body: half the syscalls. */
    SSL_CTX_set_read_ahead(t->ctx, 1);
    t->ssl = SSL_new(t->ctx);
    if (t->ssl == NULL || SSL_set_fd(t->ssl, fd) != 1) {
        kd_ctls_why(t, "TLS", why, cap);
        goto fail;
    }
    unsigned char ip[16];
    int is_ip = inet_pton(AF_INET, host, ip) == 1 || inet_pton(AF_INET6, host, ip) == 1;
    X509_VERIFY_PARAM *param = SSL_get0_param(t->ssl);
    if ((is_ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host)
               : X509_VERIFY_PARAM_set1_host(param, host, 0)) != 1 ||
        (!is_ip && SSL_set_tlsext_host_name(t->ssl, host) != 1)) {
        kd_ctls_why(t, host, why, cap);
        goto fail;
    }
    SSL_set_connect_state(t->ssl);
    *out = t;
    return 0;
fail:
    kd_ctls_free(t);
    return KD_CTLS_FAILED;
}

/* Map a failed SSL call to AGAIN (with what to wait for), CLOSED or FAILED. */
static int kd_ctls_status(kd_ctls_t *t, int ret, const char *what, short *wait, char *why,
                          size_t cap)
{
    switch (SSL_get_error(t->ssl, ret)) {
    case SSL_ERROR_WANT_READ:
        *wait = POLLIN;
        return KD_CTLS_AGAIN;
    case SSL_ERROR_WANT_WRITE:
        *wait = POLLOUT;
        return KD_CTLS_AGAIN;
    case SSL_ERROR_ZERO_RETURN:
        return KD_CTLS_CLOSED;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
            ERR_clear_error();
            return KD_CTLS_CLOSED; /* EOF or reset without a close_notify */
        }
        /* fall through */
    default:
        kd_ctls_why(t, what, why, cap);
        return KD_CTLS_FAILED;
    }
}

int kd_ctls_handshake(kd_ctls_t *t, short *wait, char *why, size_t cap)
{
    ERR_clear_error();
    int ret = SSL_do_handshake(t->ssl);
    if (ret == 1)
        return 1;
    int st = kd_ctls_status(t, ret, "TLS handshake failed", wait, why, cap);
    if (st == KD_CTLS_CLOSED)
        snprintf(why, cap,
                 "TLS handshake failed: the server closed the connection (is it "
                 "serving TLS?)");
    return st;
}

ssize_t kd_ctls_read(kd_ctls_t *t, void *buf, size_t len, short *wait, char *why, size_t cap)
{
    ERR_clear_error();
    size_t n = 0;
    if (SSL_read_ex(t->ssl, buf, len, &n) == 1)
        return (ssize_t)n;
    return kd_ctls_status(t, 0, "TLS", wait, why, cap);
}

ssize_t kd_ctls_write(kd_ctls_t *t, const void *buf, size_t len, short *wait, char *why, size_t cap)
{
    ERR_clear_error();
    size_t n = 0;
    if (SSL_write_ex(t->ssl, buf, len, &n) == 1)
        return (ssize_t)n;
    return kd_ctls_status(t, 0, "TLS", wait, why, cap);
}
