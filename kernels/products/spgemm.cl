/*
 * Sparse times sparse, C = A B, row by row (solver/products/spgemm.c drives it; the bins and the header
 * are in spgemm_abi.h). Build options: -DKD_WG_SIZE=WG, -DKD_SPGEMM_LANE_SLOTS=L (hash slots per
 * work-item: a work-group's tables hold WG * L slots in all, whatever its team size).
 *
 * Thread mapping and memory access, kernel by kernel:
 *  - kd_spgemm_count: WG * KD_SPGEMM_SCAN_ITEMS rows of A per work-group. Work-item i takes rows
 *    base + it * WG + i (coalesced reads of A's row pointers) and walks each row's column indices,
 *    gathering B's row lengths; a row longer than KD_SPGEMM_LONG_ROW is set aside and summed by
 *    the whole group afterwards (coalesced, a tree in local memory), so no work-item walks a long
 *    row alone. Per row: ub (int64), its bins (row_bin); per group: the sum of ub and its rows per
 *    bin (local integer atomics: counts, so their order does not matter).
 *  - kd_spgemm_offsets: one work-group. Work-item i takes a contiguous run of groups and the runs
 *    are scanned in local memory (int64 sums, int8 vectors of bin counts, int64 task counts), so
 *    each group's bin counts become the positions of its first row of each bin in bin_rows; the
 *    totals go to the header the host reads.
 *  - kd_spgemm_bin_scatter: the rows of kd_spgemm_count, work-item i taking KD_SPGEMM_SCAN_ITEMS
 *    consecutive rows; one scan of one-hot bin vectors puts the row ids in bin_rows in ascending
 *    order within each bin (deterministic placement).
 *  - kd_spgemm_symbolic_<bin>: a team of T work-items per row (T = 4 .. 64, WG / T rows per
 *    work-group; T = WG for the group bin) with a hash table of T * L slots in local memory (open
 *    addressing, linear probing from (column * 107) mod slots, keys claimed with atomic_cmpxchg).
 *    The team takes A's row T entries at a time: work-item t reads entry t's column k and B's
 *    row k bounds (coalesced), a scan of the B row lengths in local memory lays the chunk's
 *    products end to end, and the team's work-items take them in turn (each finds its entry by a
 *    binary search in the scan), so every work-item inserts its share of the products whatever
 *    the mix of A and B row lengths. The count of columns that were new is the row's nnz.
 *  - kd_spgemm_numeric_<bin>: the same teams and tables, values beside keys. Per chunk of T
 *    entries (a_ik and B's row bounds in local memory, the lengths scanned), the team copies its
 *    products into local memory in order, T * KD_SPGEMM_WINDOW_ITEMS at a time (work-item i loads
 *    consecutive products: b_kj and a_ik * b_kj), then adds them into the table: one entry of A
 *    at a time, the entry's products in parallel (a B row has distinct columns), a barrier
 *    between entries; or, when a window holds more than KD_SPGEMM_MOST_STEPS entries of fewer
 *    than 8 products on average, in rounds: each work-item finds its products' slots, and in each
 *    round every column takes its smallest pending product (atomic_min on a claim word in the
 *    window's buffer), so the rounds are as many as one column's products in the window, not
 *    the entries (counted first: a column most entries share goes back to one entry a step).
 *    Then the occupied slots are compacted to the front (positions from local atomics) and
 *    ordered: teams of 4..16 rank each column by counting the smaller ones; larger
 *    teams rank with a bitmap of the row's column range in the window's buffer (a scan of
 *    popcounts) when the range fits 32 bits a word, else by buckets of 2^s columns (counts, a
 *    scan, tickets into C's row, each column ranked within its bucket read back from C), and
 *    run a bitonic sort only when a bucket holds more than KD_SPGEMM_BUCKET_MOST columns.
 *  - kd_spgemm_symbolic_global, kd_spgemm_columns_global: rows too long for a local table. A
 *    fixed number of work-groups loop over the bin's rows, each with a bitmap of C's n columns in
 *    global memory. The group takes A's row WG entries at a time as the teams do (products end to
 *    end, each work-item its share) and sets the columns' bits with atomic_or (its result unused,
 *    so nothing waits on it). kd_spgemm_symbolic_global then clears the bitmap word by word
 *    (coalesced), summing their popcounts: the row's nnz. kd_spgemm_columns_global (numeric)
 *    walks it WG words at a time, a scan of their popcounts placing each word's columns, and
 *    writes the row's columns to C in order, clearing the words as it goes.
 *  - kd_spgemm_values_global: one work-group per slice of WG * L / 2 consecutive columns of a
 *    global row (kd_spgemm_offsets counts the slices). The slice's columns (sorted, from C) and
 *    their sums live in local memory. The group walks A's row in chunks of WG entries; work-item
 *    t finds the run of entry t's B row inside the slice's column range (two binary searches of
 *    the sorted B row), so a slice walks only its own products, and the runs are laid end to end
 *    in windows of WG * KD_SPGEMM_WINDOW_ITEMS. A window of few or long entries goes one entry
 *    at a time (products in parallel, a barrier between entries); otherwise each work-item
 *    places consecutive products (a binary search of the slice) and the positions take them in
 *    rounds as in the numeric teams. The sums are written to C coalesced.
 *  - kd_spgemm_scan_reduce, kd_spgemm_offsets, kd_spgemm_scan_apply: the exclusive scan of the
 *    rows' counts (kept in C's row pointer) in place, with the numeric bins: per-group sums, one
 *    group scans them (and writes C's nnz and the numeric bins' sizes to the header), then each
 *    group scans its rows, writes their offsets and puts each row in its numeric bin.
 *
 * Determinism: no floating-point atomics, and each column's products are added in the order of
 * A's row: either one entry of A per step with a barrier between steps (within a step the
 * products have distinct columns, so no slot is touched twice), or in rounds in which a column
 * takes its smallest pending product in the window's order, one per round (windows, and
 * chunks, follow each other with barriers between). Both give the same bits, so the choice is
 * free. So every entry of C is
 * ((0 + a_i,k1 b_k1,j) + a_i,k2 b_k2,j) + ... in the order of A's row, as a sequential loop on the
 * host computes it. FP_CONTRACT is off so a product and its sum are rounded separately.
 *
 * No kernel returns before its last barrier (PoCL hangs otherwise): a team without a row still
 * takes every chunk.
 */
#pragma OPENCL FP_CONTRACT OFF

#include "spgemm_abi.h"

#ifndef KD_SPGEMM_LANE_SLOTS
#error "KD_SPGEMM_LANE_SLOTS must be defined (solver/products/spgemm.c passes it)"
#endif
#define KD_SPGEMM_GROUP_SLOTS (KD_WG_SIZE * KD_SPGEMM_LANE_SLOTS)
#define KD_SPGEMM_SLICE (KD_SPGEMM_GROUP_SLOTS / 2)
#define KD_SPGEMM_WINDOW (KD_WG_SIZE * KD_SPGEMM_WINDOW_ITEMS)
#define KD_SPGEMM_FREE (-1)
#define KD_SPGEMM_ROWS_PER_GROUP (KD_WG_SIZE * KD_SPGEMM_SCAN_ITEMS)

/* Inclusive scan of v[team's lanes] in place (Hillis-Steele over `lanes` work-items; with lanes =
 * WG, over the group). Every work-item of the group calls it. */
#define KD_SPGEMM_SCAN_TEAM(TYPE, v, lid, lane, lanes)                                             \
    do {                                                                                           \
        for (int s_ = 1; s_ < (lanes); s_ <<= 1) {                                                 \
            const TYPE add_ = (lane) >= s_ ? (v)[(lid)-s_] : (TYPE)(0);                            \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
            (v)[(lid)] += add_;                                                                    \
            barrier(CLK_LOCAL_MEM_FENCE);                                                          \
        }                                                                                          \
    } while (0)
#define KD_SPGEMM_SCAN_LOCAL(TYPE, v, lid) KD_SPGEMM_SCAN_TEAM(TYPE, v, lid, lid, KD_WG_SIZE)

/* Tree sum of v[0..WG) into v[0]; every work-item calls it after writing its v[lid]. */
#define KD_SPGEMM_SUM_LOCAL(v, lid)                                                                \
    do {                                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                              \
        for (int s_ = KD_WG_SIZE / 2; s_ > 0; s_ >>= 1) {                                          \
            if ((lid) < s_)                                                                        \
                (v)[(lid)] += (v)[(lid) + s_];                                                     \
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

/* The vector with 1 in component b (0 everywhere for b outside 0..7). */
int8 kd_spgemm_one_hot(const int b)
{
    /* scalar compares (1 or 0): Oclgrind 21.10 gets a vector compare's -1 wrong */
    return (int8)(b == 0, b == 1, b == 2, b == 3, b == 4, b == 5, b == 6, b == 7);
}

/* ---- bins ------------------------------------------------------------------------------------ */

/* The first team bin with at least `parallel` work-items per row, else the group bin. */
int kd_spgemm_hint(const long parallel)
{
    for (int b = KD_SPGEMM_BIN_TEAM_FIRST; b <= KD_SPGEMM_BIN_TEAM_LAST; b++)
        if (KD_SPGEMM_TEAM_LANES(b) < KD_WG_SIZE && KD_SPGEMM_TEAM_LANES(b) >= parallel)
            return b;
    return KD_SPGEMM_BIN_GROUP;
}

/* The first bin from `hint` on whose team table (or else the group's) has `slots` slots. */
int kd_spgemm_bin_with(const int hint, const long slots, const long group_limit)
{
    for (int b = max(hint, (int)KD_SPGEMM_BIN_TEAM_FIRST); b <= KD_SPGEMM_BIN_TEAM_LAST; b++)
        if (KD_SPGEMM_TEAM_LANES(b) < KD_WG_SIZE &&
            (long)KD_SPGEMM_TEAM_LANES(b) * KD_SPGEMM_LANE_SLOTS >= slots)
            return b;
    return slots <= group_limit ? KD_SPGEMM_BIN_GROUP : KD_SPGEMM_BIN_GLOBAL;
}

/* The numeric bin of a row of `nnz` columns: tables at most half full in teams, 3/4 in a
 * group. */
int kd_spgemm_numeric_bin(const uchar row_bin, const int nnz)
{
    if (nnz == 0)
        return KD_SPGEMM_BIN_EMPTY;
    return kd_spgemm_bin_with(KD_SPGEMM_ROW_HINT(row_bin), 2 * (long)nnz,
                              2 * (long)KD_SPGEMM_GROUP_SLOTS * 3 / 4);
}

/* The global bin's slices of a row of nnz columns. */
int kd_spgemm_slices(const int nnz)
{
    return (nnz + KD_SPGEMM_SLICE - 1) / KD_SPGEMM_SLICE;
}

/* Record row's ub: its byte in row_bin (symbolic bin and hint), nnz 0 for an empty row, and the
 * group's count for its bin. */
void kd_spgemm_classify(const int row, const long ub, const int len, const int n,
                        __global uchar *row_bin, __global int *row_nnz, __local int *lbins)
{
    int bin = KD_SPGEMM_BIN_EMPTY, hint = 0;
    if (ub > 0) {
        hint = kd_spgemm_hint((ub + len - 1) / len);
        bin = kd_spgemm_bin_with(hint, min(ub, (long)n), KD_SPGEMM_GROUP_SLOTS);
    } else {
        row_nnz[row] = 0;
    }
    row_bin[row] = (uchar)(bin | (hint << 4));
    atomic_inc(&lbins[bin]);
}

__kernel KD_WG_ATTR void kd_spgemm_count(const int rows, const int n, __global const int *a_indptr,
                                         __global const int *a_indices,
                                         __global const int *b_indptr, __global uchar *row_bin,
                                         __global int *row_nnz, __global long *group_products,
                                         __global int *group_bins)
{
    __local long lsum[KD_WG_SIZE];
    __local int lbins[KD_SPGEMM_BINS];
    __local int longs[KD_SPGEMM_ROWS_PER_GROUP];
    __local int nlong;
    const int lid = (int)get_local_id(0);
    const int base = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP;
    for (int b = lid; b < KD_SPGEMM_BINS; b += KD_WG_SIZE)
        lbins[b] = 0;
    if (lid == 0)
        nlong = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    long total = 0;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int row = base + it * KD_WG_SIZE + lid;
        if (row >= rows)
            break;
        const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
        if (a1 - a0 > KD_SPGEMM_LONG_ROW) {
            longs[atomic_inc(&nlong)] = row;
            continue;
        }
        long ub = 0;
        for (int e = a0; e < a1; e++) {
            const int k = a_indices[e];
            ub += b_indptr[k + 1] - b_indptr[k];
        }
        kd_spgemm_classify(row, ub, a1 - a0, n, row_bin, row_nnz, lbins);
        total += ub;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int nl = nlong;
    for (int t = 0; t < nl; t++) { /* the long rows, each by the whole group */
        const int row = longs[t];
        const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
        long part = 0;
        for (int e = a0 + lid; e < a1; e += KD_WG_SIZE) {
            const int k = a_indices[e];
            part += b_indptr[k + 1] - b_indptr[k];
        }
        lsum[lid] = part;
        KD_SPGEMM_SUM_LOCAL(lsum, lid);
        if (lid == 0) {
            kd_spgemm_classify(row, lsum[0], a1 - a0, n, row_bin, row_nnz, lbins);
            total += lsum[0];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    lsum[lid] = total;
    KD_SPGEMM_SUM_LOCAL(lsum, lid);
    if (lid == 0)
        group_products[get_group_id(0)] = lsum[0];
    for (int b = lid; b < KD_SPGEMM_BINS; b += KD_WG_SIZE)
        group_bins[get_group_id(0) * KD_SPGEMM_BINS + b] = lbins[b];
}

/*
 * One work-group. sums[g] becomes the exclusive prefix of the groups' sums (the total goes to
 * head[sum_slot], and to c_indptr[rows] when numeric), group_bins[g][b] the position in bin_rows
 * of group g's first row of bin b, and when numeric, tasks[g] the exclusive prefix of the groups'
 * slices of global rows (the total to the header).
 */
__kernel KD_WG_ATTR void kd_spgemm_offsets(const int groups, const int numeric, const int rows,
                                           __global long *sums, __global int *group_bins,
                                           __global int *tasks, __global long *head,
                                           __global int *c_indptr)
{
    __local int8 lbins[KD_WG_SIZE];
    __local long lsum[KD_WG_SIZE];
    __local long ltask[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int per = (groups + KD_WG_SIZE - 1) / KD_WG_SIZE;
    const int lo = min(groups, lid * per), hi = min(groups, lo + per);
    int8 bins = (int8)(0);
    long sum = 0, task = 0;
    for (int g = lo; g < hi; g++) {
        bins += vload8(g, group_bins);
        sum += sums[g];
        if (numeric)
            task += tasks[g];
    }
    lbins[lid] = bins;
    lsum[lid] = sum;
    ltask[lid] = task;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 1; s < KD_WG_SIZE; s <<= 1) {
        const int8 add_b = lid >= s ? lbins[lid - s] : (int8)(0);
        const long add_s = lid >= s ? lsum[lid - s] : 0;
        const long add_t = lid >= s ? ltask[lid - s] : 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        lbins[lid] += add_b;
        lsum[lid] += add_s;
        ltask[lid] += add_t;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const int8 total = lbins[KD_WG_SIZE - 1];
    const int8 start =
        (int8)(0, total.s0, total.s0 + total.s1, total.s0 + total.s1 + total.s2,
               total.s0 + total.s1 + total.s2 + total.s3,
               total.s0 + total.s1 + total.s2 + total.s3 + total.s4,
               total.s0 + total.s1 + total.s2 + total.s3 + total.s4 + total.s5,
               total.s0 + total.s1 + total.s2 + total.s3 + total.s4 + total.s5 + total.s6);
    int8 run_b = lbins[lid] - bins + start;
    long run_s = lsum[lid] - sum, run_t = ltask[lid] - task;
    for (int g = lo; g < hi; g++) {
        const int8 c = vload8(g, group_bins);
        vstore8(run_b, g, group_bins);
        run_b += c;
        const long s = sums[g];
        sums[g] = run_s;
        run_s += s;
        if (numeric) {
            const int t = tasks[g];
            tasks[g] = (int)run_t;
            run_t += t;
        }
    }
    if (lid == 0) {
        head[numeric ? KD_SPGEMM_HEAD_NNZ : KD_SPGEMM_HEAD_PRODUCTS] = lsum[KD_WG_SIZE - 1];
        head[KD_SPGEMM_HEAD_TASKS] = numeric ? ltask[KD_WG_SIZE - 1] : 0;
        for (int b = 0; b < KD_SPGEMM_BINS; b++) {
            head[KD_SPGEMM_HEAD_BIN_ROWS + b] = kd_spgemm_pick(total, b);
            head[KD_SPGEMM_HEAD_BIN_START + b] = kd_spgemm_pick(start, b);
        }
        if (numeric)
            c_indptr[rows] = (int)lsum[KD_WG_SIZE - 1];
    }
}

__kernel KD_WG_ATTR void kd_spgemm_bin_scatter(const int rows, __global const uchar *row_bin,
                                               __global const int *group_bins,
                                               __global int *bin_rows)
{
    __local int8 lscan[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int first = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP + lid * KD_SPGEMM_SCAN_ITEMS;
    int8 mine = (int8)(0);
    for (int i = 0; i < KD_SPGEMM_SCAN_ITEMS; i++)
        if (first + i < rows)
            mine += kd_spgemm_one_hot(KD_SPGEMM_ROW_BIN(row_bin[first + i]));
    lscan[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    KD_SPGEMM_SCAN_LOCAL(int8, lscan, lid);
    int8 run = vload8(get_group_id(0), group_bins) + lscan[lid] - mine;
    for (int i = 0; i < KD_SPGEMM_SCAN_ITEMS; i++) {
        const int row = first + i;
        const int bin = row < rows ? KD_SPGEMM_ROW_BIN(row_bin[row]) : -1;
        if (bin > KD_SPGEMM_BIN_EMPTY)
            bin_rows[kd_spgemm_pick(run, bin)] = row;
        run += kd_spgemm_one_hot(bin);
    }
}

/* ---- rows in local hash tables ---------------------------------------------------------- */

/* 1 when col was not in the table (it is now). The table never fills (it has at least as many
 * slots as the row has columns). Every access to a slot is atomic: other work-items claim slots
 * in the same phase, and a plain read racing with their atomic_cmpxchg is a data race. */
int kd_spgemm_insert(__local int *table, const int mask, const int col)
{
    int h = (int)(((uint)col * 107u) & (uint)mask);
    for (;;) {
        const int old = atomic_cmpxchg(&table[h], KD_SPGEMM_FREE, col);
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
        const int old = atomic_cmpxchg(&table[h], KD_SPGEMM_FREE, col);
        if (old == KD_SPGEMM_FREE || old == col)
            return h;
        h = (h + 1) & mask;
    }
}

/* The entry t (0 <= t < n) of a chunk whose products, laid end to end, include product p:
 * the first t with incl[t] > p (incl: inclusive scan of the entries' B row lengths). */
int kd_spgemm_entry_of(__local const int *incl, const int n, const int p)
{
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (incl[mid] > p)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* The row team `team` of this work-group works on, or -1. */
int kd_spgemm_team_row(const int lanes, const int count, const int start,
                       __global const int *bin_rows)
{
    const int teams = KD_WG_SIZE / lanes;
    const int idx = (int)get_group_id(0) * teams + (int)get_local_id(0) / lanes;
    return idx < count ? bin_rows[start + idx] : -1;
}

/* The chunks of `lanes` entries the longest row of this work-group's teams has (every team takes
 * that many, so barriers match); *chunks is local scratch. */
int kd_spgemm_group_chunks(const int lanes, const int a0, const int a1, __local int *chunks)
{
    if (get_local_id(0) == 0)
        *chunks = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    if ((int)get_local_id(0) % lanes == 0 && a1 > a0)
        atomic_max(chunks, (a1 - a0 + lanes - 1) / lanes);
    barrier(CLK_LOCAL_MEM_FENCE);
    return *chunks;
}

/* Whether a window of `products` over `steps` entries of A is added in rounds: more entries than
 * KD_SPGEMM_MOST_STEPS, fewer than 8 products each on average (long B rows go a step per entry). */
int kd_spgemm_in_rounds(const int steps, const int products)
{
    return steps > KD_SPGEMM_MOST_STEPS && steps * 8 > products;
}

/*
 * Add each work-item's products (slot[i] >= 0 in sums, value[i], order[i]: distinct across the
 * group, increasing with entry[i], the product's entry of A, t0 .. t0 + steps - 1) into sums so
 * that every slot receives its products in increasing order. Each claim (slot & mask) first
 * counts its products: the most is the rounds needed. When those are fewer than half the
 * entries, in each round every claim is taken by its smallest pending order (atomic_min), whose
 * work-item adds its product and frees the claim; otherwise one entry per step, a barrier
 * between steps (a column hub that most entries share would need a round per entry). claims
 * [0..mask] are 0 on entry and on return, more[0..1] zero. Every work-item of the group calls it.
 */
void kd_spgemm_add_ordered(__local VALUE *sums, __local int *claims, const int mask, int *slot,
                           const VALUE *value, const int *order, const int *entry, const int t0,
                           const int steps, __local int *more)
{
    int claim[KD_SPGEMM_WINDOW_ITEMS], most = 0;
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
        claim[i] = slot[i] >= 0 ? slot[i] & mask : -1;
        if (claim[i] >= 0)
            atomic_inc(&claims[claim[i]]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
        if (claim[i] >= 0)
            most = max(most, claims[claim[i]]);
    if (most > 0)
        atomic_max(&more[0], most);
    barrier(CLK_LOCAL_MEM_FENCE);
    const int rounds = more[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0)
        more[0] = 0;
    const int in_steps = rounds * 2 > steps;
    for (int s = 0; in_steps && s < steps; s++) {
        for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
            if (slot[i] >= 0 && entry[i] == t0 + s)
                sums[slot[i]] += value[i];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
        if (claim[i] >= 0)
            claims[claim[i]] = INT_MAX;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int round = 0; !in_steps; round++) {
        for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
            if (slot[i] >= 0)
                atomic_min(&claims[slot[i] & mask], order[i]);
        barrier(CLK_LOCAL_MEM_FENCE);
        int left = 0, won = 0;
        for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
            if (slot[i] < 0)
                continue;
            if (claims[slot[i] & mask] == order[i]) {
                sums[slot[i]] += value[i];
                won |= 1 << i;
            } else {
                left = 1;
            }
        }
        /* the winners free their claims only once every work-item has read them */
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
            if (won & (1 << i)) {
                claims[slot[i] & mask] = INT_MAX;
                slot[i] = -1;
            }
        }
        if (left)
            more[round & 1] = 1;
        if (get_local_id(0) == 0)
            more[(round + 1) & 1] = 0;
        barrier(CLK_LOCAL_MEM_FENCE);
        if (more[round & 1] == 0)
            break;
    }
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
        if (claim[i] >= 0)
            claims[claim[i]] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
}

void kd_spgemm_symbolic_team(const int lanes, const int count, const int start,
                             __global const int *bin_rows, __global const int *a_indptr,
                             __global const int *a_indices, __global const int *b_indptr,
                             __global const int *b_indices, __global int *row_nnz,
                             __local int *keys, __local int *counts, __local int *mb0,
                             __local int *incl, __local int *chunks)
{
    const int lid = (int)get_local_id(0);
    const int team = lid / lanes, lane = lid % lanes;
    const int slots = lanes * KD_SPGEMM_LANE_SLOTS;
    __local int *table = keys + team * slots;
    __local int *tb0 = mb0 + team * lanes;
    __local int *tincl = incl + team * lanes;
    const int row = kd_spgemm_team_row(lanes, count, start, bin_rows);
    for (int s = lid; s < KD_SPGEMM_GROUP_SLOTS; s += KD_WG_SIZE)
        keys[s] = KD_SPGEMM_FREE;
    if (lane == 0)
        counts[team] = 0;
    const int a0 = row >= 0 ? a_indptr[row] : 0;
    const int a1 = row >= 0 ? a_indptr[row + 1] : 0;
    const int nchunks = kd_spgemm_group_chunks(lanes, a0, a1, chunks);
    int fresh = 0;
    for (int c = 0; c < nchunks; c++) {
        const int e = a0 + c * lanes + lane;
        int b0 = 0, len = 0;
        if (e < a1) {
            const int k = a_indices[e];
            b0 = b_indptr[k];
            len = b_indptr[k + 1] - b0;
        }
        mb0[lid] = b0;
        incl[lid] = len;
        barrier(CLK_LOCAL_MEM_FENCE);
        KD_SPGEMM_SCAN_TEAM(int, incl, lid, lane, lanes);
        const int total = tincl[lanes - 1];
        for (int p = lane; p < total; p += lanes) {
            const int t = kd_spgemm_entry_of(tincl, lanes, p);
            const int q = tb0[t] + p - (t > 0 ? tincl[t - 1] : 0);
            fresh += kd_spgemm_insert(table, slots - 1, b_indices[q]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (fresh > 0)
        atomic_add(&counts[team], fresh);
    barrier(CLK_LOCAL_MEM_FENCE);
    if (row >= 0 && lane == 0)
        row_nnz[row] = counts[team];
}

/* Whether every team's columns table[0..nnz) span fewer than 32 * window values, so that a bitmap
 * in the team's window ranks them (group-uniform: *flag is set when one team's do not). The
 * team's smallest column goes to lo[0]; hi[0] is scratch. Every work-item calls it. */
int kd_spgemm_range_fits(const int lanes, const int nnz, __local const int *table, __local int *lo,
                         __local int *hi, __local int *flag)
{
    const int lane = (int)get_local_id(0) % lanes;
    if (lane == 0) {
        lo[0] = INT_MAX;
        hi[0] = -1;
    }
    if (get_local_id(0) == 0)
        *flag = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    int least = INT_MAX, most = -1;
    for (int x = lane; x < nnz; x += lanes) {
        least = min(least, table[x]);
        most = max(most, table[x]);
    }
    if (most >= 0) {
        atomic_min(lo, least);
        atomic_max(hi, most);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (nnz > 0 && hi[0] - lo[0] >= lanes * KD_SPGEMM_WINDOW_ITEMS * 32)
        *flag = 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    return *flag == 0;
}

/*
 * Write the team's nnz columns table[0..nnz) (from lo up, fewer than 32 * window apart) with
 * their values to C's row at c0 in column order: each column sets its bit in a bitmap of the
 * team's window (work-item lane owns KD_SPGEMM_WINDOW_ITEMS consecutive words), a scan of the
 * lanes' popcounts (in incl) gives each word's first rank, and a column's rank is that plus the
 * bits below it in its word. Every work-item calls it.
 */
void kd_spgemm_rank_bitmap(const int lanes, const int nnz, __local const int *table,
                           __local const VALUE *tvals, __local int *bits, __local int *incl,
                           const int lo, const int c0, __global int *c_indices,
                           __global VALUE *c_values)
{
    const int lid = (int)get_local_id(0);
    const int lane = lid % lanes;
    __local int *tincl = incl + (lid / lanes) * lanes;
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
        bits[lane * KD_SPGEMM_WINDOW_ITEMS + i] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int x = lane; x < nnz; x += lanes) {
        const int d = table[x] - lo;
        atomic_or(&bits[d >> 5], (int)(1u << (d & 31)));
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    int mine = 0;
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
        mine += (int)popcount((uint)bits[lane * KD_SPGEMM_WINDOW_ITEMS + i]);
    incl[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    KD_SPGEMM_SCAN_TEAM(int, incl, lid, lane, lanes);
    /* a fixed trip count guarded by x < nnz, as the bitonic write-out (PoCL 3.1's loopvec ran
     * the first iteration of `x = lane; x < nnz` on every lane there) */
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        const int x = lane + i * lanes;
        if (x >= nnz)
            continue;
        const int d = table[x] - lo, w = d >> 5, owner = w / KD_SPGEMM_WINDOW_ITEMS;
        int rank = owner > 0 ? tincl[owner - 1] : 0;
        for (int v = owner * KD_SPGEMM_WINDOW_ITEMS; v < w; v++)
            rank += (int)popcount((uint)bits[v]);
        rank += (int)popcount((uint)bits[w] & ((1u << (d & 31)) - 1u));
        c_indices[c0 + rank] = table[x];
        c_values[c0 + rank] = tvals[x];
    }
}

/*
 * Write the team's nnz columns table[0..nnz) (lo..hi) with their values to C's row at c0 in
 * column order by buckets of 2^shift columns, shift the least that makes the window's words
 * enough buckets: counts (local atomics) and a scan give each bucket's first rank; each column is
 * written to its bucket's part of C's row (positions from tickets), then, after a barrier, ranks
 * itself among its bucket's columns read back and is written again at its rank with its value.
 * 0 (nothing written) when a bucket of some team holds more than KD_SPGEMM_BUCKET_MOST columns
 * (group-uniform through *flag). Every work-item calls it.
 */
int kd_spgemm_rank_buckets(const int lanes, const int nnz, __local const int *table,
                           __local const VALUE *tvals, __local int *counts, __local int *incl,
                           const int lo, const int hi, const int c0, __global int *c_indices,
                           __global VALUE *c_values, __local int *flag)
{
    const int lid = (int)get_local_id(0);
    const int lane = lid % lanes;
    const int words = lanes * KD_SPGEMM_WINDOW_ITEMS;
    __local int *tincl = incl + (lid / lanes) * lanes;
    int shift = 0;
    while (nnz > 0 && ((hi - lo) >> shift) >= words)
        shift++;
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
        counts[lane * KD_SPGEMM_WINDOW_ITEMS + i] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int x = lane; x < nnz; x += lanes)
        atomic_inc(&counts[(table[x] - lo) >> shift]);
    barrier(CLK_LOCAL_MEM_FENCE);
    int mine = 0, most = 0;
    for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
        mine += counts[lane * KD_SPGEMM_WINDOW_ITEMS + i];
        most = max(most, counts[lane * KD_SPGEMM_WINDOW_ITEMS + i]);
    }
    if (most > KD_SPGEMM_BUCKET_MOST)
        *flag = 2; /* range_fits left it 1 */
    incl[lid] = mine;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (*flag == 2)
        return 0;
    KD_SPGEMM_SCAN_TEAM(int, incl, lid, lane, lanes);
    int start[KD_SPGEMM_LANE_SLOTS], size[KD_SPGEMM_LANE_SLOTS];
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        const int x = lane + i * lanes;
        const int b = x < nnz ? (table[x] - lo) >> shift : 0;
        const int owner = b / KD_SPGEMM_WINDOW_ITEMS;
        start[i] = owner > 0 ? tincl[owner - 1] : 0;
        for (int v = owner * KD_SPGEMM_WINDOW_ITEMS; v < b; v++)
            start[i] += counts[v];
        size[i] = counts[b];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        const int x = lane + i * lanes;
        if (x < nnz)
            c_indices[c0 + start[i] + atomic_dec(&counts[(table[x] - lo) >> shift]) - 1] = table[x];
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        const int x = lane + i * lanes;
        if (x >= nnz)
            continue;
        const int key = table[x];
        int rank = start[i];
        for (int y = 0; y < size[i]; y++)
            rank += c_indices[c0 + start[i] + y] < key;
        start[i] = rank;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        const int x = lane + i * lanes;
        if (x < nnz) {
            c_indices[c0 + start[i]] = table[x];
            c_values[c0 + start[i]] = tvals[x];
        }
    }
    return 1;
}

void kd_spgemm_numeric_team(const int lanes, const int count, const int start,
                            __global const int *bin_rows, __global const int *a_indptr,
                            __global const int *a_indices, __global const VALUE *a_values,
                            __global const int *b_indptr, __global const int *b_indices,
                            __global const VALUE *b_values, __global const int *c_indptr,
                            __global int *c_indices, __global VALUE *c_values, __local int *keys,
                            __local VALUE *vals, __local VALUE *ma, __local int *mb0,
                            __local int *incl, __local int *wcol, __local VALUE *wval,
                            __local int *counts, __local int *chunks, __local int *steps,
                            __local int *more)
{
    const int lid = (int)get_local_id(0);
    const int team = lid / lanes, lane = lid % lanes;
    const int slots = lanes * KD_SPGEMM_LANE_SLOTS;
    const int window = lanes * KD_SPGEMM_WINDOW_ITEMS;
    __local int *table = keys + team * slots;
    __local VALUE *tvals = vals + team * slots;
    __local VALUE *ta = ma + team * lanes;
    __local int *tb0 = mb0 + team * lanes;
    __local int *tincl = incl + team * lanes;
    __local int *tcol = wcol + team * window;
    __local VALUE *tval = wval + team * window;
    const int row = kd_spgemm_team_row(lanes, count, start, bin_rows);
    for (int s = lid; s < KD_SPGEMM_GROUP_SLOTS; s += KD_WG_SIZE) {
        keys[s] = KD_SPGEMM_FREE;
        vals[s] = KD_ZERO;
    }
    if (lane == 0)
        counts[team] = 0;
    if (lid < 2)
        more[lid] = 0;
    const int a0 = row >= 0 ? a_indptr[row] : 0;
    const int a1 = row >= 0 ? a_indptr[row + 1] : 0;
    const int nchunks = kd_spgemm_group_chunks(lanes, a0, a1, chunks);
    for (int c = 0; c < nchunks; c++) {
        const int e = a0 + c * lanes + lane;
        int b0 = 0, len = 0;
        if (e < a1) {
            const int k = a_indices[e];
            ma[lid] = a_values[e];
            b0 = b_indptr[k];
            len = b_indptr[k + 1] - b0;
        }
        mb0[lid] = b0;
        incl[lid] = len;
        barrier(CLK_LOCAL_MEM_FENCE);
        KD_SPGEMM_SCAN_TEAM(int, incl, lid, lane, lanes);
        const int total = tincl[lanes - 1];
        int most = 0; /* the group's longest chunk sets the windows every team takes */
        for (int t = lanes - 1; t < KD_WG_SIZE; t += lanes)
            most = max(most, incl[t]);
        for (int w0 = 0; w0 < most; w0 += window) {
            /* the window's products, in order: work-item i loads consecutive ones */
            for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
                const int p = w0 + lane * KD_SPGEMM_WINDOW_ITEMS + i;
                if (p < total) {
                    const int t = kd_spgemm_entry_of(tincl, lanes, p);
                    const int q = tb0[t] + p - (t > 0 ? tincl[t - 1] : 0);
                    tcol[p - w0] = b_indices[q];
                    tval[p - w0] = ta[t] * b_values[q];
                }
            }
            if (lid == 0)
                *steps = 0;
            barrier(CLK_LOCAL_MEM_FENCE);
            const int n = min(window, total - w0);
            const int t0 = n > 0 ? kd_spgemm_entry_of(tincl, lanes, w0) : 0;
            const int t1 = n > 0 ? kd_spgemm_entry_of(tincl, lanes, w0 + n - 1) : -1;
            if (lane == 0 && n > 0)
                atomic_max(steps, t1 - t0 + 1);
            barrier(CLK_LOCAL_MEM_FENCE);
            const int nsteps = *steps;
            if (!kd_spgemm_in_rounds(nsteps, min(window, most - w0))) {
                /* one entry of A at a time, its products in parallel (distinct columns), a
                 * barrier between entries */
                for (int s = 0; s < nsteps; s++) {
                    const int t = t0 + s;
                    const int y0 = t <= t1 ? max(t > 0 ? tincl[t - 1] : 0, w0) - w0 : 0;
                    const int y1 = t <= t1 ? min(tincl[t], w0 + n) - w0 : 0;
                    for (int y = y0 + lane; y < y1; y += lanes) {
                        const int slot = kd_spgemm_slot(table, slots - 1, tcol[y]);
                        tvals[slot] += tval[y];
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
            } else {
                /* many short entries: each work-item finds its products' slots, then the
                 * window's columns take their products in rounds (tcol becomes the claims) */
                int slot[KD_SPGEMM_WINDOW_ITEMS], order[KD_SPGEMM_WINDOW_ITEMS];
                int entry[KD_SPGEMM_WINDOW_ITEMS];
                VALUE value[KD_SPGEMM_WINDOW_ITEMS];
                for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
                    const int y = lane + i * lanes;
                    slot[i] = y < n ? kd_spgemm_slot(table, slots - 1, tcol[y]) : -1;
                    value[i] = y < n ? tval[y] : KD_ZERO;
                    entry[i] = y < n ? kd_spgemm_entry_of(tincl, lanes, w0 + y) : -1;
                    order[i] = y;
                }
                barrier(CLK_LOCAL_MEM_FENCE);
                for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++)
                    tcol[lane + i * lanes] = 0;
                barrier(CLK_LOCAL_MEM_FENCE);
                kd_spgemm_add_ordered(tvals, tcol, window - 1, slot, value, order, entry, t0,
                                      nsteps, more);
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
    }
    /* compact the occupied slots to the front (positions from local atomics), then rank */
    int keep[KD_SPGEMM_LANE_SLOTS];
    VALUE kept[KD_SPGEMM_LANE_SLOTS];
    int mine = 0;
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        keep[i] = table[lane + i * lanes];
        kept[i] = tvals[lane + i * lanes];
        mine += keep[i] != KD_SPGEMM_FREE;
    }
    int at = mine > 0 ? atomic_add(&counts[team], mine) : 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
        if (keep[i] != KD_SPGEMM_FREE) {
            table[at] = keep[i];
            tvals[at] = kept[i];
            at++;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int nnz = counts[team];
    const int c0 = row >= 0 ? c_indptr[row] : 0;
    if (lanes < 32) { /* small rows: rank each column by counting the smaller ones */
        for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) { /* fixed trip count, as below */
            const int x = lane + i * lanes;
            if (x >= nnz)
                continue;
            const int key = table[x];
            int rank = 0;
            for (int y = 0; y < nnz; y++)
                rank += table[y] < key;
            c_indices[c0 + rank] = key;
            c_values[c0 + rank] = tvals[x];
        }
    } else if (kd_spgemm_range_fits(lanes, nnz, table, tb0, tincl, steps)) {
        kd_spgemm_rank_bitmap(lanes, nnz, table, tvals, tcol, incl, tb0[0], c0, c_indices,
                              c_values);
    } else if (!kd_spgemm_rank_buckets(lanes, nnz, table, tvals, tcol, incl, tb0[0], tincl[0], c0,
                                       c_indices, c_values, steps)) {
        /* a bitonic sort of every team's columns, padded to the longest's power of two */
        int size = 1;
        for (int t = lanes - 1; t < KD_WG_SIZE; t += lanes)
            while (size < counts[t / lanes])
                size <<= 1;
        for (int x = nnz + lane; x < size; x += lanes)
            table[x] = INT_MAX;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int span = 2; span <= size; span <<= 1) {
            for (int stride = span >> 1; stride > 0; stride >>= 1) {
                for (int i = lane; i < size / 2; i += lanes) {
                    const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
                    const int klo = table[lo], khi = table[hi];
                    if ((klo > khi) == ((lo & span) == 0)) {
                        const VALUE vlo = tvals[lo];
                        table[lo] = khi;
                        table[hi] = klo;
                        tvals[lo] = tvals[hi];
                        tvals[hi] = vlo;
                    }
                }
                barrier(CLK_LOCAL_MEM_FENCE);
            }
        }
        /* a fixed trip count, guarded: PoCL 3.1's loopvec ran the first iteration of
         * `for (x = lane; x < nnz; x += lanes)` here on lanes past nnz (docs/ARCHITECTURE.md) */
        for (int i = 0; i < KD_SPGEMM_LANE_SLOTS; i++) {
            const int x = lane + i * lanes;
            if (x < nnz) {
                c_indices[c0 + x] = table[x];
                c_values[c0 + x] = tvals[x];
            }
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
        __local int mb0[KD_WG_SIZE], incl[KD_WG_SIZE];                                             \
        __local int chunks;                                                                        \
        kd_spgemm_symbolic_team((LANES), count, start, bin_rows, a_indptr, a_indices, b_indptr,    \
                                b_indices, row_nnz, keys, counts, mb0, incl, &chunks);             \
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
        __local VALUE ma[KD_WG_SIZE];                                                              \
        __local int mb0[KD_WG_SIZE], incl[KD_WG_SIZE];                                             \
        __local int wcol[KD_SPGEMM_WINDOW];                                                        \
        __local VALUE wval[KD_SPGEMM_WINDOW];                                                      \
        __local int counts[KD_WG_SIZE / (LANES) + 1];                                              \
        __local int chunks, steps, more[2];                                                        \
        kd_spgemm_numeric_team((LANES), count, start, bin_rows, a_indptr, a_indices, a_values,     \
                               b_indptr, b_indices, b_values, c_indptr, c_indices, c_values, keys, \
                               vals, ma, mb0, incl, wcol, wval, counts, &chunks, &steps, more);    \
    }

KD_SPGEMM_TEAM_KERNELS(t4, 4)
KD_SPGEMM_TEAM_KERNELS(t8, 8)
KD_SPGEMM_TEAM_KERNELS(t16, 16)
KD_SPGEMM_TEAM_KERNELS(t32, 32)
KD_SPGEMM_TEAM_KERNELS(t64, 64)
KD_SPGEMM_TEAM_KERNELS(group, KD_WG_SIZE)

/* ---- the global bin -------------------------------------------------------------------------- */

/* The whole group sets the bits of row [a0, a1)'s columns in bits (atomic_or whose result is not
 * used: nothing waits for it). */
void kd_spgemm_set_bits(const int a0, const int a1, __global const int *a_indices,
                        __global const int *b_indptr, __global const int *b_indices,
                        __global uint *bits, __local int *mb0, __local int *incl)
{
    const int lid = (int)get_local_id(0);
    for (int c0 = a0; c0 < a1; c0 += KD_WG_SIZE) {
        const int e = c0 + lid;
        int b0 = 0, len = 0;
        if (e < a1) {
            const int k = a_indices[e];
            b0 = b_indptr[k];
            len = b_indptr[k + 1] - b0;
        }
        mb0[lid] = b0;
        incl[lid] = len;
        barrier(CLK_LOCAL_MEM_FENCE);
        KD_SPGEMM_SCAN_LOCAL(int, incl, lid);
        const int total = incl[KD_WG_SIZE - 1];
        for (int p = lid; p < total; p += KD_WG_SIZE) {
            const int t = kd_spgemm_entry_of(incl, KD_WG_SIZE, p);
            const int j = b_indices[mb0[t] + p - (t > 0 ? incl[t - 1] : 0)];
            atomic_or(&bits[j >> 5], 1u << (j & 31));
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
}

/* The row's count is the bitmap's popcount, taken while the bitmap is cleared for the next row. */
__kernel KD_WG_ATTR void
kd_spgemm_symbolic_global(const int count, const int start, __global const int *bin_rows,
                          __global const int *a_indptr, __global const int *a_indices,
                          __global const int *b_indptr, __global const int *b_indices,
                          __global int *row_nnz, __global uint *bitmaps, const int words)
{
    __local int mb0[KD_WG_SIZE], incl[KD_WG_SIZE];
    __local int lcount;
    const int lid = (int)get_local_id(0);
    __global uint *bits = bitmaps + (size_t)get_group_id(0) * (size_t)words;
    for (int idx = (int)get_group_id(0); idx < count; idx += (int)get_num_groups(0)) {
        const int row = bin_rows[start + idx];
        if (lid == 0)
            lcount = 0;
        kd_spgemm_set_bits(a_indptr[row], a_indptr[row + 1], a_indices, b_indptr, b_indices, bits,
                           mb0, incl);
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        int mine = 0;
        for (int w = lid; w < words; w += KD_WG_SIZE) {
            const uint word = bits[w];
            if (word != 0u) {
                mine += (int)popcount(word);
                bits[w] = 0u;
            }
        }
        if (mine > 0)
            atomic_add(&lcount, mine);
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        if (lid == 0)
            row_nnz[row] = lcount;
    }
}

__kernel KD_WG_ATTR void kd_spgemm_columns_global(
    const int count, const int start, __global const int *bin_rows, __global const int *a_indptr,
    __global const int *a_indices, __global const int *b_indptr, __global const int *b_indices,
    __global const int *c_indptr, __global int *c_indices, __global uint *bitmaps, const int words)
{
    __local int mb0[KD_WG_SIZE], incl[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    __global uint *bits = bitmaps + (size_t)get_group_id(0) * (size_t)words;
    for (int idx = (int)get_group_id(0); idx < count; idx += (int)get_num_groups(0)) {
        const int row = bin_rows[start + idx];
        kd_spgemm_set_bits(a_indptr[row], a_indptr[row + 1], a_indices, b_indptr, b_indices, bits,
                           mb0, incl);
        barrier(CLK_GLOBAL_MEM_FENCE);
        int pos = c_indptr[row];
        for (int w0 = 0; w0 < words; w0 += KD_WG_SIZE) {
            const int w = w0 + lid;
            uint word = w < words ? bits[w] : 0u;
            const int c = (int)popcount(word);
            incl[lid] = c;
            barrier(CLK_LOCAL_MEM_FENCE);
            KD_SPGEMM_SCAN_LOCAL(int, incl, lid);
            int at = pos + incl[lid] - c;
            pos += incl[KD_WG_SIZE - 1];
            if (word != 0u)
                bits[w] = 0u;
            while (word != 0u) {
                c_indices[at++] = w * 32 + (31 - (int)clz(word & (0u - word)));
                word &= word - 1u;
            }
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        barrier(CLK_GLOBAL_MEM_FENCE);
    }
}

/* The first x in [0, n) with cols[x] >= col. */
int kd_spgemm_lower_bound(__local const int *cols, const int n, const int col)
{
    int lo = 0, hi = n;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (cols[mid] < col)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first q in [lo, hi) with b_indices[q] >= col (hi when none). */
int kd_spgemm_lower_bound_global(__global const int *b_indices, int lo, int hi, const int col)
{
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (b_indices[mid] < col)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

__kernel KD_WG_ATTR void
kd_spgemm_values_global(const int count, __global const long *head, __global const int *bin_rows,
                        __global const int *task_start, __global const int *a_indptr,
                        __global const int *a_indices, __global const VALUE *a_values,
                        __global const int *b_indptr, __global const int *b_indices,
                        __global const VALUE *b_values, __global const int *c_indptr,
                        __global const int *c_indices, __global VALUE *c_values)
{
    __local int cols[KD_SPGEMM_SLICE];
    __local VALUE sums[KD_SPGEMM_SLICE];
    __local VALUE ma[KD_WG_SIZE];
    __local int mb0[KD_WG_SIZE], incl[KD_WG_SIZE];
    __local int claims[KD_SPGEMM_WINDOW];
    __local int more[2];
    const int lid = (int)get_local_id(0);
    const int task = (int)get_group_id(0);
    int lo = 0, hi = count - 1; /* the last global row whose first slice is at most task */
    while (lo < hi) {
        const int mid = (lo + hi + 1) >> 1;
        if (task_start[mid] <= task)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int row = bin_rows[(int)head[KD_SPGEMM_HEAD_BIN_START + KD_SPGEMM_BIN_GLOBAL] + lo];
    const int c0 = c_indptr[row] + (task - task_start[lo]) * KD_SPGEMM_SLICE;
    const int n = min(KD_SPGEMM_SLICE, c_indptr[row + 1] - c0);
    for (int x = lid; x < KD_SPGEMM_SLICE; x += KD_WG_SIZE) {
        cols[x] = x < n ? c_indices[c0 + x] : INT_MAX;
        sums[x] = KD_ZERO;
    }
    for (int x = lid; x < KD_SPGEMM_WINDOW; x += KD_WG_SIZE)
        claims[x] = 0;
    if (lid < 2)
        more[lid] = 0;
    barrier(CLK_LOCAL_MEM_FENCE);
    const int first = cols[0], last = cols[n - 1];
    const int a0 = a_indptr[row], a1 = a_indptr[row + 1];
    for (int e0 = a0; e0 < a1; e0 += KD_WG_SIZE) {
        /* each entry's products inside the slice: a run of its B row (columns sorted) */
        const int e = e0 + lid;
        int b0 = 0, len = 0;
        if (e < a1) {
            const int k = a_indices[e];
            const int q1 = b_indptr[k + 1];
            ma[lid] = a_values[e];
            b0 = kd_spgemm_lower_bound_global(b_indices, b_indptr[k], q1, first);
            len = kd_spgemm_lower_bound_global(b_indices, b0, q1, last + 1) - b0;
        }
        mb0[lid] = b0;
        incl[lid] = len;
        barrier(CLK_LOCAL_MEM_FENCE);
        KD_SPGEMM_SCAN_LOCAL(int, incl, lid);
        const int total = incl[KD_WG_SIZE - 1];
        for (int w0 = 0; w0 < total; w0 += KD_SPGEMM_WINDOW) {
            const int wn = min(KD_SPGEMM_WINDOW, total - w0);
            const int t0 = kd_spgemm_entry_of(incl, KD_WG_SIZE, w0);
            const int t1 = kd_spgemm_entry_of(incl, KD_WG_SIZE, w0 + wn - 1);
            if (!kd_spgemm_in_rounds(t1 - t0 + 1, wn)) {
                /* one entry at a time, its products in parallel (distinct columns), a barrier
                 * between entries */
                for (int t = t0; t <= t1; t++) {
                    const int before = t > 0 ? incl[t - 1] : 0;
                    const int p1 = min(incl[t], w0 + wn);
                    for (int p = max(before, w0) + lid; p < p1; p += KD_WG_SIZE) {
                        const int q = mb0[t] + p - before;
                        sums[kd_spgemm_lower_bound(cols, n, b_indices[q])] += ma[t] * b_values[q];
                    }
                    barrier(CLK_LOCAL_MEM_FENCE);
                }
                continue;
            }
            /* short B rows: each work-item places consecutive products in the slice, then the
             * columns take them in rounds, in order */
            int pos[KD_SPGEMM_WINDOW_ITEMS], order[KD_SPGEMM_WINDOW_ITEMS];
            int entry[KD_SPGEMM_WINDOW_ITEMS];
            VALUE val[KD_SPGEMM_WINDOW_ITEMS];
            for (int i = 0; i < KD_SPGEMM_WINDOW_ITEMS; i++) {
                const int p = w0 + lid * KD_SPGEMM_WINDOW_ITEMS + i;
                pos[i] = -1;
                val[i] = KD_ZERO;
                order[i] = p;
                entry[i] = -1;
                if (p < total) {
                    const int t = kd_spgemm_entry_of(incl, KD_WG_SIZE, p);
                    entry[i] = t;
                    const int q = mb0[t] + p - (t > 0 ? incl[t - 1] : 0);
                    pos[i] = kd_spgemm_lower_bound(cols, n, b_indices[q]);
                    val[i] = ma[t] * b_values[q];
                }
            }
            kd_spgemm_add_ordered(sums, claims, KD_SPGEMM_WINDOW - 1, pos, val, order, entry, t0,
                                  t1 - t0 + 1, more);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int x = lid; x < n; x += KD_WG_SIZE)
        c_values[c0 + x] = sums[x];
}

/* ---- C's row pointer and the numeric bins ---------------------------------------------------- */

/* Per group (the rows of kd_spgemm_count): the sum of the rows' counts, rows per numeric bin and
 * the global rows' slices. */
__kernel KD_WG_ATTR void kd_spgemm_scan_reduce(const int rows, __global const int *counts,
                                               __global const uchar *row_bin, __global long *sums,
                                               __global int *group_bins, __global int *tasks)
{
    __local long lsum[KD_WG_SIZE];
    __local int ltask[KD_WG_SIZE];
    __local int8 lbins[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int first = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP + lid * KD_SPGEMM_SCAN_ITEMS;
    long sum = 0;
    int task = 0;
    int8 bins = (int8)(0);
    for (int i = 0; i < KD_SPGEMM_SCAN_ITEMS && first + i < rows; i++) {
        const int c = counts[first + i];
        const int bin = kd_spgemm_numeric_bin(row_bin[first + i], c);
        sum += c;
        bins += kd_spgemm_one_hot(bin);
        if (bin == KD_SPGEMM_BIN_GLOBAL)
            task += kd_spgemm_slices(c);
    }
    lsum[lid] = sum;
    ltask[lid] = task;
    lbins[lid] = bins;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s) {
            lsum[lid] += lsum[lid + s];
            ltask[lid] += ltask[lid + s];
            lbins[lid] += lbins[lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lid == 0) {
        sums[get_group_id(0)] = lsum[0];
        tasks[get_group_id(0)] = ltask[0];
        vstore8(lbins[0], get_group_id(0), group_bins);
    }
}

/* Per group: the rows' offsets into C's row pointer (in place), each row into its numeric bin
 * (ascending within a bin) and each global row's first slice into task_start. */
__kernel KD_WG_ATTR void kd_spgemm_scan_apply(const int rows, __global int *c_indptr,
                                              __global const uchar *row_bin,
                                              __global const long *sums,
                                              __global const int *group_bins,
                                              __global const int *tasks, __global const long *head,
                                              __global int *bin_rows, __global int *task_start)
{
    __local int items[KD_SPGEMM_ROWS_PER_GROUP];
    __local long lsum[KD_WG_SIZE];
    __local int ltask[KD_WG_SIZE];
    __local int8 lbins[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    const int base = (int)get_group_id(0) * KD_SPGEMM_ROWS_PER_GROUP;
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int i = base + it * KD_WG_SIZE + lid;
        items[it * KD_WG_SIZE + lid] = i < rows ? c_indptr[i] : 0;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int first = lid * KD_SPGEMM_SCAN_ITEMS;
    int bin[KD_SPGEMM_SCAN_ITEMS];
    long sum = 0;
    int task = 0;
    int8 bins = (int8)(0);
    for (int i = 0; i < KD_SPGEMM_SCAN_ITEMS; i++) {
        const int c = items[first + i];
        bin[i] = base + first + i < rows ? kd_spgemm_numeric_bin(row_bin[base + first + i], c) : -1;
        sum += c;
        bins += kd_spgemm_one_hot(bin[i]);
        if (bin[i] == KD_SPGEMM_BIN_GLOBAL)
            task += kd_spgemm_slices(c);
    }
    lsum[lid] = sum;
    ltask[lid] = task;
    lbins[lid] = bins;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 1; s < KD_WG_SIZE; s <<= 1) {
        const long add_s = lid >= s ? lsum[lid - s] : 0;
        const int add_t = lid >= s ? ltask[lid - s] : 0;
        const int8 add_b = lid >= s ? lbins[lid - s] : (int8)(0);
        barrier(CLK_LOCAL_MEM_FENCE);
        lsum[lid] += add_s;
        ltask[lid] += add_t;
        lbins[lid] += add_b;
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    long run = sums[get_group_id(0)] + lsum[lid] - sum;
    int run_t = tasks[get_group_id(0)] + ltask[lid] - task;
    int8 run_b = vload8(get_group_id(0), group_bins) + lbins[lid] - bins;
    const int global_start = (int)head[KD_SPGEMM_HEAD_BIN_START + KD_SPGEMM_BIN_GLOBAL];
    for (int i = 0; i < KD_SPGEMM_SCAN_ITEMS; i++) {
        const int c = items[first + i];
        items[first + i] = (int)run;
        run += c;
        if (bin[i] > KD_SPGEMM_BIN_EMPTY) {
            const int at = kd_spgemm_pick(run_b, bin[i]);
            bin_rows[at] = base + first + i;
            if (bin[i] == KD_SPGEMM_BIN_GLOBAL) {
                task_start[at - global_start] = run_t;
                run_t += kd_spgemm_slices(c);
            }
        }
        run_b += kd_spgemm_one_hot(bin[i]);
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int it = 0; it < KD_SPGEMM_SCAN_ITEMS; it++) {
        const int i = base + it * KD_WG_SIZE + lid;
        if (i < rows)
            c_indptr[i] = items[it * KD_WG_SIZE + lid];
    }
}
