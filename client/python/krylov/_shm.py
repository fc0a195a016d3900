"""Shared memory with a krylovd on the same host (docs/PROTOCOL.md, "Shared memory").

On a Unix socket the client keeps one region: a memfd sealed against shrinking and growing,
registered with `shm.register` (the descriptor goes beside the request, SCM_RIGHTS). A large
request's arrays are copied into the region once and named by reference ({"shm", "offset",
"bytes"}) instead of travelling as bins, and the server writes the result into it (`out`); the
client copies the result out (the region is reused by the next request). A request that needs more
room registers a larger region and drops the old one. A server that refuses (TCP, an old server,
--max-shm-bytes 0) turns it off for the connection: arrays then go as bins.
"""

import fcntl
import mmap
import os

import numpy as np

from . import errors

# Requests whose arrays hold fewer bytes go as bins: a copy into the region and a reference cost
# more than a small bin.
MIN_BYTES = 256 << 10
_ALIGN = 64


def _round_up(n, to):
    return (n + to - 1) // to * to


class Region:
    """One registered region: a memfd, its mapping and the server's id for it."""

    def __init__(self, conn, nbytes):
        fd = os.memfd_create("krylov-shm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            os.posix_fallocate(fd, 0, nbytes)  # the pages exist: a write never faults for room
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            self.map = mmap.mmap(fd, nbytes)
            try:
                result = conn.call("shm.register", {"bytes": nbytes}, fds=[fd])
            except BaseException:
                self.map.close()
                raise
        finally:
            os.close(fd)
        self.id = int(result["shm"])
        self.nbytes = nbytes

    def close(self, conn):
        try:
            if not conn.closed:
                conn.call("shm.unregister", {"shm": self.id})
        except errors.KrylovError:
            pass
        try:
            self.map.close()
        except BufferError:  # an array still views it: the mapping goes with the last one
            pass


class Arena:
    """The client's region and the layout of one request's arrays in it."""

    def __init__(self, conn, enabled=True):
        self._conn = conn
        self.enabled = enabled and conn.is_unix
        self.region = None
        self.refused = None  # why the server refused shm.register, once it did

    def usable(self, nbytes):
        return self.enabled and nbytes >= MIN_BYTES

    def reserve(self, nbytes):
        """Room for nbytes at offset 0; False when the server refuses (shm is then off)."""
        if self.region is not None and self.region.nbytes >= nbytes:
            return True
        size = max(_round_up(nbytes, 1 << 20), 2 * self.region.nbytes if self.region else 0)
        old, self.region = self.region, None
        if old is not None:
            old.close(self._conn)
        try:
            self.region = Region(self._conn, size)
        except (errors.KrylovError, OSError, AttributeError) as e:
            if isinstance(e, errors.ConnectionFailed):
                raise
            self.enabled = False
            self.refused = str(e)
            return False
        return True

    def close(self):
        if self.region is not None:
            self.region.close(self._conn)
            self.region = None


class Layout:
    """Places arrays one after another (64-byte aligned) in the arena's region."""

    def __init__(self):
        self.parts = []  # (offset, nbytes)
        self.nbytes = 0

    def add(self, nbytes):
        offset = _round_up(self.nbytes, _ALIGN)
        self.nbytes = offset + nbytes
        self.parts.append((offset, nbytes))
        return len(self.parts) - 1


def view(region, offset, dtype, shape, order="C"):
    """A NumPy array over the region's bytes (writable)."""
    return np.ndarray(shape, dtype=dtype, buffer=region.map, offset=offset, order=order)


def ref(region, offset, nbytes):
    return {"shm": region.id, "offset": offset, "bytes": nbytes}
