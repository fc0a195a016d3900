/*
 * BLAS-1 on the device against the CPU: dot, nrm2, axpy, xpay, copy, scale on sizes 0, 1, 2,
 * 255, 256, 257 and 10^5 + 3 with fresh random values, in float64 and float32. Outputs sit in
 * buffers with a NaN-poisoned guard band past n that must come back untouched, and copy's target
 * starts all NaN. Reductions are checked for bitwise reproducibility. (The solvers' fused steps
 * are tested in test_krylov.c.)
 */
#include "kd_solver_test.h"
#include "solver/blas.h"

static kd_ocl_t *ocl;

#define GUARD 41

/* A device vector of n values inside a buffer of n + GUARD, the guard poisoned with NaN. */
typedef struct guarded {
    kd_vec_t v;
    double *host; /* the n values as written (widened) */
} guarded_t;

static int guarded_make(guarded_t *g, int64_t n, kd_dtype_t dtype, double lo, double hi,
                        int poison_all)
{
    kd_err_t err = {0};
    size_t vsize = kd_dtype_size(dtype), total = (size_t)n + GUARD;
    void *init = malloc(total * vsize);
    g->host = malloc(((size_t)n + 1) * sizeof(double));
    for (size_t i = 0; i < total; i++) {
        double x = (int64_t)i < n && !poison_all ? kd_test_rand_double(lo, hi) : NAN;
        kd_store_real(init, dtype, i, x);
        if ((int64_t)i < n)
            g->host[i] = kd_load_real(init, dtype, i);
    }
    cl_mem mem = NULL;
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total * vsize,
                                  init, "test vector", &mem, &err);
    free(init);
    g->v.mem = mem;
    g->v.n = n;
    g->v.dtype = dtype;
    return rc;
}

/* Read all n + GUARD values; returns the number of guard values that are no longer NaN. */
static int64_t guarded_read(const guarded_t *g, double *out)
{
    size_t vsize = kd_dtype_size(g->v.dtype), total = (size_t)g->v.n + GUARD;
    void *raw = malloc(total * vsize);
    cl_int st = clEnqueueReadBuffer(kd_ocl_queue(ocl), g->v.mem, CL_TRUE, 0, total * vsize, raw, 0,
                                    NULL, NULL);
    CHECK(st == CL_SUCCESS);
    int64_t touched = 0;
    for (size_t i = 0; i < total; i++) {
        double x = kd_load_real(raw, g->v.dtype, i);
        if ((int64_t)i < g->v.n)
            out[i] = x;
        else if (!isnan(x))
            touched++;
    }
    free(raw);
    return touched;
}

static void guarded_free(guarded_t *g)
{
    if (g->v.mem != NULL)
        clReleaseMemObject(g->v.mem);
    free(g->host);
    memset(g, 0, sizeof(*g));
}

static double tol_of(kd_dtype_t dtype)
{
    return dtype == KD_DTYPE_F64 ? 1e-14 : 2e-6;
}

static void blas_size(kd_blas_t *blas, int64_t n)
{
    kd_err_t err = {0};
    kd_dtype_t dtype = blas->dtype;
    guarded_t x = {0}, y = {0};
    double *out = malloc(((size_t)n + 1) * sizeof(double));
    REQUIRE(guarded_make(&x, n, dtype, -1.0, 1.0, 0) == KD_OK);
    REQUIRE(guarded_make(&y, n, dtype, -1.0, 1.0, 0) == KD_OK);
    const double tol = tol_of(dtype);
    const char *dn = kd_dtype_name(dtype);

    /* dot and nrm2: error bounded relative to sum |x_i y_i| (log-depth tree + short chains). */
    double ref = 0.0, mag = 0.0, sq = 0.0;
    for (int64_t i = 0; i < n; i++) {
        ref += x.host[i] * y.host[i];
        mag += fabs(x.host[i] * y.host[i]);
        sq += x.host[i] * x.host[i];
    }
    double dot = NAN, dot2 = NAN, nrm = NAN;
    CHECK(kd_blas_dot(blas, &x.v, &y.v, &dot, &err) == KD_OK);
    CHECK_MSG(fabs(dot - ref) <= 10 * tol * mag + 1e-300, "%s n=%lld dot %.17g vs %.17g", dn,
              (long long)n, dot, ref);
    CHECK(kd_blas_dot(blas, &x.v, &y.v, &dot2, &err) == KD_OK);
    CHECK_MSG(memcmp(&dot, &dot2, sizeof(dot)) == 0, "%s n=%lld dot not reproducible", dn,
              (long long)n);
    CHECK(kd_blas_nrm2(blas, &x.v, &nrm, &err) == KD_OK);
    CHECK_MSG(fabs(nrm - sqrt(sq)) <= 10 * tol * sqrt(sq) + 1e-300, "%s n=%lld nrm2 %.17g vs %.17g",
              dn, (long long)n, nrm, sqrt(sq));
    if (n == 0)
        CHECK(dot == 0.0 && nrm == 0.0);

    /* dot into a device slot, read back separately. */
    double slot = NAN;
    CHECK(kd_blas_dot_to(blas, &x.v, &y.v, KD_BLAS_SLOT_3, &err) == KD_OK);
    CHECK(kd_blas_read_slot(blas, KD_BLAS_SLOT_3, &slot, &err) == KD_OK);
    CHECK(memcmp(&slot, &dot, sizeof(dot)) == 0);

    /* axpy: y = a x + y */
    double a = kd_test_rand_double(-3.0, 3.0);
    double av = dtype == KD_DTYPE_F32 ? (double)(float)a : a;
    CHECK(kd_blas_axpy(blas, a, &x.v, &y.v, &err) == KD_OK);
    CHECK_EQ_INT(guarded_read(&y, out), 0);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = av * x.host[i] + y.host[i];
        if (!(fabs(out[i] - e) <= 4 * tol * (fabs(av * x.host[i]) + fabs(y.host[i])) + 1e-300))
            bad++;
        y.host[i] = out[i];
    }
    CHECK_MSG(bad == 0, "%s n=%lld axpy: %lld wrong", dn, (long long)n, (long long)bad);

    /* xpay: y = x + a y */
    CHECK(kd_blas_xpay(blas, &x.v, a, &y.v, &err) == KD_OK);
    CHECK_EQ_INT(guarded_read(&y, out), 0);
    bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = x.host[i] + av * y.host[i];
        if (!(fabs(out[i] - e) <= 4 * tol * (fabs(av * y.host[i]) + fabs(x.host[i])) + 1e-300))
            bad++;
        y.host[i] = out[i];
    }
    CHECK_MSG(bad == 0, "%s n=%lld xpay: %lld wrong", dn, (long long)n, (long long)bad);

    /* scale: y = a y */
    CHECK(kd_blas_scale(blas, a, &y.v, &err) == KD_OK);
    CHECK_EQ_INT(guarded_read(&y, out), 0);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(out[i] - av * y.host[i]) <= 2 * tol * fabs(av * y.host[i]) + 1e-300))
            bad++;
    CHECK_MSG(bad == 0, "%s n=%lld scale: %lld wrong", dn, (long long)n, (long long)bad);

    /* copy into an all-NaN target: every element written, exactly. */
    guarded_t z = {0};
    REQUIRE(guarded_make(&z, n, dtype, 0, 0, 1) == KD_OK);
    CHECK(kd_blas_copy(blas, &x.v, &z.v, &err) == KD_OK);
    CHECK_EQ_INT(guarded_read(&z, out), 0);
    bad = 0;
    for (int64_t i = 0; i < n; i++)
        bad += out[i] != x.host[i];
    CHECK_MSG(bad == 0, "%s n=%lld copy: %lld wrong", dn, (long long)n, (long long)bad);
    guarded_free(&z);

    guarded_free(&x);
    guarded_free(&y);
    free(out);
}

static void test_blas_sizes(void)
{
    static const int64_t sizes[] = {0, 1, 2, 255, 256, 257, 100003};
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        kd_blas_t blas;
        kd_err_t err = {0};
        REQUIRE(kd_blas_init(ocl, dt[d], &blas, &err) == KD_OK);
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
            blas_size(&blas, sizes[s]);
        kd_blas_release(&blas);
        kd_blas_release(&blas);
    }
}

static void test_blas_argument_errors(void)
{
    kd_err_t err = {0};
    kd_blas_t blas;
    REQUIRE(kd_blas_init(ocl, KD_DTYPE_F32, &blas, &err) == KD_OK);
    kd_vec_t a = {0}, b = {0};
    REQUIRE(kd_vec_alloc(ocl, 10, KD_DTYPE_F32, &a, &err) == KD_OK);
    REQUIRE(kd_vec_alloc(ocl, 11, KD_DTYPE_F32, &b, &err) == KD_OK);
    double out;
    CHECK_EQ_INT(kd_blas_dot(&blas, &a, &b, &out, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "lengths differ (10 and 11)");
    CHECK_EQ_INT(kd_blas_axpy(&blas, 1.0, &a, &b, &err), KD_EBADREQ);
    kd_vec_release(&a);
    kd_vec_release(&b);
    if (kd_ocl_desc(ocl)->has_fp64) {
        REQUIRE(kd_vec_alloc(ocl, 10, KD_DTYPE_F64, &a, &err) == KD_OK);
        CHECK_EQ_INT(kd_blas_scale(&blas, 2.0, &a, &err), KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "float32");
        kd_vec_release(&a);
    }
    kd_blas_release(&blas);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_blas_sizes);
    RUN(test_blas_argument_errors);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
