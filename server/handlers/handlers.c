/*
 * Job handlers: what put, drop, pin, spmv and solve do, on the device worker thread (multiply.c
 * has matrix.multiply, which keeps its product through kd_handlers_admit as put does). Each checks
 * what needs the store (the id exists, vector lengths match the matrix), calls the solver, and
 * leaves an encoded response in the job. Host buffers for vectors are converted between the
 * request's dtype and the matrix's here, so the solver only sees its own type.
 *
 * Matrices come through the cache (cache.c): kd_cache_use() makes one resident (reloading it from
 * the state directory if it was evicted) with room in the device budget for the request's
 * vectors, and kd_cache_admit() persists and registers a new one. When the driver itself refuses
 * an allocation, kd_handlers_run() evicts the other unpinned matrices and runs the job once more.
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

static int kd_not_found(kd_err_t *err, const uint8_t id[16])
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    return kd_err_set(err, KD_ENOTFOUND, "no matrix %s on this server", hex);
}

void *kd_handlers_alloc_values(int64_t n, kd_dtype_t dtype, kd_err_t *err)
{
    size_t bytes;
    if (n < 0 || kd_mul_overflow((size_t)n, kd_dtype_size(dtype), &bytes)) {
        kd_err_set(err, KD_ETOOLARGE, "vector of %lld values is too large", (long long)n);
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL)
        kd_err_set(err, KD_ENOMEM, "out of host memory for a vector of %lld values", (long long)n);
    return p;
}

/* Room in the device budget for a new matrix, estimated from its CSR arrays (the format's real
 * size is checked again by kd_cache_admit after upload). */
static int kd_handlers_make_room(kd_server_t *server, const kd_csr_t *csr, const char *hex,
                                 kd_err_t *err)
{
    char what[160];
    snprintf(what, sizeof(what), "matrix %s (%lld x %lld, %lld nonzeros, %s)", hex,
             (long long)csr->rows, (long long)csr->cols, (long long)csr->nnz,
             kd_dtype_name(csr->dtype));
    return kd_cache_reserve(server, kd_cache_estimate(csr->rows, csr->nnz, csr->dtype), NULL, what,
                            err);
}

size_t kd_handlers_vector_bytes(kd_server_t *server, const uint8_t id[16], int64_t per_row,
                                int64_t per_col)
{
    /* The worker writes every entry, so it reads one in place: no copy of the metadata (6 KB)
     * on every request's path. */
    const kd_store_entry_t *e = kd_store_find(server->store, id);
    if (e == NULL)
        return 0;
    const kd_matrix_meta_t *meta = &e->meta;
    /* a spread matrix's device vectors here hold rank 0's rows (its columns too: it is square) */
    const int64_t rows = meta->ranks > 1 ? meta->rank_rows[0] : meta->rows;
    const int64_t cols = meta->ranks > 1 ? meta->rank_rows[0] : meta->cols;
    int64_t a, b, n;
    size_t bytes;
    if (kd_mul_overflow_i64(per_row, rows, &a) || kd_mul_overflow_i64(per_col, cols, &b) ||
        kd_add_overflow_i64(a, b, &n) || n < 0 ||
        kd_mul_overflow((size_t)n, kd_dtype_size(meta->dtype), &bytes))
        return SIZE_MAX;
    return bytes;
}

/* A new entry's metadata from the uploaded matrix and what the selection found. */
static void kd_handlers_describe(kd_matrix_meta_t *meta, const kd_csr_t *csr,
                                 const kd_matrix_t *dev, const kd_select_result_t *sel,
                                 const kd_matrix_options_t *opt)
{
    snprintf(meta->name, sizeof(meta->name), "%s", opt->name);
    meta->rows = csr->rows;
    meta->cols = csr->cols;
    meta->nnz = csr->nnz;
    meta->dtype = csr->dtype;
    meta->format = dev->format;
    meta->device_bytes = dev->device_bytes;
    kd_matrix_describe(dev, &meta->detail);
    meta->pinned = opt->pin == 1;
    meta->stats = sel->stats; /* the selection's, with the scan's count of non-finite values */
    meta->ncandidates = sel->ncandidates;
    for (int i = 0; i < sel->ncandidates; i++) {
        meta->candidates[i].format = sel->candidates[i].format;
        meta->candidates[i].time_ms = sel->candidates[i].time_ms;
        snprintf(meta->candidates[i].dropped, sizeof(meta->candidates[i].dropped), "%s",
                 sel->candidates[i].dropped);
    }
    meta->reorder = sel->reorder;
    meta->symmetric = dev->scan.symmetric; /* P A P^T is symmetric exactly when A is */
    meta->bandwidth_before = sel->before.bandwidth;
    meta->bandwidth_after = sel->after.bandwidth;
    snprintf(meta->reorder_reason, sizeof(meta->reorder_reason), "%s", sel->reorder_reason);
}

/* The name the job's put gives its matrix ("" when none). */
static const char *kd_handlers_label(const kd_job_t *job)
{
    if (job->req->method == KD_METHOD_MATRIX_MULTIPLY)
        return job->req->u.multiply.options.name;
    if (job->req->method == KD_METHOD_MATRIX_PUT)
        return job->req->u.put.options.name;
    return "";
}

/* Content another user holds becomes user's as a put of new content would leave it: resident,
 * under the name user gave, counted against user's quotas; or it stays user's own (nothing
 * changes but a pin asked for, and a use counted). */
static int kd_handlers_keep_held(kd_server_t *server, const kd_job_t *job,
                                 kd_store_entry_t *existing, int pin, const kd_usage_t *use,
                                 int *created, kd_err_t *err)
{
    const char *user = job->user;
    const int owned = kd_meta_owner(&existing->meta, user) >= 0;
    int rc;
    *created = !owned;
    if (owned) {
        kd_store_note_use(server->store, existing->meta.id, user);
        return pin == 1 ? kd_cache_set_pinned(server, existing, user, 1, NULL, err) : KD_OK;
    }
    if ((rc = kd_quota_check_matrix(&job->quota, user, use, existing->meta.device_bytes,
                                    existing->meta.file_bytes, err)) != KD_OK)
        return rc;
    if (existing->dev == NULL && existing->dist == NULL) {
        kd_store_entry_t *loaded;
        if ((rc = kd_cache_use(server, existing->meta.id, 0, &loaded, err)) != KD_OK)
            return rc;
    }
    return kd_cache_set_pinned(server, existing, user, pin == 1, kd_handlers_label(job), err);
}

int kd_handlers_keep(kd_server_t *server, const kd_job_t *job, kd_csr_t *csr, const uint8_t id[16],
                     int pin, kd_handlers_upload_fn upload, void *arg, kd_matrix_meta_t *out,
                     int *created, kd_err_t *err)
{
    int rc;
    *created = 0;
    kd_store_entry_t *entry = calloc(1, sizeof(*entry));
    if (entry == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory");
        goto fail;
    }
    kd_matrix_meta_t *meta = &entry->meta;
    memcpy(meta->id, id, sizeof(meta->id));
    const char *user = job->user;
    const char *tenant = kd_server_tenant(server, user);
    if (tenant != NULL) { /* --tenant-dedupe off: the user's own copy, under its own id */
        kd_id_mix_tenant(meta->id, tenant);
        snprintf(meta->tenant, sizeof(meta->tenant), "%s", tenant);
    }
    const kd_meta_scope_t scope = kd_server_meta_scope(server, job->admin);
    kd_usage_t use;
    kd_store_usage(server->store, user, &use);
    kd_store_entry_t *existing = kd_store_lookup(server->store, meta->id);
    if (existing != NULL) {
        if ((rc = kd_handlers_keep_held(server, job, existing, pin, &use, created, err)) != KD_OK)
            goto fail;
        kd_store_get_meta(server->store, meta->id, out);
        kd_meta_view(out, user, scope);
        free(entry);
        kd_csr_free(csr);
        return KD_OK;
    }
    kd_id_to_hex(meta->id, meta->hex);
    /* The count and the least the matrix can take on the device (its CSR arrays, spread over
     * the ranks at best) first, before the device does any work; the sizes once they are known. */
    const size_t least =
        kd_csr_bytes(csr->rows, csr->nnz, csr->dtype) / (size_t)kd_spread_ranks(server);
    if ((rc = kd_quota_check_matrix(&job->quota, user, &use, least, 0, err)) != KD_OK ||
        (rc = upload(server, entry, csr, arg, err)) != KD_OK)
        goto fail;
    if (meta->alone_bytes == 0) /* (new values on a held pattern set it: they share arrays) */
        meta->alone_bytes = meta->device_bytes;
    size_t file_bytes = 0;
    if (server->state != NULL &&
        (rc = kd_state_file_size(meta->rows, meta->nnz, meta->dtype, &file_bytes, err)) != KD_OK)
        goto fail;
    if ((rc = kd_quota_check_matrix(&job->quota, user, &use, meta->device_bytes, file_bytes,
                                    err)) != KD_OK)
        goto fail;
    meta->nowners = 1;
    snprintf(meta->owners[0].name, sizeof(meta->owners[0].name), "%s", user);
    snprintf(meta->owners[0].label, sizeof(meta->owners[0].label), "%s", kd_handlers_label(job));
    meta->owners[0].pinned = meta->pinned;
    meta->owners[0].added_ns = kd_clock_ns();
    kd_matrix_meta_t copy = *meta;
    rc = kd_cache_admit(server, entry, csr, err); /* persists; takes entry and csr */
    if (rc != KD_OK)
        return rc;
    kd_store_get_meta(server->store, copy.id, out);
    kd_meta_view(out, user, scope);
    *created = 1;
    return KD_OK;
fail:
    if (entry != NULL) {
        kd_matrix_free(entry->dev);
        kd_spread_discard(server, entry);
    }
    free(entry);
    kd_csr_free(csr);
    return rc;
}

/* kd_handlers_admit's upload: spread over the ranks, or in the format the selection picks (or
 * opt->format forces, or the server's default). */
int kd_handlers_upload(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr, void *arg,
                       kd_err_t *err)
{
    const kd_matrix_options_t *opt = arg;
    /* A forced format is built as named; otherwise the formats are measured (or chosen from the
     * row statistics with select = "heuristic", the only other value the decoder lets through). */
    const char *forced = opt->format[0] != '\0' ? opt->format : server->cfg.default_format;
    kd_select_mode_t mode = KD_SELECT_MEASURE;
    (void)kd_select_mode_parse(opt->select, &mode);
    int spread;
    int rc = kd_spread_wanted(server, csr, opt, &spread, err);
    if (rc != KD_OK)
        return rc;
    if (spread) /* over the ranks; kd_cache_admit checks rank 0's part against the budget */
        return kd_spread_upload(server, entry, csr, forced, mode, opt, err);
    if ((rc = kd_handlers_make_room(server, csr, entry->meta.hex, err)) != KD_OK)
        return rc;
    kd_select_result_t sel;
    rc = kd_select_upload_reordered(server->ocl, csr, forced, mode, opt->reorder, &entry->dev, &sel,
                                    err);
    if (rc == KD_OK)
        kd_handlers_describe(&entry->meta, csr, entry->dev, &sel, opt);
    return rc;
}

int kd_handlers_admit(kd_server_t *server, const kd_job_t *job, kd_csr_t *csr,
                      const kd_matrix_options_t *opt, kd_matrix_meta_t *out, int *created,
                      kd_err_t *err)
{
    uint8_t id[16];
    if (kd_csr_hash(csr, id) != KD_OK) {
        kd_csr_free(csr);
        return kd_err_set(err, KD_ENOMEM, "out of host memory hashing the matrix");
    }
    return kd_handlers_keep(server, job, csr, id, opt->pin, kd_handlers_upload, (void *)opt, out,
                            created, err);
}

int kd_handlers_notice(const kd_matrix_options_t *opt, const kd_matrix_meta_t *meta, int created,
                       char *out, size_t cap)
{
    kd_format_t forced;
    const int format = !created && opt->format[0] != '\0' &&
                       kd_format_parse(opt->format, &forced) == 0 && forced != meta->format;
    const int reorder =
        !created && opt->reorder != KD_REORDER_AUTO && opt->reorder != meta->reorder;
    if (!format && !reorder)
        return 0;
    snprintf(out, cap,
             "matrix %s was already held (as %s, reorder %s): the %s%s%s asked for %s not "
             "applied; drop it and put it again to store it that way",
             meta->hex, kd_format_name(meta->format), kd_reorder_name(meta->reorder),
             format ? "format " : "", format ? opt->format : "",
             format && reorder ? " and the reordering"
             : reorder         ? "reordering"
                               : "",
             format && reorder ? "were" : "was");
    return 1;
}

static int kd_handle_put(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
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

static int kd_handle_drop(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
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

static int kd_handle_pin(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    kd_store_entry_t *entry = kd_store_lookup(server->store, job->req->u.id.id);
    if (entry == NULL)
        return kd_not_found(err, job->req->u.id.id);
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
static int kd_handle_share(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_id_request_t *q = &job->req->u.id;
    kd_store_entry_t *entry = kd_store_find(server->store, q->id);
    if (entry == NULL)
        return kd_not_found(err, q->id);
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

/* The matrix a job names, when it names one (matrix.multiply checks its operands itself). */
static const uint8_t *kd_handlers_target(const kd_job_t *job)
{
    switch (job->req->method) {
    case KD_METHOD_SPMV:
        return job->req->u.spmv.id;
    case KD_METHOD_SOLVE:
        return job->req->u.solve.id;
    case KD_METHOD_MATRIX_PIN:
    case KD_METHOD_MATRIX_DROP:
    case KD_METHOD_MATRIX_SHARE:
        return job->req->u.id.id;
    default:
        return NULL;
    }
}

/* Another user's matrix is not there for this one: the same code and message as an id that does
 * not exist, before anything else could tell them apart. */
static int kd_handlers_visible(kd_server_t *server, const kd_job_t *job, kd_err_t *err)
{
    const uint8_t *target = kd_handlers_target(job);
    if (target != NULL) {
        const kd_store_entry_t *e = kd_store_find(server->store, target); /* worker: in place */
        if (e == NULL || !kd_meta_visible(&e->meta, job->user, job->admin))
            return kd_not_found(err, target);
    }
    return KD_OK;
}

int kd_handlers_precheck(kd_server_t *server, const kd_job_t *job, kd_err_t *err)
{
    int stop = atomic_load(&job->cancel);
    if (stop != 0)
        return kd_err_set(err, stop, "cancelled before it started");
    if (job->deadline_ns != 0 && kd_clock_ns() > job->deadline_ns)
        return kd_err_set(err, KD_ETIMEOUT, "timeout_ms = %lld passed while the request waited",
                          (long long)job->req->timeout_ms);
    return kd_handlers_visible(server, job, err);
}

static int kd_handlers_dispatch(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    int rc = kd_handlers_visible(server, job, err);
    if (rc != KD_OK)
        return rc;
    if (kd_handlers_batch_claims(server, job))
        return kd_handlers_batch_run(server, job, w, err); /* server/handlers/batch.c */
    switch (job->req->method) {
    case KD_METHOD_MATRIX_PUT:
        rc = kd_handle_put(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_DROP:
        rc = kd_handle_drop(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_PIN:
        rc = kd_handle_pin(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_MULTIPLY:
        rc = kd_handle_multiply(server, job, w, err);
        break;
    case KD_METHOD_MATRIX_SHARE:
        rc = kd_handle_share(server, job, w, err);
        break;
    case KD_METHOD_SPMV:
        rc = kd_handle_spmv(server, job, w, err);
        break;
    case KD_METHOD_SOLVE:
        rc = kd_handle_solve(server, job, w, err);
        break;
    default:
        rc = kd_err_set(err, KD_EINTERNAL, "method %s reached the worker",
                        kd_method_name(job->req->method));
        break;
    }
    return rc;
}

/* The driver refused an allocation (not the budget): evict every other unpinned matrix and say
 * whether running the job again can help. */
static int kd_handlers_evict_for_retry(kd_server_t *server, kd_job_t *job, const kd_err_t *err)
{
    const uint8_t *id = NULL;
    if (job->req->method == KD_METHOD_SPMV)
        id = job->req->u.spmv.id;
    else if (job->req->method == KD_METHOD_SOLVE)
        id = job->req->u.solve.id;
    else if (job->req->method == KD_METHOD_MATRIX_PIN)
        id = job->req->u.id.id;
    kd_store_entry_t *keep = id != NULL ? kd_store_find(server->store, id) : NULL;
    kd_pool_clear(server->pool); /* pooled vectors first: they are the cheapest to give up */
    size_t evicted = kd_cache_evict_all(server, keep);
    KD_WARN("handlers", "msgid=%llu: the device refused an allocation (%s); evicted %zu matrices%s",
            (unsigned long long)job->msgid, err->message, evicted,
            evicted > 0 ? ", retrying once" : "");
    if (evicted > 0)
        kd_store_count(server->store, KD_STORE_DEVMEM_RETRIES);
    return evicted > 0;
}

void kd_handlers_respond(kd_server_t *server, kd_job_t *job, int rc, kd_writer_t *w, kd_err_t *err)
{
    const kd_method_t method = job->req->method;
    /* The user's own `uses`, which only a non-admin under an auth file is shown (kd_meta_view):
     * without one, no second search of the store on every request's answer. */
    const int per_user = rc == KD_OK && server->cfg.auth_file[0] != '\0';
    if (per_user &&
        (method == KD_METHOD_SPMV || method == KD_METHOD_SOLVE || method == KD_METHOD_MATRIX_PIN))
        kd_store_note_use(server->store, kd_handlers_target(job), job->user);
    if (per_user && method == KD_METHOD_SOLVE_BATCH)
        for (int64_t i = 0; i < job->req->u.solve_batch.nitems; i++)
            kd_store_note_use(server->store, job->req->u.solve_batch.items[i].id, job->user);
    kd_writer_t own;
    if (w == NULL) {
        kd_writer_init(&own);
        w = &own;
    }
    if (rc == KD_OK && kd_writer_failed(w))
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory encoding the response");
    if (rc != KD_OK) {
        if (err->message[0] == '\0')
            kd_err_set(err, rc, "%s", kd_strerror(rc));
        kd_writer_destroy(w);
        kd_writer_init(w);
        kd_w_error_response(w, job->msgid, rc, err->message);
        KD_DEBUG("handlers", "msgid=%llu error=%s: %s", (unsigned long long)job->msgid,
                 kd_error_wire_name(rc), err->message);
    }
    job->error_code = rc;
    job->response = kd_writer_release_parts(w, &job->response_len, &job->response_tail,
                                            &job->response_tail_len);
}

void kd_handlers_run(void *ctx, kd_job_t *job)
{
    kd_server_t *server = ctx;
    kd_err_t err = {0};
    kd_writer_t w;
    kd_writer_init(&w);
    int stop = atomic_load(&job->cancel);
    int rc;
    if (stop != 0) {
        rc = kd_err_set(&err, stop, "cancelled before it started");
    } else if (job->deadline_ns != 0 && kd_clock_ns() > job->deadline_ns) {
        rc = kd_err_set(&err, KD_ETIMEOUT, "timeout_ms = %lld passed while the request waited",
                        (long long)job->req->timeout_ms);
    } else {
        server->budget_refused = 0;
        server->budget_wait = 0;
        rc = kd_handlers_dispatch(server, job, &w, &err);
        if (rc == KD_EDEVMEM && !server->budget_refused &&
            kd_handlers_evict_for_retry(server, job, &err)) {
            kd_writer_destroy(&w);
            kd_writer_init(&w);
            kd_err_clear(&err);
            server->budget_refused = 0;
            rc = kd_handlers_dispatch(server, job, &w, &err);
        }
    }
    kd_handlers_respond(server, job, rc, &w, &err);
    if (!(rc == KD_EDEVMEM && server->budget_wait)) /* else it may wait on: spmv.c */
        kd_cache_wait_end(server, &job->mem_wait_ns);
}
