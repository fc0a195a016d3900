/*
 * Distributed SpMV under mpirun (dist/dist_spmv.c, dist/halo.c, kernels/halo.cl): on every rank,
 * Y = alpha A X + beta Y for its rows against the CPU reference on the whole matrix, per row
 * within the dtype's rounding bound, on fresh random X and Y (the output poisoned with NaN
 * first), k = 1 and 3 columns, float64 and float32, the selection's format and forced ones.
 * Shapes that break naive code: empty rows, one dense row and column, a heavy last row, no
 * nonzeros at all, 1 x 1, more ranks than rows (ranks without rows, ranks without nonzeros),
 * and real matrices (494_bus, dwt_878). Also: only some columns asked for, a block for another
 * job size or a nonsquare matrix refused on every rank, and device memory refused on one rank
 * failing on all with that rank's message.
 */
#include "kd_dist_mpi_test.h"
#include "kd_test_mtx.h"

#include <math.h>

static int saw_no_rows, saw_no_nonzeros;

/* x rounded to dtype. */
static double kd_round(double x, kd_dtype_t dtype)
{
    return dtype == KD_DTYPE_F32 ? (double)(float)x : x;
}

static void check_spmv(const kd_csr_t *A64, kd_dtype_t dtype, int64_t k, const char *format,
                       const char *what)
{
    kd_err_t err = {0};
    kd_csr_t *A = NULL;
    REQUIRE(kd_csr_convert(A64, dtype, &A, &err) == KD_OK);
    kd_dist_matrix_t *m = kd_dist_test_spread(A64, dtype, format);
    if (m == NULL) {
        CHECK_MSG(0, "%s: not spread", what);
        kd_csr_free(A);
        return;
    }
    saw_no_rows |= m->rows == 0;
    saw_no_nonzeros |= m->rows > 0 && m->block.diag->nnz + m->block.offd->nnz == 0;
    const int64_t n = A->rows, dn = m->device_rows;
    double *x = malloc((size_t)(n * k) * sizeof(double)), *y0 = malloc((size_t)(n * k) * 8);
    double *yref = malloc((size_t)n * sizeof(double)), *got = malloc((size_t)(dn * k) * 8);
    void *local = malloc((size_t)(dn * k) * 8), *nan = malloc((size_t)(dn * k) * 8);
    REQUIRE(x != NULL && y0 != NULL && yref != NULL && got != NULL && local != NULL && nan != NULL);
    for (int64_t i = 0; i < n * k; i++) { /* the same on every rank: the seed is shared */
        x[i] = kd_round(kd_test_rand_double(-1.0, 1.0), dtype);
        y0[i] = kd_round(kd_test_rand_double(-1.0, 1.0), dtype);
    }
    for (int64_t i = 0; i < dn * k; i++)
        kd_store_real(nan, dtype, (size_t)i, NAN);
    kd_multivec_t X, Y;
    memset(&X, 0, sizeof(X));
    memset(&Y, 0, sizeof(Y));
    REQUIRE(kd_multivec_alloc(kd_dist_test_ocl, dn, k, dtype, &X, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(kd_dist_test_ocl, dn, k, dtype, &Y, &err) == KD_OK);
    kd_dist_test_slice(m, x, k, dtype, local);
    REQUIRE(kd_multivec_write(kd_dist_test_ocl, &X, local, &err) == KD_OK);
    const unsigned char some[3] = {1, 0, 1};
    /* (alpha, beta, which): the plain product, the residual's form, a subset of columns */
    const struct {
        double alpha, beta;
        const unsigned char *which;
    } runs[] = {{1.0, 0.0, NULL}, {-0.5, 2.0, NULL}, {1.0, 0.0, k == 3 ? some : NULL}};
    const int64_t lo = m->block.row_start[m->block.rank];
    for (size_t t = 0; t < sizeof(runs) / sizeof(runs[0]); t++) {
        if (runs[t].beta != 0.0)
            kd_dist_test_slice(m, y0, k, dtype, local);
        REQUIRE(kd_multivec_write(kd_dist_test_ocl, &Y, runs[t].beta != 0.0 ? local : nan, &err) ==
                KD_OK);
        int rc = kd_dist_spmm(m, runs[t].alpha, &X, runs[t].beta, &Y, runs[t].which, &err);
        CHECK_MSG(rc == KD_OK, "%s: %s", what, err.message);
        REQUIRE(kd_multivec_read(kd_dist_test_ocl, &Y, local, &err) == KD_OK);
        int bad = 0;
        for (int64_t c = 0; c < k; c++) {
            if (runs[t].which != NULL && !runs[t].which[c])
                continue;
            memcpy(yref, y0 + c * n, (size_t)n * sizeof(double));
            kd_csr_spmv_ref(A, x + c * n, runs[t].alpha, runs[t].beta, yref);
            for (int64_t i = 0; i < m->rows; i++) {
                const double g = kd_load_real(local, dtype, (size_t)(c * dn + i));
                const double bound = kd_test_spmv_row_bound(A, dtype, runs[t].alpha, x + c * n,
                                                            runs[t].beta, y0 + c * n, lo + i);
                if (!(fabs(g - yref[lo + i]) <= bound) && bad++ < 3)
                    CHECK_MSG(0, "%s run %zu rank %d: y[%lld][%lld] = %.17g, want %.17g", what, t,
                              m->block.rank, (long long)c, (long long)(lo + i), g, yref[lo + i]);
            }
        }
    }
    CHECK_EQ_INT(m->time.calls, 3);
    kd_multivec_release(&X);
    kd_multivec_release(&Y);
    free(x);
    free(y0);
    free(yref);
    free(got);
    free(local);
    free(nan);
    kd_dist_matrix_free(m);
    kd_csr_free(A);
}

static void test_shapes(void)
{
    kd_dtype_t dtypes[2];
    const int ndt = kd_test_dtypes(kd_dist_test_ocl, dtypes);
    const int64_t sizes[] = {1, 2, 7, 300};
    for (int shape = 0; shape < KD_DIST_SHAPES; shape++)
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
            for (int d = 0; d < ndt; d++)
                for (int64_t k = 1; k <= 3; k += 2) {
                    kd_csr_t *A = kd_dist_test_shape(shape, sizes[s], 11);
                    char what[128];
                    snprintf(what, sizeof(what), "%s n=%lld %s k=%lld",
                             kd_dist_test_shape_name(shape), (long long)sizes[s],
                             kd_dtype_name(dtypes[d]), (long long)k);
                    check_spmv(A, dtypes[d], k, NULL, what);
                    kd_csr_free(A);
                }
    /* With several ranks the cases above include a rank without rows (n = 1) and a rank whose
     * rows hold no nonzeros (the empty matrix). */
    if (kd_dist_test_comm.size > 1) {
        int mine[2] = {saw_no_rows, saw_no_nonzeros}, any[2] = {0, 0};
        MPI_Allreduce(mine, any, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        CHECK(any[0]);
        CHECK(any[1]);
    }
}

/* The diagonal block in formats the selection may not pick: each runs behind the exchange. */
static void test_forced_formats(void)
{
    const char *formats[] = {"csr_vector", "ell", "sell_c_sigma", "coo"};
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_DENSE_CROSS, 150, 5);
    for (size_t f = 0; f < sizeof(formats) / sizeof(formats[0]); f++) {
        char what[64];
        snprintf(what, sizeof(what), "dense_cross %s", formats[f]);
        check_spmv(A, KD_DTYPE_F32, 3, formats[f], what);
    }
    kd_csr_free(A);
}

static void test_real_matrices(void)
{
    const char *files[] = {"494_bus.mtx", "dwt_878.mtx"};
    kd_dtype_t dtypes[2];
    const int ndt = kd_test_dtypes(kd_dist_test_ocl, dtypes);
    for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
        kd_csr_t *A = kd_test_load_mtx(files[f], 0.0);
        for (int d = 0; d < ndt; d++)
            for (int64_t k = 1; k <= 3; k += 2) {
                char what[96];
                snprintf(what, sizeof(what), "%s %s k=%lld", files[f], kd_dtype_name(dtypes[d]),
                         (long long)k);
                check_spmv(A, dtypes[d], k, NULL, what);
            }
        kd_csr_free(A);
    }
}

/* A block for another job size is refused on every rank, with the rank's message. */
static void test_refusals(void)
{
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_RANDOM, 20, 3);
    kd_dist_partition_t p;
    kd_err_t err = {0};
    const int ranks = kd_dist_test_comm.size + 1;
    REQUIRE(kd_dist_partition_rows(A, ranks, &p, &err) == KD_OK);
    kd_dist_block_t *blocks = calloc((size_t)ranks, sizeof(*blocks));
    REQUIRE(blocks != NULL && kd_dist_split(A, &p, NULL, blocks, &err) == KD_OK);
    kd_dist_matrix_t *m = NULL;
    int rc =
        kd_dist_matrix_create(kd_dist_test_ocl, &kd_dist_test_comm, &blocks[kd_dist_test_comm.rank],
                              NULL, KD_SELECT_HEURISTIC, &m, &err);
    CHECK_EQ_INT(rc, KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "rank 0: block 0 of");
    CHECK(m == NULL);
    for (int r = 0; r < ranks; r++)
        kd_dist_block_free(&blocks[r]);
    free(blocks);
    kd_dist_partition_free(&p);
    /* a nonsquare matrix from rank 0: every rank hears why */
    kd_csr_t *R = kd_dist_test_shape(KD_DIST_SHAPE_RANDOM, 5, 1);
    R->cols = 9;
    kd_dist_block_t mine;
    rc = kd_dist_scatter_blocks(&kd_dist_test_comm, 0, kd_dist_test_comm.rank == 0 ? R : NULL,
                                &mine, &err);
    CHECK_EQ_INT(rc, KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "only square matrices spread");
    R->cols = 5;
    kd_csr_free(R);
    kd_csr_free(A);
}

/* Device memory refused on the last rank only: every rank fails with that rank's message and
 * keeps nothing (a second device handle, so the lowered limit dies with it). */
static void test_one_rank_out_of_memory(void)
{
    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    const char *sel = getenv("KD_TEST_DEVICE");
    REQUIRE(kd_ocl_open(sel != NULL ? sel : "auto", &ocl, &err) == KD_OK);
    const int last = kd_dist_test_comm.size - 1;
    if (kd_dist_test_comm.rank == last)
        kd_ocl_test_set_max_alloc(ocl, 256);
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_RANDOM, 600, 2);
    kd_dist_block_t block;
    kd_dist_matrix_t *m = NULL;
    REQUIRE(kd_dist_scatter_blocks(&kd_dist_test_comm, 0, kd_dist_test_comm.rank == 0 ? A : NULL,
                                   &block, &err) == KD_OK);
    int rc = kd_dist_matrix_create(ocl, &kd_dist_test_comm, &block, "csr_scalar",
                                   KD_SELECT_HEURISTIC, &m, &err);
    CHECK_EQ_INT(rc, KD_EDEVMEM);
    char who[32];
    snprintf(who, sizeof(who), "rank %d: ", last);
    CHECK_STR_CONTAINS(err.message, who);
    CHECK(m == NULL);
    CHECK(block.diag == NULL); /* ownership passed, also on failure */
    kd_csr_free(A);
    kd_ocl_close(ocl);
}

int main(int argc, char **argv)
{
    if (kd_dist_test_init(&argc, &argv) != 0)
        return 1;
    RUN(test_shapes);
    RUN(test_forced_formats);
    RUN(test_real_matrices);
    RUN(test_refusals);
    RUN(test_one_rank_out_of_memory);
    return kd_dist_test_finish();
}
