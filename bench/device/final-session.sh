#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: one call that checks and
# measures what a session merged. Parts (KD_FINAL_PARTS, in order; default all):
#   tests    kernel + e2e ctest on the GPU (python label excluded)       ctest-gpu.log
#   tls      krylov-tls-bench: SpMV round trip and a 10M-nonzero put, TLS against plaintext
#   startup  bench/device/startup.sh: READY time cold and warm, first against tenth solve
#   refresh  krylov-bench refresh: a preconditioner's setup against its refresh on new values
set -uo pipefail
out=${OUT:-/tmp/kd-final}
mkdir -p "$out"
parts=${KD_FINAL_PARTS:-tests tls startup}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
kd_device_build || exit 1
for part in $parts; do
  case $part in
  tests)
    (cd build-device && KD_TEST_DEVICE=gpu timeout 420 ctest -L 'kernel|e2e' -LE 'python|mpi' \
      -E test_solve_history --output-on-failure -j 8 > "$out/ctest-gpu.log" 2>&1
    tail -4 "$out/ctest-gpu.log"; grep -E "\*\*\*Failed|Timeout" "$out/ctest-gpu.log" | head) ;;
  tls)
    timeout 150 build-device/bin/krylov-tls-bench 2>&1 | tee "$out/tls-bench.txt" | tail -20 ;;
  startup)
    OUT=$out timeout 280 bash bench/device/startup.sh 2>&1 | tail -40 ;;
  refresh)
    timeout 240 build-device/bin/krylov-bench refresh --precond amg,ilu0,jacobi lap3d:100 \
      lap2d:1000 2>&1 | tee "$out/refresh.txt" | tail -20 ;;
  esac
done
exit 0
