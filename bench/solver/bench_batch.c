/*
 * krylov-bench batch: many small systems of one pattern (issue 18's power-flow case), solved
 * three ways on the same systems to the same rtol, b = ones + a per-system perturbation:
 *
 *   batch    every system in one kd_batch_solve (one work-group per system, a few launches)
 *   alone    system 0 through kd_solve, today's path for one small system, its time times the
 *            number of systems being what a loop over them would take
 *   blockdiag the block-diagonal workaround: all systems as one matrix, one kd_solve (every
 *            system iterates until the worst converges)
 *
 * and checks the batch against the single-system path: system 0's iterations alone and in the
 * batch, the true residual ||b - A x|| / ||b|| of every system on the host. The pattern: a real
 * power network (default tests/matrices/494_bus.mtx) with two unknowns per bus (a power-flow
 * Jacobian's angle and magnitude): P kron I2 + I kron [[0,1],[1,0]], 988 rows and 4,320
 * nonzeros for 494_bus; the values perturbed per system, symmetric, diagonally dominant (SPD).
 * --export FILE writes the batch for bench/peers/cupy_batch.py (CuPy's cg in a Python loop).
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "solver/batch/batch.h"
#include "solver/methods/method.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The pattern P kron I2 + I kron [[0,1],[1,0]] of p (p's values ignored; float64). */
static kd_csr_t *kd_bb_two_per_bus(const kd_csr_t *p)
{
    const int64_t n = 2 * p->rows;
    kd_csr_t *out = NULL;
    kd_err_t err = {0};
    int64_t nnz = 0;
    for (int64_t i = 0; i < p->rows; i++) {
        int has_diag = 0;
        for (int64_t j = p->indptr[i]; j < p->indptr[i + 1]; j++)
            has_diag |= p->indices[j] == i;
        nnz += 2 * (p->indptr[i + 1] - p->indptr[i] + !has_diag) + 2;
    }
    if (kd_csr_alloc(n, n, nnz, KD_DTYPE_F64, &out, &err) != KD_OK)
        return NULL;
    int64_t at = 0;
    for (int64_t r = 0; r < n; r++) {
        const int64_t i = r / 2, half = r % 2;
        out->indptr[r] = (int32_t)at;
        int diag_done = 0;
        for (int64_t j = p->indptr[i]; j <= p->indptr[i + 1]; j++) {
            const int64_t c = j < p->indptr[i + 1] ? p->indices[j] : p->rows;
            if (!diag_done && c >= i) { /* the bus's own 2x2 block, in column order */
                out->indices[at++] = (int32_t)(2 * i);
                out->indices[at++] = (int32_t)(2 * i + 1);
                diag_done = 1;
            }
            if (j < p->indptr[i + 1] && c != i)
                out->indices[at++] = (int32_t)(2 * c + half);
        }
    }
    out->indptr[n] = (int32_t)at;
    out->nnz = at;
    return out;
}

/* k value sets on pattern p: symmetric off-diagonals -(0.2 + u), diagonal = row sum x 1.001 +
 * a margin in [0.001, 0.01): SPD, as badly conditioned as a weakly grounded network. */
static double *kd_bb_values(const kd_csr_t *p, int64_t k)
{
    double *v = malloc((size_t)(k * p->nnz) * sizeof(double));
    if (v == NULL)
        return NULL;
    for (int64_t s = 0; s < k; s++)
        for (int64_t i = 0; i < p->rows; i++) {
            double sum = 0.0;
            int64_t dpos = -1;
            for (int64_t j = p->indptr[i]; j < p->indptr[i + 1]; j++) {
                const int64_t c = p->indices[j];
                if (c == i) {
                    dpos = j;
                    continue;
                }
                const double h = kd_matgen_hash01((uint64_t)s, (uint64_t)(c < i ? c : i),
                                                  (uint64_t)(c < i ? i : c));
                v[s * p->nnz + j] = -(0.2 + h);
                sum += 0.2 + h;
            }
            v[s * p->nnz + dpos] =
                1.001 * sum + 0.001 + 0.009 * kd_matgen_hash01((uint64_t)s, (uint64_t)i, 9);
        }
    return v;
}

/* The batch file bench/peers/cupy_batch.py reads: "KDBATCH\0", int64 k, rows, nnz, int32
 * indptr[rows + 1], int32 indices[nnz], float64 values[k nnz], float64 b[k rows]. */
static int kd_bb_export(const char *path, const kd_csr_t *p, int64_t k, const double *values,
                        const double *b)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    const int64_t head[3] = {k, p->rows, p->nnz};
    int bad = fwrite("KDBATCH", 1, 8, f) != 8 || fwrite(head, 8, 3, f) != 3 ||
              fwrite(p->indptr, 4, (size_t)p->rows + 1, f) != (size_t)p->rows + 1 ||
              fwrite(p->indices, 4, (size_t)p->nnz, f) != (size_t)p->nnz ||
              fwrite(values, 8, (size_t)(k * p->nnz), f) != (size_t)(k * p->nnz) ||
              fwrite(b, 8, (size_t)(k * p->rows), f) != (size_t)(k * p->rows);
    bad |= fclose(f) != 0;
    if (bad)
        fprintf(stderr, "%s: write failed\n", path);
    return bad ? -1 : 0;
}

/* The block diagonal of the k systems (float64 host CSR). */
static kd_csr_t *kd_bb_block_diagonal(const kd_csr_t *p, int64_t k, const double *values)
{
    kd_csr_t *bd = NULL;
    kd_err_t err = {0};
    if (kd_csr_alloc(k * p->rows, k * p->cols, k * p->nnz, KD_DTYPE_F64, &bd, &err) != KD_OK)
        return NULL;
    for (int64_t s = 0; s < k; s++) {
        for (int64_t i = 0; i < p->rows; i++)
            bd->indptr[s * p->rows + i] = (int32_t)(s * p->nnz + p->indptr[i]);
        for (int64_t j = 0; j < p->nnz; j++)
            bd->indices[s * p->nnz + j] = (int32_t)(s * p->cols + p->indices[j]);
    }
    bd->indptr[k * p->rows] = (int32_t)(k * p->nnz);
    memcpy(bd->values, values, (size_t)(k * p->nnz) * sizeof(double));
    return bd;
}

/* System s of the batch as its own float64 CSR (shares nothing). */
static kd_csr_t *kd_bb_system(const kd_csr_t *p, const double *values, int64_t s)
{
    kd_csr_t *c = NULL;
    kd_err_t err = {0};
    if (kd_csr_alloc(p->rows, p->cols, p->nnz, KD_DTYPE_F64, &c, &err) != KD_OK)
        return NULL;
    memcpy(c->indptr, p->indptr, (size_t)(p->rows + 1) * 4);
    memcpy(c->indices, p->indices, (size_t)p->nnz * 4);
    memcpy(c->values, values + s * p->nnz, (size_t)p->nnz * 8);
    return c;
}

/* One kd_solve of A (k right-hand sides in one column of k n values), median of repeat. */
static int kd_bb_solve(kd_ocl_t *ocl, kd_matrix_t *A, const double *b, double *x,
                       const kd_solve_params_t *prm, int repeat, double *ms, int64_t *iterations,
                       kd_err_t *err)
{
    double t[32];
    for (int r = 0; r <= repeat && r < 32; r++) {
        kd_solve_result_t res;
        const uint64_t t0 = kd_clock_ns();
        if (kd_solve(ocl, A, 1, b, NULL, x, prm, &res, err) != KD_OK)
            return -1;
        t[r] = (double)(kd_clock_ns() - t0) / 1e6;
        *iterations = res.iterations;
        kd_solve_result_free(&res);
    }
    *ms = kd_bench_median(t + 1, (size_t)(repeat < 31 ? repeat : 31));
    return 0;
}

static void kd_bb_usage(void)
{
    fprintf(stderr,
            "usage: krylov-bench batch [options] [MATRIX]\n"
            "  --device SEL     auto | gpu | cpu | N (default auto)\n"
            "  --systems K      systems in the batch (default 1000)\n"
            "  --rtol R         relative residual to reach (default 1e-8)\n"
            "  --jacobi         Jacobi-preconditioned (default: none)\n"
            "  --repeat N       timed runs of each, median (default 3)\n"
            "  --no-blockdiag   skip the block-diagonal workaround\n"
            "  --export FILE    write the batch for bench/peers/cupy_batch.py\n"
            "MATRIX: the network pattern, a .mtx file (default tests/matrices/494_bus.mtx)\n");
}

typedef struct kd_bb_opts {
    const char *device, *matrix, *export_path;
    int64_t k;
    double rtol;
    int jacobi, repeat, blockdiag;
} kd_bb_opts_t;

static int kd_bb_parse(int argc, char **argv, kd_bb_opts_t *o)
{
    *o = (kd_bb_opts_t){"auto", "tests/matrices/494_bus.mtx", NULL, 1000, 1e-8, 0, 3, 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const int has = i + 1 < argc;
        if (strcmp(a, "--device") == 0 && has)
            o->device = argv[++i];
        else if (strcmp(a, "--systems") == 0 && has)
            o->k = atoll(argv[++i]);
        else if (strcmp(a, "--rtol") == 0 && has)
            o->rtol = atof(argv[++i]);
        else if (strcmp(a, "--repeat") == 0 && has)
            o->repeat = atoi(argv[++i]);
        else if (strcmp(a, "--export") == 0 && has)
            o->export_path = argv[++i];
        else if (strcmp(a, "--jacobi") == 0)
            o->jacobi = 1;
        else if (strcmp(a, "--no-blockdiag") == 0)
            o->blockdiag = 0;
        else if (a[0] != '-')
            o->matrix = a;
        else
            return strcmp(a, "--help") == 0 ? 1 : 2;
    }
    return o->k < 1 || o->repeat < 1 || o->repeat > 30 ? 2 : 0;
}

/* The batch in one call: median time, and every system's result. */
static int kd_bb_run_batch(kd_ocl_t *ocl, const kd_batch_t *B, const double *b, double *x,
                           const kd_bb_opts_t *o, kd_batch_result_t *res, double *ms,
                           kd_batch_report_t *rep, kd_err_t *err)
{
    const int64_t k = B->count;
    double *rtol = malloc((size_t)k * sizeof(double)), *atol = calloc((size_t)k, sizeof(double));
    int64_t *maxiter = malloc((size_t)k * sizeof(int64_t));
    for (int64_t s = 0; s < k; s++) {
        rtol[s] = o->rtol;
        maxiter[s] = 10 * B->rows;
    }
    kd_batch_params_t prm = {
        .method = KD_BATCH_CG, .jacobi = o->jacobi, .rtol = rtol, .atol = atol, .maxiter = maxiter};
    double t[32];
    int rc = KD_OK;
    for (int r = 0; rc == KD_OK && r <= o->repeat; r++) {
        for (int64_t s = 0; r > 0 && s < k; s++)
            kd_batch_result_free(&res[s]);
        const uint64_t t0 = kd_clock_ns();
        rc = kd_batch_solve(ocl, B, b, NULL, x, &prm, res, rep, err);
        t[r] = (double)(kd_clock_ns() - t0) / 1e6;
    }
    *ms = kd_bench_median(t + 1, (size_t)o->repeat);
    free(rtol);
    free(atol);
    free(maxiter);
    return rc;
}

int kd_bench_batch_main(int argc, char **argv)
{
    kd_bb_opts_t o;
    const int parsed = kd_bb_parse(argc, argv, &o);
    if (parsed != 0) {
        kd_bb_usage();
        return parsed == 1 ? 0 : 2;
    }
    kd_csr_t *net = kd_matgen_by_name(o.matrix, KD_DTYPE_F64);
    kd_csr_t *p = net != NULL ? kd_bb_two_per_bus(net) : NULL;
    kd_csr_free(net);
    if (p == NULL)
        return 1;
    const int64_t k = o.k, n = p->rows;
    double *values = kd_bb_values(p, k), *b = malloc((size_t)(k * n) * sizeof(double));
    double *x = malloc((size_t)(k * n) * sizeof(double));
    kd_batch_result_t *res = calloc((size_t)k, sizeof(*res));
    if (values == NULL || b == NULL || x == NULL || res == NULL) {
        fprintf(stderr, "krylov-bench batch: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < k * n; i++)
        b[i] = 1.0 + 0.5 * kd_matgen_hash01(77, (uint64_t)(i / n), (uint64_t)(i % n));
    if (o.export_path != NULL && kd_bb_export(o.export_path, p, k, values, b) != 0)
        return 1;
    kd_ocl_t *ocl = NULL;
    kd_err_t err = {0};
    kd_batch_t *B = NULL;
    if (kd_ocl_open(o.device, &ocl, &err) != KD_OK ||
        kd_batch_upload(ocl, p, values, k, &B, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench batch: %s\n", err.message);
        return 1;
    }
    printf("# device: %s; %lld systems of %lld rows, %lld nonzeros (%s, two unknowns per bus), "
           "cg%s, rtol %g, median of %d\n",
           kd_ocl_desc(ocl)->name, (long long)k, (long long)n, (long long)p->nnz, o.matrix,
           o.jacobi ? "+jacobi" : "", o.rtol, o.repeat);
    double batch_ms = 0.0;
    kd_batch_report_t rep;
    if (kd_bb_run_batch(ocl, B, b, x, &o, res, &batch_ms, &rep, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench batch: %s\n", err.message);
        return 1;
    }
    int64_t it_min = INT64_MAX, it_max = 0, converged = 0;
    double worst = 0.0;
    for (int64_t s = 0; s < k; s++) {
        it_min = res[s].iterations < it_min ? res[s].iterations : it_min;
        it_max = res[s].iterations > it_max ? res[s].iterations : it_max;
        converged += res[s].status == KD_SOLVE_CONVERGED;
        kd_csr_t *sys = kd_bb_system(p, values, s);
        const double rr = sys != NULL ? kd_bench_relres(sys, b + s * n, x + s * n) : NAN;
        worst = rr > worst || isnan(rr) ? rr : worst;
        kd_csr_free(sys);
    }
    printf("%-10s %10s %10s %12s %14s  %s\n", "path", "ms", "systems", "iterations", "ms/system",
           "notes");
    printf("%-10s %10.3f %10lld %5lld..%-6lld %14.4f  converged %lld, worst true relres %.2e, "
           "%s memory, %lld launches\n",
           "batch", batch_ms, (long long)k, (long long)it_min, (long long)it_max,
           batch_ms / (double)k, (long long)converged, worst, rep.local ? "local" : "global",
           (long long)rep.launches);

    /* system 0 alone through today's path */
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    kd_method_choose("cg", o.jacobi ? "jacobi" : "none", &prm.method, &prm.precond, &err);
    prm.rtol = o.rtol;
    kd_csr_t *sys0 = kd_bb_system(p, values, 0);
    kd_matrix_t *A0 = NULL;
    double alone_ms = 0.0;
    int64_t alone_it = 0;
    if (sys0 == NULL || kd_matrix_upload(ocl, sys0, KD_FMT_CSR_SCALAR, &A0, &err) != KD_OK ||
        kd_bb_solve(ocl, A0, b, x, &prm, o.repeat, &alone_ms, &alone_it, &err) != 0) {
        fprintf(stderr, "krylov-bench batch: alone: %s\n", err.message);
        return 1;
    }
    printf("%-10s %10.3f %10d %12lld %14.4f  system 0: %lld iterations alone, %lld in the "
           "batch; batch throughput %.1fx a loop of these\n",
           "alone", alone_ms, 1, (long long)alone_it, alone_ms, (long long)alone_it,
           (long long)res[0].iterations, alone_ms * (double)k / batch_ms);
    kd_matrix_free(A0);
    kd_csr_free(sys0);

    if (o.blockdiag) {
        kd_csr_t *bd = kd_bb_block_diagonal(p, k, values);
        kd_matrix_t *A = NULL;
        double bd_ms = 0.0;
        int64_t bd_it = 0;
        if (bd == NULL || kd_matrix_upload(ocl, bd, KD_FMT_CSR_SCALAR, &A, &err) != KD_OK ||
            kd_bb_solve(ocl, A, b, x, &prm, o.repeat, &bd_ms, &bd_it, &err) != 0) {
            fprintf(stderr, "krylov-bench batch: blockdiag: %s\n", err.message);
            return 1;
        }
        printf("%-10s %10.3f %10lld %12lld %14.4f  one matrix of %lld rows, one residual for "
               "all systems; the batch is %.1fx faster\n",
               "blockdiag", bd_ms, (long long)k, (long long)bd_it, bd_ms / (double)k,
               (long long)bd->rows, bd_ms / batch_ms);
        kd_matrix_free(A);
        kd_csr_free(bd);
    }
    for (int64_t s = 0; s < k; s++)
        kd_batch_result_free(&res[s]);
    free(res);
    kd_batch_free(B);
    kd_ocl_close(ocl);
    kd_csr_free(p);
    free(values);
    free(b);
    free(x);
    return 0;
}
