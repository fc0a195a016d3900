/*
 * New values on a held pattern (solver/matrix_values.c, issue 22): for every format that shares
 * its pattern, in float64 and float32, with and without a reordering, on matrices that break
 * naive code (empty rows, one dense row, 1x1, n x 1, power-law rows), a matrix made by
 * kd_matrix_with_values from fresh random values must
 *   - multiply like the CPU reference of those values (y poisoned first),
 *   - multiply bit for bit like the same values uploaded from scratch in the same format (the
 *     same slots hold the same numbers),
 *   - hold fewer device bytes than that upload by at least its column indices (its pattern is the
 *     like matrix's),
 *   - keep working, and carry the shared bytes, once the like matrix is freed, and serve as the
 *     like matrix of a third version.
 * The float32 probe's two-pass split (positions past 2^24) is forced on small matrices with
 * KD_TEST_PROBE_SPLIT so that its decoding runs here. Tiled, which does not share, refuses with
 * KD_EUNSUPPORTED (the server then builds from the CSR).
 */
#include "kd_solver_test.h"
#include "solver/formats/format.h"
#include "solver/matrix.h"

#include <stdlib.h>

static kd_ocl_t *ocl;

/* A copy of csr's pattern with fresh random values (some exactly zero: explicit zeros stay). */
static kd_csr_t *new_values(const kd_csr_t *csr)
{
    kd_err_t err = {0};
    kd_csr_t *out = NULL;
    MUST(kd_csr_convert(csr, csr->dtype, &out, &err) == KD_OK);
    for (int64_t k = 0; k < out->nnz; k++) {
        double v = kd_test_rand_below(11) == 0 ? 0.0 : kd_test_rand_double(-2.0, 2.0);
        kd_store_real(out->values, out->dtype, (size_t)k, v);
    }
    return out;
}

/* y = A x on the device (y poisoned with NaN first), into a new host array of rows values. */
static void *device_spmv(const kd_matrix_t *m, const void *xh)
{
    kd_err_t err = {0};
    size_t vsize = kd_dtype_size(m->dtype);
    kd_vec_t x = {0}, y = {0};
    void *yh = malloc((size_t)m->rows * vsize + 1);
    for (int64_t i = 0; i < m->rows; i++)
        kd_store_real(yh, m->dtype, (size_t)i, NAN);
    MUST(kd_vec_alloc(ocl, m->cols, m->dtype, &x, &err) == KD_OK);
    MUST(kd_vec_alloc(ocl, m->rows, m->dtype, &y, &err) == KD_OK);
    MUST(kd_vec_write(ocl, &x, xh, m->dtype, &err) == KD_OK);
    MUST(kd_vec_write(ocl, &y, yh, m->dtype, &err) == KD_OK);
    int rc = kd_matrix_spmv(ocl, m, 1.0, &x, 0.0, &y, &err);
    CHECK_MSG(rc == KD_OK, "spmv: %s", err.message);
    MUST(kd_vec_read(ocl, &y, yh, m->dtype, &err) == KD_OK);
    kd_vec_release(&x);
    kd_vec_release(&y);
    return yh;
}

/* m multiplies like csr on the CPU, and bit for bit like `fresh` when given. */
static void check_values(const char *what, const kd_matrix_t *m, const kd_csr_t *csr,
                         const kd_matrix_t *fresh)
{
    double *xw = NULL;
    void *xh = kd_test_random_vector(csr->cols, csr->dtype, -1.0, 1.0, &xw);
    void *y = device_spmv(m, xh);
    void *yf = fresh != NULL ? device_spmv(fresh, xh) : NULL;
    double *ref = calloc((size_t)csr->rows + 1, sizeof(double));
    kd_csr_spmv_ref(csr, xw, 1.0, 0.0, ref);
    int64_t bad = 0, differ = 0;
    for (int64_t r = 0; r < csr->rows; r++) {
        double got = kd_load_real(y, csr->dtype, (size_t)r);
        double bound = kd_test_spmv_row_bound(csr, csr->dtype, 1.0, xw, 0.0, NULL, r);
        bad += !(fabs(got - ref[r]) <= bound);
        if (yf != NULL)
            differ += memcmp((char *)y + (size_t)r * kd_dtype_size(csr->dtype),
                             (char *)yf + (size_t)r * kd_dtype_size(csr->dtype),
                             kd_dtype_size(csr->dtype)) != 0;
    }
    CHECK_MSG(bad == 0, "%s %s %s: %lld of %lld rows differ from the CPU", what,
              kd_format_name(m->format), kd_dtype_name(csr->dtype), (long long)bad,
              (long long)csr->rows);
    CHECK_MSG(differ == 0, "%s %s %s: %lld rows differ from a fresh upload", what,
              kd_format_name(m->format), kd_dtype_name(csr->dtype), (long long)differ);
    free(xh);
    free(xw);
    free(y);
    free(yf);
    free(ref);
}

static int upload(const kd_csr_t *csr, kd_format_t f, kd_reorder_t order, kd_matrix_t **m)
{
    kd_err_t err = {0};
    int rc = kd_matrix_upload_reordered(ocl, csr, f, order, m, &err);
    CHECK_MSG(rc == KD_OK, "upload %s: %s", kd_format_name(f), err.message);
    return rc;
}

/* kd_matrix_values_canonical: m's values back in canonical order from its format's arrays, into a
 * poisoned buffer, equal to want's byte for byte; a reordered matrix says it cannot. */
static void check_canonical(const char *name, const kd_matrix_t *m, const kd_csr_t *want)
{
    kd_err_t err = {0};
    const size_t bytes = (size_t)want->nnz * kd_dtype_size(want->dtype);
    cl_mem out = NULL;
    REQUIRE(kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, "test", &out, &err) == KD_OK);
    const unsigned char poison = 0xa5;
    REQUIRE(clEnqueueFillBuffer(kd_ocl_queue(ocl), out, &poison, 1, 0, bytes, 0, NULL, NULL) ==
            CL_SUCCESS);
    const int rc = kd_matrix_values_canonical(ocl, m, out, &err);
    if (m->order.kind != KD_REORDER_NONE) {
        CHECK_MSG(rc == KD_EUNSUPPORTED, "%s %s reordered: canonical values %d", name,
                  kd_format_name(m->format), rc);
    } else {
        CHECK_MSG(rc == KD_OK, "%s %s: canonical values: %s", name, kd_format_name(m->format),
                  err.message);
        unsigned char *got = malloc(bytes);
        REQUIRE(got != NULL);
        CHECK(kd_ocl_read(ocl, out, 0, bytes, got, &err) == KD_OK);
        CHECK_MSG(memcmp(got, want->values, bytes) == 0, "%s %s: canonical values differ", name,
                  kd_format_name(m->format));
        free(got);
    }
    clReleaseMemObject(out);
}

static void values_case(const char *name, const kd_csr_t *a, kd_format_t f, kd_reorder_t order)
{
    kd_err_t err = {0};
    kd_matrix_t *like = NULL, *fresh = NULL, *m = NULL, *third = NULL;
    kd_csr_t *b = new_values(a), *c = new_values(a);
    if (upload(a, f, order, &like) != KD_OK || upload(b, f, order, &fresh) != KD_OK)
        goto out;
    const size_t planned = kd_matrix_values_bytes(like);
    int rc = kd_matrix_with_values(ocl, like, b, &m, NULL, &err);
    if (f == KD_FMT_TILED || a->nnz == 0) {
        CHECK_MSG(rc == KD_EUNSUPPORTED, "%s %s: expected KD_EUNSUPPORTED, got %d", name,
                  kd_format_name(f), rc);
        goto out;
    }
    CHECK_MSG(rc == KD_OK, "%s %s: with_values: %s", name, kd_format_name(f), err.message);
    if (rc != KD_OK)
        goto out;
    CHECK_EQ_INT(m->format, f);
    CHECK_EQ_INT(m->order.kind, order);
    CHECK(kd_matrix_shares(m) && kd_matrix_shares(like));
    CHECK_MSG(m->device_bytes <= planned, "%s %s: planned %zu bytes, took %zu", name,
              kd_format_name(f), planned, m->device_bytes);
    check_values(name, m, b, fresh);
    check_values(name, like, a, NULL); /* the like matrix keeps its own values */
    check_canonical(name, m, b);
    /* the column indices at least are not held twice */
    CHECK_MSG(m->device_bytes + (size_t)a->nnz * sizeof(int32_t) <= fresh->device_bytes,
              "%s %s: the new values hold %zu device bytes, a fresh upload %zu", name,
              kd_format_name(f), m->device_bytes, fresh->device_bytes);
    CHECK(m->scan.symmetric == fresh->scan.symmetric);
    CHECK(m->scan.non_finite_count == fresh->scan.non_finite_count);
    if (fresh->inv_diagonal != NULL)
        CHECK(m->inv_diagonal != NULL && memcmp(m->inv_diagonal, fresh->inv_diagonal,
                                                (size_t)a->rows * kd_dtype_size(a->dtype)) == 0);
    size_t before = m->device_bytes;
    kd_matrix_free(like); /* the pattern lives on in m, which now carries its bytes */
    like = NULL;
    CHECK(m->device_bytes > before && m->device_bytes >= fresh->device_bytes);
    check_values(name, m, b, fresh);
    rc = kd_matrix_with_values(ocl, m, c, &third, NULL, &err);
    CHECK_MSG(rc == KD_OK, "%s %s: a third version: %s", name, kd_format_name(f), err.message);
    if (rc == KD_OK)
        check_values(name, third, c, NULL);
out:
    kd_matrix_free(like);
    kd_matrix_free(m);
    kd_matrix_free(third);
    kd_matrix_free(fresh);
    kd_csr_free(b);
    kd_csr_free(c);
}

static void every_format(const char *name, kd_csr_t *a64)
{
    kd_dtype_t dtypes[2];
    int nd = kd_test_dtypes(ocl, dtypes);
    for (int d = 0; d < nd; d++) {
        kd_err_t err = {0};
        kd_csr_t *a = NULL;
        REQUIRE(kd_csr_convert(a64, dtypes[d], &a, &err) == KD_OK);
        for (int f = 0; f < KD_FMT_COUNT; f++) {
            values_case(name, a, (kd_format_t)f, KD_REORDER_NONE);
            if (a->rows == a->cols && a->rows > 1)
                values_case(name, a, (kd_format_t)f, KD_REORDER_RCM);
        }
        kd_csr_free(a);
    }
    kd_csr_free(a64);
}

static void test_shapes(void)
{
    every_format("1x1", kd_test_random_matrix(1, 1, (int64_t[]){1}, 0));
    int64_t ones[500];
    for (int i = 0; i < 500; i++)
        ones[i] = 1;
    every_format("500x1", kd_test_random_matrix(500, 1, ones, 0));
    int64_t len[300];
    for (int i = 0; i < 300; i++)
        len[i] = i % 3 == 0 ? 0 : 1 + kd_test_rand_below(8);
    len[7] = 300; /* one dense row */
    every_format("empty rows + one dense row", kd_test_random_matrix(300, 300, len, 0));
    every_format("laplacian 2d", kd_test_laplacian_2d(23, 19));
    every_format("power law", kd_test_power_law_matrix(400, 400));
    every_format("empty", kd_test_random_matrix(40, 40, (int64_t[40]){0}, 0));
}

/* float32 positions past 2^24 take two probe builds; force them on a small matrix. */
static void test_probe_split(void)
{
    setenv("KD_TEST_PROBE_SPLIT", "1", 1);
    every_format("split probe", kd_test_random_matrix(200, 200, NULL, 5));
    unsetenv("KD_TEST_PROBE_SPLIT");
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_shapes);
    RUN(test_probe_split);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
