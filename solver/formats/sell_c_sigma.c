/*
 * SELL-C-sigma with C = 32 rows per slice (a warp on NVIDIA; 8 slices per work-group of 256) and
 * sigma = 1024 rows per sorting window (kernels/formats/sell_c_sigma.cl has the layout and the
 * thread mapping). The permutation and the slice pointers are made here in O(rows): inside each
 * window a stable counting sort by length, longest first (a comparison sort for the rare window
 * whose longest row is much longer than the window), so rows of equal length keep their order and
 * x and y accesses keep their locality. The slots are then filled on the device from the source's
 * CSR arrays by kd_sell_from_csr.
 *
 * Device memory: the padded slots * (4 + sizeof(value)), 4 bytes per row of permutation and 8 per
 * slice of pointers. Sorting makes the padding small for almost any row-length distribution; what
 * the format does not fix is a single very long row, which one work-item walks alone.
 */
#include "solver/formats/format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_SELL_C 32
#define KD_SELL_SIGMA 1024

typedef struct kd_sell {
    cl_mem slice_ptr; /* slices + 1 int64 */
    cl_mem perm;      /* rows int32 */
    cl_mem indices;   /* slice_ptr[slices] int32 */
    cl_mem values;    /* slice_ptr[slices] VALUE */
} kd_sell_t;

typedef struct kd_sell_pair {
    int32_t len, row;
} kd_sell_pair_t;

static int sell_pair_cmp(const void *a, const void *b)
{
    const kd_sell_pair_t *x = a, *y = b;
    if (x->len != y->len)
        return x->len > y->len ? -1 : 1;
    return (x->row > y->row) - (x->row < y->row);
}

/*
 * Sort each window and compute the slice pointers. perm (rows) and slice_ptr (slices + 1) may be
 * NULL for a dry run; the result is the number of padded slots, or -1 when out of host memory.
 */
static int64_t sell_plan(const kd_csr_t *csr, int32_t *perm, int64_t *slice_ptr)
{
    const int32_t *ip = csr->indptr;
    int64_t rows = csr->rows, total = 0;
    int32_t *counts = malloc((4 * KD_SELL_SIGMA + 2) * sizeof(int32_t));
    int32_t *sorted = malloc(KD_SELL_SIGMA * sizeof(int32_t));
    kd_sell_pair_t *pairs = malloc(KD_SELL_SIGMA * sizeof(kd_sell_pair_t));
    if (counts == NULL || sorted == NULL || pairs == NULL) {
        total = -1;
        goto done;
    }
    if (slice_ptr != NULL)
        slice_ptr[0] = 0;
    for (int64_t w0 = 0; w0 < rows; w0 += KD_SELL_SIGMA) {
        int64_t n = rows - w0 < KD_SELL_SIGMA ? rows - w0 : KD_SELL_SIGMA;
        int32_t maxlen = 0;
        for (int64_t i = 0; i < n; i++) {
            int32_t len = ip[w0 + i + 1] - ip[w0 + i];
            if (len > maxlen)
                maxlen = len;
        }
        if (maxlen <= 4 * KD_SELL_SIGMA) { /* stable counting sort, longest first */
            memset(counts, 0, ((size_t)maxlen + 2) * sizeof(int32_t));
            for (int64_t i = 0; i < n; i++)
                counts[ip[w0 + i + 1] - ip[w0 + i]]++;
            int32_t pos = 0;
            for (int32_t len = maxlen; len >= 0; len--) {
                int32_t c = counts[len];
                counts[len] = pos;
                pos += c;
            }
            for (int64_t i = 0; i < n; i++)
                sorted[counts[ip[w0 + i + 1] - ip[w0 + i]]++] = (int32_t)(w0 + i);
        } else {
            for (int64_t i = 0; i < n; i++) {
                pairs[i].len = ip[w0 + i + 1] - ip[w0 + i];
                pairs[i].row = (int32_t)(w0 + i);
            }
            qsort(pairs, (size_t)n, sizeof(pairs[0]), sell_pair_cmp);
            for (int64_t i = 0; i < n; i++)
                sorted[i] = pairs[i].row;
        }
        if (perm != NULL)
            memcpy(perm + w0, sorted, (size_t)n * sizeof(int32_t));
        for (int64_t s = 0; s < n; s += KD_SELL_C) {
            int32_t r = sorted[s];
            total += (int64_t)(ip[r + 1] - ip[r]) * KD_SELL_C;
            if (slice_ptr != NULL)
                slice_ptr[(w0 + s) / KD_SELL_C + 1] = total;
        }
    }
done:
    free(counts);
    free(sorted);
    free(pairs);
    return total;
}

static size_t sell_slices(const kd_csr_t *csr)
{
    return ((size_t)csr->rows + KD_SELL_C - 1) / KD_SELL_C;
}

typedef struct kd_sell_prepared {
    int64_t slots;
    int32_t *perm;      /* rows */
    int64_t *slice_ptr; /* slices + 1 */
} kd_sell_prepared_t;

static void sell_prepared_free(void *prepared)
{
    kd_sell_prepared_t *p = prepared;
    if (p == NULL)
        return;
    free(p->perm);
    free(p->slice_ptr);
    free(p);
}

static int sell_prepare(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    kd_sell_prepared_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return KD_ENOMEM;
    p->perm = malloc((size_t)csr->rows * sizeof(int32_t) + 1);
    p->slice_ptr = malloc((sell_slices(csr) + 1) * sizeof(int64_t));
    if (p->perm == NULL || p->slice_ptr == NULL ||
        (p->slots = sell_plan(csr, p->perm, p->slice_ptr)) < 0) {
        sell_prepared_free(p);
        return KD_ENOMEM;
    }
    src->prepared[KD_FMT_SELL_C_SIGMA] = p;
    return KD_OK;
}

static size_t sell_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    if (src->prepared[KD_FMT_SELL_C_SIGMA] == NULL && sell_prepare(ocl, src) != KD_OK)
        return SIZE_MAX;
    const kd_sell_prepared_t *p = src->prepared[KD_FMT_SELL_C_SIGMA];
    size_t meta = (size_t)csr->rows * sizeof(int32_t) + (sell_slices(csr) + 1) * sizeof(int64_t);
    return kd_format_size_mad((size_t)p->slots, sizeof(int32_t) + kd_dtype_size(csr->dtype), meta);
}

static void sell_release(kd_matrix_t *m)
{
    kd_sell_t *impl = m->impl;
    if (impl == NULL)
        return;
    cl_mem mems[] = {impl->slice_ptr, impl->perm, impl->indices, impl->values};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
    free(impl);
    m->impl = NULL;
}

/* The build option that sets the slice height in kernels/formats/sell_c_sigma.cl: "-DKD_SELL_C=32".
 */
#define KD_SELL_QUOTE(x) #x
#define KD_SELL_OPTION(c) "-DKD_SELL_C=" KD_SELL_QUOTE(c)
#define KD_SELL_OPTIONS KD_SELL_OPTION(KD_SELL_C)
const char kd_format_sell_options[] = KD_SELL_OPTIONS;

static int sell_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    size_t v = kd_dtype_size(csr->dtype);
    size_t slices = sell_slices(csr);
    kd_sell_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    if (src->prepared[KD_FMT_SELL_C_SIGMA] == NULL && sell_prepare(ocl, src) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory sorting rows for SELL-C-sigma");
    const kd_sell_prepared_t *p = src->prepared[KD_FMT_SELL_C_SIGMA];
    int64_t slots = p->slots;
    size_t ibytes = kd_format_size_mad((size_t)slots, sizeof(int32_t), 0);
    size_t vbytes = kd_format_size_mad((size_t)slots, v, 0);
    if (ibytes == SIZE_MAX || vbytes == SIZE_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "SELL-C-sigma arrays of %lld slots do not fit",
                          (long long)slots);
    int rc = kd_format_upload_array(ocl, m, p->slice_ptr, (slices + 1) * sizeof(int64_t),
                                    "slice pointers", &impl->slice_ptr, err);
    if (rc == KD_OK)
        rc = kd_format_upload_array(ocl, m, p->perm, (size_t)csr->rows * sizeof(int32_t),
                                    "row permutation", &impl->perm, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, ibytes, "SELL column indices", &impl->indices, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, vbytes, "SELL values", &impl->values, err);
    if (rc != KD_OK || slots == 0 || csr->rows == 0)
        return rc;

    return kd_format_run(
        ocl, csr->dtype, "sell_c_sigma", KD_SELL_OPTIONS, "kd_sell_from_csr", (size_t)csr->rows,
        KD_ARGS(KD_ARG_INT(csr->rows), KD_ARG_MEM(impl->slice_ptr), KD_ARG_MEM(impl->perm),
                KD_ARG_MEM(src->indptr), KD_ARG_MEM(src->indices), KD_ARG_MEM(src->values),
                KD_ARG_MEM(impl->indices), KD_ARG_MEM(impl->values)),
        err);
}

static int sell_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                     double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_sell_t *impl = m->impl;
    return kd_format_run(
        ocl, m->dtype, "sell_c_sigma", KD_SELL_OPTIONS, "kd_sell_spmv", (size_t)m->rows,
        KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_MEM(impl->slice_ptr), KD_ARG_MEM(impl->perm),
                KD_ARG_MEM(impl->indices), KD_ARG_MEM(impl->values), KD_ARG_MEM(x->mem),
                KD_ARG_MEM(y->mem), KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
        err);
}

static int sell_spmm(kd_ocl_t *ocl, const kd_matrix_t *m, int64_t k, double alpha, cl_mem x,
                     int64_t ldx, double beta, cl_mem y, int64_t ldy, kd_err_t *err)
{
    const kd_sell_t *impl = m->impl;
    return kd_format_run(
        ocl, m->dtype, "sell_c_sigma", KD_SELL_OPTIONS, "kd_sell_spmm", (size_t)m->rows,
        KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(k), KD_ARG_MEM(impl->slice_ptr),
                KD_ARG_MEM(impl->perm), KD_ARG_MEM(impl->indices), KD_ARG_MEM(impl->values),
                KD_ARG_MEM(x), KD_ARG_LONG(ldx), KD_ARG_MEM(y), KD_ARG_LONG(ldy),
                KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
        err);
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int sell_c_sigma_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_sell_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->slice_ptr, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->perm, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->values, KD_ARRAY_VALUES};
    return n;
}

const kd_format_ops_t kd_format_sell_c_sigma_ops = {
    .format = KD_FMT_SELL_C_SIGMA,
    .impl_size = sizeof(kd_sell_t),
    .arrays = sell_c_sigma_arrays,
    .prepare = sell_prepare,
    .prepared_free = sell_prepared_free,
    .plan_bytes = sell_plan_bytes,
    .upload = sell_upload,
    .spmv = sell_spmv,
    .spmm = sell_spmm,
    .release = sell_release,
};
