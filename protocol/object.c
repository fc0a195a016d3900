/*
 * Typed, range-checked reads of unpacked msgpack objects (see object.h), and the client-side split
 * of a top-level message into a response or a notification.
 */
#include "protocol/object.h"

#include <string.h>

const msgpack_object *kd_obj_get(const msgpack_object *map, const char *key)
{
    if (map == NULL || map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kd_obj_str_eq(&kv->key, key))
            return &kv->val;
    }
    return NULL;
}

int kd_obj_int64(const msgpack_object *o, int64_t *out)
{
    if (o == NULL)
        return -1;
    if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
        *out = o->via.i64;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT64_MAX) {
        *out = (int64_t)o->via.u64;
        return 0;
    }
    return -1;
}

int kd_obj_uint64(const msgpack_object *o, uint64_t *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
        return -1;
    *out = o->via.u64;
    return 0;
}

int kd_obj_double(const msgpack_object *o, double *out)
{
    if (o == NULL)
        return -1;
    switch (o->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        *out = o->via.f64;
        return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
        *out = (double)o->via.u64;
        return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        *out = (double)o->via.i64;
        return 0;
    default:
        return -1;
    }
}

int kd_obj_bool(const msgpack_object *o, int *out)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_BOOLEAN)
        return -1;
    *out = o->via.boolean ? 1 : 0;
    return 0;
}

int kd_obj_str(const msgpack_object *o, const char **s, size_t *len)
{
    if (o == NULL || o->type != MSGPACK_OBJECT_STR)
        return -1;
    *s = o->via.str.ptr;
    *len = o->via.str.size;
    return 0;
}

int kd_obj_bytes(const msgpack_object *o, const void **p, size_t *len)
{
    if (o == NULL)
        return -1;
    if (o->type == MSGPACK_OBJECT_BIN) {
        *p = o->via.bin.ptr;
        *len = o->via.bin.size;
        return 0;
    }
    if (o->type == MSGPACK_OBJECT_STR) {
        *p = o->via.str.ptr;
        *len = o->via.str.size;
        return 0;
    }
    return -1;
}

int kd_obj_str_eq(const msgpack_object *o, const char *s)
{
    size_t n = strlen(s);
    return o != NULL && o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
           memcmp(o->via.str.ptr, s, n) == 0;
}

int kd_obj_str_copy(const msgpack_object *o, char *buf, size_t cap)
{
    const char *s;
    size_t len;
    if (kd_obj_str(o, &s, &len) != 0 || len >= cap)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    return 0;
}

const char *kd_obj_type_name(const msgpack_object *o)
{
    if (o == NULL)
        return "nothing";
    switch (o->type) {
    case MSGPACK_OBJECT_NIL:
        return "nil";
    case MSGPACK_OBJECT_BOOLEAN:
        return "bool";
    case MSGPACK_OBJECT_POSITIVE_INTEGER:
    case MSGPACK_OBJECT_NEGATIVE_INTEGER:
        return "int";
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64:
        return "float";
    case MSGPACK_OBJECT_STR:
        return "str";
    case MSGPACK_OBJECT_ARRAY:
        return "array";
    case MSGPACK_OBJECT_MAP:
        return "map";
    case MSGPACK_OBJECT_BIN:
        return "bin";
    case MSGPACK_OBJECT_EXT:
        return "ext";
    }
    return "unknown";
}

static const msgpack_object *kd_obj_unless_nil(const msgpack_object *o)
{
    return o->type == MSGPACK_OBJECT_NIL ? NULL : o;
}

int kd_obj_parse_message(const msgpack_object *root, kd_response_view_t *resp,
                         kd_notification_view_t *note)
{
    uint64_t kind;
    if (root == NULL || root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size == 0 ||
        kd_obj_uint64(&root->via.array.ptr[0], &kind) != 0)
        return -1;
    const msgpack_object *e = root->via.array.ptr;
    uint32_t n = root->via.array.size;
    if (kind == 1 && n == 4) {
        if (kd_obj_uint64(&e[1], &resp->msgid) != 0)
            return -1;
        resp->error = kd_obj_unless_nil(&e[2]);
        resp->result = kd_obj_unless_nil(&e[3]);
        return 1;
    }
    if (kind == 2 && n == 3) {
        if (kd_obj_str(&e[1], &note->method, &note->method_len) != 0)
            return -1;
        const msgpack_object *params = &e[2];
        if (params->type == MSGPACK_OBJECT_ARRAY)
            note->params = params->via.array.size > 0 ? &params->via.array.ptr[0] : NULL;
        else
            note->params = kd_obj_unless_nil(params);
        return 2;
    }
    return -1;
}
