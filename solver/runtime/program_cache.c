/*
 * Compiled programs on disk (see solver/runtime/program_cache.h). The header is encoded field by
 * field in little-endian at fixed offsets, as the state directory's matrix files are, so the format
 * does not depend on the compiler; docs/OPERATIONS.md has the table.
 *
 * A reader trusts nothing: the size, magic, version, header checksum, key and the binary's
 * checksum are all checked before a byte goes to clCreateProgramWithBinary, and a file that fails
 * is deleted (the program is then compiled from source and stored again). Unlike a matrix file, a
 * bad binary costs nothing to rebuild, so nothing is moved aside.
 */
#include "solver/runtime/program_cache.h"
#include "common/le.h"
#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

static const char kd_program_magic[8] = {'K', 'D', 'P', 'R', 'O', 'G', 'R', 'M'};

/* Header offsets (docs/OPERATIONS.md). */
enum {
    KD_P_MAGIC = 0,
    KD_P_VERSION = 8,
    KD_P_HEADER_BYTES = 12,
    KD_P_KEY = 16,
    KD_P_BINARY_BYTES = 32,
    KD_P_BINARY_SUM = 40,
    KD_P_DTYPE = 48,
    KD_P_PROGRAM = 56,
    KD_P_OPTIONS = KD_P_PROGRAM + KD_PROGRAM_CACHE_NAME_MAX,
    KD_P_CHECKSUM = KD_PROGRAM_CACHE_HEADER_BYTES - 8,
};
_Static_assert(KD_P_OPTIONS + KD_PROGRAM_CACHE_OPTIONS_MAX <= KD_P_CHECKSUM,
               "program cache header too small for the names");

#define KD_PATH_CAP (4096 + 256 + 8) /* the directory, a file name (d_name: 256) and a slash */

struct kd_program_cache {
    char dir[4096];
    int64_t opened_s; /* when opened: a file another process used since then is not stale */
    char *device;     /* identity text, hashed into every key */
    pthread_mutex_t lock;
    uint8_t (*used)[16]; /* keys loaded or stored since open */
    size_t nused, capused;
};

static void kd_key_hex(const uint8_t key[16], char hex[33])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = digits[key[i] >> 4];
        hex[2 * i + 1] = digits[key[i] & 15];
    }
    hex[32] = '\0';
}

/* A name <32 hex>.kdp -> its key; 0 for any other name. */
static int kd_key_from_name(const char *name, uint8_t key[16])
{
    if (strlen(name) != 36 || strcmp(name + 32, ".kdp") != 0)
        return 0;
    for (int i = 0; i < 32; i++) {
        char c = name[i];
        int d = c >= '0' && c <= '9' ? c - '0' : (c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1);
        if (d < 0)
            return 0;
        if (i % 2 == 0)
            key[i / 2] = (uint8_t)(d << 4);
        else
            key[i / 2] |= (uint8_t)d;
    }
    return 1;
}

const char *kd_program_cache_dir(const kd_program_cache_t *cache)
{
    return cache->dir;
}

void kd_program_cache_path(const kd_program_cache_t *cache, const uint8_t key[16], char *buf,
                           size_t cap)
{
    char hex[33];
    kd_key_hex(key, hex);
    snprintf(buf, cap, "%s/%s.kdp", cache->dir, hex);
}

/* Each part is hashed with its length first, so no two different lists hash the same text. */
static void kd_hash_part(XXH3_state_t *st, const void *data, size_t len)
{
    uint64_t n = len;
    XXH3_128bits_update(st, &n, sizeof(n));
    XXH3_128bits_update(st, data, len);
}

void kd_program_cache_key(const kd_program_cache_t *cache, const char *source, size_t source_len,
                          kd_dtype_t dtype, const char *flags, uint8_t key[16])
{
    XXH3_state_t *st = XXH3_createState();
    uint32_t fixed[2] = {KD_PROGRAM_CACHE_VERSION, (uint32_t)dtype};
    XXH128_hash_t h;
    if (st == NULL) { /* no memory for the streaming state: hash one concatenation instead */
        h = XXH3_128bits(source, source_len);
        h.low64 ^= XXH3_64bits(cache->device, strlen(cache->device)) ^
                   XXH3_64bits(flags, strlen(flags)) ^ XXH3_64bits(fixed, sizeof(fixed));
    } else {
        XXH3_128bits_reset(st);
        kd_hash_part(st, fixed, sizeof(fixed));
        kd_hash_part(st, cache->device, strlen(cache->device));
        kd_hash_part(st, flags, strlen(flags));
        kd_hash_part(st, source, source_len);
        h = XXH3_128bits_digest(st);
        XXH3_freeState(st);
    }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    memcpy(key, c.digest, 16);
}

static void kd_program_cache_mark_used(kd_program_cache_t *cache, const uint8_t key[16])
{
    pthread_mutex_lock(&cache->lock);
    for (size_t i = 0; i < cache->nused; i++)
        if (memcmp(cache->used[i], key, 16) == 0) {
            pthread_mutex_unlock(&cache->lock);
            return;
        }
    if (cache->nused == cache->capused) {
        size_t cap = cache->capused ? cache->capused * 2 : 64;
        uint8_t(*grown)[16] = realloc(cache->used, cap * sizeof(*grown));
        if (grown == NULL) { /* unmarked: at worst _prune removes it and it is rebuilt */
            pthread_mutex_unlock(&cache->lock);
            return;
        }
        cache->used = grown;
        cache->capused = cap;
    }
    memcpy(cache->used[cache->nused++], key, 16);
    pthread_mutex_unlock(&cache->lock);
}

static int kd_program_cache_was_used(kd_program_cache_t *cache, const uint8_t key[16])
{
    pthread_mutex_lock(&cache->lock);
    int found = 0;
    for (size_t i = 0; i < cache->nused && !found; i++)
        found = memcmp(cache->used[i], key, 16) == 0;
    pthread_mutex_unlock(&cache->lock);
    return found;
}

int kd_program_cache_open(const char *dir, const char *device, kd_program_cache_t **out,
                          kd_err_t *err)
{
    *out = NULL;
    if (strlen(dir) >= 4096 - 64)
        return kd_err_set(err, KD_EIO, "program cache path is too long");
    char parent[4096];
    snprintf(parent, sizeof(parent), "%s", dir);
    for (char *slash = strchr(parent + 1, '/'); slash != NULL; slash = strchr(slash + 1, '/')) {
        *slash = '\0'; /* ~/.cache may not exist yet on a fresh account */
        if (mkdir(parent, 0750) != 0 && errno != EEXIST)
            return kd_err_set(err, KD_EIO, "cannot create %s: %s", parent, strerror(errno));
        *slash = '/';
    }
    if (mkdir(dir, 0750) != 0 && errno != EEXIST)
        return kd_err_set(err, KD_EIO, "cannot create %s: %s", dir, strerror(errno));
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return kd_err_set(err, KD_EIO, "%s is not a directory", dir);
    kd_program_cache_t *c = calloc(1, sizeof(*c));
    if (c == NULL || (c->device = strdup(device)) == NULL) {
        free(c);
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    }
    snprintf(c->dir, sizeof(c->dir), "%s", dir);
    pthread_mutex_init(&c->lock, NULL);
    c->opened_s = (int64_t)time(NULL);
    DIR *d = opendir(dir);
    if (d != NULL) { /* interrupted writes; not another daemon's write under way (recent) */
        struct dirent *e;
        char path[KD_PATH_CAP];
        struct stat tst;
        while ((e = readdir(d)) != NULL) {
            size_t n = strlen(e->d_name);
            if (e->d_name[0] == '.' && n > 4 && strcmp(e->d_name + n - 4, ".tmp") == 0) {
                snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
                if (stat(path, &tst) == 0 &&
                    (int64_t)tst.st_mtime > c->opened_s - KD_PROGRAM_CACHE_TMP_AGE_S)
                    continue;
                unlink(path);
            }
        }
        closedir(d);
    }
    *out = c;
    return KD_OK;
}

void kd_program_cache_close(kd_program_cache_t *cache)
{
    if (cache == NULL)
        return;
    pthread_mutex_destroy(&cache->lock);
    free(cache->used);
    free(cache->device);
    free(cache);
}

/* The header's fields after its own checks; key NULL: any key. */
static int kd_program_cache_parse_header(const uint8_t *h, const uint8_t key[16],
                                         uint64_t file_size, kd_program_cache_entry_t *entry,
                                         uint64_t *binary_bytes, uint64_t *binary_sum,
                                         kd_err_t *err)
{
    if (file_size < KD_PROGRAM_CACHE_HEADER_BYTES)
        return kd_err_set(err, KD_EIO, "%llu bytes: shorter than the header",
                          (unsigned long long)file_size);
    if (memcmp(h + KD_P_MAGIC, kd_program_magic, 8) != 0)
        return kd_err_set(err, KD_EIO, "not a krylovd program file (bad magic)");
    if (kd_get_u64(h + KD_P_CHECKSUM) != XXH3_64bits(h, KD_P_CHECKSUM))
        return kd_err_set(err, KD_EIO, "header checksum mismatch");
    if (kd_get_u32(h + KD_P_VERSION) != KD_PROGRAM_CACHE_VERSION ||
        kd_get_u32(h + KD_P_HEADER_BYTES) != KD_PROGRAM_CACHE_HEADER_BYTES)
        return kd_err_set(err, KD_EIO, "version %u, header %u bytes: not this build's format",
                          kd_get_u32(h + KD_P_VERSION), kd_get_u32(h + KD_P_HEADER_BYTES));
    if (key != NULL && memcmp(h + KD_P_KEY, key, 16) != 0)
        return kd_err_set(err, KD_EIO, "the header's key is another program's");
    *binary_bytes = kd_get_u64(h + KD_P_BINARY_BYTES);
    *binary_sum = kd_get_u64(h + KD_P_BINARY_SUM);
    if (*binary_bytes == 0 || *binary_bytes > KD_PROGRAM_CACHE_BINARY_MAX ||
        file_size != KD_PROGRAM_CACHE_HEADER_BYTES + *binary_bytes)
        return kd_err_set(err, KD_EIO, "%llu bytes, the header says %llu of binary (truncated?)",
                          (unsigned long long)file_size, (unsigned long long)*binary_bytes);
    const uint32_t dtype = kd_get_u32(h + KD_P_DTYPE);
    if ((dtype != KD_DTYPE_F64 && dtype != KD_DTYPE_F32) ||
        memchr(h + KD_P_PROGRAM, '\0', KD_PROGRAM_CACHE_NAME_MAX) == NULL ||
        memchr(h + KD_P_OPTIONS, '\0', KD_PROGRAM_CACHE_OPTIONS_MAX) == NULL)
        return kd_err_set(err, KD_EIO, "the header's names or value type are malformed");
    if (entry != NULL) {
        memcpy(entry->key, h + KD_P_KEY, 16);
        memcpy(entry->program, h + KD_P_PROGRAM, KD_PROGRAM_CACHE_NAME_MAX);
        memcpy(entry->options, h + KD_P_OPTIONS, KD_PROGRAM_CACHE_OPTIONS_MAX);
        entry->dtype = (kd_dtype_t)dtype;
    }
    return KD_OK;
}

/* Open path and check its header; *fd stays open on KD_OK. */
static int kd_program_cache_open_file(const char *path, const uint8_t key[16],
                                      kd_program_cache_entry_t *entry, uint64_t *binary_bytes,
                                      uint64_t *binary_sum, int *fd, kd_err_t *err)
{
    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0)
        return errno == ENOENT ? KD_ENOTFOUND
                               : kd_err_set(err, KD_EIO, "cannot open: %s", strerror(errno));
    struct stat st;
    uint8_t h[KD_PROGRAM_CACHE_HEADER_BYTES];
    int rc;
    if (fstat(*fd, &st) != 0)
        rc = kd_err_set(err, KD_EIO, "cannot stat: %s", strerror(errno));
    else if (st.st_size >= KD_PROGRAM_CACHE_HEADER_BYTES && read(*fd, h, sizeof(h)) != sizeof(h))
        rc = kd_err_set(err, KD_EIO, "cannot read the header");
    else
        rc = kd_program_cache_parse_header(h, key, (uint64_t)st.st_size, entry, binary_bytes,
                                           binary_sum, err);
    if (rc == KD_OK && entry != NULL)
        entry->mtime_s = (int64_t)st.st_mtime;
    if (rc != KD_OK) {
        close(*fd);
        *fd = -1;
    }
    return rc;
}

int kd_program_cache_check_file(const char *path, const uint8_t key[16],
                                kd_program_cache_entry_t *entry, kd_err_t *err)
{
    uint64_t bytes, sum;
    int fd;
    int rc = kd_program_cache_open_file(path, key, entry, &bytes, &sum, &fd, err);
    if (rc == KD_ENOTFOUND)
        return kd_err_set(err, KD_EIO, "no such file");
    if (rc != KD_OK)
        return rc;
    uint8_t *bin = malloc(bytes);
    if (bin == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory");
    else if (read(fd, bin, bytes) != (ssize_t)bytes)
        rc = kd_err_set(err, KD_EIO, "cannot read the binary");
    else if (XXH3_64bits(bin, bytes) != sum)
        rc = kd_err_set(err, KD_EIO, "binary checksum mismatch");
    free(bin);
    close(fd);
    return rc;
}

int kd_program_cache_load(kd_program_cache_t *cache, const uint8_t key[16], uint8_t **binary,
                          size_t *len, int *rejected, kd_err_t *err)
{
    char path[KD_PATH_CAP];
    kd_program_cache_path(cache, key, path, sizeof(path));
    *binary = NULL;
    *len = 0;
    *rejected = 0;
    uint64_t bytes = 0, sum = 0;
    int fd;
    int rc = kd_program_cache_open_file(path, key, NULL, &bytes, &sum, &fd, err);
    if (rc == KD_ENOTFOUND)
        return KD_ENOTFOUND;
    uint8_t *bin = NULL;
    if (rc == KD_OK) {
        if ((bin = malloc(bytes)) == NULL)
            rc = kd_err_set(err, KD_ENOMEM, "out of host memory");
        else if (read(fd, bin, bytes) != (ssize_t)bytes)
            rc = kd_err_set(err, KD_EIO, "cannot read the binary");
        else if (XXH3_64bits(bin, bytes) != sum)
            rc = kd_err_set(err, KD_EIO, "binary checksum mismatch");
        if (rc == KD_OK)
            futimens(fd, NULL); /* most recently used: kept longest by _prune */
        close(fd);
    }
    if (rc == KD_ENOMEM) {
        free(bin);
        return rc;
    }
    if (rc != KD_OK) {
        free(bin);
        unlink(path);
        *rejected = 1;
        kd_err_prefix(err, "program cache file %s", path);
        return KD_ENOTFOUND;
    }
    kd_program_cache_mark_used(cache, key);
    *binary = bin;
    *len = (size_t)bytes;
    return KD_OK;
}

static int kd_write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int kd_program_cache_store(kd_program_cache_t *cache, const uint8_t key[16], const char *program,
                           kd_dtype_t dtype, const char *options, const uint8_t *binary, size_t len,
                           kd_err_t *err)
{
    if (options == NULL)
        options = "";
    if (strlen(program) >= KD_PROGRAM_CACHE_NAME_MAX ||
        strlen(options) >= KD_PROGRAM_CACHE_OPTIONS_MAX || len == 0 ||
        len > KD_PROGRAM_CACHE_BINARY_MAX)
        return kd_err_set(err, KD_EBADREQ, "%s: not kept (names or binary of %zu bytes too long)",
                          program, len);
    uint8_t h[KD_PROGRAM_CACHE_HEADER_BYTES] = {0};
    memcpy(h + KD_P_MAGIC, kd_program_magic, 8);
    kd_put_u32(h + KD_P_VERSION, KD_PROGRAM_CACHE_VERSION);
    kd_put_u32(h + KD_P_HEADER_BYTES, KD_PROGRAM_CACHE_HEADER_BYTES);
    memcpy(h + KD_P_KEY, key, 16);
    kd_put_u64(h + KD_P_BINARY_BYTES, len);
    kd_put_u64(h + KD_P_BINARY_SUM, XXH3_64bits(binary, len));
    kd_put_u32(h + KD_P_DTYPE, (uint32_t)dtype);
    memcpy(h + KD_P_PROGRAM, program, strlen(program));
    memcpy(h + KD_P_OPTIONS, options, strlen(options));
    kd_put_u64(h + KD_P_CHECKSUM, XXH3_64bits(h, KD_P_CHECKSUM));

    char path[KD_PATH_CAP], tmp[KD_PATH_CAP];
    char hex[33];
    kd_key_hex(key, hex);
    kd_program_cache_path(cache, key, path, sizeof(path));
    /* Unique per writer: daemons sharing the directory may store the same key at once. */
    static atomic_uint serial;
    snprintf(tmp, sizeof(tmp), "%s/.%s.%ld.%u.tmp", cache->dir, hex, (long)getpid(),
             atomic_fetch_add(&serial, 1));
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    if (fd < 0)
        return kd_err_set(err, KD_EIO, "cannot write %s: %s", tmp, strerror(errno));
    int bad = kd_write_all(fd, h, sizeof(h)) != 0 || kd_write_all(fd, binary, len) != 0;
    /* No fsync: a binary lost in a crash is rebuilt, and a torn one fails its checksum. */
    if (close(fd) != 0 || bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return kd_err_set(err, KD_EIO, "cannot write %s: %s", path, strerror(e));
    }
    kd_program_cache_mark_used(cache, key);
    return KD_OK;
}

void kd_program_cache_remove(kd_program_cache_t *cache, const uint8_t key[16])
{
    char path[KD_PATH_CAP];
    kd_program_cache_path(cache, key, path, sizeof(path));
    unlink(path);
}

static int kd_entry_newer_first(const void *a, const void *b)
{
    const kd_program_cache_entry_t *x = a, *y = b;
    return x->mtime_s > y->mtime_s ? -1 : (x->mtime_s < y->mtime_s ? 1 : 0);
}

int kd_program_cache_list(kd_program_cache_t *cache, kd_program_cache_entry_t **out, size_t *count,
                          size_t *rejected, kd_err_t *err)
{
    *out = NULL;
    *count = 0;
    *rejected = 0;
    DIR *d = opendir(cache->dir);
    if (d == NULL)
        return kd_err_set(err, KD_EIO, "cannot read %s: %s", cache->dir, strerror(errno));
    kd_program_cache_entry_t *list = NULL;
    size_t n = 0, cap = 0;
    int rc = KD_OK;
    struct dirent *e;
    while (rc == KD_OK && (e = readdir(d)) != NULL) {
        uint8_t key[16];
        if (!kd_key_from_name(e->d_name, key))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            kd_program_cache_entry_t *grown = realloc(list, cap * sizeof(*grown));
            if (grown == NULL) {
                rc = kd_err_set(err, KD_ENOMEM, "out of host memory");
                break;
            }
            list = grown;
        }
        char path[KD_PATH_CAP];
        snprintf(path, sizeof(path), "%s/%s", cache->dir, e->d_name);
        uint64_t bytes, sum;
        int fd;
        kd_err_t why = {0};
        if (kd_program_cache_open_file(path, key, &list[n], &bytes, &sum, &fd, &why) == KD_OK) {
            close(fd);
            n++;
        } else {
            KD_WARN("ocl", "program cache: removing %s: %s", path, why.message);
            unlink(path);
            (*rejected)++;
        }
    }
    closedir(d);
    if (rc != KD_OK) {
        free(list);
        return rc;
    }
    if (n > 1)
        qsort(list, n, sizeof(*list), kd_entry_newer_first);
    *out = list;
    *count = n;
    return KD_OK;
}

size_t kd_program_cache_prune(kd_program_cache_t *cache, size_t max_files)
{
    kd_program_cache_entry_t *list = NULL;
    size_t n = 0, rejected = 0, removed = 0, kept = 0;
    kd_err_t err = {0};
    if (kd_program_cache_list(cache, &list, &n, &rejected, &err) != KD_OK) {
        KD_WARN("ocl", "program cache: %s", err.message);
        return 0;
    }
    for (size_t i = 0; i < n; i++) { /* newest first: the oldest go beyond max_files */
        /* Used by this process, or by another sharing the directory since we opened it. */
        const int used =
            kd_program_cache_was_used(cache, list[i].key) || list[i].mtime_s >= cache->opened_s;
        if (used && kept < max_files) {
            kept++;
            continue;
        }
        kd_program_cache_remove(cache, list[i].key);
        removed++;
    }
    free(list);
    return removed + rejected;
}
