/*
 * A block as one flat buffer and back (block.h): a fixed header of sizes, then each array in a
 * fixed order. The reader trusts nothing: every size is bounded by the buffer, every index by
 * the sizes, so a block read from disk or received from another rank is either whole and
 * consistent or refused.
 */
#include "dist/block.h"
#include "common/checked.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define KD_DIST_BLOCK_MAGIC 0x4244444bu /* "KDDB" */
#define KD_DIST_BLOCK_VERSION 1u

typedef struct kd_dist_block_header {
    uint32_t magic, version;
    int32_t rank, ranks;
    int64_t rows, cols, nnz;
    int32_t dtype, neighbours;
    int64_t local_rows, diag_nnz, offd_nnz, ghosts, sends;
    kd_dist_summary_t summary;
} kd_dist_block_header_t;

/* The arrays in buffer order: where each is, its element size and count. */
typedef struct kd_dist_block_array {
    void **at;
    size_t size;
    int64_t count;
    int in_csr; /* one of diag's or offd's arrays, which kd_csr_alloc makes */
} kd_dist_block_array_t;

static size_t kd_dist_block_arrays(kd_dist_block_t *b, const kd_dist_block_header_t *h,
                                   kd_dist_block_array_t *out)
{
    const size_t v = kd_dtype_size((kd_dtype_t)h->dtype);
    const int64_t n = h->local_rows;
    size_t i = 0;
    out[i++] = (kd_dist_block_array_t){(void **)&b->row_start, 8, (int64_t)h->ranks + 1, 0};
    out[i++] = (kd_dist_block_array_t){(void **)&b->diag->indptr, 4, n + 1, 1};
    out[i++] = (kd_dist_block_array_t){(void **)&b->diag->indices, 4, h->diag_nnz, 1};
    out[i++] = (kd_dist_block_array_t){&b->diag->values, v, h->diag_nnz, 1};
    out[i++] = (kd_dist_block_array_t){(void **)&b->offd->indptr, 4, n + 1, 1};
    out[i++] = (kd_dist_block_array_t){(void **)&b->offd->indices, 4, h->offd_nnz, 1};
    out[i++] = (kd_dist_block_array_t){&b->offd->values, v, h->offd_nnz, 1};
    out[i++] = (kd_dist_block_array_t){(void **)&b->ghost_col, 4, h->ghosts, 0};
    out[i++] = (kd_dist_block_array_t){(void **)&b->neighbour, 4, h->neighbours, 0};
    out[i++] = (kd_dist_block_array_t){(void **)&b->send_start, 4, (int64_t)h->neighbours + 1, 0};
    out[i++] = (kd_dist_block_array_t){(void **)&b->send_index, 4, h->sends, 0};
    out[i++] = (kd_dist_block_array_t){(void **)&b->recv_start, 4, (int64_t)h->neighbours + 1, 0};
    return i;
}

#define KD_DIST_BLOCK_ARRAYS 12

int kd_dist_block_pack(const kd_dist_block_t *b, void **out, size_t *bytes, kd_err_t *err)
{
    assert(b != NULL && out != NULL && bytes != NULL);
    kd_dist_block_header_t h;
    memset(&h, 0, sizeof(h));
    h.magic = KD_DIST_BLOCK_MAGIC;
    h.version = KD_DIST_BLOCK_VERSION;
    h.rank = b->rank;
    h.ranks = b->ranks;
    h.rows = b->rows;
    h.cols = b->cols;
    h.nnz = b->nnz;
    h.dtype = (int32_t)b->dtype;
    h.neighbours = b->neighbours;
    h.local_rows = b->diag->rows;
    h.diag_nnz = b->diag->nnz;
    h.offd_nnz = b->offd->nnz;
    h.ghosts = b->ghosts;
    h.sends = b->send_start[b->neighbours];
    h.summary = b->summary;
    kd_dist_block_array_t arrays[KD_DIST_BLOCK_ARRAYS];
    size_t total = sizeof(h);
    const size_t count = kd_dist_block_arrays((kd_dist_block_t *)b, &h, arrays);
    for (size_t i = 0; i < count; i++)
        total += arrays[i].size * (size_t)arrays[i].count;
    unsigned char *buf = malloc(total);
    if (buf == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a block of %zu bytes", total);
    memcpy(buf, &h, sizeof(h));
    size_t at = sizeof(h);
    for (size_t i = 0; i < count; i++) {
        const size_t len = arrays[i].size * (size_t)arrays[i].count;
        if (len > 0)
            memcpy(buf + at, *arrays[i].at, len);
        at += len;
    }
    *out = buf;
    *bytes = total;
    return KD_OK;
}

/* 1 when v[0..count) is non-decreasing, starts at `first` and ends at `last`. */
static int kd_dist_ramp(const int32_t *v, int64_t count, int64_t first, int64_t last)
{
    if (count < 1 || v[0] != first || v[count - 1] != last)
        return 0;
    for (int64_t i = 1; i < count; i++)
        if (v[i] < v[i - 1])
            return 0;
    return 1;
}

/* 1 when every v[i] is in [0, bound). */
static int kd_dist_within(const int32_t *v, int64_t count, int64_t bound)
{
    for (int64_t i = 0; i < count; i++)
        if (v[i] < 0 || v[i] >= bound)
            return 0;
    return 1;
}

/* The header's sizes against each other and the index limits. */
static int kd_dist_block_header_ok(const kd_dist_block_header_t *h)
{
    return h->magic == KD_DIST_BLOCK_MAGIC && h->version == KD_DIST_BLOCK_VERSION &&
           h->ranks >= 1 && h->ranks <= KD_DIST_RANKS_MAX && h->rank >= 0 && h->rank < h->ranks &&
           (h->dtype == KD_DTYPE_F64 || h->dtype == KD_DTYPE_F32) && h->rows >= 0 &&
           h->rows == h->cols && h->rows <= KD_CSR_INDEX_MAX && h->nnz >= 0 &&
           h->nnz <= KD_CSR_INDEX_MAX && h->local_rows >= 0 && h->local_rows <= h->rows &&
           h->diag_nnz >= 0 && h->offd_nnz >= 0 && h->diag_nnz <= h->nnz &&
           h->offd_nnz <= h->nnz - h->diag_nnz && h->ghosts >= 0 &&
           h->ghosts <= h->cols - h->local_rows && h->neighbours >= 0 && h->neighbours < h->ranks &&
           h->sends >= 0 && h->sends <= h->local_rows * h->ranks;
}

/* The arrays' contents against the header. */
static int kd_dist_block_arrays_ok(const kd_dist_block_t *b, const kd_dist_block_header_t *h)
{
    const int64_t *rs = b->row_start;
    if (rs[0] != 0 || rs[h->ranks] != h->rows)
        return 0;
    for (int r = 0; r < h->ranks; r++)
        if (rs[r + 1] < rs[r])
            return 0;
    const int64_t lo = rs[h->rank], n = rs[h->rank + 1] - lo;
    if (n != h->local_rows || !kd_dist_ramp(b->diag->indptr, n + 1, 0, h->diag_nnz) ||
        !kd_dist_ramp(b->offd->indptr, n + 1, 0, h->offd_nnz) ||
        !kd_dist_within(b->diag->indices, h->diag_nnz, n) ||
        !kd_dist_within(b->offd->indices, h->offd_nnz, h->ghosts) ||
        !kd_dist_within(b->ghost_col, h->ghosts, h->cols) ||
        !kd_dist_within(b->neighbour, h->neighbours, h->ranks) ||
        !kd_dist_ramp(b->send_start, (int64_t)h->neighbours + 1, 0, h->sends) ||
        !kd_dist_ramp(b->recv_start, (int64_t)h->neighbours + 1, 0, h->ghosts) ||
        !kd_dist_within(b->send_index, h->sends, n))
        return 0;
    for (int64_t g = 0; g < h->ghosts; g++)
        if ((g > 0 && b->ghost_col[g] <= b->ghost_col[g - 1]) ||
            (b->ghost_col[g] >= lo && b->ghost_col[g] < lo + n))
            return 0;
    for (int32_t i = 0; i < h->neighbours; i++)
        if (b->neighbour[i] == h->rank || (i > 0 && b->neighbour[i] <= b->neighbour[i - 1]))
            return 0;
    return 1;
}

int kd_dist_block_unpack(const void *buf, size_t bytes, kd_dist_block_t *b, kd_err_t *err)
{
    assert(buf != NULL && b != NULL);
    memset(b, 0, sizeof(*b));
    kd_dist_block_header_t h;
    if (bytes < sizeof(h))
        return kd_err_set(err, KD_EBADREQ, "block: %zu bytes, shorter than its header", bytes);
    memcpy(&h, buf, sizeof(h));
    if (!kd_dist_block_header_ok(&h))
        return kd_err_set(err, KD_EBADREQ, "block: a damaged header (magic, version or sizes)");
    /* The arrays' length from the header, before anything is allocated: a damaged size must not
     * make this allocate gigabytes. */
    const size_t v = kd_dtype_size((kd_dtype_t)h.dtype);
    const int64_t n1 = h.local_rows + 1, nb1 = (int64_t)h.neighbours + 1;
    const int64_t words = ((int64_t)h.ranks + 1) * 2 + n1 * 2 + h.diag_nnz + h.offd_nnz + h.ghosts +
                          h.neighbours + nb1 * 2 + h.sends; /* 4-byte words */
    const size_t need = sizeof(h) + (size_t)words * 4 + (size_t)(h.diag_nnz + h.offd_nnz) * v;
    if (need != bytes)
        return kd_err_set(err, KD_EBADREQ, "block: %zu bytes where its header says %zu", bytes,
                          need);
    int rc;
    if ((rc = kd_csr_alloc(h.local_rows, h.local_rows, h.diag_nnz, (kd_dtype_t)h.dtype, &b->diag,
                           err)) != KD_OK ||
        (rc = kd_csr_alloc(h.local_rows, h.ghosts, h.offd_nnz, (kd_dtype_t)h.dtype, &b->offd,
                           err)) != KD_OK)
        goto fail;
    kd_dist_block_array_t arrays[KD_DIST_BLOCK_ARRAYS];
    const size_t count = kd_dist_block_arrays(b, &h, arrays);
    size_t at = sizeof(h);
    for (size_t i = 0; i < count; i++) {
        const size_t len = arrays[i].size * (size_t)arrays[i].count;
        if (len > bytes - at) {
            rc = kd_err_set(err, KD_EBADREQ, "block: truncated (%zu bytes)", bytes);
            goto fail;
        }
        if (!arrays[i].in_csr &&
            (*arrays[i].at = kd_malloc_array((size_t)arrays[i].count, arrays[i].size)) == NULL) {
            rc = kd_err_set(err, KD_ENOMEM, "out of host memory for a block");
            goto fail;
        }
        if (len > 0)
            memcpy(*arrays[i].at, (const unsigned char *)buf + at, len);
        at += len;
    }
    if (at != bytes) {
        rc = kd_err_set(err, KD_EBADREQ, "block: %zu bytes after its arrays", bytes - at);
        goto fail;
    }
    b->rank = h.rank;
    b->ranks = h.ranks;
    b->rows = h.rows;
    b->cols = h.cols;
    b->nnz = h.nnz;
    b->dtype = (kd_dtype_t)h.dtype;
    b->ghosts = h.ghosts;
    b->neighbours = h.neighbours;
    b->summary = h.summary;
    if (!kd_dist_block_arrays_ok(b, &h)) {
        rc = kd_err_set(err, KD_EBADREQ, "block: inconsistent arrays (offsets or indices)");
        goto fail;
    }
    return KD_OK;
fail:
    kd_dist_block_free(b);
    return rc;
}
