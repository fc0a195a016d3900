"""Method "auto" end to end (issue 37 item 3; docs/PROTOCOL.md, "method auto"): a real krylovd, the
Python client, residuals computed here in double.

- Every square matrix of tests/matrices with b = A x_true: the nonsingular ones (adder_dcop_05,
  bayer10, watt_2, ani4, young1c's real part, arrow, 494_bus, can___24) converge to a true
  ||b - A x|| / ||b|| <= 1e-10; the singular ones (rajat01, dwt_878) are solved (the system is
  consistent) or answered "singular" with the reason, never max_iterations. The reply's `auto`
  lists the attempts in order, the last the one that converged (`chosen`).
- The choice: cg first on an SPD-looking matrix (494_bus: as cg alone, iteration for iteration),
  direct first on a small one with a zero diagonal (adder_dcop_05, bayer10).
- Fallbacks: cg at max_iterations goes on to direct; a preconditioner that cannot be set up (ilu0
  on a zero diagonal) to direct; a factor over --factor-memory is an attempt refused, and the
  Krylov answer comes back (not TOO_LARGE); a structurally singular matrix says so.
- Several right-hand sides go through one plan; NaN in b ends it at the first Krylov attempt.
- Bad requests stay errors: a non-square matrix, an unknown preconditioner, options it does not
  take, an unknown direct solver.
"""

import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp

import krylov
from kd_daemon import Daemon, matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())

NONSINGULAR = ["adder_dcop_05", "bayer10", "watt_2", "ani4", "young1c", "arrow", "494_bus",
               "can___24"]
SINGULAR = ["rajat01", "dwt_878"]


def load(name):
    A = scipy.io.mmread(matrix_path(name + ".mtx"))
    if np.iscomplexobj(A.data):
        A = A.real  # young1c: krylovd solves real systems
    return sp.csr_matrix(A, dtype=np.float64)


def relres(A, b, x):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


def label(step):
    pre = step["preconditioner"]
    return step["method"] if pre in ("", "none") else f"{step['method']}+{pre}"


class Auto(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kd = krylov.Client(daemon.address)

    @classmethod
    def tearDownClass(cls):
        cls.kd.close()

    def check_trail(self, r):
        tried = r.auto["tried"]
        self.assertGreaterEqual(len(tried), 1)
        for step in tried[:-1]:
            self.assertNotEqual(step["status"], "converged", tried)
        if r.status == "converged":
            self.assertEqual(tried[-1]["status"], "converged")
            self.assertEqual(r.auto["chosen"], label(tried[-1]))
            self.assertEqual(label(tried[-1]), label({"method": r.method,
                                                      "preconditioner": r.preconditioner}))
        else:
            self.assertEqual(r.auto["chosen"], "")
        return tried

    def test_every_matrix(self):
        for name in NONSINGULAR + SINGULAR:
            with self.subTest(matrix=name):
                A = load(name)
                b = A @ rng.uniform(-1, 1, A.shape[0])
                r = self.kd.solve(self.kd.put(A), b, method="auto", rtol=1e-12)
                self.check_trail(r)
                if name in NONSINGULAR or r.status == "converged":
                    self.assertEqual(r.status, "converged", r.message)
                    self.assertLessEqual(relres(A, b, r.x), 1e-10)
                else:
                    self.assertEqual(r.status, "singular", r.message)
                    self.assertIn("singular", r.message)
                self.assertNotEqual(r.status, "max_iterations")

    def test_choice(self):
        S = load("494_bus")
        sid = self.kd.put(S)
        b = rng.uniform(-1, 1, S.shape[0])
        r = self.kd.solve(sid, b, method="auto", rtol=1e-10)
        cg = self.kd.solve(sid, b, method="cg", rtol=1e-10)
        self.assertEqual((r.method, r.preconditioner, r.iterations),
                         ("cg", "none", cg.iterations))
        self.assertEqual([label(s) for s in r.auto["tried"]], ["cg"])
        self.assertEqual(r.message, "")
        for name in ("adder_dcop_05", "bayer10"):
            A = load(name)
            b = A @ rng.uniform(-1, 1, A.shape[0])
            r = self.kd.solve(self.kd.put(A), b, method="auto", rtol=1e-12)
            self.assertEqual((r.method, r.status), ("direct", "converged"))
            self.assertEqual(r.auto["chosen"], "direct")
            self.assertEqual(len(r.auto["tried"]), 1)
        # b = ones on bayer10: the factor's x, refined, stops at 1.6e-10 (ill-conditioned);
        # no Krylov attempt after it gets closer, so auto answers direct's stagnated at once
        A = load("bayer10")
        r = self.kd.solve(self.kd.put(A), np.ones(A.shape[0]), method="auto", rtol=1e-12)
        self.assertEqual((r.method, r.status), ("direct", "stagnated"))
        self.assertEqual([s["status"] for s in r.auto["tried"]], ["stagnated"])
        self.assertIn("ill-conditioned", r.message)

    def test_krylov_failure_falls_back_to_direct(self):
        S = load("494_bus")
        b = S @ rng.uniform(-1, 1, S.shape[0])  # a random b leaves the factor near 1e-12
        r = self.kd.solve(self.kd.put(S), b, method="auto", rtol=1e-10, maxiter=5)
        self.assertEqual((r.method, r.status), ("direct", "converged"))
        tried = self.check_trail(r)
        self.assertEqual([(label(s), s["status"], s["iterations"]) for s in tried[:1]],
                         [("cg", "max_iterations", 5)])
        self.assertEqual(label(tried[1]), "direct")
        self.assertIn("auto: cg ended max_iterations", r.message)
        self.assertIn("direct ran instead", r.message)
        self.assertLessEqual(relres(S, b, r.x), 1e-10)

    def test_refused_preconditioner_falls_back(self):
        A = load("adder_dcop_05")
        b = A @ rng.uniform(-1, 1, A.shape[0])
        # a preconditioner named: its Krylov method first; jacobi divides by a zero diagonal
        r = self.kd.solve(self.kd.put(A), b, method="auto", preconditioner="jacobi", rtol=1e-12)
        tried = self.check_trail(r)
        self.assertEqual((label(tried[0]), tried[0]["status"]), ("gmres+jacobi", "refused"))
        self.assertIn("diagonal entry", tried[0]["message"])
        self.assertEqual((r.method, r.status), ("direct", "converged"))
        self.assertIn("gmres+jacobi was refused", r.message)
        self.assertLessEqual(relres(A, b, r.x), 1e-10)

    def test_structurally_singular(self):
        A = sp.lil_matrix(load("watt_2"))
        A[:, 7] = 0.0  # an empty column
        A = sp.csr_matrix(A)
        A.eliminate_zeros()
        b = np.ones(A.shape[0])
        r = self.kd.solve(self.kd.put(A), b, method="auto", rtol=1e-10)
        self.assertEqual(r.status, "singular", r.message)
        self.assertIn("structurally singular", r.message)
        tried = self.check_trail(r)
        self.assertEqual((tried[0]["method"], tried[0]["status"]), ("direct", "singular"))
        # the Krylov attempts after it were capped, and said what they did
        for step in tried[1:]:
            self.assertIn(step["status"], ("refused", "max_iterations", "stagnated", "breakdown"))
            self.assertLessEqual(step["iterations"], 1000)

    def test_several_right_hand_sides(self):
        A = load("bayer10")
        X = rng.uniform(-1, 1, (A.shape[0], 3))
        B = A @ X
        r = self.kd.solve(self.kd.put(A), B, method="auto", rtol=1e-12)
        self.assertEqual(r.method, "direct")
        self.assertEqual(list(r.status), ["converged"] * 3)
        for k in range(3):
            self.assertLessEqual(relres(A, B[:, k], r.x[:, k]), 1e-10)
        S = load("can___24")
        B = rng.uniform(-1, 1, (S.shape[0], 2))
        r = self.kd.solve(self.kd.put(S), B, method="auto", rtol=1e-10)
        self.assertEqual(r.method, "minres")
        self.assertEqual(list(r.status), ["converged"] * 2)
        self.assertEqual([s["status"] for s in r.auto["tried"]], ["breakdown", "converged"])

    def test_non_finite_b(self):
        # NaN in b: the Krylov attempt says non_finite where, and auto stops there (no factor)
        A = load("adder_dcop_05")
        b = np.ones(A.shape[0])
        b[5] = np.nan
        r = self.kd.solve(self.kd.put(A), b, method="auto")
        self.assertEqual(r.status, "non_finite", r.message)
        self.assertNotIn("direct", [s["method"] for s in r.auto["tried"]])
        self.assertEqual(len(r.auto["tried"]), 1)

    def test_bad_requests(self):
        A = load("watt_2")
        aid = self.kd.put(A)
        b = np.ones(A.shape[0])
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(aid, b, method="auto", preconditioner="ilu9")
        self.assertIn("unknown preconditioner", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(aid, b, method="auto", preconditioner="jacobi",
                          preconditioner_options={"sweeps": 2})
        self.assertIn("sweeps", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(aid, b, method="auto", direct_options={"solver": "superlu"})
        self.assertIn("unknown solver 'superlu'", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(aid, b, method="auto", direct_options={"solver": "cholmod"})
        self.assertIn("needs a symmetric matrix", cm.exception.message)
        R = load("Franz6_id1959_aug")
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(self.kd.put(R), np.ones(R.shape[0]), method="auto")
        self.assertIn("square", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(aid, np.ones(3), method="auto")
        self.assertIn("b has 3 values", cm.exception.message)


class Budget(unittest.TestCase):
    def test_factor_over_budget_gives_the_krylov_answer(self):
        with Daemon("--factor-memory", "64K") as d, krylov.Client(d.address) as kd:
            A = load("watt_2")
            b = A @ rng.uniform(-1, 1, A.shape[0])
            r = kd.solve(kd.put(A), b, method="auto", rtol=1e-10)
            tried = r.auto["tried"]
            self.assertEqual((tried[0]["method"], tried[0]["status"]), ("direct", "refused"))
            self.assertIn("factor budget", tried[0]["message"])
            self.assertEqual(r.status, "converged", r.message)
            self.assertNotEqual(r.method, "direct")
            self.assertIn("direct was refused", r.message)
            self.assertLessEqual(relres(A, b, r.x), 1e-8)
            # nothing converges within maxiter and the factor does not fit: the Krylov result
            B = load("bayer10")
            r = kd.solve(kd.put(B), np.ones(B.shape[0]), method="auto", maxiter=20)
            self.assertIn(r.status, ("max_iterations", "stagnated", "breakdown"))
            self.assertIn("direct", [s["method"] for s in r.auto["tried"]])
            self.assertEqual(r.auto["chosen"], "")


if __name__ == "__main__":
    unittest.main()
