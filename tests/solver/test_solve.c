/*
 * CG, Jacobi-PCG and steepest descent on the device, judged on the CPU: for 2-D Laplacians and
 * random diagonally dominant SPD matrices the true relative residual ||b - A x|| / ||b|| computed
 * with kd_csr_spmv_ref meets rtol (float64 at 1e-8, float32 at 1e-5). Then the edges: a warm
 * start from the solution, b = 0, indefinite and negative definite matrices (breakdown or
 * max_iterations, never a hang), NaN in b, x0 and the matrix, maxiter respected exactly, the
 * history's length, cancel flag, progress callback, deadline, bad parameters, and that the check
 * schedule changes neither the iterates nor the iteration count. PCG: far fewer iterations than
 * CG on a badly scaled SPD matrix; a zero, missing, non-finite or negative diagonal refused with
 * the row. Several right-hand sides: each column (random, b = 0, NaN, an eigenvector, a warm
 * start) gets exactly what it gets solved alone, maxiter per column, progress per check.
 */
#include "kd_solver_test.h"
#include "common/clock.h"
#include "solver/methods/method.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

typedef kd_test_problem_t problem_t;

static int problem_make(problem_t *p, kd_csr_t *csr64, kd_dtype_t dtype)
{
    return kd_test_problem_make(ocl, p, csr64, dtype, 1);
}

/* ||b - A x|| / ||b|| on the CPU in double, with x as the solver returned it. */
static double true_relres(const problem_t *p, const void *x)
{
    double *xw = malloc((size_t)p->n * sizeof(double) + 8);
    double *r = malloc((size_t)p->n * sizeof(double) + 8);
    double rr = 0.0, bb = 0.0;
    for (int64_t i = 0; i < p->n; i++) {
        xw[i] = kd_load_real(x, p->dtype, (size_t)i);
        r[i] = p->bw[i];
    }
    kd_csr_spmv_ref(p->csr, xw, -1.0, 1.0, r);
    for (int64_t i = 0; i < p->n; i++) {
        rr += r[i] * r[i];
        bb += p->bw[i] * p->bw[i];
    }
    free(xw);
    free(r);
    return bb > 0.0 ? sqrt(rr / bb) : sqrt(rr);
}

/* method: a name as on the wire ("cg", "sd", or "pcg": cg with Jacobi). */
static void set_method(kd_solve_params_t *prm, const char *method)
{
    kd_err_t err = {0};
    REQUIRE(kd_method_choose(method, NULL, &prm->method, &prm->precond, &err) == KD_OK);
}

static kd_solve_params_t params_of(const char *method, double rtol)
{
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    set_method(&prm, method);
    prm.rtol = rtol;
    return prm;
}

/* Solve and check convergence by the CPU's measure. */
static void solve_converges(const char *name, kd_csr_t *csr64, kd_dtype_t dtype, const char *method,
                            double rtol, int64_t check_every)
{
    problem_t p;
    REQUIRE(problem_make(&p, csr64, dtype) == 0);
    kd_solve_params_t prm = params_of(method, rtol);
    prm.check_every = check_every;
    prm.record_history = 1;
    kd_solve_result_t res;
    kd_err_t err = {0};
    int rc = kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err);
    double truth = true_relres(&p, p.x);
    fprintf(
        stderr,
        "  %-28s %s %s: %s after %lld iterations (%lld restarts), rel %.3g (true %.3g), %.1f ms\n",
        name, method, kd_dtype_name(dtype), kd_solve_status_name(res.status),
        (long long)res.iterations, (long long)res.restarts, res.relative_residual, truth,
        res.time_ms);
    CHECK_MSG(rc == KD_OK, "%s", err.message);
    CHECK_MSG(res.status == KD_SOLVE_CONVERGED, "%s: %s %s", name, kd_solve_status_name(res.status),
              res.message);
    /* In float32 the device's own ||b - A x|| carries the rounding of A x, about
     * eps ||b|| / ||r|| relative (0.6% at rtol 1e-5): converged means converged by that measure. */
    double ceiling = rtol * (dtype == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6);
    CHECK_MSG(truth <= ceiling, "%s: true relative residual %.3g > rtol %.3g", name, truth, rtol);
    /* The solver's own recomputed residual agrees with the CPU's (up to the value type). */
    double slack = dtype == KD_DTYPE_F64 ? 1e-10 : 1e-5;
    CHECK_MSG(fabs(res.relative_residual - truth) <= 0.5 * truth + slack,
              "%s: reported %.3g, true %.3g", name, res.relative_residual, truth);
    CHECK(res.iterations > 0 && res.iterations <= 10 * p.n);
    CHECK(res.b_norm > 0.0);
    CHECK(res.history != NULL && res.history_len >= 2);
    if (res.history != NULL) {
        CHECK_NEAR(res.history[0], res.b_norm, dtype == KD_DTYPE_F64 ? 1e-12 : 1e-5);
        CHECK(res.history[res.history_len - 1] <= rtol * res.b_norm * (1 + 1e-6));
    }
    if (check_every == 1)
        CHECK_EQ_INT(res.history_len, res.iterations + 1);
    CHECK(res.time_ms > 0.0);
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

static void test_cg_laplacian(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-5;
        solve_converges("laplacian 32x32", kd_test_laplacian_2d(32, 32), dt[d], "cg", rtol, 1);
        solve_converges("laplacian 100x100", kd_test_laplacian_2d(100, 100), dt[d], "cg", rtol, 0);
        solve_converges("laplacian 47x13", kd_test_laplacian_2d(47, 13), dt[d], "cg", rtol, 5);
    }
}

static void test_cg_random_spd(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-5;
        solve_converges("random spd 2000", kd_test_spd_matrix(2000, 8, 0.1), dt[d], "cg", rtol, 0);
        solve_converges("random spd 20011", kd_test_spd_matrix(20011, 6, 0.5), dt[d], "cg", rtol,
                        0);
        solve_converges("random spd 1", kd_test_spd_matrix(1, 1, 2.0), dt[d], "cg", rtol, 1);
    }
}

static void test_sd(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-5;
        solve_converges("random spd 3000", kd_test_spd_matrix(3000, 8, 1.0), dt[d], "sd", rtol, 0);
        solve_converges("laplacian 12x12", kd_test_laplacian_2d(12, 12), dt[d], "sd",
                        dt[d] == KD_DTYPE_F64 ? 1e-6 : 1e-4, 4);
    }
}

static void test_warm_start_and_zero_rhs(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        problem_t p;
        REQUIRE(problem_make(&p, kd_test_laplacian_2d(30, 20), dt[d]) == 0);
        double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-5;
        for (int method = 0; method < 2; method++) {
            kd_solve_params_t prm = params_of(method ? "sd" : "cg", rtol);
            kd_solve_result_t res;
            kd_err_t err = {0};
            if (method == 0) {
                CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
                CHECK(res.status == KD_SOLVE_CONVERGED);
                kd_solve_result_free(&res);
            }
            /* From the solution: converged in 0 or 1 iterations. */
            void *x2 = malloc((size_t)p.n * 8);
            CHECK(kd_solve(ocl, p.A, 1, p.b, p.x, x2, &prm, &res, &err) == KD_OK);
            CHECK(res.status == KD_SOLVE_CONVERGED);
            CHECK_MSG(res.iterations <= 1, "warm start took %lld iterations",
                      (long long)res.iterations);
            CHECK(true_relres(&p, x2) <= rtol);
            kd_solve_result_free(&res);
            free(x2);
        }

        /* b = 0: x = 0 exactly whatever x0 is, converged, no iterations. */
        void *zero = calloc((size_t)p.n, 8);
        double *x0w = NULL;
        void *x0 = kd_test_random_vector(p.n, dt[d], 1.0, 2.0, &x0w);
        free(x0w);
        void *x = malloc((size_t)p.n * 8);
        memset(x, 0x7f, (size_t)p.n * 8);
        kd_solve_params_t prm = params_of("cg", 1e-8);
        prm.record_history = 1;
        kd_solve_result_t res;
        kd_err_t err = {0};
        CHECK(kd_solve(ocl, p.A, 1, zero, x0, x, &prm, &res, &err) == KD_OK);
        CHECK(res.status == KD_SOLVE_CONVERGED);
        CHECK_EQ_INT(res.iterations, 0);
        CHECK(res.residual_norm == 0.0 && res.relative_residual == 0.0 && res.b_norm == 0.0);
        CHECK_EQ_INT(res.history_len, 1);
        int nonzero = 0;
        for (int64_t i = 0; i < p.n; i++)
            nonzero += kd_load_real(x, dt[d], (size_t)i) != 0.0;
        CHECK_EQ_INT(nonzero, 0);
        kd_solve_result_free(&res);
        free(zero);
        free(x0);
        free(x);
        kd_test_problem_free(&p);
    }
}

/* diag(1, -1, 1, -1, ...) */
static kd_csr_t *alternating_diagonal(int64_t n)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++)
        kd_test_coo_add(&c, i, i, i % 2 ? -1.0 : 1.0);
    return kd_test_coo_finish(&c);
}

/* The Laplacian minus `shift` on the diagonal. */
static kd_csr_t *shifted_laplacian(int64_t nx, double shift)
{
    kd_csr_t *m = kd_test_laplacian_2d(nx, nx);
    for (int64_t r = 0; r < m->rows; r++)
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
            if (m->indices[k] == r)
                kd_store_real(m->values, m->dtype, (size_t)k, kd_csr_value(m, k) - shift);
    return m;
}

static void test_indefinite(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        for (int method = 0; method < 2; method++) {
            const char *meth = method ? "sd" : "cg";
            const char *pq = method ? "r'Ar = " : "p'Ap = ";
            /* Negative definite: the very first step breaks down, x is untouched. */
            problem_t p;
            REQUIRE(problem_make(&p, shifted_laplacian(20, 9.0), dt[d]) == 0);
            kd_solve_params_t prm = params_of(meth, 1e-8);
            kd_solve_result_t res;
            kd_err_t err = {0};
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
            CHECK_MSG(res.status == KD_SOLVE_BREAKDOWN, "%s", kd_solve_status_name(res.status));
            CHECK_EQ_INT(res.iterations, 0);
            CHECK_STR_CONTAINS(res.message, pq);
            CHECK_STR_CONTAINS(res.message, "<= 0 at iteration 1: the matrix is ");
            /* cg on a symmetric matrix: it is indefinite, and minres solves it */
            CHECK_STR_CONTAINS(res.message, method ? "not symmetric positive definite"
                                                   : "symmetric but not positive definite; try "
                                                     "method minres");
            fprintf(stderr, "  message: %s\n", res.message);
            CHECK_NEAR(res.relative_residual, 1.0, 1e-5); /* x = 0 still */
            kd_solve_result_free(&res);
            kd_test_problem_free(&p);

            /* Indefinite: breakdown or max_iterations, within maxiter. */
            REQUIRE(problem_make(&p, alternating_diagonal(101), dt[d]) == 0);
            prm.maxiter = 500;
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
            CHECK_MSG(res.status == KD_SOLVE_BREAKDOWN || res.status == KD_SOLVE_MAX_ITERATIONS ||
                          res.status == KD_SOLVE_NON_FINITE,
                      "%s", kd_solve_status_name(res.status));
            CHECK(res.iterations <= 500);
            if (res.status == KD_SOLVE_BREAKDOWN)
                CHECK_STR_CONTAINS(res.message, method ? "not symmetric positive definite"
                                                       : "not positive definite; try method "
                                                         "minres");
            fprintf(stderr, "  diag(1,-1,...) %s: %s after %lld: %s\n", method ? "sd" : "cg",
                    kd_solve_status_name(res.status), (long long)res.iterations, res.message);
            kd_solve_result_free(&res);
            kd_test_problem_free(&p);

            /* Mildly indefinite (a few negative eigenvalues): never hangs. */
            REQUIRE(problem_make(&p, shifted_laplacian(16, 0.3), dt[d]) == 0);
            prm.maxiter = 2000;
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
            CHECK(res.iterations <= 2000);
            fprintf(stderr, "  laplacian - 0.3 %s: %s after %lld\n", method ? "sd" : "cg",
                    kd_solve_status_name(res.status), (long long)res.iterations);
            kd_solve_result_free(&res);
            kd_test_problem_free(&p);
        }
    }
}

static void test_non_finite_inputs(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        problem_t p;
        REQUIRE(problem_make(&p, kd_test_laplacian_2d(10, 10), dt[d]) == 0);
        kd_solve_params_t prm = params_of("cg", 1e-8);
        kd_solve_result_t res;
        kd_err_t err = {0};

        kd_store_real(p.b, dt[d], 17, NAN);
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
        CHECK(res.status == KD_SOLVE_NON_FINITE);
        CHECK_STR_CONTAINS(res.message, "b[17] = nan");
        CHECK_STR_CONTAINS(res.message, "right-hand side");
        CHECK_EQ_INT(res.iterations, 0);
        kd_solve_result_free(&res);
        kd_store_real(p.b, dt[d], 17, p.bw[17]);

        void *x0 = calloc((size_t)p.n, 8);
        kd_store_real(x0, dt[d], 3, -INFINITY);
        CHECK(kd_solve(ocl, p.A, 1, p.b, x0, p.x, &prm, &res, &err) == KD_OK);
        CHECK(res.status == KD_SOLVE_NON_FINITE);
        CHECK_STR_CONTAINS(res.message, "x0[3] = -inf");
        kd_solve_result_free(&res);
        free(x0);
        kd_test_problem_free(&p);

        /* NaN inside the matrix: found by the scan at upload, reported with its place, without
         * iterating. (Non-finite values that appear only during iteration are flagged by the
         * device steps; test_krylov covers those.) */
        kd_csr_t *m = kd_test_laplacian_2d(10, 10);
        kd_store_real(m->values, m->dtype, 40, NAN);
        REQUIRE(problem_make(&p, m, dt[d]) == 0);
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
        CHECK_MSG(res.status == KD_SOLVE_NON_FINITE, "%s", kd_solve_status_name(res.status));
        CHECK_STR_CONTAINS(res.message, "the matrix holds nan at row 10, column 11");
        CHECK_EQ_INT(res.iterations, 0);
        fprintf(stderr, "  message: %s\n", res.message);
        kd_solve_result_free(&res);
        kd_test_problem_free(&p);
    }
}

static void test_maxiter_and_history(void)
{
    problem_t p;
    REQUIRE(problem_make(&p, kd_test_laplacian_2d(60, 60), KD_DTYPE_F32) == 0);
    static const int64_t schedules[][3] = {/* maxiter, check_every, expected history length */
                                           {7, 3, 4}, {7, 1, 8}, {7, 7, 2},  {7, 100, 2},
                                           {0, 1, 1}, {5, 0, 2}, {64, 16, 5}};
    for (size_t s = 0; s < sizeof(schedules) / sizeof(schedules[0]); s++) {
        kd_solve_params_t prm = params_of("cg", 1e-12);
        prm.maxiter = schedules[s][0];
        prm.check_every = schedules[s][1];
        prm.record_history = 1;
        kd_solve_result_t res;
        kd_err_t err = {0};
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
        CHECK(res.status == KD_SOLVE_MAX_ITERATIONS);
        CHECK_EQ_INT(res.iterations, schedules[s][0]);
        CHECK_EQ_INT(res.history_len, schedules[s][2]);
        kd_solve_result_free(&res);
    }
    kd_solve_params_t prm = params_of("sd", 1e-8);
    prm.maxiter = 13;
    kd_solve_result_t res;
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK_EQ_INT(res.iterations, 13);
    CHECK(res.history == NULL && res.history_len == 0);
    kd_solve_result_free(&res);
    kd_solve_result_free(&res);
    kd_solve_result_free(NULL);
    kd_test_problem_free(&p);
}

/* The check schedule changes neither the iterates nor the count: the device decides. */
static void test_schedule_independent(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        problem_t p;
        REQUIRE(problem_make(&p, kd_test_spd_matrix(700, 6, 0.05), dt[d]) == 0);
        void *x1 = malloc((size_t)p.n * 8), *x2 = malloc((size_t)p.n * 8);
        kd_solve_params_t prm = params_of("cg", dt[d] == KD_DTYPE_F64 ? 1e-9 : 1e-5);
        kd_solve_result_t r1, r2;
        kd_err_t err = {0};
        prm.check_every = 1;
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, x1, &prm, &r1, &err) == KD_OK);
        prm.check_every = 1000;
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, x2, &prm, &r2, &err) == KD_OK);
        CHECK(r1.status == KD_SOLVE_CONVERGED && r2.status == KD_SOLVE_CONVERGED);
        CHECK_EQ_INT(r1.iterations, r2.iterations);
        CHECK(memcmp(x1, x2, (size_t)p.n * kd_dtype_size(dt[d])) == 0);
        CHECK(r1.residual_norm == r2.residual_norm);
        kd_solve_result_free(&r1);
        kd_solve_result_free(&r2);
        free(x1);
        free(x2);
        kd_test_problem_free(&p);
    }
}

typedef struct progress_log {
    int calls;
    int64_t last_iteration;
    int stop_at;           /* return nonzero at this call (0: never) */
    atomic_int *cancel_at; /* set this flag once iteration >= 10 */
} progress_log_t;

static int on_progress(void *ctx, int64_t rhs, int64_t iteration, double norm)
{
    CHECK_EQ_INT(rhs, 0);
    progress_log_t *log = ctx;
    log->calls++;
    CHECK(iteration >= log->last_iteration);
    CHECK(isfinite(norm));
    log->last_iteration = iteration;
    if (log->cancel_at != NULL && iteration >= 10)
        atomic_store(log->cancel_at, 1);
    return log->stop_at != 0 && log->calls >= log->stop_at;
}

static void test_progress_cancel_deadline(void)
{
    problem_t p;
    REQUIRE(problem_make(&p, kd_test_laplacian_2d(40, 40), KD_DTYPE_F32) == 0);
    kd_solve_result_t res;
    kd_err_t err = {0};

    /* Called at every check, iteration 0 included. */
    progress_log_t log = {0};
    kd_solve_params_t prm = params_of("cg", 1e-5);
    prm.check_every = 4;
    prm.record_history = 1;
    prm.progress = on_progress;
    prm.progress_ctx = &log;
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(res.status == KD_SOLVE_CONVERGED);
    CHECK_EQ_INT(log.calls, res.history_len);
    CHECK_EQ_INT(log.last_iteration, res.iterations);
    kd_solve_result_free(&res);

    /* Nonzero from the callback stops with KD_ECANCELLED: at the check after iteration 8, when
     * the device already has the next chunk (iterations 9 to 12) and finishes it. */
    log = (progress_log_t){0};
    log.stop_at = 3;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_ECANCELLED);
    CHECK_STR_CONTAINS(err.message, "progress callback at iteration 12");
    CHECK_EQ_INT(res.iterations, 12);
    CHECK_EQ_INT(log.calls, 3);
    CHECK_EQ_INT(log.last_iteration, 8);
    /* x is the iterate at the stop, and the reported residual is its own. */
    CHECK_NEAR(true_relres(&p, p.x), res.relative_residual, 1e-4);
    CHECK(res.relative_residual < 1.0);
    kd_solve_result_free(&res);

    /* The cancel flag, set before the start: stops at the first check. */
    atomic_int cancel = 1;
    prm.progress = NULL;
    prm.cancel = &cancel;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_ECANCELLED);
    CHECK_EQ_INT(res.iterations, 0);
    kd_solve_result_free(&res);

    /* ... and set from another party mid-solve (here: the callback), seen at the next check. */
    atomic_store(&cancel, 0);
    log = (progress_log_t){0};
    log.cancel_at = &cancel;
    prm.progress = on_progress;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_ECANCELLED);
    CHECK_EQ_INT(res.iterations, 16); /* seen at the check after 12, one chunk in flight */
    kd_solve_result_free(&res);

    /* A deadline in the past. */
    prm = params_of("cg", 1e-5);
    prm.deadline_ns = kd_clock_ns();
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_ETIMEOUT);
    CHECK_STR_CONTAINS(err.message, "deadline");
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

static void test_bad_requests(void)
{
    kd_err_t err = {0};
    kd_solve_result_t res;
    problem_t p;
    REQUIRE(problem_make(&p, kd_test_laplacian_2d(5, 5), KD_DTYPE_F32) == 0);
    kd_solve_params_t prm = params_of("cg", -1.0);
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "rtol");
    prm = params_of("cg", 1e-6);
    prm.atol = NAN;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    prm = params_of("cg", 1e-6);
    prm.maxiter = -5;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    prm = params_of("cg", 1e-6);
    prm.check_every = -1;
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    kd_test_problem_free(&p);

    REQUIRE(problem_make(&p, kd_test_random_matrix(6, 5, NULL, 2), KD_DTYPE_F32) == 0);
    prm = params_of("cg", 1e-6);
    CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "square");
    kd_test_problem_free(&p);

    /* 0 x 0: b = 0 trivially. */
    REQUIRE(problem_make(&p, kd_test_random_matrix(0, 0, NULL, 0), KD_DTYPE_F32) == 0);
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(res.status == KD_SOLVE_CONVERGED && res.iterations == 0);
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);

    CHECK(strcmp(kd_solve_status_name(KD_SOLVE_NON_FINITE), "non_finite") == 0);
    CHECK(strcmp(kd_solve_status_name(KD_SOLVE_MAX_ITERATIONS), "max_iterations") == 0);
    CHECK(strcmp(kd_solve_status_name(KD_SOLVE_STAGNATED), "stagnated") == 0);
    kd_solve_params_t def;
    kd_solve_params_default(&def);
    CHECK(def.method == &kd_method_cg && def.precond == &kd_precond_none && def.rtol == 1e-8 &&
          def.atol == 0.0);
    CHECK(def.maxiter == KD_SOLVE_MAXITER_AUTO && def.check_every == 0);
}

static void test_atol(void)
{
    problem_t p;
    REQUIRE(problem_make(&p, kd_test_laplacian_2d(30, 30), KD_DTYPE_F32) == 0);
    kd_solve_params_t prm = params_of("cg", 0.0);
    double bnorm = 0;
    for (int64_t i = 0; i < p.n; i++)
        bnorm += p.bw[i] * p.bw[i];
    prm.atol = 1e-3 * sqrt(bnorm);
    kd_solve_result_t res;
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err) == KD_OK);
    CHECK(res.status == KD_SOLVE_CONVERGED);
    CHECK(true_relres(&p, p.x) <= 1.01e-3);
    kd_solve_result_free(&res);
    kd_test_problem_free(&p);
}

/* A Laplacian scaled as S L S with S = diag(10^u), u uniform in [-spread, spread]: still SPD, but
 * badly scaled, which Jacobi preconditioning undoes. */
static kd_csr_t *scaled_laplacian(int64_t nx, double spread)
{
    kd_csr_t *m = kd_test_laplacian_2d(nx, nx);
    double *scale = malloc((size_t)m->rows * sizeof(double));
    for (int64_t r = 0; r < m->rows; r++)
        scale[r] = pow(10.0, kd_test_rand_double(-spread, spread));
    for (int64_t r = 0; r < m->rows; r++)
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
            kd_store_real(m->values, m->dtype, (size_t)k,
                          kd_csr_value(m, k) * scale[r] * scale[m->indices[k]]);
    free(scale);
    return m;
}

/* On a badly scaled SPD matrix PCG (Jacobi) needs far fewer iterations than CG, and both meet
 * rtol by the CPU's measure when they converge. */
static void test_pcg(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-4;
        problem_t p;
        /* float32 gets a milder scaling: at 10^+-2 the rounding of b - A x alone exceeds 1e-4
         * ||b|| and the refreshed recurrence diverges (as it does in NumPy). */
        REQUIRE(problem_make(&p, scaled_laplacian(40, dt[d] == KD_DTYPE_F64 ? 2.0 : 1.0), dt[d]) ==
                0);
        kd_solve_result_t cg, pcg;
        kd_err_t err = {0};
        kd_solve_params_t prm = params_of("cg", rtol);
        prm.maxiter = 20000;
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &cg, &err) == KD_OK);
        set_method(&prm, "pcg");
        prm.record_history = 1;
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &pcg, &err) == KD_OK);
        double truth = true_relres(&p, p.x);
        fprintf(stderr,
                "  scaled laplacian 40x40 %s: cg %s after %lld, pcg %s after %lld (true %.3g)\n",
                kd_dtype_name(dt[d]), kd_solve_status_name(cg.status), (long long)cg.iterations,
                kd_solve_status_name(pcg.status), (long long)pcg.iterations, truth);
        CHECK_MSG(pcg.status == KD_SOLVE_CONVERGED, "%s", pcg.message);
        CHECK(truth <= rtol * (dt[d] == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6));
        CHECK(pcg.history_len >= 2 && pcg.history[0] > 0.0);
        CHECK_MSG(pcg.iterations * 4 < cg.iterations, "pcg %lld vs cg %lld",
                  (long long)pcg.iterations, (long long)cg.iterations);
        kd_solve_result_free(&cg);
        kd_solve_result_free(&pcg);
        kd_test_problem_free(&p);

        /* Well scaled: PCG on the Laplacian (constant diagonal) takes CG's path. */
        REQUIRE(problem_make(&p, kd_test_laplacian_2d(30, 30), dt[d]) == 0);
        prm = params_of("cg", rtol);
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &cg, &err) == KD_OK);
        set_method(&prm, "pcg");
        CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &pcg, &err) == KD_OK);
        CHECK(cg.status == KD_SOLVE_CONVERGED && pcg.status == KD_SOLVE_CONVERGED);
        CHECK_MSG(llabs(cg.iterations - pcg.iterations) <= 2, "cg %lld pcg %lld",
                  (long long)cg.iterations, (long long)pcg.iterations);
        kd_solve_result_free(&cg);
        kd_solve_result_free(&pcg);
        kd_test_problem_free(&p);
    }
}

/* Jacobi needs a usable diagonal: zero, missing or non-finite entries are BAD_REQUEST, negative
 * ones NOT_SPD for the methods that need M positive definite, each naming the row; CG on the
 * same matrix is not refused, nor bicgstab + jacobi. */
static void test_pcg_bad_diagonal(void)
{
    static const struct {
        double value; /* put on the diagonal of row 7; NAN as a marker for "missing" too */
        int remove;
        int code;
        const char *text;
    } cases[] = {
        {0.0, 0, KD_EBADREQ, "row 7 is 0 (zero or missing)"},
        {0.0, 1, KD_EBADREQ, "row 7 is 0 (zero or missing)"},
        {NAN, 0, KD_EBADREQ, "row 7 is nan (not finite)"},
        {INFINITY, 0, KD_EBADREQ, "row 7 is inf (not finite)"},
        {-2.0, 0, KD_ENOTSPD, "row 7 is -2 < 0: the matrix is not symmetric positive definite"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_csr_t *m = kd_test_laplacian_2d(6, 6);
        for (int32_t k = m->indptr[7]; k < m->indptr[8]; k++)
            if (m->indices[k] == 7)
                kd_store_real(m->values, m->dtype, (size_t)k, cases[i].value);
        if (cases[i].remove) { /* drop the stored zero: the entry is missing */
            kd_test_coo_t c = {m->rows, m->cols, 0, 0, NULL, NULL, NULL};
            for (int64_t r = 0; r < m->rows; r++)
                for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
                    if (!(r == 7 && m->indices[k] == 7))
                        kd_test_coo_add(&c, r, m->indices[k], kd_csr_value(m, k));
            kd_csr_free(m);
            m = kd_test_coo_finish(&c);
        }
        problem_t p;
        REQUIRE(problem_make(&p, m, KD_DTYPE_F32) == 0);
        kd_solve_params_t prm = params_of("pcg", 1e-5);
        kd_solve_result_t res;
        kd_err_t err = {0};
        CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), cases[i].code);
        CHECK_STR_CONTAINS(err.message, "jacobi: the diagonal entry of ");
        CHECK_STR_CONTAINS(err.message, cases[i].text);
        fprintf(stderr, "  %s\n", err.message);
        kd_solve_result_free(&res);
        set_method(&prm, "cg");
        prm.maxiter = 50;
        CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_OK);
        kd_solve_result_free(&res);
        /* a negative a_ii bars only the methods that need M positive definite: bicgstab and
         * gmres take jacobi there and solve it */
        if (cases[i].code == KD_ENOTSPD) {
            prm = params_of("bicgstab", 1e-5);
            REQUIRE(kd_method_choose("bicgstab", "jacobi", &prm.method, &prm.precond, &err) ==
                    KD_OK);
            CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err), KD_OK);
            CHECK_MSG(res.status == KD_SOLVE_CONVERGED, "bicgstab + jacobi: %s",
                      kd_solve_status_name(res.status));
            CHECK(kd_test_true_relres(&p, p.x, 0) <= 1e-4);
            kd_solve_result_free(&res);
        }
        kd_test_problem_free(&p);
    }
}

/* An eigenvector of the nx x nx Laplacian: CG solves A x = v in one iteration. */
static void laplacian_eigenvector(int64_t nx, int p, int q, kd_dtype_t dtype, void *out)
{
    for (int64_t j = 0; j < nx; j++)
        for (int64_t i = 0; i < nx; i++)
            kd_store_real(out, dtype, (size_t)(j * nx + i),
                          sin(M_PI * (double)((i + 1) * p) / (double)(nx + 1)) *
                              sin(M_PI * (double)((j + 1) * q) / (double)(nx + 1)));
}

/*
 * Several right-hand sides in one solve: a random column, b = 0, NaN in b, an eigenvector (one
 * iteration), a scaled random column with a warm start. Each column's status, iteration count and
 * x are those of the same column solved alone (bitwise, with the same reduction grid); each
 * converged column meets rtol by the CPU's measure; b = 0 gives x = 0 and NaN gives non_finite.
 */
static void test_multi_rhs(void)
{
    enum { NX = 36, K = 5 };
    const int64_t n = NX * NX;
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        for (int method = 0; method < 3; method++) {
            const char *meth = method == 0 ? "cg" : method == 1 ? "pcg" : "sd";
            const double rtol = dt[d] == KD_DTYPE_F64 ? 1e-8 : 1e-4;
            const size_t vsize = kd_dtype_size(dt[d]), col = (size_t)n * vsize;
            problem_t p;
            REQUIRE(problem_make(
                        &p, method == 1 ? scaled_laplacian(NX, 1.0) : kd_test_laplacian_2d(NX, NX),
                        dt[d]) == 0);
            char *b = calloc(K, col), *x0 = calloc(K, col), *x = malloc(K * col);
            for (int64_t i = 0; i < n; i++) {
                kd_store_real(b, dt[d], (size_t)i, kd_test_rand_double(-1, 1));
                kd_store_real(b + 2 * col, dt[d], (size_t)i, kd_test_rand_double(-1, 1));
                kd_store_real(b + 4 * col, dt[d], (size_t)i, 1e3 * kd_test_rand_double(-1, 1));
                kd_store_real(x0 + 4 * col, dt[d], (size_t)i, kd_test_rand_double(-1, 1));
            }
            kd_store_real(b + 2 * col, dt[d], 77, NAN);
            laplacian_eigenvector(NX, 2, 3, dt[d], b + 3 * col);
            kd_solve_params_t prm = params_of(meth, rtol);
            prm.reduction_groups = 3;
            prm.check_every = 7;
            prm.maxiter = 5000;
            prm.record_history = 1;
            kd_solve_result_t res[K], one;
            kd_err_t err = {0};
            CHECK(kd_solve(ocl, p.A, K, b, x0, x, &prm, res, &err) == KD_OK);
            fprintf(stderr, "  %s %s:",
                    method == 0   ? "cg"
                    : method == 1 ? "pcg"
                                  : "sd",
                    kd_dtype_name(dt[d]));
            for (int c = 0; c < K; c++)
                fprintf(stderr, " [%d] %s %lld", c, kd_solve_status_name(res[c].status),
                        (long long)res[c].iterations);
            fprintf(stderr, "\n");
            CHECK(res[1].status == KD_SOLVE_CONVERGED && res[1].iterations == 0);
            for (int64_t i = 0; i < n; i++)
                CHECK(kd_load_real(x + col, dt[d], (size_t)i) == 0.0);
            CHECK(res[2].status == KD_SOLVE_NON_FINITE);
            CHECK_STR_CONTAINS(res[2].message, "b[77] = nan");
            if (strcmp(meth, "pcg") != 0) { /* unscaled Laplacian: one step along an eigenvector */
                CHECK_MSG(res[3].iterations <= 2, "eigenvector took %lld",
                          (long long)res[3].iterations);
                CHECK(res[0].iterations > 10);
            }
            for (int c = 0; c < K; c++) {
                if (c == 1 || c == 2)
                    continue;
                CHECK_MSG(res[c].status == KD_SOLVE_CONVERGED, "column %d: %s", c,
                          kd_solve_status_name(res[c].status));
                /* The CPU's measure, with this column's own b. */
                for (int64_t i = 0; i < n; i++)
                    p.bw[i] = kd_load_real(b + (size_t)c * col, dt[d], (size_t)i);
                double truth = true_relres(&p, x + (size_t)c * col);
                CHECK_MSG(truth <= rtol * (dt[d] == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6),
                          "column %d: true %.3g", c, truth);
                CHECK_NEAR(res[c].relative_residual, truth, dt[d] == KD_DTYPE_F64 ? 1e-9 : 1e-4);
                /* Alone: the same answer, bit for bit. */
                CHECK(kd_solve(ocl, p.A, 1, b + (size_t)c * col, x0 + (size_t)c * col, p.x, &prm,
                               &one, &err) == KD_OK);
                CHECK_EQ_INT(one.status, res[c].status);
                CHECK_EQ_INT(one.iterations, res[c].iterations);
                CHECK_EQ_INT(one.history_len, res[c].history_len);
                CHECK_MSG(memcmp(p.x, x + (size_t)c * col, col) == 0,
                          "column %d differs from its solve alone", c);
                kd_solve_result_free(&one);
            }
            for (int c = 0; c < K; c++)
                kd_solve_result_free(&res[c]);

            /* maxiter applies per column: every running column stops at exactly 9. */
            prm.maxiter = 9;
            prm.check_every = 4;
            CHECK(kd_solve(ocl, p.A, K, b, NULL, x, &prm, res, &err) == KD_OK);
            CHECK(res[0].status == KD_SOLVE_MAX_ITERATIONS && res[0].iterations == 9);
            CHECK(res[4].status == KD_SOLVE_MAX_ITERATIONS && res[4].iterations == 9);
            CHECK_EQ_INT(res[0].history_len, 4); /* 0, 4, 8, 9 */
            for (int c = 0; c < K; c++)
                kd_solve_result_free(&res[c]);
            free(b);
            free(x0);
            free(x);
            kd_test_problem_free(&p);
        }
    }
}

/* The check schedule changes neither the iterates nor the counts, for PCG, SD and several
 * right-hand sides too. */
static void test_schedule_independent_multi(void)
{
    enum { K = 3 };
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        for (int method = 0; method < 3; method++) {
            problem_t p;
            REQUIRE(problem_make(&p, kd_test_spd_matrix(500, 6, 0.05), dt[d]) == 0);
            const size_t col = (size_t)p.n * kd_dtype_size(dt[d]);
            char *b = malloc(K * col), *x1 = malloc(K * col), *x2 = malloc(K * col);
            for (int64_t i = 0; i < p.n * K; i++)
                kd_store_real(b, dt[d], (size_t)i, kd_test_rand_double(-1, 1) * (1 + i / p.n));
            kd_solve_params_t prm = params_of(method == 0   ? "cg"
                                              : method == 1 ? "pcg"
                                                            : "sd",
                                              dt[d] == KD_DTYPE_F64 ? 1e-9 : 1e-4);
            kd_solve_result_t r1[K], r2[K];
            kd_err_t err = {0};
            prm.check_every = 1;
            CHECK(kd_solve(ocl, p.A, K, b, NULL, x1, &prm, r1, &err) == KD_OK);
            prm.check_every = 1000;
            CHECK(kd_solve(ocl, p.A, K, b, NULL, x2, &prm, r2, &err) == KD_OK);
            for (int c = 0; c < K; c++) {
                CHECK(r1[c].status == KD_SOLVE_CONVERGED && r2[c].status == KD_SOLVE_CONVERGED);
                CHECK_EQ_INT(r1[c].iterations, r2[c].iterations);
                CHECK(r1[c].residual_norm == r2[c].residual_norm);
                kd_solve_result_free(&r1[c]);
                kd_solve_result_free(&r2[c]);
            }
            CHECK(memcmp(x1, x2, K * col) == 0);
            free(b);
            free(x1);
            free(x2);
            kd_test_problem_free(&p);
        }
    }
}

typedef struct multi_log {
    int calls;
    int64_t max_rhs;
} multi_log_t;

static int on_multi_progress(void *ctx, int64_t rhs, int64_t iteration, double norm)
{
    multi_log_t *log = ctx;
    log->calls++;
    CHECK(rhs >= 0 && rhs < 4 && iteration >= 0 && norm >= 0.0);
    if (rhs > log->max_rhs)
        log->max_rhs = rhs;
    return 0;
}

/* Progress with several right-hand sides: one call per check, naming the slowest column (here
 * the last, whose b is 100 times larger relative to nothing: its rtol is relative, so it is the
 * one with the largest ||r|| / tol only by chance; the column index stays in range). */
static void test_multi_progress_and_non_finite_matrix(void)
{
    problem_t p;
    REQUIRE(problem_make(&p, kd_test_laplacian_2d(20, 20), KD_DTYPE_F32) == 0);
    const size_t col = (size_t)p.n * 4;
    char *b = malloc(4 * col), *x = malloc(4 * col);
    for (int64_t i = 0; i < p.n * 4; i++)
        kd_store_real(b, KD_DTYPE_F32, (size_t)i, kd_test_rand_double(-1, 1));
    kd_solve_params_t prm = params_of("cg", 1e-5);
    prm.check_every = 3;
    prm.record_history = 1;
    multi_log_t log = {0, -1};
    prm.progress = on_multi_progress;
    prm.progress_ctx = &log;
    kd_solve_result_t res[4];
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 4, b, NULL, x, &prm, res, &err) == KD_OK);
    int64_t longest = 0;
    for (int c = 0; c < 4; c++) {
        CHECK(res[c].status == KD_SOLVE_CONVERGED);
        if (res[c].history_len > longest)
            longest = res[c].history_len;
        kd_solve_result_free(&res[c]);
    }
    /* One call per check: at least as many as the longest history (a column's history skips the
     * checks whose state predates its restart, if it had one). */
    CHECK(log.calls >= longest);
    CHECK(log.max_rhs >= 0);
    kd_test_problem_free(&p);

    /* NaN in the matrix: every column with b != 0 is non_finite, b = 0 still gives x = 0. */
    kd_csr_t *m = kd_test_laplacian_2d(20, 20);
    kd_store_real(m->values, m->dtype, 5, INFINITY);
    REQUIRE(problem_make(&p, m, KD_DTYPE_F32) == 0);
    memset(b + col, 0, col);
    prm.progress = NULL;
    CHECK(kd_solve(ocl, p.A, 2, b, NULL, x, &prm, res, &err) == KD_OK);
    CHECK(res[0].status == KD_SOLVE_NON_FINITE);
    CHECK_STR_CONTAINS(res[0].message, "the matrix holds inf at row 1");
    CHECK(res[1].status == KD_SOLVE_CONVERGED && res[1].iterations == 0);
    kd_solve_result_free(&res[0]);
    kd_solve_result_free(&res[1]);
    free(b);
    free(x);
    kd_test_problem_free(&p);
}

/* Two vector passes per iteration (the default) and three take the same path: the same status,
 * iteration counts within one, both meeting rtol. */
static void test_two_and_three_passes(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        for (int method = 0; method < 2; method++) {
            const double rtol = dt[d] == KD_DTYPE_F64 ? 1e-9 : 1e-4;
            problem_t p;
            REQUIRE(problem_make(
                        &p, method ? scaled_laplacian(30, 1.0) : kd_test_spd_matrix(3000, 8, 0.01),
                        dt[d]) == 0);
            kd_solve_params_t prm = params_of(method ? "pcg" : "cg", rtol);
            kd_solve_result_t r2, r3;
            kd_err_t err = {0};
            prm.passes = 2;
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r2, &err) == KD_OK);
            double t2 = true_relres(&p, p.x);
            prm.passes = 3;
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r3, &err) == KD_OK);
            double t3 = true_relres(&p, p.x);
            fprintf(stderr, "  %s %s: 2 passes %lld iterations (true %.3g), 3 passes %lld (%.3g)\n",
                    method ? "pcg" : "cg", kd_dtype_name(dt[d]), (long long)r2.iterations, t2,
                    (long long)r3.iterations, t3);
            CHECK(r2.status == KD_SOLVE_CONVERGED && r3.status == KD_SOLVE_CONVERGED);
            CHECK_MSG(llabs(r2.iterations - r3.iterations) <= (dt[d] == KD_DTYPE_F64 ? 1 : 3),
                      "%lld vs %lld", (long long)r2.iterations, (long long)r3.iterations);
            const double ceiling = rtol * (dt[d] == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6);
            CHECK(t2 <= ceiling && t3 <= ceiling);
            /* Lean (no r read): converges too, within a few iterations here. */
            prm.passes = 1;
            kd_solve_result_free(&r2);
            CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r2, &err) == KD_OK);
            CHECK(r2.status == KD_SOLVE_CONVERGED && true_relres(&p, p.x) <= ceiling);
            CHECK_MSG(llabs(r2.iterations - r3.iterations) <= 3 + r3.iterations / 10,
                      "lean %lld vs %lld", (long long)r2.iterations, (long long)r3.iterations);
            kd_solve_result_free(&r2);
            prm.passes = 4;
            CHECK_EQ_INT(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r2, &err), KD_EBADREQ);
            kd_solve_result_free(&r2);
            kd_solve_result_free(&r3);
            kd_test_problem_free(&p);
        }
    }
}

/* On a csr_scalar matrix the SpMV can be fused into the first vector pass; with
 * KD_SOLVE_FUSION_OFF it is a launch of its own (the test forces both: automatic fuses on GPUs
 * only). Both do the same operations in the same order, so three columns of different scale (one
 * of them b = 0) take the same iterations to the same x and residuals, in both precisions, for
 * CG and PCG in two passes, lean and three, and for SD. Rows of 1..16 entries. */
static void test_fused_spmv_matches_separate(void)
{
    enum { K = 3 };
    static const struct {
        const char *method;
        int passes;
        const char *name;
    } variants[] = {{"cg", 2, "cg"},        {"pcg", 2, "pcg"},        {"cg", 1, "cg lean"},
                    {"pcg", 1, "pcg lean"}, {"cg", 3, "cg 3 passes"}, {"pcg", 3, "pcg 3 passes"},
                    {"sd", 0, "sd"}};
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        for (size_t vi = 0; vi < sizeof(variants) / sizeof(variants[0]); vi++) {
            problem_t p;
            REQUIRE(problem_make(&p, kd_test_spd_matrix(1500, 8, 0.02), dt[d]) == 0);
            const size_t col = (size_t)p.n * kd_dtype_size(dt[d]);
            char *b = malloc(K * col), *xf = malloc(K * col), *xs = malloc(K * col);
            for (int64_t i = 0; i < p.n * K; i++)
                kd_store_real(b, dt[d], (size_t)i,
                              i / p.n == 1 ? 0.0
                                           : kd_test_rand_double(-1, 1) * (1 + 9 * (i / p.n)));
            kd_solve_params_t prm =
                params_of(variants[vi].method, dt[d] == KD_DTYPE_F64 ? 1e-10 : 1e-5);
            prm.passes = variants[vi].passes;
            prm.spmv_fusion = KD_SOLVE_FUSION_ON;
            prm.small = KD_SOLVE_SMALL_OFF; /* the general path, fused and apart, bit for bit */
            kd_solve_result_t rf[K], rs[K];
            kd_err_t err = {0};
            CHECK(kd_solve(ocl, p.A, K, b, NULL, xf, &prm, rf, &err) == KD_OK);
            prm.spmv_fusion = KD_SOLVE_FUSION_OFF;
            CHECK(kd_solve(ocl, p.A, K, b, NULL, xs, &prm, rs, &err) == KD_OK);
            fprintf(stderr, "  %s %s: fused %lld/%lld iterations, separate %lld/%lld\n",
                    variants[vi].name, kd_dtype_name(dt[d]), (long long)rf[0].iterations,
                    (long long)rf[2].iterations, (long long)rs[0].iterations,
                    (long long)rs[2].iterations);
            for (int c = 0; c < K; c++) {
                /* the b = 0 column is answered x = 0 before the device iterates */
                CHECK(c == 1 ? rf[c].iterations == 0
                             : rf[c].spmv_fused == 1 && rs[c].spmv_fused == 0);
                CHECK(rf[c].status == rs[c].status);
                CHECK(strcmp(variants[vi].method, "sd") == 0 || rf[c].status == KD_SOLVE_CONVERGED);
                CHECK_EQ_INT(rf[c].iterations, rs[c].iterations);
                CHECK(rf[c].residual_norm == rs[c].residual_norm);
                kd_solve_result_free(&rf[c]);
                kd_solve_result_free(&rs[c]);
            }
            CHECK(memcmp(xf, xs, K * col) == 0);
            free(b);
            free(xf);
            free(xs);
            kd_test_problem_free(&p);
        }
    }
    /* automatic: on a GPU a matrix this small takes cg's small-system path (its own kernel, no
     * fused SpMV); without it, fused on a GPU, not on a CPU; another format never fuses */
    problem_t p;
    REQUIRE(problem_make(&p, kd_test_laplacian_2d(12, 12), KD_DTYPE_F64) == 0);
    kd_solve_params_t prm = params_of("cg", 1e-8);
    kd_solve_result_t r;
    kd_err_t err = {0};
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r, &err) == KD_OK);
    CHECK(r.chunked == kd_ocl_desc(ocl)->is_gpu && r.spmv_fused == 0 &&
          r.status == KD_SOLVE_CONVERGED);
    kd_solve_result_free(&r);
    prm.small = KD_SOLVE_SMALL_OFF;
    CHECK(kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &r, &err) == KD_OK);
    CHECK(r.chunked == 0 && r.spmv_fused == kd_ocl_desc(ocl)->is_gpu &&
          r.status == KD_SOLVE_CONVERGED);
    kd_solve_result_free(&r);
    kd_matrix_t *vec = NULL;
    REQUIRE(kd_matrix_upload(ocl, p.csr, KD_FMT_CSR_VECTOR, &vec, &err) == KD_OK);
    prm.spmv_fusion = KD_SOLVE_FUSION_ON;
    CHECK(kd_solve(ocl, vec, 1, p.b, NULL, p.x, &prm, &r, &err) == KD_OK);
    CHECK(r.spmv_fused == 0 && r.status == KD_SOLVE_CONVERGED);
    kd_solve_result_free(&r);
    kd_matrix_free(vec);
    kd_test_problem_free(&p);
}

/* A solve on an RCM-reordered matrix runs in the permuted order but takes b and gives x in the
 * caller's: x matches the unreordered solve to rounding, and ||b - A x|| with the ORIGINAL matrix
 * on the CPU is below rtol. CG on a scrambled Laplacian, PCG (the permuted inverse diagonal) on a
 * random SPD matrix, with a warm start, fused and separate SpMV, two right-hand sides. */
static void test_reordered_solve(void)
{
    enum { K = 2 };
    static const char *const methods[] = {"cg", "pcg"};
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        for (int mi = 0; mi < 2; mi++) {
            problem_t p;
            kd_csr_t *csr64 =
                mi == 0 ? kd_test_laplacian_2d(37, 29) : kd_test_spd_matrix(900, 6, 0.05);
            REQUIRE(problem_make(&p, csr64, dt[d]) == 0);
            kd_err_t err = {0};
            kd_matrix_t *R = NULL;
            REQUIRE(kd_matrix_upload_reordered(ocl, p.csr, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &R,
                                               &err) == KD_OK);
            const size_t col = (size_t)p.n * kd_dtype_size(dt[d]);
            char *b = malloc(K * col), *x0 = malloc(K * col), *xa = malloc(K * col),
                 *xr = malloc(K * col);
            for (int64_t i = 0; i < p.n * K; i++) {
                kd_store_real(b, dt[d], (size_t)i, kd_test_rand_double(-1, 1));
                kd_store_real(x0, dt[d], (size_t)i, kd_test_rand_double(-0.1, 0.1));
            }
            double rtol = dt[d] == KD_DTYPE_F64 ? 1e-10 : 1e-5;
            for (int fuse = 0; fuse < 2; fuse++) {
                kd_solve_params_t prm = params_of(methods[mi], rtol);
                prm.spmv_fusion = fuse ? KD_SOLVE_FUSION_ON : KD_SOLVE_FUSION_OFF;
                kd_solve_result_t ra[K], rr[K];
                CHECK(kd_solve(ocl, p.A, K, b, x0, xa, &prm, ra, &err) == KD_OK);
                CHECK_MSG(kd_solve(ocl, R, K, b, x0, xr, &prm, rr, &err) == KD_OK, "%s",
                          err.message);
                for (int c = 0; c < K; c++) {
                    CHECK(rr[c].status == KD_SOLVE_CONVERGED);
                    double truth;
                    memcpy(p.b, b + c * col, col);
                    for (int64_t i = 0; i < p.n; i++)
                        p.bw[i] = kd_load_real(p.b, dt[d], (size_t)i);
                    truth = true_relres(&p, xr + c * col);
                    CHECK_MSG(truth <= rtol * (dt[d] == KD_DTYPE_F32 ? 1.05 : 1.0 + 1e-6),
                              "%s reordered: true relative residual %.3g", methods[mi], truth);
                    double diff = 0.0, norm = 0.0;
                    for (int64_t i = 0; i < p.n; i++) {
                        double u = kd_load_real(xa + c * col, dt[d], (size_t)i);
                        double v = kd_load_real(xr + c * col, dt[d], (size_t)i);
                        diff = fmax(diff, fabs(u - v));
                        norm = fmax(norm, fabs(u));
                    }
                    fprintf(stderr, "  %s %s fused=%d: %lld vs %lld iterations, |dx| %.3g\n",
                            methods[mi], kd_dtype_name(dt[d]), fuse, (long long)ra[c].iterations,
                            (long long)rr[c].iterations, diff / norm);
                    CHECK_MSG(diff <= (dt[d] == KD_DTYPE_F64 ? 1e-7 : 2e-2) * norm,
                              "%s: reordered x differs by %.3g", methods[mi], diff / norm);
                    kd_solve_result_free(&ra[c]);
                    kd_solve_result_free(&rr[c]);
                }
            }
            kd_matrix_free(R);
            free(b);
            free(x0);
            free(xa);
            free(xr);
            kd_test_problem_free(&p);
        }
    }
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_bad_requests);
    RUN(test_cg_laplacian);
    RUN(test_cg_random_spd);
    RUN(test_sd);
    RUN(test_warm_start_and_zero_rhs);
    RUN(test_indefinite);
    RUN(test_non_finite_inputs);
    RUN(test_maxiter_and_history);
    RUN(test_schedule_independent);
    RUN(test_progress_cancel_deadline);
    RUN(test_atol);
    RUN(test_pcg);
    RUN(test_pcg_bad_diagonal);
    RUN(test_multi_rhs);
    RUN(test_schedule_independent_multi);
    RUN(test_multi_progress_and_non_finite_matrix);
    RUN(test_two_and_three_passes);
    RUN(test_fused_spmv_matches_separate);
    RUN(test_reordered_solve);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
