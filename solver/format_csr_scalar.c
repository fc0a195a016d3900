/*
 * CSR scalar: the matrix's own CSR arrays on the device, one work-item per row
 * (kernels/csr_scalar.cl). The baseline every other format is measured against, and the fastest
 * for regular matrices with short rows of similar length. Device memory: (rows + 1) * 4 bytes of
 * row pointers, nnz * 4 of column indices, nnz * sizeof(value) of values — the source's arrays,
 * shared by reference with the other CSR formats built from the same source.
 */
#include "solver/format.h"

#include <stdlib.h>

typedef struct kd_csr_scalar {
    cl_mem indptr;  /* rows + 1 int32 */
    cl_mem indices; /* nnz int32, NULL when nnz == 0 */
    cl_mem values;  /* nnz VALUE, NULL when nnz == 0 */
} kd_csr_scalar_t;

static void csr_scalar_release(kd_matrix_t *m)
{
    kd_csr_scalar_t *impl = m->impl;
    if (impl == NULL)
        return;
    cl_mem mems[] = {impl->indptr, impl->indices, impl->values};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
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
    const kd_csr_t *csr = src->csr;
    kd_csr_scalar_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    size_t v = kd_dtype_size(csr->dtype);
    impl->indptr = kd_format_share(m, src->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
    impl->indices = kd_format_share(m, src->indices, (size_t)csr->nnz * sizeof(int32_t));
    impl->values = kd_format_share(m, src->values, (size_t)csr->nnz * v);
    return KD_OK;
}

static int csr_scalar_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                           double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_csr_scalar_t *impl = m->impl;
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

int kd_format_csr_scalar_arrays(const kd_matrix_t *m, cl_mem *indptr, cl_mem *indices,
                                cl_mem *values)
{
    if (m->format != KD_FMT_CSR_SCALAR || m->impl == NULL || m->rows <= 0)
        return 0;
    const kd_csr_scalar_t *impl = m->impl;
    *indptr = impl->indptr;
    *indices = impl->indices;
    *values = impl->values;
    return 1;
}

const kd_format_ops_t kd_format_csr_scalar_ops = {
    .format = KD_FMT_CSR_SCALAR,
    .plan_bytes = csr_scalar_plan_bytes,
    .upload = csr_scalar_upload,
    .spmv = csr_scalar_spmv,
    .release = csr_scalar_release,
};
