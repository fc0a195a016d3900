/*
 * libFuzzer target for what the server does with bytes from a socket before any matrix is
 * involved: the framer (protocol/frame.c) fed the input in two pieces (split where the first byte
 * says), then the request decoder (protocol/request.c) on every whole message it emits, and the
 * decoder once more on the whole input as one message. Small limits make the TOO_LARGE paths
 * reachable. Checked beyond "no crash, no leak, no UB" (ASan, UBSan):
 *   - a decoded request's arrays are readable to their last byte (ASan sees any overrun) and
 *     their counts agree with each other as the decoder promises (indptr = rows + 1, ...);
 *   - a refusal carries a message and a code from the documented set;
 *   - the framer never holds more than max_message plus one read's worth of bytes.
 * Seed corpus: tests/fuzz/corpus/request/ (one request per method and form, and requests
 * declaring extreme sizes, written by tests/fuzz/gen_request_corpus.c); dictionary:
 * tests/fuzz/request.dict (method and parameter names, integers at the edges of int32/int64).
 */
#include "protocol/frame.h"
#include "protocol/request.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t kd_sink;

static void touch(const kd_array_t *a)
{
    if (!a->present)
        return;
    if (a->count < 0)
        abort();
    if (a->shm != 0) { /* a region reference: the server resolves it; nothing to read yet */
        if (a->shm < 0 || a->offset < 0 || a->data != NULL ||
            a->offset % (int64_t)kd_dtype_size(a->dtype) != 0)
            abort();
        return;
    }
    const uint8_t *p = a->data;
    size_t bytes = (size_t)a->count * kd_dtype_size(a->dtype);
    uint8_t x = 0;
    for (size_t i = 0; i < bytes; i++)
        x ^= p[i];
    kd_sink = x;
}

static void check_request(const kd_request_t *req, const kd_proto_limits_t *lim)
{
    if ((unsigned)req->method >= KD_METHOD_COUNT || req->timeout_ms < 0)
        abort();
    switch (req->method) {
    case KD_METHOD_MATRIX_PUT: {
        const kd_put_request_t *p = &req->u.put;
        touch(&p->indptr);
        touch(&p->indices);
        touch(&p->row);
        touch(&p->col);
        touch(&p->values);
        if (p->kind == KD_PUT_MTX) {
            uint8_t x = 0;
            for (size_t i = 0; i < p->mtx_len; i++)
                x ^= (uint8_t)p->mtx[i];
            kd_sink = x;
        } else {
            if (p->rows < 0 || p->cols < 0 || p->rows > lim->max_rows || p->cols > lim->max_cols)
                abort();
            if (p->values.count > lim->max_nnz)
                abort();
        }
        /* a batch of k systems: the pattern's nnz entries, k x nnz values, the whole batch
         * within the limits, and a stored entry per row (its expansion is bounded) */
        const int64_t k = p->batch > 0 ? p->batch : 1;
        if (p->batch < 0 || (p->batch > 0 && p->kind != KD_PUT_CSR))
            abort();
        int64_t all_rows, all_cols;
        if (p->batch > 0 &&
            (__builtin_mul_overflow(p->rows, k, &all_rows) ||
             __builtin_mul_overflow(p->cols, k, &all_cols) || all_rows > lim->max_rows ||
             all_cols > lim->max_cols || p->indices.count < p->rows))
            abort();
        if (p->kind == KD_PUT_CSR && (p->indptr.count != p->rows + 1 || p->values.count % k != 0 ||
                                      p->indices.count != p->values.count / k))
            abort();
        if (p->kind == KD_PUT_COO &&
            (p->row.count != p->col.count || p->row.count != p->values.count))
            abort();
        if (memchr(p->options.name, '\0', sizeof(p->options.name)) == NULL)
            abort();
        break;
    }
    case KD_METHOD_MATRIX_MULTIPLY: {
        const kd_matrix_options_t *o = &req->u.multiply.options;
        if (memchr(o->name, '\0', sizeof(o->name)) == NULL ||
            memchr(o->format, '\0', sizeof(o->format)) == NULL)
            abort();
        if (req->u.multiply.transpose_a != 0 && req->u.multiply.transpose_a != 1)
            abort();
        break;
    }
    case KD_METHOD_SPMV:
        touch(&req->u.spmv.x);
        touch(&req->u.spmv.y);
        touch(&req->u.spmv.out);
        /* ncols multiplies the matrix's rows on the server: bounded here, before any lookup */
        if (req->u.spmv.ncols < 1 || req->u.spmv.ncols > lim->max_nrhs ||
            req->u.spmv.x.count % req->u.spmv.ncols != 0)
            abort();
        break;
    case KD_METHOD_SOLVE:
        touch(&req->u.solve.b);
        touch(&req->u.solve.x0);
        touch(&req->u.solve.out);
        touch(&req->u.solve.rtols);
        touch(&req->u.solve.atols);
        touch(&req->u.solve.maxiters);
        if (req->u.solve.nrhs < 1 || req->u.solve.nrhs > lim->max_nrhs)
            abort();
        if (req->u.solve.restart < 0 || req->u.solve.restart > KD_RESTART_MAX ||
            memchr(req->u.solve.method, '\0', sizeof(req->u.solve.method)) == NULL)
            abort();
        if (req->u.solve.b.count % req->u.solve.nrhs != 0)
            abort();
        if (req->u.solve.x0.present && req->u.solve.x0.count != req->u.solve.b.count)
            abort();
        break;
    case KD_METHOD_SOLVE_BATCH: {
        /* every item's arrays readable, their b counts summing to rows within the limits, an x0
         * as long as its b, and the item count within its cap */
        const kd_solve_batch_request_t *q = &req->u.solve_batch;
        if (q->nitems < 1 || q->nitems > KD_SOLVE_ITEMS_MAX || q->items == NULL ||
            q->restart < 0 || q->restart > KD_RESTART_MAX || q->maxiter < -1 ||
            (lim->max_rows > 0 && q->rows > lim->max_rows))
            abort();
        int64_t rows = 0;
        for (int64_t i = 0; i < q->nitems; i++) {
            touch(&q->items[i].b);
            touch(&q->items[i].x0);
            if (q->items[i].x0.present && q->items[i].x0.count != q->items[i].b.count)
                abort();
            rows += q->items[i].b.count;
        }
        if (rows != q->rows)
            abort();
        break;
    }
    case KD_METHOD_AUTH: {
        /* The server copies the name into logs and compares the token: both must be bounded,
         * the name a C string, the token readable to its end. */
        const kd_auth_request_t *a = &req->u.auth;
        const char *end = memchr(a->name, '\0', sizeof(a->name));
        if (end == NULL || end == a->name || a->token_len > KD_AUTH_TOKEN_MAX ||
            (a->token_len > 0 && a->token == NULL))
            abort();
        uint8_t x = 0;
        for (size_t i = 0; i < a->token_len; i++)
            x ^= (uint8_t)a->token[i];
        kd_sink = x;
        break;
    }
    default:
        break;
    }
}

static void decode(const void *bytes, size_t len, const kd_proto_limits_t *lim)
{
    void *copy = malloc(len ? len : 1);
    if (copy == NULL)
        return;
    memcpy(copy, bytes, len);
    kd_request_t *req = NULL;
    kd_decode_error_t derr;
    int rc = kd_request_decode(copy, len, lim, &req, &derr); /* takes copy */
    if (rc == KD_OK) {
        if (req == NULL)
            abort();
        check_request(req, lim);
        kd_request_free(req);
        return;
    }
    if (req != NULL || derr.err.message[0] == '\0')
        abort();
    if (rc != KD_EBADREQ && rc != KD_ETOOLARGE && rc != KD_EPROTO && rc != KD_ENOMEM &&
        rc != KD_EUNSUPPORTED)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    kd_proto_limits_t lim = {.max_rows = 1000,
                             .max_cols = 1000,
                             .max_nnz = 5000,
                             .max_nrhs = 4,
                             .max_array_elements = 64};
    kd_frame_limits_t flim = {.max_message = 4096, .max_elements = 128, .max_depth = 16};
    kd_frame_t *frame = NULL;
    if (kd_frame_new(&flim, &frame) != 0)
        return 0;
    size_t split = size > 0 ? data[0] % (size + 1) : 0;
    const uint8_t *pieces[2] = {data, data + split};
    size_t lens[2] = {split, size - split};
    for (int p = 0; p < 2; p++) {
        char *space;
        size_t room;
        size_t off = 0;
        while (off < lens[p]) {
            if (kd_frame_reserve(frame, 1024, &space, &room) != 0)
                goto done;
            size_t n = lens[p] - off < room ? lens[p] - off : room;
            memcpy(space, pieces[p] + off, n);
            kd_frame_commit(frame, n);
            off += n;
            for (;;) {
                kd_frame_event_t ev;
                kd_frame_kind_t kind = kd_frame_next(frame, &ev);
                if (kind == KD_FRAME_NEED_MORE)
                    break;
                if (kind == KD_FRAME_MESSAGE) {
                    if (ev.len > flim.max_message)
                        abort();
                    decode(ev.data, ev.len, &lim);
                    free(ev.data);
                } else if (kind == KD_FRAME_TOO_LARGE) {
                    if (ev.message[0] == '\0')
                        abort();
                } else {
                    goto done; /* not msgpack: the server closes the connection here */
                }
            }
            if (kd_frame_buffered(frame) > flim.max_message + 2048)
                abort();
        }
    }
done:
    kd_frame_free(frame);
    decode(data, size, &lim);
    return 0;
}
