"""SciPy's iterative solvers with nothing to set up: the solves run on krylovd.

    import numpy as np, scipy.sparse as sp
    from krylov.linalg import cg
    A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(1000, 1000), format="csr")
    x, info = cg(A, np.ones(1000), rtol=1e-8)         # info == 0: converged

cg, gmres, bicgstab and minres take scipy.sparse.linalg's arguments and return SciPy's (x, info):
info 0 converged, > 0 not converged in maxiter (the iterations done; gmres: restart cycles, as
SciPy counts), < 0 breakdown (or NaN / Inf in the input). They stop, as SciPy's do, when
||b - A x|| <= max(rtol ||b||, atol), with the true residual (minres too, where SciPy's own minres
uses a looser estimate).

A: a scipy.sparse matrix or array, a dense 2-D array, a krylov.scipy.ResidentOperator (solved on
its own client), a MatrixInfo or a matrix id. A matrix given by value is uploaded once: it is
remembered by its content id (krylov.content_id; a local digest without the xxhash package), so
solving with the same A again sends only b. b: one right-hand side (n) or several (n x k, solved
together; x then has b's shape). M: None or the name of a preconditioner the server runs: "jacobi",
"amg", "ilu0", "ic0", "block_jacobi", "chebyshev" (docs/PROTOCOL.md says which method takes which);
a matrix or LinearOperator as M is a TypeError: krylovd applies only its own. callback: called
after the solve with the relative residual norm ||r_k|| / ||b|| of each iteration, from the
server's history (gmres's callback_type="pr_norm"; for k right-hand sides an array of k, a column
that stopped repeating its last value); the iterates x_k stay on the server, so a SciPy callback
that expects x_k does not apply.

The server: $KRYLOV_SERVER when it is set (with $KRYLOV_USER / $KRYLOV_TOKEN / $KRYLOV_TLS as
krylov.Client reads them). Otherwise a private krylovd, started on first use on a Unix socket in
a fresh temporary folder: $KRYLOVD_BIN (the binary or its folder), else `krylovd` on PATH, else
one beside the package's installation; $KRYLOVD_ARGS adds options (e.g. "--device cpu"). It is
stopped when Python exits, and dies with the Python process if that is killed (its parent-death
signal). default_client() is this thread's connection to it; shutdown() stops it now.
"""

import atexit
import fcntl
import hashlib
import math
import os
import shlex
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections import OrderedDict

import numpy as np

from . import errors
from .client import Client, MatrixInfo
from .content_id import csr_content_id
from .scipy import ResidentOperator

__all__ = ["cg", "gmres", "bicgstab", "minres", "aslinearoperator", "LinearOperator",
           "default_client", "shutdown", "server_address"]

_PRECONDITIONERS = ("jacobi", "amg", "ilu0", "ic0", "block_jacobi", "chebyshev", "none")
_M_HINT = ("M must be None or the name of a preconditioner krylovd runs on its device: "
           + ", ".join(repr(p) for p in _PRECONDITIONERS))
_CACHE_ENTRIES = 4096  # remembered matrices (content key -> id) per process
_SCIPY_GMRES_RESTART = 20
_MAX_NRHS = 64  # the server's default max_nrhs: more columns go in blocks of this many
_START_TIMEOUT = 120.0  # PoCL may compile kernels at start


# ---------------------------------------------------------------------------------------------
# The private daemon and the default client


def _find_krylovd():
    env = os.environ.get("KRYLOVD_BIN")
    if env:
        path = os.path.join(env, "krylovd") if os.path.isdir(env) else env
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
        raise errors.ConnectionFailed(f"$KRYLOVD_BIN={env!r}: no executable krylovd there")
    found = shutil.which("krylovd")
    if found:
        return found
    here = os.path.dirname(os.path.abspath(__file__))
    # an installation: PREFIX/lib/pythonX.Y/site-packages/krylov -> PREFIX/bin; the source tree:
    # client/python/krylov -> build/bin
    for candidate in (os.path.join(here, "..", "..", "..", "..", "bin", "krylovd"),
                      os.path.join(sys.prefix, "bin", "krylovd"),
                      os.path.join(here, "..", "..", "..", "build", "bin", "krylovd")):
        candidate = os.path.normpath(candidate)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    raise errors.ConnectionFailed(
        "krylov.linalg needs a krylovd: set $KRYLOV_SERVER to a running one (host:port or "
        "unix:PATH), or put krylovd on PATH, or set $KRYLOVD_BIN to it")


def _pid_alive(pid):
    try:  # a zombie (exited, its parent not yet reaping) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_folders(base):
    """Folders of private daemons whose Python was killed (the daemon died with it, the folder
    stayed): removed when nobody holds the lock on their owner file (the owning Python holds it
    for its life: this works where its pid is not visible, another PID namespace sharing /tmp)
    and neither pid in it is alive. Never follows a symbolic link."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    uid = os.getuid()
    for name in names:
        if not name.startswith("krylov-linalg-"):
            continue
        folder = os.path.join(base, name)
        try:
            st = os.lstat(folder)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
                continue
            fd = os.open(os.path.join(folder, "owner"),
                         os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != uid:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its Python holds it: alive, wherever its pid is
            pids = [int(w) for w in os.read(fd, 256).split()[:2]]
            if pids and not any(_pid_alive(p) for p in pids):
                shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):
            continue
        finally:
            os.close(fd)


def _lock_owner_file(folder):
    """The folder's owner file, created already locked (flock, held by this process until it
    closes the descriptor or ends): the sweeper of stale folders leaves a locked one alone."""
    tmp = os.path.join(folder, "owner.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody else can see it yet
        os.write(fd, f"{os.getpid()}\n".encode())
        os.rename(tmp, os.path.join(folder, "owner"))  # the lock goes with the file
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_owner_file(fd, text):
    os.ftruncate(fd, 0)
    os.pwrite(fd, text.encode(), 0)


def _parent_death_hook(parent_pid):
    """preexec_fn for the daemon: SIGTERM when the thread that started it ends (the keeper
    thread lives as long as the Python process), and exit at once if Python is already gone."""
    prctl = None
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            prctl = None

    def hook():
        if prctl is not None:
            prctl(1, int(signal.SIGTERM), 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent_pid:
            os._exit(1)

    return hook


class _PrivateDaemon:
    """krylovd on a Unix socket in a fresh temporary folder, owned by this Python process."""

    def __init__(self):
        binary = _find_krylovd()
        base = tempfile.gettempdir()
        if len(base) > 60:  # a Unix socket's path has 108 bytes at most
            base = "/tmp"
        _remove_stale_folders(base)
        self.dir = tempfile.mkdtemp(prefix="krylov-linalg-", dir=base)
        try:
            self._owner_fd = _lock_owner_file(self.dir)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.socket = os.path.join(self.dir, "krylovd.sock")
        self.log = os.path.join(self.dir, "krylovd.log")
        self.address = "unix:" + self.socket
        self.owner = os.getpid()
        argv = [binary, "--listen", self.address, "--log-file", self.log, "--log-level", "warn",
                # one process's daemon: build programs on first use, keep idle connections, let
                # a solve that nobody waits for any more go quickly
                "--warm-programs", "none", "--idle-timeout-ms", "0",
                "--shutdown-grace-ms", "1000"]
        argv += shlex.split(os.environ.get("KRYLOVD_ARGS", ""))
        self.proc = None
        self._release = threading.Event()
        started = threading.Event()
        failure = []

        # The parent-death signal fires when the *thread* that forked the daemon ends, so a
        # daemon thread that lives until the process exits starts it: cg() called from a
        # short-lived thread must not take the daemon with it.
        def keeper():
            try:  # stderr: what krylovd says before its log file is open
                with open(self.log, "ab") as err:
                    self.proc = subprocess.Popen(
                        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                        cwd=self.dir, close_fds=True,
                        start_new_session=True,  # Ctrl-C in the terminal is Python's alone
                        preexec_fn=_parent_death_hook(self.owner))
            except BaseException as e:  # noqa: B902 - handed to the starting thread
                failure.append(e)
            started.set()
            if self.proc is not None:
                self._release.wait()

        threading.Thread(target=keeper, name="krylovd-keeper", daemon=True).start()
        started.wait()
        if failure:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._unlock()
            raise errors.ConnectionFailed(f"cannot start {binary}: {failure[0]}")
        try:
            _write_owner_file(self._owner_fd, f"{self.owner} {self.proc.pid}\n")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def _log_tail(self):
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-2000:].strip()
        except OSError:
            return ""

    def _wait_ready(self):
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise errors.ConnectionFailed(
                    f"krylovd exited during start-up (status {self.proc.returncode}): "
                    f"{self._log_tail() or 'no log'}")
            if os.path.exists(self.socket):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(self.socket)
                    return
                except OSError:
                    pass
                finally:
                    s.close()
            if time.monotonic() > deadline:
                raise errors.ConnectionFailed(
                    f"krylovd did not listen on {self.socket} within {_START_TIMEOUT:.0f} s")
            time.sleep(0.02)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        """SIGTERM and wait (SIGKILL after 15 s); removes the folder. Only by the owner."""
        if os.getpid() != self.owner:
            return
        proc, self.proc = self.proc, None
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._release.set()
        shutil.rmtree(self.dir, ignore_errors=True)
        self._unlock()

    def _unlock(self):
        fd, self._owner_fd = self._owner_fd, None
        if fd is not None:
            os.close(fd)


class _Default:
    """The process's default server: connections per thread, matrices remembered by content."""

    def __init__(self):
        self.lock = threading.RLock()
        self.daemon = None
        self.local = threading.local()
        self.matrices = OrderedDict()  # (address, content key) -> MatrixInfo
        self.atexit = False

    def address(self):
        env = os.environ.get("KRYLOV_SERVER")
        if env:
            return env
        with self.lock:
            d = self.daemon
            if d is not None and d.alive():
                return d.address
            if d is not None and os.getpid() == d.owner:
                tail = d._log_tail()
                d.stop()
                self.daemon = None
                if tail:
                    print(f"krylov.linalg: the private krylovd had exited; its log:\n{tail}",
                          file=sys.stderr)
            elif d is not None and os.getpid() != d.owner:
                return d.address  # a forked child uses its parent's daemon
            if not self.atexit:
                atexit.register(shutdown)
                self.atexit = True
            self.daemon = _PrivateDaemon()
            return self.daemon.address

    def client(self):
        pid = os.getpid()
        held = getattr(self.local, "held", None)
        if held is not None and held[0] == pid and not held[1].closed:
            return held[1]
        c = Client(self.address())
        self.local.held = (pid, c)
        if threading.current_thread() is not threading.main_thread():
            weakref.finalize(threading.current_thread(), c.close)  # the thread's end
        return c

    def reset_client(self):
        held = getattr(self.local, "held", None)
        self.local.held = None
        if held is not None and held[0] == os.getpid():
            held[1].close()

    def remember(self, key, info):
        with self.lock:
            self.matrices[key] = info
            self.matrices.move_to_end(key)
            while len(self.matrices) > _CACHE_ENTRIES:
                self.matrices.popitem(last=False)

    def recall(self, key):
        with self.lock:
            info = self.matrices.get(key)
            if info is not None:
                self.matrices.move_to_end(key)
            return info

    def forget(self, key):
        with self.lock:
            self.matrices.pop(key, None)

    def shutdown(self):
        self.reset_client()
        with self.lock:
            d, self.daemon = self.daemon, None
            self.matrices.clear()
        if d is not None:
            d.stop()


_default = _Default()


def default_client():
    """This thread's krylov.Client to the default server ($KRYLOV_SERVER, else the private
    krylovd, started now if it is not running)."""
    return _default.client()


def server_address():
    """The default server's address ("unix:PATH" for the private krylovd)."""
    return _default.address()


def shutdown():
    """Stop the private krylovd now (if this process started one) and forget its matrices; the
    next solve starts a fresh one. Runs at exit by itself."""
    _default.shutdown()


# ---------------------------------------------------------------------------------------------
# Operands


def _canonical_csr(A):
    """A host matrix as canonical CSR (float64 unless float32), without changing the caller's."""
    import scipy.sparse as sp

    if sp.issparse(A):
        csr = A.tocsr()
        if not csr.has_canonical_format:
            csr = csr.copy() if csr is A else csr
            csr.sum_duplicates()
    else:
        dense = np.asarray(A)
        if dense.ndim != 2:
            raise ValueError(f"A must be 2-D, not of shape {dense.shape}")
        csr = sp.csr_matrix(dense)
    if csr.dtype.kind == "c":
        raise TypeError(f"A is complex ({csr.dtype}); krylovd works with real values")
    if csr.dtype not in (np.float32, np.float64):
        if csr.dtype.kind not in "iub" and csr.dtype.kind != "f":
            raise TypeError(f"A has dtype {csr.dtype}; expected real numbers")
        csr = csr.astype(np.float64)
    return csr


def _content_key(csr, dtype_name):
    """The server's content id (with xxhash), else a local digest of the same arrays."""
    mid = csr_content_id(csr.shape[0], csr.shape[1], csr.indptr, csr.indices, csr.data,
                         dtype_name, canonical=True)
    if mid is not None:
        return mid
    h = hashlib.blake2b(digest_size=16)
    h.update(struct.pack("<qqq", csr.shape[0], csr.shape[1], csr.nnz) + dtype_name.encode())
    for arr in (csr.indptr, csr.indices):
        h.update(np.ascontiguousarray(arr, dtype="<i8").view(np.uint8))
    h.update(np.ascontiguousarray(csr.data).view(np.uint8))
    return "local:" + h.hexdigest()


class _Operand:
    """What a solve runs on: client, matrix id, shape, wire dtype, and how to upload it again."""

    def __init__(self, client, mid, shape, dtype_name, key=None, csr=None, default=False):
        self.client = client
        self.id = mid
        self.shape = tuple(shape)
        self.dtype_name = dtype_name
        self.key = key
        self.csr = csr
        self.default = default

    @property
    def dtype(self):
        return np.dtype(np.float32 if self.dtype_name == "float32" else np.float64)


def _host_matrix(A):
    import scipy.sparse as sp

    return sp.issparse(A) or isinstance(A, np.ndarray) or (
        hasattr(A, "__array__") and not hasattr(A, "matvec"))


def _check_square(shape):
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"expected a square matrix, but A has shape {tuple(shape)}")


def _operand(A, shift=0.0):
    """Resolve A; a host matrix is uploaded unless this process already put the same one."""
    if isinstance(A, ResidentOperator):
        if shift:
            raise NotImplementedError("minres(shift=...) needs A itself, not a resident operator")
        return _Operand(A.client, A.id, A.shape, A._wire_dtype)
    if isinstance(A, (MatrixInfo, str)):
        if shift:
            raise NotImplementedError("minres(shift=...) needs A itself, not a matrix id")
        client = _default.client()
        info = A if isinstance(A, MatrixInfo) else client.info(A)
        return _Operand(client, info.id, info.shape, info.dtype or "float64", default=True)
    if not _host_matrix(A):
        raise TypeError(
            f"A is a {type(A).__name__}: krylov.linalg takes a scipy.sparse matrix or array, a "
            "dense 2-D array, a krylov.scipy.ResidentOperator, a MatrixInfo or a matrix id "
            "(a general LinearOperator's matvec cannot run on the server)")
    shape = getattr(A, "shape", None)
    if shape is None:
        shape = np.shape(A)
    _check_square(shape)
    csr = _canonical_csr(A)
    if shift:
        import scipy.sparse as sp

        csr = (csr - shift * sp.identity(csr.shape[0], dtype=csr.dtype, format="csr")).tocsr()
        csr.sum_duplicates()
    dtype_name = "float32" if csr.dtype == np.float32 else "float64"
    return _Operand(None, None, csr.shape, dtype_name, key=_content_key(csr, dtype_name), csr=csr,
                    default=True)


def _upload(op):
    """Attach the default client and the matrix id (a put unless this process has put A)."""
    client = _default.client()
    op.client = client
    key = (client.address, op.key)
    info = _default.recall(key)
    if info is None:
        info = client.put(op.csr, dtype=op.dtype_name)
        _default.remember(key, info)
    op.id = info.id


def aslinearoperator(A, *, symmetric=None):
    """A krylov.scipy.ResidentOperator for A on the default server (A uploaded once, as the
    solvers do; a ResidentOperator is returned as it is)."""
    if isinstance(A, ResidentOperator):
        return A
    return LinearOperator(A, symmetric=symmetric)


class LinearOperator(ResidentOperator):
    """A scipy.sparse.linalg.LinearOperator for A resident on the default server: matvec runs
    there (krylov.scipy.ResidentOperator). A: as for cg (a host matrix is uploaded unless this
    process already put it)."""

    def __init__(self, A, *, symmetric=None, dtype=None):
        op = _operand(A)
        if op.client is None:
            _upload(op)
        super().__init__(op.client, op.client.info(op.id), symmetric=symmetric, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# The solvers


def _preconditioner(M):
    if M is None:
        return None
    if isinstance(M, str):
        return M
    raise TypeError(f"M is a {type(M).__name__}: krylovd cannot apply a preconditioner given as "
                    f"a matrix, a LinearOperator or a function. {_M_HINT}")


def _tolerances(rtol, atol, tol, default_rtol=1e-5):
    if tol is not None:
        if rtol != default_rtol and rtol != tol:
            raise ValueError(f"got both tol={tol} and rtol={rtol}: give one (tol is SciPy's "
                             "older name of rtol)")
        rtol = tol
    atol = 0.0 if atol is None else atol
    for name, v in (("rtol", rtol), ("atol", atol)):
        if not (isinstance(v, (int, float, np.floating, np.integer)) and math.isfinite(v)
                and v >= 0):
            raise ValueError(f"{name} must be a finite number >= 0, not {v!r}")
    return float(rtol), float(atol)


def _info(status, iterations, cycle=1):
    if status == "converged":
        return 0
    if status in ("breakdown", "non_finite"):
        return -1
    return max(1, -(-int(iterations) // cycle))  # max_iterations, stagnated: not converged


def _solve(method, A, b, x0, rtol, atol, maxiter, M, callback, restart=None, shift=0.0):
    preconditioner = _preconditioner(M)
    if maxiter is not None and (int(maxiter) != maxiter or maxiter < 0):
        raise ValueError(f"maxiter must be an integer >= 0, not {maxiter!r}")
    b_arr = np.asarray(b)
    if b_arr.dtype.kind == "c":
        raise TypeError(f"b is complex ({b_arr.dtype}); krylovd works with real values")
    shape = getattr(A, "shape", None)
    if shape is None and _host_matrix(A):
        shape = np.shape(A)
    if b_arr.ndim not in (1, 2):
        raise ValueError(f"b must be 1-D (n) or 2-D (n x k), not of shape {b_arr.shape}")
    if shape is not None:
        _check_square(shape)
        if b_arr.shape[0] != shape[1]:
            raise ValueError(f"A and b have incompatible dimensions: A is {tuple(shape)}, "
                             f"b is {b_arr.shape}")
    if x0 is not None:
        x0_arr = np.asarray(x0)
        if x0_arr.size != b_arr.size or x0_arr.ndim == 0 or x0_arr.shape[0] != b_arr.shape[0]:
            raise ValueError(f"A and x0 have incompatible dimensions: b is {b_arr.shape}, "
                             f"x0 is {x0_arr.shape}")
        x0_arr = x0_arr.reshape(b_arr.shape)
    else:
        x0_arr = None

    op = _operand(A, shift)
    if b_arr.shape[0] != op.shape[1]:
        raise ValueError(f"A and b have incompatible dimensions: A is {op.shape}, b is "
                         f"{b_arr.shape}")
    out_dtype = np.result_type(op.dtype, b_arr.dtype if b_arr.dtype.kind == "f" else np.float64)
    server_maxiter = maxiter
    if method == "gmres" and maxiter is not None:
        server_maxiter = int(maxiter) * restart  # SciPy counts restart cycles
    options = dict(method=method, rtol=rtol, atol=atol, dtype=op.dtype_name,
                   maxiter=None if server_maxiter is None else int(server_maxiter),
                   preconditioner=preconditioner, restart=restart)
    if callback is not None:
        options.update(history=True, check_every=1)

    cycle = restart if method == "gmres" else 1
    if b_arr.ndim == 1:
        res = _run(op, b_arr, x0_arr, options)
        if callback is not None:
            _replay(callback, [res.history], b_arr[:, None])
        return np.array(res.x, dtype=out_dtype), _info(res.status, res.iterations, cycle)

    x = np.empty(b_arr.shape, dtype=out_dtype)
    infos, histories = [], []
    for start in range(0, max(1, b_arr.shape[1]), _MAX_NRHS):
        cols = slice(start, start + _MAX_NRHS)
        if b_arr.shape[1] == 0:
            break
        res = _run(op, b_arr[:, cols], None if x0_arr is None else x0_arr[:, cols], options)
        x[:, cols] = res.x
        infos += [_info(s, i, cycle) for s, i in zip(res.status, res.iterations)]
        histories += list(res.history or [])
    if callback is not None:
        _replay(callback, histories, b_arr)
    bad = [i for i in infos if i < 0]
    return x, (min(bad) if bad else max(infos, default=0))


def _run(op, b, x0, options):
    """The solve, uploading A first where needed; a matrix the server no longer holds is put
    again, and a default connection that was lost (the server closed it) is opened again."""
    for attempt in (0, 1):
        try:
            if op.client is None:
                _upload(op)
            return op.client.solve(op.id, b, x0=x0, **options)
        except errors.NotFound:
            if attempt or op.key is None:
                raise
            _default.forget((op.client.address, op.key))
            op.client = None
        except errors.ConnectionFailed:
            if attempt or not op.default:
                raise
            _default.reset_client()
            op.client = None if op.key is not None else _default.client()


def _replay(callback, histories, b):
    """callback(relative residual) per recorded iteration (an array of k for k columns)."""
    norms = np.linalg.norm(np.asarray(b, dtype=np.float64), axis=0)
    norms[norms == 0] = 1.0
    hists = [np.asarray(h if h is not None else [], dtype=np.float64) for h in histories]
    if len(hists) == 1 and b.shape[1] == 1:
        for r in hists[0][1:] / norms[0]:  # history[0] is the starting residual
            callback(float(r))
        return
    steps = max((len(h) for h in hists), default=1) - 1
    for k in range(1, steps + 1):
        callback(np.array([h[min(k, len(h) - 1)] / n if len(h) else 0.0
                           for h, n in zip(hists, norms)]))


def cg(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None, tol=None):
    """Conjugate gradients for a symmetric positive definite A, on the server: SciPy's
    scipy.sparse.linalg.cg (see the module's docstring for A, b, M and callback). Returns
    (x, info). maxiter: iterations (None: the server's 10 n). tol: SciPy's older name of rtol."""
    rtol, atol = _tolerances(rtol, atol, tol)
    return _solve("cg", A, b, x0, rtol, atol, maxiter, M, callback)


def gmres(A, b, x0=None, *, rtol=1e-5, atol=0.0, restart=None, maxiter=None, M=None,
          callback=None, callback_type=None, tol=None):
    """GMRES(restart) for any square A, on the server: SciPy's scipy.sparse.linalg.gmres.
    restart: the basis size (None: SciPy's 20; at most 200). maxiter: restart cycles, as SciPy
    counts them (None: the server's 10 n iterations), and info > 0 is the cycles run.
    callback_type: "pr_norm" or "legacy" (SciPy's default) both get the relative residual norm
    of each inner iteration; "x" (the iterate of each cycle) is not available."""
    if callback_type not in (None, "legacy", "pr_norm"):
        raise NotImplementedError(
            f"callback_type={callback_type!r}: krylov.linalg.gmres reports residual norms "
            "('pr_norm' or 'legacy'); the iterates stay on the server")
    restart = _SCIPY_GMRES_RESTART if restart is None else int(restart)
    if not 1 <= restart <= 200:
        raise ValueError(f"restart must be in 1..200, not {restart}")
    rtol, atol = _tolerances(rtol, atol, tol)
    return _solve("gmres", A, b, x0, rtol, atol, maxiter, M, callback, restart=restart)


def bicgstab(A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None,
             tol=None):
    """BiCGSTAB for any square A, on the server: SciPy's scipy.sparse.linalg.bicgstab (M:
    None, "jacobi" or "amg")."""
    rtol, atol = _tolerances(rtol, atol, tol)
    return _solve("bicgstab", A, b, x0, rtol, atol, maxiter, M, callback)


def minres(A, b, x0=None, *, shift=0.0, rtol=1e-5, atol=0.0, maxiter=None, M=None,
           callback=None, show=False, check=False, tol=None):
    """MINRES for a symmetric (possibly indefinite) A, on the server: SciPy's
    scipy.sparse.linalg.minres, but stopping at ||b - A x|| <= max(rtol ||b||, atol) like the
    others (SciPy's minres stops on a looser estimate). shift: solves (A - shift I) x = b (A given
    by value). show and check are accepted and ignored (the server checks symmetry). M: None,
    "jacobi" or "amg" (symmetric positive definite)."""
    del show, check
    rtol, atol = _tolerances(rtol, atol, tol)
    return _solve("minres", A, b, x0, rtol, atol, maxiter, M, callback, shift=float(shift))
