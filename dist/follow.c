/*
 * The command channel (follow.h): the header, the followers' loop, and each op's collective
 * steps, written once for every rank (rank 0 passes its inputs; `root` says which side runs).
 */
#include "dist/follow.h"
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "dist/scatter.h"
#include "solver/methods/method.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { KD_CMD_STOP = 1, KD_CMD_PUT, KD_CMD_SPMV, KD_CMD_SOLVE, KD_CMD_DROP };

#define KD_CMD_NAME_MAX 32

/* Plain fields only: it travels as bytes between processes of one build. */
typedef struct kd_dist_cmd {
    int32_t op, dtype, has_x0, history, mode, has_format;
    uint8_t id[16];
    int64_t k; /* spmv columns, solve right-hand sides */
    double alpha, beta, rtol, atol;
    int64_t maxiter, check_every, restart, timeout_ms;
    char method[KD_CMD_NAME_MAX], precond[KD_CMD_NAME_MAX], format[KD_CMD_NAME_MAX];
} kd_dist_cmd_t;

typedef struct kd_dist_held {
    uint8_t id[16];
    kd_dist_matrix_t *m;
} kd_dist_held_t;

int kd_dist_node_init(kd_dist_node_t *node, kd_ocl_t *ocl, kd_err_t *err)
{
    memset(node, 0, sizeof(*node));
    if (MPI_Comm_dup(MPI_COMM_WORLD, &node->mpi) != MPI_SUCCESS)
        return kd_err_set(err, KD_EINTERNAL, "MPI_Comm_dup failed");
    kd_dist_comm_init(&node->comm, &node->mpi);
    node->ocl = ocl;
    return KD_OK;
}

void kd_dist_node_free(kd_dist_node_t *node)
{
    for (int i = 0; i < node->nheld; i++)
        kd_dist_matrix_free(node->held[i].m);
    free(node->held);
    node->held = NULL;
    node->nheld = node->cap = 0;
    MPI_Comm_free(&node->mpi);
}

static int kd_dist_is_root(const kd_dist_node_t *node)
{
    return node->comm.rank == 0;
}

static int kd_dist_find(const kd_dist_node_t *node, const uint8_t id[16])
{
    for (int i = 0; i < node->nheld; i++)
        if (memcmp(node->held[i].id, id, 16) == 0)
            return i;
    return -1;
}

static void kd_dist_forget(kd_dist_node_t *node, const uint8_t id[16])
{
    int i = kd_dist_find(node, id);
    if (i < 0)
        return;
    kd_dist_matrix_free(node->held[i].m);
    node->held[i] = node->held[--node->nheld];
}

/* A follower's matrix for the command, or KD_ENOTFOUND (rank 0 passes its own). */
static int kd_dist_matrix_for(kd_dist_node_t *node, const kd_dist_cmd_t *cmd, kd_dist_matrix_t **m,
                              kd_err_t *err)
{
    if (kd_dist_is_root(node))
        return *m != NULL ? KD_OK : kd_err_set(err, KD_EINTERNAL, "no matrix passed");
    int i = kd_dist_find(node, cmd->id);
    if (i < 0) {
        char hex[KD_ID_HEX_LEN + 1];
        kd_id_to_hex(cmd->id, hex);
        return kd_err_set(err, KD_ENOTFOUND, "matrix %s is not spread to this rank", hex);
    }
    *m = node->held[i].m;
    return KD_OK;
}

/* Rank 0 sends the header; the others receive it, testing and sleeping (up to 1 ms) between
 * tests rather than spinning in MPI's progress loop: an idle follower takes no core from the
 * device (PoCL) or from the host. */
static int kd_dist_header(kd_dist_node_t *node, kd_dist_cmd_t *cmd)
{
    MPI_Request req;
    if (MPI_Ibcast(cmd, (int)sizeof(*cmd), MPI_BYTE, 0, node->mpi, &req) != MPI_SUCCESS)
        return KD_EINTERNAL;
    if (kd_dist_is_root(node))
        return MPI_Wait(&req, MPI_STATUS_IGNORE) == MPI_SUCCESS ? KD_OK : KD_EINTERNAL;
    long sleep_ns = 10000;
    for (;;) {
        int done = 0;
        if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return KD_EINTERNAL;
        if (done)
            return KD_OK;
        struct timespec ts = {0, sleep_ns};
        nanosleep(&ts, NULL);
        if (sleep_ns < 1000000)
            sleep_ns *= 2;
    }
}

/* ---- put ---------------------------------------------------------------------------------- */

static int kd_dist_op_put(kd_dist_node_t *node, const kd_dist_cmd_t *cmd, const kd_csr_t *A,
                          kd_dist_matrix_t **out, kd_dist_rank_info_t *info, kd_err_t *err)
{
    kd_dist_block_t block;
    kd_dist_matrix_t *m = NULL;
    /* scatter and create agree on their own: a failure there fails on every rank */
    int rc = kd_dist_scatter_blocks(&node->comm, 0, A, &block, err);
    if (rc != KD_OK)
        return rc;
    rc = kd_dist_matrix_create(node->ocl, &node->comm, &block, cmd->has_format ? cmd->format : NULL,
                               (kd_select_mode_t)cmd->mode, &m, err);
    if (rc != KD_OK)
        return rc;
    kd_dist_rank_info_t mine = {
        .rows = m->rows,
        .nnz = (m->block.diag != NULL ? m->block.diag->nnz : 0) +
               (m->block.offd != NULL ? m->block.offd->nnz : 0),
        .ghosts = m->block.ghosts,
        .sends = m->block.neighbours > 0 ? m->block.send_start[m->block.neighbours] : 0,
        .device_bytes = (int64_t)((m->diag != NULL ? m->diag->device_bytes : 0) +
                                  m->offd.device_bytes)};
    if (MPI_Gather(&mine, (int)sizeof(mine), MPI_BYTE, info, (int)sizeof(mine), MPI_BYTE, 0,
                   node->mpi) != MPI_SUCCESS)
        rc = kd_err_set(err, KD_EINTERNAL, "MPI_Gather of the spread's sizes failed");
    if (rc == KD_OK && !kd_dist_is_root(node)) {
        kd_dist_forget(node, cmd->id); /* the same content again: the new copy replaces it */
        if (node->nheld == node->cap) {
            int cap = node->cap > 0 ? 2 * node->cap : 8;
            kd_dist_held_t *h = realloc(node->held, (size_t)cap * sizeof(*h));
            if (h == NULL)
                rc = kd_err_set(err, KD_ENOMEM, "out of host memory for the matrix table");
            else {
                node->held = h;
                node->cap = cap;
            }
        }
        if (rc == KD_OK) {
            memcpy(node->held[node->nheld].id, cmd->id, 16);
            node->held[node->nheld++].m = m;
        }
    }
    rc = kd_dist_agree(&node->comm, rc, err);
    if (rc != KD_OK) {
        if (!kd_dist_is_root(node))
            kd_dist_forget(node, cmd->id);
        else
            kd_dist_matrix_free(m);
        return rc;
    }
    if (kd_dist_is_root(node))
        *out = m;
    return KD_OK;
}

int kd_dist_put(kd_dist_node_t *node, const uint8_t id[16], const kd_csr_t *A, const char *format,
                kd_select_mode_t mode, kd_dist_matrix_t **out, kd_dist_rank_info_t *info,
                kd_err_t *err)
{
    kd_dist_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = KD_CMD_PUT;
    memcpy(cmd.id, id, 16);
    cmd.dtype = A->dtype;
    cmd.mode = mode;
    if (format != NULL && format[0] != '\0') {
        if (strlen(format) >= sizeof(cmd.format))
            return kd_err_set(err, KD_EBADREQ, "format name '%.40s' is too long", format);
        snprintf(cmd.format, sizeof(cmd.format), "%s", format);
        cmd.has_format = 1;
    }
    kd_dist_rank_info_t *all = calloc((size_t)node->comm.size, sizeof(*all));
    if (all == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    int rc = kd_dist_header(node, &cmd);
    if (rc == KD_OK)
        rc = kd_dist_op_put(node, &cmd, A, out, all, err);
    else
        kd_err_set(err, rc, "broadcasting a command failed");
    if (rc == KD_OK && info != NULL)
        memcpy(info, all, (size_t)node->comm.size * sizeof(*all));
    free(all);
    return rc;
}

/* ---- vectors ------------------------------------------------------------------------------ */

/* k columns of the whole vector (root) <-> this rank's rows of each, `ld` values a column
 * (device_rows for device images: a rank without rows keeps its one 0). Collective; agreed. */
static int kd_dist_columns(kd_dist_node_t *node, const kd_dist_matrix_t *m, int64_t k,
                           const void *whole, void *local, int64_t ld, int gather, kd_err_t *err)
{
    const size_t sz = kd_dtype_size(m->block.dtype);
    const int64_t n = m->block.rows;
    int rc = KD_OK;
    for (int64_t c = 0; c < k; c++) {
        const char *w = whole != NULL ? (const char *)whole + (size_t)(c * n) * sz : NULL;
        char *l = (char *)local + (size_t)(c * ld) * sz;
        int crc = gather ? kd_dist_gather_rows(&node->comm, 0, &m->block, l, (void *)w, err)
                         : kd_dist_scatter_rows(&node->comm, 0, &m->block, w, l, err);
        if (rc == KD_OK)
            rc = crc;
    }
    return kd_dist_agree(&node->comm, rc, err);
}

static void *kd_dist_host(int64_t n, int64_t k, kd_dtype_t dtype, kd_err_t *err)
{
    size_t count, bytes;
    if (n < 0 || k < 0 || kd_mul_overflow((size_t)n, (size_t)k, &count) ||
        kd_mul_overflow(count, kd_dtype_size(dtype), &bytes)) {
        kd_err_set(err, KD_ETOOLARGE, "%lld x %lld vectors are too large", (long long)n,
                   (long long)k);
        return NULL;
    }
    void *p = calloc(1, bytes > 0 ? bytes : 1);
    if (p == NULL)
        kd_err_set(err, KD_ENOMEM, "out of host memory for %lld x %lld vectors", (long long)n,
                   (long long)k);
    return p;
}

/* ---- spmv --------------------------------------------------------------------------------- */

static int kd_dist_op_spmv(kd_dist_node_t *node, const kd_dist_cmd_t *cmd, kd_dist_matrix_t *m,
                           const void *x, void *y, kd_err_t *err)
{
    int rc = kd_dist_agree(&node->comm, kd_dist_matrix_for(node, cmd, &m, err), err);
    if (rc != KD_OK)
        return rc;
    const int64_t k = cmd->k, dn = m->device_rows;
    void *xl = kd_dist_host(dn, k, m->block.dtype, err);
    void *yl = xl != NULL ? kd_dist_host(dn, k, m->block.dtype, err) : NULL;
    kd_multivec_t X, Y;
    memset(&X, 0, sizeof(X));
    memset(&Y, 0, sizeof(Y));
    rc = kd_dist_agree(&node->comm, yl != NULL ? KD_OK : err->code, err);
    if (rc == KD_OK)
        rc = kd_dist_columns(node, m, k, x, xl, dn, 0, err);
    if (rc == KD_OK && cmd->beta != 0.0)
        rc = kd_dist_columns(node, m, k, y, yl, dn, 0, err);
    if (rc == KD_OK) {
        int lrc = kd_multivec_alloc(m->ocl, dn, k, m->block.dtype, &X, err);
        if (lrc == KD_OK)
            lrc = kd_multivec_alloc(m->ocl, dn, k, m->block.dtype, &Y, err);
        if (lrc == KD_OK)
            lrc = kd_multivec_write(m->ocl, &X, xl, err);
        if (lrc == KD_OK)
            lrc = kd_multivec_write(m->ocl, &Y, yl, err); /* zeros when beta = 0 */
        rc = kd_dist_agree(&node->comm, lrc, err);
    }
    if (rc == KD_OK) {
        int lrc = kd_dist_spmm(m, cmd->alpha, &X, cmd->beta, &Y, NULL, err);
        if (lrc == KD_OK)
            lrc = kd_multivec_read(m->ocl, &Y, yl, err);
        rc = kd_dist_agree(&node->comm, lrc, err);
    }
    if (rc == KD_OK)
        rc = kd_dist_columns(node, m, k, y, yl, dn, 1, err);
    kd_multivec_release(&X);
    kd_multivec_release(&Y);
    free(xl);
    free(yl);
    return rc;
}

int kd_dist_spmv(kd_dist_node_t *node, const uint8_t id[16], kd_dist_matrix_t *m, int64_t k,
                 double alpha, const void *x, double beta, void *y, kd_err_t *err)
{
    kd_dist_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = KD_CMD_SPMV;
    memcpy(cmd.id, id, 16);
    cmd.dtype = m->block.dtype;
    cmd.k = k;
    cmd.alpha = alpha;
    cmd.beta = beta;
    if (kd_dist_header(node, &cmd) != KD_OK)
        return kd_err_set(err, KD_EINTERNAL, "broadcasting a command failed");
    return kd_dist_op_spmv(node, &cmd, m, x, y, err);
}

/* ---- solve -------------------------------------------------------------------------------- */

static int kd_dist_op_solve(kd_dist_node_t *node, const kd_dist_cmd_t *cmd, kd_dist_matrix_t *m,
                            const void *b, const void *x0, void *x,
                            const kd_dist_solve_args_t *args, kd_solve_result_t *results,
                            kd_err_t *err)
{
    kd_solve_params_t params;
    kd_solve_params_default(&params);
    int rc = kd_dist_matrix_for(node, cmd, &m, err);
    if (rc == KD_OK)
        rc = kd_method_choose(cmd->method, cmd->precond, &params.method, &params.precond, err);
    if ((rc = kd_dist_agree(&node->comm, rc, err)) != KD_OK)
        return rc;
    const int64_t nrhs = cmd->k, rows = m->rows;
    kd_solve_result_t *own = NULL;
    if (results == NULL) /* followers: the same results, not answered */
        results = own = calloc((size_t)nrhs, sizeof(*own));
    /* one spare value a column: a rank without rows still has a valid pointer */
    void *bl = kd_dist_host(rows + 1, nrhs, m->block.dtype, err);
    void *x0l =
        cmd->has_x0 && bl != NULL ? kd_dist_host(rows + 1, nrhs, m->block.dtype, err) : NULL;
    void *xl = bl != NULL ? kd_dist_host(rows + 1, nrhs, m->block.dtype, err) : NULL;
    rc = results == NULL || bl == NULL || xl == NULL || (cmd->has_x0 && x0l == NULL)
             ? (err->code != KD_OK ? err->code : KD_ENOMEM)
             : KD_OK;
    if (rc == KD_ENOMEM && err->message[0] == '\0')
        kd_err_set(err, KD_ENOMEM, "out of host memory");
    rc = kd_dist_agree(&node->comm, rc, err);
    if (rc == KD_OK)
        rc = kd_dist_columns(node, m, nrhs, b, bl, rows, 0, err);
    if (rc == KD_OK && cmd->has_x0)
        rc = kd_dist_columns(node, m, nrhs, x0, x0l, rows, 0, err);
    if (rc == KD_OK) {
        params.rtol = cmd->rtol;
        params.atol = cmd->atol;
        params.maxiter = cmd->maxiter;
        params.check_every = cmd->check_every;
        params.restart = cmd->restart;
        params.record_history = cmd->history;
        if (cmd->timeout_ms > 0) /* each rank's own clock: they need not agree */
            params.deadline_ns = kd_clock_ns() + (uint64_t)cmd->timeout_ms * 1000000u;
        if (args != NULL) {
            params.cancel = args->cancel;
            params.progress = args->progress;
            params.progress_ctx = args->progress_ctx;
        }
        rc = kd_dist_solve(m, nrhs, bl, cmd->has_x0 ? x0l : NULL, xl, &params, results, err);
        rc = kd_dist_agree(&node->comm, rc, err);
    }
    if (rc == KD_OK)
        rc = kd_dist_columns(node, m, nrhs, x, xl, rows, 1, err);
    if (own != NULL) {
        for (int64_t j = 0; j < nrhs; j++)
            kd_solve_result_free(&own[j]);
        free(own);
    }
    free(bl);
    free(x0l);
    free(xl);
    return rc;
}

static int kd_dist_name(char *dst, const char *src, const char *what, kd_err_t *err)
{
    if (src == NULL)
        src = "";
    if (strlen(src) >= KD_CMD_NAME_MAX)
        return kd_err_set(err, KD_EBADREQ, "%s name '%.40s' is too long", what, src);
    snprintf(dst, KD_CMD_NAME_MAX, "%s", src);
    return KD_OK;
}

int kd_dist_solve_cmd(kd_dist_node_t *node, const uint8_t id[16], kd_dist_matrix_t *m, int64_t nrhs,
                      const void *b, const void *x0, void *x, const kd_dist_solve_args_t *args,
                      kd_solve_result_t *results, kd_err_t *err)
{
    kd_dist_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = KD_CMD_SOLVE;
    memcpy(cmd.id, id, 16);
    cmd.dtype = m->block.dtype;
    cmd.k = nrhs;
    cmd.has_x0 = x0 != NULL;
    cmd.history = args->history;
    cmd.rtol = args->rtol;
    cmd.atol = args->atol;
    cmd.maxiter = args->maxiter;
    cmd.check_every = args->check_every;
    cmd.restart = args->restart;
    cmd.timeout_ms = args->timeout_ms;
    int rc = kd_dist_name(cmd.method, args->method, "method", err);
    if (rc == KD_OK)
        rc = kd_dist_name(cmd.precond, args->preconditioner, "preconditioner", err);
    if (rc != KD_OK)
        return rc;
    if (kd_dist_header(node, &cmd) != KD_OK)
        return kd_err_set(err, KD_EINTERNAL, "broadcasting a command failed");
    return kd_dist_op_solve(node, &cmd, m, b, x0, x, args, results, err);
}

/* ---- drop, stop, the loop ----------------------------------------------------------------- */

void kd_dist_drop(kd_dist_node_t *node, const uint8_t id[16])
{
    kd_dist_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = KD_CMD_DROP;
    memcpy(cmd.id, id, 16);
    if (kd_dist_header(node, &cmd) != KD_OK)
        return;
    kd_err_t err = {0};
    (void)kd_dist_agree(&node->comm, KD_OK, &err);
}

void kd_dist_stop(kd_dist_node_t *node)
{
    kd_dist_cmd_t cmd;
    memset(&cmd, 0, sizeof(cmd));
    cmd.op = KD_CMD_STOP;
    (void)kd_dist_header(node, &cmd);
}

int kd_dist_follow(kd_dist_node_t *node)
{
    for (;;) {
        kd_dist_cmd_t cmd;
        memset(&cmd, 0, sizeof(cmd));
        if (kd_dist_header(node, &cmd) != KD_OK) {
            KD_ERROR("dist", "rank %d: receiving a command failed", node->comm.rank);
            return 1;
        }
        kd_err_t err = {0};
        int rc = KD_OK;
        switch (cmd.op) {
        case KD_CMD_STOP:
            KD_INFO("dist", "rank %d: stop", node->comm.rank);
            return 0;
        case KD_CMD_PUT:
            rc = kd_dist_op_put(node, &cmd, NULL, NULL, NULL, &err);
            break;
        case KD_CMD_SPMV:
            rc = kd_dist_op_spmv(node, &cmd, NULL, NULL, NULL, &err);
            break;
        case KD_CMD_SOLVE:
            rc = kd_dist_op_solve(node, &cmd, NULL, NULL, NULL, NULL, NULL, NULL, &err);
            break;
        case KD_CMD_DROP:
            kd_dist_forget(node, cmd.id);
            rc = kd_dist_agree(&node->comm, KD_OK, &err);
            break;
        default:
            /* both sides are one build: this is a bug, and the job cannot go on in step */
            KD_ERROR("dist", "rank %d: unknown command %d", node->comm.rank, (int)cmd.op);
            return 1;
        }
        if (rc != KD_OK)
            KD_DEBUG("dist", "rank %d: command %d: %s", node->comm.rank, (int)cmd.op, err.message);
    }
}
