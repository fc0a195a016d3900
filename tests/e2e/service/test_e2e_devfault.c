/*
 * Device faults in the middle of a request (issue 21): with the test fault hook
 * (solver/runtime/ocl_fault.h, KD_TEST_HOOKS) the k-th buffer allocation, kernel launch, read-back,
 * upload or device-side kernel run of a request fails as the driver would report it, for every k
 * the request reaches.
 *
 * The server runs in this process (kd_server_init / kd_server_run on a thread, a real loopback
 * socket, libkrylov as the client), so the hook is re-armed between requests instead of starting
 * a daemon per k. For each request (matrix.put, a put timed by format selection, spmv, solves
 * with cg + jacobi, cg + ic0, cg + amg, gmres + jacobi on two columns) and each fault kind, a
 * counting run learns how many operations N the request makes; then for k = 1..N, on the same
 * matrix and vector (put again, the pool emptied, so that each run takes the same path), the
 * k-th one fails and:
 *   - the request gets a clean error: DEVICE_MEMORY for an allocation, DEVICE_ERROR for the rest,
 *     the message naming the OpenCL call; or, where the server recovers (an optional buffer it
 *     does without, a request run again after evicting the other matrices), a right answer;
 *   - the device bytes the driver really holds (a destructor callback on every buffer) equal what
 *     the server accounts for (server.status's device_bytes_used plus the vector pool), and
 *     server.status is back where it was (or where a successful request leaves it);
 *   - the next request on the same matrix is served and right (CPU reference: y = A x, the true
 *     residual of a solve), and a matrix put before the sweep still answers right.
 */
#include "common/csr.h"
#include "common/log.h"
#include "kd_test.h"
#include "krylov.h"
#include "server/server.h"
#include "solver/runtime/ocl_fault.h"
#include "solver/runtime/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static kd_server_t server;
static uv_loop_t loop;
static uv_async_t stopper;
static pthread_t loop_thread;
static krylov_client_t *client;
static char address[64];
static const char *sweep_dir; /* the servers' files */

/* ---- the server in this process ------------------------------------------------------------ */

static void on_stop(uv_async_t *a)
{
    uv_close((uv_handle_t *)a, NULL);
    kd_server_shutdown(&server);
}

static void *run_loop(void *arg)
{
    (void)arg;
    kd_server_run(&server);
    return NULL;
}

/* The server on 127.0.0.1:0, its files under dir; with a state directory (as in production) a
 * refused allocation makes it evict the other matrices and run the request again, and an evicted
 * matrix is reloaded on its next use. */
static int server_start(const char *dir, int with_state)
{
    char port_file[256], state_dir[256];
    snprintf(port_file, sizeof(port_file), "%s/port", dir);
    snprintf(state_dir, sizeof(state_dir), "%s/state", dir);
    unlink(port_file);
    const char *device = getenv("KD_TEST_DEVICE");
    char *argv[16] = {"krylovd",
                      "--listen",
                      "127.0.0.1:0",
                      "--port-file",
                      port_file,
                      "--device",
                      device != NULL ? (char *)device : "auto",
                      "--warm-programs",
                      "none"};
    int argc = 9;
    if (with_state) {
        argv[argc++] = "--state-dir";
        argv[argc++] = state_dir;
    }
    memset(&server, 0, sizeof(server));
    kd_config_t cfg;
    kd_config_defaults(&cfg);
    kd_log_set_level(KD_LOG_ERROR);
    kd_err_t err = {0};
    if (kd_config_parse_args(&cfg, argc, argv, &err) != KD_OK || uv_loop_init(&loop) != 0 ||
        kd_server_init(&server, &loop, &cfg, &err) != KD_OK) {
        fprintf(stderr, "server: %s\n", err.message);
        return -1;
    }
    uv_async_init(&loop, &stopper, on_stop);
    FILE *f = fopen(port_file, "r");
    int port = 0;
    if (f == NULL || fscanf(f, "%d", &port) != 1)
        port = 0;
    if (f != NULL)
        fclose(f);
    snprintf(address, sizeof(address), "127.0.0.1:%d", port);
    return port > 0 && pthread_create(&loop_thread, NULL, run_loop, NULL) == 0 ? 0 : -1;
}

static void server_stop(void)
{
    uv_async_send(&stopper);
    pthread_join(loop_thread, NULL);
    uv_loop_close(&loop);
}

/* ---- matrices and references ---------------------------------------------------------------- */

/* A g x g 5-point stencil with random symmetric couplings and a dominant diagonal: SPD, fresh
 * values each call (so every put stores a new matrix). */
static kd_csr_t *random_spd(int64_t g)
{
    const int64_t n = g * g;
    kd_csr_t *A = calloc(1, sizeof(*A));
    A->rows = A->cols = n;
    A->dtype = KD_DTYPE_F64;
    A->indptr = calloc((size_t)n + 1, sizeof(int32_t));
    A->indices = calloc((size_t)(5 * n), sizeof(int32_t));
    double *v = calloc((size_t)(5 * n), sizeof(double));
    A->values = v;
    /* couplings east[i] (i, i+1) and north[i] (i, i+g), mirrored below the diagonal */
    double *east = calloc((size_t)n, sizeof(double)), *north = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++) {
        east[i] = -kd_test_rand_double(0.2, 1.5);
        north[i] = -kd_test_rand_double(0.2, 1.5);
    }
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const int64_t x = i % g, y = i / g;
        const int64_t col[5] = {y > 0 ? i - g : -1, x > 0 ? i - 1 : -1, i, x + 1 < g ? i + 1 : -1,
                                y + 1 < g ? i + g : -1};
        const double val[5] = {y > 0 ? north[i - g] : 0, x > 0 ? east[i - 1] : 0, 0,
                               x + 1 < g ? east[i] : 0, y + 1 < g ? north[i] : 0};
        int64_t diag_at = 0;
        double sum = 0;
        for (int j = 0; j < 5; j++) {
            if (col[j] < 0)
                continue;
            if (j == 2)
                diag_at = k;
            A->indices[k] = (int32_t)col[j];
            v[k++] = val[j];
            sum += fabs(val[j]);
        }
        v[diag_at] = sum + kd_test_rand_double(0.1, 1.0);
        A->indptr[i + 1] = (int32_t)k;
    }
    A->nnz = k;
    free(east);
    free(north);
    return A;
}

static double *random_vector(int64_t n)
{
    double *x = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        x[i] = kd_test_rand_double(-1, 1);
    return x;
}

static int put(const kd_csr_t *A, char *id)
{
    krylov_matrix_info_t info;
    int rc =
        krylov_put_csr(client, A->rows, A->cols, A->indptr, A->indices, A->values, NULL, &info);
    if (rc == KRYLOV_OK)
        memcpy(id, info.id, sizeof(info.id));
    return rc;
}

/* KRYLOV_OK and y = A x right, or the error. */
static int spmv_right(const char *id, const kd_csr_t *A, const double *x, int *wrong)
{
    double *y = malloc((size_t)A->rows * sizeof(double));
    double *ref = calloc((size_t)A->rows, sizeof(double));
    for (int64_t i = 0; i < A->rows; i++)
        y[i] = NAN; /* poisoned: a row left unwritten shows */
    int rc = krylov_spmv(client, id, 1.0, x, A->cols, 0.0, y, A->rows);
    *wrong = 0;
    if (rc == KRYLOV_OK) {
        kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
        for (int64_t i = 0; i < A->rows; i++)
            if (!(fabs(y[i] - ref[i]) <= 1e-12 * (1 + fabs(ref[i]))))
                *wrong = 1;
    }
    free(y);
    free(ref);
    return rc;
}

/* KRYLOV_OK and converged columns x with ||b - A x|| / ||b|| <= 1e-7 (computed here), or the
 * error. b holds nrhs columns. */
static int solve_right(krylov_client_t *conn, const char *id, const kd_csr_t *A, const double *b,
                       const char *method, const char *precond, int64_t nrhs, int *wrong)
{
    const int64_t n = A->rows;
    double *x = malloc((size_t)(n * nrhs) * sizeof(double));
    for (int64_t i = 0; i < n * nrhs; i++)
        x[i] = NAN;
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.method = method;
    opt.preconditioner = precond;
    opt.rtol = 1e-9;
    opt.nrhs = nrhs;
    krylov_solve_result_t res[2];
    memset(res, 0, sizeof(res));
    int rc = krylov_solve(conn, id, b, n, &opt, x, res);
    *wrong = 0;
    for (int64_t c = 0; rc == KRYLOV_OK && c < nrhs; c++) {
        const double *bc = b + c * n, *xc = x + c * n;
        double *r = malloc((size_t)n * sizeof(double));
        memcpy(r, bc, (size_t)n * sizeof(double));
        kd_csr_spmv_ref(A, xc, -1.0, 1.0, r);
        double rr = 0, bb = 0;
        for (int64_t i = 0; i < n; i++)
            rr += r[i] * r[i], bb += bc[i] * bc[i];
        if (strcmp(res[c].status, "converged") != 0 || !(sqrt(rr / bb) <= 1e-7)) {
            fprintf(stderr, "solve column %lld: status %s, true relres %g\n", (long long)c,
                    res[c].status, sqrt(rr / bb));
            *wrong = 1;
        }
        free(r);
    }
    for (int64_t c = 0; rc == KRYLOV_OK && c < nrhs; c++)
        krylov_solve_result_free(&res[c]);
    free(x);
    return rc;
}

/* ---- what the device holds ------------------------------------------------------------------ */

static int64_t status_bytes(void)
{
    krylov_server_status_t st;
    if (krylov_status(client, &st) != KRYLOV_OK)
        return -1;
    return st.device_bytes_used;
}

/* Live device bytes minus what the server accounts for (server.status's device_bytes_used, whose
 * value goes to *used, and the vector pool); 0 when they agree. The driver destroys a buffer when
 * the last command using it is done, which may follow the reply: wait up to 2 s. */
static int64_t unaccounted_bytes(int64_t *used)
{
    int64_t diff = 0;
    for (int i = 0; i < 2000; i++) {
        *used = status_bytes();
        /* the worker is idle between requests: its pool is not changing under us */
        diff = kd_ocl_fault_live_bytes() - *used - (int64_t)kd_pool_bytes(server.pool);
        if (diff == 0)
            return 0;
        usleep(1000);
    }
    return diff;
}

/* ---- the sweep ------------------------------------------------------------------------------ */

/* The requests under fault. A grid of 7 x 7 (49 rows) reaches every step of a request quickly;
 * the measured put's 30 x 30 is over the size format selection times candidates at (how many
 * launches that takes, and which format wins, depend on the timings). */
typedef struct request {
    const char *name;
    int64_t grid;
    const char *method; /* NULL: not a solve */
    const char *precond;
    int64_t nrhs;
    int spmv;  /* an spmv, not a put */
    int timed; /* a put whose format is chosen by timing */
} request_t;

static const request_t requests[] = {
    {.name = "put", .grid = 7, .nrhs = 1},
    {.name = "put measured", .grid = 30, .nrhs = 1, .timed = 1},
    {.name = "spmv", .grid = 7, .nrhs = 1, .spmv = 1},
    {.name = "solve cg+jacobi", .grid = 7, .method = "cg", .precond = "jacobi", .nrhs = 1},
    {.name = "solve cg+ic0", .grid = 7, .method = "cg", .precond = "ic0", .nrhs = 1},
    {.name = "solve cg+amg", .grid = 7, .method = "cg", .precond = "amg", .nrhs = 1},
    {.name = "solve gmres x2", .grid = 5, .method = "gmres", .precond = "jacobi", .nrhs = 2},
};
#define REQUEST_COUNT (sizeof(requests) / sizeof(requests[0]))

static kd_csr_t *keeper; /* put before the sweep: must stay right throughout */
static double *keeper_x;
static char keeper_id[33];

/* The keeper's share of server.status's device_bytes_used: 0 while it is evicted (the server
 * evicts every other matrix when the driver refuses an allocation, and reloads it on use). */
static int64_t keeper_resident_bytes(void)
{
    krylov_matrix_info_t info;
    if (krylov_info(client, keeper_id, &info) != KRYLOV_OK)
        return -1;
    return info.resident ? info.device_bytes : 0;
}

/* One sweep's inputs: the same matrix and vector for the counting run and every k, so that each
 * run takes the same path up to its fault. */
typedef struct sweep {
    const request_t *req;
    kd_ocl_fault_kind_t kind;
    int sticky;
    kd_csr_t *A;
    double *v;        /* spmv's x, a solve's b */
    int64_t after_ok; /* server.status's device bytes after the request without a fault */
    int64_t points, errors, recovered;
} sweep_t;

static int is_put(const request_t *req)
{
    return req->method == NULL && !req->spmv;
}

static int request_run(const sweep_t *sw, char *id, int *wrong)
{
    const request_t *req = sw->req;
    *wrong = 0;
    if (is_put(req))
        return put(sw->A, id);
    if (req->spmv)
        return spmv_right(id, sw->A, sw->v, wrong);
    return solve_right(client, id, sw->A, sw->v, req->method, req->precond, req->nrhs, wrong);
}

/* What the message must name: the refused call, or for a launch that fails on the device the
 * status of whichever later call (a read-back, a wait) found out. */
static const char *const fault_calls[KD_OCL_FAULT_KINDS] = {
    "clCreateBuffer", "clEnqueueNDRangeKernel", "clEnqueueReadBuffer", "clEnqueueWriteBuffer",
    "failed: CL_"};

/* The request's answer with the fault at k (0: none) armed. */
static void check_answer(sweep_t *sw, uint64_t k, int rc, int wrong, int hit, uint64_t ops)
{
    const char *where = sw->req->name, *kind = kd_ocl_fault_name(sw->kind);
    const unsigned long long kk = (unsigned long long)k;
    /* a timed put may stop measuring sooner this time than in the counting run */
    CHECK_MSG(k == 0 || hit || (sw->req->timed && ops < k),
              "%s %s:%llu: the fault was never reached", where, kind, kk);
    if (rc != KRYLOV_OK) {
        const char *code = krylov_error_code(client), *msg = krylov_error_message(client);
        const char *want = sw->kind == KD_OCL_FAULT_ALLOC ? "DEVICE_MEMORY" : "DEVICE_ERROR";
        CHECK_MSG(k > 0 && strcmp(code, want) == 0, "%s %s:%llu: %s (%s), expected %s", where, kind,
                  kk, code, msg, want);
        CHECK_MSG(strstr(msg, fault_calls[sw->kind]) != NULL,
                  "%s %s:%llu: message \"%s\" does not name %s", where, kind, kk, msg,
                  fault_calls[sw->kind]);
        sw->errors++;
    } else {
        CHECK_MSG(!wrong, "%s %s:%llu: answered, but wrong", where, kind, kk);
        sw->recovered += k > 0;
    }
}

/* One run of the request with the kind's k-th operation failing (k = 0: none). Returns the
 * number of operations of that kind the request made. */
static uint64_t run_once(sweep_t *sw, uint64_t k)
{
    const char *where = sw->req->name, *kind = kd_ocl_fault_name(sw->kind);
    const unsigned long long kk = (unsigned long long)k;
    char id[33] = "";
    int wrong = 0;
    if (!is_put(sw->req) && put(sw->A, id) != KRYLOV_OK) {
        CHECK_MSG(0, "put before %s: %s", where, krylov_error_message(client));
        return 0;
    }
    /* Pooled vectors would make a request's allocations depend on the runs before it. The worker
     * is idle between answered requests. */
    kd_pool_clear(server.pool);
    const int64_t before = status_bytes() - keeper_resident_bytes();
    const uint64_t injected = kd_ocl_fault_injected();
    const uint64_t count0 = kd_ocl_fault_count(sw->kind);
    kd_ocl_fault_arm(sw->kind, k, sw->sticky);
    int rc = request_run(sw, id, &wrong);
    kd_ocl_fault_arm(sw->kind, 0, 0);
    const uint64_t ops = kd_ocl_fault_count(sw->kind) - count0;
    check_answer(sw, k, rc, wrong, kd_ocl_fault_injected() != injected, ops);
    sw->points += k > 0;

    /* nothing leaked, nothing unaccounted, and the status back where it was or where a success
     * leaves it */
    int64_t now = 0;
    const int64_t lost = unaccounted_bytes(&now);
    CHECK_MSG(lost == 0, "%s %s:%llu: %lld device bytes the server does not account for", where,
              kind, kk, (long long)lost);
    now -= keeper_resident_bytes();
    krylov_matrix_info_t info = {.device_bytes = -1};
    /* a put's format, so its bytes, may differ from run to run */
    if (rc == KRYLOV_OK && is_put(sw->req))
        CHECK_MSG(krylov_info(client, id, &info) == KRYLOV_OK && now - before == info.device_bytes,
                  "put %s:%llu: device_bytes_used went from %lld to %lld for a matrix of %lld",
                  kind, kk, (long long)before, (long long)now, (long long)info.device_bytes);
    else if (k == 0)
        sw->after_ok = now;
    else if (rc == KRYLOV_OK)
        CHECK_MSG(now == sw->after_ok, "%s %s:%llu: device_bytes_used %lld, %lld without a fault",
                  where, kind, kk, (long long)now, (long long)sw->after_ok);
    else if (is_put(sw->req))
        CHECK_MSG(now == before, "put %s:%llu: device_bytes_used %lld after a failed put, was %lld",
                  kind, kk, (long long)now, (long long)before);
    else /* a preconditioner built before the fault stays with the matrix */
        CHECK_MSG(now == before || now == sw->after_ok,
                  "%s %s:%llu: device_bytes_used %lld, expected %lld (before) or %lld", where, kind,
                  kk, (long long)now, (long long)before, (long long)sw->after_ok);

    /* the next request is served, and right; so is the matrix put before the sweep */
    if (is_put(sw->req) && rc != KRYLOV_OK) {
        krylov_matrix_info_t *infos = NULL;
        size_t count = 0;
        CHECK(krylov_list(client, &infos, &count) == KRYLOV_OK && count == 1);
        free(infos);
        CHECK_MSG(put(sw->A, id) == KRYLOV_OK, "put after a failed put: %s",
                  krylov_error_message(client));
    }
    if (is_put(sw->req)) {
        double *x = random_vector(sw->A->cols);
        rc = spmv_right(id, sw->A, x, &wrong);
        free(x);
    } else {
        rc = request_run(sw, id, &wrong);
    }
    CHECK_MSG(rc == KRYLOV_OK && !wrong, "%s %s:%llu: the next request: %s%s", where, kind, kk,
              krylov_error_message(client), wrong ? " (wrong answer)" : "");
    const int64_t next = status_bytes() - keeper_resident_bytes();
    if (!is_put(sw->req) && k > 0)
        CHECK_MSG(next == sw->after_ok,
                  "%s %s:%llu: device_bytes_used %lld after the next request, %lld without a fault",
                  where, kind, kk, (long long)next, (long long)sw->after_ok);
    rc = spmv_right(keeper_id, keeper, keeper_x, &wrong);
    CHECK_MSG(rc == KRYLOV_OK && !wrong, "%s %s:%llu: the kept matrix: %s%s", where, kind, kk,
              krylov_error_message(client), wrong ? " (wrong answer)" : "");
    CHECK(krylov_drop(client, id) == KRYLOV_OK);
    int64_t left = 0;
    const int64_t lost_after = unaccounted_bytes(&left);
    const int64_t keeper_bytes = keeper_resident_bytes();
    CHECK_MSG(lost_after == 0 && left == keeper_bytes,
              "%s %s:%llu: after the drop: %lld device bytes unaccounted, %lld in use, not %lld",
              where, kind, kk, (long long)lost_after, (long long)left, (long long)keeper_bytes);
    return ops;
}

static void sweep(const request_t *req, kd_ocl_fault_kind_t kind, int sticky)
{
    sweep_t sw = {.req = req, .kind = kind, .sticky = sticky, .after_ok = -1};
    sw.A = random_spd(req->grid);
    sw.v = random_vector(sw.A->rows * req->nrhs);
    const uint64_t n = run_once(&sw, 0);
    const int failures = kd_test_failures;
    /* Every k, except that a kernel failing on the device (exec) is tried at every launch of the
     * first 32 and then at every 5th and the last: a launch refused outright (launch) already
     * walks every k, and the two end in the same error paths once the failure is reported. */
    for (uint64_t k = 1; k <= n && kd_test_failures - failures < 5; k++)
        if (kind != KD_OCL_FAULT_EXEC || k <= 32 || k % 5 == 0 || k == n)
            run_once(&sw, k);
    printf("%-16s %-6s%s: %3llu operations; %lld faults: %lld clean errors, %lld recovered\n",
           req->name, kd_ocl_fault_name(kind), sticky ? " (sticky)" : "         ",
           (unsigned long long)n, (long long)sw.points, (long long)sw.errors,
           (long long)sw.recovered);
    fflush(stdout);
    kd_csr_free(sw.A);
    free(sw.v);
}

/* Every request under every kind of fault, one at a time; a fault on an allocation also sticky
 * (every later allocation failing too), which is what reaches an answer through the server's
 * evict-and-retry. With a state directory, only the allocation faults: the other kinds take
 * no path that depends on it. */
static void sweep_all(int with_state)
{
    /* while debugging: "REQUEST/KIND" runs that sweep alone, "beside" the spmv beside a solve */
    const char *only = getenv("KD_DEVFAULT_ONLY");
    printf("-- %s a state directory\n", with_state ? "with" : "without");
    for (size_t r = 0; r < REQUEST_COUNT; r++)
        for (int kind = 0; kind < (with_state ? 1 : KD_OCL_FAULT_KINDS); kind++)
            for (int sticky = 0; sticky < 1 + (kind == KD_OCL_FAULT_ALLOC); sticky++) {
                char name[64];
                snprintf(name, sizeof(name), "%s/%s", requests[r].name, kd_ocl_fault_name(kind));
                if (only == NULL || strcmp(only, name) == 0)
                    sweep(&requests[r], (kd_ocl_fault_kind_t)kind, sticky);
            }
}

/* ---- spmv beside a solve ---------------------------------------------------------------------
 * A long solve on one connection while spmv requests on another are served at its checks, on the
 * device's express queue (server/handlers/spmv.c), with a fault armed a few operations ahead:
 * whichever request it hits, each answers right or with a clean error, and the device bytes are all
 * accounted for afterwards. Not a sweep: which request meets the fault depends on timing. */

typedef struct beside {
    const char *id;
    const kd_csr_t *A;
    const double *b;
    int rc, wrong;
    char code[32];
    atomic_int done;
} beside_t;

static void *beside_solve(void *arg)
{
    beside_t *s = arg;
    krylov_client_t *c = krylov_client_new();
    s->rc = c != NULL && krylov_connect(c, address) == KRYLOV_OK
                ? solve_right(c, s->id, s->A, s->b, "cg", "none", 1, &s->wrong)
                : KRYLOV_EINTERNAL;
    snprintf(s->code, sizeof(s->code), "%s", c != NULL ? krylov_error_code(c) : "");
    krylov_client_free(c);
    atomic_store(&s->done, 1);
    return NULL;
}

static void test_beside_solve(void)
{
    kd_csr_t *A = random_spd(24);
    double *b = random_vector(A->rows);
    int64_t solve_errors = 0, spmv_errors = 0, spmvs = 0;
    for (int round = 0; round < 20; round++) {
        const kd_ocl_fault_kind_t kind = (kd_ocl_fault_kind_t)(round % KD_OCL_FAULT_KINDS);
        char id[33] = "";
        REQUIRE(put(A, id) == KRYLOV_OK);
        beside_t s = {.id = id, .A = A, .b = b};
        atomic_init(&s.done, 0);
        pthread_t t;
        REQUIRE(pthread_create(&t, NULL, beside_solve, &s) == 0);
        usleep(2000); /* let the solve start: the spmv requests then wait for its checks */
        for (int i = 0; i < 8 && !atomic_load(&s.done); i++) {
            int wrong = 0;
            kd_ocl_fault_arm(kind, 1 + (uint64_t)kd_test_rand_below(4), 0);
            int rc = spmv_right(keeper_id, keeper, keeper_x, &wrong);
            spmvs++;
            if (rc != KRYLOV_OK) {
                const char *code = krylov_error_code(client);
                CHECK_MSG(strcmp(code, "DEVICE_ERROR") == 0 || strcmp(code, "DEVICE_MEMORY") == 0,
                          "spmv beside a solve, %s fault: %s (%s)", kd_ocl_fault_name(kind), code,
                          krylov_error_message(client));
                spmv_errors++;
            }
            CHECK_MSG(!wrong, "spmv beside a solve, %s fault: a wrong answer",
                      kd_ocl_fault_name(kind));
        }
        pthread_join(t, NULL);
        kd_ocl_fault_arm(kind, 0, 0);
        if (s.rc != KRYLOV_OK) {
            CHECK_MSG(strcmp(s.code, "DEVICE_ERROR") == 0 || strcmp(s.code, "DEVICE_MEMORY") == 0,
                      "solve beside spmv, %s fault: %s", kd_ocl_fault_name(kind), s.code);
            solve_errors++;
        }
        CHECK_MSG(!s.wrong, "solve beside spmv, %s fault: a wrong answer", kd_ocl_fault_name(kind));
        int64_t used = 0;
        CHECK_MSG(unaccounted_bytes(&used) == 0, "beside a solve, %s fault: device bytes lost",
                  kd_ocl_fault_name(kind));
        int wrong = 0;
        CHECK(solve_right(client, id, A, b, "cg", "none", 1, &wrong) == KRYLOV_OK && !wrong);
        CHECK(spmv_right(keeper_id, keeper, keeper_x, &wrong) == KRYLOV_OK && !wrong);
        CHECK(krylov_drop(client, id) == KRYLOV_OK);
    }
    const uint64_t beside = atomic_load(&server.spmv_stats.beside_solve);
    printf("beside a solve: %lld spmv requests (%llu served at a solve's check), %lld failed; "
           "20 solves, %lld failed\n",
           (long long)spmvs, (unsigned long long)beside, (long long)spmv_errors,
           (long long)solve_errors);
    kd_csr_free(A);
    free(b);
}

/* One server, the keeper put first; its matrices dropped and its device memory all given back
 * at the end. */
static void serve_and_sweep(const char *dir, int with_state)
{
    REQUIRE(server_start(dir, with_state) == 0);
    REQUIRE((client = krylov_client_new()) != NULL);
    REQUIRE(krylov_connect(client, address) == KRYLOV_OK);
    CHECK(put(keeper, keeper_id) == KRYLOV_OK);
    sweep_all(with_state);
    const char *only = getenv("KD_DEVFAULT_ONLY");
    if (!with_state && (only == NULL || strcmp(only, "beside") == 0))
        test_beside_solve();
    CHECK(krylov_drop(client, keeper_id) == KRYLOV_OK);
    krylov_client_free(client);
    client = NULL;
    server_stop();
    CHECK_MSG(kd_ocl_fault_live_bytes() == 0, "%lld device bytes live after the server stopped",
              (long long)kd_ocl_fault_live_bytes());
}

static void test_sweep_without_state(void)
{
    serve_and_sweep(sweep_dir, 0);
}

static void test_sweep_with_state(void)
{
    serve_and_sweep(sweep_dir, 1);
}

int main(void)
{
    kd_test_seed();
    char dir[] = "/tmp/kd-devfault-XXXXXX";
    if (mkdtemp(dir) == NULL)
        return 1;
    sweep_dir = dir;
    keeper = random_spd(9);
    keeper_x = random_vector(keeper->cols);
    RUN(test_sweep_without_state);
    RUN(test_sweep_with_state);
    kd_csr_free(keeper);
    free(keeper_x);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return kd_test_finish();
}
