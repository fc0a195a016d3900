/*
 * COO SpMV by segmented reduction, without atomics, and the conversion of CSR row pointers into
 * COO row indices. The entries are (row, column, value) triplets sorted by row (the CSR order).
 *
 * Thread mapping: the entries are cut into chunks of KD_WG_SIZE, one work-group per chunk, one
 * entry per work-item, so every load of rows[], cols[] and values[] is coalesced whatever the row
 * lengths. kd_coo_chunks puts each work-item's product and row in local memory and runs an
 * inclusive segmented scan over the chunk (log2(KD_WG_SIZE) steps, two barriers each; work-item i
 * adds the value i - s places back when that entry is in the same row - rows are sorted, so the
 * same row there means the same row all the way). The last entry of each row segment then holds
 * the segment's sum:
 *  - a row that starts and ends inside the chunk is finished: y[row] += alpha * sum;
 *  - the chunk's first and last segments are also recorded in head[chunk] and tail[chunk] (the
 *    same sum when the chunk holds one segment). A row that crosses a chunk boundary is not
 *    written by kd_coo_chunks at all.
 * kd_coo_fix then gives each boundary-crossing row exactly one owner: the work-item of the first
 * boundary the row crosses. It adds the row's tail in the chunk where the row starts and the head
 * of every following chunk the row reaches, in order, and updates y once. The summation order is
 * fixed, so results are reproducible, and no floating-point atomics are needed.
 *
 * Both kernels update y (y += alpha * A x over the rows they own): kd_coo_scale first sets y to
 * beta * y (or to 0 when beta == 0, without reading y) for the COO format; HYB runs its ELL part
 * first instead.
 */

/* y[i] = beta * y[i], or 0 when beta == 0 (y not read). One work-item per element. */
__kernel KD_WG_ATTR void kd_coo_scale(const int n, __global VALUE *y, const VALUE beta)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)n)
        return;
    y[i] = beta == KD_ZERO ? KD_ZERO : beta * y[i];
}

/* rows_out[k] = the row of entry k: the last r with indptr[r] <= k (binary search; empty rows
 * are skipped because they share their pointer with the next row). One work-item per entry. */
__kernel KD_WG_ATTR void kd_coo_rows_from_csr(const int nnz, const int rows,
                                              __global const int *indptr,
                                              __global int *rows_out)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)nnz)
        return;
    int lo = 0, hi = rows; /* indptr[lo] <= k < indptr[hi] */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (indptr[mid] <= (int)k)
            lo = mid;
        else
            hi = mid;
    }
    rows_out[k] = lo;
}

__kernel KD_WG_ATTR void kd_coo_chunks(const int nnz, __global const int *rows,
                                       __global const int *cols, __global const VALUE *values,
                                       __global const VALUE *x, __global VALUE *y,
                                       __global VALUE *head, __global VALUE *tail,
                                       const VALUE alpha)
{
    __local int lrow[KD_WG_SIZE];
    __local VALUE lsum[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const size_t chunk = get_group_id(0);
    const int start = (int)(chunk * KD_WG_SIZE);
    const int end = nnz - start < KD_WG_SIZE ? nnz : start + KD_WG_SIZE;
    const int k = start + lid;
    const int valid = k < end;
    const int row = valid ? rows[k] : -1;
    lrow[lid] = row;
    lsum[lid] = valid ? values[k] * x[cols[k]] : KD_ZERO;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 1; s < KD_WG_SIZE; s <<= 1) {
        const VALUE add = (lid >= s && lrow[lid - s] == row) ? lsum[lid - s] : KD_ZERO;
        barrier(CLK_LOCAL_MEM_FENCE);
        lsum[lid] += add;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (!valid || (lid + 1 < KD_WG_SIZE && lrow[lid + 1] == row))
        return; /* not the last entry of its segment */
    const VALUE sum = lsum[lid];
    const int first = row == lrow[0];
    const int last = row == lrow[end - start - 1];
    const int from_before = first && start > 0 && rows[start - 1] == row;
    const int goes_on = last && end < nnz && rows[end] == row;
    if (!from_before && !goes_on)
        y[row] += alpha * sum;
    if (first)
        head[chunk] = sum;
    if (last)
        tail[chunk] = sum;
}

/* One work-item per chunk boundary c (between chunks c - 1 and c), c = 1 .. chunks - 1. */
__kernel KD_WG_ATTR void kd_coo_fix(const int nnz, const int chunks, __global const int *rows,
                                    __global const VALUE *head, __global const VALUE *tail,
                                    __global VALUE *y, const VALUE alpha)
{
    const int c = (int)get_global_id(0) + 1;
    if (c >= chunks)
        return;
    const int start = c * KD_WG_SIZE;
    const int row = rows[start];
    if (rows[start - 1] != row)
        return; /* no row crosses this boundary */
    const int prev = start - KD_WG_SIZE;
    if (prev > 0 && rows[prev - 1] == row)
        return; /* the row started before chunk c - 1: an earlier boundary owns it */
    VALUE sum = tail[c - 1];
    for (int d = c; d < chunks; d++) {
        sum += head[d];
        const int end = nnz - d * KD_WG_SIZE < KD_WG_SIZE ? nnz : (d + 1) * KD_WG_SIZE;
        if (rows[end - 1] != row || end >= nnz || rows[end] != row)
            break; /* the row ends inside chunk d, or exactly at its end */
    }
    y[row] += alpha * sum;
}
