"""The Python client's streaming msgpack reader (client/python/krylov/_reader.py, issue 35 part 4).

Against msgpack's own decoding: fresh random messages of every type (nil, bools, ints of every
width, floats, str, bin, ext and timestamps, nested arrays and maps), several messages back to
back, delivered in random chunk sizes (one byte at a time too) and with bins crossing the reader's
chunk boundaries; a large bin is read straight into a uint8 array holding the same bytes. A stream
that ends inside a message raises Truncated (naming how far it got), before one Truncated with
started False; bytes that are not msgpack raise Malformed; a read that times out before a large
bin leaves the message to be read again.
"""

import struct
import unittest

import msgpack
import numpy as np

from krylov import _reader
from kd_daemon import make_rng


class Stream:
    """read_into over bytes, in chunks of the sizes a generator picks (0: the stream ends)."""

    def __init__(self, data, rng, max_chunk=None, fail_at=None):
        self.data = memoryview(data)
        self.pos = 0
        self.rng = rng
        self.max_chunk = max_chunk
        self.fail_at = fail_at  # raise TimeoutError once, on the first read at or past here

    def __call__(self, view):
        if self.fail_at is not None and self.pos >= self.fail_at:
            self.fail_at = None
            raise TimeoutError("timed out")
        n = min(view.nbytes, len(self.data) - self.pos)
        if self.max_chunk is not None:
            n = min(n, int(self.rng.integers(1, self.max_chunk + 1)))
        view[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


def random_value(rng, depth=0):
    kind = int(rng.integers(0, 14 if depth < 3 else 10))
    if kind == 0:
        return None
    if kind == 1:
        return bool(rng.integers(0, 2))
    if kind == 2:  # every int width, both signs
        bits = int(rng.choice([4, 7, 8, 15, 16, 31, 32, 63]))
        v = int(rng.integers(0, 1 << bits, dtype=np.uint64))
        return -v - 1 if rng.integers(0, 2) else v
    if kind == 3:
        return int(rng.integers(0, 1 << 63, dtype=np.uint64)) * 2 + 1  # uint64 past int64
    if kind == 4:
        return float(rng.standard_normal())
    if kind == 5:
        n = int(rng.choice([0, 5, 31, 32, 300, 70000]))
        return "".join(chr(int(c)) for c in rng.integers(32, 0x3000, size=n))
    if kind == 6:
        n = int(rng.choice([0, 1, 255, 256, 65535, 65536, 200000]))
        return rng.integers(0, 256, size=n, dtype=np.uint8).tobytes()
    if kind == 7:
        n = int(rng.choice([1, 2, 4, 8, 16, 3, 300, 70000]))
        return msgpack.ExtType(int(rng.integers(0, 128)), bytes(n))
    if kind == 8:
        return msgpack.Timestamp(int(rng.integers(0, 1 << 33)), int(rng.integers(0, 10**9)))
    if kind == 9:
        return "solve.progress"
    if kind in (10, 11):
        return [random_value(rng, depth + 1) for _ in range(int(rng.choice([0, 3, 15, 16, 20])))]
    keys = [str(i) for i in range(int(rng.choice([0, 2, 15, 16, 17])))] + [int(rng.integers(0, 9))]
    return {k: random_value(rng, depth + 1) for k in keys}


def same(a, b):
    """Equal, a uint8 array from the reader standing for bytes."""
    if isinstance(a, np.ndarray):
        return a.dtype == np.uint8 and isinstance(b, bytes) and a.tobytes() == b
    if isinstance(a, msgpack.ExtType) and isinstance(b, msgpack.ExtType):
        if isinstance(a.data, np.ndarray):
            return a.code == b.code and same(a.data, b.data)
        return a == b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


class TestReader(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.rng = make_rng()

    def check_stream(self, messages, max_chunk, direct_bytes=_reader.DIRECT_BYTES,
                     recv_bytes=_reader.RECV_BYTES):
        data = b"".join(msgpack.packb(m, use_bin_type=True) for m in messages)
        reader = _reader.StreamReader(Stream(data, self.rng, max_chunk), direct_bytes=direct_bytes,
                                      recv_bytes=recv_bytes)
        for m in messages:
            expect = msgpack.unpackb(msgpack.packb(m, use_bin_type=True), raw=False,
                                     strict_map_key=False)
            got = reader.next_message()
            self.assertTrue(same(got, expect), f"{got!r:.200} != {expect!r:.200}")
        with self.assertRaises(_reader.Truncated) as cm:
            reader.next_message()
        self.assertFalse(cm.exception.started)
        return reader

    def test_random_messages_match_msgpack(self):
        for chunk in (None, 1, 7, 4096, 70000):
            messages = [random_value(self.rng) for _ in range(40 if chunk != 1 else 3)]
            self.check_stream(messages, chunk)

    def test_small_reader_buffers(self):
        # bins of every size around direct_bytes, the reader's buffer smaller than a bin header
        messages = [[1, 7, None, {"y": bytes(range(256)) * n, "time_ms": 0.5}]
                    for n in (0, 1, 3, 4, 5, 40)]
        self.check_stream(messages, None, direct_bytes=1024, recv_bytes=3)
        self.check_stream(messages, 5, direct_bytes=1024, recv_bytes=1000)

    def test_large_bin_read_into_its_array(self):
        payload = self.rng.standard_normal(300000).tobytes()
        for chunk in (None, 100, 65536, 65537):
            data = msgpack.packb([1, 3, None, {"dtype": "float64", "y": payload}],
                                 use_bin_type=True)
            reader = _reader.StreamReader(Stream(data, self.rng, chunk))
            msg = reader.next_message()
            y = msg[3]["y"]
            self.assertIsInstance(y, np.ndarray)
            self.assertEqual(y.tobytes(), payload)
            self.assertEqual(reader.direct_reads, 1)
            self.assertFalse(reader.broken)
            self.assertTrue(np.frombuffer(y, "<f8").flags.writeable)

    def test_bins_at_chunk_boundaries(self):
        # the stream's reads end exactly at a bin's header, inside it and at its end
        payload = bytes(self.rng.integers(0, 256, 100000, dtype=np.uint8))
        head = msgpack.packb([1, 9, None], use_bin_type=True)[:-1]
        data = msgpack.packb([1, 9, None, payload], use_bin_type=True)
        for cut in (len(head), len(head) + 1, len(head) + 5, len(data) - 1, len(data)):
            pieces = [data[:cut], data[cut:]]

            def read_into(view, pieces=pieces):
                while pieces and not pieces[0]:
                    pieces.pop(0)
                if not pieces:
                    return 0
                n = min(view.nbytes, len(pieces[0]))
                view[:n] = pieces[0][:n]
                pieces[0] = pieces[0][n:]
                return n

            msg = _reader.StreamReader(read_into).next_message()
            self.assertEqual(bytes(msg[3]), payload)

    def test_truncated_streams(self):
        data = msgpack.packb([1, 5, None, {"x": bytes(200000), "status": "converged"}],
                             use_bin_type=True)
        for end in (1, 3, 10, 5000, 100000, len(data) - 1):
            reader = _reader.StreamReader(Stream(data[:end], self.rng, 9000))
            with self.assertRaises(_reader.Truncated) as cm:
                reader.next_message()
            self.assertTrue(cm.exception.started)
            self.assertIn("ended inside", str(cm.exception))

    def test_malformed(self):
        for data in (b"\xc1", b"\x92\x01\xc1", b"\x81\x91\x01\x02",
                     b"\xa2\xff\xfe", b"\x91" * 2000 + b"\xc0"):
            reader = _reader.StreamReader(Stream(data, self.rng, None))
            with self.assertRaises(_reader.Malformed):
                reader.next_message()

    def test_timeout_before_a_large_bin_resumes(self):
        data = msgpack.packb([[2, "solve.progress", [{"msgid": 1}]], [1, 1, None,
                             {"x": bytes(200000)}]], use_bin_type=True)[1:]  # two messages
        head = msgpack.packb([2, "solve.progress", [{"msgid": 1}]], use_bin_type=True)
        stream = Stream(data, self.rng, 3, fail_at=len(head) + 4)
        reader = _reader.StreamReader(stream)
        self.assertEqual(reader.next_message()[1], "solve.progress")
        with self.assertRaises(TimeoutError):
            reader.next_message()
        self.assertFalse(reader.broken)
        msg = reader.next_message()  # read again from its first byte
        self.assertEqual(bytes(msg[3]["x"]), bytes(200000))

    def test_timeout_inside_a_large_bin_breaks_the_stream(self):
        data = msgpack.packb([1, 1, None, {"x": bytes(200000)}], use_bin_type=True)
        reader = _reader.StreamReader(Stream(data, self.rng, 4096, fail_at=100000))
        with self.assertRaises(TimeoutError):
            reader.next_message()
        self.assertTrue(reader.broken)
        with self.assertRaises(_reader.Malformed):
            reader.next_message()

    def test_scalar_encodings(self):
        # each fixed-width encoding, packed by hand where msgpack would pick a shorter one
        cases = [(b"\xcc\x05", 5), (b"\xcd\x00\x05", 5), (b"\xce\x00\x00\x00\x05", 5),
                 (b"\xcf" + struct.pack(">Q", 5), 5), (b"\xd0\xfb", -5), (b"\xd1\xff\xfb", -5),
                 (b"\xd2" + struct.pack(">i", -5), -5), (b"\xd3" + struct.pack(">q", -5), -5),
                 (b"\xca" + struct.pack(">f", 1.5), 1.5), (b"\xd9\x01a", "a"),
                 (b"\xda\x00\x01a", "a"), (b"\xdb\x00\x00\x00\x01a", "a"),
                 (b"\xdc\x00\x01\x01", [1]), (b"\xdd\x00\x00\x00\x01\x01", [1]),
                 (b"\xde\x00\x01\x01\x02", {1: 2}), (b"\xdf\x00\x00\x00\x01\x01\x02", {1: 2}),
                 (b"\xc5\x00\x01z", b"z"), (b"\xc6\x00\x00\x00\x01z", b"z")]
        for data, value in cases:
            for chunk in (None, 1):
                got = _reader.StreamReader(Stream(data, self.rng, chunk)).next_message()
                self.assertEqual(got, value, data)


if __name__ == "__main__":
    unittest.main()
