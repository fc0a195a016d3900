/*
 * A reordering kept inside a device matrix (see kd_matrix_order_t in matrix.h): the format is
 * built from P A P^T, the permutation and its inverse live beside it on the device, and
 * kd_matrix_spmv wraps the format's SpMV in a gather of x and a fused alpha/beta write-back of y
 * (kernels/permute.cl): two launches and about rows * (8 + 4 * sizeof(value)) bytes more per
 * SpMV, which the selection counts because it times a reordered candidate through
 * kd_matrix_spmv. The solver uses kd_matrix_spmv_inner and permutes b and x once per solve.
 * Building a reordered matrix (kd_matrix_upload_reordered) is matrix.c's; this file only attaches
 * an order to a built matrix, runs its SpMV and releases it, and calls no matrix function.
 */
#include "solver/formats/format.h"

#include <stdlib.h>
#include <string.h>

int kd_matrix_order_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, double alpha, const kd_vec_t *x,
                         double beta, kd_vec_t *y, kd_err_t *err)
{
    const kd_matrix_order_t *o = &m->order;
    /* the scratch vectors' buffers change, not the handles: one worker thread at a time */
    kd_vec_t *x_p = (kd_vec_t *)&o->x_p, *y_p = (kd_vec_t *)&o->y_p;
    int rc = kd_format_run(ocl, m->dtype, "permute", NULL, "kd_permute_in", (size_t)m->rows,
                           KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_MEM(o->perm_dev), KD_ARG_MEM(x->mem),
                                   KD_ARG_MEM(x_p->mem)),
                           err);
    if (rc == KD_OK)
        rc = m->ops->spmv(ocl, m, 1.0, x_p, 0.0, y_p, err);
    if (rc == KD_OK)
        rc = kd_format_run(ocl, m->dtype, "permute", NULL, "kd_permute_out", (size_t)m->rows,
                           KD_ARGS(KD_ARG_INT(m->rows), KD_ARG_MEM(o->iperm_dev),
                                   KD_ARG_MEM(y_p->mem), KD_ARG_MEM(y->mem),
                                   KD_ARG_VALUE(m->dtype, alpha), KD_ARG_VALUE(m->dtype, beta)),
                           err);
    return rc;
}

void kd_matrix_order_release(kd_matrix_t *m)
{
    kd_matrix_order_t *o = &m->order;
    cl_mem mems[2] = {o->perm_dev, o->iperm_dev};
    kd_format_release_mems(mems, 2);
    kd_vec_release(&o->x_p);
    kd_vec_release(&o->y_p);
    free(o->perm);
    memset(o, 0, sizeof(*o));
}

/* The scan's positions in P A P^T back to A's numbering. */
static void kd_matrix_order_unpermute_scan(kd_matrix_scan_t *s, const int32_t *perm)
{
    int64_t *rows[] = {&s->non_finite_row,        &s->non_finite_col, &s->bad_diagonal_row,
                       &s->negative_diagonal_row, &s->asymmetric_row, &s->asymmetric_col};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (*rows[i] >= 0)
            *rows[i] = perm[*rows[i]];
}

int kd_matrix_attach_order(kd_ocl_t *ocl, kd_matrix_t *m, kd_reorder_t kind, int32_t *perm,
                           kd_err_t *err)
{
    const int64_t n = m->rows;
    const size_t bytes = (size_t)n * sizeof(int32_t);
    kd_matrix_order_release(m);
    int32_t *iperm = malloc(bytes > 0 ? bytes : 1);
    if (iperm == NULL) {
        free(perm);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a %lld-row permutation",
                          (long long)n);
    }
    kd_reorder_invert(perm, n, iperm);
    kd_matrix_order_t *o = &m->order;
    o->kind = kind;
    o->perm = perm;
    int rc = kd_format_upload_array(ocl, m, perm, bytes, "permutation", &o->perm_dev, err);
    if (rc == KD_OK)
        rc =
            kd_format_upload_array(ocl, m, iperm, bytes, "inverse permutation", &o->iperm_dev, err);
    free(iperm);
    if (rc == KD_OK && (rc = kd_vec_alloc(ocl, n, m->dtype, &o->x_p, err)) == KD_OK)
        rc = kd_vec_alloc(ocl, n, m->dtype, &o->y_p, err);
    if (rc != KD_OK) {
        kd_matrix_order_release(m);
        return rc;
    }
    m->device_bytes += 2 * (size_t)n * kd_dtype_size(m->dtype);
    kd_matrix_order_unpermute_scan(&m->scan, perm);
    return KD_OK;
}
