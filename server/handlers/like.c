/*
 * matrix.put with like (docs/PROTOCOL.md, "New values on a held pattern"): new values on the
 * pattern of a matrix the user can see. The values arrive alone, in the like matrix's canonical
 * entry order; the server puts them into a copy of its canonical pattern, so the result is the
 * matrix a full put of the same content makes (the same id: content ids do not depend on how a
 * matrix arrived), and keeps it as the like matrix is kept: its format, its reordering, spread
 * or not, none of it chosen again. Matrices stay immutable: the like matrix is not touched, and
 * a solve running on it finishes on its values.
 *
 * The first solve on the new matrix that needs a preconditioner the like matrix holds refreshes
 * it (solve_job.c, kd_precond_refresh: only the values' part of its setup is recomputed).
 *
 * On the device the new matrix shares the like matrix's pattern arrays and gets its values by
 * one gather into the format's slots (kd_matrix_with_values): nothing is converted or chosen
 * again. Where that cannot be (a spread matrix, tiled, an empty one) it is built from the CSR
 * in the like matrix's format and reordering, as before; the log line says which.
 *
 * The values are read from the request three times at once, each at memory speed: uploaded into
 * the slots (before the id is known: a content found held after all frees that upload), hashed
 * for the id, and copied into the host CSR that the state file or the host copy keeps, the last
 * two on threads of their own. Values from a shared-memory region are copied into the host
 * CSR's values first (on kd_slices threads), and the hash and the upload read that copy: all of
 * them read the same private bytes.
 */
#include "server/handlers/handlers.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/slices.h"
#include "protocol/pattern.h"
#include "server/handlers/replies.h"

#include <pthread.h>
#include <string.h>

/* The like matrix's pattern hash, computed once from its canonical CSR and kept in its entry. */
static int kd_like_pattern(kd_server_t *server, const uint8_t id[16], const kd_csr_t *csr,
                           uint8_t out[16], kd_err_t *err)
{
    kd_store_entry_t *entry = kd_store_find(server->store, id);
    if (entry != NULL && entry->meta.has_pattern) {
        memcpy(out, entry->meta.pattern, 16);
        return KD_OK;
    }
    if (kd_pattern_hash(csr, out) != KD_OK)
        return kd_err_set(err, KD_EINTERNAL, "hashing the like matrix's pattern failed");
    if (entry != NULL) {
        memcpy(entry->meta.pattern, out, 16);
        entry->meta.has_pattern = 1;
    }
    return KD_OK;
}

/* What the request may ask of this like matrix, before any copy is made. */
static int kd_like_check(const kd_put_request_t *p, const kd_matrix_meta_t *like, kd_err_t *err)
{
    if (like->batch > 0)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "like: matrix %s is a batch of %lld systems; new values for a batch "
                          "are a full matrix.put with batch",
                          like->hex, (long long)like->batch);
    if (p->dtype_given && p->dtype != like->dtype)
        return kd_err_set(err, KD_EBADREQ,
                          "like: matrix %s is %s; the new values are kept as %s too (send them "
                          "in %s, or without dtype)",
                          like->hex, kd_dtype_name(like->dtype), kd_dtype_name(like->dtype),
                          kd_dtype_name(like->dtype));
    if (p->values.count != like->nnz)
        return kd_err_set(err, KD_EBADREQ,
                          "like: matrix %s has %lld stored entries (its canonical pattern: "
                          "docs/PROTOCOL.md), so values must hold %lld; got %lld",
                          like->hex, (long long)like->nnz, (long long)like->nnz,
                          (long long)p->values.count);
    return KD_OK;
}

/* A reference to csr's pattern (values dropped) in entry->pattern_host, if it has none. */
static int kd_like_keep_pattern(kd_store_entry_t *entry, kd_csr_t *csr)
{
    if (entry->pattern_host != NULL || entry->host != NULL)
        return KD_OK;
    kd_err_t ignored = {0};
    kd_csr_t *ref = NULL;
    if (kd_csr_pattern_ref(csr, &ref, &ignored) != KD_OK)
        return KD_ENOMEM; /* the next put with like reads the file again */
    entry->pattern_host = ref;
    return KD_OK;
}

/* The id's hash over a view of the new matrix, and the host copy of its values: threads of
 * their own, beside the values' upload (kd_like_prepare). */
typedef struct kd_like_hash {
    kd_csr_t view; /* the new matrix's pattern with the request's values (same dtype) */
    uint8_t id[16];
    int rc;
    double ms;
} kd_like_hash_t;

static void *kd_like_hash_run(void *arg)
{
    kd_like_hash_t *h = arg;
    const uint64_t t0 = kd_clock_ns();
    h->rc = kd_csr_hash(&h->view, h->id);
    h->ms = kd_clock_ms_since(t0);
    return NULL;
}

typedef struct kd_like_copy {
    void *dst;
    const void *src;
    size_t bytes;
    double ms;
} kd_like_copy_t;

static void *kd_like_copy_run(void *arg)
{
    kd_like_copy_t *c = arg;
    const uint64_t t0 = kd_clock_ns();
    kd_slices_memcpy(c->dst, c->src, c->bytes);
    c->ms = kd_clock_ms_since(t0);
    return NULL;
}

/* fn(arg) on a thread of its own (1), or here when none starts (0). */
static int kd_like_beside(pthread_t *thread, void *(*fn)(void *), void *arg)
{
    if (pthread_create(thread, NULL, fn, arg) == 0)
        return 1;
    fn(arg);
    return 0;
}

/* The like matrix's canonical pattern on the host: its host copy (no state directory), the
 * pattern an earlier put with like kept (entry->pattern_host), or read from its file and then
 * kept there, so that a time-stepping loop reads it once. *owned is what the caller frees. */
static int kd_like_host_pattern(kd_server_t *server, const uint8_t id[16], kd_csr_t **pattern,
                                kd_csr_t **owned, kd_err_t *err)
{
    *pattern = *owned = NULL;
    kd_store_entry_t *entry = kd_store_find(server->store, id);
    if (entry != NULL && entry->host != NULL) {
        *pattern = entry->host;
        return KD_OK;
    }
    if (entry != NULL && entry->pattern_host != NULL) {
        *pattern = entry->pattern_host;
        return KD_OK;
    }
    const kd_csr_t *csr = NULL;
    int rc = kd_cache_host_pattern(server, id, &csr, owned, err); /* its pattern file alone */
    if (rc != KD_OK)
        return rc;
    *pattern = *owned != NULL ? *owned : (kd_csr_t *)csr;
    if (entry != NULL && *owned != NULL)
        (void)kd_like_keep_pattern(entry, *owned);
    return KD_OK;
}

/* One kept CSR of a put with like at a time (store.h, `recent`): entry's, the one before freed. */
static void kd_like_recent(kd_server_t *server, kd_store_entry_t *entry)
{
    if (entry == NULL || entry->recent == NULL)
        return;
    entry->keep_recent = 0;
    if (server->has_like_recent && memcmp(server->like_recent, entry->meta.id, 16) != 0) {
        kd_store_entry_t *old = kd_store_find(server->store, server->like_recent);
        if (old != NULL && old->busy == 0) {
            kd_csr_free(old->recent);
            old->recent = NULL;
        }
    }
    memcpy(server->like_recent, entry->meta.id, 16);
    server->has_like_recent = 1;
}

/* kd_handlers_keep's upload for new values: the device matrix kd_like_prepare made beside the
 * hash (sharing the like matrix's pattern arrays), or built from the CSR where it could not. */
typedef struct kd_like_upload {
    const kd_matrix_meta_t *like;
    kd_matrix_options_t opt; /* like's format, reordering and spreading, forced */
    kd_matrix_t *dev;        /* kd_like_prepare's, until kd_like_upload takes it */
    char built[600];         /* "shared" or why it was built from the CSR */
    /* for the log line, ms: the hash, the host copy (threads), the device matrix (kd_like_prepare)
     * and kd_matrix_with_values's steps (arrays, scan, transfer, all) */
    double hash_ms, copy_ms, device_ms, values_ms[4];
} kd_like_upload_t;

/* The new matrix's metadata: the like matrix's choices (format, candidates, reordering, row
 * statistics: all of the pattern) with its own values' scan. */
static void kd_like_describe(kd_matrix_meta_t *meta, const kd_matrix_meta_t *like,
                             const kd_matrix_t *dev, const kd_matrix_options_t *opt)
{
    snprintf(meta->name, sizeof(meta->name), "%s", opt->name);
    meta->rows = like->rows;
    meta->cols = like->cols;
    meta->nnz = like->nnz;
    meta->dtype = like->dtype;
    meta->format = dev->format;
    meta->device_bytes = dev->device_bytes;
    /* alone it would take what the like matrix's format takes (its pattern, its format) */
    meta->alone_bytes = like->alone_bytes != 0 ? like->alone_bytes : like->device_bytes;
    kd_matrix_describe(dev, &meta->detail);
    meta->pinned = opt->pin == 1;
    meta->stats = like->stats;
    meta->stats.nonfinite = dev->scan.non_finite_count;
    meta->ncandidates = like->ncandidates;
    memcpy(meta->candidates, like->candidates, sizeof(meta->candidates));
    meta->reorder = like->reorder;
    meta->symmetric = dev->scan.symmetric;
    meta->bandwidth_before = like->bandwidth_before;
    meta->bandwidth_after = like->bandwidth_after;
    snprintf(meta->reorder_reason, sizeof(meta->reorder_reason), "%s", like->reorder_reason);
}

/* The new values on the device in the like matrix's slots (a->dev), from view (its values may
 * be the request's own: read only here), before the content id is known: the hash runs beside
 * it. a->dev stays NULL, with a->built saying why, where the matrix must be built from the CSR
 * (kd_like_upload does). A matrix found held after all is freed by the caller. */
static int kd_like_prepare(kd_server_t *server, kd_like_upload_t *a, const kd_csr_t *view,
                           kd_err_t *err)
{
    kd_store_entry_t *like = NULL;
    int rc;
    if (a->like->distributed) {
        snprintf(a->built, sizeof(a->built), "the like matrix is spread over ranks");
        return KD_OK;
    }
    char what[160];
    snprintf(what, sizeof(what), "new values on matrix %s's pattern", a->like->hex);
    /* resident again if it was evicted; room for the new arrays (and, for a pattern's first
     * version, the one-time map build's probe) */
    if ((rc = kd_cache_use(server, a->like->id, 0, &like, err)) != KD_OK)
        return rc;
    if (like->dev == NULL) {
        snprintf(a->built, sizeof(a->built), "the like matrix is not on this device");
        return KD_OK;
    }
    if ((rc = kd_cache_reserve(server, kd_matrix_values_bytes(like->dev), like, what, err)) !=
        KD_OK)
        return rc;
    rc = kd_matrix_with_values(server->ocl, like->dev, view, &a->dev, a->values_ms, err);
    kd_store_refresh_bytes(server->store, like); /* its share's maps count there */
    if (rc == KD_EUNSUPPORTED) {
        snprintf(a->built, sizeof(a->built), "%s", err->message);
        kd_err_clear(err);
        return KD_OK;
    }
    if (rc == KD_OK)
        snprintf(a->built, sizeof(a->built), "shared");
    return rc;
}

/* A prepared matrix nobody took (the content was held, or the put failed). */
static void kd_like_discard(kd_server_t *server, kd_like_upload_t *a)
{
    if (a->dev == NULL)
        return;
    const int shared = kd_matrix_shares(a->dev);
    kd_matrix_free(a->dev);
    a->dev = NULL;
    if (shared) /* the share's count may have moved */
        kd_store_refresh_all_bytes(server->store);
}

static int kd_like_upload(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                          void *arg, kd_err_t *err)
{
    kd_like_upload_t *a = arg;
    if (a->dev == NULL) {
        if (strcmp(a->built, "shared") == 0 || strcmp(a->built, "already held") == 0)
            snprintf(a->built, sizeof(a->built), "values in another dtype");
        return kd_handlers_upload(server, entry, csr, &a->opt, err);
    }
    entry->dev = a->dev;
    a->dev = NULL;
    kd_like_describe(&entry->meta, a->like, entry->dev, &a->opt);
    entry->keep_recent = 1;
    return KD_OK;
}

/* The like matrix's pattern (shared, not copied: kd_csr_with_values) with the request's values in
 * its dtype (*out), its content id, and its values on the device (up->dev, kd_like_prepare): the
 * hash and the host copy run on threads beside the upload, each a pass over 8 bytes a nonzero
 * of the request's values. Values in another dtype are converted first, then hashed. */
static int kd_like_matrix(kd_server_t *server, kd_csr_t *pattern, const kd_array_t *values,
                          kd_like_upload_t *up, kd_csr_t **out, uint8_t id[16], kd_err_t *err)
{
    int rc = kd_csr_with_values(pattern, out, err);
    if (rc != KD_OK)
        return rc;
    kd_csr_t *c = *out;
    const size_t bytes = (size_t)pattern->nnz * kd_dtype_size(c->dtype);
    if (values->dtype != c->dtype || pattern->nnz == 0) {
        for (int64_t i = 0; i < pattern->nnz; i++)
            kd_store_real(c->values, c->dtype, (size_t)i,
                          kd_load_real(values->data, values->dtype, (size_t)i));
        if (kd_csr_hash(c, id) != KD_OK)
            return kd_err_set(err, KD_ENOMEM, "out of host memory hashing the matrix");
        return KD_OK; /* uploaded by kd_like_upload, if the content is new */
    }
    kd_like_hash_t h = {.view = *c, .rc = KD_OK};
    kd_like_copy_t copy = {.dst = c->values, .src = values->data, .bytes = bytes};
    pthread_t hashing, copying;
    int copy_beside = 0;
    if (values->shm != 0) {
        /* the client's region: copied once into the matrix's own values before anything reads
         * them (a client writing its region meanwhile cannot make the values kept differ from
         * those the id names), then hashed and uploaded from there */
        kd_like_copy_run(&copy);
        h.view.values = c->values;
    } else {
        h.view.values = (void *)values->data; /* the request's own bytes: read only */
    }
    const int hash_beside = kd_like_beside(&hashing, kd_like_hash_run, &h);
    if (values->shm == 0)
        copy_beside = kd_like_beside(&copying, kd_like_copy_run, &copy);
    const uint64_t t0 = kd_clock_ns();
    rc = kd_like_prepare(server, up, &h.view, err);
    up->device_ms = kd_clock_ms_since(t0);
    if (hash_beside)
        pthread_join(hashing, NULL);
    if (copy_beside)
        pthread_join(copying, NULL);
    up->hash_ms = h.ms;
    up->copy_ms = copy.ms;
    if (rc != KD_OK)
        return rc;
    memcpy(id, h.id, 16);
    if (h.rc != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory hashing the matrix");
    return KD_OK;
}

int kd_handle_put_like(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_put_request_t *p = &job->req->u.put;
    uint64_t t[4] = {kd_clock_ns()}; /* start, pattern, values and id, kept: for the log line */
    kd_matrix_meta_t like;
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(p->like, hex);
    if (kd_store_get_meta(server->store, p->like, &like) != KD_OK ||
        !kd_meta_visible(&like, job->user, job->admin))
        return kd_err_set(err, KD_ENOTFOUND, "like: no matrix %s on this server", hex);
    int rc = kd_like_check(p, &like, err);
    if (rc != KD_OK)
        return rc;
    kd_csr_t *pattern = NULL, *owned = NULL, *csr = NULL;
    uint8_t hash[16];
    if ((rc = kd_like_host_pattern(server, p->like, &pattern, &owned, err)) != KD_OK ||
        (rc = kd_like_pattern(server, p->like, pattern, hash, err)) != KD_OK)
        goto out;
    t[1] = kd_clock_ns();
    if (p->has_pattern && memcmp(p->pattern, hash, 16) != 0) {
        char given[KD_ID_HEX_LEN + 1], held[KD_ID_HEX_LEN + 1];
        kd_id_to_hex(p->pattern, given);
        kd_id_to_hex(hash, held);
        rc = kd_err_set(err, KD_EBADREQ,
                        "like: the values' pattern %s is not matrix %s's (%s): they would fill "
                        "another matrix's entries; put the matrix whole",
                        given, hex, held);
        goto out;
    }
    uint8_t id[16];
    /* kept as the like matrix is: nothing is chosen again */
    kd_like_upload_t up = {.like = &like, .opt = p->options, .built = "already held"};
    kd_matrix_options_t *opt = &up.opt;
    snprintf(opt->format, sizeof(opt->format), "%s", kd_format_name(like.format));
    opt->select[0] = '\0';
    opt->reorder = like.reorder;
    opt->distribute = like.distributed ? KD_DISTRIBUTE_YES : KD_DISTRIBUTE_NO;
    if ((rc = kd_like_matrix(server, pattern, &p->values, &up, &csr, id, err)) != KD_OK) {
        kd_like_discard(server, &up);
        kd_csr_free(csr);
        goto out;
    }
    t[2] = kd_clock_ns();
    kd_matrix_meta_t meta;
    int created;
    rc = kd_handlers_keep(server, job, csr, id, opt->pin, kd_like_upload, &up, &meta, &created,
                          err); /* takes csr */
    if (up.dev != NULL && rc == KD_OK)
        snprintf(up.built, sizeof(up.built), "already held");
    kd_like_discard(server, &up); /* uploaded beside the hash, but the content was held */
    if (rc != KD_OK)
        goto out;
    t[3] = kd_clock_ns();
    kd_store_entry_t *entry = kd_store_find(server->store, meta.id);
    kd_like_recent(server, entry);
    if (entry != NULL) {
        memcpy(entry->meta.pattern, hash, 16);
        entry->meta.has_pattern = 1;
        (void)kd_like_keep_pattern(entry, pattern); /* for its own puts with like */
        /* its solves refresh like's setup, when this put stored it (one reference: the
         * user's), not when it found another user's matrix held */
        if (created && entry->meta.nowners == 1 && memcmp(meta.id, p->like, 16) != 0) {
            memcpy(entry->meta.like, p->like, 16);
            entry->meta.has_like = 1;
        }
        if (!meta.hide_selection) { /* (a user's view of shared content leaves them out) */
            meta.has_like = entry->meta.has_like;
            meta.preconds_refreshed = entry->meta.preconds_refreshed;
        }
    }
    memcpy(meta.pattern, hash, 16);
    meta.has_pattern = 1;
    KD_INFO("store",
            "put id=%s like=%s nnz=%lld format=%s created=%d device=\"%s\" ms=%.1f "
            "(pattern %.1f, values, id and upload %.1f [hash %.1f, copy %.1f, device %.1f: arrays "
            "%.1f, scan %.1f, transfer %.1f], kept %.1f)",
            meta.hex, hex, (long long)meta.nnz, kd_format_name(meta.format), created, up.built,
            (double)(t[3] - t[0]) / 1e6, (double)(t[1] - t[0]) / 1e6, (double)(t[2] - t[1]) / 1e6,
            up.hash_ms, up.copy_ms, up.device_ms, up.values_ms[0], up.values_ms[1],
            up.values_ms[2], (double)(t[3] - t[2]) / 1e6);
    kd_w_result_begin(w, job->msgid);
    kd_reply_meta_extra(w, &meta, created, 2);
    kd_w_kv_str(w, "like", hex);
    kd_w_kv_double(w, "time_ms", kd_clock_ms_since(job->submitted_ns));
out:
    kd_csr_free(owned);
    return rc;
}
