/*
 * krylovd's configuration (server/config.c): defaults are the documented safe ones; a config file
 * with comments, blank lines and quoted values sets every kind of key; options on the command
 * line override the file whatever their order; the device-memory budget takes a size or a
 * percentage; --listen takes a HOST:PORT and a unix:PATH; and each bad input — an unknown key, a
 * bad number, a line without `=`, a missing file, an option without a value — is refused with a
 * message naming the key (and the file's line).
 */
#include "kd_test.h"
#include "server/config.h"

static char dir[256];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

static int parse(kd_config_t *cfg, kd_err_t *err, int argc, const char **argv)
{
    kd_config_defaults(cfg);
    memset(err, 0, sizeof(*err));
    return kd_config_parse_args(cfg, argc, (char **)argv, err);
}

static void test_defaults(void)
{
    kd_config_t c;
    kd_config_defaults(&c);
    CHECK_EQ_INT(c.max_message, (size_t)1 << 30);
    CHECK_EQ_INT(c.max_connections, 1024);
    CHECK_EQ_INT(c.queue_depth, 256);
    CHECK_EQ_INT(c.max_connection_jobs, 64);
    CHECK_EQ_INT(c.max_pending_write, (size_t)64 << 20);
    CHECK_EQ_INT(c.idle_timeout_ms, 600000);
    CHECK_EQ_INT(c.message_timeout_ms, 120000);
    CHECK_EQ_INT(c.shutdown_grace_ms, 10000);
    CHECK(c.device_memory_percent == 90.0);
    CHECK_EQ_INT(c.device_memory_bytes, 0);
    CHECK_EQ_INT(c.state_max_bytes, 0);
    CHECK_EQ_INT(c.client_memory, 0); /* auto: min(1 GiB, RAM / 8), resolved at start */
    CHECK_EQ_INT(c.connection_memory, 0);
}

/* --client-memory and --connection-memory take sizes with suffixes, from the file or the command
 * line; 0 is the automatic default; a bad size names the option. */
static void test_client_memory_options(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/climem.conf", dir);
    write_file(path, "client-memory = 3G\nconnection-memory = 96M\n");
    char opt[320];
    snprintf(opt, sizeof(opt), "--config=%s", path);
    kd_config_t c;
    kd_err_t err;
    const char *argv[] = {"krylovd", opt};
    CHECK_EQ_INT(parse(&c, &err, 2, argv), 0);
    CHECK_EQ_INT(c.client_memory, (size_t)3 << 30);
    CHECK_EQ_INT(c.connection_memory, (size_t)96 << 20);
    const char *a1[] = {"krylovd", opt, "--client-memory", "64M", "--connection-memory=0"};
    CHECK_EQ_INT(parse(&c, &err, 5, a1), 0);
    CHECK_EQ_INT(c.client_memory, (size_t)64 << 20);
    CHECK_EQ_INT(c.connection_memory, 0);
    const char *a2[] = {"krylovd", "--client-memory", "64X"};
    CHECK_EQ_INT(parse(&c, &err, 3, a2), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "client-memory: '64X' is not a size");
    const char *a3[] = {"krylovd", "--connection-memory", "-1"};
    CHECK_EQ_INT(parse(&c, &err, 3, a3), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "connection-memory");
}

static void test_file_and_overrides(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/krylovd.conf", dir);
    write_file(path, "# krylovd settings\n"
                     "\n"
                     "listen = 0.0.0.0:9000   # all interfaces\n"
                     "state-dir = \"/var/lib/krylovd state\"\n"
                     "cache-dir = /var/cache/krylovd\n"
                     "  queue-depth=12\n"
                     "max-message = 16M\n"
                     "device-memory = 75%\n"
                     "state-max-bytes = 2G\n"
                     "idle-timeout-ms = 0\n"
                     "message-timeout-ms = 5000\n"
                     "max-jobs-per-connection = 3\n"
                     "log-level = debug\n"
                     "--max-connections = 10\n");
    kd_config_t c;
    kd_err_t err;
    const char *argv[] = {"krylovd", "--queue-depth", "99", "--config", path, "--device-memory=2G"};
    REQUIRE(parse(&c, &err, 6, argv) == 0);
    CHECK(strcmp(c.listen, "0.0.0.0:9000") == 0);
    CHECK(strcmp(c.state_dir, "/var/lib/krylovd state") == 0);
    CHECK(strcmp(c.cache_dir, "/var/cache/krylovd") == 0);
    CHECK_EQ_INT(c.queue_depth, 99); /* the command line wins, even given before --config */
    CHECK_EQ_INT(c.max_message, 16 << 20);
    CHECK_EQ_INT(c.device_memory_bytes, (size_t)2 << 30);
    CHECK_EQ_INT(c.state_max_bytes, (size_t)2 << 30);
    CHECK_EQ_INT(c.idle_timeout_ms, 0);
    CHECK_EQ_INT(c.message_timeout_ms, 5000);
    CHECK_EQ_INT(c.max_connection_jobs, 3);
    CHECK_EQ_INT(c.max_connections, 10);
    CHECK_EQ_INT(c.log_level, KD_LOG_DEBUG);
    CHECK(strcmp(c.config_file, path) == 0);

    const char *argv2[] = {"krylovd", "--config=" /* filled below */};
    char opt[320];
    snprintf(opt, sizeof(opt), "--config=%s", path);
    argv2[1] = opt;
    REQUIRE(parse(&c, &err, 2, argv2) == 0);
    CHECK_EQ_INT(c.queue_depth, 12);
    CHECK(c.device_memory_percent == 75.0);
    CHECK_EQ_INT(c.device_memory_bytes, 0);
}

static void test_device_memory_values(void)
{
    kd_config_t c;
    kd_err_t err;
    const char *ok[] = {"50%", "100%", "0.5%", "512M", "1073741824"};
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        const char *argv[] = {"krylovd", "--device-memory", ok[i]};
        CHECK_MSG(parse(&c, &err, 3, argv) == 0, "%s: %s", ok[i], err.message);
    }
    const char *bad[] = {"0%", "101%", "-5%", "%", "lots", "0", "12X"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[] = {"krylovd", "--device-memory", bad[i]};
        CHECK_MSG(parse(&c, &err, 3, argv) == KD_EBADREQ, "%s accepted", bad[i]);
        CHECK_STR_CONTAINS(err.message, "device-memory");
    }
}

/* --listen takes one HOST:PORT and one unix:PATH; a unix: one alone replaces the default TCP
 * address, and --no-auth is a flag on the command line but `no-auth = true` in the file. */
static void test_listen_and_auth_options(void)
{
    kd_config_t c;
    kd_err_t err;
    const char *only_unix[] = {"krylovd", "--listen", "unix:/run/krylovd.sock"};
    REQUIRE(parse(&c, &err, 3, only_unix) == 0);
    CHECK(strcmp(c.listen_unix, "/run/krylovd.sock") == 0);
    CHECK(strcmp(c.listen, "") == 0);
    CHECK_EQ_INT(c.no_auth, 0);
    const char *both[] = {"krylovd",   "--listen",    "unix:/s",           "--listen=10.0.0.1:7373",
                          "--no-auth", "--auth-file", "/etc/krylovd/auth", "--unix-group",
                          "krylov"};
    REQUIRE(parse(&c, &err, 9, both) == 0);
    CHECK(strcmp(c.listen_unix, "/s") == 0);
    CHECK(strcmp(c.listen, "10.0.0.1:7373") == 0);
    CHECK_EQ_INT(c.no_auth, 1);
    CHECK(strcmp(c.auth_file, "/etc/krylovd/auth") == 0);
    CHECK(strcmp(c.unix_group, "krylov") == 0);
    const char *tcp_first[] = {"krylovd", "--listen", "127.0.0.1:0", "--listen", "unix:/s"};
    REQUIRE(parse(&c, &err, 5, tcp_first) == 0);
    CHECK(strcmp(c.listen, "127.0.0.1:0") == 0);

    char path[300], opt[320];
    snprintf(path, sizeof(path), "%s/auth.conf", dir);
    snprintf(opt, sizeof(opt), "--config=%s", path);
    const char *argv[] = {"krylovd", opt};
    write_file(path, "auth-file = /etc/krylovd/auth\nno-auth = true\nlisten = unix:/x\n");
    REQUIRE(parse(&c, &err, 2, argv) == 0);
    CHECK(strcmp(c.auth_file, "/etc/krylovd/auth") == 0);
    CHECK_EQ_INT(c.no_auth, 1);
    CHECK(strcmp(c.listen_unix, "/x") == 0);
    write_file(path, "no-auth = maybe\n");
    CHECK_EQ_INT(parse(&c, &err, 2, argv), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, ":1: no-auth: 'maybe' is not true or false");
    const char *empty_unix[] = {"krylovd", "--listen", "unix:"};
    CHECK_EQ_INT(parse(&c, &err, 3, empty_unix), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "unix:PATH needs a path");
}

/* --tenant-dedupe on (the default) or off, on the command line or in the file; nothing else. */
static void test_tenant_dedupe(void)
{
    kd_config_t c;
    kd_err_t err;
    const char *none[] = {"krylovd"};
    REQUIRE(parse(&c, &err, 1, none) == 0);
    CHECK_EQ_INT(c.tenant_dedupe, 1);
    const char *off[] = {"krylovd", "--tenant-dedupe", "off"};
    REQUIRE(parse(&c, &err, 3, off) == 0);
    CHECK_EQ_INT(c.tenant_dedupe, 0);
    const char *on[] = {"krylovd", "--tenant-dedupe=off", "--tenant-dedupe", "on"};
    REQUIRE(parse(&c, &err, 4, on) == 0);
    CHECK_EQ_INT(c.tenant_dedupe, 1);
    const char *bad[] = {"krylovd", "--tenant-dedupe", "yes"};
    CHECK_EQ_INT(parse(&c, &err, 3, bad), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "tenant-dedupe: 'yes' is not on or off");

    char path[300], opt[320];
    snprintf(path, sizeof(path), "%s/dedupe.conf", dir);
    snprintf(opt, sizeof(opt), "--config=%s", path);
    write_file(path, "tenant-dedupe = off\n");
    const char *file[] = {"krylovd", opt};
    REQUIRE(parse(&c, &err, 2, file) == 0);
    CHECK_EQ_INT(c.tenant_dedupe, 0);
    const char *over[] = {"krylovd", opt, "--tenant-dedupe", "on"}; /* the command line wins */
    REQUIRE(parse(&c, &err, 4, over) == 0);
    CHECK_EQ_INT(c.tenant_dedupe, 1);
}

/* all (the default), none, a list of program names; anything else is refused by name. */
static void test_warm_programs(void)
{
    kd_config_t c;
    kd_err_t err;
    kd_config_defaults(&c);
    CHECK_EQ_INT(c.warm_programs, 1);
    CHECK(c.warm_only[0] == '\0');
    const char *none[] = {"krylovd", "--warm-programs", "none"};
    CHECK_EQ_INT(parse(&c, &err, 3, none), 0);
    CHECK_EQ_INT(c.warm_programs, 0);
    const char *list[] = {"krylovd", "--warm-programs=krylov,csr_scalar", "--warm-programs=all"};
    CHECK_EQ_INT(parse(&c, &err, 2, list), 0);
    CHECK_EQ_INT(c.warm_programs, 1);
    CHECK(strcmp(c.warm_only, "krylov,csr_scalar") == 0);
    CHECK_EQ_INT(parse(&c, &err, 3, list), 0); /* the later option wins */
    CHECK(c.warm_only[0] == '\0');
    const char *bad[] = {"", "All", "krylov;rm", "a b"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[] = {"krylovd", "--warm-programs", bad[i]};
        CHECK_MSG(parse(&c, &err, 3, argv) == KD_EBADREQ, "'%s' accepted", bad[i]);
        CHECK_STR_CONTAINS(err.message, "warm-programs");
    }
}

static void test_bad_input(void)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/bad.conf", dir);
    kd_config_t c;
    kd_err_t err;
    char opt[320];
    snprintf(opt, sizeof(opt), "--config=%s", path);
    const char *argv[] = {"krylovd", opt};

    write_file(path, "listen = 127.0.0.1:1\n# fine so far\nqueue-dept = 3\n");
    CHECK_EQ_INT(parse(&c, &err, 2, argv), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, ":3: unknown key 'queue-dept'");

    write_file(path, "queue-depth = many\n");
    CHECK_EQ_INT(parse(&c, &err, 2, argv), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, ":1: queue-depth: 'many' is not a number");

    write_file(path, "\n\njust words\n");
    CHECK_EQ_INT(parse(&c, &err, 2, argv), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, ":3: expected `key = value`");

    write_file(path, "config = /etc/other.conf\n");
    CHECK_EQ_INT(parse(&c, &err, 2, argv), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "not allowed");

    snprintf(opt, sizeof(opt), "--config=%s/missing.conf", dir);
    CHECK_EQ_INT(parse(&c, &err, 2, argv), KD_EIO);
    CHECK_STR_CONTAINS(err.message, "missing.conf");

    const char *a1[] = {"krylovd", "--queue-depth"};
    CHECK_EQ_INT(parse(&c, &err, 2, a1), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "needs a value");
    const char *a2[] = {"krylovd", "--no-such-option", "1"};
    CHECK_EQ_INT(parse(&c, &err, 3, a2), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "no-such-option");
    const char *a3[] = {"krylovd", "--max-connections", "0"};
    CHECK_EQ_INT(parse(&c, &err, 3, a3), KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "max-connections");
    const char *a4[] = {"krylovd", "--max-pending-write", "0"};
    CHECK_EQ_INT(parse(&c, &err, 3, a4), KD_EBADREQ);
    const char *a5[] = {"krylovd", "stray"};
    CHECK_EQ_INT(parse(&c, &err, 2, a5), KD_EBADREQ);
}

/* --cache-dir, and its default: systemd's $CACHE_DIRECTORY (the first of a list), else
 * $XDG_CACHE_HOME/krylovd, else ~/.cache/krylovd, else none; a given one is kept. */
static void test_cache_dir(void)
{
    kd_config_t c;
    kd_err_t err;
    kd_config_defaults(&c);
    CHECK(c.cache_dir[0] == '\0');
    setenv("CACHE_DIRECTORY", "/var/cache/krylovd:/var/cache/other", 1);
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    setenv("HOME", "/home/u", 1);
    kd_config_resolve_cache_dir(&c);
    CHECK_MSG(strcmp(c.cache_dir, "/var/cache/krylovd") == 0, "cache_dir %s", c.cache_dir);
    unsetenv("CACHE_DIRECTORY");
    kd_config_defaults(&c);
    kd_config_resolve_cache_dir(&c);
    CHECK_MSG(strcmp(c.cache_dir, "/xdg/krylovd") == 0, "cache_dir %s", c.cache_dir);
    setenv("XDG_CACHE_HOME", "relative", 1); /* not absolute: ignored, as the spec says */
    kd_config_defaults(&c);
    kd_config_resolve_cache_dir(&c);
    CHECK_MSG(strcmp(c.cache_dir, "/home/u/.cache/krylovd") == 0, "cache_dir %s", c.cache_dir);
    unsetenv("XDG_CACHE_HOME");
    unsetenv("HOME");
    kd_config_defaults(&c);
    kd_config_resolve_cache_dir(&c);
    CHECK_MSG(strcmp(c.cache_dir, "none") == 0, "cache_dir %s", c.cache_dir);
    const char *given[] = {"krylovd", "--cache-dir", "/srv/kd-cache"};
    kd_config_defaults(&c);
    CHECK_EQ_INT(parse(&c, &err, 3, given), 0);
    setenv("CACHE_DIRECTORY", "/var/cache/krylovd", 1);
    kd_config_resolve_cache_dir(&c);
    CHECK_MSG(strcmp(c.cache_dir, "/srv/kd-cache") == 0, "cache_dir %s", c.cache_dir);
    unsetenv("CACHE_DIRECTORY");
}

int main(void)
{
    kd_test_seed();
    snprintf(dir, sizeof(dir), "/tmp/krylovd-config-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return 1;
    RUN(test_defaults);
    RUN(test_file_and_overrides);
    RUN(test_device_memory_values);
    RUN(test_listen_and_auth_options);
    RUN(test_tenant_dedupe);
    RUN(test_bad_input);
    RUN(test_warm_programs);
    RUN(test_cache_dir);
    RUN(test_client_memory_options);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    return kd_test_finish();
}
