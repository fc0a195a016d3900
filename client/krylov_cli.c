/*
 * krylov: the command-line client. Each subcommand is one or a few libkrylov calls; vectors come
 * from Matrix Market files (array or coordinate, .gz too) or are generated ("ones", "random").
 *
 *   krylov [--server HOST:PORT|unix:PATH] [--user NAME] [--token-file F] [--timeout MS] [--json]
 *          [--progress|--no-progress] [--tls] [--ca FILE] [--cert FILE --key FILE] COMMAND ...
 *
 * With a user (--user or $KRYLOV_USER) the first request is `auth`, with the token read from
 * --token-file or $KRYLOV_TOKEN: never from the command line, where `ps` would show it.
 *
 * --tls (or $KRYLOV_TLS=1; --ca, --cert and --key imply it) connects with TLS.
 *
 * The server: --server, else $KRYLOV_SERVER, else the packaged service's Unix socket when it is
 * there and answers ($KRYLOV_SOCKET, default /run/krylovd/krylovd.sock: local, and large arrays
 * go through shared memory), else 127.0.0.1:7373.
 *
 * Output is for people by default: aligned tables for `list` and `status`, a progress line on a
 * terminal for long solves and uploads (cli_progress.c). With --json every command prints exactly
 * one JSON document on stdout instead (cli_json.c), errors included, for scripts; messages for
 * people still go to stderr. `solve --plot F.png` draws the convergence history with gnuplot
 * (cli_plot.c). Exit status: 0 done, 1 an error from the server or the connection, 2 a usage
 * error, 3 a solve that did not converge, 4 a plot that could not be written.
 */
#include "krylov.h"
#include "common/clock.h"

#include "client/cli_json.h"
#include "client/cli_plot.h"
#include "client/cli_progress.h"
#include "client/cli_table.h"
#include "client/mtx_file.h"
#include "protocol/mtx.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define KRYLOV_DEFAULT_SERVER "127.0.0.1:7373"
/* The packaged service's Unix socket (deploy/krylovd.conf, krylovd.socket): tried first. */
#define KRYLOV_DEFAULT_SOCKET "/run/krylovd/krylovd.sock"
#define KRYLOV_MAX_VECTOR_FILE ((size_t)4 << 30)

enum {
    KD_EXIT_OK = 0,
    KD_EXIT_ERROR = 1,
    KD_EXIT_USAGE = 2,
    KD_EXIT_NOT_CONVERGED = 3,
    KD_EXIT_PLOT = 4
};

typedef struct kd_cli {
    krylov_client_t *client;
    const char *server; /* NULL: the default (kd_connect_default) */
    char default_server[128];
    const char *user;       /* --user or $KRYLOV_USER; NULL: no auth */
    const char *token_file; /* --token-file; else $KRYLOV_TOKEN */
    char token[512];        /* read before connecting, so a missing one is a usage error */
    const char *command;
    int json; /* one JSON document on stdout */
    kd_progress_mode_t progress;
    int tls; /* --tls, --ca, --cert or $KRYLOV_TLS=1 */
    krylov_tls_options_t tls_files;
} kd_cli_t;

static void kd_usage(FILE *out)
{
    fprintf(out,
            "usage: krylov [--server HOST:PORT|unix:PATH] [--user NAME] [--token-file FILE]\n"
            "              [--timeout MS] [--json] [--progress|--no-progress] COMMAND [ARGS]\n"
            "\n"
            "  put FILE.mtx[.gz] [--name N] [--format F] [--dtype float64|float32] [--pin]\n"
            "                    [--reorder auto|none|rcm|metis] [--like ID]\n"
            "                    [--persist sync|behind|none]\n"
            "                          upload a Matrix Market matrix; prints its id; --like:\n"
            "                          only its values, on matrix ID's pattern (new values\n"
            "                          of a time step), kept as ID is; --persist: when the\n"
            "                          server writes it to its state directory (before the\n"
            "                          reply, after it, or never; default: the server's)\n"
            "  multiply A_ID B_ID [--transpose-a] [--name N] [--format F] [--pin]\n"
            "                    [--reorder auto|none|rcm|metis]\n"
            "                          C = A B (A^T B) on the server, kept there as a new\n"
            "                          matrix; prints its id\n"
            "  info ID                 show a matrix\n"
            "  list                    list the matrices on the server\n"
            "  drop ID                 remove a matrix\n"
            "  pin ID [--off]          keep a matrix in device memory (--off: allow eviction)\n"
            "  spmv ID X.mtx|ones|random [-o Y.mtx]\n"
            "                          y = A x; prints ||y|| and the time, writes y with -o\n"
            "  solve ID [--rhs B.mtx|ones|random] [--method NAME] [--rtol R] [--atol A]\n"
            "        [--maxiter N] [--check-every K] [--x0 X0.mtx] [--history] [-o X.mtx]\n"
            "        [--plot CONV.png] [--preconditioner NAME] [--restart M]\n"
            "        [--precond-options NAME=VALUE,...]   (amg: threshold, block_size, ...)\n"
            "                          solve A x = b; prints status, iterations, residual, time;\n"
            "                          --method: the server's (cg, pcg = cg + jacobi, sd, cg1,\n"
            "                          gmres, bicgstab, minres) or auto: cg for a symmetric\n"
            "                          matrix with a positive diagonal, minres for another\n"
            "                          symmetric one, gmres otherwise (default cg; cg needs a\n"
            "                          symmetric matrix: `krylov info` says if it is), or\n"
            "                          direct: a sparse LU / Cholesky kept on the server;\n"
            "                          --restart: GMRES(M)'s basis size, 1..200 (default 30);\n"
            "                          --preconditioner: none, jacobi, amg, ilu0, ic0,\n"
            "                          block_jacobi, chebyshev (server.status: solvers);\n"
            "                          --plot draws the residual history with gnuplot\n"
            "  solve-batch ID[:RHS] ... [--rhs B.mtx|ones|random] [--method cg|bicgstab|gmres]\n"
            "        [--preconditioner none|jacobi] [--rtol R] [--atol A] [--maxiter N]\n"
            "        [--restart M] [--limit K]\n"
            "                          many small matrices solved in one request (solve.batch):\n"
            "                          a table of status, iterations and residual per item, or\n"
            "                          per status with more than K items (default 20)\n"
            "  bench ID [--runs N] [--warmup W]\n"
            "                          time SpMV: min / median / mean and GFLOP/s (2 nnz flops)\n"
            "  status [--wait-warm[=SECONDS]]\n"
            "                          show the server and its device; --wait-warm first waits\n"
            "                          (at most SECONDS) until it has built its OpenCL programs,\n"
            "                          printing the progress on stderr\n"
            "  token new NAME ROLE     make a random token for a user (ROLE: read, write, admin):\n"
            "                          prints it once and the line for the server's auth file\n"
            "\n"
            "  --user NAME   authenticate as NAME (default $KRYLOV_USER) with the token in\n"
            "                --token-file FILE, else $KRYLOV_TOKEN\n"
            "  --json        print one JSON document on stdout (errors too: {\"error\": ...})\n"
            "  --progress    always show the progress line on stderr; --no-progress: never\n"
            "                (default: on a terminal, for work that takes over %.1f s)\n"
            "\n"
            "  --tls         connect with TLS ($KRYLOV_TLS=1 too); the server's certificate must\n"
            "                name the host or IP address of --server\n"
            "  --ca FILE     the CA that signed the server's certificate (default: the system's)\n"
            "  --cert FILE --key FILE   this client's certificate, for a server with --tls-ca\n"
            "\n"
            "The server defaults to $KRYLOV_SERVER, else the local service's Unix socket\n"
            "($KRYLOV_SOCKET, default %s) when it is there and answers,\n"
            "else %s. Exit status: 0 done, 1 error, 2 usage, 3 solve not converged,\n"
            "4 plot not written.\n",
            KD_PROGRESS_DELAY_S, KRYLOV_DEFAULT_SOCKET, KRYLOV_DEFAULT_SERVER);
}

/* An error document on stdout (with --json) and a line for people on stderr. */
static int kd_report(kd_cli_t *cli, int exit_code, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int kd_report(kd_cli_t *cli, int exit_code, const char *code, const char *fmt, ...)
{
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    /* USAGE and FILE (a local file that cannot be read) are this side's: no code shown. */
    int show_code = code[0] != '\0' && strcmp(code, "USAGE") != 0 && strcmp(code, "FILE") != 0;
    fprintf(stderr, "krylov%s%s: %s%s%s\n", cli->command ? " " : "",
            cli->command ? cli->command : "", show_code ? code : "", show_code ? ": " : "",
            message);
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_key(&j, "error");
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "command", cli->command);
        kd_json_kv_str(&j, "code", code);
        kd_json_kv_str(&j, "message", message);
        kd_json_object_end(&j);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    }
    return exit_code;
}

/* The token: the first line of --token-file, else $KRYLOV_TOKEN. */
static int kd_read_token(kd_cli_t *cli, char *token, size_t cap)
{
    if (cli->token_file != NULL) {
        FILE *f = fopen(cli->token_file, "r");
        if (f == NULL)
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "cannot read --token-file %s: %s",
                             cli->token_file, strerror(errno));
        int ok = fgets(token, (int)cap, f) != NULL;
        fclose(f);
        token[ok ? strcspn(token, "\r\n") : 0] = '\0';
    } else {
        const char *env = getenv("KRYLOV_TOKEN");
        snprintf(token, cap, "%s", env != NULL ? env : "");
    }
    if (token[0] == '\0')
        return kd_report(cli, KD_EXIT_USAGE, "USAGE",
                         "user %s needs a token: set KRYLOV_TOKEN or give --token-file FILE",
                         cli->user);
    return KD_EXIT_OK;
}

/* Connect (and authenticate) once the command's arguments are known good, so usage errors need
 * no server. */
/* No --server or $KRYLOV_SERVER: the local service's Unix socket if it is a socket that answers
 * (not with TLS, which is TCP's), else KRYLOV_DEFAULT_SERVER. */
static int kd_connect_default(kd_cli_t *cli)
{
    const char *path = getenv("KRYLOV_SOCKET");
    if (path == NULL || path[0] == '\0')
        path = KRYLOV_DEFAULT_SOCKET;
    struct stat st;
    if (!cli->tls && stat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        (size_t)snprintf(cli->default_server, sizeof(cli->default_server), "unix:%s", path) <
            sizeof(cli->default_server) &&
        krylov_connect(cli->client, cli->default_server) == KRYLOV_OK) {
        cli->server = cli->default_server;
        return KRYLOV_OK;
    }
    cli->server = KRYLOV_DEFAULT_SERVER;
    return krylov_connect(cli->client, cli->server);
}

static int kd_connect(kd_cli_t *cli)
{
    int rc =
        cli->server != NULL ? krylov_connect(cli->client, cli->server) : kd_connect_default(cli);
    if (rc != KRYLOV_OK || cli->user == NULL)
        return rc;
    return krylov_auth(cli->client, cli->user, cli->token, NULL, 0);
}

static int kd_fail(kd_cli_t *cli)
{
    return kd_report(cli, KD_EXIT_ERROR, krylov_error_code(cli->client), "%s",
                     krylov_error_message(cli->client));
}

static int kd_parse_double(kd_cli_t *cli, const char *opt, const char *text, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(v))
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "%s wants a number, not '%s'", opt, text);
    *out = v;
    return 0;
}

static int kd_parse_int(kd_cli_t *cli, const char *opt, const char *text, int64_t min, int64_t *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0 || v < min)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "%s wants an integer >= %lld, not '%s'", opt,
                         (long long)min, text);
    *out = v;
    return 0;
}

static uint64_t kd_random_state;

/* uniform in [-1, 1): xorshift64* seeded from the clock */
static double kd_random_value(void)
{
    if (kd_random_state == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        kd_random_state = ((uint64_t)ts.tv_sec * 1000000007ull) ^ (uint64_t)ts.tv_nsec;
        kd_random_state |= 1;
    }
    uint64_t x = kd_random_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    kd_random_state = x;
    return (double)((x * 0x2545F4914F6CDD1Dull) >> 11) / 4503599627370496.0 - 1.0;
}

/* "ones", "random" or a Matrix Market vector file of exactly n values; NULL after reporting. */
static double *kd_load_vector(kd_cli_t *cli, const char *spec, int64_t n, const char *what)
{
    size_t count = n > 0 ? (size_t)n : 1;
    if (strcmp(spec, "ones") == 0 || strcmp(spec, "random") == 0) {
        double *v = malloc(count * sizeof(double));
        if (v == NULL) {
            kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "out of memory for %s", what);
            return NULL;
        }
        int ones = spec[0] == 'o';
        for (int64_t i = 0; i < n; i++)
            v[i] = ones ? 1.0 : kd_random_value();
        return v;
    }
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    if (kd_mtx_file_read(spec, KRYLOV_MAX_VECTOR_FILE, &text, &len, &err) != KD_OK) {
        kd_report(cli, KD_EXIT_ERROR, kd_error_wire_name(err.code), "%s: %s", what, err.message);
        return NULL;
    }
    double *v = NULL;
    int64_t rows = 0, cols = 0;
    int rc = kd_mtx_read_dense(text, len, n > 0 ? n : 1, &v, &rows, &cols, &err);
    free(text);
    if (rc != KD_OK) {
        kd_report(cli, KD_EXIT_ERROR, kd_error_wire_name(rc), "%s: %s: %s", what, spec,
                  err.message);
        return NULL;
    }
    if (rows * cols != n) {
        kd_report(cli, KD_EXIT_ERROR, "BAD_REQUEST",
                  "%s: %s holds %lld x %lld values; the matrix needs %lld", what, spec,
                  (long long)rows, (long long)cols, (long long)n);
        free(v);
        return NULL;
    }
    return v;
}

static int kd_save_vector(kd_cli_t *cli, const char *path, const double *v, int64_t n)
{
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    int rc = kd_mtx_write_dense(v, n, 1, &text, &len, &err);
    if (rc == KD_OK)
        rc = kd_mtx_file_write(path, text, len, &err);
    free(text);
    if (rc != KD_OK)
        return kd_report(cli, KD_EXIT_ERROR, kd_error_wire_name(rc), "writing %s: %s", path,
                         err.message);
    return 0;
}

static double kd_norm2(const double *v, int64_t n)
{
    double s = 0.0;
    for (int64_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

static double kd_mib(int64_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* The matrix.info fields as JSON members of the object being written. */
static void kd_json_info_fields(kd_json_t *j, const krylov_matrix_info_t *m)
{
    kd_json_kv_str(j, "id", m->id);
    kd_json_kv_str(j, "name", m->name);
    kd_json_kv_int(j, "rows", m->rows);
    kd_json_kv_int(j, "cols", m->cols);
    kd_json_kv_int(j, "nnz", m->nnz);
    kd_json_kv_str(j, "dtype", m->dtype);
    kd_json_kv_str(j, "format", m->format);
    kd_json_kv_int(j, "device_bytes", m->device_bytes);
    kd_json_kv_bool(j, "pinned", m->pinned);
    kd_json_kv_bool(j, "resident", m->resident);
    kd_json_kv_int(j, "uses", m->uses);
    kd_json_kv_str(j, "reorder", m->reorder);
    if (m->symmetric >= 0)
        kd_json_kv_bool(j, "symmetric", m->symmetric);
    else
        kd_json_kv_null(j, "symmetric");
    kd_json_key(j, "bandwidth");
    kd_json_object_begin(j);
    kd_json_kv_int(j, "before", m->bandwidth_before);
    kd_json_kv_int(j, "after", m->bandwidth_after);
    kd_json_object_end(j);
    kd_json_key(j, "stats");
    kd_json_object_begin(j);
    kd_json_kv_int(j, "min_row", m->min_row);
    kd_json_kv_int(j, "max_row", m->max_row);
    kd_json_kv_double(j, "mean_row", m->mean_row);
    kd_json_kv_double(j, "stddev_row", m->stddev_row);
    kd_json_kv_int(j, "empty_rows", m->empty_rows);
    kd_json_kv_int(j, "nonfinite", m->nonfinite);
    kd_json_object_end(j);
    kd_json_key(j, "candidates");
    kd_json_array_begin(j);
    for (int i = 0; i < m->ncandidates; i++) {
        const krylov_format_candidate_t *cand = &m->candidates[i];
        kd_json_object_begin(j);
        kd_json_kv_str(j, "format", cand->format);
        if (cand->dropped[0] != '\0')
            kd_json_kv_str(j, "dropped", cand->dropped);
        else
            kd_json_kv_double(j, "time_ms", cand->time_ms);
        kd_json_object_end(j);
    }
    kd_json_array_end(j);
}

/* A matrix's info as one JSON document on stdout. */
static void kd_json_info(const krylov_matrix_info_t *m)
{
    kd_json_t j;
    kd_json_init(&j, stdout);
    kd_json_object_begin(&j);
    kd_json_info_fields(&j, m);
    kd_json_object_end(&j);
    kd_json_finish(&j);
}

static void kd_print_info(const krylov_matrix_info_t *m)
{
    printf("id           %s\n", m->id);
    if (m->name[0] != '\0')
        printf("name         %s\n", m->name);
    printf("shape        %lld x %lld, %lld nonzeros, %s\n", (long long)m->rows, (long long)m->cols,
           (long long)m->nnz, m->dtype);
    printf("format       %s (%.2f MiB on the device)%s%s\n", m->format, kd_mib(m->device_bytes),
           m->pinned ? ", pinned" : "", m->resident ? "" : ", evicted (reloads on use)");
    printf("rows         %lld..%lld nonzeros, mean %.2f, stddev %.2f, %lld empty\n",
           (long long)m->min_row, (long long)m->max_row, m->mean_row, m->stddev_row,
           (long long)m->empty_rows);
    if (m->nonfinite > 0)
        printf("nonfinite    %lld values are NaN or infinite\n", (long long)m->nonfinite);
    if (m->reorder[0] != '\0' && strcmp(m->reorder, "none") != 0)
        printf("reorder      %s (bandwidth %lld -> %lld)\n", m->reorder,
               (long long)m->bandwidth_before, (long long)m->bandwidth_after);
    else
        printf("reorder      none (bandwidth %lld)\n", (long long)m->bandwidth_before);
    if (m->symmetric >= 0)
        printf("symmetric    %s\n", m->symmetric ? "yes (a_ij == a_ji exactly)"
                                                 : "no (cg, pcg and sd refuse it; solve "
                                                   "--method auto picks a general method)");
    printf("uses         %lld\n", (long long)m->uses);
    for (int i = 0; i < m->ncandidates; i++) {
        const krylov_format_candidate_t *cand = &m->candidates[i];
        int chosen = strcmp(cand->format, m->format) == 0;
        printf("%-13s%-14s", i == 0 ? "candidates" : "", cand->format);
        if (cand->dropped[0] != '\0')
            printf("dropped: %s%s\n", cand->dropped, chosen ? "  (chosen)" : "");
        else
            printf("%.4f ms%s\n", cand->time_ms, chosen ? "  (chosen)" : "");
    }
}

/* The file's matrix as the server canonicalises it (protocol/mtx.h: duplicates summed, columns
 * ascending), then krylov_put_like: its values alone on like's pattern. */
static int kd_put_like_file(kd_cli_t *cli, const char *path, const char *like,
                            const krylov_put_options_t *opt, krylov_matrix_info_t *info)
{
    char *text = NULL;
    size_t len = 0;
    kd_err_t err = {0};
    kd_csr_t *csr = NULL;
    const kd_csr_limits_t limits = {
        .max_rows = KD_CSR_INDEX_MAX, .max_cols = KD_CSR_INDEX_MAX, .max_nnz = KD_CSR_INDEX_MAX};
    int rc = kd_mtx_file_read(path, 0, &text, &len, &err);
    if (rc == KD_OK)
        rc = kd_mtx_read_matrix(text, len, KD_DTYPE_F64, &limits, &csr, &err);
    free(text);
    if (rc != KD_OK)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "%s: %s", path, err.message);
    rc = krylov_put_like(cli->client, like, csr->rows, csr->cols, csr->indptr, csr->indices,
                         csr->values, opt, info);
    kd_csr_free(csr);
    return rc == KRYLOV_OK ? KD_OK : kd_fail(cli);
}

static int kd_cmd_put(kd_cli_t *cli, int argc, char **argv)
{
    if (argc < 1)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "which file?");
    krylov_put_options_t opt = {0};
    const char *like = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--pin") == 0)
            opt.pin = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--like") == 0)
            like = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--name") == 0)
            opt.name = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--format") == 0)
            opt.format = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--dtype") == 0)
            opt.dtype = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--reorder") == 0)
            opt.reorder = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--persist") == 0)
            opt.persist = argv[++i];
        else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", argv[i]);
    }
    /* A file that cannot be read is this side's error, not the server's. */
    FILE *probe = fopen(argv[0], "rb");
    if (probe == NULL)
        return kd_report(cli, KD_EXIT_ERROR, "FILE", "cannot open '%s': %s", argv[0],
                         strerror(errno));
    fclose(probe);
    kd_progress_t bar;
    kd_progress_init(&bar, stderr, cli->progress, "upload");
    if (bar.enabled)
        krylov_set_send_progress(cli->client, kd_progress_bytes, &bar);
    krylov_matrix_info_t info;
    int rc = kd_connect(cli);
    if (rc == KRYLOV_OK && like != NULL) {
        rc = kd_put_like_file(cli, argv[0], like, &opt, &info);
        krylov_set_send_progress(cli->client, NULL, NULL);
        kd_progress_done(&bar);
        if (rc != KD_OK)
            return rc;
    } else {
        if (rc == KRYLOV_OK)
            rc = krylov_put_file(cli->client, argv[0], &opt, &info);
        krylov_set_send_progress(cli->client, NULL, NULL);
        kd_progress_done(&bar);
        if (rc != KRYLOV_OK)
            return kd_fail(cli);
    }
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_info_fields(&j, &info);
        kd_json_kv_bool(&j, "created", info.created);
        kd_json_kv_str(&j, "file", argv[0]);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else {
        printf("%s\n", info.id);
    }
    fprintf(stderr, "%s: %lld x %lld, %lld nonzeros, %s, format %s%s\n", argv[0],
            (long long)info.rows, (long long)info.cols, (long long)info.nnz, info.dtype,
            info.format, info.created ? "" : " (already on the server)");
    return 0;
}

static int kd_cmd_multiply(kd_cli_t *cli, int argc, char **argv)
{
    if (argc < 2)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE",
                         "usage: multiply A_ID B_ID [--transpose-a] [--name N] [--format F] "
                         "[--pin] [--reorder R]");
    krylov_multiply_options_t opt = {0};
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--transpose-a") == 0)
            opt.transpose_a = 1;
        else if (strcmp(argv[i], "--pin") == 0)
            opt.pin = 1;
        else if (i + 1 < argc && strcmp(argv[i], "--name") == 0)
            opt.name = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--format") == 0)
            opt.format = argv[++i];
        else if (i + 1 < argc && strcmp(argv[i], "--reorder") == 0)
            opt.reorder = argv[++i];
        else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", argv[i]);
    }
    krylov_matrix_info_t info;
    krylov_multiply_stats_t stats;
    if (kd_connect(cli) != KRYLOV_OK ||
        krylov_multiply(cli->client, argv[0], argv[1], &opt, &info, &stats) != KRYLOV_OK)
        return kd_fail(cli);
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_info_fields(&j, &info);
        kd_json_kv_bool(&j, "created", info.created);
        kd_json_kv_str(&j, "a", argv[0]);
        kd_json_kv_str(&j, "b", argv[1]);
        kd_json_kv_bool(&j, "transpose_a", opt.transpose_a);
        kd_json_key(&j, "spgemm");
        kd_json_object_begin(&j);
        kd_json_kv_int(&j, "products", stats.products);
        kd_json_kv_int(&j, "nnz", stats.nnz);
        kd_json_kv_double(&j, "time_ms", stats.time_ms);
        kd_json_object_end(&j);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else {
        printf("%s\n", info.id);
    }
    fprintf(stderr,
            "%s: %lld x %lld, %lld nonzeros from %lld products in %.3f ms, %s, format "
            "%s%s\n",
            opt.transpose_a ? "A^T B" : "A B", (long long)info.rows, (long long)info.cols,
            (long long)info.nnz, (long long)stats.products, stats.time_ms, info.dtype, info.format,
            info.created ? "" : " (already on the server)");
    return 0;
}

static int kd_cmd_info(kd_cli_t *cli, int argc, char **argv)
{
    if (argc != 1)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "usage: info ID");
    krylov_matrix_info_t info;
    if (kd_connect(cli) != KRYLOV_OK || krylov_info(cli->client, argv[0], &info) != KRYLOV_OK)
        return kd_fail(cli);
    if (cli->json) {
        kd_json_info(&info);
    } else {
        kd_print_info(&info);
    }
    return 0;
}

static int kd_cmd_drop(kd_cli_t *cli, int argc, char **argv)
{
    if (argc != 1)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "usage: drop ID");
    if (kd_connect(cli) != KRYLOV_OK || krylov_drop(cli->client, argv[0]) != KRYLOV_OK)
        return kd_fail(cli);
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "id", argv[0]);
        kd_json_kv_bool(&j, "dropped", 1);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else {
        printf("dropped %s\n", argv[0]);
    }
    return 0;
}

static int kd_cmd_pin(kd_cli_t *cli, int argc, char **argv)
{
    int pinned = 1;
    if (argc == 2 && strcmp(argv[1], "--off") == 0)
        pinned = 0;
    else if (argc != 1)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "usage: pin ID [--off]");
    krylov_matrix_info_t info;
    if (kd_connect(cli) != KRYLOV_OK || krylov_pin(cli->client, argv[0], pinned) != KRYLOV_OK ||
        krylov_info(cli->client, argv[0], &info) != KRYLOV_OK)
        return kd_fail(cli);
    if (cli->json) {
        kd_json_info(&info);
    } else {
        printf("%s %s\n", info.pinned ? "pinned" : "unpinned", info.id);
    }
    return 0;
}

static int kd_cmd_spmv(kd_cli_t *cli, int argc, char **argv)
{
    if (argc < 2)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE",
                         "usage: spmv ID X.mtx|ones|random [-o Y.mtx]");
    const char *out = NULL;
    for (int i = 2; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "-o") == 0)
            out = argv[++i];
        else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", argv[i]);
    }
    krylov_matrix_info_t info;
    if (kd_connect(cli) != KRYLOV_OK || krylov_info(cli->client, argv[0], &info) != KRYLOV_OK)
        return kd_fail(cli);
    double *x = kd_load_vector(cli, argv[1], info.cols, "x");
    double *y = malloc((info.rows > 0 ? (size_t)info.rows : 1) * sizeof(double));
    int rc = KD_EXIT_ERROR;
    double server_ms = -1.0;
    if (x == NULL)
        goto done;
    if (y == NULL) {
        rc = kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "out of memory for y");
        goto done;
    }
    if (krylov_spmv_timed(cli->client, argv[0], 1.0, x, info.cols, 0.0, y, info.rows, &server_ms) !=
        KRYLOV_OK) {
        rc = kd_fail(cli);
        goto done;
    }
    if (out != NULL && (rc = kd_save_vector(cli, out, y, info.rows)) != 0)
        goto done;
    double norm = kd_norm2(y, info.rows);
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "id", info.id);
        kd_json_kv_int(&j, "rows", info.rows);
        kd_json_kv_int(&j, "cols", info.cols);
        kd_json_kv_str(&j, "x", argv[1]);
        kd_json_kv_double(&j, "norm", norm);
        kd_json_kv_double(&j, "time_ms", server_ms);
        kd_json_kv_str(&j, "output", out);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else {
        printf("||y|| = %.17g (%lld rows, %.3f ms on the server)\n", norm, (long long)info.rows,
               server_ms);
    }
    rc = 0;
done:
    free(x);
    free(y);
    return rc;
}

static int kd_solve_json(kd_cli_t *cli, const krylov_matrix_info_t *info,
                         const krylov_solve_options_t *opt, const krylov_solve_result_t *res,
                         const char *rhs, const char *out, const char *plot, const char *plot_error)
{
    kd_json_t j;
    kd_json_init(&j, stdout);
    kd_json_object_begin(&j);
    kd_json_kv_str(&j, "id", info->id);
    kd_json_kv_int(&j, "rows", info->rows);
    /* what ran: "auto" resolved, "pcg" as cg + jacobi */
    kd_json_kv_str(&j, "method", res->method[0] != '\0' ? res->method : opt->method);
    kd_json_kv_str(&j, "requested_method", opt->method);
    kd_json_kv_str(&j, "preconditioner",
                   res->preconditioner[0] != '\0' ? res->preconditioner : NULL);
    if (opt->restart > 0)
        kd_json_kv_int(&j, "restart", opt->restart);
    kd_json_kv_str(&j, "rhs", rhs);
    kd_json_kv_double(&j, "rtol", opt->rtol);
    kd_json_kv_double(&j, "atol", opt->atol);
    if (opt->maxiter >= 0)
        kd_json_kv_int(&j, "maxiter", opt->maxiter);
    else
        kd_json_kv_null(&j, "maxiter");
    kd_json_kv_str(&j, "status", res->status);
    kd_json_kv_bool(&j, "converged", strcmp(res->status, "converged") == 0);
    kd_json_kv_int(&j, "iterations", res->iterations);
    kd_json_kv_double(&j, "residual_norm", res->residual_norm);
    kd_json_kv_double(&j, "relative_residual", res->relative_residual);
    kd_json_kv_double(&j, "time_ms", res->time_ms);
    kd_json_kv_str(&j, "message", res->message);
    if (opt->history) {
        if (opt->check_every > 0)
            kd_json_kv_int(&j, "check_every", opt->check_every);
        else
            kd_json_kv_null(&j, "check_every");
        kd_json_key(&j, "history");
        kd_json_array_begin(&j);
        for (int64_t i = 0; i < res->history_len; i++)
            kd_json_double(&j, res->history[i]);
        kd_json_array_end(&j);
    }
    kd_json_kv_str(&j, "output", out);
    kd_json_kv_str(&j, "plot", plot_error == NULL ? plot : NULL);
    if (plot_error != NULL)
        kd_json_kv_str(&j, "plot_error", plot_error);
    kd_json_object_end(&j);
    kd_json_finish(&j);
    return 0;
}

/* The options solve and solve-batch share (method, preconditioner, restart, tolerances,
 * maxiter) at argv[*i]: 1 when it was one (its value taken: *i moves on; *bad set when the value
 * is not a number), 0 when it is something else. */
static int kd_solve_option(kd_cli_t *cli, int argc, char **argv, int *i,
                           krylov_solve_options_t *opt, int *bad)
{
    const char *a = argv[*i];
    if (*i + 1 >= argc)
        return 0;
    const char *v = argv[*i + 1];
    if (strcmp(a, "--method") == 0)
        opt->method = v;
    else if (strcmp(a, "--preconditioner") == 0)
        opt->preconditioner = v;
    else if (strcmp(a, "--restart") == 0)
        *bad = kd_parse_int(cli, a, v, 1, &opt->restart);
    else if (strcmp(a, "--rtol") == 0)
        *bad = kd_parse_double(cli, a, v, &opt->rtol);
    else if (strcmp(a, "--atol") == 0)
        *bad = kd_parse_double(cli, a, v, &opt->atol);
    else if (strcmp(a, "--maxiter") == 0)
        *bad = kd_parse_int(cli, a, v, 0, &opt->maxiter);
    else
        return 0;
    (*i)++;
    return 1;
}

static int kd_cmd_solve(kd_cli_t *cli, int argc, char **argv)
{
    if (argc < 1)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "which matrix id?");
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    const char *rhs = "ones", *out = NULL, *x0_path = NULL, *plot = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc, bad = 0;
        if (strcmp(a, "--history") == 0)
            opt.history = 1;
        else if (has && strcmp(a, "--rhs") == 0)
            rhs = argv[++i];
        else if (kd_solve_option(cli, argc, argv, &i, &opt, &bad))
            ;
        else if (has && strcmp(a, "--precond-options") == 0)
            opt.preconditioner_options = argv[++i];
        else if (has && strcmp(a, "--check-every") == 0)
            bad = kd_parse_int(cli, a, argv[++i], 1, &opt.check_every);
        else if (has && strcmp(a, "--x0") == 0)
            x0_path = argv[++i];
        else if (has && strcmp(a, "-o") == 0)
            out = argv[++i];
        else if (has && strcmp(a, "--plot") == 0)
            plot = argv[++i];
        else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", a);
        if (bad)
            return bad;
    }
    /* Look for gnuplot first, so the message comes before a long solve, not after it. */
    char gnuplot[4096];
    char plot_error[1024];
    const char *plot_failed = NULL;
    if (plot != NULL) {
        opt.history = 1;
        if (opt.check_every <= 0)
            opt.check_every = 1; /* one point per iteration */
        if (kd_plot_find_program("gnuplot", gnuplot, sizeof(gnuplot)) != 0) {
            snprintf(plot_error, sizeof(plot_error),
                     "--plot needs gnuplot, which is not on PATH; install it (Debian: apt-get "
                     "install gnuplot-nox) or use --json for the history. Solving without the "
                     "plot.");
            plot_failed = plot_error;
            fprintf(stderr, "krylov solve: %s\n", plot_error);
        }
    }
    krylov_matrix_info_t info;
    if (kd_connect(cli) != KRYLOV_OK || krylov_info(cli->client, argv[0], &info) != KRYLOV_OK)
        return kd_fail(cli);
    double *b = kd_load_vector(cli, rhs, info.rows, "rhs");
    double *x0 = NULL;
    double *x = malloc((info.rows > 0 ? (size_t)info.rows : 1) * sizeof(double));
    int rc = KD_EXIT_ERROR;
    if (b == NULL ||
        (x0_path != NULL && (x0 = kd_load_vector(cli, x0_path, info.rows, "x0")) == NULL))
        goto done;
    if (x == NULL) {
        rc = kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "out of memory for x");
        goto done;
    }
    opt.x0 = x0;
    kd_progress_t bar;
    kd_progress_init(&bar, stderr, cli->progress, opt.method);
    double target = fmax(opt.rtol * kd_norm2(b, info.rows), opt.atol);
    kd_progress_set_target(&bar, target, opt.maxiter); /* -1: the server's default, unknown here */
    if (bar.enabled) {
        opt.progress = kd_progress_solve;
        opt.progress_ctx = &bar;
    }
    krylov_solve_result_t res;
    int solved = krylov_solve(cli->client, argv[0], b, info.rows, &opt, x, &res);
    kd_progress_done(&bar);
    if (solved != KRYLOV_OK) {
        rc = kd_fail(cli);
        goto done;
    }
    if (plot != NULL && plot_failed == NULL) {
        char title[256];
        snprintf(title, sizeof(title), "%s on %s (%lld x %lld, %lld nonzeros): %s", opt.method,
                 info.name[0] ? info.name : info.id, (long long)info.rows, (long long)info.cols,
                 (long long)info.nnz, res.status);
        kd_plot_series_t series = {.residuals = res.history,
                                   .count = res.history_len,
                                   .check_every = opt.check_every,
                                   .iterations = res.iterations,
                                   .target = target,
                                   .title = title};
        if (kd_plot_convergence(gnuplot, plot, &series, plot_error, sizeof(plot_error)) != 0) {
            plot_failed = plot_error;
            fprintf(stderr, "krylov solve: --plot: %s\n", plot_error);
        }
    }
    rc = out != NULL ? kd_save_vector(cli, out, x, info.rows) : 0;
    if (rc == 0) {
        if (cli->json) {
            kd_solve_json(cli, &info, &opt, &res, rhs, out, plot, plot_failed);
        } else {
            printf("status             %s%s%s\n", res.status, res.message[0] ? ": " : "",
                   res.message);
            const int with_precond = strcmp(res.preconditioner, "none") != 0;
            if (res.method[0] != '\0')
                printf("method             %s%s%s%s\n", res.method, with_precond ? " + " : "",
                       with_precond ? res.preconditioner : "",
                       strcmp(opt.method, "auto") == 0 ? " (auto)" : "");
            printf("iterations         %lld\n", (long long)res.iterations);
            printf("relative residual  %.3e  (||b - Ax|| = %.3e)\n", res.relative_residual,
                   res.residual_norm);
            printf("time               %.3f ms on the server\n", res.time_ms);
            if (opt.history && plot == NULL)
                for (int64_t i = 0; i < res.history_len; i++)
                    printf("history %lld %.6e\n", (long long)i, res.history[i]);
            if (plot != NULL && plot_failed == NULL)
                printf("plot               %s\n", plot);
        }
        if (plot_failed != NULL)
            rc = KD_EXIT_PLOT;
        else if (strcmp(res.status, "converged") != 0)
            rc = KD_EXIT_NOT_CONVERGED;
    }
    krylov_solve_result_free(&res);
done:
    free(b);
    free(x0);
    free(x);
    return rc;
}

/* solve-batch's table: a row per item, or with more than `limit` items a row per status (its
 * count, iteration range and worst relative residual). */
static void kd_many_table(const char *const *ids, const int64_t *rows,
                          const krylov_item_result_t *res, size_t count, size_t limit)
{
    kd_table_t t;
    if (count <= limit) {
        const char *headers[] = {">ITEM",       "ID",           ">ROWS",  "STATUS",
                                 ">ITERATIONS", ">REL. RESID.", "MESSAGE"};
        kd_table_init(&t, 7, headers);
        for (size_t k = 0; k < count; k++) {
            const int err = strcmp(res[k].status, "error") == 0;
            kd_table_cell(&t, "%zu", k);
            kd_table_cell(&t, "%s", ids[k]);
            kd_table_cell(&t, "%lld", (long long)rows[k]);
            kd_table_cell(&t, "%s", res[k].status);
            kd_table_cell(&t, err ? "-" : "%lld", (long long)res[k].iterations);
            kd_table_cell(&t, err ? "-" : "%.3e", res[k].relative_residual);
            kd_table_cell(&t, "%s%s%s", res[k].error, err ? ": " : "", res[k].message);
        }
        kd_table_print(&t, stdout);
        return;
    }
    const char *headers[] = {"STATUS", ">ITEMS", ">ITERATIONS", ">WORST REL. RESID."};
    kd_table_init(&t, 4, headers);
    for (size_t k = 0; k < count; k++) { /* each status once, in the order first seen */
        size_t first = 0;
        while (strcmp(res[first].status, res[k].status) != 0)
            first++;
        if (first != k)
            continue;
        int64_t n = 0, lo = INT64_MAX, hi = 0;
        double worst = 0.0;
        for (size_t i = k; i < count; i++) {
            if (strcmp(res[i].status, res[k].status) != 0)
                continue;
            n++;
            lo = res[i].iterations < lo ? res[i].iterations : lo;
            hi = res[i].iterations > hi ? res[i].iterations : hi;
            worst = res[i].relative_residual > worst ? res[i].relative_residual : worst;
        }
        const int err = strcmp(res[k].status, "error") == 0;
        kd_table_cell(&t, "%s", res[k].status);
        kd_table_cell(&t, "%lld", (long long)n);
        kd_table_cell(&t, err ? "-" : "%lld..%lld", (long long)lo, (long long)hi);
        kd_table_cell(&t, err ? "-" : "%.3e", worst);
    }
    kd_table_print(&t, stdout);
}

static void kd_many_json(const char *const *ids, const krylov_item_result_t *res, size_t count,
                         const krylov_many_stats_t *st, const krylov_solve_options_t *opt)
{
    kd_json_t j;
    kd_json_init(&j, stdout);
    kd_json_object_begin(&j);
    kd_json_kv_str(&j, "method", opt->method);
    kd_json_kv_str(&j, "preconditioner", opt->preconditioner);
    kd_json_kv_int(&j, "count", (int64_t)count);
    kd_json_kv_int(&j, "converged", st->converged);
    kd_json_kv_int(&j, "failed", st->failed);
    kd_json_kv_int(&j, "groups", st->groups);
    kd_json_kv_int(&j, "launches", st->launches);
    kd_json_kv_double(&j, "time_ms", st->time_ms);
    kd_json_key(&j, "items");
    kd_json_array_begin(&j);
    for (size_t k = 0; k < count; k++) {
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "id", ids[k]);
        kd_json_kv_str(&j, "status", res[k].status);
        if (strcmp(res[k].status, "error") == 0) {
            kd_json_kv_str(&j, "error", res[k].error);
        } else {
            kd_json_kv_int(&j, "iterations", res[k].iterations);
            kd_json_kv_double(&j, "residual_norm", res[k].residual_norm);
            kd_json_kv_double(&j, "relative_residual", res[k].relative_residual);
        }
        kd_json_kv_str(&j, "message", res[k].message);
        kd_json_object_end(&j);
    }
    kd_json_array_end(&j);
    kd_json_object_end(&j);
    kd_json_finish(&j);
}

/* solve-batch ID[:RHS] ...: many small systems in one request (solve.batch). An id the server
 * does not know (or the user may not read) is sent as an item of one row: its entry says so. */
static int kd_cmd_solve_batch(kd_cli_t *cli, int argc, char **argv)
{
    krylov_solve_options_t opt;
    krylov_solve_options_init(&opt);
    opt.preconditioner = "none";
    const char *rhs = "ones";
    int64_t limit = 20;
    size_t count = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc, bad = 0;
        if (a[0] != '-')
            argv[count++] = argv[i];
        else if (has && strcmp(a, "--rhs") == 0)
            rhs = argv[++i];
        else if (kd_solve_option(cli, argc, argv, &i, &opt, &bad))
            ;
        else if (has && strcmp(a, "--limit") == 0)
            bad = kd_parse_int(cli, a, argv[++i], 0, &limit);
        else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", a);
        if (bad)
            return bad;
    }
    if (count == 0)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "which matrix ids?");
    if (kd_connect(cli) != KRYLOV_OK)
        return kd_fail(cli);
    krylov_solve_item_t *items = calloc(count, sizeof(*items));
    krylov_item_result_t *res = calloc(count, sizeof(*res));
    const char **ids = calloc(count, sizeof(*ids));
    int64_t *rows = calloc(count, sizeof(*rows));
    int rc = KD_EXIT_ERROR;
    if (items == NULL || res == NULL || ids == NULL || rows == NULL) {
        rc = kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "out of memory for %zu items", count);
        goto done;
    }
    for (size_t k = 0; k < count; k++) {
        char *spec = strchr(argv[k], ':'); /* ID:RHS (an id is hex: no colon) */
        if (spec != NULL)
            *spec++ = '\0';
        ids[k] = argv[k];
        krylov_matrix_info_t info;
        if (krylov_info(cli->client, ids[k], &info) == KRYLOV_OK)
            rows[k] = info.rows;
        else if (strcmp(krylov_error_code(cli->client), "NOT_FOUND") == 0)
            rows[k] = 1; /* the server's answer for this item says it is not there */
        else {
            rc = kd_fail(cli);
            goto done;
        }
        double *b = kd_load_vector(cli, spec != NULL ? spec : rhs, rows[k], "rhs");
        double *x = malloc((size_t)(rows[k] > 0 ? rows[k] : 1) * sizeof(double));
        items[k] = (krylov_solve_item_t){.id = ids[k], .b = b, .n = rows[k], .x = x};
        if (b == NULL || x == NULL) {
            if (x == NULL)
                kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "out of memory for x");
            goto done;
        }
    }
    krylov_many_stats_t st;
    if (krylov_solve_many(cli->client, items, count, &opt, res, &st) != KRYLOV_OK) {
        rc = kd_fail(cli);
        goto done;
    }
    if (cli->json) {
        kd_many_json(ids, res, count, &st, &opt);
    } else {
        kd_many_table(ids, rows, res, count, (size_t)limit);
        printf("%zu items: %lld converged, %lld failed their checks; %lld group(s), %lld "
               "launches, %.3f ms on the server\n",
               count, (long long)st.converged, (long long)st.failed, (long long)st.groups,
               (long long)st.launches, st.time_ms);
    }
    rc = st.converged == (int64_t)count ? KD_EXIT_OK : KD_EXIT_NOT_CONVERGED;
done:
    for (size_t k = 0; items != NULL && k < count; k++) {
        free((void *)items[k].b);
        free(items[k].x);
    }
    free(items);
    free(res);
    free(ids);
    free(rows);
    return rc;
}

static int kd_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct kd_timing {
    double min, median, mean, max;
} kd_timing_t;

static kd_timing_t kd_timing_of(double *v, int64_t n)
{
    kd_timing_t t = {0};
    if (n <= 0)
        return t;
    qsort(v, (size_t)n, sizeof(double), kd_compare_double);
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++)
        sum += v[i];
    t.min = v[0];
    t.max = v[n - 1];
    t.mean = sum / (double)n;
    t.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    return t;
}

/* 2 nnz flops in ms milliseconds, in GFLOP/s */
static double kd_gflops(int64_t nnz, double ms)
{
    return ms > 0.0 ? 2.0 * (double)nnz / (ms * 1e6) : 0.0;
}

static void kd_json_timing(kd_json_t *j, const char *key, const kd_timing_t *t)
{
    kd_json_key(j, key);
    kd_json_object_begin(j);
    kd_json_kv_double(j, "min", t->min);
    kd_json_kv_double(j, "median", t->median);
    kd_json_kv_double(j, "mean", t->mean);
    kd_json_kv_double(j, "max", t->max);
    kd_json_object_end(j);
}

static int kd_cmd_bench(kd_cli_t *cli, int argc, char **argv)
{
    if (argc < 1)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "usage: bench ID [--runs N] [--warmup W]");
    int64_t runs = 20, warmup = 2;
    for (int i = 1; i < argc; i++) {
        int bad;
        if (i + 1 < argc && strcmp(argv[i], "--runs") == 0)
            bad = kd_parse_int(cli, argv[i], argv[i + 1], 1, &runs), i++;
        else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
            bad = kd_parse_int(cli, argv[i], argv[i + 1], 0, &warmup), i++;
        else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", argv[i]);
        if (bad)
            return bad;
    }
    if (runs > 1000000)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "--runs %lld is over 1000000",
                         (long long)runs);
    krylov_matrix_info_t info;
    if (kd_connect(cli) != KRYLOV_OK || krylov_info(cli->client, argv[0], &info) != KRYLOV_OK)
        return kd_fail(cli);
    double *x = kd_load_vector(cli, "random", info.cols, "x");
    double *y = malloc((info.rows > 0 ? (size_t)info.rows : 1) * sizeof(double));
    double *server = malloc((size_t)runs * sizeof(double));
    double *trip = malloc((size_t)runs * sizeof(double));
    int rc = KD_EXIT_ERROR;
    if (x == NULL)
        goto done;
    if (y == NULL || server == NULL || trip == NULL) {
        rc = kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "out of memory");
        goto done;
    }
    kd_progress_t bar;
    kd_progress_init(&bar, stderr, cli->progress, "bench");
    for (int64_t r = -warmup; r < runs; r++) {
        double ms = -1.0, t0 = kd_clock_ms();
        if (krylov_spmv_timed(cli->client, info.id, 1.0, x, info.cols, 0.0, y, info.rows, &ms) !=
            KRYLOV_OK) {
            kd_progress_done(&bar);
            rc = kd_fail(cli);
            goto done;
        }
        double t1 = kd_clock_ms();
        if (r >= 0) {
            server[r] = ms;
            trip[r] = t1 - t0;
        }
        kd_progress_steps(&bar, r + warmup + 1, warmup + runs, "run");
    }
    kd_progress_done(&bar);
    kd_timing_t ts = kd_timing_of(server, runs), tt = kd_timing_of(trip, runs);
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "id", info.id);
        kd_json_kv_str(&j, "name", info.name);
        kd_json_kv_int(&j, "rows", info.rows);
        kd_json_kv_int(&j, "cols", info.cols);
        kd_json_kv_int(&j, "nnz", info.nnz);
        kd_json_kv_str(&j, "dtype", info.dtype);
        kd_json_kv_str(&j, "format", info.format);
        kd_json_kv_int(&j, "runs", runs);
        kd_json_kv_int(&j, "warmup", warmup);
        kd_json_timing(&j, "server_ms", &ts);
        kd_json_timing(&j, "round_trip_ms", &tt);
        kd_json_key(&j, "gflops");
        kd_json_object_begin(&j);
        kd_json_kv_double(&j, "server_best", kd_gflops(info.nnz, ts.min));
        kd_json_kv_double(&j, "server_median", kd_gflops(info.nnz, ts.median));
        kd_json_kv_double(&j, "round_trip_median", kd_gflops(info.nnz, tt.median));
        kd_json_object_end(&j);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else {
        printf("spmv %s%s%s: %lld x %lld, %lld nonzeros, %s, %s\n", info.id,
               info.name[0] ? " " : "", info.name, (long long)info.rows, (long long)info.cols,
               (long long)info.nnz, info.dtype, info.format);
        printf("%lld runs after %lld warm-up\n\n", (long long)runs, (long long)warmup);
        const char *headers[] = {"", ">min ms", ">median ms", ">mean ms", ">GFLOP/s (median)"};
        kd_table_t t;
        kd_table_init(&t, 5, headers);
        kd_table_cell(&t, "server");
        kd_table_cell(&t, "%.4f", ts.min);
        kd_table_cell(&t, "%.4f", ts.median);
        kd_table_cell(&t, "%.4f", ts.mean);
        kd_table_cell(&t, "%.3f", kd_gflops(info.nnz, ts.median));
        kd_table_cell(&t, "round trip");
        kd_table_cell(&t, "%.4f", tt.min);
        kd_table_cell(&t, "%.4f", tt.median);
        kd_table_cell(&t, "%.4f", tt.mean);
        kd_table_cell(&t, "%.3f", kd_gflops(info.nnz, tt.median));
        kd_table_print(&t, stdout);
        printf("\nserver: the spmv request on the server, copying x to the device and y back "
               "included;\nround trip: as seen here, with the network and encoding. "
               "GFLOP/s = 2 nnz / time.\n");
    }
    rc = 0;
done:
    free(x);
    free(y);
    free(server);
    free(trip);
    return rc;
}

static int kd_cmd_list(kd_cli_t *cli, int argc, char **argv)
{
    (void)argv;
    if (argc != 0)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "list takes no arguments");
    krylov_matrix_info_t *list = NULL;
    size_t n = 0;
    if (kd_connect(cli) != KRYLOV_OK || krylov_list(cli->client, &list, &n) != KRYLOV_OK)
        return kd_fail(cli);
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_key(&j, "matrices");
        kd_json_array_begin(&j);
        for (size_t i = 0; i < n; i++) {
            kd_json_object_begin(&j);
            kd_json_info_fields(&j, &list[i]);
            kd_json_object_end(&j);
        }
        kd_json_array_end(&j);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else if (n == 0) {
        printf("no matrices on the server\n");
    } else {
        const char *headers[] = {"ID",    "NAME",   ">ROWS",   ">COLS",  ">NNZ",
                                 "DTYPE", "FORMAT", ">DEVICE", "PINNED", ">USES"};
        kd_table_t t;
        kd_table_init(&t, 10, headers);
        int64_t bytes = 0;
        for (size_t i = 0; i < n; i++) {
            const krylov_matrix_info_t *m = &list[i];
            kd_table_cell(&t, "%s", m->id);
            kd_table_cell(&t, "%s", m->name);
            kd_table_cell(&t, "%lld", (long long)m->rows);
            kd_table_cell(&t, "%lld", (long long)m->cols);
            kd_table_cell(&t, "%lld", (long long)m->nnz);
            kd_table_cell(&t, "%s", m->dtype);
            kd_table_cell(&t, "%s", m->format);
            kd_table_cell(&t, "%.2f MiB", kd_mib(m->device_bytes));
            kd_table_cell(&t, "%s", m->pinned ? "yes" : "no");
            kd_table_cell(&t, "%lld", (long long)m->uses);
            bytes += m->device_bytes;
        }
        kd_table_print(&t, stdout);
        printf("%zu matri%s, %.2f MiB on the device\n", n, n == 1 ? "x" : "ces", kd_mib(bytes));
    }
    free(list);
    return 0;
}

static void kd_format_duration(char *buf, size_t cap, double s)
{
    if (s < 120.0)
        snprintf(buf, cap, "%.1f s", s);
    else if (s < 7200.0)
        snprintf(buf, cap, "%.1f min", s / 60.0);
    else if (s < 172800.0)
        snprintf(buf, cap, "%.1f h", s / 3600.0);
    else
        snprintf(buf, cap, "%.1f days", s / 86400.0);
}

/* One line on the warm-up's progress, on stderr. */
static void kd_print_warm_progress(const krylov_warm_status_t *ws)
{
    fprintf(stderr, "building OpenCL programs: %lld/%lld after %.0f s%s%s\n",
            (long long)(ws->built + ws->failed), (long long)ws->total, ws->elapsed_ms / 1e3,
            ws->building[0] != '\0' ? "; now " : "", ws->building);
}

/* --wait-warm: ask the server to answer once its warm-up is done, a few seconds at a time, and
 * say how far it is between asks. limit_s <= 0: no limit. */
static int kd_wait_warm(kd_cli_t *cli, double limit_s)
{
    const uint64_t start = kd_clock_ns();
    krylov_warm_status_t ws;
    int64_t last = -1;
    for (;;) {
        const double left_ms = limit_s > 0 ? limit_s * 1e3 - kd_clock_ms_since(start) : 2000.0;
        const int64_t step = left_ms < 2000.0 ? (int64_t)(left_ms > 1 ? left_ms : 1) : 2000;
        int rc = krylov_warm_status(cli->client, step, &ws);
        if (rc == KRYLOV_OK)
            break;
        if (rc != KRYLOV_ETIMEOUT || krylov_warm_status(cli->client, -1, &ws) != KRYLOV_OK)
            return kd_fail(cli);
        if (ws.built + ws.failed != last) {
            kd_print_warm_progress(&ws);
            last = ws.built + ws.failed;
        }
        if (limit_s > 0 && kd_clock_ms_since(start) >= limit_s * 1e3)
            return kd_report(cli, KD_EXIT_ERROR, "TIMEOUT",
                             "the server has built %lld of %lld OpenCL programs; not done within "
                             "%.0f s",
                             (long long)(ws.built + ws.failed), (long long)ws.total, limit_s);
    }
    if (strcmp(ws.state, "done") == 0)
        fprintf(stderr, "OpenCL programs ready: %lld built%s in %.0f s\n", (long long)ws.built,
                ws.failed > 0 ? " (some failed: see the server's log)" : "", ws.elapsed_ms / 1e3);
    return 0;
}

static int kd_cmd_status(kd_cli_t *cli, int argc, char **argv)
{
    int wait = 0;
    double limit_s = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--wait-warm") == 0)
            wait = 1;
        else if (strncmp(argv[i], "--wait-warm=", 12) == 0) {
            wait = 1;
            if (kd_parse_double(cli, "--wait-warm", argv[i] + 12, &limit_s) != 0)
                return KD_EXIT_USAGE;
        } else
            return kd_report(cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", argv[i]);
    }
    krylov_server_status_t st;
    if (kd_connect(cli) != KRYLOV_OK)
        return kd_fail(cli);
    int rc = wait ? kd_wait_warm(cli, limit_s) : 0;
    if (rc != 0)
        return rc;
    if (krylov_status(cli->client, &st) != KRYLOV_OK)
        return kd_fail(cli);
    krylov_warm_status_t ws; /* an older server has none: then it is not shown */
    const int has_warm = krylov_warm_status(cli->client, -1, &ws) == KRYLOV_OK;
    if (cli->json) {
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "server", cli->server);
        kd_json_kv_str(&j, "version", st.version);
        kd_json_key(&j, "device");
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "name", st.device);
        kd_json_kv_str(&j, "type", st.device_type);
        kd_json_kv_str(&j, "platform", st.platform);
        kd_json_kv_str(&j, "vendor", st.vendor);
        kd_json_kv_str(&j, "version", st.device_version);
        kd_json_kv_int(&j, "global_mem_bytes", st.global_mem_bytes);
        kd_json_kv_int(&j, "compute_units", st.compute_units);
        kd_json_kv_bool(&j, "fp64", st.fp64);
        kd_json_object_end(&j);
        kd_json_kv_int(&j, "matrices", st.matrices);
        kd_json_kv_int(&j, "device_bytes_used", st.device_bytes_used);
        kd_json_kv_double(&j, "uptime_s", st.uptime_s);
        kd_json_kv_int(&j, "requests", st.requests);
        kd_json_kv_int(&j, "errors", st.errors);
        kd_json_kv_int(&j, "connections", st.connections);
        kd_json_kv_int(&j, "queue_depth", st.queue_depth);
        if (has_warm) {
            kd_json_key(&j, "warm_up");
            kd_json_object_begin(&j);
            kd_json_kv_str(&j, "state", ws.state);
            kd_json_kv_int(&j, "total", ws.total);
            kd_json_kv_int(&j, "built", ws.built);
            kd_json_kv_int(&j, "failed", ws.failed);
            kd_json_kv_double(&j, "elapsed_ms", ws.elapsed_ms);
            kd_json_object_end(&j);
        }
        kd_json_key(&j, "requests_by_method");
        kd_json_object_begin(&j);
        for (int i = 0; i < st.nmethods; i++)
            kd_json_kv_int(&j, st.by_method[i].method, st.by_method[i].requests);
        kd_json_object_end(&j);
        kd_json_object_end(&j);
        kd_json_finish(&j);
        return 0;
    }
    char uptime[32];
    kd_format_duration(uptime, sizeof(uptime), st.uptime_s);
    printf("server      %s, krylovd %s, up %s\n", cli->server, st.version, uptime);
    printf("device      %s (%s)\n", st.device, st.device_type);
    printf("platform    %s; %s\n", st.platform, st.device_version);
    printf("memory      %.1f GiB, %lld compute units, fp64 %s\n",
           (double)st.global_mem_bytes / (1024.0 * 1024.0 * 1024.0), (long long)st.compute_units,
           st.fp64 ? "yes" : "no");
    printf("matrices    %lld, %.2f MiB on the device\n", (long long)st.matrices,
           kd_mib(st.device_bytes_used));
    printf("clients     %lld connected, %lld requests queued\n", (long long)st.connections,
           (long long)st.queue_depth);
    printf("requests    %lld (%lld errors)\n", (long long)st.requests, (long long)st.errors);
    if (has_warm && strcmp(ws.state, "off") == 0)
        printf("programs    built on first use (no warm-up)\n");
    else if (has_warm)
        printf("programs    %lld/%lld OpenCL programs built%s%s\n", (long long)ws.built,
               (long long)ws.total,
               strcmp(ws.state, "done") == 0 ? "" : " (warm-up running in the background)",
               ws.failed > 0 ? ", some failed (see the server's log)" : "");
    if (st.nmethods > 0) {
        printf("\n");
        const char *mheaders[] = {"METHOD", ">REQUESTS"};
        kd_table_t m;
        kd_table_init(&m, 2, mheaders);
        for (int i = 0; i < st.nmethods; i++) {
            kd_table_cell(&m, "%s", st.by_method[i].method);
            kd_table_cell(&m, "%lld", (long long)st.by_method[i].requests);
        }
        kd_table_print(&m, stdout);
    }
    return 0;
}

/* token new NAME ROLE: 256 random bits as 64 hex digits, shown once, and the auth-file line
 * with their SHA-256. Needs no server. */
static int kd_cmd_token(kd_cli_t *cli, int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[0], "new") != 0)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "usage: krylov token new NAME ROLE");
    const char *name = argv[1], *role = argv[2];
    size_t n = strlen(name);
    int name_ok = n > 0 && n < 64;
    for (size_t k = 0; k < n && name_ok; k++)
        name_ok = (name[k] >= 'a' && name[k] <= 'z') || (name[k] >= 'A' && name[k] <= 'Z') ||
                  (name[k] >= '0' && name[k] <= '9') || strchr("._@-", name[k]) != NULL;
    if (!name_ok)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE",
                         "'%s' is not a user name (1..63 of A-Z a-z 0-9 . _ @ -)", name);
    if (strcmp(role, "read") != 0 && strcmp(role, "write") != 0 && strcmp(role, "admin") != 0)
        return kd_report(cli, KD_EXIT_USAGE, "USAGE", "role '%s' is not read, write or admin",
                         role);
    unsigned char raw[32], digest[SHA256_DIGEST_LENGTH];
    if (RAND_bytes(raw, sizeof(raw)) != 1)
        return kd_report(cli, KD_EXIT_ERROR, "INTERNAL", "no random bytes from OpenSSL");
    char token[2 * sizeof(raw) + 1], hash[2 * sizeof(digest) + 1];
    for (size_t k = 0; k < sizeof(raw); k++)
        snprintf(token + 2 * k, 3, "%02x", raw[k]);
    SHA256((const unsigned char *)token, strlen(token), digest);
    for (size_t k = 0; k < sizeof(digest); k++)
        snprintf(hash + 2 * k, 3, "%02x", digest[k]);
    if (cli->json) {
        char line[256];
        snprintf(line, sizeof(line), "%s %s %s", name, role, hash);
        kd_json_t j;
        kd_json_init(&j, stdout);
        kd_json_object_begin(&j);
        kd_json_kv_str(&j, "name", name);
        kd_json_kv_str(&j, "role", role);
        kd_json_kv_str(&j, "token", token);
        kd_json_kv_str(&j, "auth_file_line", line);
        kd_json_object_end(&j);
        kd_json_finish(&j);
    } else {
        printf("token: %s\nauth-file line: %s %s %s\n", token, name, role, hash);
        fprintf(stderr,
                "krylov token: the token is shown once: give it to %s (KRYLOV_TOKEN or "
                "a --token-file), add the line to the auth file, then SIGHUP krylovd\n",
                name);
    }
    OPENSSL_cleanse(raw, sizeof(raw));
    OPENSSL_cleanse(token, sizeof(token));
    return KD_EXIT_OK;
}

typedef struct kd_command {
    const char *name;
    int (*run)(kd_cli_t *cli, int argc, char **argv);
} kd_command_t;

static const kd_command_t kd_commands[] = {
    {"put", kd_cmd_put},       {"multiply", kd_cmd_multiply}, {"info", kd_cmd_info},
    {"list", kd_cmd_list},     {"drop", kd_cmd_drop},         {"pin", kd_cmd_pin},
    {"spmv", kd_cmd_spmv},     {"solve", kd_cmd_solve},       {"bench", kd_cmd_bench},
    {"status", kd_cmd_status}, {"token", kd_cmd_token},       {"solve-batch", kd_cmd_solve_batch},
};

/* Take the flags that may stand anywhere (--json, --progress, --no-progress) out of argv. */
static int kd_take_anywhere_flags(kd_cli_t *cli, int argc, char **argv)
{
    int kept = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            cli->json = 1;
        else if (strcmp(argv[i], "--progress") == 0)
            cli->progress = KD_PROGRESS_ON;
        else if (strcmp(argv[i], "--no-progress") == 0)
            cli->progress = KD_PROGRESS_OFF;
        else
            argv[kept++] = argv[i];
    }
    argv[kept] = NULL;
    return kept;
}

int main(int argc, char **argv)
{
    kd_cli_t cli = {.progress = KD_PROGRESS_AUTO};
    cli.server = getenv("KRYLOV_SERVER");
    const char *tls_env = getenv("KRYLOV_TLS");
    cli.tls = tls_env != NULL && tls_env[0] != '\0' && strcmp(tls_env, "0") != 0;
    if (cli.server != NULL && cli.server[0] == '\0')
        cli.server = NULL; /* the default, chosen when connecting */
    cli.user = getenv("KRYLOV_USER");
    if (cli.user != NULL && cli.user[0] == '\0')
        cli.user = NULL;
    argc = kd_take_anywhere_flags(&cli, argc, argv);
    int timeout_ms = 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            kd_usage(stdout);
            return 0;
        } else if (i + 1 < argc && strcmp(argv[i], "--server") == 0) {
            cli.server = argv[++i];
        } else if (strcmp(argv[i], "--tls") == 0) {
            cli.tls = 1;
        } else if (i + 1 < argc && strcmp(argv[i], "--ca") == 0) {
            cli.tls = 1;
            cli.tls_files.cafile = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--cert") == 0) {
            cli.tls = 1;
            cli.tls_files.certfile = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--key") == 0) {
            cli.tls = 1;
            cli.tls_files.keyfile = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--user") == 0) {
            cli.user = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--token-file") == 0) {
            cli.token_file = argv[++i];
        } else if (i + 1 < argc && strcmp(argv[i], "--timeout") == 0) {
            int64_t t;
            if (kd_parse_int(&cli, "--timeout", argv[++i], 0, &t) != 0)
                return KD_EXIT_USAGE;
            timeout_ms = t > 2147483647 ? 2147483647 : (int)t;
        } else {
            kd_usage(stderr);
            return kd_report(&cli, KD_EXIT_USAGE, "USAGE", "unknown option '%s'", argv[i]);
        }
    }
    if (i >= argc) {
        kd_usage(stderr);
        return kd_report(&cli, KD_EXIT_USAGE, "USAGE", "which command?");
    }
    cli.command = argv[i++];
    if (strcmp(cli.command, "help") == 0) {
        kd_usage(stdout);
        return 0;
    }
    const kd_command_t *cmd = NULL;
    for (size_t k = 0; k < sizeof(kd_commands) / sizeof(kd_commands[0]); k++)
        if (strcmp(cli.command, kd_commands[k].name) == 0)
            cmd = &kd_commands[k];
    if (cmd == NULL) {
        const char *unknown = cli.command;
        cli.command = NULL;
        kd_usage(stderr);
        return kd_report(&cli, KD_EXIT_USAGE, "USAGE", "unknown command '%s'", unknown);
    }

    if (cli.user != NULL && cmd->run != kd_cmd_token &&
        kd_read_token(&cli, cli.token, sizeof(cli.token)) != KD_EXIT_OK)
        return KD_EXIT_USAGE;
    cli.client = krylov_client_new();
    if (cli.client == NULL)
        return kd_report(&cli, KD_EXIT_ERROR, "INTERNAL", "out of memory");
    krylov_set_timeout(cli.client, timeout_ms);
    int rc = cli.tls ? krylov_set_tls(cli.client, &cli.tls_files) : KRYLOV_OK;
    rc = rc == KRYLOV_OK ? cmd->run(&cli, argc - i, argv + i) : kd_fail(&cli);
    krylov_client_free(cli.client);
    OPENSSL_cleanse(cli.token, sizeof(cli.token));
    return rc;
}
