/*
 * libkrylov's shared memory with a krylovd on the same host (private; docs/PROTOCOL.md, "Shared
 * memory"). Over a Unix socket the client keeps one region of its own, the arena: a memfd sealed
 * against shrinking and growing, registered once and reused; a large request's arrays are copied
 * into it once and named by reference, and the server writes the result there (`out`). Regions
 * the caller asked for (krylov_shm_alloc) are kept apart from it, so that they never move: an
 * array already in one is named where it lies, with no copy at all.
 *
 * No sockets here: client.c registers a region through the callbacks of kd_cshm_ops_t, and this
 * module decides the sizes, when to give up, and where each array goes.
 */
#ifndef KD_CLIENT_CLIENT_SHM_H
#define KD_CLIENT_CLIENT_SHM_H

#include <stddef.h>
#include <stdint.h>

/* Requests whose arrays hold fewer bytes go as bins: a copy and a reference cost more. */
#define KD_CSHM_MIN_BYTES ((size_t)256 << 10)
/* Regions of krylov_shm_alloc one client may hold. */
#define KD_CSHM_USER_MAX 16

/* One mapped memfd and the server's id for it (0: not registered on this connection). */
typedef struct kd_cshm_region {
    void *map; /* NULL: none */
    size_t bytes;
    int64_t id;
    int fd; /* the memfd, kept by the caller's regions to register them on a new connection; -1 */
} kd_cshm_region_t;

typedef struct kd_cshm_ops {
    /* shm.register of fd (bytes long): KRYLOV_OK and *id; KRYLOV_ETOOLARGE when the server has no
     * room (a smaller one may do); KRYLOV_ECONNECTION when the connection broke; anything else
     * is a refusal: shared memory is off for the connection. */
    int (*register_fd)(void *ctx, int fd, size_t bytes, int64_t *id);
    void (*unregister)(void *ctx, int64_t id); /* shm.unregister; errors ignored */
    void *ctx;
} kd_cshm_ops_t;

typedef struct kd_cshm {
    int off;     /* krylov_shm_set(c, 0) */
    int local;   /* the connection is a Unix socket */
    int refused; /* the server refused shm.register on this connection: bins from now on */
    kd_cshm_region_t arena;
    size_t too_large; /* requests of this many bytes or more go as bins (no room); 0: none */
    int skipped;      /* requests sent as bins because of too_large, since it was set */
    int64_t uses;     /* requests whose arrays went through a region */
    kd_cshm_region_t user[KD_CSHM_USER_MAX];
} kd_cshm_t;

/* Places arrays one after another, 64-byte aligned, in the arena. */
typedef struct kd_cshm_layout {
    size_t bytes;
} kd_cshm_layout_t;

/* The offset in the arena of the next array of len bytes. */
size_t kd_cshm_layout_add(kd_cshm_layout_t *lay, size_t len);

/* 1 when shared memory may be used on this connection (a Unix socket, not turned off, not
 * refused). */
int kd_cshm_on(const kd_cshm_t *s);
/* 1 when a request of `bytes` in its arrays goes through shared memory on this connection. */
int kd_cshm_usable(const kd_cshm_t *s, size_t bytes);

/* An arena of at least `bytes` (registered, mapped): 1; 0 when the request must go as bins (no
 * room on the server or here, or a refusal: then s->refused); KRYLOV_ECONNECTION. Whether the
 * request is large enough to be worth it is the caller's question (kd_cshm_usable). */
int kd_cshm_reserve(kd_cshm_t *s, size_t bytes, const kd_cshm_ops_t *ops);

/* A new mapped memfd of `bytes` (rounded up to pages) into *r (r->fd open); 0, or -errno. */
int kd_cshm_region_create(kd_cshm_region_t *r, size_t bytes);
/* Unmap r and close its descriptor; accepts an empty one. */
void kd_cshm_region_unmap(kd_cshm_region_t *r);

/* The caller's region (krylov_shm_alloc) that holds all of [p, p + len), and the offset of p in
 * it; NULL when none does. Its id is 0 when it is not registered on this connection (yet). */
kd_cshm_region_t *kd_cshm_find(kd_cshm_t *s, const void *p, size_t len, size_t *offset);

/* The connection ended: every region is the server's no longer (the caller's keep their
 * mappings and are registered again when used). */
void kd_cshm_disconnect(kd_cshm_t *s);
/* Unmap everything (krylov_client_free). */
void kd_cshm_free(kd_cshm_t *s);

#endif
