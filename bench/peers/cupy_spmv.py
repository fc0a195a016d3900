#!/usr/bin/env python3
"""Peer for krylov-bench spmv: CuPy's `cupyx.scipy.sparse.csr_matrix @ x` (fp64, or fp32 with
--dtype float32: the file's values rounded to float, as krylov-bench rounds them; CuPy calls
cuSPARSE and allocates y from its memory pool on every call, as a user's code does) on the binary
CSR files krylov-bench exports (format in bench/bench.h).

    python3 bench/peers/cupy_spmv.py [--runs N] [--warmup N] [--dtype float32] FILE.csr...

Per file: `warmup` untimed products, then `runs` products each between a pair of CUDA events
(synchronised after each; median is the headline), then `runs` back to back between one pair (time
per product). Checked against scipy-free NumPy on the host. One JSON object per file on stdout.
"""
import argparse
import json
import os
import sys

import numpy as np

from kdcsr import read_csr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    import cupy as cp
    import cupyx.scipy.sparse as sp

    for path in a.files:
        rows, cols, ptr, idx, val = read_csr(path)
        dt = np.dtype(a.dtype)
        val = val.astype(dt)
        A = sp.csr_matrix((cp.asarray(val), cp.asarray(idx), cp.asarray(ptr)), shape=(rows, cols))
        rng = np.random.default_rng(7)
        xh = rng.uniform(-1.0, 1.0, cols).astype(dt)
        x = cp.asarray(xh)
        val, xh = val.astype(np.float64), xh.astype(np.float64)  # the reference in double
        lens = np.diff(ptr.astype(np.int64))
        ref = np.bincount(np.repeat(np.arange(rows), lens), weights=val * xh[idx], minlength=rows)
        for _ in range(a.warmup):
            y = A @ x
        cp.cuda.Device().synchronize()
        yh = cp.asnumpy(y)
        err = float(np.max(np.abs(yh - ref)) / max(np.max(np.abs(ref)), 1e-300)) if rows else 0.0
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
        t = []
        for _ in range(a.runs):
            e0.record()
            y = A @ x
            e1.record()
            e1.synchronize()
            t.append(cp.cuda.get_elapsed_time(e0, e1))
        e0.record()
        for _ in range(a.runs):
            y = A @ x
        e1.record()
        e1.synchronize()
        batch = cp.cuda.get_elapsed_time(e0, e1) / a.runs
        name = os.path.basename(path)
        name = name[:-4] if name.endswith(".csr") else name
        print(json.dumps({"name": name, "rows": rows, "nnz": int(len(val)),
                          "cupy_ms": float(np.median(t)), "cupy_min_ms": float(np.min(t)),
                          "cupy_batch_ms": batch, "cupy_rel_err": err,
                          "cupy_version": cp.__version__}), flush=True)
        del A, x, y


if __name__ == "__main__":
    sys.exit(main())
