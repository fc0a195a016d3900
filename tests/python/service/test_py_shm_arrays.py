"""The Python client's arrays in shared memory and its wire paths (issue 35 parts 2 and 4).

Against a real krylovd listening on TCP and a Unix socket, with outputs poisoned (NaN) first:
kd.empty / kd.asarray give arrays in a region of their own on the Unix socket (plain arrays over
TCP, with shm=False and below 256 KiB), asarray of such an array is the array itself; spmv and
solve read them where they lie and, given one as out=, the server writes the result straight into
it (the call returns out itself), 1-D and n x k; the results equal those of the TCP path (large
bins read by the streaming reader) and of the Unix socket's bins bit for bit, and SciPy's. The
lifetime rule: a result without out= is a fresh array that later calls leave alone; out= of the
pool stays valid through later calls; an out that overlaps the input is not written by the server
(copied instead); once every view of an array is gone its region is unregistered with the next
request (server.status's shm_regions). put's values through the region (copied into the scratch
region, or named where they lie in an array of the pool), a full put and a like put, give the
content ids of bin puts. last_time_ms holds the server's time.
"""

import gc
import os
import shutil
import tempfile
import unittest

import numpy as np
import scipy.sparse as sp

import krylov
from kd_daemon import Daemon, make_rng, settle


def lap2d(n):
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
    eye = sp.identity(n, format="csr")
    return sp.csr_matrix(sp.kron(eye, t) + sp.kron(t, eye))


def setUpModule():
    global rng, tmp, daemon, unix
    rng = make_rng()
    tmp = tempfile.mkdtemp(prefix="kd-shm-arrays-")
    sock = os.path.join(tmp, "krylovd.sock")
    daemon = Daemon("--listen", "unix:" + sock).start()
    unix = "unix:" + sock


def tearDownModule():
    status = daemon.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    assert status == 0, f"krylovd exited with status {status}"


class TestArrays(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.A = lap2d(200)  # 40,000 rows: 320 KB vectors, above the 256 KiB threshold
        cls.n = cls.A.shape[0]
        cls.kd = krylov.Client(unix)
        cls.tcp = krylov.Client(daemon.address)
        cls.bins = krylov.Client(unix, shm=False)
        cls.m = cls.kd.put(cls.A, reorder="none")

    @classmethod
    def tearDownClass(cls):
        for c in (cls.kd, cls.tcp, cls.bins):
            c.close()

    def poisoned(self, client, shape, order="C"):
        out = client.empty(shape, np.float64, order)
        out[...] = np.nan
        return out

    def test_empty_and_asarray(self):
        kd = self.kd
        a = kd.empty(self.n)
        self.assertTrue(kd.in_region(a))
        self.assertEqual(a.shape, (self.n,))
        self.assertIs(kd.asarray(a), a)
        self.assertTrue(kd.in_region(a[10:]))  # a slice lies in the region too
        x = rng.standard_normal((self.n, 3))
        b = kd.asarray(x)
        self.assertTrue(kd.in_region(b))
        np.testing.assert_array_equal(b, x)
        self.assertFalse(kd.in_region(kd.empty(100)))  # small: a plain array
        self.assertFalse(kd.in_region(x))
        for other in (self.tcp, self.bins):
            c = other.empty(self.n)
            self.assertFalse(other.in_region(c))
            self.assertEqual(c.shape, (self.n,))
            np.testing.assert_array_equal(other.asarray(x), x)

    def test_spmv_reads_and_writes_in_place(self):
        kd, A = self.kd, self.A
        x = kd.asarray(rng.standard_normal(self.n))
        out = self.poisoned(kd, self.n)
        self.assertIs(kd.spmv(self.m, x, out=out), out)
        self.assertGreater(kd.last_time_ms, 0.0)
        y_tcp = self.tcp.spmv(self.m, np.array(x))
        y_bins = self.bins.spmv(self.m, np.array(x))
        np.testing.assert_array_equal(out, y_tcp)
        np.testing.assert_array_equal(out, y_bins)
        np.testing.assert_allclose(out, A @ x, rtol=1e-12, atol=1e-12)
        # alpha, beta and y from the pool
        y0 = kd.asarray(rng.standard_normal(self.n))
        out2 = self.poisoned(kd, self.n)
        kd.spmv(self.m, x, alpha=2.0, beta=-1.0, y=y0, out=out2)
        np.testing.assert_allclose(out2, 2.0 * (A @ x) - y0, rtol=1e-12, atol=1e-12)

    def test_spmv_columns(self):
        kd, A = self.kd, self.A
        X = kd.asarray(rng.standard_normal((self.n, 3)))
        self.assertTrue(X.flags.f_contiguous)
        out = self.poisoned(kd, (self.n, 3), "F")
        self.assertIs(kd.spmv(self.m, X, out=out), out)
        np.testing.assert_array_equal(out, self.tcp.spmv(self.m, np.array(X)))
        np.testing.assert_allclose(out, A @ X, rtol=1e-12, atol=1e-12)

    def test_solve_in_place(self):
        kd = self.kd
        b = kd.asarray(rng.standard_normal(self.n))
        out = self.poisoned(kd, self.n)
        res = kd.solve(self.m, b, rtol=1e-10, out=out)
        self.assertIs(res.x, out)
        self.assertEqual(res.status, "converged")
        ref = self.tcp.solve(self.m, np.array(b), rtol=1e-10)
        np.testing.assert_array_equal(out, ref.x)
        self.assertEqual(res.iterations, ref.iterations)
        x0 = kd.asarray(np.full(self.n, 0.5))
        out2 = self.poisoned(kd, self.n)
        res2 = kd.solve(self.m, b, rtol=1e-10, x0=x0, out=out2)
        np.testing.assert_array_equal(out2, self.bins.solve(self.m, np.array(b), rtol=1e-10,
                                                            x0=np.array(x0)).x)
        self.assertIs(res2.x, out2)
        # out that is not of the pool: copied into
        plain = np.full(self.n, np.nan)
        self.assertIs(kd.solve(self.m, b, rtol=1e-10, out=plain).x, plain)
        np.testing.assert_array_equal(plain, ref.x)

    def test_lifetime_rule(self):
        kd = self.kd
        x1 = rng.standard_normal(self.n)
        y1 = kd.spmv(self.m, x1)  # no out: a fresh array, in no region
        self.assertFalse(kd.in_region(y1))
        keep = y1.copy()
        out = self.poisoned(kd, self.n)
        kd.spmv(self.m, x1, out=out)
        kept_out = out.copy()
        for _ in range(3):  # later calls through the scratch region and other arrays
            kd.spmv(self.m, rng.standard_normal(self.n))
            kd.spmv(self.m, kd.asarray(rng.standard_normal(self.n)), out=kd.empty(self.n))
        np.testing.assert_array_equal(y1, keep)
        np.testing.assert_array_equal(out, kept_out)
        # in place (out is x): refused by the server, so the client copies instead
        z = kd.asarray(x1)
        self.assertIs(kd.spmv(self.m, z, out=z), z)
        np.testing.assert_array_equal(z, keep)

    def test_regions_unregistered_when_arrays_go(self):
        with krylov.Client(unix) as kd:
            kd.spmv(self.m, rng.standard_normal(self.n))  # the scratch region
            gc.collect()
            base = kd.status().raw["shm_regions"]
            arrays = [kd.empty(self.n) for _ in range(3)]
            view = arrays[0][5:]
            self.assertEqual(kd.status().raw["shm_regions"], base + 3)
            del arrays
            gc.collect()
            self.assertEqual(len(kd._pool), 1)  # the view holds its region
            # the next request (a status) sends the unregisters
            self.assertTrue(settle(lambda: kd.status().raw["shm_regions"] == base + 1, 30))
            del view
            gc.collect()
            kd.spmv(self.m, rng.standard_normal(self.n))  # sends the unregister
            self.assertTrue(settle(lambda: kd.status().raw["shm_regions"] == base, 30))

    def test_put_through_region_same_id(self):
        kd = self.kd
        B = self.A.copy()
        B.data = B.data * (1.0 + rng.random())
        uses = kd._arena.uses
        by_region = kd.put(B, name="through-region")
        self.assertGreater(kd._arena.uses, uses)
        by_bin = self.bins.put(B, name="as-bins")
        by_tcp = self.tcp.put(B, name="over-tcp")
        self.assertEqual(by_region.id, by_bin.id)
        self.assertEqual(by_region.id, by_tcp.id)
        # values named where they lie (an array of the pool)
        vals = kd.asarray(B.data * 3.0)
        C = sp.csr_matrix((vals, B.indices, B.indptr), shape=B.shape)
        self.assertTrue(kd.in_region(C.data))
        c_region = kd.put(C, name="pool-values")
        c_bins = self.bins.put(sp.csr_matrix((np.array(vals), B.indices, B.indptr),
                                             shape=B.shape), name="pool-bins")
        self.assertEqual(c_region.id, c_bins.id)
        # like puts
        D = self.A.copy()
        D.data = D.data * 0.25
        like_region = kd.put(D, like=self.m)
        like_bins = self.bins.put(D, like=self.m)
        like_tcp = self.tcp.put(D, like=self.m)
        self.assertEqual(like_region.id, like_bins.id)
        self.assertEqual(like_region.id, like_tcp.id)
        x = rng.standard_normal(self.n)
        np.testing.assert_allclose(kd.spmv(like_region, x), D @ x, rtol=1e-12, atol=1e-12)

    def test_put_values(self):
        """put_values: the values alone, in the like matrix's canonical order, from a kd.empty
        array (named where it lies), a plain array through the scratch region, bins and TCP,
        all the id of put(A, like=...) with the same values; a wrong count or shape is refused
        before anything is sent, and the server refuses a count the client could not check."""
        kd = self.kd
        D = self.A.copy()
        D.data = D.data * (0.5 + rng.random())
        expected = self.tcp.put(D, like=self.m)
        vals = kd.empty(D.nnz)
        vals[:] = np.nan
        vals[:] = D.data
        self.assertTrue(kd.in_region(vals))
        uses = kd._arena.uses
        ids = {kd.put_values(self.m, vals).id,
               kd.put_values(self.m, np.array(D.data)).id,
               self.bins.put_values(self.m, D.data).id,
               self.tcp.put_values(self.m, D.data).id}
        self.assertGreater(kd._arena.uses, uses)  # the plain array went through the region
        self.assertEqual(ids, {expected.id})
        x = rng.standard_normal(self.n)
        info = kd.put_values(self.m.id, vals, persist="none")  # an id, not a MatrixInfo
        self.assertEqual(info.id, expected.id)
        np.testing.assert_allclose(kd.spmv(info, x), D @ x, rtol=1e-12, atol=1e-12)
        with self.assertRaisesRegex(ValueError, "stored entries"):
            kd.put_values(self.m, D.data[:-1])
        with self.assertRaisesRegex(ValueError, "1-D"):
            kd.put_values(self.m, D.data.reshape(-1, 1))
        with self.assertRaises(krylov.BadRequest) as caught:
            self.tcp.put_values(self.m.id, D.data[:-1])  # no MatrixInfo: the server counts
        self.assertIn(str(D.nnz), str(caught.exception))


if __name__ == "__main__":
    unittest.main()
