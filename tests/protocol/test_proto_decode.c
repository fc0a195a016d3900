/*
 * Request decoding: every message goes writer -> framer (cut at a random byte) -> decoder. Each
 * validation rule has a case that sends the bad thing and checks the code and the message; good
 * requests check every decoded field (defaults, bins read in place, plain arrays converted,
 * float32, int64 indices). Random corruptions of good requests never crash the decoder.
 */
#include "common/error.h"
#include "kd_test.h"
#include "protocol/frame.h"
#include "protocol/request.h"
#include "protocol/writer.h"

static const char *const ID_HEX = "00112233445566778899AABBccddeeff";

static const kd_proto_limits_t limits = {
    .max_rows = 1000,
    .max_cols = 1000,
    .max_nnz = 5000,
    .max_nrhs = 4,
    .max_array_elements = 64,
};

/* [0, 42, method, [{ — the caller writes n entries. */
static void begin(kd_writer_t *w, const char *method, uint32_t n)
{
    kd_writer_init(w);
    kd_w_request_begin(w, 42, method);
    kd_w_array(w, 1);
    kd_w_map(w, n);
}

static void kv_doubles(kd_writer_t *w, const char *key, const double *v, uint32_t n)
{
    kd_w_key(w, key);
    kd_w_array(w, n);
    for (uint32_t i = 0; i < n; i++)
        kd_w_double(w, v[i]);
}

static void kv_ints(kd_writer_t *w, const char *key, const int64_t *v, uint32_t n)
{
    kd_w_key(w, key);
    kd_w_array(w, n);
    for (uint32_t i = 0; i < n; i++)
        kd_w_int(w, v[i]);
}

/* Frame the message (cut at a random byte) and decode what comes out. */
static int frame_and_decode(const void *data, size_t len, kd_request_t **req,
                            kd_decode_error_t *derr)
{
    kd_frame_t *f = NULL;
    if (kd_frame_new(NULL, &f) != KD_OK)
        abort();
    size_t cut = (size_t)kd_test_rand_below((int64_t)len + 1);
    kd_frame_event_t ev = {.kind = KD_FRAME_NEED_MORE};
    int rc = KD_EINTERNAL;
    if (kd_frame_feed(f, data, cut) != KD_OK)
        abort();
    if (cut < len) {
        CHECK(kd_frame_next(f, &ev) == KD_FRAME_NEED_MORE);
        if (kd_frame_feed(f, (const char *)data + cut, len - cut) != KD_OK)
            abort();
    }
    if (kd_frame_next(f, &ev) == KD_FRAME_MESSAGE)
        rc = kd_request_decode(ev.data, ev.len, &limits, req, derr);
    else
        CHECK_MSG(0, "framer: %d %s", (int)ev.kind, ev.message);
    kd_frame_free(f);
    return rc;
}

static int finish(kd_writer_t *w, kd_request_t **req, kd_decode_error_t *derr)
{
    size_t len;
    void *data = kd_writer_release(w, &len);
    kd_writer_destroy(w);
    *req = NULL;
    memset(derr, 0, sizeof(*derr));
    if (data == NULL)
        return KD_EINTERNAL;
    int rc = frame_and_decode(data, len, req, derr);
    free(data);
    return rc;
}

static kd_decode_error_t bad_at(kd_writer_t *w, int code, const char *needle, int line)
{
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    int rc = finish(w, &req, &derr);
    CHECK_MSG(rc == code && derr.err.code == code, "line %d: code %d, expected %d (%s)", line, rc,
              code, derr.err.message);
    CHECK_MSG(strstr(derr.err.message, needle) != NULL, "line %d: \"%s\" lacks \"%s\"", line,
              derr.err.message, needle);
    CHECK(req == NULL);
    kd_request_free(req);
    return derr;
}
#define BAD(w, code, needle) bad_at(w, code, needle, __LINE__)

static kd_request_t *good_at(kd_writer_t *w, int line)
{
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    int rc = finish(w, &req, &derr);
    CHECK_MSG(rc == KD_OK && req != NULL, "line %d: code %d: %s", line, rc, derr.err.message);
    return rc == KD_OK ? req : NULL;
}
#define GOOD(w) good_at(w, __LINE__)

/* ---- envelope ---- */

static void test_envelope_shapes(void)
{
    kd_writer_t w;
    kd_decode_error_t derr;

    kd_writer_init(&w);
    kd_w_map(&w, 0);
    derr = BAD(&w, KD_EBADREQ, "a request is an array [0, msgid, method, params], got map");
    CHECK(!derr.has_msgid && !derr.is_notification);

    kd_writer_init(&w);
    kd_w_array(&w, 0);
    BAD(&w, KD_EBADREQ, "got an empty array");

    kd_writer_init(&w);
    kd_w_error_response(&w, 5, KD_ENOTFOUND, "x");
    derr = BAD(&w, KD_EBADREQ, "a response [1, ...] is not a request");
    CHECK(!derr.has_msgid && !derr.is_notification);

    kd_writer_init(&w);
    kd_w_notification_begin(&w, "solve.progress");
    kd_w_array(&w, 0);
    derr = BAD(&w, KD_EBADREQ, "notifications");
    CHECK(derr.is_notification && !derr.has_msgid);

    kd_writer_init(&w);
    kd_w_array(&w, 4);
    kd_w_uint(&w, 3);
    kd_w_uint(&w, 5);
    kd_w_str(&w, "spmv");
    kd_w_nil(&w);
    BAD(&w, KD_EBADREQ, "message type 3 is not 0");

    kd_writer_init(&w);
    kd_w_array(&w, 4);
    kd_w_str(&w, "0");
    kd_w_uint(&w, 5);
    kd_w_str(&w, "spmv");
    kd_w_nil(&w);
    BAD(&w, KD_EBADREQ, "message type (element 0) must be 0, got str");

    kd_writer_init(&w);
    kd_w_array(&w, 3);
    kd_w_uint(&w, 0);
    kd_w_uint(&w, 5);
    kd_w_str(&w, "matrix.list");
    derr = BAD(&w, KD_EBADREQ, "a request has 4 elements [0, msgid, method, params], got 3");
    CHECK(derr.has_msgid && derr.msgid == 5);

    kd_writer_init(&w);
    kd_w_array(&w, 4);
    kd_w_uint(&w, 0);
    kd_w_int(&w, -5);
    kd_w_str(&w, "matrix.list");
    kd_w_nil(&w);
    derr = BAD(&w, KD_EBADREQ, "msgid must be a non-negative integer, got int");
    CHECK(!derr.has_msgid);

    kd_writer_init(&w);
    kd_w_array(&w, 4);
    kd_w_uint(&w, 0);
    kd_w_uint(&w, UINT64_MAX);
    kd_w_uint(&w, 7);
    kd_w_nil(&w);
    derr = BAD(&w, KD_EBADREQ, "method must be a str, got int");
    CHECK(derr.has_msgid && derr.msgid == UINT64_MAX);

    kd_writer_init(&w);
    kd_w_request_begin(&w, 6, "matrix.push\n");
    kd_w_nil(&w);
    BAD(&w, KD_EBADREQ, "unknown method 'matrix.push?' (methods: matrix.put, matrix.info");
}

static void test_params_forms(void)
{
    kd_writer_t w;
    kd_request_t *r;

    /* [map], a bare map, [], nil, [nil] */
    begin(&w, "server.status", 1);
    kd_w_kv_int(&w, "timeout_ms", 5000);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->method == KD_METHOD_SERVER_STATUS && r->msgid == 42 && r->timeout_ms == 5000);
    kd_request_free(r);

    kd_writer_init(&w);
    kd_w_request_begin(&w, 8, "matrix.list");
    kd_w_map(&w, 1);
    kd_w_kv_int(&w, "timeout_ms", 7);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->method == KD_METHOD_MATRIX_LIST && r->msgid == 8 && r->timeout_ms == 7);
    kd_request_free(r);

    for (int form = 0; form < 3; form++) {
        kd_writer_init(&w);
        kd_w_request_begin(&w, 9, "matrix.list");
        if (form == 0) {
            kd_w_array(&w, 0);
        } else if (form == 1) {
            kd_w_nil(&w);
        } else {
            kd_w_array(&w, 1);
            kd_w_nil(&w);
        }
        r = GOOD(&w);
        CHECK(r != NULL && r->timeout_ms == 0);
        kd_request_free(r);
    }

    kd_writer_init(&w);
    kd_w_request_begin(&w, 9, "matrix.list");
    kd_w_array(&w, 2);
    kd_w_map(&w, 0);
    kd_w_map(&w, 0);
    BAD(&w, KD_EBADREQ, "params must be [map], a map, [] or nil; got an array of 2");

    kd_writer_init(&w);
    kd_w_request_begin(&w, 9, "matrix.list");
    kd_w_str(&w, "x");
    BAD(&w, KD_EBADREQ, "params must be [map], a map, [] or nil; got str");

    kd_writer_init(&w);
    kd_w_request_begin(&w, 9, "matrix.list");
    kd_w_array(&w, 1);
    kd_w_int(&w, 3);
    BAD(&w, KD_EBADREQ, "got [] of int");
}

/* An unknown key on every method: the refusal lists the keys the method takes, so every one of
 * them must have a name (a key added to a method without its name would crash here). */
static void test_every_method_names_its_keys(void)
{
    for (int m = 0; m < KD_METHOD_COUNT; m++) {
        const char *name = kd_method_name((kd_method_t)m);
        kd_writer_t w;
        begin(&w, name, 1);
        kd_w_kv_int(&w, "no_such_key", 1);
        char needle[96];
        snprintf(needle, sizeof(needle), "unknown parameter 'no_such_key' for %s", name);
        kd_decode_error_t derr = BAD(&w, KD_EBADREQ, needle);
        CHECK_MSG(strstr(derr.err.message, "(null)") == NULL, "%s", derr.err.message);
    }
}

/* matrix.put with like: values alone (pattern and choosing keys refused); solve's
 * reuse_preconditioner is a bool. */
static void test_like_and_reuse(void)
{
    kd_writer_t w;
    begin(&w, "matrix.put", 3);
    kd_w_kv_str(&w, "like", ID_HEX);
    kd_w_kv_bin(&w, "values", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_str(&w, "pattern", ID_HEX);
    kd_request_t *r = GOOD(&w);
    CHECK(r->u.put.kind == KD_PUT_LIKE && r->u.put.values.count == 1 && r->u.put.has_pattern);
    kd_request_free(r);
    begin(&w, "matrix.put", 3);
    kd_w_kv_str(&w, "like", ID_HEX);
    kd_w_kv_bin(&w, "values", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_int(&w, "rows", 1);
    BAD(&w, KD_EBADREQ, "rows is not used with like");
    begin(&w, "matrix.put", 3);
    kd_w_kv_str(&w, "like", ID_HEX);
    kd_w_kv_bin(&w, "values", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_str(&w, "reorder", "rcm");
    BAD(&w, KD_EBADREQ, "reorder is not used with like");
    begin(&w, "matrix.put", 2);
    kd_w_kv_str(&w, "like", "zz");
    kd_w_kv_bin(&w, "values", "\0\0\0\0\0\0\0\0", 8);
    BAD(&w, KD_EBADREQ, "like 'zz' is not 32 hex digits");
    begin(&w, "solve", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_bool(&w, "reuse_preconditioner", 1);
    r = GOOD(&w);
    CHECK(r->u.solve.reuse_preconditioner == 1);
    kd_request_free(r);
    begin(&w, "solve", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_str(&w, "reuse_preconditioner", "yes");
    BAD(&w, KD_EBADREQ, "reuse_preconditioner");
}

static void test_param_names(void)
{
    kd_writer_t w;
    kd_decode_error_t derr;

    begin(&w, "solve", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_double(&w, "rtoll", 1e-6);
    derr = BAD(&w, KD_EBADREQ, "unknown parameter 'rtoll' for solve (it takes");
    CHECK(derr.has_msgid && derr.msgid == 42);
    CHECK_STR_CONTAINS(derr.err.message, "rtol");

    begin(&w, "spmv", 1);
    kd_w_kv_nil(&w, "x0");
    BAD(&w, KD_EBADREQ, "unknown parameter 'x0' for spmv");

    begin(&w, "matrix.list", 1);
    kd_w_kv_str(&w, "id", ID_HEX);
    BAD(&w, KD_EBADREQ, "unknown parameter 'id' for matrix.list (it takes timeout_ms)");

    begin(&w, "matrix.info", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_str(&w, "id", ID_HEX);
    BAD(&w, KD_EBADREQ, "parameter 'id' is given twice");

    begin(&w, "matrix.info", 1);
    kd_w_int(&w, 1);
    kd_w_str(&w, ID_HEX);
    BAD(&w, KD_EBADREQ, "parameter names must be str, got int");

    begin(&w, "server.status", 1);
    kd_w_kv_int(&w, "timeout_ms", -1);
    BAD(&w, KD_EBADREQ, "timeout_ms must be >= 0, got -1");

    begin(&w, "server.status", 1);
    kd_w_kv_str(&w, "timeout_ms", "10");
    BAD(&w, KD_EBADREQ, "timeout_ms must be an integer, got str");

    begin(&w, "server.status", 1);
    kd_w_kv_uint(&w, "timeout_ms", UINT64_MAX);
    BAD(&w, KD_ETOOLARGE, "timeout_ms = 18446744073709551615 is too large");

    /* server.status's wait_warm: a bool, false when absent; nothing else takes it */
    begin(&w, "server.status", 2);
    kd_w_kv_bool(&w, "wait_warm", 1);
    kd_w_kv_int(&w, "timeout_ms", 250);
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->u.status.wait_warm == 1 && r->timeout_ms == 250);
    kd_request_free(r);
    kd_writer_init(&w);
    begin(&w, "server.status", 0);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->u.status.wait_warm == 0);
    kd_request_free(r);
    kd_writer_init(&w);
    begin(&w, "server.status", 1);
    kd_w_kv_int(&w, "wait_warm", 1);
    BAD(&w, KD_EBADREQ, "wait_warm");
    begin(&w, "matrix.list", 1);
    kd_w_kv_bool(&w, "wait_warm", 1);
    BAD(&w, KD_EBADREQ, "unknown parameter 'wait_warm' for matrix.list");
}

/* Bytes that the framer would not deliver still get a clean KD_EPROTO. */
static void test_not_msgpack(void)
{
    static const uint8_t truncated[] = {0x94, 0x00, 0x01};
    static const uint8_t reserved[] = {0xc1};
    static const uint8_t trailing[] = {0x94, 0x00, 0x01, 0xa1, 'x', 0x90, 0x00};
    static const uint8_t bomb[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
    const struct {
        const uint8_t *p;
        size_t n;
    } cases[] = {{truncated, sizeof(truncated)},
                 {reserved, sizeof(reserved)},
                 {trailing, sizeof(trailing)},
                 {bomb, sizeof(bomb)}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        void *buf = malloc(cases[i].n);
        REQUIRE(buf != NULL);
        memcpy(buf, cases[i].p, cases[i].n);
        kd_request_t *req = NULL;
        kd_decode_error_t derr;
        CHECK_EQ_INT(kd_request_decode(buf, cases[i].n, &limits, &req, &derr), KD_EPROTO);
        CHECK_STR_CONTAINS(derr.err.message, "not one complete msgpack message");
        CHECK(req == NULL && !derr.has_msgid);
    }
    uint8_t *deep = malloc(40);
    REQUIRE(deep != NULL);
    memset(deep, 0x91, 39);
    deep[39] = 0xc0;
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    CHECK_EQ_INT(kd_request_decode(deep, 40, &limits, &req, &derr), KD_EPROTO);
}

/* ---- matrix.put ---- */

static const int32_t csr_indptr[] = {0, 2, 3, 4};
static const int32_t csr_indices[] = {0, 2, 1, 2};
static const double csr_values[] = {1.0, -2.5, 3.0, 4.0};

static void test_put_csr_bins(void)
{
    kd_writer_t w;
    begin(&w, "matrix.put", 9);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_bin(&w, "indptr", csr_indptr, sizeof(csr_indptr));
    kd_w_kv_bin(&w, "indices", csr_indices, sizeof(csr_indices));
    kd_w_kv_bin(&w, "values", csr_values, sizeof(csr_values));
    kd_w_kv_str(&w, "name", "laplace 3");
    kd_w_kv_str(&w, "format", "ell");
    kd_w_kv_str(&w, "select", "heuristic");
    kd_w_kv_bool(&w, "pin", 1);
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    const kd_put_request_t *p = &r->u.put;
    CHECK(r->method == KD_METHOD_MATRIX_PUT && p->kind == KD_PUT_CSR);
    CHECK(p->rows == 3 && p->cols == 3 && p->dtype == KD_DTYPE_F64);
    CHECK(p->indptr.present && p->indptr.count == 4 && p->indptr.dtype == KD_DTYPE_I32);
    CHECK(p->indices.count == 4 && p->indices.dtype == KD_DTYPE_I32);
    CHECK(p->values.count == 4 && p->values.dtype == KD_DTYPE_F64);
    CHECK(!p->row.present && !p->col.present && p->mtx == NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(kd_load_index(p->indptr.data, KD_DTYPE_I32, (size_t)i) == csr_indptr[i]);
        CHECK(kd_load_index(p->indices.data, KD_DTYPE_I32, (size_t)i) == csr_indices[i]);
        CHECK(kd_load_real(p->values.data, KD_DTYPE_F64, (size_t)i) == csr_values[i]);
    }
    CHECK(strcmp(p->options.name, "laplace 3") == 0 && strcmp(p->options.format, "ell") == 0);
    CHECK(strcmp(p->options.select, "heuristic") == 0 && p->options.pin == 1);
    kd_request_free(r);
}

/* int64 indices and float32 values as bins; plain arrays with the defaults. */
static void test_put_int64_float32_and_plain(void)
{
    static const int64_t indptr64[] = {0, 2, 3, 4};
    static const int64_t indices64[] = {0, 2, 1, 2};
    static const float values32[] = {1.0f, -2.5f, 3.0f, 4.0f};
    kd_writer_t w;
    begin(&w, "matrix.put", 7);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_str(&w, "index_dtype", "int64");
    kd_w_kv_str(&w, "dtype", "float32");
    kd_w_kv_bin(&w, "indptr", indptr64, sizeof(indptr64));
    kd_w_kv_bin(&w, "indices", indices64, sizeof(indices64));
    kd_w_kv_bin(&w, "values", values32, sizeof(values32));
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    const kd_put_request_t *p = &r->u.put;
    CHECK(p->dtype == KD_DTYPE_F32 && p->values.dtype == KD_DTYPE_F32 && p->values.count == 4);
    CHECK(p->indptr.dtype == KD_DTYPE_I64 && p->indptr.count == 4);
    CHECK(p->indices.dtype == KD_DTYPE_I64 && p->indices.count == 4);
    CHECK(kd_load_index(p->indices.data, KD_DTYPE_I64, 1) == 2);
    CHECK(kd_load_real(p->values.data, KD_DTYPE_F32, 1) == -2.5);
    CHECK(p->options.name[0] == '\0' && p->options.format[0] == '\0' &&
          p->options.select[0] == '\0' && p->options.pin == -1);
    kd_request_free(r);

    /* plain arrays: indices into int32 (the default), values into float64 (ints accepted) */
    static const int64_t pindptr[] = {0, 2, 3, 4};
    static const int64_t pindices[] = {0, 2, 1, 2};
    begin(&w, "matrix.put", 5);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kv_ints(&w, "indptr", pindptr, 4);
    kv_ints(&w, "indices", pindices, 4);
    kd_w_key(&w, "values");
    kd_w_array(&w, 4);
    kd_w_int(&w, 1);
    kd_w_double(&w, -2.5);
    kd_w_uint(&w, 3);
    kd_w_double(&w, 4.0);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    p = &r->u.put;
    CHECK(p->indptr.dtype == KD_DTYPE_I32 && p->indices.dtype == KD_DTYPE_I32);
    CHECK(p->values.dtype == KD_DTYPE_F64 && p->values.count == 4);
    for (int i = 0; i < 4; i++) {
        CHECK(kd_load_index(p->indptr.data, KD_DTYPE_I32, (size_t)i) == pindptr[i]);
        CHECK(kd_load_index(p->indices.data, KD_DTYPE_I32, (size_t)i) == pindices[i]);
        CHECK(kd_load_real(p->values.data, KD_DTYPE_F64, (size_t)i) == csr_values[i]);
    }
    kd_request_free(r);

    /* plain arrays converted to int64 and float32 */
    static const int64_t big[] = {0, 4000000000ll};
    static const double vals[] = {0.1, -7.0};
    begin(&w, "matrix.put", 7);
    kd_w_kv_int(&w, "rows", 1);
    kd_w_kv_int(&w, "cols", 1000);
    kd_w_kv_str(&w, "index_dtype", "i8");
    kd_w_kv_str(&w, "dtype", "f4");
    kv_ints(&w, "row", big, 2);
    kv_ints(&w, "col", big, 2);
    kv_doubles(&w, "values", vals, 2);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    p = &r->u.put;
    CHECK(p->kind == KD_PUT_COO && p->row.dtype == KD_DTYPE_I64 && p->col.count == 2);
    CHECK(kd_load_index(p->col.data, KD_DTYPE_I64, 1) == 4000000000ll);
    CHECK(p->values.dtype == KD_DTYPE_F32 &&
          kd_load_real(p->values.data, KD_DTYPE_F32, 0) == (double)0.1f);
    kd_request_free(r);
}

static void test_put_coo_and_mtx(void)
{
    static const int32_t row[] = {2, 0, 1};
    static const int32_t col[] = {0, 1, 1};
    static const double values[] = {1, 2, 3};
    static const char text[] = "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2.0\n";
    kd_writer_t w;
    begin(&w, "matrix.put", 5);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 2);
    kd_w_kv_bin(&w, "row", row, sizeof(row));
    kd_w_kv_bin(&w, "col", col, sizeof(col));
    kd_w_kv_bin(&w, "values", values, sizeof(values));
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->u.put.kind == KD_PUT_COO && r->u.put.row.count == 3 && r->u.put.col.count == 3);
    CHECK(kd_load_index(r->u.put.row.data, KD_DTYPE_I32, 0) == 2);
    CHECK(!r->u.put.indptr.present);
    kd_request_free(r);

    for (int as_bin = 0; as_bin < 2; as_bin++) {
        begin(&w, "matrix.put", 3);
        if (as_bin)
            kd_w_kv_bin(&w, "mtx", text, strlen(text));
        else
            kd_w_kv_str(&w, "mtx", text);
        kd_w_kv_str(&w, "dtype", "float32");
        kd_w_kv_nil(&w, "name");
        r = GOOD(&w);
        REQUIRE(r != NULL);
        CHECK(r->u.put.kind == KD_PUT_MTX && r->u.put.dtype == KD_DTYPE_F32);
        CHECK(r->u.put.mtx_len == strlen(text) && memcmp(r->u.put.mtx, text, strlen(text)) == 0);
        kd_request_free(r);
    }
}

/* A CSR put with one parameter replaced (or left out when value kind is 'o'). */
static void put_csr_with(kd_writer_t *w, const char *replace, void (*write)(kd_writer_t *))
{
    const char *keys[] = {"rows", "cols", "indptr", "indices", "values"};
    uint32_t n = 5;
    int present = 0;
    for (int i = 0; i < 5; i++)
        present |= replace != NULL && strcmp(keys[i], replace) == 0;
    begin(w, "matrix.put", write == NULL ? n - (uint32_t)present : n + (uint32_t)!present);
    for (int i = 0; i < 5; i++) {
        if (replace != NULL && strcmp(keys[i], replace) == 0)
            continue;
        if (i == 0 || i == 1)
            kd_w_kv_int(w, keys[i], 3);
        else if (i == 2)
            kd_w_kv_bin(w, keys[i], csr_indptr, sizeof(csr_indptr));
        else if (i == 3)
            kd_w_kv_bin(w, keys[i], csr_indices, sizeof(csr_indices));
        else
            kd_w_kv_bin(w, keys[i], csr_values, sizeof(csr_values));
    }
    if (write != NULL)
        write(w);
}

static void w_rows_negative(kd_writer_t *w)
{
    kd_w_kv_int(w, "rows", -1);
}
static void w_rows_over_limit(kd_writer_t *w)
{
    kd_w_kv_int(w, "rows", 1001);
}
static void w_cols_huge(kd_writer_t *w)
{
    kd_w_kv_int(w, "cols", 3000000000ll);
}
static void w_rows_str(kd_writer_t *w)
{
    kd_w_kv_str(w, "rows", "3");
}
static void w_indptr_short(kd_writer_t *w)
{
    kd_w_kv_bin(w, "indptr", csr_indptr, 3 * sizeof(int32_t));
}
static void w_indices_short(kd_writer_t *w)
{
    kd_w_kv_bin(w, "indices", csr_indices, 3 * sizeof(int32_t));
}
static void w_indices_odd_bin(kd_writer_t *w)
{
    kd_w_kv_bin(w, "indices", csr_indices, 6);
}
static void w_values_13_bytes(kd_writer_t *w)
{
    kd_w_kv_bin(w, "values", csr_values, 13);
}
static void w_values_str(kd_writer_t *w)
{
    kd_w_kv_str(w, "values", "1 2 3 4");
}
static void w_values_plain_str_element(kd_writer_t *w)
{
    kd_w_key(w, "values");
    kd_w_array(w, 4);
    kd_w_double(w, 1);
    kd_w_str(w, "2");
    kd_w_double(w, 3);
    kd_w_double(w, 4);
}
static void w_values_plain_too_long(kd_writer_t *w)
{
    kd_w_key(w, "values");
    kd_w_array(w, 65);
    for (int i = 0; i < 65; i++)
        kd_w_double(w, i);
}
static void w_indices_plain_float(kd_writer_t *w)
{
    kd_w_key(w, "indices");
    kd_w_array(w, 4);
    kd_w_double(w, 0.0);
    kd_w_int(w, 2);
    kd_w_int(w, 1);
    kd_w_int(w, 2);
}
static void w_indices_plain_over_int32(kd_writer_t *w)
{
    static const int64_t v[] = {0, 2, 1, 3000000000ll};
    kv_ints(w, "indices", v, 4);
}
static void w_indices_plain_over_int64(kd_writer_t *w)
{
    kd_w_key(w, "indices");
    kd_w_array(w, 4);
    kd_w_int(w, 0);
    kd_w_int(w, 2);
    kd_w_int(w, 1);
    kd_w_uint(w, UINT64_MAX);
}
static void w_dtype_int32(kd_writer_t *w)
{
    kd_w_kv_str(w, "dtype", "int32");
}
static void w_dtype_float16(kd_writer_t *w)
{
    kd_w_kv_str(w, "dtype", "float16");
}
static void w_dtype_int(kd_writer_t *w)
{
    kd_w_kv_int(w, "dtype", 8);
}
static void w_index_dtype_float(kd_writer_t *w)
{
    kd_w_kv_str(w, "index_dtype", "float64");
}
static void w_index_dtype_int64(kd_writer_t *w)
{
    kd_w_kv_str(w, "index_dtype", "int64"); /* the int32 bins are then half the entries */
}
static void w_name_long(kd_writer_t *w)
{
    char name[201];
    memset(name, 'n', 200);
    name[200] = '\0';
    kd_w_kv_str(w, "name", name);
}
static void w_name_int(kd_writer_t *w)
{
    kd_w_kv_int(w, "name", 5);
}
static void w_name_nul(kd_writer_t *w)
{
    kd_w_key(w, "name");
    kd_w_strn(w, "a\0b", 3);
}
static void w_format_long(kd_writer_t *w)
{
    kd_w_kv_str(w, "format", "csr-adaptive-with-a-very-long-name");
}
static void w_select_fast(kd_writer_t *w)
{
    kd_w_kv_str(w, "select", "fast");
}
static void w_pin_str(kd_writer_t *w)
{
    kd_w_kv_str(w, "pin", "yes");
}
static void w_mtx_too(kd_writer_t *w)
{
    kd_w_kv_str(w, "mtx", "%%MatrixMarket");
}
static void w_row_too(kd_writer_t *w)
{
    kd_w_kv_bin(w, "row", csr_indices, sizeof(csr_indices));
}

static void test_put_rules(void)
{
    static const struct {
        const char *replace;
        void (*write)(kd_writer_t *);
        int code;
        const char *needle;
    } cases[] = {
        {"rows", NULL, KD_EBADREQ, "missing parameter 'rows' for matrix.put"},
        {"cols", NULL, KD_EBADREQ, "missing parameter 'cols' for matrix.put"},
        {"indices", NULL, KD_EBADREQ, "missing parameter 'indices' for matrix.put"},
        {"values", NULL, KD_EBADREQ, "missing parameter 'values' for matrix.put"},
        {"indptr", NULL, KD_EBADREQ, "exactly one of indptr (CSR), row and col (COO) or mtx"},
        {"rows", w_rows_negative, KD_EBADREQ, "negative size: rows = -1"},
        {"rows", w_rows_over_limit, KD_ETOOLARGE, "rows = 1001 is over this server's limit 1000"},
        {"cols", w_cols_huge, KD_ETOOLARGE, "largest supported dimension"},
        {"rows", w_rows_str, KD_EBADREQ, "rows must be an integer, got str"},
        {"indptr", w_indptr_short, KD_EBADREQ, "indptr has 3 entries but rows + 1 = 4"},
        {"indices", w_indices_short, KD_EBADREQ, "indices has 3 entries but values has 4"},
        {"indices", w_indices_odd_bin, KD_EBADREQ,
         "indices: bin of 6 bytes is not a whole number of int32 values"},
        {"values", w_values_13_bytes, KD_EBADREQ,
         "values: bin of 13 bytes is not a whole number of float64 values"},
        {"values", w_values_str, KD_EBADREQ,
         "values must be a bin of float64 or an array of numbers, got str"},
        {"values", w_values_plain_str_element, KD_EBADREQ, "values[1] must be a number, got str"},
        {"values", w_values_plain_too_long, KD_ETOOLARGE,
         "values: a plain array of 65 numbers is over the limit of 64; use a bin"},
        {"indices", w_indices_plain_float, KD_EBADREQ, "indices[0] must be an integer, got float"},
        {"indices", w_indices_plain_over_int32, KD_EBADREQ,
         "indices[3] = 3000000000 does not fit int32; send index_dtype int64"},
        {"indices", w_indices_plain_over_int64, KD_EBADREQ,
         "indices[3] = 18446744073709551615 does not fit int64"},
        {NULL, w_dtype_int32, KD_EBADREQ, "dtype 'int32' is not float64 or float32"},
        {NULL, w_dtype_float16, KD_EBADREQ, "dtype 'float16' is not float64 or float32"},
        {NULL, w_dtype_int, KD_EBADREQ, "dtype must be a str (float64 or float32), got int"},
        {NULL, w_index_dtype_float, KD_EBADREQ, "index_dtype 'float64' is not int32 or int64"},
        {NULL, w_index_dtype_int64, KD_EBADREQ, "indptr has 2 entries but rows + 1 = 4"},
        {NULL, w_name_long, KD_EBADREQ, "name is 200 bytes, longer than the limit of 127"},
        {NULL, w_name_int, KD_EBADREQ, "name must be a str, got int"},
        {NULL, w_name_nul, KD_EBADREQ, "name contains a NUL byte"},
        {NULL, w_format_long, KD_EBADREQ, "format is 34 bytes, longer than the limit of 31"},
        {NULL, w_select_fast, KD_EBADREQ, "select 'fast' is not one of measure | heuristic"},
        {NULL, w_pin_str, KD_EBADREQ, "pin must be true or false, got str"},
        {NULL, w_mtx_too, KD_EBADREQ, "got more than one"},
        {NULL, w_row_too, KD_EBADREQ, "got more than one"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_writer_t w;
        put_csr_with(&w, cases[i].replace, cases[i].write);
        kd_decode_error_t derr = bad_at(&w, cases[i].code, cases[i].needle, (int)i);
        CHECK(derr.has_msgid && derr.msgid == 42);
    }
    /* the limit on nnz, counted from the arrays */
    kd_proto_limits_t tight = limits;
    tight.max_nnz = 3;
    kd_writer_t w;
    put_csr_with(&w, NULL, NULL);
    size_t len;
    void *data = kd_writer_release(&w, &len);
    kd_writer_destroy(&w);
    REQUIRE(data != NULL);
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    CHECK_EQ_INT(kd_request_decode(data, len, &tight, &req, &derr), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(derr.err.message, "nnz = 4 is over this server's limit 3");
}

static void test_put_form_rules(void)
{
    static const int32_t idx[] = {0, 1};
    static const double values[] = {1, 2};
    kd_writer_t w;

    begin(&w, "matrix.put", 2);
    kd_w_kv_int(&w, "rows", 2);
    kd_w_kv_int(&w, "cols", 2);
    BAD(&w, KD_EBADREQ, "got none");

    begin(&w, "matrix.put", 2);
    kd_w_kv_str(&w, "mtx", "%%MatrixMarket");
    kd_w_kv_int(&w, "rows", 2);
    BAD(&w, KD_EBADREQ, "rows is not used with mtx");

    begin(&w, "matrix.put", 2);
    kd_w_kv_str(&w, "mtx", "%%MatrixMarket");
    kd_w_kv_str(&w, "index_dtype", "int64");
    BAD(&w, KD_EBADREQ, "index_dtype is not used with mtx");

    begin(&w, "matrix.put", 1);
    kd_w_kv_int(&w, "mtx", 1);
    BAD(&w, KD_EBADREQ, "mtx must be a str or bin of Matrix Market text, got int");

    begin(&w, "matrix.put", 5);
    kd_w_kv_int(&w, "rows", 2);
    kd_w_kv_int(&w, "cols", 2);
    kd_w_kv_bin(&w, "row", idx, sizeof(idx));
    kd_w_kv_bin(&w, "indices", idx, sizeof(idx));
    kd_w_kv_bin(&w, "values", values, sizeof(values));
    BAD(&w, KD_EBADREQ, "indices is not used with row/col (COO)");

    begin(&w, "matrix.put", 4);
    kd_w_kv_int(&w, "rows", 2);
    kd_w_kv_int(&w, "cols", 2);
    kd_w_kv_bin(&w, "row", idx, sizeof(idx));
    kd_w_kv_bin(&w, "values", values, sizeof(values));
    BAD(&w, KD_EBADREQ, "missing parameter 'col' for matrix.put");

    begin(&w, "matrix.put", 5);
    kd_w_kv_int(&w, "rows", 2);
    kd_w_kv_int(&w, "cols", 2);
    kd_w_kv_bin(&w, "row", idx, sizeof(idx));
    kd_w_kv_bin(&w, "col", idx, sizeof(int32_t));
    kd_w_kv_bin(&w, "values", values, sizeof(values));
    BAD(&w, KD_EBADREQ, "col has 1 entries but values has 2");
}

/* ---- matrix.info / drop / pin, job.cancel ---- */

static void test_ids_and_cancel(void)
{
    static const uint8_t expected[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                         0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    static const char *const methods[] = {"matrix.info", "matrix.drop", "matrix.pin"};
    kd_writer_t w;
    for (int m = 0; m < 3; m++) {
        begin(&w, methods[m], 1);
        kd_w_kv_str(&w, "id", ID_HEX);
        kd_request_t *r = GOOD(&w);
        REQUIRE(r != NULL);
        CHECK(strcmp(kd_method_name(r->method), methods[m]) == 0);
        CHECK(memcmp(r->u.id.id, expected, 16) == 0);
        if (m == 2)
            CHECK_EQ_INT(r->u.id.pinned, 1);
        kd_request_free(r);
    }
    begin(&w, "matrix.pin", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bool(&w, "pinned", 0);
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(r->u.id.pinned, 0);
    kd_request_free(r);

    begin(&w, "matrix.info", 1);
    kd_w_kv_str(&w, "id", "zz112233445566778899aabbccddeeff");
    BAD(&w, KD_EBADREQ, "id 'zz112233445566778899aabbccddeeff' is not 32 hex digits");
    begin(&w, "matrix.drop", 1);
    kd_w_kv_str(&w, "id", "0011223344556677");
    BAD(&w, KD_EBADREQ, "id '0011223344556677' is not 32 hex digits");
    begin(&w, "matrix.drop", 1);
    kd_w_kv_str(&w, "id", "00112233445566778899aabbccddeeff0");
    BAD(&w, KD_EBADREQ, "is not 32 hex digits");
    begin(&w, "matrix.info", 1);
    kd_w_kv_bin(&w, "id", expected, 16);
    BAD(&w, KD_EBADREQ, "id must be a str of 32 hex digits, got bin");
    begin(&w, "matrix.info", 0);
    BAD(&w, KD_EBADREQ, "missing parameter 'id' for matrix.info");
    begin(&w, "matrix.pin", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_int(&w, "pinned", 1);
    BAD(&w, KD_EBADREQ, "pinned must be true or false, got int");

    begin(&w, "job.cancel", 1);
    kd_w_kv_uint(&w, "msgid", 17);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->method == KD_METHOD_JOB_CANCEL && r->u.cancel.target_msgid == 17);
    kd_request_free(r);
    begin(&w, "job.cancel", 0);
    BAD(&w, KD_EBADREQ, "missing parameter 'msgid' for job.cancel");
    begin(&w, "job.cancel", 1);
    kd_w_kv_int(&w, "msgid", -3);
    BAD(&w, KD_EBADREQ, "msgid must be a non-negative integer, got int");
}

/* ---- matrix.share ---- */

static void test_share(void)
{
    static const char *hex = "00112233445566778899aabbccddeeff";
    kd_writer_t w;
    begin(&w, "matrix.share", 2);
    kd_w_kv_str(&w, "id", hex);
    kd_w_kv_str(&w, "user", "bob");
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->method == KD_METHOD_MATRIX_SHARE && strcmp(r->u.id.user, "bob") == 0);
    CHECK(r->u.id.id[0] == 0x00 && r->u.id.id[15] == 0xff);
    kd_request_free(r);
    begin(&w, "matrix.share", 1);
    kd_w_kv_str(&w, "id", hex);
    BAD(&w, KD_EBADREQ, "missing parameter 'user' for matrix.share");
    begin(&w, "matrix.share", 2);
    kd_w_kv_str(&w, "id", hex);
    kd_w_kv_int(&w, "user", 3);
    BAD(&w, KD_EBADREQ, "user must be a str, got int");
    begin(&w, "matrix.share", 2);
    kd_w_kv_str(&w, "id", hex);
    kd_w_kv_str(&w, "user", "");
    BAD(&w, KD_EBADREQ, "user must be 1..63 bytes without NUL");
    char longname[80];
    memset(longname, 'a', 64);
    longname[64] = '\0';
    begin(&w, "matrix.share", 2);
    kd_w_kv_str(&w, "id", hex);
    kd_w_kv_str(&w, "user", longname);
    BAD(&w, KD_EBADREQ, "user must be 1..63 bytes without NUL");
    begin(&w, "matrix.share", 1);
    kd_w_kv_str(&w, "user", "bob");
    BAD(&w, KD_EBADREQ, "missing parameter 'id' for matrix.share");
}

/* ---- auth ---- */

static void test_auth(void)
{
    kd_writer_t w;
    begin(&w, "auth", 2);
    kd_w_kv_str(&w, "name", "alice");
    kd_w_kv_str(&w, "token", "s3cret");
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->method == KD_METHOD_AUTH && strcmp(r->u.auth.name, "alice") == 0);
    CHECK(r->u.auth.token_len == 6 && memcmp(r->u.auth.token, "s3cret", 6) == 0);
    kd_request_free(r);
    begin(&w, "auth", 2);
    kd_w_kv_str(&w, "name", "alice");
    kd_w_kv_str(&w, "token", "");
    r = GOOD(&w); /* an empty token decodes; the server refuses it like any wrong one */
    REQUIRE(r != NULL);
    CHECK(r->u.auth.token_len == 0);
    kd_request_free(r);

    begin(&w, "auth", 1);
    kd_w_kv_str(&w, "name", "alice");
    BAD(&w, KD_EBADREQ, "missing parameter 'token' for auth");
    begin(&w, "auth", 1);
    kd_w_kv_str(&w, "token", "t");
    BAD(&w, KD_EBADREQ, "missing parameter 'name' for auth");
    begin(&w, "auth", 2);
    kd_w_kv_int(&w, "name", 7);
    kd_w_kv_str(&w, "token", "t");
    BAD(&w, KD_EBADREQ, "name must be a str, got int");
    begin(&w, "auth", 2);
    kd_w_kv_str(&w, "name", "alice");
    kd_w_kv_bin(&w, "token", "t", 1);
    BAD(&w, KD_EBADREQ, "token must be a str, got bin");
    char long_name[KD_AUTH_NAME_MAX + 1];
    memset(long_name, 'n', KD_AUTH_NAME_MAX);
    long_name[KD_AUTH_NAME_MAX] = '\0';
    begin(&w, "auth", 2);
    kd_w_kv_str(&w, "name", long_name);
    kd_w_kv_str(&w, "token", "t");
    BAD(&w, KD_EBADREQ, "name must be 1..63 bytes");
    begin(&w, "auth", 2);
    kd_w_kv_str(&w, "name", "");
    kd_w_kv_str(&w, "token", "t");
    BAD(&w, KD_EBADREQ, "name must be 1..63 bytes");
    char long_token[KD_AUTH_TOKEN_MAX + 2];
    memset(long_token, 't', KD_AUTH_TOKEN_MAX + 1);
    long_token[KD_AUTH_TOKEN_MAX + 1] = '\0';
    begin(&w, "auth", 2);
    kd_w_kv_str(&w, "name", "alice");
    kd_w_kv_str(&w, "token", long_token);
    BAD(&w, KD_EBADREQ, "token is longer than 256 bytes");
    begin(&w, "auth", 3);
    kd_w_kv_str(&w, "name", "alice");
    kd_w_kv_str(&w, "token", "t");
    kd_w_kv_str(&w, "password", "t");
    BAD(&w, KD_EBADREQ, "unknown parameter 'password' for auth (it takes timeout_ms, name, token)");
}

/* ---- matrix.multiply ---- */

static void test_multiply(void)
{
    static const char *const B_HEX = "ffeeddccbbaa99887766554433221100";
    static const uint8_t a_id[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                     0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    kd_writer_t w;
    begin(&w, "matrix.multiply", 2);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", B_HEX);
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    const kd_multiply_request_t *m = &r->u.multiply;
    CHECK(r->method == KD_METHOD_MATRIX_MULTIPLY);
    CHECK(strcmp(kd_method_name(r->method), "matrix.multiply") == 0);
    CHECK(memcmp(m->a, a_id, 16) == 0);
    CHECK(m->b[0] == 0xff && m->b[15] == 0x00);
    CHECK_EQ_INT(m->transpose_a, 0);
    CHECK(m->options.name[0] == '\0' && m->options.format[0] == '\0' &&
          m->options.select[0] == '\0');
    CHECK(m->options.reorder == KD_REORDER_AUTO && m->options.pin == -1);
    kd_request_free(r);

    /* every option, and nil counting as absent */
    begin(&w, "matrix.multiply", 9);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_bool(&w, "transpose_a", 1);
    kd_w_kv_str(&w, "name", "AtA");
    kd_w_kv_str(&w, "format", "csr_vector");
    kd_w_kv_str(&w, "select", "heuristic");
    kd_w_kv_str(&w, "reorder", "none");
    kd_w_kv_bool(&w, "pin", 1);
    kd_w_key(&w, "timeout_ms");
    kd_w_nil(&w);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    m = &r->u.multiply;
    CHECK(memcmp(m->a, m->b, 16) == 0 && m->transpose_a == 1);
    CHECK(strcmp(m->options.name, "AtA") == 0 && strcmp(m->options.format, "csr_vector") == 0);
    CHECK(strcmp(m->options.select, "heuristic") == 0 && m->options.pin == 1);
    CHECK(m->options.reorder == KD_REORDER_NONE && r->timeout_ms == 0);
    kd_request_free(r);

    begin(&w, "matrix.multiply", 1);
    kd_w_kv_str(&w, "b", ID_HEX);
    BAD(&w, KD_EBADREQ, "missing parameter 'a' for matrix.multiply");
    begin(&w, "matrix.multiply", 1);
    kd_w_kv_str(&w, "a", ID_HEX);
    BAD(&w, KD_EBADREQ, "missing parameter 'b' for matrix.multiply");
    begin(&w, "matrix.multiply", 2);
    kd_w_kv_str(&w, "a", "0011");
    kd_w_kv_str(&w, "b", ID_HEX);
    BAD(&w, KD_EBADREQ, "a '0011' is not 32 hex digits");
    begin(&w, "matrix.multiply", 2);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_bin(&w, "b", a_id, 16);
    BAD(&w, KD_EBADREQ, "b must be a str of 32 hex digits, got bin");
    begin(&w, "matrix.multiply", 2);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", "00112233445566778899aabbccddeefg");
    BAD(&w, KD_EBADREQ, "b '00112233445566778899aabbccddeefg' is not 32 hex digits");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "transpose_a", "yes");
    BAD(&w, KD_EBADREQ, "transpose_a must be true or false, got str");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_int(&w, "transpose_a", 1);
    BAD(&w, KD_EBADREQ, "transpose_a must be true or false, got int");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "select", "fastest");
    BAD(&w, KD_EBADREQ, "select");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "reorder", "amd");
    BAD(&w, KD_EBADREQ, "reorder");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_int(&w, "pin", 1);
    BAD(&w, KD_EBADREQ, "pin must be true or false, got int");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "format", "a format name longer than 31 bytes");
    BAD(&w, KD_EBADREQ, "format is 34 bytes, longer than the limit of 31");
    /* what matrix.put takes but matrix.multiply does not: the product's dtype is its operands' */
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "dtype", "float32");
    BAD(&w, KD_EBADREQ,
        "unknown parameter 'dtype' for matrix.multiply (it takes timeout_ms, "
        "name, format, select, reorder, pin, a, b, transpose_a)");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "id", ID_HEX);
    BAD(&w, KD_EBADREQ, "unknown parameter 'id' for matrix.multiply");
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_str(&w, "a", ID_HEX);
    BAD(&w, KD_EBADREQ, "parameter 'a' is given twice");
    /* 'a' is matrix.multiply's alone: solve's b is a vector, and it takes no a */
    begin(&w, "solve", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_str(&w, "a", ID_HEX);
    BAD(&w, KD_EBADREQ, "unknown parameter 'a' for solve");
}

/* ---- spmv ---- */

/* kd_request_host_bytes (client memory accounting): a bin x is held once, in the message; a plain
 * array x costs its message bytes, the converted array and one msgpack_object per element. */
static void test_host_bytes(void)
{
    enum { N = 60 }; /* plain arrays: within the test limits (64) */
    static double x[N];
    for (int i = 0; i < N; i++)
        x[i] = kd_test_rand_double(-1, 1);
    kd_writer_t w;
    begin(&w, "spmv", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_request_t *bin = GOOD(&w);
    begin(&w, "spmv", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kv_doubles(&w, "x", x, N);
    kd_request_t *plain = GOOD(&w);
    REQUIRE(bin != NULL && plain != NULL);
    size_t b = kd_request_host_bytes(bin), p = kd_request_host_bytes(plain);
    CHECK_MSG(b >= sizeof(x) && b < sizeof(x) + 2048, "bin: %zu bytes for %zu of x", b, sizeof(x));
    /* 9 bytes per element in the message, 8 converted, at least 16 unpacked */
    CHECK_MSG(p >= (size_t)N * (9 + 8 + 16), "plain: %zu bytes for %d elements", p, N);
    CHECK_EQ_INT(kd_request_host_bytes(NULL), 0);
    kd_request_free(bin);
    kd_request_free(plain);
}

static void test_spmv(void)
{
    static const double x[] = {1.5, -2, 3};
    static const float x32[] = {1.5f, -2, 3};
    kd_writer_t w;
    begin(&w, "spmv", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    const kd_spmv_request_t *s = &r->u.spmv;
    CHECK(s->dtype == KD_DTYPE_F64 && s->x.count == 3 && !s->y.present);
    CHECK(s->alpha == 1.0 && s->beta == 0.0);
    CHECK(kd_load_real(s->x.data, KD_DTYPE_F64, 1) == -2.0);
    kd_request_free(r);

    begin(&w, "spmv", 6);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_str(&w, "dtype", "float32");
    kd_w_kv_bin(&w, "x", x32, sizeof(x32));
    kv_doubles(&w, "y", x, 3);
    kd_w_kv_int(&w, "alpha", -2);
    kd_w_kv_double(&w, "beta", 0.5);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    s = &r->u.spmv;
    CHECK(s->dtype == KD_DTYPE_F32 && s->x.dtype == KD_DTYPE_F32 && s->x.count == 3);
    CHECK(s->y.present && s->y.dtype == KD_DTYPE_F32 && s->y.count == 3);
    CHECK(kd_load_real(s->y.data, KD_DTYPE_F32, 0) == 1.5);
    CHECK(s->alpha == -2.0 && s->beta == 0.5);
    kd_request_free(r);

    begin(&w, "spmv", 1);
    kd_w_kv_str(&w, "id", ID_HEX);
    BAD(&w, KD_EBADREQ, "missing parameter 'x' for spmv");
    begin(&w, "spmv", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, 13);
    BAD(&w, KD_EBADREQ, "x: bin of 13 bytes is not a whole number of float64 values");
    begin(&w, "spmv", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_str(&w, "dtype", "float32");
    kd_w_kv_bin(&w, "x", x, 6);
    BAD(&w, KD_EBADREQ, "x: bin of 6 bytes is not a whole number of float32 values");
    begin(&w, "spmv", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_w_kv_str(&w, "alpha", "2");
    BAD(&w, KD_EBADREQ, "alpha must be a number, got str");
    begin(&w, "spmv", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_w_kv_double(&w, "alpha", NAN);
    BAD(&w, KD_EBADREQ, "alpha must be finite, got nan");
    begin(&w, "spmv", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_w_kv_double(&w, "beta", 0.5);
    BAD(&w, KD_EBADREQ, "beta = 0.5 needs y");
    begin(&w, "spmv", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_w_kv_str(&w, "dtype", "int64");
    BAD(&w, KD_EBADREQ, "dtype 'int64' is not float64 or float32");
    begin(&w, "spmv", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_key(&w, "x");
    kd_w_array(&w, 100);
    for (int i = 0; i < 100; i++)
        kd_w_int(&w, i);
    BAD(&w, KD_ETOOLARGE, "x: a plain array of 100 numbers is over the limit of 64; use a bin");
    begin(&w, "spmv", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bool(&w, "x", 1);
    BAD(&w, KD_EBADREQ, "x must be a bin of float64 or an array of numbers, got bool");
}

/* ---- solve ---- */

static void test_solve_defaults_and_all(void)
{
    static const double b[] = {1, 2, 3, 4, 5, 6};
    static const float b32[] = {1, 2, 3, 4, 5, 6};
    kd_writer_t w;
    begin(&w, "solve", 2);
    kd_w_kv_str(&w, "id", ID_HEX);
    kv_doubles(&w, "b", b, 3);
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    const kd_solve_request_t *s = &r->u.solve;
    CHECK(s->method[0] == '\0' && s->rtol == 1e-8 && s->atol == 0.0 && s->restart == 0);
    CHECK(s->maxiter == -1 && s->nrhs == 1 && s->check_every == 0);
    CHECK(!s->history && !s->progress && s->preconditioner[0] == '\0');
    CHECK(s->dtype == KD_DTYPE_F64 && s->b.count == 3 && !s->x0.present);
    CHECK(kd_load_real(s->b.data, KD_DTYPE_F64, 2) == 3.0);
    CHECK(r->timeout_ms == 0);
    kd_request_free(r);

    begin(&w, "solve", 15);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_str(&w, "dtype", "float32");
    kd_w_kv_bin(&w, "b", b32, sizeof(b32));
    kd_w_kv_bin(&w, "x0", b32, sizeof(b32));
    kd_w_kv_str(&w, "method", "pcg");
    kd_w_kv_str(&w, "preconditioner", "jacobi");
    kd_w_kv_double(&w, "rtol", 1e-5);
    kd_w_kv_int(&w, "atol", 0);
    kd_w_kv_int(&w, "maxiter", 100);
    kd_w_kv_int(&w, "nrhs", 2);
    kd_w_kv_int(&w, "check_every", 8);
    kd_w_kv_bool(&w, "history", 1);
    kd_w_kv_bool(&w, "progress", 1);
    kd_w_kv_int(&w, "timeout_ms", 2500);
    kd_w_kv_int(&w, "restart", 200);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    s = &r->u.solve;
    CHECK(strcmp(s->method, "pcg") == 0 && strcmp(s->preconditioner, "jacobi") == 0);
    CHECK(s->restart == 200);
    CHECK(s->dtype == KD_DTYPE_F32 && s->b.count == 6 && s->x0.count == 6);
    CHECK(s->rtol == 1e-5 && s->atol == 0.0 && s->maxiter == 100 && s->nrhs == 2);
    CHECK(s->check_every == 8 && s->history && s->progress && r->timeout_ms == 2500);
    kd_request_free(r);

    /* any preconditioner name passes (the server's table decides), with its options */
    begin(&w, "solve", 5);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", b, sizeof(b));
    kd_w_kv_str(&w, "preconditioner", "amg");
    kd_w_str(&w, "preconditioner_options");
    kd_w_map(&w, 2);
    kd_w_kv_double(&w, "threshold", 0.02);
    kd_w_kv_int(&w, "block_size", 3);
    kd_w_kv_str(&w, "method", "cg");
    r = GOOD(&w);
    REQUIRE(r != NULL);
    s = &r->u.solve;
    CHECK(strcmp(s->preconditioner, "amg") == 0 && s->noptions == 2);
    CHECK(strcmp(s->options[0].name, "threshold") == 0 && s->options[0].value == 0.02);
    CHECK(strcmp(s->options[1].name, "block_size") == 0 && s->options[1].value == 3.0);
    kd_request_free(r);

    begin(&w, "solve", 4);
    kd_w_kv_str(&w, "id", ID_HEX);
    kv_doubles(&w, "b", b, 2);
    kd_w_kv_str(&w, "method", "sd");
    kd_w_kv_nil(&w, "rtol"); /* nil means absent: the default */
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(strcmp(r->u.solve.method, "sd") == 0 && r->u.solve.rtol == 1e-8);
    kd_request_free(r);

    /* any method name passes, with any preconditioner (the server's tables decide) */
    static const char *const names[] = {"auto", "gmres", "bicgstab", "minres", "no-such"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        begin(&w, "solve", 6);
        kd_w_kv_str(&w, "id", ID_HEX);
        kv_doubles(&w, "b", b, 2);
        kd_w_kv_str(&w, "method", names[i]);
        kd_w_kv_str(&w, "preconditioner", "jacobi");
        kd_w_kv_int(&w, "restart", (int64_t)i + 1);
        kd_w_kv_nil(&w, "maxiter");
        r = GOOD(&w);
        REQUIRE(r != NULL);
        CHECK(strcmp(r->u.solve.method, names[i]) == 0);
        CHECK(strcmp(r->u.solve.preconditioner, "jacobi") == 0);
        CHECK(r->u.solve.restart == (int64_t)i + 1);
        kd_request_free(r);
    }
    begin(&w, "solve", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kv_doubles(&w, "b", b, 2);
    kd_w_kv_nil(&w, "restart"); /* nil means absent: the server's default */
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->u.solve.restart == 0);
    kd_request_free(r);
}

/* A solve request with b (3 values) and one more parameter. */
static void solve_with(kd_writer_t *w, void (*write)(kd_writer_t *))
{
    static const double b[] = {1, 2, 3};
    begin(w, "solve", 3);
    kd_w_kv_str(w, "id", ID_HEX);
    kd_w_kv_bin(w, "b", b, sizeof(b));
    write(w);
}

static void s_rtol_str(kd_writer_t *w)
{
    kd_w_kv_str(w, "rtol", "1e-8");
}
static void s_rtol_negative(kd_writer_t *w)
{
    kd_w_kv_double(w, "rtol", -1);
}
static void s_rtol_inf(kd_writer_t *w)
{
    kd_w_kv_double(w, "rtol", INFINITY);
}
static void s_atol_negative(kd_writer_t *w)
{
    kd_w_kv_double(w, "atol", -0.5);
}
static void s_maxiter_negative(kd_writer_t *w)
{
    kd_w_kv_int(w, "maxiter", -5);
}
static void s_maxiter_float(kd_writer_t *w)
{
    kd_w_kv_double(w, "maxiter", 1.5);
}
static void s_nrhs_zero(kd_writer_t *w)
{
    kd_w_kv_int(w, "nrhs", 0);
}
static void s_nrhs_over(kd_writer_t *w)
{
    kd_w_kv_int(w, "nrhs", 5);
}
static void s_nrhs_uneven(kd_writer_t *w)
{
    kd_w_kv_int(w, "nrhs", 2);
}
static void s_x0_short(kd_writer_t *w)
{
    static const double x0[] = {0, 0};
    kd_w_kv_bin(w, "x0", x0, sizeof(x0));
}
static void s_method_long(kd_writer_t *w)
{
    kd_w_kv_str(w, "method", "a-method-name-of-exactly-32-byte");
}
static void s_method_nul(kd_writer_t *w)
{
    kd_w_str(w, "method");
    kd_w_strn(w, "cg\0x", 4);
}
static void s_restart_negative(kd_writer_t *w)
{
    kd_w_kv_int(w, "restart", -1);
}
static void s_restart_over(kd_writer_t *w)
{
    kd_w_kv_int(w, "restart", 201);
}
static void s_restart_huge(kd_writer_t *w)
{
    kd_w_str(w, "restart");
    kd_w_uint(w, UINT64_MAX);
}
static void s_restart_float(kd_writer_t *w)
{
    kd_w_kv_double(w, "restart", 30.5);
}
static void s_restart_str(kd_writer_t *w)
{
    kd_w_kv_str(w, "restart", "30");
}
static void s_method_int(kd_writer_t *w)
{
    kd_w_kv_int(w, "method", 0);
}
static void s_options_list(kd_writer_t *w)
{
    kd_w_str(w, "preconditioner_options");
    kd_w_array(w, 1);
    kd_w_double(w, 0.5);
}
static void s_options_str_value(kd_writer_t *w)
{
    kd_w_str(w, "preconditioner_options");
    kd_w_map(w, 1);
    kd_w_kv_str(w, "threshold", "0.02");
}
static void s_options_nan(kd_writer_t *w)
{
    kd_w_str(w, "preconditioner_options");
    kd_w_map(w, 1);
    kd_w_kv_double(w, "threshold", NAN);
}
static void s_options_twice(kd_writer_t *w)
{
    kd_w_str(w, "preconditioner_options");
    kd_w_map(w, 2);
    kd_w_kv_int(w, "degree", 2);
    kd_w_kv_int(w, "degree", 3);
}
static void s_options_long_name(kd_writer_t *w)
{
    kd_w_str(w, "preconditioner_options");
    kd_w_map(w, 1);
    kd_w_kv_int(w, "a_name_longer_than_the_limit", 2);
}
static void s_options_many(kd_writer_t *w)
{
    kd_w_str(w, "preconditioner_options");
    kd_w_map(w, 9);
    for (int i = 0; i < 9; i++) {
        char name[8];
        snprintf(name, sizeof(name), "o%d", i);
        kd_w_kv_int(w, name, i);
    }
}
static void s_history_int(kd_writer_t *w)
{
    kd_w_kv_int(w, "history", 1);
}
static void s_progress_str(kd_writer_t *w)
{
    kd_w_kv_str(w, "progress", "true");
}
static void s_check_every_negative(kd_writer_t *w)
{
    kd_w_kv_int(w, "check_every", -1);
}
static void s_b_again(kd_writer_t *w)
{
    kd_w_kv_nil(w, "b");
}
static void s_pinned(kd_writer_t *w)
{
    kd_w_kv_bool(w, "pinned", 1);
}

static void test_solve_rules(void)
{
    static const struct {
        void (*write)(kd_writer_t *);
        int code;
        const char *needle;
    } cases[] = {
        {s_rtol_str, KD_EBADREQ, "rtol must be a number, got str"},
        {s_rtol_negative, KD_EBADREQ, "rtol must be >= 0, got -1"},
        {s_rtol_inf, KD_EBADREQ, "rtol must be finite, got inf"},
        {s_atol_negative, KD_EBADREQ, "atol must be >= 0, got -0.5"},
        {s_maxiter_negative, KD_EBADREQ, "maxiter must be >= 0, got -5"},
        {s_maxiter_float, KD_EBADREQ, "maxiter must be an integer, got float"},
        {s_nrhs_zero, KD_EBADREQ, "nrhs must be >= 1, got 0"},
        {s_nrhs_over, KD_ETOOLARGE, "nrhs = 5 is over this server's limit 4"},
        {s_nrhs_uneven, KD_EBADREQ, "b has 3 values, not a whole number of columns for nrhs = 2"},
        {s_x0_short, KD_EBADREQ, "x0 has 2 entries but b has 3"},
        {s_method_long, KD_EBADREQ, "method is 32 bytes, longer than the limit of 31"},
        {s_method_nul, KD_EBADREQ, "method contains a NUL byte"},
        {s_restart_negative, KD_EBADREQ, "restart must be >= 0, got -1"},
        {s_restart_over, KD_EBADREQ, "restart = 201: GMRES(m) keeps at most 200 basis vectors"},
        {s_restart_huge, KD_ETOOLARGE, "restart = 18446744073709551615 is too large"},
        {s_restart_float, KD_EBADREQ, "restart must be an integer, got float"},
        {s_restart_str, KD_EBADREQ, "restart must be an integer, got str"},
        {s_method_int, KD_EBADREQ, "method must be a str, got int"},
        {s_options_list, KD_EBADREQ, "preconditioner_options must be a map of names to numbers"},
        {s_options_str_value, KD_EBADREQ, "preconditioner_options: threshold must be a finite"},
        {s_options_nan, KD_EBADREQ, "preconditioner_options: threshold must be a finite"},
        {s_options_twice, KD_EBADREQ, "preconditioner_options: degree given twice"},
        {s_options_long_name, KD_EBADREQ, "is not an option name"},
        {s_options_many, KD_EBADREQ, "preconditioner_options has 9 entries; at most 8"},
        {s_history_int, KD_EBADREQ, "history must be true or false, got int"},
        {s_progress_str, KD_EBADREQ, "progress must be true or false, got str"},
        {s_check_every_negative, KD_EBADREQ, "check_every must be >= 0, got -1"},
        {s_b_again, KD_EBADREQ, "parameter 'b' is given twice"},
        {s_pinned, KD_EBADREQ, "unknown parameter 'pinned' for solve"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        kd_writer_t w;
        solve_with(&w, cases[i].write);
        bad_at(&w, cases[i].code, cases[i].needle, (int)i);
    }
    kd_writer_t w;
    begin(&w, "solve", 1);
    kd_w_kv_str(&w, "id", ID_HEX);
    BAD(&w, KD_EBADREQ, "missing parameter 'b' for solve");
    begin(&w, "solve", 1);
    kd_w_kv_bin(&w, "b", "", 0);
    BAD(&w, KD_EBADREQ, "missing parameter 'id' for solve");
}

/* ---- streams ---- */

/* Several requests glued into one stream, fed in random chunks: each decodes to its method, msgid
 * and payload. */
static void test_stream_round_trip(void)
{
    static const double b[] = {0.25, -1, 1e300, 5e-324};
    kd_writer_t w;
    kd_writer_init(&w);
    for (uint64_t i = 0; i < 20; i++) {
        switch (i % 4) {
        case 0:
            kd_w_request_begin(&w, i, "solve");
            kd_w_array(&w, 1);
            kd_w_map(&w, 3);
            kd_w_kv_str(&w, "id", ID_HEX);
            kd_w_kv_bin(&w, "b", b, sizeof(b));
            kd_w_kv_int(&w, "maxiter", (int64_t)i);
            break;
        case 1:
            kd_w_request_begin(&w, i, "matrix.list");
            kd_w_array(&w, 0);
            break;
        case 2:
            kd_w_request_begin(&w, i, "job.cancel");
            kd_w_map(&w, 1);
            kd_w_kv_uint(&w, "msgid", i - 2);
            break;
        default:
            kd_w_request_begin(&w, i, "spmv");
            kd_w_array(&w, 1);
            kd_w_map(&w, 2);
            kd_w_kv_str(&w, "id", ID_HEX);
            kv_doubles(&w, "x", b, 4);
            break;
        }
    }
    size_t len;
    char *stream = kd_writer_release(&w, &len);
    kd_writer_destroy(&w);
    REQUIRE(stream != NULL);
    for (int round = 0; round < 50; round++) {
        kd_frame_t *f = NULL;
        REQUIRE(kd_frame_new(NULL, &f) == KD_OK);
        uint64_t next = 0;
        size_t pos = 0;
        while (pos < len) {
            size_t n = (size_t)kd_test_rand_below(40) + 1;
            n = n > len - pos ? len - pos : n;
            REQUIRE(kd_frame_feed(f, stream + pos, n) == KD_OK);
            pos += n;
            kd_frame_event_t ev;
            while (kd_frame_next(f, &ev) == KD_FRAME_MESSAGE) {
                kd_request_t *r = NULL;
                kd_decode_error_t derr;
                int rc = kd_request_decode(ev.data, ev.len, &limits, &r, &derr);
                CHECK_MSG(rc == KD_OK, "%s", derr.err.message);
                if (rc != KD_OK)
                    continue;
                CHECK_EQ_INT(r->msgid, next);
                static const kd_method_t methods[] = {KD_METHOD_SOLVE, KD_METHOD_MATRIX_LIST,
                                                      KD_METHOD_JOB_CANCEL, KD_METHOD_SPMV};
                CHECK(r->method == methods[next % 4]);
                if (r->method == KD_METHOD_SOLVE) {
                    CHECK(r->u.solve.maxiter == (int64_t)next && r->u.solve.b.count == 4);
                    CHECK(memcmp(r->u.solve.b.data, b, sizeof(b)) == 0);
                } else if (r->method == KD_METHOD_SPMV) {
                    CHECK(r->u.spmv.x.count == 4 && memcmp(r->u.spmv.x.data, b, sizeof(b)) == 0);
                } else if (r->method == KD_METHOD_JOB_CANCEL) {
                    CHECK(r->u.cancel.target_msgid == next - 2);
                }
                kd_request_free(r);
                next++;
            }
        }
        CHECK_EQ_INT(next, 20);
        kd_frame_free(f);
    }
    free(stream);
}

/* Random corruptions of good requests: the decoder answers every one without crashing. */
static void test_corrupted_requests(void)
{
    static const double b[] = {1, 2, 3, 4};
    kd_writer_t w;
    begin(&w, "solve", 6);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", b, sizeof(b));
    kv_doubles(&w, "x0", b, 4);
    kd_w_kv_str(&w, "method", "pcg");
    kd_w_kv_int(&w, "nrhs", 2);
    kd_w_kv_double(&w, "rtol", 1e-6);
    size_t len;
    uint8_t *good = kd_writer_release(&w, &len);
    kd_writer_destroy(&w);
    REQUIRE(good != NULL);
    int decoded = 0, refused = 0;
    for (int round = 0; round < 20000; round++) {
        uint8_t *copy = malloc(len);
        REQUIRE(copy != NULL);
        memcpy(copy, good, len);
        int flips = 1 + (int)kd_test_rand_below(4);
        for (int i = 0; i < flips; i++)
            copy[kd_test_rand_below((int64_t)len)] = (uint8_t)kd_test_rand_u64();
        kd_request_t *r = NULL;
        kd_decode_error_t derr;
        int rc = kd_request_decode(copy, len, &limits, &r, &derr);
        if (rc == KD_OK) {
            decoded++;
            CHECK(r != NULL && r->method < KD_METHOD_COUNT);
        } else {
            refused++;
            CHECK(r == NULL && derr.err.code == rc && derr.err.message[0] != '\0');
            CHECK(rc == KD_EBADREQ || rc == KD_ETOOLARGE || rc == KD_EPROTO);
        }
        kd_request_free(r);
    }
    CHECK(decoded > 0 && refused > 0);
    free(good);
}

/* matrix.put with batch: values k x nnz, the whole batch held to the limits; per-system arrays
 * for solve's rtol, atol and maxiter. */
static void put_batch(kd_writer_t *w, int64_t batch, int64_t rows, size_t nvalues)
{
    double *v = calloc(nvalues + 1, sizeof(double));
    REQUIRE(v != NULL);
    begin(w, "matrix.put", 6);
    kd_w_kv_int(w, "batch", batch);
    kd_w_kv_int(w, "rows", rows);
    kd_w_kv_int(w, "cols", 3);
    kd_w_kv_bin(w, "indptr", csr_indptr, sizeof(csr_indptr));
    kd_w_kv_bin(w, "indices", csr_indices, sizeof(csr_indices));
    kd_w_kv_bin(w, "values", v, nvalues * sizeof(double));
    free(v);
}

static void test_batch(void)
{
    kd_writer_t w;
    put_batch(&w, 2, 3, 8);
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->u.put.batch == 2 && r->u.put.values.count == 8 && r->u.put.indices.count == 4);
    kd_request_free(r);
    put_batch(&w, 2, 3, 7);
    BAD(&w, KD_EBADREQ, "values has 7 entries but batch = 2 systems of 4 nonzeros");
    put_batch(&w, 0, 3, 4);
    BAD(&w, KD_EBADREQ, "batch must be >= 1, got 0");
    begin(&w, "matrix.put", 2);
    kd_w_kv_int(&w, "batch", 2);
    kd_w_kv_str(&w, "mtx", "%%MatrixMarket matrix coordinate real general\n1 1 1\n1 1 2\n");
    BAD(&w, KD_EBADREQ, "batch takes the shared pattern as indptr and indices");
    put_batch(&w, 400, 3, 1600); /* 1,200 rows in all, over the limit of 1,000 */
    BAD(&w, KD_ETOOLARGE, "batch = 400 systems together");
    put_batch(&w, (int64_t)1 << 62, 3, 0);
    BAD(&w, KD_EBADREQ, "values has 0 entries");
    put_batch(&w, 2, 5, 8); /* 4 nonzeros for 5 rows (indptr is short too, but this comes first) */
    BAD(&w, KD_EBADREQ, "at least one entry per row on average (nnz >= rows)");
    begin(&w, "solve", 5);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", csr_values, sizeof(csr_values));
    kv_doubles(&w, "rtol", (const double[]){1e-6, 1e-7}, 2);
    kv_doubles(&w, "atol", (const double[]){0.0, 1e-9}, 2);
    kv_ints(&w, "maxiter", (const int64_t[]){5, 6}, 2);
    r = GOOD(&w);
    REQUIRE(r != NULL);
    const kd_solve_request_t *q = &r->u.solve;
    CHECK(q->rtols.present && q->rtols.count == 2 && q->rtols.dtype == KD_DTYPE_F64);
    CHECK(kd_load_real(q->rtols.data, KD_DTYPE_F64, 1) == 1e-7);
    CHECK(q->atols.present && kd_load_real(q->atols.data, KD_DTYPE_F64, 1) == 1e-9);
    CHECK(q->maxiters.present && q->maxiters.dtype == KD_DTYPE_I64 &&
          kd_load_i64(q->maxiters.data, 1) == 6);
    CHECK(q->rtol == 1e-8 && q->maxiter == -1); /* the scalars keep their defaults */
    kd_request_free(r);
    begin(&w, "solve", 3);
    kd_w_kv_str(&w, "id", ID_HEX);
    kd_w_kv_bin(&w, "b", csr_values, sizeof(csr_values));
    kd_w_kv_str(&w, "rtol", "tight");
    BAD(&w, KD_EBADREQ, "rtol must be a number, got str");
}

/* matrix.put's distribute: absent is auto, true and false, "auto"; anything else, and true with
 * a batch, is BAD_REQUEST naming it; matrix.multiply does not take it. */
static void put_distribute(kd_writer_t *w, int kind, int64_t batch)
{
    begin(w, "matrix.put", batch > 0 ? 7 : 6);
    kd_w_kv_int(w, "rows", 3);
    kd_w_kv_int(w, "cols", 3);
    kd_w_kv_bin(w, "indptr", csr_indptr, sizeof(csr_indptr));
    kd_w_kv_bin(w, "indices", csr_indices, sizeof(csr_indices));
    if (batch > 0) {
        double v[8] = {0};
        kd_w_kv_bin(w, "values", v, sizeof(v));
        kd_w_kv_int(w, "batch", batch);
    } else {
        kd_w_kv_bin(w, "values", csr_values, sizeof(csr_values));
    }
    if (kind == 0)
        kd_w_kv_bool(w, "distribute", 0);
    else if (kind == 1)
        kd_w_kv_bool(w, "distribute", 1);
    else if (kind == 2)
        kd_w_kv_str(w, "distribute", "auto");
    else if (kind == 3)
        kd_w_kv_str(w, "distribute", "always");
    else
        kd_w_kv_int(w, "distribute", 1);
}

static void test_distribute(void)
{
    static const int want[3] = {KD_DISTRIBUTE_NO, KD_DISTRIBUTE_YES, KD_DISTRIBUTE_AUTO};
    kd_writer_t w;
    for (int kind = 0; kind < 3; kind++) {
        put_distribute(&w, kind, 0);
        kd_request_t *r = GOOD(&w);
        REQUIRE(r != NULL);
        CHECK_EQ_INT(r->u.put.options.distribute, want[kind]);
        kd_request_free(r);
    }
    begin(&w, "matrix.put", 5);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_bin(&w, "indptr", csr_indptr, sizeof(csr_indptr));
    kd_w_kv_bin(&w, "indices", csr_indices, sizeof(csr_indices));
    kd_w_kv_bin(&w, "values", csr_values, sizeof(csr_values));
    kd_request_t *r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK_EQ_INT(r->u.put.options.distribute, KD_DISTRIBUTE_AUTO);
    kd_request_free(r);
    put_distribute(&w, 3, 0);
    BAD(&w, KD_EBADREQ, "distribute must be true, false or \"auto\"");
    put_distribute(&w, 4, 0);
    BAD(&w, KD_EBADREQ, "distribute must be true, false or \"auto\"");
    put_distribute(&w, 1, 2);
    BAD(&w, KD_EBADREQ, "distribute = true does not apply to a batch");
    put_distribute(&w, 2, 2); /* auto with a batch: accepted (a batch is never spread) */
    r = GOOD(&w);
    REQUIRE(r != NULL);
    CHECK(r->u.put.batch == 2);
    kd_request_free(r);
    begin(&w, "matrix.multiply", 3);
    kd_w_kv_str(&w, "a", ID_HEX);
    kd_w_kv_str(&w, "b", ID_HEX);
    kd_w_kv_bool(&w, "distribute", 1);
    BAD(&w, KD_EBADREQ, "distribute");
}

int main(void)
{
    kd_test_seed();
    RUN(test_envelope_shapes);
    RUN(test_params_forms);
    RUN(test_param_names);
    RUN(test_like_and_reuse);
    RUN(test_every_method_names_its_keys);
    RUN(test_not_msgpack);
    RUN(test_put_csr_bins);
    RUN(test_put_int64_float32_and_plain);
    RUN(test_put_coo_and_mtx);
    RUN(test_put_rules);
    RUN(test_put_form_rules);
    RUN(test_ids_and_cancel);
    RUN(test_share);
    RUN(test_auth);
    RUN(test_multiply);
    RUN(test_spmv);
    RUN(test_host_bytes);
    RUN(test_solve_defaults_and_all);
    RUN(test_solve_rules);
    RUN(test_stream_round_trip);
    RUN(test_corrupted_requests);
    RUN(test_batch);
    RUN(test_distribute);
    return kd_test_finish();
}
