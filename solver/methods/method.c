/*
 * What every method's iteration shares (method.h): the run's operator (q = A p through the
 * matrix's format, or the spread's SpMM across ranks), its preconditioner (z = M^-1 v in whatever
 * form M takes) and the reading of a final device state into a result. It names no method: the
 * table of methods and the choice among them are table.c's.
 */
#include "solver/methods/method.h"

#include <assert.h>
#include <stdarg.h>
#include <stdio.h>

/* The method needs a symmetric matrix (SPD implies it). */
int kd_method_needs_symmetry(const kd_method_ops_t *m)
{
    return (m->needs & (KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD)) != 0;
}

int kd_solve_spmv(kd_solve_run_t *run, const kd_multivec_t *p, kd_multivec_t *q, kd_err_t *err)
{
    const kd_solve_spread_t *spread = run->params->spread;
    if (spread != NULL)
        return spread->spmm(spread->ctx, run->ocl, 1.0, p, 0.0, q, run->active, err);
    int64_t active = 0;
    for (int64_t c = 0; c < run->k; c++)
        active += run->active[c] != 0;
    /* One SpMM over every column while at least half still run (a finished column's q is
     * scratch: computing it wastes its vector bytes, not the matrix's); then column by column. */
    if (active > 1 && 2 * active >= run->k && kd_matrix_has_spmm(run->A))
        return kd_matrix_spmm_inner(run->ocl, run->A, 1.0, p, 0.0, q, err);
    int rc = KD_OK;
    for (int64_t c = 0; rc == KD_OK && c < run->k; c++)
        if (run->active[c])
            rc = kd_matrix_spmv_inner(run->ocl, run->A, 1.0, &p->cols[c], 0.0, &q->cols[c], err);
    return rc;
}

int kd_method_precondition(kd_solve_run_t *run, const kd_multivec_t *v, kd_multivec_t *z,
                           kd_err_t *err)
{
    assert(run != NULL && v != NULL && z != NULL && v->mem != z->mem);
    const kd_precond_t *P = run->precond;
    if (P->diagonal != NULL)
        return kd_multivec_scale_rows(run->ocl, P->diagonal, v, z, err);
    if (P->ops->apply != NULL)
        return P->ops->apply(run->ocl, P, v, z, err);
    return kd_multivec_copy(run->ocl, v, z, NULL, err);
}

/* A final state into res: its status, its iteration count and a printf-style message; 1. */
static int kd_method_final(kd_solve_result_t *res, kd_solve_status_t status, int64_t iterations,
                           const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int kd_method_final(kd_solve_result_t *res, kd_solve_status_t status, int64_t iterations,
                           const char *fmt, ...)
{
    res->status = status;
    res->iterations = iterations;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(res->message, sizeof(res->message), fmt, ap);
    va_end(ap);
    return 1;
}

int kd_method_explain(const kd_krylov_column_t *st, int64_t skip, const char *pq_name,
                      const char *rz_name, kd_solve_result_t *res)
{
    const long long at = (long long)st->iteration;
    const int64_t before = st->iteration - 1 - skip; /* the failing iteration does not count */
    switch (st->status) {
    case KD_KRYLOV_BREAKDOWN:
        return kd_method_final(
            res, KD_SOLVE_BREAKDOWN, before,
            "%s = %.2g <= 0 at iteration %lld: the matrix is not symmetric positive definite",
            pq_name, st->fail, at);
    case KD_KRYLOV_ZERO_STEP:
        return kd_method_final(
            res, KD_SOLVE_BREAKDOWN, before,
            "zero step at iteration %lld: alpha = %s / %s = %g / %g underflows to 0: the matrix "
            "is not symmetric positive definite (or is scaled beyond the dtype)",
            at, rz_name, pq_name, st->fail, st->pq);
    case KD_KRYLOV_NON_FINITE_PQ:
        return kd_method_final(
            res, KD_SOLVE_NON_FINITE, before,
            "%s = %g at iteration %lld: the iterates overflowed during iteration", pq_name,
            st->fail, at);
    case KD_KRYLOV_NON_FINITE_ALPHA:
        return kd_method_final(res, KD_SOLVE_NON_FINITE, before,
                               "step length alpha = %s / %s = %g at iteration %lld (%s = %g) "
                               "overflows during iteration",
                               rz_name, pq_name, st->fail, at, pq_name, st->pq);
    case KD_KRYLOV_NON_FINITE_RESIDUAL:
        if (st->iteration == 0)
            return kd_method_final(res, KD_SOLVE_NON_FINITE, st->iteration - skip,
                                   "the initial residual b - A x0 is non-finite (r'r = %g) at "
                                   "iteration 0: A x0 overflows",
                                   st->fail);
        return kd_method_final(res, KD_SOLVE_NON_FINITE, st->iteration - skip,
                               "the residual became non-finite during iteration (r'r = %g) at "
                               "iteration %lld",
                               st->fail, at);
    default:
        return 0;
    }
}
