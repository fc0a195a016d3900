/*
 * Encoding msgpack-rpc messages: a growable buffer with a msgpack packer on it, and helpers for the
 * envelope of each message kind. The server writes responses and notifications with it, the
 * client library writes requests. A writer remembers the first allocation failure; check
 * kd_writer_failed() (or the return of kd_writer_release) once at the end instead of after every
 * call.
 *
 *   request       [0, msgid, method, [params]]
 *   response      [1, msgid, error | nil, result | nil]   error = {"code": STR, "message": STR}
 *   notification  [2, method, [params]]
 */
#ifndef KD_PROTOCOL_WRITER_H
#define KD_PROTOCOL_WRITER_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* Not movable once initialised: the packer points at the buffer inside it. */
typedef struct kd_writer {
    msgpack_sbuffer sbuf;
    msgpack_packer pk;
    int failed;
    void *tail; /* kd_w_kv_bin_tail's payload, sent after sbuf's bytes (owned), or NULL */
    size_t tail_len;
} kd_writer_t;

void kd_writer_init(kd_writer_t *w);
void kd_writer_destroy(kd_writer_t *w); /* frees the bytes; the writer can be initialised again */
int kd_writer_failed(const kd_writer_t *w);
/* Hand over the bytes (malloc'd; the caller frees) and reset the writer. NULL if any write failed
 * (the bytes are freed then) or nothing was written. A tail (kd_w_kv_bin_tail) is appended: one
 * copy of it. */
void *kd_writer_release(kd_writer_t *w, size_t *len);
/* The same in two parts, the tail not copied: the head (what kd_writer_release would return
 * without the tail) and *tail / *tail_len (NULL / 0 without one; free it with kd_recycle_free). The
 * message is the head's bytes followed by the tail's. On failure both are freed and NULL. */
void *kd_writer_release_parts(kd_writer_t *w, size_t *len, void **tail, size_t *tail_len);

void kd_w_nil(kd_writer_t *w);
void kd_w_bool(kd_writer_t *w, int v);
void kd_w_int(kd_writer_t *w, int64_t v);
void kd_w_uint(kd_writer_t *w, uint64_t v);
void kd_w_double(kd_writer_t *w, double v);
void kd_w_str(kd_writer_t *w, const char *s); /* NUL-terminated; NULL writes nil */
void kd_w_strn(kd_writer_t *w, const char *s, size_t len);
void kd_w_bin(kd_writer_t *w, const void *data, size_t len); /* over 4 GiB - 1 fails the writer */
void kd_w_array(kd_writer_t *w, uint32_t n);
void kd_w_map(kd_writer_t *w, uint32_t n);

/* key + value in a map; kd_w_key alone is followed by any value (a nested map or array) */
void kd_w_key(kd_writer_t *w, const char *key);
void kd_w_kv_nil(kd_writer_t *w, const char *key);
void kd_w_kv_bool(kd_writer_t *w, const char *key, int v);
void kd_w_kv_int(kd_writer_t *w, const char *key, int64_t v);
void kd_w_kv_uint(kd_writer_t *w, const char *key, uint64_t v);
void kd_w_kv_double(kd_writer_t *w, const char *key, double v);
void kd_w_kv_str(kd_writer_t *w, const char *key, const char *v);
void kd_w_kv_bin(kd_writer_t *w, const char *key, const void *data, size_t len);
/* key + a bin whose payload is not copied into the writer: payload (malloc'd or from
 * common/recycle.h, freed with kd_recycle_free; taken in every case, even by a failed writer)
 * becomes the message's tail, after every byte written so far, so it must be the message's last
 * object (the last value of the outermost open map). A large vector in a response goes this way:
 * read from the device into payload, then written to the socket from there. Writing anything after
 * it fails the writer. */
void kd_w_kv_bin_tail(kd_writer_t *w, const char *key, void *payload, size_t len);

/* [0, msgid, method, — the caller then writes the params array (kd_w_array(w, 1); kd_w_map...). */
void kd_w_request_begin(kd_writer_t *w, uint64_t msgid, const char *method);
/* [1, msgid, nil, — the caller then writes the result. */
void kd_w_result_begin(kd_writer_t *w, uint64_t msgid);
/* A whole error response [1, msgid, {"code", "message"}, nil]; code is a KD_E* value. */
void kd_w_error_response(kd_writer_t *w, uint64_t msgid, int code, const char *message);
/* [2, method, — the caller then writes the params array. */
void kd_w_notification_begin(kd_writer_t *w, const char *method);

#endif
