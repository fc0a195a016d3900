/*
 * A matrix's rows cut into contiguous blocks, one per rank, balanced by nonzeros: rank r owns
 * rows [row_start[r], row_start[r + 1]). Each row weighs its nonzeros plus one (the vector work
 * every row costs), so a run of empty rows still spreads and one dense row gets a block of its
 * own. With more ranks than rows, or a row heavier than a rank's share, some ranks own no rows.
 * Deterministic: the same matrix and rank count give the same cut everywhere.
 */
#ifndef KD_DIST_PARTITION_H
#define KD_DIST_PARTITION_H

#include "common/csr.h"

#define KD_DIST_RANKS_MAX 65536 /* keeps weight * ranks inside int64 for any kd_csr_t */

typedef struct kd_dist_partition {
    int ranks;
    int64_t rows;
    int64_t *row_start; /* ranks + 1 entries: 0 = row_start[0] <= ... <= row_start[ranks] = rows */
} kd_dist_partition_t;

/* Cut A's rows into `ranks` blocks (1..KD_DIST_RANKS_MAX; KD_EBADREQ otherwise, KD_ENOMEM). */
int kd_dist_partition_rows(const kd_csr_t *A, int ranks, kd_dist_partition_t *out, kd_err_t *err);
void kd_dist_partition_free(kd_dist_partition_t *p); /* accepts a zeroed one */

/* The rank owning `row` (0 <= row < rows): the last r with row_start[r] <= row (so an empty
 * block never owns anything). */
int kd_dist_partition_owner(const kd_dist_partition_t *p, int64_t row);

#endif
