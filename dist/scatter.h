/*
 * Moving a spread matrix's pieces between rank 0 (which holds the whole matrix, as krylovd's
 * serving rank does after matrix.put) and the others: each rank's block as the flat buffer of
 * block_pack.c, and vectors by the partition's rows. Collective over comm.
 */
#ifndef KD_DIST_SCATTER_H
#define KD_DIST_SCATTER_H

#include "dist/block.h"
#include "dist/comm_mpi.h"

/*
 * On `root`: partition A (the whole matrix, canonical) by nonzeros over comm's ranks, scan it
 * (the blocks' summary), split it and send every other rank its packed block; every rank gets
 * its own block in *mine. A is read on root only (others pass NULL). A failure anywhere (not
 * square, memory, a damaged buffer) fails on every rank with its message.
 */
int kd_dist_scatter_blocks(kd_comm_t *comm, int root, const kd_csr_t *A, kd_dist_block_t *mine,
                           kd_err_t *err);

/* root's whole vector (rows values of dtype; read on root only) -> each rank's rows in local
 * (block's rows values), and back (whole written on root only). */
int kd_dist_scatter_rows(kd_comm_t *comm, int root, const kd_dist_block_t *b, const void *whole,
                         void *local, kd_err_t *err);
int kd_dist_gather_rows(kd_comm_t *comm, int root, const kd_dist_block_t *b, const void *local,
                        void *whole, kd_err_t *err);

#endif
