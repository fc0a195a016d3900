/*
 * Steepest descent (Shewchuk's derivation): the direction is the residual itself.
 *
 *   r = b - A x; loop: q = A r, alpha = r'r / r'q, x += alpha r, r -= alpha q
 *
 * An iteration is the SpMV (fused with the dot on a csr_scalar matrix on a GPU), kd_krylov_dots
 * (r'q), kd_krylov_update_residual with KD_KRYLOV_OP_ALONG_R (x and r, and r'r's partial sums),
 * and kd_krylov_update_direction, which only folds r'r. No preconditioner, no work vectors.
 */
#include "solver/methods/method.h"

#include <assert.h>

static int kd_sd_setup(kd_solve_run_t *run, kd_err_t *err)
{
    assert(run != NULL);
    run->fused = run->csr != NULL;
    run->kr.fold_snapshots = 0;
    return kd_krylov_residual(&run->kr, &run->r, NULL, NULL,
                              KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART, 0, err);
}

static int kd_sd_iterate(kd_solve_run_t *run, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    int rc;
    if (run->fused)
        rc = kd_krylov_dots3(kr, run->csr, &run->r, &run->q, &run->r, 0, it, err);
    else if ((rc = kd_solve_spmv(run, &run->r, &run->q, err)) == KD_OK)
        rc = kd_krylov_dots(kr, &run->r, &run->q, it, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "r'q", err);
    if (rc == KD_OK)
        rc =
            kd_krylov_update_residual(kr, &run->q, &run->r, &run->x, KD_KRYLOV_OP_ALONG_R, it, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "r'r", err);
    if (rc == KD_OK)
        rc = kd_krylov_update_direction(kr, &run->r, NULL, NULL, KD_KRYLOV_OP_ALONG_R, it, err);
    return rc;
}

static int kd_sd_restart(kd_solve_run_t *run, int *mask, int64_t it, kd_err_t *err)
{
    return kd_krylov_residual(&run->kr, &run->r, NULL, mask, 0, it, err);
}

static int kd_sd_check(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                       kd_solve_result_t *res)
{
    (void)run;
    return kd_method_explain(st, skip, "r'Ar", "r'r", res);
}

/* r'q (r, q); x += alpha r, r -= alpha q (x, r, q read; x, r written). */
static double kd_sd_floor(const kd_solve_params_t *params)
{
    (void)params;
    return 7.0;
}

const kd_method_ops_t kd_method_sd = {
    .name = "sd",
    .summary = "steepest descent: symmetric positive definite A; slow, for teaching and tests",
    .needs = KD_METHOD_NEEDS_SQUARE | KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD,
    .precond_forms = KD_PRECOND_IDENTITY,
    .work_vectors = 0,
    .reductions = 2,
    .spmvs = 1,
    .spreads = 1,
    .floor_vectors = kd_sd_floor,
    .setup = kd_sd_setup,
    .iterate = kd_sd_iterate,
    .restart = kd_sd_restart,
    .check = kd_sd_check,
};
