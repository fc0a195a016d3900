/*
 * The worker's job handlers, one file per request family, and what they share: run.c runs every
 * job through its family's handler (matrices.c: put, drop, pin, share; like.c; multiply.c;
 * spmv.c; solve_job.c; batch.c); keep.c keeps a new matrix the way matrix.put does
 * (kd_handlers_keep, _admit); common.c has a job's checks, vectors and response.
 */
#ifndef KD_SERVER_HANDLERS_H
#define KD_SERVER_HANDLERS_H

#include "protocol/writer.h"
#include "server/server.h"
#include "solver/solve.h"

/*
 * Keep csr (canonical) as a matrix of the server, as matrix.put does: its content id; when that
 * matrix is already there, it is the answer (pinned if opt->pin, *created 0); otherwise the
 * selection chooses its format (or opt->format forces one), the cache admits it (budget, state
 * file) and *created is 1. *meta gets the stored matrix's metadata. Takes csr in every case.
 */
/* When a matrix was already held (created == 0) and opt forced a format or a reordering other
 * than the one it is kept in, a sentence saying so (the options were not applied: the stored
 * copy serves every client that holds the same content) into out; returns whether it did. */
int kd_handlers_notice(const kd_matrix_options_t *opt, const kd_matrix_meta_t *meta, int created,
                       char *out, size_t cap);

/* kd_handlers_keep's device step for a new matrix: put csr on the device into entry (entry->dev,
 * or entry->dist for one spread over ranks) and describe it in entry->meta (rows, nnz, dtype,
 * format, device_bytes, pinned, ...), with room made in the device budget first. On failure it
 * may leave what it made in entry: the caller frees it. */
typedef int (*kd_handlers_upload_fn)(kd_server_t *server, kd_store_entry_t *entry,
                                     const kd_csr_t *csr, void *arg, kd_err_t *err);
/* The upload matrix.put uses (arg: its kd_matrix_options_t): spread over the ranks, or in the
 * format the selection picks, opt->format forces or the server's default; entry's metadata
 * described from the result. */
int kd_handlers_upload(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr, void *arg,
                       kd_err_t *err);

/* What every way a matrix becomes the server's shares (matrix.put, matrix.multiply, a batch):
 * content id `id` already held: the user's reference to it (pinned when pin == 1); else quotas,
 * upload(...), the state file (kd_cache_admit). Takes csr. *meta and *created as below. */
int kd_handlers_keep(kd_server_t *server, const kd_job_t *job, kd_csr_t *csr, const uint8_t id[16],
                     int pin, kd_handlers_upload_fn upload, void *arg, kd_matrix_meta_t *meta,
                     int *created, kd_err_t *err);

/* Owners: the matrix becomes job->user's (a new reference to content another user holds counts as
 * created for this user, and *meta is as the user sees it: kd_meta_view). A new reference that
 * would take the user over a limit of job->quota is KD_EQUOTA, before anything is kept. */
int kd_handlers_admit(kd_server_t *server, const kd_job_t *job, kd_csr_t *csr,
                      const kd_matrix_options_t *opt, kd_matrix_meta_t *meta, int *created,
                      kd_err_t *err);

/* matrix.put, matrix.drop, matrix.pin and matrix.share (matrices.c). */
int kd_handle_put(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);
int kd_handle_drop(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);
int kd_handle_pin(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);
int kd_handle_share(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

/* matrix.put with like (like.c): new values on a held matrix's pattern. */
int kd_handle_put_like(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

/* n values of `dtype` in a fresh buffer (at least 1 byte); KD_ETOOLARGE / KD_ENOMEM in err. */
void *kd_handlers_alloc_values(int64_t n, kd_dtype_t dtype, kd_err_t *err);

/* Device bytes for vectors of per_row * rows + per_col * cols values of matrix id's type (0 when
 * there is no such matrix: kd_cache_use reports that). */
size_t kd_handlers_vector_bytes(kd_server_t *server, const uint8_t id[16], int64_t per_row,
                                int64_t per_col);

/* KD_ENOTFOUND for matrix id, with the message every handler gives (common.c). */
int kd_handlers_not_found(kd_err_t *err, const uint8_t id[16]);

/* KD_ENOTFOUND, as for an id that does not exist, when the matrix job names is another user's
 * (common.c); KD_OK when it names none. */
int kd_handlers_visible(kd_server_t *server, const kd_job_t *job, kd_err_t *err);

/* What the worker checks before it runs a job, for a job taken from the queue another way
 * (spmv.c): its cancel flag, its deadline, and that its user may see the matrix it names. */
int kd_handlers_precheck(kd_server_t *server, const kd_job_t *job, kd_err_t *err);

/* Leave job's response: w's result when rc is KD_OK (w may be NULL for an error), else an error
 * response with err's message. Sets job->error_code; a successful spmv, solve, pin or solve of
 * many systems counts a use on the user's reference (store.h, kd_store_note_use). */
void kd_handlers_respond(kd_server_t *server, kd_job_t *job, int rc, kd_writer_t *w, kd_err_t *err);

/* A result vector of `bytes` under key: into the request's region when it named one (out present:
 * the reply then says where, {shm, offset, bytes}), else a bin. With tail, src is a recycled
 * buffer the writer takes and sends uncopied (common/recycle.h), unless src is the region itself;
 * without, src stays the caller's. The caller checked out's length. */
void kd_handlers_kv_vector(kd_writer_t *w, const char *key, const kd_array_t *out, void *src,
                           size_t bytes, int tail);
/* BAD_REQUEST unless out (when present) holds exactly want values (what the result needs) and
 * shares no byte of its region with the inputs in0 and in1 (either may be NULL), named in the
 * error with out. */
int kd_handlers_check_out(const kd_array_t *out, int64_t want, const char *what,
                          const kd_array_t *in0, const char *name0, const kd_array_t *in1,
                          const char *name1, kd_err_t *err);

/* solve (solve_job.c): job, and the solves queued behind it that can run with it as one. */
int kd_handle_solve(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

/* solve with method "direct" (direct.c) on entry, found resident and its lengths checked by
 * kd_handle_solve: the matrix's factorisation, made or held, and its solves. */
int kd_handle_solve_direct(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                           kd_writer_t *w, kd_err_t *err);

/* solve_job.c: the answer to a solve request, its results[0..nrhs) and x (xout, in the
 * request's dtype); t0 when the worker started on it; setup: how the preconditioner came
 * ("reused", "refreshed", ...) for `preconditioner_setup`, or NULL for no such key. spread.c
 * answers the same way. */
void kd_solve_job_reply(kd_writer_t *w, const kd_job_t *job, const kd_solve_params_t *params,
                        const kd_solve_result_t *results, const void *xout, uint64_t t0,
                        double total_ms, const char *setup);

/* What method "auto" tried before its answer (auto.c), for the reply's `auto` list. */
#define KD_AUTO_STEPS_MAX 8
typedef struct kd_auto_step {
    char method[16], preconditioner[16];
    const char *status;       /* a solve status, or "refused" (it could not be set up) */
    int64_t iterations;       /* the most of any column (direct: refinement steps) */
    double relative_residual; /* the worst column's; -1 when it did not run */
    double time_ms;
    char message[224];
} kd_auto_step_t;

typedef struct kd_auto_trail {
    int count;
    kd_auto_step_t steps[KD_AUTO_STEPS_MAX];
} kd_auto_trail_t;

/* solve with method "auto" (auto.c) on entry, a matrix held whole, found resident and checked by
 * kd_handle_solve: its plan of Krylov methods and direct, in order, until one converges. */
int kd_handle_solve_auto(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                         kd_writer_t *w, kd_err_t *err);

/* auto_trail.c: the `auto` key, the attempt that converged and the list of attempts. */
void kd_auto_write_trail(kd_writer_t *w, const kd_auto_trail_t *trail);

/* solve_job.c: one Krylov solve of job's columns on entry with qs's method, preconditioner and
 * options (qs: job's request, or auto's copy naming a step): room reserved, the preconditioner
 * set up, b, x0 (NULL: zero) and x in the matrix's dtype. params and results as kd_solve's;
 * *setup as kd_solve_job_reply's. */
int kd_solve_job_krylov(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                        const kd_solve_request_t *qs, const void *b, const void *x0, void *x,
                        kd_solve_params_t *params, kd_solve_result_t *results, const char **setup,
                        kd_err_t *err);

/* kd_solve_job_reply for auto's answer, with `auto` listing the trail. */
void kd_solve_job_reply_auto(kd_writer_t *w, const kd_job_t *job, const kd_solve_params_t *params,
                             const kd_solve_result_t *results, const void *xout, uint64_t t0,
                             const char *setup, const kd_auto_trail_t *trail);

/* matrix.multiply (multiply.c). */
int kd_handle_multiply(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

#endif
