/*
 * Distributed CG, PCG (Jacobi) and SD under mpirun (dist/dist_solve.c through solver/solve.c's
 * spread seam and solver/methods/krylov_combine.c): every column's status and iteration count
 * against the single-process kd_solve on the whole matrix (run on rank 0), residuals to rounding,
 * the same results bit for bit on every rank, and the true residual ||b - A x|| / ||b|| of the
 * gathered x on the host. float64 and float32, one and three right-hand sides with x0, a generated
 * SPD matrix, a 2-D Laplacian, 494_bus; 1 and 2 rows over up to 3 ranks (ranks without rows); the
 * host's answers (b = 0, NaN in b) with the whole vector's row numbers; cancel on one rank and a
 * deadline passed on another stop every rank at the same iteration; refusals worded as the
 * single-process solve words them.
 */
#include "kd_dist_mpi_test.h"
#include "kd_test_mtx.h"
#include "solver/methods/method.h"

#include <math.h>

#define KD_HISTORY_KEPT 64 /* history entries compared */

typedef struct outcome {
    int64_t status, iterations, restarts, history_len;
    double residual, b_norm;
    double history[KD_HISTORY_KEPT];
} outcome_t;

static outcome_t outcome_of(const kd_solve_result_t *r, int64_t status)
{
    outcome_t o;
    memset(&o, 0, sizeof(o));
    o.status = status;
    o.iterations = r->iterations;
    o.restarts = r->restarts;
    o.history_len = r->history_len;
    o.residual = r->residual_norm;
    o.b_norm = r->b_norm;
    for (int64_t i = 0; i < r->history_len && i < KD_HISTORY_KEPT; i++)
        o.history[i] = r->history[r->history_len - 1 - i]; /* the last ones */
    return o;
}

static int64_t last_restarts[2]; /* compare's first column: spread, single */
static int last_stagnated;       /* and whether the single-process solve of it stagnated */

static int rank(void)
{
    return kd_dist_test_comm.rank;
}

/* This rank's rows of column-major whole (n rows, k columns) as dtype, `rows` a column. */
static void *local_rows(const kd_dist_matrix_t *m, const double *whole, int64_t k, kd_dtype_t dtype)
{
    const int64_t lo = m->block.row_start[m->block.rank], n = m->block.rows;
    void *out = malloc((size_t)(m->rows * k) * 8 + 8);
    for (int64_t c = 0; c < k; c++)
        for (int64_t i = 0; i < m->rows; i++)
            kd_store_real(out, dtype, (size_t)(c * m->rows + i), whole[c * n + lo + i]);
    return out;
}

/* The single-process solve on rank 0, its outcomes shared with every rank. */
static int reference(const kd_csr_t *A, kd_dtype_t dtype, int64_t nrhs, const double *b,
                     const double *x0, const kd_solve_params_t *params, outcome_t *out,
                     char *message)
{
    int rc = KD_OK;
    if (rank() == 0) {
        kd_err_t err = {0};
        kd_csr_t *conv = NULL;
        kd_matrix_t *M = NULL;
        kd_select_result_t sel;
        const int64_t n = A->rows;
        void *bb = malloc((size_t)(n * nrhs) * 8), *xx0 = malloc((size_t)(n * nrhs) * 8);
        void *x = malloc((size_t)(n * nrhs) * 8);
        for (int64_t i = 0; i < n * nrhs; i++) {
            kd_store_real(bb, dtype, (size_t)i, b[i]);
            kd_store_real(xx0, dtype, (size_t)i, x0 != NULL ? x0[i] : 0.0);
        }
        kd_solve_result_t *res = calloc((size_t)nrhs, sizeof(*res));
        rc = kd_csr_convert(A, dtype, &conv, &err);
        if (rc == KD_OK)
            rc =
                kd_select_upload(kd_dist_test_ocl, conv, NULL, KD_SELECT_HEURISTIC, &M, &sel, &err);
        /* CG's small-system path where it applies, as a GPU takes it by default for these
         * sizes (the spread solve never does): its history must read the same */
        kd_solve_params_t single = *params;
        single.small = KD_SOLVE_SMALL_ON;
        if (rc == KD_OK)
            rc = kd_solve(kd_dist_test_ocl, M, nrhs, bb, x0 != NULL ? xx0 : NULL, x, &single, res,
                          &err);
        for (int64_t j = 0; j < nrhs; j++)
            out[j] = outcome_of(&res[j], res[j].status);
        snprintf(message, KD_ERR_MESSAGE_MAX, "%s", rc == KD_OK ? "" : err.message);
        for (int64_t j = 0; j < nrhs; j++)
            kd_solve_result_free(&res[j]);
        free(res);
        kd_matrix_free(M);
        kd_csr_free(conv);
        free(bb);
        free(xx0);
        free(x);
    }
    MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Bcast(out, (int)(nrhs * (int64_t)sizeof(outcome_t)), MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Bcast(message, KD_ERR_MESSAGE_MAX, MPI_CHAR, 0, MPI_COMM_WORLD);
    return rc;
}

/* Every rank's outcomes are the same bits as rank 0's. */
static void check_same_everywhere(const outcome_t *mine, int64_t nrhs, const char *what)
{
    outcome_t *root = malloc((size_t)nrhs * sizeof(outcome_t));
    memcpy(root, mine, (size_t)nrhs * sizeof(outcome_t));
    MPI_Bcast(root, (int)(nrhs * (int64_t)sizeof(outcome_t)), MPI_BYTE, 0, MPI_COMM_WORLD);
    int same = memcmp(root, mine, (size_t)nrhs * sizeof(outcome_t)) == 0, all = 0;
    MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    CHECK_MSG(all, "%s: the ranks' results differ", what);
    free(root);
}

/*
 * Solve on the spread matrix and compare with the single-process solve: status, iterations
 * (exactly, or within iter_slack of the reference's for an ill-conditioned matrix, whose count
 * moves with the order of the sums), residual norm within res_tol relative, the true residual.
 */
static void compare(const kd_csr_t *A, kd_dtype_t dtype, const char *method, const char *precond,
                    int64_t nrhs, int with_x0, double iter_slack, const char *what)
{
    kd_err_t err = {0};
    const int64_t n = A->rows;
    kd_solve_params_t params;
    kd_solve_params_default(&params);
    REQUIRE(kd_method_choose(method, precond, &params.method, &params.precond, &err) == KD_OK);
    params.rtol = dtype == KD_DTYPE_F64 ? 1e-8 : 1e-5;
    params.record_history = 1;
    /* where the histories are compared (no slack), a check (and a history entry) after every
     * iteration on both sides: by default each path checks at its own cadence (the small-system
     * path every 128 iterations, the spread solve every few), and the histories would differ in
     * length, not in what they say. (With slack, near float32's reach, the default cadence: how
     * often b - A x refutes a claim moves the restarts and the stagnation stop.) */
    params.check_every = iter_slack == 0.0 ? 1 : 0;
    if (iter_slack > 0.0 && dtype == KD_DTYPE_F32)
        params.rtol = 1e-6; /* near float32's reach: the recurrence drifts, restarts follow */
    double *b = malloc((size_t)(n * nrhs) * 8), *x0 = malloc((size_t)(n * nrhs) * 8);
    for (int64_t i = 0; i < n * nrhs; i++) {
        const double v = kd_test_rand_double(-1.0, 1.0), w = kd_test_rand_double(-0.1, 0.1);
        b[i] = dtype == KD_DTYPE_F32 ? (double)(float)v : v;
        x0[i] = dtype == KD_DTYPE_F32 ? (double)(float)w : w;
    }
    outcome_t *ref = calloc((size_t)nrhs, sizeof(outcome_t));
    outcome_t *got = calloc((size_t)nrhs, sizeof(outcome_t));
    char message[KD_ERR_MESSAGE_MAX];
    REQUIRE(reference(A, dtype, nrhs, b, with_x0 ? x0 : NULL, &params, ref, message) == KD_OK);
    kd_dist_matrix_t *m = kd_dist_test_spread(A, dtype, NULL);
    REQUIRE(m != NULL);
    void *bl = local_rows(m, b, nrhs, dtype), *x0l = local_rows(m, x0, nrhs, dtype);
    void *xl = malloc((size_t)(m->rows * nrhs) * 8 + 8);
    kd_solve_result_t *res = calloc((size_t)nrhs, sizeof(*res));
    int rc = kd_dist_solve(m, nrhs, bl, with_x0 ? x0l : NULL, xl, &params, res, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", what, err.message);
    for (int64_t j = 0; j < nrhs; j++) {
        got[j] = outcome_of(&res[j], res[j].status);
        CHECK_MSG(got[j].status == ref[j].status, "%s col %lld: status %s, single %s", what,
                  (long long)j, kd_solve_status_name((kd_solve_status_t)got[j].status),
                  kd_solve_status_name((kd_solve_status_t)ref[j].status));
        /* A stagnated solve stopped where b - A x refuted its claims three times running, which
         * moves with every rounding (CI saw 3348 spread against 1662 single on 494_bus float32):
         * its count is not comparable, the accuracy it reached is */
        /* In float32 the spread solve's sums, folded in another order (solver/methods/
         * krylov_combine.c), round differently, and a column whose r'r lands within rounding of
         * the threshold stops one iteration earlier or later (seed 1795948780970298700: spd pcg
         * k=3 col 1, 10 against 11, on one rank) */
        const long long slack = (long long)ceil(iter_slack * (double)ref[j].iterations) +
                                (dtype == KD_DTYPE_F32 ? 1 : 0);
        if (ref[j].status != KD_SOLVE_STAGNATED)
            CHECK_MSG(llabs(got[j].iterations - ref[j].iterations) <= slack,
                      "%s col %lld: %lld iterations, single %lld", what, (long long)j,
                      (long long)got[j].iterations, (long long)ref[j].iterations);
        if (ref[j].status == KD_SOLVE_STAGNATED)
            CHECK_MSG(got[j].residual <= 10.0 * ref[j].residual &&
                          ref[j].residual <= 10.0 * got[j].residual,
                      "%s col %lld: stagnated at ||r|| %.3g, single %.3g", what, (long long)j,
                      got[j].residual, ref[j].residual);
        CHECK_NEAR(got[j].b_norm, ref[j].b_norm, 1e-12);
        /* The final ||b - A x|| of two runs whose sums differ in order: the same to a few
         * digits where the iterations agree, up to the rounding of x that A's conditioning
         * amplifies (494_bus: about 1e6 eps, relative to ||b||). */
        const double amplified = iter_slack > 0.0 ? 1e-8 : 1e-14;
        /* The residual history, check by check: the recurrence's r'r to rounding (in the last
         * entries, where a column frozen early would show a wrong one), on well-conditioned
         * matrices where the counts agree. */
        if (got[j].iterations == ref[j].iterations && iter_slack == 0.0) {
            CHECK_EQ_INT(got[j].history_len, ref[j].history_len);
            for (int64_t h = 0; h < got[j].history_len && h < KD_HISTORY_KEPT; h++)
                CHECK_MSG(fabs(got[j].history[h] - ref[j].history[h]) <=
                              (dtype == KD_DTYPE_F64 ? 1e-6 : 5e-2) * ref[j].history[h] +
                                  1e-14 * ref[j].b_norm,
                          "%s col %lld: history[-%lld] %.17g, single %.17g", what, (long long)j,
                          (long long)h, got[j].history[h], ref[j].history[h]);
        }
        /* (not float32 on 494_bus: there the device's float32 b - A x is rounding noise of
         * ||A|| ||x|| eps, and the true residual below is the measure) */
        const int noise = iter_slack > 0.0 && dtype == KD_DTYPE_F32;
        if (got[j].iterations == ref[j].iterations && ref[j].status == KD_SOLVE_CONVERGED && !noise)
            CHECK_MSG(fabs(got[j].residual - ref[j].residual) <=
                          (dtype == KD_DTYPE_F64 ? 1e-4 : 0.2) * ref[j].residual +
                              amplified * ref[j].b_norm,
                      "%s col %lld: ||r|| %.17g, single %.17g", what, (long long)j, got[j].residual,
                      ref[j].residual);
    }
    check_same_everywhere(got, nrhs, what);
    last_restarts[0] = got[0].restarts;
    last_restarts[1] = ref[0].restarts;
    last_stagnated = ref[0].status == KD_SOLVE_STAGNATED;
    /* the true residual of the gathered x, on the host */
    double *x = rank() == 0 ? malloc((size_t)(n * nrhs) * 8 + 8) : NULL;
    void *xc = rank() == 0 ? malloc((size_t)n * 8 + 8) : NULL;
    for (int64_t j = 0; j < nrhs; j++) {
        REQUIRE(kd_dist_gather_rows(&kd_dist_test_comm, 0, &m->block,
                                    (char *)xl + (size_t)(j * m->rows) * kd_dtype_size(dtype), xc,
                                    &err) == KD_OK);
        if (rank() != 0)
            continue;
        double *r = malloc((size_t)n * 8 + 8), rr = 0.0, bb = 0.0;
        for (int64_t i = 0; i < n; i++) {
            x[j * n + i] = kd_load_real(xc, dtype, (size_t)i);
            r[i] = b[j * n + i];
        }
        kd_csr_t *Ad = NULL;
        REQUIRE(kd_csr_convert(A, dtype, &Ad, &err) == KD_OK);
        kd_csr_spmv_ref(Ad, x + j * n, -1.0, 1.0, r);
        kd_csr_free(Ad);
        for (int64_t i = 0; i < n; i++) {
            rr += r[i] * r[i];
            bb += b[j * n + i] * b[j * n + i];
        }
        const double relres = sqrt(rr) / sqrt(bb);
        if (got[j].status == KD_SOLVE_CONVERGED)
            CHECK_MSG(relres <= params.rtol * (dtype == KD_DTYPE_F64 ? 1.01 : 3.0),
                      "%s col %lld: true relative residual %g > rtol %g", what, (long long)j,
                      relres, params.rtol);
        if (!(iter_slack > 0.0 && dtype == KD_DTYPE_F32))
            CHECK_NEAR(sqrt(rr), got[j].residual, dtype == KD_DTYPE_F64 ? 1e-6 : 1e-2);
        free(r);
    }
    if (rank() == 0)
        fprintf(stderr,
                "   %s: %s, %lld iterations (single %lld), ||r|| %.3g (single %.3g), restarts "
                "%lld (single %lld)\n",
                what, kd_solve_status_name((kd_solve_status_t)got[0].status),
                (long long)got[0].iterations, (long long)ref[0].iterations, got[0].residual,
                ref[0].residual, (long long)got[0].restarts, (long long)ref[0].restarts);
    for (int64_t j = 0; j < nrhs; j++)
        kd_solve_result_free(&res[j]);
    free(res);
    free(x);
    free(xc);
    free(bl);
    free(x0l);
    free(xl);
    free(b);
    free(x0);
    free(ref);
    free(got);
    kd_dist_matrix_free(m);
}

static void test_generated(void)
{
    kd_dtype_t dtypes[2];
    const int ndt = kd_test_dtypes(kd_dist_test_ocl, dtypes);
    kd_csr_t *spd = kd_dist_test_shape(KD_DIST_SHAPE_SPD, 1500, 4);
    kd_csr_t *lap = kd_test_laplacian_2d(24, 30);
    for (int d = 0; d < ndt; d++) {
        const char *dt = kd_dtype_name(dtypes[d]);
        char what[96];
        const char *methods[][2] = {{"cg", NULL}, {"pcg", NULL}, {"sd", NULL}, {"cg1", NULL}};
        for (size_t i = 0; i < 4; i++) {
            snprintf(what, sizeof(what), "spd %s %s k=1", methods[i][0], dt);
            compare(spd, dtypes[d], methods[i][0], methods[i][1], 1, 0, 0.0, what);
        }
        snprintf(what, sizeof(what), "spd pcg %s k=3 x0", dt);
        compare(spd, dtypes[d], "pcg", NULL, 3, 1, 0.0, what);
        snprintf(what, sizeof(what), "laplacian cg %s k=3 x0", dt);
        compare(lap, dtypes[d], "cg", NULL, 3, 1, dtypes[d] == KD_DTYPE_F32 ? 0.03 : 0.0, what);
        /* cg1's one reduction carries the next iteration's r'r: a check combines it first */
        snprintf(what, sizeof(what), "laplacian cg1 jacobi %s k=3 x0", dt);
        compare(lap, dtypes[d], "cg1", "jacobi", 3, 1, dtypes[d] == KD_DTYPE_F32 ? 0.03 : 0.0,
                what);
        snprintf(what, sizeof(what), "laplacian pcg %s k=1", dt);
        compare(lap, dtypes[d], "cg", "jacobi", 1, 0, dtypes[d] == KD_DTYPE_F32 ? 0.03 : 0.0, what);
    }
    kd_csr_free(spd);
    kd_csr_free(lap);
}

/* 494_bus is ill-conditioned: CG's count moves with the order of the sums alone (3%). */
static void test_494_bus(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    compare(A, KD_DTYPE_F64, "cg", NULL, 1, 0, 0.03, "494_bus cg float64");
    compare(A, KD_DTYPE_F64, "pcg", NULL, 3, 1, 0.03, "494_bus pcg float64 k=3 x0");
    compare(A, KD_DTYPE_F64, "cg1", "jacobi", 2, 1, 0.03, "494_bus cg1 jacobi float64 k=2 x0");
    /* float32 to rtol 1e-6: confirmations fail and columns restart while others run (the
     * restarts' residual recomputations combine only the restarted columns' sums) */
    compare(A, KD_DTYPE_F32, "pcg", NULL, 3, 1, 0.05, "494_bus pcg float32 k=3 x0 (restarts)");
    CHECK(last_restarts[0] > 0 && last_restarts[1] > 0);
    /* (a stagnated column restarts as often as its run is long, which rounding moves: CI saw
     * 10 restarts in 3336 iterations spread against 5 in 1756 single) */
    if (!last_stagnated)
        CHECK_MSG(llabs(last_restarts[0] - last_restarts[1]) <= 3, "restarts %lld, single %lld",
                  (long long)last_restarts[0], (long long)last_restarts[1]);
    kd_csr_free(A);
}

/* 1 and 2 rows over the job: ranks without rows take part with zeros. */
static void test_tiny(void)
{
    for (int64_t n = 1; n <= 2; n++) {
        kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_SPD, n, 9);
        char what[64];
        snprintf(what, sizeof(what), "spd n=%lld cg", (long long)n);
        compare(A, KD_DTYPE_F64, "cg", NULL, 2, 1, 0.0, what);
        snprintf(what, sizeof(what), "spd n=%lld pcg", (long long)n);
        compare(A, KD_DTYPE_F64, "pcg", NULL, 1, 0, 0.0, what);
        snprintf(what, sizeof(what), "spd n=%lld cg1", (long long)n);
        compare(A, KD_DTYPE_F64, "cg1", NULL, 1, 1, 0.0, what);
        kd_csr_free(A);
    }
}

/* b = 0 and NaN in b are answered on the host, with the whole vector's row numbers. */
static void test_host_answers(void)
{
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_SPD, 40, 2);
    kd_dist_matrix_t *m = kd_dist_test_spread(A, KD_DTYPE_F64, NULL);
    REQUIRE(m != NULL);
    double b[3 * 40];
    for (int i = 0; i < 3 * 40; i++)
        b[i] = i < 40 ? 1.0 : i < 80 ? 0.0 : 0.5;
    b[80 + 37] = NAN;
    void *bl = local_rows(m, b, 3, KD_DTYPE_F64), *xl = malloc((size_t)(m->rows * 3) * 8 + 8);
    kd_solve_params_t params;
    kd_solve_params_default(&params);
    params.record_history = 1;
    kd_solve_result_t res[3];
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_dist_solve(m, 3, bl, NULL, xl, &params, res, &err), KD_OK);
    CHECK_EQ_INT(res[0].status, KD_SOLVE_CONVERGED);
    CHECK(res[0].iterations > 0 && res[0].history_len > 1);
    CHECK_EQ_INT(res[1].status, KD_SOLVE_CONVERGED);
    CHECK_EQ_INT(res[1].iterations, 0);
    CHECK_EQ_INT(res[2].status, KD_SOLVE_NON_FINITE);
    CHECK_STR_CONTAINS(res[2].message, "b[37] = nan");
    for (int64_t i = 0; i < m->rows; i++)
        CHECK(((double *)xl)[m->rows + i] == 0.0);
    for (int j = 0; j < 3; j++)
        kd_solve_result_free(&res[j]);
    free(bl);
    free(xl);
    kd_dist_matrix_free(m);
    kd_csr_free(A);
}

static atomic_int cancel_flag;

static int cancel_at_8(void *ctx, int64_t rhs, int64_t iteration, double residual_norm)
{
    (void)ctx;
    (void)rhs;
    (void)residual_norm;
    if (iteration >= 8)
        atomic_store(&cancel_flag, 1);
    return 0;
}

/* Cancel seen on rank 0 only, a deadline passed on the last rank only: every rank stops with
 * the same code at the same iteration. */
static void test_stops(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    kd_dist_matrix_t *m = kd_dist_test_spread(A, KD_DTYPE_F64, NULL);
    REQUIRE(m != NULL);
    double *b = malloc(494 * 8);
    for (int i = 0; i < 494; i++)
        b[i] = 1.0;
    void *bl = local_rows(m, b, 1, KD_DTYPE_F64), *xl = malloc((size_t)m->rows * 8 + 8);
    for (int which = 0; which < 2; which++) {
        kd_solve_params_t params;
        kd_solve_params_default(&params);
        params.check_every = 4;
        atomic_store(&cancel_flag, 0);
        if (which == 0 && rank() == 0) {
            params.progress = cancel_at_8;
            params.cancel = &cancel_flag;
        }
        if (which == 1 && rank() == kd_dist_test_comm.size - 1)
            params.deadline_ns = 1;
        kd_solve_result_t res;
        kd_err_t err = {0};
        int rc = kd_dist_solve(m, 1, bl, NULL, xl, &params, &res, &err);
        CHECK_EQ_INT(rc, which == 0 ? KD_ECANCELLED : KD_ETIMEOUT);
        CHECK_STR_CONTAINS(err.message, which == 0 ? "cancelled" : "deadline");
        CHECK_EQ_INT(res.status, KD_SOLVE_MAX_ITERATIONS);
        CHECK(res.iterations < 200);
        if (which == 0)
            CHECK(res.iterations >= 8);
        outcome_t o = outcome_of(&res, rc);
        check_same_everywhere(&o, 1, which == 0 ? "cancel" : "deadline");
        kd_solve_result_free(&res);
    }
    free(b);
    free(bl);
    free(xl);
    kd_dist_matrix_free(m);
    kd_csr_free(A);
}

/* Refusals: on every rank, in the single-process solve's words. */
static void test_refusals(void)
{
    kd_csr_t *asym = kd_dist_test_shape(KD_DIST_SHAPE_DENSE_CROSS, 30, 3);
    kd_csr_t *zero = kd_dist_test_shape(KD_DIST_SHAPE_SPD, 30, 3);
    for (int64_t e = zero->indptr[21]; e < zero->indptr[22]; e++)
        if (zero->indices[e] == 21)
            ((double *)zero->values)[e] = 0.0;
    const struct {
        const kd_csr_t *A;
        const char *method;
        int code;
        const char *says;
    } cases[] = {{asym, "cg", KD_EBADREQ, "needs a symmetric matrix"},
                 {zero, "pcg", KD_EBADREQ, "row 21"},
                 {zero, "gmres", KD_EBADREQ, "does not run on a matrix spread"},
                 {zero, "bicgstab", KD_EBADREQ, "does not run on a matrix spread"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_dist_matrix_t *m = kd_dist_test_spread(cases[i].A, KD_DTYPE_F64, NULL);
        REQUIRE(m != NULL);
        double b[30];
        for (int k = 0; k < 30; k++)
            b[k] = 1.0;
        void *bl = local_rows(m, b, 1, KD_DTYPE_F64), *xl = malloc((size_t)m->rows * 8 + 8);
        kd_solve_params_t params;
        kd_solve_params_default(&params);
        kd_err_t err = {0};
        REQUIRE(kd_method_choose(cases[i].method, NULL, &params.method, &params.precond, &err) ==
                KD_OK);
        kd_solve_result_t res;
        CHECK_EQ_INT(kd_dist_solve(m, 1, bl, NULL, xl, &params, &res, &err), cases[i].code);
        CHECK_STR_CONTAINS(err.message, cases[i].says);
        if (i == 0) { /* as on one process, word for word */
            outcome_t o;
            char single[KD_ERR_MESSAGE_MAX];
            CHECK_EQ_INT(reference(cases[i].A, KD_DTYPE_F64, 1, b, NULL, &params, &o, single),
                         KD_EBADREQ);
            CHECK_MSG(strcmp(single, err.message) == 0, "\"%s\" vs \"%s\"", err.message, single);
        }
        free(bl);
        free(xl);
        kd_dist_matrix_free(m);
    }
    kd_csr_free(asym);
    kd_csr_free(zero);
}

int main(int argc, char **argv)
{
    if (kd_dist_test_init(&argc, &argv) != 0)
        return 1;
    RUN(test_generated);
    RUN(test_494_bus);
    RUN(test_tiny);
    RUN(test_host_answers);
    RUN(test_stops);
    RUN(test_refusals);
    return kd_dist_test_finish();
}
