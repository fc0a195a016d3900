/*
 * The host CSR builders: validation messages for each bad input, canonical form (sorted rows,
 * duplicates summed), content ids that do not depend on entry order, and the CPU reference SpMV.
 */
#include "common/checked.h"
#include "common/csr.h"
#include "common/slices.h"
#include "kd_test.h"

static void test_canonical_input_is_copied(void)
{
    int32_t indptr[] = {0, 2, 2, 3};
    int32_t indices[] = {0, 2, 1};
    double values[] = {1.5, -2.0, 4.0};
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_csr_arrays(3, 3, 3, indptr, KD_DTYPE_I32, indices, KD_DTYPE_I32, values,
                                   KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err) == KD_OK);
    CHECK_EQ_INT(m->nnz, 3);
    CHECK_EQ_INT(m->indptr[1], 2);
    CHECK_EQ_INT(m->indptr[2], 2);
    CHECK_EQ_INT(m->indices[2], 1);
    CHECK(kd_csr_value(m, 1) == -2.0);
    kd_csr_free(m);
}

static void test_unsorted_rows_and_duplicates(void)
{
    /* row 0: (2, 1), (0, 2), (2, 3) -> (0, 2), (2, 4) */
    int64_t indptr[] = {0, 3, 4};
    int64_t indices[] = {2, 0, 2, 1};
    float values[] = {1.0f, 2.0f, 3.0f, 5.0f};
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_csr_arrays(2, 3, 4, indptr, KD_DTYPE_I64, indices, KD_DTYPE_I64, values,
                                   KD_DTYPE_F32, KD_DTYPE_F64, NULL, &m, &err) == KD_OK);
    CHECK_EQ_INT(m->nnz, 3);
    CHECK_EQ_INT(m->indptr[1], 2);
    CHECK_EQ_INT(m->indices[0], 0);
    CHECK_EQ_INT(m->indices[1], 2);
    CHECK(kd_csr_value(m, 0) == 2.0);
    CHECK(kd_csr_value(m, 1) == 4.0);
    CHECK(kd_csr_value(m, 2) == 5.0);
    kd_csr_free(m);
}

static void test_bad_indptr_and_indices(void)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    double v[] = {1, 2, 3};
    int32_t bad_first[] = {1, 2, 3};
    int32_t idx[] = {0, 1, 2};
    CHECK_EQ_INT(kd_csr_from_csr_arrays(2, 3, 3, bad_first, KD_DTYPE_I32, idx, KD_DTYPE_I32, v,
                                        KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "indptr[0] = 1");

    int32_t decreasing[] = {0, 3, 2};
    CHECK_EQ_INT(kd_csr_from_csr_arrays(2, 3, 3, decreasing, KD_DTYPE_I32, idx, KD_DTYPE_I32, v,
                                        KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "non-decreasing");

    int32_t short_end[] = {0, 1, 2};
    CHECK_EQ_INT(kd_csr_from_csr_arrays(2, 3, 3, short_end, KD_DTYPE_I32, idx, KD_DTYPE_I32, v,
                                        KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "nnz = 3");

    int32_t ok_ptr[] = {0, 2, 3};
    int32_t out_of_range[] = {0, 1, 912};
    CHECK_EQ_INT(kd_csr_from_csr_arrays(2, 900, 3, ok_ptr, KD_DTYPE_I32, out_of_range, KD_DTYPE_I32,
                                        v, KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "indices[2] = 912 is outside 0..899");

    int32_t negative[] = {0, -1, 1};
    CHECK_EQ_INT(kd_csr_from_csr_arrays(2, 3, 3, ok_ptr, KD_DTYPE_I32, negative, KD_DTYPE_I32, v,
                                        KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err),
                 KD_EBADREQ);
    CHECK(m == NULL);
}

static void test_shape_limits(void)
{
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_csr_check_shape(-1, 3, 0, NULL, &err), KD_EBADREQ);
    CHECK_EQ_INT(kd_csr_check_shape(INT64_MAX, 3, 0, NULL, &err), KD_ETOOLARGE);
    CHECK_EQ_INT(kd_csr_check_shape(3, 3, (int64_t)INT32_MAX + 1, NULL, &err), KD_ETOOLARGE);
    kd_csr_limits_t lim = {.max_rows = 100, .max_cols = 100, .max_nnz = 10};
    CHECK_EQ_INT(kd_csr_check_shape(101, 3, 0, &lim, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "limit 100");
    CHECK_EQ_INT(kd_csr_check_shape(5, 5, 11, &lim, &err), KD_ETOOLARGE);
    CHECK_EQ_INT(kd_csr_check_shape(0, 0, 0, &lim, &err), KD_OK);
    size_t out;
    CHECK(kd_mul_overflow(SIZE_MAX / 2, 3, &out) != 0);
    CHECK(kd_mul3_overflow(1u << 20, 1u << 20, 1u << 20, &out) == 0);
}

static void test_coo_and_hash_independent_of_order(void)
{
    enum { N = 40, NNZ = 300 };
    int32_t row[NNZ], col[NNZ];
    double val[NNZ];
    for (int k = 0; k < NNZ; k++) {
        row[k] = (int32_t)kd_test_rand_below(N);
        col[k] = (int32_t)kd_test_rand_below(N);
        val[k] = (double)kd_test_rand_below(1000) / 8.0; /* exact in binary: sums are exact */
    }
    kd_csr_t *a = NULL, *b = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_coo_arrays(N, N, NNZ, row, col, KD_DTYPE_I32, val, KD_DTYPE_F64,
                                   KD_DTYPE_F64, NULL, &a, &err) == KD_OK);
    /* shuffle the triplets */
    for (int k = NNZ - 1; k > 0; k--) {
        int j = (int)kd_test_rand_below(k + 1);
        int32_t tr = row[k], tc = col[k];
        double tv = val[k];
        row[k] = row[j], col[k] = col[j], val[k] = val[j];
        row[j] = tr, col[j] = tc, val[j] = tv;
    }
    REQUIRE(kd_csr_from_coo_arrays(N, N, NNZ, row, col, KD_DTYPE_I32, val, KD_DTYPE_F64,
                                   KD_DTYPE_F64, NULL, &b, &err) == KD_OK);
    CHECK_EQ_INT(a->nnz, b->nnz);
    uint8_t ida[16], idb[16];
    CHECK(kd_csr_hash(a, ida) == KD_OK);
    CHECK(kd_csr_hash(b, idb) == KD_OK);
    CHECK(memcmp(ida, idb, 16) == 0);

    /* dense reference of the summed triplets */
    static double dense[N][N];
    memset(dense, 0, sizeof(dense));
    for (int k = 0; k < NNZ; k++)
        dense[row[k]][col[k]] += val[k];
    for (int r = 0; r < N; r++)
        for (int32_t k = a->indptr[r]; k < a->indptr[r + 1]; k++) {
            CHECK(dense[r][a->indices[k]] == kd_csr_value(a, k));
            if (k > a->indptr[r])
                CHECK(a->indices[k] > a->indices[k - 1]);
        }

    /* a different value changes the id */
    kd_store_real(b->values, b->dtype, 0, kd_csr_value(b, 0) + 1.0);
    CHECK(kd_csr_hash(b, idb) == KD_OK);
    CHECK(memcmp(ida, idb, 16) != 0);

    char hex[KD_ID_HEX_LEN + 1];
    uint8_t back[16];
    kd_id_to_hex(ida, hex);
    CHECK_EQ_INT(strlen(hex), 32);
    CHECK(kd_id_from_hex(hex, 32, back) == 0);
    CHECK(memcmp(back, ida, 16) == 0);
    CHECK(kd_id_from_hex("zz", 2, back) == -1);
    hex[5] = 'g';
    CHECK(kd_id_from_hex(hex, 32, back) == -1);
    kd_csr_free(a);
    kd_csr_free(b);
}

/* Builds are charged before they allocate: a size the request declares but does not send (a
 * 73-byte COO put declared 2^31 - 2 rows and grew the server to 23.6 GB) is refused TOO_LARGE,
 * naming the figure and the limit, and a build at the limit's exact figure goes through. */
static void test_build_charges(void)
{
    const int32_t one[1] = {0};
    const double v[1] = {2.5};
    kd_csr_limits_t lim = {.max_build_bytes = (size_t)1 << 20,
                           .build_limit = "2 x --max-message: raise --max-message",
                           .max_device_bytes = (size_t)1 << 20,
                           .device_limit = "--device-memory"};
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_csr_from_coo_arrays(INT32_MAX - 1, INT32_MAX, 1, one, one, KD_DTYPE_I32, v,
                                        KD_DTYPE_F64, KD_DTYPE_F64, &lim, &m, &err),
                 KD_ETOOLARGE);
    CHECK(m == NULL);
    CHECK_STR_CONTAINS(err.message, "2147483646 x 2147483647 matrix with 1 nonzeros");
    CHECK_STR_CONTAINS(err.message, "raise --max-message");
    char figure[96];
    snprintf(figure, sizeof(figure), "takes %zu bytes of host memory",
             kd_csr_coo_build_bytes(INT32_MAX - 1, 1, KD_DTYPE_F64));
    CHECK_STR_CONTAINS(err.message, figure);
    /* the figure: offsets and grouped entries, and the canonical matrix beside them */
    CHECK_EQ_INT(kd_csr_coo_build_bytes(1000, 10, KD_DTYPE_F64),
                 4 * 1001 + 12 * 10 + 4 * 1001 + 12 * 10);
    CHECK_EQ_INT(kd_csr_bytes(3, 5, KD_DTYPE_F64), 4 * 4 + 12 * 5);
    CHECK_EQ_INT(kd_csr_bytes(3, 5, KD_DTYPE_F32), 4 * 4 + 8 * 5);
    CHECK(kd_csr_bytes(INT64_MAX, INT64_MAX, KD_DTYPE_F64) == SIZE_MAX);
    CHECK(kd_csr_coo_build_bytes(INT64_MAX - 1, INT64_MAX, KD_DTYPE_F64) == SIZE_MAX);

    /* at the limit's figure exactly: built, and right; a byte less: refused */
    const int64_t rows = 10000;
    lim.max_build_bytes = kd_csr_coo_build_bytes(rows, 1, KD_DTYPE_F64);
    const int32_t last[1] = {(int32_t)rows - 1};
    REQUIRE(kd_csr_from_coo_arrays(rows, rows, 1, last, one, KD_DTYPE_I32, v, KD_DTYPE_F64,
                                   KD_DTYPE_F64, &lim, &m, &err) == KD_OK);
    CHECK_EQ_INT(m->nnz, 1);
    CHECK_EQ_INT(m->indptr[rows - 1], 0);
    CHECK_EQ_INT(m->indptr[rows], 1);
    CHECK(kd_csr_validate(m, &err) == KD_OK);
    kd_csr_free(m);
    m = NULL;
    lim.max_build_bytes -= 1;
    CHECK_EQ_INT(kd_csr_from_coo_arrays(rows, rows, 1, last, one, KD_DTYPE_I32, v, KD_DTYPE_F64,
                                        KD_DTYPE_F64, &lim, &m, &err),
                 KD_ETOOLARGE);
    CHECK(m == NULL);

    /* the device: the CSR arrays over the whole budget, named */
    lim.max_build_bytes = 0;
    lim.max_device_bytes = kd_csr_bytes(rows, 1, KD_DTYPE_F32) - 1;
    CHECK_EQ_INT(kd_csr_from_coo_arrays(rows, rows, 1, last, one, KD_DTYPE_I32, v, KD_DTYPE_F64,
                                        KD_DTYPE_F32, &lim, &m, &err),
                 KD_EDEVMEM);
    CHECK_STR_CONTAINS(err.message, "more than the whole budget");
    CHECK_STR_CONTAINS(err.message, "--device-memory");
    snprintf(figure, sizeof(figure), "needs at least %zu bytes of device memory",
             kd_csr_bytes(rows, 1, KD_DTYPE_F32));
    CHECK_STR_CONTAINS(err.message, figure);

    /* CSR arrays carry their rows: charged the canonical matrix (and, unsorted, the copy it is
     * sorted in) */
    const int32_t indptr[4] = {0, 2, 2, 3}, indices[3] = {1, 0, 2};
    const double values[3] = {1.0, 2.0, 3.0};
    lim.max_device_bytes = 0;
    lim.max_build_bytes = kd_csr_bytes(3, 3, KD_DTYPE_F64);
    CHECK_EQ_INT(kd_csr_from_csr_arrays(3, 3, 3, indptr, KD_DTYPE_I32, indices, KD_DTYPE_I32,
                                        values, KD_DTYPE_F64, KD_DTYPE_F64, &lim, &m, &err),
                 KD_ETOOLARGE); /* row 0 is unsorted: a copy beside */
    lim.max_build_bytes += 4 * 4 + 12 * 3;
    REQUIRE(kd_csr_from_csr_arrays(3, 3, 3, indptr, KD_DTYPE_I32, indices, KD_DTYPE_I32, values,
                                   KD_DTYPE_F64, KD_DTYPE_F64, &lim, &m, &err) == KD_OK);
    CHECK(kd_csr_validate(m, &err) == KD_OK);
    CHECK_EQ_INT(m->indices[0], 0);
    CHECK(kd_csr_value(m, 0) == 2.0);
    kd_csr_free(m);
}

/* COO triplets on mostly empty rows (the first and last among the filled ones), duplicates and
 * rows in any order: the build's in-place cursors against a dense reference. */
static void test_coo_mostly_empty_rows(void)
{
    enum { N = 6000, C = 5, NNZ = 40 };
    int32_t row[NNZ], col[NNZ];
    double val[NNZ];
    static double dense[N][C];
    memset(dense, 0, sizeof(dense));
    for (int k = 0; k < NNZ; k++) {
        row[k] = k == 0 ? 0 : k == 1 ? N - 1 : (int32_t)kd_test_rand_below(N);
        if (k >= 2 && k % 7 == 0)
            row[k] = row[k - 1]; /* a few rows with several entries */
        col[k] = (int32_t)kd_test_rand_below(C);
        val[k] = (double)kd_test_rand_below(64) / 4.0;
        dense[row[k]][col[k]] += val[k];
    }
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_coo_arrays(N, C, NNZ, row, col, KD_DTYPE_I32, val, KD_DTYPE_F64,
                                   KD_DTYPE_F64, NULL, &m, &err) == KD_OK);
    CHECK(kd_csr_validate(m, &err) == KD_OK);
    int64_t seen = 0;
    for (int r = 0; r < N; r++) {
        double got[C] = {0};
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
            got[m->indices[k]] = kd_csr_value(m, k);
        for (int c = 0; c < C; c++)
            CHECK_MSG(got[c] == dense[r][c], "row %d col %d: %g, want %g", r, c, got[c],
                      dense[r][c]);
        seen += m->indptr[r + 1] - m->indptr[r];
    }
    CHECK_EQ_INT(seen, m->nnz);
    kd_csr_free(m);
}

static void test_coo_bad_index(void)
{
    int64_t row[] = {0, 3};
    int64_t col[] = {0, 0};
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_csr_from_coo_arrays(3, 3, 2, row, col, KD_DTYPE_I64, NULL, KD_DTYPE_F64,
                                        KD_DTYPE_F64, NULL, &m, &err),
                 KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "row[1] = 3 is outside 0..2");
}

static void test_reference_spmv_and_stats(void)
{
    /* [[2, 0], [0, 0], [1, 3]] */
    int32_t indptr[] = {0, 1, 1, 3};
    int32_t indices[] = {0, 0, 1};
    double values[] = {2, 1, 3};
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_csr_arrays(3, 2, 3, indptr, KD_DTYPE_I32, indices, KD_DTYPE_I32, values,
                                   KD_DTYPE_F64, KD_DTYPE_F32, NULL, &m, &err) == KD_OK);
    CHECK(m->dtype == KD_DTYPE_F32);
    double x[] = {1, 2}, y[] = {NAN, NAN, NAN};
    kd_csr_spmv_ref(m, x, 1.0, 0.0, y);
    CHECK(y[0] == 2 && y[1] == 0 && y[2] == 7);
    kd_csr_spmv_ref(m, x, 2.0, 1.0, y);
    CHECK(y[0] == 6 && y[1] == 0 && y[2] == 21);
    kd_csr_stats_t st;
    kd_csr_compute_stats(m, &st);
    CHECK_EQ_INT(st.empty_rows, 1);
    CHECK_EQ_INT(st.max_row, 2);
    CHECK_EQ_INT(st.min_row, 0);
    CHECK_NEAR(st.mean_row, 1.0, 1e-12);
    kd_csr_free(m);
}

/* Slices of rows for host threads: they cover the rows in order, cut at multiples of the
 * alignment, and hold about equal nonzeros. */
static void test_slices(void)
{
    CHECK_EQ_INT(kd_slices_count(0), 1);
    CHECK_EQ_INT(kd_slices_count(KD_SLICE_NNZ - 1), 1);
    CHECK(kd_slices_count((int64_t)100 * KD_SLICE_NNZ) <= KD_SLICES_MAX);
    int64_t rows = 1000, nnz = 0;
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_alloc(rows, rows, rows * 3, KD_DTYPE_F64, &m, &err) == KD_OK);
    m->indptr[0] = 0;
    for (int64_t r = 0; r < rows; r++) { /* rows of 0..5 entries */
        int64_t len = r % 6;
        for (int64_t k = 0; k < len; k++)
            m->indices[nnz + k] = (int32_t)k;
        nnz += len;
        m->indptr[r + 1] = (int32_t)nnz;
    }
    m->nnz = nnz;
    for (int n = 1; n <= KD_SLICES_MAX; n++) {
        for (int64_t align = 1; align <= 16; align *= 16) {
            int64_t b[KD_SLICES_MAX + 1];
            kd_slices_rows(m, n, align, b);
            CHECK(b[0] == 0 && b[n] == rows);
            for (int i = 1; i <= n; i++) {
                CHECK(b[i] >= b[i - 1]);
                CHECK(i == n || b[i] % align == 0);
                int64_t share = m->indptr[b[i]] - m->indptr[b[i - 1]];
                CHECK_MSG(share <= nnz / n + 6 * align, "n=%d align=%lld slice %d: %lld entries", n,
                          (long long)align, i, (long long)share);
            }
        }
    }
    CHECK_EQ_INT(kd_csr_row_of_entry(m, 0), 1);                /* row 0 is empty */
    CHECK_EQ_INT(kd_csr_row_of_entry(m, m->indptr[500]), 500); /* 2 entries: its own */
    kd_csr_free(m);
}

/* kd_slices_memcpy and kd_slices_memcpy_wide (a thread a MiB) copy every byte, whatever the
 * size's remainder against the slices. */
static void test_slices_memcpy(void)
{
    const size_t sizes[] = {0, 1, 7, 4096, ((size_t)1 << 20) - 1, ((size_t)3 << 20) + 5,
                            ((size_t)9 << 20) + 3};
    for (size_t i = 0; i < 2 * sizeof(sizes) / sizeof(sizes[0]); i++) {
        const int wide = i % 2;
        const size_t n = sizes[i / 2];
        unsigned char *src = malloc(n + 1), *dst = malloc(n + 2);
        REQUIRE(src != NULL && dst != NULL);
        for (size_t k = 0; k < n; k++)
            src[k] = (unsigned char)kd_test_rand_below(256);
        memset(dst, 0xA5, n + 2);
        if (wide)
            kd_slices_memcpy_wide(dst, src, n);
        else
            kd_slices_memcpy(dst, src, n);
        CHECK_MSG(memcmp(dst, src, n) == 0, "%zu bytes copied wrong%s", n, wide ? " (wide)" : "");
        CHECK(dst[n] == 0xA5 && dst[n + 1] == 0xA5); /* nothing past the end */
        free(src);
        free(dst);
    }
}

/* kd_csr_with_values: versions share the pattern (no copy), free in any order, and hash as
 * independent copies do (the first hash of a shared pattern keeps the state after the pattern;
 * later versions hash their values from it), in both dtypes. */
static void test_shared_pattern_versions(void)
{
    kd_err_t err = {0};
    const int32_t indptr[5] = {0, 2, 2, 5, 6};
    const int32_t indices[6] = {0, 3, 0, 1, 3, 2};
    for (int d = 0; d < 2; d++) {
        const kd_dtype_t dt = d == 0 ? KD_DTYPE_F64 : KD_DTYPE_F32;
        kd_csr_t *base = NULL;
        REQUIRE(kd_csr_alloc(4, 4, 6, dt, &base, &err) == KD_OK);
        memcpy(base->indptr, indptr, sizeof(indptr));
        memcpy(base->indices, indices, sizeof(indices));
        for (int k = 0; k < 6; k++)
            kd_store_real(base->values, dt, (size_t)k, kd_test_rand_double(-1, 1));
        kd_csr_t *v[3] = {NULL};
        for (int i = 0; i < 3; i++) {
            REQUIRE(kd_csr_with_values(i == 0 ? base : v[i - 1], &v[i], &err) == KD_OK);
            CHECK(v[i]->indptr == base->indptr && v[i]->indices == base->indices);
            for (int k = 0; k < 6; k++)
                kd_store_real(v[i]->values, dt, (size_t)k, kd_test_rand_double(-1, 1));
        }
        for (int i = 0; i < 3; i++) {
            kd_csr_t *copy = NULL; /* its own arrays: hashed from scratch */
            REQUIRE(kd_csr_convert(v[i], dt, &copy, &err) == KD_OK);
            CHECK(copy->pattern == NULL);
            uint8_t a[16], b[16], again[16];
            REQUIRE(kd_csr_hash(v[i], a) == KD_OK);
            REQUIRE(kd_csr_hash(copy, b) == KD_OK);
            REQUIRE(kd_csr_hash(v[i], again) == KD_OK);
            CHECK(memcmp(a, b, 16) == 0 && memcmp(a, again, 16) == 0);
            kd_csr_free(copy);
        }
        uint8_t h0[16], h1[16];
        REQUIRE(kd_csr_hash(v[0], h0) == KD_OK);
        REQUIRE(kd_csr_hash(v[1], h1) == KD_OK);
        CHECK(memcmp(h0, h1, 16) != 0); /* other values, another id */
        kd_csr_free(base);              /* the first freed first: the others keep the arrays */
        CHECK(v[2]->indices[5] == 2 && v[2]->indptr[4] == 6);
        kd_csr_free(v[1]);
        kd_csr_free(v[2]);
        kd_csr_free(v[0]);
    }
}

/* kd_csr_validate: every built matrix passes (empty rows, 1 x 1, n x 1, a dense row), and each
 * kind of damage a faulty kernel could do is named. */
static void test_validate(void)
{
    kd_err_t err = {0};
    int32_t indptr[] = {0, 3, 3, 5};
    int32_t indices[] = {0, 2, 3, 1, 3};
    double values[] = {1, 2, 3, 4, 5};
    kd_csr_t *m = NULL;
    REQUIRE(kd_csr_from_csr_arrays(3, 4, 5, indptr, KD_DTYPE_I32, indices, KD_DTYPE_I32, values,
                                   KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err) == KD_OK);
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_OK);
    m->indices[1] = 0; /* a duplicate */
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "row 0, entry 1 has column 0 (not after the previous one)");
    m->indices[1] = 3; /* out of order */
    m->indices[2] = 2;
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "row 0, entry 2 has column 2");
    m->indices[1] = 2;
    m->indices[2] = 3;
    m->indices[4] = 4; /* out of range */
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "row 2, entry 4 has column 4 (out of range)");
    m->indices[4] = -7;
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "out of range");
    m->indices[4] = 3;
    m->indptr[2] = 2; /* pointers that go back */
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "row 1's pointers 3..2");
    m->indptr[2] = 3;
    m->indptr[3] = 4; /* nnz disagrees */
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    CHECK_STR_CONTAINS(err.message, "not 0 to nnz = 5");
    m->indptr[3] = 5;
    m->indptr[1] = 6; /* past nnz */
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_EINTERNAL);
    m->indptr[1] = 3;
    CHECK_EQ_INT(kd_csr_validate(m, &err), KD_OK);
    kd_csr_free(m);

    /* shapes that break naive code: 1 x 1, n x 1, no entries, one dense row */
    const int64_t shapes[][3] = {{1, 1, 1}, {7, 1, 7}, {5, 5, 0}, {4, 300, 300}};
    for (size_t t = 0; t < sizeof(shapes) / sizeof(shapes[0]); t++) {
        const int64_t rows = shapes[t][0], cols = shapes[t][1], nnz = shapes[t][2];
        REQUIRE(kd_csr_alloc(rows, cols, nnz, KD_DTYPE_F64, &m, &err) == KD_OK);
        for (int64_t i = 0; i <= rows; i++) /* a dense last row when nnz == cols */
            m->indptr[i] = cols > 1 && nnz == cols ? (i == rows ? (int32_t)nnz : 0)
                                                   : (int32_t)(i * nnz / rows);
        for (int64_t k = 0; k < nnz; k++)
            m->indices[k] = cols > 1 ? (int32_t)k : 0;
        CHECK_MSG(kd_csr_validate(m, &err) == KD_OK, "%lld x %lld: %s", (long long)rows,
                  (long long)cols, err.message);
        kd_csr_free(m);
    }
}

int main(void)
{
    kd_test_seed();
    RUN(test_canonical_input_is_copied);
    RUN(test_unsorted_rows_and_duplicates);
    RUN(test_bad_indptr_and_indices);
    RUN(test_shape_limits);
    RUN(test_coo_and_hash_independent_of_order);
    RUN(test_coo_bad_index);
    RUN(test_build_charges);
    RUN(test_coo_mostly_empty_rows);
    RUN(test_reference_spmv_and_stats);
    RUN(test_slices);
    RUN(test_shared_pattern_versions);
    RUN(test_slices_memcpy);
    RUN(test_validate);
    return kd_test_finish();
}
