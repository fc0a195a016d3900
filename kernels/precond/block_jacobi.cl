/*
 * Block Jacobi's apply (solver/precond/block_jacobi.c): z = B^-1 r for every column, B the
 * diagonal blocks of A, whose inverses setup computed on the host.
 *
 * A 2-D range (rows rounded up to the work-group size, columns): work-item (i, c) writes
 * z_i = sum_j Binv(i, s + j) r_{s + j} of column c (at c * ld), s the first row of i's block and
 * j < its size. The rows of a block read the same few r values (broadcast from one cache line),
 * neighbouring blocks the next ones, so r is read once from memory.
 *
 * Uniform blocks (-DKD_BS=B: every block B rows, the last one perhaps fewer): s = i - i % B, and
 * the inverse is interleaved: entry j of row i at inverse[j * n + i], so the work-items of a warp
 * read consecutive addresses at every j (coalesced; row-major 3 x 3 blocks would be read with
 * stride 3). The loop has a constant trip count and unrolls.
 * Variable blocks (no KD_BS): block_of_row[i] names i's block, block_start[b] .. block_start[b+1]
 * its rows, and value_start[b] where its row-major inverse begins (row i's entries contiguous).
 * -DKD_MAPPED: the matrix is stored reordered (P A P^T) and r, z are in its order while the blocks
 * are the client's: row i of the client's numbering is entry map[i] of r and z.
 */
#pragma OPENCL FP_CONTRACT OFF

#ifdef KD_MAPPED
#define KD_AT(i) map[i]
#else
#define KD_AT(i) (i)
#endif

__kernel void kd_block_jacobi_apply(const int n, const int ld, __global const VALUE *inverse,
                                    __global const int *block_of_row,
                                    __global const int *block_start,
                                    __global const long *value_start, __global const int *map,
                                    __global const VALUE *r, __global VALUE *z)
{
    const int i = (int)get_global_id(0);
    if (i >= n)
        return;
    const size_t col = get_global_id(1) * (size_t)ld;
    __global const VALUE *rc = r + col;
    VALUE s = KD_ZERO;
#ifdef KD_BS
    const int start = i - i % KD_BS, size = min(KD_BS, n - start);
    for (int j = 0; j < KD_BS; j++)
        if (j < size)
            s += inverse[(size_t)j * (size_t)n + (size_t)i] * rc[KD_AT(start + j)];
#else
    const int b = block_of_row[i];
    const int start = block_start[b], size = block_start[b + 1] - start;
    const long at = value_start[b] + (long)(i - start) * size;
    for (int j = 0; j < size; j++)
        s += inverse[at + j] * rc[KD_AT(start + j)];
#endif
    z[col + (size_t)KD_AT(i)] = s;
}
