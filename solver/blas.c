/*
 * BLAS-1 on device vectors (see blas.h; the kernels and their thread
 * mapping are in kernels/blas.cl). This file chooses launch shapes, sets arguments and owns the
 * partials and scalars buffers; it never waits on the device except in the functions that
 * hand a value back to the host.
 *
 * Reduction grid: G = min(ceil(n / WG), 8 * compute units, KD_BLAS_GROUPS_MAX) work-groups, at
 * least 1. Eight groups per compute unit keep a GPU's SMs busy with a single wave of groups and
 * each work-item summing several elements; on a 2-core PoCL device it is 16 groups. G depends
 * only on n and the device, which is what makes the reductions deterministic.
 */
#include "solver/blas.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define KD_BLAS_GROUPS_MAX 1024

static int kd_blas_kernel(kd_blas_t *blas, const char *name, cl_kernel *out, kd_err_t *err)
{
    return kd_ocl_kernel(blas->ocl, "blas", blas->dtype, blas->options, name, out, err);
}

static size_t kd_blas_groups(const kd_blas_t *blas, int64_t n)
{
    size_t groups = ((size_t)n + blas->work_group_size - 1) / blas->work_group_size;
    if (groups > blas->groups_max)
        groups = blas->groups_max;
    return groups == 0 ? 1 : groups;
}

static int kd_blas_check(const kd_blas_t *blas, const kd_vec_t *a, const kd_vec_t *b,
                         const char *what, kd_err_t *err)
{
    if (a->dtype != blas->dtype || (b != NULL && b->dtype != blas->dtype))
        return kd_err_set(err, KD_EBADREQ, "%s: vectors must be %s", what,
                          kd_dtype_name(blas->dtype));
    if (b != NULL && a->n != b->n)
        return kd_err_set(err, KD_EBADREQ, "%s: vector lengths differ (%lld and %lld)", what,
                          (long long)a->n, (long long)b->n);
    if (a->n > INT32_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "%s: %lld elements is over the int32 limit", what,
                          (long long)a->n);
    return KD_OK;
}

int kd_blas_init(kd_ocl_t *ocl, kd_dtype_t dtype, kd_blas_t *blas, kd_err_t *err)
{
    assert(ocl != NULL && blas != NULL);
    memset(blas, 0, sizeof(*blas));
    int rc = kd_ocl_check_dtype(ocl, dtype, err);
    if (rc != KD_OK)
        return rc;
    const kd_ocl_device_desc_t *desc = kd_ocl_desc(ocl);
    size_t vsize = kd_dtype_size(dtype);
    blas->ocl = ocl;
    blas->dtype = dtype;
    blas->work_group_size = kd_ocl_work_group_size(ocl);
    blas->groups_max = (size_t)desc->compute_units * 8;
    if (blas->groups_max == 0)
        blas->groups_max = 1;
    if (blas->groups_max > KD_BLAS_GROUPS_MAX)
        blas->groups_max = KD_BLAS_GROUPS_MAX;
    snprintf(blas->options, sizeof(blas->options), "-DKD_WG_SIZE=%zu", blas->work_group_size);

    rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, blas->groups_max * vsize, NULL,
                              "reduction partial sums", &blas->partials, err);
    if (rc != KD_OK)
        goto fail;
    rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, KD_BLAS_SLOT_COUNT * vsize, NULL,
                              "solver scalars", &blas->scalars, err);
    if (rc != KD_OK)
        goto fail;

    cl_command_queue q = kd_ocl_queue(ocl);
    cl_long zero64 = 0;
    cl_int st = clEnqueueFillBuffer(q, blas->scalars, &zero64, vsize, 0, KD_BLAS_SLOT_COUNT * vsize,
                                    0, NULL, NULL);
    if (st != CL_SUCCESS) {
        rc = kd_ocl_fail(err, st, "clEnqueueFillBuffer");
        goto fail;
    }
    return KD_OK;
fail:
    kd_blas_release(blas);
    return rc;
}

void kd_blas_release(kd_blas_t *blas)
{
    if (blas == NULL)
        return;
    if (blas->partials != NULL)
        clReleaseMemObject(blas->partials);
    if (blas->scalars != NULL)
        clReleaseMemObject(blas->scalars);
    memset(blas, 0, sizeof(*blas));
}

/* partials <- per-group sums of x'y over `groups` groups. */
static int kd_blas_dot_partial(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, size_t groups,
                               kd_err_t *err)
{
    cl_kernel k;
    int rc = kd_blas_kernel(blas, "kd_blas_dot_partial", &k, err);
    if (rc != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(k);
    kd_ocl_arg_int(&a, (cl_int)x->n);
    kd_ocl_arg_mem(&a, x->mem);
    kd_ocl_arg_mem(&a, y->mem);
    kd_ocl_arg_mem(&a, blas->partials);
    if ((rc = kd_ocl_args_end(&a, "kd_blas_dot_partial", err)) != KD_OK)
        return rc;
    return kd_ocl_launch(blas->ocl, k, groups * blas->work_group_size, blas->work_group_size,
                         "kd_blas_dot_partial", err);
}

static int kd_blas_reduce_final(kd_blas_t *blas, size_t groups, int slot, kd_err_t *err)
{
    cl_kernel k;
    int rc = kd_blas_kernel(blas, "kd_blas_reduce_final", &k, err);
    if (rc != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(k);
    kd_ocl_arg_int(&a, (cl_int)groups);
    kd_ocl_arg_mem(&a, blas->partials);
    kd_ocl_arg_mem(&a, blas->scalars);
    kd_ocl_arg_int(&a, slot);
    if ((rc = kd_ocl_args_end(&a, "kd_blas_reduce_final", err)) != KD_OK)
        return rc;
    return kd_ocl_launch(blas->ocl, k, blas->work_group_size, blas->work_group_size,
                         "kd_blas_reduce_final", err);
}

int kd_blas_dot_to(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, kd_blas_slot_t slot,
                   kd_err_t *err)
{
    int rc = kd_blas_check(blas, x, y, "dot", err);
    if (rc != KD_OK)
        return rc;
    if ((int)slot < 0 || slot >= KD_BLAS_SLOT_COUNT)
        return kd_err_set(err, KD_EINTERNAL, "dot: no scalar slot %d", (int)slot);
    size_t groups = kd_blas_groups(blas, x->n);
    rc = kd_blas_dot_partial(blas, x, y, groups, err);
    if (rc == KD_OK)
        rc = kd_blas_reduce_final(blas, groups, (int)slot, err);
    return rc;
}

int kd_blas_read_slot(kd_blas_t *blas, kd_blas_slot_t slot, double *out, kd_err_t *err)
{
    if ((int)slot < 0 || slot >= KD_BLAS_SLOT_COUNT)
        return kd_err_set(err, KD_EINTERNAL, "no scalar slot %d", (int)slot);
    unsigned char value[8];
    size_t vsize = kd_dtype_size(blas->dtype);
    cl_int st = kd_ocl_enqueue_read(kd_ocl_queue(blas->ocl), blas->scalars, CL_TRUE,
                                    (size_t)slot * vsize, vsize, value, 0, NULL, NULL);
    if (st != CL_SUCCESS)
        return kd_ocl_fail(err, st, "clEnqueueReadBuffer (solver scalar)");
    *out = kd_load_real(value, blas->dtype, 0);
    return KD_OK;
}

int kd_blas_dot(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, double *out, kd_err_t *err)
{
    int rc = kd_blas_dot_to(blas, x, y, KD_BLAS_SLOT_RESULT, err);
    if (rc == KD_OK)
        rc = kd_blas_read_slot(blas, KD_BLAS_SLOT_RESULT, out, err);
    return rc;
}

int kd_blas_nrm2(kd_blas_t *blas, const kd_vec_t *x, double *out, kd_err_t *err)
{
    double dot = 0.0;
    int rc = kd_blas_dot(blas, x, x, &dot, err);
    if (rc == KD_OK)
        *out = sqrt(dot);
    return rc;
}

/* One work-item per element of an n-element kernel. */
static int kd_blas_launch_elementwise(kd_blas_t *blas, cl_kernel k, int64_t n, const char *what,
                                      kd_err_t *err)
{
    size_t wg = blas->work_group_size;
    size_t global = ((size_t)n + wg - 1) / wg * wg;
    return kd_ocl_launch(blas->ocl, k, global, wg, what, err);
}

int kd_blas_axpy(kd_blas_t *blas, double alpha, const kd_vec_t *x, kd_vec_t *y, kd_err_t *err)
{
    int rc = kd_blas_check(blas, x, y, "axpy", err);
    if (rc != KD_OK || x->n == 0)
        return rc;
    cl_kernel k;
    if ((rc = kd_blas_kernel(blas, "kd_blas_axpy", &k, err)) != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(k);
    kd_ocl_arg_int(&a, (cl_int)x->n);
    kd_ocl_arg_value(&a, blas->dtype, alpha);
    kd_ocl_arg_mem(&a, x->mem);
    kd_ocl_arg_mem(&a, y->mem);
    if ((rc = kd_ocl_args_end(&a, "kd_blas_axpy", err)) != KD_OK)
        return rc;
    return kd_blas_launch_elementwise(blas, k, x->n, "kd_blas_axpy", err);
}

int kd_blas_xpay(kd_blas_t *blas, const kd_vec_t *x, double alpha, kd_vec_t *y, kd_err_t *err)
{
    int rc = kd_blas_check(blas, x, y, "xpay", err);
    if (rc != KD_OK || x->n == 0)
        return rc;
    cl_kernel k;
    if ((rc = kd_blas_kernel(blas, "kd_blas_xpay", &k, err)) != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(k);
    kd_ocl_arg_int(&a, (cl_int)x->n);
    kd_ocl_arg_mem(&a, x->mem);
    kd_ocl_arg_value(&a, blas->dtype, alpha);
    kd_ocl_arg_mem(&a, y->mem);
    if ((rc = kd_ocl_args_end(&a, "kd_blas_xpay", err)) != KD_OK)
        return rc;
    return kd_blas_launch_elementwise(blas, k, x->n, "kd_blas_xpay", err);
}

int kd_blas_copy(kd_blas_t *blas, const kd_vec_t *x, kd_vec_t *y, kd_err_t *err)
{
    int rc = kd_blas_check(blas, x, y, "copy", err);
    if (rc != KD_OK || x->n == 0 || x->mem == y->mem)
        return rc;
    size_t bytes = (size_t)x->n * kd_dtype_size(blas->dtype);
    cl_int st =
        clEnqueueCopyBuffer(kd_ocl_queue(blas->ocl), x->mem, y->mem, 0, 0, bytes, 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        rc = kd_ocl_fail(err, st, "clEnqueueCopyBuffer");
        kd_err_prefix(err, "copying a vector of %lld values", (long long)x->n);
    }
    return rc;
}

int kd_blas_scale(kd_blas_t *blas, double alpha, kd_vec_t *x, kd_err_t *err)
{
    int rc = kd_blas_check(blas, x, NULL, "scale", err);
    if (rc != KD_OK || x->n == 0)
        return rc;
    cl_kernel k;
    if ((rc = kd_blas_kernel(blas, "kd_blas_scale", &k, err)) != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(k);
    kd_ocl_arg_int(&a, (cl_int)x->n);
    kd_ocl_arg_value(&a, blas->dtype, alpha);
    kd_ocl_arg_mem(&a, x->mem);
    if ((rc = kd_ocl_args_end(&a, "kd_blas_scale", err)) != KD_OK)
        return rc;
    return kd_blas_launch_elementwise(blas, k, x->n, "kd_blas_scale", err);
}
