/*
 * One rank's share of a matrix spread over ranks (dist/partition.h's row blocks), as flat arrays
 * that can be sent, persisted and reloaded as they are (dist/block_pack.c):
 *
 *   diag   the rows it owns times the columns of the same numbers (its own x entries), in local
 *          numbering: the part of the SpMV that needs nothing from other ranks
 *   offd   the same rows times its ghost columns: every column another rank owns that a row of
 *          this block touches, compressed to 0..ghosts-1 in ascending global order
 *   halo   the plan of the exchange before offd can multiply: for each neighbour (ascending rank),
 *          the local x entries to send it (send_index[send_start[i] .. send_start[i + 1])) and
 *          where the ghosts it sends land (ghosts recv_start[i] .. recv_start[i + 1] - 1: the
 *          neighbour's columns are contiguous in the ascending ghost list, because blocks are)
 *
 * What rank p sends to rank q is exactly, in order, the ghosts of q that p owns, so the two sides
 * agree on each message's length and layout without a handshake. The summary is the whole
 * matrix's scan (symmetry, non-finite entries, diagonal), taken once where the whole matrix is
 * and carried by every block, so every rank refuses or accepts a solve the same way.
 */
#ifndef KD_DIST_BLOCK_H
#define KD_DIST_BLOCK_H

#include "dist/partition.h"

/* What the whole matrix's scan said (solver/matrix.h's kd_matrix_scan_t, the fields a
 * distributed solve checks; rows and columns global, -1 when none). */
typedef struct kd_dist_summary {
    int64_t non_finite_row, non_finite_col, non_finite_count;
    double non_finite_value;
    int64_t bad_diagonal_row;
    double bad_diagonal_value;
    int64_t negative_diagonal_row;
    double negative_diagonal_value;
    int64_t asymmetric_row, asymmetric_col;
    double asymmetric_value, asymmetric_mirror;
    int32_t asymmetric_mirror_stored, symmetric, looks_spd, reserved;
} kd_dist_summary_t;

/* A summary that says nothing is wrong and nothing is known about symmetry. */
void kd_dist_summary_clear(kd_dist_summary_t *s);

typedef struct kd_dist_block {
    int32_t rank, ranks;
    int64_t rows, cols, nnz; /* the whole matrix */
    kd_dtype_t dtype;
    int64_t *row_start; /* ranks + 1: the partition (every rank knows every owner) */
    kd_csr_t *diag;     /* local rows x local rows */
    kd_csr_t *offd;     /* local rows x ghosts */
    int64_t ghosts;
    int32_t *ghost_col; /* ghosts: global columns, ascending */
    int32_t neighbours;
    int32_t *neighbour;  /* neighbours: ranks, ascending */
    int32_t *send_start; /* neighbours + 1 */
    int32_t *send_index; /* send_start[neighbours]: local rows */
    int32_t *recv_start; /* neighbours + 1, into the ghosts */
    kd_dist_summary_t summary;
} kd_dist_block_t;

/* The local rows of block b. */
static inline int64_t kd_dist_block_rows(const kd_dist_block_t *b)
{
    return b->row_start[b->rank + 1] - b->row_start[b->rank];
}

/*
 * Split A by partition p into p->ranks blocks (blocks: that many, zeroed; each is filled, and
 * freed again on failure). summary: the whole matrix's scan, copied into each (NULL: cleared).
 * O(nnz + rows + ghosts log ghosts). KD_EBADREQ for a matrix that is not square or a partition of
 * another row count, KD_ENOMEM.
 */
int kd_dist_split(const kd_csr_t *A, const kd_dist_partition_t *p, const kd_dist_summary_t *summary,
                  kd_dist_block_t *blocks, kd_err_t *err);

void kd_dist_block_free(kd_dist_block_t *b); /* the arrays; accepts a zeroed one */

/*
 * A block as one flat buffer (little-endian as the host is; a magic, a version and the sizes
 * first) and back. pack: *out malloc'd, *bytes its length. unpack checks every size, index and
 * offset against the header and the buffer's length (a damaged or truncated buffer is
 * KD_EBADREQ, never a read out of bounds).
 */
int kd_dist_block_pack(const kd_dist_block_t *b, void **out, size_t *bytes, kd_err_t *err);
int kd_dist_block_unpack(const void *buf, size_t bytes, kd_dist_block_t *b, kd_err_t *err);

#endif
