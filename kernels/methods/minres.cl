/*
 * MINRES (Paige and Saunders), SciPy's recurrence; solver/methods/minres.c holds the order of the
 * passes and the buffers' roles. Thread mapping, partial sums and the double-buffered column
 * state as kernels/methods/krylov.cl; the rotation's scalars do not fit kr's slots, so every column has
 * the method's own own[parity][c][KD_MR_SLOTS], read from copy a and written to copy b by the
 * update pass, which every group runs redundantly (group 0 writes).
 *
 * Iteration j's update pass does two things at once: the rotation of iteration j - 1, which
 * needed beta_j (the reduction of the previous update pass), with its w and x update, and the
 * Lanczos step of iteration j. So x lags the Lanczos vectors by one iteration: the state after
 * iteration j holds x_{j-1} and phibar_{j-1}, and convergence is declared "after iteration j - 1".
 */
#include "krylov_lib.cl"

#if KD_FP64
#define KD_EPS DBL_EPSILON
#else
#define KD_EPS FLT_EPSILON
#endif

/* Keep in step with solver/methods/minres.c. */
enum {
    KD_MR_BETA = 0, /* beta_j of the last Lanczos step's input (oldb for the next) */
    KD_MR_ALFA = 1,
    KD_MR_DBAR = 2,
    KD_MR_EPSLN = 3,
    KD_MR_PHIBAR = 4,
    KD_MR_CS = 5,
    KD_MR_SN = 6,
    KD_MR_M = 7,     /* Lanczos steps since the (re)start */
    KD_MR_RATIO = 8, /* ||r0||_2^2 / ||r0||_{M^-1}^2 at the (re)start: phibar to ||r||_2 */
    KD_MR_GO = 9,    /* the update pass took a Lanczos step */
    KD_MR_SLOTS = 10
};

#define KD_MR_OWN(par) (own + ((par)*k + c) * KD_MR_SLOTS)

/*
 * Iteration L.iteration (1-based): fold y'q (q = A y, y = M^-1 r2: alfa = y'q / beta^2) and
 * beta_j^2 = r2'y; the rotation of the previous step, w = (v - oldeps w_{m-2} - delta w_{m-1})
 * / gamma written over w_{m-2} (wa), x += phi w; decide on the estimate phibar^2 * ratio; the
 * Lanczos step r_new = q / beta - (beta / oldb) r1 - (alfa / beta) r2 written over r1, with a
 * diagonal y_new = D^-1 r_new into y, and the partial sums of r_new'y_new into
 * res_partials[b][RZ] (with an operator a later kd_minres_sums leaves them). yold is
 * M^-1 r1 for an operator (with a diagonal it is formed from r1, without one it is r1). Forwards.
 */
__kernel KD_WG_ATTR void
kd_minres_update(KD_KRYLOV_LAUNCH, __global const VALUE *threshold, __global const long *limits,
                 __global const VALUE *dot_partials, __global VALUE *res_partials,
                 __global VALUE *scalars, __global long *state, __global VALUE *own,
                 __global const VALUE *q, __global VALUE *r1, __global const VALUE *r2,
                 __global VALUE *x, __global VALUE *wa, __global const VALUE *wb,
                 __global const VALUE *yold, __global VALUE *y, __global const VALUE *inv_diagonal)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity, b = 1 - a;
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int oper = (L.ops & KD_KRYLOV_OP_OPERATOR) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    KD_KRYLOV_COLUMN_STATE(a, b);
    __global const VALUE *o_in = KD_MR_OWN(a);
    __global VALUE *o_out = KD_MR_OWN(b);
    VALUE f[2];
    kd_krylov_folds(scratch, KD_DOT(KD_KRYLOV_DOT_PQ), KD_RES(a, KD_KRYLOV_RES_RZ), 0, 0, 0,
                    groups, f, 2);
    const VALUE yq = f[0], beta2 = f[1];
    const VALUE m = o_in[KD_MR_M], oldb = o_in[KD_MR_BETA], alfa_old = o_in[KD_MR_ALFA];
    VALUE dbar = o_in[KD_MR_DBAR], epsln = o_in[KD_MR_EPSLN], phibar = o_in[KD_MR_PHIBAR];
    VALUE cs = o_in[KD_MR_CS], sn = o_in[KD_MR_SN], ratio = o_in[KD_MR_RATIO];
    VALUE beta = KD_ZERO, alfa = KD_ZERO, est = s_in[KD_KRYLOV_SLOT_RR];
    VALUE oldeps = KD_ZERO, delta = KD_ZERO, denom = KD_ZERO, phi = KD_ZERO;
    int rotate = 0, lanczos = 0;
    if (status == KD_KRYLOV_RUNNING) {
        if (!isfinite(beta2) || !isfinite(yq)) {
            status = KD_KRYLOV_NON_FINITE_RESIDUAL;
            at = L.iteration - 1;
            fail = isfinite(beta2) ? yq : beta2;
        } else if (beta2 < KD_ZERO) {
            status = KD_KRYLOV_BREAKDOWN; /* r'M^-1 r < 0: M is not positive definite */
            at = L.iteration;
            fail = beta2;
        } else {
            beta = sqrt(beta2);
            if (m == KD_ZERO) {
                /* The (re)start: beta1 = phibar = ||r0||_{M^-1}; est is r0'r0 itself. */
                phibar = beta;
                ratio = (diag || oper) && beta2 > KD_ZERO ? est / beta2 : (VALUE)1;
            } else {
                rotate = 1;
                oldeps = epsln;
                delta = cs * dbar + sn * alfa_old;
                const VALUE gbar = sn * dbar - cs * alfa_old;
                epsln = sn * beta;
                dbar = -cs * beta;
                const VALUE gamma = fmax(hypot(gbar, beta), KD_EPS);
                cs = gbar / gamma;
                sn = beta / gamma;
                phi = cs * phibar;
                phibar = sn * phibar;
                denom = (VALUE)1 / gamma;
                est = phibar * phibar * ratio;
            }
            if (!isfinite(est)) {
                status = KD_KRYLOV_NON_FINITE_RESIDUAL;
                at = L.iteration - 1;
                fail = est;
                rotate = 0;
            } else if (est <= threshold[c]) {
                status = KD_KRYLOV_CONVERGED;
                at = L.iteration - 1;
            } else if (L.iteration > limits[c]) {
                status = KD_KRYLOV_STOPPED;
                at = L.iteration - 1;
            } else if (beta == KD_ZERO) {
                status = KD_KRYLOV_BREAKDOWN; /* r != 0 with r'M^-1 r = 0 */
                at = L.iteration;
                fail = beta2;
            } else {
                alfa = yq / beta2;
                lanczos = isfinite(alfa);
                if (!lanczos) {
                    status = KD_KRYLOV_NON_FINITE_PQ;
                    at = L.iteration;
                    fail = yq;
                }
            }
        }
    }
    if (get_global_id(0) == 0) {
        for (int j = 0; j < KD_KRYLOV_SLOTS; j++)
            s_out[j] = s_in[j];
        st_out[0] = status;
        st_out[1] = at;
        s_out[KD_KRYLOV_SLOT_FAIL] = fail;
        for (int j = 0; j < KD_MR_SLOTS; j++)
            o_out[j] = o_in[j];
        if (rotate || lanczos) {
            s_out[KD_KRYLOV_SLOT_RR] = est;
            s_out[KD_KRYLOV_SLOT_RZ] = beta2;
            s_out[KD_KRYLOV_SLOT_PQ] = yq;
            s_out[KD_KRYLOV_SLOT_ALPHA] = phi;
            s_out[KD_KRYLOV_SLOT_BETA] = beta;
            o_out[KD_MR_DBAR] = dbar;
            o_out[KD_MR_EPSLN] = epsln;
            o_out[KD_MR_PHIBAR] = phibar;
            o_out[KD_MR_CS] = cs;
            o_out[KD_MR_SN] = sn;
            o_out[KD_MR_RATIO] = ratio;
        }
        if (lanczos) {
            o_out[KD_MR_BETA] = beta;
            o_out[KD_MR_ALFA] = alfa;
            o_out[KD_MR_M] = m + (VALUE)1;
        }
        o_out[KD_MR_GO] = (VALUE)lanczos;
    }
    /* w_{m-1} exists from the second rotation on, w_{m-2} from the third. */
    const int use_wb = m >= (VALUE)2, use_wa = m >= (VALUE)3, first = m == KD_ZERO;
    const VALUE inv_oldb = rotate ? (VALUE)1 / oldb : KD_ZERO;
    const VALUE inv_beta = lanczos ? (VALUE)1 / beta : KD_ZERO;
    const VALUE c1 = lanczos && !first ? beta / oldb : KD_ZERO, c2 = alfa * inv_beta;
    const uint end = rotate || lanczos ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE s[1] = {KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + i;
        const VALUE r1i = first ? KD_ZERO : r1[e];
        if (rotate) {
            const VALUE yi = oper ? yold[e] : diag ? inv_diagonal[i] * r1i : r1i;
            VALUE wi = yi * inv_oldb;
            if (use_wa)
                wi -= oldeps * wa[e];
            if (use_wb)
                wi -= delta * wb[e];
            wi *= denom;
            wa[e] = wi;
            x[e] += phi * wi;
        }
        if (lanczos) {
            const VALUE rn = q[e] * inv_beta - c1 * r1i - c2 * r2[e];
            r1[e] = rn;
            VALUE yn = rn;
            if (diag) {
                yn = inv_diagonal[i] * rn;
                y[e] = yn;
            }
            s[0] += rn * yn;
        }
    }
    kd_krylov_group_sums(scratch, s, 1);
    if (get_local_id(0) == 0 && lanczos && !oper)
        KD_RES(b, KD_KRYLOV_RES_RZ)[get_group_id(0)] = s[0];
}

/* With an operator: the partial sums of r'y (y = M^-1 r, the operator's) into
 * res_partials[b][RZ] of the columns whose update pass took a Lanczos step. Forwards. */
__kernel KD_WG_ATTR void kd_minres_sums(KD_KRYLOV_LAUNCH, __global const VALUE *own,
                                        __global const VALUE *r, __global const VALUE *y,
                                        __global VALUE *res_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[KD_WG_SIZE];
    const int n = L.n, ld = L.ld, groups = L.groups, b = 1 - L.parity;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const uint end = KD_MR_OWN(b)[KD_MR_GO] != KD_ZERO ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    VALUE s[1] = {KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += (uint)get_global_size(0))
        s[0] += r[base + i] * y[base + i];
    kd_krylov_group_sums(scratch, s, 1);
    if (get_local_id(0) == 0 && end != 0u)
        KD_RES(b, KD_KRYLOV_RES_RZ)[get_group_id(0)] = s[0];
}

/*
 * A (re)start at iteration L.iteration of the columns with KD_KRYLOV_MASK_PARTIALS in their
 * mask (mask NULL: mask_all), after kd_krylov_residual set their state and r'r: the rotation's
 * start (cs = -1, sn = 0, nothing else) in own[parity], y = D^-1 r with a diagonal, and the
 * partial sums of r'y (beta1^2) into res_partials[parity][RZ]. r is the buffer the next
 * iteration reads as r2; y is M^-1 r (an operator's, already applied) or written here.
 */
__kernel KD_WG_ATTR void kd_minres_restart(KD_KRYLOV_LAUNCH, __global const int *mask,
                                           __global VALUE *own, __global const VALUE *r,
                                           __global VALUE *y, __global const VALUE *inv_diagonal,
                                           __global VALUE *res_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[KD_WG_SIZE];
    const int n = L.n, ld = L.ld, par = L.parity;
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int oper = (L.ops & KD_KRYLOV_OP_OPERATOR) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int groups = (int)get_num_groups(0);
    const int m = mask != 0 ? mask[c] : L.mask_all;
    const uint end = (m & KD_KRYLOV_MASK_PARTIALS) != 0 ? (uint)n : 0u;
    if (get_global_id(0) == 0 && end != 0u) {
        __global VALUE *o = KD_MR_OWN(par);
        for (int j = 0; j < KD_MR_SLOTS; j++)
            o[j] = KD_ZERO;
        o[KD_MR_CS] = (VALUE)-1;
        o[KD_MR_RATIO] = (VALUE)1;
    }
    const size_t base = (size_t)c * (size_t)ld;
    VALUE s[1] = {KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += (uint)get_global_size(0)) {
        const VALUE ri = r[base + i];
        VALUE yi = ri;
        if (oper) {
            yi = y[base + i];
        } else if (diag) {
            yi = inv_diagonal[i] * ri;
            y[base + i] = yi;
        }
        s[0] += ri * yi;
    }
    kd_krylov_group_sums(scratch, s, 1);
    if (get_local_id(0) == 0 && end != 0u)
        KD_RES(par, KD_KRYLOV_RES_RZ)[get_group_id(0)] = s[0];
}
