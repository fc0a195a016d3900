/*
 * kd_precond_refresh (solver/precond/precond.h): a preconditioner set up on A1 and refreshed onto
 * A2 (the same pattern, other values) must act as one set up on A2 from scratch, leave A1's
 * untouched, outlive A1, and give PCG the same iteration counts (AMG: within 10%); a pattern that
 * is not A1's is refused with KD_EBADREQ; what cannot be refreshed is built fresh and says so.
 *
 * Matrices: a weighted 2-D Laplacian (edge weights and a diagonal shift that change between A1
 * and A2, SPD for any positive ones), and 494_bus with A2 = S A1 S + D (S, D positive diagonal:
 * congruent plus a positive shift, so still SPD, every value changed).
 */
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/precond/amg/amg.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kd_ocl_t *ocl;

/* REQUIRE with a message: the case stops (void functions). */
#define REQUIRE_MSG(cond, ...)                                                                     \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            CHECK_MSG(cond, __VA_ARGS__);                                                          \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* What a helper cannot go on without (an upload of a test matrix, a conversion). */
static void must(int ok, const char *what, const kd_err_t *err)
{
    if (!ok) {
        fprintf(stderr, "%s: %s\n", what, err->message);
        exit(1);
    }
}

/* The nx x nx 5-point weighted Laplacian: -w_e on each edge e (w_e in [lo, hi], symmetric),
 * a_ii = the row's weights + 1 per missing neighbour (Dirichlet) + a shift in [0, shift]. */
static kd_csr_t *weighted_laplacian(int64_t nx, double lo, double hi, double shift)
{
    kd_test_coo_t c = {.rows = nx * nx, .cols = nx * nx};
    double *diag = calloc((size_t)(nx * nx), sizeof(double));
    for (int64_t y = 0; y < nx; y++)
        for (int64_t x = 0; x < nx; x++) {
            const int64_t i = y * nx + x;
            diag[i] += (double)((x == 0) + (x == nx - 1) + (y == 0) + (y == nx - 1));
            diag[i] += shift * kd_test_rand_double(0.0, 1.0);
            const int64_t nb[2] = {x + 1 < nx ? i + 1 : -1, y + 1 < nx ? i + nx : -1};
            for (int e = 0; e < 2; e++) {
                if (nb[e] < 0)
                    continue;
                const double w = lo + (hi - lo) * kd_test_rand_double(0.0, 1.0);
                kd_test_coo_add(&c, i, nb[e], -w);
                kd_test_coo_add(&c, nb[e], i, -w);
                diag[i] += w;
                diag[nb[e]] += w;
            }
        }
    for (int64_t i = 0; i < nx * nx; i++)
        kd_test_coo_add(&c, i, i, diag[i]);
    free(diag);
    return kd_test_coo_finish(&c);
}

/* S A S + D for random S in [0.6, 1.4] and D in [0, 0.3 |a_ii|]: A's pattern, SPD when A is. */
static kd_csr_t *congruent(const kd_csr_t *A)
{
    kd_csr_t *B = NULL;
    kd_err_t err = {0};
    must(kd_csr_convert(A, KD_DTYPE_F64, &B, &err) == KD_OK, "convert", &err);
    double *s = malloc((size_t)A->rows * sizeof(double) + 8), *v = B->values;
    for (int64_t i = 0; i < A->rows; i++)
        s[i] = 0.6 + 0.8 * kd_test_rand_double(0.0, 1.0);
    for (int64_t i = 0; i < A->rows; i++)
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
            v[k] *= s[i] * s[A->indices[k]];
            if (A->indices[k] == i)
                v[k] += 0.3 * kd_test_rand_double(0.0, 1.0) * fabs(v[k]);
        }
    free(s);
    return B;
}

typedef struct pc_case {
    const kd_precond_ops_t *ops;
    const char *option; /* NULL: none */
    double value;
    /* 0: the setup reads values that the refresh keeps from the old one (amg's aggregates with
     * a strength threshold > 0), so refreshed and fresh differ: only PCG's iterations compare */
    int same;
} pc_case_t;

static kd_precond_options_t options_of(const pc_case_t *pc)
{
    kd_precond_options_t o = {0};
    if (pc->option != NULL) {
        snprintf(o.items[0].name, sizeof(o.items[0].name), "%s", pc->option);
        o.items[0].value = pc->value;
        o.count = 1;
    }
    return o;
}

static kd_matrix_t *upload(const kd_csr_t *csr)
{
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    must(kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK, "upload", &err);
    return A;
}

/* M^-1 r for the columns of rh (n x k, dtype) into zh, z poisoned first. */
static void apply(const kd_precond_t *P, int64_t n, int64_t k, kd_dtype_t dt, const void *rh,
                  void *zh)
{
    kd_multivec_t r = {0}, z = {0};
    kd_err_t err = {0};
    REQUIRE(kd_multivec_alloc(ocl, n, k, dt, &r, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, k, dt, &z, &err) == KD_OK);
    for (int64_t i = 0; i < n * k; i++)
        kd_store_real(zh, dt, (size_t)i, NAN);
    CHECK(kd_multivec_write(ocl, &r, rh, &err) == KD_OK);
    CHECK(kd_multivec_write(ocl, &z, zh, &err) == KD_OK);
    CHECK_MSG(P->ops->apply(ocl, P, &r, &z, &err) == KD_OK, "%s apply: %s", P->ops->name,
              err.message);
    CHECK(kd_multivec_read(ocl, &z, zh, &err) == KD_OK);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
}

/* max |a - b| over max |b|, infinity where a is not finite. */
static double rel_diff(const void *a, const void *b, int64_t count, kd_dtype_t dt)
{
    double worst = 0.0, scale = 0.0;
    for (int64_t i = 0; i < count; i++) {
        const double x = kd_load_real(a, dt, (size_t)i), y = kd_load_real(b, dt, (size_t)i);
        scale = fmax(scale, fabs(y));
        worst = isfinite(x) ? fmax(worst, fabs(x - y)) : INFINITY;
    }
    return scale > 0.0 ? worst / scale : worst;
}

/* CG (gmres for ilu0, which is not symmetric) on A (csr its host copy) with pc, the setup A
 * holds; b = ones; its iterations (-1: failed). */
static int64_t pcg_iterations(kd_matrix_t *A, const kd_csr_t *csr, const pc_case_t *pc, double rtol)
{
    kd_solve_params_t prm;
    kd_err_t err = {0};
    kd_solve_params_default(&prm);
    must(kd_method_choose(pc->ops->symmetric ? "cg" : "gmres", pc->ops->name, &prm.method,
                          &prm.precond, &err) == KD_OK,
         "cg", &err);
    kd_precond_options_t o = options_of(pc);
    prm.rtol = rtol;
    prm.csr = csr;
    prm.precond_options = o.count > 0 ? &o : NULL;
    const size_t v = kd_dtype_size(A->dtype);
    void *b = malloc((size_t)A->rows * v + 8), *x = calloc((size_t)A->rows + 1, v);
    for (int64_t i = 0; i < A->rows; i++)
        kd_store_real(b, A->dtype, (size_t)i, 1.0);
    kd_solve_result_t res;
    const int rc = kd_solve(ocl, A, 1, b, NULL, x, &prm, &res, &err);
    CHECK_MSG(rc == KD_OK, "%s pcg: %s", pc->ops->name, err.message);
    int64_t its = -1;
    if (rc == KD_OK) {
        CHECK_MSG(res.status == KD_SOLVE_CONVERGED, "%s pcg: %s", pc->ops->name, res.message);
        its = res.iterations;
        kd_solve_result_free(&res);
    }
    free(b);
    free(x);
    return its;
}

/*
 * The whole contract for one preconditioner on A1 -> A2 (float64 csr's, converted to dt):
 * refreshed == fresh on random columns, A1's unchanged, the refreshed one outlives A1, PCG's
 * iterations equal (within 10% for amg), and a refresh of the refreshed one onto A3 too.
 */
static void refresh_case(const char *name, const kd_csr_t *c1, const kd_csr_t *c2,
                         const kd_csr_t *c3, kd_dtype_t dt, const pc_case_t *pc)
{
    char what[160];
    char option[48] = "";
    if (pc->option != NULL)
        snprintf(option, sizeof(option), " %s=%g", pc->option, pc->value);
    snprintf(what, sizeof(what), "%s %s%s %s", name, pc->ops->name, option, kd_dtype_name(dt));
    kd_err_t err = {0};
    kd_csr_t *a1 = NULL, *a2 = NULL, *a3 = NULL;
    REQUIRE(kd_csr_convert(c1, dt, &a1, &err) == KD_OK);
    REQUIRE(kd_csr_convert(c2, dt, &a2, &err) == KD_OK);
    REQUIRE(kd_csr_convert(c3, dt, &a3, &err) == KD_OK);
    const int64_t n = a1->rows, k = 3;
    kd_precond_options_t o = options_of(pc);
    const kd_precond_options_t *opt = o.count > 0 ? &o : NULL;
    kd_matrix_t *A1 = upload(a1), *A2 = upload(a2), *F2 = upload(a2), *A3 = upload(a3),
                *F3 = upload(a3);
    const kd_precond_t *P1 = NULL, *R2 = NULL, *P2 = NULL, *R3 = NULL, *P3 = NULL;
    REQUIRE_MSG(kd_precond_get(ocl, A1, pc->ops, opt, a1, &P1, &err) == KD_OK, "%s: %s", what,
                err.message);
    double *rw = NULL;
    void *r0 = kd_test_random_vector(n * k, dt, -1.0, 1.0, &rw);
    free(rw);
    void *before = malloc((size_t)(n * k) * 8 + 8), *after = malloc((size_t)(n * k) * 8 + 8);
    apply(P1, n, k, dt, r0, before);

    kd_precond_origin_t how = KD_PRECOND_HELD;
    const size_t bytes2 = A2->device_bytes;
    int rc = kd_precond_refresh(ocl, A1, A2, pc->ops, opt, a2, &R2, &how, &err);
    REQUIRE_MSG(rc == KD_OK, "%s refresh: %s", what, err.message);
    CHECK_MSG(how == KD_PRECOND_REFRESHED, "%s: %s, not refreshed", what,
              kd_precond_origin_name(how));
    CHECK(A2->device_bytes == bytes2 + R2->device_bytes && R2->device_bytes > 0);
    CHECK(kd_precond_ready(A2, pc->ops, opt));
    if (pc->ops == &kd_precond_amg) {
        kd_amg_stats_t s1, s2;
        CHECK(kd_amg_describe(P1, &s1, &err) == KD_OK && kd_amg_describe(R2, &s2, &err) == KD_OK);
        CHECK(s2.refreshed && !s1.refreshed && s1.levels == s2.levels &&
              s1.levels >= (n > 300 ? 2 : 1));
        for (int l = 0; l < s1.levels && l < s2.levels; l++)
            CHECK(s1.rows[l] == s2.rows[l] && s1.nnz[l] == s2.nnz[l]);
    }
    /* asking again finds it held */
    const kd_precond_t *again = NULL;
    CHECK(kd_precond_refresh(ocl, A1, A2, pc->ops, opt, a2, &again, &how, &err) == KD_OK &&
          again == R2 && how == KD_PRECOND_HELD);

    /* the old setup is untouched: the same bits on the same columns */
    apply(P1, n, k, dt, r0, after);
    CHECK_MSG(memcmp(before, after, (size_t)(n * k) * kd_dtype_size(dt)) == 0,
              "%s: the old setup changed", what);
    /* the refreshed one outlives A1 (and its setup) */
    kd_matrix_free(A1);
    REQUIRE(kd_precond_get(ocl, F2, pc->ops, opt, a2, &P2, &err) == KD_OK);
    void *r1 = kd_test_random_vector(n * k, dt, -1.0, 1.0, &rw);
    free(rw);
    apply(R2, n, k, dt, r1, before);
    apply(P2, n, k, dt, r1, after);
    const double tol = dt == KD_DTYPE_F64 ? 1e-11 : 1e-4;
    double d = rel_diff(before, after, n * k, dt);
    CHECK_MSG(pc->same ? d <= tol : isfinite(d), "%s: refreshed and fresh differ by %g", what, d);

    /* PCG iterations: the same (amg's to rounding of its hierarchy: within 10%) */
    const double rtol = dt == KD_DTYPE_F64 ? 1e-8 : 1e-4;
    const int64_t its_r = pcg_iterations(A2, a2, pc, rtol),
                  its_f = pcg_iterations(F2, a2, pc, rtol);
    const int64_t slack = pc->ops == &kd_precond_amg ? (its_f + 9) / 10 : 0;
    CHECK_MSG(its_r > 0 && its_f > 0 && llabs(its_r - its_f) <= slack,
              "%s: pcg took %lld iterations refreshed, %lld fresh", what, (long long)its_r,
              (long long)its_f);

    /* refreshed again, from the refreshed one */
    rc = kd_precond_refresh(ocl, A2, A3, pc->ops, opt, a3, &R3, &how, &err);
    REQUIRE_MSG(rc == KD_OK, "%s second refresh: %s", what, err.message);
    CHECK(how == KD_PRECOND_REFRESHED);
    kd_matrix_free(A2);
    REQUIRE(kd_precond_get(ocl, F3, pc->ops, opt, a3, &P3, &err) == KD_OK);
    apply(R3, n, k, dt, r1, before);
    apply(P3, n, k, dt, r1, after);
    d = rel_diff(before, after, n * k, dt);
    CHECK_MSG(pc->same ? d <= tol : isfinite(d), "%s: refreshed twice and fresh differ by %g", what,
              d);
    fprintf(stderr, "  %-40s pcg %lld refreshed / %lld fresh, apply off by %.1e\n", what,
            (long long)its_r, (long long)its_f, d);

    free(r0);
    free(r1);
    free(before);
    free(after);
    kd_matrix_free(F2);
    kd_matrix_free(A3);
    kd_matrix_free(F3);
    kd_csr_free(a1);
    kd_csr_free(a2);
    kd_csr_free(a3);
}

static const pc_case_t refreshable[] = {
    {&kd_precond_jacobi, NULL, 0, 1},        {&kd_precond_ilu0, NULL, 0, 1},
    {&kd_precond_ilu0, "sweeps", 0, 1},      {&kd_precond_ic0, NULL, 0, 1},
    {&kd_precond_ic0, "sweeps", 0, 1},       {&kd_precond_amg, NULL, 0, 1},
    {&kd_precond_amg, "fused", 0, 1},        {&kd_precond_amg, "threshold", 0.08, 0},
    {&kd_precond_amg, "tail_rows", 4096, 1}, {&kd_precond_amg, "block_size", 2, 1},
    {&kd_precond_amg, "aggregation", 1, 1},
    {&kd_precond_block_jacobi, NULL, 0, 1},  {&kd_precond_block_jacobi, "block_size", 3, 1},
    {&kd_precond_chebyshev, NULL, 0, 1},
};

static void test_laplacian(void)
{
    kd_dtype_t dts[2];
    const int ndt = kd_test_dtypes(ocl, dts);
    kd_csr_t *c1 = weighted_laplacian(40, 1.0, 1.0, 0.0);
    kd_csr_t *c2 = weighted_laplacian(40, 0.3, 3.0, 2.0);
    kd_csr_t *c3 = weighted_laplacian(40, 0.5, 1.5, 0.5);
    for (int t = 0; t < ndt; t++)
        for (size_t i = 0; i < sizeof(refreshable) / sizeof(refreshable[0]); i++)
            refresh_case("lap2d_40", c1, c2, c3, dts[t], &refreshable[i]);
    kd_csr_free(c1);
    kd_csr_free(c2);
    kd_csr_free(c3);
    /* 100 rows: amg's one level is the coarsest, its dense inverse refreshed */
    c1 = weighted_laplacian(10, 1.0, 1.0, 0.0);
    c2 = weighted_laplacian(10, 0.3, 3.0, 2.0);
    c3 = weighted_laplacian(10, 0.5, 1.5, 0.5);
    for (int t = 0; t < ndt; t++)
        for (int fused = 0; fused < 2; fused++) {
            const pc_case_t pc = {&kd_precond_amg, "fused", fused, 1};
            refresh_case("lap2d_10", c1, c2, c3, dts[t], &pc);
        }
    kd_csr_free(c1);
    kd_csr_free(c2);
    kd_csr_free(c3);
}

static void test_real(void)
{
    kd_csr_t *c1 = kd_test_load_mtx("494_bus.mtx", 0.0);
    kd_csr_t *c2 = congruent(c1), *c3 = congruent(c1);
    for (size_t i = 0; i < sizeof(refreshable) / sizeof(refreshable[0]); i++)
        refresh_case("494_bus", c1, c2, c3, KD_DTYPE_F64, &refreshable[i]);
    kd_csr_free(c1);
    kd_csr_free(c2);
    kd_csr_free(c3);
}

/* Dense diagonal blocks of 1, 2, 3, 1, 2, 3, ... rows (a_ii = 4, -0.5 beside it in the block):
 * the structure finds blocks of varying size (block_jacobi's variable kernel and maps). */
static kd_csr_t *variable_blocks(int64_t blocks)
{
    kd_test_coo_t c = {0};
    int64_t row = 0;
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t m = 1 + b % 3;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < m; j++)
                kd_test_coo_add(&c, row + i, row + j, i == j ? 4.0 : -0.5);
        row += m;
    }
    c.rows = c.cols = row;
    return kd_test_coo_finish(&c);
}

static void test_variable_blocks(void)
{
    kd_csr_t *c1 = variable_blocks(300), *c2 = congruent(c1), *c3 = congruent(c1);
    const pc_case_t pc = {&kd_precond_block_jacobi, NULL, 0, 1};
    refresh_case("blocks_1_2_3", c1, c2, c3, KD_DTYPE_F64, &pc);
    kd_csr_free(c1);
    kd_csr_free(c2);
    kd_csr_free(c3);
}

/* A reordered matrix (RCM: the permutation is the pattern's, so A1's and A2's agree) refreshes
 * in its stored order as a fresh setup does. */
static void test_reordered(void)
{
    kd_err_t err = {0};
    kd_csr_t *c1 = kd_test_scramble(weighted_laplacian(30, 1.0, 1.0, 0.0));
    kd_csr_t *c2 = congruent(c1);
    const pc_case_t cases[] = {{&kd_precond_amg, NULL, 0, 1},
                               {&kd_precond_ic0, NULL, 0, 1},
                               {&kd_precond_ilu0, "sweeps", 0, 1},
                               {&kd_precond_block_jacobi, "block_size", 3, 1}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_precond_options_t o = options_of(&cases[i]);
        const kd_precond_options_t *opt = o.count > 0 ? &o : NULL;
        kd_matrix_t *A1 = NULL, *A2 = NULL, *F2 = NULL;
        must(kd_matrix_upload_reordered(ocl, c1, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A1, &err) ==
                     KD_OK &&
                 kd_matrix_upload_reordered(ocl, c2, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A2,
                                            &err) == KD_OK &&
                 kd_matrix_upload_reordered(ocl, c2, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &F2,
                                            &err) == KD_OK,
             "upload reordered", &err);
        const kd_precond_t *P1, *R2, *P2;
        kd_precond_origin_t how = KD_PRECOND_HELD;
        REQUIRE(kd_precond_get(ocl, A1, cases[i].ops, opt, c1, &P1, &err) == KD_OK);
        REQUIRE_MSG(kd_precond_refresh(ocl, A1, A2, cases[i].ops, opt, c2, &R2, &how, &err) ==
                        KD_OK,
                    "%s reordered: %s", cases[i].ops->name, err.message);
        CHECK(how == KD_PRECOND_REFRESHED);
        REQUIRE(kd_precond_get(ocl, F2, cases[i].ops, opt, c2, &P2, &err) == KD_OK);
        const int64_t n = c1->rows, k = 2;
        double *rw = NULL;
        void *r = kd_test_random_vector(n * k, KD_DTYPE_F64, -1.0, 1.0, &rw);
        void *zr = malloc((size_t)(n * k) * 8 + 8), *zf = malloc((size_t)(n * k) * 8 + 8);
        apply(R2, n, k, KD_DTYPE_F64, r, zr);
        apply(P2, n, k, KD_DTYPE_F64, r, zf);
        const double d = rel_diff(zr, zf, n * k, KD_DTYPE_F64);
        CHECK_MSG(d <= 1e-11, "%s reordered: refreshed and fresh differ by %g", cases[i].ops->name,
                  d);
        free(rw);
        free(r);
        free(zr);
        free(zf);
        kd_matrix_free(A1);
        kd_matrix_free(A2);
        kd_matrix_free(F2);
    }
    kd_csr_free(c1);
    kd_csr_free(c2);
}

/* c with the (0, 1) and (1, 0) entries moved to (0, 2) and (2, 0) (rows 0..2 have no such
 * entries in a Laplacian of nx >= 4): the same nnz, another pattern. */
static kd_csr_t *moved_entries(const kd_csr_t *c)
{
    kd_test_coo_t o = {.rows = c->rows, .cols = c->cols};
    for (int64_t i = 0; i < c->rows; i++)
        for (int32_t k = c->indptr[i]; k < c->indptr[i + 1]; k++) {
            const int64_t j = c->indices[k];
            const int edge = (i == 0 && j == 1) || (i == 1 && j == 0);
            kd_test_coo_add(&o, edge && i == 1 ? 2 : i, edge && j == 1 ? 2 : j, kd_csr_value(c, k));
        }
    return kd_test_coo_finish(&o);
}

/* Refused: another pattern (same nnz, or another nnz), another dtype; built fresh (and said
 * so): a preconditioner without refresh (jacobi's ops with refresh NULL), ilu0 whose matching
 * the values decide, a `like` holding none; jacobi made without a host CSR (its pattern unrecorded)
 * is refreshed all the same: it reads no pattern. */
static void test_refusals_and_fallbacks(void)
{
    kd_err_t err = {0};
    kd_csr_t *c1 = weighted_laplacian(12, 1.0, 1.0, 0.0), *c2 = weighted_laplacian(12, 0.5, 2, 1);
    kd_csr_t *moved = moved_entries(c2), *other = weighted_laplacian(13, 1.0, 1.0, 0.0), *c32;
    REQUIRE(moved->nnz == c2->nnz);
    int same = 1;
    for (int64_t k = 0; k < moved->nnz; k++)
        same &= moved->indices[k] == c2->indices[k];
    REQUIRE_MSG(!same, "the moved entries did not move");
    REQUIRE(kd_csr_convert(c2, KD_DTYPE_F32, &c32, &err) == KD_OK);
    const kd_precond_ops_t *const all[] = {&kd_precond_jacobi, &kd_precond_ilu0, &kd_precond_ic0,
                                           &kd_precond_amg};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        kd_matrix_t *A1 = upload(c1), *M = upload(moved), *O = upload(other), *F = upload(c32);
        const kd_precond_t *P = NULL;
        kd_precond_origin_t how = KD_PRECOND_BUILT;
        REQUIRE(kd_precond_get(ocl, A1, all[i], NULL, c1, &P, &err) == KD_OK);
        int rc = kd_precond_refresh(ocl, A1, M, all[i], NULL, moved, &P, &how, &err);
        CHECK_MSG(rc == KD_EBADREQ && strstr(err.message, "pattern") != NULL && M->preconds == NULL,
                  "%s on a moved pattern: %d %s", all[i]->name, rc, err.message);
        rc = kd_precond_refresh(ocl, A1, O, all[i], NULL, other, &P, &how, &err);
        CHECK_MSG(rc == KD_EBADREQ && strstr(err.message, "not the same pattern") != NULL,
                  "%s on another size: %d %s", all[i]->name, rc, err.message);
        rc = kd_precond_refresh(ocl, A1, F, all[i], NULL, c32, &P, &how, &err);
        CHECK_MSG(rc == KD_EBADREQ && strstr(err.message, "float32") != NULL,
                  "%s on another dtype: %d %s", all[i]->name, rc, err.message);
        kd_matrix_free(A1);
        kd_matrix_free(M);
        kd_matrix_free(O);
        kd_matrix_free(F);
    }
    /* built fresh */
    kd_precond_ops_t plain = kd_precond_jacobi; /* a preconditioner without refresh */
    plain.refresh = NULL;
    struct {
        const kd_precond_ops_t *ops;
        const char *option;
        double value;
        int with_csr;
    } fresh[] = {{&plain, NULL, 0, 1}, {&kd_precond_ilu0, "matching", 2, 1}};
    for (size_t i = 0; i < sizeof(fresh) / sizeof(fresh[0]); i++) {
        const pc_case_t pc = {fresh[i].ops, fresh[i].option, fresh[i].value, 1};
        kd_precond_options_t o = options_of(&pc);
        const kd_precond_options_t *opt = o.count > 0 ? &o : NULL;
        kd_matrix_t *A1 = upload(c1), *A2 = upload(c2);
        const kd_precond_t *P = NULL;
        kd_precond_origin_t how = KD_PRECOND_HELD;
        REQUIRE(kd_precond_get(ocl, A1, pc.ops, opt, fresh[i].with_csr ? c1 : NULL, &P, &err) ==
                KD_OK);
        const int rc = kd_precond_refresh(ocl, A1, A2, pc.ops, opt, c2, &P, &how, &err);
        CHECK_MSG(rc == KD_OK && how == KD_PRECOND_BUILT && P != NULL && A2->preconds == P,
                  "%s: %d %s (%s)", pc.ops->name, rc, err.message, kd_precond_origin_name(how));
        kd_matrix_free(A1);
        kd_matrix_free(A2);
    }
    {
        kd_matrix_t *A1 = upload(c1), *A2 = upload(c2);
        const kd_precond_t *P = NULL;
        kd_precond_origin_t how = KD_PRECOND_HELD;
        REQUIRE(kd_precond_get(ocl, A1, &kd_precond_jacobi, NULL, NULL, &P, &err) == KD_OK);
        CHECK(kd_precond_refresh(ocl, A1, A2, &kd_precond_jacobi, NULL, c2, &P, &how, &err) ==
                  KD_OK &&
              how == KD_PRECOND_REFRESHED);
        kd_matrix_free(A1);
        kd_matrix_free(A2);
    }
    /* like holding nothing: built fresh; refresh_all carries everything over */
    kd_matrix_t *A1 = upload(c1), *A2 = upload(c2), *A3 = upload(c2);
    const kd_precond_t *P = NULL;
    kd_precond_origin_t how = KD_PRECOND_HELD;
    CHECK(kd_precond_refresh(ocl, A1, A2, &kd_precond_amg, NULL, c2, &P, &how, &err) == KD_OK &&
          how == KD_PRECOND_BUILT);
    kd_precond_options_t matching = {.count = 1};
    snprintf(matching.items[0].name, sizeof(matching.items[0].name), "matching");
    matching.items[0].value = 2;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        REQUIRE(kd_precond_get(ocl, A1, all[i], all[i] == &kd_precond_ilu0 ? &matching : NULL, c1,
                               &P, &err) == KD_OK);
    REQUIRE(kd_precond_get(ocl, A1, &kd_precond_chebyshev, NULL, c1, &P, &err) == KD_OK);
    int refreshed = -1, built = -1;
    CHECK_MSG(kd_precond_refresh_all(ocl, A1, A3, c2, &refreshed, &built, &err) == KD_OK,
              "refresh_all: %s", err.message);
    CHECK_MSG(refreshed == 4 && built == 1, "refresh_all: %d refreshed, %d built (ilu0's matching)",
              refreshed, built);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        CHECK(kd_precond_ready(A3, all[i], all[i] == &kd_precond_ilu0 ? &matching : NULL));
    kd_matrix_free(A1);
    kd_matrix_free(A2);
    kd_matrix_free(A3);
    kd_csr_free(c1);
    kd_csr_free(c2);
    kd_csr_free(c32);
    kd_csr_free(moved);
    kd_csr_free(other);
}

/*
 * A time step's AMG refreshes, as the server makes them: A2 and A3 hold A1's pattern arrays in
 * another format than csr_scalar (kd_matrix_with_values), A1 -> A2 -> A3. The second refresh fills
 * level 0's CSR values on the device from A3's format (kd_matrix_values_canonical) on the
 * pattern the first kept: its M^-1 equals a fresh setup's on A3, for each format that shares,
 * with the Galerkin products' one work-item a row and with a GPU's lanes a row.
 */
static void test_amg_time_steps_in_formats(void)
{
    const kd_format_t formats[] = {KD_FMT_ELLPACK_R, KD_FMT_ELL, KD_FMT_SELL_C_SIGMA, KD_FMT_HYB,
                                   KD_FMT_CSR_VECTOR};
    kd_csr_t *c1 = weighted_laplacian(40, 1.0, 1.0, 0.0);
    kd_csr_t *c2 = weighted_laplacian(40, 0.3, 3.0, 2.0);
    kd_csr_t *c3 = weighted_laplacian(40, 0.5, 1.5, 0.5);
    const int64_t n = c1->rows, k = 2;
    /* each twice: one work-item a row of the Galerkin products (a CPU's), and lanes a row (a
     * GPU's: kd_amg_product_lanes) */
    for (size_t run = 0; run < 2 * sizeof(formats) / sizeof(formats[0]); run++) {
        const size_t f = run / 2;
        kd_amg_test_set_gpu_lanes((int)(run % 2));
        kd_err_t err = {0};
        kd_matrix_t *A1 = NULL, *A2 = NULL, *A3 = NULL, *F3 = upload(c3);
        must(kd_matrix_upload(ocl, c1, formats[f], &A1, &err) == KD_OK, "upload", &err);
        must(kd_matrix_with_values(ocl, A1, c2, &A2, NULL, &err) == KD_OK, "with values", &err);
        must(kd_matrix_with_values(ocl, A1, c3, &A3, NULL, &err) == KD_OK, "with values", &err);
        const kd_precond_t *P1 = NULL, *R2 = NULL, *R3 = NULL, *P3 = NULL;
        kd_precond_origin_t how;
        must(kd_precond_get(ocl, A1, &kd_precond_amg, NULL, c1, &P1, &err) == KD_OK, "setup",
             &err);
        must(kd_precond_refresh(ocl, A1, A2, &kd_precond_amg, NULL, c2, &R2, &how, &err) == KD_OK,
             "refresh", &err);
        /* a buffer of the values' size filled with NaN and freed: an allocator that hands it out
         * again must not leave a value unwritten unnoticed (A3's own staging held its values) */
        cl_mem junk = NULL;
        const size_t vbytes = (size_t)c3->nnz * sizeof(double);
        const double nan = NAN;
        must(kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, vbytes, NULL, "junk", &junk, &err) ==
                 KD_OK,
             "junk", &err);
        REQUIRE(clEnqueueFillBuffer(kd_ocl_queue(ocl), junk, &nan, sizeof(nan), 0, vbytes, 0, NULL,
                                    NULL) == CL_SUCCESS);
        REQUIRE(clFinish(kd_ocl_queue(ocl)) == CL_SUCCESS);
        clReleaseMemObject(junk);
        must(kd_precond_refresh(ocl, A2, A3, &kd_precond_amg, NULL, c3, &R3, &how, &err) == KD_OK,
             "second refresh", &err);
        CHECK(how == KD_PRECOND_REFRESHED);
        must(kd_precond_get(ocl, F3, &kd_precond_amg, NULL, c3, &P3, &err) == KD_OK, "setup",
             &err);
        double *rw = NULL;
        void *r = kd_test_random_vector(n * k, KD_DTYPE_F64, -1.0, 1.0, &rw);
        free(rw);
        double *z1 = malloc((size_t)(n * k) * sizeof(double)),
               *z2 = malloc((size_t)(n * k) * sizeof(double));
        apply(R3, n, k, KD_DTYPE_F64, r, z1);
        apply(P3, n, k, KD_DTYPE_F64, r, z2);
        const double d = rel_diff(z1, z2, n * k, KD_DTYPE_F64);
        CHECK_MSG(d <= 1e-11, "%s%s: A3's twice-refreshed AMG and a fresh one differ by %g",
                  kd_format_name(formats[f]), run % 2 ? " (GPU lanes)" : "", d);
        free(r);
        free(z1);
        free(z2);
        kd_matrix_free(A3);
        kd_matrix_free(A2);
        kd_matrix_free(A1);
        kd_matrix_free(F3);
    }
    kd_amg_test_set_gpu_lanes(0);
    kd_csr_free(c1);
    kd_csr_free(c2);
    kd_csr_free(c3);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_refusals_and_fallbacks);
    RUN(test_laplacian);
    RUN(test_real);
    RUN(test_reordered);
    RUN(test_variable_blocks);
    RUN(test_amg_time_steps_in_formats);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
