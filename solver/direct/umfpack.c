/*
 * umfpack: UMFPACK's multifrontal sparse LU (SuiteSparse) for general unsymmetric matrices: a
 * column ordering (COLAMD or AMD, chosen by the symbolic analysis from A's symmetry), threshold
 * partial pivoting, dense frontal matrices through BLAS. The symbolic analysis estimates the
 * numeric object's final size (Info[UMFPACK_NUMERIC_SIZE_ESTIMATE], in units).
 */
#include "solver/direct/direct.h"

#include <umfpack.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kd_umfpack {
    double control[UMFPACK_CONTROL], info[UMFPACK_INFO];
    void *symbolic, *numeric;
    int n;
} kd_umfpack_t;

static void kd_umfpack_release(void *state)
{
    kd_umfpack_t *u = state;
    if (u == NULL)
        return;
    if (u->numeric != NULL)
        umfpack_di_free_numeric(&u->numeric);
    if (u->symbolic != NULL)
        umfpack_di_free_symbolic(&u->symbolic);
    free(u);
}

static int kd_umfpack_error(int status, const char *what, kd_err_t *err)
{
    if (status == UMFPACK_ERROR_out_of_memory)
        return kd_err_set(err, KD_ENOMEM, "%s: out of host memory", what);
    return kd_err_set(err, KD_EINTERNAL, "%s failed (status %d)", what, status);
}

static int kd_umfpack_analyze(int64_t n, const int32_t *colptr, const int32_t *rows,
                              const double *values, void **state, double *entries, double *bytes,
                              int *singular, char *why, size_t whylen, kd_err_t *err)
{
    (void)why, (void)whylen;
    kd_umfpack_t *u = calloc(1, sizeof(*u));
    *state = NULL;
    *singular = 0;
    if (u == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for umfpack");
    umfpack_di_defaults(u->control);
    u->n = (int)n;
    const int status =
        umfpack_di_symbolic(u->n, u->n, colptr, rows, values, &u->symbolic, u->control, u->info);
    if (status != UMFPACK_OK) {
        kd_umfpack_release(u);
        return kd_umfpack_error(status, "umfpack_di_symbolic", err);
    }
    *entries = u->info[UMFPACK_LNZ_ESTIMATE] + u->info[UMFPACK_UNZ_ESTIMATE];
    *bytes = u->info[UMFPACK_NUMERIC_SIZE_ESTIMATE] * u->info[UMFPACK_SIZE_OF_UNIT];
    *state = u;
    return KD_OK;
}

static int kd_umfpack_factor(void *state, const int32_t *colptr, const int32_t *rows,
                             const double *values, int64_t *entries, size_t *bytes, int *singular,
                             char *why, size_t whylen, kd_err_t *err)
{
    kd_umfpack_t *u = state;
    *singular = 0;
    const int status =
        umfpack_di_numeric(colptr, rows, values, u->symbolic, &u->numeric, u->control, u->info);
    if (status == UMFPACK_WARNING_singular_matrix) {
        *singular = 1;
        snprintf(why, whylen,
                 "numerically singular: U has %.0f nonzero diagonal entries of %d (UMFPACK)",
                 u->info[UMFPACK_UDIAG_NZ], u->n);
        return KD_OK;
    }
    if (status != UMFPACK_OK)
        return kd_umfpack_error(status, "umfpack_di_numeric", err);
    int lnz = 0, unz = 0, nr = 0, nc = 0, udiag = 0;
    if (umfpack_di_get_lunz(&lnz, &unz, &nr, &nc, &udiag, u->numeric) == UMFPACK_OK)
        *entries = (int64_t)lnz + (int64_t)unz;
    *bytes = (size_t)(u->info[UMFPACK_NUMERIC_SIZE] * u->info[UMFPACK_SIZE_OF_UNIT]);
    return KD_OK;
}

/* umfpack_di_numeric with like's symbolic object (its column ordering and frontal structure),
 * which moves into the new state: like keeps its numeric object, all its solves need. Refused
 * when the new values are singular on that ordering (the caller factors afresh). */
static int kd_umfpack_refactor(void *like_state, void **state, const int32_t *colptr,
                               const int32_t *rows, const double *values, int64_t *entries,
                               size_t *bytes, int *declined, int *like_spent, char *why,
                               size_t whylen, kd_err_t *err)
{
    kd_umfpack_t *like = like_state, *u = calloc(1, sizeof(*u));
    *state = NULL;
    *declined = 0;
    *like_spent = 0;
    if (u == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for umfpack");
    if (like->symbolic == NULL) { /* moved on by an earlier refactor */
        free(u);
        *declined = 1;
        snprintf(why, whylen, "the like matrix's analysis went to another refactor");
        return KD_OK;
    }
    memcpy(u->control, like->control, sizeof(u->control));
    u->n = like->n;
    u->symbolic = like->symbolic;
    like->symbolic = NULL;
    int singular = 0;
    int rc =
        kd_umfpack_factor(u, colptr, rows, values, entries, bytes, &singular, why, whylen, err);
    if (rc != KD_OK || singular) {
        *declined = singular;
        kd_umfpack_release(u);
        return rc;
    }
    *state = u;
    return KD_OK;
}

static int kd_umfpack_solve(void *state, const int32_t *colptr, const int32_t *rows,
                            const double *values, int64_t nrhs, double *B, kd_err_t *err)
{
    kd_umfpack_t *u = state;
    double *x = malloc((size_t)(u->n > 0 ? u->n : 1) * sizeof(double));
    if (x == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for umfpack's solve");
    double control[UMFPACK_CONTROL], info[UMFPACK_INFO];
    memcpy(control, u->control, sizeof(control));
    control[UMFPACK_IRSTEP] = 0; /* refinement is the caller's, on every library alike */
    int rc = KD_OK;
    for (int64_t k = 0; k < nrhs && rc == KD_OK; k++) {
        double *b = B + (size_t)k * (size_t)u->n;
        /* A^T was factored: UMFPACK_At solves the client's A x = b */
        const int status =
            umfpack_di_solve(UMFPACK_At, colptr, rows, values, x, b, u->numeric, control, info);
        if (status != UMFPACK_OK && status != UMFPACK_WARNING_singular_matrix)
            rc = kd_umfpack_error(status, "umfpack_di_solve", err);
        else
            memcpy(b, x, (size_t)u->n * sizeof(double));
    }
    free(x);
    return rc;
}

const kd_direct_ops_t kd_direct_umfpack = {
    .name = "umfpack",
    .summary = "multifrontal sparse LU for general matrices (UMFPACK)",
    .analyze = kd_umfpack_analyze,
    .factor = kd_umfpack_factor,
    .refactor = kd_umfpack_refactor,
    .solve = kd_umfpack_solve,
    .release = kd_umfpack_release,
};
