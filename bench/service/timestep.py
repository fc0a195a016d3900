#!/usr/bin/env python3
"""A time step as a user's loop makes it (issue 36's table): new values on the last step's
pattern, then an AMG-CG solve to 1e-8 with x back, through the Python client; per step the client
wall, the put's and the solve's server times (time_ms) and the iterations, median over the steps.

    python3 bench/service/timestep.py [--krylovd build/bin/krylovd | --server unix:PATH]
                                      [--steps 6] [--mode values|like] [MATRIX ...]

MATRIX: lap3d:N or lap2d:N (default lap3d:64 lap2d:1024 lap3d:100). --mode values: the step's
values written into a kd.empty array and sent with put_values (named where they lie); like:
put(A_k, like=A_{k-1}) from a scipy matrix (the client checks the pattern, copies the values into
its region). Each step's matrix is put with `like` on the previous step's and persist "none", so
its first solve refreshes the previous step's hierarchy (a time step's refresh), and the step
before is dropped. b and x live in kd.empty arrays (out=). The first solve on the base matrix
(the AMG setup) is reported apart.
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

HERE = os.path.dirname(os.path.abspath(__file__))


def laplacian(spec):
    kind, n = spec.split(":")
    n = int(n)
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    if kind == "lap2d":
        a = sp.kron(eye, t) + sp.kron(t, eye)
    else:
        a = sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye) + sp.kron(sp.kron(t, eye), eye)
    a = sp.csr_matrix(a)
    a.sort_indices()
    return a


def start(krylovd, directory):
    sock = os.path.join(directory, "krylovd.sock")
    proc = subprocess.Popen([krylovd, "--listen", "unix:" + sock, "--log-level", "warn",
                             "--warm-programs", "none", "--cache-dir",
                             os.path.join(directory, "cache")], stdin=subprocess.DEVNULL)
    for _ in range(2400):
        if os.path.exists(sock):
            return proc, "unix:" + sock
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError("krylovd did not start")


def run(kd, spec, steps, mode):
    A = laplacian(spec)
    n = A.shape[0]
    b = kd.empty(n)
    b[:] = 1.0
    x = kd.empty(n)
    vals = kd.empty(A.nnz)
    prev = kd.put(A, persist="none")
    t0 = time.perf_counter()
    r = kd.solve(prev, b, method="cg", preconditioner="amg", rtol=1e-8, out=x)
    first = (time.perf_counter() - t0) * 1e3
    walls, puts, solves, its, put_walls = [], [], [], [], []
    for k in range(1, steps + 1):
        factor = 1.0 + 0.01 * k
        if mode == "values":
            np.multiply(A.data, factor, out=vals)  # the step's own work, not timed
        else:
            Ak = A.copy()
            Ak.data *= factor
        t0 = time.perf_counter()
        if mode == "values":
            info = kd.put_values(prev, vals, persist="none")
        else:
            info = kd.put(Ak, like=prev, persist="none")
        put_ms = kd.last_time_ms
        t1 = time.perf_counter()
        r = kd.solve(info, b, method="cg", preconditioner="amg", rtol=1e-8, out=x)
        t2 = time.perf_counter()
        walls.append((t2 - t0) * 1e3)
        put_walls.append((t1 - t0) * 1e3)
        puts.append(put_ms)
        solves.append(kd.last_time_ms)
        its.append(r.iterations)
        kd.drop(prev)
        prev = info
    res = np.linalg.norm(b - (A * (1.0 + 0.01 * steps)) @ x) / np.linalg.norm(b)
    print(f"| {spec} | {mode} | {n} | {first:.1f} | {np.median(walls):.2f} | "
          f"{np.median(put_walls):.2f} | {np.median(puts):.2f} | {np.median(solves):.2f} | "
          f"{int(np.median(its))} | {res:.1e} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--krylovd", default=None)
    ap.add_argument("--server", default=None, help="unix:PATH of a running krylovd")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--mode", default="values", choices=("values", "like"))
    ap.add_argument("--client-path", default=os.path.join(HERE, "..", "..", "client", "python"))
    ap.add_argument("matrices", nargs="*", default=["lap3d:64", "lap2d:1024", "lap3d:100"])
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.client_path))
    import krylov

    directory = tempfile.mkdtemp(prefix="kd-timestep-")
    proc = None
    try:
        address = a.server
        if address is None:
            proc, address = start(a.krylovd or os.path.join(HERE, "..", "..", "build", "bin",
                                                             "krylovd"), directory)
        print(f"# {a.steps} steps each; medians; ms; true relative residual of the last step")
        print("| matrix | mode | rows | first solve (setup) | step wall | of it the put | "
              "put server | solve server | its | relres |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        with krylov.Client(address) as kd:
            for spec in a.matrices:
                run(kd, spec, a.steps, a.mode)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
