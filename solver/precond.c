/*
 * The preconditioner table: every kd_precond_ops_t of this build, found by its wire name, and the
 * preconditioners kept with a matrix. To add one: write solver/precond_<name>.c exporting a
 * kd_precond_ops_t, declare it in precond.h and add one row to kd_precond_table.
 */
#include "solver/precond.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const kd_precond_ops_t kd_precond_none = {
    .name = "none",
    .summary = "no preconditioner (M = I)",
    .forms = KD_PRECOND_IDENTITY,
    .symmetric = 1,
};

const kd_precond_ops_t *const kd_precond_table[] = {
    &kd_precond_none,
    &kd_precond_jacobi,
    &kd_precond_amg,
};
const size_t kd_precond_count = sizeof(kd_precond_table) / sizeof(kd_precond_table[0]);

const kd_precond_ops_t *kd_precond_find(const char *name)
{
    assert(name != NULL);
    for (size_t i = 0; i < kd_precond_count; i++)
        if (strcmp(kd_precond_table[i]->name, name) == 0)
            return kd_precond_table[i];
    return NULL;
}

void kd_precond_names(char *out, size_t cap)
{
    size_t w = 0;
    assert(out != NULL && cap > 0);
    out[0] = '\0';
    for (size_t i = 0; i < kd_precond_count && w < cap; i++)
        w += (size_t)snprintf(out + w, cap - w, "%s%s", i > 0 ? ", " : "",
                              kd_precond_table[i]->name);
}

int kd_precond_ready(const kd_matrix_t *A, const kd_precond_ops_t *ops)
{
    assert(A != NULL && ops != NULL);
    if (ops->setup == NULL)
        return 1;
    for (const kd_precond_t *p = A->preconds; p != NULL; p = p->next)
        if (p->ops == ops)
            return 1;
    return 0;
}

int kd_precond_get(kd_ocl_t *ocl, kd_matrix_t *A, const kd_precond_ops_t *ops, const kd_csr_t *csr,
                   const kd_precond_t **out, kd_err_t *err)
{
    static const kd_precond_t identity = {.ops = &kd_precond_none};
    assert(ocl != NULL && A != NULL && ops != NULL && out != NULL);
    *out = NULL;
    if (ops->setup == NULL) {
        *out = &identity;
        return KD_OK;
    }
    for (kd_precond_t *p = A->preconds; p != NULL; p = p->next)
        if (p->ops == ops) {
            *out = p;
            return KD_OK;
        }
    if (ops->needs_csr && csr == NULL)
        return kd_err_set(err, KD_EINTERNAL, "%s: set up without the matrix's host CSR", ops->name);
    kd_precond_t *P = calloc(1, sizeof(*P));
    if (P == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a preconditioner");
    P->ops = ops;
    int rc = ops->setup(ocl, A, csr, P, err);
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
