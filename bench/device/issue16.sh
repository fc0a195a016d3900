#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 16, item 1 (several
# columns at once) in one call, CuPy in the same run. Parts (KD_ISSUE16_PARTS, in the order
# given; default all): spmm (krylov-bench spmm + bench/peers/cupy_spmm.py: spmm.txt),
# solve (krylov-bench solve --nrhs 1,8,32 cg / pcg + CuPy's cg for k = 1: solve.txt),
# tests (kernel + e2e ctest on the GPU: ctest-gpu.log).
set -uo pipefail
out=${OUT:-/tmp/kd-issue16}
mkdir -p "$out"
parts=${KD_ISSUE16_PARTS:-spmm solve tests}
step=${KD_STEP_TIMEOUT:-150}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
mats="lap3d:100 lap2d:2048"
for part in $parts; do
  case $part in
  spmm)
    { timeout "$step" python3 bench/peers/cupy_spmm.py --ks 1,8,32 $mats
      timeout "$step" build-device/bin/krylov-bench spmm --device gpu --ks 1,8,32 $mats \
        2>&1 | grep -v "^info"; } 2>&1 | tee "$out/spmm.txt" ;;
  solve)
    { timeout "$step" python3 bench/peers/cupy_cg.py --iterations 200 $mats
      timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 200 \
        --nrhs 1,8,32 --methods cg,pcg $mats 2>&1 | grep -v "^info"; } 2>&1 | tee "$out/solve.txt" ;;
  tests)
    (cd build-device && KD_TEST_DEVICE=gpu timeout "$step" ctest -L 'kernel|e2e' -LE python \
      -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
    tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head) ;;
  esac
done
exit 0
