/*
 * krylov: the command-line client. Each subcommand is one or two libkrylov calls; vectors come
 * from Matrix Market files (array or coordinate, .gz too) or are generated ("ones").
 *
 *   krylov [--server HOST:PORT] [--timeout MS] COMMAND ...
 */
#include "krylov.h"

#include "client/mtx_file.h"
#include "protocol/mtx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KRYLOV_DEFAULT_SERVER "127.0.0.1:7373"
#define KRYLOV_MAX_VECTOR_FILE ((size_t)4 << 30)

static void kd_usage(FILE *out)
{
    fprintf(out,
            "usage: krylov [--server HOST:PORT] [--timeout MS] COMMAND [ARGS]\n"
            "\n"
            "  put FILE.mtx[.gz] [--name N] [--format F] [--dtype float64|float32] [--pin]\n"
            "                          upload a Matrix Market matrix; prints its id\n"
            "  info ID                 show a matrix\n"
            "  list                    list the matrices on the server\n"
            "  drop ID                 remove a matrix\n"
            "  spmv ID X.mtx|ones [-o Y.mtx]\n"
            "                          y = A x; prints ||y|| and the time, writes y with -o\n"
            "  solve ID [--rhs B.mtx|ones] [--method cg|sd|pcg] [--rtol R] [--atol A]\n"
            "        [--maxiter N] [--x0 X0.mtx] [--history] [-o X.mtx]\n"
            "                          solve A x = b; prints status, iterations, residual, time\n"
            "  status                  show the server and its device\n"
            "\n"
            "The server defaults to $KRYLOV_SERVER, else %s.\n",
            KRYLOV_DEFAULT_SERVER);
}

static int kd_fail(const char *what, krylov_client_t *c)
{
    fprintf(stderr, "krylov: %s: %s: %s\n", what, krylov_error_code(c), krylov_error_message(c));
    return 1;
}

/* "ones" or a Matrix Market vector file of exactly n values. */
static double *kd_load_vector(const char *spec, int64_t n, const char *what)
{
    size_t count = n > 0 ? (size_t)n : 1;
    if (strcmp(spec, "ones") == 0) {
        double *v = malloc(count * sizeof(double));
        if (v == NULL)
            return NULL;
        for (int64_t i = 0; i < n; i++)
            v[i] = 1.0;
        return v;
    }
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    if (kd_mtx_file_read(spec, KRYLOV_MAX_VECTOR_FILE, &text, &len, &err) != KD_OK) {
        fprintf(stderr, "krylov: %s: %s\n", what, err.message);
        return NULL;
    }
    double *v = NULL;
    int64_t rows = 0, cols = 0;
    int rc = kd_mtx_read_dense(text, len, n > 0 ? n : 1, &v, &rows, &cols, &err);
    free(text);
    if (rc != KD_OK) {
        fprintf(stderr, "krylov: %s: %s: %s\n", what, spec, err.message);
        return NULL;
    }
    if (rows * cols != n) {
        fprintf(stderr, "krylov: %s: %s holds %lld x %lld values; the matrix needs %lld\n", what,
                spec, (long long)rows, (long long)cols, (long long)n);
        free(v);
        return NULL;
    }
    return v;
}

static int kd_save_vector(const char *path, const double *v, int64_t n)
{
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    int rc = kd_mtx_write_dense(v, n, 1, &text, &len, &err);
    if (rc == KD_OK)
        rc = kd_mtx_file_write(path, text, len, &err);
    free(text);
    if (rc != KD_OK) {
        fprintf(stderr, "krylov: writing %s: %s\n", path, err.message);
        return 1;
    }
    return 0;
}

static double kd_norm2(const double *v, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

static void kd_print_info(const krylov_matrix_info_t *m)
{
    printf("id           %s\n", m->id);
    if (m->name[0] != '\0')
        printf("name         %s\n", m->name);
    printf("shape        %lld x %lld, %lld nonzeros, %s\n", (long long)m->rows, (long long)m->cols,
           (long long)m->nnz, m->dtype);
    printf("format       %s (%.2f MiB on the device)%s\n", m->format,
           (double)m->device_bytes / (1 << 20), m->pinned ? ", pinned" : "");
    printf("rows         %lld..%lld nonzeros, mean %.2f, %lld empty\n", (long long)m->min_row,
           (long long)m->max_row, m->mean_row, (long long)m->empty_rows);
}

static int kd_cmd_put(krylov_client_t *c, int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "krylov put: which file?\n");
        return 2;
    }
    krylov_put_options_t opt = {0};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pin") == 0)
            opt.pin = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--name") == 0)
            opt.name = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--format") == 0)
            opt.format = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--dtype") == 0)
            opt.dtype = argv[++i];
        else {
            fprintf(stderr, "krylov put: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    krylov_matrix_info_t info;
    if (krylov_put_file(c, argv[0], &opt, &info) != KRYLOV_OK)
        return kd_fail("put", c);
    printf("%s\n", info.id);
    fprintf(stderr, "%s: %lld x %lld, %lld nonzeros, %s, format %s%s\n", argv[0],
            (long long)info.rows, (long long)info.cols, (long long)info.nnz, info.dtype,
            info.format, info.created ? "" : " (already on the server)");
    return 0;
}

static int kd_cmd_spmv(krylov_client_t *c, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "krylov spmv: usage: spmv ID X.mtx|ones [-o Y.mtx]\n");
        return 2;
    }
    const char *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "-o") == 0)
            out = argv[++i];
        else {
            fprintf(stderr, "krylov spmv: unknown option '%s'\n", argv[i]);
            return 2;
        }
    }
    krylov_matrix_info_t info;
    if (krylov_info(c, argv[0], &info) != KRYLOV_OK)
        return kd_fail("spmv", c);
    double *x = kd_load_vector(argv[1], info.cols, "x");
    double *y = malloc((info.rows > 0 ? (size_t)info.rows : 1) * sizeof(double));
    int rc = 1;
    if (x != NULL && y != NULL) {
        if (krylov_spmv(c, argv[0], 1.0, x, info.cols, 0.0, y, info.rows) != KRYLOV_OK) {
            rc = kd_fail("spmv", c);
        } else {
            printf("||y|| = %.17g (%lld rows)\n", kd_norm2(y, info.rows), (long long)info.rows);
            rc = out != NULL ? kd_save_vector(out, y, info.rows) : 0;
        }
    }
    free(x);
    free(y);
    return rc;
}

static int kd_cmd_solve(krylov_client_t *c, int argc, char **argv)
{
    if (argc < 1) {
        fprintf(stderr, "krylov solve: which matrix id?\n");
        return 2;
    }
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    const char *rhs = "ones", *out = NULL, *x0_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (strcmp(a, "--history") == 0)
            opt.history = 1;
        else if (has && strcmp(a, "--rhs") == 0)
            rhs = argv[++i];
        else if (has && strcmp(a, "--method") == 0)
            opt.method = argv[++i];
        else if (has && strcmp(a, "--rtol") == 0)
            opt.rtol = strtod(argv[++i], NULL);
        else if (has && strcmp(a, "--atol") == 0)
            opt.atol = strtod(argv[++i], NULL);
        else if (has && strcmp(a, "--maxiter") == 0)
            opt.maxiter = strtoll(argv[++i], NULL, 10);
        else if (has && strcmp(a, "--x0") == 0)
            x0_path = argv[++i];
        else if (has && strcmp(a, "-o") == 0)
            out = argv[++i];
        else {
            fprintf(stderr, "krylov solve: unknown option '%s'\n", a);
            return 2;
        }
    }
    krylov_matrix_info_t info;
    if (krylov_info(c, argv[0], &info) != KRYLOV_OK)
        return kd_fail("solve", c);
    double *b = kd_load_vector(rhs, info.rows, "rhs");
    double *x0 = x0_path != NULL ? kd_load_vector(x0_path, info.rows, "x0") : NULL;
    double *x = malloc((info.rows > 0 ? (size_t)info.rows : 1) * sizeof(double));
    int rc = 1;
    if (b == NULL || x == NULL || (x0_path != NULL && x0 == NULL))
        goto done;
    opt.x0 = x0;
    krylov_solve_result_t res;
    if (krylov_solve(c, argv[0], b, info.rows, &opt, x, &res) != KRYLOV_OK) {
        rc = kd_fail("solve", c);
        goto done;
    }
    printf("status             %s%s%s\n", res.status, res.message[0] ? ": " : "", res.message);
    printf("iterations         %lld\n", (long long)res.iterations);
    printf("relative residual  %.3e  (||b - Ax|| = %.3e)\n", res.relative_residual,
           res.residual_norm);
    printf("time               %.3f ms on the server\n", res.time_ms);
    if (opt.history)
        for (int64_t i = 0; i < res.history_len; i++)
            printf("history %lld %.6e\n", (long long)i, res.history[i]);
    krylov_solve_result_free(&res);
    rc = out != NULL ? kd_save_vector(out, x, info.rows) : 0;
    if (rc == 0 && strcmp(res.status, "converged") != 0)
        rc = 3;
done:
    free(b);
    free(x0);
    free(x);
    return rc;
}

static int kd_cmd_list(krylov_client_t *c)
{
    krylov_matrix_info_t *list = NULL;
    size_t n = 0;
    if (krylov_list(c, &list, &n) != KRYLOV_OK)
        return kd_fail("list", c);
    printf("%-32s  %10s  %10s  %12s  %-8s  %-12s  %s\n", "id", "rows", "cols", "nnz", "dtype",
           "format", "name");
    for (size_t i = 0; i < n; i++)
        printf("%-32s  %10lld  %10lld  %12lld  %-8s  %-12s  %s\n", list[i].id,
               (long long)list[i].rows, (long long)list[i].cols, (long long)list[i].nnz,
               list[i].dtype, list[i].format, list[i].name);
    free(list);
    return 0;
}

static int kd_cmd_status(krylov_client_t *c)
{
    krylov_server_status_t st;
    if (krylov_status(c, &st) != KRYLOV_OK)
        return kd_fail("status", c);
    printf("krylovd      %s, up %.1f s\n", st.version, st.uptime_s);
    printf("device       %s (%s, %s), %.1f GiB\n", st.device, st.device_type, st.platform,
           (double)st.global_mem_bytes / (1u << 30));
    printf("matrices     %lld, %.2f MiB on the device\n", (long long)st.matrices,
           (double)st.device_bytes_used / (1 << 20));
    printf("requests     %lld (%lld errors), %lld connections, %lld queued\n",
           (long long)st.requests, (long long)st.errors, (long long)st.connections,
           (long long)st.queue_depth);
    return 0;
}

int main(int argc, char **argv)
{
    const char *server = getenv("KRYLOV_SERVER");
    if (server == NULL || server[0] == '\0')
        server = KRYLOV_DEFAULT_SERVER;
    int timeout_ms = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            kd_usage(stdout);
            return 0;
        } else if (i + 1 < argc && strcmp(argv[i], "--server") == 0) {
            server = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--timeout") == 0) {
            timeout_ms = atoi(argv[++i]);
        } else {
            fprintf(stderr, "krylov: unknown option '%s'\n", argv[i]);
            kd_usage(stderr);
            return 2;
        }
    }
    if (i >= argc) {
        kd_usage(stderr);
        return 2;
    }
    const char *cmd = argv[i++];
    int nargs = argc - i;
    char **args = argv + i;
    static const char *known[] = {"put", "info", "list", "drop", "spmv", "solve", "status"};
    int ok = 0;
    for (size_t k = 0; k < sizeof(known) / sizeof(known[0]); k++)
        ok |= strcmp(cmd, known[k]) == 0;
    if (!ok) {
        fprintf(stderr, "krylov: unknown command '%s'\n", cmd);
        kd_usage(stderr);
        return 2;
    }

    krylov_client_t *c = krylov_client_new();
    if (c == NULL)
        return 1;
    krylov_set_timeout(c, timeout_ms);
    int rc;
    if (krylov_connect(c, server) != KRYLOV_OK) {
        rc = kd_fail("connect", c);
    } else if (strcmp(cmd, "put") == 0) {
        rc = kd_cmd_put(c, nargs, args);
    } else if (strcmp(cmd, "spmv") == 0) {
        rc = kd_cmd_spmv(c, nargs, args);
    } else if (strcmp(cmd, "solve") == 0) {
        rc = kd_cmd_solve(c, nargs, args);
    } else if (strcmp(cmd, "list") == 0) {
        rc = kd_cmd_list(c);
    } else if (strcmp(cmd, "status") == 0) {
        rc = kd_cmd_status(c);
    } else if (nargs < 1) {
        fprintf(stderr, "krylov %s: which matrix id?\n", cmd);
        rc = 2;
    } else if (strcmp(cmd, "info") == 0) {
        krylov_matrix_info_t info;
        rc = krylov_info(c, args[0], &info) == KRYLOV_OK ? (kd_print_info(&info), 0)
                                                         : kd_fail("info", c);
    } else {
        rc = krylov_drop(c, args[0]) == KRYLOV_OK ? (printf("dropped %s\n", args[0]), 0)
                                                  : kd_fail("drop", c);
    }
    krylov_client_free(c);
    return rc;
}
