#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 22's device-side
# checks before the benchmarks: the new values' kernel test and every format and preconditioner
# refresh test on NVIDIA's OpenCL. Logs into $OUT.
set -uo pipefail
out=${OUT:-/tmp/kd-i22-early}
mkdir -p "$out"
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
kd_device_build || exit 1
cd build-device
KD_TEST_DEVICE=gpu timeout 400 ctest -R 'test_matrix_values|test_formats|test_precond_refresh|test_spmv|test_select' \
  --output-on-failure > "$out/ctest.log" 2>&1
grep -E "tests passed|Failed|\*\*\*" "$out/ctest.log"
