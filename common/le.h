/*
 * Fixed-width little-endian fields in byte buffers, whatever the host's order: the formats krylovd
 * writes to disk (state files, server/store/state.c; compiled program files,
 * solver/runtime/program_cache.c) read the same on every machine.
 */
#ifndef KD_COMMON_LE_H
#define KD_COMMON_LE_H

#include <stdint.h>
#include <string.h>

static inline void kd_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kd_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void kd_put_f64(uint8_t *p, double v)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    kd_put_u64(p, bits);
}

static inline uint32_t kd_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline uint64_t kd_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline double kd_get_f64(const uint8_t *p)
{
    uint64_t bits = kd_get_u64(p);
    double v;
    memcpy(&v, &bits, 8);
    return v;
}

#endif
