/*
 * Defaults, the config file and command-line parsing for krylovd (see config.h). Parsing is
 * strict: an unknown option or key, a missing value or a malformed number stops the daemon with a
 * message naming it (and, for the file, the line). One table of settings serves both, so a key in
 * the file is always spelled like its long option.
 */
#include "server/config.h"

#include <ctype.h>
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
    cfg->max_connection_jobs = 64;
    cfg->spin_us = -1;
    cfg->tenant_dedupe = 1;
    cfg->queue_depth = 256;
    cfg->max_rows = INT32_MAX - 1;
    cfg->max_cols = INT32_MAX;
    cfg->max_nnz = INT32_MAX;
    cfg->max_nrhs = 64;
    cfg->distribute_nnz = KD_CONFIG_DISTRIBUTE_NNZ;
    cfg->max_pending_write = (size_t)64 << 20;
    cfg->max_shm_bytes = (size_t)4 << 30;
    cfg->idle_timeout_ms = 600000;
    cfg->memory_trim_ms = 1000;
    cfg->message_timeout_ms = 120000;
    cfg->shutdown_grace_ms = 10000;
    cfg->device_memory_percent = 90.0;
    cfg->warm_programs = 1;
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
    if (v > SIZE_MAX || (shift > 0 && v > (SIZE_MAX >> shift)))
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

/* "90%" (a percentage in (0, 100]) or a size ("12G"). */
static int kd_parse_device_memory(const char *text, kd_config_t *cfg)
{
    size_t len = strlen(text);
    if (len > 1 && text[len - 1] == '%') {
        char num[32];
        if (len - 1 >= sizeof(num))
            return -1;
        memcpy(num, text, len - 1);
        num[len - 1] = '\0';
        errno = 0;
        char *end;
        double p = strtod(num, &end);
        if (errno != 0 || end == num || *end != '\0' || !(p > 0.0 && p <= 100.0))
            return -1;
        cfg->device_memory_percent = p;
        cfg->device_memory_bytes = 0;
        return 0;
    }
    size_t bytes;
    if (kd_config_parse_size(text, &bytes) != 0 || bytes == 0)
        return -1;
    cfg->device_memory_bytes = bytes;
    return 0;
}

void kd_config_print_usage(const char *argv0)
{
    printf(
        "usage: %s [options]\n"
        "\n"
        "Serve sparse matrix-vector products and Krylov solves over msgpack-rpc on TCP.\n"
        "Every option can also be set in a config file as `name = value` (name without --).\n"
        "\n"
        "  --config FILE              read settings from FILE first; options given here win\n"
        "  --listen HOST:PORT         address to listen on (default 127.0.0.1:7373; port 0 = any)\n"
        "  --listen unix:PATH         also (or only) a Unix socket, mode 0660; may be given with\n"
        "                             one HOST:PORT\n"
        "  --unix-group NAME          the Unix socket's group (default the daemon's)\n"
        "  --auth-file FILE           users, roles and token hashes (docs/OPERATIONS.md, "
        "Security);\n"
        "                             SIGHUP reloads it\n"
        "  --no-auth                  allow a non-loopback --listen without --auth-file\n"
        "  --tenant-dedupe on|off     with --auth-file: content several users put is stored once\n"
        "                             (on, the default) or once per user (off: no user's put\n"
        "                             or timing depends on another's; docs/OPERATIONS.md,\n"
        "                             Security)\n"
        "  --device auto|gpu|cpu|N    OpenCL device (default auto: a GPU if present, else CPU)\n"
        "  --list-devices             print the OpenCL devices and exit\n"
        "  --state-dir DIR            where accepted matrices are kept across restarts\n"
        "  --state-max-bytes SIZE     limit on the state files' total (default 0: none)\n"
        "  --persist-default MODE     a matrix.put without persist: sync (written before the\n"
        "                             reply, the default), behind (after it) or none (never;\n"
        "                             docs/OPERATIONS.md, Persistence choices)\n"
        "  --cache-dir DIR|none       compiled OpenCL programs, kept across restarts (default\n"
        "                             $CACHE_DIRECTORY, else $XDG_CACHE_HOME/krylovd, else\n"
        "                             ~/.cache/krylovd); never in the state directory\n"
        "  --device-memory SIZE|P%%    device-memory budget for matrices (default 90%%)\n"
        "  --factor-memory SIZE       host memory method direct's factors may hold together\n"
        "                             (default 0: RAM/4, at most 4G); over it a factor is\n"
        "                             refused before it is computed\n"
        "  --port-file FILE           write the bound port here once listening\n"
        "  --metrics HOST:PORT        serve Prometheus metrics on http://HOST:PORT/metrics\n"
        "  --metrics-port-file FILE   write the metrics port here once listening\n"
        "  --log-level LEVEL          debug | info | warn | error (default info)\n"
        "  --log-file FILE            append the log here instead of stderr (SIGHUP reopens)\n"
        "  --max-message SIZE         largest request in bytes (default 1G; K/M/G suffixes)\n"
        "  --max-shm-bytes SIZE       shared memory one client (and one user) may register on the\n"
        "                             Unix socket (default 4G; 0 = no shm.register)\n"
        "  --max-array-elements N     msgpack array elements per request (default 1048576)\n"
        "  --max-connections N        concurrent clients (default 1024)\n"
        "  --max-jobs-per-connection N  requests one client may have waiting or running "
        "(default 64)\n"
        "  --queue-depth N            requests waiting per device before BUSY (default 256)\n"
        "  --max-rows N, --max-cols N, --max-nnz N   matrix size limits\n"
        "  --max-nrhs N               right-hand sides per solve (default 64)\n"
        "  --distribute-nnz N         under mpirun: matrix.put spreads a matrix with more\n"
        "                             nonzeros over the ranks (default 50000000)\n"
        "  --max-pending-write SIZE   unread response bytes per client before pausing it "
        "(default 64M)\n"
        "  --client-memory SIZE       bytes all clients' buffers, requests and replies may hold\n"
        "                             together; over it the largest client is closed (default\n"
        "                             0: min(1G, RAM/8))\n"
        "  --connection-memory SIZE   one client's requests in flight and unread replies before\n"
        "                             reading it pauses (default 0: min(client-memory/8, 32M))\n"
        "  --idle-timeout-ms MS       close a connection idle this long (default 600000; 0 = "
        "never)\n"
        "  --memory-trim-ms MS        after this long without requests, give freed host memory\n"
        "                             back to the system (default 1000; 0 = never)\n"
        "  --message-timeout-ms MS    close a connection whose message takes longer to arrive\n"
        "                             (default 120000; 0 = never)\n"
        "  --shutdown-grace-ms MS     how long running jobs may finish on SIGTERM (default 10000)\n"
        "  --format NAME              force one SpMV format for every matrix\n"
        "  --warm-programs all|none|LIST  build every OpenCL program in the background while\n"
        "                             serving (default all; none: each on first use; LIST: only\n"
        "                             these programs, e.g. krylov,csr_scalar,blas)\n"
        "  --warm-threads N           threads building them (default 0: one per CPU, at most 8)\n"
        "  --spin-us N                the loop and the device worker poll N us before sleeping\n"
        "                             (default -1: 100 / 50 on a GPU, 0 on a CPU device)\n"
        "  --tls-cert FILE, --tls-key FILE  serve TLS (1.2+) with this PEM certificate and key\n"
        "  --tls-ca FILE              require client certificates signed by this PEM CA\n"
        "  --version, --help\n",
        argv0);
}

int kd_config_set(kd_config_t *cfg, const char *name, const char *val, kd_err_t *err)
{
    int64_t n64;
    size_t size;
#define KD_STR_OPT(key, field)                                                                     \
    if (strcmp(name, key) == 0) {                                                                  \
        if (strlen(val) >= sizeof(cfg->field))                                                     \
            return kd_err_set(err, KD_EBADREQ, "%s: value too long", key);                         \
        snprintf(cfg->field, sizeof(cfg->field), "%s", val);                                       \
        return KD_OK;                                                                              \
    }
#define KD_SIZE_OPT(key, field, zero_ok)                                                           \
    if (strcmp(name, key) == 0) {                                                                  \
        if (kd_config_parse_size(val, &size) != 0 || (size == 0 && !(zero_ok)))                    \
            return kd_err_set(err, KD_EBADREQ, "%s: '%s' is not a size (e.g. 64M)", key, val);     \
        cfg->field = size;                                                                         \
        return KD_OK;                                                                              \
    }
#define KD_INT_OPT(key, field, lo, hi)                                                             \
    if (strcmp(name, key) == 0) {                                                                  \
        if (kd_parse_i64(val, lo, hi, &n64) != 0)                                                  \
            return kd_err_set(err, KD_EBADREQ, "%s: '%s' is not a number in %lld..%lld", key, val, \
                              (long long)(lo), (long long)(hi));                                   \
        cfg->field = n64;                                                                          \
        return KD_OK;                                                                              \
    }
    if (strcmp(name, "listen") == 0 && strncmp(val, "unix:", 5) == 0) {
        if (val[5] == '\0' || strlen(val + 5) >= sizeof(cfg->listen_unix))
            return kd_err_set(err, KD_EBADREQ,
                              "listen: '%s': unix:PATH needs a path of 1..%zu bytes", val,
                              sizeof(cfg->listen_unix) - 1);
        snprintf(cfg->listen_unix, sizeof(cfg->listen_unix), "%s", val + 5);
        if (!cfg->listen_given)
            cfg->listen[0] = '\0';
        return KD_OK;
    }
    if (strcmp(name, "listen") == 0)
        cfg->listen_given = 1;
    KD_STR_OPT("listen", listen)
    KD_STR_OPT("unix-group", unix_group)
    KD_STR_OPT("auth-file", auth_file)
    KD_STR_OPT("device", device)
    KD_STR_OPT("state-dir", state_dir)
    KD_STR_OPT("cache-dir", cache_dir)
    KD_STR_OPT("port-file", port_file)
    KD_STR_OPT("metrics", metrics)
    KD_STR_OPT("metrics-port-file", metrics_port_file)
    KD_STR_OPT("log-file", log_file)
    KD_STR_OPT("format", default_format)
    KD_STR_OPT("tls-cert", tls_cert)
    KD_STR_OPT("tls-key", tls_key)
    KD_STR_OPT("tls-ca", tls_ca)
    KD_SIZE_OPT("max-message", max_message, 0)
    KD_SIZE_OPT("max-pending-write", max_pending_write, 0)
    KD_SIZE_OPT("max-shm-bytes", max_shm_bytes, 1)
    KD_SIZE_OPT("client-memory", client_memory, 1)
    KD_SIZE_OPT("connection-memory", connection_memory, 1)
    KD_SIZE_OPT("state-max-bytes", state_max_bytes, 1)
    KD_SIZE_OPT("factor-memory", factor_memory, 1)
    KD_SIZE_OPT("test-max-alloc", test_max_alloc, 1)
    KD_INT_OPT("max-array-elements", max_array_elements, 1, INT32_MAX)
    KD_INT_OPT("max-connections", max_connections, 1, 1000000)
    KD_INT_OPT("max-jobs-per-connection", max_connection_jobs, 1, 1000000)
    KD_INT_OPT("queue-depth", queue_depth, 1, 1000000)
    KD_INT_OPT("max-rows", max_rows, 1, INT32_MAX - 1)
    KD_INT_OPT("max-cols", max_cols, 1, INT32_MAX)
    KD_INT_OPT("max-nnz", max_nnz, 1, INT32_MAX)
    KD_INT_OPT("max-nrhs", max_nrhs, 1, 4096)
    KD_INT_OPT("distribute-nnz", distribute_nnz, 1, INT64_MAX)
    KD_INT_OPT("idle-timeout-ms", idle_timeout_ms, 0, INT32_MAX)
    KD_INT_OPT("message-timeout-ms", message_timeout_ms, 0, INT32_MAX)
    KD_INT_OPT("memory-trim-ms", memory_trim_ms, 0, INT32_MAX)
    KD_INT_OPT("shutdown-grace-ms", shutdown_grace_ms, 0, 3600000)
    KD_INT_OPT("warm-threads", warm_threads, 0, 8)
    KD_INT_OPT("spin-us", spin_us, -1, 10000)
#undef KD_STR_OPT
#undef KD_SIZE_OPT
#undef KD_INT_OPT
    if (strcmp(name, "device-memory") == 0) {
        if (kd_parse_device_memory(val, cfg) != 0)
            return kd_err_set(err, KD_EBADREQ,
                              "device-memory: '%s' is not a size (e.g. 12G) or a percentage of "
                              "the device's memory in (0, 100] (e.g. 90%%)",
                              val);
        return KD_OK;
    }
    if (strcmp(name, "no-auth") == 0) {
        if (strcmp(val, "true") == 0 || strcmp(val, "yes") == 0 || strcmp(val, "1") == 0)
            cfg->no_auth = 1;
        else if (strcmp(val, "false") == 0 || strcmp(val, "no") == 0 || strcmp(val, "0") == 0)
            cfg->no_auth = 0;
        else
            return kd_err_set(err, KD_EBADREQ, "no-auth: '%s' is not true or false", val);
        return KD_OK;
    }
    if (strcmp(name, "persist-default") == 0) {
        static const char *const modes[] = {"sync", "behind", "none"}; /* kd_persist_t order */
        for (int i = 0; i < 3; i++)
            if (strcmp(val, modes[i]) == 0) {
                cfg->persist_default = i;
                return KD_OK;
            }
        return kd_err_set(err, KD_EBADREQ, "persist-default: '%s' is not sync, behind or none",
                          val);
    }
    if (strcmp(name, "tenant-dedupe") == 0) {
        if (strcmp(val, "on") == 0)
            cfg->tenant_dedupe = 1;
        else if (strcmp(val, "off") == 0)
            cfg->tenant_dedupe = 0;
        else
            return kd_err_set(err, KD_EBADREQ, "tenant-dedupe: '%s' is not on or off", val);
        return KD_OK;
    }
    if (strcmp(name, "warm-programs") == 0) {
        size_t len = strlen(val);
        int list = len > 0 && len < sizeof(cfg->warm_only) &&
                   strspn(val, "abcdefghijklmnopqrstuvwxyz0123456789_,") == len;
        if (strcmp(val, "all") != 0 && strcmp(val, "none") != 0 && !list)
            return kd_err_set(err, KD_EBADREQ,
                              "warm-programs: '%s' is not all, none or a list of program names "
                              "(krylov,csr_scalar)",
                              val);
        cfg->warm_programs = strcmp(val, "none") != 0;
        snprintf(cfg->warm_only, sizeof(cfg->warm_only), "%s",
                 strcmp(val, "all") == 0 || strcmp(val, "none") == 0 ? "" : val);
        return KD_OK;
    }
    if (strcmp(name, "log-level") == 0) {
        if (kd_log_parse_level(val, &cfg->log_level) != 0)
            return kd_err_set(err, KD_EBADREQ, "log-level: '%s' is not debug, info, warn or error",
                              val);
        return KD_OK;
    }
    return kd_err_set(err, KD_ENOTFOUND, "unknown setting '%s'", name);
}

void kd_config_resolve_cache_dir(kd_config_t *cfg)
{
    if (cfg->cache_dir[0] != '\0')
        return;
    const char *systemd = getenv("CACHE_DIRECTORY"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    if (systemd != NULL && systemd[0] != '\0') {
        const size_t n = strcspn(systemd, ":"); /* several CacheDirectory= entries: the first */
        snprintf(cfg->cache_dir, sizeof(cfg->cache_dir), "%.*s", (int)n, systemd);
    } else if (xdg != NULL && xdg[0] == '/') {
        snprintf(cfg->cache_dir, sizeof(cfg->cache_dir), "%.*s/krylovd", KD_PATH_MAX - 16, xdg);
    } else if (home != NULL && home[0] == '/') {
        snprintf(cfg->cache_dir, sizeof(cfg->cache_dir), "%.*s/.cache/krylovd", KD_PATH_MAX - 24,
                 home);
    } else {
        snprintf(cfg->cache_dir, sizeof(cfg->cache_dir), "none");
    }
}

static char *kd_trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

int kd_config_load_file(kd_config_t *cfg, const char *path, kd_err_t *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return kd_err_set(err, KD_EIO, "cannot read config file %s: %s", path, strerror(errno));
    char line[KD_PATH_MAX + 256];
    int lineno = 0, rc = KD_OK;
    while (rc == KD_OK && fgets(line, sizeof(line), f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof(line) - 1 && line[len - 1] != '\n' && !feof(f)) {
            rc = kd_err_set(err, KD_EBADREQ, "%s:%d: line too long", path, lineno);
            break;
        }
        /* A comment: '#' at the start or after whitespace, outside quotes. */
        int quoted = 0;
        for (char *p = line; *p != '\0'; p++) {
            if (*p == '"')
                quoted = !quoted;
            else if (*p == '#' && !quoted && (p == line || isspace((unsigned char)p[-1]))) {
                *p = '\0';
                break;
            }
        }
        char *s = kd_trim(line);
        if (*s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            rc = kd_err_set(err, KD_EBADREQ, "%s:%d: expected `key = value`, got '%s'", path,
                            lineno, s);
            break;
        }
        *eq = '\0';
        char *key = kd_trim(s), *val = kd_trim(eq + 1);
        size_t vlen = strlen(val);
        if (vlen >= 2 && val[0] == '"' && val[vlen - 1] == '"') {
            val[vlen - 1] = '\0';
            val++;
        }
        if (strncmp(key, "--", 2) == 0)
            key += 2;
        if (strcmp(key, "config") == 0 || strcmp(key, "list-devices") == 0) {
            rc = kd_err_set(err, KD_EBADREQ, "%s:%d: '%s' is not allowed in a config file", path,
                            lineno, key);
            break;
        }
        kd_err_t e = {0};
        int src = kd_config_set(cfg, key, val, &e);
        if (src == KD_ENOTFOUND)
            rc = kd_err_set(err, KD_EBADREQ,
                            "%s:%d: unknown key '%s' (keys are the long options without --; see "
                            "krylovd --help)",
                            path, lineno, key);
        else if (src != KD_OK)
            rc = kd_err_set(err, KD_EBADREQ, "%s:%d: %s", path, lineno, e.message);
    }
    if (rc == KD_OK && ferror(f))
        rc = kd_err_set(err, KD_EIO, "cannot read config file %s", path);
    fclose(f);
    if (rc == KD_OK)
        snprintf(cfg->config_file, sizeof(cfg->config_file), "%s", path);
    return rc;
}

/* Split argv[*i] into a name (without --) and a value ("--name=value" or "--name value"). */
static int kd_arg_split(int argc, char **argv, int *i, char *name, size_t cap, const char **val,
                        kd_err_t *err)
{
    const char *opt = argv[*i];
    if (strncmp(opt, "--", 2) != 0)
        return kd_err_set(err, KD_EBADREQ, "unexpected argument '%s' (try --help)", opt);
    const char *eq = strchr(opt, '=');
    *val = NULL;
    if (eq != NULL) {
        size_t n = (size_t)(eq - opt - 2);
        if (n >= cap)
            return kd_err_set(err, KD_EBADREQ, "unknown option '%s'", opt);
        memcpy(name, opt + 2, n);
        name[n] = '\0';
        *val = eq + 1;
    } else {
        if (strlen(opt + 2) >= cap)
            return kd_err_set(err, KD_EBADREQ, "unknown option '%s'", opt);
        snprintf(name, cap, "%s", opt + 2);
        if (*i + 1 < argc)
            *val = argv[++*i];
    }
    if (*val == NULL)
        return kd_err_set(err, KD_EBADREQ, "option '--%s' needs a value", name);
    return KD_OK;
}

int kd_config_parse_args(kd_config_t *cfg, int argc, char **argv, kd_err_t *err)
{
    /* --help and --version first, then the config file, then the rest over it. */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            kd_config_print_usage(argv[0]);
            return 1;
        }
        if (strcmp(argv[i], "--version") == 0) {
            printf("krylovd %s\n", KD_VERSION);
            return 1;
        }
    }
    char name[64];
    const char *val;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list-devices") == 0 || strcmp(argv[i], "--no-auth") == 0)
            continue;
        int rc = kd_arg_split(argc, argv, &i, name, sizeof(name), &val, err);
        if (rc != KD_OK)
            return rc;
        if (strcmp(name, "config") == 0 && (rc = kd_config_load_file(cfg, val, err)) != KD_OK)
            return rc;
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list-devices") == 0) {
            cfg->list_devices = 1;
            continue;
        }
        if (strcmp(argv[i], "--no-auth") == 0) { /* a flag; `no-auth = true` in the file */
            cfg->no_auth = 1;
            continue;
        }
        int rc = kd_arg_split(argc, argv, &i, name, sizeof(name), &val, err);
        if (rc != KD_OK)
            return rc;
        if (strcmp(name, "config") == 0)
            continue;
        kd_err_t e = {0};
        rc = kd_config_set(cfg, name, val, &e);
        if (rc == KD_ENOTFOUND)
            return kd_err_set(err, KD_EBADREQ, "unknown option '--%s' (try --help)", name);
        if (rc != KD_OK)
            return kd_err_set(err, rc, "--%s", e.message);
    }
    return 0;
}
