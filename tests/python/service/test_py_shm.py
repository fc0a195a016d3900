"""Shared memory for clients on the same host (issue 35): shm.register over the Unix socket, spmv
and solve naming regions instead of carrying bins, results written into a region (`out`).

Checked against a real krylovd listening on TCP and a Unix socket: the Python client's spmv and
solve through shared memory give the answers of the bins path and of numpy/SciPy (1-D, several
columns, float32); each bad registration and each bad reference gets a clear error naming the
field and the server goes on serving (an unsealed memfd, one that cannot take seals, a region
smaller than declared, no descriptor with the request, a pipe instead of a memfd, shm.register
over TCP, an offset past the end, offset + bytes overflowing int64, a misaligned offset, an id
never registered, another connection's id, an unregistered id); a descriptor sent with another
request is closed; a client that closes its memfd and mapping right after registering still
works; a client that disconnects mid-solve leaves no descriptor and no mapping in the server
(/proc/PID/fd, /proc/PID/maps); and --max-shm-bytes refuses per connection and per user.
"""

import fcntl
import mmap
import os
import shutil
import socket
import tempfile
import time
import unittest

import msgpack
import numpy as np

import krylov
from kd_daemon import Daemon, make_rng, spd_matrix

MAX_SHM = 16 << 20


def memfd(nbytes, seal=True, sealing=True):
    flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealing else 0)
    fd = os.memfd_create("test-shm", flags)
    os.ftruncate(fd, nbytes)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


class Raw:
    """One raw msgpack-rpc connection (Unix socket or TCP), for requests the client would never
    send."""

    def __init__(self, address):
        if address.startswith("unix:"):
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(address[5:])
        else:
            host, port = address.split(":")
            self.sock = socket.create_connection((host, int(port)))
        self.sock.settimeout(120)
        self.unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        self.msgid = 0

    def send(self, method, params, fds=()):
        self.msgid += 1
        data = msgpack.packb([0, self.msgid, method, [params]], use_bin_type=True)
        if fds:
            sent = socket.send_fds(self.sock, [data], list(fds))
            self.sock.sendall(data[sent:])
        else:
            self.sock.sendall(data)
        return self.msgid

    def wait(self, msgid):
        while True:
            for msg in self.unpacker:
                if msg[0] == 1 and msg[1] == msgid:
                    return msg[2], msg[3]
            data = self.sock.recv(1 << 20)
            if not data:
                raise ConnectionError("closed")
            self.unpacker.feed(data)

    def call(self, method, params, fds=()):
        return self.wait(self.send(method, params, fds))

    def close(self):
        self.sock.close()


def setUpModule():
    global rng, tmp, daemon, unix
    rng = make_rng()
    tmp = tempfile.mkdtemp(prefix="krylovd-shm-")
    sock = os.path.join(tmp, "krylovd.sock")
    daemon = Daemon("--listen", "unix:" + sock, "--max-shm-bytes", str(MAX_SHM)).start()
    unix = "unix:" + sock


def tearDownModule():
    status = daemon.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    assert status == 0, f"krylovd exited with status {status}"


def server_fds():
    return len(os.listdir(f"/proc/{daemon.proc.pid}/fd"))


def server_memfd_maps():
    with open(f"/proc/{daemon.proc.pid}/maps") as f:
        return [line for line in f if "memfd:" in line]


def settle(predicate, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


class ThroughRegions(unittest.TestCase):
    """The Python client uses shared memory on its own and answers as the bins path does."""

    @classmethod
    def setUpClass(cls):
        cls.A = spd_matrix(20000, rng)  # x: 160 KB, x and its result over the 256 KiB threshold

    def test_spmv_and_solve_match_bins_and_scipy(self):
        A = self.A
        with krylov.Client(unix) as kd, krylov.Client(unix, shm=False) as bins:
            info = kd.put(A)
            for dtype, tol in (("float64", 1e-12), ("float32", 1e-5)):
                x = rng.uniform(-1, 1, A.shape[0])
                y = kd.spmv(info.id, x, dtype=dtype)  # an id: the client asks for the shape once
                self.assertIsNotNone(kd._arena.region, "the spmv did not go through a region")
                y_bins = bins.spmv(info, x, dtype=dtype)
                self.assertIsNone(bins._arena.region)
                np.testing.assert_array_equal(y, y_bins)
                want = A @ x
                self.assertLessEqual(np.max(np.abs(y - want)) / np.max(np.abs(want)), tol)
            X = rng.uniform(-1, 1, (A.shape[0], 3))
            Y0 = rng.uniform(-1, 1, (A.shape[0], 3))
            Y = kd.spmv(info, X, alpha=2.0, beta=-0.5, y=Y0)
            np.testing.assert_allclose(Y, 2.0 * (A @ X) - 0.5 * Y0, rtol=1e-10, atol=1e-10)
            np.testing.assert_array_equal(Y, bins.spmv(info, X, alpha=2.0, beta=-0.5, y=Y0))
            b = rng.uniform(-1, 1, A.shape[0])
            x0 = rng.uniform(-1, 1, A.shape[0]) * 0.1
            res = kd.solve(info, b, rtol=1e-9, x0=x0)
            res_bins = bins.solve(info, b, rtol=1e-9, x0=x0)
            self.assertEqual(res.status, "converged")
            np.testing.assert_array_equal(res.x, res_bins.x)
            self.assertLessEqual(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b), 1e-8)
            B = rng.uniform(-1, 1, (A.shape[0], 2))
            many = kd.solve(info, B, rtol=1e-9)
            self.assertEqual(many.x.shape, B.shape)
            for k in range(2):
                self.assertLessEqual(
                    np.linalg.norm(B[:, k] - A @ many.x[:, k]) / np.linalg.norm(B[:, k]), 1e-8)
            self.assertTrue(kd.shm)

    def test_tcp_falls_back_to_bins(self):
        with krylov.Client(daemon.address) as kd:
            self.assertFalse(kd.shm)
            info = kd.put(self.A)
            x = rng.uniform(-1, 1, self.A.shape[0])
            np.testing.assert_allclose(kd.spmv(info, x), self.A @ x, rtol=1e-12, atol=1e-12)


class BadRegions(unittest.TestCase):
    """Each bad thing gets its error, and the server goes on serving."""

    @classmethod
    def setUpClass(cls):
        cls.A = spd_matrix(64, rng)
        with krylov.Client(daemon.address) as kd:
            cls.id = kd.put(cls.A).id

    def setUp(self):
        self.raw = Raw(unix)

    def tearDown(self):
        self.raw.close()
        with krylov.Client(unix) as kd:  # still serving
            x = np.ones(self.A.shape[0])
            np.testing.assert_allclose(kd.spmv(self.id, x), self.A @ x, rtol=1e-12)

    def refused(self, method, params, code, text, fds=(), raw=None):
        error, result = (raw or self.raw).call(method, params, fds)
        self.assertIsNotNone(error, f"{method} was not refused: {result}")
        self.assertEqual(error["code"], code, error["message"])
        self.assertIn(text, error["message"])
        return error["message"]

    def register(self, nbytes, raw=None):
        fd = memfd(nbytes)
        try:
            error, result = (raw or self.raw).call("shm.register", {"bytes": nbytes}, [fd])
        finally:
            os.close(fd)
        self.assertIsNone(error)
        return result["shm"]

    def test_unsealed_memfd(self):
        fd = memfd(4096, seal=False)
        self.refused("shm.register", {"bytes": 4096}, "BAD_REQUEST", "not sealed against shrinking",
                     [fd])
        os.close(fd)

    def test_memfd_that_takes_no_seals(self):
        fd = memfd(4096, seal=False, sealing=False)
        self.refused("shm.register", {"bytes": 4096}, "BAD_REQUEST", "not sealed", [fd])
        os.close(fd)

    def test_region_smaller_than_declared(self):
        fd = memfd(4096)
        self.refused("shm.register", {"bytes": 8192}, "BAD_REQUEST", "holds only 4096 bytes", [fd])
        os.close(fd)

    def test_no_descriptor(self):
        self.refused("shm.register", {"bytes": 4096}, "BAD_REQUEST", "no file descriptor")

    def test_pipe_instead_of_memfd(self):
        r, w = os.pipe()
        self.refused("shm.register", {"bytes": 4096}, "BAD_REQUEST", "not a memfd", [r])
        os.close(r)
        os.close(w)

    def test_register_over_tcp(self):
        tcp = Raw(daemon.address)
        try:
            self.refused("shm.register", {"bytes": 4096}, "UNSUPPORTED", "Unix socket", raw=tcp)
        finally:
            tcp.close()

    def spmv_ref(self, x, code="BAD_REQUEST", text=""):
        return self.refused("spmv", {"id": self.id, "x": x}, code, text)

    def test_bad_references(self):
        rid = self.register(4096)
        n = self.A.shape[0] * 8
        self.spmv_ref({"shm": rid, "offset": 4096 - 8, "bytes": n}, text="x: offset = 4088")
        self.spmv_ref({"shm": rid, "offset": (1 << 63) - 8, "bytes": 16},
                      text="past the end of region")
        self.spmv_ref({"shm": rid, "offset": 4, "bytes": n}, text="x: offset = 4 is not aligned")
        self.spmv_ref({"shm": rid, "offset": 0, "bytes": 13}, text="not a whole number")
        self.spmv_ref({"shm": rid + 1000, "offset": 0, "bytes": n}, text="no shared-memory region")
        self.spmv_ref({"shm": rid, "offset": 0}, text="needs 'bytes'")
        self.spmv_ref({"shm": rid, "offset": -8, "bytes": n}, text="offset must be an integer")
        self.refused("spmv", {"id": self.id, "x": {"shm": rid, "offset": 0, "bytes": n},
                              "out": {"shm": rid, "offset": 0, "bytes": 8}},
                     "BAD_REQUEST", "out: bytes = 8")
        self.refused("solve", {"id": self.id, "b": {"shm": rid, "offset": 0, "bytes": 8}},
                     "BAD_REQUEST", "b has 1 values")
        # a good one works: x from the region, y into it
        error, result = self.raw.call("spmv", {"id": self.id,
                                               "x": {"shm": rid, "offset": 0, "bytes": n},
                                               "out": {"shm": rid, "offset": 2048, "bytes": n}})
        self.assertIsNone(error)
        self.assertEqual(result["y"], {"shm": rid, "offset": 2048, "bytes": n})
        error, result = self.raw.call("shm.unregister", {"shm": rid})
        self.assertIsNone(error)
        self.spmv_ref({"shm": rid, "offset": 0, "bytes": n}, text="no shared-memory region")
        self.refused("shm.unregister", {"shm": rid}, "BAD_REQUEST", "no shared-memory region")

    def test_another_connections_region(self):
        other = Raw(unix)
        try:
            rid = self.register(4096, raw=other)
            self.spmv_ref({"shm": rid, "offset": 0, "bytes": self.A.shape[0] * 8},
                          text=f"no shared-memory region {rid} on this connection")
        finally:
            other.close()

    def test_limit_per_connection_and_user(self):
        self.register(MAX_SHM // 2)
        fd = memfd(MAX_SHM // 2 + 4096)
        self.refused("shm.register", {"bytes": MAX_SHM // 2 + 4096}, "TOO_LARGE",
                     "over --max-shm-bytes", [fd])
        os.close(fd)
        other = Raw(unix)  # the same user (anonymous) on another connection
        try:
            fd = memfd(MAX_SHM // 2 + 4096)
            self.refused("shm.register", {"bytes": MAX_SHM // 2 + 4096}, "TOO_LARGE",
                         "user 'anonymous'", [fd], raw=other)
            os.close(fd)
        finally:
            other.close()


class Lifetimes(unittest.TestCase):
    """Descriptors and mappings go with their connection, and never under a running job."""

    @classmethod
    def setUpClass(cls):
        cls.A = spd_matrix(20000, rng)
        with krylov.Client(daemon.address) as kd:
            cls.id = kd.put(cls.A).id

    def baseline(self):
        self.assertTrue(settle(lambda: not server_memfd_maps()), server_memfd_maps())
        return server_fds()

    def test_client_closes_its_memfd_after_registering(self):
        fds = self.baseline()
        raw = Raw(unix)
        n = self.A.shape[0] * 8
        fd = memfd(2 * n)
        error, result = raw.call("shm.register", {"bytes": 2 * n}, [fd])
        self.assertIsNone(error)
        m = mmap.mmap(fd, 2 * n)
        os.close(fd)
        x = rng.uniform(-1, 1, self.A.shape[0])
        np.frombuffer(m, dtype="<f8", count=self.A.shape[0])[:] = x
        m.close()  # the client keeps nothing; the server's mapping holds the memory
        error, result = raw.call("spmv", {"id": self.id,
                                          "x": {"shm": result["shm"], "offset": 0, "bytes": n},
                                          "out": {"shm": result["shm"], "offset": n, "bytes": n}})
        self.assertIsNone(error)
        self.assertEqual(len(server_memfd_maps()), 1)
        raw.close()
        self.assertTrue(settle(lambda: not server_memfd_maps()), server_memfd_maps())
        self.assertTrue(settle(lambda: server_fds() == fds), (server_fds(), fds))

    def test_descriptor_with_another_request_is_closed(self):
        fds = self.baseline()
        raw = Raw(unix)
        r, w = os.pipe()
        m = memfd(4096)
        error, _ = raw.call("server.status", {}, [r, w, m])
        self.assertIsNone(error)
        for fd in (r, w, m):
            os.close(fd)
        self.assertTrue(settle(lambda: server_fds() == fds + 1), (server_fds(), fds))  # + raw
        raw.close()
        self.assertTrue(settle(lambda: server_fds() == fds), (server_fds(), fds))

    def test_disconnect_mid_solve(self):
        fds = self.baseline()
        for _ in range(2):
            raw = Raw(unix)
            n = self.A.shape[0] * 8
            fd = memfd(2 * n)
            error, result = raw.call("shm.register", {"bytes": 2 * n}, [fd])
            os.close(fd)
            self.assertIsNone(error)
            rid = result["shm"]
            raw.send("solve", {"id": self.id, "rtol": 0.0, "maxiter": 100000,
                               "b": {"shm": rid, "offset": 0, "bytes": n},
                               "out": {"shm": rid, "offset": n, "bytes": n}})
            time.sleep(0.3)
            error, _ = raw.call("shm.unregister", {"shm": rid})  # the solve still uses it
            self.assertIsNone(error)
            raw.close()
        self.assertTrue(settle(lambda: not server_memfd_maps(), 60), server_memfd_maps())
        self.assertTrue(settle(lambda: server_fds() == fds), (server_fds(), fds))
        with krylov.Client(unix) as kd:
            x = np.ones(self.A.shape[0])
            np.testing.assert_allclose(kd.spmv(self.id, x), self.A @ x, rtol=1e-12)


if __name__ == "__main__":
    unittest.main()
