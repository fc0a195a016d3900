/*
 * The multivector pool (see pool.h): a handful of slots searched linearly, which is all a worker
 * serving small requests needs (a few shapes at a time); a use counter orders them for eviction.
 */
#include "solver/runtime/pool.h"

#include <stdlib.h>
#include <string.h>

typedef struct kd_pool_slot {
    kd_multivec_t mv; /* mv.cols == NULL: empty */
    size_t bytes;
    uint64_t stamp;
} kd_pool_slot_t;

struct kd_pool {
    kd_pool_slot_t slots[KD_POOL_SLOTS];
    size_t bytes, bytes_max, item_max;
    uint64_t clock, hits, misses;
    kd_ocl_t *host_ocl; /* the pinned host buffer's device (its queue unmaps it) */
    cl_mem host_mem;
    void *host_ptr;
    size_t host_bytes;
};

static size_t kd_pool_mv_bytes(const kd_multivec_t *mv)
{
    return (size_t)mv->ld * (size_t)mv->k * kd_dtype_size(mv->dtype);
}

kd_pool_t *kd_pool_new(size_t bytes_max, size_t item_max)
{
    kd_pool_t *pool = calloc(1, sizeof(*pool));
    if (pool != NULL) {
        pool->bytes_max = bytes_max;
        pool->item_max = item_max;
    }
    return pool;
}

static void kd_pool_drop(kd_pool_t *pool, kd_pool_slot_t *slot)
{
    pool->bytes -= slot->bytes;
    kd_multivec_release(&slot->mv);
    memset(slot, 0, sizeof(*slot));
}

static void kd_pool_host_release(kd_pool_t *pool)
{
    if (pool->host_mem != NULL)
        kd_ocl_host_free(pool->host_ocl, pool->host_ptr, pool->host_mem);
    pool->host_mem = NULL;
    pool->host_ptr = NULL;
    pool->host_bytes = 0;
}

void *kd_pool_host(kd_pool_t *pool, kd_ocl_t *ocl, size_t bytes)
{
    if (pool == NULL || bytes > KD_POOL_HOST_MAX)
        return NULL;
    if (pool->host_ptr != NULL && pool->host_bytes >= bytes && pool->host_ocl == ocl)
        return pool->host_ptr;
    kd_pool_host_release(pool);
    size_t want = 1 << 16;
    while (want < bytes)
        want *= 2;
    pool->host_ocl = ocl;
    pool->host_ptr = kd_ocl_host_alloc(ocl, want, &pool->host_mem, NULL);
    pool->host_bytes = pool->host_ptr != NULL ? want : 0;
    return pool->host_ptr;
}

void kd_pool_clear(kd_pool_t *pool)
{
    if (pool == NULL)
        return;
    if (pool->host_mem != NULL)
        kd_pool_host_release(pool);
    for (int i = 0; i < KD_POOL_SLOTS; i++)
        if (pool->slots[i].mv.cols != NULL)
            kd_pool_drop(pool, &pool->slots[i]);
}

void kd_pool_free(kd_pool_t *pool)
{
    kd_pool_clear(pool);
    free(pool);
}

int kd_pool_get(kd_pool_t *pool, kd_ocl_t *ocl, int64_t n, int64_t k, kd_dtype_t dtype,
                kd_multivec_t *mv, kd_err_t *err)
{
    if (pool != NULL)
        for (int i = 0; i < KD_POOL_SLOTS; i++) {
            kd_pool_slot_t *s = &pool->slots[i];
            if (s->mv.cols != NULL && s->mv.n == n && s->mv.k == k && s->mv.dtype == dtype) {
                *mv = s->mv;
                pool->bytes -= s->bytes;
                memset(s, 0, sizeof(*s));
                pool->hits++;
                return KD_OK;
            }
        }
    if (pool != NULL)
        pool->misses++;
    return kd_multivec_alloc(ocl, n, k, dtype, mv, err);
}

void kd_pool_put(kd_pool_t *pool, kd_multivec_t *mv)
{
    const size_t bytes = kd_pool_mv_bytes(mv);
    /* Empty shapes (no buffer, no views) are not worth a slot. */
    if (pool == NULL || mv->mem == NULL || mv->cols == NULL || bytes > pool->item_max ||
        bytes > pool->bytes_max) {
        kd_multivec_release(mv);
        return;
    }
    for (;;) {
        kd_pool_slot_t *free_slot = NULL, *oldest = NULL;
        for (int i = 0; i < KD_POOL_SLOTS; i++) {
            kd_pool_slot_t *s = &pool->slots[i];
            if (s->mv.cols == NULL) {
                if (free_slot == NULL)
                    free_slot = s;
            } else if (oldest == NULL || s->stamp < oldest->stamp) {
                oldest = s;
            }
        }
        if (free_slot != NULL && pool->bytes + bytes <= pool->bytes_max) {
            free_slot->mv = *mv;
            free_slot->bytes = bytes;
            free_slot->stamp = ++pool->clock;
            pool->bytes += bytes;
            memset(mv, 0, sizeof(*mv));
            return;
        }
        kd_pool_drop(pool, oldest); /* not NULL: a full pool, or one over its bytes, holds some */
    }
}

size_t kd_pool_bytes(const kd_pool_t *pool)
{
    return pool != NULL ? pool->bytes : 0;
}

void kd_pool_counts(const kd_pool_t *pool, uint64_t *hits, uint64_t *misses)
{
    *hits = pool != NULL ? pool->hits : 0;
    *misses = pool != NULL ? pool->misses : 0;
}
