/*
 * The matrix registry (see store.h): a growable array of entries under a mutex. A server holds
 * hundreds of matrices at most — each one is megabytes to gigabytes of device memory — so a
 * linear scan over 16-byte ids costs nothing next to any request that uses them.
 */
#include "server/store.h"
#include "common/error.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct kd_store {
    pthread_mutex_t lock;
    kd_store_entry_t **entries;
    size_t count, cap;
    size_t device_bytes;
};

static uint64_t kd_store_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

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

static size_t kd_store_index(const kd_store_t *store, const uint8_t id[16])
{
    for (size_t i = 0; i < store->count; i++)
        if (memcmp(store->entries[i]->meta.id, id, 16) == 0)
            return i;
    return SIZE_MAX;
}

kd_store_entry_t *kd_store_lookup(kd_store_t *store, const uint8_t id[16])
{
    pthread_mutex_lock(&store->lock);
    size_t i = kd_store_index(store, id);
    kd_store_entry_t *e = NULL;
    if (i != SIZE_MAX) {
        e = store->entries[i];
        e->meta.last_used_ns = kd_store_now_ns();
        e->meta.uses++;
    }
    pthread_mutex_unlock(&store->lock);
    return e;
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
    entry->meta.created_ns = entry->meta.last_used_ns = kd_store_now_ns();
    store->entries[store->count++] = entry;
    store->device_bytes += entry->meta.device_bytes;
    pthread_mutex_unlock(&store->lock);
    return KD_OK;
}

kd_store_entry_t *kd_store_remove(kd_store_t *store, const uint8_t id[16])
{
    pthread_mutex_lock(&store->lock);
    size_t i = kd_store_index(store, id);
    kd_store_entry_t *e = NULL;
    if (i != SIZE_MAX) {
        e = store->entries[i];
        memmove(&store->entries[i], &store->entries[i + 1],
                (store->count - i - 1) * sizeof(*store->entries));
        store->count--;
        store->device_bytes -= e->meta.device_bytes;
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

int kd_store_get_meta(kd_store_t *store, const uint8_t id[16], kd_matrix_meta_t *out)
{
    pthread_mutex_lock(&store->lock);
    size_t i = kd_store_index(store, id);
    if (i != SIZE_MAX)
        *out = store->entries[i]->meta;
    pthread_mutex_unlock(&store->lock);
    return i != SIZE_MAX ? KD_OK : KD_ENOTFOUND;
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
    pthread_mutex_lock(&store->lock);
    out->matrices = store->count;
    out->device_bytes = store->device_bytes;
    pthread_mutex_unlock(&store->lock);
}
