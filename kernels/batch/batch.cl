/*
 * Batched matrices (solver/batch/batch.h): k systems, each found through its row of the `systems`
 * table (kernels/batch/batch_abi.h): its rows n, its slices of indptr, indices and values, and its
 * first row in every vector. k systems of one pattern share the CSR arrays (read by all groups,
 * they stay in cache); systems of their own patterns sit back to back. Every kernel here runs one
 * work-group per system (the host launches (KD_WG_SIZE x k) work-items, the group id naming the
 * system) with the system's rows dealt to its work-items round-robin.
 *
 * The solve kernels run `count` iterations of every system in one launch, each system deciding
 * its own stop (kd_krylov_decide's statuses) and leaving its state for the next launch in
 * `state` and `scalars` (kernels/batch/batch_abi.h). The _local variants copy a system's vectors into
 * local memory (sized by the host: the vectors times n) at the start and back at the end, so the
 * iterations' gathers and updates never leave the chip; the plain variants work on the global
 * copies, for systems too large for local memory. Both run the same code
 * (kernels/batch/batch_methods.cl, included once for each home). GMRES's kernels take its basis size
 * m and its small per-system arrays (aux) after the shared arguments.
 */
#include "krylov_lib.cl"
#include "batch_abi.h"

#if KD_FP64
#define KD_BATCH_EPS DBL_EPSILON
#else
#define KD_BATCH_EPS FLT_EPSILON
#endif

/* A vector written by some work-items is read by others after this. */
#define KD_BATCH_PUBLISH barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)

#define KD_VS __global
#define KD_BATCH_FN(name) name##_global
#include "batch_methods.cl"
#undef KD_VS
#undef KD_BATCH_FN
#define KD_VS __local
#define KD_BATCH_FN(name) name##_local
#include "batch_methods.cl"
#undef KD_VS
#undef KD_BATCH_FN

/* System s (the group) from the systems table: its rows n, its first row row0, and its slices
 * ps, is, vs of indptr, indices and values. */
#define KD_BATCH_WHERE                                                                             \
    const size_t s = get_group_id(0);                                                              \
    __global const long *sys = systems + s * KD_BATCH_SYS;                                        \
    const int n = (int)sys[KD_BATCH_SYS_N];                                                       \
    const size_t row0 = (size_t)sys[KD_BATCH_SYS_ROW];                                            \
    __global const int *ps = indptr + sys[KD_BATCH_SYS_PTR];                                      \
    __global const int *is = indices + sys[KD_BATCH_SYS_IDX];                                     \
    __global const VALUE *vs = values + sys[KD_BATCH_SYS_VAL]

/* y_s = A_s x_s for every system s (x_s at the system's first column, y_s at its first row). */
__kernel KD_WG_ATTR void kd_batch_spmv(__global const long *systems, __global const int *indptr,
                                       __global const int *indices,
                                       __global const VALUE *values, __global const VALUE *x,
                                       __global VALUE *y)
{
    KD_BATCH_WHERE;
    __global const VALUE *xs = x + sys[KD_BATCH_SYS_COL];
    __global VALUE *ys = y + row0;
    for (int i = (int)get_local_id(0); i < n; i += KD_WG_SIZE)
        ys[i] = kd_batch_row_global(i, ps, is, vs, 0, 0, xs);
}

/* out[s] = ||b_s - A_s x_s||^2, the true residual each system reports. */
__kernel KD_WG_ATTR void kd_batch_residual(__global const long *systems,
                                           __global const int *indptr,
                                           __global const int *indices,
                                           __global const VALUE *values, __global const VALUE *b,
                                           __global const VALUE *x, __global VALUE *out)
{
    __local VALUE scratch[KD_WG_SIZE];
    KD_BATCH_WHERE;
    VALUE u[1] = {KD_ZERO};
    for (int i = (int)get_local_id(0); i < n; i += KD_WG_SIZE) {
        const VALUE ri = b[row0 + i] - kd_batch_row_global(i, ps, is, vs, 0, 0, x + row0);
        u[0] += ri * ri;
    }
    kd_krylov_group_sums(scratch, u, 1);
    if (get_local_id(0) == 0)
        out[s] = u[0];
}

/* The arguments every solve kernel takes, in this order (solver/batch/solve.c passes them). */
#define KD_BATCH_SOLVE_ARGS                                                                        \
    __global const long *systems, const int first, const int count, const int pre,                \
        __global const int *indptr, __global const int *indices, __global const VALUE *values,    \
        __global const VALUE *dinv, __global const VALUE *b, __global const VALUE *threshold,     \
        __global const long *limits, __global long *state, __global VALUE *scalars,               \
        __global VALUE *hist, const int hcap, __global VALUE *x, __global VALUE *work

/* System s's slices of the shared arguments. */
#define KD_BATCH_SYSTEM                                                                            \
    KD_BATCH_WHERE;                                                                                \
    __global const VALUE *ds = pre ? dinv + row0 : dinv;                                          \
    __global const VALUE *bs = b + row0;                                                          \
    __global VALUE *hs = hcap > 0 ? hist + s * (size_t)hcap : 0;                                   \
    __global long *st = state + s * 2;                                                            \
    __global VALUE *sc = scalars + s * KD_BATCH_SLOTS;                                            \
    __local VALUE scratch[3 * KD_WG_SIZE]

/* Copy m vectors of n values between global g and local l (to_local or back), whole group. */
void kd_batch_copy(__global VALUE *g, __local VALUE *l, const int m, const int n,
                   const int to_local)
{
    for (int i = (int)get_local_id(0); i < m * n; i += KD_WG_SIZE) {
        if (to_local)
            l[i] = g[i];
        else
            g[i] = l[i];
    }
    KD_BATCH_PUBLISH;
}

__kernel KD_WG_ATTR void kd_batch_cg(KD_BATCH_SOLVE_ARGS)
{
    KD_BATCH_SYSTEM;
    __global VALUE *w = work + row0 * KD_BATCH_CG_VECTORS;
    kd_batch_cg_run_global(x + row0, w, w + n, w + 2 * (size_t)n, bs, ps, is, vs, ds, pre, n,
                           first, count, threshold[s], limits[s], st, sc, hs, hcap, scratch);
}

/* lm: (KD_BATCH_CG_VECTORS + 1) n values: x, then the work vectors as in global memory. */
__kernel KD_WG_ATTR void kd_batch_cg_local(KD_BATCH_SOLVE_ARGS, __local VALUE *lm)
{
    KD_BATCH_SYSTEM;
    __global VALUE *w = work + row0 * KD_BATCH_CG_VECTORS;
    __global VALUE *xs = x + row0;
    if (st[0] != KD_KRYLOV_RUNNING)
        return;
    kd_batch_copy(xs, lm, 1, n, 1);
    if (!first)
        kd_batch_copy(w, lm + n, 2, n, 1); /* r and p; q is rewritten before it is read */
    kd_batch_cg_run_local(lm, lm + n, lm + 2 * n, lm + 3 * n, bs, ps, is, vs, ds, pre, n, first,
                          count, threshold[s], limits[s], st, sc, hs, hcap, scratch);
    kd_batch_copy(xs, lm, 1, n, 0);
    kd_batch_copy(w, lm + n, 2, n, 0);
}

__kernel KD_WG_ATTR void kd_batch_bicgstab(KD_BATCH_SOLVE_ARGS)
{
    KD_BATCH_SYSTEM;
    __global VALUE *w = work + row0 * KD_BATCH_BICGSTAB_VECTORS;
    kd_batch_bicgstab_run_global(x + row0, w, w + n, w + 2 * (size_t)n, w + 3 * (size_t)n,
                                 w + 4 * (size_t)n, bs, ps, is, vs, ds, pre, n, first, count,
                                 threshold[s], limits[s], st, sc, hs, hcap, scratch);
}

/* lm: (KD_BATCH_BICGSTAB_VECTORS + 1) n values: x, then r, r0hat, p, v, t. */
__kernel KD_WG_ATTR void kd_batch_bicgstab_local(KD_BATCH_SOLVE_ARGS, __local VALUE *lm)
{
    KD_BATCH_SYSTEM;
    __global VALUE *w = work + row0 * KD_BATCH_BICGSTAB_VECTORS;
    __global VALUE *xs = x + row0;
    if (st[0] != KD_KRYLOV_RUNNING)
        return;
    kd_batch_copy(xs, lm, 1, n, 1);
    if (!first)
        kd_batch_copy(w, lm + n, 4, n, 1); /* r, r0hat, p, v; t is rewritten before it is read */
    kd_batch_bicgstab_run_local(lm, lm + n, lm + 2 * n, lm + 3 * n, lm + 4 * n, lm + 5 * n, bs,
                                ps, is, vs, ds, pre, n, first, count, threshold[s], limits[s], st,
                                sc, hs, hcap, scratch);
    kd_batch_copy(xs, lm, 1, n, 0);
    kd_batch_copy(w, lm + n, 4, n, 0);
}

/* aux: per system KD_BATCH_GMRES_AUX(m) values (batch_abi.h); work: (m + 2) n values, V then w. */
__kernel KD_WG_ATTR void kd_batch_gmres(KD_BATCH_SOLVE_ARGS, const int m, __global VALUE *aux)
{
    KD_BATCH_SYSTEM;
    (void)first;
    __global VALUE *w = work + row0 * (size_t)(m + 2);
    kd_batch_gmres_run_global(x + row0, w, w + (size_t)(m + 1) * n, bs, ps, is, vs, ds, pre, n, m,
                              count, threshold[s], limits[s], st, sc, hs, hcap,
                              aux + s * (size_t)KD_BATCH_GMRES_AUX(m), scratch);
}

/* lm: (m + 3) n values: x, V, w. No state crosses launches but x (each cycle starts over). */
__kernel KD_WG_ATTR void kd_batch_gmres_local(KD_BATCH_SOLVE_ARGS, const int m,
                                              __global VALUE *aux, __local VALUE *lm)
{
    KD_BATCH_SYSTEM;
    (void)first;
    (void)work;
    __global VALUE *xs = x + row0;
    if (st[0] != KD_KRYLOV_RUNNING)
        return;
    kd_batch_copy(xs, lm, 1, n, 1);
    kd_batch_gmres_run_local(lm, lm + n, lm + (size_t)(m + 2) * n, bs, ps, is, vs, ds, pre, n, m,
                             count, threshold[s], limits[s], st, sc, hs, hcap,
                             aux + s * (size_t)KD_BATCH_GMRES_AUX(m), scratch);
    kd_batch_copy(xs, lm, 1, n, 0);
}
