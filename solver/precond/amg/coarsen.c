/*
 * The host half of smoothed aggregation (solver/precond/amg/amg.h): strength, aggregates, the
 * smoothed prolongator, and the small dense pieces (the Lanczos tridiagonal's largest eigenvalue,
 * the coarsest level's inverse). All O(nnz) except the dense inverse, which only the coarsest level
 * (a few hundred rows) meets.
 */
#include "solver/precond/amg/amg.h"

#include "common/checked.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void kd_amg_options_default(kd_amg_options_t *opt)
{
    assert(opt != NULL);
    opt->threshold = 0.0;
    opt->max_levels = 10;
    opt->block_size = 1;
    opt->coarse_size = 300;
    opt->degree = 2;
    opt->lower = 0.1;
    opt->upper = 1.1;
    opt->lanczos_steps = 12;
    opt->aggregation = 0; /* the device's: more CG iterations on lap2d (docs/BENCHMARKS.md) */
    opt->fused = 1;
    opt->tail_rows = 0; /* the single-group tail: slower on the H100 (bench/results/issue13/run8) */
}

/* The node graph for block_size unknowns a node: entry (I, J) the Frobenius norm of block
 * (I, J) of A, canonical. For block_size 1, |A|. */
static kd_csr_t *kd_amg_node_graph(const kd_csr_t *A, int bs, kd_err_t *err)
{
    const int64_t nodes = A->rows / bs;
    int64_t *count = calloc((size_t)nodes + 1, sizeof(int64_t));
    int32_t *mark = kd_malloc_array((size_t)nodes + 1, sizeof(int32_t));
    int32_t *slot = kd_malloc_array((size_t)nodes + 1, sizeof(int32_t));
    kd_csr_t *G = NULL;
    if (count == NULL || mark == NULL || slot == NULL) {
        kd_err_set(err, KD_ENOMEM, "amg: out of host memory for the node graph");
        goto done;
    }
    for (int64_t J = 0; J < nodes; J++)
        mark[J] = -1;
    int64_t total = 0;
    for (int64_t I = 0; I < nodes; I++) {
        for (int64_t i = I * bs; i < (I + 1) * bs; i++)
            for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
                const int32_t J = A->indices[k] / bs;
                if (mark[J] != I) {
                    mark[J] = (int32_t)I;
                    count[I]++;
                }
            }
        total += count[I];
    }
    if (kd_csr_alloc(nodes, nodes, total, KD_DTYPE_F64, &G, err) != KD_OK)
        goto done;
    double *gv = G->values;
    G->indptr[0] = 0;
    for (int64_t I = 0; I < nodes; I++)
        G->indptr[I + 1] = G->indptr[I] + (int32_t)count[I];
    for (int64_t J = 0; J < nodes; J++)
        mark[J] = -1;
    for (int64_t I = 0; I < nodes; I++) {
        int32_t m = 0;
        const int32_t base = G->indptr[I];
        for (int64_t i = I * bs; i < (I + 1) * bs; i++)
            for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
                const int32_t J = A->indices[k] / bs;
                if (mark[J] != I) {
                    mark[J] = (int32_t)I;
                    slot[J] = base + m;
                    G->indices[base + m] = J;
                    gv[base + m] = 0.0;
                    m++;
                }
                const double v = kd_csr_value(A, k);
                gv[slot[J]] += v * v;
            }
        /* columns ascending (rows of A are sorted, so for bs = 1 they already are) */
        for (int32_t a = base + 1; a < base + m; a++) {
            const int32_t c = G->indices[a];
            const double v = gv[a];
            int32_t b = a - 1;
            while (b >= base && G->indices[b] > c) {
                G->indices[b + 1] = G->indices[b];
                gv[b + 1] = gv[b];
                b--;
            }
            G->indices[b + 1] = c;
            gv[b + 1] = v;
        }
        for (int32_t e = base; e < base + m; e++)
            gv[e] = sqrt(gv[e]);
    }
done:
    free(count);
    free(mark);
    free(slot);
    return G;
}

/* |g_ii| of every row (0 where missing). */
static double *kd_amg_abs_diagonal(const kd_csr_t *A)
{
    double *d = kd_malloc_array((size_t)A->rows + 1, sizeof(double));
    if (d == NULL)
        return NULL;
    for (int64_t i = 0; i < A->rows; i++) {
        d[i] = 0.0;
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            if (A->indices[k] == i)
                d[i] = fabs(kd_csr_value(A, k));
    }
    return d;
}

/* Entry k of row i is a strong connection (never the diagonal). */
static int kd_amg_strong(const kd_csr_t *A, const double *diag, double threshold, int64_t i,
                         int32_t k)
{
    const int32_t j = A->indices[k];
    if (j == i)
        return 0;
    const double v = fabs(kd_csr_value(A, k));
    if (threshold <= 0.0)
        return v != 0.0;
    return v >= threshold * sqrt(diag[i] * diag[j]);
}

/* The three passes on graph G (nodes): agg[I] >= 0, or -1 for a node with no strong neighbour. */
static int kd_amg_aggregate_graph(const kd_csr_t *G, double threshold, int32_t *agg, int64_t *naggs,
                                  kd_err_t *err)
{
    const int64_t n = G->rows;
    double *diag = kd_amg_abs_diagonal(G);
    unsigned char *pass1 = calloc((size_t)n + 1, 1), *isolated = calloc((size_t)n + 1, 1);
    if (diag == NULL || pass1 == NULL || isolated == NULL) {
        free(diag);
        free(pass1);
        free(isolated);
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory aggregating %lld nodes",
                          (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        agg[i] = -1;
        isolated[i] = 1;
        for (int32_t k = G->indptr[i]; k < G->indptr[i + 1] && isolated[i]; k++)
            if (kd_amg_strong(G, diag, threshold, i, k))
                isolated[i] = 0;
    }
    int32_t count = 0;
    /* Pass 1: roots whose whole strong neighbourhood is free. */
    for (int64_t i = 0; i < n; i++) {
        if (agg[i] >= 0 || isolated[i])
            continue;
        int free_all = 1;
        for (int32_t k = G->indptr[i]; k < G->indptr[i + 1] && free_all; k++)
            if (kd_amg_strong(G, diag, threshold, i, k) && agg[G->indices[k]] >= 0)
                free_all = 0;
        if (!free_all)
            continue;
        agg[i] = count;
        pass1[i] = 1;
        for (int32_t k = G->indptr[i]; k < G->indptr[i + 1]; k++)
            if (kd_amg_strong(G, diag, threshold, i, k)) {
                agg[G->indices[k]] = count;
                pass1[G->indices[k]] = 1;
            }
        count++;
    }
    /* Pass 2: join a neighbouring aggregate of pass 1. */
    for (int64_t i = 0; i < n; i++) {
        if (agg[i] >= 0 || isolated[i])
            continue;
        for (int32_t k = G->indptr[i]; k < G->indptr[i + 1]; k++) {
            const int32_t j = G->indices[k];
            if (kd_amg_strong(G, diag, threshold, i, k) && pass1[j]) {
                agg[i] = agg[j];
                break;
            }
        }
    }
    /* Pass 3: what is left, with its free neighbours. */
    for (int64_t i = 0; i < n; i++) {
        if (agg[i] >= 0 || isolated[i])
            continue;
        agg[i] = count;
        for (int32_t k = G->indptr[i]; k < G->indptr[i + 1]; k++)
            if (kd_amg_strong(G, diag, threshold, i, k) && agg[G->indices[k]] < 0)
                agg[G->indices[k]] = count;
        count++;
    }
    free(diag);
    free(pass1);
    free(isolated);
    *naggs = count;
    return KD_OK;
}

int kd_amg_aggregate(const kd_csr_t *A, double threshold, int block_size, int32_t *agg,
                     int64_t *naggs, kd_err_t *err)
{
    assert(A != NULL && agg != NULL && naggs != NULL && A->rows == A->cols);
    const int bs = block_size > 0 ? block_size : 1;
    if (A->rows % bs != 0)
        return kd_err_set(err, KD_EBADREQ, "amg: block_size %d does not divide %lld rows", bs,
                          (long long)A->rows);
    if (bs == 1)
        return kd_amg_aggregate_graph(A, threshold, agg, naggs, err);
    kd_csr_t *G = kd_amg_node_graph(A, bs, err);
    if (G == NULL)
        return err->code != KD_OK ? err->code : KD_ENOMEM;
    int32_t *node = kd_malloc_array((size_t)G->rows + 1, sizeof(int32_t));
    int64_t nodes_aggs = 0;
    int rc = node != NULL ? kd_amg_aggregate_graph(G, threshold, node, &nodes_aggs, err)
                          : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    for (int64_t i = 0; rc == KD_OK && i < A->rows; i++)
        agg[i] = node[i / bs] < 0 ? -1 : node[i / bs] * bs + (int32_t)(i % bs);
    *naggs = nodes_aggs * bs;
    free(node);
    kd_csr_free(G);
    return rc;
}

/* Sort one row's (column, value) pairs by column: rows of P are short. */
static void kd_amg_sort_row(int32_t *cols, double *vals, int32_t m)
{
    for (int32_t a = 1; a < m; a++) {
        const int32_t c = cols[a];
        const double v = vals[a];
        int32_t b = a - 1;
        while (b >= 0 && cols[b] > c) {
            cols[b + 1] = cols[b];
            vals[b + 1] = vals[b];
            b--;
        }
        cols[b + 1] = c;
        vals[b + 1] = v;
    }
}

int kd_amg_prolongator(const kd_csr_t *A, const int32_t *agg, int64_t naggs, double omega,
                       kd_csr_t **P, kd_err_t *err)
{
    assert(A != NULL && agg != NULL && P != NULL && A->rows == A->cols);
    const int64_t n = A->rows;
    *P = NULL;
    double *scale = calloc((size_t)naggs + 1, sizeof(double)); /* 1/sqrt(|aggregate|) */
    int32_t *slot = kd_malloc_array((size_t)naggs + 1, sizeof(int32_t));
    int64_t *rowptr = kd_malloc_array((size_t)n + 1, sizeof(int64_t));
    int32_t *rcols = NULL;
    double *rvals = NULL;
    kd_csr_t *out = NULL;
    int rc = KD_OK;
    if (scale == NULL || slot == NULL || rowptr == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "amg: out of host memory for a prolongator");
        goto done;
    }
    for (int64_t i = 0; i < n; i++)
        if (agg[i] >= 0)
            scale[agg[i]] += 1.0;
    for (int64_t j = 0; j < naggs; j++) {
        scale[j] = scale[j] > 0.0 ? 1.0 / sqrt(scale[j]) : 0.0;
        slot[j] = -1;
    }
    /* Row i of P: the distinct aggregates of row i's columns (and i's own): at most the row's
     * length + 1 entries. Sized first, filled in a second pass. */
    rowptr[0] = 0;
    int32_t longest = 1;
    for (int64_t i = 0; i < n; i++) {
        int32_t m = 0;
        for (int32_t k = A->indptr[i]; k <= A->indptr[i + 1]; k++) {
            const int32_t a = k < A->indptr[i + 1] ? agg[A->indices[k]] : agg[i];
            if (a >= 0 && slot[a] != (int32_t)i) {
                slot[a] = (int32_t)i;
                m++;
            }
        }
        rowptr[i + 1] = rowptr[i] + m;
        if (m > longest)
            longest = m;
    }
    for (int64_t j = 0; j < naggs; j++)
        slot[j] = -1;
    if (rowptr[n] > KD_CSR_INDEX_MAX) {
        rc = kd_err_set(err, KD_ETOOLARGE, "amg: the prolongator would have %lld entries",
                        (long long)rowptr[n]);
        goto done;
    }
    rc = kd_csr_alloc(n, naggs, rowptr[n], A->dtype, &out, err);
    if (rc != KD_OK)
        goto done;
    rcols = kd_malloc_array((size_t)longest, sizeof(int32_t));
    rvals = kd_malloc_array((size_t)longest, sizeof(double));
    if (rcols == NULL || rvals == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "amg: out of host memory for a prolongator");
        goto done;
    }
    out->indptr[0] = 0;
    for (int64_t i = 0; i < n; i++) {
        double aii = 0.0;
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++)
            if (A->indices[k] == i)
                aii = kd_csr_value(A, k);
        if (aii == 0.0 || !isfinite(aii)) {
            rc = kd_err_set(err, KD_EBADREQ,
                            "amg: the diagonal entry of row %lld is %g: smoothed aggregation "
                            "divides by every diagonal entry",
                            (long long)i, aii);
            goto done;
        }
        const double w = omega / aii;
        int32_t m = 0;
        /* T's own entry, then - omega/a_ii * a_ij * T_j for every entry of the row. */
        if (agg[i] >= 0) {
            slot[agg[i]] = m;
            rcols[m] = agg[i];
            rvals[m++] = scale[agg[i]];
        }
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
            const int32_t a = agg[A->indices[k]];
            if (a < 0)
                continue;
            if (slot[a] < 0 || rcols[slot[a]] != a) {
                slot[a] = m;
                rcols[m] = a;
                rvals[m++] = 0.0;
            }
            rvals[slot[a]] -= w * kd_csr_value(A, k) * scale[a];
        }
        for (int32_t e = 0; e < m; e++)
            slot[rcols[e]] = -1;
        kd_amg_sort_row(rcols, rvals, m);
        const int64_t base = out->indptr[i];
        for (int32_t e = 0; e < m; e++) {
            out->indices[base + e] = rcols[e];
            kd_store_real(out->values, out->dtype, (size_t)(base + e), rvals[e]);
        }
        out->indptr[i + 1] = (int32_t)(base + m);
    }
    *P = out;
    out = NULL;
done:
    kd_csr_free(out);
    free(scale);
    free(slot);
    free(rowptr);
    free(rcols);
    free(rvals);
    return rc;
}

/* Eigenvalues of T below x (Sturm count through the LDL^T pivots). */
static int kd_amg_sturm_count(const double *alpha, const double *beta, int m, double x)
{
    int count = 0;
    double d = 1.0;
    for (int i = 0; i < m; i++) {
        const double b2 = i > 0 ? beta[i - 1] * beta[i - 1] : 0.0;
        d = alpha[i] - x - (i > 0 ? b2 / d : 0.0);
        if (d == 0.0)
            d = -1e-300;
        if (d < 0.0)
            count++;
    }
    return count;
}

double kd_amg_tridiagonal_max(const double *alpha, const double *beta, int m)
{
    assert(alpha != NULL && m > 0);
    double lo = alpha[0], hi = alpha[0];
    for (int i = 0; i < m; i++) {
        const double r = (i > 0 ? fabs(beta[i - 1]) : 0.0) + (i + 1 < m ? fabs(beta[i]) : 0.0);
        if (alpha[i] - r < lo)
            lo = alpha[i] - r;
        if (alpha[i] + r > hi)
            hi = alpha[i] + r;
    }
    for (int it = 0; it < 200 && hi - lo > 1e-12 * fabs(hi); it++) {
        const double mid = 0.5 * (lo + hi);
        if (kd_amg_sturm_count(alpha, beta, m, mid) == m)
            hi = mid; /* every eigenvalue is below mid */
        else
            lo = mid;
    }
    return hi;
}

int kd_amg_dense_inverse(double *A, int64_t n, kd_err_t *err)
{
    assert(A != NULL && n >= 0);
    /* Cholesky A = L L^T in the lower triangle. */
    for (int64_t j = 0; j < n; j++) {
        double s = A[j * n + j];
        for (int64_t k = 0; k < j; k++)
            s -= A[j * n + k] * A[j * n + k];
        if (!(s > 0.0) || !isfinite(s))
            return kd_err_set(err, KD_ENOTSPD,
                              "amg: the coarsest level (%lld rows) is not positive definite "
                              "(Cholesky pivot %lld is %g)",
                              (long long)n, (long long)j, s);
        const double ljj = sqrt(s);
        A[j * n + j] = ljj;
        for (int64_t i = j + 1; i < n; i++) {
            double t = A[i * n + j];
            for (int64_t k = 0; k < j; k++)
                t -= A[i * n + k] * A[j * n + k];
            A[i * n + j] = t / ljj;
        }
    }
    /* X = L^-1 by rows, into the upper triangle's room as X^T (a scratch copy of L's rows is not
     * needed: row i of X needs rows k < i of X and row i of L): X[i][j] for j <= i, kept in a
     * separate buffer so every inner loop runs along a row (contiguous, vectorised); the
     * column-order loops this replaced strode through memory (5.5 ms for 219 rows on the H200
     * host, a refresh's whole coarsest step). */
    double *X = calloc((size_t)(n * n) + 1, sizeof(double));
    if (X == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory for the coarsest level");
    for (int64_t i = 0; i < n; i++) {
        double *xi = X + i * n;
        const double *li = A + i * n;
        for (int64_t k = 0; k < i; k++) { /* xi -= L[i][k] X[k], X[k] nonzero in [0, k] */
            const double lik = li[k];
            const double *xk = X + k * n;
            for (int64_t j = 0; j <= k; j++)
                xi[j] -= lik * xk[j];
        }
        xi[i] += 1.0;
        const double inv = 1.0 / li[i];
        for (int64_t j = 0; j <= i; j++)
            xi[j] *= inv;
    }
    /* A^-1 = X^T X: the sum over k of row k's outer product with itself, into the lower
     * triangle of A (L is done with), then mirrored. */
    for (int64_t i = 0; i < n; i++)
        memset(A + i * n, 0, (size_t)(i + 1) * sizeof(double));
    for (int64_t k = 0; k < n; k++) {
        const double *xk = X + k * n;
        for (int64_t i = 0; i <= k; i++) {
            const double xki = xk[i];
            double *ai = A + i * n;
            for (int64_t j = 0; j <= i; j++)
                ai[j] += xki * xk[j];
        }
    }
    free(X);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < i; j++)
            A[j * n + i] = A[i * n + j];
    return KD_OK;
}
