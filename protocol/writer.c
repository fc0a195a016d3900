/*
 * Writing msgpack-rpc messages (see writer.h). Every kd_w_* call is a no-op once the writer has
 * failed, so a response is written straight through and checked once, at kd_writer_release().
 */
#include "protocol/writer.h"

#include "common/error.h"
#include "common/recycle.h"

#include <stdlib.h>
#include <string.h>

/* Nothing may follow a tail: it is sent after the encoded bytes. */
#define KD_W(w, call)                                                                              \
    do {                                                                                           \
        if ((w)->tail != NULL)                                                                     \
            (w)->failed = 1;                                                                       \
        if (!(w)->failed && (call) != 0)                                                           \
            (w)->failed = 1;                                                                       \
    } while (0)

void kd_writer_init(kd_writer_t *w)
{
    msgpack_sbuffer_init(&w->sbuf);
    msgpack_packer_init(&w->pk, &w->sbuf, msgpack_sbuffer_write);
    w->failed = 0;
    w->tail = NULL;
    w->tail_len = 0;
}

void kd_writer_destroy(kd_writer_t *w)
{
    if (w == NULL)
        return;
    msgpack_sbuffer_destroy(&w->sbuf);
    msgpack_sbuffer_init(&w->sbuf);
    w->failed = 0;
    kd_recycle_free(w->tail);
    w->tail = NULL;
    w->tail_len = 0;
}

int kd_writer_failed(const kd_writer_t *w)
{
    return w->failed;
}

void *kd_writer_release(kd_writer_t *w, size_t *len)
{
    if (w->tail != NULL && !w->failed && msgpack_sbuffer_write(&w->sbuf, w->tail, w->tail_len) != 0)
        w->failed = 1;
    kd_recycle_free(w->tail);
    w->tail = NULL;
    w->tail_len = 0;
    size_t size = w->sbuf.size;
    void *data = msgpack_sbuffer_release(&w->sbuf);
    if (w->failed) {
        free(data);
        data = NULL;
        w->failed = 0;
    }
    *len = data != NULL ? size : 0;
    return data;
}

void *kd_writer_release_parts(kd_writer_t *w, size_t *len, void **tail, size_t *tail_len)
{
    *tail = w->tail;
    *tail_len = w->tail_len;
    w->tail = NULL;
    w->tail_len = 0;
    void *head = kd_writer_release(w, len);
    if (head == NULL) {
        kd_recycle_free(*tail);
        *tail = NULL;
        *tail_len = 0;
    }
    return head;
}

void kd_w_nil(kd_writer_t *w)
{
    KD_W(w, msgpack_pack_nil(&w->pk));
}

void kd_w_bool(kd_writer_t *w, int v)
{
    KD_W(w, v ? msgpack_pack_true(&w->pk) : msgpack_pack_false(&w->pk));
}

void kd_w_int(kd_writer_t *w, int64_t v)
{
    KD_W(w, msgpack_pack_int64(&w->pk, v));
}

void kd_w_uint(kd_writer_t *w, uint64_t v)
{
    KD_W(w, msgpack_pack_uint64(&w->pk, v));
}

void kd_w_double(kd_writer_t *w, double v)
{
    KD_W(w, msgpack_pack_double(&w->pk, v));
}

void kd_w_str(kd_writer_t *w, const char *s)
{
    if (s == NULL)
        kd_w_nil(w);
    else
        kd_w_strn(w, s, strlen(s));
}

void kd_w_strn(kd_writer_t *w, const char *s, size_t len)
{
    if (len > UINT32_MAX)
        w->failed = 1;
    KD_W(w, msgpack_pack_str_with_body(&w->pk, s, len));
}

void kd_w_bin(kd_writer_t *w, const void *data, size_t len)
{
    if (len > UINT32_MAX)
        w->failed = 1;
    KD_W(w, msgpack_pack_bin_with_body(&w->pk, data, len));
}

void kd_w_array(kd_writer_t *w, uint32_t n)
{
    KD_W(w, msgpack_pack_array(&w->pk, n));
}

void kd_w_map(kd_writer_t *w, uint32_t n)
{
    KD_W(w, msgpack_pack_map(&w->pk, n));
}

void kd_w_key(kd_writer_t *w, const char *key)
{
    kd_w_str(w, key);
}

void kd_w_kv_nil(kd_writer_t *w, const char *key)
{
    kd_w_key(w, key);
    kd_w_nil(w);
}

void kd_w_kv_bool(kd_writer_t *w, const char *key, int v)
{
    kd_w_key(w, key);
    kd_w_bool(w, v);
}

void kd_w_kv_int(kd_writer_t *w, const char *key, int64_t v)
{
    kd_w_key(w, key);
    kd_w_int(w, v);
}

void kd_w_kv_uint(kd_writer_t *w, const char *key, uint64_t v)
{
    kd_w_key(w, key);
    kd_w_uint(w, v);
}

void kd_w_kv_double(kd_writer_t *w, const char *key, double v)
{
    kd_w_key(w, key);
    kd_w_double(w, v);
}

void kd_w_kv_str(kd_writer_t *w, const char *key, const char *v)
{
    kd_w_key(w, key);
    kd_w_str(w, v);
}

void kd_w_kv_bin(kd_writer_t *w, const char *key, const void *data, size_t len)
{
    kd_w_key(w, key);
    kd_w_bin(w, data, len);
}

void kd_w_kv_bin_tail(kd_writer_t *w, const char *key, void *payload, size_t len)
{
    kd_w_key(w, key);
    if (len > UINT32_MAX)
        w->failed = 1;
    KD_W(w, msgpack_pack_bin(&w->pk, len));
    if (w->tail != NULL) { /* a second tail: the first stays, to be freed */
        kd_recycle_free(payload);
        return;
    }
    w->tail = payload;
    w->tail_len = len;
}

void kd_w_request_begin(kd_writer_t *w, uint64_t msgid, const char *method)
{
    kd_w_array(w, 4);
    kd_w_uint(w, 0);
    kd_w_uint(w, msgid);
    kd_w_str(w, method);
}

void kd_w_result_begin(kd_writer_t *w, uint64_t msgid)
{
    kd_w_array(w, 4);
    kd_w_uint(w, 1);
    kd_w_uint(w, msgid);
    kd_w_nil(w);
}

void kd_w_error_response(kd_writer_t *w, uint64_t msgid, int code, const char *message)
{
    kd_w_array(w, 4);
    kd_w_uint(w, 1);
    kd_w_uint(w, msgid);
    kd_w_map(w, 2);
    kd_w_kv_str(w, "code", kd_error_wire_name(code));
    kd_w_kv_str(w, "message", message != NULL ? message : kd_strerror(code));
    kd_w_nil(w);
}

void kd_w_notification_begin(kd_writer_t *w, const char *method)
{
    kd_w_array(w, 3);
    kd_w_uint(w, 2);
    kd_w_str(w, method);
}
