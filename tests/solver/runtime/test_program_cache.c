/*
 * Compiled programs on disk (solver/runtime/program_cache.c) and the warm-up's list
 * (solver/runtime/programs.c): keys differ with the source, flags, value type and device; a program
 * stored by one device handle loads from its binary in a fresh one and computes what the
 * source-built one computes (kd_permute_out on fresh random input, output poisoned, against the
 * CPU); every kind of damaged file (a flipped byte in the binary or the header, a truncation, a
 * wrong magic, another key's header, an empty file, a binary the driver refuses) is rejected,
 * deleted and rebuilt, never handed over; pruning removes what the warm-up did not use (unless
 * another process sharing the directory used it since) and keeps at most the cap; the warm-up
 * builds the listed programs so kd_ocl_kernel builds nothing afterwards. The warm-up's builds
 * (kd_ocl_program_build, kd_ocl_program_ensure) write the cache; a build on first use
 * (kd_ocl_kernel, a request waiting) loads from it but writes nothing.
 */
#include "kd_solver_test.h"
#include "solver/runtime/program_cache.h"
#include "solver/runtime/programs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static kd_ocl_t *ocl;
static char dir[256];

static const char *const kOptions = "-DKD_WG_SIZE=64";

static size_t kd_count_files(const char *path, const char *suffix)
{
    DIR *d = opendir(path);
    size_t n = 0;
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        n += len > strlen(suffix) && strcmp(e->d_name + len - strlen(suffix), suffix) == 0;
    }
    if (d != NULL)
        closedir(d);
    return n;
}

static void kd_clear_dir(void)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' && (e->d_name[1] == '\0' || strcmp(e->d_name, "..") == 0))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    if (d != NULL)
        closedir(d);
}

/* A fresh device handle using the cache, as a restarted server would be. */
static kd_ocl_t *kd_fresh_device(kd_program_cache_t *cache)
{
    kd_ocl_t *o = kd_test_open_device();
    if (o != NULL)
        kd_ocl_set_program_cache(o, cache);
    return o;
}

/* permute built on o as the warm-up builds it: kd_ocl_program_build writes the program cache. */
static void kd_warm_permute(kd_ocl_t *o, kd_dtype_t dtype)
{
    kd_err_t err = {0};
    cl_program p = NULL;
    REQUIRE(kd_ocl_program_build(o, "permute", dtype, kOptions, &p, &err) == KD_OK);
    REQUIRE(kd_ocl_program_adopt(o, "permute", dtype, kOptions, p, &err) == KD_OK);
}

/* y = alpha P^T y_p + beta y through kd_permute_out on o, checked against the CPU. */
static void kd_check_permute_out(kd_ocl_t *o, kd_dtype_t dtype, int64_t n)
{
    kd_err_t err = {0};
    cl_kernel k = NULL;
    REQUIRE(kd_ocl_kernel(o, "permute", dtype, kOptions, "kd_permute_out", &k, &err) == KD_OK);
    const size_t v = kd_dtype_size(dtype);
    int32_t *iperm = kd_test_random_perm(n);
    double *ypw = NULL, *y0w = NULL; /* the same values in double, for the reference */
    void *yp = kd_test_random_vector(n, dtype, -1, 1, &ypw);
    void *y0 = kd_test_random_vector(n, dtype, -1, 1, &y0w);
    char *got = malloc((size_t)n * v);
    REQUIRE(iperm != NULL && yp != NULL && y0 != NULL && got != NULL);
    const double alpha = kd_test_rand_double(0.5, 2.0), beta = kd_test_rand_double(-1.0, 1.0);
    cl_mem mi = NULL, myp = NULL, my = NULL;
    REQUIRE(kd_ocl_buffer_create(o, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n * 4, iperm,
                                 "iperm", &mi, &err) == KD_OK);
    REQUIRE(kd_ocl_buffer_create(o, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n * v, yp,
                                 "y_p", &myp, &err) == KD_OK);
    REQUIRE(kd_ocl_buffer_create(o, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, (size_t)n * v, y0,
                                 "y", &my, &err) == KD_OK);
    const size_t wg = 64, global = ((size_t)n + wg - 1) / wg * wg;
    memset(got, 0xff, (size_t)n * v); /* poisoned: NaN everywhere until read back */
    CHECK(kd_ocl_run(o, k, "kd_permute_out", kd_ocl_range_1d(global, wg),
                     KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(mi), KD_ARG_MEM(myp), KD_ARG_MEM(my),
                             KD_ARG_VALUE(dtype, alpha), KD_ARG_VALUE(dtype, beta)),
                     NULL, &err) == KD_OK);
    CHECK(clEnqueueReadBuffer(kd_ocl_queue(o), my, CL_TRUE, 0, (size_t)n * v, got, 0, NULL, NULL) ==
          CL_SUCCESS);
    size_t bad = 0;
    for (int64_t j = 0; j < n; j++) {
        const double a = kd_load_real(got, dtype, (size_t)j);
        const double want = alpha * ypw[iperm[j]] + beta * y0w[j];
        bad += !(fabs(a - want) <= (dtype == KD_DTYPE_F64 ? 1e-14 : 1e-6) * (1 + fabs(want)));
    }
    CHECK_MSG(bad == 0, "%zu of %lld wrong", bad, (long long)n);
    clReleaseMemObject(mi);
    clReleaseMemObject(myp);
    clReleaseMemObject(my);
    free(iperm);
    free(yp);
    free(y0);
    free(ypw);
    free(y0w);
    free(got);
}

static void test_keys(void)
{
    kd_err_t err = {0};
    kd_program_cache_t *a = NULL, *b = NULL;
    REQUIRE(kd_program_cache_open(dir, "device=A\n", &a, &err) == KD_OK);
    REQUIRE(kd_program_cache_open(dir, "device=B\n", &b, &err) == KD_OK);
    uint8_t k[8][16];
    const char *src = "__kernel void f(__global int *x) { x[0] = 1; }";
    kd_program_cache_key(a, src, strlen(src), KD_DTYPE_F64, "-DX=1", k[0]);
    kd_program_cache_key(a, src, strlen(src), KD_DTYPE_F64, "-DX=1", k[1]);     /* the same */
    kd_program_cache_key(a, src, strlen(src) - 1, KD_DTYPE_F64, "-DX=1", k[2]); /* source */
    kd_program_cache_key(a, src, strlen(src), KD_DTYPE_F64, "-DX=2", k[3]);     /* options */
    kd_program_cache_key(a, src, strlen(src), KD_DTYPE_F32, "-DX=1", k[4]);     /* dtype */
    kd_program_cache_key(b, src, strlen(src), KD_DTYPE_F64, "-DX=1", k[5]);     /* device */
    /* the boundary between flags and source moves: still another key */
    kd_program_cache_key(a, src + 1, strlen(src) - 1, KD_DTYPE_F64, "-DX=1_", k[6]);
    CHECK(memcmp(k[0], k[1], 16) == 0);
    for (int i = 2; i < 7; i++)
        for (int j = 0; j < i; j++)
            if (j != 1)
                CHECK_MSG(memcmp(k[i], k[j], 16) != 0, "keys %d and %d collide", i, j);
    char p0[512], p5[512];
    kd_program_cache_path(a, k[0], p0, sizeof(p0));
    kd_program_cache_path(b, k[5], p5, sizeof(p5));
    CHECK(strcmp(p0, p5) != 0);
    kd_program_cache_close(a);
    kd_program_cache_close(b);
}

/* Stored by one device handle, loaded from the binary by a fresh one: the same results. */
static void test_round_trip(void)
{
    kd_clear_dir();
    kd_err_t err = {0};
    char identity[1024];
    kd_ocl_device_identity(ocl, identity, sizeof(identity));
    CHECK_STR_CONTAINS(identity, kd_ocl_desc(ocl)->name);
    CHECK_STR_CONTAINS(identity, kd_ocl_desc(ocl)->driver);
    kd_program_cache_t *cache = NULL;
    REQUIRE(kd_program_cache_open(dir, identity, &cache, &err) == KD_OK);
    kd_dtype_t dtypes[2];
    int nd = kd_test_dtypes(ocl, dtypes);
    for (int d = 0; d < nd; d++) {
        /* built on first use: computed right, nothing written */
        kd_ocl_t *on_use = kd_fresh_device(cache);
        REQUIRE(on_use != NULL);
        kd_check_permute_out(on_use, dtypes[d], 1 + kd_test_rand_below(3000));
        kd_ocl_program_stats_t s;
        kd_ocl_program_stats(on_use, &s);
        CHECK_EQ_INT(s.built_from_source, 1);
        CHECK_EQ_INT(kd_count_files(dir, ".kdp"), d);
        kd_ocl_close(on_use);

        kd_ocl_t *first = kd_fresh_device(cache);
        REQUIRE(first != NULL);
        kd_warm_permute(first, dtypes[d]);
        kd_check_permute_out(first, dtypes[d], 1);
        kd_check_permute_out(first, dtypes[d], 1000 + kd_test_rand_below(3000));
        kd_ocl_program_stats(first, &s);
        CHECK_EQ_INT(s.built_from_source, 1);
        CHECK_EQ_INT(s.loaded_from_binary, 0);
        CHECK_EQ_INT(kd_count_files(dir, ".kdp"), d + 1);
        CHECK_EQ_INT(kd_count_files(dir, ".tmp"), 0);
        kd_ocl_close(first);

        kd_ocl_t *second = kd_fresh_device(cache);
        REQUIRE(second != NULL);
        kd_check_permute_out(second, dtypes[d], 1);
        kd_check_permute_out(second, dtypes[d], 1000 + kd_test_rand_below(3000));
        kd_ocl_program_stats(second, &s);
        CHECK_EQ_INT(s.built_from_source, 0);
        CHECK_EQ_INT(s.loaded_from_binary, 1);
        CHECK_EQ_INT(s.binaries_rejected, 0);
        kd_ocl_close(second);
    }
    /* the headers name what they hold */
    kd_program_cache_entry_t *list = NULL;
    size_t n = 0, rejected = 0;
    REQUIRE(kd_program_cache_list(cache, &list, &n, &rejected, &err) == KD_OK);
    CHECK_EQ_INT(n, nd);
    CHECK_EQ_INT(rejected, 0);
    for (size_t i = 0; i < n; i++) {
        CHECK(strcmp(list[i].program, "permute") == 0);
        CHECK(strcmp(list[i].options, kOptions) == 0);
    }
    free(list);
    kd_program_cache_close(cache);
}

/* The only file in dir (its path into buf). */
static int kd_only_file(char *buf, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int found = 0;
    while (d != NULL && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".kdp") != NULL) {
            snprintf(buf, cap, "%s/%s", dir, e->d_name);
            found++;
        }
    if (d != NULL)
        closedir(d);
    return found == 1;
}

static void kd_flip_byte(const char *path, off_t at)
{
    int fd = open(path, O_RDWR);
    unsigned char c = 0;
    if (fd >= 0 && pread(fd, &c, 1, at) == 1) {
        c ^= 0x5a;
        CHECK(pwrite(fd, &c, 1, at) == 1);
    }
    if (fd >= 0)
        close(fd);
}

enum {
    DAMAGE_BINARY,
    DAMAGE_HEADER,
    DAMAGE_TRUNCATE,
    DAMAGE_MAGIC,
    DAMAGE_EMPTY,
    DAMAGE_OTHER_KEY,
    DAMAGE_GARBAGE,
    DAMAGE_COUNT
};
static const char *const kDamage[] = {"binary byte", "header byte", "truncated",     "magic",
                                      "empty",       "other key",   "garbage binary"};

/* Each damage: the fresh handle rejects the file, deletes it, builds the source, stores a good
 * file again, and computes the right results. */
static void test_damaged_files(void)
{
    kd_err_t err = {0};
    char identity[1024];
    kd_ocl_device_identity(ocl, identity, sizeof(identity));
    kd_program_cache_t *cache = NULL;
    REQUIRE(kd_program_cache_open(dir, identity, &cache, &err) == KD_OK);
    const kd_dtype_t dtype = KD_DTYPE_F32;
    for (int damage = 0; damage < DAMAGE_COUNT; damage++) {
        kd_clear_dir();
        kd_ocl_t *o = kd_fresh_device(cache);
        REQUIRE(o != NULL);
        kd_warm_permute(o, dtype);
        kd_ocl_close(o);
        char path[512];
        REQUIRE(kd_only_file(path, sizeof(path)));
        struct stat st;
        REQUIRE(stat(path, &st) == 0 && st.st_size > KD_PROGRAM_CACHE_HEADER_BYTES);
        uint8_t key[16];
        kd_program_cache_entry_t entry;
        REQUIRE(kd_program_cache_check_file(path, NULL, &entry, &err) == KD_OK);
        memcpy(key, entry.key, 16);
        switch (damage) {
        case DAMAGE_BINARY:
            kd_flip_byte(path, KD_PROGRAM_CACHE_HEADER_BYTES +
                                   kd_test_rand_below(st.st_size - KD_PROGRAM_CACHE_HEADER_BYTES));
            break;
        case DAMAGE_HEADER:
            kd_flip_byte(path, 8 + kd_test_rand_below(KD_PROGRAM_CACHE_HEADER_BYTES - 8));
            break;
        case DAMAGE_TRUNCATE:
            CHECK(truncate(path, KD_PROGRAM_CACHE_HEADER_BYTES +
                                     kd_test_rand_below(st.st_size -
                                                        KD_PROGRAM_CACHE_HEADER_BYTES)) == 0);
            break;
        case DAMAGE_MAGIC:
            kd_flip_byte(path, kd_test_rand_below(8));
            break;
        case DAMAGE_EMPTY:
            CHECK(truncate(path, 0) == 0);
            break;
        case DAMAGE_OTHER_KEY: { /* a good file under another key's name: never that key's */
            uint8_t other[16];
            memcpy(other, key, 16);
            other[0] ^= 1;
            char moved[512];
            kd_program_cache_path(cache, other, moved, sizeof(moved));
            REQUIRE(rename(path, moved) == 0);
            uint8_t *bin = NULL;
            size_t len = 0;
            int rejected = 0;
            CHECK(kd_program_cache_load(cache, other, &bin, &len, &rejected, &err) == KD_ENOTFOUND);
            CHECK(rejected == 1 && bin == NULL);
            CHECK_STR_CONTAINS(err.message, "another program");
            CHECK(access(moved, F_OK) != 0); /* deleted */
            break;
        }
        case DAMAGE_GARBAGE: { /* well-formed file whose binary no driver would take */
            uint8_t junk[4096];
            for (size_t i = 0; i < sizeof(junk); i++)
                junk[i] = (uint8_t)kd_test_rand_below(256);
            REQUIRE(kd_program_cache_store(cache, key, "permute", dtype, kOptions, junk,
                                           sizeof(junk), &err) == KD_OK);
            break;
        }
        }
        if (damage != DAMAGE_OTHER_KEY && damage != DAMAGE_GARBAGE)
            CHECK_MSG(kd_program_cache_check_file(path, key, NULL, &err) != KD_OK, "%s passed",
                      kDamage[damage]);
        o = kd_fresh_device(cache);
        REQUIRE(o != NULL);
        kd_warm_permute(o, dtype);
        kd_check_permute_out(o, dtype, 1 + kd_test_rand_below(2000));
        kd_ocl_program_stats_t s;
        kd_ocl_program_stats(o, &s);
        CHECK_MSG(s.built_from_source == 1 && s.loaded_from_binary == 0,
                  "%s: built %llu loaded %llu", kDamage[damage],
                  (unsigned long long)s.built_from_source,
                  (unsigned long long)s.loaded_from_binary);
        CHECK_MSG(s.binaries_rejected == (damage == DAMAGE_OTHER_KEY ? 0u : 1u),
                  "%s: rejected %llu", kDamage[damage], (unsigned long long)s.binaries_rejected);
        /* rebuilt and stored again, and good */
        CHECK_MSG(kd_program_cache_check_file(path, key, NULL, &err) == KD_OK, "%s: %s",
                  kDamage[damage], err.message);
        kd_ocl_close(o);
    }
    kd_program_cache_close(cache);
}

/* _prune keeps what was used since open (at most the cap, newest first) and removes the rest. */
static void test_prune(void)
{
    kd_clear_dir();
    kd_err_t err = {0};
    kd_program_cache_t *c = NULL;
    REQUIRE(kd_program_cache_open(dir, "device=P\n", &c, &err) == KD_OK);
    uint8_t keys[6][16], bin[64];
    memset(bin, 7, sizeof(bin));
    for (int i = 0; i < 6; i++) {
        char src[16];
        snprintf(src, sizeof(src), "src%d", i);
        kd_program_cache_key(c, src, strlen(src), KD_DTYPE_F64, "", keys[i]);
        REQUIRE(kd_program_cache_store(c, keys[i], "blas", KD_DTYPE_F64, "", bin, sizeof(bin),
                                       &err) == KD_OK);
    }
    /* a leftover temporary file goes when the cache is opened; a recent one may be another
     * daemon's write under way and stays */
    char tmp[512], fresh[512];
    snprintf(tmp, sizeof(tmp), "%s/.0123.tmp", dir);
    snprintf(fresh, sizeof(fresh), "%s/.4567.99.0.tmp", dir);
    FILE *f = fopen(tmp, "w");
    REQUIRE(f != NULL);
    fclose(f);
    REQUIRE((f = fopen(fresh, "w")) != NULL);
    fclose(f);
    /* Everything so far was last used two hours ago (by this process's earlier life). */
    const struct timeval old[2] = {{time(NULL) - 7200, 0}, {time(NULL) - 7200, 0}};
    REQUIRE(utimes(tmp, old) == 0);
    for (int i = 0; i < 6; i++) {
        char path[512];
        kd_program_cache_path(c, keys[i], path, sizeof(path));
        REQUIRE(utimes(path, old) == 0);
    }
    kd_program_cache_close(c);
    REQUIRE(kd_program_cache_open(dir, "device=P\n", &c, &err) == KD_OK);
    CHECK(access(tmp, F_OK) != 0);
    CHECK(access(fresh, F_OK) == 0);
    unlink(fresh);
    /* used since this open: 0, 1, 2; the rest are stale */
    for (int i = 0; i < 3; i++) {
        uint8_t *b = NULL;
        size_t len = 0;
        int rejected = 0;
        CHECK(kd_program_cache_load(c, keys[i], &b, &len, &rejected, &err) == KD_OK);
        CHECK(len == sizeof(bin) && b != NULL && memcmp(b, bin, len) == 0);
        free(b);
    }
    /* another daemon sharing the directory used 4 since this one opened it: not stale */
    char path[512];
    kd_program_cache_path(c, keys[4], path, sizeof(path));
    REQUIRE(utimes(path, NULL) == 0);
    CHECK_EQ_INT(kd_program_cache_prune(c, 4), 2); /* 2 stale: 3 and 5 */
    CHECK_EQ_INT(kd_count_files(dir, ".kdp"), 4);
    CHECK(access(path, F_OK) == 0);
    kd_program_cache_path(c, keys[5], path, sizeof(path));
    CHECK(access(path, F_OK) != 0);
    CHECK_EQ_INT(kd_program_cache_prune(c, 3), 1); /* 1 beyond the cap */
    CHECK_EQ_INT(kd_count_files(dir, ".kdp"), 3);
    /* names too long to keep are refused, not truncated */
    char longer[KD_PROGRAM_CACHE_OPTIONS_MAX + 8];
    memset(longer, 'x', sizeof(longer) - 1);
    longer[sizeof(longer) - 1] = '\0';
    CHECK(kd_program_cache_store(c, keys[5], "blas", KD_DTYPE_F64, longer, bin, sizeof(bin),
                                 &err) == KD_EBADREQ);
    kd_program_cache_close(c);
}

/* Every listed program's options are the ones the launch paths use: after the warm-up, a solve
 * path's first kernels are found built. Only the short list on one dtype (PoCL builds are slow). */
static void test_list_matches_launches(void)
{
    kd_err_t err = {0};
    kd_program_spec_t specs[128];
    size_t n = 0;
    REQUIRE(kd_programs_list(ocl, KD_DTYPE_F32, specs, 128, &n, &err) == KD_OK);
    CHECK(n >= 20);
    char wg[64];
    snprintf(wg, sizeof(wg), "-DKD_WG_SIZE=%zu", kd_ocl_work_group_size(ocl));
    const char *need[] = {"krylov",     "csr_scalar",   "blas",        "cg1",
                          "gmres",      "spgemm",       "amg",         "chebyshev",
                          "csr_vector", "csr_adaptive", "sell_c_sigma"};
    for (size_t i = 0; i < sizeof(need) / sizeof(need[0]); i++) {
        int found = 0;
        for (size_t j = 0; j < n; j++)
            found |= strcmp(specs[j].program, need[i]) == 0 && specs[j].dtype == KD_DTYPE_F32;
        CHECK_MSG(found, "%s is not listed", need[i]);
    }
    for (size_t j = 0; j < n; j++)
        if (strcmp(specs[j].program, "krylov") == 0)
            CHECK(strcmp(specs[j].options, wg) == 0);
    size_t small = 0;
    CHECK(kd_programs_list(ocl, KD_DTYPE_F32, specs, 3, &small, &err) == KD_ETOOLARGE);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    snprintf(dir, sizeof(dir), "/tmp/kd_test_programs_%d", (int)getpid());
    RUN(test_keys);
    RUN(test_round_trip);
    RUN(test_damaged_files);
    RUN(test_prune);
    RUN(test_list_matches_launches);
    kd_clear_dir();
    rmdir(dir);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
