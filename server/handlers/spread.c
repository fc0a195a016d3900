/*
 * Spread matrices on the serving rank (see spread.h).
 */
#include "server/handlers/spread.h"
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "server/handlers/handlers.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"

#ifdef KD_MPI
#include "dist/follow.h"
#endif

#include <stdlib.h>
#include <string.h>

int kd_spread_ranks(const kd_server_t *server)
{
#ifdef KD_MPI
    if (server->dist != NULL)
        return server->dist->comm.size;
#else
    (void)server;
#endif
    return 1;
}

int kd_spread_wanted(const kd_server_t *server, const kd_csr_t *csr, const kd_matrix_options_t *opt,
                     int *spread, kd_err_t *err)
{
    *spread = 0;
    if (opt->distribute == KD_DISTRIBUTE_NO)
        return KD_OK;
    const int square = csr->rows == csr->cols;
    if (opt->distribute == KD_DISTRIBUTE_YES && !square)
        return kd_err_set(err, KD_EBADREQ,
                          "distribute = true needs a square matrix (its rows are cut into blocks "
                          "with the columns numbered alike); this one is %lld x %lld",
                          (long long)csr->rows, (long long)csr->cols);
    if (kd_spread_ranks(server) < 2 || !square)
        return KD_OK;
    *spread = opt->distribute == KD_DISTRIBUTE_YES || csr->nnz > server->cfg.distribute_nnz;
    return KD_OK;
}

#ifdef KD_MPI

/* The spread's fields of meta from rank 0's part and every rank's sizes. */
static void kd_spread_describe(kd_matrix_meta_t *meta, const kd_dist_matrix_t *m,
                               const kd_dist_rank_info_t *info, int ranks)
{
    meta->format = m->diag->format;
    meta->device_bytes = (size_t)info[0].device_bytes;
    kd_matrix_describe(m->diag, &meta->detail);
    meta->symmetric = m->block.summary.symmetric;
    meta->distributed = 1;
    meta->ranks = ranks;
    for (int r = 0; r < ranks && r < KD_META_RANKS_MAX; r++) {
        meta->rank_rows[r] = info[r].rows;
        meta->rank_nnz[r] = info[r].nnz;
        meta->rank_ghosts[r] = info[r].ghosts;
        meta->rank_sends[r] = info[r].sends;
    }
}

static int kd_spread_put(kd_server_t *server, const uint8_t id[16], const kd_csr_t *csr,
                         const char *format, kd_select_mode_t mode, kd_dist_matrix_t **m,
                         kd_dist_rank_info_t **info, kd_err_t *err)
{
    const int ranks = kd_spread_ranks(server);
    *info = calloc((size_t)ranks, sizeof(**info));
    if (*info == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    const uint64_t t0 = kd_clock_ns();
    int rc = kd_dist_put(server->dist, id, csr, format, mode, m, *info, err);
    if (rc != KD_OK)
        return kd_err_prefix(err, "spreading the matrix over %d ranks", ranks);
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    KD_INFO("dist", "spread id=%s ranks=%d rank0_rows=%lld ghosts=%lld format=%s ms=%.1f", hex,
            ranks, (long long)(*info)[0].rows, (long long)(*info)[0].ghosts,
            kd_format_name((*m)->diag->format), (double)(kd_clock_ns() - t0) / 1e6);
    return KD_OK;
}

int kd_spread_upload(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                     const char *format, kd_select_mode_t mode, const kd_matrix_options_t *opt,
                     kd_err_t *err)
{
    kd_matrix_meta_t *meta = &entry->meta;
    kd_dist_matrix_t *m = NULL;
    kd_dist_rank_info_t *info = NULL;
    int rc = kd_spread_put(server, meta->id, csr, format, mode, &m, &info, err);
    if (rc == KD_OK) {
        snprintf(meta->name, sizeof(meta->name), "%s", opt->name);
        meta->rows = csr->rows;
        meta->cols = csr->cols;
        meta->nnz = csr->nnz;
        meta->dtype = csr->dtype;
        meta->pinned = opt->pin == 1;
        meta->reorder = KD_REORDER_NONE;
        snprintf(meta->reorder_reason, sizeof(meta->reorder_reason),
                 "spread over ranks: each rank keeps its rows in order");
        kd_csr_compute_stats(csr, &meta->stats);
        kd_spread_describe(meta, m, info, kd_spread_ranks(server));
        entry->dist = m;
    }
    free(info);
    return rc;
}

void kd_spread_forget(kd_server_t *server, const uint8_t id[16])
{
    if (server->dist != NULL)
        kd_dist_drop(server->dist, id);
}

void kd_spread_discard(kd_server_t *server, kd_store_entry_t *entry)
{
    if (entry->dist == NULL)
        return;
    kd_spread_forget(server, entry->meta.id);
    kd_dist_matrix_free(entry->dist);
    entry->dist = NULL;
}

int kd_spread_again(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                    kd_err_t *err)
{
    kd_dist_matrix_t *m = NULL;
    kd_dist_rank_info_t *info = NULL;
    int rc = kd_spread_put(server, entry->meta.id, csr, NULL, KD_SELECT_HEURISTIC, &m, &info, err);
    if (rc == KD_OK) {
        kd_matrix_meta_t spread = entry->meta;
        kd_spread_describe(&spread, m, info, kd_spread_ranks(server));
        kd_store_set_spread(server->store, entry, m, &spread);
    }
    free(info);
    return rc;
}

int kd_spread_spmv(kd_server_t *server, kd_store_entry_t *entry, const kd_spmv_request_t *q,
                   void **out, kd_err_t *err)
{
    const kd_dtype_t dt = entry->meta.dtype;
    const int64_t count = q->x.count; /* rows * ncols: the matrix is square */
    void *x = kd_handlers_alloc_values(count, dt, err);
    void *y = x != NULL ? kd_handlers_alloc_values(count, dt, err) : NULL;
    int rc = y != NULL ? KD_OK : err->code;
    if (rc == KD_OK) {
        kd_convert_real(x, dt, q->x.data, q->x.dtype, (size_t)count);
        if (q->beta != 0.0)
            kd_convert_real(y, dt, q->y.data, q->y.dtype, (size_t)count);
        rc = kd_dist_spmv(server->dist, entry->meta.id, entry->dist, q->ncols, q->alpha, x, q->beta,
                          y, err);
    }
    if (rc == KD_OK && (*out = kd_handlers_alloc_values(count, q->dtype, err)) == NULL)
        rc = err->code;
    if (rc == KD_OK)
        kd_convert_real(*out, q->dtype, y, dt, (size_t)count);
    free(x);
    free(y);
    return rc;
}

/* The method and preconditioner of a spread solve, refused with what does run spread. */
static int kd_spread_method(const kd_solve_request_t *q, kd_solve_params_t *params, kd_err_t *err)
{
    if (strcmp(q->method, KD_METHOD_AUTO) == 0)
        return kd_err_set(err, KD_EBADREQ,
                          "method auto does not run on a matrix spread over ranks: name cg, pcg "
                          "(cg with jacobi) or sd");
    int rc = kd_method_choose(q->method, q->preconditioner, &params->method, &params->precond, err);
    if (rc != KD_OK)
        return rc;
    if (!params->method->spreads)
        return kd_err_set(err, KD_EBADREQ,
                          "method %s does not run on a matrix spread over ranks: cg, pcg (cg "
                          "with jacobi) and sd do",
                          params->method->name);
    if (strcmp(params->precond->name, "none") != 0 && strcmp(params->precond->name, "jacobi") != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "preconditioner %s does not run on a matrix spread over ranks: none "
                          "and jacobi do",
                          params->precond->name);
    if (q->noptions > 0)
        return kd_err_set(err, KD_EBADREQ,
                          "preconditioner_options are not taken on a matrix spread over ranks");
    return KD_OK;
}

int kd_spread_solve(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                    kd_solve_progress_fn progress, void *ctx, kd_spread_reply_fn reply,
                    kd_writer_t *w, kd_err_t *err)
{
    const kd_solve_request_t *q = &job->req->u.solve;
    kd_solve_params_t params;
    kd_solve_params_default(&params);
    int rc = kd_spread_method(q, &params, err);
    if (rc != KD_OK)
        return rc;
    const kd_dtype_t dt = entry->meta.dtype;
    const int64_t count = q->b.count, nrhs = q->nrhs;
    void *b = kd_handlers_alloc_values(count, dt, err);
    void *x0 = q->x0.present && b != NULL ? kd_handlers_alloc_values(count, dt, err) : NULL;
    void *x = b != NULL ? kd_handlers_alloc_values(count, dt, err) : NULL;
    void *xout = x != NULL ? kd_handlers_alloc_values(count, q->dtype, err) : NULL;
    kd_solve_result_t *results = calloc((size_t)nrhs, sizeof(*results));
    if (xout == NULL || results == NULL || (q->x0.present && x0 == NULL)) {
        rc = err->code != KD_OK ? err->code : kd_err_set(err, KD_ENOMEM, "out of host memory");
        goto done;
    }
    kd_convert_real(b, dt, q->b.data, q->b.dtype, (size_t)count);
    if (x0 != NULL)
        kd_convert_real(x0, dt, q->x0.data, q->x0.dtype, (size_t)count);
    kd_dist_solve_args_t args = {
        .method = params.method->name,
        .preconditioner = params.precond->name,
        .rtol = q->rtol,
        .atol = q->atol,
        .maxiter = q->maxiter >= 0 ? q->maxiter : KD_SOLVE_MAXITER_AUTO,
        .check_every = q->check_every,
        .restart = q->restart,
        .history = q->history,
        .cancel = &job->cancel,
        .progress = progress,
        .progress_ctx = ctx,
    };
    if (job->deadline_ns != 0) { /* each rank counts the time left on its own clock */
        const uint64_t now = kd_clock_ns();
        args.timeout_ms =
            job->deadline_ns > now ? (int64_t)((job->deadline_ns - now + 999999u) / 1000000u) : 1;
    }
    const uint64_t t0 = kd_clock_ns();
    rc = kd_dist_solve_cmd(server->dist, entry->meta.id, entry->dist, nrhs, b, x0, x, &args,
                           results, err);
    if (rc != KD_OK)
        goto done;
    kd_convert_real(xout, q->dtype, x, dt, (size_t)count);
    reply(w, job, &params, results, xout, t0, (double)(kd_clock_ns() - t0) / 1e6, NULL);
done:
    if (results != NULL)
        for (int64_t j = 0; j < nrhs; j++)
            kd_solve_result_free(&results[j]);
    free(results);
    free(b);
    free(x0);
    free(x);
    free(xout);
    return rc;
}

#else /* one process: nothing is ever spread */

int kd_spread_upload(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                     const char *format, kd_select_mode_t mode, const kd_matrix_options_t *opt,
                     kd_err_t *err)
{
    (void)server, (void)entry, (void)csr, (void)format, (void)mode, (void)opt;
    return kd_err_set(err, KD_EINTERNAL, "spreading a matrix in a build without MPI");
}

void kd_spread_forget(kd_server_t *server, const uint8_t id[16])
{
    (void)server, (void)id;
}

void kd_spread_discard(kd_server_t *server, kd_store_entry_t *entry)
{
    (void)server, (void)entry;
}

int kd_spread_again(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                    kd_err_t *err)
{
    (void)server, (void)entry, (void)csr;
    return kd_err_set(err, KD_EINTERNAL, "spreading a matrix in a build without MPI");
}

int kd_spread_spmv(kd_server_t *server, kd_store_entry_t *entry, const kd_spmv_request_t *q,
                   void **out, kd_err_t *err)
{
    (void)server, (void)entry, (void)q, (void)out;
    return kd_err_set(err, KD_EINTERNAL, "a spread matrix in a build without MPI");
}

int kd_spread_solve(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                    kd_solve_progress_fn progress, void *ctx, kd_spread_reply_fn reply,
                    kd_writer_t *w, kd_err_t *err)
{
    (void)server, (void)entry, (void)job, (void)progress, (void)ctx, (void)reply, (void)w;
    return kd_err_set(err, KD_EINTERNAL, "a spread matrix in a build without MPI");
}

#endif
