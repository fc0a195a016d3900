#!/usr/bin/env python3
"""Peer for krylov-bench spgemm: CuPy's `A @ B` on cupyx.scipy.sparse.csr_matrix (CuPy calls
cuSPARSE's generic SpGEMM with CUSPARSE_SPGEMM_DEFAULT and takes its buffers and C from its memory
pool, as a user's code does), on the matrices krylov-bench exports: the binary CSR of bench/bench.h
(`krylov-bench export SPEC FILE.csr`) or a Matrix Market file. fp64, or fp32 with --dtype float32
(the file's values rounded to float, as krylov-bench rounds them).

    python3 bench/peers/cupy_spgemm.py [--op aa|ata|rap] [--dtype float64|float32] [--runs N]
                                       [--warmup N] [--p FILE] FILE...

Operations, as bench/peers/cusparse_spgemm.cu does them (operands formed outside the timing):
  aa   A @ A;
  ata  At @ A with At = A^T made once as a CSR matrix (A.T would be a CSC view CuPy converts on
       every product);
  rap  R @ (A @ P) with R = P^T made once; P is --p FILE, or NAME.P.csr / NAME.P.mtx beside FILE.

Per file: `warmup` untimed products, then `runs` products each between a pair of CUDA events
(synchronised after each): median ("median_ms", the headline) and min. Then one more product under
a CuPy memory hook that counts the bytes the product takes from the pool ("peak_bytes": the most
live at once, in the pool's 512-byte rounding, operands not included). Checked on the host: C x
against A (B x) for a random x ("rel_err"; over 1e-8, fp32 1e-3, adds an "error"); "checksum" is
the sum of C's values in double. One JSON object per file on stdout, with the keys of
krylov-bench spgemm --json.
"""
import argparse
import json
import os
import sys

import numpy as np

from kdcsr import read_csr


def host_transpose(rows, cols, ptr, idx, val):
    """CSR of A^T (rows sorted), by a stable counting sort on the column."""
    lens = np.diff(ptr.astype(np.int64))
    row_of = np.repeat(np.arange(rows, dtype=np.int32), lens)
    order = np.argsort(idx, kind="stable")
    tptr = np.zeros(cols + 1, dtype=np.int64)
    np.cumsum(np.bincount(idx, minlength=cols), out=tptr[1:])
    return cols, rows, tptr.astype(np.int32), row_of[order], val[order]


def host_spmv(m, x):
    rows, _, ptr, idx, val = m
    lens = np.diff(ptr.astype(np.int64))
    return np.bincount(np.repeat(np.arange(rows), lens), weights=val * x[idx], minlength=rows)


def p_beside(path):
    stem = path[:-4] if path.endswith((".csr", ".mtx")) else path
    for ext in (".P.csr", ".P.mtx"):
        if os.path.exists(stem + ext):
            return stem + ext
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--op", default="aa", choices=["aa", "ata", "rap"])
    ap.add_argument("--dtype", default="float64", choices=["float64", "float32"])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--p", help="the prolongator for --op rap (default: NAME.P.csr beside FILE)")
    ap.add_argument("files", nargs="+")
    a = ap.parse_args()
    import cupy as cp
    import cupyx.scipy.sparse as sp
    from cupy.cuda import memory_hook

    class Peak(memory_hook.MemoryHook):
        """Bytes taken from the pool and not yet given back, and their peak."""
        name = "KdPeak"

        def __init__(self):
            self.cur = self.peak = 0

        def malloc_postprocess(self, **kw):
            self.cur += kw["mem_size"]
            self.peak = max(self.peak, self.cur)

        def free_postprocess(self, **kw):
            self.cur -= kw["mem_size"]

    dt = np.dtype(a.dtype)

    def dev(m):
        rows, cols, ptr, idx, val = m
        d = sp.csr_matrix((cp.asarray(val.astype(dt)), cp.asarray(idx), cp.asarray(ptr)),
                          shape=(rows, cols))
        d.has_canonical_format  # checked (and cached) now, not inside the timed products
        return d

    rc = 0
    for path in a.files:
        name = os.path.basename(path)
        for ext in (".csr", ".mtx"):
            name = name[:-len(ext)] if name.endswith(ext) else name
        out = {"matrix": name, "op": a.op, "dtype": a.dtype}
        try:
            A = read_csr(path)
            if a.dtype == "float32":  # the host's reference multiplies what the device gets
                A = A[:4] + (A[4].astype(np.float32).astype(np.float64),)
            out.update(rows=A[0], cols=A[1], nnz_a=int(A[2][-1]))
            if a.op == "aa":
                if A[0] != A[1]:
                    raise ValueError("A A needs a square A")
                chain = [A, A]
            elif a.op == "ata":
                chain = [host_transpose(*A), A]
            else:
                pp = a.p or p_beside(path)
                if pp is None:
                    raise ValueError(f"rap: no --p and no NAME.P.csr/.P.mtx beside {path}")
                P = read_csr(pp)
                if a.dtype == "float32":
                    P = P[:4] + (P[4].astype(np.float32).astype(np.float64),)
                if P[0] != A[1] or A[0] != A[1]:
                    raise ValueError("rap: P's rows must match square A's columns")
                out.update(p_cols=P[1], nnz_p=int(P[2][-1]))
                chain = [host_transpose(*P), A, P]
            ds = [dev(m) for m in chain]
            if len(ds) == 2:
                L, B = ds
                product = lambda: L @ B  # noqa: E731
            else:
                L, Am, Pd = ds
                product = lambda: L @ (Am @ Pd)  # noqa: E731
            for _ in range(a.warmup):
                C = product()
                del C
            cp.cuda.Device().synchronize()
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            t = []
            for _ in range(a.runs):
                e0.record()
                C = product()
                e1.record()
                e1.synchronize()
                t.append(cp.cuda.get_elapsed_time(e0, e1))
                del C
            with Peak() as hook:
                C = product()
                cp.cuda.Device().synchronize()
            # products: sum over the left operand's entries of the right operand's row lengths
            lens = np.diff(chain[-1][2].astype(np.int64))
            if len(chain) == 2:
                prods = int(lens[chain[0][3]].sum())
            else:
                AP = Am @ Pd
                ap_lens = np.diff(cp.asnumpy(AP.indptr).astype(np.int64))
                prods = int(lens[chain[1][3]].sum()) + int(ap_lens[chain[0][3]].sum())
                out["nnz_ap"] = int(AP.nnz)
                del AP
            Ch = (C.shape[0], C.shape[1], cp.asnumpy(C.indptr), cp.asnumpy(C.indices),
                  cp.asnumpy(C.data).astype(np.float64))
            x = np.random.default_rng(7).uniform(-1.0, 1.0, chain[-1][1])
            ref = x
            for m in reversed(chain):
                ref = host_spmv(m, ref)
            y = host_spmv(Ch, x)
            err = (float(np.max(np.abs(y - ref)) / max(np.max(np.abs(ref)), 1e-300))
                   if len(ref) else 0.0)
            out.update(products=prods, nnz_c=int(C.nnz), median_ms=float(np.median(t)),
                       min_ms=float(np.min(t)), peak_bytes=int(hook.peak),
                       checksum=float(Ch[4].sum()), rel_err=err, runs=a.runs, warmup=a.warmup,
                       cupy_version=cp.__version__,
                       device=cp.cuda.runtime.getDeviceProperties(0)["name"].decode())
            if not err <= (1e-3 if a.dtype == "float32" else 1e-8):
                out["error"] = f"wrong product: C x off by {err:.3g} (relative)"
                rc = 1
            del C, ds, L
        except Exception as e:  # one matrix's failure is reported, the others still run
            out["error"] = f"{type(e).__name__}: {e}"
            rc = 1
        print(json.dumps(out), flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    return rc


if __name__ == "__main__":
    sys.exit(main())
