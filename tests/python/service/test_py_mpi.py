"""krylovd under mpirun (issue 17): one matrix spread over KD_MPI_RANKS ranks (1: the plain krylovd,
no mpirun), driven through the wire protocol and compared with a single-process krylovd on the same
inputs and with SciPy.

- matrix.put distribute=true of 494_bus, of a generated matrix with empty rows and one dense row
  and column, and of a 2-D Laplacian: matrix.info says how it is spread (ranks, rows and nonzeros
  per rank summing to the matrix's, halo sizes), a plain put or distribute=false stays whole, and
  "auto" spreads what has more nonzeros than --distribute-nnz; a matrix over rank 0's device budget
  whole (DEVICE_MEMORY) is put spread, its part counted;
- spmv with 1 and 3 columns, alpha and beta, float64 and float32 requests: the single process's y
  to rounding, and A @ x;
- solve with cg, pcg and sd, one and three right-hand sides, x0: the same statuses and iteration
  counts as the single process (within 10% on 494_bus, whose counts move with the order of the
  sums), the true residual ||b - A x|| / ||b|| on the host, and SciPy's CG count within 10%;
- bad input (x of the wrong length, a method that does not run spread) is BAD_REQUEST naming the
  problem, and the job keeps serving; drop forgets the matrix on every rank and a put brings it
  back;
- timeout_ms and job.cancel stop a long spread solve, after which the job serves again;
- solve.progress notifications and history come back as on one process;
- the whole job stopped with SIGTERM to its serving rank exits 0, and started again on the same
  state directory serves the spread matrix with the same id and the same answers; after kill -9
  of one rank the job ends (nothing wrong is answered) and, started again, serves it again.
"""

import os
import signal
import socket
import tempfile
import shutil
import time
import unittest

import msgpack
import numpy as np
import scipy.io
import scipy.sparse as sp
import scipy.sparse.linalg as sla

from kd_daemon import Daemon, make_rng, matrix_path
from kd_rpc import Client, RpcError

RANKS = int(os.environ.get("KD_MPI_RANKS", "2"))
MPIEXEC = os.environ.get("KD_MPIEXEC", "mpirun")
AUTO_NNZ = 3000  # --distribute-nnz of the job under test
BUDGET = 3 << 20  # --device-memory of the job: rank 0's budget


def mpi_env():
    env = dict(os.environ)
    env.update({"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                # shared memory only, and ranks that yield when idle (2 cores, PoCL's threads)
                "OMPI_MCA_btl": "self,vader", "OMPI_MCA_mpi_yield_when_idle": "1",
                "OMPI_MCA_rmaps_base_oversubscribe": "1"})
    return env


class Job(Daemon):
    """krylovd on KD_MPI_RANKS ranks (mpirun), or alone for 1, on a state directory that
    survives a restart; stop() sends SIGTERM to the serving rank (it stops the others)."""

    def __init__(self, state_dir):
        launcher = [MPIEXEC, "-np", str(RANKS), "--oversubscribe"] if RANKS > 1 else None
        super().__init__("--distribute-nnz", str(AUTO_NNZ), "--device-memory", str(BUDGET),
                         launcher=launcher, env=mpi_env(), directory=state_dir)

    def serving_pid(self):
        """Rank 0's process: mpirun's child whose environment says rank 0."""
        if RANKS == 1:
            return self.proc.pid
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                if ppid != self.proc.pid:
                    continue
                with open(f"/proc/{pid}/environ", "rb") as f:
                    env = f.read().split(b"\0")
                if b"OMPI_COMM_WORLD_RANK=0" in env:
                    return int(pid)
            except (OSError, IndexError, ValueError):
                continue
        raise RuntimeError("no rank 0 among mpirun's children")

    def follower_pid(self):
        """A rank other than 0."""
        serving = self.serving_pid()
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == serving:
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == self.proc.pid:
                        return int(pid)
            except (OSError, IndexError, ValueError):
                continue
        raise RuntimeError("no follower among mpirun's children")

    def stop_pid(self):
        return self.serving_pid()


def laplace2d(m):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(m, m))
    return (sp.kron(sp.identity(m), t) + sp.kron(t, sp.identity(m))).tocsr()


def ragged(n, rng):
    """Empty rows, one dense row and one dense column, random elsewhere (not square-free)."""
    a = sp.random(n, n, density=0.02, format="lil", random_state=int(rng.integers(1 << 30)))
    a[n // 3, :] = rng.standard_normal(n)
    a[:, (2 * n) // 3] = rng.standard_normal((n, 1))
    a = a.tocsr()
    for r in range(0, n, 7):
        if r not in (n // 3,):
            a.data[a.indptr[r]:a.indptr[r + 1]] = 0.0
    a.eliminate_zeros()
    a.sort_indices()
    return a


def arrow_spd(n, rng):
    """SPD: a dense first row and column over a dominant diagonal."""
    a = sp.lil_matrix((n, n))
    v = rng.uniform(-0.5, 0.5, n)
    a[0, :] = v
    a[:, 0] = v.reshape(n, 1)
    a.setdiag(np.abs(v).sum() + 2.0 + rng.uniform(0, 1, n))
    return a.tocsr()


def scipy_cg_iterations(a, b, rtol):
    """SciPy's CG iteration count to ||r|| <= rtol ||b|| (its keyword was tol before 1.12)."""
    count = [0]

    def step(_):
        count[0] += 1

    try:
        sla.cg(a, b, rtol=rtol, atol=0.0, maxiter=100000, callback=step)
    except TypeError:
        sla.cg(a, b, tol=rtol, atol=0.0, maxiter=100000, callback=step)
    return count[0]


def spmv(c, mid, x, k, dtype="float64", **kw):
    wire = "<f8" if dtype == "float64" else "<f4"
    params = dict(id=mid, x=np.asarray(x, wire).tobytes(order="F"), dtype=dtype, **kw)
    if k > 1:
        params["ncols"] = k
    if "y" in params:
        params["y"] = np.asarray(params["y"], wire).tobytes(order="F")
    r = c.call("spmv", **params)
    y = np.frombuffer(r["y"], dtype=wire).astype(np.float64)
    return y if k == 1 else y.reshape((-1, k), order="F")


class TestMpi(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rng = make_rng()
        cls.dir = tempfile.mkdtemp(prefix="krylovd-mpi-")
        cls.job = Job(cls.dir).start()
        cls.ref = Daemon().start()  # the single process the spread answers are compared with
        cls.c = Client(cls.job.port)
        cls.r = Client(cls.ref.port)

    @classmethod
    def tearDownClass(cls):
        cls.c.close()
        cls.r.close()
        status = cls.job.stop()
        ref = cls.ref.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert status == 0, f"the job exited with status {status}"
        assert ref == 0, f"the reference krylovd exited with status {ref}"

    def put_both(self, a, dtype="float64", **kw):
        got = self.c.put_csr(a, dtype=dtype, distribute=True, **kw)
        want = self.r.put_csr(a, dtype=dtype, distribute=False)
        self.assertEqual(got["id"], want["id"])
        return got

    def check_spread(self, info, a):
        self.assertEqual(info["distributed"], RANKS > 1)  # one process: accepted, not spread
        self.assertEqual(info["ranks"], RANKS)
        if RANKS == 1:
            self.assertNotIn("rows_per_rank", info)
            return
        self.assertEqual(len(info["rows_per_rank"]), RANKS)
        self.assertEqual(sum(info["rows_per_rank"]), a.shape[0])
        self.assertEqual(sum(info["nnz_per_rank"]), a.nnz)
        self.assertEqual(len(info["halo"]["ghosts"]), RANKS)
        # what one rank receives is what the others send it: the totals agree
        self.assertEqual(sum(info["halo"]["ghosts"]), sum(info["halo"]["sends"]))

    def check_spmv(self, a, mid, dtype="float64"):
        n = a.shape[0]
        tol = 1e-12 if dtype == "float64" else 2e-5
        for k, alpha, beta in ((1, 1.0, 0.0), (3, 1.0, 0.0), (1, -0.5, 2.0), (3, 2.0, -1.0)):
            x = self.rng.standard_normal((n, k)) if k > 1 else self.rng.standard_normal(n)
            y0 = self.rng.standard_normal(x.shape)
            kw = dict(alpha=alpha, beta=beta)
            if beta != 0.0:
                kw["y"] = y0
            got = spmv(self.c, mid, x, k, dtype, **kw)
            want = spmv(self.r, mid, x, k, dtype, **kw)
            exact = alpha * (a @ x) + (beta * y0 if beta != 0.0 else 0.0)
            scale = max(1.0, np.abs(exact).max())
            self.assertLessEqual(np.abs(got - want).max(), tol * scale, (k, alpha, beta))
            self.assertLessEqual(np.abs(got - exact).max(), 10 * tol * scale, (k, alpha, beta))

    def check_solve(self, a, mid, method, k, x0=False, slack=0.0, rtol=1e-8, **kw):
        n = a.shape[0]
        b = self.rng.standard_normal((n, k)) if k > 1 else self.rng.standard_normal(n)
        extra = dict(method=method, rtol=rtol, **kw)
        if x0:
            extra["x0"] = 0.01 * self.rng.standard_normal(b.shape)
        x, got = self.c.solve(mid, b, **extra)
        _, want = self.r.solve(mid, b, **extra)
        st = [got["status"]] if k == 1 else got["status"]
        its, wits = ([got["iterations"]], [want["iterations"]]) if k == 1 else (
            got["iterations"], want["iterations"])
        self.assertEqual(st, [want["status"]] if k == 1 else want["status"], method)
        for i, w in zip(its, wits):
            self.assertLessEqual(abs(i - w), int(np.ceil(slack * w)), (method, its, wits))
        xs = x.reshape(n, -1) if k == 1 else x
        bs = b.reshape(n, -1) if k == 1 else b
        for j in range(k):
            if st[j] == "converged":
                rel = np.linalg.norm(bs[:, j] - a @ xs[:, j]) / np.linalg.norm(bs[:, j])
                self.assertLess(rel, 10 * rtol, (method, j, rel))
        return got

    def test_494_bus(self):
        a = scipy.io.mmread(matrix_path("494_bus.mtx")).tocsr()
        a.sort_indices()
        put = self.put_both(a)
        self.check_spread(put, a)
        self.check_spread(self.c.call("matrix.info", id=put["id"]), a)
        self.check_spmv(a, put["id"])
        self.check_spmv(a, put["id"], dtype="float32")
        # ill-conditioned: counts move with the order of the sums
        self.check_solve(a, put["id"], "cg", 1, slack=0.1, rtol=1e-6)
        self.check_solve(a, put["id"], "pcg", 3, x0=True, slack=0.1, rtol=1e-6)

    def test_laplace_methods(self):
        a = laplace2d(20)
        put = self.put_both(a)
        self.check_spread(put, a)
        for method, k, x0 in (("cg", 1, False), ("cg", 3, True), ("pcg", 1, True),
                              ("pcg", 3, False), ("sd", 1, False), ("cg1", 3, True)):
            got = self.check_solve(a, put["id"], method, k, x0=x0,
                                   rtol=1e-4 if method == "sd" else 1e-8)
            self.assertEqual(got["method"], "cg" if method == "pcg" else method)
        # SciPy's CG on the same system: the same iteration count within 10%
        b = self.rng.standard_normal(a.shape[0])
        _, res = self.c.solve(put["id"], b, method="cg", rtol=1e-8)
        want = scipy_cg_iterations(a, b, 1e-8)
        self.assertLessEqual(abs(res["iterations"] - want), max(1, want // 10), (res, want))
        # progress notifications come from the serving rank as on one process
        self.c.notifications.clear()
        _, res = self.c.solve(put["id"], np.ones(a.shape[0]), method="cg", progress=True,
                              check_every=5, history=True)
        self.assertEqual(res["status"], "converged")
        self.assertGreater(len(res["history"]), 1)
        progress = [m for m in self.c.notifications if m[1] == "solve.progress"]
        self.assertGreater(len(progress), 0)
        self.assertEqual(set(progress[0][2][0]), {"msgid", "rhs", "iteration", "residual"})

    def test_float32_matrix(self):
        a = laplace2d(12)
        put = self.put_both(a, dtype="float32")
        self.assertEqual(put["dtype"], "float32")
        self.check_spmv(a, put["id"], dtype="float32")
        # in float32 the spread's sums, folded in another order, can end one iteration apart
        # (30 against 31 on the H200 at 3 ranks), as test_dist_solve allows
        self.check_solve(a, put["id"], "cg", 2, rtol=1e-5, slack=1.0 / 30)

    def test_ragged_and_arrow(self):
        a = ragged(150, self.rng)
        self.assertGreater(a.nnz, 0)
        put = self.put_both(a)
        self.check_spread(put, a)
        self.check_spmv(a, put["id"])
        s = arrow_spd(90, self.rng)
        put = self.put_both(s)
        self.check_spread(put, s)
        self.check_spmv(s, put["id"])
        self.check_solve(s, put["id"], "cg", 3, x0=True)
        self.check_solve(s, put["id"], "pcg", 1)

    def test_tiny_more_ranks_than_rows(self):
        a = sp.csr_matrix(np.array([[4.0, 1.0], [1.0, 3.0]]))
        put = self.put_both(a)
        self.check_spread(put, a)
        self.check_spmv(a, put["id"])
        self.check_solve(a, put["id"], "cg", 1)

    def test_auto_and_false(self):
        small = laplace2d(8)  # 288 nonzeros: stays whole under auto
        big = laplace2d(30)   # 4380 nonzeros > AUTO_NNZ
        self.assertEqual(self.c.put_csr(small)["ranks"], 1)
        self.assertFalse(self.c.put_csr(small)["distributed"])
        info = self.c.put_csr(big)
        self.assertEqual(info["ranks"], RANKS)
        self.assertEqual(info["distributed"], RANKS > 1)
        whole = self.c.put_csr(laplace2d(31), distribute=False)
        self.assertEqual(whole["ranks"], 1)
        self.assertFalse(whole["distributed"])
        with self.assertRaises(RpcError) as e:
            self.c.put_csr(sp.random(5, 7, density=0.5, format="csr"), distribute=True)
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        self.assertIn("square", e.exception.message)
        with self.assertRaises(RpcError) as e:
            self.c.put_csr(small, distribute="yes")
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        self.assertIn("distribute", e.exception.message)

    def test_bad_input_then_serving(self):
        a = laplace2d(10)
        mid = self.c.put_csr(a, distribute=True)["id"]
        with self.assertRaises(RpcError) as e:
            spmv(self.c, mid, np.ones(a.shape[0] + 1), 1)
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        self.assertIn("x has 101 entries", e.exception.message)
        with self.assertRaises(RpcError) as e:
            self.c.solve(mid, np.ones(a.shape[0] - 1), method="cg")
        self.assertEqual(e.exception.code, "BAD_REQUEST")
        if RANKS > 1:
            for method, pre, what in (("gmres", None, "method gmres"),
                                      ("cg", "ic0", "preconditioner ic0"),
                                      ("auto", None, "method auto")):
                kw = {"preconditioner": pre} if pre else {}
                with self.assertRaises(RpcError) as e:
                    self.c.solve(mid, np.ones(a.shape[0]), method=method, **kw)
                self.assertEqual(e.exception.code, "BAD_REQUEST", method)
                self.assertIn(what, e.exception.message)
                self.assertIn("spread", e.exception.message)
        x = self.rng.standard_normal(a.shape[0])
        self.assertLess(np.abs(spmv(self.c, mid, x, 1) - a @ x).max(), 1e-12)

    def test_drop_and_put_again(self):
        a = laplace2d(9) + sp.identity(81, format="csr")
        mid = self.c.put_csr(a, distribute=True)["id"]
        self.assertEqual(self.c.call("matrix.drop", id=mid)["dropped"], True)
        with self.assertRaises(RpcError) as e:
            spmv(self.c, mid, np.ones(81), 1)
        self.assertEqual(e.exception.code, "NOT_FOUND")
        self.assertEqual(self.c.put_csr(a, distribute=True)["id"], mid)
        x = self.rng.standard_normal(81)
        self.assertLess(np.abs(spmv(self.c, mid, x, 1) - a @ x).max(), 1e-12)

    # Steepest descent, not CG: asked for rtol 0, CG on this matrix reaches rounding in about
    # 4,000 iterations and then breaks down (p'Ap underflows to 0), 1.8 s here on PoCL and sooner
    # on a faster machine, where the solve then answered before its 1.5 s timeout ("RpcError not
    # raised", issue 32). Steepest descent's recurrence shrinks by about 1 - 1/cond(A) (cond about
    # 1,500) an iteration: over 500,000 iterations to underflow, seconds on any device.
    LONG_METHOD = "sd"

    def long_solve(self, c, mid, n, **kw):
        return c.call("solve", id=mid, b=np.ones(n).tobytes(), method=self.LONG_METHOD,
                      rtol=0.0, atol=0.0, maxiter=10 ** 8, check_every=10, **kw)

    def test_timeout_and_cancel(self):
        a = laplace2d(60)  # converges only to rtol 0: runs until stopped
        n = a.shape[0]
        mid = self.c.put_csr(a, distribute=True)["id"]
        t0 = time.monotonic()
        with self.assertRaises(RpcError) as e:
            self.long_solve(self.c, mid, n, timeout_ms=1500)
        self.assertEqual(e.exception.code, "TIMEOUT")
        self.assertLess(time.monotonic() - t0, 30)
        # job.cancel from the same connection while the solve runs
        sock = socket.create_connection(("127.0.0.1", self.job.port), timeout=60)
        solve = [0, 1, "solve", [dict(id=mid, b=np.ones(n).tobytes(), method=self.LONG_METHOD,
                                       rtol=0.0, atol=0.0, maxiter=10 ** 8, check_every=10)]]
        sock.sendall(msgpack.packb(solve, use_bin_type=True))
        time.sleep(1.0)
        sock.sendall(msgpack.packb([0, 2, "job.cancel", [dict(msgid=1)]], use_bin_type=True))
        unpacker = msgpack.Unpacker(raw=False)
        answers = {}
        while 1 not in answers:
            data = sock.recv(1 << 20)
            self.assertTrue(data, "the job closed the connection")
            unpacker.feed(data)
            for msg in unpacker:
                if msg[0] == 1:
                    answers[msg[1]] = msg
        sock.close()
        self.assertIsNotNone(answers[1][2], "the solve was not stopped")
        self.assertEqual(answers[1][2]["code"], "CANCELLED")
        x = self.rng.standard_normal(n)
        self.assertLess(np.abs(spmv(self.c, mid, x, 1) - a @ x).max(), 1e-12)

    def test_zy_fits_the_job_not_one_rank(self):
        """A matrix over rank 0's device budget whole, under it spread (its part and vectors)."""
        if RANKS == 1:
            return
        # spread matrices are never evicted: the earlier tests' would crowd rank 0's budget (on
        # a GPU, whose formats take more room than PoCL's, the solve's vectors found no room)
        for m in self.c.call("matrix.list")["matrices"]:
            self.c.call("matrix.drop", id=m["id"])
        # 9 entries a row, so that the matrix outweighs a solve's vectors: 32,400 rows, 3.6 MB
        # of CSR whole; rank 0's half (1.8 MB) and its share of cg1's 8 vectors (1.0 MB) fit
        # (a 5-point Laplacian's half and vectors weigh as much as it does whole)
        e = sp.diags([1.0, 1.0, 1.0], [-1, 0, 1], shape=(180, 180))
        a = (9.0 * sp.identity(180 * 180) - sp.kron(e, e)).tocsr()
        with self.assertRaises(RpcError) as e:
            self.c.put_csr(a, distribute=False)
        self.assertEqual(e.exception.code, "DEVICE_MEMORY")
        put = self.c.put_csr(a, distribute=True, select="heuristic")
        self.check_spread(put, a)
        self.assertLess(put["device_bytes"], BUDGET)
        x = self.rng.standard_normal(a.shape[0])
        self.assertLess(np.abs(spmv(self.c, put["id"], x, 1) - a @ x).max(), 1e-12)
        # and solved: the budget holds this rank's share of the vectors, not the whole ones
        b = self.rng.standard_normal(a.shape[0])
        xs, res = self.c.solve(put["id"], b, method="cg1", rtol=1e-8)
        self.assertEqual(res["status"], "converged", res)
        self.assertLess(np.linalg.norm(b - a @ xs), 1.01e-8 * np.linalg.norm(b))
        self.c.call("matrix.drop", id=put["id"])  # spread matrices are never evicted

    def test_zz_restart(self):  # last: it restarts the job
        a = laplace2d(15)
        mid = self.c.put_csr(a, distribute=True)["id"]
        x = self.rng.standard_normal(a.shape[0])
        before = spmv(self.c, mid, x, 1)
        self.c.close()
        self.assertEqual(self.job.stop(), 0)
        type(self).job = Job(self.dir).start()
        type(self).c = Client(self.job.port)
        info = self.c.call("matrix.info", id=mid)
        self.assertEqual(info["distributed"], RANKS > 1)
        after = spmv(self.c, mid, x, 1)
        self.assertLess(np.abs(after - before).max(), 1e-12)
        self.check_spread(self.c.call("matrix.info", id=mid), a)
        b = self.rng.standard_normal(a.shape[0])
        xs, res = self.c.solve(mid, b, method="cg")
        self.assertEqual(res["status"], "converged")
        self.assertLess(np.linalg.norm(b - a @ xs) / np.linalg.norm(b), 1e-7)
        if RANKS == 1:
            return
        # kill -9 of one rank: MPI ends the whole job; nothing wrong is answered meanwhile, and
        # the job started again serves the matrix as before
        os.kill(self.job.follower_pid(), signal.SIGKILL)
        try:
            late = spmv(self.c, mid, x, 1)
            self.assertLess(np.abs(late - before).max(), 1e-12)  # if it was answered at all
        except (RpcError, RuntimeError, OSError):
            pass
        self.assertNotEqual(self.job.proc.wait(timeout=60), 0)
        self.job.proc = None
        self.c.close()
        type(self).job = Job(self.dir).start()
        type(self).c = Client(self.job.port)
        self.assertLess(np.abs(spmv(self.c, mid, x, 1) - before).max(), 1e-12)


if __name__ == "__main__":
    unittest.main()
