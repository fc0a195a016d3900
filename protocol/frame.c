/*
 * The msgpack framer (see frame.h): an incremental header scanner over one growable buffer.
 *
 * The scanner reads one msgpack header at a time and never looks inside str/bin/ext payloads: it
 * keeps a stack of how many objects each open array/map still expects, so it knows the message is
 * complete when the stack empties. `scan` is the offset (from the start of the message, at `head`)
 * of the next header; after a header it jumps over the payload, so it can run ahead of the bytes
 * received. Because a header declares its payload size, a message is refused as soon as a header
 * pushes the offset (plus one byte for every object still expected) past max_message.
 *
 * A refused message is then scanned the same way in discard mode: every byte up to `scan` is
 * dropped as soon as it arrives, so a bin32 of 4 GiB costs a few bytes of buffer, not 4 GiB.
 */
#include "protocol/frame.h"

#include "common/checked.h"
#include "common/error.h"
#include "common/recycle.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_FRAME_READ_CHUNK ((size_t)64 << 10)
#define KD_FRAME_SLACK ((size_t)4 << 10) /* past a message's declared size, when growing to it */
#define KD_FRAME_SEEN 4                   /* large requests remembered a connection (kd_frame_t) */
#define KD_FRAME_MIN_ROOM ((size_t)512)  /* a large message's last reads take what room is left */

/* The structure of the message being scanned. */
struct kd_scan {
    uint64_t open[KD_FRAME_DEPTH_MAX]; /* objects each open container still expects */
    int depth;
    int started;
    uint64_t pending;  /* sum of open[]: each needs at least one more byte */
    uint64_t elements; /* objects declared inside containers so far (saturating) */
    /* [0, msgid, ...]: the msgpack-rpc request envelope, read for refusals */
    int root_array;
    uint64_t root_items;
    int is_request;
    int has_msgid;
    uint64_t msgid;
};

struct kd_frame {
    kd_frame_limits_t limits;
    char *buf;
    size_t cap;
    size_t head; /* first byte not yet handed out or dropped */
    size_t tail; /* end of the bytes received */
    uint64_t scan;
    struct kd_scan s;
    int discarding;
    int failed;
    int recycle;  /* kd_frame_use_recycled */
    int recycled; /* buf came from kd_recycle_alloc: never realloc'd, freed with kd_recycle_free */
    /* The message's first payload of KD_RECYCLE_MIN bytes or more (0: none yet), and the sizes
     * of the last messages that had one, by that payload's size: a client that repeats a request
     * (a time step's put) declares its bins one at a time, and growing the buffer to the whole
     * message at the first of them saves a move into fresh pages per later bin. */
    uint64_t first_big;
    struct {
        uint64_t first_big, len;
    } seen[KD_FRAME_SEEN];
    char error[sizeof(((kd_frame_event_t *)0)->message)];
};

static uint64_t kd_load_be(const uint8_t *p, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

int kd_frame_head_parse(const uint8_t *p, size_t avail, kd_frame_head_t *h)
{
    memset(h, 0, sizeof(*h));
    if (avail == 0)
        return 0;
    uint8_t b = p[0];
    size_t field = 0; /* bytes of a big-endian size or integer field after the first byte */
    h->len = 1;
    if (b <= 0x7f) {
        h->is_int = 1;
        h->uval = b;
        return 1;
    }
    if (b >= 0xe0) {
        h->is_int = 1;
        h->negative = 1;
        return 1;
    }
    if (b <= 0x8f) {
        h->container = 1;
        h->items = 2u * (b & 0x0fu);
        return 1;
    }
    if (b <= 0x9f) {
        h->container = h->is_array = 1;
        h->items = b & 0x0fu;
        return 1;
    }
    if (b <= 0xbf) {
        h->payload = b & 0x1fu;
        return 1;
    }
    switch (b) {
    case 0xc0: /* nil */
    case 0xc2: /* false */
    case 0xc3: /* true */
        return 1;
    case 0xc1:
        return -1;
    case 0xc4: /* bin 8/16/32 */
    case 0xc5:
    case 0xc6:
        field = (size_t)1 << (b - 0xc4);
        break;
    case 0xc7: /* ext 8/16/32: size, then a type byte */
    case 0xc8:
    case 0xc9:
        field = (size_t)1 << (b - 0xc7);
        h->len = 2;
        break;
    case 0xca:
        h->payload = 4;
        return 1;
    case 0xcb:
        h->payload = 8;
        return 1;
    case 0xcc: /* uint 8/16/32/64 */
    case 0xcd:
    case 0xce:
    case 0xcf:
        field = (size_t)1 << (b - 0xcc);
        h->is_int = 1;
        break;
    case 0xd0: /* int 8/16/32/64 */
    case 0xd1:
    case 0xd2:
    case 0xd3:
        field = (size_t)1 << (b - 0xd0);
        h->is_int = 1;
        break;
    case 0xd4: /* fixext 1/2/4/8/16: a type byte, then the data */
    case 0xd5:
    case 0xd6:
    case 0xd7:
    case 0xd8:
        h->len = 2;
        h->payload = (uint64_t)1 << (b - 0xd4);
        return avail >= 2;
    case 0xd9: /* str 8/16/32 */
    case 0xda:
    case 0xdb:
        field = (size_t)1 << (b - 0xd9);
        break;
    case 0xdc: /* array 16/32 */
    case 0xdd:
        field = (size_t)2 << (b - 0xdc);
        h->container = h->is_array = 1;
        break;
    default: /* 0xde, 0xdf: map 16/32 */
        field = (size_t)2 << (b - 0xde);
        h->container = 1;
        break;
    }
    h->len += field;
    if (avail < h->len)
        return 0;
    uint64_t v = kd_load_be(p + 1, field);
    if (h->is_int) {
        if (b >= 0xd0 && (v >> (8 * field - 1)) != 0)
            h->negative = 1;
        else
            h->uval = v;
    } else if (h->container) {
        h->items = h->is_array ? v : 2 * v;
    } else {
        h->payload = v;
    }
    return 1;
}

static int kd_scan_done(const struct kd_scan *s)
{
    return s->started && s->depth == 0;
}

/* Account for one header. Returns 0, or -1 when it nests deeper than max_depth. */
static int kd_scan_item(struct kd_scan *s, const kd_frame_head_t *h, int max_depth)
{
    if (!s->started) {
        s->started = 1;
        s->root_array = h->is_array;
        s->root_items = h->items;
    } else if (s->depth == 1 && s->root_array) {
        uint64_t index = s->root_items - s->open[0];
        if (index == 0) {
            s->is_request = h->is_int && !h->negative && h->uval == 0;
        } else if (index == 1 && s->is_request && h->is_int && !h->negative) {
            s->has_msgid = 1;
            s->msgid = h->uval;
        }
    }
    if (s->depth > 0) {
        s->open[s->depth - 1]--;
        s->pending--;
    }
    if (h->container) {
        if (s->depth >= max_depth)
            return -1;
        s->elements = h->items > UINT64_MAX - s->elements ? UINT64_MAX : s->elements + h->items;
        if (h->items > 0) {
            s->open[s->depth++] = h->items;
            s->pending += h->items;
        }
    }
    while (s->depth > 0 && s->open[s->depth - 1] == 0)
        s->depth--;
    return 0;
}

static int kd_clamp_depth(int depth)
{
    if (depth <= 0)
        return KD_FRAME_DEFAULT_MAX_DEPTH;
    return depth > KD_FRAME_DEPTH_MAX ? KD_FRAME_DEPTH_MAX : depth;
}

int kd_frame_new(const kd_frame_limits_t *limits, kd_frame_t **out)
{
    kd_frame_t *f = calloc(1, sizeof(*f));
    if (f == NULL)
        return KD_ENOMEM;
    if (limits != NULL)
        f->limits = *limits;
    if (f->limits.max_message == 0)
        f->limits.max_message = KD_FRAME_DEFAULT_MAX_MESSAGE;
    if (f->limits.max_elements == 0)
        f->limits.max_elements = KD_FRAME_DEFAULT_MAX_ELEMENTS;
    f->limits.max_depth = kd_clamp_depth(f->limits.max_depth);
    *out = f;
    return KD_OK;
}

void kd_frame_free(kd_frame_t *frame)
{
    if (frame == NULL)
        return;
    kd_recycle_free(frame->buf);
    free(frame);
}

/* The bytes (from head) the message being received needs at least, as far as its headers have
 * said: 0 when no message is under way or it is being discarded. */
static uint64_t kd_frame_declared(const kd_frame_t *f)
{
    if (!f->s.started || f->discarding || f->failed)
        return 0;
    return f->s.pending > UINT64_MAX - f->scan ? UINT64_MAX : f->scan + f->s.pending;
}

/* The size of the last message whose first large payload was as large as this one's, or 0. */
static uint64_t kd_frame_seen_len(const kd_frame_t *f)
{
    for (int i = 0; f->first_big != 0 && i < KD_FRAME_SEEN; i++)
        if (f->seen[i].first_big == f->first_big)
            return f->seen[i].len;
    return 0;
}

/* Remember a complete message of len bytes by its first large payload (newest first). */
static void kd_frame_seen_note(kd_frame_t *f, uint64_t len)
{
    if (f->first_big == 0)
        return;
    int at = KD_FRAME_SEEN - 1;
    for (int i = 0; i < KD_FRAME_SEEN; i++)
        if (f->seen[i].first_big == f->first_big) {
            at = i;
            break;
        }
    memmove(&f->seen[1], &f->seen[0], (size_t)at * sizeof(f->seen[0]));
    f->seen[0].first_big = f->first_big;
    f->seen[0].len = len;
}

/* A buffer of cap bytes holding the first `keep` bytes of the old one. */
static int kd_frame_move(kd_frame_t *f, size_t cap, size_t keep)
{
    if (f->recycle && (cap >= KD_RECYCLE_MIN || f->recycled)) {
        size_t got;
        char *fresh = kd_recycle_alloc(cap, &got);
        if (fresh == NULL)
            return KD_ENOMEM;
        if (keep > 0)
            memcpy(fresh, f->buf, keep);
        kd_recycle_free(f->buf);
        f->buf = fresh;
        f->cap = got;
        f->recycled = got >= KD_RECYCLE_MIN;
        return KD_OK;
    }
    char *grown = realloc(f->buf, cap);
    if (grown == NULL)
        return KD_ENOMEM;
    f->buf = grown;
    f->cap = cap;
    return KD_OK;
}

/* Make room for `want` more bytes after tail: move the held bytes to the front if that is not
 * enough, then grow (to the declared size of the message under way, by half at least, else
 * doubling, so a large message costs few copies) but never past what the held bytes plus `want`
 * need or max_message plus `want`, whichever is larger. */
static int kd_frame_make_room(kd_frame_t *f, size_t want)
{
    if (f->head == f->tail)
        f->head = f->tail = 0;
    if (f->cap - f->tail >= want)
        return KD_OK;
    if (f->head > 0) {
        memmove(f->buf, f->buf + f->head, f->tail - f->head);
        f->tail -= f->head;
        f->head = 0;
        if (f->cap - f->tail >= want)
            return KD_OK;
    }
    size_t need, bound;
    if (kd_add_overflow(f->tail, want, &need))
        return KD_ENOMEM;
    if (kd_add_overflow(f->limits.max_message, want, &bound))
        bound = SIZE_MAX;
    if (bound < need)
        bound = need;
    /* The message's size is known: all of it at once (a copy of the bytes held so far, no
     * more), and a little for what its last headers have not declared yet (keys after a bin);
     * exact, because a request keeps its buffer and is charged for all of it. */
    const uint64_t declared = kd_frame_declared(f);
    size_t cap = f->cap > SIZE_MAX / 2 ? SIZE_MAX : f->cap * 2;
    if (declared > f->tail && declared <= f->limits.max_message) {
        cap = (size_t)declared + KD_FRAME_SLACK;
        const uint64_t whole = kd_frame_seen_len(f);
        if (whole > declared && whole <= f->limits.max_message) /* this request again */
            cap = (size_t)whole + KD_FRAME_SLACK;
        /* Many small declarations (an array of 16,384 maps, each a small bin) move the declared
         * size a little per read: grow by half at least, or every read copies the whole buffer. */
        const size_t floor = f->cap > SIZE_MAX / 3 * 2 ? SIZE_MAX : f->cap + f->cap / 2;
        if (cap < floor)
            cap = floor;
    }
    if (cap < need)
        cap = need;
    if (cap > bound)
        cap = bound;
    return kd_frame_move(f, cap, f->tail);
}

void kd_frame_use_recycled(kd_frame_t *frame)
{
    frame->recycle = 1;
}

int kd_frame_reserve(kd_frame_t *frame, size_t suggested, char **buf, size_t *len)
{
    /* The last bytes of a large message (the keys after its last bin, not declared yet) are read
     * into the room its buffer has left rather than growing it by half for one read's worth:
     * a copy of the whole message into fresh pages, and a request charged half again its size. */
    uint64_t declared = kd_frame_declared(frame);
    const int fits = frame->head == 0 && declared >= KD_RECYCLE_MIN && declared <= frame->cap &&
                     frame->cap - frame->tail >= KD_FRAME_MIN_ROOM;
    if (!fits) {
        int rc = kd_frame_make_room(frame, suggested > 0 ? suggested : KD_FRAME_READ_CHUNK);
        if (rc != KD_OK)
            return rc;
        declared = kd_frame_declared(frame);
    }
    *buf = frame->buf + frame->tail;
    *len = frame->cap - frame->tail;
    /* A large message that starts the buffer: read no further than its end, so that it leaves
     * whole (kd_frame_emit hands the buffer over) instead of being copied out. */
    if (frame->head == 0 && declared >= KD_RECYCLE_MIN && declared > frame->tail &&
        declared - frame->tail < *len)
        *len = (size_t)(declared - frame->tail);
    return KD_OK;
}

void kd_frame_commit(kd_frame_t *frame, size_t n)
{
    if (n > frame->cap - frame->tail)
        n = frame->cap - frame->tail;
    frame->tail += n;
}

int kd_frame_feed(kd_frame_t *frame, const void *data, size_t len)
{
    if (len == 0)
        return KD_OK;
    int rc = kd_frame_make_room(frame, len);
    if (rc != KD_OK)
        return rc;
    memcpy(frame->buf + frame->tail, data, len);
    frame->tail += len;
    return KD_OK;
}

size_t kd_frame_buffered(const kd_frame_t *frame)
{
    return frame->tail - frame->head;
}

size_t kd_frame_capacity(const kd_frame_t *frame)
{
    return frame->cap;
}

int kd_frame_in_message(const kd_frame_t *frame)
{
    return frame->tail > frame->head || frame->discarding;
}

static void kd_frame_fail(kd_frame_t *f, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void kd_frame_fail(kd_frame_t *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->error, sizeof(f->error), fmt, ap);
    va_end(ap);
    f->failed = 1;
}

static void kd_frame_reset_message(kd_frame_t *f)
{
    memset(&f->s, 0, sizeof(f->s));
    f->scan = 0;
    f->discarding = 0;
    f->first_big = 0;
}

/* The message [head, head + scan) is complete: hand over the buffer when it holds nothing else
 * (and is not much larger: a request that was not the one seen before), otherwise copy the
 * message out. */
static kd_frame_kind_t kd_frame_emit(kd_frame_t *f, kd_frame_event_t *ev)
{
    size_t len = (size_t)f->scan;
    char *data;
    kd_frame_seen_note(f, len);
    const int oversized = f->recycled && f->cap - len > len / 4 + 2 * KD_FRAME_SLACK;
    if (f->head == 0 && len == f->tail && !oversized) {
        data = f->buf;
        if (f->cap - len > KD_FRAME_SLACK && !f->recycled) { /* a doubling's spare half */
            char *shrunk = realloc(data, len);
            if (shrunk != NULL)
                data = shrunk;
        }
        f->buf = NULL;
        f->cap = f->head = f->tail = 0;
        f->recycled = 0;
    } else {
        data = f->recycle ? kd_recycle_alloc(len, NULL) : malloc(len);
        if (data == NULL) {
            kd_frame_fail(f, "out of host memory for a %zu-byte message", len);
            ev->kind = KD_FRAME_ERROR;
            snprintf(ev->message, sizeof(ev->message), "%s", f->error);
            return ev->kind;
        }
        memcpy(data, f->buf + f->head, len);
        f->head += len;
        if (oversized && f->head == f->tail) { /* back to the shelf, not kept idle here */
            kd_recycle_free(f->buf);
            f->buf = NULL;
            f->cap = f->head = f->tail = 0;
            f->recycled = 0;
        }
    }
    kd_frame_reset_message(f);
    ev->kind = KD_FRAME_MESSAGE;
    ev->data = data;
    ev->len = len;
    return ev->kind;
}

/* After a header in normal mode: refuse the message if it is now known to be over a limit. */
static int kd_frame_over_limit(kd_frame_t *f, kd_frame_event_t *ev)
{
    const kd_frame_limits_t *lim = &f->limits;
    uint64_t least = f->s.pending > UINT64_MAX - f->scan ? UINT64_MAX : f->scan + f->s.pending;
    if (f->s.elements > lim->max_elements)
        snprintf(ev->message, sizeof(ev->message),
                 "message declares %llu array/map elements, over the limit of %zu",
                 (unsigned long long)f->s.elements, lim->max_elements);
    else if (least > lim->max_message)
        snprintf(ev->message, sizeof(ev->message),
                 "message of at least %llu bytes is over the limit of %zu bytes",
                 (unsigned long long)least, lim->max_message);
    else
        return 0;
    ev->kind = KD_FRAME_TOO_LARGE;
    ev->has_msgid = f->s.has_msgid;
    ev->msgid = f->s.msgid;
    f->discarding = 1;
    return 1;
}

kd_frame_kind_t kd_frame_next(kd_frame_t *f, kd_frame_event_t *ev)
{
    memset(ev, 0, sizeof(*ev));
    for (;;) {
        if (f->failed) {
            f->head = f->tail = 0;
            ev->kind = KD_FRAME_ERROR;
            snprintf(ev->message, sizeof(ev->message), "%s", f->error);
            return ev->kind;
        }
        size_t avail = f->tail - f->head;
        if (f->discarding) {
            size_t drop = f->scan < avail ? (size_t)f->scan : avail;
            f->head += drop;
            f->scan -= drop;
            avail -= drop;
        }
        if (kd_scan_done(&f->s)) {
            if (f->scan > avail)
                break;
            if (!f->discarding)
                return kd_frame_emit(f, ev);
            kd_frame_reset_message(f);
            continue;
        }
        if (f->scan >= avail)
            break;
        const uint8_t *p = (const uint8_t *)f->buf + f->head + f->scan;
        kd_frame_head_t h;
        int rc = kd_frame_head_parse(p, avail - (size_t)f->scan, &h);
        if (rc == 0)
            break;
        if (rc < 0) {
            kd_frame_fail(f, "byte 0xc1 at offset %llu of a message is not msgpack",
                          (unsigned long long)f->scan);
            continue;
        }
        if (kd_scan_item(&f->s, &h, f->limits.max_depth) < 0) {
            kd_frame_fail(f, "arrays/maps nested deeper than %d", f->limits.max_depth);
            continue;
        }
        f->scan += h.len + h.payload;
        if (f->first_big == 0 && h.payload >= KD_RECYCLE_MIN)
            f->first_big = h.payload;
        if (!f->discarding && kd_frame_over_limit(f, ev))
            return ev->kind;
    }
    ev->kind = KD_FRAME_NEED_MORE;
    return ev->kind;
}

int kd_frame_check_one(const void *data, size_t len, int max_depth)
{
    const uint8_t *p = data;
    struct kd_scan s;
    memset(&s, 0, sizeof(s));
    max_depth = kd_clamp_depth(max_depth);
    uint64_t pos = 0;
    while (!kd_scan_done(&s)) {
        kd_frame_head_t h;
        if (pos >= len || kd_frame_head_parse(p + pos, len - (size_t)pos, &h) != 1)
            return -1;
        if (kd_scan_item(&s, &h, max_depth) < 0)
            return -1;
        pos += h.len + h.payload;
        if (pos > len || s.pending > len - pos)
            return -1;
    }
    return pos == len ? 0 : -1;
}
