/*
 * Smoothed-aggregation algebraic multigrid as CG's preconditioner: M^-1 r is one V-cycle.
 *
 * Setup (once per matrix, kept with it like every preconditioner), level by level from A's
 * canonical host CSR (in the order the matrix stores it):
 *   - the level's matrix on the device (level 0 is A itself; coarser ones in the format the
 *     selection's heuristic picks) and its 1/a_ii;
 *   - lambda_max of D^-1 A by Lanczos on the device (D^-1/2 A D^-1/2, a few steps, the largest
 *     Ritz value from the tridiagonal): the Chebyshev smoother's interval and the prolongator's
 *     damping omega = 4 / (3 lambda);
 *   - on the host (solver/precond/amg/coarsen.c): aggregates of the strength graph, the smoothed
 *     prolongator P = (I - omega D^-1 A) T, R = P^T; with the option aggregation = 1 the
 *     aggregates, P and R on the device (solver/precond/amg/aggregate.c, prolong.c), read back;
 *   - the Galerkin product A_c = R (A P) on the device with two SpGEMMs (solver/products/spgemm.h),
 * read back for the next level's aggregation; until a level has coarse_size rows or fewer, where
 * the dense inverse (Cholesky on the host) is kept on the device.
 *
 * Refresh (new values on the pattern of a matrix that holds a hierarchy, kd_amg_refresh): the
 * aggregates, levels and products' patterns are kept, the values computed again (on the device
 * for the fused hierarchy: solver/precond/amg/refresh.c).
 *
 * This file is the preconditioner's ops and the order of setup's steps; the steps on one level
 * that the cycles and the refresh share (launches, the smoother, Lanczos, the coarsest inverse,
 * the products' operands) are solver/precond/amg/level.c's, below every other AMG file.
 *
 * Apply, per right-hand side: the V-cycle with Chebyshev smoothing of degree `degree` before and
 * after (the same polynomial in D^-1 A, self-adjoint in the A inner product, so M is symmetric
 * and CG stays valid), restriction and prolongation as SpMVs with R and P, x_c = A_c^-1 b_c on
 * the coarsest level. Several right-hand sides run the same cycle on all columns at once, each
 * product an SpMM (solver/precond/amg/block.c).
 */
#include "solver/precond/amg/amg.h"
#include "solver/precond/amg/cycle.h"
#include "solver/formats/format.h"
#include "solver/precond/precond.h"
#include "solver/formats/select.h"
#include "solver/products/spgemm.h"

#include "common/checked.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/reorder.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const kd_amg_phase_names[KD_AMG_PHASES] = {
    "level", "lambda", "aggregate", "prolong", "transpose", "transfers", "ap", "rap", "coarsest", "tail"};

/* Adds the time since t0 to the phase's; now, for the next phase's t0. */
static uint64_t kd_amg_phase_add(kd_amg_t *amg, kd_amg_phase_t phase, uint64_t t0)
{
    const uint64_t now = kd_clock_ns();
    amg->phase_ms[phase] += (double)(now - t0) / 1e6;
    return now;
}

static const char *const kd_amg_option_names[] = {
    "threshold", "max_levels", "coarse_size", "degree", "block_size", "fused", "tail_rows",
    "aggregation", NULL};

/* The request's options over the defaults, each checked. */
static int kd_amg_read_options(const kd_precond_options_t *o, kd_amg_options_t *opt, kd_err_t *err)
{
    kd_amg_options_default(opt);
    opt->threshold = kd_precond_option(o, "threshold", opt->threshold);
    const double levels = kd_precond_option(o, "max_levels", opt->max_levels);
    const double coarse = kd_precond_option(o, "coarse_size", (double)opt->coarse_size);
    const double degree = kd_precond_option(o, "degree", opt->degree);
    const double block = kd_precond_option(o, "block_size", opt->block_size);
    const double fused = kd_precond_option(o, "fused", opt->fused);
    const double tail = kd_precond_option(o, "tail_rows", (double)opt->tail_rows);
    const double aggregation = kd_precond_option(o, "aggregation", opt->aggregation);
    if (aggregation != 0.0 && aggregation != 1.0)
        return kd_err_set(err, KD_EBADREQ, "amg: aggregation = %g is not 0 (host) or 1 (device)",
                          aggregation);
    opt->aggregation = (int)aggregation;
    if (fused != 0.0 && fused != 1.0)
        return kd_err_set(err, KD_EBADREQ, "amg: fused = %g is not 0 or 1", fused);
    if (!(tail >= 0 && tail <= KD_AMG_TAIL_ROWS_MAX) || tail != floor(tail))
        return kd_err_set(err, KD_EBADREQ, "amg: tail_rows = %g is not an integer in 0..%d", tail,
                          KD_AMG_TAIL_ROWS_MAX);
    opt->fused = (int)fused;
    opt->tail_rows = (int64_t)tail;
    if (!(block >= 1 && block <= 8) || block != floor(block))
        return kd_err_set(err, KD_EBADREQ, "amg: block_size = %g is not an integer in 1..8", block);
    opt->block_size = (int)block;
    if (!(opt->threshold >= 0.0 && opt->threshold < 1.0))
        return kd_err_set(err, KD_EBADREQ, "amg: threshold = %g is not in [0, 1)", opt->threshold);
    if (!(levels >= 1 && levels <= KD_AMG_LEVELS_MAX) || levels != floor(levels))
        return kd_err_set(err, KD_EBADREQ, "amg: max_levels = %g is not an integer in 1..%d",
                          levels, KD_AMG_LEVELS_MAX);
    if (!(coarse >= 1 && coarse <= KD_AMG_DENSE_MAX) || coarse != floor(coarse))
        return kd_err_set(err, KD_EBADREQ, "amg: coarse_size = %g is not an integer in 1..%d",
                          coarse, KD_AMG_DENSE_MAX);
    if (!(degree >= 1 && degree <= 8) || degree != floor(degree))
        return kd_err_set(err, KD_EBADREQ, "amg: degree = %g is not an integer in 1..8", degree);
    opt->max_levels = (int)levels;
    opt->coarse_size = (int64_t)coarse;
    opt->degree = (int)degree;
    return KD_OK;
}

static size_t kd_amg_plan_bytes(const kd_matrix_t *A)
{
    /* A typical hierarchy: the levels' matrices and transfers about A's size again, four vectors
     * per row over the levels. Corrected after setup. */
    return A->device_bytes + (size_t)A->rows * 6 * kd_dtype_size(A->dtype);
}

/* ---------------------------------------------------------------------------------------------
 * Apply: the V-cycle. */

int kd_amg_vcycle(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_vec_t *b, kd_vec_t *x,
                  kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    if (l == amg->levels - 1) {
        if (amg->coarse_inverse == NULL)
            return kd_amg_smooth(ocl, amg, L, b, x, 1, kd_amg_steps(amg, l), err);
        return kd_amg_launch(ocl, amg, "kd_amg_dense_mv", 0, (size_t)L->n * amg->wg, amg->wg,
                             KD_ARGS(KD_ARG_INT(L->n), KD_ARG_MEM(amg->coarse_inverse),
                                     KD_ARG_MEM(b->mem), KD_ARG_MEM(x->mem)),
                             err);
    }
    kd_amg_level_t *C = &amg->level[l + 1];
    int rc = kd_amg_smooth(ocl, amg, L, b, x, 1, amg->opt.degree, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmv_inner(ocl, L->A, 1.0, x, 0.0, &L->q, err);
    if (rc == KD_OK)
        rc =
            kd_amg_launch(ocl, amg, "kd_amg_residual", 0, kd_amg_global(amg, L->n), amg->wg,
                          KD_ARGS(KD_ARG_INT(L->n), KD_ARG_MEM(b->mem), KD_ARG_MEM(L->q.mem)), err);
    if (rc == KD_OK)
        rc = kd_matrix_spmv_inner(ocl, L->R, 1.0, &L->q, 0.0, &C->b, err);
    if (rc == KD_OK)
        rc = kd_amg_vcycle(ocl, amg, l + 1, &C->b, &C->x, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmv_inner(ocl, L->P, 1.0, &C->x, 1.0, x, err);
    if (rc == KD_OK)
        rc = kd_amg_smooth(ocl, amg, L, b, x, 0, amg->opt.degree, err);
    return rc;
}

/* x = M^-1 b by the V-cycle the options ask for. */
static int kd_amg_cycle(kd_ocl_t *ocl, kd_amg_t *amg, const kd_vec_t *b, kd_vec_t *x, kd_err_t *err)
{
    if (amg->opt.fused && amg->levels > 1)
        return kd_amg_fused_vcycle(ocl, amg, b, x, err);
    return kd_amg_vcycle(ocl, amg, 0, b, x, err);
}

/* Several columns: one block V-cycle for all (solver/precond/amg/block.c) where it applies, else
 * a V-cycle per column. */
static int kd_amg_apply(kd_ocl_t *ocl, const kd_precond_t *P, const kd_multivec_t *r,
                        kd_multivec_t *z, kd_err_t *err)
{
    assert(P != NULL && r != NULL && z != NULL && r->k == z->k);
    kd_amg_t *amg = P->impl;
    int declined = 1, rc = KD_OK;
    if (r->k > 1 && (rc = kd_amg_block_vcycle(ocl, amg, r, z, &declined, err)) != KD_OK)
        return rc;
    for (int64_t c = 0; declined && c < r->k && rc == KD_OK; c++)
        rc = kd_amg_cycle(ocl, amg, &r->cols[c], &z->cols[c], err);
    return rc;
}

/* The solve is over: its block vectors go. */
static void kd_amg_finish(const kd_precond_t *P)
{
    if (P->impl != NULL)
        kd_amg_block_release(P->impl);
}

/* ---------------------------------------------------------------------------------------------
 * Setup. */

/* A level's matrix on the device in the format the selection's heuristic picks for it; in CSR
 * (csr_scalar, whose arrays the fused kernels read) for the fused V-cycle. */
static int kd_amg_upload_level(kd_ocl_t *ocl, const kd_amg_t *amg, const kd_csr_t *csr,
                               kd_matrix_t **out, kd_err_t *err)
{
    if (amg->opt.fused)
        return kd_matrix_upload(ocl, csr, KD_FMT_CSR_SCALAR, out, err);
    kd_csr_stats_t stats;
    kd_csr_row_stats(csr, &stats);
    const kd_format_t f = kd_select_heuristic(csr, &stats, kd_ocl_desc(ocl)->is_gpu,
                                              kd_select_launch_bound(ocl, csr), NULL);
    return kd_matrix_upload(ocl, csr, f, out, err);
}

/* Level L's transfers P and R on the device (as kd_amg_upload_level) and their lanes per row:
 * what a setup and a refresh of a level both do. */
static int kd_amg_upload_transfers(kd_ocl_t *ocl, const kd_amg_t *amg, kd_amg_level_t *L,
                                   const kd_csr_t *P, const kd_csr_t *R, kd_err_t *err)
{
    int rc = kd_amg_upload_level(ocl, amg, P, &L->P, err);
    if (rc == KD_OK)
        rc = kd_amg_upload_level(ocl, amg, R, &L->R, err);
    if (rc != KD_OK)
        return rc;
    L->lanes_p = kd_amg_lanes(amg, (double)P->nnz / (double)P->rows);
    L->lanes_r = kd_amg_lanes(amg, (double)R->nnz / (double)R->rows);
    return KD_OK;
}

/* The level's device matrix (from level 1 on), 1/a_ii, vectors and lambda. */
static int kd_amg_level_init(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_matrix_t *A0,
                             const kd_csr_t *csr, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    L->n = csr->rows;
    L->nnz = csr->nnz;
    int rc;
    const uint64_t t0 = kd_clock_ns();
    if (l == 0) {
        L->A = (kd_matrix_t *)A0;
    } else if ((rc = kd_amg_upload_level(ocl, amg, csr, &L->A, err)) != KD_OK) {
        return rc;
    }
    const uint64_t t1 = kd_amg_phase_add(amg, KD_AMG_PHASE_LEVEL, t0);
    if (L->A->scan.bad_diagonal_row >= 0 || L->A->inv_diagonal == NULL)
        return kd_err_set(err, l == 0 ? KD_EBADREQ : KD_ENOTSPD,
                          "amg: level %d: the diagonal entry of row %lld is zero, missing or "
                          "not finite",
                          l, (long long)L->A->scan.bad_diagonal_row);
    if (L->A->scan.negative_diagonal_row >= 0)
        return kd_err_set(err, KD_ENOTSPD,
                          "amg: level %d: the diagonal entry of row %lld is negative: the matrix "
                          "is not symmetric positive definite",
                          l, (long long)L->A->scan.negative_diagonal_row);
    rc = kd_amg_level_setup(ocl, amg, l, L->A->inv_diagonal, err);
    kd_amg_phase_add(amg, KD_AMG_PHASE_LAMBDA, t1);
    return rc;
}

/* P and R become the level's transfer matrices; A_c = R (A P) on the device, read back; the
 * products' patterns are kept for a refresh. */
static int kd_amg_galerkin(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_csr_t *A,
                           const kd_csr_t *P, const kd_csr_t *R, kd_csr_t **coarse, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    kd_csr_device_t dA = {0}, dP = {0}, dR = {0}, dAP = {0}, dC = {0};
    /* The transfers in the format the heuristic picks for their rows (R's are long: a whole
     * aggregate's), or csr_scalar for the fused cycle, whose arrays then serve the products. */
    const uint64_t t_transfers = kd_clock_ns();
    int rc = kd_amg_upload_transfers(ocl, amg, L, P, R, err);
    if (rc != KD_OK)
        return rc;
    const uint64_t t0 = kd_amg_phase_add(amg, KD_AMG_PHASE_TRANSFERS, t_transfers);
    rc = kd_amg_operand(ocl, L->A, A, &dA, err);
    if (rc == KD_OK)
        rc = kd_amg_operand(ocl, L->P, P, &dP, err);
    if (rc == KD_OK)
        rc = kd_amg_operand(ocl, L->R, R, &dR, err);
    if (rc == KD_OK)
        rc = kd_spgemm(ocl, &dA, &dP, NULL, &dAP, NULL, err);
    kd_csr_device_release(&dA);
    kd_csr_device_release(&dP);
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    const uint64_t t_rap = kd_amg_phase_add(amg, KD_AMG_PHASE_AP, t0);
    if (rc == KD_OK)
        rc = kd_spgemm(ocl, &dR, &dAP, NULL, &dC, NULL, err);
    kd_csr_device_release(&dR);
    if (rc == KD_OK) {
        kd_amg_keep_pattern(&dAP, &L->ap);
        if (!amg->opt.fused) /* fused, the next level's csr_scalar arrays are this pattern */
            kd_amg_keep_pattern(&dC, &L->coarse);
    }
    kd_csr_device_release(&dAP);
    if (rc == KD_OK)
        rc = kd_csr_device_download(ocl, &dC, coarse, err);
    kd_csr_device_release(&dC);
    amg->spgemm_ms += (double)(kd_clock_ns() - t0) / 1e6;
    kd_amg_phase_add(amg, KD_AMG_PHASE_RAP, t_rap);
    return rc;
}

/* A refresh's Galerkin product: as kd_amg_galerkin, but A P and R (A P) are only the numeric
 * phase, on the patterns `old` kept. */
static int kd_amg_galerkin_numeric(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_amg_level_t *old,
                                   const kd_csr_t *A, const kd_csr_t *P, const kd_csr_t *R,
                                   kd_csr_t **coarse, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    kd_csr_device_t dA = {0}, dP = {0}, dR = {0}, dAP = {0}, dC = {0};
    if (old->ap.indptr == NULL || old->coarse.indptr == NULL || old->ap.rows != A->rows ||
        old->ap.cols != P->cols || old->coarse.rows != R->rows)
        return kd_err_set(err, KD_EINTERNAL, "amg: level %d has no Galerkin pattern to refresh", l);
    int rc = kd_amg_upload_transfers(ocl, amg, L, P, R, err);
    if (rc != KD_OK)
        return rc;
    kd_amg_keep_pattern(&old->ap, &L->ap);
    kd_amg_keep_pattern(&old->coarse, &L->coarse);
    const uint64_t t0 = kd_clock_ns();
    rc = kd_amg_operand(ocl, L->A, A, &dA, err);
    if (rc == KD_OK)
        rc = kd_amg_operand(ocl, L->P, P, &dP, err);
    if (rc == KD_OK)
        rc = kd_amg_operand(ocl, L->R, R, &dR, err);
    if (rc == KD_OK)
        rc = kd_amg_on_pattern(ocl, &old->ap, &dAP, err);
    if (rc == KD_OK)
        rc = kd_amg_on_pattern(ocl, &old->coarse, &dC, err);
    if (rc == KD_OK)
        rc = kd_amg_product(ocl, amg, &dA, &dP, &dAP, err);
    if (rc == KD_OK)
        rc = kd_amg_product(ocl, amg, &dR, &dAP, &dC, err);
    if (rc == KD_OK)
        rc = kd_csr_device_download(ocl, &dC, coarse, err);
    kd_csr_device_release(&dA);
    kd_csr_device_release(&dP);
    kd_csr_device_release(&dR);
    kd_csr_device_release(&dAP);
    kd_csr_device_release(&dC);
    amg->spgemm_ms += (double)(kd_clock_ns() - t0) / 1e6;
    return rc;
}

static void kd_amg_release(kd_precond_t *P);

static size_t kd_amg_device_bytes(const kd_amg_t *amg)
{
    const size_t v = kd_dtype_size(amg->dtype);
    size_t bytes = amg->coarse_inverse != NULL ? (size_t)(amg->coarse_n * amg->coarse_n) * v : 0;
    bytes += amg->tail.device_bytes;
    for (int l = 0; l < amg->levels; l++) {
        const kd_amg_level_t *L = &amg->level[l];
        bytes += (size_t)L->n * v * (l == 0 ? 3 : amg->opt.fused ? 6 : 5);
        if (l > 0 && L->A != NULL)
            bytes += L->A->device_bytes;
        bytes += L->P != NULL ? L->P->device_bytes : 0;
        bytes += L->R != NULL ? L->R->device_bytes : 0;
        /* counted in every hierarchy sharing them: each keeps them alive alone */
        bytes += L->ap.device_bytes + L->coarse.device_bytes + L->operand.device_bytes;
        if (L->agg_mem != NULL) /* a refresh's aggregates, scales and transpose map */
            bytes += (size_t)L->n * sizeof(int32_t) + (size_t)L->naggs * v +
                     (size_t)(L->R != NULL ? L->R->nnz : 0) * sizeof(int32_t);
    }
    return bytes;
}

/* The aggregates of level l: computed, or (a refresh) old's copied. *naggs 0: l is the
 * coarsest. */
static int kd_amg_level_aggregates(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_amg_t *old,
                                   const kd_csr_t *csr, int64_t *naggs, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    const int64_t n = csr->rows;
    *naggs = 0;
    if (old != NULL ? l + 1 >= old->levels
                    : !(n > amg->opt.coarse_size && l + 1 < amg->opt.max_levels &&
                        l + 1 < KD_AMG_LEVELS_MAX))
        return KD_OK;
    L->agg = kd_malloc_array((size_t)n + 1, sizeof(int32_t));
    if (L->agg == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (old == NULL && amg->opt.aggregation && amg->opt.block_size == 1) {
        kd_csr_device_t dA = {0};
        int rc = kd_amg_operand(ocl, L->A, csr, &dA, err);
        if (rc == KD_OK)
            rc = kd_amg_aggregate_device(ocl, csr, &dA, amg->opt.threshold, L->agg, naggs, NULL,
                                         err);
        kd_csr_device_release(&dA);
        return rc;
    }
    if (old == NULL) /* the node graph of blocks: on the host */
        return kd_amg_aggregate(csr, amg->opt.threshold, amg->opt.block_size, L->agg, naggs, err);
    const kd_amg_level_t *O = &old->level[l];
    if (O->agg == NULL || O->n != n)
        return kd_err_set(err, KD_EINTERNAL, "amg: level %d has no aggregates to refresh", l);
    memcpy(L->agg, O->agg, (size_t)n * sizeof(int32_t));
    *naggs = O->naggs;
    return KD_OK;
}

/* Level l's smoothed prolongator P and R = P^T with the refresh's map on the device
 * (kd_amg_prolongator_device, kd_amg_transpose_device), both read back: the device aggregation's
 * path. */
static int kd_amg_level_transfers_device(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_csr_t *csr,
                                         int64_t naggs, kd_csr_t **P, kd_csr_t **R, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    const uint64_t t0 = kd_clock_ns();
    kd_csr_device_t dA = {0}, dP = {0}, dR = {0};
    int rc = kd_amg_operand(ocl, L->A, csr, &dA, err);
    if (rc == KD_OK)
        rc = kd_amg_prolongator_device(ocl, &dA, L->agg, naggs, 4.0 / (3.0 * L->lambda), &dP,
                                       err);
    if (rc == KD_OK)
        rc = kd_csr_device_download(ocl, &dP, P, err);
    const uint64_t t1 = kd_amg_phase_add(amg, KD_AMG_PHASE_PROLONG, t0);
    free(L->tmap);
    L->tmap = rc == KD_OK ? kd_malloc_array((size_t)dP.nnz + 1, sizeof(int32_t)) : NULL;
    if (rc == KD_OK && L->tmap == NULL)
        rc = kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        rc = kd_amg_transpose_device(ocl, &dP, &dR, L->tmap, err);
    if (rc == KD_OK)
        rc = kd_csr_device_download(ocl, &dR, R, err);
    kd_amg_phase_add(amg, KD_AMG_PHASE_TRANSPOSE, t1);
    kd_csr_device_release(&dA);
    kd_csr_device_release(&dP);
    kd_csr_device_release(&dR);
    return rc;
}

/* tmap[t] = the entry of P that entry t of R = P^T is (kd_csr_transpose fills R's rows in
 * ascending P row, so the same walk finds each): what a refresh gathers R's values with. */
static int kd_amg_transpose_map(const kd_csr_t *P, const kd_csr_t *R, int32_t **tmap, kd_err_t *err)
{
    free(*tmap);
    *tmap = kd_malloc_array((size_t)P->nnz + 1, sizeof(int32_t));
    int32_t *fill = kd_malloc_array((size_t)R->rows + 1, sizeof(int32_t));
    int rc = *tmap != NULL && fill != NULL ? KD_OK
                                           : kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    if (rc == KD_OK)
        memcpy(fill, R->indptr, (size_t)R->rows * sizeof(int32_t));
    for (int64_t i = 0; rc == KD_OK && i < P->rows; i++)
        for (int32_t k = P->indptr[i]; k < P->indptr[i + 1]; k++) {
            const int32_t t = fill[P->indices[k]]++;
            if (R->indices[t] != i)
                rc = kd_err_set(err, KD_EINTERNAL, "amg: R is not P's transpose");
            (*tmap)[t] = k;
        }
    free(fill);
    return rc;
}

/* The hierarchy on fine; with old (a refresh: fine has old's pattern), old's levels, aggregates
 * and Galerkin patterns, only the values recomputed. */
static int kd_amg_build(kd_ocl_t *ocl, kd_amg_t *amg, const kd_matrix_t *A, kd_csr_t *fine,
                        const kd_amg_t *old, kd_err_t *err)
{
    kd_csr_t *level_csr = fine; /* owned from level 1 on */
    int rc = KD_OK;
    for (int l = 0; rc == KD_OK; l++) {
        amg->levels = l + 1;
        if ((rc = kd_amg_level_init(ocl, amg, l, A, level_csr, err)) != KD_OK)
            break;
        const int64_t n = level_csr->rows;
        int64_t naggs = 0;
        const uint64_t t_host = kd_clock_ns();
        rc = kd_amg_level_aggregates(ocl, amg, l, old, level_csr, &naggs, err);
        uint64_t t = kd_amg_phase_add(amg, KD_AMG_PHASE_AGGREGATE, t_host);
        amg->level[l].naggs = naggs;
        if (rc != KD_OK)
            break;
        if (naggs == 0 || naggs >= n) { /* the coarsest level (or coarsening stalled) */
            free(amg->level[l].agg);
            amg->level[l].agg = NULL;
            rc = old != NULL && l + 1 != old->levels
                     ? kd_err_set(err, KD_EINTERNAL, "amg: refreshed with fewer levels")
                     : kd_amg_coarsest(ocl, amg, level_csr, err);
            kd_amg_phase_add(amg, KD_AMG_PHASE_COARSEST, t);
            break;
        }
        kd_csr_t *P = NULL, *R = NULL, *coarse = NULL;
        if (amg->opt.aggregation && amg->opt.block_size == 1) {
            rc = kd_amg_level_transfers_device(ocl, amg, l, level_csr, naggs, &P, &R, err);
        } else {
            rc = kd_amg_prolongator(level_csr, amg->level[l].agg, naggs,
                                    4.0 / (3.0 * amg->level[l].lambda), &P, err);
            t = kd_amg_phase_add(amg, KD_AMG_PHASE_PROLONG, t);
            if (rc == KD_OK)
                rc = kd_csr_transpose(P, &R, err);
            if (rc == KD_OK)
                rc = kd_amg_transpose_map(P, R, &amg->level[l].tmap, err);
            kd_amg_phase_add(amg, KD_AMG_PHASE_TRANSPOSE, t);
        }
        amg->host_ms += (double)(kd_clock_ns() - t_host) / 1e6;
        if (rc == KD_OK && old != NULL)
            rc =
                kd_amg_galerkin_numeric(ocl, amg, l, &old->level[l], level_csr, P, R, &coarse, err);
        else if (rc == KD_OK)
            rc = kd_amg_galerkin(ocl, amg, l, level_csr, P, R, &coarse, err);
        kd_csr_free(P);
        kd_csr_free(R);
        if (level_csr != fine)
            kd_csr_free(level_csr);
        level_csr = coarse;
        if (rc == KD_OK && coarse == NULL)
            rc = kd_err_set(err, KD_EINTERNAL, "amg: no coarse level");
    }
    if (level_csr != fine)
        kd_csr_free(level_csr);
    return rc;
}

/* What setup and refresh refuse on A before building anything. */
static int kd_amg_check_matrix(const kd_matrix_t *A, const kd_csr_t *csr, kd_err_t *err)
{
    if (A->rows != A->cols)
        return kd_err_set(err, KD_EBADREQ, "amg needs a square matrix, not %lld x %lld",
                          (long long)A->rows, (long long)A->cols);
    if (csr->rows != A->rows || csr->nnz != A->nnz)
        return kd_err_set(err, KD_EINTERNAL, "amg: the host CSR is not the matrix's");
    if (A->scan.non_finite_row >= 0)
        return kd_err_set(err, KD_EBADREQ, "amg: entry (%lld, %lld) is %g",
                          (long long)A->scan.non_finite_row, (long long)A->scan.non_finite_col,
                          A->scan.non_finite_value);
    if (A->scan.bad_diagonal_row >= 0)
        return kd_err_set(err, KD_EBADREQ,
                          "amg: the diagonal entry of row %lld is %g: smoothed aggregation needs "
                          "a nonzero diagonal",
                          (long long)A->scan.bad_diagonal_row, A->scan.bad_diagonal_value);
    if (A->scan.negative_diagonal_row >= 0)
        return kd_err_set(err, KD_ENOTSPD,
                          "amg: the diagonal entry of row %lld is %g < 0: the matrix is not "
                          "symmetric positive definite",
                          (long long)A->scan.negative_diagonal_row,
                          A->scan.negative_diagonal_value);
    /* the upload's scan decided symmetry (to rounding) once for every consumer */
    if (!A->scan.symmetric) {
        if (A->scan.asymmetric_row < 0)
            return kd_err_set(err, KD_EBADREQ, "amg needs a symmetric matrix");
        char mirror[48];
        if (A->scan.asymmetric_mirror_stored)
            snprintf(mirror, sizeof(mirror), "= %g", A->scan.asymmetric_mirror);
        else
            snprintf(mirror, sizeof(mirror), "is not stored");
        return kd_err_set(err, KD_EBADREQ,
                          "amg needs a symmetric matrix: a(%lld, %lld) = %g but "
                          "a(%lld, %lld) %s",
                          (long long)A->scan.asymmetric_row, (long long)A->scan.asymmetric_col,
                          A->scan.asymmetric_value, (long long)A->scan.asymmetric_col,
                          (long long)A->scan.asymmetric_row, mirror);
    }
    return KD_OK;
}

/* Setup, or with old (refresh) setup on old's aggregates and patterns. */
static int kd_amg_make(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr,
                       const kd_amg_t *old, kd_precond_t *P, kd_err_t *err)
{
    assert(ocl != NULL && A != NULL && P != NULL && csr != NULL);
    int rc = kd_amg_check_matrix(A, csr, err);
    if (rc != KD_OK)
        return rc;
    kd_amg_t *amg = calloc(1, sizeof(*amg));
    if (amg == NULL)
        return kd_err_set(err, KD_ENOMEM, "amg: out of host memory");
    P->impl = amg;
    if ((rc = kd_amg_read_options(&P->options, &amg->opt, err)) != KD_OK)
        return rc;
    amg->dtype = A->dtype;
    amg->wg = kd_ocl_work_group_size(ocl);
    amg->gpu_lanes = kd_ocl_desc(ocl)->is_gpu || kd_amg_test_gpu_lanes;
    const uint64_t t0 = kd_clock_ns();
    /* The levels follow the matrix as stored: P A P^T when it is reordered. */
    kd_csr_t *fine = (kd_csr_t *)csr, *permuted = NULL;
    if (A->order.kind != KD_REORDER_NONE) {
        if ((rc = kd_reorder_apply(csr, A->order.perm, &permuted, err)) != KD_OK)
            return rc;
        fine = permuted;
    }
    /* kd_precond_refresh matched the options; the shape is checked here all the same */
    if (old != NULL && (old->dtype != amg->dtype || old->level[0].n != A->rows))
        rc = kd_err_set(err, KD_EINTERNAL, "amg: refreshed from another matrix's hierarchy");
    amg->refreshed = old != NULL;
    if (rc == KD_OK && old != NULL && amg->opt.fused)
        rc = kd_amg_refresh_device(ocl, amg, old, A, fine, err);
    else if (rc == KD_OK)
        rc = kd_amg_build(ocl, amg, A, fine, old, err);
    kd_csr_free(permuted);
    const uint64_t t_tail = kd_clock_ns();
    if (rc == KD_OK && amg->opt.fused)
        rc = kd_amg_tail_build(ocl, amg, err);
    kd_amg_phase_add(amg, KD_AMG_PHASE_TAIL, t_tail);
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    if (rc != KD_OK)
        return rc; /* kd_precond_get releases */
    amg->setup_ms = (double)(kd_clock_ns() - t0) / 1e6;
    P->device_bytes = kd_amg_device_bytes(amg);
    int64_t nnz = 0;
    for (int l = 0; l < amg->levels; l++)
        nnz += amg->level[l].nnz;
    KD_INFO("amg",
            "%s rows=%lld levels=%d coarsest=%lld operator_complexity=%.2f setup_ms=%.1f "
            "spgemm_ms=%.1f device_bytes=%zu",
            old != NULL ? "refresh" : "setup", (long long)A->rows, amg->levels,
            (long long)amg->coarse_n, A->nnz > 0 ? (double)nnz / (double)A->nnz : 0.0,
            amg->setup_ms, amg->spgemm_ms, P->device_bytes);
    return KD_OK;
}

static int kd_amg_setup(kd_ocl_t *ocl, const kd_matrix_t *A, const kd_csr_t *csr, kd_precond_t *P,
                        kd_err_t *err)
{
    return kd_amg_make(ocl, A, csr, NULL, P, err);
}

/*
 * New values on old's pattern: the aggregates, the levels and the Galerkin products' patterns
 * are old's; everything that depends on the values is computed again, level by level as setup
 * does: the level's matrix and 1/a_ii, lambda_max (the Chebyshev interval and the prolongator's
 * damping), the smoothed prolongator's values (P = (I - omega D^-1 A) T on the kept aggregates:
 * its pattern is A's and theirs) and R = P^T, then A P and R (A P) by their numeric phase alone
 * (kernels/precond/amg/amg.cl's kd_amg_product on the kept patterns: no symbolic pass, no hashing,
 * no sort), and the coarsest level's dense inverse. The strength graph is not looked at again: with
 * a threshold > 0 the new values could have drawn other aggregates, which is the price of reuse
 * (the hierarchy stays a valid one; a matrix that changed that much wants a fresh setup).
 */
static int kd_amg_refresh(kd_ocl_t *ocl, const kd_precond_t *old, const kd_matrix_t *A,
                          const kd_csr_t *csr, kd_precond_t *P, int *declined, kd_err_t *err)
{
    assert(old != NULL);
    *declined = 0;
    return kd_amg_make(ocl, A, csr, old->impl, P, err);
}

static void kd_amg_release(kd_precond_t *P)
{
    kd_amg_t *amg = P->impl;
    if (amg == NULL)
        return;
    for (int l = 0; l < amg->levels; l++) {
        kd_amg_level_t *L = &amg->level[l];
        free(L->agg);
        free(L->tmap);
        const cl_mem kept[3] = {L->agg_mem, L->scale_mem, L->tmap_mem};
        for (int i = 0; i < 3; i++)
            if (kept[i] != NULL)
                clReleaseMemObject(kept[i]);
        kd_csr_device_release(&L->ap);
        kd_csr_device_release(&L->coarse);
        kd_csr_device_release(&L->operand);
        if (l > 0)
            kd_matrix_free(L->A);
        kd_matrix_free(L->P);
        kd_matrix_free(L->R);
        if (L->inv_diagonal != NULL)
            clReleaseMemObject(L->inv_diagonal);
        kd_vec_release(&L->b);
        kd_vec_release(&L->x);
        kd_vec_release(&L->q);
        kd_vec_release(&L->d);
        kd_vec_release(&L->x_other);
    }
    kd_amg_block_release(amg);
    kd_amg_tail_release(&amg->tail);
    if (amg->coarse_inverse != NULL)
        clReleaseMemObject(amg->coarse_inverse);
    free(amg);
    P->impl = NULL;
}

const kd_precond_ops_t kd_precond_amg = {
    .name = "amg",
    .summary = "smoothed-aggregation algebraic multigrid: one V-cycle with Chebyshev smoothing",
    .forms = KD_PRECOND_OPERATOR,
    .symmetric = 1,
    .needs_csr = 1,
    .option_names = kd_amg_option_names,
    .plan_bytes = kd_amg_plan_bytes,
    .setup = kd_amg_setup,
    .apply = kd_amg_apply,
    .block_values = 3, /* level 0's q and d, the coarser levels' five (about a fifth of n) */
    .finish = kd_amg_finish,
    .release = kd_amg_release,
    .refresh = kd_amg_refresh,
};

int kd_amg_describe(const kd_precond_t *P, kd_amg_stats_t *out, kd_err_t *err)
{
    assert(P != NULL && out != NULL);
    if (P->ops != &kd_precond_amg || P->impl == NULL)
        return kd_err_set(err, KD_EBADREQ, "not an amg preconditioner");
    const kd_amg_t *amg = P->impl;
    memset(out, 0, sizeof(*out));
    out->levels = amg->levels;
    out->tail_level = amg->tail.first;
    int64_t nnz = 0;
    for (int l = 0; l < amg->levels; l++) {
        out->rows[l] = amg->level[l].n;
        out->nnz[l] = amg->level[l].nnz;
        out->lambda[l] = amg->level[l].lambda;
        nnz += amg->level[l].nnz;
    }
    out->operator_complexity =
        amg->level[0].nnz > 0 ? (double)nnz / (double)amg->level[0].nnz : 0.0;
    out->setup_ms = amg->setup_ms;
    out->spgemm_ms = amg->spgemm_ms;
    out->host_ms = amg->host_ms;
    out->refreshed = amg->refreshed;
    memcpy(out->phase_ms, amg->phase_ms, sizeof(out->phase_ms));
    return KD_OK;
}

/* Device ms of `runs` launches of what fn enqueues, divided. */
static int kd_amg_time_spmv(kd_ocl_t *ocl, const kd_matrix_t *M, kd_vec_t *x, kd_vec_t *y, int runs,
                            double *ms, kd_err_t *err)
{
    *ms = 0.0;
    if (M == NULL)
        return KD_OK;
    kd_ocl_timing_begin(ocl);
    int rc = KD_OK;
    for (int r = 0; r < runs && rc == KD_OK; r++)
        rc = kd_matrix_spmv_inner(ocl, M, 1.0, x, 0.0, y, err);
    double span = 0.0;
    const int rc2 = kd_ocl_timing_end(ocl, &span, err);
    *ms = span / runs;
    return rc != KD_OK ? rc : rc2;
}

int kd_amg_profile(kd_ocl_t *ocl, const kd_precond_t *P, int runs, kd_amg_profile_t *out,
                   kd_err_t *err)
{
    assert(ocl != NULL && P != NULL && out != NULL && runs > 0);
    if (P->ops != &kd_precond_amg || P->impl == NULL)
        return kd_err_set(err, KD_EBADREQ, "not an amg preconditioner");
    kd_amg_t *amg = P->impl;
    memset(out, 0, sizeof(*out));
    const int64_t n = amg->level[0].n;
    kd_vec_t b = {0}, x = {0}, t = {0};
    int rc = kd_vec_alloc(ocl, n, amg->dtype, &b, err);
    if (rc == KD_OK)
        rc = kd_vec_alloc(ocl, n, amg->dtype, &x, err);
    if (rc == KD_OK)
        rc = kd_vec_alloc(ocl, n, amg->dtype, &t, err);
    if (rc == KD_OK)
        rc = kd_vec_fill(ocl, &b, 1.0, err);
    for (int l = 0; l < amg->levels && rc == KD_OK; l++) {
        kd_amg_level_t *L = &amg->level[l];
        kd_vec_t xl = {.mem = b.mem, .n = L->n, .dtype = amg->dtype};
        kd_vec_t yl = {.mem = t.mem, .n = L->n, .dtype = amg->dtype};
        rc = kd_amg_time_spmv(ocl, L->A, &xl, &yl, runs, &out->a_ms[l], err);
        if (rc == KD_OK && L->P != NULL) {
            kd_vec_t xc = {.mem = b.mem, .n = L->P->cols, .dtype = amg->dtype};
            rc = kd_amg_time_spmv(ocl, L->P, &xc, &yl, runs, &out->p_ms[l], err);
            kd_vec_t yc = {.mem = x.mem, .n = L->R->rows, .dtype = amg->dtype};
            if (rc == KD_OK)
                rc = kd_amg_time_spmv(ocl, L->R, &yl, &yc, runs, &out->r_ms[l], err);
        }
    }
    if (rc == KD_OK)
        rc = kd_amg_cycle(ocl, amg, &b, &x, err); /* warm */
    if (rc == KD_OK)
        rc = kd_ocl_finish(ocl, err);
    const uint64_t t0 = kd_clock_ns(), launches = kd_ocl_launch_count(ocl);
    kd_ocl_timing_begin(ocl);
    for (int r = 0; r < runs && rc == KD_OK; r++)
        rc = kd_amg_cycle(ocl, amg, &b, &x, err);
    out->vcycle_launches = (double)(kd_ocl_launch_count(ocl) - launches) / runs;
    double span = 0.0;
    const int rc2 = kd_ocl_timing_end(ocl, &span, err);
    out->vcycle_wall_ms = (double)(kd_clock_ns() - t0) / 1e6 / runs;
    out->vcycle_device_ms = span / runs;
    kd_vec_release(&b);
    kd_vec_release(&x);
    kd_vec_release(&t);
    return rc != KD_OK ? rc : rc2;
}
