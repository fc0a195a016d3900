"""Status `stagnated` end to end (docs/PROTOCOL.md; solver/solve.c kd_solve_stagnated).

float32 Jacobi-CG on a 128 x 128 2-D Laplacian asked for rtol 1e-7, beyond what float32 reaches on
it: the recurrence claims convergence, b - A x refutes it, the restarts stop improving, and the
solve ends `stagnated` far short of maxiter (the default, 10 n = 163840), with residual_norm and
relative_residual the accuracy reached (checked here against ||b - A x|| in double) and the
message saying it. The same in float64 converges; so does float32 at a tolerance it can reach.
A batch's systems end stagnated after their 4 rounds of refuted claims. The CLI exits 3 for it,
as for any solve that did not converge.
"""

import os
import subprocess
import tempfile
import unittest

import numpy as np
import scipy.io

import krylov
from kd_daemon import BIN_DIR, laplacian, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


class Stagnation(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.kd = krylov.Client(daemon.address)
        cls.A = laplacian(128)
        cls.b = rng.standard_normal(cls.A.shape[0])

    @classmethod
    def tearDownClass(cls):
        cls.kd.close()

    def relres(self, x):
        return np.linalg.norm(self.b - self.A @ np.asarray(x, dtype=float)) / np.linalg.norm(self.b)

    def test_float32_stagnates(self):
        kid = self.kd.put(self.A, dtype="float32")
        res = self.kd.solve(kid, self.b, preconditioner="jacobi", rtol=1e-7, dtype="float32")
        self.assertEqual(res.status, "stagnated", res.message)
        self.assertLess(res.iterations, 2000)  # maxiter 163840
        truth = self.relres(res.x)
        self.assertGreater(truth, 1e-7)
        self.assertLess(truth, 1e-4)
        # the server's ||b - A x|| is float32's own sum: within a quarter of the double one
        self.assertAlmostEqual(res.relative_residual / truth, 1.0, delta=0.25)
        self.assertIn(f"{res.relative_residual:.3g}", res.message)
        self.assertIn("float32", res.message)
        self.assertFalse(res.converged)
        # a tolerance float32 reaches: converged, not cut short
        res = self.kd.solve(kid, self.b, preconditioner="jacobi", rtol=1e-5, dtype="float32")
        self.assertEqual(res.status, "converged", res.message)
        self.assertLessEqual(self.relres(res.x), 1.2e-5)

    def test_float64_converges(self):
        kid = self.kd.put(self.A, dtype="float64")
        for pre in ("jacobi", None):
            res = self.kd.solve(kid, self.b, preconditioner=pre, rtol=1e-10)
            self.assertEqual(res.status, "converged", res.message)
            self.assertLessEqual(self.relres(res.x), 1e-10 * 1.001)

    def test_batch(self):
        """A batch (one work-group per system) stops after its 4 rounds of refuted claims:
        stagnated, far short of maxiter, the message giving ||b - A x||."""
        A = laplacian(48)
        info = self.kd.put_batch([A, 2 * A], dtype="float32")
        B = rng.standard_normal((2, A.shape[0]))
        res = self.kd.solve_batch(info, B, rtol=1e-8, dtype="float32")
        for s in range(2):
            self.assertEqual(res.status[s], "stagnated", res.message[s])
            self.assertLess(res.iterations[s], 10 * A.shape[0] // 10)
            self.assertIn("stayed above the tolerance", res.message[s])

    def test_cli_exit(self):
        """The CLI reports it and exits 3 (not converged)."""
        kid = self.kd.put(self.A, dtype="float32")
        with tempfile.TemporaryDirectory() as d:
            rhs = os.path.join(d, "b.mtx")
            scipy.io.mmwrite(rhs, self.b.reshape(-1, 1), precision=17)
            p = subprocess.run([os.path.join(BIN_DIR, "krylov"), "--server", daemon.address,
                                "solve", kid.id, "--rhs", rhs, "--method", "pcg", "--rtol",
                                "1e-7"], capture_output=True, timeout=300)
            self.assertEqual(p.returncode, 3, p.stdout + p.stderr)
            self.assertIn(b"stagnated", p.stdout)

if __name__ == "__main__":
    unittest.main()
