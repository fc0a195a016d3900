/*
 * Tiled SpMV (TileSpMV, Niu et al., IPDPS 2021): y = alpha * A * x + beta * y with A cut into
 * 16 x 16 tiles, each stored in the format that takes the fewest bytes for its structure
 * (tiled_abi.h has the codes, solver/formats/tiled.c the choice and the layout). In-tile rows and
 * columns are 4-bit, so indices cost a byte or half a byte an entry instead of CSR's four.
 *
 * Arrays: per chunk (a run of at most KD_TILED_CHUNK_TILES tiles of one tile row; a tile row of
 * that many tiles or fewer is one chunk, an empty tile row is an empty chunk) its first tile
 * (chunk_tile, chunks + 1), its tile row (chunk_row) and its partial-sum slot (chunk_slot, -1 when
 * the chunk is the whole tile row and writes y itself). Per tile: its tile column, its code byte,
 * and offsets into the value array and the byte array (tiles + 1 each). The pulled-out entries of
 * very sparse tiles: a CSR part (pulled_ptr over every row) for rows of at most
 * KD_TILED_LONG_ROW of them; longer pulled rows are a separate csr_adaptive matrix that the host
 * runs afterwards with beta = 1 (solver/formats/tiled.c).
 *
 * kd_tiled_spmv, thread mapping: KD_TILED_LANES = 16 work-items per chunk, one per row r of the
 * tile row, so a 32-wide warp holds two chunks. The 16 lanes first stage the chunk's tile
 * metadata (column, code, value and byte offsets: two tiles a lane, coalesced) in local memory;
 * one barrier, reached by every work-item of the group (also those past the last chunk and below
 * the matrix's last row, which return only after it). Then lane r walks the chunk's tiles from
 * local memory, adding all of row r of each tile, then its row's pulled entries (first chunk of
 * the tile row only; their row pointers are loaded before the barrier, the first entry right
 * after it, so those loads overlap the tiles). One lane owns one row's sum: no atomics, no
 * reduction, a fixed order. It writes y[row] once, or the chunk's partial slot when the tile
 * row is split. When beta == 0 y is never read.
 *
 * Memory access and latency: per tile a lane makes a chain of dependent loads (index bytes, then
 * x; CSR tiles: row starts, then column nibbles, then x); values load beside the index bytes.
 * ELL (and HYB's ELL part) loads all w slots of the row without waiting for the row's length
 * (padding holds column 0 and value 0; a select drops its product, so 0 * Inf never reaches a
 * sum). Dense, dense-row and dense-column tiles hold only stored entries, so no explicit zero is
 * multiplied. Values of dense and ELL tiles are read by 16 lanes at consecutive addresses.
 *
 * Why it does not beat the row-wise formats (H100, bench/NOTES.md "tiled on the H100"): it moves
 * about 10 bytes a nonzero against CSR's 12.8 on lap2d/lap3d, but the kernel is latency-bound,
 * not bandwidth-bound: a lane walks its tile row's tiles one after another, 2-3 dependent memory
 * round trips each (3-7 tiles a tile row on the stencils), where csr_scalar's lane makes one
 * chain of 3 for its whole row. v1 (32 lanes a tile row, halves splitting each tile's entries):
 * 0.60 ms on lap2d:2048; v2 (staged metadata, halves on different tiles): 0.46; v3 (this one):
 * 0.27, against csr_scalar's 0.12.
 *
 * kd_tiled_reduce: one work-item per row of a split tile row, adding that row's chunk partials
 * in chunk order (deterministic: the same sum every run) and writing y once.
 */
#include "tiled_abi.h"

#define KD_TILED_GROUP_CHUNKS (KD_WG_SIZE / KD_TILED_LANES)

/* The 4-bit field e of a nibble array (two per byte, low nibble first). */
static inline int kd_tiled_nibble(__global const uchar *b, int e)
{
    const uchar v = b[e >> 1];
    return (e & 1) ? (v >> 4) : (v & 15);
}

/* Row r of a COO list of n bytes (row << 4 | column), sorted by row. */
static inline VALUE kd_tiled_coo(__global const uchar *b, __global const VALUE *v, int n, int r,
                                 __global const VALUE *xt)
{
    VALUE sum = KD_ZERO;
    for (int e = 0; e < n; e++) {
        const int p = b[e];
        if ((p >> 4) > r)
            break;
        if ((p >> 4) == r)
            sum += v[e] * xt[p & 15];
    }
    return sum;
}

/* Row r of an ELL part of width w (th rows): th 4-bit lengths, then w * th 4-bit columns. All w
 * slots are loaded (padding holds column 0 and value 0, so the loads are in bounds) and the
 * padding's products discarded by a select, so the length, column and value loads do not wait
 * on each other and 0 * Inf never reaches the sum. */
static inline VALUE kd_tiled_ell(__global const uchar *b, __global const VALUE *v, int th, int w,
                                 int r, __global const VALUE *xt)
{
    const int len = kd_tiled_nibble(b, r);
    __global const uchar *cb = b + (th + 1) / 2;
    VALUE sum = KD_ZERO;
    for (int k = 0; k < w; k++) {
        const VALUE p = v[k * th + r] * xt[kd_tiled_nibble(cb, k * th + r)];
        sum += k < len ? p : KD_ZERO;
    }
    return sum;
}

/* Row r of one tile (r < th). xt is x at the tile's first column. */
static VALUE kd_tiled_tile(int code, int r, int th, int tw, __global const VALUE *v, int nval,
                           __global const uchar *b, int nbyte, __global const VALUE *xt)
{
    const int kind = code & KD_TILED_KIND_MASK;
    VALUE sum = KD_ZERO;
    if (kind == KD_TILED_CSR) {
        const int end = r + 1 < th ? b[r + 1] : nval;
        __global const uchar *cb = b + th;
        for (int e = b[r]; e < end; e++)
            sum += v[e] * xt[kd_tiled_nibble(cb, e)];
    } else if (kind == KD_TILED_ELL) {
        sum = kd_tiled_ell(b, v, th, code >> KD_TILED_KIND_BITS, r, xt);
    } else if (kind == KD_TILED_DENSE) {
        __global const VALUE *vr = v + r * tw;
        if (tw == KD_TILED_SIZE) {
#pragma unroll
            for (int c = 0; c < KD_TILED_SIZE; c++)
                sum += vr[c] * xt[c];
        } else {
            for (int c = 0; c < tw; c++)
                sum += vr[c] * xt[c];
        }
    } else if (kind == KD_TILED_DENSE_ROW) {
        for (int i = 0; i < nbyte; i++) {
            if (b[i] == r) {
                for (int c = 0; c < tw; c++)
                    sum += v[i * tw + c] * xt[c];
                break;
            }
        }
    } else if (kind == KD_TILED_DENSE_COL) {
        for (int j = 0; j < nbyte; j++)
            sum += v[j * th + r] * xt[b[j]];
    } else if (kind == KD_TILED_COO) {
        sum = kd_tiled_coo(b, v, nval, r, xt);
    } else { /* KD_TILED_HYB */
        const int slots = (code >> KD_TILED_KIND_BITS) * th;
        const int ell_bytes = (th + 1) / 2 + (slots + 1) / 2;
        sum = kd_tiled_ell(b, v, th, code >> KD_TILED_KIND_BITS, r, xt) +
              kd_tiled_coo(b + ell_bytes, v + slots, nval - slots, r, xt);
    }
    return sum;
}

__kernel KD_WG_ATTR void kd_tiled_spmv(
    const int rows, const int cols, const int chunks, __global const int *chunk_tile,
    __global const int *chunk_row, __global const int *chunk_slot, __global const int *tile_col,
    __global const uchar *tile_code, __global const int *val_off, __global const int *byte_off,
    __global const VALUE *values, __global const uchar *bytes, const int pulled,
    __global const int *pulled_ptr, __global const int *pulled_col,
    __global const VALUE *pulled_val, __global const VALUE *x, __global VALUE *y,
    __global VALUE *partial, const VALUE alpha, const VALUE beta)
{
    __local int s_col[KD_TILED_GROUP_CHUNKS * KD_TILED_CHUNK_TILES];
    __local uchar s_code[KD_TILED_GROUP_CHUNKS * KD_TILED_CHUNK_TILES];
    __local int s_voff[KD_TILED_GROUP_CHUNKS * (KD_TILED_CHUNK_TILES + 1)];
    __local int s_boff[KD_TILED_GROUP_CHUNKS * (KD_TILED_CHUNK_TILES + 1)];
    const int r = (int)get_local_id(0) % KD_TILED_LANES;
    const int g = (int)get_local_id(0) / KD_TILED_LANES;
    const size_t chunk = get_global_id(0) / KD_TILED_LANES;
    __local int *col = s_col + g * KD_TILED_CHUNK_TILES;
    __local uchar *code = s_code + g * KD_TILED_CHUNK_TILES;
    __local int *voff = s_voff + g * (KD_TILED_CHUNK_TILES + 1);
    __local int *boff = s_boff + g * (KD_TILED_CHUNK_TILES + 1);
    int t0 = 0, nt = 0, tr = 0, th = 0, slot = -1, ps = 0, pe = 0;
    if (chunk < (size_t)chunks) {
        t0 = chunk_tile[chunk];
        nt = chunk_tile[chunk + 1] - t0;
        tr = chunk_row[chunk];
        slot = chunk_slot[chunk];
        th = min(KD_TILED_SIZE, rows - tr * KD_TILED_SIZE);
        /* the pulled entries go with the tile row's first chunk */
        if (pulled && r < th && (chunk == 0 || chunk_row[chunk - 1] != tr)) {
            ps = pulled_ptr[tr * KD_TILED_SIZE + r];
            pe = pulled_ptr[tr * KD_TILED_SIZE + r + 1];
        }
    }
    /* the chunk's tile metadata: coalesced loads, two tiles a lane */
    for (int i = r; i < nt; i += KD_TILED_LANES) {
        col[i] = tile_col[t0 + i];
        code[i] = tile_code[t0 + i];
        voff[i + 1] = val_off[t0 + i + 1];
        boff[i + 1] = byte_off[t0 + i + 1];
    }
    if (r == 0) {
        voff[0] = val_off[t0];
        boff[0] = byte_off[t0];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (r >= th)
        return;
    int pc = 0;
    VALUE pv = KD_ZERO;
    if (ps < pe) {
        pc = pulled_col[ps];
        pv = pulled_val[ps];
    }
    VALUE sum = KD_ZERO;
    for (int i = 0; i < nt; i++) {
        const int c0 = col[i] * KD_TILED_SIZE;
        const int v0 = voff[i], b0 = boff[i];
        sum += kd_tiled_tile(code[i], r, th, min(KD_TILED_SIZE, cols - c0), values + v0,
                             voff[i + 1] - v0, bytes + b0, boff[i + 1] - b0, x + c0);
    }
    if (ps < pe) {
        sum += pv * x[pc];
        for (int e = ps + 1; e < pe; e++)
            sum += pulled_val[e] * x[pulled_col[e]];
    }
    if (slot >= 0) {
        partial[(size_t)slot * KD_TILED_SIZE + r] = sum;
        return;
    }
    const size_t row = (size_t)tr * KD_TILED_SIZE + r;
    if (beta == KD_ZERO)
        y[row] = alpha * sum;
    else
        y[row] = alpha * sum + beta * y[row];
}

__kernel KD_WG_ATTR void kd_tiled_reduce(const int rows, const int splits,
                                         __global const int *split_row,
                                         __global const int *split_slot,
                                         __global const VALUE *partial, __global VALUE *y,
                                         const VALUE alpha, const VALUE beta)
{
    const size_t gid = get_global_id(0);
    const size_t s = gid / KD_TILED_SIZE;
    const int r = (int)(gid % KD_TILED_SIZE);
    if (s >= (size_t)splits)
        return;
    const size_t row = (size_t)split_row[s] * KD_TILED_SIZE + r;
    if (row >= (size_t)rows)
        return;
    VALUE total = KD_ZERO;
    for (int slot = split_slot[s]; slot < split_slot[s + 1]; slot++)
        total += partial[(size_t)slot * KD_TILED_SIZE + r];
    if (beta == KD_ZERO)
        y[row] = alpha * total;
    else
        y[row] = alpha * total + beta * y[row];
}
