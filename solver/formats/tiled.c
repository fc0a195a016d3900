/*
 * Tiled (TileSpMV, Niu et al., IPDPS 2021): the matrix cut into 16 x 16 tiles, each stored in
 * whichever of seven small formats takes the fewest bytes for its structure, with 4-bit in-tile
 * rows and columns, so indices cost about a byte an entry (CSR: four). kernels/formats/tiled.cl has
 * the thread mapping; kernels/formats/tiled_abi.h the tile codes.
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
 *   pulled (CSR), long part              the entries of tiles with at most KD_TILED_PULL_MAX
 *                                       entries, when pulling them out saves bytes: rows of at
 *                                       most KD_TILED_LONG_ROW of them in a CSR part the tile
 *                                       kernel adds per row; longer rows in a csr_adaptive matrix
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
 * tiles are pulled out only when the bytes they save exceed that. The tile kernel adds a row's
 * pulled entries (one lane a row); rows with more than KD_TILED_LONG_ROW (a power-law matrix's
 * hubs) go to a csr_adaptive matrix run after it (y += alpha * A_long * x), so no lane walks a
 * row of thousands.
 *
 * The analysis (the prepare op) walks the host CSR twice, O(nnz + 16 * tiles): a 16-way merge of
 * each tile row's rows by tile column, choosing each tile's kind, then filling the arrays. Both
 * passes are cut by tile rows into slices of about equal nnz, one thread each
 * (common/slices.h), and the slices' notes join in tile-row order, so the arrays are the same
 * whatever the thread count. Before it the selection runs the screen op: the same analysis on
 * KD_TILED_SAMPLES tile rows drawn one per stratum, which drops the format unanalysed when its
 * tiles would not save KD_TILED_MIN_SAVING of CSR's bytes (random matrices: tiles of 1-3 entries).
 */
#include "kernels/formats/tiled_abi.h"
#include "solver/formats/format.h"
#include "common/slices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_TILED_PULL_MAX 4
#define KD_TILED_TILE_BYTES 13 /* column, value offset, byte offset (int32 each) and the code */
#define KD_TILED_AREA (KD_TILED_SIZE * KD_TILED_SIZE)
#define KD_TILED_LONG_ROW 32 /* pulled entries a row beyond which csr_adaptive adds the row */
#define KD_TILED_SAMPLES 256 /* tile rows the screen analyses */
/* The screen's bar: this fraction of CSR's bytes saved. The kernel is latency-bound (a lane walks
 * a row's tiles one after another, bench/NOTES.md "tiled on the H100"): on the H100 it lost to
 * csr_scalar by 2.2-2.4x on the Laplacians (20% fewer bytes) and to ellpack_r by 1.17x on
 * 16 x 16 dense blocks in float64 (34% fewer), while its analysis put those selections 3-5x over
 * their budget. So it is measured only where tiles save nearly half the bytes: dense blocks in
 * float32 (51%). */
#define KD_TILED_MIN_SAVING 0.45

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
    int64_t tiles, chunks, splits, slots, nval, nbyte, pulled_nnz, long_nnz, pulled_tiles;
    int64_t kinds[KD_TILED_KINDS];
    int32_t *chunk_tile, *chunk_row, *chunk_slot, *split_row, *split_slot;
    int32_t *tile_col, *val_off, *byte_off;
    uint8_t *code, *bytes;
    char *values;
    int32_t *pulled_ptr, *pulled_col; /* NULL when nothing is pulled out */
    char *pulled_val;
    kd_csr_t *long_csr;          /* the pulled rows of more than KD_TILED_LONG_ROW; or NULL */
    kd_format_source_t long_src; /* its csr_adaptive row blocks (prepared[CSR_ADAPTIVE]) */
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
                      p->values,     p->pulled_ptr, p->pulled_col, p->pulled_val};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); i++)
        free(arrays[i]);
    kd_format_csr_adaptive_ops.prepared_free(p->long_src.prepared[KD_FMT_CSR_ADAPTIVE]);
    kd_csr_free(p->long_csr);
    free(p);
}

/* Tile rows [tr0, tr1): pass 1's and pass 2's share of one analysis thread. */
typedef struct kd_tiled_slice {
    const kd_csr_t *csr;
    int64_t tr0, tr1;
    /* pass 1 (survey): notes of the slice's tiles, tile_ptr relative to the slice's first */
    kd_tile_note_t *notes;
    int64_t n, cap, saved;
    int64_t *tile_ptr;
    int32_t *small;
    int rc;
    /* pass 2 (fill) */
    kd_tiled_host_t *p;
    const kd_tile_note_t *all_notes;
    const int64_t *all_tile_ptr, *kept_ptr;
} kd_tiled_slice_t;

/* Pass 1 over one slice: every tile's choice into notes (grown as needed), tiles per tile row
 * into tile_ptr, entries of small tiles per row into small (counts at [row + 1]); saved: bytes
 * pulling the small tiles out would save (before row pointers). */
static void *kd_tiled_survey(void *arg)
{
    kd_tiled_slice_t *sl = arg;
    const kd_csr_t *csr = sl->csr;
    size_t v = kd_dtype_size(csr->dtype);
    kd_tile_t t;
    sl->n = sl->cap = sl->saved = 0;
    sl->rc = KD_OK;
    for (int64_t tr = sl->tr0; tr < sl->tr1; tr++) {
        kd_tile_cursor_t cur;
        kd_tile_cursor_begin(&cur, csr, tr);
        sl->tile_ptr[tr] = sl->n;
        while (kd_tile_next(&cur, &t)) {
            if (sl->n == sl->cap) {
                sl->cap = sl->cap == 0 ? 1024 : 2 * sl->cap;
                kd_tile_note_t *grown = realloc(sl->notes, (size_t)sl->cap * sizeof(*grown));
                if (grown == NULL) {
                    sl->rc = KD_ENOMEM;
                    return NULL;
                }
                sl->notes = grown;
            }
            kd_tile_choice_t ch = kd_tile_choose(&t, v);
            sl->notes[sl->n++] =
                (kd_tile_note_t){t.tc, ch.nval, ch.nbyte, (int16_t)t.n, (uint8_t)ch.code};
            if (t.n > KD_TILED_PULL_MAX)
                continue;
            sl->saved += KD_TILED_TILE_BYTES + (int64_t)ch.nval * (int64_t)v + ch.nbyte -
                         (int64_t)t.n * (int64_t)(sizeof(int32_t) + v);
            for (int r = 0; r < t.th; r++)
                sl->small[tr * KD_TILED_SIZE + r + 1] += t.len[r];
        }
    }
    return NULL;
}

/* Pass 1 over every slice, the notes joined in tile-row order into *notes. */
static int kd_tiled_survey_all(const kd_csr_t *csr, int n, kd_tiled_slice_t *sl,
                               kd_tile_note_t **notes, int64_t *tile_ptr, int32_t *small,
                               int64_t *saved)
{
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE, total = 0;
    for (int i = 0; i < n; i++) {
        sl[i].tile_ptr = tile_ptr;
        sl[i].small = small;
    }
    kd_slices_run(kd_tiled_survey, sl, sizeof(sl[0]), n);
    *saved = 0;
    for (int i = 0; i < n; i++) {
        if (sl[i].rc != KD_OK)
            return sl[i].rc;
        total += sl[i].n;
        *saved += sl[i].saved;
    }
    *notes = malloc((size_t)total * sizeof(**notes) + 1);
    if (*notes == NULL)
        return KD_ENOMEM;
    total = 0;
    for (int i = 0; i < n; i++) {
        if (sl[i].n > 0)
            memcpy(*notes + total, sl[i].notes, (size_t)sl[i].n * sizeof(**notes));
        for (int64_t tr = sl[i].tr0; tr < sl[i].tr1; tr++)
            tile_ptr[tr] += total;
        total += sl[i].n;
    }
    tile_ptr[tile_rows] = total;
    return KD_OK;
}

/* Offsets, chunks and splits from pass 1's notes; allocates every host array but the pulled
 * parts'; kept_ptr: kept tiles before each tile row (tile rows + 1). */
static int kd_tiled_lay_out(const kd_csr_t *csr, kd_tiled_host_t *p, const kd_tile_note_t *notes,
                            const int64_t *tile_ptr, int pull, int64_t *kept_ptr)
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
        kept_ptr[tr] = kept;
        kept += k;
    }
    kept_ptr[tile_rows] = kept;
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

/* Pass 2 over one slice: the tiles' bytes and values, and the pulled-out entries into the
 * pulled part (rows of at most KD_TILED_LONG_ROW of them) or the long part. */
static void *kd_tiled_fill(void *arg)
{
    kd_tiled_slice_t *sl = arg;
    const kd_csr_t *csr = sl->csr;
    kd_tiled_host_t *p = sl->p;
    const kd_tile_note_t *notes = sl->all_notes;
    size_t v = kd_dtype_size(csr->dtype);
    int64_t i = sl->all_tile_ptr[sl->tr0], j = sl->kept_ptr[sl->tr0];
    kd_tile_t t;
    for (int64_t tr = sl->tr0; tr < sl->tr1; tr++) {
        kd_tile_cursor_t cur;
        int64_t next[KD_TILED_SIZE];
        int is_long[KD_TILED_SIZE];
        kd_tile_cursor_begin(&cur, csr, tr);
        for (int r = 0; r < cur.th && p->pulled_ptr != NULL; r++) {
            int64_t row = tr * KD_TILED_SIZE + r;
            is_long[r] =
                p->long_csr != NULL && p->long_csr->indptr[row + 1] > p->long_csr->indptr[row];
            next[r] = is_long[r] ? p->long_csr->indptr[row] : p->pulled_ptr[row];
        }
        for (; kd_tile_next(&cur, &t); i++) {
            if (p->pulled_ptr == NULL || notes[i].n > KD_TILED_PULL_MAX) {
                kd_tile_fill(&t, csr, notes[i].code, p->bytes + p->byte_off[j],
                             p->values + (size_t)p->val_off[j] * v);
                j++;
                continue;
            }
            for (int32_t e = 0; e < t.n; e++) {
                int r = t.row[e];
                int64_t at = next[r]++;
                int32_t col = (int32_t)(t.tc * KD_TILED_SIZE + t.col[e]);
                const char *val = (const char *)csr->values + t.at[e] * v;
                if (is_long[r]) {
                    p->long_csr->indices[at] = col;
                    memcpy((char *)p->long_csr->values + (size_t)at * v, val, v);
                } else {
                    p->pulled_col[at] = col;
                    memcpy(p->pulled_val + (size_t)at * v, val, v);
                }
            }
        }
    }
    return NULL;
}

/* The pulled-out entries' two CSR parts from the per-row counts in small (at [row + 1]): rows
 * of more than KD_TILED_LONG_ROW go to the long part (every row of it but those empty), the
 * others to the pulled part; allocates both. */
static int kd_tiled_split_pulled(const kd_csr_t *csr, kd_tiled_host_t *p, int32_t *small)
{
    size_t v = kd_dtype_size(csr->dtype);
    int64_t nlong = 0, nshort = 0;
    p->pulled_ptr = small; /* p's from here on, freed with it on every path */
    for (int64_t r = 0; r < csr->rows; r++)
        if (small[r + 1] > KD_TILED_LONG_ROW)
            nlong += small[r + 1];
    if (nlong > 0) {
        p->long_csr = calloc(1, sizeof(*p->long_csr));
        if (p->long_csr == NULL)
            return KD_ENOMEM;
        *p->long_csr =
            (kd_csr_t){.rows = csr->rows, .cols = csr->cols, .nnz = nlong, .dtype = csr->dtype};
        p->long_csr->indptr = malloc(((size_t)csr->rows + 1) * sizeof(int32_t));
        p->long_csr->indices = malloc((size_t)nlong * sizeof(int32_t));
        p->long_csr->values = malloc((size_t)nlong * v);
        if (p->long_csr->indptr == NULL || p->long_csr->indices == NULL ||
            p->long_csr->values == NULL)
            return KD_ENOMEM;
        p->long_csr->indptr[0] = 0;
    }
    nlong = 0;
    for (int64_t r = 0; r < csr->rows; r++) {
        int32_t n = small[r + 1];
        int is_long = n > KD_TILED_LONG_ROW;
        small[r] = (int32_t)nshort;
        nshort += is_long ? 0 : n;
        nlong += is_long ? n : 0;
        if (p->long_csr != NULL)
            p->long_csr->indptr[r + 1] = (int32_t)nlong;
    }
    small[csr->rows] = (int32_t)nshort;
    p->pulled_nnz = nshort;
    p->long_nnz = nlong;
    p->pulled_col = malloc((size_t)nshort * sizeof(int32_t) + 1);
    p->pulled_val = malloc((size_t)nshort * v + 1);
    if (p->pulled_col == NULL || p->pulled_val == NULL)
        return KD_ENOMEM;
    return KD_OK;
}

/* The long part's row blocks (csr_adaptive's host plan), so upload makes no host pass. */
static int kd_tiled_prepare_long(const kd_ocl_t *ocl, kd_tiled_host_t *p)
{
    if (p->long_csr == NULL)
        return KD_OK;
    kd_format_source_init(&p->long_src, p->long_csr);
    return kd_format_csr_adaptive_ops.prepare(ocl, &p->long_src);
}

static int kd_tiled_prepare(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE, saved = 0;
    kd_tiled_slice_t sl[KD_SLICES_MAX];
    int64_t bounds[KD_SLICES_MAX + 1];
    int n = kd_slices_count(csr->nnz);
    kd_slices_rows(csr, n, KD_TILED_SIZE, bounds); /* cut between tile rows */
    memset(sl, 0, sizeof(sl));
    for (int i = 0; i < n; i++) {
        sl[i].csr = csr;
        sl[i].tr0 = bounds[i] / KD_TILED_SIZE;
        sl[i].tr1 = (bounds[i + 1] + KD_TILED_SIZE - 1) / KD_TILED_SIZE;
    }
    kd_tiled_host_t *p = calloc(1, sizeof(*p));
    kd_tile_note_t *notes = NULL;
    int64_t *tile_ptr = malloc(((size_t)tile_rows + 1) * sizeof(int64_t));
    int64_t *kept_ptr = malloc(((size_t)tile_rows + 1) * sizeof(int64_t));
    int32_t *small = calloc((size_t)csr->rows + 1, sizeof(int32_t));
    int rc = KD_ENOMEM;
    if (p == NULL || tile_ptr == NULL || kept_ptr == NULL || small == NULL)
        goto done;
    if ((rc = kd_tiled_survey_all(csr, n, sl, &notes, tile_ptr, small, &saved)) != KD_OK)
        goto done;
    int pull = saved > (csr->rows + 1) * (int64_t)sizeof(int32_t);
    if ((rc = kd_tiled_lay_out(csr, p, notes, tile_ptr, pull, kept_ptr)) != KD_OK || p->too_large)
        goto done;
    if (pull) {
        rc = kd_tiled_split_pulled(csr, p, small);
        small = NULL; /* p->pulled_ptr */
        if (rc != KD_OK)
            goto done;
    }
    for (int i = 0; i < n; i++)
        sl[i] = (kd_tiled_slice_t){.csr = csr,
                                   .tr0 = sl[i].tr0,
                                   .tr1 = sl[i].tr1,
                                   .p = p,
                                   .all_notes = notes,
                                   .all_tile_ptr = tile_ptr,
                                   .kept_ptr = kept_ptr,
                                   .notes = sl[i].notes};
    kd_slices_run(kd_tiled_fill, sl, sizeof(sl[0]), n);
    rc = kd_tiled_prepare_long(ocl, p);
done:
    for (int i = 0; i < n; i++)
        free(sl[i].notes);
    free(notes);
    free(tile_ptr);
    free(kept_ptr);
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
    kd_format_csr_t pulled; /* indptr NULL when nothing is pulled out */
    kd_matrix_t long_part;  /* csr_adaptive over the long pulled rows; impl NULL when none */
    int64_t chunks, splits, pulled_nnz, long_nnz, pulled_tiles;
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

/* Device bytes of the pulled part and the long part (csr_adaptive's plan). */
static size_t kd_tiled_pulled_bytes(const kd_ocl_t *ocl, kd_tiled_host_t *p, const kd_csr_t *csr)
{
    if (p->pulled_ptr == NULL)
        return 0;
    size_t total = ((size_t)csr->rows + 1) * sizeof(int32_t) +
                   (size_t)p->pulled_nnz * (sizeof(int32_t) + kd_dtype_size(csr->dtype));
    if (p->long_csr != NULL)
        total += kd_format_csr_adaptive_ops.plan_bytes(ocl, &p->long_src);
    return total;
}

static kd_tiled_host_t *kd_tiled_prepared(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    if (src->prepared[KD_FMT_TILED] == NULL && kd_tiled_prepare(ocl, src) != KD_OK)
        return NULL;
    return src->prepared[KD_FMT_TILED];
}

static size_t kd_tiled_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    kd_tiled_host_t *p = kd_tiled_prepared(ocl, src);
    if (p == NULL || p->too_large)
        return SIZE_MAX;
    const void *host[KD_TILED_MEMS];
    size_t bytes[KD_TILED_MEMS], total = kd_tiled_pulled_bytes(ocl, p, src->csr);
    kd_tiled_arrays(p, src->csr, host, bytes);
    for (int i = 0; i < KD_TILED_MEMS; i++)
        total += bytes[i];
    return total;
}

/* The sampled screen (select.c, before plan_bytes and the full analysis): the tiles of up to
 * KD_TILED_SAMPLES tile rows, one drawn at random from each of as many equal strata, costed
 * as the analysis would lay them out (small tiles pulled out when that is cheaper); nonzero
 * with the reason in why when they would not save KD_TILED_MIN_SAVING of those rows' CSR
 * bytes. Deterministic: the draws come from a fixed hash. */
static int kd_tiled_screen(const kd_ocl_t *ocl, kd_format_source_t *src, char *why, size_t cap)
{
    const kd_csr_t *csr = src->csr;
    size_t v = kd_dtype_size(csr->dtype);
    int64_t tile_rows = (csr->rows + KD_TILED_SIZE - 1) / KD_TILED_SIZE;
    int64_t samples = tile_rows < KD_TILED_SAMPLES ? tile_rows : KD_TILED_SAMPLES;
    int64_t tiles = 0, entries = 0, rows = 0, kept = 0, small_tiles = 0, small_entries = 0;
    kd_tile_t t;
    (void)ocl;
    if (csr->nnz == 0)
        return 0;
    for (int64_t k = 0; k < samples; k++) {
        int64_t lo = k * tile_rows / samples, hi = (k + 1) * tile_rows / samples;
        uint64_t hash = (uint64_t)(k + 1) * 0x9e3779b97f4a7c15ull;
        kd_tile_cursor_t cur;
        kd_tile_cursor_begin(&cur, csr, lo + (int64_t)((hash >> 33) % (uint64_t)(hi - lo)));
        rows += cur.th;
        while (kd_tile_next(&cur, &t)) {
            kd_tile_choice_t ch = kd_tile_choose(&t, v);
            int64_t in_tile = KD_TILED_TILE_BYTES + (int64_t)ch.nval * (int64_t)v + ch.nbyte;
            tiles++;
            entries += t.n;
            if (t.n <= KD_TILED_PULL_MAX) {
                small_tiles += in_tile;
                small_entries += t.n;
            } else {
                kept += in_tile;
            }
        }
    }
    int64_t pulled = small_entries * (int64_t)(sizeof(int32_t) + v) + rows * 4;
    int64_t tiled = kept + (pulled < small_tiles ? pulled : small_tiles);
    int64_t csr_bytes = entries * (int64_t)(sizeof(int32_t) + v) + rows * 4;
    if ((double)tiled <= (1.0 - KD_TILED_MIN_SAVING) * (double)csr_bytes)
        return 0;
    snprintf(why, cap, "tiles too sparse (sampled: %.1f entries per tile, %.0f%% of CSR's bytes)",
             tiles > 0 ? (double)entries / (double)tiles : 0.0,
             100.0 * (double)tiled / (double)(csr_bytes > 0 ? csr_bytes : 1));
    return 1;
}

static void kd_tiled_release(kd_matrix_t *m)
{
    kd_tiled_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_format_release_mems(impl->mem, KD_TILED_MEMS);
    kd_format_release_csr(&impl->pulled);
    if (impl->long_part.impl != NULL)
        kd_format_csr_adaptive_ops.release(&impl->long_part);
    free(impl);
    m->impl = NULL;
}

/* The pulled part's arrays, and the long part as a csr_adaptive matrix of its own (built from a
 * source borrowing the host plan; its device bytes count in m's). */
static int kd_tiled_upload_pulled(kd_ocl_t *ocl, const kd_tiled_host_t *p, const kd_csr_t *csr,
                                  kd_matrix_t *m, kd_tiled_t *impl, kd_err_t *err)
{
    size_t n = (size_t)p->pulled_nnz;
    int rc = kd_format_upload_array(ocl, m, p->pulled_ptr, ((size_t)csr->rows + 1) * 4,
                                    "tiled pulled row pointers", &impl->pulled.indptr, err);
    if (rc == KD_OK)
        rc = kd_format_upload_array(ocl, m, p->pulled_col, n * sizeof(int32_t),
                                    "tiled pulled columns", &impl->pulled.indices, err);
    if (rc == KD_OK)
        rc = kd_format_upload_array(ocl, m, p->pulled_val, n * kd_dtype_size(csr->dtype),
                                    "tiled pulled values", &impl->pulled.values, err);
    if (rc != KD_OK || p->long_csr == NULL)
        return rc;
    kd_format_source_t long_src = p->long_src; /* borrows the plan; its device arrays are ours */
    impl->long_part = (kd_matrix_t){.rows = csr->rows,
                                    .cols = csr->cols,
                                    .nnz = p->long_nnz,
                                    .dtype = csr->dtype,
                                    .format = KD_FMT_CSR_ADAPTIVE,
                                    .ops = &kd_format_csr_adaptive_ops};
    rc = kd_format_source_device(ocl, &long_src, err);
    if (rc == KD_OK)
        rc = kd_format_csr_adaptive_ops.upload(ocl, &long_src, &impl->long_part, err);
    m->device_bytes += impl->long_part.device_bytes;
    cl_mem mems[3] = {long_src.indptr, long_src.indices, long_src.values};
    kd_format_release_mems(mems, 3);
    return rc;
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
    if (rc == KD_OK && p->pulled_ptr != NULL)
        rc = kd_tiled_upload_pulled(ocl, p, csr, m, impl, err);
    impl->chunks = p->chunks;
    impl->splits = p->splits;
    impl->pulled_nnz = p->pulled_nnz;
    impl->long_nnz = p->long_nnz;
    impl->pulled_tiles = p->pulled_tiles;
    memcpy(impl->kinds, p->kinds, sizeof(impl->kinds));
    return rc;
}

static int kd_tiled_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_tiled_t *impl = m->impl;
    const cl_mem *a = impl->mem;
    int rc = kd_format_run(
        ocl, m->dtype, "tiled", NULL, "kd_tiled_spmv", (size_t)impl->chunks * KD_TILED_LANES,
        KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(m->cols), KD_ARG_INT(impl->chunks),
                KD_ARG_MEM(a[KD_TILED_CHUNK_TILE]), KD_ARG_MEM(a[KD_TILED_CHUNK_ROW]),
                KD_ARG_MEM(a[KD_TILED_CHUNK_SLOT]), KD_ARG_MEM(a[KD_TILED_TILE_COL]),
                KD_ARG_MEM(a[KD_TILED_TILE_CODE]), KD_ARG_MEM(a[KD_TILED_VAL_OFF]),
                KD_ARG_MEM(a[KD_TILED_BYTE_OFF]), KD_ARG_MEM(a[KD_TILED_VALUES]),
                KD_ARG_MEM(a[KD_TILED_BYTES]), KD_ARG_INT(impl->pulled.indptr != NULL),
                KD_ARG_MEM(impl->pulled.indptr), KD_ARG_MEM(impl->pulled.indices),
                KD_ARG_MEM(impl->pulled.values), KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem),
                KD_ARG_MEM(a[KD_TILED_PARTIAL]), KD_ARG_VALUE(m->dtype, alpha),
                KD_ARG_VALUE(m->dtype, beta)),
        err);
    if (rc == KD_OK && impl->splits > 0)
        rc = kd_format_run(
            ocl, m->dtype, "tiled", NULL, "kd_tiled_reduce", (size_t)impl->splits * KD_TILED_SIZE,
            KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(impl->splits),
                    KD_ARG_MEM(a[KD_TILED_SPLIT_ROW]), KD_ARG_MEM(a[KD_TILED_SPLIT_SLOT]),
                    KD_ARG_MEM(a[KD_TILED_PARTIAL]), KD_ARG_MEM(y->mem),
                    KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
            err);
    if (rc != KD_OK || impl->long_part.impl == NULL)
        return rc;
    /* the long pulled rows: csr_adaptive's kernels with beta = 1 add them to the result */
    return kd_format_csr_adaptive_ops.spmv(ocl, &impl->long_part, alpha, x, 1.0, y, err);
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
    kd_format_detail_add(out, "pulled_nnz", impl->pulled_nnz + impl->long_nnz);
    kd_format_detail_add(out, "pulled_long_nnz", impl->long_nnz);
    kd_format_detail_add(out, "split_tile_rows", impl->splits);
}

const kd_format_ops_t kd_format_tiled_ops = {
    .format = KD_FMT_TILED,
    .prepare = kd_tiled_prepare,
    .prepared_free = kd_tiled_host_free,
    .screen = kd_tiled_screen,
    .plan_bytes = kd_tiled_plan_bytes,
    .upload = kd_tiled_upload,
    .spmv = kd_tiled_spmv,
    .release = kd_tiled_release,
    .describe = kd_tiled_describe,
};
