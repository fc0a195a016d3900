/*
 * krylov-bench wire: how close a large `spmv` and `solve` come to the wire (issue 22 part 4). In
 * one run it measures
 *   - raw loopback TCP: a sender and a receiver thread moving a request's and a reply's bytes in
 *     one transfer over 127.0.0.1, in the client's steps (1 MiB send() calls, 1 MiB receive
 *     room), best of 3, just before each size;
 *   - a real krylovd (started here, or --port): `spmv` on a resident diagonal matrix (compute is
 *     one multiply a row, so the wire dominates) with x of each --sizes million float64 values,
 *     and `solve` (pcg with jacobi on the same matrix: one iteration) with b of that size. Rate =
 *     (request bytes + reply bytes) / round-trip wall time, best of --runs; beside it the server's
 *     own time_ms from the reply, so the wire's share shows;
 * each rate also as a ratio to the raw TCP rate of the same run. Two clients: a lean one (the
 * request's header, then the vector's bytes sent from the caller's array in 1 MiB steps, the
 * reply framed as libkrylov frames it), which measures the service; and libkrylov itself
 * (krylov_spmv / krylov_solve: its own encoding and decoding copies included), what a C user
 * gets; with a krylovd started here, libkrylov a second time on the daemon's Unix socket, where
 * its arrays go through shared memory (one copy in, one out: no socket bytes but the requests'
 * few). Every answer is checked against the diagonal (y = d x, x = b / d).
 *
 *   build/bin/krylov-bench wire [--sizes 1,4,16] [--runs 5] [--port P] [--baseline KRYLOVD]
 *
 * --baseline names another krylovd binary in the build's bin directory (a copy of an earlier
 * build): both are started and measured call by call in turn, against the same raw rate.
 */
#include "bench/bench.h"
#include "common/clock.h"
#include "common/recycle.h"
#include "kd_daemon.h"
#include "krylov.h"
#include "protocol/frame.h"
#include "protocol/writer.h"

#include <math.h>
#include <msgpack.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define KD_WIRE_STEP ((size_t)1 << 20) /* libkrylov's send step and receive room */
#define KD_WIRE_SIZES_MAX 8

/* ---- raw loopback TCP -------------------------------------------------------------------- */

typedef struct kd_wire_raw {
    int listener;
    size_t bytes;
    uint64_t done_ns;
    int failed;
} kd_wire_raw_t;

static int kd_wire_send_all(int fd, const void *data, size_t len)
{
    const char *p = data;
    while (len > 0) {
        ssize_t n = send(fd, p, len < KD_WIRE_STEP ? len : KD_WIRE_STEP, MSG_NOSIGNAL);
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static void *kd_wire_raw_receiver(void *arg)
{
    kd_wire_raw_t *r = arg;
    int fd = accept(r->listener, NULL, NULL);
    char *buf = malloc(KD_WIRE_STEP);
    size_t got = 0;
    while (fd >= 0 && buf != NULL && got < r->bytes) {
        ssize_t n = recv(fd, buf, KD_WIRE_STEP, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    r->done_ns = kd_clock_ns();
    r->failed = got != r->bytes;
    free(buf);
    if (fd >= 0)
        close(fd);
    return NULL;
}

static int kd_wire_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)); /* as krylovd and libkrylov */
    return fd;
}

/* MB/s of one transfer of `bytes` from a fresh connection's first send() to the last byte read. */
static double kd_wire_raw_once(const char *data, size_t bytes)
{
    kd_wire_raw_t r = {.bytes = bytes};
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    r.listener = socket(AF_INET, SOCK_STREAM, 0);
    if (r.listener < 0 || bind(r.listener, (struct sockaddr *)&a, sizeof(a)) != 0 ||
        listen(r.listener, 1) != 0 || getsockname(r.listener, (struct sockaddr *)&a, &alen) != 0)
        return -1;
    pthread_t th;
    if (pthread_create(&th, NULL, kd_wire_raw_receiver, &r) != 0)
        return -1;
    int fd = kd_wire_connect(ntohs(a.sin_port));
    uint64_t t0 = kd_clock_ns();
    int bad = fd < 0 || kd_wire_send_all(fd, data, bytes) != 0;
    pthread_join(th, NULL);
    if (fd >= 0)
        close(fd);
    close(r.listener);
    if (bad || r.failed)
        return -1;
    return (double)bytes / ((double)(r.done_ns - t0) * 1e-9) * 1e-6;
}

/* ---- the lean client ---------------------------------------------------------------------- */

typedef struct kd_wire_conn {
    int fd;
    kd_frame_t *frame;
    uint64_t msgid;
} kd_wire_conn_t;

/* Send [0, msgid, method, [{"id": id, <extra>, key: bin}]] with the bin's bytes straight from
 * data: the header is encoded, the payload is not copied. */
static int kd_wire_send_request(kd_wire_conn_t *c, const char *method, const char *id,
                                const char *key, const void *data, size_t len, int solve)
{
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_request_begin(&w, ++c->msgid, method);
    kd_w_array(&w, 1);
    kd_w_map(&w, solve ? 5 : 2);
    kd_w_kv_str(&w, "id", id);
    if (solve) { /* one iteration: check at once */
        kd_w_kv_str(&w, "method", "pcg");
        kd_w_kv_double(&w, "rtol", 1e-10);
        kd_w_kv_int(&w, "check_every", 1);
    }
    kd_w_key(&w, key);
    if (msgpack_pack_bin(&w.pk, len) != 0)
        w.failed = 1;
    size_t hlen;
    void *head = kd_writer_release(&w, &hlen);
    int rc = head == NULL || kd_wire_send_all(c->fd, head, hlen) != 0 ||
                     kd_wire_send_all(c->fd, data, len) != 0
                 ? -1
                 : 0;
    free(head);
    return rc;
}

static const msgpack_object *kd_wire_get(const msgpack_object *map, const char *key)
{
    if (map->type != MSGPACK_OBJECT_MAP)
        return NULL;
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object_kv *kv = &map->via.map.ptr[i];
        if (kv->key.type == MSGPACK_OBJECT_STR && kv->key.via.str.size == strlen(key) &&
            memcmp(kv->key.via.str.ptr, key, kv->key.via.str.size) == 0)
            return &kv->val;
    }
    return NULL;
}

/* The reply, framed as libkrylov frames it; *vec and *server_ms from its result (vec points into
 * *owned, which the caller frees). Returns the reply's length, or 0. */
static size_t kd_wire_recv_reply(kd_wire_conn_t *c, const char *key, const char **vec,
                                 size_t *vec_len, double *server_ms, void **owned)
{
    kd_frame_event_t ev;
    while (kd_frame_next(c->frame, &ev) == KD_FRAME_NEED_MORE) {
        char *space;
        size_t room;
        if (kd_frame_reserve(c->frame, KD_WIRE_STEP, &space, &room) != KD_OK)
            return 0;
        ssize_t n = recv(c->fd, space, room, 0);
        if (n <= 0)
            return 0;
        kd_frame_commit(c->frame, (size_t)n);
    }
    if (ev.kind != KD_FRAME_MESSAGE)
        return 0;
    *owned = ev.data;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0, len = 0;
    if (msgpack_unpack_next(&up, ev.data, ev.len, &off) == MSGPACK_UNPACK_SUCCESS &&
        up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size == 4 &&
        up.data.via.array.ptr[2].type == MSGPACK_OBJECT_NIL) {
        const msgpack_object *result = &up.data.via.array.ptr[3];
        const msgpack_object *v = kd_wire_get(result, key), *t = kd_wire_get(result, "time_ms");
        if (v != NULL && v->type == MSGPACK_OBJECT_BIN && t != NULL &&
            t->type == MSGPACK_OBJECT_FLOAT64) {
            *vec = v->via.bin.ptr;
            *vec_len = v->via.bin.size;
            *server_ms = t->via.f64;
            len = ev.len;
        }
    } else if (up.data.type == MSGPACK_OBJECT_ARRAY && up.data.via.array.size == 4) {
        const msgpack_object *m = kd_wire_get(&up.data.via.array.ptr[2], "message");
        fprintf(stderr, "krylov-bench wire: error reply: %.*s\n",
                m != NULL && m->type == MSGPACK_OBJECT_STR ? (int)m->via.str.size : 1,
                m != NULL && m->type == MSGPACK_OBJECT_STR ? m->via.str.ptr : "?");
    }
    msgpack_unpacked_destroy(&up);
    return len;
}

/* ---- the measurements --------------------------------------------------------------------- */

/* d_i = 1 + (i mod 7) / 8: exact in binary, so y = d x and x = b / d compare exactly. */
static double kd_wire_diag(int64_t i)
{
    return 1.0 + (double)(i % 7) / 8.0;
}

static int kd_wire_put_diagonal(krylov_client_t *kc, int64_t n, char id[33])
{
    int32_t *indptr = malloc((size_t)(n + 1) * 4), *indices = malloc((size_t)n * 4);
    double *values = malloc((size_t)n * 8);
    int rc = -1;
    if (indptr != NULL && indices != NULL && values != NULL) {
        for (int64_t i = 0; i < n; i++) {
            indptr[i] = (int32_t)i;
            indices[i] = (int32_t)i;
            values[i] = kd_wire_diag(i);
        }
        indptr[n] = (int32_t)n;
        krylov_put_options_t opt = {0};
        opt.format = "ell"; /* no format measurement: the put is not what is timed */
        krylov_matrix_info_t info;
        if (krylov_put_csr(kc, n, n, indptr, indices, values, &opt, &info) == KRYLOV_OK) {
            memcpy(id, info.id, 33);
            rc = 0;
        } else {
            fprintf(stderr, "krylov-bench wire: put of %lld rows: %s\n", (long long)n,
                    krylov_error_message(kc));
        }
    }
    free(indptr);
    free(indices);
    free(values);
    return rc;
}

/* Does out (n float64 values, possibly unaligned) hold d x (spmv) or x / d (solve)? */
static int kd_wire_check(const char *out, size_t len, const double *in, int64_t n, int solve)
{
    if (len != (size_t)n * 8)
        return 0;
    for (int64_t i = 0; i < n; i++) {
        double v;
        memcpy(&v, out + (size_t)i * 8, 8);
        double want = solve ? in[i] / kd_wire_diag(i) : in[i] * kd_wire_diag(i);
        if (solve ? !(fabs(v - want) <= 1e-9 * fabs(want) + 1e-300) : v != want)
            return 0;
    }
    return 1;
}

typedef struct kd_wire_row {
    double mbs, server_ms, wall_ms;
} kd_wire_row_t;

/* Best of `runs` round trips of the lean client. */
static int kd_wire_lean(kd_wire_conn_t *c, const char *id, const double *in, int64_t n, int solve,
                        int runs, kd_wire_row_t *row)
{
    const size_t bytes = (size_t)n * 8;
    row->wall_ms = 1e300;
    for (int r = 0; r < runs; r++) {
        const char *vec = NULL;
        size_t vlen = 0, reply;
        double server_ms = 0;
        void *owned = NULL;
        uint64_t t0 = kd_clock_ns();
        if (kd_wire_send_request(c, solve ? "solve" : "spmv", id, solve ? "b" : "x", in, bytes,
                                 solve) != 0 ||
            (reply = kd_wire_recv_reply(c, solve ? "x" : "y", &vec, &vlen, &server_ms, &owned)) ==
                0) {
            kd_recycle_free(owned);
            return -1;
        }
        double ms = (double)(kd_clock_ns() - t0) * 1e-6;
        int ok = kd_wire_check(vec, vlen, in, n, solve);
        kd_recycle_free(owned);
        if (!ok) {
            fprintf(stderr, "krylov-bench wire: wrong %s answer at n = %lld\n",
                    solve ? "solve" : "spmv", (long long)n);
            return -1;
        }
        if (ms < row->wall_ms) {
            row->wall_ms = ms;
            row->server_ms = server_ms;
            /* request header + bytes, reply header + bytes: the headers are tens of bytes */
            row->mbs = (double)(2 * bytes + (reply - vlen)) / (ms * 1e-3) * 1e-6;
        }
    }
    return 0;
}

/* Best of `runs` round trips through libkrylov. */
static int kd_wire_library(krylov_client_t *kc, const char *id, const double *in, double *out,
                           int64_t n, int solve, int runs, kd_wire_row_t *row)
{
    row->wall_ms = 1e300;
    for (int r = 0; r < runs; r++) {
        double server_ms = -1;
        uint64_t t0 = kd_clock_ns();
        int rc;
        if (solve) {
            krylov_solve_options_t opt;
            krylov_solve_options_init(&opt);
            opt.method = "pcg";
            opt.rtol = 1e-10;
            opt.check_every = 1;
            krylov_solve_result_t res;
            rc = krylov_solve(kc, id, in, n, &opt, out, &res);
            if (rc == KRYLOV_OK) {
                server_ms = res.time_ms;
                krylov_solve_result_free(&res);
            }
        } else {
            rc = krylov_spmv_timed(kc, id, 1.0, in, n, 0.0, out, n, &server_ms);
        }
        double ms = (double)(kd_clock_ns() - t0) * 1e-6;
        if (rc != KRYLOV_OK || !kd_wire_check((const char *)out, (size_t)n * 8, in, n, solve)) {
            fprintf(stderr, "krylov-bench wire: libkrylov %s at n = %lld: %s\n",
                    solve ? "solve" : "spmv", (long long)n,
                    rc != KRYLOV_OK ? krylov_error_message(kc) : "wrong answer");
            return -1;
        }
        if (ms < row->wall_ms) {
            row->wall_ms = ms;
            row->server_ms = server_ms;
            row->mbs = (double)(2 * (size_t)n * 8) / (ms * 1e-3) * 1e-6;
        }
    }
    return 0;
}

static void kd_wire_print(const char *what, int64_t n, const kd_wire_row_t *row, double raw)
{
    char server[32] = "-";
    if (row->server_ms >= 0)
        snprintf(server, sizeof(server), "%.1f", row->server_ms);
    /* the same bytes over the time outside the server's own time_ms: framing, decoding,
     * encoding and the socket, what this work removes copies from */
    char outside[48] = "-";
    if (row->server_ms >= 0 && row->wall_ms > row->server_ms) {
        double mbs = row->mbs * row->wall_ms / (row->wall_ms - row->server_ms);
        snprintf(outside, sizeof(outside), "%9.0f %7.2fx", mbs, mbs / raw);
    }
    printf("%-30s %5lldM %8.1f %7s %7.0f %6.2fx %s\n", what, (long long)(n >> 20), row->wall_ms,
           server, row->mbs, row->mbs / raw, outside);
}

static int kd_wire_parse_sizes(const char *list, int64_t *sizes, int *count)
{
    *count = 0;
    for (const char *p = list; *p != '\0' && *count < KD_WIRE_SIZES_MAX;) {
        char *end;
        long long m = strtoll(p, &end, 10);
        if (end == p || m < 1 || m > 128)
            return -1;
        sizes[(*count)++] = (int64_t)m << 20;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return -1;
    }
    return *count > 0 ? 0 : -1;
}

/* A krylovd measured: this build's, or --baseline's (another binary in the same directory). */
typedef struct kd_wire_server {
    const char *name;
    kd_daemon_t daemon;
    int port;
    krylov_client_t *kc;
    krylov_client_t *local; /* on the Unix socket (shared memory), or NULL (--port) */
    kd_wire_conn_t lean;
    char id[33];
    kd_wire_row_t row[2][3]; /* [solve][lean, libkrylov, libkrylov on the Unix socket] */
} kd_wire_server_t;

static int kd_wire_server_start(kd_wire_server_t *sv, const char *binary, int port, int64_t nmax)
{
    sv->lean.fd = -1;
    if (port == 0) {
        char msg[32];
        snprintf(msg, sizeof(msg), "%zu", (size_t)nmax * 8 * 2 + ((size_t)1 << 20));
        char unix_listen[320] = "";
        const char *args[] = {"--max-message", msg,         "--max-rows", "200000000",
                              "--listen",      unix_listen, NULL};
        snprintf(sv->daemon.dir, sizeof(sv->daemon.dir), "/tmp/krylov-bench-wire-XXXXXX");
        sv->daemon.binary = binary;
        if (mkdtemp(sv->daemon.dir) != NULL)
            snprintf(unix_listen, sizeof(unix_listen), "unix:%s/sock", sv->daemon.dir);
        if (unix_listen[0] == '\0' || kd_daemon_launch(&sv->daemon, args) != 0) {
            fprintf(stderr, "krylov-bench wire: could not start %s\n", binary);
            return -1;
        }
        port = sv->daemon.port;
        sv->local = krylov_client_new();
        if (sv->local == NULL || krylov_connect(sv->local, unix_listen) != KRYLOV_OK) {
            fprintf(stderr, "krylov-bench wire: cannot connect to %s\n", unix_listen);
            return -1;
        }
    }
    sv->port = port;
    char address[64];
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    /* the lean client's framer takes replies as large as the largest vector, into reused buffers
     * (as the raw receiver reuses its own) */
    kd_frame_limits_t lim = {.max_message = (size_t)nmax * 8 + ((size_t)1 << 20)};
    sv->kc = krylov_client_new();
    if (sv->kc == NULL || krylov_connect(sv->kc, address) != KRYLOV_OK ||
        (sv->lean.fd = kd_wire_connect(port)) < 0 || kd_frame_new(&lim, &sv->lean.frame) != KD_OK) {
        fprintf(stderr, "krylov-bench wire: cannot connect to %s\n", address);
        return -1;
    }
    kd_frame_use_recycled(sv->lean.frame);
    return 0;
}

static void kd_wire_server_stop(kd_wire_server_t *sv)
{
    if (sv->lean.fd >= 0)
        close(sv->lean.fd);
    kd_frame_free(sv->lean.frame);
    krylov_client_free(sv->kc);
    krylov_client_free(sv->local);
    if (sv->daemon.pid > 0)
        kd_daemon_stop(&sv->daemon);
}

static void kd_wire_keep_best(kd_wire_row_t *best, const kd_wire_row_t *row)
{
    if (row->wall_ms < best->wall_ms)
        *best = *row;
}

/* One size on every server: the runs interleaved (server by server, call by call), so drift in
 * the machine's load hits them alike. */
static int kd_wire_size(kd_wire_server_t *svs, int nsv, const double *in, double *out, int64_t n,
                        int runs)
{
    for (int k = 0; k < nsv; k++) {
        if (kd_wire_put_diagonal(svs[k].kc, n, svs[k].id) != 0)
            return -1;
        for (int solve = 0; solve < 2; solve++) { /* untimed: kernels built, vectors pooled */
            kd_wire_row_t row;
            if (kd_wire_lean(&svs[k].lean, svs[k].id, in, n, solve, 1, &row) != 0)
                return -1;
            for (int lib = 0; lib < 3; lib++)
                svs[k].row[solve][lib].wall_ms = 1e300;
        }
    }
    for (int r = 0; r < runs; r++)
        for (int solve = 0; solve < 2; solve++)
            for (int k = 0; k < nsv; k++) {
                kd_wire_server_t *sv = &svs[k];
                kd_wire_row_t row;
                if (kd_wire_lean(&sv->lean, sv->id, in, n, solve, 1, &row) != 0)
                    return -1;
                kd_wire_keep_best(&sv->row[solve][0], &row);
                if (kd_wire_library(sv->kc, sv->id, in, out, n, solve, 1, &row) != 0)
                    return -1;
                kd_wire_keep_best(&sv->row[solve][1], &row);
                if (sv->local == NULL)
                    continue;
                if (kd_wire_library(sv->local, sv->id, in, out, n, solve, 1, &row) != 0)
                    return -1;
                kd_wire_keep_best(&sv->row[solve][2], &row);
            }
    for (int k = 0; k < nsv; k++)
        if (krylov_drop(svs[k].kc, svs[k].id) != KRYLOV_OK)
            return -1;
    return 0;
}

int kd_bench_wire_main(int argc, char **argv)
{
    int runs = 5, port = 0, nsizes = 0;
    int64_t sizes[KD_WIRE_SIZES_MAX];
    const char *size_list = "1,4,16", *baseline = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--runs") == 0)
            runs = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--port") == 0)
            port = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--sizes") == 0)
            size_list = argv[i + 1];
        else if (strcmp(argv[i], "--baseline") == 0)
            baseline = argv[i + 1];
        else
            runs = 0;
    }
    if (argc % 2 == 0 || runs < 1 || kd_wire_parse_sizes(size_list, sizes, &nsizes)) {
        fprintf(stderr, "usage: krylov-bench wire [--sizes M1,M2,..] (million float64 values, "
                        "1..128) [--runs N] [--port P] [--baseline KRYLOVD]\n");
        return 2;
    }
    int64_t nmax = 0;
    for (int s = 0; s < nsizes; s++)
        nmax = sizes[s] > nmax ? sizes[s] : nmax;
    char *raw_data = calloc(1, (size_t)nmax * 16);
    double *in = malloc((size_t)nmax * 8), *out = malloc((size_t)nmax * 8);
    kd_wire_server_t svs[2];
    memset(svs, 0, sizeof(svs));
    svs[0].name = port != 0 ? "port" : "krylovd";
    svs[1].name = baseline;
    const int nsv = baseline != NULL ? 2 : 1;
    int rc = 1;
    if (raw_data == NULL || in == NULL || out == NULL)
        goto done;
    kd_recycle_set_limit((size_t)nmax * 8 * 2 + ((size_t)4 << 20), 2);
    for (int64_t i = 0; i < nmax; i++)
        in[i] = (double)((i * 7919) % 1000003) / 1000003.0 + 0.5;
    for (int k = 0; k < nsv; k++) {
        svs[k].lean.fd = -1;
        if (kd_wire_server_start(&svs[k], k == 0 ? NULL : baseline, k == 0 ? port : 0, nmax) != 0)
            goto done;
    }
    printf(
        "raw: the request's and the reply's bytes (2 x 8 x values) in one transfer over loopback "
        "TCP, 1 MiB send steps, best of 3, measured just before each size\n");
    printf("%-30s %6s %8s %7s %7s %7s %9s %8s\n", "request", "values", "wall_ms", "srv_ms", "MB/s",
           "vs raw", "outside", "vs raw");
    for (int s = 0; s < nsizes; s++) {
        const int64_t n = sizes[s];
        double raw = 0;
        for (int t = 0; t < 3; t++) {
            double mbs = kd_wire_raw_once(raw_data, (size_t)n * 16);
            if (mbs < 0) {
                fprintf(stderr, "krylov-bench wire: raw loopback TCP failed\n");
                goto done;
            }
            raw = mbs > raw ? mbs : raw;
        }
        if (kd_wire_size(svs, nsv, in, out, n, runs) != 0)
            goto done;
        printf("%-30s %5lldM %8.1f %7s %7.0f\n", "raw loopback TCP", (long long)(n >> 20),
               (double)n * 16 / raw * 1e-3, "-", raw);
        for (int solve = 0; solve < 2; solve++)
            for (int lib = 0; lib < 3; lib++)
                for (int k = 0; k < nsv; k++) {
                    static const char *const clients[3] = {"lean", "libkrylov", "libkrylov shm"};
                    char what[80];
                    if (lib == 2 && svs[k].local == NULL)
                        continue;
                    snprintf(what, sizeof(what), "%s %s, %s", solve ? "solve" : "spmv",
                             clients[lib], svs[k].name);
                    kd_wire_print(what, n, &svs[k].row[solve][lib], raw);
                }
        fflush(stdout);
    }
    rc = 0;
done:
    for (int k = 0; k < nsv; k++)
        kd_wire_server_stop(&svs[k]);
    free(raw_data);
    free(in);
    free(out);
    return rc;
}
