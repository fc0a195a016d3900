/*
 * Benchmark matrix generators (see matgen.h). Rows are written in column order as they are made,
 * so no sorting pass is needed, and the generators touch each output byte once.
 */
#include "bench/matgen/matgen.h"
#include "client/mtx_file.h"
#include "protocol/mtx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static kd_csr_t *kd_matgen_alloc(int64_t rows, int64_t cols, int64_t nnz, kd_dtype_t dtype)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    if (kd_csr_alloc(rows, cols, nnz, dtype, &m, &err) != KD_OK) {
        fprintf(stderr, "matgen: %s\n", err.message);
        return NULL;
    }
    return m;
}

kd_csr_t *kd_matgen_laplacian_2d(int64_t nx, int64_t ny, kd_dtype_t dtype)
{
    int64_t n = nx * ny;
    int64_t nnz = 5 * n - 2 * nx - 2 * ny;
    kd_csr_t *m = kd_matgen_alloc(n, n, nnz, dtype);
    if (m == NULL)
        return NULL;
    int64_t k = 0;
    for (int64_t j = 0; j < ny; j++) {
        for (int64_t i = 0; i < nx; i++) {
            int64_t r = j * nx + i;
            m->indptr[r] = (int32_t)k;
#define KD_PUT(c, v) (m->indices[k] = (int32_t)(c), kd_store_real(m->values, dtype, (size_t)k++, v))
            if (j > 0)
                KD_PUT(r - nx, -1.0);
            if (i > 0)
                KD_PUT(r - 1, -1.0);
            KD_PUT(r, 4.0);
            if (i < nx - 1)
                KD_PUT(r + 1, -1.0);
            if (j < ny - 1)
                KD_PUT(r + nx, -1.0);
        }
    }
    m->indptr[n] = (int32_t)k;
    return m;
}

kd_csr_t *kd_matgen_laplacian_3d(int64_t g, kd_dtype_t dtype)
{
    return kd_matgen_convdiff_3d(g, 0.0, 0.0, dtype);
}

kd_csr_t *kd_matgen_convdiff_3d(int64_t g, double c, double shift, kd_dtype_t dtype)
{
    int64_t n = g * g * g;
    int64_t nnz = 7 * n - 6 * g * g;
    kd_csr_t *m = kd_matgen_alloc(n, n, nnz, dtype);
    if (m == NULL)
        return NULL;
    const double lower = -1.0 - c, diag = 6.0 + 3.0 * c - shift;
    int64_t k = 0;
    for (int64_t z = 0; z < g; z++)
        for (int64_t y = 0; y < g; y++)
            for (int64_t x = 0; x < g; x++) {
                int64_t r = (z * g + y) * g + x;
                m->indptr[r] = (int32_t)k;
                if (z > 0)
                    KD_PUT(r - g * g, lower);
                if (y > 0)
                    KD_PUT(r - g, lower);
                if (x > 0)
                    KD_PUT(r - 1, lower);
                KD_PUT(r, diag);
                if (x < g - 1)
                    KD_PUT(r + 1, -1.0);
                if (y < g - 1)
                    KD_PUT(r + g, -1.0);
                if (z < g - 1)
                    KD_PUT(r + g * g, -1.0);
            }
    m->indptr[n] = (int32_t)k;
    return m;
}

static uint64_t kd_matgen_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static int kd_int_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

kd_csr_t *kd_matgen_power_law(int64_t rows, int64_t cols, double mean_row, uint64_t seed,
                              kd_dtype_t dtype)
{
    uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
    /* Pareto lengths with shape 1.5: length = ceil(xm / u^(1/a)), xm chosen so the uncapped mean
     * a*xm/(a-1) is mean_row; lengths are capped at cols (and 10^6). */
    const double a = 1.5;
    double xm = mean_row * (a - 1.0) / a;
    int32_t *len = malloc((size_t)rows * sizeof(int32_t));
    if (len == NULL)
        return NULL;
    int64_t nnz = 0;
    for (int64_t r = 0; r < rows; r++) {
        double u = ((double)(kd_matgen_next(&s) >> 11) + 1.0) / 9007199254740993.0;
        double l = ceil(xm / pow(u, 1.0 / a));
        if (l > (double)cols)
            l = (double)cols;
        if (l > 1e6)
            l = 1e6;
        len[r] = (int32_t)l;
        nnz += len[r];
    }
    kd_csr_t *m = kd_matgen_alloc(rows, cols, nnz, dtype);
    if (m == NULL) {
        free(len);
        return NULL;
    }
    int64_t k = 0;
    for (int64_t r = 0; r < rows; r++) {
        m->indptr[r] = (int32_t)k;
        int64_t l = len[r];
        int32_t *c = m->indices + k;
        if (l * 2 > cols) { /* dense-ish row: take every column with probability l/cols */
            int64_t got = 0;
            for (int64_t j = 0; j < cols && got < l; j++)
                if ((int64_t)(kd_matgen_next(&s) % (uint64_t)(cols - j)) < l - got)
                    c[got++] = (int32_t)j;
            l = got;
        } else { /* draw, sort, redraw duplicates until distinct */
            for (int64_t j = 0; j < l; j++)
                c[j] = (int32_t)(kd_matgen_next(&s) % (uint64_t)cols);
            for (;;) {
                qsort(c, (size_t)l, sizeof(int32_t), kd_int_cmp);
                int dup = 0;
                for (int64_t j = 1; j < l; j++)
                    if (c[j] == c[j - 1]) {
                        c[j] = (int32_t)(kd_matgen_next(&s) % (uint64_t)cols);
                        dup = 1;
                    }
                if (!dup)
                    break;
            }
        }
        for (int64_t j = 0; j < l; j++) {
            double v = (double)(kd_matgen_next(&s) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
            kd_store_real(m->values, dtype, (size_t)(k + j), v);
        }
        k += l;
    }
    m->indptr[rows] = (int32_t)k;
    m->nnz = k;
    free(len);
    return m;
}

/* COO triplets into canonical CSR (duplicates summed), freeing the triplets. */
static kd_csr_t *kd_matgen_from_coo(int64_t rows, int64_t cols, int64_t nnz, int32_t *ri,
                                    int32_t *ci, double *v, kd_dtype_t dtype)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    kd_csr_limits_t limits = {0};
    if (kd_csr_from_coo_arrays(rows, cols, nnz, ri, ci, KD_DTYPE_I32, v, KD_DTYPE_F64, dtype,
                               &limits, &m, &err) != KD_OK)
        fprintf(stderr, "matgen: %s\n", err.message);
    free(ri);
    free(ci);
    free(v);
    return m;
}

/* A random permutation of 0..n-1 (Fisher-Yates). */
static int32_t *kd_matgen_shuffle(int64_t n, uint64_t *s)
{
    int32_t *p = malloc((size_t)n * sizeof(int32_t));
    if (p == NULL)
        return NULL;
    for (int64_t i = 0; i < n; i++)
        p[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(kd_matgen_next(s) % (uint64_t)(i + 1));
        int32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

static double kd_matgen_uniform(uint64_t *s)
{
    return (double)(kd_matgen_next(s) >> 11) / 9007199254740992.0;
}

kd_csr_t *kd_matgen_rmat(int scale, int64_t edge_factor, uint64_t seed, kd_dtype_t dtype)
{
    const double a = 0.57, b = 0.19, c = 0.19;
    int64_t n = (int64_t)1 << scale, edges = edge_factor * n;
    uint64_t s = seed ? seed : 0x9e3779b97f4a7c15ull;
    int32_t *ri = malloc((size_t)edges * sizeof(int32_t));
    int32_t *ci = malloc((size_t)edges * sizeof(int32_t));
    double *v = malloc((size_t)edges * sizeof(double));
    int32_t *label = kd_matgen_shuffle(n, &s);
    if (ri == NULL || ci == NULL || v == NULL || label == NULL) {
        free(ri), free(ci), free(v), free(label);
        return NULL;
    }
    for (int64_t e = 0; e < edges; e++) {
        int64_t r = 0, col = 0;
        for (int bit = scale - 1; bit >= 0; bit--) {
            double u = kd_matgen_uniform(&s);
            int down = u >= a + b, right = (u >= a && u < a + b) || u >= a + b + c;
            r |= (int64_t)down << bit;
            col |= (int64_t)right << bit;
        }
        ri[e] = label[r];
        ci[e] = label[col];
        v[e] = kd_matgen_uniform(&s) * 2.0 - 1.0;
    }
    free(label);
    return kd_matgen_from_coo(n, n, edges, ri, ci, v, dtype);
}

kd_csr_t *kd_matgen_circuit(int64_t side, uint64_t seed, kd_dtype_t dtype)
{
    const int nets = 16;
    int64_t n = side * side;
    uint64_t s = seed ? seed : 0x2545f4914f6cdd1dull;
    int64_t net_fanout = n / 100 > 1 ? n / 100 : 1;
    /* per node: 2 grid edges, ~0.05 long-range edges; per net: fanout edges; each edge twice */
    int64_t cap = 2 * (2 * n + n / 10 + (int64_t)nets * net_fanout) + n;
    int32_t *ri = malloc((size_t)cap * sizeof(int32_t));
    int32_t *ci = malloc((size_t)cap * sizeof(int32_t));
    double *v = malloc((size_t)cap * sizeof(double));
    double *diag = calloc((size_t)n, sizeof(double));
    int32_t *label = kd_matgen_shuffle(n, &s);
    if (ri == NULL || ci == NULL || v == NULL || diag == NULL || label == NULL) {
        free(ri), free(ci), free(v), free(diag), free(label);
        return NULL;
    }
    int64_t k = 0;
#define KD_EDGE(p, q)                                                                              \
    do {                                                                                           \
        double g_ = 0.1 + kd_matgen_uniform(&s);                                                   \
        ri[k] = label[p], ci[k] = label[q], v[k++] = -g_;                                          \
        ri[k] = label[q], ci[k] = label[p], v[k++] = -g_;                                          \
        diag[p] += g_, diag[q] += g_;                                                              \
    } while (0)
    for (int64_t y = 0; y < side; y++)
        for (int64_t x = 0; x < side; x++) {
            int64_t p = y * side + x;
            if (x + 1 < side)
                KD_EDGE(p, p + 1);
            if (y + 1 < side)
                KD_EDGE(p, p + side);
            if (kd_matgen_next(&s) % 20 == 0) {
                int64_t q = (int64_t)(kd_matgen_next(&s) % (uint64_t)n);
                if (q != p)
                    KD_EDGE(p, q);
            }
        }
    for (int g = 0; g < nets; g++) { /* supply nets: node g touches net_fanout random nodes */
        int64_t p = (int64_t)(kd_matgen_next(&s) % (uint64_t)n);
        for (int64_t f = 0; f < net_fanout; f++) {
            int64_t q = (int64_t)(kd_matgen_next(&s) % (uint64_t)n);
            if (q != p)
                KD_EDGE(p, q);
        }
    }
#undef KD_EDGE
    for (int64_t p = 0; p < n; p++) /* strictly diagonally dominant: SPD */
        ri[k] = label[p], ci[k] = label[p], v[k++] = diag[p] + 1e-3;
    free(diag);
    free(label);
    return kd_matgen_from_coo(n, n, k, ri, ci, v, dtype);
}

kd_csr_t *kd_matgen_blocks(int64_t block_rows, int64_t bs, int64_t per_row, uint64_t seed,
                           kd_dtype_t dtype)
{
    uint64_t s = seed ? seed : 0x6a09e667f3bcc909ull;
    int64_t n = block_rows * bs, nnz = block_rows * per_row * bs * bs;
    kd_csr_t *m = kd_matgen_alloc(n, n, nnz, dtype);
    int64_t *bc = malloc((size_t)per_row * sizeof(int64_t));
    if (m == NULL || bc == NULL) {
        kd_csr_free(m);
        free(bc);
        return NULL;
    }
    int64_t k = 0;
    for (int64_t br = 0; br < block_rows; br++) {
        /* the diagonal block and per_row - 1 others within 64 block columns, distinct, sorted */
        int64_t got = 0;
        bc[got++] = br;
        while (got < per_row && got < block_rows) {
            int64_t c = br + (int64_t)(kd_matgen_next(&s) % 129) - 64;
            int dup = c < 0 || c >= block_rows;
            for (int64_t j = 0; j < got && !dup; j++)
                dup = bc[j] == c;
            if (!dup)
                bc[got++] = c;
        }
        for (int64_t a = 1; a < got; a++)
            for (int64_t b = a; b > 0 && bc[b - 1] > bc[b]; b--) {
                int64_t t = bc[b];
                bc[b] = bc[b - 1];
                bc[b - 1] = t;
            }
        for (int64_t i = 0; i < bs; i++) {
            m->indptr[br * bs + i] = (int32_t)k;
            for (int64_t j = 0; j < got; j++)
                for (int64_t c = 0; c < bs; c++) {
                    m->indices[k] = (int32_t)(bc[j] * bs + c);
                    kd_store_real(m->values, dtype, (size_t)k++, kd_matgen_uniform(&s) * 2.0 - 1.0);
                }
        }
    }
    m->indptr[n] = (int32_t)k;
    m->nnz = k;
    free(bc);
    return m;
}

kd_csr_t *kd_matgen_permuted(kd_csr_t *a, uint64_t seed)
{
    uint64_t s = seed ? seed : 0x853c49e6748fea9bull;
    int64_t n = a->rows, nnz = a->nnz;
    if (a->rows != a->cols) {
        kd_csr_free(a);
        return NULL;
    }
    int32_t *p = kd_matgen_shuffle(n, &s);
    int32_t *ri = malloc((size_t)(nnz ? nnz : 1) * sizeof(int32_t));
    int32_t *ci = malloc((size_t)(nnz ? nnz : 1) * sizeof(int32_t));
    double *v = malloc((size_t)(nnz ? nnz : 1) * sizeof(double));
    if (p == NULL || ri == NULL || ci == NULL || v == NULL) {
        free(p), free(ri), free(ci), free(v), kd_csr_free(a);
        return NULL;
    }
    for (int64_t r = 0; r < n; r++)
        for (int32_t k = a->indptr[r]; k < a->indptr[r + 1]; k++)
            ri[k] = p[r], ci[k] = p[a->indices[k]], v[k] = kd_csr_value(a, k);
    kd_dtype_t dtype = a->dtype;
    kd_csr_free(a);
    free(p);
    return kd_matgen_from_coo(n, n, nnz, ri, ci, v, dtype);
}
#undef KD_PUT

kd_csr_t *kd_matgen_by_name(const char *spec, kd_dtype_t dtype)
{
    long long a = 0;
    double b = 0;
    if (sscanf(spec, "lap2d:%lld", &a) == 1 && a > 0)
        return kd_matgen_laplacian_2d(a, a, dtype);
    if (sscanf(spec, "lap3d:%lld", &a) == 1 && a > 0)
        return kd_matgen_laplacian_3d(a, dtype);
    if (sscanf(spec, "convdiff3d:%lld:%lf", &a, &b) == 2 && a > 0 && b >= 0)
        return kd_matgen_convdiff_3d(a, b, 0.0, dtype);
    if (sscanf(spec, "convdiff3d:%lld", &a) == 1 && a > 0)
        return kd_matgen_convdiff_3d(a, 1.0, 0.0, dtype);
    if (sscanf(spec, "shifted3d:%lld:%lf", &a, &b) == 2 && a > 0 && isfinite(b))
        return kd_matgen_convdiff_3d(a, 0.0, b, dtype);
    if (sscanf(spec, "powerlaw:%lld:%lf", &a, &b) == 2 && a > 0 && b > 0)
        return kd_matgen_power_law(a, a, b, 42, dtype);
    if (sscanf(spec, "rmat:%lld:%lf", &a, &b) == 2 && a > 0 && a < 31 && b >= 1)
        return kd_matgen_rmat((int)a, (int64_t)b, 7, dtype);
    long long bs = 0, per = 0;
    if (sscanf(spec, "blocks:%lld:%lld:%lld", &a, &bs, &per) == 3 && a > 0 && bs > 0 && per > 0)
        return kd_matgen_blocks(a, bs, per, 17, dtype);
    if (sscanf(spec, "circuit:%lld", &a) == 1 && a > 1)
        return kd_matgen_circuit(a, 11, dtype);
    if (sscanf(spec, "aniso2d:%lld:%lf", &a, &b) == 2 && a > 0 && b > 0)
        return kd_matgen_anisotropic_2d(a, b, dtype);
    if (sscanf(spec, "kronlap3d:%lld", &a) == 1 && a > 0)
        return kd_matgen_kron_laplacian_3d(a, dtype);
    if (sscanf(spec, "elast3d:%lld", &a) == 1 && a > 1)
        return kd_matgen_elasticity_3d(a, dtype);
    if (strncmp(spec, "shuffled:", 9) == 0) {
        kd_csr_t *m = kd_matgen_by_name(spec + 9, dtype);
        return m != NULL ? kd_matgen_permuted(m, 13) : NULL;
    }
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    kd_csr_t *m = NULL;
    if (kd_mtx_file_read(spec, (size_t)8 << 30, &text, &len, &err) == KD_OK)
        kd_mtx_read_matrix(text, len, dtype, NULL, &m, &err);
    free(text);
    if (m == NULL)
        fprintf(stderr, "matgen: %s: %s\n", spec, err.message);
    return m;
}
