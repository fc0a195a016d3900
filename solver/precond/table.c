/*
 * The preconditioner table: every kd_precond_ops_t of this build, found by its wire name. To add
 * one: write solver/precond/<name>.c exporting a kd_precond_ops_t, declare it in precond.h and add
 * one row to kd_precond_table.
 */
#include "solver/precond/precond.h"

#include <assert.h>
#include <stdio.h>
#include <string.h>

const kd_precond_ops_t *const kd_precond_table[] = {
    &kd_precond_none, &kd_precond_jacobi,       &kd_precond_amg,       &kd_precond_ilu0,
    &kd_precond_ic0,  &kd_precond_block_jacobi, &kd_precond_chebyshev,
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
