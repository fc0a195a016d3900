/*
 * The vector operations Krylov methods are written with: k lock-step columns on the device, each
 * with its own status, scalars, threshold on r'r and iteration limit, and the fused passes that
 * update them (the host side of kernels/methods/krylov.cl, which holds the thread mapping). A
 * method (solver/method_*.c) composes an iteration from these and the matrix's SpMV; solver/solve.c
 * runs the iterations and reads the state back through snapshots on a second queue.
 *
 * A kd_krylov_t belongs to one solve: one value type, k columns of n values with column stride ld
 * (the kd_multivec_t layout), and optionally a diagonal preconditioner's vector (1/a_ii), which
 * every pass that forms z = M^-1 r applies on the fly. The layout of the device state, the status
 * codes and the kernels' launch block are declared once, in kernels/methods/krylov_abi.h.
 *
 * Reductions: a pass that reduces leaves one partial sum per (column, work-group); the pass that
 * needs the total folds them itself. Every reduction a method makes is announced with
 * kd_krylov_reduce between the two, the one place where several ranks will combine their sums.
 *
 * Iteration numbers are 1-based; the device writes the scalars of iteration i into copy i & 1, so
 * "the state after iteration i" (kd_krylov_read) and the start (iteration 0) need no bookkeeping
 * on the host. Functions enqueue and return, except kd_krylov_read, kd_krylov_read_finish,
 * kd_krylov_norms, kd_krylov_stop, kd_krylov_set_limit and a masked kd_krylov_residual, which
 * wait.
 */
#ifndef KD_SOLVER_KRYLOV_H
#define KD_SOLVER_KRYLOV_H

#include "kernels/methods/krylov_abi.h"
#include "solver/comm.h"
#include "solver/formats/format.h"
#include "solver/runtime/ocl.h"
#include "solver/vector.h"

/* Partial sums a pass left for kd_krylov_reduce, recorded only in a solve spread over ranks
 * (kr->comm set), so that the reduction combines exactly what is new: a column's partials are
 * new when the pass wrote them (its `fresh` rule), and left alone otherwise (a frozen column's
 * are carried over, already combined). */
enum kd_krylov_fresh {
    KD_KRYLOV_FRESH_ALL = 0,   /* every column wrote its partials (dots, dots3) */
    KD_KRYLOV_FRESH_MASK = 1,  /* the columns with KD_KRYLOV_MASK_PARTIALS (residual partials) */
    KD_KRYLOV_FRESH_ALPHA = 2, /* the columns whose alpha of copy `parity` is not 0 (updates) */
};

typedef struct kd_krylov_pending {
    int res;    /* 0: dot_partials, 1: res_partials */
    int set;    /* res_partials' set */
    int sums;   /* the sums j = 0 .. sums - 1 of that buffer (and set) */
    int fresh;  /* enum kd_krylov_fresh */
    int parity; /* FRESH_ALPHA: the scalars' copy holding this iteration's alpha */
} kd_krylov_pending_t;

#define KD_KRYLOV_PENDING_MAX 4

typedef struct kd_krylov {
    kd_ocl_t *ocl;
    kd_dtype_t dtype;
    int64_t n, ld, k;
    size_t work_group_size;
    size_t groups;       /* work-groups per column in the reducing kernels */
    cl_mem diagonal;     /* a diagonal preconditioner's 1/a_ii (not owned), or NULL */
    cl_mem operator_z;   /* an operator preconditioner's z = M^-1 r, k columns of stride ld (not
                            owned, set by the method), or NULL */
    int fold_snapshots;  /* the method leaves r'r as partial sums: snapshots fold them */
    int64_t reductions;  /* kd_krylov_reduce calls so far */
    cl_mem dot_partials; /* KD_KRYLOV_DOTS * k * groups VALUEs */
    cl_mem res_partials; /* KD_KRYLOV_RES_SETS * KD_KRYLOV_RES_SUMS * k * groups VALUEs */
    cl_mem scalars;      /* 2 * k * KD_KRYLOV_SLOTS VALUEs */
    cl_mem state;        /* 2 * k * 2 cl_long */
    cl_mem threshold;    /* k VALUEs */
    cl_mem limits;       /* k cl_long: iterations a column may take */
    cl_mem mask;         /* k cl_int */
    /* Packed state for the host, k kd_krylov_snapshot_row_t each: slots 0 and 1 for the reads a
     * solve keeps in flight, 2 for kd_krylov_read. */
    cl_mem snapshot_slots[3];
    cl_command_queue read_queue; /* snapshots cross the bus here, beside the iterations */
    cl_mem norms;                /* k VALUEs */
    char options[160];
    /* Spread over ranks (solver/comm.h; set by the solve after kd_krylov_init, not owned), else
     * NULL. Then the passes record their partial sums here for kd_krylov_reduce, with the
     * mask the residual kernels last had (mask_host: k ints, or mask_all for every column). */
    kd_comm_t *comm;
    kd_krylov_pending_t pending[KD_KRYLOV_PENDING_MAX];
    int npending;
    int pending_unknown; /* a method's own pass ran (kd_krylov_launch): its partials are unknown */
    int *mask_host;
    int mask_all, mask_given;
    void *combine_host; /* host copy of partials being combined */
    size_t combine_cap; /* its bytes */
} kd_krylov_t;

/* One column's device state after an iteration. */
typedef struct kd_krylov_column {
    int status;        /* enum kd_krylov_status */
    int64_t iteration; /* when the status changed (see the enum) */
    double rr;         /* r'r of the current residual */
    double rz;         /* r'z with a preconditioner, else r'r */
    double pq;         /* the last step's denominator (p'Ap) */
    double alpha, beta;
    double fail; /* the value that stopped the column */
} kd_krylov_column_t;

/*
 * groups: work-groups per column for the reducing kernels, 0 = automatic (one wave over all
 * columns: four groups per compute unit on a GPU, eight on a CPU; at most 1024 per column, at
 * most one per WG elements). threshold: k values, each column's bound on r'r (already rounded to
 * the dtype). limit: the iterations every column may take (a column still running after `limit`
 * stops as KD_KRYLOV_STOPPED; kd_krylov_set_limit changes one). diagonal: NULL, or n values of
 * 1/a_ii that stay valid while kr is used. build_options: extra options for the kernels' build
 * (tuning; part of the program cache's key), or NULL. All columns start as KD_KRYLOV_RUNNING
 * with zero scalars.
 */
int kd_krylov_init(kd_ocl_t *ocl, kd_dtype_t dtype, int64_t n, int64_t ld, int64_t k,
                   int64_t groups, const double *threshold, int64_t limit, cl_mem diagonal,
                   const char *build_options, kd_krylov_t *kr, kd_err_t *err);
void kd_krylov_release(kd_krylov_t *kr); /* accepts a zeroed or released one */

/*
 * The reduction point: a method calls it once per reduction of an iteration, after the launch
 * that leaves partial sums for a later launch to fold (`what` names them, for messages); one call
 * stands for every partial sum left since the previous call. In one process the consumer folds
 * the partials itself and this only counts; spread over several ranks it is where their partial
 * sums are combined, so a method's reductions per iteration are its synchronisations.
 * Spread (kr->comm): each new column's partials are read, folded on the host (in group order),
 * summed over the ranks (comm->sum, rank order), and written back as [total, 0, ..., 0], so the
 * consumer's unchanged fold gives the total on every rank, bit for bit the same; it waits for
 * the device. Only krylov.c's own passes record what they leave: after a method's own launch
 * it is KD_EINTERNAL (such a method does not spread; kd_method_ops_t.spreads).
 */
int kd_krylov_reduce(kd_krylov_t *kr, const char *what, kd_err_t *err);
/* The spread half of kd_krylov_reduce (solver/methods/krylov_combine.c). */
int kd_krylov_combine(kd_krylov_t *kr, const char *what, kd_err_t *err);

/*
 * The passes, each one launch over every column. `ops` adds kd_krylov_op bits to what the pass
 * does (KD_KRYLOV_OP_DIAGONAL is added whenever kr has a diagonal). p is the direction the SpMV
 * multiplied (q = A p).
 *
 * dots: the partial sums of p'q of every running column (one reduction).
 * dots3: with ops & KD_KRYLOV_OP_WITH_RQ, p'q, r'Mq and q'Mq; without, p'q and q'Mq (one
 *   reduction). With A (a csr_scalar matrix's arrays) it computes q = A p itself first, row by
 *   row in the reduction's own loop, and the results are those of the SpMV followed by dots3.
 * update_residual: decide (converged, breakdown, non-finite, at the limit) or take
 *   alpha = r'z / p'q; r -= alpha q (with KD_KRYLOV_OP_ALONG_R also x += alpha r); the partial
 *   sums of the new r'r and r'z (one reduction).
 * update_direction: fold them; beta = new r'z / old r'z; x += alpha d, d = z + beta d (with
 *   KD_KRYLOV_OP_ALONG_R only the bookkeeping, x and d unused and may be NULL).
 * update_merged: decide and take alpha and beta = (r'z - 2 alpha r'Mq + alpha^2 q'Mq) / r'z from
 *   dots3's sums (with KD_KRYLOV_OP_WITH_RQ; else r'Mq = p'q), then r -= alpha q, x += alpha d,
 *   d = z + beta d and the partial sums of the new r'r and r'z in one pass (one reduction).
 */
int kd_krylov_dots(kd_krylov_t *kr, const kd_multivec_t *p, const kd_multivec_t *q,
                   int64_t iteration, kd_err_t *err);
int kd_krylov_dots3(kd_krylov_t *kr, const kd_format_csr_t *A, const kd_multivec_t *p,
                    kd_multivec_t *q, const kd_multivec_t *r, int ops, int64_t iteration,
                    kd_err_t *err);
int kd_krylov_update_residual(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                              kd_multivec_t *x, int ops, int64_t iteration, kd_err_t *err);
int kd_krylov_update_direction(kd_krylov_t *kr, const kd_multivec_t *r, kd_multivec_t *x,
                               kd_multivec_t *d, int ops, int64_t iteration, kd_err_t *err);
int kd_krylov_update_merged(kd_krylov_t *kr, const kd_multivec_t *q, kd_multivec_t *r,
                            kd_multivec_t *x, kd_multivec_t *d, int ops, int64_t iteration,
                            kd_err_t *err);

/*
 * With an operator preconditioner (kr->operator_z set, z = M^-1 r written there after
 * update_residual): the partial sums of r'r and r'z of every column of iteration `iteration`
 * into the set update_residual used, for update_direction to fold (one reduction).
 */
int kd_krylov_operator_sums(kd_krylov_t *kr, const kd_multivec_t *r, int64_t iteration,
                            kd_err_t *err);

/*
 * A method's own pass (its kernels in kernels/<program>.cl, which include krylov_lib.cl): the
 * launch block of iteration `iteration` (state copy (iteration - 1) & 1; `ops` plus the diagonal
 * bit when kr has one), and its launch over every column, kr->groups work-groups each, with
 * that block first (KD_KRYLOV_LAUNCH_ARGS) and the buffers after it.
 */
kd_krylov_launch_t kd_krylov_pass_block(const kd_krylov_t *kr, int64_t iteration, int ops);
/* The launch block's fields as a kernel's first arguments (kernels/methods/krylov_abi.h). */
#define KD_KRYLOV_LAUNCH_ARGS(L)                                                                   \
    KD_ARG_LONG((L).iteration), KD_ARG_INT((L).n), KD_ARG_INT((L).ld), KD_ARG_INT((L).groups),     \
        KD_ARG_INT((L).parity), KD_ARG_INT((L).ops), KD_ARG_INT((L).set), KD_ARG_INT((L).mode),    \
        KD_ARG_INT((L).mask_all)
int kd_krylov_launch(kd_krylov_t *kr, const char *program, const char *name,
                     const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err);
/* The same for a method's own update pass that decides like kd_krylov_update_residual: it
 * writes copy parity(iteration) of the scalars (alpha 0 for a column that did not move) and leaves
 * the new r'r and r'z as partial sums in res_partials' set parity(iteration), a column that did
 * not move carrying its old ones over. Known partials: it may run on a matrix spread over ranks. */
int kd_krylov_launch_update(kd_krylov_t *kr, const char *program, const char *name,
                            int64_t iteration, const kd_ocl_arg_t *args, size_t nargs,
                            kd_err_t *err);
/* The same over `groups` work-groups per column (a pass whose work is not the vectors' length:
 * folding partial sums); L.groups still says how many partials a column has. */
int kd_krylov_launch_groups(kd_krylov_t *kr, const char *program, const char *name, size_t groups,
                            const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err);

/*
 * Recompute r'r (and r'z) from r into the state of iteration `iteration`, for the columns whose
 * mask has KD_KRYLOV_MASK_PARTIALS (mask NULL: mask_all for every column; else k ints, written
 * to the device with a blocking write), setting d = z (d may be NULL: no direction) and restarting
 * as the mask bits say. A running column whose new r'r is not finite stops with
 * KD_KRYLOV_NON_FINITE_RESIDUAL.
 */
int kd_krylov_residual(kd_krylov_t *kr, const kd_multivec_t *r, kd_multivec_t *d, const int *mask,
                       int mask_all, int64_t iteration, kd_err_t *err);

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
    int slot;                      /* its device buffer: 0 or 1 (kd_krylov_read uses 2) */
    kd_krylov_snapshot_row_t *raw; /* k rows */
    cl_event done;                 /* the pending read, or NULL */
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
