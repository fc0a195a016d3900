"""Large vectors on the wire (issue 22 part 4): the path where a request's bin is received in place
into a buffer of the message's size, written to the device from there, and the answer's vector is
sent from the buffer the device wrote it to (the response's tail) — over the raw protocol, so the
bytes on the wire are the test's own.

Checked, against numpy on fresh random values: an spmv and a solve whose vector arrives split
over many small TCP sends (bin header split too) give the exact answer; a float32 x to a float64
matrix (the conversion path) and a float64 x to a float32 matrix; pipelined large requests glued
together on one connection each get their own answer; a request cut off in the middle of its bin
(the client leaves) leaves the server serving and its client memory back where it was; a bin
declared larger than --max-message is refused TOO_LARGE, naming the msgid, before anything of
its size is allocated (the server's client-memory peak stays small), and the connection goes on;
the same answers over TLS; and the answer's vector is the last value of its map.
"""

import os
import socket
import ssl
import struct
import subprocess
import tempfile
import shutil
import time
import unittest

import msgpack
import numpy as np
import scipy.sparse as sp

from kd_daemon import SOURCE_DIR, Daemon, make_rng

rng = None
plain = tls = small = None
certs = None
MAX_MESSAGE_SMALL = 8 << 20


def setUpModule():
    global rng, plain, tls, small, certs
    rng = make_rng()
    certs = tempfile.mkdtemp(prefix="krylov-vectors-test-")
    subprocess.run(["bash", os.path.join(SOURCE_DIR, "tests", "tools", "make_test_certs.sh"),
                    certs], check=True, capture_output=True, timeout=60)
    plain = Daemon().start()
    tls = Daemon("--tls-cert", os.path.join(certs, "server.pem"),
                 "--tls-key", os.path.join(certs, "server.key")).start()
    small = Daemon("--max-message", str(MAX_MESSAGE_SMALL)).start()


def tearDownModule():
    for d in (plain, tls, small):
        if d is not None:
            assert d.stop() == 0
    shutil.rmtree(certs, ignore_errors=True)


class Conn:
    """msgpack-rpc over a socket whose sends the test controls."""

    def __init__(self, port, use_tls=False, test=None):
        s = socket.create_connection(("127.0.0.1", port), timeout=120)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if use_tls:
            ctx = ssl.create_default_context(cafile=os.path.join(certs, "ca.pem"))
            s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        self.sock = s
        if test is not None:  # closed even when the test fails: its bytes stop counting
            test.addCleanup(s.close)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 31)
        self.msgid = 0

    def encode(self, method, params):
        self.msgid += 1
        return self.msgid, msgpack.packb([0, self.msgid, method, [params]], use_bin_type=True)

    def send(self, data, pieces=1):
        """data in `pieces` sends of about equal size, each pushed out on its own."""
        step = max(1, len(data) // pieces)
        for at in range(0, len(data), step):
            self.sock.sendall(data[at:at + step])
            if pieces > 1:
                time.sleep(0.0005)

    def read(self):
        while True:
            for msg in self.unpacker:
                return msg
            data = self.sock.recv(1 << 20)
            if not data:
                return None
            self.unpacker.feed(data)

    def result(self, msgid):
        msg = self.read()
        assert msg is not None, "connection closed"
        assert msg[0] == 1 and msg[1] == msgid, msg[:2]
        if msg[2] is not None:
            raise RuntimeError(f"{msg[2]['code']}: {msg[2]['message']}")
        return msg[3]

    def call(self, rpc, pieces=1, **params):
        msgid, data = self.encode(rpc, params)
        self.send(data, pieces)
        return self.result(msgid)

    def close(self):
        self.sock.close()


def put(conn, a, dtype="float64"):
    a = a.tocsr()
    a.sort_indices()
    return conn.call("matrix.put", rows=a.shape[0], cols=a.shape[1], dtype=dtype,
                     indptr=a.indptr.astype("<i4").tobytes(),
                     indices=a.indices.astype("<i4").tobytes(),
                     values=a.data.astype("<f8" if dtype == "float64" else "<f4").tobytes())["id"]


def random_matrix(n, density=4):
    a = sp.random(n, n, density=density / n, random_state=np.random.default_rng(rng.integers(1 << 62)),
                  format="csr")
    return (a + a.T + sp.diags(np.full(n, float(2 * density + 2)))).tocsr()  # SPD: dominant


def client_memory(conn):
    return conn.call("server.status")["client_memory"]


class TestVectors(unittest.TestCase):
    def check_spmv(self, conn, n, pieces):
        a = random_matrix(n)
        mid = put(conn, a)
        x = rng.standard_normal(n)
        res = conn.call("spmv", pieces=pieces, id=mid, x=x.astype("<f8").tobytes())
        y = np.frombuffer(res["y"], "<f8")
        np.testing.assert_allclose(y, a @ x, rtol=1e-12, atol=1e-12)
        self.assertEqual(list(res.keys())[-1], "y")  # the tail: the map's last value
        return a, mid

    def test_split_bins_spmv_and_solve(self):
        conn = Conn(plain.port, test=self)
        n = 300_000  # 2.4 MB of x: the frame is grown once to the declared size
        a, mid = self.check_spmv(conn, n, pieces=997)
        b = rng.standard_normal(n)
        res = conn.call("solve", pieces=501, id=mid, b=b.astype("<f8").tobytes(), method="cg",
                        rtol=1e-10)
        x = np.frombuffer(res["x"], "<f8")
        self.assertEqual(res["status"], "converged")
        self.assertLess(np.linalg.norm(b - a @ x) / np.linalg.norm(b), 1e-9)
        self.assertEqual(list(res.keys())[-1], "x")
        # every byte of the request on its own, for a small one (header splits at every offset)
        small_a = random_matrix(40)
        sid = put(conn, small_a)
        xs = rng.standard_normal(40)
        msgid, data = conn.encode("spmv", {"id": sid, "x": xs.astype("<f8").tobytes()})
        for i in range(len(data)):
            conn.sock.sendall(data[i:i + 1])
        y = np.frombuffer(conn.result(msgid)["y"], "<f8")
        np.testing.assert_allclose(y, small_a @ xs, rtol=1e-12, atol=1e-12)
        conn.close()

    def test_dtype_conversions(self):
        conn = Conn(plain.port, test=self)
        n = 200_000
        a = random_matrix(n)
        mid64 = put(conn, a)
        x = rng.standard_normal(n).astype(np.float32)
        res = conn.call("spmv", id=mid64, x=x.astype("<f4").tobytes(), dtype="float32")
        self.assertEqual(res["dtype"], "float32")
        y = np.frombuffer(res["y"], "<f4")
        want = a @ x.astype(np.float64)  # computed in float64, then narrowed
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
        # float64 vectors to a float32 matrix: widened answer of the float32 product
        mid32 = put(conn, a, dtype="float32")
        x64 = rng.standard_normal(n)
        res = conn.call("spmv", id=mid32, x=x64.astype("<f8").tobytes())
        y = np.frombuffer(res["y"], "<f8")
        a32 = a.astype(np.float32)
        np.testing.assert_allclose(y, a32 @ x64.astype(np.float32), rtol=1e-4, atol=1e-4)
        # solve with a float32 b on the float64 matrix
        b = rng.standard_normal(n).astype(np.float32)
        res = conn.call("solve", id=mid64, b=b.astype("<f4").tobytes(), dtype="float32",
                        rtol=1e-6)
        xs = np.frombuffer(res["x"], "<f4").astype(np.float64)
        self.assertEqual(res["status"], "converged")
        self.assertLess(np.linalg.norm(b - a @ xs) / np.linalg.norm(b), 1e-5)
        conn.close()

    def test_pipelined_large_requests(self):
        conn = Conn(plain.port, test=self)
        n = 250_000
        a = random_matrix(n)
        mid = put(conn, a)
        xs = [rng.standard_normal(n) for _ in range(4)]
        blob, ids = b"", []
        for x in xs:
            msgid, data = conn.encode("spmv", {"id": mid, "x": x.astype("<f8").tobytes()})
            blob += data
            ids.append(msgid)
        conn.send(blob, pieces=7)  # message boundaries fall inside sends
        answers = {}
        for _ in ids:  # answered in any order (a group's requests finish together)
            msg = conn.read()
            self.assertIsNone(msg[2])
            answers[msg[1]] = np.frombuffer(msg[3]["y"], "<f8")
        self.assertEqual(sorted(answers), ids)
        for msgid, x in zip(ids, xs):
            np.testing.assert_allclose(answers[msgid], a @ x, rtol=1e-12, atol=1e-12)
        conn.close()

    def test_request_cut_off_mid_bin(self):
        watch = Conn(plain.port, test=self)
        before = client_memory(watch)["used_bytes"]
        conn = Conn(plain.port, test=self)
        n = 1_000_000
        msgid, data = conn.encode("spmv", {"id": "0" * 32, "x": np.zeros(n).tobytes()})
        conn.send(data[: len(data) // 2], pieces=20)
        time.sleep(0.3)
        during = client_memory(watch)["used_bytes"]
        # the message's buffer is held (and counted) while it arrives
        self.assertGreater(during - before, len(data) // 2)
        conn.close()
        deadline = time.monotonic() + 10
        while client_memory(watch)["used_bytes"] > before and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertLessEqual(client_memory(watch)["used_bytes"], before)
        self.check_spmv(watch, 50_000, pieces=3)  # still serving
        watch.close()

    def test_declared_bin_over_limit_refused_before_allocation(self):
        conn = Conn(small.port, test=self)
        peak_before = client_memory(conn)["peak_bytes"]
        # spmv whose x declares 512 MiB: only the headers are sent, then a little of the bin
        params = b"\x91\x82" + msgpack.packb("id") + msgpack.packb("0" * 32) + msgpack.packb("x")
        declared = 512 << 20
        msg = b"\x94\x00\x4d" + msgpack.packb("spmv") + params + b"\xc6" + struct.pack(">I", declared)
        conn.send(msg + b"\0" * 65536)
        reply = conn.read()
        self.assertEqual(reply[1], 77)
        self.assertEqual(reply[2]["code"], "TOO_LARGE")
        self.assertIn(str(MAX_MESSAGE_SMALL), reply[2]["message"])
        conn.sock.sendall(b"\0" * (1 << 20))  # more of the refused bin: discarded, not held
        time.sleep(0.2)
        mem = client_memory(Conn(small.port, test=self))
        self.assertLess(mem["peak_bytes"] - peak_before, 4 << 20)
        conn.close()
        # a request just under the limit is still served on a new connection
        fresh = Conn(small.port, test=self)
        self.check_spmv(fresh, 50_000, pieces=5)
        fresh.close()

    def test_tls(self):
        conn = Conn(tls.port, use_tls=True, test=self)
        a, mid = self.check_spmv(conn, 400_000, pieces=31)
        b = rng.standard_normal(400_000)
        res = conn.call("solve", id=mid, b=b.astype("<f8").tobytes(), rtol=1e-10)
        x = np.frombuffer(res["x"], "<f8")
        self.assertLess(np.linalg.norm(b - a @ x) / np.linalg.norm(b), 1e-9)
        conn.close()


if __name__ == "__main__":
    unittest.main()
