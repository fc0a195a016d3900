/*
 * krylov-tls-bench: what TLS costs a client of krylovd (issue 15). Starts two krylovd on loopback,
 * one plaintext and one with --tls-cert (certificates made by tests/tools/make_test_certs.sh),
 * and measures through libkrylov on each:
 *   - the round trip of an SpMV on a cached matrix (p50, p90 of --runs calls, after a warm-up;
 *     the two servers are measured alternately so drift hits both alike);
 *   - a put of a matrix with ~10M nonzeros (a 3-D Laplacian): the upload rate up to the last byte
 *     sent (send progress) and the whole call, best of --puts.
 * Both ends run on this machine, so the client's encryption competes with the server's
 * decryption for the same cores. The figures in docs/BENCHMARKS.md ("Service", TLS) come from
 *
 *   build/bin/krylov-tls-bench
 */
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "kd_daemon.h"
#include "krylov.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_target {
    const char *name;
    kd_daemon_t daemon;
    krylov_client_t *client;
    char id[33];
    double *rtt_ms;
} bench_target_t;

/* The send progress of the current put: when its first step went out, and its last. */
static double first_sent_ns, last_sent_ns;
static uint64_t first_sent;

static void on_send_progress(void *ctx, uint64_t sent, uint64_t total)
{
    (void)ctx;
    double now = (double)kd_clock_ns();
    if (first_sent == 0) {
        first_sent = sent;
        first_sent_ns = now;
    }
    if (sent == total)
        last_sent_ns = now;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int bench_connect(bench_target_t *t, const krylov_tls_options_t *tls)
{
    t->client = krylov_client_new();
    if (t->client == NULL || krylov_set_tls(t->client, tls) != KRYLOV_OK ||
        krylov_connect(t->client, t->daemon.address) != KRYLOV_OK) {
        fprintf(stderr, "krylov-tls-bench: %s: %s\n", t->name,
                t->client ? krylov_error_message(t->client) : "out of memory");
        return -1;
    }
    return 0;
}

/* Best-of-`puts` upload rate and call time of A. The rate is over the request's bytes after its
 * first 1 MiB step (so the client's encoding does not count), to the last byte sent. */
static int bench_put(bench_target_t *t, const kd_csr_t *A, int puts)
{
    double bytes = (double)(A->rows + 1) * 4 + (double)A->nnz * 12;
    double best_rate = 0, best_call = 1e30;
    krylov_set_send_progress(t->client, on_send_progress, NULL);
    for (int i = 0; i < puts; i++) {
        krylov_matrix_info_t info;
        first_sent = 0;
        double t0 = (double)kd_clock_ns();
        if (krylov_put_csr(t->client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL,
                           &info) != KRYLOV_OK) {
            fprintf(stderr, "krylov-tls-bench: put on %s: %s\n", t->name,
                    krylov_error_message(t->client));
            return -1;
        }
        double t1 = (double)kd_clock_ns();
        best_rate = fmax(best_rate, (bytes - (double)first_sent) / (last_sent_ns - first_sent_ns));
        best_call = fmin(best_call, (t1 - t0) * 1e-9);
    }
    krylov_set_send_progress(t->client, NULL, NULL);
    printf("put %-9s %lld nnz, %.0f MB: upload %.2f GB/s; whole call %.3f s (%.2f GB/s)\n", t->name,
           (long long)A->nnz, bytes * 1e-6, best_rate, best_call, bytes / best_call * 1e-9);
    return 0;
}

int main(int argc, char **argv)
{
    int runs = 2000, puts = 3;
    int64_t grid = 112, spmv_n = 64; /* 112^3 Laplacian: 9.8M nonzeros; SpMV on a 64x64 grid */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--puts") == 0)
            puts = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--grid") == 0)
            grid = atoll(argv[i + 1]);
        else if (strcmp(argv[i], "--spmv-grid") == 0)
            spmv_n = atoll(argv[i + 1]);
    }
    if (argc % 2 == 0 || runs < 10 || puts < 1 || grid < 2 || spmv_n < 2) {
        fprintf(stderr, "usage: krylov-tls-bench [--runs N] [--puts P] [--grid G] "
                        "[--spmv-grid S]\n");
        return 2;
    }
    char certs[] = "/tmp/krylov-tls-bench-XXXXXX", cmd[512], cert[2][400], ca[400];
    if (mkdtemp(certs) == NULL)
        return 1;
    snprintf(cmd, sizeof(cmd), "bash '%s/tests/tools/make_test_certs.sh' '%s'", KD_SOURCE_DIR,
             certs);
    if (system(cmd) != 0) {
        fprintf(stderr, "krylov-tls-bench: could not make certificates (is openssl there?)\n");
        return 1;
    }
    snprintf(cert[0], sizeof(cert[0]), "%s/server.pem", certs);
    snprintf(cert[1], sizeof(cert[1]), "%s/server.key", certs);
    snprintf(ca, sizeof(ca), "%s/ca.pem", certs);
    const char *tls_args[] = {"--tls-cert", cert[0], "--tls-key", cert[1], NULL};
    krylov_tls_options_t tls = {.cafile = ca};
    bench_target_t t[2] = {{.name = "plaintext"}, {.name = "TLS"}};
    int rc = 1;
    kd_csr_t *S = kd_matgen_laplacian_2d(spmv_n, spmv_n, KD_DTYPE_F64);
    kd_csr_t *A = kd_matgen_laplacian_3d(grid, KD_DTYPE_F64);
    double *x = malloc((size_t)S->rows * sizeof(double)), *y = malloc((size_t)S->rows * 8);
    for (int k = 0; k < 2; k++)
        t[k].rtt_ms = malloc((size_t)runs * sizeof(double));
    if (S == NULL || A == NULL || x == NULL || y == NULL || t[0].rtt_ms == NULL ||
        t[1].rtt_ms == NULL)
        goto done;
    for (int64_t i = 0; i < S->rows; i++)
        x[i] = sin((double)i);
    if (kd_daemon_start(&t[0].daemon, NULL) != 0 || kd_daemon_start(&t[1].daemon, tls_args) != 0 ||
        bench_connect(&t[0], NULL) != 0 || bench_connect(&t[1], &tls) != 0)
        goto done;
    for (int k = 0; k < 2; k++) {
        krylov_matrix_info_t info;
        if (krylov_put_csr(t[k].client, S->rows, S->cols, S->indptr, S->indices, S->values, NULL,
                           &info) != KRYLOV_OK)
            goto done;
        memcpy(t[k].id, info.id, sizeof(t[k].id));
        for (int w = 0; w < 100; w++) /* warm-up: kernels built, buffers allocated */
            krylov_spmv(t[k].client, t[k].id, 1.0, x, S->rows, 0.0, y, S->rows);
    }
    for (int r = 0; r < runs; r++) {
        for (int k = 0; k < 2; k++) {
            double t0 = (double)kd_clock_ns();
            if (krylov_spmv(t[k].client, t[k].id, 1.0, x, S->rows, 0.0, y, S->rows) != KRYLOV_OK)
                goto done;
            t[k].rtt_ms[r] = ((double)kd_clock_ns() - t0) * 1e-6;
        }
    }
    double p50[2];
    for (int k = 0; k < 2; k++) {
        qsort(t[k].rtt_ms, (size_t)runs, sizeof(double), cmp_double);
        p50[k] = t[k].rtt_ms[runs / 2];
        printf("spmv %-9s %lld rows, %lld nnz, cached: round trip p50 %.3f ms, p90 %.3f ms "
               "(%d calls)\n",
               t[k].name, (long long)S->rows, (long long)S->nnz, p50[k], t[k].rtt_ms[runs * 9 / 10],
               runs);
    }
    printf("spmv TLS / plaintext p50: %.2fx (target <= 1.2x)\n", p50[1] / p50[0]);
    if (bench_put(&t[0], A, puts) != 0 || bench_put(&t[1], A, puts) != 0)
        goto done;
    rc = 0;
done:
    if (rc != 0)
        fprintf(stderr, "krylov-tls-bench: failed\n");
    for (int k = 0; k < 2; k++) {
        krylov_client_free(t[k].client);
        if (t[k].daemon.pid > 0)
            kd_daemon_stop(&t[k].daemon);
        free(t[k].rtt_ms);
    }
    kd_csr_free(S);
    kd_csr_free(A);
    free(x);
    free(y);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
    if (system(cmd) != 0)
        rc = 1;
    return rc;
}
