/*
 * The contract between solver/precond/amg/tail.c and kernels/precond/amg/amg.cl's kd_amg_tail: the
 * last levels of the V-cycle as a list of steps that one work-group runs in order, made once at
 * setup. The steps point by offset into three buffers: an int32 index pack (row pointers and column
 * indices), a VALUE pack (matrix entries, 1/a_ii, Chebyshev coefficients) and a VALUE scratch
 * (the levels' vectors; the first level's b and x are the kernel's arguments). Plain C that
 * OpenCL C also compiles; int32 fields only, so both compilers lay the structs out alike.
 */
#ifndef KD_AMG_ABI_H
#define KD_AMG_ABI_H

#ifdef __OPENCL_VERSION__
typedef int kd_abi_i32;
#else
#include <stdint.h>
typedef int32_t kd_abi_i32;
#endif

/* A CSR matrix in the packs: row i's entries are index[indices + k], value[values + k] for k in
 * index[indptr + i] .. index[indptr + i + 1] - 1 (row pointers start at 0). */
typedef struct kd_amg_tail_csr {
    kd_abi_i32 rows;
    kd_abi_i32 lanes; /* work-items per row: a power of two at most the work-group size */
    kd_abi_i32 indptr, indices, values;
} kd_amg_tail_csr_t;

enum kd_amg_tail_kind {
    KD_AMG_TAIL_SPMV = 0,      /* q = M x */
    KD_AMG_TAIL_RESIDUAL = 1,  /* q = b - M x */
    KD_AMG_TAIL_ADD = 2,       /* q = q + M x (the prolongation: q is the fine x) */
    KD_AMG_TAIL_CHEBYSHEV = 3, /* r = b - q (b when zero); d = c_d d + c_r r / a_ii (the second
                                  term alone when first); x = x + d (d when zero) */
};

/* Where a step's vector is: >= 0 an offset in the scratch, or one of these. */
enum kd_amg_tail_vector { KD_AMG_TAIL_B = -1, KD_AMG_TAIL_X = -2 };

typedef struct kd_amg_tail_step {
    kd_amg_tail_csr_t M; /* the matrix of a matrix step (lanes 1 on a Chebyshev step) */
    kd_abi_i32 kind, rows;
    kd_abi_i32 x, b, q, d;   /* vectors, as kd_amg_tail_vector says */
    kd_abi_i32 inv_diagonal; /* value-pack offset of 1/a_ii */
    kd_abi_i32 chebyshev;    /* value-pack offset of this step's c_d, c_r */
    kd_abi_i32 zero, first;  /* Chebyshev: x starts at 0; the first step of a sweep */
} kd_amg_tail_step_t;

#endif
