/*
 * Shared-memory regions (issue 35), on the loop thread. A client on the Unix socket registers a
 * sealed memfd once (shm.register: the descriptor comes with the request, SCM_RIGHTS, and
 * net/conn.c keeps it in conn->fds); requests then name bytes of the region ({"shm": id,
 * "offset": o, "bytes": n}) instead of carrying them, and results can be written into one (`out`).
 * A region is its connection's: other connections cannot name it, and it is unmapped when its
 * connection closes or unregisters it, but never while a job that reads or writes it is in flight
 * (each job holds a reference, kd_shm_resolve .. kd_shm_job_release).
 */
#ifndef KD_SERVER_DISPATCH_SHM_H
#define KD_SERVER_DISPATCH_SHM_H

#include "protocol/writer.h"
#include "server/server.h"

#include <sys/types.h>

#define KD_SHM_REGIONS_MAX 64 /* regions one connection may hold */

typedef struct kd_shm_region {
    struct kd_shm_region *next;                /* its connection's list, while registered */
    struct kd_shm_region *all_prev, *all_next; /* the server's list, while mapped */
    int64_t id;                                /* unique on the server; never 0 */
    void *base;                                /* mmap'd MAP_SHARED, bytes long */
    size_t bytes;
    dev_t dev; /* the memfd's identity: a connection registers a memfd once (kd_shm_register) */
    ino_t ino;
    int refs; /* the connection's (until unregistered or closed) + one per job using it */
    kd_server_t *server;
    char user[KD_AUTH_NAME_MAX]; /* who registered it: the per-user limit counts it while mapped */
} kd_shm_region_t;

/* The descriptor that came with the message conn is dispatching (the first that arrived in the
 * read holding its first byte, conn->msg_start), now the caller's to close; -1 when none did. */
int kd_shm_claim_fd(kd_conn_t *conn);
/* shm.register (fd: the descriptor that came with it, or -1; closed here whatever the outcome)
 * and shm.unregister: KD_OK with the result in w, or an error in err. */
int kd_shm_register(kd_conn_t *conn, const kd_request_t *req, int fd, kd_writer_t *w,
                    kd_err_t *err);
int kd_shm_unregister(kd_conn_t *conn, const kd_request_t *req, kd_writer_t *w, kd_err_t *err);

/* Point every region reference of job's request at its bytes, after checking that the region is
 * conn's and holds them (that `out` is the result's size and shares no byte with an input is the
 * handlers' check, kd_handlers_check_out). The job takes a reference on each
 * region it names (a matrix.put's values are copied instead, at most --max-message bytes as a bin
 * would be: a stored matrix must stay what its id says). KD_OK or an error in err (the field
 * named); on error the references taken are dropped by kd_shm_job_release. */
int kd_shm_resolve(kd_conn_t *conn, kd_job_t *job, kd_err_t *err);
/* Drop the job's references (the job is being freed). */
void kd_shm_job_release(kd_job_t *job);
/* conn is closing: its regions go, each once the last job using it is done. */
void kd_shm_conn_closed(kd_conn_t *conn);

#endif
