/*
 * client/reply_scan.c: every prefix of a real response is MORE until the wanted bin's header is
 * whole, then FOUND at that header, whatever the result's other entries (nested maps, arrays,
 * strings, floats, ext) and their order; anything else (another msgid, an error, a notification,
 * the wrong size, a bin too long for the scan, not a bin) is NO, never a read past the bytes.
 */
#include "client/reply_scan.h"
#include "kd_test.h"
#include "protocol/writer.h"

#include <stdlib.h>
#include <string.h>

typedef struct message {
    uint8_t *bytes;
    size_t len;
} message_t;

static message_t finish(kd_writer_t *w)
{
    message_t m;
    m.bytes = kd_writer_release(w, &m.len);
    MUST(m.bytes != NULL);
    return m;
}

/* A result {time_ms, stats: {...}, y: bin(n), tags: [...]} with y placed `where` (0..3). */
static message_t result(uint64_t msgid, size_t n, int where, size_t *header_at)
{
    uint8_t *payload = malloc(n + 1);
    MUST(payload != NULL);
    memset(payload, 0xc1, n); /* never a valid header: a scan inside the payload would see it */
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_result_begin(&w, msgid);
    kd_w_map(&w, 4);
    for (int i = 0; i < 4; i++) {
        if (i == where) {
            kd_w_key(&w, "y");
            kd_writer_t probe = w; /* the offset of the bin header: the bytes so far */
            *header_at = probe.sbuf.size;
            kd_w_bin(&w, payload, n);
        } else if (i == (where + 1) % 4) {
            kd_w_kv_double(&w, "time_ms", 1.25);
        } else if (i == (where + 2) % 4) {
            kd_w_key(&w, "stats");
            kd_w_map(&w, 3);
            kd_w_kv_int(&w, "n", -70000);
            kd_w_kv_str(&w, "format", "csr_vector with a long name beyond thirty-one bytes");
            kd_w_key(&w, "y"); /* a nested key of the same name: not the result's */
            kd_w_array(&w, 2);
            kd_w_uint(&w, 1ull << 40);
            kd_w_nil(&w);
        } else {
            kd_w_key(&w, "tags");
            kd_w_array(&w, 3);
            kd_w_bool(&w, 1);
            kd_w_bin(&w, "ab", 2);
            kd_w_double(&w, -0.5);
        }
    }
    free(payload);
    return finish(&w);
}

static void test_every_prefix(void)
{
    const size_t sizes[] = {0, 7, 255, 256, 65535, 65536, 1 << 20};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
        for (int where = 0; where < 4; where++) {
            size_t want_at = 0;
            const uint64_t msgid = 1 + (uint64_t)kd_test_rand_below(1ll << 40);
            message_t m = result(msgid, sizes[s], where, &want_at);
            const size_t header = sizes[s] < 256 ? 2 : sizes[s] < 65536 ? 3 : 5;
            for (size_t len = 0; len <= want_at + header + 8 && len <= m.len; len++) {
                size_t at = 0, hl = 0;
                kd_reply_scan_t r = kd_reply_scan(m.bytes, len, msgid, "y", sizes[s], &at, &hl);
                if (len < want_at + header) {
                    CHECK_MSG(r == KD_REPLY_SCAN_MORE, "size %zu where %d len %zu: %d", sizes[s],
                              where, len, (int)r);
                } else {
                    CHECK_MSG(r == KD_REPLY_SCAN_FOUND, "size %zu where %d len %zu: %d", sizes[s],
                              where, len, (int)r);
                    CHECK_EQ_INT(at, want_at);
                    CHECK_EQ_INT(hl, header);
                }
            }
            size_t at, hl;
            CHECK(kd_reply_scan(m.bytes, m.len, msgid + 1, "y", sizes[s], &at, &hl) ==
                  KD_REPLY_SCAN_NO);
            CHECK(kd_reply_scan(m.bytes, m.len, msgid, "y", sizes[s] + 8, &at, &hl) ==
                  KD_REPLY_SCAN_NO);
            CHECK(kd_reply_scan(m.bytes, m.len, msgid, "x", sizes[s], &at, &hl) ==
                  KD_REPLY_SCAN_NO);
            /* emptied, the message is a whole msgpack object of its length minus the payload */
            if (kd_reply_scan(m.bytes, m.len, msgid, "y", sizes[s], &at, &hl) ==
                KD_REPLY_SCAN_FOUND) {
                kd_reply_scan_empty_bin(m.bytes + at, hl);
                memmove(m.bytes + at + hl, m.bytes + at + hl + sizes[s],
                        m.len - at - hl - sizes[s]);
                CHECK(kd_reply_scan(m.bytes, m.len - sizes[s], msgid, "y", 0, &at, &hl) ==
                      KD_REPLY_SCAN_FOUND);
            }
            free(m.bytes);
        }
}

static void test_other_messages(void)
{
    size_t at, hl;
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_error_response(&w, 9, -2, "no such matrix");
    message_t e = finish(&w);
    CHECK(kd_reply_scan(e.bytes, e.len, 9, "y", 0, &at, &hl) == KD_REPLY_SCAN_NO);
    free(e.bytes);
    kd_writer_init(&w);
    kd_w_notification_begin(&w, "solve.progress");
    kd_w_array(&w, 1);
    kd_w_map(&w, 1);
    kd_w_kv_int(&w, "msgid", 9);
    message_t n = finish(&w);
    CHECK(kd_reply_scan(n.bytes, n.len, 9, "y", 0, &at, &hl) == KD_REPLY_SCAN_NO);
    free(n.bytes);
    kd_writer_init(&w);
    kd_w_result_begin(&w, 9);
    kd_w_map(&w, 1);
    kd_w_kv_str(&w, "y", "not a bin");
    message_t s = finish(&w);
    CHECK(kd_reply_scan(s.bytes, s.len, 9, "y", 9, &at, &hl) == KD_REPLY_SCAN_NO);
    free(s.bytes);
    const uint8_t reserved[] = {0x94, 0x01, 0x09, 0xc0, 0x81, 0xa1, 'z', 0xc1};
    CHECK(kd_reply_scan(reserved, sizeof(reserved), 9, "y", 0, &at, &hl) == KD_REPLY_SCAN_NO);
    /* a container claiming 2^32 - 1 entries: MORE, not a read past the bytes */
    const uint8_t huge[] = {0x94, 0x01, 0x09, 0xc0, 0x81, 0xa1, 'z', 0xdd, 0xff, 0xff, 0xff, 0xff};
    CHECK(kd_reply_scan(huge, sizeof(huge), 9, "y", 0, &at, &hl) == KD_REPLY_SCAN_MORE);
}

int main(void)
{
    kd_test_seed();
    RUN(test_every_prefix);
    RUN(test_other_messages);
    return kd_test_finish();
}
