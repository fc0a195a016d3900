/*
 * krylov-bench: benchmarks of krylovd's solver layer, one subcommand per
 * bench/{solver,service}/bench_<name>.c, listed in the table below (adding one is one line).
 * Without arguments it runs `spmv` on a small default set of generated matrices, 20 runs each (what
 * `make bench` does; sized for a CPU).
 */
#include "bench/bench.h"

#include <stdio.h>
#include <string.h>

typedef struct kd_bench_command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} kd_bench_command_t;

static const kd_bench_command_t kd_bench_commands[] = {
    {"spmv", kd_bench_spmv_main, "SpMV: every format and the automatic choice, per matrix"},
    {"spmm", kd_bench_spmm_main, "several columns in one launch against single SpMVs, per format"},
    {"solve", kd_bench_solve_main, "CG / PCG / SD: ms per iteration against the bytes it moves"},
    {"spgemm", kd_bench_spgemm_main, "C = A B on the device: A A, A^T A or R (A P), per matrix"},
    {"export", kd_bench_export_main, "write a matrix as binary CSR for the peer programs"},
    {"kernels", kd_bench_kernels_main, "build the SpMV kernels, print registers and spills"},
    {"amg", kd_bench_amg_main, "AMG-PCG against Jacobi-PCG: iterations, setup and solve time"},
    {"methods", kd_bench_methods_main,
     "every method x preconditioner to a tolerance: which converge"},
    {"ilu", kd_bench_ilu_main, "ic0 / ilu0: exact against swept triangular solves, apply and CG"},
    {"batch", kd_bench_batch_main, "1000 small systems: one batched solve, alone, block diagonal"},
    {"refresh", kd_bench_refresh_main, "new values on a held pattern: full setup against refresh"},
    {"heat", kd_bench_heat_main, "a heat-equation loop through a krylovd: put like against re-put"},
    {"putlike", kd_bench_putlike_main, "through a krylovd: a put of new values against a full put"},
    {"wire", kd_bench_wire_main, "large spmv / solve vectors end to end against raw loopback TCP"},
};

static void kd_bench_usage(void)
{
    fprintf(stderr, "usage: krylov-bench COMMAND [options]   (COMMAND --help for its options)\n");
    for (size_t i = 0; i < sizeof(kd_bench_commands) / sizeof(kd_bench_commands[0]); i++)
        fprintf(stderr, "  %-8s %s\n", kd_bench_commands[i].name, kd_bench_commands[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        char *defaults[] = {"spmv", "--runs", "20", "lap2d:512", "lap3d:48", "powerlaw:100000:8",
                            NULL};
        return kd_bench_spmv_main(6, defaults);
    }
    for (size_t i = 0; i < sizeof(kd_bench_commands) / sizeof(kd_bench_commands[0]); i++)
        if (strcmp(argv[1], kd_bench_commands[i].name) == 0)
            return kd_bench_commands[i].main(argc - 1, argv + 1);
    kd_bench_usage();
    return strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ? 0 : 2;
}
