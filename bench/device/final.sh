#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: the whole check in one
# call — build, every kernel and end-to-end test on the GPU (the Python ones need numpy/scipy,
# which the GPU image's /usr/bin/python3 lacks: they run in CI), the quick start on the GPU, the
# SpMV benchmark against cuSPARSE and CuPy, and the solver benchmark against CuPy's cg.
# At most 8 files land in $OUT.
set -uo pipefail
# test_solve_history is left out of the GPU runs: its record is of PoCL's arithmetic (float32
# rounds differently on the GPU); seams.sh compares it on the GPU with a record the tree before a
# change wrote there.
source bench/device/setup.sh
out=${OUT:-/tmp/kd-final}
mkdir -p "$out"
kd_device_build || exit 1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(cd build-device && KD_TEST_DEVICE=gpu ctest -L 'kernel|e2e' -LE python -E test_solve_history --output-on-failure -j 4 \
  > "$out/ctest-gpu.log" 2>&1; tail -8 "$out/ctest-gpu.log")
KRYLOV_DEVICE=gpu bash deploy/quickstart.sh build-device/bin > "$out/quickstart-gpu.log" 2>&1
tail -6 "$out/quickstart-gpu.log"
KD_BENCH_TESTS=0 bash bench/device/bench-spmv.sh > /tmp/spmv.log 2>&1
tail -30 "$out/spmv-table.txt" 2>/dev/null || tail -30 /tmp/spmv.log
rm -f "$out/cusparse.jsonl" "$out/cupy.jsonl" "$out/krylov-spmv.txt"
KD_BENCH_TESTS=0 KD_PEER=1 KD_PASSES=2 KD_GROUPS=0 bash bench/device/bench-solve.sh > /tmp/solve.log 2>&1
tail -40 /tmp/solve.log
