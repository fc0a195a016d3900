"""Start-up (issue 32): krylovd listens at once and builds its OpenCL programs in the background.

With an empty PoCL kernel cache (POCL_CACHE_DIR) and an empty --cache-dir, so that every program
is compiled from nothing: the port file comes and server.status answers within seconds while the
warm-up reports built < total; systemd hears READY=1 then, and STATUS= lines with the progress; a
request during the warm-up gets its correct answer (checked against SciPy); a server.status with
wait_warm and a short timeout_ms is TIMEOUT, and without one answers once built == total, as
`krylov status --wait-warm` does; afterwards the cache directory holds every program and the state
directory none (an old STATE_DIR/programs folder is cleared); a connection waiting so is not
idle. A cache directory that cannot be
created or written costs nothing but a warning: requests are served, correctly. With
--warm-programs none there is nothing to wait for.
"""

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
import unittest


import krylov
from kd_daemon import BIN_DIR, exercise_put_spmv_cg, make_rng

# A few programs, in both value types: each compiles from nothing in seconds on PoCL.
WARM = "csr_scalar,krylov,blas,cg1"


class StartupTest(unittest.TestCase):
    def setUp(self):
        self.rng = make_rng()
        self.dir = tempfile.mkdtemp(prefix="krylovd-startup-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.state = os.path.join(self.dir, "state")
        self.cache = os.path.join(self.dir, "cache")
        self.pocl = os.path.join(self.dir, "pocl")  # PoCL's own kernel cache: empty
        os.makedirs(self.pocl)

    def start(self, *extra, cache=None):
        """krylovd; returns (proc, address, seconds to the port file, notify socket, log path)."""
        notify_path = os.path.join(self.dir, "notify")
        if os.path.exists(notify_path):
            os.unlink(notify_path)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(notify_path)
        self.addCleanup(sock.close)
        port_file = os.path.join(self.dir, "port")
        if os.path.exists(port_file):
            os.unlink(port_file)
        log = os.path.join(self.dir, "log")
        argv = [os.path.join(BIN_DIR, "krylovd"), "--listen", "127.0.0.1:0",
                "--port-file", port_file, "--state-dir", self.state,
                "--cache-dir", cache or self.cache,
                "--device", os.environ.get("KD_TEST_DEVICE", "auto"),
                "--log-level", os.environ.get("KD_TEST_LOG_LEVEL", "info"), "--log-file", log,
                "--format", "csr_scalar"] + list(extra)
        env = dict(os.environ, NOTIFY_SOCKET=notify_path, POCL_CACHE_DIR=self.pocl)
        t0 = time.monotonic()
        proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL)
        self.addCleanup(lambda: proc.poll() is None and (proc.kill(), proc.wait()))
        while not (os.path.exists(port_file) and os.path.getsize(port_file) > 0):
            self.assertIsNone(proc.poll(), "krylovd exited during start-up")
            self.assertLess(time.monotonic() - t0, 30, "no port file within 30 s")
            time.sleep(0.02)
        listen_s = time.monotonic() - t0
        with open(port_file) as f:
            address = f"127.0.0.1:{int(f.read())}"
        return proc, address, listen_s, sock, log

    def stop(self, proc):
        proc.terminate()
        self.assertEqual(proc.wait(timeout=120), 0)

    def notifications(self, sock, timeout):
        """The notification lines systemd would have received, waiting at most timeout s for the
        first."""
        lines = []
        sock.settimeout(timeout)
        try:
            while True:
                lines += sock.recv(4096).decode().split("\n")
                sock.settimeout(0.05)
        except (socket.timeout, BlockingIOError):
            pass
        return lines

    def exercise(self, kd):
        """A put, spmv and CG solve in both value types, checked against SciPy."""
        return exercise_put_spmv_cg(self, kd, 200 + int(self.rng.integers(200)))

    def test_serves_during_warm_up_and_waits_for_it_on_request(self):
        # an older krylovd kept binaries in the state directory: cleared at start
        old = os.path.join(self.state, "programs")
        os.makedirs(old)
        with open(os.path.join(old, "0123456789abcdef0123456789abcdef.kdp"), "wb") as f:
            f.write(b"\0" * 4096)

        proc, address, listen_s, sock, log = self.start("--warm-programs", WARM,
                                                        "--warm-threads", "1")
        self.assertLess(listen_s, 10.0)
        t0 = time.monotonic()
        with krylov.Client(address) as kd:
            warm = kd.status().warm_up
            self.assertLess(time.monotonic() - t0, 2.0)
            self.assertEqual(warm["state"], "building")
            self.assertGreaterEqual(warm["total"], 4)
            self.assertLess(warm["built"], warm["total"])
            self.assertEqual(len(warm["building"]) + len(warm["pending"]) + warm["built"] +
                             warm["failed"], warm["total"])
            # READY=1 came with the listener, before the warm-up's end
            lines = self.notifications(sock, 10)
            self.assertIn("READY=1", lines)
            # waiting with a short limit: TIMEOUT, saying how far it got; or, where the warm-up
            # ends first (a GPU builds these in a second or two, PoCL in minutes), the answer
            # that it is done
            try:
                kd.status(wait_warm=True, timeout_ms=50)
                self.assertEqual(kd.status().warm_up["state"], "done")
            except krylov.Timeout as caught:
                self.assertIn("programs built", str(caught))
            # the CLI says so too, on stderr, and fails
            cli = subprocess.run([os.path.join(BIN_DIR, "krylov"), "--server", address,
                                  "status", "--wait-warm=0.5"], capture_output=True, text=True)
            if cli.returncode == 0:
                self.assertEqual(kd.status().warm_up["state"], "done")
            else:
                self.assertEqual(cli.returncode, 1, cli.stderr)
                self.assertIn("not done within", cli.stderr)

            # a request during the warm-up: its programs are built first (or waited for)
            self.exercise(kd)

            # wait_warm answers once every listed program is built
            st = kd.status(wait_warm=True, timeout_ms=600000)
            self.assertEqual(st.warm_up["state"], "done")
            self.assertEqual(st.warm_up["built"], st.warm_up["total"])
            self.assertEqual(st.warm_up["failed"], 0)
            self.assertEqual(st.warm_up["building"], [])
            self.assertEqual(st.warm_up["pending"], [])
            self.assertTrue(st.warm)
            p = st.raw["programs"]
            self.assertEqual(p["cache_dir"], self.cache)
            self.assertGreaterEqual(p["compiled"], st.warm_up["total"])
            # the CLI's wait now returns at once
            cli = subprocess.run([os.path.join(BIN_DIR, "krylov"), "--server", address,
                                  "status", "--wait-warm=30"], capture_output=True, text=True)
            self.assertEqual(cli.returncode, 0, cli.stderr)
            total = st.warm_up["total"]
            self.assertIn(f"{total}/{total} OpenCL programs built", cli.stdout)
            self.exercise(kd)

        status_lines = [l for l in self.notifications(sock, 1) + lines if l.startswith("STATUS=")]
        self.assertTrue(any("OpenCL programs ready" in l for l in status_lines), status_lines)
        self.stop(proc)

        # the binaries are in the cache directory, none in the state directory
        if len(glob.glob(os.path.join(self.cache, "*.kdp"))) < total:
            with open(log) as f:
                print(f.read()[-6000:])
        self.assertGreaterEqual(len(glob.glob(os.path.join(self.cache, "*.kdp"))), total)
        in_state = []  # program files by their magic (pattern files are .kdp too)
        for d, _, names in os.walk(self.state):
            for name in names:
                with open(os.path.join(d, name), "rb") as f:
                    if f.read(8) == b"KDPROGRM":
                        in_state.append(os.path.join(d, name))
        self.assertEqual(in_state, [])
        with open(glob.glob(os.path.join(self.cache, "*.kdp"))[0], "rb") as f:
            self.assertEqual(f.read(8), b"KDPROGRM")
        self.assertFalse(os.path.exists(old))
        with open(log) as f:
            text = f.read()
        self.assertIn(f"building {total} OpenCL programs in the background", text)
        self.assertIn("OpenCL programs ready", text)

        # restarted on the same cache: every listed program loads from it, none is compiled
        proc, address, _, sock, _ = self.start("--warm-programs", WARM)
        with krylov.Client(address) as kd:
            st = kd.status(wait_warm=True, timeout_ms=600000)
            self.assertEqual(st.raw["programs"]["compiled"], 0)
            self.assertEqual(st.raw["programs"]["loaded"], total)
        self.stop(proc)

    def test_waiting_for_the_warm_up_is_not_idleness(self):
        # a connection waiting with wait_warm has a request in flight: the idle sweep leaves it
        proc, address, _, _, _ = self.start("--warm-programs", WARM, "--warm-threads", "1",
                                            "--idle-timeout-ms", "300")
        with krylov.Client(address) as kd:
            self.assertEqual(kd.status().warm_up["state"], "building")
            try:
                st = kd.status(wait_warm=True, timeout_ms=2000)
                self.assertEqual(st.warm_up["state"], "done")
            except krylov.Timeout as e:
                self.assertIn("programs built", str(e))
            self.assertIn(kd.status().warm_up["state"], ("building", "done"))
            # the Python helper asks again every `every` seconds, reporting the progress between
            seen = []
            try:
                st = kd.wait_warm(1.5, on_progress=seen.append, every=0.4)
                self.assertTrue(st.warm)
            except krylov.Timeout:
                self.assertGreaterEqual(len(seen), 1)
                self.assertEqual(seen[-1]["state"], "building")
        self.stop(proc)

    def test_a_cache_that_cannot_be_written_costs_no_request(self):
        blocker = os.path.join(self.dir, "not-a-dir")
        with open(blocker, "w") as f:
            f.write("a file where the cache's parent should be\n")
        proc, address, _, _, log = self.start("--warm-programs", "csr_scalar",
                                              cache=os.path.join(blocker, "krylovd"))
        with krylov.Client(address) as kd:
            self.exercise(kd)
            st = kd.status(wait_warm=True, timeout_ms=600000)
            self.assertEqual(st.warm_up["state"], "done")
            self.assertEqual(st.warm_up["failed"], 0)
            self.assertFalse(st.raw["programs"]["cache"])
            self.exercise(kd)
        self.stop(proc)
        with open(log) as f:
            warnings = [l for l in f if l.startswith("warn") and "program cache" in l]
        self.assertEqual(len(warnings), 1, warnings)

        if os.geteuid() == 0:
            return  # root writes through a mode of 0555: the rest needs another user
        os.makedirs(self.cache)
        os.chmod(self.cache, 0o555)
        self.addCleanup(os.chmod, self.cache, 0o755)
        proc, address, _, _, log = self.start("--warm-programs", "csr_scalar,blas")
        with krylov.Client(address) as kd:
            self.exercise(kd)
            st = kd.status(wait_warm=True, timeout_ms=600000)
            self.assertEqual(st.warm_up["failed"], 0)
        self.stop(proc)
        self.assertEqual(glob.glob(os.path.join(self.cache, "*.kdp")), [])
        with open(log) as f:
            warnings = [l for l in f if l.startswith("warn")]
        self.assertEqual(len(warnings), 1, warnings)  # once, not once per program
        self.assertIn("cannot write", warnings[0])

    def test_no_warm_up_has_nothing_to_wait_for(self):
        proc, address, _, _, _ = self.start("--warm-programs", "none")
        with krylov.Client(address) as kd:
            t0 = time.monotonic()
            st = kd.status(wait_warm=True, timeout_ms=600000)
            self.assertLess(time.monotonic() - t0, 2.0)
            self.assertEqual(st.warm_up["state"], "off")
            self.assertEqual(st.warm_up["total"], 0)
            self.assertTrue(kd.wait_warm(5).warm)
            self.exercise(kd)  # built on first use
            self.assertGreaterEqual(kd.status().raw["programs"]["built_on_request"], 1)
        self.stop(proc)


if __name__ == "__main__":
    unittest.main()
