/*
 * Reading unpacked msgpack objects: typed access with range checks, used by the request decoder
 * and by the client library to read responses. Each getter returns 0 on success and -1 when the
 * object is absent or has the wrong type or range; callers turn that into their own message.
 */
#ifndef KD_PROTOCOL_OBJECT_H
#define KD_PROTOCOL_OBJECT_H

#include <msgpack.h>
#include <stddef.h>
#include <stdint.h>

/* The value under a string key of a map, or NULL (also when obj is not a map). */
const msgpack_object *kd_obj_get(const msgpack_object *map, const char *key);

int kd_obj_int64(const msgpack_object *o, int64_t *out);   /* integers only */
int kd_obj_uint64(const msgpack_object *o, uint64_t *out); /* non-negative integers only */
int kd_obj_double(const msgpack_object *o, double *out);   /* float or integer */
int kd_obj_bool(const msgpack_object *o, int *out);
int kd_obj_str(const msgpack_object *o, const char **s, size_t *len);   /* str only */
int kd_obj_bytes(const msgpack_object *o, const void **p, size_t *len); /* bin or str */
int kd_obj_str_eq(const msgpack_object *o, const char *s);              /* 1 if a str equal to s */

/* Copy a str into a NUL-terminated buffer; -1 if absent, not a str, or too long. */
int kd_obj_str_copy(const msgpack_object *o, char *buf, size_t cap);

/* A short type name for messages: "map", "str", "bin", "int", ... */
const char *kd_obj_type_name(const msgpack_object *o);

/* A decoded response [1, msgid, error, result], pointing into an unpacked object. */
typedef struct kd_response_view {
    uint64_t msgid;
    const msgpack_object *error;  /* NULL when nil */
    const msgpack_object *result; /* NULL when nil */
} kd_response_view_t;

/* A decoded notification [2, method, params]. */
typedef struct kd_notification_view {
    const char *method;
    size_t method_len;
    const msgpack_object *params; /* the first params element (a map), or NULL */
} kd_notification_view_t;

/* Classify a top-level message for a client: 1 response, 2 notification (view filled), -1 other. */
int kd_obj_parse_message(const msgpack_object *root, kd_response_view_t *resp,
                         kd_notification_view_t *note);

#endif
