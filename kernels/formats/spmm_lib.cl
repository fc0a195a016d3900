/*
 * What the formats' SpMM kernels share (Y = alpha A X + beta Y over k columns, X and Y
 * column-major with leading dimensions ldx and ldy, solver/formats/format.h's spmm op). A work-item
 * keeps KD_SPMM_CHUNK columns' sums of its row in registers and reads each matrix entry once per
 * chunk: the entries of a row come from DRAM for the first chunk and from cache for the next, so
 * the matrix crosses the memory bus about once for all k columns instead of k times. X is
 * gathered column by column (entry j of column c at c * ldx + j); Y is written coalesced.
 */
#ifndef KD_SPMM_CHUNK
#define KD_SPMM_CHUNK 8
#endif

/* acc[t] = 0 for the chunk. */
void kd_spmm_zero(VALUE *acc)
{
#pragma unroll
    for (int t = 0; t < KD_SPMM_CHUNK; t++)
        acc[t] = KD_ZERO;
}

/* acc[t] += v * x[t * ldx + col] for the chunk's cnt columns (x at the chunk's first column). */
void kd_spmm_add(VALUE *acc, const VALUE v, __global const VALUE *x, const long ldx,
                 const int col, const int cnt)
{
#pragma unroll
    for (int t = 0; t < KD_SPMM_CHUNK; t++)
        if (t < cnt)
            acc[t] += v * x[(size_t)t * (size_t)ldx + (size_t)col];
}

/* y[t * ldy + row] = alpha acc[t] (+ beta y[...] unless beta == 0: then y is not read). */
void kd_spmm_store(const VALUE *acc, __global VALUE *y, const long ldy, const int row,
                   const int cnt, const VALUE alpha, const VALUE beta)
{
#pragma unroll
    for (int t = 0; t < KD_SPMM_CHUNK; t++)
        if (t < cnt) {
            __global VALUE *yt = y + (size_t)t * (size_t)ldy + (size_t)row;
            *yt = beta == KD_ZERO ? alpha * acc[t] : alpha * acc[t] + beta * *yt;
        }
}

/* The chunk loop every SpMM kernel runs: columns c0 .. c0 + cnt - 1 of X and Y. */
#define KD_SPMM_CHUNKS(k)                                                                          \
    for (int c0 = 0, cnt = (k) < KD_SPMM_CHUNK ? (k) : KD_SPMM_CHUNK; c0 < (k);                    \
         c0 += KD_SPMM_CHUNK, cnt = (k)-c0 < KD_SPMM_CHUNK ? (k)-c0 : KD_SPMM_CHUNK)
