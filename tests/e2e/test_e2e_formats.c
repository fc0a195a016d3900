/*
 * SpMV formats end to end: a real krylovd on loopback. Real Matrix Market files are put over the
 * wire with each format forced in turn (libkrylov), matrix.put reports that format, and spmv
 * agrees with the CPU (kd_csr_spmv_ref on the same file read here) to 1e-12 relative in float64,
 * for beta = 0 and beta != 0. Raw msgpack-rpc requests check what libkrylov does not expose: the
 * `candidates` of matrix.put / matrix.info for select = measure (every format listed, the chosen
 * one timed, ELL dropped with a reason on a matrix with a dense row), for select = heuristic, and
 * for a forced format; and that an unknown format name is refused with BAD_REQUEST.
 */
#include "client/mtx_file.h"
#include "common/csr.h"
#include "kd_daemon_client.h"
#include "kd_rpc.h"
#include "kd_test.h"
#include "kd_test_mtx.h"
#include "krylov.h"
#include "protocol/frame.h"
#include "protocol/mtx.h"
#include "protocol/object.h"
#include "protocol/writer.h"
#include "solver/matrix.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

static kd_daemon_t daemon_;
static krylov_client_t *client;

static const char *const files[] = {"bayer10.mtx", "rajat01.mtx", "arrow.mtx",
                                    "Groebner_id2003_aug.mtx", "494_bus.mtx"};

static char *read_text(const char *file, size_t *len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", KD_TEST_MATRICES, file);
    char *text = NULL;
    kd_err_t err = {0};
    if (kd_mtx_file_read(path, (size_t)1 << 30, &text, len, &err) != KD_OK)
        fprintf(stderr, "reading %s: %s\n", path, err.message);
    return text;
}

/* max_i |a_i - b_i| / max(1e-300, max_i |b_i|) */
static double rel_diff(const double *a, const double *b, int64_t n)
{
    double d = 0, s = 1e-300;
    for (int64_t i = 0; i < n; i++) {
        d = isfinite(a[i]) ? fmax(d, fabs(a[i] - b[i])) : INFINITY;
        s = fmax(s, fabs(b[i]));
    }
    return d / s;
}

static void test_forced_formats_over_the_wire(void)
{
    for (size_t fi = 0; fi < sizeof(files) / sizeof(files[0]); fi++) {
        kd_csr_t *A = kd_test_load_mtx(files[fi], 0.0);
        REQUIRE(A != NULL);
        char path[512];
        snprintf(path, sizeof(path), "%s/%s", KD_TEST_MATRICES, files[fi]);
        double *x = malloc((size_t)A->cols * sizeof(double));
        double *y0 = malloc((size_t)A->rows * sizeof(double));
        double *y = malloc((size_t)A->rows * sizeof(double));
        double *ref = malloc((size_t)A->rows * sizeof(double));
        int64_t max_row = 0;
        for (int64_t r = 0; r < A->rows; r++)
            if (A->indptr[r + 1] - A->indptr[r] > max_row)
                max_row = A->indptr[r + 1] - A->indptr[r];
        for (int f = 0; f < KD_FMT_COUNT; f++) {
            const char *name = kd_format_name((kd_format_t)f);
            if ((f == KD_FMT_ELL || f == KD_FMT_ELLPACK_R) &&
                (double)(A->rows + 32) * (double)max_row * 12.0 > 256e6)
                continue; /* arrow.mtx padded to its full row: 26 GB; test_select covers it */
            krylov_put_options_t opt = {.format = name};
            krylov_matrix_info_t info;
            int rc = krylov_put_file(client, path, &opt, &info);
            CHECK_MSG(rc == KRYLOV_OK, "%s as %s: %s", files[fi], name,
                      krylov_error_message(client));
            if (rc != KRYLOV_OK)
                continue;
            CHECK_MSG(strcmp(info.format, name) == 0, "%s: asked for %s, got %s", files[fi], name,
                      info.format);
            CHECK_EQ_INT(info.rows, A->rows);
            CHECK_EQ_INT(info.nnz, A->nnz);
            CHECK(info.created == 1);
            for (int round = 0; round < 2; round++) {
                double alpha = round == 0 ? 1.0 : -0.5, beta = round == 0 ? 0.0 : 1.25;
                for (int64_t i = 0; i < A->cols; i++)
                    x[i] = kd_test_rand_double(-1.0, 1.0);
                for (int64_t i = 0; i < A->rows; i++)
                    y[i] = ref[i] = y0[i] = kd_test_rand_double(-1.0, 1.0);
                kd_csr_spmv_ref(A, x, alpha, beta, ref);
                rc = krylov_spmv(client, info.id, alpha, x, A->cols, beta, y, A->rows);
                CHECK_MSG(rc == KRYLOV_OK, "spmv %s as %s: %s", files[fi], name,
                          krylov_error_message(client));
                double d = rel_diff(y, ref, A->rows);
                CHECK_MSG(d <= 1e-12, "%s as %s (alpha %g, beta %g): relative difference %g",
                          files[fi], name, alpha, beta, d);
            }
            CHECK(krylov_drop(client, info.id) == KRYLOV_OK);
        }
        free(x);
        free(y0);
        free(y);
        free(ref);
        kd_csr_free(A);
    }
}

/* ---- raw msgpack-rpc, for the candidates ------------------------------------------------- */

typedef struct raw_reply {
    msgpack_unpacked up;
    void *bytes;
    kd_response_view_t resp;
    int ok;
} raw_reply_t;

/* Send the writer's message on a fresh connection and read one response. */
static void raw_call(kd_writer_t *w, raw_reply_t *r)
{
    memset(r, 0, sizeof(*r));
    msgpack_unpacked_init(&r->up);
    int fd = kd_rpc_socket(daemon_.port);
    if (fd < 0)
        return;
    size_t len;
    char *bytes = kd_writer_release(w, &len);
    for (size_t off = 0; off < len;) {
        ssize_t k = send(fd, bytes + off, len - off, MSG_NOSIGNAL);
        if (k <= 0)
            break;
        off += (size_t)k;
    }
    free(bytes);
    kd_frame_limits_t lim = {.max_message = 1 << 26, .max_elements = 1 << 20, .max_depth = 16};
    kd_frame_t *fr = NULL;
    kd_frame_new(&lim, &fr);
    for (;;) {
        kd_frame_event_t ev;
        if (kd_frame_next(fr, &ev) == KD_FRAME_MESSAGE) {
            size_t off = 0;
            kd_notification_view_t note;
            r->bytes = ev.data;
            r->ok = msgpack_unpack_next(&r->up, ev.data, ev.len, &off) == MSGPACK_UNPACK_SUCCESS &&
                    kd_obj_parse_message(&r->up.data, &r->resp, &note) == 1;
            break;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 60000) <= 0)
            break;
        char *space;
        size_t room;
        kd_frame_reserve(fr, 65536, &space, &room);
        ssize_t n = recv(fd, space, room, 0);
        if (n <= 0)
            break;
        kd_frame_commit(fr, (size_t)n);
    }
    kd_frame_free(fr);
    close(fd);
}

static void raw_free(raw_reply_t *r)
{
    msgpack_unpacked_destroy(&r->up);
    free(r->bytes);
}

/* matrix.put {mtx, format?, select?}; the reply stays in r. */
static void raw_put(const char *file, const char *format, const char *select, raw_reply_t *r)
{
    size_t len = 0;
    char *text = read_text(file, &len);
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_request_begin(&w, 1, "matrix.put");
    kd_w_array(&w, 1);
    kd_w_map(&w, 1 + (format != NULL) + (select != NULL));
    kd_w_key(&w, "mtx");
    kd_w_strn(&w, text, len);
    if (format != NULL)
        kd_w_kv_str(&w, "format", format);
    if (select != NULL)
        kd_w_kv_str(&w, "select", select);
    free(text);
    raw_call(&w, r);
}

static void raw_id_call(const char *method, const char *id, raw_reply_t *r)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_request_begin(&w, 2, method);
    kd_w_array(&w, 1);
    kd_w_map(&w, 1);
    kd_w_kv_str(&w, "id", id);
    raw_call(&w, r);
}

/* Check the candidates array of a put/info result; returns how many were timed. The chosen
 * format must be listed; when `timed_choice`, it must be timed and the fastest. */
static int check_candidates(const char *what, const msgpack_object *result, int expect_count,
                            int timed_choice)
{
    char chosen[32] = "";
    kd_obj_str_copy(kd_obj_get(result, "format"), chosen, sizeof(chosen));
    const msgpack_object *cands = kd_obj_get(result, "candidates");
    if (cands == NULL || cands->type != MSGPACK_OBJECT_ARRAY) {
        CHECK_MSG(0, "%s: no candidates array", what);
        return 0;
    }
    CHECK_EQ_INT(cands->via.array.size, expect_count);
    int timed = 0, found = 0;
    double chosen_ms = -1.0, fastest = INFINITY;
    for (uint32_t i = 0; i < cands->via.array.size; i++) {
        const msgpack_object *c = &cands->via.array.ptr[i];
        char format[32] = "", dropped[128] = "";
        double ms = -1.0;
        kd_obj_str_copy(kd_obj_get(c, "format"), format, sizeof(format));
        kd_format_t f;
        CHECK_MSG(kd_format_parse(format, &f) == 0, "%s: candidate format '%s'", what, format);
        const msgpack_object *t = kd_obj_get(c, "time_ms");
        const msgpack_object *d = kd_obj_get(c, "dropped");
        CHECK_MSG((t != NULL) != (d != NULL), "%s: %s needs time_ms or dropped", what, format);
        if (t != NULL && kd_obj_double(t, &ms) == 0) {
            timed++;
            CHECK(ms > 0.0);
            fastest = fmin(fastest, ms);
        }
        if (d != NULL) {
            kd_obj_str_copy(d, dropped, sizeof(dropped));
            CHECK(dropped[0] != '\0');
        }
        if (strcmp(format, chosen) == 0) {
            found = 1;
            chosen_ms = ms;
        }
    }
    CHECK_MSG(found, "%s: the chosen format %s is not among the candidates", what, chosen);
    if (timed_choice) {
        CHECK_MSG(chosen_ms > 0.0, "%s: the chosen format %s was not timed", what, chosen);
        CHECK_MSG(chosen_ms <= fastest, "%s: chose %s (%g ms) over a faster one (%g ms)", what,
                  chosen, chosen_ms, fastest);
    }
    return timed;
}

static const char *dropped_reason(const msgpack_object *result, const char *format, char *buf,
                                  size_t cap)
{
    buf[0] = '\0';
    const msgpack_object *cands = kd_obj_get(result, "candidates");
    for (uint32_t i = 0; cands != NULL && i < cands->via.array.size; i++) {
        const msgpack_object *c = &cands->via.array.ptr[i];
        if (kd_obj_str_eq(kd_obj_get(c, "format"), format))
            kd_obj_str_copy(kd_obj_get(c, "dropped"), buf, cap);
    }
    return buf;
}

static void test_candidates_reported(void)
{
    raw_reply_t r;
    char id[40] = "", buf[128];

    /* measure (the default): rajat01 has one row of 1,442 among rows of ~6 */
    raw_put("rajat01.mtx", NULL, NULL, &r);
    REQUIRE(r.ok && r.resp.error == NULL && r.resp.result != NULL);
    CHECK(check_candidates("put rajat01 (measure)", r.resp.result, KD_FMT_COUNT, 1) >= 1);
    CHECK_STR_CONTAINS(dropped_reason(r.resp.result, "ell", buf, sizeof(buf)), "padding");
    kd_obj_str_copy(kd_obj_get(r.resp.result, "id"), id, sizeof(id));
    raw_free(&r);
    /* matrix.info reports the same */
    raw_id_call("matrix.info", id, &r);
    REQUIRE(r.ok && r.resp.error == NULL && r.resp.result != NULL);
    CHECK(check_candidates("info rajat01", r.resp.result, KD_FMT_COUNT, 1) >= 1);
    raw_free(&r);
    raw_id_call("matrix.drop", id, &r);
    raw_free(&r);

    /* select = heuristic: one candidate, not timed */
    raw_put("bayer10.mtx", NULL, "heuristic", &r);
    REQUIRE(r.ok && r.resp.error == NULL && r.resp.result != NULL);
    CHECK_EQ_INT(check_candidates("put bayer10 (heuristic)", r.resp.result, 1, 0), 0);
    char format[32] = "";
    kd_obj_str_copy(kd_obj_get(r.resp.result, "format"), format, sizeof(format));
    CHECK_STR_CONTAINS(dropped_reason(r.resp.result, format, buf, sizeof(buf)), "heuristic");
    kd_obj_str_copy(kd_obj_get(r.resp.result, "id"), id, sizeof(id));
    raw_free(&r);
    raw_id_call("matrix.drop", id, &r);
    raw_free(&r);

    /* forced */
    raw_put("watt_2.mtx", "sell_c_sigma", NULL, &r);
    REQUIRE(r.ok && r.resp.error == NULL && r.resp.result != NULL);
    CHECK_EQ_INT(check_candidates("put watt_2 (forced)", r.resp.result, 1, 0), 0);
    CHECK(kd_obj_str_eq(kd_obj_get(r.resp.result, "format"), "sell_c_sigma"));
    CHECK_STR_CONTAINS(dropped_reason(r.resp.result, "sell_c_sigma", buf, sizeof(buf)), "forced");
    raw_free(&r);

    /* forced tiled: its tile histogram in format_detail, none for the others */
    raw_put("bayer10.mtx", "tiled", NULL, &r);
    REQUIRE(r.ok && r.resp.error == NULL && r.resp.result != NULL);
    const msgpack_object *detail = kd_obj_get(r.resp.result, "format_detail");
    CHECK(detail != NULL && detail->type == MSGPACK_OBJECT_MAP && detail->via.map.size >= 7);
    int64_t tiles = 0, n = 0;
    static const char *kinds[] = {"dense", "dense_row", "dense_col", "ell", "csr", "coo", "hyb"};
    for (size_t k = 0; detail != NULL && k < sizeof(kinds) / sizeof(kinds[0]); k++)
        tiles += kd_obj_int64(kd_obj_get(detail, kinds[k]), &n) == 0 ? n : 0;
    CHECK_MSG(tiles > 0, "tiled format_detail counts no tiles");
    raw_free(&r);
    raw_put("494_bus.mtx", "coo", NULL, &r);
    REQUIRE(r.ok && r.resp.error == NULL && r.resp.result != NULL);
    detail = kd_obj_get(r.resp.result, "format_detail");
    CHECK(detail != NULL && detail->type == MSGPACK_OBJECT_MAP && detail->via.map.size == 0);
    raw_free(&r);

    /* an unknown format name */
    raw_put("can___24.mtx", "csr5", NULL, &r);
    REQUIRE(r.ok && r.resp.error != NULL);
    CHECK(kd_obj_str_eq(kd_obj_get(r.resp.error, "code"), "BAD_REQUEST"));
    char message[256] = "";
    kd_obj_str_copy(kd_obj_get(r.resp.error, "message"), message, sizeof(message));
    CHECK_STR_CONTAINS(message, "csr5");
    raw_free(&r);
}

int main(void)
{
    kd_test_seed();
    if ((client = kd_daemon_start_client(&daemon_)) == NULL)
        return 1;
    krylov_set_timeout(client, 120000);
    RUN(test_forced_formats_over_the_wire);
    RUN(test_candidates_reported);
    krylov_client_free(client);
    CHECK_EQ_INT(kd_daemon_stop(&daemon_), 0);
    return kd_test_finish();
}
