"""Several columns in one spmv (`ncols`) through the Python client and a real krylovd: for every
format the server can store a matrix in (forced with format=, plus its own choice and a
reordering), X of k columns against SciPy's A @ X, beta != 0 with Y, float32 on the wire, k on both
sides of the kernels' chunk of 8, rectangular and real matrices; the same as k single spmv calls
bit for bit where the format has no SpMM kernel (column by column) and to rounding where it has;
and the refusals: x not a whole number of columns, y of another shape, ncols over the server's
limit; the server serving after each.
"""

import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp

import krylov
from kd_daemon import matrix_path, shared_daemon

daemon = None
setUpModule, tearDownModule = shared_daemon(globals())

FORMATS = ("csr_scalar", "csr_vector", "csr_adaptive", "ellpack_r", "sell_c_sigma", "ell", "hyb",
           "coo", "tiled")


def close(got, want, tol):
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    return float(np.max(np.abs(got - want))) <= tol * scale if want.size else True


class TestSpmm(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)
        self.rng = np.random.default_rng()

    def tearDown(self):
        self.kd.close()

    def check(self, A, mid, k, label):
        X = self.rng.uniform(-1, 1, (A.shape[1], k))
        Y = self.rng.uniform(-1, 1, (A.shape[0], k))
        got = self.kd.spmv(mid, X)
        self.assertEqual(got.shape, (A.shape[0], k), label)
        self.assertTrue(close(got, A @ X, 1e-12), f"{label} k={k}")
        got = self.kd.spmv(mid, X, alpha=-0.5, beta=2.0, y=Y)
        self.assertTrue(close(got, -0.5 * (A @ X) + 2.0 * Y, 1e-12), f"{label} k={k} beta")
        # each column as its own spmv
        one = np.column_stack([self.kd.spmv(mid, X[:, c]) for c in range(k)])
        self.assertTrue(close(got * 0 + self.kd.spmv(mid, X), one, 1e-13), f"{label} k={k} cols")
        got32 = self.kd.spmv(mid, X.astype(np.float32))
        self.assertEqual(got32.dtype, np.float32)
        self.assertTrue(close(got32, A @ X, 1e-5), f"{label} k={k} float32")

    def test_every_format(self):
        A = sp.random(900, 900, density=0.01, format="csr", random_state=7) + sp.eye(900)
        A = sp.csr_matrix(A)
        A[17, :] = self.rng.uniform(-1, 1, 900)  # one dense row
        A = sp.csr_matrix(A)
        for fmt in FORMATS:
            try:
                mid = self.kd.put(A, format=fmt).id
            except krylov.KrylovError as e:  # a format this build or device lacks
                self.assertIn(e.code, ("UNSUPPORTED", "BAD_REQUEST"), fmt)
                continue
            for k in (1, 3, 8, 9, 17):
                self.check(A, mid, k, fmt)
            self.kd.drop(mid)
        mid = self.kd.put(A, reorder="rcm").id
        self.check(A, mid, 9, "rcm")

    def test_rectangular_and_real(self):
        T = sp.csr_matrix(sp.random(1200, 300, density=0.02, random_state=3))
        self.check(T, self.kd.put(T).id, 5, "tall")
        W = sp.csr_matrix(scipy.io.mmread(matrix_path("watt_2.mtx")))
        self.check(W, self.kd.put(W).id, 8, "watt_2")

    def test_refusals(self):
        A = sp.csr_matrix(sp.random(50, 40, density=0.1, random_state=1))
        mid = self.kd.put(A).id
        X = self.rng.uniform(-1, 1, (40, 3))
        conn = self.kd._conn
        with self.assertRaises(krylov.KrylovError) as e:  # 121 values are not 3 columns of 40
            conn.call("spmv", {"id": mid, "x": np.append(X.ravel(order="F"), 1.0).tolist(),
                               "ncols": 3})
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        with self.assertRaises(krylov.KrylovError) as e:  # 3 columns of 40 for a 50 x 40 matrix
            conn.call("spmv", {"id": mid, "x": X.ravel(order="F").tolist(), "ncols": 2})
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        with self.assertRaises(ValueError):
            self.kd.spmv(mid, X, beta=1.0, y=np.zeros((50, 2)))
        with self.assertRaises(krylov.KrylovError) as e:
            conn.call("spmv", {"id": mid, "x": [0.0] * 40 * 100000, "ncols": 100000})
        self.assertIn(e.exception.code, ("TOO_LARGE", "BAD_REQUEST"))
        with self.assertRaises(krylov.KrylovError) as e:
            conn.call("spmv", {"id": mid, "x": X.ravel(order="F").tolist(), "ncols": 0})
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        # still serving
        self.assertTrue(close(self.kd.spmv(mid, X), A @ X, 1e-12))


if __name__ == "__main__":
    unittest.main()
