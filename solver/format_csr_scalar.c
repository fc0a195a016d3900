/*
 * CSR scalar: the matrix's own CSR arrays on the device, one work-item per row
 * (kernels/csr_scalar.cl). The baseline every other format is measured against, and the fastest
 * for regular matrices with short rows of similar length. Device memory: (rows + 1) * 4 bytes of
 * row pointers, nnz * 4 of column indices, nnz * sizeof(value) of values — the source's arrays,
 * shared by reference with the other CSR formats built from the same source.
 */
#include "solver/format.h"

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
    size_t wg = kd_ocl_work_group_size(ocl);
    char options[64];
    kd_format_options(ocl, NULL, options, sizeof(options));
    cl_kernel kernel;
    int rc =
        kd_ocl_kernel(ocl, "csr_scalar", m->dtype, options, "kd_csr_scalar_spmv", &kernel, err);
    if (rc != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)m->rows);
    kd_ocl_arg_mem(&a, impl->indptr);
    kd_ocl_arg_mem(&a, impl->indices);
    kd_ocl_arg_mem(&a, impl->values);
    kd_ocl_arg_mem(&a, x->mem);
    kd_ocl_arg_mem(&a, y->mem);
    kd_ocl_arg_value(&a, m->dtype, alpha);
    kd_ocl_arg_value(&a, m->dtype, beta);
    if ((rc = kd_ocl_args_end(&a, "kd_csr_scalar_spmv", err)) != KD_OK)
        return rc;
    return kd_ocl_launch(ocl, kernel, kd_format_round_up((size_t)m->rows, wg), wg,
                         "kd_csr_scalar_spmv", err);
}

const kd_format_csr_t *kd_format_csr_scalar_arrays(const kd_matrix_t *m)
{
    return m->format == KD_FMT_CSR_SCALAR && m->rows > 0 ? m->impl : NULL;
}

const kd_format_ops_t kd_format_csr_scalar_ops = {
    .format = KD_FMT_CSR_SCALAR,
    .plan_bytes = csr_scalar_plan_bytes,
    .upload = csr_scalar_upload,
    .spmv = csr_scalar_spmv,
    .release = csr_scalar_release,
};
