/*
 * ELL (ELLPACK) SpMV and its conversion from CSR. Every row is padded to the same width W (the
 * longest row) and the W x ld arrays are stored column-major: entry j of row r lives at
 * j * ld + r, ld being rows rounded up to a multiple of 32 so that every column starts aligned.
 * Padding slots hold column -1 (and value 0); a row's real entries come first.
 *
 * kd_ell_spmv: one work-item per row. At step j the work-items of a group read indices[j*ld + r]
 * and values[j*ld + r] for consecutive r: consecutive addresses, fully coalesced, which is the
 * point of the format. A work-item stops at its first padding slot (column -1), so padding costs
 * the index load of one slot, not a gather from x; padding is never multiplied, so a NaN or Inf
 * in x cannot leak into a row that does not use it. x is gathered through the column indices; y
 * is written once per row (read only when beta != 0).
 *
 * kd_ell_from_csr: one work-item per row, writing its W slots down the columns (coalesced
 * stores across the group, reads from the row's CSR entries).
 */
__kernel KD_WG_ATTR void kd_ell_spmv(const int rows, const int width, const long ld,
                                     __global const int *indices, __global const VALUE *values,
                                     __global const VALUE *x, __global VALUE *y, const VALUE alpha,
                                     const VALUE beta)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    VALUE sum = KD_ZERO;
    size_t p = row;
    for (int j = 0; j < width; j++, p += (size_t)ld) {
        const int c = indices[p];
        if (c < 0)
            break;
        sum += values[p] * x[c];
    }
    if (beta == KD_ZERO)
        y[row] = alpha * sum;
    else
        y[row] = alpha * sum + beta * y[row];
}

__kernel KD_WG_ATTR void kd_ell_from_csr(const int rows, const int width, const long ld,
                                         __global const int *indptr,
                                         __global const int *csr_indices,
                                         __global const VALUE *csr_values, __global int *indices,
                                         __global VALUE *values)
{
    const size_t row = get_global_id(0);
    if (row >= (size_t)rows)
        return;
    const int begin = indptr[row];
    const int len = indptr[row + 1] - begin;
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
