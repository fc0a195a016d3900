/*
 * The life of a request in a real krylovd: job.cancel stops a running solve (CANCELLED) and takes
 * a queued request out of the queue at once; a queued request whose timeout_ms passes gets
 * TIMEOUT from the loop while the device is still busy, and a running solve stops at its
 * deadline; a client that disconnects has its running and queued requests cancelled, so the
 * device is free again; a full queue and a client over its in-flight limit get BUSY at once; and
 * SIGTERM answers what is queued CANCELLED at once, lets the running solve finish within the grace
 * period (or cancels it when the grace runs out) and exits 0. Every request is answered exactly
 * once; spmv requests are served beside a running solve instead of waiting for it. A "blocker"
 * is a CG solve with rtol = 0 that would run for hours.
 */
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_test.h"

static kd_daemon_t d;
static kd_csr_t *L; /* 2-D Laplacian: slow enough to iterate on */
static kd_csr_t *S; /* small: quick spmv */
static char lid[33], sid[33];
static double *lb, *sx;

static void write_solve(kd_writer_t *w, uint64_t msgid, int64_t maxiter, int64_t timeout_ms)
{
    kd_rpc_begin(w, msgid, "solve", 5 + (timeout_ms > 0));
    kd_w_kv_str(w, "id", lid);
    kd_w_kv_bin(w, "b", lb, (size_t)L->rows * 8);
    kd_w_kv_double(w, "rtol", 0.0);
    kd_w_kv_int(w, "maxiter", maxiter);
    kd_w_kv_int(w, "check_every", 1);
    if (timeout_ms > 0)
        kd_w_kv_int(w, "timeout_ms", timeout_ms);
}

static void send_blocker(kd_rpc_t *r, uint64_t msgid)
{
    kd_writer_t w;
    write_solve(&w, msgid, 1000000000, 0);
    kd_rpc_send(r, &w);
}

static void send_spmv(kd_rpc_t *r, uint64_t msgid, int64_t timeout_ms)
{
    kd_writer_t w;
    kd_rpc_write_spmv(&w, msgid, sid, sx, S->cols, timeout_ms);
    kd_rpc_send(r, &w);
}

/* A request that waits in the queue behind a running solve: a solve (spmv requests are served
 * beside a running solve, at its checks). */
static void send_queued(kd_rpc_t *r, uint64_t msgid, int64_t timeout_ms)
{
    kd_writer_t w;
    kd_rpc_begin(&w, msgid, "solve", 2 + (timeout_ms > 0));
    kd_w_kv_str(&w, "id", sid);
    kd_w_kv_bin(&w, "b", sx, (size_t)S->rows * 8);
    if (timeout_ms > 0)
        kd_w_kv_int(&w, "timeout_ms", timeout_ms);
    kd_rpc_send(r, &w);
}

static void send_cancel(kd_rpc_t *r, uint64_t msgid, uint64_t target)
{
    kd_writer_t w;
    kd_rpc_begin(&w, msgid, "job.cancel", 1);
    kd_w_kv_uint(&w, "msgid", target);
    kd_rpc_send(r, &w);
}

/* Wait until the server says a job is running (so what comes next queues behind it). */
static void wait_running(kd_rpc_t *probe, int64_t jobs)
{
    for (int i = 0; i < 1500; i++) { /* 30 s: generous for a loaded machine */
        kd_rpc_msg_t m;
        if (kd_rpc_status(probe, &m) == 0 &&
            kd_rpc_int(m.result, "jobs_in_flight", NULL, -1) >= jobs &&
            kd_rpc_int(m.result, "queue_depth", NULL, -1) == jobs - 1) {
            kd_rpc_msg_free(&m);
            return;
        }
        kd_rpc_msg_free(&m);
        kd_rpc_sleep_ms(20);
    }
    CHECK_MSG(0, "the server never showed %lld job(s) in flight", (long long)jobs);
}

/* Nothing more arrives on r for ms milliseconds (no duplicate answers). */
static void expect_silence(kd_rpc_t *r, int ms)
{
    kd_rpc_msg_t m;
    int kind = kd_rpc_read(r, ms, &m);
    CHECK_MSG(kind == KD_RPC_TIMEOUT, "unexpected message kind %d msgid %llu", kind,
              (unsigned long long)m.msgid);
    kd_rpc_msg_free(&m);
}

/* The next response on r: msgid and code ("" for success). */
static void expect_response(kd_rpc_t *r, uint64_t msgid, const char *code, int timeout_ms)
{
    kd_rpc_msg_t m;
    int kind = kd_rpc_read(r, timeout_ms, &m);
    CHECK_MSG(kind == KD_RPC_RESPONSE, "kind %d waiting for msgid %llu", kind,
              (unsigned long long)msgid);
    if (kind == KD_RPC_RESPONSE) {
        CHECK_MSG(m.msgid == msgid, "msgid %llu, expected %llu", (unsigned long long)m.msgid,
                  (unsigned long long)msgid);
        CHECK_MSG(strcmp(m.code, code) == 0, "msgid %llu: code '%s' (%s), expected '%s'",
                  (unsigned long long)msgid, m.code, m.message, code);
    }
    kd_rpc_msg_free(&m);
}

static int64_t status_int(const char *k1, const char *k2)
{
    kd_rpc_t r;
    if (kd_rpc_connect(&r, d.port) != 0)
        return -1;
    kd_rpc_msg_t m;
    int64_t v = kd_rpc_status(&r, &m) == 0 ? kd_rpc_int(m.result, k1, k2, 0) : -1;
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    return v;
}

static void wait_idle(void)
{
    for (int i = 0; i < 500 && status_int("jobs_in_flight", NULL) != 0; i++)
        kd_rpc_sleep_ms(20);
    CHECK_EQ_INT(status_int("jobs_in_flight", NULL), 0);
}

static void test_cancel_running(void)
{
    kd_rpc_t a, probe;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0 && kd_rpc_connect(&probe, d.port) == 0);
    send_blocker(&a, 1);
    wait_running(&probe, 1);
    double t0 = kd_clock_ms();
    send_cancel(&a, 2, 1);
    expect_response(&a, 2, "", 10000);
    expect_response(&a, 1, "CANCELLED", 30000);
    CHECK(kd_clock_ms() - t0 < 30000);
    expect_silence(&a, 300);
    /* cancelling it again, or something never sent: NOT_FOUND */
    send_cancel(&a, 3, 1);
    expect_response(&a, 3, "NOT_FOUND", 10000);
    kd_rpc_close(&a);
    kd_rpc_close(&probe);
    wait_idle();
}

static void test_cancel_queued(void)
{
    kd_rpc_t a, b, probe;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0 && kd_rpc_connect(&b, d.port) == 0 &&
            kd_rpc_connect(&probe, d.port) == 0);
    send_blocker(&a, 1);
    wait_running(&probe, 1);
    send_queued(&b, 5, 0);
    wait_running(&probe, 2);
    double t0 = kd_clock_ms();
    send_cancel(&b, 6, 5);
    expect_response(&b, 6, "", 10000);
    expect_response(&b, 5, "CANCELLED", 10000);
    /* answered by the loop: the blocker is still running */
    kd_rpc_msg_t m;
    CHECK_EQ_INT(kd_rpc_read(&a, 0, &m), KD_RPC_TIMEOUT);
    kd_rpc_msg_free(&m);
    CHECK(kd_clock_ms() - t0 < 10000);
    CHECK_EQ_INT(status_int("queue_depth", NULL), 0);
    send_cancel(&a, 2, 1);
    expect_response(&a, 2, "", 10000);
    expect_response(&a, 1, "CANCELLED", 30000);
    expect_silence(&b, 200);
    expect_silence(&a, 200);
    kd_rpc_close(&a);
    kd_rpc_close(&b);
    kd_rpc_close(&probe);
    wait_idle();
}

static void test_timeout_while_queued(void)
{
    int64_t before = status_int("connection_stats", "timeouts_in_queue");
    kd_rpc_t a, b, probe;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0 && kd_rpc_connect(&b, d.port) == 0 &&
            kd_rpc_connect(&probe, d.port) == 0);
    send_blocker(&a, 1);
    wait_running(&probe, 1);
    double t0 = kd_clock_ms();
    send_queued(&b, 7, 300);
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_read(&b, 20000, &m) == KD_RPC_RESPONSE);
    uint64_t took = (uint64_t)(kd_clock_ms() - t0);
    CHECK_EQ_INT(m.msgid, 7);
    CHECK_MSG(strcmp(m.code, "TIMEOUT") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "waited");
    kd_rpc_msg_free(&m);
    CHECK_MSG(took >= 250 && took < 10000, "TIMEOUT after %llu ms", (unsigned long long)took);
    CHECK_EQ_INT(kd_rpc_read(&a, 0, &m), KD_RPC_TIMEOUT); /* the blocker still runs */
    kd_rpc_msg_free(&m);
    CHECK_EQ_INT(status_int("connection_stats", "timeouts_in_queue"), before + 1);
    CHECK(status_int("errors_by_code", "TIMEOUT") >= 1);
    send_cancel(&a, 2, 1);
    expect_response(&a, 2, "", 10000);
    expect_response(&a, 1, "CANCELLED", 30000);
    expect_silence(&b, 200);
    kd_rpc_close(&a);
    kd_rpc_close(&b);
    kd_rpc_close(&probe);
    wait_idle();
}

static void test_timeout_while_running(void)
{
    kd_rpc_t a;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0);
    kd_writer_t w;
    write_solve(&w, 9, 1000000000, 500);
    double t0 = kd_clock_ms();
    kd_rpc_send(&a, &w);
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_read(&a, 30000, &m) == KD_RPC_RESPONSE);
    uint64_t took = (uint64_t)(kd_clock_ms() - t0);
    CHECK_MSG(strcmp(m.code, "TIMEOUT") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "deadline");
    kd_rpc_msg_free(&m);
    CHECK_MSG(took >= 450 && took < 20000, "TIMEOUT after %llu ms", (unsigned long long)took);
    kd_rpc_close(&a);
    wait_idle();
}

static void test_disconnect_cancels_its_jobs(void)
{
    int64_t cancelled = status_int("errors_by_code", "CANCELLED");
    kd_rpc_t a, probe;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0 && kd_rpc_connect(&probe, d.port) == 0);
    send_blocker(&a, 1);
    wait_running(&probe, 1);
    send_blocker(&a, 2);
    send_blocker(&a, 3);
    wait_running(&probe, 3);
    kd_rpc_close(&a); /* gone with one running and two queued */
    double t0 = kd_clock_ms();
    wait_idle();
    CHECK(kd_clock_ms() - t0 < 20000);
    CHECK_EQ_INT(status_int("queue_depth", NULL), 0);
    CHECK_EQ_INT(status_int("errors_by_code", "CANCELLED"), cancelled + 3);
    /* the device is free: a new request runs at once */
    send_spmv(&probe, 4, 0);
    expect_response(&probe, 4, "", 10000);
    kd_rpc_close(&probe);
}

/* spmv requests sent while a solve runs are answered while it still runs (served at its checks,
 * on the express queue), each with its own right answer; the solve goes on. */
static void test_spmv_beside_solve(void)
{
    int64_t before = status_int("spmv", "beside_solve");
    kd_rpc_t a, b, probe;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0 && kd_rpc_connect(&b, d.port) == 0 &&
            kd_rpc_connect(&probe, d.port) == 0);
    send_blocker(&a, 1);
    wait_running(&probe, 1);
    enum { N = 3 }; /* the queue holds 3 */
    double *x = malloc((size_t)N * (size_t)S->cols * 8), *y = malloc((size_t)S->rows * 8),
           *want = malloc((size_t)S->rows * 8);
    REQUIRE(x != NULL && y != NULL && want != NULL);
    for (int64_t i = 0; i < N * S->cols; i++)
        x[i] = kd_test_rand_double(-1, 1);
    for (int k = 0; k < N; k++) { /* pipelined: several wait together, served as one group */
        kd_writer_t w;
        kd_rpc_write_spmv(&w, 30 + (uint64_t)k, sid, x + (size_t)k * (size_t)S->cols, S->cols, 0);
        kd_rpc_send(&b, &w);
    }
    for (int k = 0; k < N; k++) {
        kd_rpc_msg_t m;
        REQUIRE(kd_rpc_read(&b, 20000, &m) == KD_RPC_RESPONSE);
        CHECK_MSG(m.code[0] == '\0', "%s %s", m.code, m.message);
        int j = (int)m.msgid - 30;
        REQUIRE(j >= 0 && j < N);
        for (int64_t i = 0; i < S->rows; i++)
            y[i] = NAN;
        CHECK(kd_rpc_vector(m.result, "y", y, S->rows) == 0);
        kd_csr_spmv_ref(S, x + (size_t)j * (size_t)S->cols, 1.0, 0.0, want);
        double worst = 0;
        for (int64_t i = 0; i < S->rows; i++)
            worst = fmax(worst, fabs(y[i] - want[i]));
        CHECK_MSG(worst <= 1e-12, "spmv %d: max error %g", j, worst);
        kd_rpc_msg_free(&m);
    }
    kd_rpc_msg_t m;
    CHECK_EQ_INT(kd_rpc_read(&a, 0, &m), KD_RPC_TIMEOUT); /* the solve still runs */
    kd_rpc_msg_free(&m);
    CHECK_EQ_INT(status_int("spmv", "beside_solve"), before + N);
    send_cancel(&a, 2, 1);
    expect_response(&a, 2, "", 10000);
    expect_response(&a, 1, "CANCELLED", 30000);
    free(x);
    free(y);
    free(want);
    kd_rpc_close(&a);
    kd_rpc_close(&b);
    kd_rpc_close(&probe);
    wait_idle();
}

static void test_busy(void)
{
    /* --queue-depth 3 --max-jobs-per-connection 4 */
    kd_rpc_t a, b, probe;
    REQUIRE(kd_rpc_connect(&a, d.port) == 0 && kd_rpc_connect(&b, d.port) == 0 &&
            kd_rpc_connect(&probe, d.port) == 0);
    send_blocker(&a, 1);
    wait_running(&probe, 1);
    for (uint64_t id = 10; id < 13; id++)
        send_queued(&a, id, 0); /* three queued: the queue is full */
    wait_running(&probe, 4);
    send_queued(&a, 13, 0); /* a fifth in flight for this connection */
    expect_response(&a, 13, "BUSY", 10000);
    send_queued(&b, 20, 0); /* the queue is full */
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_read(&b, 10000, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(m.msgid, 20);
    CHECK(strcmp(m.code, "BUSY") == 0);
    CHECK_STR_CONTAINS(m.message, "limit 3");
    kd_rpc_msg_free(&m);
    send_cancel(&a, 2, 1);
    /* the cancel's result, the blocker's CANCELLED and the three spmv results, once each */
    int seen[32] = {0};
    for (int i = 0; i < 5; i++) {
        int kind = kd_rpc_read(&a, 30000, &m);
        CHECK_EQ_INT(kind, KD_RPC_RESPONSE);
        if (kind == KD_RPC_RESPONSE && m.msgid < 32) {
            seen[m.msgid]++;
            if (m.msgid == 1)
                CHECK(strcmp(m.code, "CANCELLED") == 0);
            else
                CHECK_MSG(m.error == NULL, "msgid %llu: %s", (unsigned long long)m.msgid, m.code);
        }
        kd_rpc_msg_free(&m);
    }
    CHECK(seen[1] == 1 && seen[2] == 1 && seen[10] == 1 && seen[11] == 1 && seen[12] == 1);
    expect_silence(&a, 300);
    kd_rpc_close(&a);
    kd_rpc_close(&b);
    kd_rpc_close(&probe);
    wait_idle();
}

static void test_sigterm_cancels_after_grace(void)
{
    kd_daemon_t d2;
    const char *extra[] = {"--shutdown-grace-ms", "3000", NULL};
    REQUIRE(kd_daemon_start(&d2, extra) == 0);
    kd_rpc_t a, b, c;
    REQUIRE(kd_rpc_connect(&a, d2.port) == 0 && kd_rpc_connect(&b, d2.port) == 0 &&
            kd_rpc_connect(&c, d2.port) == 0);
    char id[33];
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_put(&a, 100, L, NULL, -1, id, &m) == 0);
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_put(&a, 101, S, NULL, -1, id, &m) == 0);
    kd_rpc_msg_free(&m);
    send_blocker(&a, 1);
    int running = 0;
    for (int i = 0; i < 300 && !running; i++) {
        REQUIRE(kd_rpc_status(&c, &m) == 0);
        running = kd_rpc_int(m.result, "jobs_in_flight", NULL, 0) == 1;
        kd_rpc_msg_free(&m);
        kd_rpc_sleep_ms(20);
    }
    send_queued(&b, 2, 0);
    kd_rpc_sleep_ms(200);
    double t0 = kd_clock_ms();
    REQUIRE(kd_daemon_send(&d2, SIGTERM) == 0);
    /* queued: CANCELLED at once */
    REQUIRE(kd_rpc_read(&b, 20000, &m) == KD_RPC_RESPONSE);
    uint64_t queued_ms = (uint64_t)(kd_clock_ms() - t0);
    CHECK_EQ_INT(m.msgid, 2);
    CHECK(strcmp(m.code, "CANCELLED") == 0);
    CHECK_STR_CONTAINS(m.message, "shutting down");
    kd_rpc_msg_free(&m);
    CHECK_MSG(queued_ms < 2500, "queued request answered after %llu ms",
              (unsigned long long)queued_ms);
    /* new requests during the grace period: CANCELLED; status still answers */
    send_spmv(&c, 3, 0);
    expect_response(&c, 3, "CANCELLED", 10000);
    REQUIRE(kd_rpc_status(&c, &m) == 0);
    kd_rpc_msg_free(&m);
    /* the running solve: cancelled when the grace period ends */
    REQUIRE(kd_rpc_read(&a, 60000, &m) == KD_RPC_RESPONSE);
    uint64_t running_ms = (uint64_t)(kd_clock_ms() - t0);
    CHECK_EQ_INT(m.msgid, 1);
    CHECK(strcmp(m.code, "CANCELLED") == 0);
    kd_rpc_msg_free(&m);
    CHECK_MSG(running_ms >= 2900 && running_ms < 60000, "running job ended after %llu ms",
              (unsigned long long)running_ms);
    int status;
    waitpid(d2.pid, &status, 0);
    d2.pid = 0;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    kd_rpc_close(&a);
    kd_rpc_close(&b);
    kd_rpc_close(&c);
    kd_daemon_cleanup(&d2);
}

static void test_sigterm_lets_running_finish(void)
{
    kd_daemon_t d2;
    const char *extra[] = {"--shutdown-grace-ms", "120000", NULL};
    REQUIRE(kd_daemon_start(&d2, extra) == 0);
    kd_rpc_t a;
    REQUIRE(kd_rpc_connect(&a, d2.port) == 0);
    char id[33];
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_put(&a, 100, L, NULL, -1, id, &m) == 0);
    kd_rpc_msg_free(&m);
    kd_writer_t w;
    write_solve(&w, 1, 300, 0); /* a few hundred iterations: well under a minute */
    kd_rpc_send(&a, &w);
    kd_rpc_sleep_ms(100);
    double t0 = kd_clock_ms();
    REQUIRE(kd_daemon_send(&d2, SIGTERM) == 0);
    REQUIRE(kd_rpc_read(&a, 120000, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(m.msgid, 1);
    CHECK_MSG(m.error == NULL, "%s %s", m.code, m.message);
    CHECK_EQ_INT(kd_rpc_int(m.result, "iterations", NULL, -1), 300);
    kd_rpc_msg_free(&m);
    int status;
    waitpid(d2.pid, &status, 0);
    d2.pid = 0;
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_MSG(kd_clock_ms() - t0 < 100000, "exit took %llu ms",
              (unsigned long long)(kd_clock_ms() - t0)); /* not the whole grace period */
    CHECK_EQ_INT(kd_rpc_read(&a, 5000, &m), KD_RPC_CLOSED);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&a);
    kd_daemon_cleanup(&d2);
}

int main(void)
{
    kd_test_seed();
    const char *extra[] = {"--queue-depth", "3", "--max-jobs-per-connection", "4", NULL};
    if (kd_daemon_start(&d, extra) != 0)
        return 1;
    L = kd_matgen_laplacian_2d(200, 200, KD_DTYPE_F64);
    S = kd_matgen_laplacian_2d(10, 10, KD_DTYPE_F64);
    lb = malloc((size_t)L->rows * 8);
    for (int64_t i = 0; i < L->rows; i++)
        lb[i] = kd_test_rand_double(-1, 1);
    sx = malloc((size_t)S->cols * 8);
    for (int64_t i = 0; i < S->cols; i++)
        sx[i] = 1.0;
    kd_rpc_t r;
    if (kd_rpc_connect(&r, d.port) != 0)
        return 1;
    kd_rpc_msg_t m;
    if (kd_rpc_put(&r, 1, L, "L", -1, lid, &m) != 0 || (kd_rpc_msg_free(&m), 0) ||
        kd_rpc_put(&r, 2, S, "S", -1, sid, &m) != 0) {
        fprintf(stderr, "put failed: %s %s\n", m.code, m.message);
        return 1;
    }
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    RUN(test_cancel_running);
    RUN(test_cancel_queued);
    RUN(test_timeout_while_queued);
    RUN(test_timeout_while_running);
    RUN(test_disconnect_cancels_its_jobs);
    RUN(test_spmv_beside_solve);
    RUN(test_busy);
    RUN(test_sigterm_cancels_after_grace);
    RUN(test_sigterm_lets_running_finish);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    kd_csr_free(L);
    kd_csr_free(S);
    free(lb);
    free(sx);
    return kd_test_finish();
}
