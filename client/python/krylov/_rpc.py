"""msgpack-rpc over one TCP connection (docs/PROTOCOL.md, "Envelope").

A request is `[0, msgid, method, [params]]`; the server answers `[1, msgid, error, result]` and,
while a solve runs, may send notifications `[2, "solve.progress", [{msgid, rhs, iteration,
residual}]]` in between. `Connection.call` writes one request and reads messages until the
response with its msgid arrives, handing the notifications addressed to that msgid to a callback
on the way; responses to requests abandoned earlier (a client timeout, Ctrl-C) are skipped.

Arrays go out without a copy: a parameter given as `Bin(buffer)` is written as a msgpack bin header
followed by the caller's own buffer (numpy memory, via memoryview), so only the small parts of a
request are packed, and the request leaves in one sendmsg of [head, array, tail] (TLS: sendall of
each). Replies are read by _reader.StreamReader: a large bin is read with recv_into straight into
a fresh NumPy uint8 array, which the client views with np.frombuffer (no further copy); small
replies are decoded by msgpack's C unpacker.
"""

import socket
import ssl
import struct

import msgpack

from . import _reader, errors

DEFAULT_PORT = 7373

# Bins smaller than this are packed with the rest of the request (one send for small requests);
# larger ones are sent straight from the caller's buffer.
_INLINE_BIN_BYTES = 64 * 1024
# Each sendall gets the whole timeout (Python's timeout bounds a sendall as a whole), so large
# bins go out in steps over TLS: the client's timeout is then "this long without progress", as for
# recv. sendmsg returns after each partial send, which gives the same.
_SEND_STEP = 4 << 20
_IOV_MAX = 512


class _ClientTimeout(errors.Timeout):
    """The client's own timeout passed while waiting (the request is cancelled on the server)."""


class Bin:
    """A buffer to send as a msgpack bin without copying it (any C-contiguous buffer)."""

    __slots__ = ("view",)

    def __init__(self, buffer):
        view = memoryview(buffer)
        if not view.c_contiguous:
            raise ValueError("Bin needs a contiguous buffer")
        self.view = view.cast("B") if view.format != "B" or view.ndim != 1 else view

    @property
    def nbytes(self):
        return self.view.nbytes


def parse_address(address):
    """'host:port', 'host' (port 7373), '[::1]:7373' or ':port' -> (host, port)."""
    if not isinstance(address, str) or not address:
        raise errors.BadRequest(f"bad server address {address!r}: use HOST:PORT")
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise errors.BadRequest(f"bad server address {address!r}: no closing ']'")
        host, rest = address[1:end], address[end + 1 :]
        if rest and not rest.startswith(":"):
            raise errors.BadRequest(f"bad server address {address!r}")
        port = rest[1:] if rest else ""
    elif address.count(":") > 1:  # a bare IPv6 address
        host, port = address, ""
    else:
        host, _, port = address.partition(":")
    if not host:
        host = "127.0.0.1"
    if not port:
        return host, DEFAULT_PORT
    try:
        number = int(port)
    except ValueError:
        raise errors.BadRequest(f"bad port {port!r} in server address {address!r}") from None
    if not 0 < number < 65536:
        raise errors.BadRequest(f"port {number} in server address {address!r} is out of range")
    return host, number


def _bin_header(n):
    if n < 1 << 8:
        return struct.pack(">BB", 0xC4, n)
    if n < 1 << 16:
        return struct.pack(">BH", 0xC5, n)
    if n < 1 << 32:
        return struct.pack(">BI", 0xC6, n)
    raise errors.TooLarge(f"an array of {n} bytes does not fit one message (msgpack bins: < 4 GiB)")


def _pack_value(packer, chunks, value):
    """Pack value; a large Bin, also inside lists and dicts (solve.batch's items), becomes its own
    chunk instead of a copy."""
    if isinstance(value, Bin):
        n = value.nbytes
        if n < _INLINE_BIN_BYTES:
            packer.pack(value.view)
        else:
            chunks.append(packer.bytes() + _bin_header(n))
            packer.reset()
            chunks.append(value.view)
    elif isinstance(value, dict) and not any(isinstance(v, (Bin, dict, list, tuple))
                                             for v in value.values()):
        packer.pack(value)  # nothing to keep out of the copy: one call into msgpack
    elif isinstance(value, dict):
        packer.pack_map_header(len(value))
        for key, item in value.items():
            packer.pack(key)
            _pack_value(packer, chunks, item)
    elif isinstance(value, (list, tuple)) and any(isinstance(v, (Bin, dict)) for v in value):
        packer.pack_array_header(len(value))
        for item in value:
            _pack_value(packer, chunks, item)
    else:
        packer.pack(value)


def encode_request(msgid, method, params):
    """The request as a list of buffers to send in order (large Bin values are not copied)."""
    packer = msgpack.Packer(use_bin_type=True, autoreset=False)
    chunks = []
    packer.pack_array_header(4)
    packer.pack(0)
    packer.pack(msgid)
    packer.pack(method)
    if params:
        packer.pack_array_header(1)
        _pack_value(packer, chunks, params)
    else:
        packer.pack_array_header(0)
    chunks.append(packer.bytes())
    return chunks


def _send_views(sock, chunks):
    """Send the buffers in order with sendmsg (one system call for a whole request when the
    socket takes it), going on after partial sends without copying."""
    views = [v for v in (memoryview(c) for c in chunks) if v.nbytes]
    views = [v if v.format == "B" and v.ndim == 1 else v.cast("B") for v in views]
    while views:
        sent = sock.sendmsg(views[:_IOV_MAX])
        while sent and views:
            first = views[0].nbytes
            if sent >= first:
                sent -= first
                views.pop(0)
            else:
                views[0] = views[0][sent:]
                sent = 0


def tls_context(cafile=None, certfile=None, keyfile=None):
    """A client-side ssl.SSLContext: the server's certificate is verified against cafile (None:
    the system's trust store) and must name the host or IP address connected to; certfile/keyfile
    are the client's own certificate for a server started with --tls-ca. TLS 1.2 at least."""
    try:
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if certfile is not None:
            ctx.load_cert_chain(certfile, keyfile)
        elif keyfile is not None:
            raise errors.BadRequest("keyfile given without certfile")
    except (OSError, ssl.SSLError) as e:
        raise errors.BadRequest(f"cannot set up TLS: {e}") from None
    return ctx


class Connection:
    """One connection to krylovd ("host:port", inside TLS when `tls` (an ssl.SSLContext) is given,
    or "unix:PATH", where file descriptors can travel with a request: shared memory). Not
    thread-safe: use one per thread."""

    def __init__(self, address, timeout=None, connect_timeout=30.0, tls=None):
        self.address = address
        self.timeout = timeout
        if isinstance(address, str) and address.startswith("unix:"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(connect_timeout)
            try:
                sock.connect(address[5:])
            except OSError as e:
                sock.close()
                raise errors.ConnectionFailed(f"cannot connect to {address}: {e}") from None
        else:
            host, port = parse_address(address)
            try:
                sock = socket.create_connection((host, port), timeout=connect_timeout)
            except OSError as e:
                raise errors.ConnectionFailed(f"cannot connect to {address}: {e}") from None
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if tls is not None:
                try:  # the handshake is part of connecting: connect_timeout bounds it
                    sock = tls.wrap_socket(sock, server_hostname=host)
                except (OSError, ssl.SSLError) as e:
                    sock.close()
                    raise errors.ConnectionFailed(
                        f"TLS handshake with {address} failed: {e}") from None
        sock.settimeout(timeout)
        self._sock = sock
        self._reader = _reader.StreamReader(sock.recv_into)
        self._sendmsg = not isinstance(sock, ssl.SSLSocket)
        self._next_msgid = 1
        self._deferred = []  # (method, params) to send before the next request, answers skipped
        self.answered = 0  # the msgid of the last request whose response wait() read

    @property
    def closed(self):
        return self._sock is None

    def close(self):
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _fail(self, exc):
        self.close()
        return exc

    @property
    def is_unix(self):
        return self._sock is not None and self._sock.family == socket.AF_UNIX

    def _send(self, chunks, fds=()):
        if self._sock is None:
            raise errors.ConnectionFailed(f"not connected to {self.address} (the client is closed)")
        try:
            if fds:  # the descriptors go with the request's first bytes (shm.register)
                first = memoryview(chunks[0])
                sent = socket.send_fds(self._sock, [first], list(fds))
                chunks = [first[sent:]] + list(chunks[1:])
            if self._sendmsg:
                _send_views(self._sock, chunks)
            else:
                for chunk in chunks:
                    view = memoryview(chunk)
                    for offset in range(0, len(view), _SEND_STEP):
                        self._sock.sendall(view[offset : offset + _SEND_STEP])
        except socket.timeout:
            # half a request on the stream cannot be taken back
            raise self._fail(
                errors.Timeout(f"sending to {self.address} took longer than {self.timeout} s")
            ) from None
        except OSError as e:
            raise self._fail(
                errors.ConnectionFailed(f"connection to {self.address} lost while sending: {e}")
            ) from None
        except BaseException:
            self.close()
            raise

    def defer(self, method, params):
        """Send this request before the next one, its answer skipped (safe from a finalizer: it
        only queues)."""
        self._deferred.append((method, params))

    def send_request(self, method, params, fds=()):
        """Write one request (with file descriptors beside it on a Unix socket); returns its
        msgid."""
        while self._deferred and self._sock is not None:
            deferred = self._deferred.pop(0)
            self._send(encode_request(self._next_msgid, *deferred))
            self._next_msgid += 1
        msgid = self._next_msgid
        self._next_msgid += 1
        self._send(encode_request(msgid, method, params), fds)
        return msgid

    def _cancel_quietly(self, msgid):
        """Ask the server to stop request msgid; its answer (and the cancel's) will be skipped."""
        if self._sock is None:
            return
        try:
            self.send_request("job.cancel", {"msgid": msgid})
        except errors.KrylovError:
            pass

    def _next_message(self):
        try:
            return self._reader.next_message()
        except socket.timeout:
            if self._reader.broken:  # inside a large bin: the stream cannot be resumed
                raise self._fail(errors.Timeout(
                    f"no answer from {self.address} within {self.timeout} s (in the middle of "
                    "a reply: the connection is closed)")) from None
            raise _ClientTimeout(
                f"no answer from {self.address} within {self.timeout} s"
            ) from None
        except _reader.Truncated as e:
            if not e.started:
                raise self._fail(
                    errors.ConnectionFailed(f"connection closed by the server at {self.address}")
                ) from None
            raise self._fail(errors.ConnectionFailed(
                f"connection to {self.address} closed in the middle of a reply: {e}")) from None
        except _reader.Malformed as e:
            raise self._fail(
                errors.ProtocolError(f"the server sent bytes that do not unpack: {e}")
            ) from None
        except OSError as e:
            raise self._fail(
                errors.ConnectionFailed(f"connection to {self.address} lost: {e}")
            ) from None

    def wait(self, msgid, on_progress=None):
        """Read until the response to msgid; return its result or raise its error.

        on_progress(params) is called for each solve.progress notification for msgid; if it returns
        True the request is cancelled on the server (the call then raises Cancelled, unless the
        result was already on its way). A client timeout, Ctrl-C or an exception from on_progress
        cancels the request on the server too, and the exception propagates.
        """
        if self._sock is None:
            raise errors.ConnectionFailed(f"not connected to {self.address} (the client is closed)")
        cancel_sent = False
        try:
            while True:
                msg = self._next_message()
                if not isinstance(msg, (list, tuple)) or not msg:
                    raise self._fail(errors.ProtocolError(f"not a msgpack-rpc message: {msg!r:.80}"))
                kind = msg[0]
                if kind == 1 and len(msg) == 4:
                    _, rid, error, result = msg
                    if rid == msgid:
                        self.answered = msgid
                        if error is not None:
                            raise errors.error_from_wire(error)
                        return result
                    if rid == 0 and error is not None:
                        # the server refused the connection itself (BUSY) and closes it
                        raise self._fail(errors.error_from_wire(error))
                    continue  # the answer to an abandoned request
                if kind == 2 and len(msg) == 3:
                    _, method, params = msg
                    if method != "solve.progress" or on_progress is None:
                        continue
                    if isinstance(params, (list, tuple)) and len(params) == 1:
                        params = params[0]
                    if not isinstance(params, dict) or params.get("msgid") != msgid:
                        continue
                    if on_progress(params) is True and not cancel_sent:
                        cancel_sent = True
                        self.send_request("job.cancel", {"msgid": msgid})
                    continue
                raise self._fail(errors.ProtocolError(f"not a msgpack-rpc message: {msg!r:.80}"))
        except _ClientTimeout:
            self._cancel_quietly(msgid)
            raise
        except errors.KrylovError:
            raise
        except BaseException:
            # Ctrl-C or an exception from the callback: stop the work on the server too
            self._cancel_quietly(msgid)
            raise

    def call(self, method, params=None, on_progress=None, fds=()):
        return self.wait(self.send_request(method, params or {}, fds), on_progress)
