/*
 * CG and Jacobi-PCG for a small matrix: `count` iterations of every column in one launch, one
 * work-group per column (the host launches (KD_WG_SIZE, k)), the residual decided on the device
 * every iteration (solver/methods/cg.c, the "small" path). On a GPU a small system's iteration
 * is launch- and check-bound on the general path (about 30 us for 1138 rows on an H100, of which
 * the arithmetic is a few); here the iterations run back to back inside the kernel, separated by
 * work-group barriers, and the host only wakes at the chunk's end.
 *
 * The arithmetic is the two-pass iteration's (kernels/methods/krylov.cl: kd_krylov_dots3 with r'Mq, then
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

/* Rows a work-item of the local variant keeps in registers: it serves n <= KD_SMALL_R x
 * KD_WG_SIZE rows, the direction in local memory (solver/methods/cg.c picks the variant). */
#define KD_SMALL_R 16

/* Work-item 0 writes iteration `it`'s outcome into copy b of the column's state, as
 * kd_krylov_update_merged does. */
void kd_cg_small_record(__global long *state, __global VALUE *scalars, const int b, const int k,
                        const int c, const long status, const long at, const VALUE pq,
                        const VALUE alpha, const VALUE beta, const VALUE fail)
{
    if (get_local_id(0) != 0)
        return;
    __global long *st = state + ((size_t)b * k + c) * 2;
    __global VALUE *sc = scalars + ((size_t)b * k + c) * KD_KRYLOV_SLOTS;
    st[0] = status;
    st[1] = at;
    sc[KD_KRYLOV_SLOT_PQ] = pq;
    sc[KD_KRYLOV_SLOT_ALPHA] = alpha;
    sc[KD_KRYLOV_SLOT_BETA] = beta;
    sc[KD_KRYLOV_SLOT_FAIL] = fail;
}

/* r'r and r'z into copy s of the residual partials in the G-group layout: the sum in group 0's
 * slot, zeros elsewhere (their fold is the sum). */
void kd_cg_small_partials(__global VALUE *res_partials, const int s, const int k, const int c,
                          const int groups, const VALUE rr, const VALUE rz)
{
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE) {
        KD_RES(s, 0)[g] = g == 0 ? rr : KD_ZERO;
        KD_RES(s, 1)[g] = g == 0 ? rz : KD_ZERO;
    }
}

/* A launch's start: r'r and r'z as the pass before left them (G partials of copy a), and the
 * column's status, its iteration and failing value. */
void kd_cg_small_start(__local VALUE *scratch, __global const VALUE *res_partials,
                       __global const long *state, __global const VALUE *scalars, const int a,
                       const int k, const int c, const int groups, const int pcg, VALUE *rr,
                       VALUE *rz, long *status, long *at, VALUE *fail)
{
    VALUE v[2];
    kd_krylov_folds(scratch, KD_RES(a, 0), KD_RES(a, 1), 0, 0, 0, groups, v, 2);
    *rr = v[0];
    *rz = pcg ? v[1] : v[0];
    *status = state[((size_t)a * k + c) * 2];
    *at = state[((size_t)a * k + c) * 2 + 1];
    *fail = scalars[((size_t)a * k + c) * KD_KRYLOV_SLOTS + KD_KRYLOV_SLOT_FAIL];
}

/* Iteration `it`'s decision from pass 1's sums t (p'q, r'Mq, q'Mq) as update_merged takes it:
 * alpha (0 unless running on), *beta, and the outcome recorded in copy b. */
VALUE kd_cg_small_decide(__global long *state, __global VALUE *scalars, const int b, const int k,
                         const int c, const VALUE *t, const int running, const VALUE rr,
                         const VALUE rz, long *status, long *at, VALUE *fail, const VALUE thr,
                         const long limit, const long it, VALUE *beta)
{
    const VALUE pq = running ? t[0] : KD_ZERO;
    const VALUE alpha = kd_krylov_decide(status, at, fail, rr, rz, pq, thr, limit, it);
    *beta = KD_ZERO;
    if (alpha != KD_ZERO) {
        const VALUE rz_new = rz - (VALUE)2 * alpha * t[1] + alpha * alpha * t[2];
        *beta = rz_new > KD_ZERO ? rz_new / rz : KD_ZERO;
    }
    kd_cg_small_record(state, scalars, b, k, c, *status, *at, pq, alpha, *beta, *fail);
    return alpha;
}

/* A column that stopped: the later iterations would only copy its state, so it goes to the other
 * copy too (pq, alpha and beta 0, as a pass over a column that does not run leaves them). */
void kd_cg_small_stopped(__global long *state, __global VALUE *scalars,
                         __global VALUE *res_partials, const int other, const int k, const int c,
                         const int groups, const long status, const long at, const VALUE fail,
                         const VALUE rr, const VALUE rz)
{
    kd_cg_small_record(state, scalars, other, k, c, status, at, KD_ZERO, KD_ZERO, KD_ZERO, fail);
    kd_cg_small_partials(res_partials, other, k, c, groups, rr, rz);
}

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
    VALUE rr, rz, fail;
    long status, at;
    kd_cg_small_start(scratch, res_partials, state, scalars, a, k, c, groups, pcg, &rr, &rz,
                      &status, &at, &fail);
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
        VALUE beta;
        const VALUE alpha = kd_cg_small_decide(state, scalars, b, k, c, t, running, rr, rz,
                                               &status, &at, &fail, thr, limit, it, &beta);
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
            kd_cg_small_stopped(state, scalars, res_partials, 1 - a, k, c, groups, status, at,
                                fail, rr, rz);
            break;
        }
    }
    /* r'r, r'z for the next reader of parity a (the snapshot, or the next pass) */
    kd_cg_small_partials(res_partials, a, k, c, groups, rr, rz);
}

/*
 * The same for n <= KD_SMALL_R x KD_WG_SIZE rows with the vectors on chip: the direction in local
 * memory (the SpMV gathers it), each work-item's rows i = lid + t KD_WG_SIZE of r, x, q and the
 * inverse diagonal in registers; d, r and x go back to global memory at the end of the launch.
 * On the H200 the global variant's time jumped 6x from 1,024 to 4,096 rows, where the four
 * vectors stopped fitting L1.
 */
__kernel KD_WG_ATTR void kd_cg_small_local(KD_KRYLOV_LAUNCH, const int count,
                                           __global const VALUE *threshold,
                                           __global const long *limits,
                                           __global VALUE *res_partials, __global VALUE *scalars,
                                           __global long *state, __global const int *indptr,
                                           __global const int *indices,
                                           __global const VALUE *values, __global VALUE *d,
                                           __global VALUE *q, __global VALUE *r, __global VALUE *x,
                                           __global const VALUE *inv_diagonal)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    (void)q;
    const int n = L.n, groups = L.groups;
    const int pcg = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int lid = (int)get_local_id(0);
    __local VALUE scratch[3 * KD_WG_SIZE];
    __local VALUE dl[KD_SMALL_R * KD_WG_SIZE];
    const size_t base = (size_t)c * (size_t)L.ld;
    __global VALUE *dc = d + base, *rc = r + base, *xc = x + base;
    VALUE rp[KD_SMALL_R], xp[KD_SMALL_R], qp[KD_SMALL_R], mp[KD_SMALL_R];
#pragma unroll
    for (int t = 0; t < KD_SMALL_R; t++) {
        const int i = lid + t * KD_WG_SIZE;
        rp[t] = xp[t] = qp[t] = KD_ZERO;
        mp[t] = (VALUE)1;
        if (i < n) {
            dl[i] = dc[i];
            rp[t] = rc[i];
            xp[t] = xc[i];
            if (pcg)
                mp[t] = inv_diagonal[i];
        }
    }
    int a = L.parity;
    VALUE rr, rz, fail;
    long status, at;
    kd_cg_small_start(scratch, res_partials, state, scalars, a, k, c, groups, pcg, &rr, &rz,
                      &status, &at, &fail);
    const VALUE thr = threshold[c];
    const long limit = limits[c];
    long it = L.iteration;
    /* (kd_krylov_folds' barriers also made dl visible to the whole group) */
    for (int s = 0; s < count; s++, it++) {
        const int b = 1 - a;
        const int running = status == KD_KRYLOV_RUNNING;
        VALUE t3[3] = {KD_ZERO, KD_ZERO, KD_ZERO};
#pragma unroll
        for (int t = 0; t < KD_SMALL_R; t++) {
            const int i = lid + t * KD_WG_SIZE;
            if (running && i < n) {
                VALUE qi = KD_ZERO;
                for (int j = indptr[i]; j < indptr[i + 1]; j++)
                    qi += values[j] * dl[indices[j]];
                qp[t] = qi;
                const VALUE mq = mp[t] * qi;
                t3[0] += dl[i] * qi;
                t3[1] += rp[t] * mq;
                t3[2] += qi * mq;
            }
        }
        kd_krylov_group_sums(scratch, t3, 3);
        VALUE beta;
        const VALUE alpha = kd_cg_small_decide(state, scalars, b, k, c, t3, running, rr, rz,
                                               &status, &at, &fail, thr, limit, it, &beta);
        VALUE u[2] = {KD_ZERO, KD_ZERO};
        /* every gather of dl is done (the sums' barriers): each work-item rewrites its own rows */
#pragma unroll
        for (int t = 0; t < KD_SMALL_R; t++) {
            const int i = lid + t * KD_WG_SIZE;
            if (alpha != KD_ZERO && i < n) {
                const VALUE ri = rp[t] - alpha * qp[t];
                const VALUE zi = pcg ? mp[t] * ri : ri;
                const VALUE di = dl[i];
                rp[t] = ri;
                xp[t] += alpha * di;
                dl[i] = zi + beta * di;
                u[0] += ri * ri;
                u[1] += ri * zi;
            }
        }
        kd_krylov_group_sums(scratch, u, 2); /* its barriers publish dl for the next SpMV */
        if (alpha != KD_ZERO) {
            rr = u[0];
            rz = pcg ? u[1] : u[0];
        }
        a = b;
        if (status != KD_KRYLOV_RUNNING) {
            kd_cg_small_stopped(state, scalars, res_partials, 1 - a, k, c, groups, status, at,
                                fail, rr, rz);
            break;
        }
    }
#pragma unroll
    for (int t = 0; t < KD_SMALL_R; t++) {
        const int i = lid + t * KD_WG_SIZE;
        if (i < n) {
            dc[i] = dl[i];
            rc[i] = rp[t];
            xc[i] = xp[t];
        }
    }
    kd_cg_small_partials(res_partials, a, k, c, groups, rr, rz);
}
