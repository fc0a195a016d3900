"""Batched matrices (docs/PROTOCOL.md, "Batched matrices"): many small systems that share one
sparsity pattern, uploaded as one id and solved in one request, each system stopping on its own.

    infos = kd.put_batch([A0, A1, ...])        # scipy matrices with one pattern
    res = kd.solve(infos, B)                    # B: (k, n), one row per system
    res.x[s], res.status[s], res.iterations[s]

Client.put_batch and Client.solve call into this module.
"""

from dataclasses import dataclass, field
from typing import Any, List

import numpy as np

from . import errors


@dataclass(frozen=True)
class BatchSolveResult:
    """What a solve on a batch returned: x is (k, n), row s system s's solution; status,
    message (lists), iterations, residual (||b_s - A_s x_s||), relative_residual (arrays) have
    one entry per system; history (with history=True) a list of arrays, ||r|| after every
    iteration. converged counts the converged systems; time_ms is the whole request on the
    server; local_memory says whether the systems' vectors lived in on-chip memory."""

    x: np.ndarray
    status: List[str]
    iterations: np.ndarray
    residual: np.ndarray
    relative_residual: np.ndarray
    message: List[str]
    converged_count: int
    time_ms: float
    method: str = ""
    preconditioner: str = ""
    history: Any = None
    local_memory: bool = False
    launches: int = 0
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def batch(self):
        return len(self.status)

    @property
    def converged(self):
        """True when every system converged."""
        return self.converged_count == len(self.status)

    def summary(self):
        """A short table: one line per status with its count and iteration range."""
        lines = [f"{'status':<16}{'systems':>8}{'iterations':>16}"]
        its = np.asarray(self.iterations)
        for st in sorted(set(self.status)):
            sel = np.array([s == st for s in self.status])
            lines.append(f"{st:<16}{int(sel.sum()):>8}{int(its[sel].min()):>8}..{int(its[sel].max()):<6}")
        return "\n".join(lines)

    def __repr__(self):
        return (f"BatchSolveResult(batch={self.batch}, converged={self.converged_count}, "
                f"iterations={int(np.min(self.iterations))}..{int(np.max(self.iterations))}, "
                f"time_ms={self.time_ms:.3f})")


def pattern_and_values(matrices, values=None):
    """(indptr, indices, shape, values k x nnz) from a list of scipy matrices with one pattern,
    or from one pattern matrix and a (k, nnz) values array in its CSR entry order."""
    if values is not None:
        pattern = matrices.tocsr()
        vals = np.asarray(values)
        if vals.ndim != 2 or vals.shape[1] != pattern.nnz:
            raise ValueError(f"values must be (k, {pattern.nnz}) for this pattern, "
                             f"not {vals.shape}")
        return pattern.indptr, pattern.indices, pattern.shape, vals
    mats = [m.tocsr() for m in matrices]
    if not mats:
        raise ValueError("put_batch needs at least one matrix")
    for m in mats:
        if not m.has_canonical_format:
            m.sum_duplicates()
    first = mats[0]
    for s, m in enumerate(mats[1:], 1):
        if (m.shape != first.shape or not np.array_equal(m.indptr, first.indptr)
                or not np.array_equal(m.indices, first.indices)):
            raise ValueError(f"matrix {s} does not have matrix 0's sparsity pattern")
    return first.indptr, first.indices, first.shape, np.stack([m.data for m in mats])


def per_system(value, k, name, kind):
    """A scalar as it is, or a sequence of k as a list (kind: float or int)."""
    if np.ndim(value) == 0:
        return kind(value)
    seq = [kind(v) for v in np.asarray(value).ravel()]
    if len(seq) != k:
        raise ValueError(f"{name} has {len(seq)} entries but the batch has {k} systems")
    return seq


def result_from_wire(result, k, n, wire_dtype):
    if not isinstance(result, dict) or "batch" not in result:
        raise errors.ProtocolError("the server's batched solve result is not a batch's")
    x = np.frombuffer(result["x"], dtype=wire_dtype).reshape(k, n)
    hist = result.get("history")
    return BatchSolveResult(
        x=x,
        status=list(result["status"]),
        iterations=np.asarray(result["iterations"], dtype=np.int64),
        residual=np.asarray(result["residual_norm"], dtype=float),
        relative_residual=np.asarray(result["relative_residual"], dtype=float),
        message=list(result["message"]),
        converged_count=int(result.get("converged", 0)),
        time_ms=float(result.get("time_ms", 0.0)),
        method=result.get("method", ""),
        preconditioner=result.get("preconditioner", ""),
        history=None if hist is None else [np.asarray(h, dtype=float) for h in hist],
        local_memory=bool(result.get("local_memory", False)),
        launches=int(result.get("launches", 0)),
        raw=result,
    )
