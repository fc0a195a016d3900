/*
 * The auth file and the role table (server/auth.c) without a daemon: a file with comments,
 * blank lines, upper-case hex, a token-less user and uid lines (before and after the user they
 * name) loads; the right token verifies and a wrong one, an unknown name or a token-less user
 * does not; each malformed line is refused naming FILE:LINE; and the method -> role table is the
 * one the issue and docs/PROTOCOL.md give, with `auth` the only method open to anyone.
 */
#include "kd_test.h"
#include "server/auth.h"
#include "server/store/quota.h"

#include <openssl/sha.h>

static char dir[256];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static void sha256_hex(const char *token, char out[65], int upper)
{
    unsigned char d[32];
    SHA256((const unsigned char *)token, strlen(token), d);
    for (int i = 0; i < 32; i++)
        snprintf(out + 2 * i, 3, upper ? "%02X" : "%02x", d[i]);
}

static void test_load_and_verify(void)
{
    char path[300], text[1024], h1[65], h2[65];
    snprintf(path, sizeof(path), "%s/auth", dir);
    sha256_hex("alice-token", h1, 0);
    sha256_hex("bob-token", h2, 1);
    snprintf(text, sizeof(text),
             "# users\n"
             "uid:1000 bob      # before bob's line\n"
             "\n"
             "alice read %s\n"
             "\tbob  write\t%s   # upper-case hex\n"
             "svc admin -\n"
             "uid:0 svc\n",
             h1, h2);
    write_file(path, text);
    kd_auth_table_t *t = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_auth_load(path, &t, &err) == KD_OK);
    CHECK_EQ_INT(kd_auth_count(t), 3);
    const kd_user_t *u = NULL;
    CHECK(kd_auth_verify(t, "alice", "alice-token", 11, &u) == KD_OK && u != NULL &&
          u->role == KD_ROLE_READ && strcmp(u->name, "alice") == 0);
    CHECK(kd_auth_verify(t, "bob", "bob-token", 9, &u) == KD_OK && u->role == KD_ROLE_WRITE);
    CHECK(kd_auth_verify(t, "alice", "bob-token", 9, &u) == KD_EUNAUTH && u == NULL);
    CHECK(kd_auth_verify(t, "alice", "alice-toke", 10, &u) == KD_EUNAUTH);
    CHECK(kd_auth_verify(t, "mallory", "alice-token", 11, &u) == KD_EUNAUTH);
    CHECK(kd_auth_verify(t, "svc", "", 0, &u) == KD_EUNAUTH); /* no token: uid only */
    u = kd_auth_find_uid(t, 1000);
    CHECK(u != NULL && strcmp(u->name, "bob") == 0);
    u = kd_auth_find_uid(t, 0);
    CHECK(u != NULL && strcmp(u->name, "svc") == 0 && u->role == KD_ROLE_ADMIN);
    CHECK(kd_auth_find_uid(t, 1001) == NULL);
    CHECK(kd_auth_find(t, "nobody") == NULL);
    kd_auth_free(t);
    kd_auth_free(NULL);
}

/* text with every "HASH" replaced by hash (a format string would not be a literal). */
static void fill_hash(char *out, size_t cap, const char *text, const char *hash)
{
    size_t n = 0;
    for (const char *p = text; *p != '\0' && n + 65 < cap;) {
        if (strncmp(p, "HASH", 4) == 0) {
            memcpy(out + n, hash, 64);
            n += 64;
            p += 4;
        } else {
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
}

static void test_malformed_lines(void)
{
    char path[300], text[512], h[65];
    snprintf(path, sizeof(path), "%s/bad", dir);
    sha256_hex("x", h, 0);
    struct {
        const char *text; /* HASH: a good hash */
        const char *where, *why;
    } cases[] = {
        {"a read HASH\nb root HASH\n", ":2:", "role 'root'"},
        {"a read HASH\nb read 1234\n", ":2:", "64 hex digits"},
        {"a read HASH\nb read gaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
         ":2:", "64 hex digits"},
        {"\n\na read\n", ":3:", "got 2 field"},
        {"a read HASH x\n", ":1:", "'x' is not a limit"},
        {"a read HASH max_matrices=1 max_jobs=1 max_device_bytes=1 max_state_bytes=1 x\n",
         ":1:", "got 8 field"},
        {"a read HASH max_matrices=0\n", ":1:", "max_matrices needs a count above 0"},
        {"a read HASH max_matrices=-1\n", ":1:", "max_matrices needs a count above 0"},
        {"a read HASH max_matrices=3x\n", ":1:", "max_matrices needs a count above 0"},
        {"a read HASH max_jobs\n", ":1:", "max_jobs needs a count above 0"},
        {"a read HASH max_device_bytes=lots\n", ":1:", "max_device_bytes needs a size"},
        {"a read HASH max_state_bytes=1Q\n", ":1:", "max_state_bytes needs a size"},
        {"a read HASH max_jobs=2 max_jobs=3\n", ":1:", "max_jobs is given twice"},
        {"a read HASH max_disk=3\n", ":1:", "'max_disk=3' is not a limit"},
        {"a read HASH\na write HASH\n", ":2:", "listed twice"},
        {"a!b read HASH\n", ":1:", "not a user name"},
        {"a read HASH\nuid:abc a\n", ":2:", "uid:UID NAME"},
        {"a read HASH\nuid:-1 a\n", ":2:", "uid:UID NAME"},
        {"a read HASH\nuid:5\n", ":2:", "uid:UID NAME"},
        {"a read HASH\nuid:5 a\nuid:5 a\n", ":3:", "mapped twice"},
        {"a read HASH\n\nuid:5 ghost\n", ":3:", "'ghost'"},
        {"# nobody\n", "", "no users"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fill_hash(text, sizeof(text), cases[i].text, h);
        write_file(path, text);
        kd_auth_table_t *t = (kd_auth_table_t *)&t; /* must come back NULL */
        kd_err_t err = {0};
        CHECK_MSG(kd_auth_load(path, &t, &err) == KD_EBADREQ, "case %zu loaded", i);
        CHECK(t == NULL);
        char want[400];
        snprintf(want, sizeof(want), "%s%s", path, cases[i].where);
        CHECK_STR_CONTAINS(err.message, want);
        CHECK_STR_CONTAINS(err.message, cases[i].why);
    }
    char longline[1200];
    memset(longline, 'a', sizeof(longline) - 2);
    longline[sizeof(longline) - 2] = '\n';
    longline[sizeof(longline) - 1] = '\0';
    write_file(path, longline);
    kd_auth_table_t *t = NULL;
    kd_err_t err = {0};
    CHECK(kd_auth_load(path, &t, &err) == KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, ":1: line too long");
    snprintf(path, sizeof(path), "%s/missing", dir);
    CHECK(kd_auth_load(path, &t, &err) == KD_EIO);
    CHECK_STR_CONTAINS(err.message, "cannot read auth file");
}

static void test_quotas(void)
{
    char path[300], text[512], h[65];
    snprintf(path, sizeof(path), "%s/quotas", dir);
    sha256_hex("x", h, 0);
    fill_hash(text, sizeof(text),
              "a write HASH max_matrices=10 max_device_bytes=1G max_state_bytes=2048K "
              "max_jobs=4\nb write HASH max_jobs=1   # one limit only\nc read HASH\n",
              h);
    write_file(path, text);
    kd_auth_table_t *t = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_auth_load(path, &t, &err) == KD_OK);
    const kd_user_t *a = kd_auth_find(t, "a"), *b = kd_auth_find(t, "b"), *c = kd_auth_find(t, "c");
    REQUIRE(a != NULL && b != NULL && c != NULL);
    CHECK_EQ_INT(a->quota.max_matrices, 10);
    CHECK_EQ_INT(a->quota.max_device_bytes, (size_t)1 << 30);
    CHECK_EQ_INT(a->quota.max_state_bytes, 2048 * 1024);
    CHECK_EQ_INT(a->quota.max_jobs, 4);
    CHECK_EQ_INT(b->quota.max_jobs, 1);
    CHECK_EQ_INT(b->quota.max_matrices, 0);
    CHECK_EQ_INT(c->quota.max_device_bytes, 0);

    /* The checks: each limit named with the use it would reach and by how much. */
    kd_usage_t use = {.matrices = 10, .device_bytes = 1000, .state_bytes = 50};
    kd_err_clear(&err);
    CHECK(kd_quota_check_matrix(&a->quota, "a", &use, 1, 1, &err) == KD_EQUOTA);
    CHECK_STR_CONTAINS(err.message, "a: 11 matrices would exceed max_matrices = 10 (by 1)");
    use.matrices = 9;
    CHECK(kd_quota_check_matrix(&a->quota, "a", &use, 1, 1, &err) == KD_OK);
    CHECK(kd_quota_check_matrix(&a->quota, "a", &use, ((size_t)1 << 30) - 1000, 0, &err) == KD_OK);
    CHECK(kd_quota_check_matrix(&a->quota, "a", &use, ((size_t)1 << 30) - 999, 0, &err) ==
          KD_EQUOTA);
    CHECK_STR_CONTAINS(err.message, "a: 1073741825 device bytes would exceed max_device_bytes = "
                                    "1073741824 (by 1)");
    CHECK(kd_quota_check_matrix(&a->quota, "a", &use, 0, SIZE_MAX, &err) == KD_EQUOTA);
    CHECK_STR_CONTAINS(err.message, "state bytes would exceed max_state_bytes = 2097152");
    CHECK(kd_quota_check_matrix(&c->quota, "c", &use, SIZE_MAX, SIZE_MAX, &err) == KD_OK);
    CHECK(kd_quota_check_jobs(&b->quota, "b", 0, &err) == KD_OK);
    CHECK(kd_quota_check_jobs(&b->quota, "b", 1, &err) == KD_EQUOTA);
    CHECK_STR_CONTAINS(err.message, "b: 2 requests in flight would exceed max_jobs = 1 (by 1)");
    kd_auth_free(t);
}

static void test_role_table(void)
{
    /* Written out independently of auth.c: what each role may call (docs/PROTOCOL.md). */
    static const struct {
        const char *method;
        kd_role_t role;
    } want[] = {
        {"auth", KD_ROLE_NONE},
        {"spmv", KD_ROLE_READ},
        {"solve", KD_ROLE_READ},
        {"matrix.info", KD_ROLE_READ},
        {"matrix.list", KD_ROLE_READ},
        {"job.cancel", KD_ROLE_READ},
        {"server.status", KD_ROLE_READ},
        {"matrix.put", KD_ROLE_WRITE},
        {"matrix.drop", KD_ROLE_WRITE},
        {"matrix.pin", KD_ROLE_WRITE},
        {"matrix.multiply", KD_ROLE_WRITE},
        {"matrix.share", KD_ROLE_ADMIN},
        {"solve.batch", KD_ROLE_READ},
        {"shm.register", KD_ROLE_READ},
        {"shm.unregister", KD_ROLE_READ},
    };
    CHECK_EQ_INT(sizeof(want) / sizeof(want[0]), KD_METHOD_COUNT);
    for (int m = 0; m < KD_METHOD_COUNT; m++) {
        const char *name = kd_method_name((kd_method_t)m);
        size_t k = 0;
        while (k < sizeof(want) / sizeof(want[0]) && strcmp(want[k].method, name) != 0)
            k++;
        REQUIRE(k < sizeof(want) / sizeof(want[0]));
        CHECK_MSG(kd_auth_method_role((kd_method_t)m) == want[k].role, "%s needs %s", name,
                  kd_role_name(kd_auth_method_role((kd_method_t)m)));
        CHECK_MSG(m == KD_METHOD_AUTH || kd_auth_method_role((kd_method_t)m) >= KD_ROLE_READ,
                  "%s is open to anyone", name);
    }
    CHECK(strcmp(kd_role_name(KD_ROLE_ADMIN), "admin") == 0);
}

int main(void)
{
    kd_test_seed();
    snprintf(dir, sizeof(dir), "/tmp/krylovd-auth-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    RUN(test_load_and_verify);
    RUN(test_malformed_lines);
    RUN(test_quotas);
    RUN(test_role_table);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return kd_test_finish();
}
