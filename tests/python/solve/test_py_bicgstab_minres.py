"""method="bicgstab" and method="minres" through a real krylovd, against SciPy on the same matrices.

Iteration counts are compared at the same stopping rule, ||b - A x|| <= rtol ||b||, the one krylovd
uses: SciPy's bicgstab and minres are run with a callback that computes the true residual of each
iterate here and stops counting at the first that meets the tolerance (SciPy's own minres stops
on ||r|| / (||A|| ||x||), a looser rule, so its tolerance is set far below ours and its count is
taken from the callback). Both must converge, krylovd within 10% of SciPy's count (two for small
counts), its ||b - A x|| checked here in double. bicgstab: an upwind convection-diffusion operator
and ani4 (nonsymmetric), with and without Jacobi; minres: a shifted Laplacian with negative
eigenvalues and a saddle point [A B'; B 0] (symmetric indefinite), with and without Jacobi.
Several right-hand sides, x0, float32, the refusals.
"""

import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
from kd_daemon import matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


class _Reached(Exception):
    pass


def scipy_iterations(method, A, b, rtol, M=None, cap=20000):
    """SciPy's iterations to the first iterate with ||b - A x|| <= rtol ||b|| (callbacks)."""
    count = [0]
    bound = rtol * np.linalg.norm(b)

    def cb(xk):
        count[0] += 1
        if np.linalg.norm(b - A @ xk) <= bound:
            raise _Reached()

    fn = spla.bicgstab if method == "bicgstab" else spla.minres
    extra = {"atol": 0.0} if method == "bicgstab" else {}
    try:
        try:
            fn(A, b, rtol=1e-15, maxiter=cap, M=M, callback=cb, **extra)
        except TypeError:  # SciPy before 1.12 calls it tol
            fn(A, b, tol=1e-15, maxiter=cap, M=M, callback=cb, **extra)
    except _Reached:
        return count[0]
    if method == "bicgstab":
        # Newer SciPy (1.18 on the GPU host) ends some of these runs early on its breakdown
        # tests, aimed at 1e-15; the same algorithm (van der Vorst's, right preconditioned, as
        # SciPy writes it) run here to the first iterate under the bound gives the count
        return bicgstab_iterations(A, b, bound, M, cap)
    return None


def bicgstab_iterations(A, b, bound, M, cap):
    """BiCGSTAB in NumPy as SciPy's bicgstab runs it: iterations to ||b - A x|| <= bound."""
    x = np.zeros_like(b)
    r = b.copy()
    rt = r.copy()
    p = v = np.zeros_like(b)
    rho_prev = alpha = omega = 1.0
    for k in range(1, cap + 1):
        rho = rt @ r
        if rho == 0.0:
            return None
        p = r.copy() if k == 1 else r + (rho / rho_prev) * (alpha / omega) * (p - omega * v)
        phat = M @ p if M is not None else p
        v = A @ phat
        alpha = rho / (rt @ v)
        s = r - alpha * v
        shat = M @ s if M is not None else s
        t = A @ shat
        omega = (t @ s) / (t @ t)
        x = x + alpha * phat + omega * shat
        r = s - omega * t
        rho_prev = rho
        if np.linalg.norm(b - A @ x) <= bound:
            return k
    return None


def convection_diffusion(nx, w):
    n = nx * nx
    rows, cols, vals = [], [], []
    for j in range(nx):
        for i in range(nx):
            r = j * nx + i
            for dc, v, ok in ((-nx, -1.0, j > 0), (-1, -1.0 - w, i > 0), (0, 4.0 + w, True),
                              (1, -1.0, i < nx - 1), (nx, -1.0, j < nx - 1)):
                if ok:
                    rows.append(r)
                    cols.append(r + dc)
                    vals.append(v)
    return sp.csr_matrix((vals, (rows, cols)), shape=(n, n))


def laplacian(nx):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(nx, nx))
    eye = sp.identity(nx)
    return sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye))


def saddle_point(nx, m, seed=3):
    A = laplacian(nx)
    n1 = A.shape[0]
    g = np.random.default_rng(seed)
    B = sp.random(m, n1, density=3.0 / n1, random_state=seed, format="lil")
    for i in range(m):
        B[i, i * (n1 // m)] = 1.0
    B = sp.csr_matrix(B) * g.uniform(0.5, 1.0)
    return sp.csr_matrix(sp.bmat([[A, B.T], [B, None]]))


def relres(A, x, b):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


class AgainstScipy(unittest.TestCase):
    def compare(self, name, A, method, precond, rtol=1e-8):
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        M = sp.diags(1.0 / A.diagonal()) if precond == "jacobi" else None
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, name=name)
            res = kd.solve(info, b, method=method, preconditioner=precond, rtol=rtol)
        theirs = scipy_iterations(method, A, b, rtol, M=M)
        rr = relres(A, res.x, b)
        print(f"  {name:<20} {method:<8} {precond or 'none':<6}: krylovd {res.status} "
              f"{res.iterations} its (relres {rr:.3g}), scipy {theirs}")
        self.assertEqual(res.status, "converged", f"{name}: {res.message}")
        self.assertIsNotNone(theirs, f"{name}: scipy did not reach {rtol}")
        self.assertLessEqual(rr, rtol * 1.001, name)
        self.assertLessEqual(abs(res.iterations - theirs), max(2, 0.1 * theirs),
                             f"{name}: {res.iterations} iterations, scipy {theirs}")

    def test_bicgstab_convection_diffusion(self):
        for w in (1.0, 20.0):
            for pc in (None, "jacobi"):
                self.compare(f"convdiff w={w:g}", convection_diffusion(40, w), "bicgstab", pc)

    def test_bicgstab_ani4(self):
        """BiCGSTAB's residual is erratic on ani4: rounding alone moves the first iterate under
        the tolerance by +-10% (SciPy's own count ranges 227..273 over random b), so the counts
        are compared summed over 6 right-hand sides (each within 35%: single counts
        spread 210..276 on both sides)."""
        A = sp.csr_matrix(scipy.io.mmread(matrix_path("ani4.mtx")))
        B = rng.uniform(-1.0, 1.0, (A.shape[0], 6))
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, name="ani4")
            for pc in (None, "jacobi"):
                res = kd.solve(info, B, method="bicgstab", preconditioner=pc, rtol=1e-8)
                M = sp.diags(1.0 / A.diagonal()) if pc == "jacobi" else None
                theirs = [scipy_iterations("bicgstab", A, B[:, c], 1e-8, M=M) for c in range(6)]
                print(f"  ani4 bicgstab {pc or 'none'}: krylovd {res.iterations}, scipy {theirs}")
                for c in range(6):
                    self.assertEqual(res.status[c], "converged", res.message[c])
                    self.assertLessEqual(relres(A, res.x[:, c], B[:, c]), 1.001e-8)
                    self.assertLessEqual(abs(res.iterations[c] - theirs[c]), 0.35 * theirs[c])
                self.assertLessEqual(abs(sum(res.iterations) - sum(theirs)), 0.1 * sum(theirs))

    def test_minres_indefinite(self):
        A = laplacian(30) - 0.1 * sp.identity(900)  # eigenvalues from -0.08 to 7.9
        self.assertLess(np.linalg.eigvalsh(A.toarray()).min(), 0.0)
        for pc in (None, "jacobi"):
            self.compare("laplacian - 0.1I", sp.csr_matrix(A), "minres", pc)
        self.compare("saddle point", saddle_point(20, 40), "minres", None)

    def test_minres_spd(self):
        self.compare("laplacian 40", laplacian(40), "minres", None)

    def test_several_rhs_x0_float32(self):
        A = convection_diffusion(30, 5.0)
        S = sp.csr_matrix(laplacian(30) - 1.07 * sp.identity(900))  # condition 202
        B = rng.uniform(-1.0, 1.0, (900, 3))
        with krylov.Client(daemon.address) as kd:
            for method, mat in (("bicgstab", A), ("minres", S)):
                info = kd.put(mat, name=method)
                res = kd.solve(info, B, method=method, rtol=1e-9)
                for c in range(3):
                    self.assertEqual(res.status[c], "converged")
                    self.assertLessEqual(relres(mat, res.x[:, c], B[:, c]), 1e-9)
                    alone = kd.solve(info, B[:, c], method=method, rtol=1e-9)
                    self.assertLessEqual(abs(alone.iterations - res.iterations[c]), 2)
                warm = kd.solve(info, B[:, 0], method=method, rtol=1e-9, x0=res.x[:, 0])
                self.assertLessEqual(warm.iterations, 1)
                info32 = kd.put(mat, name=method + "32", dtype="float32")
                b32 = B[:, 1].astype(np.float32)
                r32 = kd.solve(info32, b32, method=method, rtol=1e-5)
                self.assertEqual(r32.status, "converged", f"{method} float32: {r32.message}")
                # The system the server solved: A and b rounded to float32, x in float32.
                a32 = mat.astype(np.float32).astype(np.float64)
                rel = relres(a32, r32.x.astype(np.float64), b32.astype(np.float64))
                self.assertLessEqual(rel, 1.05e-5, f"{method} float32")

    def test_refusals(self):
        with krylov.Client(daemon.address) as kd:
            rect = kd.put(sp.random(30, 20, density=0.2, random_state=1, format="csr"))
            for method in ("bicgstab", "minres"):
                with self.assertRaises(krylov.KrylovError) as ctx:
                    kd.solve(rect, np.ones(30), method=method)
                self.assertIn("square", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
