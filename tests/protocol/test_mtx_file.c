/*
 * Matrix Market files on disk (client/mtx_file.c): plain and gzip files read back byte for byte
 * (the gzip ones written here with zlib itself), the size limit counted on decompressed bytes,
 * missing, truncated and corrupt files refused with the path in the message, and atomic writes
 * that leave no temporary file behind. Everything happens in a fresh temporary folder.
 */
#include "client/mtx_file.h"
#include "protocol/mtx.h"
#include "kd_test.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static char tmpdir[256];

static void path_in_tmp(char *out, size_t size, const char *name)
{
    snprintf(out, size, "%s/%s", tmpdir, name);
}

static int write_plain(const char *path, const char *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && n == len) ? 0 : -1;
}

static int write_gz(const char *path, const char *data, size_t len)
{
    gzFile f = gzopen(path, "wb");
    if (f == NULL)
        return -1;
    int n = len > 0 ? gzwrite(f, data, (unsigned)len) : 0;
    return (gzclose(f) == Z_OK && n == (int)len) ? 0 : -1;
}

/* A random matrix as Matrix Market text, for content that differs on every run. */
static char *random_matrix_text(size_t *len)
{
    int64_t rows = 50 + kd_test_rand_below(200), cols = 50 + kd_test_rand_below(200);
    int64_t nnz = 1 + kd_test_rand_below(2000);
    int32_t *r = malloc((size_t)nnz * 4), *c = malloc((size_t)nnz * 4);
    double *v = malloc((size_t)nnz * 8);
    char *text = NULL;
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    if (r != NULL && c != NULL && v != NULL) {
        for (int64_t k = 0; k < nnz; k++) {
            r[k] = (int32_t)kd_test_rand_below(rows);
            c[k] = (int32_t)kd_test_rand_below(cols);
            v[k] = kd_test_rand_double(-10, 10);
        }
        if (kd_csr_from_coo_arrays(rows, cols, nnz, r, c, KD_DTYPE_I32, v, KD_DTYPE_F64,
                                   KD_DTYPE_F64, NULL, &m, &err) == KD_OK)
            kd_mtx_write_matrix(m, &text, len, &err);
    }
    kd_csr_free(m);
    free(r);
    free(c);
    free(v);
    return text;
}

/* Whether the folder holds any leftover "*.tmp.*" file. */
static int tmp_files_left(void)
{
    DIR *d = opendir(tmpdir);
    if (d == NULL)
        return 1;
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".tmp.") != NULL)
            found = 1;
    closedir(d);
    return found;
}

static void test_plain_and_gzip_read_back(void)
{
    size_t len;
    char *text = random_matrix_text(&len);
    REQUIRE(text != NULL);
    char plain[512], gz[512];
    path_in_tmp(plain, sizeof(plain), "m.mtx");
    path_in_tmp(gz, sizeof(gz), "m.mtx.gz");
    REQUIRE(write_plain(plain, text, len) == 0);
    REQUIRE(write_gz(gz, text, len) == 0);

    const char *paths[] = {plain, gz};
    for (int i = 0; i < 2; i++) {
        char *data = NULL;
        size_t n = 0;
        kd_err_t err = {0};
        int rc = kd_mtx_file_read(paths[i], 0, &data, &n, &err);
        CHECK_MSG(rc == KD_OK, "%s: %s", paths[i], err.message);
        if (rc != KD_OK)
            continue;
        CHECK_EQ_INT(n, len);
        CHECK(n == len && memcmp(data, text, len) == 0);
        CHECK(data[n] == '\0');
        kd_csr_t *m = NULL;
        CHECK_MSG(kd_mtx_read_matrix(data, n, KD_DTYPE_F64, NULL, &m, &err) == KD_OK, "%s",
                  err.message);
        kd_csr_free(m);
        free(data);
    }
    struct stat st;
    REQUIRE(stat(gz, &st) == 0);
    CHECK((size_t)st.st_size < len); /* it really was compressed */
    free(text);
}

static void test_real_file_through_gzip(void)
{
    char src[1024];
    snprintf(src, sizeof(src), "%s/494_bus.mtx", KD_TEST_MATRICES);
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    REQUIRE(kd_mtx_file_read(src, 0, &text, &len, &err) == KD_OK);
    char gz[512];
    path_in_tmp(gz, sizeof(gz), "494_bus.mtx.gz");
    REQUIRE(write_gz(gz, text, len) == 0);
    char *back = NULL;
    size_t n = 0;
    REQUIRE(kd_mtx_file_read(gz, 0, &back, &n, &err) == KD_OK);
    kd_csr_t *m = NULL;
    REQUIRE(kd_mtx_read_matrix(back, n, KD_DTYPE_F64, NULL, &m, &err) == KD_OK);
    CHECK_EQ_INT(m->rows, 494);
    CHECK_EQ_INT(m->nnz, 1666);
    kd_csr_free(m);
    free(back);
    free(text);
}

static void test_size_limit(void)
{
    char data[1000];
    for (size_t i = 0; i < sizeof(data); i++)
        data[i] = (char)('a' + i % 26);
    char plain[512], gz[512];
    path_in_tmp(plain, sizeof(plain), "limit.txt");
    path_in_tmp(gz, sizeof(gz), "limit.txt.gz");
    REQUIRE(write_plain(plain, data, sizeof(data)) == 0);
    REQUIRE(write_gz(gz, data, sizeof(data)) == 0);
    char *out = NULL;
    size_t n;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_mtx_file_read(plain, 1000, &out, &n, &err), KD_OK);
    CHECK_EQ_INT(n, 1000);
    free(out);
    CHECK_EQ_INT(kd_mtx_file_read(plain, 999, &out, &n, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "limit.txt is larger than the limit of 999 bytes");
    /* the compressed file is far smaller than 999 bytes; the limit counts what it holds */
    CHECK_EQ_INT(kd_mtx_file_read(gz, 999, &out, &n, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "(uncompressed)");
    CHECK_EQ_INT(kd_mtx_file_read(gz, 1000, &out, &n, &err), KD_OK);
    free(out);

    /* a file much larger than the first buffer */
    size_t big = 3u << 20;
    char *bigdata = malloc(big);
    REQUIRE(bigdata != NULL);
    for (size_t i = 0; i < big; i++)
        bigdata[i] = (char)kd_test_rand_below(256);
    REQUIRE(write_gz(gz, bigdata, big) == 0);
    REQUIRE(kd_mtx_file_read(gz, big, &out, &n, &err) == KD_OK);
    CHECK_EQ_INT(n, big);
    CHECK(memcmp(out, bigdata, big) == 0);
    free(out);
    CHECK_EQ_INT(kd_mtx_file_read(gz, big - 1, &out, &n, &err), KD_ETOOLARGE);
    free(bigdata);
}

static void test_empty_file(void)
{
    char path[512];
    path_in_tmp(path, sizeof(path), "empty.mtx");
    REQUIRE(write_plain(path, "", 0) == 0);
    char *out = NULL;
    size_t n = 99;
    kd_err_t err = {0};
    REQUIRE(kd_mtx_file_read(path, 0, &out, &n, &err) == KD_OK);
    CHECK_EQ_INT(n, 0);
    CHECK(out != NULL && out[0] == '\0');
    free(out);
}

static void test_missing_and_unreadable(void)
{
    char path[512];
    path_in_tmp(path, sizeof(path), "no-such-file.mtx");
    char *out = NULL;
    size_t n;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_mtx_file_read(path, 0, &out, &n, &err), KD_EIO);
    CHECK_STR_CONTAINS(err.message, "no-such-file.mtx");
    CHECK_STR_CONTAINS(err.message, strerror(ENOENT));

    CHECK_EQ_INT(kd_mtx_file_read(tmpdir, 0, &out, &n, &err), KD_EIO);
    CHECK_STR_CONTAINS(err.message, tmpdir);
}

static void test_truncated_and_corrupt_gzip(void)
{
    size_t len;
    char *text = random_matrix_text(&len);
    REQUIRE(text != NULL);
    char gz[512];
    path_in_tmp(gz, sizeof(gz), "bad.mtx.gz");
    REQUIRE(write_gz(gz, text, len) == 0);
    struct stat st;
    REQUIRE(stat(gz, &st) == 0);

    FILE *f = fopen(gz, "rb");
    REQUIRE(f != NULL);
    char *bytes = malloc((size_t)st.st_size);
    REQUIRE(bytes != NULL);
    REQUIRE(fread(bytes, 1, (size_t)st.st_size, f) == (size_t)st.st_size);
    fclose(f);

    char *out = NULL;
    size_t n;
    kd_err_t err = {0};
    REQUIRE(write_plain(gz, bytes, (size_t)st.st_size / 2) == 0);
    CHECK_EQ_INT(kd_mtx_file_read(gz, 0, &out, &n, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "bad.mtx.gz");

    /* flip bits in the compressed body (after the 10-byte header) */
    for (off_t i = 12; i < st.st_size - 8; i += 7)
        bytes[i] = (char)(bytes[i] ^ 0x5a);
    REQUIRE(write_plain(gz, bytes, (size_t)st.st_size) == 0);
    CHECK_EQ_INT(kd_mtx_file_read(gz, 0, &out, &n, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "bad gzip data");
    free(bytes);
    free(text);
}

static void test_write_is_atomic_and_round_trips(void)
{
    size_t len;
    char *text = random_matrix_text(&len);
    REQUIRE(text != NULL);
    const char *names[] = {"out.mtx", "out.mtx.gz"};
    for (int i = 0; i < 2; i++) {
        char path[512];
        path_in_tmp(path, sizeof(path), names[i]);
        kd_err_t err = {0};
        REQUIRE(write_plain(path, "old content", 11) == 0);
        CHECK_MSG(kd_mtx_file_write(path, text, len, &err) == KD_OK, "%s", err.message);
        CHECK(!tmp_files_left());
        /* raw bytes: gzip magic for .gz, the text itself otherwise */
        FILE *f = fopen(path, "rb");
        REQUIRE(f != NULL);
        unsigned char head[2] = {0, 0};
        CHECK(fread(head, 1, 2, f) == 2);
        fclose(f);
        if (i == 1)
            CHECK(head[0] == 0x1f && head[1] == 0x8b);
        else
            CHECK(head[0] == '%' && head[1] == '%');
        char *out = NULL;
        size_t n = 0;
        REQUIRE(kd_mtx_file_read(path, 0, &out, &n, &err) == KD_OK);
        CHECK(n == len && memcmp(out, text, len) == 0);
        free(out);
    }

    char path[512];
    path_in_tmp(path, sizeof(path), "no-such-dir/out.mtx");
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_mtx_file_write(path, text, len, &err), KD_EIO);
    CHECK_STR_CONTAINS(err.message, "no-such-dir/out.mtx");
    CHECK(!tmp_files_left());
    free(text);
}

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (d == NULL)
        return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", tmpdir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(tmpdir);
}

int main(void)
{
    kd_test_seed();
    const char *base = getenv("TMPDIR");
    snprintf(tmpdir, sizeof(tmpdir), "%s/kd_test_mtx_file.XXXXXX",
             base != NULL && base[0] != '\0' ? base : "/tmp");
    if (mkdtemp(tmpdir) == NULL) {
        fprintf(stderr, "mkdtemp %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    RUN(test_plain_and_gzip_read_back);
    RUN(test_real_file_through_gzip);
    RUN(test_size_limit);
    RUN(test_empty_file);
    RUN(test_missing_and_unreadable);
    RUN(test_truncated_and_corrupt_gzip);
    RUN(test_write_is_atomic_and_round_trips);
    remove_tmpdir();
    return kd_test_finish();
}
