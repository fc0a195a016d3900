/*
 * Writing messages and reading them back: each envelope (request, result, error response,
 * notification) unpacked by msgpack-c and read with the object getters, every value kind with the
 * getters' range checks, the sticky failure flag, and client-side message classification.
 */
#include "common/error.h"
#include "common/recycle.h"
#include "kd_test.h"
#include "protocol/object.h"
#include "protocol/writer.h"

#include <msgpack.h>

typedef struct unpacked {
    void *data;
    size_t len;
    msgpack_unpacked u;
} unpacked_t;

/* Release the writer's bytes and unpack them; 0 when they are exactly one object. */
static int release_and_unpack(kd_writer_t *w, unpacked_t *out)
{
    out->data = kd_writer_release(w, &out->len);
    msgpack_unpacked_init(&out->u);
    if (out->data == NULL)
        return -1;
    size_t off = 0;
    msgpack_unpack_return rc = msgpack_unpack_next(&out->u, out->data, out->len, &off);
    return (rc == MSGPACK_UNPACK_SUCCESS || rc == MSGPACK_UNPACK_EXTRA_BYTES) && off == out->len
               ? 0
               : -1;
}

static void unpacked_free(unpacked_t *p)
{
    msgpack_unpacked_destroy(&p->u);
    free(p->data);
}

static void test_request_envelope(void)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_request_begin(&w, 4000000000u, "solve");
    kd_w_array(&w, 1);
    kd_w_map(&w, 2);
    kd_w_kv_double(&w, "rtol", 1e-10);
    kd_w_kv_str(&w, "method", "pcg");
    unpacked_t p;
    REQUIRE(release_and_unpack(&w, &p) == 0);
    const msgpack_object *root = &p.u.data;
    REQUIRE(root->type == MSGPACK_OBJECT_ARRAY && root->via.array.size == 4);
    const msgpack_object *e = root->via.array.ptr;
    uint64_t kind, msgid;
    CHECK(kd_obj_uint64(&e[0], &kind) == 0 && kind == 0);
    CHECK(kd_obj_uint64(&e[1], &msgid) == 0 && msgid == 4000000000u);
    CHECK(kd_obj_str_eq(&e[2], "solve"));
    REQUIRE(e[3].type == MSGPACK_OBJECT_ARRAY && e[3].via.array.size == 1);
    const msgpack_object *params = &e[3].via.array.ptr[0];
    double rtol;
    CHECK(kd_obj_double(kd_obj_get(params, "rtol"), &rtol) == 0 && rtol == 1e-10);
    CHECK(kd_obj_str_eq(kd_obj_get(params, "method"), "pcg"));
    CHECK(kd_obj_get(params, "atol") == NULL);
    kd_response_view_t resp;
    kd_notification_view_t note;
    CHECK_EQ_INT(kd_obj_parse_message(root, &resp, &note), -1);
    unpacked_free(&p);
    kd_writer_destroy(&w);
}

/* Every code's error response carries its wire name, which maps back to a code of that name. */
static void test_error_response(void)
{
    for (int code = KD_EBADREQ; code > -KD_ERROR_COUNT; code--) {
        kd_writer_t w;
        kd_writer_init(&w);
        kd_w_error_response(&w, 77, code, "no matrix 3f2a on this server");
        unpacked_t p;
        REQUIRE(release_and_unpack(&w, &p) == 0);
        kd_response_view_t resp = {0};
        kd_notification_view_t note = {0};
        REQUIRE(kd_obj_parse_message(&p.u.data, &resp, &note) == 1);
        CHECK_EQ_INT(resp.msgid, 77);
        CHECK(resp.result == NULL);
        REQUIRE(resp.error != NULL && resp.error->type == MSGPACK_OBJECT_MAP);
        CHECK_EQ_INT(resp.error->via.map.size, 2);
        char name[32], message[64];
        REQUIRE(kd_obj_str_copy(kd_obj_get(resp.error, "code"), name, sizeof(name)) == 0);
        CHECK(strcmp(name, kd_error_wire_name(code)) == 0);
        CHECK(strcmp(kd_error_wire_name(kd_error_from_wire_name(name, strlen(name))), name) == 0);
        REQUIRE(kd_obj_str_copy(kd_obj_get(resp.error, "message"), message, sizeof(message)) == 0);
        CHECK(strcmp(message, "no matrix 3f2a on this server") == 0);
        unpacked_free(&p);
        kd_writer_destroy(&w);
    }
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_error_response(&w, 1, KD_ENOTFOUND, NULL);
    unpacked_t p;
    REQUIRE(release_and_unpack(&w, &p) == 0);
    kd_response_view_t resp = {0};
    kd_notification_view_t note = {0};
    REQUIRE(kd_obj_parse_message(&p.u.data, &resp, &note) == 1);
    CHECK(kd_obj_str_eq(kd_obj_get(resp.error, "code"), "NOT_FOUND"));
    CHECK(kd_obj_str_eq(kd_obj_get(resp.error, "message"), kd_strerror(KD_ENOTFOUND)));
    unpacked_free(&p);
    kd_writer_destroy(&w);
}

static void test_result_and_notification(void)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_result_begin(&w, 12);
    kd_w_map(&w, 2);
    kd_w_kv_bool(&w, "dropped", 1);
    kd_w_key(&w, "stats");
    kd_w_map(&w, 1);
    kd_w_kv_int(&w, "min_row", -3);
    unpacked_t p;
    REQUIRE(release_and_unpack(&w, &p) == 0);
    kd_response_view_t resp = {0};
    kd_notification_view_t note = {0};
    REQUIRE(kd_obj_parse_message(&p.u.data, &resp, &note) == 1);
    CHECK_EQ_INT(resp.msgid, 12);
    CHECK(resp.error == NULL);
    int dropped = 0;
    CHECK(kd_obj_bool(kd_obj_get(resp.result, "dropped"), &dropped) == 0 && dropped == 1);
    int64_t min_row = 0;
    CHECK(kd_obj_int64(kd_obj_get(kd_obj_get(resp.result, "stats"), "min_row"), &min_row) == 0);
    CHECK_EQ_INT(min_row, -3);
    unpacked_free(&p);

    kd_w_notification_begin(&w, "solve.progress");
    kd_w_array(&w, 1);
    kd_w_map(&w, 3);
    kd_w_kv_uint(&w, "msgid", UINT64_MAX);
    kd_w_kv_int(&w, "iteration", 40);
    kd_w_kv_double(&w, "residual", 2.5e-7);
    REQUIRE(release_and_unpack(&w, &p) == 0);
    REQUIRE(kd_obj_parse_message(&p.u.data, &resp, &note) == 2);
    CHECK(note.method_len == 14 && memcmp(note.method, "solve.progress", 14) == 0);
    uint64_t msgid = 0;
    double residual = 0;
    CHECK(kd_obj_uint64(kd_obj_get(note.params, "msgid"), &msgid) == 0 && msgid == UINT64_MAX);
    CHECK(kd_obj_double(kd_obj_get(note.params, "residual"), &residual) == 0 && residual == 2.5e-7);
    unpacked_free(&p);
    kd_writer_destroy(&w);
}

/* Each value kind, and each getter refusing the wrong type or range. */
static void test_value_kinds_and_getters(void)
{
    static const char bin[] = {0, 1, 2, (char)0xc1};
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_array(&w, 11);
    kd_w_nil(&w);
    kd_w_bool(&w, 0);
    kd_w_int(&w, INT64_MIN);
    kd_w_uint(&w, UINT64_MAX);
    kd_w_double(&w, -0.125);
    kd_w_str(&w, "dtype");
    kd_w_strn(&w, "a\0b", 3);
    kd_w_bin(&w, bin, sizeof(bin));
    kd_w_str(&w, NULL);
    kd_w_array(&w, 0);
    kd_w_uint(&w, (uint64_t)INT64_MAX);
    unpacked_t p;
    REQUIRE(release_and_unpack(&w, &p) == 0);
    REQUIRE(p.u.data.type == MSGPACK_OBJECT_ARRAY && p.u.data.via.array.size == 11);
    const msgpack_object *e = p.u.data.via.array.ptr;
    static const char *const types[] = {"nil", "bool", "int", "int",   "float", "str",
                                        "str", "bin",  "nil", "array", "int"};
    for (int i = 0; i < 11; i++)
        CHECK_STR_CONTAINS(kd_obj_type_name(&e[i]), types[i]);
    CHECK(strcmp(kd_obj_type_name(NULL), "nothing") == 0);

    int64_t i64;
    uint64_t u64;
    double d;
    int b;
    const char *s;
    const void *bytes;
    size_t len;
    CHECK(kd_obj_int64(&e[2], &i64) == 0 && i64 == INT64_MIN);
    CHECK(kd_obj_uint64(&e[2], &u64) == -1);
    CHECK(kd_obj_int64(&e[3], &i64) == -1); /* 2^64 - 1 does not fit */
    CHECK(kd_obj_uint64(&e[3], &u64) == 0 && u64 == UINT64_MAX);
    CHECK(kd_obj_int64(&e[10], &i64) == 0 && i64 == INT64_MAX);
    CHECK(kd_obj_int64(&e[4], &i64) == -1);
    CHECK(kd_obj_double(&e[4], &d) == 0 && d == -0.125);
    CHECK(kd_obj_double(&e[2], &d) == 0 && d == (double)INT64_MIN);
    CHECK(kd_obj_double(&e[5], &d) == -1);
    CHECK(kd_obj_bool(&e[1], &b) == 0 && b == 0);
    CHECK(kd_obj_bool(&e[0], &b) == -1);
    CHECK(kd_obj_bool(NULL, &b) == -1);
    CHECK(kd_obj_str(&e[5], &s, &len) == 0 && len == 5 && memcmp(s, "dtype", 5) == 0);
    CHECK(kd_obj_str(&e[7], &s, &len) == -1);
    CHECK(kd_obj_str_eq(&e[5], "dtype") && !kd_obj_str_eq(&e[5], "dtyp"));
    CHECK(!kd_obj_str_eq(&e[7], "x"));
    CHECK(kd_obj_bytes(&e[7], &bytes, &len) == 0 && len == 4 && memcmp(bytes, bin, 4) == 0);
    CHECK(kd_obj_bytes(&e[6], &bytes, &len) == 0 && len == 3 && memcmp(bytes, "a\0b", 3) == 0);
    CHECK(kd_obj_bytes(&e[2], &bytes, &len) == -1);
    char small[6];
    CHECK(kd_obj_str_copy(&e[5], small, sizeof(small)) == 0 && strcmp(small, "dtype") == 0);
    CHECK(kd_obj_str_copy(&e[5], small, 5) == -1);
    CHECK(kd_obj_str_copy(&e[7], small, sizeof(small)) == -1);
    CHECK(kd_obj_get(&e[9], "x") == NULL);
    unpacked_free(&p);
    kd_writer_destroy(&w);
}

/* A failed write sticks: later writes are skipped, release returns NULL, and the writer can be
 * used again afterwards. */
static void test_sticky_failure(void)
{
    static const char byte = 1;
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_array(&w, 2);
    CHECK(!kd_writer_failed(&w));
    kd_w_bin(&w, &byte, (size_t)UINT32_MAX + 1);
    CHECK(kd_writer_failed(&w));
    kd_w_str(&w, "after");
    CHECK(kd_writer_failed(&w));
    size_t len = 99;
    CHECK(kd_writer_release(&w, &len) == NULL);
    CHECK_EQ_INT(len, 0);
    CHECK(!kd_writer_failed(&w));
    kd_w_strn(&w, "x", (size_t)UINT32_MAX + 1);
    CHECK(kd_writer_failed(&w));
    CHECK(kd_writer_release(&w, &len) == NULL);
    kd_w_uint(&w, 5);
    void *data = kd_writer_release(&w, &len);
    CHECK(data != NULL && len == 1 && ((unsigned char *)data)[0] == 5);
    free(data);
    CHECK(kd_writer_release(&w, &len) == NULL && len == 0);
    kd_writer_destroy(&w);
    kd_writer_destroy(&w);
    kd_writer_destroy(NULL);
}

/* Client-side classification refuses what is not a response or a notification. */
/* A bin sent as the message's tail: released whole it is the same bytes as kd_w_kv_bin's; in
 * parts the head ends with the bin's header and the tail is the caller's buffer, uncopied;
 * anything written after it fails the writer (the tail would no longer be last). */
static void test_bin_tail(void)
{
    const size_t n = (size_t)2 << 20; /* large enough to come from the shelf */
    for (int parts = 0; parts < 2; parts++) {
        unsigned char *payload = kd_recycle_alloc(n, NULL);
        REQUIRE(payload != NULL);
        for (size_t i = 0; i < n; i++)
            payload[i] = (unsigned char)kd_test_rand_u64();
        kd_writer_t ref, w;
        kd_writer_init(&ref);
        kd_writer_init(&w);
        kd_w_result_begin(&ref, 7);
        kd_w_map(&ref, 2);
        kd_w_kv_double(&ref, "time_ms", 1.5);
        kd_w_kv_bin(&ref, "y", payload, n);
        kd_w_result_begin(&w, 7);
        kd_w_map(&w, 2);
        kd_w_kv_double(&w, "time_ms", 1.5);
        kd_w_kv_bin_tail(&w, "y", payload, n); /* takes payload */
        size_t rlen, len, tlen = 0;
        unsigned char *want = kd_writer_release(&ref, &rlen);
        REQUIRE(want != NULL);
        if (parts) {
            void *tail = NULL;
            unsigned char *head = kd_writer_release_parts(&w, &len, &tail, &tlen);
            REQUIRE(head != NULL);
            CHECK(tail == (void *)payload); /* not copied */
            CHECK_EQ_INT(len + tlen, rlen);
            CHECK(memcmp(head, want, len) == 0 && memcmp(tail, want + len, tlen) == 0);
            free(head);
            kd_recycle_free(tail);
        } else {
            unsigned char *got = kd_writer_release(&w, &len);
            REQUIRE(got != NULL);
            CHECK_EQ_INT(len, rlen);
            CHECK(memcmp(got, want, rlen) == 0);
            free(got);
        }
        free(want);
    }
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_map(&w, 2);
    kd_w_kv_bin_tail(&w, "x", malloc(16), 16);
    kd_w_kv_int(&w, "after", 1);
    CHECK(kd_writer_failed(&w));
    size_t len;
    void *tail;
    size_t tlen;
    CHECK(kd_writer_release_parts(&w, &len, &tail, &tlen) == NULL && tail == NULL); /* freed */
    kd_writer_init(&w);
    kd_w_kv_bin_tail(&w, "x", malloc(8), 8);
    kd_writer_destroy(&w); /* frees the tail */
}

static void test_parse_message_shapes(void)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_response_view_t resp;
    kd_notification_view_t note;
    unpacked_t p;

    kd_w_array(&w, 4); /* msgid a str */
    kd_w_uint(&w, 1);
    kd_w_str(&w, "7");
    kd_w_nil(&w);
    kd_w_nil(&w);
    REQUIRE(release_and_unpack(&w, &p) == 0);
    CHECK_EQ_INT(kd_obj_parse_message(&p.u.data, &resp, &note), -1);
    unpacked_free(&p);

    kd_w_array(&w, 3); /* a response of three elements */
    kd_w_uint(&w, 1);
    kd_w_uint(&w, 7);
    kd_w_nil(&w);
    REQUIRE(release_and_unpack(&w, &p) == 0);
    CHECK_EQ_INT(kd_obj_parse_message(&p.u.data, &resp, &note), -1);
    unpacked_free(&p);

    kd_w_map(&w, 0);
    REQUIRE(release_and_unpack(&w, &p) == 0);
    CHECK_EQ_INT(kd_obj_parse_message(&p.u.data, &resp, &note), -1);
    unpacked_free(&p);

    kd_w_notification_begin(&w, "solve.progress"); /* params a bare map, and [] */
    kd_w_map(&w, 1);
    kd_w_kv_int(&w, "iteration", 3);
    REQUIRE(release_and_unpack(&w, &p) == 0);
    REQUIRE(kd_obj_parse_message(&p.u.data, &resp, &note) == 2);
    CHECK(kd_obj_get(note.params, "iteration") != NULL);
    unpacked_free(&p);
    kd_w_notification_begin(&w, "server.bye");
    kd_w_array(&w, 0);
    REQUIRE(release_and_unpack(&w, &p) == 0);
    REQUIRE(kd_obj_parse_message(&p.u.data, &resp, &note) == 2);
    CHECK(note.params == NULL);
    unpacked_free(&p);
    kd_writer_destroy(&w);
}

int main(void)
{
    kd_test_seed();
    RUN(test_request_envelope);
    RUN(test_error_response);
    RUN(test_result_and_notification);
    RUN(test_value_kinds_and_getters);
    RUN(test_sticky_failure);
    RUN(test_parse_message_shapes);
    RUN(test_bin_tail);
    return kd_test_finish();
}
