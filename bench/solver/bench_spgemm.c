/*
 * krylov-bench spgemm: C = A B on the device (kd_spgemm) for each matrix (a bench/matgen/matgen.h
 * spec or a Matrix Market file), one of three products:
 *   aa   A A (square A)
 *   ata  A^T A (A^T made on the host with kd_csr_transpose)
 *   rap  the Galerkin product R (A P) of a smoothed-aggregation-like setup: P_tent aggregates
 *        blocks of 8 consecutive rows (entries 1/sqrt(block size), orthonormal columns),
 *        P = (I - 2/3 D^-1 A) P_tent (itself a kd_spgemm), R = P^T (kd_csr_transpose); the timed
 *        work is the two products A P and R (A P).
 *
 * Each product is checked once against a sequential CPU product in the same value type and the
 * same order (it must match bit for bit: the count of differing values is printed), then
 * `--warmup` untimed runs and `--runs` timed ones. Per run: device time (kd_spgemm_stats_t's
 * total_ms, profiling events from the first kernel's start to the last kernel's end, the idle
 * device during the two read-backs included) and its symbolic and numeric parts, and wall time
 * around the kd_spgemm calls (read-backs, allocation of C, the wait for the last kernel). C is
 * released after each run. Times are min and median over the runs; peak is device memory
 * kd_spgemm allocated at its peak (C and scratch, not A or B). Under each matrix, one line per
 * kernel: its median device time over the runs (its launches' events summed), launches per run
 * and its share of the kernels' sum, so a run on another device shows where the time goes.
 *
 * --export DIR writes each A (and for rap, P) as DIR/<name>.csr and DIR/<name>.P.csr in the
 * binary CSR of bench.h (the format bench/peers read), so bench/peers/cusparse_spgemm.cu
 * multiplies exactly these matrices.
 */
#include "bench/bench.h"
#include "bench/matgen/matgen.h"
#include "common/clock.h"
#include "solver/products/spgemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KD_BENCH_AA, KD_BENCH_ATA, KD_BENCH_RAP } kd_bench_op_t;

typedef struct kd_bench_spgemm_result {
    int64_t products, nnz;
    int64_t bin_rows[8], numeric_bin_rows[8];
    size_t peak;
    double device_ms, symbolic_ms, numeric_ms, wall_ms;
    int kernels; /* per kernel, both products of rap together */
    kd_spgemm_kernel_time_t kernel[KD_SPGEMM_KERNELS];
} kd_bench_spgemm_result_t;

/* Per-kernel device times over the runs: kernel k's ms in run i at ms[k * runs + i]. */
typedef struct kd_bench_spgemm_kernels {
    int count, runs;
    const char *name[KD_SPGEMM_KERNELS];
    int launches[KD_SPGEMM_KERNELS];
    double *ms;
} kd_bench_spgemm_kernels_t;

/* Add a product's per-kernel times to out's, by name. */
static void kd_bench_spgemm_add_kernels(kd_bench_spgemm_result_t *out, const kd_spgemm_stats_t *s)
{
    for (int i = 0; i < s->kernels; i++) {
        int k = 0;
        while (k < out->kernels && strcmp(out->kernel[k].name, s->kernel[i].name) != 0)
            k++;
        if (k == KD_SPGEMM_KERNELS)
            continue;
        if (k == out->kernels)
            out->kernel[out->kernels++] = (kd_spgemm_kernel_time_t){s->kernel[i].name, 0.0, 0};
        out->kernel[k].ms += s->kernel[i].ms;
        out->kernel[k].launches += s->kernel[i].launches;
    }
}

/* Record run i's per-kernel times. */
static void kd_bench_spgemm_record_kernels(kd_bench_spgemm_kernels_t *kt, int i,
                                           const kd_bench_spgemm_result_t *res)
{
    for (int r = 0; r < res->kernels; r++) {
        int k = 0;
        while (k < kt->count && strcmp(kt->name[k], res->kernel[r].name) != 0)
            k++;
        if (k == KD_SPGEMM_KERNELS)
            continue;
        if (k == kt->count)
            kt->name[kt->count++] = res->kernel[r].name;
        kt->ms[k * kt->runs + i] = res->kernel[r].ms;
        kt->launches[k] = res->kernel[r].launches;
    }
}

/* One line per kernel: median ms over the runs, launches per run, share of the kernels' sum. */
static void kd_bench_spgemm_print_kernels(const kd_bench_spgemm_kernels_t *kt)
{
    double med[KD_SPGEMM_KERNELS], sum = 0.0;
    for (int k = 0; k < kt->count; k++) {
        med[k] = kd_bench_median(kt->ms + (size_t)k * (size_t)kt->runs, (size_t)kt->runs);
        sum += med[k];
    }
    for (int k = 0; k < kt->count; k++)
        printf("%-22s kernel %-28s %9.3f ms median, %d launch%s, %5.1f%%\n", "", kt->name[k],
               med[k], kt->launches[k], kt->launches[k] == 1 ? "" : "es",
               sum > 0.0 ? 100.0 * med[k] / sum : 0.0);
}

static int kd_bench_cmp_i32(const void *x, const void *y)
{
    int32_t a = *(const int32_t *)x, b = *(const int32_t *)y;
    return (a > b) - (a < b);
}

/* The sequential product on the host (the order kd_spgemm promises), in a's dtype: pattern and
 * values into a new matrix. NULL when out of memory. */
static kd_csr_t *kd_bench_spgemm_ref(const kd_csr_t *a, const kd_csr_t *b)
{
    int64_t n = b->cols, cap = a->nnz + 16, nnz = 0;
    int32_t *mark = malloc(((size_t)n + 1) * sizeof(int32_t));
    int32_t *cols = malloc(((size_t)n + 1) * sizeof(int32_t));
    double *acc = malloc(((size_t)n + 1) * sizeof(double));
    int32_t *indptr = malloc(((size_t)a->rows + 1) * sizeof(int32_t));
    int32_t *indices = malloc((size_t)cap * sizeof(int32_t));
    double *values = malloc((size_t)cap * sizeof(double));
    kd_csr_t *c = NULL;
    int f32 = a->dtype == KD_DTYPE_F32;
    if (mark == NULL || cols == NULL || acc == NULL || indptr == NULL || indices == NULL ||
        values == NULL)
        goto done;
    for (int64_t j = 0; j < n; j++)
        mark[j] = -1;
    indptr[0] = 0;
    for (int64_t i = 0; i < a->rows; i++) {
        int64_t len = 0;
        for (int32_t e = a->indptr[i]; e < a->indptr[i + 1]; e++) {
            double av = kd_csr_value(a, e);
            int32_t k = a->indices[e];
            for (int32_t q = b->indptr[k]; q < b->indptr[k + 1]; q++) {
                int32_t j = b->indices[q];
                if (mark[j] != (int32_t)i) {
                    mark[j] = (int32_t)i;
                    acc[j] = 0.0;
                    cols[len++] = j;
                }
                if (f32) {
                    volatile float p = (float)av * (float)kd_csr_value(b, q);
                    volatile float s = (float)acc[j] + p;
                    acc[j] = s;
                } else {
                    volatile double p = av * kd_csr_value(b, q);
                    acc[j] = acc[j] + p;
                }
            }
        }
        qsort(cols, (size_t)len, sizeof(int32_t), kd_bench_cmp_i32);
        if (nnz + len > cap) {
            while (nnz + len > cap)
                cap *= 2;
            int32_t *ni = realloc(indices, (size_t)cap * sizeof(int32_t));
            double *nv = realloc(values, (size_t)cap * sizeof(double));
            if (ni != NULL)
                indices = ni;
            if (nv != NULL)
                values = nv;
            if (ni == NULL || nv == NULL)
                goto done;
        }
        for (int64_t t = 0; t < len; t++) {
            indices[nnz] = cols[t];
            values[nnz++] = acc[cols[t]];
        }
        indptr[i + 1] = (int32_t)nnz;
    }
    kd_err_t err = {0};
    if (kd_csr_alloc(a->rows, b->cols, nnz, a->dtype, &c, &err) != KD_OK)
        goto done;
    memcpy(c->indptr, indptr, ((size_t)a->rows + 1) * sizeof(int32_t));
    memcpy(c->indices, indices, (size_t)nnz * sizeof(int32_t));
    for (int64_t t = 0; t < nnz; t++)
        kd_store_real(c->values, c->dtype, (size_t)t, values[t]);
done:
    free(mark);
    free(cols);
    free(acc);
    free(indptr);
    free(indices);
    free(values);
    return c;
}

/* Entries of got that differ from ref (structure first: -1 when the patterns differ). */
static int64_t kd_bench_spgemm_diff(const kd_csr_t *got, const kd_csr_t *ref)
{
    if (got->rows != ref->rows || got->nnz != ref->nnz ||
        memcmp(got->indptr, ref->indptr, ((size_t)got->rows + 1) * sizeof(int32_t)) != 0 ||
        (got->nnz > 0 &&
         memcmp(got->indices, ref->indices, (size_t)got->nnz * sizeof(int32_t)) != 0))
        return -1;
    size_t v = kd_dtype_size(got->dtype);
    int64_t bad = 0;
    for (int64_t t = 0; t < got->nnz; t++)
        bad += memcmp((const char *)got->values + t * v, (const char *)ref->values + t * v, v) != 0;
    return bad;
}

/* P = (I - 2/3 D^-1 A) P_tent with P_tent aggregating blocks of 8 consecutive rows; on the device
 * (kd_spgemm), downloaded. NULL with a message on failure. */
static kd_csr_t *kd_bench_prolongator(kd_ocl_t *ocl, const kd_csr_t *a)
{
    int64_t n = a->rows, blocks = (n + 7) / 8;
    kd_err_t err = {0};
    kd_csr_t *s = NULL, *pt = NULL, *p = NULL;
    kd_csr_device_t ds = {0}, dpt = {0}, dp = {0};
    int64_t snnz = a->nnz + n; /* room for a diagonal that A lacks */
    if (kd_csr_alloc(n, n, snnz, a->dtype, &s, &err) != KD_OK ||
        kd_csr_alloc(n, blocks, n, a->dtype, &pt, &err) != KD_OK)
        goto done;
    int64_t t = 0;
    s->indptr[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = 0.0;
        for (int32_t e = a->indptr[i]; e < a->indptr[i + 1]; e++)
            if (a->indices[e] == i)
                d = kd_csr_value(a, e);
        double w = d != 0.0 ? 2.0 / 3.0 / d : 0.0;
        int diag = 0;
        for (int32_t e = a->indptr[i]; e <= a->indptr[i + 1]; e++) {
            int32_t j = e < a->indptr[i + 1] ? a->indices[e] : INT32_MAX;
            if (!diag && j >= i) { /* the identity's entry, merged with A's diagonal */
                s->indices[t] = (int32_t)i;
                kd_store_real(s->values, s->dtype, (size_t)t++,
                              1.0 - (j == i ? w * kd_csr_value(a, e) : 0.0));
                diag = 1;
                if (j == i)
                    continue;
            }
            if (e < a->indptr[i + 1]) {
                s->indices[t] = j;
                kd_store_real(s->values, s->dtype, (size_t)t++, -w * kd_csr_value(a, e));
            }
        }
        s->indptr[i + 1] = (int32_t)t;
        pt->indptr[i] = (int32_t)i;
        pt->indices[i] = (int32_t)(i / 8);
        int64_t size = (i / 8 + 1) * 8 <= n ? 8 : n - i / 8 * 8;
        kd_store_real(pt->values, pt->dtype, (size_t)i, 1.0 / sqrt((double)size));
    }
    pt->indptr[n] = (int32_t)n;
    s->nnz = t;
    if (kd_csr_device_upload(ocl, s, &ds, &err) != KD_OK ||
        kd_csr_device_upload(ocl, pt, &dpt, &err) != KD_OK ||
        kd_spgemm(ocl, &ds, &dpt, NULL, &dp, NULL, &err) != KD_OK ||
        kd_csr_device_download(ocl, &dp, &p, &err) != KD_OK)
        p = NULL;
done:
    if (p == NULL)
        fprintf(stderr, "krylov-bench: building P: %s\n", err.message);
    kd_csr_device_release(&ds);
    kd_csr_device_release(&dpt);
    kd_csr_device_release(&dp);
    kd_csr_free(s);
    kd_csr_free(pt);
    return p;
}

/* One timed product (or two, for rap) from the device operands; C released after. */
static int kd_bench_spgemm_once(kd_ocl_t *ocl, kd_bench_op_t op, const kd_csr_device_t *l,
                                const kd_csr_device_t *r, const kd_csr_device_t *rr,
                                kd_bench_spgemm_result_t *out, kd_csr_t **keep, kd_err_t *err)
{
    kd_csr_device_t c = {0}, c2 = {0};
    kd_spgemm_stats_t s1, s2;
    memset(&s2, 0, sizeof(s2));
    out->kernels = 0;
    uint64_t t0 = kd_clock_ns();
    int rc = kd_spgemm(ocl, l, r, NULL, &c, &s1, err);
    if (rc == KD_OK && op == KD_BENCH_RAP) /* l = A, r = P, rr = R: R (A P) */
        rc = kd_spgemm(ocl, rr, &c, NULL, &c2, &s2, err);
    double wall = kd_clock_ms_since(t0);
    if (rc == KD_OK) {
        out->wall_ms = wall;
        out->device_ms = s1.total_ms + s2.total_ms;
        out->symbolic_ms = s1.symbolic_ms + s2.symbolic_ms;
        out->numeric_ms = s1.numeric_ms + s2.numeric_ms;
        out->products = s1.products + s2.products;
        out->nnz = op == KD_BENCH_RAP ? s2.nnz : s1.nnz;
        for (int b = 0; b < 8; b++) {
            out->bin_rows[b] = s1.bin_rows[b] + s2.bin_rows[b];
            out->numeric_bin_rows[b] = s1.numeric_bin_rows[b] + s2.numeric_bin_rows[b];
        }
        kd_bench_spgemm_add_kernels(out, &s1);
        kd_bench_spgemm_add_kernels(out, &s2);
        /* for rap, A P is alive while R (A P) runs */
        out->peak =
            op == KD_BENCH_RAP && c.device_bytes + s2.peak_device_bytes > s1.peak_device_bytes
                ? c.device_bytes + s2.peak_device_bytes
                : s1.peak_device_bytes;
        if (keep != NULL)
            rc = kd_csr_device_download(ocl, op == KD_BENCH_RAP ? &c2 : &c, keep, err);
    }
    kd_csr_device_release(&c);
    kd_csr_device_release(&c2);
    return rc;
}

static void kd_bench_spgemm_usage(void)
{
    fprintf(
        stderr,
        "usage: krylov-bench spgemm [--device SEL] [--dtype float64|float32] [--runs N]\n"
        "                           [--warmup N] [--op aa|ata|rap] [--export DIR] [--json FILE]\n"
        "                           MATRIX...\n"
        "MATRIX: lap2d:N, lap3d:N, powerlaw:ROWS:MEAN, ... or a .mtx/.mtx.gz file\n");
}

/* Build the operands for op from a (host, dtype), check once, time; prints one table row. */
static int kd_bench_spgemm_matrix(kd_ocl_t *ocl, const char *name, kd_bench_op_t op,
                                  const kd_csr_t *a, int warmup, int runs, const char *export_dir,
                                  FILE *json)
{
    kd_err_t err = {0};
    kd_csr_t *left = NULL, *right = NULL, *p = NULL, *r = NULL, *ref = NULL, *got = NULL;
    kd_csr_device_t dl = {0}, dr = {0}, drr = {0};
    double *dev = calloc((size_t)runs, sizeof(double)),
           *wall = calloc((size_t)runs, sizeof(double));
    double *sym = calloc((size_t)runs, sizeof(double)), *num = calloc((size_t)runs, sizeof(double));
    kd_bench_spgemm_result_t res = {0};
    kd_bench_spgemm_kernels_t kt = {0};
    kt.runs = runs;
    kt.ms = calloc((size_t)KD_SPGEMM_KERNELS * (size_t)runs, sizeof(double));
    int rc = KD_ENOMEM;
    if (dev == NULL || wall == NULL || sym == NULL || num == NULL || kt.ms == NULL)
        goto done;
    char path[1024];
    if (export_dir != NULL) {
        snprintf(path, sizeof(path), "%s/%s.csr", export_dir, name);
        kd_bench_write_csr(path, a);
    }
    if (op == KD_BENCH_ATA) {
        if ((rc = kd_csr_transpose(a, &left, &err)) != KD_OK)
            goto done;
    } else if (op == KD_BENCH_RAP) {
        rc = KD_EBADREQ;
        if ((p = kd_bench_prolongator(ocl, a)) == NULL)
            goto done;
        if ((rc = kd_csr_transpose(p, &r, &err)) != KD_OK)
            goto done;
        if (export_dir != NULL) {
            snprintf(path, sizeof(path), "%s/%s.P.csr", export_dir, name);
            kd_bench_write_csr(path, p);
        }
    }
    const kd_csr_t *lhs = op == KD_BENCH_ATA ? left : a, *rhs = op == KD_BENCH_RAP ? p : a;
    if ((rc = kd_csr_device_upload(ocl, lhs, &dl, &err)) != KD_OK ||
        (rc = kd_csr_device_upload(ocl, rhs, &dr, &err)) != KD_OK ||
        (op == KD_BENCH_RAP && (rc = kd_csr_device_upload(ocl, r, &drr, &err)) != KD_OK))
        goto done;
    if ((rc = kd_bench_spgemm_once(ocl, op, &dl, &dr, &drr, &res, &got, &err)) != KD_OK)
        goto done;
    if (op == KD_BENCH_RAP) {
        kd_csr_t *ap = kd_bench_spgemm_ref(a, p);
        ref = ap != NULL ? kd_bench_spgemm_ref(r, ap) : NULL;
        kd_csr_free(ap);
    } else {
        ref = kd_bench_spgemm_ref(lhs, rhs);
    }
    int64_t diff = ref != NULL ? kd_bench_spgemm_diff(got, ref) : -2;
    for (int i = 0; i < warmup && rc == KD_OK; i++)
        rc = kd_bench_spgemm_once(ocl, op, &dl, &dr, &drr, &res, NULL, &err);
    for (int i = 0; i < runs && rc == KD_OK; i++) {
        rc = kd_bench_spgemm_once(ocl, op, &dl, &dr, &drr, &res, NULL, &err);
        dev[i] = res.device_ms;
        wall[i] = res.wall_ms;
        sym[i] = res.symbolic_ms;
        num[i] = res.numeric_ms;
        kd_bench_spgemm_record_kernels(&kt, i, &res);
    }
    if (rc != KD_OK)
        goto done;
    printf("%-22s %9lld %10lld %11lld %11lld %8.3f %8.3f %8.3f %8.3f %7.3f %7.3f %8.1f  %s\n", name,
           (long long)lhs->rows, (long long)a->nnz, (long long)res.products, (long long)res.nnz,
           kd_bench_min(dev, (size_t)runs), kd_bench_median(dev, (size_t)runs),
           kd_bench_min(wall, (size_t)runs), kd_bench_median(wall, (size_t)runs),
           kd_bench_median(sym, (size_t)runs), kd_bench_median(num, (size_t)runs),
           (double)res.peak / (1 << 20),
           diff == 0    ? "exact"
           : diff == -1 ? "PATTERN DIFFERS"
           : diff == -2 ? "unchecked"
                        : "VALUES DIFFER");
    if (json != NULL) {
        static const char *const op_names[] = {"aa", "ata", "rap"};
        double checksum = 0.0;
        for (int64_t k = 0; got != NULL && k < got->nnz; k++)
            checksum += kd_csr_value(got, k);
        fprintf(json,
                "{\"matrix\": \"%s\", \"op\": \"%s\", \"dtype\": \"%s\", \"rows\": %lld, "
                "\"nnz_a\": %lld, \"products\": %lld, \"nnz_c\": %lld, \"median_ms\": %.6f, "
                "\"min_ms\": %.6f, \"device_median_ms\": %.6f, \"peak_bytes\": %zu, "
                "\"checksum\": %.17g, \"check\": \"%s\"}\n",
                name, op_names[op], kd_dtype_name(a->dtype), (long long)lhs->rows,
                (long long)a->nnz, (long long)res.products, (long long)res.nnz,
                kd_bench_median(wall, (size_t)runs), kd_bench_min(wall, (size_t)runs),
                kd_bench_median(dev, (size_t)runs), res.peak, checksum,
                diff == 0 ? "exact" : "differs");
        fflush(json);
    }
    printf("%-22s rows per bin (empty, t4, t8, t16, t32, t64, group, global): symbolic", "");
    for (int b = 0; b < 8; b++)
        printf(" %lld", (long long)res.bin_rows[b]);
    printf(", numeric");
    for (int b = 0; b < 8; b++)
        printf(" %lld", (long long)res.numeric_bin_rows[b]);
    printf("\n");
    kd_bench_spgemm_print_kernels(&kt);
    fflush(stdout);
done:
    if (rc != KD_OK)
        fprintf(stderr, "krylov-bench: %s: %s\n", name, err.message);
    kd_csr_device_release(&dl);
    kd_csr_device_release(&dr);
    kd_csr_device_release(&drr);
    kd_csr_free(left);
    kd_csr_free(right);
    kd_csr_free(p);
    kd_csr_free(r);
    kd_csr_free(ref);
    kd_csr_free(got);
    free(dev);
    free(wall);
    free(sym);
    free(num);
    free(kt.ms);
    return rc;
}

int kd_bench_spgemm_main(int argc, char **argv)
{
    const char *device = "auto", *export_dir = NULL, *json_path = NULL;
    kd_dtype_t dtype = KD_DTYPE_F64;
    kd_bench_op_t op = KD_BENCH_AA;
    int runs = 10, warmup = 2, nspecs = 0;
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
        else if (strcmp(a, "--export") == 0 && next != NULL)
            export_dir = argv[++i];
        else if (strcmp(a, "--json") == 0 && next != NULL)
            json_path = argv[++i];
        else if (strcmp(a, "--op") == 0 && next != NULL) {
            i++;
            op = strcmp(next, "ata") == 0   ? KD_BENCH_ATA
                 : strcmp(next, "rap") == 0 ? KD_BENCH_RAP
                                            : KD_BENCH_AA;
            if (op == KD_BENCH_AA && strcmp(next, "aa") != 0)
                nspecs = -1;
        } else if (a[0] == '-') {
            nspecs = -1;
            break;
        } else if (nspecs >= 0)
            specs[nspecs++] = a;
    }
    if (nspecs <= 0 || runs < 1) {
        kd_bench_spgemm_usage();
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
    FILE *json = json_path != NULL ? fopen(json_path, "a") : NULL;
    if (json_path != NULL && json == NULL)
        perror(json_path);
    const kd_ocl_device_desc_t *d = kd_ocl_desc(ocl);
    static const char *const ops[] = {"A A", "A^T A", "R (A P)"};
    printf("device: %s (%s, driver %s), %s, C = %s, %d runs (+%d warm-up); ms: device = kernels' "
           "span, wall = host clock around kd_spgemm\n",
           d->name, d->platform, d->driver, kd_dtype_name(dtype), ops[op], runs, warmup);
    printf("%-22s %9s %10s %11s %11s %8s %8s %8s %8s %7s %7s %8s  %s\n", "matrix", "rows", "nnz(A)",
           "products", "nnz(C)", "dev_min", "dev_med", "wall_min", "wall_med", "sym", "num",
           "peak_MiB", "check");
    int status = 0;
    for (int s = 0; s < nspecs; s++) {
        char name[128];
        kd_bench_matrix_name(specs[s], name, sizeof(name));
        kd_csr_t *a = kd_matgen_by_name(specs[s], dtype);
        if (a == NULL) {
            status = 1;
            continue;
        }
        if (op != KD_BENCH_ATA && a->rows != a->cols) {
            fprintf(stderr, "krylov-bench: %s is %lld x %lld: --op %s needs a square matrix\n",
                    name, (long long)a->rows, (long long)a->cols, op == KD_BENCH_AA ? "aa" : "rap");
            status = 1;
        } else if (kd_bench_spgemm_matrix(ocl, name, op, a, warmup, runs, export_dir, json) !=
                   KD_OK) {
            status = 1;
        }
        kd_csr_free(a);
    }
    if (json != NULL)
        fclose(json);
    kd_ocl_close(ocl);
    free(specs);
    return status;
}
