"""The examples in docs/ run against a real krylovd, so they cannot rot: the SciPy session
(docs/examples/scipy_session.md, whose code blocks must be exactly docs/examples/scipy_session.py)
and the C program docs/examples/c_client.c (built by CMake as example_c_client). Both check
their own answers and exit non-zero when one is wrong; here we also check what the server saw.
"""

import os
import re
import socket
import subprocess
import sys
import unittest

import krylov
from kd_daemon import BIN_DIR, SOURCE_DIR, Daemon

EXAMPLES = os.path.join(SOURCE_DIR, "docs", "examples")

daemon = None


def setUpModule():
    global daemon
    daemon = Daemon().start()


def tearDownModule():
    status = daemon.stop()
    assert status == 0, f"krylovd exited with status {status}"


def by_method():
    with krylov.Client(daemon.address) as kd:
        return kd.status().requests_by_method


class TestScipySession(unittest.TestCase):
    def test_page_and_script_are_the_same_code(self):
        with open(os.path.join(EXAMPLES, "scipy_session.md")) as f:
            md = f.read()
        with open(os.path.join(EXAMPLES, "scipy_session.py")) as f:
            script = f.read()
        blocks = re.findall(r"^```python\n(.*?)^```$", md, flags=re.S | re.M)
        self.assertGreaterEqual(len(blocks), 8)
        self.assertEqual("\n".join(blocks), script,
                         "docs/examples/scipy_session.py must be the page's python blocks "
                         "joined by blank lines")

    def test_script_runs(self):
        before = by_method()
        env = dict(os.environ, KRYLOV_SERVER=daemon.address,
                   PYTHONPATH=os.path.join(SOURCE_DIR, "client", "python"))
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "scipy_session.py")],
                           capture_output=True, text=True, timeout=600, env=env,
                           cwd=EXAMPLES)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(p.stdout.rstrip().endswith("done"), p.stdout)
        self.assertRegex(p.stdout, r"stopped: |finished before we stopped it")
        self.assertIn("BAD_REQUEST - x has 5 entries", p.stdout)
        after = by_method()
        self.assertEqual(after["solve"] - before["solve"], 4)  # one, a block, warm, stopped
        self.assertGreater(after["spmv"] - before["spmv"], 10)  # SciPy's cg and eigsh products
        self.assertEqual(after["matrix.drop"] - before["matrix.drop"], 1)
        with krylov.Client(daemon.address) as kd:
            self.assertNotIn("poisson-100", [m.name for m in kd.list()])


class TestHeatEquation(unittest.TestCase):
    def test_script_runs(self):
        """docs/examples/heat_equation.py: new values every step (put like), the previous step's
        preconditioner reused on odd steps, the result against SciPy's own steps."""
        env = dict(os.environ, KRYLOV_SERVER=daemon.address,
                   PYTHONPATH=os.path.join(SOURCE_DIR, "client", "python"))
        p = subprocess.run([sys.executable, os.path.join(EXAMPLES, "heat_equation.py"), "24", "4"],
                           capture_output=True, text=True, timeout=600, env=env, cwd=EXAMPLES)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(p.stdout.rstrip().endswith("done"), p.stdout)
        self.assertEqual(p.stdout.count("preconditioner reused"), 2, p.stdout)
        with krylov.Client(daemon.address) as kd:
            self.assertFalse([m for m in kd.list() if m.name.startswith("heat step")])


class TestCClient(unittest.TestCase):
    EXE = os.path.join(BIN_DIR, "example_c_client")

    def test_runs_against_the_server(self):
        before = by_method()
        p = subprocess.run([self.EXE, daemon.address], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertTrue(p.stdout.rstrip().endswith("example done"), p.stdout)
        self.assertNotIn("FAIL", p.stdout)
        self.assertRegex(p.stdout, r"solve: converged after \d+ iterations")
        self.assertRegex(p.stdout, r"progress: rhs 0, iteration 0,")
        after = by_method()
        self.assertEqual(after["solve"] - before["solve"], 2)
        self.assertEqual(after["spmv"] - before["spmv"], 2)  # one good, one refused
        self.assertEqual(after["matrix.put"] - before["matrix.put"], 1)
        self.assertEqual(after["matrix.drop"] - before["matrix.drop"], 1)

    def test_address_from_the_environment_and_no_server(self):
        p = subprocess.run([self.EXE], capture_output=True, text=True, timeout=300,
                           env=dict(os.environ, KRYLOV_SERVER=daemon.address))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        p = subprocess.run([self.EXE, f"127.0.0.1:{port}"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(p.returncode, 1)
        self.assertIn("CONNECTION", p.stderr)
        self.assertIn("cannot connect", p.stderr)


if __name__ == "__main__":
    unittest.main()
