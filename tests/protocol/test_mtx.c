/*
 * The Matrix Market reader and writer (protocol/mtx.c): every field x symmetry combination against
 * a dense matrix written out by hand, each malformed input rejected with its code and the line
 * number, the real files in tests/matrices against the counts in INDEX.md (recomputed
 * independently), write -> read round trips of random matrices, headers that claim more than the
 * text holds, and random mutations of valid files (which must fail cleanly, never crash).
 *
 * Every text is handed to the reader in a heap buffer of exactly its length with no NUL after it,
 * so under ASan a read past `len` is caught.
 */
#include "protocol/mtx.h"
#include "kd_test.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define KD_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KD_TEST_ASAN 1
#endif
#endif

/* A heap copy of text[0..len) with nothing after it. */
static char *exact_copy(const char *text, size_t len)
{
    char *copy = malloc(len > 0 ? len : 1);
    if (copy != NULL && len > 0)
        memcpy(copy, text, len);
    return copy;
}

static int read_matrix_n(const char *text, size_t len, kd_dtype_t dtype,
                         const kd_csr_limits_t *limits, kd_csr_t **m, kd_err_t *err)
{
    char *copy = exact_copy(text, len);
    if (copy == NULL)
        return KD_ENOMEM;
    kd_err_clear(err);
    int rc = kd_mtx_read_matrix(copy, len, dtype, limits, m, err);
    free(copy);
    return rc;
}

static int read_matrix(const char *text, kd_dtype_t dtype, kd_csr_t **m, kd_err_t *err)
{
    return read_matrix_n(text, strlen(text), dtype, NULL, m, err);
}

static int read_dense_n(const char *text, size_t len, int64_t max_values, double **v, int64_t *rows,
                        int64_t *cols, kd_err_t *err)
{
    char *copy = exact_copy(text, len);
    if (copy == NULL)
        return KD_ENOMEM;
    kd_err_clear(err);
    int rc = kd_mtx_read_dense(copy, len, max_values, v, rows, cols, err);
    free(copy);
    return rc;
}

/* Column-major dense copy of a CSR matrix. */
static double *csr_to_dense(const kd_csr_t *m)
{
    double *d = calloc((size_t)(m->rows * m->cols) + 1, sizeof(double));
    if (d == NULL)
        return NULL;
    for (int64_t r = 0; r < m->rows; r++)
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
            d[(int64_t)m->indices[k] * m->rows + r] = kd_csr_value(m, k);
    return d;
}

/* indptr monotone from 0 to nnz, indices strictly increasing in each row and inside 0..cols-1. */
static int csr_is_canonical(const kd_csr_t *m)
{
    if (m->indptr[0] != 0 || m->indptr[m->rows] != m->nnz)
        return 0;
    for (int64_t r = 0; r < m->rows; r++) {
        if (m->indptr[r + 1] < m->indptr[r])
            return 0;
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++) {
            if (m->indices[k] < 0 || m->indices[k] >= m->cols)
                return 0;
            if (k > m->indptr[r] && m->indices[k] <= m->indices[k - 1])
                return 0;
        }
    }
    return 1;
}

static char *load_matrix_file(const char *name, size_t *len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", KD_TEST_MATRICES, name);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        cap *= 2;
        char *grown = realloc(buf, cap);
        if (grown == NULL) {
            free(buf);
            buf = NULL;
        }
        buf = grown;
    }
    fclose(f);
    *len = n;
    return buf;
}

/* ---- every field x symmetry, against a dense matrix written out by hand ---- */

struct dense_case {
    const char *name;
    const char *text;
    int64_t rows, cols;
    double dense[12]; /* column-major */
};

static const struct dense_case dense_cases[] = {
    {"coordinate real general (duplicate summed)",
     "%%MatrixMarket matrix coordinate real general\n% a comment\n3 3 5\n1 1 1.5\n3 1 -2\n"
     "1 3 4e-1\n2 2 3\n3 1 0.5\n",
     3,
     3,
     {1.5, 0, -1.5, 0, 3, 0, 0.4, 0, 0}},
    {"coordinate integer general",
     "%%MatrixMarket matrix coordinate integer general\n3 2 4\n1 1 7\n3 1 -2\n2 2 30\n3 1 -1\n",
     3,
     2,
     {7, 0, -3, 0, 30, 0}},
    {"coordinate pattern general",
     "%%MatrixMarket matrix coordinate pattern general\n3 3 3\n1 1\n3 1\n2 3\n",
     3,
     3,
     {1, 0, 1, 0, 0, 0, 0, 1, 0}},
    {"coordinate real symmetric",
     "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 2\n2 1 -1\n3 2 0.25\n3 3 5\n",
     3,
     3,
     {2, -1, 0, -1, 0, 0.25, 0, 0.25, 5}},
    {"coordinate real symmetric, upper triangle stored",
     "%%MatrixMarket matrix coordinate real symmetric\n3 3 4\n1 1 2\n1 2 -1\n2 3 0.25\n3 3 5\n",
     3,
     3,
     {2, -1, 0, -1, 0, 0.25, 0, 0.25, 5}},
    {"coordinate integer symmetric",
     "%%MatrixMarket matrix coordinate integer symmetric\n3 3 3\n1 1 2\n3 1 -4\n3 2 7\n",
     3,
     3,
     {2, 0, -4, 0, 0, 7, -4, 7, 0}},
    {"coordinate pattern symmetric",
     "%%MatrixMarket matrix coordinate pattern symmetric\n3 3 3\n1 1\n2 1\n3 2\n",
     3,
     3,
     {1, 1, 0, 1, 0, 1, 0, 1, 0}},
    {"coordinate real skew-symmetric",
     "%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1.5\n3 2 -2\n",
     3,
     3,
     {0, 1.5, 0, -1.5, 0, -2, 0, 2, 0}},
    {"coordinate integer skew-symmetric",
     "%%MatrixMarket matrix coordinate integer skew-symmetric\n3 3 2\n3 1 3\n3 2 -4\n",
     3,
     3,
     {0, 0, 3, 0, 0, -4, -3, 4, 0}},
    {"coordinate pattern skew-symmetric",
     "%%MatrixMarket matrix coordinate pattern skew-symmetric\n3 3 2\n2 1\n3 1\n",
     3,
     3,
     {0, 1, 1, -1, 0, 0, -1, 0, 0}},
    {"array real general (zeros dropped when sparse)",
     "%%MatrixMarket matrix array real general\n2 3\n1\n0\n-2\n3.5\n0\n6e0\n",
     2,
     3,
     {1, 0, -2, 3.5, 0, 6}},
    {"array integer general",
     "%%MatrixMarket matrix array integer general\n3 2\n1\n2\n3\n-4\n0\n6\n",
     3,
     2,
     {1, 2, 3, -4, 0, 6}},
    {"array real symmetric",
     "%%MatrixMarket matrix array real symmetric\n3 3\n4\n-1\n0\n5\n2.5\n6\n",
     3,
     3,
     {4, -1, 0, -1, 5, 2.5, 0, 2.5, 6}},
    {"array integer symmetric",
     "%%MatrixMarket matrix array integer symmetric\n2 2\n4\n-1\n5\n",
     2,
     2,
     {4, -1, -1, 5}},
    {"array real skew-symmetric",
     "%%MatrixMarket matrix array real skew-symmetric\n3 3\n1\n2\n3.5\n",
     3,
     3,
     {0, 1, 2, -1, 0, 3.5, -2, -3.5, 0}},
    {"array integer skew-symmetric",
     "%%MatrixMarket matrix array integer skew-symmetric\n3 3\n-1\n2\n3\n",
     3,
     3,
     {0, -1, 2, 1, 0, 3, -2, -3, 0}},
};

static void check_dense_case(const struct dense_case *c, const char *text, size_t len)
{
    int64_t n = c->rows * c->cols, nonzeros = 0;
    for (int64_t k = 0; k < n; k++)
        nonzeros += c->dense[k] != 0.0;
    kd_dtype_t dtypes[2] = {KD_DTYPE_F64, KD_DTYPE_F32};
    for (int t = 0; t < 2; t++) {
        kd_csr_t *m = NULL;
        kd_err_t err = {0};
        int rc = read_matrix_n(text, len, dtypes[t], NULL, &m, &err);
        CHECK_MSG(rc == KD_OK, "%s: %s", c->name, err.message);
        if (rc != KD_OK)
            continue;
        CHECK_EQ_INT(m->rows, c->rows);
        CHECK_EQ_INT(m->cols, c->cols);
        CHECK_MSG(m->nnz == nonzeros, "%s: nnz %lld, expected %lld", c->name, (long long)m->nnz,
                  (long long)nonzeros);
        CHECK(m->dtype == dtypes[t]);
        CHECK(csr_is_canonical(m));
        double *d = csr_to_dense(m);
        REQUIRE(d != NULL);
        for (int64_t k = 0; k < n; k++) {
            double want = dtypes[t] == KD_DTYPE_F32 ? (double)(float)c->dense[k] : c->dense[k];
            CHECK_MSG(d[k] == want, "%s: value %lld is %g, expected %g", c->name, (long long)k,
                      d[k], want);
        }
        free(d);
        kd_csr_free(m);
    }
    double *v = NULL;
    int64_t rows = -1, cols = -1;
    kd_err_t err = {0};
    int rc = read_dense_n(text, len, 1000, &v, &rows, &cols, &err);
    CHECK_MSG(rc == KD_OK, "%s (dense): %s", c->name, err.message);
    if (rc != KD_OK)
        return;
    CHECK_EQ_INT(rows, c->rows);
    CHECK_EQ_INT(cols, c->cols);
    for (int64_t k = 0; k < n; k++)
        CHECK_MSG(v[k] == c->dense[k], "%s (dense): value %lld is %g, expected %g", c->name,
                  (long long)k, v[k], c->dense[k]);
    free(v);
}

static void test_every_field_and_symmetry(void)
{
    for (size_t i = 0; i < sizeof(dense_cases) / sizeof(dense_cases[0]); i++)
        check_dense_case(&dense_cases[i], dense_cases[i].text, strlen(dense_cases[i].text));
}

/* The same matrices, last newline removed: the final line needs no '\n'. */
static void test_no_final_newline(void)
{
    for (size_t i = 0; i < sizeof(dense_cases) / sizeof(dense_cases[0]); i++) {
        size_t len = strlen(dense_cases[i].text);
        check_dense_case(&dense_cases[i], dense_cases[i].text, len - 1);
    }
}

static void test_syntax_variants(void)
{
    static const struct dense_case variants[] = {
        {"keywords in any case",
         "%%matrixmarket MATRIX Coordinate REAL General\n2 2 2\n1 1 1\n2 2 2\n",
         2,
         2,
         {1, 0, 0, 2}},
        {"CRLF line ends, tabs, blank lines, comments after the size line",
         "%%MatrixMarket matrix coordinate real general\r\n%c\r\n\r\n  \t\r\n2 2 2\r\n\r\n"
         "%late comment\r\n\t1\t1\t1\r\n  2 2   2  \r\n\r\n\n",
         2,
         2,
         {1, 0, 0, 2}},
        {"byte order mark before the banner",
         "\xEF\xBB\xBF%%MatrixMarket matrix array real general\n1 1\n5\n",
         1,
         1,
         {5}},
        {"number spellings",
         "%%MatrixMarket matrix coordinate real general\n2 3 5\n+1 1 .5\n1 2 -1E+2\n1 3 3.\n"
         "2 1 0x10\n2 3 1e-320\n",
         2,
         3,
         {0.5, 16, -100, 0, 3, 1e-320}},
        {"integer field with signs and leading zeros",
         "%%MatrixMarket matrix coordinate integer general\n1 2 2\n1 1 -007\n1 2 "
         "+9007199254740993\n",
         1,
         2,
         {-7, 9007199254740992.0}},
    };
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        const struct dense_case *c = &variants[i];
        if (c->rows == 1 && c->cols > 1) {
            /* read_dense turns 1 x n into n x 1; only the sparse reader is checked here */
            kd_csr_t *m = NULL;
            kd_err_t err = {0};
            REQUIRE(read_matrix(c->text, KD_DTYPE_F64, &m, &err) == KD_OK);
            for (int64_t k = 0; k < c->cols; k++)
                CHECK(kd_csr_value(m, k) == c->dense[k]);
            kd_csr_free(m);
            continue;
        }
        check_dense_case(c, c->text, strlen(c->text));
    }

    /* infinities and NaN are numbers as strtod reads them */
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(read_matrix("%%MatrixMarket matrix coordinate real general\n1 3 3\n1 1 inf\n"
                        "1 2 -Infinity\n1 3 nan\n",
                        KD_DTYPE_F64, &m, &err) == KD_OK);
    CHECK(isinf(kd_csr_value(m, 0)) && kd_csr_value(m, 0) > 0);
    CHECK(isinf(kd_csr_value(m, 1)) && kd_csr_value(m, 1) < 0);
    CHECK(isnan(kd_csr_value(m, 2)));
    kd_csr_free(m);
}

static void test_header(void)
{
    kd_mtx_header_t h;
    kd_err_t err = {0};
    const char *t = "%%MatrixMarket matrix coordinate pattern symmetric\n%x\n5 5 7\n";
    REQUIRE(kd_mtx_read_header(t, strlen(t), &h, &err) == KD_OK);
    CHECK(h.coordinate == 1);
    CHECK(h.field == KD_MTX_PATTERN);
    CHECK(h.symmetry == KD_MTX_SYMMETRIC);
    CHECK_EQ_INT(h.rows, 5);
    CHECK_EQ_INT(h.cols, 5);
    CHECK_EQ_INT(h.entries, 7);

    t = "%%MatrixMarket matrix array integer symmetric\n4 4\n";
    REQUIRE(kd_mtx_read_header(t, strlen(t), &h, &err) == KD_OK);
    CHECK(h.coordinate == 0);
    CHECK(h.field == KD_MTX_INTEGER);
    CHECK_EQ_INT(h.entries, 10);
    t = "%%MatrixMarket matrix array real skew-symmetric\n4 4\n";
    REQUIRE(kd_mtx_read_header(t, strlen(t), &h, &err) == KD_OK);
    CHECK_EQ_INT(h.entries, 6);
    t = "%%MatrixMarket matrix array real general\n4 3\n";
    REQUIRE(kd_mtx_read_header(t, strlen(t), &h, &err) == KD_OK);
    CHECK_EQ_INT(h.entries, 12);

    /* The header of a complex or hermitian file is readable; the readers refuse the matrix. */
    t = "%%MatrixMarket matrix coordinate complex hermitian\n2 2 1\n1 1 1 0\n";
    REQUIRE(kd_mtx_read_header(t, strlen(t), &h, &err) == KD_OK);
    CHECK(h.field == KD_MTX_COMPLEX);
    CHECK(h.symmetry == KD_MTX_HERMITIAN);

    /* The largest entry count a header can state. */
    t = "%%MatrixMarket matrix coordinate real general\n1 1 9223372036854775807\n";
    REQUIRE(kd_mtx_read_header(t, strlen(t), &h, &err) == KD_OK);
    CHECK_EQ_INT(h.entries, INT64_MAX);
}

/* ---- malformed input: the right code and the line in the message ---- */

enum { BOTH = 0, SPARSE_ONLY = 1, DENSE_ONLY = 2 };

struct bad_case {
    const char *text;
    int len; /* 0: strlen(text) */
    int code;
    const char *message;
    int which;
};

#define CRG "%%MatrixMarket matrix coordinate real general\n"

static const struct bad_case bad_cases[] = {
    {"", 0, KD_EBADREQ, "line 1: the text is empty", BOTH},
    {"hello world\n1 1 1\n", 0, KD_EBADREQ,
     "line 1: not a Matrix Market banner: expected '%%MatrixMarket matrix <format> <field> "
     "<symmetry>', found 'hello world'",
     BOTH},
    {"%MatrixMarket matrix coordinate real general\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: not a Matrix Market banner", BOTH},
    {"%%MatrixMarket\n", 0, KD_EBADREQ, "line 1: the banner ends before the object", BOTH},
    {"%%MatrixMarket vector coordinate real general\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: unknown object 'vector' (expected matrix)", BOTH},
    {"%%MatrixMarket matrix sparse real general\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: unknown format 'sparse' (expected coordinate or array)", BOTH},
    {"%%MatrixMarket matrix coordinate\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: the banner ends before the field", BOTH},
    {"%%MatrixMarket matrix coordinate double general\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: unknown field 'double' (expected real, integer, pattern or complex)", BOTH},
    {"%%MatrixMarket matrix coordinate real\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: the banner ends before the symmetry", BOTH},
    {"%%MatrixMarket matrix coordinate real bogus\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: unknown symmetry 'bogus' (expected general, symmetric, skew-symmetric or "
     "hermitian)",
     BOTH},
    {"%%MatrixMarket matrix coordinate real general extra\n1 1 0\n", 0, KD_EBADREQ,
     "line 1: unexpected 'extra' after the banner", BOTH},
    {"%%MatrixMarket matrix array pattern general\n1 1\n", 0, KD_EBADREQ,
     "line 1: 'array pattern' is not a Matrix Market type", BOTH},
    {"%%MatrixMarket matrix coordinate complex general\n1 1 1\n1 1 1 0\n", 0, KD_EUNSUPPORTED,
     "line 1: complex matrices are not supported (krylovd solves real systems)", BOTH},
    {"%%MatrixMarket matrix coordinate complex hermitian\n1 1 1\n1 1 1 0\n", 0, KD_EUNSUPPORTED,
     "line 1: complex matrices are not supported", BOTH},
    {"%%MatrixMarket matrix coordinate real hermitian\n1 1 1\n1 1 1\n", 0, KD_EUNSUPPORTED,
     "line 1: hermitian matrices are not supported", BOTH},
    {"%%MatrixMarket matrix array complex general\n1 1\n1 0\n", 0, KD_EUNSUPPORTED,
     "line 1: complex matrices are not supported", BOTH},
    /* size line */
    {CRG, 0, KD_EBADREQ, "line 1: missing size line: the file ends after the header", BOTH},
    {CRG "% comment\n\n   \n", 0, KD_EBADREQ, "line 4: missing size line", BOTH},
    {CRG "3 x 2\n", 0, KD_EBADREQ,
     "line 2: the number of columns 'x' is not a non-negative integer", BOTH},
    {CRG "3.0 3 1\n1 1 1\n", 0, KD_EBADREQ,
     "line 2: the number of rows '3.0' is not a non-negative integer", BOTH},
    {CRG "-3 3 1\n1 1 1\n", 0, KD_EBADREQ, "line 2: the number of rows -3 is negative", BOTH},
    {CRG "3 3 -1\n", 0, KD_EBADREQ, "line 2: the number of entries -1 is negative", BOTH},
    {CRG "3 3\n1 1 1\n", 0, KD_EBADREQ,
     "line 2: the size line ends before the number of entries (expected 'rows columns "
     "entries')",
     BOTH},
    {CRG "99999999999999999999 3 1\n1 1 1\n", 0, KD_EBADREQ,
     "line 2: the number of rows '99999999999999999999' is too large", BOTH},
    {CRG "3 3 1 7\n1 1 1\n", 0, KD_EBADREQ, "line 2: unexpected '7' after the size line", BOTH},
    {"%%MatrixMarket matrix array real general\n2 2 4\n1\n2\n3\n4\n", 0, KD_EBADREQ,
     "line 2: unexpected '4' after the size line (expected 'rows columns')", BOTH},
    {"%%MatrixMarket matrix coordinate real symmetric\n3 4 1\n1 1 1\n", 0, KD_EBADREQ,
     "line 2: a symmetric matrix must be square, this one is 3 x 4", BOTH},
    {"%%MatrixMarket matrix array real skew-symmetric\n%\n2 3\n1\n", 0, KD_EBADREQ,
     "line 3: a skew-symmetric matrix must be square, this one is 2 x 3", BOTH},
    {"%%MatrixMarket matrix array real symmetric\n4294967296 4294967296\n1\n", 0, KD_ETOOLARGE,
     "line 2: a 4294967296 x 4294967296 array is too large", BOTH},
    /* entries */
    {CRG "3 3 2\n1 1 1\n2\n", 0, KD_EBADREQ,
     "line 4: short entry line (expected 'row column value')", BOTH},
    {CRG "3 3 2\n1 1 1\n2 2\n", 0, KD_EBADREQ, "line 4: short entry line", BOTH},
    {"%%MatrixMarket matrix coordinate pattern general\n3 3 1\n2\n", 0, KD_EBADREQ,
     "line 3: short entry line (expected 'row column')", BOTH},
    {CRG "494 494 1\n0 1 1\n", 0, KD_EBADREQ, "line 3: row index 0 is outside 1..494", BOTH},
    {CRG "3 3 2\n1 1 1\n4 1 1\n", 0, KD_EBADREQ, "line 4: row index 4 is outside 1..3", BOTH},
    {CRG "3 3 1\n1 0 1\n", 0, KD_EBADREQ, "line 3: column index 0 is outside 1..3", BOTH},
    {CRG "3 3 1\n1 5 1\n", 0, KD_EBADREQ, "line 3: column index 5 is outside 1..3", BOTH},
    {CRG "3 3 1\n-1 1 1\n", 0, KD_EBADREQ, "line 3: row index -1 is outside 1..3", BOTH},
    {CRG "3 3 1\n99999999999999999999 1 1\n", 0, KD_EBADREQ,
     "line 3: row index 99999999999999999999 is outside 1..3", BOTH},
    {CRG "3 3 1\n1.5 1 1\n", 0, KD_EBADREQ, "line 3: row index '1.5' is not an integer", BOTH},
    {CRG "0 3 1\n1 1 1\n", 0, KD_EBADREQ, "line 3: row index 1 but the matrix has no rows", BOTH},
    {CRG "3 3 3\n1 1 1\n2 2 2\n", 0, KD_EBADREQ, "line 4: expected 3 entries, file ends after 2",
     BOTH},
    {CRG "3 3 3\n1 1 1\n2 2 2\n\n\n", 0, KD_EBADREQ,
     "line 6: expected 3 entries, file ends after 2", BOTH},
    {CRG "3 3 1\n1 1 1\n2 2 2\n", 0, KD_EBADREQ,
     "line 4: more entries than the 1 declared on line 2", BOTH},
    {CRG "3 3 0\n\n%\n1 1 1\n", 0, KD_EBADREQ, "line 5: more entries than the 0 declared on line 2",
     BOTH},
    {CRG "3 3 1\n1 1 abc\n", 0, KD_EBADREQ, "line 3: value 'abc' is not a number", BOTH},
    {CRG "3 3 1\n1 1 1.5x\n", 0, KD_EBADREQ, "line 3: value '1.5x' is not a number", BOTH},
    {CRG "3 3 1\n1 1 1,5\n", 0, KD_EBADREQ, "line 3: value '1,5' is not a number", BOTH},
    {CRG "3 3 1\n1 1 1e999\n", 0, KD_EBADREQ, "line 3: value '1e999' is out of range", BOTH},
    {CRG "3 3 1\n1 1 1\0\n", 59, KD_EBADREQ, "line 3: value '1?' is not a number", BOTH},
    {CRG "3 3 1\n1 1 "
         "1234567890123456789012345678901234567890123456789012345678901234567890123456789012345678"
         "9012345678901234567890123456789012345678901234567890123456789012345678901234567890123456"
         "78901234567890123456789012345678901234567890123456789012345678901234567890123456789x\n",
     0, KD_EBADREQ, "line 3: value '1234567890123456789012345678901234567890...' is not a number",
     BOTH},
    {"%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 1 1.5\n", 0, KD_EBADREQ,
     "line 3: value '1.5' is not an integer (the field is integer)", BOTH},
    {"%%MatrixMarket matrix coordinate integer general\n3 3 1\n1 1 9223372036854775808\n", 0,
     KD_EBADREQ, "line 3: value '9223372036854775808' is out of range", BOTH},
    {CRG "3 3 1\n1 1 1 junk\n", 0, KD_EBADREQ, "line 3: unexpected 'junk' after the entry", BOTH},
    {"%%MatrixMarket matrix coordinate pattern general\n3 3 1\n1 1 1\n", 0, KD_EBADREQ,
     "line 3: unexpected '1' after the entry (a pattern file has no values)", BOTH},
    {"%%MatrixMarket matrix array real general\n2 2\n1\n2 3\n", 0, KD_EBADREQ,
     "line 4: unexpected '3' after the value (an array file has one value per line)", BOTH},
    {"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n", 0, KD_EBADREQ,
     "line 5: expected 4 entries, file ends after 3", BOTH},
    {"%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n\n5\n", 0, KD_EBADREQ,
     "line 8: more entries than the 4 declared on line 2", BOTH},
    {"%%MatrixMarket matrix array real general\n2 2\n1\n2\nx\n4\n", 0, KD_EBADREQ,
     "line 5: value 'x' is not a number", BOTH},
    {"%%MatrixMarket matrix coordinate real skew-symmetric\n3 3 2\n2 1 1\n2 2 1\n", 0, KD_EBADREQ,
     "line 4: diagonal entry (2, 2) in a skew-symmetric matrix", BOTH},
    {"%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n2 1 1\n3 3 1\n1 2 1\n", 0, KD_EBADREQ,
     "line 5: entry (1, 2) is above the diagonal but earlier entries are below it (a symmetric "
     "file stores one triangle)",
     BOTH},
    {"%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n1 3\n3 1\n", 0, KD_EBADREQ,
     "line 4: entry (3, 1) is below the diagonal but earlier entries are above it", BOTH},
    /* limits */
    {CRG "1000 1000 1099511627776\n1 1 1\n", 0, KD_ETOOLARGE, "line 2: nnz = 1099511627776",
     SPARSE_ONLY},
    {CRG "3000000000 1 0\n", 0, KD_ETOOLARGE, "line 2: 3000000000 x 1 is over the largest",
     SPARSE_ONLY},
    {CRG "3 3 1\n1 1 1\n", 0, KD_ETOOLARGE, "line 2: a 3 x 3 block is over the limit of 8 values",
     DENSE_ONLY},
};

static void test_malformed_input(void)
{
    for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
        const struct bad_case *c = &bad_cases[i];
        size_t len = c->len ? (size_t)c->len : strlen(c->text);
        kd_err_t err = {0};
        if (c->which != DENSE_ONLY) {
            kd_csr_t *m = NULL;
            int rc = read_matrix_n(c->text, len, KD_DTYPE_F64, NULL, &m, &err);
            CHECK_MSG(rc == c->code, "case %zu: %d (%s), expected %d", i, rc, err.message, c->code);
            CHECK_EQ_INT(err.code, c->code);
            CHECK_STR_CONTAINS(err.message, c->message);
            if (rc == KD_OK)
                kd_csr_free(m);
        }
        if (c->which != SPARSE_ONLY) {
            double *v = NULL;
            int64_t rows, cols;
            int rc = read_dense_n(c->text, len, c->which == DENSE_ONLY ? 8 : 1 << 20, &v, &rows,
                                  &cols, &err);
            CHECK_MSG(rc == c->code, "case %zu (dense): %d (%s), expected %d", i, rc, err.message,
                      c->code);
            CHECK_STR_CONTAINS(err.message, c->message);
            if (rc == KD_OK)
                free(v);
        }
    }
}

static void test_server_limits(void)
{
    kd_csr_limits_t limits = {.max_rows = 100, .max_cols = 100, .max_nnz = 4};
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    const char *t = CRG "3 3 5\n1 1 1\n1 2 1\n1 3 1\n2 1 1\n2 2 1\n";
    CHECK_EQ_INT(read_matrix_n(t, strlen(t), KD_DTYPE_F64, &limits, &m, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "line 2: nnz = 5 is over this server's limit 4");
    t = CRG "101 3 1\n1 1 1\n";
    CHECK_EQ_INT(read_matrix_n(t, strlen(t), KD_DTYPE_F64, &limits, &m, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message, "line 2: rows = 101 is over this server's limit 100");
    /* 3 stored entries, 6 once mirrored */
    t = "%%MatrixMarket matrix coordinate real symmetric\n3 3 3\n2 1 1\n3 1 1\n3 2 1\n";
    CHECK_EQ_INT(read_matrix_n(t, strlen(t), KD_DTYPE_F64, &limits, &m, &err), KD_ETOOLARGE);
    CHECK_STR_CONTAINS(err.message,
                       "line 5: more than 4 nonzeros (counting the mirrored triangle)");
    /* an array file is held to max_nnz by its nonzeros, not its size */
    t = "%%MatrixMarket matrix array real general\n3 3\n1\n0\n0\n0\n2\n0\n0\n0\n3\n";
    REQUIRE(read_matrix_n(t, strlen(t), KD_DTYPE_F64, &limits, &m, &err) == KD_OK);
    CHECK_EQ_INT(m->nnz, 3);
    kd_csr_free(m);
}

/* ---- real files ---- */

struct real_file {
    const char *name;
    int64_t rows, cols, nnz, max_row;
    double abs_sum; /* sum of |a_ij| over the expanded matrix (computed independently) */
    int symmetric;  /* check A == A^T */
};

static const struct real_file real_files[] = {
    {"494_bus.mtx", 494, 494, 1666, 10, 445300.6791430016, 1},
    {"dwt_878.mtx", 878, 878, 7448, 10, 7448, 1},
    {"can___24.mtx", 24, 24, 160, 9, 160, 1},
    {"ani4.mtx", 3081, 3081, 20971, 9, 7256.557177295824, 0},
    {"bayer10.mtx", 13436, 13436, 94926, 27, 386430.73906286986, 0},
    {"rajat01.mtx", 6833, 6833, 43250, 1442, 43250, 0},
    {"adder_dcop_05.mtx", 1813, 1813, 11097, 1310, 43.24459330613339, 0},
    {"watt_2.mtx", 1856, 1856, 11550, 128, 190.00061254597478, 0},
    {"arrow.mtx", 46500, 46500, 139498, 46500, 185998, 0},
    {"Groebner_id2003_aug.mtx", 4967, 2456, 173670, 829, 73786411719.0, 0},
    {"Franz6_id1959_aug.mtx", 10592, 3016, 48472, 6, 160064, 0},
    {"3by0.mtx", 3, 0, 0, 0, 0, 0},
};

/* Value at (r, c) of a canonical matrix, 0 when absent. */
static double csr_at(const kd_csr_t *m, int64_t r, int32_t c)
{
    for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
        if (m->indices[k] == c)
            return kd_csr_value(m, k);
    return 0.0;
}

static void test_real_files(void)
{
    for (size_t i = 0; i < sizeof(real_files) / sizeof(real_files[0]); i++) {
        const struct real_file *f = &real_files[i];
        size_t len;
        char *text = load_matrix_file(f->name, &len);
        CHECK_MSG(text != NULL, "cannot read %s", f->name);
        if (text == NULL)
            continue;
        kd_csr_t *m = NULL;
        kd_err_t err = {0};
        int rc = read_matrix_n(text, len, KD_DTYPE_F64, NULL, &m, &err);
        CHECK_MSG(rc == KD_OK, "%s: %s", f->name, err.message);
        if (rc == KD_OK) {
            CHECK_MSG(m->rows == f->rows && m->cols == f->cols && m->nnz == f->nnz,
                      "%s: %lld x %lld nnz %lld", f->name, (long long)m->rows, (long long)m->cols,
                      (long long)m->nnz);
            CHECK(csr_is_canonical(m));
            kd_csr_stats_t stats;
            kd_csr_compute_stats(m, &stats);
            CHECK_EQ_INT(stats.max_row, f->max_row);
            double abs_sum = 0.0;
            for (int64_t k = 0; k < m->nnz; k++)
                abs_sum += fabs(kd_csr_value(m, k));
            CHECK_NEAR(abs_sum, f->abs_sum, 1e-12);
            if (f->symmetric)
                for (int64_t r = 0; r < m->rows; r++)
                    for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
                        CHECK(csr_at(m, m->indices[k], (int32_t)r) == kd_csr_value(m, k));
            kd_csr_free(m);
        }
        /* float32 gives the same structure */
        rc = read_matrix_n(text, len, KD_DTYPE_F32, NULL, &m, &err);
        CHECK_MSG(rc == KD_OK, "%s (float32): %s", f->name, err.message);
        if (rc == KD_OK) {
            CHECK_EQ_INT(m->nnz, f->nnz);
            CHECK(m->dtype == KD_DTYPE_F32);
            kd_csr_free(m);
        }
        free(text);
    }

    /* Values: 494_bus line "16 1 -9.960159" lands at (15, 0) and its mirror (0, 15). */
    size_t len;
    char *text = load_matrix_file("494_bus.mtx", &len);
    REQUIRE(text != NULL);
    kd_csr_t *m = NULL;
    kd_err_t err = {0};
    REQUIRE(read_matrix_n(text, len, KD_DTYPE_F64, NULL, &m, &err) == KD_OK);
    CHECK(csr_at(m, 0, 0) == 2220.874);
    CHECK(csr_at(m, 15, 0) == -9.960159);
    CHECK(csr_at(m, 0, 15) == -9.960159);
    kd_csr_free(m);
    free(text);

    /* 3by0 as a dense block: 3 x 0, no values */
    text = load_matrix_file("3by0.mtx", &len);
    REQUIRE(text != NULL);
    double *v = NULL;
    int64_t rows = -1, cols = -1;
    REQUIRE(read_dense_n(text, len, 100, &v, &rows, &cols, &err) == KD_OK);
    CHECK_EQ_INT(rows, 3);
    CHECK_EQ_INT(cols, 0);
    free(v);
    free(text);
}

static void test_complex_and_bad_files(void)
{
    static const struct {
        const char *name;
        int code;
        const char *message;
    } files[] = {
        {"young1c.mtx", KD_EUNSUPPORTED,
         "line 1: complex matrices are not supported (krylovd solves real systems)"},
        {"bad/bad_header.mtx", KD_EBADREQ, "line 1: unknown symmetry 'bogus'"},
        {"bad/bad_dimensions.mtx", KD_EBADREQ, "line 3: missing size line"},
        {"bad/bad_matrix_type.mtx", KD_EUNSUPPORTED, "line 1: complex matrices are not supported"},
    };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        size_t len;
        char *text = load_matrix_file(files[i].name, &len);
        CHECK_MSG(text != NULL, "cannot read %s", files[i].name);
        if (text == NULL)
            continue;
        kd_csr_t *m = NULL;
        kd_err_t err = {0};
        CHECK_EQ_INT(read_matrix_n(text, len, KD_DTYPE_F64, NULL, &m, &err), files[i].code);
        CHECK_STR_CONTAINS(err.message, files[i].message);
        double *v = NULL;
        int64_t rows, cols;
        CHECK_EQ_INT(read_dense_n(text, len, 1 << 20, &v, &rows, &cols, &err), files[i].code);
        CHECK_STR_CONTAINS(err.message, files[i].message);
        free(text);
    }
    size_t len;
    char *text = load_matrix_file("young1c.mtx", &len);
    REQUIRE(text != NULL);
    kd_mtx_header_t h;
    kd_err_t err = {0};
    CHECK_EQ_INT(kd_mtx_read_header(text, len, &h, &err), KD_OK);
    CHECK(h.field == KD_MTX_COMPLEX);
    CHECK_EQ_INT(h.rows, 841);
    CHECK_EQ_INT(h.entries, 4089);
    free(text);
}

/* ---- round trips ---- */

static double random_value(void)
{
    switch (kd_test_rand_below(10)) {
    case 0:
        return (double)(kd_test_rand_below(2001) - 1000);
    case 1:
        return kd_test_rand_double(-1, 1) * 1e300;
    case 2:
        return kd_test_rand_double(-1, 1) * 1e-300;
    case 3:
        return 4.9406564584124654e-324 * (double)kd_test_rand_below(1000); /* subnormal */
    case 4:
        return kd_test_rand_below(2) ? -0.0 : 0.0;
    case 5:
        return kd_test_rand_below(2) ? INFINITY : -INFINITY;
    case 6:
        return 0.1 * (double)kd_test_rand_below(100);
    default:
        return kd_test_rand_double(-1e3, 1e3);
    }
}

static void test_round_trip_matrix(void)
{
    for (int iter = 0; iter < 300; iter++) {
        int64_t rows = kd_test_rand_below(40), cols = kd_test_rand_below(40);
        int64_t n = rows * cols > 0 ? kd_test_rand_below(rows * cols / 3 + 2) : 0;
        int32_t *r = malloc((size_t)n * 4 + 4), *c = malloc((size_t)n * 4 + 4);
        double *v = malloc((size_t)n * 8 + 8);
        if (r == NULL || c == NULL || v == NULL) {
            free(r);
            free(c);
            free(v);
            REQUIRE(!"out of memory");
        }
        for (int64_t k = 0; k < n; k++) {
            r[k] = (int32_t)kd_test_rand_below(rows);
            c[k] = (int32_t)kd_test_rand_below(cols);
            v[k] = random_value();
        }
        kd_dtype_t dtype = kd_test_rand_below(2) ? KD_DTYPE_F64 : KD_DTYPE_F32;
        kd_csr_t *a = NULL, *b = NULL;
        kd_err_t err = {0};
        int rc = kd_csr_from_coo_arrays(rows, cols, n, r, c, KD_DTYPE_I32, v, KD_DTYPE_F64, dtype,
                                        NULL, &a, &err);
        free(r);
        free(c);
        free(v);
        REQUIRE(rc == KD_OK);
        char *text = NULL;
        size_t len = 0;
        REQUIRE(kd_mtx_write_matrix(a, &text, &len, &err) == KD_OK);
        CHECK(text[len] == '\0');
        CHECK_EQ_INT(strlen(text), len);
        rc = read_matrix_n(text, len, dtype, NULL, &b, &err);
        CHECK_MSG(rc == KD_OK, "%s", err.message);
        if (rc == KD_OK) {
            CHECK_EQ_INT(b->rows, a->rows);
            CHECK_EQ_INT(b->cols, a->cols);
            REQUIRE(b->nnz == a->nnz);
            CHECK(memcmp(a->indptr, b->indptr, (size_t)(a->rows + 1) * 4) == 0);
            CHECK(memcmp(a->indices, b->indices, (size_t)a->nnz * 4) == 0);
            CHECK_MSG(memcmp(a->values, b->values, (size_t)a->nnz * kd_dtype_size(dtype)) == 0,
                      "values differ after a round trip (%s)", kd_dtype_name(dtype));
            kd_csr_free(b);
        }
        free(text);
        kd_csr_free(a);
    }
}

static void test_round_trip_dense(void)
{
    for (int iter = 0; iter < 300; iter++) {
        int64_t rows = kd_test_rand_below(30), cols = kd_test_rand_below(5);
        size_t n = (size_t)(rows * cols);
        double *v = malloc(n * 8 + 8);
        REQUIRE(v != NULL);
        for (size_t k = 0; k < n; k++)
            v[k] = kd_test_rand_below(50) == 0 ? NAN : random_value();
        char *text = NULL;
        size_t len = 0;
        kd_err_t err = {0};
        if (kd_mtx_write_dense(v, rows, cols, &text, &len, &err) != KD_OK) {
            free(v);
            REQUIRE(!"kd_mtx_write_dense failed");
        }
        CHECK(text[len] == '\0');
        double *back = NULL;
        int64_t r2 = -1, c2 = -1;
        int rc = read_dense_n(text, len, 1 << 20, &back, &r2, &c2, &err);
        CHECK_MSG(rc == KD_OK, "%s", err.message);
        if (rc == KD_OK) {
            if (rows == 1 && cols != 1) {
                CHECK_EQ_INT(r2, cols);
                CHECK_EQ_INT(c2, 1);
            } else {
                CHECK_EQ_INT(r2, rows);
                CHECK_EQ_INT(c2, cols);
            }
            for (size_t k = 0; k < n; k++) {
                if (isnan(v[k]))
                    CHECK(isnan(back[k]));
                else
                    CHECK_MSG(memcmp(&v[k], &back[k], 8) == 0, "%.17g came back as %.17g", v[k],
                              back[k]);
            }
            free(back);
        }
        free(text);
        free(v);
    }
}

static void test_writer_text(void)
{
    double v[] = {1.5, -0.1, 0.0, 1e300};
    char *text = NULL;
    size_t len;
    kd_err_t err = {0};
    REQUIRE(kd_mtx_write_dense(v, 2, 2, &text, &len, &err) == KD_OK);
    const char *expected = "%%MatrixMarket matrix array real general\n2 2\n1.5\n"
                           "-0.10000000000000001\n0\n1.0000000000000001e+300\n";
    CHECK_MSG(strcmp(text, expected) == 0, "wrote:\n%s", text);
    CHECK_EQ_INT(len, strlen(expected));
    free(text);

    int32_t r[] = {0, 2, 2}, c[] = {1, 0, 2};
    double vals[] = {2.0, -3.25, 4.0};
    kd_csr_t *m = NULL;
    REQUIRE(kd_csr_from_coo_arrays(3, 3, 3, r, c, KD_DTYPE_I32, vals, KD_DTYPE_F64, KD_DTYPE_F64,
                                   NULL, &m, &err) == KD_OK);
    REQUIRE(kd_mtx_write_matrix(m, &text, &len, &err) == KD_OK);
    expected = "%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 2\n3 1 -3.25\n3 3 4\n";
    CHECK_MSG(strcmp(text, expected) == 0, "wrote:\n%s", text);
    free(text);
    kd_csr_free(m);

    CHECK_EQ_INT(kd_mtx_write_dense(v, -1, 2, &text, &len, &err), KD_EBADREQ);
    CHECK_EQ_INT(kd_mtx_write_dense(v, INT64_MAX, 2, &text, &len, &err), KD_ETOOLARGE);
}

/* ---- headers that claim more than the text holds ---- */

/* Each claims an entry count the allocator could not serve in a small address space; the reader
 * must answer from the text ("file ends after 1") without trying. Returns the number of failures.
 */
static int check_huge_claims(void)
{
    static const struct {
        const char *text;
        int dense; /* read with kd_mtx_read_dense */
        int code;
        const char *message;
    } claims[] = {
        {CRG "2000000 2000000 2000000000\n1 1 1\n", 0, KD_EBADREQ,
         "line 3: expected 2000000000 entries, file ends after 1"},
        {"%%MatrixMarket matrix coordinate real symmetric\n2000000 2000000 2000000000\n1 1 1\n", 0,
         KD_EBADREQ, "line 3: expected 2000000000 entries, file ends after 1"},
        {"%%MatrixMarket matrix array real general\n40000 40000\n1\n", 0, KD_EBADREQ,
         "line 3: expected 1600000000 entries, file ends after 1"},
        {"%%MatrixMarket matrix array real general\n100000 100000\n1\n", 1, KD_EBADREQ,
         "line 3: expected 10000000000 entries, file ends after 1"},
        {"%%MatrixMarket matrix array real symmetric\n100000 100000\n1\n2\n", 1, KD_EBADREQ,
         "line 4: expected 5000050000 entries, file ends after 2"},
        {CRG "10 10 1099511627776\n1 1 1\n", 0, KD_ETOOLARGE, "line 2: nnz = 1099511627776"},
        {CRG "10 10 9223372036854775807\n1 1 1\n", 1, KD_EBADREQ,
         "line 3: expected 9223372036854775807 entries, file ends after 1"},
    };
    int failures = 0;
    for (size_t i = 0; i < sizeof(claims) / sizeof(claims[0]); i++) {
        kd_err_t err = {0};
        int rc;
        if (claims[i].dense) {
            double *v = NULL;
            int64_t rows, cols;
            rc = read_dense_n(claims[i].text, strlen(claims[i].text), 20000000000LL, &v, &rows,
                              &cols, &err);
        } else {
            kd_csr_t *m = NULL;
            rc = read_matrix(claims[i].text, KD_DTYPE_F64, &m, &err);
        }
        if (rc != claims[i].code || strstr(err.message, claims[i].message) == NULL) {
            fprintf(stderr, "huge claim %zu: %d (%s), expected %d (%s)\n", i, rc, err.message,
                    claims[i].code, claims[i].message);
            failures++;
        }
    }
    return failures;
}

static void test_huge_declared_sizes(void)
{
#ifdef KD_TEST_ASAN
    /* ASan reserves terabytes of address space; run the checks without an address-space cap. */
    CHECK_EQ_INT(check_huge_claims(), 0);
#else
    /* In a child limited to 1 GiB of address space, an allocation sized from the header would
     * fail and show up as KD_ENOMEM instead of the expected message. */
    fflush(stderr);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        struct rlimit lim = {1ul << 30, 1ul << 30};
        if (setrlimit(RLIMIT_AS, &lim) != 0)
            _exit(2);
        _exit(check_huge_claims() == 0 ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
#endif
}

/* ---- random mutations of valid files never crash, and errors name a line ---- */

static const char *const mutation_seeds[] = {
    "%%MatrixMarket matrix coordinate real general\n% comment\n4 5 6\n1 1 1.5\n2 3 -2e-3\n"
    "4 5 7\n3 3 .25\n1 5 -1\n4 1 3\n",
    "%%MatrixMarket matrix coordinate real symmetric\n4 4 5\n1 1 4\n2 1 -1\n3 2 -1\n4 3 -1\n"
    "4 4 4\n",
    "%%MatrixMarket matrix coordinate pattern skew-symmetric\n3 3 2\n2 1\n3 2\n",
    "%%MatrixMarket matrix coordinate integer general\n3 3 3\n1 1 7\n2 2 -8\n3 3 9\n",
    "%%MatrixMarket matrix array real general\n2 3\n1\n2\n3\n4\n5\n6\n",
    "%%MatrixMarket matrix array integer symmetric\n3 3\n1\n2\n3\n4\n5\n6\n",
    "%%MatrixMarket matrix array real skew-symmetric\n3 3\n1\n2\n3\n",
};

static size_t mutate(char *buf, size_t len, size_t cap)
{
    static const char alphabet[] = "0123456789 \n\t%-+.eE\r";
    int steps = 1 + (int)kd_test_rand_below(4);
    for (int s = 0; s < steps; s++) {
        size_t at = len > 0 ? (size_t)kd_test_rand_below((int64_t)len) : 0;
        char c = kd_test_rand_below(4) == 0 ? (char)kd_test_rand_below(256)
                                            : alphabet[kd_test_rand_below(sizeof(alphabet) - 1)];
        switch (kd_test_rand_below(5)) {
        case 0: /* replace */
            if (len > 0)
                buf[at] = c;
            break;
        case 1: /* insert */
            if (len < cap) {
                memmove(buf + at + 1, buf + at, len - at);
                buf[at] = c;
                len++;
            }
            break;
        case 2: /* delete */
            if (len > 0) {
                memmove(buf + at, buf + at + 1, len - at - 1);
                len--;
            }
            break;
        case 3: /* truncate */
            len = at;
            break;
        default: /* a run of digits: sizes and indices that overflow */
            for (int k = 0; k < 12 && at < len; k++, at++)
                buf[at] = (char)('0' + kd_test_rand_below(10));
            break;
        }
    }
    return len;
}

static void test_random_mutations(void)
{
    kd_csr_limits_t limits = {.max_rows = 1000, .max_cols = 1000, .max_nnz = 10000};
    size_t nseeds = sizeof(mutation_seeds) / sizeof(mutation_seeds[0]);
    int accepted = 0, rejected = 0;
    for (int iter = 0; iter < 20000; iter++) {
        char buf[512];
        const char *seed = mutation_seeds[kd_test_rand_below((int64_t)nseeds)];
        size_t len = strlen(seed);
        memcpy(buf, seed, len);
        len = mutate(buf, len, sizeof(buf));

        kd_err_t err = {0};
        kd_csr_t *m = NULL;
        int rc = read_matrix_n(buf, len, KD_DTYPE_F64, &limits, &m, &err);
        if (rc == KD_OK) {
            accepted++;
            CHECK(csr_is_canonical(m));
            kd_csr_free(m);
        } else {
            rejected++;
            CHECK_MSG(rc == KD_EBADREQ || rc == KD_ETOOLARGE || rc == KD_EUNSUPPORTED,
                      "code %d: %s", rc, err.message);
            CHECK_MSG(strncmp(err.message, "line ", 5) == 0, "no line number: %s", err.message);
        }
        double *v = NULL;
        int64_t rows, cols;
        rc = read_dense_n(buf, len, 10000, &v, &rows, &cols, &err);
        if (rc == KD_OK) {
            CHECK(rows >= 0 && cols >= 0 && rows * cols <= 10000);
            free(v);
        } else {
            CHECK_MSG(strncmp(err.message, "line ", 5) == 0, "no line number: %s", err.message);
        }
        kd_mtx_header_t h;
        char *copy = exact_copy(buf, len);
        REQUIRE(copy != NULL);
        (void)kd_mtx_read_header(copy, len, &h, &err);
        free(copy);
    }
    fprintf(stderr, "   mutations: %d accepted, %d rejected\n", accepted, rejected);
    CHECK(accepted > 0 && rejected > 0);
}

int main(void)
{
    kd_test_seed();
    RUN(test_every_field_and_symmetry);
    RUN(test_no_final_newline);
    RUN(test_syntax_variants);
    RUN(test_header);
    RUN(test_malformed_input);
    RUN(test_server_limits);
    RUN(test_real_files);
    RUN(test_complex_and_bad_files);
    RUN(test_round_trip_matrix);
    RUN(test_round_trip_dense);
    RUN(test_writer_text);
    RUN(test_huge_declared_sizes);
    RUN(test_random_mutations);
    return kd_test_finish();
}
