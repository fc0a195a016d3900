#!/usr/bin/env python3
"""The peer for `krylov-bench batch`: CuPy's cupyx.scipy.sparse.linalg.cg called in a Python loop
over the same systems (what a user without a batched solver writes), to the same rtol.

Usage: krylov-bench batch --export batch.bin [...]; cupy_batch.py [--rtol R] [--jacobi]
       [--systems N] batch.bin

batch.bin (bench/solver/bench_batch.c): "KDBATCH\\0", int64 k, rows, nnz, int32 indptr[rows + 1],
int32 indices[nnz], float64 values[k nnz], float64 b[k rows]. The matrices are built on the
device before the clock starts (as krylovd's batch is resident before its solve); the time is the
loop of solves, wall clock with the device synchronised before and after. Prints the total, the
time per system, the iteration range and the worst true relative residual.
"""
import argparse
import inspect
import time

import cupy as cp
import cupyx.scipy.sparse as csp
import cupyx.scipy.sparse.linalg as cla
import numpy as np


def read_batch(path):
    with open(path, "rb") as f:
        if f.read(8) != b"KDBATCH\0":
            raise SystemExit(f"{path}: not a KDBATCH file")
        k, rows, nnz = (int(v) for v in np.frombuffer(f.read(24), dtype="<i8"))
        ptr = np.frombuffer(f.read(4 * (rows + 1)), dtype="<i4")
        idx = np.frombuffer(f.read(4 * nnz), dtype="<i4")
        val = np.frombuffer(f.read(8 * k * nnz), dtype="<f8").reshape(k, nnz)
        b = np.frombuffer(f.read(8 * k * rows), dtype="<f8").reshape(k, rows)
    return k, rows, ptr, idx, val, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("batch")
    ap.add_argument("--rtol", type=float, default=1e-8)
    ap.add_argument("--jacobi", action="store_true")
    ap.add_argument("--systems", type=int, default=0, help="solve only the first N (0: all)")
    ap.add_argument("--repeat", type=int, default=1)
    args = ap.parse_args()
    k, rows, ptr, idx, val, b = read_batch(args.batch)
    if args.systems:
        k = min(k, args.systems)
    dptr, didx = cp.asarray(ptr), cp.asarray(idx)
    mats = [csp.csr_matrix((cp.asarray(val[s]), didx, dptr), shape=(rows, rows)) for s in range(k)]
    bs = [cp.asarray(b[s]) for s in range(k)]
    ms = None
    if args.jacobi:
        ms = []
        for A in mats:
            d = 1.0 / A.diagonal()
            ms.append(cla.LinearOperator((rows, rows), matvec=lambda v, d=d: d * v))
    kw = "rtol" if "rtol" in inspect.signature(cla.cg).parameters else "tol"
    counts = [0] * k

    def run(systems):
        xs = []
        for s in range(systems):
            n = [0]

            def cb(_xk, n=n):
                n[0] += 1

            x, _info = cla.cg(mats[s], bs[s], atol=0.0, maxiter=10 * rows, callback=cb,
                              M=None if ms is None else ms[s], **{kw: args.rtol})
            counts[s] = n[0]
            xs.append(x)
        return xs

    run(1)  # warm-up: CuPy's kernels compiled
    best = None
    for _ in range(args.repeat):
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        xs = run(k)
        cp.cuda.Device().synchronize()
        t = (time.perf_counter() - t0) * 1e3
        best = t if best is None else min(best, t)
    worst = max(float(cp.linalg.norm(bs[s] - mats[s] @ xs[s]) / cp.linalg.norm(bs[s]))
                for s in range(k))
    print(f"{'cupy-loop':<10} {best:10.3f} {k:10d} {min(counts):5d}..{max(counts):<6d} "
          f"{best / k:14.4f}  cupyx cg in a Python loop, worst true relres {worst:.2e}")


if __name__ == "__main__":
    main()
