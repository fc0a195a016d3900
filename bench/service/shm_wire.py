#!/usr/bin/env python3
"""What shared memory saves (issue 35): spmv and a short solve on an n x n 2-D Laplacian (n^2
rows, 1M by default) from the Python client over TCP (bins), over the Unix socket with bins, and
over the Unix socket through a shared-memory region. Starts its own krylovd (listening on both):

    python3 bench/service/shm_wire.py [--krylovd build/bin/krylovd] [--n 1000] [--calls 10]

Prints, per path, the median client wall time of a call and the server's own time_ms (the work,
transfers to and from the device included), and beside them the host's memcpy rate for a vector
of that size: the wire's share is the wall minus the server's time.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, "client/python")
import krylov  # noqa: E402


def laplacian(n):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    return sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye))


def start(krylovd, directory):
    sock = os.path.join(directory, "krylovd.sock")
    port_file = os.path.join(directory, "port")
    proc = subprocess.Popen([krylovd, "--listen", "127.0.0.1:0", "--listen", "unix:" + sock,
                             "--port-file", port_file, "--log-level", "warn",
                             "--warm-programs", "none", "--cache-dir",
                             os.path.join(directory, "cache")], stdin=subprocess.DEVNULL)
    for _ in range(2400):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return proc, "127.0.0.1:" + open(port_file).read().strip(), "unix:" + sock
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("krylovd did not start")


def measure(kd, op, calls):
    walls, server = [], []
    op(kd)  # untimed: programs, the region's registration
    for _ in range(calls):
        t0 = time.perf_counter()
        ms = op(kd)
        walls.append((time.perf_counter() - t0) * 1e3)
        server.append(ms)
    return float(np.median(walls)), float(np.median(server))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--krylovd", default="build/bin/krylovd")
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--iterations", type=int, default=10, help="of each solve (rtol 0)")
    a = ap.parse_args()
    A = laplacian(a.n)
    rows = A.shape[0]
    x = np.random.default_rng(1).standard_normal(rows)
    tmp = tempfile.mkdtemp(prefix="krylovd-shm-bench-")
    proc, tcp, unix = start(a.krylovd, tmp)
    try:
        with krylov.Client(unix) as kd:
            m = kd.put(A, select="heuristic", reorder="none")
        y_ref = A @ x

        paths = (("tcp bins", tcp, False), ("unix bins", unix, False), ("unix shm", unix, True))
        print(f"{rows} rows, {A.nnz} entries, float64 vectors of {rows * 8 / 1e6:.1f} MB; "
              f"median of {a.calls} calls")
        src = np.random.default_rng(2).standard_normal(rows)
        dst = np.empty_like(src)
        t0 = time.perf_counter()
        for _ in range(20):
            np.copyto(dst, src)
        copy_ms = (time.perf_counter() - t0) / 20 * 1e3
        print(f"memcpy of one vector: {copy_ms:.2f} ms ({rows * 8 / copy_ms / 1e6:.1f} GB/s)")
        for what in ("spmv", "solve"):
            for name, address, shm in paths:
                with krylov.Client(address, shm=shm) as kd:
                    if what == "spmv":
                        # as kd.spmv does it (one copy in and out of the region), through call():
                        # kd.spmv returns y alone, and the server's time_ms is wanted too
                        def op(kd):
                            params = {"id": m.id, "x": krylov._rpc.Bin(x)}
                            if kd.shm and kd._arena.reserve(2 * rows * 8 + 64):
                                region = kd._arena.region
                                np.frombuffer(region.map, "<f8", rows)[:] = x
                                params["x"] = {"shm": region.id, "offset": 0, "bytes": rows * 8}
                                params["out"] = {"shm": region.id, "offset": rows * 8,
                                                 "bytes": rows * 8}
                                r = kd.call("spmv", params)
                                y = np.frombuffer(region.map, "<f8", rows, rows * 8).copy()
                            else:
                                r = kd.call("spmv", params)
                                y = np.frombuffer(r["y"], "<f8")
                            assert np.max(np.abs(y - y_ref)) < 1e-9
                            return r["time_ms"]
                    else:
                        def op(kd):
                            r = kd.solve(m.id, x, rtol=0.0, maxiter=a.iterations)
                            return r.time_ms
                    wall, server = measure(kd, op, a.calls)
                    used = "shm" if kd.shm and kd._arena.region is not None else "bins"
                    print(f"{what:5s} {name:10s} ({used:4s}): client {wall:8.2f} ms  server "
                          f"{server:8.2f} ms  wire and client {wall - server:7.2f} ms")
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
