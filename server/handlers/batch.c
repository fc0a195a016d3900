/*
 * Batched matrices on the wire (server/handlers/batch.h): matrix.put with `batch` = k (one pattern,
 * k value sets), and spmv and solve on a batch. The handlers dispatch here before their own
 * (kd_handlers_batch_claims), so the single-matrix paths never see a batch.
 *
 * A put builds the block-diagonal CSR of the k systems from the pattern and the values (every
 * count was checked by the decoder against the limits on the whole batch, so the arrays built
 * here are bounded by what the message holds), canonicalises it as any upload, and admits it
 * like kd_handlers_admit does a matrix: the same id reuse, owners, quotas, device budget and
 * state file, with a kd_batch_t on the device instead of a format.
 */
#include "server/handlers/batch.h"

#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/store/cache.h"
#include "server/handlers/handlers.h"
#include "server/store/quota.h"
#include "server/handlers/replies.h"
#include "server/server.h"
#include "server/store/state.h"
#include "solver/batch/batch.h"
#include "kernels/batch/batch_abi.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double kd_batch_ms_since(uint64_t t0)
{
    return (double)(kd_clock_ns() - t0) / 1e6;
}

/* The batch size of matrix id (0: a plain matrix or none). Asked for every request the worker
 * runs: the entry is read in place (the worker writes entries), not copied. */
static int64_t kd_batch_of(struct kd_server *server, const uint8_t id[16])
{
    const kd_store_entry_t *e = kd_store_find(server->store, id);
    return e != NULL ? e->meta.batch : 0;
}

int kd_handlers_batch_claims(struct kd_server *server, const kd_job_t *job)
{
    const kd_request_t *req = job->req;
    switch (req->method) {
    case KD_METHOD_MATRIX_PUT:
        return req->u.put.batch > 0;
    case KD_METHOD_SPMV:
        return kd_batch_of(server, req->u.spmv.id) > 0;
    case KD_METHOD_SOLVE:
        return kd_batch_of(server, req->u.solve.id) > 0 || req->u.solve.rtols.present ||
               req->u.solve.atols.present || req->u.solve.maxiters.present;
    case KD_METHOD_MATRIX_MULTIPLY:
        return kd_batch_of(server, req->u.multiply.a) > 0 ||
               kd_batch_of(server, req->u.multiply.b) > 0;
    case KD_METHOD_SOLVE_BATCH:
        return 1;
    default:
        return 0;
    }
}

/* The block-diagonal CSR of k copies of the pattern, values as sent (k x nnz). */
static int kd_batch_block_diagonal(struct kd_server *server, const kd_put_request_t *p,
                                   kd_csr_t **out, kd_err_t *err)
{
    const int64_t k = p->batch, rows = p->rows, cols = p->cols, nnz = p->indices.count;
    /* the pattern alone first: its errors name its own rows and entries */
    kd_csr_t *pattern = NULL;
    int rc = kd_csr_from_csr_arrays(rows, cols, nnz, p->indptr.data, p->indptr.dtype,
                                    p->indices.data, p->indices.dtype, p->values.data,
                                    p->values.dtype, p->dtype, &server->csr_limits, &pattern, err);
    kd_csr_free(pattern);
    if (rc != KD_OK)
        return rc;
    int64_t *indptr = kd_malloc_array((size_t)(k * rows) + 1, sizeof(int64_t));
    int64_t *indices = kd_malloc_array((size_t)(k * nnz) + 1, sizeof(int64_t));
    if (indptr == NULL || indices == NULL) {
        free(indptr);
        free(indices);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a batch of %lld", (long long)k);
    }
    const int wide_ptr = p->indptr.dtype == KD_DTYPE_I64,
              wide_idx = p->indices.dtype == KD_DTYPE_I64;
    for (int64_t s = 0; s < k; s++) {
        for (int64_t i = 0; i < rows; i++)
            indptr[s * rows + i] = s * nnz + (wide_ptr ? kd_load_i64(p->indptr.data, (size_t)i)
                                                       : kd_load_i32(p->indptr.data, (size_t)i));
        for (int64_t j = 0; j < nnz; j++)
            indices[s * nnz + j] = s * cols + (wide_idx ? kd_load_i64(p->indices.data, (size_t)j)
                                                        : kd_load_i32(p->indices.data, (size_t)j));
    }
    indptr[k * rows] = k * nnz;
    rc = kd_csr_from_csr_arrays(k * rows, k * cols, k * nnz, indptr, KD_DTYPE_I64, indices,
                                KD_DTYPE_I64, p->values.data, p->values.dtype, p->dtype,
                                &server->csr_limits, out, err);
    free(indptr);
    free(indices);
    if (rc != KD_OK)
        kd_err_prefix(err, "batch = %lld systems together", (long long)k);
    return rc;
}

static void kd_batch_describe(kd_matrix_meta_t *meta, const kd_csr_t *csr, const kd_matrix_t *dev,
                              const kd_matrix_options_t *opt, int64_t k)
{
    snprintf(meta->name, sizeof(meta->name), "%s", opt->name);
    meta->rows = csr->rows;
    meta->cols = csr->cols;
    meta->nnz = csr->nnz;
    meta->dtype = csr->dtype;
    meta->format = dev->format;
    meta->device_bytes = dev->device_bytes;
    meta->pinned = opt->pin == 1;
    kd_csr_compute_stats(csr, &meta->stats);
    meta->reorder = KD_REORDER_NONE;
    meta->symmetric = -1;
    meta->batch = k;
}

/* kd_handlers_keep's device step for a batch: a kd_batch_t, with room for it in the budget. */
static int kd_batch_keep_upload(struct kd_server *server, kd_store_entry_t *entry,
                                const kd_csr_t *csr, void *arg, kd_err_t *err)
{
    const kd_put_request_t *p = arg;
    kd_matrix_meta_t *meta = &entry->meta;
    char what[160];
    snprintf(what, sizeof(what), "batch %s (%lld systems of %lld x %lld, %s)", meta->hex,
             (long long)p->batch, (long long)(csr->rows / p->batch),
             (long long)(csr->cols / p->batch), kd_dtype_name(csr->dtype));
    const size_t need = kd_batch_plan_bytes(p->batch, csr->rows / p->batch, csr->cols / p->batch,
                                            csr->nnz / p->batch, csr->dtype);
    int rc;
    if ((rc = kd_cache_reserve(server, need, NULL, what, err)) != KD_OK ||
        (rc = kd_batch_from_block_diagonal(server->ocl, csr, p->batch, &entry->dev, err)) != KD_OK)
        return rc;
    kd_batch_describe(meta, csr, entry->dev, &p->options, p->batch);
    return KD_OK;
}

/* kd_handlers_admit for a batch (takes csr): its id is the block diagonal's, mixed with k. */
static int kd_batch_admit(struct kd_server *server, const kd_job_t *job, kd_csr_t *csr,
                          const kd_put_request_t *p, kd_matrix_meta_t *out, int *created,
                          kd_err_t *err)
{
    uint8_t id[16];
    if (kd_csr_hash(csr, id) != KD_OK) {
        kd_csr_free(csr);
        return kd_err_set(err, KD_ENOMEM, "out of host memory hashing the batch");
    }
    kd_batch_id_mix(id, p->batch);
    return kd_handlers_keep(server, job, csr, id, p->options.pin, kd_batch_keep_upload, (void *)p,
                            out, created, err);
}

static int kd_batch_put(struct kd_server *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_put_request_t *p = &job->req->u.put;
    kd_csr_t *csr = NULL;
    int rc = kd_batch_block_diagonal(server, p, &csr, err);
    if (rc != KD_OK)
        return rc;
    kd_matrix_meta_t meta;
    int created;
    if ((rc = kd_batch_admit(server, job, csr, p, &meta, &created, err)) != KD_OK)
        return rc;
    if (created)
        KD_INFO("store",
                "put batch id=%s systems=%lld rows=%lld nnz=%lld dtype=%s device_bytes=%zu",
                meta.hex, (long long)meta.batch, (long long)(meta.rows / meta.batch),
                (long long)(meta.nnz / meta.batch), kd_dtype_name(meta.dtype), meta.device_bytes);
    kd_w_result_begin(w, job->msgid);
    kd_reply_meta(w, &meta, created);
    return KD_OK;
}

/* Matrix id made resident with room for `vectors` vectors of its k x rows values. */
static int kd_batch_use(struct kd_server *server, const uint8_t id[16], int64_t vectors,
                        kd_store_entry_t **entry, kd_err_t *err)
{
    const kd_store_entry_t *e = kd_store_find(server->store, id);
    size_t bytes = 0;
    if (e != NULL &&
        kd_mul3_overflow((size_t)vectors,
                         (size_t)(e->meta.rows > e->meta.cols ? e->meta.rows : e->meta.cols),
                         kd_dtype_size(e->meta.dtype), &bytes))
        bytes = SIZE_MAX;
    return kd_cache_use(server, id, bytes, entry, err);
}

/* A solve with history keeps k x (the largest maxiter + 1) values on the device (at most
 * KD_BATCH_HISTORY_MAX, more is refused by the solve) and reads them back: charged with the
 * vectors kd_batch_use reserved before anything is allocated for them. */
static int kd_batch_reserve_history(struct kd_server *server, kd_store_entry_t *entry,
                                    int64_t vectors, const int64_t *maxiter, kd_err_t *err)
{
    const int64_t k = entry->dev->batch->count;
    int64_t limit = 0;
    for (int64_t s = 0; s < k; s++)
        if (maxiter[s] > limit)
            limit = maxiter[s];
    const int64_t cells = kd_batch_history_cells(k, limit);
    if (cells < 0)
        return KD_OK; /* the solve refuses it, naming the cap */
    const kd_matrix_meta_t *m = &entry->meta;
    const size_t vsize = kd_dtype_size(m->dtype);
    const size_t n = (size_t)(m->rows > m->cols ? m->rows : m->cols);
    size_t vec, hist, total;
    if (kd_mul3_overflow((size_t)vectors, n, vsize, &vec) ||
        kd_mul_overflow((size_t)cells, vsize, &hist) || kd_add_overflow(vec, hist, &total))
        total = SIZE_MAX;
    char what[128];
    snprintf(what, sizeof(what), "the history of %lld systems x %lld iterations (maxiter + 1)",
             (long long)k, (long long)(limit + 1));
    return kd_cache_reserve(server, total, entry, what, err);
}

/* n values of dtype, or NULL with err set. */
static void *kd_batch_values(int64_t n, kd_dtype_t dtype, kd_err_t *err)
{
    void *p = kd_malloc_array((size_t)n + 1, kd_dtype_size(dtype));
    if (p == NULL)
        kd_err_set(err, KD_ENOMEM, "out of host memory for %lld values", (long long)n);
    return p;
}

/* y_s = alpha A_s x_s + beta y_s for every system. */
static int kd_batch_spmv_run(struct kd_server *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_spmv_request_t *q = &job->req->u.spmv;
    kd_store_entry_t *entry;
    int rc = kd_batch_use(server, q->id, 2, &entry, err);
    if (rc != KD_OK)
        return rc;
    const kd_batch_t *B = entry->dev->batch;
    const int64_t k = B->count, xn = k * B->cols, yn = k * B->rows;
    if (q->ncols != 1)
        return kd_err_set(err, KD_EBADREQ,
                          "spmv on batch %s takes one vector per system (ncols = 1), not %lld",
                          entry->meta.hex, (long long)q->ncols);
    if (q->x.count != xn)
        return kd_err_set(err, KD_EBADREQ,
                          "x has %lld values but batch %s needs %lld systems x %lld columns",
                          (long long)q->x.count, entry->meta.hex, (long long)k, (long long)B->cols);
    if (q->beta != 0.0 && q->y.count != yn)
        return kd_err_set(err, KD_EBADREQ,
                          "y has %lld values but batch %s needs %lld systems x %lld rows",
                          (long long)q->y.count, entry->meta.hex, (long long)k, (long long)B->rows);
    if ((rc = kd_handlers_check_out(&q->out, yn, "y", &q->x, "x", &q->y, "y", err)) != KD_OK)
        return rc;
    const uint64_t t0 = kd_clock_ns();
    void *x = kd_batch_values(xn, B->dtype, err), *y = kd_batch_values(yn, B->dtype, err);
    void *out = kd_batch_values(yn, q->dtype, err);
    if (x == NULL || y == NULL || out == NULL) {
        rc = err->code;
        goto done;
    }
    kd_convert_real(x, B->dtype, q->x.data, q->x.dtype, (size_t)xn);
    if ((rc = kd_batch_spmv(server->ocl, B, x, y, err)) != KD_OK)
        goto done;
    for (int64_t i = 0; i < yn; i++) {
        double v = q->alpha * kd_load_real(y, B->dtype, (size_t)i);
        if (q->beta != 0.0)
            v += q->beta * kd_load_real(q->y.data, q->y.dtype, (size_t)i);
        kd_store_real(out, q->dtype, (size_t)i, v);
    }
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 5);
    kd_handlers_kv_vector(w, "y", &q->out, out, (size_t)yn * kd_dtype_size(q->dtype), 0);
    kd_w_kv_str(w, "dtype", kd_dtype_name(q->dtype));
    kd_w_kv_int(w, "ncols", 1);
    kd_w_kv_int(w, "batch", k);
    kd_w_kv_double(w, "time_ms", kd_batch_ms_since(t0));
done:
    free(x);
    free(y);
    free(out);
    return rc;
}

/* A number for every system: the array (k entries) or the scalar repeated. */
static int kd_batch_per_system(const kd_array_t *a, double scalar, int64_t k, const char *name,
                               double *out, kd_err_t *err)
{
    if (a->present && a->count != k)
        return kd_err_set(err, KD_EBADREQ, "%s has %lld entries but the batch has %lld systems",
                          name, (long long)a->count, (long long)k);
    for (int64_t s = 0; s < k; s++)
        out[s] = a->present ? kd_load_real(a->data, a->dtype, (size_t)s) : scalar;
    return KD_OK;
}

int kd_handlers_batch_choose(const char *method, const char *pre, int64_t restart,
                             kd_batch_params_t *prm, kd_err_t *err)
{
    method = method[0] != '\0' ? method : "cg";
    if (kd_batch_method_parse(method, &prm->method) != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "method %s does not run on a batch; batched solves take cg, bicgstab "
                          "or gmres",
                          method);
    if (pre[0] != '\0' && strcmp(pre, "none") != 0 && strcmp(pre, "jacobi") != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "preconditioner %s does not run on a batch; batched solves take jacobi "
                          "or none",
                          pre);
    prm->jacobi = strcmp(pre, "jacobi") == 0;
    prm->restart = restart; /* gmres's m; the decoder held it to 0..KD_RESTART_MAX */
    return KD_OK;
}

/* The method and preconditioner a batched solve takes: cg, bicgstab or gmres, jacobi or none. */
static int kd_batch_solve_choice(const kd_solve_request_t *q, kd_batch_params_t *prm, kd_err_t *err)
{
    int rc = kd_handlers_batch_choose(q->method, q->preconditioner, q->restart, prm, err);
    if (rc != KD_OK)
        return rc;
    if (q->noptions > 0)
        return kd_err_set(err, KD_EBADREQ, "preconditioner_options: none apply to a batch");
    if (q->nrhs != 1)
        return kd_err_set(err, KD_EBADREQ,
                          "nrhs = %lld: a batch takes one right-hand side per system",
                          (long long)q->nrhs);
    return KD_OK;
}

static void kd_batch_solve_reply(kd_writer_t *w, const kd_job_t *job, const kd_batch_t *B,
                                 const kd_batch_params_t *prm, const kd_batch_result_t *res,
                                 const kd_batch_report_t *rep, const void *xout, double ms)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    const int64_t k = B->count;
    int64_t converged = 0;
    for (int64_t s = 0; s < k; s++)
        converged += res[s].status == KD_SOLVE_CONVERGED;
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 15 + (q->history ? 1 : 0));
    kd_handlers_kv_vector(w, "x", &q->out, (void *)xout,
                          (size_t)(k * B->rows) * kd_dtype_size(q->dtype), 0);
    kd_w_kv_str(w, "dtype", kd_dtype_name(q->dtype));
    kd_w_kv_str(w, "method", kd_batch_method_name(prm->method));
    kd_w_kv_str(w, "preconditioner", prm->jacobi ? "jacobi" : "none");
    kd_w_kv_int(w, "batch", k);
    kd_w_kv_int(w, "converged", converged);
    const char *keys[] = {"status", "iterations", "residual_norm", "relative_residual", "message"};
    for (int f = 0; f < 5; f++) {
        kd_w_str(w, keys[f]);
        kd_w_array(w, (uint32_t)k);
        for (int64_t s = 0; s < k; s++) {
            if (f == 0)
                kd_w_str(w, kd_solve_status_name(res[s].status));
            else if (f == 1)
                kd_w_int(w, res[s].iterations);
            else if (f == 2)
                kd_w_double(w, res[s].residual_norm);
            else if (f == 3)
                kd_w_double(w, res[s].relative_residual);
            else
                kd_w_str(w, res[s].message);
        }
    }
    if (q->history) {
        kd_w_str(w, "history");
        kd_w_array(w, (uint32_t)k);
        for (int64_t s = 0; s < k; s++) {
            kd_w_array(w, (uint32_t)res[s].history_len);
            for (int64_t i = 0; i < res[s].history_len; i++)
                kd_w_double(w, res[s].history[i]);
        }
    }
    kd_w_kv_bool(w, "local_memory", rep->local);
    kd_w_kv_int(w, "launches", rep->launches);
    kd_w_kv_double(w, "solve_ms", rep->time_ms);
    kd_w_kv_double(w, "time_ms", ms);
}

static int kd_batch_solve_run(struct kd_server *server, kd_job_t *job, kd_writer_t *w,
                              kd_err_t *err)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    if (kd_batch_of(server, q->id) == 0)
        return kd_err_set(err, KD_EBADREQ,
                          "rtol, atol and maxiter are arrays only for a batched matrix (one per "
                          "system); give numbers for a single matrix");
    kd_batch_params_t prm;
    memset(&prm, 0, sizeof(prm));
    int rc = kd_batch_solve_choice(q, &prm, err);
    if (rc != KD_OK)
        return rc;
    kd_store_entry_t *entry;
    /* b, x and the method's work vectors beside the batch */
    const int64_t m = prm.restart > 0 ? prm.restart : KD_SOLVE_RESTART_DEFAULT;
    const int64_t vectors =
        2 + (prm.method == KD_BATCH_GMRES ? KD_BATCH_GMRES_VECTORS(m) : KD_BATCH_BICGSTAB_VECTORS);
    if ((rc = kd_batch_use(server, q->id, vectors, &entry, err)) != KD_OK)
        return rc;
    const kd_batch_t *B = entry->dev->batch;
    const int64_t k = B->count, n = k * B->rows;
    if (q->b.count != n)
        return kd_err_set(err, KD_EBADREQ,
                          "b has %lld values but batch %s needs %lld systems x %lld rows",
                          (long long)q->b.count, entry->meta.hex, (long long)k, (long long)B->rows);
    if (q->x0.present && q->x0.count != n)
        return kd_err_set(err, KD_EBADREQ, "x0 has %lld values but b has %lld",
                          (long long)q->x0.count, (long long)n);
    if ((rc = kd_handlers_check_out(&q->out, n, "x", &q->b, "b", &q->x0, "x0", err)) != KD_OK)
        return rc;
    const uint64_t t0 = kd_clock_ns();
    double *rtol = kd_malloc_array((size_t)k, sizeof(double));
    double *atol = kd_malloc_array((size_t)k, sizeof(double));
    int64_t *maxiter = kd_malloc_array((size_t)k, sizeof(int64_t));
    kd_batch_result_t *res = calloc((size_t)k, sizeof(*res));
    void *b = kd_batch_values(n, B->dtype, err), *x = kd_batch_values(n, B->dtype, err);
    void *x0 = q->x0.present ? kd_batch_values(n, B->dtype, err) : NULL;
    void *xout = kd_batch_values(n, q->dtype, err);
    if (rtol == NULL || atol == NULL || maxiter == NULL || res == NULL || b == NULL || x == NULL ||
        xout == NULL || (q->x0.present && x0 == NULL)) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for a batch of %lld", (long long)k);
        goto done;
    }
    if ((rc = kd_batch_per_system(&q->rtols, q->rtol, k, "rtol", rtol, err)) != KD_OK ||
        (rc = kd_batch_per_system(&q->atols, q->atol, k, "atol", atol, err)) != KD_OK)
        goto done;
    if (q->maxiters.present && q->maxiters.count != k) {
        rc = kd_err_set(err, KD_EBADREQ, "maxiter has %lld entries but the batch has %lld systems",
                        (long long)q->maxiters.count, (long long)k);
        goto done;
    }
    for (int64_t s = 0; s < k; s++)
        maxiter[s] = q->maxiters.present ? kd_load_i64(q->maxiters.data, (size_t)s)
                     : q->maxiter >= 0   ? q->maxiter
                                         : KD_SOLVE_MAXITER_PER_ROW * B->rows;
    if (q->history &&
        (rc = kd_batch_reserve_history(server, entry, vectors, maxiter, err)) != KD_OK)
        goto done;
    prm.rtol = rtol;
    prm.atol = atol;
    prm.maxiter = maxiter;
    prm.record_history = q->history;
    prm.cancel = &job->cancel;
    prm.deadline_ns = job->deadline_ns;
    kd_convert_real(b, B->dtype, q->b.data, q->b.dtype, (size_t)n);
    if (x0 != NULL)
        kd_convert_real(x0, B->dtype, q->x0.data, q->x0.dtype, (size_t)n);
    kd_batch_report_t rep;
    if ((rc = kd_batch_solve(server->ocl, B, b, x0, x, &prm, res, &rep, err)) != KD_OK)
        goto done;
    kd_convert_real(xout, q->dtype, x, B->dtype, (size_t)n);
    kd_batch_solve_reply(w, job, B, &prm, res, &rep, xout, kd_batch_ms_since(t0));
done:
    for (int64_t s = 0; res != NULL && s < k; s++)
        kd_batch_result_free(&res[s]);
    free(res);
    free(rtol);
    free(atol);
    free(maxiter);
    free(b);
    free(x);
    free(x0);
    free(xout);
    return rc;
}

int kd_handlers_batch_run(struct kd_server *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    switch (job->req->method) {
    case KD_METHOD_MATRIX_PUT:
        return kd_batch_put(server, job, w, err);
    case KD_METHOD_SPMV:
        return kd_batch_spmv_run(server, job, w, err);
    case KD_METHOD_SOLVE:
        return kd_batch_solve_run(server, job, w, err);
    case KD_METHOD_SOLVE_BATCH:
        return kd_handlers_solve_items(server, job, w, err); /* server/handlers/batch_many.c */
    case KD_METHOD_MATRIX_MULTIPLY:
        return kd_err_set(err, KD_EBADREQ,
                          "matrix.multiply does not take a batched matrix (each system is its own "
                          "matrix; multiply them one at a time)");
    default:
        return kd_err_set(err, KD_EINTERNAL, "%s reached the batch handlers",
                          kd_method_name(job->req->method));
    }
}
