/*
 * Device-resident matrices and SpMV (see matrix.h): the format names, the table of implemented
 * formats (solver/format.h), and the checks every format can rely on. The formats themselves
 * live in solver/format_<name>.c.
 */
#include "solver/matrix.h"
#include "common/checked.h"
#include "solver/format.h"
#include "solver/matrix_scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kd_format_names[KD_FMT_COUNT] = {
    [KD_FMT_CSR_SCALAR] = "csr_scalar",
    [KD_FMT_CSR_VECTOR] = "csr_vector",
    [KD_FMT_CSR_ADAPTIVE] = "csr_adaptive",
    [KD_FMT_ELL] = "ell",
    [KD_FMT_ELLPACK_R] = "ellpack_r",
    [KD_FMT_SELL_C_SIGMA] = "sell_c_sigma",
    [KD_FMT_HYB] = "hyb",
    [KD_FMT_COO] = "coo",
};

/* The implemented formats; NULL entries are formats this build does not have yet. */
static const kd_format_ops_t *const kd_format_table[KD_FMT_COUNT] = {
    [KD_FMT_CSR_SCALAR] = &kd_format_csr_scalar_ops,
};

const char *kd_format_name(kd_format_t format)
{
    if ((int)format < 0 || format >= KD_FMT_COUNT)
        return "unknown";
    return kd_format_names[format];
}

int kd_format_parse(const char *name, kd_format_t *out)
{
    if (name == NULL)
        return -1;
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        if (strcmp(name, kd_format_names[f]) == 0) {
            *out = (kd_format_t)f;
            return 0;
        }
    }
    return -1;
}

int kd_format_available(kd_format_t format)
{
    return (int)format >= 0 && format < KD_FMT_COUNT && kd_format_table[format] != NULL;
}

int kd_format_upload_array(kd_ocl_t *ocl, kd_matrix_t *m, const void *host, size_t bytes,
                           const char *what, cl_mem *out, kd_err_t *err)
{
    *out = NULL;
    if (bytes == 0)
        return KD_OK;
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)host,
                                  what, out, err);
    if (rc == KD_OK)
        m->device_bytes += bytes;
    return rc;
}

int kd_matrix_upload(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t format, kd_matrix_t **out,
                     kd_err_t *err)
{
    kd_matrix_t *m = NULL;
    *out = NULL;
    if (!kd_format_available(format)) {
        if ((int)format < 0 || format >= KD_FMT_COUNT)
            return kd_err_set(err, KD_EBADREQ, "unknown matrix format %d", (int)format);
        return kd_err_set(err, KD_EUNSUPPORTED, "format %s is not implemented in this build",
                          kd_format_name(format));
    }
    int rc = kd_ocl_check_dtype(ocl, csr->dtype, err);
    if (rc != KD_OK)
        return rc;
    rc = kd_csr_check_shape(csr->rows, csr->cols, csr->nnz, NULL, err);
    if (rc != KD_OK)
        return rc;
    if ((m = calloc(1, sizeof(*m))) == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->rows = csr->rows;
    m->cols = csr->cols;
    m->nnz = csr->nnz;
    m->dtype = csr->dtype;
    m->format = format;
    m->ops = kd_format_table[format];
    rc = m->ops->upload(ocl, csr, m, err);
    if (rc != KD_OK) {
        kd_err_prefix(err, "uploading a %lld x %lld %s matrix with %lld nonzeros as %s",
                      (long long)csr->rows, (long long)csr->cols, kd_dtype_name(csr->dtype),
                      (long long)csr->nnz, kd_format_name(format));
        goto fail;
    }
    if ((rc = kd_matrix_scan(csr, m, err)) != KD_OK)
        goto fail;
    *out = m;
    return KD_OK;
fail:
    kd_matrix_free(m);
    return rc;
}

void kd_matrix_free(kd_matrix_t *m)
{
    if (m == NULL)
        return;
    if (m->ops != NULL)
        m->ops->release(m);
    free(m->inv_diagonal);
    free(m);
}

int kd_matrix_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                   double beta, kd_vec_t *y, kd_err_t *err)
{
    if (x->dtype != m->dtype || y->dtype != m->dtype)
        return kd_err_set(err, KD_EBADREQ, "spmv on a %s matrix needs %s vectors, not x %s, y %s",
                          kd_dtype_name(m->dtype), kd_dtype_name(m->dtype), kd_dtype_name(x->dtype),
                          kd_dtype_name(y->dtype));
    if (x->n != m->cols)
        return kd_err_set(err, KD_EBADREQ, "x has %lld entries but the matrix has %lld columns",
                          (long long)x->n, (long long)m->cols);
    if (y->n != m->rows)
        return kd_err_set(err, KD_EBADREQ, "y has %lld entries but the matrix has %lld rows",
                          (long long)y->n, (long long)m->rows);
    if (x->mem != NULL && x->mem == y->mem)
        return kd_err_set(err, KD_EBADREQ, "spmv needs x and y in different buffers");
    if (m->rows == 0)
        return KD_OK;
    return m->ops->spmv(ocl, m, alpha, x, beta, y, err);
}
