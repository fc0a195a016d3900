/*
 * The device half of a distributed SpMV's halo exchange (dist/halo.c): the x entries this rank
 * sends its neighbours, gathered into one contiguous buffer that crosses to the host in one read.
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
