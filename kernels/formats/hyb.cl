/*
 * HYB: an ELL part of width K (kernels/formats/ell.cl: kd_ell_spmv, kd_ell_from_csr, which writes the
 * first K entries of each row and pads shorter rows) plus a COO part holding every entry past
 * the K-th of its row (kernels/formats/coo.cl: kd_coo_chunks, kd_coo_fix add it onto the ELL result).
 * This file holds the one kernel HYB needs of its own: building the COO part.
 *
 * kd_hyb_coo_from_csr: one work-item per CSR entry k. It finds its row by binary search in the
 * row pointers, and if the entry is at position j >= K of its row it is written to the COO part
 * at coo_ptr[row] + j - K (coo_ptr: the exclusive prefix sum of max(0, len - K), made on the
 * host). Consecutive work-items read consecutive entries (coalesced) and write consecutive
 * overflow slots, so even a row of a million entries is spread over the whole device.
 */
__kernel KD_WG_ATTR void kd_hyb_coo_from_csr(const int nnz, const int rows, const int width,
                                             __global const int *indptr,
                                             __global const int *coo_ptr,
                                             __global const int *csr_indices,
                                             __global const VALUE *csr_values,
                                             __global int *coo_rows, __global int *coo_cols,
                                             __global VALUE *coo_values)
{
    const size_t k = get_global_id(0);
    if (k >= (size_t)nnz)
        return;
    int lo = 0, hi = rows; /* indptr[lo] <= k < indptr[hi] */
    while (hi - lo > 1) {
        const int mid = lo + (hi - lo) / 2;
        if (indptr[mid] <= (int)k)
            lo = mid;
        else
            hi = mid;
    }
    const int j = (int)k - indptr[lo];
    if (j < width)
        return;
    const int d = coo_ptr[lo] + j - width;
    coo_rows[d] = lo;
    coo_cols[d] = csr_indices[k];
    coo_values[d] = csr_values[k];
}
