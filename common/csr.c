/*
 * Building, validating, hashing and multiplying host CSR matrices (see csr.h).
 *
 * Every builder funnels into csr_canonicalize(), which takes entries grouped by row (a row pointer
 * plus column and value arrays it may reorder), sorts each row that is not already sorted, sums
 * duplicates in a deterministic order (by column, then by value bits), and writes the result in
 * the requested value type. Inputs that are already canonical — the common case — take a copy
 * path with one validation pass and no sorting.
 */
#include "common/csr.h"
#include "common/checked.h"
#include "common/recycle.h"
#include "common/slices.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

int kd_csr_check_shape(int64_t rows, int64_t cols, int64_t nnz, const kd_csr_limits_t *limits,
                       kd_err_t *err)
{
    if (rows < 0 || cols < 0 || nnz < 0)
        return kd_err_set(err, KD_EBADREQ, "negative size: rows = %lld, cols = %lld, nnz = %lld",
                          (long long)rows, (long long)cols, (long long)nnz);
    if (rows > KD_CSR_INDEX_MAX - 1 || cols > KD_CSR_INDEX_MAX)
        return kd_err_set(err, KD_ETOOLARGE,
                          "%lld x %lld is over the largest supported dimension %d", (long long)rows,
                          (long long)cols, KD_CSR_INDEX_MAX - 1);
    if (nnz > KD_CSR_INDEX_MAX)
        return kd_err_set(err, KD_ETOOLARGE, "nnz = %lld is over the largest supported %d",
                          (long long)nnz, KD_CSR_INDEX_MAX);
    if (limits != NULL) {
        if (limits->max_rows > 0 && rows > limits->max_rows)
            return kd_err_set(err, KD_ETOOLARGE, "rows = %lld is over this server's limit %lld",
                              (long long)rows, (long long)limits->max_rows);
        if (limits->max_cols > 0 && cols > limits->max_cols)
            return kd_err_set(err, KD_ETOOLARGE, "cols = %lld is over this server's limit %lld",
                              (long long)cols, (long long)limits->max_cols);
        if (limits->max_nnz > 0 && nnz > limits->max_nnz)
            return kd_err_set(err, KD_ETOOLARGE, "nnz = %lld is over this server's limit %lld",
                              (long long)nnz, (long long)limits->max_nnz);
    }
    return KD_OK;
}

/* 4 (rows + 1), saturating: added, so that rows = INT64_MAX saturates rather than overflows */
static size_t kd_csr_offsets_bytes(int64_t rows)
{
    return kd_sat_add(kd_sat_mad(0, rows, sizeof(int32_t)), sizeof(int32_t));
}

size_t kd_csr_bytes(int64_t rows, int64_t nnz, kd_dtype_t dtype)
{
    return kd_sat_mad(kd_csr_offsets_bytes(rows), nnz, sizeof(int32_t) + kd_dtype_size(dtype));
}

int kd_csr_charge(int64_t rows, int64_t cols, int64_t nnz, kd_dtype_t dtype, size_t build_bytes,
                  const kd_csr_limits_t *limits, kd_err_t *err)
{
    if (limits == NULL)
        return KD_OK;
    if (limits->max_build_bytes > 0 && build_bytes > limits->max_build_bytes)
        return kd_err_set(err, KD_ETOOLARGE,
                          "a %lld x %lld matrix with %lld nonzeros takes %s%zu bytes of host "
                          "memory to build, over the %zu bytes one upload may use (%s)",
                          (long long)rows, (long long)cols, (long long)nnz,
                          build_bytes == SIZE_MAX ? "more than " : "",
                          build_bytes == SIZE_MAX ? SIZE_MAX - 1 : build_bytes,
                          limits->max_build_bytes,
                          limits->build_limit != NULL ? limits->build_limit : "the server's limit");
    const size_t device = kd_csr_bytes(rows, nnz, dtype);
    if (limits->max_device_bytes > 0 && device > limits->max_device_bytes)
        return kd_err_set(err, KD_EDEVMEM,
                          "a %lld x %lld matrix with %lld nonzeros (%s) needs at least %zu bytes "
                          "of device memory (its CSR arrays), more than the whole budget of %zu "
                          "bytes (%s)",
                          (long long)rows, (long long)cols, (long long)nnz, kd_dtype_name(dtype),
                          device, limits->max_device_bytes,
                          limits->device_limit != NULL ? limits->device_limit
                                                       : "the server's limit");
    return KD_OK;
}

int kd_csr_validate(const kd_csr_t *csr, kd_err_t *err)
{
    int rc = kd_csr_check_shape(csr->rows, csr->cols, csr->nnz, NULL, err);
    if (rc != KD_OK) {
        kd_err_prefix(err, "invalid matrix");
        if (err != NULL)
            err->code = KD_EINTERNAL;
        return KD_EINTERNAL;
    }
    if (csr->indptr == NULL || (csr->nnz > 0 && csr->indices == NULL))
        return kd_err_set(err, KD_EINTERNAL, "invalid matrix: its arrays are missing");
    if (csr->indptr[0] != 0 || csr->indptr[csr->rows] != csr->nnz)
        return kd_err_set(err, KD_EINTERNAL,
                          "invalid matrix: row pointers run from %lld to %lld, not 0 to nnz = %lld",
                          (long long)csr->indptr[0], (long long)csr->indptr[csr->rows],
                          (long long)csr->nnz);
    for (int64_t i = 0; i < csr->rows; i++) {
        const int64_t lo = csr->indptr[i], hi = csr->indptr[i + 1];
        if (hi < lo || hi > csr->nnz)
            return kd_err_set(err, KD_EINTERNAL,
                              "invalid matrix: row %lld's pointers %lld..%lld are not in order",
                              (long long)i, (long long)lo, (long long)hi);
        int64_t prev = -1;
        for (int64_t k = lo; k < hi; k++) {
            const int64_t j = csr->indices[k];
            if (j <= prev || j >= csr->cols)
                return kd_err_set(
                    err, KD_EINTERNAL, "invalid matrix: row %lld, entry %lld has column %lld (%s)",
                    (long long)i, (long long)k, (long long)j,
                    j >= csr->cols || j < 0 ? "out of range" : "not after the previous one");
            prev = j;
        }
    }
    return KD_OK;
}

int kd_csr_alloc(int64_t rows, int64_t cols, int64_t nnz, kd_dtype_t dtype, kd_csr_t **out,
                 kd_err_t *err)
{
    int rc = kd_csr_check_shape(rows, cols, nnz, NULL, err);
    if (rc != KD_OK)
        return rc;
    if (dtype != KD_DTYPE_F64 && dtype != KD_DTYPE_F32)
        return kd_err_set(err, KD_EINTERNAL, "matrix values must be float32 or float64");
    kd_csr_t *csr = calloc(1, sizeof(*csr));
    if (csr == NULL)
        goto fail;
    csr->rows = rows;
    csr->cols = cols;
    csr->nnz = nnz;
    csr->dtype = dtype;
    csr->indptr = kd_malloc_array((size_t)rows + 1, sizeof(int32_t));
    csr->indices = kd_malloc_array((size_t)nnz, sizeof(int32_t));
    csr->values = kd_malloc_array((size_t)nnz, kd_dtype_size(dtype));
    if (csr->indptr == NULL || csr->indices == NULL || csr->values == NULL)
        goto fail;
    *out = csr;
    return KD_OK;
fail:
    kd_csr_free(csr);
    return kd_err_set(err, KD_ENOMEM,
                      "out of host memory for a %lld x %lld matrix with %lld nonzeros",
                      (long long)rows, (long long)cols, (long long)nnz);
}

int kd_csr_transpose(const kd_csr_t *csr, kd_csr_t **out, kd_err_t *err)
{
    kd_csr_t *t = NULL;
    int rc = kd_csr_alloc(csr->cols, csr->rows, csr->nnz, csr->dtype, &t, err);
    if (rc != KD_OK)
        return rc;
    size_t vsize = kd_dtype_size(csr->dtype);
    memset(t->indptr, 0, ((size_t)t->rows + 1) * sizeof(int32_t));
    for (int64_t k = 0; k < csr->nnz; k++)
        t->indptr[csr->indices[k] + 1]++;
    for (int64_t c = 0; c < t->rows; c++)
        t->indptr[c + 1] += t->indptr[c];
    /* indptr[c] is the next free slot of row c while scattering; shifted back afterwards */
    for (int64_t r = 0; r < csr->rows; r++)
        for (int64_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++) {
            int32_t slot = t->indptr[csr->indices[k]]++;
            t->indices[slot] = (int32_t)r;
            memcpy((char *)t->values + (size_t)slot * vsize,
                   (const char *)csr->values + (size_t)k * vsize, vsize);
        }
    for (int64_t c = t->rows; c > 0; c--)
        t->indptr[c] = t->indptr[c - 1];
    t->indptr[0] = 0;
    *out = t;
    return KD_OK;
}

struct kd_csr_pattern {
    int refs; /* atomic */
    int32_t *indptr, *indices;
    /* kd_csr_hash's state once the pattern is in (the id hashes the pattern before the values),
     * per dtype (the byte before indptr): a new version hashes its values alone. Published
     * once, atomically. */
    XXH3_state_t *hashed[2];
    kd_csr_mirror_t *mirror; /* kd_csr_pattern_mirror's, published once, atomically */
};

static void kd_csr_mirror_free(kd_csr_mirror_t *m)
{
    if (m == NULL)
        return;
    free(m->mirror);
    free(m->diag);
    free(m);
}

static void kd_csr_pattern_release(struct kd_csr_pattern *p)
{
    if (__atomic_sub_fetch(&p->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(p->indptr);
    free(p->indices);
    XXH3_freeState(p->hashed[0]);
    XXH3_freeState(p->hashed[1]);
    kd_csr_mirror_free(p->mirror);
    free(p);
}

kd_csr_t *kd_csr_hold(kd_csr_t *csr)
{
    __atomic_add_fetch(&csr->holds, 1, __ATOMIC_RELAXED);
    return csr;
}

void kd_csr_free(kd_csr_t *csr)
{
    if (csr == NULL)
        return;
    if (__atomic_fetch_sub(&csr->holds, 1, __ATOMIC_ACQ_REL) > 0)
        return; /* another reference is left */
    if (csr->pattern != NULL) {
        kd_csr_pattern_release(csr->pattern);
    } else {
        free(csr->indptr);
        free(csr->indices);
    }
    kd_recycle_free(csr->values); /* kd_csr_with_values's may come from the shelf */
    free(csr);
}

static int kd_csr_share(kd_csr_t *csr, int with_values, kd_csr_t **out, kd_err_t *err);

/* One slice of rows of kd_csr_pattern_mirror's build. */
typedef struct kd_csr_mirror_slice {
    const kd_csr_t *csr;
    kd_csr_mirror_t *m;
    int64_t r0, r1;
    int complete;
} kd_csr_mirror_slice_t;

static void *kd_csr_mirror_slice(void *arg)
{
    kd_csr_mirror_slice_t *sl = arg;
    const int32_t *indptr = sl->csr->indptr, *indices = sl->csr->indices;
    int complete = 1;
    for (int64_t r = sl->r0; r < sl->r1; r++) {
        sl->m->diag[r] = -1;
        for (int64_t k = indptr[r]; k < indptr[r + 1]; k++) {
            const int64_t c = indices[k];
            if (c == r) {
                sl->m->diag[r] = (int32_t)k;
                sl->m->mirror[k] = (int32_t)k;
                continue;
            }
            int64_t lo = indptr[c], hi = indptr[c + 1]; /* row c's columns are sorted */
            while (lo < hi) {
                const int64_t mid = lo + (hi - lo) / 2;
                if (indices[mid] < r)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            const int found = lo < indptr[c + 1] && indices[lo] == r;
            sl->m->mirror[k] = found ? (int32_t)lo : -1;
            complete &= found;
        }
    }
    sl->complete = complete;
    return NULL;
}

const kd_csr_mirror_t *kd_csr_pattern_mirror(const kd_csr_t *csr)
{
    struct kd_csr_pattern *p = csr->pattern;
    if (p == NULL || csr->rows != csr->cols || csr->rows == 0 || csr->nnz == 0)
        return NULL;
    kd_csr_mirror_t *m = __atomic_load_n(&p->mirror, __ATOMIC_ACQUIRE);
    if (m != NULL)
        return m;
    m = calloc(1, sizeof(*m));
    if (m == NULL || (m->mirror = malloc((size_t)csr->nnz * sizeof(int32_t))) == NULL ||
        (m->diag = malloc((size_t)csr->rows * sizeof(int32_t))) == NULL) {
        kd_csr_mirror_free(m);
        return NULL;
    }
    kd_csr_mirror_slice_t slices[KD_SLICES_MAX];
    int64_t bounds[KD_SLICES_MAX + 1];
    const int n = kd_slices_count(csr->nnz);
    kd_slices_rows(csr, n, 1, bounds);
    for (int i = 0; i < n; i++)
        slices[i] = (kd_csr_mirror_slice_t){.csr = csr, .m = m, .r0 = bounds[i], .r1 = bounds[i + 1]};
    kd_slices_run(kd_csr_mirror_slice, slices, sizeof(slices[0]), n);
    m->complete = 1;
    for (int i = 0; i < n; i++)
        m->complete &= slices[i].complete;
    kd_csr_mirror_t *none = NULL;
    if (!__atomic_compare_exchange_n(&p->mirror, &none, m, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        kd_csr_mirror_free(m); /* another thread's was first */
        return none;
    }
    return m;
}

int kd_csr_with_values(kd_csr_t *csr, kd_csr_t **out, kd_err_t *err)
{
    return kd_csr_share(csr, 1, out, err);
}

int kd_csr_pattern_ref(kd_csr_t *csr, kd_csr_t **out, kd_err_t *err)
{
    return kd_csr_share(csr, 0, out, err);
}

static int kd_csr_share(kd_csr_t *csr, int with_values, kd_csr_t **out, kd_err_t *err)
{
    *out = NULL;
    kd_csr_t *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return kd_err_set(err, KD_ENOMEM, "out of host memory for a shared pattern");
    if (csr->pattern == NULL) {
        struct kd_csr_pattern *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            free(c);
            return kd_err_set(err, KD_ENOMEM, "out of host memory for a shared pattern");
        }
        p->refs = 1;
        p->indptr = csr->indptr;
        p->indices = csr->indices;
        csr->pattern = p;
    }
    *c = *csr;
    c->holds = 0; /* the new one's own: csr's holds (a write behind) are csr's */
    /* a time-stepping loop frees a version's values as it makes the next: pages already mapped
     * are several times faster to fill (common/recycle.h) */
    size_t bytes = 0;
    c->values = !with_values ? NULL
                : kd_mul_overflow((size_t)csr->nnz, kd_dtype_size(csr->dtype), &bytes)
                    ? NULL
                    : kd_recycle_alloc(bytes > 0 ? bytes : 1, NULL);
    if (with_values && c->values == NULL) {
        free(c);
        return kd_err_set(err, KD_ENOMEM, "out of host memory for %lld values",
                          (long long)csr->nnz);
    }
    __atomic_add_fetch(&csr->pattern->refs, 1, __ATOMIC_ACQ_REL);
    *out = c;
    return KD_OK;
}

struct kd_entry {
    int32_t col;
    double value;
};

static int kd_entry_cmp(const void *a, const void *b)
{
    const struct kd_entry *x = a, *y = b;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    /* Same column (a duplicate): order by value bits so the sum does not depend on input order. */
    uint64_t bx, by;
    memcpy(&bx, &x->value, 8);
    memcpy(&by, &y->value, 8);
    return bx < by ? -1 : (bx > by ? 1 : 0);
}

/*
 * Entries grouped by row: row r owns positions rowptr[r] .. rowptr[r+1]-1 of col[] and val[].
 * Sorts rows in place where needed, sums duplicates, and writes a new canonical matrix.
 */
static int csr_canonicalize(int64_t rows, int64_t cols, const int32_t *rowptr, int32_t *col,
                            double *val, kd_dtype_t out_dtype, kd_csr_t **out, kd_err_t *err)
{
    struct kd_entry *scratch = NULL;
    size_t scratch_cap = 0;
    int64_t unique = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lo = rowptr[r], hi = rowptr[r + 1];
        int sorted = 1;
        for (int64_t k = lo + 1; k < hi; k++) {
            if (col[k] <= col[k - 1]) {
                sorted = 0;
                break;
            }
        }
        if (!sorted) {
            size_t len = (size_t)(hi - lo);
            if (len > scratch_cap) {
                struct kd_entry *grown = realloc(scratch, len * sizeof(*scratch));
                if (grown == NULL) {
                    free(scratch);
                    return kd_err_set(err, KD_ENOMEM, "out of host memory sorting row %lld",
                                      (long long)r);
                }
                scratch = grown;
                scratch_cap = len;
            }
            for (size_t k = 0; k < len; k++) {
                scratch[k].col = col[lo + (int64_t)k];
                scratch[k].value = val[lo + (int64_t)k];
            }
            qsort(scratch, len, sizeof(*scratch), kd_entry_cmp);
            for (size_t k = 0; k < len; k++) {
                col[lo + (int64_t)k] = scratch[k].col;
                val[lo + (int64_t)k] = scratch[k].value;
            }
        }
        for (int64_t k = lo; k < hi; k++)
            if (k == lo || col[k] != col[k - 1])
                unique++;
    }
    free(scratch);

    kd_csr_t *csr;
    int rc = kd_csr_alloc(rows, cols, unique, out_dtype, &csr, err);
    if (rc != KD_OK)
        return rc;
    int64_t w = -1;
    csr->indptr[0] = 0;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lo = rowptr[r], hi = rowptr[r + 1];
        double sum = 0.0;
        for (int64_t k = lo; k < hi; k++) {
            if (k == lo || col[k] != col[k - 1]) {
                if (k != lo)
                    kd_store_real(csr->values, out_dtype, (size_t)w, sum);
                w++;
                csr->indices[w] = col[k];
                sum = val[k];
            } else {
                sum += val[k];
            }
        }
        if (hi > lo)
            kd_store_real(csr->values, out_dtype, (size_t)w, sum);
        csr->indptr[r + 1] = (int32_t)(w + 1);
    }
    *out = csr;
    return KD_OK;
}

int kd_csr_from_csr_arrays(int64_t rows, int64_t cols, int64_t nnz, const void *indptr,
                           kd_dtype_t indptr_type, const void *indices, kd_dtype_t index_type,
                           const void *values, kd_dtype_t value_type, kd_dtype_t out_dtype,
                           const kd_csr_limits_t *limits, kd_csr_t **out, kd_err_t *err)
{
    int rc = kd_csr_check_shape(rows, cols, nnz, limits, err);
    if (rc != KD_OK)
        return rc;

    /* indptr: starts at 0, never decreases, ends at nnz. */
    int64_t first = kd_load_index(indptr, indptr_type, 0);
    if (first != 0)
        return kd_err_set(err, KD_EBADREQ, "indptr[0] = %lld, must be 0", (long long)first);
    int64_t prev = 0;
    for (int64_t r = 1; r <= rows; r++) {
        int64_t p = kd_load_index(indptr, indptr_type, (size_t)r);
        if (p < prev)
            return kd_err_set(err, KD_EBADREQ,
                              "indptr[%lld] = %lld is less than indptr[%lld] = %lld "
                              "(indptr must be non-decreasing)",
                              (long long)r, (long long)p, (long long)(r - 1), (long long)prev);
        if (p > nnz)
            return kd_err_set(err, KD_EBADREQ, "indptr[%lld] = %lld is past nnz = %lld",
                              (long long)r, (long long)p, (long long)nnz);
        prev = p;
    }
    if (prev != nnz)
        return kd_err_set(err, KD_EBADREQ, "indptr[%lld] = %lld but nnz = %lld (they must agree)",
                          (long long)rows, (long long)prev, (long long)nnz);

    /* indices in range; note whether every row is already strictly sorted. */
    int canonical = 1;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lo = kd_load_index(indptr, indptr_type, (size_t)r);
        int64_t hi = kd_load_index(indptr, indptr_type, (size_t)r + 1);
        int64_t last = -1;
        for (int64_t k = lo; k < hi; k++) {
            int64_t c = kd_load_index(indices, index_type, (size_t)k);
            if (c < 0 || c >= cols) {
                if (cols == 0)
                    return kd_err_set(err, KD_EBADREQ,
                                      "indices[%lld] = %lld but the matrix has no columns",
                                      (long long)k, (long long)c);
                return kd_err_set(err, KD_EBADREQ, "indices[%lld] = %lld is outside 0..%lld",
                                  (long long)k, (long long)c, (long long)(cols - 1));
            }
            if (c <= last)
                canonical = 0;
            last = c;
        }
    }

    /* the canonical matrix, and for one to sort: offsets, indices and float64 values beside it
     * (rows is carried by indptr's bytes here, so this is a few times the request at most) */
    size_t build = kd_csr_bytes(rows, nnz, out_dtype);
    if (!canonical)
        build = kd_sat_mad(kd_sat_add(build, kd_csr_offsets_bytes(rows)), nnz,
                           sizeof(int32_t) + sizeof(double));
    if ((rc = kd_csr_charge(rows, cols, nnz, out_dtype, build, limits, err)) != KD_OK)
        return rc;
    if (canonical) {
        kd_csr_t *csr;
        rc = kd_csr_alloc(rows, cols, nnz, out_dtype, &csr, err);
        if (rc != KD_OK)
            return rc;
        for (int64_t r = 0; r <= rows; r++)
            csr->indptr[r] = (int32_t)kd_load_index(indptr, indptr_type, (size_t)r);
        if (index_type == KD_DTYPE_I32)
            memcpy(csr->indices, indices, (size_t)nnz * 4);
        else
            for (int64_t k = 0; k < nnz; k++)
                csr->indices[k] = (int32_t)kd_load_i64(indices, (size_t)k);
        kd_convert_real(csr->values, out_dtype, values, value_type, (size_t)nnz);
        *out = csr;
        return KD_OK;
    }

    int32_t *rowptr = kd_malloc_array((size_t)rows + 1, sizeof(int32_t));
    int32_t *col = kd_malloc_array((size_t)nnz, sizeof(int32_t));
    double *val = kd_malloc_array((size_t)nnz, sizeof(double));
    if (rowptr == NULL || col == NULL || val == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld nonzeros", (long long)nnz);
        goto done;
    }
    for (int64_t r = 0; r <= rows; r++) /* in 0..nnz, checked above: nnz fits int32 */
        rowptr[r] = (int32_t)kd_load_index(indptr, indptr_type, (size_t)r);
    for (int64_t k = 0; k < nnz; k++) {
        col[k] = (int32_t)kd_load_index(indices, index_type, (size_t)k);
        val[k] = kd_load_real(values, value_type, (size_t)k);
    }
    rc = csr_canonicalize(rows, cols, rowptr, col, val, out_dtype, out, err);
done:
    free(rowptr);
    free(col);
    free(val);
    return rc;
}

size_t kd_csr_coo_build_bytes(int64_t rows, int64_t nnz, kd_dtype_t dtype)
{
    /* the offsets with the entries grouped by row, and the canonical matrix beside them */
    return kd_sat_add(kd_sat_add(kd_sat_mad(0, nnz, sizeof(int32_t) + sizeof(double)),
                                 kd_csr_offsets_bytes(rows)),
                      kd_csr_bytes(rows, nnz, dtype));
}

int kd_csr_from_coo_arrays(int64_t rows, int64_t cols, int64_t nnz, const void *row,
                           const void *col_in, kd_dtype_t index_type, const void *values,
                           kd_dtype_t value_type, kd_dtype_t out_dtype,
                           const kd_csr_limits_t *limits, kd_csr_t **out, kd_err_t *err)
{
    int rc = kd_csr_check_shape(rows, cols, nnz, limits, err);
    if (rc != KD_OK)
        return rc;
    for (int64_t k = 0; k < nnz; k++) {
        int64_t r = kd_load_index(row, index_type, (size_t)k);
        int64_t c = kd_load_index(col_in, index_type, (size_t)k);
        if (r < 0 || r >= rows)
            return kd_err_set(err, KD_EBADREQ, "row[%lld] = %lld is outside 0..%lld", (long long)k,
                              (long long)r, (long long)(rows - 1));
        if (c < 0 || c >= cols)
            return kd_err_set(err, KD_EBADREQ, "col[%lld] = %lld is outside 0..%lld", (long long)k,
                              (long long)c, (long long)(cols - 1));
    }
    /* rows is declared, not sent: its offsets are charged before they are allocated */
    rc = kd_csr_charge(rows, cols, nnz, out_dtype, kd_csr_coo_build_bytes(rows, nnz, out_dtype),
                       limits, err);
    if (rc != KD_OK)
        return rc;
    /* counts and offsets fit int32: nnz <= KD_CSR_INDEX_MAX (kd_csr_check_shape) */
    int32_t *rowptr = kd_malloc_array((size_t)rows + 1, sizeof(int32_t));
    int32_t *col = kd_malloc_array((size_t)nnz, sizeof(int32_t));
    double *val = kd_malloc_array((size_t)nnz, sizeof(double));
    if (rowptr == NULL || col == NULL || val == NULL) {
        rc = kd_err_set(err, KD_ENOMEM, "out of host memory for %lld nonzeros", (long long)nnz);
        goto done;
    }
    memset(rowptr, 0, ((size_t)rows + 1) * sizeof(int32_t));
    for (int64_t k = 0; k < nnz; k++)
        rowptr[kd_load_index(row, index_type, (size_t)k) + 1]++;
    for (int64_t r = 0; r < rows; r++)
        rowptr[r + 1] += rowptr[r];
    /* rowptr[r] is row r's next free slot while scattering (so it ends at row r + 1's start),
     * shifted back afterwards: no second array of rows */
    for (int64_t k = 0; k < nnz; k++) {
        int64_t r = kd_load_index(row, index_type, (size_t)k);
        int32_t at = rowptr[r]++;
        col[at] = (int32_t)kd_load_index(col_in, index_type, (size_t)k);
        val[at] = values != NULL ? kd_load_real(values, value_type, (size_t)k) : 1.0;
    }
    for (int64_t r = rows; r > 0; r--)
        rowptr[r] = rowptr[r - 1];
    rowptr[0] = 0;
    rc = csr_canonicalize(rows, cols, rowptr, col, val, out_dtype, out, err);
done:
    free(rowptr);
    free(col);
    free(val);
    return rc;
}

int kd_csr_convert(const kd_csr_t *csr, kd_dtype_t dtype, kd_csr_t **out, kd_err_t *err)
{
    kd_csr_t *copy;
    int rc = kd_csr_alloc(csr->rows, csr->cols, csr->nnz, dtype, &copy, err);
    if (rc != KD_OK)
        return rc;
    memcpy(copy->indptr, csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
    memcpy(copy->indices, csr->indices, (size_t)csr->nnz * sizeof(int32_t));
    kd_convert_real(copy->values, dtype, csr->values, csr->dtype, (size_t)csr->nnz);
    *out = copy;
    return KD_OK;
}

int kd_csr_hash(const kd_csr_t *csr, uint8_t id[16])
{
    XXH3_state_t *state = XXH3_createState();
    if (state == NULL)
        return KD_ENOMEM;
    const int which = csr->dtype == KD_DTYPE_F32;
    struct kd_csr_pattern *shared = csr->pattern;
    XXH3_state_t *known =
        shared != NULL ? __atomic_load_n(&shared->hashed[which], __ATOMIC_ACQUIRE) : NULL;
    if (known != NULL) {
        XXH3_copyState(state, known);
    } else {
        /* A fixed little-endian header so the id does not depend on struct layout. */
        uint8_t header[32] = {'k', 'r', 'y', 'l', 'o', 'v', 'd', '1'};
        int64_t fields[3] = {csr->rows, csr->cols, csr->nnz};
        memcpy(header + 8, fields, sizeof(fields));
        XXH3_128bits_reset(state);
        XXH3_128bits_update(state, header, sizeof(header));
        uint8_t dtype = (uint8_t)csr->dtype;
        XXH3_128bits_update(state, &dtype, 1);
        XXH3_128bits_update(state, csr->indptr, ((size_t)csr->rows + 1) * sizeof(int32_t));
        XXH3_128bits_update(state, csr->indices, (size_t)csr->nnz * sizeof(int32_t));
        XXH3_state_t *keep = shared != NULL ? XXH3_createState() : NULL;
        XXH3_state_t *none = NULL;
        if (keep != NULL) {
            XXH3_copyState(keep, state);
            if (!__atomic_compare_exchange_n(&shared->hashed[which], &none, keep, 0,
                                             __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                XXH3_freeState(keep); /* another thread published it first */
        }
    }
    XXH3_128bits_update(state, csr->values, (size_t)csr->nnz * kd_dtype_size(csr->dtype));
    XXH128_hash_t h = XXH3_128bits_digest(state);
    XXH3_freeState(state);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, h);
    memcpy(id, canon.digest, 16);
    return KD_OK;
}

void kd_id_to_hex(const uint8_t id[16], char hex[KD_ID_HEX_LEN + 1])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) {
        hex[2 * i] = digits[id[i] >> 4];
        hex[2 * i + 1] = digits[id[i] & 15];
    }
    hex[KD_ID_HEX_LEN] = '\0';
}

static int kd_hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int kd_id_from_hex(const char *hex, size_t len, uint8_t id[16])
{
    if (len != KD_ID_HEX_LEN)
        return -1;
    for (int i = 0; i < 16; i++) {
        int hi = kd_hex_digit(hex[2 * i]), lo = kd_hex_digit(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        id[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

void kd_csr_row_stats(const kd_csr_t *csr, kd_csr_stats_t *stats)
{
    memset(stats, 0, sizeof(*stats));
    if (csr->rows == 0)
        return;
    double sumsq = 0.0;
    int64_t lo = INT64_MAX, hi = 0, empty = 0;
    for (int64_t r = 0; r < csr->rows; r++) {
        int64_t len = csr->indptr[r + 1] - csr->indptr[r];
        lo = len < lo ? len : lo;
        hi = len > hi ? len : hi;
        empty += len == 0;
        sumsq += (double)len * (double)len;
    }
    stats->min_row = lo;
    stats->max_row = hi;
    stats->empty_rows = empty;
    stats->mean_row = (double)csr->nnz / (double)csr->rows;
    double var = sumsq / (double)csr->rows - stats->mean_row * stats->mean_row;
    stats->stddev_row = var > 0.0 ? sqrt(var) : 0.0;
}

void kd_csr_compute_stats(const kd_csr_t *csr, kd_csr_stats_t *stats)
{
    kd_csr_row_stats(csr, stats);
    for (int64_t k = 0; k < csr->nnz; k++)
        if (!isfinite(kd_csr_value(csr, k)))
            stats->nonfinite++;
}

void kd_csr_spmv_ref(const kd_csr_t *csr, const double *x, double alpha, double beta, double *y)
{
    for (int64_t r = 0; r < csr->rows; r++) {
        double sum = 0.0;
        for (int32_t k = csr->indptr[r]; k < csr->indptr[r + 1]; k++)
            sum += kd_csr_value(csr, k) * x[csr->indices[k]];
        y[r] = beta == 0.0 ? alpha * sum : alpha * sum + beta * y[r];
    }
}
