/* Shared benchmark helpers (see bench.h). */
#include "bench/bench.h"
#include "common/clock.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int kd_bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kd_bench_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(double), kd_bench_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double kd_bench_min(const double *v, size_t n)
{
    double m = n > 0 ? v[0] : 0.0;
    for (size_t i = 1; i < n; i++)
        if (v[i] < m)
            m = v[i];
    return m;
}

int kd_bench_time_device(kd_ocl_t *ocl, kd_bench_fn fn, void *ctx, int warmup, int runs,
                         double *per_run_ms, double *batch_ms, kd_err_t *err)
{
    int rc = KD_OK;
    for (int i = 0; i < warmup && rc == KD_OK; i++)
        rc = fn(ctx, err);
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    for (int i = 0; i < runs && rc == KD_OK; i++) {
        kd_ocl_timing_begin(ocl);
        rc = fn(ctx, err);
        int rc2 = kd_ocl_timing_end(ocl, &per_run_ms[i], err);
        if (rc == KD_OK)
            rc = rc2;
    }
    if (rc != KD_OK || batch_ms == NULL)
        return rc;
    /* back to back: no events, the host clock around the whole queue */
    double t0 = kd_clock_ms();
    for (int i = 0; i < runs && rc == KD_OK; i++)
        rc = fn(ctx, err);
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    *batch_ms = runs > 0 ? (kd_clock_ms() - t0) / runs : 0.0;
    return rc;
}

double kd_bench_spmv_bytes(const kd_csr_t *csr)
{
    double v = (double)kd_dtype_size(csr->dtype);
    return (double)csr->nnz * (v + 4.0) + ((double)csr->rows + 1.0) * 4.0 + (double)csr->cols * v +
           (double)csr->rows * v;
}

int kd_bench_write_csr(const char *path, const kd_csr_t *csr)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    int64_t head[3] = {csr->rows, csr->cols, csr->nnz};
    int ok =
        fwrite("KDCSR64", 1, 8, f) == 8 && fwrite(head, sizeof(head), 1, f) == 1 &&
        fwrite(csr->indptr, sizeof(int32_t), (size_t)csr->rows + 1, f) == (size_t)csr->rows + 1;
    if (ok && csr->nnz > 0)
        ok = fwrite(csr->indices, sizeof(int32_t), (size_t)csr->nnz, f) == (size_t)csr->nnz;
    for (int64_t k = 0; ok && k < csr->nnz; k++) {
        double v = kd_csr_value(csr, k);
        ok = fwrite(&v, sizeof(v), 1, f) == 1;
    }
    if (fclose(f) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "writing %s failed\n", path);
    return ok ? 0 : -1;
}

void kd_bench_matrix_name(const char *spec, char *out, size_t cap)
{
    const char *base = strrchr(spec, '/');
    base = base != NULL ? base + 1 : spec;
    snprintf(out, cap, "%s", base);
    char *dot = strstr(out, ".mtx");
    if (dot != NULL)
        *dot = '\0';
    for (char *c = out; *c != '\0'; c++)
        if (*c == ':' || *c == ' ')
            *c = '_';
}

double kd_bench_relres(const kd_csr_t *csr, const double *b, const void *x)
{
    const int64_t n = csr->rows;
    double *xw = malloc((size_t)csr->cols * sizeof(double) + 8),
           *r = malloc((size_t)n * sizeof(double) + 8);
    double rr = 0.0, bb = 0.0;
    if (xw == NULL || r == NULL) {
        free(xw);
        free(r);
        return NAN;
    }
    for (int64_t i = 0; i < csr->cols; i++)
        xw[i] = kd_load_real(x, csr->dtype, (size_t)i);
    for (int64_t i = 0; i < n; i++) {
        r[i] = b != NULL ? b[i] : 1.0;
        bb += r[i] * r[i];
    }
    kd_csr_spmv_ref(csr, xw, -1.0, 1.0, r);
    for (int64_t i = 0; i < n; i++)
        rr += r[i] * r[i];
    free(xw);
    free(r);
    return sqrt(rr / bb);
}
