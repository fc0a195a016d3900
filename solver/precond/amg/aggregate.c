/*
 * Aggregation on the device (solver/precond/amg/amg.h, kd_amg_aggregate_device): the parallel
 * counterpart of coarsen.c's three passes. Roots are a distance-2 maximal independent set of the
 * strength graph, found in rounds of three launches (kernels/precond/amg/amg.cl kd_amg_mis_*) until
 * no node is undecided; they are numbered in index order (a count per chunk of nodes, the counts'
 * scan on the host: rows / 256 numbers), and every other node joins a root's aggregate in two
 * launches (a root's neighbours, then theirs). The host reads one int per round and the aggregates
 * at the end; it never walks A.
 */
#include "solver/precond/amg/amg.h"
#include "solver/precond/amg/cycle.h"

#include "common/checked.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define KD_AMG_AGG_CHUNK 256 /* nodes a work-item numbers */

typedef struct kd_amg_agg_buffers {
    cl_mem diag, strong, state, m1, m2, left, a, b, count, offset;
} kd_amg_agg_buffers_t;

static void kd_amg_agg_release(kd_amg_agg_buffers_t *B)
{
    cl_mem *mems[] = {&B->diag, &B->strong, &B->state, &B->m1,    &B->m2,
                      &B->left, &B->a,      &B->b,     &B->count, &B->offset};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
        if (*mems[i] != NULL) {
            clReleaseMemObject(*mems[i]);
            *mems[i] = NULL;
        }
}

static int kd_amg_agg_alloc(kd_ocl_t *ocl, int64_t n, int64_t nnz, int64_t chunks, size_t value,
                            kd_amg_agg_buffers_t *B, kd_err_t *err)
{
    const struct {
        cl_mem *mem;
        size_t bytes;
        const char *what;
    } want[] = {
        {&B->diag, (size_t)n * value, "amg aggregation: diagonal"},
        {&B->strong, (size_t)nnz + 1, "amg aggregation: strength"},
        {&B->state, (size_t)n * sizeof(cl_int), "amg aggregation: state"},
        {&B->m1, (size_t)n * sizeof(cl_ulong), "amg aggregation: keys"},
        {&B->m2, (size_t)n * sizeof(cl_ulong), "amg aggregation: keys"},
        {&B->left, sizeof(cl_int), "amg aggregation: flag"},
        {&B->a, (size_t)n * sizeof(cl_int), "amg aggregation: aggregates"},
        {&B->b, (size_t)n * sizeof(cl_int), "amg aggregation: aggregates"},
        {&B->count, (size_t)chunks * sizeof(cl_int), "amg aggregation: counts"},
        {&B->offset, (size_t)chunks * sizeof(cl_int), "amg aggregation: offsets"},
    };
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
        const int rc = kd_ocl_buffer_create(ocl, CL_MEM_READ_WRITE, want[i].bytes, NULL,
                                            want[i].what, want[i].mem, err);
        if (rc != KD_OK)
            return rc;
    }
    return KD_OK;
}

/* Rounds of the distance-2 independent set until no node is undecided. */
static int kd_amg_agg_rounds(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_device_t *dA,
                             kd_amg_agg_buffers_t *B, int *rounds, kd_err_t *err)
{
    const int64_t n = dA->rows;
    const size_t global = kd_amg_global(amg, n);
    int rc = KD_OK, left = 1;
    /* each round makes the undecided node of the largest key a root: at most n rounds */
    for (*rounds = 0; rc == KD_OK && left && *rounds <= n; ++*rounds) {
        const cl_int zero = 0;
        rc = kd_ocl_write(ocl, B->left, 0, sizeof(zero), &zero, err);
        if (rc == KD_OK) /* the keys into m2, free until max2 */
            rc = kd_amg_launch(ocl, amg, "kd_amg_mis_key", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(dA->indptr),
                                       KD_ARG_MEM(dA->indices), KD_ARG_MEM(B->strong),
                                       KD_ARG_MEM(B->state), KD_ARG_MEM(B->m2)),
                               err);
        if (rc == KD_OK)
            rc = kd_amg_launch(ocl, amg, "kd_amg_mis_max", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(dA->indptr),
                                       KD_ARG_MEM(dA->indices), KD_ARG_MEM(B->strong),
                                       KD_ARG_MEM(B->m2), KD_ARG_MEM(B->m1)),
                               err);
        if (rc == KD_OK) /* again, on its own result: distance 2 */
            rc = kd_amg_launch(ocl, amg, "kd_amg_mis_max", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(dA->indptr),
                                       KD_ARG_MEM(dA->indices), KD_ARG_MEM(B->strong),
                                       KD_ARG_MEM(B->m1), KD_ARG_MEM(B->m2)),
                               err);
        if (rc == KD_OK)
            rc = kd_amg_launch(ocl, amg, "kd_amg_mis_update", 0, global, amg->wg,
                               KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(B->m2), KD_ARG_MEM(B->state),
                                       KD_ARG_MEM(B->left)),
                               err);
        cl_int flag = 0;
        if (rc == KD_OK)
            rc = kd_ocl_read(ocl, B->left, 0, sizeof(flag), &flag, err);
        left = flag != 0;
    }
    if (rc == KD_OK && left)
        rc = kd_err_set(err, KD_EINTERNAL, "amg aggregation: undecided nodes after %d rounds",
                        *rounds);
    return rc;
}

/* The roots numbered in index order into B->a (-1 elsewhere); *naggs of them. */
static int kd_amg_agg_number(kd_ocl_t *ocl, kd_amg_t *amg, int64_t n, int64_t chunks,
                             kd_amg_agg_buffers_t *B, int64_t *naggs, kd_err_t *err)
{
    const size_t global = kd_amg_global(amg, chunks);
    cl_int *count = kd_malloc_array((size_t)chunks, sizeof(cl_int));
    int rc = count != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_agg_count", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_INT(KD_AMG_AGG_CHUNK),
                                   KD_ARG_MEM(B->state), KD_ARG_MEM(B->count)),
                           err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, B->count, 0, (size_t)chunks * sizeof(cl_int), count, err);
    int64_t total = 0;
    for (int64_t c = 0; rc == KD_OK && c < chunks; c++) {
        const int64_t roots = count[c];
        count[c] = (cl_int)total;
        total += roots;
    }
    if (rc == KD_OK)
        rc = kd_ocl_write(ocl, B->offset, 0, (size_t)chunks * sizeof(cl_int), count, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_agg_number", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_INT(KD_AMG_AGG_CHUNK),
                                   KD_ARG_MEM(B->state), KD_ARG_MEM(B->offset), KD_ARG_MEM(B->a)),
                           err);
    free(count);
    *naggs = total;
    return rc;
}

/* The steps on dA, A's device copy. */
static int kd_amg_agg_run(kd_ocl_t *ocl, kd_amg_t *amg, const kd_csr_device_t *dA, double threshold,
                          int32_t *agg, int64_t *naggs, int *rounds, kd_err_t *err)
{
    const int64_t n = dA->rows, chunks = (n + KD_AMG_AGG_CHUNK - 1) / KD_AMG_AGG_CHUNK;
    const size_t global = kd_amg_global(amg, n);
    kd_amg_agg_buffers_t B = {0};
    int rc = kd_amg_agg_alloc(ocl, n, dA->nnz, chunks, kd_dtype_size(amg->dtype), &B, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_diagonal", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(dA->indptr), KD_ARG_MEM(dA->indices),
                                   KD_ARG_MEM(dA->values), KD_ARG_MEM(B.diag)),
                           err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_strength", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_VALUE(amg->dtype, threshold * threshold),
                                   KD_ARG_MEM(dA->indptr), KD_ARG_MEM(dA->indices),
                                   KD_ARG_MEM(dA->values), KD_ARG_MEM(B.diag), KD_ARG_MEM(B.strong),
                                   KD_ARG_MEM(B.state)),
                           err);
    if (rc == KD_OK)
        rc = kd_amg_agg_rounds(ocl, amg, dA, &B, rounds, err);
    if (rc == KD_OK)
        rc = kd_amg_agg_number(ocl, amg, n, chunks, &B, naggs, err);
    /* a root's neighbours join it (a -> b), then the nodes next to those (b -> a) */
    for (int pass = 0; pass < 2 && rc == KD_OK; pass++)
        rc = kd_amg_launch(ocl, amg, "kd_amg_agg_join", 0, global, amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(dA->indptr), KD_ARG_MEM(dA->indices),
                                   KD_ARG_MEM(B.strong), KD_ARG_MEM(pass == 0 ? B.a : B.b),
                                   KD_ARG_MEM(pass == 0 ? B.b : B.a)),
                           err);
    if (rc == KD_OK)
        rc = kd_ocl_read(ocl, B.a, 0, (size_t)n * sizeof(cl_int), agg, err);
    kd_amg_agg_release(&B);
    return rc;
}

int kd_amg_aggregate_device(kd_ocl_t *ocl, const kd_csr_t *A, const kd_csr_device_t *dA,
                            double threshold, int32_t *agg, int64_t *naggs, int *rounds,
                            kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && agg != NULL && naggs != NULL && A->rows == A->cols);
    int unused = 0;
    rounds = rounds != NULL ? rounds : &unused;
    *naggs = 0;
    *rounds = 0;
    if (A->rows == 0)
        return KD_OK;
    kd_amg_t *amg = calloc(1, sizeof(*amg)); /* what kd_amg_launch reads: dtype, wg */
    if (amg == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    amg->dtype = A->dtype;
    amg->wg = kd_ocl_work_group_size(ocl);
    kd_csr_device_t own = {0};
    int rc = KD_OK;
    if (dA == NULL) {
        rc = kd_csr_device_upload(ocl, A, &own, err);
        dA = &own;
    }
    if (rc == KD_OK && (dA->rows != A->rows || dA->nnz != A->nnz || dA->dtype != A->dtype))
        rc = kd_err_set(err, KD_EINTERNAL, "amg aggregation: the device CSR is not A's");
    if (rc == KD_OK)
        rc = kd_amg_agg_run(ocl, amg, dA, threshold, agg, naggs, rounds, err);
    kd_csr_device_release(&own);
    free(amg);
    return rc;
}
