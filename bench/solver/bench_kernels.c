/*
 * krylov-bench kernels: build every SpMV program with the options the formats use and print the
 * compiler's resource report (registers, spills, shared memory) where the driver gives one: on
 * NVIDIA's OpenCL through -cl-nv-verbose. What a kernel costs in registers decides how many
 * work-groups fit on a multiprocessor, so read this before tuning a kernel.
 */
#include "bench/bench.h"
#include "kernels/kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kd_bench_kernels_main(int argc, char **argv)
{
    const char *device = argc > 2 && strcmp(argv[1], "--device") == 0 ? argv[2] : "auto";
    kd_err_t err = {0};
    kd_ocl_t *ocl = NULL;
    if (kd_ocl_open(device, &ocl, &err) != KD_OK) {
        fprintf(stderr, "krylov-bench: %s\n", err.message);
        return 1;
    }
    const kd_ocl_device_desc_t *d = kd_ocl_desc(ocl);
    int nvidia = strstr(d->platform, "NVIDIA") != NULL;
    size_t wg = kd_ocl_work_group_size(ocl);
    static const struct {
        const char *program, *extra;
    } programs[] = {
        {"csr_scalar", ""},
        {"csr_vector", "-DKD_TPR=8"},
        {"csr_adaptive", "-DKD_CAP=2048"},
        {"ell", ""},
        {"ellpack_r", ""},
        {"sell_c_sigma", "-DKD_SELL_C=32"},
        {"hyb", ""},
        {"coo", ""},
    };
    int status = 0;
    for (size_t i = 0; i < sizeof(programs) / sizeof(programs[0]); i++) {
        const kd_kernel_source_t *src = kd_kernel_source_find(programs[i].program);
        char options[160];
        snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu %s%s", wg, programs[i].extra,
                 nvidia ? " -cl-nv-verbose" : "");
        cl_program prog = NULL;
        if (src == NULL || kd_ocl_build_source(ocl, programs[i].program, src->source, KD_DTYPE_F64,
                                               options, &prog, &err) != KD_OK) {
            fprintf(stderr, "%s: %s\n", programs[i].program, err.message);
            status = 1;
            continue;
        }
        size_t size = 0;
        clGetProgramBuildInfo(prog, d->device_id, CL_PROGRAM_BUILD_LOG, 0, NULL, &size);
        char *log = malloc(size + 1);
        if (log != NULL && clGetProgramBuildInfo(prog, d->device_id, CL_PROGRAM_BUILD_LOG, size,
                                                 log, NULL) == CL_SUCCESS) {
            log[size] = '\0';
            printf("== %s (float64, %s)\n", programs[i].program, options);
            for (char *line = strtok(log, "\n"); line != NULL; line = strtok(NULL, "\n"))
                if (strstr(line, "registers") || strstr(line, "spill") ||
                    strstr(line, "Compiling entry") || strstr(line, "bytes stack"))
                    printf("   %s\n", line);
        }
        free(log);
        clReleaseProgram(prog);
    }
    kd_ocl_close(ocl);
    return status;
}
