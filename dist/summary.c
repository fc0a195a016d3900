/*
 * The whole matrix's scan as every block carries it (block.h's kd_dist_summary_t), and back as
 * the solver's kd_matrix_scan_t, so a spread solve checks and words its refusals exactly as a
 * solve on the whole matrix would (solver/methods/method.c, solver/precond/jacobi.c read the scan).
 */
#include "dist/summary.h"
#include "solver/matrix_scan.h"

#include <stdlib.h>
#include <string.h>

int kd_dist_summarize(const kd_csr_t *A, kd_dist_summary_t *out, kd_err_t *err)
{
    kd_matrix_scan_t scan;
    void *inv_diagonal = NULL;
    int rc = kd_matrix_scan(A, &scan, &inv_diagonal, err);
    free(inv_diagonal);
    if (rc != KD_OK)
        return rc;
    kd_dist_summary_clear(out);
    out->non_finite_row = scan.non_finite_row;
    out->non_finite_col = scan.non_finite_col;
    out->non_finite_count = scan.non_finite_count;
    out->non_finite_value = scan.non_finite_value;
    out->bad_diagonal_row = scan.bad_diagonal_row;
    out->bad_diagonal_value = scan.bad_diagonal_value;
    out->negative_diagonal_row = scan.negative_diagonal_row;
    out->negative_diagonal_value = scan.negative_diagonal_value;
    out->asymmetric_row = scan.asymmetric_row;
    out->asymmetric_col = scan.asymmetric_col;
    out->asymmetric_value = scan.asymmetric_value;
    out->asymmetric_mirror = scan.asymmetric_mirror;
    out->asymmetric_mirror_stored = scan.asymmetric_mirror_stored;
    out->symmetric = scan.symmetric;
    out->looks_spd = scan.looks_spd;
    return KD_OK;
}

void kd_dist_summary_scan(const kd_dist_summary_t *s, kd_matrix_scan_t *scan)
{
    memset(scan, 0, sizeof(*scan));
    scan->non_finite_row = s->non_finite_row;
    scan->non_finite_col = s->non_finite_col;
    scan->non_finite_count = s->non_finite_count;
    scan->non_finite_value = s->non_finite_value;
    scan->bad_diagonal_row = s->bad_diagonal_row;
    scan->bad_diagonal_value = s->bad_diagonal_value;
    scan->negative_diagonal_row = s->negative_diagonal_row;
    scan->negative_diagonal_value = s->negative_diagonal_value;
    scan->asymmetric_row = s->asymmetric_row;
    scan->asymmetric_col = s->asymmetric_col;
    scan->asymmetric_value = s->asymmetric_value;
    scan->asymmetric_mirror = s->asymmetric_mirror;
    scan->asymmetric_mirror_stored = s->asymmetric_mirror_stored;
    scan->symmetric = s->symmetric;
    scan->looks_spd = s->looks_spd;
}
