/*
 * The auth file's table, token verification and the method -> role table (see auth.h). The
 * table is immutable once loaded: a SIGHUP builds a new one and swaps it in only when the whole
 * file is good, so a typo never locks everyone out.
 */
#include "server/auth.h"
#include "server/config.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <ctype.h>
#include <stddef.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kd_auth_uid {
    uint32_t uid;
    size_t user; /* index into users */
};

struct kd_auth_table {
    kd_user_t *users;
    size_t nusers, cap_users;
    struct kd_auth_uid *uids;
    size_t nuids, cap_uids;
};

/* The one table of who may call what. A method left out would need no role at all (zero is
 * KD_ROLE_NONE): test_auth checks that `auth` is the only such method. */
static const kd_role_t kd_method_roles[KD_METHOD_COUNT] = {
    [KD_METHOD_AUTH] = KD_ROLE_NONE,
    [KD_METHOD_SPMV] = KD_ROLE_READ,
    [KD_METHOD_SOLVE] = KD_ROLE_READ,
    [KD_METHOD_SOLVE_BATCH] = KD_ROLE_READ, /* each item: matrices the user can read */
    [KD_METHOD_MATRIX_INFO] = KD_ROLE_READ,
    [KD_METHOD_MATRIX_LIST] = KD_ROLE_READ,
    [KD_METHOD_JOB_CANCEL] = KD_ROLE_READ,   /* a connection's own jobs only */
    [KD_METHOD_SHM_REGISTER] = KD_ROLE_READ, /* a connection's own regions only */
    [KD_METHOD_SHM_UNREGISTER] = KD_ROLE_READ,
    [KD_METHOD_SERVER_STATUS] = KD_ROLE_READ, /* the full view needs admin (dispatch/status.c) */
    [KD_METHOD_MATRIX_PUT] = KD_ROLE_WRITE,
    [KD_METHOD_MATRIX_DROP] = KD_ROLE_WRITE,
    [KD_METHOD_MATRIX_PIN] = KD_ROLE_WRITE,
    [KD_METHOD_MATRIX_MULTIPLY] = KD_ROLE_WRITE,
    [KD_METHOD_MATRIX_SHARE] = KD_ROLE_ADMIN,
};

kd_role_t kd_auth_method_role(kd_method_t method)
{
    return (unsigned)method < KD_METHOD_COUNT ? kd_method_roles[method] : KD_ROLE_ADMIN;
}

static const char *const kd_role_names[] = {"none", "read", "write", "admin"};

const char *kd_role_name(kd_role_t role)
{
    return (unsigned)role <= KD_ROLE_ADMIN ? kd_role_names[role] : "none";
}

static int kd_role_parse(const char *s, kd_role_t *out)
{
    for (int r = KD_ROLE_READ; r <= KD_ROLE_ADMIN; r++)
        if (strcmp(s, kd_role_names[r]) == 0) {
            *out = (kd_role_t)r;
            return 0;
        }
    return -1;
}

/* Names are what a log line and (later) a state file can hold without quoting. */
static int kd_name_valid(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n >= KD_AUTH_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && strchr("._@-", s[i]) == NULL)
            return 0;
    return 1;
}

static int kd_hex_digest(const char *s, uint8_t out[KD_AUTH_DIGEST_LEN])
{
    if (strlen(s) != 2 * KD_AUTH_DIGEST_LEN)
        return -1;
    for (size_t i = 0; i < KD_AUTH_DIGEST_LEN; i++) {
        unsigned v = 0;
        for (int k = 0; k < 2; k++) {
            char c = (char)tolower((unsigned char)s[2 * i + (size_t)k]);
            if (c >= '0' && c <= '9')
                v = v * 16 + (unsigned)(c - '0');
            else if (c >= 'a' && c <= 'f')
                v = v * 16 + (unsigned)(c - 'a' + 10);
            else
                return -1;
        }
        out[i] = (uint8_t)v;
    }
    return 0;
}

void kd_auth_free(kd_auth_table_t *table)
{
    if (table == NULL)
        return;
    OPENSSL_cleanse(table->users, table->cap_users * sizeof(*table->users));
    free(table->users);
    free(table->uids);
    free(table);
}

size_t kd_auth_count(const kd_auth_table_t *table)
{
    return table != NULL ? table->nusers : 0;
}

const kd_user_t *kd_auth_user(const kd_auth_table_t *table, size_t i)
{
    return &table->users[i];
}

const kd_user_t *kd_auth_find(const kd_auth_table_t *table, const char *name)
{
    for (size_t i = 0; table != NULL && i < table->nusers; i++)
        if (strcmp(table->users[i].name, name) == 0)
            return &table->users[i];
    return NULL;
}

const kd_user_t *kd_auth_find_uid(const kd_auth_table_t *table, uint32_t uid)
{
    for (size_t i = 0; table != NULL && i < table->nuids; i++)
        if (table->uids[i].uid == uid)
            return &table->users[table->uids[i].user];
    return NULL;
}

int kd_auth_verify(const kd_auth_table_t *table, const char *name, const char *token,
                   size_t token_len, const kd_user_t **out)
{
    static const uint8_t nobody[KD_AUTH_DIGEST_LEN];
    *out = NULL;
    const kd_user_t *user = kd_auth_find(table, name);
    uint8_t digest[KD_AUTH_DIGEST_LEN];
    SHA256((const unsigned char *)token, token_len, digest);
    const uint8_t *want = user != NULL && user->has_token ? user->digest : nobody;
    int same = CRYPTO_memcmp(digest, want, sizeof(digest)) == 0;
    OPENSSL_cleanse(digest, sizeof(digest));
    if (!same || user == NULL || !user->has_token)
        return KD_EUNAUTH;
    *out = user;
    return KD_OK;
}

static int kd_table_add_user(kd_auth_table_t *t, const kd_user_t *user)
{
    if (t->nusers == t->cap_users) {
        size_t cap = t->cap_users ? 2 * t->cap_users : 16;
        kd_user_t *users = calloc(cap, sizeof(*users));
        if (users == NULL)
            return KD_ENOMEM;
        if (t->nusers > 0)
            memcpy(users, t->users, t->nusers * sizeof(*users));
        OPENSSL_cleanse(t->users, t->cap_users * sizeof(*t->users));
        free(t->users);
        t->users = users;
        t->cap_users = cap;
    }
    t->users[t->nusers++] = *user;
    return KD_OK;
}

/* uid lines name users that may come later in the file: resolved once it is all read. */
struct kd_pending_uid {
    uint32_t uid;
    int line;
    char name[KD_AUTH_NAME_MAX];
};

static int kd_parse_uid_line(const char *path, int lineno, char *fields[], int nfields,
                             struct kd_pending_uid *out, kd_err_t *err)
{
    const char *digits = fields[0] + 4;
    char *end;
    errno = 0;
    unsigned long uid = strtoul(digits, &end, 10);
    if (nfields != 2 || *digits == '\0' || *end != '\0' || !isdigit((unsigned char)*digits) ||
        errno != 0 || uid > UINT32_MAX - 1)
        return kd_err_set(err, KD_EBADREQ, "%s:%d: expected `uid:UID NAME` (e.g. uid:1000 alice)",
                          path, lineno);
    if (!kd_name_valid(fields[1]))
        return kd_err_set(err, KD_EBADREQ,
                          "%s:%d: '%.64s' is not a user name (1..63 of A-Z a-z 0-9 . _ @ -)", path,
                          lineno, fields[1]);
    out->uid = (uint32_t)uid;
    out->line = lineno;
    snprintf(out->name, sizeof(out->name), "%s", fields[1]);
    return KD_OK;
}

#define KD_QUOTA_FIELDS 4

/* One `LIMIT=VALUE` field into quota: a known limit, given once, a count or a size above 0. */
static int kd_parse_quota(const char *path, int lineno, const char *field, kd_quota_t *quota,
                          kd_err_t *err)
{
    static const struct {
        const char *name;
        size_t offset;
        int size; /* a byte size (512M) rather than a count */
    } limits[KD_QUOTA_FIELDS] = {
        {"max_matrices", offsetof(kd_quota_t, max_matrices), 0},
        {"max_device_bytes", offsetof(kd_quota_t, max_device_bytes), 1},
        {"max_state_bytes", offsetof(kd_quota_t, max_state_bytes), 1},
        {"max_jobs", offsetof(kd_quota_t, max_jobs), 0},
    };
    const char *eq = strchr(field, '=');
    size_t klen = eq != NULL ? (size_t)(eq - field) : strlen(field);
    for (int i = 0; i < KD_QUOTA_FIELDS; i++) {
        if (strlen(limits[i].name) != klen || strncmp(field, limits[i].name, klen) != 0)
            continue;
        size_t *slot = (size_t *)((char *)quota + limits[i].offset);
        if (*slot != 0)
            return kd_err_set(err, KD_EBADREQ, "%s:%d: %s is given twice", path, lineno,
                              limits[i].name);
        size_t v = 0;
        int bad = eq == NULL;
        if (!bad && limits[i].size) {
            bad = kd_config_parse_size(eq + 1, &v) != 0;
        } else if (!bad) {
            char *end;
            errno = 0;
            unsigned long long n = strtoull(eq + 1, &end, 10);
            bad = !isdigit((unsigned char)eq[1]) || *end != '\0' || errno != 0 || n > SIZE_MAX;
            v = (size_t)n;
        }
        if (bad || v == 0)
            return kd_err_set(err, KD_EBADREQ, "%s:%d: %.*s needs %s above 0, e.g. %s=%s", path,
                              lineno, (int)klen, field,
                              limits[i].size ? "a size (bytes, or with K, M, G, T)" : "a count",
                              limits[i].name, limits[i].size ? "2G" : "10");
        *slot = v;
        return KD_OK;
    }
    return kd_err_set(err, KD_EBADREQ,
                      "%s:%d: '%.40s' is not a limit (max_matrices=N, max_device_bytes=SIZE, "
                      "max_state_bytes=SIZE, max_jobs=N)",
                      path, lineno, field);
}

static int kd_parse_user_line(const kd_auth_table_t *t, const char *path, int lineno,
                              char *fields[], int nfields, kd_user_t *user, kd_err_t *err)
{
    memset(user, 0, sizeof(*user));
    if (nfields < 3 || nfields > 3 + KD_QUOTA_FIELDS)
        return kd_err_set(err, KD_EBADREQ,
                          "%s:%d: expected `NAME ROLE SHA256HEX [LIMIT=VALUE ...]` or `uid:UID "
                          "NAME`, got %d field(s)",
                          path, lineno, nfields);
    if (!kd_name_valid(fields[0]))
        return kd_err_set(err, KD_EBADREQ,
                          "%s:%d: '%.64s' is not a user name (1..63 of A-Z a-z 0-9 . _ @ -)", path,
                          lineno, fields[0]);
    if (kd_auth_find(t, fields[0]) != NULL)
        return kd_err_set(err, KD_EBADREQ, "%s:%d: user '%s' is listed twice", path, lineno,
                          fields[0]);
    if (kd_role_parse(fields[1], &user->role) != 0)
        return kd_err_set(err, KD_EBADREQ, "%s:%d: role '%.32s' is not read, write or admin", path,
                          lineno, fields[1]);
    if (strcmp(fields[2], "-") != 0) {
        if (kd_hex_digest(fields[2], user->digest) != 0)
            return kd_err_set(err, KD_EBADREQ,
                              "%s:%d: the token hash must be 64 hex digits (SHA-256; `krylov token "
                              "new` prints the line) or - for none",
                              path, lineno);
        user->has_token = 1;
    }
    snprintf(user->name, sizeof(user->name), "%s", fields[0]);
    for (int i = 3; i < nfields; i++) {
        int rc = kd_parse_quota(path, lineno, fields[i], &user->quota, err);
        if (rc != KD_OK)
            return rc;
    }
    return KD_OK;
}

/* Split s at whitespace into at most cap fields; returns how many there were (up to cap + 1). */
static int kd_split_fields(char *s, char *fields[], int cap)
{
    int n = 0;
    for (char *tok = strtok(s, " \t\r\n"); tok != NULL; tok = strtok(NULL, " \t\r\n")) {
        if (n == cap)
            return cap + 1;
        fields[n++] = tok;
    }
    return n;
}

static int kd_resolve_uids(kd_auth_table_t *t, const char *path, struct kd_pending_uid *pending,
                           size_t npending, kd_err_t *err)
{
    if (npending == 0)
        return KD_OK;
    t->uids = calloc(npending, sizeof(*t->uids));
    if (t->uids == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of memory reading %s", path);
    for (size_t i = 0; i < npending; i++) {
        const kd_user_t *u = kd_auth_find(t, pending[i].name);
        if (u == NULL)
            return kd_err_set(err, KD_EBADREQ,
                              "%s:%d: uid %u names user '%s', which no `NAME ROLE HASH` line "
                              "defines",
                              path, pending[i].line, pending[i].uid, pending[i].name);
        if (kd_auth_find_uid(t, pending[i].uid) != NULL)
            return kd_err_set(err, KD_EBADREQ, "%s:%d: uid %u is mapped twice", path,
                              pending[i].line, pending[i].uid);
        t->uids[t->nuids].uid = pending[i].uid;
        t->uids[t->nuids].user = (size_t)(u - t->users);
        t->nuids++;
    }
    return KD_OK;
}

int kd_auth_load(const char *path, kd_auth_table_t **out, kd_err_t *err)
{
    *out = NULL;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return kd_err_set(err, KD_EIO, "cannot read auth file %s: %s", path, strerror(errno));
    kd_auth_table_t *t = calloc(1, sizeof(*t));
    struct kd_pending_uid *pending = NULL;
    size_t npending = 0, cap_pending = 0;
    char line[512];
    int lineno = 0, rc = t != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "out of memory");
    while (rc == KD_OK && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = kd_err_set(err, KD_EBADREQ, "%s:%d: line too long", path, lineno);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        char *fields[3 + KD_QUOTA_FIELDS + 1];
        int n = kd_split_fields(line, fields, 3 + KD_QUOTA_FIELDS);
        if (n == 0)
            continue;
        if (strncmp(fields[0], "uid:", 4) == 0) {
            if (npending == cap_pending) {
                size_t cap = cap_pending ? 2 * cap_pending : 8;
                struct kd_pending_uid *p = realloc(pending, cap * sizeof(*p));
                if (p == NULL) {
                    rc = kd_err_set(err, KD_ENOMEM, "out of memory reading %s", path);
                    break;
                }
                pending = p;
                cap_pending = cap;
            }
            rc = kd_parse_uid_line(path, lineno, fields, n, &pending[npending], err);
            npending += rc == KD_OK;
            continue;
        }
        kd_user_t user;
        rc = kd_parse_user_line(t, path, lineno, fields, n, &user, err);
        if (rc == KD_OK && kd_table_add_user(t, &user) != KD_OK)
            rc = kd_err_set(err, KD_ENOMEM, "out of memory reading %s", path);
        OPENSSL_cleanse(&user, sizeof(user));
    }
    if (rc == KD_OK && ferror(f))
        rc = kd_err_set(err, KD_EIO, "cannot read auth file %s", path);
    fclose(f);
    OPENSSL_cleanse(line, sizeof(line));
    if (rc == KD_OK)
        rc = kd_resolve_uids(t, path, pending, npending, err);
    if (rc == KD_OK && t->nusers == 0)
        rc = kd_err_set(err, KD_EBADREQ,
                        "%s: no users (add `NAME ROLE SHA256HEX` lines; `krylov token new NAME "
                        "ROLE` prints one)",
                        path);
    free(pending);
    if (rc != KD_OK) {
        kd_auth_free(t);
        return rc;
    }
    *out = t;
    return KD_OK;
}
