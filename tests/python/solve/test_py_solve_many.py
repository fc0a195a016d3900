"""solve.batch end to end (docs/PROTOCOL.md, "solve.batch"): many resident matrices of their own
patterns and sizes solved in one request, against a real krylovd on loopback, the requests as
msgpack through tests/python/lib/kd_rpc.py's raw client (and the Python client's solve_many).

- one request of six items on five different patterns and sizes (1x1, 7 rows with an irregular
  pattern and no empty row, a 10x10 Laplacian's 100 rows, 494_bus's pattern, a 300-row random
  one; one matrix named twice with two right-hand sides), cg and cg + jacobi in float64, cg in
  float32, bicgstab and gmres on nonsymmetric ones, with x0 on some: each item's x against
  SciPy's spsolve, its true residual ||b - A x|| / ||b|| computed here within rtol, its
  iteration count equal (within 1) to a `solve` of that item alone (gmres: within 10% + 1, the
  batch orthogonalises with modified Gram-Schmidt, the single solve classically) and, for plain
  cg, within 1 of SciPy's cg;
- an unknown id, a b of the wrong length, a NaN in b and a batched matrix among good items: each
  its own status or error entry, the good ones exactly as in a request without them;
- refusals before anything is allocated: too many items, the items' rows over --max-rows, their
  nonzeros over --max-nnz, malformed items; methods a batch does not run;
- the deadline (timeout_ms) and job.cancel checked between launches;
- owners: an item naming another user's matrix answers NOT_FOUND for that item only;
- the Python client's solve_many and its summary table; the CLI's solve-batch table (a row per
  item, a row per status past --limit) and --json.
"""

import inspect
import os
import shutil
import tempfile
import time
import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import kd_rpc
from kd_daemon import Daemon, laplacian, make_rng, matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


def on_pattern(pattern, symmetric=True, dominance=1.0):
    """Values on pattern's sparsity (its diagonal added): off-diagonals -(0.2 + u), mirrored when
    symmetric, the diagonal dominance x the row's off-diagonal sum + a margin: SPD when
    symmetric."""
    p = sp.csr_matrix(pattern, dtype=float)
    p = sp.csr_matrix(p + sp.identity(p.shape[0]))
    p.sum_duplicates()
    p.sort_indices()
    rows = np.repeat(np.arange(p.shape[0]), np.diff(p.indptr))
    v = -(0.2 + rng.random(p.nnz))
    a = sp.csr_matrix((v, p.indices.copy(), p.indptr.copy()), shape=p.shape)
    if symmetric:
        upper = sp.triu(a, 1)
        a = sp.csr_matrix(upper + upper.T + sp.diags(a.diagonal()))
        a.sort_indices()
        rows = np.repeat(np.arange(a.shape[0]), np.diff(a.indptr))
        v = a.data
    off = np.bincount(rows, weights=np.where(rows == a.indices, 0.0, np.abs(v)),
                      minlength=a.shape[0])
    diag = dominance * off + 0.01 + 0.5 * rng.random(a.shape[0])
    a.data[rows == a.indices] = diag[rows[rows == a.indices]]
    return a


def irregular(n, symmetric=True, dominance=1.0):
    """n rows of 1..n-1 off-diagonal entries each (no empty row, lengths all different)."""
    rows, cols = [], []
    for i in range(n):
        for c in rng.choice(n, size=1 + i % (n - 1), replace=False):
            rows.append(i)
            cols.append(int(c))
    pattern = sp.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(n, n))
    return on_pattern(pattern + (pattern.T if symmetric else 0), symmetric, dominance)


def scipy_cg_count(A, b, rtol):
    count = [0]

    def cb(_xk):
        count[0] += 1

    kw = {"rtol": rtol} if "rtol" in inspect.signature(spla.cg).parameters else {"tol": rtol}
    _, info = spla.cg(A, b, atol=0.0, maxiter=20 * A.shape[0], callback=cb, **kw)
    return info, count[0]


def relres(A, x, b):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


def wire(dtype):
    return "<f8" if dtype == "float64" else "<f4"


def item(mid, b, dtype="float64", x0=None):
    out = {"id": mid, "b": np.asarray(b, wire(dtype)).tobytes()}
    if x0 is not None:
        out["x0"] = np.asarray(x0, wire(dtype)).tobytes()
    return out


def item_x(res_item, dtype="float64"):
    return np.frombuffer(res_item["x"], wire(dtype)).astype(np.float64)


class SolveBatchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.client = kd_rpc.Client(daemon.port)
        bus = scipy.io.mmread(matrix_path("494_bus.mtx")).tocsr()
        cls.spd = [sp.csr_matrix(np.array([[2.5]])), irregular(7), on_pattern(laplacian(10)),
                   on_pattern(bus), on_pattern(sp.random(300, 300, 0.01, random_state=7))]
        cls.nonsym = [sp.csr_matrix(np.array([[-1.5]])), irregular(7, False, 1.1),
                      on_pattern(laplacian(10), False, 1.1),
                      on_pattern(sp.random(300, 300, 0.01, random_state=9), False, 1.1)]

    @classmethod
    def tearDownClass(cls):
        cls.client.close()

    def put_all(self, mats, dtype="float64"):
        return [self.client.put_csr(m, dtype=dtype)["id"] for m in mats]

    def check(self, name, mats, method, pre, dtype="float64", rtol=1e-10, with_x0=False):
        ids = self.put_all(mats, dtype)
        # one matrix twice: two items, two right-hand sides
        order = list(range(len(mats))) + [len(mats) - 1]
        bs = [rng.uniform(-1, 1, mats[i].shape[0]) for i in order]
        x0s = [rng.uniform(-1, 1, mats[i].shape[0]) if with_x0 and k % 2 == 0 else None
               for k, i in enumerate(order)]
        items = [item(ids[i], b, dtype, x0) for i, b, x0 in zip(order, bs, x0s)]
        res = self.client.call("solve.batch", items=items, method=method, preconditioner=pre,
                               rtol=rtol, dtype=dtype)
        self.assertEqual((res["count"], res["failed"]), (len(items), 0))
        self.assertEqual(res["converged"], len(items), f"{name}: {res['items']}")
        self.assertGreaterEqual(res["groups"], 1)
        self.assertLessEqual(res["groups"], 5)  # one dtype: the local classes and the global one
        worst = 0
        for k, (i, b) in enumerate(zip(order, bs)):
            A, got = mats[i], res["items"][k]
            x = item_x(got, dtype)
            self.assertEqual(got["status"], "converged", f"{name} item {k}")
            truth = relres(A, x, b)
            self.assertLessEqual(truth, (1.000001 if dtype == "float64" else 50) * rtol,
                                 f"{name} item {k}")
            self.assertLess(abs(got["relative_residual"] - truth), 0.05 * truth + 1e-14
                            if dtype == "float64" else 1.0)
            ref = spla.spsolve(sp.csc_matrix(A), b)
            cond = np.linalg.cond(A.toarray())
            self.assertLessEqual(np.linalg.norm(x - ref) / np.linalg.norm(ref),
                                 2 * cond * truth + 1e-12, f"{name} item {k} vs spsolve")
            x1, alone = self.client.solve(ids[i], b, dtype=dtype, method=method,
                                          preconditioner=pre, rtol=rtol, x0=x0s[k])
            self.assertEqual(alone["status"], "converged")
            diff = abs(got["iterations"] - alone["iterations"])
            allowed = 1 + alone["iterations"] // 10 if method == "gmres" else 1
            if dtype == "float32":
                allowed = 1 + alone["iterations"] // 20
            self.assertLessEqual(diff, allowed, f"{name} item {k} ({A.shape[0]} rows): "
                                 f"solve.batch {got['iterations']}, alone {alone['iterations']}")
            worst = max(worst, diff)
            if method == "cg" and pre == "none" and dtype == "float64" and x0s[k] is None:
                info, count = scipy_cg_count(A, b, rtol)
                self.assertEqual(info, 0)
                self.assertLessEqual(abs(got["iterations"] - count), 1,
                                     f"{name} item {k}: SciPy cg {count}")
        print(f"  {name}: {len(items)} items in {res['groups']} group(s), {res['launches']} "
              f"launches, |solve.batch - alone| <= {worst} iterations")
        return res

    def test_patterns_and_sizes(self):
        self.check("spd cg", self.spd, "cg", "none")
        self.check("spd cg+jacobi x0", self.spd, "cg", "jacobi", with_x0=True)
        self.check("spd cg float32", self.spd, "cg", "jacobi", dtype="float32", rtol=1e-4)
        self.check("nonsym bicgstab", self.nonsym, "bicgstab", "jacobi", with_x0=True)
        self.check("nonsym gmres", self.nonsym, "gmres", "none")

    def test_mixed_dtypes(self):
        """Items on float32 and float64 matrices in one request: one group per dtype."""
        a32 = self.client.put_csr(self.spd[2], dtype="float32")["id"]
        a64 = self.client.put_csr(self.spd[3])["id"]
        b32, b64 = rng.uniform(-1, 1, 100), rng.uniform(-1, 1, 494)
        res = self.client.call("solve.batch", items=[item(a32, b32), item(a64, b64)], rtol=1e-5)
        self.assertEqual(res["converged"], 2, res["items"])
        self.assertEqual(res["groups"], 2)
        self.assertLessEqual(relres(self.spd[2], item_x(res["items"][0]), b32), 50 * 1e-5)
        self.assertLessEqual(relres(self.spd[3], item_x(res["items"][1]), b64), 1.000001e-5)

    def test_bad_items_among_good(self):
        ids = self.put_all(self.spd)
        bs = [rng.uniform(-1, 1, m.shape[0]) for m in self.spd]
        good = [item(i, b) for i, b in zip(ids, bs)]
        clean = self.client.call("solve.batch", items=good, rtol=1e-10)
        nan_b = bs[2].copy()
        nan_b[17] = np.nan
        batch_id = self.client.call(
            "matrix.put", rows=1, cols=1, batch=2, indptr=np.array([0, 1], "<i4").tobytes(),
            indices=np.array([0], "<i4").tobytes(),
            values=np.array([2.0, 3.0], "<f8").tobytes())["id"]
        mixed = [good[0], item("0123456789abcdef0123456789abcdef", bs[1]), good[1],
                 item(ids[3], bs[3][:-1]), good[2], item(ids[2], nan_b), good[3],
                 item(batch_id, [1.0, 1.0]), good[4]]
        res = self.client.call("solve.batch", items=mixed, rtol=1e-10)
        got = res["items"]
        self.assertEqual((res["count"], res["failed"], res["converged"]), (9, 3, 5))
        self.assertEqual((got[1]["status"], got[1]["error"]), ("error", "NOT_FOUND"))
        self.assertIn("0123456789abcdef0123456789abcdef", got[1]["message"])
        self.assertEqual((got[3]["status"], got[3]["error"]), ("error", "BAD_REQUEST"))
        self.assertIn("b has 493 values but matrix", got[3]["message"])
        self.assertEqual(got[5]["status"], "non_finite")
        self.assertIn("system 5", got[5]["message"])
        self.assertIn("NaN", got[5]["message"])
        self.assertEqual((got[7]["status"], got[7]["error"]), ("error", "BAD_REQUEST"))
        self.assertIn("batch of 2 systems", got[7]["message"])
        for k, g in zip((0, 2, 4, 6, 8), range(5)):
            self.assertEqual(got[k]["status"], "converged")
            self.assertEqual(got[k]["iterations"], clean["items"][g]["iterations"])
            np.testing.assert_array_equal(item_x(got[k]), item_x(clean["items"][g]))
            self.assertLessEqual(relres(self.spd[g], item_x(got[k]), bs[g]), 1.000001e-10)
        # every item failing its checks is still an answer, with no solve at all
        res = self.client.call("solve.batch", items=[mixed[1], mixed[3]])
        self.assertEqual((res["failed"], res["groups"], res["launches"]), (2, 0, 0))

    def expect_bad(self, code, fragment, **params):
        with self.assertRaises(kd_rpc.RpcError) as ctx:
            self.client.call("solve.batch", **params)
        self.assertEqual(ctx.exception.code, code, ctx.exception.message)
        self.assertIn(fragment, ctx.exception.message)
        self.assertIn("version", self.client.call("server.status"))

    def test_refusals(self):
        mid = self.client.put_csr(self.spd[1])["id"]
        one = item(mid, np.ones(7))
        self.expect_bad("TOO_LARGE", "at most 16384", items=[one] * 16385)
        self.expect_bad("BAD_REQUEST", "non-empty array", items=[])
        self.expect_bad("BAD_REQUEST", "missing parameter 'items'", rtol=1e-8)
        self.expect_bad("BAD_REQUEST", "items[1] must be a map", items=[one, 3])
        self.expect_bad("BAD_REQUEST", "items[0]: unknown key 'c'", items=[dict(one, c=1)])
        self.expect_bad("BAD_REQUEST", "items[0] has no b", items=[{"id": mid}])
        self.expect_bad("BAD_REQUEST", "items[0].id is not 32 hex", items=[dict(one, id="xyz")])
        self.expect_bad("BAD_REQUEST", "items[0].b: bin of 7 bytes", items=[dict(one, b=b"1234567")])
        self.expect_bad("BAD_REQUEST", "items[0].x0 has 6 values but its b 7",
                        items=[dict(one, x0=np.ones(6, "<f8").tobytes())])
        self.expect_bad("BAD_REQUEST", "cg, bicgstab or gmres", items=[one], method="minres")
        self.expect_bad("BAD_REQUEST", "jacobi or none", items=[one], preconditioner="ilu0")
        self.expect_bad("BAD_REQUEST", "unknown parameter 'nrhs'", items=[one], nrhs=2)

    def test_limits_before_allocation(self):
        """A server with small limits refuses the request as a whole, before any solve."""
        with Daemon("--max-rows", "900", "--max-nnz", "3000") as d:
            c = kd_rpc.Client(d.port)
            ids = [c.put_csr(m)["id"] for m in self.spd[2:4]]  # 100 and 494 rows
            lap, bus = self.spd[2], self.spd[3]
            with self.assertRaises(kd_rpc.RpcError) as ctx:
                c.call("solve.batch", items=[item(ids[1], np.ones(494))] * 2)
            self.assertEqual(ctx.exception.code, "TOO_LARGE")
            self.assertIn("988 values in all, over this server's limit of 900", ctx.exception.message)
            # rows within the limit (894), nonzeros over it: 4 x the Laplacian's + 494_bus's
            items = [item(ids[0], np.ones(100))] * 4
            self.assertGreater(4 * lap.nnz + bus.nnz, 3000)
            with self.assertRaises(kd_rpc.RpcError) as ctx:
                c.call("solve.batch", items=items[:1] + [item(ids[1], np.ones(494))] + items[1:])
            self.assertEqual(ctx.exception.code, "TOO_LARGE")
            self.assertIn("nonzeros in all, over this server's limit of 3000", ctx.exception.message)
            res = c.call("solve.batch", items=items[:1] + [item(ids[1], np.ones(494))])
            self.assertEqual(res["converged"], 2)
            c.close()

    def test_deadline_between_launches(self):
        """GMRES with rtol 0 never stops before maxiter (each cycle starts from the true residual,
        never exactly 0): the solve runs launch after launch until timeout_ms passes."""
        mid = self.client.put_csr(self.spd[3])["id"]
        t0 = time.monotonic()
        with self.assertRaises(kd_rpc.RpcError) as ctx:
            self.client.call("solve.batch", items=[item(mid, rng.uniform(-1, 1, 494))] * 3,
                             method="gmres", rtol=0.0, maxiter=10 ** 9, timeout_ms=300)
        self.assertLess(time.monotonic() - t0, 150)  # a cold PoCL compiles the first launch
        self.assertEqual(ctx.exception.code, "TIMEOUT", ctx.exception.message)
        self.assertIn("version", self.client.call("server.status"))

    def test_cancel_between_launches(self):
        """job.cancel stops a running solve.batch at its next launch: CANCELLED, then the server
        serves the next request."""
        import msgpack

        mid = self.client.put_csr(self.spd[3])["id"]
        c = self.client
        solve = [0, 900, "solve.batch", [{"items": [item(mid, rng.uniform(-1, 1, 494))] * 2,
                                          "method": "gmres", "rtol": 0.0, "maxiter": 10 ** 9}]]
        c.sock.sendall(msgpack.packb(solve, use_bin_type=True))
        time.sleep(0.5)  # running by now: a queued one would be answered CANCELLED at once too
        c.sock.sendall(msgpack.packb([0, 901, "job.cancel", [{"msgid": 900}]], use_bin_type=True))
        got = {}
        while len(got) < 2:
            for msg in c.unpacker:
                if msg[0] == 1:
                    got[msg[1]] = msg
            if len(got) < 2:
                c.unpacker.feed(c.sock.recv(1 << 20))
        self.assertIsNone(got[901][2])
        self.assertEqual(got[900][2]["code"], "CANCELLED", got[900][2])
        self.assertIn("version", self.client.call("server.status"))

    def test_python_client(self):
        import krylov

        with krylov.Client(daemon.address) as kd:
            mats = [self.spd[0], self.spd[1], self.spd[2], self.spd[3]]
            infos = [kd.put(m) for m in mats[1:]]
            bs = [rng.uniform(-1, 1, m.shape[0]) for m in mats]
            # a scipy matrix (uploaded first), MatrixInfo objects, an id, an x0
            res = kd.solve_many([(mats[0], bs[0]), (infos[0], bs[1]), (infos[1].id, bs[2]),
                                 (infos[2], bs[3], np.zeros(494)),
                                 ("f" * 32, bs[1])], rtol=1e-9, history=True)
            self.assertIsInstance(res, krylov.ManySolveResult)
            self.assertEqual((len(res), res.converged_count, res.failed), (5, 4, 1))
            for k in range(4):
                self.assertTrue(res[k].converged)
                self.assertEqual(res[k].x.shape, (mats[k].shape[0],))
                self.assertLessEqual(relres(mats[k], res[k].x, bs[k]), 1.000001e-9)
                self.assertEqual(len(res[k].history), res[k].iterations + 1)
            self.assertEqual(res[4].status, "error")
            self.assertIsInstance(res[4].error, krylov.NotFound)
            table = res.summary()
            self.assertIn("converged", table)
            self.assertIn("NOT_FOUND", table)
            self.assertEqual(len(table.splitlines()), 6)
            # many items: the table condenses to a line per status
            many = kd.solve_many([(infos[1], rng.uniform(-1, 1, 100)) for _ in range(30)],
                                 method="bicgstab", dtype="float32", rtol=1e-4)
            self.assertTrue(many.converged)
            self.assertEqual(many[0].x.dtype, np.float32)
            self.assertEqual(len(many.summary().splitlines()), 2)
            with self.assertRaises(ValueError):
                kd.solve_many([(infos[0], np.ones((7, 2)))])
            with self.assertRaises(ValueError):
                kd.solve_many([])
            with self.assertRaises(krylov.BadRequest):
                kd.solve_many([(infos[0], bs[1])], method="minres")

    def test_cli(self):
        """krylov solve-batch: a row per item (an unknown id's error among them, exit status 3),
        a row per status past --limit, and --json with each item's numbers."""
        import json
        import subprocess

        krylov = os.path.join(os.environ.get("KD_BIN_DIR", ""), "krylov")
        ids = self.put_all(self.spd[1:3])

        def run(*args):
            return subprocess.run([krylov, "--server", daemon.address, "solve-batch", *args],
                                  capture_output=True, text=True, timeout=120)

        out = run(ids[0], ids[1], "f" * 32, ids[1] + ":random", "--rtol", "1e-10")
        self.assertEqual(out.returncode, 3, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len(lines), 2 + 4 + 1, out.stdout)
        self.assertIn("NOT_FOUND: no matrix " + "f" * 32, lines[4])
        self.assertEqual(lines[3].split()[1:4], [ids[1], "100", "converged"])
        self.assertIn("4 items: 3 converged, 1 failed their checks", lines[-1])
        out = run(*([ids[0]] * 30), "--method", "bicgstab", "--preconditioner", "jacobi")
        self.assertEqual(out.returncode, 0, out.stderr)
        lines = out.stdout.splitlines()
        self.assertEqual(len(lines), 2 + 1 + 1, out.stdout)  # header, rule, converged, totals
        self.assertEqual(lines[2].split()[:2], ["converged", "30"])
        out = run(ids[0], ids[1], "--json", "--rtol", "1e-9")
        self.assertEqual(out.returncode, 0, out.stderr)
        doc = json.loads(out.stdout)
        self.assertEqual((doc["count"], doc["converged"], doc["failed"]), (2, 2, 0))
        for k, mid in enumerate(ids):
            _, alone = self.client.solve(mid, np.ones(self.spd[1 + k].shape[0]), rtol=1e-9)
            self.assertLessEqual(abs(doc["items"][k]["iterations"] - alone["iterations"]), 1)
            self.assertLessEqual(doc["items"][k]["relative_residual"], 1.000001e-9)


class SolveBatchOwnersTest(unittest.TestCase):
    """An item naming a matrix its user cannot read fails alone, as an unknown id does."""

    def test_owners(self):
        import krylov
        from kd_daemon import token_new

        global rng
        rng = rng if rng is not None else make_rng()
        tmp = tempfile.mkdtemp(prefix="krylovd-solve-batch-auth-")
        try:
            tokens, lines = {}, []
            for name in ("alice", "bob"):
                tokens[name], line = token_new(name, "write")
                lines.append(line)
            auth = os.path.join(tmp, "auth")
            with open(auth, "w") as f:
                f.write("\n".join(lines) + "\n")
            with Daemon("--auth-file", auth) as d:
                A = sp.csr_matrix(laplacian(5) + sp.identity(25))
                B = sp.csr_matrix(laplacian(4) + sp.identity(16))
                with krylov.Client(d.address, user="alice", token=tokens["alice"]) as alice, \
                        krylov.Client(d.address, user="bob", token=tokens["bob"]) as bob:
                    mine = alice.put(A)
                    theirs = bob.put(B)
                    res = alice.solve_many([(mine, np.ones(25)), (theirs.id, np.ones(16))])
                    self.assertTrue(res[0].converged)
                    self.assertIsInstance(res[1].error, krylov.NotFound)
                    self.assertEqual(res[1].message, f"no matrix {theirs.id} on this server")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
