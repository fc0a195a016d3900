/*
 * cg1: conjugate gradient with the Chronopoulos-Gear recurrence (Chronopoulos and Gear, "s-step
 * iterative methods for symmetric linear systems", 1989; Ghysels and Vanroose 2014, algorithm 2),
 * preconditioned when given a diagonal M. The same iterates as CG in exact arithmetic, but the
 * two inner products of an iteration (r'u and w'u, u = M^-1 r, w = A u) are taken together, so an
 * iteration has one reduction where CG has two: one synchronisation when the matrix is spread
 * over several ranks. Per iteration: the SpMV w = A u with the dot w'u (fused on a csr_scalar
 * matrix on a GPU), then one pass (kernels/methods/cg1.cl) over p, s, x, r and u. It reads a little
 * more than two-pass CG (p and s besides d), so on one device it is no faster; it is here for the
 * distributed solver and as the worked example of adding a method (docs/ARCHITECTURE.md).
 */
#include "solver/methods/method.h"

#include <assert.h>

enum { KD_CG1_P = 0, KD_CG1_S = 1, KD_CG1_U = 2 }; /* work vectors */

/* u: M^-1 r with a preconditioner, else r itself. */
static kd_multivec_t *kd_cg1_u(kd_solve_run_t *run)
{
    return run->kr.diagonal != NULL ? &run->work[KD_CG1_U] : &run->r;
}

/* u = M^-1 r for every column (columns that did not restart get the u they had, bit for bit). */
static int kd_cg1_precondition(kd_solve_run_t *run, kd_err_t *err)
{
    if (run->kr.diagonal == NULL)
        return KD_OK;
    return kd_multivec_scale_rows(run->ocl, run->kr.diagonal, &run->r, &run->work[KD_CG1_U], err);
}

static int kd_cg1_setup(kd_solve_run_t *run, kd_err_t *err)
{
    assert(run != NULL);
    run->fused = run->csr != NULL;
    run->kr.fold_snapshots = 1; /* the update leaves r'r as partial sums */
    int rc;
    if ((rc = kd_multivec_zero(run->ocl, &run->work[KD_CG1_P], err)) != KD_OK ||
        (rc = kd_multivec_zero(run->ocl, &run->work[KD_CG1_S], err)) != KD_OK ||
        (rc = kd_cg1_precondition(run, err)) != KD_OK)
        return rc;
    return kd_krylov_residual(&run->kr, &run->r, NULL, NULL,
                              KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART, 0, err);
}

static int kd_cg1_iterate(kd_solve_run_t *run, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_multivec_t *u = kd_cg1_u(run), *w = &run->q;
    int rc;
    if (run->fused)
        rc = kd_krylov_dots3(kr, run->csr, u, w, &run->r, 0, it, err);
    else if ((rc = kd_solve_spmv(run, u, w, err)) == KD_OK)
        rc = kd_krylov_dots(kr, u, w, it, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "w'u, and r'r, r'u of the previous update", err);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, it, 0);
    return kd_krylov_launch_update(
        kr, "cg1", "kd_cg1_update", it,
        KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kr->threshold), KD_ARG_MEM(kr->limits),
                KD_ARG_MEM(kr->dot_partials), KD_ARG_MEM(kr->res_partials), KD_ARG_MEM(kr->scalars),
                KD_ARG_MEM(kr->state), KD_ARG_MEM(w->mem), KD_ARG_MEM(run->r.mem),
                KD_ARG_MEM(run->x.mem), KD_ARG_MEM(u->mem), KD_ARG_MEM(run->work[KD_CG1_P].mem),
                KD_ARG_MEM(run->work[KD_CG1_S].mem), KD_ARG_MEM(kr->diagonal)),
        err);
}

/* From the true residual: u = M^-1 r, r'r and r'u, alpha_old = 0 (so beta = 0: p = u, s = w). */
static int kd_cg1_restart(kd_solve_run_t *run, int *mask, int64_t it, kd_err_t *err)
{
    int rc = kd_cg1_precondition(run, err);
    return rc == KD_OK ? kd_krylov_residual(&run->kr, &run->r, NULL, mask, 0, it, err) : rc;
}

/* cg's 10 and the extra recurrence vector of the one-reduction form. */
static double kd_cg1_floor(const kd_solve_params_t *params)
{
    (void)params;
    return 11.0;
}

const kd_method_ops_t kd_method_cg1 = {
    .name = "cg1",
    .summary = "CG, Chronopoulos-Gear recurrence: one reduction an iteration (for several ranks)",
    .needs = KD_METHOD_NEEDS_SQUARE | KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD,
    .precond_forms = KD_PRECOND_IDENTITY | KD_PRECOND_DIAGONAL,
    .work_vectors = 3,
    .reductions = 1,
    .spmvs = 1,
    .spreads = 1,
    .floor_vectors = kd_cg1_floor,
    .setup = kd_cg1_setup,
    .iterate = kd_cg1_iterate,
    .restart = kd_cg1_restart,
    .check = kd_method_cg_check, /* the same quantities as CG's */
};
