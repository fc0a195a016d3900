"""Client.multiply against SciPy: products of the real matrices in tests/matrices (A @ A, A.T @ A,
rectangular products of slices uploaded as matrices of their own), small matrices with empty
rows, a dense row and cancelling products, float32, SciPy matrices uploaded on the way, and the
refusals. The server has no matrix download, so C is read through its spmv: C @ x against
(A @ B) @ x for random x, and for small matrices column by column (C @ e_j) against the dense
product, which compares every entry.

C's pattern is the symbolic product (explicit zeros kept, docs/PROTOCOL.md), so its nnz is
compared with that of abs(A) @ abs(B) on the pattern (ones), where nothing cancels; SciPy's own
A @ B drops exact zeros and can have fewer.
"""

import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp

import krylov
from kd_daemon import matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


def load(name):
    return sp.csr_matrix(scipy.io.mmread(matrix_path(name)))


def pattern(M):
    P = sp.csr_matrix(M, copy=True)
    P.data[:] = 1.0
    return P


def symbolic_nnz(A, B):
    return (pattern(A) @ pattern(B)).nnz


class TestMultiply(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)

    def tearDown(self):
        self.kd.close()

    def check(self, info, A, B, rtol=1e-12, what=""):
        """info is C = A @ B on the server."""
        ref = (A @ B).tocsr()
        self.assertEqual(info.shape, ref.shape, what)
        self.assertEqual(info.nnz, symbolic_nnz(A, B), what)
        self.assertEqual(info.spgemm["nnz"], info.nnz, what)
        products = int(np.diff(B.tocsr().indptr)[A.tocsr().indices].sum())
        self.assertEqual(info.spgemm["products"], products, what)
        for _ in range(2):
            x = rng.uniform(-1, 1, ref.shape[1])
            y = self.kd.spmv(info, x)
            want = ref @ x
            scale = max(1.0, np.max(np.abs(want)))
            self.assertLessEqual(np.max(np.abs(y - want)) / scale, rtol, what)

    def check_dense(self, info, A, B, atol):
        """Every entry: C e_j for each column j against the dense product."""
        ref = (A @ B).toarray()
        for j in range(ref.shape[1]):
            e = np.zeros(ref.shape[1])
            e[j] = 1.0
            np.testing.assert_allclose(self.kd.spmv(info, e), ref[:, j], rtol=0, atol=atol)

    def test_square(self):
        A = load("494_bus.mtx")
        a = self.kd.put(A)
        C = self.kd.multiply(a, a)
        self.check(C, A, A, what="494_bus @ 494_bus")
        self.check_dense(C, A, A, atol=1e-9 * abs(A @ A).max())
        self.assertIs(C.created, True)
        self.assertEqual(C.dtype, "float64")
        again = self.kd.multiply(a.id, a)
        self.assertEqual((again.id, again.created), (C.id, False))
        self.assertEqual(self.kd.info(C).nnz, C.nnz)

    def test_transposed_and_unsymmetric(self):
        for name in ("bayer10.mtx", "watt_2.mtx", "rajat01.mtx"):
            A = load(name)
            a = self.kd.put(A)
            AtA = self.kd.multiply(a, a, transpose_a=True, select="heuristic")
            self.check(AtA, A.T, A, what=f"{name}: A.T @ A")
            AA = self.kd.multiply(a, a, select="heuristic")
            self.check(AA, A, A, what=f"{name}: A @ A")
            self.assertNotEqual(AA.id, AtA.id)

    def test_rectangular_slices(self):
        G = load("Groebner_id2003_aug.mtx")  # 4967 x 2456, rows up to 829
        F = load("Franz6_id1959_aug.mtx")  # 10592 x 3016
        k = int(rng.integers(200, 1200))
        left = G[:, :k].tocsr()  # 4967 x k
        right = F[:k, :].tocsr()  # k x 3016
        C = self.kd.multiply(left, right, select="heuristic")  # both uploaded first
        self.check(C, left, right, what=f"Groebner[:, :{k}] @ Franz6[:{k}, :]")
        # A.T @ B with a slice of rows: (F[:, :k]).T @ F[:, k:]
        a = self.kd.put(F[:, :k])
        b = self.kd.put(F[:, k:])
        C = self.kd.multiply(a, b, transpose_a=True)
        self.check(C, F[:, :k].T, F[:, k:], what="Franz6[:, :k].T @ Franz6[:, k:]")
        # shapes that do not chain
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.multiply(a, b)
        self.assertIn(f"A (10592 x {k}) by B (10592 x {3016 - k})", str(cm.exception))

    def test_structure(self):
        # empty rows, a dense row, a dense column, entries that cancel to an explicit zero
        n = 60
        A = sp.random(n, n, density=0.05, random_state=int(rng.integers(1 << 31)), format="lil")
        A[3, :] = 0
        A[17, :] = 0
        A[40, :] = rng.uniform(1, 2, n)  # dense row
        B = sp.random(n, n, density=0.05, random_state=int(rng.integers(1 << 31)), format="lil")
        B[:, 5] = rng.uniform(1, 2, (n, 1))  # dense column
        B[20, :] = 0
        A, B = A.tocsr(), B.tocsr()
        C = self.kd.multiply(A, B)
        self.check(C, A, B, what="random with empty and dense rows")
        self.check_dense(C, A, B, atol=1e-13)
        P = pattern(A) @ pattern(B)
        self.assertGreaterEqual(C.stats["empty_rows"], 2)
        self.assertEqual(C.stats["empty_rows"], int(np.sum(np.diff(P.indptr) == 0)))
        self.assertEqual(C.stats["max_row"], int(np.diff(P.indptr).max()))  # the dense row's

        # [1 1] @ [1 -1]^T = [0]: one stored entry, an explicit zero; SciPy drops it
        A = sp.csr_matrix(np.array([[1.0, 1.0], [0.0, 2.0]]))
        B = sp.csr_matrix(np.array([[1.0], [-1.0]]))
        C = self.kd.multiply(A, B)
        self.assertEqual((C.shape, C.nnz), ((2, 1), 2))
        self.assertEqual((A @ B).nnz, 1)
        np.testing.assert_array_equal(self.kd.spmv(C, np.ones(1)), [0.0, -2.0])

    def test_float32(self):
        A = load("494_bus.mtx").astype(np.float32)
        C = self.kd.multiply(A, A)
        self.assertEqual(C.dtype, "float32")
        A64 = A.astype(np.float64)
        self.check(C, A64, A64, rtol=1e-5, what="float32")
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.multiply(A, A64)
        self.assertIn("A is float32 and B is float64", str(cm.exception))

    def test_refusals(self):
        with self.assertRaises(krylov.NotFound):
            self.kd.multiply("0" * 32, "1" * 32)
        with self.assertRaises(krylov.BadRequest):
            self.kd.multiply("not-an-id", "1" * 32)
        # an n x 1 column of ones times a 1 x n row: n^2 products, more than int32 counts
        n = 50000
        col = sp.csr_matrix(np.ones((n, 1)))
        row = sp.csr_matrix(np.ones((1, n)))
        with self.assertRaises(krylov.TooLarge) as cm:
            self.kd.multiply(col, row)
        self.assertIn(f"{n * n} products", str(cm.exception))
        one = self.kd.multiply(row, col)  # the other way: 1 x 1, n products
        self.assertEqual((one.shape, one.nnz, one.spgemm["products"]), ((1, 1), 1, n))
        self.assertEqual(self.kd.spmv(one, np.ones(1))[0], n)
        # the server is still fine
        self.assertGreaterEqual(self.kd.status().requests_by_method["matrix.multiply"], 2)


if __name__ == "__main__":
    unittest.main()
