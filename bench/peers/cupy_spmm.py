#!/usr/bin/env python3
"""Peer for `krylov-bench spmm`: CuPy's `csr_matrix @ X` with X dense, n x k, column-major (CuPy
calls cuSPARSE's SpMM), on the same generated matrices (cupy_cg.py's load: lap2d:NX, lap3d:N or a
.mtx file).

    python3 bench/peers/cupy_spmm.py [--ks 1,8,32] [--runs N] [--dtype float32] SPEC...

Per matrix and k: 10 untimed products, then `runs` products between one pair of CUDA events (time
per product, back to back, as krylov-bench's launches queue); ms per product and per column, and
the per-column time against k = 1's. Checked against SciPy on the host for the first column.
"""
import argparse

import cupy as cp
import cupyx.scipy.sparse as csp
import numpy as np

from cupy_cg import load


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="1,8,32")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("specs", nargs="*", default=["lap3d:100", "lap2d:2048"])
    a = ap.parse_args()
    dt = np.dtype(a.dtype)
    name = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"# CuPy {cp.__version__} on {name}; {a.dtype}; csr @ dense X (n x k, column-major), "
          f"{a.runs} back-to-back products per row")
    print(f"{'matrix':<14} {'k':>3} {'ms':>9} {'ms/col':>9} {'col/k=1':>8}")
    for spec in a.specs:
        h = load(spec, dt)
        A = csp.csr_matrix(h)
        base = None
        for k in [int(s) for s in a.ks.split(",")]:
            rng = np.random.default_rng(7)
            xh = np.asfortranarray(rng.uniform(-1, 1, (h.shape[1], k)).astype(dt))
            X = cp.asfortranarray(cp.asarray(xh))
            Y = A @ X
            ref = h @ xh[:, 0]
            err = float(np.max(np.abs(cp.asnumpy(Y[:, 0]) - ref)) / max(1.0, np.max(np.abs(ref))))
            assert err < (1e-10 if dt == np.float64 else 1e-4), err
            for _ in range(10):
                Y = A @ X
            s, e = cp.cuda.Event(), cp.cuda.Event()
            s.record()
            for _ in range(a.runs):
                Y = A @ X
            e.record()
            e.synchronize()
            ms = cp.cuda.get_elapsed_time(s, e) / a.runs
            if k == 1:
                base = ms
            print(f"{spec:<14} {k:>3} {ms:9.4f} {ms / k:9.4f} "
                  f"{(ms / k / base) if base else float('nan'):8.3f}", flush=True)


if __name__ == "__main__":
    main()
