/*
 * Conjugate gradient, preconditioned when given a diagonal M (Jacobi), as Shewchuk derives it in
 * "An Introduction to the Conjugate Gradient Method Without the Agonizing Pain":
 *
 *   r = b - A x, z = M^-1 r, d = z, delta = r'z
 *   loop: q = A d, alpha = delta / d'q, r -= alpha q, x += alpha d,
 *         delta_new = r'z, beta = delta_new / delta, d = z + beta d
 *
 * An iteration is the SpMV and, by default, two passes (params->passes): kd_krylov_dots3 (d'q,
 * r'Mq, q'Mq), then kd_krylov_update_merged, which takes alpha and beta = (r'z - 2 alpha r'Mq +
 * alpha^2 q'Mq) / r'z from those sums and updates r, x and d in one pass, leaving the exact new
 * r'r and r'z as partial sums. passes = 3 splits the update in two with beta from the exact new
 * r'z; passes = 1 ("lean") takes r'Mq = d'q by conjugacy and skips reading r in the first pass
 * (one vector less, 8% more iterations on 494_bus). For a csr_scalar matrix on a GPU the SpMV
 * runs inside the first pass (kd_krylov_dots3 with the matrix's arrays): two launches an
 * iteration.
 *
 * With an operator preconditioner (AMG: z = M^-1 r is a launch sequence, not a diagonal), the
 * three passes with the operator and one more reducing pass between the last two:
 * update_residual (alpha, r -= alpha q), z = M^-1 r, the partial sums of r'r and r'z
 * (kd_krylov_operator_sums), update_direction (beta = new r'z / old r'z, x += alpha d,
 * d = z + beta d): still two reductions an iteration.
 */
#include "solver/methods/method.h"

#include <stdio.h>

#include <assert.h>
#include <float.h>
#include <stdlib.h>

enum { KD_CG_D = 0 }; /* the work vector: the direction */

/* The preconditioner is applied as an operator (it has no diagonal to fuse). */
static int kd_cg_operator(const kd_solve_run_t *run)
{
    return run->precond->diagonal == NULL && run->precond->ops->apply != NULL;
}

/* z = M^-1 r for every column, into the operator's z. */
static int kd_cg_apply(kd_solve_run_t *run, kd_err_t *err)
{
    kd_multivec_t *z = run->method_state;
    return run->precond->ops->apply(run->ocl, run->precond, &run->r, z, err);
}

/* 2 (default), 3, or 1 for two lean passes. */
static int kd_cg_passes(const kd_solve_run_t *run)
{
    const int p = kd_cg_operator(run) ? 3 : run->params->passes;
    return p == 3 ? 3 : p == 1 ? 1 : 2;
}

#define KD_CG_SMALL_R 16 /* kernels/methods/cg_small.cl's KD_SMALL_R: rows per work-item on chip   \
                          */

/* Many iterations per launch (kernels/methods/cg_small.cl): two passes with r'Mq (the default), an
 * identity or diagonal M, a format that keeps CSR arrays; by default on a GPU for a small
 * matrix, where the general path's launches and checks cost more than its arithmetic. */
static int kd_cg_small(const kd_solve_run_t *run)
{
    const int small = run->params->small;
    if (small == KD_SOLVE_SMALL_OFF || kd_cg_operator(run) || kd_cg_passes(run) != 2 ||
        kd_format_csr_arrays(run->A) == NULL)
        return 0;
    /* automatic: not where the caller forced the fused SpMV (the general path's) */
    return small == KD_SOLVE_SMALL_ON || small == KD_SOLVE_SMALL_GLOBAL ||
           (run->params->spmv_fusion != KD_SOLVE_FUSION_ON && kd_ocl_desc(run->ocl)->is_gpu &&
            run->A->rows <= KD_SOLVE_SMALL_ROWS);
}

static int kd_cg_iterate_chunk(kd_solve_run_t *run, int64_t first, int64_t count, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    const kd_format_csr_t *A = kd_format_csr_arrays(run->A);
    const int ops = kr->diagonal != NULL ? KD_KRYLOV_OP_DIAGONAL : 0;
    kd_krylov_launch_t L = kd_krylov_pass_block(kr, first, ops | KD_KRYLOV_OP_WITH_RQ);
    /* The local variant while the direction fits local memory (and rows the registers), unless
     * the caller forces the global one. */
    const size_t wg = kd_ocl_work_group_size(run->ocl);
    const size_t vsize = kd_dtype_size(run->kr.dtype);
    const int local = run->params->small != KD_SOLVE_SMALL_GLOBAL &&
                      (size_t)run->A->rows <= KD_CG_SMALL_R * wg &&
                      kd_ocl_desc(run->ocl)->local_mem_bytes >= (KD_CG_SMALL_R + 4) * wg * vsize;
    if (count > INT32_MAX)
        return kd_err_set(err, KD_EINTERNAL, "cg: %lld iterations in one launch", (long long)count);
    return kd_krylov_launch_groups(
        kr, "cg_small", local ? "kd_cg_small_local" : "kd_cg_small", 1,
        KD_ARGS(KD_KRYLOV_LAUNCH_ARGS(L), KD_ARG_INT(count), KD_ARG_MEM(kr->threshold),
                KD_ARG_MEM(kr->limits), KD_ARG_MEM(kr->res_partials), KD_ARG_MEM(kr->scalars),
                KD_ARG_MEM(kr->state), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                KD_ARG_MEM(A->values), KD_ARG_MEM(run->work[KD_CG_D].mem), KD_ARG_MEM(run->q.mem),
                KD_ARG_MEM(run->r.mem), KD_ARG_MEM(run->x.mem), KD_ARG_MEM(kr->diagonal)),
        err);
}

static int kd_cg_setup(kd_solve_run_t *run, kd_err_t *err)
{
    assert(run != NULL);
    run->chunked = kd_cg_small(run);
    run->fused = run->csr != NULL && !run->chunked;
    run->kr.fold_snapshots = kd_cg_passes(run) != 3; /* two passes leave r'r as partial sums */
    if (kd_cg_operator(run)) {
        kd_multivec_t *z = calloc(1, sizeof(*z));
        if (z == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory");
        run->method_state = z;
        int rc = kd_multivec_alloc(run->ocl, run->r.n, run->k, run->r.dtype, z, err);
        if (rc == KD_OK)
            rc = kd_cg_apply(run, err);
        if (rc != KD_OK)
            return rc;
        run->kr.operator_z = z->mem;
    }
    return kd_krylov_residual(
        &run->kr, &run->r, &run->work[KD_CG_D], NULL,
        KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_DIRECTION | KD_KRYLOV_MASK_RESTART, 0, err);
}

static int kd_cg_iterate(kd_solve_run_t *run, int64_t it, kd_err_t *err)
{
    kd_krylov_t *kr = &run->kr;
    kd_multivec_t *d = &run->work[KD_CG_D];
    const int passes = kd_cg_passes(run);
    const int rq = passes == 2 ? KD_KRYLOV_OP_WITH_RQ : 0;
    /* The first pass's dots: with two passes p'q, r'Mq and q'Mq, with three p'q alone. */
    const int first = passes == 3 ? 0 : rq | (kr->diagonal != NULL ? KD_KRYLOV_OP_DIAGONAL : 0);
    int rc;
    if (run->fused)
        rc = kd_krylov_dots3(kr, run->csr, d, &run->q, &run->r, first, it, err);
    else if ((rc = kd_solve_spmv(run, d, &run->q, err)) == KD_OK)
        rc = passes == 3 ? kd_krylov_dots(kr, d, &run->q, it, err)
                         : kd_krylov_dots3(kr, NULL, d, &run->q, &run->r, first, it, err);
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "d'q", err);
    if (rc != KD_OK)
        return rc;
    if (passes != 3) {
        rc = kd_krylov_update_merged(kr, &run->q, &run->r, &run->x, d, rq, it, err);
        return rc == KD_OK ? kd_krylov_reduce(kr, "r'r, r'z", err) : rc;
    }
    rc = kd_krylov_update_residual(kr, &run->q, &run->r, &run->x, 0, it, err);
    if (rc == KD_OK && kd_cg_operator(run)) {
        if ((rc = kd_cg_apply(run, err)) == KD_OK)
            rc = kd_krylov_operator_sums(kr, &run->r, it, err);
    }
    if (rc == KD_OK)
        rc = kd_krylov_reduce(kr, "r'r, r'z", err);
    if (rc == KD_OK)
        rc = kd_krylov_update_direction(kr, &run->r, &run->x, d, 0, it, err);
    return rc;
}

static int kd_cg_restart(kd_solve_run_t *run, int *mask, int64_t it, kd_err_t *err)
{
    for (int64_t c = 0; c < run->k; c++)
        if (mask[c] != 0)
            mask[c] |= KD_KRYLOV_MASK_DIRECTION; /* d = z */
    if (kd_cg_operator(run)) {
        int rc = kd_cg_apply(run, err); /* z = M^-1 r of every column: the others' z is rewritten
                                           before it is read again */
        if (rc != KD_OK)
            return rc;
    }
    return kd_krylov_residual(&run->kr, &run->r, &run->work[KD_CG_D], mask, 0, it, err);
}

int kd_method_cg_check(const kd_solve_run_t *run, const kd_krylov_column_t *st, int64_t skip,
                       kd_solve_result_t *res)
{
    const int final = kd_method_explain(
        st, skip, "p'Ap", run->kr.diagonal != NULL || run->kr.operator_z != NULL ? "r'z" : "r'r",
        res);
    /* p'Ap exactly 0 with r'r far below rounding of ||b|| is a direction that vanished, not an
     * indefinite A: the recurrence's residual underflowed (a tolerance of 0 asks for that) */
    const double eps = run->A->dtype == KD_DTYPE_F32 ? FLT_EPSILON : DBL_EPSILON;
    if (final && st->status == KD_KRYLOV_BREAKDOWN && st->fail == 0.0 &&
        st->rr <= eps * eps * res->b_norm * res->b_norm)
        snprintf(res->message, sizeof(res->message),
                 "p'Ap = 0 at iteration %lld: the search direction vanished (the residual "
                 "recurrence underflowed past rounding); a tolerance above 0 stops before",
                 (long long)st->iteration);
    /* On a symmetric A, p'Ap < 0 says A is indefinite: name the method that solves it. */
    else if (final && st->status == KD_KRYLOV_BREAKDOWN && run->A->scan.symmetric)
        snprintf(res->message, sizeof(res->message),
                 "p'Ap = %.2g <= 0 at iteration %lld: the matrix is symmetric but not positive "
                 "definite; try method minres",
                 st->fail, (long long)st->iteration);
    return final;
}

static void kd_cg_finish(kd_solve_run_t *run)
{
    kd_multivec_t *z = run->method_state;
    if (z != NULL)
        kd_multivec_release(z);
    free(z);
    run->method_state = NULL;
    run->kr.operator_z = NULL;
}

/* p'q (p, q); x += alpha p, r -= alpha q with r'r (x, p, r, q read; x, r written); p = r + beta p
 * (r, p read; p written): 10 (bench/ takes one off for the lean passes, two for a fused SpMV). */
static double kd_cg_floor(const kd_solve_params_t *params)
{
    (void)params;
    return 10.0;
}

const kd_method_ops_t kd_method_cg = {
    .name = "cg",
    .summary = "conjugate gradient: symmetric positive definite A; two passes an iteration",
    .needs = KD_METHOD_NEEDS_SQUARE | KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD,
    .precond_forms = KD_PRECOND_IDENTITY | KD_PRECOND_DIAGONAL | KD_PRECOND_OPERATOR,
    .work_vectors = 1,
    .reductions = 2,
    .spmvs = 1,
    .spreads = 1,
    .floor_vectors = kd_cg_floor,
    .setup = kd_cg_setup,
    .iterate = kd_cg_iterate,
    .iterate_chunk = kd_cg_iterate_chunk,
    .restart = kd_cg_restart,
    .check = kd_method_cg_check,
    .finish = kd_cg_finish,
};
