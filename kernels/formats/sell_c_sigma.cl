/*
 * SELL-C-sigma SpMV (Kreutzer et al., SIAM J. Sci. Comput. 36(5), 2014) and its conversion from
 * CSR. Rows are sorted by length (longest first) inside windows of sigma rows, and the sorted rows
 * are cut into slices of KD_SELL_C rows. Each slice is padded to its own longest row and stored
 * column-major: entry j of the slice's lane l lives at slice_ptr[s] + j * KD_SELL_C + l. perm[i]
 * is the original row of sorted position i, so y comes back in the original order. Padding slots
 * hold column -1.
 *
 * kd_sell_spmv: one work-item per sorted row i (slice i / C, lane i % C). At step j the C lanes of
 * a slice read C consecutive slots (coalesced, as in ELL), but a slice is only as wide as its own
 * longest row, and sorting makes rows in a slice of similar length, so padding stays small even
 * when row lengths vary across the matrix. A work-item stops at its first padding slot. x is
 * gathered; y[perm[i]] is written once (read only when beta != 0): a permutation inside a window
 * of sigma rows, so writes stay within a few cache lines of each other.
 *
 * kd_sell_from_csr: one work-item per sorted row, writing its slice column by column (coalesced
 * stores across the slice's lanes, reads from the original row's CSR entries).
 */
#ifndef KD_SELL_C
#error "KD_SELL_C (rows per slice) must be defined"
#endif

#include "spmm_lib.cl"

__kernel KD_WG_ATTR void kd_sell_spmv(const int rows, __global const long *slice_ptr,
                                      __global const int *perm, __global const int *indices,
                                      __global const VALUE *values, __global const VALUE *x,
                                      __global VALUE *y, const VALUE alpha, const VALUE beta)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)rows)
        return;
    const size_t s = i / KD_SELL_C;
    const long end = slice_ptr[s + 1];
    VALUE sum = KD_ZERO;
    for (long p = slice_ptr[s] + (long)(i % KD_SELL_C); p < end; p += KD_SELL_C) {
        const int c = indices[p];
        if (c < 0)
            break;
        sum += values[p] * x[c];
    }
    const int row = perm[i];
    if (beta == KD_ZERO)
        y[row] = alpha * sum;
    else
        y[row] = alpha * sum + beta * y[row];
}

__kernel KD_WG_ATTR void kd_sell_from_csr(const int rows, __global const long *slice_ptr,
                                          __global const int *perm, __global const int *indptr,
                                          __global const int *csr_indices,
                                          __global const VALUE *csr_values, __global int *indices,
                                          __global VALUE *values)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)rows)
        return;
    const size_t s = i / KD_SELL_C;
    const int row = perm[i];
    const int begin = indptr[row];
    const int len = indptr[row + 1] - begin;
    const long end = slice_ptr[s + 1];
    int j = 0;
    for (long p = slice_ptr[s] + (long)(i % KD_SELL_C); p < end; p += KD_SELL_C, j++) {
        if (j < len) {
            indices[p] = csr_indices[begin + j];
            values[p] = csr_values[begin + j];
        } else {
            indices[p] = -1;
            values[p] = KD_ZERO;
        }
    }
}

/* Y = alpha A X + beta Y over k columns (spmm_lib.cl): one work-item per row, as above. */
__kernel KD_WG_ATTR void kd_sell_spmm(const int rows, const int k, __global const long *slice_ptr,
                                      __global const int *perm, __global const int *indices,
                                      __global const VALUE *values, __global const VALUE *x,
                                      const long ldx, __global VALUE *y, const long ldy,
                                      const VALUE alpha, const VALUE beta)
{
    const size_t i = get_global_id(0);
    if (i >= (size_t)rows)
        return;
    const size_t s = i / KD_SELL_C;
    const long end = slice_ptr[s + 1];
    const int row = perm[i];
    KD_SPMM_CHUNKS(k)
    {
        VALUE acc[KD_SPMM_CHUNK];
        kd_spmm_zero(acc);
        __global const VALUE *xc = x + (size_t)c0 * (size_t)ldx;
        for (long p = slice_ptr[s] + (long)(i % KD_SELL_C); p < end; p += KD_SELL_C) {
            const int c = indices[p];
            if (c < 0)
                break;
            kd_spmm_add(acc, values[p], xc, ldx, c, cnt);
        }
        kd_spmm_store(acc, y + (size_t)c0 * (size_t)ldy, ldy, row, cnt, alpha, beta);
    }
}
