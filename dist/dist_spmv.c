/*
 * Distributed SpMV (dist_matrix.h): Y = alpha A X + beta Y on this rank's rows as
 *
 *   gather X's send entries; read them (copy queue)   halo_start
 *   Y = alpha A_diag X + beta Y (main queue)          runs on the device while ...
 *   post receives, wait for the read, send, wait      ... the host exchanges (halo_finish)
 *   write the ghosts (copy queue, still beside the diagonal multiply)
 *   Y += alpha A_offd ghosts (main queue, behind a barrier on the write), non-empty rows only
 *
 * The columns: one SpMM launch when every column is asked for, or (beta = 0, the solver's
 * SpMV) when at least half are and the format has one; else one SpMV per asked-for column, as
 * kd_solve does on one process. The halo always carries all k columns: a frozen column's share
 * costs bytes, not another message.
 */
#include "dist/dist_matrix.h"
#include "common/clock.h"

#include <assert.h>

/* Y = alpha A X + beta Y for the asked-for columns, by SpMM or column by column. */
static int kd_dist_multiply(kd_dist_matrix_t *m, const kd_matrix_t *A, double alpha,
                            const kd_multivec_t *X, double beta, kd_multivec_t *Y,
                            const unsigned char *which, kd_err_t *err)
{
    const int64_t k = Y->k;
    int64_t asked = 0;
    for (int64_t c = 0; c < k; c++)
        asked += which == NULL || which[c];
    if ((which == NULL && k > 1) ||
        (beta == 0.0 && asked > 1 && 2 * asked >= k && kd_matrix_has_spmm(A)))
        return kd_matrix_spmm_inner(m->ocl, A, alpha, X, beta, Y, err);
    int rc = KD_OK;
    for (int64_t c = 0; rc == KD_OK && c < k; c++)
        if (which == NULL || which[c])
            rc = kd_matrix_spmv_inner(m->ocl, A, alpha, &X->cols[c], beta, &Y->cols[c], err);
    return rc;
}

/* Y[:, c0 .. c0 + k - 1] += alpha A_offd G (kernels/halo.cl), after the ghosts' write. */
static int kd_dist_offd(kd_dist_matrix_t *m, double alpha, int64_t c0, int64_t k,
                        kd_multivec_t *Y, kd_err_t *err)
{
    cl_kernel kernel;
    const kd_dist_offd_t *o = &m->offd;
    int rc = kd_ocl_kernel(m->ocl, "halo", m->block.dtype, NULL, "kd_halo_offd", &kernel, err);
    if (rc != KD_OK)
        return rc;
    const size_t wg = kd_ocl_work_group_size(m->ocl);
    const size_t items = ((size_t)o->rows + wg - 1) / wg * wg;
    return kd_ocl_run(m->ocl, kernel, "kd_halo_offd", kd_ocl_range_2d(items, (size_t)k, wg, 1),
                      KD_ARGS(KD_ARG_INT(o->rows), KD_ARG_INT(c0), KD_ARG_INT(k),
                              KD_ARG_MEM(o->row), KD_ARG_MEM(o->ptr), KD_ARG_MEM(o->indices),
                              KD_ARG_MEM(o->values), KD_ARG_MEM(m->ghosts.mem),
                              KD_ARG_LONG(m->ghosts.ld), KD_ARG_MEM(Y->mem), KD_ARG_LONG(Y->ld),
                              KD_ARG_VALUE(m->block.dtype, alpha)),
                      NULL, err);
}

/* The off-diagonal block's share for the asked-for columns, one launch per run of them. */
static int kd_dist_offd_columns(kd_dist_matrix_t *m, double alpha, kd_multivec_t *Y,
                                const unsigned char *which, kd_err_t *err)
{
    if (m->offd.rows == 0)
        return KD_OK;
    /* Ordered after the ghosts' write by a barrier on the main queue: on two H200s 12 us a call
     * faster than the host waiting for the write and then enqueueing (docs/BENCHMARKS.md). */
    if (m->ghost_write != NULL) {
        cl_int st = clEnqueueBarrierWithWaitList(kd_ocl_queue(m->ocl), 1, &m->ghost_write, NULL);
        if (st != CL_SUCCESS)
            return kd_ocl_fail(err, st, "ordering the off-diagonal multiply after the ghosts");
    }
    int rc = KD_OK;
    for (int64_t c = 0; rc == KD_OK && c < Y->k;) {
        if (which != NULL && !which[c]) {
            c++;
            continue;
        }
        int64_t end = c + 1;
        while (end < Y->k && (which == NULL || which[end]))
            end++;
        rc = kd_dist_offd(m, alpha, c, end - c, Y, err);
        c = end;
    }
    return rc;
}

int kd_dist_spmm(kd_dist_matrix_t *m, double alpha, const kd_multivec_t *X, double beta,
                 kd_multivec_t *Y, const unsigned char *which, kd_err_t *err)
{
    assert(m != NULL && X != NULL && Y != NULL);
    if (X->n != m->device_rows || Y->n != m->device_rows || X->k != Y->k || X->dtype != Y->dtype ||
        X->dtype != m->block.dtype)
        return kd_err_set(err, KD_EINTERNAL, "distributed SpMV: vectors of another shape or type");
    const uint64_t t0 = kd_clock_ns();
    cl_event read = NULL;
    int rc = kd_dist_halo_start(m, X, &read, err);
    if (rc == KD_OK)
        rc = kd_dist_multiply(m, m->diag, alpha, X, beta, Y, which, err);
    if (rc == KD_OK) {
        cl_int st = clFlush(kd_ocl_queue(m->ocl));
        if (st != CL_SUCCESS)
            rc = kd_ocl_fail(err, st, "clFlush");
    }
    /* The exchange runs even when this rank failed: its neighbours wait for its messages, and
     * the job would hang; the caller agrees on the failure afterwards. */
    int hrc = kd_dist_halo_finish(m, X->k, read, rc == KD_OK ? err : NULL);
    if (rc == KD_OK)
        rc = hrc;
    if (rc == KD_OK) {
        const uint64_t t1 = kd_clock_ns();
        rc = kd_dist_offd_columns(m, alpha, Y, which, err);
        m->time.ghost_ns += kd_clock_ns() - t1;
    }
    m->time.calls++;
    m->time.total_ns += kd_clock_ns() - t0;
    return rc;
}
