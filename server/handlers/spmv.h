/*
 * spmv on the device worker (spmv.c): requests waiting together are served as one group, those
 * on one matrix as one SpMM launch, and waiting ones are served beside a long solve.
 */
#ifndef KD_SERVER_SPMV_H
#define KD_SERVER_SPMV_H

#include "protocol/writer.h"
#include "server/server.h"

/* Requests and vector bytes one group takes at most; columns one SpMM launch takes at most
 * (the wire's own ncols limit still applies to each request). */
#define KD_SPMV_GROUP_MAX 64
#define KD_SPMV_GROUP_BYTES ((size_t)64 << 20)
#define KD_SPMV_BATCH_COLUMNS 64

/* The worker's spmv handler: job, and the spmv requests queued behind it. */
int kd_handle_spmv(kd_server_t *server, kd_job_t *job, kd_writer_t *w, kd_err_t *err);

/* A long job's yield point (kd_solve_params_t.yield): serve the spmv requests waiting, on the
 * express queue. ctx is the server. */
void kd_spmv_yield(void *ctx);

#endif
