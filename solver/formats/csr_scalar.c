/*
 * CSR scalar: the matrix's own CSR arrays on the device, one work-item per row
 * (kernels/formats/csr_scalar.cl). The baseline every other format is measured against, and the
 * fastest for regular matrices with short rows of similar length. Device memory: (rows + 1) * 4
 * bytes of row pointers, nnz * 4 of column indices, nnz * sizeof(value) of values — the source's
 * arrays, shared by reference with the other CSR formats built from the same source.
 */
#include "solver/formats/format.h"

#include <stdlib.h>

static void csr_scalar_release(kd_matrix_t *m)
{
    kd_format_csr_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_format_release_csr(impl);
    free(impl);
    m->impl = NULL;
}

static size_t csr_scalar_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    return kd_format_csr_bytes(csr);
}

static int csr_scalar_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    kd_format_csr_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    kd_format_share_csr(m, src, impl);
    return KD_OK;
}

static int csr_scalar_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                           double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_format_csr_t *impl = m->impl;
    return kd_format_run(ocl, m->dtype, "csr_scalar", NULL, "kd_csr_scalar_spmv", (size_t)m->rows,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_MEM(impl->indptr),
                                 KD_ARG_MEM(impl->indices), KD_ARG_MEM(impl->values),
                                 KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem),
                                 KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

static int csr_scalar_spmm(kd_ocl_t *ocl, const kd_matrix_t *m, int64_t k, double alpha, cl_mem x,
                           int64_t ldx, double beta, cl_mem y, int64_t ldy, kd_err_t *err)
{
    const kd_format_csr_t *impl = m->impl;
    return kd_format_run(ocl, m->dtype, "csr_scalar", NULL, "kd_csr_scalar_spmm", (size_t)m->rows,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(k), KD_ARG_MEM(impl->indptr),
                                 KD_ARG_MEM(impl->indices), KD_ARG_MEM(impl->values), KD_ARG_MEM(x),
                                 KD_ARG_LONG(ldx), KD_ARG_MEM(y), KD_ARG_LONG(ldy),
                                 KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

const kd_format_csr_t *kd_format_csr_scalar_arrays(const kd_matrix_t *m)
{
    return m->format == KD_FMT_CSR_SCALAR && m->rows > 0 ? m->impl : NULL;
}

const kd_format_csr_t *kd_format_csr_arrays(const kd_matrix_t *m)
{
    return m->rows > 0 && m->ops->csr_arrays != NULL ? m->ops->csr_arrays(m) : NULL;
}

static const kd_format_csr_t *csr_scalar_arrays(const kd_matrix_t *m)
{
    return m->impl;
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int csr_scalar_device_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_format_csr_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->indptr, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->values, KD_ARRAY_VALUES};
    return n;
}

const kd_format_ops_t kd_format_csr_scalar_ops = {
    .format = KD_FMT_CSR_SCALAR,
    .impl_size = sizeof(kd_format_csr_t),
    .arrays = csr_scalar_device_arrays,
    .plan_bytes = csr_scalar_plan_bytes,
    .upload = csr_scalar_upload,
    .spmv = csr_scalar_spmv,
    .spmm = csr_scalar_spmm,
    .csr_arrays = csr_scalar_arrays,
    .release = csr_scalar_release,
};
