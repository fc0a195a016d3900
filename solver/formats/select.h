/*
 * Format selection at upload: which storage format a matrix is kept in on the device.
 *
 *  - forced: the request names a format; it is built, nothing is timed.
 *  - measure (the default): row-length statistics first (O(rows)); every format whose planned
 *    device memory exceeds KD_SELECT_MEMORY_FACTOR times CSR's is dropped with a reason before
 *    anything is allocated (ELL on a matrix with one dense row); formats a statistic shows to be
 *    dominated are dropped with a reason too. The CSR arrays then cross the bus once; each
 *    remaining candidate is built from them on the device, run once to warm up and timed for a
 *    few runs with profiling events, and the fastest is kept (the others are freed as soon as
 *    they lose). A launch-bound matrix is not measured (the statistics choose), and measuring
 *    stops once a candidate reaches 90% of the device's copy bandwidth: solver/formats/select.c
 * says why each shortcut is safe.
 *  - heuristic: a choice from the statistics alone, nothing timed.
 *
 * The solver never includes server/: the server copies kd_select_candidate_t into its own
 * metadata (matrix.info `candidates`).
 */
#ifndef KD_SOLVER_SELECT_H
#define KD_SOLVER_SELECT_H

#include "solver/matrix.h"

/* A format is dropped when it would take more than this many times CSR's device memory (plus
 * 64 KiB, so tiny matrices are not dropped for their alignment padding). */
#define KD_SELECT_MEMORY_FACTOR 3.0

typedef enum kd_select_mode {
    KD_SELECT_MEASURE = 0,
    KD_SELECT_HEURISTIC = 1,
} kd_select_mode_t;

/* Parse "measure" | "heuristic" ("" or NULL: measure). Returns 0 or -1. */
int kd_select_mode_parse(const char *name, kd_select_mode_t *out);

/* One format's outcome. */
typedef struct kd_select_candidate {
    kd_format_t format;
    double time_ms;    /* median device time of its timed runs (0 when not timed) */
    size_t plan_bytes; /* the device bytes it would take, from its plan (0: not planned) */
    char dropped[96];  /* why it was not timed, or "" when it was */
} kd_select_candidate_t;

typedef struct kd_select_result {
    kd_format_t format; /* the format kept */
    int ncandidates;
    kd_select_candidate_t candidates[KD_FMT_COUNT];
    double transfer_ms; /* host wall time of copying the CSR arrays to the device */
    double plan_ms;     /* host wall time of the analysis: statistics, plans, host metadata (beside
                           the transfer for a large matrix) */
    double build_ms;    /* host wall time building candidates on the device */
    double measure_ms;  /* host wall time of the timed runs */
    double total_ms;    /* host wall time of the whole call, transfer included */
    int spmv_runs;      /* SpMVs run for timing, warm-ups included */
    kd_csr_stats_t stats; /* the matrix's row statistics, and its non-finite values counted by the
                             upload's scan (matrix.info reports them) */
    kd_reorder_t reorder; /* the ordering kept (none, rcm, metis) */
    kd_reorder_shape_t before, after; /* bandwidth and profile of A and of what is stored */
    double reorder_ms;                /* host wall time computing the ordering (0: none computed) */
    double reordered_ms;              /* the reordered candidate's SpMV, gather/scatter included */
    double reordered_inner_ms;        /* and without them (a solve's SpMV) */
    char reorder_reason[96];          /* why this ordering */
} kd_select_result_t;

/*
 * Put csr on the device in the format chosen as above. forced_format: a format name, or NULL or
 * "" to select; mode applies only when not forced. On success *out owns the matrix and result
 * says what was considered. KD_EBADREQ for an unknown format name, KD_EUNSUPPORTED for a format
 * this build lacks (or float64 on a device without it), KD_EDEVMEM when even the last candidate
 * does not fit (a candidate refused for device memory during measuring is dropped, not fatal).
 */
int kd_select_upload(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced_format,
                     kd_select_mode_t mode, kd_matrix_t **out, kd_select_result_t *result,
                     kd_err_t *err);

/*
 * kd_select_upload with a reordering (common/reorder.h). rcm or metis: the ordering is computed,
 * P A P^T goes through the selection above and the permutation is kept in the matrix; KD_EBADREQ
 * for a non-square matrix, KD_EUNSUPPORTED for metis in a build without it. auto, in measure mode
 * without a forced format, on a square matrix large enough not to be launch-bound: RCM is
 * computed beside the selection of A; when it at least halves the bandwidth, the winning format
 * is built on P A P^T and timed with its gather and scatter, and kept only when 5% faster
 * (solver/formats/select.c states the cost). Otherwise, and for none, A is kept as it is.
 */
int kd_select_upload_reordered(kd_ocl_t *ocl, const kd_csr_t *csr, const char *forced_format,
                               kd_select_mode_t mode, kd_reorder_t reorder, kd_matrix_t **out,
                               kd_select_result_t *result, kd_err_t *err);

/* 1 when x and y (rows + cols values) hold more bytes than csr's arrays: about one entry a row or
 * fewer. Such a matrix is not timed (the statistics choose) nor reordered. */
int kd_select_vector_bound(const kd_csr_t *csr);

/* 1 when all of csr's SpMV traffic (the minimal-bytes model) takes under 5 us at the device's
 * copy bandwidth: every format then runs in the launch latency, and measuring is noise. */
int kd_select_launch_bound(kd_ocl_t *ocl, const kd_csr_t *csr);

/* The heuristic's choice for these statistics on a GPU (gpu = 1) or a CPU device, launch-bound or
 * not, with a one-line reason (reason may be NULL). Its rules come from measurements on an H100
 * and on PoCL (bench/NOTES.md). */
kd_format_t kd_select_heuristic(const kd_csr_t *csr, const kd_csr_stats_t *stats, int gpu,
                                int launch_bound, const char **reason);

#endif
