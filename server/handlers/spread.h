/*
 * Matrices spread over the ranks of an MPI job, on the serving rank (docs/ARCHITECTURE.md, "The
 * command channel"): matrix.put's choice, the put itself, spmv and solve on such a matrix, its
 * re-spread after a restart and its drop, each through dist/follow.h's commands. Everything here
 * runs on the device worker thread, the only thread of rank 0 that calls MPI while serving.
 *
 * A spread matrix's store entry holds rank 0's part (entry->dist) instead of a device matrix;
 * the state file keeps the whole canonical CSR as for any matrix, with the DISTRIBUTED flag, and
 * the first use after a restart of the whole job spreads it again. Spread matrices are never
 * evicted (a re-spread is a collective put), and the device budget counts rank 0's part only.
 * Without MPI (or with one rank) nothing is ever spread and these report so.
 */
#ifndef KD_SERVER_SPREAD_H
#define KD_SERVER_SPREAD_H

#include "protocol/writer.h"
#include "server/server.h"
#include "solver/formats/select.h"
#include "solver/solve.h"

/* The job's ranks: 1 for a single process. */
int kd_spread_ranks(const kd_server_t *server);

/* Whether matrix.put keeps csr spread: distribute true, or "auto" and more nonzeros than
 * --distribute-nnz, on a job of several ranks. distribute = true of a matrix that is not square
 * is KD_EBADREQ (a spread matrix is cut into row blocks with its columns numbered alike); on a
 * single process it is accepted and not spread (the reply says ranks: 1). */
int kd_spread_wanted(const kd_server_t *server, const kd_csr_t *csr, const kd_matrix_options_t *opt,
                     int *spread, kd_err_t *err);

/* Spread csr (canonical; entry->meta.id set) over the ranks as entry's matrix: entry->dist, and
 * meta's name, shape, format (rank 0's block's), device bytes (rank 0's), symmetry and spread.
 * format: forced, or NULL for each rank's own selection (mode). KD_EDEVMEM etc. from any rank,
 * with nothing left on any. */
int kd_spread_upload(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                     const char *format, kd_select_mode_t mode, const kd_matrix_options_t *opt,
                     kd_err_t *err);

/* A spread matrix that is not in the store after all (a failed admit): the other ranks forget
 * it, and rank 0's part is freed. */
void kd_spread_discard(kd_server_t *server, kd_store_entry_t *entry);

/* Tell the other ranks to forget matrix id (drop). */
void kd_spread_forget(kd_server_t *server, const uint8_t id[16]);

/* After a restart: entry was put spread and is not spread now; csr is its file's matrix. */
int kd_spread_again(kd_server_t *server, kd_store_entry_t *entry, const kd_csr_t *csr,
                    kd_err_t *err);

/* spmv on a spread matrix (q checked against its shape): *out (malloc'd, the request's dtype,
 * rows * ncols values) = alpha A x + beta y. */
int kd_spread_spmv(kd_server_t *server, kd_store_entry_t *entry, const kd_spmv_request_t *q,
                   void **out, kd_err_t *err);

/* How a solve is answered (solve_job.c's kd_solve_job_reply, handlers.h), passed in by the solve
 * handler that calls kd_spread_solve: this file sits below it. */
typedef void (*kd_spread_reply_fn)(kd_writer_t *w, const kd_job_t *job,
                                   const kd_solve_params_t *params,
                                   const kd_solve_result_t *results, const void *xout, uint64_t t0,
                                   double total_ms, const char *setup);

/* solve on a spread matrix (lengths checked): cg, pcg (jacobi) and sd; anything else is
 * KD_EBADREQ naming what runs spread. progress (with ctx) is called on this rank at the checks,
 * as on one process. Answers through w with reply, as a solve on one process does. */
int kd_spread_solve(kd_server_t *server, kd_store_entry_t *entry, kd_job_t *job,
                    kd_solve_progress_fn progress, void *ctx, kd_spread_reply_fn reply,
                    kd_writer_t *w, kd_err_t *err);

#endif
