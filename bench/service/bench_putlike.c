/*
 * krylov-bench putlike: issue 22's first target, a put of new values on a held pattern against a
 * full put, through a krylovd as a client sees it. The matrix is the 3-D 7-point Laplacian on an
 * n^3 grid (default n = 100: 1M rows, 6.94M nonzeros), every put with values of its own (scaled),
 * so nothing is found in the store: a full put (krylov_put_csr: indptr, indices and values; the
 * server chooses the format as it does for any put) and a put with like (krylov_put_like: the
 * values alone, the pattern and format of one base matrix put first and held). Each is repeated
 * (--repeat, after one untimed warm-up of each), its result dropped after it (not timed).
 *
 * Reported per put and as medians: the client's wall time, the server's time (the reply's
 * time_ms, from the request decoded to the reply; -1 from a server that does not say it), the
 * bytes the client sent (the request's encoding: 8 bytes a nonzero for like's values plus the
 * ids and the hash); and the ratio like / full of the server times (target <= 0.25) and of the
 * wall times. Checked (exit status 1 otherwise): the matrix a put with like made is the one a full
 * put of the same values makes (the same content id, found without a new upload), and its SpMV
 * matches the host's product to 1e-12.
 */
#include "bench/bench.h"
#include "bench/service/bench_service.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_PL_MAX_REPEAT 64

typedef struct kd_pl_matrix {
    int64_t n, rows, nnz;
    int32_t *indptr, *indices;
    double *values;
} kd_pl_matrix_t;

static void kd_pl_usage(void)
{
    fprintf(stderr,
            "usage: krylov-bench putlike [options]\n"
            "  --n N               the grid's side: N^3 rows, about 7 N^3 nonzeros (default 100)\n"
            "  --repeat R          timed puts of each kind, median (default 5, at most %d)\n"
            "  --persist MODE      the timed puts' persist: sync, behind or none (default: the\n"
            "                      server's --persist-default)\n"
            "%s",
            KD_PL_MAX_REPEAT, kd_bench_service_usage);
}

/* The 7-point pattern, columns ascending in each row. */
static int kd_pl_make(kd_pl_matrix_t *m, int64_t n)
{
    memset(m, 0, sizeof(*m));
    m->n = n;
    m->rows = n * n * n;
    m->nnz = 7 * m->rows - 6 * n * n;
    m->indptr = malloc((size_t)(m->rows + 1) * sizeof(int32_t));
    m->indices = malloc((size_t)m->nnz * sizeof(int32_t));
    m->values = malloc((size_t)m->nnz * sizeof(double));
    if (m->indptr == NULL || m->indices == NULL || m->values == NULL)
        return -1;
    int64_t e = 0;
    m->indptr[0] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            for (int64_t l = 0; l < n; l++) {
                const int64_t r = (i * n + j) * n + l;
                const int64_t nb[7] = {
                    i > 0 ? r - n * n : -1, j > 0 ? r - n : -1,     l > 0 ? r - 1 : -1,        r,
                    l + 1 < n ? r + 1 : -1, j + 1 < n ? r + n : -1, i + 1 < n ? r + n * n : -1};
                for (int t = 0; t < 7; t++)
                    if (nb[t] >= 0)
                        m->indices[e++] = (int32_t)nb[t];
                m->indptr[r + 1] = (int32_t)e;
            }
    return e == m->nnz ? 0 : -1;
}

static void kd_pl_free(kd_pl_matrix_t *m)
{
    free(m->indptr);
    free(m->indices);
    free(m->values);
}

/* Values of their own for `seed`: 6 + a diagonal shift, -s off the diagonal (SPD for s <= 1). */
static void kd_pl_values(kd_pl_matrix_t *m, int seed)
{
    const double s = 1.0 - 0.001 * (double)seed;
    for (int64_t r = 0; r < m->rows; r++)
        for (int32_t e = m->indptr[r]; e < m->indptr[r + 1]; e++)
            m->values[e] = m->indices[e] == r
                               ? 6.0 + 0.5 * kd_matgen_hash01(22, (uint64_t)r, (uint64_t)seed)
                               : -s;
}

static int kd_pl_fail(krylov_client_t *c, const char *what)
{
    fprintf(stderr, "krylov-bench putlike: %s: %s %s\n", what, krylov_error_code(c),
            krylov_error_message(c));
    return -1;
}

/* One put of m's current values (like_id NULL: full), timed; its info in *info. */
static int kd_pl_put(krylov_client_t *c, kd_bench_service_t *svc, const kd_pl_matrix_t *m,
                     const char *like_id, krylov_matrix_info_t *info, kd_bench_put_t *p)
{
    if (kd_bench_service_put(svc, c, m->rows, m->indptr, m->indices, m->values, like_id, info, p) !=
        KRYLOV_OK)
        return kd_pl_fail(c, like_id != NULL ? "put with like" : "put");
    if (!info->created) {
        fprintf(stderr, "krylov-bench putlike: the server already held these values (%s)\n",
                info->id);
        return -1;
    }
    return 0;
}

/* The put with like made the full put's matrix: same id, and its SpMV is the host's. */
static int kd_pl_check(krylov_client_t *c, const kd_pl_matrix_t *m, const char *like_id)
{
    krylov_matrix_info_t like, full;
    double *x = malloc((size_t)m->rows * sizeof(double)),
           *y = malloc((size_t)m->rows * sizeof(double));
    int ok = 0;
    if (x == NULL || y == NULL)
        goto out;
    if (krylov_put_like(c, like_id, m->rows, m->rows, m->indptr, m->indices, m->values, NULL,
                        &like) != KRYLOV_OK ||
        krylov_put_csr(c, m->rows, m->rows, m->indptr, m->indices, m->values, NULL, &full) !=
            KRYLOV_OK) {
        kd_pl_fail(c, "check's puts");
        goto out;
    }
    for (int64_t i = 0; i < m->rows; i++)
        x[i] = 2.0 * kd_matgen_hash01(22, (uint64_t)i, 99) - 1.0;
    if (krylov_spmv(c, like.id, 1.0, x, m->rows, 0.0, y, m->rows) != KRYLOV_OK) {
        kd_pl_fail(c, "check's spmv");
        goto out;
    }
    double dd = 0.0, rr = 0.0;
    for (int64_t r = 0; r < m->rows; r++) {
        double ax = 0.0;
        for (int32_t e = m->indptr[r]; e < m->indptr[r + 1]; e++)
            ax += m->values[e] * x[m->indices[e]];
        dd += (y[r] - ax) * (y[r] - ax);
        rr += ax * ax;
    }
    const double diff = rr > 0.0 ? sqrt(dd / rr) : sqrt(dd);
    const int same_id = strcmp(like.id, full.id) == 0 && !full.created;
    ok = same_id && diff <= 1e-12;
    printf("check: the put with like made %s, a full put of the same values found %s (%s: %s); "
           "its SpMV against the host's %.3e relative (<= 1e-12: %s)\n",
           like.id, full.id, full.created ? "created" : "already held", same_id ? "ok" : "FAILED",
           diff, diff <= 1e-12 ? "ok" : "FAILED");
    if (krylov_drop(c, like.id) != KRYLOV_OK) {
        kd_pl_fail(c, "drop");
        ok = 0;
    }
out:
    free(x);
    free(y);
    return ok ? 0 : -1;
}

static double kd_pl_median(const kd_bench_put_t *p, int n, int server)
{
    double v[KD_PL_MAX_REPEAT];
    for (int i = 0; i < n; i++)
        v[i] = server ? p[i].server_ms : p[i].wall_ms;
    return kd_bench_median(v, (size_t)n);
}

static uint64_t kd_pl_bytes(const kd_bench_put_t *p, int n)
{
    double v[KD_PL_MAX_REPEAT];
    for (int i = 0; i < n; i++)
        v[i] = (double)p[i].bytes;
    return (uint64_t)kd_bench_median(v, (size_t)n);
}

/* Warm-up, then `repeat` full puts and `repeat` puts with like on base, each dropped after. */
static int kd_pl_run(krylov_client_t *c, kd_bench_service_t *svc, kd_pl_matrix_t *m,
                     const char *base, int repeat, kd_bench_put_t *full, kd_bench_put_t *like)
{
    krylov_matrix_info_t info;
    kd_bench_put_t warm;
    for (int r = -1; r < repeat; r++) { /* r = -1: untimed warm-up */
        kd_pl_values(m, 2 * r + 4);
        if (kd_pl_put(c, svc, m, NULL, &info, r < 0 ? &warm : &full[r]) != 0 ||
            krylov_drop(c, info.id) != KRYLOV_OK)
            return kd_pl_fail(c, "full put or its drop");
        kd_pl_values(m, 2 * r + 5);
        if (kd_pl_put(c, svc, m, base, &info, r < 0 ? &warm : &like[r]) != 0 ||
            krylov_drop(c, info.id) != KRYLOV_OK)
            return kd_pl_fail(c, "put with like or its drop");
    }
    return 0;
}

static void kd_pl_report(const kd_pl_matrix_t *m, const kd_bench_put_t *full,
                         const kd_bench_put_t *like, int repeat)
{
    printf("%-6s %3s %10s %10s %12s %8s  %s\n", "put", "rep", "wall_ms", "server_ms", "bytes",
           "B/nnz", "format");
    for (int k = 0; k < 2; k++)
        for (int r = 0; r < repeat; r++) {
            const kd_bench_put_t *p = k == 0 ? &full[r] : &like[r];
            printf("%-6s %3d %10.2f %10.2f %12llu %8.3f  %s\n", k == 0 ? "full" : "like", r,
                   p->wall_ms, p->server_ms, (unsigned long long)p->bytes,
                   (double)p->bytes / (double)m->nnz, p->format);
        }
    const double fw = kd_pl_median(full, repeat, 0), fs = kd_pl_median(full, repeat, 1);
    const double lw = kd_pl_median(like, repeat, 0), ls = kd_pl_median(like, repeat, 1);
    const uint64_t fb = kd_pl_bytes(full, repeat), lb = kd_pl_bytes(like, repeat);
    printf("# medians of %d\n", repeat);
    printf("full put: wall %.2f ms, server %.2f ms, %llu bytes sent (%.3f a nonzero)\n", fw, fs,
           (unsigned long long)fb, (double)fb / (double)m->nnz);
    printf("like put: wall %.2f ms, server %.2f ms, %llu bytes sent (%.3f a nonzero: 8 nnz + %lld "
           "bytes)\n",
           lw, ls, (unsigned long long)lb, (double)lb / (double)m->nnz,
           (long long)lb - 8 * (long long)m->nnz);
    if (fs > 0.0 && ls >= 0.0)
        printf("ratio like / full, server time: %.3f (target <= 0.25)\n", ls / fs);
    else
        printf("ratio like / full, server time: n/a (the server's put replies carry no time_ms)\n");
    printf("ratio like / full, client wall time: %.3f\n", fw > 0.0 ? lw / fw : 0.0);
}

int kd_bench_putlike_main(int argc, char **argv)
{
    kd_bench_service_t svc;
    kd_bench_service_init(&svc);
    int64_t n = 100;
    int repeat = 5;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc, took = kd_bench_service_option(&svc, argc, argv, &i);
        if (took != 0) {
            if (took > 0)
                continue;
            kd_pl_usage();
            return 2;
        }
        if (strcmp(a, "--n") == 0 && has)
            n = atoll(argv[++i]);
        else if (strcmp(a, "--repeat") == 0 && has)
            repeat = atoi(argv[++i]);
        else if (strcmp(a, "--persist") == 0 && has)
            svc.persist = argv[++i];
        else {
            kd_pl_usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (n < 2 || n > 700 || repeat < 1 || repeat > KD_PL_MAX_REPEAT) {
        fprintf(stderr, "krylov-bench putlike: --n 2..700, --repeat 1..%d\n", KD_PL_MAX_REPEAT);
        return 2;
    }
    kd_pl_matrix_t m;
    kd_bench_put_t full[KD_PL_MAX_REPEAT], like[KD_PL_MAX_REPEAT];
    krylov_client_t *c = NULL;
    int status = 1;
    if (kd_pl_make(&m, n) != 0) {
        fprintf(stderr, "krylov-bench putlike: out of memory\n");
        goto out;
    }
    if ((c = kd_bench_service_open(&svc)) == NULL)
        goto out;
    krylov_server_status_t ss;
    if (krylov_status(c, &ss) == KRYLOV_OK)
        printf("# server %s on %s (%s)\n", svc.address, ss.device, ss.platform);
    printf("# putlike: lap3d %lld^3, %lld rows, %lld nonzeros, float64, %d of each; %s; persist "
           "%s\n",
           (long long)n, (long long)m.rows, (long long)m.nnz, repeat,
           svc.spawn == NULL ? "the daemon given"
           : svc.state       ? "daemon started here, with a state directory"
                             : "daemon started here, no state directory",
           svc.persist != NULL ? svc.persist : "(the server's default)");
    fflush(stdout);
    krylov_matrix_info_t base;
    kd_pl_values(&m, 1);
    if (krylov_put_csr(c, m.rows, m.rows, m.indptr, m.indices, m.values, NULL, &base) !=
        KRYLOV_OK) {
        kd_pl_fail(c, "the base put");
        goto out;
    }
    if (kd_pl_run(c, &svc, &m, base.id, repeat, full, like) != 0)
        goto out;
    kd_pl_report(&m, full, like, repeat);
    kd_pl_values(&m, 3);
    status = kd_pl_check(c, &m, base.id) == 0 ? 0 : 1;
    if (krylov_drop(c, base.id) != KRYLOV_OK) {
        kd_pl_fail(c, "drop");
        status = 1;
    }
out:
    if (kd_bench_service_close(&svc, c) != 0 && svc.spawn != NULL) {
        fprintf(stderr, "krylov-bench putlike: the daemon did not stop cleanly\n");
        status = 1;
    }
    kd_pl_free(&m);
    return status;
}
