"""A pattern stored once in the state directory (issue 22; docs/OPERATIONS.md, "The state
directory"), end to end: a real krylovd on loopback with its own state directory, restarted on it.

- ten versions of one 200k-nonzero pattern (a full put, then nine puts with like) take at most the
  pattern, ten times the values and 5% on disk (the matrix and pattern files, headers and blocks
  included); server.status's state_bytes equals the files' sizes (the pattern counted once); after
  a restart all ten answer SpMV as SciPy computes it;
- dropping versions (the first, which carries the pattern file, and one in the middle) leaves the
  others loadable, before and after a restart, and the bytes still add up;
- under --state-max-bytes, the first version (the pattern file's carrier) is forgotten to make
  room for a fourth: the charge moves, state_bytes is the pattern once plus three values files,
  what is on disk, under the limit;
- a damaged pattern file: the first use of a version finds it, and it goes to corrupt/ with every
  version's values file; each version answers NOT_FOUND saying why, a matrix of another pattern is
  untouched, corrupt_files counts the files, state_bytes is what is left on disk;
- a state directory of the old layout (a file written by krylovd before pattern files,
  tests/data/state_v1) is served after the upgrade, takes a put with like, and its drop leaves
  the new version whole.
"""

import os
import shutil
import tempfile
import unittest

import numpy as np
import scipy.sparse as sp

import krylov
from kd_daemon import Daemon, SOURCE_DIR, make_rng

rng = None


def setUpModule():
    global rng
    rng = make_rng()


def heat(n, dt):
    """I + dt L on an n x n grid (2-D Laplacian L): its values change with dt, its pattern not."""
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    lap = sp.kron(sp.identity(n), t) + sp.kron(t, sp.identity(n))
    a = sp.csr_matrix(sp.identity(n * n) + dt * lap)
    a.sum_duplicates()
    a.sort_indices()
    return a


def old_matrix():
    """The matrix of tests/data/state_v1 (30 rows, 128 nonzeros), as it was put."""
    t6 = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(6, 6))
    t5 = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(5, 5))
    lap = sp.kron(sp.identity(5), t6) + sp.kron(t5, sp.identity(6))
    a = sp.csr_matrix(lap + sp.diags(np.linspace(0.5, 1.5, 30)))
    a.sum_duplicates()
    a.sort_indices()
    return a


OLD_ID = "eb4684e0006228085dfaec3e77ebeb26"


def files_under(state, subdirs=("matrices", "patterns")):
    """(apparent bytes, disk bytes as du counts them) of the matrix and pattern files."""
    apparent = disk = 0
    for sub in subdirs:
        d = os.path.join(state, sub)
        for name in os.listdir(d):
            st = os.stat(os.path.join(d, name))
            apparent += st.st_size
            disk += st.st_blocks * 512
    return apparent, disk


class StatePatternTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="krylovd-pattern-")
        self.state = os.path.join(self.dir, "state")
        self.daemon = None
        self.kd = None

    def tearDown(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self):
        self.daemon = Daemon("--format", "csr_scalar", directory=self.dir).start()
        self.kd = krylov.Client(self.daemon.address)

    def stop(self):
        if self.kd is not None:
            self.kd.close()
            self.kd = None
        if self.daemon is not None:
            status = self.daemon.stop()
            self.daemon = None
            self.assertEqual(status, 0)

    def restart(self):
        self.stop()
        self.start()

    def spmv_ok(self, mid, a):
        x = rng.standard_normal(a.shape[1])
        y = self.kd.spmv(mid, x)
        ref = a @ x
        self.assertLessEqual(np.abs(y - ref).max(), 1e-12 * max(1.0, np.abs(ref).max()), mid)

    def state_bytes(self):
        return self.kd.status().raw["state_bytes"]

    def count(self, sub, suffix=""):
        d = os.path.join(self.state, sub)
        if not os.path.isdir(d):
            return 0
        return sum(1 for n in os.listdir(d) if n.endswith(suffix))

    def test_ten_versions_take_one_pattern(self):
        self.start()
        versions = [heat(201, 0.05 + 0.1 * k) for k in range(10)]
        a0 = versions[0]
        self.assertGreaterEqual(a0.nnz, 200_000)
        ids = [self.kd.put(a0, name="v0").id]
        for k in range(1, 10):
            info = self.kd.put(versions[k], like=ids[0], name=f"v{k}")
            self.assertTrue(info.created)
            ids.append(info.id)
        self.assertEqual(len(set(ids)), 10)
        rows, nnz = a0.shape[0], a0.nnz
        pattern = (rows + 1) * 4 + nnz * 4
        values = nnz * 8
        bound = (pattern + 10 * values) * 1.05
        apparent, disk = files_under(self.state)
        print(f"ten versions: {apparent} bytes ({disk} on disk) for pattern {pattern} + 10 x "
              f"values {values} = {pattern + 10 * values}; bound {bound:.0f}; one file each: "
              f"{(rows + 1) * 4 + nnz * 12} x 10 = {10 * ((rows + 1) * 4 + nnz * 12)}")
        self.assertLessEqual(apparent, bound)
        self.assertLessEqual(disk, bound)
        self.assertEqual(self.count("patterns", ".kdp"), 1)
        self.assertEqual(self.count("matrices", ".kdm"), 10)
        self.assertEqual(self.state_bytes(), apparent)

        self.restart()
        self.assertEqual(len(self.kd.list()), 10)
        self.assertEqual(self.state_bytes(), apparent)
        for mid, a in zip(ids, versions):
            self.spmv_ok(mid, a)

        # the first version carries the pattern file: dropping it moves the charge
        for gone in (0, 4):
            self.kd.drop(ids[gone])
            self.assertEqual(self.state_bytes(), files_under(self.state)[0])
        kept = [k for k in range(10) if k not in (0, 4)]
        for k in kept[:3]:
            self.spmv_ok(ids[k], versions[k])
        self.restart()
        self.assertEqual(self.state_bytes(), files_under(self.state)[0])
        self.assertEqual(sorted(m.id for m in self.kd.list()), sorted(ids[k] for k in kept))
        for k in kept:
            self.spmv_ok(ids[k], versions[k])
        self.assertEqual(self.count("patterns", ".kdp"), 1)
        self.assertEqual(self.count("corrupt"), 0)

        # the last one's drop takes the pattern file along
        for k in kept:
            self.kd.drop(ids[k])
        self.assertEqual(self.count("patterns", ".kdp"), 0)
        self.assertEqual(self.state_bytes(), 0)

    def test_disk_limit_forgets_the_carrier(self):
        versions = [heat(40, 0.1 * (k + 1)) for k in range(4)]
        rows, nnz = versions[0].shape[0], versions[0].nnz
        pattern_file = 128 + (rows + 1) * 4 + nnz * 4
        values_file = 2048 + nnz * 8
        limit = pattern_file + 3 * values_file + values_file // 2
        self.daemon = Daemon("--format", "csr_scalar", "--state-max-bytes", str(limit),
                             directory=self.dir).start()
        self.kd = krylov.Client(self.daemon.address)
        # each like the one before: the first version, which carries the pattern file, is the
        # least recently used when the fourth comes and is forgotten; its charge moves
        ids = [self.kd.put(versions[0]).id]
        for a in versions[1:]:
            ids.append(self.kd.put(a, like=ids[-1]).id)
        status = self.kd.status().raw
        self.assertEqual(status["cache"]["disk_evictions"], 1)
        self.assertEqual(sorted(m.id for m in self.kd.list()), sorted(ids[1:]))
        self.assertEqual(status["state_bytes"], pattern_file + 3 * values_file)
        self.assertEqual(status["state_bytes"], files_under(self.state)[0])
        self.assertLessEqual(status["state_bytes"], limit)
        for mid, a in zip(ids[1:], versions[1:]):
            self.spmv_ok(mid, a)
        self.stop()
        self.daemon = Daemon("--format", "csr_scalar", "--state-max-bytes", str(limit),
                             directory=self.dir).start()
        self.kd = krylov.Client(self.daemon.address)
        self.assertEqual(self.state_bytes(), pattern_file + 3 * values_file)
        for mid, a in zip(ids[1:], versions[1:]):
            self.spmv_ok(mid, a)

    def test_damaged_pattern_file_moves_its_versions_aside(self):
        self.start()
        versions = [heat(40, 0.1 * (k + 1)) for k in range(4)]
        other = sp.csr_matrix(heat(20, 0.3))
        ids = [self.kd.put(versions[0]).id]
        ids += [self.kd.put(a, like=ids[0]).id for a in versions[1:]]
        other_id = self.kd.put(other).id
        self.stop()
        patterns = sorted(os.listdir(os.path.join(self.state, "patterns")))
        self.assertEqual(len(patterns), 2)
        # the pattern file of the versions is the larger one (40 x 40 grid)
        sizes = {p: os.path.getsize(os.path.join(self.state, "patterns", p)) for p in patterns}
        damaged = max(sizes, key=sizes.get)
        with open(os.path.join(self.state, "patterns", damaged), "r+b") as f:
            f.seek(sizes[damaged] - 6)  # a column index: the payload checksum fails
            b = f.read(1)
            f.seek(sizes[damaged] - 6)
            f.write(bytes([b[0] ^ 0x10]))

        self.start()  # start-up reads headers only: all listed
        self.assertEqual(len(self.kd.list()), 5)
        x = rng.standard_normal(versions[0].shape[1])
        with self.assertRaises(krylov.KrylovError) as e:
            self.kd.spmv(ids[2], x)
        self.assertEqual(e.exception.code, "NOT_FOUND")
        self.assertIn("pattern file", str(e.exception))
        self.assertIn("upload it again", str(e.exception))
        for k in (0, 1, 3):
            with self.assertRaises(krylov.KrylovError) as e:
                self.kd.spmv(ids[k], x)
            self.assertEqual(e.exception.code, "NOT_FOUND")
        self.spmv_ok(other_id, other)
        status = self.kd.status().raw
        self.assertEqual(status["cache"]["corrupt_files"], 5)  # the pattern and four values
        self.assertEqual(self.count("corrupt"), 5)
        self.assertEqual(status["state_bytes"], files_under(self.state)[0])
        self.assertEqual([m.id for m in self.kd.list()], [other_id])
        self.restart()
        self.assertEqual([m.id for m in self.kd.list()], [other_id])
        self.spmv_ok(other_id, other)

    def test_old_layout_after_the_upgrade(self):
        os.makedirs(os.path.join(self.state, "matrices"))
        shutil.copy(os.path.join(SOURCE_DIR, "tests", "data", "state_v1", OLD_ID + ".kdm"),
                    os.path.join(self.state, "matrices"))
        self.start()
        a = old_matrix()
        [info] = self.kd.list()
        self.assertEqual(info.id, OLD_ID)
        self.spmv_ok(OLD_ID, a)
        self.assertEqual(self.state_bytes(), 3708)
        b = a.copy()
        b.data = rng.uniform(1.0, 2.0, a.nnz)
        new_id = self.kd.put(b, like=OLD_ID).id
        self.spmv_ok(new_id, b)
        self.assertEqual(self.count("patterns", ".kdp"), 1)  # the new version's, in the new layout
        self.kd.drop(OLD_ID)
        self.restart()
        self.assertEqual([m.id for m in self.kd.list()], [new_id])
        self.spmv_ok(new_id, b)
        self.assertEqual(self.state_bytes(), files_under(self.state)[0])
        self.assertEqual(self.count("corrupt"), 0)


if __name__ == "__main__":
    unittest.main()
