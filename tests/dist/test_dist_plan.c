/*
 * The partition and the halo plan (dist/partition.c, dist/block.c, dist/block_pack.c), on the
 * host, without MPI: the cut is a monotone cover of the rows balanced by weight; the blocks hold
 * every entry exactly once; the plans of all ranks agree (what p sends q is what q expects from
 * p, entry by entry); simulating the exchange and the two local products reproduces y = A x of
 * the CPU reference on fresh random x; pack/unpack round-trips and refuses damaged buffers.
 * Shapes: random, empty rows, a dense row and column, a heavy last row, no nonzeros, 1x1, more
 * ranks than rows.
 */
#include "dist/block.h"
#include "kd_dist_test.h"

#include <math.h>
#include <string.h>

/* The cut covers the rows in order, and no rank's weight exceeds its share by more than the
 * heaviest row. */
static void check_partition(const kd_csr_t *A, const kd_dist_partition_t *p)
{
    CHECK_EQ_INT(p->row_start[0], 0);
    CHECK_EQ_INT(p->row_start[p->ranks], A->rows);
    int64_t heaviest = 0;
    for (int64_t i = 0; i < A->rows; i++) {
        const int64_t w = A->indptr[i + 1] - A->indptr[i] + 1;
        heaviest = w > heaviest ? w : heaviest;
    }
    const double share = (double)(A->nnz + A->rows) / p->ranks;
    for (int r = 0; r < p->ranks; r++) {
        CHECK(p->row_start[r] <= p->row_start[r + 1]);
        const int64_t lo = p->row_start[r], hi = p->row_start[r + 1];
        const int64_t w = (A->indptr[hi] + hi) - (A->indptr[lo] + lo);
        CHECK_MSG((double)w <= share + (double)heaviest, "rank %d weighs %lld, share %.1f", r,
                  (long long)w, share);
        for (int64_t i = lo; i < hi; i++)
            CHECK_EQ_INT(kd_dist_partition_owner(p, i), r);
    }
}

/* Every rank's plan against every other's, and y = A x by simulated exchange. */
static void check_blocks(const kd_csr_t *A, const kd_dist_partition_t *p,
                         const kd_dist_block_t *blocks)
{
    int64_t nnz = 0;
    for (int r = 0; r < p->ranks; r++) {
        const kd_dist_block_t *b = &blocks[r];
        nnz += b->diag->nnz + b->offd->nnz;
        CHECK_EQ_INT(kd_dist_block_rows(b), p->row_start[r + 1] - p->row_start[r]);
        for (int32_t i = 0; i < b->neighbours; i++) {
            const int q = b->neighbour[i];
            const kd_dist_block_t *c = &blocks[q];
            int32_t back = -1; /* r in q's list */
            for (int32_t k = 0; k < c->neighbours; k++)
                if (c->neighbour[k] == r)
                    back = k;
            REQUIRE(back >= 0);
            /* r sends q: q's ghosts from r, in q's order */
            const int32_t n_send = b->send_start[i + 1] - b->send_start[i];
            const int32_t n_recv = c->recv_start[back + 1] - c->recv_start[back];
            CHECK_EQ_INT(n_send, n_recv);
            for (int32_t k = 0; k < n_send && k < n_recv; k++)
                CHECK_EQ_INT(p->row_start[r] + b->send_index[b->send_start[i] + k],
                             c->ghost_col[c->recv_start[back] + k]);
        }
    }
    CHECK_EQ_INT(nnz, A->nnz);
    double *x = malloc((size_t)(A->rows + 1) * sizeof(double));
    double *y = malloc((size_t)(A->rows + 1) * sizeof(double));
    REQUIRE(x != NULL && y != NULL);
    for (int64_t i = 0; i < A->rows; i++)
        x[i] = kd_test_rand_double(-1.0, 1.0);
    kd_csr_spmv_ref(A, x, 1.0, 0.0, y);
    for (int r = 0; r < p->ranks; r++) {
        const kd_dist_block_t *b = &blocks[r];
        const int64_t lo = p->row_start[r], n = kd_dist_block_rows(b);
        double *ghost = malloc((size_t)(b->ghosts + 1) * sizeof(double));
        double *yl = malloc((size_t)(n + 1) * sizeof(double));
        REQUIRE(ghost != NULL && yl != NULL);
        for (int64_t g = 0; g < b->ghosts; g++)
            ghost[g] = NAN; /* poisoned: each must arrive through a plan */
        for (int32_t i = 0; i < b->neighbours; i++) {
            const int q = b->neighbour[i];
            const kd_dist_block_t *c = &blocks[q];
            for (int32_t k = 0; k < c->neighbours; k++)
                if (c->neighbour[k] == r)
                    for (int32_t e = c->send_start[k]; e < c->send_start[k + 1]; e++)
                        ghost[b->recv_start[i] + (e - c->send_start[k])] =
                            x[p->row_start[q] + c->send_index[e]];
        }
        kd_csr_spmv_ref(b->diag, x + lo, 1.0, 0.0, yl);
        kd_csr_spmv_ref(b->offd, ghost, 1.0, 1.0, yl);
        for (int64_t i = 0; i < n; i++)
            CHECK_NEAR(yl[i], y[lo + i], 1e-13);
        free(ghost);
        free(yl);
    }
    free(x);
    free(y);
}

/* pack -> unpack gives the same bytes again; damage and truncation are refused. */
static void check_pack(const kd_dist_block_t *b)
{
    void *buf = NULL, *again = NULL;
    size_t bytes = 0, bytes2 = 0;
    kd_err_t err = {0};
    REQUIRE(kd_dist_block_pack(b, &buf, &bytes, &err) == KD_OK);
    kd_dist_block_t c;
    REQUIRE(kd_dist_block_unpack(buf, bytes, &c, &err) == KD_OK);
    REQUIRE(kd_dist_block_pack(&c, &again, &bytes2, &err) == KD_OK);
    CHECK(bytes == bytes2 && memcmp(buf, again, bytes) == 0);
    CHECK_EQ_INT(c.ghosts, b->ghosts);
    CHECK_EQ_INT(c.neighbours, b->neighbours);
    kd_dist_block_free(&c);
    free(again);
    CHECK_EQ_INT(kd_dist_block_unpack(buf, bytes - 1, &c, &err), KD_EBADREQ);
    CHECK_EQ_INT(kd_dist_block_unpack(buf, 40, &c, &err), KD_EBADREQ);
    unsigned char *bad = malloc(bytes);
    REQUIRE(bad != NULL);
    memcpy(bad, buf, bytes);
    bad[0] ^= 1; /* magic */
    CHECK_EQ_INT(kd_dist_block_unpack(bad, bytes, &c, &err), KD_EBADREQ);
    if (b->offd->nnz > 0) { /* an off-diagonal index past the ghosts: counted from the end */
        const int32_t nb = b->neighbours, sends = b->send_start[nb];
        const size_t tail = (size_t)b->offd->nnz * kd_dtype_size(b->dtype) + (size_t)b->ghosts * 4 +
                            (size_t)nb * 4 + (size_t)(nb + 1) * 8 + (size_t)sends * 4;
        const size_t at = bytes - tail - (size_t)b->offd->nnz * 4;
        int32_t first, huge = (int32_t)b->ghosts;
        memcpy(&first, (unsigned char *)buf + at, 4);
        CHECK_EQ_INT(first, b->offd->indices[0]); /* the layout is as documented */
        memcpy(bad, buf, bytes);
        memcpy(bad + at, &huge, 4);
        CHECK_EQ_INT(kd_dist_block_unpack(bad, bytes, &c, &err), KD_EBADREQ);
        CHECK_STR_CONTAINS(err.message, "inconsistent");
    }
    free(bad);
    free(buf);
}

static void run_case(const kd_csr_t *A, int ranks, const char *what)
{
    kd_dist_partition_t p;
    kd_err_t err = {0};
    if (kd_dist_partition_rows(A, ranks, &p, &err) != KD_OK) {
        CHECK_MSG(0, "%s: %s", what, err.message);
        return;
    }
    check_partition(A, &p);
    kd_dist_block_t *blocks = calloc((size_t)ranks, sizeof(*blocks));
    REQUIRE(blocks != NULL);
    int rc = kd_dist_split(A, &p, NULL, blocks, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", what, err.message);
    if (rc == KD_OK) {
        check_blocks(A, &p, blocks);
        for (int r = 0; r < ranks; r++)
            check_pack(&blocks[r]);
    }
    for (int r = 0; r < ranks; r++)
        kd_dist_block_free(&blocks[r]);
    free(blocks);
    kd_dist_partition_free(&p);
}

static void test_shapes(void)
{
    const int64_t sizes[] = {1, 2, 3, 7, 50, 333};
    for (int shape = 0; shape < KD_DIST_SHAPES; shape++)
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
            for (int ranks = 1; ranks <= 5; ranks++) {
                kd_csr_t *A = kd_dist_test_shape(shape, sizes[s], 7);
                char what[96];
                snprintf(what, sizeof(what), "%s n=%lld ranks=%d", kd_dist_test_shape_name(shape),
                         (long long)sizes[s], ranks);
                run_case(A, ranks, what);
                kd_csr_free(A);
            }
}

/* More ranks than rows: the surplus ranks own nothing and appear in no plan. */
static void test_more_ranks_than_rows(void)
{
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_RANDOM, 3, 1);
    kd_dist_partition_t p;
    kd_err_t err = {0};
    REQUIRE(kd_dist_partition_rows(A, 8, &p, &err) == KD_OK);
    int empty = 0;
    for (int r = 0; r < 8; r++)
        empty += p.row_start[r + 1] == p.row_start[r];
    CHECK(empty >= 5);
    kd_dist_partition_free(&p);
    run_case(A, 8, "random n=3 ranks=8");
    kd_csr_free(A);
}

/* The dense row goes to a block of its own; a heavy last row leaves the first ranks the rest. */
static void test_dense_row_balance(void)
{
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_DENSE_CROSS, 1000, 3);
    kd_dist_partition_t p;
    kd_err_t err = {0};
    REQUIRE(kd_dist_partition_rows(A, 4, &p, &err) == KD_OK);
    CHECK_EQ_INT(p.row_start[1], 1); /* row 0 weighs 1001 of 4000: rank 0 alone */
    kd_dist_partition_free(&p);
    kd_csr_free(A);
}

static void test_refusals(void)
{
    kd_csr_t *A = kd_dist_test_shape(KD_DIST_SHAPE_RANDOM, 10, 1);
    kd_dist_partition_t p;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_dist_partition_rows(A, 0, &p, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "ranks = 0");
    CHECK_EQ_INT(kd_dist_partition_rows(A, KD_DIST_RANKS_MAX + 1, &p, &err), KD_EBADREQ);
    kd_csr_free(A);
    kd_csr_t *R = NULL;
    int64_t row[1] = {0}, col[1] = {1};
    double val[1] = {1.0};
    REQUIRE(kd_csr_from_coo_arrays(2, 3, 1, row, col, KD_DTYPE_I64, val, KD_DTYPE_F64, KD_DTYPE_F64,
                                   NULL, &R, &err) == KD_OK);
    REQUIRE(kd_dist_partition_rows(R, 2, &p, &err) == KD_OK);
    kd_dist_block_t blocks[2];
    CHECK_EQ_INT(kd_dist_split(R, &p, NULL, blocks, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "square");
    kd_dist_partition_free(&p);
    kd_csr_free(R);
}

int main(void)
{
    kd_test_seed();
    RUN(test_shapes);
    RUN(test_more_ranks_than_rows);
    RUN(test_dense_row_balance);
    RUN(test_refusals);
    return kd_test_finish();
}
