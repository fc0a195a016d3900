/*
 * matrix.multiply end to end: a real krylovd on loopback, driven through libkrylov. There is no
 * method that downloads a matrix, so each product C is checked through the server's own SpMV: C x
 * must equal op(A) (B x) computed here on the CPU (kd_csr_spmv_ref) for a random x, which checks
 * every row of C against a random combination of its columns, and C's info must give the shape
 * and the symbolic product's nnz (counted here: explicit zeros are kept, so cancellation does not
 * lower it). Real matrices (A A, A^T A, rectangular products, float32), then each rule: dimension
 * and dtype mismatches, unknown ids, a product count over int32 (refused before the device is
 * used), C over --max-nnz and over --device-memory, the same product twice, a restart (the
 * product is a stored matrix like any other) and a server without --state-dir (the host keeps the
 * operands' CSR). The daemons must exit cleanly at the end.
 */
#include "common/csr.h"
#include "kd_daemon_client.h"
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "krylov.h"

static kd_daemon_t daemon_;
static krylov_client_t *client;

typedef struct kept {
    char id[33];
    double *x, *y; /* y = C x before the restart */
    int64_t rows, cols;
} kept_t;

static kept_t kept;

static double *random_vector(int64_t n)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = kd_test_rand_double(-1.0, 1.0);
    return v;
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

/* The nnz of A B's symbolic product: distinct columns per row, whatever the values. */
static int64_t symbolic_nnz(const kd_csr_t *a, const kd_csr_t *b)
{
    int64_t *mark = malloc((size_t)(b->cols > 0 ? b->cols : 1) * sizeof(int64_t));
    for (int64_t j = 0; j < b->cols; j++)
        mark[j] = -1;
    int64_t nnz = 0;
    for (int64_t i = 0; i < a->rows; i++)
        for (int32_t p = a->indptr[i]; p < a->indptr[i + 1]; p++)
            for (int32_t q = b->indptr[a->indices[p]]; q < b->indptr[a->indices[p] + 1]; q++)
                if (mark[b->indices[q]] != i) {
                    mark[b->indices[q]] = i;
                    nnz++;
                }
    free(mark);
    return nnz;
}

static kd_csr_t *transposed(const kd_csr_t *a)
{
    kd_csr_t *t = NULL;
    kd_err_t err = {0};
    if (kd_csr_transpose(a, &t, &err) != KD_OK) {
        fprintf(stderr, "transpose: %s\n", err.message);
        exit(2);
    }
    return t;
}

/* A matrix from COO triplets (float64), or exit. */
static kd_csr_t *from_coo(int64_t rows, int64_t cols, int64_t nnz, const int32_t *r,
                          const int32_t *c, const double *v)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    if (kd_csr_from_coo_arrays(rows, cols, nnz, r, c, KD_DTYPE_I32, v, KD_DTYPE_F64, KD_DTYPE_F64,
                               NULL, &m, &err) != KD_OK) {
        fprintf(stderr, "coo: %s\n", err.message);
        exit(2);
    }
    return m;
}

static int put(krylov_client_t *c, const kd_csr_t *m, krylov_matrix_info_t *info)
{
    int rc = krylov_put_csr(c, m->rows, m->cols, m->indptr, m->indices, m->values, NULL, info);
    if (rc != KRYLOV_OK)
        fprintf(stderr, "put: %s %s\n", krylov_error_code(c), krylov_error_message(c));
    return rc;
}

/* C (on the server) against op(A) B computed here: shape, nnz, and C x for a random x. */
static void check_product_at(krylov_client_t *c, const char *what, const krylov_matrix_info_t *ci,
                             const kd_csr_t *opa, const kd_csr_t *b, double tol, int line)
{
    CHECK_MSG(ci->rows == opa->rows && ci->cols == b->cols, "line %d %s: %lld x %lld", line, what,
              (long long)ci->rows, (long long)ci->cols);
    int64_t nnz = symbolic_nnz(opa, b);
    CHECK_MSG(ci->nnz == nnz, "line %d %s: nnz %lld, symbolic product %lld", line, what,
              (long long)ci->nnz, (long long)nnz);
    double *x = random_vector(b->cols), *bx = malloc((size_t)(b->rows + 1) * sizeof(double));
    double *ref = malloc((size_t)(opa->rows + 1) * sizeof(double));
    double *y = malloc((size_t)(opa->rows + 1) * sizeof(double));
    kd_csr_spmv_ref(b, x, 1.0, 0.0, bx);
    kd_csr_spmv_ref(opa, bx, 1.0, 0.0, ref);
    int rc = krylov_spmv(c, ci->id, 1.0, x, b->cols, 0.0, y, opa->rows);
    CHECK_MSG(rc == KRYLOV_OK, "line %d %s: spmv %s", line, what, krylov_error_message(c));
    if (rc == KRYLOV_OK)
        CHECK_MSG(rel_diff(y, ref, opa->rows) <= tol, "line %d %s: C x vs A (B x): %g", line, what,
                  rel_diff(y, ref, opa->rows));
    free(x);
    free(bx);
    free(ref);
    free(y);
}
#define check_product(c, what, ci, opa, b, tol) check_product_at(c, what, ci, opa, b, tol, __LINE__)

static int multiply(krylov_client_t *c, const char *a, const char *b, int transpose_a,
                    krylov_matrix_info_t *info, krylov_multiply_stats_t *stats)
{
    krylov_multiply_options_t opt = {.transpose_a = transpose_a};
    int rc = krylov_multiply(c, a, b, &opt, info, stats);
    if (rc != KRYLOV_OK)
        fprintf(stderr, "multiply: %s %s\n", krylov_error_code(c), krylov_error_message(c));
    return rc;
}

static void test_square_and_transposed(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    krylov_matrix_info_t a, c, again, ta;
    krylov_multiply_stats_t st;
    REQUIRE(put(client, A, &a) == KRYLOV_OK);
    REQUIRE(multiply(client, a.id, a.id, 0, &c, &st) == KRYLOV_OK);
    check_product(client, "494_bus^2", &c, A, A, 1e-12);
    CHECK_EQ_INT(c.created, 1);
    CHECK(strcmp(c.dtype, "float64") == 0 && c.format[0] != '\0' && c.device_bytes > 0);
    CHECK_EQ_INT(st.products, 6612);
    CHECK_EQ_INT(st.nnz, c.nnz);
    CHECK(st.time_ms >= 0.0);

    /* the same product again is the same matrix; so is A^T A for a symmetric A */
    REQUIRE(multiply(client, a.id, a.id, 0, &again, NULL) == KRYLOV_OK);
    CHECK(strcmp(again.id, c.id) == 0 && again.created == 0);
    REQUIRE(multiply(client, a.id, a.id, 1, &ta, NULL) == KRYLOV_OK);
    CHECK(strcmp(ta.id, c.id) == 0 && ta.created == 0);
    krylov_matrix_info_t listed;
    REQUIRE(krylov_info(client, c.id, &listed) == KRYLOV_OK);
    CHECK(listed.nnz == c.nnz && listed.rows == 494);

    /* bayer10 is not symmetric: A A and A^T A differ */
    kd_csr_t *B = kd_test_load_mtx("bayer10.mtx", 0.0), *Bt = transposed(B);
    krylov_matrix_info_t b, bb, btb;
    REQUIRE(put(client, B, &b) == KRYLOV_OK);
    REQUIRE(multiply(client, b.id, b.id, 0, &bb, NULL) == KRYLOV_OK);
    check_product(client, "bayer10^2", &bb, B, B, 1e-12);
    REQUIRE(multiply(client, b.id, b.id, 1, &btb, NULL) == KRYLOV_OK);
    check_product(client, "bayer10^T bayer10", &btb, Bt, B, 1e-12);
    CHECK(strcmp(bb.id, btb.id) != 0);

    snprintf(kept.id, sizeof(kept.id), "%s", btb.id);
    kept.rows = btb.rows;
    kept.cols = btb.cols;
    kept.x = random_vector(kept.cols);
    kept.y = malloc((size_t)kept.rows * sizeof(double));
    CHECK(krylov_spmv(client, kept.id, 1.0, kept.x, kept.cols, 0.0, kept.y, kept.rows) ==
          KRYLOV_OK);
    kd_csr_free(A);
    kd_csr_free(B);
    kd_csr_free(Bt);
}

static void test_rectangular(void)
{
    /* Franz6: 10592 x 3016. F^T F is 3016 x 3016; F G with G 3016 x 40 is 10592 x 40. */
    kd_csr_t *F = kd_test_load_mtx("Franz6_id1959_aug.mtx", 0.0), *Ft = transposed(F);
    krylov_matrix_info_t f, ftf, fg, gtft, g, ftinfo;
    REQUIRE(put(client, F, &f) == KRYLOV_OK);
    REQUIRE(multiply(client, f.id, f.id, 1, &ftf, NULL) == KRYLOV_OK);
    check_product(client, "Franz6^T Franz6", &ftf, Ft, F, 1e-12);

    int64_t n = 3 * F->cols;
    int32_t *r = malloc((size_t)n * 4), *cc = malloc((size_t)n * 4);
    double *v = malloc((size_t)n * 8);
    for (int64_t k = 0; k < n; k++) {
        r[k] = (int32_t)kd_test_rand_below(F->cols);
        cc[k] = (int32_t)kd_test_rand_below(40);
        v[k] = kd_test_rand_double(-2.0, 2.0);
    }
    kd_csr_t *G = from_coo(F->cols, 40, n, r, cc, v), *Gt = transposed(G);
    REQUIRE(put(client, G, &g) == KRYLOV_OK);
    REQUIRE(multiply(client, f.id, g.id, 0, &fg, NULL) == KRYLOV_OK);
    check_product(client, "Franz6 G", &fg, F, G, 1e-12);
    CHECK(fg.rows == 10592 && fg.cols == 40);
    /* G^T F^T: F^T uploaded as a matrix of its own, A transposed on the server */
    REQUIRE(put(client, Ft, &ftinfo) == KRYLOV_OK);
    REQUIRE(multiply(client, g.id, ftinfo.id, 1, &gtft, NULL) == KRYLOV_OK);
    check_product(client, "G^T Franz6^T", &gtft, Gt, Ft, 1e-12);

    /* shapes that do not chain: both named */
    krylov_matrix_info_t bad;
    CHECK_EQ_INT(krylov_multiply(client, g.id, f.id, NULL, &bad, NULL), KRYLOV_EBADREQ);
    CHECK(strcmp(krylov_error_code(client), "BAD_REQUEST") == 0);
    CHECK_STR_CONTAINS(krylov_error_message(client), "A (3016 x 40) by B (10592 x 3016)");
    krylov_multiply_options_t t = {.transpose_a = 1};
    CHECK_EQ_INT(krylov_multiply(client, f.id, g.id, &t, &bad, NULL), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "A^T (3016 x 10592) by B (3016 x 40)");
    free(r);
    free(cc);
    free(v);
    kd_csr_free(F);
    kd_csr_free(Ft);
    kd_csr_free(G);
    kd_csr_free(Gt);
}

/* Empty rows, a dense row, and products that cancel to an explicit zero (kept). */
static void test_structure(void)
{
    /* A (4 x 3): row 0 [1 1 0], row 1 empty, row 2 dense [1 2 3], row 3 [0 0 5].
     * B (3 x 3): row 0 [1 0 0], row 1 [-1 0 2], row 2 empty. A B row 0 = [0 0 2]: the 0 is
     * 1*1 + 1*(-1), an explicit zero. */
    static const int32_t ar[] = {0, 0, 2, 2, 2, 3}, ac[] = {0, 1, 0, 1, 2, 2};
    static const double av[] = {1, 1, 1, 2, 3, 5};
    static const int32_t br[] = {0, 1, 1}, bc[] = {0, 0, 2};
    static const double bv[] = {1, -1, 2};
    kd_csr_t *A = from_coo(4, 3, 6, ar, ac, av), *B = from_coo(3, 3, 3, br, bc, bv);
    krylov_matrix_info_t a, b, c;
    krylov_multiply_stats_t st;
    REQUIRE(put(client, A, &a) == KRYLOV_OK);
    REQUIRE(put(client, B, &b) == KRYLOV_OK);
    REQUIRE(multiply(client, a.id, b.id, 0, &c, &st) == KRYLOV_OK);
    check_product(client, "structure", &c, A, B, 1e-15);
    CHECK_EQ_INT(c.nnz, 4); /* row 0: (0, 0) = 0 kept and (0, 2); row 2: (2, 0) = -1, (2, 2) */
    CHECK_EQ_INT(st.products, 6);
    CHECK_EQ_INT(c.empty_rows, 2);
    double x[3] = {1, 1, 1}, y[4];
    REQUIRE(krylov_spmv(client, c.id, 1.0, x, 3, 0.0, y, 4) == KRYLOV_OK);
    CHECK(y[0] == 2 && y[1] == 0 && y[2] == 3 && y[3] == 0);

    /* a product with nothing in it: Z's one column meets B's empty row */
    krylov_matrix_info_t z;
    static const int32_t zr[] = {0}, zc[] = {2};
    static const double zv[] = {7};
    kd_csr_t *Z = from_coo(2, 3, 1, zr, zc, zv);
    krylov_matrix_info_t zi;
    REQUIRE(put(client, Z, &zi) == KRYLOV_OK);
    REQUIRE(multiply(client, zi.id, b.id, 0, &z, &st) == KRYLOV_OK);
    CHECK(z.rows == 2 && z.cols == 3 && z.nnz == 0 && st.products == 0);
    kd_csr_free(A);
    kd_csr_free(B);
    kd_csr_free(Z);
}

static void test_float32(void)
{
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    /* the values the server keeps: A rounded to float32 */
    kd_csr_t *A32 = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_convert(A, KD_DTYPE_F32, &A32, &err) == KD_OK);
    kd_csr_t *R = NULL;
    REQUIRE(kd_csr_convert(A32, KD_DTYPE_F64, &R, &err) == KD_OK);
    krylov_matrix_info_t a32, a64, c;
    char path[512];
    snprintf(path, sizeof(path), "%s/494_bus.mtx", KD_TEST_MATRICES);
    krylov_put_options_t f32 = {.dtype = "float32"};
    REQUIRE(krylov_put_file(client, path, &f32, &a32) == KRYLOV_OK);
    REQUIRE(put(client, A, &a64) == KRYLOV_OK);
    REQUIRE(multiply(client, a32.id, a32.id, 0, &c, NULL) == KRYLOV_OK);
    CHECK(strcmp(c.dtype, "float32") == 0);
    check_product(client, "494_bus^2 float32", &c, R, R, 1e-5);

    krylov_matrix_info_t bad;
    CHECK_EQ_INT(krylov_multiply(client, a32.id, a64.id, NULL, &bad, NULL), KRYLOV_EBADREQ);
    CHECK_STR_CONTAINS(krylov_error_message(client), "A is float32 and B is float64");
    kd_csr_free(A);
    kd_csr_free(A32);
    kd_csr_free(R);
}

static void test_refusals(void)
{
    krylov_matrix_info_t info, a;
    static const char *const missing = "0123456789abcdef0123456789abcdef";
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    REQUIRE(put(client, A, &a) == KRYLOV_OK);
    CHECK_EQ_INT(krylov_multiply(client, missing, a.id, NULL, &info, NULL), KRYLOV_ENOTFOUND);
    CHECK_STR_CONTAINS(krylov_error_message(client), "a: no matrix 0123456789abcdef");
    CHECK_EQ_INT(krylov_multiply(client, a.id, missing, NULL, &info, NULL), KRYLOV_ENOTFOUND);
    CHECK_STR_CONTAINS(krylov_error_message(client), "b: no matrix");
    CHECK_EQ_INT(krylov_multiply(client, "zz", a.id, NULL, &info, NULL), KRYLOV_EBADREQ);

    /* an n x 1 column of ones times a 1 x n row: n^2 = 2.5e9 products, over int32 */
    const int64_t n = 50000;
    int32_t *idx = calloc((size_t)n, 4), *seq = malloc((size_t)n * 4);
    double *ones = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) {
        seq[i] = (int32_t)i;
        ones[i] = 1.0;
    }
    kd_csr_t *col = from_coo(n, 1, n, seq, idx, ones), *row = from_coo(1, n, n, idx, seq, ones);
    krylov_matrix_info_t ci, ri;
    REQUIRE(put(client, col, &ci) == KRYLOV_OK);
    REQUIRE(put(client, row, &ri) == KRYLOV_OK);
    CHECK_EQ_INT(krylov_multiply(client, ci.id, ri.id, NULL, &info, NULL), KRYLOV_ETOOLARGE);
    CHECK_STR_CONTAINS(krylov_error_message(client), "2500000000 products");
    /* the other way round it is a 1 x 1 matrix, n products */
    krylov_multiply_stats_t st;
    REQUIRE(multiply(client, ri.id, ci.id, 0, &info, &st) == KRYLOV_OK);
    CHECK(info.rows == 1 && info.cols == 1 && info.nnz == 1 && st.products == n);
    double x = 1.0, y = 0.0;
    REQUIRE(krylov_spmv(client, info.id, 1.0, &x, 1, 0.0, &y, 1) == KRYLOV_OK);
    CHECK(y == (double)n);

    /* a real one: arrow's full row meets its full column (2,162,435,996 products) */
    kd_csr_t *W = kd_test_load_mtx("arrow.mtx", 0.0);
    krylov_matrix_info_t w;
    REQUIRE(put(client, W, &w) == KRYLOV_OK);
    CHECK_EQ_INT(krylov_multiply(client, w.id, w.id, NULL, &info, NULL), KRYLOV_ETOOLARGE);
    CHECK_STR_CONTAINS(krylov_error_message(client), "2162435996 products");

    /* the server goes on serving */
    krylov_server_status_t status;
    CHECK(krylov_status(client, &status) == KRYLOV_OK);
    REQUIRE(multiply(client, a.id, a.id, 0, &info, NULL) == KRYLOV_OK);
    free(idx);
    free(seq);
    free(ones);
    kd_csr_free(A);
    kd_csr_free(col);
    kd_csr_free(row);
    kd_csr_free(W);
}

/* The product is a stored matrix: after a crash it is listed, reloads and multiplies the same. */
static void test_survives_restart(void)
{
    REQUIRE(kept.x != NULL);
    krylov_client_free(client);
    client = NULL;
    kd_daemon_kill(&daemon_);
    REQUIRE(kd_daemon_restart(&daemon_, NULL) == 0);
    client = krylov_client_new();
    REQUIRE(krylov_connect(client, daemon_.address) == KRYLOV_OK);
    krylov_matrix_info_t info;
    REQUIRE(krylov_info(client, kept.id, &info) == KRYLOV_OK);
    CHECK(info.rows == kept.rows && info.cols == kept.cols && !info.resident);
    double *y = malloc((size_t)kept.rows * sizeof(double));
    REQUIRE(krylov_spmv(client, kept.id, 1.0, kept.x, kept.cols, 0.0, y, kept.rows) == KRYLOV_OK);
    CHECK(rel_diff(y, kept.y, kept.rows) <= 1e-14);
    /* and is an operand again, read back from its file */
    krylov_matrix_info_t sq;
    REQUIRE(multiply(client, kept.id, kept.id, 0, &sq, NULL) == KRYLOV_OK);
    CHECK(sq.rows == kept.rows && sq.nnz > 0);
    free(y);
}

/* Without --state-dir the operands come from the host copies the store keeps; --max-nnz bounds
 * C as it bounds an upload. */
static void test_without_state_dir(void)
{
    static const char *const args[] = {"--state-dir", "", "--max-nnz", "3000", NULL};
    kd_daemon_t d;
    REQUIRE(kd_daemon_start(&d, args) == 0);
    krylov_client_t *c = krylov_client_new();
    REQUIRE(krylov_connect(c, d.address) == KRYLOV_OK);
    kd_csr_t *S = kd_test_load_mtx("can___24.mtx", 0.0), *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    kd_csr_t *St = transposed(S);
    krylov_matrix_info_t s, a, ss, info;
    REQUIRE(put(c, S, &s) == KRYLOV_OK);
    REQUIRE(multiply(c, s.id, s.id, 1, &ss, NULL) == KRYLOV_OK);
    check_product(c, "can_24^T can_24 without a state dir", &ss, St, S, 1e-12);
    REQUIRE(put(c, A, &a) == KRYLOV_OK); /* 1666 entries; A A has 4062 */
    CHECK_EQ_INT(krylov_multiply(c, a.id, a.id, NULL, &info, NULL), KRYLOV_ETOOLARGE);
    CHECK(strcmp(krylov_error_code(c), "TOO_LARGE") == 0);
    CHECK_STR_CONTAINS(krylov_error_message(c), "4062");
    /* the operands are still there and usable */
    REQUIRE(multiply(c, ss.id, s.id, 0, &info, NULL) == KRYLOV_OK);
    krylov_client_free(c);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    kd_csr_free(S);
    kd_csr_free(St);
    kd_csr_free(A);
}

/* C over the device-memory budget: DEVICE_MEMORY with the sizes; the operands still work. */
static void test_device_memory(void)
{
    static const char *const args[] = {"--device-memory", "2M", NULL};
    kd_daemon_t d;
    REQUIRE(kd_daemon_start(&d, args) == 0);
    krylov_client_t *c = krylov_client_new();
    REQUIRE(krylov_connect(c, d.address) == KRYLOV_OK);
    kd_csr_t *A = kd_test_load_mtx("rajat01.mtx", 0.0); /* A A: 4,686,910 entries, 56 MB */
    krylov_matrix_info_t a, info;
    REQUIRE(put(c, A, &a) == KRYLOV_OK);
    CHECK_EQ_INT(krylov_multiply(c, a.id, a.id, NULL, &info, NULL), KRYLOV_EDEVMEM);
    CHECK(strcmp(krylov_error_code(c), "DEVICE_MEMORY") == 0);
    CHECK_STR_CONTAINS(krylov_error_message(c), "device-memory budget 2097152 bytes");
    double *x = random_vector(A->cols), *y = malloc((size_t)A->rows * sizeof(double));
    double *ref = malloc((size_t)A->rows * sizeof(double));
    REQUIRE(krylov_spmv(c, a.id, 1.0, x, A->cols, 0.0, y, A->rows) == KRYLOV_OK);
    kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
    CHECK(rel_diff(y, ref, A->rows) <= 1e-12);
    krylov_client_free(c);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    free(x);
    free(y);
    free(ref);
    kd_csr_free(A);
}

/* A product the device got wrong (the test hook corrupts the first one read back: two columns
 * out of order) is refused as INTERNAL naming the operation, nothing is stored, and the daemon
 * goes on: the next product is right and admitted. */
static void test_corrupt_product(void)
{
    kd_daemon_t d;
    setenv("KD_FAULT", "product:1", 1);
    const int started = kd_daemon_start(&d, NULL);
    unsetenv("KD_FAULT");
    REQUIRE(started == 0);
    krylov_client_t *c = krylov_client_new();
    REQUIRE(krylov_connect(c, d.address) == KRYLOV_OK);
    kd_csr_t *A = kd_test_load_mtx("494_bus.mtx", 0.0);
    krylov_matrix_info_t a, info;
    krylov_server_status_t before, after;
    REQUIRE(put(c, A, &a) == KRYLOV_OK);
    REQUIRE(krylov_status(c, &before) == KRYLOV_OK);
    CHECK(krylov_multiply(c, a.id, a.id, NULL, &info, NULL) != KRYLOV_OK);
    CHECK(strcmp(krylov_error_code(c), "INTERNAL") == 0);
    CHECK_STR_CONTAINS(krylov_error_message(c), "matrix.multiply");
    CHECK_STR_CONTAINS(krylov_error_message(c), "not after the previous one");
    REQUIRE(krylov_status(c, &after) == KRYLOV_OK);
    CHECK_EQ_INT(after.matrices, before.matrices); /* nothing stored */
    REQUIRE(multiply(c, a.id, a.id, 0, &info, NULL) == KRYLOV_OK);
    check_product(c, "494_bus^2 after a refused product", &info, A, A, 1e-12);
    krylov_client_free(c);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    kd_csr_free(A);
}

int main(void)
{
    kd_test_seed();
    if ((client = kd_daemon_start_client(&daemon_)) == NULL)
        return 1;
    RUN(test_square_and_transposed);
    RUN(test_rectangular);
    RUN(test_structure);
    RUN(test_float32);
    RUN(test_refusals);
    RUN(test_survives_restart);
    krylov_client_free(client);
    CHECK_EQ_INT(kd_daemon_stop(&daemon_), 0);
    RUN(test_without_state_dir);
    RUN(test_device_memory);
    RUN(test_corrupt_product);
    free(kept.x);
    free(kept.y);
    return kd_test_finish();
}
