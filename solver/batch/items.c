/*
 * Many systems of their own patterns and sizes solved together (solver/batch/batch.h,
 * kd_batch_solve_items): the systems are sorted into groups that can share launches, and each
 * group becomes one batch of systems of their own (kd_batch_upload_systems) solved by
 * kd_batch_solve, so a system iterates exactly as it would in a batch of one pattern.
 *
 * Groups: one dtype each (a launch is compiled for one value type); among the systems whose
 * vectors fit local memory, one group per class of the share of it they need, because a launch
 * gives every work-group the local memory of its largest system, and that bounds how many
 * work-groups a compute unit holds at once. Systems needing up to an eighth of it share one
 * launch whatever their sizes (the work-group size limits a compute unit to a few groups
 * anyway), then a quarter, a half, all; the systems too large for local memory share one
 * global-memory group. The groups run one after another: the device holds one group's batch and
 * vectors at a time.
 */
#include "solver/batch/batch.h"

#include "common/checked.h"
#include "common/clock.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* The global-memory class: after every local one. */
#define KD_BATCH_CLASS_GLOBAL 64

/* An item's group key: dtype, then size class. */
typedef struct kd_batch_slot {
    int64_t key;
    int64_t item;
} kd_batch_slot_t;

static int kd_batch_slot_order(const void *a, const void *b)
{
    const kd_batch_slot_t *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->item < y->item ? -1 : x->item > y->item;
}

/* The class of a system that needs `share` (<= 1) of the local memory: 0 up to
 * 1 / 2^KD_BATCH_CLASSES, then one more each time the share doubles. */
static int64_t kd_batch_size_class(double share)
{
    int64_t c = 0;
    for (double bound = 1.0 / (double)(1 << KD_BATCH_CLASSES); share > bound; bound *= 2.0)
        c++;
    return c;
}

/* Group items[slots[0..n)]: upload, gather b and x0, solve, scatter x and the results. */
static int kd_batch_solve_group(kd_ocl_t *ocl, const kd_batch_item_t *items,
                                const kd_batch_slot_t *slots, int64_t n,
                                const kd_batch_params_t *params, kd_batch_result_t *results,
                                kd_batch_items_report_t *report, kd_err_t *err)
{
    const kd_csr_t **csrs = kd_malloc_array((size_t)n, sizeof(*csrs));
    double *rtol = kd_malloc_array((size_t)n, sizeof(double));
    double *atol = kd_malloc_array((size_t)n, sizeof(double));
    int64_t *maxiter = kd_malloc_array((size_t)n, sizeof(int64_t));
    int64_t *labels = kd_malloc_array((size_t)n, sizeof(int64_t));
    kd_batch_result_t *res = calloc((size_t)n, sizeof(*res));
    kd_batch_t *batch = NULL;
    char *b = NULL, *x0 = NULL, *x = NULL;
    int rc = KD_OK, any_x0 = 0;
    if (csrs == NULL || rtol == NULL || atol == NULL || maxiter == NULL || labels == NULL ||
        res == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for a group of %lld systems",
                        (long long)n);
        goto done;
    }
    for (int64_t g = 0; g < n; g++) {
        const kd_batch_item_t *it = &items[slots[g].item];
        csrs[g] = it->A;
        rtol[g] = it->rtol;
        atol[g] = it->atol;
        maxiter[g] = it->maxiter;
        labels[g] = it->label;
        any_x0 |= it->x0 != NULL;
    }
    if ((rc = kd_batch_upload_systems(ocl, csrs, n, &batch, err)) != KD_OK)
        goto done;
    const size_t vsize = kd_dtype_size(batch->dtype), rows = (size_t)batch->row_start[n];
    b = kd_malloc_array(rows, vsize);
    x = kd_malloc_array(rows, vsize);
    x0 = any_x0 ? calloc(rows, vsize) : NULL;
    if (b == NULL || x == NULL || (any_x0 && x0 == NULL)) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %zu rows", rows);
        goto done;
    }
    for (int64_t g = 0; g < n; g++) {
        const kd_batch_item_t *it = &items[slots[g].item];
        const size_t at = (size_t)batch->row_start[g] * vsize, bytes = (size_t)it->A->rows * vsize;
        memcpy(b + at, it->b, bytes);
        if (it->x0 != NULL)
            memcpy(x0 + at, it->x0, bytes);
    }
    kd_batch_params_t p = *params;
    p.rtol = rtol;
    p.atol = atol;
    p.maxiter = maxiter;
    p.labels = labels;
    kd_batch_report_t rep;
    rc = kd_batch_solve(ocl, batch, b, x0, x, &p, res, &rep, err);
    report->groups++;
    report->local_groups += rep.local;
    report->launches += rep.launches;
    for (int64_t g = 0; g < n; g++) { /* the results move, histories included */
        const kd_batch_item_t *it = &items[slots[g].item];
        results[slots[g].item] = res[g];
        if (rc == KD_OK)
            memcpy(it->x, x + (size_t)batch->row_start[g] * vsize, (size_t)it->A->rows * vsize);
    }
done:
    kd_batch_free(batch);
    free(csrs);
    free(rtol);
    free(atol);
    free(maxiter);
    free(labels);
    free(res);
    free(b);
    free(x0);
    free(x);
    return rc;
}

int kd_batch_solve_items(kd_ocl_t *ocl, const kd_batch_item_t *items, int64_t count,
                         const kd_batch_params_t *params, kd_batch_result_t *results,
                         kd_batch_items_report_t *report, kd_err_t *err)
{
    assert(ocl != NULL && items != NULL && params != NULL && results != NULL);
    const uint64_t t0 = kd_clock_ns();
    kd_batch_items_report_t own;
    if (report == NULL)
        report = &own;
    memset(report, 0, sizeof(*report));
    memset(results, 0, (size_t)count * sizeof(*results));
    if (count < 1)
        return kd_err_set(err, KD_EBADREQ, "a solve of items takes at least one");
    kd_batch_slot_t *slots = kd_malloc_array((size_t)count, sizeof(*slots));
    if (slots == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld items", (long long)count);
    const int64_t vectors = kd_batch_method_vectors(params->method, params->restart);
    for (int64_t i = 0; i < count; i++) {
        const kd_csr_t *A = items[i].A;
        const double share = kd_batch_local_share(ocl, A->rows, A->dtype, vectors);
        const int local = !params->force_global && share <= 1.0;
        slots[i].item = i;
        slots[i].key =
            (int64_t)A->dtype * 128 + (local ? kd_batch_size_class(share) : KD_BATCH_CLASS_GLOBAL);
    }
    qsort(slots, (size_t)count, sizeof(*slots), kd_batch_slot_order);
    int rc = KD_OK;
    for (int64_t start = 0, end; rc == KD_OK && start < count; start = end) {
        for (end = start + 1; end < count && slots[end].key == slots[start].key; end++)
            ;
        rc = kd_batch_solve_group(ocl, items, slots + start, end - start, params, results, report,
                                  err);
    }
    free(slots);
    report->time_ms = (double)(kd_clock_ns() - t0) / 1e6;
    return rc;
}
