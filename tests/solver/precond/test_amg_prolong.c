/*
 * The smoothed prolongator and its transpose on the device (solver/precond/amg/prolong.c,
 * kernels/precond/amg/amg.cl's kd_amg_agg_size .. kd_amg_tent_smooth) against the host's
 * kd_amg_prolongator on the same aggregates: the pattern (row pointers, columns) exactly, every
 * value to rounding (a bound of a few ulps of the row's magnitude: the device sums A T's products
 * before scaling, the host scales each). Fresh random matrices and random omega, aggregates from
 * the host's greedy and from the device's aggregation, with a threshold that leaves nodes in no
 * aggregate (empty rows of P), rows with a diagonal alone, one dense row (an arrow), a 2 x 2,
 * float32. `test_amg_prolong --small`: small cases for Oclgrind.
 */
#include "kd_solver_test.h"
#include "solver/precond/amg/amg.h"

static kd_ocl_t *ocl;

/* R = P^T on the device against kd_csr_transpose of the same P (dev, its download), exactly, and
 * the map against the walk that fills R's rows in ascending P row. */
static void compare_transpose(const char *name, const kd_csr_device_t *dP, const kd_csr_t *dev)
{
    kd_err_t err = {0};
    kd_csr_t *ref = NULL, *got = NULL;
    kd_csr_device_t dR = {0};
    REQUIRE(kd_csr_transpose(dev, &ref, &err) == KD_OK);
    int32_t *map = malloc((size_t)dev->nnz * sizeof(int32_t) + 4);
    memset(map, 0x5a, (size_t)dev->nnz * sizeof(int32_t) + 4);
    const int rc = kd_amg_transpose_device(ocl, dP, &dR, map, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", name, err.message);
    if (rc == KD_OK)
        REQUIRE(kd_csr_device_download(ocl, &dR, &got, &err) == KD_OK);
    kd_csr_device_release(&dR);
    int64_t differ = 0;
    if (got != NULL) {
        CHECK(got->rows == ref->rows && got->cols == ref->cols && got->nnz == ref->nnz);
        const size_t v = kd_dtype_size(ref->dtype);
        differ += memcmp(got->indptr, ref->indptr, ((size_t)ref->rows + 1) * sizeof(int32_t)) != 0;
        differ += memcmp(got->indices, ref->indices, (size_t)ref->nnz * sizeof(int32_t)) != 0;
        differ += memcmp(got->values, ref->values, (size_t)ref->nnz * v) != 0;
        int32_t *fill = malloc(((size_t)ref->rows + 1) * sizeof(int32_t));
        memcpy(fill, ref->indptr, ((size_t)ref->rows + 1) * sizeof(int32_t));
        for (int64_t i = 0; i < dev->rows; i++)
            for (int32_t k = dev->indptr[i]; k < dev->indptr[i + 1]; k++)
                differ += map[fill[dev->indices[k]]++] != k;
        free(fill);
        CHECK(map[dev->nnz] == 0x5a5a5a5a);
    }
    CHECK_MSG(differ == 0, "%s: R or its map differs from the host's (%lld)", name,
              (long long)differ);
    free(map);
    kd_csr_free(ref);
    kd_csr_free(got);
}

/* Device P against host P for aggregates agg of A. */
static void compare(const char *name, const kd_csr_t *A, const kd_csr_device_t *dA,
                    const int32_t *agg, int64_t naggs, double omega)
{
    kd_err_t err = {0};
    kd_csr_t *host = NULL, *dev = NULL;
    kd_csr_device_t dP = {0};
    REQUIRE(kd_amg_prolongator(A, agg, naggs, omega, &host, &err) == KD_OK);
    const int rc = kd_amg_prolongator_device(ocl, dA, agg, naggs, omega, &dP, &err);
    CHECK_MSG(rc == KD_OK, "%s: %s", name, err.message);
    if (rc != KD_OK) {
        kd_csr_free(host);
        return;
    }
    REQUIRE(kd_csr_device_download(ocl, &dP, &dev, &err) == KD_OK);
    compare_transpose(name, &dP, dev);
    kd_csr_device_release(&dP);
    CHECK(dev->rows == host->rows && dev->cols == host->cols);
    CHECK_MSG(dev->nnz == host->nnz, "%s: nnz %lld on the device, %lld on the host", name,
              (long long)dev->nnz, (long long)host->nnz);
    int64_t pattern = 0;
    double worst = 0.0; /* in units of the row's bound */
    const double eps = A->dtype == KD_DTYPE_F32 ? 6e-8 : 1.2e-16;
    for (int64_t i = 0; i < A->rows && dev->nnz == host->nnz; i++) {
        pattern += dev->indptr[i + 1] != host->indptr[i + 1];
        double aii = 0.0, sum = 0.0;
        for (int32_t k = A->indptr[i]; k < A->indptr[i + 1]; k++) {
            sum += fabs(kd_csr_value(A, k));
            if (A->indices[k] == i)
                aii = kd_csr_value(A, k);
        }
        const int64_t len = A->indptr[i + 1] - A->indptr[i];
        const double bound = eps * (double)(len + 4) * (1.0 + fabs(omega / aii) * sum);
        for (int32_t k = host->indptr[i]; k < host->indptr[i + 1] && k < dev->indptr[i + 1]; k++) {
            pattern += dev->indices[k] != host->indices[k];
            const double d = fabs(kd_csr_value(dev, k) - kd_csr_value(host, k));
            worst = fmax(worst, d / bound);
        }
    }
    printf("%-34s %s n=%-6lld aggregates=%-5lld P nnz=%-7lld pattern differs %lld, worst value "
           "%.2f of its bound\n",
           name, kd_dtype_name(A->dtype), (long long)A->rows, (long long)naggs,
           (long long)host->nnz, (long long)pattern, worst);
    CHECK_MSG(pattern == 0, "%s: %lld pattern differences", name, (long long)pattern);
    CHECK_MSG(worst <= 1.0, "%s: a value off by %.2f of its bound", name, worst);
    kd_csr_free(host);
    kd_csr_free(dev);
}

/* Both aggregations of A (owned), each compared. */
static void check_prolongator(const char *name, kd_csr_t *A, double threshold)
{
    kd_err_t err = {0};
    kd_csr_device_t dA = {0};
    REQUIRE(kd_csr_device_upload(ocl, A, &dA, &err) == KD_OK);
    int32_t *agg = malloc((size_t)A->rows * sizeof(int32_t) + 4);
    const double omega = kd_test_rand_double(0.3, 0.9);
    for (int device = 0; device < 2; device++) {
        int64_t naggs = 0;
        const int rc =
            device ? kd_amg_aggregate_device(ocl, A, &dA, threshold, agg, &naggs, NULL, &err)
                   : kd_amg_aggregate(A, threshold, 1, agg, &naggs, &err);
        REQUIRE(rc == KD_OK);
        char label[96];
        snprintf(label, sizeof(label), "%s (%s)", name, device ? "device agg" : "host agg");
        if (naggs > 0)
            compare(label, A, &dA, agg, naggs, omega);
    }
    free(agg);
    kd_csr_device_release(&dA);
    kd_csr_free(A);
}

static kd_csr_t *two_by_two(void)
{
    kd_test_coo_t c = {.rows = 2, .cols = 2};
    kd_test_coo_add(&c, 0, 0, 2.0);
    kd_test_coo_add(&c, 0, 1, -1.0);
    kd_test_coo_add(&c, 1, 0, -1.0);
    kd_test_coo_add(&c, 1, 1, 2.0);
    return kd_test_coo_finish(&c);
}

int main(int argc, char **argv)
{
    kd_test_seed();
    ocl = kd_test_open_device();
    if (ocl == NULL)
        return 1;
    const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    check_prolongator("lap2d scrambled", kd_test_scramble(kd_test_laplacian_2d(small ? 11 : 41, 9)),
                      0.0);
    check_prolongator("random spd", kd_test_spd_matrix(small ? 120 : 2500, 8, 0.5), 0.0);
    check_prolongator("random spd", kd_test_spd_matrix(small ? 120 : 2500, 6, 0.5), 0.15);
    check_prolongator("diagonal-only rows", kd_test_lonely_rows(small ? 80 : 1500), 0.0);
    check_prolongator("arrow (one dense row)", kd_test_arrow_matrix(small ? 60 : 900), 0.0);
    check_prolongator("2x2", two_by_two(), 0.0);
    kd_dtype_t dt[2];
    if (!small && (kd_test_dtypes(ocl, dt) == 2 || dt[0] == KD_DTYPE_F32))
        check_prolongator("random spd", kd_test_as_float32(kd_test_spd_matrix(1500, 8, 0.5)), 0.0);
    kd_ocl_close(ocl);
    return kd_test_finish();
}
