"""The content id krylovd gives a matrix, computed on the client (docs/PROTOCOL.md, "Content id"),
so that put() can ask whether the server already holds a matrix before sending it.

The id is XXH3-128 over a 32-byte little-endian header (b"krylovd1", then rows, cols and nnz as
int64), one byte for the value dtype (0 float64, 1 float32), then the canonical CSR arrays as the
server keeps them: indptr (rows + 1 int32), indices (nnz int32, strictly increasing inside each
row: duplicates summed) and the values (nnz of the dtype), all little-endian; the 32 hex digits are
the digest in XXH128's canonical (big-endian) byte order. Needs the `xxhash` package (Debian:
python3-xxhash); without it, or for arrays that are not canonical CSR, content_id returns None and
put() uploads as before, which is always correct: the server answers with its own id.
"""

import hashlib
import struct

import numpy as np

try:
    import xxhash
except ImportError:  # optional: put() then always uploads
    xxhash = None

DTYPE_CODES = {"float64": 0, "float32": 1}
_VALUE = {"float64": np.dtype("<f8"), "float32": np.dtype("<f4")}
_INT32_MAX = 2**31 - 1


def _canonical(rows, cols, indptr, indices):
    """Whether (indptr, indices) is valid CSR with columns strictly increasing inside each row."""
    nnz = indices.shape[0]
    if indptr.shape != (rows + 1,) or indptr[0] != 0 or indptr[-1] != nnz:
        return False
    if rows > _INT32_MAX or cols > _INT32_MAX or nnz > _INT32_MAX:
        return False
    if nnz == 0:
        return bool(np.all(np.diff(indptr) == 0))
    if np.any(np.diff(indptr) < 0) or indices.min() < 0 or indices.max() >= cols:
        return False
    if indices.dtype.kind == "u":
        indices = indices.astype(np.int64)
    # columns strictly increasing, except where a new row starts (indices are in [0, cols), so
    # their differences fit the index type)
    rising = np.diff(indices) > 0
    starts = indptr[1:-1]
    rising[starts[(starts > 0) & (starts < nnz)] - 1] = True
    return bool(rising.all())


def csr_content_id(rows, cols, indptr, indices, values, dtype_name, canonical=None):
    """The server's id (32 hex digits) of the CSR matrix, or None (no xxhash, or not canonical).

    values are converted to dtype_name as the server stores them. canonical: True when the caller
    knows the arrays are canonical (scipy's has_canonical_format), else they are checked."""
    if xxhash is None or dtype_name not in DTYPE_CODES:
        return None
    indptr = np.asarray(indptr)
    indices = np.asarray(indices)
    if canonical is not True and not _canonical(int(rows), int(cols), indptr, indices):
        return None
    nnz = int(indices.shape[0])
    h = xxhash.xxh3_128()
    h.update(b"krylovd1" + struct.pack("<qqq", int(rows), int(cols), nnz))
    h.update(bytes([DTYPE_CODES[dtype_name]]))
    h.update(np.ascontiguousarray(indptr, dtype="<i4").data)
    h.update(np.ascontiguousarray(indices, dtype="<i4").data)
    h.update(np.ascontiguousarray(values, dtype=_VALUE[dtype_name]).data)
    return h.hexdigest()


def pattern_hash(rows, cols, indptr, indices):
    """The server's pattern hash of canonical CSR arrays (docs/PROTOCOL.md, "New values on a held
    pattern"): the first 16 bytes of SHA-256 over b"krylovd-pattern1", rows, cols and nnz
    (int64) and the int32 indptr and indices, all little-endian; 32 hex digits."""
    indices = np.asarray(indices)
    h = hashlib.sha256()
    h.update(b"krylovd-pattern1" + struct.pack("<qqq", int(rows), int(cols), int(indices.shape[0])))
    h.update(np.ascontiguousarray(indptr, dtype="<i4").data)
    h.update(np.ascontiguousarray(indices, dtype="<i4").data)
    return h.hexdigest()[:32]
