"""Shared memory (issue 35), the server's side of the review: what krylovd refuses and how it
handles the descriptors that come with the bytes.

Checked against a real krylovd on a Unix socket, over raw msgpack-rpc (requests the Python client
would never send): an `out` that shares bytes with an input (spmv's x or y, solve's b or x0) is
BAD_REQUEST naming both fields, while adjacent ranges work, and a memfd cannot be registered twice
on a connection (a second id for the same bytes); a shm.register refused before it takes its descriptor (here: one that fails
to decode), sent with a descriptor and followed in the stream by a good register carrying another
memfd, leaves its descriptor to nobody: the good one maps its own memfd (checked by content) and
the server holds no descriptor afterwards; a memfd not fully allocated (no posix_fallocate) and a
hugetlbfs memfd (MFD_HUGETLB, where the host allows one) are refused; descriptors past the
per-connection cap are closed at receipt; a matrix.put whose values come from a region larger than
--max-message is TOO_LARGE; server.status and /metrics report the regions mapped.
"""

import fcntl
import os
import shutil
import tempfile
import unittest
import urllib.request

import numpy as np

import krylov
from kd_daemon import Daemon, make_rng, metric_sample, process_fds, spd_matrix, settle
from kd_raw import Raw, pack

MAX_SHM = 16 << 20
MAX_MESSAGE = 1 << 20
HUGE_PAGE = 2 << 20


def memfd(nbytes, allocate=True, flags=0):
    fd = os.memfd_create("test-shm-server", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING | flags)
    try:
        os.ftruncate(fd, nbytes)
        if allocate:
            os.posix_fallocate(fd, 0, nbytes)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    except BaseException:
        os.close(fd)
        raise
    return fd


def fill(fd, data):
    os.pwrite(fd, data, 0)


def read_back(fd, nbytes, offset=0):
    return os.pread(fd, nbytes, offset)


def setUpModule():
    global rng, tmp, daemon, sock_path, metrics_port
    rng = make_rng()
    tmp = tempfile.mkdtemp(prefix="krylovd-shm-server-")
    sock_path = os.path.join(tmp, "krylovd.sock")
    port_file = os.path.join(tmp, "mport")
    daemon = Daemon("--listen", "unix:" + sock_path, "--max-shm-bytes", str(MAX_SHM),
                    "--max-message", str(MAX_MESSAGE), "--metrics", "127.0.0.1:0",
                    "--metrics-port-file", port_file).start()
    with open(port_file) as f:
        metrics_port = int(f.read())


def tearDownModule():
    status = daemon.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    assert status == 0, f"krylovd exited with status {status}"


def server_fds():
    """The server's descriptors other than sockets (a connection's socket is accepted and closed
    on the server's own time; a leaked memfd or pipe is what counts here)."""
    return process_fds(daemon.proc.pid, lambda target: not target.startswith("socket:"))


def server_memfd_maps():
    with open(f"/proc/{daemon.proc.pid}/maps") as f:
        # this test's memfds and the client's, not any an OpenCL runtime makes for itself
        return [line for line in f if "memfd:test-shm-server" in line or "memfd:krylov-shm" in line]


class ShmServer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.A = spd_matrix(64, rng)
        cls.n = cls.A.shape[0]
        with krylov.Client(daemon.address) as kd:
            cls.id = kd.put(cls.A).id

    def setUp(self):
        self.raw = Raw("unix:" + sock_path)
        self.fds = []
        # One round trip: the server has accepted this connection (its descriptor counts in
        # every server_fds() a test takes after this, not only in the later ones).
        error, _ = self.raw.call("server.status", {})
        self.assertIsNone(error, error)

    def tearDown(self):
        self.raw.close()
        for fd in self.fds:
            os.close(fd)
        with krylov.Client("unix:" + sock_path, shm=False) as kd:  # still serving
            x = np.ones(self.n)
            np.testing.assert_allclose(kd.spmv(self.id, x), self.A @ x, rtol=1e-12)

    def new_memfd(self, nbytes, **kw):
        fd = memfd(nbytes, **kw)
        self.fds.append(fd)
        return fd

    def register(self, fd, nbytes, raw=None):
        error, result = (raw or self.raw).call("shm.register", {"bytes": nbytes}, [fd])
        self.assertIsNone(error)
        return result["shm"]

    def refused(self, method, params, code, texts, fds=()):
        error, result = self.raw.call(method, params, fds)
        self.assertIsNotNone(error, f"{method} was not refused: {result}")
        self.assertEqual(error["code"], code, error["message"])
        for text in texts:
            self.assertIn(text, error["message"])
        return error["message"]

    # 1. out sharing bytes with an input

    def test_out_overlapping_an_input_is_refused(self):
        n = self.n
        v = 8 * n
        fd = self.new_memfd(8 * v)
        rid = self.register(fd, 8 * v)
        ref = lambda off, nb, r=rid: {"shm": r, "offset": off, "bytes": nb}  # noqa: E731
        # spmv: out over x (in place), over y with beta, partly over x
        self.refused("spmv", {"id": self.id, "x": ref(0, v), "out": ref(0, v)}, "BAD_REQUEST",
                     ["out overlaps x"])
        self.refused("spmv", {"id": self.id, "x": ref(0, v), "y": ref(v, v), "beta": 0.5,
                              "out": ref(v, v)}, "BAD_REQUEST", ["out overlaps y"])
        self.refused("spmv", {"id": self.id, "x": ref(0, v), "out": ref(v - 8, v)},
                     "BAD_REQUEST", ["out overlaps x"])
        # solve: out one column after b (nrhs 2), out over x0
        self.refused("solve", {"id": self.id, "b": ref(0, 2 * v), "nrhs": 2,
                               "out": ref(v, 2 * v)}, "BAD_REQUEST", ["out overlaps b"])
        self.refused("solve", {"id": self.id, "b": ref(0, v), "x0": ref(v, v),
                               "out": ref(v, v)}, "BAD_REQUEST", ["out overlaps x0"])
        self.refused("solve", {"id": self.id, "b": ref(0, v), "method": "auto",
                               "out": ref(0, v)}, "BAD_REQUEST", ["out overlaps b"])
        # a memfd is one region on its connection: no second id for the same bytes
        self.refused("shm.register", {"bytes": 8 * v}, "BAD_REQUEST",
                     ["registered already", f"region {rid}"], [fd])
        # a wrong-sized out is told as such first
        self.refused("spmv", {"id": self.id, "x": ref(0, v), "out": ref(0, 8)}, "BAD_REQUEST",
                     ["out: bytes = 8"])
        # adjacent ranges are fine, and the answers right
        x = rng.uniform(-1, 1, n)
        b = rng.uniform(-1, 1, n)
        fill(fd, x.tobytes())
        os.pwrite(fd, b.tobytes(), 2 * v)
        error, result = self.raw.call("spmv", {"id": self.id, "x": ref(0, v), "out": ref(v, v)})
        self.assertIsNone(error, error)
        y = np.frombuffer(read_back(fd, v, v), dtype=np.float64)
        np.testing.assert_allclose(y, self.A @ x, rtol=1e-12, atol=1e-12)
        error, result = self.raw.call("solve", {"id": self.id, "b": ref(2 * v, v), "rtol": 1e-10,
                                                "out": ref(3 * v, v)})
        self.assertIsNone(error, error)
        xs = np.frombuffer(read_back(fd, v, 3 * v), dtype=np.float64)
        self.assertLessEqual(np.linalg.norm(b - self.A @ xs) / np.linalg.norm(b), 1e-9)

    # 2. a descriptor never goes to another register

    def test_refused_register_leaves_its_descriptor_to_nobody(self):
        nbytes = 8 * self.n
        first = self.new_memfd(nbytes)
        second = self.new_memfd(nbytes)
        fill(first, np.full(self.n, 1.0).tobytes())
        fill(second, np.full(self.n, 2.0).tobytes())
        before = server_fds()
        # The refused register (bytes = 0 fails to decode) comes with the first memfd, and the
        # first bytes of a server.status that the next sendmsg completes: so the framer is still
        # in a message when the refused one has been answered. The next sendmsg carries the
        # second memfd, with the rest of server.status and a good register.
        bad_id, status_id, good_id = self.raw.next_id(), self.raw.next_id(), self.raw.next_id()
        bad = pack(bad_id, "shm.register", {"bytes": 0})
        status = pack(status_id, "server.status", {})
        good = pack(good_id, "shm.register", {"bytes": nbytes})
        self.raw.send_bytes(bad + status[:3], [first])
        error, _ = self.raw.wait(bad_id)
        self.assertIsNotNone(error)
        self.assertEqual(error["code"], "BAD_REQUEST", error["message"])
        self.raw.send_bytes(status[3:] + good, [second])
        error, _ = self.raw.wait(status_id)
        self.assertIsNone(error, error)
        error, result = self.raw.wait(good_id)
        self.assertIsNone(error, error)
        rid = result["shm"]
        # What the server mapped is the second memfd: x = 2.0 everywhere
        error, result = self.raw.call("spmv", {
            "id": self.id, "x": {"shm": rid, "offset": 0, "bytes": nbytes}})
        self.assertIsNone(error, error)
        y = np.frombuffer(result["y"], dtype=np.float64)
        np.testing.assert_allclose(y, self.A @ np.full(self.n, 2.0), rtol=1e-12, atol=1e-12)
        # and holds no descriptor for either (the mapping is not one)
        self.assertTrue(settle(lambda: server_fds() <= before), (server_fds(), before))

    def test_descriptors_past_the_connection_cap_are_closed(self):
        nbytes = 4096
        fds = [self.new_memfd(nbytes) for _ in range(10)]
        for i, fd in enumerate(fds):
            fill(fd, bytes([i + 1]) * 8)
        before = server_fds()
        error, result = self.raw.call("shm.register", {"bytes": nbytes}, fds)
        self.assertIsNone(error, error)
        rid = result["shm"]
        # the first descriptor is the register's; the others are closed
        self.assertTrue(settle(lambda: server_fds() <= before), (server_fds(), before))
        error, result = self.raw.call("spmv", {"id": self.id, "x": {"shm": rid, "offset": 0,
                                                                   "bytes": 8 * self.n}})
        self.assertIsNone(error, error)
        x = np.frombuffer(read_back(fds[0], 8 * self.n), dtype=np.float64)
        np.testing.assert_allclose(np.frombuffer(result["y"], dtype=np.float64), self.A @ x,
                                   rtol=1e-12, atol=1e-300)

    # 3. only fully allocated memfds on tmpfs

    def test_sparse_memfd_is_refused(self):
        fd = self.new_memfd(1 << 20, allocate=False)
        self.refused("shm.register", {"bytes": 1 << 20}, "BAD_REQUEST",
                     ["not all allocated", "posix_fallocate"], [fd])
        fd = self.new_memfd(1 << 20)
        self.register(fd, 1 << 20)

    def test_hugetlb_memfd_is_refused(self):
        flag = getattr(os, "MFD_HUGETLB", None)
        if flag is None:
            self.skipTest("no MFD_HUGETLB here")
        try:
            fd = memfd(HUGE_PAGE, allocate=False, flags=flag)
        except OSError as e:
            self.skipTest(f"no hugetlbfs memfd here: {e}")
        self.fds.append(fd)
        self.refused("shm.register", {"bytes": HUGE_PAGE}, "BAD_REQUEST", ["not on tmpfs"], [fd])

    # 5. matrix.put values copied from a region: no more than a message may carry

    def test_put_values_over_max_message_are_too_large(self):
        rows, cols = 500, 300  # dense: 150,000 values, 1.2 MB; the indices are 600 KB
        nnz = rows * cols
        indptr = (np.arange(rows + 1, dtype=np.int32) * cols).tobytes()
        indices = np.tile(np.arange(cols, dtype=np.int32), rows).tobytes()
        fd = self.new_memfd(8 * nnz)
        rid = self.register(fd, 8 * nnz)
        params = {"rows": rows, "cols": cols, "indptr": indptr, "indices": indices,
                  "values": {"shm": rid, "offset": 0, "bytes": 8 * nnz}}
        self.refused("matrix.put", params, "TOO_LARGE", ["values", "--max-message"])
        # under the limit it is copied and stored
        rows = 100
        nnz = rows * cols
        vals = rng.uniform(-1, 1, nnz)
        fill(fd, vals.tobytes())
        params = {"rows": rows, "cols": cols,
                  "indptr": (np.arange(rows + 1, dtype=np.int32) * cols).tobytes(),
                  "indices": np.tile(np.arange(cols, dtype=np.int32), rows).tobytes(),
                  "values": {"shm": rid, "offset": 0, "bytes": 8 * nnz}, "select": "heuristic"}
        error, result = self.raw.call("matrix.put", params)
        self.assertIsNone(error, error)
        x = rng.uniform(-1, 1, cols)
        error, out = self.raw.call("spmv", {"id": result["id"], "x": x.tobytes()})
        self.assertIsNone(error, error)
        np.testing.assert_allclose(np.frombuffer(out["y"], dtype=np.float64),
                                   vals.reshape(rows, cols) @ x, rtol=1e-11, atol=1e-11)

    # 6. the regions mapped, in server.status and /metrics

    def test_status_and_metrics_report_regions(self):
        def status():
            error, result = self.raw.call("server.status", {})
            self.assertIsNone(error, error)
            return result

        def metrics():
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                          timeout=60).read().decode()
            return (metric_sample(text, "krylovd_shm_regions"),
                    metric_sample(text, "krylovd_shm_mapped_bytes"))

        # other tests' connections are closed: their regions go
        self.assertTrue(settle(lambda: status()["shm_regions"] == 0), status())
        self.assertEqual(status()["shm_mapped_bytes"], 0)
        fd = self.new_memfd(3 * 4096)
        rid = self.register(fd, 3 * 4096)
        s = status()
        self.assertEqual((s["shm_regions"], s["shm_mapped_bytes"]), (1, 3 * 4096))
        self.assertEqual(metrics(), (1, 3 * 4096))
        self.assertEqual(len(server_memfd_maps()), 1)
        error, _ = self.raw.call("shm.unregister", {"shm": rid})
        self.assertIsNone(error, error)
        s = status()
        self.assertEqual((s["shm_regions"], s["shm_mapped_bytes"]), (0, 0))
        self.assertEqual(metrics(), (0, 0))


if __name__ == "__main__":
    unittest.main()
