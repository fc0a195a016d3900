/*
 * The smoothed-aggregation AMG preconditioner (solver/precond/amg/amg.c,
 * solver/precond/amg/coarsen.c). Host pieces against independent checks: the dense inverse (A A^-1
 * = I), the tridiagonal's largest eigenvalue (a closed form), aggregates that cover every row, the
 * prolongator's rows. AMG-PCG on the device: converges on generated 2-D and 3-D Laplacians, a
 * reordered matrix and the real SPD matrices by the CPU's measure of ||b - A x||, in far fewer
 * iterations than Jacobi-PCG (asserted), with several right-hand sides each as alone, in float64
 * and float32; the V-cycle is symmetric (x'M^-1 y = y'M^-1 x to rounding, so CG stays valid); the
 * hierarchy is built once and lives with the matrix; a zero diagonal, a nonsymmetric matrix and a
 * missing host CSR are clear errors. The fused V-cycle (solver/precond/amg/fused.c) applies the
 * same operator as the straightforward one, a launch per step: M^-1 r by both agree to rounding.
 */
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/precond/amg/amg.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

static kd_csr_t *laplacian_3d(int64_t m)
{
    kd_test_coo_t c = {.rows = m * m * m, .cols = m * m * m};
    for (int64_t z = 0; z < m; z++)
        for (int64_t y = 0; y < m; y++)
            for (int64_t x = 0; x < m; x++) {
                const int64_t i = (z * m + y) * m + x;
                kd_test_coo_add(&c, i, i, 6.0);
                if (x > 0)
                    kd_test_coo_add(&c, i, i - 1, -1.0);
                if (x + 1 < m)
                    kd_test_coo_add(&c, i, i + 1, -1.0);
                if (y > 0)
                    kd_test_coo_add(&c, i, i - m, -1.0);
                if (y + 1 < m)
                    kd_test_coo_add(&c, i, i + m, -1.0);
                if (z > 0)
                    kd_test_coo_add(&c, i, i - m * m, -1.0);
                if (z + 1 < m)
                    kd_test_coo_add(&c, i, i + m * m, -1.0);
            }
    return kd_test_coo_finish(&c);
}

static void test_dense_inverse(void)
{
    static const int64_t sizes[] = {1, 2, 17, 230};
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int64_t n = sizes[si];
        double *a = malloc(n * n * sizeof(double)), *inv = malloc(n * n * sizeof(double));
        kd_csr_t *spd = kd_test_spd_matrix(n, n < 5 ? n : 5, 0.5);
        memset(a, 0, n * n * sizeof(double));
        for (int64_t i = 0; i < n; i++)
            for (int32_t k = spd->indptr[i]; k < spd->indptr[i + 1]; k++)
                a[i * n + spd->indices[k]] = kd_csr_value(spd, k);
        memcpy(inv, a, n * n * sizeof(double));
        kd_err_t err = {0};
        CHECK(kd_amg_dense_inverse(inv, n, &err) == KD_OK);
        double worst = 0.0, asym = 0.0;
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0.0;
                for (int64_t k = 0; k < n; k++)
                    s += a[i * n + k] * inv[k * n + j];
                worst = fmax(worst, fabs(s - (i == j ? 1.0 : 0.0)));
                asym = fmax(asym, fabs(inv[i * n + j] - inv[j * n + i]));
            }
        CHECK_MSG(worst < 1e-10, "n = %lld: A A^-1 - I: %g", (long long)n, worst);
        CHECK_MSG(asym == 0.0, "n = %lld: A^-1 is not stored symmetric (%g)", (long long)n, asym);
        /* not positive definite: a clear error naming the pivot */
        memcpy(inv, a, n * n * sizeof(double));
        inv[(n / 2) * n + n / 2] = -1.0;
        CHECK_EQ_INT(kd_amg_dense_inverse(inv, n, &err), KD_ENOTSPD);
        CHECK_STR_CONTAINS(err.message, "not positive definite");
        kd_csr_free(spd);
        free(a);
        free(inv);
    }
}

static void test_tridiagonal(void)
{
    /* tridiag(-1, 2, -1) of order m: lambda_max = 2 + 2 cos(pi / (m + 1)) */
    for (int m = 1; m <= 40; m += 13) {
        double alpha[40], beta[40];
        for (int i = 0; i < m; i++) {
            alpha[i] = 2.0;
            beta[i] = -1.0;
        }
        const double want = 2.0 + 2.0 * cos(M_PI / (m + 1));
        CHECK_NEAR(kd_amg_tridiagonal_max(alpha, beta, m), want, 1e-9);
    }
}

static void test_aggregates_and_prolongator(void)
{
    kd_csr_t *A = kd_test_scramble(kd_test_laplacian_2d(23, 17));
    const int64_t n = A->rows;
    int32_t *agg = malloc((size_t)n * sizeof(int32_t));
    int64_t naggs = 0;
    kd_err_t err = {0};
    CHECK(kd_amg_aggregate(A, 0.0, 1, agg, &naggs, &err) == KD_OK);
    CHECK_MSG(naggs > 0 && naggs < n / 3, "%lld aggregates of %lld rows", (long long)naggs,
              (long long)n);
    int64_t *size = calloc((size_t)naggs, sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        CHECK(agg[i] >= 0 && agg[i] < naggs);
        if (agg[i] >= 0 && agg[i] < naggs)
            size[agg[i]]++;
    }
    for (int64_t j = 0; j < naggs; j++)
        CHECK(size[j] > 0);
    /* P = (I - w D^-1 A) T: P's rows against the formula computed densely here */
    kd_csr_t *P = NULL;
    const double w = 0.6;
    CHECK(kd_amg_prolongator(A, agg, naggs, w, &P, &err) == KD_OK);
    CHECK(P->rows == n && P->cols == naggs);
    double *row = calloc((size_t)naggs, sizeof(double));
    double worst = 0.0;
    for (int64_t i = 0; i < n && P != NULL; i++) {
        double aii = 0.0;
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            if (A->indices[k] == i)
                aii = kd_csr_value(A, k);
        memset(row, 0, (size_t)naggs * sizeof(double));
        row[agg[i]] += 1.0 / sqrt((double)size[agg[i]]);
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
            const int32_t a = agg[A->indices[k]];
            row[a] -= w / aii * kd_csr_value(A, k) / sqrt((double)size[a]);
        }
        for (int32_t k = P->indptr[i]; k < P->indptr[i + 1]; k++) {
            CHECK(k == P->indptr[i] || P->indices[k] > P->indices[k - 1]);
            worst = fmax(worst, fabs(kd_csr_value(P, k) - row[P->indices[k]]));
            row[P->indices[k]] = 0.0;
        }
        for (int64_t j = 0; j < naggs; j++)
            worst = fmax(worst, fabs(row[j]));
    }
    CHECK_MSG(worst < 1e-14, "prolongator off by %g", worst);
    /* a zero diagonal entry is refused */
    ((double *)A->values)[A->indptr[5]] = 0.0; /* row 5's first entry: make the diagonal 0 */
    for (int32_t k = A->indptr[5]; k < A->indptr[6]; k++)
        if (A->indices[k] == 5)
            ((double *)A->values)[k] = 0.0;
    kd_csr_free(P);
    P = NULL;
    CHECK_EQ_INT(kd_amg_prolongator(A, agg, naggs, w, &P, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "row 5");
    free(row);
    free(size);
    free(agg);
    kd_csr_free(A);
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

/* AMG-PCG and Jacobi-PCG on one problem: both converge by the CPU's measure; AMG in at most
 * `ratio` of Jacobi's iterations. Returns AMG's iterations. */
static int64_t amg_beats_jacobi(const char *name, kd_csr_t *csr64, kd_dtype_t dtype, double ratio)
{
    kd_test_problem_t p;
    if (kd_test_problem_make(ocl, &p, csr64, dtype, 1) != 0)
        exit(1);
    const double rtol = dtype == KD_DTYPE_F64 ? 1e-8 : 1e-5;
    kd_solve_result_t ra, rj;
    kd_err_t err = {0};
    kd_solve_params_t prm = params("amg", rtol, p.csr);
    CHECK_MSG(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &ra, &err) == KD_OK, "%s: %s", name,
              err.message);
    const double relres = kd_test_true_relres(&p, p.x, 0);
    prm = params("jacobi", rtol, NULL);
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &rj, &err) == KD_OK);
    printf("%-22s %s n=%-6lld amg %3lld its (true relres %.2e)  jacobi %4lld its\n", name,
           kd_dtype_name(dtype), (long long)p.n, (long long)ra.iterations, relres,
           (long long)rj.iterations);
    CHECK_MSG(ra.status == KD_SOLVE_CONVERGED, "%s: %s", name, ra.message);
    CHECK_MSG(relres <= rtol * 1.5, "%s: true relative residual %g", name, relres);
    CHECK_MSG(rj.status == KD_SOLVE_CONVERGED, "%s jacobi: %s", name, rj.message);
    CHECK_MSG((double)ra.iterations <= ratio * (double)rj.iterations,
              "%s: amg %lld iterations, jacobi %lld", name, (long long)ra.iterations,
              (long long)rj.iterations);
    const int64_t its = ra.iterations;
    kd_solve_result_free(&ra);
    kd_solve_result_free(&rj);
    kd_test_problem_free(&p);
    return its;
}

/* The level-0 estimate of lambda_max(D^-1 A) (Lanczos on the device, kernels/precond/amg/amg.cl)
 * against the same 12 steps on the host in double from the start vector the host used to make
 * (the 64-bit LCG from 0x9e3779b97f4a7c15, its top 53 bits less 0.5): equal to rounding, which
 * checks the device's jump-ahead of the generator and every step; and below the true lambda_max
 * (a Ritz value), within 10% of it (many power iterations on the host). */
static double host_lanczos(const kd_csr_t *A, int steps)
{
    const int64_t n = A->rows;
    double *s = malloc((size_t)n * sizeof(double)), *v = calloc((size_t)n, sizeof(double)),
           *vp = calloc((size_t)n, sizeof(double)), *w = calloc((size_t)n, sizeof(double)),
           *t = calloc((size_t)n, sizeof(double));
    double alpha[64], beta[64], norm = 0.0, b_prev = 0.0;
    uint64_t seed = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < n; i++) {
        double d = 0.0;
        for (int64_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            d = A->indices[k] == i ? kd_csr_value(A, k) : d;
        s[i] = sqrt(fabs(1.0 / d));
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        v[i] = (double)(seed >> 11) / 9007199254740992.0 - 0.5;
        norm += v[i] * v[i];
    }
    for (int64_t i = 0; i < n; i++)
        v[i] /= sqrt(norm);
    int m = 0;
    for (int j = 0; j < steps && j < (int)n; j++) {
        double a = 0.0, b = 0.0;
        for (int64_t i = 0; i < n; i++)
            t[i] = s[i] * v[i];
        for (int64_t i = 0; i < n; i++) {
            double y = 0.0;
            for (int64_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
                y += kd_csr_value(A, k) * t[A->indices[k]];
            w[i] = s[i] * y;
            a += w[i] * v[i];
        }
        for (int64_t i = 0; i < n; i++) {
            w[i] = (w[i] - a * v[i]) - b_prev * vp[i];
            b += w[i] * w[i];
        }
        b = sqrt(b);
        alpha[m] = a;
        beta[m] = b;
        m++;
        if (!(b > 1e-12 * fabs(a)))
            break;
        for (int64_t i = 0; i < n; i++) {
            vp[i] = v[i];
            v[i] = w[i] / b;
        }
        b_prev = b;
    }
    free(s);
    free(v);
    free(vp);
    free(w);
    free(t);
    return kd_amg_tridiagonal_max(alpha, beta, m);
}

/* lambda_max(D^-1 A) by 3000 power iterations on D^-1/2 A D^-1/2 (host, double). */
static double host_power(const kd_csr_t *A)
{
    const int64_t n = A->rows;
    double *s = malloc((size_t)n * sizeof(double)), *v = malloc((size_t)n * sizeof(double)),
           *w = malloc((size_t)n * sizeof(double)), lambda = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double d = 0.0;
        for (int64_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            d = A->indices[k] == i ? kd_csr_value(A, k) : d;
        s[i] = 1.0 / sqrt(d);
        v[i] = 1.0 + 0.1 * kd_test_rand_double(-1.0, 1.0);
    }
    for (int it = 0; it < 3000; it++) {
        double nw = 0.0, vw = 0.0, nv = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double y = 0.0;
            for (int64_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
                y += kd_csr_value(A, k) * s[A->indices[k]] * v[A->indices[k]];
            w[i] = s[i] * y;
        }
        for (int64_t i = 0; i < n; i++) {
            vw += v[i] * w[i];
            nv += v[i] * v[i];
            nw += w[i] * w[i];
        }
        lambda = vw / nv;
        for (int64_t i = 0; i < n; i++)
            v[i] = w[i] / sqrt(nw);
    }
    free(s);
    free(v);
    free(w);
    return lambda;
}

static void test_lambda_estimate(void)
{
    kd_csr_t *mats[3] = {kd_test_laplacian_2d(40, 31), laplacian_3d(9),
                         kd_test_load_mtx("494_bus.mtx", 0.0)};
    const char *names[3] = {"lap2d 40x31", "lap3d 9^3", "494_bus"};
    for (int i = 0; i < 3; i++) {
        kd_test_problem_t p;
        REQUIRE(kd_test_problem_make(ocl, &p, mats[i], KD_DTYPE_F64, 1) == 0);
        const kd_precond_t *P = NULL;
        kd_err_t err = {0};
        REQUIRE(kd_precond_get(ocl, p.A, &kd_precond_amg, NULL, p.csr, &P, &err) == KD_OK);
        kd_amg_stats_t st = {0};
        REQUIRE(kd_amg_describe(P, &st, &err) == KD_OK);
        const double want = host_lanczos(p.csr, 12), top = host_power(p.csr);
        CHECK_MSG(fabs(st.lambda[0] - want) <= 1e-9 * want,
                  "%s: the device's Lanczos estimate %.17g, the host's %.17g", names[i],
                  st.lambda[0], want);
        CHECK_MSG(st.lambda[0] <= top * (1.0 + 1e-9) && st.lambda[0] >= 0.9 * top,
                  "%s: estimate %.6g against lambda_max %.6g", names[i], st.lambda[0], top);
        for (int l = 1; l < st.levels; l++)
            CHECK_MSG(st.lambda[l] > 0.0 && isfinite(st.lambda[l]), "%s: level %d's lambda %g",
                      names[i], l, st.lambda[l]);
        kd_test_problem_free(&p);
    }
}

static void test_convergence(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < ndt; d++) {
        amg_beats_jacobi("lap2d 96x96", kd_test_laplacian_2d(96, 96), dt[d], 0.25);
        amg_beats_jacobi("lap3d 20^3", laplacian_3d(20), dt[d], 0.4);
        amg_beats_jacobi("lap2d scrambled", kd_test_scramble(kd_test_laplacian_2d(60, 50)), dt[d],
                         0.35);
    }
    amg_beats_jacobi("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), KD_DTYPE_F64, 0.5);
    amg_beats_jacobi("dwt_878 + 4I", kd_test_load_mtx("dwt_878.mtx", 4.0), KD_DTYPE_F64, 0.8);
}

/* Every real symmetric matrix of tests/matrices: AMG-PCG converges, or says why (can___24 is
 * indefinite; dwt_878 is a pattern whose unit values make it singular or indefinite). */
static void test_real_matrices_converge_or_say_why(void)
{
    static const char *const files[] = {"494_bus.mtx", "dwt_878.mtx", "can___24.mtx"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        kd_test_problem_t p;
        REQUIRE(kd_test_problem_make(ocl, &p, kd_test_load_mtx(files[f], 0.0), KD_DTYPE_F64, 1) ==
                0);
        kd_solve_params_t prm = params("amg", 1e-8, p.csr);
        prm.maxiter = 2000;
        kd_solve_result_t res;
        kd_err_t err = {0};
        const int rc = kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err);
        if (rc == KD_OK) {
            printf("%s: %s, %lld its, %s\n", files[f], kd_solve_status_name(res.status),
                   (long long)res.iterations, res.message);
            if (res.status == KD_SOLVE_CONVERGED)
                CHECK(kd_test_true_relres(&p, p.x, 0) <= 1.5e-8);
            else
                CHECK_MSG(res.message[0] != '\0', "%s: %s without a reason", files[f],
                          kd_solve_status_name(res.status));
            kd_solve_result_free(&res);
        } else {
            printf("%s: refused: %s\n", files[f], err.message);
            CHECK(rc == KD_ENOTSPD || rc == KD_EBADREQ);
            CHECK(err.message[0] != '\0');
        }
        kd_test_problem_free(&p);
    }
}

/* Several right-hand sides: each as alone (the V-cycle runs per column). */
static void test_several_rhs(void)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, laplacian_3d(12), KD_DTYPE_F64, 3) == 0);
    kd_solve_result_t res[3], one;
    kd_err_t err = {0};
    kd_solve_params_t prm = params("amg", 1e-8, p.csr);
    CHECK(kd_solve(ocl, p.A, 3, p.b, NULL, p.x, &prm, res, &err) == KD_OK);
    for (int64_t c = 0; c < 3; c++) {
        CHECK(res[c].status == KD_SOLVE_CONVERGED);
        CHECK(kd_test_true_relres(&p, p.x, c) <= 1.5e-8);
        double *x1 = malloc((size_t)p.n * sizeof(double));
        CHECK(kd_solve(ocl, p.A, 1, (double *)p.b + c * p.n, NULL, x1, &prm, &one, &err) == KD_OK);
        CHECK_MSG(one.iterations == res[c].iterations, "column %lld: %lld alone, %lld together",
                  (long long)c, (long long)one.iterations, (long long)res[c].iterations);
        kd_solve_result_free(&one);
        kd_solve_result_free(&res[c]);
        free(x1);
    }
    kd_test_problem_free(&p);
}

/* x'M^-1 y = y'M^-1 x: the V-cycle is a symmetric operator. Also: set up once, kept. */
static void test_symmetric_and_kept(void)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, kd_test_laplacian_2d(70, 40), KD_DTYPE_F64, 2) == 0);
    const size_t before = p.A->device_bytes;
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_precond_get(ocl, p.A, &kd_precond_amg, NULL, NULL, &P, &err), KD_EINTERNAL);
    CHECK(!kd_precond_ready(p.A, &kd_precond_amg, NULL));
    REQUIRE(kd_precond_get(ocl, p.A, &kd_precond_amg, NULL, p.csr, &P, &err) == KD_OK);
    CHECK(kd_precond_ready(p.A, &kd_precond_amg, NULL));
    CHECK(p.A->device_bytes > before + (size_t)p.n * 8);
    kd_multivec_t r = {0}, z = {0};
    REQUIRE(kd_multivec_alloc(ocl, p.n, 2, KD_DTYPE_F64, &r, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, p.n, 2, KD_DTYPE_F64, &z, &err) == KD_OK);
    double *zh = malloc((size_t)(2 * p.n) * sizeof(double));
    CHECK(kd_multivec_write(ocl, &r, p.b, &err) == KD_OK);
    CHECK(P->ops->apply(ocl, P, &r, &z, &err) == KD_OK);
    CHECK(kd_multivec_read(ocl, &z, zh, &err) == KD_OK);
    const double *b = p.b;
    double xMy = 0.0, yMx = 0.0, scale = 0.0;
    for (int64_t i = 0; i < p.n; i++) {
        xMy += b[i] * zh[p.n + i];
        yMx += b[p.n + i] * zh[i];
        scale += fabs(b[i] * zh[p.n + i]);
    }
    CHECK_MSG(fabs(xMy - yMx) <= 1e-12 * scale, "x'My = %.17g, y'Mx = %.17g", xMy, yMx);
    double xMx = 0.0;
    for (int64_t i = 0; i < p.n; i++)
        xMx += b[i] * zh[i];
    CHECK_MSG(xMx > 0.0, "x'Mx = %g", xMx); /* positive definite */
    const size_t with = p.A->device_bytes;
    kd_solve_params_t prm = params("amg", 1e-8, NULL); /* set up already: no host CSR needed */
    kd_solve_result_t res[2];
    CHECK_MSG(kd_solve(ocl, p.A, 2, p.b, NULL, p.x, &prm, res, &err) == KD_OK, "%s", err.message);
    CHECK(p.A->device_bytes == with);
    for (int c = 0; c < 2; c++)
        kd_solve_result_free(&res[c]);
    free(zh);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
    kd_test_problem_free(&p);
}

/* A reordered matrix: the hierarchy follows P A P^T, the answer is in the client's order. */
static void test_reordered(void)
{
    kd_csr_t *csr = kd_test_scramble(kd_test_laplacian_2d(50, 50));
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload_reordered(ocl, csr, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A, &err) ==
            KD_OK);
    kd_test_problem_t p = {.csr = csr, .A = A, .dtype = KD_DTYPE_F64, .n = csr->rows};
    p.b = kd_test_random_vector(p.n, KD_DTYPE_F64, -1.0, 1.0, &p.bw);
    p.x = calloc((size_t)p.n, sizeof(double));
    kd_solve_params_t prm = params("amg", 1e-8, csr);
    kd_solve_result_t res;
    CHECK_MSG(kd_solve(ocl, A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK, "%s", err.message);
    CHECK(res.status == KD_SOLVE_CONVERGED && res.iterations < 30);
    CHECK(kd_test_true_relres(&p, p.x, 0) <= 1.5e-8);
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

static void expect_setup_error(const char *name, kd_csr_t *csr64, int code, const char *text)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, KD_DTYPE_F64, 1) == 0);
    kd_solve_params_t prm = params("amg", 1e-8, p.csr);
    kd_solve_result_t res;
    kd_err_t err = {0};
    const int rc = kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err);
    CHECK_MSG(rc == code, "%s: %d (%s)", name, rc, err.message);
    CHECK_STR_CONTAINS(err.message, text);
    if (rc == KD_OK)
        kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

static void test_errors(void)
{
    /* zero diagonal */
    kd_csr_t *z = kd_test_laplacian_2d(10, 10);
    for (int32_t k = z->indptr[7]; k < z->indptr[8]; k++)
        if (z->indices[k] == 7)
            ((double *)z->values)[k] = 0.0;
    expect_setup_error("zero diagonal", z, KD_EBADREQ, "row 7");
    /* nonsymmetric: one entry of a Laplacian changed */
    kd_csr_t *ns = kd_test_laplacian_2d(10, 10);
    ((double *)ns->values)[ns->indptr[12] + 1] *= 0.5;
    expect_setup_error("nonsymmetric", ns, KD_EBADREQ, "symmetric");
    /* negative diagonal */
    kd_csr_t *neg = kd_test_laplacian_2d(10, 10);
    for (int32_t k = neg->indptr[3]; k < neg->indptr[4]; k++)
        if (neg->indices[k] == 3)
            ((double *)neg->values)[k] = -4.0;
    expect_setup_error("negative diagonal", neg, KD_ENOTSPD, "row 3");
}

/* -eps u_xx - u_yy on a g x g grid */
static kd_csr_t *anisotropic(int64_t g, double eps)
{
    kd_test_coo_t c = {.rows = g * g, .cols = g * g};
    for (int64_t y = 0; y < g; y++)
        for (int64_t x = 0; x < g; x++) {
            const int64_t i = y * g + x;
            kd_test_coo_add(&c, i, i, 2.0 * (1.0 + eps));
            if (x > 0)
                kd_test_coo_add(&c, i, i - 1, -eps);
            if (x + 1 < g)
                kd_test_coo_add(&c, i, i + 1, -eps);
            if (y > 0)
                kd_test_coo_add(&c, i, i - g, -1.0);
            if (y + 1 < g)
                kd_test_coo_add(&c, i, i + g, -1.0);
        }
    return kd_test_coo_finish(&c);
}

/* kron(2-D Laplacian, B) with 3 unknowns a node: block aggregation keeps a node's unknowns
 * together (agg[3I + c] = agg[3I] + c), and a clamped (Dirichlet) node is in no aggregate. */
static kd_csr_t *kron3(int64_t g, int64_t clamped)
{
    static const double B[3][3] = {{4, 1, 0}, {1, 3, 1}, {0, 1, 2}};
    kd_csr_t *L = kd_test_laplacian_2d(g, g);
    kd_test_coo_t c = {.rows = 3 * L->rows, .cols = 3 * L->rows};
    for (int64_t i = 0; i < L->rows; i++)
        for (int32_t k = L->indptr[i]; k < L->indptr[i + 1]; k++)
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 3; b++) {
                    const int64_t j = L->indices[k];
                    if ((i == clamped || j == clamped) && !(i == j && a == b))
                        continue;
                    const double v = i == clamped ? 1.0 : kd_csr_value(L, k) * B[a][b];
                    if (v != 0.0)
                        kd_test_coo_add(&c, 3 * i + a, 3 * j + b, v);
                }
    kd_csr_free(L);
    return kd_test_coo_finish(&c);
}

static void test_block_aggregation(void)
{
    kd_csr_t *A = kron3(20, 7);
    int32_t *agg = malloc((size_t)A->rows * sizeof(int32_t));
    int64_t naggs = 0;
    kd_err_t err = {0};
    CHECK(kd_amg_aggregate(A, 0.0, 3, agg, &naggs, &err) == KD_OK);
    CHECK(naggs % 3 == 0 && naggs > 0 && naggs < A->rows / 4);
    for (int64_t I = 0; I < A->rows / 3; I++)
        for (int c = 0; c < 3; c++) {
            if (I == 7)
                CHECK(agg[3 * I + c] == -1);
            else
                CHECK(agg[3 * I + c] >= 0 && agg[3 * I + c] == agg[3 * I] + c &&
                      agg[3 * I] % 3 == 0);
        }
    CHECK_EQ_INT(kd_amg_aggregate(A, 0.0, 7, agg, &naggs, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "block_size 7 does not divide");
    free(agg);
    /* and AMG-PCG with block_size 3 converges in fewer iterations than with 1 */
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, A, KD_DTYPE_F64, 1) == 0);
    kd_precond_options_t opt = {.count = 1};
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", "block_size");
    opt.items[0].value = 3;
    kd_solve_params_t prm = params("amg", 1e-8, p.csr);
    kd_solve_result_t one, three;
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &one, &err) == KD_OK);
    prm.precond_options = &opt;
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &three, &err) == KD_OK);
    printf("kron(lap2d 20x20, B) + clamped node: amg %lld its, block_size 3: %lld its\n",
           (long long)one.iterations, (long long)three.iterations);
    CHECK(three.status == KD_SOLVE_CONVERGED && kd_test_true_relres(&p, p.x, 0) <= 1.5e-8);
    CHECK(three.iterations < one.iterations);
    kd_solve_result_free(&one);
    kd_solve_result_free(&three);
    kd_test_problem_free(&p);
}

/* Options: checked by name and range; a strength threshold turns an anisotropic problem's
 * aggregates along the strong direction (fewer iterations); other options rebuild the hierarchy
 * kept with the matrix. */
static void test_options(void)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, anisotropic(64, 1e-3), KD_DTYPE_F64, 1) == 0);
    kd_precond_options_t opt = {.count = 1};
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", "smoother");
    kd_solve_params_t prm = params("amg", 1e-8, p.csr);
    prm.precond_options = &opt;
    kd_solve_result_t res;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "no option 'smoother' (threshold, max_levels");
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", "degree");
    opt.items[0].value = 0.5;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "degree = 0.5");
    prm.precond_options = NULL;
    REQUIRE(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    const int64_t plain = res.iterations;
    kd_solve_result_free(&res);
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", "threshold");
    opt.items[0].value = 0.02;
    prm.precond_options = &opt;
    CHECK(!kd_precond_ready(p.A, &kd_precond_amg, &opt));
    REQUIRE(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(kd_precond_ready(p.A, &kd_precond_amg, &opt));
    CHECK(!kd_precond_ready(p.A, &kd_precond_amg, NULL)); /* one of a kind: the last asked */
    CHECK(p.A->preconds != NULL && p.A->preconds->next == NULL);
    printf("anisotropic 64x64 eps 1e-3: amg %lld its, with threshold 0.02 %lld its\n",
           (long long)plain, (long long)res.iterations);
    CHECK(res.status == KD_SOLVE_CONVERGED && kd_test_true_relres(&p, p.x, 0) <= 1.5e-8);
    CHECK_MSG(res.iterations * 2 <= plain, "threshold 0.02: %lld iterations, without %lld",
              (long long)res.iterations, (long long)plain);
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

/* z = M^-1 r with the options opt, read back widened. */
static void amg_apply(kd_test_problem_t *p, const kd_precond_options_t *opt, double *z)
{
    const kd_precond_t *P = NULL;
    kd_multivec_t r = {0}, zd = {0};
    kd_err_t err = {0};
    void *zh = malloc((size_t)p->n * kd_dtype_size(p->dtype));
    const int rc = kd_precond_get(ocl, p->A, &kd_precond_amg, opt, p->csr, &P, &err);
    CHECK_MSG(rc == KD_OK, "%s", err.message);
    REQUIRE(rc == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, p->n, 1, p->dtype, &r, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, p->n, 1, p->dtype, &zd, &err) == KD_OK);
    CHECK(kd_multivec_write(ocl, &r, p->b, &err) == KD_OK);
    CHECK_MSG(P->ops->apply(ocl, P, &r, &zd, &err) == KD_OK, "%s", err.message);
    CHECK(kd_multivec_read(ocl, &zd, zh, &err) == KD_OK);
    for (int64_t i = 0; i < p->n; i++)
        z[i] = kd_load_real(zh, p->dtype, (size_t)i);
    free(zh);
    kd_multivec_release(&r);
    kd_multivec_release(&zd);
}

/* The fused V-cycle against the straightforward one (option fused 0) on the same hierarchy,
 * `extra` options on both: max |z_fused - z| <= tol max |z|. */
static void fused_matches(const char *name, kd_csr_t *csr64, kd_dtype_t dtype,
                          const char *extra_name, double extra_value, int tail_level, double tol)
{
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, dtype, 1) == 0);
    kd_precond_options_t opt = {.count = 1};
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", "fused");
    if (extra_name != NULL) {
        snprintf(opt.items[1].name, sizeof(opt.items[1].name), "%s", extra_name);
        opt.items[1].value = extra_value;
        opt.count = 2;
    }
    double *z = malloc((size_t)p.n * sizeof(double)), *zf = malloc((size_t)p.n * sizeof(double));
    opt.items[0].value = 0;
    amg_apply(&p, &opt, z);
    opt.items[0].value = 1;
    amg_apply(&p, &opt, zf);
    kd_amg_stats_t st;
    kd_err_t err = {0};
    const kd_precond_t *P = NULL;
    CHECK(kd_precond_get(ocl, p.A, &kd_precond_amg, &opt, NULL, &P, &err) == KD_OK &&
          kd_amg_describe(P, &st, &err) == KD_OK);
    double diff = 0.0, scale = 0.0;
    for (int64_t i = 0; i < p.n; i++) {
        diff = fmax(diff, fabs(zf[i] - z[i]));
        scale = fmax(scale, fabs(z[i]));
    }
    printf("fused V-cycle %-28s %s levels %d (coarsest %lld), tail from %d: max |z_fused - z| / "
           "max |z| = %.1e\n",
           name, kd_dtype_name(dtype), st.levels, (long long)st.rows[st.levels - 1], st.tail_level,
           diff / scale);
    CHECK_MSG(st.tail_level == tail_level, "%s: the tail from level %d, not %d", name,
              st.tail_level, tail_level);
    CHECK_MSG(scale > 0.0 && diff <= tol * scale, "%s %s: fused V-cycle off by %g of %g", name,
              kd_dtype_name(dtype), diff, scale);
    free(z);
    free(zf);
    kd_test_problem_free(&p);
}

/* Hierarchies whose small levels run as the one-work-group tail (tail_rows 4096: from level 1,
 * from level 2 after a fused level, with a smoothed coarsest of 1560 rows) and without it (the
 * default, tail_rows 0: the tail ran slower on the H100). */
static void test_fused_vcycle(void)
{
    kd_dtype_t dt[2];
    const int ndt = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < ndt; d++) {
        const double tol = dt[d] == KD_DTYPE_F64 ? 1e-12 : 2e-5;
        fused_matches("lap2d 96x96", kd_test_laplacian_2d(96, 96), dt[d], "tail_rows", 4096, 1,
                      tol);
        fused_matches("lap2d 256x256", kd_test_laplacian_2d(256, 256), dt[d], "tail_rows", 4096, 2,
                      tol);
        fused_matches("lap2d 256x256 tail_rows 0", kd_test_laplacian_2d(256, 256), dt[d],
                      "tail_rows", 0, 0, tol);
        fused_matches("lap3d 20^3", laplacian_3d(20), dt[d], "tail_rows", 4096, 1, tol);
        fused_matches("lap3d 20^3 tail_rows 500", laplacian_3d(20), dt[d], "tail_rows", 500, 2,
                      tol);
        fused_matches("lap2d 96x96 max_levels 2", kd_test_laplacian_2d(96, 96), dt[d], "max_levels",
                      2, 0, tol);
        fused_matches("lap2d 96x96 tail_rows 1000", kd_test_laplacian_2d(96, 96), dt[d],
                      "tail_rows", 1000, 2, tol);
    }
    kd_amg_test_set_gpu_lanes(1); /* lanes per row as on a GPU: the same operator */
    for (int d = 0; d < ndt; d++) {
        const double tol = dt[d] == KD_DTYPE_F64 ? 1e-12 : 2e-5;
        fused_matches("lap2d 256x256 gpu lanes", kd_test_laplacian_2d(256, 256), dt[d], "tail_rows",
                      4096, 2, tol);
        fused_matches("lap3d 20^3 gpu lanes", laplacian_3d(20), dt[d], "tail_rows", 500, 2, tol);
    }
    kd_amg_test_set_gpu_lanes(0);
    /* block_size 3, the default tail_rows 0: fused levels only */
    fused_matches("kron3 clamped block_size 3", kron3(20, 7), KD_DTYPE_F64, "block_size", 3, 0,
                  1e-12);
    fused_matches("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), KD_DTYPE_F64, "tail_rows", 4096,
                  1, 1e-12);
}

int main(void)
{
    kd_test_seed();
    test_dense_inverse();
    test_tridiagonal();
    test_aggregates_and_prolongator();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    test_lambda_estimate();
    test_convergence();
    test_real_matrices_converge_or_say_why();
    test_several_rhs();
    test_symmetric_and_kept();
    test_reordered();
    test_errors();
    test_options();
    test_block_aggregation();
    test_fused_vcycle();
    kd_ocl_close(ocl);
    return kd_test_finish();
}
