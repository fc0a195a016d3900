"""SciPy adapter: a matrix resident on krylovd as a scipy.sparse.linalg.LinearOperator.

Existing SciPy code that takes a LinearOperator (cg, gmres, bicgstab, minres, eigsh, ...) runs
unchanged, with every A @ v computed on the server's device:

    import scipy.sparse.linalg as spla
    from krylov.scipy import ResidentOperator
    op = ResidentOperator(client, info)          # or client.operator(info), or .upload(client, A)
    x, status = spla.gmres(op, b)

Each matvec is one spmv round trip; for CG itself, `op.solve(b)` runs the whole iteration on the
server instead (one round trip).
"""

import numpy as np
from scipy.sparse.linalg import LinearOperator

from .client import MatrixInfo

__all__ = ["ResidentOperator"]


class ResidentOperator(LinearOperator):
    """A LinearOperator for the matrix `matrix` (an id, a MatrixInfo, or a matrix put() takes,
    uploaded first unless the server holds it) on `client`'s server.

    matvec(v) = A @ v through client.spmv. A^T v is only available for a symmetric operator
    (then it is A @ v), since the server multiplies by A alone; symmetric=None takes the
    server's word (MatrixInfo.symmetric: exact symmetry found at upload). dtype is the operator's dtype for SciPy
    and the wire type of its vectors (default: the matrix's own, float64 or float32).
    """

    def __init__(self, client, matrix, *, symmetric=None, dtype=None):
        info = matrix if isinstance(matrix, MatrixInfo) else client.info(client._operand_id(matrix))
        self.client = client
        self.info = info
        self.id = info.id
        self.symmetric = bool(info.symmetric) if symmetric is None else bool(symmetric)
        if dtype is None:
            dtype = np.float32 if info.dtype == "float32" else np.float64
        wire = np.float32 if np.dtype(dtype) == np.float32 else np.float64
        self._wire_dtype = "float32" if wire is np.float32 else "float64"
        self._io = None  # (x, y) in shared memory, made at the first matvec
        super().__init__(dtype=np.dtype(wire), shape=info.shape)

    @classmethod
    def upload(cls, client, A, *, symmetric=None, **put_options):
        """Upload A with Client.put (put_options: name, dtype, format, pin, ...) and wrap it.
        symmetric defaults to A's own symmetry when A is a scipy.sparse matrix."""
        if symmetric is None and hasattr(A, "tocsr") and A.shape[0] == A.shape[1]:
            symmetric = (A - A.T).count_nonzero() == 0
        return cls(client, client.put(A, **put_options), symmetric=symmetric)

    def update(self, A, **put_options):
        """New values with this operator's pattern (Client.put(A, like=...)): from now on the
        operator is the new matrix (the old one stays on the server until dropped or evicted).
        Returns the new MatrixInfo."""
        info = self.client.put(A, like=self.info, **put_options)
        self.info = info
        self.id = info.id
        return info

    def _io_buffers(self):
        """x and y of this operator's spmv in shared memory (Client.empty), made once: each
        matvec copies v in and the product out, and the request names them where they lie (no
        scratch layout, no registration). None where the client has no shared memory."""
        if self._io is None:
            self._io = False
            if self.client.shm:
                wire = np.dtype(self._wire_dtype)
                xin = self.client.empty(self.shape[1], wire)
                yout = self.client.empty(self.shape[0], wire)
                if self.client.in_region(xin) and self.client.in_region(yout):
                    self._io = (xin, yout)
        return self._io

    def _matvec(self, x):
        x = np.asarray(x).reshape(-1)
        io = self._io_buffers() if x.dtype.kind in "fiub" and x.shape == (self.shape[1],) else None
        if io:
            xin, yout = io
            np.copyto(xin, x, casting="unsafe")
            self.client.spmv(self.id, xin, dtype=self._wire_dtype, out=yout)
            return yout.copy()  # fresh: SciPy's solvers keep products; yout serves the next call
        y = self.client.spmv(self.id, x, dtype=self._wire_dtype)
        # a view of the received bytes is read-only; SciPy's solvers may update a product in
        # place (gmres since SciPy 1.18: `w -= ...`)
        return y if y.flags.writeable else y.copy()

    def _rmatvec(self, x):
        if not self.symmetric:
            raise NotImplementedError(
                "krylovd multiplies by A only, not A^T; if A is symmetric, create the operator "
                "with symmetric=True"
            )
        return self._matvec(x)

    def _adjoint(self):
        if self.symmetric:
            return self
        return super()._adjoint()

    def solve(self, b, **options):
        """Solve A x = b on the server (Client.solve's options); returns a SolveResult."""
        return self.client.solve(self.id, b, **options)

    def __repr__(self):
        return (
            f"<{self.shape[0]}x{self.shape[1]} ResidentOperator {self.id} "
            f"({self.info.nnz} nonzeros, {self.info.dtype}) on {self.client.address}>"
        )
