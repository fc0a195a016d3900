"""Large copies and comparisons on several threads.

One thread of a server-class host moves 5-7 GB/s (the H200 host: a 55 MB memcpy in 8-11 ms)
where its cores together move 28 GB/s, and a 1M-row request's arrays are tens of MB: copying a
put's values into the shared-memory region, or checking that a like put's pattern is the one
sent last time, would cost more than the server's whole put on one thread. NumPy's copy and
glibc's memcmp (through ctypes) release the GIL, so chunks on a small pool of threads run in
parallel. Below LARGE bytes, or where threads cannot start, one call does it.
"""

import ctypes
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

LARGE = 4 << 20
_CHUNK = 2 << 20  # the least a thread is given

_lock = threading.Lock()
_pool = None
_pool_pid = None
_memcmp = None


def _threads():
    return max(1, min(16, os.cpu_count() or 1))


def _executor():
    """The pool of this process (a forked child makes its own)."""
    global _pool, _pool_pid
    with _lock:
        if _pool is None or _pool_pid != os.getpid():
            _pool = ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="krylov-mem")
            _pool_pid = os.getpid()
        return _pool


def _bytes_of(arr, order="C"):
    """A contiguous array's bytes in memory order as a flat uint8 view (no copy): a C-contiguous
    one, or with order "F" a Fortran-contiguous one; else None."""
    if not isinstance(arr, np.ndarray):
        return None
    if arr.flags.c_contiguous and (order == "C" or arr.ndim < 2):
        return arr.reshape(-1).view(np.uint8)
    if order == "F" and arr.flags.f_contiguous:
        return arr.T.reshape(-1).view(np.uint8)
    return None


def _chunks(n):
    step = max(_CHUNK, -(-n // _threads()))
    return [(i, min(n, i + step)) for i in range(0, n, step)]


def copy(dst, src):
    """np.copyto(dst, src); on threads when large, of one shape and dtype, and both C- or both
    Fortran-contiguous."""
    order = "F" if isinstance(dst, np.ndarray) and not dst.flags.c_contiguous else "C"
    d, s = _bytes_of(dst, order), _bytes_of(src, order)
    if (d is None or s is None or dst.dtype != src.dtype or dst.shape != src.shape
            or d.nbytes < LARGE or _threads() == 1):
        np.copyto(dst, src)
        return
    jobs = [_executor().submit(np.copyto, d[i:j], s[i:j]) for i, j in _chunks(d.nbytes)]
    for job in jobs:
        job.result()


def fresh(src):
    """A copy of src in a new array of its layout (src.copy(order="K") for a contiguous one)."""
    dst = np.empty_like(src, order="K")
    copy(dst, src)
    return dst


def _libc_memcmp():
    global _memcmp
    if _memcmp is None:
        f = ctypes.CDLL(None).memcmp  # CDLL: the GIL is released for the call
        f.argtypes = (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)
        f.restype = ctypes.c_int
        _memcmp = f
    return _memcmp


def equal(a, b):
    """Whether two arrays hold the same bytes in the same shape and dtype (np.array_equal for
    integer arrays), on threads when large."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    x, y = _bytes_of(a), _bytes_of(b)
    if x is None or y is None or x.nbytes < LARGE:
        return bool(np.array_equal(a, b))
    try:
        memcmp = _libc_memcmp()
    except (OSError, AttributeError):
        return bool(np.array_equal(a, b))
    px, py = x.ctypes.data, y.ctypes.data
    if px == py:
        return True
    jobs = [_executor().submit(memcmp, px + i, py + i, j - i) for i, j in _chunks(x.nbytes)]
    return all(job.result() == 0 for job in jobs)
