/*
 * What method "direct" (direct.c) lends to method "auto" (auto.c): a direct solve of a request's
 * columns on a matrix, and its answer. Private to server/handlers/.
 */
#ifndef KD_SERVER_HANDLERS_DIRECT_H
#define KD_SERVER_HANDLERS_DIRECT_H

#include "server/handlers/handlers.h"
#include "solver/direct/direct.h"

/* One column of a direct solve (or of a singular matrix: x = 0). */
typedef struct kd_direct_column {
    const char *status; /* "converged", "stagnated" or "singular" */
    double residual, relative;
    int refinements;
    char message[256];
} kd_direct_column_t;

/* X = A^-1 B for q's columns (double, column-major) with entry's factor, held or made now (ops:
 * the library, NULL for the server's choice), and each column judged against q's rtol and atol
 * into cols; a singular matrix is KD_OK with X = 0, info->singular and cols saying why. Errors:
 * KD_ETOOLARGE (the factor is over --factor-memory, nothing factored), KD_ENOMEM,
 * KD_EUNSUPPORTED. */
int kd_direct_solve_columns(kd_server_t *server, kd_store_entry_t *entry,
                            const kd_solve_request_t *q, const kd_direct_ops_t *ops,
                            const double *B, double *X, kd_direct_column_t *cols,
                            kd_direct_info_t *info, double *solve_ms, kd_err_t *err);

/* The answer to a direct solve: info, cols and x (xout, the request's dtype, the caller's); trail
 * (NULL: none) is auto's `auto` list. */
void kd_direct_write(kd_writer_t *w, const kd_job_t *job, const kd_direct_info_t *info,
                     const kd_direct_column_t *cols, double solve_ms, const void *xout, uint64_t t0,
                     const kd_auto_trail_t *trail);

#endif
