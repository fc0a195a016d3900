/*
 * Sparse direct factorisations on the host (solver/direct/): method "direct"'s solver layer,
 * without a device.
 *   - Every real square matrix of tests/matrices that is nonsingular (adder_dcop_05, bayer10,
 *     watt_2, ani4, arrow: zero or missing diagonals, circuits, arrow-heads; 494_bus and
 *     dwt_878 + 4I: SPD) with klu, umfpack and the default choice, three right-hand sides at
 *     once: the true relative residual ||b - A x|| / ||b|| computed here on the test's own CSR
 *     is <= 1e-10 per column, and what the solve reports matches it.
 *   - The default: cholmod for a matrix that looks SPD, klu otherwise; cholmod on an indefinite
 *     symmetric matrix (can_24) falls back to klu and says so.
 *   - Singular matrices: rajat01 (a pattern file, every value 1) and dwt_878 numerically, a
 *     constructed one structurally (an empty column), each reported singular with the reason.
 *   - The budget: a factor over it is refused before its numeric factorisation (KD_ETOOLARGE
 *     naming the estimate and the budget, nothing charged), a factor charges its bytes and gives
 *     them back when freed.
 *   - float32 values are factored in double.
 *   - Refactoring new values on a kept analysis (klu, umfpack, cholmod): residuals, like's factor
 *     moved (klu) or kept (the others), another pattern refused, and a pivot order that fails
 *     the new values declined for a fresh factorisation.
 */
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "solver/direct/direct.h"

#include <math.h>
#include <string.h>

/* max over columns of ||b - A x|| / ||b||, on csr itself (float64 or float32 values). */
static double true_residual(const kd_csr_t *A, int64_t nrhs, const double *B, const double *X)
{
    double worst = 0.0;
    for (int64_t k = 0; k < nrhs; k++) {
        const double *b = B + k * A->rows, *x = X + k * A->rows;
        double rr = 0.0, bb = 0.0;
        for (int64_t i = 0; i < A->rows; i++) {
            long double s = b[i];
            for (int32_t j = A->indptr[i]; j < A->indptr[i + 1]; j++)
                s -= (long double)kd_csr_value(A, j) * x[A->indices[j]];
            rr += (double)(s * s);
            bb += b[i] * b[i];
        }
        const double rel = sqrt(rr) / sqrt(bb);
        worst = rel > worst ? rel : worst;
    }
    return worst;
}

/* B = A X_true for random X_true in [-1, 1]: what SciPy's spsolve is measured on too (a random
 * b on watt_2, condition ~1e12, leaves ||b - A x|| / ||b|| ~ 1e-8 in any double LU). */
static double *random_rhs(const kd_csr_t *A, int64_t nrhs)
{
    const int64_t n = A->rows;
    double *B = malloc((size_t)(n * nrhs) * sizeof(double));
    double *x = malloc((size_t)n * sizeof(double));
    for (int64_t k = 0; k < nrhs; k++) {
        for (int64_t i = 0; i < n; i++)
            x[i] = kd_test_rand_double(-1.0, 1.0);
        for (int64_t i = 0; i < n; i++) {
            double s = 0.0;
            for (int32_t j = A->indptr[i]; j < A->indptr[i + 1]; j++)
                s += kd_csr_value(A, j) * x[A->indices[j]];
            B[k * n + i] = s;
        }
    }
    free(x);
    return B;
}

/* Factor and solve A with ops (NULL: default); the residual checked; returns the library used. */
static const char *solve_checked(const char *name, const kd_csr_t *A, int looks_spd,
                                 const kd_direct_ops_t *ops)
{
    static char used[32];
    kd_direct_budget_t budget = {.limit = (size_t)1 << 32};
    atomic_init(&budget.used, 0);
    kd_direct_t *D = NULL;
    kd_direct_info_t info;
    kd_err_t err = {0};
    used[0] = '\0';
    const int rc = kd_direct_factor(A, looks_spd, ops, &budget, &D, &info, &err);
    CHECK_MSG(rc == KD_OK && D != NULL, "%s with %s: rc %d singular %d: %s %s", name,
              ops != NULL ? ops->name : "default", rc, info.singular, err.message, info.message);
    if (D == NULL)
        return used;
    snprintf(used, sizeof(used), "%s", info.solver);
    CHECK(info.factored);
    CHECK(info.factor_entries >= A->rows);
    CHECK(info.fill > 0.0);
    CHECK(info.estimate_bytes > 0.0);
    CHECK_MSG(atomic_load(&budget.used) == info.factor_bytes || info.factor_bytes == 0,
              "%s: charged %zu, factor %zu", name, (size_t)atomic_load(&budget.used),
              info.factor_bytes);
    const int64_t n = A->rows, nrhs = 3;
    double *B = random_rhs(A, nrhs), *X = calloc((size_t)(n * nrhs), sizeof(double));
    double norms[3];
    int refinements[3];
    CHECK_EQ_INT(kd_direct_solve(D, nrhs, B, X, norms, refinements, &err), KD_OK);
    const double rel = true_residual(A, nrhs, B, X);
    CHECK_MSG(rel <= 1e-10, "%s with %s: ||b - A x|| / ||b|| = %.3g", name, info.solver, rel);
    double reported = 0.0;
    for (int k = 0; k < nrhs; k++) {
        reported = norms[k] > reported ? norms[k] : reported;
        CHECK(refinements[k] >= 0 && refinements[k] <= 3);
    }
    CHECK(isfinite(reported));
    printf("  %-14s %-8s fill %6.2f  entries %9lld  bytes %10zu  analyze %.2f ms  factor %.2f ms  "
           "residual %.2g\n",
           name, info.solver, info.fill, (long long)info.factor_entries, info.factor_bytes,
           info.analyze_ms, info.factor_ms, rel);
    free(B);
    free(X);
    kd_direct_free(D);
    CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
    return used;
}

static void test_real_matrices(void)
{
    static const struct {
        const char *file;
        double shift;
        int spd;
    } cases[] = {
        {"adder_dcop_05.mtx", 0, 0}, {"bayer10.mtx", 0, 0}, {"watt_2.mtx", 0, 0},
        {"ani4.mtx", 0, 0},          {"arrow.mtx", 0, 0},   {"494_bus.mtx", 0, 1},
        {"dwt_878.mtx", 4.0, 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_csr_t *A = kd_test_load_mtx(cases[i].file, cases[i].shift);
        solve_checked(cases[i].file, A, cases[i].spd, &kd_direct_klu);
        /* UMFPACK's estimate for arrow's dense row is a bound of 12 GiB: refused (see below) */
        if (strcmp(cases[i].file, "arrow.mtx") != 0)
            solve_checked(cases[i].file, A, cases[i].spd, &kd_direct_umfpack);
        const char *used = solve_checked(cases[i].file, A, cases[i].spd, NULL);
        CHECK_MSG(strcmp(used, cases[i].spd ? "cholmod" : "klu") == 0, "%s: default chose %s",
                  cases[i].file, used);
        if (cases[i].spd)
            solve_checked(cases[i].file, A, 1, &kd_direct_cholmod);
        kd_csr_free(A);
    }
}

/* can_24 is symmetric with a positive diagonal but indefinite: cholmod fails, klu factors. */
static void test_cholmod_fallback(void)
{
    kd_csr_t *A = kd_test_load_mtx("can___24.mtx", 0);
    kd_direct_budget_t budget = {.limit = (size_t)1 << 30};
    atomic_init(&budget.used, 0);
    kd_direct_t *D = NULL;
    kd_direct_info_t info;
    kd_err_t err = {0};
    REQUIRE(kd_direct_factor(A, 1, NULL, &budget, &D, &info, &err) == KD_OK);
    if (D != NULL) {
        CHECK_STR_CONTAINS(info.solver, "klu");
        CHECK_STR_CONTAINS(info.message, "cholmod: not positive definite");
        CHECK_STR_CONTAINS(info.message, "klu factored instead");
    } else {
        /* can_24 as a pattern file may be singular too: then it says so */
        CHECK(info.singular);
        CHECK_STR_CONTAINS(info.message, "singular");
    }
    kd_direct_free(D);
    CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
    kd_csr_free(A);
}

static void expect_singular(const char *name, const kd_csr_t *A, const kd_direct_ops_t *ops,
                            const char *why)
{
    kd_direct_budget_t budget = {.limit = (size_t)1 << 30};
    atomic_init(&budget.used, 0);
    kd_direct_t *D = NULL;
    kd_direct_info_t info;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_direct_factor(A, 0, ops, &budget, &D, &info, &err), KD_OK);
    CHECK_MSG(D == NULL && info.singular, "%s with %s: not reported singular", name,
              ops != NULL ? ops->name : "default");
    CHECK_STR_CONTAINS(info.message, why);
    CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
    kd_direct_free(D);
}

static void test_singular(void)
{
    kd_csr_t *A = kd_test_load_mtx("rajat01.mtx", 0);
    expect_singular("rajat01", A, NULL, "singular");
    expect_singular("rajat01", A, &kd_direct_umfpack, "numerically singular");
    kd_csr_free(A);
    A = kd_test_load_mtx("dwt_878.mtx", 0);
    expect_singular("dwt_878", A, &kd_direct_klu, "singular");
    kd_csr_free(A);
    /* 3 x 3 with column 1 empty: structurally singular */
    static int32_t indptr[] = {0, 1, 2, 3}, indices[] = {0, 0, 2};
    static double values[] = {1.0, 2.0, 3.0};
    kd_csr_t S = {.rows = 3,
                  .cols = 3,
                  .nnz = 3,
                  .dtype = KD_DTYPE_F64,
                  .indptr = indptr,
                  .indices = indices,
                  .values = values};
    expect_singular("constructed", &S, &kd_direct_klu, "structurally singular");
    expect_singular("constructed", &S, &kd_direct_umfpack, "singular");
}

static void test_budget(void)
{
    kd_csr_t *A = kd_test_load_mtx("bayer10.mtx", 0);
    kd_direct_budget_t budget = {.limit = 100000};
    atomic_init(&budget.used, 0);
    kd_direct_t *D = NULL;
    kd_direct_info_t info;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_direct_factor(A, 0, NULL, &budget, &D, &info, &err), KD_ETOOLARGE);
    CHECK(D == NULL);
    CHECK_STR_CONTAINS(err.message, "estimated");
    CHECK_STR_CONTAINS(err.message, "over the factor budget of 0.1 MiB (100000 bytes");
    CHECK_STR_CONTAINS(err.message, "--factor-memory");
    CHECK_STR_CONTAINS(err.message, "nothing was factored");
    CHECK(info.factor_ms == 0.0); /* refused before the numeric factorisation */
    CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
    /* two factors share one budget: the second is refused while the first is held */
    budget.limit = (size_t)1 << 30;
    REQUIRE(kd_direct_factor(A, 0, NULL, &budget, &D, &info, &err) == KD_OK && D != NULL);
    const size_t first = atomic_load(&budget.used);
    CHECK(first > 0);
    budget.limit = first + first / 2;
    kd_direct_t *E = NULL;
    CHECK_EQ_INT(kd_direct_factor(A, 0, NULL, &budget, &E, &info, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "held by other factors");
    CHECK(atomic_load(&budget.used) == first);
    kd_direct_free(D);
    CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
    kd_csr_free(A);
}

static void test_float32(void)
{
    kd_csr_t *A = kd_test_load_mtx("watt_2.mtx", 0);
    float *v = malloc((size_t)A->nnz * sizeof(float));
    for (int64_t k = 0; k < A->nnz; k++)
        v[k] = (float)((double *)A->values)[k];
    kd_csr_t F = *A;
    F.dtype = KD_DTYPE_F32;
    F.values = v;
    F.pattern = NULL;
    const char *used = solve_checked("watt_2 float32", &F, 0, NULL);
    CHECK_STR_CONTAINS(used, "klu");
    free(v);
    kd_csr_free(A);
}

/* A copy of A's pattern with a_ij (1 + scale sin(i j + i + j)): symmetric when A is. */
static kd_csr_t perturbed(const kd_csr_t *A, double scale, double *values)
{
    for (int64_t i = 0; i < A->rows; i++)
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
            const double j = A->indices[k];
            values[k] = kd_csr_value(A, k) * (1.0 + scale * sin((double)i * j + (double)i + j));
        }
    kd_csr_t P = *A;
    P.dtype = KD_DTYPE_F64;
    P.values = values;
    P.pattern = NULL;
    return P;
}

/* New values on a factor's pattern: refactored on its analysis, residuals at rounding; klu's
 * factor moves (like spent), umfpack's and cholmod's stay; a pattern that differs is refused. */
static void test_refactor(void)
{
    static const struct {
        const char *file;
        double shift;
        const kd_direct_ops_t *ops;
        int spent;
    } cases[] = {
        {"watt_2.mtx", 0, &kd_direct_klu, 1},
        {"bayer10.mtx", 0, &kd_direct_klu, 1},
        {"adder_dcop_05.mtx", 0, &kd_direct_umfpack, 0},
        {"dwt_878.mtx", 4.0, &kd_direct_cholmod, 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_csr_t *A = kd_test_load_mtx(cases[i].file, cases[i].shift);
        double *v = malloc((size_t)A->nnz * sizeof(double));
        kd_csr_t A2 = perturbed(A, 0.01, v);
        kd_direct_budget_t budget = {.limit = (size_t)1 << 32};
        atomic_init(&budget.used, 0);
        kd_direct_t *D = NULL, *E = NULL;
        kd_direct_info_t info;
        kd_err_t err = {0};
        int spent = -1;
        REQUIRE(kd_direct_factor(A, 0, cases[i].ops, &budget, &D, &info, &err) == KD_OK &&
                D != NULL);
        const double fresh_ms = info.analyze_ms + info.factor_ms;
        CHECK_EQ_INT(kd_direct_refactor(D, &A2, &budget, &E, &info, &spent, &err), KD_OK);
        REQUIRE(E != NULL);
        CHECK_MSG(info.refactored, "%s: %s", cases[i].file, info.message);
        CHECK_EQ_INT(spent, cases[i].spent);
        CHECK(info.analyze_ms == 0.0);
        printf("  refactor %-14s %-8s %.2f ms against %.2f ms fresh\n", cases[i].file, info.solver,
               info.factor_ms, fresh_ms);
        const int64_t n = A->rows;
        double *B = random_rhs(&A2, 2), *X = calloc((size_t)(2 * n), sizeof(double));
        double norms[2];
        int refinements[2];
        CHECK_EQ_INT(kd_direct_solve(E, 2, B, X, norms, refinements, &err), KD_OK);
        const double rel = true_residual(&A2, 2, B, X);
        CHECK_MSG(rel <= 1e-10, "%s refactored: %.3g", cases[i].file, rel);
        if (!spent) { /* like's factor still answers A's systems */
            double *B1 = random_rhs(A, 1);
            CHECK_EQ_INT(kd_direct_solve(D, 1, B1, X, norms, refinements, &err), KD_OK);
            CHECK(true_residual(A, 1, B1, X) <= 1e-10);
            free(B1);
        }
        /* another pattern: refused before anything */
        kd_csr_t other = *A;
        other.nnz = A->nnz - 1;
        kd_direct_t *F = NULL;
        CHECK_EQ_INT(kd_direct_refactor(E, &other, &budget, &F, &info, &spent, &err), KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "pattern");
        free(B);
        free(X);
        free(v);
        kd_direct_free(D);
        kd_direct_free(E);
        CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
        kd_csr_free(A);
    }
}

/* The kept pivot order fails new values: a fresh factorisation, saying why. */
static void test_refactor_declined(void)
{
    static int32_t indptr[] = {0, 2, 4}, indices[] = {0, 1, 0, 1};
    static double v1[] = {10.0, 1.0, 1.0, 1.0}, v2[] = {1e-14, 1.0, 1.0, 1.0};
    kd_csr_t A1 = {.rows = 2,
                   .cols = 2,
                   .nnz = 4,
                   .dtype = KD_DTYPE_F64,
                   .indptr = indptr,
                   .indices = indices,
                   .values = v1};
    kd_csr_t A2 = A1;
    A2.values = v2;
    kd_direct_budget_t budget = {.limit = (size_t)1 << 30};
    atomic_init(&budget.used, 0);
    const kd_direct_ops_t *libs[] = {&kd_direct_klu, &kd_direct_umfpack};
    for (int l = 0; l < 2; l++) {
        kd_direct_t *D = NULL, *E = NULL;
        kd_direct_info_t info;
        kd_err_t err = {0};
        int spent;
        REQUIRE(kd_direct_factor(&A1, 0, libs[l], &budget, &D, &info, &err) == KD_OK);
        CHECK_EQ_INT(kd_direct_refactor(D, &A2, &budget, &E, &info, &spent, &err), KD_OK);
        REQUIRE(E != NULL);
        if (l == 0) { /* klu keeps its pivots; umfpack's numeric phase pivots afresh anyway */
            CHECK(!info.refactored);
            CHECK_STR_CONTAINS(info.message, "refactor declined");
            CHECK_STR_CONTAINS(info.message, "factored afresh");
        }
        double b[2] = {1.0 + 1e-14, 2.0}, x[2], norms[1];
        int refinements[1];
        CHECK_EQ_INT(kd_direct_solve(E, 1, b, x, norms, refinements, &err), KD_OK);
        CHECK_NEAR(x[0], 1.0, 1e-8);
        CHECK_NEAR(x[1], 1.0, 1e-8);
        kd_direct_free(D);
        kd_direct_free(E);
    }
    CHECK_EQ_INT((int)atomic_load(&budget.used), 0);
}

static void test_table(void)
{
    char names[128];
    kd_direct_names(names, sizeof(names));
    CHECK_STR_CONTAINS(names, "klu, umfpack, cholmod");
    CHECK(kd_direct_find("klu") == &kd_direct_klu);
    CHECK(kd_direct_find("superlu") == NULL);
}

int main(void)
{
    kd_test_seed();
    RUN(test_table);
    RUN(test_real_matrices);
    RUN(test_cholmod_fallback);
    RUN(test_singular);
    RUN(test_budget);
    RUN(test_float32);
    RUN(test_refactor);
    RUN(test_refactor_declined);
    return kd_test_finish();
}
