/*
 * kd_spgemm (C = A B on the device) against a CPU reference written here: the same sums in the
 * same order (for each entry a_ik of A's row, k ascending, for each b_kj: acc_j += a_ik * b_kj,
 * products rounded before the add, in the matrices' own value type), so C must match it bit for
 * bit, row pointers, columns and values; a second check against float64 sums with a tolerance
 * checks the reference itself.
 *
 * Generated cases run in float64 (where the device has it) and float32, the real matrices' A A in
 * float64 and A^T A in float32 (PoCL's time); matching the sequential sums bit for bit makes
 * every run give the same bits, and three cases that take every path also run twice and compare.
 *
 * Inputs are fresh each run (KD_TEST_SEED replays one). Before each product the device memory C
 * will likely reuse is poisoned (a large buffer filled with NaN bytes, then released), so a value
 * or index the kernels forget to write shows up.
 *
 * Shapes that break naive code: empty rows in A and in B, A with dense rows whose columns cannot
 * fit a local table (the global bin: bitmaps, more rows than work-groups, rows cut in slices),
 * rows for every symbolic and numeric bin, 1x1, n x 1 times 1 x n and 1 x n times n x 1,
 * rectangular, nnz = 0 operands, an inner dimension of 0, products that cancel to exactly zero
 * (kept as explicit zeros), and the real matrices in tests/matrices (A A and A^T A). Refusals:
 * dimension and dtype mismatches (KD_EBADREQ), a product count past int32 (KD_ETOOLARGE, before
 * anything big is allocated), max_nnz (KD_ETOOLARGE) and max_device_bytes (KD_EDEVMEM).
 */
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/products/spgemm.h"
#include "kernels/products/spgemm_abi.h"

/* Real matrices with more products than this are left to the benchmark (PoCL takes seconds). */
#define KD_TEST_MAX_PRODUCTS 2000000

static kd_ocl_t *ocl;
/* Run each product a second time and compare the bits (the cases that exercise every path). */
static int twice;
/* Restrict product_case to one value type (the real matrices: A A in float64, A^T A in float32). */
static int only_dtype = -1;
static int64_t bins_seen[2][KD_SPGEMM_BINS]; /* symbolic, numeric */

/* Products of A B counted on the host (int64). */
static int64_t host_products(const kd_csr_t *A, const kd_csr_t *B)
{
    int64_t p = 0;
    for (int64_t e = 0; e < A->nnz; e++) {
        int32_t k = A->indices[e];
        p += B->indptr[k + 1] - B->indptr[k];
    }
    return p;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* One product, rounded in the value type before it is added (no fused multiply-add). */
static double round_product(kd_dtype_t dtype, double a, double b)
{
    if (dtype == KD_DTYPE_F32) {
        volatile float p = (float)a * (float)b;
        return p;
    }
    volatile double p = a * b;
    return p;
}

static double round_sum(kd_dtype_t dtype, double acc, double p)
{
    if (dtype == KD_DTYPE_F32) {
        volatile float s = (float)acc + (float)p;
        return s;
    }
    volatile double s = acc + p;
    return s;
}

/*
 * The reference C (in A's dtype): pattern = the symbolic product, values summed in A's row order
 * in the value type. Per entry, *wide gets the float64 sum, *scale the sum of |products| and
 * *terms their count (for the tolerance check).
 */
static kd_csr_t *reference_product(const kd_csr_t *A, const kd_csr_t *B, double **wide,
                                   double **scale, double **terms)
{
    int64_t n = B->cols;
    int32_t *mark = malloc(((size_t)n + 1) * sizeof(int32_t));
    double *acc = malloc(((size_t)n + 1) * sizeof(double));
    double *accw = malloc(((size_t)n + 1) * sizeof(double));
    double *accs = malloc(((size_t)n + 1) * sizeof(double));
    double *accn = malloc(((size_t)n + 1) * sizeof(double));
    int32_t *cols = malloc(((size_t)n + 1) * sizeof(int32_t));
    int64_t cap = 1024, nnz = 0;
    int32_t *indptr = malloc(((size_t)A->rows + 1) * sizeof(int32_t));
    int32_t *indices = malloc((size_t)cap * sizeof(int32_t));
    double *values = malloc((size_t)cap * sizeof(double));
    double *vw = malloc((size_t)cap * sizeof(double));
    double *vs = malloc((size_t)cap * sizeof(double));
    double *vn = malloc((size_t)cap * sizeof(double));
    for (int64_t j = 0; j < n; j++)
        mark[j] = -1;
    indptr[0] = 0;
    for (int64_t i = 0; i < A->rows; i++) {
        int64_t len = 0;
        for (int32_t e = A->indptr[i]; e < A->indptr[i + 1]; e++) {
            int32_t k = A->indices[e];
            double a = kd_csr_value(A, e);
            for (int32_t q = B->indptr[k]; q < B->indptr[k + 1]; q++) {
                int32_t j = B->indices[q];
                double p = round_product(A->dtype, a, kd_csr_value(B, q));
                if (mark[j] != (int32_t)i) {
                    mark[j] = (int32_t)i;
                    acc[j] = accw[j] = accs[j] = accn[j] = 0.0;
                    cols[len++] = j;
                }
                acc[j] = round_sum(A->dtype, acc[j], p);
                accw[j] += a * kd_csr_value(B, q);
                accs[j] += fabs(a * kd_csr_value(B, q));
                accn[j] += 1.0;
            }
        }
        qsort(cols, (size_t)len, sizeof(int32_t), cmp_i32);
        while (nnz + len > cap) {
            cap *= 2;
            indices = realloc(indices, (size_t)cap * sizeof(int32_t));
            values = realloc(values, (size_t)cap * sizeof(double));
            vw = realloc(vw, (size_t)cap * sizeof(double));
            vs = realloc(vs, (size_t)cap * sizeof(double));
            vn = realloc(vn, (size_t)cap * sizeof(double));
        }
        for (int64_t t = 0; t < len; t++) {
            indices[nnz] = cols[t];
            values[nnz] = acc[cols[t]];
            vw[nnz] = accw[cols[t]];
            vs[nnz] = accs[cols[t]];
            vn[nnz] = accn[cols[t]];
            nnz++;
        }
        indptr[i + 1] = (int32_t)nnz;
    }
    kd_csr_t *C = NULL;
    kd_err_t err = {0};
    if (kd_csr_alloc(A->rows, B->cols, nnz, A->dtype, &C, &err) != KD_OK) {
        fprintf(stderr, "reference: %s\n", err.message);
        exit(2);
    }
    memcpy(C->indptr, indptr, ((size_t)A->rows + 1) * sizeof(int32_t));
    if (nnz > 0)
        memcpy(C->indices, indices, (size_t)nnz * sizeof(int32_t));
    for (int64_t t = 0; t < nnz; t++)
        kd_store_real(C->values, C->dtype, (size_t)t, values[t]);
    *wide = vw;
    *scale = vs;
    *terms = vn;
    free(mark);
    free(acc);
    free(accw);
    free(accs);
    free(accn);
    free(cols);
    free(indptr);
    free(indices);
    free(values);
    return C;
}

/* Fill device memory with NaN bytes and release it, so new buffers likely start dirty. */
static void poison_device(size_t bytes)
{
    kd_err_t err = {0};
    cl_mem m = NULL;
    if (bytes == 0 ||
        kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, "poison", &m, &err) != KD_OK)
        return;
    unsigned char pattern = 0xFF;
    clEnqueueFillBuffer(kd_ocl_queue(ocl), m, &pattern, 1, 0, bytes, 0, NULL, NULL);
    clFinish(kd_ocl_queue(ocl));
    clReleaseMemObject(m);
}

/* Run kd_spgemm on host matrices; 0 and *out (downloaded C) or the error code. */
static int device_product(const kd_csr_t *A, const kd_csr_t *B, const kd_spgemm_limits_t *limits,
                          kd_csr_t **out, kd_spgemm_stats_t *stats, kd_err_t *err)
{
    kd_csr_device_t dA = {0}, dB = {0}, dC = {0};
    *out = NULL;
    int rc = kd_csr_device_upload(ocl, A, &dA, err);
    if (rc == KD_OK)
        rc = kd_csr_device_upload(ocl, B, &dB, err);
    if (rc == KD_OK) {
        size_t guess = (size_t)(host_products(A, B) + A->rows + 1) * 12;
        poison_device(guess < ((size_t)64 << 20) ? guess : ((size_t)64 << 20));
        rc = kd_spgemm(ocl, &dA, &dB, limits, &dC, stats, err);
    }
    if (rc == KD_OK) {
        CHECK_EQ_INT(dC.rows, A->rows);
        CHECK_EQ_INT(dC.cols, B->cols);
        CHECK(dC.indptr != NULL);
        CHECK(dC.nnz == 0 ? dC.indices == NULL && dC.values == NULL
                          : dC.indices != NULL && dC.values != NULL);
        rc = kd_csr_device_download(ocl, &dC, out, err);
    }
    kd_csr_device_release(&dA);
    kd_csr_device_release(&dB);
    kd_csr_device_release(&dC);
    return rc;
}

/* C = A B on the device against the reference; A and B in the same dtype. */
static void check_product(const char *name, const kd_csr_t *A, const kd_csr_t *B)
{
    kd_err_t err = {0};
    kd_spgemm_stats_t stats;
    kd_csr_t *C = NULL, *C2 = NULL;
    const char *dt = kd_dtype_name(A->dtype);
    int rc = device_product(A, B, NULL, &C, &stats, &err);
    CHECK_MSG(rc == KD_OK, "%s (%s): %s", name, dt, err.message);
    if (rc != KD_OK)
        return;
    double *wide = NULL, *scale = NULL, *terms = NULL;
    kd_csr_t *R = reference_product(A, B, &wide, &scale, &terms);
    CHECK_EQ_INT(stats.products, host_products(A, B));
    CHECK_EQ_INT(stats.nnz, R->nnz);
    int64_t binned = 0, numeric_binned = 0;
    for (int b = 0; b < KD_SPGEMM_BINS; b++) {
        binned += stats.bin_rows[b];
        numeric_binned += stats.numeric_bin_rows[b];
        bins_seen[0][b] += stats.bin_rows[b];
        bins_seen[1][b] += stats.numeric_bin_rows[b];
    }
    CHECK_EQ_INT(binned, A->rows);
    CHECK_EQ_INT(numeric_binned, R->nnz > 0 ? A->rows : 0);
    CHECK(stats.peak_device_bytes >= ((size_t)A->rows + 1) * 4);
    CHECK(stats.total_ms >= stats.numeric_ms && stats.total_ms >= 0.0);
    double kernel_ms = 0.0;
    for (int k = 0; k < stats.kernels; k++) {
        CHECK(stats.kernel[k].name != NULL && stats.kernel[k].launches >= 1);
        kernel_ms += stats.kernel[k].ms;
    }
    CHECK_MSG(stats.kernels >= (stats.products > 0 ? 7 : 0) && stats.kernels <= KD_SPGEMM_KERNELS,
              "%s (%s): %d kernels timed", name, dt, stats.kernels);
    CHECK(kernel_ms <= stats.total_ms * 1.001 + 0.001);
    CHECK_MSG(C->nnz == R->nnz, "%s (%s): nnz %lld, expected %lld", name, dt, (long long)C->nnz,
              (long long)R->nnz);
    if (C->nnz != R->nnz)
        goto done;
    int64_t bad_ptr = 0, bad_col = 0, bad_bits = 0, bad_tol = 0;
    for (int64_t i = 0; i <= A->rows; i++)
        bad_ptr += C->indptr[i] != R->indptr[i];
    size_t v = kd_dtype_size(A->dtype);
    const double eps = A->dtype == KD_DTYPE_F64 ? 1.1102230246251565e-16 : 5.960464477539063e-08;
    for (int64_t t = 0; t < R->nnz && bad_ptr == 0; t++) {
        bad_col += C->indices[t] != R->indices[t];
        if (memcmp((char *)C->values + t * v, (char *)R->values + t * v, v) != 0 && bad_bits++ < 3)
            fprintf(stderr, "%s (%s): entry %lld (column %d): %.17g, reference %.17g\n", name, dt,
                    (long long)t, R->indices[t], kd_csr_value(C, t), kd_csr_value(R, t));
        double got = kd_csr_value(C, t);
        double tiny = (terms[t] + 4.0) *
                      (A->dtype == KD_DTYPE_F64 ? 4.9406564584124654e-324 : 1.401298464324817e-45);
        if (!(fabs(got - wide[t]) <= (terms[t] + 4.0) * eps * scale[t] + tiny) && bad_tol++ < 3)
            fprintf(stderr, "%s (%s): entry %lld: %.17g, float64 sum %.17g (scale %g, %g terms)\n",
                    name, dt, (long long)t, got, wide[t], scale[t], terms[t]);
    }
    CHECK_MSG(bad_ptr == 0, "%s (%s): %lld row pointers differ", name, dt, (long long)bad_ptr);
    CHECK_MSG(bad_col == 0, "%s (%s): %lld column indices differ", name, dt, (long long)bad_col);
    CHECK_MSG(bad_bits == 0, "%s (%s): %lld values differ from the sequential sums", name, dt,
              (long long)bad_bits);
    CHECK_MSG(bad_tol == 0, "%s (%s): %lld values off the float64 sums", name, dt,
              (long long)bad_tol);

    if (!twice)
        goto done;
    /* the same bits again */
    rc = device_product(A, B, NULL, &C2, NULL, &err);
    CHECK_MSG(rc == KD_OK, "%s (%s) again: %s", name, dt, err.message);
    if (rc == KD_OK) {
        CHECK(C2->nnz == C->nnz);
        CHECK(memcmp(C2->indptr, C->indptr, ((size_t)A->rows + 1) * 4) == 0);
        CHECK(C->nnz == C2->nnz &&
              (C->nnz == 0 || (memcmp(C2->indices, C->indices, (size_t)C->nnz * 4) == 0 &&
                               memcmp(C2->values, C->values, (size_t)C->nnz * v) == 0)));
    }
done:
    kd_csr_free(R);
    kd_csr_free(C);
    kd_csr_free(C2);
    free(wide);
    free(scale);
    free(terms);
}

/* check_product in every dtype the device has; A64 and B64 (float64) are freed here. */
static void product_case(const char *name, kd_csr_t *A64, kd_csr_t *B64)
{
    kd_dtype_t dtypes[2];
    int nd = kd_test_dtypes(ocl, dtypes);
    for (int d = 0; d < nd; d++) {
        kd_err_t err = {0};
        kd_csr_t *A = NULL, *B = NULL;
        if (only_dtype >= 0 && (int)dtypes[d] != only_dtype)
            continue;
        if (kd_csr_convert(A64, dtypes[d], &A, &err) == KD_OK &&
            kd_csr_convert(B64, dtypes[d], &B, &err) == KD_OK)
            check_product(name, A, B);
        kd_csr_free(A);
        kd_csr_free(B);
    }
    kd_csr_free(A64);
    kd_csr_free(B64);
}

static kd_csr_t *ones(int64_t rows, int64_t cols)
{
    kd_test_coo_t c = {rows, cols, 0, 0, NULL, NULL, NULL};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            kd_test_coo_add(&c, r, j, kd_test_rand_double(0.5, 1.5));
    return kd_test_coo_finish(&c);
}

static void test_upload_download(void)
{
    kd_err_t err = {0};
    kd_csr_t *m = kd_test_random_matrix(57, 31, NULL, 3), *back = NULL;
    kd_csr_device_t d = {0};
    REQUIRE(kd_csr_device_upload(ocl, m, &d, &err) == KD_OK);
    CHECK_EQ_INT(d.device_bytes, 58 * 4 + m->nnz * 12);
    REQUIRE(kd_csr_device_download(ocl, &d, &back, &err) == KD_OK);
    CHECK(back->rows == 57 && back->cols == 31 && back->nnz == m->nnz);
    CHECK(memcmp(back->indptr, m->indptr, 58 * 4) == 0);
    CHECK(memcmp(back->indices, m->indices, (size_t)m->nnz * 4) == 0);
    CHECK(memcmp(back->values, m->values, (size_t)m->nnz * 8) == 0);
    kd_csr_device_release(&d);
    kd_csr_device_release(&d); /* a released one again: a no-op */
    kd_csr_free(back);
    kd_csr_free(m);
    kd_csr_t *empty = kd_test_random_matrix(5, 4, (int64_t[]){0, 0, 0, 0, 0}, 0);
    REQUIRE(kd_csr_device_upload(ocl, empty, &d, &err) == KD_OK);
    CHECK(d.indptr != NULL && d.indices == NULL && d.values == NULL);
    REQUIRE(kd_csr_device_download(ocl, &d, &back, &err) == KD_OK);
    CHECK(back->nnz == 0 && back->indptr[5] == 0);
    kd_csr_device_release(&d);
    kd_csr_free(back);
    kd_csr_free(empty);
}

static void test_random_shapes(void)
{
    product_case("random 300x200 * 200x250", kd_test_random_matrix(300, 200, NULL, 4),
                 kd_test_random_matrix(200, 250, NULL, 5));
    int64_t la[400], lb[400];
    for (int i = 0; i < 400; i++) {
        la[i] = i % 3 == 0 ? 0 : kd_test_rand_below(12);
        lb[i] = i % 4 == 1 ? 0 : kd_test_rand_below(30);
    }
    product_case("empty rows in A and B", kd_test_random_matrix(400, 400, la, 0),
                 kd_test_random_matrix(400, 400, lb, 0));
    product_case("lap2d 40x40 squared", kd_test_laplacian_2d(40, 40), kd_test_laplacian_2d(40, 40));
    twice = 1;
    product_case("power law 1200", kd_test_power_law_matrix(1200, 1200),
                 kd_test_power_law_matrix(1200, 1200));
    twice = 0;
    product_case("tall 900x30 * 30x700", kd_test_random_matrix(900, 30, NULL, 3),
                 kd_test_random_matrix(30, 700, NULL, 60));
}

/* Rows for every bin: B rows of 1..200 entries, A rows of 1..40 entries. */
static void test_every_bin(void)
{
    int64_t n = 3000;
    int64_t *la = malloc((size_t)n * sizeof(int64_t)), *lb = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++) {
        la[i] = kd_test_rand_below(4) == 0 ? kd_test_rand_below(41) : kd_test_rand_below(4);
        lb[i] = kd_test_rand_below(8) == 0 ? kd_test_rand_below(200) : 1 + kd_test_rand_below(9);
    }
    twice = 1;
    product_case("every bin", kd_test_random_matrix(n, n, la, 0),
                 kd_test_random_matrix(n, n, lb, 0));
    twice = 0;
    free(la);
    free(lb);
}

/* Dense rows of A whose columns cannot fit a local table: the global bin, with more such rows
 * than work-groups and rows of several slices, and rows between (the whole-group bin). */
static void test_dense_rows(void)
{
    int64_t rows = 300, n = 5000;
    int64_t *la = malloc((size_t)rows * sizeof(int64_t));
    for (int64_t i = 0; i < rows; i++)
        la[i] = i % 29 == 7 ? n : i % 13 == 5 ? 300 : kd_test_rand_below(6);
    twice = 1;
    product_case("dense rows of A", kd_test_random_matrix(rows, n, la, 0),
                 kd_test_random_matrix(n, 4000, NULL, 2));
    twice = 0;
    free(la);
    int64_t one[1] = {6000};
    product_case("one dense row", kd_test_random_matrix(1, 6000, one, 0),
                 kd_test_random_matrix(6000, 6000, NULL, 1));
}

static void test_degenerate_shapes(void)
{
    product_case("1x1", kd_test_random_matrix(1, 1, (int64_t[]){1}, 0),
                 kd_test_random_matrix(1, 1, (int64_t[]){1}, 0));
    product_case("outer 300", ones(300, 1), ones(1, 300));
    product_case("outer 300x3000", ones(300, 1), ones(1, 3000));
    product_case("inner 3000", ones(1, 3000), ones(3000, 1));
    int64_t zeros[60] = {0};
    product_case("A nnz 0", kd_test_random_matrix(60, 50, zeros, 0),
                 kd_test_random_matrix(50, 40, NULL, 3));
    product_case("B nnz 0", kd_test_random_matrix(60, 50, NULL, 3),
                 kd_test_random_matrix(50, 40, zeros, 0));
    product_case("0 rows", kd_test_random_matrix(0, 50, NULL, 3),
                 kd_test_random_matrix(50, 40, NULL, 3));
    product_case("inner 0", kd_test_random_matrix(7, 0, NULL, 3),
                 kd_test_random_matrix(0, 9, NULL, 3));
    product_case("0 columns", kd_test_random_matrix(7, 5, NULL, 3),
                 kd_test_random_matrix(5, 0, NULL, 3));
}

/* Products that cancel exactly: C keeps those entries as explicit zeros. */
static void test_cancellation(void)
{
    kd_test_coo_t a = {3, 2, 0, 0, NULL, NULL, NULL}, b = {2, 3, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&a, 0, 0, 1.0);
    kd_test_coo_add(&a, 0, 1, 1.0);
    kd_test_coo_add(&a, 1, 0, 1.0);
    kd_test_coo_add(&a, 1, 1, -1.0);
    kd_test_coo_add(&a, 2, 1, 2.0);
    kd_test_coo_add(&b, 0, 0, 2.0);
    kd_test_coo_add(&b, 0, 2, -0.5);
    kd_test_coo_add(&b, 1, 0, 2.0);
    kd_test_coo_add(&b, 1, 2, 0.5);
    kd_csr_t *A = kd_test_coo_finish(&a), *B = kd_test_coo_finish(&b);
    kd_csr_t *C = NULL;
    kd_err_t err = {0};
    REQUIRE(device_product(A, B, NULL, &C, NULL, &err) == KD_OK);
    /* row 0: [4, 0, 0], row 1: [0, 0, -1], row 2: [4, 0, 1]: every column 0 and 2 entry kept */
    CHECK_EQ_INT(C->nnz, 6);
    int32_t ptr[4] = {0, 2, 4, 6}, cols[6] = {0, 2, 0, 2, 0, 2};
    double vals[6] = {4.0, 0.0, 0.0, -1.0, 4.0, 1.0};
    CHECK(memcmp(C->indptr, ptr, sizeof(ptr)) == 0);
    for (int t = 0; t < 6 && C->nnz == 6; t++) {
        CHECK_EQ_INT(C->indices[t], cols[t]);
        CHECK(kd_csr_value(C, t) == vals[t]);
    }
    kd_csr_free(C);
    product_case("cancelling", A, B);
}

static void test_real_matrices(void)
{
    static const char *files[] = {
        "494_bus.mtx", "dwt_878.mtx", "can___24.mtx",          "ani4.mtx",
        "bayer10.mtx", "rajat01.mtx", "adder_dcop_05.mtx",     "watt_2.mtx",
        "arrow.mtx",   "3by0.mtx",    "Franz6_id1959_aug.mtx", "Groebner_id2003_aug.mtx",
    };
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        kd_csr_t *A = kd_test_load_mtx(files[f], 0.0), *T = NULL;
        kd_err_t err = {0};
        REQUIRE(kd_csr_transpose(A, &T, &err) == KD_OK);
        char name[128];
        for (int op = 0; op < 2; op++) {
            const kd_csr_t *L = op == 0 ? A : T, *R = A;
            if (L->cols != R->rows)
                continue;
            snprintf(name, sizeof(name), "%s %s", files[f], op == 0 ? "A A" : "A^T A");
            int64_t products = host_products(L, R);
            if (products > KD_TEST_MAX_PRODUCTS && products <= KD_CSR_INDEX_MAX)
                continue; /* minutes on a 2-core CPU device; the bench covers large products */
            if (products > KD_CSR_INDEX_MAX) { /* arrow: the dense column times the dense row */
                kd_csr_device_t dL = {0}, dR = {0}, dC = {0};
                REQUIRE(kd_csr_device_upload(ocl, L, &dL, &err) == KD_OK);
                REQUIRE(kd_csr_device_upload(ocl, R, &dR, &err) == KD_OK);
                CHECK_EQ_INT(kd_spgemm(ocl, &dL, &dR, NULL, &dC, NULL, &err), KD_ETOOLARGE);
                CHECK(dC.indptr == NULL);
                kd_csr_device_release(&dL);
                kd_csr_device_release(&dR);
                continue;
            }
            kd_csr_t *L2 = NULL, *R2 = NULL;
            REQUIRE(kd_csr_convert(L, KD_DTYPE_F64, &L2, &err) == KD_OK);
            REQUIRE(kd_csr_convert(R, KD_DTYPE_F64, &R2, &err) == KD_OK);
            /* bayer10 in both: issue 32's race showed there (AVX-512 PoCL), in each precision */
            if (strcmp(files[f], "bayer10.mtx") != 0)
                only_dtype = op == 0 && kd_ocl_desc(ocl)->has_fp64 ? KD_DTYPE_F64 : KD_DTYPE_F32;
            product_case(name, L2, R2);
            only_dtype = -1;
        }
        kd_csr_free(T);
        kd_csr_free(A);
    }
}

static void test_bad_requests(void)
{
    kd_err_t err = {0};
    kd_csr_t *A = kd_test_random_matrix(20, 30, NULL, 3),
             *B = kd_test_random_matrix(31, 10, NULL, 3);
    kd_csr_t *B30 = kd_test_random_matrix(30, 10, NULL, 3), *B32 = NULL;
    REQUIRE(kd_csr_convert(B30, KD_DTYPE_F32, &B32, &err) == KD_OK);
    kd_csr_device_t dA = {0}, dB = {0}, dB32 = {0}, dC = {0};
    REQUIRE(kd_csr_device_upload(ocl, A, &dA, &err) == KD_OK);
    REQUIRE(kd_csr_device_upload(ocl, B, &dB, &err) == KD_OK);
    REQUIRE(kd_csr_device_upload(ocl, B32, &dB32, &err) == KD_OK);
    CHECK_EQ_INT(kd_spgemm(ocl, &dA, &dB, NULL, &dC, NULL, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "20 x 30");
    CHECK_STR_CONTAINS(err.message, "31 x 10");
    CHECK(dC.indptr == NULL);
    memset(&err, 0, sizeof(err));
    CHECK_EQ_INT(kd_spgemm(ocl, &dA, &dB32, NULL, &dC, NULL, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "float32");
    CHECK(dC.indptr == NULL);
    kd_csr_device_release(&dA);
    kd_csr_device_release(&dB);
    kd_csr_device_release(&dB32);
    kd_csr_free(A);
    kd_csr_free(B);
    kd_csr_free(B30);
    kd_csr_free(B32);
}

/* 50000 x 1 ones times 1 x 50000: 2.5e9 products. Refused before anything big exists: the
 * device-memory limit (4 MiB) would refuse C's 30 GB first otherwise. */
static void test_products_overflow(void)
{
    kd_err_t err = {0};
    int64_t n = 50000;
    kd_csr_t *col = ones(n, 1), *row = ones(1, n);
    kd_csr_device_t dA = {0}, dB = {0}, dC = {0};
    REQUIRE(kd_csr_device_upload(ocl, col, &dA, &err) == KD_OK);
    REQUIRE(kd_csr_device_upload(ocl, row, &dB, &err) == KD_OK);
    kd_spgemm_limits_t limits = {0, (size_t)4 << 20};
    kd_spgemm_stats_t stats;
    CHECK_EQ_INT(kd_spgemm(ocl, &dA, &dB, &limits, &dC, &stats, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "2500000000 products");
    CHECK(dC.indptr == NULL && dC.indices == NULL && dC.values == NULL);
    kd_csr_device_release(&dA);
    kd_csr_device_release(&dB);
    kd_csr_free(col);
    kd_csr_free(row);
}

static void test_limits(void)
{
    kd_err_t err = {0};
    kd_csr_t *A = kd_test_laplacian_2d(30, 30), *C = NULL;
    kd_spgemm_stats_t stats;
    REQUIRE(device_product(A, A, NULL, &C, &stats, &err) == KD_OK);
    int64_t nnz = C->nnz;
    size_t peak = stats.peak_device_bytes;
    kd_csr_free(C);
    CHECK(peak >= (size_t)nnz * 12);

    kd_spgemm_limits_t at = {nnz, peak};
    CHECK_EQ_INT(device_product(A, A, &at, &C, &stats, &err), KD_OK);
    CHECK(stats.peak_device_bytes <= peak);
    kd_csr_free(C);
    C = NULL;

    kd_spgemm_limits_t few = {nnz - 1, 0};
    memset(&err, 0, sizeof(err));
    CHECK_EQ_INT(device_product(A, A, &few, &C, NULL, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "max_nnz");
    CHECK(C == NULL);

    kd_spgemm_limits_t small = {0, peak - 1};
    memset(&err, 0, sizeof(err));
    CHECK_EQ_INT(device_product(A, A, &small, &C, NULL, &err), KD_EDEVMEM);
    CHECK_STR_CONTAINS(err.message, "max_device_bytes");
    CHECK(C == NULL);

    kd_spgemm_limits_t tiny = {0, (size_t)nnz * 4}; /* not even C's indices */
    memset(&err, 0, sizeof(err));
    CHECK_EQ_INT(device_product(A, A, &tiny, &C, NULL, &err), KD_EDEVMEM);
    kd_csr_free(A);
}

/* The global bin's bitmaps are scratch bounded by the limit: with room for fewer of them the
 * product is the same bits (fewer work-groups loop over more rows); with room for C alone it is
 * refused before C exists. */
static void test_limits_global(void)
{
    kd_err_t err = {0};
    int64_t rows = 40, n = 3000, *la = malloc((size_t)rows * sizeof(int64_t));
    for (int64_t i = 0; i < rows; i++)
        la[i] = i % 2 == 0 ? 2500 : 3;
    kd_csr_t *A = kd_test_random_matrix(rows, n, la, 0), *B = kd_test_random_matrix(n, n, NULL, 2);
    free(la);
    kd_csr_t *C = NULL, *C2 = NULL;
    kd_spgemm_stats_t stats;
    REQUIRE(device_product(A, B, NULL, &C, &stats, &err) == KD_OK);
    CHECK(stats.bin_rows[KD_SPGEMM_BIN_GLOBAL] > 0 &&
          stats.numeric_bin_rows[KD_SPGEMM_BIN_GLOBAL] > 0);
    size_t bitmap = (size_t)(n + 31) / 32 * 4;
    kd_spgemm_limits_t fewer = {0, stats.peak_device_bytes - bitmap};
    CHECK_EQ_INT(device_product(A, B, &fewer, &C2, &stats, &err), KD_OK);
    CHECK(stats.peak_device_bytes <= fewer.max_device_bytes);
    CHECK(C2 != NULL && C2->nnz == C->nnz &&
          memcmp(C2->indices, C->indices, (size_t)C->nnz * 4) == 0 &&
          memcmp(C2->values, C->values, (size_t)C->nnz * 8) == 0);
    kd_csr_free(C2);
    C2 = NULL;
    kd_spgemm_limits_t only_c = {0, (size_t)C->nnz * 12 + (size_t)(rows + 1) * 4};
    memset(&err, 0, sizeof(err));
    CHECK_EQ_INT(device_product(A, B, &only_c, &C2, NULL, &err), KD_EDEVMEM);
    CHECK_STR_CONTAINS(err.message, "max_device_bytes");
    CHECK(C2 == NULL);
    kd_csr_free(C);
    kd_csr_free(A);
    kd_csr_free(B);
}

static void test_bins_covered(void)
{
    for (int b = 0; b < KD_SPGEMM_BINS; b++) {
        CHECK_MSG(bins_seen[0][b] > 0, "no test row went to symbolic bin %d", b);
        CHECK_MSG(bins_seen[1][b] > 0, "no test row went to numeric bin %d", b);
    }
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_upload_download);
    RUN(test_bad_requests);
    RUN(test_cancellation);
    RUN(test_degenerate_shapes);
    RUN(test_random_shapes);
    RUN(test_every_bin);
    RUN(test_dense_rows);
    RUN(test_products_overflow);
    RUN(test_limits);
    RUN(test_limits_global);
    RUN(test_real_matrices);
    RUN(test_bins_covered);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
