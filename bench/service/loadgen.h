/*
 * A load generator for krylovd: N clients, each on its own connection and thread, send a mix of
 * SpMV, small CG solves and matrix.info requests against a few matrices, keeping up to `window`
 * requests in flight (pipelined), and check every answer: SpMV against a CPU reference, solves by
 * their true residual computed on the CPU, info by its fields. It also checks that every request
 * is answered exactly once (none lost, none duplicated, no answer to a msgid never sent) and
 * measures requests per second and latency percentiles.
 *
 * Used by tests/e2e/service/test_e2e_load.c (small numbers, in ctest) and bench/service/load.c (the
 * full 64 x 200).
 */
#ifndef KD_BENCH_LOADGEN_H
#define KD_BENCH_LOADGEN_H

#include "common/csr.h"

#include <stdint.h>

#define KD_LOAD_MAX_MATRICES 8

typedef struct kd_load_config {
    int port;                        /* krylovd on 127.0.0.1:port */
    int clients;                     /* connections, one thread each */
    int requests;                    /* per client */
    int window;                      /* requests in flight per client (>= 1) */
    int spmv_percent, solve_percent; /* the rest are matrix.info */
    int nmatrices;
    const kd_csr_t *matrices[KD_LOAD_MAX_MATRICES]; /* square and SPD (they are solved) */
    char ids[KD_LOAD_MAX_MATRICES][33];             /* their ids on the server */
    uint64_t seed;
    int answer_timeout_ms; /* give up on an answer after this long (counted lost) */
    /* A long solve running the whole time on a connection of its own (NULL: none): CG on this
     * matrix, background_maxiter iterations (rtol 0), started again as soon as it ends, so
     * that the clients' latencies say what a long solve costs short requests. */
    const kd_csr_t *background;
    int64_t background_maxiter;
} kd_load_config_t;

typedef struct kd_load_report {
    uint64_t sent, answered, correct;
    uint64_t wrong;      /* answered, but the answer is wrong */
    uint64_t errors;     /* answered with an error (BUSY, ...) */
    uint64_t lost;       /* never answered */
    uint64_t duplicated; /* answered more than once */
    uint64_t unexpected; /* an answer to a msgid that was not in flight, or a stray message */
    uint64_t by_kind[3]; /* spmv, solve, info sent */
    double seconds, requests_per_s;
    double p50_ms, p90_ms, p99_ms, max_ms;
    double kind_p50_ms[2], kind_p99_ms[2]; /* spmv, solve */
    double spmv_server_p50_ms;             /* the server's own time_ms of spmv answers */
    double worker_busy;                    /* the device worker's busy share of the run */
    double loop_busy;                      /* the server's loop thread's */
    uint64_t background_solves; /* finished during the run */
    double background_ms;       /* their mean time, client side */
    char first_problem[512];
} kd_load_report_t;

/* Upload the matrices (fills cfg->ids) over one connection. 0 or -1 with a message on stderr. */
int kd_load_put_matrices(kd_load_config_t *cfg);

/* Run the load; 0 when it ran (check the report), -1 when it could not start. */
int kd_load_run(const kd_load_config_t *cfg, kd_load_report_t *report);

/* One line per figure on stderr. */
void kd_load_print(const kd_load_config_t *cfg, const kd_load_report_t *report);

#endif
