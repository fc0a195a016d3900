/*
 * Batched matrices on the wire (docs/PROTOCOL.md, "Batched matrices"): matrix.put with
 * `batch`, and spmv and solve on a batch's id, run on the worker thread like every handler.
 * A batch is kept as its block-diagonal CSR (hashed, persisted and reloaded as any matrix, with
 * the system count in its metadata) and held on the device as a kd_batch_t (solver/batch/batch.h).
 */
#ifndef KD_SERVER_BATCH_H
#define KD_SERVER_BATCH_H

#include "protocol/writer.h"
#include "server/job.h"
#include "solver/batch/batch.h"

struct kd_server;

/* 1 when the job is this module's: a put with batch, spmv or solve on a batch, solve.batch, and
 * the requests a batch cannot take (matrix.multiply on one, per-system solve arrays on a plain
 * matrix), which kd_handlers_batch_run refuses. */
int kd_handlers_batch_claims(struct kd_server *server, const kd_job_t *job);

/* Run a claimed job: a response in w (KD_OK) or an error code with err set. */
int kd_handlers_batch_run(struct kd_server *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

/* The method (cg, bicgstab, gmres; "": cg) and preconditioner (jacobi, none; "": none) of a
 * batched solve into prm, with gmres's restart; KD_EBADREQ naming what a batch does not run. */
int kd_handlers_batch_choose(const char *method, const char *pre, int64_t restart,
                             kd_batch_params_t *prm, kd_err_t *err);

/* solve.batch (server/handlers/batch_many.c): many resident matrices of their own patterns, each
 * item answered on its own (docs/PROTOCOL.md, "solve.batch"). */
int kd_handlers_solve_items(struct kd_server *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

#endif
