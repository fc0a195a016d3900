#!/usr/bin/env python3
"""Re-putting a matrix the server already holds (issue 16, item 6): the first put() of a
7M-nonzero matrix (a 3-D Laplacian 100^3) and the second, which computes the content id locally
and asks (matrix.info) instead of sending ~90 MB. Needs a running krylovd:

    python3 bench/service/reput.py [--server HOST:PORT] [--n 100] [--repeat 5]

Prints the milliseconds of each (median of --repeat for the re-put) and the local hash alone.
"""
import argparse
import statistics
import sys
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, "client/python")
import krylov  # noqa: E402
from krylov.content_id import csr_content_id  # noqa: E402


def lap3d(n):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    a = sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye) + sp.kron(sp.kron(t, eye), eye)
    a = sp.csr_matrix(a)
    a.sum_duplicates()
    return a


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=None)
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    A = lap3d(a.n)
    kd = krylov.Client(a.server)
    t0 = time.perf_counter()
    first = kd.put(A)
    t_first = (time.perf_counter() - t0) * 1e3
    times, hashes = [], []
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        again = kd.put(A)
        times.append((time.perf_counter() - t0) * 1e3)
        assert again.id == first.id and again.created is False
        t0 = time.perf_counter()
        csr_content_id(A.shape[0], A.shape[1], A.indptr, A.indices, A.data, "float64",
                       canonical=True)
        hashes.append((time.perf_counter() - t0) * 1e3)
    print(f"matrix lap3d {a.n}^3: {A.shape[0]} rows, {A.nnz} nonzeros "
          f"({(A.nnz * 12 + (A.shape[0] + 1) * 4) / 1e6:.0f} MB as CSR)")
    print(f"first put (sent, {'created' if first.created else 'already held'}): {t_first:9.1f} ms")
    print(f"re-put (hash + matrix.info), median of {a.repeat}: {statistics.median(times):9.1f} ms")
    print(f"  of which the local hash: {statistics.median(hashes):9.1f} ms")


if __name__ == "__main__":
    main()
