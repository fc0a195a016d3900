#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root: build, list the OpenCL devices, run the kernel
# and end-to-end tests on the GPU, and the quick start. Logs go to $OUT when it is set.
set -uo pipefail
source bench/device/setup.sh
out=${OUT:-/tmp}
kd_device_build || exit 1
"$KD_PREFIX/usr/bin/clinfo" -l 2>&1 | tee "$out/clinfo.txt"
build-device/bin/krylovd --list-devices
(cd build-device && KD_TEST_DEVICE=gpu ctest --output-on-failure -j 4 2>&1 | tee "$out/ctest-gpu.log" | tail -25)
KRYLOV_DEVICE=gpu bash deploy/quickstart.sh build-device/bin 2>&1 | tee "$out/quickstart-gpu.log" | tail -12
