#!/usr/bin/env python3
"""The peer for `krylov-bench heat` (issue 22): CuPy's cupyx.scipy.sparse.linalg.cg with a Jacobi
preconditioner (as cupy_cg.py builds it: M = diag(A)^-1 as a CSR matrix) driving the same
backward-Euler loop on the same GPU:

    A_k = I + dt_k L,  dt_k = dt (1 + 0.5 sin k),  u_{k+1} = A_k^-1 u_k,

L the 5-point stencil on an n x n grid (4 on the diagonal, -1 to each neighbour), u_0 the same
smooth mode plus noise as bench/service/bench_heat.c (its kd_matgen_hash01, reproduced here), cg to
rtol 1e-8 from x0 = 0. A_k and M are built once on the GPU and their values rewritten in place
every step (data[...] = ...), as an application holding its matrix on the GPU would.

Two loops, each timed per step with the device synchronised before and after:
  device: u stays on the GPU (CuPy's best case: no host at all);
  host:   u comes from the host and goes back every step (cp.asarray / cp.asnumpy), the b in and
          x out that every step through krylovd pays.
Prints per-step rows and medians over steps 1.. (step 0 carries CuPy's first-call costs), the
final ||u|| (compare with krylov-bench heat's) and the last step's true residual.

    python3 cupy_heat.py [--n 1000] [--steps 50] [--dt 4] [--numpy]

--numpy runs the same loop with NumPy and SciPy on the host (for checking this script where
there is no GPU; its times mean nothing).
"""
import argparse
import math
import statistics
import sys
import time

import numpy as np


def hash01(a, b, c):
    """bench/matgen/matgen.h's kd_matgen_hash01 over arrays of b (uint64 arithmetic, wrapping)."""
    with np.errstate(over="ignore"):
        b = np.asarray(b, dtype=np.uint64)
        z = (np.uint64(a) * np.uint64(0x9E3779B97F4A7C15)) ^ \
            ((b + np.uint64(0x632BE59BD9B4E019)) * np.uint64(0xBF58476D1CE4E5B9)) ^ \
            ((np.uint64(c) + np.uint64(0x1234567)) * np.uint64(0x94D049BB133111EB))
        z ^= z >> np.uint64(31)
        z *= np.uint64(0xD6E8FEB86645D265)
        z ^= z >> np.uint64(29)
    return (z >> np.uint64(11)).astype(np.float64) / 9007199254740992.0


def pattern(n):
    """The 5-point CSR pattern, columns ascending (bench_heat.c's kd_heat_make), and the diagonal's
    positions."""
    r = np.arange(n * n, dtype=np.int64)
    i, j = r // n, r % n
    cols = [np.where(i > 0, r - n, -1), np.where(j > 0, r - 1, -1), r,
            np.where(j + 1 < n, r + 1, -1), np.where(i + 1 < n, r + n, -1)]
    c = np.stack(cols, axis=1)
    keep = c >= 0
    indices = c[keep].astype(np.int32)
    indptr = np.concatenate([[0], np.cumsum(keep.sum(axis=1))]).astype(np.int32)
    diag = np.flatnonzero(indices == np.repeat(r, keep.sum(axis=1)))
    return indptr, indices, diag


def u0(n):
    r = np.arange(n * n)
    i, j = r // n, r % n
    s = 1.0 / (n + 1)
    return (np.sin(math.pi * (j + 1) * s) * np.sin(2.0 * math.pi * (i + 1) * s) +
            0.5 * (2.0 * hash01(22, r, 7) - 1.0))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--dt", type=float, default=4.0)
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--numpy", action="store_true", help="NumPy/SciPy on the host instead")
    a = ap.parse_args()
    if a.numpy:
        import scipy.sparse as sparse
        import scipy.sparse.linalg as linalg
        xp, sync, to_host, name = np, (lambda: None), (lambda v: v), "NumPy/SciPy on the host"
    else:
        import cupy as cp
        import cupyx.scipy.sparse as sparse
        import cupyx.scipy.sparse.linalg as linalg
        xp, sync, to_host = cp, cp.cuda.Device().synchronize, cp.asnumpy
        name = (f"CuPy {cp.__version__} on "
                f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}")
    n, rows = a.n, a.n * a.n
    indptr, indices, diag = pattern(n)
    nnz = len(indices)
    print(f"# {name}; heat {n}^2: {rows} rows, {nnz} nonzeros, {a.steps} steps, "
          f"dt_k = {a.dt:g} (1 + 0.5 sin k), cg + jacobi to {a.rtol:g}, x0 = 0")
    data = xp.full(nnz, -1.0)
    A = sparse.csr_matrix((data, xp.asarray(indices), xp.asarray(indptr)), shape=(rows, rows))
    M = sparse.csr_matrix((xp.ones(rows), xp.arange(rows, dtype=np.int32),
                           xp.arange(rows + 1, dtype=np.int32)), shape=(rows, rows))
    d_diag = xp.asarray(diag)

    def set_values(dt):
        A.data[:] = -dt  # in place: the pattern stays
        A.data[d_diag] = 1.0 + 4.0 * dt
        M.data[:] = 1.0 / A.data[d_diag]

    def solve(b):
        its = [0]

        def count(_):
            its[0] += 1

        kw = dict(M=M, atol=0.0, callback=count)
        try:
            x, info = linalg.cg(A, b, rtol=a.rtol, **kw)
        except TypeError:  # before rtol: tol
            x, info = linalg.cg(A, b, tol=a.rtol, **kw)
        if info != 0:
            raise SystemExit(f"cg did not converge (info {info}) after {its[0]} iterations")
        return x, its[0]

    start = u0(n)
    results = {}
    for loop in ("device", "host"):
        u = xp.asarray(start) if loop == "device" else start.copy()
        rows_out = []
        for k in range(a.steps):
            dt = a.dt * (1.0 + 0.5 * math.sin(k))
            sync()
            t0 = time.perf_counter()
            set_values(dt)
            b = xp.asarray(u) if loop == "host" else u
            x, its = solve(b)
            sync()
            t1 = time.perf_counter()
            if loop == "host":
                x = to_host(x)
            sync()
            t2 = time.perf_counter()
            rows_out.append((k, dt, (t1 - t0) * 1e3, (t2 - t0) * 1e3, its))
            last_b, u = b, x
        results[loop] = (rows_out, u, last_b)
        print(f"{'loop':<7} {'step':>4} {'dt':>7} {'solve_ms':>9} {'step_ms':>9} {'its':>5}")
        for k, dt, solve_ms, step_ms, its in rows_out:
            print(f"{loop:<7} {k:>4} {dt:>7.3f} {solve_ms:>9.2f} {step_ms:>9.2f} {its:>5}")
        sys.stdout.flush()
    print(f"# medians over steps 1..{a.steps - 1} (step 0 carries CuPy's first calls)")
    for loop, (rows_out, u, last_b) in results.items():
        tail = rows_out[1:] or rows_out
        step = statistics.median(r[3] for r in tail)
        its = statistics.median(r[4] for r in tail)
        total = sum(r[3] for r in rows_out)
        res = xp.linalg.norm(xp.asarray(last_b) - A @ xp.asarray(u)) / xp.linalg.norm(
            xp.asarray(last_b))
        label = ("device: u on the GPU" if loop == "device"
                 else "host: u from and to the host each step")
        print(f"{label:<40} step {step:8.2f} ms, {its:5.0f} iterations, total {total:9.1f} ms; "
              f"final ||u|| {float(np.linalg.norm(to_host(xp.asarray(u)))):.12e}, last step's "
              f"true residual {float(res):.3e}")


if __name__ == "__main__":
    main()
