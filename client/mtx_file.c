/*
 * Reading and writing Matrix Market files for the client (see mtx_file.h). zlib's gz* functions
 * read gzip and plain files alike, so `.mtx` and `.mtx.gz` take the same path; the buffer grows
 * by doubling up to the size limit.
 */
#include "client/mtx_file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define KD_MTX_FILE_FIRST_BUFFER (64 * 1024)
#define KD_MTX_FILE_CHUNK_MAX (1u << 30) /* gzread takes an unsigned count */

/* The error gz reported, as a krylovd code and message. */
static int kd_mtx_file_gz_error(gzFile f, const char *path, kd_err_t *err)
{
    int zcode = Z_OK;
    const char *text = gzerror(f, &zcode);
    if (zcode == Z_ERRNO)
        return kd_err_set(err, KD_EIO, "reading %s: %s", path, strerror(errno));
    if (zcode == Z_MEM_ERROR)
        return kd_err_set(err, KD_ENOMEM, "reading %s: out of memory in zlib", path);
    return kd_err_set(err, KD_EBADREQ, "reading %s: bad gzip data: %s", path,
                      text != NULL ? text : "unknown zlib error");
}

int kd_mtx_file_read(const char *path, size_t max_bytes, char **data, size_t *len, kd_err_t *err)
{
    char *buf = NULL;
    size_t used = 0, cap = 0;
    int rc;
    if (max_bytes == 0 || max_bytes > SIZE_MAX - 2)
        max_bytes = SIZE_MAX - 2;

    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        if (errno == 0)
            return kd_err_set(err, KD_ENOMEM, "opening %s: out of memory in zlib", path);
        return kd_err_set(err, KD_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    gzbuffer(f, 256 * 1024);
    for (;;) {
        /* Room for one byte past the limit, to tell "exactly max_bytes" from "more". */
        if (used == cap) {
            size_t want =
                cap == 0 ? KD_MTX_FILE_FIRST_BUFFER : (cap > SIZE_MAX / 2 ? SIZE_MAX : cap * 2);
            if (want > max_bytes + 1)
                want = max_bytes + 1;
            if (want <= cap) {
                rc = kd_err_set(err, KD_ETOOLARGE, "%s is larger than the limit of %zu bytes%s",
                                path, max_bytes, gzdirect(f) ? "" : " (uncompressed)");
                goto fail;
            }
            char *grown = realloc(buf, want + 1);
            if (grown == NULL) {
                rc = kd_err_set(err, KD_ENOMEM, "out of host memory reading %s (%zu bytes)", path,
                                want);
                goto fail;
            }
            buf = grown;
            cap = want;
        }
        size_t room = cap - used;
        unsigned chunk = room > KD_MTX_FILE_CHUNK_MAX ? KD_MTX_FILE_CHUNK_MAX : (unsigned)room;
        int got = gzread(f, buf + used, chunk);
        if (got < 0) {
            rc = kd_mtx_file_gz_error(f, path, err);
            goto fail;
        }
        if (got == 0)
            break;
        used += (size_t)got;
    }
    if (used > max_bytes) {
        rc = kd_err_set(err, KD_ETOOLARGE, "%s is larger than the limit of %zu bytes", path,
                        max_bytes);
        goto fail;
    }
    /* A truncated gzip stream ends reads early without failing them; gzerror says so. */
    int zcode = Z_OK;
    gzerror(f, &zcode);
    if (zcode != Z_OK) {
        rc = kd_mtx_file_gz_error(f, path, err);
        goto fail;
    }
    int closed = gzclose_r(f);
    f = NULL;
    if (closed != Z_OK) {
        rc = closed == Z_ERRNO
                 ? kd_err_set(err, KD_EIO, "reading %s: %s", path, strerror(errno))
                 : kd_err_set(err, KD_EBADREQ, "reading %s: the gzip data ends early", path);
        goto fail;
    }
    if (buf == NULL) {
        buf = malloc(1);
        if (buf == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory reading %s", path);
    }
    buf[used] = '\0';
    *data = buf;
    *len = used;
    return KD_OK;
fail:
    if (f != NULL)
        gzclose_r(f);
    free(buf);
    return rc;
}

static int kd_mtx_file_ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Write all of data to fd, gzip-compressed or as it is. */
static int kd_mtx_file_write_fd(int fd, int compress, const char *data, size_t len,
                                const char *path, kd_err_t *err)
{
    if (!compress) {
        while (len > 0) {
            ssize_t n = write(fd, data, len);
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0)
                return kd_err_set(err, KD_EIO, "writing %s: %s", path, strerror(errno));
            data += n;
            len -= (size_t)n;
        }
        return KD_OK;
    }
    /* gzclose closes the descriptor it was given: give it a duplicate, keep fd for fsync. */
    int dup_fd = dup(fd);
    if (dup_fd < 0)
        return kd_err_set(err, KD_EIO, "writing %s: %s", path, strerror(errno));
    gzFile f = gzdopen(dup_fd, "wb");
    if (f == NULL) {
        close(dup_fd);
        return kd_err_set(err, KD_ENOMEM, "writing %s: out of memory in zlib", path);
    }
    int rc = KD_OK;
    while (len > 0) {
        unsigned chunk = len > KD_MTX_FILE_CHUNK_MAX ? KD_MTX_FILE_CHUNK_MAX : (unsigned)len;
        int n = gzwrite(f, data, chunk);
        if (n <= 0) {
            int zcode = Z_OK;
            const char *text = gzerror(f, &zcode);
            rc = zcode == Z_ERRNO ? kd_err_set(err, KD_EIO, "writing %s: %s", path, strerror(errno))
                                  : kd_err_set(err, KD_EIO, "writing %s: zlib: %s", path, text);
            break;
        }
        data += n;
        len -= (size_t)n;
    }
    int closed = gzclose_w(f);
    if (rc == KD_OK && closed != Z_OK)
        rc = kd_err_set(err, KD_EIO, "writing %s: %s", path,
                        closed == Z_ERRNO ? strerror(errno) : "zlib failed to finish the stream");
    return rc;
}

int kd_mtx_file_write(const char *path, const char *data, size_t len, kd_err_t *err)
{
    static unsigned counter;
    size_t n = strlen(path) + 64;
    char *tmp = malloc(n);
    int fd = -1, rc;
    if (tmp == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory writing %s", path);
    /* A name of our own rather than mkstemp(), so the file gets the usual 0666 & ~umask mode. */
    for (int attempt = 0; attempt < 100 && fd < 0; attempt++) {
        snprintf(tmp, n, "%s.tmp.%ld.%u", path, (long)getpid(),
                 __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED));
        fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        rc = kd_err_set(err, KD_EIO, "cannot create %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    rc = kd_mtx_file_write_fd(fd, kd_mtx_file_ends_with(path, ".gz"), data, len, path, err);
    if (rc == KD_OK && fsync(fd) != 0)
        rc = kd_err_set(err, KD_EIO, "writing %s: fsync: %s", path, strerror(errno));
    if (close(fd) != 0 && rc == KD_OK)
        rc = kd_err_set(err, KD_EIO, "writing %s: close: %s", path, strerror(errno));
    if (rc == KD_OK && rename(tmp, path) != 0)
        rc = kd_err_set(err, KD_EIO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (rc != KD_OK)
        unlink(tmp);
    free(tmp);
    return rc;
}
