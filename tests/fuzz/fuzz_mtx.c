/*
 * libFuzzer target for the Matrix Market reader (protocol/mtx.c): arbitrary bytes go to
 * kd_mtx_read_header, kd_mtx_read_matrix and kd_mtx_read_dense with small limits, in a heap buffer
 * of exactly the input's size (libFuzzer's own), so any read past `len` trips ASan. A success must
 * give a canonical matrix inside the limits; a failure must carry a message that names a line.
 * Seed corpus: tests/fuzz/corpus/mtx/.
 */
#include "protocol/mtx.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_canonical(const kd_csr_t *m, const kd_csr_limits_t *limits)
{
    if (m->rows > limits->max_rows || m->cols > limits->max_cols || m->nnz > limits->max_nnz)
        abort();
    if (m->indptr[0] != 0 || m->indptr[m->rows] != m->nnz)
        abort();
    for (int64_t r = 0; r < m->rows; r++)
        for (int32_t k = m->indptr[r]; k < m->indptr[r + 1]; k++)
            if (m->indices[k] < 0 || m->indices[k] >= m->cols ||
                (k > m->indptr[r] && m->indices[k] <= m->indices[k - 1]))
                abort();
}

static void check_message(int rc, const kd_err_t *err)
{
    if (rc != KD_OK && rc != KD_ENOMEM && strncmp(err->message, "line ", 5) != 0)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    kd_csr_limits_t limits = {.max_rows = 4096, .max_cols = 4096, .max_nnz = 1 << 16};
    kd_err_t err = {0};

    kd_mtx_header_t header;
    int rc = kd_mtx_read_header(text, size, &header, &err);
    check_message(rc, &err);

    kd_csr_t *m = NULL;
    rc =
        kd_mtx_read_matrix(text, size, (size & 1) ? KD_DTYPE_F32 : KD_DTYPE_F64, &limits, &m, &err);
    check_message(rc, &err);
    if (rc == KD_OK) {
        check_canonical(m, &limits);
        kd_csr_free(m);
    }

    double *values = NULL;
    int64_t rows = 0, cols = 0;
    rc = kd_mtx_read_dense(text, size, 1 << 16, &values, &rows, &cols, &err);
    check_message(rc, &err);
    if (rc == KD_OK) {
        if (rows < 0 || cols < 0 || rows * cols > (1 << 16))
            abort();
        free(values);
    }
    return 0;
}
