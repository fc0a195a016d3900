/*
 * The matrix cache policy on top of the store (store.c) and the state directory (state.c): a
 * device-memory budget with least-recently-used eviction of unpinned matrices, reload on first use
 * of a matrix that is not resident, persistence of every accepted matrix before matrix.put
 * answers, and a disk limit with least-recently-used removal of unpinned files.
 *
 * Everything but kd_cache_open/close and the writer's start and stop runs on the device worker
 * thread; files put with persist "behind" are written by the writer thread (writer.h).
 * docs/OPERATIONS.md has the policy in words; docs/ARCHITECTURE.md how it fits.
 */
#ifndef KD_SERVER_CACHE_H
#define KD_SERVER_CACHE_H

#include "server/store/store.h"

#include <stddef.h>
#include <stdint.h>

struct kd_server;

/* Matrices spread over MPI ranks (handlers/spread.c) as the cache needs them: the store below
 * cannot call the handlers above it, so kd_server_init registers these in server->spread.
 * ranks: the job's ranks (1 on one process); again: re-spread entry from csr (its file's matrix)
 * after a restart; discard: a spread entry that was not admitted, every rank's part freed;
 * forget: the other ranks drop matrix id. */
typedef struct kd_cache_spread {
    int (*ranks)(const struct kd_server *server);
    int (*again)(struct kd_server *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                 kd_err_t *err);
    void (*discard)(struct kd_server *server, kd_store_entry_t *entry);
    void (*forget)(struct kd_server *server, const uint8_t id[16]);
} kd_cache_spread_t;

/* Start-up, before the worker runs: compute the device budget, open and lock the state directory
 * and register every good matrix file in it (headers only; nothing is loaded). */
int kd_cache_open(struct kd_server *server, kd_err_t *err);
void kd_cache_close(struct kd_server *server); /* after the worker stopped */

/* Device bytes a matrix needs before its format is known: its CSR arrays. */
size_t kd_cache_estimate(int64_t rows, int64_t nnz, kd_dtype_t dtype);

/* Make the device budget hold `bytes` more than the resident matrices do now, evicting least
 * recently used unpinned resident matrices other than `keep` (may be NULL). Nothing is evicted
 * when that would not be enough. `what` names the need in the message ("a 1000 x 1000 matrix").
 * KD_EDEVMEM with the sizes. */
int kd_cache_reserve(struct kd_server *server, size_t bytes, const kd_store_entry_t *keep,
                     const char *what, kd_err_t *err);

/* The entry for id, resident, with room in the budget for `extra` bytes of vectors beside it.
 * Counts a hit, or a miss and loads it from the state directory (in the format chosen at upload).
 * Marks it used. KD_ENOTFOUND (also when its file failed its checks), KD_EDEVMEM, KD_EIO. */
int kd_cache_use(struct kd_server *server, const uint8_t id[16], size_t extra,
                 kd_store_entry_t **out, kd_err_t *err);

/* Admit a new matrix (matrix.put, matrix.multiply): entry->dev is uploaded and entry->meta
 * filled. Checks the budget against the matrix's real size, writes its state file (removing least
 * recently used files to stay under --state-max-bytes) and inserts it. Takes entry and csr (the
 * canonical host matrix), also on failure: csr is freed once written, or kept as the entry's host
 * copy without a state directory. KD_EDEVMEM, KD_ETOOLARGE (over the disk limit), KD_EIO,
 * KD_ENOMEM. */
int kd_cache_admit(struct kd_server *server, kd_store_entry_t *entry, kd_csr_t *csr, kd_err_t *err);

/* The writer thread of persist "behind" (server/store/writer.c), started before the worker
 * (wake(wake_ctx) wakes the worker: kd_worker_wake) and stopped after it stopped, before the store
 * goes: every queued file is written and published first (shutdown waits for them). Nothing
 * without a state directory. KD_ENOMEM, KD_EINTERNAL. */
int kd_cache_start_writer(struct kd_server *server, void (*wake)(void *ctx), void *wake_ctx);
void kd_cache_stop_writer(struct kd_server *server);

/* The worker's idle hook (kd_worker_callbacks_t.idle; ctx is the server): publish the files the
 * writer thread finished (the entry stored, the disk limit, the owners line, the marker removed:
 * durable). Returns 0. */
int kd_cache_write_behind(void *server, int queue_empty);

/* A later put of entry's content asking for a stronger persist (sync over behind over none):
 * written now (sync) or queued (behind). Nothing without a state directory or once stored.
 * KD_ESTORAGE, KD_EIO, KD_ETOOLARGE from a sync write (the matrix stays as it was). */
int kd_cache_persist_upgrade(struct kd_server *server, kd_store_entry_t *entry, int persist,
                             kd_err_t *err);

/* The canonical host CSR of matrix id, for work done on the host: the entry's own copy (without a
 * state directory; *owned is NULL) or one read from its state file with every check of a reload
 * (*owned is that copy: the caller frees it). Marks the matrix used. KD_ENOTFOUND (also when its
 * file failed its checks: the matrix is then forgotten), KD_EIO, KD_ENOMEM. */
int kd_cache_host_csr(struct kd_server *server, const uint8_t id[16], const kd_csr_t **csr,
                      kd_csr_t **owned, kd_err_t *err);

/* The pattern of matrix id (rows, cols, nnz, dtype, indptr, indices), for work that needs no
 * values (matrix.put with like): as kd_cache_host_csr, but from the state directory only its
 * pattern file is read and checked, and csr->values is NULL then (the entry's own host copy
 * without a state directory has them: read none either way). */
int kd_cache_host_pattern(struct kd_server *server, const uint8_t id[16], const kd_csr_t **csr,
                          kd_csr_t **owned, kd_err_t *err);

/* Pin (loading the matrix if it is not resident) or unpin user's reference (NULL: every
 * reference; a user with none gets one, named label unless that is NULL), and record it: the
 * state file's header keeps whether anyone pinned it, STATE_DIR/owners whose pin it is. */
int kd_cache_set_pinned(struct kd_server *server, kd_store_entry_t *entry, const char *user,
                        int pinned, const char *label, kd_err_t *err);

/* Take user's reference to a matrix away (NULL: everyone's); with the last one the matrix goes,
 * device copy and state file. KD_ENOTFOUND, KD_EIO. */
int kd_cache_drop(struct kd_server *server, const uint8_t id[16], const char *user, kd_err_t *err);

/* Any thread: a request's wait for device memory began (*since_ns set to now, counted) or ended
 * (its milliseconds counted, *since_ns back to 0; nothing when it did not wait). */
void kd_cache_wait_begin(struct kd_server *server, uint64_t *since_ns);
void kd_cache_wait_end(struct kd_server *server, uint64_t *since_ns);

/* After the driver refused an allocation: evict every unpinned resident matrix except `keep`
 * (may be NULL). Returns how many were evicted. */
size_t kd_cache_evict_all(struct kd_server *server, const kd_store_entry_t *keep);

#endif
