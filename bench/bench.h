/*
 * What the krylov-bench subcommands share: the dispatch table's entry points (one per
 * bench/{solver,service}/bench_<name>.c), a monotonic clock, medians, device-side timing of
 * enqueued work through profiling events (solver/runtime/ocl.h's timing window), the minimal-bytes
 * model of SpMV, and the binary CSR dump the peer programs in bench/peers read.
 */
#ifndef KD_BENCH_H
#define KD_BENCH_H

#include "common/csr.h"
#include "solver/runtime/ocl.h"

#include <stddef.h>
#include <stdint.h>

/* Subcommands: argv[0] is the subcommand's name; return the process exit status. */
int kd_bench_spmv_main(int argc, char **argv);
int kd_bench_solve_main(int argc, char **argv);
int kd_bench_export_main(int argc, char **argv);
int kd_bench_spgemm_main(int argc, char **argv);
int kd_bench_kernels_main(int argc, char **argv);
int kd_bench_amg_main(int argc, char **argv);
int kd_bench_methods_main(int argc, char **argv);
int kd_bench_ilu_main(int argc, char **argv);
int kd_bench_spmm_main(int argc, char **argv);
int kd_bench_batch_main(int argc, char **argv);
int kd_bench_refresh_main(int argc, char **argv);
int kd_bench_heat_main(int argc, char **argv);
int kd_bench_putlike_main(int argc, char **argv);
int kd_bench_wire_main(int argc, char **argv);

/* The median of v[0..n) (sorts v in place); 0 for n == 0. */
double kd_bench_median(double *v, size_t n);
/* The smallest of v[0..n); 0 for n == 0. */
double kd_bench_min(const double *v, size_t n);

/* Something enqueued on the device, for kd_bench_time_device. Returns KD_OK or an error code. */
typedef int (*kd_bench_fn)(void *ctx, kd_err_t *err);

/*
 * Time fn on the device: `warmup` untimed calls, then `runs` calls each timed alone (profiling
 * events from its first kernel's start to its last kernel's end; the host waits after each), into
 * per_run_ms[runs]; then `runs` calls enqueued back to back without events, the host clock
 * around them (from an idle queue to clFinish) divided by runs in *batch_ms: the throughput a
 * caller sees, launch costs included, as a CUDA event pair around a loop of calls would see it.
 */
int kd_bench_time_device(kd_ocl_t *ocl, kd_bench_fn fn, void *ctx, int warmup, int runs,
                         double *per_run_ms, double *batch_ms, kd_err_t *err);

/* ||b - A x|| / ||b|| on the host in float64 (x in csr's dtype; b NULL: ones); NaN without
 * memory. The true residual every solve benchmark prints beside the solver's own. */
double kd_bench_relres(const kd_csr_t *csr, const double *b, const void *x);

/* Minimal bytes an SpMV must move for csr (each array read once, y written once):
 * nnz * (v + 4) + (rows + 1) * 4 + cols * v + rows * v. */
double kd_bench_spmv_bytes(const kd_csr_t *csr);

/*
 * The binary CSR dump the peers read (bench/peers/cusparse_spmv.cu, cupy_spmv.py), little-endian:
 * "KDCSR64\0", int64 rows, cols, nnz, int32 indptr[rows + 1], int32 indices[nnz],
 * float64 values[nnz]. Returns 0 or -1 (with a message on stderr).
 */
int kd_bench_write_csr(const char *path, const kd_csr_t *csr);

/* A file-name-safe name for a matrix spec: "lap2d:2048" -> "lap2d_2048",
 * "tests/matrices/arrow.mtx" -> "arrow". */
void kd_bench_matrix_name(const char *spec, char *out, size_t cap);

#endif
