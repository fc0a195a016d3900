/*
 * Incomplete factorisations on A's own pattern, on the host (solver/precond/ilu_factor.c), for the
 * ilu0 and ic0 preconditioners (solver/precond/ilu.c): A ~ L U with L and U holding nonzeros only
 * where A does.
 *
 *   ILU(0): L unit lower, U upper; (L U)_ij = a_ij wherever a_ij is stored.
 *   IC(0):  A symmetric, L lower with a positive diagonal, U = L^T; (L L^T)_ij = a_ij wherever a_ij
 *           is stored in the lower triangle.
 *
 * Both come out as two triangles of the same shape, so that one device solve serves both: each
 * triangle is its strictly-off-diagonal entries in CSR (columns ascending) and its diagonal apart.
 * Values are in double whatever A's dtype: the device copy is rounded once, at upload.
 */
#ifndef KD_SOLVER_ILU_H
#define KD_SOLVER_ILU_H

#include "common/csr.h"
#include "common/error.h"

#include <stdint.h>

typedef struct kd_ilu_tri {
    int64_t n, nnz;   /* nnz: the strictly-off-diagonal entries */
    int32_t *indptr;  /* n + 1 */
    int32_t *indices; /* nnz, ascending in each row, all < row (lower) or all > row (upper) */
    double *values;   /* nnz */
    double *diag;     /* n, every one nonzero and finite */
} kd_ilu_tri_t;

typedef struct kd_ilu_factors {
    kd_ilu_tri_t lower, upper; /* A ~ lower * upper */
} kd_ilu_factors_t;

/*
 * ILU(0) of the square canonical csr (any dtype). KD_EBADREQ naming the row (its number in
 * `rows` when not NULL, rows[i] being what the client calls row i: a reordered matrix's
 * permutation) when a pivot u_ii is zero (a missing diagonal entry, an empty row) or not finite,
 * or when A holds a NaN or an infinity. KD_ENOMEM. f is zeroed first and freed on failure.
 */
int kd_ilu0_factor(const kd_csr_t *csr, const int32_t *rows, kd_ilu_factors_t *f, kd_err_t *err);

/*
 * IC(0) of the square canonical csr, which must be symmetric (pattern and values, to 1e-12 of the
 * entries' scale; KD_EBADREQ naming an entry otherwise): only its lower triangle is read.
 * KD_EBADREQ naming the row when a pivot l_ii^2 is not positive (the matrix is not positive
 * definite, or not enough so for IC(0) to exist) or not finite. KD_ENOMEM.
 */
int kd_ic0_factor(const kd_csr_t *csr, const int32_t *rows, kd_ilu_factors_t *f, kd_err_t *err);

void kd_ilu_factors_free(kd_ilu_factors_t *f); /* accepts a zeroed one */

/*
 * The level schedule of triangle t for an exact solve: row i's level is one more than the
 * highest level among the rows its entries reference (0 for a row that references none), so the
 * rows of one level depend only on lower levels and are solved together. order (n entries,
 * malloc'd): the rows sorted by level, ascending within one; level_ptr (levels + 1, malloc'd):
 * where each level starts in order. lower: t references lower rows (else higher ones).
 * KD_ENOMEM.
 */
int kd_ilu_levels(const kd_ilu_tri_t *t, int lower, int32_t **order, int32_t **level_ptr,
                  int32_t *levels, kd_err_t *err);

/* What an ilu0 or ic0 preconditioner built (for tests and logs). */
typedef struct kd_ilu_stats {
    int64_t lower_nnz, upper_nnz;       /* strictly-off-diagonal entries of each triangle */
    int32_t lower_levels, upper_levels; /* of the exact solve's schedules; 0 with sweeps > 0 */
    int sweeps;                         /* 0: exact (level-scheduled) solves */
    int matched;                        /* ilu0 factored P A, P a row matching */
    int64_t moved;                      /* rows P moved */
} kd_ilu_stats_t;

struct kd_precond;
/* P's stats; KD_EBADREQ when P is not an ilu0 or ic0 preconditioner. */
int kd_ilu_describe(const struct kd_precond *P, kd_ilu_stats_t *out, kd_err_t *err);

#endif
