/*
 * What every job handler shares, on the device worker thread: the checks before a job runs (its
 * cancel flag, its deadline, and that its user may see the matrix it names), host buffers for
 * vectors, the device bytes a request's vectors need, and the job's response (kd_handlers_respond,
 * which also counts a use on the user's reference).
 */
#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/recycle.h"
#include "protocol/mtx.h"
#include "protocol/writer.h"
#include "server/handlers/batch.h"
#include "server/handlers/handlers.h"
#include "server/store/quota.h"
#include "server/store/state.h"
#include "server/handlers/replies.h"
#include "server/handlers/spmv.h"
#include "server/handlers/spread.h"
#include "solver/runtime/pool.h"
#include "server/server.h"
#include "solver/formats/select.h"
#include "solver/methods/method.h"
#include "solver/precond/precond.h"
#include "solver/solve.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int kd_handlers_not_found(kd_err_t *err, const uint8_t id[16])
{
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    return kd_err_set(err, KD_ENOTFOUND, "no matrix %s on this server", hex);
}

void *kd_handlers_alloc_values(int64_t n, kd_dtype_t dtype, kd_err_t *err)
{
    size_t bytes;
    if (n < 0 || kd_mul_overflow((size_t)n, kd_dtype_size(dtype), &bytes)) {
        kd_err_set(err, KD_ETOOLARGE, "vector of %lld values is too large", (long long)n);
        return NULL;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p == NULL)
        kd_err_set(err, KD_ENOMEM, "out of host memory for a vector of %lld values", (long long)n);
    return p;
}

size_t kd_handlers_vector_bytes(kd_server_t *server, const uint8_t id[16], int64_t per_row,
                                int64_t per_col)
{
    /* The worker writes every entry, so it reads one in place: no copy of the metadata (6 KB)
     * on every request's path. */
    const kd_store_entry_t *e = kd_store_find(server->store, id);
    if (e == NULL)
        return 0;
    const kd_matrix_meta_t *meta = &e->meta;
    /* a spread matrix's device vectors here hold rank 0's rows (its columns too: it is square) */
    const int64_t rows = meta->ranks > 1 ? meta->rank_rows[0] : meta->rows;
    const int64_t cols = meta->ranks > 1 ? meta->rank_rows[0] : meta->cols;
    int64_t a, b, n;
    size_t bytes;
    if (kd_mul_overflow_i64(per_row, rows, &a) || kd_mul_overflow_i64(per_col, cols, &b) ||
        kd_add_overflow_i64(a, b, &n) || n < 0 ||
        kd_mul_overflow((size_t)n, kd_dtype_size(meta->dtype), &bytes))
        return SIZE_MAX;
    return bytes;
}

/* The matrix a job names, when it names one (matrix.multiply checks its operands itself). */
static const uint8_t *kd_handlers_target(const kd_job_t *job)
{
    switch (job->req->method) {
    case KD_METHOD_SPMV:
        return job->req->u.spmv.id;
    case KD_METHOD_SOLVE:
        return job->req->u.solve.id;
    case KD_METHOD_MATRIX_PIN:
    case KD_METHOD_MATRIX_DROP:
    case KD_METHOD_MATRIX_SHARE:
        return job->req->u.id.id;
    default:
        return NULL;
    }
}

/* Another user's matrix is not there for this one: the same code and message as an id that does
 * not exist, before anything else could tell them apart. */
int kd_handlers_visible(kd_server_t *server, const kd_job_t *job, kd_err_t *err)
{
    const uint8_t *target = kd_handlers_target(job);
    if (target != NULL) {
        const kd_store_entry_t *e = kd_store_find(server->store, target); /* worker: in place */
        if (e == NULL || !kd_meta_visible(&e->meta, job->user, job->admin))
            return kd_handlers_not_found(err, target);
    }
    return KD_OK;
}

int kd_handlers_precheck(kd_server_t *server, const kd_job_t *job, kd_err_t *err)
{
    int stop = atomic_load(&job->cancel);
    if (stop != 0)
        return kd_err_set(err, stop, "cancelled before it started");
    if (job->deadline_ns != 0 && kd_clock_ns() > job->deadline_ns)
        return kd_err_set(err, KD_ETIMEOUT, "timeout_ms = %lld passed while the request waited",
                          (long long)job->req->timeout_ms);
    return kd_handlers_visible(server, job, err);
}

void kd_handlers_respond(kd_server_t *server, kd_job_t *job, int rc, kd_writer_t *w, kd_err_t *err)
{
    const kd_method_t method = job->req->method;
    /* The user's own `uses`, which only a non-admin under an auth file is shown (kd_meta_view):
     * without one, no second search of the store on every request's answer. */
    const int per_user = rc == KD_OK && server->cfg.auth_file[0] != '\0';
    if (per_user &&
        (method == KD_METHOD_SPMV || method == KD_METHOD_SOLVE || method == KD_METHOD_MATRIX_PIN))
        kd_store_note_use(server->store, kd_handlers_target(job), job->user);
    if (per_user && method == KD_METHOD_SOLVE_BATCH)
        for (int64_t i = 0; i < job->req->u.solve_batch.nitems; i++)
            kd_store_note_use(server->store, job->req->u.solve_batch.items[i].id, job->user);
    kd_writer_t own;
    if (w == NULL) {
        kd_writer_init(&own);
        w = &own;
    }
    if (rc == KD_OK && kd_writer_failed(w))
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory encoding the response");
    if (rc != KD_OK) {
        if (err->message[0] == '\0')
            kd_err_set(err, rc, "%s", kd_strerror(rc));
        kd_writer_destroy(w);
        kd_writer_init(w);
        kd_w_error_response(w, job->msgid, rc, err->message);
        KD_DEBUG("handlers", "msgid=%llu error=%s: %s", (unsigned long long)job->msgid,
                 kd_error_wire_name(rc), err->message);
    }
    job->error_code = rc;
    job->response = kd_writer_release_parts(w, &job->response_len, &job->response_tail,
                                            &job->response_tail_len);
}

void kd_handlers_kv_vector(kd_writer_t *w, const char *key, const kd_array_t *out, void *src,
                           size_t bytes, int tail)
{
    if (out == NULL || !out->present) {
        if (tail)
            kd_w_kv_bin_tail(w, key, src, bytes);
        else
            kd_w_kv_bin(w, key, src, bytes);
        return;
    }
    const size_t room = (size_t)out->count * kd_dtype_size(out->dtype);
    if (src != out->data) {
        memcpy((void *)out->data, src, bytes < room ? bytes : room);
        if (tail)
            kd_recycle_free(src);
    }
    kd_w_str(w, key);
    kd_w_map(w, 3);
    kd_w_kv_int(w, "shm", out->shm);
    kd_w_kv_int(w, "offset", out->offset);
    kd_w_kv_int(w, "bytes", (int64_t)(bytes < room ? bytes : room));
}

int kd_handlers_check_out(const kd_array_t *out, int64_t want, const char *what,
                          const kd_array_t *in0, const char *name0, const kd_array_t *in1,
                          const char *name1, kd_err_t *err)
{
    if (!out->present)
        return KD_OK;
    const size_t size = kd_dtype_size(out->dtype);
    if (out->count != want)
        return kd_err_set(err, KD_EBADREQ,
                          "out: bytes = %llu but %s needs %lld values of %s (%llu bytes)",
                          (unsigned long long)((size_t)out->count * size), what, (long long)want,
                          kd_dtype_name(out->dtype), (unsigned long long)((size_t)want * size));
    /* The result is written while the request may still read its inputs (solve's auto reruns
     * from b; columns are written one by one): no shared byte. A region id is one memfd on its
     * connection (dispatch/shm.c refuses registering one twice), so ids and offsets tell. */
    const kd_array_t *in[2] = {in0, in1};
    const char *name[2] = {name0, name1};
    const uint64_t o0 = (uint64_t)out->offset, o1 = o0 + (uint64_t)out->count * size;
    for (int i = 0; i < 2; i++) {
        if (in[i] == NULL || !in[i]->present || in[i]->shm != out->shm || in[i]->count == 0 ||
            out->count == 0)
            continue;
        const uint64_t i0 = (uint64_t)in[i]->offset,
                       i1 = i0 + (uint64_t)in[i]->count * kd_dtype_size(in[i]->dtype);
        if (i0 < o1 && o0 < i1)
            return kd_err_set(err, KD_EBADREQ,
                              "out overlaps %s: bytes [%llu, %llu) and [%llu, %llu) of region %lld "
                              "(out must not share a byte with an input; use another range)",
                              name[i], (unsigned long long)o0, (unsigned long long)o1,
                              (unsigned long long)i0, (unsigned long long)i1, (long long)out->shm);
    }
    return KD_OK;
}
