/*
 * BiCGSTAB, right-preconditioned (solver/methods/bicgstab.c holds the recurrence and the pass
 * order). Thread mapping, partial sums and the double-buffered column state as kernels/methods/krylov.cl;
 * besides kr's scalars every column has the method's own scalars own[parity][c][KD_BG_SLOTS].
 *
 * Which pass writes what, so that no launch reads a word another group of it writes: the
 * direction pass reads own[a] and the state of copy a and writes own[b] (RHO, R0, FRESH, GO1) and
 * the state of copy b; the step pass reads own[b].GO1 and writes ALPHA, GO3; the update pass reads
 * ALPHA, GO3 and writes OMEGA, and the state of copy b only where a column stops in it.
 *
 * A breakdown records its reason in the PQ slot (KD_BG_WHY_*), the offending value in FAIL and
 * what it was compared with in ALPHA and BETA, for the method's check.
 */
#include "krylov_lib.cl"

#if KD_FP64
#define KD_EPS DBL_EPSILON
#else
#define KD_EPS FLT_EPSILON
#endif

/* Keep in step with solver/methods/bicgstab.c. */
enum {
    KD_BG_RHO = 0,   /* r0hat'r of this iteration (the next one's rho_old) */
    KD_BG_R0 = 1,    /* r0hat'r0hat */
    KD_BG_FRESH = 2, /* 1: the next direction pass starts over (r0hat = r, p = r) */
    KD_BG_GO1 = 3,   /* the direction pass left the column running */
    KD_BG_ALPHA = 4,
    KD_BG_GO3 = 5, /* the step pass left it running */
    KD_BG_OMEGA = 6,
    KD_BG_RESTARTS = 7, /* fresh shadow residuals taken on a rho breakdown */
    KD_BG_SLOTS = 8
};
enum { KD_BG_WHY_RHO = 1, KD_BG_WHY_RV = 2, KD_BG_WHY_OMEGA = 3 };

#define KD_BG_OWN(par) (own + ((par)*k + c) * KD_BG_SLOTS)

/*
 * Iteration L.iteration, first pass: fold r'r and r0hat'r (left by the previous update pass or a
 * restart), decide (non-finite, converged after iteration - 1, at the limit, rho breakdown), then
 * beta = (rho / rho_old)(alpha / omega) and p = r + beta (p - omega v), phat = D^-1 p with a
 * diagonal (fresh: p = r, reading neither p nor v). A rho breakdown (r0hat orthogonal to r)
 * restarts the column with a fresh shadow residual, r0hat = r, rho = r'r, p = r, up to
 * KD_BICGSTAB_RESTARTS times (the usual remedy: the new r0hat'r = ||r||^2 > 0); the next one is
 * the breakdown. No partial sums. Forwards.
 */
__kernel KD_WG_ATTR void
kd_bicgstab_direction(KD_KRYLOV_LAUNCH, __global const VALUE *threshold,
                      __global const long *limits, __global const VALUE *res_partials,
                      __global VALUE *scalars, __global long *state, __global VALUE *own,
                      __global const VALUE *r, __global VALUE *p, __global const VALUE *v,
                      __global VALUE *phat, __global const VALUE *inv_diagonal,
                      __global VALUE *r0hat)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity, b = 1 - a;
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    KD_KRYLOV_COLUMN_STATE(a, b);
    __global const VALUE *o_in = KD_BG_OWN(a);
    __global VALUE *o_out = KD_BG_OWN(b);
    VALUE f[2];
    kd_krylov_folds(scratch, KD_RES(a, KD_KRYLOV_RES_RR), KD_RES(a, KD_KRYLOV_RES_RZ), 0, 0, 0,
                    groups, f, 2);
    int fresh = o_in[KD_BG_FRESH] != KD_ZERO, renew = 0;
    VALUE restarts = o_in[KD_BG_RESTARTS];
    const VALUE rr = f[0];
    VALUE rho = fresh ? f[0] : f[1];
    VALUE r0 = fresh ? f[0] : o_in[KD_BG_R0];
    VALUE beta = KD_ZERO, bound = KD_ZERO;
    int why = 0;
    if (status == KD_KRYLOV_RUNNING) {
        if (!isfinite(rr) || !isfinite(rho)) {
            status = KD_KRYLOV_NON_FINITE_RESIDUAL;
            at = L.iteration - 1;
            fail = isfinite(rr) ? rho : rr;
        } else if (rr <= threshold[c]) {
            status = KD_KRYLOV_CONVERGED;
            at = L.iteration - 1;
        } else if (L.iteration > limits[c]) {
            status = KD_KRYLOV_STOPPED;
            at = L.iteration - 1;
        } else if (fabs(rho) <= (bound = KD_EPS * sqrt(r0) * sqrt(rr))) {
            if (restarts < (VALUE)KD_BICGSTAB_RESTARTS && rr > KD_ZERO) {
                renew = fresh = 1; /* a fresh shadow residual: r0hat = r */
                rho = r0 = rr;
                restarts += (VALUE)1;
            } else {
                status = KD_KRYLOV_BREAKDOWN; /* the shadow residual is orthogonal to r */
                at = L.iteration;
                fail = rho;
                why = KD_BG_WHY_RHO;
            }
        }
        if (status == KD_KRYLOV_RUNNING && !fresh) {
            beta = (rho / o_in[KD_BG_RHO]) * (o_in[KD_BG_ALPHA] / o_in[KD_BG_OMEGA]);
            if (!isfinite(beta)) {
                status = KD_KRYLOV_NON_FINITE_ALPHA;
                at = L.iteration;
                fail = beta;
                beta = KD_ZERO;
            }
        }
    }
    const int go = status == KD_KRYLOV_RUNNING;
    if (get_global_id(0) == 0) {
        for (int j = 0; j < KD_KRYLOV_SLOTS; j++)
            s_out[j] = s_in[j];
        st_out[0] = status;
        st_out[1] = at;
        s_out[KD_KRYLOV_SLOT_FAIL] = fail;
        if (go) {
            s_out[KD_KRYLOV_SLOT_RR] = rr;
            s_out[KD_KRYLOV_SLOT_RZ] = rho;
            s_out[KD_KRYLOV_SLOT_BETA] = beta;
        } else if (why != 0) {
            s_out[KD_KRYLOV_SLOT_PQ] = (VALUE)why;
            s_out[KD_KRYLOV_SLOT_ALPHA] = bound;
            s_out[KD_KRYLOV_SLOT_BETA] = restarts;
        }
        o_out[KD_BG_RHO] = go ? rho : o_in[KD_BG_RHO];
        o_out[KD_BG_R0] = go ? r0 : o_in[KD_BG_R0];
        o_out[KD_BG_FRESH] = go ? KD_ZERO : o_in[KD_BG_FRESH];
        o_out[KD_BG_GO1] = (VALUE)go;
        o_out[KD_BG_RESTARTS] = restarts;
    }
    const uint end = go ? (uint)n : 0u;
    const VALUE omega = fresh ? KD_ZERO : o_in[KD_BG_OMEGA];
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + i;
        const VALUE pi = fresh ? r[e] : r[e] + beta * (p[e] - omega * v[e]);
        p[e] = pi;
        if (renew)
            r0hat[e] = pi;
        if (diag)
            phat[e] = inv_diagonal[i] * pi;
    }
}

/*
 * The partial sums of x'y and y'y into dot_partials[RMQ] and [QMQ] for the columns whose
 * own[b][go] is set (r0hat'v and v'v after the first SpMV, s't and t't after the second: what
 * kd_krylov_csr_spmv_dots3 leaves with ops = WITH_RQ when the SpMV is fused). Backwards.
 */
__kernel KD_WG_ATTR void kd_bicgstab_dots(KD_KRYLOV_LAUNCH, __global const VALUE *own,
                                          const int go_slot, __global const VALUE *xv,
                                          __global const VALUE *yv, __global VALUE *dot_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int n = L.n, ld = L.ld, b = 1 - L.parity;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int groups = (int)get_num_groups(0);
    const uint end = KD_BG_OWN(b)[go_slot] != KD_ZERO ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE s[2] = {KD_ZERO, KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + (n - 1u - i);
        const VALUE yi = yv[e];
        s[0] += xv[e] * yi;
        s[1] += yi * yi;
    }
    kd_krylov_group_sums(scratch, s, 2);
    if (get_local_id(0) == 0) {
        KD_DOT(KD_KRYLOV_DOT_RMQ)[get_group_id(0)] = s[0];
        KD_DOT(KD_KRYLOV_DOT_QMQ)[get_group_id(0)] = s[1];
    }
}

/*
 * Second pass: fold r0hat'v and v'v, alpha = rho / r0hat'v (breakdown when r0hat'v is 0 against
 * ||r0hat|| ||v||), s = r - alpha v written over r, shat = D^-1 s with a diagonal, and the
 * partial sums of s's into res_partials[a][RR] (consumed by this iteration's direction pass, so
 * free; the update pass folds them). Forwards.
 */
__kernel KD_WG_ATTR void
kd_bicgstab_step(KD_KRYLOV_LAUNCH, __global const VALUE *dot_partials,
                 __global VALUE *res_partials, __global VALUE *scalars, __global long *state,
                 __global VALUE *own, __global VALUE *r, __global const VALUE *v,
                 __global VALUE *shat, __global const VALUE *inv_diagonal)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity, b = 1 - a;
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    __global VALUE *o = KD_BG_OWN(b);
    __global VALUE *s_out = scalars + (b * k + c) * KD_KRYLOV_SLOTS;
    __global long *st_out = state + (b * k + c) * 2;
    VALUE f[2];
    kd_krylov_folds(scratch, KD_DOT(KD_KRYLOV_DOT_RMQ), KD_DOT(KD_KRYLOV_DOT_QMQ), 0, 0, 0, groups,
                    f, 2);
    const VALUE rv = f[0], vv = f[1];
    const int go1 = o[KD_BG_GO1] != KD_ZERO;
    long status = KD_KRYLOV_RUNNING;
    VALUE alpha = KD_ZERO, fail = KD_ZERO, bound = KD_ZERO;
    if (go1) {
        const VALUE rho = o[KD_BG_RHO];
        if (!isfinite(rv) || !isfinite(vv)) {
            status = KD_KRYLOV_NON_FINITE_PQ;
            fail = isfinite(rv) ? vv : rv;
        } else if (fabs(rv) <= (bound = KD_EPS * sqrt(o[KD_BG_R0]) * sqrt(vv))) {
            status = KD_KRYLOV_BREAKDOWN;
            fail = rv;
        } else {
            alpha = rho / rv;
            if (!isfinite(alpha)) {
                status = KD_KRYLOV_NON_FINITE_ALPHA;
                fail = alpha;
                alpha = KD_ZERO;
            } else if (alpha == KD_ZERO) {
                status = KD_KRYLOV_ZERO_STEP;
                fail = rho;
            }
        }
    }
    const int go = go1 && status == KD_KRYLOV_RUNNING;
    if (get_global_id(0) == 0) {
        o[KD_BG_ALPHA] = alpha;
        o[KD_BG_GO3] = (VALUE)go;
        if (go1) {
            s_out[KD_KRYLOV_SLOT_PQ] = rv;
            s_out[KD_KRYLOV_SLOT_ALPHA] = alpha;
        }
        if (go1 && !go) {
            st_out[0] = status;
            st_out[1] = L.iteration;
            s_out[KD_KRYLOV_SLOT_FAIL] = fail;
            if (status == KD_KRYLOV_BREAKDOWN) {
                s_out[KD_KRYLOV_SLOT_PQ] = (VALUE)KD_BG_WHY_RV;
                s_out[KD_KRYLOV_SLOT_ALPHA] = bound;
            } else {
                s_out[KD_KRYLOV_SLOT_PQ] = rv;
            }
        }
    }
    const uint end = go ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE s[1] = {KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + i;
        const VALUE si = r[e] - alpha * v[e];
        r[e] = si;
        if (diag)
            shat[e] = inv_diagonal[i] * si;
        s[0] += si * si;
    }
    kd_krylov_group_sums(scratch, s, 1);
    if (get_local_id(0) == 0 && end != 0u)
        KD_RES(a, KD_KRYLOV_RES_RR)[get_group_id(0)] = s[0];
}

/*
 * Last pass: fold s's, s't, t't. s's under the threshold: x += alpha phat, converged at this
 * iteration (the half step). t's or t't 0: the same half step, then a breakdown. Else
 * omega = t's / t't, x += alpha phat + omega shat, r = s - omega t. Then the exact partial sums
 * of r'r and r0hat'r into res_partials[b] for the next direction pass (a column that did not take
 * the step carries res_partials[a] over). Forwards.
 */
__kernel KD_WG_ATTR void
kd_bicgstab_update(KD_KRYLOV_LAUNCH, __global const VALUE *threshold,
                   __global const VALUE *dot_partials, __global VALUE *res_partials,
                   __global VALUE *scalars, __global long *state, __global VALUE *own,
                   __global VALUE *x, __global VALUE *r, __global const VALUE *t,
                   __global const VALUE *phat, __global const VALUE *shat,
                   __global const VALUE *r0hat)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[3 * KD_WG_SIZE];
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity, b = 1 - a;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    __global VALUE *o = KD_BG_OWN(b);
    __global VALUE *s_out = scalars + (b * k + c) * KD_KRYLOV_SLOTS;
    __global long *st_out = state + (b * k + c) * 2;
    VALUE f[3];
    kd_krylov_folds(scratch, KD_RES(a, KD_KRYLOV_RES_RR), KD_DOT(KD_KRYLOV_DOT_RMQ),
                    KD_DOT(KD_KRYLOV_DOT_QMQ), 0, 0, groups, f, 3);
    const VALUE ss = f[0], ts = f[1], tt = f[2];
    const int go3 = o[KD_BG_GO3] != KD_ZERO;
    const VALUE alpha = go3 ? o[KD_BG_ALPHA] : KD_ZERO;
    long status = KD_KRYLOV_RUNNING;
    VALUE omega = KD_ZERO, fail = KD_ZERO;
    if (go3) {
        if (!isfinite(ss)) {
            status = KD_KRYLOV_NON_FINITE_RESIDUAL;
            fail = ss;
        } else if (ss <= threshold[c]) {
            status = KD_KRYLOV_CONVERGED;
        } else if (!isfinite(ts) || !isfinite(tt)) {
            status = KD_KRYLOV_NON_FINITE_PQ;
            fail = isfinite(ts) ? tt : ts;
        } else if (ts == KD_ZERO || tt == KD_ZERO) {
            status = KD_KRYLOV_BREAKDOWN;
            fail = ts;
        } else {
            omega = ts / tt;
            if (!isfinite(omega)) {
                status = KD_KRYLOV_NON_FINITE_ALPHA;
                fail = omega;
                omega = KD_ZERO;
            }
        }
    }
    if (get_global_id(0) == 0) {
        o[KD_BG_OMEGA] = omega;
        if (go3 && status != KD_KRYLOV_RUNNING) {
            st_out[0] = status;
            st_out[1] = L.iteration;
            s_out[KD_KRYLOV_SLOT_FAIL] = fail;
            if (status == KD_KRYLOV_BREAKDOWN) {
                s_out[KD_KRYLOV_SLOT_PQ] = (VALUE)KD_BG_WHY_OMEGA;
                s_out[KD_KRYLOV_SLOT_ALPHA] = tt;
            }
        }
    }
    /* The half step (alpha) stands whatever the second one does: x goes with r = s. */
    const int step = go3 && (status == KD_KRYLOV_RUNNING || status == KD_KRYLOV_CONVERGED ||
                             status == KD_KRYLOV_BREAKDOWN);
    const uint end = step ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE s[2] = {KD_ZERO, KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + i;
        VALUE ri = r[e];
        if (omega != KD_ZERO) {
            x[e] += alpha * phat[e] + omega * shat[e];
            ri -= omega * t[e];
            r[e] = ri;
        } else {
            x[e] += alpha * phat[e];
        }
        s[0] += ri * ri;
        s[1] += r0hat[e] * ri;
    }
    kd_krylov_group_sums(scratch, s, 2);
    if (get_local_id(0) == 0) {
        const int g = (int)get_group_id(0);
        KD_RES(b, KD_KRYLOV_RES_RR)[g] = end != 0u ? s[0] : KD_RES(a, KD_KRYLOV_RES_RR)[g];
        KD_RES(b, KD_KRYLOV_RES_RZ)[g] = end != 0u ? s[1] : KD_RES(a, KD_KRYLOV_RES_RZ)[g];
    }
}

/*
 * A (re)start of the columns with KD_KRYLOV_MASK_PARTIALS in their mask (mask NULL: mask_all),
 * after kd_krylov_residual has set their state and r'r at iteration L.iteration: r0hat = r and
 * own[parity].FRESH = 1, so the next direction pass takes rho = r'r and p = r.
 */
__kernel KD_WG_ATTR void kd_bicgstab_restart(KD_KRYLOV_LAUNCH, __global const int *mask,
                                             __global VALUE *own, __global const VALUE *r,
                                             __global VALUE *r0hat)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, par = L.parity;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int m = mask != 0 ? mask[c] : L.mask_all;
    if ((m & KD_KRYLOV_MASK_PARTIALS) == 0)
        return; /* no barrier in this kernel */
    if (get_global_id(0) == 0) {
        __global VALUE *o = KD_BG_OWN(par);
        for (int j = 0; j < KD_BG_SLOTS; j++)
            o[j] = KD_ZERO;
        o[KD_BG_FRESH] = (VALUE)1;
    }
    const size_t base = (size_t)c * (size_t)ld;
    for (uint i = (uint)get_global_id(0); i < (uint)n; i += (uint)get_global_size(0))
        r0hat[base + i] = r[base + i];
}
