/*
 * What every factorisation library shares (direct.h): A's copy in double, the choice of library,
 * the budget charged between the symbolic analysis and the numeric factorisation, the refactor
 * on a kept analysis, and the solve with iterative refinement on the copy. It names no library:
 * the table (table.c) does.
 */
#include "solver/direct/direct.h"
#include "common/checked.h"
#include "common/clock.h"
#include "solver/matrix.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_DIRECT_REFINE_MAX 3 /* refinement steps per solve */

struct kd_direct {
    const kd_direct_ops_t *ops;
    void *state;
    int64_t n, nnz;
    int32_t *colptr, *rows; /* A's CSR, which the libraries read as A^T's compressed columns */
    double *values;
    double norm_inf; /* ||A||_inf, for the refinement test */
    int64_t factor_entries;
    size_t factor_bytes; /* the library's factor and A's copy */
    size_t charged;      /* to budget */
    double estimate_bytes;
    double analyze_ms, factor_ms;
    int refactored;
    kd_direct_budget_t *budget;
    char message[256];
};

const kd_direct_ops_t *kd_direct_find(const char *name)
{
    assert(name != NULL);
    for (size_t i = 0; i < kd_direct_count; i++)
        if (strcmp(kd_direct_table[i]->name, name) == 0)
            return kd_direct_table[i];
    return NULL;
}

void kd_direct_names(char *out, size_t cap)
{
    size_t w = 0;
    assert(out != NULL && cap > 0);
    out[0] = '\0';
    for (size_t i = 0; i < kd_direct_count && w < cap; i++)
        w +=
            (size_t)snprintf(out + w, cap - w, "%s%s", i > 0 ? ", " : "", kd_direct_table[i]->name);
    if (kd_direct_count == 0)
        snprintf(out, cap, "none (built without SuiteSparse: -DKD_DIRECT=OFF)");
}

/* ---- the budget ------------------------------------------------------------------------------ */

/* Charge bytes to budget, or KD_ETOOLARGE naming what asks, the budget and what is held. */
static int kd_direct_charge(kd_direct_budget_t *budget, size_t bytes, const char *what,
                            kd_err_t *err)
{
    size_t used = atomic_load(&budget->used);
    do {
        if (bytes > budget->limit || used > budget->limit - bytes)
            return kd_err_set(err, KD_ETOOLARGE,
                              "%s: its factor needs an estimated %.1f MiB (%zu bytes, from the "
                              "symbolic analysis), over the factor budget of %.1f MiB (%zu bytes, "
                              "--factor-memory) with %.1f MiB held by other factors; nothing was "
                              "factored",
                              what, (double)bytes / 1048576.0, bytes,
                              (double)budget->limit / 1048576.0, budget->limit,
                              (double)used / 1048576.0);
    } while (!atomic_compare_exchange_weak(&budget->used, &used, used + bytes));
    return KD_OK;
}

static void kd_direct_uncharge(kd_direct_budget_t *budget, size_t bytes)
{
    if (budget != NULL && bytes > 0)
        atomic_fetch_sub(&budget->used, bytes);
}

/* ---- A's copy -------------------------------------------------------------------------------- */

static size_t kd_direct_copy_bytes(const kd_csr_t *csr)
{
    return (size_t)(csr->rows + 1) * sizeof(int32_t) +
           (size_t)csr->nnz * (sizeof(int32_t) + sizeof(double));
}

/* A new D holding csr's copy in double (the pattern and the values). */
static int kd_direct_new(const kd_csr_t *csr, kd_direct_t **out, kd_err_t *err)
{
    kd_direct_t *D = calloc(1, sizeof(*D));
    const size_t nnz = (size_t)csr->nnz, n = (size_t)csr->rows;
    if (D != NULL) {
        D->colptr = malloc((n + 1) * sizeof(int32_t));
        D->rows = malloc((nnz > 0 ? nnz : 1) * sizeof(int32_t));
        D->values = malloc((nnz > 0 ? nnz : 1) * sizeof(double));
    }
    if (D == NULL || D->colptr == NULL || D->rows == NULL || D->values == NULL) {
        kd_direct_free(D);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a copy of a %lld-entry matrix",
                          (long long)csr->nnz);
    }
    D->n = csr->rows;
    D->nnz = csr->nnz;
    memcpy(D->colptr, csr->indptr, (n + 1) * sizeof(int32_t));
    memcpy(D->rows, csr->indices, nnz * sizeof(int32_t));
    kd_convert_real(D->values, KD_DTYPE_F64, csr->values, csr->dtype, nnz);
    for (int64_t i = 0; i < D->n; i++) {
        double s = 0.0;
        for (int32_t k = D->colptr[i]; k < D->colptr[i + 1]; k++)
            s += fabs(D->values[k]);
        D->norm_inf = s > D->norm_inf ? s : D->norm_inf;
    }
    *out = D;
    return KD_OK;
}

void kd_direct_free(kd_direct_t *D)
{
    if (D == NULL)
        return;
    if (D->ops != NULL && D->state != NULL)
        D->ops->release(D->state);
    kd_direct_uncharge(D->budget, D->charged);
    free(D->colptr);
    free(D->rows);
    free(D->values);
    free(D);
}

/* ---- factorisation --------------------------------------------------------------------------- */

/* The default library: cholmod for a matrix that looks SPD, else klu (else the first there is). */
static const kd_direct_ops_t *kd_direct_default(int looks_spd)
{
    const kd_direct_ops_t *c = looks_spd ? kd_direct_find("cholmod") : NULL;
    if (c == NULL)
        c = kd_direct_find("klu");
    return c != NULL ? c : kd_direct_count > 0 ? kd_direct_table[0] : NULL;
}

/* The factor's bytes as charged from now on: the library's plus A's copy, what it holds (the
 * estimate was charged before it existed; a factor over its estimate is counted as it is). */
static void kd_direct_settle(kd_direct_t *D, size_t library_bytes, size_t copy_bytes)
{
    size_t actual;
    if (kd_add_overflow(library_bytes, copy_bytes, &actual))
        actual = SIZE_MAX / 2;
    D->factor_bytes = actual;
    if (actual > D->charged)
        atomic_fetch_add(&D->budget->used, actual - D->charged);
    else
        atomic_fetch_sub(&D->budget->used, D->charged - actual);
    D->charged = actual;
}

/* Analysis, charge, numeric factorisation of D's copy with ops. *singular with D->message. */
static int kd_direct_build(kd_direct_t *D, const kd_direct_ops_t *ops, kd_direct_budget_t *budget,
                           size_t copy_bytes, int *singular, kd_err_t *err)
{
    double entries = 0.0, bytes = 0.0;
    uint64_t t0 = kd_clock_ns();
    D->ops = ops;
    D->budget = budget;
    int rc = ops->analyze(D->n, D->colptr, D->rows, D->values, &D->state, &entries, &bytes,
                          singular, D->message, sizeof(D->message), err);
    D->analyze_ms = kd_clock_ms_since(t0);
    if (rc != KD_OK || *singular)
        return rc;
    double want = bytes + (double)copy_bytes;
    D->estimate_bytes = want;
    char what[96];
    snprintf(what, sizeof(what), "direct (%s) on a %lld x %lld matrix with %lld entries", ops->name,
             (long long)D->n, (long long)D->n, (long long)D->nnz);
    const size_t charge = want >= (double)(SIZE_MAX / 2) ? SIZE_MAX / 2 : (size_t)want;
    if ((rc = kd_direct_charge(budget, charge, what, err)) != KD_OK)
        return rc;
    D->charged = charge;
    size_t library_bytes = 0;
    t0 = kd_clock_ns();
    rc = ops->factor(D->state, D->colptr, D->rows, D->values, &D->factor_entries, &library_bytes,
                     singular, D->message, sizeof(D->message), err);
    D->factor_ms = kd_clock_ms_since(t0);
    if (rc == KD_OK && !*singular)
        kd_direct_settle(D, library_bytes, copy_bytes);
    return rc;
}

/* Release what D's library holds and its charge, keeping A's copy (for another library). */
static void kd_direct_reset(kd_direct_t *D)
{
    if (D->ops != NULL && D->state != NULL)
        D->ops->release(D->state);
    D->state = NULL;
    kd_direct_uncharge(D->budget, D->charged);
    D->charged = 0;
}

static void kd_direct_info_fill(const kd_direct_t *D, kd_direct_info_t *info)
{
    info->solver = D->ops->name;
    info->factor_entries = D->factor_entries;
    info->factor_bytes = D->factor_bytes;
    info->estimate_bytes = D->estimate_bytes;
    info->fill = D->nnz > 0 ? (double)D->factor_entries / (double)D->nnz : 0.0;
    info->analyze_ms = D->analyze_ms;
    info->factor_ms = D->factor_ms;
    info->refactored = D->refactored;
    snprintf(info->message, sizeof(info->message), "%s", D->message);
}

int kd_direct_factor(const kd_csr_t *csr, int looks_spd, const kd_direct_ops_t *ops,
                     kd_direct_budget_t *budget, kd_direct_t **out, kd_direct_info_t *info,
                     kd_err_t *err)
{
    assert(csr != NULL && budget != NULL && out != NULL && info != NULL);
    memset(info, 0, sizeof(*info));
    *out = NULL;
    if (ops == NULL && (ops = kd_direct_default(looks_spd)) == NULL)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "method direct: this server was built without SuiteSparse "
                          "(-DKD_DIRECT=OFF)");
    if (csr->rows != csr->cols)
        return kd_err_set(err, KD_EBADREQ, "method direct needs a square matrix, not %lld x %lld",
                          (long long)csr->rows, (long long)csr->cols);
    kd_direct_t *D = NULL;
    int rc = kd_direct_new(csr, &D, err), singular = 0;
    const size_t copy_bytes = kd_direct_copy_bytes(csr);
    if (rc == KD_OK)
        rc = kd_direct_build(D, ops, budget, copy_bytes, &singular, err);
    if (rc == KD_OK && singular && ops->cholesky) {
        /* not positive definite after all: an LU, which pivots */
        const kd_direct_ops_t *lu = kd_direct_find("klu");
        char why[sizeof(D->message)];
        snprintf(why, sizeof(why), "%s", D->message);
        const double chol_ms = D->analyze_ms + D->factor_ms;
        kd_direct_reset(D);
        singular = 0;
        D->message[0] = '\0';
        if (lu == NULL)
            rc = kd_err_set(err, KD_ENOTSPD, "direct (%s): %s", ops->name, why);
        else if ((rc = kd_direct_build(D, lu, budget, copy_bytes, &singular, err)) == KD_OK &&
                 !singular)
            snprintf(D->message, sizeof(D->message), "%s: %.120s (%.3g ms); %s factored instead",
                     ops->name, why, chol_ms, lu->name);
    }
    if (rc == KD_OK)
        kd_direct_info_fill(D, info);
    info->factored = 1;
    if (rc != KD_OK || singular) {
        info->singular = rc == KD_OK && singular;
        kd_direct_free(D);
        return rc;
    }
    *out = D;
    return KD_OK;
}

int kd_direct_refactor(kd_direct_t *like, const kd_csr_t *csr, kd_direct_budget_t *budget,
                       kd_direct_t **out, kd_direct_info_t *info, int *like_spent, kd_err_t *err)
{
    assert(like != NULL && csr != NULL && budget != NULL && out != NULL && info != NULL);
    memset(info, 0, sizeof(*info));
    *out = NULL;
    *like_spent = 0;
    if (csr->rows != like->n || csr->cols != like->n || csr->nnz != like->nnz ||
        memcmp(csr->indptr, like->colptr, (size_t)(like->n + 1) * sizeof(int32_t)) != 0 ||
        memcmp(csr->indices, like->rows, (size_t)like->nnz * sizeof(int32_t)) != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "refactor: the matrix's pattern is not the one of the factor it is "
                          "like");
    if (like->ops->refactor == NULL || like->state == NULL)
        return kd_direct_factor(csr, 0, like->ops, budget, out, info, err);
    kd_direct_t *D = NULL;
    int rc = kd_direct_new(csr, &D, err), declined = 0;
    if (rc != KD_OK)
        return rc;
    D->ops = like->ops;
    D->budget = budget;
    char what[96];
    snprintf(what, sizeof(what), "refactor (%s) of a %lld x %lld matrix", like->ops->name,
             (long long)D->n, (long long)D->n);
    /* the same pattern and analysis: like's factor's size is this one's estimate */
    D->estimate_bytes = (double)like->factor_bytes;
    if ((rc = kd_direct_charge(budget, like->factor_bytes, what, err)) != KD_OK) {
        kd_direct_free(D);
        return rc;
    }
    D->charged = like->factor_bytes;
    size_t library_bytes = 0;
    char why[sizeof(D->message)] = "";
    const uint64_t t0 = kd_clock_ns();
    rc = like->ops->refactor(like->state, &D->state, D->colptr, D->rows, D->values,
                             &D->factor_entries, &library_bytes, &declined, like_spent, why,
                             sizeof(why), err);
    D->factor_ms = kd_clock_ms_since(t0);
    if (*like_spent) { /* its factor is D's now (or gone): like gives its bytes back */
        like->ops->release(like->state);
        like->state = NULL;
        kd_direct_uncharge(like->budget, like->charged);
        like->charged = 0;
    }
    if (rc == KD_OK && !declined) {
        kd_direct_settle(D, library_bytes, kd_direct_copy_bytes(csr));
        D->refactored = 1;
        kd_direct_info_fill(D, info);
        info->factored = 1;
        *out = D;
        return KD_OK;
    }
    kd_direct_free(D);
    if (rc != KD_OK)
        return rc;
    /* the kept pivots fail these values: a fresh factorisation, with its own analysis */
    rc = kd_direct_factor(csr, 0, like->ops, budget, out, info, err);
    if (rc == KD_OK && *out != NULL) {
        snprintf((*out)->message, sizeof((*out)->message),
                 "refactor declined (%.150s): factored afresh", why);
        snprintf(info->message, sizeof(info->message), "%s", (*out)->message);
    }
    return rc;
}

void kd_direct_describe(const kd_direct_t *D, kd_direct_info_t *info)
{
    assert(D != NULL && info != NULL);
    memset(info, 0, sizeof(*info));
    kd_direct_info_fill(D, info);
}

int kd_direct_is(const kd_direct_t *D, const kd_direct_ops_t *ops)
{
    return D != NULL && (ops == NULL || D->ops == ops);
}

kd_direct_t *kd_direct_of(const kd_matrix_t *A)
{
    return A != NULL ? A->direct : NULL;
}

void kd_direct_keep(kd_matrix_t *A, kd_direct_t *D)
{
    assert(A != NULL);
    if (A->direct != D)
        kd_direct_free(A->direct);
    A->direct = D;
}

/* ---- solve ----------------------------------------------------------------------------------- */

/* r = b - A x for one column; returns ||r||_2, *rmax = ||r||_inf. */
static double kd_direct_residual(const kd_direct_t *D, const double *b, const double *x, double *r,
                                 double *rmax)
{
    double ss = 0.0, mx = 0.0;
    for (int64_t i = 0; i < D->n; i++) {
        double s = b[i];
        for (int32_t k = D->colptr[i]; k < D->colptr[i + 1]; k++)
            s -= D->values[k] * x[D->rows[k]];
        r[i] = s;
        ss += s * s;
        mx = fabs(s) > mx ? fabs(s) : mx;
    }
    *rmax = mx;
    return sqrt(ss);
}

static double kd_direct_max_abs(const double *v, int64_t n)
{
    double m = 0.0;
    for (int64_t i = 0; i < n; i++)
        m = fabs(v[i]) > m ? fabs(v[i]) : m;
    return m;
}

int kd_direct_solve(const kd_direct_t *D, int64_t nrhs, const double *B, double *X,
                    double *residual_norms, int *refinements, kd_err_t *err)
{
    assert(D != NULL && B != NULL && X != NULL && residual_norms != NULL && refinements != NULL);
    const int64_t n = D->n;
    size_t count;
    if (kd_mul_overflow((size_t)n, (size_t)nrhs, &count))
        return kd_err_set(err, KD_ETOOLARGE, "%lld right-hand sides of %lld rows", (long long)nrhs,
                          (long long)n);
    memcpy(X, B, count * sizeof(double));
    int rc = D->ops->solve(D->state, D->colptr, D->rows, D->values, nrhs, X, err);
    if (rc != KD_OK)
        return rc;
    double *R = malloc(2 * (count > 0 ? count : 1) * sizeof(double));
    double *C = R + (count > 0 ? count : 1); /* the last step's corrections */
    unsigned char *again = calloc((size_t)(nrhs > 0 ? nrhs : 1), 1);
    if (R == NULL || again == NULL) {
        free(R);
        free(again);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld residuals", (long long)nrhs);
    }
    for (int step = 0; rc == KD_OK && step <= KD_DIRECT_REFINE_MAX; step++) {
        int any = 0;
        for (int64_t k = 0; k < nrhs; k++) {
            const size_t at = (size_t)(k * n);
            double rmax;
            if (step == 0)
                refinements[k] = 0;
            else if (!again[k])
                continue;
            const double norm = kd_direct_residual(D, B + at, X + at, R + at, &rmax);
            if (step > 0 && !(norm < residual_norms[k])) {
                for (int64_t i = 0; i < n; i++) /* no better: the correction is undone */
                    X[at + (size_t)i] -= C[at + (size_t)i];
                again[k] = 0;
                continue;
            }
            refinements[k] += step > 0;
            residual_norms[k] = norm;
            /* a residual above a few ulps of b: one more step may help (it stops when a step
             * no longer shrinks ||r||) */
            again[k] = step < KD_DIRECT_REFINE_MAX &&
                       rmax > 16.0 * DBL_EPSILON * kd_direct_max_abs(B + at, n);
            any |= again[k];
        }
        if (!any)
            break;
        memcpy(C, R, count * sizeof(double));
        rc = D->ops->solve(D->state, D->colptr, D->rows, D->values, nrhs, C, err);
        for (int64_t k = 0; rc == KD_OK && k < nrhs; k++)
            if (again[k])
                for (int64_t i = 0; i < n; i++)
                    X[(size_t)(k * n + i)] += C[(size_t)(k * n + i)];
    }
    free(R);
    free(again);
    return rc;
}
