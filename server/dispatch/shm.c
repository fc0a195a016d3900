/*
 * Shared-memory regions (see shm.h). Registration checks what makes a mapping safe to use from
 * the server: the descriptor is a memfd on tmpfs (shmem; not hugetlbfs, where a page the client
 * punched out may be unavailable when the server touches it: SIGBUS) sealed against shrinking
 * (F_SEAL_SHRINK), so no truncation by the client can make an access fault (SIGBUS), it holds at
 * least the bytes declared, and its pages are all allocated (posix_fallocate by the client), so
 * that the memory is charged to the client's cgroup, not to the server's by its first touch.
 * F_SEAL_WRITE is not asked for (the server writes `out`), so the client may still punch a hole
 * (fallocate FALLOC_FL_PUNCH_HOLE): on tmpfs a later access by the server then gets a fresh zero
 * page, never a fault (only a size-limited tmpfs mount could fail it, and memfds live on the
 * kernel's unlimited internal one); that page is charged to the server's cgroup, which the client
 * can make happen only for regions it registered, within --max-shm-bytes. The descriptor is closed
 * once mapped (the mapping keeps the memory). Every reference
 * a request makes is checked against the region here, overflow-safe, before a job sees it; the
 * handlers then read and write the mapping as they would a bin of the message.
 */
#define _GNU_SOURCE /* F_GET_SEALS */
#include "server/dispatch/shm.h"

#include "common/log.h"
#include "protocol/frame.h"
#include "protocol/writer.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

static void kd_shm_unref(kd_shm_region_t *r)
{
    if (r == NULL || --r->refs > 0)
        return;
    munmap(r->base, r->bytes);
    kd_server_t *server = r->server;
    server->shm_mapped -= r->bytes;
    server->shm_regions--;
    if (r->all_prev != NULL)
        r->all_prev->all_next = r->all_next;
    else
        server->shm_all = r->all_next;
    if (r->all_next != NULL)
        r->all_next->all_prev = r->all_prev;
    free(r);
}

static kd_shm_region_t *kd_shm_find(const kd_conn_t *conn, int64_t id)
{
    for (kd_shm_region_t *r = conn->regions; r != NULL; r = r->next)
        if (r->id == id)
            return r;
    return NULL;
}

int kd_shm_claim_fd(kd_conn_t *conn)
{
    for (int i = 0; i < conn->nfds; i++) {
        const kd_conn_fd_t *f = &conn->fds[i];
        if (f->start <= conn->msg_start && conn->msg_start < f->end) {
            int fd = f->fd;
            memmove(conn->fds + i, conn->fds + i + 1,
                    (size_t)(conn->nfds - i - 1) * sizeof(conn->fds[0]));
            conn->nfds--;
            conn->server->fds_held--;
            return fd;
        }
    }
    return -1;
}

/* Bytes of the regions user registered that are still mapped: on its open connections, and
 * those unregistered (or whose connection closed) that a request still uses. */
static size_t kd_shm_user_bytes(const kd_server_t *server, const char *user)
{
    size_t total = 0;
    for (const kd_shm_region_t *r = server->shm_all; r != NULL; r = r->all_next)
        if (strcmp(r->user, user) == 0)
            total += r->bytes;
    return total;
}

/* The checks on fd for a region of `bytes`, then its mapping; KD_OK with *base, or an error. */
static int kd_shm_map(kd_conn_t *conn, int fd, size_t bytes, void **base, struct stat *st_out,
                      kd_err_t *err)
{
    const kd_server_t *server = conn->server;
    const size_t max = server->cfg.max_shm_bytes;
    int seals = fcntl(fd, F_GET_SEALS);
    if (seals < 0)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: the file descriptor is not a memfd that takes seals "
                          "(create it with memfd_create and MFD_ALLOW_SEALING)");
    if ((seals & F_SEAL_SHRINK) == 0)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: the memfd is not sealed against shrinking (add "
                          "F_SEAL_SHRINK with fcntl F_ADD_SEALS): a truncation could fault the "
                          "server");
    struct statfs fs;
    if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: the memfd is not on tmpfs (made with MFD_HUGETLB?): "
                          "create it with memfd_create without MFD_HUGETLB");
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return kd_err_set(err, KD_EBADREQ, "shm.register: the memfd cannot be inspected (fstat)");
    if ((uint64_t)st.st_size < bytes)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: bytes = %zu but the memfd holds only %lld bytes", bytes,
                          (long long)st.st_size);
    if ((uint64_t)st.st_blocks * 512u < (uint64_t)st.st_size)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: the memfd's %lld bytes are not all allocated (%lld are): "
                          "posix_fallocate it after ftruncate, so its memory is the client's",
                          (long long)st.st_size, (long long)st.st_blocks * 512);
    if (conn->shm_bytes + bytes > max || bytes > max)
        return kd_err_set(err, KD_ETOOLARGE,
                          "shm.register: %zu bytes more would give this connection %zu bytes of "
                          "shared memory, over --max-shm-bytes = %zu",
                          bytes, conn->shm_bytes + bytes, max);
    const size_t user = kd_shm_user_bytes(server, conn->user.name);
    if (user + bytes > max)
        return kd_err_set(err, KD_ETOOLARGE,
                          "shm.register: %zu bytes more would give user '%s' %zu bytes of shared "
                          "memory mapped (its connections' regions and those still in use), over "
                          "--max-shm-bytes = %zu",
                          bytes, conn->user.name, user + bytes, max);
    size_t count = 0;
    for (const kd_shm_region_t *r = conn->regions; r != NULL; r = r->next) {
        count++;
        /* one memfd, one region: the handlers tell an `out` sharing bytes with an input by
         * region id and offsets (handlers/common.c), which two regions of a file would defeat */
        if (r->dev == st.st_dev && r->ino == st.st_ino)
            return kd_err_set(err, KD_EBADREQ,
                              "shm.register: this memfd is registered already on this connection "
                              "(region %lld); name its bytes through that region",
                              (long long)r->id);
    }
    if (count >= KD_SHM_REGIONS_MAX)
        return kd_err_set(err, KD_ETOOLARGE,
                          "shm.register: this connection holds %zu regions already (at most %d); "
                          "unregister one",
                          count, KD_SHM_REGIONS_MAX);
    *st_out = st;
    *base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (*base == MAP_FAILED)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: the memfd cannot be mapped for reading and writing (%s%s)",
                          strerror(errno),
                          errno == EPERM ? ": sealed against writes? seal only SHRINK and GROW"
                                         : "");
    return KD_OK;
}

int kd_shm_register(kd_conn_t *conn, const kd_request_t *req, int fd, kd_writer_t *w, kd_err_t *err)
{
    kd_server_t *server = conn->server;
    const kd_shm_request_t *q = &req->u.shm;
    if (!conn->is_unix || server->cfg.max_shm_bytes == 0) {
        if (fd >= 0)
            close(fd);
        if (!conn->is_unix)
            return kd_err_set(err, KD_EUNSUPPORTED,
                              "shm.register needs the Unix socket (--listen unix:PATH): a memfd "
                              "cannot cross TCP; send arrays as bins");
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "shm.register is off on this server (--max-shm-bytes = 0); send arrays "
                          "as bins");
    }
    if (fd < 0)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.register: no file descriptor came with the request (send the memfd "
                          "with SCM_RIGHTS in the same sendmsg as the request's first bytes)");
    void *base = NULL;
    const size_t bytes = (size_t)q->bytes;
    struct stat st = {0};
    int rc = kd_shm_map(conn, fd, bytes, &base, &st, err);
    close(fd); /* a mapping keeps the memory; the descriptor is not needed again */
    kd_shm_region_t *r = rc == KD_OK ? calloc(1, sizeof(*r)) : NULL;
    if (rc == KD_OK && r == NULL) {
        munmap(base, bytes);
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory registering a region");
    }
    if (rc != KD_OK) {
        KD_INFO("shm", "refused shm.register conn=%llu peer=%s: %s", (unsigned long long)conn->id,
                conn->peer, err->message);
        return rc;
    }
    r->id = ++server->next_shm_id;
    r->base = base;
    r->bytes = bytes;
    r->refs = 1;
    r->server = server;
    r->dev = st.st_dev;
    r->ino = st.st_ino;
    snprintf(r->user, sizeof(r->user), "%s", conn->user.name);
    r->all_next = server->shm_all;
    if (server->shm_all != NULL)
        server->shm_all->all_prev = r;
    server->shm_all = r;
    r->next = conn->regions;
    conn->regions = r;
    conn->shm_bytes += bytes;
    server->shm_mapped += bytes;
    server->shm_regions++;
    KD_DEBUG("shm", "registered conn=%llu region=%lld bytes=%zu name=%s",
             (unsigned long long)conn->id, (long long)r->id, bytes, q->name);
    kd_w_result_begin(w, req->msgid);
    kd_w_map(w, 3);
    kd_w_kv_int(w, "shm", r->id);
    kd_w_kv_int(w, "bytes", (int64_t)bytes);
    kd_w_kv_str(w, "name", q->name);
    return KD_OK;
}

/* Take r off conn's list and drop the connection's reference. */
static void kd_shm_drop(kd_conn_t *conn, kd_shm_region_t *r)
{
    kd_shm_region_t **p = &conn->regions;
    while (*p != r)
        p = &(*p)->next;
    *p = r->next;
    r->next = NULL;
    conn->shm_bytes -= r->bytes;
    kd_shm_unref(r);
}

int kd_shm_unregister(kd_conn_t *conn, const kd_request_t *req, kd_writer_t *w, kd_err_t *err)
{
    kd_shm_region_t *r = kd_shm_find(conn, req->u.shm.id);
    if (r == NULL)
        return kd_err_set(err, KD_EBADREQ,
                          "shm.unregister: no shared-memory region %lld on this connection",
                          (long long)req->u.shm.id);
    const int in_use = r->refs > 1;
    kd_shm_drop(conn, r);
    kd_w_result_begin(w, req->msgid);
    kd_w_map(w, 2);
    kd_w_kv_int(w, "shm", req->u.shm.id);
    kd_w_kv_bool(w, "in_use", in_use); /* requests still using it keep it mapped until done */
    return KD_OK;
}

void kd_shm_conn_closed(kd_conn_t *conn)
{
    while (conn->regions != NULL)
        kd_shm_drop(conn, conn->regions);
}

/* The name of the i-th array of kd_request_array, for messages. */
static const char *kd_shm_field(const kd_request_t *req, size_t i, char buf[48])
{
    static const char *const spmv[] = {"x", "y", "out"}, *const solve[] = {"b", "x0", "out"};
    switch (req->method) {
    case KD_METHOD_SPMV:
        return spmv[i];
    case KD_METHOD_SOLVE:
        return solve[i];
    case KD_METHOD_SOLVE_BATCH:
        snprintf(buf, 48, "items[%zu].%s", i / 2, i % 2 == 0 ? "b" : "x0");
        return buf;
    default:
        return "values";
    }
}

static int kd_shm_hold(kd_job_t *job, kd_shm_region_t *r, kd_err_t *err)
{
    for (int i = 0; i < job->nregions; i++)
        if (job->regions[i] == r)
            return KD_OK;
    kd_shm_region_t **grown = realloc(job->regions, (size_t)(job->nregions + 1) * sizeof(*grown));
    if (grown == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory resolving regions");
    job->regions = grown;
    job->regions[job->nregions++] = r;
    r->refs++;
    return KD_OK;
}

int kd_shm_resolve(kd_conn_t *conn, kd_job_t *job, kd_err_t *err)
{
    kd_request_t *req = job->req;
    kd_array_t *a;
    for (size_t i = 0; (a = kd_request_array(req, i)) != NULL; i++) {
        if (!a->present || a->shm == 0)
            continue;
        char buf[48];
        const char *field = kd_shm_field(req, i, buf);
        kd_shm_region_t *r = kd_shm_find(conn, a->shm);
        if (r == NULL)
            return kd_err_set(err, KD_EBADREQ,
                              "%s: no shared-memory region %lld on this connection (regions are "
                              "their connection's; shm.register first)",
                              field, (long long)a->shm);
        /* count came from bytes / size, both int64: the product fits */
        const uint64_t bytes = (uint64_t)a->count * kd_dtype_size(a->dtype);
        const uint64_t offset = (uint64_t)a->offset;
        if (offset > r->bytes || bytes > r->bytes - offset)
            return kd_err_set(err, KD_EBADREQ,
                              "%s: offset = %llu + bytes = %llu is past the end of region %lld "
                              "(%zu bytes)",
                              field, (unsigned long long)offset, (unsigned long long)bytes,
                              (long long)r->id, r->bytes);
        const char *data = (const char *)r->base + offset;
        if (req->method == KD_METHOD_MATRIX_PUT) {
            /* kept: the worker copies it once before anything reads it (kd_handlers_run), no
             * more than a bin of values could bring (the framer's limit); the copy is charged
             * to client memory as the request's (kd_climem_job_bytes) */
            size_t max = conn->server->frame_limits.max_message;
            if (max == 0)
                max = KD_FRAME_DEFAULT_MAX_MESSAGE;
            if (bytes > max)
                return kd_err_set(err, KD_ETOOLARGE,
                                  "%s: %llu bytes from region %lld are over the limit of %zu bytes "
                                  "a message may carry (--max-message)",
                                  field, (unsigned long long)bytes, (long long)r->id, max);
        }
        int rc = kd_shm_hold(job, r, err);
        if (rc != KD_OK)
            return rc;
        a->data = data;
    }
    return KD_OK;
}

void kd_shm_job_release(kd_job_t *job)
{
    for (int i = 0; i < job->nregions; i++)
        kd_shm_unref(job->regions[i]);
    free(job->regions);
    job->regions = NULL;
    job->nregions = 0;
}
