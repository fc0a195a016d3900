"""preconditioner="ilu0" on matrices with zero or missing diagonal entries, through the real daemon:
the row matching (option `matching`) lets ILU(0) exist, and gmres/bicgstab converge.

- A diagonally dominant B with rows swapped in pairs that share no entry: the swapped rows have
  no diagonal, and the only matching that keeps every other row's diagonal is the one undoing the
  swaps, so the server's M = Q^T L U is known: SciPy's gmres with this file's ILU(0) of B applied
  to Q r is the same preconditioned GMRES(30), and with exact solves (sweeps = 0) the server's
  iteration count is within 10% of SciPy's; the true residual ||b - A x|| is computed here.
- adder_dcop_05 (12 zero diagonal entries): gmres and bicgstab + ilu0 converge to 1e-8 by the
  true residual, x agreeing with spsolve's, where matching = 0 is refused as before.
- float32 with three right-hand sides and x0; rajat01 (every value 1: numerically singular) is
  a clean BAD_REQUEST naming the cancelling pivot; a structurally singular matrix is refused
  saying how many rows could not be matched; a bad matching value is refused.
"""

import inspect
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


def ilu0(A):
    """(L, U) with (L U)_ij = a_ij on A's pattern, L unit lower (Saad's IKJ ILU(0))."""
    A = sp.csr_matrix(A, copy=True)
    A.sort_indices()
    n = A.shape[0]
    rows = []
    for i in range(n):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        row = dict(zip(A.indices[lo:hi], A.data[lo:hi]))
        for k in sorted(j for j in row if j < i):
            row[k] /= rows[k][k]
            for j, u in rows[k].items():
                if j > k and j in row:
                    row[j] -= row[k] * u
        assert row.get(i, 0.0) != 0.0, f"ILU(0) breaks down at row {i}"
        rows.append(row)
    lr, lc, lv, ur, uc, uv = [], [], [], [], [], []
    for i, row in enumerate(rows):
        for j, v in row.items():
            if j < i:
                lr.append(i), lc.append(j), lv.append(v)
            else:
                ur.append(i), uc.append(j), uv.append(v)
        lr.append(i), lc.append(i), lv.append(1.0)
    L = sp.csr_matrix((lv, (lr, lc)), shape=(n, n))
    U = sp.csr_matrix((uv, (ur, uc)), shape=(n, n))
    return L, U


def swapped_dominant(n, pairs, margin=1.0):
    """(A, B, q): B with b_ii = +-max(margin sum_j |b_ij| + 0.1, 1.1 max_j |b_ij|) and no entry
    between rows 2t and 2t+1 for t < pairs, A its rows with those pairs swapped (A = B[q]): A
    lacks those diagonal entries."""
    B = sp.random(n, n, density=4.0 / n, random_state=rng, format="lil")
    for t in range(pairs):
        B[2 * t, 2 * t + 1] = 0.0
        B[2 * t + 1, 2 * t] = 0.0
    B = sp.csr_matrix(B)
    B.data = rng.uniform(-1.0, 1.0, B.nnz)
    B = sp.csr_matrix(B - sp.diags(B.diagonal()))
    B.eliminate_zeros()
    # b_ii the largest of its row, strictly: then the server's matching (each row's diagonal kept,
    # then each row's largest entry) undoes exactly the swaps, whatever the margin
    d = np.maximum(margin * np.asarray(abs(B).sum(axis=1)).ravel() + 0.1,
                   1.1 * np.asarray(abs(B).max(axis=1).todense()).ravel())
    B = sp.csr_matrix(B + sp.diags(d * rng.choice([-1.0, 1.0], n)))
    q = np.arange(n)
    for t in range(pairs):
        q[2 * t], q[2 * t + 1] = 2 * t + 1, 2 * t
    return sp.csr_matrix(B[q]), B, q


def scipy_gmres(A, b, rtol, M):
    count = [0]

    def cb(_):
        count[0] += 1

    kw = {"rtol": rtol} if "rtol" in inspect.signature(spla.gmres).parameters else {"tol": rtol}
    x, info = spla.gmres(A, b, restart=30, atol=0.0, maxiter=20000 // 30, M=M, callback=cb,
                         callback_type="pr_norm", **kw)
    return x, info, count[0]


def relres(A, x, b):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


class Ilu0Matching(unittest.TestCase):
    def test_against_scipy(self):
        A, B, q = swapped_dominant(2000, 300, 0.7)  # not dominant: tens of iterations
        self.assertEqual(int((A.diagonal() == 0).sum()), 600)
        L, U = ilu0(B)
        # M = Q^T L U with Q A = B (row i of Q A is row q[i] of A): M^-1 r = (L U)^-1 (r[q])
        M = spla.LinearOperator(A.shape, matvec=lambda r: spla.spsolve_triangular(
            U, spla.spsolve_triangular(L, np.ravel(r)[q], lower=True), lower=False))
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A)
            common = {"preconditioner": "ilu0", "rtol": 1e-8, "maxiter": 3000}
            exact = kd.solve(info, b, method="gmres", preconditioner_options={"sweeps": 0},
                             **common)
            default = kd.solve(info, b, method="gmres", **common)
            bicg = kd.solve(info, b, method="bicgstab", **common)
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, method="gmres", preconditioner="ilu0",
                         preconditioner_options={"matching": 0})
            self.assertIn("no diagonal entry", str(e.exception))
        x, status, its = scipy_gmres(A, b, 1e-8, M)
        self.assertEqual(status, 0)
        self.assertLessEqual(relres(A, x, b), 1e-8)
        for name, r in (("exact", exact), ("default", default), ("bicgstab", bicg)):
            self.assertEqual(r.status, "converged", f"{name}: {r.message}")
            self.assertLessEqual(relres(A, r.x, b), 1.5e-8, name)
        print(f"swapped 2000 (600 zero a_ii): gmres+ilu0 exact {exact.iterations}, scipy gmres + "
              f"ILU(0) of Q A {its}, default {default.iterations}, bicgstab {bicg.iterations}")
        self.assertLessEqual(abs(exact.iterations - its), max(1, 0.1 * its))

    def test_adder_dcop_05(self):
        A = sp.csr_matrix(scipy.io.mmread(matrix_path("adder_dcop_05.mtx")))
        self.assertGreater(int((A.diagonal() == 0).sum()), 0)
        b = rng.uniform(-1.0, 1.0, A.shape[0])
        ref = spla.spsolve(sp.csc_matrix(A), b)
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, name="adder_dcop_05")
            for method in ("gmres", "bicgstab"):
                for opts in ({}, {"sweeps": 0}):
                    r = kd.solve(info, b, method=method, preconditioner="ilu0", rtol=1e-8,
                                 maxiter=3000, preconditioner_options=opts or None)
                    self.assertEqual(r.status, "converged", r.message)
                    self.assertLessEqual(relres(A, r.x, b), 1.5e-8, (method, opts))
                    # the matrix's condition number is ~1e6 (SuperLU): x to 1e-8 * cond
                    err = np.linalg.norm(r.x - ref) / np.linalg.norm(ref)
                    self.assertLess(err, 1e-2, (method, opts))
                    print(f"adder_dcop_05 {method}+ilu0 {opts}: {r.iterations} iterations")
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, b, method="gmres", preconditioner="ilu0",
                         preconditioner_options={"matching": 0})
            self.assertIn("pivot of row", str(e.exception))

    def test_float32_several_rhs_x0(self):
        A, _, _ = swapped_dominant(1500, 100)
        n = A.shape[0]
        b = rng.uniform(-1.0, 1.0, (n, 3))
        x0 = rng.uniform(-1.0, 1.0, (n, 3))
        with krylov.Client(daemon.address) as kd:
            info = kd.put(A, dtype="float32")
            for method in ("gmres", "bicgstab"):
                for sweeps in (0, 2):
                    r = kd.solve(info, b, x0=x0, method=method, preconditioner="ilu0", rtol=1e-5,
                                 maxiter=3000, dtype="float32",
                                 preconditioner_options={"sweeps": sweeps})
                    for c in range(3):
                        self.assertEqual(r.status[c], "converged", r.message[c])
                        self.assertLessEqual(relres(A, r.x[:, c], b[:, c]), 3e-5)

    def test_refusals(self):
        with krylov.Client(daemon.address) as kd:
            R = sp.csr_matrix(scipy.io.mmread(matrix_path("rajat01.mtx")))
            info = kd.put(R)
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, np.ones(R.shape[0]), method="gmres", preconditioner="ilu0")
            self.assertIn("pivot of row 2 is 0", str(e.exception))
            # rows 0 and 1 have their only entry in column 1
            S = sp.csr_matrix(np.array([[0.0, 1.0, 0.0], [0.0, 2.0, 0.0], [1.0, 0.0, 3.0]]))
            info = kd.put(S)
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, np.ones(3), method="gmres", preconditioner="ilu0")
            self.assertIn("structurally singular", str(e.exception))
            self.assertIn("1 of 3 rows could not be matched", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, np.ones(3), method="gmres", preconditioner="ilu0",
                         preconditioner_options={"matching": 3})
            self.assertIn("matching = 3", str(e.exception))
            with self.assertRaises(krylov.BadRequest) as e:
                kd.solve(info, np.ones(3), method="cg", preconditioner="ic0",
                         preconditioner_options={"matching": 1})
            self.assertIn("matching", str(e.exception))


if __name__ == "__main__":
    unittest.main()
