/*
 * The Chebyshev polynomial preconditioner's vector steps (solver/precond_chebyshev.c):
 * z = p(D^-1 A) D^-1 r by the Chebyshev iteration for A z = r from z = 0, one SpMV (the matrix's
 * own format) between steps. One work-item per row, every access coalesced:
 * kd_chebyshev_first: d = c_r D^-1 r, z = d (the step from z = 0, no SpMV).
 * kd_chebyshev_step: after q = A z, d = c_d d + c_r D^-1 (r - q), z += d: one pass reading r, q,
 * 1/diag, d, z and writing d, z.
 * kd_chebyshev_scale: y = s .* x (setup's Lanczos estimate, on D^-1/2 A D^-1/2).
 */
#pragma OPENCL FP_CONTRACT OFF

__kernel void kd_chebyshev_first(const int n, const VALUE c_r, __global const VALUE *r,
                                 __global const VALUE *inv_diagonal, __global VALUE *d,
                                 __global VALUE *z)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const VALUE di = c_r * (inv_diagonal[i] * r[i]);
    d[i] = di;
    z[i] = di;
}

__kernel void kd_chebyshev_step(const int n, const VALUE c_d, const VALUE c_r,
                                __global const VALUE *r, __global const VALUE *q,
                                __global const VALUE *inv_diagonal, __global VALUE *d,
                                __global VALUE *z)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const VALUE di = c_d * d[i] + c_r * (inv_diagonal[i] * (r[i] - q[i]));
    d[i] = di;
    z[i] = z[i] + di;
}

__kernel void kd_chebyshev_scale(const int n, __global const VALUE *s, __global const VALUE *x,
                                 __global VALUE *y)
{
    const int i = (int)get_global_id(0);
    if (i < n)
        y[i] = s[i] * x[i];
}
