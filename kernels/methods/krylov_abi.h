/*
 * The contract between the host side of the Krylov kernels (solver/methods/krylov.c) and the
 * kernels (kernels/methods/krylov.cl and every method's own .cl file): a column's statuses, its
 * scalar slots, the mask bits, the bits that say which vector operations a pass does, the
 * partial-sum layout, the launch block every Krylov kernel takes first, and a snapshot's row. Plain
 * C that OpenCL C also compiles: solver/methods/krylov.h includes it, and the kernels `#include
 * "krylov_abi.h"` (solver/runtime/ocl.c expands that from the embedded copy). Enums and fixed-size
 * structs only; a struct's fields are ordered by size so both compilers lay it out alike.
 */
#ifndef KD_KRYLOV_ABI_H
#define KD_KRYLOV_ABI_H

#ifdef __OPENCL_VERSION__
typedef long kd_abi_i64;
typedef int kd_abi_i32;
#else
#include <stdint.h>
typedef int64_t kd_abi_i64;
typedef int32_t kd_abi_i32;
#endif

/* A column's status on the device, with the iteration it took effect. */
enum kd_krylov_status {
    KD_KRYLOV_RUNNING = 0,
    KD_KRYLOV_CONVERGED = 1,           /* r'r <= threshold after `iteration` iterations */
    KD_KRYLOV_BREAKDOWN = 2,           /* the step's denominator (p'Ap) <= 0 in `iteration` */
    KD_KRYLOV_NON_FINITE_PQ = 3,       /* that denominator not finite in `iteration` */
    KD_KRYLOV_NON_FINITE_ALPHA = 4,    /* the step length not finite in `iteration` */
    KD_KRYLOV_NON_FINITE_RESIDUAL = 5, /* r'r not finite after `iteration` */
    KD_KRYLOV_STOPPED = 6,             /* at its limit after `iteration`, or frozen by the host */
    KD_KRYLOV_ZERO_STEP = 7,           /* the step length underflowed to 0 in `iteration` */
};

/* BiCGSTAB's restarts with a fresh shadow residual (r0hat = r) on a rho breakdown before it
 * reports the breakdown (kernels/methods/bicgstab.cl, kernels/batch/batch_methods.cl). */
#define KD_BICGSTAB_RESTARTS 8

/* GMRES's Hessenberg is singular to working precision where the new diagonal of R is at most
 * this many ulps of H's column: A is singular on the Krylov space (kernels/methods/gmres.cl,
 * kernels/batch/batch_methods.cl). */
#define KD_GMRES_SINGULAR_ULPS 128

/* A column's scalars (scalars[parity][column][slot]). */
enum kd_krylov_slot {
    KD_KRYLOV_SLOT_RR = 0,    /* r'r of the current residual */
    KD_KRYLOV_SLOT_RZ = 1,    /* r'z, z = M^-1 r; r'r without a preconditioner */
    KD_KRYLOV_SLOT_PQ = 2,    /* the step's denominator (p'Ap) of this iteration */
    KD_KRYLOV_SLOT_ALPHA = 3, /* step length (0 when not running, or at a (re)start) */
    KD_KRYLOV_SLOT_BETA = 4,  /* direction update factor */
    KD_KRYLOV_SLOT_FAIL = 5,  /* the value that stopped the column */
    KD_KRYLOV_SLOT_AUX = 6,   /* a method's own (cg1: the previous r'z) */
    KD_KRYLOV_SLOTS = 7
};

/* Bits of a column's mask for the residual kernels. */
enum kd_krylov_mask {
    KD_KRYLOV_MASK_PARTIALS = 1,  /* recompute this column's r'r (and r'z) */
    KD_KRYLOV_MASK_DIRECTION = 2, /* and set the direction from z */
    KD_KRYLOV_MASK_RESTART = 4,   /* and mark the column running from this iteration */
};

/* What a pass does besides its method's core (kd_krylov_launch_t.ops). */
enum kd_krylov_op {
    KD_KRYLOV_OP_DIAGONAL = 1,  /* z = D^-1 r with a diagonal preconditioner's vector */
    KD_KRYLOV_OP_ALONG_R = 2,   /* the direction is r itself: x += alpha r (steepest descent) */
    KD_KRYLOV_OP_WITH_RQ = 4,   /* two passes: read r for r'Mq (else r'Mq = p'q) */
    KD_KRYLOV_OP_FOLD = 8,      /* a snapshot folds the residual partial sums first */
    KD_KRYLOV_OP_OPERATOR = 16, /* z = M^-1 r is a vector an operator wrote (column stride ld) */
};

/* What kd_krylov_residual_final writes. */
enum kd_krylov_final_mode {
    KD_KRYLOV_FINAL_SCALARS = 0, /* the column's scalars and state */
    KD_KRYLOV_FINAL_NORMS = 1,   /* norms[c] = the sum of squares only */
};

/*
 * Partial sums, one per (column, work-group): dot_partials[j][c][g] for the first pass's dots
 * (j < KD_KRYLOV_DOTS), res_partials[s][j][c][g] for the residual's (s: 0 and 1 by iteration
 * parity, KD_KRYLOV_NORMS_SET scratch for norms; j < KD_KRYLOV_RES_SUMS).
 */
enum kd_krylov_partials {
    KD_KRYLOV_DOT_PQ = 0,
    KD_KRYLOV_DOT_RMQ = 1,
    KD_KRYLOV_DOT_QMQ = 2,
    KD_KRYLOV_DOTS = 3,
    KD_KRYLOV_RES_RR = 0,
    KD_KRYLOV_RES_RZ = 1,
    KD_KRYLOV_RES_SUMS = 2,
    KD_KRYLOV_NORMS_SET = 2,
    KD_KRYLOV_RES_SETS = 3,
};

/* The first argument of every Krylov kernel, by value. */
typedef struct kd_krylov_launch {
    kd_abi_i64 iteration; /* 1-based; 0 is the start */
    kd_abi_i32 n;         /* elements per column */
    kd_abi_i32 ld;        /* column stride */
    kd_abi_i32 groups;    /* work-groups per column whose partial sums a fold reads */
    kd_abi_i32 parity;    /* the copy of the state and scalars the kernel reads */
    kd_abi_i32 ops;       /* kd_krylov_op bits */
    kd_abi_i32 set;       /* res_partials set a residual kernel uses */
    kd_abi_i32 mode;      /* kd_krylov_final_mode */
    kd_abi_i32 mask_all;  /* the mask of every column when no mask buffer is given */
} kd_krylov_launch_t;

/* A kernel takes the launch block as its first parameters, one per field in this order
 * (KD_KRYLOV_LAUNCH), and rebuilds it (KD_KRYLOV_LAUNCH_UNPACK); the host passes the fields
 * with KD_KRYLOV_LAUNCH_ARGS (solver/methods/krylov.h). Scalar parameters, not the struct by value:
 * with the struct NVIDIA's compiler made other code, float32 3-4% slower (float64 up to 8%
 * faster; bench/NOTES.md, "Launch block"). */
#ifdef __OPENCL_VERSION__
#define KD_KRYLOV_LAUNCH                                                                           \
    const long L_iteration, const int L_n, const int L_ld, const int L_groups, const int L_parity, \
        const int L_ops, const int L_set, const int L_mode, const int L_mask_all
#define KD_KRYLOV_LAUNCH_UNPACK                                                                    \
    const kd_krylov_launch_t L = {L_iteration, L_n,   L_ld,   L_groups,  L_parity,                 \
                                  L_ops,       L_set, L_mode, L_mask_all}
#endif

/* A column's state for the host: status, its iteration, then each slot's bits (a float in the
 * low half for float32). */
typedef struct kd_krylov_snapshot_row {
    kd_abi_i64 status;
    kd_abi_i64 iteration;
    kd_abi_i64 bits[KD_KRYLOV_SLOTS];
} kd_krylov_snapshot_row_t;

#endif
