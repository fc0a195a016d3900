/*
 * Writes the seed corpus of fuzz_request (tests/fuzz/corpus/request/): one well-formed request
 * per method and upload form (auth too), a few near misses, and requests glued together. Run from
 * the fuzz build: `build-fuzz/bin/gen_request_corpus tests/fuzz/corpus/request`.
 */
#include "protocol/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *dir;

static void save(const char *name, kd_writer_t *w)
{
    size_t len;
    void *bytes = kd_writer_release(w, &len);
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(bytes, 1, len, f) != len) {
        perror(path);
        exit(1);
    }
    fclose(f);
    free(bytes);
}

static void begin(kd_writer_t *w, uint64_t msgid, const char *method, uint32_t n)
{
    kd_writer_init(w);
    kd_w_request_begin(w, msgid, method);
    kd_w_array(w, 1);
    kd_w_map(w, n);
}

/* Issue 33: small requests declaring sizes near and past 2^31, 2^32 and 2^63 (test_py_sizes.py
 * sends the same to a real server); the fuzzer mutates the integers from here. */
static void save_extreme_sizes(const char *id, const double *x)
{
    static const int32_t zero[1] = {0};
    static const double one[1] = {1};
    kd_writer_t w;

    begin(&w, 20, "matrix.put", 5); /* issue 33's 73-byte put */
    kd_w_kv_int(&w, "rows", INT32_MAX - 1);
    kd_w_kv_int(&w, "cols", INT32_MAX);
    kd_w_kv_bin(&w, "row", zero, sizeof(zero));
    kd_w_kv_bin(&w, "col", zero, sizeof(zero));
    kd_w_kv_bin(&w, "values", one, sizeof(one));
    save("size_put_coo_2e31", &w);

    begin(&w, 21, "matrix.put", 1);
    kd_w_kv_str(&w, "mtx",
                "%%MatrixMarket matrix coordinate real general\n16777216 16777216 1\n"
                "1 1 1.0\n");
    save("size_put_mtx_2e24", &w);

    begin(&w, 22, "matrix.put", 6);
    kd_w_kv_int(&w, "rows", 1);
    kd_w_kv_int(&w, "cols", 1);
    kd_w_kv_int(&w, "batch", INT64_MAX / 2);
    kd_w_kv_bin(&w, "indptr", (const int32_t[2]){0, 1}, 2 * sizeof(int32_t));
    kd_w_kv_bin(&w, "indices", zero, sizeof(zero));
    kd_w_kv_bin(&w, "values", one, sizeof(one));
    save("size_put_batch_2e62", &w);

    begin(&w, 23, "spmv", 3);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "x", x, 3 * sizeof(double));
    kd_w_kv_int(&w, "ncols", (int64_t)1 << 62);
    save("size_spmv_ncols_2e62", &w);

    begin(&w, 24, "solve", 7);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, 3 * sizeof(double));
    kd_w_kv_uint(&w, "nrhs", UINT64_MAX);
    kd_w_kv_int(&w, "maxiter", INT64_MAX);
    kd_w_kv_int(&w, "restart", (int64_t)UINT32_MAX + 1);
    kd_w_kv_int(&w, "check_every", INT64_MIN);
    kd_w_kv_bool(&w, "history", 1);
    save("size_solve_int64", &w);

    begin(&w, 25, "solve", 5);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, 3 * sizeof(double));
    kd_w_kv_str(&w, "preconditioner", "amg");
    kd_w_key(&w, "preconditioner_options");
    kd_w_map(&w, 3);
    kd_w_kv_double(&w, "max_levels", 4294967296.0);
    kd_w_kv_double(&w, "coarse_size", 1e300);
    kd_w_kv_int(&w, "block_size", INT32_MIN);
    kd_w_kv_bool(&w, "history", 1);
    save("size_solve_amg_levels", &w);

    begin(&w, 26, "solve", 3);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, 3 * sizeof(double));
    kd_w_key(&w, "maxiter");
    kd_w_array(&w, 3);
    kd_w_int(&w, INT64_MAX);
    kd_w_int(&w, (int64_t)1 << 31);
    kd_w_int(&w, -1);
    save("size_solve_maxiter_array", &w);

    begin(&w, 27, "solve.batch", 4);
    kd_w_key(&w, "items");
    kd_w_array(&w, 2);
    for (int i = 0; i < 2; i++) {
        kd_w_map(&w, 2);
        kd_w_kv_str(&w, "id", id);
        kd_w_kv_bin(&w, "b", x, 3 * sizeof(double));
    }
    kd_w_kv_int(&w, "maxiter", INT64_MAX);
    kd_w_kv_int(&w, "restart", INT32_MAX);
    kd_w_kv_bool(&w, "history", 1);
    save("size_solve_batch_int64", &w);

    /* an items array declaring 2^32 - 1 maps in a few bytes: refused by its declared size */
    begin(&w, 28, "solve.batch", 1);
    kd_w_key(&w, "items");
    kd_w_array(&w, UINT32_MAX);
    kd_w_map(&w, 0);
    save("size_solve_batch_declared", &w);

    begin(&w, 29, "job.cancel", 2);
    kd_w_kv_int(&w, "msgid", INT64_MIN);
    kd_w_kv_int(&w, "timeout_ms", INT64_MAX);
    save("size_cancel_int64", &w);
}

/* A region reference {shm, offset, bytes} under key. */
static void region(kd_writer_t *w, const char *key, int64_t id, int64_t offset, int64_t bytes)
{
    kd_w_str(w, key);
    kd_w_map(w, 3);
    kd_w_kv_int(w, "shm", id);
    kd_w_kv_int(w, "offset", offset);
    kd_w_kv_int(w, "bytes", bytes);
}

/* Issue 35: shared-memory registration and region references (the fuzzer mutates the integers:
 * misaligned offsets, offset + bytes past int64). */
static void save_shm(const char *id)
{
    kd_writer_t w;
    begin(&w, 30, "shm.register", 2);
    kd_w_kv_int(&w, "bytes", 1 << 20);
    kd_w_kv_str(&w, "name", "seed");
    save("shm_register", &w);

    begin(&w, 31, "shm.unregister", 1);
    kd_w_kv_int(&w, "shm", 1);
    save("shm_unregister", &w);

    begin(&w, 32, "spmv", 3);
    kd_w_kv_str(&w, "id", id);
    region(&w, "x", 1, 0, 16);
    region(&w, "out", 1, 64, 16);
    save("spmv_shm", &w);

    begin(&w, 33, "solve", 4);
    kd_w_kv_str(&w, "id", id);
    region(&w, "b", 1, 0, 16);
    region(&w, "x0", 1, 16, 16);
    region(&w, "out", 2, 0, 16);
    save("solve_shm", &w);

    begin(&w, 34, "spmv", 2);
    kd_w_kv_str(&w, "id", id);
    region(&w, "x", 1, INT64_MAX - 7, 16); /* aligned; offset + bytes overflows int64 */
    save("spmv_shm_overflow", &w);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_request_corpus DIR\n");
        return 2;
    }
    dir = argv[1];
    static const char id[] = "0123456789abcdef0123456789ABCDEF";
    int32_t ptr[4] = {0, 2, 3, 4}, idx[4] = {0, 2, 1, 0};
    double val[4] = {4, -1, 4, 2}, x[3] = {1, 2, 3};
    kd_writer_t w;

    begin(&w, 1, "matrix.put", 8);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_bin(&w, "indptr", ptr, sizeof(ptr));
    kd_w_kv_bin(&w, "indices", idx, sizeof(idx));
    kd_w_kv_bin(&w, "values", val, sizeof(val));
    kd_w_kv_str(&w, "name", "seed");
    kd_w_kv_bool(&w, "pin", 1);
    kd_w_kv_int(&w, "timeout_ms", 1000);
    save("put_csr", &w);

    begin(&w, 2, "matrix.put", 7);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_str(&w, "index_dtype", "int32");
    kd_w_kv_str(&w, "dtype", "float32");
    kd_w_str(&w, "row");
    kd_w_array(&w, 3);
    kd_w_int(&w, 0);
    kd_w_int(&w, 1);
    kd_w_int(&w, 2);
    kd_w_str(&w, "col");
    kd_w_array(&w, 3);
    kd_w_int(&w, 2);
    kd_w_int(&w, 1);
    kd_w_int(&w, 0);
    kd_w_str(&w, "values");
    kd_w_array(&w, 3);
    kd_w_double(&w, 1.5);
    kd_w_int(&w, 2);
    kd_w_double(&w, -3.25);
    save("put_coo_arrays", &w);

    begin(&w, 3, "matrix.put", 2);
    kd_w_kv_str(&w, "mtx",
                "%%MatrixMarket matrix coordinate real symmetric\n2 2 2\n1 1 4\n2 1 1\n");
    kd_w_kv_str(&w, "format", "csr_scalar");
    save("put_mtx", &w);

    begin(&w, 4, "spmv", 6);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "x", x, sizeof(x));
    kd_w_kv_bin(&w, "y", x, sizeof(x));
    kd_w_kv_double(&w, "alpha", 2.0);
    kd_w_kv_double(&w, "beta", -0.5);
    kd_w_kv_str(&w, "dtype", "f8");
    save("spmv", &w);

    begin(&w, 5, "solve", 10);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, sizeof(x));
    kd_w_kv_bin(&w, "x0", x, sizeof(x));
    kd_w_kv_str(&w, "method", "pcg");
    kd_w_kv_str(&w, "preconditioner", "jacobi");
    kd_w_kv_double(&w, "rtol", 1e-8);
    kd_w_kv_int(&w, "maxiter", 100);
    kd_w_kv_int(&w, "check_every", 4);
    kd_w_kv_bool(&w, "history", 1);
    kd_w_kv_bool(&w, "progress", 1);
    save("solve", &w);

    begin(&w, 6, "solve", 3);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_int(&w, "nrhs", 3);
    kd_w_str(&w, "b");
    kd_w_array(&w, 3);
    kd_w_double(&w, 1);
    kd_w_double(&w, 2);
    kd_w_double(&w, 3);
    save("solve_nrhs", &w);

    begin(&w, 7, "solve", 5);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, sizeof(x));
    kd_w_kv_str(&w, "method", "gmres");
    kd_w_kv_str(&w, "preconditioner", "jacobi");
    kd_w_kv_int(&w, "restart", 30);
    save("solve_restart", &w);

    begin(&w, 14, "matrix.multiply", 8);
    kd_w_kv_str(&w, "a", id);
    kd_w_kv_str(&w, "b", "fedcba9876543210FEDCBA9876543210");
    kd_w_kv_bool(&w, "transpose_a", 1);
    kd_w_kv_str(&w, "name", "AtB");
    kd_w_kv_str(&w, "format", "csr_vector");
    kd_w_kv_str(&w, "select", "heuristic");
    kd_w_kv_str(&w, "reorder", "none");
    kd_w_kv_bool(&w, "pin", 0);
    save("multiply", &w);

    begin(&w, 7, "matrix.info", 1);
    kd_w_kv_str(&w, "id", id);
    save("info", &w);
    begin(&w, 8, "matrix.pin", 2);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bool(&w, "pinned", 0);
    save("pin", &w);
    begin(&w, 9, "matrix.drop", 1);
    kd_w_kv_str(&w, "id", id);
    save("drop", &w);
    begin(&w, 18, "matrix.share", 2);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_str(&w, "user", "bob");
    save("share", &w);
    /* a batch of two systems of the pattern, and a solve with per-system arrays */
    double vals2[8] = {4, -1, 4, 2, 5, -2, 5, 3};
    begin(&w, 19, "matrix.put", 6);
    kd_w_kv_int(&w, "batch", 2);
    kd_w_kv_int(&w, "rows", 3);
    kd_w_kv_int(&w, "cols", 3);
    kd_w_kv_bin(&w, "indptr", ptr, sizeof(ptr));
    kd_w_kv_bin(&w, "indices", idx, sizeof(idx));
    kd_w_kv_bin(&w, "values", vals2, sizeof(vals2));
    save("put_batch", &w);
    begin(&w, 20, "solve", 5);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", vals2, 6 * sizeof(double));
    kd_w_key(&w, "rtol");
    kd_w_array(&w, 2);
    kd_w_double(&w, 1e-8);
    kd_w_double(&w, 1e-6);
    kd_w_key(&w, "maxiter");
    kd_w_array(&w, 2);
    kd_w_int(&w, 100);
    kd_w_int(&w, 7);
    kd_w_kv_str(&w, "method", "bicgstab");
    save("solve_batch_arrays", &w);
    /* solve.batch: items of their own matrices, one with x0, one b as a plain array */
    begin(&w, 21, "solve.batch", 4);
    kd_w_str(&w, "items");
    kd_w_array(&w, 2);
    kd_w_map(&w, 3);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "b", x, sizeof(x));
    kd_w_kv_bin(&w, "x0", x, sizeof(x));
    kd_w_map(&w, 2);
    kd_w_kv_str(&w, "id", id);
    kd_w_key(&w, "b");
    kd_w_array(&w, 2);
    kd_w_double(&w, 1.0);
    kd_w_double(&w, 2.0);
    kd_w_kv_str(&w, "method", "gmres");
    kd_w_kv_str(&w, "preconditioner", "jacobi");
    kd_w_kv_double(&w, "rtol", 1e-9);
    save("solve_many", &w);
    begin(&w, 10, "job.cancel", 1);
    kd_w_kv_uint(&w, "msgid", 5);
    save("cancel", &w);

    kd_writer_init(&w);
    kd_w_request_begin(&w, 11, "server.status");
    kd_w_array(&w, 0);
    kd_w_request_begin(&w, 12, "matrix.list");
    kd_w_nil(&w);
    save("status_then_list", &w);

    begin(&w, 13, "spmv", 2);
    kd_w_kv_str(&w, "id", id);
    kd_w_kv_bin(&w, "x", x, 13); /* not whole float64 values */
    save("bad_bin_length", &w);

    begin(&w, 14, "auth", 2);
    kd_w_kv_str(&w, "name", "alice");
    kd_w_kv_str(&w, "token", "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0");
    save("auth", &w);

    /* auth, then a request that needs it, in one read (the server gates the second) */
    begin(&w, 15, "auth", 2);
    kd_w_kv_str(&w, "name", "bob");
    kd_w_kv_str(&w, "token", "");
    kd_w_request_begin(&w, 16, "matrix.list");
    kd_w_array(&w, 0);
    save("auth_then_list", &w);

    begin(&w, 17, "auth", 2);
    kd_w_kv_str(&w, "name", "carol");
    kd_w_kv_int(&w, "token", 1234); /* a near miss: not a str */
    save("auth_bad_token", &w);

    kd_writer_init(&w);
    kd_w_array(&w, 3);
    kd_w_int(&w, 2);
    kd_w_str(&w, "solve.progress");
    kd_w_array(&w, 0);
    save("notification", &w);

    save_extreme_sizes(id, x);
    save_shm(id);
    return 0;
}
