/*
 * Incomplete factorisations as preconditioners: ilu0 (any square A; M = L U) and ic0 (symmetric
 * positive definite A; M = L L^T, symmetric, so CG may use it). Both are an operator:
 * z = U^-1 L^-1 r for every column.
 *
 * Setup factors A on the host (solver/precond/ilu_factor.c says why) in the order the matrix stores
 * it, P A P^T for a reordered one (the solve runs in that order throughout), and uploads the two
 * triangles, each as its off-diagonal entries in CSR and 1/t_ii.
 *
 * Apply solves the two triangles on the device in one of two ways, option `sweeps`:
 *   0      exact: level-scheduled, one launch per level for all k columns (the levels computed
 *          at setup, rows sorted by level). A 2-D stencil in natural order has ~2 sqrt(n) levels,
 *          a 3-D one ~3 n^(1/3), a tridiagonal matrix n: many small launches.
 *   s > 0  approximate: s Jacobi sweeps per triangle from x = D^-1 b, s launches each over all
 *          rows (a column at a time), as Ginkgo and ParILU do on GPUs. M^-1 is then a fixed
 *          polynomial in the factors; for ic0 the upper one is the lower one's transpose, so M
 *          stays symmetric positive definite and CG stays valid.
 * The default is 2 sweeps (KD_ILU_SWEEPS_DEFAULT). On the H100 (krylov-bench ilu, 1M-row
 * Laplacians, float64) an exact apply cost 8 ms (3-D, 298 levels) to 54 ms (2-D, 1999 levels),
 * tens of SpMVs, where one with a sweep a triangle cost 0.05-0.06 ms; CG to 1e-8 took 0.5 s and
 * 18.6 s exact against 40 ms and 160 ms with 2 sweeps (Jacobi-PCG: 36 ms, 152 ms). One sweep was
 * as fast as two there, three 5-10% slower; two keep more of the exact solves' iterations
 * (494_bus: 102 exact, 240 with one sweep, 151 with two) for little more per iteration.
 */
#include "solver/precond/ilu.h"
#include "solver/precond/match.h"
#include "solver/precond/precond.h"

#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/reorder.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KD_ILU_SWEEPS_DEFAULT 2
#define KD_ILU_SWEEPS_MAX 64

#define KD_ILU_MATCHING_DEFAULT 1

static const char *const kd_ilu0_option_names[] = {"sweeps", "matching", NULL};
static const char *const kd_ic0_option_names[] = {"sweeps", NULL};

/* One triangle on the device. */
typedef struct kd_ilu_side {
    cl_mem indptr, indices, values, inv_diag; /* indices and values NULL when it has no entries */
    cl_mem order;                             /* exact solves: the rows sorted by level */
    int32_t *level_ptr;                       /* host, levels + 1 */
    int32_t levels;
    int64_t nnz;
} kd_ilu_side_t;

typedef struct kd_ilu {
    kd_dtype_t dtype;
    int64_t n;
    int sweeps;
    size_t wg;
    kd_ilu_side_t side[2]; /* lower, upper */
    kd_vec_t scratch[3];   /* sweeps > 0: y = L^-1 r and the sweeps' other iterate, one column;
                            * with a matching, the gathered column P r */
    cl_mem gather;         /* ilu0 with a row matching: perm, row i of the factored P A is
                            * row perm[i] of A (NULL: none) */
    int64_t moved;         /* rows the matching moved */
} kd_ilu_t;

static size_t kd_ilu_plan_bytes(const kd_matrix_t *A)
{
    /* The two triangles hold A's off-diagonal entries between them; both 1/t_ii and indptr, and
     * either the level orders or the sweeps' two vectors (the larger counted). */
    const size_t v = kd_dtype_size(A->dtype), n = (size_t)A->rows;
    /* A row matching (ilu0) adds its permutation and, with sweeps, a gathered column: counted
     * whether or not setup will need them, as the bound it is. */
    return (size_t)A->nnz * (v + sizeof(int32_t)) + 2 * (n + 1) * sizeof(int32_t) + 2 * n * v +
           2 * n * (v > sizeof(int32_t) ? v : sizeof(int32_t)) + n * (sizeof(int32_t) + v);
}

static int kd_ilu_upload(kd_ocl_t *ocl, const void *host, size_t bytes, const char *what,
                         cl_mem *out, size_t *total, kd_err_t *err)
{
    if (bytes == 0)
        return KD_OK; /* an empty array stays NULL: the kernels never read it */
    *total += bytes;
    return kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, bytes, (void *)host,
                                what, out, err);
}

/* n doubles as the dtype's values in a new malloc'd array (recip: 1/x each). */
static void *kd_ilu_values(const double *x, int64_t n, kd_dtype_t dtype, int recip)
{
    void *out = malloc((size_t)n * kd_dtype_size(dtype) + 1);
    for (int64_t i = 0; out != NULL && i < n; i++)
        kd_store_real(out, dtype, (size_t)i, recip ? 1.0 / x[i] : x[i]);
    return out;
}

static int kd_ilu_upload_side(kd_ocl_t *ocl, kd_ilu_t *ilu, const kd_ilu_tri_t *t, int lower,
                              size_t *bytes, kd_err_t *err)
{
    kd_ilu_side_t *s = &ilu->side[lower ? 0 : 1];
    const size_t v = kd_dtype_size(ilu->dtype), n = (size_t)t->n;
    void *values = kd_ilu_values(t->values, t->nnz, ilu->dtype, 0);
    void *inv = kd_ilu_values(t->diag, t->n, ilu->dtype, 1);
    int32_t *order = NULL;
    int rc = values != NULL && inv != NULL
                 ? KD_OK
                 : kd_err_set(err, KD_ENOMEM, "incomplete factorisation: out of host memory");
    s->nnz = t->nnz;
    if (rc == KD_OK)
        rc = kd_ilu_upload(ocl, t->indptr, (n + 1) * sizeof(int32_t), "factor row pointers",
                           &s->indptr, bytes, err);
    if (rc == KD_OK)
        rc = kd_ilu_upload(ocl, t->indices, (size_t)t->nnz * sizeof(int32_t),
                           "factor column indices", &s->indices, bytes, err);
    if (rc == KD_OK)
        rc =
            kd_ilu_upload(ocl, values, (size_t)t->nnz * v, "factor values", &s->values, bytes, err);
    if (rc == KD_OK)
        rc = kd_ilu_upload(ocl, inv, n * v, "factor inverse diagonal", &s->inv_diag, bytes, err);
    if (rc == KD_OK && ilu->sweeps == 0)
        rc = kd_ilu_levels(t, lower, &order, &s->level_ptr, &s->levels, err);
    if (rc == KD_OK && ilu->sweeps == 0)
        rc = kd_ilu_upload(ocl, order, n * sizeof(int32_t), "factor level order", &s->order, bytes,
                           err);
    free(order);
    free(values);
    free(inv);
    return rc;
}

static int kd_ilu_read_sweeps(const kd_precond_t *P, int *sweeps, kd_err_t *err)
{
    const double s = kd_precond_option(&P->options, "sweeps", KD_ILU_SWEEPS_DEFAULT);
    if (!(s >= 0 && s <= KD_ILU_SWEEPS_MAX) || s != floor(s))
        return kd_err_set(err, KD_EBADREQ,
                          "%s: sweeps = %g is not an integer in 0..%d (0: exact triangular "
                          "solves)",
                          P->ops->name, s, KD_ILU_SWEEPS_MAX);
    *sweeps = (int)s;
    return KD_OK;
}

static int kd_ilu_read_matching(const kd_precond_t *P, int *matching, kd_err_t *err)
{
    const double m = kd_precond_option(&P->options, "matching", KD_ILU_MATCHING_DEFAULT);
    if (m != 0 && m != 1 && m != 2)
        return kd_err_set(err, KD_EBADREQ,
                          "%s: matching = %g is not 0 (never), 1 (when the diagonal has a zero "
                          "or missing entry) or 2 (always)",
                          P->ops->name, m);
    *matching = (int)m;
    return KD_OK;
}

/* Whether some diagonal entry of csr is missing or 0. */
static int kd_ilu_zero_diagonal(const kd_csr_t *csr)
{
    for (int64_t i = 0; i < csr->rows; i++) {
        int found = 0;
        for (int32_t k = csr->indptr[i]; k < csr->indptr[i + 1] && !found; k++)
            found = csr->indices[k] == i && kd_csr_value(csr, k) != 0.0;
        if (!found)
            return 1;
    }
    return 0;
}

/*
 * ilu0's row matching: when asked to, *matched = Q stored with Q a maximum transversal
 * (solver/precond/match.h), *names the client's names of its rows (for the factorisation's
 * messages) and ilu->gather Q on the device; else all three stay NULL.
 */
static int kd_ilu_match(kd_ocl_t *ocl, kd_ilu_t *ilu, int matching, const kd_csr_t *stored,
                        const int32_t *rows, kd_csr_t **matched, int32_t **names, size_t *bytes,
                        kd_err_t *err)
{
    *matched = NULL;
    *names = NULL;
    if (matching == 0 || (matching == 1 && !kd_ilu_zero_diagonal(stored)))
        return KD_OK;
    int32_t *perm = NULL;
    /* 1 keeps every nonzero a_ii and moves only the rows it must; 2 seeks large entries for the
     * whole diagonal. On adder_dcop_05 (12 zero a_ii) 1 moved 18 rows and GMRES + ILU(0) took 40
     * iterations, where 2 moved 73 and took 1970 (bicgstab, exact solves: 26 against 203). */
    const unsigned flags =
        matching == 1 ? KD_MATCH_KEEP_DIAGONAL | KD_MATCH_WEIGHTED : KD_MATCH_WEIGHTED;
    int rc = kd_match_rows(stored, flags, rows, &perm, err);
    if (rc != KD_OK) {
        if (err != NULL)
            kd_err_prefix(err, "ilu0");
        return rc;
    }
    *names = malloc((size_t)ilu->n * sizeof(int32_t) + 1);
    if (*names == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "ilu0: out of host memory");
    for (int64_t i = 0; rc == KD_OK && i < ilu->n; i++) {
        (*names)[i] = rows != NULL ? rows[perm[i]] : perm[i];
        ilu->moved += perm[i] != i;
    }
    if (rc == KD_OK)
        rc = kd_match_permute_rows(stored, perm, matched, err);
    if (rc == KD_OK)
        rc = kd_ilu_upload(ocl, perm, (size_t)ilu->n * sizeof(int32_t), "ilu0 row matching",
                           &ilu->gather, bytes, err);
    free(perm);
    return rc;
}

/* The checks setup and refresh share: A square, csr its, and for ic0 no negative a_ii. */
static int kd_ilu_check_matrix(const kd_matrix_t *A, const kd_csr_t *csr, const char *name, int ic,
                               kd_err_t *err)
{
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "%s needs a square matrix, not %lld x %lld", name,
                          (long long)A->rows, (long long)A->cols);
    if (csr->rows != A->rows || csr->nnz != A->nnz)
        return kd_err_set(err, KD_EINTERNAL, "%s: the host CSR is not the matrix's", name);
    if (ic && A->scan.negative_diagonal_row >= 0)
        return kd_err_set(err, KD_ENOTSPD,
                          "ic0: the diagonal entry of row %lld is %g < 0: the matrix is not "
                          "symmetric positive definite",
                          (long long)A->scan.negative_diagonal_row,
                          A->scan.negative_diagonal_value);
    return KD_OK;
}

/* P's kd_ilu_t, its options read. */
static int kd_ilu_new(kd_ocl_t *ocl, const kd_matrix_t *A, kd_precond_t *P, kd_ilu_t **out,
                      kd_err_t *err)
{
    kd_ilu_t *ilu = calloc(1, sizeof(*ilu));
    *out = ilu;
    if (ilu == NULL)
        return kd_err_set(err, KD_ENOMEM, "%s: out of host memory", P->ops->name);
    P->impl = ilu;
    ilu->dtype = A->dtype;
    ilu->n = A->rows;
    ilu->wg = kd_ocl_work_group_size(ocl);
    return kd_ilu_read_sweeps(P, &ilu->sweeps, err);
}

/* The factors follow the matrix as stored, P A P^T when it is reordered (*permuted, the
 * caller's to free); *rows the client's names of its rows for messages (perm[new] = old), or
 * NULL. */
static int kd_ilu_stored(const kd_matrix_t *A, const kd_csr_t *csr, const kd_csr_t **stored,
                         kd_csr_t **permuted, const int32_t **rows, kd_err_t *err)
{
    *stored = csr;
    *permuted = NULL;
    *rows = NULL;
    if (A->order.kind == KD_REORDER_NONE)
        return KD_OK;
    const int rc = kd_reorder_apply(csr, A->order.perm, permuted, err);
    *stored = *permuted;
    *rows = A->order.perm;
    return rc;
}

/* The sweeps' scratch columns (and the gathered one with a matching). */
static int kd_ilu_scratch(kd_ocl_t *ocl, kd_ilu_t *ilu, size_t *bytes, kd_err_t *err)
{
    int rc = KD_OK;
    for (int i = 0; i < (ilu->gather != NULL ? 3 : 2) && rc == KD_OK && ilu->sweeps > 0; i++) {
        rc = kd_vec_alloc(ocl, ilu->n, ilu->dtype, &ilu->scratch[i], err);
        *bytes += (size_t)ilu->n * kd_dtype_size(ilu->dtype);
    }
    return rc == KD_OK ? kd_ocl_finish(ocl, err) : rc;
}

static void kd_ilu_log(const char *name, const char *what, const kd_matrix_t *A,
                       const kd_ilu_t *ilu, uint64_t t0, size_t bytes)
{
    KD_INFO(name,
            "%s rows=%lld lower_nnz=%lld upper_nnz=%lld sweeps=%d levels=%d/%d matching=%s "
            "moved=%lld setup_ms=%.1f device_bytes=%zu",
            what, (long long)A->rows, (long long)ilu->side[0].nnz, (long long)ilu->side[1].nnz,
            ilu->sweeps, ilu->side[0].levels, ilu->side[1].levels,
            ilu->gather != NULL ? "yes" : "no", (long long)ilu->moved,
            (double)(kd_clock_ns() - t0) / 1e6, bytes);
}

static int kd_ilu_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr, kd_precond_t *P,
                        int ic, kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && P != NULL && csr != NULL);
    const char *name = P->ops->name;
    kd_ilu_t *ilu;
    int rc = kd_ilu_check_matrix(A, csr, name, ic, err);
    if (rc == KD_OK)
        rc = kd_ilu_new(ocl, A, P, &ilu, err);
    int matching = 0;
    if (rc == KD_OK && !ic)
        rc = kd_ilu_read_matching(P, &matching, err);
    if (rc != KD_OK || A->rows == 0)
        return rc;
    const uint64_t t0 = kd_clock_ns();
    const kd_csr_t *stored;
    kd_csr_t *permuted;
    const int32_t *rows;
    if ((rc = kd_ilu_stored(A, csr, &stored, &permuted, &rows, err)) != KD_OK)
        return rc;
    size_t bytes = 0;
    kd_csr_t *matched = NULL;
    int32_t *names = NULL;
    kd_ilu_factors_t f;
    rc = kd_ilu_match(ocl, ilu, matching, stored, rows, &matched, &names, &bytes, err);
    if (rc == KD_OK)
        rc = ic ? kd_ic0_factor(stored, rows, &f, err)
                : kd_ilu0_factor(matched != NULL ? matched : stored, matched != NULL ? names : rows,
                                 &f, err);
    kd_csr_free(permuted);
    kd_csr_free(matched);
    free(names);
    if (rc != KD_OK)
        return rc;
    rc = kd_ilu_upload_side(ocl, ilu, &f.lower, 1, &bytes, err);
    if (rc == KD_OK)
        rc = kd_ilu_upload_side(ocl, ilu, &f.upper, 0, &bytes, err);
    kd_ilu_factors_free(&f);
    if (rc == KD_OK)
        rc = kd_ilu_scratch(ocl, ilu, &bytes, err);
    if (rc != KD_OK)
        return rc; /* kd_precond_get releases */
    P->device_bytes = bytes;
    kd_ilu_log(name, "setup", A, ilu, t0, bytes);
    return KD_OK;
}

/* A triangle of the same pattern as old's: its row pointers, columns and level schedule shared
 * (retained), its values and 1/t_ii uploaded. Shared buffers count in bytes too: this setup keeps
 * them alive when the old one is freed. */
static int kd_ilu_refresh_side(kd_ocl_t *ocl, kd_ilu_t *ilu, const kd_ilu_side_t *old,
                               const kd_ilu_tri_t *t, int lower, size_t *bytes, kd_err_t *err)
{
    kd_ilu_side_t *s = &ilu->side[lower ? 0 : 1];
    const size_t v = kd_dtype_size(ilu->dtype), n = (size_t)t->n;
    if (t->nnz != old->nnz)
        return kd_err_set(err, KD_EINTERNAL,
                          "incomplete factorisation: refreshed on another "
                          "pattern");
    s->nnz = t->nnz;
    s->levels = old->levels;
    cl_mem *mine[] = {&s->indptr, &s->indices, &s->order};
    const cl_mem theirs[] = {old->indptr, old->indices, old->order};
    for (int i = 0; i < 3; i++)
        if ((*mine[i] = theirs[i]) != NULL)
            clRetainMemObject(theirs[i]);
    *bytes += (n + 1 + (size_t)t->nnz + (old->order != NULL ? n : 0)) * sizeof(int32_t);
    if (old->level_ptr != NULL) {
        s->level_ptr = kd_malloc_array((size_t)old->levels + 1, sizeof(int32_t));
        if (s->level_ptr == NULL)
            return kd_err_set(err, KD_ENOMEM, "incomplete factorisation: out of host memory");
        memcpy(s->level_ptr, old->level_ptr, ((size_t)old->levels + 1) * sizeof(int32_t));
    }
    void *values = kd_ilu_values(t->values, t->nnz, ilu->dtype, 0);
    void *inv = kd_ilu_values(t->diag, t->n, ilu->dtype, 1);
    int rc = values != NULL && inv != NULL
                 ? KD_OK
                 : kd_err_set(err, KD_ENOMEM, "incomplete factorisation: out of host memory");
    if (rc == KD_OK)
        rc =
            kd_ilu_upload(ocl, values, (size_t)t->nnz * v, "factor values", &s->values, bytes, err);
    if (rc == KD_OK)
        rc = kd_ilu_upload(ocl, inv, n * v, "factor inverse diagonal", &s->inv_diag, bytes, err);
    free(values);
    free(inv);
    return rc;
}

/*
 * New values on old's pattern: only the numeric factorisation runs again (on the host, as at
 * setup); the factors' patterns on the device and the exact solves' level schedules are old's,
 * shared. ilu0 declines when a row matching is in play (old has one, or these values have a zero
 * diagonal that would need one): the matching depends on the values, so setup redoes it.
 */
static int kd_ilu_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                          const kd_csr_t *csr, kd_precond_t *P, int ic, int *declined,
                          kd_err_t *err)
{
    assert(ocl != NULL && old != NULL && A != NULL && P != NULL && csr != NULL);
    const char *name = P->ops->name;
    const kd_ilu_t *o = old->impl;
    kd_ilu_t *ilu;
    int matching = 0;
    *declined = 1;
    int rc = kd_ilu_check_matrix(A, csr, name, ic, err);
    if (rc == KD_OK && !ic)
        rc = kd_ilu_read_matching(P, &matching, err);
    if (rc != KD_OK || o == NULL || o->n != A->rows || o->dtype != A->dtype ||
        (!ic && (o->gather != NULL || matching == 2)))
        return rc;
    const uint64_t t0 = kd_clock_ns();
    const kd_csr_t *stored;
    kd_csr_t *permuted;
    const int32_t *rows;
    if ((rc = kd_ilu_stored(A, csr, &stored, &permuted, &rows, err)) != KD_OK)
        return rc;
    if (!ic && matching == 1 && kd_ilu_zero_diagonal(stored)) {
        kd_csr_free(permuted);
        return KD_OK;
    }
    *declined = 0;
    kd_ilu_factors_t f = {0};
    rc = kd_ilu_new(ocl, A, P, &ilu, err);
    if (rc == KD_OK && ilu->sweeps != o->sweeps)
        rc = kd_err_set(err, KD_EINTERNAL, "%s: refreshed with other options", name);
    if (rc == KD_OK && A->rows > 0)
        rc = ic ? kd_ic0_factor(stored, rows, &f, err) : kd_ilu0_factor(stored, rows, &f, err);
    kd_csr_free(permuted);
    if (rc != KD_OK || A->rows == 0)
        return rc;
    size_t bytes = 0;
    rc = kd_ilu_refresh_side(ocl, ilu, &o->side[0], &f.lower, 1, &bytes, err);
    if (rc == KD_OK)
        rc = kd_ilu_refresh_side(ocl, ilu, &o->side[1], &f.upper, 0, &bytes, err);
    kd_ilu_factors_free(&f);
    if (rc == KD_OK)
        rc = kd_ilu_scratch(ocl, ilu, &bytes, err);
    if (rc != KD_OK)
        return rc; /* kd_precond_refresh releases */
    P->device_bytes = bytes;
    kd_ilu_log(name, "refresh", A, ilu, t0, bytes);
    return KD_OK;
}

static int kd_ilu0_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                           const kd_csr_t *csr, kd_precond_t *P, int *declined, kd_err_t *err)
{
    return kd_ilu_refresh(ocl, old, A, csr, P, 0, declined, err);
}

static int kd_ic0_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                          const kd_csr_t *csr, kd_precond_t *P, int *declined, kd_err_t *err)
{
    return kd_ilu_refresh(ocl, old, A, csr, P, 1, declined, err);
}

static int kd_ilu0_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr, kd_precond_t *P,
                         kd_err_t *err)
{
    return kd_ilu_setup(ocl, A, csr, P, 0, err);
}

static int kd_ic0_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr, kd_precond_t *P,
                        kd_err_t *err)
{
    return kd_ilu_setup(ocl, A, csr, P, 1, err);
}

/* Kernel `name` of program `program` ("ilu", or "permute" for the matching's gather). */
static int kd_ilu_program_kernel(kd_ocl_t *ocl, const kd_ilu_t *ilu, const char *program,
                                 const char *name, cl_kernel *kernel, kd_err_t *err)
{
    char options[32];
    snprintf(options, sizeof(options), "-DKD_WG_SIZE=%zu", ilu->wg);
    return kd_ocl_kernel(ocl, program, ilu->dtype, options, name, kernel, err);
}

static int kd_ilu_kernel(kd_ocl_t *ocl, const kd_ilu_t *ilu, const char *name, cl_kernel *kernel,
                         kd_err_t *err)
{
    return kd_ilu_program_kernel(ocl, ilu, "ilu", name, kernel, err);
}

static size_t kd_ilu_global(const kd_ilu_t *ilu, int64_t rows)
{
    return ((size_t)rows + ilu->wg - 1) / ilu->wg * ilu->wg;
}

/* Exact: z = L^-1 r level by level, then z = U^-1 z in place. */
static int kd_ilu_apply_levels(kd_ocl_t *ocl, const kd_ilu_t *ilu, const kd_multivec_t *r,
                               kd_multivec_t *z, kd_err_t *err)
{
    /* With a row matching the forward solve reads (P r)_i = r_perm[i] in place of r_i. */
    const char *fname = ilu->gather != NULL ? "kd_ilu_level_gather" : "kd_ilu_level";
    cl_kernel forward, backward;
    int rc = kd_ilu_kernel(ocl, ilu, fname, &forward, err);
    if (rc == KD_OK)
        rc = kd_ilu_kernel(ocl, ilu, "kd_ilu_level_in_place", &backward, err);
    for (int s = 0; s < 2 && rc == KD_OK; s++) {
        const kd_ilu_side_t *S = &ilu->side[s];
        for (int32_t l = 0; l < S->levels && rc == KD_OK; l++) {
            const int32_t count = S->level_ptr[l + 1] - S->level_ptr[l];
            const kd_ocl_range_t range =
                kd_ocl_range_2d(kd_ilu_global(ilu, count), (size_t)r->k, ilu->wg, 1);
            if (s == 0 && ilu->gather != NULL)
                rc = kd_ocl_run(
                    ocl, forward, fname, range,
                    KD_ARGS(KD_ARG_INT(count), KD_ARG_INT(S->level_ptr[l]), KD_ARG_INT(r->ld),
                            KD_ARG_MEM(ilu->gather), KD_ARG_MEM(S->order), KD_ARG_MEM(S->indptr),
                            KD_ARG_MEM(S->indices), KD_ARG_MEM(S->values), KD_ARG_MEM(S->inv_diag),
                            KD_ARG_MEM(r->mem), KD_ARG_MEM(z->mem)),
                    NULL, err);
            else if (s == 0)
                rc = kd_ocl_run(ocl, forward, fname, range,
                                KD_ARGS(KD_ARG_INT(count), KD_ARG_INT(S->level_ptr[l]),
                                        KD_ARG_INT(r->ld), KD_ARG_MEM(S->order),
                                        KD_ARG_MEM(S->indptr), KD_ARG_MEM(S->indices),
                                        KD_ARG_MEM(S->values), KD_ARG_MEM(S->inv_diag),
                                        KD_ARG_MEM(r->mem), KD_ARG_MEM(z->mem)),
                                NULL, err);
            else
                rc = kd_ocl_run(
                    ocl, backward, "kd_ilu_level_in_place", range,
                    KD_ARGS(KD_ARG_INT(count), KD_ARG_INT(S->level_ptr[l]), KD_ARG_INT(z->ld),
                            KD_ARG_MEM(S->order), KD_ARG_MEM(S->indptr), KD_ARG_MEM(S->indices),
                            KD_ARG_MEM(S->values), KD_ARG_MEM(S->inv_diag), KD_ARG_MEM(z->mem)),
                    NULL, err);
        }
    }
    return rc;
}

/* `sweeps` Jacobi sweeps of side s on one column: T out = b, from out_0 = D^-1 b. The iterates
 * alternate between `last` (which holds the final one) and `other`. */
static int kd_ilu_sweeps(kd_ocl_t *ocl, const kd_ilu_t *ilu, cl_kernel kernel, int s, cl_mem b,
                         cl_mem last, cl_mem other, kd_err_t *err)
{
    const kd_ilu_side_t *S = &ilu->side[s];
    int rc = KD_OK;
    cl_mem in = b;
    for (int t = 1; t <= ilu->sweeps && rc == KD_OK; t++) {
        cl_mem out = (ilu->sweeps - t) % 2 == 0 ? last : other;
        rc = kd_ocl_run(
            ocl, kernel, "kd_ilu_sweep", kd_ocl_range_2d(kd_ilu_global(ilu, ilu->n), 1, ilu->wg, 1),
            KD_ARGS(KD_ARG_INT(ilu->n), KD_ARG_INT(ilu->n), KD_ARG_INT(t == 1),
                    KD_ARG_MEM(S->indptr), KD_ARG_MEM(S->indices), KD_ARG_MEM(S->values),
                    KD_ARG_MEM(S->inv_diag), KD_ARG_MEM(b), KD_ARG_MEM(in), KD_ARG_MEM(out)),
            NULL, err);
        in = out;
    }
    return rc;
}

static int kd_ilu_apply(kd_ocl_t *ocl, const kd_precond_t *P, const kd_multivec_t *r,
                        kd_multivec_t *z, kd_err_t *err)
{
    assert(P != NULL && r != NULL && z != NULL);
    const kd_ilu_t *ilu = P->impl;
    if (r->n != ilu->n || z->n != ilu->n || r->k != z->k || r->ld != z->ld ||
        r->dtype != ilu->dtype || z->dtype != ilu->dtype || r->mem == z->mem)
        return kd_err_set(err, KD_EINTERNAL, "%s: applied to vectors of another shape",
                          P->ops->name);
    if (ilu->n == 0 || r->k == 0)
        return KD_OK;
    if (ilu->sweeps == 0)
        return kd_ilu_apply_levels(ocl, ilu, r, z, err);
    cl_kernel kernel, gather = NULL;
    int rc = kd_ilu_kernel(ocl, ilu, "kd_ilu_sweep", &kernel, err);
    if (rc == KD_OK && ilu->gather != NULL)
        rc = kd_ilu_program_kernel(ocl, ilu, "permute", "kd_permute_in", &gather, err);
    for (int64_t c = 0; c < r->k && rc == KD_OK; c++) {
        cl_mem y = ilu->scratch[0].mem, other = ilu->scratch[1].mem, b = r->cols[c].mem;
        /* The sweeps read b once per sweep: gathered once, into a column of its own. */
        if (ilu->gather != NULL) {
            b = ilu->scratch[2].mem;
            rc = kd_ocl_run(ocl, gather, "kd_permute_in",
                            kd_ocl_range_2d(kd_ilu_global(ilu, ilu->n), 1, ilu->wg, 1),
                            KD_ARGS(KD_ARG_INT(ilu->n), KD_ARG_MEM(ilu->gather),
                                    KD_ARG_MEM(r->cols[c].mem), KD_ARG_MEM(b)),
                            NULL, err);
        }
        if (rc == KD_OK)
            rc = kd_ilu_sweeps(ocl, ilu, kernel, 0, b, y, other, err);
        if (rc == KD_OK)
            rc = kd_ilu_sweeps(ocl, ilu, kernel, 1, y, z->cols[c].mem, other, err);
    }
    return rc;
}

static void kd_ilu_release(kd_precond_t *P)
{
    kd_ilu_t *ilu = P->impl;
    if (ilu == NULL)
        return;
    if (ilu->gather != NULL)
        clReleaseMemObject(ilu->gather);
    kd_vec_release(&ilu->scratch[2]);
    for (int s = 0; s < 2; s++) {
        kd_ilu_side_t *S = &ilu->side[s];
        cl_mem mems[] = {S->indptr, S->indices, S->values, S->inv_diag, S->order};
        for (size_t i = 0; i < sizeof(mems) / sizeof(mems[0]); i++)
            if (mems[i] != NULL)
                clReleaseMemObject(mems[i]);
        free(S->level_ptr);
        kd_vec_release(&ilu->scratch[s]);
    }
    free(ilu);
    P->impl = NULL;
}

const kd_precond_ops_t kd_precond_ilu0 = {
    .name = "ilu0",
    .summary = "incomplete LU on A's pattern, M = L U (any square A, its rows matched to a "
               "nonzero diagonal when it has a zero; triangular solves exact with sweeps = 0, "
               "else that many Jacobi sweeps)",
    .forms = KD_PRECOND_OPERATOR,
    .symmetric = 0,
    .needs_csr = 1,
    .option_names = kd_ilu0_option_names,
    .plan_bytes = kd_ilu_plan_bytes,
    .setup = kd_ilu0_setup,
    .apply = kd_ilu_apply,
    .release = kd_ilu_release,
    .refresh = kd_ilu0_refresh,
};

const kd_precond_ops_t kd_precond_ic0 = {
    .name = "ic0",
    .summary = "incomplete Cholesky on A's pattern, M = L L^T (symmetric positive definite A; "
               "triangular solves as ilu0's)",
    .forms = KD_PRECOND_OPERATOR,
    .symmetric = 1,
    .needs_csr = 1,
    .option_names = kd_ic0_option_names,
    .plan_bytes = kd_ilu_plan_bytes,
    .setup = kd_ic0_setup,
    .apply = kd_ilu_apply,
    .release = kd_ilu_release,
    .refresh = kd_ic0_refresh,
};

int kd_ilu_describe(const kd_precond_t *P, kd_ilu_stats_t *out, kd_err_t *err)
{
    if (P == NULL || (P->ops != &kd_precond_ilu0 && P->ops != &kd_precond_ic0) || P->impl == NULL)
        return kd_err_set(err, KD_EBADREQ, "not an ilu0 or ic0 preconditioner");
    const kd_ilu_t *ilu = P->impl;
    memset(out, 0, sizeof(*out));
    out->lower_nnz = ilu->side[0].nnz;
    out->upper_nnz = ilu->side[1].nnz;
    out->lower_levels = ilu->side[0].levels;
    out->upper_levels = ilu->side[1].levels;
    out->sweeps = ilu->sweeps;
    out->matched = ilu->gather != NULL;
    out->moved = ilu->moved;
    return KD_OK;
}
