/*
 * Matrix Market reader and writer over memory buffers (see mtx.h).
 *
 * The reader walks the text line by line with a cursor that never looks past `len` (the text is
 * not NUL-terminated): the banner, comment and blank lines, the size line, then one entry per
 * line. kd_mtx_next_entry() turns each entry line into a 0-based (row, col, value) and checks
 * everything that needs the line number — indices, the symmetric-file rules, the declared count —
 * so the sparse and the dense readers only decide where a value goes. Sizes, indices and integer
 * values go through a hand-written decimal scanner; a real value is copied into a small stack
 * buffer and handed to strtod, which so sees a NUL-terminated token. (strtod follows LC_NUMERIC;
 * krylovd never calls setlocale, so that is the "C" locale.)
 *
 * Memory: the header's sizes are checked against the limits first, and nothing is allocated from
 * the declared entry count unless the rest of the text is long enough to hold that many entries (a
 * coordinate entry takes at least 4 bytes, "1 1\n"; an array value 2, "1\n"). A header that claims
 * more is answered by a counting pass, which stops at the line that proves the header wrong.
 */
#include "protocol/mtx.h"
#include "common/checked.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_MTX_NUMBER_MAX 255 /* longest real-number token handed to strtod */
#define KD_MTX_QUOTE_MAX 40   /* longest piece of the text quoted in an error message */
#define KD_MTX_QUOTE_SIZE (KD_MTX_QUOTE_MAX + 4)

/* The next unread line of the text and its 1-based number. */
typedef struct kd_mtx_cursor {
    const char *pos;
    const char *end;
    int64_t line;
} kd_mtx_cursor_t;

/* One line being split into tokens. */
typedef struct kd_mtx_line {
    const char *p;   /* next unread character */
    const char *end; /* the line's '\n', or the end of the text */
    int64_t number;
} kd_mtx_line_t;

typedef struct kd_mtx_reader {
    kd_mtx_cursor_t cur;
    kd_mtx_header_t h;
    int64_t size_line; /* where the size line was, for messages about the counts */
    int64_t read;      /* entries read so far */
    int64_t ai, aj;    /* array files: position of the next value */
    int triangle; /* symmetric coordinate files: 0 nothing off-diagonal yet, 1 lower, 2 upper */
} kd_mtx_reader_t;

typedef struct kd_mtx_entry {
    int64_t row, col; /* 0-based */
    double value;
} kd_mtx_entry_t;

static inline int kd_mtx_is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

/* Copy up to KD_MTX_QUOTE_MAX bytes of [p, end) into buf for a message, with bytes that are not
 * printable ASCII shown as '?' and "..." when cut short. */
static const char *kd_mtx_quote(char buf[KD_MTX_QUOTE_SIZE], const char *p, const char *end)
{
    size_t n = (size_t)(end - p), k;
    for (k = 0; k < n && k < KD_MTX_QUOTE_MAX; k++) {
        unsigned char c = (unsigned char)p[k];
        buf[k] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (k < n) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

static void kd_mtx_cursor_init(kd_mtx_cursor_t *cur, const char *text, size_t len)
{
    cur->pos = text;
    cur->end = text + len;
    cur->line = 1;
}

/* Take the next line; returns 0 at the end of the text. */
static inline int kd_mtx_next_line(kd_mtx_cursor_t *cur, kd_mtx_line_t *ln)
{
    if (cur->pos >= cur->end)
        return 0;
    const char *nl = memchr(cur->pos, '\n', (size_t)(cur->end - cur->pos));
    ln->p = cur->pos;
    ln->end = nl != NULL ? nl : cur->end;
    ln->number = cur->line++;
    cur->pos = nl != NULL ? nl + 1 : cur->end;
    return 1;
}

/* The number of the last line of the text (1 for an empty text), for "the file ends" messages. */
static int64_t kd_mtx_last_line(const kd_mtx_cursor_t *cur)
{
    return cur->line > 1 ? cur->line - 1 : 1;
}

/* The next whitespace-separated token of the line as [*tok, *tok_end); 0 when there is none. */
static inline int kd_mtx_token(kd_mtx_line_t *ln, const char **tok, const char **tok_end)
{
    const char *p = ln->p;
    while (p < ln->end && kd_mtx_is_space(*p))
        p++;
    if (p == ln->end) {
        ln->p = p;
        return 0;
    }
    *tok = p;
    while (p < ln->end && !kd_mtx_is_space(*p))
        p++;
    *tok_end = p;
    ln->p = p;
    return 1;
}

/* A decimal integer that fills [p, end), with an optional sign. 0, or -1 when it is not one, or
 * -2 when it does not fit int64. */
static inline int kd_mtx_parse_i64(const char *p, const char *end, int64_t *out)
{
    int negative = 0;
    if (p < end && (*p == '+' || *p == '-')) {
        negative = *p == '-';
        p++;
    }
    if (p == end)
        return -1;
    uint64_t v = 0;
    int overflow = 0;
    for (; p < end; p++) {
        unsigned d = (unsigned)(unsigned char)*p - '0';
        if (d > 9)
            return -1;
        if (v > (UINT64_MAX - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
    }
    if (overflow || v > (uint64_t)INT64_MAX + (uint64_t)negative)
        return -2;
    *out = negative ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* A real number that fills [p, end), as strtod reads it. 0, or -1 when it is not one, or -2 when
 * it is too large for a double. */
static inline int kd_mtx_parse_real(const char *p, const char *end, double *out)
{
    char buf[KD_MTX_NUMBER_MAX + 1];
    size_t n = (size_t)(end - p);
    if (n == 0 || n > KD_MTX_NUMBER_MAX)
        return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *stop;
    errno = 0;
    double v = strtod(buf, &stop);
    if (stop != buf + n)
        return -1;
    if (errno == ERANGE && isinf(v))
        return -2;
    *out = v;
    return 0;
}

/* ASCII case-insensitive comparison of a token with a lower-case keyword. */
static int kd_mtx_keyword_is(const char *tok, const char *tok_end, const char *keyword)
{
    size_t n = strlen(keyword);
    if ((size_t)(tok_end - tok) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = tok[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != keyword[i])
            return 0;
    }
    return 1;
}

/* Index of the keyword the token names in a NULL-terminated list, or -1. */
static int kd_mtx_keyword_find(const char *tok, const char *tok_end, const char *const *keywords)
{
    for (int i = 0; keywords[i] != NULL; i++)
        if (kd_mtx_keyword_is(tok, tok_end, keywords[i]))
            return i;
    return -1;
}

static int kd_mtx_parse_banner(kd_mtx_line_t *ln, kd_mtx_header_t *h, kd_err_t *err)
{
    static const char *const formats[] = {"coordinate", "array", NULL};
    static const char *const fields[] = {"real", "integer", "pattern", "complex", NULL};
    static const char *const symmetries[] = {"general", "symmetric", "skew-symmetric", "hermitian",
                                             NULL};
    char q[KD_MTX_QUOTE_SIZE];
    const char *tok, *tend;
    long long n = (long long)ln->number;

    /* A UTF-8 byte order mark is not part of the banner. */
    if (ln->end - ln->p >= 3 && memcmp(ln->p, "\xEF\xBB\xBF", 3) == 0)
        ln->p += 3;
    const char *start = ln->p;
    if (!kd_mtx_token(ln, &tok, &tend) || !kd_mtx_keyword_is(tok, tend, "%%matrixmarket"))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: not a Matrix Market banner: expected '%%%%MatrixMarket "
                          "matrix <format> <field> <symmetry>', found '%s'",
                          n, kd_mtx_quote(q, start, ln->end));

    if (!kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: the banner ends before the object (expected matrix)", n);
    if (!kd_mtx_keyword_is(tok, tend, "matrix"))
        return kd_err_set(err, KD_EBADREQ, "line %lld: unknown object '%s' (expected matrix)", n,
                          kd_mtx_quote(q, tok, tend));

    if (!kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: the banner ends before the format (expected coordinate or "
                          "array)",
                          n);
    int format = kd_mtx_keyword_find(tok, tend, formats);
    if (format < 0)
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: unknown format '%s' (expected coordinate or array)", n,
                          kd_mtx_quote(q, tok, tend));
    h->coordinate = format == 0;

    if (!kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: the banner ends before the field (expected real, integer, "
                          "pattern or complex)",
                          n);
    int field = kd_mtx_keyword_find(tok, tend, fields);
    if (field < 0)
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: unknown field '%s' (expected real, integer, pattern or "
                          "complex)",
                          n, kd_mtx_quote(q, tok, tend));
    h->field = (kd_mtx_field_t)field;

    if (!kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: the banner ends before the symmetry (expected general, "
                          "symmetric, skew-symmetric or hermitian)",
                          n);
    int symmetry = kd_mtx_keyword_find(tok, tend, symmetries);
    if (symmetry < 0)
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: unknown symmetry '%s' (expected general, symmetric, "
                          "skew-symmetric or hermitian)",
                          n, kd_mtx_quote(q, tok, tend));
    h->symmetry = (kd_mtx_symmetry_t)symmetry;

    if (kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ, "line %lld: unexpected '%s' after the banner", n,
                          kd_mtx_quote(q, tok, tend));
    if (!h->coordinate && h->field == KD_MTX_PATTERN)
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: 'array pattern' is not a Matrix Market type (pattern is "
                          "only for coordinate files)",
                          n);
    return KD_OK;
}

/* One non-negative size from the size line. */
static int kd_mtx_parse_size(kd_mtx_line_t *ln, const char *what, const char *expected,
                             int64_t *out, kd_err_t *err)
{
    char q[KD_MTX_QUOTE_SIZE];
    const char *tok, *tend;
    long long n = (long long)ln->number;
    if (!kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: the size line ends before the %s (expected '%s')", n, what,
                          expected);
    int rc = kd_mtx_parse_i64(tok, tend, out);
    if (rc == -1)
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: the %s '%s' is not a non-negative integer (the size line "
                          "is '%s')",
                          n, what, kd_mtx_quote(q, tok, tend), expected);
    if (rc == -2)
        return kd_err_set(err, KD_EBADREQ, "line %lld: the %s '%s' is too large", n, what,
                          kd_mtx_quote(q, tok, tend));
    if (*out < 0)
        return kd_err_set(err, KD_EBADREQ, "line %lld: the %s %lld is negative", n, what,
                          (long long)*out);
    return KD_OK;
}

/* Banner, comments and the size line; leaves the cursor at the first entry line. */
static int kd_mtx_parse_header(kd_mtx_cursor_t *cur, kd_mtx_header_t *h, int64_t *size_line,
                               kd_err_t *err)
{
    kd_mtx_line_t ln;
    memset(h, 0, sizeof(*h));
    if (!kd_mtx_next_line(cur, &ln))
        return kd_err_set(err, KD_EBADREQ,
                          "line 1: the text is empty (expected a '%%%%MatrixMarket' banner)");
    int rc = kd_mtx_parse_banner(&ln, h, err);
    if (rc != KD_OK)
        return rc;

    const char *tok, *tend;
    for (;;) {
        if (!kd_mtx_next_line(cur, &ln))
            return kd_err_set(err, KD_EBADREQ,
                              "line %lld: missing size line: the file ends after the header",
                              (long long)kd_mtx_last_line(cur));
        const char *start = ln.p;
        if (!kd_mtx_token(&ln, &tok, &tend) || *tok == '%')
            continue;
        ln.p = start;
        break;
    }
    *size_line = ln.number;
    const char *expected = h->coordinate ? "rows columns entries" : "rows columns";
    rc = kd_mtx_parse_size(&ln, "number of rows", expected, &h->rows, err);
    if (rc == KD_OK)
        rc = kd_mtx_parse_size(&ln, "number of columns", expected, &h->cols, err);
    if (rc == KD_OK && h->coordinate)
        rc = kd_mtx_parse_size(&ln, "number of entries", expected, &h->entries, err);
    if (rc != KD_OK)
        return rc;
    char q[KD_MTX_QUOTE_SIZE];
    if (kd_mtx_token(&ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: unexpected '%s' after the size line (expected '%s')",
                          (long long)ln.number, kd_mtx_quote(q, tok, tend), expected);

    if (h->symmetry != KD_MTX_GENERAL && h->rows != h->cols)
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: a %s matrix must be square, this one is %lld x %lld",
                          (long long)ln.number,
                          h->symmetry == KD_MTX_SYMMETRIC        ? "symmetric"
                          : h->symmetry == KD_MTX_SKEW_SYMMETRIC ? "skew-symmetric"
                                                                 : "hermitian",
                          (long long)h->rows, (long long)h->cols);
    if (!h->coordinate) {
        /* Stored values: all, the lower triangle with or without the diagonal. */
        int64_t n = h->rows, stored;
        int overflow;
        if (h->symmetry == KD_MTX_GENERAL)
            overflow = kd_mul_overflow_i64(h->rows, h->cols, &stored);
        else if (h->symmetry == KD_MTX_SKEW_SYMMETRIC)
            overflow = kd_mul_overflow_i64(n, n > 0 ? n - 1 : 0, &stored);
        else
            overflow = n == INT64_MAX || kd_mul_overflow_i64(n, n + 1, &stored);
        if (overflow)
            return kd_err_set(err, KD_ETOOLARGE, "line %lld: a %lld x %lld array is too large",
                              (long long)ln.number, (long long)h->rows, (long long)h->cols);
        h->entries = h->symmetry == KD_MTX_GENERAL ? stored : stored / 2;
    }
    return KD_OK;
}

int kd_mtx_read_header(const char *text, size_t len, kd_mtx_header_t *header, kd_err_t *err)
{
    kd_mtx_cursor_t cur;
    int64_t size_line;
    kd_mtx_cursor_init(&cur, text, len);
    return kd_mtx_parse_header(&cur, header, &size_line, err);
}

/* Parse the header and refuse what krylovd does not read. */
static int kd_mtx_reader_open(const char *text, size_t len, kd_mtx_reader_t *rd, kd_err_t *err)
{
    memset(rd, 0, sizeof(*rd));
    kd_mtx_cursor_init(&rd->cur, text, len);
    int rc = kd_mtx_parse_header(&rd->cur, &rd->h, &rd->size_line, err);
    if (rc != KD_OK)
        return rc;
    if (rd->h.field == KD_MTX_COMPLEX)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "line 1: complex matrices are not supported (krylovd solves real "
                          "systems)");
    if (rd->h.symmetry == KD_MTX_HERMITIAN)
        return kd_err_set(err, KD_EUNSUPPORTED,
                          "line 1: hermitian matrices are not supported (krylovd solves real "
                          "systems; a real symmetric file says 'symmetric')");
    rd->ai = rd->h.symmetry == KD_MTX_SKEW_SYMMETRIC ? 1 : 0;
    return KD_OK;
}

/* Whether the text after the size line is long enough to hold n entries. */
static int kd_mtx_text_can_hold(const kd_mtx_reader_t *rd, int64_t n)
{
    size_t rest = (size_t)(rd->cur.end - rd->cur.pos);
    size_t min_bytes = rd->h.coordinate ? 4 : 2; /* "1 1\n" or "1\n"; the last needs no '\n' */
    return (uint64_t)n <= (rest + 1) / min_bytes;
}

static int kd_mtx_parse_value(const kd_mtx_reader_t *rd, const kd_mtx_line_t *ln, const char *tok,
                              const char *tend, double *out, kd_err_t *err)
{
    char q[KD_MTX_QUOTE_SIZE];
    int rc;
    *out = 0.0;
    if (rd->h.field == KD_MTX_INTEGER) {
        int64_t v;
        rc = kd_mtx_parse_i64(tok, tend, &v);
        if (rc == -1)
            return kd_err_set(err, KD_EBADREQ,
                              "line %lld: value '%s' is not an integer (the field is integer)",
                              (long long)ln->number, kd_mtx_quote(q, tok, tend));
        if (rc == 0)
            *out = (double)v;
    } else {
        rc = kd_mtx_parse_real(tok, tend, out);
        if (rc == -1)
            return kd_err_set(err, KD_EBADREQ, "line %lld: value '%s' is not a number",
                              (long long)ln->number, kd_mtx_quote(q, tok, tend));
    }
    if (rc == -2)
        return kd_err_set(err, KD_EBADREQ, "line %lld: value '%s' is out of range",
                          (long long)ln->number, kd_mtx_quote(q, tok, tend));
    return KD_OK;
}

static int kd_mtx_parse_index(const kd_mtx_line_t *ln, const char *tok, const char *tend,
                              int64_t limit, const char *what, int64_t *out, kd_err_t *err)
{
    char q[KD_MTX_QUOTE_SIZE];
    int64_t v = 0;
    *out = 0;
    int rc = kd_mtx_parse_i64(tok, tend, &v);
    if (rc == -1)
        return kd_err_set(err, KD_EBADREQ, "line %lld: %s index '%s' is not an integer",
                          (long long)ln->number, what, kd_mtx_quote(q, tok, tend));
    if (rc == 0 && v >= 1 && v <= limit) {
        *out = v - 1;
        return KD_OK;
    }
    if (limit == 0)
        return kd_err_set(err, KD_EBADREQ, "line %lld: %s index %s but the matrix has no %ss",
                          (long long)ln->number, what, kd_mtx_quote(q, tok, tend), what);
    return kd_err_set(err, KD_EBADREQ, "line %lld: %s index %s is outside 1..%lld",
                      (long long)ln->number, what, kd_mtx_quote(q, tok, tend), (long long)limit);
}

static int kd_mtx_parse_coordinate_entry(kd_mtx_reader_t *rd, kd_mtx_line_t *ln, const char *tok,
                                         const char *tend, kd_mtx_entry_t *e, kd_err_t *err)
{
    const kd_mtx_header_t *h = &rd->h;
    const char *shape = h->field == KD_MTX_PATTERN ? "row column" : "row column value";
    long long n = (long long)ln->number;
    int rc = kd_mtx_parse_index(ln, tok, tend, h->rows, "row", &e->row, err);
    if (rc != KD_OK)
        return rc;
    if (!kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ, "line %lld: short entry line (expected '%s')", n, shape);
    rc = kd_mtx_parse_index(ln, tok, tend, h->cols, "column", &e->col, err);
    if (rc != KD_OK)
        return rc;
    if (h->field == KD_MTX_PATTERN) {
        e->value = 1.0;
    } else {
        if (!kd_mtx_token(ln, &tok, &tend))
            return kd_err_set(err, KD_EBADREQ, "line %lld: short entry line (expected '%s')", n,
                              shape);
        rc = kd_mtx_parse_value(rd, ln, tok, tend, &e->value, err);
        if (rc != KD_OK)
            return rc;
    }
    char q[KD_MTX_QUOTE_SIZE];
    if (kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ, "line %lld: unexpected '%s' after the entry%s", n,
                          kd_mtx_quote(q, tok, tend),
                          h->field == KD_MTX_PATTERN ? " (a pattern file has no values)" : "");

    if (h->symmetry != KD_MTX_GENERAL) {
        if (e->row == e->col) {
            if (h->symmetry == KD_MTX_SKEW_SYMMETRIC)
                return kd_err_set(err, KD_EBADREQ,
                                  "line %lld: diagonal entry (%lld, %lld) in a skew-symmetric "
                                  "matrix (its diagonal is zero and not stored)",
                                  n, (long long)e->row + 1, (long long)e->col + 1);
        } else {
            int triangle = e->row > e->col ? 1 : 2;
            if (rd->triangle == 0)
                rd->triangle = triangle;
            else if (rd->triangle != triangle)
                return kd_err_set(err, KD_EBADREQ,
                                  "line %lld: entry (%lld, %lld) is %s the diagonal but earlier "
                                  "entries are %s it (a symmetric file stores one triangle)",
                                  n, (long long)e->row + 1, (long long)e->col + 1,
                                  triangle == 1 ? "below" : "above",
                                  triangle == 1 ? "above" : "below");
        }
    }
    return KD_OK;
}

static int kd_mtx_parse_array_value(kd_mtx_reader_t *rd, kd_mtx_line_t *ln, const char *tok,
                                    const char *tend, kd_mtx_entry_t *e, kd_err_t *err)
{
    int rc = kd_mtx_parse_value(rd, ln, tok, tend, &e->value, err);
    if (rc != KD_OK)
        return rc;
    char q[KD_MTX_QUOTE_SIZE];
    if (kd_mtx_token(ln, &tok, &tend))
        return kd_err_set(err, KD_EBADREQ,
                          "line %lld: unexpected '%s' after the value (an array file has one "
                          "value per line)",
                          (long long)ln->number, kd_mtx_quote(q, tok, tend));
    /* Column-major; symmetric files hold the lower triangle, skew-symmetric the strict one. */
    e->row = rd->ai;
    e->col = rd->aj;
    rd->ai++;
    while (rd->ai >= rd->h.rows && rd->aj < rd->h.cols) {
        rd->aj++;
        rd->ai = rd->h.symmetry == KD_MTX_GENERAL     ? 0
                 : rd->h.symmetry == KD_MTX_SYMMETRIC ? rd->aj
                                                      : rd->aj + 1;
    }
    return KD_OK;
}

/*
 * The next entry: 1 with *e filled, 0 after the last declared entry (once the rest of the text is
 * known to hold no more), or a negative code.
 */
static int kd_mtx_next_entry(kd_mtx_reader_t *rd, kd_mtx_entry_t *e, kd_err_t *err)
{
    kd_mtx_line_t ln;
    const char *tok, *tend;
    for (;;) {
        if (!kd_mtx_next_line(&rd->cur, &ln)) {
            if (rd->read < rd->h.entries)
                return kd_err_set(err, KD_EBADREQ,
                                  "line %lld: expected %lld entries, file ends after %lld",
                                  (long long)kd_mtx_last_line(&rd->cur), (long long)rd->h.entries,
                                  (long long)rd->read);
            return 0;
        }
        if (!kd_mtx_token(&ln, &tok, &tend) || *tok == '%')
            continue;
        if (rd->read == rd->h.entries)
            return kd_err_set(
                err, KD_EBADREQ, "line %lld: more entries than the %lld declared on line %lld",
                (long long)ln.number, (long long)rd->h.entries, (long long)rd->size_line);
        int rc = rd->h.coordinate ? kd_mtx_parse_coordinate_entry(rd, &ln, tok, tend, e, err)
                                  : kd_mtx_parse_array_value(rd, &ln, tok, tend, e, err);
        if (rc != KD_OK)
            return rc;
        rd->read++;
        return 1;
    }
}

/* Read every entry without keeping any: for a header that claims more entries than the text can
 * hold, this finds the line that shows it. */
static int kd_mtx_skip_entries(kd_mtx_reader_t *rd, kd_err_t *err)
{
    kd_mtx_entry_t e = {0};
    int rc;
    while ((rc = kd_mtx_next_entry(rd, &e, err)) > 0)
        ;
    if (rc == 0)
        return kd_err_set(err, KD_EINTERNAL,
                          "line %lld: %lld entries fit in fewer bytes than thought possible",
                          (long long)kd_mtx_last_line(&rd->cur), (long long)rd->read);
    return rc;
}

int kd_mtx_read_matrix(const char *text, size_t len, kd_dtype_t dtype,
                       const kd_csr_limits_t *limits, kd_csr_t **out, kd_err_t *err)
{
    kd_mtx_reader_t rd;
    int32_t *row = NULL, *col = NULL;
    double *val = NULL;
    int rc;

    if (dtype != KD_DTYPE_F64 && dtype != KD_DTYPE_F32)
        return kd_err_set(err, KD_EINTERNAL, "matrix values must be float32 or float64");
    rc = kd_mtx_reader_open(text, len, &rd, err);
    if (rc != KD_OK)
        return rc;
    const kd_mtx_header_t *h = &rd.h;
    /* An array file's nonzero count is known only once its zeros are dropped. */
    rc = kd_csr_check_shape(h->rows, h->cols, h->coordinate ? h->entries : 0, limits, err);
    if (rc != KD_OK)
        return kd_err_prefix(err, "line %lld", (long long)rd.size_line);
    if (!kd_mtx_text_can_hold(&rd, h->entries))
        return kd_mtx_skip_entries(&rd, err);

    /* Entries before duplicates are summed, mirrored ones included: at most max_nnz. */
    int64_t max_nnz = KD_CSR_INDEX_MAX;
    if (limits != NULL && limits->max_nnz > 0 && limits->max_nnz < max_nnz)
        max_nnz = limits->max_nnz;
    int mirror = h->symmetry != KD_MTX_GENERAL;
    int64_t cap = h->entries;
    if (mirror && kd_mul_overflow_i64(cap, 2, &cap))
        return kd_err_set(err, KD_ETOOLARGE, "line %lld: too many entries",
                          (long long)rd.size_line);
    if (cap > max_nnz)
        cap = max_nnz;
    int with_values = !(h->field == KD_MTX_PATTERN && h->symmetry != KD_MTX_SKEW_SYMMETRIC);
    size_t n = (size_t)(cap > 0 ? cap : 1), index_bytes, value_bytes;
    if (kd_mul_overflow(n, sizeof(int32_t), &index_bytes) ||
        kd_mul_overflow(n, sizeof(double), &value_bytes)) {
        rc = kd_err_set(err, KD_ETOOLARGE, "line %lld: too many entries", (long long)rd.size_line);
        goto fail;
    }
    /* the entries' arrays here, then the build from them (which charges itself again with
     * the count read): a header that declares more rows than the server builds is refused
     * before the text is read */
    rc = kd_csr_charge(
        h->rows, h->cols, cap, dtype,
        kd_sat_add(kd_sat_mad(0, cap, 2 * sizeof(int32_t) + (with_values ? sizeof(double) : 0)),
                   kd_csr_coo_build_bytes(h->rows, cap, dtype)),
        limits, err);
    if (rc != KD_OK) {
        kd_err_prefix(err, "line %lld", (long long)rd.size_line);
        goto fail;
    }
    row = malloc(index_bytes);
    col = malloc(index_bytes);
    val = with_values ? malloc(value_bytes) : NULL;
    if (row == NULL || col == NULL || (with_values && val == NULL)) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld matrix entries",
                        (long long)cap);
        goto fail;
    }

    int64_t count = 0;
    kd_mtx_entry_t e = {0};
    while ((rc = kd_mtx_next_entry(&rd, &e, err)) > 0) {
        if (!h->coordinate && e.value == 0.0)
            continue;
        int twice = mirror && e.row != e.col;
        if (count + 1 + twice > max_nnz) {
            rc = kd_err_set(err, KD_ETOOLARGE, "line %lld: more than %lld nonzeros%s",
                            (long long)(rd.cur.line - 1), (long long)max_nnz,
                            mirror ? " (counting the mirrored triangle)" : "");
            goto fail;
        }
        row[count] = (int32_t)e.row;
        col[count] = (int32_t)e.col;
        if (with_values)
            val[count] = e.value;
        count++;
        if (twice) {
            row[count] = (int32_t)e.col;
            col[count] = (int32_t)e.row;
            if (with_values)
                val[count] = h->symmetry == KD_MTX_SKEW_SYMMETRIC ? -e.value : e.value;
            count++;
        }
    }
    if (rc < 0)
        goto fail;
    rc = kd_csr_from_coo_arrays(h->rows, h->cols, count, row, col, KD_DTYPE_I32, val, KD_DTYPE_F64,
                                dtype, limits, out, err);
fail:
    free(row);
    free(col);
    free(val);
    return rc;
}

int kd_mtx_read_dense(const char *text, size_t len, int64_t max_values, double **out, int64_t *rows,
                      int64_t *cols, kd_err_t *err)
{
    kd_mtx_reader_t rd;
    int rc = kd_mtx_reader_open(text, len, &rd, err);
    if (rc != KD_OK)
        return rc;
    const kd_mtx_header_t *h = &rd.h;
    int64_t limit = max_values > 0 ? max_values : KD_CSR_INDEX_MAX;
    int64_t total;
    if (kd_mul_overflow_i64(h->rows, h->cols, &total) || total > limit)
        return kd_err_set(
            err, KD_ETOOLARGE, "line %lld: a %lld x %lld block is over the limit of %lld values",
            (long long)rd.size_line, (long long)h->rows, (long long)h->cols, (long long)limit);
    if (!h->coordinate && !kd_mtx_text_can_hold(&rd, h->entries))
        return kd_mtx_skip_entries(&rd, err);
    double *values = calloc(total > 0 ? (size_t)total : 1, sizeof(double));
    if (values == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld values", (long long)total);

    int mirror = h->symmetry != KD_MTX_GENERAL;
    double sign = h->symmetry == KD_MTX_SKEW_SYMMETRIC ? -1.0 : 1.0;
    kd_mtx_entry_t e = {0};
    while ((rc = kd_mtx_next_entry(&rd, &e, err)) > 0) {
        size_t at = (size_t)e.col * (size_t)h->rows + (size_t)e.row;
        if (h->coordinate)
            values[at] += e.value; /* duplicates are summed, as in a sparse matrix */
        else
            values[at] = e.value;
        if (mirror && e.row != e.col) {
            size_t mirrored = (size_t)e.row * (size_t)h->rows + (size_t)e.col;
            if (h->coordinate)
                values[mirrored] += sign * e.value;
            else
                values[mirrored] = sign * e.value;
        }
    }
    if (rc < 0) {
        free(values);
        return rc;
    }
    *out = values;
    /* A 1 x n file is a vector too; column-major, 1 x n and n x 1 are the same values. */
    if (h->rows == 1 && h->cols != 1) {
        *rows = h->cols;
        *cols = 1;
    } else {
        *rows = h->rows;
        *cols = h->cols;
    }
    return KD_OK;
}

/* Writers. Each line is bounded: an int64 takes at most 20 characters, "%.17g" at most 24
 * ("-1.2345678901234567e-308"). */
#define KD_MTX_NUMBER_TEXT_MAX 24
#define KD_MTX_HEADER_TEXT_MAX 128

static char *kd_mtx_put_i64(char *p, int64_t v)
{
    char digits[24];
    int n = 0;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0);
    if (v < 0)
        *p++ = '-';
    while (n > 0)
        *p++ = digits[--n];
    return p;
}

static char *kd_mtx_put_real(char *p, double v)
{
    int n = snprintf(p, KD_MTX_NUMBER_TEXT_MAX + 1, "%.17g", v);
    return p + n;
}

/* Shrink the buffer to its text and NUL-terminate it. */
static void kd_mtx_finish_text(char *buf, char *p, char **out, size_t *len)
{
    size_t n = (size_t)(p - buf);
    *p = '\0';
    char *shrunk = realloc(buf, n + 1);
    *out = shrunk != NULL ? shrunk : buf;
    *len = n;
}

int kd_mtx_write_dense(const double *values, int64_t rows, int64_t cols, char **out, size_t *len,
                       kd_err_t *err)
{
    int64_t total;
    size_t bytes;
    if (rows < 0 || cols < 0)
        return kd_err_set(err, KD_EBADREQ, "negative size %lld x %lld", (long long)rows,
                          (long long)cols);
    if (kd_mul_overflow_i64(rows, cols, &total) ||
        kd_mul_overflow((size_t)total, KD_MTX_NUMBER_TEXT_MAX + 1, &bytes) ||
        kd_add_overflow(bytes, KD_MTX_HEADER_TEXT_MAX, &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "a %lld x %lld block is too large to write",
                          (long long)rows, (long long)cols);
    char *buf = malloc(bytes);
    if (buf == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory writing %lld values",
                          (long long)total);
    static const char banner[] = "%%MatrixMarket matrix array real general\n";
    char *p = buf;
    memcpy(p, banner, sizeof(banner) - 1);
    p += sizeof(banner) - 1;
    p = kd_mtx_put_i64(p, rows);
    *p++ = ' ';
    p = kd_mtx_put_i64(p, cols);
    *p++ = '\n';
    for (int64_t k = 0; k < total; k++) {
        p = kd_mtx_put_real(p, values[k]);
        *p++ = '\n';
    }
    kd_mtx_finish_text(buf, p, out, len);
    return KD_OK;
}

int kd_mtx_write_matrix(const kd_csr_t *csr, char **out, size_t *len, kd_err_t *err)
{
    size_t bytes;
    /* "row col value\n": two int32 of at most 10 digits, a real, two spaces and a newline */
    if (kd_mul_overflow((size_t)csr->nnz, 10 + 1 + 10 + 1 + KD_MTX_NUMBER_TEXT_MAX + 1, &bytes) ||
        kd_add_overflow(bytes, KD_MTX_HEADER_TEXT_MAX, &bytes))
        return kd_err_set(err, KD_ETOOLARGE, "a matrix with %lld nonzeros is too large to write",
                          (long long)csr->nnz);
    char *buf = malloc(bytes);
    if (buf == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory writing %lld nonzeros",
                          (long long)csr->nnz);
    static const char banner[] = "%%MatrixMarket matrix coordinate real general\n";
    char *p = buf;
    memcpy(p, banner, sizeof(banner) - 1);
    p += sizeof(banner) - 1;
    p = kd_mtx_put_i64(p, csr->rows);
    *p++ = ' ';
    p = kd_mtx_put_i64(p, csr->cols);
    *p++ = ' ';
    p = kd_mtx_put_i64(p, csr->nnz);
    *p++ = '\n';
    for (int64_t r = 0; r < csr->rows; r++) {
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            p = kd_mtx_put_i64(p, r + 1);
            *p++ = ' ';
            p = kd_mtx_put_i64(p, (int64_t)csr->indices[k] + 1);
            *p++ = ' ';
            p = kd_mtx_put_real(p, kd_csr_value(csr, k));
            *p++ = '\n';
        }
    }
    kd_mtx_finish_text(buf, p, out, len);
    return KD_OK;
}
