/*
 * The batched methods' iterations, written once for both homes of a system's vectors:
 * kernels/batch/batch.cl includes this file twice, with KD_VS = __local (the vectors on chip) and
 * KD_VS = __global (a system too large for local memory), and KD_BATCH_FN naming each copy.
 * No include guard on purpose.
 *
 * Thread mapping: one work-group per system, rows dealt to its work-items round-robin
 * (i = lid, lid + KD_WG_SIZE, ...); a row's SpMV gathers the direction from the whole system,
 * so every vector a gather reads is published with a barrier first. Every decision is taken
 * from work-group sums all work-items hold, so control flow stays uniform within a group.
 */

/* y_i = sum_j a_ij dinv_j v_j of row i (dinv_j = 1 without a preconditioner): the SpMV of the
 * right-preconditioned vector without storing it. */
VALUE KD_BATCH_FN(kd_batch_row)(const int i, __global const int *indptr,
                                __global const int *indices, __global const VALUE *values,
                                __global const VALUE *dinv, const int pre, KD_VS const VALUE *v)
{
    VALUE s = KD_ZERO;
    for (int j = indptr[i]; j < indptr[i + 1]; j++) {
        const int col = indices[j];
        s += values[j] * (pre ? dinv[col] * v[col] : v[col]);
    }
    return s;
}

/*
 * CG / Jacobi-PCG on one system, the two-pass iteration of kernels/methods/cg_small.cl step for step
 * (p'q, r'Mq, q'Mq; kd_krylov_decide; beta from the recurrence; then r, x, p and the new r'r,
 * r'z in one pass), so a system's iteration count matches the single-system path's to
 * rounding. first (the start, or the host's restart after a convergence b - A x did not
 * confirm): r = b - A x and p = z first. Runs at most `count` iterations.
 */
void KD_BATCH_FN(kd_batch_cg_run)(KD_VS VALUE *x, KD_VS VALUE *r, KD_VS VALUE *p,
                                  KD_VS VALUE *q, __global const VALUE *b,
                                  __global const int *indptr, __global const int *indices,
                                  __global const VALUE *values, __global const VALUE *dinv,
                                  const int pcg, const int n, const int first, const int count,
                                  const VALUE thr, const long limit, __global long *st,
                                  __global VALUE *sc, __global VALUE *hist, const int hcap,
                                  __local VALUE *scratch)
{
    const int lid = (int)get_local_id(0);
    long status = st[0], it = st[1], at = st[1];
    VALUE rr = sc[KD_BATCH_RR], rz = sc[KD_BATCH_RZ], fail = sc[KD_BATCH_FAIL];
    if (first) {
        VALUE u[2] = {KD_ZERO, KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE ri = b[i] - KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv,
                                                              0, x);
            const VALUE zi = pcg ? dinv[i] * ri : ri;
            r[i] = ri;
            p[i] = zi;
            u[0] += ri * ri;
            u[1] += ri * zi;
        }
        KD_BATCH_PUBLISH;
        kd_krylov_group_sums(scratch, u, 2);
        rr = u[0];
        rz = pcg ? u[1] : u[0];
        if (hist != 0 && lid == 0 && it < hcap)
            hist[it] = rr; /* at a restart the true residual replaces the recurrence's */
    }
    for (int s = 0; s < count && status == KD_KRYLOV_RUNNING; s++) {
        VALUE t[3] = {KD_ZERO, KD_ZERO, KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE qi =
                KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv, 0, p);
            q[i] = qi;
            const VALUE mq = pcg ? dinv[i] * qi : qi;
            t[0] += p[i] * qi;
            t[1] += r[i] * mq;
            t[2] += qi * mq;
        }
        kd_krylov_group_sums(scratch, t, 3);
        const VALUE alpha =
            kd_krylov_decide(&status, &at, &fail, rr, rz, t[0], thr, limit, it + 1);
        if (alpha == KD_ZERO)
            break;
        const VALUE rz_next = rz - (VALUE)2 * alpha * t[1] + alpha * alpha * t[2];
        const VALUE beta = rz_next > KD_ZERO ? rz_next / rz : KD_ZERO;
        VALUE u[2] = {KD_ZERO, KD_ZERO};
        /* every gather of p is done (the sums' barriers): each work-item rewrites its rows */
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE ri = r[i] - alpha * q[i];
            const VALUE zi = pcg ? dinv[i] * ri : ri;
            const VALUE pi = p[i];
            r[i] = ri;
            x[i] += alpha * pi;
            p[i] = zi + beta * pi;
            u[0] += ri * ri;
            u[1] += ri * zi;
        }
        KD_BATCH_PUBLISH;
        kd_krylov_group_sums(scratch, u, 2);
        rr = u[0];
        rz = pcg ? u[1] : u[0];
        it++;
        if (hist != 0 && lid == 0 && it < hcap)
            hist[it] = rr;
    }
    KD_BATCH_PUBLISH;
    if (lid == 0) {
        st[0] = status;
        st[1] = status == KD_KRYLOV_RUNNING ? it : at;
        sc[KD_BATCH_RR] = rr;
        sc[KD_BATCH_RZ] = rz;
        sc[KD_BATCH_FAIL] = fail;
    }
}

/*
 * BiCGSTAB on one system, right-preconditioned as solver/methods/bicgstab.c (SciPy's form) with
 * the same decisions and breakdown tests: rho = r0hat'r, beta = (rho / rho_old)(alpha / omega),
 * p = r + beta (p - omega v), v = A M^-1 p, alpha = rho / r0hat'v, s = r - alpha v (small: x +=
 * alpha M^-1 p, converged at the half step), t = A M^-1 s, omega = t's / t't,
 * x += alpha M^-1 p + omega M^-1 s, r = s - omega t. A rho breakdown takes a fresh shadow
 * residual (r0hat = r) up to KD_BICGSTAB_RESTARTS times. s overwrites r. M^-1 = diag(dinv) is applied
 * inside the SpMV's gather and the update, never stored. first (the start, or the host's
 * restart after a convergence b - A x did not confirm): r = b - A x, r0hat = r, p = r.
 */
void KD_BATCH_FN(kd_batch_bicgstab_run)(KD_VS VALUE *x, KD_VS VALUE *r, KD_VS VALUE *rh,
                                        KD_VS VALUE *p, KD_VS VALUE *v, KD_VS VALUE *t,
                                        __global const VALUE *b, __global const int *indptr,
                                        __global const int *indices,
                                        __global const VALUE *values, __global const VALUE *dinv,
                                        const int pre, const int n, const int first,
                                        const int count, const VALUE thr, const long limit,
                                        __global long *st, __global VALUE *sc,
                                        __global VALUE *hist, const int hcap,
                                        __local VALUE *scratch)
{
    const int lid = (int)get_local_id(0);
    long status = st[0], it = st[1], at = st[1];
    VALUE rr = sc[KD_BATCH_RR], rho = sc[KD_BATCH_RZ], rho_old = sc[KD_BATCH_RHO];
    VALUE alpha = sc[KD_BATCH_ALPHA], omega = sc[KD_BATCH_OMEGA], r0 = sc[KD_BATCH_R0];
    VALUE fail = sc[KD_BATCH_FAIL], restarts = first ? KD_ZERO : sc[KD_BATCH_SHADOWS];
    if (first) {
        VALUE u[1] = {KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE ri = b[i] - KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv,
                                                              0, x);
            r[i] = ri;
            rh[i] = ri;
            u[0] += ri * ri;
        }
        kd_krylov_group_sums(scratch, u, 1);
        rr = rho = r0 = u[0];
        if (hist != 0 && lid == 0 && it < hcap)
            hist[it] = rr; /* at a restart the true residual replaces the recurrence's */
    }
    for (int s = 0; s < count && status == KD_KRYLOV_RUNNING; s++) {
        const long iter = it + 1;
        int fresh = first && s == 0; /* the start, or a restart from the true residual */
        int renew = 0;                /* a fresh shadow residual after a rho breakdown */
        VALUE beta = KD_ZERO;
        if (!isfinite(rr) || !isfinite(rho)) {
            status = KD_KRYLOV_NON_FINITE_RESIDUAL;
            at = it;
            fail = isfinite(rr) ? rho : rr;
        } else if (rr <= thr) {
            status = KD_KRYLOV_CONVERGED;
            at = it;
        } else if (iter > limit) {
            status = KD_KRYLOV_STOPPED;
            at = it;
        } else if (fabs(rho) <= KD_BATCH_EPS * sqrt(r0) * sqrt(rr)) {
            if (restarts < (VALUE)KD_BICGSTAB_RESTARTS && rr > KD_ZERO) {
                renew = fresh = 1; /* r0hat = r, as solver/methods/bicgstab.c */
                rho = r0 = rr;
                restarts += (VALUE)1;
            } else {
                status = KD_KRYLOV_BREAKDOWN; /* the shadow residual is orthogonal to r */
                at = iter;
                fail = rho;
            }
        }
        if (status == KD_KRYLOV_RUNNING && !fresh) {
            beta = (rho / rho_old) * (alpha / omega);
            if (!isfinite(beta)) {
                status = KD_KRYLOV_NON_FINITE_ALPHA;
                at = iter;
                fail = beta;
            }
        }
        if (status != KD_KRYLOV_RUNNING)
            break;
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            p[i] = fresh ? r[i] : r[i] + beta * (p[i] - omega * v[i]);
            if (renew)
                rh[i] = r[i];
        }
        KD_BATCH_PUBLISH;
        VALUE d2[2] = {KD_ZERO, KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE vi = KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv, pre, p);
            v[i] = vi;
            d2[0] += rh[i] * vi;
            d2[1] += vi * vi;
        }
        kd_krylov_group_sums(scratch, d2, 2);
        const VALUE rv = d2[0], vv = d2[1];
        if (!isfinite(rv) || !isfinite(vv)) {
            status = KD_KRYLOV_NON_FINITE_PQ;
            fail = isfinite(rv) ? vv : rv;
        } else if (fabs(rv) <= KD_BATCH_EPS * sqrt(r0) * sqrt(vv)) {
            status = KD_KRYLOV_BREAKDOWN;
            fail = rv;
        } else {
            alpha = rho / rv;
            if (!isfinite(alpha)) {
                status = KD_KRYLOV_NON_FINITE_ALPHA;
                fail = alpha;
            } else if (alpha == KD_ZERO) {
                status = KD_KRYLOV_ZERO_STEP;
                fail = rho;
            }
        }
        if (status != KD_KRYLOV_RUNNING) {
            at = iter;
            break;
        }
        VALUE u[1] = {KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE si = r[i] - alpha * v[i];
            r[i] = si;
            u[0] += si * si;
        }
        KD_BATCH_PUBLISH;
        kd_krylov_group_sums(scratch, u, 1);
        const VALUE ss = u[0];
        if (!isfinite(ss)) {
            status = KD_KRYLOV_NON_FINITE_RESIDUAL;
            fail = ss;
        } else if (ss <= thr) {
            status = KD_KRYLOV_CONVERGED;
            for (int i = lid; i < n; i += KD_WG_SIZE)
                x[i] += alpha * (pre ? dinv[i] * p[i] : p[i]);
            rr = ss;
        }
        if (status != KD_KRYLOV_RUNNING) {
            at = iter;
            if (hist != 0 && lid == 0 && iter < hcap)
                hist[iter] = ss;
            break;
        }
        VALUE d3[2] = {KD_ZERO, KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE ti = KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv, pre, r);
            t[i] = ti;
            d3[0] += ti * r[i];
            d3[1] += ti * ti;
        }
        kd_krylov_group_sums(scratch, d3, 2);
        const VALUE ts = d3[0], tt = d3[1];
        omega = KD_ZERO;
        if (!isfinite(ts) || !isfinite(tt)) {
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
            }
        }
        if (status != KD_KRYLOV_RUNNING) {
            at = iter;
            break;
        }
        /* every gather of s is done (the sums' barriers): each work-item rewrites its rows */
        VALUE w[2] = {KD_ZERO, KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE m = pre ? dinv[i] : (VALUE)1;
            const VALUE si = r[i];
            x[i] += alpha * m * p[i] + omega * m * si;
            const VALUE ri = si - omega * t[i];
            r[i] = ri;
            w[0] += ri * ri;
            w[1] += rh[i] * ri;
        }
        kd_krylov_group_sums(scratch, w, 2);
        rr = w[0];
        rho_old = rho;
        rho = w[1];
        it = iter;
        if (hist != 0 && lid == 0 && it < hcap)
            hist[it] = rr;
    }
    KD_BATCH_PUBLISH;
    if (lid == 0) {
        st[0] = status;
        st[1] = status == KD_KRYLOV_RUNNING ? it : at;
        sc[KD_BATCH_RR] = rr;
        sc[KD_BATCH_RZ] = rho;
        sc[KD_BATCH_RHO] = rho_old;
        sc[KD_BATCH_ALPHA] = alpha;
        sc[KD_BATCH_OMEGA] = omega;
        sc[KD_BATCH_R0] = r0;
        sc[KD_BATCH_FAIL] = fail;
        sc[KD_BATCH_SHADOWS] = restarts;
    }
}

/*
 * Restarted GMRES(m) on one system, right-preconditioned (the residual it minimises is the true
 * b - A x), as solver/methods/gmres.c counts: one inner step one iteration. Modified Gram-Schmidt,
 * one work-group sum per basis vector; the Hessenberg column, its Givens rotations and the small
 * triangular solve are work-item 0's, kept in aux (global: H (m + 1) x m, then cs, sn, g, y),
 * the quantities every work-item needs passed through the sums' scratch. V holds m + 1 vectors
 * of n, w one more. A launch only starts a cycle while fewer than `count` iterations ran in it,
 * so no cycle spans two launches: each starts from r = b - A x. x is updated at every cycle's
 * end (converged, stopped, the basis full, or a breakdown: R's new diagonal at most
 * KD_GMRES_SINGULAR_ULPS ulps of H's column, where x takes the least-squares solution of the
 * columns before it instead of dividing by ~0).
 */
void KD_BATCH_FN(kd_batch_gmres_run)(KD_VS VALUE *x, KD_VS VALUE *V, KD_VS VALUE *w,
                                     __global const VALUE *b, __global const int *indptr,
                                     __global const int *indices, __global const VALUE *values,
                                     __global const VALUE *dinv, const int pre, const int n,
                                     const int m, const int count, const VALUE thr,
                                     const long limit, __global long *st, __global VALUE *sc,
                                     __global VALUE *hist, const int hcap, __global VALUE *aux,
                                     __local VALUE *scratch)
{
    const int lid = (int)get_local_id(0);
    long status = st[0], it = st[1], at = st[1];
    const long it0 = it;
    VALUE rr = sc[KD_BATCH_RR], fail = sc[KD_BATCH_FAIL];
    __global VALUE *H = aux, *cs = aux + (size_t)(m + 1) * m, *sn = cs + m, *g = sn + m;
    __global VALUE *y = g + m + 1;
    while (status == KD_KRYLOV_RUNNING && it - it0 < count) {
        VALUE u[1] = {KD_ZERO};
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            const VALUE ri = b[i] - KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv,
                                                              0, x);
            V[i] = ri;
            u[0] += ri * ri;
        }
        kd_krylov_group_sums(scratch, u, 1);
        rr = u[0];
        if (hist != 0 && lid == 0 && it < hcap)
            hist[it] = rr; /* a cycle starts from the true residual */
        if (!isfinite(rr)) {
            status = KD_KRYLOV_NON_FINITE_RESIDUAL;
            at = it;
            fail = rr;
            break;
        } else if (rr <= thr) {
            status = KD_KRYLOV_CONVERGED;
            at = it;
            break;
        } else if (it >= limit) {
            status = KD_KRYLOV_STOPPED;
            at = it;
            break;
        }
        const VALUE beta = sqrt(rr);
        for (int i = lid; i < n; i += KD_WG_SIZE)
            V[i] /= beta;
        if (lid == 0) {
            g[0] = beta;
            for (int i = 1; i <= m; i++)
                g[i] = KD_ZERO;
        }
        KD_BATCH_PUBLISH;
        int j = 0;
        for (; j < m && status == KD_KRYLOV_RUNNING; j++) {
            if (it + 1 > limit) {
                status = KD_KRYLOV_STOPPED;
                at = it;
                break;
            }
            KD_VS VALUE *vj = V + (size_t)j * n;
            for (int i = lid; i < n; i += KD_WG_SIZE)
                w[i] = KD_BATCH_FN(kd_batch_row)(i, indptr, indices, values, dinv, pre, vj);
            for (int l = 0; l <= j; l++) {
                KD_VS VALUE *vl = V + (size_t)l * n;
                VALUE h[1] = {KD_ZERO};
                for (int i = lid; i < n; i += KD_WG_SIZE)
                    h[0] += w[i] * vl[i];
                kd_krylov_group_sums(scratch, h, 1);
                for (int i = lid; i < n; i += KD_WG_SIZE)
                    w[i] -= h[0] * vl[i];
                if (lid == 0)
                    H[(size_t)l * m + j] = h[0];
            }
            VALUE ww[1] = {KD_ZERO};
            for (int i = lid; i < n; i += KD_WG_SIZE)
                ww[0] += w[i] * w[i];
            kd_krylov_group_sums(scratch, ww, 1);
            const VALUE hn = sqrt(ww[0]);
            if (!isfinite(hn)) {
                status = KD_KRYLOV_NON_FINITE_PQ;
                at = it + 1;
                fail = hn;
                break;
            }
            KD_VS VALUE *vn = V + (size_t)(j + 1) * n;
            for (int i = lid; i < n; i += KD_WG_SIZE)
                vn[i] = hn > KD_ZERO ? w[i] / hn : KD_ZERO;
            if (lid == 0) {
                /* the previous rotations on column j, then the one that zeroes H[j+1][j] */
                for (int l = 0; l < j; l++) {
                    const VALUE a = H[(size_t)l * m + j], c = H[(size_t)(l + 1) * m + j];
                    H[(size_t)l * m + j] = cs[l] * a + sn[l] * c;
                    H[(size_t)(l + 1) * m + j] = -sn[l] * a + cs[l] * c;
                }
                const VALUE a = H[(size_t)j * m + j];
                const VALUE r = sqrt(a * a + hn * hn);
                VALUE hc2 = r * r; /* ||h||^2: the rotations keep the column's norm */
                for (int l = 0; l < j; l++)
                    hc2 += H[(size_t)l * m + j] * H[(size_t)l * m + j];
                cs[j] = r > KD_ZERO ? a / r : (VALUE)1;
                sn[j] = r > KD_ZERO ? hn / r : KD_ZERO;
                H[(size_t)j * m + j] = r;
                g[j + 1] = -sn[j] * g[j];
                g[j] = cs[j] * g[j];
                /* a slot the one- and two-value sums leave alone: slower work-items may still
                 * be reading ||w||^2 from scratch[0] */
                scratch[2 * KD_WG_SIZE] = g[j + 1] * g[j + 1];
                scratch[2 * KD_WG_SIZE + 1] =
                    r <= (VALUE)KD_GMRES_SINGULAR_ULPS * KD_BATCH_EPS * sqrt(hc2) ? KD_ZERO : r;
            }
            barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
            const VALUE res = scratch[2 * KD_WG_SIZE], diag = scratch[2 * KD_WG_SIZE + 1];
            barrier(CLK_LOCAL_MEM_FENCE); /* scratch is the next sum's */
            if (diag == KD_ZERO) { /* R's diagonal ~0: H singular (A M^-1 on the Krylov space) */
                status = KD_KRYLOV_BREAKDOWN;
                at = it + 1;
                fail = diag;
                if (hist != 0 && lid == 0 && at < hcap)
                    hist[at] = rr; /* x stays the least-squares one of the steps before */
                break;
            }
            it++;
            rr = res;
            if (hist != 0 && lid == 0 && it < hcap)
                hist[it] = res;
            if (!isfinite(res)) {
                status = KD_KRYLOV_NON_FINITE_RESIDUAL;
                at = it;
                fail = res;
            } else if (res <= thr || hn == KD_ZERO) {
                status = KD_KRYLOV_CONVERGED; /* b - A x confirms it on the host */
                at = it;
            }
        }
        /* j: the columns this cycle built (a stop at the limit built none at step j) */
        const int done = status == KD_KRYLOV_RUNNING || status == KD_KRYLOV_CONVERGED ||
                                 status == KD_KRYLOV_STOPPED || status == KD_KRYLOV_BREAKDOWN
                             ? j
                             : 0;
        /* x += M^-1 V y, y the back substitution of the first `done` columns */
        if (lid == 0)
            for (int l = done - 1; l >= 0; l--) {
                VALUE s = g[l];
                for (int c = l + 1; c < done; c++)
                    s -= H[(size_t)l * m + c] * y[c];
                y[l] = s / H[(size_t)l * m + l];
            }
        barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);
        for (int i = lid; i < n; i += KD_WG_SIZE) {
            VALUE s = KD_ZERO;
            for (int l = 0; l < done; l++)
                s += V[(size_t)l * n + i] * y[l];
            x[i] += pre ? dinv[i] * s : s;
        }
        KD_BATCH_PUBLISH;
    }
    KD_BATCH_PUBLISH;
    if (lid == 0) {
        st[0] = status;
        st[1] = status == KD_KRYLOV_RUNNING ? it : at;
        sc[KD_BATCH_RR] = rr;
        sc[KD_BATCH_FAIL] = fail;
    }
}
