/*
 * A batched matrix on the device (solver/batch/batch.h): the shared CSR pattern once and the k
 * value sets back to back, or systems of their own patterns with their CSR arrays back to back; the
 * systems table (kernels/batch/batch_abi.h) saying where each is; and for square systems the
 * inverse diagonals Jacobi needs, built on the host while the values are scanned (one pass:
 * non-finite entries, diagonals). CSR rather than ELL: one work-group per system walks its rows
 * round-robin, and the pattern's arrays, shared by every group, stay in cache; ELL's padding would
 * only add traffic for the irregular power-network patterns this is for (not measured against ELL).
 */
#include "solver/batch/batch.h"

#include "common/checked.h"
#include "kernels/batch/batch_abi.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t kd_batch_plan_bytes(int64_t count, int64_t rows, int64_t cols, int64_t nnz, kd_dtype_t dtype)
{
    (void)cols;
    if (count < 0 || rows < 0 || nnz < 0)
        return SIZE_MAX;
    const size_t vsize = kd_dtype_size(dtype);
    size_t pattern, values, diag, table, total;
    if (kd_mul_overflow((size_t)rows + 1 + (size_t)nnz, sizeof(int32_t), &pattern) ||
        kd_mul3_overflow((size_t)count, (size_t)nnz, vsize, &values) ||
        kd_mul3_overflow((size_t)count, (size_t)rows, vsize, &diag) ||
        kd_mul3_overflow((size_t)count, KD_BATCH_SYS, sizeof(cl_long), &table) ||
        kd_add_overflow(pattern, values, &total) || kd_add_overflow(total, diag, &total) ||
        kd_add_overflow(total, table, &total))
        return SIZE_MAX;
    return total;
}

size_t kd_batch_systems_plan_bytes(int64_t count, int64_t rows, int64_t nnz, kd_dtype_t dtype)
{
    /* count row pointers more than one matrix of rows x nnz, and one table row a system */
    size_t one = kd_batch_plan_bytes(1, rows, rows, nnz, dtype), extra, total;
    if (one == SIZE_MAX || count < 0 ||
        kd_mul_overflow((size_t)count, sizeof(int32_t) + KD_BATCH_SYS * sizeof(cl_long), &extra) ||
        kd_add_overflow(one, extra, &total))
        return SIZE_MAX;
    return total;
}

/* Position of a_ii in each row of the pattern (-1: not stored). */
static int64_t *kd_batch_diagonal_positions(const kd_csr_t *p)
{
    int64_t *pos = kd_malloc_array((size_t)p->rows + 1, sizeof(int64_t));
    if (pos == NULL)
        return NULL;
    for (int64_t i = 0; i < p->rows; i++) {
        pos[i] = -1;
        for (int64_t j = p->indptr[i]; j < p->indptr[i + 1]; j++)
            if (p->indices[j] == i)
                pos[i] = j;
    }
    return pos;
}

/* The host scan of system s's values (p's pattern, from entry `base` of values); fills the
 * batch's per-system findings and, for square systems, its 1 / a_ii into dinv (rows values). */
static void kd_batch_scan(kd_batch_t *batch, const kd_csr_t *p, const int64_t *diag_pos,
                          const void *values, size_t base, int64_t s, void *dinv)
{
    batch->non_finite_entry[s] = -1;
    batch->bad_diagonal_row[s] = -1;
    batch->negative_diagonal_row[s] = -1;
    for (int64_t j = 0; j < p->nnz; j++)
        if (!isfinite(kd_load_real(values, p->dtype, base + (size_t)j))) {
            batch->non_finite_entry[s] = j;
            break;
        }
    if (dinv == NULL)
        return;
    for (int64_t i = 0; i < p->rows; i++) {
        const double a =
            diag_pos[i] < 0 ? 0.0 : kd_load_real(values, p->dtype, base + (size_t)diag_pos[i]);
        const int usable = a != 0.0 && isfinite(a);
        if (!usable && batch->bad_diagonal_row[s] < 0)
            batch->bad_diagonal_row[s] = i;
        if (usable && a < 0.0 && batch->negative_diagonal_row[s] < 0)
            batch->negative_diagonal_row[s] = i;
        kd_store_real(dinv, p->dtype, (size_t)i, usable ? 1.0 / a : 0.0);
    }
}

/* A device copy of `bytes` from src (NULL cl_mem for 0 bytes). */
static int kd_batch_buffer(kd_ocl_t *ocl, size_t bytes, const void *src, const char *what,
                           cl_mem *out, kd_err_t *err)
{
    *out = NULL;
    if (bytes == 0)
        return KD_OK;
    int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY, bytes, NULL, what, out, err);
    if (rc == KD_OK && src != NULL)
        rc = kd_ocl_write(ocl, *out, 0, bytes, src, err);
    return rc;
}

/* The inverse diagonals of every system: scanned on the host, then one upload. */
static int kd_batch_upload_diagonals(kd_ocl_t *ocl, kd_batch_t *batch, const kd_csr_t *pattern,
                                     const void *values, kd_err_t *err)
{
    const int square = pattern->rows == pattern->cols && pattern->rows > 0;
    const size_t vsize = kd_dtype_size(pattern->dtype);
    int64_t *pos = square ? kd_batch_diagonal_positions(pattern) : NULL;
    char *dinv = square ? kd_malloc_array((size_t)(batch->count * pattern->rows), vsize) : NULL;
    if (square && (pos == NULL || dinv == NULL)) {
        free(pos);
        free(dinv);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the batch's diagonals");
    }
    for (int64_t s = 0; s < batch->count; s++)
        kd_batch_scan(batch, pattern, pos, values, (size_t)(s * pattern->nnz), s,
                      dinv != NULL ? dinv + (size_t)(s * pattern->rows) * vsize : NULL);
    int rc = KD_OK;
    if (square)
        rc = kd_batch_buffer(ocl, (size_t)(batch->count * pattern->rows) * vsize, dinv,
                             "batch inverse diagonals", &batch->inv_diagonal, err);
    free(pos);
    free(dinv);
    return rc;
}

/* A batch of `count` systems with its host arrays (findings, starts), nothing on the device. */
static kd_batch_t *kd_batch_new(int64_t count, kd_dtype_t dtype, kd_err_t *err)
{
    kd_batch_t *b = calloc(1, sizeof(*b));
    if (b == NULL) {
        kd_err_set(err, KD_ENOMEM, "out of host memory");
        return NULL;
    }
    b->count = count;
    b->dtype = dtype;
    b->non_finite_entry = kd_malloc_array((size_t)count, sizeof(int64_t));
    b->bad_diagonal_row = kd_malloc_array((size_t)count, sizeof(int64_t));
    b->negative_diagonal_row = kd_malloc_array((size_t)count, sizeof(int64_t));
    b->row_start = kd_malloc_array((size_t)count + 1, sizeof(int64_t));
    b->col_start = kd_malloc_array((size_t)count + 1, sizeof(int64_t));
    if (b->non_finite_entry == NULL || b->bad_diagonal_row == NULL ||
        b->negative_diagonal_row == NULL || b->row_start == NULL || b->col_start == NULL) {
        kd_batch_free(b);
        kd_err_set(err, KD_ENOMEM, "out of host memory for %lld systems", (long long)count);
        return NULL;
    }
    return b;
}

/* The systems table on the device: system s's rows, columns and CSR slices (ptr[s], idx[s] and
 * val[s]: where they start; NULL ptr: 0, idx: 0, val: s nnz, one shared pattern). */
static int kd_batch_upload_table(kd_ocl_t *ocl, kd_batch_t *b, const int64_t *ptr,
                                 const int64_t *idx, kd_err_t *err)
{
    cl_long *t = kd_malloc_array((size_t)b->count * KD_BATCH_SYS, sizeof(cl_long));
    if (t == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the systems table");
    for (int64_t s = 0; s < b->count; s++) {
        cl_long *row = t + s * KD_BATCH_SYS;
        row[KD_BATCH_SYS_ROW] = b->row_start[s];
        row[KD_BATCH_SYS_COL] = b->col_start[s];
        row[KD_BATCH_SYS_N] = b->row_start[s + 1] - b->row_start[s];
        row[KD_BATCH_SYS_PTR] = ptr != NULL ? ptr[s] : 0;
        row[KD_BATCH_SYS_IDX] = idx != NULL ? idx[s] : 0;
        row[KD_BATCH_SYS_VAL] = idx != NULL ? idx[s] : s * b->nnz;
    }
    int rc = kd_batch_buffer(ocl, (size_t)b->count * KD_BATCH_SYS * sizeof(cl_long), t,
                             "batch systems table", &b->systems, err);
    free(t);
    return rc;
}

int kd_batch_upload(kd_ocl_t *ocl, const kd_csr_t *pattern, const void *values, int64_t count,
                    kd_batch_t **out, kd_err_t *err)
{
    assert(ocl != NULL && pattern != NULL && out != NULL);
    *out = NULL;
    if (count < 1)
        return kd_err_set(err, KD_EBADREQ, "batch = %lld: a batch holds at least one system",
                          (long long)count);
    int rc = kd_ocl_check_dtype(ocl, pattern->dtype, err);
    if (rc != KD_OK)
        return rc;
    const size_t planned =
        kd_batch_plan_bytes(count, pattern->rows, pattern->cols, pattern->nnz, pattern->dtype);
    if (planned == SIZE_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "batch of %lld systems of %lld nonzeros: too large",
                          (long long)count, (long long)pattern->nnz);
    kd_batch_t *b = kd_batch_new(count, pattern->dtype, err);
    if (b == NULL)
        return err->code;
    b->shared = 1;
    b->rows = pattern->rows;
    b->cols = pattern->cols;
    b->nnz = pattern->nnz;
    for (int64_t s = 0; s <= count; s++) {
        b->row_start[s] = s * b->rows;
        b->col_start[s] = s * b->cols;
    }
    const size_t vsize = kd_dtype_size(b->dtype);
    if ((rc = kd_batch_upload_table(ocl, b, NULL, NULL, err)) != KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)(b->rows + 1) * sizeof(int32_t), pattern->indptr,
                              "batch row pointers", &b->indptr, err)) != KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)b->nnz * sizeof(int32_t), pattern->indices,
                              "batch column indices", &b->indices, err)) != KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)(count * b->nnz) * vsize, values, "batch values",
                              &b->values, err)) != KD_OK ||
        (rc = kd_batch_upload_diagonals(ocl, b, pattern, values, err)) != KD_OK)
        goto fail;
    b->device_bytes = planned;
    *out = b;
    return KD_OK;
fail:
    kd_batch_free(b);
    return rc;
}

/* The systems' sizes checked and summed: rows, row pointers and entries of them all. */
static int kd_batch_systems_check(const kd_csr_t *const *csrs, int64_t count, int64_t *rows,
                                  int64_t *nnz, int64_t *max_rows, kd_err_t *err)
{
    *rows = *nnz = *max_rows = 0;
    if (count < 1)
        return kd_err_set(err, KD_EBADREQ, "a batch holds at least one system");
    for (int64_t s = 0; s < count; s++) {
        const kd_csr_t *c = csrs[s];
        if (c->rows != c->cols || c->rows < 1 || c->rows > KD_BATCH_SYSTEM_ROWS_MAX)
            return kd_err_set(err, KD_EBADREQ,
                              "system %lld is %lld x %lld: a batch takes square systems of 1..%lld "
                              "rows",
                              (long long)s, (long long)c->rows, (long long)c->cols,
                              (long long)KD_BATCH_SYSTEM_ROWS_MAX);
        if (c->dtype != csrs[0]->dtype)
            return kd_err_set(err, KD_EBADREQ, "system %lld is %s, system 0 %s: one dtype a batch",
                              (long long)s, kd_dtype_name(c->dtype), kd_dtype_name(csrs[0]->dtype));
        if (kd_add_overflow_i64(*rows, c->rows, rows) || kd_add_overflow_i64(*nnz, c->nnz, nnz))
            return kd_err_set(err, KD_ETOOLARGE, "the systems' sizes overflow");
        *max_rows = c->rows > *max_rows ? c->rows : *max_rows;
    }
    return KD_OK;
}

/* The systems' CSR arrays back to back (row pointers each from 0) and their inverse diagonals,
 * scanned into b; ptr[s] and idx[s]: where system s's row pointers and entries start. */
static int kd_batch_systems_pack(kd_batch_t *b, const kd_csr_t *const *csrs, int32_t *indptr,
                                 int32_t *indices, char *values, char *dinv, int64_t *ptr,
                                 int64_t *idx)
{
    const size_t vsize = kd_dtype_size(b->dtype);
    int64_t at_ptr = 0, at_idx = 0;
    for (int64_t s = 0; s < b->count; s++) {
        const kd_csr_t *c = csrs[s];
        int64_t *pos = kd_batch_diagonal_positions(c);
        if (pos == NULL)
            return KD_ENOMEM;
        ptr[s] = at_ptr;
        idx[s] = at_idx;
        b->row_start[s + 1] = b->row_start[s] + c->rows;
        b->col_start[s + 1] = b->row_start[s + 1];
        memcpy(indptr + at_ptr, c->indptr, (size_t)(c->rows + 1) * sizeof(int32_t));
        memcpy(indices + at_idx, c->indices, (size_t)c->nnz * sizeof(int32_t));
        memcpy(values + (size_t)at_idx * vsize, c->values, (size_t)c->nnz * vsize);
        kd_batch_scan(b, c, pos, c->values, 0, s, dinv + (size_t)b->row_start[s] * vsize);
        free(pos);
        at_ptr += c->rows + 1;
        at_idx += c->nnz;
    }
    return KD_OK;
}

int kd_batch_upload_systems(kd_ocl_t *ocl, const kd_csr_t *const *csrs, int64_t count,
                            kd_batch_t **out, kd_err_t *err)
{
    assert(ocl != NULL && csrs != NULL && out != NULL);
    *out = NULL;
    int64_t rows, nnz, max_rows;
    int rc = kd_batch_systems_check(csrs, count, &rows, &nnz, &max_rows, err);
    if (rc != KD_OK || (rc = kd_ocl_check_dtype(ocl, csrs[0]->dtype, err)) != KD_OK)
        return rc;
    const kd_dtype_t dtype = csrs[0]->dtype;
    const size_t planned = kd_batch_systems_plan_bytes(count, rows, nnz, dtype);
    if (planned == SIZE_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "%lld systems of %lld nonzeros: too large",
                          (long long)count, (long long)nnz);
    kd_batch_t *b = kd_batch_new(count, dtype, err);
    if (b == NULL)
        return err->code;
    b->rows = b->cols = max_rows;
    b->nnz = nnz;
    b->row_start[0] = b->col_start[0] = 0;
    const size_t vsize = kd_dtype_size(dtype);
    int32_t *indptr = kd_malloc_array((size_t)(rows + count), sizeof(int32_t));
    int32_t *indices = kd_malloc_array((size_t)nnz + 1, sizeof(int32_t));
    char *values = kd_malloc_array((size_t)nnz + 1, vsize);
    char *dinv = kd_malloc_array((size_t)rows, vsize);
    int64_t *ptr = kd_malloc_array((size_t)count, sizeof(int64_t));
    int64_t *idx = kd_malloc_array((size_t)count, sizeof(int64_t));
    if (indptr == NULL || indices == NULL || values == NULL || dinv == NULL || ptr == NULL ||
        idx == NULL || kd_batch_systems_pack(b, csrs, indptr, indices, values, dinv, ptr, idx)) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld systems", (long long)count);
        goto done;
    }
    if ((rc = kd_batch_upload_table(ocl, b, ptr, idx, err)) != KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)(rows + count) * sizeof(int32_t), indptr,
                              "batch row pointers", &b->indptr, err)) != KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)nnz * sizeof(int32_t), indices, "batch column indices",
                              &b->indices, err)) != KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)nnz * vsize, values, "batch values", &b->values, err)) !=
            KD_OK ||
        (rc = kd_batch_buffer(ocl, (size_t)rows * vsize, dinv, "batch inverse diagonals",
                              &b->inv_diagonal, err)) != KD_OK)
        goto done;
    b->device_bytes = planned;
    *out = b;
    b = NULL;
done:
    kd_batch_free(b);
    free(indptr);
    free(indices);
    free(values);
    free(dinv);
    free(ptr);
    free(idx);
    return rc;
}

void kd_batch_free(kd_batch_t *batch)
{
    if (batch == NULL)
        return;
    cl_mem mems[] = {batch->systems, batch->indptr, batch->indices, batch->values,
                     batch->inv_diagonal};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
        if (mems[i] != NULL)
            clReleaseMemObject(mems[i]);
    free(batch->row_start);
    free(batch->col_start);
    free(batch->non_finite_entry);
    free(batch->bad_diagonal_row);
    free(batch->negative_diagonal_row);
    free(batch);
}

int kd_batch_spmv(kd_ocl_t *ocl, const kd_batch_t *batch, const void *x, void *y, kd_err_t *err)
{
    assert(ocl != NULL && batch != NULL);
    const size_t vsize = kd_dtype_size(batch->dtype);
    const size_t xbytes = (size_t)batch->col_start[batch->count] * vsize;
    const size_t ybytes = (size_t)batch->row_start[batch->count] * vsize;
    if (ybytes == 0)
        return KD_OK;
    const size_t wg = kd_ocl_work_group_size(ocl);
    char options[64];
    snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu", wg);
    cl_kernel kernel;
    cl_mem xd = NULL, yd = NULL;
    int rc = kd_ocl_kernel(ocl, "batch", batch->dtype, options, "kd_batch_spmv", &kernel, err);
    if (rc == KD_OK)
        rc = kd_batch_buffer(ocl, xbytes, x, "batch spmv x", &xd, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_WRITE_ONLY, ybytes, NULL, "batch spmv y", &yd, err);
    if (rc == KD_OK)
        rc =
            kd_ocl_run(ocl, kernel, "kd_batch_spmv", kd_ocl_range_1d(wg * (size_t)batch->count, wg),
                       KD_ARGS(KD_ARG_MEM(batch->systems), KD_ARG_MEM(batch->indptr),
                               KD_ARG_MEM(batch->indices), KD_ARG_MEM(batch->values),
                               KD_ARG_MEM(xd), KD_ARG_MEM(yd)),
                       NULL, err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, yd, 0, ybytes, y, err);
    if (xd != NULL)
        clReleaseMemObject(xd);
    if (yd != NULL)
        clReleaseMemObject(yd);
    return rc;
}

int kd_batch_method_parse(const char *name, kd_batch_method_t *out)
{
    if (strcmp(name, "cg") == 0)
        *out = KD_BATCH_CG;
    else if (strcmp(name, "bicgstab") == 0)
        *out = KD_BATCH_BICGSTAB;
    else if (strcmp(name, "gmres") == 0)
        *out = KD_BATCH_GMRES;
    else
        return -1;
    return 0;
}

const char *kd_batch_method_name(kd_batch_method_t method)
{
    return method == KD_BATCH_BICGSTAB ? "bicgstab" : method == KD_BATCH_GMRES ? "gmres" : "cg";
}

void kd_batch_result_free(kd_batch_result_t *result)
{
    if (result == NULL)
        return;
    free(result->history);
    result->history = NULL;
    result->history_len = 0;
}

/* The first place where block s of csr differs from block 0 (-1: none). */
static int64_t kd_batch_block_differs(const kd_csr_t *csr, int64_t k, int64_t rows, int64_t cols,
                                      int64_t nnz, int64_t s)
{
    for (int64_t i = 0; i <= rows; i++)
        if (csr->indptr[s * rows + i] - s * nnz != csr->indptr[i])
            return i;
    for (int64_t j = 0; j < nnz; j++)
        if (csr->indices[s * nnz + j] - s * cols != csr->indices[j])
            return rows + j;
    (void)k;
    return -1;
}

int kd_batch_from_block_diagonal(kd_ocl_t *ocl, const kd_csr_t *csr, int64_t k, kd_matrix_t **out,
                                 kd_err_t *err)
{
    assert(ocl != NULL && csr != NULL && out != NULL);
    *out = NULL;
    if (k < 1 || csr->rows % k != 0 || csr->cols % k != 0 || csr->nnz % k != 0)
        return kd_err_set(err, KD_EBADREQ,
                          "a %lld x %lld matrix of %lld entries is not %lld equal diagonal blocks",
                          (long long)csr->rows, (long long)csr->cols, (long long)csr->nnz,
                          (long long)k);
    const int64_t rows = csr->rows / k, cols = csr->cols / k, nnz = csr->nnz / k;
    for (int64_t s = 1; s < k; s++) {
        const int64_t at = kd_batch_block_differs(csr, k, rows, cols, nnz, s);
        if (at >= 0)
            return kd_err_set(err, KD_EBADREQ,
                              "system %lld does not have system 0's sparsity pattern (%s %lld)",
                              (long long)s, at <= rows ? "row" : "entry",
                              (long long)(at <= rows ? at : at - rows - 1));
    }
    kd_csr_t pattern = {.rows = rows,
                        .cols = cols,
                        .nnz = nnz,
                        .dtype = csr->dtype,
                        .indptr = csr->indptr,
                        .indices = csr->indices};
    kd_batch_t *batch = NULL;
    int rc = kd_batch_upload(ocl, &pattern, csr->values, k, &batch, err);
    if (rc != KD_OK)
        return rc;
    kd_matrix_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        kd_batch_free(batch);
        return kd_err_set(err, KD_ENOMEM, "out of host memory");
    }
    m->rows = csr->rows;
    m->cols = csr->cols;
    m->nnz = csr->nnz;
    m->dtype = csr->dtype;
    m->format = KD_FMT_CSR_SCALAR;
    m->device_bytes = batch->device_bytes;
    m->scan.non_finite_row = m->scan.non_finite_col = -1;
    m->scan.bad_diagonal_row = m->scan.negative_diagonal_row = -1;
    m->scan.asymmetric_row = m->scan.asymmetric_col = -1;
    for (int64_t s = 0; s < k; s++)
        m->scan.non_finite_count += batch->non_finite_entry[s] >= 0;
    m->batch = batch;
    *out = m;
    return KD_OK;
}
