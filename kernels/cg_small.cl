/*
 * CG and Jacobi-PCG for a small matrix: `count` iterations of every column in one launch, one
 * work-group per column (the host launches (KD_WG_SIZE, k)), the residual decided on the device
 * every iteration (solver/method_cg.c, the "small" path). On a GPU a small system's iteration
 * is launch- and check-bound on the general path (about 30 us for 1138 rows on an H100, of which
 * the arithmetic is a few); here the iterations run back to back inside the kernel, separated by
 * work-group barriers, and the host only wakes at the chunk's end.
 *
 * The arithmetic is the two-pass iteration's (kernels/krylov.cl: kd_krylov_dots3 with r'Mq, then
 * kd_krylov_update_merged), step for step: q = A d with p'q, r'Mq, q'Mq; the decision
 * (kd_krylov_decide); beta from the recurrence r'z - 2 alpha r'Mq + alpha^2 q'Mq; r -= alpha q,
 * x += alpha d, d = z + beta d with the new r'r, r'z. Only the order of the sums differs (one
 * work-group's tree instead of G groups' partials), so iteration counts agree to rounding.
 *
 * The device state it leaves is the one the general passes leave after the chunk's last
 * iteration, so the host's snapshot, confirmation and restarts are unchanged: state[parity] and
 * scalars[parity] written every iteration by work-item 0, and at the end res_partials[parity]
 * holding r'r and r'z in group 0's slot and zeros in the other G - 1 (their fold is the sum). A
 * column that stops (converged, breakdown, limit, non-finite) leaves the loop at once, its state
 * written to both parities as the later iterations' no-op passes would have.
 *
 * Vectors stay in global memory (they are small: the gathers of d hit the caches). Rows are
 * dealt to work-items round-robin.
 */
#include "krylov_lib.cl"

__kernel KD_WG_ATTR void kd_cg_small(KD_KRYLOV_LAUNCH, const int count,
                                     __global const VALUE *threshold, __global const long *limits,
                                     __global VALUE *res_partials, __global VALUE *scalars,
                                     __global long *state, __global const int *indptr,
                                     __global const int *indices, __global const VALUE *values,
                                     __global VALUE *d, __global VALUE *q, __global VALUE *r,
                                     __global VALUE *x, __global const VALUE *inv_diagonal)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, groups = L.groups;
    const int pcg = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int lid = (int)get_local_id(0);
    __local VALUE scratch[3 * KD_WG_SIZE];
    const size_t base = (size_t)c * (size_t)L.ld;
    __global VALUE *dc = d + base, *qc = q + base, *rc = r + base, *xc = x + base;

    int a = L.parity;
    /* r'r and r'z as the pass before left them: G partials. */
    VALUE v[2];
    kd_krylov_folds(scratch, KD_RES(a, 0), KD_RES(a, 1), 0, 0, 0, groups, v, 2);
    VALUE rr = v[0], rz = pcg ? v[1] : v[0];
    long status = state[((size_t)a * k + c) * 2], at = state[((size_t)a * k + c) * 2 + 1];
    VALUE fail = scalars[((size_t)a * k + c) * KD_KRYLOV_SLOTS + KD_KRYLOV_SLOT_FAIL];
    const VALUE thr = threshold[c];
    const long limit = limits[c];
    long it = L.iteration;
    for (int s = 0; s < count; s++, it++) {
        const int b = 1 - a;
        const int running = status == KD_KRYLOV_RUNNING;
        /* pass 1: q = A d and its dots */
        VALUE t[3] = {KD_ZERO, KD_ZERO, KD_ZERO};
        for (int i = lid; running && i < n; i += KD_WG_SIZE) {
            VALUE qi = KD_ZERO;
            for (int j = indptr[i]; j < indptr[i + 1]; j++)
                qi += values[j] * dc[indices[j]];
            qc[i] = qi;
            const VALUE mq = pcg ? inv_diagonal[i] * qi : qi;
            t[0] += dc[i] * qi;
            t[1] += rc[i] * mq;
            t[2] += qi * mq;
        }
        kd_krylov_group_sums(scratch, t, 3);
        const VALUE pq = running ? t[0] : KD_ZERO;
        const VALUE alpha = kd_krylov_decide(&status, &at, &fail, rr, rz, pq, thr, limit, it);
        VALUE beta = KD_ZERO;
        if (alpha != KD_ZERO) {
            const VALUE rz_new = rz - (VALUE)2 * alpha * t[1] + alpha * alpha * t[2];
            beta = rz_new > KD_ZERO ? rz_new / rz : KD_ZERO;
        }
        __global long *st_out = state + ((size_t)b * k + c) * 2;
        __global VALUE *s_out = scalars + ((size_t)b * k + c) * KD_KRYLOV_SLOTS;
        if (lid == 0) {
            st_out[0] = status;
            st_out[1] = at;
            s_out[KD_KRYLOV_SLOT_PQ] = pq;
            s_out[KD_KRYLOV_SLOT_ALPHA] = alpha;
            s_out[KD_KRYLOV_SLOT_BETA] = beta;
            s_out[KD_KRYLOV_SLOT_FAIL] = fail;
        }
        /* pass 2: the updates and the new r'r, r'z */
        VALUE u[2] = {KD_ZERO, KD_ZERO};
        for (int i = lid; alpha != KD_ZERO && i < n; i += KD_WG_SIZE) {
            const VALUE ri = rc[i] - alpha * qc[i];
            const VALUE zi = pcg ? inv_diagonal[i] * ri : ri;
            const VALUE di = dc[i];
            rc[i] = ri;
            xc[i] += alpha * di;
            dc[i] = zi + beta * di;
            u[0] += ri * ri;
            u[1] += ri * zi;
        }
        kd_krylov_group_sums(scratch, u, 2);
        if (alpha != KD_ZERO) {
            rr = u[0];
            rz = pcg ? u[1] : u[0];
        }
        /* d is gathered by other work-items in the next SpMV */
        barrier(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
        a = b;
        if (status != KD_KRYLOV_RUNNING) {
            /* The later iterations would only copy this state: write it to the other copy too
             * (pq, alpha and beta 0, as a pass over a column that does not run leaves them). */
            __global long *st_b = state + ((size_t)(1 - a) * k + c) * 2;
            __global VALUE *s_b = scalars + ((size_t)(1 - a) * k + c) * KD_KRYLOV_SLOTS;
            if (lid == 0) {
                st_b[0] = status;
                st_b[1] = at;
                s_b[KD_KRYLOV_SLOT_PQ] = KD_ZERO;
                s_b[KD_KRYLOV_SLOT_ALPHA] = KD_ZERO;
                s_b[KD_KRYLOV_SLOT_BETA] = KD_ZERO;
                s_b[KD_KRYLOV_SLOT_FAIL] = fail;
            }
            for (int g = lid; g < groups; g += KD_WG_SIZE) {
                KD_RES(1 - a, 0)[g] = g == 0 ? rr : KD_ZERO;
                KD_RES(1 - a, 1)[g] = g == 0 ? rz : KD_ZERO;
            }
            break;
        }
    }
    /* r'r, r'z for the next reader of parity a (the snapshot, or the next pass) */
    for (int g = lid; g < groups; g += KD_WG_SIZE) {
        KD_RES(a, 0)[g] = g == 0 ? rr : KD_ZERO;
        KD_RES(a, 1)[g] = g == 0 ? rz : KD_ZERO;
    }
}
