/*
 * Hostile and malformed input over a real socket. Each case sends something wrong on its own
 * connection and checks the answer — an error response with the right code and a message that
 * names the problem, or, for bytes that cannot be framed or addressed, that this one connection is
 * closed — and then checks that a well-behaved client on another connection is still served.
 */
#include "common/csr.h"
#include "kd_daemon_client.h"
#include "kd_rpc.h"
#include "kd_test.h"
#include "krylov.h"
#include "protocol/frame.h"
#include "protocol/object.h"
#include "protocol/writer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

static kd_daemon_t daemon_;
static krylov_client_t *good;

static void raw_send(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t k = send(fd, c, n, MSG_NOSIGNAL);
        if (k <= 0)
            return;
        c += k;
        n -= (size_t)k;
    }
}

typedef struct raw_answer {
    int kind; /* 1 response, 0 connection closed, -1 nothing within the timeout */
    uint64_t msgid;
    int is_error;
    char code[32];
    char message[512];
} raw_answer_t;

/* Bytes read past one response stay here for the next read on that connection. */
static kd_frame_t *frames[1024];

static kd_frame_t *frame_of(int fd)
{
    if (frames[fd] == NULL) {
        kd_frame_limits_t lim = {.max_message = 1 << 26, .max_elements = 1 << 20, .max_depth = 16};
        kd_frame_new(&lim, &frames[fd]);
    }
    return frames[fd];
}

static void raw_close(int fd)
{
    kd_frame_free(frames[fd]);
    frames[fd] = NULL;
    close(fd);
}

static raw_answer_t raw_read(int fd, int timeout_ms)
{
    raw_answer_t a = {.kind = -1};
    kd_frame_t *fr = frame_of(fd);
    for (;;) {
        kd_frame_event_t ev;
        if (kd_frame_next(fr, &ev) == KD_FRAME_MESSAGE) {
            msgpack_unpacked up;
            msgpack_unpacked_init(&up);
            size_t off = 0;
            kd_response_view_t resp;
            kd_notification_view_t note;
            if (msgpack_unpack_next(&up, ev.data, ev.len, &off) == MSGPACK_UNPACK_SUCCESS &&
                kd_obj_parse_message(&up.data, &resp, &note) == 1) {
                a.kind = 1;
                a.msgid = resp.msgid;
                a.is_error = resp.error != NULL;
                if (resp.error != NULL) {
                    kd_obj_str_copy(kd_obj_get(resp.error, "code"), a.code, sizeof(a.code));
                    kd_obj_str_copy(kd_obj_get(resp.error, "message"), a.message,
                                    sizeof(a.message));
                }
            }
            msgpack_unpacked_destroy(&up);
            free(ev.data);
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, timeout_ms) <= 0)
            break;
        char *space;
        size_t room;
        kd_frame_reserve(fr, 65536, &space, &room);
        ssize_t n = recv(fd, space, room, 0);
        if (n <= 0) {
            a.kind = 0;
            break;
        }
        kd_frame_commit(fr, (size_t)n);
    }
    return a;
}

/* Send one message built by the writer, read one answer. */
static raw_answer_t raw_exchange(int fd, kd_writer_t *w)
{
    size_t len;
    void *bytes = kd_writer_release(w, &len);
    raw_send(fd, bytes, len);
    free(bytes);
    return raw_read(fd, 30000);
}

/* A raw request with one params map begun: the caller writes npairs key/value pairs. */
static void begin(kd_writer_t *w, uint64_t msgid, const char *method, uint32_t npairs)
{
    kd_writer_init(w);
    kd_w_request_begin(w, msgid, method);
    kd_w_array(w, 1);
    kd_w_map(w, npairs);
}

static void good_client_still_served(void)
{
    krylov_server_status_t st;
    CHECK_MSG(krylov_status(good, &st) == KRYLOV_OK, "well-behaved client failed: %s",
              krylov_error_message(good));
}

static void expect_error(raw_answer_t a, uint64_t msgid, const char *code, const char *needle)
{
    CHECK_EQ_INT(a.kind, 1);
    CHECK_EQ_INT(a.msgid, msgid);
    CHECK(a.is_error);
    CHECK_MSG(strcmp(a.code, code) == 0, "code %s, expected %s (%s)", a.code, code, a.message);
    CHECK_STR_CONTAINS(a.message, needle);
}

static void test_unframeable_bytes_close_only_that_connection(void)
{
    int fd = kd_rpc_socket(daemon_.port);
    REQUIRE(fd >= 0);
    const unsigned char junk[] = {0x94, 0x00, 0x01, 0xc1, 0xc1, 0xc1};
    raw_send(fd, junk, sizeof(junk));
    CHECK_EQ_INT(raw_read(fd, 10000).kind, 0);
    raw_close(fd);
    good_client_still_served();

    /* random bytes: either an error answer or a close, never a hang of the server */
    for (int round = 0; round < 20; round++) {
        fd = kd_rpc_socket(daemon_.port);
        REQUIRE(fd >= 0);
        unsigned char buf[512];
        for (size_t i = 0; i < sizeof(buf); i++)
            buf[i] = (unsigned char)kd_test_rand_u64();
        raw_send(fd, buf, sizeof(buf));
        shutdown(fd, SHUT_WR);
        raw_read(fd, 2000);
        raw_close(fd);
    }
    good_client_still_served();
}

static void test_not_a_request(void)
{
    /* a map at top level: nothing to address a response to */
    int fd = kd_rpc_socket(daemon_.port);
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_map(&w, 1);
    kd_w_kv_int(&w, "method", 1);
    CHECK_EQ_INT(raw_exchange(fd, &w).kind, 0);
    raw_close(fd);

    /* [0, msgid, 42, []]: method is not a string */
    fd = kd_rpc_socket(daemon_.port);
    kd_writer_init(&w);
    kd_w_array(&w, 4);
    kd_w_int(&w, 0);
    kd_w_int(&w, 7);
    kd_w_int(&w, 42);
    kd_w_array(&w, 0);
    raw_answer_t a = raw_exchange(fd, &w);
    expect_error(a, 7, "BAD_REQUEST", "method");
    raw_close(fd);
    good_client_still_served();
}

static void test_method_and_parameter_errors(void)
{
    int fd = kd_rpc_socket(daemon_.port);
    kd_writer_t w;
    begin(&w, 1, "matrix.explode", 0);
    expect_error(raw_exchange(fd, &w), 1, "BAD_REQUEST", "matrix.explode");

    begin(&w, 2, "solve", 3);
    kd_w_kv_str(&w, "id", "00000000000000000000000000000000");
    kd_w_kv_bin(&w, "b", "\0\0\0\0\0\0\0\0", 8);
    kd_w_kv_str(&w, "rtol", "tiny");
    expect_error(raw_exchange(fd, &w), 2, "BAD_REQUEST", "rtol");

    begin(&w, 3, "solve", 2);
    kd_w_kv_str(&w, "id", "00000000000000000000000000000000");
    kd_w_kv_bin(&w, "b", "\0\0\0\0\0\0\0\0", 8);
    expect_error(raw_exchange(fd, &w), 3, "NOT_FOUND", "00000000000000000000000000000000");

    begin(&w, 4, "solve", 2);
    kd_w_kv_str(&w, "id", "00000000000000000000000000000000");
    kd_w_kv_bin(&w, "b", "\0\0\0\0\0\0\0\0\0\0\0", 11); /* not whole float64 values */
    expect_error(raw_exchange(fd, &w), 4, "BAD_REQUEST", "b");

    begin(&w, 5, "spmv", 2);
    kd_w_kv_str(&w, "id", "xyz");
    kd_w_kv_bin(&w, "x", "\0\0\0\0\0\0\0\0", 8);
    expect_error(raw_exchange(fd, &w), 5, "BAD_REQUEST", "id");

    begin(&w, 6, "matrix.info", 1);
    kd_w_kv_str(&w, "idd", "00000000000000000000000000000000");
    expect_error(raw_exchange(fd, &w), 6, "BAD_REQUEST", "idd");
    raw_close(fd);
    good_client_still_served();
}

static void put_csr_raw(kd_writer_t *w, uint64_t msgid, int64_t rows, int64_t cols,
                        const int32_t *ptr, size_t nptr, const int32_t *idx, size_t nidx,
                        const double *val)
{
    begin(w, msgid, "matrix.put", 5);
    kd_w_kv_int(w, "rows", rows);
    kd_w_kv_int(w, "cols", cols);
    kd_w_kv_bin(w, "indptr", ptr, nptr * 4);
    kd_w_kv_bin(w, "indices", idx, nidx * 4);
    kd_w_kv_bin(w, "values", val, nidx * 8);
}

static void test_bad_matrices(void)
{
    int fd = kd_rpc_socket(daemon_.port);
    kd_writer_t w;
    double val[4] = {1, 2, 3, 4};

    int32_t not_monotone[] = {0, 3, 2, 4};
    int32_t idx[] = {0, 1, 2, 0};
    put_csr_raw(&w, 10, 3, 3, not_monotone, 4, idx, 4, val);
    expect_error(raw_exchange(fd, &w), 10, "BAD_REQUEST", "non-decreasing");

    int32_t ptr[] = {0, 1, 2, 4};
    int32_t out_of_range[] = {0, 1, 2, 899};
    put_csr_raw(&w, 11, 3, 3, ptr, 4, out_of_range, 4, val);
    expect_error(raw_exchange(fd, &w), 11, "BAD_REQUEST", "indices[3] = 899 is outside 0..2");

    /* sizes whose product overflows: the arrays cannot match such a shape */
    put_csr_raw(&w, 12, (int64_t)1 << 40, (int64_t)1 << 40, ptr, 4, idx, 4, val);
    raw_answer_t a = raw_exchange(fd, &w);
    CHECK_EQ_INT(a.kind, 1);
    CHECK(a.is_error);
    CHECK_MSG(strcmp(a.code, "TOO_LARGE") == 0 || strcmp(a.code, "BAD_REQUEST") == 0, "code %s",
              a.code);

    /* indptr shorter than rows + 1 */
    put_csr_raw(&w, 13, 5, 3, ptr, 4, idx, 4, val);
    expect_error(raw_exchange(fd, &w), 13, "BAD_REQUEST", "indptr");

    /* values and indices of different lengths */
    begin(&w, 14, "matrix.put", 5);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_bin(&w, "indptr", ptr, 16);
    kd_w_kv_bin(&w, "indices", idx, 16);
    kd_w_kv_bin(&w, "values", val, 24);
    expect_error(raw_exchange(fd, &w), 14, "BAD_REQUEST", "values");

    /* Matrix Market text that lies about its entry count */
    begin(&w, 15, "matrix.put", 1);
    kd_w_kv_str(&w, "mtx", "%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 1.0\n");
    expect_error(raw_exchange(fd, &w), 15, "BAD_REQUEST", "line");

    begin(&w, 16, "matrix.put", 1);
    kd_w_kv_str(&w, "mtx", "%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n");
    expect_error(raw_exchange(fd, &w), 16, "UNSUPPORTED", "complex");
    raw_close(fd);
    good_client_still_served();
}

static void test_declared_size_over_limit(void)
{
    int fd = kd_rpc_socket(daemon_.port);
    /* [0, 99, "matrix.put", [{"mtx": bin32 of 4 GiB - 1 ...}]] — only the header is sent */
    unsigned char msg[64];
    size_t n = kd_rpc_put_mtx_prefix(msg, 99);
    msg[n++] = 0xc6;
    msg[n++] = 0xff, msg[n++] = 0xff, msg[n++] = 0xff, msg[n++] = 0xff;
    raw_send(fd, msg, n);
    raw_answer_t a = raw_read(fd, 10000);
    expect_error(a, 99, "TOO_LARGE", "");
    raw_close(fd);

    /* a message cut short, then the client leaves */
    fd = kd_rpc_socket(daemon_.port);
    raw_send(fd, msg, n);
    raw_send(fd, "abc", 3);
    raw_close(fd);
    good_client_still_served();
}

static void test_pipelined_and_split_requests(void)
{
    int fd = kd_rpc_socket(daemon_.port);
    kd_writer_t w;
    kd_writer_init(&w);
    for (uint64_t id = 100; id < 110; id++) {
        kd_w_request_begin(&w, id, "server.status");
        kd_w_array(&w, 0);
    }
    size_t len;
    void *bytes = kd_writer_release(&w, &len);
    raw_send(fd, bytes, len); /* ten requests glued together */
    free(bytes);
    int seen = 0;
    for (int i = 0; i < 10; i++) {
        raw_answer_t a = raw_read(fd, 10000);
        if (a.kind == 1 && !a.is_error && a.msgid >= 100 && a.msgid < 110)
            seen++;
    }
    CHECK_EQ_INT(seen, 10);

    kd_writer_init(&w);
    kd_w_request_begin(&w, 200, "matrix.list");
    kd_w_array(&w, 1);
    kd_w_map(&w, 0);
    bytes = kd_writer_release(&w, &len);
    for (size_t i = 0; i < len; i++) { /* one byte at a time */
        raw_send(fd, (char *)bytes + i, 1);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    free(bytes);
    raw_answer_t a = raw_read(fd, 10000);
    CHECK_EQ_INT(a.kind, 1);
    CHECK_EQ_INT(a.msgid, 200);
    CHECK(!a.is_error);
    raw_close(fd);
    good_client_still_served();
}

int main(void)
{
    kd_test_seed();
    if ((good = kd_daemon_start_client(&daemon_)) == NULL)
        return 1;
    RUN(test_unframeable_bytes_close_only_that_connection);
    RUN(test_not_a_request);
    RUN(test_method_and_parameter_errors);
    RUN(test_bad_matrices);
    RUN(test_declared_size_over_limit);
    RUN(test_pipelined_and_split_requests);
    krylov_client_free(good);
    CHECK_EQ_INT(kd_daemon_stop(&daemon_), 0);
    return kd_test_finish();
}
