/*
 * The set-up hierarchy of solver/precond/amg/amg.c as its two V-cycles see it (private to the AMG
 * files). solver/precond/amg/amg.c builds it and runs the straightforward V-cycle, a launch per
 * SpMV and per vector step through each level matrix's format; solver/precond/amg/fused.c runs the
 * same V-cycle in fewer launches: levels >= 1 in CSR with the Chebyshev steps and the residual
 * fused into their SpMVs, and the small levels at the bottom in one single-work-group launch (the
 * "tail"); solver/precond/amg/block.c runs either on k columns at once, every launch on all
 * of them.
 *
 * The files call down, never up: amg.c (the ops, setup, the straightforward V-cycle) calls
 * fused.c, tail.c, block.c and refresh.c; each of those calls level.c (one level's device steps,
 * which every cycle and the refresh share), which calls none of them. Each declaration below
 * names its file.
 */
#ifndef KD_SOLVER_AMG_CYCLE_H
#define KD_SOLVER_AMG_CYCLE_H

#include "solver/precond/amg/amg.h"
#include "solver/matrix.h"
#include "solver/products/spgemm.h"
#include "solver/vector.h"

#define KD_AMG_STEPS_MAX 32  /* Chebyshev steps on one level: 4 x degree on a smoothed coarsest */
#define KD_AMG_DENSE_MAX 600 /* a coarsest level larger than this is smoothed, not inverted */

typedef struct kd_amg_level {
    kd_matrix_t *A;      /* owned from level 1 on; level 0 is the solve's matrix */
    kd_matrix_t *P, *R;  /* to the next level; NULL on the coarsest (csr_scalar when fused) */
    cl_mem inv_diagonal; /* 1/a_ii */
    kd_vec_t b, x;       /* the level's right-hand side and iterate (level 0: the caller's) */
    kd_vec_t q, d;       /* scratch: A x, and the Chebyshev direction */
    kd_vec_t x_other;    /* fused, levels >= 1: x's ping-pong partner */
    /* The block cycle's k columns of b, x (levels >= 1: level 0's are the caller's), q and d:
     * allocated by the first apply of several columns, freed when its solve ends (block.c). */
    kd_multivec_t block_b, block_x, block_q, block_d;
    kd_multivec_t block_x_other; /* fused, levels >= 1: block_x's ping-pong partner */
    double lambda;       /* estimated lambda_max(D^-1 A) */
    int64_t n, nnz;
    int lanes_a, lanes_p, lanes_r; /* fused: work-items per row of A, P and R */
    /* What a refresh (new values on this pattern) reuses, on every level but the coarsest: the
     * aggregates (host, n entries; -1 for a row in none) and the Galerkin products' patterns on
     * the device, A P's and (not fused: the fused hierarchy reads it from the next level's
     * csr_scalar arrays) the coarse level's (values NULL), each shared by the hierarchies
     * refreshed from this one (retained). */
    int32_t *agg;
    int64_t naggs;
    int32_t *tmap; /* host, P's nnz: entry t of R is entry tmap[t] of P */
    kd_csr_device_t ap, coarse;
    /* A refresh's device copies of agg, 1/sqrt(|aggregate|) and tmap (NULL until the first
     * refresh uploads them), retained by the hierarchies refreshed from this one. */
    cl_mem agg_mem, scale_mem, tmap_mem;
    /* Level 0 of a refreshed hierarchy whose matrix is in another format than csr_scalar: the
     * matrix's CSR pattern on the device (values NULL), uploaded by the first refresh and
     * retained by the next, which fill its values from the format's own (no upload). */
    kd_csr_device_t operand;
} kd_amg_level_t;

typedef struct kd_amg_tail {
    int first;                            /* the tail's first level; 0 when there is none */
    int n_steps;                          /* in its step list */
    cl_mem steps, index, values, scratch; /* kernels/precond/amg/amg_abi.h */
    size_t device_bytes;
} kd_amg_tail_t;

typedef struct kd_amg {
    kd_amg_options_t opt;
    int levels;
    kd_amg_level_t level[KD_AMG_LEVELS_MAX];
    cl_mem coarse_inverse; /* dense, row-major; NULL when the coarsest level is smoothed */
    int64_t coarse_n;
    kd_dtype_t dtype;
    size_t wg;
    int gpu_lanes; /* lanes per row as on a GPU (kd_amg_lanes) */
    kd_amg_tail_t tail;
    double setup_ms, spgemm_ms, host_ms;
    double phase_ms[KD_AMG_PHASES]; /* kd_amg_stats_t's */
    int refreshed;   /* built by a refresh from another hierarchy's aggregates and patterns */
    int64_t block_k; /* columns the levels' block vectors hold; 0: none allocated */
} kd_amg_t;

/* ---- level.c: one level's device steps, shared by every file below --------------------------- */

/* Launch a kernel of kernels/precond/amg/amg.cl over `global` work-items in groups of `local`, built with
 * -DKD_TPR=lanes when lanes > 0. */
int kd_amg_launch(kd_ocl_t *ocl, kd_amg_t *amg, const char *name, int lanes, size_t global,
                  size_t local, const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err);

/* The Chebyshev smoother's coefficients of step `step` on level L: d = c_d d + c_r D^-1 r. */
void kd_amg_chebyshev_coefficients(const kd_amg_t *amg, const kd_amg_level_t *L, int step,
                                   double *c_d, double *c_r);

/* Smoothing steps each way on level l: degree, or 4 x degree on a smoothed coarsest. */
int kd_amg_steps(const kd_amg_t *amg, int l);

/* `degree` Chebyshev steps on level L for A x = b through its format, from x = 0 (from_zero) or
 * from x. */
int kd_amg_smooth(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, const kd_vec_t *b, kd_vec_t *x,
                  int from_zero, int degree, kd_err_t *err);

/* Work-items per row for a fused kernel on rows of mean length `mean`: on a GPU the smallest power
 * of two in 1..64 at least the mean (at most the work-group size), so a row is one or two
 * coalesced steps of its lanes; 1 on a CPU, where lanes only add barriers (on PoCL the V-cycle
 * took several times longer with them). */
int kd_amg_lanes(const kd_amg_t *amg, double mean);

extern int kd_amg_test_gpu_lanes; /* kd_amg_test_set_gpu_lanes */

/* Level l's 1/a_ii (inv_diagonal: host, n values of the dtype) onto the device, its vectors and
 * lambda (L->A, L->n and L->nnz set). */
int kd_amg_level_setup(kd_ocl_t *ocl, kd_amg_t *amg, int l, const void *inv_diagonal,
                       kd_err_t *err);
/* The coarsest level from its host CSR: its dense inverse on the device (n <= 600), or nothing. */
int kd_amg_coarsest(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_t *csr, kd_err_t *err);
/* n host values of dtype into a new read-only device buffer. */
int kd_amg_upload_values(kd_ocl_t *ocl, const void *values, int64_t n, kd_dtype_t dtype,
                         const char *what, cl_mem *out, kd_err_t *err);
/* n rounded up to whole work-groups. */
size_t kd_amg_global(const kd_amg_t *amg, int64_t n);
/* m's CSR arrays as a device CSR (retained) when m is csr_scalar, else host's uploaded. */
int kd_amg_operand(kd_ocl_t *ocl, const kd_matrix_t *m, const kd_csr_t *host, kd_csr_device_t *out,
                   kd_err_t *err);
/* dev's pattern (retained) into *keep, values NULL. */
void kd_amg_keep_pattern(const kd_csr_device_t *dev, kd_csr_device_t *keep);
/* A device CSR on pattern's arrays (retained) with a new values buffer of its own. */
int kd_amg_on_pattern(kd_ocl_t *ocl, const kd_csr_device_t *pattern, kd_csr_device_t *out,
                      kd_err_t *err);
/* C = A B on C's known pattern, the numeric phase alone (kernels/precond/amg/amg.cl
 * kd_amg_product). */
int kd_amg_product(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_device_t *A, const kd_csr_device_t *B,
                   kd_csr_device_t *C, kd_err_t *err);

/* ---- amg.c: the straightforward V-cycle ------------------------------------------------------ */

/* The straightforward V-cycle from level l: x = M_l^-1 b. */
int kd_amg_vcycle(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_vec_t *b, kd_vec_t *x,
                  kd_err_t *err);

/* ---- fused.c and tail.c: the fused V-cycle --------------------------------------------------- */

/* The fused V-cycle: x = M^-1 b, the same operator as kd_amg_vcycle(.., 0, ..) in exact
 * arithmetic. */
int kd_amg_fused_vcycle(kd_ocl_t *ocl, kd_amg_t *amg, const kd_vec_t *b, kd_vec_t *x,
                        kd_err_t *err);

/* The fused V-cycle's tail (kernels/precond/amg/amg_abi.h): the longest run of levels >= 1 down to the
 * coarsest that fit one work-group, packed onto the device; none when even the coarsest does not
 * fit. */
int kd_amg_tail_build(kd_ocl_t *ocl, kd_amg_t *amg, kd_err_t *err);
void kd_amg_tail_release(kd_amg_tail_t *tail); /* accepts a zeroed or released one */

/* ---- block.c: the V-cycle on k columns at once ------------------------------------------------ */

/* z = M^-1 r for all r->k columns in one V-cycle, each launch on the whole block, each column
 * the one-column cycle's (fused: bit for bit). *declined = 1 (nothing enqueued, KD_OK) where it
 * cannot: a level's matrix has no SpMM, the tail is on, r's and z's column strides are not the
 * level buffers', or the device has no room for those; the caller then cycles column by column. */
int kd_amg_block_vcycle(kd_ocl_t *ocl, kd_amg_t *amg, const kd_multivec_t *r, kd_multivec_t *z,
                        int *declined, kd_err_t *err);
/* Free the levels' block vectors (a solve of several columns is over). */
void kd_amg_block_release(kd_amg_t *amg);

/* ---- refresh.c: new values on a kept fused hierarchy ----------------------------------------- */

/* The fused hierarchy's refresh (solver/precond/amg/refresh.c): amg, with old's options, levels,
 * aggregates and patterns, for A (fine: its host CSR in the stored order), every value computed
 * on the device. */
int kd_amg_refresh_device(kd_ocl_t *ocl, kd_amg_t *amg, const kd_amg_t *old, const kd_matrix_t *A,
                          const kd_csr_t *fine, kd_err_t *err);

#endif
