/*
 * Shared pieces of the tests that run under mpirun (test_dist_spmv.c, test_dist_solve.c): MPI
 * and the test device per rank, the communicator, a whole matrix spread from rank 0 through
 * kd_dist_scatter_blocks (the path krylovd's serving rank will take), a seed every rank shares,
 * and a failure count that every rank agrees on before exiting (one rank's failed CHECK fails
 * the job).
 */
#ifndef KD_DIST_MPI_TEST_H
#define KD_DIST_MPI_TEST_H

#include "dist/dist_matrix.h"
#include "dist/scatter.h"
#include "kd_dist_test.h"
#include "kd_solver_test.h"

#include <mpi.h>

static MPI_Comm kd_dist_test_mpi;
static kd_comm_t kd_dist_test_comm;
static kd_ocl_t *kd_dist_test_ocl;

/* MPI, the comm, the device; a seed drawn on rank 0 and shared (kd_test_rand_* agree). */
static inline int kd_dist_test_init(int *argc, char ***argv)
{
    MPI_Init(argc, argv);
    kd_dist_test_mpi = MPI_COMM_WORLD;
    kd_dist_comm_init(&kd_dist_test_comm, &kd_dist_test_mpi);
    kd_test_seed();
    uint64_t seed = kd_test_rng_state;
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
    kd_test_rng_state = seed;
    kd_dist_test_ocl = kd_test_open_device();
    int ok = kd_dist_test_ocl != NULL, all = 0;
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (kd_dist_test_comm.rank == 0)
        fprintf(stderr, "ranks: %d\n", kd_dist_test_comm.size);
    return all ? 0 : -1;
}

/* The job's result: failed if any rank's checks failed. */
static inline int kd_dist_test_finish(void)
{
    int mine = kd_test_failures, all = 0;
    MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    kd_ocl_close(kd_dist_test_ocl);
    MPI_Finalize();
    if (all != 0) {
        fprintf(stderr, "%d checks failed over the ranks\n", all);
        return 1;
    }
    return kd_test_finish();
}

/* A (every rank has the same whole matrix; rank 0's copy is what is sent) spread over the job,
 * converted to dtype first; NULL after printing why. format NULL: the selection (heuristic). */
static inline kd_dist_matrix_t *kd_dist_test_spread(const kd_csr_t *A, kd_dtype_t dtype,
                                                    const char *format)
{
    kd_err_t err = {0};
    kd_csr_t *conv = NULL;
    kd_dist_block_t block;
    kd_dist_matrix_t *m = NULL;
    if (kd_csr_convert(A, dtype, &conv, &err) != KD_OK ||
        kd_dist_scatter_blocks(&kd_dist_test_comm, 0, kd_dist_test_comm.rank == 0 ? conv : NULL,
                               &block, &err) != KD_OK ||
        kd_dist_matrix_create(kd_dist_test_ocl, &kd_dist_test_comm, &block, format,
                              KD_SELECT_HEURISTIC, &m, &err) != KD_OK) {
        fprintf(stderr, "rank %d: spreading a %lld-row matrix: %s\n", kd_dist_test_comm.rank,
                (long long)A->rows, err.message);
        m = NULL;
    }
    kd_csr_free(conv);
    return m;
}

/* This rank's rows of the whole column-major array (n rows, k columns, dtype) into local
 * (device_rows rows a column: a rank without rows gets a 0). */
static inline void kd_dist_test_slice(const kd_dist_matrix_t *m, const double *whole, int64_t k,
                                      kd_dtype_t dtype, void *local)
{
    const int64_t lo = m->block.row_start[m->block.rank], n = m->block.rows;
    for (int64_t c = 0; c < k; c++)
        for (int64_t i = 0; i < m->device_rows; i++)
            kd_store_real(local, dtype, (size_t)(c * m->device_rows + i),
                          i < m->rows ? whole[c * n + lo + i] : 0.0);
}

#endif
