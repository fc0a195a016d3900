/*
 * New values on a held pattern (issue 22; matrix.h, kd_matrix_with_values).
 *
 * A format's device arrays are of three kinds (format.h, kd_format_array_t): pattern arrays
 * (indices, row pointers, slice pointers, row blocks), values arrays (one slot per stored entry
 * or padding, in the format's own order) and scratch. A matrix with new values on the same
 * pattern is a copy of the like matrix's impl struct in which the pattern arrays are the like
 * matrix's (one more reference each) and the others are new. Nothing about the format is chosen
 * or converted again.
 *
 * The values reach their slots through one map per values array, slot -> canonical position
 * (-1 for padding), made once per pattern and shared: the format is built once from the pattern
 * with each entry's position + 1 as its value (in the matrix's dtype; float32 holds positions
 * exactly up to 2^24, so past that two builds carry the low and high 16 bits), and the values
 * arrays are read back. Every conversion kernel copies values or writes zero, so a slot holding
 * k + 1 is entry k's; slots no kernel wrote (alignment rows past the last row) are never read
 * by an SpMV, so whatever the map says of them is harmless, as long as it is in range. The
 * probe's pattern arrays must equal the like matrix's byte for byte, or the format did
 * something with values that a copy does not describe, and the pattern is marked unshareable
 * (KD_EUNSUPPORTED: the caller builds from the CSR). A values array whose map is the identity
 * (the CSR formats without a reordering) has no map: the new values are written straight into
 * it.
 *
 * Accounting: the shared arrays, the reordering's permutations and the maps are counted once,
 * in one member's device_bytes (the first); when that member is freed the count moves to the
 * next one (kd_matrix_shares says whether the caller should look at its other matrices' sizes
 * again).
 */
#include "common/clock.h"
#include "solver/formats/format.h"
#include "solver/matrix_scan.h"
#include "solver/matrix_share.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static size_t kd_mem_size(cl_mem mem)
{
    size_t bytes = 0;
    if (mem != NULL &&
        clGetMemObjectInfo(mem, CL_MEM_SIZE, sizeof(bytes), &bytes, NULL) != CL_SUCCESS)
        bytes = 0;
    return bytes;
}

/* Read `bytes` of mem into a new host buffer. */
static int kd_read_back(kd_ocl_t *ocl, cl_mem mem, size_t bytes, void **out, kd_err_t *err)
{
    *out = malloc(bytes ? bytes : 1);
    if (*out == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory reading %zu bytes back", bytes);
    if (bytes == 0)
        return KD_OK;
    cl_int st = kd_ocl_enqueue_read(kd_ocl_queue(ocl), mem, CL_TRUE, 0, bytes, *out, 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        free(*out);
        *out = NULL;
        return kd_ocl_fail(err, st, "clEnqueueReadBuffer");
    }
    return KD_OK;
}

/* Whether the probe's pattern arrays are the like matrix's, byte for byte. */
static int kd_share_same_pattern(kd_ocl_t *ocl, const kd_format_array_t *a,
                                 const kd_format_array_t *b, int n, int *same, kd_err_t *err)
{
    *same = 1;
    for (int i = 0; i < n && *same; i++) {
        size_t na = kd_mem_size(*a[i].mem), nb = kd_mem_size(*b[i].mem);
        if (a[i].kind != b[i].kind || na != nb) {
            *same = 0;
            break;
        }
        if (a[i].kind != KD_ARRAY_PATTERN || na == 0)
            continue;
        void *ha = NULL, *hb = NULL;
        int rc = kd_read_back(ocl, *a[i].mem, na, &ha, err);
        if (rc == KD_OK)
            rc = kd_read_back(ocl, *b[i].mem, nb, &hb, err);
        if (rc == KD_OK)
            *same = memcmp(ha, hb, na) == 0;
        free(ha);
        free(hb);
        if (rc != KD_OK)
            return rc;
    }
    return KD_OK;
}

/* Pass `pass` of `passes` of the probe: entry k's value is k + 1, or its low (pass 0) or high
 * (pass 1) 16 bits + 1. */
static double kd_probe_value(int64_t k, int pass, int passes)
{
    if (passes == 1)
        return (double)(k + 1);
    return (double)(pass == 0 ? (k & 0xffff) + 1 : (k >> 16) + 1);
}

/* The format built from like's pattern (in like's order) with the probe's values. */
static int kd_probe_build(kd_ocl_t *ocl, const kd_matrix_t *like, const kd_csr_t *pattern, int pass,
                          int passes, kd_matrix_t **out, kd_err_t *err)
{
    kd_csr_t *probe = NULL, *permuted = NULL;
    int rc = kd_csr_alloc(pattern->rows, pattern->cols, pattern->nnz, like->dtype, &probe, err);
    if (rc != KD_OK)
        return rc;
    memcpy(probe->indptr, pattern->indptr, ((size_t)pattern->rows + 1) * sizeof(int32_t));
    memcpy(probe->indices, pattern->indices, (size_t)pattern->nnz * sizeof(int32_t));
    for (int64_t k = 0; k < pattern->nnz; k++)
        kd_store_real(probe->values, like->dtype, (size_t)k, kd_probe_value(k, pass, passes));
    if (like->order.kind != KD_REORDER_NONE)
        rc = kd_reorder_apply(probe, like->order.perm, &permuted, err);
    if (rc == KD_OK)
        rc = kd_matrix_upload(ocl, permuted != NULL ? permuted : probe, like->format, out, err);
    kd_csr_free(permuted);
    kd_csr_free(probe);
    return rc;
}

/* Fold one probe pass's values array into map (slots entries, -1 where no entry). */
static void kd_probe_decode(const void *vals, kd_dtype_t dtype, size_t slots, int64_t nnz, int pass,
                            int passes, int32_t *map)
{
    const double limit =
        passes == 1 ? (double)nnz : (double)(pass == 0 ? 0x10000 : (nnz >> 16) + 1);
    for (size_t s = 0; s < slots; s++) {
        double v = kd_load_real(vals, dtype, s);
        int64_t part = (v >= 1.0 && v <= limit && v == floor(v)) ? (int64_t)v - 1 : -1;
        if (pass == 0)
            map[s] = (int32_t)part;
        else if (map[s] >= 0 && part >= 0 && ((part << 16) | map[s]) < nnz)
            map[s] = (int32_t)((part << 16) | map[s]);
        else
            map[s] = -1;
    }
}

/* Every entry reaches some slot (else the format dropped or merged entries: unshareable). */
static int kd_map_covers(const int32_t *const *maps, const size_t *slots, int n, int64_t nnz,
                         int *covers)
{
    uint8_t *seen = calloc((size_t)nnz, 1);
    if (seen == NULL)
        return KD_ENOMEM;
    for (int i = 0; i < n; i++)
        for (size_t s = 0; maps[i] != NULL && s < slots[i]; s++)
            if (maps[i][s] >= 0)
                seen[maps[i][s]] = 1;
    *covers = 1;
    for (int64_t k = 0; k < nnz && *covers; k++)
        *covers = seen[k];
    free(seen);
    return KD_OK;
}

/* The maps of like's pattern (see the top of this file), into a new share with like as its
 * first member. */
static int kd_share_build(kd_ocl_t *ocl, kd_matrix_t *like, const kd_csr_t *pattern, kd_err_t *err)
{
    kd_matrix_share_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a shared pattern");
    kd_format_array_t la[KD_FORMAT_ARRAYS_MAX], pa[KD_FORMAT_ARRAYS_MAX];
    int32_t *maps[KD_FORMAT_ARRAYS_MAX] = {NULL};
    const size_t vsize = kd_dtype_size(like->dtype);
    int passes = like->dtype == KD_DTYPE_F32 && pattern->nnz >= (1 << 24) - 1 ? 2 : 1;
#ifdef KD_TEST_HOOKS
    if (getenv("KD_TEST_PROBE_SPLIT") != NULL) /* the two-pass decoding on a small matrix */
        passes = 2;
#endif
    int rc = KD_OK, same = 1;
    s->narrays = like->ops->arrays(like, la);
    for (int pass = 0; pass < passes && rc == KD_OK && same; pass++) {
        kd_matrix_t *probe = NULL;
        rc = kd_probe_build(ocl, like, pattern, pass, passes, &probe, err);
        if (rc == KD_OK && probe->ops->arrays(probe, pa) != s->narrays)
            same = 0;
        if (rc == KD_OK && same && pass == 0)
            rc = kd_share_same_pattern(ocl, la, pa, s->narrays, &same, err);
        for (int i = 0; i < s->narrays && rc == KD_OK && same; i++) {
            if (la[i].kind != KD_ARRAY_VALUES)
                continue;
            s->slots[i] = kd_mem_size(*la[i].mem) / vsize;
            void *vals = NULL;
            if (maps[i] == NULL && (maps[i] = malloc(s->slots[i] * sizeof(int32_t) + 1)) == NULL)
                rc = kd_err_set(err, KD_ENOMEM, "out of host memory for a values map");
            if (rc == KD_OK &&
                (rc = kd_read_back(ocl, *pa[i].mem, s->slots[i] * vsize, &vals, err)) == KD_OK)
                kd_probe_decode(vals, like->dtype, s->slots[i], pattern->nnz, pass, passes,
                                maps[i]);
            free(vals);
        }
        kd_matrix_free(probe);
    }
    int covers = 0;
    if (rc == KD_OK && same &&
        kd_map_covers((const int32_t *const *)maps, s->slots, s->narrays, pattern->nnz, &covers) !=
            KD_OK)
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory checking a values map");
    s->unshareable = !same || !covers;
    for (int i = 0; i < s->narrays && rc == KD_OK && !s->unshareable; i++) {
        if (la[i].kind == KD_ARRAY_PATTERN)
            s->bytes += kd_mem_size(*la[i].mem);
        if (la[i].kind != KD_ARRAY_VALUES)
            continue;
        int identity = (int64_t)s->slots[i] == pattern->nnz;
        for (size_t k = 0; identity && k < s->slots[i]; k++)
            identity = maps[i][k] == (int32_t)k;
        if (identity)
            continue;
        rc = kd_format_buffer_from_host(ocl, maps[i], s->slots[i] * sizeof(int32_t), "a values map",
                                        &s->maps[i], err);
        s->bytes += s->slots[i] * sizeof(int32_t);
    }
    for (int i = 0; i < KD_FORMAT_ARRAYS_MAX; i++)
        free(maps[i]);
    if (rc == KD_OK && like->order.kind != KD_REORDER_NONE)
        s->bytes += kd_mem_size(like->order.perm_dev) + kd_mem_size(like->order.iperm_dev);
    if (rc == KD_OK)
        rc = kd_matrix_share_join(s, like, err);
    if (rc != KD_OK) {
        kd_format_release_mems(s->maps, KD_FORMAT_ARRAYS_MAX);
        free(s->members);
        free(s);
        return rc;
    }
    /* like already counts its pattern arrays and permutations; the maps are new */
    for (int i = 0; i < s->narrays; i++)
        like->device_bytes += kd_mem_size(s->maps[i]);
    return KD_OK;
}

/* m's arrays: like's pattern arrays shared, the others new (values not yet filled). */
static int kd_values_arrays(kd_ocl_t *ocl, const kd_matrix_t *like, kd_matrix_t *m,
                            kd_format_array_t *ma, int n, kd_err_t *err)
{
    kd_format_array_t la[KD_FORMAT_ARRAYS_MAX];
    like->ops->arrays((kd_matrix_t *)like, la);
    for (int i = 0; i < n; i++) { /* first make m releasable whatever happens next */
        if (ma[i].kind == KD_ARRAY_PATTERN && *ma[i].mem != NULL)
            clRetainMemObject(*ma[i].mem);
        else
            *ma[i].mem = NULL;
    }
    for (int i = 0; i < n; i++) {
        if (ma[i].kind == KD_ARRAY_PATTERN)
            continue;
        size_t bytes = kd_mem_size(*la[i].mem);
        int rc = kd_format_alloc_array(
            ocl, m, bytes, ma[i].kind == KD_ARRAY_VALUES ? "values" : "scratch", ma[i].mem, err);
        if (rc != KD_OK)
            return rc;
    }
    return KD_OK;
}

/* The reordering: like's permutations shared, the scratch vectors new. */
static int kd_values_order(kd_ocl_t *ocl, const kd_matrix_t *like, kd_matrix_t *m, kd_err_t *err)
{
    const kd_matrix_order_t *lo = &like->order;
    kd_matrix_order_t *o = &m->order;
    if (lo->kind == KD_REORDER_NONE)
        return KD_OK;
    const size_t bytes = (size_t)m->rows * sizeof(int32_t);
    if ((o->perm = malloc(bytes)) == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a permutation");
    memcpy(o->perm, lo->perm, bytes);
    o->kind = lo->kind;
    clRetainMemObject(o->perm_dev = lo->perm_dev);
    clRetainMemObject(o->iperm_dev = lo->iperm_dev);
    int rc = kd_vec_alloc(ocl, m->rows, m->dtype, &o->x_p, err);
    if (rc == KD_OK)
        rc = kd_vec_alloc(ocl, m->rows, m->dtype, &o->y_p, err);
    if (rc == KD_OK)
        m->device_bytes += 2 * (size_t)m->rows * kd_dtype_size(m->dtype);
    return rc;
}

/* Fill m's values arrays from csr's values (canonical order). */
static int kd_values_fill(kd_ocl_t *ocl, const kd_matrix_share_t *s, const kd_csr_t *csr,
                          kd_format_array_t *ma, int n, kd_err_t *err)
{
    const size_t vsize = kd_dtype_size(csr->dtype), bytes = (size_t)csr->nnz * vsize;
    cl_mem staging = NULL;
    int rc = KD_OK;
    for (int i = 0; i < n && rc == KD_OK; i++) {
        if (ma[i].kind != KD_ARRAY_VALUES || *ma[i].mem == NULL)
            continue;
        if (s->maps[i] == NULL) { /* identity: the values are the array */
            rc = kd_ocl_write(ocl, *ma[i].mem, 0, bytes, csr->values, err);
            continue;
        }
        if (staging == NULL &&
            (rc = kd_format_buffer_from_host(ocl, csr->values, bytes, "the new values", &staging,
                                             err)) != KD_OK)
            break;
        rc = kd_format_run(ocl, csr->dtype, "values", NULL, "kd_values_gather", s->slots[i],
                           KD_ARGS(KD_ARG_LONG((int64_t)s->slots[i]), KD_ARG_MEM(s->maps[i]),
                                   KD_ARG_MEM(staging), KD_ARG_MEM(*ma[i].mem)),
                           err);
    }
    if (staging != NULL)
        clReleaseMemObject(staging); /* freed once the gathers that read it have run */
    return rc;
}

/* The scan of the new values, in like's order where it has one (the diagonal permuted as
 * kd_matrix_attach_order leaves it; the scan's positions stay in the client's numbering). */
static int kd_values_scan(const kd_csr_t *csr, kd_matrix_t *m, kd_err_t *err)
{
    int rc = kd_matrix_scan(csr, &m->scan, &m->inv_diagonal, err);
    if (rc != KD_OK || m->order.kind == KD_REORDER_NONE || m->inv_diagonal == NULL)
        return rc;
    const size_t vsize = kd_dtype_size(m->dtype);
    char *permuted = malloc((size_t)m->rows * vsize);
    if (permuted == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a diagonal");
    for (int64_t i = 0; i < m->rows; i++)
        memcpy(permuted + (size_t)i * vsize,
               (const char *)m->inv_diagonal + (size_t)m->order.perm[i] * vsize, vsize);
    free(m->inv_diagonal);
    m->inv_diagonal = permuted;
    return KD_OK;
}

size_t kd_matrix_values_bytes(const kd_matrix_t *like)
{
    if (like->batch != NULL || like->ops == NULL || like->ops->arrays == NULL || like->impl == NULL)
        return like->device_bytes;
    kd_format_array_t la[KD_FORMAT_ARRAYS_MAX];
    const int n = like->ops->arrays((kd_matrix_t *)like, la);
    size_t all = 0, own = 0;
    for (int i = 0; i < n; i++) {
        size_t b = kd_mem_size(*la[i].mem);
        all += b;
        own += la[i].kind == KD_ARRAY_PATTERN ? 0 : b;
    }
    const size_t vsize = kd_dtype_size(like->dtype);
    size_t bytes = own + (size_t)like->nnz * vsize; /* + the staging copy of the values */
    if (like->order.kind != KD_REORDER_NONE)
        bytes += 2 * (size_t)like->rows * vsize;
    if (like->share == NULL) /* the probe (the format once more) and its maps, for a moment */
        bytes += all + own / vsize * sizeof(int32_t);
    return bytes;
}

typedef struct kd_values_scan_job {
    const kd_csr_t *csr;
    kd_matrix_t *m;
    int rc;
    kd_err_t err;
    double ms;
} kd_values_scan_job_t;

static void *kd_values_scan_run(void *arg)
{
    kd_values_scan_job_t *job = arg;
    const uint64_t t0 = kd_clock_ns();
    job->rc = kd_values_scan(job->csr, job->m, &job->err);
    job->ms = kd_clock_ms_since(t0);
    return NULL;
}

int kd_matrix_with_values(kd_ocl_t *ocl, kd_matrix_t *like, const kd_csr_t *csr, kd_matrix_t **out,
                          double times[4], kd_err_t *err)
{
    *out = NULL;
    const uint64_t t0 = kd_clock_ns();
    uint64_t t1 = t0, t2 = t0;
    if (like->batch != NULL || like->ops == NULL || like->ops->arrays == NULL ||
        like->ops->impl_size == 0 || like->impl == NULL || csr->rows == 0 || csr->nnz == 0)
        return kd_err_set(err, KD_EUNSUPPORTED, "format %s does not share its pattern",
                          kd_format_name(like->format));
    if (csr->rows != like->rows || csr->cols != like->cols || csr->nnz != like->nnz ||
        csr->dtype != like->dtype)
        return kd_err_set(err, KD_EBADREQ,
                          "new values: a %lld x %lld %s matrix with %lld entries is not the "
                          "shape of the like matrix (%lld x %lld %s, %lld entries)",
                          (long long)csr->rows, (long long)csr->cols, kd_dtype_name(csr->dtype),
                          (long long)csr->nnz, (long long)like->rows, (long long)like->cols,
                          kd_dtype_name(like->dtype), (long long)like->nnz);
    int rc;
    if (like->share == NULL && (rc = kd_share_build(ocl, like, csr, err)) != KD_OK)
        return rc;
    kd_matrix_share_t *s = like->share;
    if (s->unshareable)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "format %s's arrays for this pattern depend on more than the pattern",
                          kd_format_name(like->format));
    kd_matrix_t *m = calloc(1, sizeof(*m));
    if (m == NULL || (m->impl = malloc(like->ops->impl_size)) == NULL) {
        free(m);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    }
    memcpy(m->impl, like->impl, like->ops->impl_size);
    m->rows = like->rows;
    m->cols = like->cols;
    m->nnz = like->nnz;
    m->dtype = like->dtype;
    m->format = like->format;
    m->ops = like->ops;
    kd_format_array_t ma[KD_FORMAT_ARRAYS_MAX];
    const int n = m->ops->arrays(m, ma);
    rc = kd_values_arrays(ocl, like, m, ma, n, err);
    if (rc == KD_OK)
        rc = kd_values_order(ocl, like, m, err);
    t1 = kd_clock_ns();
    /* the scan (host threads) beside the values' transfer (the copy engine) */
    kd_values_scan_job_t scan = {.csr = csr, .m = m, .rc = KD_OK};
    pthread_t thread;
    const int beside = rc == KD_OK && pthread_create(&thread, NULL, kd_values_scan_run, &scan) == 0;
    if (rc == KD_OK)
        rc = kd_values_fill(ocl, s, csr, ma, n, err);
    t2 = kd_clock_ns();
    if (beside)
        pthread_join(thread, NULL);
    else if (rc == KD_OK)
        kd_values_scan_run(&scan);
    if (rc == KD_OK && scan.rc != KD_OK)
        rc = kd_err_set(err, scan.rc, "%s", scan.err.message);
    if (rc == KD_OK)
        rc = kd_matrix_share_join(s, m, err);
    if (times != NULL) {
        times[0] = (double)(t1 - t0) / 1e6;
        times[1] = scan.ms;
        times[2] = (double)(t2 - t1) / 1e6;
        times[3] = kd_clock_ms_since(t0);
    }
    if (rc != KD_OK) {
        kd_err_prefix(err, "new values on a %s matrix's pattern", kd_format_name(like->format));
        kd_matrix_free(m);
        return rc;
    }
    *out = m;
    return KD_OK;
}

int kd_matrix_values_canonical(kd_ocl_t *ocl, const kd_matrix_t *m, cl_mem out, kd_err_t *err)
{
    const kd_matrix_share_t *s = m->share;
    if (s == NULL || s->unshareable || m->order.kind != KD_REORDER_NONE || m->ops == NULL ||
        m->ops->arrays == NULL || m->impl == NULL || m->nnz == 0)
        return kd_err_set(err, KD_EUNSUPPORTED, "the matrix's values have no map to their entries");
    kd_format_array_t ma[KD_FORMAT_ARRAYS_MAX];
    const int n = m->ops->arrays((kd_matrix_t *)m, ma);
    const size_t bytes = (size_t)m->nnz * kd_dtype_size(m->dtype);
    int rc = KD_OK;
    for (int i = 0; i < n && rc == KD_OK; i++) {
        if (ma[i].kind != KD_ARRAY_VALUES || *ma[i].mem == NULL)
            continue;
        if (s->maps[i] == NULL) { /* identity: the array is the canonical values */
            cl_int st = clEnqueueCopyBuffer(kd_ocl_queue(ocl), *ma[i].mem, out, 0, 0, bytes, 0,
                                            NULL, NULL);
            if (st != CL_SUCCESS)
                rc = kd_ocl_fail(err, st, "clEnqueueCopyBuffer");
            continue;
        }
        rc = kd_format_run(ocl, m->dtype, "values", NULL, "kd_values_scatter", s->slots[i],
                           KD_ARGS(KD_ARG_LONG((int64_t)s->slots[i]), KD_ARG_MEM(s->maps[i]),
                                   KD_ARG_MEM(*ma[i].mem), KD_ARG_MEM(out)),
                           err);
    }
    return rc;
}
