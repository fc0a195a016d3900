"""TLS end to end (issue 15): real krylovd processes on loopback with certificates made by the
`openssl` command for this run (tests/tools/make_test_certs.sh: a CA, a server certificate for IP
127.0.0.1, a client certificate, and a second CA that signed nothing of the server's).

Checked: SpMV and solve over TLS from the Python client and the CLI agree with SciPy; the
server's cipher order and TLS 1.2 both work; a wrong CA, a host name the certificate does not
name, and a plaintext server are refused cleanly by the client; a plaintext client on the TLS
port and a TLS client on the plaintext port are closed at once (no hang) with a log line naming
the peer, and the server serves the next client; with --tls-ca a client without a certificate,
or with one from another CA, is refused and one with a certificate of the CA is served; the
settings work from a config file; SIGHUP loads a new certificate for new connections (open ones
keep theirs) and keeps the old one when the new file is bad; a user's token works over TLS (and
a wrong one is still refused); bad certificate files stop krylovd at start with a message naming
the file.
"""

import hashlib
import os
import re
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import unittest
import warnings

import numpy as np
import scipy.sparse as sp
import scipy.io

import krylov
from kd_daemon import BIN_DIR, SOURCE_DIR, Daemon, make_rng

KRYLOVD = os.path.join(BIN_DIR, "krylovd")
KRYLOV = os.path.join(BIN_DIR, "krylov")

rng = None
certs = None
tls_daemon = mtls_daemon = plain_daemon = None


def cert(name):
    return os.path.join(certs, name)


def log_of(d):
    with open(d.log_path) as f:
        return f.read()


def wait_for_log(test, d, pattern):
    """The daemon logs the line a moment after closing the connection: wait for it."""
    deadline = time.monotonic() + 10
    while not re.search(pattern, log_of(d)) and time.monotonic() < deadline:
        time.sleep(0.05)
    test.assertRegex(log_of(d), pattern)


def start_logged(name, *args):
    """A daemon that logs at info level to a file the test can read."""
    path = os.path.join(certs, f"{name}.log")
    d = Daemon("--log-level", "info", "--log-file", path, *args).start()
    d.log_path = path
    return d


def setUpModule():
    global rng, certs, tls_daemon, mtls_daemon, plain_daemon
    rng = make_rng()
    certs = tempfile.mkdtemp(prefix="krylov-tls-test-")
    subprocess.run(["bash", os.path.join(SOURCE_DIR, "tests", "tools", "make_test_certs.sh"),
                    certs], check=True, capture_output=True, timeout=60)
    server_files = ("--tls-cert", cert("server.pem"), "--tls-key", cert("server.key"))
    tls_daemon = start_logged("tls", *server_files)
    mtls_daemon = start_logged("mtls", *server_files, "--tls-ca", cert("ca.pem"))
    plain_daemon = start_logged("plain")


def tearDownModule():
    statuses = [d.stop() for d in (tls_daemon, mtls_daemon, plain_daemon) if d is not None]
    shutil.rmtree(certs, ignore_errors=True)
    assert statuses == [0, 0, 0], f"krylovd exit statuses {statuses}"


def spd_matrix(n, density):
    A = sp.random(n, n, density=density, random_state=rng, format="csr")
    A = A + A.T
    return (A + sp.diags(np.asarray(abs(A).sum(axis=1)).ravel() + 1.0)).tocsr()


def tls_client(d, **kw):
    kw.setdefault("cafile", cert("ca.pem"))
    return krylov.Client(d.address, timeout=60, **kw)


class TlsRoundTrip(unittest.TestCase):
    def test_spmv_and_solve_over_tls(self):
        A = spd_matrix(400, 0.02)
        x = rng.standard_normal(400)
        b = rng.standard_normal(400)
        with tls_client(tls_daemon) as kd:
            self.assertIn(kd._conn._sock.version(), ("TLSv1.2", "TLSv1.3"))
            info = kd.put(A)
            y = kd.spmv(info, x)
            np.testing.assert_allclose(y, A @ x, rtol=1e-12, atol=1e-12)
            res = kd.solve(info, b, method="cg", rtol=1e-10)
            self.assertEqual(res.status, "converged")
            self.assertLess(np.linalg.norm(b - A @ res.x) / np.linalg.norm(b), 1e-9)

    def test_large_messages_both_ways(self):
        # ~1.7 MB up, 1.6 MB back: many TLS records, and responses over the server's 256 KiB
        # encryption chunk
        n = 200000
        A = sp.diags([np.full(n - 1, -1.0), np.full(n, 4.0), np.full(n - 1, -1.0)], [-1, 0, 1],
                     format="csr")
        x = rng.standard_normal(n)
        with tls_client(tls_daemon) as kd:
            info = kd.put(A)
            for _ in range(3):
                np.testing.assert_allclose(kd.spmv(info, x), A @ x, rtol=1e-12, atol=1e-12)

    def test_tls12_gets_the_servers_cipher_order(self):
        ctx = ssl.create_default_context(cafile=cert("ca.pem"))
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        # the client prefers AES-256; the server's order puts AES-128-GCM first
        ctx.set_ciphers("ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256")
        with krylov.Client(tls_daemon.address, tls=ctx, timeout=60) as kd:
            self.assertEqual(kd._conn._sock.version(), "TLSv1.2")
            self.assertEqual(kd._conn._sock.cipher()[0], "ECDHE-ECDSA-AES128-GCM-SHA256")
            self.assertGreaterEqual(kd.status().connections, 1)

    def test_tls11_is_refused(self):
        ctx = ssl.create_default_context(cafile=cert("ca.pem"))
        ctx.set_ciphers("DEFAULT:@SECLEVEL=0")  # so that this client does offer TLS 1.1
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            ctx.minimum_version = ssl.TLSVersion.TLSv1_1
            ctx.maximum_version = ssl.TLSVersion.TLSv1_1
        with self.assertRaises(krylov.ConnectionFailed):
            krylov.Client(tls_daemon.address, tls=ctx, timeout=30).status()
        wait_for_log(self, tls_daemon, r"peer=127\.0\.0\.1:\d+: TLS handshake failed: "
                     r"unsupported protocol")
        with tls_client(tls_daemon) as kd:
            kd.status()

    def test_cli_over_tls(self):
        A = spd_matrix(300, 0.03)
        path = os.path.join(certs, "A.mtx")
        scipy.io.mmwrite(path, A)
        env = {k: v for k, v in os.environ.items() if k not in ("KRYLOV_SERVER", "KRYLOV_TLS")}
        base = [KRYLOV, "--server", tls_daemon.address, "--json"]
        put = subprocess.run(base + ["--ca", cert("ca.pem"), "put", path], capture_output=True,
                             text=True, env=env, timeout=120)
        self.assertEqual(put.returncode, 0, put.stderr)
        with tls_client(tls_daemon) as kd:  # the matrix as the server parsed the file
            expected_id = kd.put(scipy.io.mmread(path).tocsr()).id
        self.assertIn(f'"id": "{expected_id}"', put.stdout)
        # KRYLOV_TLS=1 is --tls; the system's trust store does not know our CA
        env_tls = dict(env, KRYLOV_TLS="1")
        solve = subprocess.run(base + ["--ca", cert("ca.pem"), "solve", expected_id, "--rhs",
                                       "ones", "--rtol", "1e-10"],
                               capture_output=True, text=True, env=env_tls, timeout=120)
        self.assertEqual(solve.returncode, 0, solve.stderr)
        self.assertIn('"converged"', solve.stdout)
        untrusted = subprocess.run(base + ["status"], capture_output=True, text=True, env=env_tls,
                                   timeout=60)
        self.assertEqual(untrusted.returncode, 1)
        self.assertIn("certificate verify failed", untrusted.stderr)
        plain = subprocess.run(base + ["status"], capture_output=True, text=True, env=env,
                               timeout=60)
        self.assertEqual(plain.returncode, 1)
        self.assertIn("CONNECTION", plain.stderr)


class TlsRefusals(unittest.TestCase):
    def assert_still_serves(self, d):
        with tls_client(d) as kd:
            self.assertGreaterEqual(kd.status().connections, 1)

    def test_wrong_ca_fails_cleanly(self):
        with self.assertRaises(krylov.ConnectionFailed) as cm:
            tls_client(tls_daemon, cafile=cert("other-ca.pem"))
        self.assertIn("certificate verify failed", str(cm.exception))
        self.assert_still_serves(tls_daemon)

    def test_certificate_must_name_the_host(self):
        # the certificate is for IP 127.0.0.1 only
        with self.assertRaises(krylov.ConnectionFailed) as cm:
            krylov.Client(f"localhost:{tls_daemon.port}", cafile=cert("ca.pem"), timeout=30)
        self.assertIn("localhost", str(cm.exception))

    def test_plaintext_client_on_tls_port(self):
        start = time.monotonic()
        with self.assertRaises(krylov.ConnectionFailed):
            krylov.Client(tls_daemon.address, tls=False, timeout=30).status()
        self.assertLess(time.monotonic() - start, 10, "the server should close at once")
        self.assert_still_serves(tls_daemon)
        wait_for_log(self, tls_daemon, r"closing conn=\d+ peer=127\.0\.0\.1:\d+: TLS handshake "
                     r"failed: the first byte is 0x94.*not a TLS client")

    def test_tls_client_on_plaintext_port(self):
        start = time.monotonic()
        with self.assertRaises(krylov.ConnectionFailed):
            tls_client(plain_daemon).status()
        self.assertLess(time.monotonic() - start, 10, "the server should close at once")
        with krylov.Client(plain_daemon.address, timeout=60) as kd:
            self.assertGreaterEqual(kd.status().connections, 1)
        wait_for_log(self, plain_daemon, r"closing conn=\d+ peer=127\.0\.0\.1:\d+: looks like a "
                     r"TLS handshake on a plaintext port")

    def test_raw_client_hello_bytes_on_plaintext_port(self):
        with socket.create_connection(("127.0.0.1", plain_daemon.port), timeout=30) as s:
            s.sendall(bytes([0x16, 0x03, 0x01, 0x00, 0x05, 0x01, 0x00, 0x00, 0x01, 0x00]))
            self.assertEqual(s.recv(100), b"")  # closed without an answer

    def test_client_certificate_required(self):
        with self.assertRaises(krylov.ConnectionFailed):
            tls_client(mtls_daemon).status()  # TLS 1.3: refused after the client's Finished
        wait_for_log(self, mtls_daemon, r"TLS handshake failed: peer did not return a certificate")
        with self.assertRaises(krylov.ConnectionFailed):
            tls_client(mtls_daemon, certfile=cert("stranger.pem"),
                       keyfile=cert("stranger.key")).status()
        wait_for_log(self, mtls_daemon, r"TLS handshake failed: certificate verify failed "
                     r"\(client certificate: unable to get local issuer certificate\)")
        with tls_client(mtls_daemon, certfile=cert("client.pem"), keyfile=cert("client.key")) as kd:
            A = spd_matrix(200, 0.05)
            x = rng.standard_normal(200)
            np.testing.assert_allclose(kd.spmv(kd.put(A), x), A @ x, rtol=1e-12, atol=1e-12)


class TlsConfigAndReload(unittest.TestCase):
    def test_config_file_keys(self):
        conf = os.path.join(certs, "tls.conf")
        with open(conf, "w") as f:
            f.write(f"tls-cert = {cert('server.pem')}\ntls-key = {cert('server.key')}\n"
                    f"tls-ca = \"{cert('ca.pem')}\"\n")
        d = Daemon("--config", conf).start()
        try:
            with self.assertRaises(krylov.ConnectionFailed):
                tls_client(d).status()  # tls-ca from the file: a certificate is required
            with tls_client(d, certfile=cert("client.pem"), keyfile=cert("client.key")) as kd:
                self.assertGreaterEqual(kd.status().connections, 1)
        finally:
            self.assertEqual(d.stop(), 0)

    def test_sighup_reloads_the_certificate(self):
        live = os.path.join(certs, "reload")
        os.makedirs(live, exist_ok=True)
        for name in ("server.pem", "server.key"):
            shutil.copy(cert(name), os.path.join(live, name))
        # the same key, now certified by the other CA
        subprocess.run(["openssl", "x509", "-req", "-in", cert("server.csr"), "-CA",
                        cert("other-ca.pem"), "-CAkey", cert("other-ca.key"), "-CAcreateserial",
                        "-days", "2", "-extfile", cert("server.ext"), "-out",
                        os.path.join(live, "next.pem")], check=True, capture_output=True)
        d = start_logged("reload", "--tls-cert", os.path.join(live, "server.pem"), "--tls-key",
                         os.path.join(live, "server.key"))
        try:
            before = tls_client(d)
            self.assertGreaterEqual(before.status().connections, 1)
            os.replace(os.path.join(live, "next.pem"), os.path.join(live, "server.pem"))
            d.proc.send_signal(signal.SIGHUP)
            wait_for_log(self, d, r"SIGHUP: TLS certificate and key reloaded")
            with self.assertRaises(krylov.ConnectionFailed):
                tls_client(d)  # new connections get the new certificate
            with tls_client(d, cafile=cert("other-ca.pem")) as kd:
                kd.status()
            self.assertGreaterEqual(before.status().connections, 1)  # open ones keep theirs
            before.close()
            with open(os.path.join(live, "server.pem"), "w") as f:
                f.write("not a certificate\n")
            d.proc.send_signal(signal.SIGHUP)
            wait_for_log(self, d, r"SIGHUP: keeping the TLS certificate in use: --tls-cert \S+"
                         r"server\.pem: ")
            with tls_client(d, cafile=cert("other-ca.pem")) as kd:
                kd.status()
        finally:
            self.assertEqual(d.stop(), 0)


class TlsWithAuth(unittest.TestCase):
    def test_token_over_tls(self):
        token = secrets.token_hex(16)
        auth = os.path.join(certs, "auth")
        with open(auth, "w") as f:
            f.write(f"alice write {hashlib.sha256(token.encode()).hexdigest()}\n")
        d = Daemon("--auth-file", auth, "--tls-cert", cert("server.pem"), "--tls-key",
                   cert("server.key")).start()
        try:
            A = spd_matrix(150, 0.05)
            x = rng.standard_normal(150)
            with tls_client(d, user="alice", token=token) as kd:
                self.assertEqual(kd.role, "write")
                np.testing.assert_allclose(kd.spmv(kd.put(A), x), A @ x, rtol=1e-12, atol=1e-12)
            with self.assertRaises(krylov.Unauthenticated):
                tls_client(d, user="alice", token="0" * 32)
            with tls_client(d) as kd, self.assertRaises(krylov.Unauthenticated):
                kd.status()
        finally:
            self.assertEqual(d.stop(), 0)


class TlsStartup(unittest.TestCase):
    def start_fails(self, *args):
        p = subprocess.run([KRYLOVD, "--listen", "127.0.0.1:0", "--device", "auto", *args],
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(p.returncode, 1, p.stderr)
        return p.stderr

    def test_missing_certificate_file(self):
        missing = os.path.join(certs, "nope.pem")
        err = self.start_fails("--tls-cert", missing, "--tls-key", cert("server.key"))
        self.assertIn(f"--tls-cert {missing}: No such file", err)

    def test_file_that_is_not_a_certificate(self):
        err = self.start_fails("--tls-cert", cert("server.ext"), "--tls-key", cert("server.key"))
        self.assertRegex(err, r"--tls-cert \S+server\.ext: .*no (start line|certificate)")

    def test_key_of_another_certificate(self):
        err = self.start_fails("--tls-cert", cert("server.pem"), "--tls-key", cert("client.key"))
        self.assertIn(f"--tls-key {cert('client.key')}: key values mismatch", err)

    def test_certificate_without_key(self):
        err = self.start_fails("--tls-cert", cert("server.pem"))
        self.assertIn("both --tls-cert and --tls-key", err)


if __name__ == "__main__":
    unittest.main()
