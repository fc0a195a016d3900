/*
 * The format-independent part of a device matrix (solver/matrix_scan.c): what kd_matrix_upload
 * learns from the host CSR once, whatever the storage format, for the solver's use. Private to
 * solver/.
 */
#ifndef KD_SOLVER_MATRIX_SCAN_H
#define KD_SOLVER_MATRIX_SCAN_H

#include "solver/matrix.h"

/* Scan csr's values (the first NaN/Inf entry and how many there are, the first
 * zero/missing/non-finite and the first negative diagonal entry, for a square matrix whether it
 * is symmetric (the pattern exactly, the values to rounding) and the first entry that is not) into *scan and, for a square matrix with
 * rows > 0, 1 / a_ii into a new host array *inv_diagonal (malloc'd; NULL otherwise). One pass
 * over the values and one binary search per off-diagonal entry; no OpenCL. */
int kd_matrix_scan(const kd_csr_t *csr, kd_matrix_scan_t *scan, void **inv_diagonal, kd_err_t *err);

#endif
