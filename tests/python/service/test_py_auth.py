"""Authentication and roles against a real krylovd (docs/OPERATIONS.md, "Security"): an auth
file made with `krylov token new`, UNAUTHENTICATED before `auth`, three failures closing a
connection and the per-address slow-down, FORBIDDEN outside a role (read < write < admin), the
reduced server.status, SIGHUP reloads that add and remove users under open connections (and a
bad file that leaves the old table), the Unix socket's peer credentials, protected mode (for a
--listen address and for a socket systemd passes), a
malformed auth file refused at start naming its line, and the CLI's --user / --token-file.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

import numpy as np
import scipy.sparse as sp

import krylov
from krylov import _rpc
from kd_daemon import BIN_DIR, Daemon, make_rng, token_new

KRYLOV = os.path.join(BIN_DIR, "krylov")
KRYLOVD = os.path.join(BIN_DIR, "krylovd")


def wait_for(predicate, what, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class AuthFileTest(unittest.TestCase):
    """One daemon with an auth file (read alice, write bob, admin carol; this process's uid is
    bob on the Unix socket)."""

    @classmethod
    def setUpClass(cls):
        cls.rng = make_rng()
        cls.dir = tempfile.mkdtemp(prefix="krylovd-auth-")
        cls.tokens, cls.lines = {}, {}
        for name, role in (("alice", "read"), ("bob", "write"), ("carol", "admin"),
                           ("dave", "write")):
            cls.tokens[name], cls.lines[name] = token_new(name, role)
        cls.auth_file = os.path.join(cls.dir, "auth")
        cls.socket = os.path.join(cls.dir, "krylovd.sock")
        cls.log = os.path.join(cls.dir, "log")
        cls.write_users("alice", "bob", "carol")
        cls.daemon = Daemon("--auth-file", cls.auth_file, "--listen", "unix:" + cls.socket,
                            "--log-file", cls.log, "--log-level", "info").start()
        cls.addr = cls.daemon.address

    @classmethod
    def tearDownClass(cls):
        status = cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert status == 0, f"krylovd exited with status {status}"

    @classmethod
    def write_users(cls, *names, extra=""):
        text = "# test users\n\n" + "".join(cls.lines[n] + "   # " + n + "\n" for n in names)
        if "bob" in names:
            text += f"uid:{os.getuid()} bob\n"
        tmp = cls.auth_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + extra)
        os.replace(tmp, cls.auth_file)

    def reload(self, expect):
        """SIGHUP, then wait for the log line that says how the reload went."""
        with open(self.log) as f:
            before = f.read().count(expect)
        self.daemon.proc.send_signal(signal.SIGHUP)

        def logged():
            with open(self.log) as f:
                return f.read().count(expect) > before
        wait_for(logged, f"'{expect}' in the log")

    def client(self, name, **kw):
        return krylov.Client(self.addr, user=name, token=self.tokens[name], **kw)

    def put_matrix(self):
        n = 40
        A = sp.random(n, n, density=0.1, random_state=int(self.rng.integers(1 << 31)),
                      format="csr") + sp.eye(n) * 10
        A = (A + A.T).tocsr()
        with self.client("carol") as kd:
            info = kd.put(A, name="auth-test")
            kd.share(info, "alice")  # a read user holds only what an admin gives it
            return A, info

    def test_requests_before_auth_are_unauthenticated(self):
        with krylov.Client(self.addr, user=None) as kd:
            for call in (kd.list, kd.status, lambda: kd.put(sp.eye(3, format="csr"))):
                with self.assertRaises(krylov.Unauthenticated) as cm:
                    call()
                self.assertIn("send auth {name, token} first", cm.exception.message)
            # still open: auth on the same connection works
            self.assertEqual(kd.auth("alice", self.tokens["alice"]), "read")
            self.assertIsInstance(kd.list(), list)

    def test_wrong_token_three_failures_close_the_connection(self):
        with self.client("carol") as admin:
            before = admin.call("server.status")["connection_stats"]
        conn = _rpc.Connection(self.addr, timeout=30)
        wrong = self.tokens["alice"][:-1] + ("0" if self.tokens["alice"][-1] != "0" else "1")
        for attempt, (name, token) in enumerate((("alice", wrong), ("no\nbody x=1", wrong),
                                                 ("carol", self.tokens["alice"]))):
            with self.assertRaises(krylov.Unauthenticated) as cm:
                conn.call("auth", {"name": name, "token": token})
            self.assertIn("wrong name or token", cm.exception.message)
            self.assertEqual("closing" in cm.exception.message, attempt == 2)
        with self.assertRaises(krylov.ConnectionFailed):
            conn.call("matrix.list")
        conn.close()
        with self.client("carol") as admin:
            after = admin.call("server.status")["connection_stats"]
        self.assertGreaterEqual(after["auth_failures"] - before["auth_failures"], 3)
        self.assertGreaterEqual(after["closed_auth"] - before["closed_auth"], 1)
        # the token never reaches the log; the name and the peer do
        with open(self.log) as f:
            log = f.read()
        self.assertNotIn(wrong, log)
        self.assertNotIn(self.tokens["alice"], log)
        self.assertIn("failed auth", log)
        self.assertIn("name=no?body?x?1 ", log)  # a claimed name cannot forge log lines
        self.assertNotIn("body x=1", log)

    def test_failures_from_one_address_are_slowed_down(self):
        with self.client("bob"):
            pass  # a success from this address clears its count
        conn = _rpc.Connection(self.addr, timeout=30)
        times = []
        for _ in range(3):
            t0 = time.monotonic()
            with self.assertRaises(krylov.Unauthenticated):
                conn.call("auth", {"name": "bob", "token": "guess"})
            times.append(time.monotonic() - t0)
        conn.close()
        self.assertGreaterEqual(times[1], 0.09)  # second failure: 100 ms
        self.assertGreaterEqual(times[2], 0.19)  # third: 200 ms
        # a new connection from the same address inherits the delay (fourth failure: 400 ms)
        conn = _rpc.Connection(self.addr, timeout=30)
        t0 = time.monotonic()
        with self.assertRaises(krylov.Unauthenticated):
            conn.call("auth", {"name": "bob", "token": "guess"})
        self.assertGreaterEqual(time.monotonic() - t0, 0.39)
        # pipelined guesses are not answered faster than one at a time
        t0 = time.monotonic()
        ids = [conn.send_request("auth", {"name": "bob", "token": "guess"}) for _ in range(2)]
        for msgid in ids:
            with self.assertRaises((krylov.Unauthenticated, krylov.ConnectionFailed)):
                conn.wait(msgid)
        self.assertGreaterEqual(time.monotonic() - t0, 0.8 + 1.6 - 0.05)
        conn.close()
        with self.client("bob") as kd:  # and the right token still works, and clears it
            self.assertEqual(kd.role, "write")

    def test_read_role(self):
        A, info = self.put_matrix()
        with self.client("alice") as kd:
            self.assertEqual((kd.user, kd.role), ("alice", "read"))
            x = self.rng.standard_normal(A.shape[1])
            np.testing.assert_allclose(kd.spmv(info, x), A @ x, rtol=1e-12, atol=1e-12)
            b = self.rng.standard_normal(A.shape[0])
            res = kd.solve(info, b, rtol=1e-10)
            self.assertEqual(res.status, "converged")
            self.assertLess(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b), 1e-8)
            self.assertEqual(kd.info(info).nnz, A.nnz)
            self.assertIn(info.id, [m.id for m in kd.list()])
            for what, call in (("matrix.put", lambda: kd.put(sp.eye(4, format="csr"))),
                               ("matrix.drop", lambda: kd.drop(info)),
                               ("matrix.pin", lambda: kd.pin(info)),
                               ("matrix.multiply", lambda: kd.multiply(info, info))):
                with self.assertRaises(krylov.Forbidden) as cm:
                    call()
                self.assertIn(f"{what} needs role write", cm.exception.message)
                self.assertIn("'alice' has role read", cm.exception.message)
            # a read user sees what it needs to form requests (and whether the server is warm),
            # nothing about others' use
            status = kd.call("server.status")
            self.assertEqual(set(status), {"version", "solvers", "device", "warm_up"})
            self.assertEqual(status["warm_up"]["state"], "off")  # the helper's --warm-programs none
            self.assertIn("cg", status["solvers"]["methods"])
        with self.client("carol") as kd:
            self.assertEqual(kd.info(info).id, info.id)  # nothing was dropped

    def test_write_role(self):
        with self.client("bob") as kd:
            self.assertEqual(kd.role, "write")
            A = sp.random(30, 30, density=0.2, random_state=7, format="csr") + sp.eye(30)
            info = kd.put(A, name="bob's")
            kd.pin(info, False)
            C = kd.multiply(info, info)
            self.assertEqual(C.shape, (30, 30))
            kd.drop(C)
            kd.drop(info)
            with self.assertRaises(krylov.NotFound):
                kd.info(info)
            self.assertNotIn("connection_stats", kd.call("server.status"))

    def test_admin_role(self):
        with self.client("carol") as kd:
            self.assertEqual(kd.role, "admin")
            status = kd.call("server.status")
            for key in ("connection_stats", "requests_by_method", "errors_by_code", "matrices"):
                self.assertIn(key, status)
            self.assertIn("auth", status["requests_by_method"])

    def test_sighup_adds_and_removes_users_under_open_connections(self):
        alice = self.client("alice")
        bob = self.client("bob")
        try:
            with self.assertRaises(krylov.Unauthenticated):
                self.client("dave")
            self.write_users("bob", "carol", "dave")
            self.reload("auth file reloaded")
            with self.client("dave") as dave:  # added
                self.assertEqual(dave.role, "write")
            with self.assertRaises(krylov.Unauthenticated):  # removed: no new connections
                self.client("alice")
            with self.assertRaises(krylov.Unauthenticated) as cm:  # nor requests on old ones
                alice.list()
            self.assertIn("no longer in the server's auth file", cm.exception.message)
            self.assertFalse(alice.closed)  # the connection stays; it may auth as someone else
            self.assertEqual(alice.auth("dave", self.tokens["dave"]), "write")
            self.assertIsInstance(alice.list(), list)
            self.assertIsInstance(bob.list(), list)  # untouched users keep going
        finally:
            alice.close()
            bob.close()
            self.write_users("alice", "bob", "carol")
            self.reload("auth file reloaded")
        with self.client("alice") as kd:
            self.assertEqual(kd.role, "read")

    def test_sighup_with_a_bad_file_keeps_the_old_table(self):
        self.write_users("alice", "bob", "carol", extra="mallory superuser " + "ab" * 32 + "\n")
        try:
            self.reload("auth file not reloaded")
            with open(self.log) as f:
                log = f.read()
            self.assertRegex(log, re.escape(self.auth_file) + r":\d+: role 'superuser' is not "
                             r"read, write or admin")
            with self.client("alice") as kd:
                self.assertEqual(kd.role, "read")
        finally:
            self.write_users("alice", "bob", "carol")
            self.reload("auth file reloaded")

    def test_unix_socket_peer_credentials(self):
        mode = os.stat(self.socket).st_mode & 0o777
        self.assertEqual(mode, 0o660)
        with krylov.Client("unix:" + self.socket, user=None) as kd:  # this uid is bob
            info = kd.put(sp.eye(5, format="csr") * 2.0, name="via unix")
            np.testing.assert_allclose(kd.spmv(info, np.ones(5)), 2.0 * np.ones(5))
            self.assertNotIn("connection_stats", kd.call("server.status"))  # write, not admin
            kd.drop(info)
            # a token may still name another user on the socket
            self.assertEqual(kd.auth("carol", self.tokens["carol"]), "admin")
            self.assertIn("connection_stats", kd.call("server.status"))
        # the C library (through the CLI) over the socket: no token needed for this uid's bob
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRYLOV_")}
        r = subprocess.run([KRYLOV, "--server", "unix:" + self.socket, "--json", "list"],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("matrices", json.loads(r.stdout))
        r = subprocess.run([KRYLOV, "--server", "unix:" + self.socket, "pin", "0" * 32],
                           capture_output=True, text=True, timeout=60, env=env)
        self.assertEqual(r.returncode, 1)
        self.assertIn("NOT_FOUND", r.stderr)  # bob (write) may pin: the id is what is wrong

    def test_cli_user_and_token_file(self):
        token_file = os.path.join(self.dir, "alice.token")
        with open(token_file, "w") as f:
            f.write(self.tokens["alice"] + "\n")
        env = {k: v for k, v in os.environ.items() if not k.startswith("KRYLOV_")}
        run = lambda *args, **kw: subprocess.run([KRYLOV, "--server", self.addr, *args],
                                                 capture_output=True, text=True, timeout=60,
                                                 env={**env, **kw})
        r = run("--user", "alice", "--token-file", token_file, "--json", "list")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("matrices", json.loads(r.stdout))
        r = run("--json", "list", KRYLOV_USER="bob", KRYLOV_TOKEN=self.tokens["bob"])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run("list")
        self.assertEqual(r.returncode, 1)
        self.assertIn("UNAUTHENTICATED", r.stderr)
        r = run("--user", "alice", "list")  # a user without a token is a usage error
        self.assertEqual(r.returncode, 2)
        self.assertIn("KRYLOV_TOKEN", r.stderr)
        r = run("--user", "alice", "--token-file", token_file, "drop", "0" * 32)
        self.assertEqual(r.returncode, 1)
        self.assertIn("FORBIDDEN", r.stderr)


class TokenNewTest(unittest.TestCase):
    def test_token_hashes_to_the_line_it_prints(self):
        seen = set()
        for role in ("read", "write", "admin"):
            token, line = token_new("eve", role)
            name, line_role, digest = line.split(" ")
            self.assertEqual((name, line_role), ("eve", role))
            self.assertEqual(digest, hashlib.sha256(token.encode()).hexdigest())
            self.assertRegex(token, r"^[0-9a-f]{64}$")  # 256 random bits
            seen.add(token)
        self.assertEqual(len(seen), 3)
        r = subprocess.run([KRYLOV, "token", "new", "eve", "root"], capture_output=True,
                           text=True, timeout=30)
        self.assertEqual(r.returncode, 2)
        self.assertIn("not read, write or admin", r.stderr)


class StartupTest(unittest.TestCase):
    """Daemons that must not start, and one that starts open on purpose."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="krylovd-auth-start-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_fails(self, *args):
        r = subprocess.run([KRYLOVD, "--device", os.environ.get("KD_TEST_DEVICE", "auto"),
                            *args], capture_output=True, text=True, timeout=120,
                           stdin=subprocess.DEVNULL)
        self.assertNotEqual(r.returncode, 0)
        return r.stderr

    def test_protected_mode_refuses_a_public_address_without_auth(self):
        err = self.start_fails("--listen", "0.0.0.0:0")
        self.assertIn("protected mode", err)
        self.assertIn("--auth-file", err)
        self.assertIn("--no-auth", err)

    def test_protected_mode_checks_a_socket_systemd_passes(self):
        """Under socket activation `listen` is ignored, so the passed socket is what is checked:
        one on every interface is refused without an auth file."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("0.0.0.0", 0))
        listener.listen(4)
        fd = listener.fileno()
        try:
            r = subprocess.run(
                ["/bin/sh", "-c", 'exec 3<&"$KD_FD"; LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"', "sh",
                 KRYLOVD, "--listen", "127.0.0.1:0",
                 "--device", os.environ.get("KD_TEST_DEVICE", "auto")],
                pass_fds=(fd,), env=dict(os.environ, KD_FD=str(fd)), capture_output=True,
                text=True, timeout=120, stdin=subprocess.DEVNULL)
        finally:
            listener.close()
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("protected mode: refusing to listen on the socket systemd passed", r.stderr)

    def test_no_auth_starts_open_and_auth_is_the_anonymous_admin(self):
        with Daemon("--listen", "0.0.0.0:0", "--no-auth") as d:
            with krylov.Client(d.address, user="anyone", token="anything") as kd:
                self.assertEqual((kd.user, kd.role), ("anonymous", "admin"))
                self.assertIn("connection_stats", kd.call("server.status"))
            with krylov.Client(d.address, user=None) as kd:
                self.assertIsInstance(kd.list(), list)

    def test_malformed_auth_file_names_its_line(self):
        path = os.path.join(self.dir, "auth")
        good = "a" * 64
        cases = [
            (f"alice read {good}\nbob writer {good}\n", 2, "role 'writer'"),
            (f"# c\n\nalice read {good[:-1]}\n", 3, "64 hex digits"),
            (f"alice read {good} extra\n", 1, "'extra' is not a limit"),
            (f"alice read {good} max_jobs=0\n", 1, "max_jobs needs a count above 0"),
            (f"alice read {good}\nalice admin {good}\n", 2, "listed twice"),
            (f"alice read {good}\nuid:12x alice\n", 2, "uid:UID NAME"),
            (f"alice read {good}\nuid:1000 nobody\n", 2, "'nobody'"),
            (f"al/ice read {good}\n", 1, "not a user name"),
        ]
        for text, line, why in cases:
            with open(path, "w") as f:
                f.write(text)
            err = self.start_fails("--listen", "127.0.0.1:0", "--auth-file", path)
            self.assertIn(f"{path}:{line}:", err, text)
            self.assertIn(why, err, text)
        err = self.start_fails("--listen", "127.0.0.1:0", "--auth-file",
                               os.path.join(self.dir, "missing"))
        self.assertIn("cannot read auth file", err)


if __name__ == "__main__":
    unittest.main()
