/*
 * Checked size arithmetic. Every product or sum of sizes that came from the network goes through
 * these before it reaches an allocator or an index computation. Each returns 0 on success and -1
 * (leaving *out unspecified) when the exact result does not fit the type.
 */
#ifndef KD_COMMON_CHECKED_H
#define KD_COMMON_CHECKED_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline int kd_mul_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

static inline int kd_add_overflow(size_t a, size_t b, size_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

static inline int kd_mul_overflow_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}

static inline int kd_add_overflow_i64(int64_t a, int64_t b, int64_t *out)
{
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* a * b * c as size_t, or -1 on overflow. */
static inline int kd_mul3_overflow(size_t a, size_t b, size_t c, size_t *out)
{
    size_t ab;
    if (kd_mul_overflow(a, b, &ab))
        return -1;
    return kd_mul_overflow(ab, c, out);
}

/* Saturating byte counts, for charges compared against a limit: SIZE_MAX stands for "more than
 * any limit", so a sum of products from the network never wraps into a small figure. */
static inline size_t kd_sat_add(size_t a, size_t b)
{
    size_t r;
    return kd_add_overflow(a, b, &r) ? SIZE_MAX : r;
}

/* acc + count * each, saturating; a negative count counts as 0. */
static inline size_t kd_sat_mad(size_t acc, int64_t count, size_t each)
{
    size_t r;
    if (count <= 0)
        return acc;
    return kd_mul_overflow((size_t)count, each, &r) ? SIZE_MAX : kd_sat_add(acc, r);
}

/* malloc of count * size bytes (at least 1), NULL on overflow or when out of memory. */
static inline void *kd_malloc_array(size_t count, size_t size)
{
    size_t bytes;
    if (kd_mul_overflow(count, size, &bytes))
        return NULL;
    return malloc(bytes == 0 ? 1 : bytes);
}

#endif
