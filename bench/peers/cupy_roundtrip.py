#!/usr/bin/env python3
"""Peer for `krylov-load`'s single-client SpMV round trip: the same product done in-process with
CuPy, x from host memory to the GPU, y = A @ x (cuSPARSE), y back to host memory, one call after
another (what a client's request costs when there is no service and no network in between).

    python3 bench/peers/cupy_roundtrip.py [--calls N] [SPEC...]   (default lap2d:32, 1024 rows)

Prints p50 / p90 / p99 microseconds per round trip after 200 untimed ones; checked against SciPy.
"""
import argparse
import time

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np

from cupy_cg import load


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("specs", nargs="*", default=["lap2d:32"])
    a = ap.parse_args()
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"# CuPy {cp.__version__} on {name}: host x -> device, A @ x, y -> host, in-process")
    for spec in a.specs:
        A = load(spec, np.float64).tocsr()
        Ad = csp.csr_matrix(A)
        rng = np.random.default_rng(1)
        x = rng.standard_normal(A.shape[1])
        y = cp.asnumpy(Ad @ cp.asarray(x))
        err = np.max(np.abs(y - A @ x)) / max(1.0, np.max(np.abs(A @ x)))
        assert err < 1e-12, err
        for _ in range(200):
            cp.asnumpy(Ad @ cp.asarray(x))
        t = np.empty(a.calls)
        for i in range(a.calls):
            t0 = time.perf_counter()
            cp.asnumpy(Ad @ cp.asarray(x))
            t[i] = time.perf_counter() - t0
        t *= 1e6
        print(f"{spec}: rows {A.shape[0]} nnz {A.nnz}: round trip p50 {np.percentile(t, 50):.1f} us"
              f" p90 {np.percentile(t, 90):.1f} us p99 {np.percentile(t, 99):.1f} us")


if __name__ == "__main__":
    main()
