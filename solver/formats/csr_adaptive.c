/*
 * CSR adaptive: the shared CSR arrays plus a table of row blocks (kernels/formats/csr_adaptive.cl
 * explains the three kinds of block and their thread mapping). The table is made here, on the host,
 * in one pass over the row pointers:
 *
 *  - consecutive rows of at most CAP entries are packed into a stream block while the block holds
 *    at most CAP entries and at most WG rows (CAP = WG * 8 entries of local memory, fewer when the
 *    device has little);
 *  - a row of more than CAP entries and at most LONG = 4 CAP gets a vector block of its own (one
 *    work-group);
 *  - a longer row is split into chunks of CHUNK = 2 CAP entries, one work-group each, writing one
 *    partial sum per chunk; kd_csr_adaptive_long adds them up. The partials live in a device
 *    buffer owned by the matrix (one slot per chunk), reused by every spmv: the in-order queue
 *    runs one spmv after another.
 *
 * Device memory: the CSR arrays (shared), 16 bytes per block, and for long rows 8 bytes each plus
 * one value per chunk.
 */
#include "common/checked.h"
#include "solver/formats/format.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct kd_csr_adaptive {
    kd_format_csr_t csr;
    cl_mem blocks;     /* nblocks cl_int4 */
    cl_mem long_rows;  /* nlong int32 */
    cl_mem long_slots; /* nlong + 1 int32 */
    cl_mem partials;   /* nslots VALUE */
    size_t nblocks, nlong, nslots;
    int cap;
} kd_csr_adaptive_t;

typedef struct kd_adaptive_plan {
    int cap, chunk, long_len;
    size_t nblocks, nlong, nslots;
    cl_int4 *blocks; /* NULL for a dry run */
    int32_t *long_rows, *long_slots;
} kd_adaptive_plan_t;

/* CAP: WG * 8 entries (or env KD_CSR_ADAPTIVE_CAP, a multiple of WG: developer-only, for tuning
 * experiments, docs/OPERATIONS.md), halved until the products and the reduction scratch take at
 * most half of the device's local memory (at least WG entries). */
int kd_format_csr_adaptive_cap(const kd_ocl_t *ocl, kd_dtype_t dtype)
{
    size_t wg = kd_ocl_work_group_size(ocl);
    size_t v = kd_dtype_size(dtype);
    size_t local = kd_ocl_desc(ocl)->local_mem_bytes;
    size_t cap = wg * 8;
    const char *env = getenv("KD_CSR_ADAPTIVE_CAP");
    if (env != NULL && atol(env) >= (long)wg && atol(env) % (long)wg == 0)
        cap = (size_t)atol(env);
    while (cap > wg && (cap + wg) * v > local / 2)
        cap /= 2;
    return (int)cap;
}

static void adaptive_push(kd_adaptive_plan_t *p, int32_t a, int32_t b, int32_t c, int32_t d)
{
    if (p->blocks != NULL) {
        cl_int4 *blk = &p->blocks[p->nblocks];
        blk->s[0] = a;
        blk->s[1] = b;
        blk->s[2] = c;
        blk->s[3] = d;
    }
    p->nblocks++;
}

/* Walk the rows once: count (dry run) or fill the block and long-row tables. */
static void adaptive_walk(const kd_csr_t *csr, size_t wg, kd_adaptive_plan_t *p)
{
    const int32_t *ip = csr->indptr;
    p->nblocks = p->nlong = p->nslots = 0;
    int64_t r = 0;
    while (r < csr->rows) {
        int64_t len = ip[r + 1] - ip[r];
        if (len > p->cap) {
            if (len > p->long_len) {
                if (p->long_rows != NULL) {
                    p->long_rows[p->nlong] = (int32_t)r;
                    p->long_slots[p->nlong] = (int32_t)p->nslots;
                }
                p->nlong++;
                for (int64_t k = ip[r]; k < ip[r + 1]; k += p->chunk) {
                    int64_t end = k + p->chunk < ip[r + 1] ? k + p->chunk : ip[r + 1];
                    adaptive_push(p, (int32_t)r, -(int32_t)p->nslots - 1, (int32_t)k, (int32_t)end);
                    p->nslots++;
                }
            } else {
                adaptive_push(p, (int32_t)r, (int32_t)r + 1, ip[r], ip[r + 1]);
            }
            r++;
            continue;
        }
        int64_t start = r, n = 0;
        while (r < csr->rows && (size_t)(r - start) < wg) {
            int64_t l = ip[r + 1] - ip[r];
            if (n + l > p->cap)
                break;
            n += l;
            r++;
        }
        adaptive_push(p, (int32_t)start, (int32_t)r, ip[start], ip[r]);
    }
    if (p->long_slots != NULL)
        p->long_slots[p->nlong] = (int32_t)p->nslots;
}

static void adaptive_plan_init(kd_adaptive_plan_t *p, const kd_ocl_t *ocl, kd_dtype_t dtype)
{
    p->cap = kd_format_csr_adaptive_cap(ocl, dtype);
    p->chunk = 2 * p->cap;
    p->long_len = 4 * p->cap;
    p->blocks = NULL;
    p->long_rows = p->long_slots = NULL;
}

static void adaptive_prepared_free(void *prepared)
{
    kd_adaptive_plan_t *p = prepared;
    if (p == NULL)
        return;
    free(p->blocks);
    free(p->long_rows);
    free(p->long_slots);
    free(p);
}

/* The block table, in src->prepared: one counting walk, then one filling walk. */
static int adaptive_prepare(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    size_t wg = kd_ocl_work_group_size(ocl);
    kd_adaptive_plan_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return KD_ENOMEM;
    adaptive_plan_init(p, ocl, csr->dtype);
    adaptive_walk(csr, wg, p);
    p->blocks = malloc((p->nblocks + 1) * sizeof(cl_int4));
    p->long_rows = malloc((p->nlong + 1) * sizeof(int32_t));
    p->long_slots = malloc((p->nlong + 1) * sizeof(int32_t));
    if (p->blocks == NULL || p->long_rows == NULL || p->long_slots == NULL) {
        adaptive_prepared_free(p);
        return KD_ENOMEM;
    }
    adaptive_walk(csr, wg, p);
    src->prepared[KD_FMT_CSR_ADAPTIVE] = p;
    return KD_OK;
}

static size_t adaptive_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    if (src->prepared[KD_FMT_CSR_ADAPTIVE] == NULL && adaptive_prepare(ocl, src) != KD_OK)
        return SIZE_MAX;
    const kd_adaptive_plan_t *p = src->prepared[KD_FMT_CSR_ADAPTIVE];
    size_t extra = p->nblocks * sizeof(cl_int4);
    if (p->nlong > 0)
        extra += p->nlong * 8 + 4 + p->nslots * kd_dtype_size(csr->dtype);
    size_t base = kd_format_csr_bytes(csr);
    return base > SIZE_MAX - extra ? SIZE_MAX : base + extra;
}

static void adaptive_release(kd_matrix_t *m)
{
    kd_csr_adaptive_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_format_release_csr(&impl->csr);
    cl_mem mems[] = {impl->blocks, impl->long_rows, impl->long_slots, impl->partials};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
    free(impl);
    m->impl = NULL;
}

static int adaptive_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    int rc = KD_OK;
    kd_csr_adaptive_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    size_t v = kd_dtype_size(csr->dtype);
    kd_format_share_csr(m, src, &impl->csr);

    if (src->prepared[KD_FMT_CSR_ADAPTIVE] == NULL && adaptive_prepare(ocl, src) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the row blocks");
    const kd_adaptive_plan_t *p = src->prepared[KD_FMT_CSR_ADAPTIVE];
    impl->nblocks = p->nblocks;
    impl->nlong = p->nlong;
    impl->nslots = p->nslots;
    impl->cap = p->cap;
    rc = kd_format_upload_array(ocl, m, p->blocks, p->nblocks * sizeof(cl_int4), "row blocks",
                                &impl->blocks, err);
    if (rc == KD_OK && p->nlong > 0) {
        rc = kd_format_upload_array(ocl, m, p->long_rows, p->nlong * sizeof(int32_t), "long rows",
                                    &impl->long_rows, err);
        if (rc == KD_OK)
            rc = kd_format_upload_array(ocl, m, p->long_slots, (p->nlong + 1) * sizeof(int32_t),
                                        "long-row slots", &impl->long_slots, err);
        if (rc == KD_OK)
            rc = kd_format_alloc_array(ocl, m, p->nslots * v, "long-row partial sums",
                                       &impl->partials, err);
    }
    return rc;
}

static int adaptive_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_csr_adaptive_t *impl = m->impl;
    size_t wg = kd_ocl_work_group_size(ocl);
    char extra[32];
    snprintf(extra, sizeof(extra), "-DKD_CAP=%d", impl->cap);
    int rc = kd_format_run(
        ocl, m->dtype, "csr_adaptive", extra, "kd_csr_adaptive_spmv", impl->nblocks * wg,
        KD_ARGS(KD_ARG_MEM(impl->blocks), KD_ARG_MEM(impl->csr.indptr),
                KD_ARG_MEM(impl->csr.indices), KD_ARG_MEM(impl->csr.values), KD_ARG_MEM(x->mem),
                KD_ARG_MEM(y->mem), KD_ARG_MEM(impl->partials), KD_ARG_VALUE(m->dtype, alpha),
                KD_ARG_VALUE(m->dtype, beta)),
        err);
    if (rc != KD_OK || impl->nlong == 0)
        return rc;
    return kd_format_run(ocl, m->dtype, "csr_adaptive", extra, "kd_csr_adaptive_long", impl->nlong,
                         KD_ARGS(KD_ARG_INT(impl->nlong), KD_ARG_MEM(impl->long_rows),
                                 KD_ARG_MEM(impl->long_slots), KD_ARG_MEM(impl->partials),
                                 KD_ARG_MEM(y->mem), KD_ARG_VALUE(m->dtype, alpha),
                                 KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

static const kd_format_csr_t *csr_adaptive_arrays(const kd_matrix_t *m)
{
    return &((const kd_csr_adaptive_t *)m->impl)->csr;
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int csr_adaptive_device_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_csr_adaptive_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->csr.indptr, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->csr.indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->csr.values, KD_ARRAY_VALUES};
    out[n++] = (kd_format_array_t){&impl->blocks, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->long_rows, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->long_slots, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->partials, KD_ARRAY_SCRATCH};
    return n;
}

const kd_format_ops_t kd_format_csr_adaptive_ops = {
    .format = KD_FMT_CSR_ADAPTIVE,
    .impl_size = sizeof(kd_csr_adaptive_t),
    .arrays = csr_adaptive_device_arrays,
    .prepare = adaptive_prepare,
    .prepared_free = adaptive_prepared_free,
    .plan_bytes = adaptive_plan_bytes,
    .upload = adaptive_upload,
    .spmv = adaptive_spmv,
    .csr_arrays = csr_adaptive_arrays,
    .release = adaptive_release,
};
