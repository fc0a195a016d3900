/*
 * A job: one decoded request on its way through a device worker. Created and destroyed on the
 * loop thread; while queued or running, the worker thread reads the request and writes the
 * response. The cancel flag is the only field both threads touch at once. A job that is still
 * queued can also be taken back out of the queue by the loop thread (timeout, job.cancel, its
 * client leaving, shutdown) and answered there without the worker ever seeing it.
 */
#ifndef KD_SERVER_JOB_H
#define KD_SERVER_JOB_H

#include "protocol/request.h"
#include "server/auth.h"

#include <uv.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct kd_conn;

typedef struct kd_job {
    struct kd_job *queue_next;            /* worker queue or completion list */
    struct kd_job *conn_prev, *conn_next; /* the connection's jobs in flight (loop thread) */
    struct kd_conn *conn;                 /* holds a reference (loop thread) */
    kd_request_t *req;                    /* owned */
    uint64_t msgid;
    /* Who asked, copied at submission (a later `auth` on the connection may change it): the
     * user, whether it may act on every user's matrices, and its limits (all 0: none). */
    char user[KD_AUTH_NAME_MAX];
    int admin;
    kd_quota_t quota;
    uint64_t submitted_ns;
    uint64_t deadline_ns; /* CLOCK_MONOTONIC, 0 = none */
    atomic_int cancel;    /* 0, or the KD_E* code to stop with (KD_ECANCELLED, KD_ETIMEOUT) */
    void *response;       /* encoded response, malloc'd (worker writes, loop sends) */
    size_t response_len;
    void *response_tail; /* its last bin's payload, sent after it uncopied (kd_w_kv_bin_tail) */
    size_t response_tail_len;
    int error_code;            /* KD_OK or the error the response carries, for counters */
    uv_timer_t deadline_timer; /* loop thread: answers TIMEOUT if it fires while still queued */
    int has_timer;             /* deadline_timer was initialised (then freed in its close cb) */
    size_t mem_bytes;          /* counted in its connection's client memory (loop thread) */
    /* Worker thread (the loop reads it once the job is out of the queue): when it began waiting
     * for device memory that requests in flight hold (server/handlers/spmv.c), 0 = it does not
     * wait. */
    uint64_t mem_wait_ns;
    /* The shared-memory regions its request reads or writes, one reference each (loop thread:
     * taken at dispatch, dropped when the job is freed; dispatch/shm.c). */
    struct kd_shm_region **regions;
    int nregions;
} kd_job_t;

#endif
