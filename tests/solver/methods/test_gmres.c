/*
 * gmres (solver/methods/gmres.c, kernels/methods/gmres.cl): restarted, right-preconditioned
 * GMRES(m). Every solve's answer is judged by the CPU's ||b - A x|| / ||b||. Checked: convergence
 * on generated nonsymmetric matrices (2-D convection-diffusion with upwinding) and the real ani4
 * and watt_2 (float64; bayer10 is left out: unpreconditioned GMRES(30) stalls on it, SciPy's too),
 * in float64 and float32, with restart 1, 5 and 30, without a preconditioner, with Jacobi and with
 * AMG (an operator: the Z basis); against a sequential CPU GMRES(m) written here (the same
 * iterations, up to rounding); the residual history never grows (GMRES minimises it); several
 * right-hand sides each as when alone; fused and separate SpMV alike; x0 (at the solution: no
 * iteration); a 1x1 system (one step); a singular matrix with an empty row ends as max_iterations,
 * breakdown or stagnated with a finite x; the reductions an iteration (two, one more per cycle
 * end); a basis that cannot fit is KD_EDEVMEM naming restart; a Hessenberg matrix singular to
 * working precision (SciPy's nilpotent lgmres case) is a breakdown whose x is the least-squares
 * solution and whose residual history never grows, on the general path and the batched
 * one-work-group path.
 */
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/batch/batch.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;
static const char *kernel_options; /* kernels/methods/gmres.cl's build options for measuring */

typedef kd_test_problem_t problem_t;

/* -Laplace(u) + (bx, by) . grad(u) on an nx x ny grid, first-order upwind differences (bx, by
 * >= 0, in units of 1/h): an M-matrix, nonsymmetric as soon as bx or by is not 0. */
static kd_csr_t *convdiff(int64_t nx, int64_t ny, double bx, double by)
{
    kd_test_coo_t c = {.rows = nx * ny, .cols = nx * ny};
    for (int64_t j = 0; j < ny; j++)
        for (int64_t i = 0; i < nx; i++) {
            const int64_t r = j * nx + i;
            kd_test_coo_add(&c, r, r, 4.0 + bx + by);
            if (i > 0)
                kd_test_coo_add(&c, r, r - 1, -1.0 - bx);
            if (i + 1 < nx)
                kd_test_coo_add(&c, r, r + 1, -1.0);
            if (j > 0)
                kd_test_coo_add(&c, r, r - nx, -1.0 - by);
            if (j + 1 < ny)
                kd_test_coo_add(&c, r, r + nx, -1.0);
        }
    return kd_test_coo_finish(&c);
}

static kd_solve_params_t params(const char *precond, double rtol, int64_t restart)
{
    kd_solve_params_t prm;
    kd_err_t err = {0};
    kd_solve_params_default(&prm);
    if (kd_method_choose("gmres", precond, &prm.method, &prm.precond, &err) != KD_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(2);
    }
    prm.rtol = rtol;
    prm.restart = restart;
    prm.kernel_options = kernel_options;
    return prm;
}

/* ---- a sequential CPU GMRES(m), the reference for iteration counts ----------------------------
 */

/* Right-preconditioned by nothing, MGS Arnoldi, Givens; stops when the least-squares residual
 * |g_{j+1}| <= tol (as the device does), confirms with b - A x at a stop. Returns the inner
 * iterations, or -1 without convergence in maxiter. */
static int64_t ref_gmres(const kd_csr_t *A, const double *b, int64_t m, double rtol,
                         int64_t maxiter)
{
    const int64_t n = A->rows;
    double *x = calloc((size_t)n, sizeof(double)), *r = malloc((size_t)n * sizeof(double));
    double *V = malloc((size_t)(m + 1) * (size_t)n * sizeof(double));
    double *H = calloc((size_t)(m + 1) * (size_t)m, sizeof(double));
    double *cs = calloc((size_t)m, sizeof(double)), *sn = calloc((size_t)m, sizeof(double));
    double *g = calloc((size_t)m + 1, sizeof(double)), *y = calloc((size_t)m, sizeof(double));
    double bb = 0.0;
    for (int64_t i = 0; i < n; i++)
        bb += b[i] * b[i];
    const double tol = rtol * sqrt(bb);
    int64_t it = 0, result = -1;
    while (it < maxiter && result < 0) {
        for (int64_t i = 0; i < n; i++)
            r[i] = b[i];
        kd_csr_spmv_ref(A, x, -1.0, 1.0, r);
        double beta = 0.0;
        for (int64_t i = 0; i < n; i++)
            beta += r[i] * r[i];
        beta = sqrt(beta);
        if (beta <= tol) {
            result = it;
            break;
        }
        for (int64_t i = 0; i < n; i++)
            V[i] = r[i] / beta;
        memset(g, 0, (size_t)(m + 1) * sizeof(double));
        g[0] = beta;
        int64_t j = 0, cols = 0;
        for (; j < m && it < maxiter; j++) {
            double *w = V + (j + 1) * n;
            for (int64_t i = 0; i < n; i++)
                w[i] = 0.0;
            kd_csr_spmv_ref(A, V + j * n, 1.0, 0.0, w);
            it++;
            for (int pass = 0; pass < 2; pass++) /* MGS, twice */
                for (int64_t l = 0; l <= j; l++) {
                    double h = 0.0;
                    for (int64_t i = 0; i < n; i++)
                        h += V[l * n + i] * w[i];
                    for (int64_t i = 0; i < n; i++)
                        w[i] -= h * V[l * n + i];
                    H[j * (m + 1) + l] += h;
                }
            double hn = 0.0;
            for (int64_t i = 0; i < n; i++)
                hn += w[i] * w[i];
            hn = sqrt(hn);
            for (int64_t i = 0; i < n && hn > 0.0; i++)
                w[i] /= hn;
            double *col = H + j * (m + 1);
            for (int64_t l = 0; l < j; l++) {
                double t = cs[l] * col[l] + sn[l] * col[l + 1];
                col[l + 1] = -sn[l] * col[l] + cs[l] * col[l + 1];
                col[l] = t;
            }
            double rho = hypot(col[j], hn);
            cs[j] = col[j] / rho;
            sn[j] = hn / rho;
            col[j] = rho;
            g[j + 1] = -sn[j] * g[j];
            g[j] = cs[j] * g[j];
            cols = j + 1;
            if (fabs(g[j + 1]) <= tol) {
                j++;
                break;
            }
        }
        for (int64_t i = cols - 1; i >= 0; i--) {
            double s = g[i];
            for (int64_t l = i + 1; l < cols; l++)
                s -= H[l * (m + 1) + i] * y[l];
            y[i] = s / H[i * (m + 1) + i];
        }
        for (int64_t l = 0; l < cols; l++)
            for (int64_t i = 0; i < n; i++)
                x[i] += y[l] * V[l * n + i];
        memset(H, 0, (size_t)(m + 1) * (size_t)m * sizeof(double));
        if (fabs(g[cols]) <= tol) { /* confirm as the driver does */
            for (int64_t i = 0; i < n; i++)
                r[i] = b[i];
            kd_csr_spmv_ref(A, x, -1.0, 1.0, r);
            double rr = 0.0;
            for (int64_t i = 0; i < n; i++)
                rr += r[i] * r[i];
            if (sqrt(rr) <= tol)
                result = it;
        }
    }
    free(x), free(r), free(V), free(H), free(cs), free(sn), free(g), free(y);
    return result;
}

/* ---- convergence ----------------------------------------------------------------------------- */

/*
 * Solve `name` with k right-hand sides: converged by the CPU's measure, the history never grows,
 * and (ref_its >= 0, unpreconditioned float64) the iterations within 10% of the CPU GMRES's.
 * Returns column 0's iterations.
 */
static int64_t solve_check(const char *name, kd_csr_t *csr64, kd_dtype_t dtype, const char *pc,
                           int64_t restart, double rtol, int64_t k, int with_ref)
{
    problem_t p;
    kd_csr_t *keep = NULL;
    kd_err_t err = {0};
    if ((with_ref && kd_csr_convert(csr64, KD_DTYPE_F64, &keep, &err) != KD_OK) ||
        kd_test_problem_make(ocl, &p, csr64, dtype, k) != 0) {
        fprintf(stderr, "%s: cannot make the problem\n", name);
        exit(2);
    }
    kd_solve_params_t prm = params(pc, rtol, restart);
    prm.csr = p.csr; /* for amg */
    prm.record_history = 1;
    kd_solve_result_t res[4];
    const int rc = kd_solve(ocl, p.A, k, p.b, NULL, p.x, &prm, res, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", name, err.message);
    int64_t its = -1;
    for (int64_t c = 0; rc == KD_OK && c < k; c++) {
        const double truth = kd_test_true_relres(&p, p.x, c);
        int64_t ref = -1;
        if (with_ref && c == 0)
            ref = ref_gmres(keep, p.bw, restart > 0 ? restart : 30, rtol, 20000);
        fprintf(stderr,
                "  %-18s %s %-6s m=%-3lld col %lld: %s %5lld its (%lld restarts, true %.3g)%s",
                name, kd_dtype_name(dtype), pc, (long long)restart, (long long)c,
                kd_solve_status_name(res[c].status), (long long)res[c].iterations,
                (long long)res[c].restarts, truth, ref >= 0 ? "" : "\n");
        if (ref >= 0)
            fprintf(stderr, ", CPU GMRES %lld\n", (long long)ref);
        CHECK_MSG(res[c].status == KD_SOLVE_CONVERGED, "%s col %lld: %s %s", name, (long long)c,
                  kd_solve_status_name(res[c].status), res[c].message);
        CHECK_MSG(truth <= rtol * (dtype == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6),
                  "%s col %lld: true %.3g", name, (long long)c, truth);
        CHECK(fabs(res[c].relative_residual - truth) <= 0.05 * truth + 1e-12);
        if (with_ref && c == 0) {
            CHECK_MSG(ref >= 0, "%s: the CPU GMRES did not converge", name);
            CHECK_MSG(llabs(res[c].iterations - ref) <= 1 + ref / 10,
                      "%s: %lld iterations, the CPU GMRES %lld", name, (long long)res[c].iterations,
                      (long long)ref);
        }
        /* GMRES minimises ||r|| over a growing space: the estimates never grow (up to
         * rounding; a restart's true residual may sit a little above the estimate). */
        CHECK(res[c].history_len >= 2);
        for (int64_t h = 1; h < res[c].history_len; h++)
            CHECK_MSG(res[c].history[h] <= res[c].history[h - 1] * 1.001 + 1e-300,
                      "%s col %lld: history grows at %lld: %g after %g", name, (long long)c,
                      (long long)h, res[c].history[h], res[c].history[h - 1]);
        if (c == 0)
            its = res[c].iterations;
        kd_solve_result_free(&res[c]);
    }
    kd_csr_free(keep);
    kd_test_problem_free(&p);
    return its;
}

static void test_convergence(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    static const char *const pcs[] = {"none", "jacobi"};
    for (int d = 0; d < nd; d++) {
        const int f64 = dt[d] == KD_DTYPE_F64;
        const double rtol = f64 ? 1e-8 : 1e-4;
        for (int m = 0; m < 3; m++) {
            const int64_t restart = m == 0 ? 1 : m == 1 ? 5 : 30;
            for (int j = 0; j < 2; j++)
                solve_check("convdiff 24x20", convdiff(24, 20, 1.5, 0.5), dt[d], pcs[j], restart,
                            rtol, 3, f64 && j == 0);
            /* amg takes symmetric matrices only: the operator form (the Z basis) on a Laplacian. */
            solve_check("laplacian 24x20", convdiff(24, 20, 0.0, 0.0), dt[d], "amg", restart, rtol,
                        3, 0);
        }
        solve_check("convdiff 64x64", convdiff(64, 64, 3.0, 1.0), dt[d], "none", 0, rtol, 2, f64);
        solve_check("convdiff 64x64", convdiff(64, 64, 3.0, 1.0), dt[d], "jacobi", 20, rtol, 1, 0);
        /* The build options krylov-bench tries on a GPU: the same iterations as the CPU GMRES. */
        static const char *const variants[] = {"-DKD_GMRES_CHUNK=32"};
        for (size_t v = 0; f64 && v < sizeof(variants) / sizeof(variants[0]); v++) {
            kernel_options = variants[v];
            solve_check(variants[v], convdiff(64, 64, 3.0, 1.0), dt[d], "none", 0, rtol, 2, 1);
            kernel_options = NULL;
        }
        /* ilu0 (a nonsymmetric operator M, the Z basis): converges, in fewer iterations than
         * none, both with exact (level-scheduled) and swept triangular solves */
        const int64_t plain = solve_check("convdiff 48x48", convdiff(48, 48, 3.0, 1.0), dt[d],
                                          "none", 30, rtol, 1, 0);
        const int64_t ilu = solve_check("convdiff 48x48", convdiff(48, 48, 3.0, 1.0), dt[d], "ilu0",
                                        30, rtol, 2, 0);
        CHECK_MSG(ilu > 0 && ilu * 2 < plain, "gmres + ilu0 %lld its, none %lld", (long long)ilu,
                  (long long)plain);
        solve_check("ani4", kd_test_load_mtx("ani4.mtx", 0.0), dt[d], "ilu0", 30, rtol, 1, 0);
        solve_check("ani4", kd_test_load_mtx("ani4.mtx", 0.0), dt[d], "none", 30, rtol, 1, f64);
        solve_check("ani4", kd_test_load_mtx("ani4.mtx", 0.0), dt[d], "jacobi", 30, rtol, 2, 0);
        /* watt_2 stagnates for thousands of iterations: the count swings with rounding (4744
         * against the CPU GMRES's 6565 on one b), so no count is compared. In float32 it does not
         * converge at all (SciPy's float32 gmres neither: relres 0.12 after 9000 iterations). */
        if (f64)
            solve_check("watt_2", kd_test_load_mtx("watt_2.mtx", 0.0), dt[d], "none", 30, 1e-6, 1,
                        0);
    }
}

/* ---- schedules: lock step, fusion, check interval ---------------------------------------------
 */

/* Three columns together, each alone, fused SpMV or not, check every iteration or every 16: the
 * same x and iterations, bit for bit (column 1 has b = 0). */
static void test_schedules(void)
{
    enum { K = 3 };
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++)
        for (int j = 0; j < 2; j++) {
            problem_t p;
            REQUIRE(kd_test_problem_make(ocl, &p, convdiff(30, 30, 2.0, 1.0), dt[d], K) == 0);
            const size_t col = (size_t)p.n * kd_dtype_size(dt[d]);
            memset((char *)p.b + col, 0, col);
            const double rtol = dt[d] == KD_DTYPE_F64 ? 1e-9 : 1e-4;
            kd_solve_params_t prm = params(j ? "jacobi" : "none", rtol, 7);
            char *ref = malloc(K * col), *alt = malloc(K * col);
            kd_solve_result_t rr[K], ra[K];
            kd_err_t err = {0};
            prm.spmv_fusion = KD_SOLVE_FUSION_OFF;
            prm.check_every = 1;
            REQUIRE(kd_solve(ocl, p.A, K, p.b, NULL, ref, &prm, rr, &err) == KD_OK);
            for (int variant = 0; variant < 3; variant++) {
                prm.spmv_fusion = variant == 0 ? KD_SOLVE_FUSION_ON : KD_SOLVE_FUSION_OFF;
                prm.check_every = variant == 1 ? 16 : 1;
                if (variant == 2) {
                    for (int c = 0; c < K; c++)
                        REQUIRE(kd_solve(ocl, p.A, 1, (char *)p.b + c * col, NULL, alt + c * col,
                                         &prm, &ra[c], &err) == KD_OK);
                } else {
                    REQUIRE(kd_solve(ocl, p.A, K, p.b, NULL, alt, &prm, ra, &err) == KD_OK);
                }
                CHECK_MSG(memcmp(ref, alt, K * col) == 0, "gmres %s %s variant %d: x differs",
                          kd_dtype_name(dt[d]), j ? "jacobi" : "none", variant);
                for (int c = 0; c < K; c++) {
                    CHECK_EQ_INT(ra[c].iterations, rr[c].iterations);
                    CHECK_EQ_INT(ra[c].status, rr[c].status);
                    kd_solve_result_free(&ra[c]);
                }
            }
            CHECK(rr[0].status == KD_SOLVE_CONVERGED && rr[1].iterations == 0);
            CHECK(rr[0].iterations > 7); /* several cycles */
            CHECK(kd_test_true_relres(&p, ref, 0) <= rtol * 1.05);
            CHECK(kd_test_true_relres(&p, ref, 2) <= rtol * 1.05);
            for (int c = 0; c < K; c++)
                kd_solve_result_free(&rr[c]);
            free(ref);
            free(alt);
            kd_test_problem_free(&p);
        }
}

/* ---- edges ----------------------------------------------------------------------------------- */

static void test_edges(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        const double rtol = dt[d] == KD_DTYPE_F64 ? 1e-10 : 1e-5;
        kd_solve_result_t res;
        kd_err_t err = {0};
        problem_t p;

        /* 1x1: one step, exactly b / a. */
        kd_test_coo_t one = {.rows = 1, .cols = 1};
        kd_test_coo_add(&one, 0, 0, -3.0);
        REQUIRE(kd_test_problem_make(ocl, &p, kd_test_coo_finish(&one), dt[d], 1) == 0);
        kd_solve_params_t prm = params("none", rtol, 0);
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
        CHECK_EQ_INT(res.status, KD_SOLVE_CONVERGED);
        CHECK_EQ_INT(res.iterations, 1);
        CHECK(kd_test_true_relres(&p, p.x, 0) <= rtol);
        kd_test_problem_free(&p);

        /* x0 at the solution: no iteration; x0 near it: fewer than from 0. */
        REQUIRE(kd_test_problem_make(ocl, &p, convdiff(20, 20, 1.0, 1.0), dt[d], 1) == 0);
        prm = params("none", rtol, 10);
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
        const int64_t cold = res.iterations;
        const size_t bytes = (size_t)p.n * kd_dtype_size(dt[d]);
        void *x0 = malloc(bytes), *x1 = malloc(bytes);
        memcpy(x0, p.x, bytes);
        CHECK(kd_solve(ocl, p.A, 1, p.b, x0, x1, &prm, &res, &err) == KD_OK);
        CHECK(res.status == KD_SOLVE_CONVERGED && res.iterations == 0);
        const double eps = dt[d] == KD_DTYPE_F64 ? 1e-6 : 1e-3; /* a start that near */
        for (int64_t i = 0; i < p.n; i++)
            kd_store_real(x0, dt[d], (size_t)i,
                          kd_load_real(x0, dt[d], (size_t)i) * (1.0 + eps * (double)(i % 3 - 1)));
        CHECK(kd_solve(ocl, p.A, 1, p.b, x0, x1, &prm, &res, &err) == KD_OK);
        fprintf(stderr, "  x0: %lld its from 0, %lld from the solution perturbed by %g\n",
                (long long)cold, (long long)res.iterations, eps);
        CHECK(res.status == KD_SOLVE_CONVERGED && res.iterations > 0 && res.iterations < cold);
        CHECK(kd_test_true_relres(&p, x1, 0) <= rtol * 1.05);
        free(x0);
        free(x1);
        kd_test_problem_free(&p);

        /* An empty row: singular; the cycles stall. Ends at maxiter or as a breakdown, x finite. */
        kd_csr_t *sing = convdiff(12, 12, 1.0, 0.0);
        for (int64_t r = 0; r < sing->rows; r++)
            for (int64_t e = sing->indptr[r]; e < sing->indptr[r + 1]; e++)
                if (r == 5 || sing->indices[e] == 5)
                    ((double *)sing->values)[e] = 0.0; /* row and column 5 empty */
        kd_csr_t *pruned = NULL;
        REQUIRE(kd_csr_convert(sing, KD_DTYPE_F64, &pruned, &err) == KD_OK);
        kd_csr_free(sing);
        for (int mm = 0; mm < 2; mm++) {
            kd_csr_t *copy = NULL;
            REQUIRE(kd_csr_convert(pruned, KD_DTYPE_F64, &copy, &err) == KD_OK);
            REQUIRE(kd_test_problem_make(ocl, &p, copy, dt[d], 1) == 0);
            prm = params("none", rtol, mm ? 200 : 8);
            prm.maxiter = 300;
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
            fprintf(stderr, "  empty row, m=%d: %s after %lld its: %s\n", mm ? 200 : 8,
                    kd_solve_status_name(res.status), (long long)res.iterations, res.message);
            CHECK(res.status == KD_SOLVE_MAX_ITERATIONS || res.status == KD_SOLVE_BREAKDOWN ||
                  res.status == KD_SOLVE_STAGNATED);
            CHECK(res.iterations <= 300);
            for (int64_t i = 0; i < p.n; i++)
                CHECK(isfinite(kd_load_real(p.x, dt[d], (size_t)i)));
            CHECK(isfinite(res.residual_norm) && res.relative_residual > rtol);
            kd_test_problem_free(&p);
        }
        kd_csr_free(pruned);
    }
}

/* SciPy's test_breakdown_underdetermined: A strictly upper triangular ones (4 x 4, nilpotent),
 * b = ones. The Krylov space is all of R^4 after 4 steps (h_{4,3} = 0) but H is singular: R's
 * last diagonal is a few ulps, not 0. The least-squares residual over K is 1 (b's last entry),
 * reached after 3 steps; x must stay there (before the fix it grew to 0.93 ||b||, then 219). */
static void test_singular_hessenberg(void)
{
    enum { N = 4 };
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        const double slack = dt[d] == KD_DTYPE_F64 ? 1e-10 : 1e-5;
        kd_test_coo_t c = {.rows = N, .cols = N};
        for (int r = 0; r < N; r++)
            for (int j = r + 1; j < N; j++)
                kd_test_coo_add(&c, r, j, 1.0);
        problem_t p;
        REQUIRE(kd_test_problem_make(ocl, &p, kd_test_coo_finish(&c), dt[d], 1) == 0);
        for (int i = 0; i < N; i++) {
            kd_store_real(p.b, dt[d], (size_t)i, 1.0);
            p.bw[i] = 1.0;
        }
        for (int m = 4; m <= 30; m += 26) {
            kd_solve_params_t prm = params("none", 1e-8, m);
            prm.maxiter = 12;
            prm.check_every = 1;
            prm.record_history = 1;
            kd_solve_result_t res;
            kd_err_t err = {0};
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
            fprintf(stderr, "  nilpotent %s m=%d: %s after %lld its, ||r|| %.3g: %s\n",
                    kd_dtype_name(dt[d]), m, kd_solve_status_name(res.status),
                    (long long)res.iterations, res.residual_norm, res.message);
            CHECK_EQ_INT(res.status, KD_SOLVE_BREAKDOWN);
            CHECK_STR_CONTAINS(res.message, "singular");
            CHECK(res.iterations <= 4);
            CHECK(fabs(kd_test_true_relres(&p, p.x, 0) - 0.5) <= slack);
            for (int64_t i = 1; i < res.history_len; i++)
                CHECK_MSG(res.history[i] <= res.history[i - 1] * (1 + slack), "%g after %g",
                          res.history[i], res.history[i - 1]);
            kd_solve_result_free(&res);
        }

        /* The batched path: 2 copies, local and global memory. */
        kd_batch_t *batch = NULL;
        kd_err_t err = {0};
        void *vals = malloc((size_t)(2 * p.csr->nnz) * 8 + 8);
        void *bv = malloc(2 * N * 8), *x = malloc(2 * N * 8);
        for (int64_t s = 0; s < 2; s++) {
            for (int64_t e = 0; e < p.csr->nnz; e++)
                kd_store_real(vals, dt[d], (size_t)(s * p.csr->nnz + e), 1.0);
            for (int i = 0; i < N; i++)
                kd_store_real(bv, dt[d], (size_t)(s * N + i), 1.0);
        }
        REQUIRE(kd_batch_upload(ocl, p.csr, vals, 2, &batch, &err) == KD_OK);
        for (int global = 0; global < 2; global++) {
            double rt[2] = {1e-8, 1e-8}, at[2] = {0};
            int64_t mi[2] = {12, 12};
            kd_batch_params_t bp = {.method = KD_BATCH_GMRES,
                                    .rtol = rt,
                                    .atol = at,
                                    .maxiter = mi,
                                    .force_global = global,
                                    .record_history = 1};
            kd_batch_result_t br[2];
            memset(br, 0, sizeof(br));
            CHECK(kd_batch_solve(ocl, batch, bv, NULL, x, &bp, br, NULL, &err) == KD_OK);
            for (int s = 0; s < 2; s++) {
                const double got =
                    kd_test_true_relres(&p, (char *)x + (size_t)(s * N) * kd_dtype_size(dt[d]), 0);
                fprintf(stderr, "  nilpotent batched %s%s: %s after %lld its, true %.3g: %s\n",
                        kd_dtype_name(dt[d]), global ? " (global)" : "",
                        kd_solve_status_name(br[s].status), (long long)br[s].iterations, got,
                        br[s].message);
                CHECK_EQ_INT(br[s].status, KD_SOLVE_BREAKDOWN);
                CHECK(fabs(got - 0.5) <= slack);
                for (int64_t i = 1; i < br[s].history_len; i++)
                    CHECK(br[s].history[i] <= br[s].history[i - 1] * (1 + slack));
                kd_batch_result_free(&br[s]);
            }
        }
        kd_batch_free(batch);
        free(vals);
        free(bv);
        free(x);
        kd_test_problem_free(&p);
    }
}

/* float32 asked for more than it can give: the recurrence's estimate claims convergence, the
 * driver's b - A x refutes it, the column restarts from the true residual (a new cycle). The
 * solve ends (converged or at maxiter) with a true residual near float32's floor. */
static void test_refuted_claims(void)
{
    problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, convdiff(64, 64, 3.0, 1.0), KD_DTYPE_F32, 2) == 0);
    kd_solve_params_t prm = params("none", 1e-7, 30);
    prm.maxiter = 300;
    kd_solve_result_t res[2];
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 2, p.b, NULL, p.x, &prm, res, &err) == KD_OK);
    int64_t restarted = 0; /* a column whose estimate never claims 1e-7 in 300 iterations (a
                              random b on the GPU's order of sums) is not refuted: one must be */
    for (int c = 0; c < 2; c++) {
        const double truth = kd_test_true_relres(&p, p.x, c);
        fprintf(stderr, "  float32 at rtol 1e-7: %s after %lld its, %lld restarts, true %.3g\n",
                kd_solve_status_name(res[c].status), (long long)res[c].iterations,
                (long long)res[c].restarts, truth);
        restarted += res[c].restarts > 0;
        CHECK(res[c].restarts > 0 || res[c].status == KD_SOLVE_MAX_ITERATIONS);
        CHECK(res[c].status == KD_SOLVE_CONVERGED || res[c].status == KD_SOLVE_MAX_ITERATIONS ||
              res[c].status == KD_SOLVE_STAGNATED);
        /* Converged by the device's float32 b - A x, whose rounding is of this order here. */
        CHECK(res[c].status != KD_SOLVE_CONVERGED || truth <= 2e-7);
        CHECK(truth < 1e-5);
        kd_solve_result_free(&res[c]);
    }
    CHECK(restarted >= 1);
    kd_test_problem_free(&p);
}

/* Two reductions an iteration and one more at each natural cycle end (the true residual the
 * next cycle starts from): 12 iterations of GMRES(5) end cycles at 5 and 10. */
static void test_reductions(void)
{
    problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, convdiff(30, 30, 1.0, 1.0), KD_DTYPE_F32, 2) == 0);
    kd_solve_params_t prm = params("none", 0.0, 5);
    prm.maxiter = 12;
    kd_solve_result_t res[2];
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 2, p.b, NULL, p.x, &prm, res, &err) == KD_OK);
    CHECK_MSG(fabs(res[0].reductions_per_iteration - 26.0 / 12.0) < 1e-9, "%.4f",
              res[0].reductions_per_iteration);
    for (int c = 0; c < 2; c++) {
        CHECK_EQ_INT(res[c].status, KD_SOLVE_MAX_ITERATIONS);
        CHECK_EQ_INT(res[c].iterations, 12);
        kd_solve_result_free(&res[c]);
    }
    kd_test_problem_free(&p);
}

/* A basis that cannot fit: KD_EDEVMEM naming restart, nothing left allocated. */
static void test_too_large(void)
{
    problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, convdiff(40, 40, 1.0, 1.0), KD_DTYPE_F32, 2) == 0);
    kd_solve_params_t prm = params("none", 1e-4, 200);
    kd_solve_result_t res[2];
    kd_err_t err = {0};
    /* 201 vectors of 2 x 1600 floats: 2.6 MB; allow 1 MB a buffer. */
    kd_ocl_test_set_max_alloc(ocl, (uint64_t)1 << 20);
    CHECK_EQ_INT(kd_solve(ocl, p.A, 2, p.b, NULL, p.x, &prm, res, &err), KD_EDEVMEM);
    CHECK_STR_CONTAINS(err.message, "restart = 200");
    fprintf(stderr, "  too large: %s\n", err.message);
    prm.restart = 10; /* 11 x 2 x 1600 x 4 = 141 kB fits */
    CHECK(kd_solve(ocl, p.A, 2, p.b, NULL, p.x, &prm, res, &err) == KD_OK);
    CHECK(res[0].status == KD_SOLVE_CONVERGED);
    kd_ocl_test_set_max_alloc(ocl, 0);
    kd_solve_result_free(&res[0]);
    kd_solve_result_free(&res[1]);
    kd_test_problem_free(&p);
}

int main(void)
{
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    kd_test_seed();
    test_edges();
    test_singular_hessenberg();
    test_reductions();
    test_refuted_claims();
    test_schedules();
    test_convergence();
    test_too_large(); /* last: the lowered allocation limit stays */
    kd_ocl_close(ocl);
    return kd_test_finish();
}
