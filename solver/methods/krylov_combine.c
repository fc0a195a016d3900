/*
 * kd_krylov_reduce for a solve spread over ranks (solver/methods/krylov.h, solver/comm.h). The
 * passes leave one partial sum per (sum, column, work-group) on each rank's device; here the ones
 * that are new cross to the host, each column's partials are folded in group order, one sum over
 * the ranks combines every column's at once (with the stop flags riding along), and the totals go
 * back as [total, 0, ..., 0], where the consumer's own fold (unchanged kernels) reads the total.
 * A column whose partials the pass did not write keeps them untouched: they are a frozen
 * column's, carried over from a reduction already combined, and summing them again would count
 * them once per rank.
 */
#include "solver/methods/krylov.h"
#include "common/checked.h"
#include "common/clock.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Where pending entry e's partials start in its buffer, in values, and how many there are. */
static size_t kd_krylov_pending_at(const kd_krylov_t *kr, const kd_krylov_pending_t *e,
                                   size_t *count)
{
    const size_t per_sum = (size_t)kr->k * kr->groups;
    *count = (size_t)e->sums * per_sum;
    return e->res ? (size_t)e->set * KD_KRYLOV_RES_SUMS * per_sum : 0;
}

/* Whether column c wrote new partials in pending entry e (alpha: copy e->parity's scalars). */
static int kd_krylov_fresh(const kd_krylov_t *kr, const kd_krylov_pending_t *e, int64_t c,
                           const unsigned char *alpha)
{
    switch (e->fresh) {
    case KD_KRYLOV_FRESH_MASK: {
        const int m = kr->mask_given ? kr->mask_host[c] : kr->mask_all;
        return (m & KD_KRYLOV_MASK_PARTIALS) != 0;
    }
    case KD_KRYLOV_FRESH_ALPHA:
        return kd_load_real(alpha, kr->dtype, (size_t)c * KD_KRYLOV_SLOTS + KD_KRYLOV_SLOT_ALPHA) !=
               0.0;
    default:
        return 1;
    }
}

/* Room on the host for the pending partials (and the alpha copy) in one buffer. */
static int kd_krylov_combine_room(kd_krylov_t *kr, size_t values, kd_err_t *err)
{
    size_t bytes;
    if (kd_mul_overflow(values, kd_dtype_size(kr->dtype), &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "krylov: %zu partial sums", values);
    if (bytes <= kr->combine_cap)
        return KD_OK;
    cl_int st = clFinish(kd_ocl_queue(kr->ocl)); /* the last combine's writes read the old one */
    if (st != CL_SUCCESS)
        return kd_ocl_fail(err, st, "waiting for the last combined sums");
    void *grown = realloc(kr->combine_host, bytes);
    if (grown == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %zu partial sums", values);
    kr->combine_host = grown;
    kr->combine_cap = bytes;
    return KD_OK;
}

/* Read every pending entry's partials (and the alphas) into the host buffer; waits. */
static int kd_krylov_combine_read(kd_krylov_t *kr, size_t *offsets, size_t *alpha_at, kd_err_t *err)
{
    const size_t v = kd_dtype_size(kr->dtype);
    const size_t slots = (size_t)kr->k * KD_KRYLOV_SLOTS;
    size_t total = 0;
    int alpha_parity = -1;
    for (int i = 0; i < kr->npending; i++) {
        size_t count;
        (void)kd_krylov_pending_at(kr, &kr->pending[i], &count);
        offsets[i] = total;
        total += count;
        if (kr->pending[i].fresh == KD_KRYLOV_FRESH_ALPHA)
            alpha_parity = kr->pending[i].parity;
    }
    *alpha_at = total;
    int rc = kd_krylov_combine_room(kr, total + slots, err);
    if (rc != KD_OK)
        return rc;
    cl_command_queue q = kd_ocl_queue(kr->ocl);
    unsigned char *host = kr->combine_host;
    cl_int st = CL_SUCCESS;
    for (int i = 0; st == CL_SUCCESS && i < kr->npending; i++) {
        size_t count;
        const size_t at = kd_krylov_pending_at(kr, &kr->pending[i], &count);
        cl_mem buf = kr->pending[i].res ? kr->res_partials : kr->dot_partials;
        st = kd_ocl_enqueue_read(q, buf, CL_FALSE, at * v, count * v, host + offsets[i] * v, 0,
                                 NULL, NULL);
    }
    if (st == CL_SUCCESS && alpha_parity >= 0)
        st = kd_ocl_enqueue_read(q, kr->scalars, CL_FALSE, (size_t)alpha_parity * slots * v,
                                 slots * v, host + total * v, 0, NULL, NULL);
    if (st == CL_SUCCESS) /* the device then idles until the sums return: each such wait costs
                           * about 85 us beyond the work before it on NVIDIA's OpenCL, polling
                           * the event instead measured no faster (docs/BENCHMARKS.md, issue 19) */
        return (st = clFinish(q)) == CL_SUCCESS
                   ? KD_OK
                   : kd_ocl_fail(err, st, "clFinish (reading partial sums to combine)");
    /* The reads enqueued before the one refused still write into the host buffer: let them
     * finish before the caller reuses or frees it. */
    (void)clFinish(q);
    return kd_ocl_fail(err, st, "clEnqueueReadBuffer (partial sums to combine)");
}

int kd_krylov_combine(kd_krylov_t *kr, const char *what, kd_err_t *err)
{
    assert(kr != NULL && kr->comm != NULL);
    const uint64_t start = kd_clock_ns();
    if (kr->pending_unknown)
        return kd_err_set(err, KD_EINTERNAL,
                          "krylov: %s: a method's own pass left partial sums that cannot be "
                          "combined across ranks",
                          what);
    if (kr->comm->size == 1) { /* nothing to combine: the kernels fold as on one process */
        if (kr->comm->stop_wanted != 0 && kr->comm->stop_agreed != KD_ECANCELLED)
            kr->comm->stop_agreed = kr->comm->stop_wanted;
        kr->npending = 0;
        kr->comm->reductions++;
        return KD_OK;
    }
    const kd_dtype_t t = kr->dtype;
    const size_t v = kd_dtype_size(t), G = kr->groups, k = (size_t)kr->k;
    size_t offsets[KD_KRYLOV_PENDING_MAX], alpha_at = 0;
    int rc = kd_krylov_combine_read(kr, offsets, &alpha_at, err);
    kr->comm->read_ns += kd_clock_ns() - start;
    size_t nsums = 2; /* the stop flags */
    for (int i = 0; i < kr->npending; i++)
        nsums += (size_t)kr->pending[i].sums * k;
    double *sums = rc == KD_OK ? malloc(nsums * sizeof(double)) : NULL;
    if (rc == KD_OK && sums == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %zu sums", nsums);
    if (rc != KD_OK) {
        kr->npending = 0;
        return rc;
    }
    unsigned char *host = kr->combine_host;
    const unsigned char *alpha = host + alpha_at * v;
    size_t s = 0;
    for (int i = 0; i < kr->npending; i++)
        for (int j = 0; j < kr->pending[i].sums; j++)
            for (size_t c = 0; c < k; c++, s++) {
                const size_t base = offsets[i] + ((size_t)j * k + c) * G;
                double total = 0.0;
                if (kd_krylov_fresh(kr, &kr->pending[i], (int64_t)c, alpha))
                    for (size_t g = 0; g < G; g++)
                        total += kd_load_real(host, t, base + g);
                sums[s] = total;
            }
    sums[s++] = kr->comm->stop_wanted == KD_ECANCELLED;
    sums[s++] = kr->comm->stop_wanted == KD_ETIMEOUT;
    const uint64_t net = kd_clock_ns();
    rc = kr->comm->sum(kr->comm, sums, (int64_t)nsums, err);
    kr->comm->sum_ns += kd_clock_ns() - net;
    if (rc == KD_OK) {
        if (sums[nsums - 2] > 0.0)
            kr->comm->stop_agreed = KD_ECANCELLED;
        else if (sums[nsums - 1] > 0.0 && kr->comm->stop_agreed == 0)
            kr->comm->stop_agreed = KD_ETIMEOUT;
        s = 0;
        for (int i = 0; i < kr->npending; i++)
            for (int j = 0; j < kr->pending[i].sums; j++)
                for (size_t c = 0; c < k; c++, s++) {
                    if (!kd_krylov_fresh(kr, &kr->pending[i], (int64_t)c, alpha))
                        continue;
                    const size_t base = offsets[i] + ((size_t)j * k + c) * G;
                    kd_store_real(host, t, base, sums[s]);
                    for (size_t g = 1; g < G; g++)
                        kd_store_real(host, t, base + g, 0.0);
                }
        cl_int st = CL_SUCCESS;
        const char *call = "clEnqueueWriteBuffer";
        for (int i = 0; st == CL_SUCCESS && i < kr->npending; i++) {
            size_t count;
            const size_t at = kd_krylov_pending_at(kr, &kr->pending[i], &count);
            cl_mem buf = kr->pending[i].res ? kr->res_partials : kr->dot_partials;
            /* not waited for: the next combine reads into the host buffer and rewrites it only
             * after its clFinish, which on the in-order queue comes after these writes (and
             * a larger buffer or the release waits for them first) */
            st = kd_ocl_enqueue_write(kd_ocl_queue(kr->ocl), buf, CL_FALSE, at * v, count * v,
                                      host + offsets[i] * v, 0, NULL, NULL);
        }
        if (st == CL_SUCCESS) {
            call = "clFlush";
            st = clFlush(kd_ocl_queue(kr->ocl));
        }
        if (st != CL_SUCCESS) {
            rc = kd_ocl_fail(err, st, call);
            kd_err_prefix(err, "writing combined sums back");
        }
    }
    free(sums);
    kr->npending = 0;
    kr->comm->reductions++;
    kr->comm->reduce_ns += kd_clock_ns() - start;
    return rc;
}
