#!/usr/bin/env python3
"""The wire's share of a put, a like put, an SpMV and a solve from the Python client (issue 35,
part 6), over TCP (bins), the Unix socket (bins) and the Unix socket with shared memory, beside
the raw loopback rate (Python to Python, the same sizes, the same run) and a NumPy memcpy rate;
for spmv and solve also with x and the result in arrays of kd.empty ("shm+empty": nothing copied),
and for put_values (the values alone on the base matrix's pattern, "values") with them in one:

    python3 bench/service/wire.py [--krylovd build/bin/krylovd | --server HOST:PORT
                                  [--unix unix:PATH]] [--n 100] [--quick] [--calls 5]
                                  [--persist MODE]

The matrix is the 7-point Laplacian on an n^3 grid (1M rows, 6.94M entries by default; --quick:
n = 40). For each operation and transport it prints the bytes the operation moves, the median
client wall time, the server's own time (the reply's time_ms), the transport's share (wall minus
server) and the rate that share amounts to, and that rate's ratio to the raw loopback rate of the
same transport (shared memory: to the memcpy rate). A markdown table; compare within one run.

--krylovd starts a daemon listening on TCP and a Unix socket (stopped at the end); --server uses
one already running (--unix adds its Unix socket). --persist MODE is passed to put(persist=...)
where the client takes it. --client-path picks the Python client (default: this checkout's), so
the same script measures an older client.
"""
import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))


def lap3d(n):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    a = sp.csr_matrix(sp.kron(sp.kron(eye, eye), t) + sp.kron(sp.kron(eye, t), eye)
                      + sp.kron(sp.kron(t, eye), eye))
    a.sort_indices()
    return a


def start(krylovd, directory):
    sock = os.path.join(directory, "krylovd.sock")
    port_file = os.path.join(directory, "port")
    proc = subprocess.Popen([krylovd, "--listen", "127.0.0.1:0", "--listen", "unix:" + sock,
                             "--port-file", port_file, "--log-level", "warn",
                             "--warm-programs", "none", "--state-dir",
                             os.path.join(directory, "state"), "--cache-dir",
                             os.path.join(directory, "cache")], stdin=subprocess.DEVNULL)
    for _ in range(2400):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return proc, "127.0.0.1:" + open(port_file).read().strip(), "unix:" + sock
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    proc.terminate()
    raise RuntimeError("krylovd did not start")


# raw loopback: one Python thread sends nbytes from a NumPy array with sendall, the other
# recv_into's them into a preallocated array; a one-byte answer closes each round.

def _raw_peer(listener, nbytes, rounds):
    conn, _ = listener.accept()
    buf = np.empty(nbytes, np.uint8)
    view = memoryview(buf)
    for _ in range(rounds):
        got = 0
        while got < nbytes:
            got += conn.recv_into(view[got:])
        conn.sendall(b"k")
    conn.close()


def raw_rate(family, nbytes, rounds=5):
    """GB/s of one Python-to-Python transfer of nbytes on loopback (family AF_INET or AF_UNIX),
    median of rounds."""
    tmp = None
    listener = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_UNIX:
        tmp = tempfile.mkdtemp(prefix="wire-raw-")
        address = os.path.join(tmp, "raw.sock")
    else:
        address = ("127.0.0.1", 0)
    listener.bind(address)
    listener.listen(1)
    peer = threading.Thread(target=_raw_peer, args=(listener, nbytes, rounds + 1))
    peer.start()
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.connect(listener.getsockname())
    if family == socket.AF_INET:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    data = np.random.default_rng(3).integers(0, 255, nbytes, dtype=np.uint8)
    times = []
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        sock.sendall(memoryview(data))
        sock.recv(1)
        if i:
            times.append(time.perf_counter() - t0)
    sock.close()
    peer.join()
    listener.close()
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    return nbytes / float(np.median(times)) / 1e9


def client_send_rate(krylov, method, params, family=socket.AF_INET, rounds=5):
    """GB/s of the client's own send of a request (its encoding and its sendmsg from the caller's
    arrays) into a Python peer that recv_into's it: the client's part of a put, without the
    server's reading. None for a client without those internals."""
    try:
        encode, send = krylov._rpc.encode_request, krylov._rpc._send_views
    except AttributeError:
        return None
    nbytes = sum(memoryview(c).nbytes for c in encode(1, method, params))
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    peer = threading.Thread(target=_raw_peer, args=(listener, nbytes, rounds + 1))
    peer.start()
    sock = socket.create_connection(listener.getsockname())
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    times = []
    for i in range(rounds + 1):
        t0 = time.perf_counter()
        send(sock, encode(1, method, params))
        sock.recv(1)
        if i:
            times.append(time.perf_counter() - t0)
    sock.close()
    peer.join()
    listener.close()
    return nbytes / float(np.median(times)) / 1e9


def memcpy_rate(nbytes, rounds=5):
    src = np.random.default_rng(4).integers(0, 255, nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return nbytes / float(np.median(times)) / 1e9


class Ops:
    """The four operations on one client; each returns the server's time_ms (and the wall time
    of the call itself where more than the call is done)."""

    def __init__(self, krylov, kd, A, base, x, iterations, persist):
        self.krylov, self.kd, self.A, self.base, self.x = krylov, kd, A, base, x
        self.iterations, self.persist = iterations, persist
        self.count = 0

    def _drop_last(self):
        if getattr(self, "_last", None) is not None:
            self.kd.drop(self._last)
            self._last = None

    def _variant(self):
        self._drop_last()
        self.count += 1
        B = self.A.copy()
        B.data[0] += 1e-6 * self.count * (1 + os.getpid() % 97)  # a new content id every call
        return B

    def _put(self, B, **options):
        if self.persist is not None:
            try:
                info = self.kd.put(B, persist=self.persist, **options)
                PERSIST_TAKEN[0] = True
                return info
            except TypeError:
                PERSIST_TAKEN[0] = False
        return self.kd.put(B, **options)

    def put(self, B):
        info = self._put(B, name="wire-put", reorder="none")
        ms = float(info.raw.get("time_ms", 0.0))
        self._last = info  # dropped by the next prepare: not timed
        return ms

    def like(self, B):
        info = self._put(B, like=self.base)
        ms = float(info.raw.get("time_ms", 0.0))
        self._last = info  # dropped by the next prepare: not timed
        return ms

    def values(self, B):
        """put_values: the values alone on base's pattern (nothing hashed or checked here)."""
        info = self._put_values(B.data)
        ms = float(info.raw.get("time_ms", 0.0))
        self._last = info  # dropped by the next prepare: not timed
        return ms

    def _put_values(self, data):
        if self.persist is not None:
            PERSIST_TAKEN[0] = True
            return self.kd.put_values(self.base, data, persist=self.persist)
        return self.kd.put_values(self.base, data)

    def _variant_in_place(self):
        # the step's values written into a kd.empty array before the call (the caller's own
        # work, not timed): put_values then names them where they lie
        B = self._variant()
        if not hasattr(self, "_values_pool"):
            self._values_pool = self.kd.empty(B.data.shape[0])
        self._values_pool[:] = B.data
        return self._values_pool

    def values_inplace(self, data):
        info = self._put_values(data)
        ms = float(info.raw.get("time_ms", 0.0))
        self._last = info  # dropped by the next prepare: not timed
        return ms

    def spmv(self, _):
        t0 = time.perf_counter()
        self.kd.spmv(self.base, self.x)
        wall = (time.perf_counter() - t0) * 1e3
        ms = getattr(self.kd, "last_time_ms", None)
        return float(ms if ms is not None else self._spmv_time()), wall

    def _spmv_time(self):
        # a client without last_time_ms: the same spmv through call() for the server's time
        return float(self.kd.call("spmv", {"id": self.base.id,
                                           "x": self.krylov._rpc.Bin(self.x)})["time_ms"])

    def solve(self, _):
        return float(self.kd.solve(self.base, self.x, rtol=0.0, maxiter=self.iterations).time_ms)

    def _pooled(self):
        if not hasattr(self, "_x_pool"):  # kd.empty arrays: named where they lie, written in place
            self._x_pool = self.kd.asarray(self.x)
            self._out_pool = self.kd.empty(self.x.shape[0])
        return self._x_pool, self._out_pool

    def spmv_inplace(self, _):
        x, out = self._pooled()
        self.kd.spmv(self.base, x, out=out)
        return float(self.kd.last_time_ms)

    def solve_inplace(self, _):
        x, out = self._pooled()
        return float(self.kd.solve(self.base, x, rtol=0.0, maxiter=self.iterations,
                                   out=out).time_ms)


PERSIST_TAKEN = [None]  # whether the client took --persist (over every Ops of the run)


def measure(op, prepare, calls):
    walls, server = [], []
    op(prepare())  # untimed: programs, the region's registration
    for _ in range(calls):
        arg = prepare()
        t0 = time.perf_counter()
        ms = op(arg)
        wall = (time.perf_counter() - t0) * 1e3
        if isinstance(ms, tuple):
            ms, wall = ms
        walls.append(wall)
        server.append(ms)
    return float(np.median(walls)), float(np.median(server))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--krylovd", default=None,
                    help="start this krylovd (the default: build/bin/krylovd)")
    ap.add_argument("--server", default=None, help="use this server's TCP address")
    ap.add_argument("--unix", default=None, help="with --server: its unix:PATH")
    ap.add_argument("--n", type=int, default=100, help="grid side (n^3 rows)")
    ap.add_argument("--quick", action="store_true", help="n = 40, 3 calls")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=10, help="of each solve (rtol 0)")
    ap.add_argument("--persist", default=None, help="put(persist=MODE) where the client takes it")
    ap.add_argument("--ops", default="put,like,values,spmv,solve",
                    help="put, like (put(A, like=base)), values (put_values(base, A.data)), "
                         "spmv, solve")
    ap.add_argument("--client-path", default=os.path.join(HERE, "..", "..", "client", "python"))
    a = ap.parse_args()
    if a.quick:
        a.n, a.calls = 40, 3
    sys.path.insert(0, os.path.abspath(a.client_path))
    import krylov

    A = lap3d(a.n)
    rows = A.shape[0]
    x = np.random.default_rng(1).standard_normal(rows)
    tmp = proc = None
    if a.server:
        tcp, unix = a.server, a.unix
    else:
        tmp = tempfile.mkdtemp(prefix="krylovd-wire-bench-")
        proc, tcp, unix = start(a.krylovd or "build/bin/krylovd", tmp)
    sizes = {"put": A.indptr.nbytes + A.indices.nbytes + A.data.nbytes, "like": A.data.nbytes,
             "values": A.data.nbytes,
             "spmv": 2 * x.nbytes, "solve": 2 * x.nbytes}
    try:
        paths = [("tcp", tcp, False)]
        if unix:
            paths += [("unix", unix, False), ("shm", unix, True)]
            if hasattr(krylov.Client, "empty"):
                paths.append(("shm+empty", unix, True))
        print(f"lap3d {a.n}^3: {rows} rows, {A.nnz} entries; median of {a.calls} calls; "
              f"client {os.path.abspath(a.client_path)}\n")
        print("| op | transport | MB | client ms | server ms | transport ms | transport GB/s "
              "| raw GB/s | ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        raws = {}
        for what in a.ops.split(","):
            nbytes = sizes[what]
            raws = {"tcp": raw_rate(socket.AF_INET, nbytes),
                    "unix": raw_rate(socket.AF_UNIX, nbytes), "shm": memcpy_rate(nbytes)}
            raws["shm+empty"] = raws["shm"]
            for name, address, shm in paths:
                if name == "shm+empty" and what not in ("spmv", "solve", "values"):
                    continue  # put's values from kd.empty: see the README; the copy is the put's
                with krylov.Client(address, shm=shm) as kd:
                    base = kd.put(A, name="wire-base", reorder="none")
                    ops = Ops(krylov, kd, A, base, x, a.iterations, a.persist)
                    prepare = ops._variant if what in ("put", "like", "values") else (lambda: None)
                    if what == "values" and name == "shm+empty":
                        prepare = ops._variant_in_place
                    op = getattr(ops, what + ("_inplace" if name == "shm+empty" else ""))
                    wall, server = measure(op, prepare, a.calls)
                    wire = max(wall - server, 1e-6)
                    rate = nbytes / wire / 1e6
                    label = name if not name.startswith("shm") or kd.shm else name + "(off)"
                    print(f"| {what} | {label} | {nbytes / 1e6:.1f} | {wall:.2f} | {server:.2f} | "
                          f"{wall - server:.2f} | {rate:.2f} | {raws[name]:.2f} | "
                          f"{rate / raws[name]:.2f} |", flush=True)
        if "put" in a.ops.split(",") and hasattr(krylov.client, "_matrix_params"):
            params = krylov.client._matrix_params(A, None)[0]
            params.update(name="wire-put", reorder="none")
            rate = client_send_rate(krylov, "matrix.put", params)
            raw = raw_rate(socket.AF_INET, sizes["put"])
            if rate is not None:
                print(f"| put, client's send only (to a Python peer) | tcp | "
                      f"{sizes['put'] / 1e6:.1f} | {sizes['put'] / rate / 1e6:.2f} | | | "
                      f"{rate:.2f} | {raw:.2f} | {rate / raw:.2f} |")
        print(f"\nraw loopback (last sizes): tcp {raws['tcp']:.2f} GB/s, unix {raws['unix']:.2f} "
              f"GB/s; memcpy {raws['shm']:.2f} GB/s (shm's ratio is to memcpy)")
        if a.persist is not None:
            taken = "taken" if PERSIST_TAKEN[0] else "not taken by this client"
            print(f"persist={a.persist}: {taken}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
