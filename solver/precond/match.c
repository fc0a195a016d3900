/*
 * Maximum transversals (solver/precond/match.h), after Duff, "On algorithms for obtaining a maximum
 * transversal", ACM TOMS 7(3), 1981 (MC21), with the greedy start of Duff, Kaya and Ucar (2011).
 *
 * The bipartite graph is rows x columns, an edge per nonzero a_ij. Rows are searched in turn;
 * each search is a depth-first walk from an unmatched row, alternating an edge to a column and
 * that column's matched row, until a row has a free column (then the path is flipped: every row
 * on it takes the next column, one more row matched). Two classical economies keep it
 * near-linear: the cheap assignment (a row's free-column scan resumes where it stopped, over the
 * whole run: a column once matched stays matched) and a per-search visited stamp on columns (a
 * column is entered once per search, so a search is O(nnz) and the stack depth at most n).
 */
#include "solver/precond/match.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The nonzero entries of csr as adjacency lists, each row's largest |a_ij| first when weighted. */
typedef struct kd_match_graph {
    int32_t *ptr, *col;
    double *w; /* weighted: |a_ij| / max_k |a_ik|, in col's order */
} kd_match_graph_t;

typedef struct kd_match_entry {
    double w;
    int32_t row, col;
} kd_match_entry_t;

static int kd_match_by_weight(const void *a, const void *b)
{
    const kd_match_entry_t *x = a, *y = b;
    if (x->w != y->w)
        return x->w > y->w ? -1 : 1;
    /* Ties (every row's largest entry weighs 1) prefer the diagonal, then keep the order the
     * matrix gives: qsort is not stable and the result must not depend on its whim. */
    const int dx = x->row == x->col, dy = y->row == y->col;
    if (dx != dy)
        return dx ? -1 : 1;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    return (x->col > y->col) - (x->col < y->col);
}

static long long kd_match_name(const int32_t *names, int64_t i)
{
    return names != NULL ? (long long)names[i] : (long long)i;
}

static int kd_match_graph_build(const kd_csr_t *csr, int weighted, const int32_t *names,
                                kd_match_graph_t *g, kd_err_t *err)
{
    const int64_t n = csr->rows;
    g->ptr = calloc((size_t)n + 1, sizeof(int32_t));
    g->col = malloc((size_t)csr->nnz * sizeof(int32_t) + 1);
    g->w = weighted ? malloc((size_t)csr->nnz * sizeof(double) + 1) : NULL;
    kd_match_entry_t *row = weighted ? malloc((size_t)n * sizeof(*row) + 1) : NULL;
    if (g->ptr == NULL || g->col == NULL || (weighted && (g->w == NULL || row == NULL))) {
        free(row);
        return kd_err_set(err, KD_ENOMEM, "row matching: out of host memory");
    }
    int rc = KD_OK;
    for (int64_t i = 0; rc == KD_OK && i < n; i++) {
        int32_t m = g->ptr[i];
        double big = 0.0;
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            big = fmax(big, fabs(kd_csr_value(csr, k)));
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++) {
            const double a = fabs(kd_csr_value(csr, k));
            if (a == 0.0)
                continue;
            if (weighted)
                row[m - g->ptr[i]] = (kd_match_entry_t){a / big, (int32_t)i, csr->indices[k]};
            g->col[m++] = csr->indices[k];
        }
        if (m == g->ptr[i])
            rc = kd_err_set(err, KD_EBADREQ,
                            "row %lld has no nonzero entry: the matrix is singular, no row "
                            "permutation gives it a nonzero diagonal",
                            kd_match_name(names, i));
        if (weighted && rc == KD_OK) {
            const int32_t len = m - g->ptr[i];
            qsort(row, (size_t)len, sizeof(*row), kd_match_by_weight);
            for (int32_t t = 0; t < len; t++) {
                g->col[g->ptr[i] + t] = row[t].col;
                g->w[g->ptr[i] + t] = row[t].w;
            }
        }
        g->ptr[i + 1] = m;
    }
    free(row);
    return rc;
}

/* The weighted greedy pass: every entry, heaviest first, joins the matching when both its row and
 * its column are free. */
static int kd_match_greedy_weighted(const kd_match_graph_t *g, int64_t n, int32_t *row_match,
                                    int32_t *col_match, kd_err_t *err)
{
    const int64_t nnz = g->ptr[n];
    kd_match_entry_t *e = malloc((size_t)nnz * sizeof(*e) + 1);
    if (e == NULL)
        return kd_err_set(err, KD_ENOMEM, "row matching: out of host memory");
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = g->ptr[i]; k < g->ptr[i + 1]; k++)
            e[k] = (kd_match_entry_t){g->w[k], (int32_t)i, g->col[k]};
    qsort(e, (size_t)nnz, sizeof(*e), kd_match_by_weight);
    for (int64_t t = 0; t < nnz; t++)
        if (row_match[e[t].row] < 0 && col_match[e[t].col] < 0) {
            row_match[e[t].row] = e[t].col;
            col_match[e[t].col] = e[t].row;
        }
    free(e);
    return KD_OK;
}

/* One MC21 search from the unmatched row r0; returns whether it matched r0. cheap, next, visited,
 * stack, via: n each (cheap persistent, visited stamped with r0 + 1). */
static int kd_match_augment(const kd_match_graph_t *g, int32_t r0, int32_t *row_match,
                            int32_t *col_match, int32_t *cheap, int32_t *next, int32_t *visited,
                            int32_t *stack, int32_t *via)
{
    int32_t depth = 0;
    stack[0] = r0;
    next[r0] = g->ptr[r0];
    while (depth >= 0) {
        const int32_t i = stack[depth];
        int32_t free_col = -1;
        while (cheap[i] < g->ptr[i + 1] && free_col < 0) {
            const int32_t j = g->col[cheap[i]++];
            if (col_match[j] < 0)
                free_col = j;
        }
        if (free_col >= 0) {
            /* Flip the path: the top row takes the free column, every row below it the column
             * through which the search left it. */
            for (int32_t d = depth; d >= 0; d--) {
                const int32_t r = stack[d], c = d == depth ? free_col : via[d + 1];
                row_match[r] = c;
                col_match[c] = r;
            }
            return 1;
        }
        int32_t j = -1;
        while (next[i] < g->ptr[i + 1] && j < 0) {
            const int32_t c = g->col[next[i]++];
            if (visited[c] != r0 + 1)
                j = c;
        }
        if (j < 0) {
            depth--; /* every column of row i is matched and explored: back up */
            continue;
        }
        /* j is matched (row i's cheap scan found no free column); go on from its row. */
        visited[j] = r0 + 1;
        const int32_t r = col_match[j];
        depth++;
        stack[depth] = r;
        via[depth] = j;
        next[r] = g->ptr[r];
    }
    return 0;
}

int kd_match_rows(const kd_csr_t *csr, unsigned flags, const int32_t *names, int32_t **perm,
                  kd_err_t *err)
{
    *perm = NULL;
    const int weighted = (flags & KD_MATCH_WEIGHTED) != 0;
    const int64_t n = csr->rows;
    if (csr->rows != csr->cols)
        return kd_err_set(err, KD_EBADREQ, "a row matching needs a square matrix, not %lld x %lld",
                          (long long)csr->rows, (long long)csr->cols);
    kd_match_graph_t g = {0};
    /* n <= INT32_MAX (int32 indices): 28 n bytes fit a size_t */
    int32_t *buf = malloc((size_t)n * 7 * sizeof(int32_t) + 1);
    if (buf == NULL)
        return kd_err_set(err, KD_ENOMEM, "row matching: out of host memory");
    int rc = kd_match_graph_build(csr, weighted, names, &g, err);
    int32_t *row_match = buf, *col_match = buf + n, *cheap = buf + 2 * n, *next = buf + 3 * n,
            *visited = buf + 4 * n, *stack = buf + 5 * n, *via = buf + 6 * n;
    for (int64_t i = 0; rc == KD_OK && i < n; i++) {
        row_match[i] = col_match[i] = visited[i] = -1;
        cheap[i] = g.ptr[i];
    }
    for (int64_t i = 0; rc == KD_OK && (flags & KD_MATCH_KEEP_DIAGONAL) && i < n; i++)
        for (int32_t k = g.ptr[i]; k < g.ptr[i + 1]; k++)
            if (g.col[k] == i)
                row_match[i] = col_match[i] = (int32_t)i;
    if (rc == KD_OK && weighted)
        rc = kd_match_greedy_weighted(&g, n, row_match, col_match, err);
    int64_t unmatched = 0, first = -1;
    for (int64_t i = 0; rc == KD_OK && i < n; i++)
        if (row_match[i] < 0 && !kd_match_augment(&g, (int32_t)i, row_match, col_match, cheap, next,
                                                  visited, stack, via)) {
            unmatched++;
            first = first < 0 ? i : first;
        }
    if (rc == KD_OK && unmatched > 0)
        rc = kd_err_set(err, KD_EBADREQ,
                        "the matrix is structurally singular: no row permutation gives it a "
                        "nonzero diagonal (%lld of %lld rows could not be matched, row %lld "
                        "first), so it is singular whatever its values",
                        (long long)unmatched, (long long)n, kd_match_name(names, first));
    if (rc == KD_OK) {
        *perm = malloc((size_t)n * sizeof(int32_t) + 1);
        if (*perm == NULL)
            rc = kd_err_set(err, KD_ENOMEM, "row matching: out of host memory");
        else
            memcpy(*perm, col_match, (size_t)n * sizeof(int32_t));
    }
    free(buf);
    free(g.ptr);
    free(g.col);
    free(g.w);
    return rc;
}

int kd_match_permute_rows(const kd_csr_t *csr, const int32_t *perm, kd_csr_t **out, kd_err_t *err)
{
    int rc = kd_csr_alloc(csr->rows, csr->cols, csr->nnz, csr->dtype, out, err);
    if (rc != KD_OK)
        return rc;
    kd_csr_t *b = *out;
    const size_t v = kd_dtype_size(csr->dtype);
    b->indptr[0] = 0;
    for (int64_t i = 0; i < csr->rows; i++) {
        const int32_t start = csr->indptr[perm[i]], len = csr->indptr[perm[i] + 1] - start;
        b->indptr[i + 1] = b->indptr[i] + len;
        memcpy(b->indices + b->indptr[i], csr->indices + start, (size_t)len * sizeof(int32_t));
        memcpy((char *)b->values + (size_t)b->indptr[i] * v, (const char *)csr->values + start * v,
               (size_t)len * v);
    }
    return KD_OK;
}
