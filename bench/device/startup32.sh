#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried, as
# `bench/device/startup32.sh [BIN [OUT]]` (bench/device/issue32.sh calls it after its build):
# issue 32, start-up on the GPU. Without BIN/krylovd, builds only the daemon and the CLI (the
# kd_run target). Then starts krylovd three times: every cache empty (krylovd's --cache-dir and
# NVIDIA's compute cache, CUDA_CACHE_PATH), the --cache-dir empty but NVIDIA's cache warm, and
# both warm. For each: the time from exec to the port file (written right before READY=1), to the
# first `krylov status` answer, the first CG solve of a bundled matrix (put + solve, while the
# warm-up runs), and to a warm server (`krylov status --wait-warm` returning), and the daemon's
# warm-up line. Output: OUT/times.txt, the daemons' logs and the CLI's progress lines.
set -uo pipefail
bin=${1:-build-device/bin}
out=${2:-${OUT:-/tmp/kd-issue32}}
mkdir -p "$out"
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/times.txt"
if [ ! -x "$bin/krylovd" ]; then
  bin=build-device/bin
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DKD_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$KD_PREFIX/usr" -DOpenCL_INCLUDE_DIR="$KD_PREFIX/usr/include" \
    -DOpenCL_LIBRARY="$KD_LIBDIR/libOpenCL.so" -DOPENSSL_ROOT_DIR="$KD_PREFIX/usr" \
    > build-device.log 2>&1 && cmake --build build-device -j 16 --target kd_run >> build-device.log 2>&1 \
    || { tail -40 build-device.log; exit 1; }
fi
export CUDA_CACHE_PATH=$out/nv-cache
rm -rf "$out/nv-cache" "$out/cache" "$out/state"
ms() { echo $(( ($2 - $1) / 1000000 )); }
start() {
  local which=$1
  rm -f "$out/port"
  local t0 t1 s1 t2
  t0=$(date +%s%N)
  "$bin/krylovd" --listen 127.0.0.1:0 --port-file "$out/port" --state-dir "$out/state" \
    --cache-dir "$out/cache" --device gpu --log-level info 2> "$out/krylovd-$which.log" &
  local pid=$!
  while [ ! -s "$out/port" ]; do kill -0 $pid || return 1; sleep 0.001; done
  t1=$(date +%s%N)
  export KRYLOV_SERVER=127.0.0.1:$(cat "$out/port")
  "$bin/krylov" status > "$out/status-$which.txt"
  s1=$(date +%s%N)
  local id f0 f1
  id=$("$bin/krylov" put tests/matrices/494_bus.mtx)
  f0=$(date +%s%N)
  "$bin/krylov" solve "$id" --rhs ones --method cg --rtol 1e-8 > "$out/solve-$which.txt" 2>&1
  f1=$(date +%s%N)
  "$bin/krylov" status --wait-warm=600 > /dev/null 2> "$out/wait-$which.txt"
  t2=$(date +%s%N)
  echo "$which: listen $(ms $t0 $t1) ms; first status answered $(ms $t0 $s1) ms;" \
    "first put $(ms $s1 $f0) ms, first solve $(ms $f0 $f1) ms; warm $(ms $t0 $t2) ms" \
    | tee -a "$out/times.txt"
  grep -h "programs  \|OpenCL programs ready" "$out/status-$which.txt" "$out/krylovd-$which.log" \
    | tee -a "$out/times.txt"
  kill $pid
  wait $pid
}
start cold
rm -rf "$out/cache"
start nv-warm
start warm
exit 0
