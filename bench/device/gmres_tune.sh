#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: where GMRES's iteration
# time goes (per-kernel device times) and the build options / group counts that change it, with
# CuPy's gmres on the same matrix in the same run. Output in $OUT/gmres-tune.txt.
set -uo pipefail
out=${OUT:-/tmp/kd-gmres}
mkdir -p "$out"
step=${KD_STEP_TIMEOUT:-120}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
m=${KD_GMRES_MATRIX:-lap3d:100}
{
  timeout "$step" python3 bench/peers/cupy_krylov.py --iterations 300 --methods gmres "$m"
  kb() { timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 300 \
    --methods gmres "$@" "$m" 2>&1 | grep -v "^info"; }
  echo "## default (profile)"; kb --profile 1
  echo "## groups";            kb --groups 264,528,1056
  echo "## pass A reads w once for 32 basis vectors"; kb --kernel-options -DKD_GMRES_CHUNK=32 --profile 1
  echo "## ellpack_r, SpMV not fused";                kb --format ellpack_r --profile 1
  echo "## restart 10, 60";                           kb --restart 10; kb --restart 60
  echo "## convdiff3d:100, float32"
  timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 300 \
    --methods gmres convdiff3d:100 2>&1 | grep -v "^info"
  kb --dtype float32
} 2>&1 | tee "$out/gmres-tune.txt"
# KD_GPU_TESTS=1: then the kernel and end-to-end tests on the GPU (ctest-gpu.log).
if [ -n "${KD_GPU_TESTS:-}" ]; then
  (cd build-device && KD_TEST_DEVICE=gpu timeout "${KD_TEST_TIMEOUT:-240}" ctest -L 'kernel|e2e' \
    -LE python -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
  tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head)
fi
