/*
 * The permutation around a reordered matrix's SpMV (solver/matrix_reorder.c): the format holds
 * P A P^T, so y = alpha A x + beta y is x_p = P x (gather), y_p = (P A P^T) x_p (the format's own
 * kernel, alpha 1, beta 0), y = alpha P^T y_p + beta y. perm[new] = old, iperm[old] = new.
 *
 * Thread mapping: one work-item per element, the global size rounded up to KD_WG_SIZE and the
 * tail returning at once. Both kernels write consecutive elements (coalesced) and read through
 * an index array (a gather): the output side is written as a gather through the inverse
 * permutation rather than as a scatter, so no two work-items' stores share a line needlessly.
 * When beta == 0, y is written without being read (it may hold NaN).
 */
__kernel KD_WG_ATTR void kd_permute_in(const int n, __global const int *perm,
                                       __global const VALUE *x, __global VALUE *x_p)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)n)
        return;
    x_p[i] = x[perm[i]];
}

__kernel KD_WG_ATTR void kd_permute_out(const int n, __global const int *iperm,
                                        __global const VALUE *y_p, __global VALUE *y,
                                        const VALUE alpha, const VALUE beta)
{
    const size_t j = get_global_id(0);
    if (j >= (size_t)n)
        return;
    if (beta == KD_ZERO)
        y[j] = alpha * y_p[iperm[j]];
    else
        y[j] = alpha * y_p[iperm[j]] + beta * y[j];
}
