/*
 * The cache policy (see cache.h).
 *
 * Device memory. The budget is --device-memory (bytes, or a percentage of the device's global
 * memory; 90% by default). The store knows each resident matrix's real device size; before a
 * matrix's format is chosen its size is estimated as its CSR arrays and corrected after upload.
 * A request also needs room for its vectors while it runs (one worker per device runs one request
 * at a time, so that room is a check, not a reservation). When something does not fit, the least
 * recently used unpinned resident matrices are evicted: their device copies are freed, and their
 * state files stay, so they reload on next use. A matrix without a state file (no --state-dir) is
 * never evicted, since it could not come back. If evicting every candidate would still not make
 * room, nothing is evicted and the request fails with DEVICE_MEMORY naming the sizes; if it would
 * once the requests in flight release the matrices they use (busy), the caller is told to wait
 * (server->budget_wait) and the request runs again after them (spmv.c).
 *
 * Disk. Every accepted matrix gets a state file before matrix.put answers. --state-max-bytes
 * bounds the files' total: the least recently used unpinned matrices are forgotten (file and
 * device copy) to make room for a new one. Matrices with one pattern share its pattern file, whose
 * bytes one of them carries in its file_bytes (state.h); when a removal moves that charge, or a
 * bad pattern file takes other matrices' files along, the state says so (kd_state_next_change)
 * and kd_cache_settle brings the entries in line, so the entries' file_bytes always add up to the
 * files. Without a state directory the store entry keeps the canonical CSR in host memory
 * instead, where host-side work (matrix.multiply) finds it.
 */
#include "server/store/cache.h"
#include "solver/batch/batch.h"
#include "common/clock.h"
#include "common/checked.h"
#include "common/log.h"
#include "server/server.h"
#include "server/store/owners.h"
#include "server/store/state.h"
#include "server/store/writer.h"
#include "solver/runtime/pool.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

size_t kd_cache_estimate(int64_t rows, int64_t nnz, kd_dtype_t dtype)
{
    size_t ptr, body, sum;
    if (rows < 0 || nnz < 0 || kd_mul_overflow((size_t)rows + 1, 4, &ptr) ||
        kd_mul_overflow((size_t)nnz, 4 + kd_dtype_size(dtype), &body) ||
        kd_add_overflow(ptr, body, &sum))
        return SIZE_MAX;
    return sum;
}

/* ---- start-up ----------------------------------------------------------------------------- */

typedef struct kd_scan_ctx {
    kd_server_t *server;
    uint64_t now_mono_ns;
    int64_t now_unix;
    int failed;
} kd_scan_ctx_t;

static int kd_cache_register(void *arg, const kd_matrix_meta_t *meta, size_t file_bytes,
                             int64_t mtime_s)
{
    kd_scan_ctx_t *ctx = arg;
    kd_store_entry_t *entry = calloc(1, sizeof(*entry));
    if (entry == NULL) {
        ctx->failed = 1;
        return 1;
    }
    entry->meta = *meta;
    entry->meta.resident = 0;
    entry->meta.stored = 1;
    entry->meta.file_bytes = file_bytes;
    /* The LRU order across a restart: older files first (a used matrix is not rewritten, so this
     * is the upload order; in-process use then takes over). */
    int64_t age_s = ctx->now_unix - mtime_s;
    if (age_s < 0)
        age_s = 0;
    uint64_t age_ns = (uint64_t)age_s * 1000000000u;
    entry->meta.last_used_ns = age_ns < ctx->now_mono_ns ? ctx->now_mono_ns - age_ns : 1;
    if (kd_store_insert(ctx->server->store, entry) != KD_OK) {
        ctx->failed = 1;
        return 1;
    }
    return 0;
}

int kd_cache_open(kd_server_t *server, kd_err_t *err)
{
    const kd_config_t *cfg = &server->cfg;
    const kd_ocl_device_desc_t *desc = kd_ocl_desc(server->ocl);
    if (cfg->device_memory_bytes > 0)
        server->device_budget = cfg->device_memory_bytes;
    else
        server->device_budget =
            (size_t)((double)desc->global_mem_bytes * cfg->device_memory_percent / 100.0);
    KD_INFO("cache", "device memory budget=%zu bytes (device has %llu)", server->device_budget,
            (unsigned long long)desc->global_mem_bytes);
    if (cfg->state_dir[0] == '\0') {
        KD_WARN("cache", "no --state-dir: matrices are not kept across restarts and are never "
                         "evicted from device memory");
        return KD_OK;
    }
    int rc = kd_state_open(cfg->state_dir, &server->state, err);
    if (rc != KD_OK)
        return rc;
    kd_scan_ctx_t ctx = {
        .server = server, .now_mono_ns = kd_clock_ns(), .now_unix = (int64_t)time(NULL)};
    kd_state_scan_totals_t totals;
    rc = kd_state_scan(server->state, kd_cache_register, &ctx, &totals, err);
    if (rc != KD_OK)
        return rc;
    if (ctx.failed)
        return kd_err_set(err, KD_ENOMEM, "out of host memory registering stored matrices");
    if ((rc = kd_owners_load(server, err)) != KD_OK)
        return rc;
    for (size_t i = 0; i < kd_state_moved_aside(server->state); i++)
        kd_store_count(server->store, KD_STORE_CORRUPT);
    kd_store_totals_t t;
    kd_store_totals(server->store, &t);
    KD_INFO("cache",
            "state dir %s: matrices=%zu patterns=%zu bytes=%zu pinned=%zu corrupt=%zu "
            "interrupted_writes=%zu unused_patterns=%zu lost_behind=%zu",
            cfg->state_dir, totals.good, totals.patterns, t.file_bytes, t.pinned, totals.corrupt,
            totals.temporary, totals.unused, totals.lost);
    return KD_OK;
}

void kd_cache_close(kd_server_t *server)
{
    kd_writer_free(server->writer); /* stopped and published by kd_cache_stop_writer already */
    server->writer = NULL;
    kd_state_close(server->state);
    server->state = NULL;
}

/* ---- device memory ------------------------------------------------------------------------ */

static void kd_cache_evict(kd_server_t *server, kd_store_entry_t *victim, const char *why)
{
    kd_matrix_t *dev = kd_store_set_device(server->store, victim, NULL);
    KD_INFO("cache", "evict id=%s device_bytes=%zu reason=\"%s\"", victim->meta.hex,
            dev != NULL ? dev->device_bytes : 0, why);
    const int shared = kd_matrix_shares(dev);
    kd_matrix_free(dev);
    if (shared) /* its pattern arrays now count in another matrix */
        kd_store_refresh_all_bytes(server->store);
    kd_store_count(server->store, KD_STORE_EVICTIONS);
}

static int kd_cache_reserve_budget(kd_server_t *server, size_t bytes, const kd_store_entry_t *keep,
                                   const char *what, kd_err_t *err)
{
    size_t budget = server->device_budget;
    kd_store_totals_t t;
    kd_store_totals(server->store, &t);
    /* The pool's vectors count too; they are given up before any matrix is. */
    size_t used_with_pool = t.device_bytes + kd_pool_bytes(server->pool);
    if (used_with_pool <= budget && bytes <= budget - used_with_pool)
        return KD_OK;
    kd_pool_clear(server->pool);
    if (t.device_bytes <= budget && bytes <= budget - t.device_bytes)
        return KD_OK;
    if (bytes > budget)
        return kd_err_set(err, KD_EDEVMEM,
                          "%s needs %zu bytes of device memory, more than the whole budget of "
                          "%zu bytes (--device-memory)",
                          what, bytes, budget);
    /* What eviction can never free (pinned matrices, those without a file or spread, `keep`),
     * and what requests in flight hold until they end: a need that fits beside the first but not
     * beside both waits for them (server->budget_wait) instead of being refused. */
    size_t fixed, busy;
    kd_store_held_device_bytes(server->store, keep, &fixed, &busy);
    if (keep != NULL && keep->meta.resident)
        fixed += keep->meta.device_bytes;
    if (server->state == NULL) { /* nothing is evictable without a state file */
        fixed = t.device_bytes;
        busy = 0;
    }
    if (fixed > budget || bytes > budget - fixed)
        return kd_err_set(err, KD_EDEVMEM,
                          "%s needs %zu bytes of device memory; the budget is %zu bytes "
                          "(--device-memory), %zu of them in use by %zu resident matrices, "
                          "%zu by pinned ones%s%s",
                          what, bytes, budget, t.device_bytes, t.resident, t.pinned_bytes,
                          keep != NULL ? " and the matrix this request uses" : "",
                          server->state == NULL ? " (without --state-dir nothing is evicted)" : "");
    if (busy > budget - fixed - bytes) {
        server->budget_wait = 1;
        return kd_err_set(err, KD_EDEVMEM,
                          "%s needs %zu bytes of device memory; the budget is %zu bytes "
                          "(--device-memory), %zu of them held by matrices that requests in "
                          "flight use",
                          what, bytes, budget, busy);
    }
    size_t used = t.device_bytes;
    while (used > budget || bytes > budget - used) {
        kd_store_entry_t *victim = kd_store_lru_victim(server->store, keep, 1);
        if (victim == NULL) /* cannot happen after the check above; be safe */
            return kd_err_set(err, KD_EDEVMEM,
                              "%s needs %zu bytes of device memory: nothing "
                              "left to evict",
                              what, bytes);
        used -= victim->meta.device_bytes;
        kd_cache_evict(server, victim, "device memory budget");
    }
    return KD_OK;
}

int kd_cache_reserve(kd_server_t *server, size_t bytes, const kd_store_entry_t *keep,
                     const char *what, kd_err_t *err)
{
    int rc = kd_cache_reserve_budget(server, bytes, keep, what, err);
    if (rc == KD_EDEVMEM)
        server->budget_refused = 1; /* evicting more and retrying cannot help */
    return rc;
}

void kd_cache_wait_begin(kd_server_t *server, uint64_t *since_ns)
{
    if (*since_ns != 0)
        return;
    *since_ns = kd_clock_ns();
    atomic_fetch_add(&server->mem_waiting, 1);
    kd_store_count(server->store, KD_STORE_MEMORY_WAITS);
}

void kd_cache_wait_end(kd_server_t *server, uint64_t *since_ns)
{
    if (*since_ns == 0)
        return;
    kd_store_count_add(server->store, KD_STORE_MEMORY_WAIT_MS,
                       (kd_clock_ns() - *since_ns) / 1000000u);
    *since_ns = 0;
    atomic_fetch_sub(&server->mem_waiting, 1);
}

size_t kd_cache_evict_all(kd_server_t *server, const kd_store_entry_t *keep)
{
    size_t n = 0;
    kd_store_entry_t *victim;
    while ((victim = kd_store_lru_victim(server->store, keep, 1)) != NULL) {
        kd_cache_evict(server, victim, "the driver refused an allocation");
        n++;
    }
    return n;
}

/* Bring the entries in line with what the state's last calls did to other matrices' files: a
 * pattern file's charge moved (file_bytes), or a file moved aside with its pattern file (no
 * longer stored: such a matrix is forgotten at its next use, kd_cache_stored). `pending` is a
 * new entry not in the store yet (may be NULL). */
static void kd_cache_settle(kd_server_t *server, kd_store_entry_t *pending)
{
    kd_state_change_t c;
    while (kd_state_next_change(server->state, &c)) {
        kd_store_entry_t *e = pending != NULL && memcmp(pending->meta.id, c.id, 16) == 0
                                  ? pending
                                  : kd_store_find(server->store, c.id);
        if (e == NULL)
            continue;
        if (c.stored)
            kd_store_set_file(server->store, e, 1, e->meta.file_bytes + c.added_bytes);
        else
            kd_store_set_file(server->store, e, 0, 0);
        KD_INFO("cache", "state file change id=%s stored=%d file_bytes=%zu", e->meta.hex, c.stored,
                e->meta.file_bytes);
    }
}

/* Forget entry (its file failed a check: err says so), or, while a request uses it, keep it
 * without a file until that request ends (it is then dropped or forgotten at its next use). */
static void kd_cache_forget_corrupt(kd_server_t *server, kd_store_entry_t *entry, kd_err_t *err)
{
    if (entry->busy > 0) {
        KD_WARN("cache", "no stored copy now id=%s: %s", entry->meta.hex, err->message);
        kd_store_set_file(server->store, entry, 0, 0);
        return;
    }
    KD_WARN("cache", "forget id=%s: %s", entry->meta.hex, err->message);
    kd_store_entry_free(kd_store_remove(server->store, entry->meta.id));
}

/* A state call that may move files aside: count them and settle the entries. */
static void kd_cache_after_state(kd_server_t *server, size_t moved_before)
{
    for (size_t n = kd_state_moved_aside(server->state); n > moved_before; n--)
        kd_store_count(server->store, KD_STORE_CORRUPT);
    kd_cache_settle(server, NULL);
}

/* Whether entry still has its state file; one that lost it with a bad pattern file, and is not
 * on the device, is forgotten here (KD_ENOTFOUND). */
static int kd_cache_stored(kd_server_t *server, kd_store_entry_t *entry, kd_err_t *err)
{
    if (server->state == NULL || entry->meta.stored)
        return KD_OK;
    char hex[KD_ID_HEX_LEN + 1];
    memcpy(hex, entry->meta.hex, sizeof(hex));
    kd_err_set(err, KD_ENOTFOUND,
               "the stored copy of matrix %s failed its check (its pattern file) and was moved "
               "aside; upload it again",
               hex);
    kd_cache_forget_corrupt(server, entry, err);
    return KD_ENOTFOUND;
}

/* Read entry's matrix (pattern_only: its pattern, values NULL) from its state file. A file that
 * fails its checks was moved aside by the state: the matrix is forgotten (entry is freed) and the
 * result is KD_ENOTFOUND. */
static int kd_cache_load_any(kd_server_t *server, kd_store_entry_t *entry, int pattern_only,
                             kd_csr_t **csr, kd_err_t *err)
{
    size_t moved_before = kd_state_moved_aside(server->state);
    int rc = pattern_only ? kd_state_load_pattern(server->state, entry->meta.id, csr, err)
                          : kd_state_load(server->state, entry->meta.id, csr, err);
    kd_cache_after_state(server, moved_before);
    if (rc == KD_ENOTFOUND) /* its file failed its checks and was moved aside (or is gone) */
        kd_cache_forget_corrupt(server, entry, err);
    return rc;
}

static int kd_cache_load(kd_server_t *server, kd_store_entry_t *entry, kd_csr_t **csr,
                         kd_err_t *err)
{
    return kd_cache_load_any(server, entry, 0, csr, err);
}

/* Load a non-resident entry from its state file and upload it in its recorded format. */
static int kd_cache_reload(kd_server_t *server, kd_store_entry_t *entry, size_t extra,
                           kd_err_t *err)
{
    kd_store_count(server->store, KD_STORE_MISSES);
    int rc = kd_cache_stored(server, entry, err);
    if (rc != KD_OK)
        return rc;
    if (server->state == NULL)
        return kd_err_set(err, KD_EINTERNAL, "matrix %s is neither resident nor stored",
                          entry->meta.hex);
    char what[96];
    snprintf(what, sizeof(what), "reloading matrix %s", entry->meta.hex);
    size_t estimate = entry->meta.device_bytes > 0
                          ? entry->meta.device_bytes
                          : kd_cache_estimate(entry->meta.rows, entry->meta.nnz, entry->meta.dtype);
    size_t need;
    if (kd_add_overflow(estimate, extra, &need))
        need = SIZE_MAX;
    rc = kd_cache_reserve(server, need, entry, what, err);
    if (rc != KD_OK)
        return rc;
    uint64_t t0 = kd_clock_ns();
    kd_csr_t *csr = NULL;
    rc = kd_cache_load(server, entry, &csr, err);
    if (rc != KD_OK)
        return rc;
    kd_format_t format = entry->meta.format;
    if (!kd_format_available(format)) {
        KD_WARN("cache", "reload id=%s: format %s is not in this build; using csr_scalar",
                entry->meta.hex, kd_format_name(format));
        format = KD_FMT_CSR_SCALAR;
    }
    /* the permutation is not stored: recomputed from the matrix, it is the same one */
    kd_reorder_t reorder = entry->meta.reorder;
    if (!kd_reorder_available(reorder)) {
        KD_WARN("cache", "reload id=%s: reorder %s is not in this build; using none",
                entry->meta.hex, kd_reorder_name(reorder));
        reorder = KD_REORDER_NONE;
    }
    kd_matrix_t *dev = NULL;
    /* a version of a pattern another resident matrix holds shares its arrays, as its put did */
    kd_store_entry_t *sibling = kd_store_find_sibling(server->store, entry);
    rc = KD_EUNSUPPORTED;
    if (sibling != NULL && format == entry->meta.format && reorder == entry->meta.reorder) {
        rc = kd_matrix_with_values(server->ocl, sibling->dev, csr, &dev, NULL, err);
        kd_store_refresh_bytes(server->store, sibling);
        if (rc == KD_EUNSUPPORTED)
            kd_err_clear(err);
    }
    if (rc == KD_EUNSUPPORTED) /* else shared, or failed */
        rc = entry->meta.batch > 0
                 ? kd_batch_from_block_diagonal(server->ocl, csr, entry->meta.batch, &dev, err)
                 : kd_matrix_upload_reordered(server->ocl, csr, format, reorder, &dev, err);
    kd_csr_free(csr);
    if (rc != KD_OK)
        return kd_err_prefix(err, "reloading matrix %s", entry->meta.hex);
    kd_store_set_device(server->store, entry, dev);
    kd_store_count(server->store, KD_STORE_RELOADS);
    KD_INFO("cache", "reload id=%s format=%s reorder=%s device_bytes=%zu ms=%.1f%s%s",
            entry->meta.hex, kd_format_name(format), kd_reorder_name(reorder), dev->device_bytes,
            (double)(kd_clock_ns() - t0) / 1e6, dev->share != NULL ? " sharing with " : "",
            dev->share != NULL && sibling != NULL ? sibling->meta.hex : "");
    return KD_OK;
}

/* A matrix put spread, first used after the whole job restarted: its file read on rank 0 and
 * spread over the ranks again (the other ranks keep nothing on disk). */
static int kd_cache_respread(kd_server_t *server, kd_store_entry_t *entry, kd_err_t *err)
{
    kd_store_count(server->store, KD_STORE_MISSES);
    int rc = kd_cache_stored(server, entry, err);
    if (rc != KD_OK)
        return rc;
    if (server->state == NULL)
        return kd_err_set(err, KD_EINTERNAL, "matrix %s is neither spread nor stored",
                          entry->meta.hex);
    const uint64_t t0 = kd_clock_ns();
    kd_csr_t *csr = NULL;
    rc = kd_cache_load(server, entry, &csr, err);
    if (rc != KD_OK)
        return rc;
    rc = server->spread->again(server, entry, csr, err);
    kd_csr_free(csr);
    if (rc != KD_OK)
        return kd_err_prefix(err, "reloading matrix %s", entry->meta.hex);
    kd_store_count(server->store, KD_STORE_RELOADS);
    KD_INFO("cache", "reload id=%s spread over %d ranks ms=%.1f", entry->meta.hex,
            server->spread->ranks(server), (double)(kd_clock_ns() - t0) / 1e6);
    return KD_OK;
}

static int kd_cache_not_found(const uint8_t id[16], kd_err_t *err)
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    return kd_err_set(err, KD_ENOTFOUND, "no matrix %s on this server", hex);
}

int kd_cache_use(kd_server_t *server, const uint8_t id[16], size_t extra, kd_store_entry_t **out,
                 kd_err_t *err)
{
    *out = NULL;
    kd_store_entry_t *entry = kd_store_lookup(server->store, id);
    if (entry == NULL)
        return kd_cache_not_found(id, err);
    int rc;
    if (entry->dev != NULL || entry->dist != NULL) {
        kd_store_count(server->store, KD_STORE_HITS);
    } else if (entry->meta.distributed && server->spread->ranks(server) > 1) {
        if ((rc = kd_cache_respread(server, entry, err)) != KD_OK)
            return rc;
    } else if ((rc = kd_cache_reload(server, entry, extra, err)) != KD_OK) {
        return rc; /* (a matrix put spread, on a job of one rank now: whole, as any other) */
    }
    /* spread: this rank holds its rows' share of every vector (the caller counted them all) */
    if (entry->dist != NULL && entry->meta.rows > 0 && entry->meta.rank_rows[0] < entry->meta.rows)
        extra = (size_t)ceil((double)extra * (double)entry->meta.rank_rows[0] /
                             (double)entry->meta.rows);
    char what[96];
    snprintf(what, sizeof(what), "the vectors of this request on matrix %s", entry->meta.hex);
    rc = kd_cache_reserve(server, extra, entry, what, err);
    if (rc != KD_OK)
        return rc;
    *out = entry;
    return KD_OK;
}

/* kd_cache_host_csr and kd_cache_host_pattern. */
static int kd_cache_host_any(kd_server_t *server, const uint8_t id[16], int pattern_only,
                             const kd_csr_t **csr, kd_csr_t **owned, kd_err_t *err)
{
    *csr = NULL;
    *owned = NULL;
    kd_store_entry_t *entry = kd_store_lookup(server->store, id);
    if (entry == NULL)
        return kd_cache_not_found(id, err);
    if (entry->host != NULL || entry->recent != NULL) {
        *csr = entry->host != NULL ? entry->host : entry->recent;
        return KD_OK;
    }
    if (server->state != NULL && !entry->meta.stored) {
        if (entry->dev == NULL && entry->dist == NULL)
            return kd_cache_stored(server, entry, err);
        return kd_err_set(err, KD_ENOTFOUND,
                          "matrix %s: its stored copy failed its check (its pattern file) and was "
                          "moved aside, so the server has no host copy of it; upload it again",
                          entry->meta.hex);
    }
    if (server->state == NULL || !entry->meta.stored)
        return kd_err_set(err, KD_EINTERNAL, "matrix %s has neither a host copy nor a file",
                          entry->meta.hex);
    int rc = kd_cache_load_any(server, entry, pattern_only, owned, err);
    if (rc == KD_OK)
        *csr = *owned;
    return rc;
}

int kd_cache_host_csr(kd_server_t *server, const uint8_t id[16], const kd_csr_t **csr,
                      kd_csr_t **owned, kd_err_t *err)
{
    return kd_cache_host_any(server, id, 0, csr, owned, err);
}

int kd_cache_host_pattern(kd_server_t *server, const uint8_t id[16], const kd_csr_t **csr,
                          kd_csr_t **owned, kd_err_t *err)
{
    return kd_cache_host_any(server, id, 1, csr, owned, err);
}

/* ---- disk --------------------------------------------------------------------------------- */

/* Whether a new file of file_bytes can fit under --state-max-bytes once the matrices that may be
 * forgotten are: KD_ETOOLARGE when pinned files (or ones in use) leave no room. Forgets
 * nothing. */
static int kd_cache_disk_fits(kd_server_t *server, size_t file_bytes, const char *hex,
                              kd_err_t *err)
{
    size_t limit = server->cfg.state_max_bytes;
    if (limit == 0)
        return KD_OK;
    kd_store_totals_t t;
    kd_store_totals(server->store, &t);
    if (t.pinned_file_bytes > limit || file_bytes > limit - t.pinned_file_bytes)
        return kd_err_set(err, KD_ETOOLARGE,
                          "matrix %s needs %zu bytes in the state directory; the limit is %zu "
                          "bytes (--state-max-bytes), %zu of them held by pinned matrices",
                          hex, file_bytes, limit, t.pinned_file_bytes);
    size_t kept = t.file_bytes - kd_store_evictable_file_bytes(server->store); /* in use, too */
    if (kept > limit || file_bytes > limit - kept)
        return kd_err_set(err, KD_ETOOLARGE, "state directory full: nothing left to remove");
    return KD_OK;
}

/* Forget least recently used unpinned matrices until the files, with the new entry's (written
 * already, not yet in the store), are under --state-max-bytes. Called after the new file is
 * written, so that a write refused by a full disk forgets nothing; a file that cannot be removed
 * is logged and the limit is left exceeded until the next put. A forgotten matrix whose pattern
 * file others use frees its values file only, its charge moving to one of them (the new entry,
 * maybe): the totals are read again after each. */
static void kd_cache_make_disk_room(kd_server_t *server, kd_store_entry_t *entry, int in_store)
{
    size_t limit = server->cfg.state_max_bytes;
    if (limit == 0)
        return;
    for (;;) {
        kd_store_totals_t t;
        kd_store_totals(server->store, &t);
        const size_t used = t.file_bytes, file_bytes = in_store ? 0 : entry->meta.file_bytes;
        if (used <= limit && file_bytes <= limit - used)
            return;
        kd_store_entry_t *victim = kd_store_lru_victim(server->store, in_store ? entry : NULL, 0);
        if (victim == NULL)
            return; /* not after kd_cache_disk_fits said yes, but for a charge moved to entry */
        kd_err_t rerr = {0};
        if (kd_state_remove(server->state, victim->meta.id, &rerr) != KD_OK) {
            KD_WARN("cache", "making room in the state directory: %s", rerr.message);
            return;
        }
        KD_INFO("cache", "forget id=%s file_bytes=%zu reason=\"--state-max-bytes\"",
                victim->meta.hex, victim->meta.file_bytes);
        kd_store_count(server->store, KD_STORE_DISK_EVICTIONS);
        kd_store_entry_free(kd_store_remove(server->store, victim->meta.id));
        kd_store_refresh_all_bytes(server->store);
        kd_cache_settle(server, in_store ? NULL : entry);
    }
}

/* STATE_DIR/owners with a new matrix's line (hex: for the message). */
static void kd_cache_save_owners(kd_server_t *server, const char *hex)
{
    kd_err_t owners = {0};
    if (kd_owners_save(server, &owners) != KD_OK) /* the matrix itself is safe: keep it */
        KD_WARN("owners", "%s: after a restart matrix %s belongs to %s", owners.message, hex,
                KD_ANONYMOUS);
}

/* Queue entry's file to be written behind the reply by the writer thread: its marker first
 * (state.h); the item holds entry's host CSR, so a drop meanwhile leaves it alive. */
static int kd_cache_queue_behind(kd_server_t *server, kd_store_entry_t *entry, kd_err_t *err)
{
    kd_writer_item_t *item = calloc(1, sizeof(*item));
    if (item == NULL || server->writer == NULL) {
        free(item);
        return kd_err_set(err, KD_ENOMEM, "out of host memory queueing matrix %s's write",
                          entry->meta.hex);
    }
    kd_state_mark_behind(server->state, entry->meta.id);
    kd_store_set_behind(server->store, entry, 1);
    kd_store_get_meta(server->store, entry->meta.id, &item->meta);
    item->csr = kd_csr_hold(entry->host);
    item->queued_ns = kd_clock_ns();
    kd_writer_queue(server->writer, item);
    return KD_OK;
}

/* Whether csr's file fits the state directory now (size, --state-max-bytes): a write behind the
 * reply is refused up front for what the reply could know. */
static int kd_cache_file_fits(kd_server_t *server, const kd_matrix_meta_t *meta,
                              const kd_csr_t *csr, size_t *file_bytes, kd_err_t *err)
{
    if (server->cfg.state_max_bytes == 0) /* no limit: spare the pattern's hash that sizes it */
        return KD_OK;
    int rc = kd_state_put_bytes(server->state, csr, meta->batch, file_bytes, err);
    if (rc == KD_OK)
        rc = kd_cache_disk_fits(server, *file_bytes, meta->hex, err);
    return rc;
}

/* entry's file from csr, now (a sync put, or a write behind; in_store: entry is in the store). */
static int kd_cache_write_file(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                               int in_store, kd_err_t *err)
{
    kd_matrix_meta_t *meta = &entry->meta;
    size_t file_bytes = 0;
    int rc = kd_cache_file_fits(server, meta, csr, &file_bytes, err);
    if (rc == KD_OK) {
        kd_matrix_meta_t now = *meta; /* its pin and name as they are at the write */
        if (in_store)
            kd_store_get_meta(server->store, meta->id, &now);
        rc = kd_state_write(server->state, &now, csr, &file_bytes, err);
    }
    if (rc != KD_OK)
        return rc;
    if (in_store)
        kd_store_set_file(server->store, entry, 1, file_bytes);
    else {
        meta->stored = 1;
        meta->file_bytes = file_bytes;
    }
    kd_cache_make_disk_room(server, entry, in_store);
    return KD_OK;
}

static void kd_cache_writer_settle(kd_server_t *server, const uint8_t id[16]);

int kd_cache_admit(kd_server_t *server, kd_store_entry_t *entry, kd_csr_t *csr, kd_err_t *err)
{
    kd_matrix_meta_t *meta = &entry->meta;
    char what[96];
    snprintf(what, sizeof(what), "matrix %s (%s)", meta->hex, kd_format_name(meta->format));
    size_t actual = entry->dev != NULL    ? entry->dev->device_bytes
                    : entry->dist != NULL ? meta->device_bytes /* rank 0's part */
                                          : 0;
    int rc = kd_cache_reserve(server, actual, NULL, what, err);
    if (rc != KD_OK)
        goto fail;
    if (server->state == NULL)
        meta->persist = KD_PERSIST_NONE;
    if (meta->persist != KD_PERSIST_NONE) /* a dropped copy of this content still written */
        kd_cache_writer_settle(server, meta->id);
    if (meta->persist == KD_PERSIST_SYNC) {
        if ((rc = kd_cache_write_file(server, entry, csr, 0, err)) != KD_OK)
            goto fail;
        if (entry->keep_recent)
            entry->recent = csr; /* for the solve that follows: store.h */
        else
            kd_csr_free(csr);
    } else {
        size_t file_bytes = 0;
        if (meta->persist == KD_PERSIST_BEHIND &&
            (rc = kd_cache_file_fits(server, meta, csr, &file_bytes, err)) != KD_OK)
            goto fail;
        /* the only copy until its file is written (or for good): it is never evicted */
        entry->host = csr;
    }
    rc = kd_store_insert(server->store, entry); /* takes entry */
    if (rc != KD_OK)
        return rc;
    /* the owners file, as what is on disk: a behind matrix's line once its file is written,
     * a none matrix's never (a restart skips lines for matrices it does not find) */
    if (meta->persist == KD_PERSIST_SYNC)
        kd_cache_save_owners(server, meta->hex);
    if (meta->persist == KD_PERSIST_BEHIND && kd_cache_queue_behind(server, entry, err) != KD_OK) {
        KD_WARN("cache", "%s: kept in memory only", err->message);
        kd_err_clear(err);
        kd_store_entry_t *e = kd_store_find(server->store, meta->id);
        if (e != NULL)
            e->meta.persist = KD_PERSIST_NONE;
    }
    return KD_OK;
fail:
    kd_csr_free(csr);
    server->spread->discard(server, entry); /* the other ranks' parts too */
    kd_store_entry_free(entry);
    return rc;
}

/* A written matrix's host copy goes, as a sync put's does: its pattern stays for puts with like,
 * and the latest put with like's CSR for the solve that follows (store.h, recent). */
static void kd_cache_release_host(kd_server_t *server, kd_store_entry_t *entry)
{
    if (entry->host == NULL || entry->busy > 0)
        return;
    if (entry->pattern_host == NULL) {
        kd_err_t ignored = {0};
        kd_csr_t *ref = NULL;
        if (kd_csr_pattern_ref(entry->host, &ref, &ignored) == KD_OK)
            entry->pattern_host = ref;
    }
    if (entry->recent == NULL && server->has_like_recent &&
        memcmp(server->like_recent, entry->meta.id, 16) == 0)
        entry->recent = entry->host;
    else
        kd_csr_free(entry->host);
    entry->host = NULL;
}

/* A write the writer thread finished for a matrix that is gone (dropped, or forgotten): its file
 * goes too, and its marker. */
static void kd_cache_unwrite(kd_server_t *server, const kd_writer_item_t *item)
{
    kd_err_t rerr = {0};
    if (item->rc == KD_OK && kd_state_remove(server->state, item->meta.id, &rerr) != KD_OK)
        KD_WARN("cache", "removing the file of dropped matrix %s: %s", item->meta.hex,
                rerr.message);
    kd_state_unmark_behind(server->state, item->meta.id);
    KD_INFO("cache", "write behind id=%s: dropped while written, file removed", item->meta.hex);
}

/* Publish one finished write (worker): the entry is stored, the disk limit kept, its owners line
 * saved, its marker removed, and only then durable. */
static void kd_cache_publish(kd_server_t *server, kd_writer_item_t *item)
{
    kd_store_entry_t *entry = kd_store_find(server->store, item->meta.id);
    if (entry == NULL) {
        kd_cache_unwrite(server, item);
        return;
    }
    if (entry->meta.stored || entry->host != item->csr ||
        entry->meta.persist != KD_PERSIST_BEHIND) { /* not this write's matrix any more */
        if (!entry->meta.stored)
            kd_cache_unwrite(server, item);
        return;
    }
    int rc = item->rc;
    kd_err_t fit = {0}; /* --state-max-bytes as it is now, as a write on the worker checked it */
    if (rc == KD_OK &&
        (rc = kd_cache_disk_fits(server, item->file_bytes, entry->meta.hex, &fit)) != KD_OK) {
        kd_err_t rerr = {0};
        if (kd_state_remove(server->state, item->meta.id, &rerr) != KD_OK)
            KD_WARN("cache", "%s", rerr.message);
        item->err = fit;
    }
    if (rc != KD_OK) {
        KD_WARN("cache", "write behind failed id=%s: %s; the matrix is kept in memory only",
                entry->meta.hex, item->err.message);
        entry->meta.persist = KD_PERSIST_NONE;
    } else {
        kd_store_set_file(server->store, entry, 1, item->file_bytes);
        kd_err_t herr = {0}; /* pinned or renamed after it was queued: the header follows */
        if ((entry->meta.pinned != item->meta.pinned ||
             strcmp(entry->meta.name, item->meta.name) != 0) &&
            kd_state_update_header(server->state, &entry->meta, &herr) != KD_OK)
            KD_WARN("cache", "%s", herr.message);
        KD_INFO("cache", "write behind id=%s file_bytes=%zu ms=%.1f waited_ms=%.1f",
                entry->meta.hex, item->file_bytes, (double)item->write_ns / 1e6,
                (double)(kd_clock_ns() - item->queued_ns - item->write_ns) / 1e6);
        kd_cache_make_disk_room(server, entry, 1);
        kd_cache_save_owners(server, entry->meta.hex);
        kd_cache_release_host(server, entry);
    }
    kd_state_unmark_behind(server->state, item->meta.id);
    kd_store_set_behind(server->store, entry, 0); /* durable now: file, owners, no marker */
}

/* Publish the writes the writer thread finished (id NULL), or matrix id's. */
static void kd_cache_publish_done(kd_server_t *server, const uint8_t *id)
{
    if (server->writer == NULL)
        return;
    kd_writer_item_t *item = kd_writer_take_done(server->writer, id);
    while (item != NULL) {
        kd_writer_item_t *next = item->next;
        kd_cache_publish(server, item);
        kd_writer_item_free(item);
        item = next;
    }
}

int kd_cache_write_behind(void *arg, int queue_empty)
{
    (void)queue_empty; /* publishing is short: done between any two jobs */
    kd_cache_publish_done(arg, NULL);
    return 0;
}

int kd_cache_start_writer(kd_server_t *server, void (*wake)(void *ctx), void *wake_ctx)
{
    if (server->state == NULL)
        return KD_OK;
    return kd_writer_start(server->state, wake, wake_ctx, &server->writer);
}

void kd_cache_stop_writer(kd_server_t *server)
{
    if (server->writer == NULL)
        return;
    const size_t pending = kd_writer_pending(server->writer);
    if (pending > 0)
        KD_INFO("cache", "writing %zu file(s) behind their replies before exit", pending);
    kd_writer_drain(server->writer);
    kd_cache_publish_done(server, NULL);
}

/* Matrix id is about to be written by the worker (sync) or queued again: a queued write of it is
 * taken back (its marker stays for the caller), one being written waited for, and a finished one
 * published (a dropped copy's file removed), so that two writes of one file never overlap. */
static void kd_cache_writer_settle(kd_server_t *server, const uint8_t id[16])
{
    if (server->writer == NULL)
        return;
    kd_writer_item_t *cancelled = kd_writer_cancel(server->writer, id);
    while (cancelled != NULL) {
        kd_writer_item_t *next = cancelled->next;
        kd_writer_item_free(cancelled);
        cancelled = next;
    }
    kd_writer_wait(server->writer, id);
    kd_cache_publish_done(server, id); /* this matrix's only: the caller holds other entries */
}

int kd_cache_persist_upgrade(kd_server_t *server, kd_store_entry_t *entry, int persist,
                             kd_err_t *err)
{
    if (server->state == NULL || entry->meta.stored || entry->host == NULL ||
        persist == KD_PERSIST_DEFAULT || persist >= entry->meta.persist)
        return KD_OK; /* (kd_persist_t: a smaller value is the stronger choice) */
    if (persist == KD_PERSIST_SYNC) {
        kd_cache_writer_settle(server, entry->meta.id); /* may have written it: then stored */
        if (entry->meta.stored) {
            entry->meta.persist = KD_PERSIST_SYNC;
            KD_INFO("cache", "persist id=%s sync (its write behind had just ended)",
                    entry->meta.hex);
            return KD_OK;
        }
        int rc = kd_cache_write_file(server, entry, entry->host, 1, err);
        if (rc != KD_OK)
            return rc;
        if (entry->meta.persist == KD_PERSIST_BEHIND)
            kd_state_unmark_behind(server->state, entry->meta.id);
        entry->meta.persist = KD_PERSIST_SYNC;
        kd_cache_save_owners(server, entry->meta.hex);
        kd_store_set_behind(server->store, entry, 0);
        KD_INFO("cache", "persist id=%s sync (was behind or none)", entry->meta.hex);
        kd_cache_release_host(server, entry);
        return KD_OK;
    }
    int rc = kd_cache_queue_behind(server, entry, err);
    if (rc == KD_OK)
        entry->meta.persist = KD_PERSIST_BEHIND;
    return rc;
}

/* The references of entry as they were before a change, to put back when recording it fails. */
typedef struct kd_cache_refs {
    int pinned, nowners;
    kd_owner_t owners[KD_OWNERS_MAX];
} kd_cache_refs_t;

static void kd_cache_refs_save(const kd_store_entry_t *entry, kd_cache_refs_t *refs)
{
    refs->pinned = entry->meta.pinned;
    refs->nowners = entry->meta.nowners;
    memcpy(refs->owners, entry->meta.owners, sizeof(refs->owners));
}

/* Record a change of entry's references (state file header when its pin changed, then
 * STATE_DIR/owners); when that fails, put the references back as refs says. */
static int kd_cache_refs_record(kd_server_t *server, kd_store_entry_t *entry,
                                const kd_cache_refs_t *refs, kd_err_t *err)
{
    int rc = KD_OK;
    if (server->state != NULL && entry->meta.stored && entry->meta.pinned != refs->pinned)
        rc = kd_state_update_header(server->state, &entry->meta, err); /* worker: in place */
    if (rc == KD_OK)
        rc = kd_owners_save(server, err);
    if (rc != KD_OK) {
        /* whole: names, pins, labels, uses and the order the user's list follows */
        kd_store_restore_owners(server->store, entry, refs->owners, refs->nowners);
        kd_store_set_pinned(server->store, entry, refs->pinned);
    }
    return rc;
}

int kd_cache_set_pinned(kd_server_t *server, kd_store_entry_t *entry, const char *user, int pinned,
                        const char *label, kd_err_t *err)
{
    if (pinned && entry->dev == NULL && entry->dist == NULL) {
        kd_store_entry_t *loaded;
        int rc = kd_cache_use(server, entry->meta.id, 0, &loaded, err);
        if (rc != KD_OK)
            return rc;
    }
    kd_cache_refs_t refs;
    kd_cache_refs_save(entry, &refs);
    int now;
    if (user != NULL) {
        int rc = kd_store_add_owner(server->store, entry, user, pinned, err);
        if (rc != KD_OK)
            return rc;
        if (label != NULL)
            kd_store_set_owner_label(server->store, entry, user, label);
        now = entry->meta.pinned;
    } else {
        now = kd_store_set_owner_pin(server->store, entry, NULL, pinned);
    }
    if (kd_cache_refs_record(server, entry, &refs, err) != KD_OK)
        return kd_err_prefix(err, "recording the pin of matrix %s", entry->meta.hex);
    KD_INFO("cache", "%s id=%s user=%s pinned=%d", pinned ? "pin" : "unpin", entry->meta.hex,
            user != NULL ? user : "*", now);
    return KD_OK;
}

int kd_cache_drop(kd_server_t *server, const uint8_t id[16], const char *user, kd_err_t *err)
{
    kd_store_entry_t *entry = kd_store_find(server->store, id);
    if (entry == NULL) {
        char hex[KD_ID_HEX_LEN + 1];
        kd_id_to_hex(id, hex);
        return kd_err_set(err, KD_ENOTFOUND, "no matrix %s on this server", hex);
    }
    if (user != NULL && entry->meta.nowners > 1 && kd_meta_owner(&entry->meta, user) >= 0) {
        kd_cache_refs_t refs;
        kd_cache_refs_save(entry, &refs);
        kd_store_remove_owner(server->store, entry, user);
        if (kd_cache_refs_record(server, entry, &refs, err) != KD_OK)
            return kd_err_prefix(err, "dropping %s's reference to matrix %s", user,
                                 entry->meta.hex);
        KD_INFO("store", "drop id=%s user=%s (%d references left)", entry->meta.hex, user,
                entry->meta.nowners);
        return KD_OK;
    }
    if (server->state != NULL && entry->meta.stored) {
        int rc = kd_state_remove(server->state, id, err);
        if (rc != KD_OK)
            return rc;
    } else if (server->state != NULL && entry->meta.persist == KD_PERSIST_BEHIND) {
        /* a queued write goes; one being written is not waited for: its file is removed when
         * it ends (kd_cache_publish), and the marker now, so a crash meanwhile loses nothing */
        kd_writer_item_t *cancelled =
            server->writer != NULL ? kd_writer_cancel(server->writer, id) : NULL;
        while (cancelled != NULL) {
            kd_writer_item_t *next = cancelled->next;
            kd_writer_item_free(cancelled);
            cancelled = next;
        }
        kd_state_unmark_behind(server->state, id);
    }
    KD_INFO("store", "drop id=%s user=%s", entry->meta.hex, user != NULL ? user : "*");
    if (entry->dist != NULL)
        server->spread->forget(server, id);
    kd_store_entry_free(kd_store_remove(server->store, id));
    kd_store_refresh_all_bytes(server->store); /* a freed sharer's pattern bytes moved */
    if (server->state != NULL) /* its pattern file's charge, moved to another matrix */
        kd_cache_settle(server, NULL);
    kd_err_t ignored = {0};
    if (kd_owners_save(server, &ignored) != KD_OK) /* a stale line is ignored at start-up */
        KD_WARN("owners", "%s", ignored.message);
    return KD_OK;
}
