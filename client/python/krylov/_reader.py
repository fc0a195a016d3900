"""A streaming msgpack reader: one message at a time from a byte stream, large bins read straight
into their final buffer.

The reader never touches a socket: it pulls bytes through `read_into(view) -> int` (a socket's
recv_into, or a test's stream; 0 means the stream ended). A message that arrives whole in the
first read is decoded by msgpack's C unpacker; otherwise the message head is parsed here, and on
reaching a bin of `direct_bytes` or more, the reader allocates a NumPy uint8 array of
the bin's size, copies the few bytes of it already buffered and reads the rest into the array
itself (`read_into` on a view of it): the bytes of a large result cross from the kernel into the
array that the client hands back, with no copy on the way. Decoding matches
`msgpack.unpackb(raw=False, strict_map_key=False)`, except that a large bin comes back as that
uint8 array instead of `bytes` (both are buffers: np.frombuffer takes either).

Errors: `Truncated` when the stream ends inside a message (or before one), `Malformed` for bytes
that are not msgpack. A read that raises (a timeout) leaves the reader as it was, so the message
can be read again later, unless a large bin was being read into its array (`broken`): then the
stream cannot be resumed and its owner must close it.
"""

import struct

import msgpack
import numpy as np

# Bins this large or larger are read straight into their own array.
DIRECT_BYTES = 64 << 10
# One read's size while parsing a message head (the first read of a message too): small, so that
# little of a large bin goes through the buffer.
RECV_BYTES = 64 << 10
MAX_DEPTH = 200  # two Python frames a level: inside the interpreter's default limit

_UNPACK_OPTIONS = {"raw": False, "strict_map_key": False}

# type byte -> (struct format, size) of the fixed-size scalars
_SCALARS = {
    0xCA: (">f", 4), 0xCB: (">d", 8),
    0xCC: (">B", 1), 0xCD: (">H", 2), 0xCE: (">I", 4), 0xCF: (">Q", 8),
    0xD0: (">b", 1), 0xD1: (">h", 2), 0xD2: (">i", 4), 0xD3: (">q", 8),
}
# type byte -> (kind, size of the length field) of the variable-size values
_SIZED = {
    0xC4: ("bin", 1), 0xC5: ("bin", 2), 0xC6: ("bin", 4),
    0xC7: ("ext", 1), 0xC8: ("ext", 2), 0xC9: ("ext", 4),
    0xD9: ("str", 1), 0xDA: ("str", 2), 0xDB: ("str", 4),
    0xDC: ("array", 2), 0xDD: ("array", 4),
    0xDE: ("map", 2), 0xDF: ("map", 4),
}
_LENGTHS = {1: ">B", 2: ">H", 4: ">I"}
_FIXEXT = {0xD4: 1, 0xD5: 2, 0xD6: 4, 0xD7: 8, 0xD8: 16}


class Truncated(Exception):
    """The stream ended inside a message (`started`: some of it had arrived) or before one."""

    def __init__(self, message, started):
        super().__init__(message)
        self.started = started


class Malformed(Exception):
    """Bytes that are not msgpack."""


def _ext(code, data):
    if code == -1:
        return msgpack.Timestamp.from_bytes(bytes(data))
    return msgpack.ExtType(code, data)


class StreamReader:
    """Messages from read_into, one at a time (see the module's comment)."""

    def __init__(self, read_into, *, direct_bytes=DIRECT_BYTES, recv_bytes=RECV_BYTES):
        assert direct_bytes >= 1 and recv_bytes >= 1
        self._read_into = read_into
        self.direct_bytes = direct_bytes
        self._buf = bytearray()
        self._pos = 0  # where the next message starts in _buf
        self._scratch = memoryview(bytearray(recv_bytes))
        self.broken = False  # a large bin's read was interrupted: the stream is lost
        self.direct_reads = 0  # bins read straight into their array (for tests)

    def next_message(self):
        """The next message; raises Truncated, Malformed, or what read_into raises."""
        if self.broken:
            raise Malformed("the stream was interrupted inside a large bin")
        if self._pos:
            del self._buf[: self._pos]  # O(1) in CPython: a bytearray drops its head in place
            self._pos = 0
        if not self._buf:
            self._fill_to(1, started=False)
        try:
            msg = msgpack.unpackb(self._buf, **_UNPACK_OPTIONS)
            self._pos = len(self._buf)
            return msg
        except msgpack.ExtraData as e:
            self._pos = len(self._buf) - len(e.extra)
            return e.unpacked
        except (ValueError, TypeError, msgpack.UnpackException):
            pass  # incomplete (or bad): the parser below reads on, or names the fault
        value, end = self._parse(0, 0)
        self._pos = end
        self.broken = False
        return value

    def _fill_to(self, end, started=True):
        """Read until _buf holds `end` bytes."""
        while len(self._buf) < end:
            n = self._read_into(self._scratch)
            if not n:
                have = len(self._buf)
                if not started and not have:
                    raise Truncated("the stream ended", started=False)
                raise Truncated(f"the stream ended inside a message (after {have} of at least "
                                f"{end} bytes)", started=True)
            self._buf += self._scratch[:n]

    def _take(self, p, n):
        self._fill_to(p + n)
        return bytes(memoryview(self._buf)[p : p + n]), p + n

    def _take_direct(self, p, n):
        """n bytes at p, into a fresh uint8 array: those already buffered copied, the rest read
        into the array itself. The parse goes on at the end of _buf (the bytes read into the
        array never enter it)."""
        out = np.empty(n, dtype=np.uint8)
        view = memoryview(out)
        have = min(n, len(self._buf) - p)
        if have > 0:
            view[:have] = memoryview(self._buf)[p : p + have]
        rest = view[have:]
        if rest.nbytes:
            self.broken = True  # until the message ends: its bytes are no longer all in _buf
            while rest.nbytes:
                k = self._read_into(rest)
                if not k:
                    raise Truncated(f"the stream ended inside a bin ({n - rest.nbytes} of {n} "
                                    "bytes)", started=True)
                rest = rest[k:]
        self.direct_reads += 1
        return out, p + max(have, 0)

    def _length(self, p, size):
        self._fill_to(p + size)
        return struct.unpack_from(_LENGTHS[size], self._buf, p)[0], p + size

    def _parse(self, p, depth):
        if depth > MAX_DEPTH:
            raise Malformed(f"nested deeper than {MAX_DEPTH} levels")
        self._fill_to(p + 1)
        b = self._buf[p]
        p += 1
        if b <= 0x7F:
            return b, p
        if b >= 0xE0:
            return b - 0x100, p
        if b <= 0x8F:
            return self._map(p, b & 0x0F, depth)
        if b <= 0x9F:
            return self._array(p, b & 0x0F, depth)
        if b <= 0xBF:
            return self._str(p, b & 0x1F)
        if b == 0xC0:
            return None, p
        if b == 0xC2:
            return False, p
        if b == 0xC3:
            return True, p
        scalar = _SCALARS.get(b)
        if scalar is not None:
            fmt, size = scalar
            self._fill_to(p + size)
            return struct.unpack_from(fmt, self._buf, p)[0], p + size
        if b in _FIXEXT:
            self._fill_to(p + 1)
            code = struct.unpack_from(">b", self._buf, p)[0]
            data, p = self._take(p + 1, _FIXEXT[b])
            return _ext(code, data), p
        sized = _SIZED.get(b)
        if sized is None:
            raise Malformed(f"byte 0x{b:02x} starts no msgpack value")
        kind, size = sized
        n, p = self._length(p, size)
        if kind == "str":
            return self._str(p, n)
        if kind == "bin":
            return self._bin(p, n)
        if kind == "array":
            return self._array(p, n, depth)
        if kind == "map":
            return self._map(p, n, depth)
        self._fill_to(p + 1)
        code = struct.unpack_from(">b", self._buf, p)[0]
        data, p = self._take(p + 1, n)  # msgpack.ExtType holds bytes: buffered
        return _ext(code, data), p

    def _bin(self, p, n):
        if n >= self.direct_bytes:
            return self._take_direct(p, n)
        return self._take(p, n)

    def _str(self, p, n):
        data, p = self._take(p, n)
        try:
            return data.decode("utf-8"), p
        except UnicodeDecodeError as e:
            raise Malformed(f"a str that is not UTF-8: {e}") from None

    def _array(self, p, n, depth):
        items = []
        for _ in range(n):
            item, p = self._parse(p, depth + 1)
            items.append(item)
        return items, p

    def _map(self, p, n, depth):
        d = {}
        for _ in range(n):
            key, p = self._parse(p, depth + 1)
            value, p = self._parse(p, depth + 1)
            try:
                d[key] = value
            except TypeError:
                raise Malformed(f"a map key of type {type(key).__name__}") from None
        return d, p
