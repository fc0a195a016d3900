/*
 * What every Krylov kernel file shares (kernels/methods/krylov.cl and each method's own .cl file include
 * it): the host/kernel ABI, the partial-sum addressing, the work-group sums, the fold of a
 * column's partial sums in a fixed order, and the decision of a CG-like step (converged, at the
 * limit, breakdown, non-finite, or its step length). Thread mapping and memory layout: see
 * kernels/methods/krylov.cl.
 */
#ifndef KD_KRYLOV_LIB_CL
#define KD_KRYLOV_LIB_CL

#include "krylov_abi.h"

/* Column c's partial sums (see krylov_abi.h): dot j, and residual sum j of set s. */
#define KD_DOT(j) (dot_partials + ((j)*k + c) * groups)
#define KD_RES(s, j) (res_partials + (((s)*KD_KRYLOV_RES_SUMS + (j)) * k + c) * groups)

/* In a kernel over columns (c, k) with buffers `state` and `scalars`: column c's state and
 * scalars in the copy a the pass reads (st_in, s_in) and the copy b it writes (st_out, s_out),
 * and its status, the iteration that status took effect and its failing value as the pass
 * starts. */
#define KD_KRYLOV_COLUMN_STATE(a, b)                                                               \
    __global const long *st_in = state + ((a) * k + c) * 2;                                       \
    __global long *st_out = state + ((b) * k + c) * 2;                                             \
    __global const VALUE *s_in = scalars + ((a) * k + c) * KD_KRYLOV_SLOTS;                        \
    __global VALUE *s_out = scalars + ((b) * k + c) * KD_KRYLOV_SLOTS;                             \
    long status = st_in[0], at = st_in[1];                                                         \
    VALUE fail = s_in[KD_KRYLOV_SLOT_FAIL]

/* The totals of v[0..m) over the work-group at once, one set of barriers (every work-item gets
 * them in v). scratch holds m * KD_WG_SIZE values. */
void kd_krylov_group_sums(__local VALUE *scratch, VALUE *v, const int m)
{
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE); /* scratch may still be read from a previous sum */
    for (int j = 0; j < m; j++)
        scratch[j * KD_WG_SIZE + lid] = v[j];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            for (int j = 0; j < m; j++)
                scratch[j * KD_WG_SIZE + lid] += scratch[j * KD_WG_SIZE + lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int j = 0; j < m; j++)
        v[j] = scratch[j * KD_WG_SIZE];
}

/* v[j] = the sum of the `groups` partials at p[j], j < m, in a fixed order (every work-item). */
void kd_krylov_folds(__local VALUE *scratch, __global const VALUE *p0, __global const VALUE *p1,
                     __global const VALUE *p2, __global const VALUE *p3, __global const VALUE *p4,
                     const int groups, VALUE *v, const int m)
{
    for (int j = 0; j < m; j++)
        v[j] = KD_ZERO;
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE) {
        v[0] += p0[g];
        if (m > 1)
            v[1] += p1[g];
        if (m > 2)
            v[2] += p2[g];
        if (m > 3)
            v[3] += p3[g];
        if (m > 4)
            v[4] += p4[g];
    }
    kd_krylov_group_sums(scratch, v, m);
}

/*
 * The decision of iteration `iteration` for a column in state (status, at) with r'r = rr,
 * r'z = rz, p'q = pq: non-finite r'r, converged (rr <= threshold: after iteration - 1), stopped
 * at its iteration limit (after `limit` iterations), non-finite p'q or alpha, breakdown
 * (p'q <= 0), a zero step, or running with alpha = rz / pq (returned; 0 unless running).
 */
VALUE kd_krylov_decide(long *status, long *at, VALUE *fail, const VALUE rr, const VALUE rz,
                       const VALUE pq, const VALUE threshold, const long limit,
                       const long iteration)
{
    VALUE alpha = KD_ZERO;
    if (*status != KD_KRYLOV_RUNNING)
        return alpha;
    if (!isfinite(rr) || !isfinite(rz)) {
        *status = KD_KRYLOV_NON_FINITE_RESIDUAL;
        *at = iteration - 1;
        *fail = rr;
    } else if (rr <= threshold) {
        *status = KD_KRYLOV_CONVERGED;
        *at = iteration - 1;
    } else if (iteration > limit) {
        *status = KD_KRYLOV_STOPPED;
        *at = iteration - 1;
    } else if (!isfinite(pq)) {
        *status = KD_KRYLOV_NON_FINITE_PQ;
        *at = iteration;
        *fail = pq;
    } else if (pq <= KD_ZERO) {
        *status = KD_KRYLOV_BREAKDOWN;
        *at = iteration;
        *fail = pq;
    } else {
        alpha = rz / pq;
        if (!isfinite(alpha)) {
            *status = KD_KRYLOV_NON_FINITE_ALPHA;
            *at = iteration;
            *fail = alpha;
            alpha = KD_ZERO;
        } else if (alpha == KD_ZERO) {
            *status = KD_KRYLOV_ZERO_STEP;
            *at = iteration;
            *fail = rz;
        }
    }
    return alpha;
}

#endif
