/*
 * CSR vector SpMV: y = alpha * A * x + beta * y on the CSR arrays (int32 row pointers and column
 * indices, VALUE values), with KD_TPR work-items per row (a power of two, 2..64, chosen by the
 * host from the mean row length and passed as -DKD_TPR=N).
 *
 * Thread mapping: work-item g serves row g / KD_TPR as lane g % KD_TPR, so a work-group of
 * KD_WG_SIZE work-items serves KD_WG_SIZE / KD_TPR consecutive rows. Lane l reads the row's
 * entries l, l + KD_TPR, l + 2 KD_TPR, ...: the KD_TPR lanes of a row read consecutive addresses
 * of indices[] and values[] at each step (coalesced in runs of KD_TPR), instead of one work-item
 * walking the row alone as in csr_scalar. x is gathered through the column indices.
 *
 * Reduction: each lane's partial sum goes to local memory and the row's lanes fold it in a tree
 * of log2(KD_TPR) levels with a work-group barrier between levels (every work-item of the group
 * passes every barrier, also those past the last row), so nothing relies on work-items running in
 * lock-step and no sub-group extension is needed. Lane 0 writes y[row] once.
 *
 * When beta == 0, y is only written. Summation order is fixed by KD_TPR: results are
 * reproducible run to run.
 */
#ifndef KD_TPR
#error "KD_TPR (work-items per row) must be defined"
#endif
#if KD_TPR > KD_WG_SIZE
#error "KD_TPR must not exceed KD_WG_SIZE"
#endif

#include "spmm_lib.cl"

__kernel KD_WG_ATTR void kd_csr_vector_spmv(const int rows, __global const int *indptr,
                                            __global const int *indices,
                                            __global const VALUE *values, __global const VALUE *x,
                                            __global VALUE *y, const VALUE alpha, const VALUE beta)
{
    __local VALUE partial[KD_WG_SIZE];
    const uint lid = get_local_id(0);
    const uint lane = lid & (KD_TPR - 1);
    const size_t row = get_global_id(0) / KD_TPR;
    VALUE sum = KD_ZERO;
    if (row < (size_t)rows) {
        const int end = indptr[row + 1];
        for (int k = indptr[row] + (int)lane; k < end; k += KD_TPR)
            sum += values[k] * x[indices[k]];
    }
    partial[lid] = sum;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_TPR / 2; s > 0; s >>= 1) {
        if (lane < s)
            partial[lid] += partial[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (lane == 0 && row < (size_t)rows) {
        sum = partial[lid];
        if (beta == KD_ZERO)
            y[row] = alpha * sum;
        else
            y[row] = alpha * sum + beta * y[row];
    }
}

/* Y = alpha A X + beta Y over k columns (spmm_lib.cl): KD_TPR work-items per row as above, each
 * with the chunk's sums of its share of the row, reduced in local memory column by column. */
__kernel KD_WG_ATTR void kd_csr_vector_spmm(const int rows, const int k,
                                            __global const int *indptr,
                                            __global const int *indices,
                                            __global const VALUE *values, __global const VALUE *x,
                                            const long ldx, __global VALUE *y, const long ldy,
                                            const VALUE alpha, const VALUE beta)
{
    __local VALUE partial[KD_SPMM_CHUNK * KD_WG_SIZE];
    const uint lid = get_local_id(0);
    const uint lane = lid & (KD_TPR - 1);
    const size_t row = get_global_id(0) / KD_TPR;
    const int live = row < (size_t)rows;
    const int begin = live ? indptr[row] + (int)lane : 0, end = live ? indptr[row + 1] : 0;
    KD_SPMM_CHUNKS(k)
    {
        VALUE acc[KD_SPMM_CHUNK];
        kd_spmm_zero(acc);
        __global const VALUE *xc = x + (size_t)c0 * (size_t)ldx;
        for (int e = begin; e < end; e += KD_TPR)
            kd_spmm_add(acc, values[e], xc, ldx, indices[e], cnt);
        barrier(CLK_LOCAL_MEM_FENCE); /* the previous chunk's reads of partial are done */
#pragma unroll
        for (int t = 0; t < KD_SPMM_CHUNK; t++)
            partial[t * KD_WG_SIZE + lid] = acc[t];
        barrier(CLK_LOCAL_MEM_FENCE);
        for (uint s = KD_TPR / 2; s > 0; s >>= 1) {
            if (lane < s)
                for (int t = 0; t < cnt; t++)
                    partial[t * KD_WG_SIZE + lid] += partial[t * KD_WG_SIZE + lid + s];
            barrier(CLK_LOCAL_MEM_FENCE);
        }
        if (lane == 0 && live) {
#pragma unroll
            for (int t = 0; t < KD_SPMM_CHUNK; t++)
                acc[t] = partial[t * KD_WG_SIZE + lid];
            kd_spmm_store(acc, y + (size_t)c0 * (size_t)ldy, ldy, (int)row, cnt, alpha, beta);
        }
    }
}
