/*
 * The fused AMG hierarchy's refresh (solver/precond/amg/amg.c's kd_amg_refresh): new values on a
 * held pattern, every value computed on the device from old's aggregates and patterns, nothing read
 * back but each coarse level's diagonal (its checks and the Lanczos estimate's D^-1/2) and the
 * coarsest level (its dense inverse).
 *
 * Level by level, as setup (the same formulas, in the same order):
 *   - 1/a_ii on the device, the vectors, lambda_max by Lanczos (kd_amg_level_setup);
 *   - P's values on P's pattern (kernels/precond/amg/amg.cl kd_amg_prolong) from the level's CSR
 * arrays and old's aggregates, R's by a gather through the setup's transpose map;
 *   - A P and R (A P) by their numeric phase alone on the kept patterns (kd_amg_product);
 *   - the next level's matrix: the product's arrays, kept as they are.
 * P, R and the coarse levels are csr_scalar matrices built around device arrays (the fused
 * V-cycle's format): their patterns are old's, retained, their values new. What setup did on the
 * host (aggregation, the prolongator's two passes, the transposes, every upload of a level's
 * host CSR) and the SpGEMMs' symbolic phases are what a refresh saves.
 */
#include "solver/precond/amg/cycle.h"
#include "solver/formats/format.h"

#include "common/checked.h"
#include "common/clock.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * A csr_scalar matrix around device CSR arrays (each retained; values NULL only when nnz is 0):
 * what kd_matrix_upload makes of a host CSR, the arrays being the format's own (format.h:
 * csr_scalar's impl is a kd_format_csr_t), without the host: a scan that found nothing, and the
 * host inverse diagonal left for the caller (a coarse level's, from its device diagonal).
 */
static int kd_amg_csr_matrix(const kd_csr_device_t *dev, kd_matrix_t **out, kd_err_t *err)
{
    kd_matrix_t *m = calloc(1, sizeof(*m));
    kd_format_csr_t *impl = calloc(1, sizeof(*impl));
    if (m == NULL || impl == NULL) {
        free(m);
        free(impl);
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory for a level");
    }
    m->rows = dev->rows;
    m->cols = dev->cols;
    m->nnz = dev->nnz;
    m->dtype = dev->dtype;
    m->format = KD_FMT_CSR_SCALAR;
    m->ops = &kd_format_csr_scalar_ops;
    m->impl = impl;
    m->device_bytes = ((size_t)dev->rows + 1 + (size_t)dev->nnz) * sizeof(int32_t) +
                      (size_t)dev->nnz * kd_dtype_size(dev->dtype);
    kd_matrix_scan_t *s = &m->scan;
    s->non_finite_row = s->non_finite_col = s->bad_diagonal_row = s->negative_diagonal_row = -1;
    s->asymmetric_row = s->asymmetric_col = -1;
    s->symmetric = 1; /* a Galerkin product R A P = P^T A P of a symmetric A */
    impl->indptr = dev->indptr;
    impl->indices = dev->indices;
    impl->values = dev->values;
    const cl_mem mems[3] = {impl->indptr, impl->indices, impl->values};
    for (int i = 0; i < 3; i++)
        if (mems[i] != NULL)
            clRetainMemObject(mems[i]);
    *out = m;
    return KD_OK;
}

/* A csr_scalar matrix's arrays as a device CSR (retained). */
static int kd_amg_view(const kd_matrix_t *m, kd_csr_device_t *out, kd_err_t *err)
{
    const kd_format_csr_t *a = kd_format_csr_scalar_arrays(m);
    if (a == NULL)
        return kd_err_set(err, KD_EINTERNAL, "amg: a fused level is not in csr_scalar");
    *out = (kd_csr_device_t){.rows = m->rows,
                             .cols = m->cols,
                             .nnz = m->nnz,
                             .dtype = m->dtype,
                             .indptr = a->indptr,
                             .indices = a->indices,
                             .values = a->values};
    const cl_mem mems[3] = {out->indptr, out->indices, out->values};
    for (int i = 0; i < 3; i++)
        if (mems[i] != NULL)
            clRetainMemObject(mems[i]);
    return KD_OK;
}

/* Level l >= 1's 1/a_ii in host memory (n values of the dtype, malloc'd), read from its device
 * diagonal and checked as the upload's scan checks a coarse level's: KD_ENOTSPD naming the row
 * of a zero, non-finite or negative a_ii (the Galerkin product of an SPD A has none). */
static int kd_amg_coarse_inverse_diagonal(kd_ocl_t *ocl, kd_amg_t *amg, int l,
                                          const kd_csr_device_t *A, void **inv, kd_err_t *err)
{
    const int64_t n = A->rows;
    const size_t v = kd_dtype_size(amg->dtype);
    kd_vec_t diag = {0};
    *inv = malloc((size_t)n * v + 8);
    void *host = malloc((size_t)n * v + 8);
    int rc = *inv != NULL && host != NULL ? kd_vec_alloc(ocl, n, amg->dtype, &diag, err)
                                          : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_diagonal", 0, kd_amg_global(amg, n), amg->wg,
                           KD_ARGS(KD_ARG_INT(n), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                                   KD_ARG_MEM(A->values), KD_ARG_MEM(diag.mem)),
                           err);
    if (rc == KD_OK)
        rc = kd_vec_read(ocl, &diag, host, amg->dtype, err);
    for (int64_t i = 0; rc == KD_OK && i < n; i++) {
        const double d = kd_load_real(host, amg->dtype, (size_t)i);
        kd_store_real(*inv, amg->dtype, (size_t)i, 1.0 / d);
        if (!(d > 0.0) || !isfinite(kd_load_real(*inv, amg->dtype, (size_t)i)))
            rc = kd_err_set(err, KD_ENOTSPD,
                            "amg: level %d: the diagonal entry of row %lld is %g: the matrix is "
                            "not symmetric positive definite",
                            l, (long long)i, d);
    }
    kd_vec_release(&diag);
    free(host);
    return rc;
}

/* n int32 or dtype values from the host into a new device buffer (NULL when n == 0). */
static int kd_amg_refresh_upload(kd_ocl_t *ocl, const void *host, int64_t n, size_t size,
                                 const char *what, cl_mem *out, kd_err_t *err)
{
    *out = NULL;
    if (n == 0)
        return KD_OK;
    return kd_ocl_buffer_create(ocl, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, (size_t)n * size,
                                (void *)host, what, out, err);
}

/* 1/sqrt(|aggregate j|) for old's aggregates of level O, in the dtype (host, malloc'd). */
static void *kd_amg_scales(const kd_amg_level_t *O, kd_dtype_t dtype)
{
    double *count = calloc((size_t)O->naggs + 1, sizeof(double));
    void *out = malloc((size_t)O->naggs * kd_dtype_size(dtype) + 8);
    if (count != NULL && out != NULL) {
        for (int64_t i = 0; i < O->n; i++)
            if (O->agg[i] >= 0)
                count[O->agg[i]] += 1.0;
        for (int64_t j = 0; j < O->naggs; j++)
            kd_store_real(out, dtype, (size_t)j, count[j] > 0.0 ? 1.0 / sqrt(count[j]) : 0.0);
    } else {
        free(out);
        out = NULL;
    }
    free(count);
    return out;
}

/* Level l's P and R (values new, patterns O's) from the level's CSR arrays dA. */
static int kd_amg_refresh_transfers(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_amg_level_t *O,
                                    const kd_csr_device_t *dA, kd_csr_device_t *dP,
                                    kd_csr_device_t *dR, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    kd_csr_device_t oldP = {0}, oldR = {0};
    cl_mem agg = NULL, scale = NULL, tmap = NULL;
    int rc = kd_amg_view(O->P, &oldP, err);
    if (rc == KD_OK)
        rc = kd_amg_view(O->R, &oldR, err);
    if (rc == KD_OK)
        rc = kd_amg_on_pattern(ocl, &oldP, dP, err);
    if (rc == KD_OK)
        rc = kd_amg_on_pattern(ocl, &oldR, dR, err);
    if (rc == KD_OK && O->agg_mem != NULL) { /* an earlier refresh's: the pattern's alone */
        agg = O->agg_mem, scale = O->scale_mem, tmap = O->tmap_mem;
        const cl_mem mems[3] = {agg, scale, tmap};
        for (int i = 0; i < 3; i++)
            if (mems[i] != NULL)
                clRetainMemObject(mems[i]);
    } else if (rc == KD_OK) {
        void *scales = kd_amg_scales(O, amg->dtype);
        rc = scales != NULL ? KD_OK : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
        if (rc == KD_OK)
            rc = kd_amg_refresh_upload(ocl, O->agg, O->n, sizeof(int32_t), "amg aggregates",
                                       &agg, err);
        if (rc == KD_OK)
            rc = kd_amg_refresh_upload(ocl, scales, O->naggs, kd_dtype_size(amg->dtype),
                                       "amg aggregate scales", &scale, err);
        if (rc == KD_OK)
            rc = kd_amg_refresh_upload(ocl, O->tmap, oldP.nnz, sizeof(int32_t),
                                       "amg transpose map", &tmap, err);
        free(scales);
    }
    const double omega = 4.0 / (3.0 * L->lambda);
    if (rc == KD_OK && dP->nnz > 0)
        rc = kd_amg_launch(ocl, amg, "kd_amg_prolong", 0, kd_amg_global(amg, L->n), amg->wg,
                           KD_ARGS(KD_ARG_INT(L->n), KD_ARG_VALUE(amg->dtype, omega),
                                   KD_ARG_MEM(dA->indptr), KD_ARG_MEM(dA->indices),
                                   KD_ARG_MEM(dA->values), KD_ARG_MEM(agg), KD_ARG_MEM(scale),
                                   KD_ARG_MEM(dP->indptr), KD_ARG_MEM(dP->indices),
                                   KD_ARG_MEM(dP->values)),
                           err);
    if (rc == KD_OK && dR->nnz > 0)
        rc = kd_amg_launch(ocl, amg, "kd_amg_gather", 0, kd_amg_global(amg, dR->nnz), amg->wg,
                           KD_ARGS(KD_ARG_INT(dR->nnz), KD_ARG_MEM(tmap), KD_ARG_MEM(dP->values),
                                   KD_ARG_MEM(dR->values)),
                           err);
    if (rc == KD_OK)
        rc = kd_amg_csr_matrix(dP, &L->P, err);
    if (rc == KD_OK)
        rc = kd_amg_csr_matrix(dR, &L->R, err);
    if (rc == KD_OK) {
        L->lanes_p = kd_amg_lanes(amg, (double)dP->nnz / (double)dP->rows);
        L->lanes_r = kd_amg_lanes(amg, (double)dR->nnz / (double)dR->rows);
    }
    if (rc == KD_OK) { /* this hierarchy's, for the refreshes made from it */
        L->agg_mem = agg, L->scale_mem = scale, L->tmap_mem = tmap;
    } else {
        const cl_mem mems[3] = {agg, scale, tmap};
        for (int i = 0; i < 3; i++)
            if (mems[i] != NULL)
                clReleaseMemObject(mems[i]); /* queued kernels keep what they use */
    }
    kd_csr_device_release(&oldP);
    kd_csr_device_release(&oldR);
    return rc;
}

/* Level l's host side kept for the next refresh: the aggregates and the transpose map, copied. */
static int kd_amg_refresh_keep(kd_amg_level_t *L, const kd_amg_level_t *O, int64_t p_nnz,
                               kd_err_t *err)
{
    L->naggs = O->naggs;
    L->agg = kd_malloc_array((size_t)O->n + 1, sizeof(int32_t));
    L->tmap = kd_malloc_array((size_t)p_nnz + 1, sizeof(int32_t));
    if (L->agg == NULL || L->tmap == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    memcpy(L->agg, O->agg, (size_t)O->n * sizeof(int32_t));
    memcpy(L->tmap, O->tmap, (size_t)p_nnz * sizeof(int32_t));
    kd_amg_keep_pattern(&O->ap, &L->ap); /* (the coarse pattern is the next level's arrays) */
    return KD_OK;
}

/* Level 0's CSR arrays on the device for the Galerkin product: A's own when it is csr_scalar;
 * else the pattern an earlier refresh kept (O->operand) with the values filled from A's format
 * through its shared pattern's maps (kd_matrix_values_canonical: nothing crosses the bus), or,
 * the first time (or where A has no such maps), the host CSR uploaded and its pattern kept in L
 * for the next refresh. */
static int kd_amg_refresh_operand(kd_ocl_t *ocl, const kd_amg_level_t *O, kd_amg_level_t *L,
                                  const kd_matrix_t *A, const kd_csr_t *fine, kd_csr_device_t *dA,
                                  kd_err_t *err)
{
    if (kd_format_csr_scalar_arrays(A) != NULL)
        return kd_amg_operand(ocl, A, fine, dA, err);
    if (O->operand.indptr != NULL && O->operand.rows == A->rows && O->operand.nnz == A->nnz) {
        int rc = kd_amg_on_pattern(ocl, &O->operand, dA, err);
        if (rc == KD_OK && (rc = kd_matrix_values_canonical(ocl, A, dA->values, err)) == KD_OK) {
            kd_amg_keep_pattern(&O->operand, &L->operand);
            return KD_OK;
        }
        kd_csr_device_release(dA);
        if (rc != KD_EUNSUPPORTED)
            return rc;
        kd_err_clear(err);
    }
    int rc = kd_amg_operand(ocl, A, fine, dA, err);
    if (rc == KD_OK)
        kd_amg_keep_pattern(dA, &L->operand);
    return rc;
}

/* Adds the time since t0 to the refresh's step (kd_amg_stats_t.phase_ms, as setup's steps are
 * counted) once the device has done what the step enqueued; now, for the next step's t0. */
static uint64_t kd_amg_refresh_phase(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_phase_t phase,
                                     uint64_t t0)
{
    kd_err_t ignored = {0};
    (void)kd_ocl_finish(ocl, &ignored); /* a failure shows in the step's own next call */
    const uint64_t now = kd_clock_ns();
    amg->phase_ms[phase] += (double)(now - t0) / 1e6;
    return now;
}

int kd_amg_refresh_device(kd_ocl_t *ocl, kd_amg_t *amg, const kd_amg_t *old, const kd_matrix_t *A,
                          const kd_csr_t *fine, kd_err_t *err)
{
    kd_csr_device_t dA = {0};
    int rc = KD_OK;
    for (int l = 0; l < old->levels && rc == KD_OK; l++) {
        const kd_amg_level_t *O = &old->level[l];
        kd_amg_level_t *L = &amg->level[l];
        amg->levels = l + 1;
        void *inv = NULL;
        uint64_t t = kd_clock_ns();
        if (l == 0) {
            L->A = (kd_matrix_t *)A;
            L->n = A->rows;
            L->nnz = A->nnz;
            rc = kd_amg_refresh_operand(ocl, O, L, A, fine, &dA, err);
            if (rc == KD_OK && A->inv_diagonal == NULL)
                rc = kd_err_set(err, KD_EINTERNAL, "amg: the matrix has no inverse diagonal");
        } else {
            rc = kd_amg_coarse_inverse_diagonal(ocl, amg, l, &dA, &inv, err);
        }
        if (rc == KD_OK && (L->n != O->n || L->nnz != O->nnz))
            rc = kd_err_set(err, KD_EINTERNAL, "amg: level %d refreshed on another pattern", l);
        t = kd_amg_refresh_phase(ocl, amg, KD_AMG_PHASE_LEVEL, t);
        if (rc == KD_OK)
            rc = kd_amg_level_setup(ocl, amg, l, l == 0 ? A->inv_diagonal : inv, err);
        t = kd_amg_refresh_phase(ocl, amg, KD_AMG_PHASE_LAMBDA, t);
        if (l > 0)
            L->A->inv_diagonal = inv; /* the matrix's, as an upload's scan leaves it (the tail
                                       * packs it) */
        if (rc != KD_OK)
            break;
        if (l == old->levels - 1) { /* the coarsest: its dense inverse from its host copy */
            kd_csr_t *csr = NULL;
            rc = kd_csr_device_download(ocl, &dA, &csr, err);
            if (rc == KD_OK)
                rc = kd_amg_coarsest(ocl, amg, csr, err);
            kd_csr_free(csr);
            kd_amg_refresh_phase(ocl, amg, KD_AMG_PHASE_COARSEST, t);
            break;
        }
        kd_csr_device_t dP = {0}, dR = {0}, dAP = {0}, dC = {0}, coarse = {0};
        rc = kd_amg_refresh_transfers(ocl, amg, l, O, &dA, &dP, &dR, err);
        if (rc == KD_OK)
            rc = kd_amg_refresh_keep(L, O, dP.nnz, err);
        t = kd_amg_refresh_phase(ocl, amg, KD_AMG_PHASE_TRANSFERS, t);
        if (rc == KD_OK)
            rc = kd_amg_on_pattern(ocl, &O->ap, &dAP, err);
        if (rc == KD_OK)
            rc = kd_amg_view(old->level[l + 1].A, &coarse, err);
        if (rc == KD_OK && (coarse.rows != O->naggs || coarse.cols != O->naggs))
            rc = kd_err_set(err, KD_EINTERNAL, "amg: level %d's coarse pattern is not its own", l);
        if (rc == KD_OK)
            rc = kd_amg_on_pattern(ocl, &coarse, &dC, err);
        kd_csr_device_release(&coarse);
        if (rc == KD_OK)
            rc = kd_amg_product(ocl, amg, &dA, &dP, &dAP, err);
        t = kd_amg_refresh_phase(ocl, amg, KD_AMG_PHASE_AP, t);
        if (rc == KD_OK)
            rc = kd_amg_product(ocl, amg, &dR, &dAP, &dC, err);
        t = kd_amg_refresh_phase(ocl, amg, KD_AMG_PHASE_RAP, t);
        if (rc == KD_OK)
            rc = kd_amg_csr_matrix(&dC, &amg->level[l + 1].A, err);
        kd_csr_device_release(&dA);
        kd_csr_device_release(&dP);
        kd_csr_device_release(&dR);
        kd_csr_device_release(&dAP);
        dA = dC; /* the next level's arrays, held once more by its matrix */
        L->naggs = O->naggs;
        amg->level[l + 1].n = dC.rows;
        amg->level[l + 1].nnz = dC.nnz;
    }
    kd_csr_device_release(&dA);
    return rc;
}
