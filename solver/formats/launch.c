/*
 * The one launch path of the formats' kernels: build options, kernel lookup, arguments and a 1-D
 * range of one work-item per item, so each format's spmv and conversion is one call naming its
 * kernel and its arguments. The start-up warm-up (solver/runtime/programs.c) builds with the same
 * options.
 */
#include "solver/formats/format.h"

#include <assert.h>
#include <stdio.h>

void kd_format_options(const kd_ocl_t *ocl, const char *extra, char *buf, size_t cap)
{
    snprintf(buf, cap, "-DKD_WG_SIZE=%zu%s%s", kd_ocl_work_group_size(ocl),
             extra != NULL ? " " : "", extra != NULL ? extra : "");
}

int kd_format_run(kd_ocl_t *ocl, kd_dtype_t dtype, const char *program, const char *extra,
                  const char *name, size_t items, const kd_ocl_arg_t *args, size_t nargs,
                  kd_err_t *err)
{
    assert(ocl != NULL && program != NULL && name != NULL);
    size_t wg = kd_ocl_work_group_size(ocl);
    char options[96];
    kd_format_options(ocl, extra, options, sizeof(options));
    cl_kernel kernel;
    int rc = kd_ocl_kernel(ocl, program, dtype, options, name, &kernel, err);
    if (rc != KD_OK)
        return rc;
    return kd_ocl_run(ocl, kernel, name, kd_ocl_range_1d(kd_format_round_up(items, wg), wg), args,
                      nargs, NULL, err);
}
