/*
 * The Chebyshev polynomial preconditioner's vector steps (solver/precond/chebyshev.c):
 * z = p(D^-1 A) D^-1 r by the Chebyshev iteration for A z = r from z = 0, one SpMV (the matrix's
 * own format) between steps. One work-item per row, every access coalesced:
 * kd_chebyshev_first: z_1 = c_r D^-1 r (the step from z_0 = 0, no SpMV).
 * kd_chebyshev_step: after q = A z_k, z_{k+1} = z_k + c_d (z_k - z_{k-1}) + c_r D^-1 (r - q),
 * written over z_{k-1} (each work-item reads its own entry before writing it); z_0 = 0 is not
 * read (`first`). One pass reading r, q, 1/diag, z_k, z_{k-1} and writing z_{k+1}: six vectors,
 * one fewer than keeping the step d = z_{k+1} - z_k in a vector of its own.
 * kd_chebyshev_scale: y = s .* x (setup's Lanczos estimate, on D^-1/2 A D^-1/2).
 */
#pragma OPENCL FP_CONTRACT OFF

__kernel void kd_chebyshev_first(const int n, const VALUE c_r, __global const VALUE *r,
                                 __global const VALUE *inv_diagonal, __global VALUE *z)
{
    const int i = (int)get_global_id(0);
    if (i < n)
        z[i] = c_r * (inv_diagonal[i] * r[i]);
}

__kernel void kd_chebyshev_step(const int n, const int first, const VALUE c_d, const VALUE c_r,
                                __global const VALUE *r, __global const VALUE *q,
                                __global const VALUE *inv_diagonal, __global const VALUE *z,
                                __global VALUE *z_other)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const VALUE zi = z[i], previous = first ? KD_ZERO : z_other[i];
    z_other[i] = zi + c_d * (zi - previous) + c_r * (inv_diagonal[i] * (r[i] - q[i]));
}

__kernel void kd_chebyshev_scale(const int n, __global const VALUE *s, __global const VALUE *x,
                                 __global VALUE *y)
{
    const int i = (int)get_global_id(0);
    if (i < n)
        y[i] = s[i] * x[i];
}
