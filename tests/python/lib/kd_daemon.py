"""Test support for the Python and CLI end-to-end tests: a real krylovd on loopback, started like
tests/lib/kd_daemon.h does (port 0, the port read from --port-file, a fresh state directory, the
device from KD_TEST_DEVICE), and fresh random inputs with a printed, replayable seed
(KD_TEST_SEED), as tests/lib/kd_test.h does for the C tests.

The paths come from the environment that tests/python/CMakeLists.txt sets: KD_BIN_DIR (krylovd,
krylov, the examples), KD_SOURCE_DIR (the repository) and KD_TEST_MATRICES.
"""

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

SOURCE_DIR = os.environ.get(
    "KD_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
)
BIN_DIR = os.environ.get("KD_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
MATRICES = os.environ.get("KD_TEST_MATRICES", os.path.join(SOURCE_DIR, "tests", "matrices"))


def matrix_path(name):
    return os.path.join(MATRICES, name)


def laplacian(nx):
    """The 5-point Laplacian of an nx x nx grid (Dirichlet), canonical CSR."""
    import scipy.sparse as sp

    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(nx, nx))
    a = sp.csr_matrix(sp.kron(sp.identity(nx), t) + sp.kron(t, sp.identity(nx)))
    a.sum_duplicates()
    return a


def spd_matrix(n, rng):
    """A random sparse SPD matrix (diagonally dominant, about 4 entries a row), CSR."""
    import scipy.sparse as sp

    # 4n entries at random places (repeats summed): sp.random with a seed draws its places from
    # a permutation of all n^2 of them (12 GB at n = 40,000)
    k = 4 * n
    A = sp.csr_matrix((rng.random(k), (rng.integers(0, n, k), rng.integers(0, n, k))),
                      shape=(n, n))
    A = A + A.T
    A = A + sp.diags(np.asarray(abs(A).sum(axis=1)).ravel() + 1.0)
    return A.tocsr()


def exercise_put_spmv_cg(test, kd, n):
    """A put, an spmv and a CG solve of a random SPD matrix of n rows in both value types through
    the Python client kd, each checked against SciPy by test (a unittest.TestCase); returns A."""
    A = spd_matrix(n, test.rng)
    for dtype, tol in (("float64", 1e-10), ("float32", 1e-4)):
        info = kd.put(A, dtype=dtype)
        x = test.rng.uniform(-1, 1, A.shape[0])
        y = kd.spmv(info, x)
        want = A @ x
        test.assertLessEqual(np.max(np.abs(y - want)) / np.max(np.abs(want)), tol * 10)
        b = test.rng.uniform(-1, 1, A.shape[0])
        res = kd.solve(info, b, method="cg", rtol=1e-4 if dtype == "float32" else 1e-8)
        relres = np.linalg.norm(b - A @ res.x) / np.linalg.norm(b)
        test.assertLessEqual(relres, 1e-3 if dtype == "float32" else 1e-7)
    return A


def scipy_tol(value):
    """SciPy's iterative solvers' relative tolerance as a keyword: `tol` up to SciPy 1.11 (Debian
    12 has 1.10), `rtol` from 1.12 (`tol` was removed in 1.14)."""
    import inspect

    import scipy.sparse.linalg as spla

    return {"rtol" if "rtol" in inspect.signature(spla.cg).parameters else "tol": value}


def metric_sample(text, name, labels=""):
    """The value of one sample line `name{labels} value` in a Prometheus exposition."""
    import re

    pat = "^" + re.escape(name + (("{" + labels + "}") if labels else "")) + r" (\S+)$"
    m = re.search(pat, text, re.M)
    if m is None:
        raise AssertionError(f"no sample {name}{{{labels}}} in the exposition")
    return float(m.group(1))


def token_new(name, role):
    """`krylov token new NAME ROLE` -> (token, auth-file line), checking the line's hash."""
    out = subprocess.run([os.path.join(BIN_DIR, "krylov"), "token", "new", name, role],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    token = re.search(r"^token: (\S+)$", out, re.M).group(1)
    line = re.search(r"^auth-file line: (.+)$", out, re.M).group(1)
    return token, line


def settle(predicate, seconds=60):
    """True once predicate() holds, polled every 50 ms for up to `seconds` (generous: CI's 2 cores
    are loaded); its last value otherwise."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def process_fds(pid, counts):
    """How many of process pid's descriptors counts(target) holds for, their targets read from
    /proc/pid/fd (one closed meanwhile is skipped)."""
    count = 0
    base = f"/proc/{pid}/fd"
    for name in os.listdir(base):
        try:
            target = os.readlink(os.path.join(base, name))
        except OSError:  # closed meanwhile
            continue
        if counts(target):
            count += 1
    return count


def make_rng():
    """A numpy Generator seeded from KD_TEST_SEED or the clock; the seed is printed."""
    env = os.environ.get("KD_TEST_SEED")
    seed = int(env, 0) if env else time.time_ns() % (1 << 63)
    print(f"KD_TEST_SEED={seed}", file=sys.stderr, flush=True)
    return np.random.default_rng(seed)


class Daemon:
    """krylovd on 127.0.0.1 with a kernel-chosen port; `with Daemon() as d: d.address`.

    launcher: argv words before krylovd's (mpirun and its options); env: the environment it runs
    in; directory: where its port file and state directory live, kept across stop and start (a
    restart serves what it stored); without one, a fresh directory removed at stop; binary: the
    daemon in the build's bin/ (krylovd_faults for KD_TEST_FAULT)."""

    def __init__(self, *extra_args, launcher=None, env=None, directory=None, binary="krylovd"):
        self.extra_args = list(extra_args)
        self.binary = binary  # krylovd_faults: the test build with the state's fault hook
        self.launcher = list(launcher or [])
        self.env = env
        self.keep_dir = directory
        self.proc = None
        self.dir = None
        self.address = None
        self.port = None

    def start(self):
        self.dir = self.keep_dir or tempfile.mkdtemp(prefix="krylovd-pytest-")
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):  # a restart: wait for the new one
            os.unlink(port_file)
        argv = [
            os.path.join(BIN_DIR, self.binary),
            "--listen", "127.0.0.1:0",
            "--port-file", port_file,
            "--state-dir", os.path.join(self.dir, "state"),
            # compiled programs in the test's directory, not the user's cache (a later one wins)
            "--cache-dir", os.path.join(self.dir, "cache"),
            "--device", os.environ.get("KD_TEST_DEVICE", "auto"),
            "--log-level", os.environ.get("KD_TEST_LOG_LEVEL", "warn"),
            # PoCL compiles all programs in minutes on a cold cache: build on first use unless
            # the test asks otherwise (a later option wins).
            "--warm-programs", "none",
        ] + self.extra_args
        self.proc = subprocess.Popen(self.launcher + argv, stdin=subprocess.DEVNULL, env=self.env)
        deadline = time.monotonic() + 120  # PoCL may compile kernels at start
        while time.monotonic() < deadline:
            try:
                with open(port_file) as f:
                    text = f.read().strip()
                if text and int(text) > 0:
                    self.port = int(text)
                    self.address = f"127.0.0.1:{self.port}"
                    return self
            except (FileNotFoundError, ValueError):
                pass
            if self.proc.poll() is not None:
                raise RuntimeError(f"krylovd exited during start-up (status {self.proc.returncode})")
            time.sleep(0.05)
        self.stop()
        raise RuntimeError("krylovd did not write its port within 120 s")

    def stop_pid(self):
        """The process SIGTERM goes to (a launcher may have to pass it to another)."""
        return self.proc.pid

    def stop(self):
        """SIGTERM and wait; returns the exit status."""
        status = None
        if self.proc is not None:
            pid = self.stop_pid()
            # never a pid of 0 or less: that signals the test's whole process group
            if self.proc.poll() is None and pid is not None and pid > 0:
                os.kill(pid, signal.SIGTERM)
            try:
                status = self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                status = self.proc.wait()
            self.proc = None
        if self.dir is not None and self.keep_dir is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
        return status

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


def shared_daemon(module_globals):
    """setUpModule and tearDownModule for a test module whose tests share one krylovd: while they
    run, the module's globals `daemon` and `rng` hold it and a seeded generator; the daemon must
    exit cleanly at the end."""

    def set_up():
        module_globals["rng"] = make_rng()
        module_globals["daemon"] = Daemon().start()

    def tear_down():
        status = module_globals["daemon"].stop()
        assert status == 0, f"krylovd exited with status {status}"

    return set_up, tear_down

