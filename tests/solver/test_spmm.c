/*
 * Several columns at once (kd_matrix_spmm, the formats' spmm op) against kd_csr_spmv_ref column
 * by column on the CPU, for every available format (those without an SpMM kernel go column by
 * column, which must agree too), with and without a reordering, in float64 and float32, for k
 * on both sides of the kernels' chunk of 8 (1, 3, 8, 9, 17), on matrices that break naive
 * kernels: empty rows, one dense row, 1x1, n x 1, 1 x n, rectangular. Fresh random inputs every
 * run; Y is poisoned with NaN when beta = 0 (every element written, none read), and the padding
 * between Y's columns must come back untouched (no column writes into another's).
 */
#include "kd_solver_test.h"
#include "solver/matrix.h"

#include <math.h>

static kd_ocl_t *ocl;

#define SENTINEL (-4242.25)

static void spmm_case(const char *name, const kd_csr_t *csr64, kd_format_t format,
                      kd_reorder_t order, kd_dtype_t dtype, int64_t k, double alpha, double beta)
{
    kd_err_t err = {0};
    kd_csr_t *csr = NULL;
    kd_matrix_t *m = NULL;
    kd_multivec_t X = {0}, Y = {0};
    const int64_t rows = csr64->rows, cols = csr64->cols;
    const size_t vsize = kd_dtype_size(dtype);
    REQUIRE(kd_csr_convert(csr64, dtype, &csr, &err) == KD_OK);
    int rc = order == KD_REORDER_NONE ? kd_matrix_upload(ocl, csr, format, &m, &err)
                                      : kd_matrix_upload_reordered(ocl, csr, format, order, &m,
                                                                   &err);
    if (rc == KD_EUNSUPPORTED || (rc == KD_EBADREQ && order != KD_REORDER_NONE)) {
        kd_csr_free(csr); /* metis absent, or a reordering of a rectangular matrix */
        return;
    }
    CHECK_MSG(rc == KD_OK, "%s %s: upload: %s", name, kd_format_name(format), err.message);
    if (rc != KD_OK) {
        kd_csr_free(csr);
        return;
    }
    REQUIRE(kd_multivec_alloc(ocl, cols, k, dtype, &X, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, rows, k, dtype, &Y, &err) == KD_OK);
    /* X random (column-major, n x k); Y: random or NaN in the columns, SENTINEL in the padding. */
    double *xw = NULL;
    void *xh = kd_test_random_vector(cols * k, dtype, -1.0, 1.0, &xw);
    if (cols > 0)
        REQUIRE(kd_multivec_write(ocl, &X, xh, &err) == KD_OK);
    double *y0w = NULL;
    void *y0h = kd_test_random_vector(rows * k, dtype, -1.0, 1.0, &y0w);
    const size_t total = (size_t)(Y.ld * k);
    void *yinit = malloc(total * vsize + 8), *yout = malloc(total * vsize + 8);
    for (size_t i = 0; i < total; i++) {
        const int64_t c = (int64_t)i / Y.ld, r = (int64_t)i % Y.ld;
        kd_store_real(yinit, dtype, i,
                      r < rows ? (beta == 0.0 ? NAN : y0w[c * rows + r]) : SENTINEL);
    }
    if (rows > 0)
        REQUIRE(clEnqueueWriteBuffer(kd_ocl_queue(ocl), Y.mem, CL_TRUE, 0, total * vsize, yinit,
                                     0, NULL, NULL) == CL_SUCCESS);
    rc = kd_matrix_spmm(ocl, m, alpha, &X, beta, &Y, &err);
    CHECK_MSG(rc == KD_OK, "%s %s: spmm: %s", name, kd_format_name(format), err.message);
    if (rc == KD_OK && rows > 0) {
        REQUIRE(clEnqueueReadBuffer(kd_ocl_queue(ocl), Y.mem, CL_TRUE, 0, total * vsize, yout, 0,
                                    NULL, NULL) == CL_SUCCESS);
        double *ref = malloc((size_t)rows * sizeof(double));
        const double tol = dtype == KD_DTYPE_F64 ? 1e-12 : 2e-5;
        int bad = 0;
        for (int64_t c = 0; c < k && !bad; c++) {
            for (int64_t r = 0; r < rows; r++)
                ref[r] = y0w[c * rows + r];
            kd_csr_spmv_ref(csr64, xw + c * cols, alpha, beta, ref);
            double scale = 1.0;
            for (int64_t r = 0; r < rows; r++)
                scale = fmax(scale, fabs(ref[r]));
            for (int64_t r = 0; r < Y.ld && !bad; r++) {
                const double got = kd_load_real(yout, dtype, (size_t)(c * Y.ld + r));
                if (r >= rows)
                    bad = got != SENTINEL;
                else
                    bad = !(fabs(got - ref[r]) <= tol * scale * (1.0 + sqrt((double)cols)));
                CHECK_MSG(!bad, "%s %s%s %s k=%lld a=%g b=%g: col %lld row %lld: %.17g, want %.17g",
                          name, kd_format_name(format), order != KD_REORDER_NONE ? "+rcm" : "",
                          kd_dtype_name(dtype), (long long)k, alpha, beta, (long long)c,
                          (long long)r, got, r < rows ? ref[r] : SENTINEL);
            }
        }
        free(ref);
    }
    free(xh);
    free(xw);
    free(y0h);
    free(y0w);
    free(yinit);
    free(yout);
    kd_multivec_release(&X);
    kd_multivec_release(&Y);
    kd_matrix_free(m);
    kd_csr_free(csr);
}

/* Every format, k and dtype, two (alpha, beta) pairs each (beta = 0 over NaN, and beta != 0). */
static void spmm_all(const char *name, kd_csr_t *csr64)
{
    static const int64_t ks[] = {1, 3, 8, 9, 17};
    static const double ab[][2] = {{1.0, 0.0}, {-1.5, 0.75}};
    kd_dtype_t dtypes[2];
    const int nd = kd_test_dtypes(ocl, dtypes);
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        if (!kd_format_available((kd_format_t)f))
            continue;
        for (int d = 0; d < nd; d++)
            for (size_t ki = 0; ki < sizeof(ks) / sizeof(ks[0]); ki++)
                spmm_case(name, csr64, (kd_format_t)f, KD_REORDER_NONE, dtypes[d], ks[ki],
                          ab[ki % 2][0], ab[ki % 2][1]);
        /* A reordered matrix: its client-order SpMM gathers and scatters each column. */
        if (csr64->rows == csr64->cols && csr64->rows > 1)
            spmm_case(name, csr64, (kd_format_t)f, KD_REORDER_RCM, dtypes[0], 9, 1.0, 0.5);
    }
    kd_csr_free(csr64);
}

static void test_shapes(void)
{
    spmm_all("1x1", kd_test_random_matrix(1, 1, (int64_t[]){1}, 0));
    int64_t ones[300];
    for (int i = 0; i < 300; i++)
        ones[i] = 1;
    spmm_all("300x1", kd_test_random_matrix(300, 1, ones, 0));
    spmm_all("1x700", kd_test_random_matrix(1, 700, (int64_t[]){700}, 0));
    spmm_all("tall 1531x402", kd_test_random_matrix(1531, 402, NULL, 7));
}

static void test_irregular(void)
{
    int64_t len[777];
    for (int i = 0; i < 777; i++)
        len[i] = i % 3 == 0 ? 0 : kd_test_rand_below(9);
    len[333] = 777; /* one dense row among short and empty ones */
    spmm_all("empty rows and a dense row", kd_test_random_matrix(777, 777, len, 0));
    spmm_all("power-law rows", kd_test_power_law_matrix(2000, 2000));
    spmm_all("laplacian 37x29", kd_test_laplacian_2d(37, 29));
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_shapes);
    RUN(test_irregular);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
