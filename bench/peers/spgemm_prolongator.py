#!/usr/bin/env python3
"""A prolongator P for the Galerkin product R A P (R = P^T) of the SpGEMM benchmark, written as the
binary CSR of bench/bench.h (KDCSR64), for when krylov-bench spgemm --op rap --export DIR did not
write its own (DIR/NAME.P.csr or DIR/NAME.P.mtx); then the peers multiply this one and the report
says that krylovd's P may differ (compare nnz(C) and the checksums).

    python3 bench/peers/spgemm_prolongator.py SPEC A.csr P.csr

Smoothed aggregation, one step, as a multigrid setup builds it:
  - aggregates: for SPEC lap2d:N, 2x2 blocks of grid points (row = y*N + x); for lap3d:N, 2x2x2
    blocks (row = (z*N + y)*N + x, krylov-bench's orders); aggregate index = the block's
    coordinates in the coarse grid of ceil(N/2) points a side, x fastest (odd N: the last block is
    thinner). Any other SPEC: 8 consecutive rows an aggregate.
  - tentative prolongator T: T[i, agg(i)] = 1.
  - P = (I - omega D^-1 A) T with omega = 2/3 and D = diag(A) (zeros on A's diagonal taken as 1),
    explicit zeros dropped. A fine point's row holds its own aggregate and, per axis, the one
    across its aggregate's face (none on the domain's boundary): lap3d:64 gives 262144 x 32768
    with 1,024,000 entries (up to 4 a row; A P 2.52M, R A P 32768 x 32768 with 1.01M), lap2d:1024
    1048576 x 262144 with 3,141,632 (up to 3; A P 6.28M, R A P 3.40M).
Needs NumPy and SciPy (there on the GPU host).
"""
import re
import sys

import numpy as np
import scipy.sparse as sp

from kdcsr import read_csr, write_csr


def aggregates(spec, n):
    """(aggregate of each row, number of aggregates)."""
    g = re.fullmatch(r"lap([23])d:(\d+)", spec)
    if g:
        dim, side = int(g.group(1)), int(g.group(2))
        if side ** dim == n:
            c = (side + 1) // 2
            r = np.arange(n, dtype=np.int64)
            x, y, z = r % side, (r // side) % side, r // (side * side)
            agg = x // 2 + c * (y // 2)
            if dim == 3:
                agg = agg + c * c * (z // 2)
            return agg, c ** dim
    return np.arange(n, dtype=np.int64) // 8, (n + 7) // 8


def prolongator(spec, A, omega=2.0 / 3.0):
    n = A.shape[0]
    agg, nc = aggregates(spec, n)
    T = sp.csr_matrix((np.ones(n), agg, np.arange(n + 1)), shape=(n, nc))
    d = A.diagonal()
    d = np.where(d == 0, 1.0, d)
    P = T - sp.diags(omega / d) @ (A @ T)
    P = sp.csr_matrix(P)
    P.eliminate_zeros()
    return P


def main():
    if len(sys.argv) != 4:
        raise SystemExit(__doc__)
    spec, a_path, p_path = sys.argv[1:]
    rows, cols, ptr, idx, val = read_csr(a_path)
    A = sp.csr_matrix((val, idx, ptr), shape=(rows, cols))
    P = prolongator(spec, A)
    write_csr(p_path, P)
    print(f"{spec}: P {P.shape[0]} x {P.shape[1]}, nnz {P.nnz} -> {p_path}")


if __name__ == "__main__":
    main()
