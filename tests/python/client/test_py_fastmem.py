"""The Python client's threaded copies and comparisons (client/python/krylov/_fastmem.py), and the
like put's pattern check that uses them.

Copies of fresh random arrays, the destination poisoned first, below and above the threaded size,
C and Fortran order, a size that is not a multiple of the chunk, and a mixed layout or dtype (the
one-call fallback): byte for byte as np.copyto. equal() against np.array_equal: equal arrays, one
byte changed at the start, in a middle chunk and at the end, other shapes and dtypes. And a like
put whose pattern arrays are changed in place after one put (the same objects) is not taken for
the remembered pattern: it is refused as not the like matrix's.
"""

import unittest

import numpy as np
import scipy.sparse as sp

from krylov import _fastmem
from kd_daemon import Daemon, make_rng


class Copies(unittest.TestCase):
    def setUp(self):
        self.rng = make_rng()

    def check_copy(self, src, dst_order="C", dst_dtype=None):
        dst = np.empty(src.shape, dtype=dst_dtype or src.dtype, order=dst_order)
        dst.fill(-7.5)  # poison
        _fastmem.copy(dst, src)
        want = np.empty_like(dst)
        np.copyto(want, src, casting="unsafe")
        self.assertTrue(np.array_equal(dst, want, equal_nan=True))

    def test_sizes_and_layouts(self):
        large = _fastmem.LARGE // 8
        for n in (1, 1000, large - 1, large + 1, 3 * large + 12345):
            self.check_copy(self.rng.standard_normal(n))
        m = self.rng.standard_normal((large // 3 + 7, 4))
        self.check_copy(m)
        self.check_copy(np.asfortranarray(m), dst_order="F")
        self.check_copy(m, dst_order="F")  # layouts differ: one np.copyto
        self.check_copy(m, dst_dtype=np.float32)  # dtypes differ: the same

    def test_fresh(self):
        a = self.rng.standard_normal(3 * _fastmem.LARGE // 8 + 5)
        b = _fastmem.fresh(a)
        self.assertIsNot(a, b)
        self.assertTrue(np.array_equal(a, b))
        f = np.asfortranarray(self.rng.standard_normal((_fastmem.LARGE // 16 + 3, 3)))
        g = _fastmem.fresh(f)
        self.assertTrue(g.flags.f_contiguous and np.array_equal(f, g))

    def test_equal(self):
        n = 5 * _fastmem.LARGE // 4 + 3
        a = self.rng.integers(0, 1 << 30, n, dtype=np.int32)
        self.assertTrue(_fastmem.equal(a, a.copy()))
        for at in (0, n // 2, 2 * _fastmem.LARGE // 4 + 1, n - 1):
            b = a.copy()
            b[at] ^= 1
            self.assertFalse(_fastmem.equal(a, b), at)
            self.assertFalse(_fastmem.equal(b, a), at)
        self.assertFalse(_fastmem.equal(a, a[:-1].copy()))
        self.assertFalse(_fastmem.equal(a, a.astype(np.int64)))
        small = a[:100].copy()
        self.assertTrue(_fastmem.equal(small, a[:100]))
        self.assertTrue(_fastmem.equal(a[::2], a[::2].copy()))  # not contiguous: numpy's


class LikePattern(unittest.TestCase):
    def test_pattern_changed_in_place_is_not_the_remembered_one(self):
        import krylov

        n = 500  # 1.2M entries: the indices' 5 MB compared on threads
        t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        A = sp.csr_matrix(sp.kron(sp.identity(n), t) + sp.kron(t, sp.identity(n)))
        A.sort_indices()
        self.assertGreater(A.indices.nbytes, _fastmem.LARGE)  # the threaded comparison
        with Daemon() as d, krylov.Client(d.address) as kd:
            base = kd.put(A)
            B = A.copy()
            B.data *= 2.0
            info = kd.put(B, like=base)  # remembered
            self.assertEqual(info.nnz, A.nnz)
            B.data *= 1.5
            again = kd.put(B, like=base)  # the same arrays: the memo's
            self.assertEqual(again.pattern, info.pattern)
            # one row's columns moved in place: still canonical, another pattern
            r = n * n // 2
            lo, hi = B.indptr[r], B.indptr[r + 1]
            self.assertGreater(B.indices[lo + 1] - B.indices[lo], 1)
            B.indices[lo] += 1
            self.assertTrue(np.all(np.diff(B.indices[lo:hi]) > 0))
            # refused by the client (the like matrix's pattern known) or by the server (the
            # pattern hash sent is not its): never taken for the remembered one
            with self.assertRaises((ValueError, krylov.errors.BadRequest)) as caught:
                kd.put(B, like=base)
            self.assertIn("pattern", str(caught.exception))


if __name__ == "__main__":
    unittest.main()
