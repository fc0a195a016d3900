/*
 * The OpenCL runtime for one device: platform/device discovery, a context and an in-order queue
 * (with profiling, for format timing), and a cache of programs built from the embedded kernel
 * sources with -D options for the value type. A kd_ocl_t is used by one thread at a time (the
 * device's worker); nothing here locks.
 */
#ifndef KD_SOLVER_OCL_H
#define KD_SOLVER_OCL_H

#include "common/dtype.h"
#include "common/error.h"

#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

typedef struct kd_ocl_device_desc {
    int index; /* position in kd_ocl_list_devices(): the N of --device N */
    char platform[128];
    char name[128];
    char vendor[128];
    char version[128]; /* CL_DEVICE_VERSION */
    char driver[64];
    int is_gpu;
    int is_cpu;
    int has_fp64;
    uint32_t compute_units;
    size_t max_work_group;
    uint64_t global_mem_bytes;
    uint64_t max_alloc_bytes;
    uint64_t local_mem_bytes;
    cl_platform_id platform_id;
    cl_device_id device_id;
} kd_ocl_device_desc_t;

typedef struct kd_ocl kd_ocl_t;

/* Every device of every platform, in a stable order. *out is malloc'd (free() it); *count may be 0
 * when no platform is installed. */
int kd_ocl_list_devices(kd_ocl_device_desc_t **out, size_t *count, kd_err_t *err);

/* Open a device: "auto" (the first GPU, else the first CPU, else the first device), "gpu", "cpu",
 * or a decimal index into kd_ocl_list_devices(). */
int kd_ocl_open(const char *selector, kd_ocl_t **out, kd_err_t *err);
void kd_ocl_close(kd_ocl_t *ocl); /* accepts NULL */

const kd_ocl_device_desc_t *kd_ocl_desc(const kd_ocl_t *ocl);
cl_context kd_ocl_context(const kd_ocl_t *ocl);
cl_command_queue kd_ocl_queue(const kd_ocl_t *ocl);

/*
 * A kernel from the embedded program `program` (kernels/<program>.cl, preceded by the common
 * prelude), built for value type `dtype` (KD_DTYPE_F64 or KD_DTYPE_F32) plus `options` (extra -D
 * flags, may be NULL). Programs and kernels are cached; the returned kernel belongs to the cache.
 * A build failure is KD_EDEVICE with the build log in the message.
 */
int kd_ocl_kernel(kd_ocl_t *ocl, const char *program, kd_dtype_t dtype, const char *options,
                  const char *kernel_name, cl_kernel *out, kd_err_t *err);

/* "CL_OUT_OF_RESOURCES" for -5, ... */
const char *kd_ocl_error_name(cl_int status);

/* Record a failed CL call in err: KD_EDEVMEM for allocation failures, KD_EDEVICE otherwise, with
 * the call's name and the CL error name. Returns the code. */
int kd_ocl_fail(kd_err_t *err, cl_int status, const char *what);

/* Wait for the queue to drain. */
int kd_ocl_finish(kd_ocl_t *ocl, kd_err_t *err);

#endif
