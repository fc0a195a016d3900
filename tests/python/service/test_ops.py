"""Operating krylovd: systemd readiness and shutdown notifications, the watchdog ping, socket
activation, and the Prometheus endpoint read with a real HTTP client (urllib). Each test starts
its own krylovd the way systemd would (NOTIFY_SOCKET, WATCHDOG_USEC, LISTEN_FDS) and checks what
arrives, so a daemon that never says READY=1, never pings, or ignores a passed socket fails here.
"""

import os
import re
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import numpy as np
import scipy.sparse as sp

import krylov
from kd_daemon import BIN_DIR, Daemon, make_rng
from kd_daemon import metric_sample as sample

KRYLOVD = os.path.join(BIN_DIR, "krylovd")
DEVICE = os.environ.get("KD_TEST_DEVICE", "auto")


def laplacian(n):
    main = 4.0 * np.ones(n * n)
    off = -np.ones(n * n - 1)
    off[np.arange(1, n * n) % n == 0] = 0.0
    far = -np.ones(n * n - n)
    return sp.diags([main, off, off, far, far], [0, 1, -1, n, -n], format="csr")


class NotifySocket:
    """An AF_UNIX datagram socket standing in for systemd's notification socket."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="krylovd-notify-")
        self.path = os.path.join(self.dir, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)

    def wait_for(self, key, timeout=120.0):
        """Messages until one holds `key` (e.g. "READY=1"); returns everything received."""
        got = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.05, deadline - time.monotonic()))
            try:
                msg = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            got.append(msg)
            if key in msg.split("\n"):
                return got
        raise AssertionError(f"no {key} within {timeout} s; received {got}")

    def close(self):
        self.sock.close()
        os.unlink(self.path)
        os.rmdir(self.dir)


class SystemdTest(unittest.TestCase):

    def wait_serving(self, proc, port):
        """Until the krylovd that proc runs answers server.status on port (socket activation: it
        must take the listener it was given); fails if it exits first or takes over 120 s."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with krylov.Client(f"127.0.0.1:{port}", timeout=30) as c:
                    c.status()
                    return
            except (krylov.ConnectionFailed, OSError):
                self.assertIsNone(proc.poll(), "krylovd exited: it did not take its sockets")
                time.sleep(0.1)
        self.fail("krylovd did not answer within 120 s")
    def start(self, env_extra, pass_fds=(), extra_args=()):
        state = tempfile.mkdtemp(prefix="krylovd-ops-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", state]))
        env = dict(os.environ, **env_extra)
        argv = [KRYLOVD, "--warm-programs", "none", "--state-dir", os.path.join(state, "s"),
                "--device", DEVICE,
                "--log-level", "warn", *extra_args]
        return subprocess.Popen(argv, env=env, pass_fds=pass_fds, stdin=subprocess.DEVNULL)

    def test_ready_watchdog_stopping(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        proc = self.start({"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"},
                          extra_args=["--listen", "127.0.0.1:0"])
        try:
            got = notify.wait_for("READY=1")
            ready = [m for m in got if "READY=1" in m.split("\n")][0]
            self.assertRegex(ready, r"STATUS=serving on port \d+ with ")
            # pings every WatchdogSec/2: at least three in 1.5 s
            pings = 0
            deadline = time.monotonic() + 1.5
            while time.monotonic() < deadline:
                notify.sock.settimeout(deadline - time.monotonic())
                try:
                    if "WATCHDOG=1" in notify.sock.recv(4096).decode().split("\n"):
                        pings += 1
                except socket.timeout:
                    break
            self.assertGreaterEqual(pings, 3)
            proc.terminate()
            notify.wait_for("STOPPING=1", timeout=30)
            self.assertEqual(proc.wait(timeout=60), 0)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def test_no_watchdog_when_not_asked(self):
        notify = NotifySocket()
        self.addCleanup(notify.close)
        proc = self.start({"NOTIFY_SOCKET": notify.path}, extra_args=["--listen", "127.0.0.1:0"])
        try:
            got = notify.wait_for("READY=1")
            notify.sock.settimeout(1.0)
            try:
                more = notify.sock.recv(4096).decode()
            except socket.timeout:
                more = ""
            self.assertNotIn("WATCHDOG=1", "\n".join(got) + more)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=60), 0)

    def test_socket_activation(self):
        """systemd's way: the listening socket is fd 3, LISTEN_FDS=1, LISTEN_PID=the daemon. The
        --listen address given is unusable, so only the passed socket can serve the client."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        fd = listener.fileno()
        state = tempfile.mkdtemp(prefix="krylovd-ops-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", state]))
        argv = [KRYLOVD, "--warm-programs", "none", "--listen", "192.0.2.1:9",
                "--state-dir", os.path.join(state, "s"),
                "--device", DEVICE, "--log-level", "warn"]
        # a tiny shell puts the socket on fd 3 and execs, so LISTEN_PID is the daemon's own pid
        proc = subprocess.Popen(
            ["/bin/sh", "-c", 'exec 3<&"$KD_FD"; LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"', "sh",
             *argv],
            pass_fds=(fd,), env=dict(os.environ, KD_FD=str(fd)), stdin=subprocess.DEVNULL)
        listener.close()
        try:
            self.wait_serving(proc, port)
            with krylov.Client(f"127.0.0.1:{port}") as c:
                A = laplacian(12)
                info = c.put(A)
                x = make_rng().standard_normal(A.shape[1])
                np.testing.assert_allclose(c.spmv(info, x), A @ x, rtol=1e-12, atol=1e-12)
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=60), 0)

    def test_socket_activation_tcp_and_unix(self):
        """krylovd.socket's two ListenStreams: a TCP socket on fd 3 and a Unix socket on fd 4
        (LISTEN_FDS=2). Both serve; the Unix one is a Unix socket to the server (shared memory
        works on it), and its file is systemd's: krylovd leaves it when it stops."""
        state = tempfile.mkdtemp(prefix="krylovd-ops-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", state]))
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind(("127.0.0.1", 0))
        tcp.listen(16)
        port = tcp.getsockname()[1]
        path = os.path.join(state, "krylovd.sock")
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        unix.bind(path)
        unix.listen(16)
        argv = [KRYLOVD, "--warm-programs", "none", "--listen", "192.0.2.1:9",
                "--listen", "unix:" + os.path.join(state, "unused.sock"),
                "--state-dir", os.path.join(state, "s"),
                "--device", DEVICE, "--log-level", "warn"]
        proc = subprocess.Popen(
            ["/bin/sh", "-c",
             'exec 3<&"$KD_FD" 4<&"$KD_UNIX"; LISTEN_PID=$$ LISTEN_FDS=2 exec "$@"', "sh",
             *argv],
            pass_fds=(tcp.fileno(), unix.fileno()),
            env=dict(os.environ, KD_FD=str(tcp.fileno()), KD_UNIX=str(unix.fileno())),
            stdin=subprocess.DEVNULL)
        tcp.close()
        unix.close()
        try:
            self.wait_serving(proc, port)
            A = laplacian(300)  # 90,000 rows: x and y over the shared-memory threshold
            x = make_rng().standard_normal(A.shape[1])
            with krylov.Client("unix:" + path) as c:
                info = c.put(A)
                np.testing.assert_allclose(c.spmv(info, x), A @ x, rtol=1e-12, atol=1e-12)
                self.assertTrue(c.shm)
                self.assertEqual(c.status().raw["shm_regions"], 1)
            with krylov.Client(f"127.0.0.1:{port}") as c:
                np.testing.assert_allclose(c.spmv(info, x), A @ x, rtol=1e-12, atol=1e-12)
            self.assertFalse(os.path.exists(os.path.join(state, "unused.sock")))
        finally:
            proc.terminate()
            self.assertEqual(proc.wait(timeout=60), 0)
        self.assertTrue(os.path.exists(path), "krylovd removed systemd's socket file")


def scrape(port, path="/metrics", method="GET"):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.headers, r.read().decode()


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="krylovd-metrics-")
        port_file = os.path.join(cls.dir, "mport")
        cls.daemon = Daemon("--metrics", "127.0.0.1:0", "--metrics-port-file", port_file)
        cls.daemon.start()
        with open(port_file) as f:
            cls.mport = int(f.read())

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        subprocess.run(["rm", "-rf", cls.dir])

    def test_counts_follow_requests(self):
        status, headers, before = scrape(self.mport)
        self.assertEqual(status, 200)
        self.assertIn("text/plain; version=0.0.4", headers["Content-Type"])
        self.assertIn("# TYPE krylovd_requests_total counter", before)
        spmv0 = sample(before, "krylovd_requests_total", 'method="spmv"')
        A = laplacian(20)
        rng = make_rng()
        with krylov.Client(self.daemon.address) as c:
            info = c.put(A)
            # counted after the put: where Python has xxhash, put asks for the content id first
            # (a NOT_FOUND of its own for a new matrix)
            nf0 = sample(scrape(self.mport)[2], "krylovd_errors_total", 'code="NOT_FOUND"')
            for _ in range(7):
                c.spmv(info, rng.standard_normal(A.shape[1]))
            with self.assertRaises(krylov.NotFound):
                c.info("0" * 32)
            st = c.status()
        _, _, after = scrape(self.mport)
        self.assertEqual(sample(after, "krylovd_requests_total", 'method="spmv"') - spmv0, 7)
        self.assertEqual(sample(after, "krylovd_errors_total", 'code="NOT_FOUND"') - nf0, 1)
        # the histogram is consistent: +Inf bucket == count, buckets never decrease
        count = sample(after, "krylovd_request_duration_seconds_count", 'method="spmv"')
        inf = sample(after, "krylovd_request_duration_seconds_bucket", 'method="spmv",le="+Inf"')
        self.assertEqual(count, inf)
        self.assertGreaterEqual(count, 7)
        buckets = [float(v) for v in re.findall(
            r'^krylovd_request_duration_seconds_bucket\{method="spmv",le="[^"]+"\} (\S+)$',
            after, re.M)]
        self.assertEqual(buckets, sorted(buckets))
        self.assertGreater(sample(after, "krylovd_request_duration_seconds_sum", 'method="spmv"'), 0)
        self.assertGreaterEqual(sample(after, "krylovd_matrices"), 1)
        self.assertGreater(sample(after, "krylovd_device_memory_used_bytes"), 0)
        self.assertGreater(sample(after, "krylovd_device_memory_budget_bytes"), 0)
        # server.status carries the same numbers and latency percentiles
        lat = st.raw["latency_ms"]["spmv"]
        self.assertGreaterEqual(lat["count"], 7)
        self.assertGreater(lat["p50"], 0)
        self.assertLessEqual(lat["p50"], lat["p99"])
        self.assertLessEqual(lat["p99"], lat["max"] * 1.0001)
        self.assertEqual(st.raw["errors_by_code"].get("NOT_FOUND", 0), 1 + int(nf0))

    def test_every_line_is_valid_exposition(self):
        _, _, text = scrape(self.mport)
        line_re = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? '
                             r'[-+0-9.eEinfINFNa]+$')
        for line in text.splitlines():
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                continue
            self.assertRegex(line, line_re)

    def test_other_paths_and_methods(self):
        with self.assertRaises(urllib.error.HTTPError) as cm:
            scrape(self.mport, "/")
        self.assertEqual(cm.exception.code, 404)
        with self.assertRaises(urllib.error.HTTPError) as cm:
            scrape(self.mport, "/metrics", method="POST")
        self.assertEqual(cm.exception.code, 405)
        status, headers, body = scrape(self.mport, "/metrics", method="HEAD")
        self.assertEqual(status, 200)
        self.assertEqual(body, "")
        self.assertGreater(int(headers["Content-Length"]), 100)
        # a header that never ends does not hold the endpoint
        s = socket.create_connection(("127.0.0.1", self.mport))
        s.sendall(b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 9000)
        s.settimeout(30)
        reply = s.recv(200)
        s.close()
        self.assertTrue(reply.startswith(b"HTTP/1.1 431"), reply)
        self.assertEqual(scrape(self.mport)[0], 200)


if __name__ == "__main__":
    unittest.main()
