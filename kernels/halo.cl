/*
 * The device half of a distributed SpMV's halo exchange (dist/halo.c): the x entries this rank
 * sends its neighbours, gathered into one contiguous buffer that crosses to the host in one read;
 * and the off-diagonal block's multiply on the ghosts that came back.
 *
 * Thread mapping: a 2-D range (sends rounded up, k); work-item (i, c) copies entry i of the send
 * list for column c. Layout out[i * k + c]: all k columns of one entry together, so each
 * neighbour's share (a contiguous run of the send list) is one contiguous message for every
 * column at once. The reads of x are a gather through the send list (local rows in ascending
 * order per neighbour, so mostly increasing addresses); the writes are contiguous.
 */
__kernel void kd_halo_gather(const int sends, const int k, const long ld,
                             __global const int *send_index, __global const VALUE *x,
                             __global VALUE *out)
{
    const size_t i = get_global_id(0);
    const int c = (int)get_global_id(1);
    if (i >= (size_t)sends || c >= k)
        return;
    out[i * (size_t)k + (size_t)c] = x[(size_t)c * (size_t)ld + (size_t)send_index[i]];
}

/*
 * Y[:, c0 + c] += alpha A_offd G[:, c0 + c] for c < k, over the off-diagonal block's non-empty
 * rows only (dist/dist_matrix.h, kd_dist_offd_t): work-item (r, c) takes compressed row r of
 * column c0 + c, so the rows without ghosts (nearly all) cost nothing. Each local row appears once
 * in row[], so no two work-items of a column write the same y entry.
 */
__kernel void kd_halo_offd(const int rows, const int c0, const int k, __global const int *row,
                           __global const int *ptr, __global const int *indices,
                           __global const VALUE *values, __global const VALUE *g, const long ldg,
                           __global VALUE *y, const long ldy, const VALUE alpha)
{
    const size_t r = get_global_id(0);
    const int c = (int)get_global_id(1);
    if (r >= (size_t)rows || c >= k)
        return;
    __global const VALUE *gc = g + (size_t)(c0 + c) * (size_t)ldg;
    VALUE sum = KD_ZERO;
    for (int e = ptr[r]; e < ptr[r + 1]; e++)
        sum += values[e] * gc[indices[e]];
    y[(size_t)(c0 + c) * (size_t)ldy + (size_t)row[r]] += alpha * sum;
}
