/*
 * The fused vector kernels of k lock-step CG / Jacobi-PCG / steepest-descent iterations
 * (solver/methods/krylov.c drives them, solver/solve.c runs the iteration; docs/ARCHITECTURE.md counts
 * their bytes). k right-hand sides are solved together: every vector is a column-major block of
 * k columns of n values, column c starting at element c * ld. One launch serves all k columns.
 *
 * Thread mapping: a 2-D range of (G * KD_WG_SIZE, k) work-items in groups of (KD_WG_SIZE, 1).
 * Dimension 1 is the column: every column gets its own G work-groups. Within a column,
 * work-item g of the G * KD_WG_SIZE handles elements g, g + G*WG, g + 2*G*WG, ... (a grid-stride
 * loop: at each step the column's work-items read one contiguous, coalesced block). A kernel
 * that reduces leaves one partial sum per (column, group) in partials[c * G + group], folded by
 * a tree in local memory; the consumer sums a column's G partials in a fixed order, so every
 * result is reproducible bit for bit and no atomics are needed.
 *
 * Fused finals. The kernel that needs a reduction's result sums the column's G partials itself,
 * in every work-group (G values from L2; the same order everywhere, so every group gets the same
 * number). That removes the single-group "final" launches. A CG / PCG iteration (z = M^-1 r,
 * M = diag(A) for PCG, I for CG) is the SpMV q = A d (per column, from the matrix's format) and,
 * by default, two launches here:
 *   kd_krylov_dots3          partials of d'q, r'Mq, q'Mq: reads d, q, r (1/diag)
 *   kd_krylov_update_merged  alpha = r'z / d'q, beta = (r'z - 2 alpha r'Mq + alpha^2 q'Mq) / r'z;
 *                            r -= alpha q, x += alpha d, d = z + beta d; partials of the new r'r
 *                            and r'z: reads q, r, x, d (1/diag), writes r, x, d
 * For a csr_scalar matrix the SpMV and the first pass are one launch, kd_krylov_csr_spmv_dots3
 * (two launches an iteration in all, d and q read once fewer; with three passes and for SD it
 * leaves p'q only, in place of kd_krylov_dots).
 * Or three (solver/methods/krylov.h's `passes`), with beta from the exact new r'z:
 *   kd_krylov_dots             partials of d'q: reads d, q
 *   kd_krylov_update_residual  alpha; r -= alpha q; partials of r'r, r'z: reads q, r, writes r
 *   kd_krylov_update_direction beta; x += alpha d; d = z + beta d: reads x, d, r, writes x, d
 * With an operator preconditioner (KD_KRYLOV_OP_OPERATOR: z = M^-1 r is a vector, e.g. AMG's
 * V-cycle), the three passes with two steps between update_residual (which then leaves r'r only)
 * and update_direction (which reads z): the operator writes z from r, then
 * kd_krylov_residual_partials leaves the partials of r'r and r'z in the set update_residual used.
 * Steepest descent: dots(r, q); update_residual also does x += alpha r; update_direction only
 * folds r'r (launched with one group per column). kd_krylov_snapshot packs a column's state for
 * the host at a check.
 *
 * Cache. The passes of an iteration alternate direction: the SpMV walks rows forwards, dots and
 * dots3 backwards, update_residual and update_merged forwards, update_direction backwards, so each
 * pass starts where the previous one ended and finds the vectors it just touched still in the L2
 * cache (on an H100, 50 MB: a good share of a 32 MB float64 vector).
 *
 * Device scalars, double-buffered. scalars[par][c][KD_KRYLOV_SLOTS] and state[par][c][2] (status, the
 * iteration it changed) exist twice, par = iteration & 1: the kernels of iteration i read copy
 * (i - 1) & 1 and work-item 0 of each column's group 0 writes copy i & 1, so no work-group ever
 * reads a word another group of the same launch writes. Once a column's status leaves
 * KD_KRYLOV_RUNNING its alpha is 0, its x, r and d are left bit for bit as they are, and the kernels
 * skip its vector work (their loops run to 0 instead of n). Every work-item reaches every barrier:
 * no kernel returns before its last barrier, which some implementations (PoCL) require even when
 * the branch is uniform.
 */
#include "krylov_lib.cl"

/* dot_partials[0][c][group] = this group's share of p_c'q_c, for running columns. Backwards. */
__kernel KD_WG_ATTR void kd_krylov_dots(KD_KRYLOV_LAUNCH, __global const long *state,
                                        __global const VALUE *p, __global const VALUE *q,
                                        __global VALUE *dot_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, a = L.parity;
    __local VALUE scratch[KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int groups = (int)get_num_groups(0);
    const uint end = state[(a * k + c) * 2] == KD_KRYLOV_RUNNING ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE s[1] = {KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const size_t e = base + (n - 1u - i); /* backwards: see "Cache" above */
        s[0] += p[e] * q[e];
    }
    kd_krylov_group_sums(scratch, s, 1);
    if (get_local_id(0) == 0)
        KD_DOT(0)[get_group_id(0)] = s[0];
}

/*
 * Iteration `iteration` (1-based), reading copy a = (iteration - 1) & 1 and writing copy 1 - a.
 * Every group folds the column's p'q partials and decides (kd_krylov_decide) with the r'r and
 * r'z of copy a, as work-item 0 of group 0 records. Then r -= alpha q (SD: x += alpha r first)
 * and the partial sums of the new r'r and r'z into res_partials[1 - a]. Forwards.
 */
__kernel KD_WG_ATTR void
kd_krylov_update_residual(KD_KRYLOV_LAUNCH, __global const VALUE *threshold,
                          __global const long *limits, __global const VALUE *dot_partials,
                          __global VALUE *scalars, __global long *state, __global const VALUE *q,
                          __global VALUE *r, __global VALUE *x, __global const VALUE *inv_diagonal,
                          __global VALUE *res_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity;
    const long iteration = L.iteration;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1), b = 1 - a;
    KD_KRYLOV_COLUMN_STATE(a, b);
    /* Folded whatever the status (barriers stay unconditional); used only while running. */
    VALUE v[2];
    kd_krylov_folds(scratch, KD_DOT(0), 0, 0, 0, 0, groups, v, 1);
    const VALUE pq = status == KD_KRYLOV_RUNNING ? v[0] : KD_ZERO;
    const VALUE alpha = kd_krylov_decide(&status, &at, &fail, s_in[KD_KRYLOV_SLOT_RR], s_in[KD_KRYLOV_SLOT_RZ],
                                         pq, threshold[c], limits[c], iteration);
    if (get_global_id(0) == 0) {
        st_out[0] = status;
        st_out[1] = at;
        s_out[KD_KRYLOV_SLOT_PQ] = pq;
        s_out[KD_KRYLOV_SLOT_ALPHA] = alpha;
        s_out[KD_KRYLOV_SLOT_FAIL] = fail;
    }
    /* Frozen (alpha = 0): no vector work, and update_direction carries r'r over. */
    const uint end = alpha != KD_ZERO ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    v[0] = v[1] = KD_ZERO;
    if ((L.ops & KD_KRYLOV_OP_DIAGONAL) != 0) {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const VALUE ri = r[base + i] - alpha * q[base + i];
            r[base + i] = ri;
            v[0] += ri * ri;
            v[1] += ri * (inv_diagonal[i] * ri);
        }
    } else if ((L.ops & KD_KRYLOV_OP_ALONG_R) != 0) {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const VALUE r0 = r[base + i];
            const VALUE ri = r0 - alpha * q[base + i];
            x[base + i] += alpha * r0;
            r[base + i] = ri;
            v[0] += ri * ri;
        }
    } else {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const VALUE ri = r[base + i] - alpha * q[base + i];
            r[base + i] = ri;
            v[0] += ri * ri;
        }
    }
    kd_krylov_group_sums(scratch, v, 2);
    if (get_local_id(0) == 0 && end != 0u) {
        KD_RES(b, 0)[get_group_id(0)] = v[0];
        KD_RES(b, 1)[get_group_id(0)] = v[1];
    }
}

/*
 * The second half of iteration `iteration`: fold the new r'r (and r'z) partials; beta = new r'z
 * / old r'z; x += alpha d; d = z + beta d (z = D^-1 r for PCG, r otherwise). Work-item 0 of group 0
 * records r'r, r'z and beta in copy b = 1 - a, and a non-finite r'r as KD_KRYLOV_NON_FINITE_RESIDUAL.
 * For SD (launched with one group per column) only the bookkeeping runs. Backwards.
 */
__kernel KD_WG_ATTR void
kd_krylov_update_direction(KD_KRYLOV_LAUNCH, __global VALUE *scalars,
                           __global long *state, __global const VALUE *res_partials,
                           __global const VALUE *r, __global const VALUE *inv_diagonal,
                           __global VALUE *x, __global VALUE *d)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity;
    const long iteration = L.iteration;
    const int diagonal = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int operator_z = (L.ops & KD_KRYLOV_OP_OPERATOR) != 0;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1), b = 1 - a;
    __global const VALUE *s_in = scalars + (a * k + c) * KD_KRYLOV_SLOTS;
    __global VALUE *s_out = scalars + (b * k + c) * KD_KRYLOV_SLOTS;
    const VALUE alpha = s_out[KD_KRYLOV_SLOT_ALPHA];
    /* Folded whatever alpha is (barriers stay unconditional); used only when it is not 0. */
    VALUE v[2];
    kd_krylov_folds(scratch, KD_RES(b, 0), KD_RES(b, 1), 0, 0, 0, groups, v,
                    diagonal || operator_z ? 2 : 1);
    const VALUE rr = v[0], rz = diagonal || operator_z ? v[1] : v[0];
    if (alpha == KD_ZERO) {
        if (get_global_id(0) == 0) {
            s_out[KD_KRYLOV_SLOT_RR] = s_in[KD_KRYLOV_SLOT_RR];
            s_out[KD_KRYLOV_SLOT_RZ] = s_in[KD_KRYLOV_SLOT_RZ];
            s_out[KD_KRYLOV_SLOT_BETA] = KD_ZERO;
        }
        return; /* no barrier follows */
    }
    const VALUE beta = rz / s_in[KD_KRYLOV_SLOT_RZ];
    if (get_global_id(0) == 0) {
        s_out[KD_KRYLOV_SLOT_RR] = rr;
        s_out[KD_KRYLOV_SLOT_RZ] = rz;
        s_out[KD_KRYLOV_SLOT_BETA] = beta;
        __global long *st = state + (b * k + c) * 2;
        if ((!isfinite(rr) || !isfinite(rz)) && st[0] == KD_KRYLOV_RUNNING) {
            st[0] = KD_KRYLOV_NON_FINITE_RESIDUAL;
            st[1] = iteration;
            s_out[KD_KRYLOV_SLOT_FAIL] = rr;
        }
    }
    if ((L.ops & KD_KRYLOV_OP_ALONG_R) != 0)
        return;

    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    /* Backwards: see "Cache" above. With an operator, inv_diagonal is z (column stride ld). */
    if (operator_z) {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const uint e = (uint)n - 1u - i;
            const VALUE di = d[base + e];
            x[base + e] += alpha * di;
            d[base + e] = inv_diagonal[base + e] + beta * di;
        }
    } else if (diagonal) {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const uint e = (uint)n - 1u - i;
            const VALUE di = d[base + e];
            x[base + e] += alpha * di;
            d[base + e] = inv_diagonal[e] * r[base + e] + beta * di;
        }
    } else {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const uint e = (uint)n - 1u - i;
            const VALUE di = d[base + e];
            x[base + e] += alpha * di;
            d[base + e] = r[base + e] + beta * di;
        }
    }
}

/* Fold a work-group's p'q, r'Mq, q'Mq and leave them as its partial sums of column c. */
void kd_krylov_store_dots3(__local VALUE *scratch, VALUE *v, __global VALUE *dot_partials,
                           const int c, const int k)
{
    const int groups = (int)get_num_groups(0);
    kd_krylov_group_sums(scratch, v, 3);
    if (get_local_id(0) == 0) {
        KD_DOT(0)[get_group_id(0)] = v[0];
        KD_DOT(1)[get_group_id(0)] = v[1];
        KD_DOT(2)[get_group_id(0)] = v[2];
    }
}

/*
 * Two-pass iteration, pass 1 (CG and PCG): the partial sums of p'q, q'Mq and, with `with_rq`,
 * r'Mq (M = D^-1 for PCG, I for CG) of running columns, so that pass 2 knows the new
 * r'z = r'z - 2 alpha r'Mq + alpha^2 q'Mq before it has the new r. Without r'Mq, pass 2 takes
 * r'Mq = p'q (z'Ap = p'Ap by the conjugacy of p to the previous direction), which saves reading
 * r here. Backwards.
 */
__kernel KD_WG_ATTR void kd_krylov_dots3(KD_KRYLOV_LAUNCH, __global const long *state,
                                         __global const VALUE *p, __global const VALUE *q,
                                         __global const VALUE *r,
                                         __global const VALUE *inv_diagonal,
                                         __global VALUE *dot_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, a = L.parity;
    const int pcg = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int with_rq = (L.ops & KD_KRYLOV_OP_WITH_RQ) != 0;
    __local VALUE scratch[3 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const uint end = state[(a * k + c) * 2] == KD_KRYLOV_RUNNING ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE v[3] = {KD_ZERO, KD_ZERO, KD_ZERO};
    if (with_rq) {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const uint e = (uint)n - 1u - i; /* backwards: see "Cache" above */
            const VALUE qi = q[base + e];
            const VALUE mq = pcg ? inv_diagonal[e] * qi : qi;
            v[0] += p[base + e] * qi;
            v[1] += r[base + e] * mq;
            v[2] += qi * mq;
        }
    } else {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const uint e = (uint)n - 1u - i;
            const VALUE qi = q[base + e];
            const VALUE mq = pcg ? inv_diagonal[e] * qi : qi;
            v[0] += p[base + e] * qi;
            v[2] += qi * mq;
        }
    }
    kd_krylov_store_dots3(scratch, v, dot_partials, c, k);
}

/*
 * Two-pass iteration, pass 1 fused with the SpMV, for a matrix kept as csr_scalar: q = A p row by
 * row (one work-item per row, as kernels/formats/csr_scalar.cl, but in the grid-stride loop of the
 * column's G groups above) and, from the q[e] just computed, the partial sums kd_krylov_dots3
 * leaves. p and q are not read back from memory afterwards (p[e] is in cache from the gather on a
 * banded matrix; r and 1/diag are read once here). Rows are visited in the same order, work-item
 * by work-item, as dots3 visits elements, and q[e] is summed in column order as the plain SpMV
 * does: the same operations in the same order as SpMV + dots3. A column that is not
 * running is skipped whole (its q is not written; nothing reads it). For three passes and SD
 * (with_rq = pcg = 0) only p'q is used: then it stands for SpMV + kd_krylov_dots. Backwards.
 */
__kernel KD_WG_ATTR void kd_krylov_csr_spmv_dots3(
    KD_KRYLOV_LAUNCH, __global const long *state, __global const int *indptr,
    __global const int *indices, __global const VALUE *values, __global const VALUE *p,
    __global VALUE *q, __global const VALUE *r, __global const VALUE *inv_diagonal,
    __global VALUE *dot_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, a = L.parity;
    const int pcg = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int with_rq = (L.ops & KD_KRYLOV_OP_WITH_RQ) != 0;
    __local VALUE scratch[3 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const uint end = state[(a * k + c) * 2] == KD_KRYLOV_RUNNING ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    __global const VALUE *pc = p + base;
    VALUE v[3] = {KD_ZERO, KD_ZERO, KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const uint e = (uint)n - 1u - i;
        const int lo = indptr[e], hi = indptr[e + 1];
        VALUE qi = KD_ZERO;
        for (int j = lo; j < hi; j++)
            qi += values[j] * pc[indices[j]];
        q[base + e] = qi;
        const VALUE mq = pcg ? inv_diagonal[e] * qi : qi;
        v[0] += pc[e] * qi;
        if (with_rq)
            v[1] += r[base + e] * mq;
        v[2] += qi * mq;
    }
    kd_krylov_store_dots3(scratch, v, dot_partials, c, k);
}

/*
 * Two-pass iteration, pass 2: every group folds p'q, r'Mq, q'Mq (pass 1) and the r'r, r'z of the
 * current residual (res_partials[a], left by the previous pass 2 or a residual recomputation),
 * decides as update_residual does, and takes beta = (r'z - 2 alpha r'Mq + alpha^2 q'Mq) / r'z
 * (0 if cancellation makes it negative). Then in one pass: r -= alpha q, x += alpha d,
 * d = z + beta d, and the exact r'r and r'z of the new r into res_partials[b] (a frozen column's
 * are carried over), which the next pass 2, or kd_krylov_residual_final at a check, folds.
 * Forwards.
 */
__kernel KD_WG_ATTR void kd_krylov_update_merged(
    KD_KRYLOV_LAUNCH, __global const VALUE *threshold, __global const long *limits,
    __global const VALUE *dot_partials, __global VALUE *res_partials, __global VALUE *scalars,
    __global long *state, __global const VALUE *q, __global VALUE *r, __global VALUE *x,
    __global VALUE *d, __global const VALUE *inv_diagonal)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity;
    const long iteration = L.iteration;
    const int pcg = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int with_rq = (L.ops & KD_KRYLOV_OP_WITH_RQ) != 0;
    __local VALUE scratch[5 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1), b = 1 - a;
    KD_KRYLOV_COLUMN_STATE(a, b);
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    /* This work-item's first element, loaded before the folds so that its latency hides under
     * theirs (a running column's alpha is almost never 0). */
    const uint first = (uint)get_global_id(0);
    const int early = status == KD_KRYLOV_RUNNING && first < (uint)n;
    VALUE q0 = KD_ZERO, r0 = KD_ZERO, x0 = KD_ZERO, d0 = KD_ZERO, m0 = (VALUE)1;
    if (early) {
        q0 = q[base + first];
        r0 = r[base + first];
        x0 = x[base + first];
        d0 = d[base + first];
        if (pcg)
            m0 = inv_diagonal[first];
    }
    VALUE v[5];
    kd_krylov_folds(scratch, KD_DOT(0), KD_DOT(1), KD_DOT(2), KD_RES(a, 0), KD_RES(a, 1), groups, v,
                    5);
    const int running = status == KD_KRYLOV_RUNNING;
    const VALUE pq = running ? v[0] : KD_ZERO;
    const VALUE rr = v[3], rz = pcg ? v[4] : v[3];
    const VALUE alpha =
        kd_krylov_decide(&status, &at, &fail, rr, rz, pq, threshold[c], limits[c], iteration);
    VALUE beta = KD_ZERO;
    if (alpha != KD_ZERO) {
        const VALUE rz_new = with_rq ? rz - (VALUE)2 * alpha * v[1] + alpha * alpha * v[2]
                                     : alpha * alpha * v[2] - rz;
        beta = rz_new > KD_ZERO ? rz_new / rz : KD_ZERO;
    }
    if (get_global_id(0) == 0) {
        st_out[0] = status;
        st_out[1] = at;
        s_out[KD_KRYLOV_SLOT_PQ] = pq;
        s_out[KD_KRYLOV_SLOT_ALPHA] = alpha;
        s_out[KD_KRYLOV_SLOT_BETA] = beta;
        s_out[KD_KRYLOV_SLOT_FAIL] = fail;
    }
    const uint end = alpha != KD_ZERO ? (uint)n : 0u;
    v[0] = v[1] = KD_ZERO;
    if (early && end != 0u) {
        const VALUE ri = r0 - alpha * q0;
        const VALUE zi = pcg ? m0 * ri : ri;
        r[base + first] = ri;
        x[base + first] = x0 + alpha * d0;
        d[base + first] = zi + beta * d0;
        v[0] += ri * ri;
        v[1] += ri * zi;
    }
    for (uint i = first + stride; i < end; i += stride) {
        const VALUE ri = r[base + i] - alpha * q[base + i];
        const VALUE zi = pcg ? inv_diagonal[i] * ri : ri;
        const VALUE di = d[base + i];
        r[base + i] = ri;
        x[base + i] += alpha * di;
        d[base + i] = zi + beta * di;
        v[0] += ri * ri;
        v[1] += ri * zi;
    }
    kd_krylov_group_sums(scratch, v, 2);
    if (get_local_id(0) == 0) {
        const int g = (int)get_group_id(0);
        KD_RES(b, 0)[g] = end != 0u ? v[0] : KD_RES(a, 0)[g];
        KD_RES(b, 1)[g] = end != 0u ? v[1] : KD_RES(a, 1)[g];
    }
}

/*
 * For the columns with KD_KRYLOV_MASK_PARTIALS in their mask (mask NULL: mask_all for every column): the
 * partial sums of r'r and, with `pcg`, r'z into res_partials[slot]; with KD_KRYLOV_MASK_DIRECTION also
 * d = z. Used at the start, for the periodic r = b - A x refresh, for restarts and for
 * ||b - A x|| checks (slot KD_KRYLOV_NORMS_SET).
 */
__kernel KD_WG_ATTR void kd_krylov_residual_partials(KD_KRYLOV_LAUNCH,
                                                     __global const int *mask,
                                                     __global const VALUE *r,
                                                     __global const VALUE *inv_diagonal,
                                                     __global VALUE *d,
                                                     __global VALUE *res_partials)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, slot = L.set, mask_all = L.mask_all;
    const int pcg = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const int operator_z = (L.ops & KD_KRYLOV_OP_OPERATOR) != 0;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int groups = (int)get_num_groups(0);
    const int m = mask != 0 ? mask[c] : mask_all;
    const uint end = (m & KD_KRYLOV_MASK_PARTIALS) != 0 ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    const int direction = (m & KD_KRYLOV_MASK_DIRECTION) != 0;
    VALUE v[2] = {KD_ZERO, KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const VALUE ri = r[base + i];
        const VALUE zi = operator_z ? inv_diagonal[base + i] : pcg ? inv_diagonal[i] * ri : ri;
        v[0] += ri * ri;
        v[1] += ri * zi;
        if (direction)
            d[base + i] = zi;
    }
    kd_krylov_group_sums(scratch, v, 2);
    if (get_local_id(0) == 0 && end != 0u) {
        KD_RES(slot, 0)[get_group_id(0)] = v[0];
        KD_RES(slot, 1)[get_group_id(0)] = v[1];
    }
}

/*
 * One work-group per column (masked as kd_krylov_residual_partials): fold res_partials[slot].
 * Mode KD_KRYLOV_FINAL_NORMS: norms[c] = r'r. Mode KD_KRYLOV_FINAL_SCALARS: copy par's RR and RZ (RZ = RR unless
 * pcg); with KD_KRYLOV_MASK_RESTART the column runs again from `iteration`, else a non-finite r'r of a
 * running column stops it as KD_KRYLOV_NON_FINITE_RESIDUAL at `iteration`.
 */
__kernel KD_WG_ATTR void
kd_krylov_residual_final(KD_KRYLOV_LAUNCH, __global const int *mask,
                         __global const VALUE *res_partials, __global VALUE *scalars,
                         __global long *state, __global VALUE *norms)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int groups = L.groups, par = L.parity, slot = L.set, mode = L.mode;
    const int mask_all = L.mask_all;
    const long iteration = L.iteration;
    const int pcg = (L.ops & (KD_KRYLOV_OP_DIAGONAL | KD_KRYLOV_OP_OPERATOR)) != 0;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int m = mask != 0 ? mask[c] : mask_all;
    VALUE v[2];
    kd_krylov_folds(scratch, KD_RES(slot, 0), KD_RES(slot, 1), 0, 0, 0, groups, v, 2);
    if (get_local_id(0) != 0 || (m & KD_KRYLOV_MASK_PARTIALS) == 0)
        return;
    if (mode == KD_KRYLOV_FINAL_NORMS) {
        norms[c] = v[0];
        return;
    }
    __global VALUE *sc = scalars + (par * k + c) * KD_KRYLOV_SLOTS;
    __global long *st = state + (par * k + c) * 2;
    sc[KD_KRYLOV_SLOT_RR] = v[0];
    sc[KD_KRYLOV_SLOT_RZ] = pcg ? v[1] : v[0];
    if ((m & KD_KRYLOV_MASK_RESTART) != 0) {
        st[0] = KD_KRYLOV_RUNNING;
        st[1] = iteration;
        sc[KD_KRYLOV_SLOT_ALPHA] = KD_ZERO;
        sc[KD_KRYLOV_SLOT_BETA] = KD_ZERO;
        sc[KD_KRYLOV_SLOT_FAIL] = KD_ZERO;
    } else if (st[0] == KD_KRYLOV_RUNNING && !isfinite(v[0])) {
        st[0] = KD_KRYLOV_NON_FINITE_RESIDUAL;
        st[1] = iteration;
        sc[KD_KRYLOV_SLOT_FAIL] = v[0];
    }
}

/*
 * A check's snapshot, one work-group per column: with `fold` (two-pass iterations leave the new
 * r'r as partial sums) first fold res_partials[par] into the scalars as kd_krylov_residual_final
 * does, then pack state[par][c] and scalars[par][c] into snapshot[c][2 + KD_KRYLOV_SLOTS] (the values'
 * bits, a float in the low half), a buffer no later kernel writes, so the host can read it on a
 * second queue while the next iterations run.
 */
__kernel KD_WG_ATTR void kd_krylov_snapshot(KD_KRYLOV_LAUNCH,
                                            __global const VALUE *res_partials,
                                            __global VALUE *scalars, __global long *state,
                                            __global long *snapshot)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int groups = L.groups, par = L.parity;
    const long iteration = L.iteration;
    const int pcg = (L.ops & (KD_KRYLOV_OP_DIAGONAL | KD_KRYLOV_OP_OPERATOR)) != 0;
    const int fold = (L.ops & KD_KRYLOV_OP_FOLD) != 0;
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    VALUE v[2];
    kd_krylov_folds(scratch, KD_RES(par, 0), KD_RES(par, 1), 0, 0, 0, groups, v, 2);
    if (get_local_id(0) != 0)
        return;
    __global VALUE *sc = scalars + (par * k + c) * KD_KRYLOV_SLOTS;
    __global long *st = state + (par * k + c) * 2;
    if (fold) {
        sc[KD_KRYLOV_SLOT_RR] = v[0];
        sc[KD_KRYLOV_SLOT_RZ] = pcg ? v[1] : v[0];
        if (st[0] == KD_KRYLOV_RUNNING && !isfinite(v[0])) {
            st[0] = KD_KRYLOV_NON_FINITE_RESIDUAL;
            st[1] = iteration;
            sc[KD_KRYLOV_SLOT_FAIL] = v[0];
        }
    }
    __global long *out = snapshot + c * (2 + KD_KRYLOV_SLOTS);
    out[0] = st[0];
    out[1] = st[1];
    for (int j = 0; j < KD_KRYLOV_SLOTS; j++)
#if KD_FP64
        out[2 + j] = as_long(sc[j]);
#else
        out[2 + j] = (long)as_uint(sc[j]);
#endif
}
