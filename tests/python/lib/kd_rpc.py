"""A real krylovd for the Python end-to-end tests, and msgpack-rpc to it over a plain socket.

Only the `msgpack` module is used (no krylovd client package): the tests speak the wire protocol
of docs/PROTOCOL.md directly. The daemon listens on 127.0.0.1 port 0 and writes the port it got
to a file, with a fresh state directory and the device named by KD_TEST_DEVICE (default auto).
"""
import os
import shutil
import socket
import subprocess
import tempfile
import time

import msgpack
import numpy as np


class RpcError(Exception):
    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


class Daemon:
    def __init__(self, bin_dir, extra=()):
        self.dir = tempfile.mkdtemp(prefix="krylovd-pytest-")
        port_file = os.path.join(self.dir, "port")
        args = [os.path.join(bin_dir, "krylovd"), "--listen", "127.0.0.1:0", "--port-file", port_file,
                "--state-dir", os.path.join(self.dir, "state"),
                "--device", os.environ.get("KD_TEST_DEVICE") or "auto",
                "--log-level", os.environ.get("KD_TEST_LOG_LEVEL") or "warn",
                "--warm-programs", "none", *extra]
        self.proc = subprocess.Popen(args)
        deadline = time.monotonic() + 120  # PoCL may compile kernels at start
        self.port = 0
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"krylovd exited during start-up ({self.proc.returncode})")
            try:
                with open(port_file) as f:
                    self.port = int(f.read().strip() or 0)
            except (OSError, ValueError):
                pass
            if self.port > 0:
                return
            time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("krylovd did not start listening")

    def client(self):
        return Client(self.port)

    def stop(self):
        self.proc.terminate()
        try:
            code = self.proc.wait(timeout=60)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
        return code


class Client:
    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=300)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 31)
        self.msgid = 0
        self.notifications = []

    def call(self, rpc_method, **params):
        """The result of `rpc_method`, or RpcError with the server's code and message."""
        self.msgid += 1
        self.sock.sendall(msgpack.packb([0, self.msgid, rpc_method, [params]], use_bin_type=True))
        while True:
            for msg in self.unpacker:
                if msg[0] == 2:
                    self.notifications.append(msg)
                elif msg[0] == 1 and msg[1] == self.msgid:
                    if msg[2] is not None:
                        raise RpcError(msg[2]["code"], msg[2]["message"])
                    return msg[3]
            data = self.sock.recv(1 << 20)
            if not data:
                raise RuntimeError("krylovd closed the connection")
            self.unpacker.feed(data)

    def put_csr(self, a, dtype="float64", **extra):
        a = a.tocsr()
        a.sort_indices()
        return self.call("matrix.put", rows=a.shape[0], cols=a.shape[1],
                         indptr=np.ascontiguousarray(a.indptr, "<i4").tobytes(),
                         indices=np.ascontiguousarray(a.indices, "<i4").tobytes(),
                         values=np.ascontiguousarray(a.data, "<f8" if dtype == "float64" else "<f4").tobytes(),
                         dtype=dtype, **extra)

    def solve(self, matrix_id, b, dtype="float64", x0=None, **params):
        """b: (n,) or (n, k) array; returns (x as (n,) or (n, k), the result map)."""
        b = np.asarray(b)
        k = 1 if b.ndim == 1 else b.shape[1]
        wire = "<f8" if dtype == "float64" else "<f4"
        extra = dict(params)
        if x0 is not None:
            extra["x0"] = np.asarray(x0, wire).tobytes(order="F")
        if k > 1:
            extra["nrhs"] = k
        res = self.call("solve", id=matrix_id, b=np.asarray(b, wire).tobytes(order="F"),
                        dtype=dtype, **extra)
        x = np.frombuffer(res["x"], dtype=wire).astype(np.float64)
        return (x if k == 1 else x.reshape((b.shape[0], k), order="F")), res

    def close(self):
        self.sock.close()


# ---- a small runner for the check-style tests (test_scipy_validation.py, test_solve_server.py) --

FAILURES = []


def check(cond, what):
    """Record a failed assertion and go on (every check of a test runs)."""
    if not cond:
        FAILURES.append(what)
        print(f"    FAIL: {what}")


def run_tests(namespace):
    """Parse --bin-dir and --matrices (left in namespace["ARGS"]), start krylovd, run every
    test_* function of namespace with a connected client (a test that raises fails, the others
    still run), stop the daemon (its exit status is checked too). Returns the exit status."""
    import argparse
    import traceback

    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--matrices", required=True)
    args = namespace["ARGS"] = ap.parse_args()
    daemon = Daemon(args.bin_dir)
    try:
        client = daemon.client()
        for name, fn in sorted(namespace.items()):
            if name.startswith("test_") and callable(fn):
                print(f"-- {name}")
                try:
                    fn(client)
                except Exception:
                    traceback.print_exc()
                    FAILURES.append(f"{name} raised")
        client.close()
    finally:
        code = daemon.stop()
    check(code == 0, f"krylovd exit status {code}")
    print(f"{len(FAILURES)} failure(s)" if FAILURES else "all checks passed")
    return 1 if FAILURES else 0
