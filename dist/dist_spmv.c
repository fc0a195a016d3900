/*
 * Distributed SpMV (dist_matrix.h): Y = alpha A X + beta Y on this rank's rows as
 *
 *   gather X's send entries, read them (enqueued)     halo_start
 *   Y = alpha A_diag X + beta Y (enqueued behind it)  runs on the device while ...
 *   post receives, wait for the read, send, wait      ... the host exchanges (halo_finish)
 *   write the ghosts (waits for the diagonal multiply), Y += alpha A_offd ghosts
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
    if (rc == KD_OK && m->offd != NULL) {
        const uint64_t t1 = kd_clock_ns();
        rc = kd_dist_multiply(m, m->offd, alpha, &m->ghosts, 1.0, Y, which, err);
        m->time.ghost_ns += kd_clock_ns() - t1;
    }
    m->time.calls++;
    m->time.total_ns += kd_clock_ns() - t0;
    return rc;
}
