/*
 * AMG's V-cycle on k right-hand sides at once (solver/precond/amg/block.c). The preconditioner's
 * apply on k fresh random columns, the output poisoned with NaN first, equals k one-column applies
 * of the same hierarchy to rounding, in float64 and float32: on 2-D and 3-D Laplacians, fused and
 * straightforward hierarchies, k = 1 (the one-column path), k = 3 (odd), k = 9 (past the SpMM's
 * chunk of 8), rows in no aggregate (P's rows empty: A's own never are, a zero diagonal is
 * refused), one level (the dense inverse alone, or a smoothed coarsest), several lanes a row as
 * on a GPU (the fused kernels' trees), level 0 in another format with SpMM (sell_c_sigma), and
 * where the block cycle declines (level 0 in coo, without SpMM; the one-work-group tail): then a
 * cycle per column, asserted by counting launches. (On PoCL every case
 * prints 0: the block kernels sum in the one-column kernels' order.) CG with AMG on k columns
 * converges in the iterations of k separate solves (within one) to a true residual, computed here
 * on the host, that meets rtol. `test_amg_block --small`: small cases for Oclgrind.
 */
#include "kd_solver_test.h"
#include "solver/methods/method.h"
#include "solver/precond/amg/amg.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;
static int small;

static kd_csr_t *laplacian_3d(int64_t m)
{
    kd_test_coo_t c = {.rows = m * m * m, .cols = m * m * m};
    const int64_t s[3] = {1, m, m * m};
    for (int64_t i = 0; i < m * m * m; i++) {
        kd_test_coo_add(&c, i, i, 6.0);
        for (int a = 0; a < 3; a++) {
            const int64_t coord = i / s[a] % m;
            if (coord > 0)
                kd_test_coo_add(&c, i, i - s[a], -1.0);
            if (coord + 1 < m)
                kd_test_coo_add(&c, i, i + s[a], -1.0);
        }
    }
    return kd_test_coo_finish(&c);
}

/* Up to two named options. */
static kd_precond_options_t options(const char *a, double va, const char *b, double vb)
{
    kd_precond_options_t o = {0};
    const char *names[2] = {a, b};
    const double values[2] = {va, vb};
    for (int i = 0; i < 2; i++)
        if (names[i] != NULL) {
            snprintf(o.items[o.count].name, sizeof(o.items[0].name), "%s", names[i]);
            o.items[o.count++].value = values[i];
        }
    return o;
}

/* z = M^-1 r on the device for the k columns of host r (n * k values of dtype) into host z; the
 * device's z is NaN before. *launches: the kernels the apply enqueued. */
static int apply(const kd_precond_t *P, int64_t n, int64_t k, kd_dtype_t dtype, const void *r,
                 void *z, uint64_t *launches)
{
    kd_multivec_t rd = {0}, zd = {0};
    kd_err_t err = {0};
    const size_t v = kd_dtype_size(dtype);
    void *nan = malloc((size_t)(n * k) * v + 8);
    for (int64_t i = 0; i < n * k; i++)
        kd_store_real(nan, dtype, (size_t)i, NAN);
    int rc = kd_multivec_alloc(ocl, n, k, dtype, &rd, &err);
    if (rc == KD_OK)
        rc = kd_multivec_alloc(ocl, n, k, dtype, &zd, &err);
    if (rc == KD_OK)
        rc = kd_multivec_write(ocl, &rd, r, &err);
    if (rc == KD_OK)
        rc = kd_multivec_write(ocl, &zd, nan, &err);
    const uint64_t before = kd_ocl_launch_count(ocl);
    if (rc == KD_OK)
        rc = P->ops->apply(ocl, P, &rd, &zd, &err);
    *launches = kd_ocl_launch_count(ocl) - before;
    if (rc == KD_OK)
        rc = kd_multivec_read(ocl, &zd, z, &err);
    CHECK_MSG(rc == KD_OK, "apply: %s", err.message);
    kd_multivec_release(&rd);
    kd_multivec_release(&zd);
    free(nan);
    return rc;
}

/*
 * The block apply on k random columns against k one-column applies: every value finite and
 * max |z_block - z_one| <= tol max |z_one| per column. block: whether the block cycle must run
 * (1: fewer launches than k one-column cycles), must not (0: exactly k times one's) or may (-1:
 * a hierarchy whose coarse levels' formats the selection picks).
 */
static void block_matches(const char *name, kd_csr_t *csr64, kd_format_t format, kd_dtype_t dtype,
                          const kd_precond_options_t *opt, int64_t k, int block)
{
    const int64_t n = csr64->rows;
    kd_csr_t *csr = NULL;
    kd_matrix_t *A = NULL;
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_convert(csr64, dtype, &csr, &err) == KD_OK);
    kd_csr_free(csr64);
    REQUIRE(kd_matrix_upload(ocl, csr, format, &A, &err) == KD_OK);
    const int rc = kd_precond_get(ocl, A, &kd_precond_amg, opt, csr, &P, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", name, err.message);
    if (rc != KD_OK) {
        kd_matrix_free(A);
        kd_csr_free(csr);
        return;
    }
    kd_amg_stats_t st;
    REQUIRE(kd_amg_describe(P, &st, &err) == KD_OK);
    double *bw = NULL;
    void *r = kd_test_random_vector(n * k, dtype, -1.0, 1.0, &bw);
    const size_t v = kd_dtype_size(dtype);
    void *zb = malloc((size_t)(n * k) * v + 8), *z1 = malloc((size_t)n * v + 8);
    uint64_t launches_block = 0, launches_one = 0;
    if (apply(P, n, k, dtype, r, zb, &launches_block) != KD_OK)
        goto done;
    const double tol = dtype == KD_DTYPE_F64 ? 1e-12 : 2e-5;
    double worst = 0.0;
    int finite = 1;
    for (int64_t c = 0; c < k; c++) {
        if (apply(P, n, 1, dtype, (const char *)r + (size_t)(c * n) * v, z1, &launches_one) !=
            KD_OK)
            goto done;
        double diff = 0.0, scale = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double a = kd_load_real(zb, dtype, (size_t)(c * n + i));
            const double b = kd_load_real(z1, dtype, (size_t)i);
            finite &= isfinite(a) && isfinite(b);
            diff = fmax(diff, fabs(a - b));
            scale = fmax(scale, fabs(b));
        }
        CHECK_MSG(scale > 0.0 && diff <= tol * scale, "%s %s column %lld: off by %g of %g", name,
                  kd_dtype_name(dtype), (long long)c, diff, scale);
        worst = fmax(worst, scale > 0.0 ? diff / scale : INFINITY);
    }
    CHECK_MSG(finite, "%s %s: a value is not finite", name, kd_dtype_name(dtype));
    printf("block V-cycle %-34s %s k=%-2lld levels %d (coarsest %lld): launches %llu (one "
           "column %llu), max |z_block - z| / max |z| = %.1e\n",
           name, kd_dtype_name(dtype), (long long)k, st.levels, (long long)st.rows[st.levels - 1],
           (unsigned long long)launches_block, (unsigned long long)launches_one, worst);
    if (block == 1)
        CHECK_MSG(launches_block < (uint64_t)k * launches_one, "%s: %llu launches for %lld columns",
                  name, (unsigned long long)launches_block, (long long)k);
    else if (block == 0)
        CHECK_MSG(launches_block == (uint64_t)k * launches_one,
                  "%s: %llu launches for %lld columns, %llu for one", name,
                  (unsigned long long)launches_block, (long long)k,
                  (unsigned long long)launches_one);
done:
    free(r);
    free(bw);
    free(zb);
    free(z1);
    kd_matrix_free(A);
    kd_csr_free(csr);
}

static void test_block_vcycle(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    const int64_t g = small ? 24 : 64, m = small ? 8 : 16; /* small: still two levels */
    for (int d = 0; d < ndt; d++) {
        const kd_dtype_t t = dt[d];
        const kd_precond_options_t none = {0};
        const kd_precond_options_t plain = options("fused", 0, NULL, 0);
        const kd_precond_options_t one_inv = options("max_levels", 1, NULL, 0);
        const kd_precond_options_t small_coarse = options("coarse_size", 10, NULL, 0);
        block_matches("lap3d", laplacian_3d(m), KD_FMT_CSR_SCALAR, t, &none, 8, 1);
        block_matches("lap2d", kd_test_laplacian_2d(g, g - 5), KD_FMT_CSR_SCALAR, t, &none, 3, 1);
        block_matches("lap2d k = 1", kd_test_laplacian_2d(g, g), KD_FMT_CSR_SCALAR, t, &none, 1, 0);
        block_matches("lap2d k = 9", kd_test_laplacian_2d(g, 7), KD_FMT_CSR_SCALAR, t, &none, 9, 1);
        block_matches("lap2d fused 0", kd_test_laplacian_2d(g, g), KD_FMT_CSR_SCALAR, t, &plain, 4,
                      -1);
        block_matches("lap3d coarse_size 10", laplacian_3d(m), KD_FMT_CSR_SCALAR, t, &small_coarse,
                      3, 1);
        block_matches("lonely rows (P's rows empty)", kd_test_lonely_rows(small ? 400 : 3000),
                      KD_FMT_CSR_SCALAR, t, &none, 5, 1);
        block_matches("one level, dense inverse", kd_test_laplacian_2d(15, small ? 8 : 15),
                      KD_FMT_CSR_SCALAR, t, &one_inv, 3, 1);
        block_matches("one level, smoothed", kd_test_laplacian_2d(small ? 30 : 40, 30),
                      KD_FMT_CSR_SCALAR, t, &one_inv, 3, 1);
        block_matches("lap2d level 0 sell_c_sigma", kd_test_laplacian_2d(g, g), KD_FMT_SELL_C_SIGMA,
                      t, &none, 6, 1);
        kd_amg_test_set_gpu_lanes(1); /* several lanes a row and their trees, as on a GPU */
        block_matches("lap3d gpu lanes", laplacian_3d(m), KD_FMT_CSR_SCALAR, t, &none, 9, 1);
        block_matches("lap2d gpu lanes", kd_test_laplacian_2d(g, g - 3), KD_FMT_CSR_SCALAR, t,
                      &none, 3, 1);
        kd_amg_test_set_gpu_lanes(0);
        const kd_precond_options_t tail = options("tail_rows", 4096, NULL, 0);
        block_matches("lap2d tail_rows 4096 (per column)", kd_test_laplacian_2d(g, g),
                      KD_FMT_CSR_SCALAR, t, &tail, 3, 0);
        block_matches("lap2d level 0 coo (no SpMM)", kd_test_laplacian_2d(g, g), KD_FMT_COO, t,
                      &none, 3, 0);
    }
}

static kd_solve_params_t params(const char *precond, double rtol, const kd_csr_t *csr)
{
    kd_solve_params_t prm;
    kd_err_t err = {0};
    kd_solve_params_default(&prm);
    if (kd_method_choose("cg", precond, &prm.method, &prm.precond, &err) != KD_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(1);
    }
    prm.rtol = rtol;
    prm.csr = csr;
    return prm;
}

/* CG with AMG on k columns together and on each alone: the same iterations (within one), each
 * column's true residual within rtol; the matrix's device bytes the same after the solve (the
 * block vectors went with it). */
static void cg_together_as_alone(const char *name, kd_csr_t *csr64, kd_dtype_t dtype, int64_t k)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, dtype, k) == 0);
    const double rtol = dtype == KD_DTYPE_F64 ? 1e-8 : 1e-5;
    kd_solve_params_t prm = params("amg", rtol, p.csr);
    kd_solve_result_t *res = calloc((size_t)k, sizeof(*res)), one;
    kd_err_t err = {0};
    const size_t v = kd_dtype_size(dtype);
    void *x1 = malloc((size_t)p.n * v + 8);
    REQUIRE(kd_solve(ocl, p.A, 1, p.b, NULL, x1, &prm, &one, &err) == KD_OK); /* the setup */
    kd_solve_result_free(&one);
    const size_t bytes = p.A->device_bytes;
    CHECK_MSG(kd_solve(ocl, p.A, k, p.b, NULL, p.x, &prm, res, &err) == KD_OK, "%s: %s", name,
              err.message);
    CHECK(p.A->device_bytes == bytes);
    for (int64_t c = 0; c < k; c++) {
        const double relres = kd_test_true_relres(&p, p.x, c);
        CHECK_MSG(res[c].status == KD_SOLVE_CONVERGED, "%s column %lld: %s", name, (long long)c,
                  res[c].message);
        CHECK_MSG(relres <= rtol * 1.5, "%s column %lld: true relative residual %g", name,
                  (long long)c, relres);
        CHECK(kd_solve(ocl, p.A, 1, (const char *)p.b + (size_t)(c * p.n) * v, NULL, x1, &prm, &one,
                       &err) == KD_OK);
        const int64_t apart = one.iterations - res[c].iterations;
        printf("cg+amg %-12s %s k=%lld column %lld: %lld its together, %lld alone, true relres "
               "%.2e\n",
               name, kd_dtype_name(dtype), (long long)k, (long long)c, (long long)res[c].iterations,
               (long long)one.iterations, relres);
        CHECK_MSG(apart >= -1 && apart <= 1, "%s column %lld: %lld together, %lld alone", name,
                  (long long)c, (long long)res[c].iterations, (long long)one.iterations);
        kd_solve_result_free(&one);
        kd_solve_result_free(&res[c]);
    }
    free(res);
    free(x1);
    kd_test_problem_free(&p);
}

static void test_cg(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < ndt; d++) {
        cg_together_as_alone("lap3d", laplacian_3d(small ? 8 : 16), dt[d], 4);
        cg_together_as_alone("lap2d", kd_test_laplacian_2d(small ? 24 : 64, small ? 20 : 48), dt[d],
                             3);
    }
}

int main(int argc, char **argv)
{
    small = argc > 1 && strcmp(argv[1], "--small") == 0;
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    test_block_vcycle();
    test_cg();
    kd_ocl_close(ocl);
    return kd_test_finish();
}
