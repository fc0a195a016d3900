/*
 * The AMG preconditioner's fused V-cycle: the same operator as solver/precond/amg/amg.c's
 * straightforward one (kd_amg_vcycle) in exact arithmetic, in fewer launches, because on a GPU
 * every launch costs ~12 us however small and the coarse levels are all launch latency.
 *
 * Level 0 is the solve's matrix in its own format and runs as before (kd_amg_smooth, SpMV and
 * kd_amg_residual). Levels >= 1, every P and every R are csr_scalar matrices whose arrays the
 * kernels of kernels/precond/amg/amg.cl read with their own lanes per row:
 *   - the restriction into a level also takes that level's first smoothing step from x = 0
 *     (kd_amg_csr_restrict);
 *   - each later Chebyshev step is its SpMV (kd_amg_csr_chebyshev, x ping-ponged between the
 *     level's x and x_other);
 *   - the residual is its SpMV (kd_amg_csr_residual); the prolongation adds P x_c in place.
 * A level >= 1 costs 6 launches (11 in the straightforward cycle). The last levels, from the
 * first one (>= 1) small enough for one work-group down to the coarsest, run as ONE launch of
 * kd_amg_tail over packs made here once at setup (kernels/precond/amg/amg_abi.h).
 */
#include "solver/precond/amg/cycle.h"
#include "solver/formats/format.h"

#include "kernels/precond/amg/amg_abi.h"

#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Work-items for `rows` rows of `lanes` each, rounded up to whole groups. */
static size_t kd_amg_items(const kd_amg_t *amg, int64_t rows, int lanes)
{
    const size_t items = (size_t)rows * (size_t)lanes;
    return (items + amg->wg - 1) / amg->wg * amg->wg;
}

/* x_out = x_in + the Chebyshev step `step` on level L >= 1, its SpMV fused in. */
static int kd_amg_fused_chebyshev(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, int step,
                                  const kd_vec_t *x_in, kd_vec_t *x_out, kd_err_t *err)
{
    const kd_format_csr_t *A = kd_format_csr_scalar_arrays(L->A);
    double c_d, c_r;
    kd_amg_chebyshev_coefficients(amg, L, step, &c_d, &c_r);
    return kd_amg_launch(
        ocl, amg, "kd_amg_csr_chebyshev", L->lanes_a, kd_amg_items(amg, L->n, L->lanes_a), amg->wg,
        KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(step == 0), KD_ARG_VALUE(amg->dtype, c_d),
                KD_ARG_VALUE(amg->dtype, c_r), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                KD_ARG_MEM(A->values), KD_ARG_MEM(L->b.mem), KD_ARG_MEM(L->inv_diagonal),
                KD_ARG_MEM(L->d.mem), KD_ARG_MEM(x_in->mem), KD_ARG_MEM(x_out->mem)),
        err);
}

/* Steps first..steps-1 on level L from *x, which ends on whichever of L->x and L->x_other holds
 * the result. */
static int kd_amg_fused_smooth(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, int first,
                               int steps, kd_vec_t **x, kd_err_t *err)
{
    int rc = KD_OK;
    for (int step = first; step < steps && rc == KD_OK; step++) {
        kd_vec_t *out = *x == &L->x ? &L->x_other : &L->x;
        rc = kd_amg_fused_chebyshev(ocl, amg, L, step, *x, out, err);
        *x = out;
    }
    return rc;
}

/* b = R_l q_l into level l + 1, with that level's first smoothing step unless it is the tail's
 * first level or an inverted coarsest. */
static int kd_amg_fused_restrict(kd_ocl_t *ocl, kd_amg_t *amg, int l, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l], *C = &amg->level[l + 1];
    const kd_format_csr_t *R = kd_format_csr_scalar_arrays(L->R);
    const int inverted = l + 2 == amg->levels && amg->coarse_inverse != NULL;
    const int smooth = l + 1 != amg->tail.first && !inverted;
    double c_d, c_r;
    kd_amg_chebyshev_coefficients(amg, C, 0, &c_d, &c_r);
    return kd_amg_launch(
        ocl, amg, "kd_amg_csr_restrict", L->lanes_r, kd_amg_items(amg, C->n, L->lanes_r), amg->wg,
        KD_ARGS(KD_ARG_INT(C->n), KD_ARG_INT(smooth), KD_ARG_VALUE(amg->dtype, c_r),
                KD_ARG_MEM(R->indptr), KD_ARG_MEM(R->indices), KD_ARG_MEM(R->values),
                KD_ARG_MEM(L->q.mem), KD_ARG_MEM(C->b.mem), KD_ARG_MEM(C->inv_diagonal),
                KD_ARG_MEM(C->d.mem), KD_ARG_MEM(C->x.mem)),
        err);
}

/* x += P_l x_coarse. */
static int kd_amg_fused_prolong(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_vec_t *x_coarse,
                                kd_vec_t *x, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    const kd_format_csr_t *P = kd_format_csr_scalar_arrays(L->P);
    return kd_amg_launch(
        ocl, amg, "kd_amg_csr_prolong", L->lanes_p, kd_amg_items(amg, L->n, L->lanes_p), amg->wg,
        KD_ARGS(KD_ARG_INT(L->n), KD_ARG_MEM(P->indptr), KD_ARG_MEM(P->indices),
                KD_ARG_MEM(P->values), KD_ARG_MEM(x_coarse->mem), KD_ARG_MEM(x->mem)),
        err);
}

/* The tail, from its first level's b to its x, in one work-group. */
static int kd_amg_tail_run(kd_ocl_t *ocl, kd_amg_t *amg, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[amg->tail.first];
    const kd_amg_tail_t *T = &amg->tail;
    return kd_amg_launch(ocl, amg, "kd_amg_tail", 0, amg->wg, amg->wg,
                         KD_ARGS(KD_ARG_INT(T->n_steps), KD_ARG_MEM(T->steps), KD_ARG_MEM(T->index),
                                 KD_ARG_MEM(T->values), KD_ARG_MEM(T->scratch),
                                 KD_ARG_MEM(L->b.mem), KD_ARG_MEM(L->x.mem)),
                         err);
}

/* The V-cycle from level l >= 1, its b restricted (and its first step taken, as
 * kd_amg_fused_restrict says); *x_out: the vector holding its x. */
static int kd_amg_fused_level(kd_ocl_t *ocl, kd_amg_t *amg, int l, kd_vec_t **x_out, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    kd_vec_t *x = &L->x;
    *x_out = x;
    if (l == amg->tail.first)
        return kd_amg_tail_run(ocl, amg, err);
    if (l == amg->levels - 1 && amg->coarse_inverse != NULL)
        return kd_amg_launch(ocl, amg, "kd_amg_dense_mv", 0, (size_t)L->n * amg->wg, amg->wg,
                             KD_ARGS(KD_ARG_INT(L->n), KD_ARG_MEM(amg->coarse_inverse),
                                     KD_ARG_MEM(L->b.mem), KD_ARG_MEM(L->x.mem)),
                             err);
    int rc = kd_amg_fused_smooth(ocl, amg, L, 1, kd_amg_steps(amg, l), x_out, err);
    if (rc != KD_OK || l == amg->levels - 1)
        return rc;
    x = *x_out;
    const kd_format_csr_t *A = kd_format_csr_scalar_arrays(L->A);
    rc = kd_amg_launch(ocl, amg, "kd_amg_csr_residual", L->lanes_a,
                       kd_amg_items(amg, L->n, L->lanes_a), amg->wg,
                       KD_ARGS(KD_ARG_INT(L->n), KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices),
                               KD_ARG_MEM(A->values), KD_ARG_MEM(x->mem), KD_ARG_MEM(L->b.mem),
                               KD_ARG_MEM(L->q.mem)),
                       err);
    kd_vec_t *x_coarse = NULL;
    if (rc == KD_OK)
        rc = kd_amg_fused_restrict(ocl, amg, l, err);
    if (rc == KD_OK)
        rc = kd_amg_fused_level(ocl, amg, l + 1, &x_coarse, err);
    if (rc == KD_OK)
        rc = kd_amg_fused_prolong(ocl, amg, l, x_coarse, x, err);
    if (rc == KD_OK)
        rc = kd_amg_fused_smooth(ocl, amg, L, 0, amg->opt.degree, x_out, err);
    return rc;
}

int kd_amg_fused_vcycle(kd_ocl_t *ocl, kd_amg_t *amg, const kd_vec_t *b, kd_vec_t *x, kd_err_t *err)
{
    assert(ocl != NULL && amg != NULL && amg->levels > 1 && b != NULL && x != NULL);
    kd_amg_level_t *L = &amg->level[0];
    int rc = kd_amg_smooth(ocl, amg, L, b, x, 1, amg->opt.degree, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmv_inner(ocl, L->A, 1.0, x, 0.0, &L->q, err);
    if (rc == KD_OK)
        rc =
            kd_amg_launch(ocl, amg, "kd_amg_residual", 0, kd_amg_items(amg, L->n, 1), amg->wg,
                          KD_ARGS(KD_ARG_INT(L->n), KD_ARG_MEM(b->mem), KD_ARG_MEM(L->q.mem)), err);
    kd_vec_t *x_coarse = NULL;
    if (rc == KD_OK)
        rc = kd_amg_fused_restrict(ocl, amg, 0, err);
    if (rc == KD_OK)
        rc = kd_amg_fused_level(ocl, amg, 1, &x_coarse, err);
    if (rc == KD_OK)
        rc = kd_amg_fused_prolong(ocl, amg, 0, x_coarse, x, err);
    if (rc == KD_OK)
        rc = kd_amg_smooth(ocl, amg, L, b, x, 0, amg->opt.degree, err);
    return rc;
}
