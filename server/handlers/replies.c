/*
 * Encoding of the result maps in replies.h. Field names and meanings are documented in
 * docs/PROTOCOL.md; keep the two in step.
 */
#include "server/handlers/replies.h"
#include "common/recycle.h"
#include "solver/runtime/program_cache.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "common/clock.h"

#include <string.h>

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

static void kd_reply_detail(kd_writer_t *w, const kd_format_detail_t *detail)
{
    kd_w_str(w, "format_detail");
    kd_w_map(w, (uint32_t)detail->count);
    for (int i = 0; i < detail->count; i++)
        kd_w_kv_int(w, detail->items[i].name, detail->items[i].value);
}

static void kd_reply_ints(kd_writer_t *w, const char *key, const int64_t *v, int n)
{
    kd_w_str(w, key);
    kd_w_array(w, (uint32_t)n);
    for (int i = 0; i < n; i++)
        kd_w_int(w, v[i]);
}

/* How the matrix is spread over an MPI job's ranks (server/handlers/spread.c): `distributed` (put
 * so), `ranks` (1: whole on rank 0), and per rank when spread. */
static void kd_reply_spread(kd_writer_t *w, const kd_matrix_meta_t *meta, int spread)
{
    kd_w_kv_bool(w, "distributed", meta->distributed);
    kd_w_kv_int(w, "ranks", meta->ranks > 1 ? meta->ranks : 1);
    if (!spread)
        return;
    kd_reply_ints(w, "rows_per_rank", meta->rank_rows, meta->ranks);
    kd_reply_ints(w, "nnz_per_rank", meta->rank_nnz, meta->ranks);
    kd_w_str(w, "halo");
    kd_w_map(w, 2);
    kd_reply_ints(w, "ghosts", meta->rank_ghosts, meta->ranks);
    kd_reply_ints(w, "sends", meta->rank_sends, meta->ranks);
}

void kd_reply_meta(kd_writer_t *w, const kd_matrix_meta_t *meta, int created)
{
    kd_reply_meta_extra(w, meta, created, 0);
}

void kd_reply_meta_extra(kd_writer_t *w, const kd_matrix_meta_t *meta, int created, uint32_t extra)
{
    const int spread = meta->ranks > 1 && meta->ranks <= KD_META_RANKS_MAX;
    /* a batch shows one system's shape and how many systems it holds */
    const int64_t k = meta->batch > 0 ? meta->batch : 1;
    kd_w_map(w, 21 + (meta->hide_selection ? 0 : 1) + (spread ? 3 : 0) + (created >= 0 ? 1 : 0) +
                    (meta->batch > 0 ? 1 : 0) + (meta->has_pattern ? 1 : 0) +
                    (meta->has_like ? 1 : 0) + extra);
    kd_w_kv_str(w, "id", meta->hex);
    kd_w_kv_str(w, "name", meta->name);
    kd_w_kv_int(w, "rows", meta->rows / k);
    kd_w_kv_int(w, "cols", meta->cols / k);
    kd_w_kv_int(w, "nnz", meta->nnz / k);
    if (meta->batch > 0)
        kd_w_kv_int(w, "batch", meta->batch);
    kd_w_kv_str(w, "dtype", kd_dtype_name(meta->dtype));
    kd_w_kv_str(w, "format", kd_format_name(meta->format));
    kd_w_kv_int(w, "device_bytes", (int64_t)meta->device_bytes);
    kd_w_kv_bool(w, "pinned", meta->pinned);
    kd_w_kv_bool(w, "resident", meta->resident);
    kd_w_kv_str(w, "persisted", kd_persist_name(meta->persist));
    kd_w_kv_bool(w, "durable", meta->stored && !meta->behind);
    kd_w_kv_int(w, "uses", (int64_t)meta->uses);
    kd_reply_stats(w, &meta->stats);
    if (!meta->hide_selection)
        kd_reply_candidates(w, meta);
    kd_reply_detail(w, &meta->detail);
    kd_w_kv_str(w, "reorder", kd_reorder_name(meta->reorder));
    kd_w_kv_str(w, "reorder_reason", meta->reorder_reason);
    kd_w_str(w, "symmetric");
    if (meta->symmetric >= 0)
        kd_w_bool(w, meta->symmetric);
    else
        kd_w_nil(w); /* a state file from before the scan, not loaded since */
    kd_w_str(w, "bandwidth");
    kd_w_map(w, 2);
    kd_w_kv_int(w, "before", meta->bandwidth_before);
    kd_w_kv_int(w, "after", meta->bandwidth_after);
    kd_reply_spread(w, meta, spread);
    if (meta->has_pattern) {
        char hex[KD_ID_HEX_LEN + 1];
        kd_id_to_hex(meta->pattern, hex);
        kd_w_kv_str(w, "pattern", hex);
    }
    if (meta->has_like) /* the like matrix's preconditioners its solves refreshed */
        kd_w_kv_int(w, "preconditioners_refreshed", meta->preconds_refreshed);
    if (created >= 0)
        kd_w_kv_bool(w, "created", created);
}

void kd_reply_meta_owned(kd_writer_t *w, kd_matrix_meta_t *meta, const char *user,
                         kd_meta_scope_t scope, int owners)
{
    kd_meta_view(meta, user, scope);
    kd_reply_meta_extra(w, meta, -1, owners ? 1 : 0);
    if (!owners)
        return;
    kd_w_str(w, "owners");
    kd_w_array(w, (uint32_t)meta->nowners);
    for (int i = 0; i < meta->nowners; i++) {
        kd_w_map(w, 2);
        kd_w_kv_str(w, "user", meta->owners[i].name);
        kd_w_kv_bool(w, "pinned", meta->owners[i].pinned);
    }
}
