/*
 * Matrix Market text (https://math.nist.gov/MatrixMarket/formats.html), read from and written to
 * memory buffers — the client reads files (and .mtx.gz) into memory; the server gets the text in
 * `matrix.put {mtx}`. The reader accepts
 *   coordinate  real | integer | pattern   general | symmetric | skew-symmetric
 *   array       real | integer             general | symmetric | skew-symmetric
 * and refuses complex and hermitian files with a message that says so. Every error names the
 * line: "line 7: row index 0 is outside 1..494". Sizes in the header are checked against the
 * limits before anything is allocated, and an entry count that lies (too few or too many lines)
 * is an error, not a truncated matrix.
 */
#ifndef KD_PROTOCOL_MTX_H
#define KD_PROTOCOL_MTX_H

#include "common/csr.h"
#include "common/error.h"

#include <stddef.h>
#include <stdint.h>

typedef enum kd_mtx_field {
    KD_MTX_REAL = 0,
    KD_MTX_INTEGER,
    KD_MTX_PATTERN,
    KD_MTX_COMPLEX,
} kd_mtx_field_t;

typedef enum kd_mtx_symmetry {
    KD_MTX_GENERAL = 0,
    KD_MTX_SYMMETRIC,
    KD_MTX_SKEW_SYMMETRIC,
    KD_MTX_HERMITIAN,
} kd_mtx_symmetry_t;

typedef struct kd_mtx_header {
    int coordinate; /* 1: coordinate (sparse), 0: array (dense, column-major) */
    kd_mtx_field_t field;
    kd_mtx_symmetry_t symmetry;
    int64_t rows, cols;
    int64_t entries; /* coordinate: stored entries; array: stored values */
} kd_mtx_header_t;

/* Parse only the banner and size line. Succeeds for complex and hermitian files too (the header
 * says what they are); the readers below refuse them with KD_EUNSUPPORTED. For an array file,
 * `entries` is the number of stored values (rows * cols, or a triangle for a symmetric one). */
int kd_mtx_read_header(const char *text, size_t len, kd_mtx_header_t *header, kd_err_t *err);

/*
 * A sparse matrix as canonical CSR with values of `dtype`. Symmetric and skew-symmetric files are
 * expanded to both triangles (the file may store either triangle, but only one); pattern entries
 * become 1.0 (and -1.0 for the mirrored triangle of a skew-symmetric pattern file); duplicates are
 * summed. An array file is accepted too (its zero values are dropped). limits->max_nnz also bounds
 * the entries before duplicates are summed, mirrored ones included.
 */
int kd_mtx_read_matrix(const char *text, size_t len, kd_dtype_t dtype,
                       const kd_csr_limits_t *limits, kd_csr_t **out, kd_err_t *err);

/*
 * A dense block as float64, column-major: `array` files, or a coordinate file (missing entries are
 * zero, duplicates summed). A vector is rows x 1 (a 1 x n file is read as n x 1). max_values bounds
 * rows * cols before anything is allocated (KD_ETOOLARGE); 0 or less means KD_CSR_INDEX_MAX. The
 * caller frees *out.
 */
int kd_mtx_read_dense(const char *text, size_t len, int64_t max_values, double **out, int64_t *rows,
                      int64_t *cols, kd_err_t *err);

/* Write a dense column-major block as `array real general` (17 significant digits, so the reader
 * gets the same doubles back). *out is NUL-terminated (not counted in *len); the caller frees it.
 */
int kd_mtx_write_dense(const double *values, int64_t rows, int64_t cols, char **out, size_t *len,
                       kd_err_t *err);

/* Write a matrix as `coordinate real general`, entries in row order. *out is NUL-terminated (not
 * counted in *len); the caller frees it. */
int kd_mtx_write_matrix(const kd_csr_t *csr, char **out, size_t *len, kd_err_t *err);

#endif
