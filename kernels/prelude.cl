/*
 * The common prelude, prepended by solver/runtime/ocl.c to every program it builds (it is never built on
 * its own). It turns the build options into types and helpers the format and BLAS kernels share:
 *
 *   -DKD_FP64=1|0    VALUE is double (and cl_khr_fp64 is enabled) or float
 *   -DKD_WG_SIZE=N   the work-group size the host launches with (a power of two); kernels that
 *                    use local memory size their scratch arrays with it, and KD_WG_ATTR pins it
 *                    with reqd_work_group_size so the compiler can unroll the reductions
 *
 * OpenCL C 1.2 only: no sub-groups, no fp64 atomics, no generic address space.
 */
#ifndef KD_FP64
#error "KD_FP64 must be defined (the host passes -DKD_FP64=1 or -DKD_FP64=0)"
#endif

#if KD_FP64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#define VALUE double
#else
#define VALUE float
#endif

#ifdef KD_WG_SIZE
#if (KD_WG_SIZE & (KD_WG_SIZE - 1)) != 0
#error "KD_WG_SIZE must be a power of two"
#endif
#define KD_WG_ATTR __attribute__((reqd_work_group_size(KD_WG_SIZE, 1, 1)))
#else
#define KD_WG_ATTR
#endif

/* A zero of the value type, for initialising accumulators without a float/double mismatch. */
#define KD_ZERO ((VALUE)0)
