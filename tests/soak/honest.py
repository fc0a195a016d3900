"""The soak's honest clients: puts, SpMVs, solves and drops, each answer checked on the host.

An answer is *wrong* when it differs from what numpy / SciPy compute from the same inputs beyond
the bound the arithmetic allows, and *lost* when no answer comes within LOST_AFTER_S (BUSY is a
legitimate answer while hostile clients fill the queue: the request is sent again after a pause,
and only the final answer counts). A connection the daemon closes on an honest client is lost too.
"""

import threading
import time

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import wire

LOST_AFTER_S = 120.0
KINDS = ("put", "spmv", "solve", "drop", "info")


class Stats:
    """Counters shared by every client thread; the sampler reads a snapshot each interval."""

    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []  # (time, kind, message): the first few, for the report

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n

    def fail(self, key, message):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1
            if len(self.failures) < 50:
                self.failures.append((time.monotonic(), key, message))

    def snapshot(self):
        with self.lock:
            return dict(self.counts)


class Wrong(Exception):
    pass


def spmv_bound(a, x, eps):
    """|y - A x| may reach this per row for any summation order: (row nnz + 2) eps (|A| |x|)."""
    row_nnz = np.diff(a.indptr).astype(np.float64)
    return (row_nnz + 2.0) * eps * (abs(a) @ np.abs(x)) + 1e-300


class Honest:
    """One honest client: its own connection and generator, the shared matrices it may use."""

    def __init__(self, port, shared, stats, rng, stop, keep=False):
        self.port, self.shared, self.stats, self.rng, self.stop = port, shared, stats, rng, stop
        self.keep = keep  # keep what it puts (a leak on purpose: soak.py --no-drop)
        self.conn = None

    def call(self, method, params):
        deadline = time.monotonic() + LOST_AFTER_S
        pause = 0.02
        while True:
            if self.conn is None:
                self.conn = wire.Conn(self.port)
            try:
                err, res = self.conn.call(method, params, max(1.0, deadline - time.monotonic()))
            except (wire.Closed, wire.Timeout):
                self.conn.close()
                self.conn = None
                raise
            if err is None or err.get("code") != "BUSY":
                return err, res
            self.stats.add("busy")
            if time.monotonic() + pause > deadline or self.stop.is_set():
                raise wire.Timeout(f"{method}: BUSY for {LOST_AFTER_S:.0f} s")
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def ok(self, method, params):
        err, res = self.call(method, params)
        if err is not None:
            raise Wrong(f"{method}: {err.get('code')}: {err.get('message')}")
        return res

    # -- the operations --------------------------------------------------------------------------

    def spmv(self, a, mid, dtype):
        wt = "<f8" if dtype == "float64" else "<f4"
        x = self.rng.standard_normal(a.shape[1]).astype(wt)
        res = self.ok("spmv", {"id": mid, "x": x.tobytes(), "dtype": dtype})
        y = np.frombuffer(res["y"], wt).astype(np.float64)
        ref = a @ x.astype(np.float64)
        eps = np.finfo(np.float64 if dtype == "float64" else np.float32).eps
        if y.shape != ref.shape:
            raise Wrong(f"spmv: {y.shape[0]} values for {ref.shape[0]} rows")
        # the device rounds A to the dtype too: the bound covers A's and x's rounding
        bad = np.abs(y - ref) > 2 * spmv_bound(a, x.astype(np.float64), eps)
        if bad.any():
            i = int(np.argmax(bad))
            raise Wrong(f"spmv {mid}: row {i}: {y[i]!r} != {ref[i]!r} ({int(bad.sum())} rows off)")
        self.stats.add("spmv")

    def solve(self):
        a, mid, kind = self.shared.pick_solve(self.rng)
        n = a.shape[0]
        k = int(self.rng.choice([1, 1, 2]))
        dtype = "float32" if kind == "lap" and self.rng.random() < 0.25 else "float64"
        wt = "<f8" if dtype == "float64" else "<f4"
        rtol = 1e-8 if dtype == "float64" else 1e-4
        b = self.rng.standard_normal((n, k)).astype(wt)
        params = {"id": mid, "b": b.tobytes(order="F"), "dtype": dtype, "rtol": rtol,
                  "method": "pcg" if kind == "bus" else "cg"}
        if k > 1:
            params["nrhs"] = k
        if self.rng.random() < 0.3:
            params["x0"] = self.rng.standard_normal((n, k)).astype(wt).tobytes(order="F")
        res = self.ok("solve", params)
        x = np.frombuffer(res["x"], wt).astype(np.float64).reshape((n, k), order="F")
        status = res["status"] if k > 1 else [res["status"]]
        for j in range(k):
            if status[j] != "converged":
                raise Wrong(f"solve {mid} rhs {j}: status {status[j]}")
            bj = b[:, j].astype(np.float64)
            rel = np.linalg.norm(bj - a @ x[:, j]) / np.linalg.norm(bj)
            # the daemon confirmed ||b - A x|| <= rtol ||b|| on the device; the host's sum rounds
            # differently, by far less than this margin
            if not rel <= 2 * rtol:
                raise Wrong(f"solve {mid} rhs {j}: host relative residual {rel:.3e} > 2 * {rtol:g}")
            if kind == "lap":  # well conditioned (cond ~ 80): x itself must match SciPy's
                ref = self.shared.lap_lu.solve(bj)
                err = np.linalg.norm(x[:, j] - ref) / np.linalg.norm(ref)
                if not err <= 1e4 * rtol:
                    raise Wrong(f"solve {mid} rhs {j}: ||x - x_scipy|| / ||x_scipy|| = {err:.3e}")
        self.stats.add("solve")

    def put_use_drop(self, dtype=None):
        a, dtype = random_matrix(self.rng, dtype)
        wt = "<f8" if dtype == "float64" else "<f4"
        a.data = a.data.astype(wt).astype(np.float64)
        res = self.ok("matrix.put", {
            "rows": a.shape[0], "cols": a.shape[1], "indptr": wire.i32(a.indptr),
            "indices": wire.i32(a.indices), "values": np.asarray(a.data, wt).tobytes(),
            "dtype": dtype, "select": "heuristic"})
        if (res["rows"], res["cols"], res["nnz"]) != (a.shape[0], a.shape[1], a.nnz):
            raise Wrong(f"put: {res['rows']}x{res['cols']} nnz {res['nnz']}, sent "
                        f"{a.shape[0]}x{a.shape[1]} nnz {a.nnz}")
        self.stats.add("put")
        mid = res["id"]
        for _ in range(int(self.rng.integers(1, 4))):
            self.spmv(a, mid, dtype)
        if self.keep:
            return
        self.ok("matrix.drop", {"id": mid})
        self.stats.add("drop")
        err, _ = self.call("matrix.info", {"id": mid})
        if err is None or err.get("code") != "NOT_FOUND":
            raise Wrong(f"matrix.info after drop of {mid}: {err} (expected NOT_FOUND)")
        self.stats.add("info")

    def run(self):
        while not self.stop.is_set():
            r = self.rng.random()
            kind = "spmv" if r < 0.5 else "solve" if r < 0.75 else "put"
            try:
                if kind == "spmv":
                    a, mid = self.shared.pick_spmv(self.rng)
                    self.spmv(a, mid, "float64")
                elif kind == "solve":
                    self.solve()
                else:
                    self.put_use_drop()
            except Wrong as e:
                self.stats.fail("wrong", str(e))
            except (wire.Closed, wire.Timeout, OSError) as e:
                if not self.stop.is_set():
                    self.stats.fail("lost", f"{kind}: {e}")
        if self.conn is not None:
            self.conn.close()


def random_matrix(rng, dtype=None):
    """A fresh random matrix (so a new id, a new state file): shapes that break naive code turn up
    (empty rows, a dense row, 1 x 1), float32 now and then."""
    shape = rng.choice(["small", "tiny", "dense_row"], p=[0.8, 0.1, 0.1])
    if shape == "tiny":
        rows = cols = 1
        a = sp.csr_matrix(np.array([[rng.standard_normal()]]))
    else:
        rows, cols = (int(v) for v in rng.integers(2, 2500, size=2))
        a = sp.random(rows, cols, density=min(1.0, 6.0 / cols), format="lil", random_state=rng,
                      data_rvs=rng.standard_normal)
        if shape == "dense_row":
            a[int(rng.integers(rows)), :] = rng.standard_normal(cols)
        a = a.tocsr()
    a.sum_duplicates()
    a.sort_indices()
    return a, dtype or ("float32" if rng.random() < 0.2 else "float64")


class Shared:
    """The long-lived matrices (put once before the run, never dropped) and their host copies."""

    def __init__(self):
        self.spmv_set = []  # (csr, id)
        self.lap = self.lap_id = self.lap_lu = None
        self.bus = self.bus_id = None

    def pick_spmv(self, rng):
        return self.spmv_set[int(rng.integers(len(self.spmv_set)))]

    def pick_solve(self, rng):
        if rng.random() < 0.7:
            return self.lap, self.lap_id, "lap"
        return self.bus, self.bus_id, "bus"


def laplacian(m, shift):
    """The 2-D 5-point Laplacian on an m x m grid plus shift * I: SPD, cond ~ 8 / shift."""
    t = sp.diags([-np.ones(m - 1), 2 * np.ones(m), -np.ones(m - 1)], [-1, 0, 1])
    i = sp.identity(m)
    a = (sp.kron(t, i) + sp.kron(i, t) + shift * sp.identity(m * m)).tocsr()
    a.sort_indices()
    return a


def lu(a):
    return spla.splu(a.tocsc())
