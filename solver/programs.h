/*
 * Every OpenCL program a request can build, and the start-up warm-up that builds them all before
 * the server says READY, so no request waits for a compiler (issue 16). A program is a kernels/
 * file built for one value type with one set of -D options; the list below names each with the
 * options its launch path passes (kd_format_options, the Krylov and preconditioner options), so
 * a request finds its program built. Variants that depend on the data and cannot all be listed
 * (block_jacobi's -DKD_BS for a uniform block size) are built on first use, stored in the
 * program cache, and rebuilt by the next start's warm-up from there.
 */
#ifndef KD_SOLVER_PROGRAMS_H
#define KD_SOLVER_PROGRAMS_H

#include "solver/ocl.h"

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

typedef struct kd_programs_warm_report {
    size_t listed;   /* programs the warm-up set out to build */
    size_t replayed; /* of them, found only in the program cache (built on a request before) */
    size_t failed;   /* builds that failed (logged; a request needing one gets the error) */
    size_t pruned;   /* program cache files removed as stale or beyond the cap */
    double ms;       /* wall time */
} kd_programs_warm_report_t;

/*
 * Build every listed program for each value type the device computes in (float64 when it has
 * it, float32), plus whatever the program cache holds for this device, on up to `threads`
 * threads (0: one per CPU, at most 8), and put them in ocl's program table. only: NULL, or a
 * comma-separated list of program names to limit it to (tests; nothing is pruned then). With a
 * program cache, files that the warm-up did not use are stale and are removed. A failed build is
 * logged and counted, not fatal. Call before any other thread uses ocl.
 */
int kd_programs_warm(kd_ocl_t *ocl, struct kd_program_cache *cache, const char *only, int threads,
                     kd_programs_warm_report_t *report, kd_err_t *err);

#endif
