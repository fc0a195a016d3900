/*
 * What the Chebyshev polynomial preconditioner (solver/precond/chebyshev.c) chose at setup, for
 * tests and reports: z = p(D^-1 A) D^-1 r is `degree` steps of the Chebyshev iteration on
 * [lmin, lmax] after the first.
 */
#ifndef KD_SOLVER_CHEBYSHEV_H
#define KD_SOLVER_CHEBYSHEV_H

#include "solver/precond/precond.h"

typedef struct kd_chebyshev_bounds {
    double ritz_min, ritz_max; /* Lanczos's extreme Ritz values of D^-1/2 A D^-1/2 */
    double lmin, lmax;         /* the interval the polynomial is built on */
    int degree;                /* SpMVs per apply and column */
    int lanczos_steps;         /* taken (fewer when the Krylov space closed early) */
} kd_chebyshev_bounds_t;

/* P's interval; KD_EBADREQ when P is not a chebyshev preconditioner. */
int kd_chebyshev_describe(const kd_precond_t *P, kd_chebyshev_bounds_t *out, kd_err_t *err);

/* The coefficients of Chebyshev step `step` (0: the first, from z = 0) on [lmin, lmax]:
 * d = c_d d + c_r D^-1 (r - A z), z += d. Shared with the tests' CPU reference. */
void kd_chebyshev_coefficients(double lmin, double lmax, int step, double *c_d, double *c_r);

#endif
