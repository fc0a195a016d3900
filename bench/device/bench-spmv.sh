#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: build krylovd and
# krylov-bench (setup.sh), build the cuSPARSE peer with nvcc, run the kernel and e2e tests on the
# GPU (skip with KD_BENCH_TESTS=0), then every contender on the same matrices, and print one
# table with ratios (ours / cuSPARSE best-of-two). Everything lands in $OUT (at most 8 files):
#   ctest-gpu.log, krylov-spmv.txt, krylov-spmv.json, cusparse.jsonl, cupy.jsonl,
#   spmv-report.json, spmv-table.txt
# Env: KD_BENCH_RUNS (timed runs per contender, default 200), KD_BENCH_MATRICES (override the set),
# KD_DTYPE (float64, the default, or float32: every contender in single precision).
set -uo pipefail
# test_solve_history is left out of the GPU runs: its record is of PoCL's arithmetic (float32
# rounds differently on the GPU); seams.sh compares it on the GPU with a record the tree before a
# change wrote there.
source bench/device/setup.sh
out=${OUT:-/tmp/kd-bench}
mkdir -p "$out"
runs=${KD_BENCH_RUNS:-200}
dtype=${KD_DTYPE:-float64}
peer_f32=
[ "$dtype" = float32 ] && peer_f32=--float32
kd_device_build || exit 1

command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
peer=build-device/cusparse_spmv
if ! nvcc -O3 -arch=sm_90 -o $peer bench/peers/cusparse_spmv.cu -lcusparse 2>/tmp/nvcc.log; then
  # cusparse from the Python wheel when the toolkit lacks it
  nv=$(python3 -c 'import nvidia.cusparse, os; print(os.path.dirname(nvidia.cusparse.__file__))' 2>/dev/null)
  ln -sf "$nv"/lib/libcusparse.so.* /tmp/libcusparse.so 2>/dev/null
  nvcc -O3 -arch=sm_90 -I"$nv/include" -L/tmp -Xlinker -rpath="$nv/lib" -o $peer \
    bench/peers/cusparse_spmv.cu -lcusparse 2>>/tmp/nvcc.log || { tail -20 /tmp/nvcc.log; peer=; }
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader

if [ "${KD_BENCH_TESTS:-1}" = 1 ]; then
  (cd build-device && KD_TEST_DEVICE=gpu ctest -L 'kernel|e2e' -LE python -E test_solve_history --output-on-failure -j 4 \
    > "$out/ctest-gpu.log" 2>&1; tail -6 "$out/ctest-gpu.log")
fi

mats=${KD_BENCH_MATRICES:-"lap2d:2048 lap3d:160 powerlaw:2000000:8 local:powerlaw:2000000:8"}
if [ -z "${KD_BENCH_MATRICES:-}" ]; then
  for f in 494_bus dwt_878 can___24 ani4 bayer10 rajat01 adder_dcop_05 watt_2 arrow \
           Groebner_id2003_aug Franz6_id1959_aug; do
    mats="$mats tests/matrices/$f.mtx"
  done
fi
dump=/tmp/kd-csr
mkdir -p $dump
build-device/bin/krylov-bench spmv --device gpu --dtype "$dtype" --runs "$runs" --json "$out/krylov-spmv.json" \
  --export $dump $mats > "$out/krylov-spmv.txt" 2>&1 || tail -20 "$out/krylov-spmv.txt"
: > "$out/cusparse.jsonl"
[ -n "$peer" ] && $peer --runs "$runs" $peer_f32 $dump/*.csr >> "$out/cusparse.jsonl" 2>&1
python3 bench/peers/cupy_spmv.py --runs "$runs" --dtype "$dtype" $dump/*.csr > "$out/cupy.jsonl" 2>&1
python3 bench/peers/report.py "$out/krylov-spmv.json" "$out/cusparse.jsonl" "$out/cupy.jsonl" \
  --json "$out/spmv-report.json" | tee "$out/spmv-table.txt"
