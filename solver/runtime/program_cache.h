/*
 * Compiled OpenCL programs kept on disk, so a restart loads binaries instead of compiling
 * (docs/OPERATIONS.md, "Compiled programs"). One file per program:
 *
 *   DIR/<key>.kdp     a 512-byte header, then the binary clGetProgramInfo(CL_PROGRAM_BINARIES) gave
 *   DIR/.<key>.<pid>.<n>.tmp  a file being written (removed when the cache is opened, if
 *                     older than KD_PROGRAM_CACHE_TMP_AGE_S: another daemon may share DIR)
 *
 * The key is XXH3-128 of everything the binary depends on: the device's identity (name, vendor,
 * driver version, platform and device versions, given by the caller), the full source text (the
 * prelude and expanded includes), the value type and the complete build flags, and this file
 * format's version. A change to any of them is a new key, so a stale binary is never found. The
 * header repeats the key and carries the binary's length and checksum and its own checksum; a
 * file that fails any check is deleted and reported, never handed to OpenCL. The header also
 * names the program, value type and caller's options, so the warm-up can rebuild at start-up
 * whatever was built before (variants that depend on the data, such as a block size).
 *
 * Thread-safe: the warm-up builds programs on several threads at once.
 */
#ifndef KD_SOLVER_PROGRAM_CACHE_H
#define KD_SOLVER_PROGRAM_CACHE_H

#include "common/dtype.h"
#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

#define KD_PROGRAM_CACHE_VERSION 1
#define KD_PROGRAM_CACHE_HEADER_BYTES 512
#define KD_PROGRAM_CACHE_NAME_MAX 64     /* program names, NUL included */
#define KD_PROGRAM_CACHE_OPTIONS_MAX 384 /* the caller's options, NUL included */
/* At most this many files are kept (the most recently used); more are removed by _prune. */
#define KD_PROGRAM_CACHE_FILES_MAX 256
/* A leftover temporary file older than this is an interrupted write. */
#define KD_PROGRAM_CACHE_TMP_AGE_S 3600
/* A binary larger than this is neither stored nor believed. */
#define KD_PROGRAM_CACHE_BINARY_MAX ((uint64_t)256 << 20)

typedef struct kd_program_cache kd_program_cache_t;

/* What a cached file says it holds (its header). */
typedef struct kd_program_cache_entry {
    uint8_t key[16];
    char program[KD_PROGRAM_CACHE_NAME_MAX];
    char options[KD_PROGRAM_CACHE_OPTIONS_MAX];
    kd_dtype_t dtype;
    int64_t mtime_s; /* last stored or loaded */
} kd_program_cache_entry_t;

/* Open (creating it if needed) the cache directory `dir` for the device whose identity is
 * `device` (any text that changes when the compiled code would: kd_ocl_device_identity).
 * Leftover temporary files are removed. KD_EIO with a message when dir cannot be made. */
int kd_program_cache_open(const char *dir, const char *device, kd_program_cache_t **out,
                          kd_err_t *err);
void kd_program_cache_close(kd_program_cache_t *cache); /* accepts NULL */

const char *kd_program_cache_dir(const kd_program_cache_t *cache);

/* The key of a program: source is the full text handed to the compiler, flags the full build
 * options. */
void kd_program_cache_key(const kd_program_cache_t *cache, const char *source, size_t source_len,
                          kd_dtype_t dtype, const char *flags, uint8_t key[16]);

/* The path of key's file (for tests and messages). */
void kd_program_cache_path(const kd_program_cache_t *cache, const uint8_t key[16], char *buf,
                           size_t cap);

/*
 * Read key's binary. KD_OK: *binary (malloc'd; free() it) and *len. KD_ENOTFOUND: no file (or
 * one that failed a check: then it was deleted, *rejected is 1 and err says what was wrong). A
 * file that is read is marked used (its time is refreshed, and _prune keeps it).
 */
int kd_program_cache_load(kd_program_cache_t *cache, const uint8_t key[16], uint8_t **binary,
                          size_t *len, int *rejected, kd_err_t *err);

/* Write key's binary with the entry's names (atomically: a temporary file renamed over the
 * final name). KD_EBADREQ when the names or the binary are too long to keep, KD_EIO. */
int kd_program_cache_store(kd_program_cache_t *cache, const uint8_t key[16], const char *program,
                           kd_dtype_t dtype, const char *options, const uint8_t *binary, size_t len,
                           kd_err_t *err);

/* Delete key's file (a binary the driver refused). A missing file is not an error. */
void kd_program_cache_remove(kd_program_cache_t *cache, const uint8_t key[16]);

/* The headers of the files in the directory, most recently used first, at most cap of them
 * (*count); files whose header fails its checks are deleted (counted in *rejected). *out is
 * malloc'd (free() it). */
int kd_program_cache_list(kd_program_cache_t *cache, kd_program_cache_entry_t **out, size_t *count,
                          size_t *rejected, kd_err_t *err);

/* Remove every file not loaded or stored since the cache was opened (stale: another source,
 * driver or device), and the least recently used beyond max_files. A file whose time is not
 * older than the open was used by another process sharing the directory and is kept. Returns
 * the files removed. */
size_t kd_program_cache_prune(kd_program_cache_t *cache, size_t max_files);

/* The checks behind _load on one file, for tests: KD_OK when path holds a well-formed entry for
 * key (entry filled when not NULL), else KD_EIO with what is wrong. */
int kd_program_cache_check_file(const char *path, const uint8_t key[16],
                                kd_program_cache_entry_t *entry, kd_err_t *err);

#endif
