/*
 * SpMV on the device against kd_csr_spmv_ref on the CPU, in float64 and float32, on matrices
 * that break naive kernels: empty rows, an all-empty matrix, one dense row among short ones, a
 * row 1000x the mean length, 1x1, n x 1, 1 x n, 0 x 0, 3 x 0, 0 x 3, row counts that are not
 * multiples of any work-group size, power-law rows, an arrow-head, a Laplacian. Every run has
 * fresh random inputs. y is poisoned with NaN when beta = 0 (every element must be written and
 * y never read), and y lives inside a larger buffer whose guard band past the last row must come
 * back untouched. Also: format names, device_bytes, and the argument checks.
 */
#include "kd_solver_test.h"
#include "solver/matrix.h"

static kd_ocl_t *ocl;

#define GUARD 67
#define SENTINEL (-4242.25)

/* Run y = alpha A x + beta y for csr (float64) converted to dtype; compare with the reference. */
static void spmv_case(const char *name, const kd_csr_t *csr64, kd_dtype_t dtype, double alpha,
                      double beta)
{
    kd_err_t err = {0};
    kd_csr_t *csr = NULL;
    kd_matrix_t *m = NULL;
    cl_mem ybuf = NULL;
    kd_vec_t x = {0};
    double *xw = NULL, *y0w = NULL, *ref = NULL, *got = NULL;
    void *xh = NULL, *y0h = NULL;
    int64_t rows = csr64->rows, cols = csr64->cols;
    size_t vsize = kd_dtype_size(dtype);

    REQUIRE(kd_csr_convert(csr64, dtype, &csr, &err) == KD_OK);
    int rc = kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &m, &err);
    CHECK_MSG(rc == KD_OK, "%s: upload: %s", name, err.message);
    if (rc != KD_OK)
        goto done;
    CHECK_EQ_INT(m->device_bytes,
                 (rows + 1) * 4 + csr->nnz * 4 + csr->nnz * (int64_t)kd_dtype_size(dtype));

    xh = kd_test_random_vector(cols, dtype, -1.0, 1.0, &xw);
    REQUIRE(kd_vec_alloc(ocl, cols, dtype, &x, &err) == KD_OK);
    REQUIRE(kd_vec_write(ocl, &x, xh, dtype, &err) == KD_OK);

    /* y: rows values (NaN when beta == 0, else random) followed by a guard band. */
    size_t total = (size_t)rows + GUARD;
    void *yinit = malloc(total * vsize);
    y0h = kd_test_random_vector(rows, dtype, -1.0, 1.0, &y0w);
    for (size_t i = 0; i < total; i++) {
        double vi = (int64_t)i < rows ? (beta == 0.0 ? NAN : y0w[i]) : SENTINEL;
        kd_store_real(yinit, dtype, i, vi);
    }
    REQUIRE(kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total * vsize,
                                 yinit, "y", &ybuf, &err) == KD_OK);
    kd_vec_t y = {ybuf, rows, dtype};

    rc = kd_matrix_spmv(ocl, m, alpha, &x, beta, &y, &err);
    CHECK_MSG(rc == KD_OK, "%s: spmv: %s", name, err.message);
    got = malloc(total * sizeof(double));
    void *yout = malloc(total * vsize);
    REQUIRE(clEnqueueReadBuffer(kd_ocl_queue(ocl), ybuf, CL_TRUE, 0, total * vsize, yout, 0, NULL,
                                NULL) == CL_SUCCESS);
    for (size_t i = 0; i < total; i++)
        got[i] = kd_load_real(yout, dtype, i);
    free(yout);
    free(yinit);

    ref = malloc(((size_t)rows + 1) * sizeof(double));
    for (int64_t i = 0; i < rows; i++)
        ref[i] = beta == 0.0 ? NAN : y0w[i];
    kd_csr_spmv_ref(csr, xw, alpha, beta, ref);

    int64_t bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        double bound = kd_test_spmv_row_bound(csr, dtype, alpha, xw, beta, y0w, r);
        if (!isfinite(got[r]) || fabs(got[r] - ref[r]) > bound) {
            if (bad++ < 5)
                fprintf(stderr, "%s %s alpha=%g beta=%g: y[%lld] = %.17g, expected %.17g\n", name,
                        kd_dtype_name(dtype), alpha, beta, (long long)r, got[r], ref[r]);
        }
    }
    CHECK_MSG(bad == 0, "%s (%s): %lld of %lld rows wrong", name, kd_dtype_name(dtype),
              (long long)bad, (long long)rows);
    int64_t guard_bad = 0;
    for (size_t i = (size_t)rows; i < total; i++)
        if (got[i] != SENTINEL)
            guard_bad++;
    CHECK_MSG(guard_bad == 0, "%s (%s): %lld guard values past row %lld were overwritten", name,
              kd_dtype_name(dtype), (long long)guard_bad, (long long)rows);

done:
    if (ybuf != NULL)
        clReleaseMemObject(ybuf);
    kd_vec_release(&x);
    kd_matrix_free(m);
    kd_csr_free(csr);
    free(xh);
    free(xw);
    free(y0h);
    free(y0w);
    free(ref);
    free(got);
}

/* Every dtype and a set of (alpha, beta) pairs, including beta = 0 over a NaN y. */
static void spmv_all(const char *name, kd_csr_t *csr64)
{
    static const double ab[][2] = {{1.0, 0.0}, {-2.5, 0.0}, {1.5, -0.75}, {1.0, 1.0}, {0.0, 2.0}};
    kd_dtype_t dtypes[2];
    int nd = kd_test_dtypes(ocl, dtypes);
    for (int d = 0; d < nd; d++)
        for (size_t k = 0; k < sizeof(ab) / sizeof(ab[0]); k++)
            spmv_case(name, csr64, dtypes[d], ab[k][0], ab[k][1]);
    kd_csr_free(csr64);
}

static void test_degenerate_shapes(void)
{
    spmv_all("0x0", kd_test_random_matrix(0, 0, NULL, 0));
    spmv_all("3x0", kd_test_random_matrix(3, 0, NULL, 0));
    spmv_all("0x3", kd_test_random_matrix(0, 3, NULL, 0));
    spmv_all("1x1", kd_test_random_matrix(1, 1, (int64_t[]){1}, 0));
    int64_t ones[1000];
    for (int i = 0; i < 1000; i++)
        ones[i] = 1;
    spmv_all("1000x1", kd_test_random_matrix(1000, 1, ones, 0));
    spmv_all("1x1000", kd_test_random_matrix(1, 1000, (int64_t[]){1000}, 0));
    spmv_all("1x1000 sparse", kd_test_random_matrix(1, 1000, (int64_t[]){17}, 0));
}

static void test_empty_rows(void)
{
    int64_t zeros[50] = {0};
    spmv_all("all-empty 50x40", kd_test_random_matrix(50, 40, zeros, 0));
    int64_t len[300];
    for (int i = 0; i < 300; i++)
        len[i] = i % 3 == 0 ? 0 : kd_test_rand_below(9);
    spmv_all("every third row empty", kd_test_random_matrix(300, 300, len, 0));
    int64_t last[100] = {0};
    last[99] = 5;
    spmv_all("only the last row", kd_test_random_matrix(100, 100, last, 0));
}

static void test_irregular_rows(void)
{
    int64_t n = 2000;
    int64_t *len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = kd_test_rand_below(6);
    len[777] = n; /* one dense row among short ones */
    spmv_all("one dense row", kd_test_random_matrix(n, n, len, 0));
    free(len);

    n = 5000;
    len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = 3;
    len[kd_test_rand_below(n)] = 3000; /* 1000x the mean */
    spmv_all("row 1000x the mean", kd_test_random_matrix(n, n, len, 0));
    free(len);

    spmv_all("power-law rows", kd_test_power_law_matrix(6000, 6000));
    spmv_all("arrow-head", kd_test_arrow_matrix(3001));
}

static void test_odd_row_counts(void)
{
    static const int64_t counts[] = {2, 7, 255, 257, 1009, 4099};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "random %lld rows", (long long)counts[i]);
        spmv_all(name, kd_test_random_matrix(counts[i], 333, NULL, 6));
    }
}

static void test_regular_and_rectangular(void)
{
    spmv_all("laplacian 37x29", kd_test_laplacian_2d(37, 29));
    spmv_all("tall 4967x2456", kd_test_random_matrix(4967, 2456, NULL, 20));
    spmv_all("wide 1000x20000", kd_test_random_matrix(1000, 20000, NULL, 30));
    spmv_all("random 20000x15000", kd_test_random_matrix(20000, 15000, NULL, 8));
}

static void test_format_names(void)
{
    static const char *names[] = {"csr_scalar", "csr_vector",   "csr_adaptive", "ell",
                                  "ellpack_r",  "sell_c_sigma", "hyb",          "coo",
                                  "tiled"};
    CHECK_EQ_INT(sizeof(names) / sizeof(names[0]), KD_FMT_COUNT);
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        kd_format_t parsed = KD_FMT_COUNT;
        CHECK(strcmp(kd_format_name((kd_format_t)f), names[f]) == 0);
        CHECK(kd_format_parse(names[f], &parsed) == 0);
        CHECK_EQ_INT(parsed, f);
        CHECK(kd_format_available((kd_format_t)f)); /* every format is built */
    }
    kd_format_t out;
    CHECK(kd_format_parse("csr", &out) == -1);
    CHECK(kd_format_parse("", &out) == -1);
    CHECK(kd_format_parse("CSR_SCALAR", &out) == -1);
    CHECK(strcmp(kd_format_name(KD_FMT_COUNT), "unknown") == 0);
    CHECK(!kd_format_available(KD_FMT_COUNT));
}

static void test_upload_and_argument_errors(void)
{
    kd_err_t err = {0};
    kd_csr_t *csr = kd_test_random_matrix(10, 8, NULL, 3);
    kd_matrix_t *m = NULL;
    CHECK_EQ_INT(kd_matrix_upload(ocl, csr, KD_FMT_COUNT, &m, &err), KD_EBADREQ);
    CHECK(m == NULL);

    kd_csr_t *c32 = NULL;
    REQUIRE(kd_csr_convert(csr, KD_DTYPE_F32, &c32, &err) == KD_OK);
    REQUIRE(kd_matrix_upload(ocl, c32, KD_FMT_CSR_SCALAR, &m, &err) == KD_OK);
    kd_vec_t x = {0}, y = {0}, x64 = {0}, yshort = {0};
    REQUIRE(kd_vec_alloc(ocl, 8, KD_DTYPE_F32, &x, &err) == KD_OK);
    REQUIRE(kd_vec_alloc(ocl, 10, KD_DTYPE_F32, &y, &err) == KD_OK);
    REQUIRE(kd_vec_alloc(ocl, 9, KD_DTYPE_F32, &yshort, &err) == KD_OK);
    CHECK_EQ_INT(kd_matrix_spmv(ocl, m, 1.0, &y, 0.0, &y, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "x has 10 entries but the matrix has 8 columns");
    CHECK_EQ_INT(kd_matrix_spmv(ocl, m, 1.0, &x, 0.0, &yshort, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "y has 9 entries but the matrix has 10 rows");
    if (kd_ocl_desc(ocl)->has_fp64) {
        REQUIRE(kd_vec_alloc(ocl, 8, KD_DTYPE_F64, &x64, &err) == KD_OK);
        CHECK_EQ_INT(kd_matrix_spmv(ocl, m, 1.0, &x64, 0.0, &y, &err), KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "float32");
    }
    kd_matrix_free(m);
    m = NULL;

    /* x and y in one buffer (square matrix) is refused. */
    kd_csr_t *sq = kd_test_random_matrix(10, 10, NULL, 3), *sq32 = NULL;
    REQUIRE(kd_csr_convert(sq, KD_DTYPE_F32, &sq32, &err) == KD_OK);
    REQUIRE(kd_matrix_upload(ocl, sq32, KD_FMT_CSR_SCALAR, &m, &err) == KD_OK);
    CHECK_EQ_INT(kd_matrix_spmv(ocl, m, 1.0, &y, 0.0, &y, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "different buffers");

    kd_matrix_free(m);
    m = NULL;

    /* float64 on a device without cl_khr_fp64. */
    kd_ocl_test_set_fp64(ocl, 0);
    CHECK_EQ_INT(kd_matrix_upload(ocl, sq, KD_FMT_CSR_SCALAR, &m, &err), KD_EUNSUPPORTED);
    CHECK_STR_CONTAINS(err.message, "cl_khr_fp64");
    CHECK(m == NULL);
    kd_vec_t v64 = {0};
    CHECK_EQ_INT(kd_vec_alloc(ocl, 10, KD_DTYPE_F64, &v64, &err), KD_EUNSUPPORTED);
    kd_ocl_test_set_fp64(ocl, 1);

    kd_matrix_free(NULL);
    kd_vec_release(&x);
    kd_vec_release(&y);
    kd_vec_release(&x64);
    kd_vec_release(&yshort);
    kd_csr_free(csr);
    kd_csr_free(c32);
    kd_csr_free(sq);
    kd_csr_free(sq32);
}

/* A matrix whose row would not fit one allocation is refused before anything is allocated. */
static void test_device_memory_errors(void)
{
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_ocl_fail(&err, CL_MEM_OBJECT_ALLOCATION_FAILURE, "x"), KD_EDEVMEM);
    CHECK_EQ_INT(kd_ocl_fail(&err, CL_OUT_OF_RESOURCES, "x"), KD_EDEVMEM);
    CHECK_EQ_INT(kd_ocl_fail(&err, CL_INVALID_BUFFER_SIZE, "x"), KD_EDEVMEM);
    CHECK_EQ_INT(kd_ocl_fail(&err, CL_INVALID_KERNEL_ARGS, "x"), KD_EDEVICE);
    CHECK_STR_CONTAINS(err.message, "CL_INVALID_KERNEL_ARGS");

    uint64_t max_alloc = kd_ocl_desc(ocl)->max_alloc_bytes;
    cl_mem mem = NULL;
    CHECK_EQ_INT(kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, (size_t)max_alloc + 1, NULL,
                                      "a test buffer", &mem, &err),
                 KD_EDEVMEM);
    CHECK(mem == NULL);
    CHECK_STR_CONTAINS(err.message, "a test buffer");
    CHECK_STR_CONTAINS(err.message, "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
    char bytes[32];
    snprintf(bytes, sizeof(bytes), "%llu", (unsigned long long)max_alloc + 1);
    CHECK_STR_CONTAINS(err.message, bytes);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_format_names);
    RUN(test_degenerate_shapes);
    RUN(test_empty_rows);
    RUN(test_irregular_rows);
    RUN(test_odd_row_counts);
    RUN(test_regular_and_rectangular);
    RUN(test_upload_and_argument_errors);
    RUN(test_device_memory_errors);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
