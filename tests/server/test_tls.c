/*
 * server/net/tls.c without a socket: a server session (kd_tls_t) and an OpenSSL client joined by
 * memory BIOs, the bytes between them moved by the test in pieces of every size from 1 byte up
 * (records split anyhow, as TCP may). Checks: the handshake completes and the client verifies the
 * certificate; 100 KB of random plaintext each way arrives intact; nothing can be written before
 * the handshake; bytes that are not TLS fail cleanly (KD_TLS_FAILED with a reason, never a
 * crash); close_notify is seen as KD_TLS_CLOSED; a reload leaves open sessions working; unusable
 * files are refused naming the file. Certificates come from tests/tools/make_test_certs.sh.
 */
#include "kd_test.h"
#include "server/net/tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

static char certs[256];

static const char *path(const char *name)
{
    static char paths[4][320];
    static int next;
    char *p = paths[next++ % 4];
    snprintf(p, sizeof(paths[0]), "%s/%s", certs, name);
    return p;
}

typedef struct pair {
    kd_tls_t *server;
    SSL_CTX *cctx;
    SSL *client;
    BIO *c_in, *c_out; /* the client's view: what it reads, what it wrote */
    size_t step;       /* bytes moved per feed, cycling 1..step */
    size_t moved;
} pair_t;

/* Move the client's output into the server, `step`-ish bytes at a time; then the server's output
 * to the client. Returns what kd_tls_read reported last; plaintext read goes to got. */
static kd_tls_status_t pump(pair_t *p, unsigned char *got, size_t cap, size_t *have, kd_err_t *err)
{
    kd_tls_status_t st = KD_TLS_WANT;
    unsigned char chunk[4096];
    int n;
    while ((n = BIO_read(p->c_out, chunk, (int)(1 + p->moved++ % p->step))) > 0) {
        if (kd_tls_feed(p->server, chunk, (size_t)n) != KD_OK)
            return KD_TLS_FAILED;
        size_t g;
        while ((st = kd_tls_read(p->server, got + *have, cap - *have, &g, err)) == KD_TLS_DATA)
            *have += g;
        if (st == KD_TLS_FAILED || st == KD_TLS_CLOSED)
            break;
    }
    void *out;
    size_t len;
    if (kd_tls_take_output(p->server, &out, &len) == KD_OK && out != NULL) {
        BIO_write(p->c_in, out, (int)len);
        free(out);
    }
    return st;
}

static int pair_open(pair_t *p, kd_tls_ctx_t *ctx, const char *cafile, size_t step)
{
    memset(p, 0, sizeof(*p));
    p->step = step;
    if (kd_tls_new(ctx, &p->server) != KD_OK)
        return -1;
    p->cctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_load_verify_locations(p->cctx, cafile, NULL);
    SSL_CTX_set_verify(p->cctx, SSL_VERIFY_PEER, NULL);
    p->client = SSL_new(p->cctx);
    p->c_in = BIO_new(BIO_s_mem());
    p->c_out = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(p->c_in, -1);
    SSL_set_bio(p->client, p->c_in, p->c_out);
    X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(p->client), "127.0.0.1");
    SSL_set_connect_state(p->client);
    unsigned char sink[64];
    size_t have = 0;
    kd_err_t err = {0};
    for (int round = 0; round < 10000 && !kd_tls_established(p->server); round++) {
        SSL_do_handshake(p->client);
        if (pump(p, sink, sizeof(sink), &have, &err) == KD_TLS_FAILED)
            return -1;
    }
    return SSL_do_handshake(p->client) == 1 && kd_tls_established(p->server) ? 0 : -1;
}

static void pair_close(pair_t *p)
{
    SSL_free(p->client);
    SSL_CTX_free(p->cctx);
    kd_tls_free(p->server);
}

static void test_round_trip_in_pieces(kd_tls_ctx_t *ctx)
{
    const size_t n = 100000;
    unsigned char *sent = malloc(n), *got = malloc(n + 1);
    for (size_t i = 0; i < n; i++)
        sent[i] = (unsigned char)kd_test_rand_u64();
    for (size_t step = 1; step <= 4096; step *= 8) {
        pair_t p;
        REQUIRE(pair_open(&p, ctx, path("ca.pem"), step) == 0);
        CHECK(SSL_get_verify_result(p.client) == X509_V_OK);
        kd_err_t err = {0};
        CHECK_EQ_INT(kd_tls_write(p.server, "x", 0, &err), KD_OK);
        /* client -> server */
        size_t have = 0;
        REQUIRE(SSL_write(p.client, sent, (int)n) == (int)n);
        memset(got, 0xAB, n + 1);
        kd_tls_status_t st = pump(&p, got, n + 1, &have, &err);
        CHECK_EQ_INT(st, KD_TLS_WANT);
        CHECK_EQ_INT(have, n);
        CHECK(memcmp(got, sent, n) == 0);
        /* server -> client */
        REQUIRE(kd_tls_write(p.server, sent, n, &err) == KD_OK);
        have = 0;
        pump(&p, got, n, &have, &err);
        memset(got, 0xAB, n);
        size_t total = 0;
        int r;
        while (total < n && (r = SSL_read(p.client, got + total, (int)(n - total))) > 0)
            total += (size_t)r;
        CHECK_EQ_INT(total, n);
        CHECK(memcmp(got, sent, n) == 0);
        /* close_notify */
        SSL_shutdown(p.client);
        CHECK_EQ_INT(pump(&p, got, n, &have, &err), KD_TLS_CLOSED);
        pair_close(&p);
    }
    free(sent);
    free(got);
}

static void test_not_tls(kd_tls_ctx_t *ctx)
{
    kd_tls_t *t;
    REQUIRE(kd_tls_new(ctx, &t) == KD_OK);
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_tls_write(t, "hello", 5, &err), KD_EPROTO); /* no handshake yet */
    /* a handshake record header, then junk */
    unsigned char junk[64] = {0x16, 0x03, 0x01, 0x00, 0x3b};
    for (size_t i = 5; i < sizeof(junk); i++)
        junk[i] = (unsigned char)kd_test_rand_u64();
    /* ClientHello whose declared length is the rest of the record (so the peer does not wait for
     * more), with a random body and a session id length over 32 (so it can never parse) */
    junk[5] = 0x01;
    junk[6] = 0x00, junk[7] = 0x00, junk[8] = 0x37;
    junk[9] = 0x03, junk[10] = 0x03;
    junk[43] = 0xff;
    REQUIRE(kd_tls_feed(t, junk, sizeof(junk)) == KD_OK);
    unsigned char buf[256];
    size_t got = 0;
    CHECK_EQ_INT(kd_tls_read(t, buf, sizeof(buf), &got, &err), KD_TLS_FAILED);
    CHECK_STR_CONTAINS(err.message, "TLS handshake failed: ");
    CHECK(!kd_tls_established(t));
    kd_tls_free(t);
    for (int trial = 0; trial < 200; trial++) { /* random bytes: never a crash or a success */
        REQUIRE(kd_tls_new(ctx, &t) == KD_OK);
        unsigned char noise[512];
        for (size_t i = 0; i < sizeof(noise); i++)
            noise[i] = (unsigned char)kd_test_rand_u64();
        if (trial % 2 == 0)
            noise[0] = 0x16, noise[1] = 0x03;
        kd_tls_status_t st = KD_TLS_WANT;
        for (size_t off = 0; off < sizeof(noise) && st == KD_TLS_WANT; off += 7) {
            kd_tls_feed(t, noise + off, sizeof(noise) - off < 7 ? sizeof(noise) - off : 7);
            st = kd_tls_read(t, buf, sizeof(buf), &got, &err);
        }
        CHECK(st == KD_TLS_WANT || st == KD_TLS_FAILED);
        CHECK(!kd_tls_established(t));
        kd_tls_free(t);
    }
}

static void test_reload_keeps_open_sessions(kd_tls_ctx_t *ctx)
{
    pair_t p;
    REQUIRE(pair_open(&p, ctx, path("ca.pem"), 1000) == 0);
    kd_err_t err = {0};
    REQUIRE(kd_tls_ctx_reload(ctx, &err) == KD_OK);
    REQUIRE(SSL_write(p.client, "after", 5) == 5);
    unsigned char got[16];
    size_t have = 0;
    pump(&p, got, sizeof(got), &have, &err);
    CHECK_EQ_INT(have, 5);
    CHECK(memcmp(got, "after", 5) == 0);
    pair_close(&p);
    REQUIRE(pair_open(&p, ctx, path("ca.pem"), 1000) == 0); /* and new ones work */
    pair_close(&p);
}

static void test_unusable_files(void)
{
    kd_tls_ctx_t *ctx = NULL;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_tls_ctx_new(path("server.pem"), "", NULL, &ctx, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "both --tls-cert and --tls-key");
    CHECK_EQ_INT(kd_tls_ctx_new(path("missing.pem"), path("server.key"), NULL, &ctx, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "missing.pem: No such file");
    CHECK_EQ_INT(kd_tls_ctx_new(path("server.key"), path("server.key"), NULL, &ctx, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "--tls-cert");
    CHECK_EQ_INT(kd_tls_ctx_new(path("server.pem"), path("client.key"), NULL, &ctx, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "client.key");
    CHECK_EQ_INT(
        kd_tls_ctx_new(path("server.pem"), path("server.key"), path("server.ext"), &ctx, &err),
        KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "--tls-ca");
    CHECK(ctx == NULL);
}

int main(void)
{
    kd_test_seed();
    snprintf(certs, sizeof(certs), "/tmp/krylov-tls-unit-XXXXXX");
    char cmd[512];
    int made = mkdtemp(certs) != NULL;
    snprintf(cmd, sizeof(cmd), "bash '%s/tests/tools/make_test_certs.sh' '%s'", KD_SOURCE_DIR,
             certs);
    if (!made || system(cmd) != 0) {
        fprintf(stderr, "could not make the test certificates\n");
        return 1;
    }
    kd_tls_ctx_t *ctx = NULL;
    kd_err_t err = {0};
    if (kd_tls_ctx_new(path("server.pem"), path("server.key"), NULL, &ctx, &err) != KD_OK) {
        fprintf(stderr, "%s\n", err.message);
        return 1;
    }
    RUN(test_unusable_files);
#define RUN_CTX(fn)                                                                                \
    do {                                                                                           \
        kd_test_case_failed = 0;                                                                   \
        fprintf(stderr, "-- %s\n", #fn);                                                           \
        fn(ctx);                                                                                   \
        fprintf(stderr, "   %s %s\n", kd_test_case_failed ? "FAIL" : "ok", #fn);                   \
    } while (0)
    RUN_CTX(test_round_trip_in_pieces);
    RUN_CTX(test_not_tls);
    RUN_CTX(test_reload_keeps_open_sessions);
    kd_tls_ctx_free(ctx);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
    CHECK(system(cmd) == 0);
    return kd_test_finish();
}
