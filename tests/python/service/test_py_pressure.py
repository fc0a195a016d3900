"""Device-memory pressure end to end (docs/OPERATIONS.md, "Device memory under pressure"): a real
krylovd on loopback with a --device-memory budget that holds two of four matrices.

- 32 clients doing 30 spmv requests each on the four matrices at once: every answer matches
  SciPy's A @ x and none is an error (a request whose matrix fits the budget alone waits for the
  matrices that requests in flight use, then evicts and reloads); server.status counts evictions,
  reloads and memory waits;
- a matrix larger than the whole budget is refused with DEVICE_MEMORY naming its size and the
  budget;
- beside a long solve whose matrix leaves no room for another, an spmv on that other matrix waits:
  with a short timeout_ms it gets a clean TIMEOUT, without one it is answered once the solve ends,
  and the server keeps serving.
"""

import threading
import time
import unittest

import numpy as np
import scipy.sparse as sp

import kd_rpc
from kd_daemon import Daemon, make_rng

CLIENTS = 32
REQUESTS = 30
ROWS = 10000


def csr_bytes(a):
    """What the budget counts for a csr_scalar matrix: its CSR arrays."""
    return (a.shape[0] + 1) * 4 + a.nnz * 12


def random_matrix(rng, per_row):
    a = sp.random(ROWS, ROWS, density=per_row / ROWS, format="csr",
                  random_state=int(rng.integers(1 << 31))) + sp.eye(ROWS, format="csr")
    a.sort_indices()
    return a.tocsr()


class PressureTest(unittest.TestCase):
    def test_concurrent_clients_wait_instead_of_failing(self):
        rng = make_rng()
        mats = [random_matrix(rng, k) for k in (6.5, 7.2, 7.9, 9.0)]  # 0.9 to 1.2 MB
        sizes = [csr_bytes(a) for a in mats]
        vectors = 2 * ROWS * 8
        budget = sorted(sizes)[-1] + sorted(sizes)[-2] + 2 * vectors + 4096
        self.assertGreater(sum(sorted(sizes)[:3]), budget)  # three never fit
        self.assertGreater(sorted(sizes)[0] * 3, budget)
        with Daemon("--device-memory", str(budget), "--format", "csr_scalar") as d:
            c = kd_rpc.Client(d.port)
            ids = [c.put_csr(a)["id"] for a in mats]
            errors, wrong, right = [], [0], [0]
            lock = threading.Lock()

            def client(seed):
                r = np.random.default_rng(seed)
                cc = kd_rpc.Client(d.port)
                try:
                    for _ in range(REQUESTS):
                        i = int(r.integers(len(mats)))
                        x = r.standard_normal(ROWS)
                        try:
                            res = cc.call("spmv", id=ids[i], x=x.tobytes())
                        except kd_rpc.RpcError as e:
                            with lock:
                                errors.append(f"{e.code}: {e.message}")
                            continue
                        y = np.frombuffer(res["y"], "<f8")
                        ok = np.allclose(y, mats[i] @ x, rtol=1e-12, atol=1e-12)
                        with lock:
                            right[0] += ok
                            wrong[0] += not ok
                finally:
                    cc.close()

            t0 = time.monotonic()
            threads = [threading.Thread(target=client, args=(int(rng.integers(1 << 31)),))
                       for _ in range(CLIENTS)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - t0
            status = c.call("server.status")
            cache = status["cache"]
            print(f"budget {budget} bytes, matrices {sizes}; {right[0]} right, {wrong[0]} wrong, "
                  f"{len(errors)} errors in {elapsed:.1f} s; cache {cache}", flush=True)
            self.assertEqual(errors[:5], [])
            self.assertEqual(wrong[0], 0)
            self.assertEqual(right[0], CLIENTS * REQUESTS)
            self.assertGreater(cache["evictions"], 0)
            self.assertGreater(cache["reloads"], 0)
            self.assertIn("memory_waits", cache)
            self.assertIn("memory_wait_ms", cache)
            self.assertLessEqual(status["device_bytes_used"], budget)

            # Larger than the whole budget: refused, naming the figure and the limit.
            big = sp.random(ROWS, ROWS, density=3 * 9.0 / ROWS, format="csr",
                            random_state=int(rng.integers(1 << 31)))
            with self.assertRaises(kd_rpc.RpcError) as cm:
                c.put_csr(big)
            self.assertEqual(cm.exception.code, "DEVICE_MEMORY")
            self.assertIn(str(budget), cm.exception.message)
            self.assertIn(str(csr_bytes(big.tocsr())), cm.exception.message)
            self.assertIn("whole budget", cm.exception.message)
            # ... and the server still serves.
            x = rng.standard_normal(ROWS)
            y = np.frombuffer(c.call("spmv", id=ids[0], x=x.tobytes())["y"], "<f8")
            np.testing.assert_allclose(y, mats[0] @ x, rtol=1e-12, atol=1e-12)
            c.close()

    def test_waiter_beside_a_solve_times_out_cleanly(self):
        rng = make_rng()
        n = ROWS
        # the solve's matrix (0.4 MB): a 1-D Laplacian, which CG takes thousands of iterations on
        lap = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n), format="csr")
        other = random_matrix(rng, 5.3)  # 0.76 MB
        vectors = 2 * ROWS * 8
        # the other matrix and its vectors do not fit beside the solve's matrix; each fits alone
        budget = csr_bytes(lap) + csr_bytes(other) + vectors - 65536
        self.assertGreater(budget, csr_bytes(lap) + 8 * n * 8)  # the solve's matrix and vectors
        with Daemon("--device-memory", str(budget), "--format", "csr_scalar") as d:
            c = kd_rpc.Client(d.port)
            lap_id = c.put_csr(lap)["id"]
            other_id = c.put_csr(other)["id"]
            solver = kd_rpc.Client(d.port)
            solved = {}

            def solve():
                try:
                    b = np.ones(n)
                    _, res = solver.solve(lap_id, b, method="cg", rtol=1e-30, maxiter=10 ** 6,
                                          timeout_ms=4000)
                    solved["result"] = res
                except kd_rpc.RpcError as e:
                    solved["error"] = e.code

            st = threading.Thread(target=solve)
            st.start()
            time.sleep(1.0)  # the solve is running, its matrix resident and in use
            x = rng.standard_normal(ROWS)
            t0 = time.monotonic()
            with self.assertRaises(kd_rpc.RpcError) as cm:
                c.call("spmv", id=other_id, x=x.tobytes(), timeout_ms=500)
            waited = time.monotonic() - t0
            print(f"solve so far {solved}; waited {waited:.2f} s: {cm.exception.message}")
            self.assertEqual(cm.exception.code, "TIMEOUT", cm.exception.message)
            self.assertLess(waited, 2.5)
            # Without a timeout it waits for the solve and is answered.
            t0 = time.monotonic()
            y = np.frombuffer(c.call("spmv", id=other_id, x=x.tobytes())["y"], "<f8")
            np.testing.assert_allclose(y, other @ x, rtol=1e-12, atol=1e-12)
            st.join()
            print(f"solve: {solved}; the second spmv waited {time.monotonic() - t0:.2f} s",
                  flush=True)
            cache = c.call("server.status")["cache"]
            print(f"cache {cache}", flush=True)
            self.assertGreater(cache["memory_waits"], 0)
            self.assertGreater(cache["memory_wait_ms"], 0)
            # still serving, both matrices
            y = np.frombuffer(c.call("spmv", id=lap_id, x=np.ones(n).tobytes())["y"], "<f8")
            np.testing.assert_allclose(y, lap @ np.ones(n), rtol=1e-12, atol=1e-12)
            solver.close()
            c.close()


if __name__ == "__main__":
    unittest.main()
