/*
 * ELL: every row padded to the longest row's width W, stored column-major with leading dimension
 * ld = rows rounded up to 32 (kernels/formats/ell.cl has the layout and the thread mapping). Built
 * on the device from the source's CSR arrays by kd_ell_from_csr; the CSR arrays are not kept.
 * Device memory: W * ld * (4 + sizeof(value)) bytes, which is why the selection drops ELL when one
 * long row would pad every other row to its length (plan_bytes, before anything is allocated). The
 * ELL part (format.h) is HYB's too.
 */
#include "solver/formats/format.h"

#include <stdio.h>
#include <stdlib.h>

size_t kd_ell_part_bytes(int64_t rows, int64_t width, kd_dtype_t dtype)
{
    size_t ld = kd_format_round_up((size_t)rows, KD_ELL_ALIGN);
    size_t slots = kd_format_size_mad(ld, (size_t)width, 0);
    return kd_format_size_mad(slots, sizeof(int32_t) + kd_dtype_size(dtype), 0);
}

void kd_ell_part_release(kd_ell_part_t *part)
{
    cl_mem mems[] = {part->indices, part->values};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
    part->indices = part->values = NULL;
}

int kd_ell_part_build(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, int width,
                      const char *what, kd_ell_part_t *part, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    part->width = width;
    part->ld = (int64_t)kd_format_round_up((size_t)csr->rows, KD_ELL_ALIGN);
    size_t slots = kd_format_size_mad((size_t)part->ld, (size_t)width, 0);
    size_t ibytes = kd_format_size_mad(slots, sizeof(int32_t), 0);
    size_t vbytes = kd_format_size_mad(slots, kd_dtype_size(csr->dtype), 0);
    if (slots == SIZE_MAX || ibytes == SIZE_MAX || vbytes == SIZE_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "%s arrays of %d x %lld slots do not fit in memory",
                          what, width, (long long)part->ld);
    char label[64];
    snprintf(label, sizeof(label), "%s column indices", what);
    int rc = kd_format_alloc_array(ocl, m, ibytes, label, &part->indices, err);
    snprintf(label, sizeof(label), "%s values", what);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, vbytes, label, &part->values, err);
    if (rc != KD_OK || slots == 0 || csr->rows == 0)
        return rc;

    return kd_format_run(ocl, csr->dtype, "ell", NULL, "kd_ell_from_csr", (size_t)csr->rows,
                         KD_ARGS(KD_ARG_INT(csr->rows), KD_ARG_INT(part->width),
                                 KD_ARG_LONG(part->ld), KD_ARG_MEM(src->indptr),
                                 KD_ARG_MEM(src->indices), KD_ARG_MEM(src->values),
                                 KD_ARG_MEM(part->indices), KD_ARG_MEM(part->values)),
                         err);
}

int kd_ell_part_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, const kd_ell_part_t *part, double alpha,
                     const kd_vec_t *x, double beta, kd_vec_t *y, kd_err_t *err)
{
    return kd_format_run(ocl, m->dtype, "ell", NULL, "kd_ell_spmv", (size_t)m->rows,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(part->width),
                                 KD_ARG_LONG(part->ld), KD_ARG_MEM(part->indices),
                                 KD_ARG_MEM(part->values), KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem),
                                 KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

static size_t ell_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    return kd_ell_part_bytes(src->csr->rows, src->stats.max_row, src->csr->dtype);
}

static void ell_release(kd_matrix_t *m)
{
    kd_ell_part_t *impl = m->impl;
    if (impl == NULL)
        return;
    kd_ell_part_release(impl);
    free(impl);
    m->impl = NULL;
}

static int ell_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    kd_ell_part_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    return kd_ell_part_build(ocl, src, m, (int)src->stats.max_row, "ELL", impl, err);
}

static int ell_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                    double beta, kd_vec_t *y, kd_err_t *err)
{
    return kd_ell_part_spmv(ocl, m, m->impl, alpha, x, beta, y, err);
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int ell_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_ell_part_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->values, KD_ARRAY_VALUES};
    return n;
}

const kd_format_ops_t kd_format_ell_ops = {
    .format = KD_FMT_ELL,
    .impl_size = sizeof(kd_ell_part_t),
    .arrays = ell_arrays,
    .plan_bytes = ell_plan_bytes,
    .upload = ell_upload,
    .spmv = ell_spmv,
    .release = ell_release,
};
