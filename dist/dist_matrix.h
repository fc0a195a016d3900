/*
 * A matrix spread over the ranks of an MPI job, one device each (docs/ARCHITECTURE.md,
 * "Distributed matrices"): each rank holds its block (dist/block.h) on its own device, the
 * diagonal block in the format its own selection picks (solver/select.h) and the off-diagonal
 * block as CSR on the ghost vector, with the halo plan's buffers. Every function here is
 * collective: all ranks of the communicator call it, in the same order, with the same arguments
 * but their own block and their own rows of every vector; a failure on one rank (device memory,
 * bad input) fails on all with that rank's message (kd_dist_agree) and leaves nothing behind.
 *
 * A rank that owns no rows (more ranks than rows, or a neighbour's dense row took its share)
 * still takes part in every exchange and every sum: it holds a 1 x 1 identity in place of its
 * empty block, and its one vector entry is 0 (its b and x0 entries are 0, and A maps 0 to 0), so
 * it adds 0 to every sum. Its local vectors have kd_dist_matrix_t.device_rows = 1 entry.
 */
#ifndef KD_DIST_DIST_MATRIX_H
#define KD_DIST_DIST_MATRIX_H

#include "dist/block.h"
#include "dist/comm_mpi.h"
#include "solver/matrix.h"
#include "solver/formats/select.h"
#include "solver/solve.h"

/* Where a distributed SpMV's host time went (accumulated over calls; ns). */
typedef struct kd_dist_spmv_time {
    int64_t calls;
    uint64_t total_ns;  /* the whole call, as the host saw it */
    uint64_t gather_ns; /* gather kernel and the send entries' read, until they were on the host */
    uint64_t exchange_ns; /* MPI: posting the messages and waiting for them (the diagonal
                             block multiplies meanwhile on the device) */
    uint64_t ghost_ns;    /* enqueueing the ghosts' write (on the copy queue, beside the diagonal
                             multiply) and the off-diagonal multiply behind it */
} kd_dist_spmv_time_t;

/* The off-diagonal block on the device with its empty rows left out: a slab's block has entries in
 * a plane or two of rows among millions, and a CSR pass over every row would read the row
 * pointers and read and write y for all of them (on lap3d 250^3, about 40 us of every SpMV).
 * Compressed row r is the rank's local row row[r]; ptr, indices (into the ghosts) and values as
 * CSR over the compressed rows. rows = 0: no block. */
typedef struct kd_dist_offd {
    int32_t rows;
    cl_mem row, ptr, indices, values;
    size_t device_bytes;
} kd_dist_offd_t;

typedef struct kd_dist_matrix {
    kd_dist_block_t block;       /* owned */
    kd_comm_t *comm;             /* not owned */
    kd_ocl_t *ocl;               /* not owned */
    int64_t rows;                /* this rank's rows */
    int64_t device_rows;         /* its vectors' length: rows, or 1 (see above) */
    kd_matrix_t *diag;           /* device_rows x device_rows */
    kd_dist_offd_t offd;         /* rows x ghosts */
    kd_select_result_t selected; /* the diagonal block's format choice */
    cl_mem send_index;           /* the send list (int32), NULL without sends */
    /* exchange buffers for k columns (grown on demand) */
    int64_t k_cap;
    cl_mem send_dev;
    /* host sides of the exchange: page-locked (CL_MEM_ALLOC_HOST_PTR, mapped; *_pin) so the
     * reads and writes are plain DMA, or malloc'd when the device refuses (*_pin NULL) */
    void *send_host, *recv_host, *ghost_host;
    cl_mem send_pin, recv_pin, ghost_pin;
    kd_multivec_t ghosts;
    /* the halo's copies run on their own in-order queue so that they overlap the diagonal
     * multiply on the main one (events order the two); ghost_write: the last write of the
     * ghosts, which must end before its host buffer is received into again */
    cl_command_queue copy;
    cl_event ghost_write;
    kd_dist_spmv_time_t time;
} kd_dist_matrix_t;

/*
 * Put this rank's block on its device (ownership of *block passes, also on failure: it is
 * zeroed). format: a format name for the diagonal block, or NULL for the selection's choice
 * (mode as kd_select_upload's). Collective; KD_EDEVMEM, KD_EUNSUPPORTED (float64 without fp64),
 * KD_EBADREQ (a block of another communicator size) from whichever rank failed.
 */
int kd_dist_matrix_create(kd_ocl_t *ocl, kd_comm_t *comm, kd_dist_block_t *block,
                          const char *format, kd_select_mode_t mode, kd_dist_matrix_t **out,
                          kd_err_t *err);
void kd_dist_matrix_free(kd_dist_matrix_t *m); /* not collective; accepts NULL */

/*
 * Y = alpha A X + beta Y on this rank's rows for the columns with which[c] (NULL: all): X and Y
 * hold k columns of device_rows entries. The halo exchange (kd_dist_halo_*), the diagonal block
 * meanwhile, then the off-diagonal block on the ghosts. Collective (same k and which everywhere).
 */
int kd_dist_spmm(kd_dist_matrix_t *m, double alpha, const kd_multivec_t *X, double beta,
                 kd_multivec_t *Y, const unsigned char *which, kd_err_t *err);

/* The halo exchange in its two halves (dist/halo.c): start gathers the send entries of X's k
 * columns on the device and reads them (enqueued; the caller enqueues the diagonal multiply
 * next); finish posts the messages, waits, and writes the ghosts (k columns) to m->ghosts. */
int kd_dist_halo_start(kd_dist_matrix_t *m, const kd_multivec_t *X, cl_event *read, kd_err_t *err);
int kd_dist_halo_finish(kd_dist_matrix_t *m, int64_t k, cl_event read, kd_err_t *err);

/* Release a halo host buffer made by halo.c (page-locked or malloc'd; p may be NULL). */
void kd_dist_host_free(kd_ocl_t *ocl, void *p, cl_mem pin);

/*
 * Solve A X = B spread over the ranks (solver/solve.h's kd_solve on each rank's rows, with the
 * exchange and the sums of kd_solve_spread_t): b, x0 (NULL: zero) and x are nrhs columns of this
 * rank's `rows` entries (column j at j * rows). Results as kd_solve's, the same on every rank.
 * The columns the host answers (b = 0, NaN/Inf in b or x0, a matrix holding NaN/Inf) are
 * answered on every rank alike from the whole vectors' scans. Checks against the whole matrix
 * (the block's summary): symmetry for methods that need it, Jacobi's diagonal, with the whole
 * matrix's row numbers. Methods cg and sd (kd_method_ops_t.spreads), preconditioners none and
 * jacobi. Cancel, deadline and progress as kd_solve's; every rank stops at the same check.
 */
int kd_dist_solve(kd_dist_matrix_t *m, int64_t nrhs, const void *b, const void *x0, void *x,
                  const kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err);

#endif
