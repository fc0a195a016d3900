/*
 * The response walker of reply_scan.h: a msgpack skipper that stops when the bytes run out
 * (MORE) rather than failing, so it can be run again on a longer prefix.
 */
#include "client/reply_scan.h"

#include <string.h>

#define KD_SCAN_DEPTH 32

enum { SKIP_OK = 0, SKIP_MORE = 1, SKIP_BAD = 2 };

static uint64_t kd_scan_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = v << 8 | p[i];
    return v;
}

/* The header at *pos: its size in bytes (1 + the length field), and what follows it: `payload`
 * bytes to skip, `children` objects (a map's entries count twice). */
static int kd_scan_header(const uint8_t *buf, size_t len, size_t pos, size_t *size,
                          uint64_t *payload, uint64_t *children)
{
    const uint8_t b = buf[pos];
    *payload = 0;
    *children = 0;
    *size = 1;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
        return SKIP_OK;
    if (b >= 0x80 && b <= 0x8f) {
        *children = 2u * (b & 0x0f);
        return SKIP_OK;
    }
    if (b >= 0x90 && b <= 0x9f) {
        *children = b & 0x0f;
        return SKIP_OK;
    }
    if (b >= 0xa0 && b <= 0xbf) {
        *payload = b & 0x1f;
        return SKIP_OK;
    }
    static const struct {
        uint8_t tag, width, fixed; /* width: length field bytes; fixed: payload without one */
        uint8_t kind;              /* 0 payload, 1 array, 2 map, 3 ext (1 type byte more) */
    } table[] = {
        {0xc4, 1, 0, 0},  {0xc5, 2, 0, 0}, {0xc6, 4, 0, 0}, {0xc7, 1, 0, 3}, {0xc8, 2, 0, 3},
        {0xc9, 4, 0, 3},  {0xca, 0, 4, 0}, {0xcb, 0, 8, 0}, {0xcc, 0, 1, 0}, {0xcd, 0, 2, 0},
        {0xce, 0, 4, 0},  {0xcf, 0, 8, 0}, {0xd0, 0, 1, 0}, {0xd1, 0, 2, 0}, {0xd2, 0, 4, 0},
        {0xd3, 0, 8, 0},  {0xd4, 0, 2, 0}, {0xd5, 0, 3, 0}, {0xd6, 0, 5, 0}, {0xd7, 0, 9, 0},
        {0xd8, 0, 17, 0}, {0xd9, 1, 0, 0}, {0xda, 2, 0, 0}, {0xdb, 4, 0, 0}, {0xdc, 2, 0, 1},
        {0xdd, 4, 0, 1},  {0xde, 2, 0, 2}, {0xdf, 4, 0, 2},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (table[i].tag != b)
            continue;
        if (pos + 1 + table[i].width > len)
            return SKIP_MORE;
        const uint64_t n = kd_scan_be(buf + pos + 1, table[i].width);
        *size = 1 + table[i].width;
        if (table[i].kind == 1)
            *children = n;
        else if (table[i].kind == 2)
            *children = 2 * n;
        else
            *payload = table[i].width ? n + (table[i].kind == 3) : table[i].fixed;
        return SKIP_OK;
    }
    return SKIP_BAD; /* 0xc1 */
}

/* Skip one object at *pos. */
static int kd_scan_skip(const uint8_t *buf, size_t len, size_t *pos, int depth)
{
    if (*pos >= len)
        return SKIP_MORE;
    if (depth > KD_SCAN_DEPTH)
        return SKIP_BAD;
    size_t size;
    uint64_t payload, children;
    int rc = kd_scan_header(buf, len, *pos, &size, &payload, &children);
    if (rc != SKIP_OK)
        return rc;
    if (payload > len - *pos - size)
        return SKIP_MORE;
    *pos += size + (size_t)payload;
    for (uint64_t i = 0; i < children; i++)
        if ((rc = kd_scan_skip(buf, len, pos, depth + 1)) != SKIP_OK)
            return rc;
    return SKIP_OK;
}

/* A container or integer header at *pos: its count or value into *n. */
static int kd_scan_uint(const uint8_t *buf, size_t len, size_t *pos, uint64_t *n)
{
    if (*pos >= len)
        return SKIP_MORE;
    const uint8_t b = buf[*pos];
    if (b <= 0x7f) {
        *n = b;
        *pos += 1;
        return SKIP_OK;
    }
    size_t size;
    uint64_t payload, children;
    int rc = kd_scan_header(buf, len, *pos, &size, &payload, &children);
    if (rc != SKIP_OK)
        return rc;
    if (b < 0xcc || b > 0xcf)
        return SKIP_BAD;
    if (payload > len - *pos - size)
        return SKIP_MORE;
    *n = kd_scan_be(buf + *pos + 1, (size_t)payload);
    *pos += size + (size_t)payload;
    return SKIP_OK;
}

static int kd_scan_container(const uint8_t *buf, size_t len, size_t *pos, int map, uint64_t *n)
{
    if (*pos >= len)
        return SKIP_MORE;
    const uint8_t b = buf[*pos];
    const int fix = map ? (b >= 0x80 && b <= 0x8f) : (b >= 0x90 && b <= 0x9f);
    const int big = map ? (b == 0xde || b == 0xdf) : (b == 0xdc || b == 0xdd);
    if (!fix && !big)
        return SKIP_BAD;
    size_t size;
    uint64_t payload, children;
    int rc = kd_scan_header(buf, len, *pos, &size, &payload, &children);
    if (rc != SKIP_OK)
        return rc;
    *n = map ? children / 2 : children;
    *pos += size;
    return SKIP_OK;
}

static kd_reply_scan_t kd_scan_result(int rc)
{
    return rc == SKIP_MORE ? KD_REPLY_SCAN_MORE : KD_REPLY_SCAN_NO;
}

kd_reply_scan_t kd_reply_scan(const uint8_t *buf, size_t len, uint64_t msgid, const char *field,
                              size_t want, size_t *header_at, size_t *header_len)
{
    size_t pos = 0;
    uint64_t n = 0, type = 0, id = 0;
    int rc;
    if ((rc = kd_scan_container(buf, len, &pos, 0, &n)) != SKIP_OK)
        return kd_scan_result(rc);
    if (n != 4)
        return KD_REPLY_SCAN_NO;
    if ((rc = kd_scan_uint(buf, len, &pos, &type)) != SKIP_OK ||
        (rc = kd_scan_uint(buf, len, &pos, &id)) != SKIP_OK)
        return kd_scan_result(rc);
    if (type != 1 || id != msgid)
        return KD_REPLY_SCAN_NO;
    if (pos >= len)
        return KD_REPLY_SCAN_MORE;
    if (buf[pos++] != 0xc0) /* an error */
        return KD_REPLY_SCAN_NO;
    uint64_t entries = 0;
    if ((rc = kd_scan_container(buf, len, &pos, 1, &entries)) != SKIP_OK)
        return kd_scan_result(rc);
    const size_t field_len = strlen(field);
    for (uint64_t e = 0; e < entries; e++) {
        const size_t key_at = pos;
        if ((rc = kd_scan_skip(buf, len, &pos, 1)) != SKIP_OK)
            return kd_scan_result(rc);
        const uint8_t k = buf[key_at];
        const int match = k >= 0xa0 && k <= 0xbf && (size_t)(k & 0x1f) == field_len &&
                          memcmp(buf + key_at + 1, field, field_len) == 0;
        if (!match) {
            if ((rc = kd_scan_skip(buf, len, &pos, 1)) != SKIP_OK)
                return kd_scan_result(rc);
            continue;
        }
        if (pos >= len)
            return KD_REPLY_SCAN_MORE;
        const uint8_t b = buf[pos];
        const size_t width = b == 0xc4 ? 1 : b == 0xc5 ? 2 : b == 0xc6 ? 4 : 0;
        if (width == 0)
            return KD_REPLY_SCAN_NO;
        if (pos + 1 + width > len)
            return KD_REPLY_SCAN_MORE;
        if (kd_scan_be(buf + pos + 1, width) != want)
            return KD_REPLY_SCAN_NO;
        *header_at = pos;
        *header_len = 1 + width;
        return KD_REPLY_SCAN_FOUND;
    }
    return KD_REPLY_SCAN_NO;
}

void kd_reply_scan_empty_bin(uint8_t *buf, size_t header_len)
{
    memset(buf + 1, 0, header_len - 1);
}
