/*
 * The multivector pool (solver/runtime/pool.h) and the column-range transfers the spmv groups use:
 * a multivector given back comes back for the same shape (same buffer, views intact) and never for
 * another; the pool stays under its byte limit, drops the least recently given back first, keeps
 * nothing over its item limit, and empties on clear; and columns written and read by range land
 * exactly where they belong (neighbours poisoned first stay untouched).
 */
#include "kd_solver_test.h"
#include "solver/runtime/pool.h"

static kd_ocl_t *ocl;

static void test_reuse_by_shape(void)
{
    kd_err_t err = {0};
    kd_pool_t *pool = kd_pool_new(1 << 20, 1 << 20);
    REQUIRE(pool != NULL);
    kd_multivec_t a, b;
    REQUIRE(kd_pool_get(pool, ocl, 100, 3, KD_DTYPE_F64, &a, &err) == KD_OK);
    cl_mem mem = a.mem;
    kd_pool_put(pool, &a);
    CHECK(a.mem == NULL && a.cols == NULL);
    CHECK(kd_pool_bytes(pool) > 0);
    /* another shape or dtype: a new one (the pooled one is still held) */
    REQUIRE(kd_pool_get(pool, ocl, 100, 2, KD_DTYPE_F64, &b, &err) == KD_OK);
    CHECK(b.mem != mem);
    kd_multivec_release(&b);
    REQUIRE(kd_pool_get(pool, ocl, 100, 3, KD_DTYPE_F32, &b, &err) == KD_OK);
    CHECK(b.mem != mem);
    kd_multivec_release(&b);
    CHECK(kd_pool_bytes(pool) > 0);
    /* the same shape: the same buffer, its views usable */
    REQUIRE(kd_pool_get(pool, ocl, 100, 3, KD_DTYPE_F64, &b, &err) == KD_OK);
    CHECK(b.mem == mem && b.k == 3 && b.n == 100 && b.cols != NULL);
    CHECK_EQ_INT((int64_t)kd_pool_bytes(pool), 0);
    double host[300], back[300];
    for (int i = 0; i < 300; i++)
        host[i] = kd_test_rand_double(-1, 1);
    REQUIRE(kd_multivec_write(ocl, &b, host, &err) == KD_OK);
    REQUIRE(kd_multivec_read(ocl, &b, back, &err) == KD_OK);
    CHECK(memcmp(host, back, sizeof(host)) == 0);
    uint64_t hits, misses;
    kd_pool_counts(pool, &hits, &misses);
    CHECK_EQ_INT((int64_t)hits, 1);
    CHECK_EQ_INT((int64_t)misses, 3);
    kd_pool_put(pool, &b);
    kd_pool_free(pool);
}

static void test_limits(void)
{
    kd_err_t err = {0};
    /* room for two 1000 x 1 float64 vectors (8000 bytes each, maybe padded), items of 16 KiB */
    kd_pool_t *pool = kd_pool_new(20000, 16384);
    REQUIRE(pool != NULL);
    kd_multivec_t v[3], big;
    cl_mem mem[3];
    for (int i = 0; i < 3; i++) {
        REQUIRE(kd_pool_get(pool, ocl, 1000 + i, 1, KD_DTYPE_F64, &v[i], &err) == KD_OK);
        mem[i] = v[i].mem;
    }
    for (int i = 0; i < 3; i++) {
        kd_pool_put(pool, &v[i]);
        CHECK((int64_t)kd_pool_bytes(pool) <= 20000);
    }
    /* the first given back went first (a released handle may be recycled by the driver: the
     * counters tell a hit from a miss) */
    uint64_t hits0, misses0, hits, misses;
    kd_pool_counts(pool, &hits0, &misses0);
    kd_multivec_t again;
    REQUIRE(kd_pool_get(pool, ocl, 1000, 1, KD_DTYPE_F64, &again, &err) == KD_OK);
    kd_pool_counts(pool, &hits, &misses);
    CHECK_EQ_INT((int64_t)(misses - misses0), 1);
    kd_multivec_release(&again);
    REQUIRE(kd_pool_get(pool, ocl, 1002, 1, KD_DTYPE_F64, &again, &err) == KD_OK);
    kd_pool_counts(pool, &hits, &misses);
    CHECK_EQ_INT((int64_t)(hits - hits0), 1);
    CHECK(again.mem == mem[2]);
    kd_pool_put(pool, &again);
    /* over the item limit: released, not kept */
    size_t before = kd_pool_bytes(pool);
    REQUIRE(kd_pool_get(pool, ocl, 5000, 1, KD_DTYPE_F64, &big, &err) == KD_OK);
    kd_pool_put(pool, &big);
    CHECK_EQ_INT((int64_t)kd_pool_bytes(pool), (int64_t)before);
    /* empty shapes are not kept either, and cost nothing */
    REQUIRE(kd_pool_get(pool, ocl, 0, 4, KD_DTYPE_F64, &big, &err) == KD_OK);
    kd_pool_put(pool, &big);
    CHECK_EQ_INT((int64_t)kd_pool_bytes(pool), (int64_t)before);
    kd_pool_clear(pool);
    CHECK_EQ_INT((int64_t)kd_pool_bytes(pool), 0);
    kd_pool_free(pool);
    kd_pool_free(NULL);
}

/* Columns j0.. of a k-column multivector, written and read by range, asynchronously. */
static void test_column_ranges(void)
{
    kd_err_t err = {0};
    const int64_t n = 257, k = 5;
    kd_multivec_t mv;
    REQUIRE(kd_multivec_alloc(ocl, n, k, KD_DTYPE_F64, &mv, &err) == KD_OK);
    double *poison = malloc((size_t)(n * k) * 8), *mid = malloc((size_t)(n * 2) * 8),
           *all = malloc((size_t)(n * k) * 8), *part = malloc((size_t)(n * 2) * 8);
    for (int64_t i = 0; i < n * k; i++)
        poison[i] = NAN;
    for (int64_t i = 0; i < n * 2; i++)
        mid[i] = kd_test_rand_double(-1, 1);
    REQUIRE(kd_multivec_write(ocl, &mv, poison, &err) == KD_OK);
    REQUIRE(kd_multivec_write_cols_async(ocl, &mv, 2, 2, mid, &err) == KD_OK);
    for (int64_t i = 0; i < n * 2; i++)
        part[i] = NAN;
    REQUIRE(kd_multivec_read_cols_async(ocl, &mv, 2, 2, part, &err) == KD_OK);
    REQUIRE(kd_ocl_finish(ocl, &err) == KD_OK);
    CHECK(memcmp(part, mid, (size_t)(n * 2) * 8) == 0);
    REQUIRE(kd_multivec_read(ocl, &mv, all, &err) == KD_OK);
    int bad = 0;
    for (int64_t j = 0; j < k; j++)
        for (int64_t i = 0; i < n; i++) {
            double v = all[j * n + i];
            bad += (j == 2 || j == 3) ? v != mid[(j - 2) * n + i] : !isnan(v);
        }
    CHECK_EQ_INT(bad, 0);
    free(poison);
    free(mid);
    free(all);
    free(part);
    kd_multivec_release(&mv);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_reuse_by_shape);
    RUN(test_limits);
    RUN(test_column_ranges);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
