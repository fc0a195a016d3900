/*
 * Host work on a CSR matrix cut into slices of about equal nonzeros, a thread each: how many
 * slices, where they cut, and running them. The upload's scan of the values (solver/matrix_scan.c)
 * and the tiled format's analysis (solver/formats/tiled.c) use it; both join their slices' results
 * in row order, so what they produce does not depend on the number of threads.
 */
#ifndef KD_COMMON_SLICES_H
#define KD_COMMON_SLICES_H

#include "common/csr.h"

#include <stddef.h>
#include <stdint.h>

#define KD_SLICES_MAX 8
#define KD_SLICE_NNZ ((int64_t)1 << 20)

/* Slices for nnz entries: one per KD_SLICE_NNZ, at least 1, at most KD_SLICES_MAX and the CPUs
 * online. */
int kd_slices_count(int64_t nnz);

/* The row holding entry k: the last r with indptr[r] <= k (empty rows before it skipped). */
int64_t kd_csr_row_of_entry(const kd_csr_t *csr, int64_t k);

/* Row bounds of n slices of about equal nonzeros: bounds[0] = 0 <= bounds[1] <= ... <= bounds[n]
 * = rows, the inner ones multiples of align (1; 16 for tile rows). */
void kd_slices_rows(const kd_csr_t *csr, int n, int64_t align, int64_t bounds[KD_SLICES_MAX + 1]);

/* fn on each of n items of `size` bytes at `items`: item 0 on this thread, the others on threads
 * of their own (on this one when a thread cannot start), all done when it returns. */
void kd_slices_run(void *(*fn)(void *), void *items, size_t size, int n);

/* memcpy in slices on kd_slices_count(bytes / 8) threads: a large copy into fresh pages is mostly
 * page faults, which overlap across threads (a put's values: server/handlers/like.c). */
void kd_slices_memcpy(void *dst, const void *src, size_t bytes);
/* The same with a thread a MiB (up to KD_SLICES_MAX and the CPUs): a copy into or out of warm
 * memory (the pinned staging buffer, solver/runtime/ocl.c) is bound by the threads' bandwidth,
 * not by page faults, so it wants more threads than kd_slices_memcpy gives a 16 MiB chunk. */
void kd_slices_memcpy_wide(void *dst, const void *src, size_t bytes);

#endif
