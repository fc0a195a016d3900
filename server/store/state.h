/*
 * The state directory: every accepted matrix on disk, so that evicted matrices and, after a
 * restart, every matrix the server ever answered a put for, reload without a new upload. A
 * sparsity pattern is stored once, however many matrices (versions put with like, or full puts
 * of new values) have it:
 *
 *   STATE_DIR/lock                  flock()ed by the running daemon (one daemon per directory)
 *   STATE_DIR/patterns/<key>.kdp    one pattern: a 128-byte header, then indptr and indices
 *   STATE_DIR/matrices/<id>.kdm     one matrix: a fixed 2048-byte header naming its pattern file,
 *                                   then its values (version 2); a batch, and files written before
 *                                   patterns were shared, hold the whole CSR (version 1)
 *   STATE_DIR/{matrices,patterns}/.<hex>.tmp  a file being written (removed at start-up)
 *   STATE_DIR/matrices/.<hex>.behind  a matrix put with persist "behind" whose file is not
 *                                   written yet: a start that finds it without <hex>.kdm reports
 *                                   the matrix lost (and removes it)
 *   STATE_DIR/corrupt/              files that failed a check, moved aside for a person to look at
 *
 * A file is written to a temporary name, fsync()ed, renamed over its final name and the directory
 * fsync()ed, so a crash leaves either the whole old state or the whole new file; a new pattern
 * file is durable before the values file naming it is created, and removed after the last values
 * file naming it, so a crash leaves at worst a pattern file nothing names, which the next start
 * removes. A header has its own checksum and the payload's; a matrix's records the id, shape,
 * dtype, chosen format, name, pinned flag, row statistics and format candidates, so matrix.info
 * answers from the header alone and start-up reads headers only. The layout is in
 * docs/OPERATIONS.md; keep the two in step.
 *
 * Bytes on disk: a matrix's file_bytes is its own file's size, plus its pattern file's while it
 * carries that pattern (the first matrix stored with it; when it goes, the charge moves to
 * another user, reported by kd_state_next_change). So the file_bytes of all matrices add up to
 * what the files take.
 *
 * Threads: the device worker and the writer thread (server/store/writer.c, persist "behind") call
 * in here. The index of patterns and their users is under a mutex taken briefly around look-ups
 * and publishing; a file's bytes are written outside it. Two writes of one pattern file never
 * run at once (the second waits and then finds it held); two writes of one matrix id must not be
 * started at once (the cache sees to that). kd_state_update_header is for stored matrices only.
 */
#ifndef KD_SERVER_STATE_H
#define KD_SERVER_STATE_H

#include "common/csr.h"
#include "server/store/store.h"

#include <stddef.h>
#include <stdint.h>

#define KD_STATE_HEADER_BYTES 2048
#define KD_STATE_VERSION 2 /* version 1 files (whole CSR) are read too */

typedef struct kd_state kd_state_t;

/* Create dir (and dir/matrices) if needed and take its lock. KD_EIO with a message when the
 * directory cannot be made or another process holds the lock. */
int kd_state_open(const char *dir, kd_state_t **out, kd_err_t *err);
void kd_state_close(kd_state_t *state); /* releases the lock; accepts NULL */

const char *kd_state_dir(const kd_state_t *state);

/* Files moved to corrupt/ since kd_state_open. */
size_t kd_state_moved_aside(const kd_state_t *state);

/* At most the bytes storing a matrix of this shape adds to the state directory (its values file
 * and a new pattern file: both headers, the whole CSR). KD_ETOOLARGE on overflow. */
int kd_state_file_size(int64_t rows, int64_t nnz, kd_dtype_t dtype, size_t *out, kd_err_t *err);

/* The bytes storing csr (batch > 0: a batch of that many systems) would add to the directory
 * now: its values file, and a pattern file unless one for its pattern is held (a batch: its whole
 * file). What kd_state_write's *file_bytes will be, before it runs (--state-max-bytes).
 * KD_ETOOLARGE, KD_ENOMEM. */
int kd_state_put_bytes(kd_state_t *state, const kd_csr_t *csr, int64_t batch, size_t *out,
                       kd_err_t *err);

/* Store csr as meta's matrix (atomically, durably): its pattern file first unless one is held,
 * then its values file (a batch: one whole file). meta->id must be csr's content id.
 * *file_bytes gets what the matrix is charged (its file, and the pattern file it wrote).
 * KD_ESTORAGE when the file system is full
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

/* Read id's matrix back: header and payload checksums (of the values file and of its pattern
 * file), the pattern key against the pattern, the content hash against the id and the CSR
 * structure are all checked. On a failed check the file is moved to corrupt/ (and logged) and
 * the result is KD_ENOTFOUND with a message saying so; a bad or missing pattern file takes every
 * values file naming it along (the other matrices are reported by kd_state_next_change). KD_EIO
 * when it cannot be read at all. */
int kd_state_load(kd_state_t *state, const uint8_t id[16], kd_csr_t **out, kd_err_t *err);

/* id's pattern alone, for work that needs no values (matrix.put with like): rows, cols, nnz,
 * dtype, indptr and indices filled, values NULL. The values file's header and the pattern file
 * are checked as kd_state_load checks them (the pattern against its key); the values are not read
 * (a version 1 file is read whole and its values dropped). Errors as kd_state_load's. */
int kd_state_load_pattern(kd_state_t *state, const uint8_t id[16], kd_csr_t **out, kd_err_t *err);

/* Remove id's file (matrix.drop, disk eviction), then its pattern file when no other stored
 * matrix names it. A missing file is not an error. */
int kd_state_remove(kd_state_t *state, const uint8_t id[16], kd_err_t *err);

/* The marker that id's file is to be written behind its put's reply (.<hex>.behind: empty and
 * not fsynced, so it costs no disk flush; a crash of the process keeps it, a crash of the machine
 * may not). Best effort: a failure is logged, and only the report of a loss depends on it. */
void kd_state_mark_behind(kd_state_t *state, const uint8_t id[16]);
void kd_state_unmark_behind(kd_state_t *state, const uint8_t id[16]); /* missing: no error */

/* What a call did to another matrix's files: a pattern file's charge moved to matrix id (stored
 * 1: its file_bytes grow by added_bytes), or id's values file went to corrupt/ with its pattern
 * file (stored 0: it has no file now). */
typedef struct kd_state_change {
    uint8_t id[16];
    int stored;
    size_t added_bytes;
} kd_state_change_t;

/* The oldest change not yet taken: 1 and *change filled, or 0 when there is none. The cache takes
 * them after each kd_state_remove, _load and _load_pattern. */
int kd_state_next_change(kd_state_t *state, kd_state_change_t *change);

/* Called for each good matrix found by kd_state_scan: meta holds the header's fields (resident 0,
 * stored 1), file_bytes what it is charged (its file, and its pattern file's size when it
 * carries it), mtime_s its modification time. Return nonzero to stop. */
typedef int (*kd_state_scan_fn)(void *ctx, const kd_matrix_meta_t *meta, size_t file_bytes,
                                int64_t mtime_s);

typedef struct kd_state_scan_totals {
    size_t good;
    size_t corrupt;   /* moved to corrupt/ */
    size_t temporary; /* leftovers of interrupted writes, removed */
    size_t ignored;   /* names that are not ours, left alone */
    size_t patterns;  /* pattern files in use */
    size_t unused;    /* pattern files no matrix names (a crash between two files), removed */
    size_t lost;      /* matrices put with persist "behind" whose file was never written */
} kd_state_scan_totals_t;

/* Read the header of every file in patterns/ and matrices/ (never a payload): good matrices go
 * to fn; files with a bad header, a wrong size or a name that disagrees with the id, and values
 * files whose pattern file is missing or bad, are moved aside; temporary files and pattern files
 * no matrix names are removed. Call it once, right after kd_state_open: it builds the record of
 * which matrix uses which pattern that writes and removals keep. */
int kd_state_scan(kd_state_t *state, kd_state_scan_fn fn, void *ctx, kd_state_scan_totals_t *totals,
                  kd_err_t *err);

/* The checks behind kd_state_scan on one file, for tests: KD_OK and meta filled, or KD_EIO with
 * *corrupt set when the file is readable but wrong (and the message says what is wrong). */
int kd_state_read_header(const char *path, kd_matrix_meta_t *meta, size_t *file_bytes, int *corrupt,
                         kd_err_t *err);

/* The path of id's file (for tests and messages); of a pattern file: kd_state_pattern_file. */
void kd_state_path(const kd_state_t *state, const uint8_t id[16], char *buf, size_t cap);

/* The path of the pattern file id's values file names (for tests): KD_OK, or KD_ENOTFOUND when
 * id is not stored in the pattern layout. */
int kd_state_pattern_file(kd_state_t *state, const uint8_t id[16], char *buf, size_t cap);

#endif
