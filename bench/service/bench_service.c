/*
 * The daemon a service benchmark talks to, the bytes it sends, and raw loopback TCP
 * (bench_service.h).
 */
#define _GNU_SOURCE
#include "bench/service/bench_service.h"
#include "bench/bench.h"
#include "common/clock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

const char kd_bench_service_usage[] =
    "  --server HOST:PORT  a running krylovd (default 127.0.0.1:7373; or --host H --port P)\n"
    "  --spawn PATH        start this krylovd on a free loopback port instead (stopped at the "
    "end)\n"
    "  --spawn-device SEL  its --device (default auto)\n"
    "  --spawn-args 'OPTS' more of its options, e.g. '--warm-programs none'\n"
    "  --spawn-state       give it a temporary --state-dir, under $TMPDIR or /tmp (default:\n"
    "                      none, nothing kept)\n";

void kd_bench_service_init(kd_bench_service_t *s)
{
    memset(s, 0, sizeof(*s));
    snprintf(s->address, sizeof(s->address), "127.0.0.1:7373");
    s->device = "auto";
}

int kd_bench_service_option(kd_bench_service_t *s, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    if (strcmp(a, "--spawn-state") == 0) {
        s->state = 1;
        return 1;
    }
    static const char *const valued[] = {"--server", "--host",         "--port",
                                         "--spawn",  "--spawn-device", "--spawn-args"};
    int which = -1;
    for (int k = 0; k < 6; k++)
        if (strcmp(a, valued[k]) == 0)
            which = k;
    if (which < 0)
        return 0;
    if (*i + 1 >= argc)
        return -1;
    const char *v = argv[++*i];
    char host[100] = "127.0.0.1";
    const char *colon = strrchr(s->address, ':');
    switch (which) {
    case 0:
        snprintf(s->address, sizeof(s->address), "%s", v);
        break;
    case 1: /* keep the port */
        snprintf(s->address, sizeof(s->address), "%s%s", v, colon != NULL ? colon : ":7373");
        break;
    case 2: /* keep the host */
        if (colon != NULL)
            snprintf(host, sizeof(host), "%.*s", (int)(colon - s->address), s->address);
        snprintf(s->address, sizeof(s->address), "%s:%s", host, v);
        break;
    case 3:
        s->spawn = v;
        break;
    case 4:
        s->device = v;
        break;
    default:
        s->spawn_args = v;
        break;
    }
    return 1;
}

static int kd_bs_remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void kd_bs_remove_dir(kd_bench_service_t *s)
{
    if (s->dir[0] != '\0')
        nftw(s->dir, kd_bs_remove_one, 16, FTW_DEPTH | FTW_PHYS);
    s->dir[0] = '\0';
}

/* Exec the daemon (in the child); never returns. */
static void kd_bs_exec(const kd_bench_service_t *s, const char *port_file, const char *state_dir,
                       char *args_copy)
{
    char *argv[72];
    int n = 0;
    argv[n++] = (char *)s->spawn;
    argv[n++] = "--listen";
    argv[n++] = "127.0.0.1:0";
    argv[n++] = "--port-file";
    argv[n++] = (char *)port_file;
    argv[n++] = "--device";
    argv[n++] = (char *)s->device;
    argv[n++] = "--log-level";
    argv[n++] = "warn";
    if (state_dir != NULL) {
        argv[n++] = "--state-dir";
        argv[n++] = (char *)state_dir;
    }
    char *save = NULL;
    for (char *t = args_copy != NULL ? strtok_r(args_copy, " \t", &save) : NULL;
         t != NULL && n < 70; t = strtok_r(NULL, " \t", &save))
        argv[n++] = t;
    argv[n] = NULL;
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* a benchmark that dies takes its daemon along */
    execv(argv[0], argv);
    perror(s->spawn);
    _exit(127);
}

/* Start s->spawn and wait for its port; 0 or -1 (message on stderr). */
static int kd_bs_spawn(kd_bench_service_t *s)
{
    const char *tmp = getenv("TMPDIR"); /* where the state directory's disk is chosen */
    snprintf(s->dir, sizeof(s->dir), "%s/krylov-bench-XXXXXX",
             tmp != NULL && tmp[0] != '\0' && strlen(tmp) < 200 ? tmp : "/tmp");
    if (mkdtemp(s->dir) == NULL) {
        perror("krylov-bench: mkdtemp");
        s->dir[0] = '\0';
        return -1;
    }
    char port_file[300], state_dir[300];
    snprintf(port_file, sizeof(port_file), "%s/port", s->dir);
    snprintf(state_dir, sizeof(state_dir), "%s/state", s->dir);
    char *args = s->spawn_args != NULL ? strdup(s->spawn_args) : NULL;
    s->pid = fork();
    if (s->pid == 0)
        kd_bs_exec(s, port_file, s->state ? state_dir : NULL, args);
    free(args);
    if (s->pid < 0) {
        perror("krylov-bench: fork");
        s->pid = 0;
        return -1;
    }
    for (int i = 0; i < 18000; i++) {
        FILE *f = fopen(port_file, "r");
        int port = 0;
        if (f != NULL) {
            if (fscanf(f, "%d", &port) != 1)
                port = 0;
            fclose(f);
        }
        if (port > 0) {
            snprintf(s->address, sizeof(s->address), "127.0.0.1:%d", port);
            return 0;
        }
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            fprintf(stderr, "krylov-bench: %s exited during start-up (status %d)\n", s->spawn,
                    status);
            s->pid = 0;
            return -1;
        }
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    fprintf(stderr, "krylov-bench: %s gave no port in 180 s\n", s->spawn);
    return -1;
}

static void kd_bs_count(void *ctx, uint64_t sent, uint64_t total)
{
    if (sent == total)
        ((kd_bench_service_t *)ctx)->sent += total;
}

krylov_client_t *kd_bench_service_open(kd_bench_service_t *s)
{
    if (s->spawn != NULL && kd_bs_spawn(s) != 0) {
        kd_bench_service_close(s, NULL);
        return NULL;
    }
    krylov_client_t *c = krylov_client_new();
    if (c == NULL || krylov_connect(c, s->address) != KRYLOV_OK) {
        fprintf(stderr, "krylov-bench: connecting to %s: %s\n", s->address,
                c != NULL ? krylov_error_message(c) : "out of memory");
        kd_bench_service_close(s, c);
        return NULL;
    }
    /* A spawned daemon builds its programs in the background: time a warm one, not the
     * compiler (an older server without warm_up is taken as warm). */
    krylov_warm_status_t warm;
    if (s->spawn != NULL && krylov_warm_status(c, 0, &warm) == KRYLOV_OK)
        fprintf(stderr, "krylov-bench: %s built %lld OpenCL programs in %.1f s\n", s->spawn,
                (long long)warm.built, warm.elapsed_ms / 1e3);
    krylov_set_send_progress(c, kd_bs_count, s);
    return c;
}

int kd_bench_service_close(kd_bench_service_t *s, krylov_client_t *c)
{
    krylov_client_free(c);
    int rc = 0;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        int status = 0;
        pid_t got = 0;
        for (int i = 0; i < 2000 && (got = waitpid(s->pid, &status, WNOHANG)) == 0; i++) {
            struct timespec ts = {0, 10000000};
            nanosleep(&ts, NULL);
        }
        if (got == 0) {
            fprintf(stderr, "krylov-bench: the daemon did not stop in 20 s: killed\n");
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
        }
        rc = got == s->pid && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        s->pid = 0;
    }
    kd_bs_remove_dir(s);
    return rc;
}

typedef struct kd_bs_reader {
    int fd;
    size_t bytes;
    size_t got;
} kd_bs_reader_t;

static void *kd_bs_read_all(void *arg)
{
    kd_bs_reader_t *r = arg;
    const size_t step = (size_t)1 << 20;
    char *buf = malloc(step);
    while (buf != NULL && r->got < r->bytes) {
        ssize_t n = recv(r->fd, buf, step, 0);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            break;
        if (n > 0)
            r->got += (size_t)n;
    }
    free(buf);
    return NULL;
}

/* One connected pair over 127.0.0.1: out[0] the sender, out[1] the receiver. */
static int kd_bs_tcp_pair(int out[2])
{
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    out[0] = out[1] = -1;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &len) != 0 ||
        (out[0] = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        connect(out[0], (struct sockaddr *)&a, sizeof(a)) != 0 ||
        (out[1] = accept(ls, NULL, NULL)) < 0) {
        if (ls >= 0)
            close(ls);
        if (out[0] >= 0)
            close(out[0]);
        return -1;
    }
    close(ls);
    int one = 1; /* as the client and the server set it */
    setsockopt(out[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(out[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return 0;
}

/* One transfer of `bytes`: its seconds, or -1. */
static double kd_bs_transfer(const char *data, size_t bytes)
{
    int fd[2];
    if (kd_bs_tcp_pair(fd) != 0)
        return -1.0;
    kd_bs_reader_t r = {fd[1], bytes, 0};
    pthread_t t;
    double s = -1.0;
    if (pthread_create(&t, NULL, kd_bs_read_all, &r) == 0) {
        const size_t step = (size_t)1 << 20;
        uint64_t t0 = kd_clock_ns();
        size_t off = 0;
        while (off < bytes) {
            size_t n = bytes - off < step ? bytes - off : step;
            ssize_t w = send(fd[0], data + off, n, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            off += (size_t)w;
        }
        if (off < bytes)
            shutdown(fd[0], SHUT_RDWR); /* the reader must not wait for bytes never sent */
        pthread_join(t, NULL);
        if (off == bytes && r.got == bytes)
            s = (double)(kd_clock_ns() - t0) / 1e9;
    }
    close(fd[0]);
    close(fd[1]);
    return s;
}

double kd_bench_loopback_rate(size_t bytes, int repeat)
{
    char *data = malloc(bytes + 1);
    if (data == NULL || repeat < 1) {
        free(data);
        return 0.0;
    }
    for (size_t i = 0; i < bytes; i++) /* pages touched before timing */
        data[i] = (char)(i * 131u);
    double rates[16];
    int n = 0;
    for (int r = 0; r < repeat && n < 16; r++) {
        double s = kd_bs_transfer(data, bytes);
        if (s > 0.0)
            rates[n++] = (double)bytes / s;
    }
    free(data);
    return n == (repeat < 16 ? repeat : 16) ? kd_bench_median(rates, (size_t)n) : 0.0;
}

int kd_bench_service_put(kd_bench_service_t *s, krylov_client_t *c, int64_t rows,
                         const int32_t *indptr, const int32_t *indices, const double *values,
                         const char *like_id, krylov_matrix_info_t *info, kd_bench_put_t *out)
{
    const krylov_put_options_t opt = {.persist = s->persist};
    const krylov_put_options_t *o = s->persist != NULL ? &opt : NULL;
    const uint64_t sent = s->sent, t0 = kd_clock_ns();
    const int rc = like_id != NULL
                       ? krylov_put_like(c, like_id, rows, rows, indptr, indices, values, o, info)
                       : krylov_put_csr(c, rows, rows, indptr, indices, values, o, info);
    if (rc != KRYLOV_OK)
        return rc;
    out->wall_ms = kd_clock_ms_since(t0);
    out->server_ms = info->time_ms;
    out->bytes = s->sent - sent;
    snprintf(out->format, sizeof(out->format), "%s", info->format);
    return KRYLOV_OK;
}
