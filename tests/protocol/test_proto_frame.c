/*
 * The msgpack framer: every msgpack type, messages split at every byte and glued together,
 * refusal by declared size (with the msgid) and discarding without buffering, depth and element
 * bombs, the reserved byte, the memory bound of the reserve/commit path, and random garbage at
 * random split points (run under ASan in CI).
 */
#include "common/error.h"
#include "common/recycle.h"
#include "kd_test.h"
#include "protocol/frame.h"
#include "protocol/request.h"
#include "protocol/writer.h"

#include <msgpack.h>

/* A byte string built by hand, so each msgpack encoding (also non-minimal ones) is chosen. */
typedef struct bytes {
    uint8_t *p;
    size_t n, cap;
} bytes_t;

static void put(bytes_t *b, const void *data, size_t n)
{
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2;
        b->p = realloc(b->p, b->cap);
        if (b->p == NULL)
            abort();
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void put_u8(bytes_t *b, uint8_t v)
{
    put(b, &v, 1);
}

/* A first byte and a big-endian field of `size` bytes. */
static void put_be(bytes_t *b, uint8_t first, uint64_t v, size_t size)
{
    put_u8(b, first);
    for (size_t i = size; i-- > 0;)
        put_u8(b, (uint8_t)(v >> (8 * i)));
}

static void put_fill(bytes_t *b, uint8_t byte, size_t n)
{
    for (size_t i = 0; i < n; i++)
        put_u8(b, byte);
}

/* A map of one entry per msgpack format family, every header form of each. */
static void put_every_type(bytes_t *b)
{
    put_be(b, 0xdf, 13, 4); /* map32 of 13 entries */
    put_u8(b, 0xa3);
    put(b, "int", 3);
    put_be(b, 0xdc, 10, 2); /* array16 of the integer forms */
    put_u8(b, 0x05);
    put_u8(b, 0xe7); /* -25 */
    put_be(b, 0xcc, 200, 1);
    put_be(b, 0xcd, 60000, 2);
    put_be(b, 0xce, 4000000000u, 4);
    put_be(b, 0xcf, UINT64_MAX, 8);
    put_be(b, 0xd0, 0x80, 1);
    put_be(b, 0xd1, 0x7fff, 2);
    put_be(b, 0xd2, 0x80000000u, 4);
    put_be(b, 0xd3, 42, 8);
    put_u8(b, 0xa3);
    put(b, "nil", 3);
    put_u8(b, 0xc0);
    put_u8(b, 0xa4);
    put(b, "bool", 4);
    put_be(b, 0xdd, 2, 4); /* array32 */
    put_u8(b, 0xc2);
    put_u8(b, 0xc3);
    put_u8(b, 0xa3);
    put(b, "f32", 3);
    put_be(b, 0xca, 0x3fc00000u, 4);
    put_u8(b, 0xa3);
    put(b, "f64", 3);
    put_be(b, 0xcb, 0x3ff8000000000000ull, 8);
    put_be(b, 0xd9, 4, 1); /* str8 key */
    put(b, "str8", 4);
    put_be(b, 0xda, 5, 2); /* str16 value */
    put(b, "hello", 5);
    put_u8(b, 0xa5);
    put(b, "str32", 5);
    put_be(b, 0xdb, 300, 4);
    put_fill(b, 'z', 300);
    put_u8(b, 0xa3);
    put(b, "bin", 3);
    put_u8(b, 0x93);
    put_be(b, 0xc4, 3, 1);
    put(b, "abc", 3);
    put_be(b, 0xc5, 0, 2);
    put_be(b, 0xc6, 260, 4);
    put_fill(b, 0xc1, 260); /* the reserved byte inside a payload is only data */
    put_u8(b, 0xa6);
    put(b, "fixext", 6);
    put_u8(b, 0x95);
    for (int k = 0; k < 5; k++) {
        put_be(b, (uint8_t)(0xd4 + k), 7, 1); /* type 7 */
        put_fill(b, 0xdd, (size_t)1 << k);
    }
    put_u8(b, 0xa3);
    put(b, "ext", 3);
    put_u8(b, 0x93);
    put_be(b, 0xc7, 2, 1);
    put_u8(b, 0x01);
    put(b, "xy", 2);
    put_be(b, 0xc8, 3, 2);
    put_u8(b, 0xfe);
    put(b, "xyz", 3);
    put_be(b, 0xc9, 1, 4);
    put_u8(b, 0x02);
    put_u8(b, 0xcf);
    put_u8(b, 0xa4);
    put(b, "maps", 4);
    put_u8(b, 0x93);
    put_u8(b, 0x80); /* empty fixmap */
    put_be(b, 0xde, 1, 2);
    put_u8(b, 0x01);
    put_u8(b, 0x90); /* empty fixarray */
    put_be(b, 0xdf, 0, 4);
    put_u8(b, 0xa6);
    put(b, "nested", 6);
    put_u8(b, 0x91);
    put_u8(b, 0x91);
    put_u8(b, 0x81);
    put_u8(b, 0x00);
    put_u8(b, 0x91);
    put_u8(b, 0xc0);
    put_u8(b, 0xa5);
    put(b, "empty", 5);
    put_u8(b, 0xa0); /* fixstr of length 0 */
}

static void put_request(bytes_t *b, uint64_t msgid, const char *method)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_request_begin(&w, msgid, method);
    kd_w_array(&w, 1);
    kd_w_map(&w, 1);
    kd_w_kv_int(&w, "timeout_ms", (int64_t)msgid);
    size_t len;
    void *data = kd_writer_release(&w, &len);
    if (data == NULL)
        abort();
    put(b, data, len);
    free(data);
    kd_writer_destroy(&w);
}

/* One message per element of `ends`: ends[i] is where message i ends in the stream. */
typedef struct expect {
    const uint8_t *stream;
    size_t ends[64];
    int count;
} expect_t;

static void mark_end(expect_t *e, const bytes_t *b)
{
    e->stream = b->p;
    e->ends[e->count++] = b->n;
}

/* Drain the frame, comparing each message with the next expected one; returns the events seen
 * or -1 on anything but messages. */
static int drain(kd_frame_t *f, const expect_t *e, int *next)
{
    kd_frame_event_t ev;
    int seen = 0;
    while (kd_frame_next(f, &ev) != KD_FRAME_NEED_MORE) {
        if (ev.kind != KD_FRAME_MESSAGE || *next >= e->count) {
            CHECK_MSG(0, "unexpected event %d (%s)", (int)ev.kind, ev.message);
            free(ev.data);
            return -1;
        }
        size_t start = *next == 0 ? 0 : e->ends[*next - 1];
        size_t len = e->ends[*next] - start;
        CHECK_EQ_INT(ev.len, len);
        CHECK(ev.len == len && memcmp(ev.data, e->stream + start, len) == 0);
        free(ev.data);
        (*next)++;
        seen++;
    }
    return seen;
}

static kd_frame_t *new_frame(size_t max_message, size_t max_elements, int max_depth)
{
    kd_frame_limits_t limits = {max_message, max_elements, max_depth};
    kd_frame_t *f = NULL;
    if (kd_frame_new(&limits, &f) != KD_OK)
        abort();
    return f;
}

/* Every msgpack type in one message, unpacked by msgpack-c to exactly its length. */
static void test_every_type(void)
{
    bytes_t b = {0};
    put_every_type(&b);
    CHECK_EQ_INT(kd_frame_check_one(b.p, b.n, 0), 0);
    kd_frame_t *f = new_frame(0, 0, 0);
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    kd_frame_event_t ev;
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    CHECK_EQ_INT(ev.len, b.n);
    CHECK(memcmp(ev.data, b.p, b.n) == 0);
    CHECK_EQ_INT(kd_frame_buffered(f), 0);
    msgpack_unpacked u;
    msgpack_unpacked_init(&u);
    size_t off = 0;
    msgpack_unpack_return ur = msgpack_unpack_next(&u, ev.data, ev.len, &off);
    CHECK(ur == MSGPACK_UNPACK_SUCCESS || ur == MSGPACK_UNPACK_EXTRA_BYTES);
    CHECK_EQ_INT(off, b.n);
    CHECK(u.data.type == MSGPACK_OBJECT_MAP && u.data.via.map.size == 13);
    msgpack_unpacked_destroy(&u);
    free(ev.data);
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_NEED_MORE);
    /* every proper prefix is incomplete, and so is the message with one byte more */
    for (size_t k = 0; k < b.n; k++)
        CHECK(kd_frame_check_one(b.p, k, 0) == -1);
    put_u8(&b, 0xc0);
    CHECK_EQ_INT(kd_frame_check_one(b.p, b.n, 0), -1);
    kd_frame_free(f);
    free(b.p);
}

static void build_stream(bytes_t *b, expect_t *e)
{
    put_every_type(b);
    mark_end(e, b);
    put_request(b, 1, "server.status");
    mark_end(e, b);
    put_u8(b, 0x07); /* a bare fixint is a message too */
    mark_end(e, b);
    put_request(b, UINT64_MAX, "solve");
    mark_end(e, b);
    put_be(b, 0xc5, 700, 2); /* bin16 of 700 */
    put_fill(b, 0x91, 700);
    mark_end(e, b);
    put_u8(b, 0x90);
    mark_end(e, b);
}

/* The stream cut in two at every byte: the same messages come out. */
static void test_split_everywhere(void)
{
    bytes_t b = {0};
    expect_t e = {0};
    build_stream(&b, &e);
    for (size_t k = 0; k <= b.n; k++) {
        kd_frame_t *f = new_frame(0, 0, 0);
        int next = 0;
        REQUIRE(kd_frame_feed(f, b.p, k) == KD_OK);
        drain(f, &e, &next);
        REQUIRE(kd_frame_feed(f, b.p + k, b.n - k) == KD_OK);
        drain(f, &e, &next);
        CHECK_MSG(next == e.count, "split at %zu: %d of %d messages", k, next, e.count);
        CHECK_EQ_INT(kd_frame_buffered(f), 0);
        kd_frame_free(f);
    }
    /* one byte at a time */
    kd_frame_t *f = new_frame(0, 0, 0);
    int next = 0;
    for (size_t k = 0; k < b.n; k++) {
        REQUIRE(kd_frame_feed(f, b.p + k, 1) == KD_OK);
        drain(f, &e, &next);
    }
    CHECK_EQ_INT(next, e.count);
    kd_frame_free(f);
    free(b.p);
}

/* Many messages in one read, then random chunkings through reserve/commit. */
static void test_glued_and_random_chunks(void)
{
    bytes_t b = {0};
    expect_t e = {0};
    for (int i = 0; i < 10; i++)
        build_stream(&b, &e);
    REQUIRE(e.count == 60);
    kd_frame_t *f = new_frame(0, 0, 0);
    int next = 0;
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    CHECK_EQ_INT(drain(f, &e, &next), 60);
    kd_frame_free(f);

    for (int round = 0; round < 200; round++) {
        f = new_frame(0, 0, 0);
        next = 0;
        size_t pos = 0;
        while (pos < b.n) {
            char *buf;
            size_t cap;
            size_t suggested = (size_t)kd_test_rand_below(300) + 1;
            REQUIRE(kd_frame_reserve(f, suggested, &buf, &cap) == KD_OK);
            REQUIRE(cap >= 1);
            size_t n = (size_t)kd_test_rand_below((int64_t)cap) + 1;
            if (n > b.n - pos)
                n = b.n - pos;
            memcpy(buf, b.p + pos, n);
            kd_frame_commit(f, n);
            pos += n;
            drain(f, &e, &next);
        }
        CHECK_EQ_INT(next, 60);
        kd_frame_free(f);
    }
    free(b.p);
}

/* A message that fills the reserved buffer exactly is handed over, not copied. */
static void test_handover_without_copy(void)
{
    bytes_t b = {0};
    put_request(&b, 9, "matrix.list");
    kd_frame_t *f = new_frame(0, 0, 0);
    char *buf;
    size_t cap;
    REQUIRE(kd_frame_reserve(f, b.n, &buf, &cap) == KD_OK);
    REQUIRE(cap == b.n);
    memcpy(buf, b.p, b.n);
    kd_frame_commit(f, b.n);
    kd_frame_event_t ev;
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    CHECK(ev.data == (void *)buf);
    CHECK_EQ_INT(ev.len, b.n);
    free(ev.data);
    /* with a second message behind it, the first is copied out and the second stays */
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    REQUIRE(kd_frame_feed(f, b.p, 3) == KD_OK);
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    CHECK(memcmp(ev.data, b.p, b.n) == 0);
    free(ev.data);
    CHECK_EQ_INT(kd_frame_buffered(f), 3);
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_NEED_MORE);
    kd_frame_free(f);
    free(b.p);
}

/* A large message (a 3 MiB bin) received as a socket would, glued to the next one: once its
 * headers are in, the buffer grows at once to the declared size (and a few KiB), the space offered
 * stops at the
 * message's end, and the message is handed over in the buffer it was received into (no copy);
 * with recycling, its buffer comes back to the shelf and serves the next large message. */
static void test_large_message_in_place(int recycle)
{
    bytes_t big = {0}, next = {0};
    const size_t payload = (size_t)3 << 20;
    unsigned char head[64];
    size_t h = 0;
    head[h++] = 0x94, head[h++] = 0x00, head[h++] = 0x05; /* [0, 5, */
    head[h++] = 0xa4, memcpy(head + h, "spmv", 4), h += 4;
    head[h++] = 0x91, head[h++] = 0x81, head[h++] = 0xa1, head[h++] = 'x'; /* [{"x": */
    head[h++] = 0xc6, head[h++] = 0, head[h++] = 0x30, head[h++] = 0, head[h++] = 0;
    put(&big, head, h);
    char *body = malloc(payload);
    REQUIRE(body != NULL);
    for (size_t i = 0; i < payload; i++)
        body[i] = (char)(kd_test_rand_u64() & 0xff);
    put(&big, body, payload);
    put_request(&next, 6, "matrix.list");
    kd_frame_t *f = new_frame(0, 0, 0);
    if (recycle)
        kd_frame_use_recycled(f);
    for (int round = 0; round < 2; round++) {
        size_t sent = 0, copies = 0;
        char *first = NULL;
        kd_frame_event_t ev;
        kd_frame_kind_t kind = KD_FRAME_NEED_MORE;
        while (kind == KD_FRAME_NEED_MORE) {
            char *space;
            size_t room;
            REQUIRE(kd_frame_reserve(f, 65536, &space, &room) == KD_OK);
            if (sent >= h) { /* the headers are in: one buffer of the message's size */
                CHECK(kd_frame_capacity(f) >= big.n && kd_frame_capacity(f) <= big.n + 65536);
                CHECK_EQ_INT(room, big.n - sent); /* never past the message's end */
                if (first == NULL)
                    first = space - sent;
                copies += space - sent != first;
            }
            size_t n = room < 200000 ? room : 200000; /* a socket's reads */
            const bytes_t *src = sent < big.n ? &big : &next;
            size_t at = sent < big.n ? sent : sent - big.n;
            if (n > src->n - at)
                n = src->n - at;
            memcpy(space, src->p + at, n);
            kd_frame_commit(f, n);
            sent += n;
            kind = kd_frame_next(f, &ev);
        }
        REQUIRE(kind == KD_FRAME_MESSAGE);
        CHECK_EQ_INT(ev.len, big.n);
        CHECK(ev.data == (void *)first); /* handed over, never copied or moved */
        CHECK_EQ_INT(copies, 0);
        CHECK(memcmp(ev.data, big.p, big.n) == 0);
        CHECK_EQ_INT(kd_frame_buffered(f), 0);
        if (recycle) {
            const size_t cap = kd_recycle_capacity(ev.data, ev.len); /* what the request holds */
            CHECK(cap >= big.n && cap <= big.n + 65536);
            kd_recycle_free(ev.data);
            CHECK(kd_recycle_idle_bytes() >= big.n); /* on the shelf for the next one */
        } else {
            free(ev.data);
        }
        REQUIRE(kd_frame_feed(f, next.p, next.n) == KD_OK);
        REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
        CHECK_EQ_INT(ev.len, next.n);
        kd_recycle_free(ev.data);
    }
    if (recycle)
        kd_recycle_set_limit(0, 0); /* empties the shelf */
    CHECK_EQ_INT(kd_recycle_idle_bytes(), 0);
    kd_frame_free(f);
    free(body);
    free(big.p);
    free(next.p);
}

static void test_large_message_in_place_malloc(void)
{
    test_large_message_in_place(0);
}

static void test_large_message_in_place_recycled(void)
{
    test_large_message_in_place(1);
}

/* [0, msgid, "matrix.put", [{"a": bin, "b": bin, ..., "name": "nnn..."}]] with bins of the given
 * sizes, fresh random contents, and a key after them (declared only when the bins are in). */
static void put_bins_request(bytes_t *b, uint64_t msgid, const size_t *sizes, int n)
{
    put_u8(b, 0x94), put_u8(b, 0x00), put_be(b, 0xcf, msgid, 8);
    put_u8(b, 0xaa), put(b, "matrix.put", 10);
    put_u8(b, 0x91), put_u8(b, (uint8_t)(0x80 | (n + 1)));
    for (int i = 0; i < n; i++) {
        put_u8(b, 0xa1), put_u8(b, (uint8_t)('a' + i));
        put_be(b, 0xc6, sizes[i], 4);
        for (size_t k = 0; k < sizes[i]; k++)
            put_u8(b, (uint8_t)(kd_test_rand_u64() & 0xff));
    }
    put_u8(b, 0xa4), put(b, "name", 4);
    put_u8(b, 0xd9), put_u8(b, 200), put_fill(b, 'n', 200);
}

/* Receive b as a socket would (reads of up to 200 KB); the message, and how many times the buffer
 * moved after its first payload of 1 MiB or more was declared (*moves) and the capacity then. */
static void receive_counting_moves(kd_frame_t *f, const bytes_t *b, kd_frame_event_t *out,
                                   int *moves, size_t *cap_after_first_big)
{
    size_t sent = 0;
    const char *base = NULL;
    *moves = 0;
    *cap_after_first_big = 0;
    kd_frame_event_t ev;
    kd_frame_kind_t kind = KD_FRAME_NEED_MORE;
    while (kind == KD_FRAME_NEED_MORE) {
        char *space;
        size_t room;
        REQUIRE(kd_frame_reserve(f, 65536, &space, &room) == KD_OK);
        if (sent >= 64) { /* past the first bin's header */
            if (base == NULL) {
                base = space - sent;
                *cap_after_first_big = kd_frame_capacity(f);
            }
            *moves += space - sent != base;
            base = space - sent;
        }
        size_t n = room < 200000 ? room : 200000;
        if (n > b->n - sent)
            n = b->n - sent;
        REQUIRE(n > 0);
        memcpy(space, b->p + sent, n);
        kd_frame_commit(f, n);
        sent += n;
        kind = kd_frame_next(f, &ev);
    }
    REQUIRE(kind == KD_FRAME_MESSAGE);
    *out = ev;
}

/* A request repeated (a time step's put: three bins declared one after the other) moves its
 * buffer as each bin is declared the first time (and never grows by half for the key after its
 * last bin: it holds at most a quarter over its size); the next times, the buffer grows to the whole
 * message at the first bin (the frame remembers the size by the first large payload's), so it
 * never moves again and is handed over whole. Another request (a different first payload) is not
 * given that size. A repeat whose later bins shrank is copied out at its own size and the large
 * buffer goes back to the shelf; the one after is sized right again. */
static void test_repeated_request_grows_once(void)
{
    const size_t mib = (size_t)1 << 20;
    const size_t put_sizes[3] = {mib + mib / 2, 5 * mib, 7 * mib}, spmv_size[1] = {3 * mib};
    const size_t shrunk[3] = {mib + mib / 2, mib, 2 * mib};
    kd_frame_t *f = new_frame(0, 0, 0);
    kd_frame_use_recycled(f);
    for (int round = 0; round < 6; round++) {
        bytes_t b = {0};
        const int is_spmv = round == 2, is_shrunk = round >= 4;
        put_bins_request(&b, (uint64_t)round, is_spmv ? spmv_size : is_shrunk ? shrunk : put_sizes,
                         is_spmv ? 1 : 3);
        int moves;
        size_t cap0;
        kd_frame_event_t ev = {0};
        receive_counting_moves(f, &b, &ev, &moves, &cap0);
        CHECK_EQ_INT(ev.len, b.n);
        CHECK_MSG(memcmp(ev.data, b.p, b.n) == 0, "round %d: the message differs", round);
        const size_t held = kd_recycle_capacity(ev.data, ev.len);
        CHECK_MSG(held >= b.n && held <= b.n + b.n / 4 + 65536,
                  "round %d: the request holds %zu bytes for %zu", round, held, b.n);
        if (round == 0)
            CHECK_MSG(moves >= 1, "the first put's buffer never moved (%d)", moves);
        if (round == 1 || round == 3 || round == 5) {
            CHECK_MSG(moves == 0, "round %d: a repeated request's buffer moved %d times", round,
                      moves);
            CHECK_MSG(cap0 >= b.n, "round %d: %zu bytes at the first bin for a %zu-byte message",
                      round, cap0, b.n);
        }
        if (is_spmv)
            CHECK_MSG(cap0 <= b.n + 65536, "another request took the put's size (%zu)", cap0);
        if (round == 4) /* sized for the old put: copied out, the large buffer not kept */
            CHECK_EQ_INT(kd_frame_capacity(f), 0);
        kd_recycle_free(ev.data);
        free(b.p);
    }
    kd_frame_free(f);
    kd_recycle_set_limit(0, 0);
}

/* [0, 77, "matrix.put", [{"values": bin32 of 4 GiB - 1}]]: refused after the bin header with the
 * msgid, its payload dropped as it arrives (never buffered), and the next message still decodes. */
static void test_bin32_4gib_refused(void)
{
    const size_t max_message = 1 << 20, chunk = 1 << 20;
    bytes_t b = {0};
    put_u8(&b, 0x94);
    put_u8(&b, 0x00);
    put_u8(&b, 77);
    put_u8(&b, 0xaa);
    put(&b, "matrix.put", 10);
    put_u8(&b, 0x91);
    put_u8(&b, 0x81);
    put_u8(&b, 0xa6);
    put(&b, "values", 6);
    put_be(&b, 0xc6, 0xffffffffu, 4);
    kd_frame_t *f = new_frame(max_message, 0, 0);
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    kd_frame_event_t ev;
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_TOO_LARGE);
    CHECK(ev.has_msgid);
    CHECK_EQ_INT(ev.msgid, 77);
    CHECK_STR_CONTAINS(ev.message, "over the limit of 1048576 bytes");
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_NEED_MORE);
    CHECK_EQ_INT(kd_frame_buffered(f), 0);

    /* 4 GiB - 1 bytes of 0xc1 (which would be an error if they were parsed), 1 MiB per read */
    uint64_t left = 0xffffffffu;
    char *filled = NULL;
    while (left > 0) {
        char *buf;
        size_t cap;
        REQUIRE(kd_frame_reserve(f, chunk, &buf, &cap) == KD_OK);
        REQUIRE(cap <= max_message + chunk);
        if (buf != filled) {
            memset(buf, 0xc1, cap);
            filled = buf;
        }
        size_t n = left < cap ? (size_t)left : cap;
        kd_frame_commit(f, n);
        left -= n;
        if (kd_frame_next(f, &ev) != KD_FRAME_NEED_MORE) {
            CHECK_MSG(0, "event %d while discarding: %s", (int)ev.kind, ev.message);
            break;
        }
        REQUIRE(kd_frame_buffered(f) == 0);
    }
    bytes_t next = {0};
    put_request(&next, 78, "server.status");
    REQUIRE(kd_frame_feed(f, next.p, next.n) == KD_OK);
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    REQUIRE(kd_request_decode(ev.data, ev.len, NULL, &req, &derr) == KD_OK);
    CHECK_EQ_INT(req->msgid, 78);
    CHECK(req->method == KD_METHOD_SERVER_STATUS);
    CHECK_EQ_INT(req->timeout_ms, 78);
    kd_request_free(req);
    kd_frame_free(f);
    free(b.p);
    free(next.p);
}

/* A too-large message glued between two good ones, cut at every byte: good, TOO_LARGE with the
 * msgid, good. The refusal is also by declared size before any payload: a str32 header. */
static void test_too_large_glued(void)
{
    bytes_t b = {0};
    put_request(&b, 1, "matrix.list");
    size_t first = b.n;
    put_u8(&b, 0x94);
    put_u8(&b, 0x00);
    put_be(&b, 0xce, 123456, 4);
    put_u8(&b, 0xa5);
    put(&b, "spmv!", 5);
    put_be(&b, 0xc5, 1500, 2);
    put_fill(&b, 0x00, 1500);
    size_t second = b.n;
    put_request(&b, 3, "matrix.list");
    for (size_t k = 0; k <= b.n; k++) {
        kd_frame_t *f = new_frame(1000, 0, 0);
        kd_frame_event_t ev;
        int got[3] = {0, 0, 0};
        for (int part = 0; part < 2; part++) {
            REQUIRE(kd_frame_feed(f, b.p + (part ? k : 0), part ? b.n - k : k) == KD_OK);
            while (kd_frame_next(f, &ev) != KD_FRAME_NEED_MORE) {
                if (ev.kind == KD_FRAME_MESSAGE) {
                    int which = got[0] ? 2 : 0;
                    size_t len = which ? b.n - second : first;
                    CHECK(ev.len == len && memcmp(ev.data, b.p + (which ? second : 0), len) == 0);
                    got[which]++;
                    free(ev.data);
                } else {
                    CHECK(ev.kind == KD_FRAME_TOO_LARGE && got[0] == 1 && !got[2]);
                    CHECK(ev.has_msgid && ev.msgid == 123456);
                    got[1]++;
                }
            }
            CHECK(kd_frame_buffered(f) <= 1000 + 9);
        }
        CHECK_MSG(got[0] == 1 && got[1] == 1 && got[2] == 1, "split at %zu: %d %d %d", k, got[0],
                  got[1], got[2]);
        kd_frame_free(f);
    }
    /* a response [1, ...] too large carries no msgid */
    kd_frame_t *f = new_frame(1000, 0, 0);
    bytes_t r = {0};
    put_u8(&r, 0x94);
    put_u8(&r, 0x01);
    put_u8(&r, 0x05);
    put_be(&r, 0xdb, 5000, 4);
    REQUIRE(kd_frame_feed(f, r.p, r.n) == KD_OK);
    kd_frame_event_t ev;
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_TOO_LARGE);
    CHECK(!ev.has_msgid);
    kd_frame_free(f);
    free(r.p);
    free(b.p);
}

/* Nesting: max_depth levels pass, one more is an error that sticks. */
static void test_depth_bomb(void)
{
    for (int depth = 1; depth <= KD_FRAME_DEPTH_MAX; depth++) {
        bytes_t b = {0};
        put_fill(&b, 0x91, (size_t)depth - 1);
        put_u8(&b, 0x90); /* the innermost, empty, still counts */
        kd_frame_t *f = new_frame(0, 0, depth);
        REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
        kd_frame_event_t ev;
        CHECK(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
        free(ev.data);
        kd_frame_free(f);
        f = new_frame(0, 0, depth - 1 > 0 ? depth - 1 : 1);
        if (depth > 1) {
            REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
            CHECK(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
        }
        kd_frame_free(f);
        free(b.p);
    }
    bytes_t b = {0};
    put_request(&b, 1, "matrix.list");
    put_fill(&b, 0x91, 100000);
    kd_frame_t *f = new_frame(0, 0, 16);
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    kd_frame_event_t ev;
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    free(ev.data);
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
    CHECK_STR_CONTAINS(ev.message, "nested deeper than 16");
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
    REQUIRE(kd_frame_feed(f, b.p, 10) == KD_OK);
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
    CHECK_EQ_INT(kd_frame_buffered(f), 0);
    kd_frame_free(f);
    /* a depth past msgpack-c's own limit is clamped */
    f = new_frame(0, 0, 1000);
    REQUIRE(kd_frame_feed(f, b.p + (b.n - 100000), KD_FRAME_DEPTH_MAX + 1) == KD_OK);
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
    CHECK(kd_frame_check_one(b.p + (b.n - 100000), 40, 1000) == -1);
    kd_frame_free(f);
    free(b.p);
}

/* 0xc1 anywhere a header is expected ends the stream; messages before it still come out. */
static void test_reserved_byte(void)
{
    static const uint8_t top[] = {0xc1};
    static const uint8_t inside[] = {0x93, 0x01, 0xa1, 'x', 0xc1, 0x00};
    kd_frame_event_t ev;
    kd_frame_t *f = new_frame(0, 0, 0);
    REQUIRE(kd_frame_feed(f, top, sizeof(top)) == KD_OK);
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
    CHECK_STR_CONTAINS(ev.message, "0xc1");
    kd_frame_free(f);

    bytes_t b = {0};
    put_request(&b, 4, "matrix.list");
    put(&b, inside, sizeof(inside));
    f = new_frame(0, 0, 0);
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    free(ev.data);
    CHECK(kd_frame_next(f, &ev) == KD_FRAME_ERROR);
    CHECK_STR_CONTAINS(ev.message, "offset 4");
    CHECK(kd_frame_check_one(inside, sizeof(inside), 0) == -1);
    kd_frame_free(f);
    free(b.p);
}

/* Element counts: array32 / map32 of 2^32-1, and many small arrays adding up past the limit. */
static void test_element_bomb(void)
{
    kd_frame_event_t ev;
    const uint8_t heads[][5] = {{0xdd, 0xff, 0xff, 0xff, 0xff}, {0xdf, 0xff, 0xff, 0xff, 0xff}};
    for (int i = 0; i < 2; i++) {
        kd_frame_t *f = new_frame((size_t)1 << 40, 1000000, 0);
        REQUIRE(kd_frame_feed(f, heads[i], 5) == KD_OK);
        CHECK(kd_frame_next(f, &ev) == KD_FRAME_TOO_LARGE);
        CHECK_STR_CONTAINS(ev.message, i ? "8589934590 array/map elements" : "4294967295 array");
        CHECK(!ev.has_msgid);
        CHECK(kd_frame_check_one(heads[i], 5, 0) == -1);
        kd_frame_free(f);
    }
    /* [0, 5, "x", [[1,2,3] x 40]] with max_elements 100: over after the 33rd inner array */
    bytes_t b = {0};
    put_u8(&b, 0x94);
    put_u8(&b, 0x00);
    put_u8(&b, 0x05);
    put_u8(&b, 0xa1);
    put_u8(&b, 'x');
    put_u8(&b, 0xdc);
    put_u8(&b, 0x00);
    put_u8(&b, 40);
    for (int i = 0; i < 40; i++) {
        put_u8(&b, 0x93);
        put_fill(&b, 0x01, 3);
    }
    bytes_t tail = {0};
    put_request(&tail, 6, "matrix.list");
    put(&b, tail.p, tail.n);
    kd_frame_t *f = new_frame(0, 100, 0);
    REQUIRE(kd_frame_feed(f, b.p, b.n) == KD_OK);
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_TOO_LARGE);
    CHECK(ev.has_msgid && ev.msgid == 5);
    CHECK_STR_CONTAINS(ev.message, "over the limit of 100");
    REQUIRE(kd_frame_next(f, &ev) == KD_FRAME_MESSAGE);
    CHECK(ev.len == tail.n && memcmp(ev.data, tail.p, tail.n) == 0);
    free(ev.data);
    kd_frame_free(f);
    free(b.p);
    free(tail.p);
}

/* A message just under max_message arriving in small reads: the buffer stays within
 * max_message + one read. */
static void test_memory_bound(void)
{
    const size_t max_message = 300000, chunk = 4096;
    bytes_t b = {0};
    put_be(&b, 0xc6, max_message - 5, 4);
    put_fill(&b, 0xab, max_message - 5);
    put_request(&b, 2, "matrix.list");
    kd_frame_t *f = new_frame(max_message, 0, 0);
    size_t pos = 0;
    int messages = 0;
    while (pos < b.n) {
        char *buf;
        size_t cap;
        REQUIRE(kd_frame_reserve(f, chunk, &buf, &cap) == KD_OK);
        CHECK(kd_frame_buffered(f) + cap <= max_message + chunk);
        size_t n = cap < b.n - pos ? cap : b.n - pos;
        n = n > chunk ? chunk : n;
        memcpy(buf, b.p + pos, n);
        kd_frame_commit(f, n);
        pos += n;
        kd_frame_event_t ev;
        while (kd_frame_next(f, &ev) == KD_FRAME_MESSAGE) {
            messages++;
            free(ev.data);
        }
        CHECK(ev.kind == KD_FRAME_NEED_MORE);
    }
    CHECK_EQ_INT(messages, 2);
    kd_frame_free(f);
    free(b.p);
}

/* Random bytes, and random corruptions of real messages, cut at random points: nothing crashes,
 * and every message the framer accepts unpacks to exactly its length and decodes or is refused. */
static void test_random_garbage(void)
{
    bytes_t good = {0};
    expect_t e = {0};
    build_stream(&good, &e);
    uint8_t *buf = malloc(good.n + 64);
    REQUIRE(buf != NULL);
    int messages = 0;
    for (int round = 0; round < 3000; round++) {
        size_t n;
        if (round % 2) {
            n = (size_t)kd_test_rand_below(200);
            for (size_t i = 0; i < n; i++)
                buf[i] = (uint8_t)kd_test_rand_u64();
        } else {
            n = good.n;
            memcpy(buf, good.p, n);
            int flips = 1 + (int)kd_test_rand_below(8);
            for (int i = 0; i < flips; i++)
                buf[kd_test_rand_below((int64_t)n)] = (uint8_t)kd_test_rand_u64();
        }
        kd_frame_t *f =
            new_frame((size_t)(64 + kd_test_rand_below(2000)),
                      (size_t)(1 + kd_test_rand_below(200)), (int)(1 + kd_test_rand_below(40)));
        size_t pos = 0;
        int dead = 0;
        while (pos < n && !dead) {
            char *space;
            size_t cap;
            REQUIRE(kd_frame_reserve(f, (size_t)kd_test_rand_below(64) + 1, &space, &cap) == KD_OK);
            size_t k = (size_t)kd_test_rand_below((int64_t)cap) + 1;
            k = k > n - pos ? n - pos : k;
            memcpy(space, buf + pos, k);
            kd_frame_commit(f, k);
            pos += k;
            kd_frame_event_t ev;
            while (kd_frame_next(f, &ev) != KD_FRAME_NEED_MORE) {
                if (ev.kind == KD_FRAME_ERROR) {
                    dead = 1;
                    break;
                }
                if (ev.kind != KD_FRAME_MESSAGE)
                    continue;
                messages++;
                CHECK(kd_frame_check_one(ev.data, ev.len, KD_FRAME_DEPTH_MAX) == 0);
                msgpack_unpacked u;
                msgpack_unpacked_init(&u);
                size_t off = 0;
                msgpack_unpack_return ur = msgpack_unpack_next(&u, ev.data, ev.len, &off);
                CHECK((ur == MSGPACK_UNPACK_SUCCESS || ur == MSGPACK_UNPACK_EXTRA_BYTES) &&
                      off == ev.len);
                msgpack_unpacked_destroy(&u);
                kd_request_t *req = NULL;
                kd_decode_error_t derr;
                int rc = kd_request_decode(ev.data, ev.len, NULL, &req, &derr);
                CHECK(rc == KD_OK || derr.err.message[0] != '\0');
                CHECK(rc != KD_EPROTO);
                kd_request_free(req);
            }
        }
        kd_frame_free(f);
    }
    CHECK(messages > 0);
    free(buf);
    free(good.p);
}

int main(void)
{
    kd_test_seed();
    RUN(test_every_type);
    RUN(test_split_everywhere);
    RUN(test_glued_and_random_chunks);
    RUN(test_handover_without_copy);
    RUN(test_large_message_in_place_malloc);
    RUN(test_large_message_in_place_recycled);
    RUN(test_repeated_request_grows_once);
    RUN(test_bin32_4gib_refused);
    RUN(test_too_large_glued);
    RUN(test_depth_bomb);
    RUN(test_reserved_byte);
    RUN(test_element_bomb);
    RUN(test_memory_bound);
    RUN(test_random_garbage);
    return kd_test_finish();
}
