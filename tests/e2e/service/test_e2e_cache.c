/*
 * The device-memory budget and its eviction policy, against a real krylovd. Four matrices of one
 * size are uploaded into a budget that holds two (plus one request's vectors) and used in turn;
 * every SpMV must be right, and the daemon's cache counters (hits, misses, evictions, reloads)
 * and the `resident` flags must equal those of an independent simulation of the documented
 * policy. A pinned matrix stays resident while the others cycle; a matrix larger than the budget,
 * or one that only fits by evicting pinned ones, gets DEVICE_MEMORY naming the sizes, and so do a
 * solve's vectors. The driver refusing an allocation (a daemon told to refuse large ones) makes
 * the server evict, retry once and answer DEVICE_MEMORY — and keep serving. And the disk limit
 * (--state-max-bytes) forgets the least recently used unpinned matrix to make room, never a
 * pinned one, and refuses a matrix that cannot fit with TOO_LARGE.
 */
#include "bench/matgen/matgen.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_test.h"

#define NMAT 4
#define GRID 60

static kd_daemon_t d;
static kd_csr_t *mats[NMAT];
static char ids[NMAT][33];
static uint64_t next_msgid = 1;

/* ---- the policy, simulated -------------------------------------------------------------------
 * Sizes in bytes; `clock` orders uses. Mirrors docs/OPERATIONS.md: a put makes room for the
 * matrix, a use of a non-resident matrix makes room for it and the request's vectors, then for the
 * vectors beside it; room is made by evicting the least recently used unpinned resident matrix
 * other than the one in use. */
typedef struct sim {
    size_t budget, size, vectors;
    int present[NMAT], resident[NMAT], pinned[NMAT];
    uint64_t last[NMAT], clock;
    int64_t hits, misses, evictions, reloads;
} sim_t;

static size_t sim_used(const sim_t *s)
{
    size_t u = 0;
    for (int i = 0; i < NMAT; i++)
        u += s->resident[i] ? s->size : 0;
    return u;
}

static int sim_reserve(sim_t *s, size_t bytes, int keep)
{
    size_t fixed = 0;
    for (int i = 0; i < NMAT; i++)
        if (s->resident[i] && (s->pinned[i] || i == keep))
            fixed += s->size;
    if (bytes > s->budget || fixed + bytes > s->budget)
        return -1;
    while (sim_used(s) + bytes > s->budget) {
        int victim = -1;
        for (int i = 0; i < NMAT; i++)
            if (s->resident[i] && !s->pinned[i] && i != keep &&
                (victim < 0 || s->last[i] < s->last[victim]))
                victim = i;
        s->resident[victim] = 0;
        s->evictions++;
    }
    return 0;
}

static void sim_put(sim_t *s, int i)
{
    sim_reserve(s, s->size, -1);
    s->present[i] = s->resident[i] = 1;
    s->last[i] = ++s->clock;
}

static void sim_use(sim_t *s, int i)
{
    s->last[i] = ++s->clock;
    if (s->resident[i]) {
        s->hits++;
    } else {
        s->misses++;
        sim_reserve(s, s->size + s->vectors, i);
        s->resident[i] = 1;
        s->reloads++;
    }
    sim_reserve(s, s->vectors, i);
}

/* matrix.pin: loads the matrix if it is not resident (no vectors); a resident one is only marked
 * used (not a hit: nothing ran on it). */
static void sim_pin(sim_t *s, int i, int pinned)
{
    s->last[i] = ++s->clock;
    if (pinned && !s->resident[i]) {
        s->misses++;
        sim_reserve(s, s->size, i);
        s->resident[i] = 1;
        s->reloads++;
    }
    s->pinned[i] = pinned;
}

/* ---------------------------------------------------------------------------------------------- */

static double rel_diff(const double *a, const double *b, int64_t n)
{
    double dmax = 0, sc = 1;
    for (int64_t i = 0; i < n; i++) {
        dmax = fmax(dmax, fabs(a[i] - b[i]));
        sc = fmax(sc, fabs(b[i]));
    }
    return dmax / sc;
}

static int spmv_checked(kd_rpc_t *r, int i)
{
    const kd_csr_t *A = mats[i];
    double *x = malloc((size_t)A->cols * 8), *y = malloc((size_t)A->rows * 8),
           *ref = malloc((size_t)A->rows * 8);
    for (int64_t k = 0; k < A->cols; k++)
        x[k] = kd_test_rand_double(-1, 1);
    kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
    kd_rpc_msg_t m;
    int rc = kd_rpc_spmv(r, next_msgid++, ids[i], x, A->cols, y, A->rows, &m);
    CHECK_MSG(rc == 0, "spmv on matrix %d: %s %s", i, m.code, m.message);
    if (rc == 0)
        CHECK_MSG(rel_diff(y, ref, A->rows) <= 1e-12, "matrix %d: %g", i,
                  rel_diff(y, ref, A->rows));
    kd_rpc_msg_free(&m);
    free(x);
    free(y);
    free(ref);
    return rc;
}

static void check_against(kd_rpc_t *r, const sim_t *s, const char *when)
{
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_status(r, &m) == 0);
    int64_t hits = kd_rpc_int(m.result, "cache", "hits", -1),
            misses = kd_rpc_int(m.result, "cache", "misses", -1),
            evictions = kd_rpc_int(m.result, "cache", "evictions", -1),
            reloads = kd_rpc_int(m.result, "cache", "reloads", -1);
    CHECK_MSG(hits == s->hits && misses == s->misses && evictions == s->evictions &&
                  reloads == s->reloads,
              "%s: server hits/misses/evictions/reloads %lld/%lld/%lld/%lld, policy says "
              "%lld/%lld/%lld/%lld",
              when, (long long)hits, (long long)misses, (long long)evictions, (long long)reloads,
              (long long)s->hits, (long long)s->misses, (long long)s->evictions,
              (long long)s->reloads);
    CHECK((size_t)kd_rpc_int(m.result, "device_bytes_used", NULL, -1) == sim_used(s));
    CHECK((size_t)kd_rpc_int(m.result, "device_bytes_used", NULL, -1) <= s->budget);
    kd_rpc_msg_free(&m);
    for (int i = 0; i < NMAT; i++) {
        if (!s->present[i])
            continue;
        REQUIRE(kd_rpc_id_call(r, next_msgid++, "matrix.info", ids[i], -1, &m) == KD_RPC_RESPONSE);
        CHECK_MSG(kd_rpc_int(m.result, "resident", NULL, -1) == s->resident[i],
                  "%s: matrix %d resident %lld, policy says %d", when, i,
                  (long long)kd_rpc_int(m.result, "resident", NULL, -1), s->resident[i]);
        kd_rpc_msg_free(&m);
    }
}

static sim_t sim;

static void test_lru_eviction_in_turn(void)
{
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    for (int i = 0; i < NMAT; i++) {
        kd_rpc_msg_t m;
        REQUIRE(kd_rpc_put(&r, next_msgid++, mats[i], NULL, -1, ids[i], &m) == 0);
        CHECK((size_t)kd_rpc_int(m.result, "device_bytes", NULL, -1) == sim.size);
        kd_rpc_msg_free(&m);
        sim_put(&sim, i);
        check_against(&r, &sim, "after put");
    }
    CHECK(sim.evictions == 2);
    for (int round = 0; round < 3; round++)
        for (int i = 0; i < NMAT; i++) {
            spmv_checked(&r, i);
            sim_use(&sim, i);
            check_against(&r, &sim, "after spmv");
        }
    /* a matrix used twice in a row is a hit the second time */
    spmv_checked(&r, 1);
    sim_use(&sim, 1);
    spmv_checked(&r, 1);
    sim_use(&sim, 1);
    check_against(&r, &sim, "after repeated use");
    CHECK(sim.hits >= 1 && sim.evictions >= 12);
    kd_rpc_close(&r);
}

static void test_pinned_stays_resident(void)
{
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    kd_rpc_msg_t m;
    /* pinning a matrix that is not resident loads it (a use, in the policy's terms) */
    int p = sim.resident[0] ? 2 : 0;
    if (sim.resident[p])
        p = 3;
    REQUIRE(!sim.resident[p]);
    REQUIRE(kd_rpc_id_call(&r, next_msgid++, "matrix.pin", ids[p], 1, &m) == KD_RPC_RESPONSE);
    CHECK(m.error == NULL);
    CHECK_EQ_INT(kd_rpc_int(m.result, "resident", NULL, -1), 1);
    kd_rpc_msg_free(&m);
    sim_pin(&sim, p, 1);
    check_against(&r, &sim, "after pin");
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < NMAT; i++) {
            spmv_checked(&r, i);
            sim_use(&sim, i);
            check_against(&r, &sim, "with one pinned");
            CHECK(sim.resident[p]);
        }

    /* pin a second: nothing is left to evict for a third */
    int q = (p + 1) % NMAT;
    REQUIRE(kd_rpc_id_call(&r, next_msgid++, "matrix.pin", ids[q], 1, &m) == KD_RPC_RESPONSE);
    CHECK(m.error == NULL);
    kd_rpc_msg_free(&m);
    sim_pin(&sim, q, 1);
    check_against(&r, &sim, "after the second pin");
    int other = (p + 2) % NMAT;
    int64_t evictions_before = sim.evictions;
    double x[GRID * GRID], y[GRID * GRID];
    for (int k = 0; k < GRID * GRID; k++)
        x[k] = 1.0;
    CHECK(kd_rpc_spmv(&r, next_msgid++, ids[other], x, GRID * GRID, y, GRID * GRID, &m) != 0);
    CHECK_MSG(strcmp(m.code, "DEVICE_MEMORY") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "pinned");
    CHECK_STR_CONTAINS(m.message, "budget");
    kd_rpc_msg_free(&m);
    sim.last[other] = ++sim.clock;
    sim.misses++; /* looked up, not resident, refused before anything was evicted */
    check_against(&r, &sim, "after a refusal");
    CHECK(sim.evictions == evictions_before);

    /* a solve's vectors do not fit beside two pinned matrices either */
    kd_writer_t w;
    uint64_t id = next_msgid++;
    kd_rpc_begin(&w, id, "solve", 2);
    kd_w_kv_str(&w, "id", ids[p]);
    kd_w_kv_bin(&w, "b", x, sizeof(x));
    REQUIRE(kd_rpc_call(&r, &w, id, 60000, &m) == KD_RPC_RESPONSE);
    CHECK_MSG(strcmp(m.code, "DEVICE_MEMORY") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "vectors");
    kd_rpc_msg_free(&m);
    sim.last[p] = ++sim.clock;
    sim.hits++;

    /* unpin one: now the solve evicts it and runs */
    REQUIRE(kd_rpc_id_call(&r, next_msgid++, "matrix.pin", ids[q], 0, &m) == KD_RPC_RESPONSE);
    kd_rpc_msg_free(&m);
    sim_pin(&sim, q, 0);
    id = next_msgid++;
    kd_rpc_begin(&w, id, "solve", 2);
    kd_w_kv_str(&w, "id", ids[p]);
    kd_w_kv_bin(&w, "b", x, sizeof(x));
    REQUIRE(kd_rpc_call(&r, &w, id, 60000, &m) == KD_RPC_RESPONSE);
    CHECK_MSG(m.error == NULL, "%s %s", m.code, m.message);
    CHECK(kd_obj_str_eq(kd_obj_get(m.result, "status"), "converged"));
    kd_rpc_msg_free(&m);
    size_t v = sim.vectors;
    sim.vectors = (size_t)(7 * GRID * GRID) * 8;
    sim_use(&sim, p);
    sim.vectors = v;
    check_against(&r, &sim, "after the solve");
    CHECK(!sim.resident[q]);

    /* larger than the whole budget */
    kd_csr_t *big = kd_matgen_laplacian_2d(150, 150, KD_DTYPE_F64);
    char big_id[33];
    CHECK(kd_rpc_put(&r, next_msgid++, big, NULL, -1, big_id, &m) != 0);
    CHECK_MSG(strcmp(m.code, "DEVICE_MEMORY") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "more than the whole budget");
    char budget_text[32];
    snprintf(budget_text, sizeof(budget_text), "%zu", sim.budget);
    CHECK_STR_CONTAINS(m.message, budget_text);
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_status(&r, &m) == 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "matrices", NULL, -1), NMAT);
    kd_rpc_msg_free(&m);
    check_against(&r, &sim, "after a too-large put");
    kd_csr_free(big);
    kd_rpc_close(&r);
}

/* A daemon whose device "refuses" allocations over 100 kB, with a budget far larger. */
static void test_driver_refusal(void)
{
    kd_daemon_t d2;
    const char *extra[] = {"--test-max-alloc", "100000", "--device-memory", "64M", NULL};
    REQUIRE(kd_daemon_start(&d2, extra) == 0);
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d2.port) == 0);
    kd_csr_t *small = kd_matgen_laplacian_2d(20, 20, KD_DTYPE_F64); /* 15 kB of values */
    kd_csr_t *large = kd_matgen_laplacian_2d(60, 60, KD_DTYPE_F64); /* 142 kB of values */
    char small_id[33], large_id[33];
    kd_rpc_msg_t m;
    REQUIRE(kd_rpc_put(&r, 1, small, NULL, -1, small_id, &m) == 0);
    kd_rpc_msg_free(&m);
    CHECK(kd_rpc_put(&r, 2, large, NULL, -1, large_id, &m) != 0);
    CHECK_MSG(strcmp(m.code, "DEVICE_MEMORY") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "bytes");
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_status(&r, &m) == 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "devmem_retries", -1), 1);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "evictions", -1), 1); /* the small one, to retry */
    CHECK_EQ_INT(kd_rpc_int(m.result, "matrices", NULL, -1), 1);
    kd_rpc_msg_free(&m);

    /* a vector the device refuses: x of 20000 float64 values (160 kB) */
    int32_t ptr[2] = {0, 1}, idx[1] = {19999};
    double val[1] = {2.0};
    kd_csr_t *wide = NULL;
    kd_err_t err = {0};
    REQUIRE(kd_csr_from_csr_arrays(1, 20000, 1, ptr, KD_DTYPE_I32, idx, KD_DTYPE_I32, val,
                                   KD_DTYPE_F64, KD_DTYPE_F64, NULL, &wide, &err) == KD_OK);
    char wide_id[33];
    REQUIRE(kd_rpc_put(&r, 3, wide, NULL, -1, wide_id, &m) == 0);
    kd_rpc_msg_free(&m);
    double *x = calloc(20000, sizeof(double)), y[1];
    CHECK(kd_rpc_spmv(&r, 4, wide_id, x, 20000, y, 1, &m) != 0);
    CHECK_MSG(strcmp(m.code, "DEVICE_MEMORY") == 0, "%s %s", m.code, m.message);
    kd_rpc_msg_free(&m);
    free(x);

    /* still serving, and the evicted matrix reloads */
    double xs[400], ys[400], ref[400];
    for (int k = 0; k < 400; k++)
        xs[k] = kd_test_rand_double(-1, 1);
    kd_csr_spmv_ref(small, xs, 1.0, 0.0, ref);
    CHECK(kd_rpc_spmv(&r, 5, small_id, xs, 400, ys, 400, &m) == 0);
    kd_rpc_msg_free(&m);
    CHECK(rel_diff(ys, ref, 400) <= 1e-12);
    kd_rpc_close(&r);
    kd_csr_free(small);
    kd_csr_free(large);
    kd_csr_free(wide);
    CHECK_EQ_INT(kd_daemon_stop(&d2), 0);
}

static int file_exists(const kd_daemon_t *dd, const char *id)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/matrices/%s.kdm", dd->state_dir, id);
    FILE *f = fopen(path, "rb");
    if (f != NULL)
        fclose(f);
    return f != NULL;
}

static void test_disk_limit(void)
{
    /* The four matrices share one pattern: one pattern file (a 128-byte header, indptr and
     * indices), charged to the first, and a values file each (a 2048-byte header, the values);
     * room for the pattern and two and a half values files. */
    const size_t pattern = 128 + ((size_t)mats[0]->rows + 1) * 4 + (size_t)mats[0]->nnz * 4;
    const size_t file = 2048 + (size_t)mats[0]->nnz * 8;
    char limit[32];
    snprintf(limit, sizeof(limit), "%zu", pattern + 2 * file + file / 2);
    kd_daemon_t d2;
    const char *extra[] = {"--state-max-bytes", limit, NULL};
    REQUIRE(kd_daemon_start(&d2, extra) == 0);
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d2.port) == 0);
    kd_rpc_msg_t m;
    char id[NMAT][33];
    memset(id, 0, sizeof(id));
    REQUIRE(kd_rpc_put(&r, 1, mats[0], NULL, 1, id[0], &m) == 0); /* pinned */
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_put(&r, 2, mats[1], NULL, -1, id[1], &m) == 0);
    kd_rpc_msg_free(&m);
    CHECK(file_exists(&d2, id[0]) && file_exists(&d2, id[1]));
    /* a third: the unpinned one goes (file and matrix), the pinned one stays */
    REQUIRE(kd_rpc_put(&r, 3, mats[2], NULL, -1, id[2], &m) == 0);
    kd_rpc_msg_free(&m);
    CHECK(file_exists(&d2, id[0]));
    CHECK(!file_exists(&d2, id[1]));
    CHECK(file_exists(&d2, id[2]));
    REQUIRE(kd_rpc_id_call(&r, 4, "matrix.info", id[1], -1, &m) == KD_RPC_RESPONSE);
    CHECK(strcmp(m.code, "NOT_FOUND") == 0);
    kd_rpc_msg_free(&m);
    REQUIRE(kd_rpc_status(&r, &m) == 0);
    CHECK_EQ_INT(kd_rpc_int(m.result, "cache", "disk_evictions", -1), 1);
    CHECK_EQ_INT(kd_rpc_int(m.result, "matrices", NULL, -1), 2);
    /* what is on disk, the pattern file counted once */
    CHECK((size_t)kd_rpc_int(m.result, "state_bytes", NULL, -1) == pattern + 2 * file);
    kd_rpc_msg_free(&m);
    /* with the other one pinned too, nothing can make room */
    REQUIRE(kd_rpc_id_call(&r, 5, "matrix.pin", id[2], 1, &m) == KD_RPC_RESPONSE);
    kd_rpc_msg_free(&m);
    CHECK(kd_rpc_put(&r, 6, mats[3], NULL, -1, id[3], &m) != 0);
    CHECK_MSG(strcmp(m.code, "TOO_LARGE") == 0, "%s %s", m.code, m.message);
    CHECK_STR_CONTAINS(m.message, "--state-max-bytes");
    CHECK_STR_CONTAINS(m.message, "pinned");
    kd_rpc_msg_free(&m);
    CHECK(file_exists(&d2, id[0]) && file_exists(&d2, id[2]));
    CHECK_EQ_INT(id[3][0], '\0'); /* no id came back */
    /* a matrix larger than the whole limit */
    kd_csr_t *big = kd_matgen_laplacian_2d(150, 150, KD_DTYPE_F64);
    char big_id[33];
    CHECK(kd_rpc_put(&r, 7, big, NULL, -1, big_id, &m) != 0);
    CHECK(strcmp(m.code, "TOO_LARGE") == 0);
    kd_rpc_msg_free(&m);
    kd_csr_free(big);
    kd_rpc_close(&r);
    CHECK_EQ_INT(kd_daemon_stop(&d2), 0);
}

int main(void)
{
    kd_test_seed();
    size_t rows = GRID * GRID;
    for (int i = 0; i < NMAT; i++) {
        mats[i] = kd_matgen_laplacian_2d(GRID, GRID, KD_DTYPE_F64);
        double *v = mats[i]->values;
        for (int64_t k = 0; k < mats[i]->nnz; k++)
            v[k] *= (double)(i + 1); /* four different matrices of one size */
    }
    memset(&sim, 0, sizeof(sim));
    sim.size = (rows + 1) * 4 + (size_t)mats[0]->nnz * 12;
    sim.vectors = 2 * rows * 8;
    sim.budget = 2 * sim.size + sim.vectors + 1000; /* two matrices and one spmv's vectors */
    char budget[32];
    snprintf(budget, sizeof(budget), "%zu", sim.budget);
    const char *extra[] = {"--device-memory", budget, "--format", "csr_scalar", NULL};
    if (kd_daemon_start(&d, extra) != 0)
        return 1;
    RUN(test_lru_eviction_in_turn);
    RUN(test_pinned_stays_resident);
    RUN(test_driver_refusal);
    RUN(test_disk_limit);
    for (int i = 0; i < NMAT; i++)
        kd_csr_free(mats[i]);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    return kd_test_finish();
}
