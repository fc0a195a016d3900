/*
 * COO: row indices made on the device from the CSR row pointers (kd_coo_rows_from_csr, a binary
 * search per entry), with the source's column indices and values shared, plus two partial sums
 * per chunk of KD_WG_SIZE entries. SpMV is y = beta * y (kd_coo_scale) followed by the segmented
 * reduction of kernels/formats/coo.cl (kd_coo_chunks, then kd_coo_fix for rows that cross chunks),
 * which needs no atomics and balances any row-length distribution perfectly, at the price of 4 more
 * bytes per entry than CSR and a scan per chunk. The kd_coo_part_* functions are shared with HYB,
 * whose overflow entries are a COO part. Device memory: nnz * (8 + sizeof(value)) bytes plus 2
 * values per chunk.
 */
#include "solver/formats/format.h"

#include <stdlib.h>

typedef struct kd_coo {
    kd_coo_part_t part;
} kd_coo_t;

int kd_coo_part_alloc_partials(kd_ocl_t *ocl, kd_matrix_t *m, kd_coo_part_t *part, kd_err_t *err)
{
    size_t wg = kd_ocl_work_group_size(ocl);
    size_t v = kd_dtype_size(m->dtype);
    part->chunks = ((size_t)part->nnz + wg - 1) / wg;
    int rc = kd_format_alloc_array(ocl, m, part->chunks * v, "COO chunk heads", &part->head, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, part->chunks * v, "COO chunk tails", &part->tail, err);
    return rc;
}

void kd_coo_part_release(kd_coo_part_t *part)
{
    cl_mem mems[] = {part->rows, part->cols, part->values, part->head, part->tail};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
    part->rows = part->cols = part->values = part->head = part->tail = NULL;
}

int kd_coo_part_spmv(kd_ocl_t *ocl, kd_dtype_t dtype, const kd_coo_part_t *part, double alpha,
                     const kd_vec_t *x, kd_vec_t *y, kd_err_t *err)
{
    if (part->nnz == 0)
        return KD_OK;
    size_t wg = kd_ocl_work_group_size(ocl);
    int rc = kd_format_run(ocl, dtype, "coo", NULL, "kd_coo_chunks", part->chunks * wg,
                           KD_ARGS(KD_ARG_INT(part->nnz), KD_ARG_MEM(part->rows),
                                   KD_ARG_MEM(part->cols), KD_ARG_MEM(part->values),
                                   KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem), KD_ARG_MEM(part->head),
                                   KD_ARG_MEM(part->tail), KD_ARG_VALUE(dtype, alpha)),
                           err);
    if (rc != KD_OK || part->chunks < 2)
        return rc;
    return kd_format_run(ocl, dtype, "coo", NULL, "kd_coo_fix", part->chunks - 1,
                         KD_ARGS(KD_ARG_INT(part->nnz), KD_ARG_INT(part->chunks),
                                 KD_ARG_MEM(part->rows), KD_ARG_MEM(part->head),
                                 KD_ARG_MEM(part->tail), KD_ARG_MEM(y->mem),
                                 KD_ARG_VALUE(dtype, alpha)),
                         err);
}

static size_t coo_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    size_t wg = kd_ocl_work_group_size(ocl);
    size_t v = kd_dtype_size(csr->dtype);
    size_t chunks = ((size_t)csr->nnz + wg - 1) / wg;
    return kd_format_size_mad((size_t)csr->nnz, 2 * sizeof(int32_t) + v, 2 * chunks * v);
}

static void coo_release(kd_matrix_t *m)
{
    kd_coo_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_coo_part_release(&impl->part);
    free(impl);
    m->impl = NULL;
}

static int coo_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    size_t v = kd_dtype_size(csr->dtype);
    kd_coo_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    kd_coo_part_t *part = &impl->part;
    part->nnz = csr->nnz;
    part->cols = kd_format_share(m, src->indices, (size_t)csr->nnz * sizeof(int32_t));
    part->values = kd_format_share(m, src->values, (size_t)csr->nnz * v);
    int rc = kd_format_alloc_array(ocl, m, (size_t)csr->nnz * sizeof(int32_t), "COO row indices",
                                   &part->rows, err);
    if (rc == KD_OK)
        rc = kd_coo_part_alloc_partials(ocl, m, part, err);
    if (rc != KD_OK || csr->nnz == 0)
        return rc;
    return kd_format_run(ocl, csr->dtype, "coo", NULL, "kd_coo_rows_from_csr", (size_t)csr->nnz,
                         KD_ARGS(KD_ARG_INT(csr->nnz), KD_ARG_INT(csr->rows),
                                 KD_ARG_MEM(src->indptr), KD_ARG_MEM(part->rows)),
                         err);
}

static int coo_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                    double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_coo_t *impl = m->impl;
    if (beta != 1.0) {
        int rc = kd_format_run(
            ocl, m->dtype, "coo", NULL, "kd_coo_scale", (size_t)m->rows,
            KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_MEM(y->mem), KD_ARG_VALUE(m->dtype, beta)), err);
        if (rc != KD_OK)
            return rc;
    }
    return kd_coo_part_spmv(ocl, m->dtype, &impl->part, alpha, x, y, err);
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int coo_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_coo_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->part.rows, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->part.cols, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->part.values, KD_ARRAY_VALUES};
    out[n++] = (kd_format_array_t){&impl->part.head, KD_ARRAY_SCRATCH};
    out[n++] = (kd_format_array_t){&impl->part.tail, KD_ARRAY_SCRATCH};
    return n;
}

const kd_format_ops_t kd_format_coo_ops = {
    .format = KD_FMT_COO,
    .impl_size = sizeof(kd_coo_t),
    .arrays = coo_arrays,
    .plan_bytes = coo_plan_bytes,
    .upload = coo_upload,
    .spmv = coo_spmv,
    .release = coo_release,
};
