/*
 * ILU(0) and IC(0) on the host, and the level schedules of their triangles (solver/precond/ilu.h).
 *
 * Why on the host: both are exact and deterministic here (the device's alternative, Chow and
 * Patel's fixed-point sweeps, converges to the same factors only asymptotically and needs its own
 * stopping rule), they run once per matrix and are kept with it, and the host CSR is at hand
 * anyway (the upload's). Their cost is O(sum over the rows' entries of the referenced rows'
 * lengths): a few times nnz for the stencil and FEM matrices ILU(0) is meant for.
 */
#include "solver/precond/ilu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void kd_ilu_factors_free(kd_ilu_factors_t *f)
{
    if (f == NULL)
        return;
    kd_ilu_tri_t *t[2] = {&f->lower, &f->upper};
    for (int i = 0; i < 2; i++) {
        free(t[i]->indptr);
        free(t[i]->indices);
        free(t[i]->values);
        free(t[i]->diag);
    }
    memset(f, 0, sizeof(*f));
}

static int kd_ilu_tri_alloc(kd_ilu_tri_t *t, int64_t n, int64_t nnz, kd_err_t *err)
{
    t->n = n;
    t->nnz = nnz;
    t->indptr = calloc((size_t)n + 1, sizeof(int32_t));
    t->indices = malloc((size_t)nnz * sizeof(int32_t) + 1);
    t->values = malloc((size_t)nnz * sizeof(double) + 1);
    t->diag = malloc((size_t)n * sizeof(double) + 1);
    if (t->indptr == NULL || t->indices == NULL || t->values == NULL || t->diag == NULL)
        return kd_err_set(err, KD_ENOMEM, "incomplete factorisation: out of host memory");
    return KD_OK;
}

static long long kd_ilu_row_name(const int32_t *rows, int64_t i)
{
    return rows != NULL ? (long long)rows[i] : (long long)i;
}

static int kd_ilu_check_input(const kd_csr_t *csr, const char *name, const int32_t *rows,
                              kd_err_t *err)
{
    if (csr->rows != csr->cols)
        return kd_err_set(err, KD_EBADREQ, "%s needs a square matrix, not %lld x %lld", name,
                          (long long)csr->rows, (long long)csr->cols);
    for (int64_t i = 0; i < csr->rows; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            if (!isfinite(kd_csr_value(csr, k)))
                return kd_err_set(err, KD_EBADREQ, "%s: entry (%lld, %lld) is %g", name,
                                  kd_ilu_row_name(rows, i), kd_ilu_row_name(rows, csr->indices[k]),
                                  kd_csr_value(csr, k));
    return KD_OK;
}

/* The factored values, row by row in A's pattern, into the two triangles. */
static int kd_ilu0_split(const kd_csr_t *csr, const double *w, const int32_t *diagpos,
                         kd_ilu_factors_t *f, kd_err_t *err)
{
    const int64_t n = csr->rows;
    int64_t nl = 0, nu = 0;
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            nl += csr->indices[k]<i, nu += csr->indices[k]> i;
    int rc = kd_ilu_tri_alloc(&f->lower, n, nl, err);
    if (rc == KD_OK)
        rc = kd_ilu_tri_alloc(&f->upper, n, nu, err);
    if (rc != KD_OK)
        return rc;
    kd_ilu_tri_t *L = &f->lower, *U = &f->upper;
    for (int64_t i = 0; i < n; i++) {
        L->indptr[i + 1] = L->indptr[i];
        U->indptr[i + 1] = U->indptr[i];
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++) {
            kd_ilu_tri_t *t = csr->indices[k] < i ? L : csr->indices[k] > i ? U : NULL;
            if (t != NULL) {
                t->indices[t->indptr[i + 1]] = csr->indices[k];
                t->values[t->indptr[i + 1]++] = w[k];
            }
        }
        L->diag[i] = 1.0;
        U->diag[i] = w[diagpos[i]];
    }
    return KD_OK;
}

int kd_ilu0_factor(const kd_csr_t *csr, const int32_t *rows, kd_ilu_factors_t *f, kd_err_t *err)
{
    memset(f, 0, sizeof(*f));
    int rc = kd_ilu_check_input(csr, "ilu0", rows, err);
    if (rc != KD_OK)
        return rc;
    const int64_t n = csr->rows;
    double *w = malloc((size_t)csr->nnz * sizeof(double) + 1);
    int32_t *diagpos = malloc((size_t)n * sizeof(int32_t) + 1);
    int32_t *pos = malloc((size_t)n * sizeof(int32_t) + 1); /* column -> entry of row i, or -1 */
    if (w == NULL || diagpos == NULL || pos == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "ilu0: out of host memory");
    for (int64_t k = 0; rc == KD_OK && k < csr->nnz; k++)
        w[k] = kd_csr_value(csr, k);
    for (int64_t i = 0; rc == KD_OK && i < n; i++)
        pos[i] = -1;
    /* IKJ order: row i's entries left of the diagonal are eliminated with the rows above, already
     * final, and the updates land only where row i has an entry (the (0) in ILU(0)). */
    for (int64_t i = 0; rc == KD_OK && i < n; i++) {
        const int32_t start = csr->indptr[i], end = csr->indptr[i + 1];
        diagpos[i] = -1;
        for (int32_t k = start; k < end; k++) {
            pos[csr->indices[k]] = k;
            if (csr->indices[k] == i)
                diagpos[i] = k;
        }
        for (int32_t k = start; k < end && csr->indices[k] < i; k++) {
            const int32_t j = csr->indices[k];
            w[k] /= w[diagpos[j]];
            for (int32_t m = diagpos[j] + 1; m < csr->indptr[j + 1]; m++)
                if (pos[csr->indices[m]] >= 0)
                    w[pos[csr->indices[m]]] -= w[k] * w[m];
        }
        for (int32_t k = start; k < end; k++)
            pos[csr->indices[k]] = -1;
        const double pivot = diagpos[i] >= 0 ? w[diagpos[i]] : 0.0;
        if (pivot == 0.0 || !isfinite(pivot))
            rc = kd_err_set(err, KD_EBADREQ,
                            "ilu0: the pivot of row %lld is %g (%s): ILU(0) does not exist for "
                            "this matrix in this order; try jacobi, or a nonzero diagonal",
                            kd_ilu_row_name(rows, i), pivot,
                            diagpos[i] < 0 ? "no diagonal entry"
                            : pivot == 0.0 ? "zero"
                                           : "not finite");
        for (int32_t k = start; rc == KD_OK && k < end; k++)
            if (!isfinite(w[k]))
                rc = kd_err_set(err, KD_EBADREQ, "ilu0: the factor's entry (%lld, %lld) is %g",
                                kd_ilu_row_name(rows, i), kd_ilu_row_name(rows, csr->indices[k]),
                                w[k]);
    }
    if (rc == KD_OK)
        rc = kd_ilu0_split(csr, w, diagpos, f, err);
    free(w);
    free(diagpos);
    free(pos);
    if (rc != KD_OK)
        kd_ilu_factors_free(f);
    return rc;
}

/* csr equals its transpose: the same pattern, and each a_ij equals a_ji up to rounding (1e-12 of
 * the larger of |a_ij| and sqrt(|a_ii a_jj|), so assembly's rounding in entries that cancel to
 * nearly 0 passes). */
static int kd_ic0_check_symmetric(const kd_csr_t *csr, const int32_t *rows, kd_err_t *err)
{
    kd_csr_t *t = NULL;
    double *diag = calloc((size_t)csr->rows + 1, sizeof(double));
    int rc = diag != NULL ? kd_csr_transpose(csr, &t, err)
                          : kd_err_set(err, KD_ENOMEM, "ic0: out of host memory");
    for (int64_t i = 0; rc == KD_OK && i < csr->rows; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            if (csr->indices[k] == i)
                diag[i] = fabs(kd_csr_value(csr, k));
    for (int64_t i = 0; rc == KD_OK && i < csr->rows; i++)
        for (int32_t k = csr->indptr[i]; rc == KD_OK && k < csr->indptr[i + 1]; k++) {
            const int32_t j = csr->indices[k];
            const double a = kd_csr_value(csr, k);
            const int same = t->indptr[i + 1] == csr->indptr[i + 1] && t->indices[k] == j;
            const double b = same ? kd_csr_value(t, k) : 0.0;
            if (!same || !(fabs(a - b) <= 1e-12 * fmax(fabs(a), sqrt(diag[i] * diag[j]))))
                rc = kd_err_set(err, KD_EBADREQ,
                                "ic0 needs a symmetric matrix: a(%lld, %lld) = %g but a(%lld, "
                                "%lld) = %g%s; ilu0 takes any square matrix",
                                kd_ilu_row_name(rows, i), kd_ilu_row_name(rows, j), a,
                                kd_ilu_row_name(rows, j), kd_ilu_row_name(rows, i), b,
                                same ? "" : " (or is not stored)");
        }
    kd_csr_free(t);
    free(diag);
    return rc;
}

/* U = L^T for the strictly lower L: a counting pass over the columns keeps each row ascending. */
static void kd_ic0_transpose(const kd_ilu_tri_t *L, kd_ilu_tri_t *U)
{
    const int64_t n = L->n;
    for (int64_t k = 0; k < L->nnz; k++)
        U->indptr[L->indices[k] + 1]++;
    for (int64_t i = 0; i < n; i++)
        U->indptr[i + 1] += U->indptr[i];
    int32_t *fill = U->indptr; /* advanced past each row as it fills, then shifted back */
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = L->indptr[i]; k < L->indptr[i + 1]; k++) {
            const int32_t at = fill[L->indices[k]]++;
            U->indices[at] = (int32_t)i;
            U->values[at] = L->values[k];
        }
    for (int64_t i = n; i > 0; i--)
        U->indptr[i] = U->indptr[i - 1];
    U->indptr[0] = 0;
    memcpy(U->diag, L->diag, (size_t)n * sizeof(double));
}

int kd_ic0_factor(const kd_csr_t *csr, const int32_t *rows, kd_ilu_factors_t *f, kd_err_t *err)
{
    memset(f, 0, sizeof(*f));
    int rc = kd_ilu_check_input(csr, "ic0", rows, err);
    if (rc == KD_OK)
        rc = kd_ic0_check_symmetric(csr, rows, err);
    if (rc != KD_OK)
        return rc;
    const int64_t n = csr->rows;
    int64_t nl = 0;
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            nl += csr->indices[k] < i;
    if ((rc = kd_ilu_tri_alloc(&f->lower, n, nl, err)) == KD_OK)
        rc = kd_ilu_tri_alloc(&f->upper, n, nl, err);
    kd_ilu_tri_t *L = &f->lower;
    /* Row by row (left-looking): l_ij = (a_ij - sum_{k<j} l_ik l_jk) / l_jj, the sum a merge of
     * row i so far (columns < j) with row j, then l_ii = sqrt(a_ii - sum_k l_ik^2). */
    for (int64_t i = 0; rc == KD_OK && i < n; i++) {
        int32_t w = L->indptr[i];
        double a_ii = 0.0;
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1] && csr->indices[k] <= i; k++) {
            const int32_t j = csr->indices[k];
            if (j == i) {
                a_ii = kd_csr_value(csr, k);
                break;
            }
            double s = kd_csr_value(csr, k);
            for (int32_t p = L->indptr[i], q = L->indptr[j]; p < w && q < L->indptr[j + 1];) {
                if (L->indices[p] == L->indices[q])
                    s -= L->values[p++] * L->values[q++];
                else if (L->indices[p] < L->indices[q])
                    p++;
                else
                    q++;
            }
            L->indices[w] = j;
            L->values[w++] = s / L->diag[j];
        }
        L->indptr[i + 1] = w;
        double d = a_ii;
        for (int32_t p = L->indptr[i]; p < w; p++)
            d -= L->values[p] * L->values[p];
        if (!(d > 0.0) || !isfinite(d))
            rc = kd_err_set(err, KD_EBADREQ,
                            "ic0: the pivot of row %lld is %g (a_ii = %g): the matrix is not "
                            "positive definite, or not enough so for IC(0) to exist; try ilu0 "
                            "or jacobi",
                            kd_ilu_row_name(rows, i), d, a_ii);
        else
            L->diag[i] = sqrt(d);
    }
    if (rc == KD_OK)
        kd_ic0_transpose(L, &f->upper);
    else
        kd_ilu_factors_free(f);
    return rc;
}

int kd_ilu_levels(const kd_ilu_tri_t *t, int lower, int32_t **order, int32_t **level_ptr,
                  int32_t *levels, kd_err_t *err)
{
    const int64_t n = t->n;
    int32_t *level = malloc((size_t)n * sizeof(int32_t) + 1);
    *order = malloc((size_t)n * sizeof(int32_t) + 1);
    *level_ptr = NULL;
    *levels = 0;
    int32_t top = -1;
    if (level != NULL && *order != NULL) {
        /* A lower triangle references lower rows, an upper one higher: visit those first. */
        for (int64_t s = 0; s < n; s++) {
            const int64_t i = lower ? s : n - 1 - s;
            int32_t l = 0;
            for (int32_t k = t->indptr[i]; k < t->indptr[i + 1]; k++)
                if (level[t->indices[k]] + 1 > l)
                    l = level[t->indices[k]] + 1;
            level[i] = l;
            top = l > top ? l : top;
        }
        *level_ptr = calloc((size_t)top + 2, sizeof(int32_t));
    }
    if (*level_ptr == NULL) {
        free(level);
        free(*order);
        *order = NULL;
        return kd_err_set(err, KD_ENOMEM, "incomplete factorisation: out of host memory");
    }
    int32_t *lp = *level_ptr;
    for (int64_t i = 0; i < n; i++)
        lp[level[i] + 1]++;
    for (int32_t l = 0; l <= top; l++)
        lp[l + 1] += lp[l];
    for (int64_t i = 0; i < n; i++) /* ascending rows within a level: neighbours stay close */
        (*order)[lp[level[i]]++] = (int32_t)i;
    for (int32_t l = top; l > 0; l--)
        lp[l] = lp[l - 1];
    lp[0] = 0;
    *levels = top + 1;
    free(level);
    return KD_OK;
}
