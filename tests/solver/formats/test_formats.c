/*
 * Every SpMV format in float64 and float32 against kd_csr_spmv_ref on the CPU, on every real
 * matrix in tests/matrices and on generated matrices that break naive kernels: empty rows, an
 * all-empty matrix, one dense row, a row of 100,000 entries (longer than any work-group or row
 * block), rows whose lengths sit on either side of the row-block, chunk and slice sizes, power-law
 * rows, 1x1, n x 1, 1 x n, 0 x 0, and row counts that are multiples of nothing.
 *
 * Each multiplication has fresh random x and y. y is poisoned with NaN when beta = 0 (every
 * element must be written and y never read) and lives inside a larger buffer whose guard band past
 * the last row must come back untouched. Several (alpha, beta) pairs run on the same device matrix,
 * so formats that keep partial sums between launches are run more than once.
 *
 * The tiled format gets matrices built tile by tile so that each of its per-tile kinds (dense,
 * dense rows, dense columns, ELL, CSR, COO, HYB), the pulled-out sparse part and the splitting of
 * long tile rows are each used, at tile sizes cut by the matrix edge; its host analysis's
 * histogram (kd_matrix_describe) must show every kind used, so one generic path cannot pass.
 *
 * Env KD_TEST_FORMAT=<name> restricts the run to one format (for debugging a kernel).
 */
#include "client/mtx_file.h"
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "protocol/mtx.h"
#include "solver/matrix.h"
#include "common/slices.h"

static kd_ocl_t *ocl;
static int only_format = -1;

#define GUARD 67
#define SENTINEL (-4242.25)
/* Formats whose plan is larger than this are skipped on a matrix (ELL on a 100k-entry row). */
#define PLAN_LIMIT ((size_t)256 << 20)

static const double pairs_all[][2] = {
    {1.0, 0.0}, {-2.5, 0.0}, {1.5, -0.75}, {1.0, 1.0}, {0.0, 2.0}};
static const double pairs_few[][2] = {{1.0, 0.0}, {1.5, -0.75}, {0.0, 2.0}};

/* One y = alpha A x + beta y on an uploaded matrix, checked element by element. */
static void check_spmv(const char *name, const kd_matrix_t *m, const kd_csr_t *csr, double alpha,
                       double beta)
{
    kd_err_t err = {0};
    kd_dtype_t dtype = csr->dtype;
    int64_t rows = csr->rows, cols = csr->cols;
    size_t vsize = kd_dtype_size(dtype);
    size_t total = (size_t)rows + GUARD;
    double *xw = NULL, *y0w = NULL;
    void *xh = kd_test_random_vector(cols, dtype, -1.0, 1.0, &xw);
    void *y0h = kd_test_random_vector(rows, dtype, -1.0, 1.0, &y0w);
    void *yinit = malloc(total * vsize);
    void *yout = malloc(total * vsize);
    double *ref = malloc((total + 1) * sizeof(double));
    kd_vec_t x = {0};
    cl_mem ybuf = NULL;
    for (size_t i = 0; i < total; i++) {
        double v = (int64_t)i < rows ? (beta == 0.0 ? NAN : y0w[i]) : SENTINEL;
        kd_store_real(yinit, dtype, i, v);
    }
    REQUIRE(kd_vec_alloc(ocl, cols, dtype, &x, &err) == KD_OK);
    REQUIRE(kd_vec_write(ocl, &x, xh, dtype, &err) == KD_OK);
    REQUIRE(kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, total * vsize,
                                 yinit, "y", &ybuf, &err) == KD_OK);
    kd_vec_t y = {ybuf, rows, dtype};
    int rc = kd_matrix_spmv(ocl, m, alpha, &x, beta, &y, &err);
    CHECK_MSG(rc == KD_OK, "%s %s: spmv: %s", name, kd_format_name(m->format), err.message);
    REQUIRE(clEnqueueReadBuffer(kd_ocl_queue(ocl), ybuf, CL_TRUE, 0, total * vsize, yout, 0, NULL,
                                NULL) == CL_SUCCESS);

    for (int64_t i = 0; i < rows; i++)
        ref[i] = beta == 0.0 ? NAN : y0w[i];
    kd_csr_spmv_ref(csr, xw, alpha, beta, ref);
    int64_t bad = 0, guard_bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        double got = kd_load_real(yout, dtype, (size_t)r);
        double bound = kd_test_spmv_row_bound(csr, dtype, alpha, xw, beta, y0w, r);
        if (!isfinite(got) || fabs(got - ref[r]) > bound) {
            if (bad++ < 5)
                fprintf(stderr, "%s %s %s alpha=%g beta=%g: y[%lld] = %.17g, expected %.17g\n",
                        name, kd_format_name(m->format), kd_dtype_name(dtype), alpha, beta,
                        (long long)r, got, ref[r]);
        }
    }
    for (size_t i = (size_t)rows; i < total; i++)
        guard_bad += kd_load_real(yout, dtype, i) != SENTINEL;
    CHECK_MSG(bad == 0, "%s %s (%s, alpha=%g beta=%g): %lld of %lld rows wrong", name,
              kd_format_name(m->format), kd_dtype_name(dtype), alpha, beta, (long long)bad,
              (long long)rows);
    CHECK_MSG(guard_bad == 0, "%s %s (%s): %lld guard values past row %lld were overwritten", name,
              kd_format_name(m->format), kd_dtype_name(dtype), (long long)guard_bad,
              (long long)rows);
    if (ybuf != NULL)
        clReleaseMemObject(ybuf);
    kd_vec_release(&x);
    free(xh);
    free(xw);
    free(y0h);
    free(y0w);
    free(yinit);
    free(yout);
    free(ref);
}

/* Every format and dtype on csr64 (freed here), with npairs (alpha, beta) pairs each. */
static void formats_case(const char *name, kd_csr_t *csr64, const double (*pairs)[2], int npairs)
{
    kd_dtype_t dtypes[2];
    int nd = kd_test_dtypes(ocl, dtypes);
    kd_csr_stats_t stats;
    kd_csr_compute_stats(csr64, &stats);
    for (int d = 0; d < nd; d++) {
        kd_err_t err = {0};
        kd_csr_t *csr = NULL;
        REQUIRE(kd_csr_convert(csr64, dtypes[d], &csr, &err) == KD_OK);
        for (int f = 0; f < KD_FMT_COUNT; f++) {
            if (only_format >= 0 && f != only_format)
                continue;
            size_t plan = kd_matrix_plan_bytes(ocl, csr, &stats, (kd_format_t)f);
            if (plan > PLAN_LIMIT)
                continue; /* padded formats on a very long row: the selection drops these */
            kd_matrix_t *m = NULL;
            int rc = kd_matrix_upload(ocl, csr, (kd_format_t)f, &m, &err);
            CHECK_MSG(rc == KD_OK, "%s: upload as %s (%s): %s", name,
                      kd_format_name((kd_format_t)f), kd_dtype_name(dtypes[d]), err.message);
            if (rc != KD_OK)
                continue;
            CHECK_EQ_INT(m->format, f);
            CHECK(csr->nnz == 0 || m->device_bytes > 0);
            for (int p = 0; p < npairs; p++)
                check_spmv(name, m, csr, pairs[p][0], pairs[p][1]);
            kd_matrix_free(m);
        }
        kd_csr_free(csr);
    }
    kd_csr_free(csr64);
}

#define ALL_PAIRS pairs_all, (int)(sizeof(pairs_all) / sizeof(pairs_all[0]))
#define FEW_PAIRS pairs_few, (int)(sizeof(pairs_few) / sizeof(pairs_few[0]))

static void test_real_matrices(void)
{
    static const char *files[] = {
        "494_bus.mtx",
        "dwt_878.mtx",
        "can___24.mtx",
        "ani4.mtx",
        "bayer10.mtx",
        "rajat01.mtx",
        "adder_dcop_05.mtx",
        "watt_2.mtx",
        "arrow.mtx",
        "Groebner_id2003_aug.mtx",
        "Franz6_id1959_aug.mtx",
        "3by0.mtx",
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        kd_csr_t *m = kd_test_load_mtx(files[i], 0.0);
        CHECK_MSG(m != NULL, "cannot load %s", files[i]);
        if (m != NULL)
            formats_case(files[i], m, FEW_PAIRS);
    }
}

static void test_degenerate_shapes(void)
{
    formats_case("0x0", kd_test_random_matrix(0, 0, NULL, 0), ALL_PAIRS);
    formats_case("3x0", kd_test_random_matrix(3, 0, NULL, 0), ALL_PAIRS);
    formats_case("0x3", kd_test_random_matrix(0, 3, NULL, 0), ALL_PAIRS);
    formats_case("1x1", kd_test_random_matrix(1, 1, (int64_t[]){1}, 0), ALL_PAIRS);
    int64_t ones[1000];
    for (int i = 0; i < 1000; i++)
        ones[i] = 1;
    formats_case("1000x1", kd_test_random_matrix(1000, 1, ones, 0), ALL_PAIRS);
    formats_case("1x1000", kd_test_random_matrix(1, 1000, (int64_t[]){1000}, 0), ALL_PAIRS);
    formats_case("1x1000 sparse", kd_test_random_matrix(1, 1000, (int64_t[]){17}, 0), ALL_PAIRS);
    formats_case("1x100 empty", kd_test_random_matrix(1, 100, (int64_t[]){0}, 0), ALL_PAIRS);
}

static void test_empty_rows(void)
{
    int64_t zeros[50] = {0};
    formats_case("all-empty 50x40", kd_test_random_matrix(50, 40, zeros, 0), ALL_PAIRS);
    int64_t len[300];
    for (int i = 0; i < 300; i++)
        len[i] = i % 3 == 0 ? 0 : kd_test_rand_below(9);
    formats_case("every third row empty", kd_test_random_matrix(300, 300, len, 0), ALL_PAIRS);
    int64_t last[100] = {0};
    last[99] = 5;
    formats_case("only the last row", kd_test_random_matrix(100, 100, last, 0), ALL_PAIRS);
    int64_t first[700] = {0};
    first[0] = 600;
    formats_case("only the first row, long", kd_test_random_matrix(700, 700, first, 0), FEW_PAIRS);
}

static void test_long_rows(void)
{
    int64_t n = 2000;
    int64_t *len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = kd_test_rand_below(6);
    len[777] = n; /* one dense row among short ones */
    formats_case("one dense row", kd_test_random_matrix(n, n, len, 0), FEW_PAIRS);
    free(len);

    /* A row of 100,000 entries among short rows, with long rows first and last too. */
    n = 3001;
    len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = 1 + kd_test_rand_below(5);
    len[0] = 9000;
    len[1500] = 100000;
    len[1501] = 20000;
    len[n - 1] = 12345;
    formats_case("row of 100k entries", kd_test_random_matrix(n, 150000, len, 0), FEW_PAIRS);
    free(len);

    /* Row lengths on both sides of the sizes the kernels cut at (work-group 256, row-block
     * capacity 1024/2048, long-row limit and chunk 4096/8192, slice 32), shuffled among short
     * rows so every kind of block meets every other. */
    static const int64_t edges[] = {31,   32,   33,   255,  256,  257,   511,  512,
                                    513,  1023, 1024, 1025, 2047, 2048,  2049, 4095,
                                    4096, 4097, 8191, 8192, 8193, 16384, 16385};
    n = 400;
    len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = kd_test_rand_below(4);
    for (size_t e = 0; e < sizeof(edges) / sizeof(edges[0]); e++)
        len[kd_test_rand_below(n)] = edges[e];
    formats_case("row lengths at the cut sizes", kd_test_random_matrix(n, 20000, len, 0),
                 FEW_PAIRS);
    free(len);

    /* Rows exactly one COO chunk long, so row and chunk boundaries coincide. */
    n = 40;
    len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = i % 4 == 0 ? 256 : i % 4 == 1 ? 512 : i % 4 == 2 ? 255 : 257;
    formats_case("rows of chunk length", kd_test_random_matrix(n, 2000, len, 0), FEW_PAIRS);
    free(len);
}

static void test_irregular(void)
{
    formats_case("power-law rows", kd_test_power_law_matrix(20000, 20000), FEW_PAIRS);
    formats_case("arrow-head", kd_test_arrow_matrix(3001), FEW_PAIRS);
    int64_t n = 5000;
    int64_t *len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = 3;
    len[kd_test_rand_below(n)] = 3000; /* 1000x the mean */
    formats_case("row 1000x the mean", kd_test_random_matrix(n, n, len, 0), FEW_PAIRS);
    free(len);
}

static void test_odd_sizes(void)
{
    static const int64_t counts[] = {2, 7, 31, 33, 255, 257, 1025, 4099};
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "random %lld rows", (long long)counts[i]);
        formats_case(name, kd_test_random_matrix(counts[i], 333, NULL, 6), FEW_PAIRS);
    }
    formats_case("laplacian 37x29", kd_test_laplacian_2d(37, 29), ALL_PAIRS);
    formats_case("wide 100x20000", kd_test_random_matrix(100, 20000, NULL, 300), FEW_PAIRS);
    formats_case("random 20000x15000", kd_test_random_matrix(20000, 15000, NULL, 8), FEW_PAIRS);
}

/* In-tile pattern of tile kind k (test_tiled): entry (r, c) of a 16 x 16 tile or not. */
static int tile_pattern(int k, int r, int c)
{
    static const int coo[][2] = {{0, 0}, {1, 5}, {3, 2}, {7, 9}, {12, 15}, {15, 1}};
    int ell = c == r || c == (r + 5) % 16 || c == (r + 10) % 16;
    switch (k) {
    case 0:
        return 1; /* dense */
    case 1:
        return r == 3 || r == 9; /* dense rows */
    case 2:
        return c == 2 || c == 11; /* dense columns */
    case 3:
        return ell; /* three entries a row: ELL */
    case 4:
        return c <= r % 8; /* rows of 1 to 8: CSR */
    case 5:
        for (size_t i = 0; i < sizeof(coo) / sizeof(coo[0]); i++)
            if (coo[i][0] == r && coo[i][1] == c)
                return 1;
        return 0; /* six scattered entries: COO */
    case 6:
        return ell || (r == 0 && c < 8); /* ELL of width 3 and a longer row: HYB */
    case 7:
        return r == c && r < 2; /* two entries: pulled out when that saves bytes */
    default:
        return 0; /* empty */
    }
}

/* rows x cols with tile (i, j) in the pattern kind_of(i, j) (tile_pattern), values random. */
static kd_csr_t *tiled_matrix(int64_t rows, int64_t cols, int (*kind_of)(int64_t, int64_t))
{
    kd_test_coo_t c = {rows, cols, 0, 0, NULL, NULL, NULL};
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++)
            if (tile_pattern(kind_of(r / 16, j / 16), (int)(r % 16), (int)(j % 16)))
                kd_test_coo_add(&c, r, j, kd_test_rand_double(-1.0, 1.0));
    return kd_test_coo_finish(&c);
}

static int kinds_mixed(int64_t i, int64_t j)
{
    return (int)((i * 5 + j * 3) % 9); /* every kind and empty tiles, in every tile row */
}
static int kinds_dense_middle(int64_t i, int64_t j)
{
    return i == 1 && j == 1 ? 0 : i == 2 && j == 2 ? 0 : 8; /* 40 x 45: one full, one cut */
}
static int kinds_rows(int64_t i, int64_t j)
{
    return i == j ? 1 : 8;
}
static int kinds_cols(int64_t i, int64_t j)
{
    return i == j ? 2 : 8;
}
static int kinds_empty_tile_rows(int64_t i, int64_t j)
{
    return i == 1 || i == 2 || i == 4 ? 8 : (int)((i + j) % 8);
}

/* The value of tiled's histogram entry `name` for csr (checks the upload). */
static int64_t tiled_detail(const kd_csr_t *csr, const char *name)
{
    kd_err_t err = {0};
    kd_matrix_t *m = NULL;
    kd_format_detail_t d;
    int64_t value = -1;
    int rc = kd_matrix_upload(ocl, csr, KD_FMT_TILED, &m, &err);
    CHECK_MSG(rc == KD_OK, "tiled upload: %s", err.message);
    kd_matrix_describe(m, &d);
    for (int i = 0; i < d.count; i++)
        if (strcmp(d.items[i].name, name) == 0)
            value = d.items[i].value;
    kd_matrix_free(m);
    CHECK_MSG(value >= 0, "tiled describes no '%s'", name);
    return value;
}

/* Each case: the matrix, the histogram entry it must make non-zero. */
static void tiled_case(const char *name, kd_csr_t *csr, const char *const *expect)
{
    for (int i = 0; expect[i] != NULL; i++)
        CHECK_MSG(tiled_detail(csr, expect[i]) > 0, "%s: no %s in tiled's histogram", name,
                  expect[i]);
    formats_case(name, csr, FEW_PAIRS);
}

static void test_tiled(void)
{
    tiled_case(
        "tiles: every kind", tiled_matrix(200, 190, kinds_mixed),
        (const char *const[]){"dense", "dense_row", "dense_col", "ell", "csr", "coo", "hyb", NULL});
    tiled_case("tiles: full tile, and one cut by the edge",
               tiled_matrix(40, 45, kinds_dense_middle), (const char *const[]){"dense", NULL});
    tiled_case("tiles: full rows", tiled_matrix(70, 70, kinds_rows),
               (const char *const[]){"dense_row", NULL});
    tiled_case("tiles: full columns", tiled_matrix(70, 70, kinds_cols),
               (const char *const[]){"dense_col", NULL});
    tiled_case("tiles: empty tile rows", tiled_matrix(90, 77, kinds_empty_tile_rows),
               (const char *const[]){"ell", "csr", NULL});
    /* very sparse tiles everywhere: pulled out into the CSR part */
    tiled_case("tiles: two entries a row", kd_test_random_matrix(3000, 3000, NULL, 1),
               (const char *const[]){"pulled_tiles", "pulled_nnz", NULL});
    /* one full row across 313 tiles (split into chunks) among sparse rows; 33 tiles (split) */
    int64_t len[100];
    for (int i = 0; i < 100; i++)
        len[i] = kd_test_rand_below(4);
    len[37] = 5000;
    tiled_case("tiles: a dense row over 313 tiles", kd_test_random_matrix(100, 5000, len, 0),
               (const char *const[]){"split_tile_rows", NULL});
    /* one row of 3000 scattered entries: pulled out, too long for a lane, added by row blocks */
    len[37] = 3000;
    tiled_case("tiles: a long pulled row", kd_test_random_matrix(100, 20000, len, 0),
               (const char *const[]){"pulled_nnz", "pulled_long_nnz", NULL});
    len[37] = 5000;
    len[0] = 520;
    tiled_case("tiles: a dense row over 33 tiles", kd_test_random_matrix(20, 520, len, 0),
               (const char *const[]){"split_tile_rows", NULL});
    int64_t full[16];
    for (int i = 0; i < 16; i++)
        full[i] = 512;
    tiled_case("tiles: 16 full rows over 32 tiles", kd_test_random_matrix(16, 512, full, 0),
               (const char *const[]){"dense", NULL});
    kd_csr_t *unsplit = kd_test_random_matrix(16, 512, full, 0);
    CHECK(tiled_detail(unsplit, "split_tile_rows") == 0);
    kd_csr_free(unsplit);
    /* 2.4M entries: the analysis runs in two slices (common/slices.h), joined at a tile row */
    kd_csr_t *big = kd_test_laplacian_2d(700, 700);
    REQUIRE(kd_slices_count(big->nnz) >= 2);
    kd_matrix_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload(ocl, big, KD_FMT_TILED, &m, &err) == KD_OK);
    for (int p = 0; p < (int)(sizeof(pairs_few) / sizeof(pairs_few[0])); p++)
        check_spmv("tiles: two analysis slices", m, big, pairs_few[p][0], pairs_few[p][1]);
    kd_matrix_free(m);
    kd_csr_free(big);
}

/* The plans the selection screens with are computed before allocating and are honest. */
static void test_plans(void)
{
    kd_err_t err = {0};
    int64_t n = 2000;
    int64_t *len = malloc((size_t)n * sizeof(int64_t));
    for (int64_t i = 0; i < n; i++)
        len[i] = 3;
    len[5] = n;
    kd_csr_t *csr = kd_test_random_matrix(n, n, len, 0);
    free(len);
    kd_csr_stats_t st;
    kd_csr_compute_stats(csr, &st);
    size_t csr_bytes = kd_matrix_plan_bytes(ocl, csr, &st, KD_FMT_CSR_SCALAR);
    CHECK_EQ_INT(csr_bytes, (n + 1) * 4 + csr->nnz * 12);
    /* ELL pads every row to the dense one: 2016 x 2000 slots. */
    CHECK_EQ_INT(kd_matrix_plan_bytes(ocl, csr, &st, KD_FMT_ELL), 2016 * 2000 * 12);
    /* SELL-C-sigma pads only the dense row's slice. */
    CHECK(kd_matrix_plan_bytes(ocl, csr, &st, KD_FMT_SELL_C_SIGMA) < 2 * 32 * 2000 * 12);
    CHECK(kd_matrix_plan_bytes(ocl, csr, &st, KD_FMT_COUNT) == SIZE_MAX);
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        if (kd_matrix_plan_bytes(ocl, csr, &st, (kd_format_t)f) > PLAN_LIMIT)
            continue;
        kd_matrix_t *m = NULL;
        REQUIRE(kd_matrix_upload(ocl, csr, (kd_format_t)f, &m, &err) == KD_OK);
        CHECK_MSG(m->device_bytes == kd_matrix_plan_bytes(ocl, csr, &st, (kd_format_t)f),
                  "%s: device_bytes %zu, plan %zu", kd_format_name((kd_format_t)f), m->device_bytes,
                  kd_matrix_plan_bytes(ocl, csr, &st, (kd_format_t)f));
        kd_matrix_free(m);
    }
    kd_csr_free(csr);
}

/* A forced RCM reordering inside the matrix: spmv takes and gives vectors in the original order,
 * so the same reference (the original matrix) must hold, for several formats. */
static void test_reordered(void)
{
    static const kd_format_t formats[] = {KD_FMT_CSR_SCALAR, KD_FMT_CSR_ADAPTIVE,
                                          KD_FMT_SELL_C_SIGMA};
    kd_csr_t *cases[] = {kd_test_laplacian_2d(23, 17), kd_test_random_matrix(300, 300, NULL, 4),
                         kd_test_power_law_matrix(257, 257)};
    kd_dtype_t dtypes[2];
    int nd = kd_test_dtypes(ocl, dtypes);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        for (int d = 0; d < nd; d++) {
            kd_err_t err = {0};
            kd_csr_t *csr = NULL;
            REQUIRE(kd_csr_convert(cases[c], dtypes[d], &csr, &err) == KD_OK);
            for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
                kd_matrix_t *m = NULL;
                int rc = kd_matrix_upload_reordered(ocl, csr, formats[f], KD_REORDER_RCM, &m, &err);
                CHECK_MSG(rc == KD_OK, "reordered %s: %s", kd_format_name(formats[f]), err.message);
                if (rc != KD_OK)
                    continue;
                CHECK(m->order.kind == KD_REORDER_RCM && m->order.perm != NULL);
                kd_reorder_shape_t before, after;
                int32_t *iperm = malloc((size_t)csr->rows * sizeof(int32_t) + 4);
                kd_reorder_invert(m->order.perm, csr->rows, iperm);
                kd_reorder_measure(csr, NULL, &before);
                kd_reorder_measure(csr, iperm, &after); /* of the matrix as it holds it */
                free(iperm);
                CHECK(after.bandwidth <= before.bandwidth || c > 0);
                for (int p = 0; p < (int)(sizeof(pairs_all) / sizeof(pairs_all[0])); p++)
                    check_spmv("reordered", m, csr, pairs_all[p][0], pairs_all[p][1]);
                kd_matrix_free(m);
            }
            kd_csr_free(csr);
        }
        kd_csr_free(cases[c]);
    }
}

int main(void)
{
    kd_test_seed();
    const char *only = getenv("KD_TEST_FORMAT");
    kd_format_t f;
    if (only != NULL && only[0] != '\0' && kd_format_parse(only, &f) == 0)
        only_format = (int)f;
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    for (int i = 0; i < KD_FMT_COUNT; i++)
        CHECK_MSG(kd_format_available((kd_format_t)i), "%s is not built",
                  kd_format_name((kd_format_t)i));
    RUN(test_plans);
    RUN(test_degenerate_shapes);
    RUN(test_empty_rows);
    RUN(test_long_rows);
    RUN(test_irregular);
    RUN(test_odd_sizes);
    RUN(test_real_matrices);
    RUN(test_tiled);
    RUN(test_reordered);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
