/*
 * libFuzzer target for a spread matrix's block as it is persisted and sent between ranks
 * (dist/block_pack.c): arbitrary bytes go to kd_dist_block_unpack in a heap buffer of exactly
 * the input's size, so any read past it trips ASan. A success must be a block whose every index
 * is in range (both local products run on it, so a bad offset trips ASan too) and that packs
 * back to the same bytes; a failure must say what was wrong. Seed corpus:
 * tests/fuzz/corpus/dist_block/ (blocks of small split matrices).
 */
#include "dist/block.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* y = diag x + offd ghosts with x, ghosts zero: every index is dereferenced once. */
static void walk(const kd_dist_block_t *b)
{
    const int64_t n = kd_dist_block_rows(b);
    double *x = calloc((size_t)n + 1, sizeof(double));
    double *g = calloc((size_t)b->ghosts + 1, sizeof(double));
    double *y = calloc((size_t)n + 1, sizeof(double));
    if (x == NULL || g == NULL || y == NULL)
        abort();
    kd_csr_spmv_ref(b->diag, x, 1.0, 0.0, y);
    kd_csr_spmv_ref(b->offd, g, 1.0, 1.0, y);
    for (int32_t i = 0; i < b->neighbours; i++)
        for (int32_t e = b->send_start[i]; e < b->send_start[i + 1]; e++)
            y[b->send_index[e]] += x[b->send_index[e]];
    free(x);
    free(g);
    free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *copy = malloc(size + 1); /* exactly size readable bytes for ASan's sake */
    if (copy == NULL)
        return 0;
    memcpy(copy, data, size);
    kd_dist_block_t b;
    kd_err_t err = {0};
    int rc = kd_dist_block_unpack(copy, size, &b, &err);
    if (rc != KD_OK) {
        if (rc != KD_EBADREQ && rc != KD_ENOMEM)
            abort();
        if (err.message[0] == '\0')
            abort();
        free(copy);
        return 0;
    }
    walk(&b);
    void *again = NULL;
    size_t bytes = 0;
    if (kd_dist_block_pack(&b, &again, &bytes, &err) != KD_OK || bytes != size ||
        memcmp(again, copy, size) != 0)
        abort();
    free(again);
    kd_dist_block_free(&b);
    free(copy);
    return 0;
}
