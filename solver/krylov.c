/*
 * Host side of the lock-step Krylov kernels (see krylov.h and kernels/krylov.cl): buffers,
 * launch shapes and arguments. Every launch is a 2-D range (groups * WG, k) in groups of
 * (WG, 1); dimension 1 is the column.
 *
 * Groups per column G: one wave of eight work-groups per compute unit over all k columns
 * (8 * CUs / k, rounded up), at most KD_KRYLOV_GROUPS_MAX and at most one group per WG elements.
 * G depends only on n, k and the device, which keeps results reproducible bit for bit; the
 * consumer of a reduction reads G partials per work-group, so a smaller G also makes the fused
 * finals cheaper.
 */
#include "solver/krylov.h"
#include "common/checked.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_KRYLOV_GROUPS_MAX 1024

enum { KD_FINAL_SCALARS = 0, KD_FINAL_NORMS = 1 };

/* res_partials' scratch slot for norms (slots 0 and 1 go by iteration parity). */
#define KD_NORMS_SLOT 2

static int kd_krylov_kernel(kd_krylov_t *kr, const char *name, cl_kernel *out, kd_err_t *err)
{
    return kd_ocl_kernel(kr->ocl, "krylov", kr->dtype, kr->options, name, out, err);
}

static int kd_krylov_launch(kd_krylov_t *kr, cl_kernel kernel, size_t groups, const char *what,
                            kd_err_t *err)
{
    size_t global[2] = {groups * kr->work_group_size, (size_t)kr->k};
    size_t local[2] = {kr->work_group_size, 1};
    cl_int st = clEnqueueNDRangeKernel(kd_ocl_queue(kr->ocl), kernel, 2, NULL, global, local, 0,
                                       NULL, NULL);
    if (st != CL_SUCCESS) {
        int rc = kd_ocl_fail(err, st, "clEnqueueNDRangeKernel");
        kd_err_prefix(err, "%s over %lld columns", what, (long long)kr->k);
        return rc;
    }
    return KD_OK;
}

static int kd_krylov_buffer(kd_krylov_t *kr, size_t count, size_t size, const char *what,
                            cl_mem *out, kd_err_t *err)
{
    size_t bytes;
    if (kd_mul_overflow(count, size, &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "%s: %zu elements do not fit", what, count);
    return kd_ocl_buffer_create(kr->ocl, CL_MEM_READ_WRITE, bytes ? bytes : size, NULL, what, out,
                                err);
}

int kd_krylov_init(kd_ocl_t *ocl, kd_dtype_t dtype, kd_krylov_method_t method, int64_t n,
                   int64_t ld, int64_t k, int64_t groups, int passes, const double *threshold,
                   int64_t limit, kd_krylov_t *kr, kd_err_t *err)
{
    memset(kr, 0, sizeof(*kr));
    int rc = kd_ocl_check_dtype(ocl, dtype, err);
    if (rc != KD_OK)
        return rc;
    if (n <= 0 || k <= 0 || ld < n || ld > INT32_MAX || k > INT32_MAX / KD_KRYLOV_GROUPS_MAX)
        return kd_err_set(err, KD_EINTERNAL, "krylov: bad shape n=%lld ld=%lld k=%lld",
                          (long long)n, (long long)ld, (long long)k);
    const size_t vsize = kd_dtype_size(dtype);
    kr->ocl = ocl;
    kr->dtype = dtype;
    kr->method = method;
    kr->passes = method == KD_KRYLOV_SD || passes == 3 ? 3 : 2;
    kr->with_rq = passes != KD_KRYLOV_PASSES_LEAN;
    kr->n = n;
    kr->ld = ld;
    kr->k = k;
    kr->work_group_size = kd_ocl_work_group_size(ocl);
    /* One wave of groups over all columns: four per compute unit on a GPU (H100: fuller waves
     * ran slower, the fused folds' cost grows with G), eight on a CPU. */
    const size_t per_unit = kd_ocl_desc(ocl)->is_gpu ? 4 : 8;
    size_t g = groups > 0 ? (size_t)groups
                          : ((size_t)kd_ocl_desc(ocl)->compute_units * per_unit + (size_t)k - 1) /
                                (size_t)k;
    size_t per_elements = ((size_t)n + kr->work_group_size - 1) / kr->work_group_size;
    if (g > per_elements)
        g = per_elements;
    if (g > KD_KRYLOV_GROUPS_MAX)
        g = KD_KRYLOV_GROUPS_MAX;
    kr->groups = g == 0 ? 1 : g;
    /* KD_KRYLOV_BUILD_OPTIONS: extra build options for tuning on a new device (for example
     * "-cl-nv-maxrregcount=32"); they become part of the program cache's key. */
    const char *extra = getenv("KD_KRYLOV_BUILD_OPTIONS");
    snprintf(kr->options, sizeof(kr->options), "-DKD_WG_SIZE=%zu%s%s", kr->work_group_size,
             extra != NULL && extra[0] != '\0' ? " " : "", extra != NULL ? extra : "");

    const size_t count = (size_t)k * kr->groups;
    if ((rc = kd_krylov_buffer(kr, 3 * count, vsize, "dot partial sums", &kr->dot_partials, err)) ||
        (rc = kd_krylov_buffer(kr, 6 * count, vsize, "residual partial sums", &kr->res_partials,
                               err)) ||
        (rc = kd_krylov_buffer(kr, 2 * (size_t)k * KD_KRYLOV_SLOTS, vsize, "solver scalars",
                               &kr->scalars, err)) ||
        (rc = kd_krylov_buffer(kr, 4 * (size_t)k, sizeof(cl_long), "solver state", &kr->state,
                               err)) ||
        (rc = kd_krylov_buffer(kr, (size_t)k, vsize, "thresholds", &kr->threshold, err)) ||
        (rc = kd_krylov_buffer(kr, (size_t)k, sizeof(cl_long), "iteration limits", &kr->limits,
                               err)) ||
        (rc = kd_krylov_buffer(kr, (size_t)k, sizeof(cl_int), "column masks", &kr->mask, err)) ||
        (rc = kd_krylov_buffer(kr, (size_t)k, vsize, "column norms", &kr->norms, err)))
        goto fail;
    for (int i = 0; i < 3; i++)
        if ((rc = kd_krylov_buffer(kr, (size_t)k * (2 + KD_KRYLOV_SLOTS), sizeof(cl_long),
                                   "solver snapshots", &kr->snapshot_slots[i], err)) != KD_OK)
            goto fail;
    cl_int qst = CL_SUCCESS;
    kr->read_queue =
        clCreateCommandQueue(kd_ocl_context(ocl), kd_ocl_desc(ocl)->device_id, 0, &qst);
    if (qst != CL_SUCCESS) {
        kr->read_queue = NULL;
        rc = kd_ocl_fail(err, qst, "clCreateCommandQueue (solver state reads)");
        goto fail;
    }

    unsigned char *host = malloc((size_t)k * vsize);
    if (host == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld thresholds", (long long)k);
        goto fail;
    }
    for (int64_t c = 0; c < k; c++)
        kd_store_real(host, dtype, (size_t)c, threshold[c]);
    cl_command_queue q = kd_ocl_queue(ocl);
    cl_long zero = 0, limit64 = (cl_long)limit;
    cl_int st =
        clEnqueueWriteBuffer(q, kr->threshold, CL_TRUE, 0, (size_t)k * vsize, host, 0, NULL, NULL);
    free(host);
    if (st == CL_SUCCESS)
        st = clEnqueueFillBuffer(q, kr->scalars, &zero, vsize, 0,
                                 2 * (size_t)k * KD_KRYLOV_SLOTS * vsize, 0, NULL, NULL);
    if (st == CL_SUCCESS)
        st = clEnqueueFillBuffer(q, kr->state, &zero, sizeof(zero), 0,
                                 4 * (size_t)k * sizeof(cl_long), 0, NULL, NULL);
    if (st == CL_SUCCESS)
        st = clEnqueueFillBuffer(q, kr->limits, &limit64, sizeof(limit64), 0,
                                 (size_t)k * sizeof(cl_long), 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        rc = kd_ocl_fail(err, st, "initialising the solver scalars");
        goto fail;
    }
    return KD_OK;
fail:
    kd_krylov_release(kr);
    return rc;
}

void kd_krylov_release(kd_krylov_t *kr)
{
    if (kr == NULL)
        return;
    cl_mem *bufs[] = {&kr->dot_partials,
                      &kr->res_partials,
                      &kr->scalars,
                      &kr->state,
                      &kr->threshold,
                      &kr->limits,
                      &kr->mask,
                      &kr->norms,
                      &kr->snapshot_slots[0],
                      &kr->snapshot_slots[1],
                      &kr->snapshot_slots[2]};
    if (kr->read_queue != NULL) { /* no read may still target a snapshot buffer */
        (void)clFinish(kr->read_queue);
        clReleaseCommandQueue(kr->read_queue);
    }
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (*bufs[i] != NULL)
            clReleaseMemObject(*bufs[i]);
    memset(kr, 0, sizeof(*kr));
}

static int kd_krylov_check(const kd_krylov_t *kr, const kd_multivec_t *v, const char *what,
                           kd_err_t *err)
{
    if (v->n != kr->n || v->ld != kr->ld || v->k != kr->k || v->dtype != kr->dtype)
        return kd_err_set(err, KD_EINTERNAL, "krylov %s: vectors of another shape or type", what);
    return KD_OK;
}

static int kd_krylov_parity(int64_t iteration)
{
    return (int)(iteration & 1);
}

int kd_krylov_dots(kd_krylov_t *kr, const kd_multivec_t *p, const kd_multivec_t *q,
                   int64_t iteration, kd_err_t *err)
{
    int rc;
    cl_kernel kernel;
    if ((rc = kd_krylov_check(kr, p, "dots", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, q, "dots", err)) != KD_OK ||
        (rc = kd_krylov_kernel(kr, "kd_krylov_dots", &kernel, err)) != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->n);
    kd_ocl_arg_int(&a, (cl_int)kr->ld);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration - 1));
    kd_ocl_arg_mem(&a, kr->state);
    kd_ocl_arg_mem(&a, p->mem);
    kd_ocl_arg_mem(&a, q->mem);
    kd_ocl_arg_mem(&a, kr->dot_partials);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_dots", err)) != KD_OK)
        return rc;
    return kd_krylov_launch(kr, kernel, kr->groups, "kd_krylov_dots", err);
}

int kd_krylov_update_residual(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                              kd_multivec_t *x, cl_mem inv_diagonal, int64_t iteration,
                              kd_err_t *err)
{
    int rc;
    cl_kernel kernel;
    if ((rc = kd_krylov_check(kr, q, "update_residual", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, r, "update_residual", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, x, "update_residual", err)) != KD_OK)
        return rc;
    if (kr->method == KD_KRYLOV_PCG && inv_diagonal == NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: pcg without an inverse diagonal");
    if ((rc = kd_krylov_kernel(kr, "kd_krylov_update_residual", &kernel, err)) != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->n);
    kd_ocl_arg_int(&a, (cl_int)kr->ld);
    kd_ocl_arg_int(&a, (cl_int)kr->groups);
    kd_ocl_arg_int(&a, (cl_int)kr->method);
    kd_ocl_arg_long(&a, (cl_long)iteration);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration - 1));
    kd_ocl_arg_mem(&a, kr->threshold);
    kd_ocl_arg_mem(&a, kr->limits);
    kd_ocl_arg_mem(&a, kr->dot_partials);
    kd_ocl_arg_mem(&a, kr->scalars);
    kd_ocl_arg_mem(&a, kr->state);
    kd_ocl_arg_mem(&a, q->mem);
    kd_ocl_arg_mem(&a, r->mem);
    kd_ocl_arg_mem(&a, x->mem);
    kd_ocl_arg_mem(&a, kr->method == KD_KRYLOV_PCG ? inv_diagonal : NULL);
    kd_ocl_arg_mem(&a, kr->res_partials);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_update_residual", err)) != KD_OK)
        return rc;
    return kd_krylov_launch(kr, kernel, kr->groups, "kd_krylov_update_residual", err);
}

int kd_krylov_update_direction(kd_krylov_t *kr, const kd_multivec_t *r, cl_mem inv_diagonal,
                               kd_multivec_t *x, kd_multivec_t *d, int64_t iteration, kd_err_t *err)
{
    int rc;
    cl_kernel kernel;
    const int sd = kr->method == KD_KRYLOV_SD;
    if ((rc = kd_krylov_check(kr, r, "update_direction", err)) != KD_OK ||
        (!sd && (rc = kd_krylov_check(kr, x, "update_direction", err)) != KD_OK) ||
        (!sd && (rc = kd_krylov_check(kr, d, "update_direction", err)) != KD_OK))
        return rc;
    if ((rc = kd_krylov_kernel(kr, "kd_krylov_update_direction", &kernel, err)) != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->n);
    kd_ocl_arg_int(&a, (cl_int)kr->ld);
    kd_ocl_arg_int(&a, (cl_int)kr->groups);
    kd_ocl_arg_int(&a, (cl_int)kr->method);
    kd_ocl_arg_long(&a, (cl_long)iteration);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration - 1));
    kd_ocl_arg_mem(&a, kr->scalars);
    kd_ocl_arg_mem(&a, kr->state);
    kd_ocl_arg_mem(&a, kr->res_partials);
    kd_ocl_arg_mem(&a, r->mem);
    kd_ocl_arg_mem(&a, kr->method == KD_KRYLOV_PCG ? inv_diagonal : NULL);
    kd_ocl_arg_mem(&a, sd ? NULL : x->mem);
    kd_ocl_arg_mem(&a, sd ? NULL : d->mem);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_update_direction", err)) != KD_OK)
        return rc;
    /* SD only folds r'r: one group per column does. */
    return kd_krylov_launch(kr, kernel, sd ? 1 : kr->groups, "kd_krylov_update_direction", err);
}

static int kd_krylov_write_mask(kd_krylov_t *kr, const int *mask, kd_err_t *err)
{
    cl_int st = clEnqueueWriteBuffer(kd_ocl_queue(kr->ocl), kr->mask, CL_TRUE, 0,
                                     (size_t)kr->k * sizeof(cl_int), mask, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (column masks)");
}

/* The partials of r'r (and r'z with pcg) of the masked columns, d = z where asked. */
static int kd_krylov_partials(kd_krylov_t *kr, const kd_multivec_t *r, int pcg, cl_mem inv_diagonal,
                              kd_multivec_t *d, int slot, int use_mask, int mask_all, kd_err_t *err)
{
    cl_kernel kernel;
    int rc = kd_krylov_kernel(kr, "kd_krylov_residual_partials", &kernel, err);
    if (rc != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->n);
    kd_ocl_arg_int(&a, (cl_int)kr->ld);
    kd_ocl_arg_int(&a, pcg);
    kd_ocl_arg_int(&a, slot);
    kd_ocl_arg_mem(&a, use_mask ? kr->mask : NULL);
    kd_ocl_arg_int(&a, mask_all);
    kd_ocl_arg_mem(&a, r->mem);
    kd_ocl_arg_mem(&a, pcg ? inv_diagonal : NULL);
    kd_ocl_arg_mem(&a, d != NULL ? d->mem : NULL);
    kd_ocl_arg_mem(&a, kr->res_partials);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_residual_partials", err)) != KD_OK)
        return rc;
    return kd_krylov_launch(kr, kernel, kr->groups, "kd_krylov_residual_partials", err);
}

static int kd_krylov_final(kd_krylov_t *kr, int pcg, int64_t iteration, int slot, int mode,
                           int use_mask, int mask_all, kd_err_t *err)
{
    cl_kernel kernel;
    int rc = kd_krylov_kernel(kr, "kd_krylov_residual_final", &kernel, err);
    if (rc != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->groups);
    kd_ocl_arg_int(&a, pcg);
    kd_ocl_arg_long(&a, (cl_long)iteration);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration));
    kd_ocl_arg_int(&a, slot);
    kd_ocl_arg_int(&a, mode);
    kd_ocl_arg_mem(&a, use_mask ? kr->mask : NULL);
    kd_ocl_arg_int(&a, mask_all);
    kd_ocl_arg_mem(&a, kr->res_partials);
    kd_ocl_arg_mem(&a, kr->scalars);
    kd_ocl_arg_mem(&a, kr->state);
    kd_ocl_arg_mem(&a, kr->norms);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_residual_final", err)) != KD_OK)
        return rc;
    return kd_krylov_launch(kr, kernel, 1, "kd_krylov_residual_final", err);
}

int kd_krylov_residual(kd_krylov_t *kr, const kd_multivec_t *r, cl_mem inv_diagonal,
                       kd_multivec_t *d, const int *mask, int mask_all, int64_t iteration,
                       kd_err_t *err)
{
    int rc = kd_krylov_check(kr, r, "residual", err);
    if (rc == KD_OK && d != NULL)
        rc = kd_krylov_check(kr, d, "residual", err);
    if (rc != KD_OK)
        return rc;
    const int pcg = kr->method == KD_KRYLOV_PCG;
    if (pcg && inv_diagonal == NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: pcg without an inverse diagonal");
    if (mask != NULL && (rc = kd_krylov_write_mask(kr, mask, err)) != KD_OK)
        return rc;
    if (d == NULL)
        mask_all &= ~KD_KRYLOV_MASK_DIRECTION;
    const int slot = kd_krylov_parity(iteration);
    rc = kd_krylov_partials(kr, r, pcg, inv_diagonal, d, slot, mask != NULL, mask_all, err);
    if (rc == KD_OK)
        rc = kd_krylov_final(kr, pcg, iteration, slot, KD_FINAL_SCALARS, mask != NULL, mask_all,
                             err);
    return rc;
}

int kd_krylov_norms(kd_krylov_t *kr, const kd_multivec_t *t, const int *mask, double *out,
                    kd_err_t *err)
{
    int rc = kd_krylov_check(kr, t, "norms", err);
    if (rc != KD_OK)
        return rc;
    if (mask != NULL && (rc = kd_krylov_write_mask(kr, mask, err)) != KD_OK)
        return rc;
    if ((rc = kd_krylov_partials(kr, t, 0, NULL, NULL, KD_NORMS_SLOT, mask != NULL,
                                 KD_KRYLOV_MASK_PARTIALS, err)) != KD_OK ||
        (rc = kd_krylov_final(kr, 0, 0, KD_NORMS_SLOT, KD_FINAL_NORMS, mask != NULL,
                              KD_KRYLOV_MASK_PARTIALS, err)) != KD_OK)
        return rc;
    const size_t vsize = kd_dtype_size(kr->dtype);
    unsigned char *host = malloc((size_t)kr->k * vsize);
    if (host == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld norms", (long long)kr->k);
    cl_int st = clEnqueueReadBuffer(kd_ocl_queue(kr->ocl), kr->norms, CL_TRUE, 0,
                                    (size_t)kr->k * vsize, host, 0, NULL, NULL);
    if (st == CL_SUCCESS) {
        for (int64_t c = 0; c < kr->k; c++)
            if (mask == NULL || (mask[c] & KD_KRYLOV_MASK_PARTIALS))
                out[c] = kd_load_real(host, kr->dtype, (size_t)c);
    }
    free(host);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueReadBuffer (column norms)");
}

int kd_krylov_snapshot_init(kd_krylov_t *kr, kd_krylov_snapshot_t *snap, int slot, kd_err_t *err)
{
    memset(snap, 0, sizeof(*snap));
    snap->slot = slot;
    snap->raw = malloc((size_t)kr->k * (2 + KD_KRYLOV_SLOTS) * sizeof(cl_long));
    if (snap->raw == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the solver state");
    return KD_OK;
}

void kd_krylov_snapshot_release(kd_krylov_snapshot_t *snap)
{
    if (snap == NULL)
        return;
    if (snap->done != NULL) {
        (void)clWaitForEvents(1, &snap->done);
        clReleaseEvent(snap->done);
    }
    free(snap->raw);
    memset(snap, 0, sizeof(*snap));
}

int kd_krylov_read_start(kd_krylov_t *kr, int64_t iteration, kd_krylov_snapshot_t *snap,
                         kd_err_t *err)
{
    const size_t bytes = (size_t)kr->k * (2 + KD_KRYLOV_SLOTS) * sizeof(cl_long);
    if (snap->done != NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: a snapshot read is still pending");
    cl_kernel kernel;
    int rc = kd_krylov_kernel(kr, "kd_krylov_snapshot", &kernel, err);
    if (rc != KD_OK)
        return rc;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->groups);
    kd_ocl_arg_int(&a, kr->method == KD_KRYLOV_PCG);
    kd_ocl_arg_int(&a, kr->passes == 2); /* two passes leave r'r as partial sums */
    kd_ocl_arg_long(&a, (cl_long)iteration);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration));
    kd_ocl_arg_mem(&a, kr->res_partials);
    kd_ocl_arg_mem(&a, kr->scalars);
    kd_ocl_arg_mem(&a, kr->state);
    kd_ocl_arg_mem(&a, kr->snapshot_slots[snap->slot]);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_snapshot", err)) != KD_OK)
        return rc;
    cl_command_queue q = kd_ocl_queue(kr->ocl);
    cl_event packed = NULL;
    size_t global[2] = {kr->work_group_size, (size_t)kr->k};
    size_t local[2] = {kr->work_group_size, 1};
    cl_int st = clEnqueueNDRangeKernel(q, kernel, 2, NULL, global, local, 0, NULL, &packed);
    if (st == CL_SUCCESS)
        st = clFlush(q);
    if (st == CL_SUCCESS)
        st = clEnqueueReadBuffer(kr->read_queue, kr->snapshot_slots[snap->slot], CL_FALSE, 0, bytes,
                                 snap->raw, 1, &packed, &snap->done);
    if (st == CL_SUCCESS)
        st = clFlush(kr->read_queue);
    if (packed != NULL)
        clReleaseEvent(packed);
    if (st != CL_SUCCESS) {
        /* A read may still be writing into the snapshot: drain before anyone frees it. */
        (void)clFinish(q);
        (void)clFinish(kr->read_queue);
        if (snap->done != NULL)
            clReleaseEvent(snap->done);
        snap->done = NULL;
        return kd_ocl_fail(err, st, "reading the solver state");
    }
    snap->iteration = iteration;
    return KD_OK;
}

int kd_krylov_read_finish(kd_krylov_t *kr, kd_krylov_snapshot_t *snap, kd_krylov_column_t *out,
                          kd_err_t *err)
{
    if (snap->done == NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: no snapshot read is pending");
    cl_int st = clWaitForEvents(1, &snap->done);
    clReleaseEvent(snap->done);
    snap->done = NULL;
    if (st != CL_SUCCESS)
        return kd_ocl_fail(err, st, "clWaitForEvents (solver state)");
    for (size_t c = 0; c < (size_t)kr->k; c++) {
        const cl_long *row = snap->raw + c * (2 + KD_KRYLOV_SLOTS);
        double v[KD_KRYLOV_SLOTS];
        for (int j = 0; j < KD_KRYLOV_SLOTS; j++) {
            if (kr->dtype == KD_DTYPE_F64) {
                memcpy(&v[j], &row[2 + j], sizeof(double));
            } else {
                uint32_t bits = (uint32_t)row[2 + j];
                float f;
                memcpy(&f, &bits, sizeof(f));
                v[j] = f;
            }
        }
        out[c].status = (int)row[0];
        out[c].iteration = (int64_t)row[1];
        out[c].rr = v[0];
        out[c].rz = v[1];
        out[c].pq = v[2];
        out[c].alpha = v[3];
        out[c].beta = v[4];
        out[c].fail = v[5];
    }
    return KD_OK;
}

int kd_krylov_read(kd_krylov_t *kr, int64_t iteration, kd_krylov_column_t *out, kd_err_t *err)
{
    kd_krylov_snapshot_t snap;
    int rc = kd_krylov_snapshot_init(kr, &snap, 2, err);
    if (rc == KD_OK)
        rc = kd_krylov_read_start(kr, iteration, &snap, err);
    if (rc == KD_OK)
        rc = kd_krylov_read_finish(kr, &snap, out, err);
    kd_krylov_snapshot_release(&snap);
    return rc;
}

int kd_krylov_set_limit(kd_krylov_t *kr, int64_t c, int64_t limit, kd_err_t *err)
{
    cl_long word = (cl_long)limit;
    cl_int st = clEnqueueWriteBuffer(kd_ocl_queue(kr->ocl), kr->limits, CL_TRUE,
                                     (size_t)c * sizeof(word), sizeof(word), &word, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (limits)");
}

int kd_krylov_stop(kd_krylov_t *kr, int64_t c, int64_t iteration, kd_err_t *err)
{
    cl_long word[2] = {KD_KRYLOV_STOPPED, (cl_long)iteration};
    size_t offset =
        ((size_t)kd_krylov_parity(iteration) * (size_t)kr->k + (size_t)c) * sizeof(word);
    cl_int st = clEnqueueWriteBuffer(kd_ocl_queue(kr->ocl), kr->state, CL_TRUE, offset,
                                     sizeof(word), word, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (solver state)");
}

/* The partial sums of p'q (and with two passes r'Mq, q'Mq) of every running column:
 * kd_krylov_dots3 over q computed before it, or, with A (a csr_scalar matrix),
 * kd_krylov_csr_spmv_dots3, which computes q = A p itself first. Three passes (and SD) fold p'q
 * only: their launch reads neither r nor 1/diag. */
static int kd_krylov_dots3(kd_krylov_t *kr, const kd_format_csr_t *A, const kd_multivec_t *p,
                           const kd_multivec_t *q, const kd_multivec_t *r, cl_mem inv_diagonal,
                           int64_t iteration, kd_err_t *err)
{
    const char *name = A != NULL ? "kd_krylov_csr_spmv_dots3" : "kd_krylov_dots3";
    cl_kernel kernel;
    int rc = kd_krylov_kernel(kr, name, &kernel, err);
    if (rc != KD_OK)
        return rc;
    const int two = kr->passes == 2;
    const int pcg = two && kr->method == KD_KRYLOV_PCG;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->n);
    kd_ocl_arg_int(&a, (cl_int)kr->ld);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration - 1));
    kd_ocl_arg_int(&a, pcg);
    kd_ocl_arg_int(&a, two && kr->with_rq);
    kd_ocl_arg_mem(&a, kr->state);
    if (A != NULL) {
        kd_ocl_arg_mem(&a, A->indptr);
        kd_ocl_arg_mem(&a, A->indices);
        kd_ocl_arg_mem(&a, A->values);
    }
    kd_ocl_arg_mem(&a, p->mem);
    kd_ocl_arg_mem(&a, q->mem);
    kd_ocl_arg_mem(&a, r->mem);
    kd_ocl_arg_mem(&a, pcg ? inv_diagonal : NULL);
    kd_ocl_arg_mem(&a, kr->dot_partials);
    if ((rc = kd_ocl_args_end(&a, name, err)) != KD_OK)
        return rc;
    return kd_krylov_launch(kr, kernel, kr->groups, name, err);
}

static int kd_krylov_update_merged(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                                   kd_multivec_t *x, kd_multivec_t *d, cl_mem inv_diagonal,
                                   int64_t iteration, kd_err_t *err)
{
    cl_kernel kernel;
    int rc = kd_krylov_kernel(kr, "kd_krylov_update_merged", &kernel, err);
    if (rc != KD_OK)
        return rc;
    const int pcg = kr->method == KD_KRYLOV_PCG;
    kd_ocl_args_t a = kd_ocl_args_begin(kernel);
    kd_ocl_arg_int(&a, (cl_int)kr->n);
    kd_ocl_arg_int(&a, (cl_int)kr->ld);
    kd_ocl_arg_int(&a, (cl_int)kr->groups);
    kd_ocl_arg_int(&a, pcg);
    kd_ocl_arg_int(&a, kr->with_rq);
    kd_ocl_arg_long(&a, (cl_long)iteration);
    kd_ocl_arg_int(&a, kd_krylov_parity(iteration - 1));
    kd_ocl_arg_mem(&a, kr->threshold);
    kd_ocl_arg_mem(&a, kr->limits);
    kd_ocl_arg_mem(&a, kr->dot_partials);
    kd_ocl_arg_mem(&a, kr->res_partials);
    kd_ocl_arg_mem(&a, kr->scalars);
    kd_ocl_arg_mem(&a, kr->state);
    kd_ocl_arg_mem(&a, q->mem);
    kd_ocl_arg_mem(&a, r->mem);
    kd_ocl_arg_mem(&a, x->mem);
    kd_ocl_arg_mem(&a, d->mem);
    kd_ocl_arg_mem(&a, pcg ? inv_diagonal : NULL);
    if ((rc = kd_ocl_args_end(&a, "kd_krylov_update_merged", err)) != KD_OK)
        return rc;
    return kd_krylov_launch(kr, kernel, kr->groups, "kd_krylov_update_merged", err);
}

int kd_krylov_iterate(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r, kd_multivec_t *x,
                      kd_multivec_t *d, cl_mem inv_diagonal, int64_t iteration, kd_err_t *err)
{
    const int sd = kr->method == KD_KRYLOV_SD;
    const kd_multivec_t *p = sd ? r : d;
    int rc;
    if ((rc = kd_krylov_check(kr, q, "iterate", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, r, "iterate", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, x, "iterate", err)) != KD_OK ||
        (!sd && (rc = kd_krylov_check(kr, d, "iterate", err)) != KD_OK))
        return rc;
    if (kr->method == KD_KRYLOV_PCG && inv_diagonal == NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: pcg without an inverse diagonal");
    if (kr->passes == 2) {
        rc = kd_krylov_dots3(kr, NULL, p, q, r, inv_diagonal, iteration, err);
        if (rc == KD_OK)
            rc = kd_krylov_update_merged(kr, q, r, x, d, inv_diagonal, iteration, err);
        return rc;
    }
    rc = kd_krylov_dots(kr, p, q, iteration, err);
    if (rc == KD_OK)
        rc = kd_krylov_update_residual(kr, q, r, x, inv_diagonal, iteration, err);
    if (rc == KD_OK)
        rc = kd_krylov_update_direction(kr, r, inv_diagonal, sd ? NULL : x, sd ? NULL : d,
                                        iteration, err);
    return rc;
}

int kd_krylov_iterate_csr(kd_krylov_t *kr, const kd_format_csr_t *A, kd_multivec_t *q,
                          kd_multivec_t *r, kd_multivec_t *x, kd_multivec_t *d, cl_mem inv_diagonal,
                          int64_t iteration, kd_err_t *err)
{
    const int sd = kr->method == KD_KRYLOV_SD;
    int rc;
    if ((rc = kd_krylov_check(kr, q, "iterate_csr", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, r, "iterate_csr", err)) != KD_OK ||
        (rc = kd_krylov_check(kr, x, "iterate_csr", err)) != KD_OK ||
        (!sd && (rc = kd_krylov_check(kr, d, "iterate_csr", err)) != KD_OK))
        return rc;
    if (kr->method == KD_KRYLOV_PCG && inv_diagonal == NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: pcg without an inverse diagonal");
    if ((rc = kd_krylov_dots3(kr, A, sd ? r : d, q, r, inv_diagonal, iteration, err)) != KD_OK)
        return rc;
    if (kr->passes == 2)
        return kd_krylov_update_merged(kr, q, r, x, d, inv_diagonal, iteration, err);
    rc = kd_krylov_update_residual(kr, q, r, x, inv_diagonal, iteration, err);
    if (rc == KD_OK)
        rc = kd_krylov_update_direction(kr, r, inv_diagonal, sd ? NULL : x, sd ? NULL : d,
                                        iteration, err);
    return rc;
}
