/*
 * The OpenCL C sources (kernels/NAME.cl), embedded into the binary at build time by
 * cmake/embed_kernels.cmake. Each is found by its file stem ("csr_scalar" for csr_scalar.cl), a
 * header shared with the host by its name ("krylov_abi.h").
 */
#ifndef KD_KERNELS_H
#define KD_KERNELS_H

#include <stddef.h>

typedef struct kd_kernel_source {
    const char *name;   /* file stem */
    const char *source; /* NUL-terminated OpenCL C */
    size_t length;      /* bytes, without the NUL */
} kd_kernel_source_t;

extern const kd_kernel_source_t kd_kernel_sources[];
extern const size_t kd_kernel_source_count;

/* The embedded source named `name`, or NULL. */
const kd_kernel_source_t *kd_kernel_source_find(const char *name);

#endif
