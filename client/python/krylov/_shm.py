"""Shared memory with a krylovd on the same host (docs/PROTOCOL.md, "Shared memory").

On a Unix socket the client keeps one region: a memfd sealed against shrinking and growing,
registered with `shm.register` (the descriptor goes beside the request, SCM_RIGHTS). A large
request's arrays are copied into the region once and named by reference ({"shm", "offset",
"bytes"}) instead of travelling as bins, and the server writes the result into it (`out`); the
client copies the result out (the region is reused by the next request). The caller's own
arrays in shared memory (Client.empty) are a Pool of regions, one an array, named where they lie
and written into only as the `out` the caller passed.

A request that needs more room registers a larger region (twice the old one, or just the request's
size when the server's --max-shm-bytes has no room for that) and drops the old one; a request the
server has no room for at all goes as bins, and so do larger ones after it for a while, while
smaller ones keep using shared memory.

A request that was abandoned (a client timeout, Ctrl-C, an exception from a progress callback)
may still be running on the server and writing into the region: the region is then never used
again; the next request registers a fresh one and the old one is unregistered (the server keeps
its mapping until the old request ends). A server that refuses shm.register otherwise (TCP, an
old server, --max-shm-bytes 0), or does not answer it in time, turns shared memory off for the
connection: arrays then go as bins.
"""

import errno
import fcntl
import mmap
import os
import weakref

import numpy as np

from . import errors

# Requests whose arrays hold fewer bytes go as bins: a copy into the region and a reference cost
# more than a small bin.
MIN_BYTES = 256 << 10
_ALIGN = 64
_GROW_STEP = 1 << 20
_PAGE = mmap.PAGESIZE
# memfd_create / posix_fallocate failing for room: like the server's TOO_LARGE, a smaller region
# may still do
_NO_ROOM_ERRNOS = (errno.ENOSPC, errno.ENOMEM, errno.EFBIG)
# After this many requests sent as bins for want of room, the size is tried again (other
# connections' regions, or one an abandoned request held, may have gone)
_RETRY_AFTER = 64


def _round_up(n, to):
    return (n + to - 1) // to * to


class _Mapping(mmap.mmap):
    """An mmap that weak references (weakref.finalize) can follow."""


class Region:
    """One registered region: a memfd, its mapping and the server's id for it."""

    def __init__(self, conn, nbytes, mapping=mmap.mmap):
        fd = os.memfd_create("krylov-shm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, nbytes)
            os.posix_fallocate(fd, 0, nbytes)  # the pages exist: a write never faults for room
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
            self.map = mapping(fd, nbytes)
            try:
                result = conn.call("shm.register", {"bytes": nbytes}, fds=[fd])
            except BaseException:
                self.map.close()
                raise
        finally:
            os.close(fd)
        self.id = int(result["shm"])
        self.nbytes = nbytes

    def release(self):
        """Drop the client's mapping (the server's, if any, lives on until unregistered)."""
        try:
            self.map.close()
        except BufferError:  # an array still views it: the mapping goes with the last one
            pass

    def unregister(self, conn, wait=True):
        """shm.unregister and release. wait=False only sends the request (its answer is skipped
        when it comes): for a region an abandoned request may still use."""
        try:
            if not conn.closed:
                if wait:
                    conn.call("shm.unregister", {"shm": self.id})
                else:
                    conn.send_request("shm.unregister", {"shm": self.id})
        except errors.ConnectionFailed:
            pass
        except errors.KrylovError:
            pass
        finally:
            self.release()


class Arena:
    """The client's region and the layout of one request's arrays in it."""

    def __init__(self, conn, enabled=True):
        self._conn = conn
        self.enabled = enabled and conn.is_unix
        self.region = None
        self.dirty = False  # an abandoned request may still write into self.region
        self.refused = None  # why the server refused shm.register, once it did
        self.too_large = None  # requests of this many bytes or more go as bins (no room)
        self._skipped = 0  # requests sent as bins because of too_large
        self.uses = 0  # requests whose arrays went through a region (for tests and curiosity)

    def usable(self, nbytes):
        return self.enabled and nbytes >= MIN_BYTES

    def abandon(self):
        """A request using the region ended without its answer (it may still run on the server):
        the region must not be used again."""
        if self.region is not None:
            self.dirty = True

    def reserve(self, nbytes):
        """Room for nbytes at offset 0, in a region no request still uses; False when the server
        has no room for it or refuses shared memory (then off for good)."""
        if not self.enabled:
            return False
        if self.too_large is not None and nbytes >= self.too_large:
            self._skipped += 1
            if self._skipped < _RETRY_AFTER:
                return False
            self.too_large = None
        if self.region is not None and self.dirty:
            old, self.region, self.dirty = self.region, None, False
            # the server answers at once (in_use: the abandoned request keeps its mapping), but
            # nothing here needs the answer
            old.unregister(self._conn, wait=False)
        if self.region is not None and self.region.nbytes >= nbytes:
            return True
        want = _round_up(nbytes, _GROW_STEP)
        sizes = [max(want, 2 * self.region.nbytes if self.region else 0), want,
                 _round_up(nbytes, _PAGE)]
        old, self.region = self.region, None
        if old is not None:  # first: the server counts it against --max-shm-bytes
            old.unregister(self._conn)
        tried = set()
        for size in sizes:
            if size in tried:
                continue
            tried.add(size)
            try:
                self.region = Region(self._conn, size)
                return True
            except errors.ConnectionFailed:
                raise
            except errors.TooLarge:
                continue  # over --max-shm-bytes: a smaller region may fit
            except OSError as e:
                if e.errno in _NO_ROOM_ERRNOS:
                    continue
                self._refuse(e)
                return False
            except (errors.KrylovError, AttributeError) as e:
                # UNSUPPORTED, an old server, no memfd_create; or no answer in time (the region
                # may be registered later: never guess its id, never try again)
                self._refuse(e)
                return False
        self.too_large = nbytes if self.too_large is None else min(self.too_large, nbytes)
        self._skipped = 0
        return False

    def _refuse(self, e):
        self.enabled = False
        self.refused = str(e)

    def close(self):
        """Drop the client's mapping. No request: the connection's end drops the server's."""
        if self.region is not None:
            self.region.release()
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


def _address(arr):
    return arr.__array_interface__["data"][0]


class Pool:
    """The caller's own arrays in shared memory (Client.empty / Client.asarray).

    Each array of MIN_BYTES or more gets a region of its own, registered once; the array (with
    every view of it) holds the mapping, and when the last of them is gone the region is
    forgotten here and unregistered with the connection's next request (Connection.defer: a
    finalizer sends nothing itself, it may run in the middle of another request). A request may
    then name an array of the pool, or any contiguous slice of one, by reference instead of
    copying it, and a result may be written straight into one (`out`). Smaller arrays, and arrays
    the server has no room for (--max-shm-bytes, 64 regions a connection), are plain NumPy
    arrays."""

    def __init__(self, conn, arena):
        self._conn = conn
        self._arena = arena
        self._regions = {}  # region id -> (first byte's address, bytes)
        self.refused = None  # why the last region could not be had

    def empty(self, shape, dtype, order="C"):
        dtype = np.dtype(dtype)
        count = 1
        for n in (shape if isinstance(shape, (tuple, list)) else (shape,)):
            count *= int(n)
        nbytes = count * dtype.itemsize
        if not self._arena.enabled or nbytes < MIN_BYTES:
            return np.empty(shape, dtype=dtype, order=order)
        try:
            region = Region(self._conn, _round_up(nbytes, _PAGE), mapping=_Mapping)
        except errors.ConnectionFailed:
            raise
        except (errors.KrylovError, OSError) as e:  # no room: a plain array does
            self.refused = str(e)
            return np.empty(shape, dtype=dtype, order=order)
        arr = np.ndarray(shape, dtype=dtype, buffer=region.map, order=order)
        self._regions[region.id] = (_address(arr), region.nbytes)
        weakref.finalize(region.map, self._forget, region.id)
        return arr

    def _forget(self, region_id):
        self._regions.pop(region_id, None)
        self._conn.defer("shm.unregister", {"shm": region_id})

    def locate(self, arr):
        """(region id, offset, bytes) of an ndarray's bytes inside a region of the pool, or None.
        The array must be contiguous (C or Fortran order: the caller checks which it needs)."""
        if not self._regions or not isinstance(arr, np.ndarray) or arr.nbytes == 0:
            return None
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            return None
        start = _address(arr)
        for region_id, (base, nbytes) in self._regions.items():
            if base <= start and start + arr.nbytes <= base + nbytes:
                return region_id, start - base, arr.nbytes
        return None

    def __len__(self):
        return len(self._regions)


def overlaps(a, b):
    """Whether two (region id, offset, bytes) share a byte."""
    return (a is not None and b is not None and a[0] == b[0] and a[1] < b[1] + b[2]
            and b[1] < a[1] + a[2])


def as_ref(located):
    region_id, offset, nbytes = located
    return {"shm": region_id, "offset": offset, "bytes": nbytes}
