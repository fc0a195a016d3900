/*
 * What every preconditioner shares (precond.h): the identity ("none"), the options a request
 * passes, setup on first use kept with the matrix, a refresh from a held setup onto a new
 * matrix's values, and the release of those kept. It names no other preconditioner: the table
 * (table.c) does.
 */
#include "solver/precond/precond.h"

#include <assert.h>
#include <xxhash.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const kd_precond_ops_t kd_precond_none = {
    .name = "none",
    .summary = "no preconditioner (M = I)",
    .forms = KD_PRECOND_IDENTITY,
    .symmetric = 1,
};

double kd_precond_option(const kd_precond_options_t *opt, const char *name, double fallback)
{
    for (int i = 0; opt != NULL && i < opt->count; i++)
        if (strcmp(opt->items[i].name, name) == 0)
            return opt->items[i].value;
    return fallback;
}

int kd_precond_check_options(const kd_precond_ops_t *ops, const kd_precond_options_t *options,
                             kd_err_t *err)
{
    assert(ops != NULL);
    for (int i = 0; options != NULL && i < options->count; i++) {
        const char *name = options->items[i].name;
        int known = 0;
        for (const char *const *o = ops->option_names; o != NULL && *o != NULL; o++)
            known |= strcmp(*o, name) == 0;
        if (!known) {
            char list[160] = "";
            size_t w = 0;
            for (const char *const *o = ops->option_names; o != NULL && *o != NULL; o++)
                if (w < sizeof(list))
                    w +=
                        (size_t)snprintf(list + w, sizeof(list) - w, "%s%s", w > 0 ? ", " : "", *o);
            return kd_err_set(err, KD_EBADREQ, "preconditioner %s takes no option '%s' (%s)",
                              ops->name, name, w > 0 ? list : "it takes none");
        }
        if (!isfinite(options->items[i].value))
            return kd_err_set(err, KD_EBADREQ, "preconditioner option %s is not finite", name);
    }
    return KD_OK;
}

/* The same options, in any order. */
static int kd_precond_same_options(const kd_precond_options_t *a, const kd_precond_options_t *b)
{
    const int na = a != NULL ? a->count : 0, nb = b != NULL ? b->count : 0;
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (kd_precond_option(b, a->items[i].name, NAN) != a->items[i].value)
            return 0;
    return 1;
}

int kd_precond_ready(const kd_matrix_t *A, const kd_precond_ops_t *ops,
                     const kd_precond_options_t *options)
{
    assert(A != NULL && ops != NULL);
    if (ops->setup == NULL)
        return 1;
    for (const kd_precond_t *p = A->preconds; p != NULL; p = p->next)
        if (p->ops == ops && kd_precond_same_options(&p->options, options))
            return 1;
    return 0;
}

/* Unlink and free A's `ops` (set up with other options): one of each kind is kept. */
static void kd_precond_drop(kd_matrix_t *A, const kd_precond_ops_t *ops)
{
    for (kd_precond_t **pp = &A->preconds; *pp != NULL; pp = &(*pp)->next)
        if ((*pp)->ops == ops) {
            kd_precond_t *P = *pp;
            *pp = P->next;
            A->device_bytes -= P->device_bytes;
            if (P->ops->release != NULL)
                P->ops->release(P);
            free(P);
            return;
        }
}

int kd_precond_get(kd_ocl_t *ocl, kd_matrix_t *A, const kd_precond_ops_t *ops,
                   const kd_precond_options_t *options, const kd_csr_t *csr,
                   const kd_precond_t **out, kd_err_t *err)
{
    static const kd_precond_t identity = {.ops = &kd_precond_none};
    assert(ocl != NULL && A != NULL && ops != NULL && out != NULL);
    *out = NULL;
    int rc = kd_precond_check_options(ops, options, err);
    if (rc != KD_OK)
        return rc;
    if (ops->setup == NULL) {
        *out = &identity;
        return KD_OK;
    }
    for (kd_precond_t *p = A->preconds; p != NULL; p = p->next)
        if (p->ops == ops && kd_precond_same_options(&p->options, options)) {
            *out = p;
            return KD_OK;
        }
    if (ops->needs_csr && csr == NULL)
        return kd_err_set(err, KD_EINTERNAL, "%s: set up without the matrix's host CSR", ops->name);
    kd_precond_t *P = calloc(1, sizeof(*P));
    if (P == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a preconditioner");
    P->ops = ops;
    if (options != NULL)
        P->options = *options;
    P->pattern = csr != NULL ? kd_precond_pattern(csr) : 0;
    kd_precond_drop(A, ops);
    rc = ops->setup(ocl, A, csr, P, err);
    if (rc != KD_OK) {
        if (ops->release != NULL)
            ops->release(P);
        free(P);
        return rc;
    }
    P->next = A->preconds;
    A->preconds = P;
    A->device_bytes += P->device_bytes;
    *out = P;
    return KD_OK;
}

/* ---- refresh: new values on a held pattern --------------------------------------------------- */

const char *kd_precond_origin_name(kd_precond_origin_t origin)
{
    switch (origin) {
    case KD_PRECOND_HELD:
        return "held";
    case KD_PRECOND_REFRESHED:
        return "refreshed";
    case KD_PRECOND_BUILT:
        return "built fresh";
    }
    return "?";
}

/* XXH3 over the shape and the two arrays: the fingerprint a setup records of the pattern it read
 * (a mixing chain of one multiply an entry took 28 ms a 1M-row put on the H200 host, on every
 * setup that reads the pattern; XXH3 reads it at memory speed). */
uint64_t kd_precond_pattern(const kd_csr_t *csr)
{
    assert(csr != NULL);
    const int64_t shape[3] = {csr->rows, csr->cols, csr->nnz};
    uint64_t h = XXH3_64bits(shape, sizeof(shape));
    h = XXH3_64bits_withSeed(csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t), h);
    if (csr->nnz > 0)
        h = XXH3_64bits_withSeed(csr->indices, (size_t)csr->nnz * sizeof(int32_t), h);
    return h != 0 ? h : 1;
}

/* KD_EBADREQ unless A can take like's setups: the same shape, dtype and stored order, and csr
 * of A's shape. */
static int kd_precond_refresh_check(const kd_matrix_t *like, const kd_matrix_t *A,
                                    const kd_csr_t *csr, kd_err_t *err)
{
    if (like->rows != A->rows || like->cols != A->cols || like->nnz != A->nnz)
        return kd_err_set(err, KD_EBADREQ,
                          "refresh: the matrix is %lld x %lld with %lld entries, the one it is "
                          "like %lld x %lld with %lld: not the same pattern",
                          (long long)A->rows, (long long)A->cols, (long long)A->nnz,
                          (long long)like->rows, (long long)like->cols, (long long)like->nnz);
    if (like->dtype != A->dtype)
        return kd_err_set(err, KD_EBADREQ, "refresh: the matrix is %s, the one it is like %s",
                          kd_dtype_name(A->dtype), kd_dtype_name(like->dtype));
    if (csr == NULL || csr->rows != A->rows || csr->cols != A->cols || csr->nnz != A->nnz)
        return kd_err_set(err, KD_EINTERNAL, "refresh: without the matrix's host CSR");
    if (like->order.kind != A->order.kind ||
        (A->order.kind != KD_REORDER_NONE && A->rows > 0 &&
         memcmp(like->order.perm, A->order.perm, (size_t)A->rows * sizeof(int32_t)) != 0))
        return kd_err_set(err, KD_EBADREQ,
                          "refresh: the matrix is stored in another order than the one it is "
                          "like (reorder)");
    return KD_OK;
}

/* like's `ops` set up with `options`, or NULL. */
static const kd_precond_t *kd_precond_held(const kd_matrix_t *M, const kd_precond_ops_t *ops,
                                           const kd_precond_options_t *options)
{
    for (const kd_precond_t *p = M->preconds; p != NULL; p = p->next)
        if (p->ops == ops && kd_precond_same_options(&p->options, options))
            return p;
    return NULL;
}

int kd_precond_refresh(kd_ocl_t *ocl, const kd_matrix_t *like, kd_matrix_t *A,
                       const kd_precond_ops_t *ops, const kd_precond_options_t *options,
                       const kd_csr_t *csr, const kd_precond_t **out, kd_precond_origin_t *origin,
                       kd_err_t *err)
{
    assert(ocl != NULL && like != NULL && A != NULL && ops != NULL && out != NULL);
    kd_precond_origin_t how = KD_PRECOND_HELD;
    *out = NULL;
    if (origin != NULL)
        *origin = how;
    int rc = kd_precond_check_options(ops, options, err);
    if (rc == KD_OK)
        rc = kd_precond_refresh_check(like, A, csr, err);
    if (rc != KD_OK)
        return rc;
    const kd_precond_t *old = kd_precond_held(like, ops, options);
    /* Matrices sharing their pattern arrays (kd_matrix_with_values) have one pattern by
     * construction: the old setup's fingerprint is A's, without a pass over the indices. */
    const int shared =
        A->share != NULL && A->share == like->share && old != NULL && old->pattern != 0;
    const uint64_t pattern = shared ? old->pattern : kd_precond_pattern(csr);
    /* What the old setup recorded is the only trace of like's pattern the device side keeps. */
    if (old != NULL && old->pattern != 0 && old->pattern != pattern)
        return kd_err_set(err, KD_EBADREQ,
                          "refresh: the matrix's pattern (row pointers and column indices) is "
                          "not the one it is like: its %s preconditioner cannot be refreshed",
                          ops->name);
    if (ops->setup == NULL || kd_precond_held(A, ops, options) != NULL)
        return kd_precond_get(ocl, A, ops, options, csr, out, err);
    int declined = 1;
    kd_precond_t *P = NULL;
    /* An old setup with no recorded pattern (set up without a host CSR) cannot be vouched for
     * when its setup read the pattern (needs_csr): built fresh, which is always right. One that
     * never read it (jacobi) reuses nothing the pattern decides. */
    if (old != NULL && (old->pattern != 0 || !ops->needs_csr) && ops->refresh != NULL) {
        P = calloc(1, sizeof(*P));
        if (P == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for a preconditioner");
        P->ops = ops;
        if (options != NULL)
            P->options = *options;
        P->pattern = pattern;
        rc = ops->refresh(ocl, old, A, csr, P, &declined, err);
        if (rc != KD_OK || declined) {
            if (ops->release != NULL)
                ops->release(P);
            free(P);
            P = NULL;
        }
        if (rc != KD_OK)
            return rc;
    }
    if (declined) {
        how = KD_PRECOND_BUILT;
        rc = kd_precond_get(ocl, A, ops, options, csr, out, err);
    } else {
        how = KD_PRECOND_REFRESHED;
        kd_precond_drop(A, ops);
        P->next = A->preconds;
        A->preconds = P;
        A->device_bytes += P->device_bytes;
        *out = P;
    }
    if (rc == KD_OK && origin != NULL)
        *origin = how;
    return rc;
}

int kd_precond_refresh_all(kd_ocl_t *ocl, const kd_matrix_t *like, kd_matrix_t *A,
                           const kd_csr_t *csr, int *refreshed, int *built, kd_err_t *err)
{
    assert(like != NULL && A != NULL);
    if (refreshed != NULL)
        *refreshed = 0;
    if (built != NULL)
        *built = 0;
    for (const kd_precond_t *p = like->preconds; p != NULL; p = p->next) {
        const kd_precond_t *got;
        kd_precond_origin_t how;
        const int rc = kd_precond_refresh(ocl, like, A, p->ops, &p->options, csr, &got, &how, err);
        if (rc != KD_OK)
            return rc;
        if (how == KD_PRECOND_REFRESHED && refreshed != NULL)
            (*refreshed)++;
        if (how == KD_PRECOND_BUILT && built != NULL)
            (*built)++;
    }
    return KD_OK;
}

void kd_precond_release_all(kd_matrix_t *A)
{
    if (A == NULL)
        return;
    while (A->preconds != NULL) {
        kd_precond_t *P = A->preconds;
        A->preconds = P->next;
        A->device_bytes -= P->device_bytes;
        if (P->ops->release != NULL)
            P->ops->release(P);
        free(P);
    }
}
