/*
 * Row matchings for factorisations that need a nonzero diagonal (solver/precond/match.c): a row
 * permutation P with every diagonal entry of P A nonzero, so that ILU(0) of P A has its pivots
 * where A's circuit and chemical-process matrices (zero or missing a_ii) have none.
 */
#ifndef KD_SOLVER_MATCH_H
#define KD_SOLVER_MATCH_H

#include "common/csr.h"
#include "common/error.h"

#include <stdint.h>

enum kd_match_flags {
    /* Rows whose own diagonal entry is nonzero keep it (the matching starts from them): P moves
     * only what it must, and P A keeps A's diagonal where A had one. */
    KD_MATCH_KEEP_DIAGONAL = 1u << 0,
    /* The greedy pass takes entries in descending order of |a_ij| / max_k |a_ik| (a 1/2-approximate
     * maximum weight matching of those weights), and the augmentations try a row's larger entries
     * first, so P A's diagonal is large where the structure lets it be. Without: rows take their
     * first free column. */
    KD_MATCH_WEIGHTED = 1u << 1,
};

/*
 * A maximum transversal of the square canonical csr (Duff's MC21: a greedy first pass, then
 * depth-first augmenting paths, iterative; O(n nnz) at worst, near-linear on real matrices).
 * Stored entries equal to 0 count as absent. *perm (n entries, malloc'd): perm[i] is the row of A
 * that becomes row i of P A, and a(perm[i], i) != 0 for every i. flags: enum kd_match_flags.
 *
 * names: what the client calls row i (names[i]; NULL: i), for messages. KD_EBADREQ naming the
 * row when a row has no nonzero entry, or when A is structurally singular (no permutation puts
 * nonzeros on the whole diagonal), saying how many rows could not be matched. KD_ENOMEM.
 */
int kd_match_rows(const kd_csr_t *csr, unsigned flags, const int32_t *names, int32_t **perm,
                  kd_err_t *err);

/* Rows of csr in the order perm gives (row i of *out is row perm[i] of csr), into a new canonical
 * matrix. KD_ENOMEM. */
int kd_match_permute_rows(const kd_csr_t *csr, const int32_t *perm, kd_csr_t **out, kd_err_t *err);

#endif
