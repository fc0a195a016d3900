/*
 * Symmetry at upload and the solve's refusal (solver/matrix_scan.c, kd_method_check_matrix). The
 * scan against a plain reference (each entry's mirror found by a linear walk of its row) on
 * fresh random matrices made exactly symmetric and then broken in one place (a value, an entry
 * stored on one side only, a NaN on one side), in float64 and float32, on shapes that break naive
 * code (1x1, 0x0, empty rows, one dense row and column, non-square) and on a matrix large enough
 * to be scanned in several slices, broken in one slice or in several (the first in row order
 * wins). A reordered matrix keeps the flag, and its witness is in the client's numbering. A
 * solve with a method that needs symmetry on a nonsymmetric matrix is KD_EBADREQ naming the
 * entry and the table's methods that do not need it; the same method solves the matrix made
 * symmetric. The time of the scan on a 1M-row 3-D Laplacian is printed (not asserted).
 */
#include "common/clock.h"
#include "common/slices.h"
#include "kd_solver_test.h"
#include "solver/matrix_scan.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

#include <float.h>

static kd_ocl_t *ocl;

/* What the scan should find, the slow way. */
typedef struct reference {
    int symmetric, looks_spd, stored;
    int64_t row, col;
    double value, mirror;
} reference_t;

static int same(double a, double b)
{
    return a == b || (isnan(a) && isnan(b));
}

/* a_ii, 0 when not stored, the slow way. */
static double diag_of(const kd_csr_t *m, int64_t i)
{
    double d = 0.0;
    for (int64_t k = m->indptr[i]; k < m->indptr[i + 1]; k++)
        if (m->indices[k] == i)
            d = kd_csr_value(m, k);
    return d;
}

/* a_ij = a, a_ji = b symmetric to rounding as the scan means it: within 256 ulps of the dtype,
 * relative to max(|a|, |b|, sqrt(|a_ii a_jj|)). */
static int mirrors(const kd_csr_t *m, int64_t i, int64_t j, double a, double b)
{
    const double eps = m->dtype == KD_DTYPE_F32 ? (double)FLT_EPSILON : DBL_EPSILON;
    const double scale = fmax(fmax(fabs(a), fabs(b)), sqrt(fabs(diag_of(m, i) * diag_of(m, j))));
    return same(a, b) || fabs(a - b) <= 256.0 * eps * scale;
}

static reference_t reference(const kd_csr_t *m)
{
    reference_t r = {.row = -1, .col = -1};
    const int square = m->rows == m->cols;
    for (int64_t i = 0; square && i < m->rows && r.row < 0; i++)
        for (int64_t k = m->indptr[i]; k < m->indptr[i + 1] && r.row < 0; k++) {
            const int64_t j = m->indices[k];
            double a = kd_csr_value(m, k), b = 0.0;
            int found = 0;
            for (int64_t q = m->indptr[j]; q < m->indptr[j + 1]; q++)
                if (m->indices[q] == i) {
                    found = 1;
                    b = kd_csr_value(m, q);
                }
            if (!found || !mirrors(m, i, j, a, b))
                r = (reference_t){0, 0, found, i, j, a, b};
        }
    r.symmetric = square && r.row < 0;
    r.looks_spd = r.symmetric;
    for (int64_t i = 0; r.looks_spd && i < m->rows; i++) {
        double d = 0.0;
        for (int64_t k = m->indptr[i]; k < m->indptr[i + 1]; k++)
            if (m->indices[k] == i)
                d = kd_csr_value(m, k);
        const double inv = 1.0 / d;
        r.looks_spd = isfinite(d) && d > 0.0 &&
                      (m->dtype == KD_DTYPE_F32 ? isfinite((float)inv) : isfinite(inv));
    }
    return r;
}

static void check_scan_one(const kd_csr_t *m, const char *what, void **inv_out);

/* m's scan against the reference, then the same values on a shared copy of its pattern (a like
 * put's matrix), whose scans go through the pattern's mirror map (kd_csr_pattern_mirror): the
 * first builds it, the second finds it; the same findings and the same 1/a_ii. */
static void check_scan(const kd_csr_t *m, const char *what)
{
    void *inv = NULL;
    check_scan_one(m, what, &inv);
    kd_csr_t *copy = NULL, *shared = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_convert(m, m->dtype, &copy, &err) == KD_OK);
    REQUIRE(kd_csr_with_values(copy, &shared, &err) == KD_OK);
    memcpy(shared->values, m->values, (size_t)m->nnz * kd_dtype_size(m->dtype));
    const int mapped = m->rows == m->cols && m->rows > 0 && m->nnz > 0;
    char label[160];
    for (int pass = 0; pass < 2; pass++) {
        snprintf(label, sizeof(label), "%s (mirror map, %s)", what, pass ? "kept" : "built");
        void *inv2 = NULL;
        check_scan_one(shared, label, &inv2);
        CHECK_MSG((inv == NULL) == (inv2 == NULL) &&
                      (inv == NULL ||
                       memcmp(inv, inv2, (size_t)m->rows * kd_dtype_size(m->dtype)) == 0),
                  "%s: 1/a_ii differs from the plain scan's", label);
        free(inv2);
        CHECK_MSG((kd_csr_pattern_mirror(shared) != NULL) == mapped,
                  "%s: the mirror map is %s", label, mapped ? "missing" : "there");
    }
    free(inv);
    kd_csr_free(shared);
    kd_csr_free(copy);
}

static void check_scan_one(const kd_csr_t *m, const char *what, void **inv_out)
{
    kd_matrix_scan_t s;
    void *inv = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_scan(m, &s, &inv, &err) == KD_OK);
    *inv_out = inv;
    const reference_t r = reference(m);
    CHECK_MSG(s.symmetric == r.symmetric, "%s: symmetric %d, the reference %d", what, s.symmetric,
              r.symmetric);
    CHECK_MSG(s.looks_spd == r.looks_spd, "%s: looks_spd %d, the reference %d", what, s.looks_spd,
              r.looks_spd);
    CHECK_MSG(s.asymmetric_row == r.row && s.asymmetric_col == r.col,
              "%s: first asymmetric entry (%lld, %lld), the reference (%lld, %lld)", what,
              (long long)s.asymmetric_row, (long long)s.asymmetric_col, (long long)r.row,
              (long long)r.col);
    if (r.row >= 0) {
        CHECK(same(s.asymmetric_value, r.value) && same(s.asymmetric_mirror, r.mirror));
        CHECK(s.asymmetric_mirror_stored == r.stored);
    }
}

/* S = A + A^T (each entry a sum of at most two terms, which commute: exactly symmetric). */
static kd_csr_t *symmetrise(kd_csr_t *a)
{
    kd_test_coo_t c = {a->rows, a->cols, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < a->rows; i++)
        for (int64_t k = a->indptr[i]; k < a->indptr[i + 1]; k++) {
            kd_test_coo_add(&c, i, a->indices[k], kd_csr_value(a, k));
            kd_test_coo_add(&c, a->indices[k], i, kd_csr_value(a, k));
        }
    kd_csr_free(a);
    return kd_test_coo_finish(&c);
}

/* m with one more entry (r, c) = v (summed into an existing one). */
static kd_csr_t *with_entry(kd_csr_t *m, int64_t r, int64_t col, double v)
{
    kd_test_coo_t c = {m->rows, m->cols, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < m->rows; i++)
        for (int64_t k = m->indptr[i]; k < m->indptr[i + 1]; k++)
            kd_test_coo_add(&c, i, m->indices[k], kd_csr_value(m, k));
    kd_test_coo_add(&c, r, col, v);
    kd_csr_free(m);
    return kd_test_coo_finish(&c);
}

static void check_both_dtypes(const kd_csr_t *m, const char *what)
{
    check_scan(m, what);
    kd_csr_t *f = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_convert(m, KD_DTYPE_F32, &f, &err) == KD_OK);
    check_scan(f, what);
    kd_csr_free(f);
}

/* A random off-diagonal position of m, or -1. */
static int64_t random_off_diagonal(const kd_csr_t *m)
{
    for (int tries = 0; tries < 1000 && m->nnz > 0; tries++) {
        int64_t k = kd_test_rand_below(m->nnz);
        if (m->indices[k] != kd_csr_row_of_entry(m, k))
            return k;
    }
    return -1;
}

static void test_scan_random(void)
{
    for (int round = 0; round < 40; round++) {
        const int64_t n = 1 + kd_test_rand_below(60);
        kd_csr_t *s = symmetrise(kd_test_random_matrix(n, n, NULL, 1 + round % 6));
        check_both_dtypes(s, "A + A^T");
        /* one value changed: the first of it and its mirror in row order is the witness */
        int64_t k = random_off_diagonal(s);
        if (k >= 0) {
            ((double *)s->values)[k] += 0.5;
            check_both_dtypes(s, "A + A^T, one value changed");
            ((double *)s->values)[k] -= 0.5;
        }
        /* a difference of a few ulps (a matrix assembled in floating point) is symmetric to
         * rounding; one of 1e-9 relative is not */
        if (k >= 0) {
            const double keep = ((double *)s->values)[k];
            ((double *)s->values)[k] = keep * (1.0 + 16.0 * DBL_EPSILON);
            kd_matrix_scan_t sc;
            void *inv = NULL;
            kd_err_t err = {0};
            REQUIRE(kd_matrix_scan(s, &sc, &inv, &err) == KD_OK);
            free(inv);
            inv = NULL;
            CHECK_MSG(sc.symmetric, "a 16-ulp difference is symmetric to rounding");
            check_both_dtypes(s, "A + A^T, one value 16 ulps off");
            ((double *)s->values)[k] = keep * (1.0 + 1e-9);
            REQUIRE(kd_matrix_scan(s, &sc, &inv, &err) == KD_OK);
            free(inv);
            inv = NULL;
            CHECK_MSG(!sc.symmetric || keep == 0.0, "a 1e-9 relative difference is not symmetric");
            /* an entry that cancelled to nearly 0 in assembly: its rounding is the size of the
             * diagonal's, so it counts against sqrt(|a_ii a_jj|), not against itself */
            const int64_t i = kd_csr_row_of_entry(s, k), j = s->indices[k];
            const double dscale = sqrt(fabs(diag_of(s, i) * diag_of(s, j)));
            if (dscale > 0.0) {
                ((double *)s->values)[k] = keep + 16.0 * DBL_EPSILON * dscale;
                REQUIRE(kd_matrix_scan(s, &sc, &inv, &err) == KD_OK);
                free(inv);
                inv = NULL;
                CHECK_MSG(sc.symmetric, "rounding of the diagonal's size is symmetric");
                check_both_dtypes(s, "A + A^T, one value off by rounding of the diagonal");
            }
            ((double *)s->values)[k] = keep;
        }
        /* NaN mirrored is symmetric; on one side it is not */
        if (k >= 0) {
            const int64_t i = kd_csr_row_of_entry(s, k), j = s->indices[k];
            int64_t mk = -1;
            for (int64_t q = s->indptr[j]; q < s->indptr[j + 1]; q++)
                mk = s->indices[q] == i ? q : mk;
            REQUIRE(mk >= 0);
            const double keep = ((double *)s->values)[k];
            ((double *)s->values)[k] = ((double *)s->values)[mk] = NAN;
            check_both_dtypes(s, "NaN mirrored");
            ((double *)s->values)[mk] = keep;
            check_both_dtypes(s, "NaN on one side");
            ((double *)s->values)[k] = ((double *)s->values)[mk] = keep;
        }
        /* an explicit zero stored on one side only: the pattern is not symmetric */
        const int64_t r = kd_test_rand_below(n), c = kd_test_rand_below(n);
        kd_csr_t *z = with_entry(symmetrise(with_entry(s, 0, 0, 0.0)), r, c, r == c ? 1.0 : 0.0);
        check_both_dtypes(z, "one-sided explicit zero");
        kd_csr_free(z);
    }
}

static void test_scan_shapes(void)
{
    kd_test_coo_t c = {1, 1, 0, 0, NULL, NULL, NULL};
    kd_test_coo_add(&c, 0, 0, 3.0);
    kd_csr_t *one = kd_test_coo_finish(&c);
    check_both_dtypes(one, "1x1");
    ((double *)one->values)[0] = -3.0;
    check_both_dtypes(one, "1x1 negative");
    kd_csr_free(one);

    kd_test_coo_t e = {0, 0, 0, 0, NULL, NULL, NULL};
    kd_csr_t *empty = kd_test_coo_finish(&e);
    kd_matrix_scan_t s;
    void *inv = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_scan(empty, &s, &inv, &err) == KD_OK);
    CHECK(s.symmetric == 1 && s.asymmetric_row == -1 && inv == NULL);
    kd_csr_free(empty);

    /* one dense row and column (the arrow), then broken in the dense row */
    kd_csr_t *arrow = symmetrise(kd_test_arrow_matrix(300));
    check_both_dtypes(arrow, "arrow");
    ((double *)arrow->values)[arrow->indptr[1] - 1] *= 2.0; /* row 0's last entry */
    check_both_dtypes(arrow, "arrow broken");
    kd_csr_free(arrow);
    kd_csr_t *holes = kd_test_laplacian_2d(5, 5);
    kd_test_coo_t h = {25, 25, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < 25; i++)
        for (int64_t k = holes->indptr[i]; k < holes->indptr[i + 1]; k++)
            if ((i < 3 || i > 5) && (holes->indices[k] < 3 || holes->indices[k] > 5))
                kd_test_coo_add(&h, i, holes->indices[k], kd_csr_value(holes, k));
    kd_csr_free(holes);
    holes = kd_test_coo_finish(&h);
    check_both_dtypes(holes, "empty rows"); /* rows 3..5: symmetric, not SPD-looking */

    /* non-square: never symmetric, no witness */
    kd_csr_t *wide = kd_test_random_matrix(7, 9, NULL, 3);
    check_both_dtypes(wide, "7x9");
    REQUIRE(kd_matrix_scan(wide, &s, &inv, &err) == KD_OK);
    CHECK(!s.symmetric && !s.looks_spd && s.asymmetric_row == -1 && inv == NULL);
    kd_csr_free(wide);
    kd_csr_free(holes);
}

static kd_csr_t *laplacian_3d(int64_t n);

/* More nonzeros than one slice takes: the slices' findings merge in row order (as many slices
 * as there are CPUs, up to 6 here). */
static void test_scan_slices(void)
{
    kd_csr_t *m = laplacian_3d(100); /* 6.9M nonzeros */
    REQUIRE(m != NULL);
    check_scan(m, "laplacian");
    double *v = m->values;
    const int64_t late = m->nnz - 7, early = 11;
    v[late] = -2.0;
    check_scan(m, "laplacian, broken near the end");
    v[early] = -3.0;
    check_scan(m, "laplacian, broken near the start and the end");
    kd_csr_free(m);
}

/* A reordered matrix keeps the client matrix's flag; its witness is in the client's numbering. */
static void test_reordered(void)
{
    if (!kd_reorder_available(KD_REORDER_RCM))
        return;
    kd_csr_t *m = kd_test_scramble(kd_test_laplacian_2d(12, 9));
    kd_matrix_t *A = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_matrix_upload_reordered(ocl, m, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A, &err) ==
            KD_OK);
    CHECK(A->order.kind == KD_REORDER_RCM && A->scan.symmetric && A->scan.looks_spd);
    kd_matrix_free(A);
    const int64_t k = random_off_diagonal(m);
    REQUIRE(k >= 0);
    ((double *)m->values)[k] = 7.25;
    REQUIRE(kd_matrix_upload_reordered(ocl, m, KD_FMT_CSR_SCALAR, KD_REORDER_RCM, &A, &err) ==
            KD_OK);
    CHECK(!A->scan.symmetric && !A->scan.looks_spd);
    /* the witness is the changed entry or its mirror, in the client's numbering */
    const int64_t i = kd_csr_row_of_entry(m, k), j = m->indices[k];
    CHECK_MSG((A->scan.asymmetric_row == i && A->scan.asymmetric_col == j &&
               A->scan.asymmetric_value == 7.25 && A->scan.asymmetric_mirror == -1.0) ||
                  (A->scan.asymmetric_row == j && A->scan.asymmetric_col == i &&
                   A->scan.asymmetric_value == -1.0 && A->scan.asymmetric_mirror == 7.25),
              "witness (%lld, %lld) = %g / %g for the change at (%lld, %lld)",
              (long long)A->scan.asymmetric_row, (long long)A->scan.asymmetric_col,
              A->scan.asymmetric_value, A->scan.asymmetric_mirror, (long long)i, (long long)j);
    kd_matrix_free(A);
    kd_csr_free(m);
}

/* The names after "use " in msg, split at ", " and " or ", into out (each NUL-terminated). */
static int listed_methods(const char *msg, char out[][32], int cap)
{
    const char *p = strstr(msg, "): use ");
    int n = 0;
    if (p == NULL)
        return 0;
    p += strlen("): use ");
    while (*p != '\0' && n < cap) {
        size_t len = strcspn(p, ", ");
        snprintf(out[n++], 32, "%.*s", (int)len, p);
        p += len;
        if (strncmp(p, ", ", 2) == 0)
            p += 2;
        else if (strncmp(p, " or ", 4) == 0)
            p += 4;
        else
            break;
    }
    return n;
}

static void test_refusal(void)
{
    kd_csr_t *m = kd_test_laplacian_2d(10, 10);
    /* a[3][4] = -1 becomes -0.5; a[4][3] stays -1 */
    int64_t k = -1;
    for (int64_t q = m->indptr[3]; q < m->indptr[4]; q++)
        k = m->indices[q] == 4 ? q : k;
    REQUIRE(k >= 0);
    ((double *)m->values)[k] = -0.5;
    kd_test_problem_t p;
    REQUIRE(kd_test_problem_make(ocl, &p, m, KD_DTYPE_F64, 1) == 0);
    CHECK(!p.A->scan.symmetric);
    size_t without = 0;
    for (size_t i = 0; i < kd_method_count; i++)
        without +=
            (kd_method_table[i]->needs & (KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD)) == 0;
    for (size_t i = 0; i < kd_method_count; i++) {
        const kd_method_ops_t *mo = kd_method_table[i];
        kd_solve_params_t prm;
        kd_solve_params_default(&prm);
        prm.method = mo;
        prm.maxiter = 5;
        kd_solve_result_t res;
        kd_err_t err = {0};
        int rc = kd_solve(ocl, p.A, 1, p.b, NULL, p.x, &prm, &res, &err);
        if ((mo->needs & (KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD)) == 0) {
            CHECK_MSG(rc == KD_OK, "%s: %s", mo->name, err.message);
            if (rc == KD_OK)
                kd_solve_result_free(&res);
            continue;
        }
        CHECK_EQ_INT(rc, KD_EBADREQ);
        char want[160];
        snprintf(want, sizeof(want),
                 "method %s needs a symmetric matrix; this one is not (a[3][4] = -0.5 but "
                 "a[4][3] = -1)",
                 mo->name);
        CHECK_STR_CONTAINS(err.message, want);
        char names[32][32];
        const int n = listed_methods(err.message, names, (int)(sizeof(names) / sizeof(names[0])));
        CHECK_MSG((size_t)n == without, "%s lists %d methods, the table has %zu without the need",
                  err.message, n, without);
        for (int j = 0; j < n; j++) {
            const kd_method_ops_t *o = kd_method_find(names[j]);
            CHECK_MSG(o != NULL &&
                          (o->needs & (KD_METHOD_NEEDS_SYMMETRIC | KD_METHOD_NEEDS_SPD)) == 0,
                      "listed '%s'", names[j]);
        }
        if (without == 0)
            CHECK_STR_CONTAINS(err.message, "this server has no method for nonsymmetric matrices");
    }
    kd_test_problem_free(&p);

    /* the same matrix made symmetric solves */
    kd_test_problem_t q;
    REQUIRE(kd_test_problem_make(ocl, &q, kd_test_laplacian_2d(10, 10), KD_DTYPE_F64, 1) == 0);
    CHECK(q.A->scan.symmetric && q.A->scan.looks_spd);
    for (size_t i = 0; i < kd_method_count; i++) {
        if ((kd_method_table[i]->needs & KD_METHOD_NEEDS_SPD) == 0)
            continue;
        kd_solve_params_t prm;
        kd_solve_params_default(&prm);
        prm.method = kd_method_table[i];
        kd_solve_result_t res;
        kd_err_t err = {0};
        CHECK_MSG(kd_solve(ocl, q.A, 1, q.b, NULL, q.x, &prm, &res, &err) == KD_OK, "%s: %s",
                  kd_method_table[i]->name, err.message);
        CHECK_EQ_INT(res.status, KD_SOLVE_CONVERGED);
        kd_solve_result_free(&res);
    }
    kd_test_problem_free(&q);

    /* an entry stored on one side only */
    kd_csr_t *one = with_entry(kd_test_laplacian_2d(4, 4), 0, 9, 0.25);
    REQUIRE(kd_test_problem_make(ocl, &q, one, KD_DTYPE_F32, 1) == 0);
    kd_solve_params_t prm;
    kd_solve_params_default(&prm);
    kd_solve_result_t res;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_solve(ocl, q.A, 1, q.b, NULL, q.x, &prm, &res, &err), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "(a[0][9] = 0.25 but a[9][0] is not stored)");
    kd_test_problem_free(&q);
}

/* The 7-point Laplacian of an n^3 grid, directly in CSR (the COO builder would take longer). */
static kd_csr_t *laplacian_3d(int64_t n)
{
    const int64_t rows = n * n * n;
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    int64_t nnz = 7 * rows - 6 * n * n;
    if (kd_csr_alloc(rows, rows, nnz, KD_DTYPE_F64, &m, &err) != KD_OK)
        return NULL;
    double *v = m->values;
    int64_t at = 0;
    m->indptr[0] = 0;
    for (int64_t z = 0; z < n; z++)
        for (int64_t y = 0; y < n; y++)
            for (int64_t x = 0; x < n; x++) {
                const int64_t r = (z * n + y) * n + x;
                const int64_t cols[7] = {
                    z > 0 ? r - n * n : -1, y > 0 ? r - n : -1,     x > 0 ? r - 1 : -1,        r,
                    x < n - 1 ? r + 1 : -1, y < n - 1 ? r + n : -1, z < n - 1 ? r + n * n : -1};
                for (int c = 0; c < 7; c++)
                    if (cols[c] >= 0) {
                        m->indices[at] = (int32_t)cols[c];
                        v[at++] = cols[c] == r ? 6.0 : -1.0;
                    }
                m->indptr[r + 1] = (int32_t)at;
            }
    m->nnz = at;
    return m;
}

/* Not a check: the whole scan's cost on a 1M-row 3-D Laplacian (best of 5), and for scale the
 * host transpose amg's tolerant check builds. */
static void report_cost(void)
{
    kd_csr_t *m = laplacian_3d(100);
    REQUIRE(m != NULL);
    kd_matrix_scan_t s;
    kd_err_t err = {0};
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        void *inv = NULL;
        uint64_t t0 = kd_clock_ns();
        REQUIRE(kd_matrix_scan(m, &s, &inv, &err) == KD_OK);
        best = fmin(best, (double)(kd_clock_ns() - t0) / 1e6);
        free(inv);
    }
    CHECK(s.symmetric && s.looks_spd);
    kd_csr_t *t = NULL;
    uint64_t t0 = kd_clock_ns();
    REQUIRE(kd_csr_transpose(m, &t, &err) == KD_OK);
    const double transpose_ms = (double)(kd_clock_ns() - t0) / 1e6;
    kd_csr_free(t);
    /* new values on the held pattern: the scan through the mirror map (built by the first) */
    kd_csr_t *v = NULL;
    REQUIRE(kd_csr_with_values(m, &v, &err) == KD_OK);
    memcpy(v->values, m->values, (size_t)m->nnz * sizeof(double));
    double mapped = 1e30;
    for (int rep = 0; rep < 6; rep++) {
        void *inv = NULL;
        uint64_t t1 = kd_clock_ns();
        REQUIRE(kd_matrix_scan(v, &s, &inv, &err) == KD_OK);
        if (rep > 0)
            mapped = fmin(mapped, (double)(kd_clock_ns() - t1) / 1e6);
        free(inv);
    }
    CHECK(s.symmetric && s.looks_spd);
    printf("scan of the 3-D Laplacian (%lld rows, %lld nonzeros, %d slices): %.1f ms, %.1f ms "
           "through its pattern's mirror map; a host transpose of it: %.1f ms\n",
           (long long)m->rows, (long long)m->nnz, kd_slices_count(m->nnz), best, mapped,
           transpose_ms);
    kd_csr_free(v);
    kd_csr_free(m);
}

int main(void)
{
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    kd_test_seed();
    test_scan_random();
    test_scan_shapes();
    test_scan_slices();
    test_reordered();
    test_refusal();
    report_cost();
    kd_ocl_close(ocl);
    return kd_test_finish();
}
