/*
 * End to end: a real krylovd on loopback, driven through libkrylov. Every answer is checked
 * against an independent CPU computation on the same real Matrix Market files (read here with the
 * reader in protocol/mtx.c, multiplied with kd_csr_spmv_ref): uploads in three encodings give one
 * content id, SpMV agrees to 1e-12, CG meets rtol in the true residual, an indefinite matrix ends
 * in breakdown or max_iterations, and bad requests get the right error codes.
 */
#include "client/mtx_file.h"
#include "common/csr.h"
#include "kd_daemon_client.h"
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "krylov.h"
#include "protocol/mtx.h"

static kd_daemon_t daemon_;
static krylov_client_t *client;

static double *random_vector(int64_t n)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = kd_test_rand_double(-1.0, 1.0);
    return v;
}

static double norm2(const double *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

/* max_i |a_i - b_i| / max(1, max_i |b_i|) */
static double rel_diff(const double *a, const double *b, int64_t n)
{
    double d = 0, s = 1;
    for (int64_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        s = fmax(s, fabs(b[i]));
    }
    return d / s;
}

/* ||b - A x|| / ||b|| on the CPU */
static double true_relative_residual(const kd_csr_t *A, const double *b, const double *x)
{
    double *r = malloc((size_t)A->rows * sizeof(double));
    memcpy(r, b, (size_t)A->rows * sizeof(double));
    kd_csr_spmv_ref(A, x, -1.0, 1.0, r);
    double rel = norm2(r, A->rows) / norm2(b, A->rows);
    free(r);
    return rel;
}

static void test_status_of_fresh_server(void)
{
    krylov_server_status_t st;
    REQUIRE(krylov_status(client, &st) == KRYLOV_OK);
    CHECK(st.version[0] != '\0');
    CHECK(st.device[0] != '\0');
    CHECK_EQ_INT(st.matrices, 0);
    CHECK(st.global_mem_bytes > 0);
}

static void track_largest(void *ctx, uint64_t sent, uint64_t total)
{
    (void)sent;
    uint64_t *largest = ctx;
    if (total > *largest)
        *largest = total;
}

static void test_put_three_ways_same_id(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    REQUIRE(A != NULL);
    char path[512];
    snprintf(path, sizeof(path), "%s/494_bus.mtx", KD_TEST_MATRICES);
    krylov_matrix_info_t a, b, c, d;
    krylov_put_options_t opt = {.name = "494_bus"};
    REQUIRE(krylov_put_file(client, path, &opt, &a) == KRYLOV_OK);
    CHECK_EQ_INT(a.rows, 494);
    CHECK_EQ_INT(a.cols, 494);
    CHECK_EQ_INT(a.nnz, 1666);
    CHECK_EQ_INT(a.created, 1);
    CHECK(strcmp(a.dtype, "float64") == 0);
    CHECK(strcmp(a.name, "494_bus") == 0);
    CHECK(a.device_bytes >= 1666 * 12);
    CHECK_EQ_INT(strlen(a.id), 32);

    REQUIRE(krylov_put_file(client, path, NULL, &b) == KRYLOV_OK);
    CHECK(strcmp(a.id, b.id) == 0);
    CHECK_EQ_INT(b.created, 0);

    /* CSR arrays the server already holds are not sent: the id is computed here and asked for
     * (the largest request written is matrix.info's, not the matrix's 20 kB) */
    uint64_t largest = 0;
    krylov_set_send_progress(client, track_largest, &largest);
    REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL, &c) ==
            KRYLOV_OK);
    CHECK(strcmp(a.id, c.id) == 0);
    CHECK_EQ_INT(c.created, 0);
    CHECK_MSG(largest > 0 && largest < 1000, "largest request %llu bytes",
              (unsigned long long)largest);
    /* a name makes it a real put (the stored copy would not change, but the caller asked) */
    largest = 0;
    krylov_put_options_t named = {.name = "again"};
    REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, &named,
                           &c) == KRYLOV_OK);
    CHECK(largest > 1666 * 12);
    CHECK(strcmp(a.id, c.id) == 0);
    /* kept in float32: the local id converts the values as the server does */
    krylov_put_options_t f32 = {.dtype = "float32"};
    krylov_matrix_info_t e, f;
    const int put32 =
        krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, &f32, &e);
    CHECK_MSG(put32 == KRYLOV_OK, "float32 put: %s", krylov_error_message(client));
    if (put32 != KRYLOV_OK)
        return;
    largest = 0;
    REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, &f32, &f) ==
            KRYLOV_OK);
    CHECK(strcmp(e.id, f.id) == 0 && strcmp(e.id, a.id) != 0);
    CHECK_EQ_INT(f.created, 0);
    CHECK(largest < 1000);
    REQUIRE(krylov_drop(client, e.id) == KRYLOV_OK);
    krylov_set_send_progress(client, NULL, NULL);

    /* COO, shuffled */
    int64_t nnz = A->nnz;
    int32_t *row = malloc((size_t)nnz * 4), *col = malloc((size_t)nnz * 4);
    double *val = malloc((size_t)nnz * 8);
    for (int64_t r = 0; r < A->rows; r++)
        for (int32_t k = A->indptr[r]; k < A->indptr[r + 1]; k++) {
            row[k] = (int32_t)r;
            col[k] = A->indices[k];
            val[k] = kd_csr_value(A, k);
        }
    for (int64_t k = nnz - 1; k > 0; k--) {
        int64_t j = kd_test_rand_below(k + 1);
        int32_t tr = row[k], tc = col[k];
        double tv = val[k];
        row[k] = row[j], col[k] = col[j], val[k] = val[j];
        row[j] = tr, col[j] = tc, val[j] = tv;
    }
    REQUIRE(krylov_put_coo(client, A->rows, A->cols, nnz, row, col, val, NULL, &d) == KRYLOV_OK);
    CHECK(strcmp(a.id, d.id) == 0);
    free(row);
    free(col);
    free(val);

    krylov_server_status_t st;
    REQUIRE(krylov_status(client, &st) == KRYLOV_OK);
    CHECK_EQ_INT(st.matrices, 1);
    CHECK(st.device_bytes_used == a.device_bytes);
    kd_csr_free(A);
}

static void test_spmv_matches_reference(void)
{
    static const char *files[] = {
        "494_bus.mtx", "bayer10.mtx", "rajat01.mtx", "arrow.mtx", "Groebner_id2003_aug.mtx",
        "3by0.mtx"};
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        kd_csr_t *A = kd_test_load_mtx(files[f], 0.0);
        REQUIRE(A != NULL);
        krylov_matrix_info_t info;
        REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL,
                               &info) == KRYLOV_OK);
        double *x = random_vector(A->cols + 1); /* one spare for the wrong-length request */
        double *y = malloc((size_t)(A->rows + 1) * sizeof(double));
        double *ref = malloc((size_t)(A->rows + 1) * sizeof(double));
        for (int64_t i = 0; i < A->rows; i++)
            y[i] = NAN;
        REQUIRE(krylov_spmv(client, info.id, 1.0, x, A->cols, 0.0, y, A->rows) == KRYLOV_OK);
        kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
        CHECK_MSG(rel_diff(y, ref, A->rows) <= 1e-12, "%s: %g", files[f],
                  rel_diff(y, ref, A->rows));

        /* y = 2 A x - 0.5 y */
        double *y0 = random_vector(A->rows);
        memcpy(y, y0, (size_t)A->rows * sizeof(double));
        memcpy(ref, y0, (size_t)A->rows * sizeof(double));
        REQUIRE(krylov_spmv(client, info.id, 2.0, x, A->cols, -0.5, y, A->rows) == KRYLOV_OK);
        kd_csr_spmv_ref(A, x, 2.0, -0.5, ref);
        CHECK_MSG(rel_diff(y, ref, A->rows) <= 1e-12, "%s alpha/beta", files[f]);

        /* x of the wrong length */
        CHECK_EQ_INT(krylov_spmv(client, info.id, 1.0, x, A->cols + 1, 0.0, y, A->rows),
                     KRYLOV_EBADREQ);
        CHECK_STR_CONTAINS(krylov_error_message(client), "x has");

        /* Y = 1.5 A X - Y for 5 columns at once (ncols), column by column on the CPU */
        const int64_t k = 5;
        double *X = random_vector(A->cols * k), *Y = random_vector(A->rows * k);
        double *R = malloc((size_t)(A->rows * k + 1) * sizeof(double));
        memcpy(R, Y, (size_t)(A->rows * k) * sizeof(double));
        REQUIRE(krylov_spmm(client, info.id, k, 1.5, X, A->cols, -1.0, Y, A->rows, NULL) ==
                KRYLOV_OK);
        for (int64_t c = 0; c < k; c++) {
            kd_csr_spmv_ref(A, X + c * A->cols, 1.5, -1.0, R + c * A->rows);
            CHECK_MSG(rel_diff(Y + c * A->rows, R + c * A->rows, A->rows) <= 1e-12,
                      "%s spmm column %lld", files[f], (long long)c);
        }
        free(X);
        free(Y);
        free(R);
        free(x);
        free(y);
        free(y0);
        free(ref);
        kd_csr_free(A);
    }
}

static void test_cg_and_sd_converge(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    REQUIRE(A != NULL);
    krylov_matrix_info_t info;
    REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL,
                           &info) == KRYLOV_OK);
    double *b = random_vector(A->rows);
    double *x = malloc((size_t)A->rows * sizeof(double));
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.rtol = 1e-8;
    opt.history = 1;
    krylov_solve_result_t res;
    REQUIRE(krylov_solve(client, info.id, b, A->rows, &opt, x, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "converged") == 0);
    CHECK(res.iterations > 0);
    double rel = true_relative_residual(A, b, x);
    CHECK_MSG(rel <= 1e-8, "CG true relative residual %g", rel);
    CHECK_NEAR(res.relative_residual, rel, 1e-3);
    CHECK(res.history_len >= 2);
    if (res.history_len >= 2)
        CHECK(res.history[res.history_len - 1] < res.history[0]);
    krylov_solve_result_free(&res);

    /* dwt_878 is a pattern file: with its values read as 1.0 it is indefinite (eigenvalues from
     * -2.96 to 8.91; SciPy's CG diverges on it too). CG must say so, not claim convergence. */
    kd_csr_t *P = kd_test_load_mtx("dwt_878.mtx", 0.0);
    REQUIRE(P != NULL);
    char ppath[512];
    snprintf(ppath, sizeof(ppath), "%s/dwt_878.mtx", KD_TEST_MATRICES);
    krylov_matrix_info_t pinfo;
    REQUIRE(krylov_put_file(client, ppath, NULL, &pinfo) == KRYLOV_OK);
    CHECK_EQ_INT(pinfo.nnz, 7448);
    double *pb = random_vector(P->rows), *px = malloc((size_t)P->rows * sizeof(double));
    krylov_solve_result_t pres;
    krylov_solve_options_t popt;
    krylov_solve_options_init(&popt);
    REQUIRE(krylov_solve(client, pinfo.id, pb, P->rows, &popt, px, &pres) == KRYLOV_OK);
    if (strcmp(pres.status, "converged") == 0)
        CHECK(true_relative_residual(P, pb, px) <= 1e-8);
    else
        CHECK_MSG(strcmp(pres.status, "breakdown") == 0 ||
                      strcmp(pres.status, "max_iterations") == 0,
                  "dwt_878: %s", pres.status);

    /* dwt_878 + 4 I is SPD (Gershgorin): CG and steepest descent both meet rtol */
    for (int64_t r = 0; r < P->rows; r++)
        for (int32_t k = P->indptr[r]; k < P->indptr[r + 1]; k++)
            if (P->indices[k] == r)
                kd_store_real(P->values, P->dtype, (size_t)k, kd_csr_value(P, k) + 4.0);
    REQUIRE(krylov_put_csr(client, P->rows, P->cols, P->indptr, P->indices, P->values, NULL,
                           &pinfo) == KRYLOV_OK);
    const char *methods[] = {"cg", "sd"};
    for (int m = 0; m < 2; m++) {
        popt.method = methods[m];
        REQUIRE(krylov_solve(client, pinfo.id, pb, P->rows, &popt, px, &pres) == KRYLOV_OK);
        CHECK_MSG(strcmp(pres.status, "converged") == 0, "%s: %s", methods[m], pres.status);
        CHECK_MSG(true_relative_residual(P, pb, px) <= 1e-8, "%s on dwt_878 + 4I: %g", methods[m],
                  true_relative_residual(P, pb, px));
    }
    free(pb);
    free(px);
    kd_csr_free(P);

    /* warm start from the answer: done at once */
    opt.x0 = x;
    opt.history = 0;
    double *x2 = malloc((size_t)A->rows * sizeof(double));
    REQUIRE(krylov_solve(client, info.id, b, A->rows, &opt, x2, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "converged") == 0);
    CHECK(res.iterations <= 1);
    opt.x0 = NULL;

    /* maxiter is respected and reported */
    opt.maxiter = 3;
    REQUIRE(krylov_solve(client, info.id, b, A->rows, &opt, x2, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "max_iterations") == 0);
    CHECK_EQ_INT(res.iterations, 3);
    free(x2);

    /* steepest descent on a well-conditioned SPD matrix: 2-D Laplacian + 4 I */
    int g = 12, n = g * g;
    int32_t *ptr = malloc((size_t)(n + 1) * 4), *idx = malloc((size_t)n * 5 * 4);
    double *val = malloc((size_t)n * 5 * 8);
    int nz = 0;
    for (int i = 0; i < g; i++)
        for (int j = 0; j < g; j++) {
            int r = i * g + j;
            ptr[r] = nz;
            if (i > 0)
                idx[nz] = r - g, val[nz++] = -1;
            if (j > 0)
                idx[nz] = r - 1, val[nz++] = -1;
            idx[nz] = r, val[nz++] = 8;
            if (j < g - 1)
                idx[nz] = r + 1, val[nz++] = -1;
            if (i < g - 1)
                idx[nz] = r + g, val[nz++] = -1;
        }
    ptr[n] = nz;
    kd_csr_t *L = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_csr_arrays(n, n, nz, ptr, KD_DTYPE_I32, idx, KD_DTYPE_I32, val,
                                   KD_DTYPE_F64, KD_DTYPE_F64, NULL, &L, &err) == KD_OK);
    REQUIRE(krylov_put_csr(client, n, n, ptr, idx, val, NULL, &info) == KRYLOV_OK);
    double *bl = random_vector(n), *xl = malloc((size_t)n * 8);
    krylov_solve_options_init(&opt);
    opt.method = "sd";
    opt.rtol = 1e-10;
    REQUIRE(krylov_solve(client, info.id, bl, n, &opt, xl, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "converged") == 0);
    CHECK_MSG(true_relative_residual(L, bl, xl) <= 1e-10, "SD residual %g",
              true_relative_residual(L, bl, xl));

    /* two right-hand sides at once */
    double *b2 = malloc((size_t)n * 2 * 8), *x2r = malloc((size_t)n * 2 * 8);
    for (int i = 0; i < 2 * n; i++)
        b2[i] = kd_test_rand_double(-1, 1);
    krylov_solve_result_t res2[2];
    krylov_solve_options_init(&opt);
    opt.nrhs = 2;
    REQUIRE(krylov_solve(client, info.id, b2, n, &opt, x2r, res2) == KRYLOV_OK);
    for (int k = 0; k < 2; k++) {
        CHECK(strcmp(res2[k].status, "converged") == 0);
        CHECK(true_relative_residual(L, b2 + k * n, x2r + k * n) <= 1e-8);
    }
    free(b2);
    free(x2r);
    free(ptr);
    free(idx);
    free(val);
    free(bl);
    free(xl);
    kd_csr_free(L);
    free(b);
    free(x);
    kd_csr_free(A);
}

static void test_indefinite_and_bad_solves(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/can___24.mtx", KD_TEST_MATRICES);
    krylov_matrix_info_t info;
    REQUIRE(krylov_put_file(client, path, NULL, &info) == KRYLOV_OK);
    double b[24], x[24];
    for (int i = 0; i < 24; i++)
        b[i] = kd_test_rand_double(0.5, 1.5);
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.maxiter = 500;
    krylov_solve_result_t res;
    REQUIRE(krylov_solve(client, info.id, b, 24, &opt, x, &res) == KRYLOV_OK);
    CHECK_MSG(strcmp(res.status, "breakdown") == 0 || strcmp(res.status, "max_iterations") == 0 ||
                  strcmp(res.status, "converged") == 0 || strcmp(res.status, "stagnated") == 0,
              "status %s", res.status);
    CHECK(res.iterations <= 500);

    /* b with the wrong length */
    CHECK_EQ_INT(krylov_solve(client, info.id, b, 23, &opt, x, &res), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "b has 23 values");

    /* a rectangular matrix cannot be solved */
    snprintf(path, sizeof(path), "%s/Franz6_id1959_aug.mtx", KD_TEST_MATRICES);
    REQUIRE(krylov_put_file(client, path, NULL, &info) == KRYLOV_OK);
    CHECK_EQ_INT(info.rows, 10592);
    CHECK_EQ_INT(info.cols, 3016);
    double *bb = calloc(10592, sizeof(double)), *xx = calloc(10592, sizeof(double));
    CHECK_EQ_INT(krylov_solve(client, info.id, bb, 10592, &opt, xx, &res), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "square");
    free(bb);
    free(xx);

    /* an unknown method name */
    snprintf(path, sizeof(path), "%s/494_bus.mtx", KD_TEST_MATRICES);
    REQUIRE(krylov_put_file(client, path, NULL, &info) == KRYLOV_OK);
    opt.method = "no-such-method";
    double *b494 = calloc(494, sizeof(double)), *x494 = calloc(494, sizeof(double));
    CHECK_EQ_INT(krylov_solve(client, info.id, b494, 494, &opt, x494, &res), KRYLOV_EBADREQ);
    CHECK(strcmp(krylov_error_code(client), "BAD_REQUEST") == 0);
    CHECK_STR_CONTAINS(krylov_error_message(client), "unknown method 'no-such-method'");

    /* b = 0: x = 0 at once */
    opt.method = "cg";
    for (int i = 0; i < 494; i++)
        x494[i] = NAN;
    REQUIRE(krylov_solve(client, info.id, b494, 494, &opt, x494, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "converged") == 0);
    CHECK_EQ_INT(res.iterations, 0);
    int zero = 1;
    for (int i = 0; i < 494; i++)
        zero &= x494[i] == 0.0;
    CHECK(zero);

    /* NaN in b: non_finite, naming b */
    b494[7] = NAN;
    REQUIRE(krylov_solve(client, info.id, b494, 494, &opt, x494, &res) == KRYLOV_OK);
    CHECK(strcmp(res.status, "non_finite") == 0);
    CHECK_STR_CONTAINS(res.message, "b");
    free(b494);
    free(x494);
}

static void test_float32_matrix(void)
{
    kd_csr_t *A = kd_test_load_mtx("bayer10.mtx", 0.0);
    REQUIRE(A != NULL);
    char path[512];
    snprintf(path, sizeof(path), "%s/bayer10.mtx", KD_TEST_MATRICES);
    krylov_put_options_t opt = {.dtype = "float32"};
    krylov_matrix_info_t info, info64;
    REQUIRE(krylov_put_file(client, path, &opt, &info) == KRYLOV_OK);
    CHECK(strcmp(info.dtype, "float32") == 0);
    REQUIRE(krylov_put_file(client, path, NULL, &info64) == KRYLOV_OK);
    CHECK(strcmp(info.id, info64.id) != 0); /* a different matrix: other precision */
    double *x = random_vector(A->cols), *y = malloc((size_t)A->rows * 8),
           *ref = malloc((size_t)A->rows * 8);
    REQUIRE(krylov_spmv(client, info.id, 1.0, x, A->cols, 0.0, y, A->rows) == KRYLOV_OK);
    kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
    /* float32 values and arithmetic: compare row by row against the row's absolute sum */
    int bad = 0;
    for (int64_t r = 0; r < A->rows; r++) {
        double scale = 0;
        for (int32_t k = A->indptr[r]; k < A->indptr[r + 1]; k++)
            scale += fabs(kd_csr_value(A, k) * x[A->indices[k]]);
        bad += fabs(y[r] - ref[r]) > 1e-5 * (scale + 1e-30);
    }
    CHECK_EQ_INT(bad, 0);
    free(x);
    free(y);
    free(ref);
    kd_csr_free(A);
}

/* krylov_put_like: the values alone; the same content a full put makes (same id); a loop of
 * puts on one pattern (the client's memo of the last pattern's hash) and then another pattern of
 * the same shape and count, which the server must refuse (a stale memo would send the first
 * pattern's hash and be accepted). */
static void test_put_like(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    REQUIRE(A != NULL);
    krylov_matrix_info_t a, v, full;
    REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL, &a) ==
            KRYLOV_OK);
    double *x = random_vector(A->cols), *y = malloc((size_t)A->rows * sizeof(double)),
           *ref = malloc((size_t)A->rows * sizeof(double));
    for (int step = 1; step <= 3; step++) {
        double *vals = A->values;
        for (int64_t k = 0; k < A->nnz; k++)
            vals[k] *= 1.0 + 0.25 * step;
        REQUIRE(krylov_put_like(client, a.id, A->rows, A->cols, A->indptr, A->indices, vals, NULL,
                                &v) == KRYLOV_OK);
        CHECK_EQ_INT(v.created, 1);
        CHECK_EQ_INT(v.nnz, A->nnz);
        REQUIRE(krylov_spmv(client, v.id, 1.0, x, A->cols, 0.0, y, A->rows) == KRYLOV_OK);
        memset(ref, 0, (size_t)A->rows * sizeof(double));
        kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
        CHECK(rel_diff(y, ref, A->rows) <= 1e-12);
        REQUIRE(krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL,
                               &full) == KRYLOV_OK);
        CHECK(strcmp(full.id, v.id) == 0 && full.created == 0);
    }
    /* another pattern, same shape and count: row 0's last column moved to a free column */
    int32_t *moved = malloc((size_t)A->nnz * sizeof(int32_t));
    memcpy(moved, A->indices, (size_t)A->nnz * sizeof(int32_t));
    const int32_t last = A->indptr[1] - 1;
    REQUIRE(last >= 0 && moved[last] + 1 < A->cols);
    moved[last]++; /* still ascending and new in row 0: it was the row's last entry */
    CHECK_EQ_INT(
        krylov_put_like(client, a.id, A->rows, A->cols, A->indptr, moved, A->values, NULL, &v),
        KRYLOV_EBADREQ);
    CHECK(strstr(krylov_error_message(client), "pattern") != NULL);
    /* and back to the held pattern: accepted again */
    CHECK_EQ_INT(
        krylov_put_like(client, a.id, A->rows, A->cols, A->indptr, A->indices, A->values, NULL, &v),
        KRYLOV_OK);
    free(moved);
    free(x);
    free(y);
    free(ref);
    kd_csr_free(A);
}

static void test_info_list_drop(void)
{
    krylov_matrix_info_t *list = NULL;
    size_t n = 0;
    REQUIRE(krylov_list(client, &list, &n) == KRYLOV_OK);
    CHECK(n >= 5);
    REQUIRE(n > 0);
    char id[33];
    snprintf(id, sizeof(id), "%s", list[0].id);
    krylov_matrix_info_t info;
    REQUIRE(krylov_info(client, id, &info) == KRYLOV_OK);
    CHECK(strcmp(info.id, id) == 0);
    CHECK(info.rows == list[0].rows && info.nnz == list[0].nnz);
    free(list);

    REQUIRE(krylov_drop(client, id) == KRYLOV_OK);
    CHECK_EQ_INT(krylov_info(client, id, &info), KRYLOV_ENOTFOUND);
    CHECK(strcmp(krylov_error_code(client), "NOT_FOUND") == 0);
    CHECK_STR_CONTAINS(krylov_error_message(client), id);
    CHECK_EQ_INT(krylov_drop(client, id), KRYLOV_ENOTFOUND);
    double x = 1, y = 0;
    CHECK_EQ_INT(krylov_spmv(client, id, 1.0, &x, 1, 0.0, &y, 1), KRYLOV_ENOTFOUND);
    CHECK_EQ_INT(krylov_info(client, "not-an-id", &info), KRYLOV_EBADREQ);

    size_t m = 0;
    REQUIRE(krylov_list(client, &list, &m) == KRYLOV_OK);
    CHECK_EQ_INT(m, n - 1);
    free(list);
}

int main(void)
{
    kd_test_seed();
    if ((client = kd_daemon_start_client(&daemon_)) == NULL)
        return 1;
    RUN(test_status_of_fresh_server);
    RUN(test_put_three_ways_same_id);
    RUN(test_spmv_matches_reference);
    RUN(test_cg_and_sd_converge);
    RUN(test_indefinite_and_bad_solves);
    RUN(test_float32_matrix);
    RUN(test_put_like);
    RUN(test_info_list_drop);
    krylov_client_free(client);
    CHECK_EQ_INT(kd_daemon_stop(&daemon_), 0);
    return kd_test_finish();
}
