/*
 * Host side of the lock-step Krylov kernels (see krylov.h and kernels/methods/krylov.cl): buffers,
 * launch shapes and arguments. Every launch is a 2-D range (groups * WG, k) in groups of
 * (WG, 1); dimension 1 is the column; every kernel takes the launch block of krylov_abi.h first.
 *
 * Groups per column G: one wave of work-groups over all k columns (four per compute unit on a
 * GPU, eight on a CPU, divided by k and rounded up), at most KD_KRYLOV_GROUPS_MAX and at most
 * one group per WG elements.
 * G depends only on n, k and the device, which keeps results reproducible bit for bit; the
 * consumer of a reduction reads G partials per work-group, so a smaller G also makes the fused
 * finals cheaper.
 */
#include "solver/methods/krylov.h"
#include "common/checked.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_KRYLOV_GROUPS_MAX 1024

static int kd_krylov_parity(int64_t iteration)
{
    return (int)(iteration & 1);
}

/* The launch block of a pass of iteration `iteration` that reads state copy `parity`. */
static kd_krylov_launch_t kd_krylov_block(const kd_krylov_t *kr, int64_t iteration, int parity,
                                          int ops)
{
    kd_krylov_launch_t L;
    memset(&L, 0, sizeof(L));
    L.iteration = iteration;
    L.n = (kd_abi_i32)kr->n;
    L.ld = (kd_abi_i32)kr->ld;
    L.groups = (kd_abi_i32)kr->groups;
    L.parity = parity;
    L.ops = ops;
    return L;
}

/* Launch kernel `name` of kernels/<program>.cl over `groups` work-groups per column, all k
 * columns. */
static int kd_krylov_run(kd_krylov_t *kr, const char *program, const char *name, size_t groups,
                         const kd_ocl_arg_t *args, size_t nargs, cl_event *event, kd_err_t *err)
{
    cl_kernel kernel;
    int rc = kd_ocl_kernel(kr->ocl, program, kr->dtype, kr->options, name, &kernel, err);
    if (rc != KD_OK)
        return rc;
    const size_t wg = kr->work_group_size;
    rc = kd_ocl_run(kr->ocl, kernel, name, kd_ocl_range_2d(groups * wg, (size_t)kr->k, wg, 1), args,
                    nargs, event, err);
    if (rc != KD_OK)
        kd_err_prefix(err, "%lld columns", (long long)kr->k);
    return rc;
}

/* Every Krylov kernel takes its launch block first. */
#define KD_KRYLOV_RUN(kr, name, groups, block, err, ...)                                           \
    kd_krylov_run((kr), "krylov", (name), (groups),                                                \
                  KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(block), __VA_ARGS__), NULL, (err))

/* A pass left partial sums for kd_krylov_reduce (recorded only when spread over ranks). */
static void kd_krylov_left(kd_krylov_t *kr, int res, int set, int sums, int fresh, int parity)
{
    if (kr->comm == NULL)
        return;
    if (kr->npending == KD_KRYLOV_PENDING_MAX) {
        kr->pending_unknown = 1;
        return;
    }
    kr->pending[kr->npending++] = (kd_krylov_pending_t){res, set, sums, fresh, parity};
}

int kd_krylov_launch(kd_krylov_t *kr, const char *program, const char *name,
                     const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err)
{
    assert(kr != NULL && program != NULL && name != NULL && nargs > 0);
    assert(nargs > 9 && args[0].size == sizeof(cl_long));
    kr->pending_unknown |= kr->comm != NULL;
    return kd_krylov_run(kr, program, name, kr->groups, args, nargs, NULL, err);
}

int kd_krylov_launch_update(kd_krylov_t *kr, const char *program, const char *name,
                            int64_t iteration, const kd_ocl_arg_t *args, size_t nargs,
                            kd_err_t *err)
{
    assert(kr != NULL && program != NULL && name != NULL && nargs > 9);
    const int b = kd_krylov_parity(iteration);
    kd_krylov_left(kr, 1, b, KD_KRYLOV_RES_SUMS, KD_KRYLOV_FRESH_ALPHA, b);
    return kd_krylov_run(kr, program, name, kr->groups, args, nargs, NULL, err);
}

int kd_krylov_launch_groups(kd_krylov_t *kr, const char *program, const char *name, size_t groups,
                            const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err)
{
    assert(kr != NULL && program != NULL && name != NULL && groups > 0);
    assert(nargs > 9 && args[0].size == sizeof(cl_long));
    kr->pending_unknown |= kr->comm != NULL;
    return kd_krylov_run(kr, program, name, groups, args, nargs, NULL, err);
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

#define KD_KRYLOV_GROUPS_PER_COLUMN_MIN 64 /* on a GPU, whatever the column count */

int kd_krylov_init(kd_ocl_t *ocl, kd_dtype_t dtype, int64_t n, int64_t ld, int64_t k,
                   int64_t groups, const double *threshold, int64_t limit, cl_mem diagonal,
                   const char *build_options, kd_krylov_t *kr, kd_err_t *err)
{
    assert(ocl != NULL && threshold != NULL && kr != NULL);
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
    kr->diagonal = diagonal;
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
    /* With many columns one wave left each column too few groups to keep its streams in
     * flight: at k = 32 on the H200 (17 a column) CG ran at 70% of its byte floor, at 66 a column
     * 84% (PCG 82% -> 97%; bench/results/issue16/run6-k32-groups.txt). */
    if (groups <= 0 && kd_ocl_desc(ocl)->is_gpu && g < KD_KRYLOV_GROUPS_PER_COLUMN_MIN)
        g = KD_KRYLOV_GROUPS_PER_COLUMN_MIN;
    size_t per_elements = ((size_t)n + kr->work_group_size - 1) / kr->work_group_size;
    if (g > per_elements)
        g = per_elements;
    if (g > KD_KRYLOV_GROUPS_MAX)
        g = KD_KRYLOV_GROUPS_MAX;
    kr->groups = g == 0 ? 1 : g;
    const char *extra = build_options != NULL ? build_options : "";
    snprintf(kr->options, sizeof(kr->options), "-DKD_WG_SIZE=%zu%s%s", kr->work_group_size,
             extra[0] != '\0' ? " " : "", extra);

    const size_t count = (size_t)k * kr->groups;
    if ((rc = kd_krylov_buffer(kr, KD_KRYLOV_DOTS * count, vsize, "dot partial sums",
                               &kr->dot_partials, err)) ||
        (rc = kd_krylov_buffer(kr, KD_KRYLOV_RES_SETS * KD_KRYLOV_RES_SUMS * count, vsize,
                               "residual partial sums", &kr->res_partials, err)) ||
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
        if ((rc = kd_krylov_buffer(kr, (size_t)k, sizeof(kd_krylov_snapshot_row_t),
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
    const char *call = "clEnqueueWriteBuffer";
    cl_int st =
        kd_ocl_enqueue_write(q, kr->threshold, CL_TRUE, 0, (size_t)k * vsize, host, 0, NULL, NULL);
    free(host);
    if (st == CL_SUCCESS) {
        call = "clEnqueueFillBuffer";
        st = clEnqueueFillBuffer(q, kr->scalars, &zero, vsize, 0,
                                 2 * (size_t)k * KD_KRYLOV_SLOTS * vsize, 0, NULL, NULL);
    }
    if (st == CL_SUCCESS)
        st = clEnqueueFillBuffer(q, kr->state, &zero, sizeof(zero), 0,
                                 4 * (size_t)k * sizeof(cl_long), 0, NULL, NULL);
    if (st == CL_SUCCESS)
        st = clEnqueueFillBuffer(q, kr->limits, &limit64, sizeof(limit64), 0,
                                 (size_t)k * sizeof(cl_long), 0, NULL, NULL);
    if (st != CL_SUCCESS) {
        rc = kd_ocl_fail(err, st, call);
        kd_err_prefix(err, "initialising the solver scalars");
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
    free(kr->mask_host);
    if (kr->combine_host != NULL && kr->ocl != NULL) /* a combine's write may still read it */
        (void)clFinish(kd_ocl_queue(kr->ocl));
    free(kr->combine_host);
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        if (*bufs[i] != NULL)
            clReleaseMemObject(*bufs[i]);
    memset(kr, 0, sizeof(*kr));
}

static int kd_krylov_check(const kd_krylov_t *kr, const kd_multivec_t *v, const char *what,
                           kd_err_t *err)
{
    if (v == NULL || v->n != kr->n || v->ld != kr->ld || v->k != kr->k || v->dtype != kr->dtype)
        return kd_err_set(err, KD_EINTERNAL, "krylov %s: vectors of another shape or type", what);
    return KD_OK;
}

/* KD_OK when each of the count vectors has kr's shape and type. */
static int kd_krylov_check_all(const kd_krylov_t *kr, const char *what,
                               const kd_multivec_t *const *vectors, int count, kd_err_t *err)
{
    int rc = KD_OK;
    for (int i = 0; rc == KD_OK && i < count; i++)
        rc = kd_krylov_check(kr, vectors[i], what, err);
    return rc;
}

#define KD_KRYLOV_CHECK(kr, what, err, ...)                                                        \
    kd_krylov_check_all(                                                                           \
        (kr), (what), (const kd_multivec_t *[]){__VA_ARGS__},                                      \
        (int)(sizeof((const kd_multivec_t *[]){__VA_ARGS__}) / sizeof(kd_multivec_t *)), (err))

/* The bits every pass forming z = M^-1 r adds. */
static int kd_krylov_ops(const kd_krylov_t *kr, int ops)
{
    return ops | (kr->diagonal != NULL ? KD_KRYLOV_OP_DIAGONAL : 0) |
           (kr->operator_z != NULL ? KD_KRYLOV_OP_OPERATOR : 0);
}

/* What a pass reading z takes in its inv_diagonal argument: 1/a_ii, or the operator's z. */
static cl_mem kd_krylov_z_source(const kd_krylov_t *kr, int ops)
{
    if ((ops & KD_KRYLOV_OP_DIAGONAL) != 0)
        return kr->diagonal;
    return (ops & KD_KRYLOV_OP_OPERATOR) != 0 ? kr->operator_z : NULL;
}

kd_krylov_launch_t kd_krylov_pass_block(const kd_krylov_t *kr, int64_t iteration, int ops)
{
    assert(kr != NULL && iteration >= 1);
    return kd_krylov_block(kr, iteration, kd_krylov_parity(iteration - 1), kd_krylov_ops(kr, ops));
}

int kd_krylov_reduce(kd_krylov_t *kr, const char *what, kd_err_t *err)
{
    assert(kr != NULL && what != NULL);
    kr->reductions++;
    return kr->comm != NULL ? kd_krylov_combine(kr, what, err) : KD_OK;
}

int kd_krylov_dots(kd_krylov_t *kr, const kd_multivec_t *p, const kd_multivec_t *q,
                   int64_t iteration, kd_err_t *err)
{
    int rc = KD_KRYLOV_CHECK(kr, "dots", err, p, q);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_block(kr, iteration, kd_krylov_parity(iteration - 1), 0);
    kd_krylov_left(kr, 0, 0, 1, KD_KRYLOV_FRESH_ALL, 0);
    return KD_KRYLOV_RUN(kr, "kd_krylov_dots", kr->groups, L, err, KD_ARG_MEM(kr->state),
                         KD_ARG_MEM(p->mem), KD_ARG_MEM(q->mem), KD_ARG_MEM(kr->dot_partials));
}

int kd_krylov_update_residual(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                              kd_multivec_t *x, int ops, int64_t iteration, kd_err_t *err)
{
    int rc = KD_KRYLOV_CHECK(kr, "update_residual", err, q, r, x);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, iteration, ops);
    const int b = kd_krylov_parity(iteration); /* the copy and the set it writes */
    kd_krylov_left(kr, 1, b, KD_KRYLOV_RES_SUMS, KD_KRYLOV_FRESH_ALPHA, b);
    return KD_KRYLOV_RUN(
        kr, "kd_krylov_update_residual", kr->groups, L, err, KD_ARG_MEM(kr->threshold),
        KD_ARG_MEM(kr->limits), KD_ARG_MEM(kr->dot_partials), KD_ARG_MEM(kr->scalars),
        KD_ARG_MEM(kr->state), KD_ARG_MEM(q->mem), KD_ARG_MEM(r->mem), KD_ARG_MEM(x->mem),
        KD_ARG_MEM(kr->diagonal), KD_ARG_MEM(kr->res_partials));
}

int kd_krylov_update_direction(kd_krylov_t *kr, const kd_multivec_t *r, kd_multivec_t *x,
                               kd_multivec_t *d, int ops, int64_t iteration, kd_err_t *err)
{
    int rc;
    const int along_r = (ops & KD_KRYLOV_OP_ALONG_R) != 0;
    if ((rc = kd_krylov_check(kr, r, "update_direction", err)) != KD_OK ||
        (!along_r && (rc = kd_krylov_check(kr, x, "update_direction", err)) != KD_OK) ||
        (!along_r && (rc = kd_krylov_check(kr, d, "update_direction", err)) != KD_OK))
        return rc;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, iteration, ops);
    /* Along r only r'r is folded: one group per column does. */
    return KD_KRYLOV_RUN(kr, "kd_krylov_update_direction", along_r ? 1 : kr->groups, L, err,
                         KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->state),
                         KD_ARG_MEM(kr->res_partials), KD_ARG_MEM(r->mem),
                         KD_ARG_MEM(kd_krylov_z_source(kr, L.ops)),
                         KD_ARG_MEM(along_r ? NULL : x->mem), KD_ARG_MEM(along_r ? NULL : d->mem));
}

static int kd_krylov_write_mask(kd_krylov_t *kr, const int *mask, kd_err_t *err)
{
    if (kr->comm != NULL) { /* which columns the residual partials will be new for */
        if (kr->mask_host == NULL && (kr->mask_host = calloc((size_t)kr->k, sizeof(int))) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld masks",
                              (long long)kr->k);
        memcpy(kr->mask_host, mask, (size_t)kr->k * sizeof(int));
    }
    cl_int st = kd_ocl_enqueue_write(kd_ocl_queue(kr->ocl), kr->mask, CL_TRUE, 0,
                                     (size_t)kr->k * sizeof(cl_int), mask, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (column masks)");
}

/* The partials of r'r (and r'z with a diagonal) of the masked columns into set `set`, d = z
 * where asked; then one group per column folds them as `mode` says. */
static int kd_krylov_residual_sums(kd_krylov_t *kr, const kd_multivec_t *r, int ops,
                                   kd_multivec_t *d, int set, int mode, int use_mask, int mask_all,
                                   int64_t iteration, kd_err_t *err)
{
    kd_krylov_launch_t L = kd_krylov_block(kr, iteration, kd_krylov_parity(iteration), ops);
    L.set = set;
    L.mode = mode;
    L.mask_all = mask_all;
    cl_mem mask = use_mask ? kr->mask : NULL;
    cl_mem diagonal = kd_krylov_z_source(kr, ops);
    kr->mask_given = use_mask;
    kr->mask_all = mask_all;
    kd_krylov_left(kr, 1, set, KD_KRYLOV_RES_SUMS, KD_KRYLOV_FRESH_MASK, 0);
    int rc = KD_KRYLOV_RUN(kr, "kd_krylov_residual_partials", kr->groups, L, err, KD_ARG_MEM(mask),
                           KD_ARG_MEM(r->mem), KD_ARG_MEM(diagonal),
                           KD_ARG_MEM(d != NULL ? d->mem : NULL), KD_ARG_MEM(kr->res_partials));
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, mode == KD_KRYLOV_FINAL_NORMS ? "t't" : "r'r, r'z", err);
    if (rc == KD_OK)
        rc = KD_KRYLOV_RUN(kr, "kd_krylov_residual_final", 1, L, err, KD_ARG_MEM(mask),
                           KD_ARG_MEM(kr->res_partials), KD_ARG_MEM(kr->scalars),
                           KD_ARG_MEM(kr->state), KD_ARG_MEM(kr->norms));
    return rc;
}

int kd_krylov_residual(kd_krylov_t *kr, const kd_multivec_t *r, kd_multivec_t *d, const int *mask,
                       int mask_all, int64_t iteration, kd_err_t *err)
{
    int rc = kd_krylov_check(kr, r, "residual", err);
    if (rc == KD_OK && d != NULL)
        rc = kd_krylov_check(kr, d, "residual", err);
    if (rc != KD_OK)
        return rc;
    if (mask != NULL && (rc = kd_krylov_write_mask(kr, mask, err)) != KD_OK)
        return rc;
    if (d == NULL)
        mask_all &= ~KD_KRYLOV_MASK_DIRECTION;
    return kd_krylov_residual_sums(kr, r, kd_krylov_ops(kr, 0), d, kd_krylov_parity(iteration),
                                   KD_KRYLOV_FINAL_SCALARS, mask != NULL, mask_all, iteration, err);
}

int kd_krylov_operator_sums(kd_krylov_t *kr, const kd_multivec_t *r, int64_t iteration,
                            kd_err_t *err)
{
    int rc = kd_krylov_check(kr, r, "operator_sums", err);
    if (rc != KD_OK)
        return rc;
    if (kr->operator_z == NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: operator_sums without an operator's z");
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, iteration, 0);
    L.set = kd_krylov_parity(iteration); /* where update_residual left r'r */
    L.mask_all = KD_KRYLOV_MASK_PARTIALS;
    /* it rewrites the r'r update_residual left: that record gives way to this one */
    if (kr->npending > 0 && kr->pending[kr->npending - 1].res == 1)
        kr->npending--;
    kd_krylov_left(kr, 1, L.set, KD_KRYLOV_RES_SUMS, KD_KRYLOV_FRESH_ALL, 0);
    return KD_KRYLOV_RUN(kr, "kd_krylov_residual_partials", kr->groups, L, err,
                         KD_ARG_MEM((cl_mem)NULL), KD_ARG_MEM(r->mem), KD_ARG_MEM(kr->operator_z),
                         KD_ARG_MEM((cl_mem)NULL), KD_ARG_MEM(kr->res_partials));
}

int kd_krylov_norms(kd_krylov_t *kr, const kd_multivec_t *t, const int *mask, double *out,
                    kd_err_t *err)
{
    int rc = kd_krylov_check(kr, t, "norms", err);
    if (rc != KD_OK)
        return rc;
    if (mask != NULL && (rc = kd_krylov_write_mask(kr, mask, err)) != KD_OK)
        return rc;
    if ((rc = kd_krylov_residual_sums(kr, t, 0, NULL, KD_KRYLOV_NORMS_SET, KD_KRYLOV_FINAL_NORMS,
                                      mask != NULL, KD_KRYLOV_MASK_PARTIALS, 0, err)) != KD_OK)
        return rc;
    const size_t vsize = kd_dtype_size(kr->dtype);
    unsigned char *host = malloc((size_t)kr->k * vsize);
    if (host == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld norms", (long long)kr->k);
    cl_int st = kd_ocl_enqueue_read(kd_ocl_queue(kr->ocl), kr->norms, CL_TRUE, 0,
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
    snap->raw = malloc((size_t)kr->k * sizeof(*snap->raw));
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
    const size_t bytes = (size_t)kr->k * sizeof(kd_krylov_snapshot_row_t);
    if (snap->done != NULL)
        return kd_err_set(err, KD_EINTERNAL, "krylov: a snapshot read is still pending");
    /* Spread over ranks, a method whose last pass left partial sums for its next iteration's
     * reduction (cg1's r'r) would have each rank's snapshot fold its own share: combine them
     * now, so every rank reads the same norms (the next reduction then has less to do). */
    if (kr->comm != NULL && kr->npending > 0) {
        int rc = kd_krylov_reduce(kr, "the partial sums a check reads", err);
        if (rc != KD_OK)
            return rc;
    }
    kd_krylov_launch_t L =
        kd_krylov_block(kr, iteration, kd_krylov_parity(iteration),
                        kd_krylov_ops(kr, kr->fold_snapshots ? KD_KRYLOV_OP_FOLD : 0));
    cl_command_queue q = kd_ocl_queue(kr->ocl);
    cl_event packed = NULL;
    int rc = kd_krylov_run(kr, "krylov", "kd_krylov_snapshot", 1,
                           KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kr->res_partials),
                                   KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->state),
                                   KD_ARG_MEM(kr->snapshot_slots[snap->slot])),
                           &packed, err);
    if (rc != KD_OK)
        return rc;
    const char *call = "clFlush";
    cl_int st = clFlush(q);
    if (st == CL_SUCCESS) {
        call = "clEnqueueReadBuffer";
        st = kd_ocl_enqueue_read(kr->read_queue, kr->snapshot_slots[snap->slot], CL_FALSE, 0, bytes,
                                 snap->raw, 1, &packed, &snap->done);
    }
    if (st == CL_SUCCESS) {
        call = "clFlush";
        st = clFlush(kr->read_queue);
    }
    if (packed != NULL)
        clReleaseEvent(packed);
    if (st != CL_SUCCESS) {
        /* A read may still be writing into the snapshot: drain before anyone frees it. */
        (void)clFinish(q);
        (void)clFinish(kr->read_queue);
        if (snap->done != NULL)
            clReleaseEvent(snap->done);
        snap->done = NULL;
        kd_ocl_fail(err, st, call);
        return kd_err_prefix(err, "reading the solver state");
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
        const kd_krylov_snapshot_row_t *row = &snap->raw[c];
        double v[KD_KRYLOV_SLOTS];
        for (int j = 0; j < KD_KRYLOV_SLOTS; j++) {
            if (kr->dtype == KD_DTYPE_F64) {
                memcpy(&v[j], &row->bits[j], sizeof(double));
            } else {
                uint32_t bits = (uint32_t)row->bits[j];
                float f;
                memcpy(&f, &bits, sizeof(f));
                v[j] = f;
            }
        }
        out[c].status = (int)row->status;
        out[c].iteration = (int64_t)row->iteration;
        out[c].rr = v[KD_KRYLOV_SLOT_RR];
        out[c].rz = v[KD_KRYLOV_SLOT_RZ];
        out[c].pq = v[KD_KRYLOV_SLOT_PQ];
        out[c].alpha = v[KD_KRYLOV_SLOT_ALPHA];
        out[c].beta = v[KD_KRYLOV_SLOT_BETA];
        out[c].fail = v[KD_KRYLOV_SLOT_FAIL];
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
    cl_int st = kd_ocl_enqueue_write(kd_ocl_queue(kr->ocl), kr->limits, CL_TRUE,
                                     (size_t)c * sizeof(word), sizeof(word), &word, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (limits)");
}

int kd_krylov_stop(kd_krylov_t *kr, int64_t c, int64_t iteration, kd_err_t *err)
{
    cl_long word[2] = {KD_KRYLOV_STOPPED, (cl_long)iteration};
    size_t offset =
        ((size_t)kd_krylov_parity(iteration) * (size_t)kr->k + (size_t)c) * sizeof(word);
    cl_int st = kd_ocl_enqueue_write(kd_ocl_queue(kr->ocl), kr->state, CL_TRUE, offset,
                                     sizeof(word), word, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueWriteBuffer (solver state)");
}

int kd_krylov_dots3(kd_krylov_t *kr, const kd_format_csr_t *A, const kd_multivec_t *p,
                    kd_multivec_t *q, const kd_multivec_t *r, int ops, int64_t iteration,
                    kd_err_t *err)
{
    int rc = KD_KRYLOV_CHECK(kr, "dots3", err, p, q, r);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_block(kr, iteration, kd_krylov_parity(iteration - 1), ops);
    cl_mem diagonal = (ops & KD_KRYLOV_OP_DIAGONAL) != 0 ? kr->diagonal : NULL;
    kd_krylov_left(kr, 0, 0, KD_KRYLOV_DOTS, KD_KRYLOV_FRESH_ALL, 0);
    if (A == NULL)
        return KD_KRYLOV_RUN(kr, "kd_krylov_dots3", kr->groups, L, err, KD_ARG_MEM(kr->state),
                             KD_ARG_MEM(p->mem), KD_ARG_MEM(q->mem), KD_ARG_MEM(r->mem),
                             KD_ARG_MEM(diagonal), KD_ARG_MEM(kr->dot_partials));
    return KD_KRYLOV_RUN(kr, "kd_krylov_csr_spmv_dots3", kr->groups, L, err, KD_ARG_MEM(kr->state),
                         KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices), KD_ARG_MEM(A->values),
                         KD_ARG_MEM(p->mem), KD_ARG_MEM(q->mem), KD_ARG_MEM(r->mem),
                         KD_ARG_MEM(diagonal), KD_ARG_MEM(kr->dot_partials));
}

int kd_krylov_update_merged(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                            kd_multivec_t *x, kd_multivec_t *d, int ops, int64_t iteration,
                            kd_err_t *err)
{
    int rc = KD_KRYLOV_CHECK(kr, "update_merged", err, q, r, x, d);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, iteration, ops);
    const int b = kd_krylov_parity(iteration);
    kd_krylov_left(kr, 1, b, KD_KRYLOV_RES_SUMS, KD_KRYLOV_FRESH_ALPHA, b);
    return KD_KRYLOV_RUN(
        kr, "kd_krylov_update_merged", kr->groups, L, err, KD_ARG_MEM(kr->threshold),
        KD_ARG_MEM(kr->limits), KD_ARG_MEM(kr->dot_partials), KD_ARG_MEM(kr->res_partials),
        KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->state), KD_ARG_MEM(q->mem), KD_ARG_MEM(r->mem),
        KD_ARG_MEM(x->mem), KD_ARG_MEM(d->mem), KD_ARG_MEM(kr->diagonal));
}
