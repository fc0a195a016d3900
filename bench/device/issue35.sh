#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 35's figures on the
# GPU. Parts (KD_I35_PARTS, in order; default all):
#   tests    the kernel + end-to-end suite on the GPU, MPI and Python included    ctest-gpu.log
#   wire     the wire's share of a put, like put, spmv and solve at 1M rows over TCP, the Unix
#            socket and shared memory, beside raw loopback and memcpy
#            (bench/service/wire.py where it exists, else shm_wire.py)            wire-gpu.txt
#   putlike  krylov-bench putlike on lap3d 100^3: without a state directory, with one (and each
#            --persist mode where the bench has it)                              putlike-gpu.txt
#   linalg   `from krylov.linalg import cg; cg(A, b)` in a fresh Python with krylovd on PATH and
#            no KRYLOV_SERVER; no daemon left behind                             linalg-gpu.txt
#   xfer     krylov-ocl-xfer: a like put's passes one at a time (copy, hash, writes from pageable
#            and pinned memory, the scan) on lap3d 100^3's values                 xfer-gpu.txt
#   refresh  krylov-bench refresh (issue 36 part 2): AMG's full setup against its refresh on the
#            issue's three Laplacians, and the refresh's steps                    refresh-gpu.txt
#   timestep a user's time step (issue 36's table): new values on the last step's pattern, then
#            AMG-CG to 1e-8 with x back, through shared memory (bench/service/timestep.py),
#            put_values and put like                                              timestep-gpu.txt
#   mrhs     krylov-bench amg --nrhs 8 (issue 36 part 3): 8 right-hand sides in one V-cycle
#            against one, per column                                              mrhs-gpu.txt
#   amg      krylov-bench amg's setup phases (issue 36) on the issue's three Laplacians, the
#            aggregates on the host and on the device                            amg-gpu.txt
set -uo pipefail
out=${OUT:-/tmp/kd-i35}
mkdir -p "$out"
parts=${KD_I35_PARTS:-tests wire putlike linalg amg}
source bench/device/setup.sh
kd_suite_build || exit 1
bin=$PWD/build-device/bin
py=$(command -v python3)
for part in $parts; do
  case $part in
  tests)
    kd_suite "$out" "${KD_I35_CTEST_TIMEOUT:-300}" ;;
  wire)
    if [ -f bench/service/wire.py ]; then
      timeout 240 "$py" bench/service/wire.py --krylovd "$bin/krylovd" ${KD_I35_WIRE_ARGS:-} \
        > "$out/wire-gpu.txt" 2>&1
    else
      timeout 240 "$py" bench/service/shm_wire.py --krylovd "$bin/krylovd" > "$out/wire-gpu.txt" 2>&1
    fi
    cat "$out/wire-gpu.txt" ;;
  xfer)
    timeout 120 "$bin/krylov-ocl-xfer" --device gpu --n 100 --runs 9 > "$out/xfer-gpu.txt" 2>&1
    cat "$out/xfer-gpu.txt" ;;
  putlike)
    {
      echo "== no state directory"
      timeout 120 "$bin/krylov-bench" putlike --spawn "$bin/krylovd" \
        --spawn-args "--warm-programs none ${KD_I35_SERVER_ARGS:-}"
      echo "== state directory"
      timeout 120 "$bin/krylov-bench" putlike --spawn "$bin/krylovd" --spawn-state --spawn-args '--warm-programs none'
      if "$bin/krylov-bench" putlike --help 2>&1 | grep -q -- --persist; then
        for mode in behind none; do
          echo "== state directory, --persist $mode"
          timeout 120 "$bin/krylov-bench" putlike --spawn "$bin/krylovd" --spawn-state \
            --persist "$mode" --spawn-args "--warm-programs none ${KD_I35_SERVER_ARGS:-}"
        done
      fi
    } > "$out/putlike-gpu.txt" 2>&1
    cat "$out/putlike-gpu.txt" ;;
  linalg)
    (
      unset KRYLOV_SERVER
      export PATH=$bin:$PATH PYTHONPATH=$PWD/client/python
      timeout 120 "$py" - <<'PY'
import os, subprocess, sys, time
import numpy as np, scipy.sparse as sp
code = r"""
import numpy as np, scipy.sparse as sp, time
from krylov.linalg import cg
n = 300
t = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(n, n))
A = sp.csr_matrix(sp.kron(sp.identity(n), t) + sp.kron(t, sp.identity(n)))
b = np.random.default_rng(1).standard_normal(A.shape[0])
t0 = time.perf_counter(); x, info = cg(A, b, rtol=1e-8); t1 = time.perf_counter()
x, info = cg(A, b, rtol=1e-8); t2 = time.perf_counter()
print("info", info, "relres", np.linalg.norm(b - A @ x) / np.linalg.norm(b),
      "first call %.1f ms, second %.1f ms" % ((t1 - t0) * 1e3, (t2 - t1) * 1e3))
import krylov.linalg as L
print("daemon pid", getattr(L, "_private_pid", lambda: None)() if callable(getattr(L, "_private_pid", None)) else "?")
"""
before = subprocess.run(["pgrep", "-x", "krylovd"], capture_output=True, text=True).stdout.split()
r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=110)
print(r.stdout, r.stderr[-2000:])
time.sleep(2)
after = subprocess.run(["pgrep", "-x", "krylovd"], capture_output=True, text=True).stdout.split()
print("krylovd processes before", before, "after", after,
      "left behind:", sorted(set(after) - set(before)))
PY
    ) > "$out/linalg-gpu.txt" 2>&1
    cat "$out/linalg-gpu.txt" ;;
  refresh)
    timeout 300 "$bin/krylov-bench" refresh --device gpu --precond amg lap3d:64 lap2d:1024 lap3d:100 \
      > "$out/refresh-gpu.txt" 2>&1
    grep -v '^info' "$out/refresh-gpu.txt" ;;
  timestep)
    for mode in values like; do
      timeout 240 "$py" bench/service/timestep.py --krylovd "$bin/krylovd" --mode $mode
    done > "$out/timestep-gpu.txt" 2>&1
    cat "$out/timestep-gpu.txt" ;;
  mrhs)
    timeout 300 "$bin/krylov-bench" amg --device gpu --nrhs 8 lap3d:64 lap2d:1024 lap3d:100 \
      > "$out/mrhs-gpu.txt" 2>&1
    grep -v '^info' "$out/mrhs-gpu.txt" ;;
  amg)
    for agg in 0 1; do
      echo "== --aggregation $agg"
      timeout 120 "$bin/krylov-bench" amg --device gpu --aggregation $agg lap3d:64 lap2d:1024 lap3d:100
    done > "$out/amg-gpu.txt" 2>&1
    cat "$out/amg-gpu.txt" ;;
  esac
done
exit 0
