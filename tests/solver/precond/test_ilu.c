/*
 * The incomplete factorisation preconditioners ilu0 and ic0 (solver/precond/ilu.c,
 * solver/precond/ilu_factor.c, kernels/precond/ilu.cl).
 *   - The host factors against a dense reference (Saad's IKJ ILU(0), the row-wise IC(0)) and
 *     against their defining property, (L U)_ij = a_ij on A's pattern (L L^T on its lower
 *     triangle), on random diagonally dominant matrices, 1x1, a diagonal matrix, a dense last row
 *     and column, a Laplacian; the level schedules are valid (each row's references in earlier
 *     levels) and complete.
 *   - The device apply (z = U^-1 L^-1 r, poisoned z, fresh random r, k = 1 and 3 columns, float64
 *     and float32) against the host's triangular solves (sweeps = 0) and the host's Jacobi sweeps
 *     (sweeps = 1, 2, 5).
 *   - CG with ic0 on Laplacians, 494_bus and dwt_878: converged by the CPU's ||b - A x|| and in
 *     fewer iterations than CG with jacobi (counts printed for sweeps 0..5 and the default),
 *     several right-hand sides with x0, a reordered matrix.
 *   - Refusals: an empty row or a zero pivot (naming the client's row, also through a
 *     reordering), non-finite entries, a non-square matrix, ic0 on a nonsymmetric or indefinite
 *     matrix, bad sweeps, cg with ilu0.
 * ilu0's solves with a nonsymmetric method (gmres, bicgstab) are left to those methods' tests.
 */
#include "kd_solver_test.h"
#include "kd_test_ilu.h"
#include "kd_test_mtx.h"
#include "solver/precond/ilu.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

/* ---------------------------------------------------------------------------------------------
 * Test matrices. */

/* csr (freed) with each diagonal entry set to sum |row| + margin: ILU(0) exists. */
static kd_csr_t *dominant(kd_csr_t *csr, double margin)
{
    kd_test_coo_t c = {csr->rows, csr->cols, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < csr->rows; i++) {
        double sum = margin;
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            if (csr->indices[k] != i) {
                kd_test_coo_add(&c, i, csr->indices[k], kd_csr_value(csr, k));
                sum += fabs(kd_csr_value(csr, k));
            }
        kd_test_coo_add(&c, i, i, kd_test_rand_below(2) ? sum : -sum);
    }
    kd_csr_free(csr);
    return kd_test_coo_finish(&c);
}

/* A random dominant n x n matrix whose last row and last column are full. */
static kd_csr_t *dense_last(int64_t n)
{
    kd_csr_t *r = kd_test_random_matrix(n, n, NULL, 2);
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = r->indptr[i]; k < r->indptr[i + 1]; k++)
            kd_test_coo_add(&c, i, r->indices[k], kd_csr_value(r, k));
    for (int64_t j = 0; j < n; j++) {
        kd_test_coo_add(&c, n - 1, j, kd_test_rand_double(-1.0, 1.0));
        kd_test_coo_add(&c, j, n - 1, kd_test_rand_double(-1.0, 1.0));
    }
    kd_csr_free(r);
    return dominant(kd_test_coo_finish(&c), 1.0);
}

static kd_csr_t *diagonal(int64_t n)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++)
        kd_test_coo_add(&c, i, i, kd_test_rand_double(0.5, 2.0));
    return kd_test_coo_finish(&c);
}

static kd_csr_t *laplacian_3d(int64_t m)
{
    kd_test_coo_t c = {m * m * m, m * m * m, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < m * m * m; i++) {
        const int64_t x = i % m, y = i / m % m, z = i / (m * m);
        kd_test_coo_add(&c, i, i, 6.0);
        if (x > 0)
            kd_test_coo_add(&c, i, i - 1, -1.0), kd_test_coo_add(&c, i - 1, i, -1.0);
        if (y > 0)
            kd_test_coo_add(&c, i, i - m, -1.0), kd_test_coo_add(&c, i - m, i, -1.0);
        if (z > 0)
            kd_test_coo_add(&c, i, i - m * m, -1.0), kd_test_coo_add(&c, i - m * m, i, -1.0);
    }
    return kd_test_coo_finish(&c);
}

/* ---------------------------------------------------------------------------------------------
 * Host factors. */

static double *to_dense(const kd_csr_t *csr, unsigned char **mask)
{
    const int64_t n = csr->rows;
    double *a = calloc((size_t)(n * n) + 1, sizeof(double));
    *mask = calloc((size_t)(n * n) + 1, 1);
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++) {
            a[i * n + csr->indices[k]] = kd_csr_value(csr, k);
            (*mask)[i * n + csr->indices[k]] = 1;
        }
    return a;
}

/* The triangle t (plus its diagonal) as a dense n x n array. */
static double *tri_dense(const kd_ilu_tri_t *t)
{
    const int64_t n = t->n;
    double *d = calloc((size_t)(n * n) + 1, sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        d[i * n + i] = t->diag[i];
        for (int32_t k = t->indptr[i]; k < t->indptr[i + 1]; k++)
            d[i * n + t->indices[k]] = t->values[k];
    }
    return d;
}

/* Both triangles' structure: ascending in-range columns on the right side of the diagonal, and
 * exactly A's off-diagonal pattern (ic0: lower = A's lower, upper = its transpose). */
static void check_structure(const char *name, const kd_csr_t *csr, const kd_ilu_factors_t *f)
{
    const int64_t n = csr->rows;
    unsigned char *mask;
    double *a = to_dense(csr, &mask);
    for (int s = 0; s < 2; s++) {
        const kd_ilu_tri_t *t = s == 0 ? &f->lower : &f->upper;
        int64_t count = 0;
        CHECK_MSG(t->n == n && t->indptr[0] == 0 && t->indptr[n] == t->nnz, "%s side %d", name, s);
        for (int64_t i = 0; i < n; i++)
            for (int32_t k = t->indptr[i]; k < t->indptr[i + 1]; k++) {
                const int32_t j = t->indices[k];
                CHECK_MSG(s == 0 ? j < i : j > i, "%s: side %d row %lld has column %d", name, s,
                          (long long)i, j);
                CHECK_MSG(k == t->indptr[i] || t->indices[k - 1] < j, "%s: unsorted", name);
                CHECK_MSG(mask[i * n + j], "%s: (%lld, %d) is not in A's pattern", name,
                          (long long)i, j);
            }
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++)
                count += mask[i * n + j] && (s == 0 ? j < i : j > i);
        CHECK_MSG(count == t->nnz, "%s side %d: %lld entries, A has %lld", name, s,
                  (long long)t->nnz, (long long)count);
    }
    free(a);
    free(mask);
}

/* ILU(0): the dense IKJ reference (Saad, Algorithm 10.4) entry by entry, and L U = A on A's
 * pattern. */
static void check_ilu0(const char *name, const kd_csr_t *csr)
{
    const int64_t n = csr->rows;
    kd_ilu_factors_t f;
    kd_err_t err = {0};
    REQUIRE(kd_ilu0_factor(csr, NULL, &f, &err) == KD_OK);
    check_structure(name, csr, &f);
    unsigned char *m2, *unused;
    double *a = to_dense(csr, &m2), *ref = to_dense(csr, &unused);
    free(unused);
    for (int64_t i = 1; i < n; i++)
        for (int64_t k = 0; k < i; k++) {
            if (!m2[i * n + k])
                continue;
            ref[i * n + k] /= ref[k * n + k];
            for (int64_t j = k + 1; j < n; j++)
                if (m2[i * n + j])
                    ref[i * n + j] -= ref[i * n + k] * ref[k * n + j];
        }
    double *L = tri_dense(&f.lower), *U = tri_dense(&f.upper), worst = 0.0, prop = 0.0, scale = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            scale = fmax(scale, fabs(a[i * n + j]));
            const double mine = j < i ? L[i * n + j] : U[i * n + j];
            if (m2[i * n + j])
                worst = fmax(worst, fabs(mine - ref[i * n + j]) / fmax(1.0, fabs(ref[i * n + j])));
            if (j == i)
                CHECK(L[i * n + i] == 1.0);
            double lu = 0.0;
            for (int64_t k = 0; k < n; k++)
                lu += L[i * n + k] * U[k * n + j];
            if (m2[i * n + j])
                prop = fmax(prop, fabs(lu - a[i * n + j]));
        }
    CHECK_MSG(worst < 1e-12, "%s: ILU(0) differs from the reference by %g", name, worst);
    CHECK_MSG(prop <= 1e-12 * fmax(scale, 1.0), "%s: (LU - A) on the pattern: %g", name, prop);
    free(a);
    free(ref);
    free(m2);
    free(L);
    free(U);
    kd_ilu_factors_free(&f);
}

/* IC(0): the dense row-wise reference, L L^T = A on the lower pattern, U = L^T, diag > 0. */
static void check_ic0(const char *name, const kd_csr_t *csr)
{
    const int64_t n = csr->rows;
    kd_ilu_factors_t f;
    kd_err_t err = {0};
    CHECK_MSG(kd_ic0_factor(csr, NULL, &f, &err) == KD_OK, "%s: %s", name, err.message);
    if (f.lower.n != n)
        return;
    check_structure(name, csr, &f);
    unsigned char *mask;
    double *a = to_dense(csr, &mask), *ref = calloc((size_t)(n * n) + 1, sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        for (int64_t j = 0; j < i; j++) {
            if (!mask[i * n + j])
                continue;
            double s = a[i * n + j];
            for (int64_t k = 0; k < j; k++)
                s -= ref[i * n + k] * ref[j * n + k];
            ref[i * n + j] = s / ref[j * n + j];
        }
        double d = a[i * n + i];
        for (int64_t k = 0; k < i; k++)
            d -= ref[i * n + k] * ref[i * n + k];
        ref[i * n + i] = sqrt(d);
    }
    double *L = tri_dense(&f.lower), *U = tri_dense(&f.upper), worst = 0.0, prop = 0.0, scale = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j <= i; j++) {
            scale = fmax(scale, fabs(a[i * n + j]));
            worst = fmax(worst, fabs(L[i * n + j] - ref[i * n + j]));
            CHECK(U[j * n + i] == L[i * n + j]);
            double llt = 0.0;
            for (int64_t k = 0; k < n; k++)
                llt += L[i * n + k] * L[j * n + k];
            if (mask[i * n + j])
                prop = fmax(prop, fabs(llt - a[i * n + j]));
        }
    for (int64_t i = 0; i < n; i++)
        CHECK(f.lower.diag[i] > 0.0);
    CHECK_MSG(worst < 1e-12, "%s: IC(0) differs from the reference by %g", name, worst);
    CHECK_MSG(prop <= 1e-12 * fmax(scale, 1.0), "%s: (L L^T - A) on the pattern: %g", name, prop);
    free(a);
    free(mask);
    free(ref);
    free(L);
    free(U);
    kd_ilu_factors_free(&f);
}

/* Every row in exactly one level, each level's rows ascending and referencing earlier levels. */
static void check_levels(const char *name, const kd_ilu_tri_t *t, int lower)
{
    int32_t *order, *lp, levels;
    kd_err_t err = {0};
    REQUIRE(kd_ilu_levels(t, lower, &order, &lp, &levels, &err) == KD_OK);
    const int64_t n = t->n;
    int32_t *level = malloc((size_t)n * sizeof(int32_t) + 4);
    for (int64_t i = 0; i < n; i++)
        level[i] = -1;
    CHECK_MSG(lp[0] == 0 && lp[levels] == n, "%s: levels cover %d of %lld rows", name, lp[levels],
              (long long)n);
    for (int32_t l = 0; l < levels; l++) {
        CHECK_MSG(lp[l + 1] > lp[l], "%s: level %d is empty", name, l);
        for (int32_t p = lp[l]; p < lp[l + 1]; p++) {
            CHECK(order[p] >= 0 && order[p] < n && level[order[p]] == -1);
            CHECK(p == lp[l] || order[p - 1] < order[p]);
            level[order[p]] = l;
        }
    }
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = t->indptr[i]; k < t->indptr[i + 1]; k++)
            CHECK_MSG(level[t->indices[k]] < level[i],
                      "%s: row %lld (level %d) needs row %d "
                      "(level %d)",
                      name, (long long)i, level[i], t->indices[k], level[t->indices[k]]);
    free(level);
    free(order);
    free(lp);
}

static void test_host_factors(void)
{
    struct {
        const char *name;
        kd_csr_t *csr;
        int spd;
    } cases[] = {
        {"1x1", dominant(kd_test_random_matrix(1, 1, NULL, 1), 2.0), 0},
        {"diagonal", diagonal(40), 1},
        {"random 60", dominant(kd_test_random_matrix(60, 60, NULL, 4), 0.5), 0},
        {"random 80 dense-ish", dominant(kd_test_random_matrix(80, 80, NULL, 20), 0.1), 0},
        {"dense last row/col", dense_last(50), 0},
        {"spd 70", kd_test_spd_matrix(70, 6, 0.2), 1},
        {"lap2d 7x9", kd_test_laplacian_2d(7, 9), 1},
        {"lap3d 4^3", laplacian_3d(4), 1},
        {"arrow spd", NULL, 1},
    };
    /* arrow with a dominant first row: SPD, the first row and column dense */
    kd_csr_t *arrow = kd_test_arrow_matrix(30);
    kd_csr_t *sym = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_transpose(arrow, &sym, &err) == KD_OK);
    kd_test_coo_t c = {30, 30, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < 30; i++)
        for (int32_t k = arrow->indptr[i]; k < arrow->indptr[i + 1]; k++)
            if (arrow->indices[k] <= i)
                kd_test_coo_add(&c, i, arrow->indices[k],
                                arrow->indices[k] == i ? 40.0 : kd_csr_value(arrow, k));
    for (int64_t i = 0; i < 30; i++)
        for (int32_t k = arrow->indptr[i]; k < arrow->indptr[i + 1]; k++)
            if (arrow->indices[k] < i)
                kd_test_coo_add(&c, arrow->indices[k], i, kd_csr_value(arrow, k));
    cases[8].csr = kd_test_coo_finish(&c);
    kd_csr_free(arrow);
    kd_csr_free(sym);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        check_ilu0(cases[i].name, cases[i].csr);
        if (cases[i].spd)
            check_ic0(cases[i].name, cases[i].csr);
        kd_ilu_factors_t f;
        if (kd_ilu0_factor(cases[i].csr, NULL, &f, &err) == KD_OK) {
            check_levels(cases[i].name, &f.lower, 1);
            check_levels(cases[i].name, &f.upper, 0);
            kd_ilu_factors_free(&f);
        }
        kd_csr_free(cases[i].csr);
    }
    /* a tridiagonal matrix's schedule is a chain: n levels; a diagonal one's is one level */
    kd_csr_t *lap1 = kd_test_laplacian_2d(25, 1), *d = diagonal(25);
    kd_ilu_factors_t f;
    int32_t *order, *lp, levels;
    REQUIRE(kd_ilu0_factor(lap1, NULL, &f, &err) == KD_OK);
    REQUIRE(kd_ilu_levels(&f.upper, 0, &order, &lp, &levels, &err) == KD_OK);
    CHECK_EQ_INT(levels, 25);
    free(order), free(lp), kd_ilu_factors_free(&f);
    REQUIRE(kd_ilu0_factor(d, NULL, &f, &err) == KD_OK);
    REQUIRE(kd_ilu_levels(&f.lower, 1, &order, &lp, &levels, &err) == KD_OK);
    CHECK_EQ_INT(levels, 1);
    free(order), free(lp), kd_ilu_factors_free(&f);
    kd_csr_free(lap1);
    kd_csr_free(d);
}

/* ---------------------------------------------------------------------------------------------
 * The device apply against the host's solves. */

static kd_precond_options_t sweeps_option(int sweeps)
{
    kd_precond_options_t o = {.count = 1};
    snprintf(o.items[0].name, sizeof(o.items[0].name), "sweeps");
    o.items[0].value = sweeps;
    return o;
}

static void check_apply(const char *name, kd_csr_t *csr64, const kd_precond_ops_t *ops, int sweeps,
                        kd_dtype_t dtype, int64_t k)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, dtype, 1) == 0);
    const int64_t n = p.n;
    const kd_precond_options_t opt = sweeps_option(sweeps);
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    CHECK_MSG(kd_precond_get(ocl, p.A, ops, &opt, p.csr, &P, &err) == KD_OK, "%s: %s", name,
              err.message);
    kd_ilu_factors_t f;
    REQUIRE((ops == &kd_precond_ic0 ? kd_ic0_factor : kd_ilu0_factor)(p.csr, NULL, &f, &err) ==
            KD_OK);
    kd_ilu_stats_t st;
    REQUIRE(P != NULL && kd_ilu_describe(P, &st, &err) == KD_OK);
    CHECK(st.sweeps == sweeps && st.lower_nnz == f.lower.nnz && st.upper_nnz == f.upper.nnz);
    CHECK(sweeps > 0 ? st.lower_levels == 0 : st.lower_levels >= 1 && st.upper_levels >= 1);
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
    double *y = malloc((size_t)n * sizeof(double) + 8), *ref = malloc((size_t)n * 8 + 8);
    const double tol = dtype == KD_DTYPE_F64 ? 1e-11 : 5e-4;
    for (int64_t c = 0; c < k; c++) {
        if (sweeps == 0) {
            host_solve(&f.lower, 1, rw + c * n, y);
            host_solve(&f.upper, 0, y, ref);
        } else {
            host_sweeps(&f.lower, sweeps, rw + c * n, y);
            host_sweeps(&f.upper, sweeps, y, ref);
        }
        double worst = 0.0, scale = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const double d = kd_load_real(zv, dtype, (size_t)(c * n + i));
            worst = isfinite(d) ? fmax(worst, fabs(d - ref[i])) : INFINITY;
            scale = fmax(scale, fabs(ref[i]));
        }
        CHECK_MSG(worst <= tol * fmax(scale, 1e-300),
                  "%s %s %s sweeps=%d column %lld/%lld: "
                  "max error %g of %g",
                  name, ops->name, kd_dtype_name(dtype), sweeps, (long long)c, (long long)k, worst,
                  scale);
    }
    free(y);
    free(ref);
    free(rv);
    free(rw);
    free(zv);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
    kd_ilu_factors_free(&f);
    kd_test_problem_free(&p);
}

static void test_apply(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    static const int sweeps[] = {0, 1, 2, 5};
    for (int d = 0; d < ndt; d++)
        for (size_t s = 0; s < sizeof(sweeps) / sizeof(sweeps[0]); s++)
            for (int64_t k = 1; k <= 3; k += 2) {
                const int sw = sweeps[s];
                check_apply("1x1", dominant(kd_test_random_matrix(1, 1, NULL, 1), 1.0),
                            &kd_precond_ilu0, sw, dt[d], k);
                check_apply("diagonal", diagonal(300), &kd_precond_ic0, sw, dt[d], k);
                check_apply("diagonal", diagonal(300), &kd_precond_ilu0, sw, dt[d], k);
                check_apply("random 500", dominant(kd_test_random_matrix(500, 500, NULL, 5), 0.5),
                            &kd_precond_ilu0, sw, dt[d], k);
                check_apply("power law 400", dominant(kd_test_power_law_matrix(400, 400), 0.5),
                            &kd_precond_ilu0, sw, dt[d], k);
                check_apply("dense last row", dense_last(300), &kd_precond_ilu0, sw, dt[d], k);
                check_apply("spd 600", kd_test_spd_matrix(600, 8, 0.1), &kd_precond_ic0, sw, dt[d],
                            k);
                check_apply("lap2d 40x30", kd_test_laplacian_2d(40, 30), &kd_precond_ic0, sw, dt[d],
                            k);
                check_apply("lap3d 9^3", laplacian_3d(9), &kd_precond_ilu0, sw, dt[d], k);
            }
}

/* ---------------------------------------------------------------------------------------------
 * CG with ic0. */

static kd_solve_params_t params(const char *precond, double rtol, const kd_csr_t *csr,
                                const kd_precond_options_t *opt)
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
    prm.precond_options = opt;
    return prm;
}

/* CG with ic0 (sweeps; -1: the default) on p: converged by the CPU's measure; its iterations. */
static int64_t cg_ic0(const char *name, kd_test_problem_t *p, int sweeps, int64_t k, const void *x0)
{
    const double rtol = p->dtype == KD_DTYPE_F64 ? 1e-8 : 1e-5;
    const kd_precond_options_t opt = sweeps_option(sweeps);
    kd_solve_params_t prm = params("ic0", rtol, p->csr, sweeps >= 0 ? &opt : NULL);
    kd_solve_result_t res[4];
    kd_err_t err = {0};
    int64_t its = 0;
    const int rc = kd_solve(ocl, p->A, k, p->b, x0, p->x, &prm, res, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", name, err.message);
    if (rc != KD_OK)
        return -1;
    for (int64_t c = 0; c < k; c++) {
        const double relres = kd_test_true_relres(p, p->x, c);
        CHECK_MSG(res[c].status == KD_SOLVE_CONVERGED, "%s sweeps=%d column %lld: %s", name, sweeps,
                  (long long)c, res[c].message);
        CHECK_MSG(relres <= rtol * 1.5, "%s sweeps=%d column %lld: true relres %g", name, sweeps,
                  (long long)c, relres);
        its = res[c].iterations > its ? res[c].iterations : its;
        kd_solve_result_free(&res[c]);
    }
    return its;
}

static int64_t cg_jacobi(kd_test_problem_t *p)
{
    kd_solve_params_t prm = params("jacobi", p->dtype == KD_DTYPE_F64 ? 1e-8 : 1e-5, NULL, NULL);
    kd_solve_result_t res;
    kd_err_t err = {0};
    const int rc = kd_solve(ocl, p->A, 1, p->b, NULL, p->x, &prm, &res, &err);
    CHECK_MSG(rc == KD_OK && res.status == KD_SOLVE_CONVERGED, "jacobi: %s", err.message);
    if (rc != KD_OK)
        return -1;
    const int64_t its = res.iterations;
    kd_solve_result_free(&res);
    return its;
}

/* ic0-PCG with each sweeps setting beats jacobi-PCG; the counts printed. */
static void ic0_beats_jacobi(const char *name, kd_csr_t *csr64, kd_dtype_t dtype)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, dtype, 1) == 0);
    const int64_t jac = cg_jacobi(&p);
    printf("%-16s %s n=%-6lld jacobi %4lld its; ic0:", name, kd_dtype_name(dtype), (long long)p.n,
           (long long)jac);
    static const int sweeps[] = {0, 1, 2, 3, 5, -1};
    for (size_t s = 0; s < sizeof(sweeps) / sizeof(sweeps[0]); s++) {
        const int64_t its = cg_ic0(name, &p, sweeps[s], 1, NULL);
        if (sweeps[s] >= 0)
            printf(" sweeps=%d %lld", sweeps[s], (long long)its);
        else
            printf(" default %lld", (long long)its);
        CHECK_MSG(its > 0 && its < jac, "%s sweeps=%d: ic0 %lld its, jacobi %lld", name, sweeps[s],
                  (long long)its, (long long)jac);
    }
    printf("\n");
    kd_test_problem_free(&p);
}

static void test_cg(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < ndt; d++) {
        ic0_beats_jacobi("lap2d 64x64", kd_test_laplacian_2d(64, 64), dt[d]);
        ic0_beats_jacobi("lap3d 16^3", laplacian_3d(16), dt[d]);
    }
    /* in float32 neither preconditioner gets 494_bus (condition ~1e6) to 1e-5 */
    ic0_beats_jacobi("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), KD_DTYPE_F64);
    /* the pattern-only file's matrix of ones is singular; shifted, as test_amg takes it */
    ic0_beats_jacobi("dwt_878 + 4I", kd_test_load_mtx("dwt_878.mtx", 4.0), KD_DTYPE_F64);
}

/* Three right-hand sides in lock step from a random x0: each converges, in about the iterations
 * it takes alone. */
static void test_several_rhs(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < ndt; d++)
        for (int sweeps = 0; sweeps <= 2; sweeps += 2) {
            kd_test_problem_t p;
            REQUIRE(kd_test_problem_make(ocl, &p, kd_test_laplacian_2d(40, 40), dt[d], 3) == 0);
            double *x0w;
            void *x0 = kd_test_random_vector(p.n * 3, dt[d], -1.0, 1.0, &x0w);
            const int64_t all = cg_ic0("3 rhs", &p, sweeps, 3, x0);
            const int64_t one = cg_ic0("1 rhs", &p, sweeps, 1, x0);
            /* column 0 is the same in both; the other two random columns may take some more
             * (a seed gave 30 against 25): the slowest of three within a fifth of one */
            CHECK_MSG(all > 0 && one > 0 && all >= one && all - one <= 3 + one / 5,
                      "3 rhs: %lld its, 1: %lld", (long long)all, (long long)one);
            free(x0);
            free(x0w);
            kd_test_problem_free(&p);
        }
}

/* A reordered matrix: the factors follow P A P^T, the solve converges. */
static void test_reordered(void)
{
    kd_csr_t *csr = kd_test_scramble(kd_test_laplacian_2d(40, 30));
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload_reordered(ocl, csr, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A, &err) ==
            KD_OK);
    kd_test_problem_t p = {.csr = csr, .A = A, .dtype = KD_DTYPE_F64, .n = csr->rows};
    p.b = kd_test_random_vector(p.n, KD_DTYPE_F64, -1.0, 1.0, &p.bw);
    p.x = calloc((size_t)p.n, sizeof(double));
    const int64_t exact = cg_ic0("reordered", &p, 0, 1, NULL);
    const int64_t swept = cg_ic0("reordered", &p, 3, 1, NULL);
    /* RCM's bandwidth gives IC(0) far more to work with than the scrambled order: the counts of
     * the plain Laplacian's ic0-PCG, not of a scrambled one */
    printf("reordered lap2d 40x30: ic0 exact %lld its, sweeps=3 %lld its\n", (long long)exact,
           (long long)swept);
    CHECK(exact > 0 && exact < 45 && swept > 0 && swept < 60);
    kd_test_problem_free(&p);
}

/* ---------------------------------------------------------------------------------------------
 * Refusals. */

static void expect_setup_error(const char *name, kd_csr_t *csr64, const kd_precond_ops_t *ops,
                               const kd_precond_options_t *opt, int code, const char *text)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, KD_DTYPE_F64, 1) == 0);
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    const int rc = kd_precond_get(ocl, p.A, ops, opt, p.csr, &P, &err);
    CHECK_MSG(rc == code, "%s: %d (%s)", name, rc, err.message);
    CHECK_STR_CONTAINS(err.message, text);
    CHECK(P == NULL && p.A->preconds == NULL);
    kd_test_problem_free(&p);
}

/* csr (freed) without row `row`'s entries (and column row's too when sym). */
static kd_csr_t *drop_row(kd_csr_t *csr, int64_t row, int sym)
{
    kd_test_coo_t c = {csr->rows, csr->cols, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < csr->rows; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            if (i != row && !(sym && csr->indices[k] == row))
                kd_test_coo_add(&c, i, csr->indices[k], kd_csr_value(csr, k));
    kd_csr_free(csr);
    return kd_test_coo_finish(&c);
}

static void test_errors(void)
{
    expect_setup_error("empty row", drop_row(kd_test_laplacian_2d(6, 6), 7, 0), &kd_precond_ilu0,
                       NULL, KD_EBADREQ, "row 7 has no nonzero entry");
    expect_setup_error("empty row ic0", drop_row(kd_test_laplacian_2d(6, 6), 9, 1), &kd_precond_ic0,
                       NULL, KD_EBADREQ, "pivot of row 9");
    expect_setup_error("ic0 nonsymmetric", drop_row(kd_test_laplacian_2d(6, 6), 7, 0),
                       &kd_precond_ic0, NULL, KD_EBADREQ, "needs a symmetric matrix");
    /* [[1, 2], [2, 1]]: symmetric, positive diagonal, indefinite: the second pivot is -3 */
    kd_test_coo_t c = {2, 2, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&c, 0, 0, 1.0), kd_test_coo_add(&c, 0, 1, 2.0);
    kd_test_coo_add(&c, 1, 0, 2.0), kd_test_coo_add(&c, 1, 1, 1.0);
    expect_setup_error("ic0 indefinite", kd_test_coo_finish(&c), &kd_precond_ic0, NULL, KD_EBADREQ,
                       "not positive definite");
    /* a zero pivot that arises in elimination: [[1, 1], [1, 1]] */
    kd_test_coo_t z = {2, 2, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&z, 0, 0, 1.0), kd_test_coo_add(&z, 0, 1, 1.0);
    kd_test_coo_add(&z, 1, 0, 1.0), kd_test_coo_add(&z, 1, 1, 1.0);
    expect_setup_error("zero pivot", kd_test_coo_finish(&z), &kd_precond_ilu0, NULL, KD_EBADREQ,
                       "pivot of row 1 is 0");
    expect_setup_error("non-square", kd_test_random_matrix(5, 7, NULL, 2), &kd_precond_ilu0, NULL,
                       KD_EBADREQ, "square");
    const double bad[] = {-1, 2.5, 65, 1e300};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kd_precond_options_t o = sweeps_option(0);
        o.items[0].value = bad[i];
        expect_setup_error("bad sweeps", kd_test_laplacian_2d(4, 4), &kd_precond_ic0, &o,
                           KD_EBADREQ, "sweeps");
    }
    kd_precond_options_t o = sweeps_option(1);
    snprintf(o.items[0].name, sizeof(o.items[0].name), "omega");
    expect_setup_error("unknown option", kd_test_laplacian_2d(4, 4), &kd_precond_ilu0, &o,
                       KD_EBADREQ, "sweeps");
    /* non-finite entries, on the host factorisation itself */
    kd_csr_t *nan = kd_test_laplacian_2d(3, 3);
    ((double *)nan->values)[4] = NAN;
    kd_ilu_factors_t f;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_ilu0_factor(nan, NULL, &f, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "is nan");
    CHECK(f.lower.indptr == NULL);
    kd_csr_free(nan);
    /* a reordered matrix's empty row is named in the client's numbering */
    kd_csr_t *holed = drop_row(kd_test_scramble(kd_test_laplacian_2d(12, 12)), 37, 0);
    kd_matrix_t *A = NULL;
    REQUIRE(kd_matrix_upload_reordered(ocl, holed, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A, &err) ==
            KD_OK);
    const kd_precond_t *P = NULL;
    CHECK_EQ_INT(kd_precond_get(ocl, A, &kd_precond_ilu0, NULL, holed, &P, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "row 37 has no nonzero entry");
    kd_matrix_free(A);
    kd_csr_free(holed);
    /* cg needs a symmetric preconditioner: ilu0 is refused, ic0 taken */
    const kd_method_ops_t *m;
    const kd_precond_ops_t *pc;
    CHECK(kd_method_choose("cg", "ilu0", &m, &pc, &err) != KD_OK);
    CHECK(kd_method_choose("cg", "ic0", &m, &pc, &err) == KD_OK && pc == &kd_precond_ic0);
}

int main(void)
{
    kd_test_seed();
    test_host_factors();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    test_apply();
    test_cg();
    test_several_rhs();
    test_reordered();
    test_errors();
    kd_ocl_close(ocl);
    return kd_test_finish();
}
