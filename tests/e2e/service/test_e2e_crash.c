/*
 * Crash sweep (issue 21): a put / pin / batch put / put with like / drop / unpin sequence runs
 * against krylovd_faults (server/store/state_io.h), which is killed with SIGKILL at its k-th write,
 * fsync, rename, unlink, create or mkdir in the state directory, for every k from 1 to N, N being
 * the number of such calls the whole sequence makes (counted by a first run in count mode).
 * Three matrices share one pattern (issue 22: one pattern file): A_LIKE put with like A, then A
 * (the first version, which carries the pattern file) dropped, then A_FULL put whole with new
 * values on it (only its values are written), then A_LIKE dropped. After each kill a daemon
 * restarts on the same directory, and:
 *   - every matrix is whole and right (spmv against the CPU reference on fresh random x) or
 *     absent; none is served wrong, none is listed that the sequence never put;
 *   - each one's presence and pin is what the answered steps left, or, for the one step the kill
 *     cut short, what it would have left: an answered put is there, an answered drop is not;
 *   - the state directory has no temporary file left after the start-up's recovery, nothing was
 *     moved to corrupt/ (a killed process tears no renamed file), each listed matrix has its
 *     one file, and there is one pattern file per pattern the listed matrices have (none that
 *     nothing names: the start-up's sweep removed what a kill between two files left).
 * Small matrices; the daemons build programs on first use (PoCL's own cache keeps that short).
 */
#include "bench/matgen/matgen.h"
#include "kd_daemon.h"
#include "kd_state_check.h"

#include <sys/stat.h>

/* M_D: a batch of two systems on one pattern (one whole file); M_A_LIKE, M_A_FULL: A's pattern */
enum { M_A, M_B, M_C, M_D, M_A_LIKE, M_A_FULL, M_COUNT };
enum { S_PUT, S_PIN, S_UNPIN, S_DROP, S_LIKE };
/* Which pattern file each matrix names (-1: none, a batch). */
static const int pattern_of[M_COUNT] = {0, 1, 2, -1, 0, 0};
#define NPATTERNS 3

typedef struct step {
    int kind, matrix, pin;
} step_t;

static const step_t steps[] = {
    {S_PUT, M_A, 0},       {S_PUT, M_B, 1},      {S_PIN, M_A, 1},   {S_PUT, M_D, 0},
    {S_LIKE, M_A_LIKE, 0}, {S_DROP, M_B, 0},     {S_UNPIN, M_A, 0}, {S_PUT, M_C, 0},
    {S_DROP, M_A, 0},      {S_PUT, M_A_FULL, 0}, {S_DROP, M_D, 0},  {S_DROP, M_A_LIKE, 0},
};
#define NSTEPS ((int)(sizeof(steps) / sizeof(steps[0])))

static kd_csr_t *pattern_d; /* M_D's pattern and its two systems' values */
static double *values_d;
static kd_csr_t *mats[M_COUNT]; /* M_D: the block-diagonal matrix the batch is */
static char ids[M_COUNT][33];
static uint64_t msgid = 1;
/* One format, no timing at upload: a put costs the state layer's work, not the selection's. */
static const char *const daemon_args[] = {"--format", "csr_scalar", NULL};
#define KD_SWEEP_WORKERS 3

/* Where each matrix stands: present, pinned. */
typedef struct model {
    int present[M_COUNT], pinned[M_COUNT];
} model_t;

static void model_apply(model_t *m, const step_t *s)
{
    switch (s->kind) {
    case S_PUT:
    case S_LIKE:
        m->present[s->matrix] = 1;
        m->pinned[s->matrix] = s->pin;
        break;
    case S_PIN:
    case S_UNPIN:
        m->pinned[s->matrix] = s->kind == S_PIN;
        break;
    case S_DROP:
        m->present[s->matrix] = 0;
        m->pinned[s->matrix] = 0;
        break;
    }
}

static kd_csr_t *block_diagonal(const kd_csr_t *p, const double *values, int k)
{
    kd_csr_t *out = NULL;
    kd_err_t err = {0};
    if (kd_csr_alloc(p->rows * k, p->cols * k, p->nnz * k, KD_DTYPE_F64, &out, &err) != KD_OK)
        return NULL;
    double *v = out->values;
    out->indptr[0] = 0;
    for (int s = 0; s < k; s++)
        for (int64_t r = 0; r < p->rows; r++) {
            int64_t row = s * p->rows + r;
            for (int32_t e = p->indptr[r]; e < p->indptr[r + 1]; e++) {
                int64_t at = s * p->nnz + e;
                out->indices[at] = (int32_t)(s * p->cols + p->indices[e]);
                v[at] = values[at];
            }
            out->indptr[row + 1] = (int32_t)((s + 1) * p->nnz + p->indptr[r + 1] - p->nnz);
        }
    return out;
}

/* One step; the response kind (KD_RPC_RESPONSE) with the error, if any, in code. */
static int run_step(kd_rpc_t *r, const step_t *s, char *code, size_t cap)
{
    kd_writer_t w;
    uint64_t id = msgid++;
    const kd_csr_t *a = mats[s->matrix];
    if (s->kind == S_PUT && s->matrix == M_D) {
        const kd_csr_t *p = pattern_d;
        kd_rpc_begin(&w, id, "matrix.put", 7);
        kd_w_kv_int(&w, "rows", p->rows);
        kd_w_kv_int(&w, "cols", p->cols);
        kd_w_kv_str(&w, "dtype", "float64");
        kd_w_kv_bin(&w, "indptr", p->indptr, ((size_t)p->rows + 1) * 4);
        kd_w_kv_bin(&w, "indices", p->indices, (size_t)p->nnz * 4);
        kd_w_kv_bin(&w, "values", values_d, (size_t)p->nnz * 2 * sizeof(double));
        kd_w_kv_int(&w, "batch", 2);
    } else if (s->kind == S_PUT) {
        kd_rpc_write_put(&w, id, a, "swept", s->pin);
    } else if (s->kind == S_LIKE) { /* new values on A's pattern (docs/PROTOCOL.md) */
        kd_rpc_begin(&w, id, "matrix.put", 2);
        kd_w_kv_str(&w, "like", ids[M_A]);
        kd_w_kv_bin(&w, "values", a->values, (size_t)a->nnz * sizeof(double));
    } else {
        const char *method = s->kind == S_DROP ? "matrix.drop" : "matrix.pin";
        kd_rpc_begin(&w, id, method, 1 + (s->kind != S_DROP));
        kd_w_kv_str(&w, "id", ids[s->matrix]);
        if (s->kind != S_DROP)
            kd_w_kv_bool(&w, "pinned", s->kind == S_PIN);
    }
    kd_rpc_msg_t m;
    int kind = kd_rpc_call(r, &w, id, 120000, &m);
    code[0] = '\0';
    if (kind == KD_RPC_RESPONSE && m.error != NULL)
        snprintf(code, cap, "%s %s", m.code, m.message);
    else if (kind == KD_RPC_RESPONSE && (s->kind == S_PUT || s->kind == S_LIKE)) {
        char got[33] = "";
        kd_obj_str_copy(kd_obj_get(m.result, "id"), got, sizeof(got));
        if (ids[s->matrix][0] == '\0')
            snprintf(ids[s->matrix], sizeof(ids[s->matrix]), "%s", got);
        else if (strcmp(got, ids[s->matrix]) != 0)
            snprintf(code, cap, "put answered id %s, expected %s", got, ids[s->matrix]);
    }
    kd_rpc_msg_free(&m);
    return kind;
}

/* Run the sequence; the number of steps answered without error (the rest were cut off). */
static int run_sequence(kd_daemon_t *d, int expect_all)
{
    kd_rpc_t r;
    if (kd_rpc_connect(&r, d->port) != 0)
        return 0;
    int done = 0;
    for (; done < NSTEPS; done++) {
        char code[600];
        int kind = run_step(&r, &steps[done], code, sizeof(code));
        if (kind != KD_RPC_RESPONSE) {
            CHECK_MSG(!expect_all, "step %d: no answer (%d)", done, kind);
            break;
        }
        CHECK_MSG(code[0] == '\0', "step %d: %s", done, code);
        if (code[0] != '\0')
            break;
    }
    kd_rpc_close(&r);
    return done;
}

static size_t count_lines(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = 0;
    int ch;
    while ((ch = fgetc(f)) != EOF)
        n += ch == '\n';
    fclose(f);
    return n;
}

/* After a restart: each matrix as the model before or after the cut step says, and right. */
static void check_recovered(kd_daemon_t *d, int answered, int k)
{
    model_t before = {0}, after;
    for (int i = 0; i < answered; i++)
        model_apply(&before, &steps[i]);
    after = before;
    if (answered < NSTEPS)
        model_apply(&after, &steps[answered]);
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d->port) == 0);
    int listed_expected = 0, pattern_used[NPATTERNS] = {0};
    for (int x = 0; x < M_COUNT; x++) {
        kd_rpc_msg_t m;
        int kind = kd_rpc_id_call(&r, msgid++, "matrix.info", ids[x], -1, &m);
        REQUIRE(kind == KD_RPC_RESPONSE);
        int present = m.error == NULL, pinned = -1;
        if (present) {
            const msgpack_object *o = kd_obj_get(m.result, "pinned");
            pinned = o != NULL && o->type == MSGPACK_OBJECT_BOOLEAN ? o->via.boolean : -1;
        } else {
            CHECK_MSG(strcmp(m.code, "NOT_FOUND") == 0, "k=%d matrix %d: %s %s", k, x, m.code,
                      m.message);
        }
        kd_rpc_msg_free(&m);
        int as_before = present == before.present[x] && (!present || pinned == before.pinned[x]);
        int as_after = present == after.present[x] && (!present || pinned == after.pinned[x]);
        CHECK_MSG(as_before || as_after,
                  "k=%d (%d steps answered) matrix %d: present %d pinned %d; expected %d/%d "
                  "or %d/%d",
                  k, answered, x, present, pinned, before.present[x], before.pinned[x],
                  after.present[x], after.pinned[x]);
        if (present) {
            listed_expected++;
            if (pattern_of[x] >= 0)
                pattern_used[pattern_of[x]] = 1;
            char why[700];
            CHECK_MSG(kd_state_check_spmv(&r, msgid++, ids[x], mats[x], why, sizeof(why)) == 0,
                      "k=%d matrix %d: %s", k, x, why);
        }
    }
    kd_rpc_msg_t m;
    kd_writer_t w;
    kd_writer_init(&w);
    kd_w_request_begin(&w, msgid, "matrix.list");
    kd_w_array(&w, 0);
    REQUIRE(kd_rpc_call(&r, &w, msgid++, 30000, &m) == KD_RPC_RESPONSE && m.result != NULL);
    const msgpack_object *list = kd_obj_get(m.result, "matrices");
    REQUIRE(list != NULL && list->type == MSGPACK_OBJECT_ARRAY);
    CHECK_MSG((int)list->via.array.size == listed_expected,
              "k=%d: %u matrices listed, %d of the sequence's found", k, list->via.array.size,
              listed_expected);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    CHECK_MSG(kd_state_check_count(d->state_dir, "matrices", ".tmp") == 0 &&
                  kd_state_check_count(d->state_dir, "", ".tmp") == 0,
              "k=%d: a temporary file survived the restart", k);
    CHECK_MSG(kd_state_check_count(d->state_dir, "matrices", ".kdm") == (size_t)listed_expected,
              "k=%d: %zu matrix files for %d matrices", k,
              kd_state_check_count(d->state_dir, "matrices", ".kdm"), listed_expected);
    CHECK_MSG(kd_state_check_count(d->state_dir, "corrupt", "") == 0,
              "k=%d: a file was moved to corrupt/", k);
    size_t patterns = 0;
    for (int p = 0; p < NPATTERNS; p++)
        patterns += (size_t)pattern_used[p];
    CHECK_MSG(kd_state_check_count(d->state_dir, "patterns", ".kdp") == patterns,
              "k=%d: %zu pattern files for the %zu patterns of the listed matrices", k,
              kd_state_check_count(d->state_dir, "patterns", ".kdp"), patterns);
    CHECK_MSG(kd_state_check_count(d->state_dir, "patterns", ".tmp") == 0,
              "k=%d: a temporary pattern file survived the restart", k);
}

/* Whether d ended by SIGKILL on its own (within 10 s); it is gone either way. */
static int killed_by_hook(kd_daemon_t *d)
{
    for (int i = 0; i < 1000; i++) {
        int status;
        if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
            d->pid = 0;
            return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
        }
        kd_rpc_sleep_ms(10);
    }
    kd_daemon_kill(d);
    return 0;
}

static void make_matrices(void)
{
    mats[M_A] = kd_matgen_power_law(120, 120, 4, kd_test_rand_u64(), KD_DTYPE_F64);
    mats[M_B] = kd_matgen_power_law(90, 110, 3, kd_test_rand_u64(), KD_DTYPE_F64);
    mats[M_C] = kd_matgen_laplacian_2d(9, 11, KD_DTYPE_F64);
    pattern_d = kd_matgen_laplacian_2d(7, 8, KD_DTYPE_F64);
    REQUIRE(mats[M_A] && mats[M_B] && mats[M_C] && pattern_d);
    values_d = malloc((size_t)pattern_d->nnz * 2 * sizeof(double));
    for (int64_t i = 0; i < pattern_d->nnz * 2; i++)
        values_d[i] = kd_test_rand_double(-2, 2);
    mats[M_D] = block_diagonal(pattern_d, values_d, 2);
    REQUIRE(mats[M_D] != NULL);
    for (int x = M_A_LIKE; x <= M_A_FULL; x++) { /* A's pattern, new values */
        kd_err_t err = {0};
        const kd_csr_t *a = mats[M_A];
        REQUIRE(kd_csr_alloc(a->rows, a->cols, a->nnz, KD_DTYPE_F64, &mats[x], &err) == KD_OK);
        memcpy(mats[x]->indptr, a->indptr, ((size_t)a->rows + 1) * 4);
        memcpy(mats[x]->indices, a->indices, (size_t)a->nnz * 4);
        for (int64_t k = 0; k < a->nnz; k++)
            ((double *)mats[x]->values)[k] = kd_test_rand_double(-2, 2);
    }
    for (int x = 0; x < M_COUNT; x++) { /* M_D's id comes from the server (a batch's id is mixed) */
        if (x == M_D)
            continue;
        uint8_t raw[16];
        kd_csr_hash(mats[x], raw);
        kd_id_to_hex(raw, ids[x]);
    }
}

/* Kill a daemon on a fresh directory at call k, restart it there and check what it kept. A kill
 * at one of the at_start calls of the start-up leaves no daemon to run the sequence against. */
static void sweep_one(size_t k, size_t at_start)
{
    kd_daemon_t d;
    memset(&d, 0, sizeof(d));
    d.binary = "krylovd_faults";
    snprintf(d.dir, sizeof(d.dir), "/tmp/krylovd-test-XXXXXX");
    REQUIRE(mkdtemp(d.dir) != NULL);
    char spec[64];
    snprintf(spec, sizeof(spec), "crash:%zu", k);
    setenv("KD_TEST_FAULT", spec, 1);
    int answered = 0;
    if (kd_daemon_launch(&d, daemon_args) == 0) {
        answered = run_sequence(&d, 0);
        CHECK_MSG(k > at_start, "k=%zu: the daemon started past its %zu start-up calls", k,
                  at_start);
        CHECK_MSG(answered < NSTEPS, "k=%zu: the whole sequence ran", k);
        CHECK_MSG(killed_by_hook(&d), "k=%zu: the daemon was not killed by its hook", k);
    } else {
        CHECK_MSG(k <= at_start, "k=%zu: the daemon did not start", k);
    }
    unsetenv("KD_TEST_FAULT");
    if (kd_daemon_restart(&d, daemon_args) != 0) {
        CHECK_MSG(0, "k=%zu: no restart on the same directory", k);
    } else {
        check_recovered(&d, answered, (int)k);
        kd_daemon_kill(&d);
    }
    kd_daemon_cleanup(&d);
}

static void test_crash_sweep(void)
{
    make_matrices();
    /* count mode: how many calls the start-up and the sequence make */
    kd_daemon_t d;
    memset(&d, 0, sizeof(d));
    d.binary = "krylovd_faults";
    snprintf(d.dir, sizeof(d.dir), "/tmp/krylovd-test-XXXXXX");
    REQUIRE(mkdtemp(d.dir) != NULL);
    char count_file[400], spec[440];
    snprintf(count_file, sizeof(count_file), "%s/calls", d.dir);
    snprintf(spec, sizeof(spec), "count:%s", count_file);
    setenv("KD_TEST_FAULT", spec, 1);
    REQUIRE(kd_daemon_launch(&d, daemon_args) == 0);
    size_t at_start = count_lines(count_file);
    REQUIRE(run_sequence(&d, 1) == NSTEPS);
    REQUIRE(ids[M_D][0] != '\0');
    size_t n = count_lines(count_file);
    kd_daemon_kill(&d);
    kd_daemon_cleanup(&d);
    fprintf(stderr, "   %zu calls: %zu at start-up, %zu in %d steps\n", n, at_start, n - at_start,
            NSTEPS);
    REQUIRE(n > at_start);

    /* Workers, each its own share of the k: the time goes mostly to daemons starting. */
    pid_t workers[KD_SWEEP_WORKERS];
    for (int w = 0; w < KD_SWEEP_WORKERS; w++) {
        workers[w] = fork();
        REQUIRE(workers[w] >= 0);
        if (workers[w] == 0) {
            for (size_t k = 1 + (size_t)w; k <= n && !kd_test_case_failed; k += KD_SWEEP_WORKERS)
                sweep_one(k, at_start);
            fflush(stderr);
            _exit(kd_test_failures != 0);
        }
    }
    for (int w = 0; w < KD_SWEEP_WORKERS; w++) {
        int status = 0;
        waitpid(workers[w], &status, 0);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0, "worker %d failed (status %d)", w,
                  status);
    }
    for (int x = 0; x < M_COUNT; x++)
        kd_csr_free(mats[x]);
    kd_csr_free(pattern_d);
    free(values_d);
}

int main(void)
{
    kd_test_seed();
    RUN(test_crash_sweep);
    return kd_test_finish();
}
