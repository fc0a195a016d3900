"""client/python is a package people install with pip: build it offline with the standard
setuptools backend into a fresh virtual environment (the Debian interpreter's numpy and msgpack
visible through --system-site-packages, as a SciPy user's would be), check the wheel's metadata,
and use the installed copy, not the source tree, against a real krylovd.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest
import zipfile

from kd_daemon import SOURCE_DIR, Daemon, make_rng

PACKAGE = os.path.join(SOURCE_DIR, "client", "python")


def pip(python, *args):
    return subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "--no-cache-dir",
                           *args], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PIP_NO_INPUT="1", PYTHONPATH=""))


class TestPackage(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="krylov-pkg-test-")
        # build from a copy: setuptools writes build/ and *.egg-info beside the sources
        cls.src = os.path.join(cls.tmp, "src")
        shutil.copytree(PACKAGE, cls.src, ignore=shutil.ignore_patterns(
            "__pycache__", "build", "*.egg-info"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_wheel_metadata(self):
        out = os.path.join(self.tmp, "wheels")
        p = pip(sys.executable, "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", out, self.src)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        wheels = os.listdir(out)
        self.assertEqual(len(wheels), 1, wheels)
        self.assertRegex(wheels[0], r"^krylov-\d+\.\d+\.\d+-py3-none-any\.whl$")
        with zipfile.ZipFile(os.path.join(out, wheels[0])) as z:
            names = set(z.namelist())
            for module in ("__init__", "client", "errors", "_rpc", "scipy", "linalg"):
                self.assertIn(f"krylov/{module}.py", names)
            meta_name = [n for n in names if n.endswith(".dist-info/METADATA")][0]
            meta = z.read(meta_name).decode()
        requires = [l.split(":", 1)[1].strip() for l in meta.splitlines()
                    if l.startswith("Requires-Dist:")]
        base = sorted(re.split(r"[ ;(<>=!~]", r)[0] for r in requires if "extra" not in r)
        self.assertEqual(base, ["msgpack", "numpy"])  # only these; scipy is optional
        self.assertTrue(any(r.startswith("scipy") and "extra" in r for r in requires), requires)

    def test_pip_install_into_a_venv_and_use_it(self):
        venv = os.path.join(self.tmp, "venv")
        p = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                           capture_output=True, text=True, timeout=300)
        if p.returncode != 0 and "ensurepip" in p.stdout + p.stderr:
            self.skipTest("python3-venv is not installed (deploy/install-deps.sh installs it)")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        python = os.path.join(venv, "bin", "python")
        # --system-site-packages gives the base interpreter's packages; where this Python runs
        # in a venv of its own (a GPU host's), its dependencies are in that venv: a .pth file
        # puts their folders on the new venv's path too
        import msgpack
        import numpy
        folders = sorted({os.path.dirname(os.path.dirname(m.__file__)) for m in (msgpack, numpy)})
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
        with open(os.path.join(site, "krylov_test_deps.pth"), "w") as f:
            f.write("\n".join(folders) + "\n")
        # --no-index: offline; the dependencies must be found already installed
        p = pip(python, "install", "--no-build-isolation", "--no-index", self.src)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        rng = make_rng()
        n = int(rng.integers(10, 200))
        code = f"""
import os, sys, numpy as np, krylov
assert krylov.__file__.startswith({venv!r}), krylov.__file__
with krylov.Client(sys.argv[1]) as kd:
    A = np.diag(np.arange(1.0, {n} + 1.0))
    info = kd.put(A)
    assert info.nnz == {n}, info
    x = kd.solve(info, np.ones({n}), rtol=1e-12).x
    assert np.allclose(x, 1.0 / np.arange(1.0, {n} + 1.0), rtol=1e-10), x
print("installed krylov works", krylov.__version__)
"""
        with Daemon() as d:
            p = subprocess.run([python, "-c", code, d.address], capture_output=True, text=True,
                               timeout=300, cwd=self.tmp, env=dict(os.environ, PYTHONPATH=""))
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        self.assertIn("installed krylov works", p.stdout)


if __name__ == "__main__":
    unittest.main()
