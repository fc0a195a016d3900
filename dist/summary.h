/* The whole matrix's scan for its blocks (block.h), from and to the solver's (solver/matrix.h). */
#ifndef KD_DIST_SUMMARY_H
#define KD_DIST_SUMMARY_H

#include "dist/block.h"
#include "solver/matrix.h"

/* Scan the whole matrix A (kd_matrix_scan) into out: what kd_dist_split copies into each block.
 * KD_ENOMEM. */
int kd_dist_summarize(const kd_csr_t *A, kd_dist_summary_t *out, kd_err_t *err);
/* The summary as a kd_matrix_scan_t (the fields it keeps; the rest 0). */
void kd_dist_summary_scan(const kd_dist_summary_t *s, kd_matrix_scan_t *scan);

#endif
