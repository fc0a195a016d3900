/*
 * The matrix registry (see store.h): a growable array of entries under a mutex. A server holds
 * hundreds of matrices at most — each one is megabytes to gigabytes of device memory — so a
 * linear scan over 16-byte ids (and over last-used times for the LRU victim) costs nothing next
 * to any request that uses them.
 */
#include "server/store/store.h"
#include "common/clock.h"
#include "common/error.h"
#ifdef KD_MPI
#include "dist/dist_matrix.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

struct kd_store {
    pthread_mutex_t lock;
    kd_store_entry_t **entries;
    size_t count, cap;
    uint64_t counters[KD_STORE_COUNTER_COUNT];
};

int kd_store_new(kd_store_t **out)
{
    kd_store_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return KD_ENOMEM;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return KD_EINTERNAL;
    }
    *out = s;
    return KD_OK;
}

void kd_store_entry_free(kd_store_entry_t *entry)
{
    if (entry == NULL)
        return;
    kd_matrix_free(entry->dev);
#ifdef KD_MPI
    kd_dist_matrix_free(entry->dist); /* rank 0's part; the other ranks' go with DROP or STOP */
#endif
    kd_csr_free(entry->host);
    kd_csr_free(entry->pattern_host);
    kd_csr_free(entry->recent);
    free(entry);
}

void kd_store_free(kd_store_t *store)
{
    if (store == NULL)
        return;
    for (size_t i = 0; i < store->count; i++)
        kd_store_entry_free(store->entries[i]);
    free(store->entries);
    pthread_mutex_destroy(&store->lock);
    free(store);
}

/* The entry with `id` and its position in *index (when not NULL), or NULL. The lock is held. */
static kd_store_entry_t *kd_store_locate(const kd_store_t *store, const uint8_t id[16],
                                         size_t *index)
{
    for (size_t i = 0; i < store->count; i++)
        if (memcmp(store->entries[i]->meta.id, id, 16) == 0) {
            if (index != NULL)
                *index = i;
            return store->entries[i];
        }
    return NULL;
}

kd_store_entry_t *kd_store_lookup(kd_store_t *store, const uint8_t id[16])
{
    pthread_mutex_lock(&store->lock);
    kd_store_entry_t *e = kd_store_locate(store, id, NULL);
    if (e != NULL) {
        e->meta.last_used_ns = kd_clock_ns();
        e->meta.uses++;
    }
    pthread_mutex_unlock(&store->lock);
    return e;
}

kd_store_entry_t *kd_store_find(kd_store_t *store, const uint8_t id[16])
{
    pthread_mutex_lock(&store->lock);
    kd_store_entry_t *e = kd_store_locate(store, id, NULL);
    pthread_mutex_unlock(&store->lock);
    return e;
}

kd_store_entry_t *kd_store_find_sibling(kd_store_t *store, const kd_store_entry_t *entry)
{
    const kd_matrix_meta_t *m = &entry->meta;
    if (!m->has_pattern)
        return NULL;
    kd_store_entry_t *found = NULL;
    pthread_mutex_lock(&store->lock);
    for (size_t i = 0; i < store->count && found == NULL; i++) {
        kd_store_entry_t *e = store->entries[i];
        const kd_matrix_meta_t *o = &e->meta;
        if (e != entry && e->dev != NULL && o->has_pattern &&
            memcmp(o->pattern, m->pattern, 16) == 0 && o->format == m->format &&
            o->reorder == m->reorder && o->dtype == m->dtype && o->batch == 0 && m->batch == 0)
            found = e;
    }
    pthread_mutex_unlock(&store->lock);
    return found;
}

int kd_store_insert(kd_store_t *store, kd_store_entry_t *entry)
{
    pthread_mutex_lock(&store->lock);
    if (store->count == store->cap) {
        size_t cap = store->cap ? store->cap * 2 : 16;
        kd_store_entry_t **grown = realloc(store->entries, cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&store->lock);
            kd_store_entry_free(entry);
            return KD_ENOMEM;
        }
        store->entries = grown;
        store->cap = cap;
    }
    uint64_t now = kd_clock_ns();
    entry->meta.created_ns = now;
    if (entry->meta.last_used_ns == 0)
        entry->meta.last_used_ns = now;
    entry->meta.resident = entry->dev != NULL || entry->dist != NULL;
    if (entry->dev != NULL)
        entry->meta.device_bytes = entry->dev->device_bytes;
    store->entries[store->count++] = entry;
    pthread_mutex_unlock(&store->lock);
    return KD_OK;
}

kd_store_entry_t *kd_store_remove(kd_store_t *store, const uint8_t id[16])
{
    pthread_mutex_lock(&store->lock);
    size_t i = 0;
    kd_store_entry_t *e = kd_store_locate(store, id, &i);
    if (e != NULL) {
        memmove(&store->entries[i], &store->entries[i + 1],
                (store->count - i - 1) * sizeof(*store->entries));
        store->count--;
    }
    pthread_mutex_unlock(&store->lock);
    return e;
}

void kd_store_set_pinned(kd_store_t *store, kd_store_entry_t *entry, int pinned)
{
    pthread_mutex_lock(&store->lock);
    entry->meta.pinned = pinned;
    pthread_mutex_unlock(&store->lock);
}

kd_matrix_t *kd_store_set_device(kd_store_t *store, kd_store_entry_t *entry, kd_matrix_t *dev)
{
    pthread_mutex_lock(&store->lock);
    kd_matrix_t *old = entry->dev;
    entry->dev = dev;
    entry->meta.resident = dev != NULL;
    if (dev != NULL) {
        entry->meta.device_bytes = dev->device_bytes;
        entry->meta.symmetric = dev->scan.symmetric; /* a reload scans again */
    }
    pthread_mutex_unlock(&store->lock);
    return old;
}

void kd_store_set_spread(kd_store_t *store, kd_store_entry_t *entry, struct kd_dist_matrix *dist,
                         const kd_matrix_meta_t *from)
{
    pthread_mutex_lock(&store->lock);
    kd_matrix_meta_t *m = &entry->meta;
    entry->dist = dist;
    m->resident = 1;
    m->format = from->format;
    m->detail = from->detail;
    m->device_bytes = from->device_bytes;
    m->symmetric = from->symmetric;
    m->distributed = from->distributed;
    m->ranks = from->ranks;
    memcpy(m->rank_rows, from->rank_rows, sizeof(m->rank_rows));
    memcpy(m->rank_nnz, from->rank_nnz, sizeof(m->rank_nnz));
    memcpy(m->rank_ghosts, from->rank_ghosts, sizeof(m->rank_ghosts));
    memcpy(m->rank_sends, from->rank_sends, sizeof(m->rank_sends));
    pthread_mutex_unlock(&store->lock);
}

void kd_store_refresh_bytes(kd_store_t *store, kd_store_entry_t *entry)
{
    pthread_mutex_lock(&store->lock);
    if (entry->dev != NULL)
        entry->meta.device_bytes = entry->dev->device_bytes;
    pthread_mutex_unlock(&store->lock);
}

void kd_store_refresh_all_bytes(kd_store_t *store)
{
    pthread_mutex_lock(&store->lock);
    for (size_t i = 0; i < store->count; i++) {
        kd_store_entry_t *e = store->entries[i];
        if (e->dev != NULL)
            e->meta.device_bytes = e->dev->device_bytes;
    }
    pthread_mutex_unlock(&store->lock);
}

void kd_store_set_file(kd_store_t *store, kd_store_entry_t *entry, int stored, size_t file_bytes)
{
    pthread_mutex_lock(&store->lock);
    entry->meta.stored = stored;
    entry->meta.file_bytes = stored ? file_bytes : 0;
    pthread_mutex_unlock(&store->lock);
}

void kd_store_set_behind(kd_store_t *store, kd_store_entry_t *entry, int behind)
{
    pthread_mutex_lock(&store->lock);
    entry->meta.behind = behind;
    pthread_mutex_unlock(&store->lock);
}

/* Whether e may be forgotten or evicted (kd_store_lru_victim). The lock is held. */
static int kd_store_evictable(const kd_store_entry_t *e)
{
    /* a spread matrix stays: bringing it back is a collective re-spread */
    return !e->meta.pinned && e->meta.stored && e->busy == 0 && !e->meta.distributed;
}

kd_store_entry_t *kd_store_lru_victim(kd_store_t *store, const kd_store_entry_t *except,
                                      int resident_only)
{
    pthread_mutex_lock(&store->lock);
    kd_store_entry_t *best = NULL;
    for (size_t i = 0; i < store->count; i++) {
        kd_store_entry_t *e = store->entries[i];
        if (e == except || !kd_store_evictable(e))
            continue;
        if (resident_only && e->dev == NULL)
            continue;
        if (best == NULL || e->meta.last_used_ns < best->meta.last_used_ns)
            best = e;
    }
    pthread_mutex_unlock(&store->lock);
    return best;
}

void kd_store_held_device_bytes(kd_store_t *store, const kd_store_entry_t *except, size_t *fixed,
                                size_t *busy)
{
    *fixed = *busy = 0;
    pthread_mutex_lock(&store->lock);
    for (size_t i = 0; i < store->count; i++) {
        const kd_store_entry_t *e = store->entries[i];
        if (e == except || !e->meta.resident)
            continue;
        if (e->meta.pinned || !e->meta.stored || e->meta.distributed)
            *fixed += e->meta.device_bytes;
        else if (e->busy > 0)
            *busy += e->meta.device_bytes;
    }
    pthread_mutex_unlock(&store->lock);
}

size_t kd_store_evictable_file_bytes(kd_store_t *store)
{
    pthread_mutex_lock(&store->lock);
    size_t total = 0;
    for (size_t i = 0; i < store->count; i++)
        if (kd_store_evictable(store->entries[i]))
            total += store->entries[i]->meta.file_bytes;
    pthread_mutex_unlock(&store->lock);
    return total;
}

int kd_meta_owner(const kd_matrix_meta_t *meta, const char *user)
{
    for (int i = 0; i < meta->nowners; i++)
        if (strcmp(meta->owners[i].name, user) == 0)
            return i;
    return -1;
}

int kd_meta_visible(const kd_matrix_meta_t *meta, const char *user, int admin)
{
    return admin || kd_meta_owner(meta, user) >= 0;
}

void kd_meta_view(kd_matrix_meta_t *meta, const char *user, kd_meta_scope_t scope)
{
    int i = kd_meta_owner(meta, user);
    if (i >= 0)
        meta->pinned = meta->owners[i].pinned;
    if (scope == KD_META_ALL)
        return;
    if (i >= 0) {
        meta->uses = meta->owners[i].uses;
        if (meta->owners[i].label[0] != '\0')
            snprintf(meta->name, sizeof(meta->name), "%s", meta->owners[i].label);
    }
    if (meta->tenant[0] != '\0' && strcmp(meta->tenant, user) == 0)
        return; /* its own copy: the selection timed it for this user */
    meta->hide_selection = 1;
    if (strstr(meta->reorder_reason, " ms") != NULL) { /* "rcm: 0.0675 ms ...": the upload's */
        const size_t kind = strcspn(meta->reorder_reason, ":");
        snprintf(meta->reorder_reason + kind, sizeof(meta->reorder_reason) - kind,
                 ": timed at upload");
    }
    if (meta->alone_bytes != 0) /* not another user's preconditioners or shared arrays */
        meta->device_bytes = meta->alone_bytes;
    meta->has_pattern = 0;
    meta->has_like = 0;
}

void kd_id_mix_tenant(uint8_t id[16], const char *user)
{
    uint8_t buf[16 + KD_AUTH_NAME_MAX];
    const size_t n = strnlen(user, KD_AUTH_NAME_MAX - 1);
    memcpy(buf, id, 16);
    memcpy(buf + 16, user, n);
    XXH128_canonical_t h;
    XXH128_canonicalFromHash(&h, XXH3_128bits_withSeed(buf, 16 + n, 0x74656e616e74ULL));
    memcpy(id, h.digest, 16);
}

void kd_store_note_use(kd_store_t *store, const uint8_t id[16], const char *user)
{
    pthread_mutex_lock(&store->lock);
    kd_store_entry_t *e = kd_store_locate(store, id, NULL);
    int i = e != NULL ? kd_meta_owner(&e->meta, user) : -1;
    if (i >= 0)
        e->meta.owners[i].uses++;
    pthread_mutex_unlock(&store->lock);
}

void kd_store_set_owner_label(kd_store_t *store, kd_store_entry_t *entry, const char *user,
                              const char *label)
{
    pthread_mutex_lock(&store->lock);
    int i = kd_meta_owner(&entry->meta, user);
    if (i >= 0)
        snprintf(entry->meta.owners[i].label, sizeof(entry->meta.owners[i].label), "%s", label);
    pthread_mutex_unlock(&store->lock);
}

/* The entry's pinned flag from its references. The lock is held. */
static void kd_store_repin(kd_matrix_meta_t *meta)
{
    meta->pinned = 0;
    for (int i = 0; i < meta->nowners; i++)
        meta->pinned |= meta->owners[i].pinned != 0;
}

void kd_store_restore_owners(kd_store_t *store, kd_store_entry_t *entry, const kd_owner_t *owners,
                             int n)
{
    pthread_mutex_lock(&store->lock);
    memcpy(entry->meta.owners, owners, (size_t)n * sizeof(*owners));
    entry->meta.nowners = n;
    kd_store_repin(&entry->meta);
    pthread_mutex_unlock(&store->lock);
}

int kd_store_add_owner(kd_store_t *store, kd_store_entry_t *entry, const char *user, int pinned,
                       kd_err_t *err)
{
    pthread_mutex_lock(&store->lock);
    kd_matrix_meta_t *m = &entry->meta;
    int i = kd_meta_owner(m, user);
    if (i < 0 && m->nowners == KD_OWNERS_MAX) {
        pthread_mutex_unlock(&store->lock);
        return kd_err_set(err, KD_ETOOLARGE,
                          "matrix %s already has %d owners, the most one matrix may have", m->hex,
                          KD_OWNERS_MAX);
    }
    if (i < 0) {
        i = m->nowners++;
        memset(&m->owners[i], 0, sizeof(m->owners[i]));
        snprintf(m->owners[i].name, sizeof(m->owners[i].name), "%s", user);
        m->owners[i].added_ns = kd_clock_ns();
    }
    m->owners[i].pinned = pinned != 0;
    kd_store_repin(m);
    pthread_mutex_unlock(&store->lock);
    return KD_OK;
}

int kd_store_remove_owner(kd_store_t *store, kd_store_entry_t *entry, const char *user)
{
    pthread_mutex_lock(&store->lock);
    kd_matrix_meta_t *m = &entry->meta;
    if (user == NULL) {
        m->nowners = 0;
    } else {
        int i = kd_meta_owner(m, user);
        if (i >= 0) {
            memmove(&m->owners[i], &m->owners[i + 1],
                    (size_t)(m->nowners - i - 1) * sizeof(m->owners[0]));
            m->nowners--;
        }
    }
    kd_store_repin(m);
    int left = m->nowners;
    pthread_mutex_unlock(&store->lock);
    return left;
}

int kd_store_set_owner_pin(kd_store_t *store, kd_store_entry_t *entry, const char *user, int pinned)
{
    pthread_mutex_lock(&store->lock);
    kd_matrix_meta_t *m = &entry->meta;
    for (int i = 0; i < m->nowners; i++)
        if (user == NULL || strcmp(m->owners[i].name, user) == 0)
            m->owners[i].pinned = pinned != 0;
    kd_store_repin(m);
    int now = m->pinned;
    pthread_mutex_unlock(&store->lock);
    return now;
}

void kd_store_usage(kd_store_t *store, const char *user, kd_usage_t *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&store->lock);
    for (size_t i = 0; i < store->count; i++) {
        const kd_matrix_meta_t *m = &store->entries[i]->meta;
        if (kd_meta_owner(m, user) < 0)
            continue;
        out->matrices++;
        out->device_bytes += m->device_bytes;
        out->state_bytes += m->file_bytes;
    }
    pthread_mutex_unlock(&store->lock);
}

void kd_store_count(kd_store_t *store, kd_store_counter_t counter)
{
    kd_store_count_add(store, counter, 1);
}

void kd_store_count_add(kd_store_t *store, kd_store_counter_t counter, uint64_t n)
{
    pthread_mutex_lock(&store->lock);
    store->counters[counter] += n;
    pthread_mutex_unlock(&store->lock);
}

int kd_store_get_meta(kd_store_t *store, const uint8_t id[16], kd_matrix_meta_t *out)
{
    pthread_mutex_lock(&store->lock);
    const kd_store_entry_t *e = kd_store_locate(store, id, NULL);
    if (e != NULL)
        *out = e->meta;
    pthread_mutex_unlock(&store->lock);
    return e != NULL ? KD_OK : KD_ENOTFOUND;
}

int kd_store_get_shape(kd_store_t *store, const uint8_t id[16], int64_t *rows, int64_t *cols)
{
    pthread_mutex_lock(&store->lock);
    const kd_store_entry_t *e = kd_store_locate(store, id, NULL);
    if (e != NULL) {
        *rows = e->meta.rows;
        *cols = e->meta.cols;
    }
    pthread_mutex_unlock(&store->lock);
    return e != NULL ? KD_OK : KD_ENOTFOUND;
}

int kd_store_list(kd_store_t *store, kd_matrix_meta_t **out, size_t *count)
{
    pthread_mutex_lock(&store->lock);
    kd_matrix_meta_t *list = NULL;
    if (store->count > 0) {
        list = malloc(store->count * sizeof(*list));
        if (list == NULL) {
            pthread_mutex_unlock(&store->lock);
            return KD_ENOMEM;
        }
        for (size_t i = 0; i < store->count; i++)
            list[i] = store->entries[i]->meta;
    }
    *count = store->count;
    pthread_mutex_unlock(&store->lock);
    *out = list;
    return KD_OK;
}

void kd_store_totals(kd_store_t *store, kd_store_totals_t *out)
{
    memset(out, 0, sizeof(*out));
    pthread_mutex_lock(&store->lock);
    out->matrices = store->count;
    for (size_t i = 0; i < store->count; i++) {
        const kd_matrix_meta_t *m = &store->entries[i]->meta;
        out->pinned += m->pinned != 0;
        out->file_bytes += m->file_bytes;
        if (m->pinned)
            out->pinned_file_bytes += m->file_bytes;
        if (m->resident) {
            out->resident++;
            out->device_bytes += m->device_bytes;
            if (m->pinned)
                out->pinned_bytes += m->device_bytes;
        }
    }
    memcpy(out->counters, store->counters, sizeof(out->counters));
    pthread_mutex_unlock(&store->lock);
}
