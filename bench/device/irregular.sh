#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 12's check in one
# call. bench-spmv.sh (build, the kernel and end-to-end tests on the GPU, every format and the
# automatic choice — tiled and reordered variants included — against cuSPARSE and CuPy on the
# irregular set and the regular matrices that must keep their numbers), then CG per iteration
# with and without RCM on the SPD matrices whose order can be improved.
# Files in $OUT: bench-spmv.sh's seven, and extra.txt (the solves, and float32 SpMV on the
# matrices where tiling could pay: dense blocks, and the Laplacians).
set -uo pipefail
out=${OUT:-/tmp/kd-irregular}
mkdir -p "$out"
export KD_BENCH_RUNS=${KD_BENCH_RUNS:-100}
export KD_BENCH_MATRICES=${KD_BENCH_MATRICES:-"powerlaw:2000000:8 rmat:20:16 circuit:1000 blocks:16384:16:6 \
shuffled:lap2d:1024 lap2d:2048 lap3d:160 tests/matrices/rajat01.mtx tests/matrices/adder_dcop_05.mtx \
tests/matrices/watt_2.mtx tests/matrices/arrow.mtx tests/matrices/bayer10.mtx \
tests/matrices/Groebner_id2003_aug.mtx tests/matrices/Franz6_id1959_aug.mtx"}
bash bench/device/bench-spmv.sh
source bench/device/setup.sh # the solves need the same prefix and OpenCL vendors
bench="build-device/bin/krylov-bench solve --device gpu --methods cg,pcg --copy-mb 256"
{
  for r in none rcm; do
    $bench --reorder $r shuffled:lap2d:1024 shuffled:lap3d:100 2>&1 | tail -4
    $bench --reorder $r --format csr_adaptive circuit:1000 2>&1 | tail -2
  done
  build-device/bin/krylov-bench spmv --device gpu --dtype float32 --runs 50 \
    --formats csr_scalar,csr_adaptive,ellpack_r,tiled blocks:16384:16:6 lap2d:2048 2>&1 \
    | grep -E "^[a-z_0-9]+: |^  [a-z_]+ +[0-9]|auto:"
} | tee "$out/extra.txt"
