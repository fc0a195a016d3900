/*
 * libkrylov's shared memory (issue 35): a real krylovd listening on loopback TCP and a Unix
 * socket. spmv, spmm, solve, put_csr and put_like through the client's region (Unix socket) must
 * give what the same calls give as bins over TCP and what the CPU computes, on fresh random
 * inputs with the outputs poisoned first, below and above the 256 KiB threshold; the region is
 * registered once and reused; krylov_shm_alloc's blocks are used where they lie; closing the
 * client leaves the server no mapping. A server with a tiny --max-shm-bytes, one with
 * --max-shm-bytes 0 and a TCP connection all get bins and right answers.
 */
#include "kd_daemon.h"
#include "kd_test.h"
#include "krylov.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_N 2000  /* 16 KB vectors: bins */
#define LARGE_N 60000 /* 480 KB vectors: shared memory */

static kd_daemon_t server;
static char unix_address[320];
static krylov_client_t *local;  /* unix:, shared memory */
static krylov_client_t *remote; /* TCP, bins */

/* A random symmetric tridiagonal matrix with a dominant positive diagonal (SPD). */
typedef struct test_matrix {
    int64_t n;
    int32_t *indptr, *indices;
    double *values;
    char id[33];
} test_matrix_t;

static void matrix_values(test_matrix_t *m)
{
    const int64_t n = m->n;
    double *off = malloc((size_t)n * sizeof(double));
    MUST(off != NULL);
    for (int64_t i = 0; i < n; i++)
        off[i] = kd_test_rand_double(-1.0, 1.0); /* a(i, i+1) = a(i+1, i) */
    for (int64_t i = 0; i < n; i++) {
        int32_t e = m->indptr[i];
        if (i > 0)
            m->values[e++] = off[i - 1];
        m->values[e++] =
            1.0 + kd_test_rand_double(0.0, 2.0) + fabs(off[i]) + (i > 0 ? fabs(off[i - 1]) : 0.0);
        if (i + 1 < n)
            m->values[e++] = off[i];
    }
    free(off);
}

static test_matrix_t matrix_new(int64_t n)
{
    test_matrix_t m = {.n = n};
    m.indptr = malloc((size_t)(n + 1) * sizeof(int32_t));
    m.indices = malloc((size_t)(3 * n) * sizeof(int32_t));
    m.values = malloc((size_t)(3 * n) * sizeof(double));
    MUST(m.indptr != NULL && m.indices != NULL && m.values != NULL);
    int32_t e = 0;
    for (int64_t i = 0; i < n; i++) {
        m.indptr[i] = e;
        for (int64_t j = i - 1; j <= i + 1; j++)
            if (j >= 0 && j < n)
                m.indices[e++] = (int32_t)j;
    }
    m.indptr[n] = e;
    matrix_values(&m);
    return m;
}

static void matrix_free(test_matrix_t *m)
{
    free(m->indptr);
    free(m->indices);
    free(m->values);
}

/* y = alpha A x + beta y on the CPU. */
static void cpu_spmv(const test_matrix_t *m, double alpha, const double *x, double beta, double *y)
{
    for (int64_t i = 0; i < m->n; i++) {
        double s = 0.0;
        for (int32_t e = m->indptr[i]; e < m->indptr[i + 1]; e++)
            s += m->values[e] * x[m->indices[e]];
        y[i] = alpha * s + (beta != 0.0 ? beta * y[i] : 0.0);
    }
}

static double *vector_random(int64_t n)
{
    double *v = malloc((size_t)n * sizeof(double));
    MUST(v != NULL);
    for (int64_t i = 0; i < n; i++)
        v[i] = kd_test_rand_double(-1.0, 1.0);
    return v;
}

static double *vector_poisoned(int64_t n)
{
    double *v = malloc((size_t)n * sizeof(double));
    MUST(v != NULL);
    for (int64_t i = 0; i < n; i++)
        v[i] = NAN;
    return v;
}

/* max |a - b| / max(1, |b|) */
static double vector_error(const double *a, const double *b, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]) / (fabs(b[i]) > 1.0 ? fabs(b[i]) : 1.0);
        if (!(d <= worst))
            worst = isnan(d) ? INFINITY : d;
    }
    return worst;
}

/* ||b - A x|| / ||b|| */
static double relative_residual(const test_matrix_t *m, const double *x, const double *b)
{
    double *ax = malloc((size_t)m->n * sizeof(double));
    MUST(ax != NULL);
    cpu_spmv(m, 1.0, x, 0.0, ax);
    double r = 0.0, nb = 0.0;
    for (int64_t i = 0; i < m->n; i++) {
        r += (b[i] - ax[i]) * (b[i] - ax[i]);
        nb += b[i] * b[i];
    }
    free(ax);
    return sqrt(r / nb);
}

static int64_t server_shm_regions(void)
{
    krylov_server_status_t st;
    MUST(krylov_status(remote, &st) == KRYLOV_OK);
    return st.shm_regions;
}

/* Mappings of the client's memfds in the server (/proc/PID/maps lines). */
static int server_memfd_maps(pid_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    int count = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        count += strstr(line, "memfd:krylov-shm") != NULL;
    fclose(f);
    return count;
}

/* Wait up to 10 s for the server's count of regions to reach `want` (a region of a closed
 * connection goes once the server has seen the close). */
static int settle_regions(pid_t pid, int64_t want)
{
    for (int i = 0; i < 1000; i++) {
        if (server_shm_regions() == want && (want != 0 || server_memfd_maps(pid) == 0))
            return 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static krylov_client_t *client_connect(const char *address)
{
    krylov_client_t *c = krylov_client_new();
    MUST(c != NULL);
    if (krylov_connect(c, address) != KRYLOV_OK) {
        fprintf(stderr, "connect %s: %s\n", address, krylov_error_message(c));
        exit(1);
    }
    return c;
}

/* Put m through c (its values as a bin or through the region) and check that TCP's put of the
 * same arrays names the same matrix: the values arrived intact. */
static void put_both(krylov_client_t *c, test_matrix_t *m)
{
    krylov_matrix_info_t info, again;
    MUST(krylov_put_csr(c, m->n, m->n, m->indptr, m->indices, m->values, NULL, &info) == KRYLOV_OK);
    memcpy(m->id, info.id, sizeof(m->id));
    MUST(krylov_put_csr(remote, m->n, m->n, m->indptr, m->indices, m->values, NULL, &again) ==
         KRYLOV_OK);
    CHECK(strcmp(again.id, m->id) == 0);
}

/* spmv (k = 1) or spmm through `c` and TCP against the CPU, beta 0 and not. */
static void check_spmv(krylov_client_t *c, const test_matrix_t *m, int64_t k, int expect_shm)
{
    const int64_t n = m->n, nk = n * k;
    double *x = vector_random(nk), *y0 = vector_random(nk), *ref = malloc((size_t)nk * 8);
    MUST(ref != NULL);
    for (int pass = 0; pass < 2; pass++) {
        const double alpha = kd_test_rand_double(0.5, 2.0), beta = pass ? -0.75 : 0.0;
        for (int64_t j = 0; j < k; j++) {
            memcpy(ref + j * n, y0 + j * n, (size_t)n * 8);
            cpu_spmv(m, alpha, x + j * n, beta, ref + j * n);
        }
        double *yl = vector_poisoned(nk), *yr = vector_poisoned(nk);
        if (beta != 0.0) {
            memcpy(yl, y0, (size_t)nk * 8);
            memcpy(yr, y0, (size_t)nk * 8);
        }
        const int64_t uses = krylov_shm_requests(c);
        CHECK_EQ_INT(krylov_spmm(c, m->id, k, alpha, x, n, beta, yl, n, NULL), KRYLOV_OK);
        CHECK_EQ_INT(krylov_spmm(remote, m->id, k, alpha, x, n, beta, yr, n, NULL), KRYLOV_OK);
        CHECK_EQ_INT(krylov_shm_requests(c) - uses, expect_shm);
        CHECK_MSG(vector_error(yl, ref, nk) <= 1e-12, "n %lld k %lld beta %g: %g", (long long)n,
                  (long long)k, beta, vector_error(yl, ref, nk));
        CHECK(vector_error(yl, yr, nk) <= 1e-14);
        free(yl);
        free(yr);
    }
    free(x);
    free(y0);
    free(ref);
}

/* solve through `c` and TCP: both converge to the CPU's tolerance and agree. */
static void check_solve(krylov_client_t *c, const test_matrix_t *m, int64_t nrhs, int with_x0,
                        int expect_shm)
{
    const int64_t n = m->n, total = n * nrhs;
    double *b = vector_random(total), *x0 = with_x0 ? vector_random(total) : NULL;
    double *xl = vector_poisoned(total), *xr = vector_poisoned(total);
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.rtol = 1e-10;
    opt.nrhs = nrhs;
    opt.x0 = x0;
    krylov_solve_result_t rl[4], rr[4];
    const int64_t uses = krylov_shm_requests(c);
    CHECK_EQ_INT(krylov_solve(c, m->id, b, n, &opt, xl, rl), KRYLOV_OK);
    CHECK_EQ_INT(krylov_solve(remote, m->id, b, n, &opt, xr, rr), KRYLOV_OK);
    CHECK_EQ_INT(krylov_shm_requests(c) - uses, expect_shm);
    for (int64_t k = 0; k < nrhs; k++) {
        CHECK(strcmp(rl[k].status, "converged") == 0);
        CHECK_MSG(relative_residual(m, xl + k * n, b + k * n) <= 1e-9, "rhs %lld: %g", (long long)k,
                  relative_residual(m, xl + k * n, b + k * n));
        krylov_solve_result_free(&rl[k]);
        krylov_solve_result_free(&rr[k]);
    }
    CHECK_MSG(vector_error(xl, xr, total) <= 1e-8, "%g", vector_error(xl, xr, total));
    free(b);
    free(x0);
    free(xl);
    free(xr);
}

static test_matrix_t small_m, large_m;

static void test_spmv_solve_put(void)
{
    REQUIRE(krylov_shm_enabled(local) == 1);
    REQUIRE(krylov_shm_enabled(remote) == 0);
    small_m = matrix_new(SMALL_N);
    large_m = matrix_new(LARGE_N);
    put_both(local, &small_m); /* 48 KB of values: a bin */
    const int64_t uses = krylov_shm_requests(local);
    put_both(local, &large_m);                          /* 1.4 MB of values: through the region */
    CHECK_EQ_INT(krylov_shm_requests(local) - uses, 0); /* matrix.put's are not counted */
    CHECK_EQ_INT(server_shm_regions(), 1);
    check_spmv(local, &small_m, 1, 0);
    check_spmv(local, &large_m, 1, 1);
    check_spmv(local, &small_m, 3, 0);
    check_spmv(local, &large_m, 3, 1);
    check_solve(local, &small_m, 1, 0, 0);
    check_solve(local, &large_m, 1, 0, 1);
    check_solve(local, &large_m, 1, 1, 1);
    check_solve(local, &large_m, 2, 1, 1);
}

/* solve_many through `c` (b, x0 in the region when large) and TCP: same answers, each converged. */
static void check_many(krylov_client_t *c, int large, int expect_shm)
{
    enum { COUNT = 6 };
    krylov_solve_item_t local_items[COUNT], remote_items[COUNT];
    krylov_item_result_t lr[COUNT], rr[COUNT];
    double *bs[COUNT], *x0s[COUNT];
    const test_matrix_t *ms[COUNT];
    for (int k = 0; k < COUNT; k++) {
        ms[k] = large && k % 2 == 0 ? &large_m : &small_m;
        const int64_t n = ms[k]->n;
        bs[k] = vector_random(n);
        x0s[k] = k % 3 == 0 ? vector_random(n) : NULL;
        local_items[k] = (krylov_solve_item_t){
            .id = ms[k]->id, .b = bs[k], .n = n, .x0 = x0s[k], .x = vector_poisoned(n)};
        remote_items[k] = local_items[k];
        remote_items[k].x = vector_poisoned(n);
    }
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.rtol = 1e-10;
    const int64_t uses = krylov_shm_requests(c);
    CHECK_EQ_INT(krylov_solve_many(c, local_items, COUNT, &opt, lr, NULL), KRYLOV_OK);
    CHECK_EQ_INT(krylov_solve_many(remote, remote_items, COUNT, &opt, rr, NULL), KRYLOV_OK);
    CHECK_EQ_INT(krylov_shm_requests(c) - uses, expect_shm);
    for (int k = 0; k < COUNT; k++) {
        const int64_t n = ms[k]->n;
        CHECK_MSG(strcmp(lr[k].status, "converged") == 0, "item %d: %s %s", k, lr[k].status,
                  lr[k].message);
        CHECK(relative_residual(ms[k], local_items[k].x, bs[k]) <= 1e-9);
        CHECK(vector_error(local_items[k].x, remote_items[k].x, n) <= 1e-8);
        free(local_items[k].x);
        free(remote_items[k].x);
        free(bs[k]);
        free(x0s[k]);
    }
}

static void test_solve_many(void)
{
    REQUIRE(large_m.id[0] != '\0');
    check_many(local, 0, 0);
    check_many(local, 1, 1);
}

static void test_put_like(void)
{
    REQUIRE(large_m.id[0] != '\0');
    test_matrix_t next = large_m; /* same pattern, new values */
    next.values = malloc((size_t)large_m.indptr[large_m.n] * sizeof(double));
    MUST(next.values != NULL);
    matrix_values(&next);
    krylov_matrix_info_t info, again;
    REQUIRE(krylov_put_like(local, large_m.id, next.n, next.n, next.indptr, next.indices,
                            next.values, NULL, &info) == KRYLOV_OK);
    CHECK(info.created == 1);
    CHECK(krylov_put_like(remote, large_m.id, next.n, next.n, next.indptr, next.indices,
                          next.values, NULL, &again) == KRYLOV_OK);
    CHECK(strcmp(info.id, again.id) == 0);
    CHECK(again.created == 0);
    memcpy(next.id, info.id, sizeof(next.id));
    check_spmv(local, &next, 1, 1);
    /* float32: narrowed into the region on the way (put_csr asks the server by the hash first,
     * so the name makes both puts send their values) */
    krylov_put_options_t f32 = {.dtype = "float32", .name = "f32"};
    int rc =
        krylov_put_csr(local, next.n, next.n, next.indptr, next.indices, next.values, &f32, &info);
    CHECK_MSG(rc == KRYLOV_OK, "%s", krylov_error_message(local));
    CHECK(krylov_put_csr(remote, next.n, next.n, next.indptr, next.indices, next.values, &f32,
                         &again) == KRYLOV_OK);
    CHECK(strcmp(info.id, again.id) == 0);
    CHECK(strcmp(info.dtype, "float32") == 0);
    free(next.values);
}

static void test_region_reused(void)
{
    const int64_t uses = krylov_shm_requests(local);
    double *x = vector_random(LARGE_N), *y = vector_poisoned(LARGE_N);
    for (int i = 0; i < 40; i++)
        CHECK(krylov_spmv(local, large_m.id, 1.0, x, LARGE_N, 0.0, y, LARGE_N) == KRYLOV_OK);
    CHECK_EQ_INT(krylov_shm_requests(local) - uses, 40);
    CHECK_EQ_INT(server_shm_regions(), 1);
    free(x);
    free(y);
}

/* Arrays in krylov_shm_alloc's blocks: named where they lie, results written there. */
static void test_alloc(void)
{
    const int64_t n = LARGE_N;
    const size_t vec = (size_t)n * sizeof(double);
    char *block = krylov_shm_alloc(local, 3 * vec);
    REQUIRE(block != NULL);
    double *x = (double *)(void *)block, *y = (double *)(void *)(block + vec);
    double *b = (double *)(void *)(block + 2 * vec);
    for (int64_t i = 0; i < n; i++) {
        x[i] = kd_test_rand_double(-1.0, 1.0);
        y[i] = NAN;
    }
    double *ref = malloc(vec);
    MUST(ref != NULL);
    cpu_spmv(&large_m, 1.5, x, 0.0, ref);
    const int64_t uses = krylov_shm_requests(local);
    CHECK(krylov_spmv(local, large_m.id, 1.5, x, n, 0.0, y, n) == KRYLOV_OK);
    CHECK(vector_error(y, ref, n) <= 1e-12);
    CHECK_EQ_INT(server_shm_regions(), 2); /* the arena and the block */
    /* b and x in the block: x written there by the server */
    memcpy(b, x, vec);
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.rtol = 1e-10;
    krylov_solve_result_t res;
    for (int64_t i = 0; i < n; i++)
        y[i] = NAN;
    CHECK(krylov_solve(local, large_m.id, b, n, &opt, y, &res) == KRYLOV_OK);
    CHECK(relative_residual(&large_m, y, b) <= 1e-9);
    krylov_solve_result_free(&res);
    /* in place (x overlapping b): the result comes through the arena instead */
    CHECK(krylov_solve(local, large_m.id, b, n, &opt, b, &res) == KRYLOV_OK);
    CHECK(vector_error(b, y, n) <= 1e-12);
    krylov_solve_result_free(&res);
    CHECK_EQ_INT(krylov_shm_requests(local) - uses, 3);
    CHECK(krylov_shm_free(local, block) == KRYLOV_OK);
    CHECK(krylov_shm_free(local, ref) == KRYLOV_EBADREQ);
    CHECK(krylov_shm_free(local, NULL) == KRYLOV_OK);
    CHECK(settle_regions(server.pid, 1));
    /* over TCP a block is plain memory: bins */
    double *plain = krylov_shm_alloc(remote, vec);
    REQUIRE(plain != NULL);
    for (int64_t i = 0; i < n; i++)
        plain[i] = NAN;
    double *want = malloc(vec);
    MUST(want != NULL);
    cpu_spmv(&large_m, 1.0, ref, 0.0, want);
    CHECK(krylov_spmv(remote, large_m.id, 1.0, ref, n, 0.0, plain, n) == KRYLOV_OK);
    CHECK(vector_error(plain, want, n) <= 1e-12);
    free(want);
    CHECK(krylov_shm_free(remote, plain) == KRYLOV_OK);
    free(ref);
}

static void test_set_off(void)
{
    krylov_shm_set(local, 0);
    CHECK(krylov_shm_enabled(local) == 0);
    CHECK(settle_regions(server.pid, 0));
    check_spmv(local, &large_m, 1, 0);
    krylov_shm_set(local, 1);
    CHECK(krylov_shm_enabled(local) == 1);
    check_spmv(local, &large_m, 1, 1);
}

static void test_close_unmaps(void)
{
    CHECK(server_memfd_maps(server.pid) >= 1);
    krylov_client_free(local);
    local = NULL;
    CHECK(settle_regions(server.pid, 0));
    CHECK_EQ_INT(server_memfd_maps(server.pid), 0);
}

/* Another server, its --max-shm-bytes as given: every answer right, as bins. */
static void check_server_without_room(const char *limit, int expect_enabled)
{
    kd_daemon_t d;
    char listen[340], address[340];
    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "/tmp/krylovd-test-XXXXXX");
    MUST(mkdtemp(d.dir) != NULL);
    snprintf(listen, sizeof(listen), "unix:%s/sock", d.dir);
    snprintf(address, sizeof(address), "unix:%s/sock", d.dir);
    const char *extra[] = {"--listen", listen, "--max-shm-bytes", limit, NULL};
    REQUIRE(kd_daemon_launch(&d, extra) == 0);
    krylov_client_t *c = client_connect(address);
    krylov_client_t *saved = remote;
    remote = client_connect(d.address);
    put_both(c, &large_m);
    check_spmv(c, &large_m, 1, 0);
    check_solve(c, &large_m, 1, 1, 0);
    CHECK_EQ_INT(krylov_shm_enabled(c), expect_enabled);
    CHECK_EQ_INT(krylov_shm_requests(c), 0);
    CHECK_EQ_INT(server_shm_regions(), 0);
    CHECK_EQ_INT(server_memfd_maps(d.pid), 0);
    krylov_client_free(c);
    krylov_client_free(remote);
    remote = saved;
    kd_daemon_stop(&d);
}

static void test_tiny_limit(void)
{
    check_server_without_room("65536", 1); /* no room: bins, shared memory still on */
}

static void test_zero_limit(void)
{
    check_server_without_room("0", 0); /* refused: off for the connection */
}

int main(void)
{
    kd_test_seed();
    memset(&server, 0, sizeof(server));
    snprintf(server.dir, sizeof(server.dir), "/tmp/krylovd-test-XXXXXX");
    MUST(mkdtemp(server.dir) != NULL);
    char listen[340];
    snprintf(listen, sizeof(listen), "unix:%s/sock", server.dir);
    snprintf(unix_address, sizeof(unix_address), "unix:%s/sock", server.dir);
    const char *extra[] = {"--listen", listen, NULL};
    MUST(kd_daemon_launch(&server, extra) == 0);
    local = client_connect(unix_address);
    remote = client_connect(server.address);
    RUN(test_spmv_solve_put);
    RUN(test_solve_many);
    RUN(test_put_like);
    RUN(test_region_reused);
    RUN(test_alloc);
    RUN(test_set_off);
    RUN(test_close_unmaps);
    RUN(test_tiny_limit);
    RUN(test_zero_limit);
    krylov_client_free(local);
    krylov_client_free(remote);
    matrix_free(&small_m);
    matrix_free(&large_m);
    kd_daemon_stop(&server);
    return kd_test_finish();
}
