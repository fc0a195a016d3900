/*
 * ELLPACK-R SpMV (Vázquez et al., 2011) and its conversion from CSR: ELL's padded column-major
 * arrays (entry j of row r at j * ld + r, ld = rows rounded up to 32) plus each row's length.
 *
 * kd_ellpack_r_spmv: one work-item per row; it reads its length first and loops exactly that many
 * slots, so padding is never loaded at all (plain ELL reads one padding index to find the end).
 * At step j the group's loads of indices[] and values[] are consecutive (coalesced); a group runs
 * as long as its longest row, not the matrix's. x is gathered; y is written once per row (read
 * only when beta != 0).
 *
 * kd_ellpack_r_from_csr: one work-item per row writes its length and its W slots down the
 * columns (coalesced stores), padding with column -1 and value 0 so no slot is left undefined.
 */
#include "spmm_lib.cl"

__kernel KD_WG_ATTR void kd_ellpack_r_spmv(const int rows, const long ld,
                                           __global const int *lengths,
                                           __global const int *indices,
                                           __global const VALUE *values, __global const VALUE *x,
                                           __global VALUE *y, const VALUE alpha, const VALUE beta)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    const int len = lengths[row];
    VALUE sum = KD_ZERO;
    size_t p = row;
    for (int j = 0; j < len; j++, p += (size_t)ld)
        sum += values[p] * x[indices[p]];
    if (beta == KD_ZERO)
        y[row] = alpha * sum;
    else
        y[row] = alpha * sum + beta * y[row];
}

__kernel KD_WG_ATTR void kd_ellpack_r_from_csr(const int rows, const int width, const long ld,
                                               __global const int *indptr,
                                               __global const int *csr_indices,
                                               __global const VALUE *csr_values,
                                               __global int *lengths, __global int *indices,
                                               __global VALUE *values)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    const int begin = indptr[row];
    const int len = indptr[row + 1] - begin;
    lengths[row] = len;
    size_t p = row;
    for (int j = 0; j < width; j++, p += (size_t)ld) {
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
__kernel KD_WG_ATTR void kd_ellpack_r_spmm(const int rows, const int k, const long ld,
                                           __global const int *lengths,
                                           __global const int *indices,
                                           __global const VALUE *values, __global const VALUE *x,
                                           const long ldx, __global VALUE *y, const long ldy,
                                           const VALUE alpha, const VALUE beta)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    const int len = lengths[row];
    KD_SPMM_CHUNKS(k)
    {
        VALUE acc[KD_SPMM_CHUNK];
        kd_spmm_zero(acc);
        __global const VALUE *xc = x + (size_t)c0 * (size_t)ldx;
        size_t p = row;
        for (int j = 0; j < len; j++, p += (size_t)ld)
            kd_spmm_add(acc, values[p], xc, ldx, indices[p], cnt);
        kd_spmm_store(acc, y + (size_t)c0 * (size_t)ldy, ldy, (int)row, cnt, alpha, beta);
    }
}
