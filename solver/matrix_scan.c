/*
 * The format-independent scan of a matrix at upload (see matrix_scan.h). One pass over the host
 * CSR: the first non-finite value in row order, and for square matrices the diagonal. The inverse
 * diagonal is what Jacobi-preconditioned CG multiplies the residual by every iteration; keeping
 * it here (n values of host memory per square matrix, copied to the device by each PCG solve)
 * makes PCG work with every format without a per-format "extract the diagonal" operation, and
 * leaves the matrix's device footprint (device_bytes, the store's budget) the format's alone.
 */
#include "solver/matrix_scan.h"
#include "common/checked.h"

#include <math.h>
#include <stdlib.h>

/* One pass over the rows, written once and specialised per dtype (t is a constant at each call
 * below), so the inner loop is a plain load-compare loop: it reads 12 bytes per nonzero for fp64
 * and runs at memory speed, not through a per-element dtype switch. */
static inline __attribute__((always_inline)) void
kd_scan_rows(const kd_csr_t *csr, kd_matrix_scan_t *s, void *inv, kd_dtype_t t)
{
    int64_t nf_row = -1, nf_col = -1, bad_row = -1, neg_row = -1;
    double nf_value = 0.0, bad_value = 0.0, neg_value = 0.0;
    const int32_t *indptr = csr->indptr, *indices = csr->indices;
    for (int64_t r = 0; r < csr->rows; r++) {
        double diag = 0.0;
        const int32_t lo = indptr[r], hi = indptr[r + 1];
        if (nf_row < 0) {
            for (int32_t k = lo; k < hi; k++) {
                double v = kd_load_real(csr->values, t, (size_t)k);
                if (!isfinite(v)) {
                    nf_row = r;
                    nf_col = indices[k];
                    nf_value = v;
                    break;
                }
            }
        }
        if (inv == NULL)
            continue;
        for (int32_t k = lo; k < hi; k++)
            if (indices[k] == r)
                diag = kd_load_real(csr->values, t, (size_t)k);
        /* Usable when its inverse is finite in the matrix's own type (a float32 subnormal is
         * not). */
        int usable = isfinite(diag) && diag != 0.0;
        if (usable) {
            kd_store_real(inv, t, (size_t)r, 1.0 / diag);
            usable = isfinite(kd_load_real(inv, t, (size_t)r));
        }
        if (!usable && bad_row < 0) {
            bad_row = r;
            bad_value = diag;
        }
        if (diag < 0.0 && neg_row < 0) {
            neg_row = r;
            neg_value = diag;
        }
        if (!usable)
            kd_store_real(inv, t, (size_t)r, 0.0);
    }
    s->non_finite_row = nf_row;
    s->non_finite_col = nf_col;
    s->non_finite_value = nf_value;
    s->bad_diagonal_row = bad_row;
    s->bad_diagonal_value = bad_value;
    s->negative_diagonal_row = neg_row;
    s->negative_diagonal_value = neg_value;
}

int kd_matrix_scan(const kd_csr_t *csr, kd_matrix_scan_t *scan, void **inv_diagonal, kd_err_t *err)
{
    *inv_diagonal = NULL;
    const int square = csr->rows == csr->cols && csr->rows > 0;
    void *inv = NULL;
    size_t bytes = 0;
    if (square) {
        if (kd_mul_overflow((size_t)csr->rows, kd_dtype_size(csr->dtype), &bytes) ||
            (inv = malloc(bytes)) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for the matrix diagonal");
    }
    if (csr->dtype == KD_DTYPE_F32)
        kd_scan_rows(csr, scan, inv, KD_DTYPE_F32);
    else
        kd_scan_rows(csr, scan, inv, KD_DTYPE_F64);
    *inv_diagonal = inv;
    return KD_OK;
}
