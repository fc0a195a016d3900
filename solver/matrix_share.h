/*
 * The pattern arrays that matrices of one pattern and other values share (solver/matrix_values.c,
 * kd_matrix_with_values), private to solver/: who the members are and what the share counts in
 * its first member's device_bytes. matrix_share.c keeps the membership, which a free leaves
 * (kd_matrix_share_leave, matrix.h) without reaching the code that builds a share.
 */
#ifndef KD_SOLVER_MATRIX_SHARE_H
#define KD_SOLVER_MATRIX_SHARE_H

#include "solver/formats/format.h"

struct kd_matrix_share {
    kd_matrix_t **members; /* members[0] carries `bytes` in its device_bytes */
    size_t nmembers, cap;
    size_t bytes;    /* pattern arrays + the order's two permutations + the maps */
    int unshareable; /* the probe disagreed: build from the CSR */
    int narrays;
    cl_mem maps[KD_FORMAT_ARRAYS_MAX]; /* values arrays only; NULL: identity */
    size_t slots[KD_FORMAT_ARRAYS_MAX];
};

/* Add m to s's members (m->share = s). KD_ENOMEM. */
int kd_matrix_share_join(kd_matrix_share_t *s, kd_matrix_t *m, kd_err_t *err);

#endif
