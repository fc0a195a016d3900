/*
 * The format-independent part of a device matrix (solver/matrix_scan.c): what kd_matrix_upload
 * learns from the host CSR once, whatever the storage format, for the solver's use. Private to
 * solver/.
 */
#ifndef KD_SOLVER_MATRIX_SCAN_H
#define KD_SOLVER_MATRIX_SCAN_H

#include "solver/matrix.h"

/* Scan csr's values (the first NaN/Inf entry, the first zero/missing/non-finite and the first
 * negative diagonal entry) into m->scan and, for a square matrix with rows > 0, keep 1 / a_ii in
 * m->inv_diagonal (host memory, malloc'd; kd_matrix_free frees it). */
int kd_matrix_scan(const kd_csr_t *csr, kd_matrix_t *m, kd_err_t *err);

#endif
