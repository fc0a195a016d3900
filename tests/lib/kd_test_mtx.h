/*
 * A real matrix for a test: tests/matrices/FILE read as canonical float64 CSR (client/mtx_file.c
 * reads the file, protocol/mtx.c parses it), with `shift` added to every stored diagonal entry
 * (dwt_878 + 4I is SPD, dwt_878 is not). Exits on failure (the test's own files are missing).
 * Link client/mtx_file.c and kd_protocol.
 */
#ifndef KD_TEST_MTX_H
#define KD_TEST_MTX_H

#include "client/mtx_file.h"
#include "common/csr.h"
#include "protocol/mtx.h"

#include <stdio.h>
#include <stdlib.h>

static inline kd_csr_t *kd_test_load_mtx(const char *file, double shift)
{
    char path[512];
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    kd_csr_t *m = NULL;
    snprintf(path, sizeof(path), "%s/%s", KD_TEST_MATRICES, file);
    if (kd_mtx_file_read(path, (size_t)1 << 30, &text, &len, &err) != KD_OK ||
        kd_mtx_read_matrix(text, len, KD_DTYPE_F64, NULL, &m, &err) != KD_OK) {
        fprintf(stderr, "%s: %s\n", path, err.message);
        exit(2);
    }
    free(text);
    double *v = (double *)m->values;
    for (int64_t r = 0; r < m->rows && shift != 0.0; r++)
        for (int64_t j = m->indptr[r]; j < m->indptr[r + 1]; j++)
            if (m->indices[j] == r)
                v[j] += shift;
    return m;
}

#endif
