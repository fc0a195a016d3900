/*
 * Message framing for a msgpack byte stream: finds where each top-level msgpack object ends, so a
 * connection can be fed bytes as they arrive (messages split across reads or glued together) and
 * get back whole messages. It scans msgpack headers incrementally and never builds objects, so it
 * can refuse a message by its *declared* size (a bin32 header claiming 4 GiB is refused after five
 * bytes) and still name the msgpack-rpc msgid in the refusal; it then discards the rest of that
 * message without buffering it and goes on with the next. Bytes that are not msgpack (the
 * reserved byte 0xc1, nesting deeper than the limit) end the stream with KD_FRAME_ERROR.
 *
 * No sockets here: the caller reads into kd_frame_reserve()'s space (libuv's alloc_cb) or copies
 * with kd_frame_feed(), then drains kd_frame_next() until it says KD_FRAME_NEED_MORE.
 */
#ifndef KD_PROTOCOL_FRAME_H
#define KD_PROTOCOL_FRAME_H

#include <stddef.h>
#include <stdint.h>

/* msgpack-c's unpacker nests at most 32 containers; max_depth is clamped to this. */
#define KD_FRAME_DEPTH_MAX 32
/* Used for a limit left at zero. */
#define KD_FRAME_DEFAULT_MAX_MESSAGE ((size_t)64 << 20)
#define KD_FRAME_DEFAULT_MAX_ELEMENTS ((size_t)4 << 20)
#define KD_FRAME_DEFAULT_MAX_DEPTH 16

typedef struct kd_frame_limits {
    size_t max_message;  /* bytes in one message; larger ones are refused (TOO_LARGE) */
    size_t max_elements; /* array + map elements in one message (each costs a msgpack_object when
                            unpacked, 24x a 1-byte element; a map entry counts twice): over it is
                            TOO_LARGE */
    int max_depth;       /* nesting of arrays/maps (empty ones too); deeper is KD_FRAME_ERROR */
} kd_frame_limits_t;

typedef enum kd_frame_kind {
    KD_FRAME_NEED_MORE = 0, /* no complete message yet */
    KD_FRAME_MESSAGE = 1,   /* ev->data/len: one whole message, malloc'd (or recycled: see
                               kd_frame_use_recycled), now
                               owned by the caller */
    KD_FRAME_TOO_LARGE = 2, /* a message over a limit; its remaining bytes will be skipped */
    KD_FRAME_ERROR = 3,     /* not msgpack: the stream cannot be resynchronised; close it */
} kd_frame_kind_t;

typedef struct kd_frame_event {
    kd_frame_kind_t kind;
    void *data; /* KD_FRAME_MESSAGE: the message bytes (free() them) */
    size_t len;
    int has_msgid; /* TOO_LARGE: the message began [0, msgid, ...] and msgid was seen */
    uint64_t msgid;
    char message[256]; /* TOO_LARGE / ERROR: what was wrong, for the error response or log */
} kd_frame_event_t;

typedef struct kd_frame kd_frame_t;

/* limits may be NULL (all defaults). Returns 0 or KD_ENOMEM. */
int kd_frame_new(const kd_frame_limits_t *limits, kd_frame_t **out);
void kd_frame_free(kd_frame_t *frame); /* accepts NULL */
/* From now on a large message's buffer comes from common/recycle.h (its pages already mapped),
 * and the caller frees each KD_FRAME_MESSAGE's data with kd_recycle_free instead of free(). */
void kd_frame_use_recycled(kd_frame_t *frame);

/* Space to receive up to *len bytes into (at least 1, about `suggested`); then kd_frame_commit()
 * with the count actually written. Drain kd_frame_next() before reserving again: the buffer then
 * never grows past max_message + `suggested` (plus a partial header). Once a message's headers
 * have declared its size, the buffer is grown to hold all of it at once and the space offered
 * ends where the message does (when the message began at the buffer's start), so a large message
 * is received in place and handed over whole, never copied. Returns 0 or KD_ENOMEM. */
int kd_frame_reserve(kd_frame_t *frame, size_t suggested, char **buf, size_t *len);
void kd_frame_commit(kd_frame_t *frame, size_t n);

/* Copy bytes in (for clients and tests; the buffer grows by up to len until drained).
 * Returns 0 or KD_ENOMEM. */
int kd_frame_feed(kd_frame_t *frame, const void *data, size_t len);

/* The next event; call until KD_FRAME_NEED_MORE. After KD_FRAME_ERROR every call returns it again
 * (running out of host memory for a message copy is reported as KD_FRAME_ERROR too). */
kd_frame_kind_t kd_frame_next(kd_frame_t *frame, kd_frame_event_t *ev);

/* Bytes held in the frame buffer (for tests and memory accounting). */
size_t kd_frame_buffered(const kd_frame_t *frame);
/* Bytes allocated for the frame buffer, buffered or not (client memory accounting: after a large
 * message the buffer may stay large while holding little). */
size_t kd_frame_capacity(const kd_frame_t *frame);

/* 1 while a message has begun and not ended, after kd_frame_next() said KD_FRAME_NEED_MORE: some
 * of its bytes are buffered, or a refused message is still being discarded. For a per-message
 * deadline (slow senders). */
int kd_frame_in_message(const kd_frame_t *frame);

/* One msgpack header, as kd_frame_head_parse reads it (the framer's own scan, and libkrylov's
 * reply scan: client/reply_scan.c). */
typedef struct kd_frame_head {
    size_t len;       /* header bytes, including any size field and ext type byte */
    uint64_t payload; /* bytes after the header: str, bin and ext data, float bits */
    uint64_t items;   /* array/map: objects inside (a map entry counts twice) */
    int container;
    int is_array;
    int is_int;
    int negative;  /* a negative integer */
    uint64_t uval; /* a non-negative integer's value */
} kd_frame_head_t;

/* Parse the header at p. Returns 1, 0 when more than `avail` bytes are needed, -1 for 0xc1. */
int kd_frame_head_parse(const uint8_t *p, size_t avail, kd_frame_head_t *h);

/* 0 when data is exactly one complete msgpack object of len bytes, nested at most max_depth
 * (clamped to KD_FRAME_DEPTH_MAX) and with every declared array/map count coverable by the bytes
 * that follow; -1 otherwise. The request decoder runs it before msgpack_unpack_next, so no input
 * can make the unpacker allocate more than a small multiple of len. */
int kd_frame_check_one(const void *data, size_t len, int max_depth);

#endif
