/*
 * ilu0's row matching (solver/precond/match.c; solver/precond/ilu.c, option `matching`), for
 * matrices with zero or missing diagonal entries (circuits, chemical processes).
 *   - kd_match_rows against brute force: on random small sparse matrices (some structurally
 *     singular), it finds a permutation exactly when one of the n! does; what it returns is a
 *     permutation with every a(perm[i], i) nonzero, for every flag combination; a larger random
 *     matrix with a planted transversal; a chain that forces one augmenting path through every
 *     row (depth n, no recursion); stored zeros count as absent; a full nonzero diagonal is kept.
 *   - Refusals: structurally singular (how many rows), an empty row, a 1x1 zero, naming rows.
 *   - The device apply with a matching (z = U^-1 L^-1 P r: the forward solve's gather, and the
 *     gather launch before the sweeps) against the host (match, permute, factor, solve), output
 *     poisoned, fresh random r, k = 1 and 3, float64 and float32, exact solves and sweeps.
 *   - gmres and bicgstab with ilu0 on adder_dcop_05 and on a generated matrix with zero diagonal
 *     entries: converged, checked by the CPU's ||b - A x||; on rajat01 (a pattern file: every value
 *     1, numerically singular) and bayer10 (a pivot cancels to 0 in ILU(0) of P A) a clean
 *     KD_EBADREQ naming the pivot.
 */
#include "kd_solver_test.h"
#include "kd_test_ilu.h"
#include "kd_test_mtx.h"
#include "solver/precond/ilu.h"
#include "solver/precond/match.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

static const unsigned all_flags[] = {0, KD_MATCH_KEEP_DIAGONAL, KD_MATCH_WEIGHTED,
                                     KD_MATCH_KEEP_DIAGONAL | KD_MATCH_WEIGHTED};

/* a(i, j) != 0 in csr. */
static int nonzero_at(const kd_csr_t *csr, int64_t i, int64_t j)
{
    for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
        if (csr->indices[k] == j && kd_csr_value(csr, k) != 0.0)
            return 1;
    return 0;
}

/* perm is a permutation of 0..n-1 putting nonzeros on P A's diagonal. */
static int valid_matching(const kd_csr_t *csr, const int32_t *perm)
{
    const int64_t n = csr->rows;
    unsigned char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        ok = perm[i] >= 0 && perm[i] < n && !seen[perm[i]] && nonzero_at(csr, perm[i], i);
        if (ok)
            seen[perm[i]] = 1;
    }
    free(seen);
    return ok;
}

/* Whether some permutation of the rows has a nonzero diagonal: all n! of them (Heap's order). */
static int brute_force_matchable(const kd_csr_t *csr)
{
    const int64_t n = csr->rows;
    int32_t p[8], c[8] = {0};
    for (int64_t i = 0; i < n; i++)
        p[i] = (int32_t)i;
    if (valid_matching(csr, p))
        return 1;
    for (int64_t i = 1; i < n;) {
        if (c[i] < i) {
            const int64_t j = i % 2 == 0 ? 0 : c[i];
            const int32_t t = p[j];
            p[j] = p[i];
            p[i] = t;
            if (valid_matching(csr, p))
                return 1;
            c[i]++;
            i = 1;
        } else
            c[i++] = 0;
    }
    return 0;
}

/* n x n with each entry present with probability `density`, a stored 0 now and then. */
static kd_csr_t *random_pattern(int64_t n, double density)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            if (kd_test_rand_double(0.0, 1.0) < density)
                kd_test_coo_add(&c, i, j,
                                kd_test_rand_below(10) == 0 ? 0.0 : kd_test_rand_double(-1.0, 1.0));
    return kd_test_coo_finish(&c);
}

static void test_brute_force(void)
{
    int found = 0, singular = 0;
    for (int t = 0; t < 1500; t++) {
        const int64_t n = 1 + kd_test_rand_below(7);
        kd_csr_t *csr = random_pattern(n, kd_test_rand_double(0.15, 0.6));
        const int expect = brute_force_matchable(csr);
        int empty = 0;
        for (int64_t i = 0; i < n; i++) {
            int any = 0;
            for (int64_t j = 0; j < n; j++)
                any |= nonzero_at(csr, i, j);
            empty |= !any;
        }
        for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
            int32_t *perm = NULL;
            kd_err_t err = {0};
            const int rc = kd_match_rows(csr, all_flags[f], NULL, &perm, &err);
            CHECK_MSG(rc == (expect ? KD_OK : KD_EBADREQ), "trial %d n=%lld flags=%u: rc %d (%s)",
                      t, (long long)n, all_flags[f], rc, err.message);
            if (rc == KD_OK)
                CHECK_MSG(valid_matching(csr, perm), "trial %d flags %u: not a valid matching", t,
                          all_flags[f]);
            else
                CHECK_STR_CONTAINS(err.message,
                                   empty ? "has no nonzero entry" : "structurally singular");
            CHECK(rc == KD_OK || perm == NULL);
            free(perm);
        }
        found += expect;
        singular += !expect;
        kd_csr_free(csr);
    }
    /* the generator must exercise both answers */
    CHECK_MSG(found > 300 && singular > 300, "%d matchable, %d singular", found, singular);
}

/* n x n: a random planted transversal (row q[j] has column j), `extra` random entries a row, the
 * diagonal removed from rows with probability `holes`. */
static kd_csr_t *planted(int64_t n, int64_t extra, double holes)
{
    int32_t *q = kd_test_random_perm(n);
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t j = 0; j < n; j++)
        kd_test_coo_add(&c, q[j], j, kd_test_rand_double(0.5, 1.0));
    for (int64_t i = 0; i < n; i++)
        for (int64_t e = 0; e < extra; e++) {
            const int64_t j = kd_test_rand_below(n);
            if (j != i || kd_test_rand_double(0.0, 1.0) >= holes)
                kd_test_coo_add(&c, i, j, kd_test_rand_double(-1.0, 1.0));
        }
    free(q);
    return kd_test_coo_finish(&c);
}

static void test_large(void)
{
    for (size_t f = 0; f < sizeof(all_flags) / sizeof(all_flags[0]); f++) {
        kd_csr_t *csr = planted(20000, 3, 0.5);
        int32_t *perm = NULL;
        kd_err_t err = {0};
        CHECK_MSG(kd_match_rows(csr, all_flags[f], NULL, &perm, &err) == KD_OK, "planted: %s",
                  err.message);
        CHECK(perm != NULL && valid_matching(csr, perm));
        free(perm);
        kd_csr_free(csr);
    }
    /* A chain: row i < n-1 has columns i and i+1, row n-1 only column 0. Rows taking their first
     * free column leave row n-1 one augmenting path through all n rows: a recursive search would
     * overflow the stack at this depth. */
    const int64_t n = 300000;
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i + 1 < n; i++)
        kd_test_coo_add(&c, i, i, 1.0), kd_test_coo_add(&c, i, i + 1, 1.0);
    kd_test_coo_add(&c, n - 1, 0, 1.0);
    kd_csr_t *chain = kd_test_coo_finish(&c);
    int32_t *perm = NULL;
    kd_err_t err = {0};
    CHECK_MSG(kd_match_rows(chain, 0, NULL, &perm, &err) == KD_OK, "chain: %s", err.message);
    CHECK(perm != NULL && valid_matching(chain, perm) && perm[0] == n - 1 && perm[n - 1] == n - 2);
    free(perm);
    /* with the diagonal kept first the same path is needed */
    CHECK(kd_match_rows(chain, KD_MATCH_KEEP_DIAGONAL, NULL, &perm, &err) == KD_OK &&
          valid_matching(chain, perm));
    free(perm);
    kd_csr_free(chain);
    /* a full nonzero diagonal is kept as it is (the identity) when asked to */
    kd_csr_t *lap = kd_test_laplacian_2d(30, 20);
    CHECK(kd_match_rows(lap, KD_MATCH_KEEP_DIAGONAL | KD_MATCH_WEIGHTED, NULL, &perm, &err) ==
          KD_OK);
    for (int64_t i = 0; i < lap->rows; i++)
        CHECK_MSG(perm[i] == i, "laplacian: row %lld moved", (long long)i);
    free(perm);
    kd_csr_free(lap);
}

static void expect_match_error(const char *name, kd_csr_t *csr, const int32_t *names,
                               const char *text, const char *text2)
{
    int32_t *perm = NULL;
    kd_err_t err = {0};
    CHECK_MSG(kd_match_rows(csr, KD_MATCH_KEEP_DIAGONAL | KD_MATCH_WEIGHTED, names, &perm, &err) ==
                  KD_EBADREQ,
              "%s: not refused", name);
    CHECK_STR_CONTAINS(err.message, text);
    CHECK_STR_CONTAINS(err.message, text2);
    CHECK(perm == NULL);
    kd_csr_free(csr);
}

static void test_refusals(void)
{
    /* rows 1, 2 and 4 have entries only in columns 0 and 3: one of them cannot be matched */
    kd_test_coo_t c = {5, 5, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&c, 0, 0, 1.0), kd_test_coo_add(&c, 0, 1, 1.0), kd_test_coo_add(&c, 0, 2, 1.0);
    kd_test_coo_add(&c, 1, 0, 2.0), kd_test_coo_add(&c, 1, 3, 1.0);
    kd_test_coo_add(&c, 2, 3, 3.0);
    kd_test_coo_add(&c, 3, 4, 1.0), kd_test_coo_add(&c, 3, 2, 1.0);
    kd_test_coo_add(&c, 4, 0, 1.0), kd_test_coo_add(&c, 4, 3, 5.0);
    expect_match_error("singular", kd_test_coo_finish(&c), NULL, "structurally singular",
                       "(1 of 5 rows could not be matched");
    /* the same through client names */
    kd_test_coo_t d = {3, 3, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&d, 0, 1, 1.0), kd_test_coo_add(&d, 1, 1, 1.0), kd_test_coo_add(&d, 2, 1, 1.0);
    static const int32_t names[] = {40, 41, 42};
    expect_match_error("singular named", kd_test_coo_finish(&d), names, "2 of 3 rows",
                       "row 40 first");
    /* an empty row, and a row of stored zeros */
    kd_test_coo_t e = {4, 4, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&e, 0, 1, 1.0), kd_test_coo_add(&e, 1, 0, 1.0), kd_test_coo_add(&e, 3, 2, 1.0);
    expect_match_error("empty row", kd_test_coo_finish(&e), NULL, "row 2 has no nonzero entry",
                       "singular");
    kd_test_coo_t z = {1, 1, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&z, 0, 0, 0.0);
    expect_match_error("1x1 zero", kd_test_coo_finish(&z), NULL, "row 0 has no nonzero entry", "");
    /* 1x1 nonzero: the identity */
    kd_test_coo_t one = {1, 1, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&one, 0, 0, -3.0);
    kd_csr_t *m = kd_test_coo_finish(&one);
    int32_t *perm = NULL;
    kd_err_t err = {0};
    CHECK(kd_match_rows(m, KD_MATCH_WEIGHTED, NULL, &perm, &err) == KD_OK && perm[0] == 0);
    free(perm);
    kd_csr_free(m);
}

/* ---------------------------------------------------------------------------------------------
 * The device apply with a matching against the host. */

static kd_precond_options_t options(int sweeps, int matching)
{
    kd_precond_options_t o = {.count = 2};
    snprintf(o.items[0].name, sizeof(o.items[0].name), "sweeps");
    o.items[0].value = sweeps;
    snprintf(o.items[1].name, sizeof(o.items[1].name), "matching");
    o.items[1].value = matching;
    return o;
}

/* A random diagonally dominant matrix (ILU(0) of it is well conditioned) with its rows shuffled:
 * all of them (`all`) or a few pairs, whose diagonal entries then go missing. */
static kd_csr_t *shuffled_dominant(int64_t n, int all)
{
    kd_csr_t *r = kd_test_random_matrix(n, n, NULL, 3);
    int32_t *q = kd_test_random_perm(n);
    for (int64_t i = 0; !all && i < n; i++)
        q[i] = (int32_t)i;
    for (int64_t s = 0; !all && s < n / 20 + 1 && n > 1; s++) {
        const int64_t i = kd_test_rand_below(n), j = kd_test_rand_below(n);
        const int32_t t = q[i];
        q[i] = q[j];
        q[j] = t;
    }
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++) {
        double sum = 1.0;
        for (int32_t k = r->indptr[i]; k < r->indptr[i + 1]; k++)
            if (r->indices[k] != i) {
                kd_test_coo_add(&c, q[i], r->indices[k], kd_csr_value(r, k));
                sum += fabs(kd_csr_value(r, k));
            }
        kd_test_coo_add(&c, q[i], i, kd_test_rand_below(2) ? sum : -sum);
    }
    free(q);
    kd_csr_free(r);
    return kd_test_coo_finish(&c);
}

static void check_apply(const char *name, kd_csr_t *csr64, int matching, int sweeps,
                        kd_dtype_t dtype, int64_t k)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, dtype, 1) == 0);
    const int64_t n = p.n;
    const kd_precond_options_t opt = options(sweeps, matching);
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    CHECK_MSG(kd_precond_get(ocl, p.A, &kd_precond_ilu0, &opt, p.csr, &P, &err) == KD_OK, "%s: %s",
              name, err.message);
    if (P == NULL) {
        kd_test_problem_free(&p);
        return;
    }
    /* the host reference: the same matching, rows permuted, factored, solved on P r */
    int zero_diag = 0;
    for (int64_t i = 0; i < n; i++)
        zero_diag |= !nonzero_at(p.csr, i, i);
    const int used = matching == 2 || (matching == 1 && zero_diag);
    int32_t *perm = malloc((size_t)n * sizeof(int32_t) + 4);
    kd_csr_t *pa = NULL;
    if (used) {
        free(perm);
        REQUIRE(kd_match_rows(p.csr,
                              matching == 1 ? KD_MATCH_KEEP_DIAGONAL | KD_MATCH_WEIGHTED
                                            : KD_MATCH_WEIGHTED,
                              NULL, &perm, &err) == KD_OK);
    } else
        for (int64_t i = 0; i < n; i++)
            perm[i] = (int32_t)i;
    REQUIRE(kd_match_permute_rows(p.csr, perm, &pa, &err) == KD_OK);
    kd_ilu_factors_t f;
    REQUIRE(kd_ilu0_factor(pa, NULL, &f, &err) == KD_OK);
    kd_ilu_stats_t st;
    REQUIRE(kd_ilu_describe(P, &st, &err) == KD_OK);
    int64_t moved = 0;
    for (int64_t i = 0; i < n; i++)
        moved += perm[i] != i;
    CHECK_MSG(st.matched == used && st.moved == (used ? moved : 0) && st.lower_nnz == f.lower.nnz &&
                  st.upper_nnz == f.upper.nnz,
              "%s: matched %d moved %lld (expected %d, %lld)", name, st.matched,
              (long long)st.moved, used, (long long)moved);
    kd_multivec_t r = {0}, z = {0};
    REQUIRE(kd_multivec_alloc(ocl, n, k, dtype, &r, &err) == KD_OK &&
            kd_multivec_alloc(ocl, n, k, dtype, &z, &err) == KD_OK);
    double *rw;
    void *rv = kd_test_random_vector(n * k, dtype, -1.0, 1.0, &rw);
    void *zv = malloc((size_t)(n * k) * 8 + 8);
    for (int64_t i = 0; i < n * k; i++)
        kd_store_real(zv, dtype, (size_t)i, NAN);
    REQUIRE(kd_multivec_write(ocl, &r, rv, &err) == KD_OK &&
            kd_multivec_write(ocl, &z, zv, &err) == KD_OK);
    CHECK_MSG(P->ops->apply(ocl, P, &r, &z, &err) == KD_OK, "%s: %s", name, err.message);
    REQUIRE(kd_multivec_read(ocl, &z, zv, &err) == KD_OK);
    double *pr = malloc((size_t)n * 8 + 8), *y = malloc((size_t)n * 8 + 8),
           *ref = malloc((size_t)n * 8 + 8);
    const double tol = dtype == KD_DTYPE_F64 ? 1e-11 : 5e-4;
    for (int64_t c = 0; c < k; c++) {
        for (int64_t i = 0; i < n; i++)
            pr[i] = rw[c * n + perm[i]];
        if (sweeps == 0) {
            host_solve(&f.lower, 1, pr, y);
            host_solve(&f.upper, 0, y, ref);
        } else {
            host_sweeps(&f.lower, sweeps, pr, y);
            host_sweeps(&f.upper, sweeps, y, ref);
        }
        double worst = 0.0, scale = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double d = kd_load_real(zv, dtype, (size_t)(c * n + i));
            worst = isfinite(d) ? fmax(worst, fabs(d - ref[i])) : INFINITY;
            scale = fmax(scale, fabs(ref[i]));
        }
        CHECK_MSG(worst <= tol * fmax(scale, 1e-300),
                  "%s %s matching=%d sweeps=%d column %lld/%lld: max error %g of %g", name,
                  kd_dtype_name(dtype), matching, sweeps, (long long)c, (long long)k, worst, scale);
    }
    free(pr);
    free(y);
    free(ref);
    free(rv);
    free(rw);
    free(zv);
    free(perm);
    kd_csr_free(pa);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
    kd_ilu_factors_free(&f);
    kd_test_problem_free(&p);
}

static void test_apply(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    static const int sweeps[] = {0, 2};
    for (int d = 0; d < ndt; d++)
        for (size_t s = 0; s < sizeof(sweeps) / sizeof(sweeps[0]); s++)
            for (int64_t k = 1; k <= 3; k += 2) {
                const int sw = sweeps[s];
                kd_test_coo_t one = {1, 1, 0, 0, NULL, NULL, NULL};
                kd_test_coo_add(&one, 0, 0, kd_test_rand_double(0.5, 2.0));
                check_apply("1x1", kd_test_coo_finish(&one), 2, sw, dt[d], k);
                check_apply("all rows shuffled 600", shuffled_dominant(600, 1), 1, sw, dt[d], k);
                check_apply("all rows shuffled 600", shuffled_dominant(600, 1), 2, sw, dt[d], k);
                check_apply("some rows swapped 800", shuffled_dominant(800, 0), 1, sw, dt[d], k);
                check_apply("some rows swapped 800, always", shuffled_dominant(800, 0), 2, sw,
                            dt[d], k);
                check_apply("lap2d, when needed", kd_test_laplacian_2d(20, 15), 1, sw, dt[d], k);
            }
}

/* ---------------------------------------------------------------------------------------------
 * gmres and bicgstab with ilu0 on matrices with zero diagonal entries. */

typedef struct solve_case {
    const char *name;
    kd_csr_t *csr;
    kd_dtype_t dtype;
    const char *refusal; /* NULL: must converge; else what the setup's KD_EBADREQ says */
} solve_case_t;

static void solve_with_ilu0(const solve_case_t *sc, const char *method, int sweeps)
{
    kd_csr_t *copy = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_convert(sc->csr, KD_DTYPE_F64, &copy, &err) == KD_OK);
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, copy, sc->dtype, 1) == 0);
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    REQUIRE(kd_method_choose(method, "ilu0", &prm.method, &prm.precond, &err) == KD_OK);
    const double rtol = sc->dtype == KD_DTYPE_F64 ? 1e-8 : 1e-4;
    const kd_precond_options_t opt = options(sweeps, 1);
    prm.rtol = rtol;
    prm.maxiter = 5000;
    prm.csr = p.csr;
    prm.precond_options = &opt;
    kd_solve_result_t res = {0};
    const int rc = kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err);
    if (sc->refusal != NULL) {
        CHECK_MSG(rc == KD_EBADREQ, "%s %s+ilu0: rc %d (%s)", sc->name, method, rc, err.message);
        CHECK_STR_CONTAINS(err.message, sc->refusal);
        printf("%-22s %-9s ilu0 sweeps=%d: refused: %s\n", sc->name, method, sweeps, err.message);
    } else {
        CHECK_MSG(rc == KD_OK, "%s %s+ilu0: %s", sc->name, method, err.message);
        const double relres = rc == KD_OK ? kd_test_true_relres(&p, p.x, 0) : INFINITY;
        CHECK_MSG(rc == KD_OK && res.status == KD_SOLVE_CONVERGED && relres <= 1.5 * rtol,
                  "%s %s+ilu0 sweeps=%d: %s after %lld iterations, true relres %g", sc->name,
                  method, sweeps, kd_solve_status_name(res.status), (long long)res.iterations,
                  relres);
        printf("%-22s %-9s ilu0 sweeps=%d: %s in %lld iterations, true relres %.2e\n", sc->name,
               method, sweeps, kd_solve_status_name(res.status), (long long)res.iterations, relres);
    }
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

static void test_solves(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    solve_case_t cases[4 + 2];
    int count = 0;
    cases[count++] = (solve_case_t){"adder_dcop_05", kd_test_load_mtx("adder_dcop_05.mtx", 0.0),
                                    KD_DTYPE_F64, NULL};
    /* every value 1 (a pattern file): rows 0 and 2 agree on their diagonal block, so the pivot of
     * row 2 cancels; SuperLU finds the matrix exactly singular */
    cases[count++] = (solve_case_t){"rajat01", kd_test_load_mtx("rajat01.mtx", 0.0), KD_DTYPE_F64,
                                    "ilu0: the pivot of row 2 is 0 (zero)"};
    /* 13,433 of 13,436 diagonal entries missing; matched, a pivot still cancels in ILU(0) */
    cases[count++] = (solve_case_t){"bayer10", kd_test_load_mtx("bayer10.mtx", 0.0), KD_DTYPE_F64,
                                    "ilu0: the pivot of row 13247 is 0"};
    for (int d = 0; d < ndt; d++)
        cases[count++] = (solve_case_t){d == 0 ? "shuffled 3000" : "shuffled 3000 (fp32 run)",
                                        shuffled_dominant(3000, 1), dt[d], NULL};
    static const char *const methods[] = {"gmres", "bicgstab"};
    for (int c = 0; c < count; c++) {
        for (size_t m = 0; m < 2; m++) {
            solve_with_ilu0(&cases[c], methods[m], 2);
            solve_with_ilu0(&cases[c], methods[m], 0);
        }
        kd_csr_free(cases[c].csr);
    }
}

/* matching = 0 keeps the old refusal; a bad value is refused; ic0 does not take the option. */
static void test_options(void)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, shuffled_dominant(50, 1), KD_DTYPE_F64, 1) == 0);
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    kd_precond_options_t o = options(0, 0);
    CHECK_EQ_INT(kd_precond_get(ocl, p.A, &kd_precond_ilu0, &o, p.csr, &P, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "pivot of row");
    const double bad[] = {-1, 0.5, 3, 1e300};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        o = options(0, 0);
        o.items[1].value = bad[i];
        CHECK_EQ_INT(kd_precond_get(ocl, p.A, &kd_precond_ilu0, &o, p.csr, &P, &err), KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "matching = ");
    }
    o = options(0, 1);
    CHECK_EQ_INT(kd_precond_check_options(&kd_precond_ic0, &o, &err), KD_EBADREQ);
    CHECK_EQ_INT(kd_precond_check_options(&kd_precond_ilu0, &o, &err), KD_OK);
    /* a structurally singular matrix through the preconditioner: the rows named */
    kd_test_problem_free(&p);
    kd_test_coo_t c = {3, 3, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&c, 0, 1, 1.0), kd_test_coo_add(&c, 1, 1, 1.0), kd_test_coo_add(&c, 2, 2, 1.0);
    kd_test_coo_add(&c, 2, 0, 1.0);
    REQUIRE(kd_test_problem_make(ocl, &p, kd_test_coo_finish(&c), KD_DTYPE_F64, 1) == 0);
    CHECK_EQ_INT(kd_precond_get(ocl, p.A, &kd_precond_ilu0, NULL, p.csr, &P, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "ilu0: the matrix is structurally singular");
    CHECK_STR_CONTAINS(err.message, "1 of 3 rows");
    CHECK(p.A->preconds == NULL);
    kd_test_problem_free(&p);
}

int main(void)
{
    kd_test_seed();
    test_brute_force();
    test_large();
    test_refusals();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    test_apply();
    test_options();
    test_solves();
    kd_ocl_close(ocl);
    return kd_test_finish();
}
