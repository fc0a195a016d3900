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
#include "solver/products/spgemm.h"
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
    int aggregation;     /* 0: aggregates and prolongator on the host (kd_amg_aggregate,
                            kd_amg_prolongator); 1: on the device where block_size is 1
                            (kd_amg_aggregate_device, kd_amg_prolongator_device) */
    int fused;         /* 1: the fused V-cycle (solver/precond/amg/fused.c); 0: a launch per step */
    int64_t tail_rows; /* fused: the levels from the first one >= 1 with at most this many rows
                          (and few enough entries) run as one single-work-group launch; 0: never */
} kd_amg_options_t;

#define KD_AMG_TAIL_ROWS_MAX 16384

void kd_amg_options_default(kd_amg_options_t *opt);

/* What a set-up hierarchy is (benchmarks, logs). */
#define KD_AMG_LEVELS_MAX 16

/* The setup's steps, each timed on the host's clock over every level (kd_amg_stats_t.phase_ms):
 * a step that enqueues device work waits for it before its clock stops. */
typedef enum kd_amg_phase {
    KD_AMG_PHASE_LEVEL,      /* a coarse level's matrix onto the device (upload, scan) */
    KD_AMG_PHASE_LAMBDA,     /* 1/a_ii, the level's vectors and Lanczos's lambda_max */
    KD_AMG_PHASE_AGGREGATE,  /* the aggregates */
    KD_AMG_PHASE_PROLONG,    /* the smoothed prolongator P */
    KD_AMG_PHASE_TRANSPOSE,  /* R = P^T and the refresh's map of R's entries into P's */
    KD_AMG_PHASE_TRANSFERS,  /* P and R onto the device as the cycle's matrices */
    KD_AMG_PHASE_AP,         /* the Galerkin product's operands and A P (SpGEMM) */
    KD_AMG_PHASE_RAP,        /* A_c = R (A P) (SpGEMM), read back */
    KD_AMG_PHASE_COARSEST,   /* the coarsest level's dense inverse */
    KD_AMG_PHASE_TAIL,       /* the fused cycle's tail */
    KD_AMG_PHASES
} kd_amg_phase_t;
extern const char *const kd_amg_phase_names[KD_AMG_PHASES];
typedef struct kd_amg_stats {
    int levels;
    int64_t rows[KD_AMG_LEVELS_MAX], nnz[KD_AMG_LEVELS_MAX];
    double operator_complexity; /* the levels' nonzeros over A's */
    int tail_level;   /* the fused V-cycle's one-work-group tail from this level; 0: none */
    double setup_ms;  /* wall time of the whole setup */
    double spgemm_ms; /* of it: the Galerkin products (transfers included); 0 refreshed fused */
    double host_ms;   /* of it: aggregation, prolongators, transposes on the host; ditto */
    int refreshed;    /* a refresh built it (new values on a held hierarchy's pattern) */
    double phase_ms[KD_AMG_PHASES]; /* of it: each step, over the levels (kd_amg_phase_t) */
    double lambda[KD_AMG_LEVELS_MAX]; /* each level's estimate of lambda_max(D^-1 A) */
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
 * Aggregates of square A's strength graph on the device, block_size 1 (kernels/precond/amg/amg.cl
 * kd_amg_strength .. kd_amg_agg_join): j is a strong neighbour of i when j != i, a_ij != 0 and
 * a_ij^2 >= threshold^2 |a_ii a_jj|; a node with none gets agg -1. Roots: a distance-2 maximal
 * independent set of the strength graph, in rounds. A node's state is 2 root, 1 undecided, 0
 * decided not a root; each round node j's key is the tuple (state, 1023 - min(1023, its undecided
 * strong neighbours), h(j) mod 2^20, j), h the 32-bit hash "lowbias32" (x ^= x >> 16,
 * x *= 0x7feb352d, x ^= x >> 15, x *= 0x846ca68b, x ^= x >> 16), and then, all at once, an
 * undecided node whose key is the largest within distance 2 (itself included) becomes a root and
 * one whose largest key within distance 2 is a root's becomes 0.
 * Aggregate ids are the roots in index order; then every node not in one takes the aggregate of
 * its strong neighbour of largest (h(j) mod 2^30, j) among those in one, twice (a root's
 * neighbours, then theirs). Deterministic: the same matrix gives the same aggregates on any device
 * and work-group size. dA: A on the device (NULL: uploaded here); agg: rows int32, the caller's
 * host array; *rounds (may be NULL) the independent set's rounds. KD_EDEVMEM, KD_ENOMEM.
 */
int kd_amg_aggregate_device(kd_ocl_t *ocl, const kd_csr_t *A, const kd_csr_device_t *dA,
                            double threshold, int32_t *agg, int64_t *naggs, int *rounds,
                            kd_err_t *err);

/*
 * The smoothed prolongator P = (I - omega D^-1 A) T (rows x naggs), T the tentative one: column j
 * holds 1/sqrt(|aggregate j|) on aggregate j's rows (the constant vector, normalised per
 * aggregate; rows with agg -1 have none). A zero diagonal entry is KD_EBADREQ naming the row.
 * *P canonical, the caller's.
 */
int kd_amg_prolongator(const kd_csr_t *A, const int32_t *agg, int64_t naggs, double omega,
                       kd_csr_t **P, kd_err_t *err);

/*
 * kd_amg_prolongator on the device: P = (I - omega D^-1 A) T for dA (square, its diagonal
 * stored in every row) and the host's aggregates agg (naggs > 0 of them), into *P, a new device
 * CSR (the caller's): T from the aggregates, A T by kd_spgemm, then P's values in place. P's
 * pattern is kd_amg_prolongator's exactly, its values the same to rounding (the products are
 * summed before the scaling). KD_EDEVMEM, KD_ENOMEM, kd_spgemm's errors.
 */
int kd_amg_prolongator_device(kd_ocl_t *ocl, const kd_csr_device_t *dA, const int32_t *agg,
                              int64_t naggs, double omega, kd_csr_device_t *P, kd_err_t *err);

/*
 * R = P^T on the device into *R, a new device CSR (the caller's): R's rows in ascending P row, as
 * kd_csr_transpose orders them, values copied (the same bits); map (P->nnz int32 on the host, may
 * be NULL): entry t of R is entry map[t] of P. Deterministic, though the scatter's slots are not
 * (each row of R is sorted after). KD_EDEVMEM, KD_ENOMEM.
 */
int kd_amg_transpose_device(kd_ocl_t *ocl, const kd_csr_device_t *P, kd_csr_device_t *R,
                            int32_t *map, kd_err_t *err);

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
