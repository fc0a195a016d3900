/*
 * Smoothed-aggregation algebraic multigrid (Vanek, Mandel and Brezina 1996), the host half: the
 * strength graph, the aggregates and the smoothed prolongator of one level, from its canonical
 * host CSR. solver/precond_amg.c builds the hierarchy from these (the Galerkin products R A P on
 * the device with solver/spgemm.h) and runs the V-cycle. Everything here is deterministic: the
 * same matrix gives the same aggregates, in index order.
 */
#ifndef KD_SOLVER_AMG_H
#define KD_SOLVER_AMG_H

#include "common/csr.h"

/* The setup's options, with their defaults in kd_amg_options_default. */
typedef struct kd_amg_options {
    double
        threshold;       /* strength: j is a strong neighbour of i when |a_ij| >= threshold *
                            sqrt(|a_ii a_jj|); 0 keeps every off-diagonal entry (PETSc GAMG's default) */
    int max_levels;      /* levels at most, the finest included */
    int64_t coarse_size; /* stop coarsening at this many rows or fewer: a dense solve there */
    int degree;          /* Chebyshev smoother's degree (sweeps before and after) */
    double lower;        /* Chebyshev's interval: [lower, upper] x the estimated lambda_max of */
    double upper;        /* D^-1 A (PETSc's 0.1, 1.1) */
    int lanczos_steps;   /* Lanczos steps for that estimate */
} kd_amg_options_t;

void kd_amg_options_default(kd_amg_options_t *opt);

/*
 * Aggregates of A's strength graph (square A): agg[i] in 0..*naggs-1 for every row, in three
 * passes in index order: (1) a row whose strong neighbours are all free starts an aggregate with
 * them; (2) a free row joins the aggregate of its first strong neighbour aggregated in pass 1;
 * (3) a row still free starts an aggregate with its free strong neighbours. A row with no strong
 * neighbour is an aggregate of its own. agg: rows int32, the caller's. KD_ENOMEM.
 */
int kd_amg_aggregate(const kd_csr_t *A, double threshold, int32_t *agg, int64_t *naggs,
                     kd_err_t *err);

/*
 * The smoothed prolongator P = (I - omega D^-1 A) T (rows x naggs), T the tentative one: column j
 * holds 1/sqrt(|aggregate j|) on aggregate j's rows (the constant vector, normalised per
 * aggregate). A zero diagonal entry is KD_EBADREQ naming the row. *P canonical, the caller's.
 */
int kd_amg_prolongator(const kd_csr_t *A, const int32_t *agg, int64_t naggs, double omega,
                       kd_csr_t **P, kd_err_t *err);

/*
 * The largest eigenvalue of a symmetric tridiagonal matrix (diagonal alpha[0..m-1], off-diagonal
 * beta[0..m-2]) by Sturm bisection: Lanczos's Ritz value.
 */
double kd_amg_tridiagonal_max(const double *alpha, const double *beta, int m);

/*
 * The inverse of the dense symmetric positive definite n x n matrix A (row-major, overwritten
 * with it) through its Cholesky factor. KD_ENOTSPD naming the pivot when it is not positive.
 */
int kd_amg_dense_inverse(double *A, int64_t n, kd_err_t *err);

#endif
