#!/usr/bin/env bash
# Run THERE (the GPU host) with .debs carried: build, run the kernel tests named by KD_TESTS (a
# ctest -R regex, default test_formats) on the GPU, then krylov-bench spmv on KD_BENCH_MATRICES
# restricted to KD_FORMATS (every format when unset). A quick look at one format's numbers between
# full runs (bench-spmv.sh has the peers).
set -uo pipefail
source bench/device/setup.sh
out=${OUT:-/tmp/kd-quick}
mkdir -p "$out"
kd_device_build || exit 1
(cd build-device && KD_TEST_DEVICE=gpu ctest -R "${KD_TESTS:-test_formats}" --output-on-failure \
  > "$out/ctest-gpu.log" 2>&1; tail -4 "$out/ctest-gpu.log")
fmts=()
[ -n "${KD_FORMATS:-}" ] && fmts=(--formats "$KD_FORMATS")
build-device/bin/krylov-bench spmv --device gpu --dtype "${KD_DTYPE:-float64}" \
  --runs "${KD_BENCH_RUNS:-50}" "${fmts[@]}" ${KD_BENCH_MATRICES:-lap2d:1024} \
  > "$out/krylov-spmv.txt" 2>&1
grep -E "^[a-zA-Z_0-9]+: |^  [a-z_]+ +[0-9]|auto:" "$out/krylov-spmv.txt"
