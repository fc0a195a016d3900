/*
 * A per-device pool of small multivectors, so that a request's vectors are not created and
 * released on every request: short requests (an SpMV on a thousand rows) otherwise spend a good
 * part of their device time in clCreateBuffer, clCreateSubBuffer and clReleaseMemObject. A
 * multivector given back is kept, with its column views, when it is at most `item_max` bytes and
 * the pool stays under `bytes_max`; the least recently given back go first. A request then gets
 * one of exactly its shape (rows, columns, dtype) back. One thread uses a pool (the device's
 * worker); its bytes count in the device budget (server/store/cache.c) and it empties when the
 * driver refuses an allocation.
 */
#ifndef KD_SOLVER_POOL_H
#define KD_SOLVER_POOL_H

#include "solver/vector.h"

#include <stddef.h>
#include <stdint.h>

typedef struct kd_pool kd_pool_t;

#define KD_POOL_SLOTS 32

/* A pool keeping at most bytes_max bytes, none of its multivectors over item_max. NULL when out
 * of memory (callers then allocate every time: a pool is an optimisation). */
kd_pool_t *kd_pool_new(size_t bytes_max, size_t item_max);
void kd_pool_free(kd_pool_t *pool); /* releases what it holds; accepts NULL */

/* An n x k multivector of dtype: a pooled one of that shape (its contents are stale: write
 * before reading), else a new one (kd_multivec_alloc). pool may be NULL. */
int kd_pool_get(kd_pool_t *pool, kd_ocl_t *ocl, int64_t n, int64_t k, kd_dtype_t dtype,
                kd_multivec_t *mv, kd_err_t *err);

/* Give mv back (kept or released); mv is zeroed either way. pool may be NULL. */
void kd_pool_put(kd_pool_t *pool, kd_multivec_t *mv);

/* Device bytes held, and requests served from the pool / by a new allocation (metrics). */
size_t kd_pool_bytes(const kd_pool_t *pool);
void kd_pool_counts(const kd_pool_t *pool, uint64_t *hits, uint64_t *misses);

/* Release everything held (the driver refused an allocation). */
void kd_pool_clear(kd_pool_t *pool);

/*
 * Pinned host memory for packing many small transfers into one: at least `bytes`, page-locked
 * (CL_MEM_ALLOC_HOST_PTR, mapped), so one copy to or from the device is a plain DMA. The pool
 * keeps one such buffer and grows it on demand up to KD_POOL_HOST_MAX; NULL when bytes is larger,
 * or the driver refuses (the caller then transfers from its own memory). The memory stays valid
 * until the next kd_pool_host call, kd_pool_clear or kd_pool_free; the caller must not ask again
 * while transfers from the returned memory are in flight. pool may be NULL (then NULL).
 */
#define KD_POOL_HOST_MAX ((size_t)16 << 20)
void *kd_pool_host(kd_pool_t *pool, kd_ocl_t *ocl, size_t bytes);

#endif
