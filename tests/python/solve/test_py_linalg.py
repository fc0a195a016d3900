"""krylov.linalg: SciPy's cg / gmres / bicgstab / minres signatures over a default client.

Results are judged against SciPy's own solvers on the same matrices: both converge, krylovd's x
has a true residual ||b - A x|| (numpy, double) <= rtol ||b|| (times 1.01), info as SciPy's
(0 converged, > 0 the iterations or gmres cycles when maxiter runs out, < 0 breakdown), iteration
counts (through callbacks) close to SciPy's for cg. Also: several right-hand sides, M="jacobi" and
"amg", M a matrix (TypeError), the bad inputs SciPy refuses with ValueError, A uploaded once
(matrix.put counted by server.status) and put again after the server dropped it,
aslinearoperator, a ResidentOperator and a matrix id as A.

The default client: the in-process tests run on the private krylovd (KRYLOV_SERVER unset,
KRYLOVD_BIN = the build's bin/), which must outlive the thread that started it. Fresh Python
processes check its life cycle: started on first use, gone (and its folder removed) when Python
exits, gone within seconds when Python is SIGKILLed (its folder removed by the next start); the
sweeper of stale folders leaves one whose owner file another process holds locked (pids not
visible: another PID namespace), and this process's own, and follows no symbolic link; and with
KRYLOV_SERVER set to a running daemon, no private one starts and the solve reaches that daemon.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import krylov
from krylov import linalg
from kd_daemon import BIN_DIR, Daemon, laplacian, make_rng, scipy_tol, spd_matrix

rng = None
_env_saved = {}
_cache = None


def _set_env(env):
    env.pop("KRYLOV_SERVER", None)
    env["KRYLOVD_BIN"] = BIN_DIR
    args = ["--cache-dir", _cache, "--device", os.environ.get("KD_TEST_DEVICE", "auto")]
    env["KRYLOVD_ARGS"] = " ".join(args)
    return env


def setUpModule():
    global rng, _cache
    rng = make_rng()
    _cache = tempfile.mkdtemp(prefix="krylov-linalg-test-cache-")
    for k in ("KRYLOV_SERVER", "KRYLOVD_BIN", "KRYLOVD_ARGS"):
        _env_saved[k] = os.environ.get(k)
    _set_env(os.environ)


def tearDownModule():
    d = linalg._default.daemon
    linalg.shutdown()
    if d is not None:
        assert not os.path.exists(d.dir), "the private daemon's folder is still there"
    for k, v in _env_saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    shutil.rmtree(_cache, ignore_errors=True)


def relres(A, x, b):
    return np.linalg.norm(b - A @ x) / np.linalg.norm(b)


def convection_diffusion(nx, w):
    """Upwind convection-diffusion on an nx x nx grid: nonsymmetric."""
    one = lambda n, beta: sp.diags([-1.0 - beta, 2.0 + beta, -1.0], [-1, 0, 1], shape=(n, n))
    return sp.csr_matrix(sp.kron(sp.identity(nx), one(nx, w)) + sp.kron(one(nx, w / 2),
                                                                        sp.identity(nx)))


def puts():
    return linalg.default_client().status().requests_by_method.get("matrix.put", 0)


def alive(pid):
    """Running, not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


class Solvers(unittest.TestCase):
    def check(self, A, x, b, rtol=1e-8):
        self.assertEqual(x.shape, b.shape)
        self.assertLessEqual(relres(A, x, b), rtol * 1.01)

    def test_cg_against_scipy(self):
        for A in (laplacian(24), spd_matrix(500, rng)):
            b = rng.uniform(-1, 1, A.shape[0])
            ours, theirs = [], []
            x, info = linalg.cg(A, b, rtol=1e-8, callback=ours.append)
            xs, infos = spla.cg(A, b, atol=0.0, callback=theirs.append, **scipy_tol(1e-8))
            self.assertEqual((info, infos), (0, 0))
            self.check(A, x, b)
            self.assertLessEqual(relres(A, xs, b), 1e-8 * 1.01)
            self.assertLessEqual(abs(len(ours) - len(theirs)), max(2, len(theirs) // 10),
                                 f"cg iterations: krylovd {len(ours)}, SciPy {len(theirs)}")
            self.assertTrue(all(isinstance(r, float) for r in ours))
            self.assertLessEqual(ours[-1], 1e-8 * 1.01)
            np.testing.assert_allclose(x, xs, rtol=0, atol=1e-5 * np.abs(xs).max())

    def test_gmres_bicgstab_against_scipy(self):
        A = convection_diffusion(20, 0.8)
        b = rng.uniform(-1, 1, A.shape[0])
        for name, ours, theirs, kw in (
                ("gmres", linalg.gmres, spla.gmres, {"restart": 30}),
                ("bicgstab", linalg.bicgstab, spla.bicgstab, {})):
            x, info = ours(A, b, rtol=1e-9, **kw)
            xs, infos = theirs(A, b, atol=0.0, maxiter=2000, **scipy_tol(1e-9), **kw)
            self.assertEqual(info, 0, name)
            self.assertEqual(infos, 0, name)
            self.check(A, x, b, 1e-9)
            np.testing.assert_allclose(x, xs, rtol=0, atol=1e-5 * np.abs(xs).max())
        # the gmres callback: relative residuals of the inner iterations, ending converged
        norms = []
        x, info = linalg.gmres(A, b, rtol=1e-9, restart=30, callback=norms.append,
                               callback_type="pr_norm")
        self.assertEqual(info, 0)
        self.assertGreater(len(norms), 5)
        self.assertLessEqual(norms[-1], 1e-9 * 1.01)
        with self.assertRaises(NotImplementedError):
            linalg.gmres(A, b, callback=print, callback_type="x")

    def test_minres_indefinite_and_shift(self):
        L = laplacian(16)
        s = 0.5  # eigenvalues of L - s I on both sides of 0
        b = rng.uniform(-1, 1, L.shape[0])
        A = (L - s * sp.identity(L.shape[0])).tocsr()
        x, info = linalg.minres(A, b, rtol=1e-8)
        self.assertEqual(info, 0)
        self.check(A, x, b)
        xs, info = linalg.minres(L, b, shift=s, rtol=1e-8)
        self.assertEqual(info, 0)
        self.check(A, xs, b)
        xsp, _ = spla.minres(A, b, **scipy_tol(1e-12))
        np.testing.assert_allclose(x, xsp, rtol=0, atol=1e-5 * np.abs(xsp).max())

    def test_several_right_hand_sides(self):
        A = laplacian(16)
        n = A.shape[0]
        B = rng.uniform(-1, 1, (n, 3))
        for solver in (linalg.cg, linalg.gmres, linalg.bicgstab, linalg.minres):
            X, info = solver(A, B, rtol=1e-8)
            self.assertEqual(info, 0, solver.__name__)
            self.assertEqual(X.shape, (n, 3))
            for j in range(3):
                self.check(A, X[:, j], B[:, j])
        x1, info = linalg.cg(A, B[:, :1], rtol=1e-8, x0=np.zeros((n, 1)))
        self.assertEqual((x1.shape, info), ((n, 1), 0))
        # one column not converging: info is the iterations, as for a single one
        X, info = linalg.cg(A, np.c_[B[:, 0], np.zeros(n)], rtol=1e-8, maxiter=4)
        self.assertEqual(info, 4)
        self.assertFalse(np.any(X[:, 1]))
        # per-column callback values
        seen = []
        linalg.cg(A, B, rtol=1e-8, callback=seen.append)
        self.assertEqual(seen[-1].shape, (3,))
        self.assertTrue(np.all(seen[-1] <= 1e-8 * 1.01))

    def test_preconditioners(self):
        L = laplacian(20)
        d = sp.diags(10.0 ** rng.uniform(-1, 1, L.shape[0]))
        A = (d @ L @ d).tocsr()  # SPD, badly scaled: Jacobi helps
        b = rng.uniform(-1, 1, A.shape[0])
        plain, jac = [], []
        x, info = linalg.cg(A, b, rtol=1e-8, callback=plain.append)
        self.assertEqual(info, 0)
        x, info = linalg.cg(A, b, rtol=1e-8, M="jacobi", callback=jac.append)
        self.assertEqual(info, 0)
        self.check(A, x, b)
        self.assertLess(len(jac), len(plain))
        x, info = linalg.cg(L, b, rtol=1e-8, M="amg")
        self.assertEqual(info, 0)
        self.check(L, x, b)
        for M in (sp.identity(A.shape[0]), spla.aslinearoperator(sp.identity(A.shape[0])),
                  lambda r: r):
            with self.assertRaises(TypeError) as cm:
                linalg.cg(A, b, M=M)
            self.assertIn("'jacobi'", str(cm.exception))
        with self.assertRaises(krylov.BadRequest):
            linalg.cg(A, b, M="no-such-preconditioner")

    def test_not_converged_and_breakdown(self):
        A = laplacian(20)
        b = rng.uniform(-1, 1, A.shape[0])
        for ours, theirs, kw in ((linalg.cg, spla.cg, {"maxiter": 3}),
                                 (linalg.bicgstab, spla.bicgstab, {"maxiter": 3}),
                                 (linalg.minres, spla.minres, {"maxiter": 3}),
                                 (linalg.gmres, spla.gmres, {"maxiter": 2, "restart": 5})):
            x, info = ours(A, b, rtol=1e-10, **kw)
            _, infos = theirs(A, b, **kw, **scipy_tol(1e-10))
            self.assertEqual(info, infos, ours.__name__)
            self.assertGreater(info, 0)
            self.assertGreater(relres(A, x, b), 1e-10)
        x, info = linalg.cg(sp.diags([1.0, -1.0]).tocsr(), np.ones(2))  # p'Ap = 0
        self.assertLess(info, 0)
        x, info = linalg.cg(A, np.full(A.shape[0], np.nan))
        self.assertLess(info, 0)

    def test_bad_inputs(self):
        A = laplacian(8)
        n = A.shape[0]
        for ours, theirs in ((linalg.cg, spla.cg), (linalg.gmres, spla.gmres),
                             (linalg.bicgstab, spla.bicgstab), (linalg.minres, spla.minres)):
            for Abad, b in ((A, np.ones(n + 1)), (sp.random(n, n + 2, density=0.1), np.ones(n))):
                with self.assertRaises(ValueError):
                    theirs(Abad, b)
                with self.assertRaises(ValueError):
                    ours(Abad, b)
        before = puts()
        with self.assertRaises(ValueError):
            linalg.cg(A, np.ones(n), x0=np.ones(n + 1))
        with self.assertRaises(ValueError):
            linalg.cg(A, np.ones(n), rtol=-1.0)
        with self.assertRaises(ValueError):
            linalg.cg(A, np.ones((n, 2, 2)))
        with self.assertRaises(ValueError):
            linalg.cg(A, np.ones(n), maxiter=-1)
        with self.assertRaises(TypeError):
            linalg.cg(A, np.ones(n) * 1j)
        with self.assertRaises(TypeError):
            linalg.cg(spla.aslinearoperator(A), np.ones(n))
        self.assertEqual(puts(), before, "a refused call uploaded its matrix")
        with self.assertRaises(ValueError):
            linalg.cg(A, np.ones(n), tol=1e-3, rtol=1e-4)
        x, info = linalg.cg(A, np.ones(n), tol=1e-9)  # SciPy's older name
        self.assertEqual(info, 0)
        self.check(A, x, np.ones(n), 1e-9)

    def test_uploaded_once(self):
        A = spd_matrix(300, rng)
        b = rng.uniform(-1, 1, A.shape[0])
        before = puts()
        linalg.cg(A, b)
        self.assertEqual(puts(), before + 1)
        linalg.cg(A, 2 * b)
        linalg.minres(A.copy(), b)             # another object, the same content
        linalg.cg(A.toarray(), b)              # the same matrix dense
        linalg.cg(sp.csr_array(A), b)
        self.assertEqual(puts(), before + 1)
        ids = {m.id for m in linalg.default_client().list()}
        B = A.copy()
        B[0, 0] += 1.0
        linalg.cg(B, b)
        self.assertEqual(puts(), before + 2)
        self.assertEqual(len({m.id for m in linalg.default_client().list()} - ids), 1)
        # the server lost it: put again without the caller noticing
        for m in linalg.default_client().list():
            linalg.default_client().drop(m)
        x, info = linalg.cg(A, b, rtol=1e-8)
        self.assertEqual(info, 0)
        self.check(A, x, b)
        self.assertEqual(puts(), before + 3)

    def test_operators_and_ids(self):
        A = laplacian(12)
        b = rng.uniform(-1, 1, A.shape[0])
        op = linalg.aslinearoperator(A)
        self.assertIsInstance(op, linalg.LinearOperator)
        self.assertIsInstance(op, spla.LinearOperator)
        self.assertTrue(op.symmetric)
        np.testing.assert_allclose(op @ b, A @ b, rtol=1e-12)
        xs, info = spla.cg(op, b, atol=0.0, **scipy_tol(1e-8))  # SciPy's loop, matvec remote
        self.assertEqual(info, 0)
        for operand in (op, op.info, op.id):
            x, info = linalg.cg(operand, b, rtol=1e-8)
            self.assertEqual(info, 0)
            self.check(A, x, b)
        with krylov.Client(linalg.server_address()) as kd:  # a client of one's own
            ro = kd.operator(kd.put(A, dtype="float32"))
            x, info = linalg.cg(ro, b, rtol=1e-4)
            self.assertEqual(info, 0)
            self.assertEqual(x.dtype, np.float64)  # float32 A, float64 b: as numpy promotes
            self.check(A, x, b, 1e-4)
        with self.assertRaises(krylov.NotFound):
            linalg.cg("0" * 32, b)

    def test_daemon_outlives_starting_thread(self):
        linalg.shutdown()
        A = laplacian(6)
        out = {}
        t = threading.Thread(target=lambda: out.update(r=linalg.cg(A, np.ones(36))))
        t.start()
        t.join()
        self.assertEqual(out["r"][1], 0)
        # past its --shutdown-grace-ms (1000): a daemon SIGTERMed with the thread would be gone
        time.sleep(2.5)
        d = linalg._default.daemon
        self.assertTrue(d.alive(), "the private krylovd died with the thread that started it")
        x, info = linalg.cg(A, np.ones(36))
        self.assertEqual(info, 0)
        self.assertIs(linalg._default.daemon, d)


SCRIPT = """
import os, sys, time
import numpy as np, scipy.sparse as sp
from krylov.linalg import cg
A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(50, 50), format="csr")
x, info = cg(A, np.ones(50), rtol=1e-10)
assert info == 0 and np.linalg.norm(np.ones(50) - A @ x) <= 1e-10 * np.sqrt(50) * 1.01
from krylov import linalg
d = linalg._default.daemon
print(d.pid if d else 0, d.dir if d else "-", linalg.server_address(), flush=True)
if "wait" in sys.argv:
    time.sleep(600)
"""


class Lifecycle(unittest.TestCase):
    def spawn(self, *args, env=None):
        env = _set_env(dict(os.environ)) if env is None else env
        return subprocess.Popen([sys.executable, "-c", SCRIPT, *args], env=env,
                                stdout=subprocess.PIPE, text=True)

    def wait_gone(self, pid, seconds):
        deadline = time.monotonic() + seconds
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not alive(pid)

    def test_fresh_process_leaves_nothing(self):
        p = self.spawn()
        out, _ = p.communicate(timeout=300)
        self.assertEqual(p.returncode, 0)
        pid, folder, address = out.split()
        pid = int(pid)
        self.assertGreater(pid, 0)
        self.assertEqual(address, "unix:" + os.path.join(folder, "krylovd.sock"))
        self.assertTrue(self.wait_gone(pid, 5), f"krylovd {pid} outlived its Python")
        self.assertFalse(os.path.exists(folder))

    def test_sigkill_of_python(self):
        p = self.spawn("wait")
        try:
            line = p.stdout.readline()
            pid, folder, _ = line.split()
            pid = int(pid)
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                self.assertIn(folder.encode(), f.read())  # that pid is our krylovd
            self.assertTrue(alive(pid))
        finally:
            p.kill()
            p.wait()
            p.stdout.close()
        self.assertTrue(self.wait_gone(pid, 20), f"krylovd {pid} outlived a SIGKILLed Python")
        # its folder stays (nobody was left to remove it); the next private start clears it
        self.assertTrue(os.path.isdir(folder))
        linalg._remove_stale_folders(os.path.dirname(folder))
        self.assertFalse(os.path.exists(folder))

    def test_sweeper_leaves_locked_folders(self):
        base = tempfile.mkdtemp(prefix="krylov-linalg-sweep-")
        holder = None
        try:
            dead = subprocess.Popen(["true"])
            dead.wait()
            fake = f"{dead.pid} {dead.pid}\n"  # pids this process cannot see alive
            live = os.path.join(base, "krylov-linalg-live")
            stale = os.path.join(base, "krylov-linalg-stale")
            for folder in (live, stale):
                os.mkdir(folder)
                with open(os.path.join(folder, "owner"), "w") as f:
                    f.write(fake)
            # a link to a stale-looking folder: never followed
            target = os.path.join(base, "elsewhere")
            os.mkdir(target)
            with open(os.path.join(target, "owner"), "w") as f:
                f.write(fake)
            os.symlink(target, os.path.join(base, "krylov-linalg-link"))
            # another process holds the live folder's lock (its Python in another PID namespace)
            holder = subprocess.Popen(
                [sys.executable, "-c", "import fcntl, sys\n"
                 "f = open(sys.argv[1])\nfcntl.flock(f, fcntl.LOCK_EX)\n"
                 "print('locked', flush=True)\nsys.stdin.read()\n",
                 os.path.join(live, "owner")],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            self.assertEqual(holder.stdout.readline().strip(), "locked")
            linalg._remove_stale_folders(base)
            self.assertTrue(os.path.isdir(live), "a locked folder was removed")
            self.assertFalse(os.path.exists(stale), "an unlocked stale folder stayed")
            self.assertTrue(os.path.islink(os.path.join(base, "krylov-linalg-link")))
            self.assertTrue(os.path.isfile(os.path.join(target, "owner")))
            holder.stdin.close()
            holder.wait(timeout=60)
            holder.stdout.close()
            holder = None
            linalg._remove_stale_folders(base)  # its holder gone: stale now
            self.assertFalse(os.path.exists(live))
        finally:
            if holder is not None:
                holder.kill()
                holder.wait()
            shutil.rmtree(base, ignore_errors=True)

    def test_own_folder_is_locked(self):
        linalg.default_client()
        d = linalg._default.daemon
        saved = linalg._pid_alive
        linalg._pid_alive = lambda pid: False  # as if its pids were in another namespace
        try:
            linalg._remove_stale_folders(os.path.dirname(d.dir))
        finally:
            linalg._pid_alive = saved
        self.assertTrue(os.path.isdir(d.dir), "the live daemon's folder was removed")
        self.assertTrue(d.alive())
        x, info = linalg.cg(laplacian(6), np.ones(36))
        self.assertEqual(info, 0)

    def test_krylov_server_is_used(self):
        with Daemon() as d:
            env = _set_env(dict(os.environ))
            env["KRYLOV_SERVER"] = d.address
            env["KRYLOVD_BIN"] = "/nonexistent/krylovd"  # a private start would fail
            p = self.spawn(env=env)
            out, _ = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0)
            pid, folder, address = out.split()
            self.assertEqual((pid, address), ("0", d.address))
            with krylov.Client(d.address) as kd:
                st = kd.status()
                self.assertEqual(st.requests_by_method.get("solve"), 1)
                self.assertEqual(st.matrices, 1)


if __name__ == "__main__":
    unittest.main()
