/*
 * The contract between solver/batch/solve.c and kernels/batch/batch.cl: the per-system scalars a
 * batched solve keeps on the device between launches. The statuses are
 * kernels/methods/krylov_abi.h's (enum kd_krylov_status). Plain C that OpenCL C also compiles.
 */
#ifndef KD_BATCH_ABI_H
#define KD_BATCH_ABI_H

/* A system's scalars: scalars[system * KD_BATCH_SLOTS + slot]. */
enum kd_batch_slot {
    KD_BATCH_RR = 0,      /* r'r of the current residual */
    KD_BATCH_RZ = 1,      /* cg: r'z; bicgstab: rho = r0hat'r */
    KD_BATCH_RHO = 2,     /* bicgstab: the previous iteration's rho */
    KD_BATCH_ALPHA = 3,   /* bicgstab: the previous iteration's alpha */
    KD_BATCH_OMEGA = 4,   /* bicgstab: the previous iteration's omega */
    KD_BATCH_R0 = 5,      /* bicgstab: r0hat'r0hat */
    KD_BATCH_FAIL = 6,    /* the value that stopped the system */
    KD_BATCH_SHADOWS = 7, /* bicgstab: fresh shadow residuals taken (rho breakdowns) */
    KD_BATCH_SLOTS = 8
};

/* Where system s lives in a batch's arrays: systems[s * KD_BATCH_SYS + field] (int64). One
 * pattern shared by k systems (kd_batch_upload) has every PTR and IDX 0 and VAL s nnz; systems of
 * their own patterns (kd_batch_upload_systems) have their CSR arrays back to back, each system's
 * row pointers counting from 0. */
enum kd_batch_sys_field {
    KD_BATCH_SYS_ROW = 0, /* its first row in every vector of rows (b, x, the inverse diagonal) */
    KD_BATCH_SYS_COL = 1, /* its first column in an SpMV's x */
    KD_BATCH_SYS_N = 2,   /* its rows */
    KD_BATCH_SYS_PTR = 3, /* where its rows + 1 row pointers start in indptr */
    KD_BATCH_SYS_IDX = 4, /* where its column indices start in indices */
    KD_BATCH_SYS_VAL = 5, /* where its values start in values */
    KD_BATCH_SYS = 6
};

/* A system's state: state[system * 2] = status, state[system * 2 + 1] = iterations done (or, once
 * stopped, the iteration its status took effect, as kd_krylov_decide's `at`). */

/* Work vectors per system (the global memory each system owns, from its first row times the
 * count, and what the local variant keeps on chip besides x). */
#define KD_BATCH_CG_VECTORS 3               /* r, p, q */
#define KD_BATCH_BICGSTAB_VECTORS 5         /* r (s), r0hat, p, v, t */
#define KD_BATCH_GMRES_VECTORS(m) ((m) + 2) /* V (m + 1 vectors), w */
/* GMRES(m)'s small arrays per system: H (m + 1) x m, cs and sn (m), g (m + 1), y (m). */
#define KD_BATCH_GMRES_AUX(m) (((m) + 1) * (m) + 3 * (m) + 1 + (m))

#endif
