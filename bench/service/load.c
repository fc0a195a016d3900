/*
 * krylov-load: the service load benchmark. Starts a krylovd on loopback (or uses one already
 * running: --port), uploads three small SPD matrices, then runs N concurrent clients that each
 * send M mixed requests (SpMV, small CG solves, matrix.info), checks every answer, and prints
 * requests per second and latency percentiles. Exits 1 if any answer was wrong, missing,
 * duplicated or an error. The numbers in docs/BENCHMARKS.md ("Service") come from
 *
 *   build/bin/krylov-load --clients 64 --requests 200          (make bench-load)
 *
 * and the other configurations listed there.
 */
#include "bench/service/loadgen.h"
#include "bench/matgen/matgen.h"
#include "kd_daemon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(void)
{
    fprintf(stderr,
            "usage: krylov-load [--clients N] [--requests M] [--window W] [--spmv PCT]\n"
            "                   [--solve PCT] [--seed S] [--port P] [--matrix I]\n"
            "                   [--background-solve N] [--background-maxiter K]\n"
            "  --matrix I: every request on matrix I only (0: 2-D Laplacian 32 x 32, 1024 rows;\n"
            "  1: 3-D 10^3; 2: 2-D 64 x 16); default: each request picks one of the three.\n"
            "  --background-solve N: meanwhile a CG solve on a 3-D Laplacian N^3 runs all the\n"
            "  time on a connection of its own (K iterations a solve, 2000 by default).\n"
            "  Without --port, starts build/bin/krylovd on 127.0.0.1 (KD_TEST_DEVICE picks the\n"
            "  device) with a temporary state directory and stops it afterwards.\n");
}

int main(int argc, char **argv)
{
    kd_load_config_t cfg;
    memset(&cfg, 0, sizeof(cfg));
    cfg.clients = 64;
    cfg.requests = 200;
    cfg.window = 1;
    cfg.spmv_percent = 60;
    cfg.solve_percent = 20;
    cfg.seed = 12345;
    cfg.answer_timeout_ms = 120000;
    cfg.background_maxiter = 2000;
    int only = -1;
    long background_n = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (i + 1 >= argc) {
            usage();
            return 2;
        }
        long v = strtol(argv[++i], NULL, 10);
        if (strcmp(a, "--clients") == 0)
            cfg.clients = (int)v;
        else if (strcmp(a, "--requests") == 0)
            cfg.requests = (int)v;
        else if (strcmp(a, "--window") == 0)
            cfg.window = (int)v;
        else if (strcmp(a, "--spmv") == 0)
            cfg.spmv_percent = (int)v;
        else if (strcmp(a, "--solve") == 0)
            cfg.solve_percent = (int)v;
        else if (strcmp(a, "--seed") == 0)
            cfg.seed = (uint64_t)v;
        else if (strcmp(a, "--port") == 0)
            cfg.port = (int)v;
        else if (strcmp(a, "--matrix") == 0 && v >= 0 && v < 3)
            only = (int)v;
        else if (strcmp(a, "--background-solve") == 0 && v > 0 && v <= 400)
            background_n = v;
        else if (strcmp(a, "--background-maxiter") == 0 && v > 0)
            cfg.background_maxiter = v;
        else {
            usage();
            return 2;
        }
    }
    kd_csr_t *m[3] = {kd_matgen_laplacian_2d(32, 32, KD_DTYPE_F64),
                      kd_matgen_laplacian_3d(10, KD_DTYPE_F64),
                      kd_matgen_laplacian_2d(64, 16, KD_DTYPE_F64)};
    cfg.nmatrices = only >= 0 ? 1 : 3;
    for (int i = 0; i < cfg.nmatrices; i++)
        cfg.matrices[i] = m[only >= 0 ? only : i];
    kd_csr_t *bg = background_n > 0 ? kd_matgen_laplacian_3d(background_n, KD_DTYPE_F64) : NULL;
    cfg.background = bg;
    kd_daemon_t d;
    memset(&d, 0, sizeof(d));
    if (cfg.port == 0) {
        char queue[16];
        snprintf(queue, sizeof(queue), "%d", cfg.clients * cfg.window + 16);
        const char *extra[] = {"--queue-depth", queue, "--max-connections", "4096", NULL};
        if (kd_daemon_start(&d, extra) != 0) {
            fprintf(stderr, "krylov-load: could not start %s/krylovd\n", KD_BIN_DIR);
            return 1;
        }
        cfg.port = d.port;
    }
    int rc = kd_load_put_matrices(&cfg);
    kd_load_report_t rep;
    if (rc == 0)
        rc = kd_load_run(&cfg, &rep);
    if (rc == 0)
        kd_load_print(&cfg, &rep);
    if (d.pid > 0 && kd_daemon_stop(&d) != 0)
        fprintf(stderr, "krylov-load: krylovd did not exit cleanly\n");
    for (int i = 0; i < 3; i++)
        kd_csr_free(m[i]);
    kd_csr_free(bg);
    if (rc != 0)
        return 1;
    int bad = rep.wrong || rep.errors || rep.lost || rep.duplicated || rep.unexpected ||
              rep.correct != (uint64_t)cfg.clients * (uint64_t)cfg.requests;
    return bad ? 1 : 0;
}
