/*
 * krylovd's configuration: every limit and setting with its safe default, filled from the command
 * line (and, later, a config file). Sizes accept K/M/G suffixes (powers of 1024).
 */
#ifndef KD_SERVER_CONFIG_H
#define KD_SERVER_CONFIG_H

#include "common/error.h"
#include "common/log.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#define KD_PATH_MAX 4096

typedef struct kd_config {
    char listen[256]; /* host:port; port 0 picks a free port (see port_file) */
    char device[64];  /* auto | gpu | cpu | N */
    char state_dir[KD_PATH_MAX];
    char port_file[KD_PATH_MAX]; /* written with the bound port once listening (tests, scripts) */
    char log_file[KD_PATH_MAX];  /* "" = stderr */
    kd_log_level_t log_level;
    int list_devices;          /* --list-devices: print and exit */
    size_t max_message;        /* bytes in one request */
    size_t max_array_elements; /* msgpack array/map elements in one request */
    size_t max_connections;
    size_t queue_depth; /* jobs waiting per device before BUSY */
    int64_t max_rows, max_cols, max_nnz, max_nrhs;
    size_t max_pending_write; /* response bytes a client has not read before we stop reading it */
    int shutdown_grace_ms;    /* SIGTERM: how long running jobs may finish */
    char default_format[32];  /* "" = choose per matrix */
} kd_config_t;

void kd_config_defaults(kd_config_t *cfg);

/* Parse a size: "123", "64K", "512M", "2G". Returns 0 or -1. */
int kd_config_parse_size(const char *text, size_t *out);

/* Apply command-line arguments. Returns 0 to run, 1 when it printed --help or --version (exit 0),
 * or KD_EBADREQ with a message for a bad argument. */
int kd_config_parse_args(kd_config_t *cfg, int argc, char **argv, kd_err_t *err);

void kd_config_print_usage(const char *argv0);

#endif
