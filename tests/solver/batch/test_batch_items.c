/*
 * Batches of systems of their own patterns (solver/batch/batch.h: kd_batch_upload_systems,
 * kd_batch_solve_items; kernels/batch/batch.cl through the systems table):
 *  - the SpMV of such a batch against a CPU reference per system on fresh random values (the
 *    host output poisoned first), on systems with empty rows, a dense row, 1x1 and more rows
 *    than a work-group, side by side;
 *  - kd_batch_solve_items on items of five patterns and sizes (1x1, 7 rows of irregular lengths,
 *    a 10x10 Laplacian's 100 rows, 494_bus's pattern, 400 random rows; one matrix named twice),
 *    cg, bicgstab and gmres, with and without jacobi, x0 on some: each item against the
 *    single-system path (kd_solve of that matrix alone): the same status, iteration counts
 *    within 1 (float64; gmres and float32 within 10% / 5% + 1), the true residual ||b - A x||
 *    on the host below the tolerance, the reported residual equal to the host's; the
 *    global-memory variant and a chunk of 7 iterations a launch give the same counts;
 *  - a NaN in one item's b among good ones: its own non_finite, named by its label;
 *  - refusals: no systems, a rectangular one, mixed dtypes, one over the size limit.
 */
#include "bench/matgen/matgen.h"
#include "kd_solver_test.h"
#include "kd_test_mtx.h"
#include "solver/batch/batch.h"
#include "solver/methods/method.h"

#include <math.h>

static kd_ocl_t *ocl;

/* csr's values replaced in place: off-diagonals -(0.2 + u) (mirrored when symmetric), the
 * diagonal `dominance` x the row's off-diagonal sum + a margin (SPD when symmetric). */
static void set_values(kd_csr_t *c, int symmetric, double dominance, uint64_t seed)
{
    double *v = c->values;
    for (int64_t i = 0; i < c->rows; i++) {
        double sum = 0.0;
        int64_t dpos = -1;
        for (int64_t j = c->indptr[i]; j < c->indptr[i + 1]; j++) {
            const int64_t col = c->indices[j];
            if (col == i) {
                dpos = j;
                continue;
            }
            const int64_t lo = symmetric && col < i ? col : i, hi = symmetric && col < i ? i : col;
            v[j] = -(0.2 + kd_matgen_hash01(seed, (uint64_t)lo, (uint64_t)hi));
            sum += fabs(v[j]);
        }
        if (dpos >= 0)
            v[dpos] = dominance * sum + 0.01 + 0.49 * kd_matgen_hash01(seed, (uint64_t)i, 7);
    }
}

/* The five test patterns (float64; each stores its diagonal), values for `symmetric`. */
static int make_systems(kd_csr_t *out[5], int symmetric, uint64_t seed)
{
    out[0] = kd_test_spd_matrix(1, 0, 0.5);
    out[1] = kd_test_spd_matrix(7, 5, 0.05); /* irregular lengths, no empty row */
    out[2] = kd_test_laplacian_2d(10, 10);
    out[3] = kd_test_load_mtx("494_bus.mtx", 0.0);
    out[4] = kd_test_spd_matrix(400, 6, 0.05);
    for (int i = 0; i < 5; i++) {
        if (out[i] == NULL)
            return -1;
        set_values(out[i], symmetric, symmetric ? 1.0 : 1.1, seed + (uint64_t)i);
    }
    return 0;
}

/* ||b - A x|| / ||b|| on the host in float64, A as the device holds it (dtype's values). */
static double host_relres(const kd_csr_t *c, const double *x, const double *b)
{
    double rr = 0.0, bb = 0.0;
    for (int64_t i = 0; i < c->rows; i++) {
        double r = b[i];
        for (int64_t j = c->indptr[i]; j < c->indptr[i + 1]; j++)
            r -= kd_load_real(c->values, c->dtype, (size_t)j) * x[c->indices[j]];
        rr += r * r;
        bb += b[i] * b[i];
    }
    return bb > 0 ? sqrt(rr / bb) : sqrt(rr);
}

static void test_spmv(kd_dtype_t dtype)
{
    int64_t lens[64];
    for (int i = 0; i < 64; i++)
        lens[i] = i % 5 == 0 ? 0 : kd_test_rand_below(6);
    lens[17] = 1000; /* a dense row */
    kd_csr_t *m64[4] = {kd_test_random_matrix(64, 64, lens, 0),
                        kd_test_random_matrix(1, 1, (const int64_t[]){1}, 0),
                        kd_test_random_matrix(3000, 3000, NULL, 5),
                        kd_test_random_matrix(9, 9, NULL, 3)};
    const kd_csr_t *m[4];
    kd_csr_t *conv[4] = {NULL};
    kd_err_t err = {0};
    int64_t total = 0;
    for (int i = 0; i < 4; i++) {
        kd_csr_convert(m64[i], dtype, &conv[i], &err);
        m[i] = conv[i];
        total += m64[i]->rows;
    }
    kd_batch_t *b = NULL;
    int rc = kd_batch_upload_systems(ocl, m, 4, &b, &err);
    CHECK_MSG(rc == KD_OK, "upload: %s", err.message);
    const size_t vs = kd_dtype_size(dtype);
    double *xw = malloc((size_t)total * sizeof(double));
    void *x = malloc((size_t)total * vs), *y = malloc((size_t)total * vs);
    for (int64_t i = 0; i < total; i++) {
        kd_store_real(x, dtype, (size_t)i, kd_test_rand_double(-1.0, 1.0));
        xw[i] = kd_load_real(x, dtype, (size_t)i);
        kd_store_real(y, dtype, (size_t)i, NAN);
    }
    if (rc == KD_OK)
        rc = kd_batch_spmv(ocl, b, x, y, &err);
    CHECK_MSG(rc == KD_OK, "spmv: %s", err.message);
    int64_t bad = 0, at = 0;
    for (int s = 0; rc == KD_OK && s < 4; at += m[s]->rows, s++) {
        CHECK(b->row_start[s] == at);
        for (int64_t i = 0; i < m[s]->rows; i++) {
            double ref = 0.0, mag = 0.0;
            for (int64_t j = m[s]->indptr[i]; j < m[s]->indptr[i + 1]; j++) {
                const double t =
                    kd_load_real(m[s]->values, dtype, (size_t)j) * xw[at + m[s]->indices[j]];
                ref += t;
                mag += fabs(t);
            }
            const double got = kd_load_real(y, dtype, (size_t)(at + i));
            const double eps = dtype == KD_DTYPE_F32 ? 1e-6 : 1e-15;
            const double len = (double)(m[s]->indptr[i + 1] - m[s]->indptr[i] + 1);
            if (!(fabs(got - ref) <= mag * eps * 4 * len) && bad++ == 0)
                CHECK_MSG(0, "%s system %d row %lld: %g, reference %g", kd_dtype_name(dtype), s,
                          (long long)i, got, ref);
        }
    }
    kd_batch_free(b);
    for (int i = 0; i < 4; i++) {
        kd_csr_free(m64[i]);
        kd_csr_free(conv[i]);
    }
    free(xw);
    free(x);
    free(y);
}

/* The items of one test: matrices, b and x0 (float64 copies), the solver's items. */
typedef struct case_data {
    kd_csr_t *sys64[5], *sys[5];
    int64_t n;
    kd_batch_item_t items[6];
    double *bw[6], *x0w[6];
    void *b[6], *x0[6], *x[6];
} case_data_t;

static const int kd_case_order[6] = {2, 0, 4, 1, 3, 2}; /* system 2 twice */

static int case_make(case_data_t *c, kd_dtype_t dtype, int symmetric, double rtol, int nan_item)
{
    memset(c, 0, sizeof(*c));
    kd_err_t err = {0};
    if (make_systems(c->sys64, symmetric, 500 + (uint64_t)symmetric) != 0)
        return -1;
    for (int i = 0; i < 5; i++)
        kd_csr_convert(c->sys64[i], dtype, &c->sys[i], &err);
    const size_t vs = kd_dtype_size(dtype);
    for (int k = 0; k < 6; k++) {
        const kd_csr_t *A = c->sys[kd_case_order[k]];
        const int64_t n = A->rows;
        c->bw[k] = malloc((size_t)n * sizeof(double));
        c->b[k] = malloc((size_t)n * vs);
        c->x[k] = malloc((size_t)n * vs);
        if (k % 2 == 1) { /* x0 on every other item */
            c->x0w[k] = malloc((size_t)n * sizeof(double));
            c->x0[k] = malloc((size_t)n * vs);
        }
        for (int64_t i = 0; i < n; i++) {
            kd_store_real(c->b[k], dtype, (size_t)i,
                          k == nan_item && i == n / 2 ? NAN : kd_test_rand_double(-1.0, 1.0));
            c->bw[k][i] = kd_load_real(c->b[k], dtype, (size_t)i);
            kd_store_real(c->x[k], dtype, (size_t)i, NAN); /* poisoned */
            if (c->x0[k] != NULL) {
                kd_store_real(c->x0[k], dtype, (size_t)i, kd_test_rand_double(-0.1, 0.1));
                c->x0w[k][i] = kd_load_real(c->x0[k], dtype, (size_t)i);
            }
        }
        c->items[k] = (kd_batch_item_t){.A = A,
                                        .b = c->b[k],
                                        .x0 = c->x0[k],
                                        .x = c->x[k],
                                        .rtol = rtol,
                                        .atol = 0.0,
                                        .maxiter = 10 * n,
                                        .label = 100 + k};
    }
    return 0;
}

static void case_free(case_data_t *c)
{
    for (int i = 0; i < 5; i++) {
        kd_csr_free(c->sys64[i]);
        kd_csr_free(c->sys[i]);
    }
    for (int k = 0; k < 6; k++) {
        free(c->bw[k]);
        free(c->x0w[k]);
        free(c->b[k]);
        free(c->x0[k]);
        free(c->x[k]);
    }
}

static int solve_items(case_data_t *c, kd_batch_method_t method, int jacobi, int force_global,
                       int64_t chunk, kd_batch_result_t res[6], kd_batch_items_report_t *rep)
{
    kd_batch_params_t prm = {
        .method = method, .jacobi = jacobi, .force_global = force_global, .chunk = chunk};
    kd_err_t err = {0};
    int rc = kd_batch_solve_items(ocl, c->items, 6, &prm, res, rep, &err);
    CHECK_MSG(rc == KD_OK, "solve items: %s", err.message);
    return rc;
}

/* Item k alone through kd_solve: its status and iterations. */
static int solve_alone(const case_data_t *c, int k, kd_batch_method_t method, int jacobi,
                       double rtol, kd_solve_result_t *res)
{
    const kd_csr_t *A = c->items[k].A;
    const size_t vs = kd_dtype_size(A->dtype);
    kd_matrix_t *M = NULL;
    kd_err_t err = {0};
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    kd_method_choose(kd_batch_method_name(method), jacobi ? "jacobi" : "none", &prm.method,
                     &prm.precond, &err);
    prm.rtol = rtol;
    prm.maxiter = 10 * A->rows;
    void *x = malloc((size_t)A->rows * vs);
    int rc = kd_matrix_upload(ocl, A, KD_FMT_CSR_SCALAR, &M, &err);
    if (rc == KD_OK)
        rc = kd_solve(ocl, M, 1, c->b[k], c->x0[k], x, &prm, res, &err);
    CHECK_MSG(rc == KD_OK, "item %d alone: %s", k, err.message);
    kd_matrix_free(M);
    free(x);
    return rc;
}

static void test_solve(kd_dtype_t dtype, kd_batch_method_t method, int jacobi)
{
    const int symmetric = method == KD_BATCH_CG;
    const double rtol = dtype == KD_DTYPE_F64 ? 1e-9 : 1e-4;
    case_data_t c;
    if (case_make(&c, dtype, symmetric, rtol, -1) != 0) {
        CHECK_MSG(0, "building the systems");
        return;
    }
    kd_batch_result_t res[6], glob[6];
    kd_batch_items_report_t rep, grep;
    const char *name = kd_batch_method_name(method);
    if (solve_items(&c, method, jacobi, 0, 0, res, &rep) != KD_OK) {
        case_free(&c);
        return;
    }
    int64_t spread = 0;
    for (int k = 0; k < 6; k++) {
        const kd_csr_t *A = c.items[k].A;
        double *xw = malloc((size_t)A->rows * sizeof(double));
        for (int64_t i = 0; i < A->rows; i++)
            xw[i] = kd_load_real(c.x[k], dtype, (size_t)i);
        kd_solve_result_t alone;
        if (solve_alone(&c, k, method, jacobi, rtol, &alone) == KD_OK) {
            const int64_t d = llabs(res[k].iterations - alone.iterations);
            const int64_t allowed = method == KD_BATCH_GMRES ? 1 + alone.iterations / 10
                                    : dtype == KD_DTYPE_F64  ? 1
                                                             : 1 + alone.iterations / 20;
            CHECK_MSG(res[k].status == alone.status && d <= allowed,
                      "%s%s %s item %d (%lld rows): items %s in %lld, alone %s in %lld", name,
                      jacobi ? "+jacobi" : "", kd_dtype_name(dtype), k, (long long)A->rows,
                      kd_solve_status_name(res[k].status), (long long)res[k].iterations,
                      kd_solve_status_name(alone.status), (long long)alone.iterations);
            spread = d > spread ? d : spread;
            kd_solve_result_free(&alone);
        }
        const double truth = host_relres(A, xw, c.bw[k]);
        CHECK_MSG(res[k].status == KD_SOLVE_CONVERGED &&
                      truth <= (dtype == KD_DTYPE_F64 ? 1.000001 : 50.0) * rtol,
                  "%s item %d: %s, true residual %g over %g", name, k,
                  kd_solve_status_name(res[k].status), truth, rtol);
        CHECK_MSG(dtype == KD_DTYPE_F32 ||
                      fabs(res[k].relative_residual - truth) <= 0.05 * truth + 1e-14,
                  "%s item %d: reported %g, host %g", name, k, res[k].relative_residual, truth);
        free(xw);
    }
    /* the global variant (one group of every item), 7 iterations a launch (gmres: a cycle is
     * never split): the same counts */
    if (solve_items(&c, method, jacobi, 1, 7, glob, &grep) == KD_OK) {
        CHECK(grep.groups == 1 && grep.local_groups == 0);
        /* 7 iterations a launch: the longest item's iterations took that many launches at least
         * (the default run's count depends on how many size groups the device's local memory
         * made, so it is no yardstick) */
        int64_t longest = 0;
        for (int k = 0; k < 6; k++)
            longest = glob[k].iterations > longest ? glob[k].iterations : longest;
        CHECK_MSG(method == KD_BATCH_GMRES || 7 * grep.launches >= longest,
                  "%s: %lld launches of 7 iterations for %lld iterations", name,
                  (long long)grep.launches, (long long)longest);
        for (int k = 0; k < 6; k++) {
            CHECK_MSG(glob[k].status == res[k].status &&
                          llabs(glob[k].iterations - res[k].iterations) <= 1,
                      "%s item %d: global %lld, local %lld", name, k, (long long)glob[k].iterations,
                      (long long)res[k].iterations);
            kd_batch_result_free(&glob[k]);
        }
    }
    fprintf(stderr,
            "%s%s %s: 6 items of 5 patterns in %lld group(s), %lld launches, |items - alone| <= "
            "%lld\n",
            name, jacobi ? "+jacobi" : "", kd_dtype_name(dtype), (long long)rep.groups,
            (long long)rep.launches, (long long)spread);
    for (int k = 0; k < 6; k++)
        kd_batch_result_free(&res[k]);
    case_free(&c);
}

/* A NaN in item 3's b: its own non_finite, named by its label; the others as without it. */
static void test_isolation(kd_dtype_t dtype)
{
    const double rtol = dtype == KD_DTYPE_F64 ? 1e-9 : 1e-4;
    case_data_t clean, bad;
    if (case_make(&clean, dtype, 1, rtol, -1) != 0 || case_make(&bad, dtype, 1, rtol, 3) != 0) {
        CHECK_MSG(0, "building the systems");
        return;
    }
    /* the same matrices, b and x0 everywhere else (case_make draws fresh ones) */
    const size_t vs = kd_dtype_size(dtype);
    for (int k = 0; k < 6; k++)
        bad.items[k].A = clean.items[k].A; /* the same sizes */
    for (int k = 0; k < 6; k++)
        if (k != 3) {
            memcpy(bad.b[k], clean.b[k], (size_t)clean.items[k].A->rows * vs);
            if (clean.x0[k] != NULL)
                memcpy(bad.x0[k], clean.x0[k], (size_t)clean.items[k].A->rows * vs);
        }
    kd_batch_result_t rc_[6], rb[6];
    kd_batch_items_report_t rep;
    if (solve_items(&clean, KD_BATCH_CG, 1, 0, 0, rc_, &rep) == KD_OK &&
        solve_items(&bad, KD_BATCH_CG, 1, 0, 0, rb, &rep) == KD_OK) {
        CHECK(rb[3].status == KD_SOLVE_NON_FINITE && rb[3].iterations == 0);
        CHECK_MSG(strstr(rb[3].message, "system 103") != NULL, "message: %s", rb[3].message);
        for (int k = 0; k < 6; k++) {
            if (k == 3)
                continue;
            CHECK(rb[k].status == KD_SOLVE_CONVERGED && rb[k].iterations == rc_[k].iterations);
            CHECK_MSG(memcmp(bad.x[k], clean.x[k], (size_t)clean.items[k].A->rows * vs) == 0,
                      "item %d: x differs from the clean run", k);
        }
        for (int k = 0; k < 6; k++) {
            kd_batch_result_free(&rc_[k]);
            kd_batch_result_free(&rb[k]);
        }
    }
    case_free(&clean);
    case_free(&bad);
}

static void test_refusals(void)
{
    kd_err_t err = {0};
    kd_batch_t *b = NULL;
    kd_csr_t *sq = kd_test_laplacian_2d(3, 3), *rect = kd_test_random_matrix(4, 3, NULL, 2);
    kd_csr_t *f32 = NULL;
    kd_csr_convert(sq, KD_DTYPE_F32, &f32, &err);
    const kd_csr_t *mixed[2] = {sq, f32}, *with_rect[2] = {sq, rect};
    CHECK(kd_batch_upload_systems(ocl, mixed, 0, &b, &err) == KD_EBADREQ && b == NULL);
    CHECK(kd_batch_upload_systems(ocl, with_rect, 2, &b, &err) == KD_EBADREQ && b == NULL);
    CHECK_MSG(strstr(err.message, "system 1 is 4 x 3") != NULL, "%s", err.message);
    err.message[0] = '\0';
    int rc = kd_batch_upload_systems(ocl, mixed, 2, &b, &err);
    CHECK_MSG(rc == KD_EBADREQ && strstr(err.message, "one dtype") != NULL, "%s", err.message);
    kd_csr_t big = {.rows = KD_BATCH_SYSTEM_ROWS_MAX + 1,
                    .cols = KD_BATCH_SYSTEM_ROWS_MAX + 1,
                    .dtype = KD_DTYPE_F64};
    const kd_csr_t *too_big[1] = {&big};
    CHECK(kd_batch_upload_systems(ocl, too_big, 1, &b, &err) == KD_EBADREQ && b == NULL);
    kd_csr_free(sq);
    kd_csr_free(rect);
    kd_csr_free(f32);
}

int main(void)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    kd_dtype_t dtypes[2];
    const int nd = kd_test_dtypes(ocl, dtypes);
    test_refusals();
    for (int d = 0; d < nd; d++) {
        test_spmv(dtypes[d]);
        test_solve(dtypes[d], KD_BATCH_CG, 0);
        test_solve(dtypes[d], KD_BATCH_CG, 1);
        test_solve(dtypes[d], KD_BATCH_BICGSTAB, 1);
        test_solve(dtypes[d], KD_BATCH_GMRES, 0);
        test_isolation(dtypes[d]);
    }
    kd_ocl_close(ocl);
    return kd_test_finish();
}
