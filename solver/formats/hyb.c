/*
 * HYB (Bell and Garland, SC09): an ELL part of width K holding the first K entries of every row,
 * and a COO part holding the rest. K is the largest width that at least a third of the rows fill
 * (from a histogram of row lengths, O(rows + longest row) on the host), so the ELL part is mostly
 * real entries and the few long rows go to COO, where their length costs nothing extra. SpMV is
 * the ELL kernel (y = alpha * A_ell x + beta * y) followed by the COO part's segmented reduction
 * adding alpha * A_coo x (kernels/formats/hyb.cl, ell.cl, coo.cl). Both parts are built on the
 * device from the source's CSR arrays; the only host array sent is the COO part's per-row offsets,
 * freed after the conversion. Device memory: K * ld * (4 + sizeof(value)) for the ELL part and (8 +
 * sizeof(value)) per overflow entry plus 2 values per chunk for the COO part.
 */
#include "solver/formats/format.h"

#include <stdlib.h>

typedef struct kd_hyb {
    kd_ell_part_t ell;
    kd_coo_part_t coo;
} kd_hyb_t;

/* K: the largest k with at least max(1, rows / 3) rows of length >= k (0 for an empty matrix);
 * *overflow: the entries past the K-th of their row. -1 when out of host memory. */
static int hyb_width(const kd_csr_t *csr, const kd_csr_stats_t *stats, int64_t *overflow)
{
    int64_t maxlen = stats->max_row;
    int64_t *hist = calloc((size_t)maxlen + 2, sizeof(int64_t));
    if (hist == NULL)
        return -1;
    for (int64_t r = 0; r < csr->rows; r++)
        hist[csr->indptr[r + 1] - csr->indptr[r]]++;
    int64_t need = csr->rows / 3 > 1 ? csr->rows / 3 : 1;
    int64_t at_least = 0, k = maxlen;
    for (; k > 0; k--) {
        at_least += hist[k];
        if (at_least >= need)
            break;
    }
    int64_t over = 0;
    for (int64_t len = k + 1; len <= maxlen; len++)
        over += hist[len] * (len - k);
    free(hist);
    *overflow = over;
    return (int)k;
}

typedef struct kd_hyb_prepared {
    int width;
    int64_t overflow;
    int32_t *offsets; /* rows + 1: where each row's overflow starts in the COO part */
} kd_hyb_prepared_t;

static void hyb_prepared_free(void *prepared)
{
    kd_hyb_prepared_t *p = prepared;
    if (p == NULL)
        return;
    free(p->offsets);
    free(p);
}

static int hyb_prepare(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    kd_hyb_prepared_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return KD_ENOMEM;
    p->width = hyb_width(csr, &src->stats, &p->overflow);
    p->offsets = malloc(((size_t)csr->rows + 1) * sizeof(int32_t));
    if (p->width < 0 || p->offsets == NULL) {
        hyb_prepared_free(p);
        return KD_ENOMEM;
    }
    int64_t d = 0;
    for (int64_t r = 0; r < csr->rows; r++) {
        p->offsets[r] = (int32_t)d;
        int64_t len = csr->indptr[r + 1] - csr->indptr[r];
        d += len > p->width ? len - p->width : 0;
    }
    p->offsets[csr->rows] = (int32_t)d;
    src->prepared[KD_FMT_HYB] = p;
    return KD_OK;
}

static size_t hyb_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    if (src->prepared[KD_FMT_HYB] == NULL && hyb_prepare(ocl, src) != KD_OK)
        return SIZE_MAX;
    const kd_hyb_prepared_t *p = src->prepared[KD_FMT_HYB];
    size_t v = kd_dtype_size(csr->dtype);
    size_t wg = kd_ocl_work_group_size(ocl);
    size_t ell = kd_ell_part_bytes(csr->rows, p->width, csr->dtype);
    size_t coo = kd_format_size_mad((size_t)p->overflow, 2 * sizeof(int32_t) + v,
                                    2 * v * (((size_t)p->overflow + wg - 1) / wg));
    return ell == SIZE_MAX || coo == SIZE_MAX || ell > SIZE_MAX - coo ? SIZE_MAX : ell + coo;
}

static void hyb_release(kd_matrix_t *m)
{
    kd_hyb_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_ell_part_release(&impl->ell);
    kd_coo_part_release(&impl->coo);
    free(impl);
    m->impl = NULL;
}

static int hyb_build_coo(kd_ocl_t *ocl, kd_format_source_t *src, kd_hyb_t *impl, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    cl_mem coo_ptr = NULL;
    const kd_hyb_prepared_t *p = src->prepared[KD_FMT_HYB];
    int rc = kd_format_buffer_from_host(ocl, p->offsets, ((size_t)csr->rows + 1) * sizeof(int32_t),
                                        "HYB overflow offsets", &coo_ptr, err);
    if (rc != KD_OK)
        return rc;
    rc = kd_format_run(ocl, csr->dtype, "hyb", NULL, "kd_hyb_coo_from_csr", (size_t)csr->nnz,
                       KD_ARGS(KD_ARG_INT(csr->nnz), KD_ARG_INT(csr->rows),
                               KD_ARG_INT(impl->ell.width), KD_ARG_MEM(src->indptr),
                               KD_ARG_MEM(coo_ptr), KD_ARG_MEM(src->indices),
                               KD_ARG_MEM(src->values), KD_ARG_MEM(impl->coo.rows),
                               KD_ARG_MEM(impl->coo.cols), KD_ARG_MEM(impl->coo.values)),
                       err);
    clReleaseMemObject(coo_ptr); /* freed once the conversion is done */
    return rc;
}

static int hyb_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    size_t v = kd_dtype_size(csr->dtype);
    kd_hyb_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    if (src->prepared[KD_FMT_HYB] == NULL && hyb_prepare(ocl, src) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for HYB's row offsets");
    const kd_hyb_prepared_t *p = src->prepared[KD_FMT_HYB];
    int64_t over = p->overflow;
    int rc = kd_ell_part_build(ocl, src, m, p->width, "HYB ELL", &impl->ell, err);
    impl->coo.nnz = over;
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, (size_t)over * sizeof(int32_t), "HYB COO rows",
                                   &impl->coo.rows, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, (size_t)over * sizeof(int32_t), "HYB COO columns",
                                   &impl->coo.cols, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, (size_t)over * v, "HYB COO values", &impl->coo.values,
                                   err);
    if (rc == KD_OK)
        rc = kd_coo_part_alloc_partials(ocl, m, &impl->coo, err);
    if (rc == KD_OK && over > 0)
        rc = hyb_build_coo(ocl, src, impl, err);
    return rc;
}

static int hyb_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                    double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_hyb_t *impl = m->impl;
    int rc = kd_ell_part_spmv(ocl, m, &impl->ell, alpha, x, beta, y, err);
    if (rc != KD_OK)
        return rc;
    return kd_coo_part_spmv(ocl, m->dtype, &impl->coo, alpha, x, y, err);
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int hyb_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_hyb_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->ell.indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->ell.values, KD_ARRAY_VALUES};
    out[n++] = (kd_format_array_t){&impl->coo.rows, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->coo.cols, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->coo.values, KD_ARRAY_VALUES};
    out[n++] = (kd_format_array_t){&impl->coo.head, KD_ARRAY_SCRATCH};
    out[n++] = (kd_format_array_t){&impl->coo.tail, KD_ARRAY_SCRATCH};
    return n;
}

const kd_format_ops_t kd_format_hyb_ops = {
    .format = KD_FMT_HYB,
    .impl_size = sizeof(kd_hyb_t),
    .arrays = hyb_arrays,
    .prepare = hyb_prepare,
    .prepared_free = hyb_prepared_free,
    .plan_bytes = hyb_plan_bytes,
    .upload = hyb_upload,
    .spmv = hyb_spmv,
    .release = hyb_release,
};
