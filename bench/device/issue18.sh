#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 18 (many small
# systems). Builds if needed, runs the batch tests on the GPU (test_batch, test_py_batch), then
# `krylov-bench batch` on 1000 systems of 494_bus's pattern with two unknowns per bus (988 rows,
# 4,320 nonzeros), rtol 1e-8: the batch in one call, one system alone, the block-diagonal
# workaround, with and without Jacobi; then CuPy's cg in a Python loop over the same systems
# (bench/peers/cupy_batch.py). Writes $OUT/batch.txt (and ctest-batch.log).
set -uo pipefail
out=${OUT:-/tmp/kd-issue18}
mkdir -p "$out"
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
[ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
if [ "${KD_BATCH_TESTS:-1}" = 1 ]; then
  (cd build-device && KD_TEST_DEVICE=gpu ctest -R 'test_batch|test_py_batch' --output-on-failure \
    > "$out/ctest-batch.log" 2>&1; tail -3 "$out/ctest-batch.log")
fi
bench=build-device/bin/krylov-bench
{
  $bench batch --device gpu --repeat 5 --export "$out/batch1000.bin" tests/matrices/494_bus.mtx
  $bench batch --device gpu --repeat 5 --jacobi tests/matrices/494_bus.mtx
  $bench batch --device gpu --repeat 5 --systems 100 tests/matrices/494_bus.mtx
  timeout 900 python3 bench/peers/cupy_batch.py --rtol 1e-8 "$out/batch1000.bin"
  timeout 900 python3 bench/peers/cupy_batch.py --rtol 1e-8 --jacobi "$out/batch1000.bin"
} 2>&1 | grep -v "^info" | tee "$out/batch.txt"
rm -f "$out/batch1000.bin"
