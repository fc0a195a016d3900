/*
 * Reverse Cuthill-McKee and symmetric permutation of a host CSR (see reorder.h). The graph is the
 * pattern of A + A^T without the diagonal, built once as a CSR adjacency from A's rows merged
 * with A^T's (both sorted, so the merge drops duplicates in one pass): at most 2 nnz int32
 * entries, the largest array here. METIS, when the build has it, is called on the same graph.
 */
#include "common/reorder.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#ifdef KD_METIS
#include <metis.h>
#endif

/* A breadth-first search this many times from a farther end is enough in practice (George and
 * Liu report two or three); the bound keeps a pathological graph linear. */
#define KD_RCM_PERIPHERAL_TRIES 16

const char *const kd_reorder_names[KD_REORDER_COUNT + 1] = {
    [KD_REORDER_NONE] = "none", [KD_REORDER_RCM] = "rcm",  [KD_REORDER_METIS] = "metis",
    [KD_REORDER_AUTO] = "auto", [KD_REORDER_COUNT] = NULL,
};

const char *kd_reorder_name(kd_reorder_t kind)
{
    if ((int)kind < 0 || kind >= KD_REORDER_COUNT)
        return "unknown";
    return kd_reorder_names[kind];
}

int kd_reorder_parse(const char *name, kd_reorder_t *out)
{
    if (name == NULL || name[0] == '\0') {
        *out = KD_REORDER_AUTO;
        return 0;
    }
    for (int k = 0; k < KD_REORDER_COUNT; k++) {
        if (strcmp(name, kd_reorder_names[k]) == 0) {
            *out = (kd_reorder_t)k;
            return 0;
        }
    }
    return -1;
}

int kd_reorder_available(kd_reorder_t kind)
{
#ifdef KD_METIS
    return (int)kind >= 0 && kind < KD_REORDER_COUNT;
#else
    return (int)kind >= 0 && kind < KD_REORDER_COUNT && kind != KD_REORDER_METIS;
#endif
}

void kd_reorder_measure(const kd_csr_t *csr, const int32_t *iperm, kd_reorder_shape_t *out)
{
    out->bandwidth = 0;
    out->profile = 0;
    for (int64_t r = 0; r < csr->rows; r++) {
        int64_t i = iperm != NULL ? iperm[r] : r;
        int64_t first = i;
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            int64_t j = iperm != NULL ? iperm[csr->indices[k]] : csr->indices[k];
            int64_t d = i > j ? i - j : j - i;
            if (d > out->bandwidth)
                out->bandwidth = d;
            if (j < first)
                first = j;
        }
        out->profile += i - first;
    }
}

double kd_reorder_gathers(const kd_csr_t *csr, const int32_t *perm, const int32_t *iperm)
{
    assert((perm == NULL) == (iperm == NULL));
    if (csr->nnz == 0)
        return 0.0;
    size_t blocks = (size_t)csr->cols / KD_REORDER_SECTOR + 1;
    int64_t *stamp = malloc(blocks * sizeof(int64_t));
    if (stamp == NULL)
        return -1.0;
    for (size_t b = 0; b < blocks; b++)
        stamp[b] = -1;
    int64_t distinct = 0;
    for (int64_t i = 0; i < csr->rows; i++) { /* rows in stored order: window i / WINDOW */
        int64_t r = perm != NULL ? perm[i] : i, window = i / KD_REORDER_WINDOW;
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            int64_t j = iperm != NULL ? iperm[csr->indices[k]] : csr->indices[k];
            int64_t *st = &stamp[j / KD_REORDER_SECTOR];
            distinct += *st != window;
            *st = window;
        }
    }
    free(stamp);
    return (double)distinct / (double)csr->nnz;
}

/* The prediction measures at most this many entries (a graph with hubs reaches millions within
 * its first rows). */
#define KD_REORDER_PREDICT_NNZ ((int64_t)1 << 20)

double kd_reorder_gathers_predicted(const kd_csr_t *csr, int64_t limit, double *original)
{
    int64_t n = csr->rows;
    *original = 0.0;
    if (csr->nnz == 0 || n == 0 || csr->rows != csr->cols)
        return 0.0;
    if (limit > n)
        limit = n;
    size_t blocks = (size_t)n / KD_REORDER_SECTOR + 1;
    int32_t *order = malloc((size_t)limit * sizeof(int32_t));
    int32_t *id = malloc((size_t)n * sizeof(int32_t));
    int64_t *stamp = malloc(blocks * sizeof(int64_t));
    double predicted = -1.0;
    if (order == NULL || id == NULL || stamp == NULL)
        goto done;
    for (int64_t i = 0; i < n; i++)
        id[i] = -1;
    /* breadth-first from the row of least degree among the first few thousand */
    int64_t start = 0;
    for (int64_t r = 1; r < n && r < 4096; r++)
        if (csr->indptr[r + 1] - csr->indptr[r] < csr->indptr[start + 1] - csr->indptr[start])
            start = r;
    int64_t head = 0, tail = 0, next_seed = 0;
    order[tail] = (int32_t)start, id[start] = (int32_t)tail++;
    while (tail < limit) {
        if (head == tail) { /* a component is done: the next unvisited row */
            while (id[next_seed] >= 0)
                next_seed++;
            order[tail] = (int32_t)next_seed, id[next_seed] = (int32_t)tail++;
            continue;
        }
        int64_t r = order[head++];
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1] && tail < limit; k++) {
            int32_t c = csr->indices[k];
            if (id[c] < 0)
                order[tail] = c, id[c] = (int32_t)tail++;
        }
    }
    /* windows of the prefix in breadth-first order and in the original order of the same rows:
     * a column outside the prefix has no new number and counts as a sector of its own */
    int64_t in_order = 0, as_given = 0, nnz = 0;
    for (size_t b = 0; b < blocks; b++)
        stamp[b] = -1;
    for (int64_t i = 0; i < limit && nnz < KD_REORDER_PREDICT_NNZ; i++) {
        int64_t r = order[i], window = i / KD_REORDER_WINDOW;
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            int32_t j = id[csr->indices[k]];
            nnz++;
            if (j < 0) {
                in_order++;
                continue;
            }
            int64_t *st = &stamp[j / KD_REORDER_SECTOR];
            in_order += *st != window;
            *st = window;
        }
    }
    for (size_t b = 0; b < blocks; b++)
        stamp[b] = -1;
    for (int64_t i = 0; i < limit; i++) { /* the same windows by original row: sorted ids */
        id[order[i]] = -2 - (int32_t)i;   /* mark the prefix's rows */
    }
    int64_t counted = 0;
    for (int64_t r = 0, w = 0, seen = 0; r < n && seen < limit && counted < nnz; r++) {
        if (id[r] > -2)
            continue;
        int64_t window = w / KD_REORDER_WINDOW;
        w++, seen++;
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            int64_t *st = &stamp[csr->indices[k] / KD_REORDER_SECTOR];
            as_given += *st != window;
            *st = window;
        }
        counted += csr->indptr[r + 1] - csr->indptr[r];
    }
    predicted = nnz > 0 ? (double)in_order / (double)nnz : 0.0;
    *original = counted > 0 ? (double)as_given / (double)counted : 0.0;
done:
    free(order);
    free(id);
    free(stamp);
    return predicted;
}

void kd_reorder_invert(const int32_t *perm, int64_t n, int32_t *iperm)
{
    for (int64_t i = 0; i < n; i++)
        iperm[perm[i]] = (int32_t)i;
}

/* ---- the graph of A + A^T ------------------------------------------------------------------- */

typedef struct kd_graph {
    int64_t n;
    int64_t *ptr; /* n + 1 */
    int32_t *adj; /* ptr[n] */
} kd_graph_t;

static void kd_graph_free(kd_graph_t *g)
{
    free(g->ptr);
    free(g->adj);
    g->ptr = NULL;
    g->adj = NULL;
}

static int kd_graph_build(const kd_csr_t *csr, kd_graph_t *g)
{
    const int64_t n = csr->rows, nnz = csr->nnz;
    int32_t *tptr = calloc((size_t)n + 1, sizeof(int32_t));
    int32_t *tidx = malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int32_t));
    g->n = n;
    g->ptr = malloc(((size_t)n + 1) * sizeof(int64_t));
    g->adj = malloc((size_t)(nnz > 0 ? 2 * nnz : 1) * sizeof(int32_t));
    if (tptr == NULL || tidx == NULL || g->ptr == NULL || g->adj == NULL) {
        free(tptr);
        free(tidx);
        kd_graph_free(g);
        return KD_ENOMEM;
    }
    /* A^T's pattern: rows filled in increasing order, so each is sorted */
    for (int64_t k = 0; k < nnz; k++)
        tptr[csr->indices[k] + 1]++;
    for (int64_t i = 0; i < n; i++)
        tptr[i + 1] += tptr[i];
    for (int64_t r = 0; r < n; r++)
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++)
            tidx[tptr[csr->indices[k]]++] = (int32_t)r;
    for (int64_t i = n; i > 0; i--)
        tptr[i] = tptr[i - 1];
    tptr[0] = 0;
    /* merge row i of A with row i of A^T, without the diagonal or duplicates */
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        g->ptr[i] = w;
        int32_t a = csr->indptr[i], ae = csr->indptr[i + 1], t = tptr[i], te = tptr[i + 1];
        while (a < ae || t < te) {
            int32_t c;
            if (t >= te || (a < ae && csr->indices[a] < tidx[t]))
                c = csr->indices[a++];
            else if (a >= ae || tidx[t] < csr->indices[a])
                c = tidx[t++];
            else {
                c = tidx[t++];
                a++;
            }
            if (c != i)
                g->adj[w++] = c;
        }
    }
    g->ptr[n] = w;
    free(tptr);
    free(tidx);
    return KD_OK;
}

static int64_t kd_graph_degree(const kd_graph_t *g, int32_t v)
{
    return g->ptr[v + 1] - g->ptr[v];
}

/* ---- reverse Cuthill-McKee ------------------------------------------------------------------ */

typedef struct kd_rcm {
    kd_graph_t g;
    int32_t *level; /* n: -1, or the node's level in the current trial search */
    int32_t *queue; /* n: the trial search's order */
    uint8_t *done;  /* n: numbered in the final order */
    int64_t *keys;  /* max degree: degree * n + node, to sort a node's neighbours */
} kd_rcm_t;

/* Breadth-first search from root over unnumbered nodes; returns the number of levels. The nodes
 * of the last level are queue[*last .. *count). level[] is reset before returning. */
static int32_t kd_rcm_search(kd_rcm_t *s, int32_t root, int64_t *last, int64_t *count)
{
    int64_t head = 0, tail = 0, level_start = 0;
    int32_t depth = 0;
    s->queue[tail++] = root;
    s->level[root] = 0;
    while (head < tail) {
        int32_t u = s->queue[head++];
        if (s->level[u] == depth) {
            depth++;
            level_start = head - 1;
        }
        for (int64_t k = s->g.ptr[u]; k < s->g.ptr[u + 1]; k++) {
            int32_t v = s->g.adj[k];
            if (s->level[v] < 0 && !s->done[v]) {
                s->level[v] = s->level[u] + 1;
                s->queue[tail++] = v;
            }
        }
    }
    for (int64_t i = 0; i < tail; i++)
        s->level[s->queue[i]] = -1;
    *last = level_start;
    *count = tail;
    return depth;
}

/* A node of root's component far from the others: George and Liu's pseudo-peripheral node. */
static int32_t kd_rcm_start(kd_rcm_t *s, int32_t root)
{
    int64_t last, count;
    int32_t depth = kd_rcm_search(s, root, &last, &count);
    for (int tries = 0; tries < KD_RCM_PERIPHERAL_TRIES; tries++) {
        int32_t best = s->queue[last];
        for (int64_t i = last + 1; i < count; i++) {
            int32_t v = s->queue[i];
            int64_t dv = kd_graph_degree(&s->g, v), db = kd_graph_degree(&s->g, best);
            if (dv < db || (dv == db && v < best))
                best = v;
        }
        int64_t last2, count2;
        int32_t depth2 = kd_rcm_search(s, best, &last2, &count2);
        if (depth2 <= depth)
            break;
        root = best;
        depth = depth2;
        last = last2;
        count = count2;
    }
    return root;
}

static int kd_rcm_key_cmp(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Number root's component in Cuthill-McKee order into perm[*tail ...]. */
static void kd_rcm_number(kd_rcm_t *s, int32_t root, int32_t *perm, int64_t *tail)
{
    const int64_t n = s->g.n;
    int64_t head = *tail;
    perm[(*tail)++] = root;
    s->done[root] = 1;
    while (head < *tail) {
        int32_t u = perm[head++];
        int64_t m = 0;
        for (int64_t k = s->g.ptr[u]; k < s->g.ptr[u + 1]; k++) {
            int32_t v = s->g.adj[k];
            if (!s->done[v]) {
                s->done[v] = 1;
                s->keys[m++] = kd_graph_degree(&s->g, v) * n + v;
            }
        }
        if (m > 1)
            qsort(s->keys, (size_t)m, sizeof(int64_t), kd_rcm_key_cmp);
        for (int64_t i = 0; i < m; i++)
            perm[(*tail)++] = (int32_t)(s->keys[i] % n);
    }
}

static void kd_rcm_free(kd_rcm_t *s)
{
    kd_graph_free(&s->g);
    free(s->level);
    free(s->queue);
    free(s->done);
    free(s->keys);
}

int kd_reorder_rcm(const kd_csr_t *csr, int32_t **perm_out, kd_err_t *err)
{
    *perm_out = NULL;
    if (csr->rows != csr->cols)
        return kd_err_set(err, KD_EBADREQ,
                          "reordering needs a square matrix, this one is %lld x %lld",
                          (long long)csr->rows, (long long)csr->cols);
    const int64_t n = csr->rows;
    kd_rcm_t s;
    memset(&s, 0, sizeof(s));
    int32_t *perm = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    if (perm == NULL || kd_graph_build(csr, &s.g) != KD_OK)
        goto nomem;
    int64_t max_degree = 1;
    for (int64_t v = 0; v < n; v++)
        if (kd_graph_degree(&s.g, (int32_t)v) > max_degree)
            max_degree = kd_graph_degree(&s.g, (int32_t)v);
    s.level = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    s.queue = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    s.done = calloc((size_t)(n > 0 ? n : 1), 1);
    s.keys = malloc((size_t)max_degree * sizeof(int64_t));
    if (s.level == NULL || s.queue == NULL || s.done == NULL || s.keys == NULL)
        goto nomem;
    for (int64_t v = 0; v < n; v++)
        s.level[v] = -1;
    int64_t tail = 0;
    for (int64_t v = 0; v < n; v++)
        if (!s.done[v])
            kd_rcm_number(&s, kd_rcm_start(&s, (int32_t)v), perm, &tail);
    for (int64_t i = 0; i < n / 2; i++) {
        int32_t t = perm[i];
        perm[i] = perm[n - 1 - i];
        perm[n - 1 - i] = t;
    }
    kd_rcm_free(&s);
    *perm_out = perm;
    return KD_OK;
nomem:
    kd_rcm_free(&s);
    free(perm);
    return kd_err_set(err, KD_ENOMEM, "out of host memory ordering a %lld-row matrix",
                      (long long)n);
}

/* ---- METIS (optional at build) -------------------------------------------------------------- */

#ifdef KD_METIS
/* A fill-reducing nested dissection (METIS_NodeND) of the graph of A + A^T: locality by
 * separators rather than a narrow band. */
static int kd_reorder_metis(const kd_csr_t *csr, int32_t **perm_out, kd_err_t *err)
{
    kd_graph_t g;
    memset(&g, 0, sizeof(g));
    const int64_t n = csr->rows;
    idx_t nv = (idx_t)n;
    idx_t *xadj = malloc(((size_t)n + 1) * sizeof(idx_t));
    idx_t *adjncy = NULL, *order = malloc((size_t)(n > 0 ? n : 1) * sizeof(idx_t));
    idx_t *iorder = malloc((size_t)(n > 0 ? n : 1) * sizeof(idx_t));
    int32_t *perm = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    int rc = KD_OK;
    if (xadj == NULL || order == NULL || iorder == NULL || perm == NULL ||
        kd_graph_build(csr, &g) != KD_OK ||
        (adjncy = malloc((size_t)(g.ptr[n] > 0 ? g.ptr[n] : 1) * sizeof(idx_t))) == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for METIS");
        goto out;
    }
    for (int64_t i = 0; i <= n; i++)
        xadj[i] = (idx_t)g.ptr[i];
    for (int64_t k = 0; k < g.ptr[n]; k++)
        adjncy[k] = (idx_t)g.adj[k];
    idx_t options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(options);
    options[METIS_OPTION_SEED] = 1; /* deterministic: a reload must get the same order */
    int st = n > 0 ? METIS_NodeND(&nv, xadj, adjncy, NULL, options, order, iorder) : METIS_OK;
    if (st != METIS_OK) {
        rc = kd_err_set(err, st == METIS_ERROR_MEMORY ? KD_ENOMEM : KD_EINTERNAL,
                        "METIS_NodeND failed (%d)", st);
        goto out;
    }
    for (int64_t i = 0; i < n; i++)
        perm[i] = (int32_t)order[i];
    *perm_out = perm;
    perm = NULL;
out:
    kd_graph_free(&g);
    free(xadj);
    free(adjncy);
    free(order);
    free(iorder);
    free(perm);
    return rc;
}
#endif

int kd_reorder_compute(const kd_csr_t *csr, kd_reorder_t kind, int32_t **perm, kd_err_t *err)
{
    *perm = NULL;
    if (kind == KD_REORDER_RCM)
        return kd_reorder_rcm(csr, perm, err);
    if (kind != KD_REORDER_METIS)
        return kd_err_set(err, KD_EBADREQ, "reorder '%s' is not an ordering to compute",
                          kd_reorder_name(kind));
#ifdef KD_METIS
    if (csr->rows != csr->cols)
        return kd_err_set(err, KD_EBADREQ,
                          "reordering needs a square matrix, this one is %lld x %lld",
                          (long long)csr->rows, (long long)csr->cols);
    return kd_reorder_metis(csr, perm, err);
#else
    return kd_err_set(err, KD_EUNSUPPORTED,
                      "reorder 'metis' is not available: this krylovd was built without METIS "
                      "(libmetis-dev); use rcm");
#endif
}

/* ---- P A P^T -------------------------------------------------------------------------------- */

int kd_reorder_apply(const kd_csr_t *csr, const int32_t *perm, kd_csr_t **out, kd_err_t *err)
{
    const int64_t n = csr->rows, nnz = csr->nnz;
    const size_t vsize = kd_dtype_size(csr->dtype);
    *out = NULL;
    int rc = kd_csr_alloc(n, n, nnz, csr->dtype, out, err);
    if (rc != KD_OK)
        return rc;
    kd_csr_t *b = *out;
    int32_t *iperm = malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    int32_t *tptr = calloc((size_t)n + 2, sizeof(int32_t));
    int32_t *tidx = malloc((size_t)(nnz > 0 ? nnz : 1) * sizeof(int32_t));
    char *tval = malloc((size_t)(nnz > 0 ? nnz : 1) * vsize);
    if (iperm == NULL || tptr == NULL || tidx == NULL || tval == NULL) {
        free(iperm);
        free(tptr);
        free(tidx);
        free(tval);
        kd_csr_free(*out);
        *out = NULL;
        return kd_err_set(err, KD_ENOMEM, "out of host memory permuting a %lld-row matrix",
                          (long long)n);
    }
    kd_reorder_invert(perm, n, iperm);
    /* T = (P A P^T)^T, its rows filled in increasing new-row order, so sorted */
    for (int64_t k = 0; k < nnz; k++)
        tptr[iperm[csr->indices[k]] + 2]++;
    for (int64_t j = 0; j < n; j++)
        tptr[j + 2] += tptr[j + 1];
    for (int64_t i = 0; i < n; i++) {
        int32_t r = perm[i];
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            int32_t at = tptr[iperm[csr->indices[k]] + 1]++;
            tidx[at] = (int32_t)i;
            memcpy(tval + (size_t)at * vsize, (const char *)csr->values + (size_t)k * vsize, vsize);
        }
    }
    /* B = T^T, rows filled in increasing column order */
    b->indptr[0] = 0;
    for (int64_t i = 0; i < n; i++)
        b->indptr[i + 1] = b->indptr[i] + (csr->indptr[perm[i] + 1] - csr->indptr[perm[i]]);
    int32_t *fill = iperm; /* no longer needed: the next free slot of each row of B */
    for (int64_t i = 0; i < n; i++)
        fill[i] = b->indptr[i];
    for (int64_t j = 0; j < n; j++) {
        for (int32_t k = tptr[j]; k < tptr[j + 1]; k++) {
            int32_t at = fill[tidx[k]]++;
            b->indices[at] = (int32_t)j;
            memcpy((char *)b->values + (size_t)at * vsize, tval + (size_t)k * vsize, vsize);
        }
    }
    free(iperm);
    free(tptr);
    free(tidx);
    free(tval);
    return KD_OK;
}
