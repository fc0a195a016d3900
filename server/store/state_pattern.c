/*
 * Pattern files in the state directory (see state.h): a matrix's indptr and indices, stored once
 * for every matrix with that exact pattern, under a key hashed from them; and the record, kept in
 * memory, of which stored matrix names which pattern file, so that the last one's removal takes
 * the pattern file along and the bytes of each pattern file are charged to exactly one matrix.
 *
 * The file: a 128-byte header (little-endian, docs/OPERATIONS.md has the table) with its own
 * checksum, the payload's size and checksum, the key and the shape; then indptr and indices. A
 * reader checks the header, the size, the payload checksum, the CSR structure and the key
 * recomputed from the content, so a pattern file vouches for itself whichever matrix reads it.
 */
#include "common/le.h"
#include "common/log.h"
#include "server/store/state_io.h"
#include "server/store/state_priv.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char kd_pattern_magic[8] = {'K', 'D', 'P', 'A', 'T', 'T', 'R', 'N'};

/* Header offsets (docs/OPERATIONS.md). */
enum {
    KD_P_MAGIC = 0,
    KD_P_VERSION = 8,
    KD_P_HEADER_BYTES = 12,
    KD_P_KEY = 16,
    KD_P_ROWS = 32,
    KD_P_COLS = 40,
    KD_P_NNZ = 48,
    KD_P_PAYLOAD_BYTES = 56,
    KD_P_PAYLOAD_SUM = 64,
    KD_P_CHECKSUM = KD_PATTERN_HEADER_BYTES - 8,
};

/* A pattern file's header fields. */
typedef struct kd_pattern_info {
    uint8_t key[16];
    int64_t rows, cols, nnz;
    uint64_t payload_bytes, sum;
} kd_pattern_info_t;

int kd_state_pattern_key(const kd_csr_t *csr, uint8_t key[16])
{
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL)
        return KD_ENOMEM;
    /* a prefix of its own, so that no pattern key is ever a content id */
    uint8_t prefix[32] = {'k', 'r', 'y', 'l', 'o', 'v', 'd', 'P'};
    kd_put_u64(prefix + 8, (uint64_t)csr->rows);
    kd_put_u64(prefix + 16, (uint64_t)csr->cols);
    kd_put_u64(prefix + 24, (uint64_t)csr->nnz);
    XXH3_128bits_reset(st);
    XXH3_128bits_update(st, prefix, sizeof(prefix));
    XXH3_128bits_update(st, csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
    XXH3_128bits_update(st, csr->indices, (size_t)csr->nnz * sizeof(int32_t));
    XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, h);
    memcpy(key, canon.digest, 16);
    return KD_OK;
}

void kd_state_pattern_path(const kd_state_t *state, const uint8_t key[16], char *buf, size_t cap)
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(key, hex);
    snprintf(buf, cap, "%s/%s.kdp", state->pattern_dir, hex);
}

/* Bytes of indptr and indices. */
static uint64_t kd_pattern_payload(int64_t rows, int64_t nnz)
{
    return ((uint64_t)rows + 1) * 4 + (uint64_t)nnz * 4;
}

static uint64_t kd_pattern_checksum(const kd_csr_t *csr)
{
    uint64_t sum = XXH3_64bits(csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
    return XXH3_64bits_withSeed(csr->indices, (size_t)csr->nnz * sizeof(int32_t), sum);
}

static void kd_pattern_header_encode(const uint8_t key[16], const kd_csr_t *csr,
                                     uint8_t h[KD_PATTERN_HEADER_BYTES])
{
    memset(h, 0, KD_PATTERN_HEADER_BYTES);
    memcpy(h + KD_P_MAGIC, kd_pattern_magic, 8);
    kd_put_u32(h + KD_P_VERSION, 1);
    kd_put_u32(h + KD_P_HEADER_BYTES, KD_PATTERN_HEADER_BYTES);
    memcpy(h + KD_P_KEY, key, 16);
    kd_put_u64(h + KD_P_ROWS, (uint64_t)csr->rows);
    kd_put_u64(h + KD_P_COLS, (uint64_t)csr->cols);
    kd_put_u64(h + KD_P_NNZ, (uint64_t)csr->nnz);
    kd_put_u64(h + KD_P_PAYLOAD_BYTES, kd_pattern_payload(csr->rows, csr->nnz));
    kd_put_u64(h + KD_P_PAYLOAD_SUM, kd_pattern_checksum(csr));
    kd_put_u64(h + KD_P_CHECKSUM, XXH3_64bits(h, KD_P_CHECKSUM));
}

static int kd_pattern_header_decode(const uint8_t h[KD_PATTERN_HEADER_BYTES],
                                    kd_pattern_info_t *info, kd_err_t *err)
{
    if (memcmp(h + KD_P_MAGIC, kd_pattern_magic, 8) != 0)
        return kd_err_set(err, KD_EIO, "not a krylovd pattern file (bad magic)");
    if (kd_get_u32(h + KD_P_VERSION) != 1)
        return kd_err_set(err, KD_EIO, "pattern file version %u, this krylovd reads 1",
                          kd_get_u32(h + KD_P_VERSION));
    if (kd_get_u32(h + KD_P_HEADER_BYTES) != KD_PATTERN_HEADER_BYTES)
        return kd_err_set(err, KD_EIO, "header size %u, expected %u",
                          kd_get_u32(h + KD_P_HEADER_BYTES), KD_PATTERN_HEADER_BYTES);
    if (kd_get_u64(h + KD_P_CHECKSUM) != XXH3_64bits(h, KD_P_CHECKSUM))
        return kd_err_set(err, KD_EIO, "header checksum mismatch");
    memcpy(info->key, h + KD_P_KEY, 16);
    info->rows = (int64_t)kd_get_u64(h + KD_P_ROWS);
    info->cols = (int64_t)kd_get_u64(h + KD_P_COLS);
    info->nnz = (int64_t)kd_get_u64(h + KD_P_NNZ);
    info->payload_bytes = kd_get_u64(h + KD_P_PAYLOAD_BYTES);
    info->sum = kd_get_u64(h + KD_P_PAYLOAD_SUM);
    kd_err_t shape_err = {0};
    if (kd_csr_check_shape(info->rows, info->cols, info->nnz, NULL, &shape_err) != KD_OK)
        return kd_err_set(err, KD_EIO, "bad shape: %s", shape_err.message);
    if (info->payload_bytes != kd_pattern_payload(info->rows, info->nnz))
        return kd_err_set(err, KD_EIO, "payload size %llu does not match the shape",
                          (unsigned long long)info->payload_bytes);
    return KD_OK;
}

/* Open path and check its header and size against them. *fd open on KD_OK. */
static int kd_pattern_open(const char *path, int *fd_out, kd_pattern_info_t *info,
                           size_t *file_bytes, int *corrupt, kd_err_t *err)
{
    *corrupt = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT
                   ? kd_err_set(err, KD_ENOTFOUND, "it is missing")
                   : kd_err_set(err, KD_EIO, "cannot open %s: %s", path, strerror(errno));
    uint8_t h[KD_PATTERN_HEADER_BYTES];
    struct stat st;
    int rc = KD_OK;
    if (fstat(fd, &st) != 0) {
        rc = kd_err_set(err, KD_EIO, "cannot stat %s: %s", path, strerror(errno));
    } else if (kd_state_pread_all(fd, h, sizeof(h), 0) != 0) {
        *corrupt = errno == 0;
        rc = errno == 0 ? kd_err_set(err, KD_EIO, "truncated: %lld bytes, shorter than the header",
                                     (long long)st.st_size)
                        : kd_err_set(err, KD_EIO, "cannot read %s: %s", path, strerror(errno));
    } else if ((rc = kd_pattern_header_decode(h, info, err)) != KD_OK) {
        *corrupt = 1;
    } else if ((uint64_t)st.st_size != info->payload_bytes + KD_PATTERN_HEADER_BYTES) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "%s: %lld bytes, the header says %llu",
                        (uint64_t)st.st_size < info->payload_bytes + KD_PATTERN_HEADER_BYTES
                            ? "truncated"
                            : "wrong size",
                        (long long)st.st_size,
                        (unsigned long long)(info->payload_bytes + KD_PATTERN_HEADER_BYTES));
    }
    if (rc != KD_OK) {
        close(fd);
        return rc;
    }
    *file_bytes = (size_t)st.st_size;
    *fd_out = fd;
    return KD_OK;
}

/* ---- the record of patterns and their users ------------------------------------------------ */

kd_state_pattern_t *kd_state_pattern_find(kd_state_t *state, const uint8_t key[16])
{
    for (size_t i = 0; i < state->nheld; i++)
        if (memcmp(state->held[i].key, key, 16) == 0)
            return &state->held[i];
    return NULL;
}

kd_state_user_t *kd_state_user_find(kd_state_t *state, const uint8_t id[16])
{
    for (size_t i = 0; i < state->nusers; i++)
        if (memcmp(state->users[i].id, id, 16) == 0)
            return &state->users[i];
    return NULL;
}

/* Room for one more of n items of size bytes in *array (capacity *cap): 0, or -1. */
static int kd_grow(void **array, size_t n, size_t *cap, size_t size)
{
    if (n < *cap)
        return 0;
    size_t want = *cap > 0 ? *cap * 2 : 16;
    void *p = realloc(*array, want * size);
    if (p == NULL)
        return -1;
    *array = p;
    *cap = want;
    return 0;
}

static kd_state_pattern_t *kd_pattern_add(kd_state_t *state, const kd_pattern_info_t *info,
                                          size_t file_bytes)
{
    if (kd_grow((void **)&state->held, state->nheld, &state->cap_held, sizeof(*state->held)) != 0)
        return NULL;
    kd_state_pattern_t *p = &state->held[state->nheld++];
    memset(p, 0, sizeof(*p));
    memcpy(p->key, info->key, 16);
    p->rows = info->rows;
    p->cols = info->cols;
    p->nnz = info->nnz;
    p->file_bytes = file_bytes;
    return p;
}

static void kd_pattern_forget(kd_state_t *state, kd_state_pattern_t *p)
{
    *p = state->held[--state->nheld];
}

/* Queue a change for kd_state_next_change; a change lost to a full memory is logged (the totals
 * are then off until the next start). */
static void kd_change_push(kd_state_t *state, const uint8_t id[16], int stored, size_t added)
{
    if (kd_grow((void **)&state->changes, state->nchanges, &state->cap_changes,
                sizeof(*state->changes)) != 0) {
        char hex[KD_ID_HEX_LEN + 1];
        kd_id_to_hex(id, hex);
        KD_ERROR("state", "out of host memory recording a change to matrix %s", hex);
        return;
    }
    kd_state_change_t *c = &state->changes[state->nchanges++];
    memcpy(c->id, id, 16);
    c->stored = stored;
    c->added_bytes = added;
}

int kd_state_user_add(kd_state_t *state, const uint8_t id[16], const uint8_t key[16],
                      size_t *charged, kd_err_t *err)
{
    *charged = 0;
    kd_state_pattern_t *p = kd_state_pattern_find(state, key);
    if (p == NULL) /* callers write or find the pattern first */
        return kd_err_set(err, KD_EINTERNAL, "no pattern file recorded for the matrix");
    if (kd_grow((void **)&state->users, state->nusers, &state->cap_users, sizeof(*state->users)) !=
        0)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    kd_state_user_t *u = &state->users[state->nusers++];
    memcpy(u->id, id, 16);
    memcpy(u->key, key, 16);
    p->users++;
    if (!p->charged) {
        p->charged = 1;
        memcpy(p->carrier, id, 16);
        *charged = p->file_bytes;
    }
    return KD_OK;
}

void kd_state_user_release(kd_state_t *state, const uint8_t id[16])
{
    kd_state_user_t *u = kd_state_user_find(state, id);
    if (u == NULL)
        return; /* a whole file, or not stored */
    uint8_t key[16];
    memcpy(key, u->key, 16);
    *u = state->users[--state->nusers];
    kd_state_pattern_t *p = kd_state_pattern_find(state, key);
    if (p == NULL)
        return;
    p->users--;
    if (p->users == 0) {
        kd_state_pattern_drop_unused(state, key);
        return;
    }
    if (!p->charged || memcmp(p->carrier, id, 16) != 0)
        return;
    for (size_t i = 0; i < state->nusers; i++)
        if (memcmp(state->users[i].key, key, 16) == 0) { /* the charge moves to another user */
            memcpy(p->carrier, state->users[i].id, 16);
            kd_change_push(state, p->carrier, 1, p->file_bytes);
            return;
        }
}

/* ---- writing, removing, reading ------------------------------------------------------------ */

static int kd_pattern_claimed(const kd_state_t *state, const uint8_t key[16])
{
    for (size_t i = 0; i < state->nclaims; i++)
        if (memcmp(state->claims[i], key, 16) == 0)
            return 1;
    return 0;
}

static void kd_pattern_unclaim(kd_state_t *state, const uint8_t key[16])
{
    for (size_t i = 0; i < state->nclaims; i++)
        if (memcmp(state->claims[i], key, 16) == 0) {
            memcpy(state->claims[i], state->claims[--state->nclaims], 16);
            break;
        }
    pthread_cond_broadcast(&state->written);
}

/* Under state->lock: the held pattern for key (its writing count taken), or NULL with key
 * claimed for this caller to write; waits while another caller writes it. */
static kd_state_pattern_t *kd_pattern_hold_or_claim(kd_state_t *state, const uint8_t key[16])
{
    for (;;) {
        kd_state_pattern_t *p = kd_state_pattern_find(state, key);
        if (p != NULL)
            return p;
        if (!kd_pattern_claimed(state, key) && state->nclaims < KD_STATE_CLAIMS_MAX) {
            memcpy(state->claims[state->nclaims++], key, 16);
            return NULL;
        }
        pthread_cond_wait(&state->written, &state->lock);
    }
}

int kd_state_pattern_ensure(kd_state_t *state, const uint8_t key[16], const kd_csr_t *csr,
                            const char *doing, kd_err_t *err)
{
    pthread_mutex_lock(&state->lock);
    kd_state_pattern_t *held = kd_pattern_hold_or_claim(state, key);
    if (held != NULL) {
        const int same =
            held->rows == csr->rows && held->cols == csr->cols && held->nnz == csr->nnz;
        if (same)
            held->writing++;
        pthread_mutex_unlock(&state->lock);
        if (same)
            return KD_OK;
        KD_ERROR("state", "%s: two patterns of different shapes share a key", doing);
        return kd_err_set(err, KD_EINTERNAL, "%s: two patterns share a key", doing);
    }
    pthread_mutex_unlock(&state->lock);
    /* claimed: the file's bytes, outside the lock */
    uint8_t header[KD_PATTERN_HEADER_BYTES];
    kd_pattern_header_encode(key, csr, header);
    const struct iovec parts[3] = {
        {header, KD_PATTERN_HEADER_BYTES},
        {csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t)},
        {csr->indices, (size_t)csr->nnz * sizeof(int32_t)},
    };
    char path[KD_PATH_MAX + 64], tmp[KD_PATH_MAX + 64], hex[KD_ID_HEX_LEN + 1];
    kd_state_pattern_path(state, key, path, sizeof(path));
    kd_id_to_hex(key, hex);
    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", state->pattern_dir, hex);
    int rc = kd_state_commit(state->pattern_dir, tmp, path, parts, 3, -1, 0, 0, 0, doing, err);
    pthread_mutex_lock(&state->lock);
    if (rc == KD_OK) {
        kd_pattern_info_t info = {.rows = csr->rows, .cols = csr->cols, .nnz = csr->nnz};
        memcpy(info.key, key, 16);
        kd_state_pattern_t *p = kd_pattern_add(
            state, &info, KD_PATTERN_HEADER_BYTES + kd_pattern_payload(csr->rows, csr->nnz));
        if (p != NULL) {
            p->writing = 1;
        } else {
            if (kd_state_io_unlink(path) == 0)
                kd_state_io_fsync_dir(state->pattern_dir);
            rc = kd_err_set(err, KD_ENOMEM, "%s: out of host memory", doing);
        }
    }
    kd_pattern_unclaim(state, key);
    pthread_mutex_unlock(&state->lock);
    return rc;
}

void kd_state_pattern_unhold(kd_state_t *state, const uint8_t key[16])
{
    kd_state_pattern_t *p = kd_state_pattern_find(state, key);
    if (p == NULL) /* discarded meanwhile (a bad pattern file) */
        return;
    if (p->writing > 0)
        p->writing--;
    kd_state_pattern_drop_unused(state, key);
}

void kd_state_pattern_drop_unused(kd_state_t *state, const uint8_t key[16])
{
    kd_state_pattern_t *p = kd_state_pattern_find(state, key);
    if (p == NULL || p->users > 0 || p->writing > 0)
        return;
    char path[KD_PATH_MAX + 64];
    kd_state_pattern_path(state, key, path, sizeof(path));
    if (kd_state_io_unlink(path) == 0 || errno == ENOENT)
        kd_state_io_fsync_dir(state->pattern_dir);
    else /* the next start's sweep removes it */
        KD_WARN("state", "cannot remove an unused pattern file path=%s: %s", path, strerror(errno));
    kd_pattern_forget(state, p);
}

void kd_state_pattern_discard(kd_state_t *state, const uint8_t key[16], const uint8_t *except,
                              const char *why)
{
    char path[KD_PATH_MAX + 64], name[KD_ID_HEX_LEN + 8], hex[KD_ID_HEX_LEN + 1];
    kd_state_pattern_path(state, key, path, sizeof(path));
    kd_id_to_hex(key, hex);
    snprintf(name, sizeof(name), "%s.kdp", hex);
    struct stat st;
    if (stat(path, &st) == 0)
        kd_state_move_aside(state, state->pattern_dir, path, name, why);
    char because[KD_ERR_MESSAGE_MAX];
    snprintf(because, sizeof(because), "%s (pattern file %s)", why, hex);
    for (size_t i = state->nusers; i-- > 0;) {
        kd_state_user_t *u = &state->users[i];
        if (memcmp(u->key, key, 16) != 0)
            continue;
        if (except == NULL || memcmp(u->id, except, 16) != 0) {
            char vpath[KD_PATH_MAX + 64], vname[KD_ID_HEX_LEN + 8], vhex[KD_ID_HEX_LEN + 1];
            kd_state_path(state, u->id, vpath, sizeof(vpath));
            kd_id_to_hex(u->id, vhex);
            snprintf(vname, sizeof(vname), "%s.kdm", vhex);
            kd_state_move_aside(state, state->matrices, vpath, vname, because);
            kd_change_push(state, u->id, 0, 0);
        }
        *u = state->users[--state->nusers];
    }
    kd_state_pattern_t *p = kd_state_pattern_find(state, key);
    if (p != NULL)
        kd_pattern_forget(state, p);
}

int kd_state_pattern_read(kd_state_t *state, const uint8_t key[16], kd_csr_t *csr, int *corrupt,
                          kd_err_t *err)
{
    char path[KD_PATH_MAX + 64];
    kd_state_pattern_path(state, key, path, sizeof(path));
    int fd;
    kd_pattern_info_t info;
    size_t file_bytes;
    int rc = kd_pattern_open(path, &fd, &info, &file_bytes, corrupt, err);
    if (rc != KD_OK)
        return rc;
    uint8_t check[16];
    const size_t ptr = ((size_t)csr->rows + 1) * 4, idx = (size_t)csr->nnz * 4;
    if (memcmp(info.key, key, 16) != 0) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "its header names another pattern");
    } else if (info.rows != csr->rows || info.cols != csr->cols || info.nnz != csr->nnz) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "it has another shape than the matrix");
    } else if (kd_state_pread_all(fd, csr->indptr, ptr, KD_PATTERN_HEADER_BYTES) != 0 ||
               (idx > 0 &&
                kd_state_pread_all(fd, csr->indices, idx, KD_PATTERN_HEADER_BYTES + ptr) != 0)) {
        *corrupt = errno == 0;
        rc = kd_err_set(err, KD_EIO, "%s", errno == 0 ? "truncated" : strerror(errno));
    } else if (kd_pattern_checksum(csr) != info.sum) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "payload checksum mismatch");
    } else if (kd_state_check_pattern(csr) != 0) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "the stored arrays are not a canonical CSR pattern");
    } else if (kd_state_pattern_key(csr, check) != KD_OK) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory hashing the pattern");
    } else if (memcmp(check, key, 16) != 0) {
        *corrupt = 1;
        rc = kd_err_set(err, KD_EIO, "its content does not hash to its key");
    }
    close(fd);
    return rc;
}

/* ---- start-up ------------------------------------------------------------------------------ */

/* "<32 hex>.kdp" -> key */
static int kd_pattern_parse_name(const char *name, uint8_t key[16])
{
    size_t len = strlen(name);
    if (len != KD_ID_HEX_LEN + 4 || strcmp(name + KD_ID_HEX_LEN, ".kdp") != 0)
        return -1;
    return kd_id_from_hex(name, KD_ID_HEX_LEN, key);
}

int kd_state_pattern_scan(kd_state_t *state, kd_state_scan_totals_t *totals, kd_err_t *err)
{
    DIR *d = opendir(state->pattern_dir);
    if (d == NULL)
        return kd_err_set(err, KD_EIO, "cannot read %s: %s", state->pattern_dir, strerror(errno));
    struct dirent *de;
    int rc = KD_OK;
    while (rc == KD_OK && (de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        char path[KD_PATH_MAX + 300];
        if (!kd_state_scan_entry(state->pattern_dir, name, totals, path, sizeof(path)))
            continue;
        uint8_t key[16];
        if (kd_pattern_parse_name(name, key) != 0) {
            totals->ignored++;
            KD_WARN("state", "ignoring a file that is not a pattern path=%s", path);
            continue;
        }
        int fd, corrupt = 0;
        kd_pattern_info_t info;
        size_t file_bytes = 0;
        kd_err_t why = {0};
        int one = kd_pattern_open(path, &fd, &info, &file_bytes, &corrupt, &why);
        if (one == KD_OK) {
            close(fd);
            if (memcmp(info.key, key, 16) != 0) {
                corrupt = 1;
                one = kd_err_set(&why, KD_EIO, "the header names another pattern");
            }
        }
        if (one != KD_OK) {
            if (corrupt) {
                totals->corrupt++;
                kd_state_move_aside(state, state->pattern_dir, path, name, why.message);
            } else {
                KD_ERROR("state", "cannot read path=%s: %s", path, why.message);
            }
            continue;
        }
        if (kd_pattern_add(state, &info, file_bytes) == NULL)
            rc = kd_err_set(err, KD_ENOMEM, "out of host memory registering pattern files");
    }
    closedir(d);
    return rc;
}

void kd_state_pattern_sweep(kd_state_t *state, kd_state_scan_totals_t *totals)
{
    for (size_t i = state->nheld; i-- > 0;) {
        kd_state_pattern_t *p = &state->held[i];
        if (p->users > 0)
            continue;
        char path[KD_PATH_MAX + 64];
        kd_state_pattern_path(state, p->key, path, sizeof(path));
        KD_WARN("state",
                "removing a pattern file no matrix names (a crash between two files) "
                "path=%s",
                path);
        totals->unused++;
        kd_state_pattern_drop_unused(state, p->key);
    }
    totals->patterns = state->nheld;
}

void kd_state_pattern_forget_all(kd_state_t *state)
{
    free(state->held);
    free(state->users);
    free(state->changes);
    state->held = NULL;
    state->users = NULL;
    state->changes = NULL;
    state->nheld = state->nusers = state->nchanges = 0;
    state->cap_held = state->cap_users = state->cap_changes = 0;
}
