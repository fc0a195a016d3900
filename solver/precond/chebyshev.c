/*
 * Chebyshev polynomial preconditioning: M^-1 = p(D^-1 A) D^-1, p of degree `degree` the
 * Chebyshev approximation of 1/lambda on [lmin, lmax] (the residual polynomial 1 - lambda p is
 * the scaled Chebyshev polynomial, smallest on the interval). Applied as the Chebyshev iteration
 * for A z = r from z = 0 (Saad, Iterative Methods, alg. 12.1 with the Jacobi scaling): `degree`
 * SpMVs per column in the matrix's own format, each followed by one fused vector pass of six
 * vectors (kernels/precond/chebyshev.cl); no triangular solve, so an apply costs `degree` SpMVs and
 * nothing waits on the host.
 *
 * The interval, at setup, on the device: 16 Lanczos steps on S = D^-1/2 A D^-1/2 (similar to
 * D^-1 A) from a fixed pseudo-random start, as the AMG setup does; the device because it already
 * holds A in a format that multiplies fast (a host pass would need the host CSR and O(nnz) host
 * work per step), and the order a reordered A is stored in changes no eigenvalue. lmax = 1.1
 * times the largest Ritz value (a Ritz value is at most the true lambda_max; Lanczos gets it
 * within a few percent in 16 steps). lmin = lmin_ratio lmax (default 1/30, Ifpack2's "chebyshev:
 * ratio eigenvalue" 30; PETSc's KSPChebyshev estimate takes 0.1 lmax, hypre's BoomerAMG 0.3 lmax,
 * both for smoothers, which only need to damp the upper part): the smallest Ritz value after 16
 * steps is far above the true lambda_min, and as a preconditioner p should also reach down into
 * the lower spectrum; below lmin, lambda p(lambda) stays in (0, 1), so a low lmin costs accuracy,
 * never definiteness.
 *
 * Symmetry: (D^-1 A)^j D^-1 = D^-1 (A D^-1)^j is symmetric for symmetric A, so M^-1 is too; it is
 * positive definite when every eigenvalue of D^-1 A is in (0, lmax] (then lambda p(lambda) is in
 * (0, 1]), which holds for SPD A unless Lanczos underestimated lambda_max by more than the 10%
 * padding; CG may use it. For a nonsymmetric A the same setup runs (the three-term recurrence
 * then estimates the range of the symmetric part's spectrum, a heuristic), M^-1 is a fixed
 * polynomial in D^-1 A (not symmetric), fine for GMRES or BiCGSTAB when D^-1 A's eigenvalues lie
 * near the positive real axis; one without a positive estimate is refused.
 */
#include "solver/precond/amg/amg.h"
#include "solver/blas.h"
#include "solver/precond/chebyshev.h"
#include "solver/precond/precond.h"

#include "common/checked.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_CHEBYSHEV_DEGREE_DEFAULT 3
#define KD_CHEBYSHEV_DEGREE_MAX 20
#define KD_CHEBYSHEV_RATIO_DEFAULT (1.0 / 30.0)
#define KD_CHEBYSHEV_LANCZOS 16
#define KD_CHEBYSHEV_PAD 1.1

static const char *const kd_chebyshev_option_names[] = {"degree", "lmin_ratio", NULL};

typedef struct kd_chebyshev {
    int64_t n;
    kd_dtype_t dtype;
    size_t wg;
    const kd_matrix_t *A; /* the matrix this lives with */
    cl_mem inv_diagonal;
    kd_vec_t q, w; /* A z and the other iterate, one column at a time */
    kd_chebyshev_bounds_t bounds;
} kd_chebyshev_t;

void kd_chebyshev_coefficients(double lmin, double lmax, int step, double *c_d, double *c_r)
{
    const double theta = 0.5 * (lmax + lmin), delta = 0.5 * (lmax - lmin);
    const double sigma = theta / delta;
    double rho = 1.0 / sigma;
    *c_d = 0.0;
    *c_r = 1.0 / theta;
    for (int k = 1; k <= step; k++) {
        const double rho_next = 1.0 / (2.0 * sigma - rho);
        *c_d = rho_next * rho;
        *c_r = 2.0 * rho_next / delta;
        rho = rho_next;
    }
}

static size_t kd_chebyshev_plan_bytes(const kd_matrix_t *A)
{
    return (size_t)A->rows * 3 * kd_dtype_size(A->dtype);
}

static int kd_chebyshev_launch(kd_ocl_t *ocl, const kd_chebyshev_t *ch, const char *name,
                               const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err)
{
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, "chebyshev", ch->dtype, NULL, name, &kernel, err);
    if (rc != KD_OK)
        return rc;
    const size_t global = ((size_t)ch->n + ch->wg - 1) / ch->wg * ch->wg;
    return kd_ocl_run(ocl, kernel, name, kd_ocl_range_1d(global, ch->wg), args, nargs, NULL, err);
}

/* z = p(D^-1 A) D^-1 r for one column. The three-term form of the iteration, z_{k+1} = z_k +
 * c_d (z_k - z_{k-1}) + c_r D^-1 (r - A z_k), writes z_{k+1} over z_{k-1}: the iterates alternate
 * between z and the work vector w, starting where the last one lands in z. */
static int kd_chebyshev_column(kd_ocl_t *ocl, kd_chebyshev_t *ch, const kd_vec_t *r, kd_vec_t *z,
                               kd_err_t *err)
{
    const double lmin = ch->bounds.lmin, lmax = ch->bounds.lmax;
    const int degree = ch->bounds.degree;
    kd_vec_t *iterate[2] = {z, &ch->w}; /* z_j in iterate[(degree + 1 - j) % 2] */
    double c_d, c_r;
    kd_chebyshev_coefficients(lmin, lmax, 0, &c_d, &c_r);
    int rc = kd_chebyshev_launch(ocl, ch, "kd_chebyshev_first",
                                 KD_ARGS(KD_ARG_INT(ch->n), KD_ARG_VALUE(ch->dtype, c_r),
                                         KD_ARG_MEM(r->mem), KD_ARG_MEM(ch->inv_diagonal),
                                         KD_ARG_MEM(iterate[degree % 2]->mem)),
                                 err);
    for (int step = 1; step <= degree && rc == KD_OK; step++) {
        const kd_vec_t *now = iterate[(degree + 1 - step) % 2];
        kd_vec_t *next = iterate[(degree - step) % 2]; /* holds z_{step-1} */
        rc = kd_matrix_spmv_inner(ocl, ch->A, 1.0, now, 0.0, &ch->q, err);
        kd_chebyshev_coefficients(lmin, lmax, step, &c_d, &c_r);
        if (rc == KD_OK)
            rc = kd_chebyshev_launch(
                ocl, ch, "kd_chebyshev_step",
                KD_ARGS(KD_ARG_INT(ch->n), KD_ARG_INT(step == 1), KD_ARG_VALUE(ch->dtype, c_d),
                        KD_ARG_VALUE(ch->dtype, c_r), KD_ARG_MEM(r->mem), KD_ARG_MEM(ch->q.mem),
                        KD_ARG_MEM(ch->inv_diagonal), KD_ARG_MEM(now->mem), KD_ARG_MEM(next->mem)),
                err);
    }
    return rc;
}

static int kd_chebyshev_apply(kd_ocl_t *ocl, const kd_precond_t *P, const kd_multivec_t *r,
                              kd_multivec_t *z, kd_err_t *err)
{
    assert(P != NULL && r != NULL && z != NULL);
    kd_chebyshev_t *ch = P->impl;
    if (r->n != ch->n || z->n != ch->n || r->k != z->k)
        return kd_err_set(err, KD_EINTERNAL, "chebyshev: vectors of another shape");
    int rc = KD_OK;
    for (int64_t c = 0; c < r->k && ch->n > 0 && rc == KD_OK; c++)
        rc = kd_chebyshev_column(ocl, ch, &r->cols[c], &z->cols[c], err);
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * Setup. */

/* Lanczos on S = sgn(D) |D|^-1/2 A |D|^-1/2 (similar to D^-1 A; symmetric for SPD A): alpha and
 * beta of the tridiagonal, *m its order. */
typedef struct kd_chebyshev_lanczos {
    kd_blas_t blas;
    kd_vec_t v, v_prev, w, t;
    cl_mem left, right; /* sgn(d_i) |d_i|^-1/2 and |d_i|^-1/2 */
} kd_chebyshev_lanczos_t;

static int kd_chebyshev_lanczos_init(kd_ocl_t *ocl, kd_chebyshev_t *ch, kd_chebyshev_lanczos_t *lz,
                                     kd_err_t *err)
{
    const int64_t n = ch->n;
    const size_t vsize = kd_dtype_size(ch->dtype);
    const void *inv = ch->A->inv_diagonal;
    unsigned char *left = malloc((size_t)n * vsize), *right = malloc((size_t)n * vsize),
                  *start = malloc((size_t)n * vsize);
    int rc = left != NULL && right != NULL && start != NULL
                 ? KD_OK
                 : kd_err_set(err, KD_ENOMEM, "chebyshev: out of host memory");
    uint64_t seed = 0x9e3779b97f4a7c15u;
    for (int64_t i = 0; i < n && rc == KD_OK; i++) {
        const double d = kd_load_real(inv, ch->dtype, (size_t)i), s = sqrt(fabs(d));
        kd_store_real(right, ch->dtype, (size_t)i, s);
        kd_store_real(left, ch->dtype, (size_t)i, d < 0.0 ? -s : s);
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        kd_store_real(start, ch->dtype, (size_t)i, (double)(seed >> 11) / 9007199254740992.0 - 0.5);
    }
    const size_t bytes = (size_t)n * vsize;
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, left,
                                  "chebyshev scaling", &lz->left, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, right,
                                  "chebyshev scaling", &lz->right, err);
    if (rc == KD_OK)
        rc = kd_blas_init(ocl, ch->dtype, &lz->blas, err);
    kd_vec_t *vecs[] = {&lz->v, &lz->v_prev, &lz->w, &lz->t};
    for (int i = 0; i < 4 && rc == KD_OK; i++)
        rc = kd_vec_alloc(ocl, n, ch->dtype, vecs[i], err);
    if (rc == KD_OK)
        rc = kd_vec_write(ocl, &lz->v, start, ch->dtype, err);
    if (rc == KD_OK)
        rc = kd_vec_fill(ocl, &lz->v_prev, 0.0, err);
    free(left);
    free(right);
    free(start);
    return rc;
}

static void kd_chebyshev_lanczos_release(kd_chebyshev_lanczos_t *lz)
{
    kd_vec_t *vecs[] = {&lz->v, &lz->v_prev, &lz->w, &lz->t};
    for (int i = 0; i < 4; i++)
        kd_vec_release(vecs[i]);
    kd_blas_release(&lz->blas);
    if (lz->left != NULL)
        clReleaseMemObject(lz->left);
    if (lz->right != NULL)
        clReleaseMemObject(lz->right);
}

static int kd_chebyshev_lanczos(kd_ocl_t *ocl, kd_chebyshev_t *ch, double *alpha, double *beta,
                                int *m, kd_err_t *err)
{
    kd_chebyshev_lanczos_t lz = {0};
    int rc = kd_chebyshev_lanczos_init(ocl, ch, &lz, err);
    double norm = 0.0, b_prev = 0.0;
    if (rc == KD_OK)
        rc = kd_blas_nrm2(&lz.blas, &lz.v, &norm, err);
    if (rc == KD_OK)
        rc = kd_blas_scale(&lz.blas, norm > 0.0 ? 1.0 / norm : 1.0, &lz.v, err);
    const int steps = ch->n < KD_CHEBYSHEV_LANCZOS ? (int)ch->n : KD_CHEBYSHEV_LANCZOS;
    *m = 0;
    for (int j = 0; j < steps && rc == KD_OK; j++) {
        double a = 0.0, b = 0.0;
        rc = kd_chebyshev_launch(ocl, ch, "kd_chebyshev_scale",
                                 KD_ARGS(KD_ARG_INT(ch->n), KD_ARG_MEM(lz.right),
                                         KD_ARG_MEM(lz.v.mem), KD_ARG_MEM(lz.t.mem)),
                                 err);
        if (rc == KD_OK)
            rc = kd_matrix_spmv_inner(ocl, ch->A, 1.0, &lz.t, 0.0, &lz.w, err);
        if (rc == KD_OK)
            rc = kd_chebyshev_launch(ocl, ch, "kd_chebyshev_scale",
                                     KD_ARGS(KD_ARG_INT(ch->n), KD_ARG_MEM(lz.left),
                                             KD_ARG_MEM(lz.w.mem), KD_ARG_MEM(lz.w.mem)),
                                     err);
        if (rc == KD_OK)
            rc = kd_blas_dot(&lz.blas, &lz.w, &lz.v, &a, err);
        if (rc == KD_OK)
            rc = kd_blas_axpy(&lz.blas, -a, &lz.v, &lz.w, err);
        if (rc == KD_OK)
            rc = kd_blas_axpy(&lz.blas, -b_prev, &lz.v_prev, &lz.w, err);
        if (rc == KD_OK)
            rc = kd_blas_nrm2(&lz.blas, &lz.w, &b, err);
        if (rc != KD_OK)
            break;
        alpha[*m] = a;
        beta[*m] = b;
        (*m)++;
        if (!(b > 1e-12 * fabs(a)) || !isfinite(b))
            break; /* an invariant subspace: the Ritz values are exact */
        if ((rc = kd_blas_copy(&lz.blas, &lz.v, &lz.v_prev, err)) == KD_OK &&
            (rc = kd_blas_copy(&lz.blas, &lz.w, &lz.v, err)) == KD_OK)
            rc = kd_blas_scale(&lz.blas, 1.0 / b, &lz.v, err);
        b_prev = b;
    }
    kd_chebyshev_lanczos_release(&lz);
    return rc;
}

/* The interval from the Ritz values and the options. */
static int kd_chebyshev_bounds(kd_ocl_t *ocl, kd_chebyshev_t *ch, double ratio, kd_err_t *err)
{
    double alpha[KD_CHEBYSHEV_LANCZOS], beta[KD_CHEBYSHEV_LANCZOS], negated[KD_CHEBYSHEV_LANCZOS];
    int m = 0;
    int rc = kd_chebyshev_lanczos(ocl, ch, alpha, beta, &m, err);
    if (rc != KD_OK)
        return rc;
    for (int i = 0; i < m; i++)
        negated[i] = -alpha[i];
    kd_chebyshev_bounds_t *b = &ch->bounds;
    b->lanczos_steps = m;
    b->ritz_max = m > 0 ? kd_amg_tridiagonal_max(alpha, beta, m) : 0.0;
    b->ritz_min = m > 0 ? -kd_amg_tridiagonal_max(negated, beta, m) : 0.0;
    if (!(b->ritz_max > 0.0) || !isfinite(b->ritz_max))
        return kd_err_set(err, KD_EBADREQ,
                          "chebyshev: D^-1 A has no positive eigenvalue estimate (largest Ritz "
                          "value %g): the polynomial needs a spectrum on the positive side",
                          b->ritz_max);
    b->lmax = KD_CHEBYSHEV_PAD * b->ritz_max;
    b->lmin = ratio * b->lmax;
    return KD_OK;
}

static int kd_chebyshev_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr,
                              kd_precond_t *P, kd_err_t *err)
{
    (void)csr;
    assert(ocl != NULL && A != NULL && P != NULL);
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "chebyshev needs a square matrix, not %lld x %lld",
                          (long long)A->rows, (long long)A->cols);
    const double degree = kd_precond_option(&P->options, "degree", KD_CHEBYSHEV_DEGREE_DEFAULT);
    const double ratio = kd_precond_option(&P->options, "lmin_ratio", KD_CHEBYSHEV_RATIO_DEFAULT);
    if (!(degree >= 1 && degree <= KD_CHEBYSHEV_DEGREE_MAX) || degree != floor(degree))
        return kd_err_set(err, KD_EBADREQ, "chebyshev: degree = %g is not an integer in 1..%d",
                          degree, KD_CHEBYSHEV_DEGREE_MAX);
    if (!(ratio > 0.0 && ratio < 1.0))
        return kd_err_set(err, KD_EBADREQ,
                          "chebyshev: lmin_ratio = %g is not in (0, 1) (lmin = lmin_ratio lmax)",
                          ratio);
    if (A->scan.non_finite_row >= 0)
        return kd_err_set(err, KD_EBADREQ, "chebyshev: entry (%lld, %lld) is %g",
                          (long long)A->scan.non_finite_row, (long long)A->scan.non_finite_col,
                          A->scan.non_finite_value);
    if (A->scan.bad_diagonal_row >= 0)
        return kd_err_set(err, KD_EBADREQ,
                          "chebyshev: the diagonal entry of row %lld is %g (%s): the polynomial "
                          "is in D^-1 A and divides by every diagonal entry",
                          (long long)A->scan.bad_diagonal_row, A->scan.bad_diagonal_value,
                          isfinite(A->scan.bad_diagonal_value) ? "zero or missing" : "not finite");
    kd_chebyshev_t *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return kd_err_set(err, KD_ENOMEM, "chebyshev: out of host memory");
    P->impl = ch;
    ch->n = A->rows;
    ch->dtype = A->dtype;
    ch->wg = kd_ocl_work_group_size(ocl);
    ch->A = A;
    ch->bounds.degree = (int)degree;
    if (ch->n == 0)
        return KD_OK;
    if (A->inv_diagonal == NULL)
        return kd_err_set(err, KD_EINTERNAL, "chebyshev: the matrix has no inverse diagonal");
    const size_t bytes = (size_t)ch->n * kd_dtype_size(A->dtype);
    int rc =
        kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, A->inv_diagonal,
                             "chebyshev inverse diagonal", &ch->inv_diagonal, err);
    if (rc == KD_OK)
        rc = kd_vec_alloc(ocl, ch->n, ch->dtype, &ch->q, err);
    if (rc == KD_OK)
        rc = kd_vec_alloc(ocl, ch->n, ch->dtype, &ch->w, err);
    if (rc == KD_OK)
        rc = kd_chebyshev_bounds(ocl, ch, ratio, err);
    if (rc == KD_OK)
        P->device_bytes = 3 * bytes;
    return rc; /* kd_precond_get releases on failure */
}

/* The interval is the values' (a new Lanczos estimate) and nothing else is kept: refreshed, it
 * is set up as ever. */
static int kd_chebyshev_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                                const kd_csr_t *csr, kd_precond_t *P, int *declined, kd_err_t *err)
{
    (void)old;
    *declined = 0;
    return kd_chebyshev_setup(ocl, A, csr, P, err);
}

static void kd_chebyshev_release(kd_precond_t *P)
{
    kd_chebyshev_t *ch = P->impl;
    if (ch == NULL)
        return;
    if (ch->inv_diagonal != NULL)
        clReleaseMemObject(ch->inv_diagonal);
    kd_vec_release(&ch->q);
    kd_vec_release(&ch->w);
    free(ch);
    P->impl = NULL;
}

const kd_precond_ops_t kd_precond_chebyshev = {
    .name = "chebyshev",
    .summary = "Chebyshev polynomial in D^-1 A (degree SpMVs an apply), bounds by Lanczos",
    .forms = KD_PRECOND_OPERATOR,
    .symmetric = 1,
    .option_names = kd_chebyshev_option_names,
    .plan_bytes = kd_chebyshev_plan_bytes,
    .setup = kd_chebyshev_setup,
    .apply = kd_chebyshev_apply,
    .release = kd_chebyshev_release,
    .refresh = kd_chebyshev_refresh,
};

int kd_chebyshev_describe(const kd_precond_t *P, kd_chebyshev_bounds_t *out, kd_err_t *err)
{
    assert(P != NULL && out != NULL);
    if (P->ops != &kd_precond_chebyshev || P->impl == NULL)
        return kd_err_set(err, KD_EBADREQ, "not a chebyshev preconditioner");
    *out = ((const kd_chebyshev_t *)P->impl)->bounds;
    return KD_OK;
}
