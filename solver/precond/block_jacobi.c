/*
 * Block Jacobi: M = the block diagonal of A, blocks of consecutive rows (in the client's
 * numbering), z = M^-1 r by one launch for all columns (kernels/precond/block_jacobi.cl).
 *
 * The blocks: option block_size B (1..16) makes every block B rows, the last one n % B when B
 * does not divide n; without it (or 0) they come from the structure, as PETSc's inodes do:
 * consecutive rows with the same column pattern (a node's unknowns in a finite-element matrix,
 * 3 for 3-D elasticity) form one block, at most 16 rows. Blocks that all have one size (but
 * perhaps the last) take the uniform kernel, others the variable one.
 *
 * Setup, on the host from A's client-order CSR: each dense diagonal block is inverted by LU with
 * partial pivoting in double (a singular or non-finite block is refused, naming its rows) and
 * the inverses go to the device in A's dtype, interleaved for uniform blocks (the kernel's
 * coalescing; see the kernel file). A reordered A (stored as P A P^T, the solve's vectors in
 * its order) keeps the client's blocks: the kernel reaches row i of the client's numbering
 * through the matrix's own iperm (already on the device).
 *
 * M^-1 is symmetric positive definite whenever A is (each diagonal block of an SPD matrix is SPD,
 * and so is its inverse; the reordering is a congruence), so CG may use it.
 */
#include "solver/precond/precond.h"

#include "common/checked.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_BLOCK_JACOBI_MAX 16

static const char *const kd_block_jacobi_option_names[] = {"block_size", NULL};

typedef struct kd_block_jacobi {
    int64_t n, blocks;
    int uniform;    /* every block `uniform` rows (the last perhaps fewer); 0: variable */
    cl_mem inverse; /* uniform: interleaved n * uniform values; variable: the blocks row-major */
    cl_mem block_of_row, block_start, value_start; /* variable only */
    cl_mem map;     /* a reordered A's iperm (the matrix's, not ours): client row -> stored entry */
    int32_t *start; /* host, blocks + 1: each block's first row (what a refresh reuses) */
} kd_block_jacobi_t;

static size_t kd_block_jacobi_plan_bytes(const kd_matrix_t *A)
{
    /* The blocks of a finite-element matrix hold at most its nnz values; uniform blocks n B.
     * Corrected after setup. */
    const int64_t values = A->nnz > A->rows ? A->nnz : A->rows;
    return (size_t)values * kd_dtype_size(A->dtype) + (size_t)A->rows * 16;
}

/* The row count of each block into *start (blocks + 1 offsets, malloc'd): `size` rows each, or
 * (size 0) runs of rows with identical column patterns, at most KD_BLOCK_JACOBI_MAX. */
static int kd_block_jacobi_partition(const kd_csr_t *csr, int size, int32_t **start,
                                     int64_t *blocks, kd_err_t *err)
{
    const int64_t n = csr->rows;
    int32_t *s = kd_malloc_array((size_t)n + 1, sizeof(int32_t));
    if (s == NULL)
        return kd_err_set(err, KD_ENOMEM, "block_jacobi: out of host memory");
    int64_t b = 0;
    for (int64_t i = 0; i < n; i++) {
        int starts = i == 0 || (size > 0 && (i - s[b - 1]) % size == 0);
        if (size == 0 && i > 0) {
            const int32_t len = csr->indptr[i + 1] - csr->indptr[i];
            starts = i - s[b - 1] >= KD_BLOCK_JACOBI_MAX ||
                     len != csr->indptr[i] - csr->indptr[i - 1] ||
                     memcmp(csr->indices + csr->indptr[i], csr->indices + csr->indptr[i - 1],
                            (size_t)len * sizeof(int32_t)) != 0;
        }
        if (starts)
            s[b++] = (int32_t)i;
    }
    s[b] = (int32_t)n;
    *start = s;
    *blocks = b;
    return KD_OK;
}

/* The inverse of the dense m x m block a (row-major, overwritten with it) by LU with partial
 * pivoting; -1 when a pivot is zero against the block's largest entry or a result not finite. */
static int kd_block_jacobi_invert(double *a, int m)
{
    double lu[KD_BLOCK_JACOBI_MAX * KD_BLOCK_JACOBI_MAX];
    int piv[KD_BLOCK_JACOBI_MAX];
    double big = 0.0;
    memcpy(lu, a, (size_t)(m * m) * sizeof(double));
    for (int k = 0; k < m * m; k++)
        big = fmax(big, fabs(lu[k]));
    for (int k = 0; k < m; k++) {
        int p = k;
        for (int i = k + 1; i < m; i++)
            if (fabs(lu[i * m + k]) > fabs(lu[p * m + k]))
                p = i;
        piv[k] = p;
        if (!(fabs(lu[p * m + k]) > (double)m * DBL_EPSILON * big))
            return -1;
        for (int j = 0; j < m && p != k; j++) {
            const double t = lu[k * m + j];
            lu[k * m + j] = lu[p * m + j];
            lu[p * m + j] = t;
        }
        for (int i = k + 1; i < m; i++) {
            const double l = lu[i * m + k] / lu[k * m + k];
            lu[i * m + k] = l;
            for (int j = k + 1; j < m; j++)
                lu[i * m + j] -= l * lu[k * m + j];
        }
    }
    /* Column c of the inverse: solve L U x = P e_c. */
    for (int c = 0; c < m; c++) {
        double x[KD_BLOCK_JACOBI_MAX];
        for (int i = 0; i < m; i++)
            x[i] = i == c ? 1.0 : 0.0;
        for (int k = 0; k < m; k++) {
            const double t = x[k];
            x[k] = x[piv[k]];
            x[piv[k]] = t;
        }
        for (int i = 0; i < m; i++)
            for (int j = 0; j < i; j++)
                x[i] -= lu[i * m + j] * x[j];
        for (int i = m - 1; i >= 0; i--) {
            for (int j = i + 1; j < m; j++)
                x[i] -= lu[i * m + j] * x[j];
            x[i] /= lu[i * m + i];
        }
        for (int i = 0; i < m; i++) {
            if (!isfinite(x[i]))
                return -1;
            a[i * m + c] = x[i];
        }
    }
    return 0;
}

/* Block b's dense inverse into host values (dtype), where the kernel reads it. */
static int kd_block_jacobi_fill(const kd_csr_t *csr, const kd_block_jacobi_t *bj,
                                const int32_t *start, int64_t b, int64_t at, kd_dtype_t dtype,
                                void *values, kd_err_t *err)
{
    const int32_t s = start[b];
    const int m = start[b + 1] - s;
    double a[KD_BLOCK_JACOBI_MAX * KD_BLOCK_JACOBI_MAX] = {0};
    for (int i = 0; i < m; i++)
        for (int32_t k = csr->indptr[s + i]; k < csr->indptr[s + i + 1]; k++) {
            const int32_t j = csr->indices[k];
            if (j >= s && j < s + m)
                a[i * m + (j - s)] = kd_csr_value(csr, k);
        }
    if (kd_block_jacobi_invert(a, m) != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "block_jacobi: the diagonal block of rows %d..%d is singular (or its "
                          "inverse is not finite): block Jacobi inverts every diagonal block",
                          s, s + m - 1);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < m; j++) {
            const size_t k = bj->uniform > 0 ? (size_t)j * (size_t)bj->n + (size_t)(s + i)
                                             : (size_t)at + (size_t)(i * m + j);
            kd_store_real(values, dtype, k, a[i * m + j]);
        }
    return KD_OK;
}

static int kd_block_jacobi_upload(kd_ocl_t *ocl, size_t bytes, void *host, const char *what,
                                  cl_mem *out, kd_precond_t *P, kd_err_t *err)
{
    const int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, host,
                                        what, out, err);
    if (rc == KD_OK)
        P->device_bytes += bytes;
    return rc;
}

/* Where each block's values start (blocks + 1, malloc'd): m^2 a block for variable blocks. */
static int64_t *kd_block_jacobi_value_start(const kd_block_jacobi_t *bj)
{
    int64_t *value_start = kd_malloc_array((size_t)bj->blocks + 1, sizeof(int64_t));
    if (value_start == NULL)
        return NULL;
    value_start[0] = 0;
    for (int64_t b = 0; b < bj->blocks; b++) {
        const int64_t m = bj->start[b + 1] - bj->start[b];
        value_start[b + 1] = value_start[b] + m * m;
    }
    return value_start;
}

/* The blocks' inverses on the device (bj->inverse). */
static int kd_block_jacobi_inverses(kd_ocl_t *ocl, const kd_csr_t *csr, kd_dtype_t dtype,
                                    const int64_t *value_start, kd_block_jacobi_t *bj,
                                    kd_precond_t *P, kd_err_t *err)
{
    const int64_t n = bj->n, nb = bj->blocks;
    const int64_t count = bj->uniform > 0 ? n * bj->uniform : value_start[nb];
    const size_t vsize = kd_dtype_size(dtype), bytes = (size_t)count * vsize;
    void *values = calloc((size_t)count + 1, vsize);
    int rc =
        values != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "block_jacobi: out of host memory");
    for (int64_t b = 0; b < nb && rc == KD_OK; b++)
        rc = kd_block_jacobi_fill(csr, bj, bj->start, b, value_start[b], dtype, values, err);
    if (rc == KD_OK)
        rc = kd_block_jacobi_upload(ocl, bytes, values, "block_jacobi inverses", &bj->inverse, P,
                                    err);
    free(values);
    return rc;
}

/* The inverses (and, for variable blocks, the maps) on the device. */
static int kd_block_jacobi_build(kd_ocl_t *ocl, const kd_csr_t *csr, kd_dtype_t dtype,
                                 kd_block_jacobi_t *bj, kd_precond_t *P, kd_err_t *err)
{
    const int64_t n = bj->n, nb = bj->blocks;
    int64_t *value_start = kd_block_jacobi_value_start(bj);
    int32_t *block_of_row = kd_malloc_array((size_t)n, sizeof(int32_t));
    if (value_start == NULL || block_of_row == NULL) {
        free(value_start);
        free(block_of_row);
        return kd_err_set(err, KD_ENOMEM, "block_jacobi: out of host memory");
    }
    for (int64_t b = 0; b < nb; b++)
        for (int32_t i = bj->start[b]; i < bj->start[b + 1]; i++)
            block_of_row[i] = (int32_t)b;
    int rc = kd_block_jacobi_inverses(ocl, csr, dtype, value_start, bj, P, err);
    if (rc == KD_OK && bj->uniform == 0)
        rc = kd_block_jacobi_upload(ocl, (size_t)n * sizeof(int32_t), block_of_row,
                                    "block_jacobi block_of_row", &bj->block_of_row, P, err);
    if (rc == KD_OK && bj->uniform == 0)
        rc = kd_block_jacobi_upload(ocl, (size_t)(nb + 1) * sizeof(int32_t), bj->start,
                                    "block_jacobi block_start", &bj->block_start, P, err);
    if (rc == KD_OK && bj->uniform == 0)
        rc = kd_block_jacobi_upload(ocl, (size_t)(nb + 1) * sizeof(int64_t), value_start,
                                    "block_jacobi value_start", &bj->value_start, P, err);
    free(value_start);
    free(block_of_row);
    return rc;
}

/* A's state, kept as P's: refused when A holds a non-finite entry (setup and refresh alike). */
static int kd_block_jacobi_new(const kd_matrix_t *A, kd_precond_t *P, kd_block_jacobi_t **out,
                               kd_err_t *err)
{
    if (A->scan.non_finite_row >= 0)
        return kd_err_set(err, KD_EBADREQ, "block_jacobi: entry (%lld, %lld) is %g",
                          (long long)A->scan.non_finite_row, (long long)A->scan.non_finite_col,
                          A->scan.non_finite_value);
    kd_block_jacobi_t *bj = calloc(1, sizeof(*bj));
    if (bj == NULL)
        return kd_err_set(err, KD_ENOMEM, "block_jacobi: out of host memory");
    P->impl = bj;
    *out = bj;
    return KD_OK;
}

static int kd_block_jacobi_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr,
                                 kd_precond_t *P, kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && P != NULL && csr != NULL);
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "block_jacobi needs a square matrix, not %lld x %lld",
                          (long long)A->rows, (long long)A->cols);
    if (csr->rows != A->rows || csr->nnz != A->nnz)
        return kd_err_set(err, KD_EINTERNAL, "block_jacobi: the host CSR is not the matrix's");
    const double size = kd_precond_option(&P->options, "block_size", 0.0);
    if (!(size >= 0 && size <= KD_BLOCK_JACOBI_MAX) || size != floor(size))
        return kd_err_set(err, KD_EBADREQ,
                          "block_jacobi: block_size = %g is not an integer in 1..%d (0: found "
                          "from the structure)",
                          size, KD_BLOCK_JACOBI_MAX);
    kd_block_jacobi_t *bj = NULL;
    int rc = kd_block_jacobi_new(A, P, &bj, err);
    if (rc != KD_OK)
        return rc;
    bj->n = A->rows;
    bj->map = A->order.kind != KD_REORDER_NONE ? A->order.iperm_dev : NULL;
    if (bj->n == 0)
        return KD_OK;
    rc = kd_block_jacobi_partition(csr, (int)size, &bj->start, &bj->blocks, err);
    if (rc != KD_OK)
        return rc;
    const int32_t *start = bj->start;
    /* Uniform when every block but the last has the first one's size and the last no more. */
    bj->uniform = start[1] - start[0];
    for (int64_t b = 0; b < bj->blocks; b++) {
        const int32_t m = start[b + 1] - start[b];
        if (m != bj->uniform && (b + 1 < bj->blocks || m > bj->uniform))
            bj->uniform = 0;
    }
    return kd_block_jacobi_build(ocl, csr, A->dtype, bj, P, err); /* kd_precond_get releases */
}

/* The blocks are the pattern's (and block_size's): old's partition and device maps (retained)
 * serve; each block's inverse is computed again from the new values. */
static int kd_block_jacobi_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                                   const kd_csr_t *csr, kd_precond_t *P, int *declined,
                                   kd_err_t *err)
{
    const kd_block_jacobi_t *o = old->impl;
    *declined = 1;
    if (o == NULL || o->n != A->rows || (o->n > 0 && o->start == NULL))
        return KD_OK;
    *declined = 0;
    kd_block_jacobi_t *bj = NULL;
    int rc = kd_block_jacobi_new(A, P, &bj, err);
    if (rc != KD_OK)
        return rc;
    bj->n = o->n;
    bj->blocks = o->blocks;
    bj->uniform = o->uniform;
    bj->map = A->order.kind != KD_REORDER_NONE ? A->order.iperm_dev : NULL;
    if (bj->n == 0)
        return KD_OK;
    bj->start = kd_malloc_array((size_t)bj->blocks + 1, sizeof(int32_t));
    int64_t *value_start = kd_block_jacobi_value_start(o);
    rc = bj->start != NULL && value_start != NULL
             ? KD_OK
             : kd_err_set(err, KD_ENOMEM, "block_jacobi: out of host memory");
    if (rc == KD_OK) {
        memcpy(bj->start, o->start, ((size_t)bj->blocks + 1) * sizeof(int32_t));
        rc = kd_block_jacobi_inverses(ocl, csr, A->dtype, value_start, bj, P, err);
    }
    cl_mem *mine[] = {&bj->block_of_row, &bj->block_start, &bj->value_start};
    const cl_mem theirs[] = {o->block_of_row, o->block_start, o->value_start};
    const size_t sizes[] = {(size_t)bj->n * sizeof(int32_t),
                            ((size_t)bj->blocks + 1) * sizeof(int32_t),
                            ((size_t)bj->blocks + 1) * sizeof(int64_t)};
    for (int i = 0; i < 3; i++)
        if ((*mine[i] = theirs[i]) != NULL) {
            clRetainMemObject(theirs[i]);
            P->device_bytes += sizes[i]; /* counted in both: each keeps them alive alone */
        }
    free(value_start);
    return rc; /* kd_precond_refresh releases on failure */
}

static int kd_block_jacobi_apply(kd_ocl_t *ocl, const kd_precond_t *P, const kd_multivec_t *r,
                                 kd_multivec_t *z, kd_err_t *err)
{
    assert(P != NULL && r != NULL && z != NULL);
    const kd_block_jacobi_t *bj = P->impl;
    if (r->n != bj->n || z->n != bj->n || r->k != z->k || r->ld != z->ld)
        return kd_err_set(err, KD_EINTERNAL, "block_jacobi: vectors of another shape");
    if (bj->n == 0 || r->k == 0)
        return KD_OK;
    const size_t wg = kd_ocl_work_group_size(ocl);
    char options[64];
    int w = 0;
    if (bj->uniform > 0)
        w = snprintf(options, sizeof(options), "-DKD_BS=%d", bj->uniform);
    if (bj->map != NULL)
        snprintf(options + w, sizeof(options) - (size_t)w, "%s-DKD_MAPPED", w > 0 ? " " : "");
    else if (w == 0)
        options[0] = '\0';
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, "block_jacobi", r->dtype, options, "kd_block_jacobi_apply", &kernel,
                           err);
    if (rc != KD_OK)
        return rc;
    /* Unused pointers (uniform blocks, no map) get a valid buffer that is never read. */
    const cl_mem any = bj->inverse;
    return kd_ocl_run(ocl, kernel, "kd_block_jacobi_apply",
                      kd_ocl_range_2d(((size_t)bj->n + wg - 1) / wg * wg, (size_t)r->k, wg, 1),
                      KD_ARGS(KD_ARG_INT(bj->n), KD_ARG_INT(r->ld), KD_ARG_MEM(bj->inverse),
                              KD_ARG_MEM(bj->block_of_row != NULL ? bj->block_of_row : any),
                              KD_ARG_MEM(bj->block_start != NULL ? bj->block_start : any),
                              KD_ARG_MEM(bj->value_start != NULL ? bj->value_start : any),
                              KD_ARG_MEM(bj->map != NULL ? bj->map : any), KD_ARG_MEM(r->mem),
                              KD_ARG_MEM(z->mem)),
                      NULL, err);
}

static void kd_block_jacobi_release(kd_precond_t *P)
{
    kd_block_jacobi_t *bj = P->impl;
    if (bj == NULL)
        return;
    cl_mem mems[] = {bj->inverse, bj->block_of_row, bj->block_start, bj->value_start};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
        if (mems[i] != NULL)
            clReleaseMemObject(mems[i]);
    free(bj->start);
    free(bj);
    P->impl = NULL;
}

const kd_precond_ops_t kd_precond_block_jacobi = {
    .name = "block_jacobi",
    .summary = "block Jacobi: M = A's diagonal blocks (block_size rows, or found from the "
               "structure), inverted at setup",
    .forms = KD_PRECOND_OPERATOR,
    .symmetric = 1,
    .needs_csr = 1,
    .option_names = kd_block_jacobi_option_names,
    .plan_bytes = kd_block_jacobi_plan_bytes,
    .setup = kd_block_jacobi_setup,
    .apply = kd_block_jacobi_apply,
    .release = kd_block_jacobi_release,
    .refresh = kd_block_jacobi_refresh,
};
