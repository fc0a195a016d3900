/*
 * The sums of a spread solve and the agreement on failures, over MPI (comm_mpi.h). A sum is an
 * Allgather of every rank's values and an addition in rank order on each rank: a few doubles a
 * reduction, where the latency is the cost, and the result is bit for bit the same everywhere.
 */
#include "dist/comm_mpi.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int kd_dist_mpi_fail(kd_err_t *err, int status, const char *what)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(status, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof(text), "error %d", status);
    return kd_err_set(err, KD_EINTERNAL, "%s: %s", what, text);
}

MPI_Comm kd_dist_comm_mpi(const kd_comm_t *comm)
{
    return *(MPI_Comm *)comm->impl;
}

static int kd_dist_comm_sum(kd_comm_t *comm, double *values, int64_t count, kd_err_t *err)
{
    assert(comm != NULL && values != NULL && count >= 0);
    if (comm->size == 1 || count == 0)
        return KD_OK;
    if (count > INT32_MAX / comm->size)
        return kd_err_set(err, KD_ETOOLARGE, "a sum of %lld values over %d ranks", (long long)count,
                          comm->size);
    double *all = malloc((size_t)count * (size_t)comm->size * sizeof(double));
    if (all == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a sum over %d ranks", comm->size);
    int st = MPI_Allgather(values, (int)count, MPI_DOUBLE, all, (int)count, MPI_DOUBLE,
                           kd_dist_comm_mpi(comm));
    if (st == MPI_SUCCESS)
        for (int64_t i = 0; i < count; i++) {
            double s = 0.0;
            for (int r = 0; r < comm->size; r++)
                s += all[(size_t)r * (size_t)count + (size_t)i];
            values[i] = s;
        }
    free(all);
    return st == MPI_SUCCESS ? KD_OK : kd_dist_mpi_fail(err, st, "MPI_Allgather (sums)");
}

void kd_dist_comm_init(kd_comm_t *comm, MPI_Comm *mpi)
{
    assert(comm != NULL && mpi != NULL);
    memset(comm, 0, sizeof(*comm));
    MPI_Comm_rank(*mpi, &comm->rank);
    MPI_Comm_size(*mpi, &comm->size);
    comm->sum = kd_dist_comm_sum;
    comm->impl = mpi;
}

int kd_dist_agree(kd_comm_t *comm, int rc, kd_err_t *err)
{
    assert(comm != NULL);
    int mine = rc != KD_OK ? comm->rank : comm->size, first = comm->size;
    int st = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, kd_dist_comm_mpi(comm));
    if (st != MPI_SUCCESS)
        return kd_dist_mpi_fail(err, st, "MPI_Allreduce (agreement)");
    if (first == comm->size)
        return KD_OK;
    kd_err_t shared;
    memset(&shared, 0, sizeof(shared));
    if (comm->rank == first) {
        shared.code = rc;
        snprintf(shared.message, sizeof(shared.message), "rank %d: %.480s", first,
                 err != NULL ? err->message : "failed");
    }
    st = MPI_Bcast(&shared, (int)sizeof(shared), MPI_BYTE, first, kd_dist_comm_mpi(comm));
    if (st != MPI_SUCCESS)
        return kd_dist_mpi_fail(err, st, "MPI_Bcast (agreement)");
    if (err != NULL)
        *err = shared;
    return shared.code;
}
