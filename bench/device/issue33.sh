#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 33's checks on the
# GPU. Parts (KD_I33_PARTS, in order; default all):
#   tests    the kernel + end-to-end suite on the GPU, MPI included (ctest -L 'kernel|e2e';
#            the Python tests only where numpy, scipy and msgpack import)      ctest-gpu.log
#   putrss   bench/service/put_rss.sh on the GPU: a put's peak host RSS against its bytes and
#            its CSR's
#                                                                              put-rss-gpu.txt
#   spgemm   SpGEMM against cuSPARSE after issue 32's kernel changes (a few cases, fewer runs:
#            bench/device/spgemm.sh with KD_BENCH_TESTS=0)                     spgemm-table.txt
set -uo pipefail
out=${OUT:-/tmp/kd-i33}
mkdir -p "$out"
parts=${KD_I33_PARTS:-tests putrss spgemm}
source bench/device/setup.sh
kd_suite_build || exit 1
for part in $parts; do
  case $part in
  tests)
    kd_suite "$out" "${KD_I33_CTEST_TIMEOUT:-300}" ;;
  putrss)
    timeout 60 bash bench/service/put_rss.sh build-device/bin gpu > "$out/put-rss-gpu.txt" 2>&1
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
