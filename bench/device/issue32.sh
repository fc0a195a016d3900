#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 32's checks on the
# GPU. Parts (KD_I32_PARTS, in order; default all):
#   tests    the kernel + end-to-end suite on the GPU, MPI included (ctest -L 'kernel|e2e';
#            the Python tests only where numpy, scipy and msgpack import)      ctest-gpu.log
#   startup  time from exec to server.status with an empty program cache and with a full one, the
#            warm-up's end, and the first solve's cost                           startup-gpu.txt
set -uo pipefail
out=${OUT:-/tmp/kd-i32}
mkdir -p "$out"
parts=${KD_I32_PARTS:-tests startup}
source bench/device/setup.sh
kd_suite_build || exit 1
for part in $parts; do
  case $part in
  tests)
    kd_suite "$out" 270 ;;
  startup)
    timeout 100 bash bench/device/startup32.sh build-device/bin "$out" 2>&1 | tail -30 ;;
  esac
done
exit 0
