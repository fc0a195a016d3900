#!/usr/bin/env python3
"""Start-up and the first request (issue 16 item 3, issue 32), as a user meets them.

Starts krylovd three times: (1) with an empty PoCL kernel cache (POCL_CACHE_DIR, a fresh
directory; --pocl-cache KEEP uses yours instead) and an empty --cache-dir, (2) with PoCL's cache
as the first start left it but an empty --cache-dir, (3) with both as the earlier starts left
them. For each start it prints: the time from exec to the port file (written right before
READY=1; krylovd listens at once and builds its programs in the background), how long the first
server.status took, the time until the warm-up is done (server.status wait_warm), the warm-up's
own report, then the round-trip times of the first and the tenth identical CG solve on a 2-D
Laplacian put after the warm-up (the first solve must cost no more than the tenth + 5%). With
--coverage it then sends one request of every kind (each format's spmv, each method with each
preconditioner, both value types, a product) and prints programs.built_on_request, which must
stay 0: the daemon's log (--log-level info) names any program built on a request.

    PYTHONPATH=client/python python3 bench/service/startup.py --bin build/bin [--device gpu] [--n 256]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

import krylov

FORMATS = ["csr_scalar", "csr_vector", "csr_adaptive", "ell", "ellpack_r", "sell_c_sigma", "hyb",
           "coo", "tiled"]


def laplacian_2d(n):
    one = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    eye = sp.identity(n)
    return (sp.kron(one, eye) + sp.kron(eye, one)).tocsr()


def start(args, state, cache, pocl, log):
    port_file = os.path.join(state, "..", "port")
    if os.path.exists(port_file):
        os.unlink(port_file)
    argv = [os.path.join(args.bin, "krylovd"), "--listen", "127.0.0.1:0", "--port-file", port_file,
            "--state-dir", state, "--cache-dir", cache, "--device", args.device,
            "--log-level", "info", "--warm-programs", args.warm,
            "--warm-threads", str(args.warm_threads)]
    env = dict(os.environ)
    if pocl is not None:
        env["POCL_CACHE_DIR"] = pocl
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stderr=log, env=env)
    while not (os.path.exists(port_file) and open(port_file).read().strip()):
        if proc.poll() is not None:
            sys.exit(f"krylovd exited ({proc.returncode}); see {log.name}")
        time.sleep(0.002)
    ready = time.monotonic() - t0
    return proc, f"127.0.0.1:{int(open(port_file).read())}", ready, t0


def solves(kd, A, count):
    info = kd.put(A)
    b = np.ones(A.shape[0])
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        res = kd.solve(info, b, method="cg", rtol=1e-8)
        times.append(time.perf_counter() - t0)
    return times, res.iterations


def coverage(kd, A):
    """One request of every kind; returns the requests the server refused (name, message)."""
    refused = []
    rng = np.random.default_rng(1)
    x = rng.uniform(-1, 1, A.shape[0])
    solvers = kd.status().raw["solvers"]
    for dtype in ("float64", "float32"):
        for fmt in FORMATS:
            try:
                kd.spmv(kd.put(A, dtype=dtype, format=fmt, name=f"{fmt}-{dtype}"), x)
            except krylov.errors.KrylovError as e:
                refused.append((f"spmv {fmt} {dtype}", str(e)))
        info = kd.put(A, dtype=dtype)
        for method in solvers["methods"]:
            for pc in ["none"] + list(solvers["preconditioners"]):
                try:
                    kd.solve(info, np.stack([x, -x], axis=1), method=method, preconditioner=pc,
                             rtol=1e-4, maxiter=200)
                except krylov.errors.KrylovError as e:
                    refused.append((f"solve {method}+{pc} {dtype}", str(e)))
        try:
            kd.multiply(info, info)
        except krylov.errors.KrylovError as e:
            refused.append((f"multiply {dtype}", str(e)))
    return refused


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default="build/bin")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--n", type=int, default=256, help="grid side of the 2-D Laplacian")
    ap.add_argument("--solves", type=int, default=10)
    ap.add_argument("--warm", default="all", help="--warm-programs for both starts")
    ap.add_argument("--warm-threads", type=int, default=0, help="--warm-threads (0: automatic)")
    ap.add_argument("--coverage", action="store_true")
    ap.add_argument("--keep", help="state directory to use and keep (default: a temporary one)")
    ap.add_argument("--pocl-cache", default="fresh",
                    help="fresh: PoCL's kernel cache starts empty (default); keep: the user's; "
                         "or a directory (a PoCL cache an earlier run filled: the empty-PoCL "
                         "start is left out)")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="krylovd-startup-")
    state = args.keep or os.path.join(work, "state")
    pocl = {"fresh": os.path.join(work, "pocl"), "keep": None}.get(args.pocl_cache,
                                                                    args.pocl_cache)
    A = laplacian_2d(args.n)
    report = {"device": None, "rows": A.shape[0], "nnz": A.nnz, "starts": []}
    try:
        starts = [("empty PoCL cache, empty --cache-dir", "cache1"),
                  ("warm PoCL cache, empty --cache-dir", "cache2"),
                  ("warm PoCL cache, warm --cache-dir", "cache2")]
        if args.pocl_cache != "fresh":
            starts = starts[1:]
        for which, cache in starts:
            with open(os.path.join(work, "krylovd.log"), "a") as log:
                proc, address, ready, t0 = start(args, state, os.path.join(work, cache), pocl,
                                                 log)
            with krylov.Client(address) as kd:
                s0 = time.monotonic()
                st = kd.status()
                status_ms = (time.monotonic() - s0) * 1e3
                warm_at_listen = dict(st.warm_up)
                report["device"] = st.device.get("name")
                kd.status(wait_warm=True)
                warm_s = time.monotonic() - t0
                times, iters = solves(kd, A, args.solves)
                programs = kd.status().raw["programs"]
                row = {"start": which, "listen_s": round(ready, 3),
                       "first_status_ms": round(status_ms, 2),
                       "built_at_first_status": f"{warm_at_listen.get('built')}/"
                                                f"{warm_at_listen.get('total')}",
                       "warm_s": round(warm_s, 2),
                       "first_solve_ms": round(times[0] * 1e3, 2),
                       "tenth_solve_ms": round(times[-1] * 1e3, 2),
                       "first_over_tenth": round(times[0] / times[-1], 3),
                       "median_solve_ms": round(float(np.median(times)) * 1e3, 2),
                       "iterations": iters, "programs": programs}
                if args.coverage and which.startswith("warm"):
                    row["refused"] = coverage(kd, A)
                    row["built_on_request_after_coverage"] = \
                        kd.status().raw["programs"]["built_on_request"]
                report["starts"].append(row)
            proc.terminate()
            proc.wait(timeout=120)
        print(json.dumps(report, indent=1))
        print(f"log: {os.path.join(work, 'krylovd.log')}", file=sys.stderr)
    finally:
        if args.keep is None:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
