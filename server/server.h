/*
 * The krylovd server: one libuv loop thread that owns every socket, a device worker thread that
 * owns the OpenCL device, and the matrix store between them. net/server.c accepts connections and
 * handles signals, connection timeouts and shutdown; net/conn.c reads, frames and writes one
 * client's bytes; dispatch/dispatch.c turns decoded requests into immediate answers or jobs;
 * handlers/run.c runs jobs on the worker; store/cache.c and store/state.c keep matrices within the
 * device budget and on disk. Calls go one way, net/ -> dispatch/ -> handlers/ -> store/; the
 * struct fields below are shared by all.
 */
#ifndef KD_SERVER_SERVER_H
#define KD_SERVER_SERVER_H

#include "protocol/frame.h"
#include "protocol/request.h"
#include "server/auth.h"
#include "server/store/cache.h"
#include "server/config.h"
#include "server/job.h"
#include "server/stats.h"
#include "server/store/state.h"
#include "server/store/store.h"
#include "server/trim.h"
#include "server/worker.h"
#include <stdatomic.h>
#include "solver/runtime/ocl.h"
#include "solver/runtime/programs.h"
#include "solver/direct/direct.h"

#include <uv.h>

typedef struct kd_conn kd_conn_t;

#define KD_CONN_FDS_MAX 4 /* file descriptors a connection may have waiting to be claimed */
/* ... and the whole server (at most; less when RLIMIT_NOFILE is low: net/conn.c) */
#define KD_SERVER_FDS_MAX 256

/* A file descriptor received on the Unix socket (SCM_RIGHTS), and the stream bytes it came with:
 * the read [start, end) of the connection's byte stream. The kernel attaches a descriptor to the
 * first byte of the sendmsg that carried it, so the message it came with begins in that range. */
typedef struct kd_conn_fd {
    int fd;
    uint64_t start, end;
} kd_conn_fd_t;

#define KD_SERVER_WORKER_SPIN_NS 50000u /* on a GPU: kd_worker_set_spin */
#define KD_SERVER_LOOP_SPIN_NS 100000u  /* on a GPU: the loop polls this long after a wake-up */
#define KD_SERVER_POOL_BYTES ((size_t)32 << 20)
#define KD_SERVER_POOL_ITEM_BYTES ((size_t)4 << 20)

typedef struct kd_server_counters {
    uint64_t requests;
    uint64_t errors;
    uint64_t by_method[KD_METHOD_COUNT];
    uint64_t errors_by_code[KD_ERROR_COUNT]; /* index: -code */
    uint64_t connections_total;
    uint64_t connections_refused; /* over --max-connections, or during shutdown */
    uint64_t connections_idle;    /* closed by --idle-timeout-ms */
    uint64_t connections_slow;    /* closed by --message-timeout-ms */
    uint64_t timeouts_queued;     /* TIMEOUT answered by the loop while the request waited */
    uint64_t auth_ok;             /* `auth` requests that succeeded */
    uint64_t auth_failures;       /* ... that failed (wrong name or token) */
    uint64_t connections_auth;    /* closed after KD_LOGIN_MAX_FAILURES failed `auth`s */
} kd_server_counters_t;

/* Why a connection was closed to bound memory (evictions, counted per reason). */
typedef enum kd_evict_reason {
    KD_EVICT_CLIENT_MEMORY = 0, /* all clients together held more than --client-memory */
    KD_EVICT_REASONS
} kd_evict_reason_t;
const char *kd_evict_reason_name(kd_evict_reason_t reason); /* "client_memory" */

/* Every byte the connections hold (climem.c), on the loop thread. */
typedef struct kd_client_mem {
    size_t cap;       /* --client-memory, resolved */
    size_t share;     /* --connection-memory, resolved: in flight per connection before a pause */
    size_t used;      /* held now by every connection, closing ones included */
    size_t closing;   /* ... of which by closing connections (jobs the worker still runs) */
    size_t peak;      /* the most `used` has been */
    size_t open_peak; /* the most open connections have held (at most the cap plus one read's or
                         one request's bytes, counted just before the eviction they cause) */
    uint64_t evictions[KD_EVICT_REASONS];
    uint64_t pauses; /* times a connection's reading paused for its share */
    int evicting;    /* kd_climem_evict is closing connections */
} kd_client_mem_t;

/* Failed `auth`s per client address, to slow down guessing (login.c). A small table: when
 * full, the entry failed longest ago goes. */
#define KD_LOGIN_BACKOFF_SLOTS 64
typedef struct kd_login_backoff {
    char key[64]; /* the peer's IP address, or "uid:N" on the Unix socket; "" = free */
    uint32_t failures;
    uint64_t last_ns;
} kd_login_backoff_t;

typedef struct kd_server {
    /* How the lower layers reach the upper ones, set by kd_server_init: dispatch/ asks net/ to
     * answer and pace connections (dispatch/dispatch.h), the cache asks the spread matrices'
     * code to re-spread or forget one (store/cache.h). */
    const struct kd_dispatch_net *net;
    const struct kd_cache_spread *spread;
    uv_loop_t *loop;
    kd_config_t cfg;
    uv_tcp_t listener;
    int listening;
    uv_pipe_t unix_listener; /* --listen unix:PATH */
    int unix_listening;
    int unix_passed; /* the Unix socket is systemd's (socket activation): its file is left alone */
    kd_auth_table_t *auth; /* --auth-file, or NULL: everyone is the anonymous admin */
    kd_login_backoff_t backoff[KD_LOGIN_BACKOFF_SLOTS];
    uv_signal_t sigint, sigterm, sighup;
    uv_timer_t grace_timer;
    uv_timer_t sweep_timer; /* idle and slow-message connections */
    kd_ocl_t *ocl;
    struct kd_dist_node *dist; /* under mpirun with several ranks: this rank 0's command channel
                                  (dist/follow.h; worker thread only), else NULL */
    kd_worker_t *worker;
    kd_store_t *store;
    kd_state_t *state;                 /* NULL without --state-dir */
    struct kd_program_cache *programs; /* --cache-dir, or NULL */
    kd_programs_warmup_t *warmup;      /* the background program warm-up, or NULL (none) */
    uv_async_t warm_async;             /* its threads wake the loop with progress (warm.c) */
    int warm_async_open;
    int warm_finished;                   /* its end was logged and its waiters answered */
    uint64_t warm_logged_ns;             /* the last progress line */
    struct kd_warm_waiter *warm_waiters; /* server.status requests with wait_warm */
    char ready_status[160];              /* systemd's STATUS= once listening */
    size_t device_budget;                /* bytes of device memory matrices and vectors may use */
    kd_direct_budget_t factor_budget; /* host bytes of method direct's factors (--factor-memory) */
    int budget_refused;     /* worker: the last KD_EDEVMEM came from the budget, not the driver */
    int budget_wait;        /* worker: ... and would fit once requests in flight end (cache.c) */
    atomic_int mem_waiting; /* requests waiting for device memory (kd_cache_wait_begin/end) */
    int has_like_recent;    /* worker: like_recent names the entry holding `recent` (store.h) */
    uint8_t like_recent[16];
    /* the writer thread of persist "behind" (server/store/writer.h; NULL without a state dir) */
    struct kd_writer *writer;
    struct kd_pool *pool; /* worker: small request vectors kept for reuse (solver/runtime/pool.h):
                             at most KD_SERVER_POOL_BYTES, none over KD_SERVER_POOL_ITEM_BYTES */
    int spmv_alone;       /* worker: > 0 while spmv must not take more jobs (spmv.c) */
    int solve_alone;      /* worker: > 0 while solve must not take more jobs (solve_job.c) */
    int direct_serving;   /* worker: > 0 while a direct solve's wait runs another solve
                             (handlers/direct.c): that one serves no further solves */
    atomic_uint_fast64_t solves_batched;   /* solve requests that ran in a batch of several */
    struct {                               /* worker writes, the loop's status and metrics read */
        atomic_uint_fast64_t grouped;      /* spmv requests served in a group of several */
        atomic_uint_fast64_t batched;      /* ... sharing their SpMM launch with another */
        atomic_uint_fast64_t launches;     /* SpMM launches of the spmv path */
        atomic_uint_fast64_t beside_solve; /* spmv requests served at a solve's check */
    } spmv_stats;
    kd_conn_t *conns; /* doubly linked list of open connections */
    size_t nconns;
    uint64_t next_conn_id;
    size_t jobs_in_flight;
    int shutting_down;
    int finishing; /* every job is done: connections and the worker are closing */
    int exit_code;
    uint64_t start_ns;
    kd_server_counters_t counters;
    kd_client_mem_t climem;
    int64_t next_shm_id; /* the last shared-memory region's id (dispatch/shm.c) */
    size_t shm_mapped;   /* bytes of regions mapped now, unregistered ones still in use included */
    size_t shm_regions;  /* ... and their count */
    struct kd_shm_region *shm_all; /* every region mapped now, for the per-user limit (shm.c) */
    size_t fds_held;        /* received descriptors waiting on every connection (net/conn.c) */
    size_t fds_max;         /* ... at most: KD_SERVER_FDS_MAX, less under a low RLIMIT_NOFILE */
    uint64_t fds_logged_ns; /* the last line about descriptors closed unclaimed (rate limit) */
    uv_timer_t trim_timer;  /* --memory-trim-ms: memory back to the system when idle (trim.c) */
    int trim_timer_open;
    uint64_t trim_seen_requests; /* counters.requests at the last tick */
    kd_trim_stats_t trim;
    kd_latency_t latency[KD_METHOD_COUNT]; /* per method, loop thread */
    struct kd_metrics *metrics;            /* --metrics, or NULL */
    uv_timer_t watchdog;                   /* systemd WatchdogSec= pings */
    kd_frame_limits_t frame_limits;
    kd_proto_limits_t proto_limits;
    kd_csr_limits_t csr_limits;
    struct kd_tls_ctx *tls;    /* --tls-cert: the listener speaks TLS; NULL = plaintext */
    char tls_inbuf[64 * 1024]; /* ciphertext from one read, decrypted before the next (loop) */
} kd_server_t;

struct kd_conn {
    union { /* the stream; which one is is_unix's */
        uv_tcp_t tcp;
        uv_pipe_t pipe;
    };
    uv_timer_t linger; /* bounds how long a closing connection waits to flush */
    kd_server_t *server;
    kd_conn_t *prev, *next;
    kd_frame_t *frame;
    uint64_t id;
    int refs;        /* its two handles + each write and job in flight */
    int closing;     /* uv_close requested: nothing more is sent */
    int read_paused; /* too many unread response bytes, or in flight over its share (climem.c) */
    size_t write_pending;
    size_t mem;      /* bytes counted against --client-memory now (kd_climem_account) */
    size_t mem_jobs; /* ... of which its jobs in flight (their kd_climem_job_bytes) */
    kd_job_t *jobs;  /* in flight, for job.cancel and disconnects */
    size_t njobs;
    size_t warm_waits;         /* server.status requests waiting for the warm-up (warm.c) */
    uint64_t last_activity_ns; /* bytes read or written, or a job finished */
    uint64_t message_start_ns; /* the message being received began arriving; 0 = none */
    char peer[64];
    char peer_key[64]; /* the peer's IP address or "uid:N": its backoff entry's key */
    int is_unix;
    int has_peer_uid; /* Unix socket: SO_PEERCRED gave peer_uid */
    uint32_t peer_uid;
    kd_user_t user;             /* who it is (role KD_ROLE_NONE until `auth`); no digest kept */
    int auth_failures;          /* failed `auth`s on this connection */
    struct kd_login_hold *hold; /* a failed `auth`'s answer held back (reading stops meanwhile) */
    struct kd_tls *tls; /* TCP on a TLS listener: this connection's session (freed with conn) */
    int first_byte;     /* the first byte received (0x16 opens a TLS handshake), -1 before it */
    /* Unix socket: file descriptors that came with its bytes (SCM_RIGHTS), oldest first, for an
     * shm.register to claim (kd_shm_claim_fd); net/conn.c closes those left unclaimed once the
     * message they came with was dispatched. */
    kd_conn_fd_t fds[KD_CONN_FDS_MAX];
    int nfds;
    uint64_t bytes_in;  /* bytes of the stream read so far */
    uint64_t msg_start; /* the message being dispatched begins at this byte of the stream */
    struct kd_shm_region *regions; /* registered (dispatch/shm.c) */
    size_t shm_bytes;              /* ... their bytes */
};

/* Programs a request had built for it (it met one neither built nor being built). */
uint64_t kd_server_programs_built_on_request(const kd_server_t *server);

/* warm.c: the background program warm-up. _open_cache before the worker starts (the program
 * cache in --cache-dir; the old STATE_DIR/programs is cleared); _start once listening; _wait
 * answers a server.status with wait_warm (at once when the warm-up is done or off, else at its
 * end or after the request's timeout_ms, TIMEOUT); _shutdown stops taking programs and answers
 * the waiters CANCELLED; _close waits for builds under way (before the device closes). */
void kd_warm_open_cache(kd_server_t *server);
void kd_warm_start(kd_server_t *server);
int kd_warm_done(kd_server_t *server);
void kd_warm_wait(kd_conn_t *conn, const kd_request_t *req);
void kd_warm_shutdown(kd_server_t *server);
void kd_warm_close(kd_server_t *server);

/* Set up everything (device, store, worker, listener, signals). */
int kd_server_init(kd_server_t *server, uv_loop_t *loop, const kd_config_t *cfg, kd_err_t *err);
/* Run until shutdown; returns the exit code. */
int kd_server_run(kd_server_t *server);
/* Begin a graceful shutdown (signals call this). */
void kd_server_shutdown(kd_server_t *server);

/* "127.0.0.1:7373", "[::1]:7373", "localhost:7373" -> a socket address; `what` names the option
 * in messages. */
int kd_server_parse_address(const char *text, struct sockaddr_storage *addr, const char *what,
                            kd_err_t *err);

/* conn.c: accept on the TCP listener, or on the Unix-socket one when is_unix. */
void kd_conn_accept(kd_server_t *server, int is_unix);
/* conn.c: read again after a pause of ours, unless another reason to pause remains. */
void kd_conn_resume_reading(kd_conn_t *conn);
/* Queue bytes (malloc'd; ownership passes) to the client; dropped if the connection is closing. */
void kd_conn_send(kd_conn_t *conn, void *bytes, size_t len);
/* The same for one message in two malloc'd parts (a response and its tail, protocol/writer.h),
 * written one after the other without joining them; tail may be NULL. */
void kd_conn_send_parts(kd_conn_t *conn, void *bytes, size_t len, void *tail, size_t tail_len);
void kd_conn_send_error(kd_conn_t *conn, uint64_t msgid, int code, const char *message);
void kd_conn_close(kd_conn_t *conn);
void kd_conn_unref(kd_conn_t *conn);

/* conn.c: close now, dropping unsent responses (no linger): an eviction frees its memory. */
void kd_conn_abort(kd_conn_t *conn);

/*
 * climem.c: client memory. Each connection counts its struct, its framer's buffer, its jobs in
 * flight (kd_climem_job_bytes each: the decoded request and an estimate of what answering it
 * holds) and its queued responses. kd_climem_account recounts one connection after any of those
 * changed; it pauses the connection's reading while its jobs and responses exceed the share (and
 * resumes it at half, reading and dispatching what waits), and when all open connections
 * together exceed the cap it closes the largest ones (kd_conn_abort) until they fit, conn itself
 * perhaps: callers check conn->closing after it. Loop thread only.
 */
int kd_climem_init(kd_server_t *server, kd_err_t *err);
void kd_climem_account(kd_conn_t *conn);
/* A new connection: its struct is counted (it holds nothing else yet; nothing is evicted). */
void kd_climem_conn_opened(kd_conn_t *conn);
/* conn is closing: its bytes move to `closing` (they go when its jobs finish). */
void kd_climem_conn_closing(kd_conn_t *conn);
/* conn is being freed: its last bytes leave the count. */
void kd_climem_conn_freed(kd_conn_t *conn);
/* What a job for req holds while in flight: the decoded request and, for the methods that answer
 * with vectors, the result's host buffer and its encoded response. */
size_t kd_climem_job_bytes(kd_server_t *server, const kd_request_t *req);

/* hostmem.c: resolve --client-memory's and (on a CPU device) the device budget's defaults, then
 * refuse a configuration whose worst-case host memory exceeds the machine's RAM
 * (docs/OPERATIONS.md, "Host memory"). After the device is open, before the cache. */
int kd_hostmem_check(kd_server_t *server, kd_err_t *err);

/* How much of a matrix's metadata a reply to a user shows (store.h, kd_meta_view): with an auth
 * file (tenants) a user that is not an admin sees only its own figures. */
static inline kd_meta_scope_t kd_server_meta_scope(const kd_server_t *server, int admin)
{
    return server->cfg.auth_file[0] != '\0' && !admin ? KD_META_OWN : KD_META_ALL;
}

/* With an auth file and --tenant-dedupe off: the user whose own copy content put now becomes
 * (store.h, kd_id_mix_tenant); NULL: the content is stored once for every user. */
static inline const char *kd_server_tenant(const kd_server_t *server, const char *user)
{
    return server->cfg.auth_file[0] != '\0' && !server->cfg.tenant_dedupe ? user : NULL;
}

/* dispatch.c: count an error answer (errors, errors_by_code). */
void kd_server_count_error(kd_server_t *server, int code);
/* dispatch.c: one decoded request from conn (ownership of req passes). */
void kd_dispatch_request(kd_conn_t *conn, kd_request_t *req);
/* dispatch.c: worker callbacks (loop thread). */
void kd_dispatch_job_done(void *ctx, kd_job_t *job);
/* dispatch.c: take every queued job of conn (of every connection when conn is NULL) out of the
 * worker's queue and answer it with code on the loop thread; running jobs get their cancel flag
 * set to code instead, when cancel_running. */
void kd_dispatch_stop_jobs(kd_server_t *server, kd_conn_t *conn, int code, const char *message,
                           int cancel_running);
/* Loop thread: requests queued or running for user, over all its connections (max_jobs;
 * dispatch/status.c). */
size_t kd_dispatch_user_jobs(const kd_server_t *server, const char *user);

void kd_dispatch_job_notify(void *ctx, kd_job_t *job, void *bytes, size_t len);

/* conn.c: close connections that are idle or slow to send a message (the sweep timer). */
void kd_conn_sweep(kd_server_t *server, uint64_t now);

/* login.c: a new connection's identity (anonymous admin without an auth file; the uid line's
 * user on the Unix socket). */
void kd_login_accepted(kd_conn_t *conn);
/* login.c: 0 when conn may call req's method. 1 when req was answered here: `auth` itself, or
 * an UNAUTHENTICATED / FORBIDDEN error (counted); the caller then only frees req. */
int kd_login_check(kd_conn_t *conn, kd_request_t *req);
/* login.c: the connection is closing: drop a held answer. */
void kd_login_conn_closed(kd_conn_t *conn);
/* login.c: (re)read --auth-file; on error the old table stays and the error is returned. */
int kd_login_load(kd_server_t *server, kd_err_t *err);

/* handlers/run.c: the worker's run callback, on the worker thread. */
void kd_handlers_run(void *ctx, kd_job_t *job);

#endif
