/*
 * The one monotonic clock: nanoseconds of CLOCK_MONOTONIC, for deadlines, latencies, LRU order
 * and timings everywhere in krylovd (server, solver, clients, benchmarks and tests).
 */
#ifndef KD_COMMON_CLOCK_H
#define KD_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t kd_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* kd_clock_ns() in milliseconds, for code that measures in ms. */
static inline double kd_clock_ms(void)
{
    return (double)kd_clock_ns() / 1e6;
}

/* Milliseconds since `start_ns` (a kd_clock_ns() reading). */
static inline double kd_clock_ms_since(uint64_t start_ns)
{
    return (double)(kd_clock_ns() - start_ns) / 1e6;
}

#endif
