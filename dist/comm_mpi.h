/*
 * solver/comm.h's table over an MPI communicator, and the agreement every collective step of
 * dist/ ends with: a step that failed on one rank fails on all, with that rank's message.
 */
#ifndef KD_DIST_COMM_MPI_H
#define KD_DIST_COMM_MPI_H

#include "solver/comm.h"

#include <mpi.h>

/* Fill comm from mpi (borrowed: it must outlive comm). Sums go through MPI_Allgather and are
 * added on each rank in rank order: MPI_Allreduce does not promise the same bits on every rank,
 * and ranks whose decisions differ by one ulp would part ways. */
void kd_dist_comm_init(kd_comm_t *comm, MPI_Comm *mpi);

/* The communicator behind comm. */
MPI_Comm kd_dist_comm_mpi(const kd_comm_t *comm);

/*
 * Collective: rc is this rank's outcome of a step (err its message). Returns KD_OK when every
 * rank's was KD_OK; else the code of the lowest failing rank, with its message ("rank R: ...")
 * in err on every rank.
 */
int kd_dist_agree(kd_comm_t *comm, int rc, kd_err_t *err);

#endif
