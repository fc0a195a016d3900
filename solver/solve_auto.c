/*
 * method "auto" past its first choice: where cg, chosen for a matrix that looked SPD (symmetric,
 * positive diagonal), broke down (p'Ap <= 0: the matrix is indefinite, as the pattern files can_24
 * and dwt_878 are), every column is solved again from x0 with kd_method_auto_next's method, and
 * each message says so, rather than answer "breakdown" to a caller who asked for the choice. The
 * server and krylov-bench both solve through here, so a benchmark row is what a client gets.
 */
#include "solver/methods/method.h"

#include <stdio.h>
#include <string.h>

int kd_solve_auto(kd_ocl_t *ocl, kd_matrix_t *A, int64_t nrhs, const void *b, const void *x0,
                  void *x, kd_solve_params_t *params, kd_solve_result_t *results, kd_err_t *err)
{
    int rc = kd_solve(ocl, A, nrhs, b, x0, x, params, results, err);
    if (rc != KD_OK)
        return rc;
    int64_t broke = -1;
    for (int64_t k = 0; k < nrhs && broke < 0; k++)
        if (results[k].status == KD_SOLVE_BREAKDOWN)
            broke = k;
    const kd_method_ops_t *next =
        broke >= 0 ? kd_method_auto_next(params->method, params->precond) : NULL;
    if (next == NULL)
        return KD_OK;
    char why[160];
    snprintf(why, sizeof(why), "auto: %s broke down at iteration %lld (%.80s); %s ran instead",
             params->method->name, (long long)results[broke].iterations + 1, results[broke].message,
             next->name);
    for (int64_t k = 0; k < nrhs; k++) {
        kd_solve_result_free(&results[k]);
        memset(&results[k], 0, sizeof(results[k]));
    }
    params->method = next;
    rc = kd_solve(ocl, A, nrhs, b, x0, x, params, results, err);
    for (int64_t k = 0; rc == KD_OK && k < nrhs; k++) {
        char msg[sizeof(results[k].message)];
        snprintf(msg, sizeof(msg), "%.159s%s%.90s", why, results[k].message[0] ? ": " : "",
                 results[k].message);
        memcpy(results[k].message, msg, sizeof(msg));
    }
    return rc;
}
