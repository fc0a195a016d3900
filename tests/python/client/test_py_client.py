"""The Python client against a real krylovd on loopback, checked against SciPy on the real
matrices in tests/matrices (read with scipy.io.mmread): every upload form gives one content id,
spmv agrees with A @ x to 1e-12, solves meet rtol in the true residual ||b - A x|| (computed here
with SciPy), several right-hand sides come back column by column, progress notifications reach
the callback, and each error code arrives as its exception class.
"""

import gzip
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import msgpack
import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
from krylov import _rpc
from kd_daemon import Daemon, SOURCE_DIR, matrix_path, shared_daemon

daemon = None
rng = None
setUpModule, tearDownModule = shared_daemon(globals())


def load(name):
    return sp.csr_matrix(scipy.io.mmread(matrix_path(name)))


def rel_diff(a, b):
    return np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))) if b.size else 0.0


def true_rel_residual(A, b, x):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


def assert_residual_close(test, reported, true):
    """The server's recomputed residual against SciPy's: both carry rounding noise of about
    eps * ||A|| ||x||, which is a visible fraction of a 1e-10 residual."""
    test.assertLessEqual(abs(reported - true), 0.02 * true + 1e-12, (reported, true))


def laplacian_2d(g, shift=0.0):
    T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
    I = sp.eye(g)
    return (sp.kron(I, T) + sp.kron(T, I) + shift * sp.eye(g * g)).tocsr()


class ClientTest(unittest.TestCase):
    def setUp(self):
        self.kd = krylov.Client(daemon.address)

    def tearDown(self):
        self.kd.close()


class TestStatusAndAddress(ClientTest):
    def test_status_fields_and_request_count(self):
        st = self.kd.status()
        self.assertIsInstance(st, krylov.ServerStatus)
        self.assertTrue(st.version)
        self.assertTrue(st.device.get("name"))
        self.assertIn(st.device.get("type"), ("gpu", "cpu", "other"))
        self.assertGreater(st.device.get("global_mem_bytes", 0), 0)
        self.assertGreaterEqual(st.connections, 1)
        # the solver tables, as solve takes them
        solvers = st.raw["solvers"]
        for name in ("cg", "sd", "cg1", "gmres", "bicgstab", "minres"):
            self.assertTrue(solvers["methods"][name], name)
        for name in ("none", "jacobi", "amg", "ilu0", "ic0", "block_jacobi", "chebyshev"):
            self.assertTrue(solvers["preconditioners"][name], name)
        calls = int(rng.integers(1, 6))
        for _ in range(calls):
            with self.assertRaises(krylov.NotFound):
                self.kd.info("%032x" % int(rng.integers(1, 1 << 62)))
        st2 = self.kd.status()
        self.assertEqual(st2.requests - st.requests, calls + 1)
        self.assertEqual(st2.errors - st.errors, calls)
        self.assertEqual(
            st2.requests_by_method["matrix.info"] - st.requests_by_method["matrix.info"], calls
        )

    def test_parse_address(self):
        self.assertEqual(_rpc.parse_address("10.1.2.3:99"), ("10.1.2.3", 99))
        self.assertEqual(_rpc.parse_address("example.org"), ("example.org", 7373))
        self.assertEqual(_rpc.parse_address("[::1]:8000"), ("::1", 8000))
        self.assertEqual(_rpc.parse_address("[::1]"), ("::1", 7373))
        self.assertEqual(_rpc.parse_address("::1"), ("::1", 7373))
        self.assertEqual(_rpc.parse_address(":1234"), ("127.0.0.1", 1234))
        for bad in ("host:port", "host:0", "host:70000", "[::1", ""):
            with self.assertRaises(krylov.BadRequest, msg=bad):
                _rpc.parse_address(bad)

    def test_default_address_from_environment(self):
        old = os.environ.get("KRYLOV_SERVER")
        os.environ["KRYLOV_SERVER"] = daemon.address
        try:
            with krylov.Client() as kd:
                self.assertEqual(kd.address, daemon.address)
                self.assertTrue(kd.status().version)
        finally:
            if old is None:
                del os.environ["KRYLOV_SERVER"]
            else:
                os.environ["KRYLOV_SERVER"] = old

    def test_connection_refused(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # nothing listens there now
        with self.assertRaises(krylov.ConnectionFailed) as cm:
            krylov.Client(f"127.0.0.1:{port}")
        self.assertEqual(cm.exception.code, "CONNECTION")
        self.assertIsInstance(cm.exception, ConnectionError)
        self.assertIn(str(port), cm.exception.message)

    def test_context_manager_closes(self):
        with krylov.Client(daemon.address) as kd:
            self.assertFalse(kd.closed)
            kd.status()
        self.assertTrue(kd.closed)
        with self.assertRaises(krylov.ConnectionFailed):
            kd.status()


class TestPut(ClientTest):
    def test_every_form_gives_the_same_id(self):
        A = load("494_bus.mtx")
        first = self.kd.put(A, name="bus")
        self.assertEqual(first.shape, (494, 494))
        self.assertEqual(first.nnz, 1666)
        self.assertEqual(first.dtype, "float64")
        self.assertEqual(len(first.id), 32)
        self.assertGreaterEqual(first.device_bytes, 1666 * 12)
        self.assertIsNotNone(first.created)

        coo = A.tocoo()
        perm = rng.permutation(coo.nnz)
        shuffled = sp.coo_matrix((coo.data[perm], (coo.row[perm], coo.col[perm])), shape=A.shape)
        # duplicates are summed: split each value in two entries
        half = coo.data / 2
        doubled = sp.coo_matrix(
            (np.concatenate([half, coo.data - half]),
             (np.concatenate([coo.row, coo.row]), np.concatenate([coo.col, coo.col]))),
            shape=A.shape,
        )
        A64 = A.copy()
        A64.indptr = A64.indptr.astype(np.int64)
        A64.indices = A64.indices.astype(np.int64)
        forms = {
            "csr again": A,
            "csc": A.tocsc(),
            "coo shuffled": shuffled,
            "coo with duplicates": doubled,
            "csr_array": sp.csr_array(A),
            "int64 indices": A64,
            "tuple": (A.indptr, A.indices, A.data, A.shape),
            "dense": A.toarray(),
            "path": matrix_path("494_bus.mtx"),
        }
        for what, form in forms.items():
            info = self.kd.put(form)
            self.assertEqual(info.id, first.id, what)
            self.assertIs(info.created, False, what)
            self.assertEqual(info.name, "bus", what)  # the name from the first upload stays

        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bus.mtx.gz")
            with open(matrix_path("494_bus.mtx"), "rb") as f, gzip.open(path, "wb") as g:
                g.write(f.read())
            self.assertEqual(self.kd.put(path).id, first.id)

    def test_name_defaults_to_file_name(self):
        info = self.kd.put(matrix_path("can___24.mtx"))
        self.assertEqual(info.name, "can___24")
        self.assertEqual(info.shape, (24, 24))
        self.assertEqual(info.nnz, 160)

    def test_random_matrix_and_options(self):
        n = int(rng.integers(50, 300))
        A = sp.random(n, n, density=0.05, random_state=int(rng.integers(1 << 31)), format="csr")
        info = self.kd.put(A, name="random", pin=True)
        self.assertIs(info.created, True)
        self.assertTrue(info.pinned)
        self.assertEqual(info.nnz, A.nnz)
        self.assertEqual(info.stats["max_row"], int(np.diff(A.indptr).max()))
        self.assertEqual(info.stats["empty_rows"], int(np.sum(np.diff(A.indptr) == 0)))
        self.assertEqual(info.stats["nonfinite"], 0)
        # non-finite values are counted (the upload's scan), and the matrix is still accepted
        B = A.copy()
        bad = rng.choice(B.nnz, size=min(3, B.nnz), replace=False)
        B.data[bad] = [np.nan, np.inf, -np.inf][: len(bad)]
        self.assertEqual(self.kd.put(B).stats["nonfinite"], len(bad))
        self.assertEqual(self.kd.info(info).id, info.id)
        self.assertEqual(self.kd.info(info.id).nnz, A.nnz)

    def test_float32(self):
        A = load("bayer10.mtx")
        info32 = self.kd.put(A, dtype="float32")
        self.assertEqual(info32.dtype, "float32")
        self.assertNotEqual(info32.id, self.kd.put(A).id)
        self.assertEqual(self.kd.put(A.astype(np.float32)).id, info32.id)  # float32 data: float32
        x = rng.uniform(-1, 1, A.shape[1])
        y = self.kd.spmv(info32, x)
        self.assertEqual(y.dtype, np.float64)
        scale = abs(A) @ np.abs(x)
        self.assertTrue(np.all(np.abs(y - A @ x) <= 1e-5 * scale + 1e-30))
        y32 = self.kd.spmv(info32, x.astype(np.float32))
        self.assertEqual(y32.dtype, np.float32)
        self.assertTrue(np.all(np.abs(y32 - A @ x) <= 1e-4 * scale + 1e-30))

    def test_bad_uploads(self):
        with self.assertRaises(TypeError):
            self.kd.put(scipy.io.mmread(matrix_path("young1c.mtx")))  # complex
        with self.assertRaises(krylov.Unsupported) as cm:
            self.kd.put(matrix_path("young1c.mtx"))  # the server refuses the complex file
        self.assertEqual(cm.exception.code, "UNSUPPORTED")
        self.assertIn("complex", cm.exception.message)
        for bad, error in (("bad_header.mtx", krylov.BadRequest),
                           ("bad_dimensions.mtx", krylov.BadRequest),
                           ("bad_matrix_type.mtx", krylov.Unsupported)):  # complex symmetric
            with self.assertRaises(error, msg=bad) as cm:
                self.kd.put(os.path.join(matrix_path("bad"), bad))
            self.assertIn("line", cm.exception.message)
        with self.assertRaises(FileNotFoundError):
            self.kd.put(matrix_path("no-such-file.mtx"))
        n = int(rng.integers(5, 50))
        indptr = np.arange(n + 1, dtype=np.int32)
        indices = np.arange(n, dtype=np.int32)
        indices[int(rng.integers(n))] = n + 3  # out of range
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.put((indptr, indices, np.ones(n), (n, n)))
        self.assertIn("indices", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.put(load("494_bus.mtx"), format="no-such-format")
        self.assertIn("no-such-format", cm.exception.message)
        with self.assertRaises(TypeError):
            self.kd.put(42)


class TestSpmv(ClientTest):
    FILES = ["494_bus.mtx", "bayer10.mtx", "rajat01.mtx", "arrow.mtx", "ani4.mtx", "watt_2.mtx",
             "adder_dcop_05.mtx", "Groebner_id2003_aug.mtx", "Franz6_id1959_aug.mtx", "3by0.mtx"]

    def test_matches_scipy(self):
        for name in self.FILES:
            A = load(name)
            info = self.kd.put(A)
            self.assertEqual(info.shape, A.shape, name)
            x = rng.uniform(-1, 1, A.shape[1])
            y = self.kd.spmv(info, x)
            self.assertEqual(y.shape, (A.shape[0],), name)
            self.assertLessEqual(rel_diff(y, A @ x), 1e-12, name)
            # y = alpha A x + beta y
            alpha, beta = rng.uniform(-3, 3, 2)
            y0 = rng.uniform(-1, 1, A.shape[0])
            y2 = self.kd.spmv(info, x, alpha=alpha, beta=beta, y=y0)
            self.assertLessEqual(rel_diff(y2, alpha * (A @ x) + beta * y0), 1e-12, name)
            self.assertEqual(y0.shape, (A.shape[0],))  # y is not written in place

    def test_zero_copy_results_and_inputs(self):
        A = load("ani4.mtx")
        info = self.kd.put(A)
        x = rng.uniform(-1, 1, A.shape[1])
        y = self.kd.spmv(info, x)
        # a view of the received bin, not a copy
        self.assertFalse(y.flags.writeable)
        self.assertIsInstance(y.base, bytes)
        out = np.full(A.shape[0], np.nan)
        self.assertIs(self.kd.spmv(info, x, out=out), out)
        self.assertLessEqual(rel_diff(out, A @ x), 1e-12)
        # strided, big-endian and integer inputs are converted
        wide = np.zeros(2 * A.shape[1])
        wide[::2] = x
        self.assertLessEqual(rel_diff(self.kd.spmv(info, wide[::2]), A @ x), 1e-12)
        self.assertLessEqual(rel_diff(self.kd.spmv(info, x.astype(">f8")), A @ x), 1e-12)
        xi = rng.integers(-5, 5, A.shape[1])
        self.assertLessEqual(rel_diff(self.kd.spmv(info, xi), A @ xi), 1e-12)

    def test_errors(self):
        A = load("watt_2.mtx")
        info = self.kd.put(A)
        extra = int(rng.integers(1, 10))
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.spmv(info, np.ones(A.shape[1] + extra))
        self.assertEqual(cm.exception.code, "BAD_REQUEST")
        self.assertIn(f"x has {A.shape[1] + extra}", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.spmv(info, np.ones(A.shape[1]), beta=1.0, y=np.ones(A.shape[0] - 1))
        self.assertIn("y has", cm.exception.message)
        with self.assertRaises(ValueError):
            self.kd.spmv(info, np.ones(A.shape[1]), beta=0.5)  # y missing
        missing = "%032x" % int(rng.integers(1, 1 << 62))
        with self.assertRaises(krylov.NotFound) as cm:
            self.kd.spmv(missing, np.ones(3))
        self.assertEqual(cm.exception.code, "NOT_FOUND")
        self.assertIn(missing, cm.exception.message)
        self.assertIn("NOT_FOUND", str(cm.exception))
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.spmv("not-an-id", np.ones(3))
        self.assertIn("id", cm.exception.message)
        with self.assertRaises(TypeError):
            self.kd.spmv(info, np.ones(A.shape[1], dtype=complex))
        # the connection is still good after all of that
        self.assertLessEqual(rel_diff(self.kd.spmv(info, np.ones(A.shape[1])),
                                      A @ np.ones(A.shape[1])), 1e-12)


class TestSolve(ClientTest):
    def test_cg_matches_scipy(self):
        A = load("494_bus.mtx")
        info = self.kd.put(A)
        b = rng.uniform(-1, 1, A.shape[0])
        res = self.kd.solve(info, b, rtol=1e-10, maxiter=50000, history=True)
        self.assertEqual(res.status, "converged", res.message)
        self.assertTrue(res.converged)
        self.assertGreater(res.iterations, 0)
        true_rel = true_rel_residual(A, b, res.x)
        self.assertLessEqual(true_rel, 1e-10)
        assert_residual_close(self, res.relative_residual, true_rel)
        assert_residual_close(self, res.residual / np.linalg.norm(b), true_rel)
        self.assertEqual(res.residual_norm, res.residual)
        # x - x_ref = A^-1 r, so ||x - x_ref|| <= ||r|| / lambda_min(A)
        x_ref = spla.spsolve(A.tocsc(), b)
        lambda_min = np.linalg.eigvalsh(A.toarray())[0]
        bound = np.linalg.norm(b - A @ res.x) / lambda_min
        self.assertLessEqual(np.linalg.norm(res.x - x_ref), 1.01 * bound + 1e-12)
        self.assertGreaterEqual(len(res.history), 2)
        self.assertLess(res.history[-1], res.history[0])
        self.assertAlmostEqual(res.history[0], np.linalg.norm(b), delta=1e-9 * np.linalg.norm(b))
        self.assertGreater(res.time_ms, 0)
        self.assertEqual(res.message, "")

    def test_reordered_matrix(self):
        # a 2-D Laplacian numbered at random, stored with RCM inside: spmv and solve take and give
        # vectors in the client's order, and info says what the server did
        g = int(rng.integers(20, 40))
        L = laplacian_2d(g, shift=0.5).tocsr()
        p = rng.permutation(L.shape[0])
        A = L[p][:, p].tocsr()
        info = self.kd.put(A, reorder="rcm", name="scrambled")
        self.assertEqual(info.reorder, "rcm")
        self.assertGreater(info.bandwidth["before"], 4 * g)
        self.assertLessEqual(info.bandwidth["after"], 2 * g)
        self.assertEqual(self.kd.info(info).reorder, "rcm")
        x = rng.uniform(-1, 1, A.shape[1])
        scale = abs(A) @ np.abs(x)
        self.assertTrue(np.all(np.abs(self.kd.spmv(info, x) - A @ x) <= 1e-13 * scale))
        b = rng.uniform(-1, 1, A.shape[0])
        res = self.kd.solve(info, b, rtol=1e-10, maxiter=10000)
        self.assertEqual(res.status, "converged", res.message)
        self.assertLessEqual(true_rel_residual(A, b, res.x), 1e-10)
        plain = self.kd.put(A, reorder="none")
        self.assertEqual(plain.id, info.id)  # the id is the matrix's, whatever its ordering
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.put(A, reorder="sideways")
        self.assertIn("rcm", str(cm.exception))

    def test_methods_and_options(self):
        g = int(rng.integers(8, 20))
        A = laplacian_2d(g, shift=1.0)
        info = self.kd.put(A)
        b = rng.uniform(-1, 1, A.shape[0])
        for method in ("cg", "sd"):
            res = self.kd.solve(info, b, method=method, rtol=1e-10)
            self.assertEqual(res.status, "converged", method)
            self.assertLessEqual(true_rel_residual(A, b, res.x), 1e-10, method)
        for preconditioner in ("jacobi", "none"):
            # pcg may not be implemented by this server yet: then it says UNSUPPORTED
            try:
                res = self.kd.solve(info, b, method="pcg", preconditioner=preconditioner,
                                    rtol=1e-10)
            except krylov.Unsupported as e:
                self.assertEqual(e.code, "UNSUPPORTED")
                self.assertIn("pcg", e.message)
            else:
                self.assertEqual(res.status, "converged", preconditioner)
                self.assertLessEqual(true_rel_residual(A, b, res.x), 1e-10, preconditioner)
        # maxiter is respected and reported
        k = int(rng.integers(1, 4))
        res = self.kd.solve(info, b, maxiter=k, check_every=1)
        self.assertEqual(res.status, "max_iterations")
        self.assertFalse(res.converged)
        self.assertEqual(res.iterations, k)
        # a warm start from the answer is done at once
        x = self.kd.solve(info, b, rtol=1e-10).x
        res = self.kd.solve(info, b, rtol=1e-8, x0=x)
        self.assertEqual(res.status, "converged")
        self.assertLessEqual(res.iterations, 1)
        # atol: stop once ||r|| <= atol
        res = self.kd.solve(info, b, rtol=0.0, atol=1e-3 * np.linalg.norm(b))
        self.assertEqual(res.status, "converged")
        self.assertLessEqual(np.linalg.norm(b - A @ res.x), 1e-3 * np.linalg.norm(b))
        # history at every check with check_every=1: one entry per iteration plus the start
        res = self.kd.solve(info, b, rtol=1e-6, check_every=1, history=True)
        self.assertGreaterEqual(len(res.history), res.iterations + 1)
        # float32 solve on the wire
        res = self.kd.solve(info, b.astype(np.float32), rtol=1e-5)
        self.assertEqual(res.x.dtype, np.float32)
        self.assertLessEqual(true_rel_residual(A, b, res.x.astype(float)), 1e-4)

    def test_indefinite_is_reported(self):
        # dwt_878 read as a pattern (values 1) is indefinite: CG must not claim convergence
        P = load("dwt_878.mtx")
        info = self.kd.put(matrix_path("dwt_878.mtx"))
        b = rng.uniform(-1, 1, P.shape[0])
        res = self.kd.solve(info, b)
        if res.status == "converged":
            self.assertLessEqual(true_rel_residual(P, b, res.x), 1e-8)
        else:
            self.assertIn(res.status, ("breakdown", "max_iterations", "stagnated"))
        if res.status == "breakdown":
            self.assertIn("positive definite", res.message)
        # + 4 I is SPD
        S = (P + 4 * sp.eye(P.shape[0])).tocsr()
        res = self.kd.solve(self.kd.put(S), b)
        self.assertEqual(res.status, "converged")
        self.assertLessEqual(true_rel_residual(S, b, res.x), 1e-8)

    def test_several_right_hand_sides(self):
        A = load("494_bus.mtx")
        info = self.kd.put(A)
        k = int(rng.integers(2, 5))
        B = rng.uniform(-1, 1, (A.shape[0], k))
        for order in ("C", "F"):
            res = self.kd.solve(info, np.array(B, order=order), rtol=1e-10)
            self.assertEqual(res.nrhs, k)
            self.assertEqual(res.x.shape, (A.shape[0], k))
            self.assertEqual(len(res.status), k)
            self.assertEqual(res.iterations.shape, (k,))
            self.assertTrue(res.converged)
            for j in range(k):
                rel = true_rel_residual(A, B[:, j], res.x[:, j])
                self.assertLessEqual(rel, 1e-10, (order, j))
                assert_residual_close(self, res.relative_residual[j], rel)
        # column j of a block solve is the solve of column j alone
        j = int(rng.integers(k))
        single = self.kd.solve(info, B[:, j], rtol=1e-10)
        self.assertEqual(single.iterations, res.iterations[j])
        self.assertLessEqual(rel_diff(res.x[:, j], single.x), 1e-12)
        # one column as an n x 1 block keeps its shape; x0 as a block
        res1 = self.kd.solve(info, B[:, :1], rtol=1e-10, history=True)
        self.assertEqual(res1.x.shape, (A.shape[0], 1))
        self.assertEqual(len(res1.status), 1)
        self.assertEqual(len(res1.history), 1)
        warm = self.kd.solve(info, B, x0=res.x, rtol=1e-8)
        self.assertTrue(all(it <= 1 for it in warm.iterations))
        with self.assertRaises(ValueError):
            self.kd.solve(info, B, x0=res.x[:, 0])

    def test_errors(self):
        A = load("can___24.mtx")
        info = self.kd.put(A)
        short = int(rng.integers(1, 23))
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(info, np.ones(short))
        self.assertIn(f"b has {short} values", cm.exception.message)
        rect = self.kd.put(matrix_path("Franz6_id1959_aug.mtx"))
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(rect, np.ones(rect.rows))
        self.assertIn("square", cm.exception.message)
        with self.assertRaises(krylov.BadRequest) as cm:
            self.kd.solve(info, np.ones(24), method="no-such-method")
        self.assertIn("unknown method 'no-such-method'", cm.exception.message)
        with self.assertRaises(krylov.BadRequest):
            self.kd.solve(info, np.ones(24), rtol=-1.0)
        with self.assertRaises(krylov.NotFound):
            self.kd.solve("%032x" % int(rng.integers(1, 1 << 62)), np.ones(24))
        # NaN in b: a result with status non_finite, not an exception
        b = rng.uniform(0.5, 1.5, 24)
        b[int(rng.integers(24))] = np.nan
        res = self.kd.solve(info, b)
        self.assertEqual(res.status, "non_finite")
        self.assertIn("b", res.message)


class TestProgressAndCancel(ClientTest):
    """Long solves: steepest descent on a 2-D Laplacian converges slowly (condition ~ g^2)."""

    def setUp(self):
        super().setUp()
        self.g = 150
        self.A = laplacian_2d(self.g)
        self.info = self.kd.put(self.A)
        self.b = rng.uniform(-1, 1, self.A.shape[0])

    def test_progress_callback(self):
        seen = []
        res = self.kd.solve(self.info, self.b, method="sd", rtol=1e-12, maxiter=2500,
                            callback=seen.append)
        self.assertEqual(res.status, "max_iterations")
        self.assertGreaterEqual(len(seen), 1)
        msgids = {p.msgid for p in seen}
        self.assertEqual(len(msgids), 1)
        self.assertIsInstance(msgids.pop(), int)
        its = [p.iteration for p in seen]
        self.assertEqual(its, sorted(its))
        self.assertLessEqual(its[-1], res.iterations)
        self.assertTrue(all(p.rhs == 0 and np.isfinite(p.residual) and p.residual > 0
                            for p in seen))
        self.assertAlmostEqual(seen[0].residual / np.linalg.norm(self.b), 1.0, delta=1e-9)

    def test_progress_names_the_column_furthest_from_its_tolerance(self):
        # With several right-hand sides each report is about the column furthest from its
        # tolerance. A zero column is solved by x = 0 before the first iteration, so the
        # reports must all name the other column, whichever position it takes.
        for slow in (0, 1):
            B = np.zeros((self.A.shape[0], 2))
            B[:, slow] = rng.uniform(-1, 1, self.A.shape[0])
            seen = []
            res = self.kd.solve(self.info, B, method="sd", maxiter=300, callback=seen.append)
            self.assertEqual(res.nrhs, 2)
            self.assertGreaterEqual(len(seen), 1)
            self.assertEqual({p.rhs for p in seen}, {slow}, seen)
            self.assertEqual(res.iterations[1 - slow], 0)

    def test_callback_returning_true_cancels(self):
        before = self.kd.status().requests_by_method["job.cancel"]
        calls = []

        def stop(p):
            calls.append(p)
            return True

        t0 = time.monotonic()
        with self.assertRaises(krylov.Cancelled) as cm:
            self.kd.solve(self.info, self.b, method="sd", rtol=0.0, maxiter=10**8,
                          timeout_ms=60000, callback=stop)
        self.assertLess(time.monotonic() - t0, 30)
        self.assertEqual(cm.exception.code, "CANCELLED")
        self.assertGreaterEqual(len(calls), 1)
        self.assertEqual(self.kd.status().requests_by_method["job.cancel"] - before, 1)
        self.assertEqual(self.kd.info(self.info).id, self.info.id)  # the connection goes on

    def test_callback_exception_cancels_and_propagates(self):
        before = self.kd.status().requests_by_method["job.cancel"]

        class Stop(Exception):
            pass

        def boom(p):
            raise Stop()

        with self.assertRaises(Stop):
            self.kd.solve(self.info, self.b, method="sd", rtol=0.0, maxiter=10**8,
                          timeout_ms=60000, callback=boom)
        # the next call skips the cancelled solve's late answer and gets its own
        x = rng.uniform(-1, 1, self.A.shape[1])
        self.assertLessEqual(rel_diff(self.kd.spmv(self.info, x), self.A @ x), 1e-12)
        self.assertEqual(self.kd.status().requests_by_method["job.cancel"] - before, 1)

    def test_ctrl_c_cancels_on_the_server(self):
        before = self.kd.status().requests_by_method["job.cancel"]
        solves_before = self.kd.status().requests_by_method["solve"]
        code = f"""
import sys, numpy as np, krylov
kd = krylov.Client({daemon.address!r})
b = np.ones({self.A.shape[0]})
print("solving", flush=True)
kd.solve({self.info.id!r}, b, method="sd", rtol=0.0, maxiter=10**8, timeout_ms=60000)
print("finished", flush=True)
"""
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            self.assertEqual(child.stdout.readline().strip(), "solving")
            # interrupt only once the server has the solve (a busy machine may be slow to send)
            deadline = time.monotonic() + 60
            while (self.kd.status().requests_by_method["solve"] == solves_before
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            time.sleep(0.2)
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        self.assertNotEqual(child.returncode, 0)
        self.assertNotIn("finished", out)
        self.assertIn("KeyboardInterrupt", err)
        self.assertEqual(self.kd.status().requests_by_method["job.cancel"] - before, 1)

    def test_server_deadline(self):
        with self.assertRaises(krylov.Timeout) as cm:
            self.kd.solve(self.info, self.b, method="sd", rtol=0.0, maxiter=10**8,
                          timeout_ms=int(rng.integers(50, 300)))
        self.assertEqual(cm.exception.code, "TIMEOUT")
        self.assertIsInstance(cm.exception, TimeoutError)
        # past it while solving, or (on a busy worker) while still queued
        self.assertRegex(cm.exception.message, "deadline|timeout_ms")

    def test_general_methods_report_progress_cancel_and_time_out(self):
        # gmres, bicgstab and minres go through the same driver: progress notifications in
        # order, a callback's True cancels, the server's deadline stops them
        for method in ("gmres", "bicgstab", "minres"):
            seen = []
            res = self.kd.solve(self.info, self.b, method=method, rtol=1e-14, maxiter=400,
                                callback=seen.append)
            self.assertEqual(res.method, method)
            # 1e-14 may be below what the method's iterates reach: stagnated says so
            self.assertIn(res.status, ("max_iterations", "converged", "stagnated"), method)
            self.assertGreaterEqual(len(seen), 1, method)
            its = [p.iteration for p in seen]
            self.assertEqual(its, sorted(its), method)
            self.assertTrue(all(np.isfinite(p.residual) for p in seen), method)
            with self.assertRaises(krylov.Cancelled, msg=method):
                self.kd.solve(self.info, self.b, method=method, rtol=0.0, maxiter=10**8,
                              timeout_ms=60000, callback=lambda p: True)
            with self.assertRaises(krylov.Timeout, msg=method):
                self.kd.solve(self.info, self.b, method=method, rtol=0.0, maxiter=10**8,
                              timeout_ms=int(rng.integers(50, 300)))
            x = rng.uniform(-1, 1, self.A.shape[1])  # still serving
            self.assertLessEqual(rel_diff(self.kd.spmv(self.info, x), self.A @ x), 1e-12)

    def test_client_timeout_cancels_on_the_server(self):
        before = self.kd.status().requests_by_method["job.cancel"]
        with krylov.Client(daemon.address, timeout=0.3) as kd:
            t0 = time.monotonic()
            with self.assertRaises(krylov.Timeout) as cm:
                kd.solve(self.info, self.b, method="sd", rtol=0.0, maxiter=10**8,
                         timeout_ms=60000)
            self.assertLess(time.monotonic() - t0, 10)
            self.assertIn("no answer", cm.exception.message)
            self.assertFalse(kd.closed)
            # the same connection still answers correctly (the cancelled solve's reply is skipped)
            x = rng.uniform(-1, 1, self.A.shape[1])
            self.assertLessEqual(rel_diff(kd.spmv(self.info, x), self.A @ x), 1e-12)
        self.assertEqual(self.kd.status().requests_by_method["job.cancel"] - before, 1)


class TestMatrixManagement(ClientTest):
    def test_list_pin_drop(self):
        n = int(rng.integers(20, 60))
        A = sp.random(n, n, density=0.2, random_state=int(rng.integers(1 << 31)), format="csr")
        info = self.kd.put(A, name="to-drop")
        ids = {m.id for m in self.kd.list()}
        self.assertIn(info.id, ids)
        count = len(ids)
        self.assertTrue(self.kd.pin(info).pinned)
        self.assertTrue(self.kd.info(info).pinned)
        self.assertFalse(self.kd.pin(info, False).pinned)
        self.assertFalse(self.kd.info(info).pinned)
        listed = [m for m in self.kd.list() if m.id == info.id][0]
        self.assertEqual((listed.rows, listed.nnz, listed.name), (n, A.nnz, "to-drop"))
        self.assertIsNone(self.kd.drop(info))
        with self.assertRaises(krylov.NotFound):
            self.kd.info(info)
        with self.assertRaises(krylov.NotFound):
            self.kd.drop(info.id)
        with self.assertRaises(krylov.NotFound):
            self.kd.pin(info.id)
        self.assertEqual(len(self.kd.list()), count - 1)
        with self.assertRaises(TypeError):
            self.kd.info(12345)


class TestLimits(unittest.TestCase):
    """A daemon with small limits: TOO_LARGE and BUSY arrive as TooLarge and Busy."""

    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon("--max-message", "64K", "--max-connections", "2",
                            "--max-nrhs", "2").start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_too_large_and_busy(self):
        with krylov.Client(self.daemon.address) as kd:
            info = kd.put(load("494_bus.mtx"))
            with self.assertRaises(krylov.TooLarge) as cm:
                kd.spmv(info, np.ones(20000))  # 160 KB message
            self.assertEqual(cm.exception.code, "TOO_LARGE")
            with self.assertRaises(krylov.TooLarge):
                kd.solve(info, np.ones((494, 3)))  # nrhs over 2
            # the connection survives a refused message
            self.assertEqual(kd.solve(info, np.ones((494, 2))).nrhs, 2)
            with krylov.Client(self.daemon.address) as second:
                second.status()
                third = krylov.Client(self.daemon.address)
                with self.assertRaises(krylov.Busy) as cm:
                    third.status()
                self.assertEqual(cm.exception.code, "BUSY")
                self.assertTrue(third.closed)


class FakeServer:
    """A scripted msgpack-rpc peer: for each request it receives it sends what `script`
    returns (a list of messages, or raw bytes)."""

    def __init__(self, script):
        self.script = script
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.requests = []
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        conn, _ = self.listener.accept()
        unpacker = msgpack.Unpacker(raw=False)
        with conn:
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                unpacker.feed(data)
                for req in unpacker:
                    self.requests.append(req)
                    out = self.script(req)
                    if isinstance(out, bytes):
                        conn.sendall(out)
                    else:
                        conn.sendall(b"".join(msgpack.packb(m) for m in out))

    def close(self):
        self.listener.close()


class TestEnvelope(unittest.TestCase):
    def test_request_encoding(self):
        x = rng.uniform(-1, 1, int(rng.integers(20000, 40000)))
        chunks = _rpc.encode_request(77, "spmv", {"id": "ab" * 16, "x": _rpc.Bin(x), "alpha": 2.0})
        # the big array is sent from numpy's own memory
        self.assertTrue(any(isinstance(c, memoryview) and np.shares_memory(np.asarray(c), x)
                            for c in chunks))
        msg = msgpack.unpackb(b"".join(bytes(c) for c in chunks), raw=False)
        self.assertEqual(msg[:3], [0, 77, "spmv"])
        self.assertEqual(len(msg[3]), 1)
        params = msg[3][0]
        self.assertEqual(params["id"], "ab" * 16)
        self.assertEqual(params["alpha"], 2.0)
        np.testing.assert_array_equal(np.frombuffer(params["x"], "<f8"), x)
        small = _rpc.encode_request(3, "matrix.list", {})
        self.assertEqual(msgpack.unpackb(b"".join(small), raw=False), [0, 3, "matrix.list", []])

    def test_interleaved_messages_and_msgid_matching(self):
        def script(req):
            _, msgid, method, params = req
            if method != "solve":
                return [[1, msgid, None, {"version": "fake"}]]
            n = len(params[0]["b"]) // 8
            return [
                [2, "solve.progress", [{"msgid": msgid + 100, "rhs": 0, "iteration": 9,
                                        "residual": 9.0}]],
                [2, "other.notification", [{"msgid": msgid}]],
                [1, msgid + 50, None, {"stale": True}],  # an answer to an abandoned request
                [2, "solve.progress", [{"msgid": msgid, "rhs": 0, "iteration": 4,
                                        "residual": 0.5}]],
                [1, msgid, None, {"x": np.arange(n, dtype="<f8").tobytes(), "dtype": "float64",
                                  "status": "converged", "iterations": 4, "residual_norm": 1e-9,
                                  "relative_residual": 1e-10, "time_ms": 1.5, "message": ""}],
            ]

        fake = FakeServer(script)
        try:
            with krylov.Client(fake.address) as kd:
                seen = []
                res = kd.solve("cd" * 16, np.ones(5), callback=seen.append)
                self.assertEqual([(p.iteration, p.residual) for p in seen], [(4, 0.5)])
                np.testing.assert_array_equal(res.x, np.arange(5.0))
                self.assertEqual(res.iterations, 4)
                self.assertEqual(kd.status().version, "fake")
        finally:
            fake.close()
        req = fake.requests[0]
        self.assertEqual(req[0], 0)
        self.assertEqual(req[2], "solve")
        self.assertTrue(req[3][0]["progress"])

    def test_garbage_from_the_server(self):
        fake = FakeServer(lambda req: b"\xc1\xc1\xc1")
        try:
            kd = krylov.Client(fake.address)
            with self.assertRaises(krylov.ProtocolError) as cm:
                kd.status()
            self.assertEqual(cm.exception.code, "PROTOCOL")
            self.assertTrue(kd.closed)
        finally:
            fake.close()

    def test_unknown_error_code_keeps_its_code(self):
        fake = FakeServer(lambda req: [[1, req[1], {"code": "SOMETHING_NEW", "message": "m"},
                                        None]])
        try:
            with krylov.Client(fake.address) as kd:
                with self.assertRaises(krylov.KrylovError) as cm:
                    kd.status()
                self.assertEqual(cm.exception.code, "SOMETHING_NEW")
                self.assertEqual(type(cm.exception), krylov.KrylovError)
        finally:
            fake.close()

    def test_every_documented_code_has_its_class(self):
        expected = {
            "BAD_REQUEST": krylov.BadRequest, "NOT_FOUND": krylov.NotFound,
            "TOO_LARGE": krylov.TooLarge, "DEVICE_MEMORY": krylov.DeviceMemory,
            "DEVICE_ERROR": krylov.DeviceError, "BUSY": krylov.Busy,
            "CANCELLED": krylov.Cancelled, "TIMEOUT": krylov.Timeout,
            "UNSUPPORTED": krylov.Unsupported, "NOT_SPD": krylov.NotSPD,
            "UNAUTHENTICATED": krylov.Unauthenticated, "FORBIDDEN": krylov.Forbidden,
            "QUOTA": krylov.Quota, "STORAGE_FULL": krylov.StorageFull,
            "INTERNAL": krylov.InternalError,
        }
        # the codes docs/PROTOCOL.md lists, read from the document itself
        with open(os.path.join(SOURCE_DIR, "docs", "PROTOCOL.md")) as f:
            doc = f.read()
        table = doc[doc.index("## Errors"):]
        documented = set()
        for line in table.splitlines():
            if line.startswith("| `"):
                documented.add(line.split("`")[1])
        self.assertEqual(documented, set(expected))
        for code, cls in expected.items():
            e = krylov.errors.error_from_wire({"code": code, "message": "msg " + code})
            self.assertIs(type(e), cls)
            self.assertEqual((e.code, e.message), (code, "msg " + code))
            self.assertIsInstance(e, krylov.KrylovError)


if __name__ == "__main__":
    unittest.main()
