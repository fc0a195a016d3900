/*
 * krylov-bench spmm: several columns at once (kd_matrix_spmm: one launch for the formats with an
 * SpMM kernel, column by column for the others) against k single SpMVs, per format and k. For
 * each row: ms per launch (profiling events, median of --runs), ms per column, the per-column
 * time against k = 1's (issue 16's target: <= 0.35 at k = 8 on lap3d 100^3 and lap2d 2048^2;
 * cuSPARSE's SpMM through CuPy, bench/peers/cupy_spmm.py, in the same run), and the byte floor:
 * the matrix's CSR arrays once, x read and y written once per column, at the device's copy
 * bandwidth.
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"
#include "solver/matrix.h"
#include "solver/formats/select.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kd_bm_spmm {
    kd_ocl_t *ocl;
    const kd_matrix_t *A;
    kd_multivec_t *x, *y;
} kd_bm_spmm_t;

static int kd_bm_spmm_run(void *ctx, kd_err_t *err)
{
    kd_bm_spmm_t *c = ctx;
    return kd_matrix_spmm(c->ocl, c->A, 1.0, c->x, 0.0, c->y, err);
}

static void kd_bm_usage(void)
{
    fprintf(stderr, "usage: krylov-bench spmm [options] MATRIX...\n"
                    "  --device SEL     auto | gpu | cpu | N (default auto)\n"
                    "  --dtype T        float64 (default) | float32\n"
                    "  --formats LIST   comma-separated; auto = the measured choice (default\n"
                    "                   auto,csr_scalar,csr_vector,ellpack_r,sell_c_sigma)\n"
                    "  --ks LIST        columns (default 1,8,32)\n"
                    "  --runs N         timed launches per row, median (default 30)\n");
}

int kd_bench_spmm_main(int argc, char **argv)
{
    const char *device = "auto";
    kd_dtype_t dtype = KD_DTYPE_F64;
    char formats[256] = "auto,csr_scalar,csr_vector,ellpack_r,sell_c_sigma", ks[128] = "1,8,32";
    int runs = 30, first = argc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            kd_bm_usage();
            return 0;
        } else if (a[0] == '-' && v == NULL) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        } else if (strcmp(a, "--device") == 0) {
            device = argv[++i];
        } else if (strcmp(a, "--dtype") == 0) {
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        } else if (strcmp(a, "--formats") == 0) {
            snprintf(formats, sizeof(formats), "%s", argv[++i]);
        } else if (strcmp(a, "--ks") == 0) {
            snprintf(ks, sizeof(ks), "%s", argv[++i]);
        } else if (strcmp(a, "--runs") == 0) {
            runs = atoi(argv[++i]);
        } else if (a[0] == '-') {
            kd_bm_usage();
            return 2;
        } else {
            first = i;
            break;
        }
    }
    if (first >= argc || runs < 1 || runs > 1000) {
        kd_bm_usage();
        return 2;
    }
    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "device %s: %s\n", device, err.message);
        return 1;
    }
    const double gbs = kd_ocl_copy_bandwidth(ocl) / 1e9;
    printf("# device: %s; %s; copy bandwidth %.0f GB/s; median of %d launches\n",
           kd_ocl_desc(ocl)->name, kd_dtype_name(dtype), gbs, runs);
    printf("%-14s %-13s %-5s %4s %9s %9s %8s %9s %8s\n", "matrix", "format", "spmm", "k", "ms",
           "ms/col", "col/k=1", "floor_ms", "of_floor");
    int status = 0;
    double *per_run = calloc((size_t)runs, sizeof(double));
    for (int mi = first; mi < argc; mi++) {
        kd_csr_t *csr = kd_matgen_by_name(argv[mi], dtype);
        if (csr == NULL) {
            status = 1;
            continue;
        }
        const double v = (double)kd_dtype_size(dtype);
        const double matrix_bytes = (double)csr->nnz * (v + 4.0) + 4.0 * (double)(csr->rows + 1);
        char flist[256];
        snprintf(flist, sizeof(flist), "%s", formats);
        for (char *save = NULL, *f = strtok_r(flist, ",", &save); f != NULL;
             f = strtok_r(NULL, ",", &save)) {
            kd_matrix_t *A = NULL;
            kd_select_result_t sr;
            if (kd_select_upload(ocl, csr, strcmp(f, "auto") == 0 ? NULL : f, KD_SELECT_MEASURE, &A,
                                 &sr, &err) != KD_OK) {
                printf("%-14s %-13s refused: %.90s\n", argv[mi], f, err.message);
                continue;
            }
            char shown[32];
            snprintf(shown, sizeof(shown), "%s%s", strcmp(f, "auto") == 0 ? "auto=" : "",
                     strcmp(f, "auto") == 0 ? kd_format_name(A->format) : f);
            double base = 0.0;
            char klist[128];
            snprintf(klist, sizeof(klist), "%s", ks);
            for (char *s2 = NULL, *kk = strtok_r(klist, ",", &s2); kk != NULL;
                 kk = strtok_r(NULL, ",", &s2)) {
                const int64_t k = atoll(kk);
                kd_multivec_t x = {0}, y = {0};
                double batch = 0.0;
                kd_bm_spmm_t ctx = {ocl, A, &x, &y};
                int rc = kd_multivec_alloc(ocl, csr->cols, k, dtype, &x, &err);
                if (rc == KD_OK)
                    rc = kd_multivec_alloc(ocl, csr->rows, k, dtype, &y, &err);
                for (int64_t c = 0; rc == KD_OK && c < k; c++)
                    rc = kd_vec_fill(ocl, &x.cols[c], 0.5, &err);
                if (rc == KD_OK)
                    rc = kd_bench_time_device(ocl, kd_bm_spmm_run, &ctx, 3, runs, per_run, &batch,
                                              &err);
                kd_multivec_release(&x);
                kd_multivec_release(&y);
                if (rc != KD_OK) {
                    printf("%-14s %-13s k=%lld: %.90s\n", argv[mi], shown, (long long)k,
                           err.message);
                    status = 1;
                    continue;
                }
                const double ms = kd_bench_median(per_run, (size_t)runs);
                if (k == 1)
                    base = ms;
                const double floor_ms =
                    (matrix_bytes + (double)k * v * (double)(csr->rows + csr->cols)) / (gbs * 1e6);
                printf("%-14s %-13s %-5s %4lld %9.4f %9.4f %8.3f %9.4f %7.1f%%\n", argv[mi], shown,
                       kd_matrix_has_spmm(A) ? "yes" : "no", (long long)k, ms, ms / (double)k,
                       base > 0 ? ms / (double)k / base : 0.0, floor_ms, 100.0 * floor_ms / ms);
                fflush(stdout);
            }
            kd_matrix_free(A);
        }
        kd_csr_free(csr);
    }
    free(per_run);
    kd_ocl_close(ocl);
    return status;
}
