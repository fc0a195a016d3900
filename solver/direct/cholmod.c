/*
 * cholmod: CHOLMOD's sparse Cholesky A = L L^T (SuiteSparse), for symmetric positive definite
 * matrices: a fill-reducing ordering (AMD, METIS where CHOLMOD has it, the best of them) and a
 * supernodal factorisation through BLAS for large factors, a simplicial one for small ones, both
 * L L^T (final_ll), so that an indefinite matrix fails at its first nonpositive pivot: the
 * caller then factors it with an LU (direct.c). The analysis's column counts give L's entries
 * (Common.lnz) and, for a supernodal factor, its exact array sizes (xsize, ssize).
 */
#include "solver/direct/direct.h"

#include <cholmod.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kd_cholmod {
    cholmod_common common;
    cholmod_factor *L;
    int n;
} kd_cholmod_t;

/* A's compressed columns as a cholmod_sparse (no copy), its upper triangle read (stype 1). */
static cholmod_sparse kd_cholmod_wrap(int n, const int32_t *colptr, const int32_t *rows,
                                      const double *values)
{
    cholmod_sparse A;
    memset(&A, 0, sizeof(A));
    A.nrow = A.ncol = (size_t)n;
    A.nzmax = (size_t)colptr[n];
    A.p = (void *)colptr;
    A.i = (void *)rows;
    A.x = (void *)values;
    A.stype = 1;
    A.itype = CHOLMOD_INT;
    A.xtype = CHOLMOD_REAL;
    A.dtype = CHOLMOD_DOUBLE;
    A.sorted = 1;
    A.packed = 1;
    return A;
}

static void kd_cholmod_release(void *state)
{
    kd_cholmod_t *c = state;
    if (c == NULL)
        return;
    if (c->L != NULL)
        cholmod_free_factor(&c->L, &c->common);
    cholmod_finish(&c->common);
    free(c);
}

static int kd_cholmod_analyze(int64_t n, const int32_t *colptr, const int32_t *rows,
                              const double *values, void **state, double *entries, double *bytes,
                              int *singular, char *why, size_t whylen, kd_err_t *err)
{
    (void)why, (void)whylen;
    kd_cholmod_t *c = calloc(1, sizeof(*c));
    *state = NULL;
    *singular = 0;
    if (c == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for cholmod");
    cholmod_start(&c->common);
    c->common.print = 0;
    c->common.final_ll = 1; /* L L^T: an indefinite matrix fails instead of factoring */
    c->n = (int)n;
    cholmod_sparse A = kd_cholmod_wrap(c->n, colptr, rows, values);
    c->L = cholmod_analyze(&A, &c->common);
    if (c->L == NULL) {
        const int status = c->common.status;
        kd_cholmod_release(c);
        return status == CHOLMOD_OUT_OF_MEMORY
                   ? kd_err_set(err, KD_ENOMEM, "cholmod_analyze: out of host memory")
                   : kd_err_set(err, KD_EINTERNAL, "cholmod_analyze failed (status %d)", status);
    }
    *entries = c->common.lnz;
    if (c->L->is_super)
        *bytes = (double)c->L->xsize * sizeof(double) + (double)c->L->ssize * sizeof(int);
    else
        *bytes = c->common.lnz * (double)(sizeof(double) + sizeof(int));
    *bytes += (double)n * 6.0 * sizeof(int); /* permutation, column counts, pointers */
    *state = c;
    return KD_OK;
}

static int kd_cholmod_factor(void *state, const int32_t *colptr, const int32_t *rows,
                             const double *values, int64_t *entries, size_t *bytes, int *singular,
                             char *why, size_t whylen, kd_err_t *err)
{
    kd_cholmod_t *c = state;
    *singular = 0;
    cholmod_sparse A = kd_cholmod_wrap(c->n, colptr, rows, values);
    const size_t before = c->common.memory_inuse;
    if (!cholmod_factorize(&A, c->L, &c->common))
        return c->common.status == CHOLMOD_OUT_OF_MEMORY
                   ? kd_err_set(err, KD_ENOMEM, "cholmod_factorize: out of host memory")
                   : kd_err_set(err, KD_EINTERNAL, "cholmod_factorize failed (status %d)",
                                c->common.status);
    if (c->common.status == CHOLMOD_NOT_POSDEF || c->L->minor < (size_t)c->n) {
        *singular = 1;
        snprintf(why, whylen, "not positive definite: a nonpositive pivot at column %zu",
                 c->L->minor);
        return KD_OK;
    }
    *entries = (int64_t)c->common.lnz;
    *bytes = c->common.memory_inuse > before ? c->common.memory_inuse : before;
    return KD_OK;
}

/* cholmod_factorize into a copy of like's L (its ordering and supernodal structure kept): like
 * keeps its own. Refused when the new values are not positive definite. */
static int kd_cholmod_refactor(void *like_state, void **state, const int32_t *colptr,
                               const int32_t *rows, const double *values, int64_t *entries,
                               size_t *bytes, int *declined, int *like_spent, char *why,
                               size_t whylen, kd_err_t *err)
{
    kd_cholmod_t *like = like_state, *c = calloc(1, sizeof(*c));
    *state = NULL;
    *declined = 0;
    *like_spent = 0;
    if (c == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for cholmod");
    cholmod_start(&c->common);
    c->common.print = 0;
    c->common.final_ll = 1;
    c->n = like->n;
    c->L = cholmod_copy_factor(like->L, &c->common);
    if (c->L == NULL) {
        kd_cholmod_release(c);
        return kd_err_set(err, KD_ENOMEM, "cholmod_copy_factor: out of host memory");
    }
    int singular = 0;
    int rc =
        kd_cholmod_factor(c, colptr, rows, values, entries, bytes, &singular, why, whylen, err);
    if (rc != KD_OK || singular) {
        *declined = singular;
        kd_cholmod_release(c);
        return rc;
    }
    *bytes = c->common.memory_inuse;
    *state = c;
    return KD_OK;
}

static int kd_cholmod_solve(void *state, const int32_t *colptr, const int32_t *rows,
                            const double *values, int64_t nrhs, double *B, kd_err_t *err)
{
    (void)colptr, (void)rows, (void)values;
    kd_cholmod_t *c = state;
    cholmod_dense b;
    memset(&b, 0, sizeof(b));
    b.nrow = b.d = (size_t)c->n;
    b.ncol = (size_t)nrhs;
    b.nzmax = b.nrow * b.ncol;
    b.x = B;
    b.xtype = CHOLMOD_REAL;
    b.dtype = CHOLMOD_DOUBLE;
    cholmod_dense *x = cholmod_solve(CHOLMOD_A, c->L, &b, &c->common);
    if (x == NULL)
        return kd_err_set(err, c->common.status == CHOLMOD_OUT_OF_MEMORY ? KD_ENOMEM : KD_EINTERNAL,
                          "cholmod_solve failed (status %d)", c->common.status);
    memcpy(B, x->x, b.nzmax * sizeof(double));
    cholmod_free_dense(&x, &c->common);
    return KD_OK;
}

const kd_direct_ops_t kd_direct_cholmod = {
    .name = "cholmod",
    .summary = "supernodal sparse Cholesky for symmetric positive definite matrices (CHOLMOD)",
    .cholesky = 1,
    .analyze = kd_cholmod_analyze,
    .factor = kd_cholmod_factor,
    .refactor = kd_cholmod_refactor,
    .solve = kd_cholmod_solve,
    .release = kd_cholmod_release,
};
