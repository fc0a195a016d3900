/*
 * BiCGSTAB (van der Vorst 1992), right-preconditioned as SciPy's bicgstab, for any square A:
 *
 *   r0hat = r0; loop: rho = r0hat'r; beta = (rho / rho_old)(alpha / omega);
 *   p = r + beta (p - omega v); phat = M^-1 p; v = A phat; alpha = rho / r0hat'v;
 *   s = r - alpha v; (||s|| small: x += alpha phat, converged at the half step)
 *   shat = M^-1 s; t = A shat; omega = t's / t't; x += alpha phat + omega shat; r = s - omega t
 *
 * r is the true residual's recurrence (right preconditioning), so the driver's threshold on r'r
 * applies as it is. An iteration is two SpMVs and four passes (kernels/methods/bicgstab.cl), three
 * reductions:
 *
 *   direction  fold r'r, r0hat'r (left by the last update); decide; p, phat = D^-1 p
 *   SpMV       v = A phat, then the partials of r0hat'v and v'v               (reduction 1)
 *   step       alpha; s = r - alpha v over r, shat = D^-1 s; the partials of s's
 *   SpMV       t = A shat, then the partials of s't and t't                   (reduction 2)
 *   update     fold s's, s't, t't; omega; x, r = s - omega t; the partials of the new r'r
 *              and r0hat'r                                                    (reduction 3)
 *
 * On a csr_scalar matrix with fusion each SpMV and its dots are one launch
 * (kd_krylov_csr_spmv_dots3 with ops WITH_RQ leaves r0hat'v / s't and v'v / t't where
 * kd_bicgstab_dots does). With an operator preconditioner phat and shat are its launches
 * (kd_method_precondition) after the direction and step passes; without one phat is p and shat
 * is s. A rho = r0hat'r ~ 0 against ||r0hat|| ||r|| restarts the column on the device with a
 * fresh shadow residual r0hat = r (and p = r), up to KD_BICGSTAB_RESTARTS times (SciPy's
 * nonsymposdef case hits rho = 0 exactly at iteration 5 and converges after one). Breakdowns
 * (status breakdown, the reason in the message): rho ~ 0 once the restarts are spent, r0hat'v ~ 0
 * against ||r0hat|| ||v||, omega = 0 (t's or t't = 0). A restart (the driver's, after a
 * convergence it could not confirm) takes r0hat = the new r.
 */
#include "solver/methods/method.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

/* Work vectors; t is run->q. */
enum { KD_BG_R0HAT = 0, KD_BG_P = 1, KD_BG_V = 2, KD_BG_PHAT = 3, KD_BG_SHAT = 4 };

/* The method's own scalars per column and parity (kernels/methods/bicgstab.cl's enum). */
enum { KD_BG_GO1 = 3, KD_BG_GO3 = 5, KD_BG_SLOTS = 8 };
enum { KD_BG_WHY_RHO = 1, KD_BG_WHY_RV = 2, KD_BG_WHY_OMEGA = 3 };

typedef struct kd_bicgstab {
    cl_mem own; /* 2 * k * KD_BG_SLOTS values */
} kd_bicgstab_t;

static int kd_bicgstab_operator(const kd_solve_run_t *run)
{
    return run->precond->diagonal == NULL && run->precond->ops->apply != NULL;
}

static cl_mem kd_bicgstab_own(const kd_solve_run_t *run)
{
    return ((const kd_bicgstab_t *)run->method_state)->own;
}

/* phat (shat): p (s) itself without a preconditioner, else its work vector. */
static kd_multivec_t *kd_bicgstab_hat(kd_solve_run_t *run, kd_multivec_t *v, int which)
{
    return run->precond->diagonal == NULL && run->precond->ops->apply == NULL ? v
                                                                              : &run->work[which];
}

/* r0hat = r and a fresh start for the masked columns (mask NULL: every column), after
 * kd_krylov_residual set their state at `it`. */
static int kd_bicgstab_fresh(kd_solve_run_t *run, int use_mask, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, it + 1, 0); /* reads copy it & 1 */
    L.mask_all = KD_KRYLOV_MASK_PARTIALS;
    return kd_krylov_launch(kr, "bicgstab", "kd_bicgstab_restart",
                            KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L),
                                    KD_ARG_MEM(use_mask ? kr->mask : (cl_mem)NULL),
                                    KD_ARG_MEM(kd_bicgstab_own(run)), KD_ARG_MEM(run->r.mem),
                                    KD_ARG_MEM(run->work[KD_BG_R0HAT].mem)),
                            err);
}

static int kd_bicgstab_setup(kd_solve_run_t *run, kd_err_t *err)
{
    assert(run != NULL);
    kd_bicgstab_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    run->method_state = st;
    run->fused = run->csr != NULL;
    run->kr.fold_snapshots = 1; /* the update leaves r'r as partial sums */
    const size_t bytes = 2 * (size_t)run->k * KD_BG_SLOTS * kd_dtype_size(run->r.dtype);
    int rc = kd_ocl_buffer_create(run->ocl, CL_MEM_READ_WRITE, bytes, NULL, "bicgstab scalars",
                                  &st->own, err);
    if (rc == KD_OK) {
        const double zero = 0.0;
        const float zero32 = 0.0f;
        const size_t v = kd_dtype_size(run->r.dtype);
        cl_int cst = clEnqueueFillBuffer(kd_ocl_queue(run->ocl), st->own,
                                         run->r.dtype == KD_DTYPE_F64 ? (const void *)&zero
                                                                      : (const void *)&zero32,
                                         v, 0, bytes, 0, NULL, NULL);
        if (cst != CL_SUCCESS)
            rc = kd_ocl_fail(err, cst, "clEnqueueFillBuffer (bicgstab scalars)");
    }
    if (rc == KD_OK)
        rc = kd_krylov_residual(&run->kr, &run->r, NULL, NULL,
                                KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART, 0, err);
    return rc == KD_OK ? kd_bicgstab_fresh(run, 0, 0, err) : rc;
}

/* After an SpMV q = A u (or fused with it): the partials of w'q and q'q of the columns whose
 * own[go_slot] is set (fused: of the columns running at the iteration's start). */
static int kd_bicgstab_spmv_dots(kd_solve_run_t *run, const kd_multivec_t *u, kd_multivec_t *q,
                                 const kd_multivec_t *w, int go_slot, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    if (run->fused)
        return kd_krylov_dots3(kr, run->csr, u, q, w, KD_KRYLOV_OP_WITH_RQ, it, err);
    int rc = kd_solve_spmv(run, u, q, err);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, it, 0);
    return kd_krylov_launch(kr, "bicgstab", "kd_bicgstab_dots",
                            KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kd_bicgstab_own(run)),
                                    KD_ARG_INT(go_slot), KD_ARG_MEM(w->mem), KD_ARG_MEM(q->mem),
                                    KD_ARG_MEM(kr->dot_partials)),
                            err);
}

static int kd_bicgstab_iterate(kd_solve_run_t *run, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_multivec_t *r0hat = &run->work[KD_BG_R0HAT], *p = &run->work[KD_BG_P];
    kd_multivec_t *v = &run->work[KD_BG_V], *t = &run->q;
    kd_multivec_t *phat = kd_bicgstab_hat(run, p, KD_BG_PHAT);
    kd_multivec_t *shat = kd_bicgstab_hat(run, &run->r, KD_BG_SHAT);
    const cl_mem own = kd_bicgstab_own(run);
    const kd_krylov_launch_t L = kd_krylov_pass_block(kr, it, 0);
    int rc = kd_krylov_launch(kr, "bicgstab", "kd_bicgstab_direction",
                              KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kr->threshold),
                                      KD_ARG_MEM(kr->limits), KD_ARG_MEM(kr->res_partials),
                                      KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->state),
                                      KD_ARG_MEM(own), KD_ARG_MEM(run->r.mem), KD_ARG_MEM(p->mem),
                                      KD_ARG_MEM(v->mem), KD_ARG_MEM(run->work[KD_BG_PHAT].mem),
                                      KD_ARG_MEM(kr->diagonal), KD_ARG_MEM(r0hat->mem)),
                              err);
    if (rc == KD_OK && kd_bicgstab_operator(run))
        rc = kd_method_precondition(run, p, phat, err);
    if (rc == KD_OK)
        rc = kd_bicgstab_spmv_dots(run, phat, v, r0hat, KD_BG_GO1, it, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "r0hat'v, v'v", err);
    if (rc == KD_OK)
        rc = kd_krylov_launch(
            kr, "bicgstab", "kd_bicgstab_step",
            KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kr->dot_partials),
                    KD_ARG_MEM(kr->res_partials), KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->state),
                    KD_ARG_MEM(own), KD_ARG_MEM(run->r.mem), KD_ARG_MEM(v->mem),
                    KD_ARG_MEM(run->work[KD_BG_SHAT].mem), KD_ARG_MEM(kr->diagonal)),
            err);
    if (rc == KD_OK && kd_bicgstab_operator(run))
        rc = kd_method_precondition(run, &run->r, shat, err);
    if (rc == KD_OK)
        rc = kd_bicgstab_spmv_dots(run, shat, t, &run->r, KD_BG_GO3, it, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "s's, s't, t't", err);
    if (rc == KD_OK)
        rc = kd_krylov_launch(
            kr, "bicgstab", "kd_bicgstab_update",
            KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kr->threshold),
                    KD_ARG_MEM(kr->dot_partials), KD_ARG_MEM(kr->res_partials),
                    KD_ARG_MEM(kr->scalars), KD_ARG_MEM(kr->state), KD_ARG_MEM(own),
                    KD_ARG_MEM(run->x.mem), KD_ARG_MEM(run->r.mem), KD_ARG_MEM(t->mem),
                    KD_ARG_MEM(phat->mem), KD_ARG_MEM(shat->mem), KD_ARG_MEM(r0hat->mem)),
            err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "r'r, r0hat'r", err);
    return rc;
}

/* From the true residual in run->r: r'r, the state at `it`, r0hat = r, p = r. */
static int kd_bicgstab_restart(kd_solve_run_t *run, int *mask, int64_t it, kd_err_t *err)
{
    int rc = kd_krylov_residual(&run->kr, &run->r, NULL, mask, 0, it, err);
    return rc == KD_OK ? kd_bicgstab_fresh(run, 1, it, err) : rc;
}

static int kd_bicgstab_check(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                             kd_solve_result_t *res)
{
    (void)run;
    const long long at = (long long)st->iteration;
    if (st->status == KD_KRYLOV_ZERO_STEP || st->status == KD_KRYLOV_NON_FINITE_ALPHA) {
        /* (kd_method_explain's words for these are CG's: "not symmetric positive definite") */
        const int zero = st->status == KD_KRYLOV_ZERO_STEP;
        res->status = zero ? KD_SOLVE_BREAKDOWN : KD_SOLVE_NON_FINITE;
        res->iterations = st->iteration - 1 - skip;
        snprintf(res->message, sizeof(res->message),
                 zero ? "zero step at iteration %lld: alpha = rho / r0hat'v underflows to 0 (rho "
                        "= %.3g): the matrix is scaled beyond the dtype"
                      : "a step factor (alpha, beta or omega) = %2$g at iteration %1$lld "
                        "overflows",
                 at, st->fail);
        return 1;
    }
    if (st->status != KD_KRYLOV_BREAKDOWN)
        return kd_method_explain(st, skip, "r0hat'v", "rho", res);
    res->status = KD_SOLVE_BREAKDOWN;
    res->iterations = st->iteration - 1 - skip;
    switch ((int)st->pq) {
    case KD_BG_WHY_RHO:
        snprintf(res->message, sizeof(res->message),
                 "rho = r0hat'r = %.3g at iteration %lld (||r0hat|| ||r|| eps = %.3g): the "
                 "shadow residual is orthogonal to r after %d restarts with a fresh one "
                 "(r0hat = r); try gmres",
                 st->fail, at, st->alpha, (int)st->beta);
        break;
    case KD_BG_WHY_RV:
        snprintf(res->message, sizeof(res->message),
                 "r0hat'v = %.3g at iteration %lld (||r0hat|| ||v|| eps = %.3g): v = A M^-1 p is "
                 "orthogonal to the shadow residual",
                 st->fail, at, st->alpha);
        break;
    default:
        snprintf(res->message, sizeof(res->message),
                 "omega = t's / t't = 0 at iteration %lld (t's = %.3g, t't = %.3g): the "
                 "stabilising step is 0",
                 at, st->fail, st->alpha);
        break;
    }
    return 1;
}

static void kd_bicgstab_finish(kd_solve_run_t *run)
{
    kd_bicgstab_t *st = run->method_state;
    if (st != NULL && st->own != NULL)
        clReleaseMemObject(st->own);
    free(st);
    run->method_state = NULL;
}

/* v = A p; r0'v (2); s = r - alpha v (3); t = A s; t's, t't (2); x += alpha p + omega s,
 * r = s - omega t with r0'r (x, p, s, t, r0 read; x, r written: 7); p = r + beta (p - omega v)
 * (4): 18 beyond the two SpMVs. */
static double kd_bicgstab_floor(const kd_solve_params_t *params)
{
    (void)params;
    return 18.0;
}

const kd_method_ops_t kd_method_bicgstab = {
    .name = "bicgstab",
    .summary = "BiCGSTAB: any square A; right-preconditioned, two SpMVs and three reductions an "
               "iteration",
    .needs = KD_METHOD_NEEDS_SQUARE,
    .precond_forms = KD_PRECOND_IDENTITY | KD_PRECOND_DIAGONAL | KD_PRECOND_OPERATOR,
    .work_vectors = 5,
    .reductions = 3,
    .spmvs = 2,
    .floor_vectors = kd_bicgstab_floor,
    .setup = kd_bicgstab_setup,
    .iterate = kd_bicgstab_iterate,
    .restart = kd_bicgstab_restart,
    .check = kd_bicgstab_check,
    .finish = kd_bicgstab_finish,
};
