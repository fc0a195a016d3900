"""Programs warmed up in the background and kept across restarts (issue 16 item 3, issue 32),
through a real krylovd.

With --warm-programs limited to the programs a CG solve on a csr_scalar matrix uses (a full
warm-up takes minutes on a cold PoCL), the daemon says READY (systemd's notification socket) once
it listens and builds the list behind that; once server.status with wait_warm says the warm-up is
done, a put, spmv and CG solve build nothing (programs.built_on_request stays 0, and the results
match SciPy), while a method outside the list is built on its request and counted. Restarted on
the same --cache-dir, it loads every program from there instead of compiling; a damaged file there
is rejected, compiled again and replaced, and the daemon still answers correctly.
"""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest

import numpy as np

import krylov
from kd_daemon import BIN_DIR, exercise_put_spmv_cg, make_rng

# cg_small: a GPU runs CG on a small matrix in one launch (solver/methods/cg.c)
WARM = "krylov,cg_small,csr_scalar,blas"


class ProgramsTest(unittest.TestCase):
    def setUp(self):
        self.rng = make_rng()
        self.dir = tempfile.mkdtemp(prefix="krylovd-programs-")
        self.state = os.path.join(self.dir, "state")
        self.cache = os.path.join(self.dir, "cache")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def start(self):
        """krylovd on the test's state dir; returns (proc, address, seconds until READY=1)."""
        notify_path = os.path.join(self.dir, "notify")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(notify_path)
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        argv = [os.path.join(BIN_DIR, "krylovd"), "--listen", "127.0.0.1:0",
                "--port-file", port_file, "--state-dir", self.state, "--cache-dir", self.cache,
                "--device", os.environ.get("KD_TEST_DEVICE", "auto"),
                "--log-level", os.environ.get("KD_TEST_LOG_LEVEL", "warn"),
                "--warm-programs", WARM, "--format", "csr_scalar"]
        env = dict(os.environ, NOTIFY_SOCKET=notify_path)
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        sock.settimeout(300)
        ready = None
        while ready is None:
            msg = sock.recv(4096).decode()
            if "READY=1" in msg.split("\n"):
                ready = time.monotonic() - t0
        sock.close()
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        return proc, address, ready

    def stop(self, proc):
        proc.terminate()
        self.assertEqual(proc.wait(timeout=60), 0)

    def programs(self, kd):
        return kd.status().raw["programs"]

    def wait_warm(self, kd):
        """The programs map once the warm-up is done."""
        st = kd.status(wait_warm=True, timeout_ms=300000)
        self.assertEqual(st.warm_up["state"], "done")
        self.assertEqual(st.warm_up["built"], st.warm_up["total"])
        return st.raw["programs"]

    def exercise(self, kd):
        """A put, spmv and CG solve in both value types, checked against SciPy."""
        return exercise_put_spmv_cg(self, kd, 300 + int(self.rng.integers(200)))

    def test_ready_at_listen_and_nothing_built_on_request_after_warm_up(self):
        proc, address, ready = self.start()
        with krylov.Client(address) as kd:
            p = self.wait_warm(kd)
            self.assertEqual(p["warm_up"], "all")
            self.assertTrue(p["cache"])
            self.assertGreaterEqual(p["warmed"], 3)  # three programs, one or two value types
            self.assertEqual(p["compiled"] + p["loaded"], p["warmed"])
            self.assertEqual(p["built_on_request"], 0)
            self.assertGreater(p["warm_ms"], 0)
            # READY came at listen, not after the warm-up (tests/python/service/test_py_startup.py
            # checks this on a cold PoCL, where the gap is large)
            self.assertLess(ready, 30.0)
            A = self.exercise(kd)
            self.assertEqual(self.programs(kd)["built_on_request"], 0)
            # a program outside the list is built for its request, and counted
            info = kd.put(A, dtype="float64")
            kd.solve(info, np.ones(A.shape[0]), method="minres", rtol=1e-6)
            self.assertGreaterEqual(self.programs(kd)["built_on_request"], 1)
        self.stop(proc)

    def test_restart_loads_binaries_and_rebuilds_a_damaged_one(self):
        proc, address, _ = self.start()
        with krylov.Client(address) as kd:
            first = self.wait_warm(kd)
        self.stop(proc)
        files = sorted(glob.glob(os.path.join(self.cache, "*.kdp")))
        self.assertEqual(len(files), first["warmed"])
        self.assertFalse(os.path.exists(os.path.join(self.state, "programs")))

        proc, address, _ = self.start()
        with krylov.Client(address) as kd:
            p = self.wait_warm(kd)
            self.assertEqual(p["compiled"], 0)
            self.assertEqual(p["loaded"], first["warmed"])
            self.exercise(kd)
            self.assertEqual(self.programs(kd)["built_on_request"], 0)
        self.stop(proc)

        # flip a byte in the middle of one binary: rejected, compiled again, replaced
        victim = files[int(self.rng.integers(len(files)))]
        size = os.path.getsize(victim)
        with open(victim, "r+b") as f:
            at = 512 + int(self.rng.integers(size - 512))
            f.seek(at)
            byte = f.read(1)
            f.seek(at)
            f.write(bytes([byte[0] ^ 0x5A]))
        proc, address, _ = self.start()
        with krylov.Client(address) as kd:
            p = self.wait_warm(kd)
            self.assertEqual(p["binaries_rejected"], 1)
            self.assertEqual(p["compiled"], 1)
            self.assertEqual(p["loaded"], first["warmed"] - 1)
            self.exercise(kd)
            self.assertEqual(self.programs(kd)["built_on_request"], 0)
        self.stop(proc)
        self.assertEqual(len(glob.glob(os.path.join(self.cache, "*.kdp"))), first["warmed"])


if __name__ == "__main__":
    unittest.main()
