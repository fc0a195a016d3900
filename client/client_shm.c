/*
 * libkrylov's shared-memory regions (client_shm.h): memfds made the way the server takes them
 * (MFD_ALLOW_SEALING, fully allocated, sealed against shrinking and growing), the arena's sizes
 * (grown to twice the old one, or just the request's size when the server's --max-shm-bytes has
 * no room for that), and where an array lies. The RPC itself is client.c's, through the ops.
 */
#define _GNU_SOURCE
#include "client/client_shm.h"

#include "krylov.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KD_CSHM_ALIGN ((size_t)64)
#define KD_CSHM_GROW_STEP ((size_t)1 << 20)
/* After this many requests sent as bins for want of room, the size is tried again (other
 * connections' regions may have gone). */
#define KD_CSHM_RETRY_AFTER 64

static size_t kd_cshm_round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

size_t kd_cshm_layout_add(kd_cshm_layout_t *lay, size_t len)
{
    const size_t offset = kd_cshm_round_up(lay->bytes, KD_CSHM_ALIGN);
    lay->bytes = offset + len;
    return offset;
}

int kd_cshm_on(const kd_cshm_t *s)
{
    return s->local && !s->off && !s->refused;
}

int kd_cshm_usable(const kd_cshm_t *s, size_t bytes)
{
    return kd_cshm_on(s) && bytes >= KD_CSHM_MIN_BYTES;
}

int kd_cshm_region_create(kd_cshm_region_t *r, size_t bytes)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (bytes == 0 || bytes > SIZE_MAX - page)
        return -EINVAL;
    bytes = kd_cshm_round_up(bytes, page);
    int f = memfd_create("krylov-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (f < 0)
        return -errno;
    int e = 0;
    if (ftruncate(f, (off_t)bytes) != 0)
        e = errno;
    else if ((e = posix_fallocate(f, 0, (off_t)bytes)) != 0) /* returns the error */
        ;
    else if (fcntl(f, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)
        e = errno;
    void *map = MAP_FAILED;
    if (e == 0 && (map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0)) == MAP_FAILED)
        e = errno;
    if (e != 0) {
        close(f);
        return -e;
    }
    r->map = map;
    r->bytes = bytes;
    r->id = 0;
    r->fd = f;
    return 0;
}

void kd_cshm_region_unmap(kd_cshm_region_t *r)
{
    if (r->map != NULL) {
        munmap(r->map, r->bytes);
        if (r->fd >= 0)
            close(r->fd);
    }
    memset(r, 0, sizeof(*r));
    r->fd = -1;
}

/* A new arena of `bytes`: 1, 0 (no room: try a smaller one), -1 (refused: off), or
 * KRYLOV_ECONNECTION. */
static int kd_cshm_arena_try(kd_cshm_t *s, size_t bytes, const kd_cshm_ops_t *ops)
{
    kd_cshm_region_t r;
    int e = kd_cshm_region_create(&r, bytes);
    if (e == -ENOSPC || e == -ENOMEM || e == -EFBIG)
        return 0;
    if (e != 0)
        return -1; /* no memfd_create, sealing, ...: bins */
    int64_t id = 0;
    const int rc = ops->register_fd(ops->ctx, r.fd, r.bytes, &id);
    close(r.fd); /* the server keeps its own mapping */
    r.fd = -1;
    if (rc != KRYLOV_OK || id < 1) {
        kd_cshm_region_unmap(&r);
        if (rc == KRYLOV_ECONNECTION)
            return KRYLOV_ECONNECTION;
        return rc == KRYLOV_ETOOLARGE ? 0 : -1;
    }
    r.id = id;
    s->arena = r;
    return 1;
}

int kd_cshm_reserve(kd_cshm_t *s, size_t bytes, const kd_cshm_ops_t *ops)
{
    if (!kd_cshm_on(s))
        return 0;
    if (s->too_large != 0 && bytes >= s->too_large) {
        if (++s->skipped < KD_CSHM_RETRY_AFTER)
            return 0;
        s->too_large = 0;
    }
    if (s->arena.id > 0 && s->arena.bytes >= bytes)
        return 1;
    const size_t want = kd_cshm_round_up(bytes, KD_CSHM_GROW_STEP);
    const size_t doubled = s->arena.bytes <= SIZE_MAX / 2 ? 2 * s->arena.bytes : 0;
    const size_t sizes[3] = {want > doubled ? want : doubled, want, bytes};
    if (s->arena.id > 0) /* first: the server counts it against --max-shm-bytes */
        ops->unregister(ops->ctx, s->arena.id);
    kd_cshm_region_unmap(&s->arena);
    for (int i = 0; i < 3; i++) {
        if (i > 0 && sizes[i] == sizes[i - 1])
            continue;
        const int rc = kd_cshm_arena_try(s, sizes[i], ops);
        if (rc == 1 || rc == KRYLOV_ECONNECTION)
            return rc;
        if (rc < 0) {
            s->refused = 1;
            return 0;
        }
    }
    s->too_large = s->too_large == 0 || bytes < s->too_large ? bytes : s->too_large;
    s->skipped = 0;
    return 0;
}

static int kd_cshm_holds(const kd_cshm_region_t *r, const void *p, size_t len, size_t *offset)
{
    if (r->map == NULL)
        return 0;
    const uintptr_t a = (uintptr_t)p, base = (uintptr_t)r->map;
    if (a < base || a - base > r->bytes || len > r->bytes - (a - base))
        return 0;
    *offset = a - base;
    return 1;
}

kd_cshm_region_t *kd_cshm_find(kd_cshm_t *s, const void *p, size_t len, size_t *offset)
{
    if (p == NULL)
        return NULL;
    for (int i = 0; i < KD_CSHM_USER_MAX; i++)
        if (kd_cshm_holds(&s->user[i], p, len, offset))
            return &s->user[i];
    return NULL;
}

void kd_cshm_disconnect(kd_cshm_t *s)
{
    kd_cshm_region_unmap(&s->arena);
    for (int i = 0; i < KD_CSHM_USER_MAX; i++)
        s->user[i].id = 0;
    s->local = 0;
    s->refused = 0;
    s->too_large = 0;
    s->skipped = 0;
}

void kd_cshm_free(kd_cshm_t *s)
{
    kd_cshm_region_unmap(&s->arena);
    for (int i = 0; i < KD_CSHM_USER_MAX; i++)
        kd_cshm_region_unmap(&s->user[i]);
}
