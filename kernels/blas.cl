/*
 * BLAS-1 and the fused CG / steepest-descent steps (solver/blas.c drives them; solver/blas.h
 * explains the scalars/state buffers and the order of the steps).
 *
 * Thread mapping, two kinds of kernel:
 *  - element-wise kernels (axpy, xpay, scale, step_direction): one work-item per element, the
 *    global size rounded up to KD_WG_SIZE and the tail work-items returning at once. Consecutive
 *    work-items touch consecutive elements, so every load and store is coalesced.
 *  - reductions (dot_partial, step_update): a fixed grid of G work-groups (G chosen by the host
 *    from n and the device only). Work-item g of the grid handles elements g, g + G*WG,
 *    g + 2*G*WG, ... (a grid-stride loop: at each step the whole grid reads one contiguous,
 *    coalesced block), keeps a private sum, and the group folds its sums in local memory with a
 *    tree (WG/2, WG/4, ... 1 active work-items, a barrier between levels) into partials[group].
 *    reduce_final then runs as ONE work-group: each work-item sums partials lid, lid + WG, ...,
 *    the same tree folds them, and work-item 0 applies the operation. The summation order is
 *    fixed by (n, G, WG), so results are reproducible bitwise; no atomics are needed (OpenCL 1.2
 *    has none for floating point).
 *
 * Device scalars: scalars[] holds the slots below (the same numbers as kd_blas_slot_t) and
 * state[] = {status, iteration}. Kernels that need alpha or beta read them from scalars[], so
 * the host enqueues a whole iteration without reading anything back.
 */
#define KD_SLOT_RR 0
#define KD_SLOT_PQ 1
#define KD_SLOT_ALPHA 2
#define KD_SLOT_BETA 3
#define KD_SLOT_FAIL 4
#define KD_SLOT_RESULT 5

#define KD_RUNNING 0
#define KD_CONVERGED 1
#define KD_BREAKDOWN 2
#define KD_NON_FINITE_PQ 3
#define KD_NON_FINITE_ALPHA 4
#define KD_NON_FINITE_RESIDUAL 5

#define KD_OP_STORE 0    /* scalars[slot] = sum */
#define KD_OP_ALPHA 1    /* sum = p'q; alpha = rr / p'q with the checks in blas.h */
#define KD_OP_RESIDUAL 2 /* sum = new r'r; beta = new / old; rr = new */

/* Sum v over the work-group through scratch[KD_WG_SIZE]; every work-item gets the total. */
VALUE kd_group_sum(__local VALUE *scratch, VALUE v)
{
    const uint lid = get_local_id(0);
    scratch[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = KD_WG_SIZE / 2; s > 0; s >>= 1) {
        if (lid < s)
            scratch[lid] += scratch[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    return scratch[0];
}

/* partials[group] = this group's share of x'y. */
__kernel KD_WG_ATTR void kd_blas_dot_partial(const int n, __global const VALUE *x,
                                             __global const VALUE *y, __global VALUE *partials)
{
    __local VALUE scratch[KD_WG_SIZE];
    const uint stride = (uint)get_global_size(0);
    VALUE sum = KD_ZERO;
    for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride)
        sum += x[i] * y[i];
    sum = kd_group_sum(scratch, sum);
    if (get_local_id(0) == 0)
        partials[get_group_id(0)] = sum;
}

/* One work-group: total the first `groups` partials and apply `op` (see KD_OP_*). */
__kernel KD_WG_ATTR void kd_blas_reduce_final(const int groups, __global const VALUE *partials,
                                              __global VALUE *scalars, __global long *state,
                                              const int op, const int slot, const long iteration,
                                              const VALUE threshold)
{
    __local VALUE scratch[KD_WG_SIZE];
    VALUE sum = KD_ZERO;
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE)
        sum += partials[g];
    sum = kd_group_sum(scratch, sum);
    if (get_local_id(0) != 0)
        return;

    if (op == KD_OP_STORE) {
        scalars[slot] = sum;
    } else if (op == KD_OP_ALPHA) {
        const VALUE rr = scalars[KD_SLOT_RR];
        VALUE alpha = KD_ZERO;
        scalars[KD_SLOT_PQ] = sum;
        if (state[0] == KD_RUNNING) {
            if (rr <= threshold) {
                state[0] = KD_CONVERGED;
                state[1] = iteration - 1;
            } else if (!isfinite(sum)) {
                state[0] = KD_NON_FINITE_PQ;
                state[1] = iteration;
                scalars[KD_SLOT_FAIL] = sum;
            } else if (sum <= KD_ZERO) {
                state[0] = KD_BREAKDOWN;
                state[1] = iteration;
                scalars[KD_SLOT_FAIL] = sum;
            } else {
                alpha = rr / sum;
                if (!isfinite(alpha)) {
                    state[0] = KD_NON_FINITE_ALPHA;
                    state[1] = iteration;
                    scalars[KD_SLOT_FAIL] = alpha;
                    alpha = KD_ZERO;
                }
            }
        }
        scalars[KD_SLOT_ALPHA] = alpha;
    } else if (op == KD_OP_RESIDUAL) {
        const VALUE old = scalars[KD_SLOT_RR];
        if (state[0] == KD_RUNNING && !isfinite(sum)) {
            state[0] = KD_NON_FINITE_RESIDUAL;
            state[1] = iteration;
            scalars[KD_SLOT_FAIL] = sum;
        }
        scalars[KD_SLOT_BETA] = old > KD_ZERO ? sum / old : KD_ZERO;
        scalars[KD_SLOT_RR] = sum;
    }
}

/* y = alpha x + y */
__kernel KD_WG_ATTR void kd_blas_axpy(const int n, const VALUE alpha, __global const VALUE *x,
                                      __global VALUE *y)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        y[i] += alpha * x[i];
}

/* y = x + alpha y */
__kernel KD_WG_ATTR void kd_blas_xpay(const int n, __global const VALUE *x, const VALUE alpha,
                                      __global VALUE *y)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        y[i] = x[i] + alpha * y[i];
}

/* x = alpha x */
__kernel KD_WG_ATTR void kd_blas_scale(const int n, const VALUE alpha, __global VALUE *x)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        x[i] *= alpha;
}

/*
 * x += alpha p; r -= alpha q; partials[group] = this group's share of the new r'r. alpha comes
 * from scalars[KD_SLOT_ALPHA]; when it is 0 (converged, broken down, or a zero step) x and r are
 * left bit-for-bit as they are. p may be the same buffer as r (steepest descent): each element's
 * p is read before its r is written, by the same work-item. Grid-stride mapping as dot_partial.
 */
__kernel KD_WG_ATTR void kd_blas_step_update(const int n, __global const VALUE *scalars,
                                             __global const VALUE *p, __global const VALUE *q,
                                             __global VALUE *x, __global VALUE *r,
                                             __global VALUE *partials)
{
    __local VALUE scratch[KD_WG_SIZE];
    const VALUE alpha = scalars[KD_SLOT_ALPHA];
    const uint stride = (uint)get_global_size(0);
    VALUE sum = KD_ZERO;
    if (alpha != KD_ZERO) {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const VALUE pi = p[i];
            const VALUE ri = r[i] - alpha * q[i];
            x[i] += alpha * pi;
            r[i] = ri;
            sum += ri * ri;
        }
    } else {
        for (uint i = (uint)get_global_id(0); i < (uint)n; i += stride) {
            const VALUE ri = r[i];
            sum += ri * ri;
        }
    }
    sum = kd_group_sum(scratch, sum);
    if (get_local_id(0) == 0)
        partials[get_group_id(0)] = sum;
}

/* d = r + beta d, beta from scalars[KD_SLOT_BETA]. One work-item per element. */
__kernel KD_WG_ATTR void kd_blas_step_direction(const int n, __global const VALUE *scalars,
                                                __global const VALUE *r, __global VALUE *d)
{
    const size_t i = get_global_id(0);
    if (i < (size_t)n)
        d[i] = r[i] + scalars[KD_SLOT_BETA] * d[i];
}
