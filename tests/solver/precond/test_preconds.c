/*
 * The block Jacobi and Chebyshev polynomial preconditioners (solver/precond/block_jacobi.c,
 * solver/precond/chebyshev.c).
 *
 * Apply against CPU references on fresh random r (z poisoned with NaN first), several columns,
 * float64 and float32: block Jacobi's z = B^-1 r against a Gaussian elimination of each dense
 * diagonal block (blocks as the test expects them: given sizes, or the nodes the generator made,
 * a 20-row node split 16 + 4), on 1 x 1, n not a multiple of the block size, a dense row, a block
 * with a zero diagonal that is not singular, variable blocks, and a reordered (RCM) matrix whose
 * blocks stay the client's; Chebyshev's z = p(D^-1 A) D^-1 r against the same iteration in double
 * on the host, on 1 x 1, a dense row and a nonsymmetric matrix; its interval against a power
 * iteration (lmax above lambda_max) and Gershgorin (the Ritz value below).
 * Both are symmetric operators (x'M^-1 y = y'M^-1 x), kept with the matrix (counted in its
 * device bytes, found again by kd_precond_ready).
 * CG: each converges on generated 3-D elasticity (found blocks of 3), a 3-D Laplacian, the real
 * 494_bus and dwt_878 (+ 4 I, float64), by the CPU's measure of ||b - A x||, in fewer iterations
 * than CG without (and block Jacobi than Jacobi on elasticity), float64 and float32, three
 * right-hand sides. A nonsymmetric convection-diffusion matrix: both set up, and ||r - A M^-1 r||
 * is below ||r|| and a Jacobi step's. Errors: unknown and out-of-range options, a singular block
 * (its rows named), an empty row and a zero diagonal (chebyshev), a non-square matrix.
 */
#include "bench/matgen/matgen.h"
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/precond/chebyshev.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

static kd_ocl_t *ocl;

static kd_csr_t *laplacian_3d(int64_t m)
{
    return kd_matgen_laplacian_3d(m, KD_DTYPE_F64);
}

/* Nodes of `size[a]` unknowns, node a coupled with a + 1 and one random node by dense random
 * blocks, symmetric and diagonally dominant (SPD): every unknown of a node has the node's column
 * pattern, so the found blocks are the nodes (a node over 16 split 16 + the rest). */
static kd_csr_t *nodal_matrix(const int *size, int nodes, int64_t *first)
{
    first[0] = 0;
    for (int a = 0; a < nodes; a++)
        first[a + 1] = first[a] + size[a];
    const int64_t n = first[nodes];
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    double *rowsum = calloc((size_t)n, sizeof(double));
    for (int a = 0; a < nodes; a++) {
        int other[2] = {a + 1 < nodes ? a + 1 : -1, (int)kd_test_rand_below(nodes)};
        if (other[1] == a || other[1] == a + 1 || other[1] == a - 1)
            other[1] = -1;
        for (int o = 0; o < 2; o++) {
            const int b = other[o];
            for (int64_t i = first[a]; b >= 0 && i < first[a + 1]; i++)
                for (int64_t j = first[b]; j < first[b + 1]; j++) {
                    const double v = kd_test_rand_double(-1.0, 1.0);
                    kd_test_coo_add(&c, i, j, v);
                    kd_test_coo_add(&c, j, i, v);
                    rowsum[i] += fabs(v);
                    rowsum[j] += fabs(v);
                }
        }
        /* the node's own block: symmetric, off-diagonal entries of either sign */
        for (int64_t i = first[a]; i < first[a + 1]; i++)
            for (int64_t j = first[a]; j < i; j++) {
                const double v = kd_test_rand_double(-1.0, 1.0);
                kd_test_coo_add(&c, i, j, v);
                kd_test_coo_add(&c, j, i, v);
                rowsum[i] += fabs(v);
                rowsum[j] += fabs(v);
            }
    }
    for (int64_t i = 0; i < n; i++)
        kd_test_coo_add(&c, i, i, rowsum[i] + 0.5);
    free(rowsum);
    return kd_test_coo_finish(&c);
}

/* z_b = B_b^-1 r_b by Gaussian elimination with partial pivoting on each block (start: the block
 * boundaries, blocks + 1 of them), in double. */
static void block_solve_ref(const kd_csr_t *csr, const int64_t *start, int64_t blocks,
                            const double *r, double *z)
{
    for (int64_t b = 0; b < blocks; b++) {
        const int64_t s = start[b], m = start[b + 1] - s;
        double a[16][17];
        memset(a, 0, sizeof(a));
        for (int64_t i = 0; i < m; i++) {
            for (int32_t k = csr->indptr[s + i]; k < csr->indptr[s + i + 1]; k++)
                if (csr->indices[k] >= s && csr->indices[k] < s + m)
                    a[i][csr->indices[k] - s] = kd_csr_value(csr, k);
            a[i][m] = r[s + i];
        }
        for (int64_t k = 0; k < m; k++) {
            int64_t p = k;
            for (int64_t i = k + 1; i < m; i++)
                if (fabs(a[i][k]) > fabs(a[p][k]))
                    p = i;
            for (int64_t j = 0; j <= m; j++) {
                const double t = a[k][j];
                a[k][j] = a[p][j];
                a[p][j] = t;
            }
            for (int64_t i = k + 1; i < m; i++) {
                const double l = a[i][k] / a[k][k];
                for (int64_t j = k; j <= m; j++)
                    a[i][j] -= l * a[k][j];
            }
        }
        for (int64_t i = m - 1; i >= 0; i--) {
            double s2 = a[i][m];
            for (int64_t j = i + 1; j < m; j++)
                s2 -= a[i][j] * z[s + j];
            z[s + i] = s2 / a[i][i];
        }
    }
}

/* z = p(D^-1 A) D^-1 r: the Chebyshev iteration from 0 in double, on P's interval. */
static void chebyshev_ref(const kd_csr_t *csr, const kd_chebyshev_bounds_t *bd, const double *r,
                          double *z)
{
    const int64_t n = csr->rows;
    double *dinv = calloc((size_t)n, sizeof(double)), *d = calloc((size_t)n, sizeof(double)),
           *q = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++)
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            if (csr->indices[k] == i)
                dinv[i] = 1.0 / kd_csr_value(csr, k);
    for (int step = 0; step <= bd->degree; step++) {
        double c_d, c_r;
        kd_chebyshev_coefficients(bd->lmin, bd->lmax, step, &c_d, &c_r);
        if (step > 0)
            kd_csr_spmv_ref(csr, z, 1.0, 0.0, q);
        for (int64_t i = 0; i < n; i++) {
            d[i] = step == 0 ? c_r * dinv[i] * r[i] : c_d * d[i] + c_r * dinv[i] * (r[i] - q[i]);
            z[i] = step == 0 ? d[i] : z[i] + d[i];
        }
    }
    free(dinv);
    free(d);
    free(q);
}

/* The preconditioner `ops` with `options` (NULL: none) of A. */
static const kd_precond_t *setup(kd_matrix_t *A, const kd_csr_t *csr, const kd_precond_ops_t *ops,
                                 const char *option, double value)
{
    kd_precond_options_t opt = {0};
    if (option != NULL) {
        snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", option);
        opt.items[0].value = value;
        opt.count = 1;
    }
    const kd_precond_t *P = NULL;
    kd_err_t err = {0};
    const size_t before = A->device_bytes;
    const int rc = kd_precond_get(ocl, A, ops, option != NULL ? &opt : NULL, csr, &P, &err);
    CHECK_MSG(rc == KD_OK, "%s setup: %s", ops->name, err.message);
    if (rc == KD_OK) {
        CHECK(P->device_bytes > 0 || A->rows == 0);
        CHECK(A->device_bytes == before + P->device_bytes);
        CHECK(kd_precond_ready(A, ops, option != NULL ? &opt : NULL));
    }
    return P;
}

/* M^-1 r on the device for k fresh random columns (z poisoned first), in the stored order of A
 * (perm: A's, or NULL), against ref (client order), within tol of the largest |z|. Also checks
 * x'M^-1 y = y'M^-1 x for the first two columns when `symmetric`. */
typedef void (*ref_fn)(const kd_csr_t *csr, const void *ctx, const double *r, double *z);

static void check_apply(const char *what, const kd_matrix_t *A, const kd_csr_t *csr,
                        const kd_precond_t *P, ref_fn ref, const void *ctx, int64_t k,
                        int symmetric)
{
    if (P == NULL)
        return;
    const int64_t n = csr->rows;
    const kd_dtype_t dt = A->dtype;
    const int32_t *perm = A->order.kind != KD_REORDER_NONE ? A->order.perm : NULL;
    kd_multivec_t r = {0}, z = {0};
    kd_err_t err = {0};
    REQUIRE(kd_multivec_alloc(ocl, n, k, dt, &r, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, k, dt, &z, &err) == KD_OK);
    double *rw = NULL;
    void *rh = kd_test_random_vector(n * k, dt, -1.0, 1.0, &rw); /* client order */
    void *stored = malloc((size_t)(n * k) * 8 + 8), *zh = malloc((size_t)(n * k) * 8 + 8);
    for (int64_t c = 0; c < k; c++)
        for (int64_t i = 0; i < n; i++)
            kd_store_real(stored, dt, (size_t)(c * n + i),
                          rw[c * n + (perm != NULL ? perm[i] : i)]);
    CHECK(kd_multivec_write(ocl, &r, stored, &err) == KD_OK);
    for (int64_t i = 0; i < n * k; i++)
        kd_store_real(zh, dt, (size_t)i, NAN);
    CHECK(kd_multivec_write(ocl, &z, zh, &err) == KD_OK);
    CHECK_MSG(P->ops->apply(ocl, P, &r, &z, &err) == KD_OK, "%s: %s", what, err.message);
    CHECK(kd_multivec_read(ocl, &z, zh, &err) == KD_OK);
    double *want = calloc((size_t)(n * k) + 1, sizeof(double)),
           *got = calloc((size_t)(n * k) + 1, sizeof(double));
    double worst = 0.0, scale = 0.0;
    for (int64_t c = 0; c < k; c++) {
        ref(csr, ctx, rw + c * n, want + c * n);
        for (int64_t i = 0; i < n; i++)
            got[c * n + (perm != NULL ? perm[i] : i)] = kd_load_real(zh, dt, (size_t)(c * n + i));
    }
    for (int64_t i = 0; i < n * k; i++) {
        scale = fmax(scale, fabs(want[i]));
        worst = isnan(got[i]) ? INFINITY : fmax(worst, fabs(got[i] - want[i]));
    }
    const double tol = dt == KD_DTYPE_F64 ? 1e-11 : 2e-4;
    CHECK_MSG(worst <= tol * scale, "%s %s: off by %g of %g", what, kd_dtype_name(dt), worst,
              scale);
    if (symmetric && k >= 2) {
        double xMy = 0.0, yMx = 0.0, xMx = 0.0, mag = 0.0;
        for (int64_t i = 0; i < n; i++) {
            xMy += rw[i] * got[n + i];
            yMx += rw[n + i] * got[i];
            xMx += rw[i] * got[i];
            mag += fabs(rw[i] * got[n + i]);
        }
        CHECK_MSG(fabs(xMy - yMx) <= (dt == KD_DTYPE_F64 ? 1e-11 : 1e-4) * mag,
                  "%s: x'My = %.17g, y'Mx = %.17g", what, xMy, yMx);
        CHECK_MSG(xMx > 0.0, "%s: x'Mx = %g", what, xMx);
    }
    free(rh);
    free(rw);
    free(stored);
    free(zh);
    free(want);
    free(got);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
}

typedef struct blocks_ctx {
    const int64_t *start;
    int64_t blocks;
} blocks_ctx_t;

static void block_ref(const kd_csr_t *csr, const void *ctx, const double *r, double *z)
{
    const blocks_ctx_t *b = ctx;
    block_solve_ref(csr, b->start, b->blocks, r, z);
}

static void cheb_ref(const kd_csr_t *csr, const void *ctx, const double *r, double *z)
{
    chebyshev_ref(csr, ctx, r, z);
}

/* Uniform blocks of `size` rows (the last n % size) as boundaries. */
static int64_t uniform_blocks(int64_t n, int64_t size, int64_t *start)
{
    int64_t b = 0;
    for (int64_t s = 0; s < n; s += size)
        start[b++] = s;
    start[b] = n;
    return b;
}

/* Block Jacobi on csr64 (taken over) in dtype with option block_size (0: found), against the
 * blocks `start` (NULL: uniform of block_size, or of `expect` when found). */
static void block_apply_case(const char *what, kd_csr_t *csr64, kd_dtype_t dt, int block_size,
                             int expect, const int64_t *start, int64_t blocks, kd_reorder_t order)
{
    kd_err_t err = {0};
    kd_csr_t *csr = NULL;
    kd_matrix_t *A = NULL;
    REQUIRE(kd_csr_convert(csr64, dt, &csr, &err) == KD_OK);
    kd_csr_free(csr64);
    REQUIRE(kd_matrix_upload_reordered(ocl, csr, KD_FMT_CSR_SCALAR, order, &A, &err) == KD_OK);
    int64_t *own = NULL;
    if (start == NULL) {
        own = malloc((size_t)(csr->rows + 2) * sizeof(int64_t));
        blocks = uniform_blocks(csr->rows, block_size > 0 ? block_size : expect, own);
        start = own;
    }
    const kd_precond_t *P =
        setup(A, csr, &kd_precond_block_jacobi, block_size > 0 ? "block_size" : NULL, block_size);
    blocks_ctx_t ctx = {start, blocks};
    for (int64_t k = 1; k <= 3; k += 2)
        check_apply(what, A, csr, P, block_ref, &ctx, k, strstr(what, "nonsymmetric") == NULL);
    free(own);
    kd_matrix_free(A);
    kd_csr_free(csr);
}

static void test_block_jacobi_apply(void)
{
    kd_dtype_t dts[2];
    const int ndt = kd_test_dtypes(ocl, dts);
    for (int d = 0; d < ndt; d++) {
        const kd_dtype_t dt = dts[d];
        block_apply_case("1x1", kd_test_spd_matrix(1, 1, 2.0), dt, 0, 1, NULL, 0, KD_REORDER_NONE);
        block_apply_case("1x1 block_size 4", kd_test_spd_matrix(1, 1, 2.0), dt, 4, 0, NULL, 0,
                         KD_REORDER_NONE);
        block_apply_case("n=103 block_size 3", kd_test_spd_matrix(103, 6, 0.5), dt, 3, 0, NULL, 0,
                         KD_REORDER_NONE);
        block_apply_case("n=301 block_size 16", kd_test_spd_matrix(301, 8, 0.5), dt, 16, 0, NULL, 0,
                         KD_REORDER_NONE);
        block_apply_case("arrow (a dense row, nonsymmetric) block_size 5",
                         kd_test_arrow_matrix(257), dt, 5, 0, NULL, 0, KD_REORDER_NONE);
        block_apply_case("elasticity found blocks", kd_matgen_elasticity_3d(5, KD_DTYPE_F64), dt, 0,
                         3, NULL, 0, KD_REORDER_NONE);
        /* nodes of 1..5 unknowns, one of 20 (blocks 16 + 4), one of 16 */
        int size[60];
        for (int a = 0; a < 60; a++)
            size[a] = 1 + (int)kd_test_rand_below(5);
        size[7] = 20;
        size[31] = 16;
        int64_t first[61], start[80], b = 0;
        kd_csr_t *nodal = nodal_matrix(size, 60, first);
        for (int a = 0; a < 60; a++) {
            start[b++] = first[a];
            if (size[a] > 16)
                start[b++] = first[a] + 16;
        }
        start[b] = first[60];
        block_apply_case("nodes of 1..5, 16 and 20 (found)", nodal, dt, 0, 0, start, b,
                         KD_REORDER_NONE);
        block_apply_case("elasticity reordered (rcm), block_size 3",
                         kd_test_scramble(kd_matgen_elasticity_3d(4, KD_DTYPE_F64)), dt, 3, 0, NULL,
                         0, KD_REORDER_RCM);
        /* blocks [[0, 1], [1, 0]]-like: zero diagonal entries, yet nonsingular */
        kd_test_coo_t c = {40, 40, 0, 0, NULL, NULL, NULL};
        for (int64_t i = 0; i < 40; i += 2) {
            kd_test_coo_add(&c, i, i + 1, 1.0 + kd_test_rand_double(0.0, 1.0));
            kd_test_coo_add(&c, i + 1, i, 1.0 + kd_test_rand_double(0.0, 1.0));
            kd_test_coo_add(&c, i + 1, i + 1, kd_test_rand_double(-0.5, 0.5));
            if (i + 2 < 40)
                kd_test_coo_add(&c, i, i + 2, 0.25);
        }
        block_apply_case("zero diagonals (nonsymmetric), block_size 2", kd_test_coo_finish(&c), dt,
                         2, 0, NULL, 0, KD_REORDER_NONE);
    }
    /* elasticity's found blocks are its nodes: the same operator as block_size 3 */
    kd_err_t err = {0};
    kd_matrix_t *A = NULL;
    kd_csr_t *e = kd_matgen_elasticity_3d(4, KD_DTYPE_F64);
    REQUIRE(kd_matrix_upload(ocl, e, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK);
    const kd_precond_t *found = setup(A, e, &kd_precond_block_jacobi, NULL, 0);
    int64_t start[3 * 64 + 2];
    blocks_ctx_t ctx = {start, uniform_blocks(e->rows, 3, start)};
    check_apply("elasticity found = 3", A, e, found, block_ref, &ctx, 2, 1);
    CHECK(found != NULL && found->device_bytes == (size_t)e->rows * 3 * 8);
    kd_matrix_free(A);
    kd_csr_free(e);
}

/* Chebyshev on csr64 (taken over) in dtype: apply against the host iteration. */
static void cheb_apply_case(const char *what, kd_csr_t *csr64, kd_dtype_t dt, int degree,
                            int symmetric)
{
    kd_err_t err = {0};
    kd_csr_t *csr = NULL;
    kd_matrix_t *A = NULL;
    REQUIRE(kd_csr_convert(csr64, dt, &csr, &err) == KD_OK);
    kd_csr_free(csr64);
    REQUIRE(kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK);
    const kd_precond_t *P = setup(A, NULL, &kd_precond_chebyshev, "degree", degree);
    kd_chebyshev_bounds_t bd = {0};
    if (P != NULL && kd_chebyshev_describe(P, &bd, &err) == KD_OK) {
        CHECK(bd.degree == degree && bd.lmax > 0.0 && bd.lmin > 0.0 && bd.lmin < bd.lmax);
        for (int64_t k = 1; k <= 3; k += 2)
            check_apply(what, A, csr, P, cheb_ref, &bd, k, symmetric);
    }
    kd_matrix_free(A);
    kd_csr_free(csr);
}

static void test_chebyshev_apply(void)
{
    kd_dtype_t dts[2];
    const int ndt = kd_test_dtypes(ocl, dts);
    for (int d = 0; d < ndt; d++) {
        cheb_apply_case("1x1", kd_test_spd_matrix(1, 1, 2.0), dts[d], 3, 1);
        cheb_apply_case("spd n=517 degree 1", kd_test_spd_matrix(517, 6, 0.5), dts[d], 1, 1);
        cheb_apply_case("lap3d degree 7", laplacian_3d(9), dts[d], 7, 1);
        cheb_apply_case("arrow (a dense row, nonsymmetric) degree 3", kd_test_arrow_matrix(300),
                        dts[d], 3, 0);
        cheb_apply_case("elasticity degree 20", kd_matgen_elasticity_3d(4, KD_DTYPE_F64), dts[d],
                        20, 1);
    }
}

/* lambda_max(D^-1 A) by 3000 power steps on the host, and Gershgorin's bound on it. */
static void test_chebyshev_interval(void)
{
    kd_csr_t *csr = kd_matgen_elasticity_3d(5, KD_DTYPE_F64);
    const int64_t n = csr->rows;
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK);
    const kd_precond_t *P = setup(A, NULL, &kd_precond_chebyshev, NULL, 0);
    kd_chebyshev_bounds_t bd = {0};
    REQUIRE(P != NULL && kd_chebyshev_describe(P, &bd, &err) == KD_OK);
    double *x = malloc((size_t)n * sizeof(double)), *y = malloc((size_t)n * sizeof(double)),
           *dinv = malloc((size_t)n * sizeof(double));
    double gershgorin = 0.0, lambda = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double s = 0.0;
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++) {
            s += fabs(kd_csr_value(csr, k));
            if (csr->indices[k] == i)
                dinv[i] = 1.0 / kd_csr_value(csr, k);
        }
        gershgorin = fmax(gershgorin, s * fabs(dinv[i]));
        x[i] = kd_test_rand_double(-1.0, 1.0);
    }
    for (int it = 0; it < 3000; it++) {
        kd_csr_spmv_ref(csr, x, 1.0, 0.0, y);
        double nx = 0.0, ny = 0.0;
        for (int64_t i = 0; i < n; i++) {
            y[i] *= dinv[i];
            nx += x[i] * x[i];
            ny += y[i] * y[i];
        }
        lambda = sqrt(ny / nx);
        for (int64_t i = 0; i < n; i++)
            x[i] = y[i] / sqrt(ny);
    }
    printf("chebyshev interval on elast3d:5: ritz [%.4g, %.4g] -> [%.4g, %.4g], power %.4g, "
           "gershgorin %.4g, %d lanczos steps\n",
           bd.ritz_min, bd.ritz_max, bd.lmin, bd.lmax, lambda, gershgorin, bd.lanczos_steps);
    CHECK_MSG(bd.lmax >= lambda, "lmax %g below lambda_max %g", bd.lmax, lambda);
    CHECK_MSG(bd.ritz_max <= gershgorin * (1 + 1e-12), "Ritz %g above Gershgorin %g", bd.ritz_max,
              gershgorin);
    CHECK_MSG(bd.ritz_max >= 0.9 * lambda, "Ritz %g far below lambda_max %g", bd.ritz_max, lambda);
    CHECK_NEAR(bd.lmin, bd.lmax / 30.0, 1e-12 * bd.lmax);
    free(x);
    free(y);
    free(dinv);
    kd_matrix_free(A);
    kd_csr_free(csr);
}

/* Nonsymmetric A (convection-diffusion, for GMRES and BiCGSTAB later): both set up, and z = M^-1 r
 * is a sane approximate solve: ||r - A z|| below ||r|| and below a Jacobi step's ||r - A D^-1 r||.
 */
static void test_nonsymmetric(void)
{
    kd_csr_t *csr = kd_matgen_convdiff_3d(12, 1.0, 0.0, KD_DTYPE_F64);
    const int64_t n = csr->rows;
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK);
    const kd_precond_t *P[2] = {setup(A, NULL, &kd_precond_chebyshev, NULL, 0),
                                setup(A, csr, &kd_precond_block_jacobi, "block_size", 4)};
    kd_multivec_t r = {0}, z = {0};
    REQUIRE(kd_multivec_alloc(ocl, n, 1, KD_DTYPE_F64, &r, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, 1, KD_DTYPE_F64, &z, &err) == KD_OK);
    double *rw = NULL;
    void *rh = kd_test_random_vector(n, KD_DTYPE_F64, -1.0, 1.0, &rw);
    double *zh = malloc((size_t)n * sizeof(double)), *res = malloc((size_t)n * sizeof(double));
    double rr = 0.0, jj = 0.0;
    for (int64_t i = 0; i < n; i++) {
        rr += rw[i] * rw[i];
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1]; k++)
            if (csr->indices[k] == i)
                zh[i] = rw[i] / kd_csr_value(csr, k);
    }
    memcpy(res, rw, (size_t)n * sizeof(double));
    kd_csr_spmv_ref(csr, zh, -1.0, 1.0, res);
    for (int64_t i = 0; i < n; i++)
        jj += res[i] * res[i];
    CHECK(kd_multivec_write(ocl, &r, rh, &err) == KD_OK);
    for (int k = 0; k < 2; k++) {
        if (P[k] == NULL)
            continue;
        CHECK(P[k]->ops->apply(ocl, P[k], &r, &z, &err) == KD_OK);
        CHECK(kd_multivec_read(ocl, &z, zh, &err) == KD_OK);
        memcpy(res, rw, (size_t)n * sizeof(double));
        kd_csr_spmv_ref(csr, zh, -1.0, 1.0, res);
        double ee = 0.0;
        for (int64_t i = 0; i < n; i++)
            ee += res[i] * res[i];
        printf("convdiff3d:12 (nonsymmetric): ||r - A M^-1 r|| / ||r|| = %.3f with %s, %.3f with "
               "a Jacobi step\n",
               sqrt(ee / rr), P[k]->ops->name, sqrt(jj / rr));
        CHECK_MSG(sqrt(ee) < sqrt(jj) && sqrt(ee) < sqrt(rr), "%s: %g, Jacobi %g, |r| %g",
                  P[k]->ops->name, sqrt(ee), sqrt(jj), sqrt(rr));
    }
    free(rh);
    free(rw);
    free(zh);
    free(res);
    kd_multivec_release(&r);
    kd_multivec_release(&z);
    kd_matrix_free(A);
    kd_csr_free(csr);
}

static kd_solve_params_t params(const char *precond, double rtol, const kd_csr_t *csr,
                                const kd_precond_options_t *opt)
{
    kd_solve_params_t prm;
    kd_err_t err = {0};
    kd_solve_params_default(&prm);
    if (kd_method_choose("cg", precond, &prm.method, &prm.precond, &err) != KD_OK) {
        fprintf(stderr, "%s\n", err.message);
        exit(1);
    }
    prm.rtol = rtol;
    prm.csr = csr;
    prm.precond_options = opt;
    return prm;
}

/* CG with `precond` (and option = value when option is not NULL) on p's nrhs columns: every column
 * converged by the CPU's measure; returns the largest iteration count. */
static int64_t cg_iterations_with(const char *name, kd_test_problem_t *p, int64_t nrhs,
                                  const char *precond, const char *option, double value,
                                  double rtol)
{
    kd_precond_options_t opt = {0};
    if (option != NULL) {
        snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", option);
        opt.items[0].value = value;
        opt.count = 1;
    }
    kd_solve_result_t res[3];
    kd_err_t err = {0};
    kd_solve_params_t prm = params(precond, rtol, p->csr, option != NULL ? &opt : NULL);
    memset(p->x, 0, (size_t)(p->n * nrhs) * kd_dtype_size(p->dtype));
    const int rc = kd_solve(ocl, p->A, nrhs, p->b, NULL, p->x, &prm, res, &err);
    CHECK_MSG(rc == KD_OK, "%s %s: %s", name, precond, err.message);
    if (rc != KD_OK)
        return -1;
    int64_t its = 0;
    for (int64_t c = 0; c < nrhs; c++) {
        const double relres = kd_test_true_relres(p, p->x, c);
        CHECK_MSG(res[c].status == KD_SOLVE_CONVERGED, "%s %s column %lld: %s", name, precond,
                  (long long)c, res[c].message);
        CHECK_MSG(relres <= rtol * 1.5, "%s %s column %lld: true relative residual %g", name,
                  precond, (long long)c, relres);
        its = res[c].iterations > its ? res[c].iterations : its;
        kd_solve_result_free(&res[c]);
    }
    return its;
}

static int64_t cg_iterations(const char *name, kd_test_problem_t *p, int64_t nrhs,
                             const char *precond, double rtol)
{
    return cg_iterations_with(name, p, nrhs, precond, NULL, 0.0, rtol);
}

/* CG without, with Jacobi, block Jacobi (block_size bj_size, 0: found) and Chebyshev (degree 3)
 * on one problem: all converge; Chebyshev in fewer iterations than none and Jacobi; block Jacobi
 * in fewer than none and Jacobi when bj_beats_jacobi, else in no more than none. */
static void compare(const char *name, kd_csr_t *csr64, kd_dtype_t dt, int bj_size,
                    int bj_beats_jacobi)
{
    kd_test_problem_t p;
    const int64_t nrhs = 3;
    REQUIRE(kd_test_problem_make(ocl, &p, csr64, dt, nrhs) == 0);
    const double rtol = dt == KD_DTYPE_F64 ? 1e-8 : 1e-4;
    const int64_t none = cg_iterations(name, &p, nrhs, "none", rtol);
    const int64_t jacobi = cg_iterations(name, &p, nrhs, "jacobi", rtol);
    const int64_t bj = cg_iterations_with(name, &p, nrhs, "block_jacobi",
                                          bj_size > 0 ? "block_size" : NULL, bj_size, rtol);
    const int64_t cheb = cg_iterations(name, &p, nrhs, "chebyshev", rtol);
    printf("%-16s %s n=%-6lld cg its: none %4lld  jacobi %4lld  block_jacobi(%d) %4lld  "
           "chebyshev(3) %4lld\n",
           name, kd_dtype_name(dt), (long long)p.n, (long long)none, (long long)jacobi, bj_size,
           (long long)bj, (long long)cheb);
    CHECK_MSG(bj > 0 && (bj_beats_jacobi ? bj < none : bj <= none),
              "%s: block_jacobi %lld, none %lld", name, (long long)bj, (long long)none);
    CHECK_MSG(cheb > 0 && cheb < none, "%s: chebyshev %lld, none %lld", name, (long long)cheb,
              (long long)none);
    CHECK_MSG(cheb < jacobi, "%s: chebyshev %lld, jacobi %lld", name, (long long)cheb,
              (long long)jacobi);
    if (bj_beats_jacobi)
        CHECK_MSG(bj < jacobi, "%s: block_jacobi %lld, jacobi %lld", name, (long long)bj,
                  (long long)jacobi);
    kd_test_problem_free(&p);
}

static void test_cg(void)
{
    kd_dtype_t dts[2];
    const int ndt = kd_test_dtypes(ocl, dts);
    for (int d = 0; d < ndt; d++) {
        compare("elast3d:8", kd_matgen_elasticity_3d(8, KD_DTYPE_F64), dts[d], 0, 1);
        /* a scalar problem's found blocks are single rows (point Jacobi): 8 rows of a grid line */
        compare("lap3d:16", laplacian_3d(16), dts[d], 8, 1);
    }
    /* float64 only: 494_bus's condition number (about 1e6) is beyond float32's CG; dwt_878 is a
     * pattern whose unit values are not positive definite, shifted by 4 I as test_amg does */
    compare("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), KD_DTYPE_F64, 0, 0);
    compare("494_bus", kd_test_load_mtx("494_bus.mtx", 0.0), KD_DTYPE_F64, 4, 1);
    compare("dwt_878 + 4I", kd_test_load_mtx("dwt_878.mtx", 4.0), KD_DTYPE_F64, 6, 0);
}

/* A reordered matrix: both keep the answer in the client's order and converge. */
static void test_cg_reordered(void)
{
    kd_csr_t *csr = kd_test_scramble(kd_matgen_elasticity_3d(6, KD_DTYPE_F64));
    const char *names[] = {"block_jacobi", "chebyshev"};
    for (int k = 0; k < 2; k++) {
        kd_matrix_t *A = NULL;
        kd_err_t err = {0};
        REQUIRE(kd_matrix_upload_reordered(ocl, csr, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A, &err) ==
                KD_OK);
        kd_test_problem_t p = {.csr = csr, .A = A, .dtype = KD_DTYPE_F64, .n = csr->rows};
        p.b = kd_test_random_vector(p.n, KD_DTYPE_F64, -1.0, 1.0, &p.bw);
        p.x = calloc((size_t)p.n, sizeof(double));
        const int64_t its = cg_iterations("elast3d:6 rcm", &p, 1, names[k], 1e-8);
        printf("elast3d:6 scrambled, rcm: %s %lld its\n", names[k], (long long)its);
        kd_matrix_free(A);
        free(p.b);
        free(p.bw);
        free(p.x);
    }
    kd_csr_free(csr);
}

static void expect_error(const char *what, kd_csr_t *csr64, const kd_precond_ops_t *ops,
                         const char *option, double value, int code, const char *text)
{
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload(ocl, csr64, KD_FMT_CSR_SCALAR, &A, &err) == KD_OK);
    kd_precond_options_t opt = {0};
    if (option != NULL) {
        snprintf(opt.items[0].name, sizeof(opt.items[0].name), "%s", option);
        opt.items[0].value = value;
        opt.count = 1;
    }
    const kd_precond_t *P = NULL;
    const size_t before = A->device_bytes;
    const int rc = kd_precond_get(ocl, A, ops, option != NULL ? &opt : NULL, csr64, &P, &err);
    printf("%s: %s\n", what, err.message);
    CHECK_MSG(rc == code, "%s: rc %d, want %d (%s)", what, rc, code, err.message);
    CHECK_STR_CONTAINS(err.message, text);
    CHECK(P == NULL && A->device_bytes == before);
    kd_matrix_free(A);
    kd_csr_free(csr64);
}

static kd_csr_t *with_empty_row(int64_t n, int64_t row)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++)
        if (i != row)
            kd_test_coo_add(&c, i, i, 2.0);
    return kd_test_coo_finish(&c);
}

static void test_errors(void)
{
    const kd_precond_ops_t *bj = &kd_precond_block_jacobi, *ch = &kd_precond_chebyshev;
    expect_error("unknown option", kd_test_spd_matrix(10, 3, 1.0), bj, "degree", 3, KD_EBADREQ,
                 "takes no option 'degree' (block_size)");
    expect_error("unknown option", kd_test_spd_matrix(10, 3, 1.0), ch, "block_size", 3, KD_EBADREQ,
                 "(degree, lmin_ratio)");
    expect_error("block_size 17", kd_test_spd_matrix(10, 3, 1.0), bj, "block_size", 17, KD_EBADREQ,
                 "block_size = 17 is not an integer in 1..16");
    expect_error("block_size 2.5", kd_test_spd_matrix(10, 3, 1.0), bj, "block_size", 2.5,
                 KD_EBADREQ, "block_size = 2.5");
    expect_error("degree 0", kd_test_spd_matrix(10, 3, 1.0), ch, "degree", 0, KD_EBADREQ,
                 "degree = 0 is not an integer in 1..20");
    expect_error("degree 21", kd_test_spd_matrix(10, 3, 1.0), ch, "degree", 21, KD_EBADREQ,
                 "degree = 21");
    expect_error("lmin_ratio 1", kd_test_spd_matrix(10, 3, 1.0), ch, "lmin_ratio", 1.0, KD_EBADREQ,
                 "lmin_ratio = 1 is not in (0, 1)");
    expect_error("empty row, block_jacobi", with_empty_row(9, 4), bj, "block_size", 3, KD_EBADREQ,
                 "block of rows 3..5 is singular");
    expect_error("empty row, found blocks", with_empty_row(9, 8), bj, NULL, 0, KD_EBADREQ,
                 "rows 8..8 is singular");
    expect_error("empty row, chebyshev", with_empty_row(9, 4), ch, NULL, 0, KD_EBADREQ,
                 "diagonal entry of row 4 is 0 (zero or missing)");
    /* a singular 2 x 2 block: rows 2 and 3 equal */
    kd_test_coo_t c = {6, 6, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < 6; i++)
        kd_test_coo_add(&c, i, i, 1.0);
    kd_test_coo_add(&c, 2, 3, 1.0);
    kd_test_coo_add(&c, 3, 2, 1.0);
    expect_error("singular block", kd_test_coo_finish(&c), bj, "block_size", 2, KD_EBADREQ,
                 "rows 2..3 is singular");
    kd_test_coo_t r = {4, 5, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&r, 0, 0, 1.0);
    expect_error("non-square, block_jacobi", kd_test_coo_finish(&r), bj, NULL, 0, KD_EBADREQ,
                 "square");
    kd_test_coo_t r2 = {4, 5, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&r2, 0, 0, 1.0);
    expect_error("non-square, chebyshev", kd_test_coo_finish(&r2), ch, NULL, 0, KD_EBADREQ,
                 "square");
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_block_jacobi_apply);
    RUN(test_chebyshev_apply);
    RUN(test_chebyshev_interval);
    RUN(test_errors);
    RUN(test_nonsymmetric);
    RUN(test_cg);
    RUN(test_cg_reordered);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
