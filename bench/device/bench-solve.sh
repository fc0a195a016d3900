#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root after `source bench/device/setup.sh &&
# kd_device_build`: the kernel and end-to-end tests on the GPU, then `krylov-bench solve` (CG /
# PCG per iteration against the byte floor: a sweep of vector passes and reduction grids, then
# more matrices, several right-hand sides, float32) and, with KD_PEER=1, the CuPy peer
# (bench/peers/cupy_cg.py). Logs and tables go to $OUT when it is set.
set -uo pipefail
# test_solve_history is left out of the GPU runs: its record is of PoCL's arithmetic (float32
# rounds differently on the GPU); seams.sh compares it on the GPU with a record the tree before a
# change wrote there.
out=${OUT:-/tmp}
bench="build-device/bin/krylov-bench solve"
if [ "${KD_BENCH_TESTS:-1}" = 1 ]; then
  (cd build-device && KD_TEST_DEVICE=gpu ctest -L 'kernel|e2e' -LE python -E test_solve_history --output-on-failure \
    -j 4 > "$out/ctest-gpu.log" 2>&1; tail -4 "$out/ctest-gpu.log")
  grep -h "passes\|scaled laplacian" "$out/ctest-gpu.log" | head -8
fi
csv=$out/solve.csv
$bench --device gpu --methods cg --passes "${KD_PASSES:-2,1}" --groups "${KD_GROUPS:-0,396,660}" \
  --csv "$csv" lap2d:2048 lap3d:160 2>&1 | tee "$out/solve.txt"
$bench --device gpu --methods pcg --copy-mb 256 --csv "$csv" lap2d:2048 lap3d:160 2>&1 \
  | tail -2 | tee -a "$out/solve.txt"
# the SpMV fused with pass 1 (the default on a GPU) against separate launches
$bench --device gpu --methods cg,pcg --fuse 1,0 --copy-mb 256 --csv "$csv" lap2d:2048 lap3d:160 \
  lap3d:100 2>&1 | tail -12 | tee -a "$out/solve.txt"
$bench --device gpu --methods cg,pcg,sd --copy-mb 256 --csv "$csv" lap2d:1024 lap3d:100 2>&1 \
  | tail -6 | tee -a "$out/solve.txt"
$bench --device gpu --methods cg --nrhs 4 --copy-mb 256 --csv "$csv" lap2d:1024 lap3d:100 2>&1 \
  | tail -2 | tee -a "$out/solve.txt"
$bench --device gpu --dtype float32 --methods cg,pcg --copy-mb 256 --csv "$csv" lap2d:2048 \
  lap3d:160 2>&1 | tail -4 | tee -a "$out/solve.txt"
# the one real SPD matrix in the set: small, so launch latency and checks are what is measured
$bench --device gpu --methods cg,pcg --copy-mb 256 --csv "$csv" tests/matrices/494_bus.mtx 2>&1 \
  | tail -2 | tee -a "$out/solve.txt"
if [ "${KD_PEER:-0}" = 1 ]; then
  python3 bench/peers/cupy_cg.py --jacobi lap2d:2048 lap3d:160 tests/matrices/494_bus.mtx 2>&1 \
    | tee "$out/cupy.txt"
fi
