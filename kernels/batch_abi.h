/*
 * The contract between solver/batch_solve.c and kernels/batch.cl: the per-system scalars a
 * batched solve keeps on the device between launches. The statuses are kernels/krylov_abi.h's
 * (enum kd_krylov_status). Plain C that OpenCL C also compiles.
 */
#ifndef KD_BATCH_ABI_H
#define KD_BATCH_ABI_H

/* A system's scalars: scalars[system * KD_BATCH_SLOTS + slot]. */
enum kd_batch_slot {
    KD_BATCH_RR = 0,    /* r'r of the current residual */
    KD_BATCH_RZ = 1,    /* cg: r'z; bicgstab: rho = r0hat'r */
    KD_BATCH_RHO = 2,   /* bicgstab: the previous iteration's rho */
    KD_BATCH_ALPHA = 3, /* bicgstab: the previous iteration's alpha */
    KD_BATCH_OMEGA = 4, /* bicgstab: the previous iteration's omega */
    KD_BATCH_R0 = 5,    /* bicgstab: r0hat'r0hat */
    KD_BATCH_FAIL = 6,  /* the value that stopped the system */
    KD_BATCH_SLOTS = 8
};

/* A system's state: state[system * 2] = status, state[system * 2 + 1] = iterations done (or, once
 * stopped, the iteration its status took effect, as kd_krylov_decide's `at`). */

/* Work vectors per system (the global memory each system owns, and what the local variant keeps
 * on chip besides x). */
#define KD_BATCH_CG_VECTORS 3               /* r, p, q */
#define KD_BATCH_BICGSTAB_VECTORS 5         /* r (s), r0hat, p, v, t */
#define KD_BATCH_GMRES_VECTORS(m) ((m) + 2) /* V (m + 1 vectors), w */
/* GMRES(m)'s small arrays per system: H (m + 1) x m, cs and sn (m), g (m + 1), y (m). */
#define KD_BATCH_GMRES_AUX(m) (((m) + 1) * (m) + 3 * (m) + 1 + (m))

#endif
