/*
 * matrix.multiply on the device worker: C = op(A) B for two matrices of the server (op(A) = A or
 * A^T), kept as a new matrix exactly as matrix.put keeps an upload.
 *
 * The operands are the matrices' canonical CSR from the host — their state files, checked as a
 * reload checks them, or the store's host copies without a state directory — not their device
 * copies, which are in whatever SpMV format the selection chose (and maybe reordered). What can be
 * refused is refused before anything big exists: ids, dtypes and shapes from the metadata, then
 * the products' count from A's column indices and B's row lengths (O(nnz(A)) on the host). Then
 * op(A) and B go to the device as plain CSR inside the device budget, solver/products/spgemm.c multiplies
 * them under the server's limits (max-nnz, the budget left), C comes back, the device copies are
 * freed, and C goes through kd_handlers_admit: content id, the same product twice is one matrix,
 * format selection, state file.
 */
#include "common/clock.h"
#include "common/checked.h"
#include "common/log.h"
#include "server/handlers/handlers.h"
#include "server/handlers/replies.h"
#include "solver/runtime/ocl_fault.h"
#include "solver/products/spgemm.h"

#include <stdio.h>
#include <string.h>

/* The operands on the host: op(A) and B, and the copies this request made (freed at the end). */
typedef struct kd_operands {
    const kd_csr_t *a, *b;
    kd_csr_t *owned[3];
} kd_operands_t;

static void kd_operands_free(kd_operands_t *ops)
{
    for (int i = 0; i < 3; i++)
        kd_csr_free(ops->owned[i]);
    memset(ops, 0, sizeof(*ops));
}

/* An operand the caller may see (another user's is not found, as a missing one). */
static int kd_multiply_meta(kd_server_t *server, const kd_job_t *job, const uint8_t id[16],
                            const char *which, kd_matrix_meta_t *meta, kd_err_t *err)
{
    if (kd_store_get_meta(server->store, id, meta) == KD_OK &&
        kd_meta_visible(meta, job->user, job->admin))
        return KD_OK;
    char hex[KD_ID_HEX_LEN + 1];
    kd_id_to_hex(id, hex);
    return kd_err_set(err, KD_ENOTFOUND, "%s: no matrix %s on this server", which, hex);
}

/* The checks the metadata answers: both ids exist, one dtype, op(A)'s columns are B's rows, C's
 * shape is within the server's limits. */
static int kd_multiply_check(kd_server_t *server, const kd_job_t *job,
                             const kd_multiply_request_t *q, kd_err_t *err)
{
    kd_matrix_meta_t a, b;
    int rc;
    if ((rc = kd_multiply_meta(server, job, q->a, "a", &a, err)) != KD_OK ||
        (rc = kd_multiply_meta(server, job, q->b, "b", &b, err)) != KD_OK)
        return rc;
    if (a.dtype != b.dtype)
        return kd_err_set(err, KD_EBADREQ,
                          "A is %s and B is %s: matrix.multiply takes two matrices of one dtype "
                          "(upload one of them again with the other's)",
                          kd_dtype_name(a.dtype), kd_dtype_name(b.dtype));
    int64_t m = q->transpose_a ? a.cols : a.rows, k = q->transpose_a ? a.rows : a.cols;
    if (k != b.rows)
        return kd_err_set(err, KD_EBADREQ,
                          "cannot multiply %s (%lld x %lld) by B (%lld x %lld): %s has %lld "
                          "columns and B has %lld rows",
                          q->transpose_a ? "A^T" : "A", (long long)m, (long long)k,
                          (long long)b.rows, (long long)b.cols, q->transpose_a ? "A^T" : "A",
                          (long long)k, (long long)b.rows);
    rc = kd_csr_check_shape(m, b.cols, 0, &server->csr_limits, err);
    if (rc != KD_OK)
        return kd_err_prefix(err, "the product");
    return KD_OK;
}

/* op(A) and B on the host. */
static int kd_multiply_operands(kd_server_t *server, const kd_multiply_request_t *q,
                                kd_operands_t *ops, kd_err_t *err)
{
    const kd_csr_t *a;
    int rc = kd_cache_host_csr(server, q->a, &a, &ops->owned[0], err);
    if (rc != KD_OK)
        return kd_err_prefix(err, "a");
    if (memcmp(q->a, q->b, 16) == 0) {
        ops->b = a;
    } else if ((rc = kd_cache_host_csr(server, q->b, &ops->b, &ops->owned[1], err)) != KD_OK) {
        return kd_err_prefix(err, "b");
    }
    ops->a = a;
    if (q->transpose_a) {
        if ((rc = kd_csr_transpose(a, &ops->owned[2], err)) != KD_OK)
            return rc;
        ops->a = ops->owned[2];
    }
    return KD_OK;
}

/* The products a_ik b_kj the product sums: over A's entries, B's row lengths. */
static int64_t kd_multiply_products(const kd_csr_t *a, const kd_csr_t *b)
{
    int64_t products = 0;
    for (int64_t i = 0; i < a->nnz; i++) {
        int32_t k = a->indices[i];
        products += b->indptr[k + 1] - b->indptr[k];
    }
    return products;
}

/* Room in the device budget for op(A), B and C. C's bound (every product a distinct entry) is
 * reserved when it fits; otherwise every unpinned matrix is evicted and the symbolic phase
 * measures C against what is free. *free_bytes: the budget left once the operands are up. */
static int kd_multiply_make_room(kd_server_t *server, const kd_operands_t *ops, int64_t products,
                                 size_t *free_bytes, kd_err_t *err)
{
    const kd_csr_t *a = ops->a, *b = ops->b;
    size_t operands = kd_cache_estimate(a->rows, a->nnz, a->dtype);
    if (b != a &&
        kd_add_overflow(operands, kd_cache_estimate(b->rows, b->nnz, b->dtype), &operands))
        operands = SIZE_MAX;
    int64_t dense = a->rows * b->cols; /* both < 2^31 */
    size_t bound = kd_cache_estimate(a->rows, products < dense ? products : dense, a->dtype), need;
    if (kd_add_overflow(operands, bound, &need))
        need = SIZE_MAX;
    char what[160];
    snprintf(what, sizeof(what), "the product of a %lld x %lld and a %lld x %lld matrix",
             (long long)a->rows, (long long)a->cols, (long long)b->rows, (long long)b->cols);
    int rc = kd_cache_reserve(server, need, NULL, what, err);
    if (rc == KD_EDEVMEM) {
        /* the operands must fit (else nothing is evicted); then make all the room there is */
        kd_err_clear(err);
        snprintf(what, sizeof(what), "the operands (%lld x %lld and %lld x %lld) of a product",
                 (long long)a->rows, (long long)a->cols, (long long)b->rows, (long long)b->cols);
        if ((rc = kd_cache_reserve(server, operands, NULL, what, err)) != KD_OK)
            return rc;
        size_t evicted = kd_cache_evict_all(server, NULL);
        KD_DEBUG("multiply", "C's bound of %zu bytes does not fit: evicted %zu matrices", bound,
                 evicted);
        server->budget_refused = 1; /* from here, evicting more cannot help */
    } else if (rc != KD_OK) {
        return rc;
    }
    kd_store_totals_t t;
    kd_store_totals(server->store, &t);
    size_t used = t.device_bytes + operands;
    *free_bytes = used < server->device_budget ? server->device_budget - used : 0;
    return KD_OK;
}

/* The test hook's corruption (KD_FAULT=product:K): the first row of two or more entries gets its
 * first two columns swapped, or, where there is none, the first entry a column out of range. */
static void kd_multiply_corrupt(kd_csr_t *c)
{
    for (int64_t i = 0; i < c->rows; i++)
        if (c->indptr[i + 1] - c->indptr[i] >= 2) {
            int32_t *col = c->indices + c->indptr[i], t = col[0];
            col[0] = col[1];
            col[1] = t;
            return;
        }
    if (c->nnz > 0)
        c->indices[0] = (int32_t)c->cols;
}

/* C = op(A) B on the device, back on the host in *c. */
static int kd_multiply_on_device(kd_server_t *server, const kd_operands_t *ops, size_t free_bytes,
                                 kd_csr_t **c, kd_spgemm_stats_t *stats, kd_err_t *err)
{
    kd_csr_device_t da = {0}, db = {0}, dc = {0};
    const kd_csr_device_t *right = &da;
    int rc = kd_csr_device_upload(server->ocl, ops->a, &da, err);
    if (rc == KD_OK && ops->b != ops->a) {
        rc = kd_csr_device_upload(server->ocl, ops->b, &db, err);
        right = &db;
    }
    /* a max_device_bytes of 0 would mean no limit: a full budget leaves 1 byte */
    kd_spgemm_limits_t limits = {.max_nnz = server->csr_limits.max_nnz,
                                 .max_device_bytes = free_bytes > 0 ? free_bytes : 1};
    if (rc == KD_OK &&
        (rc = kd_spgemm(server->ocl, &da, right, &limits, &dc, stats, err)) == KD_EDEVMEM)
        kd_err_prefix(err, "device-memory budget %zu bytes, %zu of them free for the product",
                      server->device_budget, free_bytes);
    if (rc == KD_OK)
        rc = kd_csr_device_download(server->ocl, &dc, c, err);
    if (rc == KD_OK && kd_ocl_fault_corrupt_product())
        kd_multiply_corrupt(*c);
    /* checked like an upload before anything analyses or stores it */
    if (rc == KD_OK && (rc = kd_csr_validate(*c, err)) != KD_OK) {
        kd_err_prefix(err, "matrix.multiply: the device's product is not a valid matrix, nothing "
                           "was stored");
        KD_ERROR("store", "%s", err->message);
        kd_csr_free(*c);
        *c = NULL;
    }
    kd_csr_device_release(&dc);
    kd_csr_device_release(&db);
    kd_csr_device_release(&da);
    return rc;
}

static void kd_multiply_reply(kd_writer_t *w, uint64_t msgid, const kd_matrix_meta_t *meta,
                              int created, const kd_matrix_options_t *opt,
                              const kd_spgemm_stats_t *stats, double ms)
{
    char notice[256];
    const int noted = kd_handlers_notice(opt, meta, created, notice, sizeof(notice));
    kd_w_result_begin(w, msgid);
    kd_reply_meta_extra(w, meta, created, noted ? 2 : 1);
    if (noted)
        kd_w_kv_str(w, "notice", notice);
    kd_w_str(w, "spgemm");
    kd_w_map(w, 3);
    kd_w_kv_int(w, "products", stats->products);
    kd_w_kv_int(w, "nnz", stats->nnz);
    kd_w_kv_double(w, "time_ms", ms);
}

int kd_handle_multiply(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err)
{
    const kd_multiply_request_t *q = &job->req->u.multiply;
    kd_operands_t ops = {0};
    kd_csr_t *c = NULL;
    kd_spgemm_stats_t stats = {0};
    size_t free_bytes = 0;
    int rc = kd_multiply_check(server, job, q, err);
    if (rc != KD_OK)
        return rc;
    uint64_t t0 = kd_clock_ns();
    if ((rc = kd_multiply_operands(server, q, &ops, err)) != KD_OK)
        goto fail;
    int64_t products = kd_multiply_products(ops.a, ops.b);
    if (products > KD_CSR_INDEX_MAX) {
        rc = kd_err_set(err, KD_ETOOLARGE,
                        "the product sums %lld products of entries, more than %d (the device "
                        "kernels count them in 32 bits)",
                        (long long)products, KD_CSR_INDEX_MAX);
        goto fail;
    }
    if ((rc = kd_multiply_make_room(server, &ops, products, &free_bytes, err)) != KD_OK ||
        (rc = kd_multiply_on_device(server, &ops, free_bytes, &c, &stats, err)) != KD_OK)
        goto fail;
    double ms = (double)(kd_clock_ns() - t0) / 1e6;
    kd_operands_free(&ops);
    kd_matrix_meta_t meta;
    int created;
    if ((rc = kd_handlers_admit(server, job, c, &q->options, &meta, &created, err)) != KD_OK)
        return rc; /* c taken */
    KD_INFO("store",
            "multiply id=%s rows=%lld cols=%lld nnz=%lld products=%lld transpose_a=%d ms=%.3f "
            "format=%s created=%d",
            meta.hex, (long long)meta.rows, (long long)meta.cols, (long long)meta.nnz,
            (long long)stats.products, q->transpose_a, ms, kd_format_name(meta.format), created);
    kd_multiply_reply(w, job->msgid, &meta, created, &q->options, &stats, ms);
    return KD_OK;
fail:
    kd_operands_free(&ops);
    kd_csr_free(c);
    return rc;
}
