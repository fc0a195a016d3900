/*
 * The format-independent scan of a matrix at upload (see matrix_scan.h): one streaming pass over
 * the values for the first non-finite one (row order is array order), and for square matrices a
 * binary search of each row for its diagonal (columns are sorted in canonical CSR). The inverse
 * diagonal is what Jacobi-preconditioned CG multiplies the residual by every iteration; keeping
 * it here (n values of host memory per square matrix, copied to the device by each PCG solve)
 * makes PCG work with every format without a per-format "extract the diagonal" operation, and
 * leaves the matrix's device footprint (device_bytes, the store's budget) the format's alone.
 */
#include "solver/matrix_scan.h"
#include "common/checked.h"
#include "common/slices.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Values screened per block for an Inf or NaN before the block is searched. */
#define KD_SCAN_BLOCK 4096

/* The exponent field of element k (all ones: Inf or NaN). */
static inline uint64_t kd_exponent_bits(const void *values, kd_dtype_t t, int64_t k)
{
    if (t == KD_DTYPE_F32) {
        uint32_t bits;
        memcpy(&bits, (const char *)values + (size_t)k * 4, 4);
        return bits & 0x7f800000u;
    }
    uint64_t bits;
    memcpy(&bits, (const char *)values + (size_t)k * 8, 8);
    return bits & 0x7ff0000000000000ull;
}

/* How many values of values[0..n) are not finite, and the first of them in *first (-1: none).
 * Blocks of values are screened by the largest exponent field (a max-reduction the compiler
 * vectorises; t is a constant at each call, so each dtype gets its own loop); only a block
 * holding an Inf or NaN is read entry by entry. */
static inline __attribute__((always_inline)) int64_t
kd_count_non_finite(const void *values, kd_dtype_t t, int64_t n, int64_t *first)
{
    const uint64_t all_ones = t == KD_DTYPE_F32 ? 0x7f800000u : 0x7ff0000000000000ull;
    int64_t count = 0;
    *first = -1;
    for (int64_t lo = 0; lo < n; lo += KD_SCAN_BLOCK) {
        int64_t hi = n - lo > KD_SCAN_BLOCK ? lo + KD_SCAN_BLOCK : n;
        uint64_t top = 0;
        for (int64_t k = lo; k < hi; k++) {
            uint64_t bits = kd_exponent_bits(values, t, k);
            top = bits > top ? bits : top;
        }
        if (top == all_ones)
            for (int64_t k = lo; k < hi; k++)
                if (!isfinite(kd_load_real(values, t, (size_t)k))) {
                    *first = *first < 0 ? k : *first;
                    count++;
                }
    }
    return count;
}

/* What one slice of rows [r0, r1) found; the slices' findings merge in row order. */
typedef struct kd_scan_slice {
    const kd_csr_t *csr;
    const kd_csr_mirror_t *mirror; /* the pattern's, or NULL: binary searches */
    void *inv; /* 1/a_ii, where it is kept (square, with an entry a row at least) */
    int square;
    int64_t r0, r1;
    int64_t non_finite_entry, non_finite_count, bad_row, neg_row;
    double bad_value, neg_value;
    int64_t upper, lower;       /* off-diagonal entries above and below the diagonal */
    int upper_mismatch;         /* an upper entry's mirror is missing or differs */
    int64_t asym_row, asym_col; /* the slice's first a_ij != a_ji (the second pass) */
    double asym_value, asym_mirror;
    int asym_stored; /* a_ji is stored (else it is 0 by absence) */
} kd_scan_slice_t;

/* The position of column `col` in row `row` (columns are sorted in canonical CSR), or -1. */
static int64_t kd_scan_find(const int32_t *indptr, const int32_t *indices, int64_t row, int64_t col)
{
    int64_t lo = indptr[row], hi = indptr[row + 1];
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (indices[mid] < col)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < indptr[row + 1] && indices[lo] == col ? lo : -1;
}

/*
 * a_ij = a and a_ji = b equal to rounding: |a - b| <= KD_SCAN_SYMMETRY_ULPS eps scale in the
 * dtype's eps, scale = max(|a|, |b|, sqrt(|a_ii a_jj|)), NaN counting as equal to NaN (the scan
 * reports NaN on its own, and a matrix with mirrored NaNs is still symmetric: the solver answers
 * it non_finite, not "not symmetric"). Not bit-exact: a matrix assembled in floating point is
 * often symmetric only to rounding (SuiteSparse's ani4 differs from its transpose by up to
 * 7.8e-15 relative, 35 ulps, and CG solves it as SciPy's does), and entries that cancel to nearly
 * 0 in assembly keep rounding of the size of their row's diagonal, hence the diagonal term (AMG's
 * old check had it). A real asymmetry is far beyond 256 ulps. The diagonals are looked up only
 * when the entry-relative test fails, which a symmetric matrix's entries almost never do.
 */
#define KD_SCAN_SYMMETRY_ULPS 256.0
static int kd_scan_same(const kd_csr_t *csr, int64_t i, int64_t j, double a, double b)
{
    const double eps = csr->dtype == KD_DTYPE_F32 ? (double)FLT_EPSILON : DBL_EPSILON;
    const double tol = KD_SCAN_SYMMETRY_ULPS * eps;
    if (a == b || (a != a && b != b) || fabs(a - b) <= tol * fmax(fabs(a), fabs(b)))
        return 1;
    const int64_t ki = kd_scan_find(csr->indptr, csr->indices, i, i),
                  kj = kd_scan_find(csr->indptr, csr->indices, j, j);
    if (ki < 0 || kj < 0)
        return 0;
    const double dii = fabs(kd_load_real(csr->values, csr->dtype, (size_t)ki)),
                 djj = fabs(kd_load_real(csr->values, csr->dtype, (size_t)kj));
    return fabs(a - b) <= tol * sqrt(dii * djj);
}

/* The first pass: each entry above the diagonal looks its mirror up by binary search
 * (O(nnz log(row length)) in all, half the entries searched); the entries below are only
 * counted. Every upper entry matched and as many below as above: A is symmetric. */
static void kd_scan_upper(kd_scan_slice_t *sl)
{
    const kd_csr_t *csr = sl->csr;
    const int32_t *indptr = csr->indptr, *indices = csr->indices;
    int64_t upper = 0, lower = 0;
    for (int64_t r = sl->r0; r < sl->r1 && !sl->upper_mismatch; r++) {
        int64_t k = indptr[r];
        const int64_t end = indptr[r + 1];
        for (; k < end && indices[k] < r; k++)
            lower++;
        for (k += k < end && indices[k] == r; k < end; k++) {
            const int64_t m = kd_scan_find(indptr, indices, indices[k], r);
            upper++;
            if (m < 0 ||
                !kd_scan_same(csr, r, indices[k], kd_load_real(csr->values, csr->dtype, (size_t)k),
                              kd_load_real(csr->values, csr->dtype, (size_t)m))) {
                sl->upper_mismatch = 1;
                break;
            }
        }
    }
    sl->upper = upper;
    sl->lower = lower;
}

/* The first pass with the pattern's mirror map (kd_csr_pattern_mirror: a matrix of a held
 * pattern with new values), fused with the count of non-finite values: block by block, the
 * block's values screened, then each entry above the diagonal (its mirror lies after it)
 * compared with the value at its mirror's position while the block is in cache; no search. An
 * incomplete map (an entry without its mirror) is a mismatch; a complete one is a bijection, so
 * the counts of kd_scan_upper are not needed. */
static void kd_scan_mirrored(kd_scan_slice_t *sl)
{
    const kd_csr_t *csr = sl->csr;
    const kd_dtype_t t = csr->dtype;
    const size_t vsize = kd_dtype_size(t);
    const int32_t *mirror = sl->mirror->mirror;
    const int64_t k0 = csr->indptr[sl->r0], k1 = csr->indptr[sl->r1];
    int mismatch = !sl->mirror->complete;
    sl->upper = sl->lower = 0;
    sl->non_finite_count = 0;
    sl->non_finite_entry = -1;
    for (int64_t lo = k0; lo < k1; lo += KD_SCAN_BLOCK) {
        const int64_t hi = k1 - lo > KD_SCAN_BLOCK ? lo + KD_SCAN_BLOCK : k1;
        const void *vb = (const char *)csr->values + (size_t)lo * vsize;
        int64_t first;
        sl->non_finite_count += t == KD_DTYPE_F32
                                    ? kd_count_non_finite(vb, KD_DTYPE_F32, hi - lo, &first)
                                    : kd_count_non_finite(vb, KD_DTYPE_F64, hi - lo, &first);
        if (sl->non_finite_entry < 0 && first >= 0)
            sl->non_finite_entry = lo + first;
        for (int64_t k = lo; k < hi && !mismatch; k++) {
            const int64_t m = mirror[k];
            if (m <= k)
                continue;
            const double a = kd_load_real(csr->values, t, (size_t)k),
                         b = kd_load_real(csr->values, t, (size_t)m);
            if (a != b && !kd_scan_same(csr, kd_csr_row_of_entry(csr, k), csr->indices[k], a, b))
                mismatch = 1;
        }
    }
    sl->upper_mismatch = mismatch;
}

/* The second pass, only for a matrix the first found asymmetric: the slice's first entry in
 * row order, above or below the diagonal, whose mirror is missing or differs. */
static void *kd_scan_witness(void *arg)
{
    kd_scan_slice_t *sl = arg;
    const kd_csr_t *csr = sl->csr;
    const int32_t *indptr = csr->indptr, *indices = csr->indices;
    for (int64_t r = sl->r0; r < sl->r1; r++)
        for (int64_t k = indptr[r]; k < indptr[r + 1]; k++) {
            const int64_t c = indices[k];
            if (c == r)
                continue;
            const int64_t m = kd_scan_find(indptr, indices, c, r);
            const double a = kd_load_real(csr->values, csr->dtype, (size_t)k);
            const double b = m >= 0 ? kd_load_real(csr->values, csr->dtype, (size_t)m) : 0.0;
            if (m < 0 || !kd_scan_same(csr, r, c, a, b)) {
                sl->asym_row = r;
                sl->asym_col = c;
                sl->asym_value = a;
                sl->asym_mirror = b;
                sl->asym_stored = m >= 0;
                return NULL;
            }
        }
    return NULL;
}

static void *kd_scan_slice(void *arg)
{
    kd_scan_slice_t *sl = arg;
    const kd_csr_t *csr = sl->csr;
    const kd_dtype_t t = csr->dtype;
    const int64_t k0 = csr->indptr[sl->r0], k1 = csr->indptr[sl->r1];
    sl->bad_row = sl->neg_row = -1;
    sl->bad_value = sl->neg_value = 0.0;
    sl->asym_row = sl->asym_col = -1;
    if (sl->mirror != NULL) {
        kd_scan_mirrored(sl); /* (only square matrices have a map) */
    } else {
        /* entries in row order are the values array in order: the slice's first non-finite */
        const size_t vsize = kd_dtype_size(t);
        const void *v0 = (const char *)csr->values + (size_t)k0 * vsize;
        int64_t k;
        sl->non_finite_count = t == KD_DTYPE_F32
                                   ? kd_count_non_finite(v0, KD_DTYPE_F32, k1 - k0, &k)
                                   : kd_count_non_finite(v0, KD_DTYPE_F64, k1 - k0, &k);
        sl->non_finite_entry = k >= 0 ? k0 + k : -1;
        if (!sl->square)
            return NULL;
        kd_scan_upper(sl);
    }
    const int32_t *indptr = csr->indptr, *indices = csr->indices;
    const int32_t *diag_at = sl->mirror != NULL ? sl->mirror->diag : NULL;
    for (int64_t r = sl->r0; r < sl->r1; r++) {
        int64_t at = -1;
        if (diag_at != NULL)
            at = diag_at[r];
        else
            for (int64_t j = indptr[r]; j < indptr[r + 1]; j++)
                at = indices[j] == r ? j : at; /* no branch to mispredict */
        double diag = at >= 0 ? kd_load_real(csr->values, t, (size_t)at) : 0.0;
        /* Usable when its inverse is finite in the matrix's own type (a float32 subnormal is
         * not). */
        int usable = isfinite(diag) && diag != 0.0;
        if (usable) {
            const double inv = 1.0 / diag;
            usable = isfinite(t == KD_DTYPE_F32 ? (double)(float)inv : inv);
            if (sl->inv != NULL)
                kd_store_real(sl->inv, t, (size_t)r, usable ? inv : 0.0);
        }
        if (!usable) {
            if (sl->inv != NULL)
                kd_store_real(sl->inv, t, (size_t)r, 0.0);
            if (sl->bad_row < 0) {
                sl->bad_row = r;
                sl->bad_value = diag;
            }
        }
        if (diag < 0.0 && sl->neg_row < 0) {
            sl->neg_row = r;
            sl->neg_value = diag;
        }
    }
    return NULL;
}

/* The slices' first passes into scan->symmetric; when they found A asymmetric, the second pass
 * for the first witness in row order. */
static void kd_scan_merge_symmetry(const kd_csr_t *csr, kd_matrix_scan_t *scan,
                                   kd_scan_slice_t *slices, int n)
{
    int64_t upper = 0, lower = 0;
    int mismatch = 0;
    for (int i = 0; i < n; i++) {
        upper += slices[i].upper;
        lower += slices[i].lower;
        mismatch |= slices[i].upper_mismatch;
    }
    scan->symmetric = csr->rows == csr->cols && !mismatch && upper == lower; /* 0 x 0 is */
    if (scan->symmetric || csr->rows != csr->cols)
        return;
    kd_slices_run(kd_scan_witness, slices, sizeof(slices[0]), n);
    for (int i = 0; i < n && scan->asymmetric_row < 0; i++)
        if (slices[i].asym_row >= 0) {
            scan->asymmetric_row = slices[i].asym_row;
            scan->asymmetric_col = slices[i].asym_col;
            scan->asymmetric_value = slices[i].asym_value;
            scan->asymmetric_mirror = slices[i].asym_mirror;
            scan->asymmetric_mirror_stored = slices[i].asym_stored;
        }
}

int kd_matrix_scan(const kd_csr_t *csr, kd_matrix_scan_t *scan, void **inv_diagonal, kd_err_t *err)
{
    *inv_diagonal = NULL;
    scan->non_finite_row = scan->non_finite_col = -1;
    scan->non_finite_count = 0;
    scan->bad_diagonal_row = scan->negative_diagonal_row = -1;
    scan->non_finite_value = scan->bad_diagonal_value = scan->negative_diagonal_value = 0.0;
    scan->symmetric = scan->looks_spd = 0;
    scan->asymmetric_row = scan->asymmetric_col = -1;
    scan->asymmetric_value = scan->asymmetric_mirror = 0.0;
    scan->asymmetric_mirror_stored = 0;
    const kd_dtype_t t = csr->dtype;
    const int square = csr->rows == csr->cols && csr->rows > 0;
    void *inv = NULL;
    size_t bytes = 0;
    /* 1/a_ii for Jacobi and AMG's smoothers, kept only where every row can have its diagonal:
     * with fewer entries than rows one row is empty, and a matrix of mostly empty rows (a put
     * may declare its rows without sending them) costs no array of its rows here */
    if (square && csr->nnz >= csr->rows) {
        if (kd_mul_overflow((size_t)csr->rows, kd_dtype_size(t), &bytes) ||
            (inv = malloc(bytes)) == NULL)
            return kd_err_set(err, KD_ENOMEM, "out of host memory for the matrix diagonal");
    }
    /* Slices of about equal nonzeros (common/slices.h). A large matrix's scan runs beside its
     * transfer, itself a host memcpy: slices keep it under the transfer's time (bench/NOTES.md,
     * run 7). */
    kd_scan_slice_t slices[KD_SLICES_MAX];
    int64_t bounds[KD_SLICES_MAX + 1];
    int n = kd_slices_count(csr->nnz);
    kd_slices_rows(csr, n, 1, bounds);
    /* a matrix on a shared pattern (new values on a held one) is scanned through the pattern's
     * mirror map, built by the first such scan and kept for the next versions */
    const kd_csr_mirror_t *mirror = square ? kd_csr_pattern_mirror(csr) : NULL;
    for (int i = 0; i < n; i++)
        slices[i] = (kd_scan_slice_t){.csr = csr,
                                      .mirror = mirror,
                                      .inv = inv,
                                      .square = square,
                                      .r0 = bounds[i],
                                      .r1 = bounds[i + 1]};
    kd_slices_run(kd_scan_slice, slices, sizeof(slices[0]), n);
    for (int i = 0; i < n; i++) {
        const kd_scan_slice_t *sl = &slices[i];
        scan->non_finite_count += sl->non_finite_count;
        if (scan->non_finite_row < 0 && sl->non_finite_entry >= 0) {
            int64_t k = sl->non_finite_entry;
            scan->non_finite_row = kd_csr_row_of_entry(csr, k);
            scan->non_finite_col = csr->indices[k];
            scan->non_finite_value = kd_load_real(csr->values, t, (size_t)k);
        }
        if (scan->bad_diagonal_row < 0 && sl->bad_row >= 0) {
            scan->bad_diagonal_row = sl->bad_row;
            scan->bad_diagonal_value = sl->bad_value;
        }
        if (scan->negative_diagonal_row < 0 && sl->neg_row >= 0) {
            scan->negative_diagonal_row = sl->neg_row;
            scan->negative_diagonal_value = sl->neg_value;
        }
    }
    kd_scan_merge_symmetry(csr, scan, slices, n);
    scan->looks_spd =
        scan->symmetric && scan->bad_diagonal_row < 0 && scan->negative_diagonal_row < 0;
    *inv_diagonal = inv;
    return KD_OK;
}
