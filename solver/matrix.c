/*
 * Device-resident matrices and SpMV (see matrix.h): the format names, the table of implemented
 * formats (solver/formats/format.h), the shared source a format is built from, and the checks every
 * format can rely on. The formats themselves live in solver/format_<name>.c.
 */
#include "solver/matrix.h"
#include "solver/batch/batch.h"
#include "common/clock.h"
#include "common/checked.h"
#include "solver/formats/format.h"
#include "solver/matrix_scan.h"
#include "solver/precond/precond.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kd_format_names[KD_FMT_COUNT] = {
    [KD_FMT_CSR_SCALAR] = "csr_scalar",
    [KD_FMT_CSR_VECTOR] = "csr_vector",
    [KD_FMT_CSR_ADAPTIVE] = "csr_adaptive",
    [KD_FMT_ELL] = "ell",
    [KD_FMT_ELLPACK_R] = "ellpack_r",
    [KD_FMT_SELL_C_SIGMA] = "sell_c_sigma",
    [KD_FMT_HYB] = "hyb",
    [KD_FMT_COO] = "coo",
    [KD_FMT_TILED] = "tiled",
};

/* The implemented formats; a NULL entry would be a format this build does not have. */
static const kd_format_ops_t *const kd_format_table[KD_FMT_COUNT] = {
    [KD_FMT_CSR_SCALAR] = &kd_format_csr_scalar_ops,
    [KD_FMT_CSR_VECTOR] = &kd_format_csr_vector_ops,
    [KD_FMT_CSR_ADAPTIVE] = &kd_format_csr_adaptive_ops,
    [KD_FMT_ELL] = &kd_format_ell_ops,
    [KD_FMT_ELLPACK_R] = &kd_format_ellpack_r_ops,
    [KD_FMT_SELL_C_SIGMA] = &kd_format_sell_c_sigma_ops,
    [KD_FMT_HYB] = &kd_format_hyb_ops,
    [KD_FMT_COO] = &kd_format_coo_ops,
    [KD_FMT_TILED] = &kd_format_tiled_ops,
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

const kd_format_ops_t *kd_format_ops(kd_format_t format)
{
    return kd_format_available(format) ? kd_format_table[format] : NULL;
}

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

/* ---- the source every format is built from ------------------------------------------------ */

void kd_format_source_init_stats(kd_format_source_t *src, const kd_csr_t *csr,
                                 const kd_csr_stats_t *stats)
{
    memset(src, 0, sizeof(*src));
    src->csr = csr;
    src->stats = *stats;
}

void kd_format_source_init(kd_format_source_t *src, const kd_csr_t *csr)
{
    kd_csr_stats_t stats;
    kd_csr_row_stats(csr, &stats); /* the formats need the rows only; the scan reads the values */
    kd_format_source_init_stats(src, csr, &stats);
}

int kd_format_source_device(kd_ocl_t *ocl, kd_format_source_t *src, kd_err_t *err)
{
    if (src->on_device)
        return KD_OK;
    const kd_csr_t *csr = src->csr;
    size_t indptr_bytes, index_bytes, value_bytes;
    if (kd_mul_overflow((size_t)csr->rows + 1, sizeof(int32_t), &indptr_bytes) ||
        kd_mul_overflow((size_t)csr->nnz, sizeof(int32_t), &index_bytes) ||
        kd_mul_overflow((size_t)csr->nnz, kd_dtype_size(csr->dtype), &value_bytes))
        return kd_err_set(err, KD_ETOOLARGE, "matrix arrays do not fit in memory");
    double t0 = kd_clock_ms();
    int rc = kd_format_buffer_from_host(ocl, csr->indptr, indptr_bytes, "row pointers",
                                        &src->indptr, err);
    if (rc == KD_OK)
        rc = kd_format_buffer_from_host(ocl, csr->indices, index_bytes, "column indices",
                                        &src->indices, err);
    if (rc == KD_OK)
        rc = kd_format_buffer_from_host(ocl, csr->values, value_bytes, "values", &src->values, err);
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    if (rc != KD_OK) {
        cl_mem mems[3] = {src->indptr, src->indices, src->values};
        kd_format_release_mems(mems, 3);
        src->indptr = src->indices = src->values = NULL;
        return rc;
    }
    src->upload_ms = kd_clock_ms() - t0;
    src->on_device = 1;
    return KD_OK;
}

void kd_format_source_close(kd_format_source_t *src)
{
    if (src == NULL)
        return;
    cl_mem mems[3] = {src->indptr, src->indices, src->values};
    kd_format_release_mems(mems, 3);
    src->indptr = src->indices = src->values = NULL;
    src->on_device = 0;
    free(src->inv_diagonal);
    src->inv_diagonal = NULL;
    src->scanned = 0;
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        const kd_format_ops_t *ops = kd_format_ops((kd_format_t)f);
        if (src->prepared[f] != NULL && ops != NULL && ops->prepared_free != NULL)
            ops->prepared_free(src->prepared[f]);
        src->prepared[f] = NULL;
    }
}

cl_mem kd_format_share(kd_matrix_t *m, cl_mem mem, size_t bytes)
{
    if (mem == NULL)
        return NULL;
    clRetainMemObject(mem);
    m->device_bytes += bytes;
    return mem;
}

void kd_format_share_csr(kd_matrix_t *m, const kd_format_source_t *src, kd_format_csr_t *out)
{
    const kd_csr_t *csr = src->csr;
    out->indptr = kd_format_share(m, src->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
    out->indices = kd_format_share(m, src->indices, (size_t)csr->nnz * sizeof(int32_t));
    out->values = kd_format_share(m, src->values, (size_t)csr->nnz * kd_dtype_size(csr->dtype));
}

void kd_format_release_csr(kd_format_csr_t *csr)
{
    cl_mem mems[] = {csr->indptr, csr->indices, csr->values};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
    csr->indptr = csr->indices = csr->values = NULL;
}

void kd_format_release_mems(cl_mem *mems, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        if (mems[i] != NULL)
            clReleaseMemObject(mems[i]);
        mems[i] = NULL;
    }
}

void kd_format_options(const kd_ocl_t *ocl, const char *extra, char *buf, size_t cap)
{
    snprintf(buf, cap, "-DKD_WG_SIZE=%zu%s%s", kd_ocl_work_group_size(ocl),
             extra != NULL ? " " : "", extra != NULL ? extra : "");
}

size_t kd_format_size_mad(size_t a, size_t b, size_t c)
{
    size_t ab;
    if (kd_mul_overflow(a, b, &ab) || ab > SIZE_MAX - c)
        return SIZE_MAX;
    return ab + c;
}

size_t kd_format_csr_bytes(const kd_csr_t *csr)
{
    size_t entry = sizeof(int32_t) + kd_dtype_size(csr->dtype);
    return kd_format_size_mad((size_t)csr->nnz, entry, ((size_t)csr->rows + 1) * sizeof(int32_t));
}

int kd_format_buffer_from_host(kd_ocl_t *ocl, const void *host, size_t bytes, const char *what,
                               cl_mem *out, kd_err_t *err)
{
    *out = NULL;
    if (bytes == 0)
        return KD_OK;
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY, bytes, NULL, what, out, err);
    if (rc != KD_OK)
        return rc;
    cl_int st =
        kd_ocl_enqueue_write(kd_ocl_queue(ocl), *out, CL_TRUE, 0, bytes, host, 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        clReleaseMemObject(*out);
        *out = NULL;
        rc = kd_ocl_fail(err, st, "clEnqueueWriteBuffer");
        kd_err_prefix(err, "copying %zu bytes of %s to the device", bytes, what);
    }
    return rc;
}

int kd_format_upload_array(kd_ocl_t *ocl, kd_matrix_t *m, const void *host, size_t bytes,
                           const char *what, cl_mem *out, kd_err_t *err)
{
    int rc = kd_format_buffer_from_host(ocl, host, bytes, what, out, err);
    if (rc == KD_OK)
        m->device_bytes += bytes;
    return rc;
}

int kd_format_alloc_array(kd_ocl_t *ocl, kd_matrix_t *m, size_t bytes, const char *what,
                          cl_mem *out, kd_err_t *err)
{
    *out = NULL;
    if (bytes == 0)
        return KD_OK;
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, what, out, err);
    if (rc != KD_OK)
        return rc;
    m->device_bytes += bytes;
    /* Zeros where no conversion kernel writes (alignment rows and slices past the last row):
     * the same pattern then gives the same arrays byte for byte, which new values on a held
     * pattern check (solver/matrix_values.c), and no array shows an earlier matrix's bytes. */
    const cl_uint zero = 0;
    size_t unit = bytes % sizeof(zero) == 0 ? sizeof(zero) : 1;
    cl_int st = clEnqueueFillBuffer(kd_ocl_queue(ocl), *out, &zero, unit, 0, bytes, 0, NULL, NULL);
    if (st != CL_SUCCESS)
        return kd_ocl_fail(err, st, "clEnqueueFillBuffer");
    return KD_OK;
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

int kd_format_source_scan(kd_format_source_t *src, kd_err_t *err)
{
    if (src->scanned)
        return KD_OK;
    int rc = kd_matrix_scan(src->csr, &src->scan, &src->inv_diagonal, err);
    src->scanned = rc == KD_OK;
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
    m->ops = kd_format_table[format];
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
    kd_matrix_share_leave(m);
    kd_matrix_order_release(m);
    if (m->ops != NULL)
        m->ops->release(m);
    kd_batch_free(m->batch);
    free(m->inv_diagonal);
    free(m);
}

void kd_format_detail_add(kd_format_detail_t *detail, const char *name, int64_t value)
{
    if (detail->count >= KD_FORMAT_DETAIL_MAX)
        return;
    snprintf(detail->items[detail->count].name, KD_FORMAT_DETAIL_NAME, "%s", name);
    detail->items[detail->count++].value = value;
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
