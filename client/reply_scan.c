/*
 * The response walker of reply_scan.h: a msgpack skipper that stops when the bytes run out
 * (MORE) rather than failing, so it can be run again on a longer prefix.
 */
#include "client/reply_scan.h"
#include "protocol/frame.h"

#include <string.h>

#define KD_SCAN_DEPTH 32

enum { SKIP_OK = 0, SKIP_MORE = 1, SKIP_BAD = 2 };

/* The header at *pos (protocol/frame.c's parser, the server's own): its size in bytes (with any
 * length field and ext type byte), and what follows it: `payload` bytes to skip, `children`
 * objects (a map's entries count twice). */
static int kd_scan_header(const uint8_t *buf, size_t len, size_t pos, kd_frame_head_t *h)
{
    const int rc = kd_frame_head_parse(buf + pos, len - pos, h);
    return rc > 0 ? SKIP_OK : rc == 0 ? SKIP_MORE : SKIP_BAD;
}

/* Skip one object at *pos. */
static int kd_scan_skip(const uint8_t *buf, size_t len, size_t *pos, int depth)
{
    if (*pos >= len)
        return SKIP_MORE;
    if (depth > KD_SCAN_DEPTH)
        return SKIP_BAD;
    kd_frame_head_t h;
    int rc = kd_scan_header(buf, len, *pos, &h);
    if (rc != SKIP_OK)
        return rc;
    if (h.payload > len - *pos - h.len)
        return SKIP_MORE;
    *pos += h.len + (size_t)h.payload;
    for (uint64_t i = 0; i < h.items; i++)
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
    if (b < 0xcc || b > 0xcf)
        return SKIP_BAD;
    kd_frame_head_t h;
    int rc = kd_scan_header(buf, len, *pos, &h);
    if (rc != SKIP_OK)
        return rc;
    *n = h.uval;
    *pos += h.len;
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
    kd_frame_head_t h;
    int rc = kd_scan_header(buf, len, *pos, &h);
    if (rc != SKIP_OK)
        return rc;
    *n = map ? h.items / 2 : h.items;
    *pos += h.len;
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
        if (b < 0xc4 || b > 0xc6) /* bin 8/16/32 */
            return KD_REPLY_SCAN_NO;
        kd_frame_head_t h;
        const int hrc = kd_scan_header(buf, len, pos, &h);
        if (hrc != SKIP_OK)
            return kd_scan_result(hrc);
        if (h.payload != want)
            return KD_REPLY_SCAN_NO;
        *header_at = pos;
        *header_len = h.len;
        return KD_REPLY_SCAN_FOUND;
    }
    return KD_REPLY_SCAN_NO;
}

void kd_reply_scan_empty_bin(uint8_t *buf, size_t header_len)
{
    memset(buf + 1, 0, header_len - 1);
}
