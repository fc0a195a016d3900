/*
 * How a matrix becomes the server's, for every request that makes one (matrix.put and put with
 * like, matrix.multiply, a batch's systems): the content already held is the user's reference to
 * it; otherwise quotas, room in the device budget, the upload (one device, or spread over the
 * ranks: spread.c) and the state file, through the cache (store/cache.c: kd_cache_admit).
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

/* When the job's new matrix gets its state file (kd_persist_t): what its put asked, else the
 * server's --persist-default. */
static int kd_handlers_persist(const kd_server_t *server, const kd_job_t *job)
{
    const int asked =
        job->req->method == KD_METHOD_MATRIX_PUT ? job->req->u.put.persist : KD_PERSIST_DEFAULT;
    return asked == KD_PERSIST_DEFAULT ? server->cfg.persist_default : asked;
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
    /* a stronger persist than the held copy's: written now, or queued */
    if ((rc = kd_cache_persist_upgrade(server, existing, kd_handlers_persist(server, job), err)) !=
        KD_OK)
        return rc;
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
    meta->persist = server->state != NULL ? kd_handlers_persist(server, job) : KD_PERSIST_NONE;
    size_t file_bytes = 0;
    if (server->state != NULL && meta->persist != KD_PERSIST_NONE &&
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
