/*
 * The multigrid V-cycle's own vector kernels (solver/precond_amg.c); the level matrices, the
 * restriction and the prolongation run through their formats' SpMV.
 *
 * kd_amg_chebyshev: one Chebyshev step of the smoother on one level, one work-item per row, every
 * access coalesced: r = b - q (q = A x from the SpMV before it; b alone when x starts at 0),
 * d = c_d d + c_r D^-1 r (c_r D^-1 r alone on the first step), x += d (x = d from 0). Reads b, q,
 * 1/diag, d, x; writes d, x.
 * kd_amg_residual: q = b - q after q = A x: the residual the restriction reads.
 * kd_amg_scale: y = s .* x (the Lanczos estimate's D^-1/2).
 * kd_amg_dense_mv: x = M b on the coarsest level, M its dense inverse (row-major, n <= a few
 * hundred): one work-group per row, its lanes read consecutive entries of the row, then a tree
 * in local memory in a fixed order (deterministic).
 */
#pragma OPENCL FP_CONTRACT OFF

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
