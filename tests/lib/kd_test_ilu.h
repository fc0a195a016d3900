/*
 * Host references for the incomplete factorisations' triangular solves (solver/precond/ilu.h),
 * shared by test_ilu and test_ilu_match: the exact solve and the Jacobi sweeps the device runs.
 */
#ifndef KD_TEST_ILU_H
#define KD_TEST_ILU_H

#include "solver/precond/ilu.h"

#include <stdlib.h>
#include <string.h>

/* x = T^-1 b exactly (lower: ascending rows, upper: descending). */
static inline void host_solve(const kd_ilu_tri_t *t, int lower, const double *b, double *x)
{
    for (int64_t s = 0; s < t->n; s++) {
        const int64_t i = lower ? s : t->n - 1 - s;
        double v = b[i];
        for (int32_t k = t->indptr[i]; k < t->indptr[i + 1]; k++)
            v -= t->values[k] * x[t->indices[k]];
        x[i] = v / t->diag[i];
    }
}

/* x = `sweeps` Jacobi sweeps on T x = b from x = D^-1 b. */
static inline void host_sweeps(const kd_ilu_tri_t *t, int sweeps, const double *b, double *x)
{
    double *old = malloc((size_t)t->n * sizeof(double) + 8);
    for (int64_t i = 0; i < t->n; i++)
        x[i] = b[i] / t->diag[i];
    for (int s = 0; s < sweeps; s++) {
        memcpy(old, x, (size_t)t->n * sizeof(double));
        for (int64_t i = 0; i < t->n; i++) {
            double v = b[i];
            for (int32_t k = t->indptr[i]; k < t->indptr[i + 1]; k++)
                v -= t->values[k] * old[t->indices[k]];
            x[i] = v / t->diag[i];
        }
    }
    free(old);
}

#endif
