/*
 * Dense device vectors (see vector.h). A vector of n > 0 elements owns one read-write buffer; an
 * empty vector has mem == NULL, and every operation on it is a no-op, so callers never special-
 * case n == 0 and no zero-byte buffer is ever requested. Host arrays may be unaligned (msgpack
 * `bin` payloads) and of the other float type: a copy in the vector's own type goes straight to
 * the runtime, anything else is converted through a temporary host buffer with common/dtype.h.
 */
#include "solver/vector.h"
#include "common/checked.h"

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

int kd_vec_write(kd_ocl_t *ocl, kd_vec_t *v, const void *src, kd_dtype_t src_dtype, kd_err_t *err)
{
    int rc = kd_vec_check_host_dtype(src_dtype, err);
    if (rc != KD_OK || v->n == 0)
        return rc;
    size_t n = (size_t)v->n;
    size_t bytes = n * kd_dtype_size(v->dtype);
    void *tmp = NULL;
    const void *from = src;
    if (src_dtype != v->dtype) {
        if ((tmp = malloc(bytes)) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory converting %zu values", n);
        kd_convert_real(tmp, v->dtype, src, src_dtype, n);
        from = tmp;
    }
    cl_int st =
        clEnqueueWriteBuffer(kd_ocl_queue(ocl), v->mem, CL_TRUE, 0, bytes, from, 0, NULL, NULL);
    free(tmp);
    if (st != CL_SUCCESS) {
        rc = kd_ocl_fail(err, st, "clEnqueueWriteBuffer");
        kd_err_prefix(err, "writing %zu bytes to a device vector", bytes);
    }
    return rc;
}

int kd_vec_read(kd_ocl_t *ocl, const kd_vec_t *v, void *dst, kd_dtype_t dst_dtype, kd_err_t *err)
{
    int rc = kd_vec_check_host_dtype(dst_dtype, err);
    if (rc != KD_OK || v->n == 0)
        return rc;
    size_t n = (size_t)v->n;
    size_t bytes = n * kd_dtype_size(v->dtype);
    void *tmp = NULL;
    void *into = dst;
    if (dst_dtype != v->dtype) {
        if ((tmp = malloc(bytes)) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory converting %zu values", n);
        into = tmp;
    }
    cl_int st =
        clEnqueueReadBuffer(kd_ocl_queue(ocl), v->mem, CL_TRUE, 0, bytes, into, 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        rc = kd_ocl_fail(err, st, "clEnqueueReadBuffer");
        kd_err_prefix(err, "reading %zu bytes from a device vector", bytes);
    } else if (tmp != NULL) {
        kd_convert_real(dst, dst_dtype, tmp, v->dtype, n);
    }
    free(tmp);
    return rc;
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
