"""The krylov client: upload sparse matrices to krylovd once, then multiply and solve with them.

    import krylov
    with krylov.Client("127.0.0.1:7373") as kd:
        A = kd.put(scipy_sparse_matrix, name="poisson")    # MatrixInfo; A.id names it from now on
        y = kd.spmv(A, x)                                   # A @ x on the server's device
        C = kd.multiply(A, A, transpose_a=True)             # A.T @ A, kept on the server too
        res = kd.solve(A, b, rtol=1e-10)                    # SolveResult: res.x, res.status, ...

Arrays are sent as little-endian bins straight from numpy's memory when they are already
contiguous in the wire's dtype (one sendmsg), and results come back as np.frombuffer views of the
received bytes: a large bin is read with recv_into straight into its own array (_reader.py), so
no copies beyond the socket's. Small results are read-only views; `.copy()` one to change it, or
give spmv / solve an `out=` array to fill. On a Unix socket, `empty()` / `asarray()` give arrays
in shared memory that requests name where they lie, and that the server writes into as `out=`
(see empty() for the rule on results as views).
"""

import gzip
import os
import dataclasses
import time
from collections import namedtuple
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from . import _fastmem, _rpc, _shm, batch as _batch, errors
from .batch import BatchSolveResult, ItemResult, ManySolveResult
from .content_id import csr_content_id, pattern_hash

__all__ = ["Client", "MatrixInfo", "SolveResult", "BatchSolveResult", "ServerStatus", "Progress",
           "DEFAULT_ADDRESS"]

DEFAULT_ADDRESS = "127.0.0.1:7373"

_VALUE_DTYPES = {"float64": np.dtype("<f8"), "float32": np.dtype("<f4")}
_DTYPE_ALIASES = {
    "float64": "float64", "f8": "float64", "<f8": "float64", "double": "float64", "d": "float64",
    "float32": "float32", "f4": "float32", "<f4": "float32", "float": "float32", "single": "float32",
}

Progress = namedtuple("Progress", ["msgid", "rhs", "iteration", "residual"])
Progress.__doc__ = """A solve.progress notification: right-hand side `rhs` (0-based) is at
`iteration` with residual norm ||r|| = `residual` (the recurrence's value; the final residual in
SolveResult is recomputed as ||b - A x||)."""


@dataclass(frozen=True)
class MatrixInfo:
    """A matrix on the server (the matrix.put / matrix.info result). Pass it, or its `.id`, to
    spmv, solve, info, pin and drop."""

    id: str
    rows: int
    cols: int
    nnz: int
    dtype: str
    format: str
    device_bytes: int
    name: str = ""
    pinned: bool = False
    resident: bool = True
    uses: int = 0
    stats: dict = field(default_factory=dict)
    candidates: list = field(default_factory=list)
    format_detail: dict = field(default_factory=dict)  # how the format stored it (tiled's tiles)
    reorder: str = "none"  # the ordering kept inside the matrix: none, rcm or metis
    bandwidth: dict = field(default_factory=dict)  # {"before": A's, "after": what is stored}
    created: Optional[bool] = None  # matrix.put only: False when the matrix was already there
    spgemm: Optional[dict] = None  # matrix.multiply only: {"products", "nnz", "time_ms"}
    # square and a_ij == a_ji exactly (the server's scan at upload); None: the server does not say
    symmetric: Optional[bool] = None
    # put / multiply of a matrix already held in another format or ordering: the server says it
    # kept the stored one (the options were not applied); "" otherwise
    notice: str = ""
    # a batch (put_batch): how many systems of shape rows x cols it holds; 0 for one matrix
    batch: int = 0
    # the canonical pattern's hash, where the server knows it (put(..., like=) always says it)
    pattern: str = ""
    # its state file: persisted "sync" | "behind" | "none" (put's persist); durable once written
    persisted: str = ""
    durable: Optional[bool] = None
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def shape(self):
        return (self.rows, self.cols)

    @classmethod
    def from_wire(cls, d):
        if not isinstance(d, dict) or not isinstance(d.get("id"), str):
            raise errors.ProtocolError(f"the server's matrix info has no id: {d!r:.200}")
        return cls(
            id=d["id"],
            rows=int(d.get("rows", 0)),
            cols=int(d.get("cols", 0)),
            nnz=int(d.get("nnz", 0)),
            dtype=d.get("dtype", ""),
            format=d.get("format", ""),
            device_bytes=int(d.get("device_bytes", 0)),
            name=d.get("name", ""),
            pinned=bool(d.get("pinned", False)),
            resident=bool(d.get("resident", True)),
            uses=int(d.get("uses", 0)),
            stats=dict(d.get("stats") or {}),
            candidates=list(d.get("candidates") or []),
            format_detail=dict(d.get("format_detail") or {}),
            reorder=d.get("reorder", "none"),
            bandwidth=dict(d.get("bandwidth") or {}),
            created=d.get("created"),
            spgemm=dict(d["spgemm"]) if isinstance(d.get("spgemm"), dict) else None,
            symmetric=None if d.get("symmetric") is None else bool(d["symmetric"]),
            notice=d.get("notice") or "",
            batch=int(d.get("batch", 0)),
            pattern=d.get("pattern") or "",
            persisted=d.get("persisted") or "",
            durable=d.get("durable"),
            raw=d,
        )

    def __str__(self):
        return self.id


@dataclass(frozen=True)
class ServerStatus:
    """The server.status result."""

    version: str
    device: dict
    matrices: int
    device_bytes_used: int
    uptime_s: float
    requests: int
    errors: int
    connections: int
    queue_depth: int
    requests_by_method: dict = field(default_factory=dict)
    # The background OpenCL program warm-up: state ("building", "done", "off"), total, built,
    # failed, elapsed_ms, and the programs building and pending.
    warm_up: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def warm(self):
        """True once the server has built every OpenCL program (or builds none ahead)."""
        return self.warm_up.get("state", "done") in ("done", "off")

    @classmethod
    def from_wire(cls, d):
        if not isinstance(d, dict):
            raise errors.ProtocolError(f"the server's status is not a map: {d!r:.200}")
        return cls(
            version=d.get("version", ""),
            device=dict(d.get("device") or {}),
            matrices=int(d.get("matrices", 0)),
            device_bytes_used=int(d.get("device_bytes_used", 0)),
            uptime_s=float(d.get("uptime_s", 0.0)),
            requests=int(d.get("requests", 0)),
            errors=int(d.get("errors", 0)),
            connections=int(d.get("connections", 0)),
            queue_depth=int(d.get("queue_depth", 0)),
            requests_by_method=dict(d.get("requests_by_method") or {}),
            warm_up=dict(d.get("warm_up") or {}),
            raw=d,
        )


@dataclass(frozen=True)
class SolveResult:
    """What a solve returned.

    With a 1-D b: x has shape (n,); status ("converged", "max_iterations", "breakdown",
    "non_finite", or "stagnated": the residual stopped improving short of the tolerance, the
    accuracy the dtype reaches on the matrix, which relative_residual and message give), iterations, residual (||b - A x||, recomputed at the end), relative_residual
    (residual / ||b||) and message are scalars; history (with history=True) is an array of the
    residual norm at each check. With a 2-D b (n x k): x is (n, k) and those fields are lists /
    arrays with one entry per right-hand side. time_ms is the whole solve on the server. method
    and preconditioner name what ran (what method="auto" chose; "cg" and "jacobi" for "pcg").
    """

    x: np.ndarray
    status: Any
    iterations: Any
    residual: Any
    relative_residual: Any
    time_ms: float
    message: Any
    history: Any = None
    nrhs: int = 1
    method: str = ""
    preconditioner: str = ""
    anatomy: dict = field(default_factory=dict)  # where the server's time went (docs/PROTOCOL.md)
    # how the preconditioner came on a matrix put with like: "reused", "refreshed", "built fresh..."
    preconditioner_setup: str = ""
    # method "direct": the factor (solver, factored, factor_entries, factor_bytes, fill,
    # analyze_ms, factor_ms, solve_ms, ...; docs/PROTOCOL.md), else empty
    direct: dict = field(default_factory=dict)
    # method "auto": {"chosen": "direct" or "gmres+ilu0" ("" when none converged), "tried": a list
    # of {method, preconditioner, status, iterations, relative_residual, time_ms, message}, in the
    # order run}; else empty
    auto: dict = field(default_factory=dict)

    @property
    def residual_norm(self):
        return self.residual

    @property
    def converged(self):
        """True when every right-hand side converged."""
        if isinstance(self.status, str):
            return self.status == "converged"
        return all(s == "converged" for s in self.status)

    def __repr__(self):
        if self.nrhs == 1 and isinstance(self.status, str):
            return (
                f"SolveResult(status={self.status!r}, iterations={self.iterations}, "
                f"relative_residual={self.relative_residual:.3g}, time_ms={self.time_ms:.3f})"
            )
        return (
            f"SolveResult(nrhs={self.nrhs}, status={list(self.status)!r}, "
            f"iterations={list(self.iterations)!r}, time_ms={self.time_ms:.3f})"
        )


def _dtype_name(dtype, default):
    if dtype is None:
        return default
    if isinstance(dtype, str):
        name = _DTYPE_ALIASES.get(dtype.lower())
    else:
        try:
            d = np.dtype(dtype)
        except TypeError:
            d = np.dtype("O")
        name = {8: "float64", 4: "float32"}.get(d.itemsize) if d.kind == "f" else None
    if name is None:
        raise errors.BadRequest(f"dtype {dtype!r}: krylovd stores float64 or float32 values")
    return name


def _default_value_dtype(arr):
    return "float32" if arr.dtype.kind == "f" and arr.dtype.itemsize == 4 else "float64"


def _check_real(arr, what):
    if arr.dtype.kind == "c":
        raise TypeError(f"{what} is complex ({arr.dtype}); krylovd works with real values")
    if arr.dtype.kind not in "fiub":
        raise TypeError(f"{what} has dtype {arr.dtype}; expected real numbers")


def _values_bin(arr, dtype_name):
    """A 1-D array as a little-endian bin of dtype_name: no copy when it already is one."""
    wire = np.ascontiguousarray(arr, dtype=_VALUE_DTYPES[dtype_name])
    return _rpc.Bin(wire.reshape(-1).view(np.uint8))


def _vector_bin(v, what, dtype_name):
    """A vector (1-D) or a block of right-hand sides (2-D, n x k, sent column-major)."""
    arr = np.asarray(v)
    _check_real(arr, what)
    if arr.ndim == 1:
        return _values_bin(arr, dtype_name), 1
    if arr.ndim == 2:
        wire = np.asfortranarray(arr, dtype=_VALUE_DTYPES[dtype_name])
        return _rpc.Bin(wire.ravel(order="F").view(np.uint8)), arr.shape[1]
    raise ValueError(f"{what} must be 1-D (n) or 2-D (n x k), not of shape {arr.shape}")


def _index_dtype(*arrays):
    for a in arrays:
        if a.dtype.kind not in "iu":
            raise TypeError(f"index arrays must hold integers, not {a.dtype}")
    if all(a.dtype.itemsize < 4 or (a.dtype.itemsize == 4 and a.dtype.kind == "i") for a in arrays):
        return np.dtype("<i4"), "int32"
    return np.dtype("<i8"), "int64"


def _index_bin(arr, wire_dtype):
    return _rpc.Bin(np.ascontiguousarray(arr, dtype=wire_dtype).reshape(-1).view(np.uint8))


def _read_mtx(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise errors.BadRequest(f"{path}: corrupt gzip data: {e}") from None
    return data


def _matrix_params(A, dtype):
    """matrix.put parameters for A (see Client.put). Returns (params, default name)."""
    if isinstance(A, (str, os.PathLike)):
        path = os.fspath(A)
        base = os.path.basename(path)
        for suffix in (".gz", ".mtx"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        params = {"mtx": _rpc.Bin(_read_mtx(path))}
        if dtype is not None:
            params["dtype"] = _dtype_name(dtype, "float64")
        return params, base, None

    canonical = None  # True: known canonical; a scipy matrix: its flag; None: content_id checks
    if isinstance(A, tuple) and len(A) == 4:
        indptr, indices, data, shape = A
        fmt = "csr"
    elif hasattr(A, "tocsr") and hasattr(A, "shape") and hasattr(A, "format"):
        if A.format == "coo":
            indptr = None
            indices, data, shape = (A.row, A.col), A.data, A.shape
            fmt = "coo"
        else:
            csr = A.tocsr()
            indptr, indices, data, shape = csr.indptr, csr.indices, csr.data, csr.shape
            canonical = csr  # asked (O(nnz)) only where put() computes the content id
            fmt = "csr"
    elif isinstance(A, np.ndarray) or hasattr(A, "__array__"):
        dense = np.asarray(A)
        if dense.ndim != 2:
            raise ValueError(f"a dense matrix must be 2-D, not of shape {dense.shape}")
        _check_real(dense, "the matrix")
        row, col = np.nonzero(dense)  # row-major order: canonical CSR as it is
        indptr = np.concatenate(([0], np.cumsum(np.bincount(row, minlength=dense.shape[0]))))
        indices, data, shape = col, dense[row, col], dense.shape
        canonical = True
        fmt = "csr"
    else:
        raise TypeError(
            "put() takes a scipy.sparse matrix or array, a dense 2-D array, a tuple "
            f"(indptr, indices, data, shape) or a Matrix Market file path; got {type(A).__name__}"
        )

    rows, cols = (int(s) for s in shape)
    data = np.asarray(data)
    _check_real(data, "the matrix")
    value_dtype = _dtype_name(dtype, _default_value_dtype(data))
    params = {"rows": rows, "cols": cols, "dtype": value_dtype}
    if fmt == "csr":
        indptr, indices = np.asarray(indptr), np.asarray(indices)
        wire_index, index_name = _index_dtype(indptr, indices)
        params["indptr"] = _index_bin(indptr, wire_index)
        params["indices"] = _index_bin(indices, wire_index)
    else:
        row, col = (np.asarray(a) for a in indices)
        wire_index, index_name = _index_dtype(row, col)
        params["row"] = _index_bin(row, wire_index)
        params["col"] = _index_bin(col, wire_index)
    params["index_dtype"] = index_name
    params["values"] = _values_bin(data, value_dtype)
    local = None
    if fmt == "csr":
        local = (rows, cols, indptr, indices, data, value_dtype, canonical)
    return params, None, local


def _matrix_id(matrix):
    if isinstance(matrix, str):
        return matrix
    mid = getattr(matrix, "id", None)
    if isinstance(mid, str):
        return mid
    raise TypeError(f"expected a matrix id (str) or a MatrixInfo, got {type(matrix).__name__}")


def _result_array(result, field_name, shape=None):
    data = result.get(field_name)
    dtype = _VALUE_DTYPES.get(result.get("dtype", "float64"))
    # bytes, or the uint8 array a large bin was read into (_reader)
    if (not isinstance(data, (bytes, bytearray, np.ndarray)) or dtype is None
            or len(data) % dtype.itemsize):
        raise errors.ProtocolError(f"the server's result has no valid '{field_name}'")
    arr = np.frombuffer(data, dtype=dtype)
    return arr if shape is None else arr.reshape(shape)


def _optional(params, **kwargs):
    for key, value in kwargs.items():
        if value is not None:
            params[key] = value
    return params


class Client:
    """A connection to krylovd.

    address: "host:port" ("[::1]:7373" for IPv6; the port defaults to 7373) or "unix:PATH"; None
    reads $KRYLOV_SERVER, else 127.0.0.1:7373. timeout: seconds to wait for the server without
    hearing anything (None: forever); when it passes the call raises krylov.Timeout and the
    request is cancelled on the server. A Client is one connection: use one per thread.

    user, token: authenticate as this user (the first request is `auth`); None reads $KRYLOV_USER
    and $KRYLOV_TOKEN. A wrong pair raises krylov.Unauthenticated. Without a user, a server with
    an auth file answers krylov.Unauthenticated to everything (except on its Unix socket, for a
    uid the auth file maps to a user). self.user and self.role say who the server took you for.

    tls: True for a server started with --tls-cert (None: on when $KRYLOV_TLS is "1" or a file
    below is given), or an ssl.SSLContext of your own. cafile: the CA that signed the server's
    certificate (None: the system's trust store); the certificate must name the host or IP address
    in `address`. certfile, keyfile: this client's certificate and key, for a server started with
    --tls-ca.

    shm: on a Unix socket ("unix:PATH"), large arrays of spmv and solve (256 KiB or more) go
    through a shared-memory region the client registers with the server instead of through the
    socket, and results come back the same way (docs/PROTOCOL.md, "Shared memory"); the server's
    refusal turns it off quietly. shm=False: always bins.
    """

    def __init__(self, address=None, *, timeout=None, connect_timeout=30.0, user=None,
                 token=None, tls=None, cafile=None, certfile=None, keyfile=None, shm=True):
        if address is None:
            address = os.environ.get("KRYLOV_SERVER") or DEFAULT_ADDRESS
        if user is None:
            user = os.environ.get("KRYLOV_USER") or None
        if token is None:
            token = os.environ.get("KRYLOV_TOKEN") or None
        if user is not None and token is None:
            raise errors.BadRequest(f"user {user!r} needs a token (token=... or $KRYLOV_TOKEN)")
        if tls is None:  # a CA or a certificate means TLS too
            tls = os.environ.get("KRYLOV_TLS", "") not in ("", "0") or any(
                f is not None for f in (cafile, certfile, keyfile))
        if tls is True:
            tls = _rpc.tls_context(cafile, certfile, keyfile)
        elif tls is False:
            if cafile is not None or certfile is not None or keyfile is not None:
                raise errors.BadRequest("cafile, certfile and keyfile need tls=True")
            tls = None
        self._conn = _rpc.Connection(address, timeout=timeout, connect_timeout=connect_timeout,
                                     tls=tls)
        self._arena = _shm.Arena(self._conn, enabled=bool(shm))
        self._pool = _shm.Pool(self._conn, self._arena)  # the caller's arrays (empty())
        self.last_time_ms = None  # the server's time_ms for the last spmv, solve or put
        self._shapes = {}  # matrix id -> (rows, cols, batch), for results written into the region
        self.user = None
        self.role = None
        if user is not None:
            try:
                self.auth(user, token)
            except BaseException:
                self.close()
                raise

    def auth(self, user, token):
        """Authenticate this connection as user; returns the role ("read", "write", "admin")."""
        result = self._conn.call("auth", {"name": user, "token": token})
        self.user = result.get("name")
        self.role = result.get("role")
        return self.role

    @property
    def address(self):
        return self._conn.address

    @property
    def closed(self):
        return self._conn.closed

    @property
    def shm(self):
        """Whether large arrays go through shared memory (a Unix socket, not refused)."""
        return self._arena.enabled

    def close(self):
        try:
            self._arena.close()
        finally:
            self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return f"krylov.Client({self.address!r}{', closed' if self.closed else ''})"

    def call(self, method, params=None, *, on_progress=None):
        """Send any request (docs/PROTOCOL.md) and return its raw result. Values of type
        krylov._rpc.Bin or bytes are sent as bins."""
        return self._conn.call(method, params, on_progress)

    # matrices

    def put(self, A, *, name=None, format=None, dtype=None, pin=None, select=None,
            reorder=None, like=None, persist=None, timeout_ms=None):
        """Upload a matrix; returns its MatrixInfo (info.id names it from now on).

        A: a scipy.sparse matrix or array (COO is sent as COO, anything else as CSR), a dense 2-D
        numpy array, a tuple (indptr, indices, data, shape) in CSR form, or the path of a Matrix
        Market file (.mtx or .mtx.gz; its base name is the default name). A matrix in CSR form
        (scipy's, a tuple, or a dense array) given without name, format, pin, select or reorder
        is not sent when the server already holds it: put() computes its content id locally
        (krylov.content_id, needs the xxhash package) and asks first. dtype: "float64" or
        "float32", the precision kept on the device (default: float32 for float32 data, else
        float64). format forces an SpMV format; pin keeps it resident. reorder: "auto" (the
        default: the server decides), "none", "rcm" or "metis", a symmetric permutation kept
        inside the matrix (vectors stay in your order; info.reorder and info.bandwidth say what
        was done). Uploading the same matrix again is cheap and returns the same id
        (info.created is then False).

        like: a MatrixInfo or id of a matrix the server holds whose sparsity pattern A has (a
        time step, a Newton step): only A's values are sent (8 bytes a nonzero in float64), in
        the canonical order of that pattern, and the new matrix is kept as the like matrix is
        (format, reordering; format, select and reorder are not taken with like). A's pattern is
        checked here first against its hash (the server checks it again): a different pattern
        raises ValueError without sending anything when info.pattern is known, BadRequest
        otherwise. The result is a new matrix with its own id; the like matrix is unchanged.

        persist: when the server writes the matrix to its state directory: "sync" (before the
        reply), "behind" (after it: info.durable is False until written) or "none" (never; gone
        at a restart); None: the server's default (docs/OPERATIONS.md, "Persistence choices").
        """
        if like is not None:
            return self._put_like(A, like, name=name, dtype=dtype, pin=pin, format=format,
                                  select=select, reorder=reorder, persist=persist,
                                  timeout_ms=timeout_ms)
        params, default_name, local = _matrix_params(A, dtype)
        if local is not None and all(v is None for v in (name, format, pin, select, reorder,
                                                         persist)):
            # Ask before sending: the same matrix again costs a hash and a round trip.
            canonical = local[6]
            if canonical is not None and not isinstance(canonical, bool):  # scipy's flag
                canonical = bool(getattr(canonical, "has_canonical_format", False)) or None
            mid = csr_content_id(*local[:6], canonical=canonical)
            if mid is not None:
                try:
                    info = MatrixInfo.from_wire(self._conn.call("matrix.info", {"id": mid}))
                    return dataclasses.replace(info, created=False)
                except errors.NotFound:
                    pass
        _optional(params, name=name if name is not None else default_name, format=format,
                  pin=None if pin is None else bool(pin), select=select, reorder=reorder,
                  persist=persist, timeout_ms=timeout_ms)
        return self._put_call(params)

    def update(self, old, A, **kwargs):
        """put(A, like=old): new values on old's pattern (see put)."""
        return self.put(A, like=old, **kwargs)

    def put_values(self, like, values, *, dtype=None, name=None, pin=None, persist=None,
                   timeout_ms=None):
        """New values on like's pattern, given as the values alone: a 1-D array of like's nnz
        entries in its canonical order (its CSR with duplicates summed, columns ascending in
        each row: what `A.data` is for a canonical scipy matrix with like's pattern). Nothing is
        checked or hashed here, so a time step costs the values' transfer and the server's
        work: the server refuses another count, and trusts the order (put(A, like=...) checks
        the pattern's hash instead). values from kd.empty()/kd.asarray() on a Unix socket are
        named where they lie in shared memory, not copied. Returns the new matrix's MatrixInfo,
        as put(A, like=like) does."""
        like_id = like.id if isinstance(like, MatrixInfo) else str(like)
        arr = np.asarray(values)
        _check_real(arr, "values")
        if arr.ndim != 1:
            raise ValueError(f"values must be 1-D (like's nnz entries), not of shape {arr.shape}")
        if isinstance(like, MatrixInfo) and like.nnz is not None and arr.shape[0] != like.nnz:
            raise ValueError(f"{arr.shape[0]} values for matrix {like_id} of {like.nnz} stored "
                             "entries")
        return self._put_like_values({"like": like_id}, like, arr, dtype=dtype, name=name,
                                     pin=pin, persist=persist, timeout_ms=timeout_ms)

    def _put_like_values(self, params, like, values, *, dtype, name, pin, persist, timeout_ms):
        """matrix.put with like: params (like, and pattern where checked) and the values, in the
        like matrix's dtype where known (the server refuses another), else float64 values that
        the server converts."""
        value_dtype = like.dtype if isinstance(like, MatrixInfo) and like.dtype else None
        if dtype is not None:
            value_dtype = _dtype_name(dtype, "float64")
        if value_dtype is not None:
            params["dtype"] = value_dtype
        params["values"] = _values_bin(values, value_dtype or "float64")
        _optional(params, name=name, pin=None if pin is None else bool(pin), persist=persist,
                  timeout_ms=timeout_ms)
        return self._put_call(params)

    def _pattern_seen(self, rows, cols, indptr, indices):
        """The pattern_hash of the last canonical pattern put with like, when these arrays are
        that pattern's (compared with a copy of it, on threads: _fastmem), else None. A pattern
        equal to a canonical one is canonical: nothing else to check."""
        memo = getattr(self, "_pattern_memo", None)
        if (memo is not None and memo[0] == (rows, cols)
                and _fastmem.equal(memo[1], np.asarray(indptr))
                and _fastmem.equal(memo[2], np.asarray(indices))):
            return memo[3]
        return None

    def _pattern_new(self, rows, cols, indptr, indices):
        """pattern_hash of a canonical pattern not seen last, remembered with a copy of its arrays
        for _pattern_seen: a time-stepping loop sends one pattern again and again, and comparing
        arrays costs a fraction of SHA-256 over them."""
        pattern = pattern_hash(rows, cols, indptr, indices)
        self._pattern_memo = ((rows, cols), np.array(indptr, copy=True),
                              np.array(indices, copy=True), pattern)
        return pattern

    def _put_like(self, A, like, *, name, dtype, pin, format, select, reorder, timeout_ms,
                  persist=None):
        if any(v is not None for v in (format, select, reorder)):
            raise errors.BadRequest("put(like=...) keeps the like matrix's format and reordering: "
                                    "format, select and reorder do not apply")
        like_id = like.id if isinstance(like, MatrixInfo) else str(like)
        if not (hasattr(A, "tocsr") and hasattr(A, "shape")):
            raise TypeError(f"put(like=...) takes a scipy.sparse matrix, not {type(A).__name__}")
        csr = A.tocsr()
        rows, cols = (int(n) for n in csr.shape)
        # the last pattern again (a time step): canonical, its hash known; else checked in O(nnz)
        # and copied only when it must change
        pattern = self._pattern_seen(rows, cols, csr.indptr, csr.indices)
        if pattern is None:
            if not csr.has_canonical_format:
                csr = csr.copy()
                csr.sum_duplicates()  # canonical: duplicates summed, columns ascending in a row
            pattern = self._pattern_new(rows, cols, csr.indptr, csr.indices)
        data = np.asarray(csr.data)
        _check_real(data, "the matrix")
        if isinstance(like, MatrixInfo):
            if (rows, cols, int(csr.nnz)) != (like.rows, like.cols, like.nnz) or (
                    like.pattern and like.pattern != pattern):
                raise ValueError(
                    f"A ({rows} x {cols}, {csr.nnz} stored entries, pattern {pattern}) does not "
                    f"have the pattern of matrix {like.id} ({like.rows} x {like.cols}, {like.nnz} "
                    f"stored entries{', pattern ' + like.pattern if like.pattern else ''}): put "
                    "it whole")
        return self._put_like_values({"like": like_id, "pattern": pattern}, like, data,
                                     dtype=dtype, name=name, pin=pin, persist=persist,
                                     timeout_ms=timeout_ms)

    def _put_call(self, params):
        """matrix.put with its values through shared memory when they are large (the server
        copies them as it reads the request): values in an array of empty() are named where
        they lie, others copied into the scratch region. Bins otherwise."""
        values = params.get("values")
        if isinstance(values, _rpc.Bin) and self._arena.enabled and values.nbytes:
            located = self._pool.locate(np.frombuffer(values.view, np.uint8))
            if located is not None:
                params["values"] = _shm.as_ref(located)
                return MatrixInfo.from_wire(self._note_time(self._conn.call("matrix.put", params)))
            n = values.nbytes
            if self._arena.usable(n) and self._arena.reserve(n):
                region = self._arena.region
                _fastmem.copy(_shm.view(region, 0, np.uint8, (n,)),
                              np.frombuffer(values.view, np.uint8))
                params["values"] = _shm.ref(region, 0, n)
                return MatrixInfo.from_wire(
                    self._note_time(self._call_in_region("matrix.put", params)))
        return MatrixInfo.from_wire(self._note_time(self._conn.call("matrix.put", params)))

    def put_batch(self, matrices, values=None, *, name=None, dtype=None, pin=None,
                  timeout_ms=None):
        """Upload k small systems that share one sparsity pattern as one batch; returns its
        MatrixInfo (info.batch = k, rows / cols / nnz one system's). matrices: a list of scipy
        sparse matrices with the same pattern, or one pattern matrix with values a (k, nnz)
        array in its CSR entry order. solve(info, B) then solves them all at once."""
        indptr, indices, shape, vals = _batch.pattern_and_values(matrices, values)
        _check_real(vals, "the values")
        value_dtype = _dtype_name(dtype, _default_value_dtype(vals))
        indptr, indices = np.asarray(indptr), np.asarray(indices)
        wire_index, index_name = _index_dtype(indptr, indices)
        params = {"rows": int(shape[0]), "cols": int(shape[1]), "batch": int(vals.shape[0]),
                  "dtype": value_dtype, "index_dtype": index_name,
                  "indptr": _index_bin(indptr, wire_index),
                  "indices": _index_bin(indices, wire_index),
                  "values": _values_bin(np.ascontiguousarray(vals).ravel(), value_dtype)}
        _optional(params, name=name, pin=None if pin is None else bool(pin),
                  timeout_ms=timeout_ms)
        return MatrixInfo.from_wire(self._conn.call("matrix.put", params))

    def solve_batch(self, matrix, B, *, method="cg", rtol=1e-8, atol=0.0, maxiter=None, x0=None,
                    preconditioner=None, history=False, dtype=None, timeout_ms=None,
                    restart=None):
        """Solve every system of a batch (put_batch's MatrixInfo or id): B is (k, n), row s
        system s's right-hand side; rtol, atol and maxiter a number or k of them. method "cg",
        "bicgstab" or "gmres" (restart: its m, default 30), preconditioner None / "none" or
        "jacobi". Returns a BatchSolveResult."""
        b_arr = np.asarray(B)
        if b_arr.ndim != 2:
            raise ValueError(f"B must be (systems, rows), not of shape {b_arr.shape}")
        _check_real(b_arr, "B")
        k, n = b_arr.shape
        dtype_name = _dtype_name(dtype, _default_value_dtype(b_arr))
        params = {"id": _matrix_id(matrix), "b": _values_bin(b_arr.ravel(), dtype_name),
                  "dtype": dtype_name, "method": method,
                  "rtol": _batch.per_system(rtol, k, "rtol", float),
                  "atol": _batch.per_system(atol, k, "atol", float)}
        if x0 is not None:
            x0_arr = np.asarray(x0)
            if x0_arr.shape != b_arr.shape:
                raise ValueError(f"x0 has shape {x0_arr.shape} but B has shape {b_arr.shape}")
            params["x0"] = _values_bin(x0_arr.ravel(), dtype_name)
        if history:
            params["history"] = True
        _optional(params, maxiter=None if maxiter is None else _batch.per_system(maxiter, k,
                                                                                 "maxiter", int),
                  preconditioner=preconditioner, timeout_ms=timeout_ms,
                  restart=None if restart is None else int(restart))
        result = self._conn.call("solve", params)
        return _batch.result_from_wire(result, k, n, _VALUE_DTYPES[dtype_name])

    def solve_many(self, items, *, method="cg", rtol=1e-8, atol=0.0, maxiter=None,
                   preconditioner=None, history=False, dtype=None, timeout_ms=None,
                   restart=None):
        """Solve many small systems of their own patterns and sizes in one request
        (solve.batch): items is a list of (matrix, b) or (matrix, b, x0), matrix an id, a
        MatrixInfo, or a matrix put() takes (uploaded first unless the server holds it). The
        server runs them together in a few launches, each item stopping on its own, with one
        method for all: "cg", "bicgstab" or "gmres" (restart: its m), preconditioner None /
        "none" or "jacobi". Returns a ManySolveResult, one ItemResult per item in order; an item
        the server could not run (unknown id, wrong b length, a batched matrix) has status
        "error" and its .error, the others are unaffected."""
        entries, wire = [], None
        for i, item in enumerate(items):
            if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
                raise ValueError(f"item {i} must be (matrix, b) or (matrix, b, x0)")
            b_arr = np.asarray(item[1])
            if b_arr.ndim != 1:
                raise ValueError(f"item {i}: b must be 1-D, not of shape {b_arr.shape}")
            _check_real(b_arr, f"item {i}'s b")
            if wire is None:
                wire = _dtype_name(dtype, _default_value_dtype(b_arr))
            entry = {"id": self._operand_id(item[0]), "b": _values_bin(b_arr, wire)}
            if len(item) == 3 and item[2] is not None:
                x0_arr = np.asarray(item[2])
                if x0_arr.shape != b_arr.shape:
                    raise ValueError(f"item {i}: x0 has shape {x0_arr.shape}, b {b_arr.shape}")
                entry["x0"] = _values_bin(x0_arr, wire)
            entries.append(entry)
        if not entries:
            raise ValueError("solve_many needs at least one item")
        params = {"items": entries, "dtype": wire, "method": method, "rtol": float(rtol),
                  "atol": float(atol)}
        if history:
            params["history"] = True
        _optional(params, maxiter=None if maxiter is None else int(maxiter),
                  preconditioner=preconditioner, timeout_ms=timeout_ms,
                  restart=None if restart is None else int(restart))
        result = self._conn.call("solve.batch", params)
        return _batch.many_from_wire(result, _VALUE_DTYPES[wire])

    def multiply(self, a, b, *, transpose_a=False, name=None, format=None, pin=None, select=None,
                 reorder=None, timeout_ms=None):
        """C = a @ b (a.T @ b with transpose_a) on the server's device, kept there as a new matrix;
        returns C's MatrixInfo (its .spgemm: the products summed, C's nnz, the server's time).

        a and b: matrix ids (a str is an id), MatrixInfo objects, or matrices put() takes (a
        scipy.sparse matrix, a dense array, ...), which are uploaded first. Both must have one dtype. C keeps every entry of the
        symbolic product: where products cancel to exactly 0 the entry is stored as an explicit
        zero (scipy's a @ b drops those), so info.nnz can exceed (a @ b).nnz. name, format, pin,
        select and reorder are put()'s: how C is kept. The same product twice is one matrix
        (info.created is then False).
        """
        params = {"a": self._operand_id(a), "b": self._operand_id(b)}
        if transpose_a:
            params["transpose_a"] = True
        _optional(params, name=name, format=format, pin=None if pin is None else bool(pin),
                  select=select, reorder=reorder, timeout_ms=timeout_ms)
        return MatrixInfo.from_wire(self._conn.call("matrix.multiply", params))

    def _operand_id(self, matrix):
        """The id of a matrix on the server, uploading one that is not there yet."""
        if isinstance(matrix, str) or isinstance(getattr(matrix, "id", None), str):
            return _matrix_id(matrix)
        return self.put(matrix).id

    def info(self, matrix):
        """The MatrixInfo of a matrix on the server (NotFound if there is none)."""
        return MatrixInfo.from_wire(self._conn.call("matrix.info", {"id": _matrix_id(matrix)}))

    def list(self):
        """Every matrix on the server, as a list of MatrixInfo."""
        result = self._conn.call("matrix.list")
        items = result.get("matrices") if isinstance(result, dict) else None
        if not isinstance(items, list):
            raise errors.ProtocolError("the server's matrix.list result has no 'matrices'")
        return [MatrixInfo.from_wire(m) for m in items]

    def drop(self, matrix):
        """Remove a matrix from the server (NotFound if there is none)."""
        self._conn.call("matrix.drop", {"id": _matrix_id(matrix)})

    def pin(self, matrix, pinned=True):
        """Pin a matrix (it is never evicted from device memory), or unpin it; returns its info."""
        return MatrixInfo.from_wire(
            self._conn.call("matrix.pin", {"id": _matrix_id(matrix), "pinned": bool(pinned)})
        )

    def share(self, matrix, user):
        """Give user its own reference to a matrix (admin only; docs/PROTOCOL.md, "Owners");
        returns whether the user had none before."""
        result = self._conn.call("matrix.share", {"id": _matrix_id(matrix), "user": str(user)})
        return bool(result.get("created")) if isinstance(result, dict) else False

    def status(self, *, wait_warm=False, timeout_ms=None):
        """The server's ServerStatus: version, device, matrices, counters, warm_up.

        wait_warm=True: the server answers once it has built its OpenCL programs (it serves
        meanwhile, building what a request needs first), or raises Timeout after timeout_ms
        (None: no limit; the client's own timeout= still applies).
        """
        params = {}
        if wait_warm:
            params["wait_warm"] = True
            _optional(params, timeout_ms=timeout_ms)
        return ServerStatus.from_wire(self._conn.call("server.status", params))

    def wait_warm(self, timeout=None, *, on_progress=None, every=2.0):
        """Wait until the server's program warm-up is done; returns its ServerStatus.

        timeout: seconds (None: no limit), then Timeout. on_progress(warm_up) is called with the
        status's warm_up map every `every` seconds while it runs.
        """
        start = time.monotonic()
        while True:
            step = every if timeout is None else min(every, timeout - (time.monotonic() - start))
            try:
                return self.status(wait_warm=True, timeout_ms=max(1, int(step * 1e3)))
            except errors.Timeout:
                if timeout is not None and time.monotonic() - start >= timeout:
                    raise
                if on_progress is not None:
                    on_progress(self.status().warm_up)

    # arithmetic

    def spmv(self, matrix, x, *, alpha=1.0, beta=0.0, y=None, dtype=None, out=None,
             timeout_ms=None):
        """y = alpha * A @ x + beta * y on the server; returns the new y.

        matrix: an id, a MatrixInfo, or a matrix put() takes (uploaded first unless the server
        already holds it). x has cols entries, or is cols x k for k columns at once (Y = alpha A X + beta Y, one
        launch on the server for the formats with an SpMM kernel: the matrix is read once for
        all columns); y (rows entries, or rows x k) is needed when beta != 0. dtype: the wire
        type of x, y and the result (default: float32 for a float32 x, else float64). The
        result is a fresh array (rows x k for a 2-D x; read-only when small: a view of the
        received bytes); with out= the result goes into out, which is returned: written there by
        the server itself when out is an array of empty() (see empty() for the rule), copied
        there otherwise. x and y from empty() are read where they lie (no copy).
        self.last_time_ms is the server's time for the spmv.
        """
        x = np.asarray(x)
        _check_real(x, "x")
        dtype_name = _dtype_name(dtype, _default_value_dtype(x))
        if x.ndim not in (1, 2):
            raise ValueError(f"x must be 1-D (cols) or 2-D (cols x k), not of shape {x.shape}")
        if beta != 0.0 and y is None:  # before choosing a path: both need y
            raise ValueError("spmv with beta != 0 needs y")
        mid = self._operand_id(matrix)
        shm = self._spmv_shm(matrix, mid, x, y, beta, dtype_name, alpha, timeout_ms, out)
        if shm is not None:
            return shm
        x_bin, ncols = _vector_bin(x, "x", dtype_name)
        params = {"id": mid, "x": x_bin, "dtype": dtype_name}
        if x.ndim == 2:
            params["ncols"] = ncols
        if alpha != 1.0:
            params["alpha"] = float(alpha)
        if beta != 0.0:
            y_arr = np.asarray(y)
            if y_arr.ndim != x.ndim or (x.ndim == 2 and y_arr.shape[1] != ncols):
                raise ValueError(f"y of shape {y_arr.shape} does not match x of shape {x.shape}")
            params["beta"] = float(beta)
            params["y"] = _vector_bin(y_arr, "y", dtype_name)[0]
        _optional(params, timeout_ms=timeout_ms)
        result = _result_array(self._note_time(self._conn.call("spmv", params)), "y")
        if x.ndim == 2:
            result = result.reshape((ncols, -1)).T  # column-major on the wire
        if out is not None:
            _fastmem.copy(out, result)
            return out
        return result

    def _shape_of(self, matrix, mid):
        """(rows, cols, batch) of a matrix, asking the server once for an id it has not seen."""
        if isinstance(matrix, MatrixInfo):
            return matrix.rows, matrix.cols, matrix.batch
        if mid not in self._shapes:
            if hasattr(matrix, "shape") and not isinstance(matrix, str):
                self._shapes[mid] = (int(matrix.shape[0]), int(matrix.shape[1]), 0)
            else:
                info = self.info(mid)
                self._shapes[mid] = (info.rows, info.cols, info.batch)
        return self._shapes[mid]

    def _call_in_region(self, method, params, on_progress=None):
        """A request naming the region. When it ends without its answer (a client timeout,
        Ctrl-C, an exception from on_progress: it may still run on the server, and a running
        spmv cannot be cancelled), the region is abandoned: the next request gets a fresh one
        instead of laying its arrays where the old request may still write."""
        msgid = None
        try:
            msgid = self._conn.send_request(method, params)
            result = self._conn.wait(msgid, on_progress)
        except BaseException:
            if msgid is None or self._conn.answered != msgid:
                self._arena.abandon()
            raise
        self._arena.uses += 1
        return result

    def _located(self, arr, wire, shape=None):
        """(region id, offset, bytes) of an array of the pool (Client.empty) that the wire can
        take where it lies (its dtype, column-major for 2-D, of `shape` when given), or None."""
        if (not isinstance(arr, np.ndarray) or arr.dtype != wire or not len(self._pool)
                or arr.ndim not in (1, 2)):
            return None
        if shape is not None and arr.shape != shape:
            return None
        if not (arr.flags.f_contiguous if arr.ndim == 2 else arr.flags.c_contiguous):
            return None  # the wire is column-major
        return self._pool.locate(arr)

    def _place(self, arrays, out_nbytes, out, out_shape, wire):
        """Refs for a request's input arrays and its output: arrays of the pool where they lie,
        the others copied into the scratch region. arrays: (name, array, shape) with array None
        for an absent one. Returns (refs, out_located, out_view) or None when the scratch region
        has no room (bins)."""
        located = {name: self._located(arr, wire, shape) for name, arr, shape in arrays
                   if arr is not None}
        out_at = None if out is None else self._located(out, wire, out_shape)
        if out_at is not None and any(_shm.overlaps(out_at, at) for at in located.values()):
            out_at = None  # the server refuses an out sharing bytes with an input
        lay = _shm.Layout()
        slots = {name: lay.add(arr.size * wire.itemsize) for name, arr, _ in arrays
                 if arr is not None and located[name] is None}
        io = lay.add(out_nbytes) if out_at is None else None
        if lay.parts and not self._arena.reserve(lay.nbytes):
            return None
        region = self._arena.region
        refs = {}
        for name, arr, shape in arrays:
            if arr is None:
                continue
            if located[name] is not None:
                refs[name] = _shm.as_ref(located[name])
                continue
            _check_real(arr, name)
            offset, nbytes = lay.parts[slots[name]]
            dst = _shm.view(region, offset, wire, shape, "F")
            if arr.dtype == dst.dtype:
                _fastmem.copy(dst, arr)
            else:
                np.copyto(dst, arr, casting="unsafe")
            refs[name] = _shm.ref(region, offset, nbytes)
        if out_at is not None:
            refs["out"] = _shm.as_ref(out_at)
            out_view = None
        else:
            refs["out"] = _shm.ref(region, *lay.parts[io])
            out_view = _shm.view(region, lay.parts[io][0], wire, out_shape, "F")
        return refs, out_at, out_view

    def _spmv_shm(self, matrix, mid, x, y, beta, dtype_name, alpha, timeout_ms, out):
        """spmv through shared memory, or None (too small, refused: bins). Returns out when the
        server wrote into it (an array of the pool), else a fresh array (copied into out when
        given)."""
        wire = _VALUE_DTYPES[dtype_name]
        k = x.shape[1] if x.ndim == 2 else 1
        if not self._arena.enabled:
            return None
        pooled = len(self._pool) and any(self._located(a, wire) is not None for a in (x, y, out))
        if not pooled and not self._arena.usable(x.size * wire.itemsize * 2):
            return None
        rows, cols, batch = self._shape_of(matrix, mid)
        if batch or x.shape[0] != cols:
            return None  # the server's message about the shape comes through the bins path
        shape_y = (rows, k) if x.ndim == 2 else (rows,)
        y_arr = None if beta == 0.0 or y is None else np.asarray(y)
        if y_arr is not None and y_arr.shape != shape_y:
            return None
        placed = self._place([("x", x, x.shape), ("y", y_arr, shape_y)],
                             rows * k * wire.itemsize, out, shape_y, wire)
        if placed is None:
            return None
        refs, out_at, out_view = placed
        params = {"id": mid, "dtype": dtype_name, **refs}
        if x.ndim == 2:
            params["ncols"] = k
        if alpha != 1.0:
            params["alpha"] = float(alpha)
        if y_arr is not None:
            params["beta"] = float(beta)
        _optional(params, timeout_ms=timeout_ms)
        self._note_time(self._call_in_region("spmv", params))
        if out_at is not None:
            return out
        if out is not None:
            _fastmem.copy(out, out_view)
            return out
        return _fastmem.fresh(out_view)

    def _note_time(self, result):
        self.last_time_ms = float(result.get("time_ms", 0.0)) if isinstance(result, dict) else None
        return result

    def empty(self, shape, dtype=np.float64, order="C"):
        """An uninitialised NumPy array in shared memory with the server (on a Unix socket with
        shm): spmv and solve read it where it lies (no copy into the request), and given as
        `out` the server writes the result straight into it. A plain NumPy array on TCP, with
        shm=False, when smaller than 256 KiB (bins cost less) or when the server has no room
        (--max-shm-bytes; 64 regions a connection): everything still works, by copying.

        The array (and every view of it) keeps its region mapped; the region is unregistered
        with the next request after the last of them is gone. Results are views of shared memory
        only when you ask, by passing out=: an array from empty() that nothing else writes
        until the call returns. Without out=, results are fresh arrays, never views of a region
        a later call reuses. A call that raises (a timeout, Ctrl-C) may leave the server still
        writing into its out: its contents are then undefined."""
        return self._pool.empty(shape, dtype, order)

    def asarray(self, a, dtype=None):
        """a as an array of empty() (copied once), or a itself when it already is one."""
        arr = np.asarray(a, dtype=dtype)
        if self.in_region(arr):
            return arr
        out = self.empty(arr.shape, arr.dtype, "F" if arr.ndim == 2 else "C")
        np.copyto(out, arr)
        return out

    def in_region(self, arr):
        """Whether arr lies in shared memory of empty() (then requests name it, not copy it)."""
        return isinstance(arr, np.ndarray) and self._pool.locate(arr) is not None

    def solve(self, matrix, b, *, method="cg", rtol=1e-8, atol=0.0, maxiter=None, x0=None,
              preconditioner=None, preconditioner_options=None, check_every=None, history=False,
              callback=None, dtype=None, timeout_ms=None, restart=None, tol=None,
              reuse_preconditioner=None, out=None, direct_options=None):
        """Solve A x = b on the server.

        matrix: an id, a MatrixInfo, or a matrix put() takes (a scipy.sparse matrix, a dense
        array, ...), uploaded first unless the server already holds it: kd.solve(A, b) works as
        SciPy's solvers do. tol: SciPy's older name for rtol (give one of them).
        b: a vector (n), or n x k for k right-hand sides at once. method: a name of the server's
        table: "cg" (the default), "pcg" (cg with Jacobi), "sd" (steepest descent) and "cg1" need
        a symmetric matrix (MatrixInfo.symmetric; BAD_REQUEST otherwise, naming the general
        methods), "gmres", "bicgstab", "minres", or "auto": the server tries, in order until one converges, cg (minres
        where it breaks down) for a symmetric matrix with a positive diagonal, "direct" first
        for another of up to 100,000 rows, preconditioned Krylov methods, and "direct" where a
        Krylov attempt fails and the factor fits the server's budget (SolveResult.method says
        what answered, SolveResult.auto lists the attempts; a singular matrix ends "singular"),
        or "direct": a sparse LU or Cholesky factorisation on
        the server's host, kept with the matrix so that later solves only run the triangular
        solves (direct_options={"solver": "klu" | "umfpack" | "cholmod"}; SolveResult.direct
        reports the factor's size, fill and times; a singular matrix ends status "singular").
        restart: GMRES(m)'s basis size (1..200; None: the
        server's 30). preconditioner: "none", "jacobi", "amg" (smoothed-aggregation multigrid,
        built on the server once per matrix), "ic0" / "ilu0" (incomplete factorisations),
        "block_jacobi" (inverted diagonal blocks) or "chebyshev" (a polynomial in D^-1 A), each
        set up once per matrix, with preconditioner_options a dict of numbers (amg: threshold,
        block_size, max_levels, coarse_size, degree, fused, tail_rows, aggregation; ic0 /
        ilu0: sweeps;
        block_jacobi: block_size; chebyshev: degree, lmin_ratio; docs/PROTOCOL.md). Stops when ||r|| <= max(rtol * ||b||, atol) or
        after maxiter iterations (default: the server's, 10 n). x0: a warm start shaped like b.
        history=True records the residual norm at each check (every check_every iterations).
        callback(Progress) is called for the server's progress notifications (at most a few a
        second); if it returns True the solve is cancelled and Cancelled is raised.
        reuse_preconditioner=True, on a matrix put with like (put(A, like=...)): apply the like
        matrix's preconditioner as it is, not one of this matrix (a Newton loop's cheap steps);
        SolveResult.preconditioner_setup says "reused", or why it was built fresh. Without it, a
        preconditioner the like matrix holds is refreshed ("refreshed"). out: an array shaped
        like b for x (SolveResult.x is then out): the server writes x straight into an array of
        empty() (see empty() for the rule); b and x0 from empty() are read where they lie.
        Returns a SolveResult;
        a solve that stops without converging is not an exception (look at .status).
        """
        if tol is not None:
            if rtol != 1e-8 and rtol != tol:
                raise ValueError(f"solve got both tol={tol} and rtol={rtol}: give one")
            rtol = tol
        if isinstance(matrix, MatrixInfo) and matrix.batch > 0:
            return self.solve_batch(matrix, b, method=method, rtol=rtol, atol=atol,
                                    maxiter=maxiter, x0=x0, preconditioner=preconditioner,
                                    history=history, dtype=dtype, timeout_ms=timeout_ms,
                                    restart=restart)
        b_arr = np.asarray(b)
        _check_real(b_arr, "b")
        dtype_name = _dtype_name(dtype, _default_value_dtype(b_arr))
        if b_arr.ndim not in (1, 2):
            raise ValueError(f"b must be 1-D (n) or 2-D (n x k), not of shape {b_arr.shape}")
        nrhs = b_arr.shape[1] if b_arr.ndim == 2 else 1
        x0_arr = None if x0 is None else np.asarray(x0)
        if x0_arr is not None and x0_arr.shape != b_arr.shape:
            raise ValueError(f"x0 has shape {x0_arr.shape} but b has shape {b_arr.shape}")
        params = {
            "id": self._operand_id(matrix),
            "dtype": dtype_name,
            "method": method,
            "rtol": float(rtol),
            "atol": float(atol),
        }
        if nrhs != 1:
            params["nrhs"] = nrhs
        wire = _VALUE_DTYPES[dtype_name]
        x_at = None  # where the server writes x: (out given, the scratch view), or None: bins
        pooled = len(self._pool) and any(self._located(a, wire) is not None
                                         for a in (b_arr, x0_arr, out))
        if self._arena.enabled and (pooled or self._arena.usable(b_arr.size * wire.itemsize * 2)):
            placed = self._place([("b", b_arr, b_arr.shape), ("x0", x0_arr, b_arr.shape)],
                                 b_arr.size * wire.itemsize, out, b_arr.shape, wire)
            if placed is not None:
                refs, out_at, out_view = placed
                params.update(refs)
                x_at = (out_at, out_view)
        if "b" not in params:
            params["b"] = _vector_bin(b_arr, "b", dtype_name)[0]
            if x0_arr is not None:
                params["x0"] = _vector_bin(x0_arr, "x0", dtype_name)[0]
        if history:
            params["history"] = True
        if preconditioner_options:
            params["preconditioner_options"] = {str(k): float(v)
                                                for k, v in preconditioner_options.items()}
        if direct_options:
            params["direct_options"] = dict(direct_options)
        _optional(params, maxiter=None if maxiter is None else int(maxiter),
                  preconditioner=preconditioner,
                  check_every=None if check_every is None else int(check_every),
                  timeout_ms=timeout_ms, restart=None if restart is None else int(restart),
                  reuse_preconditioner=None if reuse_preconditioner is None
                  else bool(reuse_preconditioner))

        on_progress = None
        if callback is not None:
            params["progress"] = True

            def on_progress(p):
                return callback(Progress(p.get("msgid"), p.get("rhs", 0), p.get("iteration", 0),
                                         p.get("residual", float("nan"))))

        if x_at is not None:
            result = self._call_in_region("solve", params, on_progress)
        else:
            result = self._conn.call("solve", params, on_progress)
        self._note_time(result)
        x = None
        if x_at is not None and x_at[0] is not None:
            x = out  # the server wrote it there
        elif x_at is not None:  # copied out: the scratch region serves the next request
            if out is not None:
                _fastmem.copy(out, x_at[1])
                x = out
            else:
                x = _fastmem.fresh(x_at[1])
        elif out is not None:
            np.copyto(out, self._solve_result(result, b_arr, nrhs).x)
            x = out
        return self._solve_result(result, b_arr, nrhs, x)

    @staticmethod
    def _solve_result(result, b_arr, nrhs, x=None):
        if not isinstance(result, dict):
            raise errors.ProtocolError("the server's solve result is not a map")
        n = b_arr.shape[0]
        if x is not None:
            pass
        elif b_arr.ndim == 1:
            x = _result_array(result, "x")
        else:
            # column-major on the wire: k runs of n values; the transpose is an (n, k) view
            x = _result_array(result, "x", (nrhs, n)).T
        time_ms = float(result.get("time_ms", 0.0))
        hist = result.get("history")
        if b_arr.ndim == 1:
            return SolveResult(
                x=x,
                status=result.get("status"),
                iterations=int(result.get("iterations", 0)),
                residual=float(result.get("residual_norm", float("nan"))),
                relative_residual=float(result.get("relative_residual", float("nan"))),
                time_ms=time_ms,
                message=result.get("message", ""),
                history=None if hist is None else np.asarray(hist, dtype=float),
                nrhs=1,
                method=result.get("method", ""),
                preconditioner=result.get("preconditioner", ""),
                anatomy=dict(result.get("anatomy") or {}),
                preconditioner_setup=result.get("preconditioner_setup") or "",
                direct=dict(result.get("direct") or {}),
                auto=dict(result.get("auto") or {}),
            )

        def per_rhs(key):
            value = result.get(key)
            if nrhs == 1 and not isinstance(value, list):
                value = [value]
            if not isinstance(value, list) or len(value) != nrhs:
                raise errors.ProtocolError(f"the server's solve result has no valid '{key}'")
            return value

        if hist is not None:
            hist = [np.asarray(h, dtype=float) for h in (hist if nrhs > 1 else [hist])]
        return SolveResult(
            x=x,
            status=per_rhs("status"),
            iterations=np.asarray(per_rhs("iterations"), dtype=np.int64),
            residual=np.asarray(per_rhs("residual_norm"), dtype=float),
            relative_residual=np.asarray(per_rhs("relative_residual"), dtype=float),
            time_ms=time_ms,
            message=per_rhs("message"),
            history=hist,
            nrhs=nrhs,
            method=result.get("method", ""),
            preconditioner=result.get("preconditioner", ""),
            anatomy=dict(result.get("anatomy") or {}),
            preconditioner_setup=result.get("preconditioner_setup") or "",
            direct=dict(result.get("direct") or {}),
            auto=dict(result.get("auto") or {}),
        )

    def operator(self, matrix, *, symmetric=None):
        """A scipy.sparse.linalg.LinearOperator whose matvec runs on the server (needs SciPy);
        see krylov.scipy.ResidentOperator."""
        from .scipy import ResidentOperator

        return ResidentOperator(self, matrix, symmetric=symmetric)
