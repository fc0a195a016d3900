/*
 * krylov-bench heat: issue 22's time-stepping loop through a krylovd, as a client sees it. A 2-D
 * heat equation on an n x n grid, backward Euler with a step that changes every step:
 *
 *   A_k = I + dt_k L,  dt_k = dt (1 + 0.5 sin k),  u_{k+1} = A_k^-1 u_k,
 *
 * L the 5-point stencil (4 on the diagonal, -1 to each neighbour; its eigenvalues lie in (0, 8),
 * so A_k's condition number, about 1 + 8 dt_k, and CG's iterations do not depend on n: a few
 * dozen at the default dt 4). Every solve is CG + Jacobi to rtol 1e-8 from x0 = 0, b = u_k.
 *
 *   (a) like:   step 0 a full put, then each step put(like = the previous step's matrix) with the
 *               new values alone, the solve, x back; the previous matrix dropped after the step.
 *   (b) re-put: a full put of A_k every step, the same solve, the matrix dropped after the step.
 *   (c) the solve alone: after each step of (a), the same solve again on the same matrix (its
 *               preconditioner now held); its server time (the reply's time_ms, which counts the
 *               transfers between host and device) plus the wire time of b and x at the raw
 *               loopback TCP rate measured in this run.
 *
 * Reported per step and as medians over steps 1.. (step 0 is a full put in both loops): the put's
 * client wall time and server time (the reply's time_ms where the server says it), the solve's
 * client wall and server time, iterations; the loops' totals; and issue 22's two ratios:
 * step(a) / (solve alone + wire of b and x) (target <= 1.3) and step(b) / step(a) (target >= 3).
 * The drops are timed apart (not in the step). The answer is checked: the final u of (a) and (b)
 * must agree to 1e-10 relative, and the last step's true residual ||u_k - A_k u_{k+1}|| / ||u_k||,
 * computed here on the host, must be within 10 rtol; otherwise the exit status is 1.
 */
#include "bench/bench.h"
#include "bench/service/bench_service.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "protocol/pattern.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_HEAT_RTOL 1e-8

typedef struct kd_heat {
    int64_t n, rows, nnz;
    int32_t *indptr, *indices;
    double *values; /* A_k's, rewritten for each step */
    double dt;
} kd_heat_t;

/* What one step cost; -1 where not measured. */
typedef struct kd_heat_step {
    double dt;
    double put_ms, put_server_ms, solve_ms, solve_server_ms, step_ms, drop_ms;
    double alone_ms, alone_server_ms; /* (c), loop (a) only */
    int64_t its;
    uint64_t put_bytes;
    char format[32];
} kd_heat_step_t;

static void kd_heat_usage(void)
{
    fprintf(stderr,
            "usage: krylov-bench heat [options]\n"
            "  --n N               grid points a side: N^2 rows, about 5 N^2 nonzeros (default "
            "1000)\n"
            "  --steps S           time steps per loop (default 50)\n"
            "  --dt DT             the step in units of the grid's h^2 (default 4: a few dozen "
            "CG iterations)\n"
            "  --perturb EPS       scale loop (b)'s last matrix by 1 + EPS: the answers' check "
            "must then fail\n"
            "%s",
            kd_bench_service_usage);
}

/* The 5-point pattern, columns ascending in each row (canonical: what put(like=) fills). */
static int kd_heat_make(kd_heat_t *h, int64_t n, double dt)
{
    memset(h, 0, sizeof(*h));
    h->n = n;
    h->rows = n * n;
    h->nnz = 5 * n * n - 4 * n;
    h->dt = dt;
    h->indptr = malloc((size_t)(h->rows + 1) * sizeof(int32_t));
    h->indices = malloc((size_t)h->nnz * sizeof(int32_t));
    h->values = malloc((size_t)h->nnz * sizeof(double));
    if (h->indptr == NULL || h->indices == NULL || h->values == NULL)
        return -1;
    int64_t e = 0;
    h->indptr[0] = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            const int64_t r = i * n + j;
            if (i > 0)
                h->indices[e++] = (int32_t)(r - n);
            if (j > 0)
                h->indices[e++] = (int32_t)(r - 1);
            h->indices[e++] = (int32_t)r;
            if (j + 1 < n)
                h->indices[e++] = (int32_t)(r + 1);
            if (i + 1 < n)
                h->indices[e++] = (int32_t)(r + n);
            h->indptr[r + 1] = (int32_t)e;
        }
    return e == h->nnz ? 0 : -1;
}

static void kd_heat_free(kd_heat_t *h)
{
    free(h->indptr);
    free(h->indices);
    free(h->values);
}

static double kd_heat_dt(const kd_heat_t *h, int k)
{
    return h->dt * (1.0 + 0.5 * sin((double)k));
}

/* h->values = I + dt L. */
static void kd_heat_values(kd_heat_t *h, double dt)
{
    for (int64_t r = 0; r < h->rows; r++)
        for (int32_t e = h->indptr[r]; e < h->indptr[r + 1]; e++)
            h->values[e] = h->indices[e] == r ? 1.0 + 4.0 * dt : -dt;
}

/* A smooth mode plus noise (deterministic), so the first steps damp every frequency. */
static void kd_heat_u0(const kd_heat_t *h, double *u)
{
    const double pi = 3.14159265358979323846, s = 1.0 / (double)(h->n + 1);
    for (int64_t i = 0; i < h->n; i++)
        for (int64_t j = 0; j < h->n; j++) {
            const int64_t r = i * h->n + j;
            u[r] = sin(pi * (double)(j + 1) * s) * sin(2.0 * pi * (double)(i + 1) * s) +
                   0.5 * (2.0 * kd_matgen_hash01(22, (uint64_t)r, 7) - 1.0);
        }
}

/* ||b - A x|| / ||b|| with A = h's current values. */
static double kd_heat_relres(const kd_heat_t *h, const double *b, const double *x)
{
    double rr = 0.0, bb = 0.0;
    for (int64_t r = 0; r < h->rows; r++) {
        double ax = 0.0;
        for (int32_t e = h->indptr[r]; e < h->indptr[r + 1]; e++)
            ax += h->values[e] * x[h->indices[e]];
        rr += (b[r] - ax) * (b[r] - ax);
        bb += b[r] * b[r];
    }
    return bb > 0.0 ? sqrt(rr / bb) : sqrt(rr);
}

static double kd_heat_reldiff(const double *a, const double *b, int64_t n)
{
    double dd = 0.0, aa = 0.0;
    for (int64_t i = 0; i < n; i++) {
        dd += (a[i] - b[i]) * (a[i] - b[i]);
        aa += a[i] * a[i];
    }
    return aa > 0.0 ? sqrt(dd / aa) : sqrt(dd);
}

static double kd_heat_norm(const double *v, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

static int kd_heat_fail(krylov_client_t *c, const char *what)
{
    fprintf(stderr, "krylov-bench heat: %s: %s %s\n", what, krylov_error_code(c),
            krylov_error_message(c));
    return -1;
}

/* b -> x with CG + Jacobi; the client's wall time and the result. */
static int kd_heat_solve(krylov_client_t *c, const kd_heat_t *h, const char *id, const double *b,
                         double *x, double *wall_ms, krylov_solve_result_t *res)
{
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.method = "cg";
    opt.preconditioner = "jacobi";
    opt.rtol = KD_HEAT_RTOL;
    const uint64_t t0 = kd_clock_ns();
    if (krylov_solve(c, id, b, h->rows, &opt, x, res) != KRYLOV_OK)
        return kd_heat_fail(c, "solve");
    *wall_ms = kd_clock_ms_since(t0);
    krylov_solve_result_free(res);
    if (strcmp(res->status, "converged") != 0) {
        fprintf(stderr, "krylov-bench heat: the solve ended %s after %lld iterations: %s\n",
                res->status, (long long)res->iterations, res->message);
        return -1;
    }
    return 0;
}

static int kd_heat_drop(krylov_client_t *c, const char *id, double *ms)
{
    const uint64_t t0 = kd_clock_ns();
    if (krylov_drop(c, id) != KRYLOV_OK)
        return kd_heat_fail(c, "drop");
    *ms = kd_clock_ms_since(t0);
    return 0;
}

/* The current values as a new matrix: a full put, or with like_id != NULL the values alone. */
static int kd_heat_put(krylov_client_t *c, kd_bench_service_t *svc, const kd_heat_t *h,
                       const char *like_id, krylov_matrix_info_t *info, kd_heat_step_t *st)
{
    kd_bench_put_t put;
    if (kd_bench_service_put(svc, c, h->rows, h->indptr, h->indices, h->values, like_id, info,
                             &put) != KRYLOV_OK)
        return kd_heat_fail(c, like_id != NULL ? "put with like" : "put");
    st->put_ms = put.wall_ms;
    st->put_server_ms = put.server_ms;
    st->put_bytes = put.bytes;
    snprintf(st->format, sizeof(st->format), "%s", put.format);
    return 0;
}

/*
 * One loop from u0 (like: loop (a) with (c) after each step; else loop (b)); st[steps] filled,
 * the last step's right-hand side into last_b and the final u into u. perturb scales the last
 * matrix (loop (b) only).
 */
static int kd_heat_loop(krylov_client_t *c, kd_bench_service_t *svc, kd_heat_t *h, int like,
                        int steps, double perturb, const double *u0, double *u, double *last_b,
                        kd_heat_step_t *st)
{
    double *x = malloc((size_t)h->rows * sizeof(double)),
           *again = like ? malloc((size_t)h->rows * sizeof(double)) : NULL;
    char prev[33] = "";
    int rc = x == NULL || (like && again == NULL) ? -1 : 0;
    memcpy(u, u0, (size_t)h->rows * sizeof(double));
    for (int k = 0; k < steps && rc == 0; k++) {
        kd_heat_step_t *s = &st[k];
        memset(s, 0, sizeof(*s));
        s->dt = kd_heat_dt(h, k);
        s->alone_ms = s->alone_server_ms = -1.0;
        kd_heat_values(h, s->dt);
        if (!like && k == steps - 1 && perturb != 0.0)
            for (int64_t e = 0; e < h->nnz; e++)
                h->values[e] *= 1.0 + perturb;
        krylov_matrix_info_t info;
        krylov_solve_result_t res;
        if (kd_heat_put(c, svc, h, like && k > 0 ? prev : NULL, &info, s) != 0 ||
            kd_heat_solve(c, h, info.id, u, x, &s->solve_ms, &res) != 0) {
            rc = -1;
            break;
        }
        s->solve_server_ms = res.time_ms;
        s->its = res.iterations;
        s->step_ms = s->put_ms + s->solve_ms;
        if (like && (kd_heat_solve(c, h, info.id, u, again, &s->alone_ms, &res) != 0 ||
                     (prev[0] != '\0' && kd_heat_drop(c, prev, &s->drop_ms) != 0))) {
            rc = -1;
            break;
        }
        s->alone_server_ms = like ? res.time_ms : -1.0;
        if (!like && kd_heat_drop(c, info.id, &s->drop_ms) != 0) {
            rc = -1;
            break;
        }
        snprintf(prev, sizeof(prev), "%s", like ? info.id : "");
        memcpy(last_b, u, (size_t)h->rows * sizeof(double));
        memcpy(u, x, (size_t)h->rows * sizeof(double));
    }
    double ms;
    if (prev[0] != '\0' && kd_heat_drop(c, prev, &ms) != 0)
        rc = -1;
    free(x);
    free(again);
    return rc;
}

/* Both kinds of put and solve once, dropped again: programs built, nothing timed. */
static int kd_heat_warm(krylov_client_t *c, kd_bench_service_t *svc, kd_heat_t *h, double *u0)
{
    double *x = malloc((size_t)h->rows * sizeof(double));
    krylov_matrix_info_t first, second;
    kd_heat_step_t s;
    krylov_solve_result_t res;
    double ms;
    int rc = -1;
    kd_heat_values(h, 0.5 * h->dt);
    if (x != NULL && kd_heat_put(c, svc, h, NULL, &first, &s) == 0) {
        kd_heat_values(h, 0.25 * h->dt);
        if (kd_heat_solve(c, h, first.id, u0, x, &ms, &res) == 0 &&
            kd_heat_put(c, svc, h, first.id, &second, &s) == 0) {
            rc = kd_heat_solve(c, h, second.id, u0, x, &ms, &res);
            if (kd_heat_drop(c, second.id, &ms) != 0)
                rc = -1;
        }
        if (kd_heat_drop(c, first.id, &ms) != 0)
            rc = -1;
    }
    free(x);
    return rc;
}

/* Median of a field over steps 1.. (all steps when there is only one). */
static double kd_heat_median(const kd_heat_step_t *st, int steps, size_t offset)
{
    double v[4096];
    size_t n = 0;
    for (int k = steps > 1 ? 1 : 0; k < steps && n < 4096; k++) {
        const double f = *(const double *)((const char *)&st[k] + offset);
        if (f >= 0.0)
            v[n++] = f;
    }
    return n > 0 ? kd_bench_median(v, n) : -1.0;
}

static double kd_heat_total(const kd_heat_step_t *st, int steps)
{
    double t = 0.0;
    for (int k = 0; k < steps; k++)
        t += st[k].step_ms;
    return t;
}

static int64_t kd_heat_median_its(const kd_heat_step_t *st, int steps)
{
    double v[4096];
    size_t n = 0;
    for (int k = steps > 1 ? 1 : 0; k < steps && n < 4096; k++)
        v[n++] = (double)st[k].its;
    return (int64_t)kd_bench_median(v, n);
}

static void kd_heat_print_steps(const char *loop, const kd_heat_step_t *st, int steps)
{
    printf("# loop %s, per step: ms of the client's wall clock; *_srv: the reply's time_ms (-1: "
           "not said)\n",
           loop);
    printf("%-6s %4s %7s %9s %9s %12s %9s %9s %5s %9s %9s %9s %7s\n", "loop", "step", "dt",
           "put_ms", "put_srv", "put_bytes", "solve_ms", "solve_srv", "its", "step_ms", "alone_srv",
           "drop_ms", "format");
    for (int k = 0; k < steps; k++) {
        const kd_heat_step_t *s = &st[k];
        printf("%-6s %4d %7.3f %9.2f %9.2f %12llu %9.2f %9.2f %5lld %9.2f %9.2f %9.2f %s\n", loop,
               k, s->dt, s->put_ms, s->put_server_ms, (unsigned long long)s->put_bytes, s->solve_ms,
               s->solve_server_ms, (long long)s->its, s->step_ms, s->alone_server_ms, s->drop_ms,
               s->format);
    }
}

#define KD_HEAT_MED(st, steps, field) kd_heat_median(st, steps, offsetof(kd_heat_step_t, field))

/* The summary: medians, ratios and the wire model; returns nothing to check. */
static void kd_heat_summary(const kd_heat_t *h, const kd_heat_step_t *a, const kd_heat_step_t *b,
                            int steps, double tcp_rate, double hash_ms)
{
    const double step_a = KD_HEAT_MED(a, steps, step_ms), step_b = KD_HEAT_MED(b, steps, step_ms);
    const double alone = KD_HEAT_MED(a, steps, alone_server_ms);
    const double bx_bytes = 2.0 * (double)h->rows * 8.0, val_bytes = (double)h->nnz * 8.0;
    const double wire_bx = tcp_rate > 0.0 ? bx_bytes / tcp_rate * 1e3 : 0.0;
    const double wire_val = tcp_rate > 0.0 ? val_bytes / tcp_rate * 1e3 : 0.0;
    printf("# medians over steps 1..%d (step 0 is a full put in both loops)\n", steps - 1);
    printf("%-34s %10s %10s %10s %10s %6s %10s %10s\n", "loop", "put_ms", "put_srv", "solve_ms",
           "solve_srv", "its", "step_ms", "total_ms");
    printf("%-34s %10.2f %10.2f %10.2f %10.2f %6lld %10.2f %10.1f\n", "(a) like: values + solve",
           KD_HEAT_MED(a, steps, put_ms), KD_HEAT_MED(a, steps, put_server_ms),
           KD_HEAT_MED(a, steps, solve_ms), KD_HEAT_MED(a, steps, solve_server_ms),
           (long long)kd_heat_median_its(a, steps), step_a, kd_heat_total(a, steps));
    printf("%-34s %10.2f %10.2f %10.2f %10.2f %6lld %10.2f %10.1f\n",
           "(b) re-put: full put + solve", KD_HEAT_MED(b, steps, put_ms),
           KD_HEAT_MED(b, steps, put_server_ms), KD_HEAT_MED(b, steps, solve_ms),
           KD_HEAT_MED(b, steps, solve_server_ms), (long long)kd_heat_median_its(b, steps), step_b,
           kd_heat_total(b, steps));
    printf("%-34s %10s %10s %10.2f %10.2f\n", "(c) the solve alone (same matrix)", "", "",
           KD_HEAT_MED(a, steps, alone_ms), alone);
    printf("drops (not in the steps): (a) %.2f ms, (b) %.2f ms\n", KD_HEAT_MED(a, steps, drop_ms),
           KD_HEAT_MED(b, steps, drop_ms));
    printf("raw loopback TCP: %.0f MB/s; b + x %.1f MB: %.2f ms; the values %.1f MB: %.2f ms; "
           "the client's pattern hash (SHA-256, every put with like): %.2f ms\n",
           tcp_rate / 1e6, bx_bytes / 1e6, wire_bx, val_bytes / 1e6, wire_val, hash_ms);
    const double denom = alone + wire_bx;
    printf("ratio step(a) / (solve alone + wire of b and x): %.3f (target <= 1.3); the wire's "
           "floor with the values on it, (solve + wire of b, x and values) / (solve + wire of b "
           "and x): %.3f\n",
           denom > 0.0 ? step_a / denom : 0.0, denom > 0.0 ? (denom + wire_val) / denom : 0.0);
    printf("ratio step(b) / step(a): %.3f (target >= 3)\n", step_a > 0.0 ? step_b / step_a : 0.0);
}

/* The client's SHA-256 of the pattern, median of 3, ms. */
static double kd_heat_hash_ms(const kd_heat_t *h)
{
    const kd_csr_t p = {.rows = h->rows,
                        .cols = h->rows,
                        .nnz = h->nnz,
                        .indptr = h->indptr,
                        .indices = h->indices};
    double v[3];
    uint8_t out[16];
    for (int r = 0; r < 3; r++) {
        const uint64_t t0 = kd_clock_ns();
        if (kd_pattern_hash(&p, out) != KD_OK)
            return -1.0;
        v[r] = kd_clock_ms_since(t0);
    }
    return kd_bench_median(v, 3);
}

int kd_bench_heat_main(int argc, char **argv)
{
    kd_bench_service_t svc;
    kd_bench_service_init(&svc);
    int64_t n = 1000;
    int steps = 50;
    double dt = 4.0, perturb = 0.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc, took = kd_bench_service_option(&svc, argc, argv, &i);
        if (took != 0) {
            if (took > 0)
                continue;
            kd_heat_usage();
            return 2;
        }
        if (strcmp(a, "--n") == 0 && has)
            n = atoll(argv[++i]);
        else if (strcmp(a, "--steps") == 0 && has)
            steps = atoi(argv[++i]);
        else if (strcmp(a, "--dt") == 0 && has)
            dt = atof(argv[++i]);
        else if (strcmp(a, "--perturb") == 0 && has)
            perturb = atof(argv[++i]);
        else {
            kd_heat_usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (n < 2 || n > 20000 || steps < 1 || steps > 4096 || !(dt > 0.0)) {
        fprintf(stderr, "krylov-bench heat: --n 2..20000, --steps 1..4096, --dt > 0\n");
        return 2;
    }
    kd_heat_t h;
    const size_t vbytes = (size_t)(n * n) * sizeof(double);
    double *u0 = malloc(vbytes), *ua = malloc(vbytes), *ub = malloc(vbytes), *ba = malloc(vbytes),
           *bb = malloc(vbytes);
    kd_heat_step_t *sa = calloc((size_t)steps, sizeof(*sa)),
                   *sb = calloc((size_t)steps, sizeof(*sb));
    int status = 1;
    krylov_client_t *c = NULL;
    if (kd_heat_make(&h, n, dt) != 0 || u0 == NULL || ua == NULL || ub == NULL || ba == NULL ||
        bb == NULL || sa == NULL || sb == NULL) {
        fprintf(stderr, "krylov-bench heat: out of memory\n");
        goto out;
    }
    kd_heat_u0(&h, u0);
    const double tcp_rate = kd_bench_loopback_rate((size_t)64 << 20, 3);
    const double hash_ms = kd_heat_hash_ms(&h);
    if ((c = kd_bench_service_open(&svc)) == NULL)
        goto out;
    krylov_server_status_t ss;
    if (krylov_status(c, &ss) == KRYLOV_OK)
        printf("# server %s on %s (%s)\n", svc.address, ss.device, ss.platform);
    printf("# heat %lld^2: %lld rows, %lld nonzeros, %d steps, dt_k = %g (1 + 0.5 sin k), cg + "
           "jacobi to %g, x0 = 0; %s\n",
           (long long)n, (long long)h.rows, (long long)h.nnz, steps, dt, KD_HEAT_RTOL,
           svc.spawn == NULL ? "the daemon given"
           : svc.state       ? "daemon started here, with a state directory"
                             : "daemon started here, no state directory");
    fflush(stdout);
    if (kd_heat_warm(c, &svc, &h, u0) != 0 ||
        kd_heat_loop(c, &svc, &h, 1, steps, 0.0, u0, ua, ba, sa) != 0 ||
        kd_heat_loop(c, &svc, &h, 0, steps, perturb, u0, ub, bb, sb) != 0)
        goto out;
    kd_heat_print_steps("a", sa, steps);
    kd_heat_print_steps("b", sb, steps);
    kd_heat_summary(&h, sa, sb, steps, tcp_rate, hash_ms);
    kd_heat_values(&h, kd_heat_dt(&h, steps - 1));
    const double diff = kd_heat_reldiff(ua, ub, h.rows), res_a = kd_heat_relres(&h, ba, ua),
                 res_b = kd_heat_relres(&h, bb, ub);
    const int same = diff <= 1e-10,
              solved = res_a <= 10.0 * KD_HEAT_RTOL && res_b <= 10.0 * KD_HEAT_RTOL;
    printf("check: final u of (a) and (b) differ by %.3e relative (<= 1e-10: %s); the last "
           "step's true residual on the host (a) %.3e, (b) %.3e (<= %g: %s)\n",
           diff, same ? "ok" : "FAILED", res_a, res_b, 10.0 * KD_HEAT_RTOL,
           solved ? "ok" : "FAILED");
    printf("final ||u||: (a) %.12e, (b) %.12e (bench/peers/cupy_heat.py prints its own)\n",
           kd_heat_norm(ua, h.rows), kd_heat_norm(ub, h.rows));
    status = same && solved ? 0 : 1;
out:
    if (kd_bench_service_close(&svc, c) != 0 && svc.spawn != NULL) {
        fprintf(stderr, "krylov-bench heat: the daemon did not stop cleanly\n");
        status = 1;
    }
    kd_heat_free(&h);
    free(u0);
    free(ua);
    free(ub);
    free(ba);
    free(bb);
    free(sa);
    free(sb);
    return status;
}
