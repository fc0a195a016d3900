/*
 * Who may use the server: the auth file's table of users (name, role, SHA-256 of the token) and
 * Unix uids, token verification, and which role each method needs. Pure data and checks: no
 * sockets, no loop (login.c answers `auth` on a connection; dispatch.c asks kd_auth_allows).
 *
 * The auth file, one entry a line (docs/OPERATIONS.md, "Security"):
 *     NAME ROLE SHA256HEX [LIMIT=VALUE ...]
 *                              a user: ROLE is read, write or admin; the hash is of the token;
 *                              limits (kd_quota_t): max_matrices=N max_device_bytes=SIZE
 *                              max_state_bytes=SIZE max_jobs=N (SIZE as in the config: 512M, 2G)
 *     NAME ROLE -              a user with no token: only a uid line lets it in
 *     uid:UID NAME             a Unix-socket client with this uid is NAME without a token
 *     # comment                blank lines are ignored too
 */
#ifndef KD_SERVER_AUTH_H
#define KD_SERVER_AUTH_H

#include "common/error.h"
#include "protocol/request.h"

#include <stddef.h>
#include <stdint.h>

typedef enum kd_role {
    KD_ROLE_NONE = 0, /* not authenticated */
    KD_ROLE_READ,
    KD_ROLE_WRITE,
    KD_ROLE_ADMIN,
} kd_role_t;

#define KD_AUTH_DIGEST_LEN 32

/* A user's limits; 0: none. Use is counted over the matrices the user holds a reference to (a
 * matrix two users hold counts for both), device bytes as each takes on the device when loaded,
 * so that a user's use does not move with global eviction. */
typedef struct kd_quota {
    size_t max_matrices;
    size_t max_device_bytes;
    size_t max_state_bytes;
    size_t max_jobs; /* requests queued or running, over all the user's connections */
} kd_quota_t;

/* Who a connection is; ownership is keyed on name. */
typedef struct kd_user {
    char name[KD_AUTH_NAME_MAX];
    kd_role_t role;
    uint8_t digest[KD_AUTH_DIGEST_LEN]; /* SHA-256 of the token */
    int has_token;                      /* 0: a name known only through a uid line */
    kd_quota_t quota;
} kd_user_t;

typedef struct kd_auth_table kd_auth_table_t;

/* Read and check the whole file; on the first malformed line KD_EBADREQ with "FILE:LINE: why"
 * and nothing is returned. The caller owns *out (kd_auth_free). */
int kd_auth_load(const char *path, kd_auth_table_t **out, kd_err_t *err);
void kd_auth_free(kd_auth_table_t *table); /* accepts NULL */
size_t kd_auth_count(const kd_auth_table_t *table);

/* The i-th user of the file (i < kd_auth_count), in the file's order. */
const kd_user_t *kd_auth_user(const kd_auth_table_t *table, size_t i);

/* The user called name, or NULL. */
const kd_user_t *kd_auth_find(const kd_auth_table_t *table, const char *name);
/* The user a uid line maps uid to, or NULL. */
const kd_user_t *kd_auth_find_uid(const kd_auth_table_t *table, uint32_t uid);

/* KD_OK and *out = the user when the token's SHA-256 equals the user's (compared in constant
 * time; an unknown name costs the same hash and comparison); KD_EUNAUTH otherwise. */
int kd_auth_verify(const kd_auth_table_t *table, const char *name, const char *token,
                   size_t token_len, const kd_user_t **out);

/* The least role that may call method (KD_ROLE_NONE: anyone, authenticated or not). */
kd_role_t kd_auth_method_role(kd_method_t method);
const char *kd_role_name(kd_role_t role);

#endif
