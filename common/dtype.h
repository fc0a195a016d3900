/*
 * Value and index types as they travel on the wire and live on the device, and unaligned
 * little-endian loads/stores for reading msgpack `bin` payloads in place (they carry no alignment).
 * krylovd assumes a little-endian host, as every OpenCL GPU host it targets is; the build fails
 * elsewhere rather than computing garbage.
 */
#ifndef KD_COMMON_DTYPE_H
#define KD_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "krylovd reads little-endian wire arrays in place and needs a little-endian host"
#endif

typedef enum kd_dtype {
    KD_DTYPE_F64 = 0,
    KD_DTYPE_F32 = 1,
    KD_DTYPE_I32 = 2,
    KD_DTYPE_I64 = 3,
} kd_dtype_t;

static inline size_t kd_dtype_size(kd_dtype_t t)
{
    return (t == KD_DTYPE_F64 || t == KD_DTYPE_I64) ? 8 : 4;
}

static inline const char *kd_dtype_name(kd_dtype_t t)
{
    switch (t) {
    case KD_DTYPE_F64:
        return "float64";
    case KD_DTYPE_F32:
        return "float32";
    case KD_DTYPE_I32:
        return "int32";
    case KD_DTYPE_I64:
        return "int64";
    }
    return "unknown";
}

/* Parse "float64"/"float32"/"int32"/"int64" (also "f8","f4","i4","i8" as numpy spells them).
 * Returns 0 or -1. */
static inline int kd_dtype_parse(const char *s, size_t len, kd_dtype_t *out)
{
    static const struct {
        const char *name;
        kd_dtype_t t;
    } names[] = {
        {"float64", KD_DTYPE_F64}, {"f8", KD_DTYPE_F64},      {"<f8", KD_DTYPE_F64},
        {"double", KD_DTYPE_F64},  {"float32", KD_DTYPE_F32}, {"f4", KD_DTYPE_F32},
        {"<f4", KD_DTYPE_F32},     {"float", KD_DTYPE_F32},   {"int32", KD_DTYPE_I32},
        {"i4", KD_DTYPE_I32},      {"<i4", KD_DTYPE_I32},     {"int64", KD_DTYPE_I64},
        {"i8", KD_DTYPE_I64},      {"<i8", KD_DTYPE_I64},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i].name) == len && memcmp(names[i].name, s, len) == 0) {
            *out = names[i].t;
            return 0;
        }
    }
    return -1;
}

static inline double kd_load_f64(const void *p, size_t i)
{
    double v;
    memcpy(&v, (const char *)p + i * 8, 8);
    return v;
}

static inline float kd_load_f32(const void *p, size_t i)
{
    float v;
    memcpy(&v, (const char *)p + i * 4, 4);
    return v;
}

static inline int32_t kd_load_i32(const void *p, size_t i)
{
    int32_t v;
    memcpy(&v, (const char *)p + i * 4, 4);
    return v;
}

static inline int64_t kd_load_i64(const void *p, size_t i)
{
    int64_t v;
    memcpy(&v, (const char *)p + i * 8, 8);
    return v;
}

/* Element i of a float64 or float32 array, widened to double. */
static inline double kd_load_real(const void *p, kd_dtype_t t, size_t i)
{
    return t == KD_DTYPE_F32 ? (double)kd_load_f32(p, i) : kd_load_f64(p, i);
}

/* Element i of an int32 or int64 array, widened to int64. */
static inline int64_t kd_load_index(const void *p, kd_dtype_t t, size_t i)
{
    return t == KD_DTYPE_I32 ? (int64_t)kd_load_i32(p, i) : kd_load_i64(p, i);
}

static inline void kd_store_real(void *p, kd_dtype_t t, size_t i, double v)
{
    if (t == KD_DTYPE_F32) {
        float f = (float)v;
        memcpy((char *)p + i * 4, &f, 4);
    } else {
        memcpy((char *)p + i * 8, &v, 8);
    }
}

/* Convert n reals between float types (src and dst may be unaligned; they must not overlap unless
 * the types are equal and src == dst). */
static inline void kd_convert_real(void *dst, kd_dtype_t dt, const void *src, kd_dtype_t st,
                                   size_t n)
{
    if (dt == st) {
        if (dst != src)
            memmove(dst, src, n * kd_dtype_size(dt));
        return;
    }
    for (size_t i = 0; i < n; i++)
        kd_store_real(dst, dt, i, kd_load_real(src, st, i));
}

#endif
