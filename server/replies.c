/*
 * Encoding of the result maps in replies.h. Field names and meanings are documented in
 * docs/PROTOCOL.md; keep the two in step.
 */
#include "server/replies.h"

static void kd_reply_stats(kd_writer_t *w, const kd_csr_stats_t *st)
{
    kd_w_str(w, "stats");
    kd_w_map(w, 6);
    kd_w_kv_int(w, "min_row", st->min_row);
    kd_w_kv_int(w, "max_row", st->max_row);
    kd_w_kv_double(w, "mean_row", st->mean_row);
    kd_w_kv_double(w, "stddev_row", st->stddev_row);
    kd_w_kv_int(w, "empty_rows", st->empty_rows);
    kd_w_kv_int(w, "nonfinite", st->nonfinite);
}

static void kd_reply_candidates(kd_writer_t *w, const kd_matrix_meta_t *meta)
{
    kd_w_str(w, "candidates");
    kd_w_array(w, (uint32_t)meta->ncandidates);
    for (int i = 0; i < meta->ncandidates; i++) {
        const kd_candidate_t *c = &meta->candidates[i];
        kd_w_map(w, 2);
        kd_w_kv_str(w, "format", kd_format_name(c->format));
        if (c->dropped[0] != '\0')
            kd_w_kv_str(w, "dropped", c->dropped);
        else
            kd_w_kv_double(w, "time_ms", c->time_ms);
    }
}

void kd_reply_meta(kd_writer_t *w, const kd_matrix_meta_t *meta, int created)
{
    kd_w_map(w, 13 + (created >= 0 ? 1 : 0));
    kd_w_kv_str(w, "id", meta->hex);
    kd_w_kv_str(w, "name", meta->name);
    kd_w_kv_int(w, "rows", meta->rows);
    kd_w_kv_int(w, "cols", meta->cols);
    kd_w_kv_int(w, "nnz", meta->nnz);
    kd_w_kv_str(w, "dtype", kd_dtype_name(meta->dtype));
    kd_w_kv_str(w, "format", kd_format_name(meta->format));
    kd_w_kv_int(w, "device_bytes", (int64_t)meta->device_bytes);
    kd_w_kv_bool(w, "pinned", meta->pinned);
    kd_w_kv_bool(w, "resident", 1);
    kd_w_kv_int(w, "uses", (int64_t)meta->uses);
    kd_reply_stats(w, &meta->stats);
    kd_reply_candidates(w, meta);
    if (created >= 0)
        kd_w_kv_bool(w, "created", created);
}

void kd_reply_status(kd_writer_t *w, kd_server_t *server, uint64_t msgid)
{
    const kd_ocl_device_desc_t *d = kd_ocl_desc(server->ocl);
    kd_store_totals_t totals;
    kd_store_totals(server->store, &totals);
    kd_w_result_begin(w, msgid);
    kd_w_map(w, 10);
    kd_w_kv_str(w, "version", KD_VERSION);
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
    kd_w_kv_int(w, "matrices", (int64_t)totals.matrices);
    kd_w_kv_int(w, "device_bytes_used", (int64_t)totals.device_bytes);
    kd_w_kv_double(w, "uptime_s", (double)(kd_now_ns() - server->start_ns) / 1e9);
    kd_w_kv_int(w, "requests", (int64_t)server->counters.requests);
    kd_w_kv_int(w, "errors", (int64_t)server->counters.errors);
    kd_w_kv_int(w, "connections", (int64_t)server->nconns);
    kd_w_kv_int(w, "queue_depth", (int64_t)kd_worker_queued(server->worker));
    kd_w_str(w, "requests_by_method");
    kd_w_map(w, KD_METHOD_COUNT);
    for (int m = 0; m < KD_METHOD_COUNT; m++)
        kd_w_kv_int(w, kd_method_name((kd_method_t)m), (int64_t)server->counters.by_method[m]);
}
