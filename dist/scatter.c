/*
 * Blocks and vectors between the root rank and the others (scatter.h). A block travels as its
 * packed bytes, length first; the receiver unpacks with every check of block_pack.c, so a rank
 * never trusts what it was sent. Vectors go by MPI_Scatterv/Gatherv over the partition's rows.
 */
#include "dist/scatter.h"
#include "dist/summary.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define KD_DIST_BLOCK_TAG 0x4b42

/* On root: every block of A (ranks of them, freed by the caller). */
static int kd_dist_make_blocks(const kd_csr_t *A, int ranks, kd_dist_block_t **out, kd_err_t *err)
{
    kd_dist_summary_t summary;
    kd_dist_partition_t part = {0, 0, NULL};
    kd_dist_block_t *blocks = calloc((size_t)ranks, sizeof(*blocks));
    int rc = blocks == NULL ? kd_err_set(err, KD_ENOMEM, "out of host memory for %d blocks", ranks)
                            : KD_OK;
    if (rc == KD_OK && A->rows != A->cols)
        rc = kd_err_set(err, KD_EBADREQ, "a %lld x %lld matrix: only square matrices spread",
                        (long long)A->rows, (long long)A->cols);
    if (rc == KD_OK)
        rc = kd_dist_summarize(A, &summary, err);
    if (rc == KD_OK)
        rc = kd_dist_partition_rows(A, ranks, &part, err);
    if (rc == KD_OK)
        rc = kd_dist_split(A, &part, &summary, blocks, err);
    kd_dist_partition_free(&part);
    if (rc != KD_OK) {
        free(blocks);
        blocks = NULL;
    }
    *out = blocks;
    return rc;
}

int kd_dist_scatter_blocks(kd_comm_t *comm, int root, const kd_csr_t *A, kd_dist_block_t *mine,
                           kd_err_t *err)
{
    assert(comm != NULL && mine != NULL && (comm->rank != root || A != NULL));
    memset(mine, 0, sizeof(*mine));
    const MPI_Comm mpi = kd_dist_comm_mpi(comm);
    kd_dist_block_t *blocks = NULL;
    int rc = comm->rank == root ? kd_dist_make_blocks(A, comm->size, &blocks, err) : KD_OK;
    if ((rc = kd_dist_agree(comm, rc, err)) != KD_OK)
        return rc;
    if (comm->rank == root) {
        for (int r = 0; r < comm->size; r++) {
            void *buf = NULL;
            size_t bytes = 0;
            if (r == root) {
                *mine = blocks[r];
                memset(&blocks[r], 0, sizeof(blocks[r]));
                continue;
            }
            /* A failed pack still sends its length (0): the receiver must not wait forever. */
            int prc = kd_dist_block_pack(&blocks[r], &buf, &bytes, err);
            if (prc != KD_OK)
                rc = prc;
            unsigned long long len = prc == KD_OK ? bytes : 0;
            MPI_Send(&len, 1, MPI_UNSIGNED_LONG_LONG, r, KD_DIST_BLOCK_TAG, mpi);
            if (len > 0)
                MPI_Send(buf, (int)len, MPI_BYTE, r, KD_DIST_BLOCK_TAG, mpi);
            free(buf);
            kd_dist_block_free(&blocks[r]);
        }
        free(blocks);
    } else {
        unsigned long long len = 0;
        MPI_Recv(&len, 1, MPI_UNSIGNED_LONG_LONG, root, KD_DIST_BLOCK_TAG, mpi, MPI_STATUS_IGNORE);
        void *buf = len > 0 && len <= INT32_MAX ? malloc((size_t)len) : NULL;
        if (len > 0)
            MPI_Recv(buf != NULL ? buf : NULL, buf != NULL ? (int)len : 0, MPI_BYTE, root,
                     KD_DIST_BLOCK_TAG, mpi, MPI_STATUS_IGNORE);
        rc = buf == NULL ? kd_err_set(err, KD_ENOMEM, "no block of %llu bytes received", len)
                         : kd_dist_block_unpack(buf, (size_t)len, mine, err);
        free(buf);
    }
    rc = kd_dist_agree(comm, rc, err);
    if (rc != KD_OK)
        kd_dist_block_free(mine);
    return rc;
}

/* Each rank's row count and first row, as MPI counts (in values). */
static int kd_dist_row_counts(const kd_dist_block_t *b, int **counts, int **displs, kd_err_t *err)
{
    *counts = malloc((size_t)b->ranks * sizeof(int));
    *displs = malloc((size_t)b->ranks * sizeof(int));
    if (*counts == NULL || *displs == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %d counts", b->ranks);
    for (int r = 0; r < b->ranks; r++) {
        (*counts)[r] = (int)(b->row_start[r + 1] - b->row_start[r]);
        (*displs)[r] = (int)b->row_start[r];
    }
    return KD_OK;
}

static int kd_dist_rows(kd_comm_t *comm, int root, const kd_dist_block_t *b, const void *in,
                        void *out, int gather, kd_err_t *err)
{
    int *counts = NULL, *displs = NULL;
    int rc = kd_dist_row_counts(b, &counts, &displs, err);
    const MPI_Datatype type = b->dtype == KD_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT;
    const int mine = (int)kd_dist_block_rows(b);
    int st = MPI_SUCCESS;
    if (rc == KD_OK)
        st = gather ? MPI_Gatherv(in, mine, type, out, counts, displs, type, root,
                                  kd_dist_comm_mpi(comm))
                    : MPI_Scatterv(in, counts, displs, type, out, mine, type, root,
                                   kd_dist_comm_mpi(comm));
    free(counts);
    free(displs);
    if (rc == KD_OK && st != MPI_SUCCESS)
        rc = kd_err_set(err, KD_EINTERNAL, "%s failed", gather ? "MPI_Gatherv" : "MPI_Scatterv");
    return rc;
}

int kd_dist_scatter_rows(kd_comm_t *comm, int root, const kd_dist_block_t *b, const void *whole,
                         void *local, kd_err_t *err)
{
    return kd_dist_rows(comm, root, b, whole, local, 0, err);
}

int kd_dist_gather_rows(kd_comm_t *comm, int root, const kd_dist_block_t *b, const void *local,
                        void *whole, kd_err_t *err)
{
    return kd_dist_rows(comm, root, b, local, whole, 1, err);
}
