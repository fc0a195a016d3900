#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root, with .debs and .old carried (.old: the tree
# before the method/preconditioner tables, `git archive b2350c1 | tar -x -C .old`, matrices but
# the three the history test reads removed). One call checks issue 11's refactor on the GPU:
#   1. both trees built; the old solver records its statuses, iteration counts and residual
#      histories on the GPU (tests/solver/test_solve_history.c), the new one compares with them;
#   2. the new tree's kernel and end-to-end tests on the GPU (the history test against that
#      record);
#   3. krylov-bench solve, old and new build in turn on the same matrices, and CuPy's cg.
set -uo pipefail
source bench/device/setup.sh
out=${OUT:-/tmp/kd-seams}
mkdir -p "$out"
kd_device_build || exit 1
(cd .old && kd_device_build) || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
KD_TEST_DEVICE=gpu KD_RECORD_HISTORY=/tmp/hist-old.txt .old/build-device/bin/test_solve_history \
  > /tmp/hist-old.log 2>&1
KD_TEST_DEVICE=gpu KD_RECORD_HISTORY=/tmp/hist-new.txt build-device/bin/test_solve_history \
  > /tmp/hist-new.log 2>&1
if cmp /tmp/hist-old.txt /tmp/hist-new.txt; then
  echo "histories on the GPU: old and new solver bit for bit identical ($(wc -l < /tmp/hist-old.txt) columns)"
else
  echo "histories on the GPU DIFFER"
fi
(cd build-device && KD_TEST_DEVICE=gpu KD_HISTORY_REFERENCE=/tmp/hist-old.txt \
  ctest -L 'kernel|e2e' -LE python --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
  tail -5 "$out/ctest-gpu.log")
grep -h "cg1 converged\|cg1 max\|494_bus" "$out/ctest-gpu.log" | head -12
run() { # $1: old | new, then krylov-bench solve arguments
  local tree=$1; shift
  local bin=build-device/bin/krylov-bench
  [ "$tree" = old ] && bin=.old/build-device/bin/krylov-bench
  $bin solve --device gpu --copy-mb 256 "$@" 2>&1 | grep -v '^#\|^matrix' | sed "s/^/$tree /"
}
{
  echo "# tree matrix meth nrhs grps ps fu rows nnz MB/it ms/it floor of_floor GB/s auto_ms spmv_ms"
  for t in old new old new; do
    run $t --methods cg,pcg,sd lap2d:2048 lap3d:160
  done
  for t in old new; do
    run $t --methods cg,pcg,sd lap2d:1024 lap3d:100
    run $t --methods cg --nrhs 4 lap2d:1024 lap3d:100
    run $t --dtype float32 --methods cg,pcg lap2d:2048 lap3d:160
    run $t --methods cg,pcg tests/matrices/494_bus.mtx
  done
  run new --methods cg1,cg1+jacobi lap2d:2048 lap3d:160 lap3d:100 tests/matrices/494_bus.mtx
  run new --methods cg1 --fuse 0 lap2d:2048 lap3d:160
} | tee "$out/solve-old-new.txt"
python3 bench/peers/cupy_cg.py --jacobi lap2d:2048 lap3d:160 tests/matrices/494_bus.mtx 2>&1 \
  | tee "$out/cupy.txt"
