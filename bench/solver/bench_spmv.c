/*
 * krylov-bench spmv: for each matrix (a bench/matgen/matgen.h spec or a Matrix Market file), every
 * format and the automatic choice.
 *
 * Per format: built from the CSR arrays as kd_matrix_upload does, checked once against the CPU
 * (relative error max|y - y_ref| / max|y_ref|), then `--warmup` untimed runs and `--runs` timed
 * ones, each timed alone with OpenCL profiling events (first kernel's start to last kernel's end;
 * the median is the headline), then the same number back to back (host clock around the queue,
 * per run: launch costs included). y = A x with beta = 0, x random in [-1, 1).
 *
 * Derived: effective bandwidth by the minimal-bytes model (bench.h) over the median, GFLOP/s as
 * 2 nnz / median. Formats the selection drops for padding are not built (their reason is shown).
 *
 * Automatic choice: kd_select_upload in measure mode, run twice; the second (warm: programs
 * built and cached) is what a long-running krylovd pays per upload. Its cost is compared with 50
 * SpMVs of the chosen format (its median here) plus the transfer of the CSR arrays.
 *
 * Also: the device's copy bandwidth through clEnqueueCopyBuffer (bytes read + written / time).
 * Output: a table on stdout; --json FILE writes everything; --export DIR writes each matrix as
 * DIR/<name>.csr for the peer programs (bench/peers).
 */
#include "bench/bench.h"
#include "common/clock.h"
#include "bench/matgen/matgen.h"
#include "solver/matrix.h"
#include "solver/formats/select.h"
#include "solver/vector.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kd_bench_format_result {
    int built;
    char dropped[96];
    double median_ms, min_ms, batch_ms, gbs, gflops, rel_err;
    double inner_ms; /* a reordered matrix: the format's SpMV alone (what a solve runs), median */
    size_t device_bytes;
    double build_ms, transfer_ms;
} kd_bench_format_result_t;

typedef struct kd_bench_matrix_result {
    char name[128];
    int64_t rows, cols, nnz;
    kd_csr_stats_t stats;
    double min_bytes;
    kd_bench_format_result_t fmt[KD_FMT_COUNT];
    kd_select_result_t select_cold, select_warm;
    kd_format_t best;
    /* The matrix the automatic choice keeps (reordered or not), and the best format on the
     * RCM-reordered matrix; both timed through kd_matrix_spmv, gather and scatter included. */
    kd_bench_format_result_t autom, rcm;
    kd_select_result_t rcm_select;
} kd_bench_matrix_result_t;

typedef struct kd_bench_spmv_ctx {
    kd_ocl_t *ocl;
    kd_matrix_t *m;
    kd_vec_t *x, *y;
    int inner; /* the format's SpMV without a reordered matrix's permutations */
} kd_bench_spmv_ctx_t;

static int kd_bench_spmv_once(void *p, kd_err_t *err)
{
    kd_bench_spmv_ctx_t *c = p;
    if (c->inner)
        return kd_matrix_spmv_inner(c->ocl, c->m, 1.0, c->x, 0.0, c->y, err);
    return kd_matrix_spmv(c->ocl, c->m, 1.0, c->x, 0.0, c->y, err);
}

/* Device copy bandwidth: a copy between two buffers of `bytes`, median of 20, read + write. */
static double kd_bench_copy_gbs(kd_ocl_t *ocl, size_t bytes)
{
    kd_err_t err = {0};
    cl_mem a = NULL, b = NULL;
    double t[20], gbs = 0.0;
    int n = 0;
    if (kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, "copy source", &a, &err) ||
        kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, "copy target", &b, &err))
        goto done;
    unsigned char one = 1;
    if (clEnqueueFillBuffer(kd_ocl_queue(ocl), a, &one, 1, 0, bytes, 0, NULL, NULL) != CL_SUCCESS)
        goto done;
    for (int i = 0; i < 23; i++) {
        cl_event ev = NULL;
        if (clEnqueueCopyBuffer(kd_ocl_queue(ocl), a, b, 0, 0, bytes, 0, NULL, &ev) != CL_SUCCESS)
            goto done;
        cl_ulong s = 0, e = 0;
        clWaitForEvents(1, &ev);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_START, sizeof(s), &s, NULL);
        clGetEventProfilingInfo(ev, CL_PROFILING_COMMAND_END, sizeof(e), &e, NULL);
        clReleaseEvent(ev);
        if (i >= 3)
            t[n++] = (double)(e - s) / 1e6;
    }
    gbs = 2.0 * (double)bytes / (kd_bench_median(t, (size_t)n) * 1e-3) / 1e9;
done:
    if (a != NULL)
        clReleaseMemObject(a);
    if (b != NULL)
        clReleaseMemObject(b);
    return gbs;
}

/* Host-to-device bandwidth for `bytes` of pageable memory three ways, in GB/s: a buffer created
 * with CL_MEM_COPY_HOST_PTR (what kd_format_upload_array does), a blocking clEnqueueWriteBuffer,
 * and a memcpy into a mapped CL_MEM_ALLOC_HOST_PTR (pinned) buffer followed by a device copy. */
static void kd_bench_upload_gbs(kd_ocl_t *ocl, size_t bytes, double out[3])
{
    cl_context ctx = kd_ocl_context(ocl);
    cl_command_queue q = kd_ocl_queue(ocl);
    unsigned char *host = malloc(bytes);
    cl_int st = CL_SUCCESS;
    out[0] = out[1] = out[2] = 0.0;
    if (host == NULL)
        return;
    memset(host, 1, bytes);
    for (int rep = 0; rep < 2; rep++) {
        double t0 = kd_clock_ms();
        cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host, &st);
        if (a != NULL)
            clFinish(q);
        double t1 = kd_clock_ms();
        cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_ONLY, bytes, NULL, &st);
        if (b != NULL)
            st = clEnqueueWriteBuffer(q, b, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
        double t2 = kd_clock_ms();
        cl_mem pin = clCreateBuffer(ctx, CL_MEM_ALLOC_HOST_PTR, bytes, NULL, &st);
        void *p = pin != NULL ? clEnqueueMapBuffer(q, pin, CL_TRUE, CL_MAP_WRITE, 0, bytes, 0, NULL,
                                                   NULL, &st)
                              : NULL;
        double t3 = kd_clock_ms();
        if (p != NULL) {
            memcpy(p, host, bytes);
            clEnqueueUnmapMemObject(q, pin, p, 0, NULL, NULL);
            if (b != NULL)
                clEnqueueCopyBuffer(q, pin, b, 0, 0, bytes, 0, NULL, NULL);
            clFinish(q);
        }
        double t4 = kd_clock_ms();
        if (rep == 1) {
            out[0] = a != NULL ? (double)bytes / ((t1 - t0) * 1e-3) / 1e9 : 0.0;
            out[1] = b != NULL ? (double)bytes / ((t2 - t1) * 1e-3) / 1e9 : 0.0;
            out[2] = p != NULL ? (double)bytes / ((t4 - t3) * 1e-3) / 1e9 : 0.0;
        }
        if (a != NULL)
            clReleaseMemObject(a);
        if (b != NULL)
            clReleaseMemObject(b);
        if (pin != NULL)
            clReleaseMemObject(pin);
    }
    free(host);
}

/* Device allocation on first use: creating a buffer of `bytes` and filling it, against filling it
 * again, in ms; and a small (64 KiB) buffer's create + fill + release. out: {big first fill,
 * big second fill, big release, small total}. */
static void kd_bench_alloc_ms(kd_ocl_t *ocl, size_t bytes, double out[4])
{
    cl_context ctx = kd_ocl_context(ocl);
    cl_command_queue q = kd_ocl_queue(ocl);
    unsigned char zero = 0;
    cl_int st;
    clFinish(q);
    double t0 = kd_clock_ms();
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, bytes, NULL, &st);
    if (a == NULL)
        return;
    clEnqueueFillBuffer(q, a, &zero, 1, 0, bytes, 0, NULL, NULL);
    clFinish(q);
    double t1 = kd_clock_ms();
    clEnqueueFillBuffer(q, a, &zero, 1, 0, bytes, 0, NULL, NULL);
    clFinish(q);
    double t2 = kd_clock_ms();
    clReleaseMemObject(a);
    clFinish(q);
    double t3 = kd_clock_ms();
    for (int i = 0; i < 10; i++) {
        cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 65536, NULL, &st);
        if (b == NULL)
            break;
        clEnqueueFillBuffer(q, b, &zero, 1, 0, 65536, 0, NULL, NULL);
        clFinish(q);
        clReleaseMemObject(b);
    }
    double t4 = kd_clock_ms();
    out[0] = t1 - t0;
    out[1] = t2 - t1;
    out[2] = t3 - t2;
    out[3] = (t4 - t3) / 10.0;
}

/* Upload csr with `forced` (a format name, or NULL for the selection's choice) and `reorder`,
 * check it against ref and time it; sr (may be NULL) gets the selection's result. */
static int kd_bench_one_upload(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced,
                               kd_reorder_t reorder, kd_vec_t *x, kd_vec_t *y, const double *ref,
                               int warmup, int runs, double min_bytes, kd_bench_format_result_t *r,
                               kd_select_result_t *sr_out, kd_err_t *err)
{
    kd_matrix_t *m = NULL;
    double *t = malloc((size_t)runs * sizeof(double));
    double *got = malloc(((size_t)csr->rows + 1) * sizeof(double));
    int rc = KD_ENOMEM;
    if (t == NULL || got == NULL)
        goto done;
    double t0 = kd_clock_ms();
    kd_select_result_t sr;
    if ((rc = kd_select_upload_reordered(ocl, csr, forced, KD_SELECT_MEASURE, reorder, &m, &sr,
                                         err)) != KD_OK ||
        (rc = kd_ocl_finish(ocl, err)) != KD_OK)
        goto done;
    r->build_ms = kd_clock_ms() - t0 - sr.transfer_ms; /* beyond the CSR transfer */
    r->transfer_ms = sr.transfer_ms;
    r->device_bytes = m->device_bytes;
    if ((rc = kd_vec_fill(ocl, y, NAN, err)) != KD_OK ||
        (rc = kd_matrix_spmv(ocl, m, 1.0, x, 0.0, y, err)) != KD_OK ||
        (rc = kd_vec_read(ocl, y, got, KD_DTYPE_F64, err)) != KD_OK)
        goto done;
    double d = 0.0, s = 1e-300;
    for (int64_t i = 0; i < csr->rows; i++) {
        d = isfinite(got[i]) ? fmax(d, fabs(got[i] - ref[i])) : INFINITY;
        s = fmax(s, fabs(ref[i]));
    }
    r->rel_err = d / s;
    kd_bench_spmv_ctx_t ctx = {ocl, m, x, y, 1};
    double batch = 0.0;
    if (m->order.kind != KD_REORDER_NONE) {
        rc = kd_bench_time_device(ocl, kd_bench_spmv_once, &ctx, warmup, runs, t, &batch, err);
        if (rc != KD_OK)
            goto done;
        r->inner_ms = kd_bench_median(t, (size_t)runs);
    }
    ctx.inner = 0;
    rc = kd_bench_time_device(ocl, kd_bench_spmv_once, &ctx, warmup, runs, t, &r->batch_ms, err);
    if (rc != KD_OK)
        goto done;
    r->min_ms = kd_bench_min(t, (size_t)runs);
    r->median_ms = kd_bench_median(t, (size_t)runs);
    r->gbs = min_bytes / (r->median_ms * 1e-3) / 1e9;
    r->gflops = 2.0 * (double)csr->nnz / (r->median_ms * 1e-3) / 1e9;
    r->built = 1;
    if (sr_out != NULL)
        *sr_out = sr;
done:
    kd_matrix_free(m);
    free(t);
    free(got);
    return rc;
}

static int kd_bench_one_format(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t f, kd_vec_t *x,
                               kd_vec_t *y, const double *ref, int warmup, int runs,
                               double min_bytes, kd_bench_format_result_t *r, kd_err_t *err)
{
    return kd_bench_one_upload(ocl, csr, kd_format_name(f), KD_REORDER_NONE, x, y, ref, warmup,
                               runs, min_bytes, r, NULL, err);
}

static void kd_bench_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        fputc((unsigned char)*s < 0x20 ? ' ' : *s, f);
    }
    fputc('"', f);
}

static void kd_bench_json_select(FILE *f, const char *key, const kd_select_result_t *s)
{
    fprintf(f,
            "\"%s\": {\"format\": \"%s\", \"total_ms\": %.6g, \"transfer_ms\": %.6g, "
            "\"plan_ms\": %.6g, \"build_ms\": %.6g, \"measure_ms\": %.6g, \"spmv_runs\": %d, "
            "\"candidates\": [",
            key, kd_format_name(s->format), s->total_ms, s->transfer_ms, s->plan_ms, s->build_ms,
            s->measure_ms, s->spmv_runs);
    for (int i = 0; i < s->ncandidates; i++) {
        const kd_select_candidate_t *c = &s->candidates[i];
        fprintf(f, "%s{\"format\": \"%s\", ", i ? ", " : "", kd_format_name(c->format));
        if (c->dropped[0] != '\0') {
            fprintf(f, "\"dropped\": ");
            kd_bench_json_str(f, c->dropped);
        } else {
            fprintf(f, "\"time_ms\": %.6g", c->time_ms);
        }
        fputc('}', f);
    }
    fprintf(f, "]}");
}

static void kd_bench_json_result(FILE *f, const char *key, const kd_bench_format_result_t *fr)
{
    fprintf(f, "\"%s\": {", key);
    if (!fr->built) {
        fprintf(f, "\"dropped\": ");
        kd_bench_json_str(f, fr->dropped);
    } else {
        fprintf(f,
                "\"median_ms\": %.6g, \"min_ms\": %.6g, \"batch_ms\": %.6g, \"gbs\": %.6g, "
                "\"gflops\": %.6g, \"rel_err\": %.3g, \"device_bytes\": %zu, \"build_ms\": %.6g, "
                "\"transfer_ms\": %.6g, \"inner_ms\": %.6g",
                fr->median_ms, fr->min_ms, fr->batch_ms, fr->gbs, fr->gflops, fr->rel_err,
                fr->device_bytes, fr->build_ms, fr->transfer_ms, fr->inner_ms);
    }
    fputc('}', f);
}

static void kd_bench_write_json(const char *path, const kd_ocl_t *ocl, kd_dtype_t dtype, int runs,
                                double copy_gbs, const kd_bench_matrix_result_t *res, int n)
{
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        perror(path);
        return;
    }
    const kd_ocl_device_desc_t *d = kd_ocl_desc(ocl);
    fprintf(f, "{\"device\": ");
    kd_bench_json_str(f, d->name);
    fprintf(f, ", \"platform\": ");
    kd_bench_json_str(f, d->platform);
    fprintf(f, ", \"driver\": ");
    kd_bench_json_str(f, d->driver);
    fprintf(f, ", \"dtype\": \"%s\", \"runs\": %d, \"copy_gbs\": %.6g, \"matrices\": [\n",
            kd_dtype_name(dtype), runs, copy_gbs);
    for (int i = 0; i < n; i++) {
        const kd_bench_matrix_result_t *r = &res[i];
        fprintf(f, "  {\"name\": ");
        kd_bench_json_str(f, r->name);
        fprintf(f,
                ", \"rows\": %lld, \"cols\": %lld, \"nnz\": %lld, \"min_bytes\": %.6g, "
                "\"max_row\": %lld, \"mean_row\": %.6g, \"stddev_row\": %.6g, \"best\": \"%s\", ",
                (long long)r->rows, (long long)r->cols, (long long)r->nnz, r->min_bytes,
                (long long)r->stats.max_row, r->stats.mean_row, r->stats.stddev_row,
                kd_format_name(r->best));
        kd_bench_json_select(f, "select_cold", &r->select_cold);
        fprintf(f, ", ");
        kd_bench_json_select(f, "select", &r->select_warm);
        fprintf(f, ", \"reorder\": \"%s\", \"reorder_ms\": %.6g, ",
                kd_reorder_name(r->select_warm.reorder), r->select_warm.reorder_ms);
        kd_bench_json_result(f, "auto", &r->autom);
        fprintf(f, ", \"rcm_format\": \"%s\", ", kd_format_name(r->rcm_select.format));
        kd_bench_json_result(f, "rcm", &r->rcm);
        fprintf(f, ", \"formats\": {");
        int first = 1;
        for (int k = 0; k < KD_FMT_COUNT; k++) {
            const kd_bench_format_result_t *fr = &r->fmt[k];
            fprintf(f, "%s", first ? "" : ", ");
            first = 0;
            kd_bench_json_result(f, kd_format_name((kd_format_t)k), fr);
        }
        fprintf(f, "}}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "]}\n");
    fclose(f);
}

/* 1 if name is an item of the comma-separated list. */
static int kd_bench_listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p != NULL && *p != '\0';) {
        const char *comma = strchr(p, ',');
        size_t len = comma != NULL ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return 1;
        p = comma != NULL ? comma + 1 : NULL;
    }
    return 0;
}

static void kd_bench_spmv_usage(void)
{
    fprintf(stderr, "usage: krylov-bench spmv [--device SEL] [--dtype float64|float32] [--runs N]\n"
                    "                         [--warmup N] [--json FILE] [--export DIR] MATRIX...\n"
                    "MATRIX: lap2d:N, lap3d:N, powerlaw:ROWS:MEAN, or a .mtx/.mtx.gz file\n");
}

int kd_bench_spmv_main(int argc, char **argv)
{
    const char *device = "auto", *json = NULL, *export_dir = NULL, *only = NULL;
    kd_dtype_t dtype = KD_DTYPE_F64;
    int runs = 200, warmup = 10, nspecs = 0;
    const char **specs = calloc((size_t)argc + 1, sizeof(char *));
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--device") == 0 && next != NULL)
            device = argv[++i];
        else if (strcmp(a, "--dtype") == 0 && next != NULL)
            dtype = strcmp(argv[++i], "float32") == 0 ? KD_DTYPE_F32 : KD_DTYPE_F64;
        else if (strcmp(a, "--runs") == 0 && next != NULL)
            runs = atoi(argv[++i]);
        else if (strcmp(a, "--warmup") == 0 && next != NULL)
            warmup = atoi(argv[++i]);
        else if (strcmp(a, "--json") == 0 && next != NULL)
            json = argv[++i];
        else if (strcmp(a, "--export") == 0 && next != NULL)
            export_dir = argv[++i];
        else if (strcmp(a, "--formats") == 0 && next != NULL)
            only = argv[++i];
        else if (a[0] == '-') {
            kd_bench_spmv_usage();
            free(specs);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        } else
            specs[nspecs++] = a;
    }
    if (nspecs == 0 || runs < 1) {
        kd_bench_spmv_usage();
        free(specs);
        return 2;
    }
    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench: %s\n", err.message);
        free(specs);
        return 1;
    }
    const kd_ocl_device_desc_t *dev = kd_ocl_desc(ocl);
    size_t copy_bytes = dev->is_gpu ? (size_t)1 << 30 : (size_t)64 << 20;
    if (copy_bytes > dev->max_alloc_bytes / 2)
        copy_bytes = (size_t)(dev->max_alloc_bytes / 2);
    double copy_gbs = kd_bench_copy_gbs(ocl, copy_bytes);
    double up[3];
    kd_bench_upload_gbs(ocl, copy_bytes / 4, up);
    printf("device: %s (%s, driver %s), %s, %d runs per format; copy bandwidth %.0f GB/s\n",
           dev->name, dev->platform, dev->driver, kd_dtype_name(dtype), runs, copy_gbs);
    printf("host to device, %zu MB pageable: COPY_HOST_PTR %.1f GB/s, WriteBuffer %.1f GB/s, "
           "memcpy to pinned + copy %.1f GB/s\n",
           copy_bytes / 4 >> 20, up[0], up[1], up[2]);
    double al[4] = {0, 0, 0, 0};
    kd_bench_alloc_ms(ocl, copy_bytes / 4, al);
    printf("allocation, %zu MB: create + first fill %.2f ms, second fill %.2f ms, release %.2f "
           "ms; 64 KiB create + fill + release %.3f ms\n",
           copy_bytes / 4 >> 20, al[0], al[1], al[2], al[3]);

    kd_bench_matrix_result_t *res = calloc((size_t)nspecs, sizeof(*res));
    int status = 0, done = 0;
    for (int s = 0; s < nspecs; s++) {
        kd_bench_matrix_result_t *r = &res[done];
        /* "local:SPEC": SPEC with each row's columns replaced by row, row + 1, ... (mod cols): the
         * same row lengths with x gathered from a few cache lines, to tell the cost of random
         * gathers from the rest */
        int local = strncmp(specs[s], "local:", 6) == 0;
        kd_csr_t *csr = kd_matgen_by_name(specs[s] + (local ? 6 : 0), dtype);
        if (csr != NULL && local)
            for (int64_t row = 0; row < csr->rows; row++)
                for (int32_t k = csr->indptr[row]; k < csr->indptr[row + 1]; k++)
                    csr->indices[k] = (int32_t)((row + (k - csr->indptr[row])) % csr->cols);
        if (csr == NULL) {
            status = 1;
            continue;
        }
        kd_bench_matrix_name(specs[s], r->name, sizeof(r->name));
        r->rows = csr->rows;
        r->cols = csr->cols;
        r->nnz = csr->nnz;
        r->min_bytes = kd_bench_spmv_bytes(csr);
        kd_csr_compute_stats(csr, &r->stats);
        if (export_dir != NULL) {
            char path[1024];
            snprintf(path, sizeof(path), "%s/%s.csr", export_dir, r->name);
            if (kd_bench_write_csr(path, csr) != 0)
                status = 1;
        }
        if (csr->rows == 0) {
            kd_csr_free(csr);
            continue;
        }
        double *xw = malloc((size_t)(csr->cols + 1) * sizeof(double));
        double *ref = malloc((size_t)(csr->rows + 1) * sizeof(double));
        uint64_t seed = 0x243F6A8885A308D3ull;
        for (int64_t i = 0; i < csr->cols; i++) {
            seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
            double v = (double)(seed >> 11) / 9007199254740992.0 * 2.0 - 1.0;
            unsigned char tmp[8];
            kd_store_real(tmp, dtype, 0, v); /* x as the device sees it */
            xw[i] = kd_load_real(tmp, dtype, 0);
        }
        kd_csr_spmv_ref(csr, xw, 1.0, 0.0, ref);
        kd_vec_t x = {0}, y = {0};
        int rc = kd_vec_alloc(ocl, csr->cols, dtype, &x, &err);
        if (rc == KD_OK)
            rc = kd_vec_alloc(ocl, csr->rows, dtype, &y, &err);
        if (rc == KD_OK)
            rc = kd_vec_write(ocl, &x, xw, KD_DTYPE_F64, &err);
        for (int pass = 0; pass < 2 && rc == KD_OK; pass++) {
            kd_matrix_t *m = NULL;
            kd_select_result_t *sr = pass == 0 ? &r->select_cold : &r->select_warm;
            rc = kd_select_upload_reordered(ocl, csr, NULL, KD_SELECT_MEASURE, KD_REORDER_AUTO, &m,
                                            sr, &err);
            kd_matrix_free(m);
        }
        double limit = KD_SELECT_MEMORY_FACTOR *
                           (double)kd_matrix_plan_bytes(ocl, csr, &r->stats, KD_FMT_CSR_SCALAR) +
                       65536.0;
        for (int f = 0; f < KD_FMT_COUNT && rc == KD_OK; f++) {
            kd_bench_format_result_t *fr = &r->fmt[f];
            if (only != NULL && !kd_bench_listed(only, kd_format_name((kd_format_t)f))) {
                snprintf(fr->dropped, sizeof(fr->dropped), "not asked for (--formats)");
                continue;
            }
            size_t plan = kd_matrix_plan_bytes(ocl, csr, &r->stats, (kd_format_t)f);
            if ((double)plan > limit) {
                snprintf(fr->dropped, sizeof(fr->dropped), "padding: %.3g MB", (double)plan / 1e6);
                continue;
            }
            rc = kd_bench_one_format(ocl, csr, (kd_format_t)f, &x, &y, ref, warmup, runs,
                                     r->min_bytes, fr, &err);
            if (rc == KD_EDEVMEM) {
                snprintf(fr->dropped, sizeof(fr->dropped), "no device memory");
                rc = KD_OK;
            }
        }
        if (rc == KD_OK)
            rc = kd_bench_one_upload(ocl, csr, NULL, KD_REORDER_AUTO, &x, &y, ref, warmup, runs,
                                     r->min_bytes, &r->autom, NULL, &err);
        if (rc == KD_OK && csr->rows == csr->cols &&
            !(only != NULL && !kd_bench_listed(only, "rcm")))
            rc = kd_bench_one_upload(ocl, csr, NULL, KD_REORDER_RCM, &x, &y, ref, warmup, runs,
                                     r->min_bytes, &r->rcm, &r->rcm_select, &err);
        kd_vec_release(&x);
        kd_vec_release(&y);
        free(xw);
        free(ref);
        kd_csr_free(csr);
        if (rc != KD_OK) {
            fprintf(stderr, "krylov-bench: %s: %s\n", r->name, err.message);
            status = 1;
            continue;
        }
        r->best = KD_FMT_CSR_SCALAR;
        for (int f = 0; f < KD_FMT_COUNT; f++)
            if (r->fmt[f].built &&
                (!r->fmt[r->best].built || r->fmt[f].median_ms < r->fmt[r->best].median_ms))
                r->best = (kd_format_t)f;

        printf("\n%s: %lld x %lld, nnz %lld, rows %lld..%lld (mean %.1f, sd %.1f), min bytes "
               "%.1f MB\n",
               r->name, (long long)r->rows, (long long)r->cols, (long long)r->nnz,
               (long long)r->stats.min_row, (long long)r->stats.max_row, r->stats.mean_row,
               r->stats.stddev_row, r->min_bytes / 1e6);
        printf("  %-13s %10s %10s %10s %8s %8s %9s %9s\n", "format", "median_ms", "min_ms",
               "batch_ms", "GB/s", "GFLOP/s", "rel_err", "build_ms");
        for (int f = 0; f < KD_FMT_COUNT; f++) {
            const kd_bench_format_result_t *fr = &r->fmt[f];
            if (!fr->built) {
                printf("  %-13s %s\n", kd_format_name((kd_format_t)f), fr->dropped);
                continue;
            }
            printf("  %-13s %10.4f %10.4f %10.4f %8.1f %8.1f %9.1e %9.2f%s\n",
                   kd_format_name((kd_format_t)f), fr->median_ms, fr->min_ms, fr->batch_ms, fr->gbs,
                   fr->gflops, fr->rel_err, fr->build_ms,
                   (kd_format_t)f == r->best ? "  fastest" : "");
        }
        if (r->rcm.built) /* the best format on P A P^T, the gather and scatter included */
            printf("  %-13s %10.4f %10.4f %10.4f %8.1f %8.1f %9.1e %9.2f  rcm:%s, in a solve "
                   "%.4f ms, bandwidth %lld -> %lld, ordering %.1f ms\n",
                   "rcm", r->rcm.median_ms, r->rcm.min_ms, r->rcm.batch_ms, r->rcm.gbs,
                   r->rcm.gflops, r->rcm.rel_err, r->rcm.build_ms,
                   kd_format_name(r->rcm_select.format), r->rcm.inner_ms,
                   (long long)r->rcm_select.before.bandwidth,
                   (long long)r->rcm_select.after.bandwidth, r->rcm_select.reorder_ms);
        const kd_select_result_t *sw = &r->select_warm;
        const kd_bench_format_result_t *fa = &r->autom;
        double t_auto = fa->built ? fa->median_ms : 0.0;
        double t_best = r->fmt[r->best].median_ms;
        if (r->rcm.built && r->rcm.median_ms < t_best)
            t_best = r->rcm.median_ms;
        double budget = 50.0 * t_auto + sw->transfer_ms;
        printf("  auto: %s%s%s %.4f ms (%.3fx the fastest); selection %.2f ms warm (%.2f cold): "
               "transfer %.2f, analysis %.2f (beside it), builds %.2f, timing %.2f ms, %d runs, "
               "ordering %.1f ms; budget 50 SpMV + transfer = %.2f ms -> %.2fx; reorder: %s\n",
               sw->reorder != KD_REORDER_NONE ? kd_reorder_name(sw->reorder) : "",
               sw->reorder != KD_REORDER_NONE ? ":" : "", kd_format_name(sw->format), t_auto,
               fa->built && t_best > 0 ? t_auto / t_best : 0.0, sw->total_ms,
               r->select_cold.total_ms, sw->transfer_ms, sw->plan_ms, sw->build_ms, sw->measure_ms,
               sw->spmv_runs, sw->reorder_ms, budget, budget > 0 ? sw->total_ms / budget : 0.0,
               sw->reorder_reason);
        fflush(stdout);
        done++;
    }
    if (json != NULL)
        kd_bench_write_json(json, ocl, dtype, runs, copy_gbs, res, done);
    free(res);
    free(specs);
    kd_ocl_close(ocl);
    return status;
}
