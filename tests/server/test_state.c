/*
 * The state directory's matrix files (server/store/state.c), without a daemon: a written matrix
 * reads back bit for bit with its header fields; every kind of damage — a flipped payload byte, a
 * flipped header byte, a truncated file, a file grown by a byte, a wrong magic, a file under
 * another id's name — is detected, and a damaged file is moved to corrupt/ rather than loaded;
 * the scan at start-up reads headers only, removes leftovers of interrupted writes, ignores
 * foreign files; a header update keeps the payload; a second opener is refused by the lock; a
 * write, load, update or removal that fails says which matrix and what, never a path (such
 * messages reach remote clients), and a failed write leaves no file behind (nor the pattern file
 * it wrote first). Pattern files: versions of one pattern share one file, charged to one of them
 * so that the charges add up to the files after writes, a scan and each removal; a damaged
 * pattern file takes every values file naming it to corrupt/; the scan removes a pattern file
 * nothing names and moves aside a values file whose pattern file is gone; a file of the old
 * layout (tests/data/state_v1, written before pattern files) loads.
 */
#include "common/csr.h"
#include "common/dtype.h"
#include "kd_test.h"
#include "server/store/state.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256];

static kd_csr_t *random_matrix(int64_t rows, int64_t cols, int per_row, kd_dtype_t dtype)
{
    int64_t nnz = rows * per_row;
    int32_t *r = malloc((size_t)nnz * 4), *c = malloc((size_t)nnz * 4);
    double *v = malloc((size_t)nnz * 8);
    for (int64_t k = 0; k < nnz; k++) {
        r[k] = (int32_t)(k / per_row);
        c[k] = (int32_t)kd_test_rand_below(cols);
        v[k] = kd_test_rand_double(-2, 2);
    }
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    kd_csr_from_coo_arrays(rows, cols, nnz, r, c, KD_DTYPE_I32, v, KD_DTYPE_F64, dtype, NULL, &m,
                           &err);
    free(r);
    free(c);
    free(v);
    return m;
}

static void meta_of(const kd_csr_t *m, const char *name, kd_matrix_meta_t *meta)
{
    memset(meta, 0, sizeof(*meta));
    kd_csr_hash(m, meta->id);
    kd_id_to_hex(meta->id, meta->hex);
    snprintf(meta->name, sizeof(meta->name), "%s", name);
    meta->rows = m->rows;
    meta->cols = m->cols;
    meta->nnz = m->nnz;
    meta->dtype = m->dtype;
    meta->format = KD_FMT_CSR_SCALAR;
    meta->device_bytes = 12345;
    kd_csr_compute_stats(m, &meta->stats);
    meta->ncandidates = 2;
    meta->candidates[0].format = KD_FMT_CSR_SCALAR;
    meta->candidates[0].time_ms = 0.25;
    meta->candidates[1].format = KD_FMT_ELL;
    snprintf(meta->candidates[1].dropped, sizeof(meta->candidates[1].dropped), "padding 3.1x");
    kd_format_detail_add(&meta->detail, "dense_row", 7);
    kd_format_detail_add(&meta->detail, "pulled_nnz", 123456789012LL);
}

static int same_csr(const kd_csr_t *a, const kd_csr_t *b)
{
    return a->rows == b->rows && a->cols == b->cols && a->nnz == b->nnz && a->dtype == b->dtype &&
           memcmp(a->indptr, b->indptr, ((size_t)a->rows + 1) * 4) == 0 &&
           memcmp(a->indices, b->indices, (size_t)a->nnz * 4) == 0 &&
           memcmp(a->values, b->values, (size_t)a->nnz * kd_dtype_size(a->dtype)) == 0;
}

static size_t count_files(const char *sub)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.';
    closedir(d);
    return n;
}

static void flip_byte(const char *path, off_t offset)
{
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    if (pread(fd, &b, 1, offset) != 1)
        fprintf(stderr, "pread failed\n");
    b ^= 0x40;
    if (pwrite(fd, &b, 1, offset) != 1)
        fprintf(stderr, "pwrite failed\n");
    close(fd);
}

typedef struct seen {
    int count;
    kd_matrix_meta_t last;
} seen_t;

static int on_file(void *ctx, const kd_matrix_meta_t *meta, size_t file_bytes, int64_t mtime_s)
{
    seen_t *s = ctx;
    s->count++;
    s->last = *meta;
    (void)file_bytes;
    (void)mtime_s;
    return 0;
}

static void test_write_read_back(void)
{
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    const kd_dtype_t types[] = {KD_DTYPE_F64, KD_DTYPE_F32};
    for (int t = 0; t < 2; t++) {
        kd_csr_t *m = random_matrix(300, 200, 4, types[t]);
        REQUIRE(m != NULL);
        kd_matrix_meta_t meta, back;
        meta_of(m, "a matrix", &meta);
        meta.pinned = t;
        size_t bytes = 0, expect = 0;
        REQUIRE(kd_state_write(st, &meta, m, &bytes, &err) == KD_OK);
        REQUIRE(kd_state_file_size(m->rows, m->nnz, m->dtype, &expect, &err) == KD_OK);
        CHECK_EQ_INT(bytes, expect);
        char path[512], pattern[512];
        kd_state_path(st, meta.id, path, sizeof(path));
        REQUIRE(kd_state_pattern_file(st, meta.id, pattern, sizeof(pattern)) == KD_OK);
        struct stat sb, sp;
        REQUIRE(stat(path, &sb) == 0 && stat(pattern, &sp) == 0);
        /* the first matrix with its pattern carries the pattern file: the bound is exact then */
        CHECK_EQ_INT(sb.st_size + sp.st_size, expect);
        CHECK_EQ_INT(sb.st_size, 2048 + m->nnz * (int64_t)kd_dtype_size(types[t]));

        int corrupt = 1;
        size_t fb = 0;
        REQUIRE(kd_state_read_header(path, &back, &fb, &corrupt, &err) == KD_OK);
        CHECK_EQ_INT(corrupt, 0);
        CHECK(memcmp(back.id, meta.id, 16) == 0);
        CHECK(strcmp(back.hex, meta.hex) == 0);
        CHECK(strcmp(back.name, "a matrix") == 0);
        CHECK_EQ_INT(back.rows, 300);
        CHECK_EQ_INT(back.cols, 200);
        CHECK_EQ_INT(back.nnz, m->nnz);
        CHECK_EQ_INT(back.dtype, types[t]);
        CHECK_EQ_INT(back.format, KD_FMT_CSR_SCALAR);
        CHECK_EQ_INT(back.pinned, t);
        CHECK_EQ_INT(back.device_bytes, 12345);
        CHECK_EQ_INT(back.stats.max_row, meta.stats.max_row);
        CHECK(back.stats.mean_row == meta.stats.mean_row);
        CHECK_EQ_INT(back.ncandidates, 2);
        CHECK(back.candidates[0].time_ms == 0.25);
        CHECK_EQ_INT(back.candidates[1].format, KD_FMT_ELL);
        CHECK(strcmp(back.candidates[1].dropped, "padding 3.1x") == 0);
        CHECK_EQ_INT(back.detail.count, 2); /* the format's description survives a restart */
        CHECK(strcmp(back.detail.items[0].name, "dense_row") == 0);
        CHECK_EQ_INT(back.detail.items[1].value, 123456789012LL);
        CHECK_EQ_INT(back.stored, 1);

        kd_csr_t *loaded = NULL;
        REQUIRE(kd_state_load(st, meta.id, &loaded, &err) == KD_OK);
        CHECK(same_csr(m, loaded));
        kd_csr_free(loaded);

        /* a header update keeps the payload and changes the flag */
        meta.pinned = !meta.pinned;
        REQUIRE(kd_state_update_header(st, &meta, &err) == KD_OK);
        REQUIRE(kd_state_read_header(path, &back, &fb, &corrupt, &err) == KD_OK);
        CHECK_EQ_INT(back.pinned, !t);
        REQUIRE(kd_state_load(st, meta.id, &loaded, &err) == KD_OK);
        CHECK(same_csr(m, loaded));
        kd_csr_free(loaded);

        REQUIRE(kd_state_remove(st, meta.id, &err) == KD_OK);
        CHECK(stat(path, &sb) != 0);
        CHECK_MSG(stat(pattern, &sp) != 0, "its last user gone, the pattern file stays");
        CHECK_EQ_INT(kd_state_load(st, meta.id, &loaded, &err), KD_ENOTFOUND);
        kd_csr_free(m);
    }
    /* an empty matrix (no nonzeros) round-trips too */
    kd_csr_t *e = NULL;
    int32_t ptr[4] = {0, 0, 0, 0}, no_index[1] = {0};
    double no_value[1] = {0};
    REQUIRE(kd_csr_from_csr_arrays(3, 5, 0, ptr, KD_DTYPE_I32, no_index, KD_DTYPE_I32, no_value,
                                   KD_DTYPE_F64, KD_DTYPE_F64, NULL, &e, &err) == KD_OK);
    kd_matrix_meta_t meta;
    meta_of(e, "", &meta);
    size_t bytes;
    REQUIRE(kd_state_write(st, &meta, e, &bytes, &err) == KD_OK);
    kd_csr_t *loaded = NULL;
    REQUIRE(kd_state_load(st, meta.id, &loaded, &err) == KD_OK);
    CHECK(same_csr(e, loaded));
    kd_csr_free(loaded);
    kd_state_remove(st, meta.id, &err);
    kd_csr_free(e);

    /* one daemon per directory */
    kd_state_t *second = NULL;
    CHECK_EQ_INT(kd_state_open(dir, &second, &err), KD_EIO);
    CHECK_STR_CONTAINS(err.message, "in use");
    kd_state_close(st);
    REQUIRE(kd_state_open(dir, &second, &err) == KD_OK);
    kd_state_close(second);
}

/* Write a fresh matrix, damage it with `damage`, and check kd_state_load refuses it and moves
 * it aside (and the scan does too, for damage the header shows). */
typedef void (*damage_fn)(const char *path, size_t size);

static void damage_payload(const char *path, size_t size)
{
    flip_byte(path, (off_t)(size - 3));
}
static void damage_header(const char *path, size_t size)
{
    (void)size;
    flip_byte(path, 40);
}
static void damage_magic(const char *path, size_t size)
{
    (void)size;
    flip_byte(path, 1);
}
static void damage_truncate(const char *path, size_t size)
{
    if (truncate(path, (off_t)(size - 100)) != 0)
        fprintf(stderr, "truncate failed\n");
}
static void damage_truncate_header(const char *path, size_t size)
{
    (void)size;
    if (truncate(path, 1000) != 0)
        fprintf(stderr, "truncate failed\n");
}
static void damage_grow(const char *path, size_t size)
{
    (void)size;
    int fd = open(path, O_WRONLY | O_APPEND);
    if (write(fd, "x", 1) != 1)
        fprintf(stderr, "append failed\n");
    close(fd);
}
static void damage_index(const char *path, size_t size)
{
    (void)size;
    flip_byte(path, 128 + 301 * 4 + 2); /* (pattern file) a column index */
}

static void test_damage_is_detected(void)
{
    struct {
        const char *what;
        damage_fn fn;
        int header_shows; /* the scan at start-up sees it */
        const char *reason;
        int pattern; /* damage the pattern file rather than the values file */
    } cases[] = {
        {"payload byte", damage_payload, 0, "checksum", 0},
        {"header byte", damage_header, 1, "header checksum", 0},
        {"magic", damage_magic, 1, "magic", 0},
        {"truncated payload", damage_truncate, 1, "truncated", 0},
        {"truncated header", damage_truncate_header, 1, "truncated", 0},
        {"grown", damage_grow, 1, "wrong size", 0},
        {"pattern: column index", damage_index, 0, "checksum", 1},
        {"pattern: payload byte", damage_payload, 0, "checksum", 1},
        {"pattern: header byte", damage_header, 1, "header checksum", 1},
        {"pattern: magic", damage_magic, 1, "magic", 1},
        {"pattern: truncated", damage_truncate, 1, "truncated", 1},
        {"pattern: grown", damage_grow, 1, "wrong size", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        for (int via_scan = 0; via_scan < 2; via_scan++) {
            if (via_scan && !cases[i].header_shows)
                continue;
            kd_state_t *st = NULL;
            kd_err_t err = {0};
            REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
            kd_csr_t *m = random_matrix(300, 300, 3, KD_DTYPE_F64);
            kd_matrix_meta_t meta;
            meta_of(m, cases[i].what, &meta);
            size_t bytes;
            REQUIRE(kd_state_write(st, &meta, m, &bytes, &err) == KD_OK);
            char path[512], pattern[512];
            kd_state_path(st, meta.id, path, sizeof(path));
            REQUIRE(kd_state_pattern_file(st, meta.id, pattern, sizeof(pattern)) == KD_OK);
            const char *target = cases[i].pattern ? pattern : path;
            struct stat sb;
            REQUIRE(stat(target, &sb) == 0);
            cases[i].fn(target, (size_t)sb.st_size);
            size_t corrupt_before = count_files("corrupt");
            /* a bad pattern file goes to corrupt/ with the values file naming it */
            const size_t moved = cases[i].pattern ? 2 : 1;
            if (via_scan) {
                seen_t seen = {0};
                kd_state_scan_totals_t totals;
                REQUIRE(kd_state_scan(st, on_file, &seen, &totals, &err) == KD_OK);
                CHECK_MSG(seen.count == 0, "%s: scan accepted it", cases[i].what);
                CHECK_EQ_INT(totals.corrupt, moved);
            } else {
                kd_csr_t *loaded = NULL;
                int rc = kd_state_load(st, meta.id, &loaded, &err);
                CHECK_MSG(rc == KD_ENOTFOUND, "%s: load returned %d", cases[i].what, rc);
                CHECK(loaded == NULL);
                CHECK_STR_CONTAINS(err.message, cases[i].reason);
                CHECK_STR_CONTAINS(err.message, "moved aside");
                CHECK_MSG(strstr(err.message, dir) == NULL, "a client would see a path: %s",
                          err.message);
            }
            CHECK_MSG(stat(path, &sb) != 0, "%s: the values file is still in matrices/",
                      cases[i].what);
            CHECK_MSG(stat(pattern, &sb) != 0, "%s: the pattern file is still in patterns/",
                      cases[i].what);
            CHECK_EQ_INT(count_files("corrupt"), corrupt_before + moved);
            kd_csr_free(m);
            kd_state_close(st);
        }
    }
}

static void test_scan_headers(void)
{
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    kd_csr_t *m = random_matrix(50, 50, 2, KD_DTYPE_F32);
    kd_matrix_meta_t meta;
    meta_of(m, "scanned", &meta);
    meta.pinned = 1;
    size_t bytes;
    REQUIRE(kd_state_write(st, &meta, m, &bytes, &err) == KD_OK);

    char path[512];
    /* a leftover of an interrupted write, a foreign file, a copy under another id's name */
    snprintf(path, sizeof(path), "%s/matrices/.%s.tmp", dir, meta.hex);
    FILE *f = fopen(path, "w");
    fputs("half a matrix", f);
    fclose(f);
    snprintf(path, sizeof(path), "%s/matrices/README", dir);
    f = fopen(path, "w");
    fputs("not a matrix", f);
    fclose(f);
    char src[512], dst[512];
    kd_state_path(st, meta.id, src, sizeof(src));
    snprintf(dst, sizeof(dst), "%s/matrices/00000000000000000000000000000000.kdm", dir);
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cp '%s' '%s'", src, dst);
    REQUIRE(system(cmd) == 0);

    seen_t seen = {0};
    kd_state_scan_totals_t totals;
    REQUIRE(kd_state_scan(st, on_file, &seen, &totals, &err) == KD_OK);
    CHECK_EQ_INT(seen.count, 1);
    CHECK_EQ_INT(totals.good, 1);
    CHECK_EQ_INT(totals.temporary, 1);
    CHECK_EQ_INT(totals.ignored, 1);
    CHECK_EQ_INT(totals.corrupt, 1); /* the copy under the wrong name */
    CHECK(strcmp(seen.last.name, "scanned") == 0);
    CHECK_EQ_INT(seen.last.pinned, 1);
    CHECK_EQ_INT(seen.last.dtype, KD_DTYPE_F32);
    CHECK_EQ_INT(seen.last.file_bytes, bytes);
    CHECK_EQ_INT(seen.last.resident, 0);
    snprintf(path, sizeof(path), "%s/matrices/.%s.tmp", dir, meta.hex);
    struct stat sb;
    CHECK(stat(path, &sb) != 0);
    kd_state_remove(st, meta.id, &err);
    kd_csr_free(m);
    kd_state_close(st);
}

/* m's pattern with fresh random values (dtype kept). */
static kd_csr_t *new_values(const kd_csr_t *m)
{
    kd_csr_t *c = NULL;
    kd_err_t err = {0};
    if (kd_csr_alloc(m->rows, m->cols, m->nnz, m->dtype, &c, &err) != KD_OK)
        return NULL;
    memcpy(c->indptr, m->indptr, ((size_t)m->rows + 1) * 4);
    memcpy(c->indices, m->indices, (size_t)m->nnz * 4);
    for (int64_t k = 0; k < m->nnz; k++)
        kd_store_real(c->values, c->dtype, (size_t)k, kd_test_rand_double(-3, 3));
    return c;
}

static size_t file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (size_t)sb.st_size : 0;
}

/* Bytes of the matrix and pattern files in dir/sub (the foreign README of test_scan_headers
 * is not ours). */
static size_t dir_bytes(const char *sub)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, sub);
    DIR *d = opendir(path);
    if (d == NULL)
        return 0;
    size_t total = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 4 || (strcmp(de->d_name + len - 4, ".kdm") != 0 &&
                        strcmp(de->d_name + len - 4, ".kdp") != 0))
            continue;
        char f[1024];
        snprintf(f, sizeof(f), "%s/%s", path, de->d_name);
        struct stat sb;
        if (stat(f, &sb) == 0 && S_ISREG(sb.st_mode))
            total += (size_t)sb.st_size;
    }
    closedir(d);
    return total;
}

/* What a scan charged each matrix (by id). */
typedef struct charges {
    int count;
    uint8_t id[8][16];
    size_t bytes[8];
} charges_t;

static int on_charge(void *ctx, const kd_matrix_meta_t *meta, size_t file_bytes, int64_t mtime_s)
{
    charges_t *c = ctx;
    (void)mtime_s;
    if (c->count < 8) {
        memcpy(c->id[c->count], meta->id, 16);
        c->bytes[c->count++] = file_bytes;
    }
    return 0;
}

/* Apply the state's changes to the charges; their total afterwards. */
static size_t charges_settle(kd_state_t *st, charges_t *c)
{
    kd_state_change_t change;
    while (kd_state_next_change(st, &change)) {
        CHECK_EQ_INT(change.stored, 1);
        int found = 0;
        for (int i = 0; i < c->count; i++)
            if (memcmp(c->id[i], change.id, 16) == 0) {
                c->bytes[i] += change.added_bytes;
                found = 1;
            }
        CHECK_MSG(found, "the charge moved to a matrix that is not stored");
    }
    size_t total = 0;
    for (int i = 0; i < c->count; i++)
        total += c->bytes[i];
    return total;
}

static void charges_forget(charges_t *c, const uint8_t id[16])
{
    for (int i = 0; i < c->count; i++)
        if (memcmp(c->id[i], id, 16) == 0)
            c->bytes[i] = 0;
}

/* Three versions of one pattern (two float64, one float32) share one pattern file; the first
 * carries it; the bytes charged add up to the files, after writes, after a scan (a restart) and
 * after each removal (the carrier's removal moves the charge: kd_state_next_change); each version
 * loads whole, and its pattern alone; the last removal takes the pattern file along. */
static void test_versions_share_a_pattern(void)
{
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    kd_csr_t *v[3];
    v[0] = random_matrix(400, 300, 5, KD_DTYPE_F64);
    REQUIRE(v[0] != NULL);
    v[1] = new_values(v[0]);
    REQUIRE(kd_csr_alloc(v[0]->rows, v[0]->cols, v[0]->nnz, KD_DTYPE_F32, &v[2], &err) == KD_OK);
    memcpy(v[2]->indptr, v[0]->indptr, ((size_t)v[0]->rows + 1) * 4);
    memcpy(v[2]->indices, v[0]->indices, (size_t)v[0]->nnz * 4);
    for (int64_t k = 0; k < v[0]->nnz; k++)
        ((float *)v[2]->values)[k] = (float)kd_test_rand_double(-1, 1);
    REQUIRE(v[1] != NULL);
    kd_matrix_meta_t meta[3];
    size_t bytes[3], sum = 0;
    char path[3][512], pattern[512] = "";
    for (int i = 0; i < 3; i++) {
        meta_of(v[i], "version", &meta[i]);
        REQUIRE(kd_state_write(st, &meta[i], v[i], &bytes[i], &err) == KD_OK);
        kd_state_path(st, meta[i].id, path[i], sizeof(path[i]));
        char p[512];
        REQUIRE(kd_state_pattern_file(st, meta[i].id, p, sizeof(p)) == KD_OK);
        if (i == 0)
            snprintf(pattern, sizeof(pattern), "%s", p);
        CHECK_MSG(strcmp(p, pattern) == 0, "version %d names another pattern file", i);
        sum += bytes[i];
    }
    CHECK_EQ_INT(count_files("patterns"), 1);
    const size_t pattern_bytes = file_size(pattern);
    CHECK_EQ_INT(pattern_bytes, 128 + (v[0]->rows + 1) * 4 + v[0]->nnz * 4);
    CHECK_EQ_INT(bytes[0], file_size(path[0]) + pattern_bytes);
    CHECK_EQ_INT(bytes[1], file_size(path[1]));
    CHECK_EQ_INT(bytes[2], 2048 + v[0]->nnz * 4); /* float32 values */
    CHECK_EQ_INT(sum, dir_bytes("matrices") + dir_bytes("patterns"));
    kd_state_change_t change;
    CHECK_EQ_INT(kd_state_next_change(st, &change), 0);

    for (int i = 0; i < 3; i++) {
        kd_csr_t *loaded = NULL, *pat = NULL;
        REQUIRE(kd_state_load(st, meta[i].id, &loaded, &err) == KD_OK);
        CHECK_MSG(same_csr(v[i], loaded), "version %d does not read back", i);
        kd_csr_free(loaded);
        REQUIRE(kd_state_load_pattern(st, meta[i].id, &pat, &err) == KD_OK);
        CHECK(pat->values == NULL);
        CHECK(pat->rows == v[i]->rows && pat->cols == v[i]->cols && pat->nnz == v[i]->nnz &&
              pat->dtype == v[i]->dtype);
        CHECK(memcmp(pat->indptr, v[i]->indptr, ((size_t)v[i]->rows + 1) * 4) == 0 &&
              memcmp(pat->indices, v[i]->indices, (size_t)v[i]->nnz * 4) == 0);
        kd_csr_free(pat);
    }

    /* a scan (a restart) charges the pattern once, to one of them */
    charges_t c = {0};
    kd_state_scan_totals_t totals;
    REQUIRE(kd_state_scan(st, on_charge, &c, &totals, &err) == KD_OK);
    CHECK_EQ_INT(c.count, 3);
    CHECK_EQ_INT(totals.patterns, 1);
    CHECK_EQ_INT(totals.unused, 0);
    CHECK_EQ_INT(charges_settle(st, &c), dir_bytes("matrices") + dir_bytes("patterns"));
    /* each removal in turn: the charges still add up to the files, the others still load */
    for (int gone = 0; gone < 3; gone++) {
        REQUIRE(kd_state_remove(st, meta[gone].id, &err) == KD_OK);
        charges_forget(&c, meta[gone].id);
        CHECK_MSG(charges_settle(st, &c) == dir_bytes("matrices") + dir_bytes("patterns"),
                  "after removing version %d the charges do not add up to the files", gone);
        for (int i = gone + 1; i < 3; i++) {
            kd_csr_t *loaded = NULL;
            REQUIRE(kd_state_load(st, meta[i].id, &loaded, &err) == KD_OK);
            CHECK(same_csr(v[i], loaded));
            kd_csr_free(loaded);
        }
        CHECK_MSG((file_size(pattern) == pattern_bytes) == (gone < 2),
                  "after removing version %d: pattern file of %zu bytes", gone, file_size(pattern));
    }
    CHECK_EQ_INT(count_files("patterns"), 0);
    for (int i = 0; i < 3; i++)
        kd_csr_free(v[i]);
    kd_state_close(st);
}

/* A pattern file that fails its check at a load takes every values file naming it to corrupt/;
 * the other matrices are reported as no longer stored; a matrix of another pattern is untouched. */
static void test_bad_pattern_takes_its_versions(void)
{
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    kd_csr_t *a = random_matrix(200, 200, 4, KD_DTYPE_F64), *b = new_values(a),
             *other = random_matrix(100, 100, 3, KD_DTYPE_F64);
    REQUIRE(a != NULL && b != NULL && other != NULL);
    kd_matrix_meta_t ma, mb, mo;
    meta_of(a, "a", &ma);
    meta_of(b, "b", &mb);
    meta_of(other, "other", &mo);
    size_t bytes;
    REQUIRE(kd_state_write(st, &ma, a, &bytes, &err) == KD_OK);
    REQUIRE(kd_state_write(st, &mb, b, &bytes, &err) == KD_OK);
    REQUIRE(kd_state_write(st, &mo, other, &bytes, &err) == KD_OK);
    char pattern[512], pa[512], pb[512];
    REQUIRE(kd_state_pattern_file(st, ma.id, pattern, sizeof(pattern)) == KD_OK);
    kd_state_path(st, ma.id, pa, sizeof(pa));
    kd_state_path(st, mb.id, pb, sizeof(pb));
    flip_byte(pattern, (off_t)file_size(pattern) - 2); /* the last column index */
    size_t corrupt_before = count_files("corrupt"), moved_before = kd_state_moved_aside(st);
    kd_csr_t *loaded = NULL;
    CHECK_EQ_INT(kd_state_load_pattern(st, mb.id, &loaded, &err), KD_ENOTFOUND);
    CHECK(loaded == NULL);
    CHECK_STR_CONTAINS(err.message, "pattern file");
    CHECK_STR_CONTAINS(err.message, "moved aside");
    CHECK_MSG(strstr(err.message, dir) == NULL, "a client would see a path: %s", err.message);
    CHECK(file_size(pattern) == 0 && file_size(pa) == 0 && file_size(pb) == 0);
    CHECK_EQ_INT(count_files("corrupt"), corrupt_before + 3);
    CHECK_EQ_INT(kd_state_moved_aside(st), moved_before + 3);
    kd_state_change_t change;
    REQUIRE(kd_state_next_change(st, &change) == 1); /* a: its file went along */
    CHECK(memcmp(change.id, ma.id, 16) == 0 && change.stored == 0);
    CHECK_EQ_INT(kd_state_next_change(st, &change), 0);
    CHECK_EQ_INT(kd_state_load(st, ma.id, &loaded, &err), KD_ENOTFOUND);
    REQUIRE(kd_state_load(st, mo.id, &loaded, &err) == KD_OK);
    CHECK(same_csr(other, loaded));
    kd_csr_free(loaded);
    kd_state_remove(st, mo.id, &err);
    kd_csr_free(a);
    kd_csr_free(b);
    kd_csr_free(other);
    kd_state_close(st);
}

/* The start-up scan after crashes between two files: a pattern file no values file names is
 * removed; a values file whose pattern file is gone is moved aside. */
static void test_scan_sweeps_patterns(void)
{
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    kd_csr_t *a = random_matrix(80, 90, 3, KD_DTYPE_F64),
             *b = random_matrix(70, 70, 2, KD_DTYPE_F64);
    kd_matrix_meta_t ma, mb;
    meta_of(a, "orphaned pattern", &ma);
    meta_of(b, "lost pattern", &mb);
    size_t bytes;
    REQUIRE(kd_state_write(st, &ma, a, &bytes, &err) == KD_OK);
    REQUIRE(kd_state_write(st, &mb, b, &bytes, &err) == KD_OK);
    char pa[512], va[512], pb[512], vb[512];
    REQUIRE(kd_state_pattern_file(st, ma.id, pa, sizeof(pa)) == KD_OK);
    REQUIRE(kd_state_pattern_file(st, mb.id, pb, sizeof(pb)) == KD_OK);
    kd_state_path(st, ma.id, va, sizeof(va));
    kd_state_path(st, mb.id, vb, sizeof(vb));
    REQUIRE(unlink(va) == 0); /* a drop killed between its two unlinks */
    REQUIRE(unlink(pb) == 0); /* a pattern file lost by hand */
    size_t corrupt_before = count_files("corrupt");
    seen_t seen = {0};
    kd_state_scan_totals_t totals;
    REQUIRE(kd_state_scan(st, on_file, &seen, &totals, &err) == KD_OK);
    CHECK_EQ_INT(seen.count, 0);
    CHECK_EQ_INT(totals.unused, 1);
    CHECK_EQ_INT(totals.corrupt, 1);
    CHECK_EQ_INT(totals.patterns, 0);
    CHECK(file_size(pa) == 0 && file_size(vb) == 0);
    CHECK_EQ_INT(count_files("corrupt"), corrupt_before + 1);
    CHECK_EQ_INT(count_files("patterns"), 0);
    kd_csr_free(a);
    kd_csr_free(b);
    kd_state_close(st);
}

/* A file of the old layout (version 1, the whole CSR: written by krylovd before pattern files,
 * tests/data/state_v1/) is scanned, loaded (its content hash checked against its name), loaded
 * for its pattern, and a new version of its pattern is stored in the new layout beside it. */
static void test_old_layout_loads(void)
{
    const char *id_hex = "eb4684e0006228085dfaec3e77ebeb26";
    char cmd[1200];
    snprintf(cmd, sizeof(cmd), "cp '%s/tests/data/state_v1/%s.kdm' '%s/matrices/'", KD_SOURCE_DIR,
             id_hex, dir);
    REQUIRE(system(cmd) == 0);
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    seen_t seen = {0};
    kd_state_scan_totals_t totals;
    REQUIRE(kd_state_scan(st, on_file, &seen, &totals, &err) == KD_OK);
    CHECK_EQ_INT(seen.count, 1);
    CHECK_EQ_INT(totals.corrupt, 0);
    CHECK_EQ_INT(seen.last.rows, 30);
    CHECK_EQ_INT(seen.last.nnz, 128);
    CHECK_EQ_INT(seen.last.file_bytes, 3708);
    CHECK(strcmp(seen.last.hex, id_hex) == 0);
    kd_csr_t *old = NULL, *pat = NULL;
    REQUIRE(kd_state_load(st, seen.last.id, &old, &err) == KD_OK);
    REQUIRE(kd_state_load_pattern(st, seen.last.id, &pat, &err) == KD_OK);
    CHECK(pat->values == NULL && pat->nnz == old->nnz &&
          memcmp(pat->indices, old->indices, (size_t)old->nnz * 4) == 0);
    kd_csr_free(pat);
    char pattern[512];
    CHECK_EQ_INT(kd_state_pattern_file(st, seen.last.id, pattern, sizeof(pattern)), KD_ENOTFOUND);
    kd_csr_t *next = new_values(old);
    kd_matrix_meta_t mn;
    meta_of(next, "next", &mn);
    size_t bytes;
    REQUIRE(kd_state_write(st, &mn, next, &bytes, &err) == KD_OK);
    REQUIRE(kd_state_pattern_file(st, mn.id, pattern, sizeof(pattern)) == KD_OK);
    CHECK_EQ_INT(bytes, file_size(pattern) + 2048 + 128 * 8);
    /* dropping the old one leaves the new one whole */
    REQUIRE(kd_state_remove(st, seen.last.id, &err) == KD_OK);
    kd_csr_t *loaded = NULL;
    REQUIRE(kd_state_load(st, mn.id, &loaded, &err) == KD_OK);
    CHECK(same_csr(next, loaded));
    kd_csr_free(loaded);
    kd_state_remove(st, mn.id, &err);
    CHECK_EQ_INT(count_files("patterns"), 0);
    kd_csr_free(old);
    kd_csr_free(next);
    kd_state_close(st);
}

/* The message of a failed state call, which a remote client may read, names no path. */
static void check_no_path(const kd_err_t *err)
{
    CHECK_MSG(strstr(err->message, dir) == NULL && strstr(err->message, "/matrices") == NULL,
              "a client would see a path: %s", err->message);
}

/* Failures made without a full disk or root: a directory where a file must go. */
static void test_failures_name_no_path(void)
{
    kd_state_t *st = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_state_open(dir, &st, &err) == KD_OK);
    kd_csr_t *m = random_matrix(40, 40, 2, KD_DTYPE_F64);
    kd_matrix_meta_t meta;
    meta_of(m, "blocked", &meta);
    char path[512], tmp[512];
    kd_state_path(st, meta.id, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s/matrices/.%s.tmp", dir, meta.hex);

    /* the temporary name is taken by a directory: the write fails and leaves no file */
    REQUIRE(mkdir(tmp, 0700) == 0);
    size_t bytes = 0, patterns_before = count_files("patterns");
    int rc = kd_state_write(st, &meta, m, &bytes, &err);
    CHECK_EQ_INT(rc, KD_EIO);
    CHECK_STR_CONTAINS(err.message, meta.hex);
    check_no_path(&err);
    struct stat sb;
    CHECK(stat(path, &sb) != 0);
    /* the pattern file it wrote first went again: nothing names it */
    CHECK_EQ_INT(count_files("patterns"), patterns_before);
    REQUIRE(rmdir(tmp) == 0);

    /* no file for a header update: NOT_FOUND */
    kd_err_clear(&err);
    CHECK_EQ_INT(kd_state_update_header(st, &meta, &err), KD_ENOTFOUND);
    check_no_path(&err);

    /* the matrix's name is a directory: it cannot be read (KD_EIO, not corrupt), nor removed */
    REQUIRE(mkdir(path, 0700) == 0);
    kd_csr_t *loaded = NULL;
    kd_err_clear(&err);
    CHECK_EQ_INT(kd_state_load(st, meta.id, &loaded, &err), KD_EIO);
    CHECK(loaded == NULL);
    CHECK_STR_CONTAINS(err.message, meta.hex);
    check_no_path(&err);
    kd_err_clear(&err);
    CHECK_EQ_INT(kd_state_remove(st, meta.id, &err), KD_EIO);
    check_no_path(&err);
    REQUIRE(rmdir(path) == 0);

    /* and once the way is clear the same write works */
    CHECK_EQ_INT(kd_state_write(st, &meta, m, &bytes, &err), KD_OK);
    char pattern[512];
    struct stat sp;
    CHECK(kd_state_pattern_file(st, meta.id, pattern, sizeof(pattern)) == KD_OK &&
          stat(path, &sb) == 0 && stat(pattern, &sp) == 0 &&
          (size_t)(sb.st_size + sp.st_size) == bytes);
    kd_state_remove(st, meta.id, &err);
    kd_csr_free(m);
    kd_state_close(st);
}

int main(void)
{
    kd_test_seed();
    snprintf(dir, sizeof(dir), "/tmp/krylovd-state-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    RUN(test_write_read_back);
    RUN(test_damage_is_detected);
    RUN(test_scan_headers);
    RUN(test_failures_name_no_path);
    RUN(test_versions_share_a_pattern);
    RUN(test_bad_pattern_takes_its_versions);
    RUN(test_scan_sweeps_patterns);
    RUN(test_old_layout_loads);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return kd_test_finish();
}
