#!/usr/bin/env python3
"""The peer for `krylov-bench solve`: CuPy's cupyx.scipy.sparse.linalg.cg on the same matrices.

Usage: cupy_cg.py [--iterations N] [--repeat R] [--dtype float64|float32] [--jacobi] [SPEC ...]
SPEC: lap2d:NX (5-point, 4 on the diagonal) or lap3d:N (7-point, 6 on the diagonal), the same
matrices as bench/matgen/matgen.c builds (default lap2d:2048 lap3d:160), or a Matrix Market file (read
with scipy.io.mmread: symmetric files expanded, pattern entries 1, as krylovd's reader does).

tol (rtol) = 0 and atol = 0 so it never stops early; the time is wall clock with the device
synchronised before and after. ms/it is reported two ways: a whole solve of N iterations over N,
and (T(N + 20) - T(20)) / N, which leaves CuPy's per-solve set-up out.
"""
import argparse
import sys
import time

import cupy as cp
import cupyx.scipy.sparse as csp
import cupyx.scipy.sparse.linalg as cla
import numpy as np
import scipy.io
import scipy.sparse as sp


def load(spec, dtype):
    if spec.endswith(".mtx"):
        a = sp.csr_matrix(scipy.io.mmread(spec)).astype(dtype)
        a.sum_duplicates()
        a.sort_indices()
        return a
    kind, size = spec.split(":")
    n = int(size)
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    if kind == "lap2d":
        a = sp.kron(eye, t) + sp.kron(t, eye)
    elif kind == "lap3d":
        a = sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye) + sp.kron(sp.kron(t, eye), eye)
    else:
        raise SystemExit(f"unknown matrix {spec}")
    a = a.tocsr()
    a.sum_duplicates()
    a.sort_indices()
    return a.astype(dtype)


def solve(a, b, iterations, m):
    kwargs = dict(maxiter=iterations, atol=0.0, M=m)
    try:
        return cla.cg(a, b, rtol=0.0, **kwargs)
    except TypeError:  # CuPy before rtol: tol
        return cla.cg(a, b, tol=0.0, **kwargs)


def timed(a, b, iterations, m):
    dev = cp.cuda.Device()
    dev.synchronize()
    t0 = time.perf_counter()
    solve(a, b, iterations, m)
    dev.synchronize()
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--jacobi", action="store_true", help="also time M = diag(A)^-1")
    ap.add_argument("specs", nargs="*", default=["lap2d:2048", "lap3d:160"])
    args = ap.parse_args()
    dtype = np.dtype(args.dtype)
    print(f"# CuPy {cp.__version__} on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; "
          f"{args.dtype}; cg with tol = atol = 0, {args.iterations} iterations, median of {args.repeat}")
    print(f"{'matrix':<14} {'meth':<4} {'rows':>9} {'nnz':>10} {'ms/it':>8} {'ms/it_d':>8}")
    for spec in args.specs:
        host = load(spec, dtype)
        a = csp.csr_matrix(host)
        rng = np.random.default_rng(1)
        b = cp.asarray(rng.uniform(-1.0, 1.0, host.shape[0]).astype(dtype))
        variants = [("cg", None)]
        if args.jacobi:
            inv = cp.asarray((1.0 / host.diagonal()).astype(dtype))
            variants.append(("pcg", csp.diags(inv).tocsr()))
        for name, m in variants:
            timed(a, b, 5, m)  # warm-up: kernels, handles
            whole = sorted(timed(a, b, args.iterations, m) for _ in range(args.repeat))
            short = sorted(timed(a, b, 20, m) for _ in range(args.repeat))
            longer = sorted(timed(a, b, args.iterations + 20, m) for _ in range(args.repeat))
            med = lambda v: v[len(v) // 2]
            per = med(whole) / args.iterations
            diff = (med(longer) - med(short)) / args.iterations
            print(f"{spec.rsplit('/', 1)[-1]:<14} {name:<4} {host.shape[0]:>9} {host.nnz:>10} {per:>8.4f} {diff:>8.4f}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
