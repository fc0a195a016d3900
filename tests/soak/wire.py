"""msgpack-rpc to krylovd over a plain socket, for the soak's clients (docs/PROTOCOL.md).

Only `msgpack` is used, not the krylov package: the soak speaks the wire protocol itself, so the
hostile clients can send what no client library would, and the honest ones see exactly what the
daemon answered.
"""

import socket
import struct
import time

import msgpack
import numpy as np


class Closed(Exception):
    """The daemon closed the connection (or it broke) before the answer came."""


class Timeout(Exception):
    """No answer within the caller's deadline."""


def request(msgid, method, params):
    return msgpack.packb([0, msgid, method, [params]], use_bin_type=True)


def f64(a):
    return np.ascontiguousarray(a, "<f8").tobytes()


def i32(a):
    return np.ascontiguousarray(a, "<i4").tobytes()


def connect(port, timeout=30.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def reset(sock):
    """Close with an RST instead of a FIN (SO_LINGER 0): the abrupt end of a crashed client."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class Conn:
    """One connection, one request at a time; answers are matched by msgid, notifications dropped."""

    def __init__(self, port):
        self.sock = connect(port)
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=1 << 31)
        self.msgid = 0

    def call(self, method, params, timeout):
        """(error map or None, result) of one request; Closed or Timeout when no answer comes."""
        self.msgid += 1
        deadline = time.monotonic() + timeout
        try:
            self.sock.sendall(request(self.msgid, method, params))
        except OSError as e:
            raise Closed(f"send failed: {e}") from e
        while True:
            for msg in self.unpacker:
                if isinstance(msg, list) and len(msg) == 4 and msg[0] == 1 and msg[1] == self.msgid:
                    return msg[2], msg[3]
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(f"{method}: no answer in {timeout:.0f} s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout as e:
                raise Timeout(f"{method}: no answer in {timeout:.0f} s") from e
            except OSError as e:
                raise Closed(f"recv failed: {e}") from e
            if not data:
                raise Closed(f"{method}: the daemon closed the connection")
            self.unpacker.feed(data)

    def close(self):
        self.sock.close()
