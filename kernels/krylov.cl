/*
 * The fused vector kernels of k lock-step CG / Jacobi-PCG / steepest-descent iterations
 * (solver/krylov.c drives them, solver/solve.c runs the iteration; docs/ARCHITECTURE.md counts
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
 * number). That removes the single-group "final" launches: a CG iteration is the SpMV (per
 * column, from the matrix's format) and three launches here:
 *   kd_krylov_dots             partials of d'q                            reads d, q
 *   kd_krylov_update_residual  alpha from d'q; r -= alpha q;
 *                              partials of r'r and r'z (z = D^-1 r)       reads q, r (inv); writes r
 *   kd_krylov_update_direction beta from r'z; x += alpha d; d = z + beta d
 *                                                                         reads x, d, r (inv);
 *                                                                         writes x, d
 * Steepest descent: dots(r, q); update_residual also does x += alpha r; update_direction only
 * finishes r'r (launched with one group per column).
 *
 * Device scalars, double-buffered. scalars[par][c][KD_SLOTS] and state[par][c][2] (status, the
 * iteration it changed) exist twice, par = iteration & 1: the kernels of iteration i read copy
 * (i - 1) & 1 and work-item 0 of each column's group 0 writes copy i & 1, so no work-group ever
 * reads a word another group of the same launch writes. Once a column's status leaves
 * KD_RUNNING its alpha is 0, its x, r and d are left bit for bit as they are, and the kernels
 * skip its vector work (their loops run to 0 instead of n). Every work-item reaches every barrier:
 * no kernel returns before its last barrier, which some implementations (PoCL) require even when
 * the branch is uniform.
 */
#if KD_FP64
#define VALUE2 double2
#else
#define VALUE2 float2
#endif

#define KD_SLOT_RR 0    /* r'r of the current residual */
#define KD_SLOT_RZ 1    /* r'z, z = D^-1 r (PCG); = r'r for CG and SD */
#define KD_SLOT_PQ 2    /* p'Ap of this iteration */
#define KD_SLOT_ALPHA 3 /* step length (0 when not running) */
#define KD_SLOT_BETA 4  /* direction update factor */
#define KD_SLOT_FAIL 5  /* the value that stopped the column */
#define KD_SLOTS 6

#define KD_RUNNING 0
#define KD_CONVERGED 1           /* r'r <= threshold after state[1] iterations */
#define KD_BREAKDOWN 2           /* p'Ap <= 0 (finite) in iteration state[1] */
#define KD_NON_FINITE_PQ 3       /* p'Ap not finite in iteration state[1] */
#define KD_NON_FINITE_ALPHA 4    /* r'z / p'Ap not finite in iteration state[1] */
#define KD_NON_FINITE_RESIDUAL 5 /* r'r not finite after iteration state[1] */
#define KD_STOPPED 6             /* frozen by the host (max_iterations) */
#define KD_ZERO_STEP 7           /* alpha = r'z / p'Ap underflowed to 0 in iteration state[1] */

#define KD_METHOD_CG 0
#define KD_METHOD_SD 1
#define KD_METHOD_PCG 2

/* mask[c] bits for kd_krylov_residual_partials / _final */
#define KD_MASK_PARTIALS 1  /* reduce this column */
#define KD_MASK_DIRECTION 2 /* also set d = z (a start or restart) */
#define KD_MASK_RESTART 4   /* the final sets the column running again */

#define KD_FINAL_SCALARS 0 /* the final writes scalars/state */
#define KD_FINAL_NORMS 1   /* the final writes norms[c] = sum of squares only */

/* The total of v over the work-group (every work-item gets it). */
VALUE kd_krylov_group_sum(__local VALUE *scratch, VALUE v)
{
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE); /* scratch may still be read from a previous sum */
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
}

/* Two totals at once (one set of barriers): scratch holds 2 * KD_WG_SIZE. */
VALUE2 kd_krylov_group_sum2(__local VALUE *scratch, VALUE a, VALUE b)
{
    const uint lid = get_local_id(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    scratch[lid] = a;
    scratch[KD_WG_SIZE + lid] = b;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s) {
            scratch[lid] += scratch[lid + s];
            scratch[KD_WG_SIZE + lid] += scratch[KD_WG_SIZE + lid + s];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return (VALUE2)(scratch[0], scratch[KD_WG_SIZE]);
}

/* The sum of a column's `groups` partials, in a fixed order (every work-item gets it). */
VALUE kd_krylov_fold(__local VALUE *scratch, __global const VALUE *partials, const int groups)
{
    VALUE s = KD_ZERO;
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE)
        s += partials[g];
    return kd_krylov_group_sum(scratch, s);
}

VALUE2 kd_krylov_fold2(__local VALUE *scratch, __global const VALUE *pa, __global const VALUE *pb,
                       const int groups)
{
    VALUE a = KD_ZERO, b = KD_ZERO;
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE) {
        a += pa[g];
        b += pb[g];
    }
    return kd_krylov_group_sum2(scratch, a, b);
}

/* partials[c][group] = this group's share of p_c'q_c, for running columns. */
__kernel KD_WG_ATTR void kd_krylov_dots(const int n, const int ld, const int a,
                                        __global const long *state, __global const VALUE *p,
                                        __global const VALUE *q, __global VALUE *partials)
{
    __local VALUE scratch[KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const uint end = state[(a * k + c) * 2] == KD_RUNNING ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE s = KD_ZERO;
    for (uint i = (uint)get_global_id(0); i < end; i += stride)
        s += p[base + i] * q[base + i];
    s = kd_krylov_group_sum(scratch, s);
    if (get_local_id(0) == 0)
        partials[c * (int)get_num_groups(0) + (int)get_group_id(0)] = s;
}

/*
 * Iteration `iteration` (1-based), reading copy a = (iteration - 1) & 1 and writing copy 1 - a.
 * Every group folds the column's p'q partials and decides, as work-item 0 of group 0 records:
 * converged (r'r <= threshold: after iteration - 1), non-finite r'r, p'q, alpha, breakdown
 * (p'q <= 0), a zero step, or alpha = r'z / p'q. Then r -= alpha q (SD: x += alpha r first) and
 * the partial sums of the new r'r and r'z.
 */
__kernel KD_WG_ATTR void kd_krylov_update_residual(
    const int n, const int ld, const int groups, const int method, const long iteration,
    const int a, __global const VALUE *threshold, __global const VALUE *pq_partials,
    __global VALUE *scalars, __global long *state, __global const VALUE *q, __global VALUE *r,
    __global VALUE *x, __global const VALUE *inv_diagonal, __global VALUE *rr_partials,
    __global VALUE *rz_partials)
{
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1), b = 1 - a;
    __global const long *st_in = state + (a * k + c) * 2;
    __global long *st_out = state + (b * k + c) * 2;
    __global const VALUE *s_in = scalars + (a * k + c) * KD_SLOTS;
    __global VALUE *s_out = scalars + (b * k + c) * KD_SLOTS;
    long status = st_in[0], at = st_in[1];
    VALUE fail = s_in[KD_SLOT_FAIL], alpha = KD_ZERO;
    /* Folded whatever the status (barriers stay unconditional); used only while running. */
    VALUE pq = kd_krylov_fold(scratch, pq_partials + c * groups, groups);
    if (status != KD_RUNNING) {
        pq = KD_ZERO;
    } else {
        const VALUE rr = s_in[KD_SLOT_RR], rz = s_in[KD_SLOT_RZ];
        if (!isfinite(rr) || !isfinite(rz)) {
            status = KD_NON_FINITE_RESIDUAL;
            at = iteration - 1;
            fail = rr;
        } else if (rr <= threshold[c]) {
            status = KD_CONVERGED;
            at = iteration - 1;
        } else if (!isfinite(pq)) {
            status = KD_NON_FINITE_PQ;
            at = iteration;
            fail = pq;
        } else if (pq <= KD_ZERO) {
            status = KD_BREAKDOWN;
            at = iteration;
            fail = pq;
        } else {
            alpha = rz / pq;
            if (!isfinite(alpha)) {
                status = KD_NON_FINITE_ALPHA;
                at = iteration;
                fail = alpha;
                alpha = KD_ZERO;
            } else if (alpha == KD_ZERO) {
                status = KD_ZERO_STEP;
                at = iteration;
                fail = rz;
            }
        }
    }
    if (get_global_id(0) == 0) {
        st_out[0] = status;
        st_out[1] = at;
        s_out[KD_SLOT_PQ] = pq;
        s_out[KD_SLOT_ALPHA] = alpha;
        s_out[KD_SLOT_FAIL] = fail;
    }
    /* Frozen (alpha = 0): no vector work, and update_direction carries r'r over. */
    const uint end = alpha != KD_ZERO ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    VALUE srr = KD_ZERO, srz = KD_ZERO;
    if (method == KD_METHOD_PCG) {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const VALUE ri = r[base + i] - alpha * q[base + i];
            r[base + i] = ri;
            srr += ri * ri;
            srz += ri * (inv_diagonal[i] * ri);
        }
    } else if (method == KD_METHOD_SD) {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const VALUE r0 = r[base + i];
            const VALUE ri = r0 - alpha * q[base + i];
            x[base + i] += alpha * r0;
            r[base + i] = ri;
            srr += ri * ri;
        }
    } else {
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            const VALUE ri = r[base + i] - alpha * q[base + i];
            r[base + i] = ri;
            srr += ri * ri;
        }
    }
    const int slot = c * (int)get_num_groups(0) + (int)get_group_id(0);
    if (method == KD_METHOD_PCG) {
        const VALUE2 s = kd_krylov_group_sum2(scratch, srr, srz);
        if (get_local_id(0) == 0 && end != 0u) {
            rr_partials[slot] = s.x;
            rz_partials[slot] = s.y;
        }
    } else {
        const VALUE s = kd_krylov_group_sum(scratch, srr);
        if (get_local_id(0) == 0 && end != 0u)
            rr_partials[slot] = s;
    }
}

/*
 * The second half of iteration `iteration`: fold the new r'r (and r'z) partials; beta = new r'z
 * / old r'z; x += alpha d; d = z + beta d (z = D^-1 r for PCG, r otherwise). Work-item 0 of group 0
 * records r'r, r'z and beta in copy b = 1 - a, and a non-finite r'r as KD_NON_FINITE_RESIDUAL.
 * For SD (launched with one group per column) only the bookkeeping runs.
 */
__kernel KD_WG_ATTR void kd_krylov_update_direction(
    const int n, const int ld, const int groups, const int method, const long iteration,
    const int a, __global VALUE *scalars, __global long *state,
    __global const VALUE *rr_partials, __global const VALUE *rz_partials,
    __global const VALUE *r, __global const VALUE *inv_diagonal, __global VALUE *x,
    __global VALUE *d)
{
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1), b = 1 - a;
    __global const VALUE *s_in = scalars + (a * k + c) * KD_SLOTS;
    __global VALUE *s_out = scalars + (b * k + c) * KD_SLOTS;
    const VALUE alpha = s_out[KD_SLOT_ALPHA];
    /* Folded whatever alpha is (barriers stay unconditional); used only when it is not 0. */
    VALUE rr, rz;
    if (method == KD_METHOD_PCG) {
        const VALUE2 s =
            kd_krylov_fold2(scratch, rr_partials + c * groups, rz_partials + c * groups, groups);
        rr = s.x;
        rz = s.y;
    } else {
        rr = rz = kd_krylov_fold(scratch, rr_partials + c * groups, groups);
    }
    if (alpha == KD_ZERO) {
        if (get_global_id(0) == 0) {
            s_out[KD_SLOT_RR] = s_in[KD_SLOT_RR];
            s_out[KD_SLOT_RZ] = s_in[KD_SLOT_RZ];
            s_out[KD_SLOT_BETA] = KD_ZERO;
        }
        return; /* no barrier follows */
    }
    const VALUE beta = rz / s_in[KD_SLOT_RZ];
    if (get_global_id(0) == 0) {
        s_out[KD_SLOT_RR] = rr;
        s_out[KD_SLOT_RZ] = rz;
        s_out[KD_SLOT_BETA] = beta;
        __global long *st = state + (b * k + c) * 2;
        if ((!isfinite(rr) || !isfinite(rz)) && st[0] == KD_RUNNING) {
            st[0] = KD_NON_FINITE_RESIDUAL;
            st[1] = iteration;
            s_out[KD_SLOT_FAIL] = rr;
        }
    }
    if (method == KD_METHOD_SD)
        return;

    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    if (method == KD_METHOD_PCG) {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const VALUE di = d[base + i];
            x[base + i] += alpha * di;
            d[base + i] = inv_diagonal[i] * r[base + i] + beta * di;
        }
    } else {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const VALUE di = d[base + i];
            x[base + i] += alpha * di;
            d[base + i] = r[base + i] + beta * di;
        }
    }
}

/*
 * For the columns with KD_MASK_PARTIALS in their mask (mask NULL: mask_all for every column): the
 * partial sums of r'r and, with `pcg`, r'z; with KD_MASK_DIRECTION also d = z. Used at the start,
 * for the periodic r = b - A x refresh, for restarts and for ||b - A x|| checks.
 */
__kernel KD_WG_ATTR void kd_krylov_residual_partials(const int n, const int ld, const int pcg,
                                                     __global const int *mask, const int mask_all,
                                                     __global const VALUE *r,
                                                     __global const VALUE *inv_diagonal,
                                                     __global VALUE *d, __global VALUE *rr_partials,
                                                     __global VALUE *rz_partials)
{
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1);
    const int m = mask != 0 ? mask[c] : mask_all;
    const uint end = (m & KD_MASK_PARTIALS) != 0 ? (uint)n : 0u;
    const size_t base = (size_t)c * (size_t)ld;
    const uint stride = (uint)get_global_size(0);
    const int direction = (m & KD_MASK_DIRECTION) != 0;
    VALUE srr = KD_ZERO, srz = KD_ZERO;
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const VALUE ri = r[base + i];
        const VALUE zi = pcg ? inv_diagonal[i] * ri : ri;
        srr += ri * ri;
        if (pcg)
            srz += ri * zi;
        if (direction)
            d[base + i] = zi;
    }
    const VALUE2 s = kd_krylov_group_sum2(scratch, srr, srz);
    const int slot = c * (int)get_num_groups(0) + (int)get_group_id(0);
    if (get_local_id(0) == 0 && end != 0u) {
        rr_partials[slot] = s.x;
        rz_partials[slot] = s.y;
    }
}

/*
 * One work-group per column (masked as kd_krylov_residual_partials): fold the partials. Mode
 * KD_FINAL_NORMS: norms[c] = r'r. Mode KD_FINAL_SCALARS: copy par's RR and RZ (RZ = RR unless
 * pcg); with KD_MASK_RESTART the column runs again from `iteration`, else a non-finite r'r of a
 * running column stops it as KD_NON_FINITE_RESIDUAL at `iteration`.
 */
__kernel KD_WG_ATTR void kd_krylov_residual_final(const int groups, const int pcg,
                                                  const long iteration, const int par,
                                                  const int mode, __global const int *mask,
                                                  const int mask_all,
                                                  __global const VALUE *rr_partials,
                                                  __global const VALUE *rz_partials,
                                                  __global VALUE *scalars, __global long *state,
                                                  __global VALUE *norms)
{
    __local VALUE scratch[2 * KD_WG_SIZE];
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int m = mask != 0 ? mask[c] : mask_all;
    const VALUE2 s =
        kd_krylov_fold2(scratch, rr_partials + c * groups, rz_partials + c * groups, groups);
    if (get_local_id(0) != 0 || (m & KD_MASK_PARTIALS) == 0)
        return;
    if (mode == KD_FINAL_NORMS) {
        norms[c] = s.x;
        return;
    }
    __global VALUE *sc = scalars + (par * k + c) * KD_SLOTS;
    __global long *st = state + (par * k + c) * 2;
    sc[KD_SLOT_RR] = s.x;
    sc[KD_SLOT_RZ] = pcg ? s.y : s.x;
    if ((m & KD_MASK_RESTART) != 0) {
        st[0] = KD_RUNNING;
        st[1] = iteration;
        sc[KD_SLOT_ALPHA] = KD_ZERO;
        sc[KD_SLOT_BETA] = KD_ZERO;
        sc[KD_SLOT_FAIL] = KD_ZERO;
    } else if (st[0] == KD_RUNNING && !isfinite(s.x)) {
        st[0] = KD_NON_FINITE_RESIDUAL;
        st[1] = iteration;
        sc[KD_SLOT_FAIL] = s.x;
    }
}
