/*
 * krylov-bench amg: AMG-PCG against Jacobi-PCG to a relative residual (default 1e-8), b = ones,
 * as issue 13's anchor table measures PETSc's GAMG: per matrix, the iterations and wall time of a
 * Jacobi-PCG solve, the AMG setup (with its SpGEMM and host shares, levels and operator
 * complexity) and an AMG-PCG solve with the hierarchy already built (the resident matrix's case),
 * each solve the median of --repeat, and the true relative residual ||b - A x|| / ||b|| computed
 * on the host for both. The matrix is kept in the format the selection measures fastest, as
 * matrix.put would.
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "solver/precond/amg/amg.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/formats/select.h"
#include "solver/solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_BA_NRHS_MAX 64

typedef struct kd_ba_run {
    int64_t iterations;
    double ms, relres, iterate_ms; /* iterate_ms: the solver's own, of the last solve */
    int converged;
} kd_ba_run_t;

/* `repeat` solves of the k columns of b (the median's time), after one untimed; iterations and
 * relres the largest over the columns. */
static int kd_ba_solve(kd_ocl_t *ocl, kd_matrix_t *A, const kd_csr_t *csr, int64_t k,
                       const void *b, const double *bw, void *x, kd_solve_params_t *prm,
                       int repeat, kd_ba_run_t *out, kd_err_t *err)
{
    double t[64];
    kd_solve_result_t res[KD_BA_NRHS_MAX];
    const size_t column = (size_t)csr->rows * kd_dtype_size(csr->dtype);
    for (int r = 0; r <= repeat && r < 64; r++) {
        const uint64_t t0 = kd_clock_ns();
        if (kd_solve(ocl, A, k, b, NULL, x, prm, res, err) != KD_OK)
            return -1;
        t[r] = (double)(kd_clock_ns() - t0) / 1e6;
        out->iterations = 0;
        out->converged = 1;
        for (int64_t c = 0; c < k; c++) {
            if (res[c].iterations > out->iterations)
                out->iterations = res[c].iterations;
            out->converged &= res[c].status == KD_SOLVE_CONVERGED;
            kd_solve_result_free(&res[c]);
        }
        out->iterate_ms = res[0].iterate_ms;
    }
    out->ms = kd_bench_median(t + 1, (size_t)(repeat < 63 ? repeat : 63));
    out->relres = 0.0;
    for (int64_t c = 0; c < k; c++)
        out->relres = fmax(out->relres, kd_bench_relres(csr, bw + c * csr->rows,
                                                        (const char *)x + (size_t)c * column));
    return 0;
}

/* Device time by kernel of `runs` applies of P to k columns of ones, per apply, on one line. */
static int kd_ba_profile_apply(kd_ocl_t *ocl, const kd_precond_t *P, int64_t n, int64_t k,
                               kd_dtype_t dtype, int runs, kd_err_t *err)
{
    kd_multivec_t r = {0}, z = {0};
    kd_ocl_kernel_time_t times[KD_OCL_KERNEL_TIMES_MAX];
    size_t count = 0;
    int rc = kd_multivec_alloc(ocl, n, k, dtype, &r, err);
    if (rc == KD_OK)
        rc = kd_multivec_alloc(ocl, n, k, dtype, &z, err);
    for (int64_t c = 0; c < k && rc == KD_OK; c++)
        rc = kd_vec_fill(ocl, &r.cols[c], 1.0, err);
    if (rc == KD_OK)
        rc = P->ops->apply(ocl, P, &r, &z, err); /* warm: programs built, buffers allocated */
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    kd_ocl_kernel_profile_begin(ocl);
    for (int i = 0; i < runs && rc == KD_OK; i++)
        rc = P->ops->apply(ocl, P, &r, &z, err);
    const int rc2 = kd_ocl_kernel_profile_end(ocl, times, KD_OCL_KERNEL_TIMES_MAX, &count, err);
    if (rc == KD_OK && rc2 == KD_OK) {
        double total = 0.0;
        for (size_t i = 0; i < count; i++)
            total += times[i].ms;
        printf("#   apply on %lld column%s: %.3f ms device (%.3f a column);", (long long)k,
               k > 1 ? "s" : "", total / runs, total / runs / (double)k);
        for (size_t i = 0; i < count; i++)
            printf(" %s %.3f (%.0f)", times[i].name, times[i].ms / runs,
                   (double)times[i].launches / runs);
        printf("\n");
    }
    if (P->ops->finish != NULL)
        P->ops->finish(P);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
    return rc != KD_OK ? rc : rc2;
}

static void kd_ba_usage(void)
{
    fprintf(
        stderr,
        "usage: krylov-bench amg [options] MATRIX...\n"
        "  --device SEL        auto | gpu | cpu | N (default auto)\n"
        "  --dtype T           float64 (default) | float32\n"
        "  --rtol R            relative residual to reach (default 1e-8)\n"
        "  --repeat N          timed solves per method, median (default 3)\n"
        "  --threshold T       AMG strength threshold (default: the preconditioner's, 0)\n"
        "  --format NAME       force the matrix's format (default: measured, as matrix.put)\n"
        "  --fused 0|1         AMG's fused V-cycle (default: the preconditioner's, 1)\n"
        "  --tail-rows N       AMG: levels of at most N rows in one launch (0: none)\n"
        "  --aggregation 0|1   AMG's aggregates on the host (0) or the device (1)\n"
        "  --max-levels N      AMG's levels at most (default: the preconditioner's, 10)\n"
        "  --nrhs K            also an AMG-PCG solve of K right-hand sides at once (b_j = (1 + j / K)\n"
        "                      ones: each column's iterations are one's), its time per column\n"
        "                      against one's (default 1: none)\n"
        "MATRIX: lap2d:N, lap3d:N, aniso2d:N:EPS, kronlap3d:N, elast3d:N, ... or a .mtx file\n");
}

int kd_bench_amg_main(int argc, char **argv)
{
    const char *device = "auto", *format = NULL;
    kd_dtype_t dtype = KD_DTYPE_F64;
    double rtol = 1e-8, threshold = -1.0, block_size = 0.0, fused = -1.0, tail_rows = -1.0,
           aggregation = -1.0, max_levels = -1.0;
    int repeat = 3, first = argc, nrhs = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && has)
            device = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && has)
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        else if (strcmp(a, "--rtol") == 0 && has)
            rtol = atof(argv[++i]);
        else if (strcmp(a, "--repeat") == 0 && has)
            repeat = atoi(argv[++i]);
        else if (strcmp(a, "--threshold") == 0 && has)
            threshold = atof(argv[++i]);
        else if (strcmp(a, "--block-size") == 0 && has)
            block_size = atof(argv[++i]);
        else if (strcmp(a, "--fused") == 0 && has)
            fused = atof(argv[++i]);
        else if (strcmp(a, "--tail-rows") == 0 && has)
            tail_rows = atof(argv[++i]);
        else if (strcmp(a, "--aggregation") == 0 && has)
            aggregation = atof(argv[++i]);
        else if (strcmp(a, "--max-levels") == 0 && has)
            max_levels = atof(argv[++i]);
        else if (strcmp(a, "--nrhs") == 0 && has)
            nrhs = atoi(argv[++i]);
        else if (strcmp(a, "--format") == 0 && has)
            format = argv[++i];
        else if (a[0] == '-') {
            kd_ba_usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        } else {
            first = i;
            break;
        }
    }
    if (first >= argc || repeat < 1 || nrhs < 1 || nrhs > KD_BA_NRHS_MAX) {
        kd_ba_usage();
        return 2;
    }
    kd_ocl_t *ocl = NULL;
    kd_err_t err = {0};
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench amg: %s\n", err.message);
        return 1;
    }
    printf("# device: %s; %s, rtol %g, b = ones, median of %d solves\n", kd_ocl_desc(ocl)->name,
           kd_dtype_name(dtype), rtol, repeat);
    printf("%-22s %9s %10s | %6s %9s | %3s %5s %9s %8s %8s | %5s %9s %8s | %6s %6s\n", "matrix",
           "rows", "nnz", "jac_it", "jac_ms", "lev", "opcx", "setup_ms", "spgemm", "host", "amg_it",
           "amg_ms", "relres", "solve", "+setup");
    int status = 0;
    kd_precond_options_t opt = {0};
    if (threshold >= 0.0) {
        snprintf(opt.items[opt.count].name, sizeof(opt.items[0].name), "threshold");
        opt.items[opt.count++].value = threshold;
    }
    if (fused >= 0.0) {
        snprintf(opt.items[opt.count].name, sizeof(opt.items[0].name), "fused");
        opt.items[opt.count++].value = fused;
    }
    if (tail_rows >= 0.0) {
        snprintf(opt.items[opt.count].name, sizeof(opt.items[0].name), "tail_rows");
        opt.items[opt.count++].value = tail_rows;
    }
    if (aggregation >= 0.0) {
        snprintf(opt.items[opt.count].name, sizeof(opt.items[0].name), "aggregation");
        opt.items[opt.count++].value = aggregation;
    }
    if (max_levels >= 0.0) {
        snprintf(opt.items[opt.count].name, sizeof(opt.items[0].name), "max_levels");
        opt.items[opt.count++].value = max_levels;
    }
    if (block_size > 0.0) {
        snprintf(opt.items[opt.count].name, sizeof(opt.items[0].name), "block_size");
        opt.items[opt.count++].value = block_size;
    }
    { /* Warm-up: the kernels' programs are built (and the driver's cache filled) before any
       * setup is timed, as a server does before READY. */
        kd_csr_t *w = kd_matgen_by_name("lap2d:64", dtype);
        kd_matrix_t *WA = NULL;
        const kd_precond_t *WP = NULL;
        kd_precond_options_t wopt = {0}; /* the aggregation asked for: its kernels too */
        if (aggregation >= 0.0) {
            snprintf(wopt.items[0].name, sizeof(wopt.items[0].name), "aggregation");
            wopt.items[wopt.count++].value = aggregation;
        }
        if (w != NULL && kd_matrix_upload(ocl, w, KD_FMT_CSR_SCALAR, &WA, &err) == KD_OK)
            (void)kd_precond_get(ocl, WA, &kd_precond_amg, wopt.count > 0 ? &wopt : NULL, w, &WP,
                                 &err);
        kd_matrix_free(WA);
        kd_csr_free(w);
    }
    for (int mi = first; mi < argc; mi++) {
        kd_csr_t *csr = kd_matgen_by_name(argv[mi], dtype);
        if (csr == NULL) {
            status = 1;
            continue;
        }
        kd_matrix_t *A = NULL;
        kd_select_result_t sel;
        if (kd_select_upload(ocl, csr, format, KD_SELECT_MEASURE, &A, &sel, &err) != KD_OK) {
            fprintf(stderr, "%s: %s\n", argv[mi], err.message);
            kd_csr_free(csr);
            status = 1;
            continue;
        }
        const int64_t n = csr->rows;
        void *b = malloc((size_t)(n * nrhs) * kd_dtype_size(dtype) + 8);
        void *x = malloc((size_t)(n * nrhs) * kd_dtype_size(dtype) + 8);
        double *bw = malloc((size_t)(n * nrhs) * sizeof(double) + 8);
        for (int64_t c = 0; c < nrhs; c++)
            for (int64_t i = 0; i < n; i++) {
                const double v = 1.0 + (double)c / (double)nrhs;
                kd_store_real(b, dtype, (size_t)(c * n + i), v);
                bw[c * n + i] = v;
            }
        kd_solve_params_t prm;
        kd_solve_params_default(&prm);
        prm.rtol = rtol;
        prm.maxiter = 100000;
        kd_ba_run_t jac = {0}, amg = {0};
        kd_amg_stats_t st = {0};
        int failed = kd_method_choose("cg", "jacobi", &prm.method, &prm.precond, &err) != KD_OK ||
                     kd_ba_solve(ocl, A, csr, 1, b, bw, x, &prm, repeat, &jac, &err) != 0;
        const kd_precond_t *P = NULL;
        double setup_wall = 0.0;
        if (!failed) {
            prm.precond = &kd_precond_amg;
            prm.precond_options = opt.count > 0 ? &opt : NULL;
            prm.csr = csr;
            const uint64_t t0 = kd_clock_ns();
            failed = kd_precond_get(ocl, A, &kd_precond_amg, prm.precond_options, csr, &P, &err) !=
                         KD_OK ||
                     kd_ocl_finish(ocl, &err) != KD_OK;
            setup_wall = (double)(kd_clock_ns() - t0) / 1e6;
            failed = failed || kd_amg_describe(P, &st, &err) != KD_OK ||
                     kd_ba_solve(ocl, A, csr, 1, b, bw, x, &prm, repeat, &amg, &err) != 0;
        }
        kd_ba_run_t many = {0};
        if (!failed && nrhs > 1)
            failed = kd_ba_solve(ocl, A, csr, nrhs, b, bw, x, &prm, repeat, &many, &err) != 0;
        char label[64];
        kd_bench_matrix_name(argv[mi], label, sizeof(label));
        if (failed) {
            fprintf(stderr, "%s: %s\n", label, err.message);
            status = 1;
        } else {
            printf("%-22s %9lld %10lld | %6lld %9.2f | %3d %5.2f %9.1f %8.1f %8.1f | %5lld %9.2f "
                   "%8.1e | %6.3f %6.3f%s\n",
                   label, (long long)n, (long long)csr->nnz, (long long)jac.iterations, jac.ms,
                   st.levels, st.operator_complexity, setup_wall, st.spgemm_ms, st.host_ms,
                   (long long)amg.iterations, amg.ms, amg.relres, amg.ms / jac.ms,
                   (amg.ms + setup_wall) / jac.ms,
                   jac.converged && amg.converged ? "" : "  (NOT CONVERGED)");
            printf("#   format %s; levels:", kd_format_name(A->format));
            for (int l = 0; l < st.levels; l++)
                printf(" %lld/%lld", (long long)st.rows[l], (long long)st.nnz[l]);
            printf("; jacobi relres %.1e\n", jac.relres);
            if (nrhs > 1)
                printf("#   %d right-hand sides: %.2f ms, %.2f ms a column = %.3f x one's (%lld its "
                       "at most, relres %.1e)%s\n",
                       nrhs, many.ms, many.ms / nrhs, many.ms / nrhs / amg.ms,
                       (long long)many.iterations, many.relres,
                       many.converged ? "" : "  (NOT CONVERGED)");
            if (nrhs > 1 && (kd_ba_profile_apply(ocl, P, n, 1, dtype, 5, &err) != KD_OK ||
                             kd_ba_profile_apply(ocl, P, n, nrhs, dtype, 5, &err) != KD_OK))
                fprintf(stderr, "%s: profile: %s\n", label, err.message);
            printf("#   setup %.2f solves; phases ms:", setup_wall / amg.ms);
            for (int ph = 0; ph < KD_AMG_PHASES; ph++)
                printf(" %s=%.1f", kd_amg_phase_names[ph], st.phase_ms[ph]);
            printf("\n");
            kd_amg_profile_t pr;
            if (kd_amg_profile(ocl, P, 10, &pr, &err) == KD_OK) {
                printf(
                    "#   V-cycle %.3f ms device span, %.3f ms wall, %.0f launches; SpMV ms A/P/R "
                    "by level:",
                    pr.vcycle_device_ms, pr.vcycle_wall_ms, pr.vcycle_launches);
                for (int l = 0; l < st.levels; l++)
                    printf(" %.3f/%.3f/%.3f", pr.a_ms[l], pr.p_ms[l], pr.r_ms[l]);
                printf("; an iteration %.3f ms (jacobi %.3f) by the solver's iterate_ms\n",
                       amg.iterate_ms / (double)amg.iterations,
                       jac.iterate_ms / (double)jac.iterations);
            }
        }
        fflush(stdout);
        kd_matrix_free(A);
        kd_csr_free(csr);
        free(b);
        free(x);
        free(bw);
    }
    kd_ocl_close(ocl);
    return status;
}
