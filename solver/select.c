/*
 * Format selection (see select.h). The costs, for a matrix of n rows and nnz entries: O(n) host
 * work for the statistics and the formats' plans, one transfer of the CSR arrays, and per timed
 * candidate a conversion on the device (about one pass over its arrays), one warm-up SpMV and
 * KD_SELECT_RUNS timed ones (KD_SELECT_RUNS_SHORT when a run takes under KD_SELECT_SHORT_MS, where
 * the extra runs cost nothing), the first run doubling as the warm-up. A candidate whose first
 * run is KD_SELECT_CUTOFF times slower than the best so far is not run again, and the heuristic's
 * choice is timed first so that the bar is set early.
 */
#include "solver/select.h"
#include "common/log.h"
#include "solver/format.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KD_SELECT_RUNS 3
#define KD_SELECT_RUNS_SHORT 7
#define KD_SELECT_SHORT_MS 0.05
#define KD_SELECT_CUTOFF 3.0
/* One work-item walking more entries than this in a row is far slower than spreading the row. */
#define KD_SELECT_SERIAL_MAX 4096
#define KD_SELECT_SLACK_BYTES ((size_t)64 << 10)

static double kd_select_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

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

/* Row-length statistics in O(rows) (kd_csr_compute_stats also scans the values). */
static void kd_select_row_stats(const kd_csr_t *csr, kd_csr_stats_t *st)
{
    memset(st, 0, sizeof(*st));
    if (csr->rows == 0)
        return;
    double sumsq = 0.0;
    st->min_row = INT64_MAX;
    for (int64_t r = 0; r < csr->rows; r++) {
        int64_t len = csr->indptr[r + 1] - csr->indptr[r];
        if (len < st->min_row)
            st->min_row = len;
        if (len > st->max_row)
            st->max_row = len;
        st->empty_rows += len == 0;
        sumsq += (double)len * (double)len;
    }
    st->mean_row = (double)csr->nnz / (double)csr->rows;
    double var = sumsq / (double)csr->rows - st->mean_row * st->mean_row;
    st->stddev_row = var > 0.0 ? sqrt(var) : 0.0;
}

kd_format_t kd_select_heuristic(const kd_csr_t *csr, const kd_csr_stats_t *st, const char **reason)
{
    const char *why;
    kd_format_t f;
    double mean = st->mean_row;
    if (csr->rows == 0 || csr->nnz == 0) {
        f = KD_FMT_CSR_SCALAR;
        why = "no entries";
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

/* Work-items that share one row in format f (csr_vector's group size as the format chooses it),
 * or 0 for formats that spread long rows over work-groups (csr_adaptive, hyb, coo). */
static int64_t kd_select_lanes_per_row(kd_format_t f, const kd_csr_stats_t *st)
{
    switch (f) {
    case KD_FMT_CSR_SCALAR:
    case KD_FMT_ELL:
    case KD_FMT_ELLPACK_R:
    case KD_FMT_SELL_C_SIGMA:
        return 1;
    case KD_FMT_CSR_VECTOR: {
        int64_t t = 2;
        while (t < 64 && (double)t < st->mean_row)
            t *= 2;
        return t;
    }
    default:
        return 0;
    }
}

/*
 * The reason to drop `format` before anything is allocated, or "" to keep it: its planned memory
 * against CSR's. ELL's plan is O(1) from the statistics; SELL-C-sigma's needs a dry run of its
 * sort, which is skipped when ELL (which pads at least as much) already fits.
 */
static void kd_select_screen(const kd_ocl_t *ocl, const kd_csr_t *csr, const kd_csr_stats_t *st,
                             kd_format_t f, size_t ell_plan, kd_select_candidate_t *c)
{
    int64_t lanes = kd_select_lanes_per_row(f, st);
    if (lanes > 0 && st->max_row / lanes > KD_SELECT_SERIAL_MAX) {
        snprintf(c->dropped, sizeof(c->dropped),
                 "dominated: a row of %lld entries is %lld serial steps for one work-item",
                 (long long)st->max_row, (long long)(st->max_row / lanes));
        return;
    }
    size_t csr_bytes = kd_format_csr_bytes(csr);
    double limit = KD_SELECT_MEMORY_FACTOR * (double)csr_bytes + (double)KD_SELECT_SLACK_BYTES;
    size_t plan;
    if (f == KD_FMT_SELL_C_SIGMA && (double)ell_plan <= limit)
        plan = ell_plan;
    else
        plan = kd_matrix_plan_bytes(ocl, csr, st, f);
    if (plan == SIZE_MAX) {
        snprintf(c->dropped, sizeof(c->dropped), "would not fit in memory");
        return;
    }
    if ((double)plan > limit)
        snprintf(c->dropped, sizeof(c->dropped),
                 "padding: %.3g MB, %.1fx the CSR arrays (limit %gx)", (double)plan / 1e6,
                 (double)plan / (double)(csr_bytes > 0 ? csr_bytes : 1), KD_SELECT_MEMORY_FACTOR);
}

/*
 * Time one candidate: a first run, timed, that also warms up (program, caches, TLB); if it is more
 * than KD_SELECT_CUTOFF times the best candidate so far (best_ms > 0) the candidate has lost and
 * that time stands. Otherwise KD_SELECT_RUNS more timed runs (KD_SELECT_RUNS_SHORT when a run
 * takes under KD_SELECT_SHORT_MS), and *ms is their minimum: noise only ever adds time.
 */
static int kd_select_time(kd_ocl_t *ocl, const kd_matrix_t *m, kd_vec_t *x, kd_vec_t *y,
                          double best_ms, int *runs, double *ms, kd_err_t *err)
{
    *ms = 0.0;
    if (m->rows == 0)
        return KD_OK;
    double fastest = 0.0;
    int n = 0, want = 1 + KD_SELECT_RUNS, rc = KD_OK;
    while (rc == KD_OK && n < want) {
        double run_ms = 0.0;
        kd_ocl_timing_begin(ocl);
        rc = kd_matrix_spmv(ocl, m, 1.0, x, 0.0, y, err);
        int rc2 = kd_ocl_timing_end(ocl, &run_ms, err);
        if (rc == KD_OK)
            rc = rc2;
        (*runs)++;
        if (n == 0) {
            *ms = run_ms;
            if (best_ms > 0.0 && run_ms > KD_SELECT_CUTOFF * best_ms)
                return rc;
            if (run_ms < KD_SELECT_SHORT_MS)
                want = 1 + KD_SELECT_RUNS_SHORT;
        } else if (n == 1 || run_ms < fastest) {
            fastest = run_ms;
        }
        n++;
    }
    if (n > 1)
        *ms = fastest;
    return rc;
}

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
                                      kd_select_result_t *res, kd_err_t *err)
{
    const char *why = NULL;
    kd_format_t f = kd_select_heuristic(src->csr, &src->stats, &why);
    /* a choice the memory screen would drop falls back to CSR adaptive, which never pads */
    kd_select_candidate_t probe = {0};
    kd_select_screen(ocl, src->csr, &src->stats, f,
                     kd_matrix_plan_bytes(ocl, src->csr, &src->stats, KD_FMT_ELL), &probe);
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
    snprintf(res->candidates[0].dropped, sizeof(res->candidates[0].dropped), "heuristic: %s", why);
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
    size_t ell_plan = kd_matrix_plan_bytes(ocl, csr, &src->stats, KD_FMT_ELL);

    double t0 = kd_select_now_ms();
    res->ncandidates = 0;
    for (int f = 0; f < KD_FMT_COUNT; f++) {
        if (!kd_format_available((kd_format_t)f))
            continue;
        kd_select_candidate_t *c = &res->candidates[res->ncandidates++];
        memset(c, 0, sizeof(*c));
        c->format = (kd_format_t)f;
        kd_select_screen(ocl, csr, &src->stats, (kd_format_t)f, ell_plan, c);
    }
    res->plan_ms += kd_select_now_ms() - t0;
    if ((rc = kd_format_source_device(ocl, src, err)) != KD_OK)
        goto fail;
    res->transfer_ms = src->upload_ms;
    if ((rc = kd_vec_alloc(ocl, csr->cols, csr->dtype, &x, err)) != KD_OK ||
        (rc = kd_vec_alloc(ocl, csr->rows, csr->dtype, &y, err)) != KD_OK ||
        (rc = kd_vec_fill(ocl, &x, 1.0, err)) != KD_OK)
        goto fail;

    kd_format_t first = kd_select_heuristic(csr, &src->stats, NULL);
    for (int k = -1; k < res->ncandidates; k++) {
        /* the heuristic's choice first, then the others in table order */
        int i = k;
        if (k < 0)
            for (i = 0; i < res->ncandidates && res->candidates[i].format != first; i++)
                ;
        else if (res->candidates[k].format == first)
            continue;
        if (i >= res->ncandidates)
            continue;
        kd_select_candidate_t *c = &res->candidates[i];
        if (c->dropped[0] != '\0')
            continue;
        kd_matrix_t *m = NULL;
        rc = kd_matrix_upload_source(ocl, src, c->format, &m, err);
        if (rc == KD_OK)
            rc = kd_select_time(ocl, m, &x, &y, best != NULL ? best_ms : 0.0, &res->spmv_runs,
                                &c->time_ms, err);
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

int kd_select_upload(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced_format,
                     kd_select_mode_t mode, kd_matrix_t **out, kd_select_result_t *result,
                     kd_err_t *err)
{
    double t0 = kd_select_now_ms();
    kd_format_source_t src;
    kd_csr_stats_t stats;
    *out = NULL;
    memset(result, 0, sizeof(*result));
    int rc = kd_ocl_check_dtype(ocl, csr->dtype, err);
    if (rc != KD_OK)
        return rc;
    kd_select_row_stats(csr, &stats);
    result->plan_ms = kd_select_now_ms() - t0;
    kd_format_source_init_stats(&src, csr, &stats);
    if (forced_format != NULL && forced_format[0] != '\0')
        rc = kd_select_forced(ocl, &src, forced_format, out, result, err);
    else if (mode == KD_SELECT_HEURISTIC)
        rc = kd_select_heuristic_upload(ocl, &src, out, result, err);
    else
        rc = kd_select_measure(ocl, &src, out, result, err);
    result->transfer_ms = src.upload_ms;
    kd_format_source_close(&src);
    result->total_ms = kd_select_now_ms() - t0;
    if (rc == KD_OK && mode == KD_SELECT_MEASURE && result->ncandidates > 1) {
        char line[512];
        size_t w = 0;
        for (int i = 0; i < result->ncandidates && w < sizeof(line); i++) {
            const kd_select_candidate_t *c = &result->candidates[i];
            int n = c->dropped[0] != '\0' ? snprintf(line + w, sizeof(line) - w, " %s=dropped",
                                                     kd_format_name(c->format))
                                          : snprintf(line + w, sizeof(line) - w, " %s=%.4fms",
                                                     kd_format_name(c->format), c->time_ms);
            w += n > 0 ? (size_t)n : 0;
        }
        KD_DEBUG("select", "chose %s in %.2fms (transfer %.2fms, %d runs):%s",
                 kd_format_name(result->format), result->total_ms, result->transfer_ms,
                 result->spmv_runs, line);
    }
    return rc;
}
