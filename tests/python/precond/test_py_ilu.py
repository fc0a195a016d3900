"""preconditioner="ic0" through the real daemon, validated against SciPy on the same matrices.

SciPy has no incomplete Cholesky, so this file writes its own IC(0) (row by row on A's lower
pattern) and hands it to scipy.sparse.linalg.cg as M. With sweeps = 0 (exact triangular solves)
the server's ic0-PCG is the same algorithm: its iteration count is within 10% of SciPy's, its true
residual ||b - A x|| / ||b|| (computed here) is at the tolerance and its x agrees with spsolve's.
The default (Jacobi sweeps in the triangular solves) converges too, in fewer iterations than the
server's Jacobi-PCG; float32, several right-hand sides with x0, a reordered matrix, and the
refusals (a nonsymmetric matrix, a bad sweeps, cg with the nonsymmetric ilu0).
"""

import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
from kd_daemon import matrix_path, shared_daemon, scipy_tol

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


def laplacian(n, dims):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    if dims == 2:
        return sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye))
    return sp.csr_matrix(sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye)
                         + sp.kron(sp.kron(t, eye), eye))


def ic0(A):
    """L lower (CSR) with (L L^T)_ij = a_ij on A's lower pattern."""
    A = sp.csr_matrix(A)
    A.sort_indices()
    n = A.shape[0]
    rows = []  # row i of L: {column: value}, strictly lower
    diag = np.zeros(n)
    for i in range(n):
        cols = A.indices[A.indptr[i]:A.indptr[i + 1]]
        vals = A.data[A.indptr[i]:A.indptr[i + 1]]
        row = {}
        a_ii = 0.0
        for j, a in zip(cols, vals):
            if j > i:
                break
            if j == i:
                a_ii = a
                break
            other = rows[j]
            s = a - sum(v * other[k] for k, v in row.items() if k in other)
            row[j] = s / diag[j]
        d = a_ii - sum(v * v for v in row.values())
        assert d > 0, f"IC(0) breaks down at row {i}"
        diag[i] = np.sqrt(d)
        rows.append(row)
    r, c, v = [], [], []
    for i, row in enumerate(rows):
        for j, x in row.items():
            r.append(i), c.append(j), v.append(x)
        r.append(i), c.append(i), v.append(diag[i])
    return sp.csr_matrix((v, (r, c)), shape=(n, n))


def scipy_cg(A, b, rtol, M=None):
    count = [0]

    def cb(_):
        count[0] += 1

    try:
        x, _ = spla.cg(A, b, rtol=rtol, atol=0.0, maxiter=20000, M=M, callback=cb)
    except TypeError:  # SciPy before 1.12 calls it tol
        x, _ = spla.cg(A, b, **scipy_tol(rtol), atol=0.0, maxiter=20000, M=M, callback=cb)
    return x, count[0]


def ic0_operator(A):
    L = ic0(A)
    U = sp.csr_matrix(L.T)

    def apply(r):
        y = spla.spsolve_triangular(L, r, lower=True)
        return spla.spsolve_triangular(U, y, lower=False)

    return spla.LinearOperator(A.shape, matvec=apply)


class Ic0AgainstScipy(unittest.TestCase):
    def check(self, name, A):
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, name=name)
            exact = kd.solve(info, b, method="cg", preconditioner="ic0",
                             preconditioner_options={"sweeps": 0}, rtol=1e-8)
            default = kd.solve(info, b, method="cg", preconditioner="ic0", rtol=1e-8)
            jac = kd.solve(info, b, method="pcg", rtol=1e-8)
        ref = spla.spsolve(sp.csc_matrix(A), b)
        for r in (exact, default):
            self.assertEqual(r.status, "converged", r.message)
            rel = np.linalg.norm(b - A @ r.x) / np.linalg.norm(b)
            self.assertLessEqual(rel, 1.5e-8, name)
            self.assertLess(np.linalg.norm(r.x - ref) / np.linalg.norm(ref), 1e-5, name)
        x, its = scipy_cg(A, b, 1e-8, M=ic0_operator(A))
        self.assertLessEqual(np.linalg.norm(b - A @ x) / np.linalg.norm(b), 1e-8)
        print(f"{name}: ic0 exact {exact.iterations}, scipy cg + IC(0) {its}, "
              f"ic0 default {default.iterations}, jacobi {jac.iterations}")
        self.assertLessEqual(abs(exact.iterations - its), max(1, 0.1 * its), name)
        self.assertLess(default.iterations, jac.iterations, name)

    def test_laplacian_2d(self):
        self.check("lap2d 48", laplacian(48, 2))

    def test_laplacian_3d(self):
        self.check("lap3d 12", laplacian(12, 3))

    def test_494_bus(self):
        self.check("494_bus", sp.csr_matrix(scipy.io.mmread(matrix_path("494_bus.mtx"))))

    def test_float32_several_rhs_x0(self):
        A = laplacian(40, 2)
        n = A.shape[0]
        b = rng.uniform(-1.0, 1.0, (n, 3))
        x0 = rng.uniform(-1.0, 1.0, (n, 3))
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, dtype="float32")
            for sweeps in (0, 2):
                r = kd.solve(info, b, x0=x0, preconditioner="ic0", rtol=1e-5, dtype="float32",
                             preconditioner_options={"sweeps": sweeps})
                for c in range(3):
                    self.assertEqual(r.status[c], "converged", r.message[c])
                    rel = np.linalg.norm(b[:, c] - A @ r.x[:, c]) / np.linalg.norm(b[:, c])
                    self.assertLessEqual(rel, 2e-5)

    def test_reordered(self):
        A = laplacian(30, 2)
        p = rng.permutation(A.shape[0])
        A = sp.csr_matrix(A[p][:, p])  # scrambled: RCM has work to do
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, reorder="rcm")
            r = kd.solve(info, b, preconditioner="ic0", rtol=1e-8)
        self.assertEqual(r.status, "converged", r.message)
        self.assertLessEqual(np.linalg.norm(b - A @ r.x) / np.linalg.norm(b), 1.5e-8)

    def test_refusals(self):
        A = laplacian(10, 2)
        N = sp.csr_matrix(A, copy=True)
        N[0, 1] = -0.25  # no longer symmetric
        with krylov.Client(daemon.address) as kd:
            info, ninfo = kd.put(A), kd.put(N)
            b = np.ones(A.shape[0])
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(ninfo, b, preconditioner="ic0")
            self.assertIn("symmetric", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, preconditioner="ic0", preconditioner_options={"sweeps": -1})
            self.assertIn("sweeps", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, preconditioner="ic0", preconditioner_options={"omega": 1})
            self.assertIn("no option 'omega'", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, method="cg", preconditioner="ilu0")
            self.assertIn("not symmetric", str(e.exception))


if __name__ == "__main__":
    unittest.main()
