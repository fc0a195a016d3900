/*
 * The state directory: every accepted matrix as one file, so that evicted matrices and, after a
 * restart, every matrix the server ever answered a put for, reload without a new upload.
 *
 *   STATE_DIR/lock                  flock()ed by the running daemon (one daemon per directory)
 *   STATE_DIR/matrices/<id>.kdm     one matrix: a fixed 2048-byte header, then the canonical CSR
 *   STATE_DIR/matrices/.<id>.tmp    a file being written (removed at start-up if a crash left it)
 *   STATE_DIR/corrupt/              files that failed a check, moved aside for a person to look at
 *
 * A file is written to a temporary name, fsync()ed, renamed over its final name and the directory
 * fsync()ed, so a crash leaves either the whole old state or the whole new file. The header has
 * its own checksum and the payload's, and records the id, shape, dtype, chosen format, name,
 * pinned flag, row statistics and format candidates, so matrix.info answers from the header alone
 * and start-up reads headers only. The layout is in docs/OPERATIONS.md; keep the two in step.
 *
 * No locking here: the device worker thread is the only user once the server runs.
 */
#ifndef KD_SERVER_STATE_H
#define KD_SERVER_STATE_H

#include "common/csr.h"
#include "server/store.h"

#include <stddef.h>
#include <stdint.h>

#define KD_STATE_HEADER_BYTES 2048
#define KD_STATE_VERSION 1

typedef struct kd_state kd_state_t;

/* Create dir (and dir/matrices) if needed and take its lock. KD_EIO with a message when the
 * directory cannot be made or another process holds the lock. */
int kd_state_open(const char *dir, kd_state_t **out, kd_err_t *err);
void kd_state_close(kd_state_t *state); /* releases the lock; accepts NULL */

const char *kd_state_dir(const kd_state_t *state);

/* Files moved to corrupt/ since kd_state_open. */
size_t kd_state_moved_aside(const kd_state_t *state);

/* Bytes the file of a matrix of this shape takes (header + payload). KD_ETOOLARGE on overflow. */
int kd_state_file_size(int64_t rows, int64_t nnz, kd_dtype_t dtype, size_t *out, kd_err_t *err);

/* Write meta's header and csr's arrays as the matrix's file (atomically, durably). meta->id must
 * be csr's content id. *file_bytes gets the file's size. KD_ESTORAGE when the file system is full
 * (ENOSPC, EDQUOT), KD_EIO otherwise; either way no file is left (neither the temporary one nor
 * the final one) and other matrices' files are untouched.
 *
 * The messages of kd_state_write, _update_header, _load and _remove may reach a remote client:
 * they name the matrix, never a path or an errno text (the log line written with them does). */
int kd_state_write(kd_state_t *state, const kd_matrix_meta_t *meta, const kd_csr_t *csr,
                   size_t *file_bytes, kd_err_t *err);

/* Rewrite the header of id's file with meta's (changed) pinned flag and name, atomically: a copy
 * with the new header replaces the file. KD_ENOTFOUND when there is no file, KD_ESTORAGE, KD_EIO;
 * on failure the old file stands. */
int kd_state_update_header(kd_state_t *state, const kd_matrix_meta_t *meta, kd_err_t *err);

/* Read id's matrix back: header and payload checksums, the content hash against the id and the
 * CSR structure are all checked. On a failed check the file is moved to corrupt/ (and logged) and
 * the result is KD_ENOTFOUND with a message saying so; KD_EIO when it cannot be read at all. */
int kd_state_load(kd_state_t *state, const uint8_t id[16], kd_csr_t **out, kd_err_t *err);

/* Remove id's file (matrix.drop, disk eviction). A missing file is not an error. */
int kd_state_remove(kd_state_t *state, const uint8_t id[16], kd_err_t *err);

/* Called for each good file found by kd_state_scan: meta holds the header's fields (resident 0,
 * stored 1), file_bytes its size, mtime_s its modification time. Return nonzero to stop. */
typedef int (*kd_state_scan_fn)(void *ctx, const kd_matrix_meta_t *meta, size_t file_bytes,
                                int64_t mtime_s);

typedef struct kd_state_scan_totals {
    size_t good;
    size_t corrupt;   /* moved to corrupt/ */
    size_t temporary; /* leftovers of interrupted writes, removed */
    size_t ignored;   /* names that are not ours, left alone */
} kd_state_scan_totals_t;

/* Read the header of every file in matrices/ (never a payload): good files go to fn; files with a
 * bad header, a wrong size or a name that disagrees with the id are moved aside; temporary files
 * are removed. */
int kd_state_scan(kd_state_t *state, kd_state_scan_fn fn, void *ctx, kd_state_scan_totals_t *totals,
                  kd_err_t *err);

/* The checks behind kd_state_scan on one file, for tests: KD_OK and meta filled, or KD_EIO with
 * *corrupt set when the file is readable but wrong (and the message says what is wrong). */
int kd_state_read_header(const char *path, kd_matrix_meta_t *meta, size_t *file_bytes, int *corrupt,
                         kd_err_t *err);

/* The path of id's file (for tests and messages). */
void kd_state_path(const kd_state_t *state, const uint8_t id[16], char *buf, size_t cap);

#endif
