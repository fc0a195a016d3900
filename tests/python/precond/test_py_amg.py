"""preconditioner="amg" through the Python client, validated against SciPy on the same matrices:
the true residual ||b - A x|| / ||b|| computed here with SciPy is at the tolerance, the answer
agrees with SciPy's own solve (spsolve), and AMG-PCG takes far fewer iterations than SciPy's
unpreconditioned cg and than the server's Jacobi-PCG on a 2-D Laplacian, 494_bus and a 3-D
Laplacian. Options reach the setup (block_size on a 3-unknowns-a-node problem lowers the count),
and the refusals are clear.
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


def scipy_cg_iterations(A, b, rtol):
    count = [0]

    def cb(_):
        count[0] += 1

    try:
        spla.cg(A, b, rtol=rtol, atol=0.0, maxiter=20000, callback=cb)
    except TypeError:  # SciPy before 1.12 calls it tol
        spla.cg(A, b, **scipy_tol(rtol), atol=0.0, maxiter=20000, callback=cb)
    return count[0]


class AmgAgainstScipy(unittest.TestCase):
    def check(self, name, A, ratio):
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, name=name)
            amg = kd.solve(info, b, method="cg", preconditioner="amg", rtol=1e-8)
            jac = kd.solve(info, b, method="pcg", rtol=1e-8)
        self.assertEqual(amg.status, "converged", amg.message)
        rel = np.linalg.norm(b - A @ amg.x) / np.linalg.norm(b)
        self.assertLessEqual(rel, 1.5e-8, name)
        ref = spla.spsolve(sp.csc_matrix(A), b)
        self.assertLess(np.linalg.norm(amg.x - ref) / np.linalg.norm(ref), 1e-5, name)
        plain = scipy_cg_iterations(A, b, 1e-8)
        print(f"{name}: amg {amg.iterations}, jacobi {jac.iterations}, scipy cg {plain}")
        self.assertLessEqual(amg.iterations, ratio * jac.iterations, name)
        self.assertLessEqual(amg.iterations, ratio * plain, name)

    def test_laplacian_2d(self):
        self.check("lap2d 64", laplacian(64, 2), 0.1)

    def test_laplacian_3d(self):
        self.check("lap3d 16", laplacian(16, 3), 0.35)

    def test_494_bus(self):
        self.check("494_bus", sp.csr_matrix(scipy.io.mmread(matrix_path("494_bus.mtx"))), 0.1)

    def test_block_size(self):
        B = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 2.0]])
        A = sp.csr_matrix(sp.kron(laplacian(16, 2), B))
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A)
            one = kd.solve(info, b, preconditioner="amg")
            three = kd.solve(info, b, preconditioner="amg",
                             preconditioner_options={"block_size": 3})
        for r in (one, three):
            self.assertEqual(r.status, "converged")
            self.assertLessEqual(np.linalg.norm(b - A @ r.x) / np.linalg.norm(b), 1.5e-8)
        self.assertLess(three.iterations, one.iterations)

    def test_refusals(self):
        A = laplacian(10, 2)
        N = sp.csr_matrix(A, copy=True)
        N[0, 1] = -0.25  # no longer symmetric
        with krylov.Client(daemon.address) as kd:
            info, ninfo = kd.put(A), kd.put(N)
            b = np.ones(A.shape[0])
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, preconditioner="amg", preconditioner_options={"smooth": 1})
            self.assertIn("no option 'smooth'", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(ninfo, b, preconditioner="amg")
            self.assertIn("symmetric", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, preconditioner="ilu9")
            self.assertIn("amg", str(e.exception))


if __name__ == "__main__":
    unittest.main()
