/*
 * spmv requests that wait together are served together (server/handlers/spmv.c): a real krylovd is
 * kept busy with a solve while two clients pipeline a mix of spmv requests — one and several
 * columns, float64 and float32, alpha, beta with y, two matrices (one with empty rows and a dense
 * row, rectangular), a wrong x length, an unknown id — and every request must get exactly its own
 * answer, checked against the CPU reference (outputs poisoned first), or its own error; the
 * server's counters must show that they were grouped and that requests on one matrix shared
 * launches. Then the same mix without a busy worker, with fresh inputs. And solves: waiting
 * together on one matrix with the same parameters they run as one solve, yet each answers with
 * exactly the iteration counts it had alone and a true residual (computed here) within its rtol;
 * a NaN in one request's b is that request's status only.
 */
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_test.h"

#include <math.h>

static kd_daemon_t d;

typedef struct spec {
    int matrix; /* 0: R (rectangular, irregular), 1: P (2-D Laplacian), -1: an unknown id */
    int ncols;
    double alpha, beta;
    int f32;
    int bad_length;
} spec_t;

static const kd_csr_t *mats[2];
static char ids[2][33];

/* R: 300 x 200, rows 0..49 empty, row 100 dense, the rest a few random entries. */
static kd_csr_t *make_irregular(void)
{
    const int64_t rows = 300, cols = 200;
    int64_t cap = 200 + 250 * 4;
    int64_t *ri = malloc((size_t)cap * 8), *ci = malloc((size_t)cap * 8);
    double *v = malloc((size_t)cap * 8);
    int64_t n = 0;
    for (int64_t i = 50; i < rows; i++) {
        if (i == 100) {
            for (int64_t j = 0; j < cols; j++, n++) {
                ri[n] = i;
                ci[n] = j;
                v[n] = kd_test_rand_double(-1, 1);
            }
            continue;
        }
        for (int e = 0; e < 4; e++, n++) {
            ri[n] = i;
            ci[n] = (int64_t)(kd_test_rand_u64() % (uint64_t)cols);
            v[n] = kd_test_rand_double(-1, 1);
        }
    }
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    if (kd_csr_from_coo_arrays(rows, cols, n, ri, ci, KD_DTYPE_I64, v, KD_DTYPE_F64, KD_DTYPE_F64,
                               NULL, &m, &err) != KD_OK)
        fprintf(stderr, "building R: %s\n", err.message);
    free(ri);
    free(ci);
    free(v);
    return m;
}

typedef struct pending {
    spec_t s;
    double *x, *y0; /* inputs, float64 (float32 requests send them rounded) */
    int answered;
} pending_t;

static void write_request(kd_writer_t *w, uint64_t msgid, const pending_t *p)
{
    const spec_t *s = &p->s;
    const kd_csr_t *A = mats[s->matrix < 0 ? 0 : s->matrix];
    int64_t nx = A->cols * s->ncols - (s->bad_length ? 1 : 0), ny = A->rows * s->ncols;
    int npairs = 2 + (s->ncols > 1) + (s->alpha != 1.0) + (s->beta != 0.0) * 2 + s->f32;
    kd_rpc_begin(w, msgid, "spmv", (uint32_t)npairs);
    kd_w_kv_str(w, "id", s->matrix < 0 ? "0123456789abcdef0123456789abcdef" : ids[s->matrix]);
    if (s->f32) {
        float *xf = malloc((size_t)nx * 4 + 4), *yf = malloc((size_t)ny * 4 + 4);
        for (int64_t i = 0; i < nx; i++)
            xf[i] = (float)p->x[i];
        for (int64_t i = 0; i < ny; i++)
            yf[i] = (float)p->y0[i];
        kd_w_kv_bin(w, "x", xf, (size_t)nx * 4);
        if (s->beta != 0.0)
            kd_w_kv_bin(w, "y", yf, (size_t)ny * 4);
        kd_w_kv_str(w, "dtype", "float32");
        free(xf);
        free(yf);
    } else {
        kd_w_kv_bin(w, "x", p->x, (size_t)nx * 8);
        if (s->beta != 0.0)
            kd_w_kv_bin(w, "y", p->y0, (size_t)ny * 8);
    }
    if (s->ncols > 1)
        kd_w_kv_int(w, "ncols", s->ncols);
    if (s->alpha != 1.0)
        kd_w_kv_double(w, "alpha", s->alpha);
    if (s->beta != 0.0)
        kd_w_kv_double(w, "beta", s->beta);
}

/* Element i of a msgpack bin (not aligned) of float32 or float64 values. */
static double bin_value(const void *data, int f32, int64_t i)
{
    if (f32) {
        float f;
        memcpy(&f, (const char *)data + (size_t)i * 4, 4);
        return (double)f;
    }
    double v;
    memcpy(&v, (const char *)data + (size_t)i * 8, 8);
    return v;
}

/* The answer to p: its error, or y against the reference. */
static void check_answer(const pending_t *p, const kd_rpc_msg_t *m)
{
    const spec_t *s = &p->s;
    if (s->matrix < 0) {
        CHECK_MSG(strcmp(m->code, "NOT_FOUND") == 0, "unknown id: '%s'", m->code);
        return;
    }
    if (s->bad_length) {
        CHECK_MSG(strcmp(m->code, "BAD_REQUEST") == 0, "short x: '%s'", m->code);
        CHECK_STR_CONTAINS(m->message, "x has");
        return;
    }
    CHECK_MSG(m->code[0] == '\0', "%s %s", m->code, m->message);
    if (m->result == NULL)
        return;
    const kd_csr_t *A = mats[s->matrix];
    const int64_t ny = A->rows * s->ncols;
    double *got = malloc((size_t)ny * 8 + 8), *want = malloc((size_t)A->rows * 8 + 8);
    const void *data;
    size_t len;
    REQUIRE(kd_obj_bytes(kd_obj_get(m->result, "y"), &data, &len) == 0);
    CHECK_EQ_INT((int64_t)len, ny * (s->f32 ? 4 : 8));
    for (int64_t i = 0; i < ny; i++) /* poisoned, then filled from the answer */
        got[i] = NAN;
    for (int64_t i = 0; len == (size_t)ny * (s->f32 ? 4 : 8) && i < ny; i++)
        got[i] = bin_value(data, s->f32, i);
    double worst = 0;
    for (int c = 0; c < s->ncols; c++) {
        double xin[256], yin[512];
        for (int64_t j = 0; j < A->cols; j++)
            xin[j] = s->f32 ? (double)(float)p->x[c * A->cols + j] : p->x[c * A->cols + j];
        for (int64_t i = 0; i < A->rows; i++)
            yin[i] = s->f32 ? (double)(float)p->y0[c * A->rows + i] : p->y0[c * A->rows + i];
        memcpy(want, yin, (size_t)A->rows * 8);
        kd_csr_spmv_ref(A, xin, s->alpha, s->beta, want);
        for (int64_t i = 0; i < A->rows; i++) {
            double e = fabs(got[c * A->rows + i] - want[i]) / (1.0 + fabs(want[i]));
            worst = isnan(e) ? INFINITY : fmax(worst, e);
        }
    }
    CHECK_MSG(worst <= (s->f32 ? 1e-4 : 1e-12),
              "matrix %d ncols %d alpha %g beta %g f32 %d: "
              "error %g",
              s->matrix, s->ncols, s->alpha, s->beta, s->f32, worst);
    free(got);
    free(want);
}

static const spec_t mix[] = {
    {1, 1, 1.0, 0.0, 0, 0},  {1, 1, 1.0, 0.0, 0, 0},  {1, 3, 1.0, 0.0, 0, 0},
    {1, 1, 1.0, 0.0, 1, 0},  {1, 1, 2.5, 0.0, 0, 0},  {1, 1, 2.5, 0.0, 0, 0},
    {1, 2, 1.0, -0.5, 0, 0}, {0, 1, 1.0, 0.0, 0, 0},  {0, 2, 1.0, 0.0, 0, 0},
    {0, 1, 1.0, 0.0, 0, 1},  {-1, 1, 1.0, 0.0, 0, 0}, {0, 1, -1.0, 2.0, 1, 0},
    {1, 1, 1.0, 0.0, 0, 0},  {0, 1, 1.0, 0.0, 0, 0},
};
enum { NMIX = sizeof(mix) / sizeof(mix[0]) };

/* A solve on a 120 x 120 Laplacian that keeps the worker busy, with no check (so no yield)
 * until it ends, sent on r as msgid 901; returns once it runs. */
static void start_blocker(kd_rpc_t *r, kd_rpc_t *probe)
{
    kd_rpc_msg_t m;
    kd_csr_t *L = kd_matgen_laplacian_2d(120, 120, KD_DTYPE_F64);
    char lid[33];
    REQUIRE(kd_rpc_put(r, 900, L, "L", -1, lid, &m) == 0);
    kd_rpc_msg_free(&m);
    double *b = malloc((size_t)L->rows * 8);
    for (int64_t i = 0; i < L->rows; i++)
        b[i] = 1.0;
    kd_writer_t w;
    kd_rpc_begin(&w, 901, "solve", 5);
    kd_w_kv_str(&w, "id", lid);
    kd_w_kv_bin(&w, "b", b, (size_t)L->rows * 8);
    kd_w_kv_double(&w, "rtol", 0.0);
    kd_w_kv_int(&w, "maxiter", 400);
    kd_w_kv_int(&w, "check_every", 400);
    kd_rpc_send(r, &w);
    free(b);
    kd_csr_free(L);
    for (int i = 0; i < 500; i++) {
        REQUIRE(kd_rpc_status(probe, &m) == 0);
        int running = kd_rpc_int(m.result, "jobs_in_flight", NULL, 0) >= 1;
        kd_rpc_msg_free(&m);
        if (running)
            break;
        kd_rpc_sleep_ms(5);
    }
}

/* Send the mix over two connections, pipelined, and check every answer once. */
static void run_mix(int busy)
{
    kd_rpc_t c[2], probe;
    REQUIRE(kd_rpc_connect(&c[0], d.port) == 0 && kd_rpc_connect(&c[1], d.port) == 0 &&
            kd_rpc_connect(&probe, d.port) == 0);
    pending_t p[NMIX];
    for (int k = 0; k < NMIX; k++) {
        p[k].s = mix[k];
        const kd_csr_t *A = mats[mix[k].matrix < 0 ? 0 : mix[k].matrix];
        p[k].x = malloc((size_t)(A->cols * mix[k].ncols) * 8);
        p[k].y0 = malloc((size_t)(A->rows * mix[k].ncols) * 8);
        for (int64_t i = 0; i < A->cols * mix[k].ncols; i++)
            p[k].x[i] = kd_test_rand_double(-1, 1);
        for (int64_t i = 0; i < A->rows * mix[k].ncols; i++)
            p[k].y0[i] = kd_test_rand_double(-1, 1);
        p[k].answered = 0;
    }
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_status(&probe, &m) == 0);
    int64_t grouped0 = kd_rpc_int(m.result, "spmv", "grouped", -1);
    int64_t launches0 = kd_rpc_int(m.result, "spmv", "launches", -1);
    kd_rpc_msg_free(&m);
    if (busy)
        start_blocker(&c[0], &probe);
    for (int k = 0; k < NMIX; k++) {
        kd_writer_t w;
        write_request(&w, (uint64_t)(100 + k), &p[k]);
        kd_rpc_send(&c[k % 2], &w);
    }
    for (int side = 0; side < 2; side++) {
        int expect = 0;
        for (int k = side; k < NMIX; k += 2)
            expect++;
        expect += (busy && side == 0);
        for (int got = 0; got < expect; got++) {
            REQUIRE(kd_rpc_read(&c[side], 60000, &m) == KD_RPC_RESPONSE);
            if (m.msgid == 901) {
                CHECK_MSG(m.code[0] == '\0', "the solve: %s %s", m.code, m.message);
            } else {
                int k = (int)m.msgid - 100;
                REQUIRE(k >= 0 && k < NMIX && k % 2 == side);
                CHECK_MSG(!p[k].answered, "request %d answered twice", k);
                p[k].answered = 1;
                check_answer(&p[k], &m);
            }
            kd_rpc_msg_free(&m);
        }
        CHECK_EQ_INT(kd_rpc_read(&c[side], 100, &m), KD_RPC_TIMEOUT);
        kd_rpc_msg_free(&m);
    }
    REQUIRE(kd_rpc_status(&probe, &m) == 0);
    int64_t grouped = kd_rpc_int(m.result, "spmv", "grouped", -1) - grouped0;
    int64_t launches = kd_rpc_int(m.result, "spmv", "launches", -1) - launches0;
    kd_rpc_msg_free(&m);
    int good = 0;
    for (int k = 0; k < NMIX; k++) {
        CHECK_MSG(p[k].answered, "request %d never answered", k);
        good += mix[k].matrix >= 0 && !mix[k].bad_length;
    }
    if (busy) {
        /* They all waited behind the solve: grouped, and same-matrix ones batched. */
        CHECK_MSG(grouped >= NMIX / 2, "grouped %lld of %d", (long long)grouped, NMIX);
        CHECK_MSG(launches < good, "%lld launches for %d requests", (long long)launches, good);
    }
    for (int k = 0; k < NMIX; k++) {
        free(p[k].x);
        free(p[k].y0);
    }
    kd_rpc_close(&c[0]);
    kd_rpc_close(&c[1]);
    kd_rpc_close(&probe);
}

/* ---- solves ------------------------------------------------------------------------------ */

typedef struct solve_spec {
    int nrhs;
    int x0, f32, nan;
    double rtol;
} solve_spec_t;

static const solve_spec_t solves[] = {
    {1, 0, 0, 0, 1e-10}, {1, 1, 0, 0, 1e-10}, {2, 0, 0, 0, 1e-10}, {1, 0, 1, 0, 1e-10},
    {1, 0, 0, 0, 1e-10}, {1, 0, 0, 0, 1e-6},  {3, 1, 0, 0, 1e-10}, {1, 0, 0, 0, 1e-10},
};
enum { NSOLVE = sizeof(solves) / sizeof(solves[0]) };

typedef struct solve_case {
    solve_spec_t s;
    int nan; /* this run: b holds a NaN (its own status non_finite; the others unaffected) */
    double *b, *x0;
    int64_t iters_alone[3];
} solve_case_t;

static void write_solve(kd_writer_t *w, uint64_t msgid, const solve_case_t *c)
{
    const kd_csr_t *A = mats[1];
    const int64_t n = A->rows * c->s.nrhs;
    kd_rpc_begin(w, msgid, "solve", (uint32_t)(3 + (c->s.nrhs > 1) + c->s.x0 + c->s.f32));
    kd_w_kv_str(w, "id", ids[1]);
    kd_w_kv_double(w, "rtol", c->s.rtol);
    if (c->s.nrhs > 1)
        kd_w_kv_int(w, "nrhs", c->s.nrhs);
    if (c->s.f32) {
        float *bf = malloc((size_t)n * 4);
        for (int64_t i = 0; i < n; i++)
            bf[i] = (float)c->b[i];
        kd_w_kv_bin(w, "b", bf, (size_t)n * 4);
        kd_w_kv_str(w, "dtype", "float32");
        free(bf);
    } else {
        kd_w_kv_bin(w, "b", c->b, (size_t)n * 8);
    }
    if (c->s.x0)
        kd_w_kv_bin(w, "x0", c->x0, (size_t)n * 8);
}

/* The answer: converged columns whose true residual meets rtol, the same iteration counts as
 * the request had alone (record: note them); a NaN in b: status non_finite. */
static void check_solve(solve_case_t *c, const kd_rpc_msg_t *m, int record)
{
    const kd_csr_t *A = mats[1];
    if (c->nan) { /* its own status, as alone; the batch goes on without it */
        CHECK_MSG(m->code[0] == '\0', "NaN b: '%s' %s", m->code, m->message);
        CHECK(m->result != NULL && kd_obj_str_eq(kd_obj_get(m->result, "status"), "non_finite"));
        return;
    }
    CHECK_MSG(m->code[0] == '\0', "%s %s", m->code, m->message);
    if (m->result == NULL)
        return;
    const void *data;
    size_t len;
    REQUIRE(kd_obj_bytes(kd_obj_get(m->result, "x"), &data, &len) == 0);
    const size_t vs = c->s.f32 ? 4 : 8;
    CHECK_EQ_INT((int64_t)len, A->rows * c->s.nrhs * (int64_t)vs);
    double x[512], ax[512];
    for (int j = 0; j < c->s.nrhs && len == (size_t)(A->rows * c->s.nrhs) * vs; j++) {
        for (int64_t i = 0; i < A->rows; i++)
            x[i] = bin_value(data, c->s.f32, j * A->rows + i);
        kd_csr_spmv_ref(A, x, 1.0, 0.0, ax);
        double r2 = 0, b2 = 0;
        for (int64_t i = 0; i < A->rows; i++) {
            double bi = c->s.f32 ? (double)(float)c->b[j * A->rows + i] : c->b[j * A->rows + i];
            r2 += (bi - ax[i]) * (bi - ax[i]);
            b2 += bi * bi;
        }
        double tol = c->s.f32 ? fmax(c->s.rtol, 1e-5) * 10 : c->s.rtol * 1.01;
        CHECK_MSG(sqrt(r2) <= tol * sqrt(b2), "column %d: ||b - Ax|| / ||b|| = %g", j,
                  sqrt(r2 / b2));
        const msgpack_object *it = kd_obj_get(m->result, "iterations");
        const msgpack_object *st = kd_obj_get(m->result, "status");
        int64_t iters = -1;
        if (c->s.nrhs == 1) {
            (void)kd_obj_int64(it, &iters);
            CHECK(kd_obj_str_eq(st, "converged"));
        } else if (it != NULL && it->type == MSGPACK_OBJECT_ARRAY && (int)it->via.array.size > j) {
            (void)kd_obj_int64(&it->via.array.ptr[j], &iters);
        }
        if (record)
            c->iters_alone[j] = iters;
        else
            CHECK_MSG(iters == c->iters_alone[j], "column %d: %lld iterations, alone %lld", j,
                      (long long)iters, (long long)c->iters_alone[j]);
    }
}

static void run_solves(solve_case_t *cases, int busy, int record)
{
    kd_rpc_t c[2], probe;
    REQUIRE(kd_rpc_connect(&c[0], d.port) == 0 && kd_rpc_connect(&c[1], d.port) == 0 &&
            kd_rpc_connect(&probe, d.port) == 0);
    if (busy)
        start_blocker(&c[0], &probe);
    for (int k = 0; k < NSOLVE; k++) {
        kd_writer_t w;
        write_solve(&w, (uint64_t)(200 + k), &cases[k]);
        kd_rpc_send(&c[k % 2], &w);
        if (!busy) { /* alone: one at a time */
            kd_rpc_msg_t m;
            REQUIRE(kd_rpc_wait(&c[k % 2], (uint64_t)(200 + k), 60000, &m) == KD_RPC_RESPONSE);
            check_solve(&cases[k], &m, record);
            kd_rpc_msg_free(&m);
        }
    }
    for (int side = 0; busy && side < 2; side++) {
        int expect = side == 0 ? 1 : 0;
        for (int k = side; k < NSOLVE; k += 2)
            expect++;
        for (int got = 0; got < expect; got++) {
            kd_rpc_msg_t m;
            REQUIRE(kd_rpc_read(&c[side], 60000, &m) == KD_RPC_RESPONSE);
            if (m.msgid != 901) {
                int k = (int)m.msgid - 200;
                REQUIRE(k >= 0 && k < NSOLVE && k % 2 == side);
                check_solve(&cases[k], &m, 0);
            }
            kd_rpc_msg_free(&m);
        }
    }
    kd_rpc_close(&c[0]);
    kd_rpc_close(&c[1]);
    kd_rpc_close(&probe);
}

static int64_t status_batched(void)
{
    kd_rpc_t r;
    kd_rpc_msg_t m;
    if (kd_rpc_connect(&r, d.port) != 0)
        return -1;
    if (kd_rpc_status(&r, &m) != 0) {
        kd_rpc_close(&r);
        return -1;
    }
    int64_t v = kd_rpc_int(m.result, "solves_batched", NULL, -1);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    return v;
}

/* Solves waiting together on one matrix with the same parameters run as one; each answers as it
 * did alone (same iteration counts, its own residual), whatever joined it; one with a NaN in b
 * gets its own status (non_finite) and the others their answers. */
static void test_solves_batched(void)
{
    const kd_csr_t *A = mats[1];
    solve_case_t cases[NSOLVE];
    for (int k = 0; k < NSOLVE; k++) {
        cases[k].s = solves[k];
        cases[k].nan = 0;
        int64_t n = A->rows * solves[k].nrhs;
        cases[k].b = malloc((size_t)n * 8);
        cases[k].x0 = malloc((size_t)n * 8);
        for (int64_t i = 0; i < n; i++) {
            cases[k].b[i] = kd_test_rand_double(-1, 1);
            cases[k].x0[i] = kd_test_rand_double(-0.1, 0.1);
        }
    }
    run_solves(cases, 0, 1); /* alone: the reference iteration counts */
    int64_t before = status_batched();
    run_solves(cases, 1, 0);
    int64_t batched = status_batched() - before;
    /* all but the rtol 1e-6 one share their parameters */
    CHECK_MSG(batched >= NSOLVE - 1, "%lld of %d solves ran in a batch", (long long)batched,
              NSOLVE);
    cases[4].nan = 1;
    cases[4].b[7] = NAN;
    before = status_batched();
    run_solves(cases, 1, 0);
    CHECK_MSG(status_batched() - before >= NSOLVE - 1, "with a NaN b: %lld batched",
              (long long)(status_batched() - before));
    for (int k = 0; k < NSOLVE; k++) {
        free(cases[k].b);
        free(cases[k].x0);
    }
}

static void test_grouped_behind_a_solve(void)
{
    run_mix(1);
}

static void test_mix_idle(void)
{
    run_mix(0);
}

int main(void)
{
    kd_test_seed();
    const char *extra[] = {
        "--queue-depth", "64", "--max-jobs-per-connection", "64", "--warm-programs", "none", NULL};
    if (kd_daemon_start(&d, extra) != 0)
        return 1;
    kd_csr_t *R = make_irregular();
    kd_csr_t *P = kd_matgen_laplacian_2d(16, 16, KD_DTYPE_F64);
    mats[0] = R;
    mats[1] = P;
    kd_rpc_t r;
    kd_rpc_msg_t m;
    if (R == NULL || kd_rpc_connect(&r, d.port) != 0 ||
        kd_rpc_put(&r, 1, R, "R", -1, ids[0], &m) != 0 || (kd_rpc_msg_free(&m), 0) ||
        kd_rpc_put(&r, 2, P, "P", -1, ids[1], &m) != 0) {
        fprintf(stderr, "setting up the matrices failed\n");
        return 1;
    }
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    RUN(test_grouped_behind_a_solve);
    RUN(test_mix_idle);
    RUN(test_grouped_behind_a_solve);
    RUN(test_solves_batched);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    kd_csr_free(R);
    kd_csr_free(P);
    return kd_test_finish();
}
