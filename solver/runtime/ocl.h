/*
 * The OpenCL runtime for one device: platform/device discovery, a context and an in-order queue
 * (with profiling, for format timing), and a cache of programs built from the embedded kernel
 * sources with -D options for the value type. A kd_ocl_t is used by one thread at a time (the
 * device's worker), except its program table: kd_ocl_kernel, kd_ocl_program_ensure, _adopt and
 * _ready may be called from any thread at once (the background warm-up builds while requests
 * run); a program is built by one thread while the others that need it wait.
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

/* Every device of every platform, in a stable order (platforms sorted by name, vendor and version;
 * devices in the order their platform reports them). *out is malloc'd (free() it; NULL when
 * *count is 0); *count is 0 when no platform is installed. */
int kd_ocl_list_devices(kd_ocl_device_desc_t **out, size_t *count, kd_err_t *err);

/* Open a device: "auto" (the first GPU, else the first CPU, else the first device), "gpu", "cpu",
 * or a decimal index into kd_ocl_list_devices(). KD_EDEVICE when no platform is installed or the
 * runtime fails, KD_ENOTFOUND when no device matches, KD_EBADREQ for a selector that is none of
 * these. */
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

/*
 * Programs built ahead of use (the background warm-up, solver/runtime/programs.h), from any thread.
 * kd_ocl_program_ensure puts the program in the table with all of its kernels created: found
 * there, waited for while another thread builds it, or built here (*built = 1, when not NULL).
 * kd_ocl_program_build compiles what kd_ocl_kernel would (or loads it from the program cache)
 * without touching the table. Both write what they compiled to the program cache; a build on
 * a request (kd_ocl_kernel) writes nothing there: it keeps the request waiting, and on PoCL
 * fetching a binary compiles every kernel of the program (100 s for kernels/batch/batch.cl cold);
 * kd_ocl_program_adopt puts such a result in the table (ownership of handle passes, also on
 * failure). kd_ocl_program_ready: 1 when the table holds it built.
 */
int kd_ocl_program_ensure(kd_ocl_t *ocl, const char *program, kd_dtype_t dtype, const char *options,
                          int *built, kd_err_t *err);
int kd_ocl_program_build(kd_ocl_t *ocl, const char *program, kd_dtype_t dtype, const char *options,
                         cl_program *out, kd_err_t *err);
int kd_ocl_program_adopt(kd_ocl_t *ocl, const char *program, kd_dtype_t dtype, const char *options,
                         cl_program handle, kd_err_t *err);
int kd_ocl_program_ready(const kd_ocl_t *ocl, const char *program, kd_dtype_t dtype,
                         const char *options);

/* Programs kd_ocl_kernel built for its caller (a request that met a program not built yet), and
 * those it waited for while another thread (the warm-up) built them. Any thread. */
void kd_ocl_program_counts(const kd_ocl_t *ocl, uint64_t *built_on_request,
                           uint64_t *waited_on_request);

/* Binaries on disk for this device (solver/runtime/program_cache.h); the cache is not owned and
 * must outlive the device's builds. NULL: every build compiles the source. */
struct kd_program_cache;
void kd_ocl_set_program_cache(kd_ocl_t *ocl, struct kd_program_cache *cache);

/* Builds since the device was opened; safe to read from any thread. */
typedef struct kd_ocl_program_stats {
    uint64_t built_from_source;
    uint64_t loaded_from_binary;
    uint64_t binaries_rejected; /* corrupt or stale files, and binaries the driver refused */
} kd_ocl_program_stats_t;
void kd_ocl_program_stats(const kd_ocl_t *ocl, kd_ocl_program_stats_t *out);

/* What the compiled code depends on besides its source and flags (platform and its version,
 * vendor, device name and version, driver version), as text for the program cache's key. */
void kd_ocl_device_identity(const kd_ocl_t *ocl, char *buf, size_t cap);

/* "CL_OUT_OF_RESOURCES" for -5, ... */
const char *kd_ocl_error_name(cl_int status);

/* Record a failed CL call in err: KD_EDEVMEM for allocation failures, KD_EDEVICE otherwise, with
 * the call's name and the CL error name. Returns the code. */
int kd_ocl_fail(kd_err_t *err, cl_int status, const char *what);

/* Wait for the queue to drain. */
int kd_ocl_finish(kd_ocl_t *ocl, kd_err_t *err);

/* KD_OK when the device computes in `dtype`: KD_EUNSUPPORTED for float64 on a device without
 * cl_khr_fp64, KD_EINTERNAL for a type that is not float32/float64. */
int kd_ocl_check_dtype(const kd_ocl_t *ocl, kd_dtype_t dtype, kd_err_t *err);

/* The work-group size 1-D kernels launch with on this device: the largest power of two that is at
 * most 256 and at most CL_DEVICE_MAX_WORK_GROUP_SIZE. Programs get it as -DKD_WG_SIZE=N. */
size_t kd_ocl_work_group_size(const kd_ocl_t *ocl);

/*
 * clCreateBuffer of `bytes` (> 0; callers represent empty arrays as a NULL cl_mem and never ask
 * for zero bytes) after checking bytes against CL_DEVICE_MAX_MEM_ALLOC_SIZE. `what` names the
 * buffer in messages ("matrix values"). Allocation failures are KD_EDEVMEM with the size.
 */
int kd_ocl_buffer_create(kd_ocl_t *ocl, cl_mem_flags flags, size_t bytes, void *host_ptr,
                         const char *what, cl_mem *out, kd_err_t *err);

/*
 * A device buffer (flags) holding a copy of `bytes` bytes of host data, by a blocking
 * clEnqueueWriteBuffer (on NVIDIA's OpenCL five times faster from pageable memory than
 * CL_MEM_COPY_HOST_PTR, bench/NOTES.md). bytes == 0 gives *out = NULL; on failure *out is NULL
 * and nothing is left allocated.
 */
int kd_ocl_buffer_upload(kd_ocl_t *ocl, cl_mem_flags flags, const void *host, size_t bytes,
                         const char *what, cl_mem *out, kd_err_t *err);

/* Enqueue a 1-D kernel over `global` work-items (a multiple of `local`). `what` names it in
 * messages. */
int kd_ocl_launch(kd_ocl_t *ocl, cl_kernel kernel, size_t global, size_t local, const char *what,
                  kd_err_t *err);

/* Kernels enqueued on this device since it was opened (benchmarks count a sequence's launches as
 * the difference of two readings). */
uint64_t kd_ocl_launch_count(const kd_ocl_t *ocl);

/*
 * Device-side timing of whatever kd_ocl_launch enqueues between the two calls (format selection,
 * benchmarks): kd_ocl_timing_begin starts recording the launches' profiling events;
 * kd_ocl_timing_end waits for the last one and gives the time from the first kernel's start to
 * the last kernel's end in milliseconds (0 when nothing was launched), and stops recording.
 */
void kd_ocl_timing_begin(kd_ocl_t *ocl);
int kd_ocl_timing_end(kd_ocl_t *ocl, double *ms, kd_err_t *err);
/* Like kd_ocl_timing_end without waiting: stops recording and hands over the first and last
 * recorded launches' events (both NULL when nothing was launched; the same event twice when one
 * was), for kd_ocl_event_span_ms later, so several windows can be queued before one wait. */
void kd_ocl_timing_take(kd_ocl_t *ocl, cl_event *first, cl_event *last);
/* Wait for `last`; *ms = end(last) - start(first) in milliseconds (0 for NULLs). Releases both. */
int kd_ocl_event_span_ms(cl_event first, cl_event last, double *ms, kd_err_t *err);

/*
 * Device time by kernel (krylov-bench solve --profile): between the two calls every launch keeps
 * its profiling event; the end waits for them and gives, per kernel name (the `what` of the
 * launch), the launches and their summed start-to-end time. At most KD_OCL_KERNEL_TIMES_MAX
 * names; the last row gathers any more. Not for the server: every launch costs an event.
 */
#define KD_OCL_KERNEL_TIMES_MAX 48
typedef struct kd_ocl_kernel_time {
    char name[64];
    uint64_t launches;
    double ms;
} kd_ocl_kernel_time_t;
void kd_ocl_kernel_profile_begin(kd_ocl_t *ocl);
int kd_ocl_kernel_profile_end(kd_ocl_t *ocl, kd_ocl_kernel_time_t *out, size_t cap, size_t *count,
                              kd_err_t *err);

/*
 * Blocking transfers of `bytes` between host memory and mem at `offset`. Transfers of 1 MiB or
 * more go through a pinned staging buffer (CL_MEM_ALLOC_HOST_PTR, mapped once, two halves so one
 * copy, on the host's threads, overlaps the other's DMA) while staging is on (kd_ocl_set_staging;
 * on by default for a GPU: 5.8 GB/s from pageable memory on the H200 host against about 20
 * staged, docs/BENCHMARKS.md; off for a CPU device; a device that refuses the buffer falls back,
 * with a warning). kd_ocl_buffer_upload goes the same way.
 */
int kd_ocl_write(kd_ocl_t *ocl, cl_mem mem, size_t offset, size_t bytes, const void *src,
                 kd_err_t *err);
int kd_ocl_read(kd_ocl_t *ocl, cl_mem mem, size_t offset, size_t bytes, void *dst, kd_err_t *err);
void kd_ocl_set_staging(kd_ocl_t *ocl, int on);

/* clEnqueueReadBuffer / clEnqueueWriteBuffer, same arguments and result, through the test fault
 * hook (solver/runtime/ocl_fault.h): every read-back and upload goes through one of these. */
cl_int kd_ocl_enqueue_read(cl_command_queue queue, cl_mem mem, cl_bool blocking, size_t offset,
                           size_t bytes, void *dst, cl_uint nwait, const cl_event *wait,
                           cl_event *event);
cl_int kd_ocl_enqueue_write(cl_command_queue queue, cl_mem mem, cl_bool blocking, size_t offset,
                            size_t bytes, const void *src, cl_uint nwait, const cl_event *wait,
                            cl_event *event);

/* bytes of page-locked host memory (CL_MEM_ALLOC_HOST_PTR, mapped once and kept mapped), *mem
 * its buffer: a copy between it and a device buffer is a plain DMA, where NVIDIA's OpenCL moves
 * pageable memory at 3-6 GB/s. NULL (and *mem NULL, *status the CL error when status is given)
 * when the device refuses. Free with kd_ocl_host_free (it waits for the queue). */
void *kd_ocl_host_alloc(kd_ocl_t *ocl, size_t bytes, cl_mem *mem, cl_int *status);
void kd_ocl_host_free(kd_ocl_t *ocl, void *p, cl_mem mem); /* mem NULL: nothing */

/* The same copies without waiting (never staged): src must stay unchanged, and dst unread, until
 * a later blocking call on the queue (kd_ocl_finish, a blocking read) returns. */
int kd_ocl_write_async(kd_ocl_t *ocl, cl_mem mem, size_t offset, size_t bytes, const void *src,
                       kd_err_t *err);
int kd_ocl_read_async(kd_ocl_t *ocl, cl_mem mem, size_t offset, size_t bytes, void *dst,
                      kd_err_t *err);

/*
 * A second in-order queue on the same device, for short requests served while a long solve has
 * work queued (server/handlers/spmv.c): on, everything enqueued through ocl goes to the express
 * queue (made on first use) and is not ordered after the main queue's work; off, back to the main
 * queue. The caller must make sure that what the express work reads is complete on the main queue
 * (the solve calls its yield hook only after a check's read-back returned, which in an in-order
 * queue means every earlier command finished) and that the two queues never write the same buffer.
 */
int kd_ocl_express(kd_ocl_t *ocl, int on, kd_err_t *err);

/* The device's copy bandwidth in bytes per second (bytes read + written by clEnqueueCopyBuffer
 * between two buffers of up to 256 MiB, best of 3 after a warm-up), measured on first use and
 * cached; 0 when it cannot be measured. Format selection uses it as the roofline. */
double kd_ocl_copy_bandwidth(kd_ocl_t *ocl);

/*
 * For tests and tools: build `source` (preceded by the prelude, with the same options as
 * kd_ocl_kernel) outside the cache. `name` names it in messages. The caller releases *out.
 */
int kd_ocl_build_source(kd_ocl_t *ocl, const char *name, const char *source, kd_dtype_t dtype,
                        const char *options, cl_program *out, kd_err_t *err);

/* For tests: make the device look as if it lacked cl_khr_fp64 (has_fp64 = 0), or restore what
 * it reports (1). Everything that checks the dtype then answers as on such a device. */
void kd_ocl_test_set_fp64(kd_ocl_t *ocl, int has_fp64);

/* For tests: refuse allocations over `bytes` (when lower than CL_DEVICE_MAX_MEM_ALLOC_SIZE) as
 * the driver refuses larger ones: KD_EDEVMEM from kd_ocl_buffer_create. */
void kd_ocl_test_set_max_alloc(kd_ocl_t *ocl, uint64_t bytes);

/*
 * Setting kernel arguments in order without checking each call by hand: begin, add arguments,
 * then kd_ocl_args_end() reports the first clSetKernelArg that failed (and which argument). A
 * NULL cl_mem is passed as a NULL pointer, as OpenCL 1.2 allows (empty arrays).
 */
typedef struct kd_ocl_args {
    cl_kernel kernel;
    cl_uint next;
    cl_uint failed_index;
    cl_int status;
} kd_ocl_args_t;

static inline kd_ocl_args_t kd_ocl_args_begin(cl_kernel kernel)
{
    kd_ocl_args_t a = {kernel, 0, 0, CL_SUCCESS};
    return a;
}

static inline void kd_ocl_arg(kd_ocl_args_t *a, size_t size, const void *value)
{
    if (a->status == CL_SUCCESS) {
        a->status = clSetKernelArg(a->kernel, a->next, size, value);
        a->failed_index = a->next;
    }
    a->next++;
}

static inline void kd_ocl_arg_mem(kd_ocl_args_t *a, cl_mem mem)
{
    kd_ocl_arg(a, sizeof(cl_mem), mem != NULL ? (const void *)&mem : NULL);
}

static inline void kd_ocl_arg_int(kd_ocl_args_t *a, cl_int v)
{
    kd_ocl_arg(a, sizeof(v), &v);
}

static inline void kd_ocl_arg_long(kd_ocl_args_t *a, cl_long v)
{
    kd_ocl_arg(a, sizeof(v), &v);
}

/* A VALUE argument: cl_double or cl_float by dtype. */
static inline void kd_ocl_arg_value(kd_ocl_args_t *a, kd_dtype_t dtype, double v)
{
    if (dtype == KD_DTYPE_F64) {
        cl_double d = v;
        kd_ocl_arg(a, sizeof(d), &d);
    } else {
        cl_float f = (cl_float)v;
        kd_ocl_arg(a, sizeof(f), &f);
    }
}

/* KD_OK, or the first failure as KD_EDEVICE naming `what` and the argument index. */
int kd_ocl_args_end(const kd_ocl_args_t *a, const char *what, kd_err_t *err);

/*
 * A launch in one call: the kernel, its range and its arguments, in order,
 *
 *   rc = kd_ocl_run(ocl, kernel, "kd_ell_spmv", kd_ocl_range_1d(global, wg),
 *                   KD_ARGS(KD_ARG_INT(rows), KD_ARG_MEM(values), KD_ARG_VALUE(dtype, alpha)),
 *                   NULL, err);
 *
 * Each KD_ARG_* is a value that lives until the end of the enclosing block (a compound literal),
 * so the list can be written inline. A NULL cl_mem is passed as a NULL pointer (empty arrays).
 */
typedef struct kd_ocl_arg {
    size_t size;
    const void *value;
} kd_ocl_arg_t;

static inline kd_ocl_arg_t kd_ocl_arg_mem_at(const cl_mem *mem)
{
    kd_ocl_arg_t a = {sizeof(cl_mem), *mem != NULL ? (const void *)mem : NULL};
    return a;
}

static inline kd_ocl_arg_t kd_ocl_arg_value_at(kd_dtype_t dtype, const cl_double *d,
                                               const cl_float *f)
{
    kd_ocl_arg_t a = {dtype == KD_DTYPE_F64 ? sizeof(*d) : sizeof(*f),
                      dtype == KD_DTYPE_F64 ? (const void *)d : (const void *)f};
    return a;
}

#define KD_ARG_INT(v) ((kd_ocl_arg_t){sizeof(cl_int), &(cl_int){(cl_int)(v)}})
#define KD_ARG_UINT(v) ((kd_ocl_arg_t){sizeof(cl_uint), &(cl_uint){(cl_uint)(v)}})
#define KD_ARG_LONG(v) ((kd_ocl_arg_t){sizeof(cl_long), &(cl_long){(cl_long)(v)}})
#define KD_ARG_MEM(m) kd_ocl_arg_mem_at(&(cl_mem){(m)})
/* A VALUE argument: cl_double or cl_float by dtype. */
#define KD_ARG_VALUE(dtype, v)                                                                     \
    kd_ocl_arg_value_at((dtype), &(cl_double){(cl_double)(v)}, &(cl_float){(cl_float)(v)})
/* A struct passed by value (a fixed-size struct of the kernel ABI); p points at it. */
#define KD_ARG_STRUCT(p) ((kd_ocl_arg_t){sizeof(*(p)), (p)})
/* The argument list of kd_ocl_run: an array and its length. */
#define KD_ARGS(...)                                                                               \
    (const kd_ocl_arg_t[]){__VA_ARGS__},                                                           \
        sizeof((const kd_ocl_arg_t[]){__VA_ARGS__}) / sizeof(kd_ocl_arg_t)

typedef struct kd_ocl_range {
    cl_uint dims; /* 1 or 2 */
    size_t global[2];
    size_t local[2];
} kd_ocl_range_t;

static inline kd_ocl_range_t kd_ocl_range_1d(size_t global, size_t local)
{
    kd_ocl_range_t r = {1, {global, 1}, {local, 1}};
    return r;
}

static inline kd_ocl_range_t kd_ocl_range_2d(size_t global0, size_t global1, size_t local0,
                                             size_t local1)
{
    kd_ocl_range_t r = {2, {global0, global1}, {local0, local1}};
    return r;
}

/*
 * Set kernel's nargs arguments and enqueue it over range. `what` names it in messages. event:
 * NULL, or where the launch's event goes (the caller releases it). Launches inside a timing
 * window are recorded as kd_ocl_launch's are.
 */
int kd_ocl_run(kd_ocl_t *ocl, cl_kernel kernel, const char *what, kd_ocl_range_t range,
               const kd_ocl_arg_t *args, size_t nargs, cl_event *event, kd_err_t *err);

#endif
