/*
 * What a solve spread over several processes ("ranks", one device each) needs from the
 * processes' communicator: sums over the ranks, the same bits on every rank. The solver never
 * includes MPI; dist/comm_mpi.c fills this table from an MPI communicator, and a solve on one
 * process has no comm at all (NULL), which leaves every code path as it was.
 *
 * Every rank of a spread solve runs the same driver on its own rows in lock step: the same
 * launches, the same reductions in the same order, the same decisions, because every decision
 * is taken from sums that are bit for bit the same everywhere. kd_krylov_reduce is where the
 * partial sums meet (solver/methods/krylov_combine.c); a stop that one rank wants (cancel,
 * deadline) rides on the next of those sums, so every rank stops at the same check.
 */
#ifndef KD_SOLVER_COMM_H
#define KD_SOLVER_COMM_H

#include "common/error.h"

#include <stdint.h>

typedef struct kd_comm kd_comm_t;

struct kd_comm {
    int rank, size;
    /* values[0..count) replaced by their sum over the ranks, added in rank order so that every
     * rank gets the same bits. Collective: every rank calls it, with the same count. */
    int (*sum)(kd_comm_t *comm, double *values, int64_t count, kd_err_t *err);
    void *impl;
    /* The stop this rank wants (KD_ECANCELLED, KD_ETIMEOUT; 0: none), set by the solve driver at a
     * check and carried by the next reduction; stop_agreed is what the ranks agreed on as of the
     * last reduction (KD_ECANCELLED before KD_ETIMEOUT): the same on every rank. */
    int stop_wanted, stop_agreed;
    /* Accounting, for benchmarks: reductions combined, and the host time spent in them: all of
     * it, the part reading the partials, and the part inside sum (the network). */
    int64_t reductions;
    uint64_t reduce_ns, read_ns, sum_ns; /* read: waiting for the device and reading the
                                            partials (the device's work before the reduction
                                            ends inside it) */
};

#endif
