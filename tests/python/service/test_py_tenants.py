"""Tenants against a real krylovd with an auth file (docs/PROTOCOL.md, "Owners"; docs/OPERATIONS.md,
"Security"): a user sees and uses only the matrices it holds a reference to; another user's id is
NOT_FOUND with the very code and message an id that does not exist gets; `created` is per user;
drop takes the caller's reference and the data (state file included) goes with the last one; pins
are per user; an admin sees every matrix with its owners and may share one; a restart keeps who
owns what, and a state directory from before owners were recorded belongs to "anonymous". One
tenant learns nothing of another's use: a put of content another user holds answers as a put of
new content would, and with --tenant-dedupe off each user's copy is its own.
"""

import os
import shutil
import tempfile
import unittest

import numpy as np
import scipy.sparse as sp

import krylov
from kd_daemon import Daemon, make_rng, token_new
from test_ops import sample, scrape


class AuthDaemonCase(unittest.TestCase):
    """A krylovd with an auth file of USERS (name, role) and a state directory kept across
    restarts, started with EXTRA; client(name) speaks as that user."""

    USERS = ()
    EXTRA = ()

    @classmethod
    def setUpClass(cls):
        cls.rng = make_rng()
        cls.dir = tempfile.mkdtemp(prefix="krylovd-tenants-")
        cls.state = os.path.join(cls.dir, "state")
        cls.tokens = {}
        lines = []
        for name, role in cls.USERS:
            cls.tokens[name], line = token_new(name, role)
            lines.append(line)
        cls.auth_file = os.path.join(cls.dir, "auth")
        with open(cls.auth_file, "w") as f:
            f.write("\n".join(lines) + "\n")
        cls.daemon = None
        cls.start()

    @classmethod
    def start(cls):
        cls.daemon = Daemon("--auth-file", cls.auth_file, "--state-dir", cls.state,
                            *cls.EXTRA).start()
        cls.addr = cls.daemon.address

    @classmethod
    def restart(cls):
        assert cls.daemon.stop() == 0
        cls.start()

    @classmethod
    def tearDownClass(cls):
        status = cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert status == 0, f"krylovd exited with status {status}"

    def client(self, name):
        return krylov.Client(self.addr, user=name, token=self.tokens[name])


class TenantsTest(AuthDaemonCase):
    USERS = (("alice", "write"), ("bob", "write"), ("carol", "write"), ("root", "admin"),
             ("reader", "read"))

    def matrix(self, n=30):
        A = sp.random(n, n, density=0.15, random_state=int(self.rng.integers(1 << 31)),
                      format="csr") + sp.eye(n) * n
        return (A + A.T).tocsr()

    def state_file(self, info):
        return os.path.join(self.state, "matrices", info.id + ".kdm")

    def not_found(self, call, hex_id):
        """(code, message with the id replaced) of the NotFound that call raises."""
        with self.assertRaises(krylov.NotFound) as cm:
            call()
        self.assertIn(hex_id, cm.exception.message)
        return cm.exception.code, cm.exception.message.replace(hex_id, "<id>")

    def test_another_users_matrix_is_not_found_exactly_as_a_missing_id(self):
        A = self.matrix()
        with self.client("alice") as alice:
            info = alice.put(A, name="alice's")
        missing = "%032x" % int(self.rng.integers(1 << 62))
        x = np.ones(A.shape[1])
        with self.client("bob") as bob:
            calls = {
                "info": lambda i: bob.info(i),
                "spmv": lambda i: bob.spmv(i, x),
                "solve": lambda i: bob.solve(i, x),
                "pin": lambda i: bob.pin(i),
                "unpin": lambda i: bob.pin(i, False),
                "drop": lambda i: bob.drop(i),
                "multiply a": lambda i: bob.multiply(i, i),
            }
            for what, call in calls.items():
                theirs = self.not_found(lambda: call(info.id), info.id)
                nothing = self.not_found(lambda: call(missing), missing)
                self.assertEqual(theirs, nothing, what)
            self.assertNotIn(info.id, [m.id for m in bob.list()])
            # an operand of bob's own next to alice's: still not found
            mine = bob.put(self.matrix())
            theirs = self.not_found(lambda: bob.multiply(mine, info.id), info.id)
            nothing = self.not_found(lambda: bob.multiply(mine, missing), missing)
            self.assertEqual(theirs, nothing)
            bob.drop(mine)
        with self.client("alice") as alice:  # none of it touched alice's matrix
            got = alice.info(info)
            self.assertFalse(got.pinned)
            np.testing.assert_allclose(alice.spmv(info, x), A @ x, rtol=1e-12)
            self.assertIn(info.id, [m.id for m in alice.list()])
            alice.drop(info)

    def test_same_content_two_references(self):
        A = self.matrix()
        x = self.rng.standard_normal(A.shape[1])
        with self.client("alice") as alice, self.client("bob") as bob:
            a = alice.put(A)
            self.assertTrue(a.created)
            self.assertFalse(alice.put(A).created)  # alice's own second put
            b = bob.put(A)
            self.assertTrue(b.created)  # bob cannot tell that alice holds it
            self.assertEqual(a.id, b.id)  # ... yet it is stored once
            self.assertFalse(bob.put(A).created)
            path = self.state_file(a)
            self.assertTrue(os.path.exists(path))
            # per-user pins
            self.assertTrue(bob.pin(b).pinned)
            self.assertFalse(alice.info(a).pinned)
            self.assertTrue(bob.info(b).pinned)
            # bob's drop leaves alice's matrix working
            bob.drop(b)
            self.not_found(lambda: bob.info(b.id), b.id)
            self.assertTrue(os.path.exists(path))
            np.testing.assert_allclose(alice.spmv(a, x), A @ x, rtol=1e-12)
            # bob's pin went with his reference
            with self.client("root") as root:
                self.assertFalse(root.info(a).pinned)
            # the last reference takes the data
            alice.drop(a)
            self.assertFalse(os.path.exists(path))
            self.not_found(lambda: alice.info(a.id), a.id)
            with self.client("root") as root:
                self.not_found(lambda: root.info(a.id), a.id)

    def test_drop_order_reversed(self):
        A = self.matrix()
        with self.client("alice") as alice, self.client("bob") as bob:
            a, b = alice.put(A), bob.put(A)
            alice.drop(a)
            self.assertTrue(os.path.exists(self.state_file(a)))
            x = np.ones(A.shape[1])
            np.testing.assert_allclose(bob.spmv(b, x), A @ x, rtol=1e-12)
            bob.drop(b)
            self.assertFalse(os.path.exists(self.state_file(a)))

    def test_multiply_product_belongs_to_the_caller(self):
        with self.client("alice") as alice, self.client("bob") as bob:
            a = alice.put(self.matrix())
            c = alice.multiply(a, a)
            self.assertIn(c.id, [m.id for m in alice.list()])
            self.not_found(lambda: bob.info(c.id), c.id)
            alice.drop(c)
            alice.drop(a)

    def test_admin_sees_all_with_owners_and_shares(self):
        A = self.matrix()
        with self.client("alice") as alice, self.client("root") as root, \
                self.client("reader") as reader:
            a = alice.put(A, pin=True)
            listed = {m["id"]: m for m in root.call("matrix.list")["matrices"]}
            self.assertEqual(listed[a.id]["owners"], [{"user": "alice", "pinned": True}])
            self.assertEqual(root.call("matrix.info", {"id": a.id})["owners"],
                             [{"user": "alice", "pinned": True}])
            self.assertNotIn("owners", alice.call("matrix.info", {"id": a.id}))
            self.not_found(lambda: reader.info(a.id), a.id)
            self.assertTrue(root.share(a, "reader"))
            self.assertFalse(root.share(a, "reader"))  # already holds one
            x = np.ones(A.shape[1])
            np.testing.assert_allclose(reader.spmv(a, x), A @ x, rtol=1e-12)
            self.assertFalse(reader.info(a).pinned)  # alice's pin is hers
            with self.assertRaises(krylov.BadRequest) as cm:
                root.share(a, "nobody")
            self.assertIn("no user 'nobody'", cm.exception.message)
            with self.assertRaises(krylov.Forbidden):
                alice.share(a, "bob")
            # an admin's drop of a matrix it holds no reference to takes everyone's
            root.drop(a)
            self.not_found(lambda: alice.info(a.id), a.id)
            self.not_found(lambda: reader.info(a.id), a.id)
            self.assertFalse(os.path.exists(self.state_file(a)))

    def test_restart_keeps_owners(self):
        A, B = self.matrix(), self.matrix()
        with self.client("alice") as alice, self.client("bob") as bob:
            a = alice.put(A, pin=True)
            shared_a = bob.put(A)
            b = bob.put(B)
        self.restart()
        x = np.ones(A.shape[1])
        with self.client("alice") as alice, self.client("bob") as bob:
            self.assertTrue(alice.info(a).pinned)
            self.assertFalse(bob.info(shared_a).pinned)
            np.testing.assert_allclose(alice.spmv(a, x), A @ x, rtol=1e-12)
            self.not_found(lambda: alice.info(b.id), b.id)
            self.assertEqual({m.id for m in alice.list()} & {a.id, b.id}, {a.id})
            self.assertEqual({m.id for m in bob.list()} & {a.id, b.id}, {a.id, b.id})
            alice.drop(a)
            bob.drop(shared_a)
            bob.drop(b)
        self.assertFalse(os.path.exists(self.state_file(a)))
        self.assertFalse(os.path.exists(self.state_file(b)))

    # what differs between two puts of the same shape whatever else: the id and the elapsed time
    PER_REQUEST = ("id", "time_ms")

    def put_raw(self, kd, A, **options):
        A = sp.csr_matrix(A)
        params = {"rows": A.shape[0], "cols": A.shape[1],
                  "indptr": A.indptr.astype(np.int32).tobytes(),
                  "indices": A.indices.astype(np.int32).tobytes(), "values": A.data.tobytes(),
                  "dtype": "float64"}
        params.update(options)
        return kd.call("matrix.put", params)

    def without(self, reply, keys=PER_REQUEST):
        return {k: v for k, v in reply.items() if k not in keys}

    def test_put_of_held_content_answers_as_new_content(self):
        A = self.matrix()
        fresh = (A * 2.0).tocsr()  # the same shape, pattern and row statistics; content not held
        x = np.ones(A.shape[1])
        with self.client("alice") as alice, self.client("carol") as carol, \
                self.client("root") as root:
            a = alice.put(A, name="alice's secret")
            for _ in range(9):
                alice.spmv(a, x)
            alice.solve(a, x, preconditioner="jacobi")  # kept with the matrix on the device
            self.assertEqual(alice.info(a).uses, 10)
            held = self.put_raw(carol, A, name="carol's")
            new = self.put_raw(carol, fresh, name="carol's")
            self.assertEqual(held["id"], a.id)  # stored once (--tenant-dedupe on)
            self.assertEqual(self.without(held), self.without(new))
            self.assertTrue(held["created"])
            self.assertEqual(held["uses"], 0)
            self.assertEqual(held["name"], "carol's")
            self.assertNotIn("candidates", held)  # the upload's timings are alice's
            # matrix.info and matrix.list: carol's own use only
            info = carol.call("matrix.info", {"id": held["id"]})
            self.assertEqual(self.without(info),
                             self.without(carol.call("matrix.info", {"id": new["id"]})))
            self.assertEqual(info["uses"], 0)
            listed = {m["id"]: m for m in carol.call("matrix.list")["matrices"]}
            self.assertEqual(self.without(listed[held["id"]]), self.without(listed[new["id"]]))
            # carol's list in the order carol put them, not in the content's first put's
            order = [m["id"] for m in carol.call("matrix.list")["matrices"]]
            self.assertLess(order.index(held["id"]), order.index(new["id"]))
            np.testing.assert_allclose(carol.spmv(held["id"], x), A @ x, rtol=1e-12)
            np.testing.assert_allclose(carol.spmv(new["id"], x), fresh @ x, rtol=1e-12)
            self.assertEqual(carol.info(held["id"]).uses, 1)
            self.assertEqual(alice.info(a).uses, 10)  # and alice sees none of carol's
            self.assertEqual(alice.info(a).name, "alice's secret")
            # carol's second put: as a second put of new content
            again = self.put_raw(carol, A, name="carol's")
            self.assertEqual(self.without(again),
                             self.without(self.put_raw(carol, fresh, name="carol's")))
            self.assertFalse(again["created"])
            # an admin sees the totals and the selection
            total = root.call("matrix.info", {"id": a.id})
            self.assertEqual(total["uses"], root.info(a).uses)
            self.assertGreaterEqual(total["uses"], 12)
            self.assertIn("candidates", total)
            # ... and the device memory alice's preconditioner takes with it; carol does not
            self.assertGreater(total["device_bytes"], held["device_bytes"])
            carol.drop(held["id"])
            carol.drop(new["id"])
            alice.drop(a)

    def test_held_content_shows_nothing_of_anothers_put_with_like(self):
        A = self.matrix()
        A2 = A.copy()
        A2.data = A2.data * 3.0  # new values on A's pattern
        fresh = (A * 5.0).tocsr()
        x = np.ones(A.shape[1])
        with self.client("alice") as alice, self.client("carol") as carol:
            a = alice.put(A)
            a2 = alice.put(A2, like=a)
            alice.solve(a2, x)
            self.assertTrue(a2.pattern)
            self.assertIn("pattern", alice.call("matrix.info", {"id": a.id}) | a2.raw)
            held = self.put_raw(carol, A2)
            new = self.put_raw(carol, fresh)
            self.assertEqual(held["id"], a2.id)
            self.assertEqual(self.without(held), self.without(new))
            for key in ("pattern", "preconditioners_refreshed", "candidates"):
                self.assertNotIn(key, held)
                self.assertNotIn(key, carol.call("matrix.info", {"id": held["id"]}))
            # uses from solve.batch count too, for carol alone
            carol.solve_many([(held["id"], x), (held["id"], x)])
            self.assertEqual(carol.info(held["id"]).uses, 2)
            self.assertEqual(alice.info(a2).uses, 1)
            for m in (held["id"], new["id"]):
                carol.drop(m)
            alice.drop(a2)
            alice.drop(a)

    def test_put_of_held_evicted_content_is_resident(self):
        A = self.matrix()
        with self.client("alice") as alice:
            a = alice.put(A)
        self.restart()  # nothing resident after a restart
        with self.client("alice") as alice, self.client("carol") as carol:
            self.assertFalse(alice.info(a).resident)
            held = self.put_raw(carol, A)
            self.assertTrue(held["resident"] and held["created"])
            carol.drop(held["id"])
            alice.drop(a)

    def test_names_and_uses_survive_a_restart(self):
        A = self.matrix()
        with self.client("alice") as alice, self.client("carol") as carol:
            a = alice.put(A, name="first")
            c = carol.put(A, name="sp\u00e4ter name")
        self.restart()
        with self.client("alice") as alice, self.client("carol") as carol:
            self.assertEqual(alice.info(a).name, "first")
            self.assertEqual(carol.info(c).name, "sp\u00e4ter name")
            carol.drop(c)
            alice.drop(a)

    def test_state_without_owners_belongs_to_anonymous(self):
        A = self.matrix()
        with self.client("alice") as alice:
            a = alice.put(A)
        assert self.daemon.stop() == 0
        os.remove(os.path.join(self.state, "owners"))  # as a state dir from before owners
        self.start()
        with self.client("alice") as alice, self.client("root") as root:
            self.not_found(lambda: alice.info(a.id), a.id)
            owners = root.call("matrix.info", {"id": a.id})["owners"]
            self.assertEqual(owners, [{"user": "anonymous", "pinned": False}])
            root.drop(a)


class QuotaTest(unittest.TestCase):
    """The auth file's per-user limits: QUOTA naming the limit and by how much, nothing kept or
    lost on a refusal, a shared matrix counted for each of its owners."""

    @classmethod
    def setUpClass(cls):
        cls.rng = make_rng()
        cls.dir = tempfile.mkdtemp(prefix="krylovd-quota-")
        cls.state = os.path.join(cls.dir, "state")
        cls.tokens = {}
        lines = []
        for name, role, limits in (("mq", "write", "max_matrices=2"),
                                   ("dq", "write", "max_device_bytes=64K"),
                                   ("sq", "write", "max_state_bytes=64K"),
                                   ("jq", "write", "max_jobs=1"),
                                   ("free", "write", ""),
                                   ("root", "admin", "")):
            cls.tokens[name], line = token_new(name, role)
            lines.append(line + " " + limits)
        cls.auth_file = os.path.join(cls.dir, "auth")
        with open(cls.auth_file, "w") as f:
            f.write("\n".join(lines) + "\n")
        port_file = os.path.join(cls.dir, "mport")
        cls.daemon = Daemon("--auth-file", cls.auth_file, "--state-dir", cls.state,
                            "--metrics", "127.0.0.1:0", "--metrics-port-file", port_file).start()
        cls.addr = cls.daemon.address
        with open(port_file) as f:
            cls.mport = int(f.read())

    @classmethod
    def tearDownClass(cls):
        status = cls.daemon.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)
        assert status == 0, f"krylovd exited with status {status}"

    def client(self, name):
        return krylov.Client(self.addr, user=name, token=self.tokens[name])

    def small(self, n=8):
        return (sp.eye(n, format="csr") * float(self.rng.integers(2, 1 << 30))).tocsr()

    def big(self):
        # about 240 KB of CSR on the device and in its file: over any 64K limit
        n = 2000
        A = sp.random(n, n, density=0.005, random_state=int(self.rng.integers(1 << 31)),
                      format="csr") + sp.eye(n) * n
        return A.tocsr()

    def files(self):
        return sorted(os.listdir(os.path.join(self.state, "matrices")))

    def test_max_matrices(self):
        with self.client("mq") as mq, self.client("free") as free:
            A, B, C = self.small(), self.small(), self.small()
            a, b = mq.put(A), mq.put(B)
            self.assertFalse(mq.put(A).created)  # no new reference: not counted again
            before = self.files()
            with self.assertRaises(krylov.Quota) as cm:
                mq.put(C)
            self.assertIn("mq: 3 matrices would exceed max_matrices = 2 (by 1)",
                          cm.exception.message)
            self.assertEqual(self.files(), before)  # nothing kept
            # a matrix another user holds is one more for mq too
            c = free.put(C)
            with self.assertRaises(krylov.Quota):
                mq.put(C)
            self.not_mine(mq, c)
            with self.assertRaises(krylov.Quota):  # a product is a matrix like any other
                mq.multiply(a, b)
            # nothing lost: both still work, and a drop makes room
            x = np.ones(8)
            np.testing.assert_allclose(mq.spmv(a, x), A @ x)
            np.testing.assert_allclose(mq.spmv(b, x), B @ x)
            mq.drop(b)
            self.assertTrue(mq.put(C).created)
            mq.drop(a)
            mq.drop(c)
            free.drop(c)

    def not_mine(self, kd, info):
        with self.assertRaises(krylov.NotFound):
            kd.info(info)

    def test_max_device_bytes(self):
        with self.client("dq") as dq:
            S = self.small()
            s = dq.put(S)
            before = self.files()
            with self.assertRaises(krylov.Quota) as cm:
                dq.put(self.big())
            self.assertRegex(cm.exception.message,
                             r"^dq: \d+ device bytes would exceed max_device_bytes = 65536 "
                             r"\(by \d+\)$")
            self.assertEqual(self.files(), before)
            self.assertEqual([m.id for m in dq.list()], [s.id])
            np.testing.assert_allclose(dq.spmv(s, np.ones(8)), S @ np.ones(8))
            dq.drop(s)

    def test_max_state_bytes(self):
        with self.client("sq") as sq, self.client("free") as free:
            s = sq.put(self.small())
            B = self.big()
            before = self.files()
            with self.assertRaises(krylov.Quota) as cm:
                sq.put(B)
            self.assertRegex(cm.exception.message,
                             r"^sq: \d+ state bytes would exceed max_state_bytes = 65536")
            self.assertEqual(self.files(), before)
            b = free.put(B)  # the same content held by another user is still over sq's limit
            with self.assertRaises(krylov.Quota):
                sq.put(B)
            self.not_mine(sq, b)
            free.drop(b)
            sq.drop(s)

    def test_max_jobs(self):
        n = 4000
        A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        with self.client("jq") as jq, self.client("jq") as jq2:
            a = jq.put(A)
            b = np.ones(n)
            conn = jq._conn
            # a long solve in flight, then one more request from the same user on another
            # connection: refused at once
            slow = conn.send_request("solve", {"id": a.id, "b": b.tobytes(), "method": "cg",
                                               "rtol": 1e-30, "maxiter": 200000})
            with self.assertRaises(krylov.Quota) as cm:
                jq2.spmv(a, b)
            self.assertIn("jq: 2 requests in flight would exceed max_jobs = 1 (by 1)",
                          cm.exception.message)
            conn.call("job.cancel", {"msgid": slow})
            with self.assertRaises(krylov.Cancelled):
                conn.wait(slow)
            np.testing.assert_allclose(jq2.spmv(a, b), A @ b)  # and it is free again
            jq.drop(a)

    def test_admin_status_reports_use(self):
        with self.client("mq") as mq, self.client("root") as root:
            a = mq.put(self.small())
            users = root.call("server.status")["users"]
            self.assertEqual(users["mq"]["matrices"], 1)
            self.assertEqual(users["mq"]["max_matrices"], 2)
            self.assertGreater(users["mq"]["device_bytes"], 0)
            self.assertGreater(users["mq"]["state_bytes"], 0)
            self.assertEqual(users["mq"]["jobs"], 0)
            self.assertEqual(users["free"]["max_matrices"], 0)  # no limit
            self.assertNotIn("users", mq.call("server.status"))
            _, _, text = scrape(self.mport)
            self.assertEqual(sample(text, "krylovd_user_matrices", 'user="mq"'), 1)
            self.assertEqual(sample(text, "krylovd_user_device_bytes", 'user="mq"'),
                             users["mq"]["device_bytes"])
            self.assertEqual(sample(text, "krylovd_user_state_bytes", 'user="mq"'),
                             users["mq"]["state_bytes"])
            self.assertEqual(sample(text, "krylovd_user_jobs_in_flight", 'user="jq"'), 0)
            self.assertGreaterEqual(sample(text, "krylovd_errors_total", 'code="QUOTA"'), 0)
            mq.drop(a)
            users = root.call("server.status")["users"]
            self.assertEqual((users["mq"]["matrices"], users["mq"]["state_bytes"]), (0, 0))


class DedupeOffTest(AuthDaemonCase):
    """--tenant-dedupe off: each user's put of the same content is stored, timed and charged as
    its own copy, under an id of its own, and each works (spmv, solve, drop, a restart) alone."""

    USERS = (("alice", "write"), ("carol", "write"), ("root", "admin"))
    EXTRA = ("--tenant-dedupe", "off")

    def files(self):
        return sorted(os.listdir(os.path.join(self.state, "matrices")))

    def test_each_user_its_own_copy(self):
        n = 40
        A = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        x = self.rng.standard_normal(n)
        b = A @ x
        with self.client("alice") as alice, self.client("carol") as carol, \
                self.client("root") as root:
            before = root.call("server.status")["matrices"]
            a = alice.put(A)
            for _ in range(5):
                alice.spmv(a, x)
            c = carol.put(A)
            self.assertTrue(a.created and c.created)
            self.assertNotEqual(a.id, c.id)  # not the content's id: each user's own
            self.assertEqual(c.uses, 0)
            self.assertTrue(c.candidates)  # its own copy: timed for carol, shown to carol
            self.assertEqual(root.call("server.status")["matrices"], before + 2)
            users = root.call("server.status")["users"]
            self.assertGreater(users["carol"]["device_bytes"], 0)  # each charged for its copy
            self.assertEqual(users["alice"]["device_bytes"], users["carol"]["device_bytes"])
            self.assertNotIn(c.id, [m.id for m in alice.list()])
            self.assertNotIn(a.id, [m.id for m in carol.list()])
            self.assertFalse(carol.put(A).created)  # carol's own second put finds hers
            for kd, m in ((alice, a), (carol, c)):
                np.testing.assert_allclose(kd.spmv(m, x), b, rtol=1e-12)
                res = kd.solve(m, b, rtol=1e-10)
                np.testing.assert_allclose(res.x, x, rtol=1e-6)
            self.assertEqual(alice.info(a).uses, 7)
            self.assertEqual(carol.info(c).uses, 3)  # her second put, an spmv, a solve
            self.assertTrue(carol.pin(c).pinned)
            self.assertFalse(alice.info(a).pinned)
            # new values on each one's own pattern: again one copy each
            A2 = (A * 3.0).tocsr()
            a2, c2 = alice.put(A2, like=a), carol.put(A2, like=c)
            self.assertTrue(a2.created and c2.created)
            self.assertNotEqual(a2.id, c2.id)
            self.assertEqual(carol.info(c2).raw["preconditioners_refreshed"], 0)
            np.testing.assert_allclose(carol.spmv(c2, x), A2 @ x, rtol=1e-12)
            alice.drop(a2)
            carol.drop(c2)
        self.assertEqual(len([f for f in self.files() if f.startswith((a.id, c.id))]), 2)
        assert self.daemon.stop() == 0
        self.start()  # reloaded from the state files: each copy's id checked against its user
        with self.client("alice") as alice, self.client("carol") as carol:
            np.testing.assert_allclose(carol.spmv(c, x), b, rtol=1e-12)
            alice.drop(a)
            self.assertFalse(any(f.startswith(a.id) for f in self.files()))
            np.testing.assert_allclose(carol.solve(c, b, rtol=1e-10).x, x, rtol=1e-6)
            self.assertTrue(carol.info(c).pinned)
            carol.drop(c)
            self.assertFalse(any(f.startswith(c.id) for f in self.files()))


class NoAuthFileTest(unittest.TestCase):
    """Without an auth file everything is the anonymous admin's, as before tenants; the owners
    file still keeps it across a restart."""

    def test_anonymous_owns_everything(self):
        state = tempfile.mkdtemp(prefix="krylovd-tenants-noauth-")
        try:
            A = sp.eye(6, format="csr") * 3.0
            with Daemon("--state-dir", state) as d, krylov.Client(d.address) as kd:
                info = kd.put(A)
                self.assertTrue(info.created)
                self.assertFalse(kd.put(A).created)
                self.assertNotIn("owners", kd.call("matrix.info", {"id": info.id}))
                with self.assertRaises(krylov.BadRequest) as cm:
                    kd.share(info, "anyone")
                self.assertIn("needs --auth-file", cm.exception.message)
            with open(os.path.join(state, "owners")) as f:
                self.assertIn(f"{info.id} anonymous 0", f.read())
            with Daemon("--state-dir", state) as d, krylov.Client(d.address) as kd:
                self.assertEqual([m.id for m in kd.list()], [info.id])
                kd.drop(info)
                self.assertEqual(kd.list(), [])
        finally:
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
