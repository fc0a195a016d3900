/*
 * The AMG V-cycle on k right-hand sides at once (issue 36, item 3): each column's V-cycle, with
 * every launch taking all k columns, so each level's matrices are read once per sweep for the
 * block (once per chunk of 8 columns) and a level costs one column's launches whatever k is.
 *
 * A fused hierarchy (the default) runs fused.c's sequence: level 0 through its format's SpMM
 * (kd_matrix_spmm_inner) and kd_amg_block_chebyshev / kd_amg_block_residual, levels >= 1 and the
 * transfers through kd_amg_block_csr_* (kernels/precond/amg/amg.cl: the fused kernels on chunks of
 * columns, each column summed in the one-column kernel's order, so every column's result is its
 * one-column cycle's bit for bit), the coarsest inverse by kd_amg_block_dense_mv. A straightforward
 * hierarchy (fused 0) runs kd_amg_vcycle's sequence with an SpMM for every product. The tail
 * (one work-group for the small levels, off by default) is not widened: apply declines to the
 * per-column cycle, as it does where a level's format has no SpMM.
 *
 * Level 0's b and x are the caller's r and z; the coarser levels' b, x (and x's ping-pong
 * partner) and every level's q and d are block vectors allocated on the first apply of several
 * columns and kept until the solve ends (kd_amg_block_release from the preconditioner's finish
 * op); a solve charges them beside its own vectors (kd_precond_ops_t.block_values).
 */
#include "solver/precond/amg/cycle.h"
#include "solver/formats/format.h"

#include <assert.h>

/* mv's first k columns (mv holds at least k; k > 1, so ld is n's for any k). */
static kd_multivec_t kd_amg_block_view(const kd_multivec_t *mv, int64_t k)
{
    kd_multivec_t view = *mv;
    view.k = k;
    return view;
}

void kd_amg_block_release(kd_amg_t *amg)
{
    assert(amg != NULL);
    for (int l = 0; l < amg->levels; l++) {
        kd_amg_level_t *L = &amg->level[l];
        kd_multivec_release(&L->block_b);
        kd_multivec_release(&L->block_x);
        kd_multivec_release(&L->block_q);
        kd_multivec_release(&L->block_d);
        kd_multivec_release(&L->block_x_other);
    }
    amg->block_k = 0;
}

/* Every level's block vectors for at least k columns. */
static int kd_amg_block_alloc(kd_ocl_t *ocl, kd_amg_t *amg, int64_t k, kd_err_t *err)
{
    if (amg->block_k >= k)
        return KD_OK;
    kd_amg_block_release(amg);
    int rc = KD_OK;
    for (int l = 0; l < amg->levels && rc == KD_OK; l++) {
        kd_amg_level_t *L = &amg->level[l];
        kd_multivec_t *mv[] = {&L->block_q, &L->block_d, &L->block_b, &L->block_x,
                               &L->block_x_other};
        for (int i = 0; i < (l == 0 ? 2 : amg->opt.fused ? 5 : 4) && rc == KD_OK; i++)
            rc = kd_multivec_alloc(ocl, L->n, k, amg->dtype, mv[i], err);
    }
    if (rc != KD_OK) {
        kd_amg_block_release(amg);
        return rc;
    }
    amg->block_k = k;
    return KD_OK;
}

/* The block cycle applies: every level's matrices have SpMM. */
static int kd_amg_block_formats(const kd_amg_t *amg)
{
    for (int l = 0; l < amg->levels; l++) {
        const kd_amg_level_t *L = &amg->level[l];
        if (!kd_matrix_has_spmm(L->A) || (L->P != NULL && !kd_matrix_has_spmm(L->P)) ||
            (L->R != NULL && !kd_matrix_has_spmm(L->R)))
            return 0;
    }
    return 1;
}

/* `steps` Chebyshev steps on level L for A X = B, every column, from X = 0 (from_zero) or X. */
static int kd_amg_block_smooth(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L,
                               const kd_multivec_t *b, kd_multivec_t *x, int from_zero, int steps,
                               kd_err_t *err)
{
    kd_multivec_t q = kd_amg_block_view(&L->block_q, b->k);
    const kd_multivec_t d = kd_amg_block_view(&L->block_d, b->k);
    int rc = KD_OK;
    for (int step = 0; step < steps && rc == KD_OK; step++) {
        const int zero = from_zero && step == 0;
        if (!zero && (rc = kd_matrix_spmm_inner(ocl, L->A, 1.0, x, 0.0, &q, err)) != KD_OK)
            break;
        double c_d, c_r;
        kd_amg_chebyshev_coefficients(amg, L, step, &c_d, &c_r);
        rc = kd_amg_launch(
            ocl, amg, "kd_amg_block_chebyshev", 0, kd_amg_global(amg, L->n), amg->wg,
            KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(b->k), KD_ARG_LONG(b->ld), KD_ARG_INT(zero),
                    KD_ARG_INT(step == 0), KD_ARG_VALUE(amg->dtype, c_d),
                    KD_ARG_VALUE(amg->dtype, c_r), KD_ARG_MEM(b->mem), KD_ARG_MEM(q.mem),
                    KD_ARG_MEM(L->inv_diagonal), KD_ARG_MEM(d.mem), KD_ARG_MEM(x->mem)),
            err);
    }
    return rc;
}

/* The block V-cycle from level l: X = M_l^-1 B, as kd_amg_vcycle column by column. */
static int kd_amg_block_level(kd_ocl_t *ocl, kd_amg_t *amg, int l, const kd_multivec_t *b,
                              kd_multivec_t *x, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    const int64_t k = b->k;
    if (l == amg->levels - 1) {
        if (amg->coarse_inverse == NULL)
            return kd_amg_block_smooth(ocl, amg, L, b, x, 1, kd_amg_steps(amg, l), err);
        return kd_amg_launch(ocl, amg, "kd_amg_block_dense_mv", 0, (size_t)L->n * amg->wg, amg->wg,
                             KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(b->ld),
                                     KD_ARG_MEM(amg->coarse_inverse), KD_ARG_MEM(b->mem),
                                     KD_ARG_MEM(x->mem)),
                             err);
    }
    kd_amg_level_t *C = &amg->level[l + 1];
    kd_multivec_t q = kd_amg_block_view(&L->block_q, k);
    kd_multivec_t cb = kd_amg_block_view(&C->block_b, k), cx = kd_amg_block_view(&C->block_x, k);
    int rc = kd_amg_block_smooth(ocl, amg, L, b, x, 1, amg->opt.degree, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmm_inner(ocl, L->A, 1.0, x, 0.0, &q, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_block_residual", 0, kd_amg_global(amg, L->n), amg->wg,
                           KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(b->ld),
                                   KD_ARG_MEM(b->mem), KD_ARG_MEM(q.mem)),
                           err);
    if (rc == KD_OK)
        rc = kd_matrix_spmm_inner(ocl, L->R, 1.0, &q, 0.0, &cb, err);
    if (rc == KD_OK)
        rc = kd_amg_block_level(ocl, amg, l + 1, &cb, &cx, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmm_inner(ocl, L->P, 1.0, &cx, 1.0, x, err);
    if (rc == KD_OK)
        rc = kd_amg_block_smooth(ocl, amg, L, b, x, 0, amg->opt.degree, err);
    return rc;
}

/* ---- The fused hierarchy's block cycle: fused.c's sequence, each launch on all k columns ---- */

/* Work-items for `rows` rows of `lanes` each, rounded up to whole groups. */
static size_t kd_amg_block_items(const kd_amg_t *amg, int64_t rows, int lanes)
{
    const size_t items = (size_t)rows * (size_t)lanes;
    return (items + amg->wg - 1) / amg->wg * amg->wg;
}

/* X_out = X_in + the Chebyshev step `step` on level L >= 1 for every column, its SpMM fused in. */
static int kd_amg_block_fused_chebyshev(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, int step,
                                        int64_t k, const kd_multivec_t *x_in, kd_multivec_t *x_out,
                                        kd_err_t *err)
{
    const kd_format_csr_t *A = kd_format_csr_scalar_arrays(L->A);
    double c_d, c_r;
    kd_amg_chebyshev_coefficients(amg, L, step, &c_d, &c_r);
    return kd_amg_launch(
        ocl, amg, "kd_amg_block_csr_chebyshev", L->lanes_a,
        kd_amg_block_items(amg, L->n, L->lanes_a), amg->wg,
        KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(L->block_b.ld), KD_ARG_INT(step == 0),
                KD_ARG_VALUE(amg->dtype, c_d), KD_ARG_VALUE(amg->dtype, c_r), KD_ARG_MEM(A->indptr),
                KD_ARG_MEM(A->indices), KD_ARG_MEM(A->values), KD_ARG_MEM(L->block_b.mem),
                KD_ARG_MEM(L->inv_diagonal), KD_ARG_MEM(L->block_d.mem), KD_ARG_MEM(x_in->mem),
                KD_ARG_MEM(x_out->mem)),
        err);
}

/* Steps first..steps-1 on level L from *x, which ends on whichever of block_x and block_x_other
 * holds the result. */
static int kd_amg_block_fused_smooth(kd_ocl_t *ocl, kd_amg_t *amg, kd_amg_level_t *L, int first,
                                     int steps, int64_t k, kd_multivec_t **x, kd_err_t *err)
{
    int rc = KD_OK;
    for (int step = first; step < steps && rc == KD_OK; step++) {
        kd_multivec_t *out = *x == &L->block_x ? &L->block_x_other : &L->block_x;
        rc = kd_amg_block_fused_chebyshev(ocl, amg, L, step, k, *x, out, err);
        *x = out;
    }
    return rc;
}

/* B = R_l Q_l into level l + 1 (q: level l's residuals), with that level's first smoothing step
 * unless it is an inverted coarsest. */
static int kd_amg_block_fused_restrict(kd_ocl_t *ocl, kd_amg_t *amg, int l, int64_t k,
                                       const kd_multivec_t *q, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l], *C = &amg->level[l + 1];
    const kd_format_csr_t *R = kd_format_csr_scalar_arrays(L->R);
    const int smooth = !(l + 2 == amg->levels && amg->coarse_inverse != NULL);
    double c_d, c_r;
    kd_amg_chebyshev_coefficients(amg, C, 0, &c_d, &c_r);
    return kd_amg_launch(ocl, amg, "kd_amg_block_csr_restrict", L->lanes_r,
                         kd_amg_block_items(amg, C->n, L->lanes_r), amg->wg,
                         KD_ARGS(KD_ARG_INT(C->n), KD_ARG_INT(k), KD_ARG_LONG(q->ld),
                                 KD_ARG_LONG(C->block_b.ld), KD_ARG_INT(smooth),
                                 KD_ARG_VALUE(amg->dtype, c_r), KD_ARG_MEM(R->indptr),
                                 KD_ARG_MEM(R->indices), KD_ARG_MEM(R->values), KD_ARG_MEM(q->mem),
                                 KD_ARG_MEM(C->block_b.mem), KD_ARG_MEM(C->inv_diagonal),
                                 KD_ARG_MEM(C->block_d.mem), KD_ARG_MEM(C->block_x.mem)),
                         err);
}

/* X += P_l X_c. */
static int kd_amg_block_fused_prolong(kd_ocl_t *ocl, kd_amg_t *amg, int l, int64_t k,
                                      const kd_multivec_t *x_coarse, kd_multivec_t *x,
                                      kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    const kd_format_csr_t *P = kd_format_csr_scalar_arrays(L->P);
    return kd_amg_launch(ocl, amg, "kd_amg_block_csr_prolong", L->lanes_p,
                         kd_amg_block_items(amg, L->n, L->lanes_p), amg->wg,
                         KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(x_coarse->ld),
                                 KD_ARG_LONG(x->ld), KD_ARG_MEM(P->indptr), KD_ARG_MEM(P->indices),
                                 KD_ARG_MEM(P->values), KD_ARG_MEM(x_coarse->mem),
                                 KD_ARG_MEM(x->mem)),
                         err);
}

/* The block cycle from level l >= 1, its B restricted (and its first step taken); *x_out: the
 * block vector holding its X. */
static int kd_amg_block_fused_level(kd_ocl_t *ocl, kd_amg_t *amg, int l, int64_t k,
                                    kd_multivec_t **x_out, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[l];
    *x_out = &L->block_x;
    if (l == amg->levels - 1 && amg->coarse_inverse != NULL)
        return kd_amg_launch(ocl, amg, "kd_amg_block_dense_mv", 0, (size_t)L->n * amg->wg, amg->wg,
                             KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(L->block_b.ld),
                                     KD_ARG_MEM(amg->coarse_inverse), KD_ARG_MEM(L->block_b.mem),
                                     KD_ARG_MEM(L->block_x.mem)),
                             err);
    int rc = kd_amg_block_fused_smooth(ocl, amg, L, 1, kd_amg_steps(amg, l), k, x_out, err);
    if (rc != KD_OK || l == amg->levels - 1)
        return rc;
    const kd_format_csr_t *A = kd_format_csr_scalar_arrays(L->A);
    rc = kd_amg_launch(ocl, amg, "kd_amg_block_csr_residual", L->lanes_a,
                       kd_amg_block_items(amg, L->n, L->lanes_a), amg->wg,
                       KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(L->block_b.ld),
                               KD_ARG_MEM(A->indptr), KD_ARG_MEM(A->indices), KD_ARG_MEM(A->values),
                               KD_ARG_MEM((*x_out)->mem), KD_ARG_MEM(L->block_b.mem),
                               KD_ARG_MEM(L->block_q.mem)),
                       err);
    kd_multivec_t *x_coarse = NULL;
    if (rc == KD_OK)
        rc = kd_amg_block_fused_restrict(ocl, amg, l, k, &L->block_q, err);
    if (rc == KD_OK)
        rc = kd_amg_block_fused_level(ocl, amg, l + 1, k, &x_coarse, err);
    if (rc == KD_OK)
        rc = kd_amg_block_fused_prolong(ocl, amg, l, k, x_coarse, *x_out, err);
    if (rc == KD_OK)
        rc = kd_amg_block_fused_smooth(ocl, amg, L, 0, amg->opt.degree, k, x_out, err);
    return rc;
}

/* The fused hierarchy's block cycle: level 0 through its format (SpMM), as kd_amg_fused_vcycle. */
static int kd_amg_block_fused(kd_ocl_t *ocl, kd_amg_t *amg, const kd_multivec_t *b,
                              kd_multivec_t *x, kd_err_t *err)
{
    kd_amg_level_t *L = &amg->level[0];
    const int64_t k = b->k;
    kd_multivec_t q = kd_amg_block_view(&L->block_q, k);
    int rc = kd_amg_block_smooth(ocl, amg, L, b, x, 1, amg->opt.degree, err);
    if (rc == KD_OK)
        rc = kd_matrix_spmm_inner(ocl, L->A, 1.0, x, 0.0, &q, err);
    if (rc == KD_OK)
        rc = kd_amg_launch(ocl, amg, "kd_amg_block_residual", 0, kd_amg_global(amg, L->n), amg->wg,
                           KD_ARGS(KD_ARG_INT(L->n), KD_ARG_INT(k), KD_ARG_LONG(b->ld),
                                   KD_ARG_MEM(b->mem), KD_ARG_MEM(q.mem)),
                           err);
    kd_multivec_t *x_coarse = NULL;
    if (rc == KD_OK)
        rc = kd_amg_block_fused_restrict(ocl, amg, 0, k, &q, err);
    if (rc == KD_OK)
        rc = kd_amg_block_fused_level(ocl, amg, 1, k, &x_coarse, err);
    if (rc == KD_OK)
        rc = kd_amg_block_fused_prolong(ocl, amg, 0, k, x_coarse, x, err);
    if (rc == KD_OK)
        rc = kd_amg_block_smooth(ocl, amg, L, b, x, 0, amg->opt.degree, err);
    return rc;
}

int kd_amg_block_vcycle(kd_ocl_t *ocl, kd_amg_t *amg, const kd_multivec_t *r, kd_multivec_t *z,
                        int *declined, kd_err_t *err)
{
    assert(ocl != NULL && amg != NULL && r != NULL && z != NULL && r->k == z->k && r->k > 1);
    *declined = 1;
    const int fused = amg->opt.fused && amg->levels > 1;
    if (!kd_amg_block_formats(amg) || (fused && amg->tail.first != 0) || r->ld != z->ld ||
        r->ld > INT32_MAX)
        return KD_OK;
    if (kd_amg_block_alloc(ocl, amg, r->k, err) != KD_OK)
        return KD_OK; /* no room for the block's vectors: column by column */
    if (amg->level[0].block_q.ld != r->ld)
        return KD_OK;
    *declined = 0;
    return fused ? kd_amg_block_fused(ocl, amg, r, z, err)
                 : kd_amg_block_level(ocl, amg, 0, r, z, err);
}
