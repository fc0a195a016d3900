/*
 * The matrix registry: content id -> metadata and, while the matrix is resident, its device copy.
 * Metadata is read from the loop thread (matrix.info, matrix.list, server.status) and written by
 * the worker, under one mutex; the device matrix itself is only touched on the worker thread,
 * which is also the only thread that inserts or removes entries, so an entry the worker looked up
 * stays valid while it works on it.
 *
 * An entry need not be resident: after an eviction or a restart only its metadata (from the state
 * file's header) is here, and server/store/cache.c loads it again on first use. Without a state
 * directory an entry keeps the matrix's canonical CSR in host memory instead of a file (work done
 * on the host, such as matrix.multiply's operands, reads it from one or the other). The store keeps
 * the totals the cache decides by (resident bytes, file bytes) and the cache counters.
 */
#ifndef KD_SERVER_STORE_H
#define KD_SERVER_STORE_H

#include "common/csr.h"
#include "common/error.h"
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

/* One user's reference to a matrix (tenants: docs/PROTOCOL.md, "Owners"). A matrix is stored once
 * however many users put it; each has its own reference, its own pin, the name it gave and its
 * own count of uses, so that nothing of one user's use shows in another's replies. */
#define KD_OWNERS_MAX 32
typedef struct kd_owner {
    char name[KD_AUTH_NAME_MAX];
    int pinned;
    char label[KD_NAME_MAX]; /* the matrix's name in this user's put ("" : the stored one) */
    uint64_t uses;           /* this user's requests on it (kd_store_note_use) */
    uint64_t added_ns;       /* CLOCK_MONOTONIC: when it became this user's (matrix.list order) */
} kd_owner_t;

/* How much of a matrix's metadata a reply shows (kd_meta_view). */
typedef enum kd_meta_scope {
    KD_META_ALL = 0, /* no auth file, or an admin: every figure, uses summed over all users */
    KD_META_OWN,     /* a user among tenants: its own figures, none that another user's use moves */
} kd_meta_scope_t;

#define KD_META_RANKS_MAX 64

typedef struct kd_matrix_meta {
    uint8_t id[16];
    char hex[KD_ID_HEX_LEN + 1];
    char name[KD_NAME_MAX];
    int64_t rows, cols, nnz;
    kd_dtype_t dtype;
    kd_format_t format;
    size_t device_bytes;
    /* the stored format's own device bytes, as its upload made them: no arrays shared with another
     * matrix, no preconditioners (a user's view of shared content shows these: kd_meta_view);
     * kept in the state file's header; 0: not known (a file from before it) */
    size_t alone_bytes;
    kd_csr_stats_t stats;
    int pinned;  /* some owner pinned it: what eviction and the state header go by */
    int nowners; /* the references; 0 only while start-up reads the state */
    kd_owner_t owners[KD_OWNERS_MAX];
    int resident;      /* in device memory now (dev != NULL) */
    int stored;        /* has a file in the state directory */
    size_t file_bytes; /* that file's size */
    /* When its file is written (kd_persist_t, matrix.put's persist): sync (before the reply; and
     * every matrix read from the state directory), behind (after it: stored turns 1 once the
     * worker wrote it), none (never; also every matrix of a server without a state directory) */
    int persist;
    /* its write behind is queued or under way: not durable yet, even once stored turns 1 (its
     * owners' line and the marker's removal come after the file) */
    int behind;
    uint64_t created_ns;
    uint64_t last_used_ns; /* CLOCK_MONOTONIC: the LRU order for both device and disk eviction */
    uint64_t uses;
    int ncandidates;
    kd_candidate_t candidates[KD_FMT_COUNT];
    kd_format_detail_t detail; /* the format's description (matrix.info `format_detail`) */
    kd_reorder_t reorder;      /* the ordering kept (a reload recomputes it from it) */
    int64_t bandwidth_before, bandwidth_after; /* of A and of P A P^T */
    char reorder_reason[96];                   /* why (matrix.info `reorder_reason`) */
    /* The upload's scan: a_ij == a_ji exactly (kd_matrix_scan_t.symmetric); -1: not known (a
     * state file from before it, until the matrix is loaded again) */
    int symmetric;
    /* 0: one matrix; k >= 1: a batch of k systems (solver/batch/batch.h), rows, cols and nnz being
     * the block diagonal's totals */
    int64_t batch;
    /* Spread over the ranks of an MPI job (server/handlers/spread.c): distributed from matrix.put
     * on (kept in the state file's header), ranks > 0 once rank 0 spread it in this process; then
     * per rank (the first KD_META_RANKS_MAX) its rows, nonzeros, ghosts received and entries
     * sent per SpMV. Not spread: all 0. */
    int distributed, ranks;
    int64_t rank_rows[KD_META_RANKS_MAX], rank_nnz[KD_META_RANKS_MAX];
    int64_t rank_ghosts[KD_META_RANKS_MAX], rank_sends[KD_META_RANKS_MAX];
    /* The canonical pattern's hash (server/pattern.h), once something needed it: a put with
     * like names it; not kept in the state file (recomputed from the matrix when asked for). */
    int has_pattern;
    uint8_t pattern[16];
    /* Put with like (server/handlers/like.c): that matrix, whose preconditioners a solve on this
     * one refreshes rather than builds (kd_precond_refresh), and how many it refreshed. In memory
     * only: after a restart the two are unrelated matrices. */
    int has_like;
    uint8_t like[16];
    int64_t preconds_refreshed;
    /* --tenant-dedupe off: the user this copy was stored for (its id is the content's mixed with
     * the name: kd_id_mix_tenant), kept in the state file's header; "": content shared by id */
    char tenant[KD_AUTH_NAME_MAX];
    /* Set by kd_meta_view for a user that may share the stored copy with others: the reply leaves
     * out the upload's selection (candidates and their timings) */
    int hide_selection;
} kd_matrix_meta_t;

typedef struct kd_store_entry {
    kd_matrix_meta_t meta;
    kd_matrix_t *dev; /* worker thread only; NULL when not resident */
    kd_csr_t *host;   /* worker thread only: the canonical CSR, kept without a state directory */
    /* worker thread only: its canonical pattern (values NULL, arrays shared: kd_csr_with_values),
     * kept once a put with like used it, so the next one reads no file; or NULL */
    kd_csr_t *pattern_host;
    /* worker thread only, with a state directory: the latest put with like's canonical CSR (its
     * pattern shared), kept so that the solve that follows (which refreshes the like matrix's
     * preconditioners against it) reads no file; one such copy in the server at a time
     * (server->like_recent): the next put with like frees it. keep_recent asks kd_cache_admit to
     * keep it. */
    kd_csr_t *recent;
    int keep_recent;
    struct kd_dist_matrix
        *dist; /* worker thread only: rank 0's part of a spread matrix (then
                  dev is NULL), or NULL; never evicted (server/handlers/spread.c) */
    int busy;  /* worker thread only: jobs using it across a yield or in a group (spmv.c);
                  never evicted or removed while > 0 */
} kd_store_entry_t;

typedef struct kd_store kd_store_t;

int kd_store_new(kd_store_t **out);
/* Frees every entry's device matrix: call from the thread that owns the device, after the worker
 * stopped. Accepts NULL. */
void kd_store_free(kd_store_t *store);

/* Worker thread: the entry for id, or NULL. Marks it used. */
kd_store_entry_t *kd_store_lookup(kd_store_t *store, const uint8_t id[16]);

/* Worker thread: the entry for id without marking it used, or NULL. */
kd_store_entry_t *kd_store_find(kd_store_t *store, const uint8_t id[16]);

/* Worker thread (or start-up, before the worker runs): add an entry (ownership passes, also on
 * failure). Its created/last-used times are set to now unless last_used_ns is already set.
 * KD_ENOMEM. */
int kd_store_insert(kd_store_t *store, kd_store_entry_t *entry);

/* Worker thread: unlink and return the entry for id (the caller frees it with
 * kd_store_entry_free), or NULL. */
kd_store_entry_t *kd_store_remove(kd_store_t *store, const uint8_t id[16]);

/* Frees the device matrix and the host copy too; accepts NULL. */
void kd_store_entry_free(kd_store_entry_t *entry);

/* Worker thread: update the pinned flag under the lock. */
void kd_store_set_pinned(kd_store_t *store, kd_store_entry_t *entry, int pinned);

/* The user every matrix belongs to without an auth file, and the owner of state files from before
 * owners were recorded. */
#define KD_ANONYMOUS "anonymous"

/* Index of user's reference in meta->owners, or -1. */
int kd_meta_owner(const kd_matrix_meta_t *meta, const char *user);

/* Whether user (admin: any matrix) may see meta's matrix. Everything else answers NOT_FOUND with
 * the same message as for an id that does not exist, so that an id is no oracle. */
int kd_meta_visible(const kd_matrix_meta_t *meta, const char *user, int admin);

/* meta as user sees it: `pinned` is its own reference's pin (an admin that holds no reference
 * sees whether anyone pinned it). KD_META_OWN also makes `uses` and `name` the user's own and,
 * unless the copy is the user's alone (meta->tenant), leaves out what the upload measured
 * (hide_selection, the timings of reorder_reason) and what other users' requests move (pattern,
 * like, and device_bytes beyond alone_bytes): a put of content another user holds then answers as a
 * put of new content would. */
void kd_meta_view(kd_matrix_meta_t *meta, const char *user, kd_meta_scope_t scope);

/* The id of content id stored for user alone (--tenant-dedupe off): id changed by the name, so
 * no two users' copies share an id and no user's copy has the shared content id. */
void kd_id_mix_tenant(uint8_t id[16], const char *user);

/* Worker thread: count one request of user's on matrix id (its reference's `uses`). */
void kd_store_note_use(kd_store_t *store, const uint8_t id[16], const char *user);

/* Worker thread (or start-up): the name user gave the matrix (its reference's label). */
void kd_store_set_owner_label(kd_store_t *store, kd_store_entry_t *entry, const char *user,
                              const char *label);

/* Worker thread (or start-up): give user a reference (pinned or not; an existing one only changes
 * its pin) and set the entry's pinned flag from all references. KD_ETOOLARGE when the matrix
 * already has KD_OWNERS_MAX references. */
int kd_store_add_owner(kd_store_t *store, kd_store_entry_t *entry, const char *user, int pinned,
                       kd_err_t *err);

/* Worker thread: take user's reference away (NULL: every reference); returns how many remain. */
int kd_store_remove_owner(kd_store_t *store, kd_store_entry_t *entry, const char *user);
/* Put entry's references back as a snapshot of them had them (n of owners: names, pins, labels,
 * uses and order), its pin following. */
void kd_store_restore_owners(kd_store_t *store, kd_store_entry_t *entry, const kd_owner_t *owners,
                             int n);

/* Worker thread: set the pin of user's reference (NULL: of every reference) and the entry's
 * pinned flag from all of them; returns that flag. */
int kd_store_set_owner_pin(kd_store_t *store, kd_store_entry_t *entry, const char *user,
                           int pinned);

/* Worker thread: make dev (NULL: none) the entry's device copy and return the previous one (the
 * caller frees it). Updates resident, device_bytes (when dev is not NULL) and the totals. */
kd_matrix_t *kd_store_set_device(kd_store_t *store, kd_store_entry_t *entry, kd_matrix_t *dev);

/* Worker thread: make dist (rank 0's part of a spread matrix) the entry's, with from's spread
 * fields (format, its detail, device bytes, symmetry, ranks and their sizes); it counts as
 * resident. */
void kd_store_set_spread(kd_store_t *store, kd_store_entry_t *entry, struct kd_dist_matrix *dist,
                         const kd_matrix_meta_t *from);

/* Worker thread: the entry's device_bytes (and the totals) from its device matrix again, after
 * something kept with it (a preconditioner) changed its size. */
void kd_store_refresh_bytes(kd_store_t *store, kd_store_entry_t *entry);

/* Worker thread: record the entry's file (stored = 1, its size) or its absence (file_bytes 0). */
/* Worker thread: a resident entry other than `entry` with its pattern (the same pattern hash,
 * known when a put with like involved either), format, reordering and dtype, whose device arrays
 * a reload of entry can share (kd_matrix_with_values); or NULL. */
kd_store_entry_t *kd_store_find_sibling(kd_store_t *store, const kd_store_entry_t *entry);
/* Worker thread: every resident entry's device_bytes from its device matrix again, after a
 * matrix that shared its pattern arrays was freed (their count moves to another sharer:
 * kd_matrix_with_values). */
void kd_store_refresh_all_bytes(kd_store_t *store);
void kd_store_set_file(kd_store_t *store, kd_store_entry_t *entry, int stored, size_t file_bytes);
/* entry's meta.behind, under the store's lock (the loop thread reads copies of meta). */
void kd_store_set_behind(kd_store_t *store, kd_store_entry_t *entry, int behind);

/* Worker thread: the least recently used entry that is not pinned, is stored on disk, is not
 * `except` (may be NULL), and is resident (resident_only) or has a file (!resident_only); NULL
 * when there is none. */
kd_store_entry_t *kd_store_lru_victim(kd_store_t *store, const kd_store_entry_t *except,
                                      int resident_only);

/* Worker thread: the state files' bytes kd_store_lru_victim(store, NULL, 0) could free, all
 * victims taken. */
size_t kd_store_evictable_file_bytes(kd_store_t *store);

/* Worker thread: the device bytes of resident entries other than `except` (may be NULL) that no
 * eviction can free now: *fixed those that stay whatever happens (pinned, without a file, spread
 * over ranks), *busy those that only requests in flight hold (busy > 0), free once they end. */
void kd_store_held_device_bytes(kd_store_t *store, const kd_store_entry_t *except, size_t *fixed,
                                size_t *busy);

/* What one user's references hold (quotas, server.status `users`): a matrix two users hold counts
 * for both; device_bytes is each matrix's size on the device, resident or not. */
typedef struct kd_usage {
    size_t matrices;
    size_t device_bytes;
    size_t state_bytes;
} kd_usage_t;

/* Any thread: user's use. */
void kd_store_usage(kd_store_t *store, const char *user, kd_usage_t *out);

/* Cache counters (server.status `cache`). */
typedef enum kd_store_counter {
    KD_STORE_HITS = 0,       /* a request found its matrix resident */
    KD_STORE_MISSES,         /* ... not resident: it was loaded from the state directory */
    KD_STORE_RELOADS,        /* loads from the state directory that succeeded */
    KD_STORE_EVICTIONS,      /* matrices moved out of device memory to make room */
    KD_STORE_DISK_EVICTIONS, /* matrices forgotten to keep the state directory under its limit */
    KD_STORE_CORRUPT,        /* state files moved aside */
    KD_STORE_DEVMEM_RETRIES, /* driver allocation failures retried after evicting */
    KD_STORE_MEMORY_WAITS,   /* requests that waited for matrices in use to make room */
    KD_STORE_MEMORY_WAIT_MS, /* ... the milliseconds they waited, summed */
    KD_STORE_COUNTER_COUNT
} kd_store_counter_t;

void kd_store_count(kd_store_t *store, kd_store_counter_t counter);
void kd_store_count_add(kd_store_t *store, kd_store_counter_t counter, uint64_t n);

/* Any thread: a copy of the metadata. KD_ENOTFOUND. */
int kd_store_get_meta(kd_store_t *store, const uint8_t id[16], kd_matrix_meta_t *out);
/* The matrix's rows and cols alone (KD_ENOTFOUND when there is none): what a charge on the loop
 * thread needs, without copying its metadata (10 KB with its owners) under the lock. */
int kd_store_get_shape(kd_store_t *store, const uint8_t id[16], int64_t *rows, int64_t *cols);

/* Any thread: copies of every entry's metadata, oldest first (*out malloc'd, may be NULL when
 * *count is 0). */
int kd_store_list(kd_store_t *store, kd_matrix_meta_t **out, size_t *count);

typedef struct kd_store_totals {
    size_t matrices;
    size_t resident;     /* matrices in device memory */
    size_t pinned;       /* pinned matrices */
    size_t device_bytes; /* device memory of resident matrices */
    size_t pinned_bytes; /* ... of those that are pinned and resident */
    size_t file_bytes;   /* state files of all matrices */
    size_t pinned_file_bytes;
    uint64_t counters[KD_STORE_COUNTER_COUNT];
} kd_store_totals_t;

void kd_store_totals(kd_store_t *store, kd_store_totals_t *out);

#endif
