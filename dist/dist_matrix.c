/*
 * A rank's block on its device (dist_matrix.h): the diagonal block through the format selection,
 * the off-diagonal block as csr_scalar (mostly empty rows: one work-item each costs little), the
 * send list; every rank agrees on the outcome before any keeps its part.
 */
#include "dist/dist_matrix.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void kd_dist_matrix_free(kd_dist_matrix_t *m)
{
    if (m == NULL)
        return;
    if (m->ocl != NULL)
        (void)clFinish(kd_ocl_queue(m->ocl)); /* no read may still target a host buffer */
    kd_matrix_free(m->diag);
    kd_matrix_free(m->offd);
    if (m->send_index != NULL)
        clReleaseMemObject(m->send_index);
    if (m->send_dev != NULL)
        clReleaseMemObject(m->send_dev);
    kd_dist_host_free(m->ocl, m->send_host, m->send_pin);
    kd_dist_host_free(m->ocl, m->recv_host, m->recv_pin);
    kd_dist_host_free(m->ocl, m->ghost_host, m->ghost_pin);
    kd_multivec_release(&m->ghosts);
    kd_dist_block_free(&m->block);
    free(m);
}

/* The diagonal block, or a 1 x 1 identity for a rank without rows. */
static int kd_dist_matrix_upload_diag(kd_dist_matrix_t *m, const char *format,
                                      kd_select_mode_t mode, kd_err_t *err)
{
    kd_csr_t *one = NULL;
    const kd_csr_t *diag = m->block.diag;
    if (m->rows == 0) {
        int rc = kd_csr_alloc(1, 1, 1, m->block.dtype, &one, err);
        if (rc != KD_OK)
            return rc;
        one->indptr[0] = 0;
        one->indptr[1] = 1;
        one->indices[0] = 0;
        kd_store_real(one->values, one->dtype, 0, 1.0);
        diag = one;
    }
    int rc = kd_select_upload(m->ocl, diag, format, mode, &m->diag, &m->selected, err);
    kd_csr_free(one);
    return rc;
}

static int kd_dist_matrix_upload(kd_dist_matrix_t *m, const char *format, kd_select_mode_t mode,
                                 kd_err_t *err)
{
    const kd_dist_block_t *b = &m->block;
    int rc = kd_dist_matrix_upload_diag(m, format, mode, err);
    if (rc == KD_OK && b->ghosts > 0)
        rc = kd_matrix_upload(m->ocl, b->offd, KD_FMT_CSR_SCALAR, &m->offd, err);
    const int32_t sends = b->send_start[b->neighbours];
    if (rc == KD_OK && sends > 0)
        rc = kd_ocl_buffer_create(m->ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR,
                                  (size_t)sends * sizeof(int32_t), b->send_index, "halo send list",
                                  &m->send_index, err);
    if (rc != KD_OK)
        kd_err_prefix(err, "block of rows %lld..%lld", (long long)b->row_start[b->rank],
                      (long long)b->row_start[b->rank + 1] - 1);
    return rc;
}

int kd_dist_matrix_create(kd_ocl_t *ocl, kd_comm_t *comm, kd_dist_block_t *block,
                          const char *format, kd_select_mode_t mode, kd_dist_matrix_t **out,
                          kd_err_t *err)
{
    assert(ocl != NULL && comm != NULL && block != NULL && out != NULL);
    *out = NULL;
    kd_dist_matrix_t *m = calloc(1, sizeof(*m));
    int rc = KD_OK;
    if (m == NULL) {
        kd_dist_block_free(block);
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for a distributed matrix");
    } else {
        m->block = *block;
        memset(block, 0, sizeof(*block));
        m->comm = comm;
        m->ocl = ocl;
        if (m->block.ranks != comm->size || m->block.rank != comm->rank)
            rc = kd_err_set(err, KD_EBADREQ, "block %d of %d on rank %d of %d", m->block.rank,
                            m->block.ranks, comm->rank, comm->size);
        else {
            m->rows = kd_dist_block_rows(&m->block);
            m->device_rows = m->rows > 0 ? m->rows : 1;
            rc = kd_dist_matrix_upload(m, format, mode, err);
        }
    }
    rc = kd_dist_agree(comm, rc, err);
    if (rc != KD_OK) {
        kd_dist_matrix_free(m);
        return rc;
    }
    *out = m;
    return KD_OK;
}
