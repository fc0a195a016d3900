/*
 * Decoding one msgpack-rpc request into plain C structs, with full validation of everything that
 * can be checked without knowing the server's matrices: message shape, method, parameter names and
 * types, dtypes, bin lengths (a multiple of the element size; counts that agree with rows, cols
 * and each other), and the configured size limits. Array payloads are not copied: a kd_array_t
 * points into the message buffer, which the request owns (plain msgpack arrays of numbers are
 * converted into buffers the request also owns).
 *
 * What needs the matrix store (does the id exist, does x have cols entries, are the CSR indices in
 * range) is checked later by the server and solver, off the event-loop thread.
 */
#ifndef KD_PROTOCOL_REQUEST_H
#define KD_PROTOCOL_REQUEST_H

#include "common/dtype.h"
#include "common/error.h"
#include "common/reorder.h"

#include <stdint.h>

typedef enum kd_method {
    KD_METHOD_MATRIX_PUT = 0,
    KD_METHOD_MATRIX_INFO,
    KD_METHOD_MATRIX_LIST,
    KD_METHOD_MATRIX_DROP,
    KD_METHOD_MATRIX_PIN,
    KD_METHOD_MATRIX_MULTIPLY,
    KD_METHOD_SPMV,
    KD_METHOD_SOLVE,
    KD_METHOD_JOB_CANCEL,
    KD_METHOD_SERVER_STATUS,
    KD_METHOD_AUTH,
    KD_METHOD_MATRIX_SHARE,
    KD_METHOD_SOLVE_BATCH,
    KD_METHOD_SHM_REGISTER,
    KD_METHOD_SHM_UNREGISTER,
    KD_METHOD_COUNT
} kd_method_t;

/* "matrix.put", ... */
const char *kd_method_name(kd_method_t method);

/* A numeric array from the request. data is little-endian and possibly unaligned. A value array
 * may instead name bytes of a shared-memory region ({"shm": id, "offset": o, "bytes": n}): then
 * shm is the region's id (> 0), offset is aligned to the dtype's size, count is n / size, and data
 * stays NULL until the server resolves the region (kd_array_region). */
typedef struct kd_array {
    int present;
    const void *data;
    int64_t count; /* elements */
    kd_dtype_t dtype;
    int64_t shm;    /* the region's id, 0: the bytes came in the message */
    int64_t offset; /* into the region, bytes */
} kd_array_t;

/* A bounded string copied out of the message. */
#define KD_NAME_MAX 128
#define KD_AUTH_NAME_MAX 64 /* a user name, with its NUL */
#define KD_FORMAT_NAME_MAX 32
#define KD_OPTIONS_MAX 8      /* preconditioner_options entries */
#define KD_OPTION_NAME_MAX 24 /* ... and their names' bytes, NUL included */

typedef enum kd_put_kind {
    KD_PUT_CSR = 0,
    KD_PUT_COO = 1,
    KD_PUT_MTX = 2,
    KD_PUT_LIKE = 3, /* new values on a held matrix's pattern */
} kd_put_kind_t;

/* How a new matrix is kept (matrix.put, matrix.multiply): all optional. */
typedef struct kd_matrix_options {
    char name[KD_NAME_MAX];          /* "" when absent */
    char format[KD_FORMAT_NAME_MAX]; /* forced format, "" when absent */
    char select[KD_FORMAT_NAME_MAX]; /* selection mode ("measure" | "heuristic"), "" */
    kd_reorder_t reorder;            /* KD_REORDER_AUTO when absent */
    int pin;                         /* pin on upload (-1 absent, 0, 1) */
    int distribute; /* matrix.put under mpirun: KD_DISTRIBUTE_AUTO (absent), _YES or _NO */
} kd_matrix_options_t;

#define KD_DISTRIBUTE_AUTO 0
#define KD_DISTRIBUTE_YES 1
#define KD_DISTRIBUTE_NO 2

/* matrix.put's persist: when the matrix's state file is written. */
typedef enum kd_persist {
    KD_PERSIST_DEFAULT = -1, /* absent: the server's --persist-default */
    KD_PERSIST_SYNC = 0,     /* before the reply */
    KD_PERSIST_BEHIND = 1,   /* after the reply, by the worker between requests */
    KD_PERSIST_NONE = 2,     /* never: in memory only, gone at restart */
} kd_persist_t;

const char *kd_persist_name(int persist); /* "sync" | "behind" | "none" */

typedef struct kd_put_request {
    kd_put_kind_t kind;
    int persist;        /* kd_persist_t */
    int64_t rows, cols; /* CSR and COO */
    kd_dtype_t dtype;   /* value type: float64 (default) or float32 */
    kd_array_t indptr;  /* CSR: rows + 1 entries, int32 or int64 */
    kd_array_t indices; /* CSR: nnz entries */
    kd_array_t row;     /* COO */
    kd_array_t col;     /* COO */
    kd_array_t values;  /* CSR/COO: nnz entries of dtype */
    const char *mtx;    /* MTX: Matrix Market text (not NUL-terminated) */
    size_t mtx_len;
    kd_matrix_options_t options;
    int64_t batch; /* 0: one matrix; k >= 1: k systems of the CSR pattern, values k x nnz */
    /* KD_PUT_LIKE: the held matrix whose pattern the values fill (in its canonical entry order),
     * the pattern hash the client computed (has_pattern), and whether dtype was sent */
    uint8_t like[16];
    uint8_t pattern[16];
    int has_pattern;
    int dtype_given;
} kd_put_request_t;

/* matrix.multiply: C = op(A) B, op(A) = A or A^T; C is kept as a new matrix. */
typedef struct kd_multiply_request {
    uint8_t a[16], b[16];
    int transpose_a; /* default 0 */
    kd_matrix_options_t options;
} kd_multiply_request_t;

typedef struct kd_id_request {
    uint8_t id[16];
    int pinned;                  /* matrix.pin: 0 or 1 (default 1) */
    char user[KD_AUTH_NAME_MAX]; /* matrix.share: who gets a reference */
} kd_id_request_t;

typedef struct kd_spmv_request {
    uint8_t id[16];
    kd_dtype_t dtype; /* of x, y in and y out: float64 (default) or float32 */
    kd_array_t x;
    kd_array_t y;  /* optional input y for beta != 0 */
    double alpha;  /* default 1 */
    double beta;   /* default 0 */
    int64_t ncols; /* columns in x (and y), column-major: Y = alpha A X + beta Y; default 1 */
    kd_array_t out; /* optional: a region the result is written into instead of the reply */
} kd_spmv_request_t;

/* The largest `restart` a solve request may ask for (the solver's KD_SOLVE_RESTART_MAX). */
#define KD_RESTART_MAX 200

typedef struct kd_solve_request {
    uint8_t id[16];
    kd_dtype_t dtype;                        /* of b, x0 and the returned x */
    kd_array_t b;                            /* nrhs * rows values, column-major */
    kd_array_t x0;                           /* optional, same shape as b */
    char method[KD_FORMAT_NAME_MAX];         /* the server's name, alias or "auto"; "": cg */
    double rtol;                             /* default 1e-8 */
    double atol;                             /* default 0 */
    int64_t maxiter;                         /* default -1: 10 * rows, chosen by the server */
    int64_t nrhs;                            /* default 1 */
    int64_t check_every;                     /* default 0: chosen by the solver */
    int history;                             /* bool */
    int progress;                            /* bool: stream solve.progress notifications */
    char preconditioner[KD_FORMAT_NAME_MAX]; /* optional: a name of the server's table, "" */
    /* optional `preconditioner_options`: names and numbers for the preconditioner's setup (the
     * server checks the names against the preconditioner's) */
    int noptions;
    struct {
        char name[KD_OPTION_NAME_MAX];
        double value;
    } options[KD_OPTIONS_MAX];
    int64_t restart; /* GMRES(m)'s m, 0..KD_RESTART_MAX; 0 (default): the server's */
    int reuse_preconditioner; /* bool: a matrix put with like applies the like matrix's setup */
    /* rtol, atol and maxiter given as arrays (one per system of a batched matrix; the server
     * checks their length) instead of numbers: float64, float64, int64 */
    kd_array_t rtols, atols, maxiters;
    kd_array_t out; /* optional: a region x is written into instead of the reply */
    /* method "direct": direct_options.solver, a name of the server's factorisation libraries
     * ("klu", "umfpack", "cholmod"), or "": the server's choice */
    char direct_solver[KD_FORMAT_NAME_MAX];
} kd_solve_request_t;

/* solve.batch: many small systems of their own patterns (resident matrices) in one request. */
#define KD_SOLVE_ITEMS_MAX 16384 /* items in one request */

typedef struct kd_solve_item {
    uint8_t id[16];
    kd_array_t b;  /* the matrix's rows values of the request's dtype (the server checks) */
    kd_array_t x0; /* optional, as many values as b */
} kd_solve_item_t;

typedef struct kd_solve_batch_request {
    kd_dtype_t dtype;                        /* of every b, x0 and x */
    char method[KD_FORMAT_NAME_MAX];         /* "": cg (the server checks the name) */
    char preconditioner[KD_FORMAT_NAME_MAX]; /* "": none */
    double rtol, atol;                       /* defaults 1e-8, 0 */
    int64_t maxiter;                         /* default -1: the server's, per item's rows */
    int64_t restart;                         /* 0..KD_RESTART_MAX */
    int history;
    kd_solve_item_t *items; /* nitems, 1..KD_SOLVE_ITEMS_MAX; owned by the request */
    int64_t nitems;
    int64_t rows; /* every item's b values together (at most the limits' max_rows) */
} kd_solve_batch_request_t;

/* auth: who the connection is. The token is a secret: the server never logs it and wipes its
 * bytes in the message once checked. */
#define KD_AUTH_TOKEN_MAX 256
typedef struct kd_auth_request {
    char name[KD_AUTH_NAME_MAX];
    const char *token; /* not NUL-terminated; points into the message */
    size_t token_len;
} kd_auth_request_t;

/* shm.register: the memfd comes beside the message (the server's connection takes it);
 * shm.unregister: the region's id. */
#define KD_SHM_NAME_MAX 64
typedef struct kd_shm_request {
    int64_t bytes; /* register: the region's size, >= 1 */
    char name[KD_SHM_NAME_MAX];
    int64_t id; /* unregister */
} kd_shm_request_t;

typedef struct kd_cancel_request {
    uint64_t target_msgid;
} kd_cancel_request_t;

typedef struct kd_request {
    uint64_t msgid;
    kd_method_t method;
    int64_t timeout_ms; /* optional `timeout_ms` on any request; 0 = none */
    union {
        kd_put_request_t put;
        kd_multiply_request_t multiply;
        kd_id_request_t id; /* matrix.info, matrix.drop, matrix.pin, matrix.share */
        kd_spmv_request_t spmv;
        kd_solve_request_t solve;
        kd_solve_batch_request_t solve_batch;
        kd_cancel_request_t cancel;
        kd_auth_request_t auth;
        kd_shm_request_t shm;
        struct {
            int wait_warm; /* answer once the program warm-up is done (or timeout_ms passed) */
        } status;
    } u;
    struct kd_request_owned
        *owned; /* private: the message buffer, msgpack zone, converted arrays */
} kd_request_t;

typedef struct kd_proto_limits {
    int64_t max_rows; /* 0 = only the format's own limit */
    int64_t max_cols;
    int64_t max_nnz;
    int64_t max_nrhs;
    size_t max_array_elements; /* plain msgpack arrays (not bin) longer than this: TOO_LARGE */
} kd_proto_limits_t;

/* What went wrong when decoding, with enough to address an error response. */
typedef struct kd_decode_error {
    kd_err_t err;
    int has_msgid; /* a response can be sent: the message was a request with a msgid */
    uint64_t msgid;
    int is_notification; /* [2, method, params]: no response is expected */
} kd_decode_error_t;

/*
 * Decode one whole message (from kd_frame_next). Takes ownership of buf (malloc'd) in every case:
 * on success the request owns it and kd_request_free() releases it; on failure it is freed here.
 * Returns 0, or a negative code with derr filled (KD_EBADREQ, KD_ETOOLARGE, KD_ENOMEM, ...).
 * A notification or a response sent by a client is not a request: KD_EBADREQ with
 * is_notification or !has_msgid set, and nothing to answer.
 */
int kd_request_decode(void *buf, size_t len, const kd_proto_limits_t *limits, kd_request_t **out,
                      kd_decode_error_t *derr);

void kd_request_free(kd_request_t *req); /* accepts NULL */

/* The i-th value array of req that may name a region (x, y, out, b, x0, values, solve.batch's
 * items' b and x0), present or not; NULL past the last. For the server to resolve them. */
kd_array_t *kd_request_array(kd_request_t *req, size_t i);

/* Take ownership of a buffer from malloc or kd_recycle_alloc (given back with kd_recycle_free
 * with the request): the server's copy of a region's bytes. Returns 0 or KD_ENOMEM (buf is
 * then given back). */
int kd_request_adopt(kd_request_t *req, void *buf, size_t bytes);

/* Host bytes the decoded request holds: its message, the arrays converted from plain msgpack
 * arrays, and the unpacked objects (estimated at sizeof(msgpack_object) per element; msgpack's
 * zone does not say what it allocated). For client memory accounting. */
size_t kd_request_host_bytes(const kd_request_t *req);

#endif
