/*
 * TLS through OpenSSL memory BIOs (see tls.h). Each connection's SSL object reads ciphertext from
 * an in-memory rbio that conn.c fills from the libuv stream and writes ciphertext to an in-memory
 * wbio that conn.c drains into uv_write; the memory BIOs never block, so SSL_read's "want read"
 * simply means "wait for the next chunk from the stream".
 */
#include "server/net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kd_tls_ctx {
    SSL_CTX
    *ssl_ctx; /* each SSL holds a reference too, so a reload never pulls it from under one */
    char *cert, *key, *ca;
};

struct kd_tls {
    SSL *ssl;
    BIO *rbio, *wbio; /* owned by ssl */
    int spoke;
};

/* OpenSSL's reasons for the last failure, oldest first, "; "-separated; the queue is emptied. */
static void kd_tls_reasons(char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    unsigned long e;
    while ((e = ERR_get_error()) != 0) {
        const char *reason = ERR_reason_error_string(e);
        char code[32];
        if (reason == NULL) {
            snprintf(code, sizeof(code), "error %d", ERR_GET_REASON(e));
            reason = code;
        }
        if (used + 1 < cap && strstr(buf, reason) == NULL) {
            int n = snprintf(buf + used, cap - used, "%s%s", used > 0 ? "; " : "", reason);
            used = n > 0 && (size_t)n < cap - used ? used + (size_t)n : cap - 1;
        }
    }
    if (buf[0] == '\0')
        snprintf(buf, cap, "unknown OpenSSL error");
}

static int kd_tls_readable(const char *option, const char *path, kd_err_t *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return kd_err_set(err, KD_EBADREQ, "%s %s: %s", option, path, strerror(errno));
    fclose(f);
    return KD_OK;
}

static int kd_tls_fail(kd_err_t *err, const char *what, const char *path)
{
    char why[256];
    kd_tls_reasons(why, sizeof(why));
    return kd_err_set(err, KD_EBADREQ, "%s %s: %s", what, path, why);
}

/* A fresh SSL_CTX with the policy and the files of ctx. */
static int kd_tls_build(const kd_tls_ctx_t *ctx, SSL_CTX **out, kd_err_t *err)
{
    int rc = kd_tls_readable("--tls-cert", ctx->cert, err);
    if (rc == KD_OK)
        rc = kd_tls_readable("--tls-key", ctx->key, err);
    if (rc == KD_OK && ctx->ca != NULL)
        rc = kd_tls_readable("--tls-ca", ctx->ca, err);
    if (rc != KD_OK)
        return rc;
    ERR_clear_error();
    SSL_CTX *s = SSL_CTX_new(TLS_server_method());
    if (s == NULL)
        return kd_tls_fail(err, "TLS:", "cannot create a context");
    SSL_CTX_set_min_proto_version(s, TLS1_2_VERSION);
    SSL_CTX_set_options(s, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION |
                               SSL_OP_NO_RENEGOTIATION);
    /* Forward secrecy and AEAD only; AES-128-GCM first: as strong as needed and the fastest with
     * AES-NI. */
    if (SSL_CTX_set_cipher_list(s,
                                "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
                                "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
                                "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305") != 1 ||
        SSL_CTX_set_ciphersuites(s, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:"
                                    "TLS_CHACHA20_POLY1305_SHA256") != 1) {
        SSL_CTX_free(s);
        return kd_tls_fail(err, "TLS:", "cipher list");
    }
    SSL_CTX_set_num_tickets(s, 0);
    SSL_CTX_set_session_cache_mode(s, SSL_SESS_CACHE_OFF);
    if (SSL_CTX_use_certificate_chain_file(s, ctx->cert) != 1) {
        SSL_CTX_free(s);
        return kd_tls_fail(err, "--tls-cert", ctx->cert);
    }
    if (SSL_CTX_use_PrivateKey_file(s, ctx->key, SSL_FILETYPE_PEM) != 1) {
        SSL_CTX_free(s);
        return kd_tls_fail(err, "--tls-key", ctx->key);
    }
    if (SSL_CTX_check_private_key(s) != 1) {
        SSL_CTX_free(s);
        ERR_clear_error();
        return kd_err_set(err, KD_EBADREQ, "--tls-key %s is not the key of the certificate in %s",
                          ctx->key, ctx->cert);
    }
    if (ctx->ca != NULL) {
        STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(ctx->ca);
        if (names == NULL || SSL_CTX_load_verify_locations(s, ctx->ca, NULL) != 1) {
            sk_X509_NAME_pop_free(names, X509_NAME_free);
            SSL_CTX_free(s);
            if (ERR_peek_error() == 0)
                return kd_err_set(err, KD_EBADREQ, "--tls-ca %s: no certificate in it", ctx->ca);
            return kd_tls_fail(err, "--tls-ca", ctx->ca);
        }
        SSL_CTX_set_client_CA_list(s, names);
        SSL_CTX_set_verify(s, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, NULL);
    }
    *out = s;
    return KD_OK;
}

void kd_tls_ctx_free(kd_tls_ctx_t *ctx)
{
    if (ctx == NULL)
        return;
    SSL_CTX_free(ctx->ssl_ctx);
    free(ctx->cert);
    free(ctx->key);
    free(ctx->ca);
    free(ctx);
}

int kd_tls_ctx_new(const char *cert, const char *key, const char *ca, kd_tls_ctx_t **out,
                   kd_err_t *err)
{
    if (cert == NULL || key == NULL || cert[0] == '\0' || key[0] == '\0')
        return kd_err_set(err, KD_EBADREQ, "TLS needs both --tls-cert and --tls-key");
    kd_tls_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of memory");
    ctx->cert = strdup(cert);
    ctx->key = strdup(key);
    ctx->ca = ca != NULL && ca[0] != '\0' ? strdup(ca) : NULL;
    if (ctx->cert == NULL || ctx->key == NULL || (ca != NULL && ca[0] != '\0' && ctx->ca == NULL)) {
        kd_tls_ctx_free(ctx);
        return kd_err_set(err, KD_ENOMEM, "out of memory");
    }
    int rc = kd_tls_build(ctx, &ctx->ssl_ctx, err);
    if (rc != KD_OK) {
        kd_tls_ctx_free(ctx);
        return rc;
    }
    *out = ctx;
    return KD_OK;
}

int kd_tls_ctx_reload(kd_tls_ctx_t *ctx, kd_err_t *err)
{
    SSL_CTX *fresh = NULL;
    int rc = kd_tls_build(ctx, &fresh, err);
    if (rc != KD_OK)
        return rc;
    SSL_CTX_free(ctx->ssl_ctx);
    ctx->ssl_ctx = fresh;
    return KD_OK;
}

int kd_tls_ctx_verifies_clients(const kd_tls_ctx_t *ctx)
{
    return ctx->ca != NULL;
}

int kd_tls_new(kd_tls_ctx_t *ctx, kd_tls_t **out)
{
    kd_tls_t *t = calloc(1, sizeof(*t));
    if (t == NULL)
        return KD_ENOMEM;
    t->ssl = SSL_new(ctx->ssl_ctx);
    t->rbio = BIO_new(BIO_s_mem());
    t->wbio = BIO_new(BIO_s_mem());
    if (t->ssl == NULL || t->rbio == NULL || t->wbio == NULL) {
        BIO_free(t->rbio);
        BIO_free(t->wbio);
        SSL_free(t->ssl);
        free(t);
        ERR_clear_error();
        return KD_ENOMEM;
    }
    /* An empty rbio means "more later", not end of stream: the stream's EOF comes from libuv. */
    BIO_set_mem_eof_return(t->rbio, -1);
    SSL_set_bio(t->ssl, t->rbio, t->wbio);
    SSL_set_accept_state(t->ssl);
    /* Take whole chunks from the rbio, not each record's header and then its body. */
    SSL_set_read_ahead(t->ssl, 1);
    *out = t;
    return KD_OK;
}

void kd_tls_free(kd_tls_t *tls)
{
    if (tls == NULL)
        return;
    SSL_free(tls->ssl); /* and both BIOs */
    free(tls);
}

int kd_tls_feed(kd_tls_t *tls, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        int n = BIO_write(tls->rbio, p, len > INT_MAX ? INT_MAX : (int)len);
        if (n <= 0)
            return KD_ENOMEM;
        p += n;
        len -= (size_t)n;
    }
    return KD_OK;
}

kd_tls_status_t kd_tls_read(kd_tls_t *tls, void *buf, size_t cap, size_t *got, kd_err_t *err)
{
    ERR_clear_error();
    size_t n = 0;
    if (SSL_read_ex(tls->ssl, buf, cap, &n) == 1) {
        *got = n;
        return KD_TLS_DATA;
    }
    int e = SSL_get_error(tls->ssl, 0);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE)
        return KD_TLS_WANT;
    if (e == SSL_ERROR_ZERO_RETURN)
        return KD_TLS_CLOSED;
    char why[256];
    kd_tls_reasons(why, sizeof(why));
    long verify = SSL_get_verify_result(tls->ssl);
    const char *stage = SSL_is_init_finished(tls->ssl) ? "TLS error" : "TLS handshake failed";
    if (verify != X509_V_OK)
        kd_err_set(err, KD_EPROTO, "%s: %s (client certificate: %s)", stage, why,
                   X509_verify_cert_error_string(verify));
    else
        kd_err_set(err, KD_EPROTO, "%s: %s", stage, why);
    return KD_TLS_FAILED;
}

int kd_tls_write(kd_tls_t *tls, const void *data, size_t len, kd_err_t *err)
{
    if (!SSL_is_init_finished(tls->ssl))
        return kd_err_set(err, KD_EPROTO, "the TLS handshake has not finished");
    ERR_clear_error();
    const char *p = data;
    while (len > 0) {
        size_t n = 0;
        if (SSL_write_ex(tls->ssl, p, len, &n) != 1) {
            char why[256];
            kd_tls_reasons(why, sizeof(why));
            return kd_err_set(err, KD_EIO, "TLS write failed: %s", why);
        }
        p += n;
        len -= n;
    }
    return KD_OK;
}

int kd_tls_take_output(kd_tls_t *tls, void **bytes, size_t *len)
{
    *bytes = NULL;
    *len = 0;
    size_t pending = BIO_ctrl_pending(tls->wbio);
    if (pending == 0)
        return KD_OK;
    char *out = malloc(pending);
    if (out == NULL)
        return KD_ENOMEM;
    size_t have = 0;
    while (have < pending) {
        size_t want = pending - have;
        int n = BIO_read(tls->wbio, out + have, want > INT_MAX ? INT_MAX : (int)want);
        if (n <= 0)
            break;
        have += (size_t)n;
    }
    if (have == 0) {
        free(out);
        return KD_OK;
    }
    tls->spoke = 1;
    *bytes = out;
    *len = have;
    return KD_OK;
}

void kd_tls_shutdown(kd_tls_t *tls)
{
    if (!SSL_is_init_finished(tls->ssl))
        return;
    ERR_clear_error();
    SSL_shutdown(tls->ssl);
    ERR_clear_error();
}

int kd_tls_established(const kd_tls_t *tls)
{
    return SSL_is_init_finished(tls->ssl);
}

int kd_tls_spoke(const kd_tls_t *tls)
{
    return tls->spoke;
}

void kd_tls_describe(const kd_tls_t *tls, char *buf, size_t cap)
{
    char cn[128] = "";
    X509 *peer = SSL_get0_peer_certificate(tls->ssl);
    if (peer != NULL)
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, cn, sizeof(cn));
    snprintf(buf, cap, "%s %s%s%s", SSL_get_version(tls->ssl), SSL_get_cipher_name(tls->ssl),
             cn[0] != '\0' ? " client=" : "", cn);
}
