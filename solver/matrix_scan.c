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

int kd_matrix_scan(const kd_csr_t *csr, kd_matrix_t *m, kd_err_t *err)
{
    kd_matrix_scan_t *s = &m->scan;
    s->non_finite_row = s->non_finite_col = -1;
    s->bad_diagonal_row = s->negative_diagonal_row = -1;
    s->non_finite_value = s->bad_diagonal_value = s->negative_diagonal_value = 0.0;
    const int square = csr->rows == csr->cols && csr->rows > 0;
    void *inv = NULL;
    size_t bytes = 0;
    if (square) {
        if (kd_mul_overflow((size_t)csr->rows, kd_dtype_size(csr->dtype), &bytes) ||
            (inv = malloc(bytes)) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for the matrix diagonal");
    }
    for (int64_t r = 0; r < csr->rows; r++) {
        double diag = 0.0;
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            double v = kd_load_real(csr->values, csr->dtype, (size_t)k);
            if (!isfinite(v) && s->non_finite_row < 0) {
                s->non_finite_row = r;
                s->non_finite_col = csr->indices[k];
                s->non_finite_value = v;
            }
            if (csr->indices[k] == r)
                diag = v;
        }
        if (!square)
            continue;
        /* Usable when its inverse is finite in the matrix's own type (a float32 subnormal is
         * not). */
        int usable = isfinite(diag) && diag != 0.0;
        if (usable) {
            kd_store_real(inv, csr->dtype, (size_t)r, 1.0 / diag);
            usable = isfinite(kd_load_real(inv, csr->dtype, (size_t)r));
        }
        if (!usable && s->bad_diagonal_row < 0) {
            s->bad_diagonal_row = r;
            s->bad_diagonal_value = diag;
        }
        if (diag < 0.0 && s->negative_diagonal_row < 0) {
            s->negative_diagonal_row = r;
            s->negative_diagonal_value = diag;
        }
        if (!usable)
            kd_store_real(inv, csr->dtype, (size_t)r, 0.0);
    }
    m->inv_diagonal = inv;
    return KD_OK;
}
