/*
 * Hostile clients in parallel with a well-behaved one, against one real krylovd with tight limits
 * (64 connections, 2 s per message, 3 s idle, 256 kB of unread responses). At the same time:
 *   - slow senders: a valid request at one byte every 300 ms, and a lone header at one byte a
 *     second: closed by the per-message deadline;
 *   - a client that pipelines SpMV requests and never reads: paused, then closed when idle;
 *   - a flood of 200 connections past the limit: answered BUSY and closed;
 *   - oversized declared lengths (bin32, str32, array32, map32): TOO_LARGE naming the msgid,
 *     without the server reading the bytes;
 *   - random bytes on fresh connections: an error answer or a close.
 * The well-behaved client's requests (SpMV checked against a CPU reference, matrix.info,
 * server.status) must all succeed, with bounded latency, and the server's counters must show what
 * each attacker met. Attackers record what they saw; the main thread checks it after they join.
 */
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_test.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>

#define MAX_CONNECTIONS 64
#define MESSAGE_TIMEOUT_MS 2000
#define IDLE_TIMEOUT_MS 3000
#define LATENCY_BOUND_MS 5000

static kd_daemon_t d;
static kd_csr_t *A;   /* the good client's matrix */
static kd_csr_t *Big; /* the never-reader's: 80 kB responses */
static char aid[33], bigid[33];
static atomic_int stop_good;

typedef struct good_result {
    int requests, failures;
    double max_ms, p99_ms;
    char first_failure[600];
} good_result_t;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void *good_client(void *arg)
{
    good_result_t *res = arg;
    kd_rpc_t r;
    if (kd_rpc_connect(&r, d.port) != 0) {
        res->failures++;
        snprintf(res->first_failure, sizeof(res->first_failure), "cannot connect");
        return NULL;
    }
    double *x = malloc((size_t)A->cols * 8), *y = malloc((size_t)A->rows * 8),
           *ref = malloc((size_t)A->rows * 8);
    double *lat = malloc(100000 * sizeof(double));
    uint64_t msgid = 1;
    while (!atomic_load(&stop_good) && res->requests < 100000) {
        for (int64_t i = 0; i < A->cols; i++)
            x[i] = (double)((msgid * 7 + (uint64_t)i) % 13) - 6.0;
        kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
        double t0 = kd_clock_ms();
        kd_rpc_msg_t m;
        int kind = (int)(msgid % 3);
        int ok;
        if (kind == 0) {
            ok = kd_rpc_spmv(&r, msgid, aid, x, A->cols, y, A->rows, &m) == 0;
            for (int64_t i = 0; ok && i < A->rows; i++)
                ok = fabs(y[i] - ref[i]) <= 1e-12 * (1 + fabs(ref[i]));
        } else if (kind == 1) {
            ok = kd_rpc_id_call(&r, msgid, "matrix.info", aid, -1, &m) == KD_RPC_RESPONSE &&
                 m.error == NULL && kd_rpc_int(m.result, "nnz", NULL, -1) == A->nnz;
        } else {
            ok = kd_rpc_status(&r, &m) == 0;
        }
        double ms = kd_clock_ms() - t0;
        if (!ok) {
            if (res->failures++ == 0)
                snprintf(res->first_failure, sizeof(res->first_failure),
                         "request %llu (kind %d): kind %d %s %s", (unsigned long long)msgid, kind,
                         m.kind, m.code, m.message);
        }
        kd_rpc_msg_free(&m);
        lat[res->requests++] = ms;
        if (ms > res->max_ms)
            res->max_ms = ms;
        msgid++;
        kd_rpc_sleep_ms(5);
    }
    qsort(lat, (size_t)res->requests, sizeof(double), cmp_double);
    if (res->requests > 0)
        res->p99_ms = lat[(size_t)((res->requests - 1) * 0.99)];
    free(lat);
    free(x);
    free(y);
    free(ref);
    kd_rpc_close(&r);
    return NULL;
}

/* ---- slow senders ------------------------------------------------------------------------ */

typedef struct slow_result {
    int closed;         /* the server closed the connection */
    uint64_t closed_ms; /* after the first byte */
    size_t sent;        /* bytes sent before that */
    size_t total;
} slow_result_t;

typedef struct slow_arg {
    kd_rpc_t conn;
    const char *bytes;
    size_t len;
    int every_ms;
    slow_result_t res;
} slow_arg_t;

static void *slow_sender(void *arg)
{
    slow_arg_t *s = arg;
    s->res.total = s->len;
    double t0 = kd_clock_ms();
    for (size_t i = 0; i < s->len; i++) {
        if (kd_rpc_send_raw(&s->conn, s->bytes + i, 1) != 0)
            break;
        s->res.sent++;
        kd_rpc_msg_t m;
        int kind = kd_rpc_read(&s->conn, s->every_ms, &m);
        kd_rpc_msg_free(&m);
        if (kind == KD_RPC_CLOSED) {
            s->res.closed = 1;
            break;
        }
        if (kd_clock_ms() - t0 > 30000)
            break;
    }
    s->res.closed_ms = (uint64_t)(kd_clock_ms() - t0);
    kd_rpc_close(&s->conn);
    return NULL;
}

/* ---- a client that never reads ----------------------------------------------------------- */

typedef struct deaf_result {
    size_t requests_sent;
    int saw_paused;
    int closed; /* eventually closed by the server */
} deaf_result_t;

static void *deaf_client(void *arg)
{
    deaf_result_t *res = arg;
    kd_rpc_t r, probe;
    if (kd_rpc_connect(&r, d.port) != 0 || kd_rpc_connect(&probe, d.port) != 0)
        return NULL;
    int small = 4096;
    setsockopt(r.fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) | O_NONBLOCK);
    double *x = calloc((size_t)Big->cols, sizeof(double));
    kd_writer_t w;
    kd_rpc_write_spmv(&w, 1, bigid, x, Big->cols, 0);
    size_t len;
    char *req = kd_writer_release(&w, &len);
    double t0 = kd_clock_ms(), last_sent = t0;
    size_t off = 0;
    /* Send for up to 4 s, or until the server has stopped taking requests for a second. */
    while (kd_clock_ms() - t0 < 4000 && kd_clock_ms() - last_sent < 1000) {
        ssize_t n = send(r.fd, req + off, len - off, MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            last_sent = kd_clock_ms();
            if (off == len) {
                off = 0;
                res->requests_sent++;
            }
        } else {
            kd_rpc_sleep_ms(5);
        }
        if (res->requests_sent % 16 == 0 && !res->saw_paused) {
            kd_rpc_msg_t m;
            if (kd_rpc_status(&probe, &m) == 0)
                res->saw_paused = kd_rpc_int(m.result, "connection_stats", "paused", 0) > 0;
            kd_rpc_msg_free(&m);
        }
    }
    for (int i = 0; i < 40 && !res->saw_paused; i++) {
        kd_rpc_msg_t m;
        if (kd_rpc_status(&probe, &m) == 0)
            res->saw_paused = kd_rpc_int(m.result, "connection_stats", "paused", 0) > 0;
        kd_rpc_msg_free(&m);
        kd_rpc_sleep_ms(50);
    }
    /* Stay silent: the idle timeout must close it. Then drain what was sent to see the end. */
    kd_rpc_close(&probe);
    kd_rpc_sleep_ms(IDLE_TIMEOUT_MS + 2500);
    fcntl(r.fd, F_SETFL, fcntl(r.fd, F_GETFL) & ~O_NONBLOCK);
    struct timeval tv = {10, 0};
    setsockopt(r.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buf[65536];
    for (;;) {
        ssize_t n = recv(r.fd, buf, sizeof(buf), 0);
        if (n <= 0) {
            res->closed = n == 0 || errno == ECONNRESET;
            break;
        }
    }
    free(req);
    free(x);
    kd_rpc_close(&r);
    return NULL;
}

/* ---- the flood --------------------------------------------------------------------------- */

typedef struct flood_result {
    int attempted, connected, busy, other;
} flood_result_t;

static void *flood(void *arg)
{
    flood_result_t *res = arg;
    static kd_rpc_t conns[200];
    int n = 0;
    for (int i = 0; i < 200; i++) {
        res->attempted++;
        if (kd_rpc_connect(&conns[n], d.port) == 0) {
            n++;
            res->connected++;
        }
    }
    kd_rpc_sleep_ms(1000); /* the answers arrive meanwhile; then look at each at once */
    for (int i = 0; i < n; i++) {
        kd_rpc_msg_t m;
        int kind = kd_rpc_read(&conns[i], 0, &m);
        if (kind == KD_RPC_RESPONSE && m.msgid == 0 && strcmp(m.code, "BUSY") == 0)
            res->busy++;
        else if (kind != KD_RPC_TIMEOUT)
            res->other++;
        kd_rpc_msg_free(&m);
    }
    kd_rpc_sleep_ms(500);
    for (int i = 0; i < n; i++)
        kd_rpc_close(&conns[i]);
    return NULL;
}

/* ---- oversized lengths and random bytes -------------------------------------------------- */

typedef struct junk_result {
    int too_large, too_large_wrong, busy, closes, errors, hangs;
} junk_result_t;

static void *oversized(void *arg)
{
    junk_result_t *res = arg;
    /* [0, 77, "matrix.put", [{"mtx": <huge>}]] with the huge thing's header only */
    static const unsigned char heads[][6] = {
        {0xc6, 0xff, 0xff, 0xff, 0xf0, 0}, /* bin32 */
        {0xdb, 0x7f, 0xff, 0xff, 0xff, 0}, /* str32 */
        {0xdd, 0x10, 0x00, 0x00, 0x00, 0}, /* array32 of 268M */
        {0xdf, 0x08, 0x00, 0x00, 0x00, 0}, /* map32 */
    };
    double t0 = kd_clock_ms();
    for (int round = 0; res->too_large < 8 && kd_clock_ms() - t0 < 30000; round++) {
        kd_rpc_t r;
        if (kd_rpc_connect(&r, d.port) != 0)
            continue;
        unsigned char msg[64];
        size_t n = kd_rpc_put_mtx_prefix(msg, 77);
        memcpy(msg + n, heads[round % 4], 5);
        n += 5;
        kd_rpc_send_raw(&r, msg, n);
        kd_rpc_msg_t m;
        int kind = kd_rpc_read(&r, 10000, &m);
        if (kind == KD_RPC_RESPONSE && m.msgid == 77 && strcmp(m.code, "TOO_LARGE") == 0)
            res->too_large++;
        else if (kind == KD_RPC_RESPONSE && strcmp(m.code, "BUSY") == 0)
            res->busy++; /* the flood holds every connection: try again */
        else
            res->too_large_wrong++;
        kd_rpc_msg_free(&m);
        kd_rpc_close(&r);
        kd_rpc_sleep_ms(50);
    }
    return NULL;
}

static void *random_bytes(void *arg)
{
    junk_result_t *res = arg;
    uint64_t state = 0x9e3779b97f4a7c15ull ^ (uint64_t)kd_clock_ms();
    for (int round = 0; round < 40; round++) {
        kd_rpc_t r;
        if (kd_rpc_connect(&r, d.port) != 0)
            continue;
        unsigned char buf[2048];
        for (size_t i = 0; i < sizeof(buf); i++) {
            state ^= state << 13, state ^= state >> 7, state ^= state << 17;
            buf[i] = (unsigned char)state;
        }
        kd_rpc_send_raw(&r, buf, 64 + (size_t)(state % (sizeof(buf) - 64)));
        shutdown(r.fd, SHUT_WR);
        /* read until the server closes: every answer must come, then the close */
        for (;;) {
            kd_rpc_msg_t m;
            int kind = kd_rpc_read(&r, 15000, &m);
            kd_rpc_msg_free(&m);
            if (kind == KD_RPC_RESPONSE)
                res->errors++;
            else if (kind == KD_RPC_CLOSED || kind == KD_RPC_GARBAGE) {
                res->closes++;
                break;
            } else if (kind == KD_RPC_TIMEOUT) {
                res->hangs++;
                break;
            }
        }
        kd_rpc_close(&r);
    }
    return NULL;
}

static void test_hostile_clients_in_parallel(void)
{
    good_result_t good = {0};
    pthread_t tg;
    REQUIRE(pthread_create(&tg, NULL, good_client, &good) == 0);
    kd_rpc_sleep_ms(300);

    /* slow senders connect before the flood so that their slots exist */
    kd_writer_t w;
    kd_rpc_begin(&w, 5, "matrix.info", 1);
    kd_w_kv_str(&w, "id", aid);
    size_t len;
    char *info_req = kd_writer_release(&w, &len);
    static const char lone_header[] = {(char)0x94, 0x00, 0x06, (char)0xab, 'm', 'a', 't', 'r',
                                       'i',        'x',  '.',  'i',        'n', 'f', 'o'};
    slow_arg_t slow1 = {.bytes = info_req, .len = len, .every_ms = 300};
    slow_arg_t slow2 = {.bytes = lone_header, .len = sizeof(lone_header), .every_ms = 1000};
    REQUIRE(kd_rpc_connect(&slow1.conn, d.port) == 0);
    REQUIRE(kd_rpc_connect(&slow2.conn, d.port) == 0);
    deaf_result_t deaf = {0};
    flood_result_t fl = {0};
    junk_result_t big = {0}, rnd = {0};
    pthread_t t1, t2, t3, t4, t5, t6;
    REQUIRE(pthread_create(&t1, NULL, slow_sender, &slow1) == 0);
    REQUIRE(pthread_create(&t2, NULL, slow_sender, &slow2) == 0);
    REQUIRE(pthread_create(&t3, NULL, deaf_client, &deaf) == 0);
    kd_rpc_sleep_ms(500);
    REQUIRE(pthread_create(&t4, NULL, flood, &fl) == 0);
    REQUIRE(pthread_create(&t5, NULL, oversized, &big) == 0);
    REQUIRE(pthread_create(&t6, NULL, random_bytes, &rnd) == 0);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    pthread_join(t4, NULL);
    pthread_join(t5, NULL);
    pthread_join(t6, NULL);
    atomic_store(&stop_good, 1);
    pthread_join(tg, NULL);
    free(info_req);

    fprintf(stderr,
            "   good client: %d requests, %d failures, p99 %.0f ms, max %.0f ms\n"
            "   slow senders: closed after %llu ms (%zu/%zu bytes) and %llu ms (%zu/%zu bytes)\n"
            "   deaf client: %zu requests sent, paused seen %d, closed %d\n"
            "   flood: %d/%d connected, %d BUSY, %d other\n"
            "   oversized: %d TOO_LARGE, %d BUSY, %d wrong; random: %d answers, %d closes, "
            "%d hangs\n",
            good.requests, good.failures, good.p99_ms, good.max_ms,
            (unsigned long long)slow1.res.closed_ms, slow1.res.sent, slow1.res.total,
            (unsigned long long)slow2.res.closed_ms, slow2.res.sent, slow2.res.total,
            deaf.requests_sent, deaf.saw_paused, deaf.closed, fl.connected, fl.attempted, fl.busy,
            fl.other, big.too_large, big.busy, big.too_large_wrong, rnd.errors, rnd.closes,
            rnd.hangs);

    CHECK_MSG(good.failures == 0, "%d failures, first: %s", good.failures, good.first_failure);
    CHECK(good.requests >= 50);
    CHECK_MSG(good.max_ms < LATENCY_BOUND_MS, "max latency %.0f ms", good.max_ms);

    CHECK(slow1.res.closed && slow1.res.sent < slow1.res.total);
    CHECK(slow2.res.closed && slow2.res.sent < slow2.res.total);
    CHECK(slow1.res.closed_ms >= MESSAGE_TIMEOUT_MS - 500 &&
          slow1.res.closed_ms < MESSAGE_TIMEOUT_MS + 5000);
    CHECK(slow2.res.closed_ms >= MESSAGE_TIMEOUT_MS - 500 &&
          slow2.res.closed_ms < MESSAGE_TIMEOUT_MS + 5000);

    CHECK(deaf.requests_sent >= 10);
    CHECK(deaf.saw_paused);
    CHECK(deaf.closed);

    CHECK_EQ_INT(fl.attempted, 200);
    CHECK_MSG(fl.busy >= 200 - MAX_CONNECTIONS, "only %d BUSY", fl.busy);
    CHECK_EQ_INT(fl.other, 0);

    CHECK_EQ_INT(big.too_large, 8);
    CHECK_EQ_INT(big.too_large_wrong, 0);
    CHECK_EQ_INT(rnd.hangs, 0);
    CHECK(rnd.closes >= 30);

    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_status(&r, &m) == 0);
    CHECK(kd_rpc_int(m.result, "connection_stats", "closed_slow", 0) >= 2);
    CHECK(kd_rpc_int(m.result, "connection_stats", "closed_idle", 0) >= 1);
    CHECK(kd_rpc_int(m.result, "connection_stats", "refused", 0) >= 200 - MAX_CONNECTIONS);
    CHECK(kd_rpc_int(m.result, "errors_by_code", "TOO_LARGE", 0) >= big.too_large);
    CHECK(kd_rpc_int(m.result, "connections", NULL, 99) <= 3);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
}

int main(void)
{
    kd_test_seed();
    char maxc[16], slow[16], idle[16];
    snprintf(maxc, sizeof(maxc), "%d", MAX_CONNECTIONS);
    snprintf(slow, sizeof(slow), "%d", MESSAGE_TIMEOUT_MS);
    snprintf(idle, sizeof(idle), "%d", IDLE_TIMEOUT_MS);
    const char *extra[] = {"--max-connections",
                           maxc,
                           "--message-timeout-ms",
                           slow,
                           "--idle-timeout-ms",
                           idle,
                           "--max-pending-write",
                           "256K",
                           "--max-message",
                           "4M",
                           "--log-level",
                           "error",
                           NULL};
    if (kd_daemon_start(&d, extra) != 0)
        return 1;
    char path[512];
    snprintf(path, sizeof(path), "%s/494_bus.mtx", KD_TEST_MATRICES);
    A = kd_matgen_by_name(path, KD_DTYPE_F64);
    Big = kd_matgen_laplacian_2d(100, 100, KD_DTYPE_F64);
    kd_rpc_t r;
    kd_rpc_msg_t m;
    if (A == NULL || Big == NULL || kd_rpc_connect(&r, d.port) != 0 ||
        kd_rpc_put(&r, 1, A, NULL, -1, aid, &m) != 0)
        return 1;
    kd_rpc_msg_free(&m);
    if (kd_rpc_put(&r, 2, Big, NULL, -1, bigid, &m) != 0)
        return 1;
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    RUN(test_hostile_clients_in_parallel);
    kd_csr_free(A);
    kd_csr_free(Big);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    return kd_test_finish();
}
