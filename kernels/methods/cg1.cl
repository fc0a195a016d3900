/*
 * CG with the Chronopoulos-Gear recurrence (solver/methods/cg1.c): one synchronisation per
 * iteration. With u = M^-1 r (u is r itself without a preconditioner) and w = A u:
 *
 *   gamma = r'u, delta = w'u
 *   beta  = gamma / gamma_old,  alpha = gamma / (delta - beta gamma / alpha_old)
 *           (beta = 0, alpha = gamma / delta at the start and after a restart: alpha_old = 0)
 *   p = u + beta p, s = w + beta s, x += alpha p, r -= alpha s, u = M^-1 r
 *
 * An iteration is the SpMV w = A u and the dot w'u (kd_krylov_dots, or fused with the SpMV on a
 * csr_scalar matrix), then kd_cg1_update below, which also leaves the partial sums of the new r'r
 * and r'u: all three sums the next step needs are there after the first pass, one reduction.
 *
 * Thread mapping as kernels/methods/krylov.cl: a 2-D range (G * WG, k), column c's G groups in a
 * grid-stride loop over its n elements; every group folds the column's partial sums itself.
 * Scalars and partial sums are double-buffered by iteration parity; the previous gamma is kept in
 * KD_KRYLOV_SLOT_AUX (the snapshot's fold rewrites r'r and r'z only).
 */
#include "krylov_lib.cl"

/*
 * Iteration L.iteration: fold delta (dot_partials[PQ]) and the r'r, r'u of copy a; decide as CG
 * does with the denominator delta - beta gamma / alpha_old (p'Ap in exact arithmetic); update
 * p, s, x, r, u in one pass and leave the new r'r and r'u in res_partials[b] (a frozen column's
 * are carried over). u may be r (no preconditioner: KD_KRYLOV_OP_DIAGONAL not set). Forwards.
 */
__kernel KD_WG_ATTR void
kd_cg1_update(KD_KRYLOV_LAUNCH, __global const VALUE *threshold,
              __global const long *limits, __global const VALUE *dot_partials,
              __global VALUE *res_partials, __global VALUE *scalars, __global long *state,
              __global const VALUE *w, __global VALUE *r, __global VALUE *x, __global VALUE *u,
              __global VALUE *p, __global VALUE *s, __global const VALUE *inv_diagonal)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    __local VALUE scratch[3 * KD_WG_SIZE];
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity, b = 1 - a;
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    KD_KRYLOV_COLUMN_STATE(a, b);
    VALUE v[3];
    kd_krylov_folds(scratch, KD_DOT(KD_KRYLOV_DOT_PQ), KD_RES(a, KD_KRYLOV_RES_RR),
                    KD_RES(a, KD_KRYLOV_RES_RZ), 0, 0, groups, v, diag ? 3 : 2);
    const int running = status == KD_KRYLOV_RUNNING;
    const VALUE delta = v[0], rr = v[1], gamma = diag ? v[2] : v[1];
    const VALUE alpha_old = s_in[KD_KRYLOV_SLOT_ALPHA];
    VALUE beta = KD_ZERO, denom = KD_ZERO;
    if (running) {
        beta = alpha_old != KD_ZERO ? gamma / s_in[KD_KRYLOV_SLOT_AUX] : KD_ZERO;
        denom = alpha_old != KD_ZERO ? delta - beta * gamma / alpha_old : delta;
    }
    const VALUE alpha =
        kd_krylov_decide(&status, &at, &fail, rr, gamma, denom, threshold[c], limits[c],
                         L.iteration);
    if (alpha == KD_ZERO)
        beta = KD_ZERO;
    if (get_global_id(0) == 0) {
        st_out[0] = status;
        st_out[1] = at;
        s_out[KD_KRYLOV_SLOT_PQ] = denom;
        s_out[KD_KRYLOV_SLOT_ALPHA] = alpha;
        s_out[KD_KRYLOV_SLOT_BETA] = beta;
        s_out[KD_KRYLOV_SLOT_FAIL] = fail;
        s_out[KD_KRYLOV_SLOT_AUX] = alpha != KD_ZERO ? gamma : s_in[KD_KRYLOV_SLOT_AUX];
    }
    const uint end = alpha != KD_ZERO ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    v[0] = v[1] = KD_ZERO;
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + i;
        const VALUE ui = diag ? u[e] : r[e];
        const VALUE pi = beta != KD_ZERO ? ui + beta * p[e] : ui;
        const VALUE si = beta != KD_ZERO ? w[e] + beta * s[e] : w[e];
        const VALUE ri = r[e] - alpha * si;
        const VALUE zi = diag ? inv_diagonal[i] * ri : ri;
        p[e] = pi;
        s[e] = si;
        x[e] += alpha * pi;
        r[e] = ri;
        if (diag)
            u[e] = zi;
        v[0] += ri * ri;
        v[1] += ri * zi;
    }
    kd_krylov_group_sums(scratch, v, 2);
    if (get_local_id(0) == 0) {
        const int g = (int)get_group_id(0);
        KD_RES(b, KD_KRYLOV_RES_RR)[g] = end != 0u ? v[0] : KD_RES(a, KD_KRYLOV_RES_RR)[g];
        KD_RES(b, KD_KRYLOV_RES_RZ)[g] = end != 0u ? v[1] : KD_RES(a, KD_KRYLOV_RES_RZ)[g];
    }
}
