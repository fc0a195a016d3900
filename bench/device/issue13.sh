#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 13 in one call.
# Build, the kernel and end-to-end tests on the GPU (ctest-gpu.log), the multigrid benchmark
# (amg.sh: amg-krylov.txt, amg-cupy.txt) and the SpGEMM benchmark (spgemm.sh, its tests skipped:
# spgemm-table.txt and the JSON lines). KD_ISSUE13_PARTS picks among "tests amg spgemm".
set -uo pipefail
out=${OUT:-/tmp/kd-issue13}
mkdir -p "$out"
parts=${KD_ISSUE13_PARTS:-tests amg spgemm}
source bench/device/setup.sh
kd_device_build || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
if [[ $parts == *tests* ]]; then
  (cd build-device && KD_TEST_DEVICE=gpu timeout 240 ctest -L 'kernel|e2e' -LE python \
    -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
  tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head)
fi
[[ $parts == *amg* ]] && bash bench/device/amg.sh
[[ $parts == *spgemm* ]] && KD_BENCH_TESTS=0 KD_BENCH_RUNS=${KD_BENCH_RUNS:-10} \
  bash bench/device/spgemm.sh 2>&1 | tail -30
exit 0
