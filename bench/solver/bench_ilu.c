/*
 * krylov-bench ilu: the incomplete factorisations' two triangular-solve modes side by side, per
 * matrix: for each value of `sweeps` (0: exact, level-scheduled; s > 0: s Jacobi sweeps), the
 * setup's wall time, the levels, one apply's device time (z = M^-1 r, profiling events, median)
 * and its throughput back to back (launches included), and, for ic0, a CG solve to --rtol with
 * b = ones: its iterations, wall time (median of --repeat, the factors already built) and true
 * relative residual; Jacobi-PCG's on the same matrix for reference. ilu0 rows time the apply
 * only (CG cannot take it).
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "solver/precond/ilu.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/formats/select.h"
#include "solver/solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kd_bi_apply {
    kd_ocl_t *ocl;
    const kd_precond_t *P;
    kd_multivec_t *r, *z;
} kd_bi_apply_t;

static int kd_bi_apply(void *ctx, kd_err_t *err)
{
    kd_bi_apply_t *a = ctx;
    return a->P->ops->apply(a->ocl, a->P, a->r, a->z, err);
}

/* `repeat` CG solves after an untimed one: the median wall ms; iterations and relres of the last.
 */
static int kd_bi_solve(kd_ocl_t *ocl, kd_matrix_t *A, const kd_csr_t *csr, const void *b, void *x,
                       kd_solve_params_t *prm, int repeat, int64_t *its, double *ms, double *relres,
                       kd_err_t *err)
{
    double t[33];
    kd_solve_result_t res;
    for (int r = 0; r <= repeat && r < 33; r++) {
        const uint64_t t0 = kd_clock_ns();
        if (kd_solve(ocl, A, 1, b, NULL, x, prm, &res, err) != KD_OK)
            return -1;
        t[r] = (double)(kd_clock_ns() - t0) / 1e6;
        *its = res.status == KD_SOLVE_CONVERGED ? res.iterations : -res.iterations;
        *relres = res.relative_residual;
        kd_solve_result_free(&res);
    }
    *ms = kd_bench_median(t + 1, (size_t)(repeat < 32 ? repeat : 32));
    (void)csr;
    return 0;
}

static void kd_bi_usage(void)
{
    fprintf(
        stderr,
        "usage: krylov-bench ilu [options] MATRIX...\n"
        "  --device SEL        auto | gpu | cpu | N (default auto)\n"
        "  --dtype T           float64 (default) | float32\n"
        "  --precond P         ic0 (default) | ilu0 (apply only)\n"
        "  --sweeps LIST       sweeps values to compare (default 0,1,2,3,5)\n"
        "  --rtol R            relative residual to reach (default 1e-8)\n"
        "  --repeat N          timed solves, median (default 3)\n"
        "  --check-every N     ic0's solves look at the residuals every N iterations (default 0:\n"
        "                      the solver's choice, every iteration for an operator)\n"
        "MATRIX: lap2d:N, lap3d:N, aniso2d:N:EPS, ... or a .mtx file\n");
}

/* One row: setup, apply, solve with `sweeps`. */
static int kd_bi_row(kd_ocl_t *ocl, kd_matrix_t *A, const kd_csr_t *csr,
                     const kd_precond_ops_t *ops, int sweeps, const void *b, void *x, double rtol,
                     int repeat, int64_t check_every, kd_err_t *err)
{
    kd_precond_options_t opt = {.count = 1};
    snprintf(opt.items[0].name, sizeof(opt.items[0].name), "sweeps");
    opt.items[0].value = sweeps;
    const kd_precond_t *P = NULL;
    const uint64_t t0 = kd_clock_ns();
    if (kd_precond_get(ocl, A, ops, &opt, csr, &P, err) != KD_OK ||
        kd_ocl_finish(ocl, err) != KD_OK)
        return -1;
    const double setup_ms = (double)(kd_clock_ns() - t0) / 1e6;
    kd_ilu_stats_t st;
    if (kd_ilu_describe(P, &st, err) != KD_OK)
        return -1;
    kd_multivec_t r = {0}, z = {0};
    double per[20], batch = 0.0;
    int rc = kd_multivec_alloc(ocl, csr->rows, 1, csr->dtype, &r, err);
    if (rc == KD_OK)
        rc = kd_multivec_alloc(ocl, csr->rows, 1, csr->dtype, &z, err);
    if (rc == KD_OK)
        rc = kd_multivec_write(ocl, &r, b, err);
    kd_bi_apply_t ctx = {ocl, P, &r, &z};
    if (rc == KD_OK)
        rc = kd_bench_time_device(ocl, kd_bi_apply, &ctx, 2, 20, per, &batch, err);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
    if (rc != KD_OK)
        return -1;
    const double apply_ms = kd_bench_median(per, 20);
    printf("  sweeps=%-2d setup %8.1f ms  levels %5d/%-5d  apply %8.3f ms (back to back %8.3f)",
           sweeps, setup_ms, st.lower_levels, st.upper_levels, apply_ms, batch);
    if (ops == &kd_precond_ic0) {
        kd_solve_params_t prm;
        kd_solve_params_default(&prm);
        prm.rtol = rtol;
        prm.maxiter = 100000;
        prm.method = &kd_method_cg;
        prm.precond = ops;
        prm.precond_options = &opt;
        prm.csr = csr;
        prm.check_every = check_every;
        int64_t its;
        double ms, relres;
        if (kd_bi_solve(ocl, A, csr, b, x, &prm, repeat, &its, &ms, &relres, err) != 0)
            return -1;
        printf("  cg %6lld its %9.2f ms (%.3f ms/it) relres %.1e", (long long)its, ms,
               ms / (double)(its > 0 ? its : 1), relres);
    }
    printf("\n");
    return 0;
}

int kd_bench_ilu_main(int argc, char **argv)
{
    const char *device = "auto", *sweeps_list = "0,1,2,3,5";
    const kd_precond_ops_t *ops = &kd_precond_ic0;
    kd_dtype_t dtype = KD_DTYPE_F64;
    double rtol = 1e-8;
    int repeat = 3, first = argc;
    int64_t check_every = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && has)
            device = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && has)
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        else if (strcmp(a, "--precond") == 0 && has)
            ops = strcmp(argv[++i], "ilu0") == 0 ? &kd_precond_ilu0 : &kd_precond_ic0;
        else if (strcmp(a, "--sweeps") == 0 && has)
            sweeps_list = argv[++i];
        else if (strcmp(a, "--rtol") == 0 && has)
            rtol = atof(argv[++i]);
        else if (strcmp(a, "--repeat") == 0 && has)
            repeat = atoi(argv[++i]);
        else if (strcmp(a, "--check-every") == 0 && has)
            check_every = atoll(argv[++i]);
        else if (a[0] == '-') {
            kd_bi_usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        } else {
            first = i;
            break;
        }
    }
    if (first >= argc || repeat < 1) {
        kd_bi_usage();
        return 2;
    }
    kd_ocl_t *ocl = NULL;
    kd_err_t err = {0};
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench ilu: %s\n", err.message);
        return 1;
    }
    printf("# device: %s; %s %s, rtol %g, b = ones, median of %d solves\n", kd_ocl_desc(ocl)->name,
           ops->name, kd_dtype_name(dtype), rtol, repeat);
    int status = 0;
    for (int mi = first; mi < argc; mi++) {
        kd_csr_t *csr = kd_matgen_by_name(argv[mi], dtype);
        if (csr == NULL) {
            status = 1;
            continue;
        }
        kd_matrix_t *A = NULL;
        kd_select_result_t sel;
        if (kd_select_upload(ocl, csr, NULL, KD_SELECT_MEASURE, &A, &sel, &err) != KD_OK) {
            fprintf(stderr, "%s: %s\n", argv[mi], err.message);
            kd_csr_free(csr);
            status = 1;
            continue;
        }
        const int64_t n = csr->rows;
        void *b = malloc((size_t)n * kd_dtype_size(dtype) + 8);
        void *x = malloc((size_t)n * kd_dtype_size(dtype) + 8);
        for (int64_t i = 0; i < n; i++)
            kd_store_real(b, dtype, (size_t)i, 1.0);
        char label[64];
        kd_bench_matrix_name(argv[mi], label, sizeof(label));
        kd_solve_params_t prm;
        kd_solve_params_default(&prm);
        prm.rtol = rtol;
        prm.maxiter = 100000;
        int64_t its = 0;
        double ms = 0.0, relres = 0.0;
        int failed = kd_method_choose("cg", "jacobi", &prm.method, &prm.precond, &err) != KD_OK ||
                     kd_bi_solve(ocl, A, csr, b, x, &prm, repeat, &its, &ms, &relres, &err) != 0;
        if (!failed)
            printf("%s rows %lld nnz %lld format %s: jacobi-pcg %lld its %.2f ms (%.3f ms/it)\n",
                   label, (long long)n, (long long)csr->nnz, kd_format_name(A->format),
                   (long long)its, ms, ms / (double)(its > 0 ? its : 1));
        char list[128];
        snprintf(list, sizeof(list), "%s", sweeps_list);
        for (char *s = strtok(list, ","); s != NULL && !failed; s = strtok(NULL, ","))
            failed =
                kd_bi_row(ocl, A, csr, ops, atoi(s), b, x, rtol, repeat, check_every, &err) != 0;
        if (failed) {
            fprintf(stderr, "%s: %s\n", label, err.message);
            status = 1;
        }
        fflush(stdout);
        free(b);
        free(x);
        kd_matrix_free(A);
        kd_csr_free(csr);
    }
    kd_ocl_close(ocl);
    return status;
}
