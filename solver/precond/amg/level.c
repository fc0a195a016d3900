/*
 * One level of the AMG hierarchy on the device, and the steps that every part of it shares
 * (cycle.h): a kernel launch of kernels/precond/amg/amg.cl, the lanes per row of the fused kernels,
 * the Chebyshev smoother, a level's 1/a_ii, vectors and lambda_max (Lanczos), the coarsest level's
 * dense inverse, and the Galerkin products' operands and numeric phase. The setup and the
 * straightforward V-cycle (amg.c), the fused V-cycle (fused.c), its tail (tail.c) and the device
 * refresh (refresh.c) call down into it; it calls none of them.
 */
#include "solver/precond/amg/cycle.h"
#include "solver/blas.h"
#include "solver/formats/format.h"
#include "solver/precond/chebyshev.h"

#include "common/checked.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kd_amg_test_gpu_lanes = 0;

void kd_amg_test_set_gpu_lanes(int on)
{
    kd_amg_test_gpu_lanes = on;
}

int kd_amg_lanes(const kd_amg_t *amg, double mean)
{
    int lanes = 1;
    while (amg->gpu_lanes && lanes < 64 && (double)lanes < mean)
        lanes *= 2;
    while ((size_t)lanes > amg->wg && lanes > 1)
        lanes /= 2;
    return lanes;
}
/* A host vector of n values of dtype into a new device buffer. */
int kd_amg_upload_values(kd_ocl_t *ocl, const void *values, int64_t n, kd_dtype_t dtype,
                         const char *what, cl_mem *out, kd_err_t *err)
{
    size_t bytes;
    if (kd_mul_overflow((size_t)n, kd_dtype_size(dtype), &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "amg: %s is too large", what);
    return kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)values,
                                what, out, err);
}

int kd_amg_launch(kd_ocl_t *ocl, kd_amg_t *amg, const char *name, int lanes, size_t global,
                  size_t local, const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err)
{
    char options[48];
    if (lanes > 0)
        snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu -DKD_TPR=%d", amg->wg, lanes);
    else
        snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu", amg->wg);
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, "amg", amg->dtype, options, name, &kernel, err);
    if (rc != KD_OK)
        return rc;
    return kd_ocl_run(ocl, kernel, name, kd_ocl_range_1d(global, local), args, nargs, NULL, err);
}

size_t kd_amg_global(const kd_amg_t *amg, int64_t n)
{
    return ((size_t)n + amg->wg - 1) / amg->wg * amg->wg;
}

void kd_amg_chebyshev_coefficients(const kd_amg_t *amg, const kd_amg_level_t *L, int step,
                                   double *c_d, double *c_r)
{
    kd_chebyshev_coefficients(amg->opt.lower * L->lambda, amg->opt.upper * L->lambda, step, c_d,
                              c_r);
}

int kd_amg_steps(const kd_amg_t *amg, int l)
{
    return l == amg->levels - 1 ? 4 * amg->opt.degree : amg->opt.degree;
}

int kd_amg_smooth(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, const kd_vec_t *b, kd_vec_t *x,
                  int from_zero, int degree, kd_err_t *err)
{
    int rc = KD_OK;
    for (int step = 0; step < degree && rc == KD_OK; step++) {
        const int zero = from_zero && step == 0;
        if (!zero && (rc = kd_matrix_spmv_inner(ocl, L->A, 1.0, x, 0.0, &L->q, err)) != KD_OK)
            break;
        double c_d, c_r;
        kd_amg_chebyshev_coefficients(amg, L, step, &c_d, &c_r);
        rc = kd_amg_launch(ocl, amg, "kd_amg_chebyshev", 0, kd_amg_global(amg, L->n), amg->wg,
                           KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(zero), KD_ARG_INT(step == 0),
                                   KD_ARG_VALUE(amg->dtype, c_d), KD_ARG_VALUE(amg->dtype, c_r),
                                   KD_ARG_MEM(b->mem), KD_ARG_MEM(L->q.mem),
                                   KD_ARG_MEM(L->inv_diagonal), KD_ARG_MEM(L->d.mem),
                                   KD_ARG_MEM(x->mem)),
                           err);
    }
    return rc;
}

/* lambda_max(D^-1 A) of level L: Lanczos on S = D^-1/2 A D^-1/2 from a fixed pseudo-random
 * start, the largest Ritz value. Every step runs on the device (kernels/precond/amg/amg.cl, the
 * kd_amg_lanczos_* kernels: the reductions land in the BLAS scalars' slots and each step's alpha
 * and beta in a small buffer), and the host reads the steps' scalars once at the end: a step that
 * asked the host for alpha and beta cost two round trips, 96 of them a 4-level hierarchy. The
 * first breakdown (beta ~ 0: an invariant subspace, the Ritz values exact) ends the tridiagonal
 * the host uses; the steps after it are ignored. L->inv_diagonal is 1/a_ii on the device. */
static int kd_amg_estimate(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, kd_err_t *err)
{
    const int64_t n = L->n;
    int steps = amg->opt.lanczos_steps < 64 ? amg->opt.lanczos_steps : 64;
    if (steps > n)
        steps = (int)n;
    const size_t vsize = kd_dtype_size(amg->dtype), global = kd_amg_global(amg, n);
    kd_blas_t blas = {0};
    kd_vec_t v = {0}, v_prev = {0}, w = {0}, t = {0}, sqrt_dinv = {0};
    cl_mem ab = NULL;
    double alpha[64], beta[64];
    unsigned char host[2 * 64 * 8];
    int rc = kd_blas_init(ocl, amg->dtype, &blas, err);
    kd_vec_t *vecs[] = {&v, &v_prev, &w, &t, &sqrt_dinv};
    for (int i = 0; i < 5 && rc == KD_OK; i++)
        rc = kd_vec_alloc(ocl, n, amg->dtype, vecs[i], err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, (size_t)(2 * steps) * vsize,
                                  NULL, "amg Lanczos scalars", &ab, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_lanczos_start", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(L->inv_diagonal),
                                   KD_ARG_MEM(sqrt_dinv.mem), KD_ARG_MEM(v.mem)),
                           err);
    if (rc == KD_OK)
        rc = kd_vec_fill(ocl, &v_prev, 0.0, err);
    if (rc == KD_OK)
        rc = kd_blas_dot_to(&blas, &v, &v, KD_BLAS_SLOT_1, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_lanczos_norm", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(blas.scalars), KD_ARG_MEM(v.mem)),
                           err);
    for (int j = 0; j < steps && rc == KD_OK; j++) {
        rc = kd_amg_launch(ocl, amg, "kd_amg_scale", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(sqrt_dinv.mem), KD_ARG_MEM(v.mem),
                                   KD_ARG_MEM(t.mem)),
                           err);
        if (rc == KD_OK)
            rc = kd_matrix_spmv_inner(ocl, L->A, 1.0, &t, 0.0, &w, err);
        if (rc == KD_OK)
            rc = kd_amg_launch(ocl, amg, "kd_amg_scale", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(sqrt_dinv.mem), KD_ARG_MEM(w.mem),
                                       KD_ARG_MEM(w.mem)),
                               err);
        if (rc == KD_OK)
            rc = kd_blas_dot_to(&blas, &w, &v, KD_BLAS_SLOT_0, err);
        if (rc == KD_OK)
            rc = kd_amg_launch(ocl, amg, "kd_amg_lanczos_update", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_INT(j), KD_ARG_MEM(blas.scalars),
                                       KD_ARG_MEM(ab), KD_ARG_MEM(v.mem), KD_ARG_MEM(v_prev.mem),
                                       KD_ARG_MEM(w.mem)),
                               err);
        if (rc == KD_OK)
            rc = kd_blas_dot_to(&blas, &w, &w, KD_BLAS_SLOT_1, err);
        if (rc == KD_OK)
            rc = kd_amg_launch(ocl, amg, "kd_amg_lanczos_next", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_INT(j), KD_ARG_MEM(blas.scalars),
                                       KD_ARG_MEM(ab), KD_ARG_MEM(w.mem), KD_ARG_MEM(v.mem),
                                       KD_ARG_MEM(v_prev.mem)),
                               err);
    }
    if (rc == KD_OK) {
        cl_int st = kd_ocl_enqueue_read(kd_ocl_queue(ocl), ab, CL_TRUE, 0,
                                        (size_t)(2 * steps) * vsize, host, 0, NULL, NULL);
        if (st != CL_SUCCESS)
            rc = kd_ocl_fail(err, st, "clEnqueueReadBuffer (the Lanczos scalars)");
    }
    int m = 0;
    for (int j = 0; j < steps && rc == KD_OK; j++) {
        const double a = kd_load_real(host, amg->dtype, (size_t)(2 * j)),
                     b = kd_load_real(host, amg->dtype, (size_t)(2 * j + 1));
        alpha[m] = a;
        beta[m] = b;
        m++;
        if (!(b > 1e-12 * fabs(a)) || !isfinite(b))
            break; /* an invariant subspace: the Ritz values are exact */
    }
    if (rc == KD_OK) {
        L->lambda = m > 0 ? kd_amg_tridiagonal_max(alpha, beta, m) : 1.0;
        if (!(L->lambda > 0.0) || !isfinite(L->lambda))
            rc = kd_err_set(err, KD_ENOTSPD,
                            "amg: level %lld rows: D^-1 A has no positive eigenvalue estimate "
                            "(%g): the matrix is not symmetric positive definite",
                            (long long)n, L->lambda);
    }
    for (int i = 0; i < 5; i++)
        kd_vec_release(vecs[i]);
    kd_blas_release(&blas);
    if (ab != NULL)
        clReleaseMemObject(ab);
    return rc;
}

int kd_amg_level_setup(kd_ocl_t *ocl, kd_amg_t *amg, int l, const void *inv_diagonal, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    int rc = kd_amg_upload_values(ocl, inv_diagonal, L->n, amg->dtype, "amg 1/a_ii",
                                  &L->inv_diagonal, err);
    L->lanes_a = kd_amg_lanes(amg, (double)L->nnz / (double)L->n);
    kd_vec_t *vecs[] = {&L->q, &L->d, &L->b, &L->x, &L->x_other};
    for (int i = 0; i < (l == 0 ? 2 : amg->opt.fused ? 5 : 4) && rc == KD_OK; i++)
        rc = kd_vec_alloc(ocl, L->n, amg->dtype, vecs[i], err);
    if (rc == KD_OK)
        rc = kd_amg_estimate(ocl, amg, L, err);
    return rc;
}

/* The coarsest level's dense inverse on the device (or nothing: it is smoothed instead). */
int kd_amg_coarsest(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_t *csr, kd_err_t *err)
{
    const int64_t n = csr->rows;
    amg->coarse_n = n;
    if (n > KD_AMG_DENSE_MAX)
        return KD_OK;
    double *dense = calloc((size_t)(n * n) + 1, sizeof(double));
    void *values = malloc((size_t)(n * n) * kd_dtype_size(amg->dtype) + 1);
    int rc = dense != NULL && values != NULL
                 ? KD_OK
                 : kd_err_set(err, KD_ENOMEM, "amg: out of host memory for the coarsest level");
    if (rc == KD_OK) {
        for (int64_t i = 0; i < n; i++)
            for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
                dense[i * n + csr->indices[k]] = kd_csr_value(csr, k);
        rc = kd_amg_dense_inverse(dense, n, err);
    }
    if (rc == KD_OK) {
        for (int64_t i = 0; i < n * n; i++)
            kd_store_real(values, amg->dtype, (size_t)i, dense[i]);
        rc = kd_amg_upload_values(ocl, values, n * n, amg->dtype, "amg coarsest inverse",
                                  &amg->coarse_inverse, err);
    }
    free(dense);
    free(values);
    return rc;
}

/* m's CSR arrays as an SpGEMM operand: the device arrays of a csr_scalar matrix (the fused
 * levels', P's and R's), retained so kd_csr_device_release leaves m's alone; otherwise host's
 * uploaded (level 0 in another format). */
int kd_amg_operand(kd_ocl_t *ocl, const kd_matrix_t *m, const kd_csr_t *host, kd_csr_device_t *out,
                   kd_err_t *err)
{
    const kd_format_csr_t *arrays = m != NULL ? kd_format_csr_scalar_arrays(m) : NULL;
    if (arrays == NULL)
        return kd_csr_device_upload(ocl, host, out, err);
    *out = (kd_csr_device_t){.rows = host->rows,
                             .cols = host->cols,
                             .nnz = host->nnz,
                             .dtype = host->dtype,
                             .indptr = arrays->indptr,
                             .indices = arrays->indices,
                             .values = arrays->values};
    const cl_mem mems[3] = {out->indptr, out->indices, out->values};
    for (int i = 0; i < 3; i++)
        if (mems[i] != NULL)
            clRetainMemObject(mems[i]);
    return KD_OK;
}

/* dev's pattern (row pointers and columns, retained) into *keep, values NULL. */
void kd_amg_keep_pattern(const kd_csr_device_t *dev, kd_csr_device_t *keep)
{
    if (dev->indptr == NULL) {
        memset(keep, 0, sizeof(*keep));
        return;
    }
    *keep = *dev;
    keep->values = NULL;
    keep->device_bytes = ((size_t)dev->rows + 1 + (size_t)dev->nnz) * sizeof(int32_t);
    if (keep->indptr != NULL)
        clRetainMemObject(keep->indptr);
    if (keep->indices != NULL)
        clRetainMemObject(keep->indices);
}

/* A device CSR on a kept pattern (retained) with values of its own, allocated. */
int kd_amg_on_pattern(kd_ocl_t *ocl, const kd_csr_device_t *pattern, kd_csr_device_t *out,
                      kd_err_t *err)
{
    *out = *pattern;
    out->values = NULL;
    const cl_mem mems[2] = {out->indptr, out->indices};
    for (int i = 0; i < 2; i++)
        if (mems[i] != NULL)
            clRetainMemObject(mems[i]);
    if (out->nnz == 0)
        return KD_OK;
    return kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE,
                                (size_t)out->nnz * kd_dtype_size(out->dtype), NULL,
                                "amg Galerkin values", &out->values, err);
}

/* C = A B on C's pattern (kernels/precond/amg/amg.cl's kd_amg_product). */
int kd_amg_product(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_device_t *A, const kd_csr_device_t *B,
                   kd_csr_device_t *C, kd_err_t *err)
{
    if (C->nnz == 0) /* else A and B have entries: C's pattern is their symbolic product */
        return KD_OK;
    /* a GPU gives each row of C lanes for its columns (R (A P)'s rows have tens of entries, and
     * one work-item a row summed about a thousand products each); one work-item a row else */
    const int lanes = kd_amg_lanes(amg, (double)C->nnz / (double)C->rows);
    if (lanes > 1) {
        size_t global;
        if (kd_mul_overflow((size_t)C->rows, (size_t)lanes, &global))
            return kd_err_set(err, KD_ETOOLARGE, "amg: a Galerkin product of %lld rows",
                              (long long)C->rows);
        return kd_amg_launch(
            ocl, amg, "kd_amg_product_lanes", lanes, (global + amg->wg - 1) / amg->wg * amg->wg,
            amg->wg,
            KD_ARGS(KD_ARG_INT(C->rows), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                    KD_ARG_MEM(A->values), KD_ARG_MEM(B->indptr), KD_ARG_MEM(B->indices),
                    KD_ARG_MEM(B->values), KD_ARG_MEM(C->indptr), KD_ARG_MEM(C->indices),
                    KD_ARG_MEM(C->values)),
            err);
    }
    return kd_amg_launch(ocl, amg, "kd_amg_product", 0, kd_amg_global(amg, C->rows), amg->wg,
                         KD_ARGS(KD_ARG_INT(C->rows), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                                 KD_ARG_MEM(A->values), KD_ARG_MEM(B->indptr),
                                 KD_ARG_MEM(B->indices), KD_ARG_MEM(B->values),
                                 KD_ARG_MEM(C->indptr), KD_ARG_MEM(C->indices),
                                 KD_ARG_MEM(C->values)),
                         err);
}
