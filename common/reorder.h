/*
 * Symmetric reorderings of a host CSR matrix: a permutation P chosen on the host so that P A P^T
 * has a smaller bandwidth (reverse Cuthill-McKee), and the permuted matrix itself. Pure host code
 * with no OpenCL: the solver keeps the permutation beside the device matrix (solver/matrix.h),
 * the selection computes it beside the transfer (solver/formats/select.c), and a reload recomputes
 * it from the stored matrix (it is deterministic), so nothing about it is persisted but its kind.
 *
 * Convention everywhere: perm[new] = old. Row i of P A P^T is row perm[i] of A, x_p[i] =
 * x[perm[i]], and y[perm[i]] = y_p[i].
 */
#ifndef KD_COMMON_REORDER_H
#define KD_COMMON_REORDER_H

#include "common/csr.h"

#include <stdint.h>

/* The orderings, in their wire spelling. NONE is 0: a state file from before reordering reads
 * as none. AUTO is a request, never a result. */
typedef enum kd_reorder {
    KD_REORDER_NONE = 0,
    KD_REORDER_RCM,
    KD_REORDER_METIS,
    KD_REORDER_AUTO,
    KD_REORDER_COUNT
} kd_reorder_t;

/* The names by kd_reorder_t, NULL after the last: the one spelling (the protocol decodes with it).
 */
extern const char *const kd_reorder_names[KD_REORDER_COUNT + 1];
/* "none", "rcm", "metis", "auto". */
const char *kd_reorder_name(kd_reorder_t kind);
/* Returns 0 or -1 for an unknown name; NULL or "" is auto. */
int kd_reorder_parse(const char *name, kd_reorder_t *out);
/* 1 if this build computes the ordering (metis needs KD_METIS at build time). */
int kd_reorder_available(kd_reorder_t kind);

/* Bandwidth max |i - j| over the entries (0 for a diagonal or empty matrix) and profile: the sum
 * over rows of i - (first column of row i) where that column is left of the diagonal. */
typedef struct kd_reorder_shape {
    int64_t bandwidth;
    int64_t profile;
} kd_reorder_shape_t;

/* The shape of csr; with iperm (the inverse permutation, iperm[old] = new; may be NULL), the
 * shape of P csr P^T without building it. O(nnz), no allocation. */
void kd_reorder_measure(const kd_csr_t *csr, const int32_t *iperm, kd_reorder_shape_t *out);
/*
 * The locality of x's gathers: over windows of KD_REORDER_WINDOW consecutive stored rows (about
 * what a GPU's work-groups have in flight together), the distinct blocks of KD_REORDER_SECTOR
 * columns of x (a 32-byte sector in float64) a window touches, summed, per nonzero: near 1 when
 * no two entries of a window share a sector (random columns: every gather a sector of its own),
 * small when a window's gathers come from a few cache lines. With perm (perm[new] = old) and
 * its inverse iperm, of P csr P^T without building it; both NULL for csr itself. O(nnz) time,
 * cols / KD_REORDER_SECTOR words of memory; -1 when that cannot be allocated.
 */
#define KD_REORDER_WINDOW 256
#define KD_REORDER_SECTOR 4
double kd_reorder_gathers(const kd_csr_t *csr, const int32_t *perm, const int32_t *iperm);

/*
 * What an ordering by breadth-first search (RCM is one) would do to the gathers, predicted in
 * O(limit * row length) without ordering the whole matrix: a breadth-first search over A's rows
 * from a row of least degree numbers the first `limit` rows it reaches; kd_reorder_gathers'
 * measure over those rows in that order (a column not yet numbered counts as a sector of its own)
 * is returned, and the same rows' measure in their original order goes to *original. Low when
 * neighbours of neighbours are few (meshes, however scrambled: RCM will bring them together);
 * near 1 for expanders (random graphs: no ordering can). -1 when out of memory; 0 for a matrix
 * without entries or not square.
 */
double kd_reorder_gathers_predicted(const kd_csr_t *csr, int64_t limit, double *original);

/* iperm[perm[i]] = i for i < n. */
void kd_reorder_invert(const int32_t *perm, int64_t n, int32_t *iperm);

/*
 * Reverse Cuthill-McKee on the pattern of A + A^T (the diagonal ignored): per connected
 * component, a pseudo-peripheral start node by repeated breadth-first search (George and Liu),
 * then breadth-first order visiting each node's unnumbered neighbours by ascending degree (ties
 * by index, so the result is deterministic), and the whole order reversed. O(nnz) time and
 * memory. Square matrices only (KD_EBADREQ otherwise); *perm (rows int32, malloc'd) is the
 * caller's. KD_ENOMEM.
 */
int kd_reorder_rcm(const kd_csr_t *csr, int32_t **perm, kd_err_t *err);

/* The ordering `kind` (rcm or metis) of square csr into *perm (malloc'd, the caller's).
 * KD_EUNSUPPORTED for metis without KD_METIS, KD_EBADREQ for none, auto or a non-square matrix. */
int kd_reorder_compute(const kd_csr_t *csr, kd_reorder_t kind, int32_t **perm, kd_err_t *err);

/* P csr P^T as a new canonical CSR (columns sorted in each row): two counting passes through the
 * transpose, O(nnz). perm must be a permutation of 0..rows-1 (square csr). KD_ENOMEM. */
int kd_reorder_apply(const kd_csr_t *csr, const int32_t *perm, kd_csr_t **out, kd_err_t *err);

#endif
