/*
 * Reordering on the host (common/reorder.c): reverse Cuthill-McKee gives a permutation (every
 * index once) that brings a randomly permuted banded matrix or 2-D Laplacian back to its band,
 * handles disconnected components, empty rows, 1x1 and 0x0, symmetric and nonsymmetric patterns,
 * refuses non-square matrices; P A P^T matches a dense reference exactly and is canonical; the
 * bandwidth measured through the inverse permutation equals the built matrix's.
 */
#include "common/reorder.h"
#include "kd_solver_test.h"

static int is_permutation(const int32_t *p, int64_t n)
{
    unsigned char *seen = calloc((size_t)n + 1, 1);
    int ok = 1;
    for (int64_t i = 0; i < n && ok; i++) {
        ok = p[i] >= 0 && p[i] < n && !seen[p[i]];
        if (ok)
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static int64_t bandwidth(const kd_csr_t *m)
{
    kd_reorder_shape_t s;
    kd_reorder_measure(m, NULL, &s);
    return s.bandwidth;
}

/* RCM of csr: a permutation; returns P csr P^T's bandwidth (and checks the measure agrees). */
static int64_t rcm_bandwidth(const kd_csr_t *csr)
{
    kd_err_t err = {0};
    int32_t *perm = NULL;
    kd_csr_t *b = NULL;
    MUST(kd_reorder_rcm(csr, &perm, &err) == KD_OK);
    CHECK(is_permutation(perm, csr->rows));
    MUST(kd_reorder_apply(csr, perm, &b, &err) == KD_OK);
    int32_t *iperm = malloc((size_t)csr->rows * sizeof(int32_t) + 4);
    kd_reorder_invert(perm, csr->rows, iperm);
    kd_reorder_shape_t via, built;
    kd_reorder_measure(csr, iperm, &via);
    kd_reorder_measure(b, NULL, &built);
    CHECK_EQ_INT(via.bandwidth, built.bandwidth);
    CHECK_EQ_INT(via.profile, built.profile);
    int64_t bw = built.bandwidth;
    free(iperm);
    free(perm);
    kd_csr_free(b);
    return bw;
}

static kd_csr_t *banded(int64_t n, int64_t half, int symmetric)
{
    kd_test_coo_t c = {n, n, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i - half; j <= i + half; j++)
            if (j >= 0 && j < n && (symmetric || j >= i || (i + j) % 3 == 0))
                kd_test_coo_add(&c, i, j, kd_test_rand_double(-1.0, 1.0));
    return kd_test_coo_finish(&c);
}

static void test_banded_comes_back(void)
{
    kd_csr_t *a = kd_test_scramble(banded(2000, 3, 1));
    CHECK(bandwidth(a) > 500);
    int64_t bw = rcm_bandwidth(a);
    CHECK_MSG(bw <= 6, "symmetric band 3: rcm bandwidth %lld", (long long)bw);
    kd_csr_free(a);
    /* nonsymmetric pattern: RCM works on A + A^T, whose band is still 3 */
    a = kd_test_scramble(banded(1500, 3, 0));
    bw = rcm_bandwidth(a);
    CHECK_MSG(bw <= 6, "nonsymmetric band 3: rcm bandwidth %lld", (long long)bw);
    kd_csr_free(a);
}

static void test_laplacian_comes_back(void)
{
    kd_csr_t *a = kd_test_scramble(kd_test_laplacian_2d(60, 40));
    int64_t before = bandwidth(a), bw = rcm_bandwidth(a);
    CHECK_MSG(bw <= 2 * 40, "laplacian 60x40: bandwidth %lld -> %lld", (long long)before,
              (long long)bw);
    kd_csr_free(a);
}

/* Gathers' sectors per nonzero: a band packs a window's gathers into a few sectors, a scrambled
 * band spreads them (every gather its own sector), RCM brings them back, and the measure through
 * the permutation equals the measure of the built matrix. */
static void test_gathers(void)
{
    kd_err_t err = {0};
    kd_csr_t *band = banded(65536, 2, 1); /* 16k sectors: a scrambled window rarely repeats one */
    double tight = kd_reorder_gathers(band, NULL, NULL);
    CHECK_MSG(tight > 0.0 && tight < 0.1, "band: %g sectors per nonzero", tight);
    kd_csr_t *a = kd_test_scramble(band);
    double spread = kd_reorder_gathers(a, NULL, NULL);
    CHECK_MSG(spread > 0.8 && spread <= 1.0, "scrambled band: %g sectors per nonzero", spread);
    int32_t *perm = NULL;
    kd_csr_t *b = NULL;
    MUST(kd_reorder_rcm(a, &perm, &err) == KD_OK);
    MUST(kd_reorder_apply(a, perm, &b, &err) == KD_OK);
    int32_t *iperm = malloc((size_t)a->rows * sizeof(int32_t) + 4);
    kd_reorder_invert(perm, a->rows, iperm);
    double via = kd_reorder_gathers(a, perm, iperm), built = kd_reorder_gathers(b, NULL, NULL);
    CHECK_MSG(via == built, "through the permutation %g, built %g", via, built);
    CHECK_MSG(built < 0.75 * spread, "rcm: %g sectors per nonzero, scrambled %g", built, spread);
    free(iperm);
    free(perm);
    kd_csr_free(a);
    kd_csr_free(b);
    kd_test_coo_t e = {3, 5, 0, 0, NULL, NULL, NULL}; /* no entries */
    kd_csr_t *empty = kd_test_coo_finish(&e);
    CHECK(kd_reorder_gathers(empty, NULL, NULL) == 0.0);
    kd_csr_free(empty);
}

/* The prediction of what a breadth-first ordering does: a scrambled mesh comes back together,
 * a mesh in order and a random matrix (an expander) gain nothing. */
static void test_gathers_predicted(void)
{
    double original, predicted;
    kd_csr_t *a = kd_test_scramble(kd_test_laplacian_2d(300, 300));
    predicted = kd_reorder_gathers_predicted(a, 65536, &original);
    CHECK_MSG(original > 0.8 && predicted < 0.3 * original,
              "scrambled mesh: predicted %.3f, original %.3f", predicted, original);
    kd_csr_free(a);
    a = kd_test_laplacian_2d(300, 300);
    predicted = kd_reorder_gathers_predicted(a, 65536, &original);
    CHECK_MSG(original < 0.3 && predicted > 0.75 * original,
              "mesh in order: predicted %.3f, original %.3f", predicted, original);
    kd_csr_free(a);
    a = kd_test_random_matrix(100000, 100000, NULL, 8);
    predicted = kd_reorder_gathers_predicted(a, 65536, &original);
    CHECK_MSG(predicted > 0.75 * original, "random: predicted %.3f, original %.3f", predicted,
              original);
    kd_csr_free(a);
    kd_test_coo_t r = {4, 6, 0, 0, NULL, NULL, NULL}; /* not square: nothing to predict */
    kd_test_coo_add(&r, 1, 5, 1.0);
    a = kd_test_coo_finish(&r);
    CHECK(kd_reorder_gathers_predicted(a, 65536, &original) == 0.0);
    kd_csr_free(a);
}

static void test_components_and_empty_rows(void)
{
    /* two scrambled bands side by side with isolated (empty) rows between */
    kd_test_coo_t c = {1000, 1000, 0, 0, NULL, NULL, NULL};
    for (int64_t i = 0; i < 1000; i++) {
        if (i % 10 == 7)
            continue; /* an empty row, and its column empty too */
        int64_t base = i < 500 ? 0 : 500;
        for (int64_t j = i - 2; j <= i + 2; j++)
            if (j >= base && j < base + 500 && j % 10 != 7)
                kd_test_coo_add(&c, i, j, 1.0);
    }
    kd_csr_t *a = kd_test_scramble(kd_test_coo_finish(&c));
    int64_t bw = rcm_bandwidth(a);
    CHECK_MSG(bw <= 8, "two components with empty rows: bandwidth %lld", (long long)bw);
    kd_csr_free(a);
}

static void test_tiny_and_non_square(void)
{
    kd_err_t err = {0};
    int32_t *perm = NULL;
    kd_csr_t *one = banded(1, 0, 1), *empty = NULL, *wide = kd_test_random_matrix(3, 5, NULL, 2);
    REQUIRE(kd_reorder_rcm(one, &perm, &err) == KD_OK);
    CHECK(perm[0] == 0);
    free(perm);
    REQUIRE(kd_csr_alloc(0, 0, 0, KD_DTYPE_F64, &empty, &err) == KD_OK);
    empty->indptr[0] = 0;
    REQUIRE(kd_reorder_rcm(empty, &perm, &err) == KD_OK);
    free(perm);
    CHECK(kd_reorder_rcm(wide, &perm, &err) == KD_EBADREQ);
    CHECK_STR_CONTAINS(err.message, "square");
    CHECK(perm == NULL);
    CHECK(kd_reorder_compute(one, KD_REORDER_NONE, &perm, &err) == KD_EBADREQ);
    if (!kd_reorder_available(KD_REORDER_METIS))
        CHECK(kd_reorder_compute(one, KD_REORDER_METIS, &perm, &err) == KD_EUNSUPPORTED);
    kd_reorder_t k;
    CHECK(kd_reorder_parse("", &k) == 0 && k == KD_REORDER_AUTO);
    CHECK(kd_reorder_parse("rcm", &k) == 0 && k == KD_REORDER_RCM);
    CHECK(kd_reorder_parse("bogus", &k) == -1);
    kd_csr_free(one);
    kd_csr_free(empty);
    kd_csr_free(wide);
}

/* P A P^T against the dense reference, for float64 and float32 values. */
static void test_apply_exact(void)
{
    const int64_t n = 37;
    kd_csr_t *a64 = kd_test_random_matrix(n, n, NULL, 4);
    for (int d = 0; d < 2; d++) {
        kd_err_t err = {0};
        kd_csr_t *a = NULL, *b = NULL;
        REQUIRE(kd_csr_convert(a64, d == 0 ? KD_DTYPE_F64 : KD_DTYPE_F32, &a, &err) == KD_OK);
        int32_t *p = kd_test_random_perm(n);
        REQUIRE(kd_reorder_apply(a, p, &b, &err) == KD_OK);
        double *dense = calloc((size_t)(n * n), sizeof(double));
        for (int64_t r = 0; r < n; r++)
            for (int32_t k = a->indptr[r]; k < a->indptr[r + 1]; k++)
                dense[r * n + a->indices[k]] = kd_csr_value(a, k);
        CHECK_EQ_INT(b->nnz, a->nnz);
        int64_t bad = 0, seen = 0;
        for (int64_t i = 0; i < n; i++) {
            for (int32_t k = b->indptr[i]; k < b->indptr[i + 1]; k++) {
                bad += k > b->indptr[i] && b->indices[k] <= b->indices[k - 1];
                bad += kd_csr_value(b, k) != dense[p[i] * n + p[b->indices[k]]];
                seen++;
            }
            CHECK_EQ_INT(b->indptr[i + 1] - b->indptr[i], a->indptr[p[i] + 1] - a->indptr[p[i]]);
        }
        CHECK_MSG(bad == 0, "%lld entries of P A P^T wrong or unsorted", (long long)bad);
        CHECK_EQ_INT(seen, a->nnz);
        free(dense);
        free(p);
        kd_csr_free(a);
        kd_csr_free(b);
    }
    kd_csr_free(a64);
}

/* METIS (when built): a permutation, deterministic (a reload must get the same one). */
static void test_metis(void)
{
    if (!kd_reorder_available(KD_REORDER_METIS)) {
        fprintf(stderr, "   (built without METIS)\n");
        return;
    }
    kd_err_t err = {0};
    kd_csr_t *a = kd_test_scramble(kd_test_laplacian_2d(50, 40));
    int32_t *p1 = NULL, *p2 = NULL;
    REQUIRE(kd_reorder_compute(a, KD_REORDER_METIS, &p1, &err) == KD_OK);
    REQUIRE(kd_reorder_compute(a, KD_REORDER_METIS, &p2, &err) == KD_OK);
    CHECK(is_permutation(p1, a->rows));
    CHECK(memcmp(p1, p2, (size_t)a->rows * sizeof(int32_t)) == 0);
    free(p1);
    free(p2);
    kd_csr_free(a);
}

int main(void)
{
    kd_test_seed();
    RUN(test_banded_comes_back);
    RUN(test_laplacian_comes_back);
    RUN(test_gathers);
    RUN(test_gathers_predicted);
    RUN(test_components_and_empty_rows);
    RUN(test_tiny_and_non_square);
    RUN(test_apply_exact);
    RUN(test_metis);
    return kd_test_finish();
}
