/*
 * Triangular solves with an incomplete factor (solver/precond/ilu.c): T x = b for a triangle T
 * stored as its strictly-off-diagonal entries in CSR plus 1/t_ii, for k columns at once
 * (dimension 1: the column, at column * ld in b and x).
 *
 * Exact (level-scheduled): one launch per level; work-item t solves row order[offset + t], whose
 * entries reference only rows of earlier levels, already final in x. The upper solve runs in
 * place (b is x): a row reads its own b before writing it, and no row of its level reads it.
 *
 * Approximate (Jacobi sweeps): x_out = D^-1 (b - N x_in), N the off-diagonal part; the first
 * sweep takes x_in = D^-1 b without reading it, so k sweeps cost k launches.
 */

/* b_i - sum_j t_ij x_j, over row i's off-diagonal entries. */
static VALUE kd_ilu_row(const int i, const size_t col, __global const int *indptr,
                        __global const int *indices, __global const VALUE *values, VALUE b,
                        __global const VALUE *x)
{
    const int end = indptr[i + 1];
    for (int k = indptr[i]; k < end; k++)
        b -= values[k] * x[col + indices[k]];
    return b;
}

__kernel KD_WG_ATTR void kd_ilu_level(const int count, const int offset, const int ld,
                                      __global const int *order, __global const int *indptr,
                                      __global const int *indices, __global const VALUE *values,
                                      __global const VALUE *inv_diag, __global const VALUE *b,
                                      __global VALUE *x)
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)count)
        return;
    const int i = order[offset + (int)t];
    const size_t col = get_global_id(1) * (size_t)ld;
    x[col + i] = kd_ilu_row(i, col, indptr, indices, values, b[col + i], x) * inv_diag[i];
}

/* kd_ilu_level on (P b)_i = b_perm[i]: ilu0's forward solve with a row matching. */
__kernel KD_WG_ATTR void kd_ilu_level_gather(const int count, const int offset, const int ld,
                                             __global const int *perm, __global const int *order,
                                             __global const int *indptr,
                                             __global const int *indices,
                                             __global const VALUE *values,
                                             __global const VALUE *inv_diag,
                                             __global const VALUE *b, __global VALUE *x)
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)count)
        return;
    const int i = order[offset + (int)t];
    const size_t col = get_global_id(1) * (size_t)ld;
    x[col + i] = kd_ilu_row(i, col, indptr, indices, values, b[col + perm[i]], x) * inv_diag[i];
}

__kernel KD_WG_ATTR void kd_ilu_level_in_place(const int count, const int offset, const int ld,
                                               __global const int *order,
                                               __global const int *indptr,
                                               __global const int *indices,
                                               __global const VALUE *values,
                                               __global const VALUE *inv_diag, __global VALUE *x)
{
    const size_t t = get_global_id(0);
    if (t >= (size_t)count)
        return;
    const int i = order[offset + (int)t];
    const size_t col = get_global_id(1) * (size_t)ld;
    x[col + i] = kd_ilu_row(i, col, indptr, indices, values, x[col + i], x) * inv_diag[i];
}

__kernel KD_WG_ATTR void kd_ilu_sweep(const int n, const int ld, const int first,
                                      __global const int *indptr, __global const int *indices,
                                      __global const VALUE *values,
                                      __global const VALUE *inv_diag, __global const VALUE *b,
                                      __global const VALUE *x_in, __global VALUE *x_out)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)n)
        return;
    const size_t col = get_global_id(1) * (size_t)ld;
    VALUE s = b[col + i];
    const int end = indptr[i + 1];
    if (first)
        for (int k = indptr[i]; k < end; k++) {
            const int j = indices[k];
            s -= values[k] * (inv_diag[j] * b[col + j]);
        }
    else
        s = kd_ilu_row((int)i, col, indptr, indices, values, s, x_in);
    x_out[col + i] = s * inv_diag[i];
}
