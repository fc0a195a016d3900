/*
 * Many clients at once against one real krylovd: 16 concurrent connections, each pipelining 60
 * mixed requests (SpMV, small CG solves, matrix.info) two at a time against three matrices. Every
 * answer must be right (SpMV against a CPU reference, solves by their true residual, info by its
 * fields), and every request answered exactly once: none lost, none duplicated, none an error.
 * The server's request counters must add up. The full-size run (64 clients x 200 requests) with
 * its throughput and latency figures is bench/service/load.c (docs/BENCHMARKS.md, "Service").
 */
#include "bench/service/loadgen.h"
#include "bench/matgen/matgen.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_test.h"

static kd_daemon_t d;

static void test_concurrent_mixed_load(void)
{
    kd_load_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.port = d.port;
    cfg.clients = 16;
    cfg.requests = 60;
    cfg.window = 2;
    cfg.spmv_percent = 60;
    cfg.solve_percent = 20;
    cfg.seed = kd_test_rand_u64();
    cfg.answer_timeout_ms = 120000;
    kd_csr_t *m[3] = {kd_matgen_laplacian_2d(32, 32, KD_DTYPE_F64),
                      kd_matgen_laplacian_3d(10, KD_DTYPE_F64),
                      kd_matgen_laplacian_2d(64, 16, KD_DTYPE_F64)};
    cfg.nmatrices = 3;
    for (int i = 0; i < 3; i++)
        cfg.matrices[i] = m[i];
    REQUIRE(kd_load_put_matrices(&cfg) == 0);
    kd_load_report_t rep;
    REQUIRE(kd_load_run(&cfg, &rep) == 0);
    kd_load_print(&cfg, &rep);
    uint64_t total = (uint64_t)cfg.clients * (uint64_t)cfg.requests;
    CHECK_EQ_INT(rep.sent, total);
    CHECK_EQ_INT(rep.answered, total);
    CHECK_EQ_INT(rep.correct, total);
    CHECK_EQ_INT(rep.wrong, 0);
    CHECK_EQ_INT(rep.errors, 0);
    CHECK_EQ_INT(rep.lost, 0);
    CHECK_EQ_INT(rep.duplicated, 0);
    CHECK_EQ_INT(rep.unexpected, 0);
    CHECK(rep.by_kind[0] > 0 && rep.by_kind[1] > 0 && rep.by_kind[2] > 0);

    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    kd_rpc_msg_t s;
    REQUIRE(kd_rpc_status(&r, &s) == 0);
    CHECK_EQ_INT(kd_rpc_int(s.result, "requests_by_method", "spmv", -1), rep.by_kind[0]);
    CHECK_EQ_INT(kd_rpc_int(s.result, "requests_by_method", "solve", -1), rep.by_kind[1]);
    CHECK_EQ_INT(kd_rpc_int(s.result, "requests_by_method", "matrix.info", -1), rep.by_kind[2]);
    CHECK_EQ_INT(kd_rpc_int(s.result, "errors", NULL, -1), 0);
    CHECK_EQ_INT(kd_rpc_int(s.result, "jobs_in_flight", NULL, -1), 0);
    CHECK_EQ_INT(kd_rpc_int(s.result, "cache", "hits", -1), rep.by_kind[0] + rep.by_kind[1]);
    kd_rpc_msg_free(&s);
    kd_rpc_close(&r);
    for (int i = 0; i < 3; i++)
        kd_csr_free(m[i]);
}

int main(void)
{
    kd_test_seed();
    if (kd_daemon_start(&d, NULL) != 0)
        return 1;
    RUN(test_concurrent_mixed_load);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    return kd_test_finish();
}
