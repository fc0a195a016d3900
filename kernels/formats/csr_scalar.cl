/*
 * CSR scalar SpMV: y = alpha * A * x + beta * y, with A in compressed sparse rows (int32 row
 * pointers and column indices, VALUE values).
 *
 * Thread mapping: one work-item per row. The host launches rows rounded up to a multiple of
 * KD_WG_SIZE; work-items past the last row return at once, so no row count needs to be a multiple
 * of anything.
 *
 * Memory access: each work-item walks its own row of indices[] and values[] from indptr[row] to
 * indptr[row + 1] - 1, so on a GPU neighbouring work-items read addresses one row apart: loads are
 * coalesced only when rows are about one element long, and a warp waits for its longest row.
 * That is the format's known weakness on long or irregular rows, which csr_vector and
 * csr_adaptive address. x is gathered through the column indices (cache-friendly when columns
 * cluster, as in banded and stencil matrices); y is written once per row, coalesced. Every
 * access stays inside [indptr[row], indptr[row + 1]), so an empty row touches nothing but y, and
 * empty arrays (nnz = 0, cols = 0) may be passed as NULL.
 *
 * When beta == 0, y is written without being read, so y may hold NaN or garbage before the call.
 * Accumulation is in VALUE, in column order.
 */
#include "spmm_lib.cl"

__kernel KD_WG_ATTR void kd_csr_scalar_spmv(const int rows, __global const int *indptr,
                                            __global const int *indices,
                                            __global const VALUE *values, __global const VALUE *x,
                                            __global VALUE *y, const VALUE alpha, const VALUE beta)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    const int begin = indptr[row];
    const int end = indptr[row + 1];
    VALUE sum = KD_ZERO;
    for (int k = begin; k < end; k++)
        sum += values[k] * x[indices[k]];
    if (beta == KD_ZERO)
        y[row] = alpha * sum;
    else
        y[row] = alpha * sum + beta * y[row];
}

/* Y = alpha A X + beta Y over k columns (spmm_lib.cl): one work-item per row, as above. */
__kernel KD_WG_ATTR void kd_csr_scalar_spmm(const int rows, const int k,
                                            __global const int *indptr,
                                            __global const int *indices,
                                            __global const VALUE *values, __global const VALUE *x,
                                            const long ldx, __global VALUE *y, const long ldy,
                                            const VALUE alpha, const VALUE beta)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    const int begin = indptr[row];
    const int end = indptr[row + 1];
    KD_SPMM_CHUNKS(k)
    {
        VALUE acc[KD_SPMM_CHUNK];
        kd_spmm_zero(acc);
        __global const VALUE *xc = x + (size_t)c0 * (size_t)ldx;
        for (int e = begin; e < end; e++)
            kd_spmm_add(acc, values[e], xc, ldx, indices[e], cnt);
        kd_spmm_store(acc, y + (size_t)c0 * (size_t)ldy, ldy, (int)row, cnt, alpha, beta);
    }
}
