/*
 * What the worker's job handlers share across files: handlers.c runs every job and handles put,
 * drop, pin, spmv and solve; multiply.c handles matrix.multiply, whose product is kept the way
 * matrix.put keeps an upload (kd_handlers_admit).
 */
#ifndef KD_SERVER_HANDLERS_H
#define KD_SERVER_HANDLERS_H

#include "protocol/writer.h"
#include "server/server.h"

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

/* Owners: the matrix becomes job->user's (a new reference to content another user holds counts as
 * created for this user, and *meta is as the user sees it: kd_meta_view). A new reference that
 * would take the user over a limit of job->quota is KD_EQUOTA, before anything is kept. */
int kd_handlers_admit(kd_server_t *server, const kd_job_t *job, kd_csr_t *csr,
                      const kd_matrix_options_t *opt, kd_matrix_meta_t *meta, int *created,
                      kd_err_t *err);

/* n values of `dtype` in a fresh buffer (at least 1 byte); KD_ETOOLARGE / KD_ENOMEM in err. */
void *kd_handlers_alloc_values(int64_t n, kd_dtype_t dtype, kd_err_t *err);

/* Device bytes for vectors of per_row * rows + per_col * cols values of matrix id's type (0 when
 * there is no such matrix: kd_cache_use reports that). */
size_t kd_handlers_vector_bytes(kd_server_t *server, const uint8_t id[16], int64_t per_row,
                                int64_t per_col);

/* What the worker checks before it runs a job, for a job taken from the queue another way
 * (spmv.c): its cancel flag, its deadline, and that its user may see the matrix it names. */
int kd_handlers_precheck(kd_server_t *server, const kd_job_t *job, kd_err_t *err);

/* Leave job's response: w's result when rc is KD_OK (w may be NULL for an error), else an error
 * response with err's message. Sets job->error_code. */
void kd_handlers_respond(kd_job_t *job, int rc, kd_writer_t *w, kd_err_t *err);

/* solve (solve_job.c): job, and the solves queued behind it that can run with it as one. */
int kd_handle_solve(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

/* matrix.multiply (multiply.c). */
int kd_handle_multiply(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

#endif
