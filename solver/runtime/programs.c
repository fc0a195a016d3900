/*
 * The list of programs requests build and the start-up warm-up (see programs.h). Each entry's
 * options come from the function its launch path uses (kd_format_options, the formats' and
 * spgemm's exported option values, kd_amg_lanes), so the two cannot drift apart silently; a test
 * (tests/python/service/test_py_programs.py) sends every kind of request and checks that the server
 * built nothing on the way.
 *
 * The warm-up runs in the background while the server serves: its threads take the list's
 * programs in order and have each put in the device's table (kd_ocl_program_ensure), so a program
 * a request needed first is found there, and one a request is building is waited for, not built
 * again (clBuildProgram on different programs is thread-safe; NVIDIA's compiler is
 * single-threaded per build). Its progress (counts, and which programs are pending, building,
 * built or failed) is kept under one lock for server.status.
 */
#include "solver/runtime/programs.h"
#include "common/clock.h"
#include "common/log.h"
#include "kernels/kernels.h"
#include "solver/precond/amg/cycle.h"
#include "solver/formats/format.h"
#include "solver/runtime/program_cache.h"
#include "solver/products/spgemm.h"

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

enum { KD_PROGRAMS_CAP = 128 + KD_PROGRAM_CACHE_FILES_MAX };

struct kd_programs_warmup {
    kd_ocl_t *ocl;
    kd_program_cache_t *cache;
    int prune; /* the whole list (no --warm-programs LIST): prune the cache when done */
    kd_program_spec_t *specs;
    kd_program_state_t *state; /* per spec, under lock */
    size_t count, replayed, pruned;
    size_t next, built, failed; /* under lock */
    int threads, running, stop;
    uint64_t start_ns, end_ns; /* end_ns: 0 while running */
    pthread_mutex_t lock;
    pthread_t tids[KD_PROGRAMS_THREADS_MAX];
    void (*on_progress)(void *ctx);
    void *ctx;
};

/* Take the next pending spec (KD_PROGRAMS_CAP when none is left or stop was asked). */
static size_t kd_programs_claim(kd_programs_warmup_t *w)
{
    pthread_mutex_lock(&w->lock);
    size_t i = w->stop || w->next >= w->count ? KD_PROGRAMS_CAP : w->next++;
    if (i != KD_PROGRAMS_CAP)
        w->state[i] = KD_PROGRAM_BUILDING;
    pthread_mutex_unlock(&w->lock);
    return i;
}

/* The last thread out: prune the cache (the whole list only), stamp the end. */
static void kd_programs_finish(kd_programs_warmup_t *w)
{
    size_t pruned = 0;
    pthread_mutex_lock(&w->lock);
    const int stopped = w->stop;
    pthread_mutex_unlock(&w->lock);
    if (w->cache != NULL && w->prune && !stopped)
        pruned = kd_program_cache_prune(w->cache, KD_PROGRAM_CACHE_FILES_MAX);
    pthread_mutex_lock(&w->lock);
    w->pruned = pruned;
    w->end_ns = kd_clock_ns();
    pthread_mutex_unlock(&w->lock);
}

static void *kd_programs_worker(void *arg)
{
    kd_programs_warmup_t *w = arg;
    size_t i;
    while ((i = kd_programs_claim(w)) != KD_PROGRAMS_CAP) {
        const kd_program_spec_t *s = &w->specs[i];
        kd_err_t err = {0};
        /* Found (a request built it), waited for (a request is building it) or built here. */
        const int rc = kd_ocl_program_ensure(w->ocl, s->program, s->dtype, s->options, NULL, &err);
        if (rc != KD_OK)
            KD_ERROR("ocl", "warm-up: %s (%s, \"%s\"): %s", s->program, kd_dtype_name(s->dtype),
                     s->options, err.message);
        pthread_mutex_lock(&w->lock);
        w->state[i] = rc == KD_OK ? KD_PROGRAM_BUILT : KD_PROGRAM_FAILED;
        w->built += rc == KD_OK;
        w->failed += rc != KD_OK;
        const int last = w->built + w->failed == w->count;
        pthread_mutex_unlock(&w->lock);
        if (last)
            kd_programs_finish(w);
        if (w->on_progress != NULL)
            w->on_progress(w->ctx);
    }
    pthread_mutex_lock(&w->lock);
    const int last_out = --w->running == 0 && w->end_ns == 0;
    pthread_mutex_unlock(&w->lock);
    if (last_out) { /* stopped early, or nothing to build */
        kd_programs_finish(w);
        if (w->on_progress != NULL)
            w->on_progress(w->ctx);
    }
    return NULL;
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

/* The specs the warm-up builds, in order: the list for each value type the device computes in,
 * then what the program cache holds beyond it, limited to `only`. */
static size_t kd_programs_collect(kd_programs_warmup_t *w, const char *only)
{
    kd_programs_builder_t b = {w->ocl, w->specs, KD_PROGRAMS_CAP, 0, KD_OK};
    int dtype_ok[KD_DTYPE_F32 > KD_DTYPE_F64 ? KD_DTYPE_F32 + 1 : KD_DTYPE_F64 + 1] = {0};
    const kd_dtype_t dtypes[] = {KD_DTYPE_F64, KD_DTYPE_F32};
    for (size_t d = 0; d < 2; d++) {
        if (kd_ocl_check_dtype(w->ocl, dtypes[d], &(kd_err_t){0}) != KD_OK)
            continue;
        dtype_ok[dtypes[d]] = 1;
        kd_programs_list_formats(&b, dtypes[d]);
        kd_programs_list_solver(&b, dtypes[d]);
    }
    const size_t listed = b.n;
    if (w->cache != NULL)
        kd_programs_add_cached(&b, w->cache, dtype_ok);
    size_t kept = 0; /* the selected ones, in order */
    for (size_t i = 0; i < b.n; i++) {
        if (!kd_programs_selected(only, w->specs[i].program))
            continue;
        w->replayed += i >= listed;
        w->specs[kept++] = w->specs[i];
    }
    return kept;
}

static void kd_programs_warmup_free(kd_programs_warmup_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_destroy(&w->lock);
    free(w->specs);
    free(w->state);
    free(w);
}

int kd_programs_warmup_start(kd_ocl_t *ocl, struct kd_program_cache *cache, const char *only,
                             int threads, void (*on_progress)(void *ctx), void *ctx,
                             kd_programs_warmup_t **out, kd_err_t *err)
{
    *out = NULL;
    kd_programs_warmup_t *w = calloc(1, sizeof(*w));
    if (w == NULL || (w->specs = calloc(KD_PROGRAMS_CAP, sizeof(*w->specs))) == NULL ||
        (w->state = calloc(KD_PROGRAMS_CAP, sizeof(*w->state))) == NULL) {
        if (w != NULL)
            free(w->specs);
        free(w);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for the program warm-up");
    }
    pthread_mutex_init(&w->lock, NULL);
    w->ocl = ocl;
    w->cache = cache;
    w->prune = only == NULL;
    w->on_progress = on_progress;
    w->ctx = ctx;
    w->start_ns = kd_clock_ns();
    w->count = kd_programs_collect(w, only);
    const int n = kd_programs_threads(threads, w->count);
    pthread_mutex_lock(&w->lock); /* no thread may count itself out before all are started */
    for (int t = 0; t < n && t < KD_PROGRAMS_THREADS_MAX; t++)
        if (pthread_create(&w->tids[w->threads], NULL, kd_programs_worker, w) == 0)
            w->threads++;
    w->running = w->threads;
    pthread_mutex_unlock(&w->lock);
    if (w->threads == 0) {
        kd_programs_warmup_free(w);
        return kd_err_set(err, KD_ENOMEM, "cannot start a thread for the program warm-up");
    }
    *out = w;
    return KD_OK;
}

void kd_programs_warmup_cancel(kd_programs_warmup_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_mutex_unlock(&w->lock);
}

void kd_programs_warmup_stop(kd_programs_warmup_t *w)
{
    if (w == NULL)
        return;
    kd_programs_warmup_cancel(w);
    kd_programs_warmup_wait(w);
    kd_programs_warmup_free(w);
}

void kd_programs_warmup_wait(kd_programs_warmup_t *w)
{
    for (int t = 0; t < w->threads; t++)
        pthread_join(w->tids[t], NULL);
    w->threads = 0;
}

void kd_programs_warmup_progress(kd_programs_warmup_t *w, kd_programs_progress_t *p)
{
    memset(p, 0, sizeof(*p));
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    p->total = w->count;
    p->built = w->built;
    p->failed = w->failed;
    p->building = w->next - w->built - w->failed;
    p->replayed = w->replayed;
    p->pruned = w->pruned;
    p->done = w->end_ns != 0;
    p->ms = (double)((p->done ? w->end_ns : kd_clock_ns()) - w->start_ns) / 1e6;
    pthread_mutex_unlock(&w->lock);
}

size_t kd_programs_warmup_labels(kd_programs_warmup_t *w, kd_program_state_t state,
                                 char (*labels)[KD_PROGRAM_LABEL_MAX], size_t cap)
{
    size_t n = 0;
    if (w == NULL)
        return 0;
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < w->count && n < cap; i++) {
        if (w->state[i] != state)
            continue;
        const kd_program_spec_t *s = &w->specs[i];
        /* A long option list is cut: the label names the program, not its whole build. */
        int len =
            snprintf(labels[n], KD_PROGRAM_LABEL_MAX, "%s/%s", s->program, kd_dtype_name(s->dtype));
        if (s->options[0] != '\0' && len > 0 && len < KD_PROGRAM_LABEL_MAX - 1)
            snprintf(labels[n] + len, (size_t)(KD_PROGRAM_LABEL_MAX - len), " %.*s",
                     KD_PROGRAM_LABEL_MAX - len - 2, s->options);
        n++;
    }
    pthread_mutex_unlock(&w->lock);
    return n;
}
