/*
 * matrix.put, matrix.drop, matrix.pin and matrix.share on the device worker (put with like is
 * like.c's; matrix.info and matrix.list are answered on the loop thread, dispatch/dispatch.c).
 * Each checks what needs the store and leaves an encoded response in the job; a new matrix is kept
 * through keep.c.
 */
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "protocol/mtx.h"
#include "protocol/writer.h"
#include "server/handlers/batch.h"
#include "server/handlers/handlers.h"
#include "server/store/quota.h"
#include "server/store/state.h"
#include "server/handlers/replies.h"
#include "server/handlers/spmv.h"
#include "server/handlers/spread.h"
#include "solver/runtime/pool.h"
#include "server/server.h"
#include "solver/formats/select.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kd_handle_put(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_put_request_t *p = &job->req->u.put;
    const uint64_t t0 = kd_clock_ns();
    kd_csr_t *csr = NULL;
    int rc;
    if (p->kind == KD_PUT_LIKE)
        return kd_handle_put_like(server, job, w, err);
    /* a matrix may be spread over every rank's budget (kd_spread_wanted decides once built) */
    kd_csr_limits_t limits = server->csr_limits;
    limits.max_device_bytes =
        kd_sat_mad(0, kd_spread_ranks(server), server->csr_limits.max_device_bytes);
    switch (p->kind) {
    case KD_PUT_CSR:
        rc = kd_csr_from_csr_arrays(p->rows, p->cols, p->indices.count, p->indptr.data,
                                    p->indptr.dtype, p->indices.data, p->indices.dtype,
                                    p->values.data, p->values.dtype, p->dtype, &limits, &csr, err);
        break;
    case KD_PUT_COO:
        rc = kd_csr_from_coo_arrays(p->rows, p->cols, p->row.count, p->row.data, p->col.data,
                                    p->row.dtype, p->values.data, p->values.dtype, p->dtype,
                                    &limits, &csr, err);
        break;
    default:
        rc = kd_mtx_read_matrix(p->mtx, p->mtx_len, p->dtype, &limits, &csr, err);
        if (rc != KD_OK)
            kd_err_prefix(err, "mtx");
        break;
    }
    if (rc != KD_OK)
        return rc;
    kd_matrix_meta_t meta;
    int created;
    rc = kd_handlers_admit(server, job, csr, &p->options, &meta, &created, err); /* takes csr */
    if (rc != KD_OK)
        return rc;
    if (created)
        KD_INFO("store",
                "put id=%s rows=%lld cols=%lld nnz=%lld dtype=%s format=%s reorder=%s "
                "device_bytes=%zu ms=%.1f",
                meta.hex, (long long)meta.rows, (long long)meta.cols, (long long)meta.nnz,
                kd_dtype_name(meta.dtype), kd_format_name(meta.format),
                kd_reorder_name(meta.reorder), meta.device_bytes,
                (double)(kd_clock_ns() - t0) / 1e6);
    char notice[256];
    const int noted = kd_handlers_notice(&p->options, &meta, created, notice, sizeof(notice));
    kd_w_result_begin(w, job->msgid);
    kd_reply_meta_extra(w, &meta, created, noted ? 2 : 1);
    if (noted)
        kd_w_kv_str(w, "notice", notice);
    kd_w_kv_double(w, "time_ms", kd_clock_ms_since(job->submitted_ns));
    return KD_OK;
}

int kd_handle_drop(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    /* An admin drops its own reference to a matrix it holds, and every reference to one it does
     * not (the data goes). */
    kd_store_entry_t *entry = kd_store_find(server->store, job->req->u.id.id);
    const int owner = entry != NULL && kd_meta_owner(&entry->meta, job->user) >= 0;
    int rc = kd_cache_drop(server, job->req->u.id.id, owner ? job->user : NULL, err);
    if (rc != KD_OK)
        return rc;
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 1);
    kd_w_kv_bool(w, "dropped", 1);
    return KD_OK;
}

int kd_handle_pin(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    kd_store_entry_t *entry = kd_store_lookup(server->store, job->req->u.id.id);
    if (entry == NULL)
        return kd_handlers_not_found(err, job->req->u.id.id);
    /* An admin that holds no reference pins or unpins every owner's. */
    const int owner = kd_meta_owner(&entry->meta, job->user) >= 0;
    int rc = kd_cache_set_pinned(server, entry, owner ? job->user : NULL, job->req->u.id.pinned,
                                 NULL, err);
    if (rc != KD_OK)
        return rc;
    kd_matrix_meta_t copy;
    kd_store_get_meta(server->store, entry->meta.id, &copy);
    kd_meta_view(&copy, job->user, kd_server_meta_scope(server, job->admin));
    kd_w_result_begin(w, job->msgid);
    kd_reply_meta(w, &copy, -1);
    return KD_OK;
}

/* matrix.share (admin): user gets its own, unpinned reference (kept if it has one). */
int kd_handle_share(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_id_request_t *q = &job->req->u.id;
    kd_store_entry_t *entry = kd_store_find(server->store, q->id);
    if (entry == NULL)
        return kd_handlers_not_found(err, q->id);
    const int i = kd_meta_owner(&entry->meta, q->user);
    const int created = i < 0;
    if (created) {
        int rc = kd_cache_set_pinned(server, entry, q->user, 0, NULL, err);
        if (rc != KD_OK)
            return rc;
        KD_INFO("store", "share id=%s user=%s by=%s", entry->meta.hex, q->user, job->user);
    }
    kd_w_result_begin(w, job->msgid);
    kd_w_map(w, 3);
    kd_w_kv_str(w, "id", entry->meta.hex);
    kd_w_kv_str(w, "user", q->user);
    kd_w_kv_bool(w, "created", created);
    return KD_OK;
}
