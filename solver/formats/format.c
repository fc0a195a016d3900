/*
 * What every format is built from and with (format.h): the source (the host CSR, its statistics
 * and its arrays on the device, uploaded once, and the format-independent scan), and the helpers
 * a format's upload uses for its device arrays, each counted in the matrix's device_bytes. It
 * names no format: the table of formats (table.c) and the matrix (solver/matrix.c) are above it.
 */
#include "solver/formats/format.h"
#include "common/checked.h"
#include "common/clock.h"
#include "solver/matrix_scan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    return kd_ocl_buffer_upload(ocl, CL_MEM_READ_ONLY, host, bytes, what, out, err);
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

int kd_format_source_scan(kd_format_source_t *src, kd_err_t *err)
{
    if (src->scanned)
        return KD_OK;
    int rc = kd_matrix_scan(src->csr, &src->scan, &src->inv_diagonal, err);
    src->scanned = rc == KD_OK;
    return rc;
}

void kd_format_detail_add(kd_format_detail_t *detail, const char *name, int64_t value)
{
    if (detail->count >= KD_FORMAT_DETAIL_MAX)
        return;
    snprintf(detail->items[detail->count].name, KD_FORMAT_DETAIL_NAME, "%s", name);
    detail->items[detail->count++].value = value;
}
