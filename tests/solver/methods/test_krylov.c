/*
 * The lock-step Krylov kernels (solver/methods/krylov.h) one step at a time against the same
 * arithmetic on the CPU, for CG, Jacobi-PCG and steepest descent, float64 and float32, with three
 * columns that take different paths in the same launches: column 0 steps normally (alpha, the new
 * r, r'r, r'z, beta, x and d checked), column 1 breaks down (p'q < 0) and column 2 has converged
 * before the step. Then: the first event is kept and a frozen column's x, r and d stay bit for bit
 * even when q turns NaN; NaN in p'q is non_finite, not breakdown; a masked restart revives one
 * column only; kd_krylov_stop freezes one; norms; a non-finite refreshed residual is flagged.
 * Sizes 1, 300 and 70001 (several work-groups per column). The default two-pass iteration (and its
 * lean variant) the same way, read through the packed snapshot, and the device-side limit.
 */
#include "kd_solver_test.h"
#include "solver/methods/krylov.h"

static kd_ocl_t *ocl;

enum { K = 3 };

typedef struct host_block {
    int64_t n;
    double *v; /* K * n, column-major, rounded to the dtype */
} host_block_t;

static double rounded(kd_dtype_t dtype, double v)
{
    return dtype == KD_DTYPE_F32 ? (double)(float)v : v;
}

/* Upload K columns of doubles into mv. */
static void block_write(kd_multivec_t *mv, const double *v)
{
    size_t total = (size_t)(mv->n * mv->k);
    void *raw = malloc(total * kd_dtype_size(mv->dtype) + 8);
    for (size_t i = 0; i < total; i++)
        kd_store_real(raw, mv->dtype, i, v[i]);
    kd_err_t err = {0};
    CHECK(kd_multivec_write(ocl, mv, raw, &err) == KD_OK);
    free(raw);
}

static void block_read(const kd_multivec_t *mv, double *v)
{
    size_t total = (size_t)(mv->n * mv->k);
    void *raw = malloc(total * kd_dtype_size(mv->dtype) + 8);
    kd_err_t err = {0};
    CHECK(kd_multivec_read(ocl, mv, raw, &err) == KD_OK);
    for (size_t i = 0; i < total; i++)
        v[i] = kd_load_real(raw, mv->dtype, i);
    free(raw);
}

static double *random_block(kd_dtype_t dtype, int64_t n, double lo, double hi)
{
    double *v = malloc((size_t)(n * K) * sizeof(double) + 8);
    for (int64_t i = 0; i < n * K; i++)
        v[i] = rounded(dtype, kd_test_rand_double(lo, hi));
    return v;
}

/* The three ways the step kernels are driven: CG, steepest descent (along r), CG with a
 * diagonal preconditioner. */
typedef enum { CASE_CG = 0, CASE_SD = 1, CASE_PCG = 2 } step_case_t;

/* A Jacobi inverse diagonal for n rows (random in [0.5, 2] for pcg, all ones for cg): the host
 * copy in *inv (free it) and a device copy in *out (left NULL on failure). */
static void random_inv_diagonal(kd_dtype_t dtype, int64_t n, int pcg, double **inv, cl_mem *out)
{
    kd_err_t err = {0};
    size_t vsize = kd_dtype_size(dtype);
    *inv = malloc((size_t)n * sizeof(double) + 8);
    void *inv_raw = malloc((size_t)n * vsize + 8);
    for (int64_t i = 0; i < n; i++) {
        (*inv)[i] = pcg ? rounded(dtype, kd_test_rand_double(0.5, 2.0)) : 1.0;
        kd_store_real(inv_raw, dtype, (size_t)i, (*inv)[i]);
    }
    REQUIRE(kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n * vsize,
                                 inv_raw, "test inverse diagonal", out, &err) == KD_OK);
    free(inv_raw);
}

static void one_case(kd_dtype_t dtype, step_case_t method, int64_t n)
{
    kd_err_t err = {0};
    const double tol = dtype == KD_DTYPE_F64 ? 1e-11 : 2e-4;
    const int pcg = method == CASE_PCG, sd = method == CASE_SD;
    const int along = sd ? KD_KRYLOV_OP_ALONG_R : 0;
    const size_t bytes = (size_t)(n * K) * sizeof(double) + 8;
    fprintf(stderr, "  %s %s n=%lld\n",
            pcg  ? "pcg"
            : sd ? "sd"
                 : "cg",
            kd_dtype_name(dtype), (long long)n);

    kd_multivec_t X = {0}, R = {0}, D = {0}, Q = {0};
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &X, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &R, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &D, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &Q, &err) == KD_OK);
    CHECK(K == 1 || X.ld >= n);

    /* The inverse diagonal, shared by the columns. */
    double *inv = NULL;
    cl_mem inv_mem = NULL;
    random_inv_diagonal(dtype, n, pcg, &inv, &inv_mem);
    REQUIRE(inv_mem != NULL);

    double *x = random_block(dtype, n, -1, 1), *r = random_block(dtype, n, -1, 1);
    double *d = malloc(bytes), *q = malloc(bytes), *out = malloc(bytes);
    block_write(&X, x);
    block_write(&R, r);

    const double thresholds[K] = {0.0, 0.0, 1e30};
    kd_krylov_t kr;
    REQUIRE(kd_krylov_init(ocl, dtype, n, X.ld, K, 0, thresholds, 100, pcg ? inv_mem : NULL, NULL,
                           &kr, &err) == KD_OK);

    /* Start: d = z, r'r and r'z per column, everything running. */
    REQUIRE(kd_krylov_residual(&kr, &R, sd ? NULL : &D, NULL,
                               KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_DIRECTION |
                                   KD_KRYLOV_MASK_RESTART,
                               0, &err) == KD_OK);
    kd_krylov_column_t st[K];
    REQUIRE(kd_krylov_read(&kr, 0, st, &err) == KD_OK);
    double rr[K], rz[K];
    for (int c = 0; c < K; c++) {
        rr[c] = rz[c] = 0;
        for (int64_t i = 0; i < n; i++) {
            double ri = r[c * n + i];
            rr[c] += ri * ri;
            rz[c] += ri * inv[i] * ri;
        }
        CHECK_EQ_INT(st[c].status, KD_KRYLOV_RUNNING);
        CHECK_NEAR(st[c].rr, rr[c], tol);
        CHECK_NEAR(st[c].rz, pcg ? rz[c] : rr[c], tol);
    }
    if (!sd) {
        block_read(&D, d);
        for (int64_t i = 0; i < n * K; i++)
            CHECK_NEAR(d[i], rounded(dtype, inv[i % n] * r[i]), tol);
    } else {
        memcpy(d, r, bytes);
    }

    /* q: column 0 and 2 with p'q > 0, column 1 with p'q < 0. */
    for (int c = 0; c < K; c++)
        for (int64_t i = 0; i < n; i++)
            q[c * n + i] =
                rounded(dtype, d[c * n + i] * kd_test_rand_double(0.5, 2.0) * (c == 1 ? -1 : 1));
    block_write(&Q, q);
    kd_multivec_t *P = sd ? &R : &D;
    REQUIRE(kd_krylov_dots(&kr, P, &Q, 1, &err) == KD_OK);
    REQUIRE(kd_krylov_update_residual(&kr, &Q, &R, &X, along, 1, &err) == KD_OK);
    REQUIRE(kd_krylov_update_direction(&kr, &R, sd ? NULL : &X, sd ? NULL : &D, along, 1, &err) ==
            KD_OK);
    REQUIRE(kd_krylov_read(&kr, 1, st, &err) == KD_OK);

    /* Column 0 by hand. */
    double pq = 0, rr_new = 0, rz_new = 0;
    for (int64_t i = 0; i < n; i++)
        pq += d[i] * q[i];
    double alpha = (pcg ? rz[0] : rr[0]) / pq;
    CHECK_EQ_INT(st[0].status, KD_KRYLOV_RUNNING);
    CHECK_NEAR(st[0].pq, pq, tol);
    CHECK_NEAR(st[0].alpha, alpha, tol);
    double *r1 = malloc(bytes);
    block_read(&R, r1);
    for (int64_t i = 0; i < n; i++) {
        CHECK_NEAR(r1[i], r[i] - alpha * q[i], tol);
        rr_new += r1[i] * r1[i];
        rz_new += r1[i] * inv[i] * r1[i];
    }
    CHECK_NEAR(st[0].rr, rr_new, tol);
    CHECK_NEAR(st[0].rz, pcg ? rz_new : rr_new, tol);
    double beta = (pcg ? rz_new : rr_new) / (pcg ? rz[0] : rr[0]);
    if (!sd)
        CHECK_NEAR(st[0].beta, beta, tol * 10);
    block_read(&X, out);
    for (int64_t i = 0; i < n; i++)
        CHECK_NEAR(out[i], x[i] + alpha * d[i], tol);
    if (!sd) {
        block_read(&D, out);
        for (int64_t i = 0; i < n; i++)
            CHECK_NEAR(out[i], inv[i] * r1[i] + beta * d[i], tol * 10);
    }
    /* Column 1 broke down at iteration 1, column 2 converged after 0: both untouched. */
    CHECK_EQ_INT(st[1].status, KD_KRYLOV_BREAKDOWN);
    CHECK_EQ_INT(st[1].iteration, 1);
    CHECK(st[1].fail < 0 && st[1].alpha == 0.0);
    CHECK_EQ_INT(st[2].status, KD_KRYLOV_CONVERGED);
    CHECK_EQ_INT(st[2].iteration, 0);
    CHECK_NEAR(st[2].rr, rr[2], tol);
    for (int64_t i = n; i < n * K; i++)
        CHECK(r1[i] == r[i]);
    block_read(&X, out);
    for (int64_t i = n; i < n * K; i++)
        CHECK(out[i] == x[i]);

    /* Iteration 2 with q all NaN: column 0 is non-finite (not breakdown), the frozen columns
     * keep their first event and stay bit for bit. */
    double *xb = malloc(bytes), *rb = malloc(bytes), *db = malloc(bytes);
    block_read(&X, xb);
    block_read(&R, rb);
    block_read(&D, db);
    for (int64_t i = 0; i < n * K; i++)
        q[i] = NAN;
    block_write(&Q, q);
    REQUIRE(kd_krylov_dots(&kr, P, &Q, 2, &err) == KD_OK);
    REQUIRE(kd_krylov_update_residual(&kr, &Q, &R, &X, along, 2, &err) == KD_OK);
    REQUIRE(kd_krylov_update_direction(&kr, &R, sd ? NULL : &X, sd ? NULL : &D, along, 2, &err) ==
            KD_OK);
    REQUIRE(kd_krylov_read(&kr, 2, st, &err) == KD_OK);
    CHECK_EQ_INT(st[0].status, KD_KRYLOV_NON_FINITE_PQ);
    CHECK_EQ_INT(st[0].iteration, 2);
    CHECK_EQ_INT(st[1].status, KD_KRYLOV_BREAKDOWN);
    CHECK_EQ_INT(st[1].iteration, 1);
    CHECK_EQ_INT(st[2].status, KD_KRYLOV_CONVERGED);
    block_read(&X, out);
    CHECK(memcmp(out, xb, (size_t)(n * K) * sizeof(double)) == 0);
    block_read(&R, out);
    CHECK(memcmp(out, rb, (size_t)(n * K) * sizeof(double)) == 0);
    block_read(&D, out);
    CHECK(memcmp(out, db, (size_t)(n * K) * sizeof(double)) == 0);

    /* Restart column 0 only (after iteration 2); then stop it; norms of r. */
    int mask[K] = {KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_RESTART |
                       (sd ? 0 : KD_KRYLOV_MASK_DIRECTION),
                   0, 0};
    REQUIRE(kd_krylov_residual(&kr, &R, sd ? NULL : &D, mask, 0, 2, &err) == KD_OK);
    REQUIRE(kd_krylov_read(&kr, 2, st, &err) == KD_OK);
    CHECK_EQ_INT(st[0].status, KD_KRYLOV_RUNNING);
    CHECK_NEAR(st[0].rr, rr_new, tol);
    CHECK_EQ_INT(st[1].status, KD_KRYLOV_BREAKDOWN);
    CHECK_EQ_INT(st[2].status, KD_KRYLOV_CONVERGED);
    REQUIRE(kd_krylov_stop(&kr, 0, 2, &err) == KD_OK);
    REQUIRE(kd_krylov_read(&kr, 2, st, &err) == KD_OK);
    CHECK_EQ_INT(st[0].status, KD_KRYLOV_STOPPED);
    double norms[K] = {-1, -1, -1};
    int only1[K] = {0, KD_KRYLOV_MASK_PARTIALS, 0};
    REQUIRE(kd_krylov_norms(&kr, &R, only1, norms, &err) == KD_OK);
    CHECK(norms[0] == -1 && norms[2] == -1);
    CHECK_NEAR(norms[1], rr[1], tol);
    REQUIRE(kd_krylov_norms(&kr, &R, NULL, norms, &err) == KD_OK);
    CHECK_NEAR(norms[0], rr_new, tol);
    CHECK_NEAR(norms[2], rr[2], tol);
    kd_krylov_release(&kr);

    /* A refreshed residual that is not finite stops a running column at that iteration. */
    const double zero[K] = {0, 0, 0};
    REQUIRE(kd_krylov_init(ocl, dtype, n, X.ld, K, 0, zero, 100, pcg ? inv_mem : NULL, NULL, &kr,
                           &err) == KD_OK);
    r[n + n / 2] = INFINITY;
    block_write(&R, r);
    REQUIRE(kd_krylov_residual(&kr, &R, NULL, NULL, KD_KRYLOV_MASK_PARTIALS, 9, &err) == KD_OK);
    REQUIRE(kd_krylov_read(&kr, 9, st, &err) == KD_OK);
    CHECK_EQ_INT(st[0].status, KD_KRYLOV_RUNNING);
    CHECK_EQ_INT(st[1].status, KD_KRYLOV_NON_FINITE_RESIDUAL);
    CHECK_EQ_INT(st[1].iteration, 9);
    CHECK_EQ_INT(st[2].status, KD_KRYLOV_RUNNING);
    kd_krylov_release(&kr);

    free(x);
    free(r);
    free(d);
    free(q);
    free(out);
    free(r1);
    free(xb);
    free(rb);
    free(db);
    free(inv);
    clReleaseMemObject(inv_mem);
    kd_multivec_release(&X);
    kd_multivec_release(&R);
    kd_multivec_release(&D);
    kd_multivec_release(&Q);
}

static void test_steps(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    static const int64_t sizes[] = {1, 300, 70001};
    for (int di = 0; di < nd; di++)
        for (int m = 0; m < 3; m++)
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
                one_case(dt[di], (step_case_t)m, sizes[s]);
}

/* One two-pass iteration (kd_krylov_dots3, kd_krylov_update_merged) by hand: alpha from d'q, beta
 * from r'z - 2 alpha r'Mq + alpha^2 q'Mq (lean: alpha^2 q'Mq - r'z), r, x, d, and the exact new r'r
 * that the snapshot folds at the check; a column past its limit stops there. */
static void two_pass_case(kd_dtype_t dtype, int pcg, int passes, int64_t n)
{
    kd_err_t err = {0};
    const double tol = dtype == KD_DTYPE_F64 ? 1e-11 : 2e-4;
    const size_t bytes = (size_t)(n * K) * sizeof(double) + 8;
    fprintf(stderr, "  two-pass %s %s passes=%d n=%lld\n", pcg ? "pcg" : "cg", kd_dtype_name(dtype),
            passes, (long long)n);
    kd_multivec_t X = {0}, R = {0}, D = {0}, Q = {0};
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &X, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &R, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &D, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, n, K, dtype, &Q, &err) == KD_OK);
    double *inv = NULL;
    cl_mem inv_mem = NULL;
    random_inv_diagonal(dtype, n, pcg, &inv, &inv_mem);
    REQUIRE(inv_mem != NULL);
    double *x = random_block(dtype, n, -1, 1), *r = random_block(dtype, n, -1, 1);
    double *q = random_block(dtype, n, 0.5, 2.0), *d = malloc(bytes), *out = malloc(bytes);
    block_write(&X, x);
    block_write(&R, r);
    const double thresholds[K] = {0, 0, 0};
    kd_krylov_t kr;
    /* Column limits: 1 iteration for everyone; the second iteration stops them all. */
    REQUIRE(kd_krylov_init(ocl, dtype, n, X.ld, K, 0, thresholds, 1, pcg ? inv_mem : NULL, NULL,
                           &kr, &err) == KD_OK);
    kr.fold_snapshots = 1; /* two passes leave r'r as partial sums */
    REQUIRE(kd_krylov_residual(&kr, &R, &D, NULL,
                               KD_KRYLOV_MASK_PARTIALS | KD_KRYLOV_MASK_DIRECTION |
                                   KD_KRYLOV_MASK_RESTART,
                               0, &err) == KD_OK);
    block_read(&D, d);
    for (int64_t i = 0; i < n * K; i++) /* q = d * positive: d'q > 0 */
        q[i] = rounded(dtype, d[i] * q[i]);
    block_write(&Q, q);
    const int rq = passes == 2 ? KD_KRYLOV_OP_WITH_RQ : 0;
    const int first = rq | (pcg ? KD_KRYLOV_OP_DIAGONAL : 0);
    REQUIRE(kd_krylov_dots3(&kr, NULL, &D, &Q, &R, first, 1, &err) == KD_OK);
    REQUIRE(kd_krylov_update_merged(&kr, &Q, &R, &X, &D, rq, 1, &err) == KD_OK);
    kd_krylov_column_t st[K];
    REQUIRE(kd_krylov_read(&kr, 1, st, &err) == KD_OK);
    double *r1 = malloc(bytes), *x1 = malloc(bytes), *d1 = malloc(bytes);
    block_read(&R, r1);
    block_read(&X, x1);
    block_read(&D, d1);
    for (int c = 0; c < K; c++) {
        const double *rc = r + c * n, *dc = d + c * n, *qc = q + c * n;
        double rz = 0, pq = 0, rmq = 0, qmq = 0, rr_new = 0, rz_new = 0;
        for (int64_t i = 0; i < n; i++) {
            rz += rc[i] * inv[i] * rc[i];
            pq += dc[i] * qc[i];
            rmq += rc[i] * inv[i] * qc[i];
            qmq += qc[i] * inv[i] * qc[i];
        }
        const double alpha = rz / pq;
        double est =
            passes == 1 ? alpha * alpha * qmq - rz : rz - 2 * alpha * rmq + alpha * alpha * qmq;
        const double beta = est > 0 ? est / rz : 0.0;
        CHECK_EQ_INT(st[c].status, KD_KRYLOV_RUNNING);
        CHECK_NEAR(st[c].alpha, alpha, tol);
        CHECK_NEAR(st[c].beta, beta, tol * 100);
        for (int64_t i = 0; i < n; i++) {
            const double ri = rc[i] - alpha * qc[i];
            CHECK_NEAR(r1[c * n + i], ri, tol);
            CHECK_NEAR(x1[c * n + i], x[c * n + i] + alpha * dc[i], tol);
            CHECK_NEAR(d1[c * n + i], inv[i] * ri + st[c].beta * dc[i], tol * 10);
            rr_new += r1[c * n + i] * r1[c * n + i];
            rz_new += r1[c * n + i] * inv[i] * r1[c * n + i];
        }
        CHECK_NEAR(st[c].rr, rr_new, tol);
        CHECK_NEAR(st[c].rz, pcg ? rz_new : rr_new, tol);
    }
    /* Iteration 2 is past the limit: every column stops after 1, x untouched. */
    REQUIRE(kd_krylov_dots3(&kr, NULL, &D, &Q, &R, first, 2, &err) == KD_OK);
    REQUIRE(kd_krylov_update_merged(&kr, &Q, &R, &X, &D, rq, 2, &err) == KD_OK);
    REQUIRE(kd_krylov_read(&kr, 2, st, &err) == KD_OK);
    block_read(&X, out);
    for (int c = 0; c < K; c++) {
        CHECK_EQ_INT(st[c].status, KD_KRYLOV_STOPPED);
        CHECK_EQ_INT(st[c].iteration, 1);
    }
    CHECK(memcmp(out, x1, (size_t)(n * K) * sizeof(double)) == 0);
    kd_krylov_release(&kr);
    free(x);
    free(r);
    free(q);
    free(d);
    free(out);
    free(r1);
    free(x1);
    free(d1);
    free(inv);
    clReleaseMemObject(inv_mem);
    kd_multivec_release(&X);
    kd_multivec_release(&R);
    kd_multivec_release(&D);
    kd_multivec_release(&Q);
}

static void test_two_pass(void)
{
    kd_dtype_t dt[2];
    int nd = kd_test_dtypes(ocl, dt);
    for (int di = 0; di < nd; di++)
        for (int pcg = 0; pcg < 2; pcg++)
            for (int lean = 0; lean < 2; lean++) {
                two_pass_case(dt[di], pcg, lean ? 1 : 2, 1);
                two_pass_case(dt[di], pcg, lean ? 1 : 2, 50001);
            }
}

/* Column views are sub-buffers on aligned starts; a copy moves only the chosen columns. */
static void test_multivec(void)
{
    kd_err_t err = {0};
    kd_multivec_t a = {0}, b = {0};
    enum { N = 1001 };
    REQUIRE(kd_multivec_alloc(ocl, N, K, KD_DTYPE_F32, &a, &err) == KD_OK);
    REQUIRE(kd_multivec_alloc(ocl, N, K, KD_DTYPE_F32, &b, &err) == KD_OK);
    CHECK(a.ld >= N && (a.ld * 4) % 256 == 0);
    for (int c = 0; c < K; c++) {
        CHECK(a.cols[c].mem != NULL && a.cols[c].n == N && a.cols[c].dtype == KD_DTYPE_F32);
        size_t size = 0;
        CHECK(clGetMemObjectInfo(a.cols[c].mem, CL_MEM_SIZE, sizeof(size), &size, NULL) ==
              CL_SUCCESS);
        CHECK_EQ_INT(size, N * 4);
    }
    double *va = random_block(KD_DTYPE_F32, N, -1, 1), *vb = random_block(KD_DTYPE_F32, N, -1, 1);
    double *out = malloc(N * K * sizeof(double));
    block_write(&a, va);
    block_write(&b, vb);
    const unsigned char which[K] = {1, 0, 1};
    CHECK(kd_multivec_copy(ocl, &a, &b, which, &err) == KD_OK);
    block_read(&b, out);
    for (int64_t i = 0; i < N * K; i++)
        CHECK(out[i] == (which[i / N] ? va[i] : vb[i]));
    kd_multivec_release(&a);
    kd_multivec_release(&b);
    kd_multivec_release(&b);
    REQUIRE(kd_multivec_alloc(ocl, N, 1, KD_DTYPE_F32, &a, &err) == KD_OK);
    CHECK(a.ld == N && a.cols[0].mem == a.mem);
    kd_multivec_release(&a);
    free(va);
    free(vb);
    free(out);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    RUN(test_multivec);
    RUN(test_steps);
    RUN(test_two_pass);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
