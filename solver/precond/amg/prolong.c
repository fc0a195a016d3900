/*
 * The smoothed prolongator on the device (solver/precond/amg/amg.h, kd_amg_prolongator_device):
 * what coarsen.c's kd_amg_prolongator computes on the host, as T from the aggregates
 * (kernels/precond/amg/amg.cl kd_amg_agg_size, kd_amg_tent_count, kd_amg_tent_fill: the rows
 * counted per chunk of 256, the counts' scan on the host), A T by kd_spgemm, and
 * P = T - omega D^-1 (A T) in place (kd_amg_tent_smooth). A T's pattern is P's: row i's distinct
 * aggregates of its columns, its own among them since A's diagonal is stored. And R = P^T
 * (kd_amg_transpose_device): column counts, their scan on the host (the coarse level's rows), an
 * atomic scatter, then each row of R sorted by P's row, so the result is kd_csr_transpose's.
 */
#include "solver/precond/amg/amg.h"
#include "solver/precond/amg/cycle.h"

#include "common/checked.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define KD_AMG_TENT_CHUNK 256 /* rows of T a work-item writes */

typedef struct kd_amg_tent_buffers {
    cl_mem agg, size, count, offset;
} kd_amg_tent_buffers_t;

static void kd_amg_tent_release(kd_amg_tent_buffers_t *B)
{
    cl_mem *mems[] = {&B->agg, &B->size, &B->count, &B->offset};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
        if (*mems[i] != NULL) {
            clReleaseMemObject(*mems[i]);
            *mems[i] = NULL;
        }
}

/* The aggregates and their sizes on the device. */
static int kd_amg_tent_sizes(kd_ocl_t *ocl, kd_amg_t *amg, int64_t n, const int32_t *agg,
                             int64_t naggs, kd_amg_tent_buffers_t *B, kd_err_t *err)
{
    int32_t *zero = calloc((size_t)naggs + 1, sizeof(int32_t));
    int rc = zero != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        rc = kd_ocl_buffer_upload(ocl, CL_MEM_READ_ONLY, agg, (size_t)n * sizeof(int32_t),
                                  "amg prolongator: aggregates", &B->agg, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_upload(ocl, CL_MEM_READ_WRITE, zero,
                                  (size_t)(naggs + 1) * sizeof(int32_t),
                                  "amg prolongator: aggregate sizes", &B->size, err);
    free(zero);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_agg_size", 0, kd_amg_global(amg, n), amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(B->agg), KD_ARG_MEM(B->size)), err);
    return rc;
}

/* T (n x naggs) into *T, a new device CSR. */
static int kd_amg_tent_build(kd_ocl_t *ocl, kd_amg_t *amg, int64_t n, int64_t naggs,
                             kd_amg_tent_buffers_t *B, kd_csr_device_t *T, kd_err_t *err)
{
    const int64_t chunks = (n + KD_AMG_TENT_CHUNK - 1) / KD_AMG_TENT_CHUNK;
    const size_t global = kd_amg_global(amg, chunks);
    cl_int *count = kd_malloc_array((size_t)chunks + 1, sizeof(cl_int));
    int rc = count != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, (size_t)chunks * sizeof(cl_int), NULL,
                                  "amg prolongator: counts", &B->count, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_tent_count", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_INT(KD_AMG_TENT_CHUNK), KD_ARG_MEM(B->agg),
                                   KD_ARG_MEM(B->count)),
                           err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, B->count, 0, (size_t)chunks * sizeof(cl_int), count, err);
    int64_t total = 0;
    for (int64_t c = 0; rc == KD_OK && c < chunks; c++) {
        const int64_t m = count[c];
        count[c] = (cl_int)total;
        total += m;
    }
    *T = (kd_csr_device_t){.rows = n, .cols = naggs, .nnz = total, .dtype = amg->dtype};
    const size_t v = kd_dtype_size(amg->dtype);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_upload(ocl, CL_MEM_READ_ONLY, count, (size_t)chunks * sizeof(cl_int),
                                  "amg prolongator: offsets", &B->offset, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, ((size_t)n + 1) * sizeof(cl_int), NULL,
                                  "amg prolongator: T's row pointers", &T->indptr, err);
    if (rc == KD_OK && total > 0)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, (size_t)total * sizeof(cl_int), NULL,
                                  "amg prolongator: T's columns", &T->indices, err);
    if (rc == KD_OK && total > 0)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, (size_t)total * v, NULL,
                                  "amg prolongator: T's values", &T->values, err);
    const cl_int last = (cl_int)total;
    if (rc == KD_OK)
        rc = kd_ocl_write(ocl, T->indptr, (size_t)n * sizeof(cl_int), sizeof(last), &last, err);
    if (rc == KD_OK)
        rc =
            kd_amg_launch(ocl, amg, "kd_amg_tent_fill", 0, global, amg->wg,
                          KD_ARGS(KD_ARG_INT(n), KD_ARG_INT(KD_AMG_TENT_CHUNK), KD_ARG_MEM(B->agg),
                                  KD_ARG_MEM(B->size), KD_ARG_MEM(B->offset), KD_ARG_MEM(T->indptr),
                                  KD_ARG_MEM(T->indices), KD_ARG_MEM(T->values)),
                          err);
    T->device_bytes = ((size_t)n + 1 + (size_t)total) * sizeof(cl_int) + (size_t)total * v;
    free(count);
    return rc;
}

int kd_amg_prolongator_device(kd_ocl_t *ocl, const kd_csr_device_t *dA, const int32_t *agg,
                              int64_t naggs, double omega, kd_csr_device_t *P, kd_err_t *err)
{
    assert(ocl != NULL && dA != NULL && agg != NULL && P != NULL && dA->rows == dA->cols);
    assert(naggs > 0);
    memset(P, 0, sizeof(*P));
    kd_amg_t *amg = calloc(1, sizeof(*amg)); /* what kd_amg_launch reads: dtype, wg */
    if (amg == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    amg->dtype = dA->dtype;
    amg->wg = kd_ocl_work_group_size(ocl);
    const int64_t n = dA->rows;
    kd_amg_tent_buffers_t B = {0};
    kd_csr_device_t T = {0};
    int rc = kd_amg_tent_sizes(ocl, amg, n, agg, naggs, &B, err);
    if (rc == KD_OK)
        rc = kd_amg_tent_build(ocl, amg, n, naggs, &B, &T, err);
    if (rc == KD_OK)
        rc = kd_spgemm(ocl, dA, &T, NULL, P, NULL, err);
    if (rc == KD_OK && P->nnz > 0)
        rc = kd_amg_launch(ocl, amg, "kd_amg_tent_smooth", 0, kd_amg_global(amg, n), amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_VALUE(amg->dtype, omega),
                                   KD_ARG_MEM(dA->indptr), KD_ARG_MEM(dA->indices),
                                   KD_ARG_MEM(dA->values), KD_ARG_MEM(B.agg), KD_ARG_MEM(B.size),
                                   KD_ARG_MEM(P->indptr), KD_ARG_MEM(P->indices),
                                   KD_ARG_MEM(P->values)),
                           err);
    if (rc != KD_OK)
        kd_csr_device_release(P);
    kd_csr_device_release(&T);
    kd_amg_tent_release(&B);
    free(amg);
    return rc;
}

/* R's row pointers from P's column counts (counted on the device, scanned here: P's columns are
 * the coarse level's rows) into new buffers ptr and fill (the same values). */
static int kd_amg_transpose_rows(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_device_t *P,
                                 cl_mem *ptr, cl_mem *fill, kd_err_t *err)
{
    const int64_t m = P->cols;
    cl_int *host = calloc((size_t)m + 1, sizeof(cl_int));
    cl_mem count = NULL;
    int rc = host != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        rc = kd_ocl_buffer_upload(ocl, CL_MEM_READ_WRITE, host, (size_t)(m + 1) * sizeof(cl_int),
                                  "amg transpose: counts", &count, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_col_count", 0, kd_amg_global(amg, P->rows), amg->wg,
                           KD_ARGS(KD_ARG_INT(P->rows), KD_ARG_MEM(P->indptr),
                                   KD_ARG_MEM(P->indices), KD_ARG_MEM(count)),
                           err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, count, 0, (size_t)m * sizeof(cl_int), host, err);
    int64_t total = 0;
    for (int64_t j = 0; rc == KD_OK && j <= m; j++) {
        const int64_t c = j < m ? host[j] : 0;
        host[j] = (cl_int)total;
        total += c;
    }
    if (rc == KD_OK && total != P->nnz)
        rc = kd_err_set(err, KD_EINTERNAL, "amg transpose: %lld entries counted of %lld",
                        (long long)total, (long long)P->nnz);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_upload(ocl, CL_MEM_READ_WRITE, host, (size_t)(m + 1) * sizeof(cl_int),
                                  "amg transpose: R's row pointers", ptr, err);
    if (rc == KD_OK)
        rc = kd_ocl_buffer_upload(ocl, CL_MEM_READ_WRITE, host, (size_t)(m + 1) * sizeof(cl_int),
                                  "amg transpose: fill", fill, err);
    if (count != NULL)
        clReleaseMemObject(count);
    free(host);
    return rc;
}

int kd_amg_transpose_device(kd_ocl_t *ocl, const kd_csr_device_t *P, kd_csr_device_t *R,
                            int32_t *map, kd_err_t *err)
{
    assert(ocl != NULL && P != NULL && R != NULL);
    memset(R, 0, sizeof(*R));
    kd_amg_t *amg = calloc(1, sizeof(*amg)); /* what kd_amg_launch reads: dtype, wg */
    if (amg == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    amg->dtype = P->dtype;
    amg->wg = kd_ocl_work_group_size(ocl);
    *R = (kd_csr_device_t){.rows = P->cols, .cols = P->rows, .nnz = P->nnz, .dtype = P->dtype};
    const size_t v = kd_dtype_size(P->dtype), nnz = (size_t)P->nnz;
    cl_mem fill = NULL, rmap = NULL;
    int rc = kd_amg_transpose_rows(ocl, amg, P, &R->indptr, &fill, err);
    if (rc == KD_OK && nnz > 0)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, nnz * sizeof(cl_int), NULL,
                                  "amg transpose: R's columns", &R->indices, err);
    if (rc == KD_OK && nnz > 0)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, nnz * v, NULL,
                                  "amg transpose: R's values", &R->values, err);
    if (rc == KD_OK && nnz > 0)
        rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, nnz * sizeof(cl_int), NULL,
                                  "amg transpose: map", &rmap, err);
    if (rc == KD_OK && nnz > 0)
        rc = kd_amg_launch(
            ocl, amg, "kd_amg_transpose_scatter", 0, kd_amg_global(amg, P->rows), amg->wg,
            KD_ARGS(KD_ARG_INT(P->rows), KD_ARG_MEM(P->indptr), KD_ARG_MEM(P->indices),
                    KD_ARG_MEM(fill), KD_ARG_MEM(R->indices), KD_ARG_MEM(rmap)),
            err);
    if (rc == KD_OK && nnz > 0)
        rc = kd_amg_launch(
            ocl, amg, "kd_amg_transpose_sort", 0, kd_amg_global(amg, R->rows), amg->wg,
            KD_ARGS(KD_ARG_INT(R->rows), KD_ARG_MEM(R->indptr), KD_ARG_MEM(R->indices),
                    KD_ARG_MEM(rmap), KD_ARG_MEM(P->values), KD_ARG_MEM(R->values)),
            err);
    if (rc == KD_OK && nnz > 0 && map != NULL)
        rc = kd_ocl_read(ocl, rmap, 0, nnz * sizeof(cl_int), map, err);
    R->device_bytes = ((size_t)R->rows + 1 + nnz) * sizeof(cl_int) + nnz * v;
    if (rc != KD_OK)
        kd_csr_device_release(R);
    if (fill != NULL)
        clReleaseMemObject(fill);
    if (rmap != NULL)
        clReleaseMemObject(rmap);
    free(amg);
    return rc;
}
