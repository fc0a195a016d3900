"""General (nonsymmetric) systems through the Python client and a real krylovd: matrix.info's
`symmetric` (exact, from the upload's scan) against SciPy's own A - A^T on real matrices, the clear
BAD_REQUEST for the symmetric-only methods on a nonsymmetric matrix (naming an entry that SciPy
confirms is asymmetric, and only methods the server has), the server still serving after it,
method "auto" and the reply's method, `restart` on the wire and its range, and ResidentOperator
taking the server's symmetry.
"""

import re
import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp

import krylov
from krylov.scipy import ResidentOperator
from kd_daemon import matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())

SYMMETRIC_ONLY = ("cg", "pcg", "sd", "cg1")


def load(name):
    return sp.csr_matrix(scipy.io.mmread(matrix_path(name)))


def exactly_symmetric(A):
    """The pattern exactly, the values to rounding (256 ulps of float64, as the server's scan)."""
    A = sp.csr_matrix(A)
    T = sp.csr_matrix(A.T)
    A.sort_indices()
    T.sort_indices()
    if not (A.shape == T.shape and np.array_equal(A.indptr, T.indptr)
            and np.array_equal(A.indices, T.indices)):
        return False
    scale = np.maximum(np.abs(A.data), np.abs(T.data))
    return bool(np.all(np.abs(A.data - T.data) <= 256 * np.finfo(np.float64).eps * scale))


class TestGeneralSystems(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)

    def tearDown(self):
        self.kd.close()

    def test_symmetric_flag_matches_scipy(self):
        for name in ("494_bus.mtx", "dwt_878.mtx", "watt_2.mtx", "ani4.mtx", "bayer10.mtx"):
            A = load(name)
            info = self.kd.put(A)
            self.assertIs(info.symmetric, exactly_symmetric(A), name)
            self.assertIs(self.kd.info(info.id).symmetric, exactly_symmetric(A), name)
        # ani4 differs from its transpose by 7.8e-15 relative at most: symmetric to rounding
        self.assertTrue(self.kd.info(self.kd.put(load("ani4.mtx")).id).symmetric)
        # a reordered matrix reports its client matrix's flag
        for name in ("494_bus.mtx", "watt_2.mtx"):
            A = load(name)
            info = self.kd.put(A, reorder="rcm", name=name + " rcm", dtype="float32")
            self.assertEqual(info.reorder, "rcm")
            self.assertIs(info.symmetric, exactly_symmetric(A), name)

    def test_symmetric_only_methods_refuse_a_nonsymmetric_matrix(self):
        A = load("watt_2.mtx")
        info = self.kd.put(A)
        self.assertIs(info.symmetric, False)
        b = rng.uniform(-1, 1, A.shape[0])
        for method in SYMMETRIC_ONLY:
            with self.assertRaises(krylov.BadRequest) as e:
                self.kd.solve(info, b, method=method)
            msg = str(e.exception)
            self.assertIn(f"method {'cg' if method == 'pcg' else method} needs a symmetric "
                          "matrix; this one is not", msg)
            m = re.search(r"\(a\[(\d+)\]\[(\d+)\] = (\S+) but a\[(\d+)\]\[(\d+)\] "
                          r"(?:= (\S+)|is not stored)\)", msg)
            self.assertIsNotNone(m, msg)
            i, j = int(m.group(1)), int(m.group(2))
            self.assertEqual((int(m.group(4)), int(m.group(5))), (j, i))
            self.assertNotEqual(A[i, j], A[j, i])  # SciPy agrees the entry is asymmetric
            self.assertEqual(A[i, j], float(m.group(3)))
            tail = msg.split("): ", 1)[1]
            self.assertTrue(tail.startswith("use ") or "no method for nonsymmetric" in tail, msg)
            for listed in re.split(r", | or ", tail[4:]) if tail.startswith("use ") else []:
                self.assertNotIn(listed, SYMMETRIC_ONLY, msg)
        # the server keeps serving: an spmv on the same matrix and a solve on a symmetric one
        x = rng.uniform(-1, 1, A.shape[0])
        y = self.kd.spmv(info, x)
        self.assertLessEqual(np.max(np.abs(y - A @ x)) / np.max(np.abs(A @ x)), 1e-12)
        S = load("494_bus.mtx")
        r = self.kd.solve(self.kd.put(S), np.ones(S.shape[0]), method="cg", rtol=1e-8)
        self.assertEqual(r.status, "converged")

    def test_auto(self):
        S = load("494_bus.mtx")
        info = self.kd.put(S)
        self.assertIs(info.symmetric, True)
        b = rng.uniform(-1, 1, S.shape[0])
        auto = self.kd.solve(info, b, method="auto", rtol=1e-8)
        self.assertEqual(auto.method, "cg")
        self.assertEqual(auto.preconditioner, "none")
        cg = self.kd.solve(info, b, method="cg", rtol=1e-8)
        self.assertEqual((auto.status, auto.iterations), (cg.status, cg.iterations))
        self.assertLessEqual(np.linalg.norm(b - S @ auto.x) / np.linalg.norm(b), 1e-8)
        jac = self.kd.solve(info, b, method="auto", preconditioner="jacobi", rtol=1e-8)
        self.assertEqual((jac.method, jac.preconditioner), ("cg", "jacobi"))
        pcg = self.kd.solve(info, b, method="pcg", rtol=1e-8)
        self.assertEqual((pcg.method, pcg.preconditioner, pcg.iterations),
                         ("cg", "jacobi", jac.iterations))
        # on a nonsymmetric matrix auto picks gmres, and solves it as gmres does
        N = load("watt_2.mtx")
        nid = self.kd.put(N)
        r = self.kd.solve(nid, np.ones(N.shape[0]), method="auto", preconditioner="ilu0")
        self.assertEqual((r.method, r.status), ("gmres", "converged"))
        g = self.kd.solve(nid, np.ones(N.shape[0]), method="gmres", preconditioner="ilu0")
        self.assertEqual(r.iterations, g.iterations)
        self.assertLessEqual(np.linalg.norm(np.ones(N.shape[0]) - N @ r.x) / np.sqrt(N.shape[0]),
                             1e-8)

    def test_auto_goes_on_when_cg_breaks_down(self):
        # can___24 (a pattern file: ones, positive diagonal) looks SPD but is indefinite: cg
        # breaks down, so auto runs minres and says why; SciPy's minres agrees on x
        A = load("can___24.mtx")
        info = self.kd.put(A)
        b = rng.uniform(-1, 1, A.shape[0])
        cg = self.kd.solve(info, b, method="cg")
        self.assertEqual(cg.status, "breakdown")
        r = self.kd.solve(info, b, method="auto", rtol=1e-10)
        self.assertEqual((r.method, r.status), ("minres", "converged"))
        self.assertIn("auto: cg broke down at iteration", r.message)
        self.assertIn("minres ran instead", r.message)
        self.assertLessEqual(np.linalg.norm(b - A @ r.x) / np.linalg.norm(b), 1e-10)
        x_ref = np.linalg.solve(A.toarray(), b)
        self.assertLessEqual(np.linalg.norm(r.x - x_ref) / np.linalg.norm(x_ref), 1e-6)
        # several right-hand sides: every column goes to minres
        B = rng.uniform(-1, 1, (A.shape[0], 3))
        rs = self.kd.solve(info, B, method="auto", rtol=1e-10)
        self.assertEqual(rs.method, "minres")
        self.assertTrue(all(s == "converged" for s in rs.status))

    def test_restart_on_the_wire(self):
        S = load("494_bus.mtx")
        info = self.kd.put(S)
        b = np.ones(S.shape[0])
        # cg ignores restart; the request is valid over 1..200
        for m in (1, 30, 200):
            r = self.kd.solve(info, b, method="cg", restart=m, rtol=1e-6)
            self.assertEqual(r.status, "converged")
        for m, needle in ((201, "restart = 201"), (-1, "restart must be >= 0")):
            with self.assertRaises(krylov.BadRequest) as e:
                self.kd.solve(info, b, restart=m)
            self.assertIn(needle, str(e.exception))
        with self.assertRaises(krylov.BadRequest) as e:
            self.kd.solve(info, b, method="no-such-method")
        self.assertIn("unknown method 'no-such-method'", str(e.exception))

    def test_operator_takes_the_servers_symmetry(self):
        S, N = load("494_bus.mtx"), load("watt_2.mtx")
        sym = ResidentOperator(self.kd, self.kd.put(S).id)
        gen = ResidentOperator(self.kd, self.kd.put(N).id)
        self.assertTrue(sym.symmetric)
        self.assertFalse(gen.symmetric)
        v = rng.uniform(-1, 1, S.shape[0])
        self.assertLessEqual(np.max(np.abs(sym.rmatvec(v) - S.T @ v)) / np.max(np.abs(S @ v)),
                             1e-12)
        with self.assertRaises(NotImplementedError):
            gen.rmatvec(rng.uniform(-1, 1, N.shape[0]))
        # an explicit symmetric= still wins
        self.assertFalse(ResidentOperator(self.kd, self.kd.put(S).id, symmetric=False).symmetric)


if __name__ == "__main__":
    unittest.main()
