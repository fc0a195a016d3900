"""New values on a held pattern end to end (docs/PROTOCOL.md, "New values on a held pattern"):
a real krylovd on loopback, the Python client and raw msgpack requests.

- put(A2, like=A1) sends the values alone and makes the matrix a full put of A2 makes: the same
  id (a full put afterwards finds it, created False), the same pattern hash (computed here with
  hashlib and by the server), spmv and a CG solve on it against SciPy (true residual on the host);
- it is kept as the like matrix is: a format forced on A1 stays on A2 where the selection would
  choose another, and A1's reordering;
- A1 is unchanged (its spmv still A1's) and a float32 like matrix keeps float32;
- ResidentOperator.update and Client.update;
- refusals, each with the server serving on: an unknown like id (NOT_FOUND), a wrong number of
  values (BAD_REQUEST naming the expected count), like with indices / mtx / format (BAD_REQUEST),
  a pattern hash that is not A1's (BAD_REQUEST), pattern without like, a float32 dtype for a
  float64 like matrix; the client refuses another pattern locally before sending.
"""

import os
import subprocess
import tempfile
import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
import kd_rpc
from kd_daemon import Daemon, laplacian, shared_daemon
from krylov.content_id import pattern_hash
from krylov.scipy import ResidentOperator

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


def heat(n, dt):
    """I + dt L on an n x n grid (2-D Laplacian L): SPD, its values change with dt."""
    a = sp.csr_matrix(sp.identity(n * n) + dt * laplacian(n))
    a.sum_duplicates()
    return a


def with_values(a, values):
    b = a.copy()
    b.data = np.asarray(values, dtype=a.dtype)
    return b


class LikeTest(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)
        self.raw = kd_rpc.Client(daemon.port)

    def tearDown(self):
        self.kd.close()
        self.raw.close()

    def spmv_ok(self, mid, a, dtype="float64", tol=1e-12):
        x = rng.standard_normal(a.shape[1])
        y = self.kd.spmv(mid, x, dtype=dtype)
        self.assertLess(np.abs(y - a @ x).max(), tol * max(1.0, np.abs(a @ x).max()))

    def test_same_matrix_as_a_full_put(self):
        a1, a2 = heat(30, 0.1), heat(30, 0.37)
        i1 = self.kd.put(a1)
        i2 = self.kd.put(a2, like=i1)
        self.assertTrue(i2.created)
        self.assertNotEqual(i1.id, i2.id)
        want = pattern_hash(a2.shape[0], a2.shape[1], a2.indptr, a2.indices)
        self.assertEqual(i2.pattern, want)
        self.assertEqual(i2.raw.get("like"), i1.id)
        self.assertEqual((i2.rows, i2.cols, i2.nnz, i2.dtype), (900, 900, a2.nnz, "float64"))
        # the same content put whole is the same matrix
        full = self.raw.call("matrix.put", rows=900, cols=900, indptr=a2.indptr.tolist(),
                             indices=a2.indices.tolist(), values=a2.data.tolist(),
                             name="whole")
        self.assertEqual(full["id"], i2.id)
        self.assertFalse(full["created"])
        self.spmv_ok(i2.id, a2)
        self.spmv_ok(i1.id, a1)  # the like matrix is unchanged
        b = rng.standard_normal(900)
        res = self.kd.solve(i2.id, b, method="cg", rtol=1e-10)
        x = res.x
        self.assertEqual(res.status, "converged")
        self.assertLess(np.linalg.norm(b - a2 @ x), 1.01e-10 * np.linalg.norm(b))
        xs = spla.spsolve(sp.csc_matrix(a2), b)
        self.assertLess(np.linalg.norm(x - xs), 1e-7 * np.linalg.norm(xs))

    def test_kept_as_the_like_matrix(self):
        a1 = heat(24, 0.2)
        i1 = self.kd.put(a1, format="ell", reorder="rcm", name="step0")
        self.assertEqual(i1.format, "ell")
        a2 = with_values(a1, a1.data * (1.0 + 0.1 * rng.random(a1.nnz)))
        a2 = (a2 + a2.T) * 0.5  # still SPD-ish and the same pattern
        a2 = sp.csr_matrix(a2)
        a2.sum_duplicates()
        i2 = self.kd.put(a2, like=i1, name="step1")
        self.assertEqual(i2.format, "ell")
        self.assertEqual(i2.reorder, i1.reorder)
        self.assertEqual(i2.name, "step1")
        self.spmv_ok(i2.id, a2)

    def test_device_arrays_shared(self):
        # the second version holds its values (and padding) only; dropping either leaves the
        # other whole, and the pattern's bytes then count in the one left
        for fmt in ("csr_scalar", "sell_c_sigma", "hyb", "tiled"):
            with self.subTest(format=fmt):
                a1 = heat(40, 0.1 + rng.random())
                i1 = self.kd.put(a1, format=fmt, reorder="rcm" if fmt == "hyb" else "none")
                a2 = heat(40, 0.7 + rng.random())
                i2 = self.kd.put(a2, like=i1)
                a3 = heat(40, 1.7 + rng.random())
                i3 = self.kd.put(a3, like=i2)
                b1 = self.kd.info(i1.id).device_bytes
                b2 = self.kd.info(i2.id).device_bytes
                if fmt == "tiled":  # built from the CSR: no sharing
                    self.assertEqual(b2, b1)
                else:
                    self.assertLessEqual(b2 + 4 * a1.nnz, b1)
                self.assertEqual(self.kd.info(i3.id).device_bytes, b2)
                self.kd.drop(i1.id)
                self.spmv_ok(i2.id, a2)
                self.spmv_ok(i3.id, a3)
                self.assertGreaterEqual(self.kd.info(i2.id).device_bytes, b1 if fmt != "tiled" else b2)
                self.kd.drop(i2.id)
                self.spmv_ok(i3.id, a3)
                self.assertGreaterEqual(self.kd.info(i3.id).device_bytes, b1 if fmt != "tiled" else b2)
                res = self.kd.solve(i3.id, np.ones(a3.shape[0]), method="cg", rtol=1e-10)
                self.assertLess(np.linalg.norm(np.ones(a3.shape[0]) - a3 @ res.x),
                                1.01e-10 * np.sqrt(a3.shape[0]))
                self.kd.drop(i3.id)

    def test_non_finite_values_counted(self):
        # as for a full put: counted in stats, and the full put of the same content is the same
        # matrix with the same count
        a1 = heat(12, 0.3)
        i1 = self.kd.put(a1)
        a2 = with_values(a1, a1.data.copy())
        a2.data[5] = np.nan
        a2.data[17] = np.inf
        i2 = self.kd.put(a2, like=i1)
        info = self.raw.call("matrix.info", id=i2.id)
        self.assertEqual(info["stats"]["nonfinite"], 2)
        self.assertEqual(self.raw.call("matrix.info", id=i1.id)["stats"]["nonfinite"], 0)
        full = self.raw.call("matrix.put", rows=144, cols=144, indptr=a2.indptr.tolist(),
                             indices=a2.indices.tolist(), values=a2.data.tolist())
        self.assertEqual(full["id"], i2.id)
        self.assertEqual(full["stats"]["nonfinite"], 2)
        res = self.kd.solve(i2.id, np.ones(144), method="cg")
        self.assertNotEqual(res.status, "converged")
        self.spmv_ok(i1.id, a1)

    def test_reload_shares_with_a_resident_version(self):
        # a version evicted and used again shares its pattern with a resident one, as its put did
        with Daemon("--device-memory", "3M") as d:
            kd = krylov.Client(d.address)
            a1, a2 = heat(60, 0.2), heat(60, 0.9)
            i1 = kd.put(a1, format="csr_scalar", pin=True)
            i2 = kd.put(a2, like=i1)
            b1 = kd.info(i1.id).device_bytes
            self.assertLessEqual(kd.info(i2.id).device_bytes + 4 * a1.nnz, b1)
            fillers = []
            while kd.info(i2.id).resident and len(fillers) < 12:  # until i2 is evicted
                filler = sp.random(3000, 3000, density=0.005, random_state=len(fillers),
                                   format="csr")
                fillers.append(kd.put(filler, format="csr_scalar"))
            self.assertFalse(kd.info(i2.id).resident)
            for f in fillers:
                kd.drop(f.id)
            self.spmv_ok_on(kd, i2.id, a2)  # reloaded
            info = kd.info(i2.id)
            self.assertTrue(info.resident)
            self.assertLessEqual(info.device_bytes + 4 * a1.nnz, b1)
            kd.pin(i1.id, pinned=False)
            kd.drop(i1.id)
            self.spmv_ok_on(kd, i2.id, a2)
            kd.close()

    def spmv_ok_on(self, kd, mid, a):
        x = rng.standard_normal(a.shape[1])
        self.assertLess(np.abs(kd.spmv(mid, x) - a @ x).max(), 1e-12 * max(1.0, np.abs(a @ x).max()))

    def test_float32_like(self):
        a1 = heat(16, 0.5)
        i1 = self.kd.put(a1, dtype="float32")
        a2 = heat(16, 0.9)
        i2 = self.kd.put(a2, like=i1)
        self.assertEqual(i2.dtype, "float32")
        self.spmv_ok(i2.id, a2.astype(np.float32), dtype="float32", tol=1e-5)
        # values sent as float64 under a bare id: converted to the like matrix's float32
        i3 = self.kd.put(heat(16, 1.3), like=i1.id)
        self.assertEqual(i3.dtype, "float32")
        self.spmv_ok(i3.id, heat(16, 1.3).astype(np.float32), dtype="float32", tol=1e-5)

    def test_resident_operator_update(self):
        a1 = heat(20, 0.1)
        op = ResidentOperator.upload(self.kd, a1)
        first = op.id
        a2 = heat(20, 0.3)
        info = op.update(a2)
        self.assertNotEqual(info.id, first)
        x = rng.standard_normal(400)
        self.assertLess(np.abs(op @ x - a2 @ x).max(), 1e-12)
        info3 = self.kd.update(info, heat(20, 0.5))
        self.spmv_ok(info3.id, heat(20, 0.5))

    def test_preconditioner_refreshed(self):
        """A solve on the new matrix refreshes the like matrix's held setup (amg: its aggregates
        and products' patterns kept), and converges as a fresh one does."""
        a1, a2 = heat(40, 0.5), heat(40, 2.0)
        i1 = self.kd.put(a1)
        b = rng.standard_normal(a1.shape[0])
        for precond in ("amg", "jacobi"):
            r1 = self.kd.solve(i1.id, b, method="cg", preconditioner=precond, rtol=1e-8)
            self.assertEqual(r1.status, "converged")
        i2 = self.kd.put(a2, like=i1)
        self.assertEqual(i2.raw.get("preconditioners_refreshed"), 0)
        counts = {}
        for precond in ("amg", "jacobi"):
            r2 = self.kd.solve(i2.id, b, method="cg", preconditioner=precond, rtol=1e-8)
            self.assertEqual(r2.status, "converged")
            self.assertLess(np.linalg.norm(b - a2 @ r2.x), 1.01e-8 * np.linalg.norm(b))
            counts[precond] = r2.iterations
            # the refresh is the solve's: before the solver starts (prepare_ms), in time_ms
            a = r2.anatomy
            self.assertGreater(a["prepare_ms"], 0)
            self.assertGreaterEqual(r2.time_ms, a["prepare_ms"] + a["solve_ms"] - 0.01)
        self.assertEqual(self.kd.info(i2.id).raw.get("preconditioners_refreshed"), 2)
        # the same matrix put whole on a fresh server builds its setup from scratch: the same
        # iteration counts (amg within 10%)
        from kd_daemon import Daemon
        d = Daemon().start()
        try:
            with krylov.Client(d.address) as kd2:
                i3 = kd2.put(a2)
                self.assertEqual(i3.id, i2.id)
                for precond in ("amg", "jacobi"):
                    r3 = kd2.solve(i3.id, b, method="cg", preconditioner=precond, rtol=1e-8)
                    slack = max(1, r3.iterations // 10) if precond == "amg" else 0
                    self.assertLessEqual(abs(r3.iterations - counts[precond]), slack,
                                         (precond, r3.iterations, counts[precond]))
        finally:
            self.assertEqual(d.stop(), 0)

    def test_reuse_preconditioner(self):
        """reuse_preconditioner: the like matrix's setup applied unchanged (the solve converges on
        the new matrix, to its own true residual); refreshed without it; built fresh, saying why,
        where there is nothing to reuse."""
        a1, a2 = heat(30, 0.5), heat(30, 0.6)
        i1 = self.kd.put(a1)
        b = rng.standard_normal(a1.shape[0])
        r1 = self.kd.solve(i1.id, b, preconditioner="amg", rtol=1e-9)
        self.assertEqual(r1.status, "converged")
        self.assertEqual(r1.preconditioner_setup, "")  # nothing was asked
        i2 = self.kd.put(a2, like=i1)
        reused = self.kd.solve(i2.id, b, preconditioner="amg", rtol=1e-9,
                               reuse_preconditioner=True)
        self.assertEqual(reused.preconditioner_setup, "reused")
        self.assertEqual(reused.status, "converged")
        self.assertLess(np.linalg.norm(b - a2 @ reused.x), 1.01e-9 * np.linalg.norm(b))
        # M(A1) on A2: a preconditioner of another matrix (close to it) is no better than A2's own
        self.assertEqual(self.kd.info(i2.id).raw.get("preconditioners_refreshed"), 0)
        refreshed = self.kd.solve(i2.id, b, preconditioner="amg", rtol=1e-9)
        self.assertEqual(refreshed.preconditioner_setup, "refreshed")
        self.assertLessEqual(refreshed.iterations, reused.iterations + 1)
        self.assertEqual(self.kd.info(i2.id).raw.get("preconditioners_refreshed"), 1)
        # jacobi: A1's diagonal is not A2's, so the reused and the own setup differ in what they
        # apply, and both converge
        self.kd.solve(i1.id, b, preconditioner="jacobi", rtol=1e-9)
        rj = self.kd.solve(i2.id, b, preconditioner="jacobi", rtol=1e-9, reuse_preconditioner=True)
        self.assertEqual((rj.preconditioner_setup, rj.status), ("reused", "converged"))
        self.assertLess(np.linalg.norm(b - a2 @ rj.x), 1.01e-9 * np.linalg.norm(b))
        # nothing to reuse: a matrix not put with like, and a preconditioner the like lacks
        fresh = self.kd.solve(i1.id, b, preconditioner="amg", rtol=1e-9,
                              reuse_preconditioner=True)
        self.assertIn("built fresh", fresh.preconditioner_setup)
        self.assertIn("not put with like", fresh.preconditioner_setup)
        ic = self.kd.solve(i2.id, b, preconditioner="ic0", rtol=1e-9, reuse_preconditioner=True)
        self.assertIn("holds no such preconditioner", ic.preconditioner_setup)
        self.assertEqual(ic.status, "converged")

    def test_cli_and_c_library(self):
        """krylov put FILE --like ID (krylov_put_like underneath): the values of the file's
        canonical matrix on ID's pattern, the id a full put of the file gets; refusals."""
        cli = [os.path.join(os.environ["KD_BIN_DIR"], "krylov"), "--server", daemon.address]
        a1, a2 = heat(14, 0.2), heat(14, 0.9)
        with tempfile.TemporaryDirectory() as d:
            f1, f2 = os.path.join(d, "a1.mtx"), os.path.join(d, "a2.mtx")
            scipy.io.mmwrite(f1, sp.coo_matrix(a1))  # coordinate, general: the CLI canonicalises
            scipy.io.mmwrite(f2, sp.coo_matrix(a2))
            run = lambda *args: subprocess.run(cli + list(args), capture_output=True, text=True,
                                               timeout=120)
            p1 = run("put", f1)
            self.assertEqual(p1.returncode, 0, p1.stderr)
            id1 = p1.stdout.strip()
            p2 = run("put", f2, "--like", id1, "--name", "a2")
            self.assertEqual(p2.returncode, 0, p2.stderr)
            id2 = p2.stdout.strip()
            self.assertNotEqual(id1, id2)
            self.assertEqual(self.kd.info(id2).pattern,
                             pattern_hash(a2.shape[0], a2.shape[1], a2.indptr, a2.indices))
            self.spmv_ok(id2, a2)
            full = self.kd.put(a2)
            self.assertEqual(full.id, id2)
            self.assertFalse(full.created)
            bad = run("put", f2, "--like", id1, "--format", "ell")
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("BAD_REQUEST", bad.stderr)
            other = os.path.join(d, "other.mtx")
            scipy.io.mmwrite(other, sp.coo_matrix(heat(15, 0.2)))
            bad = run("put", other, "--like", id1)
            self.assertNotEqual(bad.returncode, 0)
            self.assertIn("BAD_REQUEST", bad.stderr)

    def test_refusals(self):
        a1 = heat(10, 0.1)
        i1 = self.kd.put(a1)
        n = a1.nnz
        cases = [
            ({"like": "0" * 32, "values": [1.0] * n}, "NOT_FOUND", "no matrix"),
            ({"like": i1.id, "values": [1.0] * (n - 1)}, "BAD_REQUEST", str(n)),
            ({"like": i1.id, "values": [1.0] * n, "indices": [0] * n}, "BAD_REQUEST", "like"),
            ({"like": i1.id, "values": [1.0] * n, "mtx": "x"}, "BAD_REQUEST", "like"),
            ({"like": i1.id, "values": [1.0] * n, "format": "ell"}, "BAD_REQUEST", "format"),
            ({"like": i1.id, "values": [1.0] * n, "pattern": "1" * 32}, "BAD_REQUEST",
             "pattern"),
            ({"like": i1.id, "values": [1.0] * n, "dtype": "float32"}, "BAD_REQUEST", "float64"),
            ({"like": "xyz", "values": [1.0] * n}, "BAD_REQUEST", "hex"),
            ({"rows": 2, "cols": 2, "indptr": [0, 1, 2], "indices": [0, 1], "values": [1.0, 1.0],
              "pattern": "1" * 32}, "BAD_REQUEST", "pattern"),
        ]
        for params, code, says in cases:
            with self.subTest(params=sorted(params)):
                with self.assertRaises(kd_rpc.RpcError) as e:
                    self.raw.call("matrix.put", **params)
                self.assertEqual(e.exception.code, code, e.exception)
                self.assertIn(says, str(e.exception))
                self.spmv_ok(i1.id, a1)  # and the server serves on
        # the client checks the pattern itself before sending
        other = sp.csr_matrix(sp.random(100, 100, density=0.05, random_state=1) + sp.identity(100))
        with self.assertRaises(ValueError):
            self.kd.put(other, like=i1)
        # the same shape and count but another pattern: the server's hash check refuses it
        shifted = a1.copy()
        shifted.indices = shifted.indices.copy()
        shifted.indices[shifted.indptr[1] - 1] += 1  # row 0's last column one further right
        with self.assertRaises(krylov.errors.BadRequest):
            self.kd.put(shifted, like=i1.id)


if __name__ == "__main__":
    unittest.main()
