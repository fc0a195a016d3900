/*
 * Dense vectors in device memory. Host data crosses in any float type and is converted to the
 * vector's type on the way (the wire's dtype need not be the matrix's).
 */
#ifndef KD_SOLVER_VECTOR_H
#define KD_SOLVER_VECTOR_H

#include "solver/runtime/ocl.h"

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

/*
 * k vectors of n values in one buffer, column j starting at element j * ld: what the solver's
 * lock-step kernels sweep in one launch. ld is n rounded up so that every column starts on the
 * device's base-address alignment (and on 256 bytes), so each column is also a kd_vec_t of its
 * own (cols[j], a sub-buffer; the buffer itself when k == 1) that SpMV and the BLAS-1 functions
 * take. The padding between columns is never read.
 */
typedef struct kd_multivec {
    cl_mem mem; /* NULL when n == 0 or k == 0 */
    int64_t n, ld, k;
    kd_dtype_t dtype;
    kd_vec_t *cols; /* k views, malloc'd; each holds its own reference */
} kd_multivec_t;

int kd_multivec_alloc(kd_ocl_t *ocl, int64_t n, int64_t k, kd_dtype_t dtype, kd_multivec_t *mv,
                      kd_err_t *err);
void kd_multivec_release(kd_multivec_t *mv); /* accepts a zeroed or released one */

/* Blocking copies of all k columns from/to a column-major host array of n * k values of the
 * multivector's dtype (src may be unaligned). */
int kd_multivec_write(kd_ocl_t *ocl, kd_multivec_t *mv, const void *src, kd_err_t *err);
int kd_multivec_read(kd_ocl_t *ocl, const kd_multivec_t *mv, void *dst, kd_err_t *err);
/* Columns j0 .. j0 + cols - 1 from/to cols packed host columns, only enqueued
 * (kd_ocl_write_async's rules for src and dst): one request's columns in a batch's multivector. */
int kd_multivec_write_cols_async(kd_ocl_t *ocl, kd_multivec_t *mv, int64_t j0, int64_t cols,
                                 const void *src, kd_err_t *err);
int kd_multivec_read_cols_async(kd_ocl_t *ocl, const kd_multivec_t *mv, int64_t j0, int64_t cols,
                                void *dst, kd_err_t *err);

/* Enqueue every column (and the padding between them) = 0. */
int kd_multivec_zero(kd_ocl_t *ocl, kd_multivec_t *mv, kd_err_t *err);

/* Enqueue dst column j = src column j for every j with copy[j] != 0 (copy NULL: every column). */
int kd_multivec_copy(kd_ocl_t *ocl, const kd_multivec_t *src, kd_multivec_t *dst,
                     const unsigned char *copy, kd_err_t *err);

/* Enqueue dst column j = d .* src column j for every j: d holds n values of the multivectors'
 * dtype (a diagonal scaling, such as a Jacobi preconditioner's 1/a_ii). */
int kd_multivec_scale_rows(kd_ocl_t *ocl, cl_mem d, const kd_multivec_t *src, kd_multivec_t *dst,
                           kd_err_t *err);

#endif
