"""Exceptions raised by the krylov client.

Every error the server answers with becomes an instance of a KrylovError subclass chosen by the
wire code (docs/PROTOCOL.md, "Errors"); `.code` is the wire code and `.message` the server's text,
which names the field that was wrong:

    try:
        client.spmv(matrix_id, x)
    except krylov.NotFound:
        ...                                  # no matrix with that id on this server
    except krylov.BadRequest as e:
        print(e.code, e.message)             # BAD_REQUEST x has 10 values but matrix ... has 12 columns

Failures on the client's side of the wire use the same base class: ConnectionFailed (code
"CONNECTION": cannot connect, or the connection broke; also an OSError), ProtocolError (code
"PROTOCOL": the server sent bytes that are not msgpack-rpc), and Timeout (code "TIMEOUT", also a
TimeoutError) when the client's own timeout passes, as when the server's `timeout_ms` does.
"""

import builtins

__all__ = [
    "KrylovError",
    "BadRequest",
    "NotFound",
    "TooLarge",
    "DeviceMemory",
    "DeviceError",
    "Busy",
    "Cancelled",
    "Timeout",
    "Unsupported",
    "NotSPD",
    "Unauthenticated",
    "Forbidden",
    "Quota",
    "StorageFull",
    "InternalError",
    "ConnectionFailed",
    "ProtocolError",
    "error_from_wire",
]


class KrylovError(Exception):
    """Base of every krylov error: `.code` (the wire code, e.g. "NOT_FOUND") and `.message`."""

    wire_code = "INTERNAL"

    def __init__(self, message, code=None):
        super().__init__(message)
        self.message = message
        self.code = code if code is not None else type(self).wire_code

    def __str__(self):
        return f"{self.code}: {self.message}"


class BadRequest(KrylovError):
    """The request was malformed or inconsistent (a wrong length, an unknown parameter, ...)."""

    wire_code = "BAD_REQUEST"


class NotFound(KrylovError):
    """No matrix with that id on the server (or no request with that msgid for job.cancel)."""

    wire_code = "NOT_FOUND"


class TooLarge(KrylovError):
    """Over one of the server's limits (message size, rows, nnz, nrhs, ...)."""

    wire_code = "TOO_LARGE"


class DeviceMemory(KrylovError):
    """The matrix or vectors do not fit the device, even after evicting unpinned matrices."""

    wire_code = "DEVICE_MEMORY"


class DeviceError(KrylovError):
    """The OpenCL runtime failed on the server; the message has the CL error name."""

    wire_code = "DEVICE_ERROR"


class Busy(KrylovError):
    """The server's device queue is full (or it has too many connections): try again later."""

    wire_code = "BUSY"


class Cancelled(KrylovError):
    """The request was cancelled (by a progress callback returning True, job.cancel, shutdown)."""

    wire_code = "CANCELLED"


class Timeout(KrylovError, builtins.TimeoutError):
    """A deadline passed: the request's `timeout_ms` on the server, or the client's timeout."""

    wire_code = "TIMEOUT"


class Unsupported(KrylovError):
    """Valid, but not something this server or device can do (float64 without fp64, ...)."""

    wire_code = "UNSUPPORTED"


class NotSPD(KrylovError):
    """The matrix was proved not symmetric positive definite before iterating."""

    wire_code = "NOT_SPD"


class Unauthenticated(KrylovError):
    """No `auth` on this connection yet, a wrong name or token, or the user was removed."""

    wire_code = "UNAUTHENTICATED"


class Forbidden(KrylovError):
    """The user's role may not call this method (read < write < admin)."""

    wire_code = "FORBIDDEN"


class Quota(KrylovError):
    """Over one of the user's limits (matrices, device bytes, state bytes, jobs in flight); the
    message names the limit and by how much. Nothing was done."""

    wire_code = "QUOTA"


class StorageFull(KrylovError):
    """The server's disk (its state directory) is full: the matrix was not stored, and nothing
    stored before was touched. Try again once the operator has freed space."""

    wire_code = "STORAGE_FULL"


class InternalError(KrylovError):
    """Host memory exhausted, a file-system error in the server's state directory, or a bug."""

    wire_code = "INTERNAL"


class ConnectionFailed(KrylovError, builtins.ConnectionError):
    """Cannot connect to the server, or the connection broke (client side; code "CONNECTION")."""

    wire_code = "CONNECTION"


class ProtocolError(KrylovError):
    """The server sent something that is not msgpack-rpc (client side; code "PROTOCOL")."""

    wire_code = "PROTOCOL"


_BY_CODE = {
    cls.wire_code: cls
    for cls in (
        BadRequest,
        NotFound,
        TooLarge,
        DeviceMemory,
        DeviceError,
        Busy,
        Cancelled,
        Timeout,
        Unsupported,
        NotSPD,
        Unauthenticated,
        Forbidden,
        Quota,
        StorageFull,
        InternalError,
    )
}


def error_from_wire(error):
    """The exception for a response's error object {"code": STR, "message": STR}."""
    if isinstance(error, dict):
        code = error.get("code")
        message = error.get("message")
    else:
        code, message = None, None
    if not isinstance(code, str):
        code = "INTERNAL"
    if not isinstance(message, str):
        message = repr(error)
    cls = _BY_CODE.get(code, KrylovError)
    return cls(message, code)
