/*
 * The state layer's own header (server/store/state.c: matrix files; server/store/state_pattern.c:
 * pattern files and which matrix uses which): the directory handle and the helpers both files
 * share. Nothing outside the state layer includes it.
 */
#ifndef KD_SERVER_STATE_PRIV_H
#define KD_SERVER_STATE_PRIV_H

#include "server/config.h"
#include "server/store/state.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define KD_STATE_CLAIMS_MAX 4 /* pattern files being written at once (the writer, the worker) */

/* A pattern file held: its shape, its size, how many stored matrices use it and which one of
 * them carries its bytes in its file_bytes (docs/OPERATIONS.md, "The state directory"). */
typedef struct kd_state_pattern {
    uint8_t key[16];
    int64_t rows, cols, nnz;
    size_t file_bytes;
    size_t users;
    int charged; /* carrier is set (0 only while a new pattern has no values file yet) */
    uint8_t carrier[16];
    size_t writing; /* kd_state_write calls writing a values file naming it: it stays meanwhile */
} kd_state_pattern_t;

/* A stored matrix whose values file names a pattern file. */
typedef struct kd_state_user {
    uint8_t id[16];
    uint8_t key[16];
} kd_state_user_t;

struct kd_state {
    char dir[KD_PATH_MAX];
    char matrices[KD_PATH_MAX + 16];
    char pattern_dir[KD_PATH_MAX + 16];
    char corrupt[KD_PATH_MAX + 16];
    int lock_fd;
    size_t moved_aside;
    /* `lock` guards the index below (held, users, changes, claims): the worker and the writer
     * thread (server/store/writer.c) both write files. A file's bytes are written outside it;
     * the lock is taken to look up and to publish. `written` is signalled when a claim ends. */
    pthread_mutex_t lock;
    pthread_cond_t written;
    uint8_t claims[KD_STATE_CLAIMS_MAX][16]; /* keys of pattern files being written */
    size_t nclaims;
    /* Built by the scan, kept by every write and removal. Linear arrays: a put or a drop walks
     * them once, far less than the file it writes. */
    kd_state_pattern_t *held;
    size_t nheld, cap_held;
    kd_state_user_t *users;
    size_t nusers, cap_users;
    kd_state_change_t *changes; /* for kd_state_next_change, oldest first */
    size_t nchanges, cap_changes;
};

#define KD_PATTERN_HEADER_BYTES 128

/* ---- shared helpers (state.c) ---- */

/* A directory entry of the scan: 1 when it is for the caller to look at (its full path in path),
 * 0 for "." and "..", and for an interrupted write (a ".*.tmp" file), which it removes and
 * counts in totals->temporary. */
int kd_state_scan_entry(const char *dir, const char *name, kd_state_scan_totals_t *totals,
                        char *path, size_t cap);

/* 0, or -1 with errno (0 for a short file). */
int kd_state_pread_all(int fd, void *data, size_t len, uint64_t offset);

/* Log a failed call with its path and errno; err gets what a remote client may read. */
int kd_state_fail(kd_err_t *err, int saved_errno, const char *doing, const char *call,
                  const char *path);

/* Write parts to tmp, fsync, rename over path, fsync dir (a file's own directory). With src_fd
 * >= 0, copy_bytes from src_fd at offset copy_from follow the parts (a header rewrite). Nothing
 * is left behind on failure: not tmp and, for a new file (!replace), not path either. */
int kd_state_commit(const char *dir, const char *tmp, const char *path, const struct iovec *parts,
                    int nparts, int src_fd, uint64_t copy_from, uint64_t copy_bytes, int replace,
                    const char *doing, kd_err_t *err);

/* Move path (a file in dir) to corrupt/<name>.<unix time>.<n>, log why, count it. */
void kd_state_move_aside(kd_state_t *state, const char *dir, const char *path, const char *name,
                         const char *why);

/* Whether indptr / indices (rows, cols, nnz) are a canonical CSR pattern: 0 or -1. */
int kd_state_check_pattern(const kd_csr_t *m);

/* ---- pattern files and their users (state_pattern.c) ---- */

/* The pattern file's key: XXH3-128 over a fixed prefix, rows, cols, nnz, indptr and indices.
 * KD_OK or KD_ENOMEM. */
int kd_state_pattern_key(const kd_csr_t *csr, uint8_t key[16]);

void kd_state_pattern_path(const kd_state_t *state, const uint8_t key[16], char *buf, size_t cap);

kd_state_pattern_t *kd_state_pattern_find(kd_state_t *state, const uint8_t key[16]);
kd_state_user_t *kd_state_user_find(kd_state_t *state, const uint8_t id[16]);

/* The pattern file for key holding csr's indptr and indices, written durably unless it is held
 * already (then checked to have csr's shape). Called
 * without state->lock; waits while another thread writes the same pattern file. On KD_OK the
 * pattern's `writing` count includes the caller, who ends it with kd_state_pattern_unhold (under
 * state->lock). KD_OK, KD_ESTORAGE, KD_EIO, KD_ENOMEM. */
int kd_state_pattern_ensure(kd_state_t *state, const uint8_t key[16], const kd_csr_t *csr,
                            const char *doing, kd_err_t *err);

/* Under state->lock: the caller's values file is written (or failed); an unused pattern goes. */
void kd_state_pattern_unhold(kd_state_t *state, const uint8_t key[16]);

/* Record that matrix id's values file names key (its file is in place). Returns the bytes the
 * matrix carries for the pattern: the pattern file's size when it is the first user, else 0.
 * KD_ENOMEM leaves nothing recorded. */
int kd_state_user_add(kd_state_t *state, const uint8_t id[16], const uint8_t key[16],
                      size_t *charged, kd_err_t *err);

/* id's values file is gone (removed or moved aside): forget the use; the last user's pattern file
 * is removed, and a charge id carried moves to another user (queued for kd_state_next_change). */
void kd_state_user_release(kd_state_t *state, const uint8_t id[16]);

/* Remove key's pattern file when no stored matrix names it and no write is naming it (a put that
 * wrote it failed, or its last user went); a file that cannot be removed is logged and left to
 * the next start. */
void kd_state_pattern_drop_unused(kd_state_t *state, const uint8_t key[16]);

/* A pattern file that is missing or failed a check: it and every values file naming it go to
 * corrupt/, their matrices are queued as no longer stored (except `except`, whose caller says so
 * itself; may be NULL). */
void kd_state_pattern_discard(kd_state_t *state, const uint8_t key[16], const uint8_t *except,
                              const char *why);

/* Read key's pattern file into csr's indptr and indices (csr has the expected shape): header,
 * size, checksum, structure and the key recomputed from the content are checked. KD_OK; KD_EIO
 * with *corrupt for a failed check, KD_ENOTFOUND for a missing file; KD_EIO / KD_ENOMEM
 * otherwise. */
int kd_state_pattern_read(kd_state_t *state, const uint8_t key[16], kd_csr_t *csr, int *corrupt,
                          kd_err_t *err);

/* Start-up, before the matrices: register every good pattern file (headers only), remove
 * interrupted writes, move bad files aside. KD_OK, KD_ENOMEM, KD_EIO. */
int kd_state_pattern_scan(kd_state_t *state, kd_state_scan_totals_t *totals, kd_err_t *err);

/* Start-up, after the matrices: remove the pattern files no stored matrix names. */
void kd_state_pattern_sweep(kd_state_t *state, kd_state_scan_totals_t *totals);

void kd_state_pattern_forget_all(kd_state_t *state); /* frees the index (close) */

#endif
