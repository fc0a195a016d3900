/*
 * krylov-bench refresh: what a new time step's values cost a preconditioner (issue 22): per
 * matrix A1 and A2 = S A1 S + D (S, D positive diagonal: A1's pattern, SPD when A1 is, every
 * value changed), per preconditioner, the wall time of a full setup on A2 against a refresh of
 * A1's setup onto A2 (kd_precond_refresh; each the median of --repeat, the setup dropped before
 * each run, the device finished), their ratio, and PCG's iterations on A2 (b = ones, to --rtol)
 * with each: the refresh must keep them (amg: within 10%). Programs are built by an untimed run
 * of each first. Both matrices are kept in the format the selection's heuristic picks.
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

static void kd_br_usage(void)
{
    fprintf(stderr, "usage: krylov-bench refresh [options] MATRIX...\n"
                    "  --device SEL        auto | gpu | cpu | N (default auto)\n"
                    "  --dtype T           float64 (default) | float32\n"
                    "  --precond LIST      preconditioners (default amg,ilu0,ic0,jacobi)\n"
                    "  --rtol R            PCG's relative residual (default 1e-8)\n"
                    "  --repeat N          timed setups and refreshes, median (default 3)\n"
                    "MATRIX: lap2d:N, lap3d:N, ... or a .mtx file (symmetric positive definite)\n");
}

/* S A S + D: a_ij s_i s_j, plus 0..0.3 |a_ii| on the diagonal (deterministic by position). */
static void kd_br_perturb(kd_csr_t *a)
{
    double *s = malloc((size_t)a->rows * sizeof(double) + 8);
    for (int64_t i = 0; s != NULL && i < a->rows; i++)
        s[i] = 0.6 + 0.8 * kd_matgen_hash01(22, (uint64_t)i, 1);
    for (int64_t i = 0; s != NULL && i < a->rows; i++)
        for (int32_t k = a->indptr[i]; k < a->indptr[i + 1]; k++) {
            double v = kd_csr_value(a, k) * s[i] * s[a->indices[k]];
            if (a->indices[k] == i)
                v += 0.3 * kd_matgen_hash01(22, (uint64_t)i, 2) * fabs(v);
            kd_store_real(a->values, a->dtype, (size_t)k, v);
        }
    free(s);
}

static kd_matrix_t *kd_br_upload(kd_ocl_t *ocl, const kd_csr_t *csr, kd_err_t *err)
{
    kd_matrix_t *A = NULL;
    kd_select_result_t sel;
    return kd_select_upload(ocl, csr, NULL, KD_SELECT_HEURISTIC, &A, &sel, err) == KD_OK ? A : NULL;
}

/* PCG (GMRES for ilu0) on A with its held `ops`: the iterations, negative when not converged. */
static int64_t kd_br_iterations(kd_ocl_t *ocl, kd_matrix_t *A, const kd_csr_t *csr,
                                const kd_precond_ops_t *ops, double rtol, kd_err_t *err)
{
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    prm.rtol = rtol;
    prm.maxiter = 20000;
    prm.csr = csr;
    if (kd_method_choose(ops->symmetric ? "cg" : "gmres", ops->name, &prm.method, &prm.precond,
                         err) != KD_OK)
        return 0;
    const size_t v = kd_dtype_size(A->dtype);
    void *b = malloc((size_t)A->rows * v + 8), *x = calloc((size_t)A->rows + 1, v);
    for (int64_t i = 0; b != NULL && i < A->rows; i++)
        kd_store_real(b, A->dtype, (size_t)i, 1.0);
    kd_solve_result_t res;
    int64_t its = 0;
    if (b != NULL && x != NULL && kd_solve(ocl, A, 1, b, NULL, x, &prm, &res, err) == KD_OK) {
        its = res.status == KD_SOLVE_CONVERGED ? res.iterations : -res.iterations;
        kd_solve_result_free(&res);
    }
    free(b);
    free(x);
    return its;
}

/* One row: `ops` set up on A1 (held), then full setups and refreshes onto A2, timed. */
static int kd_br_row(kd_ocl_t *ocl, const char *label, kd_matrix_t *A1, const kd_csr_t *c1,
                     kd_matrix_t *A2, const kd_csr_t *c2, const kd_precond_ops_t *ops, double rtol,
                     int repeat, kd_err_t *err)
{
    const kd_precond_t *P = NULL;
    kd_precond_origin_t how = KD_PRECOND_HELD;
    double full[33], fresh[33], spgemm_ms = 0.0, host_ms = 0.0;
    int64_t its_full = 0, its_refresh = 0;
    if (kd_precond_get(ocl, A1, ops, NULL, c1, &P, err) != KD_OK)
        return -1;
    for (int r = 0; r <= repeat && r < 33; r++) { /* run 0 builds the programs: not counted */
        kd_precond_release_all(A2);
        uint64_t t0 = kd_clock_ns();
        if (kd_precond_get(ocl, A2, ops, NULL, c2, &P, err) != KD_OK ||
            kd_ocl_finish(ocl, err) != KD_OK)
            return -1;
        full[r] = (double)(kd_clock_ns() - t0) / 1e6;
        kd_amg_stats_t st;
        if (ops == &kd_precond_amg && kd_amg_describe(P, &st, err) == KD_OK) {
            spgemm_ms = st.spgemm_ms;
            host_ms = st.host_ms;
        }
        if (r == repeat && (its_full = kd_br_iterations(ocl, A2, c2, ops, rtol, err)) == 0)
            return -1;
        kd_precond_release_all(A2);
        t0 = kd_clock_ns();
        if (kd_precond_refresh(ocl, A1, A2, ops, NULL, c2, &P, &how, err) != KD_OK ||
            kd_ocl_finish(ocl, err) != KD_OK)
            return -1;
        fresh[r] = (double)(kd_clock_ns() - t0) / 1e6;
        if (r == repeat && (its_refresh = kd_br_iterations(ocl, A2, c2, ops, rtol, err)) == 0)
            return -1;
    }
    const int n = repeat < 32 ? repeat : 32;
    const double setup_ms = kd_bench_median(full + 1, (size_t)n),
                 refresh_ms = kd_bench_median(fresh + 1, (size_t)n);
    printf("%-16s %-12s %10.1f %10.1f %7.3f %8lld %8lld  %s\n", label, ops->name, setup_ms,
           refresh_ms, setup_ms > 0.0 ? refresh_ms / setup_ms : 0.0, (long long)its_full,
           (long long)its_refresh, kd_precond_origin_name(how));
    /* A time step's refresh: from a hierarchy that was itself refreshed (what it keeps for the
     * next one is used), onto A1's values again (A3 on A1's pattern arrays). */
    kd_matrix_t *A3 = NULL;
    if (kd_precond_refresh(ocl, A1, A2, ops, NULL, c2, &P, &how, err) == KD_OK &&
        kd_matrix_with_values(ocl, A1, c1, &A3, NULL, err) == KD_OK) {
        double chained[33];
        for (int r = 0; r <= repeat && r < 33; r++) {
            kd_precond_release_all(A3);
            const uint64_t t0 = kd_clock_ns();
            if (kd_precond_refresh(ocl, A2, A3, ops, NULL, c1, &P, &how, err) != KD_OK ||
                kd_ocl_finish(ocl, err) != KD_OK)
                break;
            chained[r] = (double)(kd_clock_ns() - t0) / 1e6;
            if (r == repeat)
                printf("#   %s refreshed from a refreshed setup (a time step's): %.1f ms (%s)\n",
                       ops->name, kd_bench_median(chained + 1, (size_t)n),
                       kd_precond_origin_name(how));
        }
    }
    kd_err_clear(err);
    if (ops == &kd_precond_amg) {
        kd_amg_stats_t st;
        if (kd_amg_describe(P, &st, err) == KD_OK) {
            printf("#   amg: %d levels, operator complexity %.2f, the full setup's SpGEMMs %.1f ms "
                   "and host %.1f ms (of its last run)\n",
                   st.levels, st.operator_complexity, spgemm_ms, host_ms);
            printf("#   the last refresh's steps, ms:");
            for (int ph = 0; ph < KD_AMG_PHASES; ph++)
                if (st.phase_ms[ph] > 0.0)
                    printf(" %s=%.1f", kd_amg_phase_names[ph], st.phase_ms[ph]);
            printf("\n");
        }
    }
    kd_precond_release_all(A2);
    kd_matrix_free(A3);
    return 0;
}

int kd_bench_refresh_main(int argc, char **argv)
{
    const char *device = "auto", *list = "amg,ilu0,ic0,jacobi";
    kd_dtype_t dtype = KD_DTYPE_F64;
    double rtol = 1e-8;
    int repeat = 3, first = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && has)
            device = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && has)
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        else if (strcmp(a, "--precond") == 0 && has)
            list = argv[++i];
        else if (strcmp(a, "--rtol") == 0 && has)
            rtol = atof(argv[++i]);
        else if (strcmp(a, "--repeat") == 0 && has)
            repeat = atoi(argv[++i]);
        else if (a[0] == '-') {
            kd_br_usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        } else {
            first = i;
            break;
        }
    }
    if (first >= argc || repeat < 1) {
        kd_br_usage();
        return 2;
    }
    kd_ocl_t *ocl = NULL;
    kd_err_t err = {0};
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench refresh: %s\n", err.message);
        return 1;
    }
    printf("# device: %s; %s, A2 = S A1 S + D, median of %d; iterations to %g, b = ones "
           "(cg; gmres for ilu0)\n",
           kd_ocl_desc(ocl)->name, kd_dtype_name(dtype), repeat, rtol);
    printf("%-16s %-12s %10s %10s %7s %8s %8s  %s\n", "matrix", "precond", "setup_ms", "refresh",
           "ratio", "its_full", "its_refr", "refresh was");
    int status = 0;
    for (int mi = first; mi < argc; mi++) {
        kd_csr_t *c1 = kd_matgen_by_name(argv[mi], dtype), *c2 = NULL;
        if (c1 == NULL || kd_csr_convert(c1, dtype, &c2, &err) != KD_OK) {
            kd_csr_free(c1);
            status = 1;
            continue;
        }
        kd_br_perturb(c2);
        char label[64];
        kd_bench_matrix_name(argv[mi], label, sizeof(label));
        kd_matrix_t *A1 = kd_br_upload(ocl, c1, &err), *A2 = NULL;
        /* A2 on A1's pattern arrays, as a put with like makes it (the refresh then knows the
         * pattern without a pass over it); uploaded whole where the format does not share */
        if (A1 != NULL && kd_matrix_with_values(ocl, A1, c2, &A2, NULL, &err) != KD_OK) {
            kd_err_clear(&err);
            A2 = kd_br_upload(ocl, c2, &err);
        }
        char names[128];
        snprintf(names, sizeof(names), "%s", list);
        int failed = A2 == NULL;
        for (char *s = strtok(names, ","); s != NULL && !failed; s = strtok(NULL, ",")) {
            const kd_precond_ops_t *ops = kd_precond_find(s);
            if (ops == NULL || ops->setup == NULL) {
                fprintf(stderr, "krylov-bench refresh: no preconditioner %s to set up\n", s);
                status = 1;
                continue;
            }
            failed = kd_br_row(ocl, label, A1, c1, A2, c2, ops, rtol, repeat, &err) != 0;
        }
        if (failed) {
            fprintf(stderr, "%s: %s\n", label, err.message);
            status = 1;
        }
        fflush(stdout);
        kd_matrix_free(A1);
        kd_matrix_free(A2);
        kd_csr_free(c1);
        kd_csr_free(c2);
    }
    kd_ocl_close(ocl);
    return status;
}
