#!/usr/bin/env python3
"""One client's SpMV round trip from Python (issue 16, item 5): kd.spmv(A, x) on a cached 2-D
Laplacian 32 x 32 (1024 rows), one call after another, as a user's loop makes them. Needs a
running krylovd:

    python3 bench/service/py_roundtrip.py [--server HOST:PORT] [--calls 5000]

Prints p50 / p90 / p99 microseconds per call after 200 untimed ones; checked against SciPy.
"""
import argparse
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, "client/python")
import krylov  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=None)
    ap.add_argument("--calls", type=int, default=5000)
    a = ap.parse_args()
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(32, 32), format="csr")
    eye = sp.identity(32, format="csr")
    A = sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye))
    kd = krylov.Client(a.server)
    m = kd.put(A)
    x = np.random.default_rng(1).standard_normal(A.shape[1])
    y = kd.spmv(m, x)
    assert np.max(np.abs(y - A @ x)) < 1e-12
    for _ in range(200):
        kd.spmv(m, x)
    times = np.empty(a.calls)
    for i in range(a.calls):
        t0 = time.perf_counter()
        kd.spmv(m, x)
        times[i] = time.perf_counter() - t0
    times *= 1e6
    print(f"python kd.spmv, 1024 rows: p50 {np.percentile(times, 50):.1f} us "
          f"p90 {np.percentile(times, 90):.1f} us p99 {np.percentile(times, 99):.1f} us")


if __name__ == "__main__":
    main()
