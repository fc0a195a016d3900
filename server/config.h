/*
 * krylovd's configuration: every limit and setting with its safe default, filled from a config
 * file (--config FILE: `key = value` lines, keys named like the long options) and then from the
 * command line, which overrides the file. Sizes accept K/M/G/T suffixes (powers of 1024).
 * docs/OPERATIONS.md lists every key.
 */
#ifndef KD_SERVER_CONFIG_H
#define KD_SERVER_CONFIG_H

/* A placeholder until measured on several GPUs (docs/OPERATIONS.md): a matrix of this size is
 * about 0.6 GB in CSR (float64), where one GPU's SpMV takes a few ms and the halo exchange's
 * fixed cost (tens of us) stops mattering. */
#define KD_CONFIG_DISTRIBUTE_NNZ 50000000

#include "common/error.h"
#include "common/log.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define KD_PATH_MAX 4096

typedef struct kd_config {
    char listen[256];      /* host:port; port 0 picks a free port (see port_file); "" = no TCP */
    int listen_given;      /* a TCP --listen was given (else a unix: one replaces the default) */
    char listen_unix[108]; /* --listen unix:PATH: a Unix socket too (sun_path's size) */
    char unix_group[64];   /* the Unix socket's group ("" = the daemon's) */
    char auth_file[KD_PATH_MAX]; /* users, roles, token hashes; "" = no authentication */
    int no_auth; /* --no-auth: listen beyond loopback without an auth file, on purpose */
    /* --tenant-dedupe on (1): content two users put is stored once; off (0): each user's copy is
     * its own (docs/OPERATIONS.md, "Security") */
    int tenant_dedupe;
    char device[64]; /* auto | gpu | cpu | N */
    char state_dir[KD_PATH_MAX];
    int persist_default; /* --persist-default: a put without persist (kd_persist_t; 0: sync) */
    char cache_dir[KD_PATH_MAX];         /* compiled programs (--cache-dir); "" until resolved,
                                            "none" = no program cache */
    char config_file[KD_PATH_MAX];       /* --config: where the file settings came from, or "" */
    char metrics[256];                   /* HOST:PORT for Prometheus /metrics, "" = off */
    char metrics_port_file[KD_PATH_MAX]; /* written with the metrics port (tests, scripts) */
    char port_file[KD_PATH_MAX]; /* written with the bound port once listening (tests, scripts) */
    char log_file[KD_PATH_MAX];  /* "" = stderr */
    kd_log_level_t log_level;
    int list_devices;          /* --list-devices: print and exit */
    size_t max_message;        /* bytes in one request */
    size_t max_array_elements; /* msgpack array/map elements in one request */
    size_t max_connections;
    size_t max_connection_jobs; /* requests one connection may have queued or running */
    size_t queue_depth;         /* jobs waiting per device before BUSY */
    int64_t max_rows, max_cols, max_nnz, max_nrhs;
    int64_t distribute_nnz;     /* under mpirun: matrix.put's distribute = "auto" spreads a matrix
                                   with more nonzeros than this over the ranks */
    size_t max_pending_write;   /* response bytes a client has not read before we stop reading it */
    size_t max_shm_bytes;       /* shared-memory regions one connection, and one user over all its
                                   connections, may register (dispatch/shm.c); 0 = none */
    size_t client_memory;       /* bytes all connections together may hold (conn.c); 0 = auto:
                                   min(1 GiB, RAM / 8) */
    size_t connection_memory;   /* bytes of requests in flight and replies unread one connection
                                   may hold before its reading pauses; 0 = auto:
                                   min(client_memory / 8, 32 MiB) */
    int64_t idle_timeout_ms;    /* close a connection with nothing in flight, silent this long */
    int64_t memory_trim_ms;     /* idle this long: freed host memory back to the system (trim.c) */
    int64_t message_timeout_ms; /* close a connection whose message takes longer to arrive */
    int shutdown_grace_ms;      /* SIGTERM: how long running jobs may finish */
    char default_format[32];    /* "" = choose per matrix */
    size_t device_memory_bytes; /* device-memory budget in bytes, or 0: ... */
    double device_memory_percent; /* ... this percentage of the device's global memory */
    size_t state_max_bytes;       /* total size of the state files, 0 = no limit */
    size_t factor_memory;         /* host bytes method "direct"'s factors may hold together; 0 =
                                     auto: RAM / 4, at most 4 GiB (server/hostmem.c) */
    size_t test_max_alloc; /* tests only: lower the device's largest allocation (0 = as is) */
    int warm_programs;     /* 1: build programs before READY (--warm-programs all or a list),
                              0: none */
    char warm_only[256];   /* --warm-programs NAME,NAME: only these kernels/ programs; "" = all */
    int warm_threads;      /* threads building programs at start-up; 0 = one per CPU, at most 8 */
    int spin_us;           /* loop and worker poll this long before sleeping; -1 = automatic
                              (on a GPU: KD_SERVER_LOOP_SPIN_NS / KD_SERVER_WORKER_SPIN_NS) */
    char tls_cert[KD_PATH_MAX]; /* PEM certificate chain: the listener speaks TLS; "" = plaintext */
    char tls_key[KD_PATH_MAX];  /* PEM private key of tls_cert */
    char tls_ca[KD_PATH_MAX];   /* PEM CA: clients must present a certificate it signed; "" = no */
} kd_config_t;

void kd_config_defaults(kd_config_t *cfg);

/* Parse a size: "123", "64K", "512M", "2G". Returns 0 or -1. */
int kd_config_parse_size(const char *text, size_t *out);

/* Apply command-line arguments, after the settings of the --config file among them if there is
 * one. Returns 0 to run, 1 when it printed --help or --version (exit 0), or KD_EBADREQ with a
 * message for a bad argument (or a bad line of the file, with its path and line number). */
int kd_config_parse_args(kd_config_t *cfg, int argc, char **argv, kd_err_t *err);

/* Apply a config file's settings: `key = value` lines; `#` starts a comment (at the start of a
 * line, or after whitespace); blank lines are ignored; a value may be double-quoted. KD_EBADREQ
 * naming the file and line for an unknown key or a bad value, KD_EIO when it cannot be read. */
int kd_config_load_file(kd_config_t *cfg, const char *path, kd_err_t *err);

/* Set one setting by its long option name without the dashes ("queue-depth"). KD_EBADREQ for a
 * bad value, KD_ENOTFOUND for an unknown name. */
int kd_config_set(kd_config_t *cfg, const char *name, const char *value, kd_err_t *err);

void kd_config_print_usage(const char *argv0);

/* Fill an unset cache_dir with the default: $CACHE_DIRECTORY (systemd's CacheDirectory=, the
 * first of its list), else $XDG_CACHE_HOME/krylovd, else $HOME/.cache/krylovd, else none. */
void kd_config_resolve_cache_dir(kd_config_t *cfg);

#endif
