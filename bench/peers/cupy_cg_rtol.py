#!/usr/bin/env python3
"""The CuPy peer for `krylov-bench amg`: cupyx.scipy.sparse.linalg.cg to a relative residual, b = ones.

Usage: cupy_cg_rtol.py [--rtol 1e-8] [--repeat 3] [--jacobi] NAME=FILE.csr ...
FILE.csr: what `krylov-bench export SPEC FILE` writes (the exact matrix krylov-bench solves).
Prints one line per matrix: name, rows, nnz, iterations, median wall ms of a whole solve (device
synchronised before and after), and the true relative residual ||b - A x|| / ||b||.
CuPy's cg has no preconditioner argument for a diagonal; with --jacobi the system is scaled
symmetrically (D^-1/2 A D^-1/2 y = D^-1/2 b), which is Jacobi-PCG's iteration in exact arithmetic.
"""
import argparse
import time

import cupy as cp
import cupyx.scipy.sparse as csp
import cupyx.scipy.sparse.linalg as cla
import numpy as np

from kdcsr import read_csr


def read_device(path):
    rows, cols, ptr, idx, val = read_csr(path)
    return csp.csr_matrix((cp.asarray(val), cp.asarray(idx), cp.asarray(ptr)), shape=(rows, cols))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--jacobi", action="store_true")
    ap.add_argument("mats", nargs="+")
    a = ap.parse_args()
    print(f"# CuPy {cp.__version__} cg, rtol {a.rtol}, b = ones, median of {a.repeat}"
          + (", Jacobi by symmetric scaling" if a.jacobi else ""))
    print(f"{'matrix':22} {'rows':>9} {'nnz':>10} {'its':>6} {'ms':>9} {'relres':>8}")
    for spec in a.mats:
        name, path = spec.split("=", 1)
        A = read_device(path)
        n = A.shape[0]
        b = cp.ones(n)
        M = A
        rhs = b
        if a.jacobi:
            s = 1.0 / cp.sqrt(A.diagonal())
            D = csp.diags(s)
            M = (D @ A @ D).tocsr()
            rhs = s * b
        its = [0]

        def count(_):
            its[0] += 1

        times = []
        for r in range(a.repeat + 1):
            its[0] = 0
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            try:
                y, info = cla.cg(M, rhs, rtol=a.rtol, atol=0.0, maxiter=100000, callback=count)
            except TypeError:  # CuPy before SciPy's rename of tol
                y, info = cla.cg(M, rhs, tol=a.rtol, atol=0.0, maxiter=100000, callback=count)
            cp.cuda.Device().synchronize()
            if r > 0:
                times.append((time.perf_counter() - t0) * 1e3)
        x = s * y if a.jacobi else y
        relres = float(cp.linalg.norm(b - A @ x) / cp.linalg.norm(b))
        print(f"{name:22} {n:9d} {A.nnz:10d} {its[0]:6d} {np.median(times):9.2f} {relres:8.1e}",
              flush=True)


if __name__ == "__main__":
    main()
