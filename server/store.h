/*
 * The matrix registry: content id -> metadata and the device-resident matrix. Metadata is read
 * from the loop thread (matrix.info, matrix.list, server.status) and written by the worker, under
 * one mutex; the device matrix itself is only touched on the worker thread, which is also the only
 * thread that inserts or removes entries, so an entry the worker looked up stays valid while it
 * works on it.
 */
#ifndef KD_SERVER_STORE_H
#define KD_SERVER_STORE_H

#include "common/csr.h"
#include "protocol/request.h"
#include "solver/matrix.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* One format's outcome at selection time (matrix.info `candidates`). */
typedef struct kd_candidate {
    kd_format_t format;
    double time_ms;   /* measured SpMV time, when timed */
    char dropped[96]; /* why it was not timed, or "" */
} kd_candidate_t;

typedef struct kd_matrix_meta {
    uint8_t id[16];
    char hex[KD_ID_HEX_LEN + 1];
    char name[KD_NAME_MAX];
    int64_t rows, cols, nnz;
    kd_dtype_t dtype;
    kd_format_t format;
    size_t device_bytes;
    kd_csr_stats_t stats;
    int pinned;
    uint64_t created_ns;
    uint64_t last_used_ns;
    uint64_t uses;
    int ncandidates;
    kd_candidate_t candidates[KD_FMT_COUNT];
} kd_matrix_meta_t;

typedef struct kd_store_entry {
    kd_matrix_meta_t meta;
    kd_matrix_t *dev; /* worker thread only */
} kd_store_entry_t;

typedef struct kd_store kd_store_t;

int kd_store_new(kd_store_t **out);
/* Frees every entry's device matrix: call from the thread that owns the device, after the worker
 * stopped. Accepts NULL. */
void kd_store_free(kd_store_t *store);

/* Worker thread: the entry for id, or NULL. Marks it used. */
kd_store_entry_t *kd_store_lookup(kd_store_t *store, const uint8_t id[16]);

/* Worker thread: add an entry (ownership passes, also on failure). KD_ENOMEM. */
int kd_store_insert(kd_store_t *store, kd_store_entry_t *entry);

/* Worker thread: unlink and return the entry for id (the caller frees it with
 * kd_store_entry_free), or NULL. */
kd_store_entry_t *kd_store_remove(kd_store_t *store, const uint8_t id[16]);

void kd_store_entry_free(kd_store_entry_t *entry); /* frees the device matrix too; accepts NULL */

/* Worker thread: update the pinned flag under the lock. */
void kd_store_set_pinned(kd_store_t *store, kd_store_entry_t *entry, int pinned);

/* Any thread: a copy of the metadata. KD_ENOTFOUND. */
int kd_store_get_meta(kd_store_t *store, const uint8_t id[16], kd_matrix_meta_t *out);

/* Any thread: copies of every entry's metadata, oldest first (*out malloc'd, may be NULL when
 * *count is 0). */
int kd_store_list(kd_store_t *store, kd_matrix_meta_t **out, size_t *count);

typedef struct kd_store_totals {
    size_t matrices;
    size_t device_bytes;
} kd_store_totals_t;

void kd_store_totals(kd_store_t *store, kd_store_totals_t *out);

#endif
