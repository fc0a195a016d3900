/*
 * CSR adaptive SpMV (after Greathouse and Daga, "Efficient sparse matrix-vector multiplication
 * on GPUs using the CSR storage format", SC14): the CSR arrays plus a table of row blocks made on
 * the host at upload (solver/formats/csr_adaptive.c), one work-group per block. A block is four
 * ints {row_begin, row_end, k_begin, k_end}, and comes in three kinds:
 *
 *  - stream (row_end > row_begin, at most KD_CAP entries, at most KD_WG_SIZE rows): many short
 *    rows. The group first streams the block's entries, consecutive work-items reading
 *    consecutive entries (fully coalesced, whatever the row lengths; each work-item's
 *    KD_CAP / KD_WG_SIZE loads issued together), and stores the products
 *    values[k] * x[indices[k]] in local memory. After a barrier, T work-items serve each row,
 *    T = KD_WG_SIZE / rows rounded down to a power of two (1 for blocks of 256 short rows, up to
 *    KD_WG_SIZE for a block of one row): lane l of a row adds the row's products l, l + T, ...
 *    from local memory, and the T lanes fold their sums in a tree in local memory, a barrier
 *    between levels. The first lane writes y.
 *  - vector (one row of more than KD_CAP entries, row_end = row_begin + 1): the whole group walks
 *    the row, work-item i reading entries i, i + KD_WG_SIZE, ... (coalesced, four at a time into
 *    four partial sums), and folds the group's sums in a tree. One work-group per medium row.
 *  - chunk (row_end = -(slot + 1)): a piece [k_begin, k_end) of a very long row, split at upload
 *    so that several work-groups share the row. The group reduces its piece as in vector mode
 *    and writes the sum to partials[slot] - no y, no alpha or beta, no atomics. A second kernel,
 *    kd_csr_adaptive_long, then gives each long row one work-item that adds the row's partials
 *    in slot order and writes y: deterministic, and correct without floating-point atomics.
 *
 * Every work-item of a group takes the same branch (the block kind is uniform per group), and
 * every barrier is reached by the whole group. When beta == 0, y is only written.
 */
#ifndef KD_CAP
#error "KD_CAP (entries a stream block holds in local memory) must be defined"
#endif
#if KD_CAP % KD_WG_SIZE != 0
#error "KD_CAP must be a multiple of KD_WG_SIZE"
#endif
#define KD_ITEMS (KD_CAP / KD_WG_SIZE)

/* The group's sum of v through red[KD_WG_SIZE]; valid in work-item 0. */
VALUE kd_adaptive_group_sum(__local VALUE *red, VALUE v)
{
    const uint lid = get_local_id(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return red[0];
}

__kernel KD_WG_ATTR void kd_csr_adaptive_spmv(__global const int4 *blocks,
                                              __global const int *indptr,
                                              __global const int *indices,
                                              __global const VALUE *values,
                                              __global const VALUE *x, __global VALUE *y,
                                              __global VALUE *partials, const VALUE alpha,
                                              const VALUE beta)
{
    __local VALUE products[KD_CAP];
    __local VALUE red[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int4 b = blocks[get_group_id(0)];
    const int row_begin = b.x, row_end = b.y, k_begin = b.z, k_end = b.w;

    if (row_end < 0 || k_end - k_begin > KD_CAP) { /* chunk or vector: the group walks one row */
        const VALUE old = (row_end >= 0 && beta != KD_ZERO) ? y[row_begin] : KD_ZERO;
        /* four independent partial sums: four loads in flight per work-item */
        VALUE s0 = KD_ZERO, s1 = KD_ZERO, s2 = KD_ZERO, s3 = KD_ZERO;
        int k = k_begin + lid;
        for (; k + 3 * KD_WG_SIZE < k_end; k += 4 * KD_WG_SIZE) {
            s0 += values[k] * x[indices[k]];
            s1 += values[k + KD_WG_SIZE] * x[indices[k + KD_WG_SIZE]];
            s2 += values[k + 2 * KD_WG_SIZE] * x[indices[k + 2 * KD_WG_SIZE]];
            s3 += values[k + 3 * KD_WG_SIZE] * x[indices[k + 3 * KD_WG_SIZE]];
        }
        for (; k < k_end; k += KD_WG_SIZE)
            s0 += values[k] * x[indices[k]];
        const VALUE sum = kd_adaptive_group_sum(red, (s0 + s1) + (s2 + s3));
        if (lid == 0) {
            if (row_end < 0)
                partials[-row_end - 1] = sum;
            else
                y[row_begin] = alpha * sum + beta * old;
        }
        return;
    }

    /* stream: the block's products into local memory. Work-item lid takes entries lid,
     * lid + KD_WG_SIZE, ... (coalesced), and issues all its index and value loads, then all its
     * gathers from x, before the first use, so KD_ITEMS loads per work-item are in flight. */
    const int count = k_end - k_begin;
    int col[KD_ITEMS];
    VALUE val[KD_ITEMS];
#pragma unroll
    for (int i = 0; i < KD_ITEMS; i++) {
        const int k = lid + i * KD_WG_SIZE;
        col[i] = k < count ? indices[k_begin + k] : 0;
        val[i] = k < count ? values[k_begin + k] : KD_ZERO;
    }
#pragma unroll
    for (int i = 0; i < KD_ITEMS; i++) {
        const int k = lid + i * KD_WG_SIZE;
        if (k < count)
            products[k] = val[i] * x[col[i]];
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    const int nrows = row_end - row_begin;
    int t = KD_WG_SIZE;
    while (t > 1 && t * nrows > KD_WG_SIZE)
        t >>= 1;
    const int lane = lid & (t - 1);
    const int local_row = lid / t;
    const int row = row_begin + local_row;
    VALUE sum = KD_ZERO;
    if (local_row < nrows) {
        const int end = indptr[row + 1] - k_begin;
        for (int k = indptr[row] - k_begin + lane; k < end; k += t)
            sum += products[k];
    }
    if (t > 1) {
        red[lid] = sum;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int s = t / 2; s > 0; s >>= 1) {
            if (lane < s)
                red[lid] += red[lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        sum = red[lid];
    }
    if (lane == 0 && local_row < nrows) {
        if (beta == KD_ZERO)
            y[row] = alpha * sum;
        else
            y[row] = alpha * sum + beta * y[row];
    }
}

/* One work-item per long row: y[row] from the row's partial sums, added in slot order. */
__kernel KD_WG_ATTR void kd_csr_adaptive_long(const int nlong, __global const int *long_rows,
                                              __global const int *long_slots,
                                              __global const VALUE *partials, __global VALUE *y,
                                              const VALUE alpha, const VALUE beta)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)nlong)
        return;
    VALUE sum = KD_ZERO;
    for (int s = long_slots[i]; s < long_slots[i + 1]; s++)
        sum += partials[s];
    const int row = long_rows[i];
    if (beta == KD_ZERO)
        y[row] = alpha * sum;
    else
        y[row] = alpha * sum + beta * y[row];
}
