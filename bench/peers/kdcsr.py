"""The binary CSR that `krylov-bench export` and `--export` write (bench/bench.h): "KDCSR64\\0",
rows, cols, nnz as little-endian int64, then indptr and indices as int32 and values as float64.
The peers read their matrices through here, so every contender multiplies the same bytes."""
import numpy as np

MAGIC = b"KDCSR64\0"


def read_csr(path):
    """(rows, cols, indptr, indices, values) of a KDCSR64 file, or of a Matrix Market file read
    as krylovd reads it (duplicates summed, columns sorted)."""
    if path.endswith(".mtx"):
        import scipy.io
        import scipy.sparse
        m = scipy.sparse.csr_matrix(scipy.io.mmread(path))
        m.sum_duplicates()
        m.sort_indices()
        return (m.shape[0], m.shape[1], m.indptr.astype(np.int32), m.indices.astype(np.int32),
                m.data.astype(np.float64))
    with open(path, "rb") as f:
        if f.read(8) != MAGIC:
            raise SystemExit(f"{path}: not a KDCSR64 file")
        rows, cols, nnz = (int(x) for x in np.frombuffer(f.read(24), dtype="<i8"))
        ptr = np.frombuffer(f.read(4 * (rows + 1)), dtype="<i4")
        idx = np.frombuffer(f.read(4 * nnz), dtype="<i4")
        val = np.frombuffer(f.read(8 * nnz), dtype="<f8")
    return rows, cols, ptr, idx, val


def write_csr(path, m):
    """A SciPy sparse matrix as a KDCSR64 file (columns sorted)."""
    import scipy.sparse
    m = scipy.sparse.csr_matrix(m)
    m.sort_indices()
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(np.array([m.shape[0], m.shape[1], m.nnz], dtype="<i8").tobytes())
        f.write(m.indptr.astype("<i4").tobytes())
        f.write(m.indices.astype("<i4").tobytes())
        f.write(m.data.astype("<f8").tobytes())
