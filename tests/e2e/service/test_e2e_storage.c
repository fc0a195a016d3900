/*
 * A full state disk (issue 21): matrices are put until the state directory's file system is full.
 * That put answers STORAGE_FULL with a message that names the matrix and no server path or errno
 * text; the state directory holds no temporary or partial file and no file of the refused matrix;
 * every matrix stored before is still listed and served right (spmv against the CPU reference); a
 * pin, which rewrites a file, is refused the same way and leaves the pin as it was. Once space is
 * freed (a drop), the same put works, and after a restart every stored matrix is still there.
 * server.status counts the refusal under STORAGE_FULL, not INTERNAL.
 *
 * Two file systems, the same checks: a real small one (a tmpfs mounted on the state directory in
 * a private mount namespace: root, or a user namespace where the kernel allows one), and the
 * fault hook's pretend one (krylovd_faults, KD_TEST_FAULT=capacity:...: writes past the limit
 * write what fits and fail with ENOSPC), which runs everywhere. When the tmpfs cannot be mounted,
 * the test says so and runs the hook's variant alone.
 */
#define _GNU_SOURCE
#include "bench/matgen/matgen.h"
#include "kd_daemon.h"
#include "kd_state_check.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>

#define KD_CAPACITY (96 * 1024) /* about four matrices' files */
#define KD_MAX_PUTS 40

static kd_csr_t *matrices[KD_MAX_PUTS];
static char ids[KD_MAX_PUTS][33];
static uint64_t msgid = 1;

/* The message a client saw names nothing of the server's file system. */
static void check_no_server_detail(const kd_daemon_t *d, const char *message)
{
    CHECK_MSG(strstr(message, d->dir) == NULL && strstr(message, "/tmp") == NULL &&
                  strstr(message, "/matrices") == NULL && strstr(message, ".kdm") == NULL &&
                  strstr(message, "No space left") == NULL && strstr(message, "quota") == NULL,
              "the message shows server detail: %s", message);
}

static void check_no_leftovers(const kd_daemon_t *d, size_t stored)
{
    CHECK_EQ_INT(kd_state_check_count(d->state_dir, "matrices", ".tmp"), 0);
    CHECK_EQ_INT(kd_state_check_count(d->state_dir, "", ".tmp"), 0);
    CHECK_EQ_INT(kd_state_check_count(d->state_dir, "matrices", ""), stored);
}

static void check_served(kd_rpc_t *r, int from, int to)
{
    for (int i = from; i < to; i++) {
        char why[700];
        int rc = kd_state_check_spmv(r, msgid++, ids[i], matrices[i], why, sizeof(why));
        CHECK_MSG(rc == 0, "matrix %d: %s", i, why);
    }
}

static int64_t info_int(kd_rpc_t *r, const char *id, const char *field, char *code, size_t cap)
{
    kd_rpc_msg_t m;
    int kind = kd_rpc_id_call(r, msgid++, "matrix.info", id, -1, &m);
    int64_t v = -1;
    code[0] = '\0';
    if (kind == KD_RPC_RESPONSE && m.result != NULL) {
        const msgpack_object *o = kd_obj_get(m.result, field);
        v = o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN ? o->via.boolean : -1;
    } else {
        snprintf(code, cap, "%s", m.code);
    }
    kd_rpc_msg_free(&m);
    return v;
}

/* Put until STORAGE_FULL, check, free space, put again, restart. binary: the daemon to run. */
static void run_full_disk(kd_daemon_t *d, const char *label)
{
    fprintf(stderr, "   file system: %s\n", label);
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d->port) == 0);
    int stored = 0, full = -1;
    for (int i = 0; i < KD_MAX_PUTS && full < 0; i++) {
        matrices[i] = kd_matgen_power_law(300, 300, 5, kd_test_rand_u64(), KD_DTYPE_F64);
        REQUIRE(matrices[i] != NULL);
        uint8_t raw[16];
        kd_csr_hash(matrices[i], raw);
        kd_id_to_hex(raw, ids[i]);
        kd_rpc_msg_t m;
        char id[33];
        if (kd_rpc_put(&r, msgid++, matrices[i], "fill", -1, id, &m) == 0) {
            CHECK(strcmp(id, ids[i]) == 0);
            stored++;
        } else {
            CHECK_MSG(strcmp(m.code, "STORAGE_FULL") == 0, "put %d: %s %s", i, m.code, m.message);
            CHECK_STR_CONTAINS(m.message, ids[i]);
            check_no_server_detail(d, m.message);
            fprintf(stderr, "   put %d refused: %s: %s\n", i, m.code, m.message);
            full = i;
        }
        kd_rpc_msg_free(&m);
    }
    REQUIRE(full >= 2); /* two or more fit before the disk filled up */

    /* the refused matrix is not there, and no file of it is either */
    char code[32];
    info_int(&r, ids[full], "pinned", code, sizeof(code));
    CHECK(strcmp(code, "NOT_FOUND") == 0);
    check_no_leftovers(d, (size_t)stored);
    char path[1024];
    struct stat st;
    snprintf(path, sizeof(path), "%s/matrices/%s.kdm", d->state_dir, ids[full]);
    CHECK(stat(path, &st) != 0);
    check_served(&r, 0, stored);
    kd_rpc_msg_t status;
    REQUIRE(kd_rpc_status(&r, &status) == 0);
    CHECK(kd_rpc_int(status.result, "errors_by_code", "STORAGE_FULL", 0) == 1);
    CHECK(kd_rpc_int(status.result, "errors_by_code", "INTERNAL", 0) == 0);
    kd_rpc_msg_free(&status);

    /* a pin rewrites the file: refused the same way (on this full disk), the pin unchanged */
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_id_call(&r, msgid++, "matrix.pin", ids[1], 1, &m) == KD_RPC_RESPONSE);
    if (m.error != NULL) {
        CHECK_MSG(strcmp(m.code, "STORAGE_FULL") == 0, "pin: %s %s", m.code, m.message);
        check_no_server_detail(d, m.message);
        CHECK_EQ_INT(info_int(&r, ids[1], "pinned", code, sizeof(code)), 0);
    } else {
        fprintf(stderr, "   (the pin fitted in what the refused put left)\n");
        CHECK_EQ_INT(info_int(&r, ids[1], "pinned", code, sizeof(code)), 1);
    }
    kd_rpc_msg_free(&m);
    check_no_leftovers(d, (size_t)stored);

    /* free space: drop the first two; the refused put now works */
    for (int i = 0; i < 2; i++) {
        REQUIRE(kd_rpc_id_call(&r, msgid++, "matrix.drop", ids[i], -1, &m) == KD_RPC_RESPONSE);
        CHECK_MSG(m.error == NULL, "drop %d: %s %s", i, m.code, m.message);
        kd_rpc_msg_free(&m);
    }
    char id[33];
    int rc = kd_rpc_put(&r, msgid++, matrices[full], "after", -1, id, &m);
    CHECK_MSG(rc == 0, "put after freeing space: %s %s", m.code, m.message);
    kd_rpc_msg_free(&m);
    check_no_leftovers(d, (size_t)stored - 2 + 1);
    check_served(&r, 2, full + 1);
    kd_rpc_close(&r);

    /* a restart finds exactly these */
    kd_daemon_kill(d);
    REQUIRE(kd_daemon_restart(d, NULL) == 0);
    REQUIRE(kd_rpc_connect(&r, d->port) == 0);
    check_served(&r, 2, full + 1);
    for (int i = 0; i < 2; i++) {
        info_int(&r, ids[i], "pinned", code, sizeof(code));
        CHECK(strcmp(code, "NOT_FOUND") == 0);
    }
    check_no_leftovers(d, (size_t)stored - 2 + 1);
    kd_rpc_close(&r);
    for (int i = 0; i <= full; i++) {
        kd_csr_free(matrices[i]);
        matrices[i] = NULL;
    }
}

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    close(fd);
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* A mount namespace of our own (so the tmpfs goes when the test does, and nobody else sees it);
 * as another user than root, inside a user namespace. 0, or -1 with the reason in why. */
static int private_mounts(char *why, size_t cap)
{
    uid_t uid = getuid();
    gid_t gid = getgid();
    if (uid != 0) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
            snprintf(why, cap, "not root, and no user namespace: %s", strerror(errno));
            return -1;
        }
        char map[64];
        snprintf(map, sizeof(map), "0 %u 1", (unsigned)uid);
        if (write_file("/proc/self/setgroups", "deny") != 0 ||
            write_file("/proc/self/uid_map", map) != 0 ||
            (snprintf(map, sizeof(map), "0 %u 1", (unsigned)gid),
             write_file("/proc/self/gid_map", map) != 0)) {
            snprintf(why, cap, "cannot map ids in a user namespace: %s", strerror(errno));
            return -1;
        }
    } else if (unshare(CLONE_NEWNS) != 0) {
        snprintf(why, cap, "no mount namespace: %s", strerror(errno));
        return -1;
    }
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
        snprintf(why, cap, "cannot make mounts private: %s", strerror(errno));
        return -1;
    }
    return 0;
}

static void test_full_tmpfs(void)
{
    char why[256];
    if (private_mounts(why, sizeof(why)) != 0) {
        fprintf(stderr, "   NOT RUN on a real file system: %s (the hook's variant still runs)\n",
                why);
        return;
    }
    kd_daemon_t d;
    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "/tmp/krylovd-test-XXXXXX");
    REQUIRE(mkdtemp(d.dir) != NULL);
    snprintf(d.state_dir, sizeof(d.state_dir), "%s/state", d.dir);
    REQUIRE(mkdir(d.state_dir, 0700) == 0);
    char opts[64];
    snprintf(opts, sizeof(opts), "size=%d,mode=0700", KD_CAPACITY);
    if (mount("tmpfs", d.state_dir, "tmpfs", 0, opts) != 0) {
        fprintf(stderr,
                "   NOT RUN on a real file system: cannot mount a tmpfs: %s (the hook's "
                "variant still runs)\n",
                strerror(errno));
        kd_daemon_cleanup(&d);
        return;
    }
    if (kd_daemon_launch(&d, NULL) == 0) {
        run_full_disk(&d, "a 96 KiB tmpfs");
        kd_daemon_kill(&d);
    } else {
        CHECK_MSG(0, "krylovd did not start on the tmpfs");
    }
    CHECK(umount(d.state_dir) == 0);
    kd_daemon_cleanup(&d);
}

static void test_full_hook(void)
{
    kd_daemon_t d;
    memset(&d, 0, sizeof(d));
    d.binary = "krylovd_faults";
    snprintf(d.dir, sizeof(d.dir), "/tmp/krylovd-test-XXXXXX");
    REQUIRE(mkdtemp(d.dir) != NULL);
    char spec[512];
    snprintf(spec, sizeof(spec), "capacity:%d:%s/state", KD_CAPACITY, d.dir);
    setenv("KD_TEST_FAULT", spec, 1);
    if (kd_daemon_launch(&d, NULL) == 0) {
        run_full_disk(&d, "the fault hook's, 96 KiB");
        kd_daemon_kill(&d);
    } else {
        CHECK_MSG(0, "krylovd_faults did not start");
    }
    unsetenv("KD_TEST_FAULT");
    kd_daemon_cleanup(&d);
}

int main(void)
{
    kd_test_seed();
    RUN(test_full_hook);
    RUN(test_full_tmpfs);
    return kd_test_finish();
}
