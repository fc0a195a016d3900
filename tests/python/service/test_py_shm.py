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

The client's own bookkeeping: each spmv and solve above the threshold goes through a region
(counted), float32 too; spmv with beta != 0 and no y is a ValueError on both paths; a call that
ended without its answer (a client timeout, an exception from the callback) leaves its region to
the abandoned request and the next call registers a fresh one, while a call the server answered
with an error keeps it; a region that would grow past --max-shm-bytes grows only to what the
request needs, and a request with no room at all goes as bins without turning shared memory off;
a shm.register that times out turns it off without retrying and leaves no region id; close()
sends nothing.
"""

import fcntl
import mmap
import os
import shutil
import tempfile
import unittest

import numpy as np

import krylov
from krylov import _shm, errors
from kd_daemon import Daemon, make_rng, process_fds, spd_matrix, settle
from kd_raw import Raw

MAX_SHM = 16 << 20


def memfd(nbytes, seal=True, sealing=True):
    flags = os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if sealing else 0)
    fd = os.memfd_create("test-shm", flags)
    os.ftruncate(fd, nbytes)
    if nbytes > 0:
        os.posix_fallocate(fd, 0, nbytes)  # the server takes only allocated memfds
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd


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


# The memfds of this test and of the Python client; the OpenCL runtime has memfds of its own
OUR_MEMFDS = ("memfd:test-shm", "memfd:krylov-shm")


def server_fds():
    """The server's descriptors that requests here can leave behind: memfds and pipes (sockets
    still closing, the runtime's own files: not counted)."""
    return process_fds(daemon.proc.pid, lambda target: target.startswith("pipe:") or
                       any(m in target for m in OUR_MEMFDS))


def server_memfd_maps():
    with open(f"/proc/{daemon.proc.pid}/maps") as f:
        return [line for line in f if any(m in line for m in OUR_MEMFDS)]


class ThroughRegions(unittest.TestCase):
    """The Python client uses shared memory on its own and answers as the bins path does."""

    @classmethod
    def setUpClass(cls):
        # float32 x: 160 KB, x and its result over the 256 KiB threshold (float64 too)
        cls.A = spd_matrix(40000, rng)

    def test_spmv_and_solve_match_bins_and_scipy(self):
        A = self.A
        with krylov.Client(unix) as kd, krylov.Client(unix, shm=False) as bins:
            info = kd.put(A)

            def through_region(f, *args, **kwargs):  # f went through a region, this very call
                uses = kd._arena.uses
                out = f(*args, **kwargs)
                self.assertEqual(kd._arena.uses, uses + 1, "the call did not go through a region")
                return out

            for dtype, tol, same in (("float64", 1e-12, 1e-12), ("float32", 1e-5, 1e-5)):
                x = rng.uniform(-1, 1, A.shape[0])
                # an id: the client asks for the shape once
                y = through_region(kd.spmv, info.id, x, dtype=dtype)
                self.assertEqual(y.dtype, np.dtype(dtype))
                y_bins = bins.spmv(info, x, dtype=dtype)
                self.assertIsNone(bins._arena.region)
                np.testing.assert_allclose(y, y_bins, rtol=same, atol=0)
                want = A @ x
                self.assertLessEqual(np.max(np.abs(y - want)) / np.max(np.abs(want)), tol)
            X = rng.uniform(-1, 1, (A.shape[0], 3))
            Y0 = rng.uniform(-1, 1, (A.shape[0], 3))
            Y = through_region(kd.spmv, info, X, alpha=2.0, beta=-0.5, y=Y0)
            np.testing.assert_allclose(Y, 2.0 * (A @ X) - 0.5 * Y0, rtol=1e-10, atol=1e-10)
            np.testing.assert_allclose(Y, bins.spmv(info, X, alpha=2.0, beta=-0.5, y=Y0),
                                       rtol=1e-12, atol=0)
            b = rng.uniform(-1, 1, A.shape[0])
            x0 = rng.uniform(-1, 1, A.shape[0]) * 0.1
            for dtype, same in (("float64", 1e-12), ("float32", 1e-5)):
                res = through_region(kd.solve, info, b, rtol=1e-9 if dtype == "float64" else 1e-5,
                                     x0=x0, dtype=dtype)
                res_bins = bins.solve(info, b, rtol=1e-9 if dtype == "float64" else 1e-5, x0=x0,
                                      dtype=dtype)
                self.assertEqual(res.status, "converged")
                self.assertEqual(res.x.dtype, np.dtype(dtype))
                np.testing.assert_allclose(res.x, res_bins.x, rtol=same,
                                           atol=same * np.max(np.abs(res_bins.x)))
                self.assertLessEqual(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b),
                                     1e-8 if dtype == "float64" else 1e-4)
            B = rng.uniform(-1, 1, (A.shape[0], 2))
            many = through_region(kd.solve, info, B, rtol=1e-9)
            self.assertEqual(many.x.shape, B.shape)
            for k in range(2):
                self.assertLessEqual(
                    np.linalg.norm(B[:, k] - A @ many.x[:, k]) / np.linalg.norm(B[:, k]), 1e-8)
            self.assertTrue(kd.shm)

    def test_beta_without_y(self):
        A = self.A
        with krylov.Client(unix) as kd, krylov.Client(unix, shm=False) as bins:
            info = kd.put(A)
            uses = kd._arena.uses  # the put's values may have gone through the region
            x = rng.uniform(-1, 1, A.shape[0])
            for client in (kd, bins):
                with self.assertRaisesRegex(ValueError, "beta != 0 needs y"):
                    client.spmv(info, x, beta=0.5)
                with self.assertRaisesRegex(ValueError, "beta != 0 needs y"):
                    client.spmv(info, np.stack([x, x], axis=1), beta=-1.0)
            self.assertEqual(kd._arena.uses, uses)

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
        self.assertTrue(settle(lambda: server_fds() == fds), (server_fds(), fds))
        raw.close()
        self.assertTrue(settle(lambda: server_fds() == fds), (server_fds(), fds))

    def test_disconnect_mid_solve(self):
        fds = self.baseline()
        for _ in range(2):
            raw = Raw(unix)
            n = self.A.shape[0] * 8
            fd = memfd(2 * n)
            # a right-hand side that takes a while (b = 0 would be solved at once)
            m = mmap.mmap(fd, 2 * n)
            np.frombuffer(m, dtype="<f8", count=self.A.shape[0])[:] = rng.uniform(
                -1, 1, self.A.shape[0])
            m.close()
            error, result = raw.call("shm.register", {"bytes": 2 * n}, [fd])
            os.close(fd)
            self.assertIsNone(error)
            rid = result["shm"]
            msgid = raw.send("solve", {"id": self.id, "rtol": 0.0, "maxiter": 1000000,
                                       "progress": True,
                                       "b": {"shm": rid, "offset": 0, "bytes": n},
                                       "out": {"shm": rid, "offset": n, "bytes": n}})
            self.assertIsNotNone(raw.wait_progress(msgid), "the solve ended before any progress")
            error, result = raw.call("shm.unregister", {"shm": rid})
            self.assertIsNone(error)
            self.assertTrue(result["in_use"], "the running solve does not hold its region")
            raw.close()
        self.assertTrue(settle(lambda: not server_memfd_maps(), 60), server_memfd_maps())
        self.assertTrue(settle(lambda: server_fds() == fds), (server_fds(), fds))
        with krylov.Client(unix) as kd:
            x = np.ones(self.A.shape[0])
            np.testing.assert_allclose(kd.spmv(self.id, x), self.A @ x, rtol=1e-12)


class Renewal(unittest.TestCase):
    """A call that ended without its answer leaves its region to the request still running: the
    next call lays its arrays out in a fresh region."""

    @classmethod
    def setUpClass(cls):
        cls.A = spd_matrix(20000, rng)

    def setUp(self):
        self.kd = krylov.Client(unix)
        self.info = self.kd.put(self.A)
        self.b = rng.uniform(-1, 1, self.A.shape[0])
        # programs built, region registered
        self.assertEqual(self.kd.solve(self.info, self.b, rtol=1e-6).status, "converged")
        self.region = self.kd._arena.region
        self.assertIsNotNone(self.region)

    def tearDown(self):
        self.kd.close()

    def long_solve(self, **kwargs):
        return self.kd.solve(self.info, self.b, rtol=0.0, maxiter=1000000, **kwargs)

    def check_renewed(self):
        self.assertTrue(self.kd._arena.dirty)
        x = rng.uniform(-1, 1, self.A.shape[0])
        uses = self.kd._arena.uses
        y = self.kd.spmv(self.info, x)
        self.assertEqual(self.kd._arena.uses, uses + 1)
        self.assertNotEqual(self.kd._arena.region.id, self.region.id,
                            "the region of an abandoned request was used again")
        self.assertFalse(self.kd._arena.dirty)
        np.testing.assert_allclose(y, self.A @ x, rtol=1e-12, atol=1e-12)
        res = self.kd.solve(self.info, self.b, rtol=1e-8)
        self.assertLessEqual(
            np.linalg.norm(self.b - self.A @ res.x) / np.linalg.norm(self.b), 1e-7)

    def test_client_timeout(self):
        self.kd._conn._sock.settimeout(0.5)
        with self.assertRaises(krylov.Timeout):
            self.long_solve()
        self.kd._conn._sock.settimeout(None)
        self.check_renewed()

    def test_exception_from_callback(self):
        class Stop(Exception):
            pass

        def callback(progress):
            raise Stop()

        with self.assertRaises(Stop):
            self.long_solve(callback=callback)
        self.check_renewed()

    def test_answered_error_keeps_region(self):
        with self.assertRaises(krylov.BadRequest):
            self.kd.solve(self.info, self.b, method="no-such-method")
        self.assertFalse(self.kd._arena.dirty)
        x = rng.uniform(-1, 1, self.A.shape[0])
        np.testing.assert_allclose(self.kd.spmv(self.info, x), self.A @ x, rtol=1e-12,
                                   atol=1e-12)
        self.assertIs(self.kd._arena.region, self.region)


class Growth(unittest.TestCase):
    """A region grows to what fits under --max-shm-bytes (16 MiB here)."""

    def test_grows_within_the_limit(self):
        A = spd_matrix(20000, rng)
        self.assertTrue(settle(lambda: not server_memfd_maps(), 60), server_memfd_maps())
        with krylov.Client(unix) as kd:
            info = kd.put(A)
            arena = kd._arena

            def spmv(k, through):
                X = rng.uniform(-1, 1, (A.shape[0], k))
                uses = arena.uses
                np.testing.assert_allclose(kd.spmv(info, X), A @ X, rtol=1e-12, atol=1e-12)
                self.assertEqual(arena.uses, uses + through, k)

            spmv(28, 1)  # x and y: 8.96 MB, a 9 MiB region
            self.assertEqual(arena.region.nbytes, 9 << 20)
            spmv(32, 1)  # 10.24 MB: twice 9 MiB is over the limit, 10 MiB is not
            self.assertEqual(arena.region.nbytes, 10 << 20)
            self.assertTrue(kd.shm)
            spmv(64, 0)  # 20.5 MB: no room at all, bins
            self.assertTrue(kd.shm, "one request too large turned shared memory off")
            self.assertIsNone(arena.refused)
            spmv(64, 0)  # not tried again at once
            spmv(2, 1)  # smaller ones still go through a region
            self.assertLessEqual(arena.region.nbytes, MAX_SHM)


class FakeConnection:
    """The calls an Arena makes, answered as a server with a --max-shm-bytes would."""

    is_unix = True
    closed = False

    def __init__(self, limit=MAX_SHM, register_error=None):
        self.limit = limit
        self.register_error = register_error
        self.calls = []
        self.regions = {}
        self.next_id = 1

    def call(self, method, params=None, on_progress=None, fds=()):
        self.calls.append((method, dict(params or {})))
        if method == "shm.register":
            if self.register_error is not None:
                raise self.register_error
            if sum(self.regions.values()) + params["bytes"] > self.limit:
                raise errors.TooLarge("over --max-shm-bytes")
            rid, self.next_id = self.next_id, self.next_id + 1
            self.regions[rid] = params["bytes"]
            return {"shm": rid, "bytes": params["bytes"], "name": ""}
        if method == "shm.unregister":
            del self.regions[params["shm"]]
            return {"shm": params["shm"], "in_use": False}
        raise AssertionError(method)

    def send_request(self, method, params, fds=()):
        self.call(method, params)
        return 0


class ArenaBookkeeping(unittest.TestCase):
    def test_growth_past_the_limit_takes_what_is_needed(self):
        conn = FakeConnection(limit=10 << 20)
        arena = _shm.Arena(conn)
        self.assertTrue(arena.reserve(9 << 20))
        self.assertTrue(arena.reserve((9 << 20) + 100))  # 18 MiB: no; 10 MiB: yes
        self.assertEqual(arena.region.nbytes, 10 << 20)
        self.assertTrue(arena.enabled)
        self.assertFalse(arena.reserve((10 << 20) + 100))  # no room even for exactly that
        self.assertTrue(arena.enabled)
        self.assertIsNone(arena.region)
        self.assertEqual(conn.regions, {})
        n = len(conn.calls)
        self.assertFalse(arena.reserve(11 << 20))  # known to be too large: not asked again
        self.assertEqual(len(conn.calls), n)
        self.assertTrue(arena.reserve(1 << 20))
        for _ in range(_shm._RETRY_AFTER):  # after a while the size is tried again
            arena.reserve(11 << 20)
        self.assertGreater(len(conn.calls), n + 1)
        arena.close()

    def test_exact_size_rounded_to_a_page(self):
        conn = FakeConnection(limit=(3 << 20) + 8192)
        arena = _shm.Arena(conn)
        self.assertTrue(arena.reserve((3 << 20) + 10))
        self.assertEqual(arena.region.nbytes, (3 << 20) + mmap.PAGESIZE)
        arena.close()

    def test_timeout_in_register(self):
        conn = FakeConnection(register_error=errors.Timeout("no answer within 1 s"))
        arena = _shm.Arena(conn)
        self.assertFalse(arena.reserve(1 << 20))
        self.assertIsNone(arena.region)  # no id it never learned
        self.assertFalse(arena.enabled)
        self.assertIn("no answer", arena.refused)
        n = len(conn.calls)
        self.assertFalse(arena.usable(1 << 20))
        self.assertFalse(arena.reserve(1 << 20))  # never tried again
        self.assertEqual(len(conn.calls), n)

    def test_abandoned_region_is_not_reused(self):
        conn = FakeConnection()
        arena = _shm.Arena(conn)
        self.assertTrue(arena.reserve(1 << 20))
        old = arena.region.id
        self.assertTrue(arena.reserve(1 << 20))
        self.assertEqual(arena.region.id, old)
        arena.abandon()
        self.assertTrue(arena.reserve(1 << 20))
        self.assertNotEqual(arena.region.id, old)
        self.assertIn(("shm.unregister", {"shm": old}), conn.calls)
        arena.close()

    def test_close_sends_nothing(self):
        conn = FakeConnection()
        arena = _shm.Arena(conn)
        self.assertTrue(arena.reserve(1 << 20))
        n = len(conn.calls)
        arena.close()
        self.assertEqual(len(conn.calls), n)
        self.assertIsNone(arena.region)

    def test_client_close_sends_nothing(self):
        with krylov.Client(unix) as kd:
            A = spd_matrix(20000, rng)
            kd.spmv(kd.put(A), np.ones(A.shape[0]))
            self.assertIsNotNone(kd._arena.region)
            sent = []
            real = kd._conn.send_request
            kd._conn.send_request = lambda *a, **k: sent.append(a) or real(*a, **k)
            kd.close()
            self.assertEqual(sent, [])


if __name__ == "__main__":
    unittest.main()
