/*
 * ELLPACK-R: ELL's padded column-major arrays (width W = the longest row, leading dimension ld =
 * rows rounded up to 32) plus an array of row lengths, so the kernel loops exactly each row's
 * length and never touches padding (kernels/formats/ellpack_r.cl). Built on the device from the
 * source's CSR arrays by kd_ellpack_r_from_csr. Device memory: W * ld * (4 + sizeof(value)) + 4 *
 * rows bytes; dropped by the selection like ELL when padding would waste memory.
 */
#include "solver/formats/format.h"

#include <stdlib.h>

typedef struct kd_ellpack_r {
    cl_mem lengths; /* rows int32 */
    cl_mem indices; /* width * ld int32, NULL when width == 0 */
    cl_mem values;  /* width * ld VALUE */
    int width;
    int64_t ld;
} kd_ellpack_r_t;

static size_t ellpack_r_plan_bytes(const kd_ocl_t *ocl, kd_format_source_t *src)
{
    const kd_csr_t *csr = src->csr;
    const kd_csr_stats_t *stats = &src->stats;
    size_t ld = kd_format_round_up((size_t)csr->rows, KD_ELL_ALIGN);
    size_t slots = kd_format_size_mad(ld, (size_t)stats->max_row, 0);
    return kd_format_size_mad(slots, sizeof(int32_t) + kd_dtype_size(csr->dtype),
                              (size_t)csr->rows * sizeof(int32_t));
}

static void ellpack_r_release(kd_matrix_t *m)
{
    kd_ellpack_r_t *impl = m->impl;
    if (impl == NULL)
        return;
    cl_mem mems[] = {impl->lengths, impl->indices, impl->values};
    kd_format_release_mems(mems, sizeof(mems) / sizeof(mems[0]));
    free(impl);
    m->impl = NULL;
}

static int ellpack_r_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t *m, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    size_t v = kd_dtype_size(csr->dtype);
    kd_ellpack_r_t *impl = calloc(1, sizeof(*impl));
    if (impl == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a matrix handle");
    m->impl = impl;
    impl->width = (int)src->stats.max_row;
    impl->ld = (int64_t)kd_format_round_up((size_t)csr->rows, KD_ELL_ALIGN);
    size_t slots = kd_format_size_mad((size_t)impl->ld, (size_t)impl->width, 0);
    size_t ibytes = kd_format_size_mad(slots, sizeof(int32_t), 0);
    size_t vbytes = kd_format_size_mad(slots, v, 0);
    if (slots == SIZE_MAX || ibytes == SIZE_MAX || vbytes == SIZE_MAX)
        return kd_err_set(err, KD_ETOOLARGE,
                          "ELLPACK-R arrays of %d x %lld slots do not fit in memory", impl->width,
                          (long long)impl->ld);
    int rc = kd_format_alloc_array(ocl, m, (size_t)csr->rows * sizeof(int32_t), "row lengths",
                                   &impl->lengths, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, ibytes, "ELLPACK-R column indices", &impl->indices, err);
    if (rc == KD_OK)
        rc = kd_format_alloc_array(ocl, m, vbytes, "ELLPACK-R values", &impl->values, err);
    if (rc != KD_OK || csr->rows == 0)
        return rc;

    return kd_format_run(
        ocl, csr->dtype, "ellpack_r", NULL, "kd_ellpack_r_from_csr", (size_t)csr->rows,
        KD_ARGS(KD_ARG_INT(csr->rows), KD_ARG_INT(impl->width), KD_ARG_LONG(impl->ld),
                KD_ARG_MEM(src->indptr), KD_ARG_MEM(src->indices), KD_ARG_MEM(src->values),
                KD_ARG_MEM(impl->lengths), KD_ARG_MEM(impl->indices), KD_ARG_MEM(impl->values)),
        err);
}

static int ellpack_r_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                          double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_ellpack_r_t *impl = m->impl;
    return kd_format_run(ocl, m->dtype, "ellpack_r", NULL, "kd_ellpack_r_spmv", (size_t)m->rows,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_LONG(impl->ld),
                                 KD_ARG_MEM(impl->lengths), KD_ARG_MEM(impl->indices),
                                 KD_ARG_MEM(impl->values), KD_ARG_MEM(x->mem), KD_ARG_MEM(y->mem),
                                 KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

static int ellpack_r_spmm(kd_ocl_t *ocl, const kd_matrix_t *m, int64_t k, double alpha, cl_mem x,
                          int64_t ldx, double beta, cl_mem y, int64_t ldy, kd_err_t *err)
{
    const kd_ellpack_r_t *impl = m->impl;
    return kd_format_run(ocl, m->dtype, "ellpack_r", NULL, "kd_ellpack_r_spmm", (size_t)m->rows,
                         KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_INT(k), KD_ARG_LONG(impl->ld),
                                 KD_ARG_MEM(impl->lengths), KD_ARG_MEM(impl->indices),
                                 KD_ARG_MEM(impl->values), KD_ARG_MEM(x), KD_ARG_LONG(ldx),
                                 KD_ARG_MEM(y), KD_ARG_LONG(ldy), KD_ARG_VALUE(m->dtype, alpha),
                                 KD_ARG_VALUE(m->dtype, beta)),
                         err);
}

/* Issue 22's seam (format.h): which arrays are the pattern's. */
static int ellpack_r_arrays(kd_matrix_t *m, kd_format_array_t *out)
{
    kd_ellpack_r_t *impl = m->impl;
    int n = 0;
    out[n++] = (kd_format_array_t){&impl->lengths, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->indices, KD_ARRAY_PATTERN};
    out[n++] = (kd_format_array_t){&impl->values, KD_ARRAY_VALUES};
    return n;
}

const kd_format_ops_t kd_format_ellpack_r_ops = {
    .format = KD_FMT_ELLPACK_R,
    .impl_size = sizeof(kd_ellpack_r_t),
    .arrays = ellpack_r_arrays,
    .plan_bytes = ellpack_r_plan_bytes,
    .upload = ellpack_r_upload,
    .spmv = ellpack_r_spmv,
    .spmm = ellpack_r_spmm,
    .release = ellpack_r_release,
};
