#!/usr/bin/env python3
"""solve.batch against one solve a system (issue 18): K resident SPD matrices of their own random
patterns (rows drawn from [--min-rows, --max-rows), about 4 entries a row), one right-hand side
each, CG to 1e-8 in float64, from the Python client. Prints the median of --runs of one
solve_many of all K items and of K `solve` requests one after another, and whether every item's
iteration count equals its single solve's.

    PYTHONPATH=client/python python3 bench/service/solve_many.py --server 127.0.0.1:7373 [--k 200]
"""

import argparse

import numpy as np
import scipy.sparse as sp

import krylov


def spd(rng, n):
    a = sp.random(n, n, 4.0 / n, random_state=int(rng.integers(1 << 30)))
    a = (a + a.T).tocsr()
    return sp.csr_matrix(a + sp.diags(abs(a).sum(1).A1 + 0.1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default=None)
    ap.add_argument("--k", type=int, default=200)
    ap.add_argument("--min-rows", type=int, default=20)
    ap.add_argument("--max-rows", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    import time

    mats = [spd(rng, int(n)) for n in rng.integers(args.min_rows, args.max_rows, args.k)]
    bs = [rng.uniform(-1, 1, m.shape[0]) for m in mats]
    with krylov.Client(args.server) as kd:
        items = list(zip([kd.put(m) for m in mats], bs))
        kd.solve_many(items, rtol=1e-8)  # programs built, matrices read
        many, one = [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            res = kd.solve_many(items, rtol=1e-8)
            many.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            its = [kd.solve(info, b, rtol=1e-8).iterations for info, b in items]
            one.append(time.perf_counter() - t0)
        same = all(r.iterations == i for r, i in zip(res.items, its))
        print(f"k={args.k} rows {args.min_rows}..{args.max_rows - 1}: solve.batch median "
              f"{np.median(many) * 1e3:.1f} ms (server {res.time_ms:.1f} ms, groups {res.groups}, "
              f"launches {res.launches}, converged {res.converged_count}); {args.k} solves one "
              f"after another median {np.median(one) * 1e3:.1f} ms; iterations equal: {same}")


if __name__ == "__main__":
    main()
