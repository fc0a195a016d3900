/*
 * C = A B on the device (solver/products/spgemm.h is the contract; kernels/products/spgemm.cl has
 * the kernels, their thread mapping, memory access and the determinism argument). The host's part
 * is a sequence of steps around two read-backs of a small header:
 *
 *   count    ub_i (int64) per row of A and its symbolic bin, per-group sums; one work-group turns
 *            them into the products' total and each bin's size and start.      -> read back #1
 *            KD_ETOOLARGE when the products pass KD_CSR_INDEX_MAX: nothing big exists yet.
 *   symbolic rows scattered into their bins (ascending within a bin); one launch per non-empty bin
 *            counts each row's distinct columns into C's row pointer; a three-kernel scan turns
 *            the counts into offsets and C's nnz, and bins the rows again by their exact counts
 *            (the numeric bins).                                                -> read back #2
 *            KD_ETOOLARGE for nnz past KD_CSR_INDEX_MAX or limits->max_nnz, KD_EDEVMEM past
 *            limits->max_device_bytes, all before C's indices and values are allocated.
 *   numeric  one launch per non-empty numeric bin fills C's rows, sorted by column (the global
 *            bin: two, its columns then its values).
 *
 * Bins (kernels/products/spgemm_abi.h). A work-group's tables hold WG * L slots (L = 8 per
 * work-item where local memory allows: 24 KiB of keys and float64 values for WG = 256). A short row
 * shares a work-group with others in a team of 4..64 work-items: at least its mean B row length
 * (the parallelism of one entry of A), with 8 slots per work-item; a longer one gets a whole group.
 * Symbolic tables must hold every product's column (min(ub, n)); numeric ones are sized from the
 * exact count (at most half full in teams, 3/4 in a group), so rows whose products collide a lot
 * (A A of a mesh: 49 products, 25 columns; Galerkin products) run in smaller teams.
 *
 * The global bin (columns that may not fit the group's table) is why the scratch here is bounded:
 * its symbolic pass and the numeric pass that writes its columns use a bitmap of C's n columns per
 * work-group in global memory (atomic_or; walking the bitmap gives the columns sorted, and it is
 * cleared as it is walked), on a fixed number of work-groups looping over the rows: at most 2 per
 * compute unit and KD_SPGEMM_GLOBAL_SCRATCH bytes of bitmaps, at least one. The values are then
 * summed in local memory, one work-group per slice of WG * L / 2 of the row's (now known) columns,
 * so a long row is spread over many work-groups and needs no global accumulator at all. Why not a
 * dense accumulator of n values per row: a column's products must be added by one work-item in
 * order, and a read-modify-write of global memory per product serializes on its latency (a row of
 * 10^4 entries of A took milliseconds that way); a hash table in global memory has the same cost
 * and would still need a sort of thousands of columns.
 */
#include "solver/products/spgemm.h"
#include "common/checked.h"
#include "common/clock.h"
#include "kernels/products/spgemm_abi.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Scratch for the global bin's column bitmaps, all work-groups together. */
#define KD_SPGEMM_GLOBAL_SCRATCH ((size_t)64 << 20)

/* ---- device CSR ----------------------------------------------------------------------------- */

static int kd_csr_device_write(kd_ocl_t *ocl, const void *host, size_t bytes, const char *what,
                               cl_mem *out, kd_err_t *err)
{
    return kd_ocl_buffer_upload(ocl, CL_MEM_READ_WRITE, host, bytes, what, out, err);
}

int kd_csr_device_upload(kd_ocl_t *ocl, const kd_csr_t *csr, kd_csr_device_t *out, kd_err_t *err)
{
    assert(ocl != NULL && csr != NULL && out != NULL);
    memset(out, 0, sizeof(*out));
    int rc = kd_ocl_check_dtype(ocl, csr->dtype, err);
    if (rc != KD_OK)
        return rc;
    size_t v = kd_dtype_size(csr->dtype);
    size_t ptr_bytes = ((size_t)csr->rows + 1) * sizeof(int32_t);
    size_t idx_bytes = (size_t)csr->nnz * sizeof(int32_t);
    size_t val_bytes = (size_t)csr->nnz * v;
    out->rows = csr->rows;
    out->cols = csr->cols;
    out->nnz = csr->nnz;
    out->dtype = csr->dtype;
    rc = kd_csr_device_write(ocl, csr->indptr, ptr_bytes, "CSR row pointers", &out->indptr, err);
    if (rc == KD_OK)
        rc = kd_csr_device_write(ocl, csr->indices, idx_bytes, "CSR column indices", &out->indices,
                                 err);
    if (rc == KD_OK)
        rc = kd_csr_device_write(ocl, csr->values, val_bytes, "CSR values", &out->values, err);
    if (rc != KD_OK) {
        kd_csr_device_release(out);
        return rc;
    }
    out->device_bytes = ptr_bytes + idx_bytes + val_bytes;
    return KD_OK;
}

int kd_csr_device_download(kd_ocl_t *ocl, const kd_csr_device_t *dev, kd_csr_t **out, kd_err_t *err)
{
    assert(ocl != NULL && dev != NULL && out != NULL);
    *out = NULL;
    kd_csr_t *csr = NULL;
    int rc = kd_csr_alloc(dev->rows, dev->cols, dev->nnz, dev->dtype, &csr, err);
    if (rc != KD_OK)
        return rc;
    cl_command_queue q = kd_ocl_queue(ocl);
    cl_int st =
        kd_ocl_enqueue_read(q, dev->indptr, CL_TRUE, 0, ((size_t)dev->rows + 1) * sizeof(int32_t),
                            csr->indptr, 0, NULL, NULL);
    if (st == CL_SUCCESS && dev->nnz > 0)
        st = kd_ocl_enqueue_read(q, dev->indices, CL_TRUE, 0, (size_t)dev->nnz * sizeof(int32_t),
                                 csr->indices, 0, NULL, NULL);
    if (st == CL_SUCCESS && dev->nnz > 0)
        st = kd_ocl_enqueue_read(q, dev->values, CL_TRUE, 0,
                                 (size_t)dev->nnz * kd_dtype_size(dev->dtype), csr->values, 0, NULL,
                                 NULL);
    if (st != CL_SUCCESS) {
        kd_csr_free(csr);
        rc = kd_ocl_fail(err, st, "clEnqueueReadBuffer");
        return kd_err_prefix(err, "reading a %lld x %lld device matrix back", (long long)dev->rows,
                             (long long)dev->cols);
    }
    *out = csr;
    return KD_OK;
}

void kd_csr_device_release(kd_csr_device_t *dev)
{
    if (dev == NULL)
        return;
    cl_mem mems[3] = {dev->indptr, dev->indices, dev->values};
    for (int i = 0; i < 3; i++)
        if (mems[i] != NULL)
            clReleaseMemObject(mems[i]);
    memset(dev, 0, sizeof(*dev));
}

/* ---- one multiplication -----------------------------------------------------------------------
 */

enum { KD_SPGEMM_PHASE_SYMBOLIC = 0, KD_SPGEMM_PHASE_NUMERIC = 1, KD_SPGEMM_PHASES = 2 };

/* Launches in one product at most (offsets runs twice; see kd_spgemm_names). */
#define KD_SPGEMM_LAUNCHES 24

typedef struct kd_spgemm_launch_event {
    cl_event event;
    const char *name;
    int phase;
} kd_spgemm_launch_event_t;

typedef struct kd_spgemm_run {
    kd_ocl_t *ocl;
    const kd_csr_device_t *A, *B;
    kd_csr_device_t *C;
    kd_dtype_t dtype;
    char options[96];
    size_t wg;
    size_t limit;      /* max_device_bytes, or SIZE_MAX */
    size_t live, peak; /* bytes allocated here (C included), now and at most */
    size_t groups;     /* of the count, scatter and scan kernels */
    size_t bitmap_groups;
    int words; /* of a row's bitmap */
    cl_mem row_bin, sums, group_bins, tasks, head, bin_rows, task_start, bitmaps;
    int64_t head_host[KD_SPGEMM_HEAD_SLOTS];
    int64_t symbolic_bins[KD_SPGEMM_BINS];
    int phase;
    int timed;
    int launches;
    kd_spgemm_launch_event_t events[KD_SPGEMM_LAUNCHES];
} kd_spgemm_run_t;

/* A device buffer counted against the limit; bytes == 0 gives NULL. */
static int kd_spgemm_alloc(kd_spgemm_run_t *run, size_t bytes, const char *what, cl_mem *out,
                           kd_err_t *err)
{
    *out = NULL;
    if (bytes == 0)
        return KD_OK;
    size_t total;
    if (kd_add_overflow(run->live, bytes, &total) || total > run->limit)
        return kd_err_set(err, KD_EDEVMEM,
                          "C = A B needs %zu more bytes of device memory for %s (%zu in use), "
                          "more than max_device_bytes = %zu",
                          bytes, what, run->live, run->limit);
    int rc = kd_ocl_buffer_create(run->ocl, CL_MEM_READ_WRITE, bytes, NULL, what, out, err);
    if (rc != KD_OK)
        return rc;
    run->live = total;
    if (run->live > run->peak)
        run->peak = run->live;
    return KD_OK;
}

static void kd_spgemm_free_scratch(kd_spgemm_run_t *run)
{
    cl_mem *mems[] = {&run->row_bin, &run->sums,     &run->group_bins, &run->tasks,
                      &run->head,    &run->bin_rows, &run->task_start, &run->bitmaps};
    for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++) {
        if (*mems[i] != NULL)
            clReleaseMemObject(*mems[i]);
        *mems[i] = NULL;
    }
    for (int i = 0; i < run->launches; i++)
        clReleaseEvent(run->events[i].event);
    run->launches = 0;
}

/* Enqueue kernel `name` over groups work-groups of WG; its event is kept when timed. */
static int kd_spgemm_launch(kd_spgemm_run_t *run, const char *name, size_t groups,
                            const kd_ocl_arg_t *args, size_t nargs, kd_err_t *err)
{
    if (groups == 0)
        return KD_OK;
    cl_kernel kernel;
    int rc = kd_ocl_kernel(run->ocl, "spgemm", run->dtype, run->options, name, &kernel, err);
    if (rc != KD_OK)
        return rc;
    cl_event ev = NULL;
    int timed = run->timed && run->launches < KD_SPGEMM_LAUNCHES;
    rc = kd_ocl_run(run->ocl, kernel, name, kd_ocl_range_1d(groups * run->wg, run->wg), args, nargs,
                    timed ? &ev : NULL, err);
    if (rc != KD_OK || ev == NULL)
        return rc;
    run->events[run->launches++] = (kd_spgemm_launch_event_t){ev, name, run->phase};
    return KD_OK;
}

#define KD_SPGEMM_RUN(run, name, groups, ...)                                                      \
    kd_spgemm_launch((run), (name), (groups), KD_ARGS(__VA_ARGS__), err)

/* Enqueue a read of the header; blocking unless ev is given. */
static int kd_spgemm_read_head(kd_spgemm_run_t *run, cl_event *ev, kd_err_t *err)
{
    cl_int st = kd_ocl_enqueue_read(kd_ocl_queue(run->ocl), run->head, ev == NULL, 0,
                                    sizeof(run->head_host), run->head_host, 0, NULL, ev);
    if (st != CL_SUCCESS) {
        kd_ocl_fail(err, st, "clEnqueueReadBuffer");
        return kd_err_prefix(err, "reading C = A B's sizes back");
    }
    return KD_OK;
}

static int kd_spgemm_check(kd_ocl_t *ocl, const kd_csr_device_t *A, const kd_csr_device_t *B,
                           kd_err_t *err)
{
    if (A->cols != B->rows)
        return kd_err_set(err, KD_EBADREQ,
                          "C = A B needs A's columns to match B's rows: A is %lld x %lld, B is "
                          "%lld x %lld",
                          (long long)A->rows, (long long)A->cols, (long long)B->rows,
                          (long long)B->cols);
    if (A->dtype != B->dtype)
        return kd_err_set(err, KD_EBADREQ, "C = A B needs one value type: A is %s, B is %s",
                          kd_dtype_name(A->dtype), kd_dtype_name(B->dtype));
    if (A->rows > KD_CSR_INDEX_MAX - 1 || B->cols > KD_CSR_INDEX_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "C = A B would be %lld x %lld, past int32 indices",
                          (long long)A->rows, (long long)B->cols);
    return kd_ocl_check_dtype(ocl, A->dtype, err);
}

/* Slots per work-item: 8 where local memory holds a numeric team kernel's WG * 8 keys and values
 * with its chunk of A's entries and its window of products, else fewer. */
int kd_spgemm_lane_slots(const kd_ocl_t *ocl, kd_dtype_t dtype)
{
    size_t wg = kd_ocl_work_group_size(ocl);
    size_t local = (size_t)kd_ocl_desc(ocl)->local_mem_bytes;
    size_t v = kd_dtype_size(dtype);
    size_t fixed = wg * (v + 2 * sizeof(cl_int) + KD_SPGEMM_WINDOW_ITEMS * (sizeof(cl_int) + v));
    int slots = 8;
    while (slots > 1 && wg * (size_t)slots * (sizeof(cl_int) + v) + fixed + 512 > local)
        slots /= 2;
    return slots;
}

/* Step 1: ub per row, symbolic bins, the products' total (read back). */
static int kd_spgemm_count(kd_spgemm_run_t *run, kd_err_t *err)
{
    const kd_csr_device_t *A = run->A, *B = run->B;
    size_t per_group = run->wg * KD_SPGEMM_SCAN_ITEMS;
    run->groups = ((size_t)A->rows + per_group - 1) / per_group;
    int rc = kd_spgemm_alloc(run, (size_t)A->rows, "C = A B's row bins", &run->row_bin, err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(run, run->groups * sizeof(cl_long), "C = A B's group sums", &run->sums,
                             err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(run, run->groups * KD_SPGEMM_BINS * sizeof(cl_int),
                             "C = A B's group bins", &run->group_bins, err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(run, run->groups * sizeof(cl_int), "C = A B's group slices",
                             &run->tasks, err);
    if (rc == KD_OK)
        rc = KD_SPGEMM_RUN(run, "kd_spgemm_count", run->groups, KD_ARG_INT(A->rows),
                           KD_ARG_INT(B->cols), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                           KD_ARG_MEM(B->indptr), KD_ARG_MEM(run->row_bin),
                           KD_ARG_MEM(run->C->indptr), KD_ARG_MEM(run->sums),
                           KD_ARG_MEM(run->group_bins));
    if (rc == KD_OK)
        rc = KD_SPGEMM_RUN(run, "kd_spgemm_offsets", 1, KD_ARG_INT(run->groups), KD_ARG_INT(0),
                           KD_ARG_INT(A->rows), KD_ARG_MEM(run->sums), KD_ARG_MEM(run->group_bins),
                           KD_ARG_MEM(run->tasks), KD_ARG_MEM(run->head),
                           KD_ARG_MEM(run->C->indptr));
    if (rc == KD_OK)
        rc = kd_spgemm_read_head(run, NULL, err);
    if (rc != KD_OK)
        return rc;
    memcpy(run->symbolic_bins, &run->head_host[KD_SPGEMM_HEAD_BIN_ROWS],
           sizeof(run->symbolic_bins));
    int64_t products = run->head_host[KD_SPGEMM_HEAD_PRODUCTS];
    if (products > KD_CSR_INDEX_MAX)
        return kd_err_set(err, KD_ETOOLARGE,
                          "C = A B (%lld x %lld times %lld x %lld) has %lld products (the sum "
                          "over A's entries of B's row lengths), more than the %d that int32 "
                          "indices can count",
                          (long long)A->rows, (long long)A->cols, (long long)B->rows,
                          (long long)B->cols, (long long)products, KD_CSR_INDEX_MAX);
    return KD_OK;
}

/* The global bin's bitmaps, allocated (cleared) on first use for up to `rows` rows at once: at
 * most 2 per compute unit and KD_SPGEMM_GLOBAL_SCRATCH bytes, at least one, leaving `reserve`
 * bytes under the limit. */
static int kd_spgemm_bitmaps(kd_spgemm_run_t *run, int64_t rows, size_t reserve, kd_err_t *err)
{
    if (run->bitmaps != NULL || rows == 0)
        return KD_OK;
    size_t one = (size_t)run->words * sizeof(cl_uint);
    size_t groups = 2 * (size_t)kd_ocl_desc(run->ocl)->compute_units;
    if (groups > (size_t)rows)
        groups = (size_t)rows;
    if (groups > KD_SPGEMM_GLOBAL_SCRATCH / one)
        groups = KD_SPGEMM_GLOBAL_SCRATCH / one;
    size_t room = run->limit > run->live + reserve ? run->limit - run->live - reserve : 0;
    if (groups > room / one)
        groups = room / one;
    if (groups == 0)
        groups = 1;
    int rc = kd_spgemm_alloc(run, groups * one, "C = A B's column bitmaps", &run->bitmaps, err);
    if (rc != KD_OK)
        return rc;
    run->bitmap_groups = groups;
    cl_uint zero = 0;
    cl_int st = clEnqueueFillBuffer(kd_ocl_queue(run->ocl), run->bitmaps, &zero, sizeof(zero), 0,
                                    groups * one, 0, NULL, NULL);
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueFillBuffer");
}

static const char *const kd_spgemm_names[2][KD_SPGEMM_BINS] = {
    {NULL, "kd_spgemm_symbolic_t4", "kd_spgemm_symbolic_t8", "kd_spgemm_symbolic_t16",
     "kd_spgemm_symbolic_t32", "kd_spgemm_symbolic_t64", "kd_spgemm_symbolic_group",
     "kd_spgemm_symbolic_global"},
    {NULL, "kd_spgemm_numeric_t4", "kd_spgemm_numeric_t8", "kd_spgemm_numeric_t16",
     "kd_spgemm_numeric_t32", "kd_spgemm_numeric_t64", "kd_spgemm_numeric_group",
     "kd_spgemm_columns_global"}};

/* Launch bin `bin`'s symbolic or numeric kernel(s) over its rows (head_host has the bins of the
 * phase). */
static int kd_spgemm_bin_launch(kd_spgemm_run_t *run, int bin, int numeric, kd_err_t *err)
{
    const kd_csr_device_t *A = run->A, *B = run->B, *C = run->C;
    int64_t count = run->head_host[KD_SPGEMM_HEAD_BIN_ROWS + bin];
    int64_t start = run->head_host[KD_SPGEMM_HEAD_BIN_START + bin];
    const char *name = kd_spgemm_names[numeric][bin];
    if (bin == KD_SPGEMM_BIN_EMPTY || count == 0)
        return KD_OK;
    if (bin == KD_SPGEMM_BIN_GLOBAL) {
        int rc = kd_spgemm_bitmaps(run, count, 0, err);
        size_t groups = run->bitmap_groups < (size_t)count ? run->bitmap_groups : (size_t)count;
        if (rc == KD_OK && !numeric)
            rc = KD_SPGEMM_RUN(run, name, groups, KD_ARG_INT(count), KD_ARG_INT(start),
                               KD_ARG_MEM(run->bin_rows), KD_ARG_MEM(A->indptr),
                               KD_ARG_MEM(A->indices), KD_ARG_MEM(B->indptr),
                               KD_ARG_MEM(B->indices), KD_ARG_MEM(C->indptr),
                               KD_ARG_MEM(run->bitmaps), KD_ARG_INT(run->words));
        if (rc == KD_OK && numeric)
            rc = KD_SPGEMM_RUN(
                run, name, groups, KD_ARG_INT(count), KD_ARG_INT(start), KD_ARG_MEM(run->bin_rows),
                KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices), KD_ARG_MEM(B->indptr),
                KD_ARG_MEM(B->indices), KD_ARG_MEM(C->indptr), KD_ARG_MEM(C->indices),
                KD_ARG_MEM(run->bitmaps), KD_ARG_INT(run->words));
        if (rc == KD_OK && numeric)
            rc = KD_SPGEMM_RUN(run, "kd_spgemm_values_global",
                               (size_t)run->head_host[KD_SPGEMM_HEAD_TASKS], KD_ARG_INT(count),
                               KD_ARG_MEM(run->head), KD_ARG_MEM(run->bin_rows),
                               KD_ARG_MEM(run->task_start), KD_ARG_MEM(A->indptr),
                               KD_ARG_MEM(A->indices), KD_ARG_MEM(A->values), KD_ARG_MEM(B->indptr),
                               KD_ARG_MEM(B->indices), KD_ARG_MEM(B->values), KD_ARG_MEM(C->indptr),
                               KD_ARG_MEM(C->indices), KD_ARG_MEM(C->values));
        return rc;
    }
    size_t rows_per_group =
        bin == KD_SPGEMM_BIN_GROUP ? 1 : run->wg / (size_t)KD_SPGEMM_TEAM_LANES(bin);
    size_t groups = ((size_t)count + rows_per_group - 1) / rows_per_group;
    if (!numeric)
        return KD_SPGEMM_RUN(run, name, groups, KD_ARG_INT(count), KD_ARG_INT(start),
                             KD_ARG_MEM(run->bin_rows), KD_ARG_MEM(A->indptr),
                             KD_ARG_MEM(A->indices), KD_ARG_MEM(B->indptr), KD_ARG_MEM(B->indices),
                             KD_ARG_MEM(C->indptr));
    return KD_SPGEMM_RUN(run, name, groups, KD_ARG_INT(count), KD_ARG_INT(start),
                         KD_ARG_MEM(run->bin_rows), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                         KD_ARG_MEM(A->values), KD_ARG_MEM(B->indptr), KD_ARG_MEM(B->indices),
                         KD_ARG_MEM(B->values), KD_ARG_MEM(C->indptr), KD_ARG_MEM(C->indices),
                         KD_ARG_MEM(C->values));
}

/* Step 2: rows into bins, each row's distinct columns, C's row pointer, nnz and the numeric bins
 * (read back). */
static int kd_spgemm_symbolic(kd_spgemm_run_t *run, const kd_spgemm_limits_t *limits, kd_err_t *err)
{
    const kd_csr_device_t *A = run->A, *B = run->B;
    kd_csr_device_t *C = run->C;
    run->words = (int)((B->cols + 31) / 32);
    int rc = kd_spgemm_alloc(run, (size_t)A->rows * sizeof(cl_int), "C = A B's rows by bin",
                             &run->bin_rows, err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(run, (size_t)A->rows * sizeof(cl_int), "C = A B's row slices",
                             &run->task_start, err);
    if (rc == KD_OK)
        rc = KD_SPGEMM_RUN(run, "kd_spgemm_bin_scatter", run->groups, KD_ARG_INT(A->rows),
                           KD_ARG_MEM(run->row_bin), KD_ARG_MEM(run->group_bins),
                           KD_ARG_MEM(run->bin_rows));
    for (int bin = 0; bin < KD_SPGEMM_BINS && rc == KD_OK; bin++)
        rc = kd_spgemm_bin_launch(run, bin, 0, err);
    if (rc == KD_OK)
        rc = KD_SPGEMM_RUN(run, "kd_spgemm_scan_reduce", run->groups, KD_ARG_INT(A->rows),
                           KD_ARG_MEM(C->indptr), KD_ARG_MEM(run->row_bin), KD_ARG_MEM(run->sums),
                           KD_ARG_MEM(run->group_bins), KD_ARG_MEM(run->tasks));
    if (rc == KD_OK)
        rc = KD_SPGEMM_RUN(run, "kd_spgemm_offsets", 1, KD_ARG_INT(run->groups), KD_ARG_INT(1),
                           KD_ARG_INT(A->rows), KD_ARG_MEM(run->sums), KD_ARG_MEM(run->group_bins),
                           KD_ARG_MEM(run->tasks), KD_ARG_MEM(run->head), KD_ARG_MEM(C->indptr));
    cl_event read = NULL;
    if (rc == KD_OK)
        rc = kd_spgemm_read_head(run, &read, err);
    if (rc == KD_OK) /* runs while the host waits for nnz and allocates C */
        rc = KD_SPGEMM_RUN(run, "kd_spgemm_scan_apply", run->groups, KD_ARG_INT(A->rows),
                           KD_ARG_MEM(C->indptr), KD_ARG_MEM(run->row_bin), KD_ARG_MEM(run->sums),
                           KD_ARG_MEM(run->group_bins), KD_ARG_MEM(run->tasks),
                           KD_ARG_MEM(run->head), KD_ARG_MEM(run->bin_rows),
                           KD_ARG_MEM(run->task_start));
    if (read != NULL) {
        clFlush(kd_ocl_queue(run->ocl));
        cl_int st = clWaitForEvents(1, &read);
        clReleaseEvent(read);
        if (rc == KD_OK && st != CL_SUCCESS)
            rc = kd_ocl_fail(err, st, "reading C = A B's nnz back");
    }
    if (rc != KD_OK)
        return rc;
    int64_t nnz = run->head_host[KD_SPGEMM_HEAD_NNZ];
    int64_t cap = limits != NULL && limits->max_nnz > 0 && limits->max_nnz < KD_CSR_INDEX_MAX
                      ? limits->max_nnz
                      : KD_CSR_INDEX_MAX;
    if (nnz > cap)
        return kd_err_set(err, KD_ETOOLARGE, "C = A B has %lld nonzeros, more than the %lld %s",
                          (long long)nnz, (long long)cap,
                          cap == KD_CSR_INDEX_MAX ? "that int32 indices can address"
                                                  : "allowed (max_nnz)");
    C->nnz = nnz;
    return KD_OK;
}

/* Release the symbolic phase's bitmaps (sized before C's room was known). */
static void kd_spgemm_bitmaps_release(kd_spgemm_run_t *run)
{
    if (run->bitmaps == NULL)
        return;
    clReleaseMemObject(run->bitmaps);
    run->bitmaps = NULL;
    run->live -= run->bitmap_groups * (size_t)run->words * sizeof(cl_uint);
    run->bitmap_groups = 0;
}

/* Step 3: C's arrays and the global bin's bitmaps (checked against the limit first, the bitmaps
 * allocated first and leaving C's room), then C's columns and values. */
static int kd_spgemm_numeric(kd_spgemm_run_t *run, kd_err_t *err)
{
    kd_csr_device_t *C = run->C;
    kd_spgemm_bitmaps_release(run);
    size_t v = kd_dtype_size(run->dtype);
    size_t c_bytes = (size_t)C->nnz * (sizeof(cl_int) + v);
    int64_t global_rows = run->head_host[KD_SPGEMM_HEAD_BIN_ROWS + KD_SPGEMM_BIN_GLOBAL];
    size_t need = c_bytes;
    if (global_rows > 0)
        need += (size_t)run->words * sizeof(cl_uint);
    size_t room = run->limit > run->live ? run->limit - run->live : 0;
    if (need > room)
        return kd_err_set(err, KD_EDEVMEM,
                          "C = A B needs %zu bytes of device memory for C's %lld nonzeros (%zu in "
                          "use), more than max_device_bytes = %zu",
                          need, (long long)C->nnz, run->live, run->limit);
    int rc = kd_spgemm_bitmaps(run, global_rows, c_bytes, err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(run, (size_t)C->nnz * sizeof(cl_int), "C's column indices",
                             &C->indices, err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(run, (size_t)C->nnz * v, "C's values", &C->values, err);
    for (int bin = 0; bin < KD_SPGEMM_BINS && rc == KD_OK; bin++)
        rc = kd_spgemm_bin_launch(run, bin, 1, err);
    return rc;
}

/* Add one launch's device time to its kernel's entry in stats. */
static void kd_spgemm_account_kernel(kd_spgemm_stats_t *stats, const char *name, double ms)
{
    int k = 0;
    while (k < stats->kernels && strcmp(stats->kernel[k].name, name) != 0)
        k++;
    if (k == KD_SPGEMM_KERNELS)
        return;
    if (k == stats->kernels)
        stats->kernel[stats->kernels++] = (kd_spgemm_kernel_time_t){name, 0.0, 0};
    stats->kernel[k].ms += ms;
    stats->kernel[k].launches++;
}

/* Device times from the launches' events (waits for the last kernel): per phase, the first
 * launch's start to the last one's end; per kernel, the sum of its launches. */
static int kd_spgemm_account(kd_spgemm_run_t *run, kd_spgemm_stats_t *stats, kd_err_t *err)
{
    cl_ulong start[KD_SPGEMM_PHASES] = {0, 0}, end[KD_SPGEMM_PHASES] = {0, 0};
    if (run->launches > 0) {
        cl_int st = clWaitForEvents(1, &run->events[run->launches - 1].event);
        if (st != CL_SUCCESS)
            return kd_ocl_fail(err, st, "waiting for C = A B's last kernel");
    }
    for (int i = 0; i < run->launches; i++) {
        const kd_spgemm_launch_event_t *l = &run->events[i];
        cl_ulong t0 = 0, t1 = 0;
        cl_int st =
            clGetEventProfilingInfo(l->event, CL_PROFILING_COMMAND_START, sizeof(t0), &t0, NULL);
        if (st == CL_SUCCESS)
            st = clGetEventProfilingInfo(l->event, CL_PROFILING_COMMAND_END, sizeof(t1), &t1, NULL);
        if (st != CL_SUCCESS)
            return kd_ocl_fail(err, st, "reading C = A B's kernel profiling events");
        if (start[l->phase] == 0 || t0 < start[l->phase])
            start[l->phase] = t0;
        if (t1 > end[l->phase])
            end[l->phase] = t1;
        kd_spgemm_account_kernel(stats, l->name, t1 > t0 ? (double)(t1 - t0) / 1e6 : 0.0);
    }
    double ms[KD_SPGEMM_PHASES];
    for (int p = 0; p < KD_SPGEMM_PHASES; p++)
        ms[p] = end[p] > start[p] ? (double)(end[p] - start[p]) / 1e6 : 0.0;
    stats->symbolic_ms = ms[KD_SPGEMM_PHASE_SYMBOLIC];
    stats->numeric_ms = ms[KD_SPGEMM_PHASE_NUMERIC];
    cl_ulong last_end = end[KD_SPGEMM_PHASE_NUMERIC] > 0 ? end[KD_SPGEMM_PHASE_NUMERIC]
                                                         : end[KD_SPGEMM_PHASE_SYMBOLIC];
    stats->total_ms = last_end > start[KD_SPGEMM_PHASE_SYMBOLIC]
                          ? (double)(last_end - start[KD_SPGEMM_PHASE_SYMBOLIC]) / 1e6
                          : 0.0;
    return KD_OK;
}

/* C with no products: every row empty (also 0 rows). */
static int kd_spgemm_empty(kd_spgemm_run_t *run, kd_err_t *err)
{
    cl_int zero = 0;
    cl_int st = clEnqueueFillBuffer(kd_ocl_queue(run->ocl), run->C->indptr, &zero, sizeof(zero), 0,
                                    ((size_t)run->A->rows + 1) * sizeof(cl_int), 0, NULL, NULL);
    if (st == CL_SUCCESS)
        st = clFinish(kd_ocl_queue(run->ocl));
    return st == CL_SUCCESS ? KD_OK : kd_ocl_fail(err, st, "clEnqueueFillBuffer");
}

int kd_spgemm(kd_ocl_t *ocl, const kd_csr_device_t *A, const kd_csr_device_t *B,
              const kd_spgemm_limits_t *limits, kd_csr_device_t *C, kd_spgemm_stats_t *stats,
              kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && B != NULL && C != NULL);
    memset(C, 0, sizeof(*C));
    if (stats != NULL)
        memset(stats, 0, sizeof(*stats));
    int rc = kd_spgemm_check(ocl, A, B, err);
    if (rc != KD_OK)
        return rc;
    kd_spgemm_run_t run = {0};
    run.ocl = ocl;
    run.A = A;
    run.B = B;
    run.C = C;
    run.dtype = A->dtype;
    run.wg = kd_ocl_work_group_size(ocl);
    run.limit =
        limits != NULL && limits->max_device_bytes > 0 ? limits->max_device_bytes : SIZE_MAX;
    run.timed = stats != NULL;
    snprintf(run.options, sizeof(run.options), "-DKD_WG_SIZE=%zu -DKD_SPGEMM_LANE_SLOTS=%d", run.wg,
             kd_spgemm_lane_slots(ocl, A->dtype));
    C->rows = A->rows;
    C->cols = B->cols;
    C->dtype = A->dtype;

    rc = kd_spgemm_alloc(&run, ((size_t)A->rows + 1) * sizeof(cl_int), "C's row pointers",
                         &C->indptr, err);
    if (rc == KD_OK)
        rc = kd_spgemm_alloc(&run, KD_SPGEMM_HEAD_SLOTS * sizeof(cl_long), "C = A B's sizes",
                             &run.head, err);
    if (rc == KD_OK && A->rows > 0)
        rc = kd_spgemm_count(&run, err);
    if (rc == KD_OK && run.head_host[KD_SPGEMM_HEAD_PRODUCTS] == 0) {
        rc = kd_spgemm_empty(&run, err);
    } else if (rc == KD_OK) {
        rc = kd_spgemm_symbolic(&run, limits, err);
        run.phase = KD_SPGEMM_PHASE_NUMERIC;
        if (rc == KD_OK)
            rc = kd_spgemm_numeric(&run, err);
    }
    if (rc == KD_OK && stats != NULL) {
        rc = kd_spgemm_account(&run, stats, err);
        stats->products = run.head_host[KD_SPGEMM_HEAD_PRODUCTS];
        stats->nnz = C->nnz;
        memcpy(stats->bin_rows, run.symbolic_bins, sizeof(stats->bin_rows));
        if (C->nnz > 0)
            memcpy(stats->numeric_bin_rows, &run.head_host[KD_SPGEMM_HEAD_BIN_ROWS],
                   sizeof(stats->numeric_bin_rows));
        stats->peak_device_bytes = run.peak;
    }
    kd_spgemm_free_scratch(&run);
    if (rc != KD_OK) {
        kd_csr_device_release(C);
        return rc;
    }
    C->device_bytes = ((size_t)C->rows + 1) * sizeof(cl_int) +
                      (size_t)C->nnz * (sizeof(cl_int) + kd_dtype_size(C->dtype));
    return KD_OK;
}
