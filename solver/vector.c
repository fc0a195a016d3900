/*
 * Dense device vectors (see vector.h). A vector of n > 0 elements owns one read-write buffer; an
 * empty vector has mem == NULL, and every operation on it is a no-op, so callers never special-
 * case n == 0 and no zero-byte buffer is ever requested. Host arrays may be unaligned (msgpack
 * `bin` payloads) and of the other float type: a copy in the vector's own type goes straight to
 * the runtime, anything else is converted through a temporary host buffer with common/dtype.h.
 */
#include "solver/vector.h"
#include "common/checked.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kd_vec_check_host_dtype(kd_dtype_t t, kd_err_t *err)
{
    if (t != KD_DTYPE_F64 && t != KD_DTYPE_F32)
        return kd_err_set(err, KD_EBADREQ, "vector values must be float32 or float64, not %s",
                          kd_dtype_name(t));
    return KD_OK;
}

int kd_vec_alloc(kd_ocl_t *ocl, int64_t n, kd_dtype_t dtype, kd_vec_t *v, kd_err_t *err)
{
    assert(ocl != NULL && v != NULL);
    memset(v, 0, sizeof(*v));
    int rc = kd_ocl_check_dtype(ocl, dtype, err);
    if (rc != KD_OK)
        return rc;
    if (n < 0)
        return kd_err_set(err, KD_EBADREQ, "vector length %lld is negative", (long long)n);
    size_t bytes;
    if ((uint64_t)n > SIZE_MAX || kd_mul_overflow((size_t)n, kd_dtype_size(dtype), &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "a vector of %lld %s values does not fit in memory",
                          (long long)n, kd_dtype_name(dtype));
    v->n = n;
    v->dtype = dtype;
    if (n == 0)
        return KD_OK;
    char what[64];
    snprintf(what, sizeof(what), "a vector of %lld %s", (long long)n, kd_dtype_name(dtype));
    rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, what, &v->mem, err);
    if (rc != KD_OK)
        memset(v, 0, sizeof(*v));
    return rc;
}

void kd_vec_release(kd_vec_t *v)
{
    if (v == NULL)
        return;
    if (v->mem != NULL)
        clReleaseMemObject(v->mem);
    memset(v, 0, sizeof(*v));
}

/* A blocking copy between v and host memory of host_dtype (converted through a temporary when it
 * is not v's dtype): from src to the device when src is not NULL, else from the device to dst. */
static int kd_vec_transfer(kd_ocl_t *ocl, const kd_vec_t *v, const void *src, void *dst,
                           kd_dtype_t host_dtype, kd_err_t *err)
{
    const int write = src != NULL;
    int rc = kd_vec_check_host_dtype(host_dtype, err);
    if (rc != KD_OK || v->n == 0)
        return rc;
    size_t n = (size_t)v->n;
    size_t bytes = n * kd_dtype_size(v->dtype);
    void *tmp = NULL;
    if (host_dtype != v->dtype) {
        if ((tmp = malloc(bytes)) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory converting %zu values", n);
        if (write)
            kd_convert_real(tmp, v->dtype, src, host_dtype, n);
    }
    /* through the pinned staging buffer where transfers are staged (a GPU; ocl.h) */
    rc = write ? kd_ocl_write(ocl, v->mem, 0, bytes, tmp != NULL ? tmp : src, err)
               : kd_ocl_read(ocl, v->mem, 0, bytes, tmp != NULL ? tmp : dst, err);
    if (rc != KD_OK) {
        kd_err_prefix(err,
                      write ? "writing %zu bytes to a device vector"
                            : "reading %zu bytes from a device vector",
                      bytes);
    } else if (tmp != NULL && !write) {
        kd_convert_real(dst, host_dtype, tmp, v->dtype, n);
    }
    free(tmp);
    return rc;
}

int kd_vec_write(kd_ocl_t *ocl, kd_vec_t *v, const void *src, kd_dtype_t src_dtype, kd_err_t *err)
{
    assert(ocl != NULL && v != NULL && (src != NULL || v->n == 0));
    return kd_vec_transfer(ocl, v, src, NULL, src_dtype, err);
}

int kd_vec_read(kd_ocl_t *ocl, const kd_vec_t *v, void *dst, kd_dtype_t dst_dtype, kd_err_t *err)
{
    assert(ocl != NULL && v != NULL && (dst != NULL || v->n == 0));
    return kd_vec_transfer(ocl, v, NULL, dst, dst_dtype, err);
}

int kd_vec_fill(kd_ocl_t *ocl, kd_vec_t *v, double value, kd_err_t *err)
{
    if (v->n == 0)
        return KD_OK;
    unsigned char pattern[8];
    size_t size = kd_dtype_size(v->dtype);
    kd_store_real(pattern, v->dtype, 0, value);
    cl_int st = clEnqueueFillBuffer(kd_ocl_queue(ocl), v->mem, pattern, size, 0,
                                    (size_t)v->n * size, 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        int code = kd_ocl_fail(err, st, "clEnqueueFillBuffer");
        kd_err_prefix(err, "filling a device vector of %lld values", (long long)v->n);
        return code;
    }
    return KD_OK;
}

/* Elements per column stride quantum: the device's base-address alignment (in bits from the
 * runtime), at least 256 bytes, in elements of `size` bytes. */
static size_t kd_multivec_quantum(kd_ocl_t *ocl, size_t size)
{
    cl_uint align_bits = 0;
    size_t bytes = 256;
    if (clGetDeviceInfo(kd_ocl_desc(ocl)->device_id, CL_DEVICE_MEM_BASE_ADDR_ALIGN,
                        sizeof(align_bits), &align_bits, NULL) == CL_SUCCESS &&
        align_bits / 8 > bytes)
        bytes = align_bits / 8;
    return bytes / size;
}

int kd_multivec_alloc(kd_ocl_t *ocl, int64_t n, int64_t k, kd_dtype_t dtype, kd_multivec_t *mv,
                      kd_err_t *err)
{
    assert(ocl != NULL && mv != NULL);
    memset(mv, 0, sizeof(*mv));
    int rc = kd_ocl_check_dtype(ocl, dtype, err);
    if (rc != KD_OK)
        return rc;
    if (n < 0 || k < 0)
        return kd_err_set(err, KD_EBADREQ, "%lld vectors of %lld values: negative size",
                          (long long)k, (long long)n);
    size_t size = kd_dtype_size(dtype);
    size_t quantum = kd_multivec_quantum(ocl, size);
    int64_t ld = k > 1 ? (n + (int64_t)quantum - 1) / (int64_t)quantum * (int64_t)quantum : n;
    size_t elements, bytes;
    if ((uint64_t)ld > SIZE_MAX || (uint64_t)k > SIZE_MAX ||
        kd_mul_overflow((size_t)ld, (size_t)k, &elements) ||
        kd_mul_overflow(elements, size, &bytes) || ld > INT32_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "%lld vectors of %lld %s values do not fit",
                          (long long)k, (long long)n, kd_dtype_name(dtype));
    mv->n = n;
    mv->ld = ld;
    mv->k = k;
    mv->dtype = dtype;
    if (k > 0 && (mv->cols = calloc((size_t)k, sizeof(*mv->cols))) == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld vector views", (long long)k);
    for (int64_t j = 0; j < k; j++) {
        mv->cols[j].n = n;
        mv->cols[j].dtype = dtype;
    }
    if (n == 0 || k == 0)
        return KD_OK;
    char what[80];
    snprintf(what, sizeof(what), "%lld vectors of %lld %s", (long long)k, (long long)n,
             kd_dtype_name(dtype));
    rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, bytes, NULL, what, &mv->mem, err);
    for (int64_t j = 0; rc == KD_OK && j < k; j++) {
        cl_int st = CL_SUCCESS;
        if (k == 1) {
            st = clRetainMemObject(mv->mem);
            mv->cols[j].mem = mv->mem;
        } else {
            cl_buffer_region region = {(size_t)j * (size_t)ld * size, (size_t)n * size};
            mv->cols[j].mem = clCreateSubBuffer(mv->mem, CL_MEM_READ_WRITE,
                                                CL_BUFFER_CREATE_TYPE_REGION, &region, &st);
        }
        if (st != CL_SUCCESS) {
            mv->cols[j].mem = NULL;
            rc = kd_ocl_fail(err, st, "clCreateSubBuffer");
            kd_err_prefix(err, "column %lld of %s", (long long)j, what);
        }
    }
    if (rc != KD_OK)
        kd_multivec_release(mv);
    return rc;
}

void kd_multivec_release(kd_multivec_t *mv)
{
    if (mv == NULL)
        return;
    for (int64_t j = 0; mv->cols != NULL && j < mv->k; j++)
        kd_vec_release(&mv->cols[j]);
    free(mv->cols);
    if (mv->mem != NULL)
        clReleaseMemObject(mv->mem);
    memset(mv, 0, sizeof(*mv));
}

/* Column j's byte range in the buffer. */
static size_t kd_multivec_offset(const kd_multivec_t *mv, int64_t j)
{
    return (size_t)j * (size_t)mv->ld * kd_dtype_size(mv->dtype);
}

/* Copies of columns j0 .. j0 + cols - 1 between mv and cols packed host columns: from src to the
 * device when src is not NULL, else from the device to dst; blocking, or only enqueued. */
static int kd_multivec_transfer(kd_ocl_t *ocl, const kd_multivec_t *mv, int64_t j0, int64_t cols,
                                const void *src, void *dst, int blocking, kd_err_t *err)
{
    if (mv->mem == NULL)
        return KD_OK;
    const int write = src != NULL;
    size_t bytes = (size_t)mv->n * kd_dtype_size(mv->dtype);
    for (int64_t j = j0; j < j0 + cols; j++) {
        size_t at = kd_multivec_offset(mv, j), host = (size_t)(j - j0) * bytes;
        int rc;
        if (blocking)
            rc = write ? kd_ocl_write(ocl, mv->mem, at, bytes, (const char *)src + host, err)
                       : kd_ocl_read(ocl, mv->mem, at, bytes, (char *)dst + host, err);
        else
            rc = write ? kd_ocl_write_async(ocl, mv->mem, at, bytes, (const char *)src + host, err)
                       : kd_ocl_read_async(ocl, mv->mem, at, bytes, (char *)dst + host, err);
        if (rc != KD_OK) {
            (void)clFinish(kd_ocl_queue(ocl));
            return kd_err_prefix(err, "%s column %lld of a device multivector",
                                 write ? "writing" : "reading", (long long)j);
        }
    }
    return KD_OK;
}

int kd_multivec_write(kd_ocl_t *ocl, kd_multivec_t *mv, const void *src, kd_err_t *err)
{
    assert(ocl != NULL && mv != NULL && (src != NULL || mv->mem == NULL));
    return kd_multivec_transfer(ocl, mv, 0, mv->k, src, NULL, 1, err);
}

int kd_multivec_write_cols_async(kd_ocl_t *ocl, kd_multivec_t *mv, int64_t j0, int64_t cols,
                                 const void *src, kd_err_t *err)
{
    assert(ocl != NULL && mv != NULL && j0 >= 0 && cols >= 0 && j0 + cols <= mv->k);
    return kd_multivec_transfer(ocl, mv, j0, cols, src, NULL, 0, err);
}

int kd_multivec_read_cols_async(kd_ocl_t *ocl, const kd_multivec_t *mv, int64_t j0, int64_t cols,
                                void *dst, kd_err_t *err)
{
    assert(ocl != NULL && mv != NULL && j0 >= 0 && cols >= 0 && j0 + cols <= mv->k);
    return kd_multivec_transfer(ocl, mv, j0, cols, NULL, dst, 0, err);
}

int kd_multivec_read(kd_ocl_t *ocl, const kd_multivec_t *mv, void *dst, kd_err_t *err)
{
    assert(ocl != NULL && mv != NULL && (dst != NULL || mv->mem == NULL));
    return kd_multivec_transfer(ocl, mv, 0, mv->k, NULL, dst, 1, err);
}

int kd_multivec_zero(kd_ocl_t *ocl, kd_multivec_t *mv, kd_err_t *err)
{
    if (mv->mem == NULL)
        return KD_OK;
    const unsigned char zero = 0; /* 0.0 is all zero bits in both dtypes */
    cl_int st = clEnqueueFillBuffer(kd_ocl_queue(ocl), mv->mem, &zero, 1, 0,
                                    (size_t)(mv->ld * mv->k) * kd_dtype_size(mv->dtype), 0, NULL,
                                    NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueFillBuffer (zeros)");
}

int kd_multivec_copy(kd_ocl_t *ocl, const kd_multivec_t *src, kd_multivec_t *dst,
                     const unsigned char *copy, kd_err_t *err)
{
    if (src->n != dst->n || src->k != dst->k || src->ld != dst->ld || src->dtype != dst->dtype)
        return kd_err_set(err, KD_EINTERNAL, "multivector copy between different shapes");
    if (src->mem == NULL || src->mem == dst->mem)
        return KD_OK;
    size_t bytes = (size_t)src->n * kd_dtype_size(src->dtype);
    for (int64_t j = 0; j < src->k; j++) {
        if (copy != NULL && !copy[j])
            continue;
        /* Consecutive selected columns go as one copy (the padding travels too, harmlessly). */
        int64_t last = j;
        while (last + 1 < src->k && (copy == NULL || copy[last + 1]))
            last++;
        size_t span = kd_multivec_offset(src, last) - kd_multivec_offset(src, j) + bytes;
        cl_int st =
            clEnqueueCopyBuffer(kd_ocl_queue(ocl), src->mem, dst->mem, kd_multivec_offset(src, j),
                                kd_multivec_offset(dst, j), span, 0, NULL, NULL);
        if (st != CL_SUCCESS)
            return kd_ocl_fail(err, st, "clEnqueueCopyBuffer");
        j = last;
    }
    return KD_OK;
}

int kd_multivec_scale_rows(kd_ocl_t *ocl, cl_mem d, const kd_multivec_t *src, kd_multivec_t *dst,
                           kd_err_t *err)
{
    assert(ocl != NULL && src != NULL && dst != NULL);
    if (src->n != dst->n || src->k != dst->k || src->ld != dst->ld || src->dtype != dst->dtype)
        return kd_err_set(err, KD_EINTERNAL, "scale_rows: multivectors of different shapes");
    if (src->n == 0 || src->k == 0)
        return KD_OK;
    const size_t wg = kd_ocl_work_group_size(ocl);
    char options[32];
    snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu", wg);
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, "blas", src->dtype, options, "kd_blas_scale_rows", &kernel, err);
    if (rc != KD_OK)
        return rc;
    const size_t global = ((size_t)src->n + wg - 1) / wg * wg;
    return kd_ocl_run(ocl, kernel, "kd_blas_scale_rows",
                      kd_ocl_range_2d(global, (size_t)src->k, wg, 1),
                      KD_ARGS(KD_ARG_INT(src->n), KD_ARG_INT(src->ld), KD_ARG_MEM(d),
                              KD_ARG_MEM(src->mem), KD_ARG_MEM(dst->mem)),
                      NULL, err);
}
