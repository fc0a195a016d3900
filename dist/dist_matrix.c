/*
 * A rank's block on its device (dist_matrix.h): the diagonal block through the format selection,
 * the off-diagonal block as CSR over its non-empty rows (kd_dist_offd_t), the send list, the
 * halo's copy queue; every rank agrees on the outcome before any keeps its part.
 */
#include "dist/dist_matrix.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

void kd_dist_matrix_free(kd_dist_matrix_t *m)
{
    if (m == NULL)
        return;
    if (m->ocl != NULL) /* no read may still target a host buffer */
        (void)clFinish(kd_ocl_queue(m->ocl));
    if (m->copy != NULL) {
        (void)clFinish(m->copy);
        clReleaseCommandQueue(m->copy);
    }
    if (m->ghost_write != NULL)
        clReleaseEvent(m->ghost_write);
    kd_matrix_free(m->diag);
    cl_mem offd[] = {m->offd.row, m->offd.ptr, m->offd.indices, m->offd.values};
    for (size_t i = 0; i < sizeof(offd) / sizeof(offd[0]); i++)
        if (offd[i] != NULL)
            clReleaseMemObject(offd[i]);
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

/* One read-only device array of count entries of size bytes each, from host (none when empty). */
static int kd_dist_array(kd_dist_matrix_t *m, const void *host, size_t count, size_t size,
                         const char *what, cl_mem *out, kd_err_t *err)
{
    *out = NULL;
    if (count == 0)
        return KD_OK;
    m->offd.device_bytes += count * size;
    return kd_ocl_buffer_create(m->ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, count * size,
                                (void *)host, what, out, err);
}

/* The off-diagonal block without its empty rows (kd_dist_offd_t). */
static int kd_dist_matrix_upload_offd(kd_dist_matrix_t *m, kd_err_t *err)
{
    const kd_csr_t *o = m->block.offd;
    if (o == NULL || o->nnz == 0)
        return KD_OK;
    int32_t n = 0;
    for (int64_t i = 0; i < o->rows; i++)
        n += o->indptr[i + 1] > o->indptr[i];
    int32_t *row = malloc((size_t)n * sizeof(int32_t) + 1);
    int32_t *ptr = malloc(((size_t)n + 1) * sizeof(int32_t));
    int rc = KD_OK;
    if (row == NULL || ptr == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %d off-diagonal rows", n);
    else {
        int32_t r = 0;
        for (int64_t i = 0; i < o->rows; i++)
            if (o->indptr[i + 1] > o->indptr[i]) {
                row[r] = (int32_t)i;
                ptr[r++] = o->indptr[i];
            }
        ptr[n] = o->indptr[o->rows];
        m->offd.rows = n;
        const size_t nnz = (size_t)o->nnz;
        if ((rc = kd_dist_array(m, row, (size_t)n, sizeof(int32_t), "off-diagonal rows",
                                &m->offd.row, err)) == KD_OK &&
            (rc = kd_dist_array(m, ptr, (size_t)n + 1, sizeof(int32_t), "off-diagonal row pointers",
                                &m->offd.ptr, err)) == KD_OK &&
            (rc = kd_dist_array(m, o->indices, nnz, sizeof(int32_t), "off-diagonal indices",
                                &m->offd.indices, err)) == KD_OK)
            rc = kd_dist_array(m, o->values, nnz, kd_dtype_size(o->dtype), "off-diagonal values",
                               &m->offd.values, err);
    }
    free(row);
    free(ptr);
    return rc;
}

static int kd_dist_matrix_upload(kd_dist_matrix_t *m, const char *format, kd_select_mode_t mode,
                                 kd_err_t *err)
{
    const kd_dist_block_t *b = &m->block;
    int rc = kd_dist_matrix_upload_diag(m, format, mode, err);
    if (rc == KD_OK && b->ghosts > 0)
        rc = kd_dist_matrix_upload_offd(m, err);
    if (rc == KD_OK && b->neighbours > 0) {
        cl_int st;
        m->copy = clCreateCommandQueue(kd_ocl_context(m->ocl), kd_ocl_desc(m->ocl)->device_id, 0,
                                       &st);
        if (st != CL_SUCCESS)
            rc = kd_ocl_fail(err, st, "clCreateCommandQueue (the halo's copies)");
    }
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
