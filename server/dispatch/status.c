/*
 * server.status (status.c): the whole response, the counters and limits an admin sees, and the
 * jobs in flight per user that it, the quotas and the metrics count. On the loop thread.
 */
#include "server/dispatch/status.h"
#include "common/clock.h"
#include "common/recycle.h"
#include "server/handlers/replies.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/runtime/program_cache.h"

#include <string.h>

size_t kd_dispatch_user_jobs(const kd_server_t *server, const char *user)
{
    size_t n = 0;
    for (const kd_conn_t *c = server->conns; c != NULL; c = c->next)
        if (strcmp(c->user.name, user) == 0)
            n += c->njobs;
    return n;
}

/* {"users": {NAME: {matrices, device_bytes, state_bytes, jobs, and its max_* limits}}}: every
 * user of the auth file, what its references hold (store.h, kd_usage_t) and its requests in
 * flight. */
static void kd_reply_users(kd_writer_t *w, kd_server_t *server)
{
    const size_t n = kd_auth_count(server->auth);
    kd_w_str(w, "users");
    kd_w_map(w, (uint32_t)n);
    for (size_t i = 0; i < n; i++) {
        const kd_user_t *u = kd_auth_user(server->auth, i);
        kd_usage_t use;
        kd_store_usage(server->store, u->name, &use);
        const kd_quota_t *q = &u->quota;
        kd_w_str(w, u->name);
        kd_w_map(w, 9);
        kd_w_kv_str(w, "role", kd_role_name(u->role));
        kd_w_kv_int(w, "matrices", (int64_t)use.matrices);
        kd_w_kv_int(w, "device_bytes", (int64_t)use.device_bytes);
        kd_w_kv_int(w, "state_bytes", (int64_t)use.state_bytes);
        kd_w_kv_int(w, "jobs", (int64_t)kd_dispatch_user_jobs(server, u->name));
        kd_w_kv_int(w, "max_matrices", (int64_t)q->max_matrices); /* 0: no limit */
        kd_w_kv_int(w, "max_device_bytes", (int64_t)q->max_device_bytes);
        kd_w_kv_int(w, "max_state_bytes", (int64_t)q->max_state_bytes);
        kd_w_kv_int(w, "max_jobs", (int64_t)q->max_jobs);
    }
}

/* --client-memory (climem.c): what the connections hold, the cap, and the evictions by reason. */
static void kd_reply_client_memory(kd_writer_t *w, const kd_client_mem_t *m)
{
    kd_w_str(w, "client_memory");
    kd_w_map(w, 8);
    kd_w_kv_int(w, "used_bytes", (int64_t)m->used);
    kd_w_kv_int(w, "closing_bytes", (int64_t)m->closing);
    kd_w_kv_int(w, "peak_bytes", (int64_t)m->peak);
    kd_w_kv_int(w, "open_peak_bytes", (int64_t)m->open_peak);
    kd_w_kv_int(w, "cap_bytes", (int64_t)m->cap);
    kd_w_kv_int(w, "connection_share_bytes", (int64_t)m->share);
    kd_w_kv_int(w, "pauses", (int64_t)m->pauses);
    kd_w_str(w, "evictions");
    kd_w_map(w, KD_EVICT_REASONS);
    for (int r = 0; r < KD_EVICT_REASONS; r++)
        kd_w_kv_int(w, kd_evict_reason_name((kd_evict_reason_t)r), (int64_t)m->evictions[r]);
}

/* The process's resident size beside what malloc holds in use and what is counted
 * (client_memory, the recycle shelf), and what the idle trims gave back (trim.h). */
static void kd_reply_host_memory(kd_writer_t *w, const kd_server_t *server)
{
    kd_w_str(w, "host_memory");
    kd_w_map(w, 6);
    kd_w_kv_int(w, "rss_bytes", (int64_t)kd_trim_rss_bytes());
    kd_w_kv_int(w, "malloc_in_use_bytes", (int64_t)kd_trim_malloc_in_use());
    kd_w_kv_int(w, "recycle_idle_bytes", (int64_t)kd_recycle_idle_bytes());
    kd_w_kv_int(w, "settled_rss_bytes", (int64_t)server->trim.settled_bytes);
    kd_w_kv_int(w, "trims", (int64_t)server->trim.trims);
    kd_w_kv_int(w, "trimmed_bytes", (int64_t)server->trim.released_bytes);
}

void kd_reply_status(kd_writer_t *w, kd_server_t *server, uint64_t msgid, int full)
{
    const kd_ocl_device_desc_t *d = kd_ocl_desc(server->ocl);
    const kd_server_counters_t *c = &server->counters;
    kd_store_totals_t totals;
    kd_store_totals(server->store, &totals);
    size_t paused = 0;
    for (const kd_conn_t *conn = server->conns; conn != NULL; conn = conn->next)
        paused += conn->read_paused != 0;
    const int users = full && server->auth != NULL;
    kd_w_result_begin(w, msgid);
    kd_w_map(w, full ? 32 + (users ? 1 : 0) : 4);
    kd_w_kv_str(w, "version", KD_VERSION);
    /* For everyone: a client that wants a warm server can see how far it is. */
    kd_w_str(w, "warm_up");
    kd_reply_warm_up(w, server);
    /* What solve takes, from the tables themselves: a client lists them without guessing. */
    kd_w_str(w, "solvers");
    kd_w_map(w, 3);
    kd_w_str(w, "methods");
    kd_w_map(w, (uint32_t)kd_method_count + (kd_direct_count > 0 ? 1 : 0));
    for (size_t i = 0; i < kd_method_count; i++)
        kd_w_kv_str(w, kd_method_table[i]->name, kd_method_table[i]->summary);
    if (kd_direct_count > 0)
        kd_w_kv_str(w, KD_METHOD_DIRECT,
                    "sparse LU or Cholesky factorisation on the host, kept with the matrix");
    kd_w_str(w, "direct_solvers"); /* direct_options.solver */
    kd_w_map(w, (uint32_t)kd_direct_count);
    for (size_t i = 0; i < kd_direct_count; i++)
        kd_w_kv_str(w, kd_direct_table[i]->name, kd_direct_table[i]->summary);
    kd_w_str(w, "preconditioners");
    kd_w_map(w, (uint32_t)kd_precond_count);
    for (size_t i = 0; i < kd_precond_count; i++)
        kd_w_kv_str(w, kd_precond_table[i]->name, kd_precond_table[i]->summary);
    kd_w_str(w, "device");
    kd_w_map(w, 8);
    kd_w_kv_str(w, "name", d->name);
    kd_w_kv_str(w, "platform", d->platform);
    kd_w_kv_str(w, "vendor", d->vendor);
    kd_w_kv_str(w, "version", d->version);
    kd_w_kv_str(w, "type", d->is_gpu ? "gpu" : (d->is_cpu ? "cpu" : "other"));
    kd_w_kv_int(w, "global_mem_bytes", (int64_t)d->global_mem_bytes);
    kd_w_kv_int(w, "compute_units", d->compute_units);
    kd_w_kv_bool(w, "fp64", d->has_fp64);
    if (!full)
        return;
    kd_w_kv_int(w, "matrices", (int64_t)totals.matrices);
    kd_w_kv_int(w, "resident_matrices", (int64_t)totals.resident);
    kd_w_kv_int(w, "device_bytes_used", (int64_t)totals.device_bytes);
    kd_w_kv_int(w, "device_budget_bytes", (int64_t)server->device_budget);
    kd_w_kv_int(w, "factor_bytes_used", (int64_t)atomic_load(&server->factor_budget.used));
    kd_w_kv_int(w, "factor_budget_bytes", (int64_t)server->factor_budget.limit);
    kd_w_kv_int(w, "state_bytes", (int64_t)totals.file_bytes);
    kd_w_kv_int(w, "state_max_bytes", (int64_t)server->cfg.state_max_bytes);
    kd_w_kv_double(w, "uptime_s", (double)(kd_clock_ns() - server->start_ns) / 1e9);
    kd_w_kv_int(w, "requests", (int64_t)c->requests);
    kd_w_kv_int(w, "errors", (int64_t)c->errors);
    kd_w_kv_int(w, "connections", (int64_t)server->nconns);
    kd_w_kv_int(w, "queue_depth", (int64_t)kd_worker_queued(server->worker));
    kd_w_kv_int(w, "jobs_in_flight", (int64_t)server->jobs_in_flight);
    kd_w_kv_int(w, "shm_regions", (int64_t)server->shm_regions); /* unregistered, in use: too */
    kd_w_kv_int(w, "shm_mapped_bytes", (int64_t)server->shm_mapped);
    kd_w_str(w, "cache");
    kd_w_map(w, 9);
    kd_w_kv_int(w, "hits", (int64_t)totals.counters[KD_STORE_HITS]);
    kd_w_kv_int(w, "misses", (int64_t)totals.counters[KD_STORE_MISSES]);
    kd_w_kv_int(w, "reloads", (int64_t)totals.counters[KD_STORE_RELOADS]);
    kd_w_kv_int(w, "evictions", (int64_t)totals.counters[KD_STORE_EVICTIONS]);
    kd_w_kv_int(w, "disk_evictions", (int64_t)totals.counters[KD_STORE_DISK_EVICTIONS]);
    kd_w_kv_int(w, "corrupt_files", (int64_t)totals.counters[KD_STORE_CORRUPT]);
    kd_w_kv_int(w, "devmem_retries", (int64_t)totals.counters[KD_STORE_DEVMEM_RETRIES]);
    kd_w_kv_int(w, "memory_waits", (int64_t)totals.counters[KD_STORE_MEMORY_WAITS]);
    kd_w_kv_int(w, "memory_wait_ms", (int64_t)totals.counters[KD_STORE_MEMORY_WAIT_MS]);
    kd_ocl_program_stats_t ps;
    kd_ocl_program_stats(server->ocl, &ps);
    kd_w_str(w, "programs");
    kd_programs_progress_t wp;
    kd_programs_warmup_progress(server->warmup, &wp);
    uint64_t on_request, waited;
    kd_ocl_program_counts(server->ocl, &on_request, &waited);
    kd_w_map(w, 11);
    kd_w_kv_str(w, "warm_up", server->warmup != NULL ? "all" : "none");
    kd_w_kv_int(w, "warmed", (int64_t)wp.built);
    kd_w_kv_int(w, "warm_from_cache_list", (int64_t)wp.replayed);
    kd_w_kv_double(w, "warm_ms", wp.done ? wp.ms : 0.0);
    kd_w_kv_bool(w, "cache", server->programs != NULL);
    kd_w_kv_str(w, "cache_dir",
                server->programs != NULL ? kd_program_cache_dir(server->programs) : "");
    kd_w_kv_int(w, "compiled", (int64_t)ps.built_from_source);
    kd_w_kv_int(w, "loaded", (int64_t)ps.loaded_from_binary);
    kd_w_kv_int(w, "binaries_rejected", (int64_t)ps.binaries_rejected);
    kd_w_kv_int(w, "built_on_request", (int64_t)on_request);
    kd_w_kv_int(w, "waited_on_request", (int64_t)waited);
    kd_w_kv_int(w, "solves_batched", (int64_t)atomic_load(&server->solves_batched));
    kd_w_kv_double(w, "worker_busy_s", (double)kd_worker_busy_ns(server->worker) / 1e9);
    /* The loop thread: its life minus its time waiting in the poll (0 when not measured). */
    uint64_t idle = uv_metrics_idle_time(server->loop);
    double life = (double)(kd_clock_ns() - server->start_ns) / 1e9;
    kd_w_kv_double(w, "loop_busy_s", idle > 0 ? life - (double)idle / 1e9 : 0.0);
    kd_w_str(w, "spmv");
    kd_w_map(w, 4);
    kd_w_kv_int(w, "grouped", (int64_t)atomic_load(&server->spmv_stats.grouped));
    kd_w_kv_int(w, "batched", (int64_t)atomic_load(&server->spmv_stats.batched));
    kd_w_kv_int(w, "launches", (int64_t)atomic_load(&server->spmv_stats.launches));
    kd_w_kv_int(w, "beside_solve", (int64_t)atomic_load(&server->spmv_stats.beside_solve));
    kd_w_str(w, "connection_stats");
    kd_w_map(w, 8);
    kd_w_kv_int(w, "accepted", (int64_t)c->connections_total);
    kd_w_kv_int(w, "refused", (int64_t)c->connections_refused);
    kd_w_kv_int(w, "closed_idle", (int64_t)c->connections_idle);
    kd_w_kv_int(w, "closed_slow", (int64_t)c->connections_slow);
    kd_w_kv_int(w, "paused", (int64_t)paused);
    kd_w_kv_int(w, "timeouts_in_queue", (int64_t)c->timeouts_queued);
    kd_w_kv_int(w, "auth_failures", (int64_t)c->auth_failures);
    kd_w_kv_int(w, "closed_auth", (int64_t)c->connections_auth);
    kd_reply_client_memory(w, &server->climem);
    kd_reply_host_memory(w, server);
    kd_w_str(w, "requests_by_method");
    kd_w_map(w, KD_METHOD_COUNT);
    for (int m = 0; m < KD_METHOD_COUNT; m++)
        kd_w_kv_int(w, kd_method_name((kd_method_t)m), (int64_t)c->by_method[m]);
    /* Several internal codes share a wire name (KD_ENOMEM, KD_EIO -> INTERNAL): sum by name. */
    kd_w_str(w, "errors_by_code");
    const char *names[KD_ERROR_COUNT];
    uint64_t counts[KD_ERROR_COUNT];
    uint32_t nnames = 0;
    for (int e = 1; e < KD_ERROR_COUNT; e++) {
        if (c->errors_by_code[e] == 0)
            continue;
        const char *name = kd_error_wire_name(-e);
        uint32_t k = 0;
        while (k < nnames && strcmp(names[k], name) != 0)
            k++;
        if (k == nnames) {
            names[nnames] = name;
            counts[nnames++] = 0;
        }
        counts[k] += c->errors_by_code[e];
    }
    kd_w_map(w, nnames);
    for (uint32_t k = 0; k < nnames; k++)
        kd_w_kv_int(w, names[k], (int64_t)counts[k]);

    /* Latency per method that has been called: count, p50/p90/p99 and max in milliseconds. */
    kd_w_str(w, "latency_ms");
    uint32_t nmethods = 0;
    for (int m = 0; m < KD_METHOD_COUNT; m++)
        nmethods += server->latency[m].count > 0;
    kd_w_map(w, nmethods);
    for (int m = 0; m < KD_METHOD_COUNT; m++) {
        const kd_latency_t *lat = &server->latency[m];
        if (lat->count == 0)
            continue;
        kd_w_str(w, kd_method_name((kd_method_t)m));
        kd_w_map(w, 6);
        kd_w_kv_int(w, "count", (int64_t)lat->count);
        kd_w_kv_double(w, "mean", lat->sum_s / (double)lat->count * 1e3);
        kd_w_kv_double(w, "p50", kd_latency_quantile(lat, 0.50) * 1e3);
        kd_w_kv_double(w, "p90", kd_latency_quantile(lat, 0.90) * 1e3);
        kd_w_kv_double(w, "p99", kd_latency_quantile(lat, 0.99) * 1e3);
        kd_w_kv_double(w, "max", lat->max_s * 1e3);
    }
    if (users)
        kd_reply_users(w, server);
}
