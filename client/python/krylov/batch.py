"""Batched solves: many small systems in one request, each stopping on its own.

Systems that share one sparsity pattern (docs/PROTOCOL.md, "Batched matrices") are uploaded as
one id and solved together:

    infos = kd.put_batch([A0, A1, ...])        # scipy matrices with one pattern
    res = kd.solve(infos, B)                    # B: (k, n), one row per system
    res.x[s], res.status[s], res.iterations[s]

Resident matrices of their own patterns and sizes (docs/PROTOCOL.md, "solve.batch") are solved
together by solve_many, each item answered on its own (an unknown id fails only its item):

    res = kd.solve_many([(A, b), (info, b2), (other_id, b3, x0)], rtol=1e-10)
    res[0].x, res[1].status, res.summary()

Client.put_batch, Client.solve and Client.solve_many call into this module.
"""

from dataclasses import dataclass, field
from typing import Any, List, Optional

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


@dataclass(frozen=True)
class ItemResult:
    """One item of solve_many: x (its rows, None for an item that failed its checks), status
    ("converged", "max_iterations", "breakdown", "non_finite", "stagnated", or "error" when the
    item could not run: .error is then the KrylovError it got, e.g. NotFound for an unknown id),
    iterations, residual (||b - A x||), relative_residual, message; history with history=True."""

    x: Optional[np.ndarray]
    status: str
    iterations: int
    residual: float
    relative_residual: float
    message: str
    error: Optional[errors.KrylovError] = None
    history: Any = None

    @property
    def residual_norm(self):
        return self.residual

    @property
    def converged(self):
        return self.status == "converged"


@dataclass(frozen=True)
class ManySolveResult:
    """What solve_many returned: one ItemResult per item, in the items' order (res[i],
    len(res), iteration over them). converged_count and failed count the items that converged
    and those that failed their checks; groups and launches say how the server ran them (a group
    is one batch of systems sharing launches); time_ms is the whole request on the server."""

    items: List[ItemResult]
    converged_count: int
    failed: int
    groups: int
    launches: int
    time_ms: float
    method: str = ""
    preconditioner: str = ""
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __iter__(self):
        return iter(self.items)

    @property
    def converged(self):
        """True when every item converged."""
        return self.converged_count == len(self.items)

    def summary(self, limit=20):
        """A table: one line per item (status, iterations, relative residual) for up to `limit`
        items; more are condensed to a count per status with its iteration range and worst
        relative residual."""
        if len(self.items) <= limit:
            lines = [f"{'item':>6}  {'status':<16}{'iterations':>11}  {'relative residual':>18}"]
            for i, it in enumerate(self.items):
                rel = "-" if it.status == "error" else f"{it.relative_residual:.3e}"
                its = "-" if it.status == "error" else str(it.iterations)
                lines.append(f"{i:>6}  {it.status:<16}{its:>11}  {rel:>18}")
                if it.status == "error":
                    lines[-1] += f"  {it.error.code}: {it.message}"
            return "\n".join(lines)
        lines = [f"{'status':<16}{'items':>8}{'iterations':>16}  {'worst rel. residual':>20}"]
        for st in sorted({it.status for it in self.items}):
            sel = [it for it in self.items if it.status == st]
            if st == "error":
                lines.append(f"{st:<16}{len(sel):>8}{'-':>16}  {'-':>20}")
                continue
            its = [it.iterations for it in sel]
            worst = max(it.relative_residual for it in sel)
            lines.append(f"{st:<16}{len(sel):>8}{min(its):>8}..{max(its):<6}  {worst:>20.3e}")
        return "\n".join(lines)

    def __repr__(self):
        return (f"ManySolveResult(items={len(self.items)}, converged={self.converged_count}, "
                f"failed={self.failed}, groups={self.groups}, time_ms={self.time_ms:.3f})")


def many_from_wire(result, wire_dtype):
    if not isinstance(result, dict) or not isinstance(result.get("items"), list):
        raise errors.ProtocolError("the server's solve.batch result has no 'items'")
    items = []
    for it in result["items"]:
        if not isinstance(it, dict):
            raise errors.ProtocolError("a solve.batch item is not a map")
        status = it.get("status", "")
        message = it.get("message", "")
        if status == "error":
            err = errors.error_from_wire({"code": it.get("error"), "message": message})
            items.append(ItemResult(None, status, 0, float("nan"), float("nan"), message, err))
            continue
        hist = it.get("history")
        items.append(ItemResult(
            x=np.frombuffer(it["x"], dtype=wire_dtype),
            status=status,
            iterations=int(it.get("iterations", 0)),
            residual=float(it.get("residual_norm", float("nan"))),
            relative_residual=float(it.get("relative_residual", float("nan"))),
            message=message,
            history=None if hist is None else np.asarray(hist, dtype=float),
        ))
    return ManySolveResult(
        items=items,
        converged_count=int(result.get("converged", 0)),
        failed=int(result.get("failed", 0)),
        groups=int(result.get("groups", 0)),
        launches=int(result.get("launches", 0)),
        time_ms=float(result.get("time_ms", 0.0)),
        method=result.get("method", ""),
        preconditioner=result.get("preconditioner", ""),
        raw=result,
    )
