/*
 * The method table: every kd_method_ops_t of this build, found by its wire name, and the aliases
 * the protocol keeps; and what chooses among them (a request's names, "auto" for a matrix) or
 * lists them in a message. To add a method: write solver/methods/<name>.c (and its kernels),
 * exporting a kd_method_ops_t, declare it in method.h and add one row to kd_method_table. Nothing
 * else names methods: the protocol, server.status, the clients' messages and the driver all go
 * through this table. The helpers the methods share are method.c's, which names none of them.
 */
#include "solver/methods/method.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

const kd_method_ops_t *const kd_method_table[] = {
    &kd_method_cg,       &kd_method_sd,     &kd_method_cg1,
    &kd_method_bicgstab, &kd_method_minres, &kd_method_gmres,
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
        return kd_err_set(err, KD_EBADREQ,
                          "unknown method '%.64s': this server has %s, auto or direct", method,
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
    /* cg and minres alike: a short recurrence needs M symmetric positive definite */
    if (kd_method_needs_symmetry(mo) && !po->symmetric)
        return kd_err_set(err, KD_EBADREQ,
                          "method %s needs a symmetric preconditioner; %s is not symmetric "
                          "(gmres and bicgstab take it)",
                          mo->name, po->name);
    *m = mo;
    *p = po;
    return KD_OK;
}

/* The method can apply preconditioner p. */
static int kd_method_takes(const kd_method_ops_t *m, const kd_precond_ops_t *p)
{
    return (m->precond_forms & p->forms) != 0 && (!kd_method_needs_symmetry(m) || p->symmetric);
}

/* What m needs of the matrix is there (the scan's flags: square, symmetric, looks SPD). */
static int kd_method_fits(const kd_method_ops_t *m, const kd_matrix_t *A)
{
    return ((m->needs & KD_METHOD_NEEDS_SQUARE) == 0 || A->rows == A->cols) &&
           (!kd_method_needs_symmetry(m) || A->scan.symmetric) &&
           ((m->needs & KD_METHOD_NEEDS_SPD) == 0 || A->scan.looks_spd);
}

int kd_method_auto(const kd_matrix_t *A, const kd_precond_ops_t *p, const kd_method_ops_t **m,
                   kd_err_t *err)
{
    /* The order of preference; the matrix's class says where to start in it. */
    static const char *const order[] = {"cg", "minres", "gmres", "bicgstab"};
    const size_t start = A->scan.looks_spd ? 0 : A->scan.symmetric ? 1 : 2;
    assert(A != NULL && p != NULL && m != NULL);
    *m = NULL;
    for (size_t i = start; i < sizeof(order) / sizeof(order[0]) && *m == NULL; i++) {
        const kd_method_ops_t *c = kd_method_find(order[i]);
        if (c != NULL && kd_method_fits(c, A) && kd_method_takes(c, p))
            *m = c;
    }
    for (size_t i = 0; i < kd_method_count && *m == NULL; i++)
        if (kd_method_fits(kd_method_table[i], A) && kd_method_takes(kd_method_table[i], p))
            *m = kd_method_table[i];
    if (*m != NULL)
        return KD_OK;
    char names[256];
    kd_method_names(names, sizeof(names));
    return kd_err_set(err, KD_EBADREQ,
                      "method auto: no method of this server (%s) solves a %s matrix with "
                      "preconditioner %s",
                      names,
                      A->rows != A->cols  ? "non-square"
                      : A->scan.looks_spd ? "symmetric positive-diagonal"
                      : A->scan.symmetric ? "symmetric indefinite-looking"
                                          : "nonsymmetric",
                      p->name);
}

const kd_method_ops_t *kd_method_auto_next(const kd_method_ops_t *failed, const kd_precond_ops_t *p)
{
    static const char *const order[] = {"minres", "gmres", "bicgstab"};
    assert(failed != NULL && p != NULL);
    if ((failed->needs & KD_METHOD_NEEDS_SPD) == 0)
        return NULL; /* a breakdown of minres or gmres is not the matrix's class being wrong */
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        const kd_method_ops_t *c = kd_method_find(order[i]);
        if (c != NULL && c != failed && (c->needs & KD_METHOD_NEEDS_SPD) == 0 &&
            kd_method_takes(c, p))
            return c;
    }
    return NULL;
}

int kd_method_choose_for(const kd_matrix_t *A, const char *method, const char *preconditioner,
                         const kd_method_ops_t **m, const kd_precond_ops_t **p, kd_err_t *err)
{
    assert(A != NULL && m != NULL && p != NULL);
    if (method == NULL || strcmp(method, KD_METHOD_AUTO) != 0)
        return kd_method_choose(method, preconditioner, m, p, err);
    *m = NULL;
    *p = kd_precond_find(preconditioner != NULL && preconditioner[0] != '\0' ? preconditioner
                                                                             : "none");
    if (*p == NULL) {
        char names[256];
        kd_precond_names(names, sizeof(names));
        return kd_err_set(err, KD_EBADREQ, "unknown preconditioner '%.64s': this server has %s",
                          preconditioner, names);
    }
    int rc = kd_method_auto(A, *p, m, err);
    if (rc != KD_OK)
        *p = NULL;
    return rc;
}

/* "use gmres or bicgstab": every method of the table that does not need symmetry, or what to say
 * when there is none. */
static void kd_method_general_names(char *out, size_t cap)
{
    size_t total = 0, n = 0, w;
    for (size_t i = 0; i < kd_method_count; i++)
        total += !kd_method_needs_symmetry(kd_method_table[i]);
    w = (size_t)snprintf(
        out, cap, "%s", total > 0 ? "use " : "this server has no method for nonsymmetric matrices");
    for (size_t i = 0; i < kd_method_count && w < cap; i++) {
        if (kd_method_needs_symmetry(kd_method_table[i]))
            continue;
        const char *sep = n == 0 ? "" : n + 1 == total ? " or " : ", ";
        w += (size_t)snprintf(out + w, cap - w, "%s%s", sep, kd_method_table[i]->name);
        n++;
    }
}

int kd_method_check_matrix(const kd_method_ops_t *m, const kd_matrix_t *A, kd_err_t *err)
{
    assert(m != NULL && A != NULL);
    if ((m->needs & KD_METHOD_NEEDS_SQUARE) != 0 && A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "%s needs a square matrix, not %lld x %lld", m->name,
                          (long long)A->rows, (long long)A->cols);
    /* a matrix holding NaN or Inf is answered non_finite without iterating: that says more */
    if (!kd_method_needs_symmetry(m) || A->scan.symmetric || A->scan.non_finite_row >= 0)
        return KD_OK;
    const long long i = (long long)A->scan.asymmetric_row, j = (long long)A->scan.asymmetric_col;
    if (i < 0) /* a scan that found no witness (not from kd_matrix_scan) */
        return kd_err_set(err, KD_EBADREQ, "method %s needs a symmetric matrix", m->name);
    char mirror[48], general[192];
    if (A->scan.asymmetric_mirror_stored)
        snprintf(mirror, sizeof(mirror), "= %.17g", A->scan.asymmetric_mirror);
    else
        snprintf(mirror, sizeof(mirror), "is not stored");
    kd_method_general_names(general, sizeof(general));
    return kd_err_set(err, KD_EBADREQ,
                      "method %s needs a symmetric matrix; this one is not (a[%lld][%lld] = %.17g "
                      "but a[%lld][%lld] %s): %s",
                      m->name, i, j, A->scan.asymmetric_value, j, i, mirror, general);
}
