/*
 * Splitting a matrix into its ranks' blocks and their halo plans (block.h). One pass per rank over
 * its rows finds its ghosts (a stamp per column, so a column is listed once per rank), sorts
 * them, and fills diag and offd; then the receive ranges of every rank, read backwards, are the
 * send lists of every other: rank q's ghosts owned by p are what p sends q, in q's order.
 */
#include "dist/block.h"
#include "common/checked.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void kd_dist_summary_clear(kd_dist_summary_t *s)
{
    memset(s, 0, sizeof(*s));
    s->non_finite_row = s->non_finite_col = -1;
    s->bad_diagonal_row = s->negative_diagonal_row = -1;
    s->asymmetric_row = s->asymmetric_col = -1;
}

void kd_dist_block_free(kd_dist_block_t *b)
{
    if (b == NULL)
        return;
    free(b->row_start);
    kd_csr_free(b->diag);
    kd_csr_free(b->offd);
    free(b->ghost_col);
    free(b->neighbour);
    free(b->send_start);
    free(b->send_index);
    free(b->recv_start);
    memset(b, 0, sizeof(*b));
}

static int kd_dist_cmp_i32(const void *a, const void *b)
{
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Block r's ghosts (ascending, in b->ghost_col) and its diag and offd. stamp and pos: A->cols
 * scratch entries each; stamp[j] == r + 1 marks a ghost of r already listed. */
static int kd_dist_split_rows(const kd_csr_t *A, const kd_dist_partition_t *p, int r,
                              int32_t *stamp, int32_t *pos, kd_dist_block_t *b, kd_err_t *err)
{
    const int64_t lo = p->row_start[r], hi = p->row_start[r + 1], n = hi - lo;
    const size_t vsize = kd_dtype_size(A->dtype);
    int64_t ghosts = 0, diag_nnz = 0;
    for (int64_t e = A->indptr[lo]; e < A->indptr[hi]; e++) {
        const int32_t j = A->indices[e];
        if (j >= lo && j < hi)
            diag_nnz++;
        else if (stamp[j] != r + 1) {
            stamp[j] = r + 1;
            ghosts++;
        }
    }
    const int64_t offd_nnz = (int64_t)A->indptr[hi] - A->indptr[lo] - diag_nnz;
    int rc;
    if ((rc = kd_csr_alloc(n, n, diag_nnz, A->dtype, &b->diag, err)) != KD_OK ||
        (rc = kd_csr_alloc(n, ghosts, offd_nnz, A->dtype, &b->offd, err)) != KD_OK)
        return rc;
    b->ghosts = ghosts;
    if ((b->ghost_col = kd_malloc_array((size_t)ghosts, sizeof(int32_t))) == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld ghosts", (long long)ghosts);
    int64_t g = 0;
    for (int64_t e = A->indptr[lo]; e < A->indptr[hi]; e++) {
        const int32_t j = A->indices[e];
        if ((j < lo || j >= hi) && stamp[j] == r + 1) {
            stamp[j] = -(r + 1); /* listed */
            b->ghost_col[g++] = j;
        }
    }
    qsort(b->ghost_col, (size_t)ghosts, sizeof(int32_t), kd_dist_cmp_i32);
    for (int64_t k = 0; k < ghosts; k++)
        pos[b->ghost_col[k]] = (int32_t)k;
    int64_t dn = 0, on = 0;
    b->diag->indptr[0] = b->offd->indptr[0] = 0;
    for (int64_t i = lo; i < hi; i++) {
        for (int64_t e = A->indptr[i]; e < A->indptr[i + 1]; e++) {
            const int32_t j = A->indices[e];
            const char *v = (const char *)A->values + (size_t)e * vsize;
            if (j >= lo && j < hi) {
                b->diag->indices[dn] = (int32_t)(j - lo);
                memcpy((char *)b->diag->values + (size_t)dn++ * vsize, v, vsize);
            } else {
                b->offd->indices[on] = pos[j];
                memcpy((char *)b->offd->values + (size_t)on++ * vsize, v, vsize);
            }
        }
        b->diag->indptr[i - lo + 1] = (int32_t)dn;
        b->offd->indptr[i - lo + 1] = (int32_t)on;
    }
    return KD_OK;
}

/* Per rank r, ascending q: [recv_lo, recv_hi) ghosts of r owned by q. Filled by one sweep. */
static void kd_dist_recv_ranges(const kd_dist_partition_t *p, const kd_dist_block_t *b,
                                int32_t *owners, int32_t *lo, int32_t *hi, int32_t *count)
{
    int32_t m = 0;
    int64_t g = 0;
    while (g < b->ghosts) {
        const int q = kd_dist_partition_owner(p, b->ghost_col[g]);
        int64_t end = g;
        while (end < b->ghosts && b->ghost_col[end] < p->row_start[q + 1])
            end++;
        owners[m] = q;
        lo[m] = (int32_t)g;
        hi[m] = (int32_t)end;
        m++;
        g = end;
    }
    *count = m;
}

/*
 * The halo plans, once every block has its ghosts: rank p's neighbours are the owners of its
 * ghosts and the ranks whose ghosts it owns, merged ascending; it sends q the x entries of q's
 * ghosts it owns (local rows), and receives from q the ghost range q owns.
 */
static int kd_dist_split_plans(const kd_dist_partition_t *p, kd_dist_block_t *blocks, kd_err_t *err)
{
    const int ranks = p->ranks;
    int rc = KD_OK;
    /* Rank r's receive segments (owner, [lo, hi) of its ghosts); how many ranks, and entries,
     * each rank sends. */
    int32_t **owner = calloc((size_t)ranks, sizeof(int32_t *));
    int32_t **rlo = calloc((size_t)ranks, sizeof(int32_t *));
    int32_t **rhi = calloc((size_t)ranks, sizeof(int32_t *));
    int32_t *nseg = calloc((size_t)ranks, sizeof(int32_t));
    int32_t *nsend_to = calloc((size_t)ranks, sizeof(int32_t));
    int64_t *nsend_idx = calloc((size_t)ranks, sizeof(int64_t));
    if (owner == NULL || rlo == NULL || rhi == NULL || nseg == NULL || nsend_to == NULL ||
        nsend_idx == NULL)
        goto nomem;
    for (int r = 0; r < ranks; r++) {
        const size_t most = (size_t)(blocks[r].ghosts < ranks ? blocks[r].ghosts : ranks);
        owner[r] = kd_malloc_array(most, sizeof(int32_t));
        rlo[r] = kd_malloc_array(most, sizeof(int32_t));
        rhi[r] = kd_malloc_array(most, sizeof(int32_t));
        if (owner[r] == NULL || rlo[r] == NULL || rhi[r] == NULL)
            goto nomem;
        kd_dist_recv_ranges(p, &blocks[r], owner[r], rlo[r], rhi[r], &nseg[r]);
        for (int32_t s = 0; s < nseg[r]; s++) {
            nsend_to[owner[r][s]]++;
            nsend_idx[owner[r][s]] += rhi[r][s] - rlo[r][s];
        }
    }
    for (int r = 0; r < ranks; r++) {
        kd_dist_block_t *b = &blocks[r];
        /* neighbours: merge of the senders to r (owner[r], ascending) and the ranks r sends to
         * (found by scanning every q's owners for r: ascending q) */
        const size_t most = (size_t)nseg[r] + (size_t)nsend_to[r];
        b->neighbour = kd_malloc_array(most, sizeof(int32_t));
        b->send_start = kd_malloc_array(most + 1, sizeof(int32_t));
        b->recv_start = kd_malloc_array(most + 1, sizeof(int32_t));
        b->send_index = kd_malloc_array((size_t)nsend_idx[r], sizeof(int32_t));
        if (b->neighbour == NULL || b->send_start == NULL || b->recv_start == NULL ||
            b->send_index == NULL)
            goto nomem;
    }
    /* Walk each rank's partner set in ascending order: q from 0, merging "q sends to r" (q in
     * owner[r]) and "r sends to q" (r in owner[q]). O(ranks^2) in the worst case only through
     * the search below, which stops at the first owner >= r (segments are ascending). */
    for (int r = 0; r < ranks; r++) {
        kd_dist_block_t *b = &blocks[r];
        const int64_t base = b->row_start[r];
        int32_t m = 0, sent = 0, s_recv = 0;
        for (int q = 0; q < ranks; q++) {
            if (q == r)
                continue;
            int32_t seg = -1; /* q's segment of ghosts owned by r */
            for (int32_t s = 0; s < nseg[q] && owner[q][s] <= r; s++)
                if (owner[q][s] == r)
                    seg = s;
            const int recv = s_recv < nseg[r] && owner[r][s_recv] == q;
            if (seg < 0 && !recv)
                continue;
            b->neighbour[m] = q;
            b->send_start[m] = sent;
            b->recv_start[m] =
                recv ? rlo[r][s_recv] : (s_recv < nseg[r] ? rlo[r][s_recv] : (int32_t)b->ghosts);
            if (seg >= 0)
                for (int32_t g = rlo[q][seg]; g < rhi[q][seg]; g++)
                    b->send_index[sent++] = (int32_t)(blocks[q].ghost_col[g] - base);
            s_recv += recv;
            m++;
        }
        b->neighbours = m;
        b->send_start[m] = sent;
        b->recv_start[m] = (int32_t)b->ghosts;
    }
    goto out;
nomem:
    rc = kd_err_set(err, KD_ENOMEM, "out of host memory for the halo plans of %d ranks", ranks);
out:
    for (int r = 0; owner != NULL && r < ranks; r++) {
        free(owner[r]);
        free(rlo[r]);
        free(rhi[r]);
    }
    free(owner);
    free(rlo);
    free(rhi);
    free(nseg);
    free(nsend_to);
    free(nsend_idx);
    return rc;
}

int kd_dist_split(const kd_csr_t *A, const kd_dist_partition_t *p, const kd_dist_summary_t *summary,
                  kd_dist_block_t *blocks, kd_err_t *err)
{
    assert(A != NULL && p != NULL && blocks != NULL);
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "a %lld x %lld matrix: only square matrices spread",
                          (long long)A->rows, (long long)A->cols);
    if (p->rows != A->rows || p->ranks < 1)
        return kd_err_set(err, KD_EINTERNAL, "a partition of %lld rows for %lld",
                          (long long)p->rows, (long long)A->rows);
    int rc = KD_OK;
    int32_t *stamp = calloc((size_t)A->cols + 1, sizeof(int32_t));
    int32_t *pos = calloc((size_t)A->cols + 1, sizeof(int32_t));
    if (stamp == NULL || pos == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory splitting %lld columns",
                        (long long)A->cols);
        goto out;
    }
    for (int r = 0; r < p->ranks && rc == KD_OK; r++) {
        kd_dist_block_t *b = &blocks[r];
        memset(b, 0, sizeof(*b));
        b->rank = r;
        b->ranks = p->ranks;
        b->rows = A->rows;
        b->cols = A->cols;
        b->nnz = A->nnz;
        b->dtype = A->dtype;
        if (summary != NULL)
            b->summary = *summary;
        else
            kd_dist_summary_clear(&b->summary);
        b->row_start = kd_malloc_array((size_t)p->ranks + 1, sizeof(int64_t));
        if (b->row_start == NULL) {
            rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %d row blocks", p->ranks);
            break;
        }
        memcpy(b->row_start, p->row_start, ((size_t)p->ranks + 1) * sizeof(int64_t));
        rc = kd_dist_split_rows(A, p, r, stamp, pos, b, err);
    }
    if (rc == KD_OK)
        rc = kd_dist_split_plans(p, blocks, err);
out:
    free(stamp);
    free(pos);
    if (rc != KD_OK)
        for (int r = 0; r < p->ranks; r++)
            kd_dist_block_free(&blocks[r]);
    return rc;
}
