"""Re-putting a matrix the server holds without sending it (issue 16, item 6), through the Python
client and a real krylovd: the content id the client computes (krylov.content_id) equals the id
the server gives, for float64 and float32, CSR from SciPy, tuples, dense arrays, rectangular,
empty and 1x1 matrices and explicit zeros; a second put() sends only matrix.info (no matrix.put)
and answers created=False; arrays that are not canonical CSR, or a put with options, are sent as
before and get the server's id; and SciPy habits: kd.solve(A, b), kd.spmv(A, x), kd.operator(A)
with A a scipy matrix, tol= as rtol.
"""

import unittest

import numpy as np
import scipy.sparse as sp

import krylov
from krylov.content_id import csr_content_id
from kd_daemon import shared_daemon

daemon = None
setUpModule, tearDownModule = shared_daemon(globals())


class Recorder:
    """Wraps a connection's call to record the methods sent."""

    def __init__(self, conn):
        self.conn, self.methods, self.inner = conn, [], conn.call

        def call(method, params=None, on_progress=None):
            self.methods.append(method)
            return self.inner(method, params, on_progress)

        conn.call = call


class TestReput(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)
        self.rng = np.random.default_rng()
        self.rec = Recorder(self.kd._conn)

    def tearDown(self):
        self.kd.close()

    def fresh(self, rows, cols, density):
        A = sp.random(rows, cols, density=density, format="csr",
                      random_state=int(self.rng.integers(1 << 30)))
        A.sum_duplicates()
        return A

    def test_local_id_is_the_servers(self):
        A = self.fresh(300, 200, 0.05)
        Z = A.copy()
        Z.data[::3] = 0.0  # explicit zeros are part of the matrix
        cases = [(A, "float64"), (A, "float32"), (Z, "float64"),
                 (sp.csr_matrix((5, 7)), "float64"), (sp.csr_matrix(np.array([[2.5]])), "float64")]
        for M, dt in cases:
            M = sp.csr_matrix(M)
            local = csr_content_id(M.shape[0], M.shape[1], M.indptr, M.indices, M.data, dt)
            self.assertIsNotNone(local)
            self.assertEqual(local, self.kd.put(M, dtype=dt, name="x").id, f"{M.shape} {dt}")
        D = self.rng.uniform(-1, 1, (40, 30)) * (self.rng.uniform(0, 1, (40, 30)) < 0.2)
        self.assertEqual(self.kd.put(D, name="dense").id, self.kd.put(sp.csr_matrix(D)).id)

    def test_second_put_sends_nothing(self):
        A = self.fresh(2000, 2000, 0.002) + sp.eye(2000, format="csr")
        first = self.kd.put(A)
        self.rec.methods.clear()
        again = self.kd.put(A)
        self.assertEqual(self.rec.methods, ["matrix.info"])
        self.assertEqual(again.id, first.id)
        self.assertFalse(again.created)
        # a tuple and a dense array of the same matrix: found too
        self.rec.methods.clear()
        self.assertEqual(self.kd.put((A.indptr, A.indices, A.data, A.shape)).id, first.id)
        self.assertEqual(self.kd.put(A.toarray()).id, first.id)
        self.assertEqual(self.rec.methods, ["matrix.info", "matrix.info"])
        # options (a forced format, a name, pinning) go to the server as before
        self.rec.methods.clear()
        self.kd.put(A, name="again")
        self.assertEqual(self.rec.methods, ["matrix.put"])

    def test_not_canonical_is_sent(self):
        # row 0's columns out of order, and a duplicate in row 1: no local id, uploaded
        indptr = np.array([0, 2, 4])
        indices = np.array([3, 1, 2, 2])
        data = np.array([1.0, 2.0, 3.0, 4.0])
        self.assertIsNone(csr_content_id(2, 4, indptr, indices, data, "float64"))
        self.rec.methods.clear()
        info = self.kd.put((indptr, indices, data, (2, 4)))
        self.assertEqual(self.rec.methods, ["matrix.put"])
        canon = sp.csr_matrix((data, indices, indptr), shape=(2, 4))
        canon.sum_duplicates()
        self.assertEqual(info.id, self.kd.put(canon).id)
        # a new matrix: asked, not found, sent
        B = self.fresh(100, 100, 0.05)
        self.rec.methods.clear()
        self.assertTrue(self.kd.put(B).created)
        self.assertEqual(self.rec.methods, ["matrix.info", "matrix.put"])

    def test_forced_format_on_a_held_matrix_says_so(self):
        A = self.fresh(500, 500, 0.01) + sp.eye(500, format="csr")
        first = self.kd.put(A, format="csr_scalar")
        self.assertEqual(first.format, "csr_scalar")
        self.assertEqual(first.notice, "")
        same = self.kd.put(A, format="csr_scalar")
        self.assertEqual(same.notice, "")  # what was asked is what is held
        other = self.kd.put(A, format="ellpack_r")
        self.assertFalse(other.created)
        self.assertEqual(other.format, "csr_scalar")
        self.assertIn("ellpack_r", other.notice)
        self.assertIn("not applied", other.notice)
        self.assertIn("drop it", other.notice)
        # dropped and put again: stored as asked
        self.kd.drop(first)
        again = self.kd.put(A, format="ellpack_r")
        self.assertTrue(again.created)
        self.assertEqual(again.format, "ellpack_r")
        self.assertEqual(again.notice, "")

    def test_scipy_habits(self):
        n = 400
        A = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        b = self.rng.uniform(-1, 1, n)
        res = self.kd.solve(A, b, tol=1e-10)
        self.assertEqual(res.status, "converged")
        self.assertLessEqual(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b), 1e-10)
        x = self.rng.uniform(-1, 1, n)
        np.testing.assert_allclose(self.kd.spmv(A, x), A @ x, rtol=1e-12, atol=1e-12)
        op = self.kd.operator(A)
        np.testing.assert_allclose(op @ x, A @ x, rtol=1e-12, atol=1e-12)
        with self.assertRaises(ValueError):
            self.kd.solve(A, b, tol=1e-6, rtol=1e-4)

    def test_solve_anatomy(self):
        n = 3000
        A = sp.diags([-1.0, 2.2, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        res = self.kd.solve(A, self.rng.uniform(-1, 1, n))
        a = res.anatomy
        phases = ("setup_ms", "host_ms", "alloc_ms", "upload_ms", "start_ms", "iterate_ms",
                  "final_ms", "download_ms")
        for key in phases + ("queue_ms", "prepare_ms", "solve_ms", "checks"):
            self.assertIn(key, a)
            self.assertGreaterEqual(a[key], 0)
        self.assertGreater(a["checks"], 0)
        # the phases add up to the solver's total (the rest is result bookkeeping)
        self.assertLessEqual(sum(a[k] for k in phases), a["solve_ms"] * 1.001 + 0.01)
        self.assertGreaterEqual(sum(a[k] for k in phases), a["solve_ms"] * 0.9 - 0.05)
        self.assertLessEqual(a["solve_ms"], res.time_ms + 0.01)


if __name__ == "__main__":
    unittest.main()
