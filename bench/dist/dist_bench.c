/*
 * krylov-dist-bench: what spreading a matrix over ranks costs, per SpMV and per CG iteration,
 * with the halo exchange's and the reductions' parts apart (docs/ARCHITECTURE.md, "Distributed
 * matrices"; bench/device/mpi.sh runs it with 1, 2 and 4 ranks). Run under mpirun:
 *
 *   mpirun -np 2 krylov-dist-bench [--matrix lap3d:59|powerlaw:ROWS] [--dtype f64|f32]
 *          [--device SEL|local] [--spmv 50] [--iterations 200] [--format NAME]
 *          [--methods cg,cg1]
 *
 * Rank 0 makes the matrix and spreads it (kd_dist_scatter_blocks); every rank opens its device
 * (--device local: the local rank's index among the node's devices, wrapping round, so ranks
 * share a GPU when there are more ranks than GPUs). The SpMV is timed call by call, each call
 * drained (a CG iteration waits at its reductions anyway), and the diagonal block's multiply
 * alone beside it: what the halo adds to a call, against the host time it takes, is how much of
 * it the diagonal multiply hides. Each of --methods (cg, cg1, pcg, sd; default cg,cg1) runs a
 * fixed number of iterations (rtol 0; only on a matrix that looks SPD). Times are the slowest
 * rank's (each rank's share of the parts is printed too). With one rank the single-process SpMV and
 * kd_solve on the whole matrix are measured beside them: what the distributed path costs before any
 * exchange.
 */
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "dist/dist_matrix.h"
#include "dist/scatter.h"
#include "solver/methods/method.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct dist_bench_args {
    const char *matrix, *device, *format, *methods;
    kd_dtype_t dtype;
    int spmv, iterations;
} dist_bench_args_t;

static int rank_of(void)
{
    int r = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    return r;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    if (rank_of() != 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

static int parse(int argc, char **argv, dist_bench_args_t *a)
{
    *a = (dist_bench_args_t){"lap3d:59", "auto", NULL, "cg,cg1", KD_DTYPE_F64, 50, 200};
    if (argc % 2 == 0) /* options come in pairs */
        return -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *v = argv[i + 1];
        if (strcmp(argv[i], "--matrix") == 0)
            a->matrix = v;
        else if (strcmp(argv[i], "--device") == 0)
            a->device = v;
        else if (strcmp(argv[i], "--format") == 0)
            a->format = v;
        else if (strcmp(argv[i], "--methods") == 0)
            a->methods = v;
        else if (strcmp(argv[i], "--dtype") == 0)
            a->dtype = strcmp(v, "f32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        else if (strcmp(argv[i], "--spmv") == 0)
            a->spmv = atoi(v);
        else if (strcmp(argv[i], "--iterations") == 0)
            a->iterations = atoi(v);
        else
            return -1;
    }
    return a->spmv > 0 && a->iterations > 0 ? 0 : -1;
}

static kd_csr_t *make_matrix(const char *spec, kd_dtype_t dtype)
{
    if (strncmp(spec, "lap3d:", 6) == 0)
        return kd_matgen_laplacian_3d(atoll(spec + 6), dtype);
    if (strncmp(spec, "powerlaw:", 9) == 0) { /* irregular rows, nonsymmetric: SpMV only */
        const int64_t n = atoll(spec + 9);
        return kd_matgen_power_law(n, n, 8.0, 7, dtype);
    }
    return NULL;
}

/* The device: a selector, or "local": this node's rank's index, modulo the devices. */
static kd_ocl_t *open_device(const char *sel, kd_err_t *err)
{
    char index[16];
    if (strcmp(sel, "local") == 0) {
        MPI_Comm node;
        int local = 0;
        MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
        MPI_Comm_rank(node, &local);
        MPI_Comm_free(&node);
        kd_ocl_device_desc_t *devs = NULL;
        size_t count = 0;
        if (kd_ocl_list_devices(&devs, &count, err) != KD_OK || count == 0)
            return NULL;
        size_t pick = 0, gpus = 0; /* the local rank's GPU, wrapping; the first device if none */
        for (size_t i = 0; i < count; i++)
            gpus += devs[i].is_gpu;
        for (size_t i = 0, g = 0; i < count && gpus > 0; i++)
            if (devs[i].is_gpu && g++ == (size_t)local % gpus)
                pick = i;
        free(devs);
        snprintf(index, sizeof(index), "%zu", pick);
        sel = index;
    }
    kd_ocl_t *ocl = NULL;
    return kd_ocl_open(sel, &ocl, err) == KD_OK ? ocl : NULL;
}

/* The slowest rank's value, and every rank's into all (size entries). */
static double slowest(double mine, double *all)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Allgather(&mine, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    double m = 0.0;
    for (int r = 0; r < size; r++)
        m = all[r] > m ? all[r] : m;
    return m;
}

static void print_ranks(const char *name, const double *all, int size, double scale)
{
    say("  %-22s", name);
    for (int r = 0; r < size; r++)
        say(" %10.1f", all[r] * scale);
    say("\n");
}

static int bench_spmv(kd_dist_matrix_t *m, const dist_bench_args_t *a, kd_err_t *err)
{
    kd_multivec_t X, Y;
    memset(&X, 0, sizeof(X));
    memset(&Y, 0, sizeof(Y));
    int rc = kd_multivec_alloc(m->ocl, m->device_rows, 1, a->dtype, &X, err);
    if (rc == KD_OK)
        rc = kd_multivec_alloc(m->ocl, m->device_rows, 1, a->dtype, &Y, err);
    if (rc == KD_OK)
        rc = kd_vec_fill(m->ocl, &X.cols[0], 1.0, err);
    for (int i = 0; rc == KD_OK && i < 5; i++) /* warm-up: programs, buffers */
        rc = kd_dist_spmm(m, 1.0, &X, 0.0, &Y, NULL, err);
    if (rc == KD_OK)
        rc = kd_ocl_finish(m->ocl, err);
    memset(&m->time, 0, sizeof(m->time));
    MPI_Barrier(MPI_COMM_WORLD);
    const uint64_t t0 = kd_clock_ns();
    for (int i = 0; rc == KD_OK && i < a->spmv; i++) {
        rc = kd_dist_spmm(m, 1.0, &X, 0.0, &Y, NULL, err);
        if (rc == KD_OK)
            rc = kd_ocl_finish(m->ocl, err);
    }
    const double per = (double)(kd_clock_ns() - t0) / 1e3 / a->spmv;
    kd_dist_spmv_time_t spent = m->time;
    /* the diagonal block alone, the same way: what the call would cost without a halo */
    MPI_Barrier(MPI_COMM_WORLD);
    const uint64_t t1 = kd_clock_ns();
    for (int i = 0; rc == KD_OK && i < a->spmv; i++) {
        rc = kd_matrix_spmv(m->ocl, m->diag, 1.0, &X.cols[0], 0.0, &Y.cols[0], err);
        if (rc == KD_OK)
            rc = kd_ocl_finish(m->ocl, err);
    }
    const double diag = (double)(kd_clock_ns() - t1) / 1e3 / a->spmv;
    m->time = spent;
    int size = m->comm->size;
    double *all = malloc((size_t)size * sizeof(double));
    const double n = (double)a->spmv;
    say("spmv: %.1f us per call (slowest rank; each drained)\n", slowest(per, all));
    print_ranks("per call us", all, size, 1.0);
    slowest(diag, all);
    print_ranks("diagonal block alone us", all, size, 1.0);
    const double halo_host =
        (double)(spent.gather_ns + spent.exchange_ns + spent.ghost_ns) / 1e3 / n;
    slowest(halo_host, all);
    print_ranks("halo host time us", all, size, 1.0);
    slowest(per - diag, all);
    print_ranks("halo adds us", all, size, 1.0);
    slowest(m->block.neighbours > 0 ? 100.0 * (1.0 - (per - diag) / halo_host) : 0.0, all);
    print_ranks("halo hidden %", all, size, 1.0);
    slowest((double)m->time.gather_ns / 1e3 / n, all);
    print_ranks("gather+read us", all, size, 1.0);
    slowest((double)m->time.exchange_ns / 1e3 / n, all);
    print_ranks("MPI exchange us", all, size, 1.0);
    slowest((double)m->time.ghost_ns / 1e3 / n, all);
    print_ranks("ghosts+offd us", all, size, 1.0);
    free(all);
    kd_multivec_release(&X);
    kd_multivec_release(&Y);
    return rc;
}

/* One round of a reduction behind a one-entry kernel (x NULL) or the diagonal multiply: the
 * work, one value read back, summed over the ranks, written back without waiting. */
static int roundtrip_once(kd_dist_matrix_t *m, kd_vec_t *v, kd_vec_t *x, kd_vec_t *y, kd_err_t *err)
{
    double value = 0.0;
    int rc = x != NULL ? kd_matrix_spmv(m->ocl, m->diag, 1.0, x, 0.0, y, err)
                       : kd_vec_fill(m->ocl, v, 1.0, err);
    cl_event ev = NULL;
    cl_int st = rc == KD_OK ? clEnqueueReadBuffer(kd_ocl_queue(m->ocl), x != NULL ? y->mem : v->mem,
                                                  CL_FALSE, 0, 8, &value, 0, NULL, &ev)
                            : CL_SUCCESS;
    if (rc == KD_OK && st == CL_SUCCESS)
        st = clFlush(kd_ocl_queue(m->ocl));
    if (rc == KD_OK && st != CL_SUCCESS)
        rc = kd_ocl_fail(err, st, "read");
    if (rc == KD_OK && (st = clWaitForEvents(1, &ev)) != CL_SUCCESS)
        rc = kd_ocl_fail(err, st, "read");
    if (ev != NULL)
        clReleaseEvent(ev);
    if (rc == KD_OK && (rc = m->comm->sum(m->comm, &value, 1, err)) == KD_OK)
        rc = kd_ocl_write_async(m->ocl, v->mem, 0, 8, &value, err);
    return rc;
}

/* Reductions' round trips, the slowest rank's per round: behind a one-entry kernel (the floor)
 * and behind the diagonal multiply (against "diagonal block alone": what a wait behind long
 * work costs). Polling the event instead of a blocking wait measured the same on NVIDIA. */
static int bench_roundtrip(kd_dist_matrix_t *m, const dist_bench_args_t *a, kd_err_t *err)
{
    kd_vec_t v, x, y;
    memset(&v, 0, sizeof(v));
    memset(&x, 0, sizeof(x));
    memset(&y, 0, sizeof(y));
    int rc = kd_vec_alloc(m->ocl, 1, a->dtype, &v, err);
    if (rc == KD_OK && (rc = kd_vec_alloc(m->ocl, m->device_rows, a->dtype, &x, err)) == KD_OK &&
        (rc = kd_vec_alloc(m->ocl, m->device_rows, a->dtype, &y, err)) == KD_OK)
        rc = kd_vec_fill(m->ocl, &x, 1.0, err);
    const struct {
        const char *name;
        int behind_spmv;
    } kinds[] = {{"after a tiny kernel", 0}, {"after the diagonal multiply", 1}};
    double *all = malloc((size_t)m->comm->size * sizeof(double));
    const int rounds = 100;
    for (size_t k = 0; rc == KD_OK && k < sizeof(kinds) / sizeof(kinds[0]); k++) {
        uint64_t t0 = 0;
        for (int i = 0; rc == KD_OK && i < rounds + 10; i++) {
            if (i == 10) {
                if ((rc = kd_ocl_finish(m->ocl, err)) != KD_OK)
                    break;
                MPI_Barrier(MPI_COMM_WORLD);
                t0 = kd_clock_ns();
            }
            rc = roundtrip_once(m, &v, kinds[k].behind_spmv ? &x : NULL, &y, err);
        }
        if (rc == KD_OK)
            rc = kd_ocl_finish(m->ocl, err);
        const double per = (double)(kd_clock_ns() - t0) / 1e3 / rounds;
        say("reduction round trip %-28s %8.1f us\n", kinds[k].name, slowest(per, all));
    }
    free(all);
    kd_vec_release(&v);
    kd_vec_release(&x);
    kd_vec_release(&y);
    return rc;
}

static int bench_cg(kd_dist_matrix_t *m, const dist_bench_args_t *a, const char *method,
                    kd_err_t *err)
{
    kd_solve_params_t params;
    kd_solve_params_default(&params);
    if (kd_method_choose(method, NULL, &params.method, &params.precond, err) != KD_OK)
        return err->code;
    params.rtol = 0.0;
    params.maxiter = a->iterations;
    void *b = malloc((size_t)m->rows * 8 + 8), *x = malloc((size_t)m->rows * 8 + 8);
    for (int64_t i = 0; i < m->rows; i++)
        kd_store_real(b, a->dtype, (size_t)i, 1.0);
    kd_solve_result_t res;
    int rc = kd_dist_solve(m, 1, b, NULL, x, &params, &res, err); /* warm-up */
    kd_solve_result_free(&res);
    memset(&m->time, 0, sizeof(m->time));
    m->comm->reductions = 0;
    m->comm->reduce_ns = m->comm->read_ns = m->comm->sum_ns = 0;
    if (rc == KD_OK)
        rc = kd_dist_solve(m, 1, b, NULL, x, &params, &res, err);
    if (rc != KD_OK) {
        free(b);
        free(x);
        return rc;
    }
    const double it = (double)res.iterations;
    int size = m->comm->size;
    double *all = malloc((size_t)size * sizeof(double));
    say("%s: %lld iterations, %.1f us per iteration (slowest rank)\n", method,
        (long long)res.iterations, slowest(res.iterate_ms * 1e3 / it, all));
    print_ranks("per iteration us", all, size, 1.0);
    slowest((double)m->time.total_ns / 1e3 / it, all);
    print_ranks("spmv us", all, size, 1.0);
    slowest((double)(m->time.gather_ns + m->time.exchange_ns) / 1e3 / it, all);
    print_ranks("halo us", all, size, 1.0);
    slowest((double)m->comm->reduce_ns / 1e3 / it, all);
    print_ranks("reductions us", all, size, 1.0);
    slowest((double)m->comm->read_ns / 1e3 / it, all);
    print_ranks("of which device+read", all, size, 1.0);
    slowest((double)m->comm->sum_ns / 1e3 / it, all);
    print_ranks("of which MPI us", all, size, 1.0);
    say("  reductions per iteration %.2f\n", (double)m->comm->reductions / it);
    kd_solve_result_free(&res);
    /* the same solve with every kernel's device time recorded: the device's busy time an
     * iteration, against which the wall time above shows how long the device waited */
    kd_ocl_kernel_time_t times[KD_OCL_KERNEL_TIMES_MAX];
    size_t ntimes = 0;
    kd_ocl_kernel_profile_begin(m->ocl);
    int prc = kd_dist_solve(m, 1, b, NULL, x, &params, &res, err);
    if (kd_ocl_kernel_profile_end(m->ocl, times, KD_OCL_KERNEL_TIMES_MAX, &ntimes, err) == KD_OK &&
        prc == KD_OK) {
        double busy = 0.0;
        for (size_t i = 0; i < ntimes; i++)
            busy += times[i].ms;
        slowest(busy * 1e3 / (double)res.iterations, all);
        print_ranks("kernels' device time us", all, size, 1.0);
        for (size_t i = 0; i < ntimes; i++)
            if (times[i].ms * 1e3 / (double)res.iterations >= 2.0)
                say("    rank 0 %-34s %8.1f us an iteration, %lld launches\n", times[i].name,
                    times[i].ms * 1e3 / (double)res.iterations, (long long)times[i].launches);
    }
    if (prc == KD_OK)
        kd_solve_result_free(&res);
    free(all);
    free(b);
    free(x);
    return KD_OK;
}

/* One rank: the plain single-process SpMV and solve on the whole matrix, for comparison. */
static int bench_single(kd_ocl_t *ocl, const kd_csr_t *A, const dist_bench_args_t *a,
                        const char *const *methods, int nmethods, kd_err_t *err)
{
    kd_matrix_t *M = NULL;
    kd_select_result_t sel;
    int rc = kd_select_upload(ocl, A, a->format, KD_SELECT_HEURISTIC, &M, &sel, err);
    kd_vec_t x, y;
    memset(&x, 0, sizeof(x));
    memset(&y, 0, sizeof(y));
    if (rc == KD_OK && (rc = kd_vec_alloc(ocl, A->rows, a->dtype, &x, err)) == KD_OK &&
        (rc = kd_vec_alloc(ocl, A->rows, a->dtype, &y, err)) == KD_OK)
        rc = kd_vec_fill(ocl, &x, 1.0, err);
    for (int i = 0; rc == KD_OK && i < 5; i++)
        rc = kd_matrix_spmv(ocl, M, 1.0, &x, 0.0, &y, err);
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    const uint64_t t0 = kd_clock_ns();
    for (int i = 0; rc == KD_OK && i < a->spmv; i++) {
        rc = kd_matrix_spmv(ocl, M, 1.0, &x, 0.0, &y, err);
        if (rc == KD_OK)
            rc = kd_ocl_finish(ocl, err);
    }
    if (rc == KD_OK)
        say("single process: spmv %.1f us per call (%s)",
            (double)(kd_clock_ns() - t0) / 1e3 / a->spmv, kd_format_name(M->format));
    void *b = malloc((size_t)A->rows * 8), *xs = malloc((size_t)A->rows * 8);
    for (int64_t i = 0; i < A->rows; i++)
        kd_store_real(b, a->dtype, (size_t)i, 1.0);
    for (int j = 0; rc == KD_OK && j < nmethods && A->rows == A->cols; j++) {
        kd_solve_params_t params;
        kd_solve_params_default(&params);
        params.rtol = 0.0;
        params.maxiter = a->iterations;
        if ((rc = kd_method_choose(methods[j], NULL, &params.method, &params.precond, err)) !=
            KD_OK)
            break;
        kd_solve_result_t res;
        for (int pass = 0; rc == KD_OK && pass < 2; pass++) { /* the first warms up */
            rc = kd_solve(ocl, M, 1, b, NULL, xs, &params, &res, err);
            if (rc == KD_OK && pass == 1)
                say(", %s %.1f us per iteration", methods[j],
                    res.iterate_ms * 1e3 / (double)res.iterations);
            kd_solve_result_free(&res);
        }
    }
    say("\n");
    free(b);
    free(xs);
    kd_vec_release(&x);
    kd_vec_release(&y);
    kd_matrix_free(M);
    return rc;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    kd_comm_t comm;
    kd_dist_comm_init(&comm, &world);
    dist_bench_args_t a;
    kd_err_t err = {0};
    int rc = KD_OK;
    if (parse(argc, argv, &a) != 0) {
        say("usage: mpirun -np N krylov-dist-bench [--matrix lap3d:N|powerlaw:ROWS] "
            "[--dtype f64|f32] [--device SEL|local] [--spmv N] [--iterations N] [--format F] "
            "[--methods cg,cg1]\n");
        MPI_Finalize();
        return 2;
    }
    kd_ocl_t *ocl = open_device(a.device, &err);
    rc = kd_dist_agree(&comm, ocl != NULL ? KD_OK : KD_EDEVICE, &err);
    kd_csr_t *A = NULL;
    if (rc == KD_OK && comm.rank == 0 && (A = make_matrix(a.matrix, a.dtype)) == NULL)
        rc = kd_err_set(&err, KD_EBADREQ, "unknown matrix %s", a.matrix);
    rc = kd_dist_agree(&comm, rc, &err);
    kd_dist_block_t block;
    kd_dist_matrix_t *m = NULL;
    const uint64_t t0 = kd_clock_ns();
    if (rc == KD_OK)
        rc = kd_dist_scatter_blocks(&comm, 0, A, &block, &err);
    const double spread_ms = kd_clock_ms_since(t0);
    if (rc == KD_OK)
        rc = kd_dist_matrix_create(ocl, &comm, &block, a.format, KD_SELECT_HEURISTIC, &m, &err);
    if (rc == KD_OK) {
        say("ranks=%d matrix=%s rows=%lld nnz=%lld dtype=%s device=%s\n", comm.size, a.matrix,
            (long long)m->block.rows, (long long)m->block.nnz, kd_dtype_name(a.dtype),
            kd_ocl_desc(ocl)->name);
        say("split and sent in %.1f ms; per rank:\n", spread_ms);
        double *all = malloc((size_t)comm.size * sizeof(double));
        slowest((double)m->rows, all);
        print_ranks("rows", all, comm.size, 1.0);
        slowest((double)(m->block.diag->nnz + m->block.offd->nnz), all);
        print_ranks("nonzeros", all, comm.size, 1.0);
        slowest((double)m->block.ghosts, all);
        print_ranks("ghosts (received)", all, comm.size, 1.0);
        slowest((double)m->block.send_start[m->block.neighbours], all);
        print_ranks("entries sent", all, comm.size, 1.0);
        slowest((double)m->block.neighbours, all);
        print_ranks("neighbours", all, comm.size, 1.0);
        say("  diagonal block format: %s\n", kd_format_name(m->diag->format));
        free(all);
        rc = bench_spmv(m, &a, &err);
    }
    /* --methods: a comma-separated list (the methods' own names are short) */
    char list[128];
    const char *methods[8];
    int nmethods = 0;
    snprintf(list, sizeof(list), "%s", a.methods);
    for (char *save = NULL, *t = strtok_r(list, ",", &save); t != NULL && nmethods < 8;
         t = strtok_r(NULL, ",", &save))
        methods[nmethods++] = t;
    if (rc == KD_OK && !m->block.summary.looks_spd) {
        say("cg: skipped (the matrix does not look SPD)\n");
        nmethods = 0;
    }
    if (rc == KD_OK)
        rc = bench_roundtrip(m, &a, &err);
    for (int j = 0; rc == KD_OK && j < nmethods; j++)
        rc = bench_cg(m, &a, methods[j], &err);
    if (rc == KD_OK && comm.size == 1)
        rc = bench_single(ocl, A, &a, methods, nmethods, &err);
    rc = kd_dist_agree(&comm, rc, &err);
    if (rc != KD_OK)
        say("krylov-dist-bench: %s\n", err.message);
    kd_dist_matrix_free(m);
    kd_csr_free(A);
    kd_ocl_close(ocl);
    MPI_Finalize();
    return rc == KD_OK ? 0 : 1;
}
