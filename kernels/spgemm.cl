/*
 * Sparse times sparse, C = A B, row by row (solver/spgemm.c drives it; the bins and the header
 * are in spgemm_abi.h). Build options: -DKD_WG_SIZE=WG, -DKD_SPGEMM_LANE_SLOTS=L (hash slots per
 * work-item: a work-group's tables hold WG * L slots in all, whatever its team size).
 *
 * Kernels, their thread mapping and memory access:
 *  - kd_spgemm_count: WG * KD_SPGEMM_SCAN_ITEMS rows of A per work-group, work-item i of the group
 *    takes rows base + it * WG + i (coalesced reads of A's row pointers), walks the row's column
 *    indices and reads B's row pointers there (gathers). Per row: ub (int64), its bin; per group:
 *    the sum of ub (a tree in local memory) and the rows per bin (local integer atomics).
 *  - kd_spgemm_bin_offsets: one work-group. Work-item i takes a contiguous run of groups, the runs'
 *    bin counts are scanned in local memory (int8 vectors, one per work-item), so each group's
 *    count per bin becomes the position of its first row in bin_rows; the products' total and the
 *    bins' sizes and starts go to the header the host reads.
 *  - kd_spgemm_bin_scatter: the rows of kd_spgemm_count again, one-hot bin vectors scanned in local
 *    memory: row ids land in bin_rows in ascending order within each bin (deterministic).
 *  - kd_spgemm_symbolic_<bin>, kd_spgemm_numeric_<bin>: a team of T work-items per row of the bin
 *    (T = 4 .. 64, WG / T rows per work-group; T = WG for the whole-group bin), each team with a
 *    hash table of T * L slots in local memory (open addressing, linear probing from
 *    (column * 107) mod slots, keys claimed with atomic_cmpxchg). The team walks A's row one entry
 *    a_ik at a time and its work-items take B's row k in parallel (coalesced reads of B's column
 *    indices and values). Symbolic counts the columns that were new; numeric adds a_ik * b_kj
 *    into the slot's value, with a barrier after each entry of A, then ranks each occupied slot
 *    by counting the smaller keys and writes (column, value) at that rank of C's row.
 *  - kd_spgemm_symbolic_global, kd_spgemm_numeric_global: rows whose columns may not fit the
 *    group's table. A fixed number of work-groups loop over the bin's rows (row g, g + groups,
 *    ...), each with its own dense accumulator in global memory: a bitmap of C's n columns and
 *    (numeric) n values. Work-items take B's row k in parallel; a column's bit is set with
 *    atomic_or, whose old value says whether the column is new. Numeric writes the first product
 *    (0 + p) and adds the next ones, one entry of A per step with a barrier between steps, then
 *    walks the bitmap in chunks of WG words (a scan of their popcounts in local memory gives each
 *    word its place in C's row) and emits the set bits in column order, clearing them, so the
 *    scratch is clean for the group's next row and values need no clearing at all.
 *  - kd_spgemm_scan_reduce, kd_spgemm_scan_partials, kd_spgemm_scan_apply: the exclusive scan of
 *    the rows' counts (written into C's row pointer) in place: per-group sums (int64), one group
 *    scans those and writes the total (C's nnz) to the header, then each group scans its chunk.
 *
 * Determinism: no floating-point atomics. In numeric, within one step every product has a
 * distinct column (B's row is canonical), so each slot or dense value is touched by at most one
 * work-item, and the barrier between steps orders the steps: every entry of C is
 * ((0 + a_i,k1 b_k1,j) + a_i,k2 b_k2,j) + ... in the order of A's row, as a sequential loop on the
 * host computes it. FP_CONTRACT is off so a product and its sum are rounded separately.
 *
 * No kernel returns before its last barrier (PoCL hangs otherwise): a team without a row still
 * takes every step.
 */
#pragma OPENCL FP_CONTRACT OFF

#include "spgemm_abi.h"

#ifndef KD_SPGEMM_LANE_SLOTS
#error "KD_SPGEMM_LANE_SLOTS must be defined (solver/spgemm.c passes it)"
#endif
#define KD_SPGEMM_GROUP_SLOTS (KD_WG_SIZE * KD_SPGEMM_LANE_SLOTS)
#define KD_SPGEMM_FREE (-1)
#define KD_SPGEMM_ROWS_PER_GROUP (KD_WG_SIZE * KD_SPGEMM_SCAN_ITEMS)

/* The bin of a row of `len` entries of A with `ub` products, C having n columns. */
int kd_spgemm_bin_of(const long ub, const int len, const int n)
{
    if (ub == 0)
        return KD_SPGEMM_BIN_EMPTY;
    const long need = min(ub, (long)n);
    if (need > KD_SPGEMM_GROUP_SLOTS)
        return KD_SPGEMM_BIN_GLOBAL;
    const long parallel = (ub + len - 1) / len;
    for (int b = KD_SPGEMM_BIN_TEAM_FIRST; b <= KD_SPGEMM_BIN_TEAM_LAST; b++) {
        const int lanes = KD_SPGEMM_TEAM_LANES(b);
        if (lanes < KD_WG_SIZE && lanes >= parallel && (long)lanes * KD_SPGEMM_LANE_SLOTS >= need)
            return b;
    }
    return KD_SPGEMM_BIN_GROUP;
}

/* Inclusive scan of v[0..WG) in place (Hillis-Steele); every work-item calls it. */
#define KD_SPGEMM_SCAN_LOCAL(TYPE, v, lid)                                                         \
    do {                                                                                           \
        for (int s_ = 1; s_ < KD_WG_SIZE; s_ <<= 1) {                                              \
            const TYPE add_ = (lid) >= s_ ? (v)[(lid)-s_] : (TYPE)(0);                             \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
            (v)[(lid)] += add_;                                                                    \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        }                                                                                          \
    } while (0)

/* Component b of v. */
int kd_spgemm_pick(const int8 v, const int b)
{
    int a[8];
    vstore8(v, 0, a);
    return a[b];
}

__kernel KD_WG_ATTR void kd_spgemm_count(const int rows, const int n, __global const int *a_indptr,
                                         __global const int *a_indices,
                                         __global const int *b_indptr, __global uchar *row_bin,
                                         __global int *row_nnz, __global long *group_products,
                                         __global int *group_bins)
{
    __local long lsum[KD_WG_SIZE];
    __local int lbins[KD_SPGEMM_BINS];
    const int lid = (int)get_local_id(0);
    const int base = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP;
    for (int b = lid; b < KD_SPGEMM_BINS; b += KD_WG_SIZE)
        lbins[b] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    long total = 0;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int row = base + it * KD_WG_SIZE + lid;
        if (row >= rows)
            break;
        const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
        long ub = 0;
        for (int e = a0; e < a1; e++) {
            const int k = a_indices[e];
            ub += b_indptr[k + 1] - b_indptr[k];
        }
        const int bin = kd_spgemm_bin_of(ub, a1 - a0, n);
        row_bin[row] = (uchar)bin;
        if (bin == KD_SPGEMM_BIN_EMPTY)
            row_nnz[row] = 0;
        atomic_inc(&lbins[bin]);
        total += ub;
    }
    lsum[lid] = total;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            lsum[lid] += lsum[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        group_products[get_group_id(0)] = lsum[0];
    for (int b = lid; b < KD_SPGEMM_BINS; b += KD_WG_SIZE)
        group_bins[get_group_id(0) * KD_SPGEMM_BINS + b] = lbins[b];
}

/* One work-group. group_bins[g][b] becomes the position in bin_rows of group g's first row of
 * bin b. */
__kernel KD_WG_ATTR void kd_spgemm_bin_offsets(const int groups,
                                               __global const long *group_products,
                                               __global int *group_bins, __global long *head)
{
    __local int8 lscan[KD_WG_SIZE];
    __local long lsum[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int per = (groups + KD_WG_SIZE - 1) / KD_WG_SIZE;
    const int lo = min(groups, lid * per), hi = min(groups, lo + per);
    int8 mine = (int8)(0);
    long products = 0;
    for (int g = lo; g < hi; g++) {
        mine += vload8(g, group_bins);
        products += group_products[g];
    }
    lscan[lid] = mine;
    lsum[lid] = products;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            lsum[lid] += lsum[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    KD_SPGEMM_SCAN_LOCAL(int8, lscan, lid);
    const int8 total = lscan[KD_WG_SIZE - 1];
    /* exclusive prefix over the bins: where each bin starts */
    const int8 start =
        (int8)(0, total.s0, total.s0 + total.s1, total.s0 + total.s1 + total.s2,
               total.s0 + total.s1 + total.s2 + total.s3,
               total.s0 + total.s1 + total.s2 + total.s3 + total.s4,
               total.s0 + total.s1 + total.s2 + total.s3 + total.s4 + total.s5,
               total.s0 + total.s1 + total.s2 + total.s3 + total.s4 + total.s5 + total.s6);
    int8 run = lscan[lid] - mine + start;
    for (int g = lo; g < hi; g++) {
        const int8 c = vload8(g, group_bins);
        vstore8(run, g, group_bins);
        run += c;
    }
    if (lid == 0) {
        head[KD_SPGEMM_HEAD_PRODUCTS] = lsum[0];
        for (int b = 0; b < KD_SPGEMM_BINS; b++) {
            head[KD_SPGEMM_HEAD_BIN_ROWS + b] = kd_spgemm_pick(total, b);
            head[KD_SPGEMM_HEAD_BIN_START + b] = kd_spgemm_pick(start, b);
        }
    }
}

__kernel KD_WG_ATTR void kd_spgemm_bin_scatter(const int rows, __global const uchar *row_bin,
                                               __global const int *group_bins,
                                               __global int *bin_rows)
{
    __local int8 lscan[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int base = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP;
    const int8 iota = (int8)(0, 1, 2, 3, 4, 5, 6, 7);
    int8 run = vload8(get_group_id(0), group_bins);
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int row = base + it * KD_WG_SIZE + lid;
        const int bin = row < rows ? (int)row_bin[row] : -1;
        const int8 one = -(iota == (int8)(bin)); /* vector compares give -1 for true */
        lscan[lid] = one;
        barrier(CLK_LOCAL_MEM_FENCE);
        KD_SPGEMM_SCAN_LOCAL(int8, lscan, lid);
        if (bin > KD_SPGEMM_BIN_EMPTY)
            bin_rows[kd_spgemm_pick(run + lscan[lid] - one, bin)] = row;
        run += lscan[KD_WG_SIZE - 1];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* ---- rows in local hash tables ---------------------------------------------------------- */

/* 1 when col was not in the table (it is now). The table never fills: it has at least as many
 * slots as the row has products. A plain read first: a slot's key never changes once set. */
int kd_spgemm_insert(__local int *table, const int mask, const int col)
{
    int h = (int)(((uint)col * 107u) & (uint)mask);
    for (;;) {
        int old = table[h];
        if (old == KD_SPGEMM_FREE)
            old = atomic_cmpxchg(&table[h], KD_SPGEMM_FREE, col);
        if (old == KD_SPGEMM_FREE)
            return 1;
        if (old == col)
            return 0;
        h = (h + 1) & mask;
    }
}

/* The slot of col, inserting it when absent. */
int kd_spgemm_slot(__local int *table, const int mask, const int col)
{
    int h = (int)(((uint)col * 107u) & (uint)mask);
    for (;;) {
        int old = table[h];
        if (old == KD_SPGEMM_FREE)
            old = atomic_cmpxchg(&table[h], KD_SPGEMM_FREE, col);
        if (old == KD_SPGEMM_FREE || old == col)
            return h;
        h = (h + 1) & mask;
    }
}

/* The row team `team` of this work-group works on, or -1. */
int kd_spgemm_team_row(const int lanes, const int count, const int start,
                       __global const int *bin_rows)
{
    const int teams = KD_WG_SIZE / lanes;
    const int idx = (int)get_group_id(0) * teams + (int)get_local_id(0) / lanes;
    return idx < count ? bin_rows[start + idx] : -1;
}

void kd_spgemm_symbolic_team(const int lanes, const int count, const int start,
                             __global const int *bin_rows, __global const int *a_indptr,
                             __global const int *a_indices, __global const int *b_indptr,
                             __global const int *b_indices, __global int *row_nnz,
                             __local int *keys, __local int *counts)
{
    const int lid = (int)get_local_id(0);
    const int team = lid / lanes, lane = lid % lanes;
    const int slots = lanes * KD_SPGEMM_LANE_SLOTS;
    __local int *table = keys + team * slots;
    const int row = kd_spgemm_team_row(lanes, count, start, bin_rows);
    for (int s = lid; s < KD_SPGEMM_GROUP_SLOTS; s += KD_WG_SIZE)
        keys[s] = KD_SPGEMM_FREE;
    if (lane == 0)
        counts[team] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (row >= 0) {
        int fresh = 0;
        const int a1 = a_indptr[row + 1];
        for (int e = a_indptr[row]; e < a1; e++) {
            const int k = a_indices[e];
            const int b1 = b_indptr[k + 1];
            for (int q = b_indptr[k] + lane; q < b1; q += lanes)
                fresh += kd_spgemm_insert(table, slots - 1, b_indices[q]);
        }
        if (fresh > 0)
            atomic_add(&counts[team], fresh);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (row >= 0 && lane == 0)
        row_nnz[row] = counts[team];
}

void kd_spgemm_numeric_team(const int lanes, const int count, const int start,
                            __global const int *bin_rows, __global const int *a_indptr,
                            __global const int *a_indices, __global const VALUE *a_values,
                            __global const int *b_indptr, __global const int *b_indices,
                            __global const VALUE *b_values, __global const int *c_indptr,
                            __global int *c_indices, __global VALUE *c_values, __local int *keys,
                            __local VALUE *vals, __local int *steps)
{
    const int lid = (int)get_local_id(0);
    const int team = lid / lanes, lane = lid % lanes;
    const int slots = lanes * KD_SPGEMM_LANE_SLOTS;
    __local int *table = keys + team * slots;
    __local VALUE *tvals = vals + team * slots;
    const int row = kd_spgemm_team_row(lanes, count, start, bin_rows);
    for (int s = lid; s < KD_SPGEMM_GROUP_SLOTS; s += KD_WG_SIZE) {
        keys[s] = KD_SPGEMM_FREE;
        vals[s] = KD_ZERO;
    }
    if (lid == 0)
        *steps = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int a0 = row >= 0 ? a_indptr[row] : 0;
    const int a1 = row >= 0 ? a_indptr[row + 1] : 0;
    if (lane == 0 && a1 > a0)
        atomic_max(steps, a1 - a0);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int nsteps = *steps;
    for (int s = 0; s < nsteps; s++) {
        if (a0 + s < a1) {
            const int k = a_indices[a0 + s];
            const VALUE a = a_values[a0 + s];
            const int b1 = b_indptr[k + 1];
            for (int q = b_indptr[k] + lane; q < b1; q += lanes) {
                const int slot = kd_spgemm_slot(table, slots - 1, b_indices[q]);
                const VALUE p = a * b_values[q];
                tvals[slot] += p;
            }
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (row >= 0) {
        const int c0 = c_indptr[row];
        for (int s = lane; s < slots; s += lanes) {
            const int key = table[s];
            if (key == KD_SPGEMM_FREE)
                continue;
            int rank = 0;
            for (int t = 0; t < slots; t++) /* a free slot (-1) is the largest as unsigned */
                rank += (uint)table[t] < (uint)key;
            c_indices[c0 + rank] = key;
            c_values[c0 + rank] = tvals[s];
        }
    }
}

#define KD_SPGEMM_TEAM_KERNELS(NAME, LANES)                                                        \
    __kernel KD_WG_ATTR void kd_spgemm_symbolic_##NAME(                                            \
        const int count, const int start, __global const int *bin_rows,                            \
        __global const int *a_indptr, __global const int *a_indices, __global const int *b_indptr, \
        __global const int *b_indices, __global int *row_nnz)                                      \
    {                                                                                              \
        __local int keys[KD_SPGEMM_GROUP_SLOTS];                                                   \
        __local int counts[KD_WG_SIZE / (LANES) + 1];                                              \
        kd_spgemm_symbolic_team((LANES), count, start, bin_rows, a_indptr, a_indices, b_indptr,    \
                                b_indices, row_nnz, keys, counts);                                 \
    }                                                                                              \
    __kernel KD_WG_ATTR void kd_spgemm_numeric_##NAME(                                             \
        const int count, const int start, __global const int *bin_rows,                            \
        __global const int *a_indptr, __global const int *a_indices,                               \
        __global const VALUE *a_values, __global const int *b_indptr,                              \
        __global const int *b_indices, __global const VALUE *b_values,                             \
        __global const int *c_indptr, __global int *c_indices, __global VALUE *c_values)           \
    {                                                                                              \
        __local int keys[KD_SPGEMM_GROUP_SLOTS];                                                   \
        __local VALUE vals[KD_SPGEMM_GROUP_SLOTS];                                                 \
        __local int steps;                                                                         \
        kd_spgemm_numeric_team((LANES), count, start, bin_rows, a_indptr, a_indices, a_values,     \
                               b_indptr, b_indices, b_values, c_indptr, c_indices, c_values, keys, \
                               vals, &steps);                                                      \
    }

KD_SPGEMM_TEAM_KERNELS(t4, 4)
KD_SPGEMM_TEAM_KERNELS(t8, 8)
KD_SPGEMM_TEAM_KERNELS(t16, 16)
KD_SPGEMM_TEAM_KERNELS(t32, 32)
KD_SPGEMM_TEAM_KERNELS(t64, 64)
KD_SPGEMM_TEAM_KERNELS(group, KD_WG_SIZE)

/* ---- rows in global dense accumulators ---------------------------------------------------- */

__kernel KD_WG_ATTR void
kd_spgemm_symbolic_global(const int count, const int start, __global const int *bin_rows,
                          __global const int *a_indptr, __global const int *a_indices,
                          __global const int *b_indptr, __global const int *b_indices,
                          __global int *row_nnz, __global uint *bitmaps, const int words)
{
    __local int lcount;
    const int lid = (int)get_local_id(0);
    __global uint *bits = bitmaps + (size_t)get_group_id(0) * (size_t)words;
    for (int idx = (int)get_group_id(0); idx < count; idx += (int)get_num_groups(0)) {
        const int row = bin_rows[start + idx];
        const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
        if (lid == 0)
            lcount = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        int fresh = 0;
        for (int e = a0; e < a1; e++) {
            const int k = a_indices[e];
            const int b1 = b_indptr[k + 1];
            for (int q = b_indptr[k] + lid; q < b1; q += KD_WG_SIZE) {
                const int j = b_indices[q];
                const uint bit = 1u << (j & 31);
                if ((bits[j >> 5] & bit) == 0 && (atomic_or(&bits[j >> 5], bit) & bit) == 0)
                    fresh++;
            }
        }
        if (fresh > 0)
            atomic_add(&lcount, fresh);
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        if (lid == 0)
            row_nnz[row] = lcount;
        for (int e = a0; e < a1; e++) { /* leave the bitmap clear for the next row */
            const int k = a_indices[e];
            const int b1 = b_indptr[k + 1];
            for (int q = b_indptr[k] + lid; q < b1; q += KD_WG_SIZE)
                bits[b_indices[q] >> 5] = 0u;
        }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
    }
}

__kernel KD_WG_ATTR void kd_spgemm_numeric_global(
    const int count, const int start, __global const int *bin_rows, __global const int *a_indptr,
    __global const int *a_indices, __global const VALUE *a_values, __global const int *b_indptr,
    __global const int *b_indices, __global const VALUE *b_values, __global const int *c_indptr,
    __global int *c_indices, __global VALUE *c_values, __global uint *bitmaps, const int words,
    __global VALUE *dense, const int n)
{
    __local int lscan[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    __global uint *bits = bitmaps + (size_t)get_group_id(0) * (size_t)words;
    __global VALUE *acc = dense + (size_t)get_group_id(0) * (size_t)n;
    for (int idx = (int)get_group_id(0); idx < count; idx += (int)get_num_groups(0)) {
        const int row = bin_rows[start + idx];
        const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
        for (int e = a0; e < a1; e++) {
            const int k = a_indices[e];
            const VALUE a = a_values[e];
            const int b1 = b_indptr[k + 1];
            for (int q = b_indptr[k] + lid; q < b1; q += KD_WG_SIZE) {
                const int j = b_indices[q];
                const uint bit = 1u << (j & 31);
                const VALUE p = a * b_values[q];
                if ((atomic_or(&bits[j >> 5], bit) & bit) != 0)
                    acc[j] += p;
                else
                    acc[j] = KD_ZERO + p; /* as 0 + p: a product of -0 gives +0 */
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
        }
        int pos = c_indptr[row];
        for (int w0 = 0; w0 < words; w0 += KD_WG_SIZE) {
            const int w = w0 + lid;
            uint word = w < words ? bits[w] : 0u;
            const int c = (int)popcount(word);
            lscan[lid] = c;
            barrier(CLK_LOCAL_MEM_FENCE);
            KD_SPGEMM_SCAN_LOCAL(int, lscan, lid);
            int at = pos + lscan[lid] - c;
            pos += lscan[KD_WG_SIZE - 1];
            if (word != 0u)
                bits[w] = 0u;
            while (word != 0u) {
                const int j = w * 32 + (31 - (int)clz(word & (0u - word)));
                c_indices[at] = j;
                c_values[at] = acc[j];
                at++;
                word &= word - 1u;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

/* ---- C's row pointer: exclusive scan of the rows' counts, in place ------------------------ */

__kernel KD_WG_ATTR void kd_spgemm_scan_reduce(const int rows, __global const int *counts,
                                               __global long *partials)
{
    __local long lsum[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int base = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP;
    long s = 0;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int i = base + it * KD_WG_SIZE + lid;
        if (i < rows)
            s += counts[i];
    }
    lsum[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int h = KD_WG_SIZE / 2; h > 0; h >>= 1) {
        if (lid < h)
            lsum[lid] += lsum[lid + h];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0)
        partials[get_group_id(0)] = lsum[0];
}

/* One work-group: partials become exclusive offsets; the total is C's nnz (head, and
 * c_indptr[rows], which is right whenever the host goes on). */
__kernel KD_WG_ATTR void kd_spgemm_scan_partials(const int groups, const int rows,
                                                 __global long *partials, __global long *head,
                                                 __global int *c_indptr)
{
    __local long lscan[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int per = (groups + KD_WG_SIZE - 1) / KD_WG_SIZE;
    const int lo = min(groups, lid * per), hi = min(groups, lo + per);
    long mine = 0;
    for (int g = lo; g < hi; g++)
        mine += partials[g];
    lscan[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    KD_SPGEMM_SCAN_LOCAL(long, lscan, lid);
    long run = lscan[lid] - mine;
    for (int g = lo; g < hi; g++) {
        const long c = partials[g];
        partials[g] = run;
        run += c;
    }
    if (lid == 0) {
        const long total = lscan[KD_WG_SIZE - 1];
        head[KD_SPGEMM_HEAD_NNZ] = total;
        c_indptr[rows] = (int)total;
    }
}

__kernel KD_WG_ATTR void kd_spgemm_scan_apply(const int rows, __global int *c_indptr,
                                              __global const long *partials)
{
    __local int items[KD_SPGEMM_ROWS_PER_GROUP];
    __local long lscan[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int base = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int i = base + it * KD_WG_SIZE + lid;
        items[it * KD_WG_SIZE + lid] = i < rows ? c_indptr[i] : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    long mine = 0;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++)
        mine += items[lid * KD_SPGEMM_SCAN_ITEMS + it];
    lscan[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    KD_SPGEMM_SCAN_LOCAL(long, lscan, lid);
    long run = partials[get_group_id(0)] + lscan[lid] - mine;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int c = items[lid * KD_SPGEMM_SCAN_ITEMS + it];
        items[lid * KD_SPGEMM_SCAN_ITEMS + it] = (int)run;
        run += c;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int i = base + it * KD_WG_SIZE + lid;
        if (i < rows)
            c_indptr[i] = items[it * KD_WG_SIZE + lid];
    }
}
