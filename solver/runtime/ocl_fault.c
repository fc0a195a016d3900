/*
 * The test-only fault hook (see solver/runtime/ocl_fault.h): per kind, a count of operations and a
 * countdown to the one that fails; and the bytes of live device buffers, kept by a destructor
 * callback on each buffer so that what the driver really freed is counted, not what the code meant
 * to free.
 */
#include "solver/runtime/ocl_fault.h"

#ifdef KD_TEST_HOOKS

#include "common/log.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_uint_fast64_t kd_fault_counts[KD_OCL_FAULT_KINDS];
static atomic_uint_fast64_t kd_fault_armed[KD_OCL_FAULT_KINDS]; /* 0: off, else ops to go */
static atomic_int kd_fault_sticky[KD_OCL_FAULT_KINDS];
static atomic_uint_fast64_t kd_fault_injected;
/* An exec fault happened and no read-back, upload or finish has reported it yet: as a GPU's
 * driver reports a kernel's fault at the next call that synchronises with the device. */
static atomic_int kd_fault_unreported;
static atomic_int_fast64_t kd_fault_live;
static atomic_int kd_fault_env_read;

static const char *const kd_fault_names[KD_OCL_FAULT_KINDS] = {"alloc", "launch", "read", "write",
                                                               "exec"};

static const cl_int kd_fault_status[KD_OCL_FAULT_KINDS] = {
    CL_MEM_OBJECT_ALLOCATION_FAILURE, CL_INVALID_COMMAND_QUEUE,
    CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST, CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST,
    CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST};

static atomic_uint_fast64_t kd_fault_product; /* 0: off, else products to go */

void kd_ocl_fault_arm_product(uint64_t k)
{
    atomic_store(&kd_fault_product, k);
}

int kd_ocl_fault_corrupt_product(void)
{
    uint_fast64_t left = atomic_load(&kd_fault_product);
    while (left > 0)
        if (atomic_compare_exchange_weak(&kd_fault_product, &left, left - 1)) {
            if (left != 1)
                return 0;
            atomic_fetch_add(&kd_fault_injected, 1);
            KD_WARN("ocl", "injected fault kind=product (KD_TEST_HOOKS)");
            return 1;
        }
    return 0;
}

const char *kd_ocl_fault_name(kd_ocl_fault_kind_t kind)
{
    return kind < KD_OCL_FAULT_KINDS ? kd_fault_names[kind] : "?";
}

cl_int kd_ocl_fault_check(kd_ocl_fault_kind_t kind)
{
    atomic_fetch_add_explicit(&kd_fault_counts[kind], 1, memory_order_relaxed);
    if ((kind == KD_OCL_FAULT_READ || kind == KD_OCL_FAULT_WRITE) &&
        atomic_exchange(&kd_fault_unreported, 0))
        return CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST;
    uint_fast64_t left = atomic_load_explicit(&kd_fault_armed[kind], memory_order_relaxed);
    /* One thread (the device's worker) counts down; the loop only ever arms. */
    while (left > 0) {
        /* sticky: the armed operation and every later one fail (a device that stays broken) */
        const uint_fast64_t next = left == 1 && atomic_load(&kd_fault_sticky[kind]) ? 1 : left - 1;
        if (atomic_compare_exchange_weak(&kd_fault_armed[kind], &left, next)) {
            if (left != 1)
                return CL_SUCCESS;
            atomic_fetch_add(&kd_fault_injected, 1);
            KD_WARN("ocl", "injected fault kind=%s (KD_TEST_HOOKS)", kd_fault_names[kind]);
            return kd_fault_status[kind];
        }
    }
    return CL_SUCCESS;
}

cl_int kd_ocl_fault_finish(void)
{
    return atomic_exchange(&kd_fault_unreported, 0) ? CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
                                                    : CL_SUCCESS;
}

void kd_ocl_fault_arm(kd_ocl_fault_kind_t kind, uint64_t k, int sticky)
{
    if (k == 0)
        atomic_store(&kd_fault_unreported, 0);
    atomic_store(&kd_fault_sticky[kind], sticky);
    atomic_store(&kd_fault_armed[kind], k);
}

uint64_t kd_ocl_fault_count(kd_ocl_fault_kind_t kind)
{
    return atomic_load(&kd_fault_counts[kind]);
}

uint64_t kd_ocl_fault_injected(void)
{
    return atomic_load(&kd_fault_injected);
}

static void CL_CALLBACK kd_fault_destroyed(cl_mem mem, void *bytes)
{
    (void)mem;
    atomic_fetch_sub(&kd_fault_live, (int_fast64_t)(uintptr_t)bytes);
}

void kd_ocl_fault_track(cl_mem mem, size_t bytes)
{
    if (clSetMemObjectDestructorCallback(mem, kd_fault_destroyed, (void *)(uintptr_t)bytes) ==
        CL_SUCCESS)
        atomic_fetch_add(&kd_fault_live, (int_fast64_t)bytes);
}

int64_t kd_ocl_fault_live_bytes(void)
{
    return (int64_t)atomic_load(&kd_fault_live);
}

int kd_ocl_fault_drop_launch(void)
{
    if (kd_ocl_fault_check(KD_OCL_FAULT_EXEC) == CL_SUCCESS)
        return 0;
    atomic_store(&kd_fault_unreported, 1);
    return 1;
}

void kd_ocl_fault_from_env(void)
{
    if (atomic_exchange(&kd_fault_env_read, 1))
        return;
    const char *spec = getenv("KD_FAULT");
    if (spec == NULL || spec[0] == '\0')
        return;
    if (strncmp(spec, "product:", 8) == 0) {
        char *end = NULL;
        unsigned long long k = strtoull(spec + 8, &end, 10);
        if (end != spec + 8 && *end == '\0' && k > 0) {
            kd_ocl_fault_arm_product(k);
            KD_WARN("ocl", "KD_FAULT: product %llu will be corrupted", k);
            return;
        }
    }
    for (int kind = 0; kind < KD_OCL_FAULT_KINDS; kind++) {
        size_t len = strlen(kd_fault_names[kind]);
        if (strncmp(spec, kd_fault_names[kind], len) != 0 || spec[len] != ':')
            continue;
        char *end = NULL;
        unsigned long long k = strtoull(spec + len + 1, &end, 10);
        if (end != spec + len + 1 && *end == '\0' && k > 0) {
            kd_ocl_fault_arm((kd_ocl_fault_kind_t)kind, k, 0);
            KD_WARN("ocl", "KD_FAULT: operation %llu of kind %s will fail", k,
                    kd_fault_names[kind]);
            return;
        }
    }
    KD_WARN("ocl",
            "KD_FAULT=%s ignored: expected alloc:K, launch:K, read:K, write:K, exec:K or product:K "
            "(K >= 1)",
            spec);
}

#else
typedef int kd_ocl_fault_compiled_out_t; /* ISO C wants a translation unit to declare something */
#endif
