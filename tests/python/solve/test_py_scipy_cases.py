"""SciPy's own iterative-solver test cases, rebuilt with the same seeds and driven through krylovd.

The real-valued cases of scipy/sparse/linalg/_isolve/tests/test_iterative.py (IterativeParams:
poisson1d, neg-poisson1d, poisson2d, rand-diag, rand, rand-sym, rand-sym-pd, nonsymposdef,
sym-nonpd, each in double and, where SciPy has one, single precision; test_maxiter, test_atol,
test_zero_rhs), of test_minres.py, test_lgmres.py and test_gcrotmk.py. SciPy's solvers map to
krylovd's methods: cg, bicgstab, gmres and minres run as themselves; cgs, bicg, qmr, tfqmr, lgmres
and gcrotmk have no krylovd method, so their matrices go to gmres. A case SciPy skips for a solver
is skipped here for its method.

krylovd passes what SciPy passes: every case is also solved by SciPy here (its own test's
expectation, checked as a sanity test of the rebuild), and krylovd's x is judged by the true
residual ||b - A x|| computed on the host with numpy in double, against SciPy's tolerance (1e-8
in double, 1e-2 in single). Where SciPy expects non-convergence (sym-nonpd for bicgstab), krylovd
either converges or says so with an honest status and ||b - A x|| <= ||b||, as SciPy asserts of
itself. What krylovd refuses (minres on test_minres's A with a zeroed row, which is not symmetric)
is a clear BAD_REQUEST naming the methods that take it, and that method then solves it.

GMRES on the nilpotent matrix of test_lgmres's test_breakdown_underdetermined reaches the
least-squares residual over the Krylov space, and its residual history never grows.
"""

import inspect
import unittest

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
from kd_daemon import shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())

# SciPy's solver names -> krylovd's method (the ones krylovd lacks run as gmres).
METHOD_OF = {"cg": "cg", "bicgstab": "bicgstab", "gmres": "gmres", "minres": "minres",
             "cgs": "gmres", "bicg": "gmres", "qmr": "gmres", "tfqmr": "gmres",
             "lgmres": "gmres", "gcrotmk": "gmres"}
SCIPY_SOLVERS = ["cg", "cgs", "bicg", "bicgstab", "gmres", "qmr", "minres", "lgmres", "gcrotmk",
                 "tfqmr"]
SYM = ["minres", "cg"]
POSDEF = ["cg"]
HONEST = ("breakdown", "max_iterations", "stagnated")


class Case:
    def __init__(self, name, A, b=None, skip=(), nonconvergence=()):
        self.name = name
        self.A = sp.csr_matrix(A)
        self.dtype = np.float32 if self.A.dtype == np.float32 else np.float64
        self.b = np.arange(A.shape[0], dtype=float) if b is None else np.asarray(b, dtype=float)
        self.skip = list(skip)
        self.nonconvergence = list(nonconvergence)

    def __repr__(self):
        return f"<{self.name} {np.dtype(self.dtype).name}>"

    def methods(self):
        """krylovd's methods for the SciPy solvers this case does not skip, with whether SciPy
        expects convergence (a method runs once: converging if any solver mapped to it must)."""
        out = {}
        for s in SCIPY_SOLVERS:
            if s in self.skip:
                continue
            m = METHOD_OF[s]
            out[m] = out.get(m, False) or s not in self.nonconvergence
        return out


def iterative_cases():
    """test_iterative.py's IterativeParams, real-valued cases only, in its order and seeds."""
    cases = []
    N = 40
    data = np.ones((3, N))
    data[0, :] = 2
    data[1, :] = -1
    data[2, :] = -1
    poisson1d = sp.spdiags(data, [0, -1, 1], N, N, format="csr")
    cases.append(Case("poisson1d", poisson1d))
    cases.append(Case("poisson1d", poisson1d.astype("f"), skip=["minres"]))
    cases.append(Case("neg-poisson1d", -poisson1d, skip=POSDEF))
    cases.append(Case("neg-poisson1d", (-poisson1d).astype("f"), skip=POSDEF + ["minres"]))
    poisson2d = sp.kronsum(poisson1d, poisson1d)
    cases.append(Case("poisson2d", poisson2d, skip=["minres"]))
    cases.append(Case("poisson2d", poisson2d.astype("f"), skip=["minres"]))
    data = np.array([[6, -5, 2, 7, -1, 10, 4, -3, -8, 9]], dtype="d")
    rand_diag = sp.spdiags(data, [0], 10, 10, format="csr")
    cases.append(Case("rand-diag", rand_diag, skip=POSDEF))
    cases.append(Case("rand-diag", rand_diag.astype("f"), skip=POSDEF))
    np.random.seed(1234)
    data = np.random.rand(4, 4)
    cases.append(Case("rand", data, skip=POSDEF + SYM))
    cases.append(Case("rand", data.astype("f"), skip=POSDEF + SYM))
    np.random.seed(1234)
    data = np.random.rand(4, 4)
    data = data + data.T
    cases.append(Case("rand-sym", data, skip=POSDEF))
    cases.append(Case("rand-sym", data.astype("f"), skip=POSDEF))
    np.random.seed(1234)
    data = np.random.rand(9, 9)
    data = np.dot(data.conj(), data.T)
    cases.append(Case("rand-sym-pd", data))
    cases.append(Case("rand-sym-pd", data.astype("f"), skip=["minres"]))
    data = np.ones((2, 10))
    data[0, :] = 2
    data[1, :] = -1
    A = sp.spdiags(data, [0, -1], 10, 10, format="csr")
    cases.append(Case("nonsymposdef", A, skip=SYM + ["cgs", "qmr", "bicg", "tfqmr"]))
    A = np.array([[0, 0, 0, 0, 0, 1, -1, -0, -0, -0, -0],
                  [0, 0, 0, 0, 0, 2, -0, -1, -0, -0, -0],
                  [0, 0, 0, 0, 0, 2, -0, -0, -1, -0, -0],
                  [0, 0, 0, 0, 0, 2, -0, -0, -0, -1, -0],
                  [0, 0, 0, 0, 0, 1, -0, -0, -0, -0, -1],
                  [1, 2, 2, 2, 1, 0, -0, -0, -0, -0, -0],
                  [-1, 0, 0, 0, 0, 0, -1, -0, -0, -0, -0],
                  [0, -1, 0, 0, 0, 0, -0, -1, -0, -0, -0],
                  [0, 0, -1, 0, 0, 0, -0, -0, -1, -0, -0],
                  [0, 0, 0, -1, 0, 0, -0, -0, -0, -1, -0],
                  [0, 0, 0, 0, -1, 0, -0, -0, -0, -0, -1]], dtype=float)
    b = np.array([0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0], dtype=float)
    cases.append(Case("sym-nonpd", A, b, skip=POSDEF,
                      nonconvergence=["cgs", "bicg", "bicgstab", "qmr", "tfqmr"]))
    return cases


def scipy_solve(name, A, b, tol, **kw):
    """SciPy's solver `name` with ||r|| <= tol ||b|| (its tol / rtol name differs by version)."""
    solver = getattr(spla, name)
    params = inspect.signature(solver).parameters
    key = "rtol" if "rtol" in params and "tol" not in params else "tol"
    if name != "minres":
        kw.setdefault("atol", 0.0)
    return solver(A, b, **{key: tol}, **kw)


def relres(A, x, b):
    """||b - A x|| / ||b|| on the host, in double."""
    A64 = sp.csr_matrix(A, dtype=np.float64)
    return np.linalg.norm(b - A64 @ np.asarray(x, dtype=np.float64)) / np.linalg.norm(b)


class ScipyCases(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kd = krylov.Client(daemon.address)
        cls.ids = {}

    @classmethod
    def tearDownClass(cls):
        cls.kd.close()

    def put(self, A, dtype):
        key = (id(A), np.dtype(dtype).name)
        if key not in self.ids:
            self.ids[key] = (A, self.kd.put(sp.csr_matrix(A), dtype=np.dtype(dtype).name))
        return self.ids[key][1]

    def solve(self, case, method, **kw):
        return self.kd.solve(self.put(case.A, case.dtype), case.b, method=method,
                             dtype=np.dtype(case.dtype).name, **kw)

    def test_convergence(self):
        """test_iterative's check_convergence: each case with each method SciPy expects to pass."""
        runs = 0
        for case in iterative_cases():
            tol = 1e-8 if case.dtype == np.float64 else 1e-2
            for method, converges in case.methods().items():
                with self.subTest(case=repr(case), method=method):
                    runs += 1
                    if method != "minres" or case.dtype == np.float64:
                        _, info = scipy_solve(method, case.A, case.b, tol)
                        self.assertEqual(info == 0, converges, "SciPy itself")
                    res = self.solve(case, method, rtol=tol)
                    got = relres(case.A, res.x, case.b)
                    if converges:
                        self.assertEqual(res.status, "converged", res.message)
                        self.assertLessEqual(got, tol * 1.001)
                    else:
                        self.assertIn(res.status, ("converged",) + HONEST)
                        self.assertLessEqual(got, 1.0)
                        if res.status == "converged":
                            self.assertLessEqual(got, tol * 1.001)
                        else:
                            self.assertTrue(res.message or res.status == "max_iterations")
        self.assertGreaterEqual(runs, 40)

    def test_nonsymposdef_bicgstab(self):
        """rho = r0hat'r = 0 at iteration 5: a fresh shadow residual, then convergence."""
        case = [c for c in iterative_cases() if c.name == "nonsymposdef"][0]
        for tol in (1e-5, 1e-8, 1e-12):
            res = self.solve(case, "bicgstab", rtol=tol)
            self.assertEqual(res.status, "converged", res.message)
            self.assertLessEqual(relres(case.A, res.x, case.b), tol * 1.001)
            self.assertLess(res.iterations, 30)

    def test_maxiter(self):
        """test_iterative's check_maxiter: maxiter = 1 at tol 1e-12 runs one iteration, not
        converged."""
        for case in iterative_cases():
            for method, converges in case.methods().items():
                if not converges:
                    continue
                with self.subTest(case=repr(case), method=method):
                    res = self.solve(case, method, rtol=1e-12, maxiter=1)
                    self.assertEqual(res.status, "max_iterations", res.message)
                    self.assertEqual(res.iterations, 1)

    def test_jacobi(self):
        """test_iterative's check_precond_dummy with M = diag(A)^-1 (krylovd's jacobi): the
        methods that take it converge; a diagonal jacobi cannot take is refused, saying why."""
        for case in iterative_cases():
            tol = 1e-8 if case.dtype == np.float64 else 1e-2
            d = case.A.diagonal()
            for method, converges in case.methods().items():
                if not converges:
                    continue
                with self.subTest(case=repr(case), method=method):
                    if np.any(d == 0) or (method in ("cg", "minres") and np.any(d < 0)):
                        with self.assertRaises(krylov.KrylovError) as cm:
                            self.solve(case, method, rtol=tol, preconditioner="jacobi")
                        self.assertRegex(str(cm.exception), "diagonal|positive")
                        continue
                    res = self.solve(case, method, rtol=tol, preconditioner="jacobi")
                    self.assertEqual(res.status, "converged", res.message)
                    self.assertLessEqual(relres(case.A, res.x, case.b), tol * 1.001)

    def test_atol(self):
        """test_iterative's test_atol: A = R R' + 10 I, b = 1e3 rand; ||r|| <= atol with rtol 0."""
        np.random.seed(1234)
        A = np.random.rand(10, 10)
        A = A.dot(A.T) + 10 * np.eye(10)
        b = 1e3 * np.random.rand(10)
        kid = self.kd.put(sp.csr_matrix(A))
        for method in ("cg", "bicgstab", "gmres", "minres"):
            for atol in (1e-2, 1e-6, 1e-9):
                with self.subTest(method=method, atol=atol):
                    res = self.kd.solve(kid, b, method=method, rtol=0.0, atol=atol)
                    self.assertEqual(res.status, "converged", res.message)
                    self.assertLessEqual(np.linalg.norm(b - A @ res.x), atol * 1.001)

    def test_zero_rhs(self):
        """test_iterative's test_zero_rhs: b = 0 gives x = 0, converged, for every method."""
        np.random.seed(1234)
        A = np.random.rand(10, 10)
        A = A.dot(A.T) + 10 * np.eye(10)
        kid = self.kd.put(sp.csr_matrix(A))
        for method in ("cg", "bicgstab", "gmres", "minres"):
            res = self.kd.solve(kid, np.zeros(10), method=method, x0=np.ones(10))
            self.assertEqual(res.status, "converged")
            np.testing.assert_array_equal(res.x, np.zeros(10))


def minres_problem():
    """test_minres.py's get_sample_problem: a random symmetric 10 x 10 and b, seed 1234."""
    np.random.seed(1234)
    matrix = np.random.rand(10, 10)
    matrix = matrix + matrix.T
    vector = np.random.rand(10)
    return matrix, vector


class ScipyMinres(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)

    def tearDown(self):
        self.kd.close()

    def test_singular(self):
        """A[0, :] = 0 leaves A nonsymmetric: krylovd's minres refuses it (SciPy runs it with
        check=False), naming gmres, which then solves it to SciPy's 1e-5."""
        A, b = minres_problem()
        A[0, :] = 0
        b[0] = 0
        with self.assertRaises(krylov.KrylovError) as cm:
            self.kd.solve(sp.csr_matrix(A), b, method="minres")
        self.assertIn("symmetric", str(cm.exception))
        self.assertIn("gmres", str(cm.exception))
        res = self.kd.solve(sp.csr_matrix(A), b, method="gmres", rtol=1e-5)
        self.assertEqual(res.status, "converged", res.message)
        self.assertLessEqual(relres(A, res.x, b), 1e-5 * 1.001)

    def test_shift(self):
        """minres(A, b, shift=0.5) equals minres(A - 0.5 I, b): krylovd has no shift, so the
        shifted matrix; x agrees with SciPy's to its 1e-5."""
        A, b = minres_problem()
        x1, info1 = spla.minres(A, b, shift=0.5)
        self.assertEqual(info1, 0)
        res = self.kd.solve(sp.csr_matrix(A - 0.5 * np.eye(10)), b, method="minres", rtol=1e-10)
        self.assertEqual(res.status, "converged", res.message)
        np.testing.assert_allclose(res.x, x1, rtol=1e-5)

    def test_x0(self):
        """test_minres_non_default_x0 and test_x0_is_used_by: a random x0 is used and the
        solve reaches 1e-6."""
        np.random.seed(1234)
        a = np.random.randn(5, 5)
        a = np.dot(a, a.T)
        b = np.random.randn(5)
        c = np.random.randn(5)
        res = self.kd.solve(sp.csr_matrix(a), b, method="minres", x0=c, rtol=1e-6)
        self.assertEqual(res.status, "converged", res.message)
        self.assertLessEqual(relres(a, res.x, b), 1e-6 * 1.001)

    def test_exact_x0(self):
        """test_minres_precond_exact_x0: A = I, x0 = b is the solution: 0 iterations."""
        res = self.kd.solve(sp.identity(10, format="csr"), np.ones(10), method="minres",
                            x0=np.ones(10), rtol=1e-6)
        self.assertEqual(res.status, "converged")
        self.assertEqual(res.iterations, 0)
        np.testing.assert_allclose(res.x, np.ones(10))


# test_lgmres.py's and test_gcrotmk.py's matrix and right-hand side.
AM = sp.csr_matrix(np.array([[-2, 1, 0, 0, 0, 9],
                             [1, -2, 1, 0, 5, 0],
                             [0, 1, -2, 1, 0, 0],
                             [0, 0, 1, -2, 1, 0],
                             [0, 3, 0, 1, -2, 1],
                             [1, 0, 0, 0, 1, -2]], dtype=float))
AM_B = np.array([1, 2, 3, 4, 5, 6], dtype=float)
NILPOTENT = np.array([[0, 1, 1, 1],
                      [0, 0, 1, 1],
                      [0, 0, 0, 1],
                      [0, 0, 0, 0]], dtype=float)


class ScipyGmresCases(unittest.TestCase):
    """test_lgmres.py and test_gcrotmk.py, their lgmres and gcrotmk mapped to krylovd's gmres."""

    def setUp(self):
        self.kd = krylov.Client(daemon.address)

    def tearDown(self):
        self.kd.close()

    def test_do_solve(self):
        """do_solve: Am x = b to 1e-12 (SciPy asks 1e-14 of a 6 x 6, krylovd's double too)."""
        for restart in (6, 30):
            res = self.kd.solve(AM, AM_B, method="gmres", rtol=1e-14, restart=restart)
            self.assertEqual(res.status, "converged", res.message)
            np.testing.assert_allclose(AM @ res.x, AM_B, rtol=1e-12, atol=1e-12)

    def test_arnoldi(self):
        """test_arnoldi (both files' seeds): one cycle of GMRES(15) is SciPy's gmres(restart=15,
        maxiter=1): not converged, ||r|| > 1e-4, x equal to SciPy's."""
        for seed in (1234, 1):
            np.random.seed(seed)
            A = sp.eye(2000) + sp.rand(2000, 2000, density=5e-4)
            b = np.random.rand(2000)
            x1, flag1 = scipy_solve("gmres", A, b, 1e-5, restart=15, maxiter=1,
                                    x0=np.zeros(2000))
            self.assertEqual(flag1, 1)
            res = self.kd.solve(sp.csr_matrix(A), b, method="gmres", restart=15, maxiter=15,
                                rtol=1e-5)
            self.assertEqual(res.status, "max_iterations", res.message)
            self.assertGreater(np.linalg.norm(A @ res.x - b), 1e-4)
            np.testing.assert_allclose(res.x, x1, rtol=1e-7, atol=1e-9)

    def test_cornercase(self):
        """test_cornercase: A = 2 I, b ones or random, n = 3, 5, 10, 100: converged, residual
        below 1e-14; with tol 0 either converged or an honest status."""
        np.random.seed(1234)
        for n in (3, 5, 10, 100):
            A = 2 * sp.identity(n, format="csr")
            for b in (np.ones(n), np.random.rand(n)):
                res = self.kd.solve(A, b, method="gmres", maxiter=10)
                self.assertEqual(res.status, "converged", res.message)
                np.testing.assert_allclose(A @ res.x - b, 0, atol=1e-14)
                res = self.kd.solve(A, b, method="gmres", rtol=0.0, maxiter=10)
                self.assertIn(res.status, ("converged",) + HONEST)
                np.testing.assert_allclose(A @ res.x - b, 0, atol=1e-14)

    def test_nans(self):
        """test_nans: a NaN in A is not a solution (SciPy's info 1): krylovd says non_finite."""
        A = sp.lil_matrix(sp.eye(3))
        A[1, 1] = np.nan
        res = self.kd.solve(sp.csr_matrix(A), np.ones(3), method="gmres", rtol=0.0, maxiter=10)
        self.assertEqual(res.status, "non_finite")

    def test_breakdown_underdetermined(self):
        """test_breakdown_underdetermined: nilpotent A, four b. x reaches the least-squares
        residual over the Krylov space (SciPy's lstsq), and the residual history (every
        iteration) never grows, in double and single precision."""
        A = sp.csr_matrix(NILPOTENT)
        for b in (np.array([1, 1, 1, 1.0]), np.array([1, 1, 1, 0.0]), np.array([1, 1, 0, 0.0]),
                  np.array([1, 0, 0, 0.0])):
            K = np.c_[b, NILPOTENT @ b, NILPOTENT @ NILPOTENT @ b,
                      NILPOTENT @ NILPOTENT @ NILPOTENT @ b]
            y = np.linalg.lstsq(NILPOTENT @ K, b, rcond=-1)[0]
            best = np.linalg.norm(NILPOTENT @ (K @ y) - b)
            for dtype, slack in (("float64", 1e-7), ("float32", 1e-4)):
                with self.subTest(b=b, dtype=dtype):
                    res = self.kd.solve(self.kd.put(A, dtype=dtype), b, method="gmres",
                                        maxiter=12, check_every=1, history=True, dtype=dtype)
                    self.assertIn(res.status, ("converged", "breakdown"), res.message)
                    got = np.linalg.norm(NILPOTENT @ res.x - b)
                    np.testing.assert_allclose(got, best, rtol=slack, atol=slack)
                    h = np.asarray(res.history)
                    self.assertTrue(np.all(np.diff(h) <= slack * h[0]), h)
                    self.assertLessEqual(res.residual, h[0] * (1 + slack))

    def test_breakdown_with_outer_v(self):
        """test_breakdown_with_outer_v's 2 x 2 (no outer vectors here: plain GMRES solves it)."""
        A = np.array([[1, 2], [3, 4]], dtype=float)
        b = np.array([1, 2], dtype=float)
        res = self.kd.solve(sp.csr_matrix(A), b, method="gmres", rtol=1e-12)
        self.assertEqual(res.status, "converged", res.message)
        np.testing.assert_allclose(res.x, np.linalg.solve(A, b), atol=1e-12)

    def test_denormals(self):
        """test_denormals: A scaled to subnormals; if it converges, A x = b, else an honest
        status (SciPy accepts either)."""
        A = np.array([[1, 2], [3, 4]], dtype=float) * (100 * np.nextafter(0, 1))
        res = self.kd.solve(sp.csr_matrix(A), np.array([1.0, 1.0]), method="gmres")
        if res.status == "converged":
            np.testing.assert_allclose(A.dot(res.x), [1.0, 1.0])
        else:
            self.assertIn(res.status, HONEST + ("non_finite",))
            self.assertTrue(res.message)

    def test_truncate(self):
        """test_gcrotmk's test_truncate matrix: rand(30, 30) + I, seed 1234, to 1e-8. Full GMRES
        (restart 30) converges; GMRES(10) stagnates near 0.3 in SciPy too (gcrotmk's recycling
        is what its test exercises): an honest max_iterations, never a worse x than x0."""
        np.random.seed(1234)
        A = np.random.rand(30, 30) + np.eye(30)
        b = np.random.rand(30)
        kid = self.kd.put(sp.csr_matrix(A))
        res = self.kd.solve(kid, b, method="gmres", restart=30, rtol=1e-8)
        self.assertEqual(res.status, "converged", res.message)
        self.assertLessEqual(relres(A, res.x, b), 1e-8 * 1.001)
        _, info = scipy_solve("gmres", A, b, 1e-8, restart=10, maxiter=30)
        self.assertNotEqual(info, 0)
        res = self.kd.solve(kid, b, method="gmres", restart=10, maxiter=300, rtol=1e-8)
        self.assertIn(res.status, HONEST)
        self.assertLess(relres(A, res.x, b), 1.0)


if __name__ == "__main__":
    unittest.main()
