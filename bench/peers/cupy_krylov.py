#!/usr/bin/env python3
"""The peer for `krylov-bench solve --methods gmres,minres,...`: CuPy's cupyx.scipy.sparse.linalg
gmres, minres, cgs and cg on the same matrices, ms per (inner) iteration.

Usage: cupy_krylov.py [--iterations N] [--restart M] [--repeat R] [--dtype float64|float32]
                      [--methods gmres,minres,cgs,cg] [--rtol R] [SPEC ...]
SPEC: lap3d:N, convdiff3d:N[:C] (7-point, upwind convection along (1,1,1): a_ii = 6 + 3C, lower
neighbours -1 - C, upper -1; C = 1 by default), shifted3d:N:S (lap3d - S I), the same matrices as
bench/matgen/matgen.c builds, or a Matrix Market file.

Fixed iteration counts (rtol = atol = 0) give ms per iteration two ways, as cupy_cg.py does: a whole
run of N over N, and (T(N + w) - T(w)) / N, which leaves the per-solve set-up out. CuPy's gmres
counts inner iterations in maxiter (a cycle is `restart` of them) and tests convergence once per
cycle; its Hessenberg least squares runs on the host (numpy.linalg.lstsq) once per cycle and its
Arnoldi step reads H back per iteration. With --rtol R it also solves to R (b = ones) and prints
the iterations (by callback; gmres: its callbacks x restart, marked "c", an upper bound as it tests
once a cycle) and wall time to get there.
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


def stencil3d(g, c=0.0, shift=0.0):
    """bench/matgen/matgen.c's kd_matgen_convdiff_3d."""
    one = np.ones(g)
    lower = sp.diags([one[:-1]], [-1], shape=(g, g))
    upper = sp.diags([one[:-1]], [1], shape=(g, g))
    eye = sp.identity(g)
    lo = sp.kron(sp.kron(eye, eye), lower) + sp.kron(sp.kron(eye, lower), eye) + sp.kron(sp.kron(lower, eye), eye)
    up = sp.kron(sp.kron(eye, eye), upper) + sp.kron(sp.kron(eye, upper), eye) + sp.kron(sp.kron(upper, eye), eye)
    a = (6.0 + 3.0 * c - shift) * sp.identity(g ** 3) - (1.0 + c) * lo - up
    return a.tocsr()


def load(spec, dtype):
    if spec.endswith(".mtx"):
        a = sp.csr_matrix(scipy.io.mmread(spec))
    else:
        parts = spec.split(":")
        g = int(parts[1])
        if parts[0] == "lap3d":
            a = stencil3d(g)
        elif parts[0] == "convdiff3d":
            a = stencil3d(g, c=float(parts[2]) if len(parts) > 2 else 1.0)
        elif parts[0] == "shifted3d":
            a = stencil3d(g, shift=float(parts[2]))
        else:
            raise SystemExit(f"unknown matrix {spec}")
    a = a.astype(dtype).tocsr()
    a.sum_duplicates()
    a.sort_indices()
    return a


def run(method, a, b, iterations, restart, rtol=0.0, callback=None):
    kw = dict(atol=0.0, maxiter=iterations)
    if method == "gmres":
        kw.update(restart=restart)
        if callback is not None:
            kw.update(callback=callback, callback_type="pr_norm")
    elif callback is not None:
        kw.update(callback=callback)
    fn = getattr(cla, method)
    for attempt in (dict(rtol=rtol), dict(tol=rtol)):  # CuPy before rtol: tol
        try:
            return fn(a, b, **attempt, **kw)
        except TypeError:
            pass
    kw.pop("atol")  # minres takes tol only
    return fn(a, b, tol=rtol, **kw)


def timed(method, a, b, iterations, restart):
    dev = cp.cuda.Device()
    dev.synchronize()
    t0 = time.perf_counter()
    run(method, a, b, iterations, restart)
    dev.synchronize()
    return (time.perf_counter() - t0) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=300)
    ap.add_argument("--restart", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtype", default="float64")
    ap.add_argument("--methods", default="gmres,minres,cgs,cg")
    ap.add_argument("--rtol", type=float, default=0.0)
    ap.add_argument("specs", nargs="*", default=["lap3d:100", "convdiff3d:100"])
    args = ap.parse_args()
    dtype = np.dtype(args.dtype)
    print(f"# CuPy {cp.__version__} on {cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}; "
          f"{args.dtype}; rtol = atol = 0, {args.iterations} iterations (gmres: restart "
          f"{args.restart}), median of {args.repeat}")
    print(f"{'matrix':<18} {'method':<7} {'rows':>9} {'nnz':>10} {'ms/it':>8} {'ms/it_d':>8}"
          f" {'to_rtol_it':>10} {'to_rtol_ms':>10}")
    for spec in args.specs:
        host = load(spec, dtype)
        a = csp.csr_matrix(host)
        b = cp.ones(host.shape[0], dtype=dtype)
        symmetric = (abs(host - host.T) > 0).nnz == 0
        for method in args.methods.split(","):
            if method in ("minres", "cg") and not symmetric:
                continue
            # a whole number of cycles for gmres
            n_it = args.iterations if method != "gmres" else max(1, args.iterations // args.restart) * args.restart
            warm = 20 if method != "gmres" else args.restart
            timed(method, a, b, warm, args.restart)
            med = lambda v: sorted(v)[len(v) // 2]
            whole = med([timed(method, a, b, n_it, args.restart) for _ in range(args.repeat)])
            short = med([timed(method, a, b, warm, args.restart) for _ in range(args.repeat)])
            longer = med([timed(method, a, b, n_it + warm, args.restart) for _ in range(args.repeat)])
            rt_it, rt_ms = "", ""
            if args.rtol > 0:
                count = [0]
                dev = cp.cuda.Device()
                dev.synchronize()
                t0 = time.perf_counter()
                run(method, a, b, 20000, args.restart, rtol=args.rtol,
                    callback=lambda *_: count.__setitem__(0, count[0] + 1))
                dev.synchronize()
                rt_ms = f"{(time.perf_counter() - t0) * 1e3:.1f}"
                # CuPy's gmres calls back once per restart cycle: inner iterations, at most
                rt_it = str(count[0] if method != "gmres" else f"{count[0] * args.restart}c")
            name = spec.rsplit("/", 1)[-1].replace(":", "_")
            print(f"{name:<18} {method:<7} {host.shape[0]:>9} {host.nnz:>10} {whole / n_it:>8.4f} "
                  f"{(longer - short) / n_it:>8.4f} {rt_it:>10} {rt_ms:>10}")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
