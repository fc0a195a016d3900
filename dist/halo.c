/*
 * The halo exchange of a distributed SpMV (dist_matrix.h). The send entries of all k columns
 * are gathered on the device into one buffer (kernels/halo.cl: each neighbour's share is
 * contiguous) and read to the host on the halo's own copy queue, so that the diagonal block's
 * multiply, enqueued next on the main queue, starts without waiting for the read: the device
 * multiplies while the host waits for the read, posts the messages and waits for the neighbours'.
 * The ghosts arrive entry-major (all k columns of a ghost together, as they were sent), are turned
 * column-major for the ghost multivector and written on the copy queue too, beside the diagonal
 * multiply; the off-diagonal multiply waits for that write through its event.
 */
#include "dist/dist_matrix.h"
#include "common/checked.h"
#include "common/clock.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define KD_DIST_HALO_TAG 0x4b44 /* every message of an exchange: ordered per pair by MPI */

/* bytes of page-locked host memory, or malloc'd memory when the device refuses (*pin NULL): the
 * halo's copies are on every SpMV's critical path (docs/BENCHMARKS.md, issue 17). */
static void *kd_dist_host_alloc(kd_ocl_t *ocl, size_t bytes, cl_mem *pin)
{
    void *p = kd_ocl_host_alloc(ocl, bytes + 1, pin, NULL);
    return p != NULL ? p : malloc(bytes + 1);
}

void kd_dist_host_free(kd_ocl_t *ocl, void *p, cl_mem pin)
{
    if (pin == NULL)
        free(p);
    else
        kd_ocl_host_free(ocl, p, pin);
}

/* Buffers for k columns (k changes only between solves: reallocate then). */
static int kd_dist_halo_room(kd_dist_matrix_t *m, int64_t k, kd_err_t *err)
{
    if (k == m->k_cap)
        return KD_OK;
    if (m->copy != NULL) /* no copy may still use the buffers freed below */
        (void)clFinish(m->copy);
    const kd_dist_block_t *b = &m->block;
    const size_t v = kd_dtype_size(b->dtype);
    const size_t sends = (size_t)b->send_start[b->neighbours], ghosts = (size_t)b->ghosts;
    size_t send_bytes, ghost_bytes;
    if (kd_mul3_overflow(sends, (size_t)k, v, &send_bytes) ||
        kd_mul3_overflow(ghosts, (size_t)k, v, &ghost_bytes))
        return kd_err_set(err, KD_ETOOLARGE, "halo of %lld columns does not fit", (long long)k);
    if (m->send_dev != NULL)
        clReleaseMemObject(m->send_dev);
    m->send_dev = NULL;
    kd_dist_host_free(m->ocl, m->send_host, m->send_pin);
    kd_dist_host_free(m->ocl, m->recv_host, m->recv_pin);
    kd_dist_host_free(m->ocl, m->ghost_host, m->ghost_pin);
    m->send_host = m->recv_host = m->ghost_host = NULL;
    m->send_pin = m->recv_pin = m->ghost_pin = NULL;
    kd_multivec_release(&m->ghosts);
    m->k_cap = 0;
    int rc = KD_OK;
    if (sends > 0)
        rc = kd_ocl_buffer_create(m->ocl, CL_MEM_READ_WRITE, send_bytes, NULL, "halo send buffer",
                                  &m->send_dev, err);
    if (rc == KD_OK && ghosts > 0)
        rc = kd_multivec_alloc(m->ocl, (int64_t)ghosts, k, b->dtype, &m->ghosts, err);
    if (rc != KD_OK)
        return rc;
    m->send_host = kd_dist_host_alloc(m->ocl, send_bytes, &m->send_pin);
    m->recv_host = kd_dist_host_alloc(m->ocl, ghost_bytes, &m->recv_pin);
    m->ghost_host = kd_dist_host_alloc(m->ocl, ghost_bytes, &m->ghost_pin);
    if (m->send_host == NULL || m->recv_host == NULL || m->ghost_host == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the halo buffers");
    m->k_cap = k;
    return KD_OK;
}

int kd_dist_halo_start(kd_dist_matrix_t *m, const kd_multivec_t *X, cl_event *read, kd_err_t *err)
{
    assert(m != NULL && X != NULL && read != NULL);
    *read = NULL;
    const uint64_t t0 = kd_clock_ns();
    int rc = kd_dist_halo_room(m, X->k, err);
    const kd_dist_block_t *b = &m->block;
    const int32_t sends = b->send_start[b->neighbours];
    if (rc != KD_OK || sends == 0)
        return rc;
    cl_kernel kernel;
    if ((rc = kd_ocl_kernel(m->ocl, "halo", b->dtype, NULL, "kd_halo_gather", &kernel, err)) !=
        KD_OK)
        return rc;
    const size_t wg = kd_ocl_work_group_size(m->ocl);
    const size_t items = ((size_t)sends + wg - 1) / wg * wg;
    cl_event gathered = NULL;
    rc = kd_ocl_run(m->ocl, kernel, "kd_halo_gather", kd_ocl_range_2d(items, (size_t)X->k, wg, 1),
                    KD_ARGS(KD_ARG_INT(sends), KD_ARG_INT(X->k), KD_ARG_LONG(X->ld),
                            KD_ARG_MEM(m->send_index), KD_ARG_MEM(X->mem), KD_ARG_MEM(m->send_dev)),
                    &gathered, err);
    if (rc != KD_OK)
        return rc;
    const size_t bytes = (size_t)sends * (size_t)X->k * kd_dtype_size(b->dtype);
    const char *call = "clFlush";
    cl_int st = clFlush(kd_ocl_queue(m->ocl));
    if (st == CL_SUCCESS) {
        call = "clEnqueueReadBuffer";
        st = kd_ocl_enqueue_read(m->copy, m->send_dev, CL_FALSE, 0, bytes, m->send_host, 1,
                                 &gathered, read);
    }
    if (st == CL_SUCCESS) {
        call = "clFlush";
        st = clFlush(m->copy);
    }
    clReleaseEvent(gathered);
    m->time.gather_ns += kd_clock_ns() - t0;
    if (st == CL_SUCCESS)
        return KD_OK;
    kd_ocl_fail(err, st, call);
    return kd_err_prefix(err, "reading the halo's send entries");
}

/* Post every receive and send of the exchange and wait for all of them. */
static int kd_dist_halo_messages(kd_dist_matrix_t *m, int64_t k, cl_event read, kd_err_t *err)
{
    const kd_dist_block_t *b = &m->block;
    const size_t v = kd_dtype_size(b->dtype);
    const MPI_Datatype type = b->dtype == KD_DTYPE_F64 ? MPI_DOUBLE : MPI_FLOAT;
    const MPI_Comm mpi = kd_dist_comm_mpi(m->comm);
    const uint64_t t0 = kd_clock_ns();
    cl_int prev = CL_SUCCESS; /* the last exchange's ghosts must have left recv/ghost_host */
    if (m->ghost_write != NULL) {
        prev = clWaitForEvents(1, &m->ghost_write);
        clReleaseEvent(m->ghost_write);
        m->ghost_write = NULL;
    }
    MPI_Request *req = malloc(2 * (size_t)b->neighbours * sizeof(MPI_Request) + 1);
    if (req == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %d messages", b->neighbours);
    int n = 0, st = MPI_SUCCESS;
    for (int32_t i = 0; st == MPI_SUCCESS && i < b->neighbours; i++) {
        const int64_t count = (int64_t)(b->recv_start[i + 1] - b->recv_start[i]) * k;
        if (count > 0)
            st = MPI_Irecv((char *)m->recv_host + (size_t)b->recv_start[i] * (size_t)k * v,
                           (int)count, type, b->neighbour[i], KD_DIST_HALO_TAG, mpi, &req[n++]);
    }
    cl_int cst = read != NULL ? clWaitForEvents(1, &read) : CL_SUCCESS;
    cst = cst == CL_SUCCESS ? prev : cst;
    const uint64_t t1 = kd_clock_ns();
    m->time.gather_ns += t1 - t0; /* until the send entries were on the host */
    for (int32_t i = 0; st == MPI_SUCCESS && cst == CL_SUCCESS && i < b->neighbours; i++) {
        const int64_t count = (int64_t)(b->send_start[i + 1] - b->send_start[i]) * k;
        if (count > 0)
            st = MPI_Isend((char *)m->send_host + (size_t)b->send_start[i] * (size_t)k * v,
                           (int)count, type, b->neighbour[i], KD_DIST_HALO_TAG, mpi, &req[n++]);
    }
    /* Even after a failure: nothing may still write into the buffers once we return. */
    const int wst = MPI_Waitall(n, req, MPI_STATUSES_IGNORE);
    free(req);
    m->time.exchange_ns += kd_clock_ns() - t1;
    if (cst != CL_SUCCESS)
        return kd_ocl_fail(err, cst, "waiting for the halo's send entries");
    if (st != MPI_SUCCESS || wst != MPI_SUCCESS)
        return kd_err_set(err, KD_EINTERNAL, "the halo exchange's messages failed");
    return KD_OK;
}

int kd_dist_halo_finish(kd_dist_matrix_t *m, int64_t k, cl_event read, kd_err_t *err)
{
    assert(m != NULL);
    if (k != m->k_cap) /* halo_start failed to make room: nothing was sent */
        return kd_err_set(err, KD_EINTERNAL, "halo: buffers for %lld columns missing",
                          (long long)k);
    int rc = kd_dist_halo_messages(m, k, read, err);
    if (read != NULL)
        clReleaseEvent(read);
    const int64_t ghosts = m->block.ghosts;
    if (rc != KD_OK || ghosts == 0)
        return rc;
    const uint64_t t1 = kd_clock_ns();
    const void *column_major = m->recv_host;
    const size_t v = kd_dtype_size(m->block.dtype);
    if (k > 1) { /* entry-major as sent -> column-major */
        for (int64_t g = 0; g < ghosts; g++)
            for (int64_t c = 0; c < k; c++)
                memcpy((char *)m->ghost_host + ((size_t)c * (size_t)ghosts + (size_t)g) * v,
                       (const char *)m->recv_host + ((size_t)g * (size_t)k + (size_t)c) * v, v);
        column_major = m->ghost_host;
    }
    /* column by column (the multivector's columns are padded to ld); the last write's event
     * stands for all of them on the in-order copy queue */
    cl_int st = CL_SUCCESS;
    const char *call = "clEnqueueWriteBuffer";
    for (int64_t c = 0; st == CL_SUCCESS && c < k; c++)
        st = kd_ocl_enqueue_write(m->copy, m->ghosts.mem, CL_FALSE,
                                  (size_t)c * (size_t)m->ghosts.ld * v, (size_t)ghosts * v,
                                  (const char *)column_major + (size_t)c * (size_t)ghosts * v, 0,
                                  NULL, c == k - 1 ? &m->ghost_write : NULL);
    if (st == CL_SUCCESS) {
        call = "clFlush";
        st = clFlush(m->copy);
    }
    m->time.ghost_ns += kd_clock_ns() - t1;
    if (st == CL_SUCCESS)
        return KD_OK;
    kd_ocl_fail(err, st, call);
    return kd_err_prefix(err, "writing the ghosts");
}
