/*
 * krylov-bench solve: milliseconds per CG / PCG / SD iteration on generated or Matrix Market
 * matrices, against the floor set by the bytes one iteration must move.
 *
 * Per iteration and right-hand side our design moves (value size v, 4-byte indices, n rows):
 *   SpMV (minimal, CSR model)   nnz (v + 4) + 4 (n + 1) + n v (x) + n v (y)
 *   CG   two passes: dots3 3nv (d, q, r) + update 7nv (q, r, x, d; r, x, d)  = 10 n v
 *        (three passes: dots 2nv + update_residual 3nv + update_direction 5nv, the same)
 *   PCG  the same plus 1/diag read in each pass                              = 12 n v
 *   SD   dots 2nv + update_residual 5nv                                      =  7 n v
 *   cg1  dots 2nv (u, w) + update 9nv (r, p, w, s, x; p, s, x, r)             = 11 n v
 *        with jacobi: u and 1/diag read, u written in the update              = 14 n v
 *   lean two passes (--passes 1): dots3 reads no r                        CG 9, PCG 11 n v
 *   fused (csr_scalar, two passes; --fuse 0 turns it off): dots3 is done inside the SpMV
 *   from the q it computes, so d and q are not read again                 2 n v less
 *   and, with k right-hand sides, one launch multiplies all k columns: the matrix's arrays
 *   count once, not k times.
 * The floor is those bytes over the device's copy bandwidth, measured here as a large
 * device-to-device copy (bytes read + bytes written over the time). The solve runs with
 * rtol = atol = 0 and one check at the end, so it never stops early and the time is the
 * iterations' alone (kd_solve_result_t.iterate_ms: from the first check to the last); a second
 * run with the automatic check schedule shows what the host round trips add. The SpMV is also
 * timed alone, so the vector kernels' share is the difference.
 *
 * One table row per (matrix, method, right-hand sides, reduction groups); --csv appends the same.
 */
#include "bench/bench.h"
#include "common/clock.h"
#include "bench/matgen/matgen.h"
#include "solver/methods/method.h"
#include "solver/formats/select.h"
#include "solver/solve.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int kd_bs_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double kd_bs_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), kd_bs_cmp);
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Device copy bandwidth in GB/s (read + write), the median of `runs` copies of `mb` MiB. */
static double kd_bs_copy_bandwidth(kd_ocl_t *ocl, size_t mb, int runs)
{
    size_t bytes = mb << 20;
    cl_mem a = NULL, b = NULL;
    kd_err_t err = {0};
    double out = 0.0;
    if (kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, "copy source", &a, &err) ||
        kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, "copy target", &b, &err)) {
        fprintf(stderr, "copy bandwidth: %s\n", err.message);
        goto done;
    }
    cl_command_queue q = kd_ocl_queue(ocl);
    unsigned char one = 1;
    if (clEnqueueFillBuffer(q, a, &one, 1, 0, bytes, 0, NULL, NULL) != CL_SUCCESS ||
        clEnqueueCopyBuffer(q, a, b, 0, 0, bytes, 0, NULL, NULL) != CL_SUCCESS ||
        clFinish(q) != CL_SUCCESS)
        goto done;
    double *t = calloc((size_t)runs, sizeof(double));
    for (int i = 0; i < runs; i++) {
        double t0 = kd_clock_ms();
        for (int j = 0; j < 4; j++)
            clEnqueueCopyBuffer(q, (j & 1) ? b : a, (j & 1) ? a : b, 0, 0, bytes, 0, NULL, NULL);
        clFinish(q);
        t[i] = (kd_clock_ms() - t0) / 4.0;
    }
    out = 2.0 * (double)bytes / (kd_bs_median(t, runs) * 1e6);
    free(t);
done:
    if (a != NULL)
        clReleaseMemObject(a);
    if (b != NULL)
        clReleaseMemObject(b);
    return out;
}

/* ms per SpMV (wall clock over `count` back-to-back launches, median of `runs`). */
static double kd_bs_spmv_ms(kd_ocl_t *ocl, const kd_matrix_t *A, int count, int runs)
{
    kd_vec_t x = {0}, y = {0};
    kd_err_t err = {0};
    double out = NAN;
    if (kd_vec_alloc(ocl, A->cols, A->dtype, &x, &err) ||
        kd_vec_alloc(ocl, A->rows, A->dtype, &y, &err) || kd_vec_fill(ocl, &x, 0.5, &err) ||
        kd_matrix_spmv(ocl, A, 1.0, &x, 0.0, &y, &err) || kd_ocl_finish(ocl, &err)) {
        fprintf(stderr, "spmv: %s\n", err.message);
        goto done;
    }
    double *t = calloc((size_t)runs, sizeof(double));
    for (int r = 0; r < runs; r++) {
        double t0 = kd_clock_ms();
        for (int i = 0; i < count; i++)
            kd_matrix_spmv_inner(ocl, A, 1.0, &x, 0.0, &y, &err); /* as a solve runs it */
        kd_ocl_finish(ocl, &err);
        t[r] = (kd_clock_ms() - t0) / count;
    }
    out = kd_bs_median(t, runs);
    free(t);
done:
    kd_vec_release(&x);
    kd_vec_release(&y);
    return out;
}

/* Split "a,b,c" into up to `cap` strings (in place). */
static int kd_bs_split(char *list, char **out, int cap)
{
    int n = 0;
    for (char *tok = strtok(list, ","); tok != NULL && n < cap; tok = strtok(NULL, ","))
        out[n++] = tok;
    return n;
}

static void kd_bs_usage(void)
{
    fprintf(
        stderr,
        "usage: krylov-bench solve [options] [MATRIX...]\n"
        "  MATRIX: lap2d:NX, lap3d:N, powerlaw:ROWS:MEAN or a .mtx file "
        "(default lap2d:2048 lap3d:160)\n"
        "  --device SEL        auto | gpu | cpu | N (default auto)\n"
        "  --dtype T           float64 | float32 (default float64)\n"
        "  --methods LIST      methods and aliases, METHOD[+PRECONDITIONER] each: cg, pcg, "
        "sd, cg1+jacobi, ... (default cg,pcg)\n"
        "  --nrhs LIST         right-hand sides per solve (default 1)\n"
        "  --groups LIST       reduction work-groups per right-hand side, 0 = auto "
        "(default 0)\n"
        "  --passes LIST       vector passes per CG / PCG iteration: 2, 3, 0 = auto "
        "(default 0)\n"
        "  --fuse LIST         fuse the SpMV with pass 1 (csr_scalar, two-pass CG / PCG): 1, 0 "
        "or auto = on GPUs (default auto)\n"
        "  --kernel-options S  extra build options for the Krylov kernels (tuning on a new\n"
        "                      device, e.g. -cl-nv-maxrregcount=32)\n"
        "  --anatomy 1         after each row, a solve to 1e-8: its total, and where the time\n"
        "                      goes with the device drained between phases\n"
        "  --staging 0|1       host transfers through the pinned staging buffer or not\n"
        "                      (default 0)\n"
        "  --small S           cg / pcg's many-iterations-per-launch path: 1 on, 2 on with\n"
        "                      the vectors in global memory, -1 off, 0 automatic (default)\n"
        "  --profile 1         after each row, one more solve with every kernel's device time\n"
        "                      (milliseconds per iteration, launches per iteration)\n"
        "  --restart M         gmres's basis size (default 0: the method's, 30)\n"
        "  --iterations N      per timed solve (default 200)\n"
        "  --repeat R          timed solves per row, the median is reported (default 3)\n"
        "  --format NAME       matrix format (default csr_scalar)\n"
        "  --reorder NAME      none (default), rcm or metis: the matrix stored as P A P^T, the\n"
        "                      solve run in that order (b in, x out once); spmv_ms includes the\n"
        "                      gather and scatter a client's SpMV pays\n"
        "  --copy-mb M         size of the bandwidth copy (default 1024)\n"
        "  --csv FILE          append the rows to FILE\n");
}

/* One solve to rtol 1e-8 (maxiter 20000) twice: as a client's runs (the total), then with the
 * device drained between phases (where each phase's time goes), as comment lines. */
static void kd_bs_anatomy(kd_ocl_t *ocl, kd_matrix_t *A, int64_t k, const void *b, void *x,
                          const kd_solve_params_t *base, kd_solve_result_t *res)
{
    kd_err_t err = {0};
    kd_solve_params_t prm = *base;
    prm.rtol = 1e-8;
    prm.maxiter = 20000;
    prm.check_every = 0;
    double total = 0.0;
    int64_t its = 0;
    for (int pass = 0; pass < 2; pass++) {
        prm.time_phases = pass;
        if (kd_solve(ocl, A, k, b, NULL, x, &prm, res, &err) != KD_OK) {
            fprintf(stderr, "anatomy: %s\n", err.message);
            return;
        }
        const kd_solve_anatomy_t *a = &res[0].anatomy;
        if (pass == 0) {
            total = res[0].time_ms;
            its = res[0].iterations;
        } else {
            const double iter_each = its > 0 ? a->iterate_ms / (double)its : 0.0;
            const double rest = res[0].time_ms - a->iterate_ms;
            printf("#   anatomy to 1e-8 (%lld its, %s): total %.3f ms as run, %.3f drained: setup "
                   "%.3f, host scans %.3f, alloc %.3f, upload %.3f, start %.3f, iterations %.3f "
                   "(%.4f each, %lld checks), final residual %.3f, download %.3f; all but the "
                   "iterations %.3f\n",
                   (long long)its, kd_solve_status_name(res[0].status), total, res[0].time_ms,
                   a->setup_ms, a->host_ms, a->alloc_ms, a->upload_ms, a->start_ms,
                   a->iterate_ms, iter_each, (long long)a->checks, a->final_ms, a->download_ms,
                   rest);
        }
        for (int64_t c = 0; c < k; c++)
            kd_solve_result_free(&res[c]);
    }
}

/* One more solve with per-kernel device times, printed as comment lines under the row. */
static void kd_bs_profile(kd_ocl_t *ocl, kd_matrix_t *A, int64_t k, const void *b, void *x,
                          const kd_solve_params_t *prm, kd_solve_result_t *res, int iterations)
{
    kd_err_t err = {0};
    kd_ocl_kernel_time_t times[KD_OCL_KERNEL_TIMES_MAX];
    size_t count = 0;
    kd_ocl_kernel_profile_begin(ocl);
    int rc = kd_solve(ocl, A, k, b, NULL, x, prm, res, &err);
    for (int64_t c = 0; rc == KD_OK && c < k; c++)
        kd_solve_result_free(&res[c]);
    if (kd_ocl_kernel_profile_end(ocl, times, KD_OCL_KERNEL_TIMES_MAX, &count, &err) != KD_OK ||
        rc != KD_OK) {
        fprintf(stderr, "profile: %s\n", err.message);
        return;
    }
    double total = 0.0;
    for (size_t i = 0; i < count; i++)
        total += times[i].ms;
    for (size_t i = 0; i < count; i++)
        printf("#   %-32s %8.4f ms/it %6.2f launches/it %5.1f%%\n", times[i].name,
               times[i].ms / iterations, (double)times[i].launches / iterations,
               total > 0 ? 100.0 * times[i].ms / total : 0.0);
}

int kd_bench_solve_main(int argc, char **argv)
{
    const char *device = "auto", *csv_path = NULL, *format_name = "csr_scalar",
               *reorder_name = "none";
    kd_dtype_t dtype = KD_DTYPE_F64;
    char methods_buf[64] = "cg,pcg", nrhs_buf[64] = "1", groups_buf[128] = "0",
         passes_buf[16] = "0", fuse_buf[16] = "auto";
    const char *kernel_options = NULL;
    int iterations = 200, repeat = 3;
    int64_t restart = 0;
    int profile = 0, small = 0, anatomy = 0, staging = -1;
    size_t copy_mb = 1024;
    const char *defaults[] = {"lap2d:2048", "lap3d:160"};
    const char **matrices = defaults;
    int nmatrices = 2;
    const char **given = calloc((size_t)argc + 1, sizeof(char *));
    int ngiven = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            kd_bs_usage();
            free(given);
            return 0;
        } else if (a[0] == '-' && a[1] == '-' && v == NULL) {
            fprintf(stderr, "%s needs a value\n", a);
            free(given);
            return 2;
        } else if (strcmp(a, "--device") == 0) {
            device = argv[++i];
        } else if (strcmp(a, "--dtype") == 0) {
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        } else if (strcmp(a, "--methods") == 0) {
            snprintf(methods_buf, sizeof(methods_buf), "%s", argv[++i]);
        } else if (strcmp(a, "--nrhs") == 0) {
            snprintf(nrhs_buf, sizeof(nrhs_buf), "%s", argv[++i]);
        } else if (strcmp(a, "--passes") == 0) {
            snprintf(passes_buf, sizeof(passes_buf), "%s", argv[++i]);
        } else if (strcmp(a, "--kernel-options") == 0) {
            kernel_options = argv[++i];
        } else if (strcmp(a, "--fuse") == 0) {
            snprintf(fuse_buf, sizeof(fuse_buf), "%s", argv[++i]);
        } else if (strcmp(a, "--groups") == 0) {
            snprintf(groups_buf, sizeof(groups_buf), "%s", argv[++i]);
        } else if (strcmp(a, "--staging") == 0) {
            staging = atoi(argv[++i]);
        } else if (strcmp(a, "--anatomy") == 0) {
            anatomy = atoi(argv[++i]);
        } else if (strcmp(a, "--small") == 0) {
            small = atoi(argv[++i]);
        } else if (strcmp(a, "--profile") == 0) {
            profile = atoi(argv[++i]);
        } else if (strcmp(a, "--restart") == 0) {
            restart = atoll(argv[++i]);
        } else if (strcmp(a, "--iterations") == 0) {
            iterations = atoi(argv[++i]);
        } else if (strcmp(a, "--repeat") == 0) {
            repeat = atoi(argv[++i]);
        } else if (strcmp(a, "--format") == 0) {
            format_name = argv[++i];
        } else if (strcmp(a, "--reorder") == 0) {
            reorder_name = argv[++i];
        } else if (strcmp(a, "--copy-mb") == 0) {
            copy_mb = (size_t)atol(argv[++i]);
        } else if (strcmp(a, "--csv") == 0) {
            csv_path = argv[++i];
        } else if (a[0] == '-') {
            fprintf(stderr, "unknown option %s\n", a);
            kd_bs_usage();
            free(given);
            return 2;
        } else {
            given[ngiven++] = a;
        }
    }
    if (ngiven > 0) {
        matrices = given;
        nmatrices = ngiven;
    }
    if (iterations < 1 || repeat < 1) {
        fprintf(stderr, "--iterations and --repeat must be >= 1\n");
        free(given);
        return 2;
    }
    char *methods[8], *nrhs_list[8], *groups_list[16];
    int nmethods = kd_bs_split(methods_buf, methods, 8);
    int nnrhs = kd_bs_split(nrhs_buf, nrhs_list, 8);
    int ngroups = kd_bs_split(groups_buf, groups_list, 16);
    char *passes_list[4];
    int npasses = kd_bs_split(passes_buf, passes_list, 4);
    char *fuse_list[2];
    int nfuse = kd_bs_split(fuse_buf, fuse_list, 2);
    kd_format_t format;
    kd_reorder_t reorder;
    if (kd_reorder_parse(reorder_name, &reorder) != 0 || reorder == KD_REORDER_AUTO) {
        fprintf(stderr, "--reorder takes none, rcm or metis\n");
        free(given);
        return 2;
    }
    if (kd_format_parse(format_name, &format) != 0 || !kd_format_available(format)) {
        fprintf(stderr, "format %s is not available\n", format_name);
        free(given);
        return 2;
    }

    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "device %s: %s\n", device, err.message);
        free(given);
        return 1;
    }
    const kd_ocl_device_desc_t *desc = kd_ocl_desc(ocl);
    if (staging >= 0)
        kd_ocl_set_staging(ocl, staging);
    double copy_gbs = kd_bs_copy_bandwidth(ocl, copy_mb, 5);
    printf("# device: %s (%s); copy bandwidth %.0f GB/s (read + write, %zu MiB); %s; %d "
           "iterations per solve, median of %d\n",
           desc->name, desc->platform, copy_gbs, copy_mb, kd_dtype_name(dtype), iterations, repeat);
    printf("%-14s %-9s %4s %5s %2s %2s %9s %10s %8s %8s %8s %9s %7s %8s %8s\n", "matrix", "meth",
           "nrhs", "grps", "ps", "fu", "rows", "nnz", "MB/it", "ms/it", "floor", "of_floor", "GB/s",
           "auto_ms", "spmv_ms");
    FILE *csv = csv_path != NULL ? fopen(csv_path, "a") : NULL;
    if (csv_path != NULL && csv == NULL)
        fprintf(stderr, "cannot open %s\n", csv_path);
    int status = 0;

    for (int mi = 0; mi < nmatrices; mi++) {
        kd_csr_t *csr = kd_matgen_by_name(matrices[mi], dtype);
        kd_matrix_t *A = NULL;
        if (csr == NULL) {
            status = 1;
            continue;
        }
        kd_select_result_t sr;
        if (kd_select_upload_reordered(ocl, csr, format_name, KD_SELECT_MEASURE, reorder, &A, &sr,
                                       &err) != KD_OK) {
            fprintf(stderr, "%s: %s\n", matrices[mi], err.message);
            kd_csr_free(csr);
            status = 1;
            continue;
        }
        char label[160]; /* the matrix, and its ordering when it has one: "lap2d:1024+rcm" */
        snprintf(label, sizeof(label), "%s%s%s", matrices[mi],
                 reorder != KD_REORDER_NONE ? "+" : "",
                 reorder != KD_REORDER_NONE ? kd_reorder_name(reorder) : "");
        const double n = (double)csr->rows, v = (double)kd_dtype_size(dtype);
        const double spmv_bytes =
            (double)csr->nnz * (v + 4.0) + 4.0 * (n + 1.0) + n * v + (double)csr->cols * v;
        const double spmv_ms = kd_bs_spmv_ms(ocl, A, 20, 5);
        for (int ki = 0; ki < nnrhs; ki++) {
            const int64_t k = atoll(nrhs_list[ki]);
            if (k < 1)
                continue;
            const size_t total = (size_t)(csr->rows * k);
            void *b = malloc(total * (size_t)v + 8), *x = malloc(total * (size_t)v + 8);
            uint64_t s = 0x9e3779b97f4a7c15ull;
            for (size_t i = 0; i < total; i++) {
                s = s * 6364136223846793005ull + 1442695040888963407ull;
                kd_store_real(b, dtype, i, (double)(s >> 11) / 9007199254740992.0 * 2.0 - 1.0);
            }
            kd_solve_result_t *res = calloc((size_t)k, sizeof(*res));
            for (int me = 0; me < nmethods; me++) {
                /* METHOD or METHOD+PRECONDITIONER: "cg", "pcg", "cg1+jacobi" */
                const kd_method_ops_t *method;
                const kd_precond_ops_t *precond;
                char name[64];
                snprintf(name, sizeof(name), "%s", methods[me]);
                char *plus = strchr(name, '+');
                if (plus != NULL)
                    *plus++ = '\0';
                if (kd_method_choose(name, plus, &method, &precond, &err) != KD_OK) {
                    fprintf(stderr, "krylov-bench solve: %s\n", err.message);
                    return 2;
                }
                const int jacobi = precond == &kd_precond_jacobi;
                const int spmvs = method->spmvs > 0 ? method->spmvs : 1;
                kd_solve_params_t fprm;
                kd_solve_params_default(&fprm);
                fprm.restart = restart;
                /* Jacobi: the diagonal and z = D^-1 r read and written once per SpMV (the
                 * cg1 form reads one more). */
                const double vec_per = method->floor_vectors(&fprm) +
                                       (jacobi ? (method == &kd_method_cg1 ? 3.0 : 2.0) : 0.0);
                for (int gi = 0; gi < ngroups * npasses * nfuse; gi++) {
                    const char *passes = passes_list[gi % npasses];
                    const char *fuse_s = fuse_list[gi / (ngroups * npasses)];
                    const int fuse = strcmp(fuse_s, "auto") == 0 ? -1 : atoi(fuse_s);
                    /* Lean passes (1) do not read r for r'Mq: one vector less. */
                    const int cg = method == &kd_method_cg;
                    const double lean =
                        atoi(passes) == 1 && (cg || method == &kd_method_cg1) ? 1.0 : 0.0;
                    kd_solve_params_t prm;
                    kd_solve_params_default(&prm);
                    prm.method = method;
                    prm.precond = precond;
                    prm.kernel_options = kernel_options;
                    prm.rtol = 0.0;
                    prm.atol = 0.0;
                    prm.reduction_groups = atoll(groups_list[gi / npasses % ngroups]);
                    prm.spmv_fusion = fuse < 0 ? 0
                                      : fuse   ? KD_SOLVE_FUSION_ON
                                               : KD_SOLVE_FUSION_OFF;
                    prm.passes = atoi(passes);
                    prm.restart = restart;
                    prm.small = small;
                    double *t = calloc((size_t)repeat, sizeof(double));
                    int failed = 0;
                    /* Warm-up (kernel builds), then timed solves with one check at the end. */
                    prm.maxiter = 3;
                    prm.check_every = 3;
                    failed |= kd_solve(ocl, A, k, b, NULL, x, &prm, res, &err) != KD_OK;
                    const int fused = res[0].spmv_fused;
                    for (int64_t c = 0; c < k; c++)
                        kd_solve_result_free(&res[c]);
                    /* Fused: d and q are not read again after the SpMV, and one launch serves
                     * every column, so the matrix's arrays are read once for all k. */
                    const double vec = vec_per - lean - (fused && cg ? 2.0 : 0.0);
                    const double matrix_bytes = (double)csr->nnz * (v + 4.0) + 4.0 * (n + 1.0);
                    /* The matrix read once for all k: fused, or one SpMM launch per product. */
                    const int once = fused || (k > 1 && kd_matrix_has_spmm(A));
                    const double bytes =
                        once ? spmvs * matrix_bytes +
                                   (double)k * (spmvs * (spmv_bytes - matrix_bytes) + vec * n * v)
                             : (double)k * (spmvs * spmv_bytes + vec * n * v);
                    prm.maxiter = iterations;
                    prm.check_every = iterations;
                    for (int r = 0; r < repeat && !failed; r++) {
                        failed |= kd_solve(ocl, A, k, b, NULL, x, &prm, res, &err) != KD_OK;
                        if (!failed && res[0].iterations != iterations) {
                            /* broke down (cg on an indefinite matrix): its status, not the
                             * last refusal's message */
                            kd_err_set(&err, KD_EBADREQ, "%s after %lld iterations: %.120s",
                                       kd_solve_status_name(res[0].status),
                                       (long long)res[0].iterations, res[0].message);
                            failed = 1;
                        }
                        t[r] = res[0].iterate_ms / iterations;
                        for (int64_t c = 0; c < k; c++)
                            kd_solve_result_free(&res[c]);
                    }
                    prm.check_every = 0;
                    double auto_ms = NAN;
                    if (!failed) {
                        failed |= kd_solve(ocl, A, k, b, NULL, x, &prm, res, &err) != KD_OK;
                        auto_ms = res[0].iterate_ms / (double)res[0].iterations;
                        for (int64_t c = 0; c < k; c++)
                            kd_solve_result_free(&res[c]);
                    }
                    if (failed) {
                        fprintf(stderr, "%s %s: %s\n", matrices[mi], methods[me], err.message);
                        status = 1;
                        free(t);
                        continue;
                    }
                    double ms = kd_bs_median(t, repeat);
                    double floor_ms = copy_gbs > 0 ? bytes / (copy_gbs * 1e6) : NAN;
                    printf("%-14s %-9s %4lld %5s %2s %2d %9lld %10lld %8.1f %8.4f %8.4f %8.2f%% "
                           "%7.0f %8.4f %8.4f\n",
                           label, methods[me], (long long)k, groups_list[gi / npasses % ngroups],
                           passes, fused, (long long)csr->rows, (long long)csr->nnz, bytes / 1e6,
                           ms, floor_ms, 100.0 * floor_ms / ms, bytes / (ms * 1e6), auto_ms,
                           spmv_ms);
                    if (csv != NULL)
                        fprintf(csv,
                                "%s,%s,%s,%lld,%s,%s,%d,%lld,%lld,%.0f,%.6f,%.6f,%.6f,%.6f,%.0f\n",
                                desc->name, label, methods[me], (long long)k,
                                groups_list[gi / npasses % ngroups], passes, fused,
                                (long long)csr->rows, (long long)csr->nnz, bytes, ms, floor_ms,
                                auto_ms, spmv_ms, copy_gbs);
                    if (profile)
                        kd_bs_profile(ocl, A, k, b, x, &prm, res, iterations);
                    if (anatomy)
                        kd_bs_anatomy(ocl, A, k, b, x, &prm, res);
                    fflush(stdout);
                    free(t);
                }
            }
            free(res);
            free(b);
            free(x);
        }
        kd_matrix_free(A);
        kd_csr_free(csr);
    }
    if (csv != NULL)
        fclose(csv);
    kd_ocl_close(ocl);
    free(given);
    return status;
}
