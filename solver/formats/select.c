/*
 * Format selection (see select.h). What it costs, for a matrix of n rows and nnz entries, and how
 * that is kept near the price of the transfer plus a few dozen SpMVs:
 *
 *  - Host analysis, O(n): row statistics, each format's memory plan and host metadata (row blocks,
 *    permutations, offsets: the formats' prepare ops). For a large matrix it runs on a second
 *    thread while the CSR arrays cross the bus, so it costs nothing the transfer does not already
 *    cost. It makes no OpenCL call. The format-independent scan of the values (non-finite
 *    entries, the inverse diagonal for Jacobi PCG: matrix_scan.c) runs on a third thread in the
 *    same window, once per upload; the matrix kept adopts it. tiled's prepare is the one O(nnz)
 *    analysis (its tiles are chosen and filled on the host): it runs in the same window, and its
 *    arrays (about nnz * (value + 1) bytes) are copied when it is built, so it costs at most one
 *    more transfer of a matrix smaller than the CSR arrays. Its screen op (a sampled analysis of
 *    256 tile rows, before anything else) drops it unless its tiles would save 45% of CSR's
 *    bytes: its kernel is latency-bound, and lost to csr_scalar by 2.2x at 20% fewer bytes on
 *    the H100 (solver/formats/tiled.c). Where it passes, it is measured like the others.
 *  - Screening, before anything is allocated: formats whose plan exceeds KD_SELECT_MEMORY_FACTOR
 *    times CSR's memory are dropped (padding); formats measurements on this project's benchmark
 *    set showed to be dominated are dropped with the reason (bench/NOTES.md): COO and HYB
 *    (csr_adaptive balances rows as well, with fewer bytes and one launch; where rows pad little
 *    HYB is ELLPACK-R with an empty COO part), ELL beside ELLPACK-R, SELL-C-sigma where
 *    ELLPACK-R pads little, and on GPUs (where a lone long row stalls its warp and short rows waste
 * a vector's lanes; a CPU thread minds neither) one work-item per row on a row of thousands and
 *    csr_vector on short rows numerous enough to fill the device.
 *  - Launch-bound matrices (all traffic in under KD_SELECT_LAUNCH_BOUND_US at the device's copy
 *    bandwidth): every format runs in the launch latency and their timings differ by less than
 *    their noise, so the statistics choose; the choice is timed for matrix.info, nothing else is.
 *  - Measuring: the formats that share the CSR arrays first (building them allocates nothing;
 *    NVIDIA's OpenCL takes tens of milliseconds to allocate a few hundred megabytes), the
 *    heuristic's choice first within each group. Each is built on the device from the shared CSR
 *    arrays and run once (timed: the warm-up); a
 *    candidate more than KD_SELECT_CUTOFF times slower than the best stops there; otherwise
 *    KD_SELECT_RUNS more runs are queued and waited for once, and the minimum counts (noise only
 *    adds time). Once the best candidate reaches KD_SELECT_ROOFLINE of the copy bandwidth by the
 *    minimal-bytes model, no other format moving as many bytes can be more than a few percent
 *    faster, and the rest are not built, except those whose plan is smaller than CSR's (tiled:
 *    their own roofline is lower by that ratio) (only for matrices over twice the device's global
 * memory cache, which could otherwise run from cache faster than memory's bandwidth).
 */
#include "solver/formats/select.h"
#include "common/clock.h"
#include "common/log.h"
#include "solver/formats/format.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KD_SELECT_RUNS 3
#define KD_SELECT_RUNS_SHORT 7
#define KD_SELECT_SHORT_MS 0.05
#define KD_SELECT_CUTOFF 3.0
#define KD_SELECT_ROOFLINE 0.9
#define KD_SELECT_LAUNCH_BOUND_US 5.0
/* One work-item walking more entries than this in a row is far slower than spreading the row. */
#define KD_SELECT_SERIAL_MAX 4096
#define KD_SELECT_SLACK_BYTES ((size_t)64 << 10)
/* Matrices with at least this many rows are analysed on a second thread during the upload. */
#define KD_SELECT_THREAD_ROWS 65536

int kd_select_mode_parse(const char *name, kd_select_mode_t *out)
{
    if (name == NULL || name[0] == '\0' || strcmp(name, "measure") == 0) {
        *out = KD_SELECT_MEASURE;
        return 0;
    }
    if (strcmp(name, "heuristic") == 0) {
        *out = KD_SELECT_HEURISTIC;
        return 0;
    }
    return -1;
}

/* csr_vector's work-items per row, as solver/formats/csr_vector.c chooses them. */
static int64_t kd_select_vector_lanes(const kd_csr_stats_t *st)
{
    int64_t t = 2;
    while (t < 64 && (double)t < st->mean_row)
        t *= 2;
    return t;
}

static double kd_select_min_bytes(const kd_csr_t *csr)
{
    double v = (double)kd_dtype_size(csr->dtype);
    return (double)csr->nnz * (v + 4.0) + ((double)csr->rows + 1.0) * 4.0 + (double)csr->cols * v +
           (double)csr->rows * v;
}

int kd_select_vector_bound(const kd_csr_t *csr)
{
    const double v = (double)kd_dtype_size(csr->dtype);
    return ((double)csr->rows + (double)csr->cols) * v >
           (double)csr->nnz * (v + 4.0) + ((double)csr->rows + 1.0) * 4.0;
}

int kd_select_launch_bound(kd_ocl_t *ocl, const kd_csr_t *csr)
{
    double bw = kd_ocl_copy_bandwidth(ocl);
    return bw > 0.0 && kd_select_min_bytes(csr) / bw * 1e6 < KD_SELECT_LAUNCH_BOUND_US;
}

kd_format_t kd_select_heuristic(const kd_csr_t *csr, const kd_csr_stats_t *st, int gpu,
                                int launch_bound, const char **reason)
{
    const char *why;
    kd_format_t f;
    double mean = st->mean_row;
    int64_t vector_steps = st->max_row / kd_select_vector_lanes(st);
    if (csr->rows == 0 || csr->nnz == 0) {
        f = KD_FMT_CSR_SCALAR;
        why = "no entries";
    } else if (mean < 1.0) {
        f = KD_FMT_CSR_SCALAR;
        why = "fewer entries than rows: a work-item a row, most only write their zero";
    } else if (!gpu) {
        f = KD_FMT_CSR_SCALAR;
        why = "a CPU device: a thread walks whole rows, the kernels with barriers cost more there";
    } else if (launch_bound) {
        if (vector_steps > 64) {
            f = KD_FMT_CSR_ADAPTIVE;
            why = "launch-bound, with rows too long for a few work-items: row blocks";
        } else {
            f = KD_FMT_CSR_VECTOR;
            why = "launch-bound: several work-items per row shorten the chain of loads";
        }
    } else if ((double)st->max_row > 64.0 * mean && st->max_row > 1024) {
        f = KD_FMT_CSR_ADAPTIVE;
        why = "a few rows far longer than the mean: row blocks spread them over work-groups";
    } else if (mean >= 24.0) {
        f = KD_FMT_CSR_VECTOR;
        why = "long rows on average: several work-items per row";
    } else if (st->stddev_row <= 0.5 * mean && (double)st->max_row <= 2.0 * mean + 2.0) {
        f = KD_FMT_ELLPACK_R;
        why = "short rows of similar length: column-major padded arrays, coalesced";
    } else {
        f = KD_FMT_CSR_ADAPTIVE;
        why = "irregular row lengths: row blocks";
    }
    if (reason != NULL)
        *reason = why;
    return f;
}

/* ---- screening ---------------------------------------------------------------------------- */

/* Work-items that share one row in format f, or 0 for formats that spread long rows over
 * work-groups (csr_adaptive, hyb, coo). */
static int64_t kd_select_lanes_per_row(kd_format_t f, const kd_csr_stats_t *st)
{
    switch (f) {
    case KD_FMT_CSR_SCALAR:
    case KD_FMT_ELL:
    case KD_FMT_ELLPACK_R:
    case KD_FMT_SELL_C_SIGMA:
        return 1;
    case KD_FMT_CSR_VECTOR:
        return kd_select_vector_lanes(st);
    default:
        return 0;
    }
}

typedef struct kd_select_analysis {
    const kd_ocl_t *ocl;
    kd_format_source_t *src;
    kd_select_result_t *res;
    int launch_bound;
    kd_format_t first; /* the heuristic's choice */
    const char *first_reason;
    int rc;
} kd_select_analysis_t;

static kd_select_candidate_t *kd_select_find(kd_select_result_t *res, kd_format_t f)
{
    for (int i = 0; i < res->ncandidates; i++)
        if (res->candidates[i].format == f)
            return &res->candidates[i];
    return NULL;
}

/* The memory screen of one format: its plan (preparing its metadata) against CSR's. */
static void kd_select_memory_screen(const kd_ocl_t *ocl, kd_format_source_t *src,
                                    kd_select_candidate_t *c)
{
    const kd_format_ops_t *ops = kd_format_ops(c->format);
    size_t csr_bytes = kd_format_csr_bytes(src->csr);
    double limit = KD_SELECT_MEMORY_FACTOR * (double)csr_bytes + (double)KD_SELECT_SLACK_BYTES;
    if (ops->screen != NULL && ops->screen(ocl, src, c->dropped, sizeof(c->dropped)))
        return;
    size_t plan = ops->plan_bytes(ocl, src);
    c->plan_bytes = plan == SIZE_MAX ? 0 : plan;
    if (plan == SIZE_MAX)
        snprintf(c->dropped, sizeof(c->dropped), "would not fit in memory");
    else if ((double)plan > limit)
        snprintf(c->dropped, sizeof(c->dropped),
                 "padding: %.3g MB, %.1fx the CSR arrays (limit %gx)", (double)plan / 1e6,
                 (double)plan / (double)(csr_bytes > 0 ? csr_bytes : 1), KD_SELECT_MEMORY_FACTOR);
}

/*
 * Statistics, screening and the kept formats' host metadata (see the top of this file). No
 * OpenCL calls: runs on a second thread during the upload of a large matrix.
 */
static void *kd_select_analyse(void *arg)
{
    kd_select_analysis_t *a = arg;
    kd_format_source_t *src = a->src;
    const kd_csr_t *csr = src->csr;
    kd_select_result_t *res = a->res;
    const kd_csr_stats_t *st = &src->stats;
    double t0 = kd_clock_ms();
    kd_csr_row_stats(csr, &src->stats);
    kd_reorder_measure(csr, NULL, &res->before); /* matrix.info's bandwidth, beside the transfer */
    a->first = kd_select_heuristic(csr, st, kd_ocl_desc(a->ocl)->is_gpu, a->launch_bound,
                                   &a->first_reason);

    res->ncandidates = 0;
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        if (!kd_format_available((kd_format_t)f))
            continue;
        kd_select_candidate_t *c = &res->candidates[res->ncandidates++];
        memset(c, 0, sizeof(*c));
        c->format = (kd_format_t)f;
    }
    /* ELL's plans are O(1): screen them first, the others' dominance depends on them */
    kd_select_candidate_t *ell = kd_select_find(res, KD_FMT_ELL);
    kd_select_candidate_t *ellr = kd_select_find(res, KD_FMT_ELLPACK_R);
    if (ell != NULL)
        kd_select_memory_screen(a->ocl, src, ell);
    if (ellr != NULL)
        kd_select_memory_screen(a->ocl, src, ellr);
    int ell_fits = ellr != NULL && ellr->dropped[0] == '\0';
    int fills = (double)csr->rows >= 8.0 * (double)kd_ocl_desc(a->ocl)->compute_units *
                                         (double)kd_ocl_work_group_size(a->ocl);
    int gpu = kd_ocl_desc(a->ocl)->is_gpu; /* the two rules below are about GPU threads */

    for (int i = 0; i < res->ncandidates; i++) {
        kd_select_candidate_t *c = &res->candidates[i];
        kd_format_t f = c->format;
        int64_t lanes = kd_select_lanes_per_row(f, st);
        if (c->dropped[0] != '\0')
            continue;
        if (a->launch_bound && f != a->first) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "not timed: launch-bound (%.0f KB of traffic), the statistics choose",
                     kd_select_min_bytes(csr) / 1e3);
        } else if (f == a->first) {
            if (f != KD_FMT_ELL && f != KD_FMT_ELLPACK_R)
                kd_select_memory_screen(a->ocl, src, c);
        } else if (gpu && lanes > 0 && st->max_row / lanes > KD_SELECT_SERIAL_MAX) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "dominated: a row of %lld entries is %lld serial steps for one work-item",
                     (long long)st->max_row, (long long)(st->max_row / lanes));
        } else if (f == KD_FMT_COO) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "dominated: csr_adaptive balances rows too, with 4 fewer bytes an entry");
        } else if (f == KD_FMT_ELL && ell_fits) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "dominated by ellpack_r: same layout, rows end without a sentinel load");
        } else if ((f == KD_FMT_SELL_C_SIGMA || f == KD_FMT_HYB) && ell_fits) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "dominated: rows pad little, ellpack_r needs no sorting or splitting");
        } else if (f == KD_FMT_HYB) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "dominated: csr_adaptive spreads long rows with fewer bytes, one launch");
        } else if (gpu && f == KD_FMT_CSR_VECTOR && fills && st->mean_row < 8.0) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "dominated: short rows (mean %.1f) that fill the device one per work-item",
                     st->mean_row);
        } else if (f != KD_FMT_ELL && f != KD_FMT_ELLPACK_R) {
            kd_select_memory_screen(a->ocl, src, c);
        }
    }
    kd_select_candidate_t *first = kd_select_find(res, a->first);
    if (a->launch_bound && first != NULL && first->dropped[0] != '\0') {
        /* the statistics' choice pads too much: row blocks never pad */
        a->first = KD_FMT_CSR_ADAPTIVE;
        first = kd_select_find(res, a->first);
        first->dropped[0] = '\0';
        kd_select_memory_screen(a->ocl, src, first);
    }
    /* host metadata of every format still in the race, while the bus is busy */
    for (int i = 0; i < res->ncandidates && a->rc == KD_OK; i++) {
        const kd_format_ops_t *ops = kd_format_ops(res->candidates[i].format);
        if (res->candidates[i].dropped[0] == '\0' && ops->prepare != NULL &&
            src->prepared[res->candidates[i].format] == NULL)
            a->rc = ops->prepare(a->ocl, src);
    }
    res->plan_ms = kd_clock_ms() - t0;
    return NULL;
}

/* ---- timing ------------------------------------------------------------------------------- */

/*
 * Time one candidate (see the top of this file): *ms is its first run's time when that run loses
 * by KD_SELECT_CUTOFF against best_ms (> 0), else the fastest of the further runs.
 */
/* m's SpMV, or with inner its format's SpMV alone (a reordered matrix without its permutations:
 * what each iteration of a solve runs). */
static int kd_select_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, int inner, kd_vec_t *x, kd_vec_t *y,
                          kd_err_t *err)
{
    return inner ? kd_matrix_spmv_inner(ocl, m, 1.0, x, 0.0, y, err)
                 : kd_matrix_spmv(ocl, m, 1.0, x, 0.0, y, err);
}

static int kd_select_time_spmv(kd_ocl_t *ocl, const kd_matrix_t *m, int inner, kd_vec_t *x,
                               kd_vec_t *y, double best_ms, int launch_bound, int *runs, double *ms,
                               kd_err_t *err)
{
    cl_event first[1 + KD_SELECT_RUNS_SHORT], last[1 + KD_SELECT_RUNS_SHORT];
    int n = 0, rc = KD_OK;
    *ms = 0.0;
    if (m->rows == 0)
        return KD_OK;
    kd_ocl_timing_begin(ocl);
    rc = kd_select_spmv(ocl, m, inner, x, y, err);
    kd_ocl_timing_take(ocl, &first[0], &last[0]);
    int rc2 = kd_ocl_event_span_ms(first[0], last[0], ms, err);
    rc = rc != KD_OK ? rc : rc2;
    (*runs)++;
    if (rc != KD_OK || (best_ms > 0.0 && *ms > KD_SELECT_CUTOFF * best_ms))
        return rc;
    /* short runs are noisy and cheap: more of them; a launch-bound matrix's one candidate is timed
     * only for matrix.info: two more */
    int want = launch_bound ? 2 : *ms < KD_SELECT_SHORT_MS ? KD_SELECT_RUNS_SHORT : KD_SELECT_RUNS;
    for (n = 0; n < want && rc == KD_OK; n++) {
        kd_ocl_timing_begin(ocl);
        rc = kd_select_spmv(ocl, m, inner, x, y, err);
        kd_ocl_timing_take(ocl, &first[n], &last[n]);
        (*runs)++;
    }
    double fastest = 0.0;
    for (int i = 0; i < n; i++) {
        double t = 0.0;
        rc2 = kd_ocl_event_span_ms(first[i], last[i], &t, err); /* releases both */
        rc = rc != KD_OK ? rc : rc2;
        if (i == 0 || t < fastest)
            fastest = t;
    }
    if (rc == KD_OK && n > 0)
        *ms = fastest;
    return rc;
}

static int kd_select_time(kd_ocl_t *ocl, const kd_matrix_t *m, kd_vec_t *x, kd_vec_t *y,
                          double best_ms, int launch_bound, int *runs, double *ms, kd_err_t *err)
{
    return kd_select_time_spmv(ocl, m, 0, x, y, best_ms, launch_bound, runs, ms, err);
}

/* ---- the three modes ---------------------------------------------------------------------- */

static int kd_select_forced(kd_ocl_t *ocl, kd_format_source_t *src, const char *name,
                            kd_matrix_t **out, kd_select_result_t *res, kd_err_t *err)
{
    kd_format_t f;
    if (kd_format_parse(name, &f) != 0)
        return kd_err_set(err, KD_EBADREQ, "format '%s' is not a known format", name);
    if (!kd_format_available(f))
        return kd_err_set(err, KD_EUNSUPPORTED, "format '%s' is not available in this build", name);
    int rc = kd_matrix_upload_source(ocl, src, f, out, err);
    if (rc != KD_OK)
        return rc;
    res->format = f;
    res->ncandidates = 1;
    res->candidates[0].format = f;
    snprintf(res->candidates[0].dropped, sizeof(res->candidates[0].dropped),
             "forced by the request");
    return KD_OK;
}

static int kd_select_heuristic_upload(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t **out,
                                      kd_select_result_t *res, const char *note, kd_err_t *err)
{
    const char *why = NULL;
    kd_format_t f = kd_select_heuristic(src->csr, &src->stats, kd_ocl_desc(ocl)->is_gpu,
                                        kd_select_launch_bound(ocl, src->csr), &why);
    /* a choice that would pad too much falls back to CSR adaptive, which never pads */
    kd_select_candidate_t probe = {.format = f};
    kd_select_memory_screen(ocl, src, &probe);
    if (probe.dropped[0] != '\0') {
        f = KD_FMT_CSR_ADAPTIVE;
        why = "row blocks (the statistics' choice would pad too much)";
    }
    int rc = kd_matrix_upload_source(ocl, src, f, out, err);
    if (rc != KD_OK)
        return rc;
    res->format = f;
    res->ncandidates = 1;
    res->candidates[0].format = f;
    snprintf(res->candidates[0].dropped, sizeof(res->candidates[0].dropped), "heuristic: %s%s",
             note, why);
    return KD_OK;
}

static int kd_select_measure(kd_ocl_t *ocl, kd_format_source_t *src, kd_matrix_t **out,
                             kd_select_result_t *res, kd_err_t *err)
{
    const kd_csr_t *csr = src->csr;
    kd_vec_t x = {0}, y = {0};
    kd_matrix_t *best = NULL;
    double best_ms = 0.0;
    int rc;
    double copy_bw = kd_ocl_copy_bandwidth(ocl);
    kd_select_analysis_t an = {.ocl = ocl, .src = src, .res = res, .rc = KD_OK};
    an.launch_bound = kd_select_launch_bound(ocl, csr);

    /* analysis beside the upload for a large matrix; in line for a small one */
    pthread_t thread;
    int threaded = csr->rows >= KD_SELECT_THREAD_ROWS &&
                   pthread_create(&thread, NULL, kd_select_analyse, &an) == 0;
    if (!threaded)
        kd_select_analyse(&an);
    rc = kd_format_source_device(ocl, src, err);
    if (threaded)
        pthread_join(thread, NULL);
    if (rc != KD_OK)
        goto fail;
    if (an.rc != KD_OK) {
        rc = kd_err_set(err, an.rc, "out of host memory analysing the matrix");
        goto fail;
    }
    res->transfer_ms = src->upload_ms;
    if ((rc = kd_vec_alloc(ocl, csr->cols, csr->dtype, &x, err)) != KD_OK ||
        (rc = kd_vec_alloc(ocl, csr->rows, csr->dtype, &y, err)) != KD_OK ||
        (rc = kd_vec_fill(ocl, &x, 1.0, err)) != KD_OK)
        goto fail;

    double roofline_ms = copy_bw > 0.0 ? kd_select_min_bytes(csr) / copy_bw * 1e3 : 0.0;
    cl_ulong cache = 0;
    if (clGetDeviceInfo(kd_ocl_desc(ocl)->device_id, CL_DEVICE_GLOBAL_MEM_CACHE_SIZE, sizeof(cache),
                        &cache, NULL) != CL_SUCCESS ||
        kd_select_min_bytes(csr) < 2.0 * (double)cache)
        roofline_ms = 0.0; /* cache-resident, or unknown: no roofline shortcut */
    /* the order: formats sharing the CSR arrays, then the others; the heuristic's choice first in
     * its group */
    kd_select_candidate_t *order[KD_FMT_COUNT];
    int norder = 0;
    for (int group = 0; group < 2; group++) {
        for (int k = -1; k < res->ncandidates; k++) {
            kd_select_candidate_t *c = k < 0 ? kd_select_find(res, an.first) : &res->candidates[k];
            if (c == NULL || (k >= 0 && c->format == an.first))
                continue;
            int shares = c->format == KD_FMT_CSR_SCALAR || c->format == KD_FMT_CSR_VECTOR ||
                         c->format == KD_FMT_CSR_ADAPTIVE;
            if (shares == (group == 0))
                order[norder++] = c;
        }
    }
    for (int k = 0; k < norder; k++) {
        kd_select_candidate_t *c = order[k];
        if (c->dropped[0] != '\0')
            continue;
        /* a format that moves fewer bytes than CSR (tiled) has a lower roofline of its own */
        double csr_bytes = (double)kd_format_csr_bytes(src->csr);
        double fewer = c->plan_bytes > 0 && csr_bytes > 0.0
                           ? fmin(1.0, (double)c->plan_bytes / csr_bytes)
                           : 1.0;
        if (best != NULL && roofline_ms > 0.0 &&
            fewer * roofline_ms >= KD_SELECT_ROOFLINE * best_ms) {
            snprintf(c->dropped, sizeof(c->dropped),
                     "not timed: %s already runs at %.0f%% of the copy bandwidth",
                     kd_format_name(best->format), 100.0 * roofline_ms / best_ms);
            continue;
        }
        kd_matrix_t *m = NULL;
        double t_build = kd_clock_ms();
        rc = kd_matrix_upload_source(ocl, src, c->format, &m, err);
        if (rc == KD_OK)
            rc = kd_ocl_finish(ocl, err);
        double t_measure = kd_clock_ms();
        res->build_ms += t_measure - t_build;
        if (rc == KD_OK)
            rc = kd_select_time(ocl, m, &x, &y, best != NULL ? best_ms : 0.0, an.launch_bound,
                                &res->spmv_runs, &c->time_ms, err);
        res->measure_ms += kd_clock_ms() - t_measure;
        if (rc == KD_EDEVMEM) {
            snprintf(c->dropped, sizeof(c->dropped), "no device memory: %.70s", err->message);
            kd_matrix_free(m);
            rc = KD_OK;
            continue;
        }
        if (rc != KD_OK) {
            kd_matrix_free(m);
            goto fail;
        }
        if (best == NULL || c->time_ms < best_ms) {
            kd_matrix_free(best);
            best = m;
            best_ms = c->time_ms;
        } else {
            kd_matrix_free(m);
        }
    }
    if (best == NULL) {
        rc = kd_err_set(err, KD_EDEVMEM, "no format of this matrix fits in device memory");
        goto fail;
    }
    kd_vec_release(&x);
    kd_vec_release(&y);
    res->format = best->format;
    *out = best;
    return KD_OK;
fail:
    kd_matrix_free(best);
    kd_vec_release(&x);
    kd_vec_release(&y);
    return rc;
}

typedef struct kd_select_scan {
    kd_format_source_t *src;
    kd_err_t *err;
} kd_select_scan_t;

static void *kd_select_scan(void *arg)
{
    kd_select_scan_t *s = arg;
    (void)kd_format_source_scan(s->src, s->err); /* on failure adopting scans again, and reports */
    return NULL;
}

int kd_select_upload(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced_format,
                     kd_select_mode_t mode, kd_matrix_t **out, kd_select_result_t *result,
                     kd_err_t *err)
{
    assert(ocl != NULL && csr != NULL && out != NULL && result != NULL);
    double t0 = kd_clock_ms();
    kd_format_source_t src;
    kd_csr_stats_t stats = {0};
    *out = NULL;
    memset(result, 0, sizeof(*result));
    int rc = kd_ocl_check_dtype(ocl, csr->dtype, err);
    if (rc != KD_OK)
        return rc;
    /* csr is canonical: the builders check what comes from the wire, a reload checks its file,
     * and a product is checked by kd_csr_validate before it is admitted
     * (server/handlers/multiply.c) */
    rc = kd_csr_check_shape(csr->rows, csr->cols, csr->nnz, NULL, err);
    if (rc != KD_OK)
        return rc;
    int forced = forced_format != NULL && forced_format[0] != '\0';
    /* Timing puts x and y on the device beside the matrix. Where they outweigh its arrays (about
     * one entry a row or fewer) the vectors' traffic is the SpMV whatever the format, and they
     * are memory the upload did not carry (a put declares rows and cols, it need not send
     * them): the statistics choose. */
    const int vector_bound = !forced && mode == KD_SELECT_MEASURE && kd_select_vector_bound(csr);
    if (vector_bound)
        mode = KD_SELECT_HEURISTIC;
    if (forced || mode == KD_SELECT_HEURISTIC) {
        kd_csr_row_stats(csr, &stats);
        result->plan_ms = kd_clock_ms() - t0;
    }
    kd_format_source_init_stats(&src, csr, &stats); /* measure computes them beside the upload */
    /* The format-independent scan (one pass over the values) runs beside the transfer too, once
     * however many formats are built; the matrix kept adopts it at the end. */
    kd_err_t scan_err;
    kd_err_clear(&scan_err);
    kd_select_scan_t scan = {.src = &src, .err = &scan_err};
    pthread_t scan_thread;
    int scan_threaded = csr->rows >= KD_SELECT_THREAD_ROWS &&
                        pthread_create(&scan_thread, NULL, kd_select_scan, &scan) == 0;
    if (forced)
        rc = kd_select_forced(ocl, &src, forced_format, out, result, err);
    else if (mode == KD_SELECT_HEURISTIC) {
        rc = kd_select_heuristic_upload(ocl, &src, out, result,
                                        vector_bound ? "x and y outweigh the matrix, " : "", err);
    } else {
        rc = kd_select_measure(ocl, &src, out, result, err);
        if (rc == KD_EDEVMEM) {
            /* Timing needs room beside the matrix (vectors, a second format at once); when the
             * device has none, choose from the statistics rather than refuse the matrix. */
            kd_csr_row_stats(csr, &src.stats);
            memset(result, 0, sizeof(*result));
            kd_err_clear(err);
            rc = kd_select_heuristic_upload(ocl, &src, out, result, "", err);
        }
    }
    if (scan_threaded)
        pthread_join(scan_thread, NULL);
    if (rc == KD_OK && (rc = kd_matrix_adopt_scan(&src, *out, err)) != KD_OK) {
        kd_matrix_free(*out);
        *out = NULL;
    }
    result->transfer_ms = src.upload_ms;
    result->stats = src.stats;
    if (result->before.bandwidth == 0 && result->before.profile == 0) /* not analysed: here */
        kd_reorder_measure(csr, NULL, &result->before);
    result->after = result->before;
    if (rc == KD_OK)
        result->stats.nonfinite = (*out)->scan.non_finite_count;
    kd_format_source_close(&src);
    result->total_ms = kd_clock_ms() - t0;
    if (rc == KD_OK && !forced && mode == KD_SELECT_MEASURE) {
        char line[640];
        size_t w = 0;
        for (int i = 0; i < result->ncandidates && w < sizeof(line); i++) {
            const kd_select_candidate_t *c = &result->candidates[i];
            int n = c->dropped[0] != '\0' ? snprintf(line + w, sizeof(line) - w, " %s=(%s)",
                                                     kd_format_name(c->format), c->dropped)
                                          : snprintf(line + w, sizeof(line) - w, " %s=%.4fms",
                                                     kd_format_name(c->format), c->time_ms);
            w += n > 0 ? (size_t)n : 0;
        }
        KD_DEBUG("select", "chose %s in %.2fms (transfer %.2fms, analysis %.2fms, %d runs):%s",
                 kd_format_name(result->format), result->total_ms, result->transfer_ms,
                 result->plan_ms, result->spmv_runs, line);
    }
    return rc;
}

/* ---- reordering --------------------------------------------------------------------------- */

/*
 * What reordering costs the selection (auto), and when it is kept. Matrices under
 * KD_SELECT_REORDER_MIN_ROWS rows or launch-bound ones are not considered: there the launches,
 * not the gathers of x, set the time. For the others a thread beside the whole selection of A
 * (transfer, analysis, timing) first predicts what an ordering by breadth-first search would do
 * to the gathers of x (kd_reorder_gathers_predicted: a search over the first 32k rows, O(those
 * rows' entries, at most 1M of them: 5-40 ms), and RCM is computed only when the prediction is
 * at most KD_SELECT_REORDER_PROMISE of the same rows' measure in their own order: a mesh numbered
 * at random (0.15 of it on the scrambled Laplacians), not a mesh or band already in order (1.0),
 * an expander such as a uniformly random matrix (0.93), a graph with hubs (R-MAT, 0.65) or the
 * circuit-like matrix (0.74), where RCM's seconds were measured to buy a client SpMV nothing and
 * a solve's SpMV 5% (R-MAT) to 24% (circuit): `reorder: "rcm"` asks for it there.
 * Otherwise RCM runs (O(nnz): about 0.5 s for a 1M-row 2-D Laplacian, 2.5 s for 16M entries of an
 * R-MAT graph on the H100's host core, docs/BENCHMARKS.md) and, when it halves the bandwidth or
 * brings x's gathers to KD_SELECT_REORDER_GATHERS of A's, P A P^T is built on the host, crosses
 * the bus a second time, and A's winning format is built from it and timed twice: as a client's
 * SpMV sees it (gather, the format's SpMV, scatter) and as a solve's iterations do (the format's
 * SpMV alone: a solve permutes b in and x out once). It is kept when the first beats A's winner
 * by KD_SELECT_REORDER_MARGIN, or the second by KD_SELECT_REORDER_SOLVE_GAIN: a client's SpMV
 * request moves x and y over the network, which costs far more than the two permutation passes
 * on the device, while a solve's iterations are device time alone. The selection's time then
 * includes the ordering, beyond the budget of 50 SpMVs: the reason says after how many SpMVs or
 * solve iterations the extra time pays back (about 20 solves of 1000 iterations on the 1M-row
 * matrices measured). `reorder: "none"` skips all of it; `"rcm"` forces it.
 */
#define KD_SELECT_REORDER_MIN_ROWS KD_SELECT_THREAD_ROWS
#define KD_SELECT_REORDER_SAMPLE 32768    /* rows the prediction orders */
#define KD_SELECT_REORDER_PROMISE 0.5     /* RCM is computed when predicted to bring this much */
#define KD_SELECT_REORDER_GAIN 2.0        /* timed when the bandwidth drops this many times, */
#define KD_SELECT_REORDER_GATHERS 0.75    /* or the gathers' sectors per nonzero to this fraction */
#define KD_SELECT_REORDER_MARGIN 0.05     /* kept when the SpMV is this much faster, */
#define KD_SELECT_REORDER_SOLVE_GAIN 0.15 /* or a solve's SpMV this much faster */

typedef struct kd_select_order {
    const kd_csr_t *csr;
    int32_t *perm;
    kd_reorder_shape_t after;             /* of P A P^T (A's is the selection's result->before) */
    double gathers_before, gathers_after; /* kd_reorder_gathers of A and of P A P^T */
    double predicted, sampled;            /* kd_reorder_gathers_predicted, and its *original */
    int skipped;                          /* the prediction promised too little: no RCM */
    double ms;
    int rc;
    kd_err_t err;
} kd_select_order_t;

static void *kd_select_order(void *arg)
{
    kd_select_order_t *o = arg;
    double t0 = kd_clock_ms();
    o->predicted = kd_reorder_gathers_predicted(o->csr, KD_SELECT_REORDER_SAMPLE, &o->sampled);
    if (o->predicted >= 0.0 && o->predicted > KD_SELECT_REORDER_PROMISE * o->sampled) {
        o->skipped = 1;
        o->ms = kd_clock_ms() - t0;
        return NULL;
    }
    o->rc = kd_reorder_rcm(o->csr, &o->perm, &o->err);
    int32_t *iperm = o->rc == KD_OK ? malloc((size_t)o->csr->rows * sizeof(int32_t) + 1) : NULL;
    if (iperm != NULL) {
        kd_reorder_invert(o->perm, o->csr->rows, iperm);
        kd_reorder_measure(o->csr, iperm, &o->after);
        o->gathers_before = kd_reorder_gathers(o->csr, NULL, NULL);
        o->gathers_after = kd_reorder_gathers(o->csr, o->perm, iperm);
        free(iperm);
    } else if (o->rc == KD_OK) {
        o->rc = kd_err_set(&o->err, KD_ENOMEM, "out of host memory for a permutation");
    }
    o->ms = kd_clock_ms() - t0;
    return NULL;
}

/* Build `format` on P csr P^T, keep perm in it and time it; *m owns it on success. */
static int kd_select_reordered_candidate(kd_ocl_t *ocl, const kd_csr_t *csr, kd_format_t format,
                                         kd_select_order_t *o, kd_matrix_t **m, double *ms,
                                         double *inner_ms, kd_select_result_t *res, kd_err_t *err)
{
    kd_csr_t *permuted = NULL;
    kd_vec_t x = {0}, y = {0};
    *m = NULL;
    int rc = kd_reorder_apply(csr, o->perm, &permuted, err);
    if (rc == KD_OK)
        rc = kd_matrix_upload(ocl, permuted, format, m, err);
    kd_csr_free(permuted);
    if (rc == KD_OK) {
        rc = kd_matrix_attach_order(ocl, *m, KD_REORDER_RCM, o->perm, err);
        o->perm = NULL;
    }
    if (rc == KD_OK && (rc = kd_vec_alloc(ocl, csr->cols, csr->dtype, &x, err)) == KD_OK &&
        (rc = kd_vec_alloc(ocl, csr->rows, csr->dtype, &y, err)) == KD_OK &&
        (rc = kd_vec_fill(ocl, &x, 1.0, err)) == KD_OK &&
        (rc = kd_select_time(ocl, *m, &x, &y, 0.0, 0, &res->spmv_runs, ms, err)) == KD_OK)
        rc = kd_select_time_spmv(ocl, *m, 1, &x, &y, 0.0, 0, &res->spmv_runs, inner_ms, err);
    kd_vec_release(&x);
    kd_vec_release(&y);
    if (rc != KD_OK) {
        kd_matrix_free(*m);
        *m = NULL;
    }
    return rc;
}

/* auto: A's selection with RCM beside it, then the reordered winner against A's. */
static int kd_select_auto(kd_ocl_t *ocl, const kd_csr_t *csr, kd_matrix_t **out,
                          kd_select_result_t *result, kd_err_t *err)
{
    double t0 = kd_clock_ms();
    kd_select_order_t o = {.csr = csr, .rc = KD_OK};
    kd_err_clear(&o.err);
    pthread_t thread;
    int threaded = pthread_create(&thread, NULL, kd_select_order, &o) == 0;
    int rc = kd_select_upload(ocl, csr, NULL, KD_SELECT_MEASURE, out, result, err);
    if (threaded)
        pthread_join(thread, NULL);
    else
        kd_select_order(&o);
    result->reorder_ms = o.ms;
    result->total_ms = kd_clock_ms() - t0; /* the ordering's wait counts */
    if (rc == KD_OK && o.skipped) {
        snprintf(result->reorder_reason, sizeof(result->reorder_reason),
                 "rcm not computed: predicted sectors/nnz %.2f against %.2f", o.predicted,
                 o.sampled);
        return KD_OK;
    }
    if (rc != KD_OK || o.rc != KD_OK) {
        if (rc == KD_OK)
            snprintf(result->reorder_reason, sizeof(result->reorder_reason), "rcm failed: %.80s",
                     o.err.message);
        free(o.perm);
        return rc;
    }
    kd_select_candidate_t *won = kd_select_find(result, result->format);
    double won_ms = won != NULL ? won->time_ms : 0.0;
    const kd_reorder_shape_t before = result->before;
    int narrower = (double)o.after.bandwidth * KD_SELECT_REORDER_GAIN <= (double)before.bandwidth;
    int closer =
        o.gathers_after >= 0.0 && o.gathers_after <= KD_SELECT_REORDER_GATHERS * o.gathers_before;
    if ((!narrower && !closer) || won_ms <= 0.0) {
        snprintf(result->reorder_reason, sizeof(result->reorder_reason),
                 "rcm: bandwidth %lld -> %lld, sectors/nnz %.2f -> %.2f: not timed",
                 (long long)before.bandwidth, (long long)o.after.bandwidth, o.gathers_before,
                 o.gathers_after);
        free(o.perm);
        return KD_OK;
    }
    kd_reorder_shape_t after = o.after;
    kd_matrix_t *m = NULL;
    double ms = 0.0, inner_ms = 0.0, t1 = kd_clock_ms();
    rc = kd_select_reordered_candidate(ocl, csr, result->format, &o, &m, &ms, &inner_ms, result,
                                       err);
    free(o.perm);
    if (rc != KD_OK) { /* the reordered candidate is optional: A's winner stays */
        snprintf(result->reorder_reason, sizeof(result->reorder_reason), "rcm: not timed: %.70s",
                 rc == KD_EDEVMEM ? "no device memory" : err->message);
        kd_err_clear(err);
        result->total_ms = kd_clock_ms() - t0;
        return KD_OK;
    }
    result->reordered_ms = ms;
    result->reordered_inner_ms = inner_ms;
    double extra_ms = kd_clock_ms() - t1 + fmax(0.0, o.ms - (t1 - t0));
    /* kept when a client's SpMV (permutations included) is faster, or a solve's SpMV (none: b in
     * and x out once) much faster */
    int spmv_gain = ms < (1.0 - KD_SELECT_REORDER_MARGIN) * won_ms;
    int solve_gain = inner_ms < (1.0 - KD_SELECT_REORDER_SOLVE_GAIN) * won_ms;
    if (spmv_gain || solve_gain) {
        double gain = won_ms - (spmv_gain ? ms : inner_ms);
        snprintf(result->reorder_reason, sizeof(result->reorder_reason),
                 "rcm: %.4f ms (in a solve %.4f) against %.4f, pays back in %.0f %s", ms, inner_ms,
                 won_ms, extra_ms / gain, spmv_gain ? "SpMVs" : "iterations");
        kd_matrix_free(*out);
        *out = m;
        result->reorder = KD_REORDER_RCM;
        result->after = after;
        result->total_ms = kd_clock_ms() - t0;
    } else {
        snprintf(result->reorder_reason, sizeof(result->reorder_reason),
                 "rcm: %.4f ms (in a solve %.4f) against %.4f: not worth it", ms, inner_ms, won_ms);
        kd_matrix_free(m);
        result->total_ms = kd_clock_ms() - t0;
    }
    return KD_OK;
}

/* rcm or metis on request: the selection runs on P A P^T. */
static int kd_select_forced_order(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced_format,
                                  kd_select_mode_t mode, kd_reorder_t reorder, kd_matrix_t **out,
                                  kd_select_result_t *result, kd_err_t *err)
{
    int32_t *perm = NULL;
    kd_csr_t *permuted = NULL;
    double t0 = kd_clock_ms();
    int rc = kd_reorder_compute(csr, reorder, &perm, err);
    if (rc == KD_OK)
        rc = kd_reorder_apply(csr, perm, &permuted, err);
    double ms = kd_clock_ms() - t0;
    if (rc == KD_OK)
        rc = kd_select_upload(ocl, permuted, forced_format, mode, out, result, err);
    if (rc == KD_OK) {
        rc = kd_matrix_attach_order(ocl, *out, reorder, perm, err);
        perm = NULL;
        result->after = result->before; /* the selection measured what it was given: P A P^T */
        kd_reorder_measure(csr, NULL, &result->before);
        result->reorder = reorder;
        result->reorder_ms = ms;
        snprintf(result->reorder_reason, sizeof(result->reorder_reason), "forced by the request");
        if (rc != KD_OK) {
            kd_matrix_free(*out);
            *out = NULL;
        }
    }
    free(perm);
    kd_csr_free(permuted);
    return rc;
}

int kd_select_upload_reordered(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced_format,
                               kd_select_mode_t mode, kd_reorder_t reorder, kd_matrix_t **out,
                               kd_select_result_t *result, kd_err_t *err)
{
    *out = NULL;
    if (reorder == KD_REORDER_RCM || reorder == KD_REORDER_METIS) {
        if (csr->rows != csr->cols)
            return kd_err_set(err, KD_EBADREQ,
                              "reorder '%s' needs a square matrix, this one is %lld x %lld",
                              kd_reorder_name(reorder), (long long)csr->rows, (long long)csr->cols);
        if (!kd_reorder_available(reorder))
            return kd_err_set(err, KD_EUNSUPPORTED,
                              "reorder '%s' is not available: this krylovd was built without it",
                              kd_reorder_name(reorder));
        return kd_select_forced_order(ocl, csr, forced_format, mode, reorder, out, result, err);
    }
    int forced = forced_format != NULL && forced_format[0] != '\0';
    const char *why = NULL;
    if (reorder != KD_REORDER_AUTO)
        why = "none requested";
    else if (forced || mode != KD_SELECT_MEASURE)
        why = "auto: only measured selections reorder";
    else if (csr->rows != csr->cols)
        why = "auto: not square";
    else if (csr->rows < KD_SELECT_REORDER_MIN_ROWS || kd_select_launch_bound(ocl, csr))
        why = "auto: too small to pay back";
    else if (kd_select_vector_bound(csr))
        why = "auto: x and y outweigh the matrix, no order shortens their traffic";
    if (why == NULL)
        return kd_select_auto(ocl, csr, out, result, err);
    int rc = kd_select_upload(ocl, csr, forced_format, mode, out, result, err);
    if (rc == KD_OK)
        snprintf(result->reorder_reason, sizeof(result->reorder_reason), "%s", why);
    return rc;
}
