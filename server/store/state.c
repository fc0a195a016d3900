/*
 * Matrix files in the state directory (see state.h; pattern files: state_pattern.c). The header
 * is encoded field by field in little-endian at fixed offsets (not a struct dump), so the format
 * does not depend on the compiler; docs/OPERATIONS.md has the table. A version 2 file holds the
 * values alone and names its pattern file; a version 1 file (a batch, or one written before
 * patterns were shared) holds the whole CSR.
 *
 * Durability: write the temporary file, fsync it, rename it over the final name, fsync the
 * directory. Every call that changes the directory goes through server/store/state_io.c (where a
 * test build can fail or kill the process at any one of them). A reader trusts nothing: the header
 * checksum, the file size against the shape, the payload checksum, the content hash against the id
 * and the CSR structure are all checked, and a file that fails is moved to corrupt/ rather than
 * deleted, so a person can look at it.
 *
 * Messages: those of the calls a request makes (write, update, load, remove) reach the remote
 * client, so they name the matrix and what failed but never a path or an errno text; the log line
 * written beside each has those. A full file system (ENOSPC, EDQUOT) is KD_ESTORAGE.
 */
#include "server/store/state.h"
#include "common/le.h"
#include "common/checked.h"
#include "common/log.h"
#include "server/config.h"
#include "server/store/state_io.h"
#include "server/store/state_priv.h"
#include "solver/batch/batch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static const char kd_state_magic[8] = {'K', 'D', 'M', 'A', 'T', 'R', 'I', 'X'};

/* Header offsets (docs/OPERATIONS.md). */
enum {
    KD_H_MAGIC = 0,
    KD_H_VERSION = 8,
    KD_H_HEADER_BYTES = 12,
    KD_H_ID = 16,
    KD_H_ROWS = 32,
    KD_H_COLS = 40,
    KD_H_NNZ = 48,
    KD_H_DTYPE = 56,
    KD_H_FORMAT = 60,
    KD_H_FLAGS = 64,
    KD_H_PAYLOAD_BYTES = 72,
    KD_H_PAYLOAD_SUM = 80,
    KD_H_DEVICE_BYTES = 88,
    KD_H_CREATED = 96,
    KD_H_STATS = 104, /* min_row, max_row, mean_row, stddev_row, empty_rows, nonfinite */
    KD_H_NAME = 152,  /* KD_NAME_MAX bytes, NUL-padded */
    KD_H_NCANDIDATES = 280,
    KD_H_CANDIDATES = 288, /* KD_FMT_COUNT x {u32 format, u32 0, f64 time_ms, char dropped[96]} */
    KD_H_CANDIDATE_BYTES = 112,
    KD_H_PATTERN = 1296, /* version 2: the pattern file's key (16 bytes) */
    /* the user a --tenant-dedupe off copy was stored for (KD_AUTH_NAME_MAX bytes, NUL-padded;
     * zero in files from before it and for shared content: the id is the content's) */
    KD_H_TENANT = 1312,
    KD_H_ALONE_BYTES = 1376, /* u64 kd_matrix_meta_t.alone_bytes; zero in files from before it */
    /* u64 systems of a batched matrix (zero in files from before batches: one matrix) */
    KD_H_BATCH = 1520,
    KD_H_DETAIL = 1536, /* u32 count, u32 0, then KD_FORMAT_DETAIL_MAX x {char name[24], u64} */
    KD_H_DETAIL_ITEM_BYTES = 32,
    /* Reordering (u32 kind, u32 0, u64 bandwidth before, u64 after, char reason[88]): zero in
     * files from before it, which read as none. */
    KD_H_REORDER = 1928,
    KD_H_REORDER_REASON = 88,
    KD_H_REORDER_BYTES = 24 + KD_H_REORDER_REASON,
    KD_H_CHECKSUM = KD_STATE_HEADER_BYTES - 8,
};

#define KD_FLAG_PINNED 1u
#define KD_FLAG_SYMMETRIC 2u
#define KD_FLAG_SYMMETRY_KNOWN 4u /* files from before the symmetry scan lack it */
#define KD_FLAG_DISTRIBUTED 8u /* put spread over an MPI job's ranks (server/handlers/spread.c) */

_Static_assert(KD_H_CANDIDATES + KD_FMT_COUNT * KD_H_CANDIDATE_BYTES <= KD_H_PATTERN &&
                   KD_H_PATTERN + 16 <= KD_H_BATCH && KD_H_BATCH + 8 <= KD_H_DETAIL,
               "state header too small for the candidates and the batch");
_Static_assert(KD_H_DETAIL + 8 + KD_FORMAT_DETAIL_MAX * KD_H_DETAIL_ITEM_BYTES <= KD_H_CHECKSUM,
               "state header too small for the format detail");
_Static_assert(KD_FORMAT_DETAIL_NAME == 24, "format detail name size changed");
_Static_assert(KD_H_NAME + KD_NAME_MAX <= KD_H_NCANDIDATES, "state header: name overlaps");
_Static_assert(KD_H_PATTERN + 16 <= KD_H_TENANT &&
                   KD_H_TENANT + KD_AUTH_NAME_MAX <= KD_H_ALONE_BYTES &&
                   KD_H_ALONE_BYTES + 8 <= KD_H_BATCH,
               "state header: the tenant overlaps");
_Static_assert(KD_H_DETAIL + 8 + KD_FORMAT_DETAIL_MAX * KD_H_DETAIL_ITEM_BYTES <= KD_H_REORDER &&
                   KD_H_REORDER + KD_H_REORDER_BYTES <= KD_H_CHECKSUM,
               "state header: the reordering overlaps");
_Static_assert(sizeof(((kd_candidate_t *)0)->dropped) == 96, "candidate reason size changed");

/* How a matrix file stores its CSR: whole (version 1), or values naming a pattern file. */
typedef struct kd_layout {
    int split;
    uint8_t key[16]; /* split: the pattern file's */
} kd_layout_t;

/* ---- paths and directories ---------------------------------------------------------------- */

void kd_state_path(const kd_state_t *state, const uint8_t id[16], char *buf, size_t cap)
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    snprintf(buf, cap, "%s/%s.kdm", state->matrices, hex);
}

static void kd_state_tmp_path(const kd_state_t *state, const uint8_t id[16], char *buf, size_t cap)
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    snprintf(buf, cap, "%s/.%s.tmp", state->matrices, hex);
}

static void kd_state_behind_path(const kd_state_t *state, const uint8_t id[16], char *buf,
                                 size_t cap)
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    snprintf(buf, cap, "%s/.%s.behind", state->matrices, hex);
}

void kd_state_mark_behind(kd_state_t *state, const uint8_t id[16])
{
    char path[KD_PATH_MAX + 64];
    kd_state_behind_path(state, id, path, sizeof(path));
    int fd = kd_state_io_create(path);
    if (fd < 0) {
        KD_WARN("state", "cannot create the write-behind marker path=%s: %s", path,
                strerror(errno));
        return;
    }
    close(fd);
}

void kd_state_unmark_behind(kd_state_t *state, const uint8_t id[16])
{
    char path[KD_PATH_MAX + 64];
    kd_state_behind_path(state, id, path, sizeof(path));
    if (kd_state_io_unlink(path) != 0 && errno != ENOENT)
        KD_WARN("state", "cannot remove the write-behind marker path=%s: %s", path,
                strerror(errno));
}

/* A write-behind marker found at start: its matrix was lost when its file is not there. */
static void kd_state_scan_behind(const char *dir, const char *name, const char *path,
                                 kd_state_scan_totals_t *totals)
{
    char final[KD_PATH_MAX + 300];
    const int hexlen = (int)strlen(name) - 8; /* "." hex ".behind" */
    snprintf(final, sizeof(final), "%s/%.*s.kdm", dir, hexlen, name + 1);
    struct stat st;
    if (stat(final, &st) != 0) {
        totals->lost++;
        KD_WARN("state",
                "lost id=%.*s: put with persist \"behind\", its file was not written before "
                "the server stopped; put it again",
                hexlen, name + 1);
    }
    (void)kd_state_io_unlink(path);
}

const char *kd_state_dir(const kd_state_t *state)
{
    return state->dir;
}

size_t kd_state_moved_aside(const kd_state_t *state)
{
    return state->moved_aside;
}

/* Start-up and moving aside only: the message names the path (it goes to the operator). */
static int kd_mkdir(const char *path, kd_err_t *err)
{
    if (kd_state_io_mkdir(path, 0750) != 0 && errno != EEXIST)
        return kd_err_set(err, KD_EIO, "cannot create %s: %s", path, strerror(errno));
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return kd_err_set(err, KD_EIO, "%s is not a directory", path);
    return KD_OK;
}

int kd_state_open(const char *dir, kd_state_t **out, kd_err_t *err)
{
    *out = NULL;
    if (strlen(dir) >= KD_PATH_MAX - 64)
        return kd_err_set(err, KD_EIO, "state dir path is too long");
    kd_state_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    s->lock_fd = -1;
    if (pthread_mutex_init(&s->lock, NULL) != 0) {
        free(s);
        return kd_err_set(err, KD_ENOMEM, "cannot create the state directory's lock");
    }
    if (pthread_cond_init(&s->written, NULL) != 0) {
        pthread_mutex_destroy(&s->lock);
        free(s);
        return kd_err_set(err, KD_ENOMEM, "cannot create the state directory's lock");
    }
    snprintf(s->dir, sizeof(s->dir), "%s", dir);
    snprintf(s->matrices, sizeof(s->matrices), "%s/matrices", dir);
    snprintf(s->pattern_dir, sizeof(s->pattern_dir), "%s/patterns", dir);
    snprintf(s->corrupt, sizeof(s->corrupt), "%s/corrupt", dir);
    int rc = kd_mkdir(s->dir, err);
    if (rc == KD_OK)
        rc = kd_mkdir(s->matrices, err);
    if (rc == KD_OK)
        rc = kd_mkdir(s->pattern_dir, err);
    if (rc != KD_OK)
        goto fail;
    char lock[KD_PATH_MAX + 16];
    snprintf(lock, sizeof(lock), "%s/lock", dir);
    s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0640);
    if (s->lock_fd < 0) {
        rc = kd_err_set(err, KD_EIO, "cannot open %s: %s", lock, strerror(errno));
        goto fail;
    }
    if (flock(s->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        rc = kd_err_set(err, KD_EIO, "state dir %s is in use by another krylovd (%s is locked)",
                        dir, lock);
        goto fail;
    }
    *out = s;
    return KD_OK;
fail:
    kd_state_close(s);
    return rc;
}

void kd_state_close(kd_state_t *state)
{
    if (state == NULL)
        return;
    if (state->lock_fd >= 0)
        close(state->lock_fd);
    kd_state_pattern_forget_all(state);
    pthread_cond_destroy(&state->written);
    pthread_mutex_destroy(&state->lock);
    free(state);
}

/* ---- sizes and the header ----------------------------------------------------------------- */

/* The payload of a whole file (split 0: indptr, indices, values) or a values file (split 1). */
static int kd_payload_size(int64_t rows, int64_t nnz, kd_dtype_t dtype, int split, size_t *out)
{
    size_t ptr, idx, val, sum;
    if (rows < 0 || nnz < 0 || kd_mul_overflow((size_t)rows + 1, 4, &ptr) ||
        kd_mul_overflow((size_t)nnz, 4, &idx) ||
        kd_mul_overflow((size_t)nnz, kd_dtype_size(dtype), &val) ||
        kd_add_overflow(ptr, idx, &sum) || kd_add_overflow(sum, val, out))
        return -1;
    if (split)
        *out = val;
    return 0;
}

int kd_state_file_size(int64_t rows, int64_t nnz, kd_dtype_t dtype, size_t *out, kd_err_t *err)
{
    size_t payload, whole;
    if (kd_payload_size(rows, nnz, dtype, 0, &payload) != 0 ||
        kd_add_overflow(payload, KD_STATE_HEADER_BYTES, &whole) ||
        kd_add_overflow(whole, KD_PATTERN_HEADER_BYTES, out))
        return kd_err_set(err, KD_ETOOLARGE, "a %lld-row matrix with %lld nonzeros is too large",
                          (long long)rows, (long long)nnz);
    return KD_OK;
}

static void kd_header_encode(const kd_matrix_meta_t *m, const kd_layout_t *layout,
                             uint64_t payload_bytes, uint64_t sum, uint64_t created_unix,
                             uint8_t h[KD_STATE_HEADER_BYTES])
{
    memset(h, 0, KD_STATE_HEADER_BYTES);
    memcpy(h + KD_H_MAGIC, kd_state_magic, 8);
    kd_put_u32(h + KD_H_VERSION, layout->split ? 2u : 1u);
    if (layout->split)
        memcpy(h + KD_H_PATTERN, layout->key, 16);
    kd_put_u32(h + KD_H_HEADER_BYTES, KD_STATE_HEADER_BYTES);
    memcpy(h + KD_H_ID, m->id, 16);
    kd_put_u64(h + KD_H_ROWS, (uint64_t)m->rows);
    kd_put_u64(h + KD_H_COLS, (uint64_t)m->cols);
    kd_put_u64(h + KD_H_NNZ, (uint64_t)m->nnz);
    kd_put_u32(h + KD_H_DTYPE, (uint32_t)m->dtype);
    kd_put_u32(h + KD_H_FORMAT, (uint32_t)m->format);
    kd_put_u32(h + KD_H_FLAGS, (m->pinned ? KD_FLAG_PINNED : 0u) |
                                   (m->symmetric >= 0 ? KD_FLAG_SYMMETRY_KNOWN : 0u) |
                                   (m->symmetric > 0 ? KD_FLAG_SYMMETRIC : 0u) |
                                   (m->distributed ? KD_FLAG_DISTRIBUTED : 0u));
    kd_put_u64(h + KD_H_PAYLOAD_BYTES, payload_bytes);
    kd_put_u64(h + KD_H_PAYLOAD_SUM, sum);
    kd_put_u64(h + KD_H_DEVICE_BYTES, (uint64_t)m->device_bytes);
    kd_put_u64(h + KD_H_CREATED, created_unix);
    uint8_t *st = h + KD_H_STATS;
    kd_put_u64(st, (uint64_t)m->stats.min_row);
    kd_put_u64(st + 8, (uint64_t)m->stats.max_row);
    kd_put_f64(st + 16, m->stats.mean_row);
    kd_put_f64(st + 24, m->stats.stddev_row);
    kd_put_u64(st + 32, (uint64_t)m->stats.empty_rows);
    kd_put_u64(st + 40, (uint64_t)m->stats.nonfinite);
    memcpy(h + KD_H_NAME, m->name, strnlen(m->name, KD_NAME_MAX - 1));
    int nc =
        m->ncandidates < 0 ? 0 : (m->ncandidates > KD_FMT_COUNT ? KD_FMT_COUNT : m->ncandidates);
    kd_put_u32(h + KD_H_NCANDIDATES, (uint32_t)nc);
    for (int i = 0; i < nc; i++) {
        uint8_t *c = h + KD_H_CANDIDATES + i * KD_H_CANDIDATE_BYTES;
        kd_put_u32(c, (uint32_t)m->candidates[i].format);
        kd_put_f64(c + 8, m->candidates[i].time_ms);
        const char *why = m->candidates[i].dropped;
        memcpy(c + 16, why, strnlen(why, sizeof(m->candidates[i].dropped) - 1));
    }
    int nd = m->detail.count < 0 ? 0
                                 : (m->detail.count > KD_FORMAT_DETAIL_MAX ? KD_FORMAT_DETAIL_MAX
                                                                           : m->detail.count);
    kd_put_u32(h + KD_H_DETAIL, (uint32_t)nd);
    for (int i = 0; i < nd; i++) {
        uint8_t *d = h + KD_H_DETAIL + 8 + i * KD_H_DETAIL_ITEM_BYTES;
        memcpy(d, m->detail.items[i].name,
               strnlen(m->detail.items[i].name, KD_FORMAT_DETAIL_NAME - 1));
        kd_put_u64(d + KD_FORMAT_DETAIL_NAME, (uint64_t)m->detail.items[i].value);
    }
    kd_put_u64(h + KD_H_BATCH, (uint64_t)m->batch);
    memcpy(h + KD_H_TENANT, m->tenant, strnlen(m->tenant, KD_AUTH_NAME_MAX - 1));
    kd_put_u64(h + KD_H_ALONE_BYTES, (uint64_t)m->alone_bytes);
    kd_put_u32(h + KD_H_REORDER, (uint32_t)m->reorder);
    kd_put_u64(h + KD_H_REORDER + 8, (uint64_t)m->bandwidth_before);
    kd_put_u64(h + KD_H_REORDER + 16, (uint64_t)m->bandwidth_after);
    memcpy(h + KD_H_REORDER + 24, m->reorder_reason,
           strnlen(m->reorder_reason, KD_H_REORDER_REASON - 1));
    kd_put_u64(h + KD_H_CHECKSUM, XXH3_64bits(h, KD_H_CHECKSUM));
}

/* Decode and check a header; *sum and *payload_bytes get the payload's checksum and size. */
static int kd_header_decode(const uint8_t h[KD_STATE_HEADER_BYTES], kd_matrix_meta_t *m,
                            kd_layout_t *layout, uint64_t *payload_bytes, uint64_t *sum,
                            kd_err_t *err)
{
    if (memcmp(h + KD_H_MAGIC, kd_state_magic, 8) != 0)
        return kd_err_set(err, KD_EIO, "not a krylovd matrix file (bad magic)");
    uint32_t version = kd_get_u32(h + KD_H_VERSION);
    if (version != 1 && version != KD_STATE_VERSION)
        return kd_err_set(err, KD_EIO, "file format version %u, this krylovd reads 1 to %u",
                          version, KD_STATE_VERSION);
    memset(layout, 0, sizeof(*layout));
    layout->split = version == 2;
    if (layout->split)
        memcpy(layout->key, h + KD_H_PATTERN, 16);
    if (kd_get_u32(h + KD_H_HEADER_BYTES) != KD_STATE_HEADER_BYTES)
        return kd_err_set(err, KD_EIO, "header size %u, expected %u",
                          kd_get_u32(h + KD_H_HEADER_BYTES), KD_STATE_HEADER_BYTES);
    if (kd_get_u64(h + KD_H_CHECKSUM) != XXH3_64bits(h, KD_H_CHECKSUM))
        return kd_err_set(err, KD_EIO, "header checksum mismatch");
    memset(m, 0, sizeof(*m));
    memcpy(m->id, h + KD_H_ID, 16);
    kd_id_to_hex(m->id, m->hex);
    m->rows = (int64_t)kd_get_u64(h + KD_H_ROWS);
    m->cols = (int64_t)kd_get_u64(h + KD_H_COLS);
    m->nnz = (int64_t)kd_get_u64(h + KD_H_NNZ);
    uint32_t dtype = kd_get_u32(h + KD_H_DTYPE), format = kd_get_u32(h + KD_H_FORMAT);
    if (dtype != KD_DTYPE_F64 && dtype != KD_DTYPE_F32)
        return kd_err_set(err, KD_EIO, "bad value type %u", dtype);
    if (format >= KD_FMT_COUNT)
        return kd_err_set(err, KD_EIO, "bad format %u", format);
    m->dtype = (kd_dtype_t)dtype;
    m->format = (kd_format_t)format;
    kd_err_t shape_err = {0};
    if (kd_csr_check_shape(m->rows, m->cols, m->nnz, NULL, &shape_err) != KD_OK)
        return kd_err_set(err, KD_EIO, "bad shape: %s", shape_err.message);
    const uint32_t flags = kd_get_u32(h + KD_H_FLAGS);
    m->pinned = (flags & KD_FLAG_PINNED) != 0;
    m->symmetric = (flags & KD_FLAG_SYMMETRY_KNOWN) == 0 ? -1 : (flags & KD_FLAG_SYMMETRIC) != 0;
    m->distributed = (flags & KD_FLAG_DISTRIBUTED) != 0;
    *payload_bytes = kd_get_u64(h + KD_H_PAYLOAD_BYTES);
    *sum = kd_get_u64(h + KD_H_PAYLOAD_SUM);
    size_t expect;
    if (kd_payload_size(m->rows, m->nnz, m->dtype, layout->split, &expect) != 0 ||
        expect != *payload_bytes)
        return kd_err_set(err, KD_EIO, "payload size %llu does not match the shape",
                          (unsigned long long)*payload_bytes);
    m->device_bytes = (size_t)kd_get_u64(h + KD_H_DEVICE_BYTES);
    const uint64_t batch = kd_get_u64(h + KD_H_BATCH);
    if (batch > (uint64_t)(m->rows > 0 ? m->rows : 1) ||
        (batch > 0 && m->rows % (int64_t)batch != 0))
        return kd_err_set(err, KD_EIO, "batch of %llu systems does not divide %lld rows",
                          (unsigned long long)batch, (long long)m->rows);
    if (batch > 0 && layout->split)
        return kd_err_set(err, KD_EIO, "a batch in a values file");
    m->batch = (int64_t)batch;
    if (memchr(h + KD_H_TENANT, '\0', KD_AUTH_NAME_MAX) == NULL)
        return kd_err_set(err, KD_EIO, "tenant is not terminated");
    memcpy(m->tenant, h + KD_H_TENANT, KD_AUTH_NAME_MAX);
    m->alone_bytes = (size_t)kd_get_u64(h + KD_H_ALONE_BYTES);
    const uint8_t *st = h + KD_H_STATS;
    m->stats.min_row = (int64_t)kd_get_u64(st);
    m->stats.max_row = (int64_t)kd_get_u64(st + 8);
    m->stats.mean_row = kd_get_f64(st + 16);
    m->stats.stddev_row = kd_get_f64(st + 24);
    m->stats.empty_rows = (int64_t)kd_get_u64(st + 32);
    m->stats.nonfinite = (int64_t)kd_get_u64(st + 40);
    if (memchr(h + KD_H_NAME, '\0', KD_NAME_MAX) == NULL)
        return kd_err_set(err, KD_EIO, "name is not terminated");
    memcpy(m->name, h + KD_H_NAME, KD_NAME_MAX);
    uint32_t nc = kd_get_u32(h + KD_H_NCANDIDATES);
    if (nc > KD_FMT_COUNT)
        return kd_err_set(err, KD_EIO, "%u format candidates", nc);
    m->ncandidates = (int)nc;
    for (uint32_t i = 0; i < nc; i++) {
        const uint8_t *c = h + KD_H_CANDIDATES + i * KD_H_CANDIDATE_BYTES;
        uint32_t f = kd_get_u32(c);
        if (f >= KD_FMT_COUNT)
            return kd_err_set(err, KD_EIO, "bad candidate format %u", f);
        m->candidates[i].format = (kd_format_t)f;
        m->candidates[i].time_ms = kd_get_f64(c + 8);
        memcpy(m->candidates[i].dropped, c + 16, sizeof(m->candidates[i].dropped));
        m->candidates[i].dropped[sizeof(m->candidates[i].dropped) - 1] = '\0';
    }
    uint32_t nd = kd_get_u32(h + KD_H_DETAIL); /* 0 in files written before the field */
    if (nd > KD_FORMAT_DETAIL_MAX)
        return kd_err_set(err, KD_EIO, "%u format detail entries", nd);
    m->detail.count = (int)nd;
    for (uint32_t i = 0; i < nd; i++) {
        const uint8_t *d = h + KD_H_DETAIL + 8 + i * KD_H_DETAIL_ITEM_BYTES;
        memcpy(m->detail.items[i].name, d, KD_FORMAT_DETAIL_NAME);
        m->detail.items[i].name[KD_FORMAT_DETAIL_NAME - 1] = '\0';
        m->detail.items[i].value = (int64_t)kd_get_u64(d + KD_FORMAT_DETAIL_NAME);
    }
    uint32_t reorder = kd_get_u32(h + KD_H_REORDER);
    if (reorder != KD_REORDER_NONE && reorder != KD_REORDER_RCM && reorder != KD_REORDER_METIS)
        return kd_err_set(err, KD_EIO, "bad reordering %u", reorder);
    m->reorder = (kd_reorder_t)reorder;
    m->bandwidth_before = (int64_t)kd_get_u64(h + KD_H_REORDER + 8);
    m->bandwidth_after = (int64_t)kd_get_u64(h + KD_H_REORDER + 16);
    memset(m->reorder_reason, 0, sizeof(m->reorder_reason));
    memcpy(m->reorder_reason, h + KD_H_REORDER + 24, KD_H_REORDER_REASON - 1);
    m->stored = 1;
    return KD_OK;
}

/* ---- I/O helpers -------------------------------------------------------------------------- */

int kd_state_pread_all(int fd, void *data, size_t len, uint64_t offset)
{
    char *p = data;
    while (len > 0) {
        size_t chunk = len > ((size_t)1 << 30) ? (size_t)1 << 30 : len;
        ssize_t n = pread(fd, p, chunk, (off_t)offset);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (n == 0) {
            errno = 0;
            return -1;
        }
        p += n;
        len -= (size_t)n;
        offset += (uint64_t)n;
    }
    return 0;
}

/* Whole file: XXH3-64 of the three arrays, chained (each array's hash seeds the next one's).
 * Values file: XXH3-64 of the values (the pattern file has its own). */
static uint64_t kd_payload_checksum(const kd_csr_t *csr, int split)
{
    const size_t values = (size_t)csr->nnz * kd_dtype_size(csr->dtype);
    if (split)
        return XXH3_64bits(csr->values, values);
    uint64_t sum = XXH3_64bits(csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
    sum = XXH3_64bits_withSeed(csr->indices, (size_t)csr->nnz * sizeof(int32_t), sum);
    return XXH3_64bits_withSeed(csr->values, values, sum);
}

/* A failed call's code: a full file system (or a full quota) is STORAGE_FULL. */
static int kd_state_errno_code(int e)
{
    return e == ENOSPC || e == EDQUOT ? KD_ESTORAGE : KD_EIO;
}

int kd_state_fail(kd_err_t *err, int saved_errno, const char *doing, const char *call,
                  const char *path)
{
    int code = kd_state_errno_code(saved_errno);
    KD_ERROR("state", "%s: %s path=%s: %s", doing, call, path, strerror(saved_errno));
    if (code == KD_ESTORAGE)
        return kd_err_set(err, code,
                          "%s: the server's storage is full; nothing was changed and the matrices "
                          "stored before are untouched: try again once space is freed",
                          doing);
    return kd_err_set(err, code,
                      "%s: a file-system error in the server's state directory (the server's log "
                      "has the details)",
                      doing);
}

int kd_state_commit(const char *dir, const char *tmp, const char *path, const struct iovec *parts,
                    int nparts, int src_fd, uint64_t copy_from, uint64_t copy_bytes, int replace,
                    const char *doing, kd_err_t *err)
{
    int fd = kd_state_io_create(tmp);
    if (fd < 0)
        return kd_state_fail(err, errno, doing, "create", tmp);
    const char *call = "write";
    int bad = kd_state_io_write(fd, parts, nparts) != 0;
    if (!bad && src_fd >= 0) {
        char buf[1 << 16];
        uint64_t off = copy_from, left = copy_bytes;
        while (!bad && left > 0) {
            size_t n = left < sizeof(buf) ? (size_t)left : sizeof(buf);
            if (kd_state_pread_all(src_fd, buf, n, off) != 0) {
                if (errno == 0)
                    errno = EIO;
                call = "read the old file";
                bad = 1;
                break;
            }
            bad = kd_state_io_write(fd, &(struct iovec){buf, n}, 1) != 0;
            off += n;
            left -= n;
        }
    }
    if (!bad && kd_state_io_fsync(fd) != 0) {
        call = "fsync";
        bad = 1;
    }
    int saved = errno;
    if (close(fd) != 0 && !bad) {
        call = "close";
        bad = 1;
        saved = errno;
    }
    if (bad) {
        kd_state_io_unlink(tmp);
        return kd_state_fail(err, saved, doing, call, tmp);
    }
    if (kd_state_io_rename(tmp, path) != 0) {
        saved = errno;
        kd_state_io_unlink(tmp);
        return kd_state_fail(err, saved, doing, "rename", path);
    }
    if (kd_state_io_fsync_dir(dir) != 0) {
        saved = errno;
        if (replace) { /* the new file is in place and is what memory holds: keep it */
            KD_WARN("state", "%s: fsync of the directory path=%s: %s", doing, dir, strerror(saved));
            return KD_OK;
        }
        kd_state_io_unlink(path); /* the put fails, so the file must not come back later */
        return kd_state_fail(err, saved, doing, "fsync of the directory", dir);
    }
    return KD_OK;
}

/* Remove a values file a failed put had renamed into place already. */
static void kd_state_unstore(kd_state_t *state, const char *path)
{
    if (kd_state_io_unlink(path) == 0)
        kd_state_io_fsync_dir(state->matrices);
}

int kd_state_write(kd_state_t *state, const kd_matrix_meta_t *meta, const kd_csr_t *csr,
                   size_t *file_bytes, kd_err_t *err)
{
    /* a batch keeps one whole file: its id is its block diagonal's hash mixed with the count */
    kd_layout_t layout = {.split = meta->batch == 0};
    size_t payload;
    if (kd_payload_size(csr->rows, csr->nnz, csr->dtype, layout.split, &payload) != 0)
        return kd_err_set(err, KD_ETOOLARGE, "matrix too large for a state file");
    char doing[96];
    snprintf(doing, sizeof(doing), "storing matrix %s", meta->hex);
    int rc;
    if (layout.split) {
        if (kd_state_pattern_key(csr, layout.key) != KD_OK)
            return kd_err_set(err, KD_ENOMEM, "%s: out of host memory", doing);
        if ((rc = kd_state_pattern_ensure(state, layout.key, csr, doing, err)) != KD_OK)
            return rc;
    }
    uint8_t header[KD_STATE_HEADER_BYTES];
    kd_header_encode(meta, &layout, payload, kd_payload_checksum(csr, layout.split),
                     (uint64_t)time(NULL), header);
    const size_t values = (size_t)csr->nnz * kd_dtype_size(csr->dtype);
    struct iovec parts[4] = {{header, KD_STATE_HEADER_BYTES}};
    int nparts = 1;
    if (!layout.split) {
        parts[nparts++] = (struct iovec){csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t)};
        parts[nparts++] = (struct iovec){csr->indices, (size_t)csr->nnz * sizeof(int32_t)};
    }
    parts[nparts++] = (struct iovec){csr->values, values};
    char path[KD_PATH_MAX + 64], tmp[KD_PATH_MAX + 64];
    kd_state_path(state, meta->id, path, sizeof(path));
    kd_state_tmp_path(state, meta->id, tmp, sizeof(tmp));
    rc = kd_state_commit(state->matrices, tmp, path, parts, nparts, -1, 0, 0, 0, doing, err);
    size_t charged = 0;
    pthread_mutex_lock(&state->lock); /* publish: the index learns the new file */
    if (rc == KD_OK && layout.split && kd_state_user_find(state, meta->id) == NULL &&
        (rc = kd_state_user_add(state, meta->id, layout.key, &charged, err)) != KD_OK)
        kd_state_unstore(state, path);
    if (layout.split) /* a pattern file nothing names now (this put failed) goes too */
        kd_state_pattern_unhold(state, layout.key);
    pthread_mutex_unlock(&state->lock);
    if (rc != KD_OK)
        return rc;
    *file_bytes = payload + KD_STATE_HEADER_BYTES + charged;
    return KD_OK;
}

int kd_state_put_bytes(kd_state_t *state, const kd_csr_t *csr, int64_t batch, size_t *out,
                       kd_err_t *err)
{
    size_t payload;
    if (kd_payload_size(csr->rows, csr->nnz, csr->dtype, batch == 0, &payload) != 0)
        return kd_err_set(err, KD_ETOOLARGE, "matrix too large for a state file");
    *out = payload + KD_STATE_HEADER_BYTES;
    if (batch > 0)
        return KD_OK;
    uint8_t key[16];
    if (kd_state_pattern_key(csr, key) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory hashing the matrix's pattern");
    pthread_mutex_lock(&state->lock);
    const int held = kd_state_pattern_find(state, key) != NULL;
    pthread_mutex_unlock(&state->lock);
    if (!held)
        *out += KD_PATTERN_HEADER_BYTES + ((size_t)csr->rows + 1) * 4 + (size_t)csr->nnz * 4;
    return KD_OK;
}

/* Open path and check its header and size. On KD_OK, *fd is open (the caller closes it) and meta,
 * *layout, *payload and *sum are filled. A readable but wrong file sets *corrupt. */
static int kd_state_open_checked(const char *path, int *fd_out, kd_matrix_meta_t *meta,
                                 kd_layout_t *layout, uint64_t *payload, uint64_t *sum,
                                 int *corrupt, kd_err_t *err)
{
    *corrupt = 0;
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return kd_err_set(err, errno == ENOENT ? KD_ENOTFOUND : KD_EIO, "cannot open %s: %s", path,
                          strerror(errno));
    uint8_t h[KD_STATE_HEADER_BYTES];
    struct stat st;
    int rc = KD_OK;
    if (fstat(fd, &st) != 0) {
        rc = kd_err_set(err, KD_EIO, "cannot stat %s: %s", path, strerror(errno));
    } else if (kd_state_pread_all(fd, h, sizeof(h), 0) != 0) {
        if (errno != 0) {
            rc = kd_err_set(err, KD_EIO, "cannot read %s: %s", path, strerror(errno));
        } else {
            *corrupt = 1;
            rc = kd_err_set(err, KD_EIO, "truncated: %lld bytes, shorter than the header",
                            (long long)st.st_size);
        }
    } else if ((rc = kd_header_decode(h, meta, layout, payload, sum, err)) != KD_OK) {
        *corrupt = 1;
    } else if ((uint64_t)st.st_size != *payload + KD_STATE_HEADER_BYTES) {
        *corrupt = 1;
        rc = kd_err_set(
            err, KD_EIO, "%s: %lld bytes, the header says %llu",
            (uint64_t)st.st_size < *payload + KD_STATE_HEADER_BYTES ? "truncated" : "wrong size",
            (long long)st.st_size, (unsigned long long)(*payload + KD_STATE_HEADER_BYTES));
    } else {
        meta->file_bytes = (size_t)st.st_size;
    }
    if (rc != KD_OK) {
        close(fd);
        return rc;
    }
    *fd_out = fd;
    return KD_OK;
}

int kd_state_read_header(const char *path, kd_matrix_meta_t *meta, size_t *file_bytes, int *corrupt,
                         kd_err_t *err)
{
    int fd;
    uint64_t payload, sum;
    kd_layout_t layout;
    int rc = kd_state_open_checked(path, &fd, meta, &layout, &payload, &sum, corrupt, err);
    if (rc != KD_OK)
        return rc;
    close(fd);
    *file_bytes = meta->file_bytes;
    return KD_OK;
}

void kd_state_move_aside(kd_state_t *state, const char *dir, const char *path, const char *name,
                         const char *why)
{
    kd_err_t err = {0};
    char dest[KD_PATH_MAX + 160];
    if (kd_mkdir(state->corrupt, &err) != KD_OK) {
        KD_ERROR("state", "corrupt file %s (%s) left in place: %s", path, why, err.message);
        return;
    }
    struct stat st;
    for (int n = 0;; n++) { /* never overwrite an earlier corrupt copy */
        snprintf(dest, sizeof(dest), "%s/%s.%lld.%d", state->corrupt, name, (long long)time(NULL),
                 n);
        if (stat(dest, &st) != 0 || n >= 1000)
            break;
    }
    if (kd_state_io_rename(path, dest) != 0) {
        KD_ERROR("state", "corrupt file %s (%s) left in place: rename: %s", path, why,
                 strerror(errno));
        return;
    }
    kd_state_io_fsync_dir(dir);
    kd_state_io_fsync_dir(state->corrupt);
    state->moved_aside++;
    KD_ERROR("state", "corrupt matrix file moved aside path=%s to=%s reason=\"%s\"", path, dest,
             why);
}

int kd_state_check_pattern(const kd_csr_t *m)
{
    if (m->indptr[0] != 0 || m->indptr[m->rows] != m->nnz)
        return -1;
    for (int64_t r = 0; r < m->rows; r++) {
        if (m->indptr[r + 1] < m->indptr[r])
            return -1;
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
            if (m->indices[k] < 0 || m->indices[k] >= m->cols ||
                (k > m->indptr[r] && m->indices[k] <= m->indices[k - 1]))
                return -1;
    }
    return 0;
}

/* The id of content hash h: a batch's is changed by its size (solver/batch/batch.h), a copy stored for
 * one user by the name (store.h, kd_id_mix_tenant). */
static const uint8_t *kd_state_content_id(uint8_t h[16], int64_t batch, const char *tenant)
{
    if (batch > 0)
        kd_batch_id_mix(h, batch);
    if (tenant[0] != '\0')
        kd_id_mix_tenant(h, tenant);
    return h;
}

/* The content hash of csr against id (last of a load's checks). */
static int kd_state_check_id(const kd_csr_t *csr, const kd_matrix_meta_t *m, const uint8_t id[16],
                             int *corrupt, kd_err_t *err)
{
    uint8_t check[16];
    if (kd_csr_hash(csr, check) != KD_OK)
        return kd_err_set(err, KD_ENOMEM, "out of host memory hashing the matrix");
    if (memcmp(kd_state_content_id(check, m->batch, m->tenant), id, 16) != 0) {
        *corrupt = 1;
        return kd_err_set(err, KD_EIO, "content hash does not match the id");
    }
    return KD_OK;
}

/* Read a whole (version 1) file's payload into a new CSR and check it against the header and the
 * id. KD_OK; KD_EIO with *corrupt for a failed check; KD_EIO / KD_ENOMEM otherwise. */
static int kd_state_read_whole(int fd, const kd_matrix_meta_t *m, uint64_t sum,
                               const uint8_t id[16], kd_csr_t **out, int *corrupt, kd_err_t *err)
{
    kd_csr_t *csr = NULL;
    int rc = kd_csr_alloc(m->rows, m->cols, m->nnz, m->dtype, &csr, err);
    if (rc != KD_OK)
        return rc;
    size_t ptr = ((size_t)m->rows + 1) * 4, idx = (size_t)m->nnz * 4,
           val = (size_t)m->nnz * kd_dtype_size(m->dtype);
    uint64_t off = KD_STATE_HEADER_BYTES;
    if (kd_state_pread_all(fd, csr->indptr, ptr, off) != 0 ||
        (idx > 0 && kd_state_pread_all(fd, csr->indices, idx, off + ptr) != 0) ||
        (val > 0 && kd_state_pread_all(fd, csr->values, val, off + ptr + idx) != 0)) {
        *corrupt = errno == 0; /* it shrank since the header was read */
        rc = kd_err_set(err, KD_EIO, "%s", errno == 0 ? "truncated" : strerror(errno));
    } else if (kd_payload_checksum(csr, 0) != sum) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "payload checksum mismatch");
    } else if (kd_state_check_pattern(csr) != 0) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "the stored arrays are not a canonical CSR matrix");
    } else {
        rc = kd_state_check_id(csr, m, id, corrupt, err);
    }
    if (rc != KD_OK) {
        kd_csr_free(csr);
        return rc;
    }
    *out = csr;
    return KD_OK;
}

/* Read a values (version 2) file and its pattern file into a new CSR (values NULL and unread
 * with pattern_only) and check both. A failed check of the pattern file (or none there) sets
 * *pattern_bad as well as *corrupt. */
static int kd_state_read_split(kd_state_t *state, int fd, const kd_matrix_meta_t *m,
                               const kd_layout_t *layout, uint64_t sum, const uint8_t id[16],
                               int pattern_only, kd_csr_t **out, int *corrupt, int *pattern_bad,
                               kd_err_t *err)
{
    kd_csr_t *csr = NULL;
    int rc = kd_csr_alloc(m->rows, m->cols, m->nnz, m->dtype, &csr, err);
    if (rc != KD_OK)
        return rc;
    if (pattern_only) {
        free(csr->values);
        csr->values = NULL;
    }
    int pattern_corrupt = 0;
    kd_err_t why = {0};
    rc = kd_state_pattern_read(state, layout->key, csr, &pattern_corrupt, &why);
    if (rc != KD_OK) {
        if (pattern_corrupt || rc == KD_ENOTFOUND) {
            *corrupt = *pattern_bad = 1;
            rc = kd_err_set(err, KD_EIO, "its pattern file: %s", why.message);
        } else {
            rc = kd_err_set(err, rc, "its pattern file: %s", why.message);
        }
    } else if (!pattern_only) {
        size_t val = (size_t)m->nnz * kd_dtype_size(m->dtype);
        if (val > 0 && kd_state_pread_all(fd, csr->values, val, KD_STATE_HEADER_BYTES) != 0) {
            *corrupt = errno == 0;
            rc = kd_err_set(err, KD_EIO, "%s", errno == 0 ? "truncated" : strerror(errno));
        } else if (kd_payload_checksum(csr, 1) != sum) {
            *corrupt = 1;
            rc = kd_err_set(err, KD_EIO, "payload checksum mismatch");
        } else {
            rc = kd_state_check_id(csr, m, id, corrupt, err);
        }
    }
    if (rc != KD_OK) {
        kd_csr_free(csr);
        return rc;
    }
    *out = csr;
    return KD_OK;
}

/* kd_state_load and kd_state_load_pattern: read, and on a failed check move aside. */
static int kd_state_load_checked(kd_state_t *state, const uint8_t id[16], int pattern_only,
                                 kd_csr_t **out, kd_err_t *err)
{
    *out = NULL;
    char path[KD_PATH_MAX + 64], name[KD_ID_HEX_LEN + 8], hex[KD_ID_HEX_LEN + 1];
    kd_state_path(state, id, path, sizeof(path));
    kd_id_to_hex(id, hex);
    snprintf(name, sizeof(name), "%s.kdm", hex);
    kd_matrix_meta_t m;
    kd_layout_t layout = {0};
    uint64_t payload, sum;
    int fd, corrupt = 0, pattern_bad = 0;
    kd_err_t why = {0};
    int rc = kd_state_open_checked(path, &fd, &m, &layout, &payload, &sum, &corrupt, &why);
    if (rc == KD_OK) {
        if (memcmp(m.id, id, 16) != 0) {
            corrupt = 1;
            rc = kd_err_set(&why, KD_EIO, "the header names matrix %s", m.hex);
        } else if (layout.split) {
            rc = kd_state_read_split(state, fd, &m, &layout, sum, id, pattern_only, out, &corrupt,
                                     &pattern_bad, &why);
        } else if ((rc = kd_state_read_whole(fd, &m, sum, id, out, &corrupt, &why)) == KD_OK &&
                   pattern_only) {
            free((*out)->values);
            (*out)->values = NULL;
        }
        close(fd);
    }
    if (rc == KD_OK)
        return KD_OK;
    if (!corrupt) {
        KD_ERROR("state", "loading matrix %s path=%s: %s", hex, path, why.message);
        if (rc == KD_ENOMEM)
            return kd_err_set(err, rc, "loading matrix %s: out of host memory", hex);
        if (rc == KD_ENOTFOUND)
            return kd_err_set(err, rc,
                              "loading matrix %s: its stored copy is gone from the server; upload "
                              "it again",
                              hex);
        return kd_err_set(err, rc,
                          "loading matrix %s: its stored copy cannot be read (a file-system "
                          "error; the server's log has the details)",
                          hex);
    }
    if (pattern_bad) /* every matrix naming it goes to corrupt/ with it */
        kd_state_pattern_discard(state, layout.key, id, why.message);
    kd_state_move_aside(state, state->matrices, path, name, why.message);
    if (!pattern_bad)
        kd_state_user_release(state, id);
    return kd_err_set(err, KD_ENOTFOUND,
                      "the stored copy of matrix %s failed its check (%s) and was moved aside; "
                      "upload it again",
                      hex, why.message);
}

/* The worker's reads hold the index lock throughout: they only delay the writer's publishing. */
int kd_state_load(kd_state_t *state, const uint8_t id[16], kd_csr_t **out, kd_err_t *err)
{
    pthread_mutex_lock(&state->lock);
    int rc = kd_state_load_checked(state, id, 0, out, err);
    pthread_mutex_unlock(&state->lock);
    return rc;
}

int kd_state_load_pattern(kd_state_t *state, const uint8_t id[16], kd_csr_t **out, kd_err_t *err)
{
    pthread_mutex_lock(&state->lock);
    int rc = kd_state_load_checked(state, id, 1, out, err);
    pthread_mutex_unlock(&state->lock);
    return rc;
}

int kd_state_update_header(kd_state_t *state, const kd_matrix_meta_t *meta, kd_err_t *err)
{
    char path[KD_PATH_MAX + 64], tmp[KD_PATH_MAX + 64];
    kd_state_path(state, meta->id, path, sizeof(path));
    kd_state_tmp_path(state, meta->id, tmp, sizeof(tmp));
    char doing[96];
    snprintf(doing, sizeof(doing), "updating the stored header of matrix %s", meta->hex);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT) {
            KD_ERROR("state", "%s: no file path=%s", doing, path);
            return kd_err_set(err, KD_ENOTFOUND, "%s: the server has no stored copy of it", doing);
        }
        return kd_state_fail(err, errno, doing, "open", path);
    }
    uint8_t old[KD_STATE_HEADER_BYTES], header[KD_STATE_HEADER_BYTES];
    kd_matrix_meta_t disk;
    kd_layout_t layout;
    uint64_t payload, sum;
    kd_err_t derr = {0};
    if (kd_state_pread_all(fd, old, sizeof(old), 0) != 0 ||
        kd_header_decode(old, &disk, &layout, &payload, &sum, &derr) != KD_OK) {
        KD_ERROR("state", "%s: the header does not read back path=%s: %s", doing, path,
                 derr.message[0] ? derr.message : strerror(errno));
        close(fd);
        return kd_err_set(err, KD_EIO,
                          "%s: its stored header does not read back (the server's log has the "
                          "details)",
                          doing);
    }
    kd_header_encode(meta, &layout, payload, sum, kd_get_u64(old + KD_H_CREATED), header);
    const struct iovec part = {header, KD_STATE_HEADER_BYTES};
    int rc = kd_state_commit(state->matrices, tmp, path, &part, 1, fd, KD_STATE_HEADER_BYTES,
                             payload, 1, doing, err);
    close(fd);
    return rc;
}

int kd_state_remove(kd_state_t *state, const uint8_t id[16], kd_err_t *err)
{
    char path[KD_PATH_MAX + 64];
    kd_state_path(state, id, path, sizeof(path));
    if (kd_state_io_unlink(path) != 0 && errno != ENOENT) {
        int saved = errno;
        char hex[KD_ID_HEX_LEN + 1], doing[96];
        kd_id_to_hex(id, hex);
        snprintf(doing, sizeof(doing), "removing the stored copy of matrix %s", hex);
        return kd_state_fail(err, saved, doing, "unlink", path);
    }
    kd_state_io_fsync_dir(state->matrices);
    pthread_mutex_lock(&state->lock);
    kd_state_user_release(state, id); /* then its pattern file, when it was the last user */
    pthread_mutex_unlock(&state->lock);
    return KD_OK;
}

int kd_state_next_change(kd_state_t *state, kd_state_change_t *change)
{
    pthread_mutex_lock(&state->lock);
    const int any = state->nchanges > 0;
    if (any) {
        *change = state->changes[0];
        state->nchanges--;
        memmove(state->changes, state->changes + 1, state->nchanges * sizeof(*state->changes));
    }
    pthread_mutex_unlock(&state->lock);
    return any;
}

int kd_state_pattern_file(kd_state_t *state, const uint8_t id[16], char *buf, size_t cap)
{
    pthread_mutex_lock(&state->lock);
    const kd_state_user_t *u = kd_state_user_find(state, id);
    if (u != NULL)
        kd_state_pattern_path(state, u->key, buf, cap);
    pthread_mutex_unlock(&state->lock);
    return u != NULL ? KD_OK : KD_ENOTFOUND;
}

/* "<32 hex>.kdm" -> id */
static int kd_state_parse_name(const char *name, uint8_t id[16])
{
    size_t len = strlen(name);
    if (len != KD_ID_HEX_LEN + 4 || strcmp(name + KD_ID_HEX_LEN, ".kdm") != 0)
        return -1;
    return kd_id_from_hex(name, KD_ID_HEX_LEN, id);
}

/* The scan's checks of one matrix file beyond its header's: its name, its pattern file. On
 * KD_OK, *charged is what it carries of its pattern file. */
static int kd_state_scan_one(kd_state_t *state, const char *path, const uint8_t id[16],
                             kd_matrix_meta_t *meta, size_t *charged, int *corrupt, kd_err_t *why)
{
    int fd;
    kd_layout_t layout;
    uint64_t payload, sum;
    *charged = 0;
    int rc = kd_state_open_checked(path, &fd, meta, &layout, &payload, &sum, corrupt, why);
    if (rc != KD_OK)
        return rc;
    close(fd);
    if (memcmp(meta->id, id, 16) != 0) {
        *corrupt = 1;
        return kd_err_set(why, KD_EIO, "the header names matrix %s", meta->hex);
    }
    if (!layout.split)
        return KD_OK;
    const kd_state_pattern_t *p = kd_state_pattern_find(state, layout.key);
    char key[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(layout.key, key);
    if (p == NULL) {
        *corrupt = 1;
        return kd_err_set(why, KD_EIO, "its pattern file %s is missing or failed its check", key);
    }
    if (p->rows != meta->rows || p->cols != meta->cols || p->nnz != meta->nnz) {
        *corrupt = 1;
        return kd_err_set(why, KD_EIO, "its pattern file %s has another shape", key);
    }
    return kd_state_user_add(state, id, layout.key, charged, why);
}

int kd_state_scan_entry(const char *dir, const char *name, kd_state_scan_totals_t *totals,
                        char *path, size_t cap)
{
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    snprintf(path, cap, "%s/%s", dir, name);
    const size_t len = strlen(name);
    if (name[0] == '.' && len > 4 && strcmp(name + len - 4, ".tmp") == 0) {
        if (kd_state_io_unlink(path) == 0) {
            totals->temporary++;
            KD_WARN("state", "removed an interrupted write path=%s", path);
        }
        return 0;
    }
    if (name[0] == '.' && len > 8 && strcmp(name + len - 7, ".behind") == 0) {
        kd_state_scan_behind(dir, name, path, totals);
        return 0;
    }
    return 1;
}

int kd_state_scan(kd_state_t *state, kd_state_scan_fn fn, void *ctx, kd_state_scan_totals_t *totals,
                  kd_err_t *err)
{
    memset(totals, 0, sizeof(*totals));
    kd_state_pattern_forget_all(state); /* the record is the directory's as found now */
    int rc = kd_state_pattern_scan(state, totals, err);
    if (rc != KD_OK)
        return rc;
    DIR *d = opendir(state->matrices);
    if (d == NULL)
        return kd_err_set(err, KD_EIO, "cannot read %s: %s", state->matrices, strerror(errno));
    struct dirent *de;
    int stop = 0;
    while (!stop && (de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        char path[KD_PATH_MAX + 300];
        if (!kd_state_scan_entry(state->matrices, name, totals, path, sizeof(path)))
            continue;
        uint8_t id[16];
        if (kd_state_parse_name(name, id) != 0) {
            totals->ignored++;
            KD_WARN("state", "ignoring a file that is not a matrix path=%s", path);
            continue;
        }
        kd_matrix_meta_t meta;
        size_t charged = 0;
        int corrupt = 0;
        kd_err_t why = {0};
        int one = kd_state_scan_one(state, path, id, &meta, &charged, &corrupt, &why);
        if (one == KD_ENOMEM) {
            rc = kd_err_set(err, KD_ENOMEM, "out of host memory registering stored matrices");
            break;
        }
        if (one != KD_OK) {
            if (corrupt) {
                totals->corrupt++;
                kd_state_move_aside(state, state->matrices, path, name, why.message);
            } else {
                KD_ERROR("state", "cannot read path=%s: %s", path, why.message);
            }
            continue;
        }
        struct stat st;
        int64_t mtime = stat(path, &st) == 0 ? (int64_t)st.st_mtime : 0;
        totals->good++;
        meta.file_bytes += charged;
        stop = fn(ctx, &meta, meta.file_bytes, mtime);
    }
    closedir(d);
    if (rc == KD_OK && !stop) /* after every matrix had its say: what none names goes */
        kd_state_pattern_sweep(state, totals);
    return rc;
}
