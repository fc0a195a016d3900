/*
 * The multigrid V-cycle's own kernels (solver/precond/amg/amg.c, solver/precond/amg/fused.c), and
 * at the end of the file the setup's steps on the device (solver/precond/amg/aggregate.c,
 * solver/precond/amg/prolong.c: aggregation, the prolongator, its transpose), each group with its
 * own block saying how work-items map to rows.
 *
 * The straightforward V-cycle runs the level matrices, the restriction and the prolongation
 * through their formats' SpMV, and these vector kernels, one work-item per row, every access
 * coalesced:
 * kd_amg_chebyshev: one Chebyshev step of the smoother on one level: r = b - q (q = A x from the
 * SpMV before it; b alone when x starts at 0), d = c_d d + c_r D^-1 r (c_r D^-1 r alone on the
 * first step), x += d (x = d from 0). Reads b, q, 1/diag, d, x; writes d, x.
 * kd_amg_residual: q = b - q after q = A x: the residual the restriction reads.
 * kd_amg_scale: y = s .* x (the Lanczos estimate's D^-1/2).
 * kd_amg_dense_mv: x = M b on the coarsest level, M its dense inverse (row-major, n <= a few
 * hundred): one work-group per row, its lanes read consecutive entries of the row, then a tree
 * in local memory in a fixed order (deterministic).
 *
 * The fused V-cycle keeps levels >= 1 (and every P and R) in CSR and fuses each level's vector
 * step into its SpMV, the csr_vector mapping: KD_TPR work-items per row (-DKD_TPR, the smallest
 * power of two at least the matrix's mean row length, so a typical row is one or two coalesced
 * steps of the lanes), row = global id / KD_TPR, lanes read entries lane, lane + KD_TPR, ... of
 * the row, then a tree of their partial sums in local memory; lane 0 finishes the row. Rows are
 * independent, so a step that rewrites x reads x_in and writes x_out (ping-pong):
 * kd_amg_csr_chebyshev: s = (A x_in)_i; the Chebyshev step above with q_i = s; x_out = x_in + d.
 * kd_amg_csr_residual: q = b - A x.
 * kd_amg_csr_restrict: b_c = R q; with `smooth`, also the coarse level's first Chebyshev step
 * from 0 (d_c = x_c = c_r D_c^-1 b_c), which reads only the row's own values.
 * kd_amg_csr_prolong: x += P x_c.
 *
 * kd_amg_product: C = A B on C's pattern, known beforehand (a refresh: the setup's SpGEMM made it,
 * solver/precond/amg/amg.c), one work-item per row of C: the row is zeroed, then each product
 * a_ik b_kj is added at column j, found by bisection in the row (columns ascending). The products
 * come in kd_spgemm's order (k ascending along A's row, each (i, j) once per k) and FP_CONTRACT
 * is off in both, so an entry is the same sum kd_spgemm's numeric phase forms. No hashing, no
 * counting, no sorting: that was the symbolic phase's, and the pattern's columns are already
 * sorted.
 *
 * A fused hierarchy's refresh (solver/precond/amg/refresh.c) also computes on the device, one work-item
 * per row, on patterns the setup made:
 * kd_amg_prolong: the smoothed prolongator's values P = (I - omega D^-1 A) T on P's pattern, T
 * from the aggregates (agg, -1: none) and their scale 1/sqrt(|aggregate|), as the host's
 * kd_amg_prolongator forms them: T's own entry first, then - (omega / a_ii) a_ik scale_j for the
 * row's entries in order, each landing at its aggregate's column (bisection in P's row).
 * kd_amg_gather: dst[t] = src[map[t]] (R = P^T's values from P's).
 * kd_amg_diagonal: a_ii of each row (0 when not stored), by bisection.
 *
 * kd_amg_tail: the V-cycle of the last few small levels, from the first one's b to its x, in ONE
 * work-group of KD_WG_SIZE work-items, as the list of steps solver/precond/amg/tail.c made at setup
 * (kernels/precond/amg/amg_abi.h): pre-smoothing, residual and restriction level by level down, the coarsest
 * solve (its dense inverse as a CSR matrix, or smoothing), prolongation and post-smoothing level
 * by level up. A matrix step gives each row M.lanes work-items (WG / lanes rows a pass, the
 * lanes' sums folded in local memory in the same order as the device-wide kernels); a Chebyshev
 * step gives work-item lid rows lid, lid + WG, ... Every step ends with a barrier (global and
 * local fences), so the next one sees all its rows. One flat loop with three barriers: every
 * trip count is the same for the whole group and nothing returns early, so every barrier is
 * reached by all work-items (and PoCL compiles it in seconds; nested helpers with barriers took
 * it minutes).
 */
#pragma OPENCL FP_CONTRACT OFF

#include "amg_abi.h"

#ifndef KD_TPR
#define KD_TPR 1
#endif

__kernel void kd_amg_chebyshev(const int n, const int from_zero, const int first, const VALUE c_d,
                               const VALUE c_r, __global const VALUE *b, __global const VALUE *q,
                               __global const VALUE *inv_diagonal, __global VALUE *d,
                               __global VALUE *x)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const VALUE r = from_zero ? b[i] : b[i] - q[i];
    const VALUE step = c_r * (inv_diagonal[i] * r);
    const VALUE di = first ? step : c_d * d[i] + step;
    d[i] = di;
    x[i] = from_zero ? di : x[i] + di;
}

/* The position of column j in the sorted columns idx[lo..hi) (hi - 1 when absent). */
static int kd_amg_find(__global const int *idx, int lo, int hi, const int j)
{
    hi--;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (idx[mid] < j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

__kernel void kd_amg_product(const int rows, __global const int *a_ptr,
                             __global const int *a_idx, __global const VALUE *a_val,
                             __global const int *b_ptr, __global const int *b_idx,
                             __global const VALUE *b_val, __global const int *c_ptr,
                             __global const int *c_idx, __global VALUE *c_val)
{
    const int i = (int)get_global_id(0);
    if (i >= rows)
        return;
    const int c0 = c_ptr[i], c1 = c_ptr[i + 1];
    for (int p = c0; p < c1; p++)
        c_val[p] = (VALUE)0;
    for (int ka = a_ptr[i]; ka < a_ptr[i + 1]; ka++) {
        const int k = a_idx[ka];
        const VALUE a = a_val[ka];
        for (int kb = b_ptr[k]; kb < b_ptr[k + 1]; kb++) {
            c_val[kd_amg_find(c_idx, c0, c1, b_idx[kb])] += a * b_val[kb];
        }
    }
}

/* kd_amg_product with KD_TPR work-items a row of C, each owning C's columns lane, lane + KD_TPR,
 * ...: an entry c_ij is summed over k ascending along A's row (b_kj found by bisection in B's row
 * k), the same additions in the same order as kd_amg_product's, so the same bits; rows of C
 * with tens of entries (R (A P)) take tens of work-items instead of one. */
__kernel void kd_amg_product_lanes(const int rows, __global const int *a_ptr,
                                   __global const int *a_idx, __global const VALUE *a_val,
                                   __global const int *b_ptr, __global const int *b_idx,
                                   __global const VALUE *b_val, __global const int *c_ptr,
                                   __global const int *c_idx, __global VALUE *c_val)
{
    const int i = (int)(get_global_id(0) / KD_TPR), lane = (int)(get_global_id(0) % KD_TPR);
    if (i >= rows)
        return;
    const int a0 = a_ptr[i], a1 = a_ptr[i + 1];
    for (int p = c_ptr[i] + lane; p < c_ptr[i + 1]; p += KD_TPR) {
        const int j = c_idx[p];
        VALUE sum = (VALUE)0;
        for (int ka = a0; ka < a1; ka++) {
            const int k = a_idx[ka], b0 = b_ptr[k], b1 = b_ptr[k + 1];
            int lo = b0, hi = b1;
            while (lo < hi) {
                const int mid = lo + (hi - lo) / 2;
                if (b_idx[mid] < j)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            if (lo < b1 && b_idx[lo] == j)
                sum += a_val[ka] * b_val[lo];
        }
        c_val[p] = sum;
    }
}

__kernel void kd_amg_prolong(const int n, const VALUE omega, __global const int *a_ptr,
                             __global const int *a_idx, __global const VALUE *a_val,
                             __global const int *agg, __global const VALUE *scale,
                             __global const int *p_ptr, __global const int *p_idx,
                             __global VALUE *p_val)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const int p0 = p_ptr[i], p1 = p_ptr[i + 1], a0 = a_ptr[i], a1 = a_ptr[i + 1];
    if (p0 == p1)
        return;
    for (int p = p0; p < p1; p++)
        p_val[p] = (VALUE)0;
    const int d = a0 < a1 ? kd_amg_find(a_idx, a0, a1, i) : a0;
    const VALUE w = omega / (d < a1 && a_idx[d] == i ? a_val[d] : (VALUE)1);
    if (agg[i] >= 0)
        p_val[kd_amg_find(p_idx, p0, p1, agg[i])] = scale[agg[i]];
    for (int k = a0; k < a1; k++) {
        const int j = agg[a_idx[k]];
        if (j >= 0)
            p_val[kd_amg_find(p_idx, p0, p1, j)] -= w * a_val[k] * scale[j];
    }
}

__kernel void kd_amg_gather(const int n, __global const int *map, __global const VALUE *src,
                            __global VALUE *dst)
{
    const int t = (int)get_global_id(0);
    if (t < n)
        dst[t] = src[map[t]];
}

__kernel void kd_amg_diagonal(const int n, __global const int *ptr, __global const int *idx,
                              __global const VALUE *val, __global VALUE *diag)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const int a0 = ptr[i], a1 = ptr[i + 1];
    const int d = a0 < a1 ? kd_amg_find(idx, a0, a1, i) : a0;
    diag[i] = d < a1 && idx[d] == i ? val[d] : (VALUE)0;
}

__kernel void kd_amg_residual(const int n, __global const VALUE *b, __global VALUE *q)
{
    const int i = (int)get_global_id(0);
    if (i < n)
        q[i] = b[i] - q[i];
}

__kernel void kd_amg_scale(const int n, __global const VALUE *s, __global const VALUE *x,
                           __global VALUE *y)
{
    const int i = (int)get_global_id(0);
    if (i < n)
        y[i] = s[i] * x[i];
}

/*
 * The Lanczos estimate of lambda_max(D^-1 A) on the device (solver/precond/amg/level.c,
 * kd_amg_estimate), one work-item per row; its scalars stay on the device (the BLAS scalars
 * buffer's slots 0 and 1 for the step's reductions, `ab` for every step's alpha and beta), so the
 * steps run without the host, which reads `ab` once at the end:
 * kd_amg_lanczos_start: s = sqrt(|1/a_ii|) (D^-1/2), and v = the start vector, value i being the
 * (i + 1)-th state of the host's former generator (the 64-bit LCG x = 6364136223846793005 x +
 * 1442695040888963407 from 0x9e3779b97f4a7c15, reached by squaring the affine map: the same
 * numbers, in any order), its top 53 bits as a fraction in [-0.5, 0.5), rounded once to VALUE.
 * kd_amg_lanczos_norm: v /= sqrt(scalars[1]) (scalars[1] = v'v).
 * kd_amg_lanczos_update: w = (w - alpha v) - beta_prev v_prev, alpha = scalars[0] = w'v, beta_prev
 * the last step's (ab[2 j - 1], 0 on the first); work-item 0 records alpha in ab[2 j].
 * kd_amg_lanczos_next: beta = sqrt(scalars[1]) (= ||w||); v_prev = v, v = w / beta; work-item 0
 * records beta in ab[2 j + 1]. A step after a breakdown (beta ~ 0) divides by it: its values are
 * garbage the host never reads (it stops at the first breakdown it finds in ab).
 */
__kernel void kd_amg_lanczos_start(const int n, __global const VALUE *dinv, __global VALUE *s,
                                   __global VALUE *v)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    s[i] = sqrt(fabs(dinv[i]));
    ulong mul = 6364136223846793005UL, add = 1442695040888963407UL; /* x -> mul x + add */
    ulong m = 1UL, c = 0UL;                                          /* the map applied so far */
    for (ulong k = (ulong)i + 1UL; k != 0UL; k >>= 1) {
        if (k & 1UL) {
            c = mul * c + add;
            m = mul * m;
        }
        add = mul * add + add;
        mul = mul * mul;
    }
    const ulong x = m * 0x9e3779b97f4a7c15UL + c;
    const long d = (long)(x >> 11) - (1L << 52); /* (x >> 11) / 2^53 - 0.5 = d / 2^53, exactly */
#if KD_FP64
    v[i] = (VALUE)d * 0x1p-53;
#else
    v[i] = (VALUE)d * 0x1p-53f;
#endif
}

__kernel void kd_amg_lanczos_norm(const int n, __global const VALUE *scalars, __global VALUE *v)
{
    const int i = (int)get_global_id(0);
    const VALUE norm = sqrt(scalars[1]);
    if (i < n)
        v[i] = norm > (VALUE)0 ? v[i] / norm : v[i];
}

__kernel void kd_amg_lanczos_update(const int n, const int j, __global const VALUE *scalars,
                                    __global VALUE *ab, __global const VALUE *v,
                                    __global const VALUE *v_prev, __global VALUE *w)
{
    const int i = (int)get_global_id(0);
    const VALUE alpha = scalars[0], beta_prev = j > 0 ? ab[2 * j - 1] : (VALUE)0;
    if (i == 0)
        ab[2 * j] = alpha;
    if (i < n)
        w[i] = (w[i] - alpha * v[i]) - beta_prev * v_prev[i];
}

__kernel void kd_amg_lanczos_next(const int n, const int j, __global const VALUE *scalars,
                                  __global VALUE *ab, __global const VALUE *w,
                                  __global VALUE *v, __global VALUE *v_prev)
{
    const int i = (int)get_global_id(0);
    const VALUE beta = sqrt(scalars[1]);
    if (i == 0)
        ab[2 * j + 1] = beta;
    if (i < n) {
        v_prev[i] = v[i];
        v[i] = w[i] / beta;
    }
}

__kernel KD_WG_ATTR void kd_amg_dense_mv(const int n, __global const VALUE *M,
                                         __global const VALUE *b, __global VALUE *x)
{
    __local VALUE scratch[KD_WG_SIZE];
    const int row = (int)get_group_id(0), lane = (int)get_local_id(0);
    VALUE s = (VALUE)0;
    for (int j = lane; j < n; j += KD_WG_SIZE)
        s += M[(size_t)row * (size_t)n + (size_t)j] * b[j];
    scratch[lane] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = KD_WG_SIZE / 2; w > 0; w >>= 1) {
        if (lane < w)
            scratch[lane] += scratch[lane + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0)
        x[row] = scratch[0];
}

/*
 * The block V-cycle's vector kernels (solver/precond/amg/block.c): k columns of n values, column c
 * at c * ld, all of one level's buffers with the same ld. One work-item per row, looping over the
 * columns: for each column the work-items' accesses are consecutive (coalesced), and a row's
 * 1/a_ii is read once for all k. Each column gets the one-column kernel's expression exactly.
 * kd_amg_block_dense_mv: one work-group per row of the coarsest inverse, as kd_amg_dense_mv, the
 * columns one after another (the row of M from cache after the first), each with its own tree; the
 * loop's trip count is k for the whole group, so every barrier is reached by all work-items.
 */
__kernel void kd_amg_block_chebyshev(const int n, const int k, const long ld, const int from_zero,
                                     const int first, const VALUE c_d, const VALUE c_r,
                                     __global const VALUE *b, __global const VALUE *q,
                                     __global const VALUE *inv_diagonal, __global VALUE *d,
                                     __global VALUE *x)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const VALUE w = inv_diagonal[i];
    for (int c = 0; c < k; c++) {
        const size_t o = (size_t)c * (size_t)ld + (size_t)i;
        const VALUE r = from_zero ? b[o] : b[o] - q[o];
        const VALUE step = c_r * (w * r);
        const VALUE di = first ? step : c_d * d[o] + step;
        d[o] = di;
        x[o] = from_zero ? di : x[o] + di;
    }
}

__kernel void kd_amg_block_residual(const int n, const int k, const long ld,
                                    __global const VALUE *b, __global VALUE *q)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    for (int c = 0; c < k; c++) {
        const size_t o = (size_t)c * (size_t)ld + (size_t)i;
        q[o] = b[o] - q[o];
    }
}

__kernel KD_WG_ATTR void kd_amg_block_dense_mv(const int n, const int k, const long ld,
                                               __global const VALUE *M, __global const VALUE *b,
                                               __global VALUE *x)
{
    __local VALUE scratch[KD_WG_SIZE];
    const int row = (int)get_group_id(0), lane = (int)get_local_id(0);
    for (int c = 0; c < k; c++) {
        __global const VALUE *bc = b + (size_t)c * (size_t)ld;
        VALUE s = (VALUE)0;
        for (int j = lane; j < n; j += KD_WG_SIZE)
            s += M[(size_t)row * (size_t)n + (size_t)j] * bc[j];
        scratch[lane] = s;
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int w = KD_WG_SIZE / 2; w > 0; w >>= 1) {
            if (lane < w)
                scratch[lane] += scratch[lane + w];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lane == 0)
            x[(size_t)c * (size_t)ld + (size_t)row] = scratch[0];
        barrier(CLK_LOCAL_MEM_FENCE); /* scratch[0] read before the next column writes it */
    }
}

/* (M v)_row by `lanes` work-items (lane = lid % lanes), valid in lane 0; all the group's
 * work-items call it (barriers), rows past `rows` contribute nothing. */
VALUE kd_amg_row_sum(const int lanes, const int row, const int rows, __global const int *indptr,
                     __global const int *indices, __global const VALUE *values,
                     __global const VALUE *v, __local VALUE *partial)
{
    const int lid = (int)get_local_id(0), lane = lid & (lanes - 1);
    VALUE s = KD_ZERO;
    if (row < rows)
        for (int k = indptr[row] + lane; k < indptr[row + 1]; k += lanes)
            s += values[k] * v[indices[k]];
    partial[lid] = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = lanes / 2; w > 0; w >>= 1) {
        if (lane < w)
            partial[lid] += partial[lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return partial[lid];
}

__kernel KD_WG_ATTR void kd_amg_csr_chebyshev(const int n, const int first, const VALUE c_d,
                                              const VALUE c_r, __global const int *indptr,
                                              __global const int *indices,
                                              __global const VALUE *values, __global const VALUE *b,
                                              __global const VALUE *inv_diagonal, __global VALUE *d,
                                              __global const VALUE *x_in, __global VALUE *x_out)
{
    __local VALUE partial[KD_WG_SIZE];
    const int row = (int)(get_global_id(0) / KD_TPR);
    const VALUE s = kd_amg_row_sum(KD_TPR, row, n, indptr, indices, values, x_in, partial);
    if (row < n && (get_local_id(0) & (KD_TPR - 1)) == 0) {
        const VALUE r = b[row] - s;
        const VALUE step = c_r * (inv_diagonal[row] * r);
        const VALUE di = first ? step : c_d * d[row] + step;
        d[row] = di;
        x_out[row] = x_in[row] + di;
    }
}

__kernel KD_WG_ATTR void kd_amg_csr_residual(const int n, __global const int *indptr,
                                             __global const int *indices,
                                             __global const VALUE *values, __global const VALUE *x,
                                             __global const VALUE *b, __global VALUE *q)
{
    __local VALUE partial[KD_WG_SIZE];
    const int row = (int)(get_global_id(0) / KD_TPR);
    const VALUE s = kd_amg_row_sum(KD_TPR, row, n, indptr, indices, values, x, partial);
    if (row < n && (get_local_id(0) & (KD_TPR - 1)) == 0)
        q[row] = b[row] - s;
}

__kernel KD_WG_ATTR void kd_amg_csr_restrict(const int n, const int smooth, const VALUE c_r,
                                             __global const int *indptr,
                                             __global const int *indices,
                                             __global const VALUE *values, __global const VALUE *q,
                                             __global VALUE *b, __global const VALUE *inv_diagonal,
                                             __global VALUE *d, __global VALUE *x)
{
    __local VALUE partial[KD_WG_SIZE];
    const int row = (int)(get_global_id(0) / KD_TPR);
    const VALUE s = kd_amg_row_sum(KD_TPR, row, n, indptr, indices, values, q, partial);
    if (row < n && (get_local_id(0) & (KD_TPR - 1)) == 0) {
        b[row] = s;
        if (smooth) {
            const VALUE di = c_r * (inv_diagonal[row] * s);
            d[row] = di;
            x[row] = di;
        }
    }
}

__kernel KD_WG_ATTR void kd_amg_csr_prolong(const int n, __global const int *indptr,
                                            __global const int *indices,
                                            __global const VALUE *values,
                                            __global const VALUE *x_coarse, __global VALUE *x)
{
    __local VALUE partial[KD_WG_SIZE];
    const int row = (int)(get_global_id(0) / KD_TPR);
    const VALUE s = kd_amg_row_sum(KD_TPR, row, n, indptr, indices, values, x_coarse, partial);
    if (row < n && (get_local_id(0) & (KD_TPR - 1)) == 0)
        x[row] = s + x[row];
}

/*
 * The fused block V-cycle's CSR kernels (solver/precond/amg/block.c): the fused kernels above on
 * k columns (column c of a vector at c * ld), in chunks of KD_AMG_CHUNK columns whose sums a
 * work-item keeps in registers, so each matrix entry is read once per chunk. The thread mapping is
 * kd_amg_row_sum's (KD_TPR lanes a row, lane l summing entries l, l + KD_TPR, ...), and the lanes'
 * sums of each column are folded by the same tree in local memory (one slice of KD_WG_SIZE values
 * per column of the chunk), so every column gets exactly the one-column kernel's value on any
 * device. The chunk loop's trip count is the group's, and a work-item past the last row still
 * takes part (summing nothing), so every barrier is reached by all work-items.
 */
#define KD_AMG_CHUNK 8

/* acc[t] = (M v_t)_row for the chunk's cnt columns (v at its first column), valid in lane 0. */
void kd_amg_block_row_sums(const int row, const int rows, __global const int *indptr,
                           __global const int *indices, __global const VALUE *values,
                           __global const VALUE *v, const long ld, const int cnt,
                           __local VALUE *partial, VALUE *acc)
{
    for (int t = 0; t < KD_AMG_CHUNK; t++)
        acc[t] = (VALUE)0;
    if (row < rows)
        for (int e = indptr[row] + (int)(get_local_id(0) & (KD_TPR - 1)); e < indptr[row + 1];
             e += KD_TPR) {
            const VALUE a = values[e];
            const size_t j = (size_t)indices[e];
            for (int t = 0; t < KD_AMG_CHUNK; t++)
                if (t < cnt)
                    acc[t] += a * v[(size_t)t * (size_t)ld + j];
        }
#if KD_TPR > 1
    const int lid = (int)get_local_id(0), lane = lid & (KD_TPR - 1);
    for (int t = 0; t < KD_AMG_CHUNK; t++)
        partial[t * KD_WG_SIZE + lid] = acc[t];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int w = KD_TPR / 2; w > 0; w >>= 1) {
        if (lane < w)
            for (int t = 0; t < KD_AMG_CHUNK; t++)
                partial[t * KD_WG_SIZE + lid] += partial[t * KD_WG_SIZE + lid + w];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int t = 0; t < KD_AMG_CHUNK; t++)
        acc[t] = partial[t * KD_WG_SIZE + lid];
    barrier(CLK_LOCAL_MEM_FENCE); /* read before the next chunk writes */
#endif
}

/* The chunk loop: columns c0 .. c0 + cnt - 1. */
#define KD_AMG_CHUNKS(k)                                                                           \
    for (int c0 = 0, cnt = (k) < KD_AMG_CHUNK ? (k) : KD_AMG_CHUNK; c0 < (k);                      \
         c0 += KD_AMG_CHUNK, cnt = (k)-c0 < KD_AMG_CHUNK ? (k)-c0 : KD_AMG_CHUNK)

#if KD_TPR > 1
#define KD_AMG_PARTIAL __local VALUE partial[KD_AMG_CHUNK * KD_WG_SIZE]
#else
#define KD_AMG_PARTIAL __local VALUE *partial = 0
#endif

/* This work-item finishes its row (lane 0 of a row that exists). */
#define KD_AMG_LEAD(row, n) ((row) < (n) && (get_local_id(0) & (KD_TPR - 1)) == 0)

__kernel KD_WG_ATTR void kd_amg_block_csr_chebyshev(
    const int n, const int k, const long ld, const int first, const VALUE c_d, const VALUE c_r,
    __global const int *indptr, __global const int *indices, __global const VALUE *values,
    __global const VALUE *b, __global const VALUE *inv_diagonal, __global VALUE *d,
    __global const VALUE *x_in, __global VALUE *x_out)
{
    KD_AMG_PARTIAL;
    const int row = (int)(get_global_id(0) / KD_TPR);
    KD_AMG_CHUNKS(k)
    {
        VALUE acc[KD_AMG_CHUNK];
        kd_amg_block_row_sums(row, n, indptr, indices, values, x_in + (size_t)c0 * (size_t)ld, ld,
                              cnt, partial, acc);
        if (KD_AMG_LEAD(row, n))
            for (int t = 0; t < cnt; t++) {
                const size_t o = (size_t)(c0 + t) * (size_t)ld + (size_t)row;
                const VALUE r = b[o] - acc[t];
                const VALUE step = c_r * (inv_diagonal[row] * r);
                const VALUE di = first ? step : c_d * d[o] + step;
                d[o] = di;
                x_out[o] = x_in[o] + di;
            }
    }
}

__kernel KD_WG_ATTR void kd_amg_block_csr_residual(const int n, const int k, const long ld,
                                                   __global const int *indptr,
                                                   __global const int *indices,
                                                   __global const VALUE *values,
                                                   __global const VALUE *x,
                                                   __global const VALUE *b, __global VALUE *q)
{
    KD_AMG_PARTIAL;
    const int row = (int)(get_global_id(0) / KD_TPR);
    KD_AMG_CHUNKS(k)
    {
        VALUE acc[KD_AMG_CHUNK];
        kd_amg_block_row_sums(row, n, indptr, indices, values, x + (size_t)c0 * (size_t)ld, ld,
                              cnt, partial, acc);
        if (KD_AMG_LEAD(row, n))
            for (int t = 0; t < cnt; t++) {
                const size_t o = (size_t)(c0 + t) * (size_t)ld + (size_t)row;
                q[o] = b[o] - acc[t];
            }
    }
}

/* b_c = R q (q's columns at ld_q, the coarse level's at ld); with smooth, the coarse level's
 * first Chebyshev step from 0. */
__kernel KD_WG_ATTR void kd_amg_block_csr_restrict(
    const int n, const int k, const long ld_q, const long ld, const int smooth, const VALUE c_r,
    __global const int *indptr, __global const int *indices, __global const VALUE *values,
    __global const VALUE *q, __global VALUE *b, __global const VALUE *inv_diagonal,
    __global VALUE *d, __global VALUE *x)
{
    KD_AMG_PARTIAL;
    const int row = (int)(get_global_id(0) / KD_TPR);
    KD_AMG_CHUNKS(k)
    {
        VALUE acc[KD_AMG_CHUNK];
        kd_amg_block_row_sums(row, n, indptr, indices, values, q + (size_t)c0 * (size_t)ld_q,
                              ld_q, cnt, partial, acc);
        if (KD_AMG_LEAD(row, n))
            for (int t = 0; t < cnt; t++) {
                const size_t o = (size_t)(c0 + t) * (size_t)ld + (size_t)row;
                b[o] = acc[t];
                if (smooth) {
                    const VALUE di = c_r * (inv_diagonal[row] * acc[t]);
                    d[o] = di;
                    x[o] = di;
                }
            }
    }
}

/* x += P x_c (x_c's columns at ld_c, x's at ld). */
__kernel KD_WG_ATTR void kd_amg_block_csr_prolong(const int n, const int k, const long ld_c,
                                                  const long ld, __global const int *indptr,
                                                  __global const int *indices,
                                                  __global const VALUE *values,
                                                  __global const VALUE *x_coarse,
                                                  __global VALUE *x)
{
    KD_AMG_PARTIAL;
    const int row = (int)(get_global_id(0) / KD_TPR);
    KD_AMG_CHUNKS(k)
    {
        VALUE acc[KD_AMG_CHUNK];
        kd_amg_block_row_sums(row, n, indptr, indices, values,
                              x_coarse + (size_t)c0 * (size_t)ld_c, ld_c, cnt, partial, acc);
        if (KD_AMG_LEAD(row, n))
            for (int t = 0; t < cnt; t++) {
                const size_t o = (size_t)(c0 + t) * (size_t)ld + (size_t)row;
                x[o] = acc[t] + x[o];
            }
    }
}

__global VALUE *kd_amg_tail_vector(const int ref, __global VALUE *scratch, __global VALUE *b_first,
                                   __global VALUE *x_first)
{
    return ref == KD_AMG_TAIL_B ? b_first : ref == KD_AMG_TAIL_X ? x_first : scratch + ref;
}

__kernel KD_WG_ATTR void kd_amg_tail(const int steps, __global const kd_amg_tail_step_t *step,
                                     __global const int *index, __global const VALUE *value,
                                     __global VALUE *scratch, __global VALUE *b_first,
                                     __global VALUE *x_first)
{
    __local VALUE partial[KD_WG_SIZE];
    const int lid = (int)get_local_id(0);
    for (int s = 0; s < steps; s++) {
        const kd_amg_tail_step_t S = step[s];
        __global VALUE *x = kd_amg_tail_vector(S.x, scratch, b_first, x_first);
        __global VALUE *b = kd_amg_tail_vector(S.b, scratch, b_first, x_first);
        __global VALUE *q = kd_amg_tail_vector(S.q, scratch, b_first, x_first);
        const int chebyshev = S.kind == KD_AMG_TAIL_CHEBYSHEV, lanes = S.M.lanes;
        const int matrix_rows = chebyshev ? 0 : S.rows;
        for (int first = 0; first < matrix_rows; first += KD_WG_SIZE / lanes) {
            const int row = first + lid / lanes;
            const VALUE sum = kd_amg_row_sum(lanes, row, S.rows, index + S.M.indptr,
                                             index + S.M.indices, value + S.M.values, x, partial);
            if (row < S.rows && (lid & (lanes - 1)) == 0)
                q[row] = S.kind == KD_AMG_TAIL_SPMV       ? sum
                         : S.kind == KD_AMG_TAIL_RESIDUAL ? b[row] - sum
                                                          : sum + q[row];
        }
        __global VALUE *d = kd_amg_tail_vector(S.d, scratch, b_first, x_first);
        __global const VALUE *inv_diagonal = value + S.inv_diagonal;
        const VALUE c_d = value[S.chebyshev], c_r = value[S.chebyshev + 1];
        for (int i = lid; i < (chebyshev ? S.rows : 0); i += KD_WG_SIZE) {
            const VALUE r = S.zero ? b[i] : b[i] - q[i];
            const VALUE step_i = c_r * (inv_diagonal[i] * r);
            const VALUE di = S.first ? step_i : c_d * d[i] + step_i;
            d[i] = di;
            x[i] = S.zero ? di : x[i] + di;
        }
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    }
}

/*
 * Device aggregation (solver/precond/amg/aggregate.c): aggregates as a distance-2 maximal
 * independent set of the strength graph, its members the roots (Bell, Dalton and Olson 2012), one
 * work-item per node in every kernel, each reading its row of A (or of the strength mask) and
 * writing only its own node's entries; rounds are separate launches, so no kernel reads what
 * another work-item of the same launch writes. The result depends on A alone: each node's priority
 * comes from its strong neighbours' states and a fixed hash of its index (ties impossible: the
 * index is in the key), never from work-group size or scheduling.
 * kd_amg_strength: strong[k] for entry k of row i (column j != i, a_ij != 0 and
 * a_ij^2 >= t2 |a_ii a_jj|), and state 1 (undecided) for a node with a strong entry, -1 (none:
 * isolated, in no aggregate) otherwise.
 * kd_amg_mis_key: each node's key (state, 1023 - its undecided strong neighbours (at most 1023),
 * hash mod 2^20, index), packed in a ulong in that order of significance (states < 0 count as 0).
 * kd_amg_mis_max: the largest of `in` over the node and its strong neighbours; launched on the keys,
 * then on its own result: the largest key within distance 2.
 * kd_amg_mis_update: an undecided node whose distance-2 maximum is itself becomes a root (2); one
 * whose distance-2 maximum is a root leaves (0); one still undecided sets *left.
 * kd_amg_agg_count, kd_amg_agg_number: roots numbered in index order: work-item c counts, then
 * (from its chunk's offset, a host scan of the counts) numbers, the roots of nodes
 * c * chunk .. (c + 1) * chunk - 1.
 * kd_amg_agg_join: a node without an aggregate in `from` takes that of its strong neighbour of
 * largest (hash mod 2^30, index) among those that have one (first the roots' neighbours, then
 * theirs).
 */
static uint kd_amg_hash(uint x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

/* A node's rank in the joins: (hash mod 2^30, index), never 0. */
static ulong kd_amg_join_key(const int j)
{
    return ((ulong)(kd_amg_hash((uint)j) & 0x3fffffffU) << 32) + (ulong)(uint)j + 1UL;
}

__kernel void kd_amg_strength(const int n, const VALUE t2, __global const int *ptr,
                              __global const int *idx, __global const VALUE *val,
                              __global const VALUE *diag, __global uchar *strong,
                              __global int *state)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    int any = 0;
    for (int k = ptr[i]; k < ptr[i + 1]; k++) {
        const int j = idx[k];
        const VALUE v = val[k];
        const int s = j != i && v != (VALUE)0 && v * v >= t2 * fabs(diag[i] * diag[j]);
        strong[k] = (uchar)s;
        any |= s;
    }
    state[i] = any ? 1 : -1;
}

__kernel void kd_amg_mis_key(const int n, __global const int *ptr, __global const int *idx,
                             __global const uchar *strong, __global const int *state,
                             __global ulong *key)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    int undecided = 0;
    for (int k = ptr[i]; k < ptr[i + 1]; k++)
        undecided += strong[k] && state[idx[k]] == 1;
    const ulong s = state[i] > 0 ? (ulong)state[i] : 0UL;
    const ulong fewer = (ulong)(1023 - (undecided < 1023 ? undecided : 1023));
    key[i] = (s << 62) | (fewer << 52) | ((ulong)(kd_amg_hash((uint)i) & 0xfffffU) << 32) |
             (ulong)(uint)i;
}

__kernel void kd_amg_mis_max(const int n, __global const int *ptr, __global const int *idx,
                             __global const uchar *strong, __global const ulong *in,
                             __global ulong *out)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    ulong m = in[i];
    for (int k = ptr[i]; k < ptr[i + 1]; k++)
        if (strong[k])
            m = in[idx[k]] > m ? in[idx[k]] : m;
    out[i] = m;
}

__kernel void kd_amg_mis_update(const int n, __global const ulong *m2, __global int *state,
                                __global int *left)
{
    const int i = (int)get_global_id(0);
    if (i >= n || state[i] != 1)
        return;
    const ulong m = m2[i];
    if ((uint)(m & 0xffffffffUL) == (uint)i)
        state[i] = 2;
    else if ((m >> 62) == 2UL)
        state[i] = 0;
    else
        atomic_or(left, 1);
}

__kernel void kd_amg_agg_count(const int n, const int chunk, __global const int *state,
                               __global int *count)
{
    const int c = (int)get_global_id(0);
    const long lo = (long)c * chunk;
    if (lo >= n)
        return;
    const int hi = (int)(lo + chunk < (long)n ? lo + chunk : (long)n);
    int roots = 0;
    for (int i = (int)lo; i < hi; i++)
        roots += state[i] == 2;
    count[c] = roots;
}

__kernel void kd_amg_agg_number(const int n, const int chunk, __global const int *state,
                                __global const int *offset, __global int *agg)
{
    const int c = (int)get_global_id(0);
    const long lo = (long)c * chunk;
    if (lo >= n)
        return;
    const int hi = (int)(lo + chunk < (long)n ? lo + chunk : (long)n);
    int id = offset[c];
    for (int i = (int)lo; i < hi; i++)
        agg[i] = state[i] == 2 ? id++ : -1;
}

__kernel void kd_amg_agg_join(const int n, __global const int *ptr, __global const int *idx,
                              __global const uchar *strong, __global const int *from,
                              __global int *to)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    int a = from[i];
    if (a < 0) {
        ulong best = 0;
        for (int k = ptr[i]; k < ptr[i + 1]; k++) {
            const int j = idx[k];
            if (strong[k] && from[j] >= 0) {
                const ulong key = kd_amg_join_key(j); /* best 0: none yet */
                if (key > best) {
                    best = key;
                    a = from[j];
                }
            }
        }
    }
    to[i] = a;
}

/*
 * The smoothed prolongator on the device (solver/precond/amg/prolong.c), from the aggregates:
 * kd_amg_agg_size: each aggregate's size (one work-item per node, an atomic increment of its
 * aggregate's count: integer, so the sum does not depend on the order).
 * kd_amg_tent_count, kd_amg_tent_fill: the tentative prolongator T in CSR, one entry
 * 1/sqrt(|aggregate|) per node in an aggregate, none for agg -1: work-item c counts, then (from
 * its chunk's offset, a host scan of the counts) writes, the rows c * chunk .. (c + 1) * chunk - 1.
 * kd_amg_tent_smooth: P = T - omega D^-1 (A T) in place on A T (kd_spgemm's, whose pattern is
 * P's: A's diagonal is stored), one work-item per row: a_ii found by bisection in A's row.
 */
__kernel void kd_amg_agg_size(const int n, __global const int *agg, __global int *size)
{
    const int i = (int)get_global_id(0);
    if (i < n && agg[i] >= 0)
        atomic_inc(&size[agg[i]]);
}

__kernel void kd_amg_tent_count(const int n, const int chunk, __global const int *agg,
                                __global int *count)
{
    const int c = (int)get_global_id(0);
    const long lo = (long)c * chunk;
    if (lo >= n)
        return;
    const int hi = (int)(lo + chunk < (long)n ? lo + chunk : (long)n);
    int m = 0;
    for (int i = (int)lo; i < hi; i++)
        m += agg[i] >= 0;
    count[c] = m;
}

__kernel void kd_amg_tent_fill(const int n, const int chunk, __global const int *agg,
                               __global const int *size, __global const int *offset,
                               __global int *ptr, __global int *idx, __global VALUE *val)
{
    const int c = (int)get_global_id(0);
    const long lo = (long)c * chunk;
    if (lo >= n)
        return;
    const int hi = (int)(lo + chunk < (long)n ? lo + chunk : (long)n);
    int pos = offset[c];
    for (int i = (int)lo; i < hi; i++) {
        ptr[i] = pos;
        if (agg[i] >= 0) {
            idx[pos] = agg[i];
            val[pos++] = (VALUE)1 / sqrt((VALUE)size[agg[i]]);
        }
    }
}

__kernel void kd_amg_tent_smooth(const int n, const VALUE omega, __global const int *a_ptr,
                                 __global const int *a_idx, __global const VALUE *a_val,
                                 __global const int *agg, __global const int *size,
                                 __global const int *p_ptr, __global const int *p_idx,
                                 __global VALUE *p_val)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const int a0 = a_ptr[i], a1 = a_ptr[i + 1];
    const int d = a0 < a1 ? kd_amg_find(a_idx, a0, a1, i) : a0;
    const VALUE aii = d < a1 && a_idx[d] == i ? a_val[d] : (VALUE)0;
    const VALUE w = omega / aii;
    const int own = agg[i];
    for (int k = p_ptr[i]; k < p_ptr[i + 1]; k++) {
        const VALUE t = p_idx[k] == own ? (VALUE)1 / sqrt((VALUE)size[own]) : (VALUE)0;
        p_val[k] = t - w * p_val[k];
    }
}

/*
 * R = P^T on the device (solver/precond/amg/prolong.c, kd_amg_transpose_device):
 * kd_amg_col_count: entries per column of P (one work-item per row of P, an atomic increment per
 * entry: integer counts, order-free).
 * kd_amg_transpose_scatter: each entry of P to a free slot of its column's row of R (an atomic
 * increment of that row's fill; the slot depends on scheduling), with its row of P and its index
 * in P (the refresh's map).
 * kd_amg_transpose_sort: one work-item per row of R sorts the row's slots by P's row (heapsort in
 * place, global memory: O(len log len) for a long row too), so the result is the same whatever the
 * scatter's order was (the keys, P's rows, are distinct within a row of R).
 */
__kernel void kd_amg_col_count(const int rows, __global const int *p_ptr,
                               __global const int *p_idx, __global int *count)
{
    const int i = (int)get_global_id(0);
    if (i >= rows)
        return;
    for (int k = p_ptr[i]; k < p_ptr[i + 1]; k++)
        atomic_inc(&count[p_idx[k]]);
}

__kernel void kd_amg_transpose_scatter(const int rows, __global const int *p_ptr,
                                       __global const int *p_idx, __global int *fill,
                                       __global int *r_idx, __global int *r_map)
{
    const int i = (int)get_global_id(0);
    if (i >= rows)
        return;
    for (int k = p_ptr[i]; k < p_ptr[i + 1]; k++) {
        const int t = atomic_inc(&fill[p_idx[k]]);
        r_idx[t] = i;
        r_map[t] = k;
    }
}

/* Sift the heap's root down: entries base .. base + len - 1 keyed by key[], payload map[]. */
static void kd_amg_sift(__global int *key, __global int *map, const int base, int root,
                        const int len)
{
    for (;;) {
        int child = 2 * root + 1;
        if (child >= len)
            return;
        if (child + 1 < len && key[base + child + 1] > key[base + child])
            child++;
        if (key[base + root] >= key[base + child])
            return;
        const int k = key[base + root], m = map[base + root];
        key[base + root] = key[base + child];
        map[base + root] = map[base + child];
        key[base + child] = k;
        map[base + child] = m;
        root = child;
    }
}

__kernel void kd_amg_transpose_sort(const int rows, __global const int *r_ptr,
                                    __global int *r_idx, __global int *r_map,
                                    __global const VALUE *p_val, __global VALUE *r_val)
{
    const int j = (int)get_global_id(0);
    if (j >= rows)
        return;
    const int base = r_ptr[j], len = r_ptr[j + 1] - base;
    for (int root = len / 2 - 1; root >= 0; root--)
        kd_amg_sift(r_idx, r_map, base, root, len);
    for (int end = len - 1; end > 0; end--) {
        const int k = r_idx[base], m = r_map[base];
        r_idx[base] = r_idx[base + end];
        r_map[base] = r_map[base + end];
        r_idx[base + end] = k;
        r_map[base + end] = m;
        kd_amg_sift(r_idx, r_map, base, 0, end);
    }
    for (int t = base; t < base + len; t++)
        r_val[t] = p_val[r_map[t]];
}
