/*
 * libkrylov: the C client for krylovd.
 *
 *   krylov_client_t *c = krylov_client_new();
 *   if (krylov_connect(c, "127.0.0.1:7373") != KRYLOV_OK) { puts(krylov_error_message(c)); ... }
 *   krylov_matrix_info_t info;
 *   krylov_put_file(c, "A.mtx", NULL, &info);           // info.id names the matrix from now on
 *   krylov_solve_options_t opt;
 *   krylov_solve_options_init(&opt);                     // cg, rtol 1e-8
 *   krylov_solve_result_t res;
 *   krylov_solve(c, info.id, b, n, &opt, x, &res);       // res.status: "converged", ...
 *   krylov_solve_result_free(&res);
 *   krylov_client_free(c);
 *
 * Every call is synchronous on one connection; a client is not shared between threads. Calls
 * return KRYLOV_OK (0) or a negative code; krylov_error_code() gives the server's wire code
 * ("NOT_FOUND", ...) or "CONNECTION" for transport failures, and krylov_error_message() the text.
 */
#ifndef KRYLOV_H
#define KRYLOV_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    KRYLOV_OK = 0,
    KRYLOV_EBADREQ = -1,
    KRYLOV_ENOTFOUND = -2,
    KRYLOV_ETOOLARGE = -3,
    KRYLOV_EDEVMEM = -4,
    KRYLOV_EBUSY = -5,
    KRYLOV_ECANCELLED = -6,
    KRYLOV_ETIMEOUT = -7,
    KRYLOV_EUNSUPPORTED = -8,
    KRYLOV_EDEVICE = -9,
    KRYLOV_ENOMEM = -10,
    KRYLOV_EIO = -11,
    KRYLOV_EPROTO = -12,
    KRYLOV_EINTERNAL = -13,
    KRYLOV_ENOTSPD = -14,
    KRYLOV_EUNAUTH = -15,     /* UNAUTHENTICATED: `auth` first (or the user was removed) */
    KRYLOV_EFORBIDDEN = -16,  /* FORBIDDEN: the user's role may not do this */
    KRYLOV_EQUOTA = -17,      /* QUOTA: over one of the user's limits; nothing was done */
    KRYLOV_ESTORAGE = -18,    /* STORAGE_FULL: the server's disk is full; nothing was stored */
    KRYLOV_ECONNECTION = -20, /* cannot connect, or the connection broke */
};

typedef struct krylov_client krylov_client_t;

krylov_client_t *krylov_client_new(void);    /* NULL only when out of memory */
void krylov_client_free(krylov_client_t *c); /* closes the connection; accepts NULL */

/* "host:port" (port defaults to 7373; "[::1]:7373" for IPv6), or "unix:PATH" for the server's
 * Unix socket (where the server may know the user from the process's uid, without a token). */
int krylov_connect(krylov_client_t *c, const char *address);

/*
 * Authenticate the connection as user `name` with its secret token (a server with an auth file
 * answers UNAUTHENTICATED to anything else first). On success the server's name and role
 * ("read", "write" or "admin") are copied into role[role_cap] when role is not NULL. A server
 * without an auth file accepts any name as its anonymous admin. Three failures on one
 * connection close it.
 */
int krylov_auth(krylov_client_t *c, const char *name, const char *token, char *role,
                size_t role_cap);
void krylov_close(krylov_client_t *c);

/* TLS, for a server started with --tls-cert. The server's certificate must be signed by cafile
 * (NULL: the system's trust store) and name the host or IP address given to krylov_connect. */
typedef struct krylov_tls_options {
    const char *cafile;   /* PEM CA certificate(s); NULL: the system's */
    const char *certfile; /* this client's PEM certificate, for a server with --tls-ca; or NULL */
    const char *keyfile;  /* its PEM key; NULL: in certfile */
} krylov_tls_options_t;

/* Use TLS from the next krylov_connect on (the strings are copied; the files are read there, and
 * a bad one is its error); NULL: plaintext. KRYLOV_OK or KRYLOV_ENOMEM. */
int krylov_set_tls(krylov_client_t *c, const krylov_tls_options_t *opt);

/* Give up on a call after this long without progress (0 = wait forever, the default). */
void krylov_set_timeout(krylov_client_t *c, int timeout_ms);

/*
 * Called while a request is being written to the socket: `sent` of `total` bytes so far (the
 * request's msgpack encoding, so slightly more than its arrays). The server acts on a request
 * only once all of it has arrived, so for an upload this is the upload's progress; the wait for
 * the answer comes after sent == total. Called at least once per request (sent == total last);
 * NULL (the default) turns it off.
 */
typedef void (*krylov_send_progress_fn)(void *ctx, uint64_t sent, uint64_t total);
void krylov_set_send_progress(krylov_client_t *c, krylov_send_progress_fn fn, void *ctx);

/*
 * Shared memory (docs/PROTOCOL.md, "Shared memory"). Connected through "unix:PATH", the client
 * passes large arrays (256 KiB or more in a request: spmv's x and y, solve's b, x0 and x,
 * solve_many's b and x0, the values of krylov_put_csr / _coo / _like) through a memory region it shares with the server
 * instead of the socket: each array is copied once into a region the client keeps (registered
 * once, reused, grown when a request needs more) and the server writes the result there. Nothing
 * to ask for: over TCP, or when the server refuses (an old server, --max-shm-bytes 0), arrays go
 * in the messages as before, quietly; a request the server has no room for goes so too.
 *
 * krylov_shm_enabled: 1 while this connection uses shared memory for large arrays (a Unix socket,
 * not turned off, not refused by the server). krylov_shm_set(c, 0) turns it off for this client
 * (the region is given back), 1 on again (the default). krylov_shm_requests: requests whose
 * arrays went through shared memory so far (for tests and curiosity).
 */
int krylov_shm_enabled(const krylov_client_t *c);
void krylov_shm_set(krylov_client_t *c, int on);
int64_t krylov_shm_requests(const krylov_client_t *c);
/*
 * Memory for arrays that need no copy at all: an array that lies inside a block from
 * krylov_shm_alloc (x, y, b, x0, x or float64 values, anywhere in it) is named where it lies, of
 * any size, and a result array inside one (spmv's y when beta == 0, solve's x) is written there
 * by the server directly, unless it overlaps an input of the same request. The block is a memfd
 * of `bytes` (rounded up to pages), mapped here and registered on the connection when first
 * used; it stays valid across reconnects until krylov_shm_free() or krylov_client_free(). It is
 * ordinary memory otherwise (over TCP its arrays simply travel as bins). NULL when out of memory
 * or when 16 blocks are held already (krylov_error_message says). Do not change a block's bytes
 * from another thread while a call that uses them runs.
 */
void *krylov_shm_alloc(krylov_client_t *c, size_t bytes);
/* Give a block back (the server's mapping goes too); NULL is fine; KRYLOV_EBADREQ for a pointer
 * krylov_shm_alloc did not return. */
int krylov_shm_free(krylov_client_t *c, void *block);

const char *krylov_error_code(const krylov_client_t *c);    /* "" after success */
const char *krylov_error_message(const krylov_client_t *c); /* "" after success */

#define KRYLOV_MAX_CANDIDATES 16

/* A format the server considered at upload: timed (time_ms >= 0) or dropped (reason in dropped). */
typedef struct krylov_format_candidate {
    char format[32];
    double time_ms; /* -1 when dropped */
    char dropped[96];
} krylov_format_candidate_t;

typedef struct krylov_matrix_info {
    char id[33];
    char name[128];
    int64_t rows, cols, nnz;
    char dtype[16];
    char format[32];
    int64_t device_bytes;
    int pinned;
    int created; /* matrix.put: 1 when this call stored it, 0 when it was already there */
    int64_t min_row, max_row, empty_rows;
    double mean_row;
    int resident;      /* in device memory now */
    int64_t uses;      /* requests that used it since upload or restart */
    double stddev_row; /* of the row lengths */
    int64_t nonfinite; /* values that are NaN or infinite */
    int ncandidates;   /* the first KRYLOV_MAX_CANDIDATES formats considered at upload */
    krylov_format_candidate_t candidates[KRYLOV_MAX_CANDIDATES];
    char reorder[16];                          /* the ordering kept inside: none, rcm, metis */
    int64_t bandwidth_before, bandwidth_after; /* max |i - j| of A, and of what is stored */
    int symmetric;  /* 1: square and a_ij == a_ji exactly; 0: not; -1: the server does not know */
    double time_ms; /* matrix.put: the put on the server (its reply's time_ms); -1 elsewhere, or
                       from a server that does not say */
} krylov_matrix_info_t;

typedef struct krylov_put_options {
    const char *name;    /* NULL: none */
    const char *format;  /* NULL: the server chooses */
    const char *dtype;   /* "float64" (default) or "float32": the precision the matrix is kept in */
    int pin;             /* keep resident */
    const char *reorder; /* NULL: the server chooses ("auto"); "none", "rcm", "metis" */
} krylov_put_options_t;

int krylov_put_csr(krylov_client_t *c, int64_t rows, int64_t cols, const int32_t *indptr,
                   const int32_t *indices, const double *values, const krylov_put_options_t *opt,
                   krylov_matrix_info_t *info);
int krylov_put_coo(krylov_client_t *c, int64_t rows, int64_t cols, int64_t nnz, const int32_t *row,
                   const int32_t *col, const double *values, const krylov_put_options_t *opt,
                   krylov_matrix_info_t *info);
/*
 * New values on a held matrix's pattern (docs/PROTOCOL.md, "New values on a held pattern"):
 * rows x cols in canonical CSR (columns strictly increasing in each row, duplicates summed: what
 * the server keeps) with like_id's pattern; only the values (and the pattern's hash, computed
 * here, which the server checks) are sent. The new matrix is kept as like_id is: opt's format and
 * reorder must be NULL (KRYLOV_EBADREQ); name, dtype and pin apply. The client keeps a copy of
 * the last pattern it hashed (rows + 1 + nnz int32, freed with the client), so a loop of puts on
 * one pattern compares memory rather than hashing it again.
 */
int krylov_put_like(krylov_client_t *c, const char *like_id, int64_t rows, int64_t cols,
                    const int32_t *indptr, const int32_t *indices, const double *values,
                    const krylov_put_options_t *opt, krylov_matrix_info_t *info);
/* Matrix Market text; the server parses it. */
int krylov_put_mtx(krylov_client_t *c, const char *text, size_t len,
                   const krylov_put_options_t *opt, krylov_matrix_info_t *info);
/* A .mtx or .mtx.gz file, sent as Matrix Market text. */
int krylov_put_file(krylov_client_t *c, const char *path, const krylov_put_options_t *opt,
                    krylov_matrix_info_t *info);

typedef struct krylov_multiply_options {
    int transpose_a;     /* multiply A^T B instead of A B */
    const char *name;    /* NULL: none */
    const char *format;  /* NULL: the server chooses */
    int pin;             /* keep resident */
    const char *reorder; /* NULL: the server chooses ("auto"); "none", "rcm", "metis" */
} krylov_multiply_options_t;

/* What the product cost on the server. */
typedef struct krylov_multiply_stats {
    int64_t products; /* the products of entries summed: over A's entries, B's row lengths */
    int64_t nnz;      /* C's entries (explicit zeros included: C's pattern is the symbolic one) */
    double time_ms;   /* the product on the server: operands read, transfers included */
} krylov_multiply_stats_t;

/* C = A B (A^T B with opt->transpose_a) of two matrices on the server, kept there as a new matrix
 * like an upload; info gets C's info (info->created 0 when the same matrix was already there).
 * opt and stats may be NULL. */
int krylov_multiply(krylov_client_t *c, const char *a, const char *b,
                    const krylov_multiply_options_t *opt, krylov_matrix_info_t *info,
                    krylov_multiply_stats_t *stats);

int krylov_info(krylov_client_t *c, const char *id, krylov_matrix_info_t *info);
/* *infos is malloc'd (free() it). */
int krylov_list(krylov_client_t *c, krylov_matrix_info_t **infos, size_t *count);
int krylov_drop(krylov_client_t *c, const char *id);
int krylov_pin(krylov_client_t *c, const char *id, int pinned);

/* y = alpha * A * x + beta * y (y is read only when beta != 0). nx = cols, ny = rows. The answer
 * is received straight into y, so a connection lost on the way may leave y partly written (as
 * krylov_solve's x). */
int krylov_spmv(krylov_client_t *c, const char *id, double alpha, const double *x, int64_t nx,
                double beta, double *y, int64_t ny);
/* krylov_spmv, also giving the server's time for the request in *server_ms (copying x to the
 * device and y back included; the network and encoding not). server_ms may be NULL. */
int krylov_spmv_timed(krylov_client_t *c, const char *id, double alpha, const double *x, int64_t nx,
                      double beta, double *y, int64_t ny, double *server_ms);
/* Y = alpha * A * X + beta * Y for k columns at once (column-major: x holds k columns of nx =
 * cols values, y k columns of ny = rows; one launch on the server where the matrix's format has
 * an SpMM kernel). k = 1 is krylov_spmv_timed. server_ms may be NULL. */
int krylov_spmm(krylov_client_t *c, const char *id, int64_t k, double alpha, const double *x,
                int64_t nx, double beta, double *y, int64_t ny, double *server_ms);

typedef void (*krylov_progress_fn)(void *ctx, int64_t rhs, int64_t iteration, double residual);

typedef struct krylov_solve_options {
    /* "cg" (default), "pcg" (cg + jacobi), "auto" (the server picks from the matrix: cg, minres
     * or gmres), or any method of the server's table ("sd", "cg1", "gmres", "bicgstab",
     * "minres", ...: server.status lists them) */
    const char *method;
    double rtol;                 /* default 1e-8 */
    double atol;                 /* default 0 */
    int64_t maxiter;             /* -1 (default): the server's default, 10 * rows */
    int64_t nrhs;                /* right-hand sides in b (column-major), default 1 */
    int64_t check_every;         /* 0 (default): the server chooses */
    const double *x0;            /* NULL: zero */
    int history;                 /* fill result.history */
    int timeout_ms;              /* server-side deadline; 0 = none */
    krylov_progress_fn progress; /* called on solve.progress notifications; NULL: none asked */
    void *progress_ctx;
    const char *preconditioner; /* NULL: the method's ("pcg": jacobi); "none", "jacobi", "amg" */
    /* The preconditioner's options as "name=value,name=value" ("threshold=0.02,block_size=3" for
     * amg), or NULL. A malformed list is KRYLOV_EBADREQ before anything is sent. */
    const char *preconditioner_options;
    int64_t restart; /* GMRES(m)'s basis size m, 1..200; 0 (default): the server's (30) */
} krylov_solve_options_t;

void krylov_solve_options_init(krylov_solve_options_t *opt);

typedef struct krylov_solve_result {
    char status[24]; /* "converged", "max_iterations", "breakdown", "non_finite", "stagnated" */
    int64_t iterations;
    double residual_norm;     /* ||b - A x|| */
    double relative_residual; /* ||b - A x|| / ||b|| */
    double time_ms;           /* the whole solve call on the server */
    char message[256];
    double *history;
    int64_t history_len;
    char method[32];         /* the method that ran ("auto" resolved, "pcg" is "cg") */
    char preconditioner[32]; /* the preconditioner that ran ("none" without one) */
} krylov_solve_result_t;

/* Solve A x = b. b and x hold n * nrhs values; result points to nrhs results. */
int krylov_solve(krylov_client_t *c, const char *id, const double *b, int64_t n,
                 const krylov_solve_options_t *opt, double *x, krylov_solve_result_t *result);
void krylov_solve_result_free(krylov_solve_result_t *result); /* frees history */

/* One system of krylov_solve_many: a resident plain matrix and its right-hand side. */
typedef struct krylov_solve_item {
    const char *id;  /* the matrix */
    const double *b; /* n values: the matrix's rows */
    int64_t n;
    const double *x0; /* n values, or NULL: zero */
    double *x;        /* out: n values (left as they are for an item that failed its checks) */
} krylov_solve_item_t;

typedef struct krylov_item_result {
    char status[24]; /* as krylov_solve_result_t's, or "error": the item could not run */
    char error[24];  /* with "error": the wire code ("NOT_FOUND", "BAD_REQUEST"), else "" */
    int64_t iterations;
    double residual_norm;
    double relative_residual;
    char message[256];
} krylov_item_result_t;

/* What a solve_many request did as a whole. */
typedef struct krylov_many_stats {
    int64_t converged, failed; /* items that converged, that failed their checks */
    int64_t groups, launches;  /* batches the server ran one after another, their launches */
    double time_ms;            /* the whole request on the server */
} krylov_many_stats_t;

/*
 * Solve `count` small systems of their own patterns in one request (solve.batch,
 * docs/PROTOCOL.md): results gets one entry per item; an item the server could not run (unknown
 * id, wrong b length, a batched matrix) has status "error" and the others are unaffected.
 * opt: method ("cg", "bicgstab", "gmres"), preconditioner ("none", "jacobi"), rtol, atol,
 * maxiter, restart and timeout_ms apply to every item (nrhs, x0, history, progress and
 * preconditioner_options are not used). stats may be NULL.
 */
int krylov_solve_many(krylov_client_t *c, const krylov_solve_item_t *items, size_t count,
                      const krylov_solve_options_t *opt, krylov_item_result_t *results,
                      krylov_many_stats_t *stats);

#define KRYLOV_MAX_METHODS 32

typedef struct krylov_method_count {
    char method[32];
    int64_t requests;
} krylov_method_count_t;

typedef struct krylov_server_status {
    char version[32];
    char device[128];
    char device_type[16];
    char platform[128];
    int64_t global_mem_bytes;
    int64_t matrices;
    int64_t device_bytes_used;
    int64_t requests;
    int64_t errors;
    int64_t connections;
    int64_t queue_depth;
    double uptime_s;
    char vendor[128];
    char device_version[128];
    int64_t compute_units;
    int fp64;
    int nmethods; /* requests received per method, in the server's order */
    krylov_method_count_t by_method[KRYLOV_MAX_METHODS];
    int64_t shm_regions;      /* shared-memory regions mapped by the server (all connections) */
    int64_t shm_mapped_bytes; /* ... and their bytes */
} krylov_server_status_t;

int krylov_status(krylov_client_t *c, krylov_server_status_t *status);

/* The server's OpenCL program warm-up (server.status's warm_up): it serves from the start and
 * builds its programs in the background; a request needing one not built yet waits for it. */
typedef struct krylov_warm_status {
    char state[16]; /* "building", "done", or "off" (--warm-programs none) */
    int64_t total;  /* programs the warm-up builds */
    int64_t built;
    int64_t failed;
    int64_t pending; /* not started yet */
    double elapsed_ms;
    char building[512]; /* the programs being built now, ", "-separated (cut to fit) */
} krylov_warm_status_t;

/* wait_ms < 0: the warm-up's state now. Otherwise the server answers once the warm-up is done
 * (server.status wait_warm), waiting at most wait_ms (0: no limit): past that the result is
 * KRYLOV_ETIMEOUT (the server's TIMEOUT; its message says how far it got) and *out is not
 * filled. */
int krylov_warm_status(krylov_client_t *c, int64_t wait_ms, krylov_warm_status_t *out);

#ifdef __cplusplus
}
#endif

#endif
