/*
 * krylov-bench methods: every method x preconditioner a user may try, solved to a relative
 * residual (default 1e-8) on each matrix, b = ones: the answer a user needs first is which
 * combinations converge at all, then how fast. Per row: the status the solver reports, its
 * iterations, the preconditioner's setup time (once, as the first solve on a resident matrix pays
 * it), the solve's wall time (the median of --repeat after one untimed), ms per iteration by the
 * solver's own iterate_ms, and the true relative residual ||b - A x|| / ||b|| computed on the host
 * in float64. A combination the server refuses (a method that needs a symmetric matrix, a zero
 * pivot, ...) gets a row saying so. The matrix is kept in the format the selection measures
 * fastest, as matrix.put would.
 *
 * An entry is METHOD[+PRECONDITIONER[@NAME=VALUE...]]: gmres, bicgstab+jacobi, gmres+ilu0@sweeps=0,
 * cg+block_jacobi@block_size=3, or auto (the row shows what it chose: auto=cg), as on the wire.
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/formats/select.h"
#include "solver/solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "gmres+ilu0@sweeps=2@x=1" into its method, preconditioner and options (in place). */
static int kd_bm_parse(char *entry, const char **method, const char **precond,
                       kd_precond_options_t *opt)
{
    memset(opt, 0, sizeof(*opt));
    char *at = strchr(entry, '@');
    if (at != NULL)
        *at++ = '\0';
    char *plus = strchr(entry, '+');
    if (plus != NULL)
        *plus++ = '\0';
    *method = entry;
    *precond = plus;
    while (at != NULL && *at != '\0') {
        char *next = strchr(at, '@');
        if (next != NULL)
            *next++ = '\0';
        char *eq = strchr(at, '=');
        if (eq == NULL || opt->count == KD_PRECOND_OPTIONS_MAX)
            return -1;
        *eq = '\0';
        snprintf(opt->items[opt->count].name, sizeof(opt->items[0].name), "%s", at);
        opt->items[opt->count++].value = atof(eq + 1);
        at = next;
    }
    return 0;
}

static void kd_bm_usage(void)
{
    fprintf(stderr,
            "usage: krylov-bench methods [options] MATRIX...\n"
            "  --device SEL        auto | gpu | cpu | N (default auto)\n"
            "  --dtype T           float64 (default) | float32\n"
            "  --methods LIST      METHOD[+PRECONDITIONER[@NAME=VALUE...]], comma-separated\n"
            "                      (default gmres,gmres+jacobi,bicgstab,bicgstab+jacobi)\n"
            "  --rtol R            relative residual to reach (default 1e-8)\n"
            "  --maxiter N         iterations at most (default 20000)\n"
            "  --restart M         GMRES(m) (default: the solver's, 30)\n"
            "  --repeat N          timed solves per row, median (default 3)\n"
            "  --format NAME       force the matrix's format (default: measured, as matrix.put)\n"
            "MATRIX: lap3d:N, convdiff3d:N[:C], shifted3d:N:S, ... or a .mtx file\n");
}

int kd_bench_methods_main(int argc, char **argv)
{
    const char *device = "auto", *format = NULL;
    kd_dtype_t dtype = KD_DTYPE_F64;
    double rtol = 1e-8;
    int64_t maxiter = 20000, restart = 0;
    int repeat = 3, first = argc;
    char list[1024] = "gmres,gmres+jacobi,bicgstab,bicgstab+jacobi";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && has)
            device = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && has)
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        else if (strcmp(a, "--methods") == 0 && has)
            snprintf(list, sizeof(list), "%s", argv[++i]);
        else if (strcmp(a, "--rtol") == 0 && has)
            rtol = atof(argv[++i]);
        else if (strcmp(a, "--maxiter") == 0 && has)
            maxiter = atoll(argv[++i]);
        else if (strcmp(a, "--restart") == 0 && has)
            restart = atoll(argv[++i]);
        else if (strcmp(a, "--repeat") == 0 && has)
            repeat = atoi(argv[++i]);
        else if (strcmp(a, "--format") == 0 && has)
            format = argv[++i];
        else if (a[0] == '-') {
            kd_bm_usage();
            return strcmp(a, "--help") == 0 ? 0 : 2;
        } else {
            first = i;
            break;
        }
    }
    if (first >= argc || repeat < 1 || repeat > 63) {
        kd_bm_usage();
        return 2;
    }
    char *entries[64];
    int nentries = 0;
    for (char *tok = strtok(list, ","); tok != NULL && nentries < 64; tok = strtok(NULL, ","))
        entries[nentries++] = tok;
    kd_ocl_t *ocl = NULL;
    kd_err_t err = {0};
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench methods: %s\n", err.message);
        return 1;
    }
    printf("# device: %s; %s, rtol %g, maxiter %lld, b = ones, median of %d solves\n",
           kd_ocl_desc(ocl)->name, kd_dtype_name(dtype), rtol, (long long)maxiter, repeat);
    printf("%-18s %8s %9s  %-26s %-14s %6s %9s %9s %8s %8s %3s\n", "matrix", "rows", "nnz",
           "method", "status", "iters", "setup_ms", "solve_ms", "ms/it", "relres", "rst");
    int status = 0;
    for (int mi = first; mi < argc; mi++) {
        kd_csr_t *csr = kd_matgen_by_name(argv[mi], dtype);
        if (csr == NULL) {
            status = 1;
            continue;
        }
        char label[64];
        kd_bench_matrix_name(argv[mi], label, sizeof(label));
        kd_matrix_t *A = NULL;
        kd_select_result_t sel;
        if (kd_select_upload(ocl, csr, format, KD_SELECT_MEASURE, &A, &sel, &err) != KD_OK) {
            fprintf(stderr, "%s: %s\n", label, err.message);
            kd_csr_free(csr);
            status = 1;
            continue;
        }
        const int64_t n = csr->rows;
        const size_t vb = kd_dtype_size(dtype);
        void *b = malloc((size_t)n * vb + 8), *x = malloc((size_t)n * vb + 8);
        for (int64_t i = 0; i < n && b != NULL; i++)
            kd_store_real(b, dtype, (size_t)i, 1.0);
        for (int e = 0; e < nentries && b != NULL && x != NULL; e++) {
            char entry[256];
            const char *mname = NULL, *pname = NULL;
            kd_precond_options_t opt;
            snprintf(entry, sizeof(entry), "%s", entries[e]);
            kd_solve_params_t prm;
            kd_solve_params_default(&prm);
            prm.rtol = rtol;
            prm.maxiter = maxiter;
            prm.restart = restart;
            prm.csr = csr;
            const kd_precond_t *P = NULL;
            double setup_ms = 0.0, t[64];
            kd_solve_result_t res = {0};
            int rc = kd_bm_parse(entry, &mname, &pname, &opt) == 0
                         ? kd_method_choose_for(A, mname, pname, &prm.method, &prm.precond, &err)
                         : kd_err_set(&err, KD_EBADREQ, "bad entry '%s'", entries[e]);
            prm.precond_options = opt.count > 0 ? &opt : NULL;
            if (rc == KD_OK) {
                const uint64_t t0 = kd_clock_ns();
                rc = kd_precond_get(ocl, A, prm.precond, prm.precond_options, csr, &P, &err);
                if (rc == KD_OK)
                    rc = kd_ocl_finish(ocl, &err);
                setup_ms = (double)(kd_clock_ns() - t0) / 1e6;
            }
            /* auto as the server runs it: a second method where its first broke down. */
            const int is_auto = rc == KD_OK && strcmp(mname, KD_METHOD_AUTO) == 0;
            kd_solve_params_t ran = prm;
            for (int r = 0; rc == KD_OK && r <= repeat; r++) {
                kd_solve_result_free(&res);
                ran = prm;
                const uint64_t t0 = kd_clock_ns();
                rc = is_auto ? kd_solve_auto(ocl, A, 1, b, NULL, x, &ran, &res, &err)
                             : kd_solve(ocl, A, 1, b, NULL, x, &ran, &res, &err);
                t[r] = (double)(kd_clock_ns() - t0) / 1e6;
            }
            if (rc != KD_OK) {
                printf("%-18s %8lld %9lld  %-26s refused: %.100s\n", label, (long long)n,
                       (long long)csr->nnz, entries[e], err.message);
            } else {
                const double ms = kd_bench_median(t + 1, (size_t)repeat);
                char shown[64];
                snprintf(shown, sizeof(shown), "%s%s%s", entries[e], is_auto ? "=" : "",
                         is_auto ? ran.method->name : "");
                printf("%-18s %8lld %9lld  %-26s %-14s %6lld %9.2f %9.2f %8.4f %8.1e %3lld\n",
                       label, (long long)n, (long long)csr->nnz, shown,
                       kd_solve_status_name(res.status), (long long)res.iterations, setup_ms, ms,
                       res.iterations > 0 ? res.iterate_ms / (double)res.iterations : 0.0,
                       kd_bench_relres(csr, NULL, x), (long long)res.restarts);
            }
            kd_solve_result_free(&res);
            fflush(stdout);
        }
        printf("#   %s: format %s\n", label, kd_format_name(A->format));
        kd_matrix_free(A);
        kd_csr_free(csr);
        free(b);
        free(x);
    }
    kd_ocl_close(ocl);
    return status;
}
