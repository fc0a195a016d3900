/*
 * The process's worst-case host memory, checked against the machine's RAM at start
 * (docs/OPERATIONS.md, "Host memory"):
 *
 *   base                       KD_HOSTMEM_BASE: the process, the OpenCL runtime, its programs
 * + client memory              2 x --client-memory: the cap bounds what open connections hold;
 *                              jobs already running when their connection is evicted finish
 *                              first, and what they hold was within the cap when they were taken
 * + staging                    KD_POOL_HOST_MAX: the pinned area small transfers are packed into
 * + one put's host copies      2 x --max-message: the CSR the worker builds from the request (the
 *                              request itself is client memory) and the format's image of it
 * + matrices' host copies      without --state-dir every matrix keeps its CSR on the host: up to
 *                              the device budget; with one they are read back from files
 * + device memory              on a CPU device (PoCL) "device memory" is host memory: the budget
 * (+ factors                   --factor-memory: method "direct"'s factors on the host, charged
 *                              before each is computed; resolved here (0: RAM / 4, at most 4 GiB)
 *                              but not part of the sum: an operator sets it beside the rest)
 *
 * A budget given as a percentage of the device (the default, 90%) is lowered to what fits, with a
 * warning, since the device's size says nothing about the host's; a budget given in bytes, or a
 * client cap, that cannot fit is refused with the terms named. Where the machine's RAM cannot be
 * read (sysconf fails) nothing is refused.
 */
#include "common/log.h"
#include "server/server.h"
#include "solver/runtime/pool.h"

#include <unistd.h>

#define KD_HOSTMEM_BASE ((size_t)256 << 20)
#define KD_HOSTMEM_CLIENT_DEFAULT ((size_t)1 << 30)
#define KD_HOSTMEM_FACTOR_DEFAULT ((size_t)4 << 30)
#define KD_HOSTMEM_BUDGET_MIN                                                                      \
    ((size_t)64 << 20) /* a fitted budget smaller than this is refused                             \
                        */

static size_t kd_hostmem_add(size_t a, size_t b)
{
    return a > SIZE_MAX - b ? SIZE_MAX : a + b;
}

int kd_hostmem_check(kd_server_t *server, kd_err_t *err)
{
    kd_config_t *cfg = &server->cfg;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    size_t ram = pages > 0 && page > 0 && (size_t)pages <= SIZE_MAX / (size_t)page
                     ? (size_t)pages * (size_t)page
                     : 0;
    /* --factor-memory 0: a quarter of RAM, at most KD_HOSTMEM_FACTOR_DEFAULT (4 GiB) */
    if (cfg->factor_memory == 0)
        cfg->factor_memory =
            ram > 0 && ram / 4 < KD_HOSTMEM_FACTOR_DEFAULT ? ram / 4 : KD_HOSTMEM_FACTOR_DEFAULT;
    server->factor_budget.limit = cfg->factor_memory;
    if (cfg->client_memory == 0)
        cfg->client_memory =
            ram > 0 && ram / 8 < KD_HOSTMEM_CLIENT_DEFAULT ? ram / 8 : KD_HOSTMEM_CLIENT_DEFAULT;
    /* A message arrives into a buffer grown by doubling, counted as client memory: one larger
     * than about half the cap gets its sender evicted. Said once here rather than at each. */
    if (cfg->max_message > cfg->client_memory / 2)
        KD_INFO("server",
                "--max-message %zu: a request over about %zu bytes (half of --client-memory %zu) "
                "gets its client evicted while it arrives; raise --client-memory where such "
                "uploads are expected",
                cfg->max_message, cfg->client_memory / 2, cfg->client_memory);
    if (ram == 0) {
        KD_WARN("server", "cannot read the machine's RAM (sysconf): the worst-case host memory is "
                          "not checked");
        return KD_OK;
    }
    const kd_ocl_device_desc_t *desc = kd_ocl_desc(server->ocl);
    const int budget_on_host = desc->is_cpu || !desc->is_gpu; /* device memory is host memory */
    const int copies_on_host = cfg->state_dir[0] == '\0';
    const size_t per_budget = (size_t)budget_on_host + (size_t)copies_on_host;
    size_t put = cfg->max_message > SIZE_MAX / 2 ? SIZE_MAX : 2 * cfg->max_message;
    size_t clients = cfg->client_memory > SIZE_MAX / 2 ? SIZE_MAX : 2 * cfg->client_memory;
    size_t fixed = kd_hostmem_add(kd_hostmem_add(KD_HOSTMEM_BASE, clients),
                                  kd_hostmem_add(KD_POOL_HOST_MAX, put));
    if (fixed > ram)
        return kd_err_set(err, KD_EBADREQ,
                          "worst-case host memory %zu bytes is more than this machine's RAM (%zu "
                          "bytes): %zu base + %zu for clients (2 x --client-memory %zu) + %zu "
                          "staging + %zu for one put (2 x --max-message); lower --client-memory "
                          "or --max-message (docs/OPERATIONS.md, \"Host memory\")",
                          fixed, ram, KD_HOSTMEM_BASE, clients, cfg->client_memory,
                          KD_POOL_HOST_MAX, put);
    if (per_budget == 0) {
        KD_INFO("server", "worst-case host memory %zu bytes of %zu", fixed, ram);
        return KD_OK;
    }
    size_t budget =
        cfg->device_memory_bytes > 0
            ? cfg->device_memory_bytes
            : (size_t)((double)desc->global_mem_bytes * cfg->device_memory_percent / 100.0);
    size_t room = (ram - fixed) / per_budget;
    if (budget > room) {
        if (cfg->device_memory_bytes > 0 || room < KD_HOSTMEM_BUDGET_MIN)
            return kd_err_set(
                err, KD_EBADREQ,
                "worst-case host memory is more than this machine's RAM (%zu bytes): %zu fixed "
                "(base, 2 x --client-memory %zu, staging, one put) + %zu x the device budget of "
                "%zu "
                "bytes (%s%s%s); lower --device-memory, --client-memory or --max-message%s "
                "(docs/OPERATIONS.md, \"Host memory\")",
                ram, fixed, cfg->client_memory, per_budget, budget,
                budget_on_host ? "a CPU device's memory is host memory" : "",
                budget_on_host && copies_on_host ? "; " : "",
                copies_on_host ? "without --state-dir matrices keep a host copy" : "",
                copies_on_host ? ", or give --state-dir" : "");
        KD_WARN("server",
                "device budget lowered from %zu to %zu bytes so the worst-case host memory fits "
                "this machine's RAM (%zu bytes): %s%s%s",
                budget, room, ram, budget_on_host ? "a CPU device's memory is host memory" : "",
                budget_on_host && copies_on_host ? "; " : "",
                copies_on_host ? "without --state-dir matrices keep a host copy" : "");
        cfg->device_memory_bytes = room;
        budget = room;
    }
    KD_INFO("server", "worst-case host memory %zu bytes of %zu (%zu fixed + %zu x budget %zu)",
            kd_hostmem_add(fixed, budget * per_budget), ram, fixed, per_budget, budget);
    return KD_OK;
}
