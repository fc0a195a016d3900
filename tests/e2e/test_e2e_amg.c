/*
 * preconditioner "amg" end to end: a real krylovd on loopback, driven through libkrylov. AMG-PCG
 * converges on a 2-D Laplacian and on 494_bus (the true residual ||b - A x|| computed here) in far
 * fewer iterations than Jacobi-PCG; the hierarchy is built once and lives with the matrix (its
 * device bytes in matrix.info); options reach the setup (an unknown one, a bad value and an
 * unknown preconditioner are clear errors naming what is known); a zero diagonal and a
 * nonsymmetric matrix are refused with the reason; several right-hand sides; after a restart the
 * hierarchy is built again from the state file; without --state-dir from the host copy. The
 * daemons must exit cleanly.
 */
#include "common/csr.h"
#include "kd_daemon_client.h"
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "krylov.h"

static kd_daemon_t daemon_;
static krylov_client_t *client;

static kd_csr_t *laplacian_2d(int64_t g, int64_t bad_row, int symmetric)
{
    const int64_t n = g * g;
    int64_t cap = 5 * n, k = 0;
    int64_t *r = malloc((size_t)cap * sizeof(int64_t)), *c = malloc((size_t)cap * sizeof(int64_t));
    double *v = malloc((size_t)cap * sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        const int64_t x = i % g, y = i / g;
        const int64_t nb[4] = {x > 0 ? i - 1 : -1, x + 1 < g ? i + 1 : -1, y > 0 ? i - g : -1,
                               y + 1 < g ? i + g : -1};
        r[k] = i, c[k] = i, v[k++] = i == bad_row ? 0.0 : 4.0;
        for (int j = 0; j < 4; j++)
            if (nb[j] >= 0)
                r[k] = i, c[k] = nb[j], v[k++] = !symmetric && i == 3 && j == 1 ? -0.5 : -1.0;
    }
    kd_csr_t *A = NULL;
    kd_err_t err = {0};
    if (kd_csr_from_coo_arrays(n, n, k, r, c, KD_DTYPE_I64, v, KD_DTYPE_F64, KD_DTYPE_F64, NULL, &A,
                               &err) != KD_OK)
        fprintf(stderr, "%s\n", err.message);
    free(r);
    free(c);
    free(v);
    return A;
}

static int put(krylov_client_t *c, const kd_csr_t *A, krylov_matrix_info_t *info)
{
    return krylov_put_csr(c, A->rows, A->cols, A->indptr, A->indices, A->values, NULL, info);
}

/* ||b - A x|| / ||b|| here. */
static double true_relres(const kd_csr_t *A, const double *b, const double *x)
{
    double *r = malloc((size_t)A->rows * sizeof(double));
    memcpy(r, b, (size_t)A->rows * sizeof(double));
    kd_csr_spmv_ref(A, x, -1.0, 1.0, r);
    double rr = 0, bb = 0;
    for (int64_t i = 0; i < A->rows; i++)
        rr += r[i] * r[i], bb += b[i] * b[i];
    free(r);
    return sqrt(rr / bb);
}

/* One solve; returns the iterations (-1 on an error, whose code is in *code). */
static int64_t solve(krylov_client_t *c, const char *id, const kd_csr_t *A, const char *method,
                     const char *precond, const char *options, int64_t nrhs, const double *b,
                     double *x, int *code)
{
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.method = method;
    opt.preconditioner = precond;
    opt.preconditioner_options = options;
    opt.nrhs = nrhs;
    krylov_solve_result_t res[4];
    *code = krylov_solve(c, id, b, A->rows, &opt, x, res);
    if (*code != KRYLOV_OK)
        return -1;
    int64_t its = res[0].iterations;
    for (int64_t k = 0; k < nrhs; k++) {
        CHECK_MSG(strcmp(res[k].status, "converged") == 0, "%s: %s", res[k].status, res[k].message);
        const double rel = true_relres(A, b + k * A->rows, x + k * A->rows);
        CHECK_MSG(rel <= 1.5e-8, "column %lld: true relative residual %g", (long long)k, rel);
        krylov_solve_result_free(&res[k]);
    }
    return its;
}

static void test_converges(void)
{
    kd_csr_t *A = laplacian_2d(80, -1, 1), *bus = kd_test_load_mtx("494_bus.mtx", 0.0);
    const kd_csr_t *mats[2] = {A, bus};
    for (int m = 0; m < 2; m++) {
        const kd_csr_t *M = mats[m];
        krylov_matrix_info_t info, after;
        REQUIRE(put(client, M, &info) == KRYLOV_OK);
        double *b = malloc((size_t)M->rows * 3 * sizeof(double));
        double *x = malloc((size_t)M->rows * 3 * sizeof(double));
        for (int64_t i = 0; i < M->rows * 3; i++)
            b[i] = kd_test_rand_double(-1.0, 1.0);
        int code;
        const int64_t jac = solve(client, info.id, M, "pcg", NULL, NULL, 1, b, x, &code);
        const int64_t amg = solve(client, info.id, M, "cg", "amg", NULL, 1, b, x, &code);
        printf("%s: jacobi %lld its, amg %lld its\n", m == 0 ? "lap2d 80x80" : "494_bus",
               (long long)jac, (long long)amg);
        CHECK_MSG(amg > 0 && amg * 4 <= jac, "amg %lld, jacobi %lld", (long long)amg,
                  (long long)jac);
        /* kept with the matrix: counted in its device bytes, not built again */
        REQUIRE(krylov_info(client, info.id, &after) == KRYLOV_OK);
        CHECK(after.device_bytes > info.device_bytes);
        CHECK(solve(client, info.id, M, "pcg", "amg", NULL, 3, b, x, &code) > 0);
        CHECK_MSG(code == KRYLOV_OK, "%s", krylov_error_message(client));
        krylov_matrix_info_t again;
        REQUIRE(krylov_info(client, info.id, &again) == KRYLOV_OK);
        CHECK(again.device_bytes == after.device_bytes);
        free(b);
        free(x);
    }
    kd_csr_free(A);
    kd_csr_free(bus);
}

static void test_options_and_refusals(void)
{
    kd_csr_t *A = laplacian_2d(40, -1, 1);
    krylov_matrix_info_t info;
    REQUIRE(put(client, A, &info) == KRYLOV_OK);
    double *b = malloc((size_t)A->rows * sizeof(double)), *x = malloc((size_t)A->rows * 8);
    for (int64_t i = 0; i < A->rows; i++)
        b[i] = 1.0;
    int code;
    CHECK(solve(client, info.id, A, "cg", "amg", "threshold=0.05,degree=3", 1, b, x, &code) > 0);
    CHECK(solve(client, info.id, A, "cg", "amg", "smoother=2", 1, b, x, &code) < 0);
    CHECK_EQ_INT(code, KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "no option 'smoother' (threshold");
    CHECK(solve(client, info.id, A, "cg", "amg", "max_levels=0", 1, b, x, &code) < 0);
    CHECK_STR_CONTAINS(krylov_error_message(client), "max_levels = 0");
    CHECK(solve(client, info.id, A, "cg", "amg", "threshold", 1, b, x, &code) < 0);
    CHECK_EQ_INT(code, KRYLOV_EBADREQ); /* refused by the client before sending */
    CHECK(solve(client, info.id, A, "cg", "ilut", NULL, 1, b, x, &code) < 0);
    CHECK_EQ_INT(code, KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "none, jacobi, amg");
    CHECK(solve(client, info.id, A, "sd", "amg", NULL, 1, b, x, &code) < 0);
    CHECK_EQ_INT(code, KRYLOV_EBADREQ);
    /* a zero diagonal, a nonsymmetric matrix */
    kd_csr_t *Z = laplacian_2d(20, 17, 1), *N = laplacian_2d(20, -1, 0);
    krylov_matrix_info_t zi, ni;
    REQUIRE(put(client, Z, &zi) == KRYLOV_OK);
    REQUIRE(put(client, N, &ni) == KRYLOV_OK);
    CHECK(solve(client, zi.id, Z, "cg", "amg", NULL, 1, b, x, &code) < 0);
    CHECK_EQ_INT(code, KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "row 17");
    CHECK(solve(client, ni.id, N, "cg", "amg", NULL, 1, b, x, &code) < 0);
    CHECK_EQ_INT(code, KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "symmetric");
    /* and the server goes on */
    CHECK(solve(client, info.id, A, "cg", "amg", NULL, 1, b, x, &code) > 0);
    free(b);
    free(x);
    kd_csr_free(A);
    kd_csr_free(Z);
    kd_csr_free(N);
}

/* History and progress work as for any solve: with checks every iteration, a residual for each
 * (decreasing to the tolerance), and progress notifications reach the callback. */
static void on_progress(void *ctx, int64_t rhs, int64_t iteration, double residual)
{
    (void)rhs;
    (void)iteration;
    (void)residual;
    (*(int *)ctx)++;
}

static void test_history_and_progress(void)
{
    kd_csr_t *A = laplacian_2d(60, -1, 1);
    krylov_matrix_info_t info;
    REQUIRE(put(client, A, &info) == KRYLOV_OK);
    double *b = malloc((size_t)A->rows * sizeof(double)), *x = malloc((size_t)A->rows * 8);
    for (int64_t i = 0; i < A->rows; i++)
        b[i] = 1.0;
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.preconditioner = "amg";
    opt.history = 1;
    int calls = 0;
    opt.progress = on_progress;
    opt.progress_ctx = &calls;
    krylov_solve_result_t res;
    REQUIRE(krylov_solve(client, info.id, b, A->rows, &opt, x, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "converged") == 0);
    CHECK_MSG(res.history_len >= res.iterations && res.history_len > 2, "%lld residuals, %lld its",
              (long long)res.history_len, (long long)res.iterations);
    CHECK(res.history_len > 0 && res.history[res.history_len - 1] < 1e-6 * res.history[0]);
    CHECK(calls >= 1);
    krylov_solve_result_free(&res);
    free(b);
    free(x);
    kd_csr_free(A);
}

/* After a crash the hierarchy is built again from the state file; without --state-dir from the
 * store's host copy. */
static void test_restart_and_no_state_dir(void)
{
    kd_csr_t *A = laplacian_2d(50, -1, 1);
    krylov_matrix_info_t info;
    REQUIRE(put(client, A, &info) == KRYLOV_OK);
    double *b = malloc((size_t)A->rows * sizeof(double)), *x = malloc((size_t)A->rows * 8);
    for (int64_t i = 0; i < A->rows; i++)
        b[i] = kd_test_rand_double(-1.0, 1.0);
    int code;
    const int64_t before = solve(client, info.id, A, "cg", "amg", NULL, 1, b, x, &code);
    krylov_client_free(client);
    kd_daemon_kill(&daemon_);
    REQUIRE(kd_daemon_restart(&daemon_, NULL) == 0);
    client = krylov_client_new();
    REQUIRE(krylov_connect(client, daemon_.address) == KRYLOV_OK);
    CHECK_EQ_INT(solve(client, info.id, A, "cg", "amg", NULL, 1, b, x, &code), before);

    static const char *const args[] = {"--state-dir", "", NULL};
    kd_daemon_t d;
    REQUIRE(kd_daemon_start(&d, args) == 0);
    krylov_client_t *c = krylov_client_new();
    REQUIRE(krylov_connect(c, d.address) == KRYLOV_OK);
    REQUIRE(put(c, A, &info) == KRYLOV_OK);
    CHECK_EQ_INT(solve(c, info.id, A, "cg", "amg", NULL, 1, b, x, &code), before);
    krylov_client_free(c);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    free(b);
    free(x);
    kd_csr_free(A);
}

int main(void)
{
    kd_test_seed();
    if ((client = kd_daemon_start_client(&daemon_)) == NULL)
        return 1;
    RUN(test_converges);
    RUN(test_options_and_refusals);
    RUN(test_history_and_progress);
    RUN(test_restart_and_no_state_dir);
    krylov_client_free(client);
    CHECK_EQ_INT(kd_daemon_stop(&daemon_), 0);
    return kd_test_finish();
}
