/*
 * Smoothed-aggregation algebraic multigrid (Vanek, Mandel and Brezina 1996), the host half: the
 * strength graph, the aggregates and the smoothed prolongator of one level, from its canonical
 * host CSR. solver/precond/amg/amg.c builds the hierarchy from these (the Galerkin products R A P
 * on the device with solver/products/spgemm.h) and runs the V-cycle. Everything here is
 * deterministic: the same matrix gives the same aggregates, in index order.
 */
#ifndef KD_SOLVER_AMG_H
#define KD_SOLVER_AMG_H

#include "common/csr.h"
#include "solver/runtime/ocl.h"

/* The setup's options, with their defaults in kd_amg_options_default. */
typedef struct kd_amg_options {
    double
        threshold;       /* strength: j is a strong neighbour of i when |a_ij| >= threshold *
                            sqrt(|a_ii a_jj|); 0 keeps every off-diagonal entry (PETSc GAMG's default) */
    int max_levels;      /* levels at most, the finest included */
    int block_size;      /* unknowns per node (3 for 3-D elasticity): nodes are aggregated, and each
                            aggregate gets one coarse unknown per component; rows stay node-major */
    int64_t coarse_size; /* stop coarsening at this many rows or fewer: a dense solve there */
    int degree;          /* Chebyshev smoother's degree (sweeps before and after) */
    double lower;        /* Chebyshev's interval: [lower, upper] x the estimated lambda_max of */
    double upper;        /* D^-1 A (PETSc's 0.1, 1.1) */
    int lanczos_steps;   /* Lanczos steps for that estimate */
    int fused;         /* 1: the fused V-cycle (solver/precond/amg/fused.c); 0: a launch per step */
    int64_t tail_rows; /* fused: the levels from the first one >= 1 with at most this many rows
                          (and few enough entries) run as one single-work-group launch; 0: never */
} kd_amg_options_t;

#define KD_AMG_TAIL_ROWS_MAX 16384

void kd_amg_options_default(kd_amg_options_t *opt);

/* What a set-up hierarchy is (benchmarks, logs). */
#define KD_AMG_LEVELS_MAX 16
typedef struct kd_amg_stats {
    int levels;
    int64_t rows[KD_AMG_LEVELS_MAX], nnz[KD_AMG_LEVELS_MAX];
    double operator_complexity; /* the levels' nonzeros over A's */
    int tail_level;   /* the fused V-cycle's one-work-group tail from this level; 0: none */
    double setup_ms;  /* wall time of the whole setup */
    double spgemm_ms; /* of it: the Galerkin products (transfers included); 0 refreshed fused */
    double host_ms;   /* of it: aggregation, prolongators, transposes on the host; ditto */
    int refreshed;    /* a refresh built it (new values on a held hierarchy's pattern) */
} kd_amg_stats_t;

/* For tests: hierarchies set up from now on give the fused kernels lanes per row as on a GPU
 * (1), or as the device wants (0, the default), so a CPU device tests the GPU's mapping. */
void kd_amg_test_set_gpu_lanes(int on);

struct kd_precond;
/* The statistics of P, an amg preconditioner set up on a matrix. KD_EBADREQ for another one. */
int kd_amg_describe(const struct kd_precond *P, kd_amg_stats_t *out, kd_err_t *err);

/* Where a V-cycle's time goes (benchmarks): device milliseconds of one SpMV with each level's A,
 * P and R (the span of `runs` back to back, divided), and of one whole V-cycle, by device events
 * (span) and by the host's clock around `runs` of them (wall), and its kernel launches. */
typedef struct kd_amg_profile {
    double a_ms[KD_AMG_LEVELS_MAX], p_ms[KD_AMG_LEVELS_MAX], r_ms[KD_AMG_LEVELS_MAX];
    double vcycle_device_ms, vcycle_wall_ms;
    double vcycle_launches; /* kernels one V-cycle enqueues */
} kd_amg_profile_t;
int kd_amg_profile(kd_ocl_t *ocl, const struct kd_precond *P, int runs, kd_amg_profile_t *out,
                   kd_err_t *err);

/*
 * Aggregates of A's strength graph (square A), node by node for block_size unknowns a node (the
 * graph of the blocks' Frobenius norms; block_size must divide the rows): agg[i] in
 * 0..*naggs-1 for every row, where an aggregate of nodes gives block_size coarse unknowns, one per
 * component. Three passes in index order: (1) a node whose strong neighbours are all free starts
 * an aggregate with them; (2) a free node joins the aggregate of its first strong neighbour
 * aggregated in pass 1; (3) a node still free starts an aggregate with its free strong
 * neighbours. A node with no strong neighbour (a Dirichlet row) is in no aggregate: agg = -1, and
 * the smoother alone treats it. agg: rows int32, the caller's. KD_ENOMEM, KD_EBADREQ.
 */
int kd_amg_aggregate(const kd_csr_t *A, double threshold, int block_size, int32_t *agg,
                     int64_t *naggs, kd_err_t *err);

/*
 * The smoothed prolongator P = (I - omega D^-1 A) T (rows x naggs), T the tentative one: column j
 * holds 1/sqrt(|aggregate j|) on aggregate j's rows (the constant vector, normalised per
 * aggregate; rows with agg -1 have none). A zero diagonal entry is KD_EBADREQ naming the row.
 * *P canonical, the caller's.
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
