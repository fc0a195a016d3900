/*
 * CSR vector: the shared CSR arrays with a group of T work-items per row
 * (kernels/formats/csr_vector.cl), T a power of two from 2 to 64 chosen at upload from the mean row
 * length (the smallest T at least the mean, so a typical row takes one or two coalesced steps). For
 * matrices whose rows are long enough that one work-item per row would read them serially. Device
 * memory: the same as csr_scalar (the source's arrays, shared).
 */
#include "solver/formats/format.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct kd_csr_vector {
    kd_format_csr_t csr;
    int threads_per_row;
} kd_csr_vector_t;

/* The smallest power of two in 2..64 that is at least the mean row length (64 above 32). */
int kd_format_csr_vector_threads(double mean_row, size_t wg)
{
    int t = 2;
    while (t < 64 && (double)t < mean_row)
        t *= 2;
    while ((size_t)t > wg && t > 1)
        t /= 2;
    return t;
}

static void csr_vector_release(kd_matrix_t *m)
{
    kd_csr_vector_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_format_release_csr(&impl->csr);
    free(impl);
    m->impl = NULL;
}

static size_t csr_vector_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    return kd_format_csr_bytes(csr);
}

static int csr_vector_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    kd_csr_vector_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    kd_format_share_csr(m, src, &impl->csr);
    impl->threads_per_row =
        kd_format_csr_vector_threads(src->stats.mean_row, kd_ocl_work_group_size(ocl));
    return KD_OK;
}

static int csr_vector_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                           double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_csr_vector_t *impl = m->impl;
    char extra[32];
    snprintf(extra, sizeof(extra), "-DKD_TPR=%d", impl->threads_per_row);
    size_t items = (size_t)m->rows * (size_t)impl->threads_per_row;
    return kd_format_run(ocl, m->dtype, "csr_vector", extra, "kd_csr_vector_spmv", items,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_MEM(impl->csr.indptr),
                                 KD_ARG_MEM(impl->csr.indices), KD_ARG_MEM(impl->csr.values),
                                 KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem),
                                 KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

static int csr_vector_spmm(kd_ocl_t *ocl, const kd_matrix_t *m, int64_t k, double alpha, cl_mem x,
                           int64_t ldx, double beta, cl_mem y, int64_t ldy, kd_err_t *err)
{
    const kd_csr_vector_t *impl = m->impl;
    char extra[32];
    snprintf(extra, sizeof(extra), "-DKD_TPR=%d", impl->threads_per_row);
    size_t items = (size_t)m->rows * (size_t)impl->threads_per_row;
    return kd_format_run(ocl, m->dtype, "csr_vector", extra, "kd_csr_vector_spmm", items,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(k), KD_ARG_MEM(impl->csr.indptr),
                                 KD_ARG_MEM(impl->csr.indices), KD_ARG_MEM(impl->csr.values),
                                 KD_ARG_MEM(x), KD_ARG_LONG(ldx), KD_ARG_MEM(y), KD_ARG_LONG(ldy),
                                 KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

static const kd_format_csr_t *csr_vector_arrays(const kd_matrix_t *m)
{
    return &((const kd_csr_vector_t *)m->impl)->csr;
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int csr_vector_device_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_csr_vector_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->csr.indptr, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->csr.indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->csr.values, KD_ARRAY_VALUES};
    return n;
}

const kd_format_ops_t kd_format_csr_vector_ops = {
    .format = KD_FMT_CSR_VECTOR,
    .impl_size = sizeof(kd_csr_vector_t),
    .arrays = csr_vector_device_arrays,
    .plan_bytes = csr_vector_plan_bytes,
    .upload = csr_vector_upload,
    .spmv = csr_vector_spmv,
    .spmm = csr_vector_spmm,
    .csr_arrays = csr_vector_arrays,
    .release = csr_vector_release,
};
