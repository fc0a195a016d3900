/*
 * BLAS-1 on device vectors, and the fused steps the iterative solvers are made of.
 *
 * A kd_blas_t belongs to one solve (or one caller) on one device and one value type. It owns
 * three small device buffers:
 *   partials  one VALUE per work-group of a reduction (at most groups_max),
 *   scalars   KD_BLAS_SLOT_COUNT VALUEs: where reductions land and where the solver's alpha and
 *             beta are computed, so an iteration's kernels read their scalars from the device
 *             and the host never waits between them,
 *   state     two cl_long: the iteration's status (KD_BLAS_RUNNING, ...) and the iteration at
 *             which it changed, written by the device when it detects convergence, breakdown
 *             or a non-finite value.
 *
 * Reductions are two launches: every work-group reduces its strided share of the vectors in
 * local memory into partials[group], then one work-group sums the partials in a fixed order and
 * applies an operation (store into a slot, or compute alpha / beta). The group count depends
 * only on n and the device, so results are bitwise reproducible run to run; there are no
 * atomics. Functions named kd_blas_* enqueue and return, except those that return a host value
 * (kd_blas_dot, kd_blas_nrm2, kd_blas_read_slot, kd_blas_step_read), which wait for the queue.
 *
 * All vectors passed to one call have the same length and the kd_blas_t's dtype.
 */
#ifndef KD_SOLVER_BLAS_H
#define KD_SOLVER_BLAS_H

#include "solver/ocl.h"
#include "solver/vector.h"

/* Slots of the scalars buffer (also #defined with the same values in kernels/blas.cl). */
typedef enum kd_blas_slot {
    KD_BLAS_SLOT_RR = 0,     /* r'r of the current residual (Shewchuk's delta) */
    KD_BLAS_SLOT_PQ = 1,     /* p'q = p'Ap for the current direction */
    KD_BLAS_SLOT_ALPHA = 2,  /* step length */
    KD_BLAS_SLOT_BETA = 3,   /* CG direction update factor */
    KD_BLAS_SLOT_FAIL = 4,   /* the value that stopped the iteration (p'Ap <= 0, NaN, ...) */
    KD_BLAS_SLOT_RESULT = 5, /* scratch for kd_blas_dot / kd_blas_nrm2 / kd_blas_dot_to */
    KD_BLAS_SLOT_COUNT = 6
} kd_blas_slot_t;

/* Device-side iteration status (state[0]); state[1] says when (see each). */
enum {
    KD_BLAS_RUNNING = 0,
    KD_BLAS_CONVERGED = 1,          /* r'r <= threshold after state[1] iterations; frozen since */
    KD_BLAS_BREAKDOWN = 2,          /* p'Ap <= 0 (finite) in iteration state[1] */
    KD_BLAS_NON_FINITE_PQ = 3,      /* p'Ap not finite in iteration state[1] */
    KD_BLAS_NON_FINITE_ALPHA = 4,   /* r'r / p'Ap not finite in iteration state[1] */
    KD_BLAS_NON_FINITE_RESIDUAL = 5 /* the new r'r not finite after iteration state[1] */
};

typedef struct kd_blas {
    kd_ocl_t *ocl;
    kd_dtype_t dtype;
    size_t work_group_size;
    size_t groups_max; /* work-groups per reduction at most: partials holds this many */
    cl_mem partials;
    cl_mem scalars;
    cl_mem state;
    size_t pending_groups; /* partial sums the last dot_partial / step_update left */
    char options[48];      /* "-DKD_WG_SIZE=N" for kernels/blas.cl */
} kd_blas_t;

/* Allocate the small buffers and zero scalars and state. */
int kd_blas_init(kd_ocl_t *ocl, kd_dtype_t dtype, kd_blas_t *blas, kd_err_t *err);
void kd_blas_release(kd_blas_t *blas); /* accepts a zeroed or released kd_blas_t */

/* ---- BLAS-1 with host scalars and host results ---- */

/* *out = x'y (blocking). */
int kd_blas_dot(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, double *out, kd_err_t *err);
/* *out = ||x||_2 = sqrt(x'x) (blocking). */
int kd_blas_nrm2(kd_blas_t *blas, const kd_vec_t *x, double *out, kd_err_t *err);
/* y = alpha * x + y */
int kd_blas_axpy(kd_blas_t *blas, double alpha, const kd_vec_t *x, kd_vec_t *y, kd_err_t *err);
/* y = x + alpha * y */
int kd_blas_xpay(kd_blas_t *blas, const kd_vec_t *x, double alpha, kd_vec_t *y, kd_err_t *err);
/* y = x */
int kd_blas_copy(kd_blas_t *blas, const kd_vec_t *x, kd_vec_t *y, kd_err_t *err);
/* x = alpha * x */
int kd_blas_scale(kd_blas_t *blas, double alpha, kd_vec_t *x, kd_err_t *err);

/* ---- device scalars ---- */

/* scalars[slot] = x'y, enqueued (no host wait). */
int kd_blas_dot_to(kd_blas_t *blas, const kd_vec_t *x, const kd_vec_t *y, kd_blas_slot_t slot,
                   kd_err_t *err);
/* *out = scalars[slot] (blocking). */
int kd_blas_read_slot(kd_blas_t *blas, kd_blas_slot_t slot, double *out, kd_err_t *err);

/*
 * ---- fused solver steps ----
 *
 * One CG iteration k (1-based) is, with p = d:
 *   kd_blas_step_alpha(p, q = A p, k, threshold)    p'q; alpha = rr / p'q      (2 launches)
 *   kd_blas_step_update(p, q, x, r)                 x += alpha p, r -= alpha q,
 *                                                   partial sums of r'r        (1 launch)
 *   kd_blas_step_residual(k)                        rr_new, beta = rr_new / rr (1 launch)
 *   kd_blas_step_direction(r, d)                    d = r + beta d             (1 launch)
 * and steepest descent is the same with p = r and no direction step. Every step reads its
 * scalars from the device. Once the state leaves KD_BLAS_RUNNING, alpha is 0 and update leaves x
 * and r untouched, so running a few iterations past convergence or breakdown (between two host
 * checks) changes nothing.
 */

/* scalars[RR] = r'r and state = RUNNING (the start of an iteration). */
int kd_blas_step_start(kd_blas_t *blas, const kd_vec_t *r, kd_err_t *err);
/* p'q into scalars[PQ]; then, while running: r'r <= threshold -> CONVERGED after k - 1
 * iterations; p'q not finite -> NON_FINITE_PQ; p'q <= 0 -> BREAKDOWN; else alpha = r'r / p'q (not
 * finite -> NON_FINITE_ALPHA). The offending value goes to scalars[FAIL]. alpha = 0 whenever not
 * running. */
int kd_blas_step_alpha(kd_blas_t *blas, const kd_vec_t *p, const kd_vec_t *q, int64_t iteration,
                       double threshold, kd_err_t *err);
/* x += alpha p; r -= alpha q (p may be r); leaves the partial sums of the new r'r. */
int kd_blas_step_update(kd_blas_t *blas, const kd_vec_t *p, const kd_vec_t *q, kd_vec_t *x,
                        kd_vec_t *r, kd_err_t *err);
/* Finish r'r from the partial sums step_update left: beta = rr_new / rr, rr = rr_new; a
 * non-finite rr_new while running -> NON_FINITE_RESIDUAL at iteration k. */
int kd_blas_step_residual(kd_blas_t *blas, int64_t iteration, kd_err_t *err);
/* As kd_blas_step_residual, for a residual r recomputed from scratch (r = b - A x). */
int kd_blas_step_residual_of(kd_blas_t *blas, const kd_vec_t *r, int64_t iteration, kd_err_t *err);
/* d = r + beta d */
int kd_blas_step_direction(kd_blas_t *blas, const kd_vec_t *r, kd_vec_t *d, kd_err_t *err);

typedef struct kd_blas_step_state {
    int status;        /* KD_BLAS_RUNNING, ... */
    int64_t iteration; /* state[1]: when the status changed (meaningless while running) */
    double rr;         /* r'r */
    double pq;         /* the last p'Ap */
    double fail_value; /* the offending value for BREAKDOWN / NON_FINITE */
} kd_blas_step_state_t;

/* The one host synchronisation of an iteration check: read rr and the state (blocking). */
int kd_blas_step_read(kd_blas_t *blas, kd_blas_step_state_t *out, kd_err_t *err);

#endif
