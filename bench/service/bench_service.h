/*
 * What the krylov-bench subcommands that talk to a krylovd share (bench_heat.c, bench_putlike.c):
 * the daemon to talk to (one already running at --server, or one started here with --spawn on a
 * free loopback port, with a temporary state directory or none), the bytes each request put on
 * the wire (counted through the client's send progress), and the raw loopback TCP rate measured in
 * the same run, against which the service's byte rates are judged.
 */
#ifndef KD_BENCH_SERVICE_H
#define KD_BENCH_SERVICE_H

#include "krylov.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Where the daemon is, or how to start one: filled by kd_bench_service_option. */
typedef struct kd_bench_service {
    char address[128];      /* "host:port" (default 127.0.0.1:7373) */
    const char *spawn;      /* a krylovd binary to start, or NULL: use address */
    const char *device;     /* its --device (default auto) */
    const char *spawn_args; /* more of its options, whitespace-separated, or NULL */
    int state;              /* 1: give it a temporary --state-dir (removed at the end) */
    pid_t pid;              /* the started daemon, 0 when none */
    char dir[256];          /* its temporary directory (port file, state), "" when none */
    uint64_t sent;          /* bytes of the requests sent on the client, summed */
    const char *persist;    /* kd_bench_service_put's matrix.put persist, or NULL: the default */
} kd_bench_service_t;

void kd_bench_service_init(kd_bench_service_t *s);

/* Consume argv[*i] (and its value) when it is one of the options below; 1 when it was, 0 when
 * not, -1 when its value is missing. Options: --server HOST:PORT, --host H, --port P,
 * --spawn PATH, --spawn-device SEL, --spawn-args 'OPTS', --spawn-state. */
int kd_bench_service_option(kd_bench_service_t *s, int argc, char **argv, int *i);

/* The options' lines for a usage text. */
extern const char kd_bench_service_usage[];

/* Start the daemon when asked (waiting up to 180 s for its port: PoCL may compile programs
 * first), then connect a client to it with send progress counted into s->sent. Returns the
 * client, or NULL with a message on stderr (the daemon stopped again). */
krylov_client_t *kd_bench_service_open(kd_bench_service_t *s);

/* Free the client, stop a started daemon (SIGTERM, then SIGKILL after 20 s) and remove its
 * directory. Returns the daemon's exit status (0 when none was started), -1 when it died. */
int kd_bench_service_close(kd_bench_service_t *s, krylov_client_t *c);

/* One put through c, timed: a full put of the square CSR (like_id NULL) or its values alone on
 * like_id's pattern. KRYLOV_OK or the client's error code (its message in c). */
typedef struct kd_bench_put {
    double wall_ms, server_ms; /* the client's wall clock; the reply's time_ms (-1: not said) */
    uint64_t bytes;            /* the request's bytes */
    char format[32];
} kd_bench_put_t;
int kd_bench_service_put(kd_bench_service_t *s, krylov_client_t *c, int64_t rows,
                         const int32_t *indptr, const int32_t *indices, const double *values,
                         const char *like_id, krylov_matrix_info_t *info, kd_bench_put_t *out);

/* Raw loopback TCP: one thread writes `bytes` through a 127.0.0.1 connection in 1 MiB writes
 * while another reads them in 1 MiB reads (the client's steps), `repeat` times;
 * the median rate in bytes per second, 0 when sockets or threads fail. */
double kd_bench_loopback_rate(size_t bytes, int repeat);

#endif
