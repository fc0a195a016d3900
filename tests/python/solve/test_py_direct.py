"""Method "direct" end to end (issue 37; docs/PROTOCOL.md, "Direct solves"): a real krylovd, the
Python client, SciPy's spsolve as the reference on the same right-hand sides.

- The real square matrices of tests/matrices that are nonsingular (adder_dcop_05, bayer10,
  watt_2, ani4, young1c's real part, arrow, 494_bus): three right-hand sides b = A X_true in one
  request, each column's true ||b - A x|| / ||b|| <= 1e-10 computed here in double, x within
  reach of spsolve's; the first solve factors (analysis and factorisation times), the second
  reuses the kept factor (factored False, no factorisation time) and answers the same x.
- The choice: cholmod for a symmetric matrix with a positive diagonal (494_bus, ani4), klu for the
  others; direct_options.solver selects umfpack or klu, replacing the held factor.
- Singular matrices (rajat01, dwt_878, a constructed one with an empty column): status
  "singular" with the reason, never max_iterations.
- A matrix kept reordered (rcm) is factored in the client's order.
- float32: factored in double, x returned in float32.
- Refusals: a factor over --factor-memory (TOO_LARGE naming the estimate and the budget, before
  the factorisation: SpMV and cg still answered), bad direct_options (BAD_REQUEST naming what is
  wrong), a preconditioner with direct, cholmod on a nonsymmetric matrix.
- A time step (put with like, then a direct solve) refactors on the like matrix's analysis and
  says so (klu: the factor moves; umfpack: the like matrix keeps its own); new values that the
  kept pivots cannot take are factored afresh, and the note says why.
- An SpMV and a cg solve on another matrix are answered while a large factorisation runs.
"""

import threading
import time
import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as sla

import krylov
from kd_daemon import Daemon, laplacian, matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())

NONSINGULAR = ["adder_dcop_05", "bayer10", "watt_2", "ani4", "young1c", "arrow", "494_bus"]


def load(name):
    A = scipy.io.mmread(matrix_path(name + ".mtx"))
    if np.iscomplexobj(A.data):
        A = A.real  # young1c: krylovd solves real systems
    return sp.csr_matrix(A, dtype=np.float64)


def relres(A, B, X):
    """Each column's ||b - A x|| / ||b||."""
    R = B - A @ X
    return np.linalg.norm(R, axis=0) / np.linalg.norm(B, axis=0)


def laplacian3d(n):
    T = sp.diags([-np.ones(n - 1), 2 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
    eye = sp.identity(n)
    return sp.csr_matrix(sp.kron(sp.kron(T, eye), eye) + sp.kron(sp.kron(eye, T), eye) +
                         sp.kron(sp.kron(eye, eye), T))


class Direct(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kd = krylov.Client(daemon.address)

    @classmethod
    def tearDownClass(cls):
        cls.kd.close()

    def test_matrices_against_spsolve(self):
        for name in NONSINGULAR:
            with self.subTest(matrix=name):
                A = load(name)
                n = A.shape[0]
                X_true = rng.uniform(-1, 1, (n, 3))
                B = A @ X_true
                kid = self.kd.put(A)
                first = self.kd.solve(kid, B, method="direct", rtol=1e-12)
                self.assertEqual(first.method, "direct")
                self.assertEqual(list(first.status), ["converged"] * 3, first.message)
                truth = relres(A, B, first.x)
                self.assertTrue(np.all(truth <= 1e-10), f"{name}: {truth}")
                np.testing.assert_allclose(first.relative_residual, truth, rtol=0.5, atol=1e-13)
                d = first.direct
                self.assertTrue(d["factored"])
                # the server's scan: symmetric to rounding (ani4), a positive diagonal
                spd_looking = kid.symmetric and np.all(A.diagonal() > 0)
                self.assertEqual(d["solver"], "cholmod" if spd_looking else "klu", d["note"])
                self.assertGreater(d["factor_entries"], 0)
                self.assertGreater(d["factor_bytes"], 0)
                self.assertAlmostEqual(d["fill"], d["factor_entries"] / A.nnz, places=6)
                self.assertGreater(d["factor_ms"], 0.0)
                self.assertGreater(d["analyze_ms"], 0.0)
                # SciPy on the same host and columns: both solve to rounding
                ref = sla.spsolve(A.tocsc(), B)
                self.assertTrue(np.all(relres(A, B, ref) <= 1e-8))
                err = np.linalg.norm(first.x - ref) / np.linalg.norm(ref)
                self.assertLess(err, 1e-4, name)  # watt_2's condition ~1e12 bounds this
                # the factor is kept: triangular solves only, the same answer
                again = self.kd.solve(kid, B, method="direct", rtol=1e-12)
                self.assertFalse(again.direct["factored"])
                self.assertEqual(again.direct["factor_ms"], 0.0)
                self.assertEqual(again.direct["analyze_ms"], 0.0)
                self.assertEqual(again.direct["factor_entries"], d["factor_entries"])
                np.testing.assert_array_equal(again.x, first.x)
                # one column alone is a plain reply
                one = self.kd.solve(kid, B[:, 0], method="direct")
                self.assertEqual(one.status, "converged")
                self.assertLessEqual(relres(A, B[:, :1], one.x[:, None])[0], 1e-10)

    def test_status_lists(self):
        st = self.kd.status()
        solvers = st.raw["solvers"]
        self.assertIn("direct", solvers["methods"])
        self.assertEqual(set(solvers["direct_solvers"]), {"klu", "umfpack", "cholmod"})
        self.assertGreater(st.raw["factor_budget_bytes"], 0)
        self.assertGreaterEqual(st.raw["factor_bytes_used"], 0)

    def test_solver_choice(self):
        A = load("watt_2")
        b = A @ rng.uniform(-1, 1, A.shape[0])
        kid = self.kd.put(A)
        res = self.kd.solve(kid, b, method="direct", direct_options={"solver": "umfpack"})
        self.assertEqual(res.direct["solver"], "umfpack")
        self.assertTrue(res.direct["factored"])
        self.assertLessEqual(relres(A, b[:, None], res.x[:, None])[0], 1e-10)
        # without a choice the held factor serves, whichever it is
        res = self.kd.solve(kid, b, method="direct")
        self.assertEqual(res.direct["solver"], "umfpack")
        self.assertFalse(res.direct["factored"])
        # another library replaces it
        res = self.kd.solve(kid, b, method="direct", direct_options={"solver": "klu"})
        self.assertEqual(res.direct["solver"], "klu")
        self.assertTrue(res.direct["factored"])
        # cholmod explicitly on an SPD matrix
        S = load("494_bus")
        sid = self.kd.put(S)
        bs = S @ rng.uniform(-1, 1, S.shape[0])
        res = self.kd.solve(sid, bs, method="direct", direct_options={"solver": "cholmod"})
        self.assertEqual(res.direct["solver"], "cholmod")
        self.assertLessEqual(relres(S, bs[:, None], res.x[:, None])[0], 1e-10)

    def step(self, A, k):
        """A time step's matrix: A's pattern, values a_ij (1 + 0.01 k sin(i j + i + j))."""
        C = A.tocoo()
        f = 1.0 + 0.01 * k * np.sin(C.row * C.col + C.row + C.col)
        return sp.csr_matrix((C.data * f, (C.row, C.col)), shape=A.shape)

    def test_time_step(self):
        """put with like, then a direct solve: refactored on the like matrix's analysis, and
        the reply says so; klu's factor moves from the like matrix, umfpack's stays."""
        for solver, name in (("klu", "bayer10"), ("umfpack", "adder_dcop_05")):
            with self.subTest(solver=solver):
                A = load(name) * 5.0  # its own content: not the matrix other tests factored
                opts = {"solver": solver}
                kid = self.kd.put(A)
                b = A @ rng.uniform(-1, 1, A.shape[0])
                first = self.kd.solve(kid, b, method="direct", direct_options=opts)
                self.assertTrue(first.direct["factored"])
                self.assertFalse(first.direct["refactored"])
                prev, prev_id = A, kid
                for k in (1, 2, 3):
                    Ak = self.step(A, k)
                    sid = self.kd.put(Ak, like=prev_id)
                    bk = Ak @ rng.uniform(-1, 1, A.shape[0])
                    res = self.kd.solve(sid, bk, method="direct", direct_options=opts)
                    self.assertEqual(res.status, "converged", res.message)
                    self.assertTrue(res.direct["refactored"], res.direct["note"])
                    self.assertEqual(res.direct["analyze_ms"], 0.0)
                    self.assertIn("refactored on the analysis of matrix " + prev_id.id,
                                  res.direct["note"])
                    self.assertLessEqual(relres(Ak, bk[:, None], res.x[:, None])[0], 1e-10)
                    again = self.kd.solve(prev_id, prev @ np.ones(A.shape[0]),
                                          method="direct", direct_options=opts)
                    # klu's factor moved to the new matrix; umfpack's like keeps its own
                    self.assertEqual(again.direct["factored"], solver == "klu")
                    prev, prev_id = Ak, sid

    def test_time_step_declined(self):
        """New values the kept pivot order cannot take: factored afresh, and said."""
        A = sp.csr_matrix(np.array([[10.0, 1.0], [1.0, 1.0]]))
        kid = self.kd.put(A)
        self.kd.solve(kid, np.ones(2), method="direct", direct_options={"solver": "klu"})
        A2 = sp.csr_matrix(np.array([[1e-14, 1.0], [1.0, 1.0]]))
        sid = self.kd.put(A2, like=kid)
        res = self.kd.solve(sid, A2 @ np.ones(2), method="direct",
                            direct_options={"solver": "klu"})
        self.assertEqual(res.status, "converged")
        self.assertFalse(res.direct["refactored"])
        self.assertTrue(res.direct["factored"])
        self.assertIn("refactor declined", res.direct["note"])
        np.testing.assert_allclose(res.x, [1.0, 1.0], rtol=1e-8)

    def test_reordered(self):
        """A matrix the server keeps reordered (rcm) is factored in the client's order: b and x
        are the client's."""
        A = load("watt_2") * 3.0  # content of its own: not the copy other tests put unordered
        b = A @ rng.uniform(-1, 1, A.shape[0])
        kid = self.kd.put(A, reorder="rcm", name="watt_2 rcm")
        self.assertEqual(kid.reorder, "rcm")
        res = self.kd.solve(kid, b, method="direct")
        self.assertEqual(res.status, "converged", res.message)
        self.assertLessEqual(relres(A, b[:, None], res.x[:, None])[0], 1e-10)

    def test_singular(self):
        for name in ("rajat01", "dwt_878"):
            with self.subTest(matrix=name):
                A = load(name)
                kid = self.kd.put(A)
                b = rng.uniform(-1, 1, A.shape[0])
                res = self.kd.solve(kid, b, method="direct")
                self.assertEqual(res.status, "singular", res.message)
                self.assertIn("singular", res.message)
                self.assertNotEqual(res.status, "max_iterations")
                self.assertTrue(np.all(res.x == 0))
        # structurally singular: column 1 is empty
        A = sp.csr_matrix(np.array([[1.0, 0, 0], [2.0, 0, 0], [0, 0, 3.0]]))
        kid = self.kd.put(A)
        res = self.kd.solve(kid, np.ones(3), method="direct")
        self.assertEqual(res.status, "singular")
        self.assertIn("structurally singular", res.message)
        res = self.kd.solve(kid, np.ones((3, 2)), method="direct",
                            direct_options={"solver": "umfpack"})
        self.assertEqual(list(res.status), ["singular", "singular"])

    def test_float32(self):
        A = load("ani4")
        b = A @ rng.uniform(-1, 1, A.shape[0])
        kid = self.kd.put(A, dtype="float32")
        res = self.kd.solve(kid, b, method="direct", dtype="float32")
        self.assertEqual(res.x.dtype, np.float32)
        self.assertEqual(res.status, "converged", res.message)
        # the float32 matrix's values, factored in double: its residual before x is rounded
        self.assertLessEqual(res.relative_residual, 1e-10)
        A32 = sp.csr_matrix(A.astype(np.float32), dtype=np.float64)
        ref = sla.spsolve(A32.tocsc(), b.astype(np.float32).astype(np.float64))
        np.testing.assert_allclose(res.x, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())

    def test_bad_options(self):
        A = load("watt_2")
        kid = self.kd.put(A)
        b = np.ones(A.shape[0])
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(kid, b, method="direct", direct_options={"solver": "superlu"})
        self.assertIn("unknown solver 'superlu'", cm.exception.message)
        self.assertIn("klu, umfpack, cholmod", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(kid, b, method="direct", direct_options={"ordering": "amd"})
        self.assertIn("unknown option 'ordering'", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(kid, b, method="direct", direct_options={"solver": 3})
        self.assertIn("solver must be a str", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(kid, b, method="gmres", direct_options={"solver": "klu"})
        self.assertIn("direct_options is for method \"direct\"", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(kid, b, method="direct", preconditioner="jacobi")
        self.assertIn("takes no preconditioner", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(kid, b, method="direct", direct_options={"solver": "cholmod"})
        self.assertIn("cholmod needs a symmetric matrix", cm.exception.message)

    def test_spmv_beside_factorisation(self):
        """SpMVs and Krylov solves on another matrix wait for no factorisation: answered while a
        3-D Laplacian's factor (a second or more on two cores) is computed."""
        big = laplacian3d(24)  # 13,824 rows: klu's 3-D fill makes this take seconds
        small = laplacian(16)
        big_id = self.kd.put(big)
        small_id = self.kd.put(small)
        x = rng.standard_normal(small.shape[0])
        self.kd.spmv(small_id, x)  # its kernels built
        self.kd.solve(small_id, x, method="cg")
        done = {}

        def factor():
            with krylov.Client(daemon.address) as c:
                done["res"] = c.solve(big_id, np.ones(big.shape[0]), method="direct",
                                      direct_options={"solver": "klu"})

        worker = threading.Thread(target=factor)
        worker.start()
        time.sleep(0.2)
        spmv_s, solve_s = [], []
        while worker.is_alive():
            t = time.perf_counter()
            y = self.kd.spmv(small_id, x)
            spmv_s.append(time.perf_counter() - t)
            np.testing.assert_allclose(y, small @ x, rtol=1e-12)
            t = time.perf_counter()
            res = self.kd.solve(small_id, x, method="cg", rtol=1e-10)
            solve_s.append(time.perf_counter() - t)
            self.assertEqual(res.status, "converged")
            self.assertLessEqual(relres(small, x[:, None], res.x[:, None])[0], 1.1e-10)
            time.sleep(0.02)
        worker.join()
        res = done["res"]
        self.assertEqual(res.status, "converged", res.message)
        factor_s = (res.direct["analyze_ms"] + res.direct["factor_ms"]) / 1e3
        print(f"\nfactorisation {factor_s:.2f} s; meanwhile {len(spmv_s)} spmv, worst "
              f"{max(spmv_s or [0]) * 1e3:.1f} ms, and {len(solve_s)} cg solves, worst "
              f"{max(solve_s or [0]) * 1e3:.1f} ms")
        if factor_s > 0.5:  # long enough for requests to land inside it
            self.assertGreater(len(spmv_s), 3)
            self.assertLess(max(spmv_s), max(0.25, factor_s / 4))
            self.assertLess(max(solve_s), max(0.5, factor_s / 2))


class Budget(unittest.TestCase):
    def test_refused_before_factorisation(self):
        with Daemon("--factor-memory", "64K") as d, krylov.Client(d.address) as kd:
            A = load("bayer10")
            kid = kd.put(A)
            b = np.ones(A.shape[0])
            with self.assertRaises(krylov.TooLarge) as cm:
                kd.solve(kid, b, method="direct")
            msg = cm.exception.message
            self.assertIn("estimated", msg)
            self.assertIn("over the factor budget of 0.1 MiB (65536 bytes, --factor-memory)", msg)
            self.assertIn("nothing was factored", msg)
            # the matrix is still served otherwise
            want = A @ b  # entries that cancel to ~0 are compared against the vector's scale
            np.testing.assert_allclose(kd.spmv(kid, b), want, rtol=1e-12,
                                       atol=1e-12 * np.abs(want).max())
            res = kd.solve(kid, b, method="gmres", maxiter=5)
            self.assertEqual(res.iterations, 5)
            # a small factor fits
            S = laplacian(8)
            sid = kd.put(S)
            res = kd.solve(sid, np.ones(64), method="direct")
            self.assertEqual(res.status, "converged")
            self.assertLess(res.direct["factor_bytes"], 65536)


if __name__ == "__main__":
    unittest.main()
