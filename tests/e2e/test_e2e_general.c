/*
 * General systems end to end: a real krylovd on loopback, driven through libkrylov. matrix.put and
 * matrix.info say `symmetric` as the host finds it here (pattern and values, exactly) for the real
 * nonsymmetric watt_2, ani4 (symmetric to rounding: reported symmetric) and the symmetric 494_bus; cg, pcg,
 * sd and cg1 on watt_2 are BAD_REQUEST naming an entry (checked against the file: a_ij as said,
 * a_ji different) and listing only methods that do not need symmetry, and the server keeps
 * serving (spmv on the same matrix, a solve on another); method "auto" on 494_bus runs cg (the
 * reply says so) and never a symmetric-only method on watt_2; `restart` reaches the server and
 * is range-checked. After a restart the flag comes from the state file before the matrix is
 * loaded and from the reload's scan after it, and the refusal is the same.
 */
#include "common/csr.h"
#include "kd_daemon_client.h"
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "krylov.h"

#include <float.h>
#include <math.h>

static kd_daemon_t daemon_;
static krylov_client_t *client;
static const char *const symmetric_only[] = {"cg", "pcg", "sd", "cg1"};

typedef struct matrix {
    const char *file;
    kd_csr_t *A; /* the file as the server reads it */
    char id[33];
} matrix_t;

static matrix_t watt = {.file = "watt_2.mtx"}, bus = {.file = "494_bus.mtx"},
                ani = {.file = "ani4.mtx"};

/* a_ij of the host copy (0 when not stored), and whether it is stored. */
static double entry(const kd_csr_t *A, int64_t i, int64_t j, int *stored)
{
    *stored = 0;
    for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
        if (A->indices[k] == j) {
            *stored = 1;
            return kd_csr_value(A, k);
        }
    return 0.0;
}

/* Every stored a_ij has a stored, equal a_ji. */
/* The pattern exactly, the values to rounding (256 ulps of float64, as the server's scan). */
static int symmetric_to_rounding(const kd_csr_t *A)
{
    for (int64_t i = 0; i < A->rows; i++)
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
            int stored;
            const double m = entry(A, A->indices[k], i, &stored), a = kd_csr_value(A, k);
            if (!stored || fabs(m - a) > 256.0 * DBL_EPSILON * fmax(fabs(m), fabs(a)))
                return 0;
        }
    return A->rows == A->cols;
}

static void put(matrix_t *m)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", KD_TEST_MATRICES, m->file);
    m->A = kd_test_load_mtx(m->file, 0.0);
    REQUIRE(m->A != NULL);
    krylov_matrix_info_t info;
    REQUIRE(krylov_put_file(client, path, NULL, &info) == KRYLOV_OK);
    snprintf(m->id, sizeof(m->id), "%s", info.id);
    CHECK_MSG(info.symmetric == symmetric_to_rounding(m->A), "%s: put says symmetric %d", m->file,
              info.symmetric);
}

static void check_info(const matrix_t *m, int want_resident)
{
    krylov_matrix_info_t info;
    REQUIRE(krylov_info(client, m->id, &info) == KRYLOV_OK);
    CHECK_MSG(info.symmetric == symmetric_to_rounding(m->A), "%s: info says symmetric %d", m->file,
              info.symmetric);
    if (want_resident >= 0)
        CHECK_EQ_INT(info.resident, want_resident);
}

static double *ones(int64_t n)
{
    double *v = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = 1.0;
    return v;
}

/* The refusal of `method` on watt_2: BAD_REQUEST naming an asymmetric entry of the file and only
 * methods that do not need symmetry. */
static void check_refusal(const char *method)
{
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.method = method;
    double *b = ones(watt.A->rows), *x = ones(watt.A->rows);
    krylov_solve_result_t res;
    CHECK_EQ_INT(krylov_solve(client, watt.id, b, watt.A->rows, &opt, x, &res), KRYLOV_EBADREQ);
    CHECK(strcmp(krylov_error_code(client), "BAD_REQUEST") == 0);
    const char *msg = krylov_error_message(client);
    char head[96];
    snprintf(head, sizeof(head), "method %s needs a symmetric matrix; this one is not (a[",
             strcmp(method, "pcg") == 0 ? "cg" : method);
    CHECK_STR_CONTAINS(msg, head);
    long long i = -1, j = -1, i2 = -1, j2 = -1;
    double v = 0, w = 0;
    const char *p = strstr(msg, "(a[");
    REQUIRE(p != NULL);
    int n = sscanf(p, "(a[%lld][%lld] = %lg but a[%lld][%lld] = %lg)", &i, &j, &v, &j2, &i2, &w);
    CHECK_MSG(n == 6 || (n == 5 && strstr(msg, "is not stored") != NULL), "%s", msg);
    CHECK(i2 == i && j2 == j);
    int stored_ij, stored_ji;
    const double a = entry(watt.A, i, j, &stored_ij), m = entry(watt.A, j, i, &stored_ji);
    CHECK_MSG(stored_ij && a == v, "a[%lld][%lld] is %g in the file", i, j, a);
    CHECK_MSG(n == 6 ? stored_ji && m == w && m != a : !stored_ji, "%s", msg);
    const char *use = strstr(msg, "): use ");
    if (use == NULL)
        CHECK_STR_CONTAINS(msg, "this server has no method for nonsymmetric matrices");
    /* "use gmres, bicgstab or minres": no name in it is a symmetric-only method */
    for (const char *q = use != NULL ? use + strlen("): use ") : NULL; q != NULL && *q != '\0';) {
        const size_t len = strcspn(q, ", ");
        for (size_t s = 0; s < sizeof(symmetric_only) / sizeof(symmetric_only[0]); s++)
            CHECK_MSG(strlen(symmetric_only[s]) != len || strncmp(q, symmetric_only[s], len) != 0,
                      "lists %s: %s", symmetric_only[s], msg);
        q += len;
        q += strncmp(q, ", ", 2) == 0 ? 2 : strncmp(q, " or ", 4) == 0 ? 4 : strlen(q);
    }
    free(b);
    free(x);
}

static void test_flags_and_refusal(void)
{
    put(&watt);
    put(&bus);
    put(&ani);
    /* ani4 differs from its transpose by up to 7.8e-15 relative: symmetric to rounding */
    CHECK(!symmetric_to_rounding(watt.A) && symmetric_to_rounding(bus.A) &&
          symmetric_to_rounding(ani.A));
    check_info(&watt, 1);
    check_info(&bus, 1);
    check_info(&ani, 1);
    for (size_t s = 0; s < sizeof(symmetric_only) / sizeof(symmetric_only[0]); s++)
        check_refusal(symmetric_only[s]);

    /* still serving: spmv on the refused matrix, a solve on another */
    const int64_t n = watt.A->rows;
    double *x = malloc((size_t)n * sizeof(double)), *y = malloc((size_t)n * sizeof(double));
    double *ref = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        x[i] = kd_test_rand_double(-1, 1);
    REQUIRE(krylov_spmv(client, watt.id, 1.0, x, n, 0.0, y, n) == KRYLOV_OK);
    kd_csr_spmv_ref(watt.A, x, 1.0, 0.0, ref);
    double dmax = 0, s = 0;
    for (int64_t i = 0; i < n; i++)
        dmax = fmax(dmax, fabs(y[i] - ref[i])), s = fmax(s, fabs(ref[i]));
    CHECK(dmax <= 1e-12 * s);
    free(x);
    free(y);
    free(ref);
    krylov_server_status_t st;
    CHECK(krylov_status(client, &st) == KRYLOV_OK && st.matrices == 3);
}

static void test_auto_and_restart(void)
{
    const int64_t n = bus.A->rows;
    double *b = ones(n), *x = ones(n);
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.method = "auto";
    krylov_solve_result_t res;
    REQUIRE(krylov_solve(client, bus.id, b, n, &opt, x, &res) == KRYLOV_OK);
    CHECK(strcmp(res.method, "cg") == 0 && strcmp(res.preconditioner, "none") == 0);
    CHECK(strcmp(res.status, "converged") == 0);
    const int64_t auto_iterations = res.iterations;
    krylov_solve_result_free(&res);
    opt.method = "cg";
    REQUIRE(krylov_solve(client, bus.id, b, n, &opt, x, &res) == KRYLOV_OK);
    CHECK_EQ_INT(res.iterations, auto_iterations);
    krylov_solve_result_free(&res);
    opt.method = "auto";
    opt.preconditioner = "jacobi";
    REQUIRE(krylov_solve(client, bus.id, b, n, &opt, x, &res) == KRYLOV_OK);
    CHECK(strcmp(res.method, "cg") == 0 && strcmp(res.preconditioner, "jacobi") == 0);
    krylov_solve_result_free(&res);
    opt.preconditioner = NULL;

    /* auto on watt_2: a general method or a plain refusal, never a symmetric-only one */
    double *bw = ones(watt.A->rows), *xw = ones(watt.A->rows);
    opt.maxiter = 20;
    int rc = krylov_solve(client, watt.id, bw, watt.A->rows, &opt, xw, &res);
    if (rc == KRYLOV_OK) {
        for (size_t s = 0; s < sizeof(symmetric_only) / sizeof(symmetric_only[0]); s++)
            CHECK(strcmp(res.method, symmetric_only[s]) != 0);
        krylov_solve_result_free(&res);
    } else {
        CHECK_EQ_INT(rc, KRYLOV_EBADREQ);
        CHECK_STR_CONTAINS(krylov_error_message(client), "method auto: no method of this server");
        CHECK_STR_CONTAINS(krylov_error_message(client), "nonsymmetric");
    }
    free(bw);
    free(xw);

    /* restart reaches the server: 1..200 accepted (cg ignores it), beyond refused */
    opt.method = "cg";
    opt.maxiter = -1;
    opt.restart = 200;
    REQUIRE(krylov_solve(client, bus.id, b, n, &opt, x, &res) == KRYLOV_OK);
    CHECK_EQ_INT(res.iterations, auto_iterations);
    krylov_solve_result_free(&res);
    opt.restart = 201;
    CHECK_EQ_INT(krylov_solve(client, bus.id, b, n, &opt, x, &res), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "restart = 201");
    opt.restart = -3;
    CHECK_EQ_INT(krylov_solve(client, bus.id, b, n, &opt, x, &res), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "restart must be >= 0, got -3");
    free(b);
    free(x);
}

/* The flag survives a restart: from the state file before a reload, from the reload after. */
static void test_after_restart(void)
{
    krylov_client_free(client);
    client = NULL;
    CHECK_EQ_INT(kd_daemon_signal(&daemon_, SIGTERM), 0); /* keeps the state directory */
    REQUIRE(kd_daemon_restart(&daemon_, NULL) == 0);
    client = krylov_client_new();
    REQUIRE(krylov_connect(client, daemon_.address) == KRYLOV_OK);
    check_info(&watt, 0);
    check_info(&bus, 0);
    check_refusal("cg"); /* loads watt_2 again: the reload's scan */
    check_info(&watt, 1);
    const int64_t n = bus.A->rows;
    double *b = ones(n), *x = ones(n);
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.method = "auto";
    krylov_solve_result_t res;
    REQUIRE(krylov_solve(client, bus.id, b, n, &opt, x, &res) == KRYLOV_OK);
    CHECK(strcmp(res.method, "cg") == 0);
    krylov_solve_result_free(&res);
    check_info(&bus, 1);
    free(b);
    free(x);
}

int main(void)
{
    kd_test_seed();
    if ((client = kd_daemon_start_client(&daemon_)) == NULL)
        return 1;
    RUN(test_flags_and_refusal);
    RUN(test_auto_and_restart);
    RUN(test_after_restart);
    krylov_client_free(client);
    CHECK_EQ_INT(kd_daemon_stop(&daemon_), 0);
    kd_csr_free(watt.A);
    kd_csr_free(bus.A);
    kd_csr_free(ani.A);
    return kd_test_finish();
}
