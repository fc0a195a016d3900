/*
 * The method table: every kd_method_ops_t of this build, found by its wire name, and the aliases
 * the protocol keeps. To add a method: write solver/method_<name>.c (and its kernels), exporting
 * a kd_method_ops_t, declare it in method.h and add one row to kd_method_table. Nothing else
 * names methods: the protocol, server.status, the clients' messages and the driver all go
 * through this table.
 */
#include "solver/method.h"

#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const kd_method_ops_t *const kd_method_table[] = {
    &kd_method_cg,
    &kd_method_sd,
    &kd_method_cg1,
    &kd_method_bicgstab,
    &kd_method_minres,
};
const size_t kd_method_count = sizeof(kd_method_table) / sizeof(kd_method_table[0]);

const kd_method_alias_t kd_method_aliases[] = {
    {"pcg", "cg", "jacobi"},
};
const size_t kd_method_alias_count = sizeof(kd_method_aliases) / sizeof(kd_method_aliases[0]);

const kd_method_ops_t *kd_method_find(const char *name)
{
    assert(name != NULL);
    for (size_t i = 0; i < kd_method_count; i++)
        if (strcmp(kd_method_table[i]->name, name) == 0)
            return kd_method_table[i];
    return NULL;
}

void kd_method_names(char *out, size_t cap)
{
    size_t w = 0;
    assert(out != NULL && cap > 0);
    out[0] = '\0';
    for (size_t i = 0; i < kd_method_count && w < cap; i++)
        w +=
            (size_t)snprintf(out + w, cap - w, "%s%s", i > 0 ? ", " : "", kd_method_table[i]->name);
    for (size_t i = 0; i < kd_method_alias_count && w < cap; i++)
        w += (size_t)snprintf(out + w, cap - w, "%s%s = %s + %s%s", i == 0 ? " (" : ", ",
                              kd_method_aliases[i].name, kd_method_aliases[i].method,
                              kd_method_aliases[i].precond,
                              i + 1 == kd_method_alias_count ? ")" : "");
}

int kd_method_choose(const char *method, const char *preconditioner, const kd_method_ops_t **m,
                     const kd_precond_ops_t **p, kd_err_t *err)
{
    char names[256];
    const char *precond_name =
        preconditioner != NULL && preconditioner[0] != '\0' ? preconditioner : NULL;
    assert(m != NULL && p != NULL);
    *m = NULL;
    *p = NULL;
    if (method == NULL || method[0] == '\0')
        method = kd_method_table[0]->name;
    for (size_t i = 0; i < kd_method_alias_count; i++)
        if (strcmp(method, kd_method_aliases[i].name) == 0) {
            method = kd_method_aliases[i].method;
            if (precond_name == NULL)
                precond_name = kd_method_aliases[i].precond;
        }
    const kd_method_ops_t *mo = kd_method_find(method);
    if (mo == NULL) {
        kd_method_names(names, sizeof(names));
        return kd_err_set(err, KD_EBADREQ, "unknown method '%.64s': this server has %s", method,
                          names);
    }
    const kd_precond_ops_t *po = kd_precond_find(precond_name != NULL ? precond_name : "none");
    if (po == NULL) {
        kd_precond_names(names, sizeof(names));
        return kd_err_set(err, KD_EBADREQ, "unknown preconditioner '%.64s': this server has %s",
                          precond_name, names);
    }
    if ((mo->precond_forms & po->forms) == 0)
        return kd_err_set(err, KD_EBADREQ, "method %s takes no preconditioner %s%s", mo->name,
                          po->name,
                          mo->precond_forms == KD_PRECOND_IDENTITY ? " (it takes none)" : "");
    if ((mo->needs & KD_METHOD_NEEDS_SPD) != 0 && !po->symmetric)
        return kd_err_set(err, KD_EBADREQ,
                          "method %s needs a symmetric preconditioner; %s is not symmetric",
                          mo->name, po->name);
    *m = mo;
    *p = po;
    return KD_OK;
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
