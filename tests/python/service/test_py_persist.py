"""Persistence as a choice per put (issue 35; docs/PROTOCOL.md matrix.put `persist`,
docs/OPERATIONS.md "Persistence choices"), end to end: a real krylovd on loopback with its own
state directory, restarted on it.

- each mode, full put and put with like: the reply's persisted and durable; matrix.info's; the
  state directory right after the reply (sync: the file; none: nothing, ever) and once the write
  behind the reply is done (behind: durable turns true, the file is there, no marker left); the
  put with like makes the id a full put of the same values makes;
- a restart serves the sync and written behind matrices and has forgotten the none ones; a
  SIGTERM right after behind puts' replies writes them before the server exits;
- a put of held content with a stronger persist writes it (none -> sync, none -> behind);
- --persist-default behind applies to a put without persist;
- a bad persist is BAD_REQUEST naming the choices;
- without a state directory every put says persisted none, durable false;
- a write behind the reply stalled (krylovd_faults, KD_TEST_FAULT=stall:K at its first write)
  and the daemon SIGKILLed: the restart serves the others, logs the lost matrix by id, and leaves
  neither a temporary file nor a marker behind;
- the writer thread: while a large matrix's write behind is stalled, a put with like of it, a
  sync put of another matrix and an spmv answer (the worker never waits for the write); a drop
  during the stalled write answers and removes the marker (the restart reports nothing lost); a
  sync put of the same content waits for the write and corrupts nothing; a drop right after a
  large behind put leaves no file; --state-max-bytes forgets the least recently used matrix when
  a written file is published; SIGTERM with writes queued writes them all;
- values from a shared-memory region (over the Unix socket), full put and put with like, with
  each persist: the ids are those of the same values sent in the message.
"""

import os
import re
import shutil
import signal
import tempfile
import threading
import time
import unittest

import numpy as np
import scipy.sparse as sp

import krylov
from krylov import errors
from kd_daemon import Daemon, make_rng, settle
from kd_raw import Raw
from test_py_shm_server import fill, memfd

rng = None


def setUpModule():
    global rng
    rng = make_rng()


def grid(n, shift):
    """shift I + the 2-D Laplacian on an n x n grid: one pattern, values set by shift."""
    t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
    a = sp.csr_matrix(shift * sp.identity(n * n) + sp.kron(sp.identity(n), t)
                      + sp.kron(t, sp.identity(n)))
    a.sum_duplicates()
    a.sort_indices()
    return a


class PersistBase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="krylovd-persist-")
        self.state = os.path.join(self.dir, "state")
        self.log = os.path.join(self.dir, "log")
        self.daemon = None

    def tearDown(self):
        if self.daemon is not None:
            self.daemon.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start(self, *args, binary="krylovd", env=None):
        self.daemon = Daemon("--log-file", self.log, *args, directory=self.dir, binary=binary,
                             env=env).start()
        return krylov.Client(self.daemon.address)

    def restart(self):
        self.assertEqual(self.daemon.stop(), 0)
        return self.start()

    def files(self):
        return sorted(os.listdir(os.path.join(self.state, "matrices")))

    def has_file(self, mid):
        return f"{mid}.kdm" in self.files()

    def count_calls(self, steps):
        """The state's system calls a fresh daemon makes for steps(client): (number, op, path)."""
        calls = os.path.join(self.dir, "calls")
        kd = self.start(binary="krylovd_faults", env=dict(os.environ, KD_TEST_FAULT="count:" + calls))
        ids = steps(kd)
        kd.close()
        self.assertEqual(self.daemon.stop(), 0)
        self.daemon = None
        with open(calls) as f:
            rows = [line.split(" ", 2) for line in f.read().splitlines()]
        shutil.rmtree(self.state)
        os.unlink(calls)
        return ids, [(int(n), op, path) for n, op, path in rows]


class PersistTest(PersistBase):
    def test_each_mode_full_and_like_then_restart(self):
        kd = self.start()
        base = kd.put(grid(40, 1.0))
        self.assertEqual((base.persisted, base.durable), ("sync", True))  # the default
        kept = {}
        for k, mode in enumerate(("sync", "behind", "none")):
            full = kd.put(grid(40, 2.0 + k), persist=mode)
            a = grid(40, 10.0 + k)
            like = kd.put(a, like=base, persist=mode)
            for info in (full, like):
                self.assertEqual(info.persisted, mode)
                self.assertEqual(info.durable, mode == "sync", (mode, info.raw))
                if mode == "sync":
                    self.assertTrue(self.has_file(info.id))
                if mode == "none":
                    self.assertFalse(self.has_file(info.id))
                    self.assertEqual(kd.info(info.id).durable, False)
            if mode == "behind":
                for info in (full, like):
                    self.assertTrue(settle(lambda i=info: kd.info(i.id).durable, 60))
                    self.assertTrue(self.has_file(info.id))
                    self.assertEqual(kd.info(info.id).persisted, "behind")
                self.assertFalse([f for f in self.files() if f.endswith(".behind")])
            # the put with like made what a full put of the same values makes
            again = kd.put(a, name="again", persist="none")  # (a stronger one would upgrade)
            self.assertEqual(again.id, like.id)
            self.assertFalse(again.created)
            x = rng.uniform(-1, 1, a.shape[1])
            np.testing.assert_allclose(kd.spmv(like.id, x), a @ x, rtol=1e-12, atol=1e-12)
            kept[mode] = (full.id, like.id)
        # the none matrices never reached the disk, even after a while
        self.assertFalse(any(self.has_file(m) for m in kept["none"]))
        kd.close()
        kd = self.restart()
        for mode, ids in kept.items():
            for mid in ids:
                if mode == "none":
                    with self.assertRaises(errors.NotFound):
                        kd.info(mid)
                else:
                    info = kd.info(mid)
                    self.assertEqual((info.persisted, info.durable), ("sync", True))
        kd.close()

    def test_stronger_persist_upgrades_held_content(self):
        kd = self.start()
        a, b = grid(30, 3.0), grid(30, 4.0)
        none = kd.put(a, persist="none")
        self.assertFalse(self.has_file(none.id))
        up = kd.put(a, persist="sync")
        self.assertEqual(up.id, none.id)
        self.assertEqual((up.persisted, up.durable), ("sync", True))
        self.assertTrue(self.has_file(none.id))
        other = kd.put(b, persist="none")
        self.assertEqual(kd.put(b, persist="behind").persisted, "behind")
        self.assertTrue(settle(lambda: kd.info(other.id).durable, 60))
        # a weaker choice changes nothing
        self.assertEqual(kd.put(a, persist="none").durable, True)
        # a none matrix dropped leaves nothing; a restart has only the two
        gone = kd.put(grid(30, 5.0), persist="none")
        kd.drop(gone.id)
        kd.close()
        kd = self.restart()
        self.assertEqual(sorted(m.id for m in kd.list()), sorted([none.id, other.id]))
        kd.close()

    def test_sigterm_writes_what_is_behind(self):
        kd = self.start()
        ids = [kd.put(grid(50, 2.0 + k), persist="behind").id for k in range(4)]
        kd.close()
        kd = self.restart()  # SIGTERM right after the replies: the worker writes them first
        self.assertEqual(sorted(m.id for m in kd.list()), sorted(ids))
        for mid in ids:
            self.assertTrue(kd.info(mid).durable)
        kd.close()

    def test_persist_default_and_bad_value(self):
        kd = self.start("--persist-default", "behind")
        info = kd.put(grid(20, 2.0))
        self.assertEqual((info.persisted, info.durable), ("behind", False))
        self.assertTrue(settle(lambda: kd.info(info.id).durable, 60))
        with self.assertRaises(errors.BadRequest) as cm:
            kd.put(grid(20, 3.0), persist="later")
        self.assertIn("persist 'later' is not one of sync | behind | none", str(cm.exception))
        with self.assertRaises(errors.BadRequest) as cm:
            kd.put(grid(20, 3.0), like=info, persist="eventually")
        self.assertIn("persist", str(cm.exception))
        kd.close()

    def test_without_a_state_directory_everything_is_none(self):
        kd = self.start("--state-dir", "")  # (a later option wins)
        for mode in ("sync", "behind", "none", None):
            info = kd.put(grid(20, 5.0 + (mode or "").__len__()), persist=mode)
            self.assertEqual((info.persisted, info.durable), ("none", False), mode)
        self.assertFalse(os.path.exists(self.state))
        kd.close()

    def test_behind_write_killed_midway_is_reported_lost(self):
        a, b = grid(60, 2.0), grid(60, 3.0)

        def steps(kd):
            first = kd.put(a, persist="sync")
            second = kd.put(b, persist="behind")
            settle(lambda: kd.info(second.id).durable, 60)
            return first.id, second.id

        (first, second), calls = self.count_calls(steps)
        # the first write into the behind matrix's temporary file
        create = next(n for n, op, path in calls
                      if op == "create" and path.endswith(f".{second}.tmp"))
        write = next(n for n, op, _ in calls if n > create and op == "write")
        kd = self.start(binary="krylovd_faults",
                        env=dict(os.environ, KD_TEST_FAULT=f"stall:{write}"))
        self.assertEqual(kd.put(a, persist="sync").id, first)
        info = kd.put(b, persist="behind")
        self.assertEqual((info.id, info.durable), (second, False))
        matrices = os.path.join(self.state, "matrices")
        self.assertTrue(settle(lambda: os.path.exists(os.path.join(matrices, f".{second}.tmp"))))
        self.assertTrue(os.path.exists(os.path.join(matrices, f".{second}.behind")))
        kd.close()
        os.kill(self.daemon.proc.pid, signal.SIGKILL)
        self.daemon.proc.wait()
        self.daemon.proc = None
        kd = self.start()
        self.assertEqual([m.id for m in kd.list()], [first])
        x = rng.uniform(-1, 1, a.shape[1])
        np.testing.assert_allclose(kd.spmv(first, x), a @ x, rtol=1e-12, atol=1e-12)
        with self.assertRaises(errors.NotFound):
            kd.info(second)
        self.assertEqual(self.files(), [f"{first}.kdm"])
        with open(self.log) as f:
            log = f.read()
        self.assertRegex(log, rf"lost id={second}: put with persist \"behind\"")
        kd.close()


_big = {}


def big(shift):
    """The 2-D Laplacian on a 1000 x 1000 grid (10^6 rows, 5 10^6 nonzeros; a 60 MB file)."""
    if shift not in _big:
        _big[shift] = grid(1000, shift)
    return _big[shift]


def in_thread(call):
    """Run call() on a daemon thread: (thread, result list: [value] or [exception])."""
    out = []

    def run():
        try:
            out.append(call())
        except BaseException as e:  # noqa: BLE001 (reported by the caller)
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


class WriterThreadTest(PersistBase):
    """Files behind their replies are written on a thread of their own (cache.c, writer.c)."""

    def stall_at_write(self, a, shift_other):
        """A krylovd_faults stalled for good at the first write into a's values file, once a is
        put with persist behind: (client, a's info)."""
        small = grid(30, shift_other)

        def steps(kd):
            kd.put(small, persist="sync")
            info = kd.put(a, persist="behind")
            settle(lambda: kd.info(info.id).durable, 120)
            return info.id

        mid, calls = self.count_calls(steps)
        create = next(n for n, op, path in calls if op == "create" and path.endswith(f".{mid}.tmp"))
        write = next(n for n, op, _ in calls if n > create and op == "write")
        kd = self.start(binary="krylovd_faults",
                        env=dict(os.environ, KD_TEST_FAULT=f"stall:{write}"))
        self.small = kd.put(small, persist="sync")
        info = kd.put(a, persist="behind")
        self.assertEqual((info.id, info.durable), (mid, False))
        matrices = os.path.join(self.state, "matrices")
        self.assertTrue(settle(lambda: os.path.exists(os.path.join(matrices, f".{mid}.tmp")), 120))
        return kd, info

    def kill(self):
        os.kill(self.daemon.proc.pid, signal.SIGKILL)
        self.daemon.proc.wait()
        self.daemon.proc = None

    def read_log(self):
        with open(self.log) as f:
            return f.read()

    def test_requests_answer_while_a_write_is_stalled(self):
        a, b = big(2.0), big(3.0)
        kd, info = self.stall_at_write(a, 7.0)
        # the worker never waits for the write: a put with like, a sync put and an spmv answer
        other = rng.uniform(-1, 1, 30 * 30)
        c = grid(30, 9.0)

        def work():
            t0 = time.monotonic()
            kd2 = krylov.Client(self.daemon.address)
            like = kd2.put(b, like=info, persist="behind")
            sync = kd2.put(c, persist="sync")
            y = kd2.spmv(sync.id, other)
            kd2.close()
            return like, sync, y, time.monotonic() - t0

        t, out = in_thread(work)
        t.join(120)
        self.assertFalse(t.is_alive(), "requests waited for the stalled write")
        self.assertNotIsInstance(out[0], BaseException, out)
        like, sync, y, _ = out[0]
        self.assertEqual((like.persisted, like.durable), ("behind", False))
        self.assertEqual((sync.persisted, sync.durable), ("sync", True))
        np.testing.assert_allclose(y, c @ other, rtol=1e-12, atol=1e-12)
        self.assertFalse(kd.info(info.id).durable)
        kd.close()
        self.kill()
        kd = self.start()
        self.assertEqual(sorted(m.id for m in kd.list()), sorted([self.small.id, sync.id]))
        log = self.read_log()
        for lost in (info.id, like.id):
            self.assertRegex(log, rf"lost id={lost}: put with persist \"behind\"")
        self.assertEqual(self.files(), sorted([f"{self.small.id}.kdm", f"{sync.id}.kdm"]))
        kd.close()

    def test_drop_during_a_stalled_write(self):
        kd, info = self.stall_at_write(big(2.0), 7.0)
        t, out = in_thread(lambda: kd.drop(info.id))
        t.join(60)
        self.assertFalse(t.is_alive(), "drop waited for the stalled write")
        self.assertNotIsInstance(out[0], BaseException, out)
        marker = os.path.join(self.state, "matrices", f".{info.id}.behind")
        self.assertFalse(os.path.exists(marker))
        with self.assertRaises(errors.NotFound):
            kd.info(info.id)
        kd.close()
        self.kill()
        kd = self.start()
        self.assertEqual([m.id for m in kd.list()], [self.small.id])
        self.assertNotIn(f"lost id={info.id}", self.read_log())
        self.assertEqual(self.files(), [f"{self.small.id}.kdm"])
        kd.close()

    def test_sync_put_during_a_stalled_write_waits_and_corrupts_nothing(self):
        a = big(2.0)
        kd, info = self.stall_at_write(a, 7.0)
        t, out = in_thread(lambda: krylov.Client(self.daemon.address).put(a, persist="sync"))
        t.join(3)
        self.assertTrue(t.is_alive() or not isinstance(out[0], BaseException), out)
        kd.close()
        self.kill()
        kd = self.start()
        self.assertEqual([m.id for m in kd.list()], [self.small.id])
        self.assertRegex(self.read_log(), rf"lost id={info.id}: put with persist \"behind\"")
        self.assertEqual(self.files(), [f"{self.small.id}.kdm"])
        self.assertFalse(os.listdir(os.path.join(self.state, "corrupt"))
                         if os.path.isdir(os.path.join(self.state, "corrupt")) else [])
        kd.close()

    def test_sync_and_drop_right_after_a_large_behind_put(self):
        a, b = big(2.0), big(3.0)
        kd = self.start()
        first = kd.put(a, persist="behind")
        # waits for the write in flight, or takes it over (once written it stays "behind")
        up = kd.put(a, persist="sync")
        self.assertEqual((up.id, up.durable), (first.id, True))
        self.assertIn(up.persisted, ("sync", "behind"))
        gone = kd.put(b, like=first, persist="behind")
        kd.drop(gone.id)  # while it is written, most likely: its file goes when it ends
        kd.close()
        kd = self.restart()
        self.assertEqual([m.id for m in kd.list()], [first.id])
        self.assertEqual(self.files(), [f"{first.id}.kdm"])
        x = rng.uniform(-1, 1, a.shape[1])
        np.testing.assert_allclose(kd.spmv(first.id, x), a @ x, rtol=1e-12, atol=1e-12)
        kd.close()

    def test_state_max_bytes_kept_when_the_writer_publishes(self):
        # files of about 103, 108 and 113 kB (a pattern each): two fit under 250 kB
        kd = self.start("--state-max-bytes", "250000")
        ids = []
        for n in (40, 41, 42):
            ids.append(kd.put(grid(n, 2.0), persist="behind").id)
            self.assertTrue(settle(lambda: kd.info(ids[-1]).durable, 60))
        self.assertEqual(sorted(m.id for m in kd.list()), sorted(ids[1:]))
        self.assertEqual(self.files(), sorted(f"{mid}.kdm" for mid in ids[1:]))
        kd.close()

    def test_sigterm_with_writes_queued_writes_them(self):
        kd = self.start("--log-level", "info")
        ids = [kd.put(grid(400, 2.0 + k), persist="behind").id for k in range(4)]
        kd.close()
        kd = self.restart()  # SIGTERM with the writer's queue full: it writes them all first
        self.assertEqual(sorted(m.id for m in kd.list()), sorted(ids))
        for mid in ids:
            self.assertTrue(kd.info(mid).durable)
        self.assertFalse([f for f in self.files() if f.endswith(".behind")])
        kd.close()


class PersistShmTest(unittest.TestCase):
    """Values from a shared-memory region: copied by the worker, the same ids as bins."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="krylovd-persist-shm-")
        self.sock = os.path.join(self.dir, "sock")
        self.daemon = Daemon("--listen", "unix:" + self.sock).start()
        try:
            self.assertTrue(settle(lambda: os.path.exists(self.sock)))
            self.raw = Raw("unix:" + self.sock)
        except BaseException:
            self.daemon.stop()
            raise

    def tearDown(self):
        self.raw.close()
        self.daemon.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def call(self, method, params, fds=()):
        error, result = self.raw.call(method, params, fds)
        self.assertIsNone(error, error)
        return result

    def test_shm_values_full_and_like(self):
        base = grid(30, 1.0)
        nnz = base.nnz
        fd = memfd(8 * nnz)
        rid = self.call("shm.register", {"bytes": 8 * nnz}, [fd])["shm"]
        pattern = {"rows": base.shape[0], "cols": base.shape[1],
                   "indptr": base.indptr.astype(np.int32).tobytes(),
                   "indices": base.indices.astype(np.int32).tobytes()}
        held = self.call("matrix.put", dict(pattern, values=base.data.tobytes()))
        region = {"shm": rid, "offset": 0, "bytes": 8 * nnz}
        for k, mode in enumerate(("sync", "behind", "none")):
            vals = rng.uniform(1, 2, nnz)
            fill(fd, vals.tobytes())
            full = self.call("matrix.put", dict(pattern, values=region, persist=mode))
            self.assertEqual(full["persisted"], mode)
            vals2 = rng.uniform(1, 2, nnz)
            fill(fd, vals2.tobytes())
            like = self.call("matrix.put", {"like": held["id"], "values": region,
                                            "persist": mode})
            self.assertEqual((like["persisted"], like["durable"]), (mode, mode == "sync"))
            # the same values in the message: the same ids, already held
            for vs, made in ((vals, full), (vals2, like)):
                again = self.call("matrix.put", dict(pattern, values=vs.tobytes()))
                self.assertEqual(again["id"], made["id"])
                self.assertFalse(again["created"])
            x = rng.uniform(-1, 1, base.shape[1])
            out = self.call("spmv", {"id": like["id"], "x": x.tobytes()})
            a = sp.csr_matrix((vals2, base.indices, base.indptr), shape=base.shape)
            np.testing.assert_allclose(np.frombuffer(out["y"], dtype=np.float64), a @ x,
                                       rtol=1e-12, atol=1e-12)
        os.close(fd)


if __name__ == "__main__":
    unittest.main()
