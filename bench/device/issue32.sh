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
kd_mpi_setup
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
# the Python tests with a python3 that has numpy, scipy and msgpack (not always /usr/bin's)
py=()
python3 -c "import numpy, scipy, msgpack" 2>/dev/null && py=(-DKD_PYTHON="$(command -v python3)")
kd_device_build "${KD_MPI_FLAGS[@]}" -DMPIEXEC_EXECUTABLE="$mpirun" "${py[@]}" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for part in $parts; do
  case $part in
  tests)
    skip='python'
    [ ${#py[@]} -gt 0 ] && skip='soak'
    # test_solve_history pins PoCL's exact histories on the CI machine's CPU (its header): not a
    # GPU's rounding (bench/device/seams.sh compares a GPU with itself)
    (cd build-device && KD_TEST_DEVICE=gpu timeout 270 ctest -L 'kernel|e2e' -LE "$skip" \
      -E test_solve_history --output-on-failure -j 8 > "$out/ctest-gpu.log" 2>&1
    tail -4 "$out/ctest-gpu.log"; grep -E "\*\*\*Failed|Timeout|Not Run" "$out/ctest-gpu.log" | head -20) ;;
  startup)
    timeout 100 bash bench/device/startup32.sh build-device/bin "$out" 2>&1 | tail -30 ;;
  esac
done
exit 0
