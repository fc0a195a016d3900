#!/usr/bin/env python3
"""Method "direct" against SciPy's spsolve on the same host, in the same run (issue 37;
docs/BENCHMARKS.md, "Direct solves (issue 37)"):

    /usr/bin/python3 bench/service/direct.py [--server HOST:PORT] [--reps 5] [--cached 20]
        [--matrices adder_dcop_05,bayer10,...]

Without --server it starts build/bin/krylovd on a free loopback port (and stops it). For each
real square matrix of tests/matrices that is nonsingular, one right-hand side b = A x_true:

  first   a solve that factors: the client's wall time of kd.solve(method="direct") on a matrix
          just put (the put not counted), median over --reps puts of A * 2^r (the same matrix
          scaled exactly, a new content id each, so a new factor each)
  cached  the client's wall time of a solve with the factor kept, median over --cached solves
  scipy   scipy.sparse.linalg.spsolve(A_csc, b) (SuperLU, which factors every call), median of
          --reps, A converted to CSC beforehand

with the server's own times of the first solve (analysis, factorisation, triangular solves),
its library, the fill nnz(factor) / nnz(A), and the true relative residuals of both answers.

With --steps, a second table: a time step (issue 37 item 2) is kd.put(A_k, like=A_{k-1}) (new
values on the pattern) then a direct solve, which refactors on the like matrix's analysis;
against a fresh factorisation and solve of the same step's system (A_k / 2, exact: a content of
its own, put apart and not counted). Medians over --reps steps, with the server's own analysis +
factorisation and refactorisation times.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as sla

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "client", "python"))
import krylov  # noqa: E402

MATRICES = ["adder_dcop_05", "bayer10", "watt_2", "ani4", "young1c", "arrow", "494_bus"]


def load(name):
    A = scipy.io.mmread(os.path.join(ROOT, "tests", "matrices", name + ".mtx"))
    if np.iscomplexobj(A.data):
        A = A.real  # young1c: its real part
    return sp.csr_matrix(A, dtype=np.float64)


def start_daemon():
    d = tempfile.mkdtemp(prefix="kd-bench-direct-")
    port_file = os.path.join(d, "port")
    proc = subprocess.Popen([os.path.join(ROOT, "build", "bin", "krylovd"), "--listen",
                             "127.0.0.1:0", "--port-file", port_file, "--log-level", "warn"])
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return proc, "127.0.0.1:" + open(port_file).read().strip()
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("krylovd did not start")


def relres(A, b, x):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


def step_values(A, k):
    """A_k: A's pattern, values a_ij (1 + 0.002 k sin(i j + i + j)): symmetric when A is, and
    near enough to A that an SPD A stays SPD over the steps."""
    C = A.tocoo()
    f = 1.0 + 0.002 * k * np.sin(C.row * C.col + C.row + C.col)
    return sp.csr_matrix((C.data * f, (C.row, C.col)), shape=A.shape)


def steps(kd, a, rng):
    print()
    print("| matrix | library | fresh: solve ms (analyze + factor) | step: put like ms | step: "
          "solve ms (refactor) | step solve / fresh solve | step put + solve / fresh solve | "
          "refactored |")
    print("|---|---|---|---|---|---|---|---|")
    for name in a.matrices.split(","):
        A = load(name) * 3.0  # content of its own
        prev = kd.put(A)
        library = kd.solve(prev, A @ np.ones(A.shape[0]), method="direct").direct["solver"]
        fresh, fresh_ms, puts, solves, refactor_ms, refactored = [], [], [], [], [], 0
        for k in range(1, a.reps + 1):
            Ak = step_values(A, k)
            bk = Ak @ rng.uniform(-1, 1, A.shape[0])
            # a fresh factorisation of the same step: its own content (A_k / 2, exact)
            other = kd.put(Ak * 0.5)
            t = time.perf_counter()
            res = kd.solve(other, bk * 0.5, method="direct", rtol=1e-12)
            fresh.append(time.perf_counter() - t)
            fresh_ms.append(res.direct["analyze_ms"] + res.direct["factor_ms"])
            kd.drop(other)
            # the time step: new values on the previous step's pattern, then the solve
            t = time.perf_counter()
            cur = kd.put(Ak, like=prev)
            t1 = time.perf_counter()
            res = kd.solve(cur, bk, method="direct", rtol=1e-12)
            t2 = time.perf_counter()
            assert res.status == "converged", (name, res.message)
            puts.append(t1 - t)
            solves.append(t2 - t1)
            refactor_ms.append(res.direct["factor_ms"])
            refactored += bool(res.direct["refactored"])
            kd.drop(prev)
            prev = cur
        kd.drop(prev)
        f, p, s_ = (np.median(v) * 1e3 for v in (fresh, puts, solves))
        print(f"| {name} | {library} | {f:.2f} ({np.median(fresh_ms):.2f}) | "
              f"{p:.2f} | {s_:.2f} ({np.median(refactor_ms):.2f}) | {s_ / f:.2f} | "
              f"{(p + s_) / f:.2f} | {refactored} of {a.reps} |", flush=True)


AUTO_MATRICES = MATRICES + ["can___24", "dwt_878", "rajat01"]


def median_ms(fn, reps):
    times = []
    for r in range(reps):
        t = time.perf_counter()
        fn(r)
        times.append(time.perf_counter() - t)
    return np.median(times) * 1e3


def auto_table(kd, a, rng):
    print()
    print("| matrix | rows | auto chose (attempts before it) | auto first solve ms | auto again ms "
          "| direct first solve ms | SciPy spsolve ms | auto first / SciPy | residual auto |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in a.auto_matrices.split(","):
        A = load(name)
        b = A @ rng.uniform(-1, 1, A.shape[0])
        last = {}

        def auto_first(r, method="auto"):
            s = 2.0 ** (r + 1)  # exact: the same system, a new content id each
            kid = kd.put(A * s)
            t = time.perf_counter()
            last[method] = kd.solve(kid, b * s, method=method, rtol=1e-12)
            last["t"] = time.perf_counter() - t
            last["id"], last["s"] = kid, s

        firsts = []
        for r in range(a.reps):
            auto_first(r)
            firsts.append(last["t"])
            if r + 1 < a.reps:
                kd.drop(last["id"])
        res = last["auto"]
        again = median_ms(lambda r: kd.solve(last["id"], b * last["s"], method="auto",
                                             rtol=1e-12), a.cached)
        kd.drop(last["id"])
        directs = []
        for r in range(a.reps):
            auto_first(r + a.reps, "direct")
            directs.append(last["t"])
            kd.drop(last["id"])
        Ac = A.tocsc()
        try:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sla.spsolve(Ac, b)
                scipy_ms = median_ms(lambda r: sla.spsolve(Ac, b), a.reps)
        except RuntimeError:  # "Factor is exactly singular"
            scipy_ms = float("nan")
        tried = res.auto.get("tried", [])
        names = ["+".join(x for x in (t["method"], t["preconditioner"]) if x not in ("", "none"))
                 + " " + t["status"] for t in tried]
        chose = res.auto.get("chosen") or res.status
        before = "; ".join(names[:-1]) if res.auto.get("chosen") else "; ".join(names)
        f = np.median(firsts) * 1e3
        d = np.median(directs) * 1e3
        print(f"| {name} | {A.shape[0]} | {chose}{' (' + before + ')' if before else ''} | "
              f"{f:.2f} | {again:.2f} | {d:.2f} | {scipy_ms:.2f} | {f / scipy_ms:.2f} | "
              f"{relres(A, b, res.x):.1e} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--cached", type=int, default=20)
    ap.add_argument("--matrices", default=",".join(MATRICES), help="comma-separated names")
    ap.add_argument("--steps", action="store_true", help="also time steps (put like + solve)")
    ap.add_argument("--auto", action="store_true", help="also time method auto on every matrix")
    ap.add_argument("--auto-only", action="store_true", help="only the --auto table")
    ap.add_argument("--auto-matrices", default=",".join(AUTO_MATRICES))
    a = ap.parse_args()
    proc = None
    address = a.server
    if address is None:
        proc, address = start_daemon()
    rng = np.random.default_rng(37)
    kd = krylov.Client(address)
    if a.auto_only:
        try:
            auto_table(kd, a, rng)
        finally:
            kd.close()
            if proc is not None:
                proc.terminate()
                proc.wait()
        return
    print("| matrix | rows | nnz | library | fill | first solve ms (analyze + factor + solve on "
          "the server) | cached solve ms | SciPy spsolve ms | first / SciPy | cached / SciPy "
          "| residual direct / SciPy |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    try:
        for name in a.matrices.split(","):
            A = load(name)
            b = A @ rng.uniform(-1, 1, A.shape[0])
            firsts, res = [], None
            for r in range(a.reps):
                s = 2.0 ** (r + 1)  # exact: the same system, a new content id (a new factor)
                kid = kd.put(A * s)
                t = time.perf_counter()
                res = kd.solve(kid, b * s, method="direct", rtol=1e-12)
                firsts.append(time.perf_counter() - t)
                assert res.direct["factored"], name
                if r + 1 < a.reps:
                    kd.drop(kid)
            cached = []
            for _ in range(a.cached):
                t = time.perf_counter()
                again = kd.solve(kid, b * s, method="direct", rtol=1e-12)
                cached.append(time.perf_counter() - t)
                assert not again.direct["factored"], name
            kd.drop(kid)
            Ac = A.tocsc()
            sla.spsolve(Ac, b)  # warm
            scipy_t = []
            for _ in range(a.reps):
                t = time.perf_counter()
                xs = sla.spsolve(Ac, b)
                scipy_t.append(time.perf_counter() - t)
            f, c, sc = (np.median(v) * 1e3 for v in (firsts, cached, scipy_t))
            d = res.direct
            print(f"| {name} | {A.shape[0]} | {A.nnz} | {d['solver']} | {d['fill']:.2f} | "
                  f"{f:.2f} ({d['analyze_ms']:.2f} + {d['factor_ms']:.2f} + {d['solve_ms']:.2f}) | "
                  f"{c:.2f} | {sc:.2f} | {f / sc:.2f} | {c / sc:.2f} | "
                  f"{relres(A, b, res.x):.1e} / {relres(A, b, xs):.1e} |", flush=True)
        if a.steps:
            steps(kd, a, rng)
        if a.auto:
            auto_table(kd, a, rng)
    finally:
        kd.close()
        if proc is not None:
            proc.terminate()
            proc.wait()


if __name__ == "__main__":
    main()
