/*
 * k lock-step Krylov iterations on the device: the host side of kernels/krylov.cl, which holds
 * the thread mapping and the double-buffered device scalars. solver/solve.c is the driver: per
 * iteration it runs the SpMV of every running column through the matrix's format, then
 * kd_krylov_iterate (two launches for CG / PCG by default, three for SD), none of which the host
 * waits for; every few iterations it reads the state back through a snapshot on a second queue.
 * A kd_krylov_t belongs to one solve: one value type, one method, k columns of n values with
 * column stride ld (the kd_multivec_t layout), and per column a threshold on r'r and a limit on
 * its iterations.
 *
 * Iteration numbers are 1-based; the device writes the scalars of iteration i into copy i & 1,
 * so "the state after iteration i" (kd_krylov_read) and the start (iteration 0) need no
 * bookkeeping on the host. Functions enqueue and return, except kd_krylov_read,
 * kd_krylov_read_finish, kd_krylov_norms, kd_krylov_stop, kd_krylov_set_limit and the masked
 * kd_krylov_residual, which wait.
 */
#ifndef KD_SOLVER_KRYLOV_H
#define KD_SOLVER_KRYLOV_H

#include "solver/format.h"
#include "solver/ocl.h"
#include "solver/vector.h"

typedef enum kd_krylov_method {
    KD_KRYLOV_CG = 0,
    KD_KRYLOV_SD = 1,
    KD_KRYLOV_PCG = 2, /* Jacobi: z = D^-1 r with the matrix's inverse diagonal */
} kd_krylov_method_t;

/* A column's device status (the same numbers as kernels/krylov.cl). */
enum {
    KD_KRYLOV_RUNNING = 0,
    KD_KRYLOV_CONVERGED = 1,           /* r'r <= threshold after `iteration` iterations */
    KD_KRYLOV_BREAKDOWN = 2,           /* p'Ap <= 0 (finite) in iteration `iteration` */
    KD_KRYLOV_NON_FINITE_PQ = 3,       /* p'Ap not finite in iteration `iteration` */
    KD_KRYLOV_NON_FINITE_ALPHA = 4,    /* r'z / p'Ap not finite in iteration `iteration` */
    KD_KRYLOV_NON_FINITE_RESIDUAL = 5, /* r'r not finite after iteration `iteration` */
    KD_KRYLOV_STOPPED = 6,             /* at its limit after `iteration` (or kd_krylov_stop) */
    KD_KRYLOV_ZERO_STEP = 7,           /* alpha underflowed to 0 in iteration `iteration` */
};

/* Bits of a column's mask for kd_krylov_residual / kd_krylov_norms. */
enum {
    KD_KRYLOV_MASK_PARTIALS = 1,  /* recompute this column's r'r (and r'z) */
    KD_KRYLOV_MASK_DIRECTION = 2, /* and set d = z (= r without preconditioner) */
    KD_KRYLOV_MASK_RESTART = 4,   /* and mark the column running from this iteration */
};

typedef struct kd_krylov {
    kd_ocl_t *ocl;
    kd_dtype_t dtype;
    kd_krylov_method_t method;
    int64_t n, ld, k;
    size_t work_group_size;
    size_t groups; /* work-groups per column in the reducing kernels */
    int passes;    /* vector passes per iteration: 3, or 2 (CG / PCG, see kd_krylov_iterate) */
    int with_rq;   /* two passes: read r for r'Mq (else take r'Mq = p'q) */
    cl_mem dot_partials; /* 3 * k * groups VALUEs */
    cl_mem res_partials; /* 3 * 2 * k * groups VALUEs */
    cl_mem scalars;      /* 2 * k * KD_KRYLOV_SLOTS VALUEs */
    cl_mem state;        /* 2 * k * 2 cl_long */
    cl_mem threshold;    /* k VALUEs */
    cl_mem limits;       /* k cl_long: iterations a column may take */
    cl_mem mask;         /* k cl_int */
    /* Packed state for the host, k * (2 + KD_KRYLOV_SLOTS) cl_long each: slots 0 and 1 for the
     * reads a solve keeps in flight, 2 for kd_krylov_read. */
    cl_mem snapshot_slots[3];
    cl_command_queue read_queue; /* snapshots cross the bus here, beside the iterations */
    cl_mem norms;                /* k VALUEs */
    char options[160];
} kd_krylov_t;

#define KD_KRYLOV_SLOTS 6

/* One column's device state after an iteration. */
typedef struct kd_krylov_column {
    int status;        /* KD_KRYLOV_RUNNING, ... */
    int64_t iteration; /* when the status changed (see the enum) */
    double rr;         /* r'r of the current residual */
    double rz;         /* r'z (PCG), else r'r */
    double pq;         /* the last p'Ap */
    double alpha, beta;
    double fail; /* the value that stopped the column */
} kd_krylov_column_t;

/*
 * groups: work-groups per column for the reducing kernels, 0 = automatic (one wave over all
 * columns: four groups per compute unit on a GPU, eight on a CPU; at most 1024 per column, at
 * most one per WG elements). passes: 2, 3 or KD_KRYLOV_PASSES_LEAN (see kd_krylov_iterate; SD
 * always takes 3).
 * threshold: k values, each column's bound on r'r (already rounded to the dtype). limit: the
 * iterations every column may take (a column still running after `limit` stops as
 * KD_KRYLOV_STOPPED; kd_krylov_set_limit changes one). All columns start as KD_KRYLOV_RUNNING
 * with zero scalars.
 */
int kd_krylov_init(kd_ocl_t *ocl, kd_dtype_t dtype, kd_krylov_method_t method, int64_t n,
                   int64_t ld, int64_t k, int64_t groups, int passes, const double *threshold,
                   int64_t limit, kd_krylov_t *kr, kd_err_t *err);
void kd_krylov_release(kd_krylov_t *kr); /* accepts a zeroed or released one */

/*
 * Enqueue iteration `iteration` (1-based) after the SpMV q = A p (p = d; SD: p = r):
 *   3 passes: kd_krylov_dots, kd_krylov_update_residual, kd_krylov_update_direction (below);
 *   2 passes (CG / PCG): dots3 (p'q, r'Mq, q'Mq), then one pass that takes alpha and beta
 *     (the new r'z = r'z - 2 alpha r'Mq + alpha^2 q'Mq) and updates r, x and d together, leaving
 *     the exact new r'r / r'z as partial sums that the next iteration (or kd_krylov_read) folds.
 *     The same bytes as three passes, one launch and one fold fewer.
 *   KD_KRYLOV_PASSES_LEAN: two passes taking r'Mq = p'q (z'Ap = p'Ap by conjugacy) instead of
 *     reading r: one vector less per iteration, but on ill-conditioned systems, where conjugacy
 *     decays, convergence takes more iterations (494_bus: 8% more); a tuning choice, not the
 *     default.
 */
#define KD_KRYLOV_PASSES_LEAN 1
int kd_krylov_iterate(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r, kd_multivec_t *x,
                      kd_multivec_t *d, cl_mem inv_diagonal, int64_t iteration, kd_err_t *err);

/*
 * Iteration `iteration` with the SpMV fused into pass 1: kd_krylov_csr_spmv_dots3 computes
 * q = A p (p = d; SD: p = r, and d may be NULL) for every running column and the partial sums
 * the first pass would (p'q; with two passes also r'Mq and q'Mq), then the rest of the passes as
 * kd_krylov_iterate. One launch fewer than the SpMV plus kd_krylov_iterate, p and q read once
 * fewer, and the results are theirs (the same operations in the same order).
 */
int kd_krylov_iterate_csr(kd_krylov_t *kr, const kd_format_csr_t *A, kd_multivec_t *q,
                          kd_multivec_t *r, kd_multivec_t *x, kd_multivec_t *d, cl_mem inv_diagonal,
                          int64_t iteration, kd_err_t *err);

/* The three-pass steps one at a time (kd_krylov_iterate with passes = 3). Step 1: the partial sums
 * of p'q of every running column. */
int kd_krylov_dots(kd_krylov_t *kr, const kd_multivec_t *p, const kd_multivec_t *q,
                   int64_t iteration, kd_err_t *err);
/* Step 2: decide (converged, breakdown, non-finite) or take alpha; r -= alpha q (SD: and
 * x += alpha r); the partial sums of the new r'r and r'z. inv_diagonal: PCG only. */
int kd_krylov_update_residual(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                              kd_multivec_t *x, cl_mem inv_diagonal, int64_t iteration,
                              kd_err_t *err);
/* Step 3: r'r, r'z, beta; CG / PCG: x += alpha d, d = z + beta d (SD: bookkeeping only, x and d
 * may be NULL). */
int kd_krylov_update_direction(kd_krylov_t *kr, const kd_multivec_t *r, cl_mem inv_diagonal,
                               kd_multivec_t *x, kd_multivec_t *d, int64_t iteration,
                               kd_err_t *err);

/*
 * Recompute r'r (and r'z) from r into the state of iteration `iteration`, for the columns whose
 * mask has KD_KRYLOV_MASK_PARTIALS (mask NULL: mask_all for every column; else k ints, written
 * to the device with a blocking write), setting d = z and restarting as the mask bits say. A
 * running column whose new r'r is not finite stops with KD_KRYLOV_NON_FINITE_RESIDUAL.
 */
int kd_krylov_residual(kd_krylov_t *kr, const kd_multivec_t *r, cl_mem inv_diagonal,
                       kd_multivec_t *d, const int *mask, int mask_all, int64_t iteration,
                       kd_err_t *err);

/* out[c] = t_c't_c for the columns with KD_KRYLOV_MASK_PARTIALS in mask (NULL: all); blocking.
 * Other entries of out are left as they are. */
int kd_krylov_norms(kd_krylov_t *kr, const kd_multivec_t *t, const int *mask, double *out,
                    kd_err_t *err);

/* Every column's state after iteration `iteration` (k entries; blocking: one host sync). */
int kd_krylov_read(kd_krylov_t *kr, int64_t iteration, kd_krylov_column_t *out, kd_err_t *err);

/*
 * The same in two halves, so the host can enqueue more iterations while a read is in flight:
 * _start enqueues a small kernel that packs the state after `iteration` (which must be the last
 * iteration enqueued) into the snapshot's own device slot, and the read of that slot on a second
 * queue, so the iterations that follow never wait for the bus; _finish waits for the read and
 * fills out. A snapshot holds one pending read at a time; _release waits for a pending one.
 */
typedef struct kd_krylov_snapshot {
    int64_t iteration;
    int slot;      /* its device buffer: 0 or 1 (kd_krylov_read uses 2) */
    cl_long *raw;  /* k * (2 + KD_KRYLOV_SLOTS): state, then the scalars' bits */
    cl_event done; /* the pending read, or NULL */
} kd_krylov_snapshot_t;

int kd_krylov_snapshot_init(kd_krylov_t *kr, kd_krylov_snapshot_t *snap, int slot, kd_err_t *err);
void kd_krylov_snapshot_release(kd_krylov_snapshot_t *snap);
int kd_krylov_read_start(kd_krylov_t *kr, int64_t iteration, kd_krylov_snapshot_t *snap,
                         kd_err_t *err);
int kd_krylov_read_finish(kd_krylov_t *kr, kd_krylov_snapshot_t *snap, kd_krylov_column_t *out,
                          kd_err_t *err);

/* Column c may take `limit` iterations (blocking write). */
int kd_krylov_set_limit(kd_krylov_t *kr, int64_t c, int64_t limit, kd_err_t *err);

/* Freeze column c (KD_KRYLOV_STOPPED) in the state after iteration `iteration`; blocking. */
int kd_krylov_stop(kd_krylov_t *kr, int64_t c, int64_t iteration, kd_err_t *err);

#endif
