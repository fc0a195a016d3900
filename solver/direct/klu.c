/*
 * klu: KLU's sparse LU (SuiteSparse), made for circuit matrices: a block triangular form (BTF)
 * that splits A into its strongly connected blocks, AMD ordering of each block, and a left-looking
 * LU with partial pivoting, so zero or missing diagonal entries (adder_dcop_05, bayer10) are no
 * obstacle. The analysis's lnz and unz estimate L's and U's entries before the numeric phase;
 * the structural rank from the BTF step tells a structurally singular matrix apart.
 */
#include "solver/direct/direct.h"

#include <klu.h>

#include <stdio.h>
#include <stdlib.h>

typedef struct kd_klu {
    klu_common common;
    klu_symbolic *symbolic;
    klu_numeric *numeric;
    int n;
    double rcond; /* klu_rcond's min |u_ii| / max |u_ii| of the factor: refactor's yardstick */
} kd_klu_t;

/* A refactor's pivots are refused when they lost this much against the fresh factor's. */
#define KD_KLU_RCOND_LOSS 1e-6

static void kd_klu_release(void *state)
{
    kd_klu_t *k = state;
    if (k == NULL)
        return;
    if (k->numeric != NULL)
        klu_free_numeric(&k->numeric, &k->common);
    if (k->symbolic != NULL)
        klu_free_symbolic(&k->symbolic, &k->common);
    free(k);
}

static int kd_klu_analyze(int64_t n, const int32_t *colptr, const int32_t *rows,
                          const double *values, void **state, double *entries, double *bytes,
                          int *singular, char *why, size_t whylen, kd_err_t *err)
{
    (void)values;
    kd_klu_t *k = calloc(1, sizeof(*k));
    *state = NULL;
    *singular = 0;
    if (k == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for klu");
    klu_defaults(&k->common);
    k->n = (int)n;
    k->symbolic = klu_analyze(k->n, (int *)colptr, (int *)rows, &k->common);
    if (k->symbolic == NULL) {
        const int status = k->common.status;
        kd_klu_release(k);
        return status == KLU_OUT_OF_MEMORY
                   ? kd_err_set(err, KD_ENOMEM, "klu_analyze: out of host memory")
                   : kd_err_set(err, KD_EINTERNAL, "klu_analyze failed (status %d)", status);
    }
    if (k->symbolic->structural_rank >= 0 && k->symbolic->structural_rank < k->n) {
        *singular = 1;
        snprintf(why, whylen,
                 "structurally singular: structural rank %d of %d (no permutation puts a "
                 "nonzero on every diagonal entry)",
                 k->symbolic->structural_rank, k->n);
        kd_klu_release(k);
        return KD_OK;
    }
    /* L and U (values and row indices), the pivots and scale factors, and KLU's 20% slack */
    *entries = k->symbolic->lnz + k->symbolic->unz;
    *bytes = (1.2 * *entries + k->symbolic->nzoff) * (double)(sizeof(double) + sizeof(int)) +
             (double)n * 64.0;
    *state = k;
    return KD_OK;
}

static int kd_klu_factor(void *state, const int32_t *colptr, const int32_t *rows,
                         const double *values, int64_t *entries, size_t *bytes, int *singular,
                         char *why, size_t whylen, kd_err_t *err)
{
    kd_klu_t *k = state;
    *singular = 0;
    k->numeric = klu_factor((int *)colptr, (int *)rows, (double *)values, k->symbolic, &k->common);
    if (k->numeric == NULL) {
        if (k->common.status == KLU_SINGULAR) {
            *singular = 1;
            /* KLU factors A^T: its column is the client's row */
            snprintf(why, whylen,
                     "numerically singular: a zero pivot at row %d (0-based) of the matrix",
                     k->common.singular_col);
            return KD_OK;
        }
        return k->common.status == KLU_OUT_OF_MEMORY
                   ? kd_err_set(err, KD_ENOMEM, "klu_factor: out of host memory")
                   : kd_err_set(err, KD_EINTERNAL, "klu_factor failed (status %d)",
                                k->common.status);
    }
    *entries = (int64_t)k->numeric->lnz + (int64_t)k->numeric->unz;
    *bytes = k->common.memusage;
    k->rcond = klu_rcond(k->symbolic, k->numeric, &k->common) ? k->common.rcond : 0.0;
    return KD_OK;
}

/* klu_refactor on like's pivot order, in like's numeric object, which moves into the new state
 * (KLU cannot copy one): like is spent. Refused when klu_refactor meets a zero pivot or the
 * pivots' ratio fell by KD_KLU_RCOND_LOSS against the factor's own (the kept order no longer
 * fits the values): then the caller factors afresh. */
static int kd_klu_refactor(void *like_state, void **state, const int32_t *colptr,
                           const int32_t *rows, const double *values, int64_t *entries,
                           size_t *bytes, int *declined, int *like_spent, char *why, size_t whylen,
                           kd_err_t *err)
{
    kd_klu_t *like = like_state, *k = calloc(1, sizeof(*k));
    *state = NULL;
    *declined = 0;
    if (k == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for klu");
    k->common = like->common;
    k->n = like->n;
    k->symbolic = like->symbolic;
    k->numeric = like->numeric;
    like->symbolic = NULL;
    like->numeric = NULL;
    *like_spent = 1;
    const int ok = klu_refactor((int *)colptr, (int *)rows, (double *)values, k->symbolic,
                                k->numeric, &k->common);
    k->rcond = ok && klu_rcond(k->symbolic, k->numeric, &k->common) ? k->common.rcond : 0.0;
    if (!ok || !(k->rcond >= like->rcond * KD_KLU_RCOND_LOSS)) {
        *declined = 1;
        if (!ok)
            snprintf(why, whylen, "klu_refactor: %s (status %d)",
                     k->common.status == KLU_SINGULAR ? "a zero pivot" : "failed",
                     k->common.status);
        else
            snprintf(why, whylen, "the kept pivot order's min/max |u_ii| fell from %.3g to %.3g",
                     like->rcond, k->rcond);
        kd_klu_release(k);
        return KD_OK;
    }
    *entries = (int64_t)k->numeric->lnz + (int64_t)k->numeric->unz;
    *bytes = k->common.memusage;
    *state = k;
    return KD_OK;
}

static int kd_klu_solve(void *state, const int32_t *colptr, const int32_t *rows,
                        const double *values, int64_t nrhs, double *B, kd_err_t *err)
{
    (void)colptr, (void)rows, (void)values;
    kd_klu_t *k = state;
    /* A^T was factored: its transpose solve is the client's A x = b */
    if (!klu_tsolve(k->symbolic, k->numeric, k->n, (int)nrhs, B, &k->common))
        return kd_err_set(err, KD_EINTERNAL, "klu_tsolve failed (status %d)", k->common.status);
    return KD_OK;
}

const kd_direct_ops_t kd_direct_klu = {
    .name = "klu",
    .summary = "sparse LU for circuit-like matrices (KLU: BTF, AMD, partial pivoting)",
    .analyze = kd_klu_analyze,
    .factor = kd_klu_factor,
    .refactor = kd_klu_refactor,
    .solve = kd_klu_solve,
    .release = kd_klu_release,
};
