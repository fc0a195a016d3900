/*
 * MINRES (Paige and Saunders 1975) for symmetric, possibly indefinite A, with SciPy's minres
 * recurrence (r1, r2, y = M^-1 r2, beta, oldb, alfa, dbar, epsln, phibar, cs, sn, w, w1, w2) so
 * that the iterations match; M must be symmetric positive definite (a preconditioner whose
 * ops->symmetric says so). The rotation's scalars live on the device in the method's own buffer,
 * per column and parity; every group of the update pass runs the recurrence (group 0 writes), so
 * nothing waits on the host.
 *
 * An iteration (kernels/methods/minres.cl): the SpMV q = A y with the partials of y'q (one launch
 * on a csr_scalar matrix with fusion; alfa = v'Av = y'q / beta^2 since v = y / beta is never
 * formed), then one update pass that folds y'q and beta^2 = r2'y (reduction 1 and the previous
 * iteration's reduction 2), applies the previous rotation and updates w and x, and takes the
 * Lanczos step r_new = q / beta - (beta / oldb) r1 - (alfa / beta) r2 with the partials of
 * r_new'M^-1 r_new (reduction 2). With an operator M, the operator and a small reducing pass
 * follow the update instead. Two reductions an iteration; x lags the Lanczos step by one
 * iteration (a rotation needs the next beta), so a column converged "after iteration j - 1" is
 * seen in iteration j, and a column stopped at max_iterations holds the iterate of one
 * iteration fewer than it counts.
 *
 * Buffers' roles rotate with the iteration j on the host instead of copying: r_j lives in
 * R[j & 1] (R[1] is run->r, R[0] a work vector), the update writes r_{j+1} over r_{j-1}; w_m in
 * W[m & 1] over w_{m-2}; with an operator y_j = M^-1 r_j in Y[j & 1] (with a diagonal one Y
 * holds y_j for the SpMV, and y_{j-1} is formed from r1 on the fly; without one y is r2).
 *
 * The estimate. phibar is ||r||_{M^-1} = sqrt(r'M^-1 r) of the current x; the driver's
 * threshold is on ||r||_2^2. Without a preconditioner they are the same (exact in exact
 * arithmetic). With one, the column claims convergence when phibar^2 * ratio <= threshold,
 * ratio = r0'r0 / r0'M^-1 r0 of its (re)start: no bound either way, so the driver's confirmation
 * with b - A x decides; a miss restarts from the true residual (a new ratio measured there), so
 * each cycle starts from an estimate that is exact, and max_iterations bounds the restarts.
 */
#include "solver/methods/method.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>

enum { KD_MR_R0 = 0, KD_MR_W0 = 1, KD_MR_W1 = 2, KD_MR_Y0 = 3, KD_MR_Y1 = 4 }; /* work vectors */
enum { KD_MR_SLOTS = 10 }; /* kernels/methods/minres.cl's own scalars per column */

typedef struct kd_minres {
    cl_mem own; /* 2 * k * KD_MR_SLOTS values */
} kd_minres_t;

static int kd_minres_operator(const kd_solve_run_t *run)
{
    return run->precond->diagonal == NULL && run->precond->ops->apply != NULL;
}

static int kd_minres_identity(const kd_solve_run_t *run)
{
    return run->precond->diagonal == NULL && run->precond->ops->apply == NULL;
}

/* r_j's buffer. */
static kd_multivec_t *kd_minres_r(kd_solve_run_t *run, int64_t j)
{
    return (j & 1) != 0 ? &run->r : &run->work[KD_MR_R0];
}

/* y_j = M^-1 r_j's buffer (r_j itself without a preconditioner). */
static kd_multivec_t *kd_minres_y(kd_solve_run_t *run, int64_t j)
{
    if (kd_minres_identity(run))
        return kd_minres_r(run, j);
    if (!kd_minres_operator(run))
        return &run->work[KD_MR_Y0];
    return &run->work[(j & 1) != 0 ? KD_MR_Y1 : KD_MR_Y0];
}

static cl_mem kd_minres_own(const kd_solve_run_t *run)
{
    return ((const kd_minres_t *)run->method_state)->own;
}

/* The operator's ops bit, which kr adds only for its own operator_z. */
static int kd_minres_ops(const kd_solve_run_t *run)
{
    return kd_minres_operator(run) ? KD_KRYLOV_OP_OPERATOR : 0;
}

/*
 * The masked columns (mask NULL: every column) start over at iteration `it` from the residual in
 * run->r: it moves to r_{it+1}'s buffer, y = M^-1 r, r'r and the state (kd_krylov_residual), the
 * rotation's start and beta1^2's partials (kd_minres_restart).
 */
static int kd_minres_start(kd_solve_run_t *run, const int *mask, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_multivec_t *r = kd_minres_r(run, it + 1), *y = kd_minres_y(run, it + 1);
    int rc = KD_OK;
    if (r != &run->r) {
        unsigned char *which = malloc((size_t)run->k);
        if (which == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory");
        for (int64_t c = 0; c < run->k; c++)
            which[c] = mask == NULL || mask[c] != 0;
        rc = kd_multivec_copy(run->ocl, &run->r, r, which, err);
        free(which);
    }
    /* Every column's y from its r_{it+1}: the running ones get the y they had. */
    if (rc == KD_OK && kd_minres_operator(run))
        rc = kd_method_precondition(run, r, y, err);
    if (rc == KD_OK)
        rc = kd_krylov_residual(kr, &run->r, NULL, mask,
                                KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART, it, err);
    if (rc != KD_OK)
        return rc;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, it + 1, kd_minres_ops(run));
    L.mask_all = KD_KRYLOV_MASK_PARTIALS;
    return kd_krylov_launch(
        kr, "minres", "kd_minres_restart",
        KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(mask != NULL ? kr->mask : (cl_mem)NULL),
                KD_ARG_MEM(kd_minres_own(run)), KD_ARG_MEM(r->mem), KD_ARG_MEM(y->mem),
                KD_ARG_MEM(kr->diagonal), KD_ARG_MEM(kr->res_partials)),
        err);
}

static int kd_minres_setup(kd_solve_run_t *run, kd_err_t *err)
{
    assert(run != NULL);
    const kd_precond_ops_t *po = run->params->precond;
    if (!po->symmetric)
        return kd_err_set(err, KD_EBADREQ,
                          "minres needs a symmetric positive definite preconditioner; %s is not",
                          po->name);
    kd_minres_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    run->method_state = st;
    run->fused = run->csr != NULL;
    run->kr.fold_snapshots = 0; /* the update writes the estimate itself */
    const size_t v = kd_dtype_size(run->r.dtype);
    const size_t bytes = 2 * (size_t)run->k * KD_MR_SLOTS * v;
    int rc = kd_ocl_buffer_create(run->ocl, CL_MEM_READ_WRITE, bytes, NULL, "minres scalars",
                                  &st->own, err);
    if (rc == KD_OK) {
        const double zero = 0.0;
        const float zero32 = 0.0f;
        cl_int cst = clEnqueueFillBuffer(kd_ocl_queue(run->ocl), st->own,
                                         run->r.dtype == KD_DTYPE_F64 ? (const void *)&zero
                                                                      : (const void *)&zero32,
                                         v, 0, bytes, 0, NULL, NULL);
        if (cst != CL_SUCCESS)
            rc = kd_ocl_fail(err, cst, "clEnqueueFillBuffer (minres scalars)");
    }
    return rc == KD_OK ? kd_minres_start(run, NULL, 0, err) : rc;
}

static int kd_minres_iterate(kd_solve_run_t *run, int64_t j, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_multivec_t *y = kd_minres_y(run, j), *q = &run->q;
    kd_multivec_t *r1 = kd_minres_r(run, j - 1), *r2 = kd_minres_r(run, j);
    kd_multivec_t *wa = &run->work[(j - 1) & 1 ? KD_MR_W1 : KD_MR_W0];
    kd_multivec_t *wb = &run->work[j & 1 ? KD_MR_W1 : KD_MR_W0];
    int rc;
    if (run->fused)
        rc = kd_krylov_dots3(kr, run->csr, y, q, y, 0, j, err);
    else if ((rc = kd_solve_spmv(run, y, q, err)) == KD_OK)
        rc = kd_krylov_dots(kr, y, q, j, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "y'Ay (alfa)", err);
    if (rc != KD_OK)
        return rc;
    const kd_krylov_launch_t L = kd_krylov_pass_block(kr, j, kd_minres_ops(run));
    /* yold: y_{j-1}, an operator's (its buffer is Y[(j - 1) & 1], y_{j+1}'s after this). */
    kd_multivec_t *yold = kd_minres_operator(run) ? kd_minres_y(run, j - 1) : r1;
    rc = kd_krylov_launch(
        kr, "minres", "kd_minres_update",
        KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kr->threshold), KD_ARG_MEM(kr->limits),
                KD_ARG_MEM(kr->dot_partials), KD_ARG_MEM(kr->res_partials), KD_ARG_MEM(kr->scalars),
                KD_ARG_MEM(kr->state), KD_ARG_MEM(kd_minres_own(run)), KD_ARG_MEM(q->mem),
                KD_ARG_MEM(r1->mem), KD_ARG_MEM(r2->mem), KD_ARG_MEM(run->x.mem),
                KD_ARG_MEM(wa->mem), KD_ARG_MEM(wb->mem), KD_ARG_MEM(yold->mem), KD_ARG_MEM(y->mem),
                KD_ARG_MEM(kr->diagonal)),
        err);
    if (rc == KD_OK && kd_minres_operator(run)) {
        kd_multivec_t *ynew = kd_minres_y(run, j + 1);
        rc = kd_method_precondition(run, r1, ynew, err); /* r1's buffer now holds r_{j+1} */
        if (rc == KD_OK)
            rc = kd_krylov_launch(kr, "minres", "kd_minres_sums",
                                  KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_MEM(kd_minres_own(run)),
                                          KD_ARG_MEM(r1->mem), KD_ARG_MEM(ynew->mem),
                                          KD_ARG_MEM(kr->res_partials)),
                                  err);
    }
    return rc == KD_OK ? kd_krylov_reduce(kr, "r'M^-1 r (beta^2)", err) : rc;
}

static int kd_minres_restart(kd_solve_run_t *run, int *mask, int64_t it, kd_err_t *err)
{
    return kd_minres_start(run, mask, it, err);
}

static int kd_minres_check(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                           kd_solve_result_t *res)
{
    if (st->status != KD_KRYLOV_BREAKDOWN)
        return kd_method_explain(st, skip, "y'Ay", "r'M^-1 r", res);
    res->status = KD_SOLVE_BREAKDOWN;
    res->iterations = st->iteration - 1 - skip;
    snprintf(res->message, sizeof(res->message),
             "r'M^-1 r = %.3g at iteration %lld: the preconditioner %s is not positive definite "
             "(MINRES needs M symmetric positive definite)",
             st->fail, (long long)st->iteration, run->precond->ops->name);
    return 1;
}

static void kd_minres_finish(kd_solve_run_t *run)
{
    kd_minres_t *st = run->method_state;
    if (st != NULL && st->own != NULL)
        clReleaseMemObject(st->own);
    free(st);
    run->method_state = NULL;
}

/* y = A v; v'y, v'r1 in one pass (3); y' = y - c1 r1 - c2 r2 with y''y' (4); w = (v - e w1 -
 * d w2) / g and x += phi w (v, w1, w2, x read; w, x written: 6): 13 beyond the SpMV. */
static double kd_minres_floor(const kd_solve_params_t *params)
{
    (void)params;
    return 13.0;
}

const kd_method_ops_t kd_method_minres = {
    .name = "minres",
    .summary = "MINRES: symmetric (indefinite) A, SPD preconditioner; two reductions an iteration",
    .needs = KD_METHOD_NEEDS_SQUARE | KD_METHOD_NEEDS_SYMMETRIC,
    .precond_forms = KD_PRECOND_IDENTITY | KD_PRECOND_DIAGONAL | KD_PRECOND_OPERATOR,
    .work_vectors = 5,
    .reductions = 2,
    .spmvs = 1,
    .floor_vectors = kd_minres_floor,
    .setup = kd_minres_setup,
    .iterate = kd_minres_iterate,
    .restart = kd_minres_restart,
    .check = kd_minres_check,
    .finish = kd_minres_finish,
};
