/*
 * The list of programs requests build and the start-up warm-up (see programs.h). Each entry's
 * options come from the function its launch path uses (kd_format_options, the formats' and
 * spgemm's exported option values, kd_amg_lanes), so the two cannot drift apart silently; a test
 * (tests/python/test_py_programs.py) sends every kind of request and checks that the server
 * built nothing on the way.
 *
 * Building is spread over threads: each compiles whole programs (clBuildProgram on different
 * programs is thread-safe; NVIDIA's compiler is single-threaded per build), and the results are
 * put in the device's table afterwards on the calling thread.
 */
#include "solver/programs.h"
#include "common/clock.h"
#include "common/log.h"
#include "kernels/kernels.h"
#include "solver/amg_cycle.h"
#include "solver/format.h"
#include "solver/program_cache.h"
#include "solver/spgemm.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KD_PROGRAMS_THREADS_MAX 8

typedef struct kd_programs_builder {
    const kd_ocl_t *ocl;
    kd_program_spec_t *out;
    size_t cap, n;
    int rc;
} kd_programs_builder_t;

static void kd_programs_add(kd_programs_builder_t *b, const char *program, kd_dtype_t dtype,
                            const char *options)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->out[i].dtype == dtype && strcmp(b->out[i].program, program) == 0 &&
            strcmp(b->out[i].options, options) == 0)
            return;
    if (b->n == b->cap) {
        b->rc = KD_ETOOLARGE;
        return;
    }
    kd_program_spec_t *s = &b->out[b->n++];
    s->program = program;
    s->dtype = dtype;
    snprintf(s->options, sizeof(s->options), "%s", options);
}

/* A format's program with kd_format_options(extra), as kd_format_run builds it. */
static void kd_programs_add_format(kd_programs_builder_t *b, const char *program, kd_dtype_t dtype,
                                   const char *extra)
{
    char options[KD_PROGRAM_OPTIONS_MAX];
    kd_format_options(b->ocl, extra, options, sizeof(options));
    kd_programs_add(b, program, dtype, options);
}

static void kd_programs_list_formats(kd_programs_builder_t *b, kd_dtype_t dtype)
{
    static const char *const plain[] = {"csr_scalar", "ell",   "ellpack_r", "hyb",
                                        "coo",        "tiled", "permute"};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
        kd_programs_add_format(b, plain[i], dtype, NULL);
    char extra[64];
    const size_t wg = kd_ocl_work_group_size(b->ocl);
    /* csr_vector's lanes per row follow the mean row length: every value it can take. */
    for (double mean = 0.5; mean <= 128.0; mean *= 2.0) {
        snprintf(extra, sizeof(extra), "-DKD_TPR=%d", kd_format_csr_vector_threads(mean, wg));
        kd_programs_add_format(b, "csr_vector", dtype, extra);
    }
    snprintf(extra, sizeof(extra), "-DKD_CAP=%d", kd_format_csr_adaptive_cap(b->ocl, dtype));
    kd_programs_add_format(b, "csr_adaptive", dtype, extra);
    kd_programs_add_format(b, "sell_c_sigma", dtype, kd_format_sell_options);
}

/* The Krylov vector kernels and each method's own program (kd_krylov_init's options), the
 * preconditioners' and spgemm's (amg's setup, matrix.multiply). */
static void kd_programs_list_solver(kd_programs_builder_t *b, kd_dtype_t dtype)
{
    const size_t wg = kd_ocl_work_group_size(b->ocl);
    char base[64], options[KD_PROGRAM_OPTIONS_MAX];
    snprintf(base, sizeof(base), "-DKD_WG_SIZE=%zu", wg);
    static const char *const with_wg[] = {"krylov",  "cg1",   "cg_small", "bicgstab",
                                          "minres",  "gmres", "blas",     "ilu",
                                          "permute", "amg",   "batch"};
    for (size_t i = 0; i < sizeof(with_wg) / sizeof(with_wg[0]); i++)
        kd_programs_add(b, with_wg[i], dtype, base);
    kd_programs_add(b, "chebyshev", dtype, "");
    /* block_jacobi's general variants, and the uniform block sizes of scalar and small vector
     * PDEs (a structure-found size is a -DKD_BS=N of its own; others come from the cache). */
    kd_programs_add(b, "block_jacobi", dtype, "");
    kd_programs_add(b, "block_jacobi", dtype, "-DKD_MAPPED");
    for (int bs = 1; bs <= 4; bs++) {
        snprintf(options, sizeof(options), "-DKD_BS=%d", bs);
        kd_programs_add(b, "block_jacobi", dtype, options);
    }
    /* amg's lanes per row, as kd_amg_lanes picks them for any mean row length. */
    kd_amg_t amg;
    memset(&amg, 0, sizeof(amg));
    amg.wg = wg;
    amg.gpu_lanes = kd_ocl_desc(b->ocl)->is_gpu || kd_amg_test_gpu_lanes;
    for (double mean = 0.5; mean <= 128.0; mean *= 2.0) {
        snprintf(options, sizeof(options), "%s -DKD_TPR=%d", base, kd_amg_lanes(&amg, mean));
        kd_programs_add(b, "amg", dtype, options);
    }
    snprintf(options, sizeof(options), "%s -DKD_SPGEMM_LANE_SLOTS=%d", base,
             kd_spgemm_lane_slots(b->ocl, dtype));
    kd_programs_add(b, "spgemm", dtype, options);
}

int kd_programs_list(const kd_ocl_t *ocl, kd_dtype_t dtype, kd_program_spec_t *out, size_t cap,
                     size_t *count, kd_err_t *err)
{
    kd_programs_builder_t b = {ocl, out, cap, 0, KD_OK};
    kd_programs_list_formats(&b, dtype);
    kd_programs_list_solver(&b, dtype);
    *count = b.n;
    if (b.rc != KD_OK)
        return kd_err_set(err, b.rc, "more than %zu programs to list", cap);
    return KD_OK;
}

/* ---- the warm-up -------------------------------------------------------------------------- */

typedef struct kd_programs_job {
    kd_ocl_t *ocl;
    const kd_program_spec_t *specs;
    cl_program *built; /* NULL where the build failed */
    size_t count;
    atomic_size_t next;
    atomic_size_t failed;
} kd_programs_job_t;

static void *kd_programs_worker(void *arg)
{
    kd_programs_job_t *job = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&job->next, 1);
        if (i >= job->count)
            return NULL;
        const kd_program_spec_t *s = &job->specs[i];
        kd_err_t err = {0};
        if (kd_ocl_program_build(job->ocl, s->program, s->dtype, s->options, &job->built[i],
                                 &err) != KD_OK) {
            KD_ERROR("ocl", "warm-up: %s (%s, \"%s\"): %s", s->program, kd_dtype_name(s->dtype),
                     s->options, err.message);
            atomic_fetch_add(&job->failed, 1);
        }
    }
}

/* What the program cache holds beyond the list (variants a request built before), for the
 * device's value types and this build's programs. */
static void kd_programs_add_cached(kd_programs_builder_t *b, kd_program_cache_t *cache,
                                   const int *dtype_ok)
{
    kd_program_cache_entry_t *entries = NULL;
    size_t n = 0, rejected = 0;
    kd_err_t err = {0};
    if (kd_program_cache_list(cache, &entries, &n, &rejected, &err) != KD_OK) {
        KD_WARN("ocl", "warm-up: %s", err.message);
        return;
    }
    for (size_t i = 0; i < n && i < KD_PROGRAM_CACHE_FILES_MAX && b->rc == KD_OK; i++) {
        const kd_kernel_source_t *src = kd_kernel_source_find(entries[i].program);
        if (src == NULL || strcmp(src->name, "prelude") == 0 || !dtype_ok[entries[i].dtype])
            continue; /* a program this build lacks: its file is stale, pruned afterwards */
        kd_programs_add(b, src->name, entries[i].dtype, entries[i].options);
    }
    free(entries);
}

static int kd_programs_threads(int threads, size_t count)
{
    if (threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = cpus > 0 ? (int)cpus : 1;
        if (threads > KD_PROGRAMS_THREADS_MAX)
            threads = KD_PROGRAMS_THREADS_MAX;
    }
    if ((size_t)threads > count)
        threads = (int)(count > 0 ? count : 1);
    return threads;
}

/* 1 when program is in the comma-separated list (NULL: every program is). */
static int kd_programs_selected(const char *only, const char *program)
{
    if (only == NULL)
        return 1;
    const size_t len = strlen(program);
    for (const char *p = only; *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
        if (n == len && strncmp(p, program, n) == 0)
            return 1;
        p += n + (end != NULL);
    }
    return 0;
}

int kd_programs_warm(kd_ocl_t *ocl, struct kd_program_cache *cache, const char *only, int threads,
                     kd_programs_warm_report_t *report, kd_err_t *err)
{
    const uint64_t start = kd_clock_ns();
    memset(report, 0, sizeof(*report));
    enum { CAP = 128 + KD_PROGRAM_CACHE_FILES_MAX };
    kd_program_spec_t *specs = calloc(CAP, sizeof(*specs));
    cl_program *built = calloc(CAP, sizeof(*built));
    if (specs == NULL || built == NULL) {
        free(specs);
        free(built);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the program warm-up");
    }
    kd_programs_builder_t b = {ocl, specs, CAP, 0, KD_OK};
    int dtype_ok[KD_DTYPE_F32 > KD_DTYPE_F64 ? KD_DTYPE_F32 + 1 : KD_DTYPE_F64 + 1] = {0};
    const kd_dtype_t dtypes[] = {KD_DTYPE_F64, KD_DTYPE_F32};
    for (size_t d = 0; d < 2; d++) {
        if (kd_ocl_check_dtype(ocl, dtypes[d], &(kd_err_t){0}) != KD_OK)
            continue;
        dtype_ok[dtypes[d]] = 1;
        kd_programs_list_formats(&b, dtypes[d]);
        kd_programs_list_solver(&b, dtypes[d]);
    }
    const size_t listed = b.n;
    if (cache != NULL)
        kd_programs_add_cached(&b, cache, dtype_ok);
    size_t kept = 0; /* the selected ones, in order */
    for (size_t i = 0; i < b.n; i++) {
        if (!kd_programs_selected(only, specs[i].program))
            continue;
        report->replayed += i >= listed;
        specs[kept++] = specs[i];
    }
    b.n = kept;

    kd_programs_job_t job = {.ocl = ocl, .specs = specs, .built = built, .count = b.n};
    atomic_init(&job.next, 0);
    atomic_init(&job.failed, 0);
    const int n = kd_programs_threads(threads, b.n);
    pthread_t tids[KD_PROGRAMS_THREADS_MAX];
    int started = 0;
    for (int t = 1; t < n && t < KD_PROGRAMS_THREADS_MAX; t++)
        if (pthread_create(&tids[started], NULL, kd_programs_worker, &job) == 0)
            started++;
    kd_programs_worker(&job); /* this thread is one of the builders */
    for (int t = 0; t < started; t++)
        pthread_join(tids[t], NULL);

    int rc = KD_OK;
    for (size_t i = 0; i < b.n; i++) {
        if (built[i] == NULL)
            continue;
        int arc = kd_ocl_program_adopt(ocl, specs[i].program, specs[i].dtype, specs[i].options,
                                       built[i], err);
        if (arc != KD_OK && rc == KD_OK)
            rc = arc;
    }
    report->listed = b.n;
    report->failed = atomic_load(&job.failed);
    if (cache != NULL && only == NULL)
        report->pruned = kd_program_cache_prune(cache, KD_PROGRAM_CACHE_FILES_MAX);
    report->ms = kd_clock_ms_since(start);
    free(specs);
    free(built);
    return rc;
}
