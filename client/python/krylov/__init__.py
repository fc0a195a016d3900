"""Python client for krylovd: keep sparse matrices resident on a GPU, multiply and solve with them.

    import krylov, scipy.sparse as sp, numpy as np
    A = sp.random(1000, 1000, density=0.01) + 10 * sp.eye(1000)
    with krylov.Client("127.0.0.1:7373") as kd:      # default: $KRYLOV_SERVER, else 127.0.0.1:7373
        info = kd.put(A)                              # MatrixInfo; info.id is a content hash
        y = kd.spmv(info, np.ones(1000))              # == A @ ones
        res = kd.solve(info, np.ones(1000), rtol=1e-10)
        print(res.status, res.iterations, res.relative_residual)
        many = kd.solve_many([(A, b1), (B, b2)])     # many small systems in one request

SciPy's solvers with nothing to set up: `from krylov.linalg import cg; x, info = cg(A, b)` runs
on $KRYLOV_SERVER, or on a private krylovd the package starts (and stops at exit); gmres,
bicgstab and minres too (krylov.linalg).

Errors from the server raise KrylovError subclasses (NotFound, BadRequest, ...); see
krylov.errors. krylov.scipy.ResidentOperator wraps a resident matrix as a SciPy LinearOperator.
"""

from .client import (
    DEFAULT_ADDRESS,
    BatchSolveResult,
    Client,
    ItemResult,
    ManySolveResult,
    MatrixInfo,
    Progress,
    ServerStatus,
    SolveResult,
)
from .errors import (
    BadRequest,
    Busy,
    Cancelled,
    ConnectionFailed,
    DeviceError,
    DeviceMemory,
    Forbidden,
    Quota,
    StorageFull,
    InternalError,
    KrylovError,
    NotFound,
    NotSPD,
    ProtocolError,
    TooLarge,
    Timeout,
    Unauthenticated,
    Unsupported,
)

__version__ = "0.1.0"

__all__ = [
    "BatchSolveResult",
    "Client",
    "ItemResult",
    "ManySolveResult",
    "MatrixInfo",
    "SolveResult",
    "ServerStatus",
    "Progress",
    "DEFAULT_ADDRESS",
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
]
