/*
 * A complete libkrylov program: connect, upload a matrix built here (a 2-D Poisson matrix in CSR
 * form), multiply with it, solve with it (one right-hand side with a progress callback, then two
 * at once), handle an error, and clean up. It checks every answer against a product computed
 * here and exits non-zero if one is wrong, so the build runs it as a test
 * (tests/python/CMakeLists.txt) and it cannot rot.
 *
 *   build/bin/example_c_client [HOST:PORT]    (default: $KRYLOV_SERVER, else 127.0.0.1:7373)
 *
 * CMake builds it with the rest (docs/examples/CMakeLists.txt): link the `krylov` library and
 * include client/krylov.h.
 */
#include "krylov.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GRID 40 /* 1600 unknowns */

/* The 5-point Laplacian on a GRID x GRID grid: 4 on the diagonal, -1 for each neighbour. */
static int64_t build_poisson(int32_t *indptr, int32_t *indices, double *values)
{
    int64_t nz = 0;
    for (int i = 0; i < GRID; i++)
        for (int j = 0; j < GRID; j++) {
            int row = i * GRID + j;
            indptr[row] = (int32_t)nz;
            const int di[] = {-1, 0, 0, 0, 1}, dj[] = {0, -1, 0, 1, 0};
            for (int k = 0; k < 5; k++) {
                int ni = i + di[k], nj = j + dj[k];
                if (ni < 0 || nj < 0 || ni >= GRID || nj >= GRID)
                    continue;
                indices[nz] = ni * GRID + nj;
                values[nz] = k == 2 ? 4.0 : -1.0;
                nz++;
            }
        }
    indptr[GRID * GRID] = (int32_t)nz;
    return nz;
}

/* y = A x on this side, to check the server's answers */
static void multiply(int64_t n, const int32_t *indptr, const int32_t *indices, const double *values,
                     const double *x, double *y)
{
    for (int64_t r = 0; r < n; r++) {
        double s = 0.0;
        for (int32_t k = indptr[r]; k < indptr[r + 1]; k++)
            s += values[k] * x[indices[k]];
        y[r] = s;
    }
}

static double norm(const double *v, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

typedef struct progress_log {
    int calls;
    int64_t last_iteration;
} progress_log_t;

static void on_progress(void *ctx, int64_t rhs, int64_t iteration, double residual)
{
    progress_log_t *log = ctx;
    log->calls++;
    log->last_iteration = iteration;
    printf("  progress: rhs %lld, iteration %lld, ||r|| = %.3e\n", (long long)rhs,
           (long long)iteration, residual);
}

int main(int argc, char **argv)
{
    const char *address = argc > 1 ? argv[1] : getenv("KRYLOV_SERVER");
    if (address == NULL || address[0] == '\0')
        address = "127.0.0.1:7373";
    const int64_t n = GRID * GRID;
    int32_t *indptr = malloc((size_t)(n + 1) * sizeof(int32_t));
    int32_t *indices = malloc((size_t)n * 5 * sizeof(int32_t));
    double *values = malloc((size_t)n * 5 * sizeof(double));
    double *x = malloc((size_t)n * 2 * sizeof(double));
    double *y = malloc((size_t)n * 2 * sizeof(double));
    double *b = malloc((size_t)n * 2 * sizeof(double));
    double *r = malloc((size_t)n * sizeof(double));
    krylov_client_t *c = krylov_client_new();
    int failures = 0;
    if (!indptr || !indices || !values || !x || !y || !b || !r || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }

    /* 1. connect and look at the server */
    if (krylov_connect(c, address) != KRYLOV_OK) {
        fprintf(stderr, "example: %s: %s\n", krylov_error_code(c), krylov_error_message(c));
        krylov_client_free(c);
        return 1;
    }
    krylov_server_status_t st;
    if (krylov_status(c, &st) != KRYLOV_OK)
        goto fail;
    printf("connected to krylovd %s on %s (%s)\n", st.version, st.device, st.device_type);

    /* 2. upload: the id is a content hash, so uploading the same matrix again is a no-op */
    int64_t nnz = build_poisson(indptr, indices, values);
    krylov_put_options_t put = {.name = "example-poisson"};
    krylov_matrix_info_t info;
    if (krylov_put_csr(c, n, n, indptr, indices, values, &put, &info) != KRYLOV_OK)
        goto fail;
    printf("uploaded %s: %lld x %lld, %lld nonzeros, format %s\n", info.id, (long long)info.rows,
           (long long)info.cols, (long long)info.nnz, info.format);
    if (info.nnz != nnz) {
        printf("FAIL: the server counts %lld nonzeros, we built %lld\n", (long long)info.nnz,
               (long long)nnz);
        failures++;
    }

    /* 3. y = A x on the server, checked here */
    for (int64_t i = 0; i < n; i++)
        x[i] = sin(0.1 * (double)i);
    if (krylov_spmv(c, info.id, 1.0, x, n, 0.0, y, n) != KRYLOV_OK)
        goto fail;
    multiply(n, indptr, indices, values, x, r);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(y[i] - r[i]));
    printf("spmv: max |y - A x| = %.3e\n", worst);
    if (worst > 1e-12) {
        printf("FAIL: spmv differs\n");
        failures++;
    }

    /* 4. solve A x = b with CG, with a progress callback and the residual history */
    for (int64_t i = 0; i < n; i++)
        b[i] = 1.0;
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt); /* cg, rtol 1e-8 */
    opt.rtol = 1e-10;
    opt.history = 1;
    progress_log_t log = {0};
    opt.progress = on_progress;
    opt.progress_ctx = &log;
    krylov_solve_result_t res;
    if (krylov_solve(c, info.id, b, n, &opt, x, &res) != KRYLOV_OK)
        goto fail;
    multiply(n, indptr, indices, values, x, r);
    for (int64_t i = 0; i < n; i++)
        r[i] = b[i] - r[i];
    double rel = norm(r, n) / norm(b, n);
    printf("solve: %s after %lld iterations, relative residual %.3e (checked here: %.3e), "
           "%lld history entries, %d progress notifications, %.2f ms\n",
           res.status, (long long)res.iterations, res.relative_residual, rel,
           (long long)res.history_len, log.calls, res.time_ms);
    if (strcmp(res.status, "converged") != 0 || rel > 1e-10 || log.calls < 1 ||
        res.history_len < 2) {
        printf("FAIL: solve\n");
        failures++;
    }
    krylov_solve_result_free(&res);

    /* 5. two right-hand sides in one call: b and x are column-major, n values per column */
    for (int64_t i = 0; i < n; i++) {
        b[i] = 1.0;
        b[n + i] = cos(0.05 * (double)i);
    }
    krylov_solve_options_init(&opt);
    opt.nrhs = 2;
    krylov_solve_result_t two[2];
    if (krylov_solve(c, info.id, b, n, &opt, x, two) != KRYLOV_OK)
        goto fail;
    for (int k = 0; k < 2; k++) {
        multiply(n, indptr, indices, values, x + k * n, r);
        for (int64_t i = 0; i < n; i++)
            r[i] = b[k * n + i] - r[i];
        rel = norm(r, n) / norm(b + k * n, n);
        printf("rhs %d: %s, %lld iterations, relative residual %.3e\n", k, two[k].status,
               (long long)two[k].iterations, rel);
        if (strcmp(two[k].status, "converged") != 0 || rel > 1e-8) {
            printf("FAIL: rhs %d\n", k);
            failures++;
        }
        krylov_solve_result_free(&two[k]);
    }

    /* 6. errors come back as a code and a message naming what was wrong */
    if (krylov_spmv(c, info.id, 1.0, x, n - 1, 0.0, y, n) == KRYLOV_EBADREQ)
        printf("a short x is refused: %s: %s\n", krylov_error_code(c), krylov_error_message(c));
    else {
        printf("FAIL: a short x was not refused with BAD_REQUEST\n");
        failures++;
    }

    /* 7. clean up: drop the matrix; asking for it again is NOT_FOUND */
    if (krylov_drop(c, info.id) != KRYLOV_OK)
        goto fail;
    if (krylov_info(c, info.id, &info) != KRYLOV_ENOTFOUND) {
        printf("FAIL: the dropped matrix is still there\n");
        failures++;
    } else {
        printf("dropped; now: %s\n", krylov_error_code(c));
    }
    krylov_client_free(c);
    free(indptr);
    free(indices);
    free(values);
    free(x);
    free(y);
    free(b);
    free(r);
    printf("%s\n", failures ? "example FAILED" : "example done");
    return failures ? 1 : 0;

fail:
    fprintf(stderr, "example: %s: %s\n", krylov_error_code(c), krylov_error_message(c));
    krylov_client_free(c);
    free(indptr);
    free(indices);
    free(values);
    free(x);
    free(y);
    free(b);
    free(r);
    return 1;
}
