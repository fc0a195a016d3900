/*
 * Tiled (TileSpMV, Niu et al., IPDPS 2021): the matrix cut into 16 x 16 tiles, each stored in
 * whichever of seven small formats takes the fewest bytes for its structure, with 4-bit in-tile
 * rows and columns, so indices cost about a byte an entry (CSR: four). kernels/tiled.cl has the
 * thread mapping; kernels/tiled_abi.h the tile codes.
 *
 * Layout (device arrays):
 *   chunk_tile, chunk_row, chunk_slot   the tile pointer, cut into chunks of at most
 *                                       KD_TILED_CHUNK_TILES tiles of one tile row (every tile row
 *                                       has at least one chunk, empty or not); a split tile row's
 *                                       chunks write 16 partial sums each to slots of `partial`
 *   split_row, split_slot, partial      per split tile row its chunks' slots, added in order
 *   tile_col, tile_code                 per tile: tile column and code (kind | ELL width << 3)
 *   val_off, byte_off                   per tile + 1: offsets into values and bytes (int32)
 *   values, bytes                       the tiles' values and index bytes, tile after tile
 *   sparse (CSR)                        the entries of tiles with at most KD_TILED_PULL_MAX
 *                                       entries, when pulling them out saves bytes
 *
 * Per-tile choice: for th x tw tiles (cut by the matrix edge) with n entries, v bytes a value:
 *   dense      (n = th * tw)                th*tw*v
 *   dense_row  (every row full or empty)    k*tw*v + k          (k full rows)
 *   dense_col  (every column full or empty) k*th*v + k
 *   ell        (longest row w <= 15)        w*th*v + ceil(w*th/2) + ceil(th/2)
 *   csr        (n <= 255)                   n*v + ceil(n/2) + th
 *   coo                                     n*v + n
 *   hyb        (ELL width w < longest row)  ELL(w) + (entries past w) * (v + 1)
 * The smallest wins; ties go to the lower code (the simpler loop, tiled_abi.h). Dense kinds hold
 * only stored entries, so no explicit zero is ever multiplied (0 * Inf).
 *
 * Very sparse tiles: a tile costs KD_TILED_TILE_BYTES of metadata besides its entries, an entry
 * in the CSR part 3 bytes more than in a COO tile, so a tile of n entries is cheaper there when
 * 3n < 13, n <= 4 = KD_TILED_PULL_MAX. The CSR part's row pointers cost 4 bytes a row, so the
 * tiles are pulled out only when the bytes they save exceed that; SpMV adds them after the tiles
 * with csr_scalar's kernel (y += alpha * A_sparse * x).
 *
 * The analysis (the prepare op) walks the host CSR twice, O(nnz + 16 * tiles): a 16-way merge of
 * each tile row's rows by tile column, choosing each tile's kind, then filling the arrays. It is
 * host work proportional to nnz, unlike the other formats' O(rows) metadata, and the arrays cross
 * the bus (the selection runs it beside the CSR transfer; see select.c).
 */
#include "kernels/tiled_abi.h"
#include "solver/format.h"

#include <stdlib.h>
#include <string.h>

#define KD_TILED_CHUNK_TILES 32
#define KD_TILED_PULL_MAX 4
#define KD_TILED_TILE_BYTES 13 /* column, value offset, byte offset (int32 each) and the code */
#define KD_TILED_AREA (KD_TILED_SIZE * KD_TILED_SIZE)

static const char *const kd_tiled_kind_names[KD_TILED_KINDS] = {
    [KD_TILED_DENSE] = "dense",
    [KD_TILED_DENSE_ROW] = "dense_row",
    [KD_TILED_DENSE_COL] = "dense_col",
    [KD_TILED_ELL] = "ell",
    [KD_TILED_CSR] = "csr",
    [KD_TILED_COO] = "coo",
    [KD_TILED_HYB] = "hyb",
};

/* One tile's entries in row order, gathered from the host CSR. */
typedef struct kd_tile {
    int32_t tc, th, tw, n;
    uint8_t row[KD_TILED_AREA], col[KD_TILED_AREA];
    int64_t at[KD_TILED_AREA]; /* the entry's position in the CSR arrays */
    int32_t len[KD_TILED_SIZE], colcount[KD_TILED_SIZE], start[KD_TILED_SIZE];
} kd_tile_t;

/* Walks one tile row's 16 CSR rows by tile column (a 16-way merge). */
typedef struct kd_tile_cursor {
    const kd_csr_t *csr;
    int32_t th;
    int64_t pos[KD_TILED_SIZE], end[KD_TILED_SIZE];
} kd_tile_cursor_t;

typedef struct kd_tile_choice {
    int code;
    int32_t nval, nbyte;
} kd_tile_choice_t;

/* The host analysis: the device arrays' contents (see the top of this file). */
typedef struct kd_tiled_host {
    int too_large; /* an int32 offset would overflow: plan SIZE_MAX, upload KD_ETOOLARGE */
    int64_t tiles, chunks, splits, slots, nval, nbyte, sparse_nnz, pulled_tiles;
    int64_t kinds[KD_TILED_KINDS];
    int32_t *chunk_tile, *chunk_row, *chunk_slot, *split_row, *split_slot;
    int32_t *tile_col, *val_off, *byte_off;
    uint8_t *code, *bytes;
    char *values;
    int32_t *sparse_ptr, *sparse_col; /* NULL when nothing is pulled out */
    char *sparse_val;
} kd_tiled_host_t;

/* Pass 1's record of a tile (in merge order). */
typedef struct kd_tile_note {
    int32_t tc, nval, nbyte;
    int16_t n;
    uint8_t code;
} kd_tile_note_t;

static void kd_tile_cursor_begin(kd_tile_cursor_t *cur, const kd_csr_t *csr, int64_t tr)
{
    int64_t r0 = tr * KD_TILED_SIZE;
    cur->csr = csr;
    cur->th = (int32_t)(csr->rows - r0 < KD_TILED_SIZE ? csr->rows - r0 : KD_TILED_SIZE);
    for (int i = 0; i < cur->th; i++) {
        cur->pos[i] = csr->indptr[r0 + i];
        cur->end[i] = csr->indptr[r0 + i + 1];
    }
}

/* The next tile of the tile row into t; 0 when the tile row has no more. */
static int kd_tile_next(kd_tile_cursor_t *cur, kd_tile_t *t)
{
    const kd_csr_t *csr = cur->csr;
    int32_t tc = INT32_MAX;
    for (int i = 0; i < cur->th; i++)
        if (cur->pos[i] < cur->end[i] && csr->indices[cur->pos[i]] / KD_TILED_SIZE < tc)
            tc = csr->indices[cur->pos[i]] / KD_TILED_SIZE;
    if (tc == INT32_MAX)
        return 0;
    int64_t c0 = (int64_t)tc * KD_TILED_SIZE;
    t->tc = tc;
    t->th = cur->th;
    t->tw = (int32_t)(csr->cols - c0 < KD_TILED_SIZE ? csr->cols - c0 : KD_TILED_SIZE);
    t->n = 0;
    memset(t->colcount, 0, sizeof(t->colcount));
    for (int i = 0; i < cur->th; i++) {
        t->start[i] = t->n;
        for (; cur->pos[i] < cur->end[i] && csr->indices[cur->pos[i]] < c0 + KD_TILED_SIZE;
             cur->pos[i]++) {
            int c = (int)(csr->indices[cur->pos[i]] - c0);
            t->row[t->n] = (uint8_t)i;
            t->col[t->n] = (uint8_t)c;
            t->at[t->n++] = cur->pos[i];
            t->colcount[c]++;
        }
        t->len[i] = t->n - t->start[i];
    }
    return 1;
}

static int32_t kd_half(int32_t n)
{
    return (n + 1) / 2;
}

static void kd_tile_consider(kd_tile_choice_t *best, size_t v, int kind, int w, int32_t nval,
                             int32_t nbyte)
{
    size_t bytes = (size_t)nval * v + (size_t)nbyte;
    if (best->code < 0 || bytes < (size_t)best->nval * v + (size_t)best->nbyte) {
        best->code = kind | w << KD_TILED_KIND_BITS;
        best->nval = nval;
        best->nbyte = nbyte;
    }
}

/* The per-tile choice (see the top of this file), in tie order. */
static kd_tile_choice_t kd_tile_choose(const kd_tile_t *t, size_t v)
{
    kd_tile_choice_t best = {.code = -1};
    int32_t full_rows = 0, part_rows = 0, full_cols = 0, part_cols = 0, longest = 0;
    for (int r = 0; r < t->th; r++) {
        full_rows += t->len[r] == t->tw;
        part_rows += t->len[r] > 0 && t->len[r] < t->tw;
        longest = t->len[r] > longest ? t->len[r] : longest;
    }
    for (int c = 0; c < t->tw; c++) {
        full_cols += t->colcount[c] == t->th;
        part_cols += t->colcount[c] > 0 && t->colcount[c] < t->th;
    }
    if (t->n == t->th * t->tw)
        kd_tile_consider(&best, v, KD_TILED_DENSE, 0, t->n, 0);
    if (part_rows == 0)
        kd_tile_consider(&best, v, KD_TILED_DENSE_ROW, 0, full_rows * t->tw, full_rows);
    if (part_cols == 0)
        kd_tile_consider(&best, v, KD_TILED_DENSE_COL, 0, full_cols * t->th, full_cols);
    if (longest < KD_TILED_SIZE)
        kd_tile_consider(&best, v, KD_TILED_ELL, longest, longest * t->th,
                         kd_half(t->th) + kd_half(longest * t->th));
    if (t->n < KD_TILED_AREA)
        kd_tile_consider(&best, v, KD_TILED_CSR, 0, t->n, t->th + kd_half(t->n));
    kd_tile_consider(&best, v, KD_TILED_COO, 0, t->n, t->n);
    for (int32_t w = 1; w < longest && w < KD_TILED_SIZE; w++) {
        int32_t over = 0;
        for (int r = 0; r < t->th; r++)
            over += t->len[r] > w ? t->len[r] - w : 0;
        kd_tile_consider(&best, v, KD_TILED_HYB, w, w * t->th + over,
                         kd_half(t->th) + kd_half(w * t->th) + over);
    }
    return best;
}

static void kd_nibble_set(uint8_t *b, int32_t e, int value)
{
    b[e >> 1] |= (uint8_t)((e & 1) ? value << 4 : value);
}

/* Write tile t in `code`'s layout at b (zeroed) and vals (zeroed: ELL padding stays 0). */
static void kd_tile_fill(const kd_tile_t *t, const kd_csr_t *csr, int code, uint8_t *b, char *vals)
{
    size_t v = kd_dtype_size(csr->dtype);
    const char *src = csr->values;
    int kind = code & KD_TILED_KIND_MASK, w = code >> KD_TILED_KIND_BITS;
    int32_t pos[KD_TILED_SIZE], k = 0, coo = 0;
    if (kind == KD_TILED_DENSE_ROW || kind == KD_TILED_DENSE_COL) {
        for (int i = 0; i < (kind == KD_TILED_DENSE_ROW ? t->th : t->tw); i++) {
            int used = kind == KD_TILED_DENSE_ROW ? t->len[i] > 0 : t->colcount[i] > 0;
            pos[i] = used ? k : -1;
            if (used)
                b[k++] = (uint8_t)i;
        }
    } else if (kind == KD_TILED_ELL || kind == KD_TILED_HYB) {
        for (int r = 0; r < t->th; r++)
            kd_nibble_set(b, r, t->len[r] < w ? t->len[r] : w);
    } else if (kind == KD_TILED_CSR) {
        for (int r = 0; r < t->th; r++)
            b[r] = (uint8_t)t->start[r];
    }
    uint8_t *cols = b + kd_half(t->th);             /* ELL's columns */
    uint8_t *coo_bytes = cols + kd_half(w * t->th); /* HYB's COO part */
    for (int32_t e = 0; e < t->n; e++) {
        int r = t->row[e], c = t->col[e], j = e - t->start[r];
        int32_t slot = e;
        if (kind == KD_TILED_DENSE) {
            slot = r * t->tw + c;
        } else if (kind == KD_TILED_DENSE_ROW) {
            slot = pos[r] * t->tw + c;
        } else if (kind == KD_TILED_DENSE_COL) {
            slot = pos[c] * t->th + r;
        } else if ((kind == KD_TILED_ELL || kind == KD_TILED_HYB) && j < w) {
            slot = j * t->th + r;
            kd_nibble_set(cols, slot, c);
        } else if (kind == KD_TILED_HYB) {
            slot = w * t->th + coo;
            coo_bytes[coo++] = (uint8_t)(r << 4 | c);
        } else if (kind == KD_TILED_CSR) {
            kd_nibble_set(b + t->th, e, c);
        } else {
            b[e] = (uint8_t)(r << 4 | c);
        }
        memcpy(vals + (size_t)slot * v, src + (size_t)t->at[e] * v, v);
    }
}

static void kd_tiled_host_free(void *prepared)
{
    kd_tiled_host_t *p = prepared;
    if (p == NULL)
        return;
    void *arrays[] = {p->chunk_tile, p->chunk_row,  p->chunk_slot, p->split_row, p->split_slot,
                      p->tile_col,   p->val_off,    p->byte_off,   p->code,      p->bytes,
                      p->values,     p->sparse_ptr, p->sparse_col, p->sparse_val};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++)
        free(arrays[i]);
    free(p);
}

/* Pass 1: every tile's choice into *notes (grown as needed), tiles per tile row into
 * tile_ptr (tile rows + 1), entries of small tiles per row into small (rows + 1, counts at
 * [row + 1]); *saved: bytes pulling the small tiles out would save (before row pointers). */
static int kd_tiled_survey(const kd_csr_t *csr, kd_tile_t *t, kd_tile_note_t **notes,
                           int64_t *ntiles, int64_t *tile_ptr, int32_t *small, int64_t *saved)
{
    size_t v = kd_dtype_size(csr->dtype), cap = 0;
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE, n = 0;
    *saved = 0;
    for (int64_t tr = 0; tr < tile_rows; tr++) {
        kd_tile_cursor_t cur;
        kd_tile_cursor_begin(&cur, csr, tr);
        tile_ptr[tr] = n;
        while (kd_tile_next(&cur, t)) {
            if ((size_t)n == cap) {
                cap = cap == 0 ? 1024 : 2 * cap;
                kd_tile_note_t *grown = realloc(*notes, cap * sizeof(**notes));
                if (grown == NULL)
                    return KD_ENOMEM;
                *notes = grown;
            }
            kd_tile_choice_t ch = kd_tile_choose(t, v);
            (*notes)[n++] =
                (kd_tile_note_t){t->tc, ch.nval, ch.nbyte, (int16_t)t->n, (uint8_t)ch.code};
            if (t->n > KD_TILED_PULL_MAX)
                continue;
            *saved += KD_TILED_TILE_BYTES + (int64_t)ch.nval * (int64_t)v + ch.nbyte -
                      (int64_t)t->n * (int64_t)(sizeof(int32_t) + v);
            for (int r = 0; r < t->th; r++)
                small[tr * KD_TILED_SIZE + r + 1] += t->len[r];
        }
    }
    tile_ptr[tile_rows] = n;
    *ntiles = n;
    return KD_OK;
}

/* Offsets, chunks and splits from pass 1's notes; allocates every host array. */
static int kd_tiled_lay_out(const kd_csr_t *csr, kd_tiled_host_t *p, const kd_tile_note_t *notes,
                            const int64_t *tile_ptr, int pull)
{
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE, kept = 0;
    p->chunks = p->splits = p->slots = p->nval = p->nbyte = 0;
    for (int64_t tr = 0; tr < tile_rows; tr++) {
        int64_t k = 0;
        for (int64_t i = tile_ptr[tr]; i < tile_ptr[tr + 1]; i++)
            k += !(pull && notes[i].n <= KD_TILED_PULL_MAX);
        int64_t nch =
            k <= KD_TILED_CHUNK_TILES ? 1 : (k + KD_TILED_CHUNK_TILES - 1) / KD_TILED_CHUNK_TILES;
        p->chunks += nch;
        p->splits += nch > 1;
        p->slots += nch > 1 ? nch : 0;
        kept += k;
    }
    for (int64_t i = 0; i < tile_ptr[tile_rows]; i++) {
        if (pull && notes[i].n <= KD_TILED_PULL_MAX)
            continue;
        p->nval += notes[i].nval;
        p->nbyte += notes[i].nbyte;
        p->kinds[notes[i].code & KD_TILED_KIND_MASK]++;
    }
    p->tiles = kept;
    p->pulled_tiles = tile_ptr[tile_rows] - kept;
    if (p->nval > INT32_MAX || p->nbyte > INT32_MAX || p->chunks * KD_TILED_LANES > INT32_MAX ||
        p->slots * KD_TILED_SIZE > INT32_MAX) {
        p->too_large = 1;
        return KD_OK;
    }
    size_t v = kd_dtype_size(csr->dtype);
    p->chunk_tile = malloc(((size_t)p->chunks + 1) * sizeof(int32_t));
    p->chunk_row = malloc((size_t)p->chunks * sizeof(int32_t) + 1);
    p->chunk_slot = malloc((size_t)p->chunks * sizeof(int32_t) + 1);
    p->split_row = malloc((size_t)p->splits * sizeof(int32_t) + 1);
    p->split_slot = malloc(((size_t)p->splits + 1) * sizeof(int32_t));
    p->tile_col = malloc((size_t)kept * sizeof(int32_t) + 1);
    p->code = malloc((size_t)kept + 1);
    p->val_off = malloc(((size_t)kept + 1) * sizeof(int32_t));
    p->byte_off = malloc(((size_t)kept + 1) * sizeof(int32_t));
    p->values = calloc((size_t)p->nval + 1, v);
    p->bytes = calloc((size_t)p->nbyte + 1, 1);
    if (p->chunk_tile == NULL || p->chunk_row == NULL || p->chunk_slot == NULL ||
        p->split_row == NULL || p->split_slot == NULL || p->tile_col == NULL || p->code == NULL ||
        p->val_off == NULL || p->byte_off == NULL || p->values == NULL || p->bytes == NULL)
        return KD_ENOMEM;
    int64_t c = 0, s = 0, slot = 0, j = 0;
    p->val_off[0] = p->byte_off[0] = 0;
    p->split_slot[0] = 0;
    for (int64_t tr = 0; tr < tile_rows; tr++) {
        int64_t first = j;
        for (int64_t i = tile_ptr[tr]; i < tile_ptr[tr + 1]; i++) {
            if (pull && notes[i].n <= KD_TILED_PULL_MAX)
                continue;
            p->tile_col[j] = notes[i].tc;
            p->code[j] = notes[i].code;
            p->val_off[j + 1] = p->val_off[j] + notes[i].nval;
            p->byte_off[j + 1] = p->byte_off[j] + notes[i].nbyte;
            j++;
        }
        int split = j - first > KD_TILED_CHUNK_TILES;
        for (int64_t at = first; at == first || at < j; at += KD_TILED_CHUNK_TILES, c++) {
            p->chunk_tile[c] = (int32_t)at;
            p->chunk_row[c] = (int32_t)tr;
            p->chunk_slot[c] = split ? (int32_t)slot++ : -1;
        }
        if (split) {
            p->split_row[s] = (int32_t)tr;
            p->split_slot[++s] = (int32_t)slot;
        }
    }
    p->chunk_tile[c] = (int32_t)j;
    return KD_OK;
}

/* Pass 2: the tiles' bytes and values, and the pulled-out entries into the CSR part. */
static void kd_tiled_fill(const kd_csr_t *csr, kd_tiled_host_t *p, kd_tile_t *t,
                          const kd_tile_note_t *notes)
{
    size_t v = kd_dtype_size(csr->dtype);
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE, i = 0, j = 0;
    for (int64_t tr = 0; tr < tile_rows; tr++) {
        kd_tile_cursor_t cur;
        int64_t next[KD_TILED_SIZE];
        kd_tile_cursor_begin(&cur, csr, tr);
        for (int r = 0; r < cur.th && p->sparse_ptr != NULL; r++)
            next[r] = p->sparse_ptr[tr * KD_TILED_SIZE + r];
        for (; kd_tile_next(&cur, t); i++) {
            if (p->sparse_ptr == NULL || notes[i].n > KD_TILED_PULL_MAX) {
                kd_tile_fill(t, csr, notes[i].code, p->bytes + p->byte_off[j],
                             p->values + (size_t)p->val_off[j] * v);
                j++;
                continue;
            }
            for (int32_t e = 0; e < t->n; e++) {
                int64_t at = next[t->row[e]]++;
                p->sparse_col[at] = (int32_t)(t->tc * KD_TILED_SIZE + t->col[e]);
                memcpy(p->sparse_val + (size_t)at * v, (const char *)csr->values + t->at[e] * v, v);
            }
        }
    }
}

static int kd_tiled_prepare(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    size_t v = kd_dtype_size(csr->dtype);
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE, ntiles = 0, saved = 0;
    kd_tiled_host_t *p = calloc(1, sizeof(*p));
    kd_tile_t *t = malloc(sizeof(*t));
    kd_tile_note_t *notes = NULL;
    int64_t *tile_ptr = malloc(((size_t)tile_rows + 1) * sizeof(int64_t));
    int32_t *small = calloc((size_t)csr->rows + 1, sizeof(int32_t));
    int rc = KD_ENOMEM;
    if (p == NULL || t == NULL || tile_ptr == NULL || small == NULL)
        goto done;
    if ((rc = kd_tiled_survey(csr, t, &notes, &ntiles, tile_ptr, small, &saved)) != KD_OK)
        goto done;
    int pull = saved > (csr->rows + 1) * (int64_t)sizeof(int32_t);
    if ((rc = kd_tiled_lay_out(csr, p, notes, tile_ptr, pull)) != KD_OK || p->too_large)
        goto done;
    if (pull) {
        for (int64_t r = 0; r < csr->rows; r++)
            small[r + 1] += small[r];
        p->sparse_nnz = small[csr->rows];
        p->sparse_ptr = small;
        small = NULL;
        p->sparse_col = malloc((size_t)p->sparse_nnz * sizeof(int32_t) + 1);
        p->sparse_val = malloc((size_t)p->sparse_nnz * v + 1);
        if (p->sparse_col == NULL || p->sparse_val == NULL) {
            rc = KD_ENOMEM;
            goto done;
        }
    }
    kd_tiled_fill(csr, p, t, notes);
done:
    free(t);
    free(notes);
    free(tile_ptr);
    free(small);
    if (rc != KD_OK) {
        kd_tiled_host_free(p);
        return rc;
    }
    src->prepared[KD_FMT_TILED] = p;
    return KD_OK;
}

/* ---- device side -------------------------------------------------------------------------- */

enum {
    KD_TILED_CHUNK_TILE,
    KD_TILED_CHUNK_ROW,
    KD_TILED_CHUNK_SLOT,
    KD_TILED_SPLIT_ROW,
    KD_TILED_SPLIT_SLOT,
    KD_TILED_PARTIAL,
    KD_TILED_TILE_COL,
    KD_TILED_TILE_CODE,
    KD_TILED_VAL_OFF,
    KD_TILED_BYTE_OFF,
    KD_TILED_VALUES,
    KD_TILED_BYTES,
    KD_TILED_MEMS
};

typedef struct kd_tiled {
    cl_mem mem[KD_TILED_MEMS];
    kd_format_csr_t sparse; /* indptr NULL when nothing is pulled out */
    int64_t chunks, splits, sparse_nnz, pulled_tiles;
    int64_t kinds[KD_TILED_KINDS];
} kd_tiled_t;

/* Each device array's host source and size in bytes (NULL source: allocated, not copied). */
static void kd_tiled_arrays(const kd_tiled_host_t *p, const kd_csr_t *csr,
                            const void *host[KD_TILED_MEMS], size_t bytes[KD_TILED_MEMS])
{
    size_t v = kd_dtype_size(csr->dtype), i32 = sizeof(int32_t);
    size_t split_ptr = p->splits > 0 ? (size_t)p->splits + 1 : 0;
    const void *h[KD_TILED_MEMS] = {p->chunk_tile, p->chunk_row, p->chunk_slot, p->split_row,
                                    p->split_slot, NULL,         p->tile_col,   p->code,
                                    p->val_off,    p->byte_off,  p->values,     p->bytes};
    size_t b[KD_TILED_MEMS] = {((size_t)p->chunks + 1) * i32,
                               (size_t)p->chunks * i32,
                               (size_t)p->chunks * i32,
                               (size_t)p->splits * i32,
                               split_ptr * i32,
                               (size_t)p->slots * KD_TILED_SIZE * v,
                               (size_t)p->tiles * i32,
                               (size_t)p->tiles,
                               ((size_t)p->tiles + 1) * i32,
                               ((size_t)p->tiles + 1) * i32,
                               (size_t)p->nval * v,
                               (size_t)p->nbyte};
    memcpy(host, h, sizeof(h));
    memcpy(bytes, b, sizeof(b));
}

static size_t kd_tiled_sparse_bytes(const kd_tiled_host_t *p, const kd_csr_t *csr)
{
    if (p->sparse_ptr == NULL)
        return 0;
    return ((size_t)csr->rows + 1) * sizeof(int32_t) +
           (size_t)p->sparse_nnz * (sizeof(int32_t) + kd_dtype_size(csr->dtype));
}

static const kd_tiled_host_t *kd_tiled_prepared(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    if (src->prepared[KD_FMT_TILED] == NULL && kd_tiled_prepare(ocl, src) != KD_OK)
        return NULL;
    return src->prepared[KD_FMT_TILED];
}

static size_t kd_tiled_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_tiled_host_t *p = kd_tiled_prepared(ocl, src);
    if (p == NULL || p->too_large)
        return SIZE_MAX;
    const void *host[KD_TILED_MEMS];
    size_t bytes[KD_TILED_MEMS], total = kd_tiled_sparse_bytes(p, src->csr);
    kd_tiled_arrays(p, src->csr, host, bytes);
    for (int i = 0; i < KD_TILED_MEMS; i++)
        total += bytes[i];
    return total;
}

static void kd_tiled_release(kd_matrix_t *m)
{
    kd_tiled_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_format_release_mems(impl->mem, KD_TILED_MEMS);
    kd_format_release_csr(&impl->sparse);
    free(impl);
    m->impl = NULL;
}

static int kd_tiled_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    static const char *const what[KD_TILED_MEMS] = {
        "tiled chunk tiles",   "tiled chunk rows",   "tiled chunk slots",  "tiled split rows",
        "tiled split slots",   "tiled partials",     "tiled tile columns", "tiled tile codes",
        "tiled value offsets", "tiled byte offsets", "tiled values",       "tiled index bytes"};
    const kd_csr_t *csr = src->csr;
    if (kd_ocl_work_group_size(ocl) < KD_TILED_LANES)
        return kd_err_set(err, KD_EUNSUPPORTED, "tiled needs work-groups of %d work-items",
                          KD_TILED_LANES);
    kd_tiled_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    const kd_tiled_host_t *p = kd_tiled_prepared(ocl, src);
    if (p == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory analysing the tiles");
    if (p->too_large)
        return kd_err_set(err, KD_ETOOLARGE, "tiled offsets do not fit in 32 bits");
    const void *host[KD_TILED_MEMS];
    size_t bytes[KD_TILED_MEMS];
    kd_tiled_arrays(p, csr, host, bytes);
    int rc = KD_OK;
    for (int i = 0; i < KD_TILED_MEMS && rc == KD_OK; i++)
        rc = host[i] != NULL
                 ? kd_format_upload_array(ocl, m, host[i], bytes[i], what[i], &impl->mem[i], err)
                 : kd_format_alloc_array(ocl, m, bytes[i], what[i], &impl->mem[i], err);
    if (rc == KD_OK && p->sparse_ptr != NULL) {
        size_t n = (size_t)p->sparse_nnz;
        rc = kd_format_upload_array(ocl, m, p->sparse_ptr, ((size_t)csr->rows + 1) * 4,
                                    "tiled sparse row pointers", &impl->sparse.indptr, err);
        if (rc == KD_OK)
            rc = kd_format_upload_array(ocl, m, p->sparse_col, n * sizeof(int32_t),
                                        "tiled sparse columns", &impl->sparse.indices, err);
        if (rc == KD_OK)
            rc = kd_format_upload_array(ocl, m, p->sparse_val, n * kd_dtype_size(csr->dtype),
                                        "tiled sparse values", &impl->sparse.values, err);
    }
    impl->chunks = p->chunks;
    impl->splits = p->splits;
    impl->sparse_nnz = p->sparse_nnz;
    impl->pulled_tiles = p->pulled_tiles;
    memcpy(impl->kinds, p->kinds, sizeof(impl->kinds));
    return rc;
}

static int kd_tiled_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_tiled_t *impl = m->impl;
    const cl_mem *a = impl->mem;
    size_t wg = kd_ocl_work_group_size(ocl);
    char options[64];
    kd_format_options(ocl, NULL, options, sizeof(options));
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, "tiled", m->dtype, options, "kd_tiled_spmv", &kernel, err);
    if (rc != KD_OK)
        return rc;
    rc = kd_ocl_run(
        ocl, kernel, "kd_tiled_spmv",
        kd_ocl_range_1d(kd_format_round_up((size_t)impl->chunks * KD_TILED_LANES, wg), wg),
        KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(m->cols), KD_ARG_INT(impl->chunks),
                KD_ARG_MEM(a[KD_TILED_CHUNK_TILE]), KD_ARG_MEM(a[KD_TILED_CHUNK_ROW]),
                KD_ARG_MEM(a[KD_TILED_CHUNK_SLOT]), KD_ARG_MEM(a[KD_TILED_TILE_COL]),
                KD_ARG_MEM(a[KD_TILED_TILE_CODE]), KD_ARG_MEM(a[KD_TILED_VAL_OFF]),
                KD_ARG_MEM(a[KD_TILED_BYTE_OFF]), KD_ARG_MEM(a[KD_TILED_VALUES]),
                KD_ARG_MEM(a[KD_TILED_BYTES]), KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem),
                KD_ARG_MEM(a[KD_TILED_PARTIAL]), KD_ARG_VALUE(m->dtype, alpha),
                KD_ARG_VALUE(m->dtype, beta)),
        NULL, err);
    if (rc == KD_OK && impl->splits > 0)
        rc = kd_ocl_kernel(ocl, "tiled", m->dtype, options, "kd_tiled_reduce", &kernel, err);
    if (rc == KD_OK && impl->splits > 0)
        rc = kd_ocl_run(
            ocl, kernel, "kd_tiled_reduce",
            kd_ocl_range_1d(kd_format_round_up((size_t)impl->splits * KD_TILED_SIZE, wg), wg),
            KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(impl->splits),
                    KD_ARG_MEM(a[KD_TILED_SPLIT_ROW]), KD_ARG_MEM(a[KD_TILED_SPLIT_SLOT]),
                    KD_ARG_MEM(a[KD_TILED_PARTIAL]), KD_ARG_MEM(y->mem),
                    KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
            NULL, err);
    if (rc != KD_OK || impl->sparse.indptr == NULL)
        return rc;
    /* the pulled-out entries: csr_scalar's kernel with beta = 1 adds them to the tiles' result */
    kd_matrix_t sparse = {.rows = m->rows,
                          .cols = m->cols,
                          .nnz = impl->sparse_nnz,
                          .dtype = m->dtype,
                          .format = KD_FMT_CSR_SCALAR,
                          .impl = (void *)&impl->sparse};
    return kd_format_csr_scalar_ops.spmv(ocl, &sparse, alpha, x, 1.0, y, err);
}

static void kd_tiled_describe(const kd_matrix_t *m, kd_format_detail_t *out)
{
    const kd_tiled_t *impl = m->impl;
    memset(out, 0, sizeof(*out));
    if (impl == NULL)
        return;
    for (int k = 0; k < KD_TILED_KINDS; k++)
        kd_format_detail_add(out, kd_tiled_kind_names[k], impl->kinds[k]);
    kd_format_detail_add(out, "pulled_tiles", impl->pulled_tiles);
    kd_format_detail_add(out, "pulled_nnz", impl->sparse_nnz);
    kd_format_detail_add(out, "split_tile_rows", impl->splits);
}

const kd_format_ops_t kd_format_tiled_ops = {
    .format = KD_FMT_TILED,
    .prepare = kd_tiled_prepare,
    .prepared_free = kd_tiled_host_free,
    .plan_bytes = kd_tiled_plan_bytes,
    .upload = kd_tiled_upload,
    .spmv = kd_tiled_spmv,
    .release = kd_tiled_release,
    .describe = kd_tiled_describe,
};
