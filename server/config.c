/*
 * Defaults and command-line parsing for krylovd (see config.h). Parsing is strict: an unknown
 * option, a missing value or a malformed number stops the daemon with a message naming it.
 */
#include "server/config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kd_config_defaults(kd_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    snprintf(cfg->listen, sizeof(cfg->listen), "127.0.0.1:7373");
    snprintf(cfg->device, sizeof(cfg->device), "auto");
    cfg->log_level = KD_LOG_INFO;
    cfg->max_message = (size_t)1 << 30;
    cfg->max_array_elements = (size_t)1 << 20;
    cfg->max_connections = 1024;
    cfg->queue_depth = 256;
    cfg->max_rows = INT32_MAX - 1;
    cfg->max_cols = INT32_MAX;
    cfg->max_nnz = INT32_MAX;
    cfg->max_nrhs = 64;
    cfg->max_pending_write = (size_t)1 << 30;
    cfg->shutdown_grace_ms = 10000;
}

int kd_config_parse_size(const char *text, size_t *out)
{
    if (text == NULL || *text == '\0' || *text == '-')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || end == text)
        return -1;
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10, end++;
    else if (*end == 'M' || *end == 'm')
        shift = 20, end++;
    else if (*end == 'G' || *end == 'g')
        shift = 30, end++;
    else if (*end == 'T' || *end == 't')
        shift = 40, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    if (shift > 0 && v > (SIZE_MAX >> shift))
        return -1;
    *out = (size_t)(v << shift);
    return 0;
}

static int kd_parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    errno = 0;
    char *end;
    long long v = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

void kd_config_print_usage(const char *argv0)
{
    printf(
        "usage: %s [options]\n"
        "\n"
        "Serve sparse matrix-vector products and Krylov solves over msgpack-rpc on TCP.\n"
        "\n"
        "  --listen HOST:PORT         address to listen on (default 127.0.0.1:7373; port 0 = any)\n"
        "  --device auto|gpu|cpu|N    OpenCL device (default auto: a GPU if present, else CPU)\n"
        "  --list-devices             print the OpenCL devices and exit\n"
        "  --state-dir DIR            where accepted matrices are kept across restarts\n"
        "  --port-file FILE           write the bound port here once listening\n"
        "  --log-level LEVEL          debug | info | warn | error (default info)\n"
        "  --log-file FILE            append the log here instead of stderr\n"
        "  --max-message SIZE         largest request in bytes (default 1G; K/M/G suffixes)\n"
        "  --max-array-elements N     msgpack array elements per request (default 1048576)\n"
        "  --max-connections N        concurrent clients (default 1024)\n"
        "  --queue-depth N            requests waiting per device before BUSY (default 256)\n"
        "  --max-rows N, --max-cols N, --max-nnz N   matrix size limits\n"
        "  --max-nrhs N               right-hand sides per solve (default 64)\n"
        "  --max-pending-write SIZE   unread response bytes per client before pausing it\n"
        "  --shutdown-grace-ms MS     how long running jobs may finish on SIGTERM (default 10000)\n"
        "  --format NAME              force one SpMV format for every matrix\n"
        "  --version, --help\n",
        argv0);
}

int kd_config_parse_args(kd_config_t *cfg, int argc, char **argv, kd_err_t *err)
{
    for (int i = 1; i < argc; i++) {
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0 || strcmp(opt, "-h") == 0) {
            kd_config_print_usage(argv[0]);
            return 1;
        }
        if (strcmp(opt, "--version") == 0) {
            printf("krylovd %s\n", KD_VERSION);
            return 1;
        }
        if (strcmp(opt, "--list-devices") == 0) {
            cfg->list_devices = 1;
            continue;
        }
        const char *val = NULL;
        const char *eq = strchr(opt, '=');
        char name[64];
        if (strncmp(opt, "--", 2) == 0 && eq != NULL) {
            size_t n = (size_t)(eq - opt);
            if (n >= sizeof(name))
                return kd_err_set(err, KD_EBADREQ, "unknown option '%s'", opt);
            memcpy(name, opt, n);
            name[n] = '\0';
            val = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", opt);
            if (i + 1 < argc)
                val = argv[i + 1], i++;
        }
        if (val == NULL)
            return kd_err_set(err, KD_EBADREQ, "option '%s' needs a value", name);

        int64_t n64;
        size_t size;
#define KD_STR_OPT(flag, field)                                                                    \
    if (strcmp(name, flag) == 0) {                                                                 \
        if (strlen(val) >= sizeof(cfg->field))                                                     \
            return kd_err_set(err, KD_EBADREQ, "%s: value too long", flag);                        \
        snprintf(cfg->field, sizeof(cfg->field), "%s", val);                                       \
        continue;                                                                                  \
    }
#define KD_SIZE_OPT(flag, field)                                                                   \
    if (strcmp(name, flag) == 0) {                                                                 \
        if (kd_config_parse_size(val, &size) != 0 || size == 0)                                    \
            return kd_err_set(err, KD_EBADREQ, "%s: '%s' is not a size (e.g. 64M)", flag, val);    \
        cfg->field = size;                                                                         \
        continue;                                                                                  \
    }
#define KD_INT_OPT(flag, field, lo, hi)                                                            \
    if (strcmp(name, flag) == 0) {                                                                 \
        if (kd_parse_i64(val, lo, hi, &n64) != 0)                                                  \
            return kd_err_set(err, KD_EBADREQ, "%s: '%s' is not a number in %lld..%lld", flag,     \
                              val, (long long)(lo), (long long)(hi));                              \
        cfg->field = n64;                                                                          \
        continue;                                                                                  \
    }
        KD_STR_OPT("--listen", listen)
        KD_STR_OPT("--device", device)
        KD_STR_OPT("--state-dir", state_dir)
        KD_STR_OPT("--port-file", port_file)
        KD_STR_OPT("--log-file", log_file)
        KD_STR_OPT("--format", default_format)
        KD_SIZE_OPT("--max-message", max_message)
        KD_SIZE_OPT("--max-pending-write", max_pending_write)
        KD_INT_OPT("--max-array-elements", max_array_elements, 1, INT32_MAX)
        KD_INT_OPT("--max-connections", max_connections, 1, 1000000)
        KD_INT_OPT("--queue-depth", queue_depth, 1, 1000000)
        KD_INT_OPT("--max-rows", max_rows, 1, INT32_MAX - 1)
        KD_INT_OPT("--max-cols", max_cols, 1, INT32_MAX)
        KD_INT_OPT("--max-nnz", max_nnz, 1, INT32_MAX)
        KD_INT_OPT("--max-nrhs", max_nrhs, 1, 4096)
        KD_INT_OPT("--shutdown-grace-ms", shutdown_grace_ms, 0, 3600000)
#undef KD_STR_OPT
#undef KD_SIZE_OPT
#undef KD_INT_OPT
        if (strcmp(name, "--log-level") == 0) {
            if (kd_log_parse_level(val, &cfg->log_level) != 0)
                return kd_err_set(err, KD_EBADREQ,
                                  "--log-level: '%s' is not debug, info, warn or error", val);
            continue;
        }
        return kd_err_set(err, KD_EBADREQ, "unknown option '%s' (try --help)", name);
    }
    return 0;
}
