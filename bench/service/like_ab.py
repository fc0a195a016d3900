"""A/B of a put with like on several krylovd binaries at once, the requests alternated between
them so each sees the same load (docs/BENCHMARKS.md, issue 35 part 5's pipeline): the reply's
time_ms, median (min) over R rounds after one warm round, for put(A, like=base) over TCP,
put_values from a kd.empty array (the region path) and put_values over TCP; each version is
dropped after its put, as a time-stepping loop does.

    PYTHONPATH=client/python python3 bench/service/like_ab.py N ROUNDS KRYLOVD [KRYLOVD ...]
"""
import os
import shutil
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np  # noqa: E402
import krylov
from wire import lap3d, start

n, rounds = int(sys.argv[1]), int(sys.argv[2])
bins = sys.argv[3:]
A = lap3d(n)
rng = np.random.default_rng(1)
servers = []
for b in bins:
    d = tempfile.mkdtemp(prefix="lp-ab-")
    proc, tcp, unix = start(b, d)
    kt, ku = krylov.Client(tcp), krylov.Client(unix)
    base = kt.put(A, persist="none")
    servers.append(dict(bin=b, dir=d, proc=proc, kt=kt, ku=ku, base=base,
                        ms={"like tcp": [], "values shm+empty": [], "values tcp": []}))
for r in range(rounds + 1):
    B = A.copy()
    B.data = A.data * (1.0 + rng.random())
    for s in (servers if r % 2 == 0 else servers[::-1]):
        i1 = s["kt"].put(B, like=s["base"], persist="none"); t1 = i1.raw["time_ms"]
        s["kt"].drop(i1)  # a time step's version dropped: its pages go back to the shelf
        C = B.data * 1.5
        e = s["ku"].empty(B.nnz); e[:] = C
        i2 = s["ku"].put_values(s["base"], e, persist="none"); t2 = i2.raw["time_ms"]
        s["kt"].drop(i2)
        i3 = s["kt"].put_values(s["base"], B.data * 2.5, persist="none"); t3 = i3.raw["time_ms"]
        s["kt"].drop(i3)
        if r > 0:  # the first round warms
            s["ms"]["like tcp"].append(t1); s["ms"]["values shm+empty"].append(t2)
            s["ms"]["values tcp"].append(t3)
print(f"lap3d {n}^3: {A.shape[0]} rows, {A.nnz} entries, {A.nnz*8/1e6:.1f} MB of values; "
      f"median (min) of {rounds} rounds, server time_ms")
for s in servers:
    print(s["bin"], "  ".join(f"{k}: {statistics.median(v):.2f} ({min(v):.2f})" for k, v in s["ms"].items()))
for s in servers:
    s["kt"].close(); s["ku"].close(); s["proc"].terminate(); s["proc"].wait(); shutil.rmtree(s["dir"], ignore_errors=True)
