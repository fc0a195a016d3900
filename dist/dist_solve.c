/*
 * A solve spread over ranks (dist_matrix.h): the host's answers and checks on the whole matrix
 * and the whole vectors, taken alike on every rank, then kd_solve on each rank's rows with
 * kd_solve_spread_t (the halo exchange as its SpMV, comm as its reductions), then the device
 * columns' results back in the caller's order.
 *
 *   check    the method and preconditioner against the whole matrix's scan (block summary),
 *            with the same words as a solve on one process
 *   scan     each column's first NaN/Inf in b and x0 (global row), ||b|| from the sum of squares
 *            over the ranks (rescaled when it over- or underflows, as solve.c does)
 *   answer   b = 0, NaN/Inf in b or x0, a matrix holding NaN/Inf: on the host, every rank alike
 *   solve    the rest, packed as device columns of device_rows entries (0 on a rank without rows)
 */
#include "dist/dist_matrix.h"
#include "dist/summary.h"
#include "solver/methods/method.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the host knows of each column of b and x0 once the ranks have pooled their scans. */
typedef struct kd_dist_columns {
    int64_t *bad;    /* 2 * nrhs: first NaN/Inf row in b_j, then in x0_j (INT64_MAX: none) */
    double *bad_val; /* 2 * nrhs: its value */
    double *norm;    /* nrhs: ||b_j|| */
} kd_dist_columns_t;

static int kd_dist_mpi_status(int st, const char *what, kd_err_t *err)
{
    return st == MPI_SUCCESS ? KD_OK : kd_err_set(err, KD_EINTERNAL, "%s failed", what);
}

/* The first non-finite entry of v (n values) as a global row, INT64_MAX for none; the sum of
 * squares and the largest magnitude in ss and vmax. */
static int64_t kd_dist_scan(const void *v, kd_dtype_t t, int64_t n, int64_t first_row, double *ss,
                            double *vmax)
{
    *ss = *vmax = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double x = kd_load_real(v, t, (size_t)i);
        if (!isfinite(x))
            return first_row + i;
        *ss += x * x;
        *vmax = fabs(x) > *vmax ? fabs(x) : *vmax;
    }
    return INT64_MAX;
}

/* Pool every column's scan over the ranks (scan step). */
static int kd_dist_scan_columns(kd_dist_matrix_t *m, int64_t nrhs, const void *b, const void *x0,
                                kd_dist_columns_t *cols, kd_err_t *err)
{
    const kd_dtype_t t = m->block.dtype;
    const size_t colbytes = (size_t)m->rows * kd_dtype_size(t);
    const int64_t lo = m->block.row_start[m->block.rank];
    const MPI_Comm mpi = kd_dist_comm_mpi(m->comm);
    double *ss = calloc((size_t)nrhs, sizeof(double)), *vmax = calloc((size_t)nrhs, sizeof(double));
    double *local_max = calloc((size_t)nrhs, sizeof(double)), sink;
    int64_t *mine = calloc(2 * (size_t)nrhs, sizeof(int64_t));
    int rc = KD_OK;
    if (ss == NULL || vmax == NULL || local_max == NULL || mine == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld columns", (long long)nrhs);
        goto out;
    }
    for (int64_t j = 0; j < nrhs; j++) {
        mine[j] = kd_dist_scan((const char *)b + (size_t)j * colbytes, t, m->rows, lo, &ss[j],
                               &local_max[j]);
        mine[nrhs + j] = x0 == NULL ? INT64_MAX
                                    : kd_dist_scan((const char *)x0 + (size_t)j * colbytes, t,
                                                   m->rows, lo, &sink, &sink);
    }
    if ((rc = kd_dist_mpi_status(
             MPI_Allreduce(mine, cols->bad, (int)(2 * nrhs), MPI_INT64_T, MPI_MIN, mpi),
             "MPI_Allreduce (first NaN/Inf)", err)) != KD_OK ||
        (rc =
             kd_dist_mpi_status(MPI_Allreduce(local_max, vmax, (int)nrhs, MPI_DOUBLE, MPI_MAX, mpi),
                                "MPI_Allreduce (largest entry)", err)) != KD_OK ||
        (rc = m->comm->sum(m->comm, ss, nrhs, err)) != KD_OK)
        goto out;
    /* The value of each first NaN/Inf, from the rank that holds it. */
    kd_dist_partition_t part = {m->block.ranks, m->block.rows, m->block.row_start};
    for (int64_t i = 0; rc == KD_OK && i < 2 * nrhs; i++) {
        if (cols->bad[i] == INT64_MAX)
            continue;
        const int owner = kd_dist_partition_owner(&part, cols->bad[i]);
        const void *v = i < nrhs ? b : x0;
        const int64_t j = i < nrhs ? i : i - nrhs;
        if (owner == m->comm->rank)
            cols->bad_val[i] = kd_load_real((const char *)v + (size_t)j * colbytes, t,
                                            (size_t)(cols->bad[i] - lo));
        rc = kd_dist_mpi_status(MPI_Bcast(&cols->bad_val[i], 1, MPI_DOUBLE, owner, mpi),
                                "MPI_Bcast (a NaN/Inf entry)", err);
    }
    /* ||b||: sqrt of the sum of squares, unless it over- or underflowed: then scaled. */
    int rescale = 0;
    for (int64_t j = 0; j < nrhs; j++) {
        const int ok = vmax[j] == 0.0 || (isfinite(ss[j]) && ss[j] >= 1e-280 && vmax[j] <= 1e150);
        cols->norm[j] = vmax[j] == 0.0 ? 0.0 : sqrt(ss[j]);
        rescale |= !ok && cols->bad[j] == INT64_MAX;
        ss[j] = 0.0;
        if (!ok && cols->bad[j] == INT64_MAX)
            for (int64_t i = 0; i < m->rows; i++) {
                const double s =
                    kd_load_real((const char *)b + (size_t)j * colbytes, t, (size_t)i) / vmax[j];
                ss[j] += s * s;
            }
    }
    if (rc == KD_OK && rescale && (rc = m->comm->sum(m->comm, ss, nrhs, err)) == KD_OK)
        for (int64_t j = 0; j < nrhs; j++)
            if (ss[j] != 0.0)
                cols->norm[j] = vmax[j] * sqrt(ss[j]);
out:
    free(ss);
    free(vmax);
    free(local_max);
    free(mine);
    return rc;
}

/* The method and preconditioner against the whole matrix (check step). */
static int kd_dist_check(const kd_dist_matrix_t *m, const kd_solve_params_t *p, kd_err_t *err)
{
    if (p->method == NULL || p->precond == NULL)
        return kd_err_set(err, KD_EBADREQ, "solve needs a method and a preconditioner");
    kd_matrix_t whole;
    memset(&whole, 0, sizeof(whole));
    whole.rows = m->block.rows;
    whole.cols = m->block.cols;
    whole.nnz = m->block.nnz;
    whole.dtype = m->block.dtype;
    kd_dist_summary_scan(&m->block.summary, &whole.scan);
    int rc = kd_method_check_matrix(p->method, &whole, err);
    if (rc == KD_OK && p->precond->check != NULL)
        rc = p->precond->check(&whole, kd_method_needs_symmetry(p->method), err);
    const kd_dist_summary_t *s = &m->block.summary;
    if (rc == KD_OK && (p->precond->forms & KD_PRECOND_DIAGONAL) != 0 && s->bad_diagonal_row >= 0 &&
        s->non_finite_row < 0)
        rc = kd_err_set(err, KD_EBADREQ,
                        "%s: the diagonal entry of row %lld is %g (%s): Jacobi preconditioning "
                        "divides by every diagonal entry",
                        p->precond->name, (long long)s->bad_diagonal_row, s->bad_diagonal_value,
                        isfinite(s->bad_diagonal_value) ? "zero or missing" : "not finite");
    return rc;
}

/* Column j answered on the host (answer step): 1, with x_j and results[j] written, or 0. */
static int kd_dist_answer(const kd_dist_matrix_t *m, const kd_dist_columns_t *cols, int64_t nrhs,
                          int64_t j, const void *x0, void *x, int record_history,
                          kd_solve_result_t *res)
{
    const kd_dtype_t t = m->block.dtype;
    const size_t colbytes = (size_t)m->rows * kd_dtype_size(t);
    const kd_dist_summary_t *s = &m->block.summary;
    void *xj = (char *)x + (size_t)j * colbytes;
    const void *x0j = x0 != NULL ? (const char *)x0 + (size_t)j * colbytes : NULL;
    res->b_norm = cols->norm[j];
    if (cols->bad[j] != INT64_MAX || cols->bad[nrhs + j] != INT64_MAX) {
        const int in_b = cols->bad[j] != INT64_MAX;
        const int64_t at = in_b ? j : nrhs + j;
        res->status = KD_SOLVE_NON_FINITE;
        snprintf(res->message, sizeof(res->message), "%s[%lld] = %g: %s holds NaN or Inf",
                 in_b ? "b" : "x0", (long long)cols->bad[at], cols->bad_val[at],
                 in_b ? "the right-hand side" : "the initial guess");
        res->b_norm = res->residual_norm = res->relative_residual = NAN;
    } else if (cols->norm[j] == 0.0) {
        for (int64_t i = 0; i < m->rows; i++)
            kd_store_real(xj, t, (size_t)i, 0.0);
        res->status = KD_SOLVE_CONVERGED;
        if (record_history && (res->history = malloc(sizeof(double))) != NULL) {
            res->history[0] = 0.0;
            res->history_len = 1;
        }
        return 1;
    } else if (s->non_finite_row >= 0) {
        res->status = KD_SOLVE_NON_FINITE;
        snprintf(res->message, sizeof(res->message),
                 "the matrix holds %g at row %lld, column %lld: A is not finite",
                 s->non_finite_value, (long long)s->non_finite_row, (long long)s->non_finite_col);
        res->residual_norm = res->relative_residual = NAN;
    } else {
        return 0;
    }
    for (int64_t i = 0; i < m->rows; i++)
        kd_store_real(xj, t, (size_t)i, x0j != NULL ? kd_load_real(x0j, t, (size_t)i) : 0.0);
    return 1;
}

static int kd_dist_solve_spmm(void *ctx, kd_ocl_t *ocl, double alpha, const kd_multivec_t *x,
                              double beta, kd_multivec_t *y, const unsigned char *which,
                              kd_err_t *err)
{
    (void)ocl;
    return kd_dist_spmm(ctx, alpha, x, beta, y, which, err);
}

/* The caller's progress callback, told the caller's column numbers. */
typedef struct kd_dist_progress {
    kd_solve_progress_fn fn;
    void *ctx;
    const int64_t *rhs;
} kd_dist_progress_t;

static int kd_dist_progress(void *ctx, int64_t rhs, int64_t iteration, double residual_norm)
{
    const kd_dist_progress_t *p = ctx;
    return p->fn(p->ctx, p->rhs[rhs], iteration, residual_norm);
}

/* The device columns `which` (kk of them) through kd_solve (solve step). */
static int kd_dist_solve_columns(kd_dist_matrix_t *m, const int64_t *which, int64_t kk,
                                 const kd_dist_columns_t *cols, const void *b, const void *x0,
                                 void *x, const kd_solve_params_t *params,
                                 kd_solve_result_t *results, kd_err_t *err)
{
    const kd_dtype_t t = m->block.dtype;
    const size_t v = kd_dtype_size(t), colbytes = (size_t)m->rows * v;
    const size_t devbytes = (size_t)m->device_rows * v;
    char *pack = calloc((size_t)kk * 3, devbytes); /* b, x0, x; a rank without rows: zeros */
    double *norms = malloc((size_t)kk * sizeof(double));
    kd_solve_result_t *res = calloc((size_t)kk, sizeof(*res));
    int rc = KD_OK;
    if (pack == NULL || norms == NULL || res == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld columns", (long long)kk);
        goto out;
    }
    char *pb = pack, *px0 = pack + (size_t)kk * devbytes, *px = px0 + (size_t)kk * devbytes;
    for (int64_t c = 0; c < kk; c++) {
        memcpy(pb + (size_t)c * devbytes, (const char *)b + (size_t)which[c] * colbytes, colbytes);
        if (x0 != NULL)
            memcpy(px0 + (size_t)c * devbytes, (const char *)x0 + (size_t)which[c] * colbytes,
                   colbytes);
        norms[c] = cols->norm[which[c]];
    }
    kd_solve_spread_t spread = {m->comm, m->block.rows, m->block.nnz, norms, kd_dist_solve_spmm, m};
    kd_dist_progress_t progress = {params->progress, params->progress_ctx, which};
    kd_solve_params_t p = *params;
    p.spread = &spread;
    if (params->progress != NULL) {
        p.progress = kd_dist_progress;
        p.progress_ctx = &progress;
    }
    rc = kd_solve(m->ocl, m->diag, kk, pb, x0 != NULL ? px0 : NULL, px, &p, res, err);
    for (int64_t c = 0; c < kk; c++) {
        memcpy((char *)x + (size_t)which[c] * colbytes, px + (size_t)c * devbytes, colbytes);
        results[which[c]] = res[c];
    }
out:
    free(pack);
    free(norms);
    free(res);
    return rc;
}

int kd_dist_solve(kd_dist_matrix_t *m, int64_t nrhs, const void *b, const void *x0, void *x,
                  const kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err)
{
    assert(m != NULL && b != NULL && x != NULL && params != NULL && results != NULL);
    if (nrhs < 1)
        return kd_err_set(err, KD_EBADREQ, "nrhs = %lld: at least one right-hand side",
                          (long long)nrhs);
    memset(results, 0, (size_t)nrhs * sizeof(*results));
    int rc = kd_dist_check(m, params, err);
    if (rc != KD_OK)
        return rc; /* the same on every rank: the summary and the parameters are */
    kd_dist_columns_t cols = {calloc(2 * (size_t)nrhs, sizeof(int64_t)),
                              calloc(2 * (size_t)nrhs, sizeof(double)),
                              calloc((size_t)nrhs, sizeof(double))};
    int64_t *which = calloc((size_t)nrhs, sizeof(int64_t)), kk = 0;
    if (cols.bad == NULL || cols.bad_val == NULL || cols.norm == NULL || which == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld columns", (long long)nrhs);
    rc = kd_dist_agree(m->comm, rc, err);
    if (rc == KD_OK)
        rc = kd_dist_scan_columns(m, nrhs, b, x0, &cols, err);
    const int64_t maxiter = params->maxiter == KD_SOLVE_MAXITER_AUTO
                                ? KD_SOLVE_MAXITER_PER_ROW * m->block.rows
                                : params->maxiter;
    for (int64_t j = 0; rc == KD_OK && j < nrhs; j++) {
        results[j].maxiter = maxiter;
        if (!kd_dist_answer(m, &cols, nrhs, j, x0, x, params->record_history, &results[j]))
            which[kk++] = j;
    }
    if (rc == KD_OK && kk > 0) {
        rc = kd_dist_solve_columns(m, which, kk, &cols, b, x0, x, params, results, err);
        /* cancel and timeout are agreed already; anything else may be one rank's alone */
        const int stop = rc == KD_ECANCELLED || rc == KD_ETIMEOUT;
        int agreed = kd_dist_agree(m->comm, stop ? KD_OK : rc, err);
        if (!stop)
            rc = agreed;
    }
    free(cols.bad);
    free(cols.bad_val);
    free(cols.norm);
    free(which);
    return rc;
}
