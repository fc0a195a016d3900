/*
 * Device-resident matrices and SpMV (see matrix.h): a matrix built in a format from its source
 * (solver/formats/format.c; the table of formats is solver/formats/table.c), with or without a
 * reordering, freed with what it holds, and the checks every format's SpMV can rely on. The
 * formats themselves live in solver/formats/<name>.c.
 */
#include "solver/matrix.h"
#include "solver/direct/direct.h"
#include "solver/batch/batch.h"
#include "solver/formats/format.h"
#include "solver/precond/precond.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

size_t kd_matrix_plan_bytes(const kd_ocl_t *ocl, const kd_csr_t *csr, const kd_csr_stats_t *stats,
                            kd_format_t format)
{
    const kd_format_ops_t *ops = kd_format_ops(format);
    if (ops == NULL)
        return SIZE_MAX;
    kd_format_source_t src;
    kd_format_source_init_stats(&src, csr, stats);
    size_t bytes = ops->plan_bytes(ocl, &src);
    kd_format_source_close(&src);
    return bytes;
}

int kd_matrix_upload(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t format, kd_matrix_t **out,
                     kd_err_t *err)
{
    assert(ocl != NULL && csr != NULL && out != NULL);
    kd_format_source_t src;
    *out = NULL;
    if (!kd_format_available(format)) {
        if ((int)format < 0 || format >= KD_FMT_COUNT)
            return kd_err_set(err, KD_EBADREQ, "unknown matrix format %d", (int)format);
        return kd_err_set(err, KD_EUNSUPPORTED, "format %s is not implemented in this build",
                          kd_format_name(format));
    }
    kd_format_source_init(&src, csr);
    int rc = kd_matrix_upload_source(ocl, &src, format, out, err);
    if (rc == KD_OK && (rc = kd_matrix_adopt_scan(&src, *out, err)) != KD_OK) {
        kd_matrix_free(*out);
        *out = NULL;
    }
    kd_format_source_close(&src);
    return rc;
}

int kd_matrix_upload_reordered(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t format,
                               kd_reorder_t kind, kd_matrix_t **out, kd_err_t *err)
{
    *out = NULL;
    if (kind == KD_REORDER_NONE)
        return kd_matrix_upload(ocl, csr, format, out, err);
    int32_t *perm = NULL;
    kd_csr_t *permuted = NULL;
    int rc = kd_reorder_compute(csr, kind, &perm, err);
    if (rc == KD_OK)
        rc = kd_reorder_apply(csr, perm, &permuted, err);
    if (rc == KD_OK)
        rc = kd_matrix_upload(ocl, permuted, format, out, err);
    if (rc == KD_OK) {
        rc = kd_matrix_attach_order(ocl, *out, kind, perm, err);
        perm = NULL;
    }
    if (rc != KD_OK) {
        kd_matrix_free(*out);
        *out = NULL;
    }
    free(perm);
    kd_csr_free(permuted);
    return rc;
}

int kd_matrix_adopt_scan(kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    int rc = kd_format_source_scan(src, err);
    if (rc != KD_OK)
        return rc;
    m->scan = src->scan;
    free(m->inv_diagonal);
    m->inv_diagonal = src->inv_diagonal;
    src->inv_diagonal = NULL;
    src->scanned = 0; /* the diagonal moved: a second matrix would scan again */
    return KD_OK;
}

int kd_matrix_upload_source(kd_ocl_t *ocl, kd_format_source_t *src, kd_format_t format,
                            kd_matrix_t **out, kd_err_t *err)
{
    assert(ocl != NULL && src != NULL && src->csr != NULL && out != NULL);
    const kd_csr_t *csr = src->csr;
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
    m->ops = kd_format_ops(format);
    rc = kd_format_source_device(ocl, src, err);
    if (rc == KD_OK)
        rc = m->ops->upload(ocl, src, m, err);
    if (rc != KD_OK) {
        kd_err_prefix(err, "uploading a %lld x %lld %s matrix with %lld nonzeros as %s",
                      (long long)csr->rows, (long long)csr->cols, kd_dtype_name(csr->dtype),
                      (long long)csr->nnz, kd_format_name(format));
        goto fail;
    }
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
    kd_precond_release_all(m);
    kd_direct_free(m->direct);
    kd_matrix_share_leave(m);
    kd_matrix_order_release(m);
    if (m->ops != NULL)
        m->ops->release(m);
    kd_batch_free(m->batch);
    free(m->inv_diagonal);
    free(m);
}

void kd_matrix_describe(const kd_matrix_t *m, kd_format_detail_t *out)
{
    memset(out, 0, sizeof(*out));
    if (m != NULL && m->ops != NULL && m->ops->describe != NULL)
        m->ops->describe(m, out);
}

static int kd_matrix_spmv_check(const kd_matrix_t *m, const kd_vec_t *x, const kd_vec_t *y,
                                kd_err_t *err)
{
    assert(m != NULL && x != NULL && y != NULL);
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
    return KD_OK;
}

int kd_matrix_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                   double beta, kd_vec_t *y, kd_err_t *err)
{
    assert(ocl != NULL);
    int rc = kd_matrix_spmv_check(m, x, y, err);
    if (rc != KD_OK || m->rows == 0)
        return rc;
    if (m->order.kind != KD_REORDER_NONE)
        return kd_matrix_order_spmv(ocl, m, alpha, x, beta, y, err);
    return m->ops->spmv(ocl, m, alpha, x, beta, y, err);
}

int kd_matrix_spmv_inner(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err)
{
    assert(ocl != NULL);
    int rc = kd_matrix_spmv_check(m, x, y, err);
    if (rc != KD_OK || m->rows == 0)
        return rc;
    return m->ops->spmv(ocl, m, alpha, x, beta, y, err);
}

/* X holds the matrix's columns and Y its rows, k each, in its dtype, in different buffers. */
static int kd_matrix_spmm_check(const kd_matrix_t *m, const kd_multivec_t *x,
                                const kd_multivec_t *y, kd_err_t *err)
{
    assert(m != NULL && x != NULL && y != NULL);
    if (x->k != y->k || x->k < 1)
        return kd_err_set(err, KD_EBADREQ, "spmm needs as many columns in X as in Y (%lld, %lld)",
                          (long long)x->k, (long long)y->k);
    if (x->dtype != m->dtype || y->dtype != m->dtype)
        return kd_err_set(err, KD_EBADREQ, "spmm on a %s matrix needs %s vectors",
                          kd_dtype_name(m->dtype), kd_dtype_name(m->dtype));
    if (x->n != m->cols || y->n != m->rows)
        return kd_err_set(err, KD_EBADREQ,
                          "spmm: X has %lld rows and Y %lld, but the matrix is %lld x %lld",
                          (long long)x->n, (long long)y->n, (long long)m->rows, (long long)m->cols);
    if (x->mem != NULL && x->mem == y->mem)
        return kd_err_set(err, KD_EBADREQ, "spmm needs X and Y in different buffers");
    return KD_OK;
}

int kd_matrix_spmm_inner(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_multivec_t *x,
                         double beta, kd_multivec_t *y, kd_err_t *err)
{
    assert(ocl != NULL);
    int rc = kd_matrix_spmm_check(m, x, y, err);
    if (rc != KD_OK || m->rows == 0)
        return rc;
    if (m->ops->spmm != NULL && x->k > 1 && x->ld <= INT32_MAX && y->ld <= INT32_MAX)
        return m->ops->spmm(ocl, m, x->k, alpha, x->mem, x->ld, beta, y->mem, y->ld, err);
    for (int64_t c = 0; rc == KD_OK && c < x->k; c++)
        rc = m->ops->spmv(ocl, m, alpha, &x->cols[c], beta, &y->cols[c], err);
    return rc;
}

int kd_matrix_spmm(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_multivec_t *x,
                   double beta, kd_multivec_t *y, kd_err_t *err)
{
    int rc = kd_matrix_spmm_check(m, x, y, err);
    if (rc != KD_OK || m->rows == 0)
        return rc;
    if (m->order.kind == KD_REORDER_NONE)
        return kd_matrix_spmm_inner(ocl, m, alpha, x, beta, y, err);
    /* A reordered matrix gathers and scatters each column around its SpMV. */
    for (int64_t c = 0; rc == KD_OK && c < x->k; c++)
        rc = kd_matrix_order_spmv(ocl, m, alpha, &x->cols[c], beta, &y->cols[c], err);
    return rc;
}

int kd_matrix_has_spmm(const kd_matrix_t *m)
{
    return m != NULL && m->ops != NULL && m->ops->spmm != NULL;
}
