/*
 * BLAS-1 (solver/blas.c drives them; solver/blas.h explains the scalars buffer). The solvers'
 * fused multi-column steps are in kernels/methods/krylov.cl.
 *
 * Thread mapping, two kinds of kernel:
 *  - element-wise kernels (axpy, xpay, scale): one work-item per element, the global size rounded
 *    up to KD_WG_SIZE and the tail work-items returning at once. Consecutive work-items touch
 *    consecutive elements, so every load and store is coalesced.
 *  - reductions (dot_partial): a fixed grid of G work-groups (G chosen by the host from n and the
 *    device only). Work-item g of the grid handles elements g, g + G*WG, g + 2*G*WG, ... (a
 *    grid-stride loop: at each step the whole grid reads one contiguous, coalesced block), keeps
 *    a private sum, and the group folds its sums in local memory with a tree (WG/2, WG/4, ... 1
 *    active work-items, a barrier between levels) into partials[group]. reduce_final then runs as
 *    ONE work-group: each work-item sums partials lid, lid + WG, ..., the same tree folds them,
 *    and work-item 0 stores the total in scalars[slot]. The summation order is fixed by (n, G,
 *    WG), so results are reproducible bitwise; no atomics are needed (OpenCL 1.2 has none for
 *    floating point).
 */
/* Sum v over the work-group through scratch[KD_WG_SIZE]; every work-item gets the total. */
VALUE kd_group_sum(__local VALUE *scratch, VALUE v)
{
    const uint lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
}

/* partials[group] = this group's share of x'y. */
__kernel KD_WG_ATTR void kd_blas_dot_partial(const int n, __global const VALUE *x,
                                             __global const VALUE *y, __global VALUE *partials)
{
    __local VALUE scratch[KD_WG_SIZE];
    const uint stride = (uint)get_global_size(0);
    VALUE sum = KD_ZERO;
    for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride)
        sum += x[i] * y[i];
    sum = kd_group_sum(scratch, sum);
    if (get_local_id(0) == 0)
        partials[get_group_id(0)] = sum;
}

/* One work-group: scalars[slot] = the total of the first `groups` partials. */
__kernel KD_WG_ATTR void kd_blas_reduce_final(const int groups, __global const VALUE *partials,
                                              __global VALUE *scalars, const int slot)
{
    __local VALUE scratch[KD_WG_SIZE];
    VALUE sum = KD_ZERO;
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE)
        sum += partials[g];
    sum = kd_group_sum(scratch, sum);
    if (get_local_id(0) == 0)
        scalars[slot] = sum;
}

/* y = alpha x + y */
__kernel KD_WG_ATTR void kd_blas_axpy(const int n, const VALUE alpha, __global const VALUE *x,
                                      __global VALUE *y)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        y[i] += alpha * x[i];
}

/* y = x + alpha y */
__kernel KD_WG_ATTR void kd_blas_xpay(const int n, __global const VALUE *x, const VALUE alpha,
                                      __global VALUE *y)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        y[i] = x[i] + alpha * y[i];
}

/* x = alpha x */
__kernel KD_WG_ATTR void kd_blas_scale(const int n, const VALUE alpha, __global VALUE *x)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        x[i] *= alpha;
}

/* z[c][i] = d[i] * r[c][i] for k columns of n values with column stride ld: a diagonal applied to
 * a block of vectors. Range (n rounded up to WG, k); one work-item per element. */
__kernel KD_WG_ATTR void kd_blas_scale_rows(const int n, const int ld, __global const VALUE *d,
                                            __global const VALUE *r, __global VALUE *z)
{
    const size_t i = get_global_id(0);
    const size_t e = get_global_id(1) * (size_t)ld + i;
    if (i < (size_t)n)
        z[e] = d[i] * r[e];
}
