/*
 * Row blocks balanced by weight (partition.h). Boundary r is the first row whose weight prefix
 * reaches r / ranks of the total: one pass over the row pointers, integers only, so every rank
 * that computes the cut gets the same one.
 */
#include "dist/partition.h"

#include <assert.h>
#include <stdlib.h>

int kd_dist_partition_rows(const kd_csr_t *A, int ranks, kd_dist_partition_t *out, kd_err_t *err)
{
    assert(A != NULL && out != NULL);
    out->ranks = 0;
    out->rows = 0;
    out->row_start = NULL;
    if (ranks < 1 || ranks > KD_DIST_RANKS_MAX)
        return kd_err_set(err, KD_EBADREQ, "ranks = %d: 1..%d", ranks, KD_DIST_RANKS_MAX);
    int64_t *start = calloc((size_t)ranks + 1, sizeof(int64_t));
    if (start == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %d row blocks", ranks);
    /* Weight of rows [0, i): indptr[i] + i; total nnz + rows <= 2^32, times ranks <= 2^16. */
    const int64_t total = A->nnz + A->rows;
    int64_t i = 0;
    for (int r = 1; r < ranks; r++) {
        const int64_t target = (int64_t)r * total;
        while (i < A->rows && ((int64_t)A->indptr[i] + i) * ranks < target)
            i++;
        start[r] = i;
    }
    start[ranks] = A->rows;
    out->ranks = ranks;
    out->rows = A->rows;
    out->row_start = start;
    return KD_OK;
}

void kd_dist_partition_free(kd_dist_partition_t *p)
{
    if (p == NULL)
        return;
    free(p->row_start);
    p->row_start = NULL;
    p->ranks = 0;
}

int kd_dist_partition_owner(const kd_dist_partition_t *p, int64_t row)
{
    assert(p != NULL && row >= 0 && row < p->rows);
    int lo = 0, hi = p->ranks - 1; /* the last r with row_start[r] <= row */
    while (lo < hi) {
        const int mid = lo + (hi - lo + 1) / 2;
        if (p->row_start[mid] <= row)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}
