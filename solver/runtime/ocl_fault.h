/*
 * Device faults on demand, for tests (issue 21): the k-th buffer allocation, kernel launch,
 * read-back or upload from now fails as the driver would report it, so that the error paths of a
 * put, an SpMV and a solve can be walked one failure point at a time (tests/e2e/service/test_e2e_devfault.c).
 * Compiled in only with the CMake option KD_TEST_HOOKS (which defaults to KD_BUILD_TESTS);
 * without it the checks below are inline no-ops and nothing is counted.
 *
 * Every allocation goes through kd_ocl_buffer_create, every launch through kd_ocl_run /
 * kd_ocl_launch, every read-back and upload through kd_ocl_enqueue_read / kd_ocl_enqueue_write
 * (solver/runtime/ocl.h): those are the points that consult the hook. The state is process-wide (a
 * test server has one device) and atomic, so a test thread may arm it while the device's worker
 * runs.
 *
 * A daemon built with the hooks also reads KD_FAULT=KIND:K (alloc, launch, read, write, exec)
 * once, at the first kd_ocl_open: its K-th operation of that kind fails.
 */
#ifndef KD_SOLVER_OCL_FAULT_H
#define KD_SOLVER_OCL_FAULT_H

#include <CL/cl.h>
#include <stddef.h>
#include <stdint.h>

typedef enum kd_ocl_fault_kind {
    KD_OCL_FAULT_ALLOC,  /* fails as CL_MEM_OBJECT_ALLOCATION_FAILURE: KD_EDEVMEM */
    KD_OCL_FAULT_LAUNCH, /* as CL_INVALID_COMMAND_QUEUE (a device lost mid-run): KD_EDEVICE */
    KD_OCL_FAULT_READ,   /* as CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST: KD_EDEVICE */
    KD_OCL_FAULT_WRITE,  /* likewise */
    KD_OCL_FAULT_EXEC,   /* a launch the queue accepts and the device then fails (a kernel that
                            faults): a marker is enqueued in its place, so its output is whatever
                            was there, and the next read-back, upload, kd_ocl_finish or wait
                            for a timed launch (kd_ocl_timing_end) reports
                            CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST */
    KD_OCL_FAULT_KINDS
} kd_ocl_fault_kind_t;

#ifdef KD_TEST_HOOKS
/* Count one operation of `kind`; CL_SUCCESS, or the status to fail it with when it is the armed
 * one (the hook then disarms, unless armed sticky) or, for a read-back or upload, when an exec
 * fault has not been reported yet. */
cl_int kd_ocl_fault_check(kd_ocl_fault_kind_t kind);
/* Count mem's bytes as live until the driver destroys it (kd_ocl_fault_live_bytes). */
void kd_ocl_fault_track(cl_mem mem, size_t bytes);
/* KD_FAULT from the environment, once per process. */
void kd_ocl_fault_from_env(void);
/* For a launch: 1 when it is the armed KD_OCL_FAULT_EXEC (enqueue a marker instead). */
int kd_ocl_fault_drop_launch(void);
/* For kd_ocl_finish and the wait for a timed launch: an exec fault not yet reported by a
 * read-back or upload, else CL_SUCCESS. */
cl_int kd_ocl_fault_finish(void);
/* 1 when the product being read back is the armed one of kd_ocl_fault_arm_product: the caller
 * then corrupts it (a column out of order), as a faulty SpGEMM kernel would. */
int kd_ocl_fault_corrupt_product(void);
#else
static inline int kd_ocl_fault_corrupt_product(void)
{
    return 0;
}
static inline cl_int kd_ocl_fault_check(kd_ocl_fault_kind_t kind)
{
    (void)kind;
    return CL_SUCCESS;
}
static inline void kd_ocl_fault_track(cl_mem mem, size_t bytes)
{
    (void)mem;
    (void)bytes;
}
static inline void kd_ocl_fault_from_env(void) {}
static inline int kd_ocl_fault_drop_launch(void)
{
    return 0;
}
static inline cl_int kd_ocl_fault_finish(void)
{
    return CL_SUCCESS;
}
#endif

/* The tests' side (defined only with KD_TEST_HOOKS). */

/* Fail the k-th operation of kind counted from now (k >= 1), and with sticky every one after it
 * too, until disarmed; k = 0 disarms it (and forgets an exec fault not yet reported). */
void kd_ocl_fault_arm(kd_ocl_fault_kind_t kind, uint64_t k, int sticky);
/* Corrupt the k-th SpGEMM product read back from now (k >= 1; 0 disarms). A daemon reads
 * KD_FAULT=product:K too. */
void kd_ocl_fault_arm_product(uint64_t k);
/* Operations of kind since the process started (a counting run takes the difference). */
uint64_t kd_ocl_fault_count(kd_ocl_fault_kind_t kind);
/* Faults injected so far, of any kind. */
uint64_t kd_ocl_fault_injected(void);
/* Bytes of device buffers made by kd_ocl_buffer_create that the driver has not yet destroyed. */
int64_t kd_ocl_fault_live_bytes(void);
/* "alloc", "launch", "read", "write", "exec" */
const char *kd_ocl_fault_name(kd_ocl_fault_kind_t kind);

#endif
