/*
 * Decoding and validating one msgpack-rpc request (see request.h).
 *
 * The frame is checked by kd_frame_check_one() (so the unpacker's allocations are bounded by the
 * frame's length) and unpacked in place: str and bin objects point into the frame buffer, which
 * the request keeps. The params map is read once into a table indexed by parameter, rejecting
 * names the method does not take (a typo must not silently fall back to a default) and repeated
 * names; each method's decoder then reads its parameters from the table with typed helpers that
 * name the parameter in every message.
 */
#include "protocol/request.h"

#include "common/checked.h"
#include "common/csr.h"
#include "common/recycle.h"
#include "protocol/frame.h"
#include "protocol/object.h"

#include <math.h>
#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kd_request_owned {
    void *buf;
    msgpack_unpacked unpacked;
    void **arrays; /* converted from plain msgpack arrays (solve.batch: two an item at most) */
    int narrays, cap_arrays;
    void *items;  /* solve.batch's items */
    size_t bytes; /* kd_request_host_bytes */
};

/* The request and what it owns, in one allocation. */
struct kd_request_block {
    kd_request_t req;
    struct kd_request_owned owned;
};

static const char *const kd_method_names[KD_METHOD_COUNT] = {
    [KD_METHOD_MATRIX_PUT] = "matrix.put",
    [KD_METHOD_MATRIX_INFO] = "matrix.info",
    [KD_METHOD_MATRIX_LIST] = "matrix.list",
    [KD_METHOD_MATRIX_DROP] = "matrix.drop",
    [KD_METHOD_MATRIX_PIN] = "matrix.pin",
    [KD_METHOD_MATRIX_MULTIPLY] = "matrix.multiply",
    [KD_METHOD_SPMV] = "spmv",
    [KD_METHOD_SOLVE] = "solve",
    [KD_METHOD_JOB_CANCEL] = "job.cancel",
    [KD_METHOD_SERVER_STATUS] = "server.status",
    [KD_METHOD_AUTH] = "auth",
    [KD_METHOD_MATRIX_SHARE] = "matrix.share",
    [KD_METHOD_SOLVE_BATCH] = "solve.batch",
    [KD_METHOD_SHM_REGISTER] = "shm.register",
    [KD_METHOD_SHM_UNREGISTER] = "shm.unregister",
};

const char *kd_method_name(kd_method_t method)
{
    return (unsigned)method < KD_METHOD_COUNT ? kd_method_names[method] : "unknown";
}

enum kd_param {
    KD_P_TIMEOUT_MS,
    KD_P_ID,
    KD_P_ROWS,
    KD_P_COLS,
    KD_P_DTYPE,
    KD_P_INDEX_DTYPE,
    KD_P_INDPTR,
    KD_P_INDICES,
    KD_P_ROW,
    KD_P_COL,
    KD_P_VALUES,
    KD_P_MTX,
    KD_P_NAME,
    KD_P_FORMAT,
    KD_P_SELECT,
    KD_P_REORDER,
    KD_P_PIN,
    KD_P_PINNED,
    KD_P_X,
    KD_P_Y,
    KD_P_ALPHA,
    KD_P_BETA,
    KD_P_A,
    KD_P_B,
    KD_P_TRANSPOSE_A,
    KD_P_X0,
    KD_P_METHOD,
    KD_P_RTOL,
    KD_P_ATOL,
    KD_P_MAXITER,
    KD_P_NRHS,
    KD_P_CHECK_EVERY,
    KD_P_HISTORY,
    KD_P_PROGRESS,
    KD_P_PRECONDITIONER,
    KD_P_PRECONDITIONER_OPTIONS,
    KD_P_MSGID,
    KD_P_RESTART,
    KD_P_NCOLS,
    KD_P_TOKEN,
    KD_P_USER,
    KD_P_DISTRIBUTE,
    KD_P_BATCH,
    KD_P_LIKE,
    KD_P_PATTERN,
    KD_P_ITEMS,
    KD_P_REUSE_PRECONDITIONER,
    KD_P_WAIT_WARM,
    KD_P_BYTES,
    KD_P_SHM,
    KD_P_OUT,
    KD_P_PERSIST,
    KD_P_DIRECT_OPTIONS,
    KD_P_COUNT
};

static const char *const kd_param_names[KD_P_COUNT] = {
    [KD_P_TIMEOUT_MS] = "timeout_ms",
    [KD_P_ID] = "id",
    [KD_P_ROWS] = "rows",
    [KD_P_COLS] = "cols",
    [KD_P_DTYPE] = "dtype",
    [KD_P_INDEX_DTYPE] = "index_dtype",
    [KD_P_INDPTR] = "indptr",
    [KD_P_INDICES] = "indices",
    [KD_P_ROW] = "row",
    [KD_P_COL] = "col",
    [KD_P_VALUES] = "values",
    [KD_P_MTX] = "mtx",
    [KD_P_NAME] = "name",
    [KD_P_FORMAT] = "format",
    [KD_P_SELECT] = "select",
    [KD_P_REORDER] = "reorder",
    [KD_P_PIN] = "pin",
    [KD_P_PINNED] = "pinned",
    [KD_P_X] = "x",
    [KD_P_Y] = "y",
    [KD_P_ALPHA] = "alpha",
    [KD_P_BETA] = "beta",
    [KD_P_A] = "a",
    [KD_P_B] = "b",
    [KD_P_TRANSPOSE_A] = "transpose_a",
    [KD_P_X0] = "x0",
    [KD_P_METHOD] = "method",
    [KD_P_RTOL] = "rtol",
    [KD_P_ATOL] = "atol",
    [KD_P_MAXITER] = "maxiter",
    [KD_P_NRHS] = "nrhs",
    [KD_P_CHECK_EVERY] = "check_every",
    [KD_P_HISTORY] = "history",
    [KD_P_PROGRESS] = "progress",
    [KD_P_PRECONDITIONER] = "preconditioner",
    [KD_P_PRECONDITIONER_OPTIONS] = "preconditioner_options",
    [KD_P_MSGID] = "msgid",
    [KD_P_RESTART] = "restart",
    [KD_P_NCOLS] = "ncols",
    [KD_P_TOKEN] = "token",
    [KD_P_USER] = "user",
    [KD_P_DISTRIBUTE] = "distribute",
    [KD_P_BATCH] = "batch",
    [KD_P_LIKE] = "like",
    [KD_P_PATTERN] = "pattern",
    [KD_P_ITEMS] = "items",
    [KD_P_REUSE_PRECONDITIONER] = "reuse_preconditioner",
    [KD_P_WAIT_WARM] = "wait_warm",
    [KD_P_BYTES] = "bytes",
    [KD_P_SHM] = "shm",
    [KD_P_OUT] = "out",
    [KD_P_PERSIST] = "persist",
    [KD_P_DIRECT_OPTIONS] = "direct_options",
};

#define KD_BIT(p) ((uint64_t)1 << KD_P_##p)

/* How a new matrix is kept: matrix.put's and matrix.multiply's options. */
#define KD_MATRIX_OPTIONS                                                                          \
    (KD_BIT(NAME) | KD_BIT(FORMAT) | KD_BIT(SELECT) | KD_BIT(REORDER) | KD_BIT(PIN))

/* The parameters each method takes (every method also takes timeout_ms). */
static const uint64_t kd_method_params[KD_METHOD_COUNT] = {
    [KD_METHOD_MATRIX_PUT] = KD_BIT(ROWS) | KD_BIT(COLS) | KD_BIT(DTYPE) | KD_BIT(INDEX_DTYPE) |
                             KD_BIT(INDPTR) | KD_BIT(INDICES) | KD_BIT(ROW) | KD_BIT(COL) |
                             KD_BIT(VALUES) | KD_BIT(MTX) | KD_MATRIX_OPTIONS | KD_BIT(BATCH) |
                             KD_BIT(DISTRIBUTE) | KD_BIT(LIKE) | KD_BIT(PATTERN) | KD_BIT(PERSIST),
    [KD_METHOD_MATRIX_INFO] = KD_BIT(ID),
    [KD_METHOD_MATRIX_LIST] = 0,
    [KD_METHOD_MATRIX_DROP] = KD_BIT(ID),
    [KD_METHOD_MATRIX_PIN] = KD_BIT(ID) | KD_BIT(PINNED),
    [KD_METHOD_MATRIX_MULTIPLY] = KD_BIT(A) | KD_BIT(B) | KD_BIT(TRANSPOSE_A) | KD_MATRIX_OPTIONS,
    [KD_METHOD_SPMV] = KD_BIT(ID) | KD_BIT(DTYPE) | KD_BIT(X) | KD_BIT(Y) | KD_BIT(ALPHA) |
                       KD_BIT(BETA) | KD_BIT(NCOLS) | KD_BIT(OUT),
    [KD_METHOD_SOLVE] = KD_BIT(ID) | KD_BIT(DTYPE) | KD_BIT(B) | KD_BIT(X0) | KD_BIT(METHOD) |
                        KD_BIT(RTOL) | KD_BIT(ATOL) | KD_BIT(MAXITER) | KD_BIT(NRHS) |
                        KD_BIT(CHECK_EVERY) | KD_BIT(HISTORY) | KD_BIT(PROGRESS) |
                        KD_BIT(PRECONDITIONER) | KD_BIT(PRECONDITIONER_OPTIONS) | KD_BIT(RESTART) |
                        KD_BIT(REUSE_PRECONDITIONER) | KD_BIT(OUT) | KD_BIT(DIRECT_OPTIONS),
    [KD_METHOD_JOB_CANCEL] = KD_BIT(MSGID),
    [KD_METHOD_SERVER_STATUS] = KD_BIT(WAIT_WARM),
    [KD_METHOD_AUTH] = KD_BIT(NAME) | KD_BIT(TOKEN),
    [KD_METHOD_MATRIX_SHARE] = KD_BIT(ID) | KD_BIT(USER),
    [KD_METHOD_SOLVE_BATCH] = KD_BIT(ITEMS) | KD_BIT(DTYPE) | KD_BIT(METHOD) |
                              KD_BIT(PRECONDITIONER) | KD_BIT(RTOL) | KD_BIT(ATOL) |
                              KD_BIT(MAXITER) | KD_BIT(HISTORY) | KD_BIT(RESTART),
    [KD_METHOD_SHM_REGISTER] = KD_BIT(BYTES) | KD_BIT(NAME),
    [KD_METHOD_SHM_UNREGISTER] = KD_BIT(SHM),
};

struct kd_decoder {
    kd_request_t *req;
    const kd_proto_limits_t *limits;
    kd_err_t *err;
    const char *method;                      /* its name, for messages */
    const msgpack_object *param[KD_P_COUNT]; /* NULL when absent or nil */
};

/* Up to 40 bytes of a string from the wire, fit for an error message: bytes other than printable
 * ASCII become '?', and a longer string ends in "...". */
static const char *kd_printable(char out[48], const char *s, size_t len)
{
    size_t n = len > 40 ? 40 : len;
    for (size_t i = 0; i < n; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    strcpy(out + n, len > n ? "..." : "");
    return out;
}

static int kd_missing(struct kd_decoder *d, enum kd_param p)
{
    return kd_err_set(d->err, KD_EBADREQ, "missing parameter '%s' for %s", kd_param_names[p],
                      d->method);
}

/* An integer >= min, or def when absent. */
static int kd_param_int(struct kd_decoder *d, enum kd_param p, int64_t min, int64_t def,
                        int64_t *out)
{
    const msgpack_object *o = d->param[p];
    *out = def;
    if (o == NULL)
        return KD_OK;
    if (kd_obj_int64(o, out) != 0) {
        if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
            return kd_err_set(d->err, KD_ETOOLARGE, "%s = %llu is too large", kd_param_names[p],
                              (unsigned long long)o->via.u64);
        return kd_err_set(d->err, KD_EBADREQ, "%s must be an integer, got %s", kd_param_names[p],
                          kd_obj_type_name(o));
    }
    if (*out < min)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be >= %lld, got %lld", kd_param_names[p],
                          (long long)min, (long long)*out);
    return KD_OK;
}

/* A finite number >= min, or def when absent. */
static int kd_param_double(struct kd_decoder *d, enum kd_param p, double min, double def,
                           double *out)
{
    const msgpack_object *o = d->param[p];
    *out = def;
    if (o == NULL)
        return KD_OK;
    if (kd_obj_double(o, out) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a number, got %s", kd_param_names[p],
                          kd_obj_type_name(o));
    if (!isfinite(*out))
        return kd_err_set(d->err, KD_EBADREQ, "%s must be finite, got %g", kd_param_names[p], *out);
    if (*out < min)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be >= %g, got %g", kd_param_names[p], min,
                          *out);
    return KD_OK;
}

static int kd_param_bool(struct kd_decoder *d, enum kd_param p, int def, int *out)
{
    const msgpack_object *o = d->param[p];
    *out = def;
    if (o == NULL || kd_obj_bool(o, out) == 0)
        return KD_OK;
    return kd_err_set(d->err, KD_EBADREQ, "%s must be true or false, got %s", kd_param_names[p],
                      kd_obj_type_name(o));
}

/* A string copied into buf[cap] ("" when absent). */
static int kd_param_str(struct kd_decoder *d, enum kd_param p, char *buf, size_t cap)
{
    const msgpack_object *o = d->param[p];
    const char *s;
    size_t len;
    buf[0] = '\0';
    if (o == NULL)
        return KD_OK;
    if (kd_obj_str(o, &s, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a str, got %s", kd_param_names[p],
                          kd_obj_type_name(o));
    if (len >= cap)
        return kd_err_set(d->err, KD_EBADREQ, "%s is %zu bytes, longer than the limit of %zu",
                          kd_param_names[p], len, cap - 1);
    if (memchr(s, '\0', len) != NULL)
        return kd_err_set(d->err, KD_EBADREQ, "%s contains a NUL byte", kd_param_names[p]);
    memcpy(buf, s, len);
    buf[len] = '\0';
    return KD_OK;
}

/* One of `choices` (a NULL-terminated list); *out is its index, or def when absent. */
static int kd_param_choice(struct kd_decoder *d, enum kd_param p, const char *const *choices,
                           int def, int *out)
{
    const msgpack_object *o = d->param[p];
    *out = def;
    if (o == NULL)
        return KD_OK;
    const char *s;
    size_t len;
    if (kd_obj_str(o, &s, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a str, got %s", kd_param_names[p],
                          kd_obj_type_name(o));
    for (int i = 0; choices[i] != NULL; i++) {
        if (kd_obj_str_eq(o, choices[i])) {
            *out = i;
            return KD_OK;
        }
    }
    char list[128] = "", shown[48];
    for (int i = 0; choices[i] != NULL; i++)
        snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? " | " : "",
                 choices[i]);
    return kd_err_set(d->err, KD_EBADREQ, "%s '%s' is not one of %s", kd_param_names[p],
                      kd_printable(shown, s, len), list);
}

/* A dtype name, which must be `a` or `b` (or def when absent). */
static int kd_param_dtype(struct kd_decoder *d, enum kd_param p, kd_dtype_t a, kd_dtype_t b,
                          kd_dtype_t def, kd_dtype_t *out)
{
    const msgpack_object *o = d->param[p];
    *out = def;
    if (o == NULL)
        return KD_OK;
    const char *s;
    size_t len;
    char shown[48];
    if (kd_obj_str(o, &s, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a str (%s or %s), got %s",
                          kd_param_names[p], kd_dtype_name(a), kd_dtype_name(b),
                          kd_obj_type_name(o));
    if (kd_dtype_parse(s, len, out) != 0 || (*out != a && *out != b))
        return kd_err_set(d->err, KD_EBADREQ, "%s '%s' is not %s or %s", kd_param_names[p],
                          kd_printable(shown, s, len), kd_dtype_name(a), kd_dtype_name(b));
    return KD_OK;
}

/* A matrix id: 32 hex digits. */
static int kd_param_id(struct kd_decoder *d, enum kd_param p, uint8_t id[16])
{
    const msgpack_object *o = d->param[p];
    const char *s;
    size_t len;
    char shown[48];
    if (o == NULL)
        return kd_missing(d, p);
    if (kd_obj_str(o, &s, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a str of %d hex digits, got %s",
                          kd_param_names[p], KD_ID_HEX_LEN, kd_obj_type_name(o));
    if (kd_id_from_hex(s, len, id) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s '%s' is not %d hex digits (a matrix id)",
                          kd_param_names[p], kd_printable(shown, s, len), KD_ID_HEX_LEN);
    return KD_OK;
}

/* Convert a plain msgpack array of numbers into a buffer the request owns (name: for messages). */
static int kd_array_from_plain(struct kd_decoder *d, const char *name, const msgpack_object *o,
                               kd_dtype_t dtype, kd_array_t *out)
{
    uint32_t n = o->via.array.size;
    size_t max = d->limits->max_array_elements;
    if (max > 0 && n > max)
        return kd_err_set(d->err, KD_ETOOLARGE,
                          "%s: a plain array of %u numbers is over the limit of %zu; use a bin",
                          name, n, max);
    struct kd_request_owned *owned = d->req->owned;
    size_t bytes;
    if (owned->narrays == owned->cap_arrays) {
        const int cap = owned->cap_arrays > 0 ? 2 * owned->cap_arrays : 4;
        void **grown = realloc(owned->arrays, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return kd_err_set(d->err, KD_ENOMEM, "%s: out of host memory", name);
        owned->arrays = grown;
        owned->cap_arrays = cap;
    }
    if (kd_mul_overflow(n, kd_dtype_size(dtype), &bytes))
        return kd_err_set(d->err, KD_ETOOLARGE, "%s: %u elements overflow a size", name, n);
    void *data = malloc(bytes > 0 ? bytes : 1);
    if (data == NULL)
        return kd_err_set(d->err, KD_ENOMEM, "%s: out of host memory for %u numbers", name, n);
    owned->arrays[owned->narrays++] = data;
    owned->bytes += bytes;
    int real = dtype == KD_DTYPE_F64 || dtype == KD_DTYPE_F32;
    for (uint32_t i = 0; i < n; i++) {
        const msgpack_object *e = &o->via.array.ptr[i];
        if (real) {
            double v;
            if (kd_obj_double(e, &v) != 0)
                return kd_err_set(d->err, KD_EBADREQ, "%s[%u] must be a number, got %s", name, i,
                                  kd_obj_type_name(e));
            kd_store_real(data, dtype, i, v);
            continue;
        }
        int64_t v;
        if (kd_obj_int64(e, &v) != 0 && e->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
            return kd_err_set(d->err, KD_EBADREQ, "%s[%u] must be an integer, got %s", name, i,
                              kd_obj_type_name(e));
        if (e->type == MSGPACK_OBJECT_POSITIVE_INTEGER && e->via.u64 > INT64_MAX)
            return kd_err_set(d->err, KD_EBADREQ, "%s[%u] = %llu does not fit int64", name, i,
                              (unsigned long long)e->via.u64);
        if (dtype == KD_DTYPE_I32) {
            if (v < INT32_MIN || v > INT32_MAX)
                return kd_err_set(d->err, KD_EBADREQ,
                                  "%s[%u] = %lld does not fit int32; send index_dtype int64", name,
                                  i, (long long)v);
            int32_t v32 = (int32_t)v;
            memcpy((char *)data + (size_t)i * 4, &v32, 4);
        } else {
            memcpy((char *)data + (size_t)i * 8, &v, 8);
        }
    }
    out->present = 1;
    out->data = data;
    out->count = n;
    out->dtype = dtype;
    return KD_OK;
}

/* One of a region reference's three integers: >= min and within int64. */
static int kd_region_field(struct kd_decoder *d, const char *name, const char *field,
                           const msgpack_object *o, int64_t min, int64_t *out)
{
    if (o == NULL)
        return kd_err_set(d->err, KD_EBADREQ, "%s: a region reference needs '%s'", name, field);
    if (kd_obj_int64(o, out) != 0 || *out < min)
        return kd_err_set(d->err, KD_EBADREQ, "%s: %s must be an integer >= %lld that fits int64",
                          name, field, (long long)min);
    return KD_OK;
}

/* {"shm": id, "offset": o, "bytes": n}: bytes of a shared-memory region instead of a bin. The
 * region's size is the server's to check (kd_array_region); the shape and alignment are here. */
static int kd_array_from_region(struct kd_decoder *d, const char *name, const msgpack_object *o,
                                kd_dtype_t dtype, kd_array_t *out)
{
    const msgpack_object *f[3] = {NULL, NULL, NULL};
    static const char *const keys[3] = {"shm", "offset", "bytes"};
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        int k = 0;
        while (k < 3 && !kd_obj_str_eq(&kv->key, keys[k]))
            k++;
        if (k == 3 || f[k] != NULL)
            return kd_err_set(d->err, KD_EBADREQ,
                              "%s: a region reference is a map of shm, offset and bytes, each once",
                              name);
        f[k] = &kv->val;
    }
    int64_t id, offset, bytes;
    int rc;
    if ((rc = kd_region_field(d, name, "shm", f[0], 1, &id)) != KD_OK ||
        (rc = kd_region_field(d, name, "offset", f[1], 0, &offset)) != KD_OK ||
        (rc = kd_region_field(d, name, "bytes", f[2], 0, &bytes)) != KD_OK)
        return rc;
    const int64_t size = (int64_t)kd_dtype_size(dtype);
    if (offset % size != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s: offset = %lld is not aligned to %s's %lld bytes",
                          name, (long long)offset, kd_dtype_name(dtype), (long long)size);
    if (bytes % size != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s: bytes = %lld is not a whole number of %s values",
                          name, (long long)bytes, kd_dtype_name(dtype));
    out->present = 1;
    out->data = NULL;
    out->count = bytes / size;
    out->dtype = dtype;
    out->shm = id;
    out->offset = offset;
    return KD_OK;
}

/* A numeric array in o (named `name` in messages): a bin of little-endian dtype values
 * (referenced in place), a plain array of numbers (converted) or, for values (float32, float64),
 * a region reference. Left not present when o is NULL. */
static int kd_array_from_object(struct kd_decoder *d, const char *name, const msgpack_object *o,
                                kd_dtype_t dtype, kd_array_t *out)
{
    memset(out, 0, sizeof(*out));
    if (o == NULL)
        return KD_OK;
    if (o->type == MSGPACK_OBJECT_ARRAY)
        return kd_array_from_plain(d, name, o, dtype, out);
    if (o->type == MSGPACK_OBJECT_MAP && (dtype == KD_DTYPE_F64 || dtype == KD_DTYPE_F32))
        return kd_array_from_region(d, name, o, dtype, out);
    if (o->type != MSGPACK_OBJECT_BIN)
        return kd_err_set(d->err, KD_EBADREQ,
                          "%s must be a bin of %s or an array of numbers, got %s", name,
                          kd_dtype_name(dtype), kd_obj_type_name(o));
    size_t len = o->via.bin.size;
    size_t size = kd_dtype_size(dtype);
    if (len % size != 0)
        return kd_err_set(d->err, KD_EBADREQ,
                          "%s: bin of %zu bytes is not a whole number of %s values", name, len,
                          kd_dtype_name(dtype));
    out->present = 1;
    out->data = o->via.bin.ptr;
    out->count = (int64_t)(len / size);
    out->dtype = dtype;
    return KD_OK;
}

static int kd_param_array(struct kd_decoder *d, enum kd_param p, kd_dtype_t dtype, kd_array_t *out)
{
    return kd_array_from_object(d, kd_param_names[p], d->param[p], dtype, out);
}

/* `out`: only a region reference (the result goes there instead of into the reply). */
static int kd_param_out(struct kd_decoder *d, kd_dtype_t dtype, kd_array_t *out)
{
    const msgpack_object *o = d->param[KD_P_OUT];
    memset(out, 0, sizeof(*out));
    if (o == NULL)
        return KD_OK;
    if (o->type != MSGPACK_OBJECT_MAP)
        return kd_err_set(d->err, KD_EBADREQ,
                          "out must be a region reference {shm, offset, bytes}, got %s",
                          kd_obj_type_name(o));
    return kd_array_from_region(d, "out", o, dtype, out);
}

static int kd_param_required_array(struct kd_decoder *d, enum kd_param p, kd_dtype_t dtype,
                                   kd_array_t *out)
{
    if (d->param[p] == NULL)
        return kd_missing(d, p);
    return kd_param_array(d, p, dtype, out);
}

/* A parameter that must not be given in this form of the request. */
static int kd_forbid(struct kd_decoder *d, enum kd_param p, const char *why)
{
    if (d->param[p] == NULL)
        return KD_OK;
    return kd_err_set(d->err, KD_EBADREQ, "%s is not used %s", kd_param_names[p], why);
}

static int kd_check_counts(struct kd_decoder *d, enum kd_param p, const kd_array_t *a,
                           int64_t expected, const char *what)
{
    if (a->count == expected)
        return KD_OK;
    return kd_err_set(d->err, KD_EBADREQ, "%s has %lld entries but %s %lld", kd_param_names[p],
                      (long long)a->count, what, (long long)expected);
}

/* name, format, select, reorder and pin: how a new matrix is kept. */
static int kd_decode_matrix_options(struct kd_decoder *d, kd_matrix_options_t *opt)
{
    static const char *const selects[] = {"measure", "heuristic", NULL};
    int select, reorder, rc;
    if ((rc = kd_param_str(d, KD_P_NAME, opt->name, sizeof(opt->name))) != KD_OK ||
        (rc = kd_param_str(d, KD_P_FORMAT, opt->format, sizeof(opt->format))) != KD_OK ||
        (rc = kd_param_choice(d, KD_P_SELECT, selects, -1, &select)) != KD_OK ||
        (rc = kd_param_choice(d, KD_P_REORDER, kd_reorder_names, KD_REORDER_AUTO, &reorder)) !=
            KD_OK ||
        (rc = kd_param_bool(d, KD_P_PIN, -1, &opt->pin)) != KD_OK)
        return rc;
    if (select >= 0)
        snprintf(opt->select, sizeof(opt->select), "%s", selects[select]);
    opt->reorder = (kd_reorder_t)reorder;
    return KD_OK;
}

/* matrix.put's distribute: true, false or "auto" (absent). */
static int kd_param_distribute(struct kd_decoder *d, int *out)
{
    const msgpack_object *o = d->param[KD_P_DISTRIBUTE];
    *out = KD_DISTRIBUTE_AUTO;
    int yes;
    if (o != NULL && kd_obj_bool(o, &yes) == 0) {
        *out = yes ? KD_DISTRIBUTE_YES : KD_DISTRIBUTE_NO;
        return KD_OK;
    }
    static const char *const autos[] = {"auto", NULL};
    int ignored;
    if (o != NULL && kd_param_choice(d, KD_P_DISTRIBUTE, autos, 0, &ignored) != KD_OK)
        return kd_err_set(d->err, KD_EBADREQ, "distribute must be true, false or \"auto\"");
    return KD_OK;
}

/*
 * matrix.put with batch = k: k systems of rows x cols sharing the pattern in indptr and indices,
 * values holding k x nnz entries. Every count is checked here, without multiplying untrusted
 * sizes unchecked: the whole batch (k rows x rows, k x nnz values) is held to the same limits as
 * one matrix of that size.
 */
static int kd_decode_put_batch(struct kd_decoder *d, kd_dtype_t index_dtype,
                               const kd_csr_limits_t *limits)
{
    kd_put_request_t *put = &d->req->u.put;
    int rc;
    put->kind = KD_PUT_CSR;
    if ((rc = kd_param_required_array(d, KD_P_INDPTR, index_dtype, &put->indptr)) != KD_OK ||
        (rc = kd_param_required_array(d, KD_P_INDICES, index_dtype, &put->indices)) != KD_OK)
        return rc;
    const int64_t k = put->batch, nnz = put->indices.count;
    if (put->values.count / k != nnz || put->values.count % k != 0)
        return kd_err_set(d->err, KD_EBADREQ,
                          "values has %lld entries but batch = %lld systems of %lld nonzeros "
                          "(indices) need batch x nnz",
                          (long long)put->values.count, (long long)k, (long long)nnz);
    /* The server expands the pattern to the whole batch (k x (rows + 1) row pointers): bounded
     * by the values the message carries only while a system stores an entry per row. */
    if (nnz < put->rows)
        return kd_err_set(d->err, KD_EBADREQ,
                          "batch: the pattern has %lld nonzeros for %lld rows; a batched system "
                          "stores at least one entry per row on average (nnz >= rows)",
                          (long long)nnz, (long long)put->rows);
    if ((rc = kd_csr_check_shape(put->rows, put->cols, nnz, limits, d->err)) != KD_OK ||
        (rc = kd_check_counts(d, KD_P_INDPTR, &put->indptr, put->rows + 1, "rows + 1 =")) != KD_OK)
        return rc;
    int64_t rows, cols;
    if (kd_mul_overflow_i64(put->rows, k, &rows) || kd_mul_overflow_i64(put->cols, k, &cols))
        return kd_err_set(d->err, KD_ETOOLARGE, "batch = %lld systems of %lld x %lld overflow",
                          (long long)k, (long long)put->rows, (long long)put->cols);
    /* values.count = k x nnz is a count the message holds, so it cannot overflow */
    if ((rc = kd_csr_check_shape(rows, cols, put->values.count, limits, d->err)) != KD_OK)
        return kd_err_prefix(d->err, "batch = %lld systems together", (long long)k);
    return KD_OK;
}

/*
 * matrix.put with like = id: new values on that matrix's pattern (values alone, in its canonical
 * entry order), kept as it is kept: its format, reordering and spread are not chosen again, so
 * the options that choose them are refused, as is anything that describes a pattern. The count
 * is checked against the like matrix by the handler, which knows it.
 */
static int kd_decode_put_like(struct kd_decoder *d)
{
    kd_put_request_t *put = &d->req->u.put;
    static const enum kd_param pattern[] = {KD_P_ROWS,    KD_P_COLS,        KD_P_INDPTR,
                                            KD_P_INDICES, KD_P_ROW,         KD_P_COL,
                                            KD_P_MTX,     KD_P_INDEX_DTYPE, KD_P_BATCH};
    static const enum kd_param chosen[] = {KD_P_FORMAT, KD_P_SELECT, KD_P_REORDER, KD_P_DISTRIBUTE};
    int rc;
    for (size_t i = 0; i < sizeof(pattern) / sizeof(pattern[0]); i++)
        if ((rc = kd_forbid(d, pattern[i],
                            "with like (the pattern is the like matrix's: send "
                            "values alone)")) != KD_OK)
            return rc;
    for (size_t i = 0; i < sizeof(chosen) / sizeof(chosen[0]); i++)
        if ((rc = kd_forbid(d, chosen[i],
                            "with like (the new values are kept as the like matrix "
                            "is: its format, reordering and spread)")) != KD_OK)
            return rc;
    put->kind = KD_PUT_LIKE;
    put->dtype_given = d->param[KD_P_DTYPE] != NULL;
    if ((rc = kd_param_id(d, KD_P_LIKE, put->like)) != KD_OK ||
        (rc = kd_param_dtype(d, KD_P_DTYPE, KD_DTYPE_F64, KD_DTYPE_F32, KD_DTYPE_F64,
                             &put->dtype)) != KD_OK ||
        (rc = kd_decode_matrix_options(d, &put->options)) != KD_OK ||
        (rc = kd_param_required_array(d, KD_P_VALUES, put->dtype, &put->values)) != KD_OK)
        return rc;
    put->has_pattern = d->param[KD_P_PATTERN] != NULL;
    if (put->has_pattern && (rc = kd_param_id(d, KD_P_PATTERN, put->pattern)) != KD_OK)
        return kd_err_prefix(d->err, "pattern (the canonical pattern's hash, docs/PROTOCOL.md)");
    kd_csr_limits_t limits = {.max_rows = d->limits->max_rows,
                              .max_cols = d->limits->max_cols,
                              .max_nnz = d->limits->max_nnz};
    if (put->values.count > limits.max_nnz)
        return kd_err_set(d->err, KD_ETOOLARGE, "values has %lld entries; the limit is %lld",
                          (long long)put->values.count, (long long)limits.max_nnz);
    return KD_OK;
}

/* matrix.put's persist: when the matrix's state file is written (docs/PROTOCOL.md). */
static int kd_param_persist(struct kd_decoder *d, int *out)
{
    static const char *const modes[] = {"sync", "behind", "none", NULL}; /* kd_persist_t order */
    return kd_param_choice(d, KD_P_PERSIST, modes, KD_PERSIST_DEFAULT, out);
}

const char *kd_persist_name(int persist)
{
    return persist == KD_PERSIST_BEHIND ? "behind" : persist == KD_PERSIST_NONE ? "none" : "sync";
}

static int kd_decode_put(struct kd_decoder *d)
{
    kd_put_request_t *put = &d->req->u.put;
    int rc0 = kd_param_persist(d, &put->persist);
    if (rc0 != KD_OK)
        return rc0;
    if (d->param[KD_P_LIKE] != NULL)
        return kd_decode_put_like(d);
    int csr = d->param[KD_P_INDPTR] != NULL;
    int coo = d->param[KD_P_ROW] != NULL || d->param[KD_P_COL] != NULL;
    int mtx = d->param[KD_P_MTX] != NULL;
    int rc = kd_forbid(d, KD_P_PATTERN, "without like (it names the like matrix's pattern)");
    if (rc != KD_OK)
        return rc;
    if (csr + coo + mtx != 1)
        return kd_err_set(d->err, KD_EBADREQ,
                          "matrix.put takes exactly one of indptr (CSR), row and col (COO) or mtx "
                          "(Matrix Market text); got %s",
                          csr + coo + mtx == 0 ? "none" : "more than one");
    if ((rc = kd_param_dtype(d, KD_P_DTYPE, KD_DTYPE_F64, KD_DTYPE_F32, KD_DTYPE_F64,
                             &put->dtype)) != KD_OK ||
        (rc = kd_decode_matrix_options(d, &put->options)) != KD_OK ||
        (rc = kd_param_distribute(d, &put->options.distribute)) != KD_OK)
        return rc;

    if ((rc = kd_param_int(d, KD_P_BATCH, 1, 0, &put->batch)) != KD_OK)
        return rc;
    if (put->batch > 0 && !csr)
        return kd_err_set(d->err, KD_EBADREQ,
                          "batch takes the shared pattern as indptr and indices (CSR)");
    if (put->batch > 0 && put->options.distribute == KD_DISTRIBUTE_YES)
        return kd_err_set(d->err, KD_EBADREQ,
                          "distribute = true does not apply to a batch (each system is small; "
                          "a batch stays on the serving rank)");
    if (mtx) {
        static const enum kd_param unused[] = {KD_P_ROWS, KD_P_COLS, KD_P_INDICES, KD_P_VALUES,
                                               KD_P_INDEX_DTYPE};
        for (size_t i = 0; i < sizeof(unused) / sizeof(unused[0]); i++)
            if ((rc = kd_forbid(d, unused[i], "with mtx (the Matrix Market text has it)")) != KD_OK)
                return rc;
        const void *text;
        if (kd_obj_bytes(d->param[KD_P_MTX], &text, &put->mtx_len) != 0)
            return kd_err_set(d->err, KD_EBADREQ,
                              "mtx must be a str or bin of Matrix Market text, got %s",
                              kd_obj_type_name(d->param[KD_P_MTX]));
        put->kind = KD_PUT_MTX;
        put->mtx = text;
        return KD_OK;
    }

    kd_dtype_t index_dtype;
    if ((rc = kd_param_int(d, KD_P_ROWS, INT64_MIN, 0, &put->rows)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_COLS, INT64_MIN, 0, &put->cols)) != KD_OK ||
        (rc = kd_param_dtype(d, KD_P_INDEX_DTYPE, KD_DTYPE_I32, KD_DTYPE_I64, KD_DTYPE_I32,
                             &index_dtype)) != KD_OK)
        return rc;
    if (d->param[KD_P_ROWS] == NULL)
        return kd_missing(d, KD_P_ROWS);
    if (d->param[KD_P_COLS] == NULL)
        return kd_missing(d, KD_P_COLS);
    if ((rc = kd_param_required_array(d, KD_P_VALUES, put->dtype, &put->values)) != KD_OK)
        return rc;

    kd_csr_limits_t limits = {.max_rows = d->limits->max_rows,
                              .max_cols = d->limits->max_cols,
                              .max_nnz = d->limits->max_nnz};
    int64_t nnz = put->values.count;
    if (put->batch > 0)
        return kd_decode_put_batch(d, index_dtype, &limits);
    if (csr) {
        put->kind = KD_PUT_CSR;
        if ((rc = kd_param_required_array(d, KD_P_INDPTR, index_dtype, &put->indptr)) != KD_OK ||
            (rc = kd_param_required_array(d, KD_P_INDICES, index_dtype, &put->indices)) != KD_OK)
            return rc;
        if ((rc = kd_csr_check_shape(put->rows, put->cols, nnz, &limits, d->err)) != KD_OK)
            return rc;
        if ((rc = kd_check_counts(d, KD_P_INDPTR, &put->indptr, put->rows + 1, "rows + 1 =")) !=
                KD_OK ||
            (rc = kd_check_counts(d, KD_P_INDICES, &put->indices, nnz, "values has")) != KD_OK)
            return rc;
        return KD_OK;
    }
    put->kind = KD_PUT_COO;
    if ((rc = kd_forbid(d, KD_P_INDICES, "with row/col (COO); CSR takes indptr and indices")) !=
            KD_OK ||
        (rc = kd_param_required_array(d, KD_P_ROW, index_dtype, &put->row)) != KD_OK ||
        (rc = kd_param_required_array(d, KD_P_COL, index_dtype, &put->col)) != KD_OK)
        return rc;
    if ((rc = kd_csr_check_shape(put->rows, put->cols, nnz, &limits, d->err)) != KD_OK)
        return rc;
    if ((rc = kd_check_counts(d, KD_P_ROW, &put->row, nnz, "values has")) != KD_OK ||
        (rc = kd_check_counts(d, KD_P_COL, &put->col, nnz, "values has")) != KD_OK)
        return rc;
    return KD_OK;
}

static int kd_decode_multiply(struct kd_decoder *d)
{
    kd_multiply_request_t *mul = &d->req->u.multiply;
    int rc;
    if ((rc = kd_param_id(d, KD_P_A, mul->a)) != KD_OK ||
        (rc = kd_param_id(d, KD_P_B, mul->b)) != KD_OK ||
        (rc = kd_param_bool(d, KD_P_TRANSPOSE_A, 0, &mul->transpose_a)) != KD_OK)
        return rc;
    return kd_decode_matrix_options(d, &mul->options);
}

static int kd_decode_spmv(struct kd_decoder *d)
{
    kd_spmv_request_t *spmv = &d->req->u.spmv;
    int rc;
    if ((rc = kd_param_id(d, KD_P_ID, spmv->id)) != KD_OK ||
        (rc = kd_param_dtype(d, KD_P_DTYPE, KD_DTYPE_F64, KD_DTYPE_F32, KD_DTYPE_F64,
                             &spmv->dtype)) != KD_OK ||
        (rc = kd_param_required_array(d, KD_P_X, spmv->dtype, &spmv->x)) != KD_OK ||
        (rc = kd_param_array(d, KD_P_Y, spmv->dtype, &spmv->y)) != KD_OK ||
        (rc = kd_param_double(d, KD_P_ALPHA, -INFINITY, 1.0, &spmv->alpha)) != KD_OK ||
        (rc = kd_param_double(d, KD_P_BETA, -INFINITY, 0.0, &spmv->beta)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_NCOLS, 1, 1, &spmv->ncols)) != KD_OK ||
        (rc = kd_param_out(d, spmv->dtype, &spmv->out)) != KD_OK)
        return rc;
    if (spmv->beta != 0.0 && !spmv->y.present)
        return kd_err_set(d->err, KD_EBADREQ, "beta = %g needs y (the vector beta scales)",
                          spmv->beta);
    /* Several columns share the solve's limit on right-hand sides. */
    const int64_t max_cols = d->limits->max_nrhs;
    if (max_cols > 0 && spmv->ncols > max_cols)
        return kd_err_set(d->err, KD_ETOOLARGE, "ncols = %lld is over this server's limit %lld",
                          (long long)spmv->ncols, (long long)max_cols);
    if (spmv->x.count % spmv->ncols != 0 || (spmv->y.present && spmv->y.count % spmv->ncols != 0))
        return kd_err_set(d->err, KD_EBADREQ,
                          "x has %lld values%s, not a whole number of columns for ncols = %lld",
                          (long long)spmv->x.count, spmv->y.present ? " (or y)" : "",
                          (long long)spmv->ncols);
    return KD_OK;
}

/* preconditioner_options: a map of at most KD_OPTIONS_MAX names (str, shorter than
 * KD_OPTION_NAME_MAX, each once) to finite numbers. */
static int kd_param_options(struct kd_decoder *d, enum kd_param p, kd_solve_request_t *solve)
{
    const msgpack_object *o = d->param[p];
    solve->noptions = 0;
    if (o == NULL)
        return KD_OK;
    if (o->type != MSGPACK_OBJECT_MAP)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a map of names to numbers, got %s",
                          kd_param_names[p], kd_obj_type_name(o));
    if (o->via.map.size > KD_OPTIONS_MAX)
        return kd_err_set(d->err, KD_EBADREQ, "%s has %u entries; at most %d", kd_param_names[p],
                          (unsigned)o->via.map.size, KD_OPTIONS_MAX);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        const char *name;
        size_t len;
        char shown[48];
        if (kd_obj_str(&kv->key, &name, &len) != 0)
            return kd_err_set(d->err, KD_EBADREQ, "%s: a key is a %s, not a str", kd_param_names[p],
                              kd_obj_type_name(&kv->key));
        if (len == 0 || len >= KD_OPTION_NAME_MAX || memchr(name, '\0', len) != NULL)
            return kd_err_set(d->err, KD_EBADREQ, "%s: '%s' is not an option name",
                              kd_param_names[p], kd_printable(shown, name, len));
        double v;
        if (kd_obj_double(&kv->val, &v) != 0 || !isfinite(v))
            return kd_err_set(d->err, KD_EBADREQ, "%s: %s must be a finite number, got %s",
                              kd_param_names[p], kd_printable(shown, name, len),
                              kd_obj_type_name(&kv->val));
        for (int j = 0; j < solve->noptions; j++)
            if (strlen(solve->options[j].name) == len &&
                memcmp(solve->options[j].name, name, len) == 0)
                return kd_err_set(d->err, KD_EBADREQ, "%s: %s given twice", kd_param_names[p],
                                  kd_printable(shown, name, len));
        memcpy(solve->options[solve->noptions].name, name, len);
        solve->options[solve->noptions].name[len] = '\0';
        solve->options[solve->noptions++].value = v;
    }
    return KD_OK;
}

/* direct_options (methods "direct" and "auto", whose direct attempt it names): a map of `solver`
 * (str: a name of the server's table of factorisation libraries, which the server checks). */
static int kd_param_direct_options(struct kd_decoder *d, kd_solve_request_t *solve)
{
    const msgpack_object *o = d->param[KD_P_DIRECT_OPTIONS];
    solve->direct_solver[0] = '\0';
    if (o == NULL)
        return KD_OK;
    if (strcmp(solve->method, "direct") != 0 && strcmp(solve->method, "auto") != 0)
        return kd_err_set(d->err, KD_EBADREQ,
                          "direct_options is for method \"direct\" (or \"auto\"), not \"%s\"",
                          solve->method[0] != '\0' ? solve->method : "cg");
    if (o->type != MSGPACK_OBJECT_MAP)
        return kd_err_set(d->err, KD_EBADREQ,
                          "direct_options must be a map (solver: \"klu\", \"umfpack\" or "
                          "\"cholmod\"), got %s",
                          kd_obj_type_name(o));
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        const char *key, *val;
        size_t klen, vlen;
        char shown[48];
        if (kd_obj_str(&kv->key, &key, &klen) != 0)
            return kd_err_set(d->err, KD_EBADREQ, "direct_options: a key is a %s, not a str",
                              kd_obj_type_name(&kv->key));
        if (klen != 6 || memcmp(key, "solver", 6) != 0)
            return kd_err_set(d->err, KD_EBADREQ,
                              "direct_options: unknown option '%s' (it takes solver)",
                              kd_printable(shown, key, klen));
        if (kd_obj_str(&kv->val, &val, &vlen) != 0)
            return kd_err_set(d->err, KD_EBADREQ,
                              "direct_options: solver must be a str (\"klu\", \"umfpack\" or "
                              "\"cholmod\"), got %s",
                              kd_obj_type_name(&kv->val));
        if (vlen == 0 || vlen >= sizeof(solve->direct_solver) || memchr(val, '\0', vlen) != NULL)
            return kd_err_set(d->err, KD_EBADREQ, "direct_options: '%s' is not a solver name",
                              kd_printable(shown, val, vlen));
        memcpy(solve->direct_solver, val, vlen);
        solve->direct_solver[vlen] = '\0';
    }
    return KD_OK;
}

/* rtol, atol (out: a number) or maxiter (out NULL: an integer) as one value, or as an array
 * of them for a batched matrix's systems (float64; int64 for maxiter), into *arr. */
static int kd_param_per_system(struct kd_decoder *d, enum kd_param p, double min, double def,
                               double *out, kd_array_t *arr)
{
    const msgpack_object *o = d->param[p];
    memset(arr, 0, sizeof(*arr));
    if (o != NULL && (o->type == MSGPACK_OBJECT_ARRAY || o->type == MSGPACK_OBJECT_BIN)) {
        if (out != NULL)
            *out = def;
        else
            d->req->u.solve.maxiter = (int64_t)def;
        return kd_param_array(d, p, out != NULL ? KD_DTYPE_F64 : KD_DTYPE_I64, arr);
    }
    if (out != NULL)
        return kd_param_double(d, p, min, def, out);
    return kd_param_int(d, p, (int64_t)min, (int64_t)def, &d->req->u.solve.maxiter);
}

static int kd_decode_solve(struct kd_decoder *d)
{
    kd_solve_request_t *solve = &d->req->u.solve;
    int rc;
    if ((rc = kd_param_id(d, KD_P_ID, solve->id)) != KD_OK ||
        (rc = kd_param_dtype(d, KD_P_DTYPE, KD_DTYPE_F64, KD_DTYPE_F32, KD_DTYPE_F64,
                             &solve->dtype)) != KD_OK ||
        (rc = kd_param_required_array(d, KD_P_B, solve->dtype, &solve->b)) != KD_OK ||
        (rc = kd_param_array(d, KD_P_X0, solve->dtype, &solve->x0)) != KD_OK ||
        (rc = kd_param_str(d, KD_P_METHOD, solve->method, sizeof(solve->method))) != KD_OK ||
        (rc = kd_param_per_system(d, KD_P_RTOL, 0.0, 1e-8, &solve->rtol, &solve->rtols)) != KD_OK ||
        (rc = kd_param_per_system(d, KD_P_ATOL, 0.0, 0.0, &solve->atol, &solve->atols)) != KD_OK ||
        (rc = kd_param_per_system(d, KD_P_MAXITER, 0, -1, NULL, &solve->maxiters)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_NRHS, 1, 1, &solve->nrhs)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_CHECK_EVERY, 0, 0, &solve->check_every)) != KD_OK ||
        (rc = kd_param_bool(d, KD_P_HISTORY, 0, &solve->history)) != KD_OK ||
        (rc = kd_param_bool(d, KD_P_PROGRESS, 0, &solve->progress)) != KD_OK ||
        (rc = kd_param_str(d, KD_P_PRECONDITIONER, solve->preconditioner,
                           sizeof(solve->preconditioner))) != KD_OK ||
        (rc = kd_param_options(d, KD_P_PRECONDITIONER_OPTIONS, solve)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_RESTART, 0, 0, &solve->restart)) != KD_OK ||
        (rc = kd_param_bool(d, KD_P_REUSE_PRECONDITIONER, 0, &solve->reuse_preconditioner)) !=
            KD_OK ||
        (rc = kd_param_out(d, solve->dtype, &solve->out)) != KD_OK ||
        (rc = kd_param_direct_options(d, solve)) != KD_OK)
        return rc;
    /* The method's and preconditioner's names are the server's to check (its tables). */
    if (solve->restart > KD_RESTART_MAX)
        return kd_err_set(d->err, KD_EBADREQ,
                          "restart = %lld: GMRES(m) keeps at most %d basis vectors (0: the "
                          "server's default)",
                          (long long)solve->restart, KD_RESTART_MAX);
    int64_t max_nrhs = d->limits->max_nrhs;
    if (max_nrhs > 0 && solve->nrhs > max_nrhs)
        return kd_err_set(d->err, KD_ETOOLARGE, "nrhs = %lld is over this server's limit %lld",
                          (long long)solve->nrhs, (long long)max_nrhs);
    if (solve->b.count % solve->nrhs != 0)
        return kd_err_set(d->err, KD_EBADREQ,
                          "b has %lld values, not a whole number of columns for nrhs = %lld",
                          (long long)solve->b.count, (long long)solve->nrhs);
    if (solve->x0.present)
        return kd_check_counts(d, KD_P_X0, &solve->x0, solve->b.count, "b has");
    return KD_OK;
}

/* solve.batch's item i: a map of id (a matrix id), b and optionally x0. A malformed item makes
 * the whole request BAD_REQUEST (naming it); what needs the store is the server's, per item. */
static int kd_decode_item(struct kd_decoder *d, const msgpack_object *o, int64_t i,
                          kd_dtype_t dtype, kd_solve_item_t *item)
{
    char name[48], shown[48];
    const msgpack_object *id = NULL, *b = NULL, *x0 = NULL;
    if (o->type != MSGPACK_OBJECT_MAP)
        return kd_err_set(d->err, KD_EBADREQ, "items[%lld] must be a map of id, b and x0, got %s",
                          (long long)i, kd_obj_type_name(o));
    for (uint32_t k = 0; k < o->via.map.size; k++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[k];
        const msgpack_object **slot = kd_obj_str_eq(&kv->key, "id")   ? &id
                                      : kd_obj_str_eq(&kv->key, "b")  ? &b
                                      : kd_obj_str_eq(&kv->key, "x0") ? &x0
                                                                      : NULL;
        const char *key = "";
        size_t len = 0;
        if (slot == NULL && kd_obj_str(&kv->key, &key, &len) != 0)
            return kd_err_set(d->err, KD_EBADREQ, "items[%lld]: a key is a %s, not a str",
                              (long long)i, kd_obj_type_name(&kv->key));
        if (slot == NULL)
            return kd_err_set(d->err, KD_EBADREQ,
                              "items[%lld]: unknown key '%s' (an item takes id, b and x0)",
                              (long long)i, kd_printable(shown, key, len));
        if (*slot != NULL)
            return kd_err_set(d->err, KD_EBADREQ, "items[%lld]: a key is given twice",
                              (long long)i);
        *slot = kv->val.type == MSGPACK_OBJECT_NIL ? NULL : &kv->val;
    }
    const char *hex;
    size_t len;
    if (id == NULL || b == NULL)
        return kd_err_set(d->err, KD_EBADREQ, "items[%lld] has no %s", (long long)i,
                          id == NULL ? "id" : "b");
    if (kd_obj_str(id, &hex, &len) != 0 || kd_id_from_hex(hex, len, item->id) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "items[%lld].id is not %d hex digits (a matrix id)",
                          (long long)i, KD_ID_HEX_LEN);
    int rc;
    snprintf(name, sizeof(name), "items[%lld].b", (long long)i);
    if ((rc = kd_array_from_object(d, name, b, dtype, &item->b)) != KD_OK)
        return rc;
    snprintf(name, sizeof(name), "items[%lld].x0", (long long)i);
    if ((rc = kd_array_from_object(d, name, x0, dtype, &item->x0)) != KD_OK)
        return rc;
    if (item->x0.present && item->x0.count != item->b.count)
        return kd_err_set(d->err, KD_EBADREQ, "items[%lld].x0 has %lld values but its b %lld",
                          (long long)i, (long long)item->x0.count, (long long)item->b.count);
    return KD_OK;
}

/* solve.batch: the items (1..KD_SOLVE_ITEMS_MAX, their b values together within max_rows) and
 * one set of solve parameters for all of them. */
static int kd_decode_solve_batch(struct kd_decoder *d)
{
    kd_solve_batch_request_t *q = &d->req->u.solve_batch;
    const msgpack_object *items = d->param[KD_P_ITEMS];
    int rc;
    if ((rc = kd_param_dtype(d, KD_P_DTYPE, KD_DTYPE_F64, KD_DTYPE_F32, KD_DTYPE_F64, &q->dtype)) !=
            KD_OK ||
        (rc = kd_param_str(d, KD_P_METHOD, q->method, sizeof(q->method))) != KD_OK ||
        (rc = kd_param_str(d, KD_P_PRECONDITIONER, q->preconditioner, sizeof(q->preconditioner))) !=
            KD_OK ||
        (rc = kd_param_double(d, KD_P_RTOL, 0.0, 1e-8, &q->rtol)) != KD_OK ||
        (rc = kd_param_double(d, KD_P_ATOL, 0.0, 0.0, &q->atol)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_MAXITER, 0, -1, &q->maxiter)) != KD_OK ||
        (rc = kd_param_int(d, KD_P_RESTART, 0, 0, &q->restart)) != KD_OK ||
        (rc = kd_param_bool(d, KD_P_HISTORY, 0, &q->history)) != KD_OK)
        return rc;
    if (q->restart > KD_RESTART_MAX)
        return kd_err_set(d->err, KD_EBADREQ, "restart = %lld: at most %d (0: the server's)",
                          (long long)q->restart, KD_RESTART_MAX);
    if (items == NULL)
        return kd_missing(d, KD_P_ITEMS);
    if (items->type != MSGPACK_OBJECT_ARRAY || items->via.array.size == 0)
        return kd_err_set(d->err, KD_EBADREQ, "items must be a non-empty array of maps, got %s%s",
                          items->type == MSGPACK_OBJECT_ARRAY ? "an empty " : "",
                          kd_obj_type_name(items));
    const int64_t n = items->via.array.size;
    if (n > KD_SOLVE_ITEMS_MAX)
        return kd_err_set(d->err, KD_ETOOLARGE, "items has %lld entries; at most %d a request",
                          (long long)n, KD_SOLVE_ITEMS_MAX);
    q->items = calloc((size_t)n, sizeof(*q->items));
    if (q->items == NULL)
        return kd_err_set(d->err, KD_ENOMEM, "out of host memory for %lld items", (long long)n);
    d->req->owned->items = q->items;
    d->req->owned->bytes += (size_t)n * sizeof(*q->items);
    q->nitems = n;
    for (int64_t i = 0; i < n; i++) {
        kd_solve_item_t *item = &q->items[i];
        if ((rc = kd_decode_item(d, &items->via.array.ptr[i], i, q->dtype, item)) != KD_OK)
            return rc;
        q->rows += item->b.count; /* counts the message holds: no overflow */
    }
    if (d->limits->max_rows > 0 && q->rows > d->limits->max_rows)
        return kd_err_set(d->err, KD_ETOOLARGE,
                          "the items' b hold %lld values in all, over this server's limit of %lld "
                          "rows a request",
                          (long long)q->rows, (long long)d->limits->max_rows);
    return KD_OK;
}

/* A user name: 1..KD_AUTH_NAME_MAX-1 bytes without NUL (whether the user exists is the server's).
 */
static int kd_param_user(struct kd_decoder *d, enum kd_param p, char out[KD_AUTH_NAME_MAX])
{
    const msgpack_object *o = d->param[p];
    const char *s;
    size_t len;
    if (o == NULL)
        return kd_missing(d, p);
    if (kd_obj_str(o, &s, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be a str, got %s", kd_param_names[p],
                          kd_obj_type_name(o));
    if (len == 0 || len >= KD_AUTH_NAME_MAX || memchr(s, '\0', len) != NULL)
        return kd_err_set(d->err, KD_EBADREQ, "%s must be 1..%d bytes without NUL",
                          kd_param_names[p], KD_AUTH_NAME_MAX - 1);
    memcpy(out, s, len);
    out[len] = '\0';
    return KD_OK;
}

/* The name is checked for shape here; whether it and the token are right is the server's. */
static int kd_decode_auth(struct kd_decoder *d)
{
    kd_auth_request_t *auth = &d->req->u.auth;
    const msgpack_object *name = d->param[KD_P_NAME], *token = d->param[KD_P_TOKEN];
    const char *s;
    size_t len;
    if (name == NULL)
        return kd_missing(d, KD_P_NAME);
    if (token == NULL)
        return kd_missing(d, KD_P_TOKEN);
    if (kd_obj_str(name, &s, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "name must be a str, got %s", kd_obj_type_name(name));
    if (len == 0 || len >= sizeof(auth->name) || memchr(s, '\0', len) != NULL)
        return kd_err_set(d->err, KD_EBADREQ, "name must be 1..%zu bytes without NUL",
                          sizeof(auth->name) - 1);
    memcpy(auth->name, s, len);
    auth->name[len] = '\0';
    if (kd_obj_str(token, &auth->token, &auth->token_len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "token must be a str, got %s",
                          kd_obj_type_name(token));
    if (auth->token_len > KD_AUTH_TOKEN_MAX)
        return kd_err_set(d->err, KD_EBADREQ, "token is longer than %d bytes", KD_AUTH_TOKEN_MAX);
    return KD_OK;
}

static int kd_decode_method(struct kd_decoder *d)
{
    kd_request_t *req = d->req;
    int rc = kd_param_int(d, KD_P_TIMEOUT_MS, 0, 0, &req->timeout_ms);
    if (rc != KD_OK)
        return rc;
    switch (req->method) {
    case KD_METHOD_MATRIX_PUT:
        return kd_decode_put(d);
    case KD_METHOD_MATRIX_INFO:
    case KD_METHOD_MATRIX_DROP:
        return kd_param_id(d, KD_P_ID, req->u.id.id);
    case KD_METHOD_MATRIX_PIN:
        if ((rc = kd_param_id(d, KD_P_ID, req->u.id.id)) != KD_OK)
            return rc;
        return kd_param_bool(d, KD_P_PINNED, 1, &req->u.id.pinned);
    case KD_METHOD_MATRIX_SHARE:
        if ((rc = kd_param_id(d, KD_P_ID, req->u.id.id)) != KD_OK)
            return rc;
        return kd_param_user(d, KD_P_USER, req->u.id.user);
    case KD_METHOD_MATRIX_MULTIPLY:
        return kd_decode_multiply(d);
    case KD_METHOD_SPMV:
        return kd_decode_spmv(d);
    case KD_METHOD_SOLVE:
        return kd_decode_solve(d);
    case KD_METHOD_JOB_CANCEL:
        if (d->param[KD_P_MSGID] == NULL)
            return kd_err_set(d->err, KD_EBADREQ,
                              "missing parameter 'msgid' for job.cancel (the request to cancel)");
        if (kd_obj_uint64(d->param[KD_P_MSGID], &req->u.cancel.target_msgid) != 0)
            return kd_err_set(d->err, KD_EBADREQ, "msgid must be a non-negative integer, got %s",
                              kd_obj_type_name(d->param[KD_P_MSGID]));
        return KD_OK;
    case KD_METHOD_AUTH:
        return kd_decode_auth(d);
    case KD_METHOD_SOLVE_BATCH:
        return kd_decode_solve_batch(d);
    case KD_METHOD_SERVER_STATUS:
        return kd_param_bool(d, KD_P_WAIT_WARM, 0, &req->u.status.wait_warm);
    case KD_METHOD_SHM_REGISTER:
        if (d->param[KD_P_BYTES] == NULL)
            return kd_missing(d, KD_P_BYTES);
        if ((rc = kd_param_int(d, KD_P_BYTES, 1, 0, &req->u.shm.bytes)) != KD_OK)
            return rc;
        return kd_param_str(d, KD_P_NAME, req->u.shm.name, sizeof(req->u.shm.name));
    case KD_METHOD_SHM_UNREGISTER:
        if (d->param[KD_P_SHM] == NULL)
            return kd_missing(d, KD_P_SHM);
        return kd_param_int(d, KD_P_SHM, 1, 0, &req->u.shm.id);
    case KD_METHOD_MATRIX_LIST:
    case KD_METHOD_COUNT:
        break;
    }
    return KD_OK;
}

static int kd_unknown_param(struct kd_decoder *d, const char *name, size_t len)
{
    char shown[48], accepted[256] = "";
    uint64_t allowed = kd_method_params[d->req->method] | KD_BIT(TIMEOUT_MS);
    for (int p = 0; p < KD_P_COUNT; p++)
        if (allowed & ((uint64_t)1 << p))
            snprintf(accepted + strlen(accepted), sizeof(accepted) - strlen(accepted), "%s%s",
                     accepted[0] ? ", " : "", kd_param_names[p]);
    return kd_err_set(d->err, KD_EBADREQ, "unknown parameter '%s' for %s (it takes %s)",
                      kd_printable(shown, name, len), d->method, accepted);
}

/* Read params ([map], a map, [] or nil) into d->param, refusing unknown and repeated names. */
static int kd_read_params(struct kd_decoder *d, const msgpack_object *params)
{
    const msgpack_object *map = params;
    if (params->type == MSGPACK_OBJECT_ARRAY) {
        if (params->via.array.size == 0)
            return KD_OK;
        if (params->via.array.size > 1)
            return kd_err_set(d->err, KD_EBADREQ,
                              "params must be [map], a map, [] or nil; got an array of %u",
                              params->via.array.size);
        map = &params->via.array.ptr[0];
    }
    if (map->type == MSGPACK_OBJECT_NIL)
        return KD_OK;
    if (map->type != MSGPACK_OBJECT_MAP)
        return kd_err_set(d->err, KD_EBADREQ, "params must be [map], a map, [] or nil; got %s%s",
                          map == params ? "" : "[] of ", kd_obj_type_name(map));
    uint64_t allowed = kd_method_params[d->req->method] | KD_BIT(TIMEOUT_MS);
    uint64_t seen = 0;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        const char *name;
        size_t len;
        if (kd_obj_str(&kv->key, &name, &len) != 0)
            return kd_err_set(d->err, KD_EBADREQ, "parameter names must be str, got %s",
                              kd_obj_type_name(&kv->key));
        int p = 0;
        while (p < KD_P_COUNT &&
               !(((allowed >> p) & 1) && kd_obj_str_eq(&kv->key, kd_param_names[p])))
            p++;
        if (p == KD_P_COUNT)
            return kd_unknown_param(d, name, len);
        if ((seen >> p) & 1)
            return kd_err_set(d->err, KD_EBADREQ, "parameter '%s' is given twice",
                              kd_param_names[p]);
        seen |= (uint64_t)1 << p;
        d->param[p] = kv->val.type == MSGPACK_OBJECT_NIL ? NULL : &kv->val;
    }
    return KD_OK;
}

/* The envelope [0, msgid, method, params], then the method's parameters. */
static int kd_decode_envelope(struct kd_decoder *d, const msgpack_object *root,
                              kd_decode_error_t *derr)
{
    kd_request_t *req = d->req;
    uint64_t kind;
    char shown[48];
    if (root->type != MSGPACK_OBJECT_ARRAY || root->via.array.size == 0)
        return kd_err_set(
            d->err, KD_EBADREQ, "a request is an array [0, msgid, method, params], got %s%s",
            root->type == MSGPACK_OBJECT_ARRAY ? "an empty " : "", kd_obj_type_name(root));
    const msgpack_object *e = root->via.array.ptr;
    uint32_t n = root->via.array.size;
    if (kd_obj_uint64(&e[0], &kind) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "message type (element 0) must be 0, got %s",
                          kd_obj_type_name(&e[0]));
    if (kind == 1)
        return kd_err_set(d->err, KD_EBADREQ, "a response [1, ...] is not a request");
    if (kind == 2) {
        derr->is_notification = 1;
        return kd_err_set(d->err, KD_EBADREQ, "the server takes no notifications [2, ...]");
    }
    if (kind != 0)
        return kd_err_set(d->err, KD_EBADREQ, "message type %llu is not 0 (a request)",
                          (unsigned long long)kind);
    if (n >= 2 && kd_obj_uint64(&e[1], &req->msgid) == 0) {
        derr->has_msgid = 1;
        derr->msgid = req->msgid;
    }
    if (n != 4)
        return kd_err_set(d->err, KD_EBADREQ,
                          "a request has 4 elements [0, msgid, method, params], got %u", n);
    if (!derr->has_msgid)
        return kd_err_set(d->err, KD_EBADREQ, "msgid must be a non-negative integer, got %s",
                          kd_obj_type_name(&e[1]));
    const char *name;
    size_t len;
    if (kd_obj_str(&e[2], &name, &len) != 0)
        return kd_err_set(d->err, KD_EBADREQ, "method must be a str, got %s",
                          kd_obj_type_name(&e[2]));
    int m = 0;
    while (m < KD_METHOD_COUNT && !kd_obj_str_eq(&e[2], kd_method_names[m]))
        m++;
    if (m == KD_METHOD_COUNT) {
        char list[256] = "";
        for (int i = 0; i < KD_METHOD_COUNT; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
                     kd_method_names[i]);
        return kd_err_set(d->err, KD_EBADREQ, "unknown method '%s' (methods: %s)",
                          kd_printable(shown, name, len), list);
    }
    req->method = (kd_method_t)m;
    d->method = kd_method_names[m];
    int rc = kd_read_params(d, &e[3]);
    if (rc != KD_OK)
        return rc;
    return kd_decode_method(d);
}

/* msgpack_objects under o, o included: what msgpack_unpack_next took from its zone (nesting is
 * bounded by kd_frame_check_one, so the recursion is too). */
static size_t kd_object_count(const msgpack_object *o)
{
    size_t n = 1;
    if (o->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t i = 0; i < o->via.array.size; i++)
            n += kd_object_count(&o->via.array.ptr[i]);
    } else if (o->type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < o->via.map.size; i++)
            n += kd_object_count(&o->via.map.ptr[i].key) + kd_object_count(&o->via.map.ptr[i].val);
    }
    return n;
}

int kd_request_decode(void *buf, size_t len, const kd_proto_limits_t *limits, kd_request_t **out,
                      kd_decode_error_t *derr)
{
    static const kd_proto_limits_t no_limits;
    memset(derr, 0, sizeof(*derr));
    *out = NULL;
    struct kd_request_block *block = calloc(1, sizeof(*block));
    if (block == NULL) {
        kd_recycle_free(buf); /* the framer's buffer: perhaps recycled (frame.h) */
        return kd_err_set(&derr->err, KD_ENOMEM, "out of host memory for a request");
    }
    kd_request_t *req = &block->req;
    req->owned = &block->owned;
    req->owned->buf = buf;
    msgpack_unpacked_init(&req->owned->unpacked);

    struct kd_decoder d = {.req = req, .limits = limits ? limits : &no_limits, .err = &derr->err};
    size_t off = 0;
    int rc;
    if (buf == NULL || kd_frame_check_one(buf, len, KD_FRAME_DEPTH_MAX) != 0) {
        rc = kd_err_set(d.err, KD_EPROTO, "not one complete msgpack message of %zu bytes", len);
        goto fail;
    }
    msgpack_unpack_return ur = msgpack_unpack_next(&req->owned->unpacked, buf, len, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
        rc = kd_err_set(d.err, KD_ENOMEM, "out of host memory unpacking a %zu-byte message", len);
        goto fail;
    }
    if ((ur != MSGPACK_UNPACK_SUCCESS && ur != MSGPACK_UNPACK_EXTRA_BYTES) || off != len) {
        rc = kd_err_set(d.err, KD_EPROTO, "msgpack could not unpack the %zu-byte message", len);
        goto fail;
    }
    rc = kd_decode_envelope(&d, &req->owned->unpacked.data, derr);
    if (rc != KD_OK)
        goto fail;
    req->owned->bytes += sizeof(*block) + kd_recycle_capacity(buf, len) +
                         kd_object_count(&req->owned->unpacked.data) * sizeof(msgpack_object);
    *out = req;
    return KD_OK;
fail:
    kd_request_free(req);
    return rc;
}

kd_array_t *kd_request_array(kd_request_t *req, size_t i)
{
    switch (req->method) {
    case KD_METHOD_SPMV: {
        kd_array_t *a[] = {&req->u.spmv.x, &req->u.spmv.y, &req->u.spmv.out};
        return i < 3 ? a[i] : NULL;
    }
    case KD_METHOD_SOLVE: {
        kd_array_t *a[] = {&req->u.solve.b, &req->u.solve.x0, &req->u.solve.out};
        return i < 3 ? a[i] : NULL;
    }
    case KD_METHOD_MATRIX_PUT:
        return i == 0 ? &req->u.put.values : NULL;
    case KD_METHOD_SOLVE_BATCH:
        if (i / 2 >= (size_t)req->u.solve_batch.nitems)
            return NULL;
        return i % 2 == 0 ? &req->u.solve_batch.items[i / 2].b
                          : &req->u.solve_batch.items[i / 2].x0;
    default:
        return NULL;
    }
}

int kd_request_adopt(kd_request_t *req, void *buf, size_t bytes)
{
    struct kd_request_owned *owned = req->owned;
    if (owned->narrays == owned->cap_arrays) {
        const int cap = owned->cap_arrays > 0 ? 2 * owned->cap_arrays : 4;
        void **grown = realloc(owned->arrays, (size_t)cap * sizeof(*grown));
        if (grown == NULL) {
            kd_recycle_free(buf);
            return KD_ENOMEM;
        }
        owned->arrays = grown;
        owned->cap_arrays = cap;
    }
    owned->arrays[owned->narrays++] = buf;
    owned->bytes += bytes;
    return KD_OK;
}

size_t kd_request_host_bytes(const kd_request_t *req)
{
    return req != NULL ? req->owned->bytes : 0;
}

void kd_request_free(kd_request_t *req)
{
    if (req == NULL)
        return;
    struct kd_request_owned *owned = req->owned;
    msgpack_unpacked_destroy(&owned->unpacked);
    for (int i = 0; i < owned->narrays; i++) /* malloc'd, or from the shelf (kd_request_adopt) */
        kd_recycle_free(owned->arrays[i]);
    free(owned->arrays);
    free(owned->items);
    kd_recycle_free(owned->buf);
    free((struct kd_request_block *)req);
}
