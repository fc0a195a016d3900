/*
 * Restarted, right-preconditioned GMRES(m) (solver/methods/gmres.c), k columns in lock step, each
 * at its own step j of its own cycle (j = (iteration - 1 - cstart[c]) mod m, the host keeps the
 * same numbers). Thread mapping as kernels/methods/krylov.cl: a 2-D range (G * WG, k), column c's G
 * groups in a grid-stride loop over its n elements.
 *
 * Device data of a column (all owned by the method):
 *   V      m + 1 basis vectors: V[l][c][i] at (l * k + c) * ld + i
 *   Z      with an operator M: z_l = M^-1 v_l, m vectors laid out as V (x += Z y needs no apply)
 *   u      the vector the next SpMV multiplies: v_j (identity), D^-1 v_j (diagonal); with an
 *          operator u holds v_j and the operator writes z_j into zop
 *   gd     KD_GMRES_GIVENS(m) values: the rotated Hessenberg R (m x m, column-major), the
 *          rotations cs, sn, the rotated right-hand side gfin, the running one ghat (m + 1) and
 *          beta^2 of the cycle
 *   part   partial sums, part[(c * G + g) * (m + 1) + t]: the j + 1 projections then the norm
 *   sums   the same folded over the G groups (kd_gmres_sum), sums[c * (m + 2) + t]
 *
 * An iteration: [kd_gmres_start where a cycle starts] [M^-1] SpMV, kd_gmres_project (pass A:
 * V'w, w'w), kd_gmres_sum, kd_gmres_orthogonalise (pass B: w -= V h1, V'w', w''w'), kd_gmres_sum,
 * kd_gmres_finish (pass C:
 * DGKS reorthogonalisation when needed, v_{j+1}, the Givens rotation, the decision and, when the
 * column stops or ends its cycle, x += Z y), [kd_gmres_residual where a cycle ended].
 *
 * The rotations are computed on the device, redundantly by work-item 0 of every group of pass C
 * from the same global data (so every group agrees without a barrier across groups); group 0
 * writes them. Within a launch no group reads a word another group writes: pass C reads the
 * rotations, R's columns and ghat of steps before j and writes only step j's.
 */
#include "krylov_lib.cl"

#define KD_GMRES_MAX_M 200 /* solve.h's KD_SOLVE_RESTART_MAX (solver/methods/gmres.c checks) */
#if KD_FP64
#define KD_EPS DBL_EPSILON
#else
#define KD_EPS FLT_EPSILON
#endif
/* Basis vectors whose partial sums pass A keeps in registers in one sweep over w (w is read
 * once per chunk); a build option may raise it (a multiple of KD_GMRES_BLOCK). */
#ifndef KD_GMRES_CHUNK
#define KD_GMRES_CHUNK 8
#endif
#define KD_GMRES_BLOCK 8 /* sums per work-group reduction (the local scratch's size) */

/* Column c's Givens data: offsets in gd (see above). */
#define KD_GMRES_GIVENS(m) ((size_t)(m) * (size_t)(m) + 4 * (size_t)(m) + 2)
#define KD_GMRES_R(m) 0
#define KD_GMRES_CS(m) ((m) * (m))
#define KD_GMRES_SN(m) ((m) * (m) + (m))
#define KD_GMRES_GFIN(m) ((m) * (m) + 2 * (m))
#define KD_GMRES_GHAT(m) ((m) * (m) + 3 * (m))
#define KD_GMRES_BETA2(m) ((m) * (m) + 4 * (m) + 1)

/* Column c's step in its cycle at iteration `it`. */
int kd_gmres_step(const long it, __global const long *cstart, const int c, const int m)
{
    return (int)((it - 1 - cstart[c]) % (long)m);
}

/*
 * The group's partial sums of V[l]'w for l < count (and w'w into slot `count` when `with_norm`),
 * chunk by chunk of KD_GMRES_CHUNK basis vectors (V read once, w once per chunk). With `csr`
 * (fused SpMV) the first chunk computes w = A u row by row and writes it. With zop, the first
 * chunk also copies z_j (zop) into Z[j].
 */
void kd_gmres_dots(__local VALUE *scratch, __global const VALUE *V, __global VALUE *w,
                   const int count, const int with_norm, const uint end, const size_t wbase,
                   const size_t vstride, const size_t vbase, __global VALUE *part_out,
                   __global const int *indptr, __global const int *indices,
                   __global const VALUE *values, __global const VALUE *u,
                   __global const VALUE *zop, __global VALUE *Zj)
{
    const uint stride = (uint)get_global_size(0);
    for (int l0 = 0; l0 < count; l0 += KD_GMRES_CHUNK) {
        const int cnt = count - l0 < KD_GMRES_CHUNK ? count - l0 : KD_GMRES_CHUNK;
        VALUE acc[KD_GMRES_CHUNK + 1];
#pragma unroll
        for (int t = 0; t <= KD_GMRES_CHUNK; t++)
            acc[t] = KD_ZERO;
        for (uint i = (uint)get_global_id(0); i < end; i += stride) {
            VALUE wi;
            if (l0 == 0 && indptr != 0) {
                wi = KD_ZERO;
                for (int e = indptr[i]; e < indptr[i + 1]; e++)
                    wi += values[e] * u[indices[e]];
                w[wbase + i] = wi;
            } else {
                wi = w[wbase + i];
            }
            if (l0 == 0 && Zj != 0)
                Zj[i] = zop[wbase + i];
            if (l0 == 0)
                acc[KD_GMRES_CHUNK] += wi * wi;
#pragma unroll
            for (int t = 0; t < KD_GMRES_CHUNK; t++)
                if (t < cnt)
                    acc[t] += V[vbase + (size_t)(l0 + t) * vstride + i] * wi;
        }
        /* Reduced KD_GMRES_BLOCK sums at a time; the norm goes with the first block. */
#pragma unroll
        for (int b0 = 0; b0 < KD_GMRES_CHUNK; b0 += KD_GMRES_BLOCK) {
            if (b0 < cnt) {
                VALUE blk[KD_GMRES_BLOCK + 1];
#pragma unroll
                for (int t = 0; t < KD_GMRES_BLOCK; t++)
                    blk[t] = acc[b0 + t];
                blk[KD_GMRES_BLOCK] = acc[KD_GMRES_CHUNK];
                kd_krylov_group_sums(scratch, blk, KD_GMRES_BLOCK + 1);
                if (get_local_id(0) == 0 && end != 0u) {
                    for (int t = 0; t < KD_GMRES_BLOCK && b0 + t < cnt; t++)
                        part_out[l0 + b0 + t] = blk[t];
                    if (l0 == 0 && b0 == 0 && with_norm)
                        part_out[count] = blk[KD_GMRES_BLOCK];
                }
            }
        }
    }
}

/* Whether column c runs this iteration (its state as the iteration starts). */
#define KD_GMRES_COLUMN                                                                            \
    KD_KRYLOV_LAUNCH_UNPACK;                                                                       \
    const int n = L.n, ld = L.ld, groups = L.groups, a = L.parity;                                 \
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);                              \
    const int j = kd_gmres_step(L.iteration, cstart, c, m);                                        \
    const int running = state[((size_t)a * k + c) * 2] == KD_KRYLOV_RUNNING;                       \
    const size_t base = (size_t)c * (size_t)ld;                                                    \
    const size_t vstride = (size_t)k * (size_t)ld;                                                 \
    const int width = m + 1;                                                                       \
    __global VALUE *gdc = gd + (size_t)c * KD_GMRES_GIVENS(m)

/*
 * Where column c starts a cycle (j == 0, running): beta^2 = r'r from the state (the first cycle
 * after setup or a restart, where kd_krylov_residual put it) or folded from kd_gmres_residual's
 * partials (a cycle after a natural end); v_0 = r / beta, u = v_0 (D^-1 v_0 with a diagonal);
 * ghat[0] = beta. kd_gmres_finish decides on beta^2 (converged, non-finite).
 */
__kernel KD_WG_ATTR void kd_gmres_start(KD_KRYLOV_LAUNCH, const int m, __global const long *state,
                                        __global const VALUE *scalars,
                                        __global const long *cstart,
                                        __global const VALUE *rpart, __global VALUE *gd,
                                        __global const VALUE *r, __global VALUE *V,
                                        __global VALUE *u, __global const VALUE *inv_diagonal)
{
    KD_GMRES_COLUMN;
    (void)width;
    __local VALUE scratch[KD_WG_SIZE];
    const int start = running && j == 0;
    const int first = L.iteration - 1 == cstart[c];
    VALUE v[1] = {KD_ZERO};
    for (int g = (int)get_local_id(0); start && !first && g < groups; g += KD_WG_SIZE)
        v[0] += rpart[(size_t)c * (size_t)groups + (size_t)g];
    kd_krylov_group_sums(scratch, v, 1);
    const VALUE beta2 = first ? scalars[((size_t)a * k + c) * KD_KRYLOV_SLOTS + KD_KRYLOV_SLOT_RR]
                              : v[0];
    const VALUE beta = sqrt(beta2);
    const int ok = start && isfinite(beta) && beta > KD_ZERO;
    const VALUE inv = ok ? (VALUE)1 / beta : KD_ZERO;
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const uint end = ok ? (uint)n : 0u;
    const uint stride = (uint)get_global_size(0);
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        const VALUE vi = r[base + i] * inv;
        V[base + i] = vi;
        u[base + i] = diag ? inv_diagonal[i] * vi : vi;
    }
    if (start && get_global_id(0) == 0) {
        gdc[KD_GMRES_BETA2(m)] = beta2;
        gdc[KD_GMRES_GHAT(m)] = beta;
    }
}

/*
 * Pass A: the partial sums of V[0..j]'w and w'w. With indptr (a csr_scalar matrix), w = A u is
 * computed here (u: zop with an operator, else u); with zop, z_j is also copied into Z[j].
 */
__kernel KD_WG_ATTR void kd_gmres_project(KD_KRYLOV_LAUNCH, const int m,
                                          __global const long *state, __global const long *cstart,
                                          __global VALUE *gd, __global const VALUE *V,
                                          __global VALUE *w, __global VALUE *partA,
                                          __global const int *indptr, __global const int *indices,
                                          __global const VALUE *values, __global const VALUE *u,
                                          __global const VALUE *zop, __global VALUE *Z)
{
    KD_GMRES_COLUMN;
    (void)gdc;
    __local VALUE scratch[(KD_GMRES_BLOCK + 1) * KD_WG_SIZE];
    const uint end = running ? (uint)n : 0u;
    __global VALUE *out =
        partA + ((size_t)c * (size_t)groups + get_group_id(0)) * (size_t)width;
    __global const VALUE *uc = zop != 0 ? zop + base : u + base;
    kd_gmres_dots(scratch, V, w, j + 1, 1, end, base, vstride, base, out, indptr, indices, values,
                  uc, zop, Z != 0 ? Z + (size_t)j * vstride + base : 0);
}

/*
 * A column's sums folded once, where passes B and C read them: sums[c * (m + 2) + t] = the sum of
 * the column's `groups` partials of sum t (pass A's or B's: t <= j the projections, t = j + 1 the
 * norm), in a fixed order. One work-group per sum: launched with m + 1 groups per column, of
 * which j + 2 work. (Every group of the next pass folding all G (j + 2) partials itself cost
 * more than the pass's streaming on an H200 with G = 528: bench/device/gmres_tune.sh.)
 */
__kernel KD_WG_ATTR void kd_gmres_sum(KD_KRYLOV_LAUNCH, const int m, __global const long *state,
                                      __global const long *cstart, __global const VALUE *part,
                                      __global VALUE *sums)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int groups = L.groups, a = L.parity;
    const int c = (int)get_global_id(1), k = (int)get_global_size(1);
    const int j = kd_gmres_step(L.iteration, cstart, c, m);
    const int t = (int)get_group_id(0);
    __local VALUE scratch[KD_WG_SIZE];
    /* The same for the whole work-group (one column, one sum): no barrier is skipped by some. */
    if (state[((size_t)a * k + c) * 2] != KD_KRYLOV_RUNNING || t > j + 1)
        return;
    __global const VALUE *col = part + (size_t)c * (size_t)groups * (size_t)(m + 1);
    VALUE v[1] = {KD_ZERO};
    for (int g = (int)get_local_id(0); g < groups; g += KD_WG_SIZE)
        v[0] += col[(size_t)g * (size_t)(m + 1) + (size_t)t];
    kd_krylov_group_sums(scratch, v, 1);
    if (get_local_id(0) == 0)
        sums[(size_t)c * (size_t)(m + 2) + (size_t)t] = v[0];
}

/* Pass B: w' = w - V h1 (h1 = V'w, folded by kd_gmres_sum), then the partial sums of V'w' and
 * w''w'. V is read twice: an element's j + 1 basis values kept in registers between the update
 * and the sums (one read) spilled on an H200 and made the pass 1.8x slower. */
__kernel KD_WG_ATTR void kd_gmres_orthogonalise(KD_KRYLOV_LAUNCH, const int m,
                                                __global const long *state,
                                                __global const long *cstart, __global VALUE *gd,
                                                __global const VALUE *V, __global VALUE *w,
                                                __global const VALUE *sumsA,
                                                __global VALUE *partB)
{
    KD_GMRES_COLUMN;
    (void)gdc;
    __local VALUE scratch[(KD_GMRES_BLOCK + 1) * KD_WG_SIZE];
    __local VALUE h[KD_GMRES_MAX_M + 1];
    for (int l = (int)get_local_id(0); running && l <= j; l += KD_WG_SIZE)
        h[l] = sumsA[(size_t)c * (size_t)(m + 2) + (size_t)l];
    barrier(CLK_LOCAL_MEM_FENCE);
    const uint end = running ? (uint)n : 0u;
    const uint stride = (uint)get_global_size(0);
    __global VALUE *out =
        partB + ((size_t)c * (size_t)groups + get_group_id(0)) * (size_t)width;
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        VALUE wi = w[base + i];
        for (int l = 0; l <= j; l++)
            wi -= h[l] * V[(size_t)l * vstride + base + i];
        w[base + i] = wi;
    }
    kd_gmres_dots(scratch, V, w, j + 1, 1, end, base, vstride, base, out, 0, 0, 0, 0, 0, 0);
}

/*
 * Pass C. Fold h1, ||w||^2 (pass A) and h2, ||w'||^2 (pass B). DGKS: when ||w'|| < ||w|| / sqrt 2
 * the first projection cancelled: w'' = w' - V h2, h = h1 + h2, ||w''||^2 = ||w'||^2 - ||h2||^2
 * (Pythagoras, as w' = w'' + V h2 with w'' orthogonal to V; clamped at 0, which reads as a happy
 * breakdown that the driver's b - A x confirmation judges); else w'' = w', h = h1. Then the
 * rotations, the decision, v_{j+1} = w'' / h_{j+1,j} (and u from it), and x += Z y (D^-1 V y,
 * V y) where the column stops or its cycle ends. A new diagonal of R at most
 * KD_GMRES_SINGULAR_ULPS ulps of H's column (singular H) is a breakdown with x the least-squares
 * solution of the columns before it, so x's residual never exceeds the cycle's earlier ones.
 * Group 0 writes the step's data and the state.
 */
__kernel KD_WG_ATTR void
kd_gmres_finish(KD_KRYLOV_LAUNCH, const int m, __global long *state, __global VALUE *scalars,
                __global const VALUE *threshold, __global const long *limits,
                __global const long *cstart, __global VALUE *gd, __global VALUE *V,
                __global const VALUE *w, __global const VALUE *sumsA, __global const VALUE *sumsB,
                __global VALUE *u, __global VALUE *x, __global const VALUE *Z,
                __global const VALUE *inv_diagonal)
{
    KD_GMRES_COLUMN;
    const int b = 1 - a;
    __local VALUE h1[KD_GMRES_MAX_M + 2], h2[KD_GMRES_MAX_M + 2], y[KD_GMRES_MAX_M + 1];
    __local VALUE col[KD_GMRES_MAX_M + 1]; /* H's column j, rotated (work-item 0's) */
    __local VALUE lcs[KD_GMRES_MAX_M], lsn[KD_GMRES_MAX_M];
    __local VALUE shared[4]; /* inverse norm, reorthogonalise, update x, columns of y */
    KD_KRYLOV_COLUMN_STATE(a, b);
    /* The folded sums and the earlier rotations into local memory, loaded in parallel for
     * work-item 0's loop. */
    for (int l = (int)get_local_id(0); status == KD_KRYLOV_RUNNING && l <= j + 1;
         l += KD_WG_SIZE) {
        h1[l] = sumsA[(size_t)c * (size_t)(m + 2) + (size_t)l];
        h2[l] = sumsB[(size_t)c * (size_t)(m + 2) + (size_t)l];
    }
    for (int l = (int)get_local_id(0); l < j; l += KD_WG_SIZE) {
        lcs[l] = gdc[KD_GMRES_CS(m) + l];
        lsn[l] = gdc[KD_GMRES_SN(m) + l];
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) {
        /* Every group decides the same from the same data; group 0 writes. */
        const int writer = get_group_id(0) == 0;
        VALUE rr = s_in[KD_KRYLOV_SLOT_RR], hn = KD_ZERO, inv = KD_ZERO;
        int reorth = 0, finalise = 0, cols = 0;
        const long it = L.iteration;
        if (status == KD_KRYLOV_RUNNING && j == 0) {
            const VALUE beta2 = gdc[KD_GMRES_BETA2(m)];
            rr = beta2;
            if (!isfinite(beta2)) {
                status = KD_KRYLOV_NON_FINITE_RESIDUAL;
                at = it - 1;
                fail = beta2;
            } else if (beta2 <= threshold[c]) {
                status = KD_KRYLOV_CONVERGED;
                at = it - 1;
            } else if (it > limits[c]) {
                status = KD_KRYLOV_STOPPED;
                at = it - 1;
            }
        }
        if (status == KD_KRYLOV_RUNNING) {
            const VALUE nw2 = h1[j + 1], nwp2 = h2[j + 1];
            reorth = nwp2 < (VALUE)0.5 * nw2;
            VALUE hn2 = nwp2;
            if (reorth)
                for (int l = 0; l <= j; l++)
                    hn2 -= h2[l] * h2[l];
            hn = sqrt(hn2 > KD_ZERO ? hn2 : KD_ZERO);
            /* h (in h1) through the previous rotations, then the new one. */
            for (int l = 0; l <= j; l++)
                col[l] = reorth ? h1[l] + h2[l] : h1[l];
            for (int l = 0; l < j; l++) {
                const VALUE cs = lcs[l], sn = lsn[l];
                const VALUE t = cs * col[l] + sn * col[l + 1];
                col[l + 1] = -sn * col[l] + cs * col[l + 1];
                col[l] = t;
            }
            const VALUE rho = hypot(col[j], hn);
            VALUE hc2 = rho * rho; /* ||h||^2: the rotations keep the column's norm */
            for (int l = 0; l < j; l++)
                hc2 += col[l] * col[l];
            const VALUE gj = gdc[KD_GMRES_GHAT(m) + j];
            const VALUE cs = rho > KD_ZERO ? col[j] / rho : (VALUE)1;
            const VALUE sn = rho > KD_ZERO ? hn / rho : KD_ZERO;
            col[j] = rho;
            const VALUE gfin = cs * gj, gnext = -sn * gj;
            if (!isfinite(nw2) || !isfinite(nwp2) || !isfinite(rho) || !isfinite(gnext)) {
                status = KD_KRYLOV_NON_FINITE_PQ;
                at = it;
                fail = !isfinite(nw2) ? nw2 : !isfinite(nwp2) ? nwp2 : !isfinite(rho) ? rho : gnext;
            } else if (rho <= (VALUE)KD_GMRES_SINGULAR_ULPS * KD_EPS * sqrt(hc2)) {
                /* R's new diagonal is 0 to working precision (hn ~ 0 and col[j] ~ 0: A z_j lies
                 * in A's image of the earlier basis, e.g. a nilpotent A): H is singular and A
                 * singular on the Krylov space. Dividing by that ~0 made y, and x, garbage (a
                 * residual that grew); x takes the least-squares solution of the first j
                 * columns, whose residual is the cycle's last |g_j|. */
                status = KD_KRYLOV_BREAKDOWN;
                at = it;
                fail = KD_ZERO;
                finalise = 1;
                cols = j;
            } else {
                rr = gnext * gnext;
                inv = hn > KD_ZERO ? (VALUE)1 / hn : KD_ZERO;
                cols = j + 1;
                if (rr <= threshold[c]) { /* also a happy breakdown: hn = 0, so gnext = 0 */
                    status = KD_KRYLOV_CONVERGED;
                    at = it;
                    finalise = 1;
                } else if (it >= limits[c]) {
                    status = KD_KRYLOV_STOPPED;
                    at = it;
                    finalise = 1;
                } else {
                    finalise = j == m - 1;
                }
                if (writer) {
                    for (int l = 0; l <= j; l++)
                        gdc[KD_GMRES_R(m) + (size_t)j * (size_t)m + l] = col[l];
                    gdc[KD_GMRES_CS(m) + j] = cs;
                    gdc[KD_GMRES_SN(m) + j] = sn;
                    gdc[KD_GMRES_GFIN(m) + j] = gfin;
                    gdc[KD_GMRES_GHAT(m) + j + 1] = gnext;
                }
            }
            /* y = R^-1 gfin over `cols` columns; column j's entries are this group's own. */
            for (int i = cols - 1; finalise && i >= 0; i--) {
                VALUE s = i == j ? gfin : gdc[KD_GMRES_GFIN(m) + i];
                for (int l = i + 1; l < cols; l++)
                    s -= (l == j ? col[i] : gdc[KD_GMRES_R(m) + (size_t)l * (size_t)m + i]) * y[l];
                y[i] = s / (i == j ? col[j] : gdc[KD_GMRES_R(m) + (size_t)i * (size_t)m + i]);
            }
            if (writer) {
                s_out[KD_KRYLOV_SLOT_PQ] = hn;
                s_out[KD_KRYLOV_SLOT_AUX] = (VALUE)reorth;
            }
        } else if (writer) {
            s_out[KD_KRYLOV_SLOT_PQ] = s_in[KD_KRYLOV_SLOT_PQ];
            s_out[KD_KRYLOV_SLOT_AUX] = s_in[KD_KRYLOV_SLOT_AUX];
        }
        if (writer) {
            st_out[0] = status;
            st_out[1] = at;
            s_out[KD_KRYLOV_SLOT_RR] = rr;
            s_out[KD_KRYLOV_SLOT_RZ] = rr;
            s_out[KD_KRYLOV_SLOT_ALPHA] = KD_ZERO;
            s_out[KD_KRYLOV_SLOT_BETA] = KD_ZERO;
            s_out[KD_KRYLOV_SLOT_FAIL] = fail;
        }
        shared[0] = inv;
        shared[1] = (VALUE)reorth;
        shared[2] = (VALUE)finalise;
        shared[3] = (VALUE)cols;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const VALUE inv = shared[0];
    const int reorth = shared[1] != KD_ZERO, finalise = shared[2] != KD_ZERO;
    const int cols = (int)shared[3];
    const int diag = (L.ops & KD_KRYLOV_OP_DIAGONAL) != 0;
    const uint stride = (uint)get_global_size(0);
    const uint end_v = inv != KD_ZERO ? (uint)n : 0u;
    __global VALUE *vnext = V + (size_t)(j + 1) * vstride + base;
    for (uint i = (uint)get_global_id(0); i < end_v; i += stride) {
        VALUE wi = w[base + i];
        if (reorth)
            for (int l = 0; l <= j; l++)
                wi -= h2[l] * V[(size_t)l * vstride + base + i];
        const VALUE vi = wi * inv;
        vnext[i] = vi;
        u[base + i] = diag ? inv_diagonal[i] * vi : vi;
    }
    const uint end_x = finalise ? (uint)n : 0u;
    __global const VALUE *src = Z != 0 ? Z : V;
    for (uint i = (uint)get_global_id(0); i < end_x; i += stride) {
        VALUE s = KD_ZERO;
        for (int l = 0; l < cols; l++)
            s += y[l] * src[(size_t)l * vstride + base + i];
        x[base + i] += diag ? inv_diagonal[i] * s : s;
    }
}

/*
 * Where column c's cycle ended this iteration (j == m - 1): r = b - A x (q = A x given, or with
 * indptr computed here row by row) and the partial sums of r'r, which the next iteration's
 * kd_gmres_start folds.
 */
__kernel KD_WG_ATTR void kd_gmres_residual(KD_KRYLOV_LAUNCH, const int m,
                                           __global const long *cstart, __global const VALUE *b,
                                           __global const VALUE *q, __global const VALUE *x,
                                           __global VALUE *r, __global VALUE *rpart,
                                           __global const int *indptr, __global const int *indices,
                                           __global const VALUE *values)
{
    KD_KRYLOV_LAUNCH_UNPACK;
    const int n = L.n, ld = L.ld, groups = L.groups;
    const int c = (int)get_global_id(1);
    __local VALUE scratch[KD_WG_SIZE];
    const int j = kd_gmres_step(L.iteration, cstart, c, m);
    const size_t base = (size_t)c * (size_t)ld;
    const uint end = j == m - 1 ? (uint)n : 0u;
    const uint stride = (uint)get_global_size(0);
    VALUE v[1] = {KD_ZERO};
    for (uint i = (uint)get_global_id(0); i < end; i += stride) {
        VALUE ax;
        if (indptr != 0) {
            ax = KD_ZERO;
            for (int e = indptr[i]; e < indptr[i + 1]; e++)
                ax += values[e] * x[base + indices[e]];
        } else {
            ax = q[base + i];
        }
        const VALUE ri = b[base + i] - ax;
        r[base + i] = ri;
        v[0] += ri * ri;
    }
    kd_krylov_group_sums(scratch, v, 1);
    if (get_local_id(0) == 0 && end != 0u)
        rpart[(size_t)c * (size_t)groups + get_group_id(0)] = v[0];
}
