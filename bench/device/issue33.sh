#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 33's checks on the
# GPU. Parts (KD_I33_PARTS, in order; default all):
#   tests    the kernel + end-to-end suite on the GPU, MPI included (ctest -L 'kernel|e2e';
#            the Python tests only where numpy, scipy and msgpack import)      ctest-gpu.log
#   putrss   bench/put_rss.sh on the GPU: a put's peak host RSS against its bytes and its CSR's
#                                                                              put-rss-gpu.txt
#   spgemm   SpGEMM against cuSPARSE after issue 32's kernel changes (a few cases, fewer runs:
#            bench/device/spgemm.sh with KD_BENCH_TESTS=0)                     spgemm-table.txt
set -uo pipefail
out=${OUT:-/tmp/kd-i33}
mkdir -p "$out"
parts=${KD_I33_PARTS:-tests putrss spgemm}
source bench/device/setup.sh
kd_mpi_setup
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
py=()
python3 -c "import numpy, scipy, msgpack" 2>/dev/null && py=(-DKD_PYTHON="$(command -v python3)")
kd_device_build "${KD_MPI_FLAGS[@]}" -DMPIEXEC_EXECUTABLE="$mpirun" "${py[@]}" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for part in $parts; do
  case $part in
  tests)
    skip='python'
    [ ${#py[@]} -gt 0 ] && skip='soak'
    # test_solve_history pins PoCL's exact histories on the CI machine's CPU (its header)
    (cd build-device && KD_TEST_DEVICE=gpu timeout "${KD_I33_CTEST_TIMEOUT:-300}" ctest -L 'kernel|e2e' -LE "$skip" \
      -E test_solve_history --output-on-failure -j 8 > "$out/ctest-gpu.log" 2>&1
    tail -4 "$out/ctest-gpu.log"; grep -E "\*\*\*Failed|Timeout|Not Run" "$out/ctest-gpu.log" | head -20) ;;
  putrss)
    timeout 60 bash bench/put_rss.sh build-device/bin gpu > "$out/put-rss-gpu.txt" 2>&1
    cat "$out/put-rss-gpu.txt" ;;
  spgemm)
    KD_BENCH_TESTS=0 KD_BENCH_RUNS=${KD_BENCH_RUNS:-8} KD_SPGEMM_ALGS=${KD_SPGEMM_ALGS:-default} \
      KD_SPGEMM_POOL=0 KD_STEP_TIMEOUT=60 KD_SPGEMM_CASES="${KD_SPGEMM_CASES:-aa float64 lap3d:64 lap2d:1024 powerlaw:200000:7 tests/matrices/bayer10.mtx
aa float32 lap3d:64 lap2d:1024}" \
      timeout 240 bash bench/device/spgemm.sh > "$out/spgemm-run.txt" 2>&1
    tail -20 "$out/spgemm-run.txt" ;;
  esac
done
exit 0
