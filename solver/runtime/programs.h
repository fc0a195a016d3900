/*
 * Every OpenCL program a request can build, and the warm-up that builds them all in the
 * background from start-up on, while the server already serves (issue 16, issue 32): a request
 * that needs a program not built yet has it built first, or waits for the warm-up thread
 * building it. A program is a kernels/
 * file built for one value type with one set of -D options; the list below names each with the
 * options its launch path passes (kd_format_options, the Krylov and preconditioner options), so
 * a request finds its program built. Variants that depend on the data and cannot all be listed
 * (block_jacobi's -DKD_BS for a uniform block size) are built on first use, stored in the
 * program cache, and rebuilt by the next start's warm-up from there.
 */
#ifndef KD_SOLVER_PROGRAMS_H
#define KD_SOLVER_PROGRAMS_H

#include "solver/runtime/ocl.h"

#define KD_PROGRAM_OPTIONS_MAX 384

typedef struct kd_program_spec {
    const char *program; /* kernels/<program>.cl */
    kd_dtype_t dtype;
    char options[KD_PROGRAM_OPTIONS_MAX];
} kd_program_spec_t;

/* The programs requests may need on this device in dtype, into out[0..cap) (*count of them;
 * KD_ETOOLARGE when cap is too small). */
int kd_programs_list(const kd_ocl_t *ocl, kd_dtype_t dtype, kd_program_spec_t *out, size_t cap,
                     size_t *count, kd_err_t *err);

/* One listed program's state in the warm-up. */
typedef enum kd_program_state {
    KD_PROGRAM_PENDING = 0,
    KD_PROGRAM_BUILDING,
    KD_PROGRAM_BUILT,
    KD_PROGRAM_FAILED,
} kd_program_state_t;

typedef struct kd_programs_progress {
    size_t total;    /* programs the warm-up set out to build */
    size_t built;    /* of them, in the device's table now */
    size_t failed;   /* builds that failed (logged; a request needing one gets the error) */
    size_t building; /* taken by a warm-up thread, not finished */
    size_t replayed; /* listed only because the program cache held them (built on a request) */
    size_t pruned;   /* program cache files removed as stale or beyond the cap, once done */
    int done;        /* every thread has finished (or was stopped) */
    double ms;       /* since the start; once done, the warm-up's wall time */
} kd_programs_progress_t;

typedef struct kd_programs_warmup kd_programs_warmup_t;

/*
 * Start building, in the background, every listed program for each value type the device
 * computes in (float64 when it has it, float32), plus whatever the program cache holds for this
 * device, on up to `threads` threads (0: one per CPU, at most 8), into ocl's program table, which
 * requests use meanwhile (solver/runtime/ocl.h). only: NULL, or a comma-separated list of program
 * names to limit it to (nothing is pruned then). With the whole list and a program cache, files the
 * warm-up did not use are stale and are removed at the end. A failed build is logged and
 * counted, not fatal. on_progress (may be NULL) is called from a warm-up thread after each
 * program and once at the end (progress.done); it must not block.
 */
int kd_programs_warmup_start(kd_ocl_t *ocl, struct kd_program_cache *cache, const char *only,
                             int threads, void (*on_progress)(void *ctx), void *ctx,
                             kd_programs_warmup_t **out, kd_err_t *err);

void kd_programs_warmup_progress(kd_programs_warmup_t *w, kd_programs_progress_t *out);

/* The labels ("csr_vector/float64 -DKD_WG_SIZE=256 -DKD_TPR=4") of the programs in `state`, in
 * list order, at most cap of them; returns how many. */
#define KD_PROGRAM_LABEL_MAX 128
size_t kd_programs_warmup_labels(kd_programs_warmup_t *w, kd_program_state_t state,
                                 char (*labels)[KD_PROGRAM_LABEL_MAX], size_t cap);

/* Ask the threads to take no more programs (builds under way finish); returns at once. */
void kd_programs_warmup_cancel(kd_programs_warmup_t *w);
/* Wait for every thread to end (after the whole list, or after a cancel). */
void kd_programs_warmup_wait(kd_programs_warmup_t *w);
/* Cancel, wait and free (NULL: nothing). Before the device is closed. */
void kd_programs_warmup_stop(kd_programs_warmup_t *w);

#endif
