/*
 * TLS through libkrylov (issue 15): a real krylovd with a certificate made by `openssl` for this
 * run (tests/tools/make_test_certs.sh). SpMV and CG over TLS agree with the CPU reference on a
 * real matrix; the client refuses a server signed by another CA, a host name the certificate
 * does not name, and a plaintext server, each with a CONNECTION error that says why; with
 * --tls-ca the server refuses a client without a certificate and serves one with the CA's. Under
 * ASan (make test-asan) this also checks that every TLS object is freed on every close path.
 */
#include "common/csr.h"
#include "kd_daemon.h"
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "krylov.h"

static char certs[300];
static kd_daemon_t tls_daemon; /* --tls-cert, --tls-key */

static const char *cert(const char *name)
{
    static char paths[8][400];
    static int next;
    char *p = paths[next++ % 8];
    snprintf(p, sizeof(paths[0]), "%s/%s", certs, name);
    return p;
}

/* Connect with TLS options (NULL: plaintext); KRYLOV_OK or the error, client freed on error. */
static int tls_connect(const char *address, const krylov_tls_options_t *opt, krylov_client_t **out,
                       char *message, size_t cap)
{
    krylov_client_t *c = krylov_client_new();
    if (c == NULL)
        return KRYLOV_ENOMEM;
    krylov_set_timeout(c, 60000);
    int rc = krylov_set_tls(c, opt);
    if (rc == KRYLOV_OK)
        rc = krylov_connect(c, address);
    if (rc == KRYLOV_OK) {
        krylov_server_status_t st;
        rc = krylov_status(c, &st); /* TLS 1.3 refuses a client certificate after the handshake */
    }
    snprintf(message, cap, "%s: %s", krylov_error_code(c), krylov_error_message(c));
    if (rc != KRYLOV_OK) {
        krylov_client_free(c);
        c = NULL;
    }
    *out = c;
    return rc;
}

static void test_round_trip(void)
{
    const kd_daemon_t *d = &tls_daemon;
    krylov_tls_options_t opt = {.cafile = cert("ca.pem")};
    krylov_client_t *c;
    char msg[600];
    REQUIRE(tls_connect(d->address, &opt, &c, msg, sizeof(msg)) == KRYLOV_OK);
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    REQUIRE(A != NULL);
    char path[512];
    snprintf(path, sizeof(path), "%s/494_bus.mtx", KD_TEST_MATRICES);
    krylov_matrix_info_t info;
    REQUIRE(krylov_put_file(c, path, NULL, &info) == KRYLOV_OK);
    CHECK_EQ_INT(info.nnz, A->nnz);
    int64_t n = A->rows;
    double *x = malloc((size_t)n * sizeof(double)), *y = malloc((size_t)n * sizeof(double));
    double *ref = calloc((size_t)n, sizeof(double)), *b = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        x[i] = kd_test_rand_double(-1.0, 1.0);
        b[i] = kd_test_rand_double(-1.0, 1.0);
        y[i] = NAN;
    }
    REQUIRE(krylov_spmv(c, info.id, 1.0, x, n, 0.0, y, n) == KRYLOV_OK);
    kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
    double err = 0, scale = 1;
    for (int64_t i = 0; i < n; i++) {
        err = fmax(err, fabs(y[i] - ref[i]));
        scale = fmax(scale, fabs(ref[i]));
    }
    CHECK_MSG(err / scale < 1e-12, "spmv over TLS differs by %g", err / scale);

    krylov_solve_options_t so;
    krylov_solve_options_init(&so);
    so.rtol = 1e-8;
    krylov_solve_result_t res;
    REQUIRE(krylov_solve(c, info.id, b, n, &so, x, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "converged") == 0);
    memcpy(ref, b, (size_t)n * sizeof(double));
    kd_csr_spmv_ref(A, x, -1.0, 1.0, ref); /* ref = b - A x */
    double rr = 0, bb = 0;
    for (int64_t i = 0; i < n; i++) {
        rr += ref[i] * ref[i];
        bb += b[i] * b[i];
    }
    CHECK_MSG(sqrt(rr / bb) < 1e-7, "true relative residual %g", sqrt(rr / bb));
    krylov_solve_result_free(&res);
    free(x);
    free(y);
    free(ref);
    free(b);
    kd_csr_free(A);
    krylov_client_free(c);
}

static void test_client_refusals(void)
{
    const kd_daemon_t *d = &tls_daemon;
    krylov_client_t *c;
    char msg[600];
    krylov_tls_options_t other = {.cafile = cert("other-ca.pem")};
    CHECK_EQ_INT(tls_connect(d->address, &other, &c, msg, sizeof(msg)), KRYLOV_ECONNECTION);
    CHECK_STR_CONTAINS(msg, "CONNECTION");
    CHECK_STR_CONTAINS(msg, "certificate verify failed");

    char localhost[64]; /* the certificate names IP 127.0.0.1 only */
    snprintf(localhost, sizeof(localhost), "localhost:%d", d->port);
    krylov_tls_options_t ours = {.cafile = cert("ca.pem")};
    CHECK_EQ_INT(tls_connect(localhost, &ours, &c, msg, sizeof(msg)), KRYLOV_ECONNECTION);
    CHECK_STR_CONTAINS(msg, "hostname mismatch");

    /* plaintext to the TLS port: the server closes it */
    CHECK_EQ_INT(tls_connect(d->address, NULL, &c, msg, sizeof(msg)), KRYLOV_ECONNECTION);
    CHECK_STR_CONTAINS(msg, "closed by the server");

    krylov_tls_options_t missing = {.cafile = cert("nope.pem")};
    CHECK_EQ_INT(tls_connect(d->address, &missing, &c, msg, sizeof(msg)), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(msg, "nope.pem");

    /* and the server still serves */
    REQUIRE(tls_connect(d->address, &ours, &c, msg, sizeof(msg)) == KRYLOV_OK);
    krylov_client_free(c);
}

static void test_tls_client_on_plaintext_server(void)
{
    kd_daemon_t plain;
    REQUIRE(kd_daemon_start(&plain, NULL) == 0);
    krylov_client_t *c;
    char msg[600];
    krylov_tls_options_t ours = {.cafile = cert("ca.pem")};
    CHECK_EQ_INT(tls_connect(plain.address, &ours, &c, msg, sizeof(msg)), KRYLOV_ECONNECTION);
    CHECK_STR_CONTAINS(msg, "TLS handshake failed");
    REQUIRE(tls_connect(plain.address, NULL, &c, msg, sizeof(msg)) == KRYLOV_OK);
    krylov_client_free(c);
    CHECK_EQ_INT(kd_daemon_stop(&plain), 0);
}

static void test_client_certificates(void)
{
    kd_daemon_t d;
    const char *args[] = {"--tls-cert", cert("server.pem"), "--tls-key", cert("server.key"),
                          "--tls-ca",   cert("ca.pem"),     NULL};
    REQUIRE(kd_daemon_start(&d, args) == 0);
    krylov_client_t *c;
    char msg[600];
    krylov_tls_options_t none = {.cafile = cert("ca.pem")};
    CHECK_EQ_INT(tls_connect(d.address, &none, &c, msg, sizeof(msg)), KRYLOV_ECONNECTION);
    CHECK_STR_CONTAINS(msg, "certificate required");
    krylov_tls_options_t stranger = {.cafile = cert("ca.pem"),
                                     .certfile = cert("stranger.pem"),
                                     .keyfile = cert("stranger.key")};
    CHECK_EQ_INT(tls_connect(d.address, &stranger, &c, msg, sizeof(msg)), KRYLOV_ECONNECTION);
    krylov_tls_options_t client = {
        .cafile = cert("ca.pem"), .certfile = cert("client.pem"), .keyfile = cert("client.key")};
    REQUIRE(tls_connect(d.address, &client, &c, msg, sizeof(msg)) == KRYLOV_OK);
    krylov_client_free(c);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
}

int main(void)
{
    kd_test_seed();
    snprintf(certs, sizeof(certs), "/tmp/krylov-tls-certs-XXXXXX");
    char cmd[600];
    int made = mkdtemp(certs) != NULL;
    snprintf(cmd, sizeof(cmd), "bash '%s/tests/tools/make_test_certs.sh' '%s'", KD_SOURCE_DIR,
             certs);
    if (!made || system(cmd) != 0) {
        fprintf(stderr, "could not make the test certificates in %s\n", certs);
        return 1;
    }
    const char *args[] = {"--tls-cert", cert("server.pem"), "--tls-key", cert("server.key"), NULL};
    if (kd_daemon_start(&tls_daemon, args) != 0) {
        fprintf(stderr, "could not start krylovd with TLS\n");
        return 1;
    }
    RUN(test_round_trip);
    RUN(test_client_refusals);
    CHECK_EQ_INT(kd_daemon_stop(&tls_daemon), 0);
    RUN(test_tls_client_on_plaintext_server);
    RUN(test_client_certificates);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
    CHECK(system(cmd) == 0);
    return kd_test_finish();
}
