/*
 * Matrix Market files on the client's disk: read a whole file into memory (a `.gz` file is
 * decompressed on the way, whatever its name) for protocol/mtx.h or `matrix.put {mtx}`, and write
 * a result back atomically (a temporary file renamed over the target, gzip-compressed when the
 * path ends in ".gz").
 */
#ifndef KD_CLIENT_MTX_FILE_H
#define KD_CLIENT_MTX_FILE_H

#include "common/error.h"

#include <stddef.h>

/*
 * Read the file at `path` into a new buffer (*data, NUL-terminated, *len bytes before the NUL;
 * the caller frees it). Gzip data is decompressed; other files are read as they are. KD_ETOOLARGE
 * when the (decompressed) content is over max_bytes (0: no limit), KD_EIO when the file cannot be
 * opened or read, KD_EBADREQ for corrupt or truncated gzip data.
 */
int kd_mtx_file_read(const char *path, size_t max_bytes, char **data, size_t *len, kd_err_t *err);

/*
 * Replace the file at `path` with `len` bytes of data: written to a temporary file beside it,
 * flushed to disk, then renamed over the target, so a reader never sees half a file. KD_EIO on
 * failure (the temporary file is removed).
 */
int kd_mtx_file_write(const char *path, const char *data, size_t len, kd_err_t *err);

#endif
