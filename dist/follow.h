/*
 * krylovd under mpirun (docs/ARCHITECTURE.md, "The command channel"): rank 0 serves the protocol
 * and every other rank follows its commands. A command is a fixed header broadcast from rank 0
 * (kd_dist_cmd_t), then the op's collective steps, the same code on every rank (rank 0 passes its
 * inputs and gets the results; the others find the matrix in their own table). Every op starts
 * with each rank checking what it needs and an agreement (kd_dist_agree), so a matrix missing on
 * one rank or a bad input fails on all and no rank waits in a collective the others skipped, and
 * ends with one, so rank 0 learns any rank's failure before it answers.
 *
 * Rank 0 calls the kd_dist_* commands below from one thread at a time (krylovd: its device
 * worker; the main thread only before the worker starts and after it stopped):
 * MPI_THREAD_SERIALIZED is enough.
 */
#ifndef KD_DIST_FOLLOW_H
#define KD_DIST_FOLLOW_H

#include "dist/dist_matrix.h"

#include <mpi.h>

/* One rank's part of the job: its communicator, its device and (ranks > 0) its matrices. */
typedef struct kd_dist_node {
    MPI_Comm mpi; /* a duplicate of MPI_COMM_WORLD, owned */
    kd_comm_t comm;
    kd_ocl_t *ocl;             /* not owned */
    struct kd_dist_held *held; /* followers: id -> matrix */
    int nheld, cap;
} kd_dist_node_t;

/* The spread of one matrix, per rank (rank 0 learns it at put): rows, nonzeros (diagonal and
 * off-diagonal blocks), ghosts received and entries sent per SpMV, device bytes. */
typedef struct kd_dist_rank_info {
    int64_t rows, nnz, ghosts, sends, device_bytes;
} kd_dist_rank_info_t;

/* Collective over MPI_COMM_WORLD: duplicate it, note the device. KD_EINTERNAL. */
int kd_dist_node_init(kd_dist_node_t *node, kd_ocl_t *ocl, kd_err_t *err);
/* Frees the followers' matrices and the communicator (collective: MPI_Comm_free). */
void kd_dist_node_free(kd_dist_node_t *node);

/* Ranks > 0: run commands until rank 0 sends STOP. Returns 0. Waits for a command without
 * spinning (it sleeps up to 1 ms between tests), so an idle follower costs no core. */
int kd_dist_follow(kd_dist_node_t *node);

/* ---- rank 0 ------------------------------------------------------------------------------- */

/*
 * Spread A (canonical, square; its dtype is the matrix's) under id over every rank: blocks by
 * nonzeros, each put on its rank's device in `format` (NULL: the selection, mode). *out gets rank
 * 0's part, info (ranks entries, may be NULL) every rank's. A failure on any rank (device memory)
 * leaves nothing on any.
 */
int kd_dist_put(kd_dist_node_t *node, const uint8_t id[16], const kd_csr_t *A, const char *format,
                kd_select_mode_t mode, kd_dist_matrix_t **out, kd_dist_rank_info_t *info,
                kd_err_t *err);

/* Y = alpha A X + beta Y for k columns of the whole vectors (column-major, A's dtype; y is read
 * only when beta != 0). m: rank 0's part of matrix id. */
int kd_dist_spmv(kd_dist_node_t *node, const uint8_t id[16], kd_dist_matrix_t *m, int64_t k,
                 double alpha, const void *x, double beta, void *y, kd_err_t *err);

/* What a spread solve takes besides the vectors: the names as the request gave them (the other
 * ranks choose the same ops), the tolerances, and a timeout every rank applies to its own
 * clock. params' cancel, progress and yield are rank 0's alone (cancel reaches the others
 * through the solve's reductions: every rank stops at the same check). */
typedef struct kd_dist_solve_args {
    const char *method, *preconditioner;
    double rtol, atol;
    int64_t maxiter, check_every, restart;
    int history;
    int64_t timeout_ms; /* 0: none */
    const atomic_int *cancel;
    kd_solve_progress_fn progress;
    void *progress_ctx;
} kd_dist_solve_args_t;

/* Solve A X = B (nrhs columns of the whole vectors, A's dtype; x0 NULL: 0) spread over every
 * rank; results (nrhs, each freed by the caller) as kd_dist_solve's. */
int kd_dist_solve_cmd(kd_dist_node_t *node, const uint8_t id[16], kd_dist_matrix_t *m, int64_t nrhs,
                      const void *b, const void *x0, void *x, const kd_dist_solve_args_t *args,
                      kd_solve_result_t *results, kd_err_t *err);

/* Forget matrix id on every other rank (one that does not hold it does nothing). */
void kd_dist_drop(kd_dist_node_t *node, const uint8_t id[16]);

/* End every follower's loop. */
void kd_dist_stop(kd_dist_node_t *node);

#endif
