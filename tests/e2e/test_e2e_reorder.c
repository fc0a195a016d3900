/*
 * Reordering end to end: a real krylovd on loopback. A randomly scrambled 2-D Laplacian is put
 * with reorder "rcm": matrix.put and matrix.info say rcm with the bandwidth before and after, spmv
 * and solve answer in the caller's order (against the CPU on the original matrix), the content id
 * is the original matrix's (the same matrix put with reorder "none" is the same matrix), and after
 * a restart the matrix comes back with the same reordering and the same answers (the permutation
 * is recomputed at reload). Bad input: reorder "bogus" is BAD_REQUEST naming the accepted values,
 * "rcm" on a non-square matrix is BAD_REQUEST, "metis" on a build without METIS is UNSUPPORTED.
 */
#include "common/reorder.h"
#include "kd_daemon.h"
#include "kd_rpc.h"
#include "kd_solver_test.h"

static kd_daemon_t d;

/* A put with `reorder`; the reply in m (free it). */
static int put(kd_rpc_t *r, uint64_t msgid, const kd_csr_t *A, const char *reorder, kd_rpc_msg_t *m)
{
    kd_writer_t w;
    kd_rpc_write_put_reorder(&w, msgid, A, NULL, -1, reorder);
    return kd_rpc_call(r, &w, msgid, 120000, m);
}

static void check_info(const msgpack_object *res, int64_t before, int64_t after)
{
    CHECK(kd_obj_str_eq(kd_obj_get(res, "reorder"), "rcm"));
    CHECK_EQ_INT(kd_rpc_int(res, "bandwidth", "before", -1), before);
    CHECK_EQ_INT(kd_rpc_int(res, "bandwidth", "after", -1), after);
}

/* spmv and solve through the server against the CPU on A. */
static void check_answers(kd_rpc_t *r, const char *id, const kd_csr_t *A)
{
    int64_t n = A->rows;
    double *x = malloc((size_t)n * sizeof(double)), *y = malloc((size_t)n * sizeof(double));
    double *ref = calloc((size_t)n, sizeof(double));
    for (int64_t i = 0; i < n; i++)
        x[i] = kd_test_rand_double(-1, 1);
    kd_rpc_msg_t m;
    CHECK_MSG(kd_rpc_spmv(r, 30, id, x, n, y, n, &m) == 0, "spmv: %s", m.message);
    kd_rpc_msg_free(&m);
    kd_csr_spmv_ref(A, x, 1.0, 0.0, ref);
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(y[i] - ref[i]));
    CHECK_MSG(worst <= 1e-12, "spmv differs by %.3g", worst);

    kd_writer_t w;
    kd_rpc_begin(&w, 31, "solve", 3);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, (size_t)n * sizeof(double));
    kd_w_kv_double(&w, "rtol", 1e-10);
    REQUIRE(kd_rpc_call(r, &w, 31, 120000, &m) == KD_RPC_RESPONSE);
    CHECK_MSG(m.result != NULL, "solve: %s %s", m.code, m.message);
    if (m.result != NULL && kd_rpc_vector(m.result, "x", y, n) == 0) {
        CHECK(kd_obj_str_eq(kd_obj_get(m.result, "status"), "converged"));
        for (int64_t i = 0; i < n; i++)
            ref[i] = x[i];
        kd_csr_spmv_ref(A, y, -1.0, 1.0, ref); /* b - A x with the original matrix */
        double rr = 0.0, bb = 0.0;
        for (int64_t i = 0; i < n; i++) {
            rr += ref[i] * ref[i];
            bb += x[i] * x[i];
        }
        CHECK_MSG(sqrt(rr / bb) <= 1e-10 * (1 + 1e-6), "true relative residual %.3g",
                  sqrt(rr / bb));
    } else {
        CHECK(0);
    }
    kd_rpc_msg_free(&m);
    free(x);
    free(y);
    free(ref);
}

static void test_reorder_over_the_wire(void)
{
    kd_csr_t *A = kd_test_scramble(kd_test_laplacian_2d(40, 30));
    kd_reorder_shape_t shape;
    kd_reorder_measure(A, NULL, &shape);
    kd_rpc_t r;
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    kd_rpc_msg_t m;
    REQUIRE(put(&r, 1, A, "rcm", &m) == KD_RPC_RESPONSE);
    REQUIRE(m.result != NULL);
    char id[33] = "";
    REQUIRE(kd_obj_str_copy(kd_obj_get(m.result, "id"), id, sizeof(id)) == 0);
    int64_t after = kd_rpc_int(m.result, "bandwidth", "after", -1);
    fprintf(stderr, "  bandwidth %lld -> %lld\n", (long long)shape.bandwidth, (long long)after);
    check_info(m.result, shape.bandwidth, after);
    CHECK(after > 0 && after <= 2 * 30);
    kd_rpc_msg_free(&m);
    check_answers(&r, id, A);

    /* the id is the original matrix's: the same matrix again is the same entry */
    char again[33] = "";
    REQUIRE(put(&r, 2, A, "none", &m) == KD_RPC_RESPONSE && m.result != NULL);
    REQUIRE(kd_obj_str_copy(kd_obj_get(m.result, "id"), again, sizeof(again)) == 0);
    CHECK(strcmp(id, again) == 0);
    kd_rpc_msg_free(&m);

    /* bad input */
    CHECK(put(&r, 3, A, "bogus", &m) == KD_RPC_RESPONSE);
    CHECK(strcmp(m.code, "BAD_REQUEST") == 0);
    CHECK_STR_CONTAINS(m.message, "none | rcm | metis | auto");
    kd_rpc_msg_free(&m);
    kd_csr_t *wide = kd_test_random_matrix(20, 30, NULL, 3);
    CHECK(put(&r, 4, wide, "rcm", &m) == KD_RPC_RESPONSE);
    CHECK(strcmp(m.code, "BAD_REQUEST") == 0);
    CHECK_STR_CONTAINS(m.message, "square");
    kd_rpc_msg_free(&m);
    if (!kd_reorder_available(KD_REORDER_METIS)) {
        CHECK(put(&r, 5, wide, "metis", &m) == KD_RPC_RESPONSE);
        CHECK(strcmp(m.code, "BAD_REQUEST") == 0 || strcmp(m.code, "UNSUPPORTED") == 0);
        kd_rpc_msg_free(&m);
    }
    kd_csr_free(wide);
    kd_rpc_close(&r);

    /* a restart keeps the reordering; the first use reloads and recomputes the permutation */
    CHECK_EQ_INT(kd_daemon_signal(&d, SIGTERM), 0);
    REQUIRE(kd_daemon_restart(&d, NULL) == 0);
    REQUIRE(kd_rpc_connect(&r, d.port) == 0);
    REQUIRE(kd_rpc_id_call(&r, 6, "matrix.info", id, -1, &m) == KD_RPC_RESPONSE && m.result);
    check_info(m.result, shape.bandwidth, after);
    kd_rpc_msg_free(&m);
    check_answers(&r, id, A);
    REQUIRE(kd_rpc_id_call(&r, 7, "matrix.info", id, -1, &m) == KD_RPC_RESPONSE && m.result);
    CHECK(kd_rpc_int(m.result, "resident", NULL, -1) == 1);
    check_info(m.result, shape.bandwidth, after);
    kd_rpc_msg_free(&m);
    kd_rpc_close(&r);
    kd_csr_free(A);
}

int main(void)
{
    kd_test_seed();
    if (kd_daemon_start(&d, NULL) != 0)
        return 1;
    RUN(test_reorder_over_the_wire);
    CHECK_EQ_INT(kd_daemon_stop(&d), 0);
    return kd_test_finish();
}
