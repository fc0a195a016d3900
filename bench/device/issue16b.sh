#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 16 items 1 and 4 on
# the GPU after the first run. Parts (KD_ISSUE16B_PARTS, in order; default all):
#   small    cg / pcg us per iteration, small path (--small 1) against the general one (-1), on
#            494_bus, ani4 and Laplacians from 256 to 65k rows, CuPy's cg on 494_bus  small.txt
#   profile  where CG's time goes with 8 and 32 right-hand sides (--profile 1)  profile.txt
#   tests    kernel + e2e ctest on the GPU (the small path runs by default there) ctest-gpu.log
set -uo pipefail
out=${OUT:-/tmp/kd-issue16b}
mkdir -p "$out"
parts=${KD_ISSUE16B_PARTS:-small profile tests}
step=${KD_STEP_TIMEOUT:-200}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
for part in $parts; do
  case $part in
  small)
    { timeout 60 python3 bench/peers/cupy_cg.py --iterations 500 tests/matrices/494_bus.mtx
      for s in 1 -1; do
        timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 500 \
          --small $s --methods cg,pcg tests/matrices/494_bus.mtx tests/matrices/ani4.mtx \
          lap2d:16 lap2d:32 lap2d:64 lap2d:91 lap2d:128 lap2d:181 lap2d:256 2>&1 | grep -v "^info"
      done; } 2>&1 | tee "$out/small.txt" ;;
  profile)
    timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 200 \
      --nrhs 8,32 --methods cg --profile 1 lap3d:100 2>&1 | grep -v "^info" | tee "$out/profile.txt" ;;
  tests)
    (cd build-device && KD_TEST_DEVICE=gpu timeout "$step" ctest -L 'kernel|e2e' -LE python \
      -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
    tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head) ;;
  esac
done
exit 0
