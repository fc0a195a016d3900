/*
 * Persistence across a crash: matrices are put into a real krylovd, one more upload is cut off
 * half-way and the daemon is killed with SIGKILL, and a new daemon on the same state directory
 * must serve every matrix whose put was answered — listed at once as not resident, with the same
 * name, shape, format and pin, reloaded on first use without a new upload and giving the same
 * SpMV result as before the crash — while the half upload left nothing that loads. A put sent
 * whole just before the kill is either fully there or absent. Then files are damaged while the
 * daemon is down: a bad header is moved aside at start-up, a bad payload at first use (the request
 * gets NOT_FOUND saying why), and both are logged. matrix.drop removes the file. A pin survives
 * restarts, and SIGHUP makes the daemon reopen its log file (for log rotation).
 */
#include "bench/matgen/matgen.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_state_check.h"
#include "kd_test.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

static kd_daemon_t d;
static char log_path[400];
static const char *extra[8];

typedef struct kept {
    kd_csr_t *A;
    char id[33];
    char name[32];
    int pinned;
    char format[32]; /* chosen at upload (timed: may differ between runs, must survive restarts) */
    double *x, *y;   /* y = A x from the first daemon */
} kept_t;

static kept_t kept[3];

static double *random_vector(int64_t n)
{
    double *v = malloc((size_t)(n > 0 ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++)
        v[i] = kd_test_rand_double(-1, 1);
    return v;
}

static double rel_diff(const double *a, const double *b, int64_t n)
{
    double dmax = 0, s = 1;
    for (int64_t i = 0; i < n; i++) {
        dmax = fmax(dmax, fabs(a[i] - b[i]));
        s = fmax(s, fabs(b[i]));
    }
    return dmax / s;
}

static void file_of(const char *id, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s/matrices/%s.kdm", d.state_dir, id);
}

static int log_contains(const char *needle)
{
    FILE *f = fopen(log_path, "r");
    if (f == NULL)
        return 0;
    char line[2048];
    int found = 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, needle) != NULL;
    fclose(f);
    return found;
}

static kd_csr_t *csr_from_file(const char *name, kd_dtype_t dtype)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", KD_TEST_MATRICES, name);
    return kd_matgen_by_name(path, dtype);
}

static void test_put_then_crash_mid_upload(void)
{
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    kept[0].A = csr_from_file("494_bus.mtx", KD_DTYPE_F64);
    kept[1].A = csr_from_file("bayer10.mtx", KD_DTYPE_F32);
    kept[2].A = kd_matgen_laplacian_2d(40, 30, KD_DTYPE_F64);
    for (int i = 0; i < 3; i++) {
        REQUIRE(kept[i].A != NULL);
        snprintf(kept[i].name, sizeof(kept[i].name), "kept-%d", i);
        kept[i].pinned = i == 1;
        kd_rpc_msg_t m;
        int rc = kd_rpc_put(&r, 10 + (uint64_t)i, kept[i].A, kept[i].name, kept[i].pinned,
                            kept[i].id, &m);
        CHECK_MSG(rc == 0, "put %d: %s %s", i, m.code, m.message);
        if (rc == 0)
            kd_obj_str_copy(kd_obj_get(m.result, "format"), kept[i].format, sizeof(kept[i].format));
        kd_rpc_msg_free(&m);
        kept[i].x = random_vector(kept[i].A->cols);
        kept[i].y = malloc((size_t)kept[i].A->rows * sizeof(double));
        REQUIRE(kd_rpc_spmv(&r, 20 + (uint64_t)i, kept[i].id, kept[i].x, kept[i].A->cols, kept[i].y,
                            kept[i].A->rows, &m) == 0);
        kd_rpc_msg_free(&m);
        char path[512];
        file_of(kept[i].id, path, sizeof(path));
        struct stat st;
        CHECK_MSG(stat(path, &st) == 0, "no state file for an answered put: %s", path);
    }
    kd_rpc_close(&r);

    /* A 2.6 MB upload, cut off after half its bytes; then a whole one sent just before the
     * kill. */
    kd_csr_t *big = kd_matgen_laplacian_2d(150, 150, KD_DTYPE_F64);
    kd_csr_t *last = kd_matgen_laplacian_2d(37, 41, KD_DTYPE_F64);
    uint8_t big_id[16], last_id[16];
    kd_csr_hash(big, big_id);
    kd_csr_hash(last, last_id);
    kd_writer_t w;
    kd_rpc_write_put(&w, 50, big, "half", -1);
    size_t len;
    char *bytes = kd_writer_release(&w, &len);
    kd_rpc_t slow, quick;
    REQUIRE(kd_rpc_connect(&slow, d.port) == 0);
    REQUIRE(kd_rpc_connect(&quick, d.port) == 0);
    REQUIRE(kd_rpc_send_raw(&slow, bytes, len / 2) == 0);
    free(bytes);
    kd_rpc_write_put(&w, 51, last, "last", -1);
    kd_rpc_send(&quick, &w);
    kd_rpc_sleep_ms(200);
    kd_daemon_kill(&d);
    kd_rpc_close(&slow);
    kd_rpc_close(&quick);

    REQUIRE(kd_daemon_restart(&d, extra) == 0);
    CHECK_EQ_INT(kd_state_check_count(d.state_dir, "matrices", ".tmp"),
                 0); /* leftovers of interrupted writes removed */
    kd_rpc_t c;
    REQUIRE(kd_rpc_connect(&c, d.port) == 0);
    char hex[33];
    kd_id_to_hex(big_id, hex);
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_id_call(&c, 60, "matrix.info", hex, -1, &m) == KD_RPC_RESPONSE);
    CHECK(strcmp(m.code, "NOT_FOUND") == 0);
    kd_rpc_msg_free(&m);
    char path[512];
    file_of(hex, path, sizeof(path));
    struct stat st;
    CHECK(stat(path, &st) != 0);

    /* the last put: all or nothing */
    kd_id_to_hex(last_id, hex);
    REQUIRE(kd_rpc_id_call(&c, 61, "matrix.info", hex, -1, &m) == KD_RPC_RESPONSE);
    int last_there = m.error == NULL;
    kd_rpc_msg_free(&m);
    if (last_there) {
        double *x = random_vector(last->cols), *y = malloc((size_t)last->rows * 8),
               *ref = malloc((size_t)last->rows * 8);
        kd_csr_spmv_ref(last, x, 1.0, 0.0, ref);
        CHECK(kd_rpc_spmv(&c, 62, hex, x, last->cols, y, last->rows, &m) == 0);
        kd_rpc_msg_free(&m);
        CHECK(rel_diff(y, ref, last->rows) <= 1e-12);
        free(x);
        free(y);
        free(ref);
        REQUIRE(kd_rpc_id_call(&c, 63, "matrix.drop", hex, -1, &m) == KD_RPC_RESPONSE);
        kd_rpc_msg_free(&m);
    }
    fprintf(stderr, "   (the put sent just before the kill was %s)\n",
            last_there ? "kept" : "not kept");
    kd_csr_free(big);
    kd_csr_free(last);

    /* every answered put: listed, not resident, same metadata */
    kd_writer_t lw;
    kd_writer_init(&lw);
    kd_w_request_begin(&lw, 64, "matrix.list");
    kd_w_array(&lw, 0);
    REQUIRE(kd_rpc_call(&c, &lw, 64, 30000, &m) == KD_RPC_RESPONSE && m.result != NULL);
    const msgpack_object *list = kd_obj_get(m.result, "matrices");
    REQUIRE(list != NULL && list->type == MSGPACK_OBJECT_ARRAY);
    CHECK_EQ_INT(list->via.array.size, 3);
    for (int i = 0; i < 3; i++) {
        const msgpack_object *found = NULL;
        for (uint32_t k = 0; k < list->via.array.size; k++)
            if (kd_obj_str_eq(kd_obj_get(&list->via.array.ptr[k], "id"), kept[i].id))
                found = &list->via.array.ptr[k];
        CHECK_MSG(found != NULL, "matrix %d missing after restart", i);
        if (found == NULL)
            continue;
        CHECK_EQ_INT(kd_rpc_int(found, "resident", NULL, -1), 0);
        CHECK_EQ_INT(kd_rpc_int(found, "pinned", NULL, -1), kept[i].pinned);
        CHECK_EQ_INT(kd_rpc_int(found, "rows", NULL, -1), kept[i].A->rows);
        CHECK_EQ_INT(kd_rpc_int(found, "nnz", NULL, -1), kept[i].A->nnz);
        CHECK(kd_obj_str_eq(kd_obj_get(found, "name"), kept[i].name));
        CHECK(kd_obj_str_eq(kd_obj_get(found, "dtype"), kd_dtype_name(kept[i].A->dtype)));
        CHECK_MSG(kept[i].format[0] != '\0' &&
                      kd_obj_str_eq(kd_obj_get(found, "format"), kept[i].format),
                  "matrix %d: format changed across the restart (was %s)", i, kept[i].format);
        CHECK(kd_rpc_int(found, "stats", "max_row", -1) > 0);
    }
    kd_rpc_msg_free(&m);

    /* first use reloads without an upload; the answer is the one from before the crash */
    for (int i = 0; i < 3; i++) {
        double *y = malloc((size_t)kept[i].A->rows * sizeof(double));
        int rc = kd_rpc_spmv(&c, 70 + (uint64_t)i, kept[i].id, kept[i].x, kept[i].A->cols, y,
                             kept[i].A->rows, &m);
        CHECK_MSG(rc == 0, "spmv after restart: %s %s", m.code, m.message);
        kd_rpc_msg_free(&m);
        if (rc == 0) {
            CHECK_MSG(memcmp(y, kept[i].y, (size_t)kept[i].A->rows * sizeof(double)) == 0 ||
                          rel_diff(y, kept[i].y, kept[i].A->rows) <= 1e-12,
                      "matrix %d: %g", i, rel_diff(y, kept[i].y, kept[i].A->rows));
        }
        free(y);
        REQUIRE(kd_rpc_id_call(&c, 80 + (uint64_t)i, "matrix.info", kept[i].id, -1, &m) ==
                KD_RPC_RESPONSE);
        CHECK_EQ_INT(kd_rpc_int(m.result, "resident", NULL, -1), 1);
        kd_rpc_msg_free(&m);
    }
    REQUIRE(kd_rpc_status(&c, &m) == 0);
    /* (the last put, when kept, was reloaded for its check above) */
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "misses", -1), 3 + last_there);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "reloads", -1), 3 + last_there);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "hits", -1), 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "corrupt_files", -1), 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "resident_matrices", NULL, -1), 3);
    CHECK_EQ_INT(kd_rpc_int(m.result, "requests_by_method", "matrix.put", -1), 0);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&c);
}

static void flip(const char *path, off_t offset)
{
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    if (fd < 0 || pread(fd, &b, 1, offset) != 1)
        fprintf(stderr, "cannot read %s\n", path);
    b ^= 0x81;
    if (fd < 0 || pwrite(fd, &b, 1, offset) != 1)
        fprintf(stderr, "cannot write %s\n", path);
    if (fd >= 0)
        close(fd);
}

static void test_corrupt_files_are_moved_aside(void)
{
    CHECK_EQ_INT(kd_daemon_signal(&d, SIGTERM), 0);
    char bad_header[512], bad_payload[512];
    file_of(kept[0].id, bad_header, sizeof(bad_header));
    file_of(kept[2].id, bad_payload, sizeof(bad_payload));
    flip(bad_header, 33); /* inside the header: the scan at start-up sees it */
    struct stat st;
    REQUIRE(stat(bad_payload, &st) == 0);
    flip(bad_payload, st.st_size - 5); /* a value: seen when the matrix is loaded */

    REQUIRE(kd_daemon_restart(&d, extra) == 0);
    kd_rpc_t c;
    REQUIRE(kd_rpc_connect(&c, d.port) == 0);
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_id_call(&c, 1, "matrix.info", kept[0].id, -1, &m) == KD_RPC_RESPONSE);
    CHECK(strcmp(m.code, "NOT_FOUND") == 0);
    kd_rpc_msg_free(&m);
    CHECK(stat(bad_header, &st) != 0);
    CHECK_EQ_INT(kd_state_check_count(d.state_dir, "corrupt", ".0"), 1);

    /* the payload is only read on first use */
    REQUIRE(kd_rpc_id_call(&c, 2, "matrix.info", kept[2].id, -1, &m) == KD_RPC_RESPONSE);
    CHECK(m.error == NULL);
    kd_rpc_msg_free(&m);
    double *y = malloc((size_t)kept[2].A->rows * sizeof(double));
    CHECK(kd_rpc_spmv(&c, 3, kept[2].id, kept[2].x, kept[2].A->cols, y, kept[2].A->rows, &m) != 0);
    CHECK(strcmp(m.code, "NOT_FOUND") == 0);
    CHECK_STR_CONTAINS(m.message, "checksum");
    CHECK_STR_CONTAINS(m.message, "upload it again");
    kd_rpc_msg_free(&m);
    free(y);
    REQUIRE(kd_rpc_id_call(&c, 4, "matrix.info", kept[2].id, -1, &m) == KD_RPC_RESPONSE);
    CHECK(strcmp(m.code, "NOT_FOUND") == 0);
    kd_rpc_msg_free(&m);
    CHECK(stat(bad_payload, &st) != 0);
    CHECK_EQ_INT(kd_state_check_count(d.state_dir, "corrupt", ".0"), 2);
    REQUIRE(kd_rpc_status(&c, &m) == 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "corrupt_files", -1), 2);
    CHECK_EQ_INT(kd_rpc_int(m.result, "matrices", NULL, -1), 1);
    kd_rpc_msg_free(&m);
    CHECK(log_contains("moved aside"));
    CHECK(log_contains(kept[0].id));
    CHECK(log_contains(kept[2].id));

    /* the untouched one still reloads and answers; drop removes its file */
    y = malloc((size_t)kept[1].A->rows * sizeof(double));
    CHECK(kd_rpc_spmv(&c, 5, kept[1].id, kept[1].x, kept[1].A->cols, y, kept[1].A->rows, &m) == 0);
    kd_rpc_msg_free(&m);
    CHECK(memcmp(y, kept[1].y, (size_t)kept[1].A->rows * sizeof(double)) == 0 ||
          rel_diff(y, kept[1].y, kept[1].A->rows) <= 1e-6);
    free(y);
    char path[512];
    file_of(kept[1].id, path, sizeof(path));
    CHECK(stat(path, &st) == 0);
    REQUIRE(kd_rpc_id_call(&c, 6, "matrix.drop", kept[1].id, -1, &m) == KD_RPC_RESPONSE);
    CHECK(m.error == NULL);
    kd_rpc_msg_free(&m);
    CHECK(stat(path, &st) != 0);
    REQUIRE(kd_rpc_status(&c, &m) == 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "matrices", NULL, -1), 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "state_bytes", NULL, -1), 0);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&c);
}

static void test_pin_survives_restart(void)
{
    kd_rpc_t c;
    REQUIRE(kd_rpc_connect(&c, d.port) == 0);
    kd_csr_t *A = kd_matgen_laplacian_2d(20, 20, KD_DTYPE_F64);
    char id[33];
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_put(&c, 1, A, "pin me", -1, id, &m) == 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "pinned", NULL, -1), 0);
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_id_call(&c, 2, "matrix.pin", id, 1, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(kd_rpc_int(m.result, "pinned", NULL, -1), 1);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&c);
    CHECK_EQ_INT(kd_daemon_signal(&d, SIGTERM), 0);
    REQUIRE(kd_daemon_restart(&d, extra) == 0);
    REQUIRE(kd_rpc_connect(&c, d.port) == 0);
    REQUIRE(kd_rpc_id_call(&c, 3, "matrix.info", id, -1, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(kd_rpc_int(m.result, "pinned", NULL, -1), 1);
    CHECK(kd_obj_str_eq(kd_obj_get(m.result, "name"), "pin me"));
    kd_rpc_msg_free(&m);
    /* pinning loads it; unpinning is recorded too */
    REQUIRE(kd_rpc_id_call(&c, 4, "matrix.pin", id, 1, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(kd_rpc_int(m.result, "resident", NULL, -1), 1);
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_id_call(&c, 5, "matrix.pin", id, 0, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(kd_rpc_int(m.result, "pinned", NULL, -1), 0);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&c);
    CHECK_EQ_INT(kd_daemon_signal(&d, SIGTERM), 0);
    REQUIRE(kd_daemon_restart(&d, extra) == 0);
    REQUIRE(kd_rpc_connect(&c, d.port) == 0);
    REQUIRE(kd_rpc_id_call(&c, 6, "matrix.info", id, -1, &m) == KD_RPC_RESPONSE);
    CHECK_EQ_INT(kd_rpc_int(m.result, "pinned", NULL, -1), 0);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&c);
    kd_csr_free(A);
}

static void test_sighup_reopens_log(void)
{
    char rotated[450];
    snprintf(rotated, sizeof(rotated), "%s.1", log_path);
    REQUIRE(rename(log_path, rotated) == 0);
    REQUIRE(kd_daemon_send(&d, SIGHUP) == 0);
    struct stat st;
    for (int i = 0; i < 200 && stat(log_path, &st) != 0; i++)
        kd_rpc_sleep_ms(10);
    CHECK_MSG(stat(log_path, &st) == 0, "no new log file after SIGHUP");
    /* what happens next goes to the new file */
    kd_rpc_t c;
    REQUIRE(kd_rpc_connect(&c, d.port) == 0);
    kd_csr_t *A = kd_matgen_laplacian_2d(9, 7, KD_DTYPE_F64);
    char id[33];
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_put(&c, 1, A, NULL, -1, id, &m) == 0);
    kd_rpc_msg_free(&m);
    CHECK(log_contains(id));
    CHECK(log_contains("SIGHUP"));
    kd_csr_free(A);
    kd_rpc_close(&c);
    CHECK(kd_daemon_send(&d, 0) == 0); /* still running */
}

int main(void)
{
    kd_test_seed();
    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "/tmp/krylovd-test-XXXXXX");
    if (mkdtemp(d.dir) == NULL)
        return 1;
    snprintf(log_path, sizeof(log_path), "%s/krylovd.log", d.dir);
    extra[0] = "--log-file";
    extra[1] = log_path;
    extra[2] = "--log-level";
    extra[3] = "info";
    extra[4] = NULL;
    if (kd_daemon_launch(&d, extra) != 0)
        return 1;
    RUN(test_put_then_crash_mid_upload);
    RUN(test_corrupt_files_are_moved_aside);
    RUN(test_pin_survives_restart);
    RUN(test_sighup_reopens_log);
    for (int i = 0; i < 3; i++) {
        kd_csr_free(kept[i].A);
        free(kept[i].x);
        free(kept[i].y);
    }
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    return kd_test_finish();
}
