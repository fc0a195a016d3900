"""krylov.scipy.ResidentOperator: SciPy's own iterative solvers run unchanged on a matrix resident
on a real krylovd, with every A @ v done by the server. Checked against the same SciPy solver on
the local matrix (real matrices from tests/matrices), and by counting the server's spmv requests.
"""

import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
from krylov.scipy import ResidentOperator
from kd_daemon import matrix_path, shared_daemon, scipy_tol

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


def load(name):
    return sp.csr_matrix(scipy.io.mmread(matrix_path(name)))


class CountingOperator(spla.LinearOperator):
    """Counts the matvecs SciPy asks for, passing them to another operator."""

    def __init__(self, inner):
        self.inner = inner
        self.count = 0
        super().__init__(dtype=inner.dtype, shape=inner.shape)

    def _matvec(self, x):
        self.count += 1
        return self.inner.matvec(x)


class TestResidentOperator(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)

    def tearDown(self):
        self.kd.close()

    def spmv_requests(self):
        return self.kd.status().requests_by_method["spmv"]

    def test_cg_through_the_operator(self):
        A = load("494_bus.mtx")
        op = ResidentOperator.upload(self.kd, A)
        self.assertTrue(op.symmetric)  # detected from the scipy matrix
        self.assertEqual(op.shape, A.shape)
        self.assertEqual(op.dtype, np.float64)
        b = rng.uniform(-1, 1, A.shape[0])
        counting = CountingOperator(op)
        before = self.spmv_requests()
        x, info = spla.cg(counting, b, **scipy_tol(1e-10), atol=0.0, maxiter=20000)
        self.assertEqual(info, 0)
        # SciPy stops on its recurrence's residual; the true one drifts from it by the
        # operator's rounding, which differs from A @ x's in summation order (494_bus: cond 4e6;
        # seed 1795661172259123487 gave 1.00035e-10 on PoCL, the H200 1.0688e-10), hence 10%
        # over tol
        self.assertLessEqual(np.linalg.norm(b - A @ x) / np.linalg.norm(b), 1.1e-10)
        # every matvec SciPy asked for went to the server
        self.assertGreater(counting.count, 100)
        self.assertEqual(self.spmv_requests() - before, counting.count)
        # the solution SciPy's CG finds on the local matrix, to within what the residuals allow:
        # x - x_local = A^-1 (r_local - r), and ||A^-1|| = 1 / lambda_min
        x_local, info_local = spla.cg(A, b, **scipy_tol(1e-10), atol=0.0, maxiter=20000)
        self.assertEqual(info_local, 0)
        lambda_min = np.linalg.eigvalsh(A.toarray())[0]
        bound = np.linalg.norm((b - A @ x) - (b - A @ x_local)) / lambda_min
        self.assertLessEqual(np.linalg.norm(x - x_local), 1.01 * bound + 1e-12)

    def test_gmres_on_a_nonsymmetric_matrix(self):
        A = load("ani4.mtx")  # anisotropic diffusion, not bitwise symmetric
        self.assertGreater((A - A.T).count_nonzero(), 0)
        info = self.kd.put(A)
        op = self.kd.operator(info)
        # symmetric to rounding (7.8e-15 relative at most): the server's flag says so
        self.assertTrue(op.symmetric)
        b = rng.uniform(-1, 1, A.shape[0])
        before = self.spmv_requests()
        x, status = spla.gmres(op, b, **scipy_tol(1e-8), atol=0.0, restart=50, maxiter=200)
        self.assertEqual(status, 0)
        self.assertLessEqual(np.linalg.norm(b - A @ x) / np.linalg.norm(b), 1e-8)
        self.assertGreater(self.spmv_requests() - before, 50)

    def test_bicgstab_through_an_operator_made_from_an_id(self):
        A = load("ani4.mtx")
        op = ResidentOperator(self.kd, self.kd.put(A).id)  # from an id: info fetched
        self.assertEqual(op.info.nnz, A.nnz)
        b = rng.uniform(-1, 1, A.shape[0])
        x, status = spla.bicgstab(op, b, **scipy_tol(1e-8), atol=0.0, maxiter=5000)
        self.assertEqual(status, 0)
        self.assertLessEqual(np.linalg.norm(b - A @ x) / np.linalg.norm(b), 1e-7)

    def test_products_and_adjoint(self):
        A = load("Groebner_id2003_aug.mtx")  # rectangular 4967 x 2456
        op = ResidentOperator.upload(self.kd, A)
        self.assertEqual(op.shape, A.shape)
        self.assertFalse(op.symmetric)
        x = rng.uniform(-1, 1, A.shape[1])
        y = op @ x
        self.assertLessEqual(np.max(np.abs(y - A @ x)) / np.max(np.abs(A @ x)), 1e-12)
        X = rng.uniform(-1, 1, (A.shape[1], 3))
        Y = op.matmat(X)
        self.assertEqual(Y.shape, (A.shape[0], 3))
        self.assertLessEqual(np.max(np.abs(Y - A @ X)) / np.max(np.abs(A @ X)), 1e-12)
        self.assertEqual(op.matvec(x.reshape(-1, 1)).shape, (A.shape[0], 1))
        with self.assertRaises(NotImplementedError):
            op.rmatvec(rng.uniform(-1, 1, A.shape[0]))

        S = load("494_bus.mtx")
        sym = ResidentOperator(self.kd, self.kd.put(S), symmetric=True)
        self.assertIs(sym.H, sym)
        v = rng.uniform(-1, 1, S.shape[0])
        self.assertLessEqual(np.max(np.abs(sym.rmatvec(v) - S.T @ v)) / np.max(np.abs(S @ v)),
                             1e-12)

    def test_eigsh_through_the_operator(self):
        S = load("494_bus.mtx")
        op = ResidentOperator.upload(self.kd, S)
        vals = spla.eigsh(op, k=3, which="LM", return_eigenvectors=False, tol=1e-10)
        ref = spla.eigsh(S, k=3, which="LM", return_eigenvectors=False, tol=1e-10)
        np.testing.assert_allclose(np.sort(vals), np.sort(ref), rtol=1e-8)

    def test_solve_on_the_server_and_float32(self):
        A = load("494_bus.mtx")
        op = ResidentOperator.upload(self.kd, A)
        b = rng.uniform(-1, 1, A.shape[0])
        res = op.solve(b, rtol=1e-8)
        self.assertTrue(res.converged)
        self.assertLessEqual(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b), 1e-8)
        self.assertIn("ResidentOperator", repr(op))
        # a float32 upload gives a float32 operator, whose products come back in float32
        op32 = ResidentOperator.upload(self.kd, A, dtype="float32")
        self.assertEqual(op32.info.dtype, "float32")
        self.assertEqual(op32.dtype, np.float32)
        y = op32.matvec(b)
        self.assertEqual(y.dtype, np.float32)
        scale = abs(A) @ np.abs(b)
        self.assertTrue(np.all(np.abs(y - A @ b) <= 1e-5 * scale + 1e-30))


if __name__ == "__main__":
    unittest.main()
