#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root after `source bench/device/setup.sh &&
# kd_device_build`: the kernel and end-to-end tests on the GPU, then `krylov-bench solve` (CG /
# PCG per iteration against the byte floor, a sweep of reduction grids, several right-hand sides,
# float32) and the CuPy peer (bench/peers/cupy_cg.py). Logs and tables go to $OUT when it is set.
set -uo pipefail
out=${OUT:-/tmp}
bench=build-device/bin/krylov-bench-solve
(cd build-device && KD_TEST_DEVICE=gpu ctest -L 'kernel|e2e' --output-on-failure -j 4 \
  > "$out/ctest-gpu.log" 2>&1; tail -4 "$out/ctest-gpu.log")
grep -h "cg float64\|pcg float64\|scaled laplacian" "$out/ctest-gpu.log" | head -8
csv=$out/solve.csv
$bench --device gpu --methods cg,pcg --groups "${KD_GROUPS:-0,264,528,792}" --csv "$csv" \
  lap2d:2048 lap3d:160 lap2d:1024 lap3d:100 powerlaw:2000000:8 2>&1 | tee "$out/solve.txt"
$bench --device gpu --methods cg --nrhs 1,4 --copy-mb 256 --csv "$csv" lap2d:1024 2>&1 \
  | tail -2 | tee -a "$out/solve.txt"
$bench --device gpu --dtype float32 --methods cg --copy-mb 256 --csv "$csv" lap2d:2048 \
  lap3d:160 2>&1 | tail -2 | tee -a "$out/solve.txt"
python3 bench/peers/cupy_cg.py --jacobi 2>&1 | tee "$out/cupy.txt"
