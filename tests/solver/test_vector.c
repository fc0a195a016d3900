/*
 * Device vectors: host <-> device copies in the vector's own type and converted between float32
 * and float64, from and to unaligned host pointers (msgpack payloads carry no alignment);
 * zero-length vectors (no buffer at all); fill; and the refusals (negative length, a length
 * over the device's largest allocation, a non-float host type).
 */
#include "kd_solver_test.h"
#include "solver/vector.h"

static kd_ocl_t *ocl;

/* Round trip n values written as `wtype` through a `vtype` vector and read back as `rtype`, with
 * the host arrays one byte off alignment. */
static void roundtrip(int64_t n, kd_dtype_t vtype, kd_dtype_t wtype, kd_dtype_t rtype)
{
    kd_err_t err = {0};
    kd_vec_t v = {0};
    REQUIRE(kd_vec_alloc(ocl, n, vtype, &v, &err) == KD_OK);
    CHECK_EQ_INT(v.n, n);
    CHECK((n == 0) == (v.mem == NULL));
    unsigned char *in = malloc((size_t)n * 8 + 1), *out = malloc((size_t)n * 8 + 1);
    double *expect = malloc((size_t)n * sizeof(double) + 1);
    for (int64_t i = 0; i < n; i++) {
        double x = kd_test_rand_double(-1e3, 1e3);
        kd_store_real(in + 1, wtype, (size_t)i, x);
        /* What survives the trip: rounded to the narrowest of the three types. */
        double w = kd_load_real(in + 1, wtype, (size_t)i);
        if (vtype == KD_DTYPE_F32 || rtype == KD_DTYPE_F32)
            w = (double)(float)w;
        expect[i] = w;
    }
    memset(out, 0xff, (size_t)n * 8 + 1); /* NaN bytes in both types */
    CHECK(kd_vec_write(ocl, &v, in + 1, wtype, &err) == KD_OK);
    CHECK(kd_vec_read(ocl, &v, out + 1, rtype, &err) == KD_OK);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++)
        if (kd_load_real(out + 1, rtype, (size_t)i) != expect[i])
            bad++;
    CHECK_MSG(bad == 0, "n=%lld vec %s write %s read %s: %lld wrong", (long long)n,
              kd_dtype_name(vtype), kd_dtype_name(wtype), kd_dtype_name(rtype), (long long)bad);
    free(in);
    free(out);
    free(expect);
    kd_vec_release(&v);
    CHECK(v.mem == NULL && v.n == 0);
    kd_vec_release(&v); /* twice is fine */
}

static void test_roundtrips(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 257, 10007};
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (int a = 0; a < nd; a++)
            for (int b = 0; b < 2; b++)
                for (int c = 0; c < 2; c++)
                    roundtrip(sizes[s], dt[a], b ? KD_DTYPE_F32 : KD_DTYPE_F64,
                              c ? KD_DTYPE_F32 : KD_DTYPE_F64);
}

static void test_fill(void)
{
    kd_err_t err = {0};
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int d = 0; d < nd; d++) {
        kd_vec_t v = {0};
        REQUIRE(kd_vec_alloc(ocl, 1001, dt[d], &v, &err) == KD_OK);
        CHECK(kd_vec_fill(ocl, &v, -2.5, &err) == KD_OK);
        double *out = malloc(1001 * sizeof(double));
        CHECK(kd_vec_read(ocl, &v, out, KD_DTYPE_F64, &err) == KD_OK);
        int bad = 0;
        for (int i = 0; i < 1001; i++)
            bad += out[i] != -2.5;
        CHECK_EQ_INT(bad, 0);
        free(out);
        kd_vec_release(&v);

        kd_vec_t empty = {0};
        REQUIRE(kd_vec_alloc(ocl, 0, dt[d], &empty, &err) == KD_OK);
        CHECK(kd_vec_fill(ocl, &empty, 1.0, &err) == KD_OK);
        CHECK(kd_vec_write(ocl, &empty, NULL, KD_DTYPE_F64, &err) == KD_OK);
        CHECK(kd_vec_read(ocl, &empty, NULL, KD_DTYPE_F32, &err) == KD_OK);
        kd_vec_release(&empty);
    }
}

static void test_refusals(void)
{
    kd_err_t err = {0};
    kd_vec_t v = {0};
    CHECK_EQ_INT(kd_vec_alloc(ocl, -1, KD_DTYPE_F32, &v, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "negative");
    CHECK_EQ_INT(kd_vec_alloc(ocl, 10, KD_DTYPE_I32, &v, &err), KD_EINTERNAL);

    int64_t too_many = (int64_t)(kd_ocl_desc(ocl)->max_alloc_bytes / 4) + 1;
    CHECK_EQ_INT(kd_vec_alloc(ocl, too_many, KD_DTYPE_F32, &v, &err), KD_EDEVMEM);
    CHECK_STR_CONTAINS(err.message, "CL_DEVICE_MAX_MEM_ALLOC_SIZE");
    CHECK(v.mem == NULL);

    REQUIRE(kd_vec_alloc(ocl, 4, KD_DTYPE_F32, &v, &err) == KD_OK);
    int32_t ints[4] = {1, 2, 3, 4};
    CHECK_EQ_INT(kd_vec_write(ocl, &v, ints, KD_DTYPE_I32, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "int32");
    kd_vec_release(&v);
    kd_vec_release(NULL);
}

/* Transfers through the pinned staging buffer (on for a GPU, off for a CPU device: forced here):
 * sizes below, at and across its 16 MiB halves, several columns, offsets; fresh random data,
 * the device side poisoned first, checked byte for byte both ways; then kd_ocl_buffer_upload
 * (every matrix upload) of 40 MB read back. */
static void test_staged_transfers(void)
{
    static const int64_t sizes[] = {1,       131071,  131072,  524288, 524289,
                                    1179663, 2097151, 2097152, 2097153, 4718599};
    kd_err_t err = {0};
    kd_ocl_set_staging(ocl, 1);
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        const int64_t n = sizes[si], k = si % 3 == 0 ? 3 : 1;
        kd_multivec_t mv = {0};
        REQUIRE(kd_multivec_alloc(ocl, n, k, KD_DTYPE_F64, &mv, &err) == KD_OK);
        const size_t total = (size_t)(n * k);
        double *src = malloc(total * sizeof(double)), *back = malloc(total * sizeof(double));
        for (size_t i = 0; i < total; i++) {
            src[i] = kd_test_rand_double(-1e3, 1e3);
            back[i] = NAN;
        }
        const double poison = -7.5;
        REQUIRE(clEnqueueFillBuffer(kd_ocl_queue(ocl), mv.mem, &poison, sizeof(poison), 0,
                                    (size_t)(mv.ld * k) * sizeof(double), 0, NULL,
                                    NULL) == CL_SUCCESS);
        CHECK(kd_multivec_write(ocl, &mv, src, &err) == KD_OK);
        CHECK(kd_multivec_read(ocl, &mv, back, &err) == KD_OK);
        CHECK_MSG(memcmp(src, back, total * sizeof(double)) == 0, "n = %lld, k = %lld: differs",
                  (long long)n, (long long)k);
        /* the padding between columns is untouched */
        if (k > 1 && mv.ld > n) {
            double pad = 0.0;
            REQUIRE(clEnqueueReadBuffer(kd_ocl_queue(ocl), mv.mem, CL_TRUE,
                                        (size_t)n * sizeof(double), sizeof(pad), &pad, 0, NULL,
                                        NULL) == CL_SUCCESS);
            CHECK(pad == poison);
        }
        free(src);
        free(back);
        kd_multivec_release(&mv);
    }
    const size_t bytes = (size_t)40 << 20 | 12345;
    unsigned char *host = malloc(bytes), *back = malloc(bytes);
    REQUIRE(host != NULL && back != NULL);
    for (size_t i = 0; i < bytes; i++)
        host[i] = (unsigned char)kd_test_rand_below(256);
    memset(back, 0xa5, bytes);
    cl_mem mem = NULL;
    CHECK(kd_ocl_buffer_upload(ocl, CL_MEM_READ_WRITE, host, bytes, "a test array", &mem, &err) ==
          KD_OK);
    if (mem != NULL) {
        CHECK(kd_ocl_read(ocl, mem, 0, bytes, back, &err) == KD_OK);
        CHECK_MSG(memcmp(host, back, bytes) == 0, "a staged upload of %zu bytes differs", bytes);
        clReleaseMemObject(mem);
    }
    /* kd_vec_write/read (level vectors, the Lanczos start, ...) too, from float32 host values */
    {
        const int64_t n = 3000017;
        kd_vec_t v = {0};
        REQUIRE(kd_vec_alloc(ocl, n, KD_DTYPE_F64, &v, &err) == KD_OK);
        float *in = malloc((size_t)n * sizeof(float));
        double *out = malloc((size_t)n * sizeof(double));
        REQUIRE(in != NULL && out != NULL);
        for (int64_t i = 0; i < n; i++) {
            in[i] = (float)kd_test_rand_double(-1e3, 1e3);
            out[i] = NAN;
        }
        CHECK(kd_vec_write(ocl, &v, in, KD_DTYPE_F32, &err) == KD_OK);
        CHECK(kd_vec_read(ocl, &v, out, KD_DTYPE_F64, &err) == KD_OK);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += out[i] != (double)in[i];
        CHECK_MSG(bad == 0, "%lld of %lld values differ through a staged kd_vec", (long long)bad,
                  (long long)n);
        free(in);
        free(out);
        kd_vec_release(&v);
    }
    /* a buffer created with CL_MEM_COPY_HOST_PTR is filled through the staging buffer too */
    memset(back, 0x5a, bytes);
    mem = NULL;
    CHECK(kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host,
                               "a test array", &mem, &err) == KD_OK);
    if (mem != NULL) {
        CHECK(kd_ocl_read(ocl, mem, 0, bytes, back, &err) == KD_OK);
        CHECK_MSG(memcmp(host, back, bytes) == 0, "a buffer created from %zu host bytes differs",
                  bytes);
        clReleaseMemObject(mem);
    }
    free(host);
    free(back);
    kd_ocl_set_staging(ocl, kd_ocl_desc(ocl)->is_gpu);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_roundtrips);
    RUN(test_fill);
    RUN(test_refusals);
    RUN(test_staged_transfers);
    kd_ocl_close(ocl);
    kd_ocl_close(NULL);
    return kd_test_finish();
}
