"""The `krylov` command-line tool, run as a real process against a real krylovd on loopback:
--json output on every command is one parseable document with the right fields (errors too),
results agree with SciPy on real matrices, `list` and `status` print aligned tables, `bench`
reports consistent timings, `solve --plot` writes a PNG through gnuplot or says clearly that
gnuplot is missing (both checked by controlling PATH), and the progress line appears when asked
for, redraws in place on a terminal (a pty here), and stays out of pipes otherwise.
"""

import json
import os
import pty
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
import unittest

import numpy as np
import scipy.io
import scipy.sparse as sp

from kd_daemon import BIN_DIR, Daemon, make_rng, matrix_path

KRYLOV = os.path.join(BIN_DIR, "krylov")
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

daemon = None
rng = None
tmp = None


def setUpModule():
    global daemon, rng, tmp
    rng = make_rng()
    daemon = Daemon().start()
    tmp = tempfile.mkdtemp(prefix="krylov-cli-test-")


def tearDownModule():
    shutil.rmtree(tmp, ignore_errors=True)
    status = daemon.stop()
    assert status == 0, f"krylovd exited with status {status}"


def run(*args, env=None, server=None, timeout=300):
    """Run the CLI; returns the CompletedProcess (text)."""
    full_env = dict(os.environ)
    full_env.pop("KRYLOV_SERVER", None)
    if env:
        full_env.update(env)
    argv = [KRYLOV, "--server", server or daemon.address] + [str(a) for a in args]
    return subprocess.run(argv, capture_output=True, text=True, env=full_env, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def run_json(test, *args, expect=0, **kw):
    p = run("--json", *args, **kw)
    test.assertEqual(p.returncode, expect, f"{args}: {p.stderr}")
    try:
        doc = json.loads(p.stdout)  # exactly one document: json.loads refuses trailing data
    except json.JSONDecodeError as e:
        test.fail(f"{args}: stdout is not one JSON document ({e}): {p.stdout!r:.500}")
    return doc, p


def write_vector(name, v):
    path = os.path.join(tmp, name)
    scipy.io.mmwrite(path, np.asarray(v).reshape(-1, 1), precision=17)
    return path


def read_vector(path):
    return np.asarray(scipy.io.mmread(path)).reshape(-1)


def load(name):
    return sp.csr_matrix(scipy.io.mmread(matrix_path(name)))


def laplacian_file(g):
    """A 2-D Laplacian (g*g rows) as a Matrix Market file: a solve that takes a while on PoCL."""
    path = os.path.join(tmp, f"lap{g}.mtx")
    if not os.path.exists(path):
        T = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(g, g))
        I = sp.eye(g)
        scipy.io.mmwrite(path, (sp.kron(I, T) + sp.kron(T, I)).tocoo())
    return path


INFO_FIELDS = {"id", "name", "rows", "cols", "nnz", "dtype", "format", "device_bytes", "pinned",
               "resident", "uses", "stats", "candidates"}


class TestJson(unittest.TestCase):
    def put(self, name, *extra):
        doc, p = run_json(self, "put", matrix_path(name), *extra)
        return doc

    def test_put_and_info(self):
        A = load("494_bus.mtx")
        name = "bus-%d" % rng.integers(1 << 30)
        doc = self.put("494_bus.mtx", "--name", name)
        self.assertTrue(INFO_FIELDS <= set(doc), set(doc))
        self.assertRegex(doc["id"], r"^[0-9a-f]{32}$")
        self.assertEqual((doc["rows"], doc["cols"], doc["nnz"]), (494, 494, A.nnz))
        self.assertEqual(doc["file"], matrix_path("494_bus.mtx"))
        self.assertIsInstance(doc["created"], bool)
        again = self.put("494_bus.mtx")
        self.assertEqual(again["id"], doc["id"])
        self.assertIs(again["created"], False)
        # without --json: the id alone on stdout, for $(krylov put ...)
        p = run("put", matrix_path("494_bus.mtx"))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, doc["id"] + "\n")
        self.assertIn("already on the server", p.stderr)

        info, _ = run_json(self, "info", doc["id"])
        self.assertTrue(INFO_FIELDS <= set(info))
        self.assertEqual(info["stats"]["max_row"], int(np.diff(A.indptr).max()))
        self.assertAlmostEqual(info["stats"]["mean_row"], A.nnz / 494, places=9)
        self.assertIsInstance(info["stats"]["mean_row"], float)
        self.assertGreaterEqual(len(info["candidates"]), 1)
        self.assertIn("format", info["candidates"][0])
        # --json may also come after the command
        p = run("info", doc["id"], "--json")
        self.assertEqual(json.loads(p.stdout)["id"], doc["id"])
        human = run("info", doc["id"])
        self.assertIn("494 x 494, 1666 nonzeros", human.stdout)

    def test_put_persist(self):
        # --persist reaches the server: none is never durable; a bad choice is the server's
        # BAD_REQUEST naming the choices
        import scipy.io

        A = sp.random(40, 40, density=0.1, random_state=int(rng.integers(1 << 30)), format="coo")
        with tempfile.NamedTemporaryFile(suffix=".mtx", delete=False) as f:
            path = f.name
        scipy.io.mmwrite(path, A)  # content no other test put: nothing held to change nothing
        try:
            doc, _ = run_json(self, "put", path, "--persist", "none")
        finally:
            os.unlink(path)
        import krylov  # the CLI's JSON leaves these out: the server's own answer

        with krylov.Client(daemon.address) as kd:
            raw = kd.info(doc["id"]).raw
        self.assertIs(raw["durable"], False)
        self.assertEqual(raw["persisted"], "none")
        bad, _ = run_json(self, "put", matrix_path("494_bus.mtx"), "--persist", "later", expect=1)
        self.assertEqual(bad["error"]["code"], "BAD_REQUEST")
        self.assertIn("sync", bad["error"]["message"])

    def test_put_reorder(self):
        # dwt_878 under RCM: the ordering and the bandwidths show in JSON and in the table; a bad
        # name is a usage error from the server, not a crash
        doc = self.put("dwt_878.mtx", "--reorder", "rcm", "--name", "dwt-rcm")
        self.assertEqual(doc["reorder"], "rcm")
        self.assertLess(doc["bandwidth"]["after"], doc["bandwidth"]["before"])
        human = run("info", doc["id"])
        self.assertRegex(human.stdout, r"reorder +rcm \(bandwidth \d+ -> \d+\)")
        bad, p = run_json(self, "put", matrix_path("494_bus.mtx"), "--reorder", "sideways",
                          expect=1)
        self.assertEqual(bad["error"]["code"], "BAD_REQUEST")
        self.assertIn("rcm", bad["error"]["message"])

    def test_spmv_against_scipy(self):
        for name in ("bayer10.mtx", "Groebner_id2003_aug.mtx"):
            A = load(name)
            mid = self.put(name)["id"]
            x = rng.uniform(-1, 1, A.shape[1])
            xp = write_vector("x.mtx", x)
            yp = os.path.join(tmp, "y.mtx")
            doc, _ = run_json(self, "spmv", mid, xp, "-o", yp)
            self.assertEqual(set(doc), {"id", "rows", "cols", "x", "norm", "time_ms", "output"})
            self.assertEqual(doc["output"], yp)
            y = read_vector(yp)
            ref = A @ x
            self.assertLessEqual(np.max(np.abs(y - ref)) / np.max(np.abs(ref)), 1e-12, name)
            self.assertAlmostEqual(doc["norm"] / np.linalg.norm(ref), 1.0, delta=1e-10)
            self.assertGreaterEqual(doc["time_ms"], 0.0)
        # a vector of the wrong length is refused before anything is sent
        bad, p = run_json(self, "spmv", mid, write_vector("short.mtx", x[:-1]), expect=1)
        self.assertEqual(bad["error"]["command"], "spmv")
        self.assertIn("the matrix needs", bad["error"]["message"])

    def test_solve_general(self):
        # info says whether the matrix is symmetric; cg on a nonsymmetric one is a clear
        # BAD_REQUEST (exit 1) naming the methods to use; auto and restart reach the server
        gen = self.put("adder_dcop_05.mtx")["id"]
        bus = self.put("494_bus.mtx")["id"]
        self.assertIs(run_json(self, "info", gen)[0]["symmetric"], False)
        self.assertIs(run_json(self, "info", bus)[0]["symmetric"], True)
        self.assertIn("symmetric    no", run("info", gen).stdout)
        bad, _ = run_json(self, "solve", gen, "--method", "cg", expect=1)
        self.assertEqual(bad["error"]["code"], "BAD_REQUEST")
        self.assertIn("method cg needs a symmetric matrix; this one is not (a[",
                      bad["error"]["message"])
        doc, _ = run_json(self, "solve", bus, "--method", "auto", "--restart", "40",
                          "--preconditioner", "jacobi", "--rtol", "1e-8")
        self.assertEqual((doc["method"], doc["requested_method"], doc["preconditioner"]),
                         ("cg", "auto", "jacobi"))
        self.assertEqual((doc["restart"], doc["status"]), (40, "converged"))
        human = run("solve", bus, "--method", "auto")
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertRegex(human.stdout, r"(?m)^method +cg \(auto\)$")
        bad, _ = run_json(self, "solve", bus, "--restart", "201", expect=1)
        self.assertIn("restart = 201", bad["error"]["message"])
        bad, _ = run_json(self, "solve", bus, "--restart", "0", expect=2)
        self.assertEqual(bad["error"]["code"], "USAGE")
        self.assertIn("--method NAME", run("--help").stdout + run("--help").stderr)

    def test_solve(self):
        A = load("494_bus.mtx")
        mid = self.put("494_bus.mtx")["id"]
        b = rng.uniform(-1, 1, 494)
        xp = os.path.join(tmp, "x.mtx")
        doc, _ = run_json(self, "solve", mid, "--rhs", write_vector("b.mtx", b), "--rtol", "1e-9",
                          "--maxiter", "20000", "--history", "-o", xp)
        for key in ("id", "method", "status", "converged", "iterations", "residual_norm",
                    "relative_residual", "time_ms", "message", "history", "output", "plot"):
            self.assertIn(key, doc)
        self.assertEqual(doc["status"], "converged")
        self.assertIs(doc["converged"], True)
        self.assertEqual(doc["method"], "cg")
        self.assertIsNone(doc["plot"])
        x = read_vector(xp)
        rel = np.linalg.norm(b - A @ x) / np.linalg.norm(b)
        self.assertLessEqual(rel, 1e-9)
        self.assertLessEqual(abs(doc["relative_residual"] - rel), 0.02 * rel + 1e-12)
        self.assertGreaterEqual(len(doc["history"]), 2)
        self.assertLess(doc["history"][-1], doc["history"][0])
        # not converged: exit status 3, still one document
        k = int(rng.integers(1, 6))
        doc, _ = run_json(self, "solve", mid, "--maxiter", k, "--check-every", 1, expect=3)
        self.assertEqual((doc["status"], doc["iterations"], doc["maxiter"]),
                         ("max_iterations", k, k))
        self.assertIs(doc["converged"], False)

    def test_multiply(self):
        # C = A B on the server, checked through spmv against SciPy; the id alone on stdout
        A = load("Franz6_id1959_aug.mtx")  # 10592 x 3016
        a = self.put("Franz6_id1959_aug.mtx")["id"]
        doc, _ = run_json(self, "multiply", a, a, "--transpose-a", "--name", "FtF")
        self.assertTrue(INFO_FIELDS <= set(doc), set(doc))
        self.assertEqual((doc["rows"], doc["cols"], doc["name"]), (3016, 3016, "FtF"))
        self.assertEqual((doc["a"], doc["b"], doc["transpose_a"]), (a, a, True))
        P = abs(A).T @ abs(A)  # the symbolic product: no cancellation
        self.assertEqual(doc["nnz"], P.nnz)
        self.assertEqual(doc["spgemm"]["nnz"], P.nnz)
        self.assertEqual(doc["spgemm"]["products"], int(np.diff(A.indptr).astype(np.int64) @
                                                        np.diff(A.indptr)))
        self.assertGreaterEqual(doc["spgemm"]["time_ms"], 0.0)
        x = rng.uniform(-1, 1, 3016)
        yp = os.path.join(tmp, "cx.mtx")
        run_json(self, "spmv", doc["id"], write_vector("cx_in.mtx", x), "-o", yp)
        ref = A.T @ (A @ x)
        self.assertLessEqual(np.max(np.abs(read_vector(yp) - ref)) / np.max(np.abs(ref)), 1e-12)
        p = run("multiply", a, a, "--transpose-a")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, doc["id"] + "\n")
        self.assertIn("3016 x 3016", p.stderr)
        self.assertIn("already on the server", p.stderr)
        human = run("info", doc["id"])
        self.assertIn(f"3016 x 3016, {P.nnz} nonzeros", human.stdout)
        # shapes that do not chain: a server error, exit 1, one JSON document naming both
        bad, _ = run_json(self, "multiply", a, a, expect=1)
        self.assertEqual((bad["error"]["command"], bad["error"]["code"]),
                         ("multiply", "BAD_REQUEST"))
        self.assertIn("A (10592 x 3016) by B (10592 x 3016)", bad["error"]["message"])
        # usage errors need no server
        bad, _ = run_json(self, "multiply", a, expect=2, server="127.0.0.1:1")
        self.assertEqual(bad["error"]["code"], "USAGE")
        bad, _ = run_json(self, "multiply", a, a, "--transpose", expect=2, server="127.0.0.1:1")
        self.assertIn("--transpose", bad["error"]["message"])

    def test_list_status_pin_drop(self):
        A = sp.random(40, 40, density=0.2, random_state=int(rng.integers(1 << 31)))
        path = os.path.join(tmp, "rand.mtx")
        scipy.io.mmwrite(path, A)
        mid = run_json(self, "put", path, "--name", "scratch")[0]["id"]
        listed, _ = run_json(self, "list")
        self.assertEqual(set(listed), {"matrices"})
        mine = [m for m in listed["matrices"] if m["id"] == mid]
        self.assertEqual(len(mine), 1)
        self.assertTrue(INFO_FIELDS <= set(mine[0]))
        self.assertEqual(mine[0]["nnz"], A.nnz)

        st, _ = run_json(self, "status")
        for key in ("version", "device", "matrices", "device_bytes_used", "uptime_s", "requests",
                    "errors", "connections", "queue_depth", "requests_by_method", "server"):
            self.assertIn(key, st)
        self.assertEqual(st["matrices"], len(listed["matrices"]))
        self.assertEqual(st["server"], daemon.address)
        for key in ("name", "type", "platform", "global_mem_bytes", "compute_units", "fp64"):
            self.assertIn(key, st["device"])
        self.assertGreaterEqual(st["requests_by_method"]["matrix.list"], 1)

        pinned, _ = run_json(self, "pin", mid)
        self.assertIs(pinned["pinned"], True)
        unpinned, _ = run_json(self, "pin", mid, "--off")
        self.assertIs(unpinned["pinned"], False)
        dropped, _ = run_json(self, "drop", mid)
        self.assertEqual(dropped, {"id": mid, "dropped": True})
        gone, p = run_json(self, "info", mid, expect=1)
        self.assertEqual(gone["error"]["code"], "NOT_FOUND")
        self.assertIn(mid, gone["error"]["message"])
        self.assertIn("NOT_FOUND", p.stderr)

    def test_strings_are_escaped(self):
        # a name with JSON's special characters, non-ASCII text and a byte that is not UTF-8
        tag = "%d" % rng.integers(1 << 30)
        name = 'q"uote \\ back\nnew\tline \u00e9\u2713 ' + tag
        A = sp.random(30, 30, density=0.3, random_state=int(rng.integers(1 << 31)))
        path = os.path.join(tmp, "named.mtx")
        scipy.io.mmwrite(path, A)
        doc, _ = run_json(self, "put", path, "--name", name)
        self.assertEqual(doc["name"], name)
        self.assertEqual(run_json(self, "info", doc["id"])[0]["name"], name)
        p = subprocess.run([KRYLOV, "--server", daemon.address, "--json", "put", path.encode(),
                            "--name", b"bad\xffbyte", "--dtype", "float32"],
                           capture_output=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout.decode("utf-8"))["name"], "bad\ufffdbyte")

    def test_errors_are_json_too(self):
        doc, _ = run_json(self, "info", "not-an-id", expect=1)
        self.assertEqual(doc["error"]["code"], "BAD_REQUEST")
        doc, _ = run_json(self, "solve", "0" * 32, "--rtol", "abc", expect=2)
        self.assertEqual(doc["error"]["code"], "USAGE")
        self.assertIn("--rtol", doc["error"]["message"])
        doc, _ = run_json(self, "frobnicate", expect=2)
        self.assertIn("frobnicate", doc["error"]["message"])
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        doc, _ = run_json(self, "status", server=f"127.0.0.1:{port}", expect=1)
        self.assertEqual(doc["error"]["code"], "CONNECTION")
        # arguments are checked before connecting: a usage error needs no server
        doc, _ = run_json(self, "bench", "0" * 32, "--runs", "0", server=f"127.0.0.1:{port}",
                          expect=2)
        self.assertEqual(doc["error"]["code"], "USAGE")
        doc, _ = run_json(self, "put", matrix_path("bad/bad_header.mtx"), expect=1)
        self.assertEqual(doc["error"]["code"], "BAD_REQUEST")
        # a file that is not there is this side's error, said plainly, with no server needed
        missing = os.path.join(tempfile.gettempdir(), f"kd-no-such-{os.getpid()}.mtx")
        p = run("put", missing, server=f"127.0.0.1:{port}")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stderr.strip(),
                         f"krylov put: cannot open '{missing}': No such file or directory")
        doc, _ = run_json(self, "put", missing, server=f"127.0.0.1:{port}", expect=1)
        self.assertEqual(doc["error"]["code"], "FILE")

    def test_bench(self):
        A = load("ani4.mtx")
        mid = self.put("ani4.mtx")["id"]
        runs = int(rng.integers(5, 15))
        doc, _ = run_json(self, "bench", mid, "--runs", runs, "--warmup", 1)
        self.assertEqual((doc["runs"], doc["warmup"], doc["nnz"]), (runs, 1, A.nnz))
        for key in ("server_ms", "round_trip_ms"):
            t = doc[key]
            self.assertLessEqual(t["min"], t["median"])
            self.assertLessEqual(t["median"], t["max"])
            self.assertLessEqual(t["min"], t["mean"])
            self.assertLessEqual(t["mean"], t["max"])
            self.assertGreater(t["min"], 0.0)
        # the server's time is part of the round trip
        self.assertLessEqual(doc["server_ms"]["min"], doc["round_trip_ms"]["max"])
        g = doc["gflops"]
        self.assertAlmostEqual(g["server_median"],
                               2 * A.nnz / (doc["server_ms"]["median"] * 1e6), delta=1e-9)
        self.assertAlmostEqual(g["server_best"], 2 * A.nnz / (doc["server_ms"]["min"] * 1e6),
                               delta=1e-9)
        self.assertGreaterEqual(g["server_best"], g["server_median"])
        # every run was an spmv on the server
        before = run_json(self, "status")[0]["requests_by_method"]["spmv"]
        run_json(self, "bench", mid, "--runs", runs, "--warmup", 2)
        after = run_json(self, "status")[0]["requests_by_method"]["spmv"]
        self.assertEqual(after - before, runs + 2)
        human = run("bench", mid, "--runs", 3)
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn("GFLOP/s", human.stdout)
        self.assertRegex(human.stdout, r"(?m)^server\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+$")


class TestDefaultServer(unittest.TestCase):
    """Without --server or $KRYLOV_SERVER the CLI tries the local service's Unix socket
    ($KRYLOV_SOCKET here, /run/krylovd/krylovd.sock by default) and falls back to
    127.0.0.1:7373 when it is absent, not a socket, or nobody answers on it."""

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="krylov-cli-default-")
        cls.path = os.path.join(cls.dir, "krylovd.sock")
        cls.daemon = Daemon("--listen", "unix:" + cls.path).start()

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def status(self, env):
        full_env = dict(os.environ)
        full_env.pop("KRYLOV_SERVER", None)
        full_env.pop("KRYLOV_SOCKET", None)
        full_env.update(env)
        p = subprocess.run([KRYLOV, "--json", "status"], capture_output=True, text=True,
                           env=full_env, timeout=120, stdin=subprocess.DEVNULL)
        return p, json.loads(p.stdout)

    def assert_went_to_tcp_default(self, p, doc):
        # whatever listens on 127.0.0.1:7373 on this machine (maybe nothing): the address tells
        if p.returncode == 0:
            self.assertEqual(doc["server"], "127.0.0.1:7373")
        else:
            self.assertIn("127.0.0.1:7373", doc["error"]["message"])

    def test_unix_socket_first(self):
        p, doc = self.status({"KRYLOV_SOCKET": self.path})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["server"], "unix:" + self.path)

    def test_server_env_wins(self):
        p, doc = self.status({"KRYLOV_SOCKET": self.path, "KRYLOV_SERVER": self.daemon.address})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(doc["server"], self.daemon.address)

    def test_no_socket_then_tcp(self):
        self.assert_went_to_tcp_default(
            *self.status({"KRYLOV_SOCKET": os.path.join(self.dir, "absent.sock")}))

    def test_stale_socket_then_tcp(self):
        stale = os.path.join(self.dir, "stale.sock")
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(stale)  # bound, never listening: connect() is refused
        self.addCleanup(s.close)
        self.assert_went_to_tcp_default(*self.status({"KRYLOV_SOCKET": stale}))
        regular = os.path.join(self.dir, "regular")
        open(regular, "w").close()
        self.assert_went_to_tcp_default(*self.status({"KRYLOV_SOCKET": regular}))


class TestTables(unittest.TestCase):
    def test_list_table_is_aligned(self):
        names = ["alpha", "b-%d" % rng.integers(1000), "named matrix"]
        ids = []
        for name, f in zip(names, ("can___24.mtx", "watt_2.mtx", "arrow.mtx")):
            p = run("put", matrix_path(f), "--name", name)
            self.assertEqual(p.returncode, 0, p.stderr)
            ids.append(p.stdout.strip())
        # a name with a tab and a byte that is not UTF-8: shown as "tab here?", still aligned
        A = sp.random(25, 25, density=0.3, random_state=int(rng.integers(1 << 31)))
        path = os.path.join(tmp, "oddname.mtx")
        scipy.io.mmwrite(path, A)
        odd = subprocess.run([KRYLOV, "--server", daemon.address, "put", path.encode(), "--name",
                              b"tab\there\xfe"], capture_output=True, timeout=300)
        self.assertEqual(odd.returncode, 0, odd.stderr)
        ids.append(odd.stdout.decode().strip())
        names.append("tab here?")
        p = run("list")  # text=True: stdout must decode as UTF-8
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.rstrip("\n").split("\n")
        header, rule = lines[0], lines[1]
        self.assertEqual(header.split()[:3], ["ID", "NAME", "ROWS"])
        self.assertTrue(set(rule) <= {"-", " "})
        table = [l for l in lines[2:] if re.match(r"^[0-9a-f]{32} ", l)]
        self.assertEqual(len(table), len(lines) - 3)  # rows, then one summary line
        # every column lines up: rows as long as the rule, and the rule's gaps are gaps in each row
        gaps = [i for i, ch in enumerate(rule) if ch == " "]
        for line in [header] + table:
            self.assertEqual(len(line), len(rule), line)
            self.assertTrue(all(line[i] == " " for i in gaps), line)
        for mid, name in zip(ids, names):
            row = [l for l in table if l.startswith(mid)]
            self.assertEqual(len(row), 1)
            self.assertIn(name, row[0])
        self.assertRegex(lines[-1], r"^\d+ matri(x|ces), [0-9.]+ MiB on the device$")

    def test_status_table(self):
        p = run("status")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout
        for key in ("server", "device", "platform", "memory", "matrices", "clients", "requests",
                    "programs"):
            self.assertRegex(out, rf"(?m)^{key}\s+\S")
        # the shared daemon builds on first use (--warm-programs none): nothing to wait for
        self.assertRegex(out, r"(?m)^programs\s+built on first use")
        p = run("status", "--wait-warm=5")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(run("--json", "status").stdout)["warm_up"]["state"], "off")
        self.assertIn(daemon.address, out)
        st = json.loads(run("--json", "status").stdout)
        # the per-method table agrees with the JSON (spmv does not move between the two calls)
        m = re.search(r"(?m)^spmv\s+(\d+)$", out)
        self.assertIsNotNone(m, out)
        self.assertEqual(int(m.group(1)), st["requests_by_method"]["spmv"])
        self.assertRegex(out, r"(?m)^METHOD\s+REQUESTS$")


class TestPlot(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        p = run("put", matrix_path("494_bus.mtx"))
        cls.id = p.stdout.strip()

    def test_png_with_gnuplot(self):
        gnuplot = shutil.which("gnuplot")
        if gnuplot is None:
            self.skipTest("gnuplot is not installed (deploy/install-deps.sh installs it)")
        png = os.path.join(tmp, "conv %d.png" % rng.integers(1 << 30))  # a space in the name
        doc, p = run_json(self, "solve", self.id, "--rtol", "1e-8", "--plot", png,
                          env={"PATH": os.path.dirname(gnuplot) + ":/usr/bin:/bin"})
        self.assertEqual(doc["plot"], png)
        self.assertNotIn("plot_error", doc)
        self.assertEqual(doc["check_every"], 1)  # one point per iteration
        self.assertGreaterEqual(len(doc["history"]), doc["iterations"])
        with open(png, "rb") as f:
            data = f.read()
        self.assertEqual(data[:8], PNG_SIGNATURE)
        self.assertGreater(len(data), 2000)
        # IHDR: the picture's width and height
        self.assertEqual(data[12:16], b"IHDR")
        width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        self.assertEqual((width, height), (900, 560))
        self.assertEqual([f for f in os.listdir(tmp) if ".tmp-" in f], [])
        human = run("solve", self.id, "--plot", png + "2.png")
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn("plot", human.stdout)

    def test_clear_message_without_gnuplot(self):
        empty = tempfile.mkdtemp(dir=tmp)
        png = os.path.join(tmp, "never.png")
        p = run("solve", self.id, "--plot", png, env={"PATH": empty})
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("--plot needs gnuplot, which is not on PATH", p.stderr)
        self.assertIn("apt-get install gnuplot", p.stderr)
        self.assertIn("status             converged", p.stdout)  # the solve itself still ran
        self.assertFalse(os.path.exists(png))
        doc, _ = run_json(self, "solve", self.id, "--plot", png, env={"PATH": empty}, expect=4)
        self.assertIsNone(doc["plot"])
        self.assertIn("gnuplot", doc["plot_error"])
        self.assertEqual(doc["status"], "converged")

    def test_failing_gnuplot_leaves_no_file(self):
        fake_dir = tempfile.mkdtemp(dir=tmp)
        fake = os.path.join(fake_dir, "gnuplot")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\ncat > /dev/null\necho 'fake gnuplot: no' >&2\nexit 3\n")
        os.chmod(fake, stat.S_IRWXU)
        png = os.path.join(tmp, "broken.png")
        p = run("solve", self.id, "--plot", png, env={"PATH": fake_dir + ":/usr/bin:/bin"})
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("failed with status 3", p.stderr)
        self.assertFalse(os.path.exists(png))
        self.assertEqual([f for f in os.listdir(tmp) if ".tmp-" in f], [])


class TestProgress(unittest.TestCase):
    # "-> target" is left out at rtol 0, as here
    BAR = re.compile(r"sd  \[[#.]{20}\]\s+\d+%  it \d+  \|\|r\|\| \S+( -> \S+)?  ")

    @classmethod
    def setUpClass(cls):
        cls.id = run("put", laplacian_file(150)).stdout.strip()
        # Steepest descent to rtol 0 ends at max_iterations; maxiter is set from this device's
        # own speed so that a solve takes about 1.2 s everywhere (3000 iterations on PoCL, tens
        # of thousands on a GPU): long enough for progress lines, wherever it runs.
        doc = json.loads(run("--json", *cls.args(300)).stdout)
        per_ms = float(doc["time_ms"]) / max(1, int(doc["iterations"]))
        cls.maxiter = int(min(2_000_000, max(3000, 1200.0 / max(per_ms, 1e-4))))

    @classmethod
    def args(cls, maxiter):
        return ["solve", cls.id, "--method", "sd", "--rtol", "0", "--maxiter", maxiter,
                "--rhs", "random"]

    def solve_args(self, maxiter=None):
        return self.args(maxiter or self.maxiter)

    def test_forced_progress_in_a_pipe(self):
        p = run("--progress", *self.solve_args())
        self.assertEqual(p.returncode, 3, p.stderr)  # max_iterations
        lines = [l for l in p.stderr.split("\n") if self.BAR.search(l)]
        self.assertGreaterEqual(len(lines), 2, p.stderr)
        self.assertNotIn("\r", p.stderr)  # not a terminal: whole lines, no redrawing
        its = [int(re.search(r"it (\d+)", l).group(1)) for l in lines]
        self.assertEqual(its, sorted(its))
        self.assertLessEqual(its[-1], self.maxiter)
        self.assertTrue(any("it/s" in l for l in lines))

    def test_no_progress_in_a_pipe_by_default(self):
        for extra in ([], ["--no-progress"]):
            p = run(*extra, *self.solve_args())
            self.assertEqual(p.returncode, 3, p.stderr)
            self.assertNotRegex(p.stderr, self.BAR)
            self.assertEqual(p.stderr, "")

    def test_terminal_redraws_in_place(self):
        master, slave = pty.openpty()
        chunks = []

        def drain():
            while True:
                try:
                    data = os.read(master, 4096)
                except OSError:
                    return
                if not data:
                    return
                chunks.append(data)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        env = dict(os.environ, TERM="xterm")
        env.pop("KRYLOV_SERVER", None)
        t0 = time.monotonic()
        # long enough for the line to appear (after 0.5 s) and be redrawn: about 5 s
        args = [str(a) for a in self.solve_args(4 * self.maxiter)]
        p = subprocess.run([KRYLOV, "--server", daemon.address] + args,
                           stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL,
                           env=env, timeout=300)
        elapsed = time.monotonic() - t0
        os.close(slave)
        reader.join(timeout=10)
        os.close(master)
        err = b"".join(chunks).decode()
        self.assertEqual(p.returncode, 3)
        self.assertIn(b"max_iterations", p.stdout)
        self.assertGreater(elapsed, 1.0)  # maxiter was set for 1.2 s a solve (setUpClass)
        self.assertRegex(err, r"\r" + self.BAR.pattern)
        self.assertIn("\033[K", err)
        self.assertTrue(err.endswith("\r\033[K"), repr(err[-40:]))  # erased at the end
        self.assertNotIn("\n", err)

    def test_upload_progress(self):
        p = run("--progress", "put", matrix_path("Groebner_id2003_aug.mtx"))
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [l for l in p.stderr.split("\n") if l.startswith("upload")]
        self.assertGreaterEqual(len(lines), 2, p.stderr)  # 2.6 MB: sent in 1 MiB steps
        self.assertRegex(lines[-1], r"\[#{20}\] 100%  2\.\d / 2\.\d MiB")
        self.assertIn("waiting for the server", lines[-1])
        fractions = [int(re.search(r"(\d+)%", l).group(1)) for l in lines]
        self.assertEqual(fractions, sorted(fractions))


if __name__ == "__main__":
    unittest.main()
