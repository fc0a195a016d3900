/*
 * Shared pieces of the solver's kernel tests: opening the test device (env KD_TEST_DEVICE, else
 * "auto") and generating test matrices in C — random sparsity, 2-D Laplacians, power-law row
 * lengths, arrow-heads, diagonally dominant SPD matrices — as canonical float64 kd_csr_t built
 * through kd_csr_from_coo_arrays (so duplicates are summed as for real input). Randomness comes
 * from kd_test.h's seeded generator, so a failing run replays with KD_TEST_SEED.
 */
#ifndef KD_SOLVER_TEST_H
#define KD_SOLVER_TEST_H

#include "common/csr.h"
#include "common/reorder.h"
#include "kd_test.h"
#include "solver/matrix.h"
#include "solver/runtime/ocl.h"

/* Open KD_TEST_DEVICE or "auto"; prints the device; NULL (after printing why) on failure. */
static inline kd_ocl_t *kd_test_open_device(void)
{
    const char *sel = getenv("KD_TEST_DEVICE");
    kd_ocl_t *ocl = NULL;
    kd_err_t err = {0};
    if (sel == NULL || sel[0] == '\0')
        sel = "auto";
    if (kd_ocl_open(sel, &ocl, &err) != KD_OK) {
        fprintf(stderr, "cannot open OpenCL device \"%s\": %s\n", sel, err.message);
        return NULL;
    }
    const kd_ocl_device_desc_t *d = kd_ocl_desc(ocl);
    fprintf(stderr, "device %d: %s (%s) fp64=%d work_group=%zu\n", d->index, d->name, d->platform,
            d->has_fp64, kd_ocl_work_group_size(ocl));
    return ocl;
}

/* The value types this device can test: float64 (when supported) and float32. */
static inline int kd_test_dtypes(const kd_ocl_t *ocl, kd_dtype_t out[2])
{
    int n = 0;
    if (kd_ocl_desc(ocl)->has_fp64)
        out[n++] = KD_DTYPE_F64;
    out[n++] = KD_DTYPE_F32;
    return n;
}

/* A growable COO triplet list. */
typedef struct kd_test_coo {
    int64_t rows, cols, nnz, cap;
    int64_t *row, *col;
    double *val;
} kd_test_coo_t;

static inline void kd_test_coo_add(kd_test_coo_t *c, int64_t r, int64_t col, double v)
{
    if (c->nnz == c->cap) {
        c->cap = c->cap ? c->cap * 2 : 1024;
        c->row = realloc(c->row, (size_t)c->cap * sizeof(int64_t));
        c->col = realloc(c->col, (size_t)c->cap * sizeof(int64_t));
        c->val = realloc(c->val, (size_t)c->cap * sizeof(double));
        if (c->row == NULL || c->col == NULL || c->val == NULL) {
            fprintf(stderr, "out of memory building a test matrix\n");
            exit(2);
        }
    }
    c->row[c->nnz] = r;
    c->col[c->nnz] = col;
    c->val[c->nnz] = v;
    c->nnz++;
}

/* Build the canonical float64 matrix and free the triplets. Exits on failure (a test bug). */
static inline kd_csr_t *kd_test_coo_finish(kd_test_coo_t *c)
{
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    int rc = kd_csr_from_coo_arrays(c->rows, c->cols, c->nnz, c->row, c->col, KD_DTYPE_I64, c->val,
                                    KD_DTYPE_F64, KD_DTYPE_F64, NULL, &m, &err);
    free(c->row);
    free(c->col);
    free(c->val);
    if (rc != KD_OK) {
        fprintf(stderr, "building a test matrix: %s\n", err.message);
        exit(2);
    }
    return m;
}

/* Random rows x cols with each row's length drawn from `lengths` (NULL: uniform 0..2*mean),
 * random columns (duplicates summed) and values in [-1, 1). A length >= cols gives a full row. */
static inline kd_csr_t *kd_test_random_matrix(int64_t rows, int64_t cols, const int64_t *lengths,
                                              int64_t mean)
{
    kd_test_coo_t c = {rows, cols, 0, 0, NULL, NULL, NULL};
    for (int64_t r = 0; r < rows; r++) {
        int64_t len = lengths != NULL ? lengths[r] : kd_test_rand_below(2 * mean + 1);
        if (cols == 0)
            len = 0;
        if (len >= cols) {
            for (int64_t j = 0; j < cols; j++)
                kd_test_coo_add(&c, r, j, kd_test_rand_double(-1.0, 1.0));
        } else {
            for (int64_t k = 0; k < len; k++)
                kd_test_coo_add(&c, r, kd_test_rand_below(cols), kd_test_rand_double(-1.0, 1.0));
        }
    }
    return kd_test_coo_finish(&c);
}

/* The 5-point Laplacian of an nx x ny grid (Dirichlet boundary): SPD, 4 on the diagonal. */
static inline kd_csr_t *kd_test_laplacian_2d(int64_t nx, int64_t ny)
{
    int64_t n = nx * ny;
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t j = 0; j < ny; j++) {
        for (int64_t i = 0; i < nx; i++) {
            int64_t r = j * nx + i;
            if (j > 0)
                kd_test_coo_add(&c, r, r - nx, -1.0);
            if (i > 0)
                kd_test_coo_add(&c, r, r - 1, -1.0);
            kd_test_coo_add(&c, r, r, 4.0);
            if (i < nx - 1)
                kd_test_coo_add(&c, r, r + 1, -1.0);
            if (j < ny - 1)
                kd_test_coo_add(&c, r, r + nx, -1.0);
        }
    }
    return kd_test_coo_finish(&c);
}

/* A random symmetric matrix whose every fifth row has its diagonal alone (in no AMG aggregate:
 * an empty row of P), the rest two random off-diagonal pairs a row, diagonal 6..7. */
static inline kd_csr_t *kd_test_lonely_rows(int64_t n)
{
    kd_test_coo_t c = {.rows = n, .cols = n};
    for (int64_t i = 0; i < n; i++) {
        kd_test_coo_add(&c, i, i, 6.0 + kd_test_rand_double(0.0, 1.0));
        for (int e = 0; e < 2 && i % 5 != 1; e++) {
            const int64_t j = kd_test_rand_below(n);
            if (j != i && j % 5 != 1) {
                const double v = kd_test_rand_double(-1.0, 1.0);
                kd_test_coo_add(&c, i, j, v);
                kd_test_coo_add(&c, j, i, v);
            }
        }
    }
    return kd_test_coo_finish(&c);
}

/* A converted to float32 (A freed); exits on failure. */
static inline kd_csr_t *kd_test_as_float32(kd_csr_t *A)
{
    kd_csr_t *out = NULL;
    kd_err_t err = {0};
    if (kd_csr_convert(A, KD_DTYPE_F32, &out, &err) != KD_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(1);
    }
    kd_csr_free(A);
    return out;
}

/* Symmetric, strictly diagonally dominant with a positive diagonal (so SPD): about `per_row`
 * random off-diagonal pairs per row, diagonal = sum |off-diagonal| + margin. */
static inline kd_csr_t *kd_test_spd_matrix(int64_t n, int64_t per_row, double margin)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    double *rowsum = calloc((size_t)n + 1, sizeof(double));
    for (int64_t r = 0; r < n && n > 1; r++) {
        for (int64_t k = 0; k < per_row / 2 + 1; k++) {
            int64_t col = kd_test_rand_below(n);
            if (col == r)
                continue;
            double v = kd_test_rand_double(-1.0, 1.0);
            kd_test_coo_add(&c, r, col, v);
            kd_test_coo_add(&c, col, r, v);
            rowsum[r] += fabs(v);
            rowsum[col] += fabs(v);
        }
    }
    for (int64_t r = 0; r < n; r++)
        kd_test_coo_add(&c, r, r, rowsum[r] + margin);
    free(rowsum);
    return kd_test_coo_finish(&c);
}

/* Power-law row lengths: len = min(cols, floor(1 / u^1.4)) for u uniform in (0, 1]. */
static inline kd_csr_t *kd_test_power_law_matrix(int64_t rows, int64_t cols)
{
    int64_t *len = malloc((size_t)rows * sizeof(int64_t) + 1);
    for (int64_t r = 0; r < rows; r++) {
        double u = kd_test_rand_double(1e-9, 1.0);
        double l = floor(pow(u, -1.4));
        len[r] = l > (double)cols ? cols : (int64_t)l;
    }
    kd_csr_t *m = kd_test_random_matrix(rows, cols, len, 0);
    free(len);
    return m;
}

/* Arrow-head: a full first row, a full first column and the diagonal. */
static inline kd_csr_t *kd_test_arrow_matrix(int64_t n)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t j = 0; j < n; j++)
        kd_test_coo_add(&c, 0, j, kd_test_rand_double(-1.0, 1.0));
    for (int64_t r = 1; r < n; r++) {
        kd_test_coo_add(&c, r, 0, kd_test_rand_double(-1.0, 1.0));
        kd_test_coo_add(&c, r, r, kd_test_rand_double(1.0, 2.0));
    }
    return kd_test_coo_finish(&c);
}

/* A random permutation of 0..n-1 (Fisher-Yates; malloc'd). */
static inline int32_t *kd_test_random_perm(int64_t n)
{
    int32_t *p = malloc((size_t)n * sizeof(int32_t) + 4);
    for (int64_t i = 0; i < n; i++)
        p[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = kd_test_rand_below(i + 1);
        int32_t t = p[i];
        p[i] = p[j];
        p[j] = t;
    }
    return p;
}

/* csr (freed here) under a random symmetric permutation: a matrix whose bandwidth is gone. */
static inline kd_csr_t *kd_test_scramble(kd_csr_t *csr)
{
    kd_err_t err = {0};
    int32_t *q = kd_test_random_perm(csr->rows);
    kd_csr_t *out = NULL;
    if (kd_reorder_apply(csr, q, &out, &err) != KD_OK) {
        fprintf(stderr, "scrambling a test matrix: %s\n", err.message);
        exit(2);
    }
    free(q);
    kd_csr_free(csr);
    return out;
}

/* n random values in [lo, hi) stored as dtype (malloc'd), and the same values widened to double
 * in *wide (malloc'd), so a reference sees exactly what the device sees. */
static inline void *kd_test_random_vector(int64_t n, kd_dtype_t dtype, double lo, double hi,
                                          double **wide)
{
    void *v = malloc((size_t)n * kd_dtype_size(dtype) + 8);
    double *w = malloc((size_t)n * sizeof(double) + 8);
    for (int64_t i = 0; i < n; i++) {
        kd_store_real(v, dtype, (size_t)i, kd_test_rand_double(lo, hi));
        w[i] = kd_load_real(v, dtype, (size_t)i);
    }
    *wide = w;
    return v;
}

/*
 * How far row r of y = alpha * A * x + beta * y0, computed in dtype, may be from the exact value:
 * a sum of len terms in the value type errs by at most (len + 4) eps times the sum of the terms'
 * magnitudes. x and y0 are the values as dtype holds them, in double.
 */
static inline double kd_test_spmv_row_bound(const kd_csr_t *csr, kd_dtype_t dtype, double alpha,
                                            const double *x, double beta, const double *y0,
                                            int64_t r)
{
    const double eps = dtype == KD_DTYPE_F64 ? 1.1102230246251565e-16 : 5.960464477539063e-08;
    double scale = 0.0;
    int64_t len = csr->indptr[r + 1] - csr->indptr[r];
    for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++)
        scale += fabs(kd_csr_value(csr, k) * x[csr->indices[k]]);
    scale = fabs(alpha) * scale + (beta == 0.0 ? 0.0 : fabs(beta * y0[r]));
    double tol = fmax(dtype == KD_DTYPE_F64 ? 1e-14 : 1e-5, (double)(len + 4) * eps);
    return tol * scale + 1e-300;
}

/*
 * A problem for the solve tests: csr64 (taken over) converted to dtype and uploaded as csr_scalar,
 * nrhs random right-hand sides b in dtype (bw: the same widened to double) and zeroed room for x.
 * Returns 0, or -1 with the reason on stderr.
 */
typedef struct kd_test_problem {
    kd_csr_t *csr; /* in dtype */
    kd_matrix_t *A;
    kd_dtype_t dtype;
    int64_t n;
    void *b;    /* n * nrhs values of dtype */
    double *bw; /* the same, widened */
    void *x;    /* n * nrhs values of dtype: the solve's output */
} kd_test_problem_t;

static inline int kd_test_problem_make(kd_ocl_t *ocl, kd_test_problem_t *p, kd_csr_t *csr64,
                                       kd_dtype_t dtype, int64_t nrhs)
{
    kd_err_t err = {0};
    memset(p, 0, sizeof(*p));
    p->dtype = dtype;
    p->n = csr64->rows;
    if (kd_csr_convert(csr64, dtype, &p->csr, &err) != KD_OK ||
        kd_matrix_upload(ocl, p->csr, KD_FMT_CSR_SCALAR, &p->A, &err) != KD_OK) {
        fprintf(stderr, "kd_test_problem_make: %s\n", err.message);
        kd_csr_free(csr64);
        return -1;
    }
    kd_csr_free(csr64);
    p->b = kd_test_random_vector(p->n * nrhs, dtype, -1.0, 1.0, &p->bw);
    p->x = calloc((size_t)(p->n * nrhs) + 1, 8);
    return 0;
}

static inline void kd_test_problem_free(kd_test_problem_t *p)
{
    kd_matrix_free(p->A);
    kd_csr_free(p->csr);
    free(p->b);
    free(p->bw);
    free(p->x);
    memset(p, 0, sizeof(*p));
}

/* ||b_j - A x_j|| / ||b_j|| on the CPU, for column j. */
static inline double kd_test_true_relres(const kd_test_problem_t *p, const void *x, int64_t j)
{
    double *xw = malloc((size_t)p->n * sizeof(double) + 8);
    double *r = malloc((size_t)p->n * sizeof(double) + 8);
    double rr = 0.0, bb = 0.0;
    for (int64_t i = 0; i < p->n; i++) {
        xw[i] = kd_load_real(x, p->dtype, (size_t)(j * p->n + i));
        r[i] = p->bw[j * p->n + i];
    }
    kd_csr_spmv_ref(p->csr, xw, -1.0, 1.0, r);
    for (int64_t i = 0; i < p->n; i++) {
        rr += r[i] * r[i];
        bb += p->bw[j * p->n + i] * p->bw[j * p->n + i];
    }
    free(xw);
    free(r);
    return bb > 0.0 ? sqrt(rr / bb) : sqrt(rr);
}

#endif
