/*
 * Large buffers kept for the next request instead of being given back to the system. A fresh
 * large malloc is fresh pages: the first write to each takes a page fault and the kernel zeroes
 * it, which runs at about 1 GB/s here, slower than loopback TCP. A request's message buffer and a
 * response's vector (each as large as the vector, 8-128 MB for 1M-16M float64 values) are
 * therefore taken from a shelf of recently freed ones whose pages are already mapped.
 *
 * Thread-safe (the loop thread frames messages and frees responses, the worker allocates
 * them). The shelf holds a few buffers and a bounded total (kd_recycle_set_limit); past that the
 * oldest go back to the system. kd_recycle_free accepts any malloc'd pointer (or NULL), so a
 * buffer that may have come from here is freed with it wherever it ends.
 */
#ifndef KD_COMMON_RECYCLE_H
#define KD_COMMON_RECYCLE_H

#include <stddef.h>

/* Smaller buffers are plain malloc / free: their pages are reused by malloc itself. */
#define KD_RECYCLE_MIN ((size_t)1 << 20)

/* At least `bytes` (a shelf buffer at most an eighth or 1 MiB larger, else a new one); the
 * buffer's real size in *capacity (may be NULL). NULL when out of memory. */
void *kd_recycle_alloc(size_t bytes, size_t *capacity);
/* Back on the shelf (or to the system); any malloc'd pointer, NULL included. */
void kd_recycle_free(void *p);
/* p's real size when it came from kd_recycle_alloc and is still out, else `len`. For memory
 * accounting of a buffer handed on. */
size_t kd_recycle_capacity(const void *p, size_t len);
/* The shelf's bounds: total bytes kept idle and buffers kept (0 bytes: nothing kept). */
void kd_recycle_set_limit(size_t bytes, int buffers);
/* Every idle buffer back to the system, the limits kept (after a load: server/trim.h). */
void kd_recycle_release_idle(void);
/* Bytes idle on the shelf now (server.status, tests). */
size_t kd_recycle_idle_bytes(void);

#endif
