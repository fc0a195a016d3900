"""Every size from the wire is charged before it is used (issue 33): for every method, requests
with extreme declared sizes and small bodies (rows and cols near 2^31, nrhs, ncols, restart,
maxiter, batch and item counts, preconditioner levels; negative, zero, and products that
overflow int32 and int64) must be answered with a clean error (or succeed when legitimately
small), leave the server alive, and not make it grow by more than a few times the bytes it
received plus what the accepted matrices need.

The daemon runs under an address-space cap (prlimit --as), so that an unbounded allocation fails
inside krylovd instead of taking the machine, and with a small device budget (--device-memory),
so that a request whose device memory is not charged shows up as RSS growth. Peak RSS is VmHWM
after writing 5 to /proc/PID/clear_refs before each request.

PUT_CASES holds the matrix.put cases of issue 33's first report, asserted with test_put_cases'
other extreme shapes.

On a GPU (KD_TEST_DEVICE=gpu) the cap is left out: NVIDIA's OpenCL reserves more address space
than any cap that would still catch a runaway allocation, and finds no device under one.
"""

import os
import shutil
import time
import unittest

import msgpack
import numpy as np
import scipy.sparse as sp

from kd_daemon import BIN_DIR, Daemon, laplacian, make_rng
from kd_rpc import Client, RpcError

MB = 1 << 20
SLACK = 32 * MB  # growth allowed beyond 4 x the request's bytes and the accepted matrices
AS_CAP = 8 << 30  # krylovd's address space: PoCL maps a few GB of its own

# The error codes a refused size may get.
CLEAN = {"TOO_LARGE", "BAD_REQUEST", "QUOTA", "DEVICE_MEMORY", "NOT_FOUND", "UNSUPPORTED",
         "NOT_SPD", "TIMEOUT"}

# Issue 33's matrix.put cases: a 73-byte COO put that grew krylovd to 23.6 GB, and a Matrix
# Market header declaring 2^24 rows for one entry (+780 MB before the put charged its sizes).
_ONE = np.array([0], "<i4").tobytes()
PUT_CASES = [
    ("COO 2^31-2 x 2^31-1, one entry",
     dict(rows=2**31 - 2, cols=2**31 - 1, row=_ONE, col=_ONE, values=np.ones(1).tobytes())),
    ("mtx declaring 2^24 rows, one entry",
     dict(mtx="%%MatrixMarket matrix coordinate real general\n16777216 16777216 1\n1 1 1.0\n")),
]

BIG = [2**31 - 2, 2**31 - 1, 2**31, 2**32 + 1, 2**62, 2**63 - 1, -1, -(2**31), 0]


def csr_bytes(rows, nnz):
    return 4 * (rows + 1) + 12 * nnz


def status_of(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                out[key] = int(value.split()[0]) * 1024
    return out


class SizesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rng = make_rng()
        gpu = os.environ.get("KD_TEST_DEVICE", "auto") == "gpu"
        # ASan's shadow memory needs terabytes of address space, and its quarantine keeps freed
        # memory resident: a sanitized build gets no cap and no RSS bound (answers still count)
        with open(os.path.join(BIN_DIR, "krylovd"), "rb") as f:
            cls.sanitized = b"__asan_init" in f.read()
        capped = shutil.which("prlimit") and not gpu and not cls.sanitized
        launcher = ["prlimit", f"--as={AS_CAP}"] if capped else []
        cls.daemon = Daemon("--device-memory", "64M", "--max-nrhs", "64", "--max-message", "16M",
                            launcher=launcher).start()
        cls.pid = cls.daemon.proc.pid  # prlimit execs krylovd: the same pid
        cls.client = Client(cls.daemon.port)
        c = cls.client
        cls.spd = laplacian(16)  # 256 rows
        cls.spd_id = c.put_csr(cls.spd)["id"]
        ns = sp.csr_matrix(cls.spd + sp.diags(np.linspace(0.1, 1.0, 255), 1, shape=(256, 256)))
        ns.sum_duplicates()
        cls.ns_id = c.put_csr(ns)["id"]
        cls.ns_nnz = ns.nnz
        rect = sp.random(40, 70, density=0.1, random_state=1, format="csr")
        cls.rect_id = c.put_csr(rect)["id"]
        # 300,000 rows: GMRES(200)'s basis would be 480 MB, over the 64 MB budget
        n = 300_000
        big = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        big = big + sp.csr_matrix(([0.5], ([0], [n - 1])), shape=(n, n))
        big.sum_duplicates()
        cls.big_rows = n
        cls.big_id = c.put_csr(big)["id"]
        mid = sp.diags([-1.0, 2.5, -1.0], [-1, 0, 1], shape=(20_000, 20_000), format="csr")
        mid.sum_duplicates()
        cls.mid_id = c.put_csr(mid)["id"]
        # 500,000 x 1: one column, so x is tiny and y (rows x ncols) is not
        tall = sp.csr_matrix((np.ones(500_000), (np.arange(500_000), np.zeros(500_000))),
                             shape=(500_000, 1))
        cls.tall_id = c.put_csr(tall)["id"]
        p = laplacian(4)
        vals = np.concatenate([p.data * (1 + 0.1 * s) for s in range(3)])
        cls.batch_id = c.call("matrix.put", rows=16, cols=16, batch=3,
                              indptr=np.asarray(p.indptr, "<i4").tobytes(),
                              indices=np.asarray(p.indices, "<i4").tobytes(),
                              values=vals.tobytes())["id"]
        cls.warm_up()

    @classmethod
    def warm_up(cls):
        """Every code path once with sane sizes, so that a program compiled on first use (PoCL's
        compiler is large) is not counted against a probe."""
        c, b = cls.client, np.ones(256).tobytes()
        c.call("spmv", id=cls.spd_id, x=b)
        c.call("spmv", id=cls.spd_id, x=np.ones(256 * 8).tobytes(), ncols=8)
        for method, pre in (("cg", "none"), ("cg", "jacobi"), ("gmres", "none"),
                            ("bicgstab", "none"), ("minres", "none"), ("cg", "amg"),
                            ("cg", "chebyshev"), ("cg", "block_jacobi"), ("gmres", "ilu0"),
                            ("cg", "ic0"), ("auto", "none")):
            c.call("solve", id=cls.spd_id, b=b, method=method, preconditioner=pre, history=True)
        c.call("solve", id=cls.ns_id, b=b, method="gmres", restart=10)
        c.call("solve", id=cls.batch_id, b=np.ones(48).tobytes())
        c.call("solve", id=cls.batch_id, b=np.ones(48).tobytes(), method="gmres")
        c.call("spmv", id=cls.batch_id, x=np.ones(48).tobytes())
        c.call("solve.batch", items=[{"id": cls.spd_id, "b": b}] * 2)
        c.call("solve.batch", items=[{"id": cls.spd_id, "b": b}] * 2, method="gmres")
        c.call("matrix.multiply", a=cls.spd_id, b=cls.spd_id)
        c.call("matrix.put", like=cls.spd_id, values=np.ones(cls.spd.nnz).tobytes())

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        status = cls.daemon.stop()
        assert status == 0, f"krylovd exited with status {status}"

    def setUp(self):
        self.failures = []

    # ---- one probe ----

    def probe(self, what, method, params, ok_bytes=0):
        """Send one request; check a clean answer, the server alive, and peak RSS growth within
        4 x the request's bytes + ok_bytes (matrices the request may keep) + SLACK."""
        sent = len(msgpack.packb([0, 0, method, [params]], use_bin_type=True))
        with open(f"/proc/{self.pid}/clear_refs", "w") as f:
            f.write("5")
        before = status_of(self.pid)["VmRSS"]
        problems = []
        answer = "ok"
        try:
            self.client.call(method, **params)
        except RpcError as e:
            answer = f"{e.code}: {e.message}"
            if e.code not in CLEAN:
                problems.append(f"error code {e.code}")
            if not e.message:
                problems.append("an error without a message")
        except (OSError, RuntimeError) as e:
            problems.append(f"no answer ({e})")
            answer = "none"
        alive = self.daemon.proc.poll() is None
        grown = status_of(self.pid)["VmHWM"] - before if alive else 0
        allowed = 4 * sent + ok_bytes + SLACK
        if not alive:
            problems.append(f"krylovd died (status {self.daemon.proc.returncode})")
        elif grown > allowed and not self.sanitized:
            problems.append(f"peak RSS grew {grown / MB:.1f} MB, over {allowed / MB:.1f} MB "
                            f"(request {sent} bytes)")
        if alive and not problems:
            try:
                self.client.call("server.status")
            except (RpcError, OSError, RuntimeError) as e:
                problems.append(f"server.status after it failed: {e}")
        line = f"{method} {what}: {answer[:200]} (+{grown / MB:.1f} MB, sent {sent} B)"
        print(line + (" PROBLEM: " + "; ".join(problems) if problems else ""), flush=True)
        if problems:
            self.failures.append(f"{line}: {'; '.join(problems)}")
        if not alive:
            raise AssertionError(f"krylovd died at {method} {what}")
        return answer

    def check_all(self):
        self.assertEqual(self.failures, [], "\n".join(self.failures))

    # ---- the methods ----

    def test_put_cases(self):
        """matrix.put: issue 33's cases (PUT_CASES) and extreme declared shapes."""
        one = np.array([0], "<i4").tobytes()
        for what, params in PUT_CASES:
            self.probe(what, "matrix.put", params, ok_bytes=csr_bytes(1, 1))
        for rows, cols in ((2**31, 1), (1, 2**31), (-1, 4), (2**62, 2**62), (2**63 - 1, 1)):
            self.probe(f"COO {rows} x {cols}", "matrix.put",
                       dict(rows=rows, cols=cols, row=one, col=one, values=np.ones(1).tobytes()))
        self.probe("CSR 2^31-2 rows, indptr of 2", "matrix.put",
                   dict(rows=2**31 - 2, cols=4, indptr=np.array([0, 1], "<i4").tobytes(),
                        indices=one, values=np.ones(1).tobytes()))
        for k in (2**31, 2**62, -1, 0):
            p = laplacian(2)
            self.probe(f"batch {k}", "matrix.put",
                       dict(rows=4, cols=4, batch=k, indptr=np.asarray(p.indptr, "<i4").tobytes(),
                            indices=np.asarray(p.indices, "<i4").tobytes(),
                            values=np.ones(p.nnz).tobytes()))
        for v in (0, 1, 2**40):
            self.probe(f"like with {v} values", "matrix.put",
                       dict(like=self.spd_id, values=np.ones(v if v < 1 << 20 else 3).tobytes()),
                       ok_bytes=csr_bytes(256, self.spd.nnz))
        self.check_all()

    def test_spmv(self):
        for ncols in BIG + [65, 64]:
            self.probe(f"ncols={ncols}", "spmv", dict(id=self.spd_id, x=np.ones(256).tobytes(),
                                                      ncols=ncols))
        # 64 columns of the big matrix: x is 154 MB... too large for a test; 64 of the small one
        self.probe("ncols=64 whole", "spmv", dict(id=self.spd_id, x=np.ones(256 * 64).tobytes(),
                                                   ncols=64))
        self.probe("ncols=8 on a batch", "spmv", dict(id=self.batch_id, x=np.ones(48).tobytes(),
                                                       ncols=8))
        # y of 500,000 x 64 values (256 MB) from an x of 64: over the 64 MB budget
        answer = self.probe("tall, ncols=64", "spmv", dict(id=self.tall_id, x=np.ones(64).tobytes(),
                                                          ncols=64))
        self.assertTrue(answer.startswith("DEVICE_MEMORY"), answer)
        self.probe("tall, ncols=2", "spmv", dict(id=self.tall_id, x=np.ones(2).tobytes(), ncols=2),
                   ok_bytes=3 * 500_000 * 2 * 8)
        self.probe("x of 1 value, big matrix", "spmv", dict(id=self.big_id, x=np.ones(1).tobytes()))
        self.probe("rectangular, wrong x", "spmv", dict(id=self.rect_id, x=np.ones(40).tobytes()))
        self.check_all()

    def test_solve(self):
        b = np.ones(256).tobytes()
        for n in BIG + [65]:
            self.probe(f"nrhs={n}", "solve", dict(id=self.spd_id, b=b, nrhs=n))
        for r in BIG + [200, 201]:
            self.probe(f"gmres restart={r}", "solve", dict(id=self.ns_id, b=b, method="gmres",
                                                           restart=r))
        for m in BIG:
            self.probe(f"maxiter={m} history", "solve",
                       dict(id=self.spd_id, b=b, maxiter=m, history=True, rtol=0.0,
                            timeout_ms=1000))
        for k in BIG:
            self.probe(f"check_every={k}", "solve", dict(id=self.spd_id, b=b, check_every=k,
                                                         timeout_ms=2000))
        for t in (2**63 - 1, 2**64 - 1, -1):
            self.probe(f"timeout_ms={t}", "solve", dict(id=self.spd_id, b=b, timeout_ms=t))
        # the big matrix: b is 2.4 MB, GMRES(200)'s basis 480 MB (960 MB with amg's operator)
        bb = np.ones(self.big_rows).tobytes()
        # (maxiter past restart: the basis is written, so PoCL's lazily backed buffers show)
        for r, pre in ((200, "none"), (200, "jacobi"), (150, "none")):
            answer = self.probe(f"big gmres restart={r} {pre}", "solve",
                                dict(id=self.big_id, b=bb, method="gmres", restart=r,
                                     preconditioner=pre, maxiter=r + 10, rtol=1e-30))
            self.assertIn("restart", answer)
        answer = self.probe("big auto restart=200", "solve",
                            dict(id=self.big_id, b=bb, method="auto", restart=200, maxiter=210,
                                 rtol=1e-30))
        self.assertIn("restart", answer)
        # 64 right-hand sides of 20,000 rows: b is 10 MB, bicgstab's 10 vectors a column 100 MB
        bm = np.ones(20_000 * 64).tobytes()
        for method in ("bicgstab", "minres", "cg"):
            answer = self.probe(f"mid {method} nrhs=64", "solve",
                                dict(id=self.mid_id, b=bm, nrhs=64, method=method, maxiter=5))
            if method != "cg":
                self.assertTrue(answer.startswith("DEVICE_MEMORY"), answer)
        self.probe("big nrhs=64 with b of 1 column", "solve", dict(id=self.big_id, b=bb, nrhs=64))
        options = [("amg", {"max_levels": 2**31}), ("amg", {"coarse_size": 1e18}),
                   ("amg", {"degree": -1}), ("amg", {"tail_rows": 2**40}),
                   ("amg", {"block_size": 2**31}), ("amg", {"threshold": 1e308}),
                   ("chebyshev", {"degree": 2**31}), ("chebyshev", {"lmin_ratio": -1}),
                   ("ic0", {"sweeps": 2**31}), ("block_jacobi", {"block_size": 2**31}),
                   ("block_jacobi", {"block_size": -3})]
        for pre, opt in options:
            self.probe(f"{pre} {opt}", "solve", dict(id=self.spd_id, b=b, preconditioner=pre,
                                                     preconditioner_options=opt))
        self.probe("ilu0 sweeps huge", "solve",
                   dict(id=self.ns_id, b=b, method="gmres", preconditioner="ilu0",
                        preconditioner_options={"sweeps": 2**40, "matching": 2**31}))
        # a batched matrix: per-system arrays
        bk = np.ones(48).tobytes()
        for m in (2**31, 2**62, -1):
            self.probe(f"batch maxiter={m}", "solve", dict(id=self.batch_id, b=bk,
                                                           maxiter=[m, 1, 1], history=True))
        self.probe("batch maxiter 2^30 each, history", "solve",
                   dict(id=self.batch_id, b=bk, maxiter=[2**30] * 3, history=True))
        # 3 x 5,000,000 history cells: under the 2^24 cap, 120 MB of float64 (64 MB budget)
        self.probe("batch maxiter 5e6 each, history", "solve",
                   dict(id=self.batch_id, b=bk, maxiter=[5_000_000] * 3, history=True))
        self.probe("batch rtol array of 5000", "solve",
                   dict(id=self.batch_id, b=bk, rtol=[1e-8] * 5000))
        self.probe("batch gmres restart=200", "solve",
                   dict(id=self.batch_id, b=bk, method="gmres", restart=200))
        self.check_all()

    def test_solve_batch(self):
        b = np.ones(256).tobytes()
        item = {"id": self.spd_id, "b": b}
        self.probe("16385 items", "solve.batch",
                   dict(items=[{"id": self.spd_id, "b": np.ones(1).tobytes()}] * 16385))
        self.probe("0 items", "solve.batch", dict(items=[]))
        for m in BIG:
            self.probe(f"maxiter={m} history", "solve.batch", dict(items=[item] * 4, maxiter=m,
                                                                   history=True))
        self.probe("maxiter 4e6 history, 4 items", "solve.batch",
                   dict(items=[item] * 4, maxiter=4_000_000, history=True))
        for r in (200, 201, 2**62, -1):
            self.probe(f"gmres restart={r}", "solve.batch",
                       dict(items=[item] * 4, method="gmres", restart=r))
        # 1,000 items of one 256-row matrix: 2 MB of b, the items' batch 15 MB of CSR
        self.probe("1000 items", "solve.batch", dict(items=[item] * 1000, maxiter=2),
                   ok_bytes=2 * 1000 * csr_bytes(256, self.spd.nnz))
        # 4,000: 8 MB of b make a 60 MB batch, over 2 x --max-message (16M here)
        answer = self.probe("4000 items", "solve.batch", dict(items=[item] * 4000, maxiter=2))
        self.assertIn("--max-message", answer)
        # 7,000 small bins (14 MB) once made the framer copy its whole buffer at every read:
        # 3.5 s of the event loop; 0.1 s now
        t0 = time.monotonic()
        self.probe("7000 items of an unknown matrix", "solve.batch",
                   dict(items=[{"id": "0" * 32, "b": b}] * 7000))
        self.assertLess(time.monotonic() - t0, 1.5, "14 MB of small bins took this long")
        self.check_all()

    def test_multiply(self):
        # C = big x big (pentadiagonal, 1.5 M entries) is kept: its host and device copies and
        # the operands' (read from their state files), a few times C's CSR
        c_bytes = csr_bytes(self.big_rows, 5 * self.big_rows)
        for a, b2, what in ((self.rect_id, self.rect_id, "shapes do not chain"),
                            (self.big_id, self.big_id, "big x big"),
                            (self.spd_id, self.batch_id, "a batch"),
                            ("0" * 32, self.spd_id, "unknown id")):
            ok = 4 * c_bytes if what == "big x big" else 0
            self.probe(what, "matrix.multiply", dict(a=a, b=b2), ok_bytes=ok)
        self.probe("transpose rect", "matrix.multiply",
                   dict(a=self.rect_id, b=self.rect_id, transpose_a=True),
                   ok_bytes=csr_bytes(70, 70 * 70))
        self.check_all()

    def test_small_methods(self):
        long_str = "x" * (1 << 20)
        for method, params in (("matrix.info", {"id": long_str}), ("matrix.drop", {"id": "z" * 32}),
                               ("matrix.pin", {"id": self.spd_id, "pinned": 2**62}),
                               ("matrix.share", {"id": self.spd_id, "user": long_str}),
                               ("matrix.list", {}), ("auth", {"name": long_str, "token": long_str}),
                               ("job.cancel", {"msgid": 2**64 - 1}), ("job.cancel", {"msgid": -1}),
                               ("server.status", {"timeout_ms": 2**63 - 1}),
                               ("server.status", {"timeout_ms": -1})):
            self.probe(str(list(params))[:40], method, params)
        self.check_all()


if __name__ == "__main__":
    unittest.main()
