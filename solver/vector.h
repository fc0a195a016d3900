/*
 * Dense vectors in device memory. Host data crosses in any float type and is converted to the
 * vector's type on the way (the wire's dtype need not be the matrix's).
 */
#ifndef KD_SOLVER_VECTOR_H
#define KD_SOLVER_VECTOR_H

#include "solver/ocl.h"

typedef struct kd_vec {
    cl_mem mem; /* NULL for n == 0 */
    int64_t n;
    kd_dtype_t dtype; /* KD_DTYPE_F64 or KD_DTYPE_F32 */
} kd_vec_t;

int kd_vec_alloc(kd_ocl_t *ocl, int64_t n, kd_dtype_t dtype, kd_vec_t *v, kd_err_t *err);
void kd_vec_release(kd_vec_t *v); /* accepts a zeroed or released vector */

/* Blocking copies of all n elements; src/dst may be unaligned and of either float type. */
int kd_vec_write(kd_ocl_t *ocl, kd_vec_t *v, const void *src, kd_dtype_t src_dtype, kd_err_t *err);
int kd_vec_read(kd_ocl_t *ocl, const kd_vec_t *v, void *dst, kd_dtype_t dst_dtype, kd_err_t *err);

/* v[i] = value for all i (enqueued). */
int kd_vec_fill(kd_ocl_t *ocl, kd_vec_t *v, double value, kd_err_t *err);

#endif
