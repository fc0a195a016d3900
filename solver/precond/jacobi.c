/*
 * Jacobi: M = diag(A). Setup checks every diagonal entry (the upload's scan found the first zero,
 * missing or non-finite one; a negative one only bars the methods that need M positive definite,
 * kd_jacobi_check) and copies 1/a_ii, which the scan computed in host memory,
 * to the device once; the solver's vector passes then apply it on the fly (the diagonal form), and
 * apply() is the same as one launch (z = D^-1 r) for methods that take an operator.
 */
#include "solver/precond/precond.h"

#include <assert.h>
#include <math.h>

static size_t kd_jacobi_plan_bytes(const kd_matrix_t *A)
{
    return (size_t)A->rows * kd_dtype_size(A->dtype);
}

/* D^-1 with a negative entry is not positive definite: cg and minres cannot take it; gmres and
 * bicgstab, which need no symmetry of M, can (a circuit matrix's negative a_ii is common). */
static int kd_jacobi_check(const kd_matrix_t *A, int definite, kd_err_t *err)
{
    const kd_matrix_scan_t *s = &A->scan;
    if (!definite || A->rows != A->cols || s->negative_diagonal_row < 0)
        return KD_OK;
    return kd_err_set(err, KD_ENOTSPD,
                      "jacobi: the diagonal entry of row %lld is %g < 0: the matrix is not "
                      "symmetric positive definite (gmres and bicgstab take jacobi here)",
                      (long long)s->negative_diagonal_row, s->negative_diagonal_value);
}

static int kd_jacobi_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr,
                           kd_precond_t *P, kd_err_t *err)
{
    (void)csr;
    assert(ocl != NULL && A != NULL && P != NULL);
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "jacobi needs a square matrix, not %lld x %lld",
                          (long long)A->rows, (long long)A->cols);
    if (A->rows == 0)
        return KD_OK;
    const kd_matrix_scan_t *s = &A->scan;
    if (s->bad_diagonal_row >= 0)
        return kd_err_set(err, KD_EBADREQ,
                          "jacobi: the diagonal entry of row %lld is %g (%s): Jacobi "
                          "preconditioning divides by every diagonal entry",
                          (long long)s->bad_diagonal_row, s->bad_diagonal_value,
                          isfinite(s->bad_diagonal_value) ? "zero or missing" : "not finite");
    if (A->inv_diagonal == NULL)
        return kd_err_set(err, KD_EINTERNAL, "jacobi: the matrix has no inverse diagonal");
    const size_t bytes = kd_jacobi_plan_bytes(A);
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes,
                                  A->inv_diagonal, "inverse diagonal", &P->diagonal, err);
    if (rc == KD_OK)
        P->device_bytes = bytes;
    return rc;
}

/* Nothing of Jacobi depends on the pattern alone: refreshed, it is the new diagonal, set up as
 * ever (the old one's buffer stays with the old matrix). */
static int kd_jacobi_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                             const kd_csr_t *csr, kd_precond_t *P, int *declined, kd_err_t *err)
{
    (void)old;
    *declined = 0;
    return kd_jacobi_setup(ocl, A, csr, P, err);
}

static int kd_jacobi_apply(kd_ocl_t *ocl, const kd_precond_t *P, const kd_multivec_t *r,
                           kd_multivec_t *z, kd_err_t *err)
{
    assert(P != NULL && r != NULL && z != NULL);
    return kd_multivec_scale_rows(ocl, P->diagonal, r, z, err);
}

static void kd_jacobi_release(kd_precond_t *P)
{
    if (P->diagonal != NULL)
        clReleaseMemObject(P->diagonal);
    P->diagonal = NULL;
}

const kd_precond_ops_t kd_precond_jacobi = {
    .name = "jacobi",
    .summary = "Jacobi: M = diag(A), applied on the fly by the vector passes",
    .forms = KD_PRECOND_DIAGONAL | KD_PRECOND_OPERATOR,
    .symmetric = 1,
    .plan_bytes = kd_jacobi_plan_bytes,
    .check = kd_jacobi_check,
    .setup = kd_jacobi_setup,
    .apply = kd_jacobi_apply,
    .release = kd_jacobi_release,
    .refresh = kd_jacobi_refresh,
};
