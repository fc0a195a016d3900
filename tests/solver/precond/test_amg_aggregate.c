/*
 * Aggregation on the device (solver/precond/amg/aggregate.c, kernels/precond/amg/amg.cl's
 * kd_amg_strength .. kd_amg_agg_join) against the same algorithm run sequentially here, round by
 * round, from amg.h's description: the aggregates must match exactly (the integer result of a
 * deterministic algorithm), on fresh random matrices and on the ones that break naive code: rows
 * with only a diagonal and rows with nothing at all (isolated: -1), one dense row (an arrow), a
 * 1 x 1 matrix, a strength threshold that leaves some nodes without a strong neighbour, float32.
 * The output is poisoned before each call. Every aggregate is checked to be non-empty and every
 * node with a strong neighbour to be in one. Then the option end to end: AMG-PCG with
 * aggregation = 1 converges by the CPU's measure, and aggregation = 2 is refused.
 * `test_amg_aggregate --small`: the edge cases alone, at sizes Oclgrind simulates in a minute
 * (KD_TEST_DEVICE=auto oclgrind --data-races --check-api bin/test_amg_aggregate --small).
 */
#include "kd_solver_test.h"
#include "solver/methods/method.h"
#include "solver/precond/amg/amg.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

static uint32_t ref_hash(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* Entry k of row i is strong, in the matrix's value type as the kernel computes it. */
static int ref_strong(const kd_csr_t *A, const double *diag, double threshold, int64_t i, int32_t k)
{
    const int32_t j = A->indices[k];
    if (j == i)
        return 0;
    if (A->dtype == KD_DTYPE_F32) {
        const float v = ((const float *)A->values)[k], t = (float)(threshold * threshold);
        return v != 0.0f && v * v >= t * fabsf((float)diag[i] * (float)diag[j]);
    }
    const double v = ((const double *)A->values)[k];
    return v != 0.0 && v * v >= threshold * threshold * fabs(diag[i] * diag[j]);
}

/* The device's algorithm, one round at a time. Returns the aggregates' count. */
static int64_t ref_aggregate(const kd_csr_t *A, double threshold, int32_t *agg, int *rounds)
{
    const int64_t n = A->rows;
    double *diag = calloc((size_t)n + 1, sizeof(double));
    unsigned char *strong = calloc((size_t)A->nnz + 1, 1);
    int *state = calloc((size_t)n + 1, sizeof(int));
    uint64_t *key = calloc((size_t)n + 1, 8), *m1 = calloc((size_t)n + 1, 8),
             *m2 = calloc((size_t)n + 1, 8);
    int32_t *from = calloc((size_t)n + 1, sizeof(int32_t));
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            if (A->indices[k] == i)
                diag[i] = kd_csr_value(A, k);
    for (int64_t i = 0; i < n; i++) {
        int any = 0;
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            any |= strong[k] = (unsigned char)ref_strong(A, diag, threshold, i, k);
        state[i] = any ? 1 : -1;
    }
    int left = 1;
    for (*rounds = 0; left; ++*rounds) {
        for (int64_t i = 0; i < n; i++) {
            int undecided = 0;
            for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
                undecided += strong[k] && state[A->indices[k]] == 1;
            const uint64_t s = state[i] > 0 ? (uint64_t)state[i] : 0;
            const uint64_t fewer = (uint64_t)(1023 - (undecided < 1023 ? undecided : 1023));
            key[i] = s << 62 | fewer << 52 | (uint64_t)(ref_hash((uint32_t)i) & 0xfffffU) << 32 |
                     (uint64_t)i;
        }
        for (int pass = 0; pass < 2; pass++) {
            const uint64_t *in = pass == 0 ? key : m1;
            uint64_t *out = pass == 0 ? m1 : m2;
            for (int64_t i = 0; i < n; i++) {
                uint64_t m = in[i];
                for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
                    if (strong[k] && in[A->indices[k]] > m)
                        m = in[A->indices[k]];
                out[i] = m;
            }
        }
        left = 0;
        for (int64_t i = 0; i < n; i++) {
            if (state[i] != 1)
                continue;
            if ((m2[i] & 0xffffffffU) == (uint64_t)i)
                state[i] = 2;
            else if (m2[i] >> 62 == 2)
                state[i] = 0;
            else
                left = 1;
        }
    }
    int64_t roots = 0;
    for (int64_t i = 0; i < n; i++)
        agg[i] = state[i] == 2 ? (int32_t)roots++ : -1;
    for (int pass = 0; pass < 2; pass++) {
        int32_t *in = pass == 0 ? agg : from, *out = pass == 0 ? from : agg;
        for (int64_t i = 0; i < n; i++) {
            int32_t a = in[i];
            uint64_t best = 0;
            for (int32_t k = A->indptr[i]; in[i] < 0 && k < A->indptr[i + 1]; k++) {
                const int32_t j = A->indices[k];
                const uint64_t jk =
                    ((uint64_t)(ref_hash((uint32_t)j) & 0x3fffffffU) << 32) + (uint64_t)j + 1;
                if (strong[k] && in[j] >= 0 && jk > best) {
                    best = jk;
                    a = in[j];
                }
            }
            out[i] = a;
        }
    }
    free(diag);
    free(strong);
    free(state);
    free(key);
    free(m1);
    free(m2);
    free(from);
    return roots;
}

/* The device's aggregates of A (owned) against the reference's, exactly. */
static void check_aggregates(const char *name, kd_csr_t *A, double threshold)
{
    const int64_t n = A->rows;
    int32_t *dev = malloc((size_t)n * sizeof(int32_t) + 4), *ref = malloc((size_t)n * 4 + 4);
    memset(dev, 0x5a, (size_t)n * sizeof(int32_t) + 4);
    int64_t naggs = -7, ref_naggs;
    int rounds = -7, ref_rounds = 0;
    kd_err_t err = {0};
    CHECK_MSG(kd_amg_aggregate_device(ocl, A, NULL, threshold, dev, &naggs, &rounds, &err) == KD_OK,
              "%s: %s", name, err.message);
    ref_naggs = ref_aggregate(A, threshold, ref, &ref_rounds);
    int64_t differ = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (dev[i] != ref[i] && differ++ == 0)
            first = i;
    printf("%-28s %s n=%-6lld threshold %.2f: %lld aggregates in %d rounds, %lld differ\n", name,
           kd_dtype_name(A->dtype), (long long)n, threshold, (long long)naggs, rounds,
           (long long)differ);
    CHECK_MSG(differ == 0, "%s: %lld nodes differ, first %lld: device %d, reference %d", name,
              (long long)differ, (long long)first, dev[first], ref[first]);
    CHECK_EQ_INT(naggs, ref_naggs);
    CHECK_EQ_INT(rounds, n > 0 ? ref_rounds : 0);
    CHECK(dev[n] == 0x5a5a5a5a); /* nothing past the end */
    int64_t *size = calloc((size_t)naggs + 1, sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        CHECK_MSG(dev[i] >= -1 && dev[i] < naggs, "%s: node %lld in aggregate %d", name,
                  (long long)i, dev[i]);
        if (dev[i] >= 0 && dev[i] < naggs)
            size[dev[i]]++;
    }
    for (int64_t a = 0; a < naggs; a++)
        CHECK_MSG(size[a] > 0, "%s: aggregate %lld is empty", name, (long long)a);
    free(size);
    free(dev);
    free(ref);
    kd_csr_free(A);
}

/* Rows with a diagonal alone, rows with nothing, the rest a random symmetric pattern. */
static kd_csr_t *with_empty_rows(int64_t n)
{
    kd_test_coo_t c = {.rows = n, .cols = n};
    for (int64_t i = 0; i < n; i++) {
        if (i % 7 == 3)
            continue; /* nothing at all */
        kd_test_coo_add(&c, i, i, 4.0 + kd_test_rand_double(0.0, 1.0));
        if (i % 5 == 1)
            continue; /* a diagonal alone */
        const int64_t j = kd_test_rand_below(n);
        if (j != i && j % 7 != 3 && j % 5 != 1) {
            const double v = kd_test_rand_double(-1.0, 1.0);
            kd_test_coo_add(&c, i, j, v);
            kd_test_coo_add(&c, j, i, v);
        }
    }
    return kd_test_coo_finish(&c);
}

static kd_csr_t *anisotropic_2d(int64_t g, double eps)
{
    kd_test_coo_t c = {.rows = g * g, .cols = g * g};
    for (int64_t y = 0; y < g; y++)
        for (int64_t x = 0; x < g; x++) {
            const int64_t i = y * g + x;
            kd_test_coo_add(&c, i, i, 2.0 + 2.0 * eps);
            if (x > 0)
                kd_test_coo_add(&c, i, i - 1, -1.0);
            if (x + 1 < g)
                kd_test_coo_add(&c, i, i + 1, -1.0);
            if (y > 0)
                kd_test_coo_add(&c, i, i - g, -eps);
            if (y + 1 < g)
                kd_test_coo_add(&c, i, i + g, -eps);
        }
    return kd_test_coo_finish(&c);
}

static kd_csr_t *single(double v)
{
    kd_test_coo_t c = {.rows = 1, .cols = 1};
    kd_test_coo_add(&c, 0, 0, v);
    return kd_test_coo_finish(&c);
}

/* Small cases of each kind, for a simulator. */
static void test_small(void)
{
    check_aggregates("lap2d 12x9 scrambled", kd_test_scramble(kd_test_laplacian_2d(12, 9)), 0.0);
    check_aggregates("random spd", kd_test_spd_matrix(150 + kd_test_rand_below(50), 6, 0.5), 0.15);
    check_aggregates("anisotropic 9 eps 1e-3", anisotropic_2d(9, 1e-3), 0.25);
    check_aggregates("arrow (one dense row)", kd_test_arrow_matrix(90), 0.0);
    check_aggregates("empty and diagonal-only rows", with_empty_rows(70), 0.0);
    check_aggregates("1x1", single(3.0), 0.0);
    check_aggregates("2x2 empty", kd_test_coo_finish(&(kd_test_coo_t){.rows = 2, .cols = 2}), 0.0);
}

static void test_against_reference(void)
{
    check_aggregates("lap2d 23x17 scrambled", kd_test_scramble(kd_test_laplacian_2d(23, 17)), 0.0);
    check_aggregates("lap2d 64x64", kd_test_laplacian_2d(64, 64), 0.0);
    check_aggregates("random spd", kd_test_spd_matrix(3000 + kd_test_rand_below(500), 8, 0.5), 0.0);
    check_aggregates("random spd", kd_test_spd_matrix(2000 + kd_test_rand_below(500), 6, 0.5),
                     0.15);
    check_aggregates("anisotropic 40 eps 1e-3", anisotropic_2d(40, 1e-3), 0.25);
    check_aggregates("anisotropic 40 eps 1e-3", anisotropic_2d(40, 1e-3), 0.0);
    check_aggregates("arrow (one dense row)", kd_test_arrow_matrix(700), 0.0);
    check_aggregates("arrow (one dense row)", kd_test_arrow_matrix(700), 0.3);
    check_aggregates("empty and diagonal-only rows", with_empty_rows(900), 0.0);
    check_aggregates("1x1", single(3.0), 0.0);
    check_aggregates("2x2 empty", kd_test_coo_finish(&(kd_test_coo_t){.rows = 2, .cols = 2}), 0.0);
    kd_dtype_t dt[2];
    if (kd_test_dtypes(ocl, dt) == 2 || dt[0] == KD_DTYPE_F32) {
        check_aggregates("random spd", kd_test_as_float32(kd_test_spd_matrix(1500, 8, 0.5)), 0.0);
        check_aggregates("anisotropic 40 eps 1e-3", kd_test_as_float32(anisotropic_2d(40, 1e-3)), 0.25);
    }
}

/* AMG-PCG with the device's aggregates converges by the CPU's measure; a bad value is refused. */
static void test_option(void)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, kd_test_laplacian_2d(80, 70), KD_DTYPE_F64, 1) == 0);
    kd_precond_options_t opt = {.count = 1};
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", "aggregation");
    kd_solve_params_t prm;
    kd_err_t err = {0};
    kd_solve_params_default(&prm);
    REQUIRE(kd_method_choose("cg", "amg", &prm.method, &prm.precond, &err) == KD_OK);
    prm.rtol = 1e-8;
    prm.csr = p.csr;
    prm.precond_options = &opt;
    int64_t its[2] = {0, 0};
    for (int device = 0; device < 2; device++) {
        opt.items[0].value = device;
        kd_solve_result_t res;
        REQUIRE(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
        CHECK_MSG(res.status == KD_SOLVE_CONVERGED, "aggregation %d: %s", device, res.message);
        CHECK(kd_test_true_relres(&p, p.x, 0) <= 1.5e-8);
        its[device] = res.iterations;
        kd_solve_result_free(&res);
    }
    printf("lap2d 80x70: amg %lld its with the host's aggregates, %lld with the device's\n",
           (long long)its[0], (long long)its[1]);
    opt.items[0].value = 2;
    kd_solve_result_t res;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "aggregation = 2");
    kd_test_problem_free(&p);
}

int main(int argc, char **argv)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    if (argc > 1 && strcmp(argv[1], "--small") == 0) {
        test_small();
    } else {
        test_against_reference();
        test_option();
    }
    kd_ocl_close(ocl);
    return kd_test_finish();
}
