#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs and .baseline carried: issue 16
# item 5 (many clients), this tree against the baseline tree in .baseline/ (the commit before the
# device worker's groups, batches, express queue, pool and spin: make it with
#   rm -rf .baseline && mkdir .baseline && git archive 35281ad | tar -x -C .baseline
# here before the run). Both build with the same recipe; this tree's krylov-load drives each
# tree's krylovd on the GPU (started here, --port). Writes $OUT/load.txt; the tests part runs the
# GPU ctest (ctest-gpu.log).
set -uo pipefail
out=${OUT:-/tmp/kd-issue16c}
mkdir -p "$out"
parts=${KD_ISSUE16C_PARTS:-load tests}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
[ -x build-device/bin/krylov-load ] || kd_device_build || exit 1
if [ -d .baseline ] && [ ! -x .baseline/build-device/bin/krylovd ]; then
  (cd .baseline && kd_device_build) || echo "baseline build failed"
fi
serve() { # tree [krylovd options]: start its krylovd on the GPU, set $port and $pid
  local dir tree=$1; shift; dir=$(mktemp -d)
  "$tree/build-device/bin/krylovd" "$@" --listen 127.0.0.1:0 --port-file "$dir/port" --state-dir "$dir/state" \
    --device gpu --queue-depth 4096 --max-connections 4096 --max-jobs-per-connection 16 \
    --log-level warn > "$dir/log" 2>&1 &
  pid=$!
  for i in $(seq 600); do [ -s "$dir/port" ] && break; sleep 0.1; done
  port=$(cat "$dir/port")
}
load() { # label args...
  local label=$1; shift
  echo "== $label: krylov-load $*"
  timeout 150 build-device/bin/krylov-load --port "$port" "$@" 2>&1 | grep "^load:"
}
for part in $parts; do
  case $part in
  load)
    { timeout 120 python3 bench/peers/cupy_roundtrip.py --calls 5000 lap2d:32
      for tree in .baseline .; do
        [ -x "$tree/build-device/bin/krylovd" ] || continue
        label=$([ "$tree" = . ] && echo now || echo baseline)
        serve "$tree"
        load "$label" --clients 1 --requests 300 --spmv 100 --solve 0 --matrix 0 # warm
        load "$label" --clients 1 --requests 5000 --spmv 100 --solve 0 --matrix 0
        load "$label" --clients 8 --requests 2000 --spmv 100 --solve 0 --matrix 0
        load "$label" --clients 32 --requests 1000 --spmv 100 --solve 0 --matrix 0
        load "$label" --clients 32 --requests 1000 --spmv 100 --solve 0
        load "$label" --clients 32 --requests 500 --window 4 --spmv 100 --solve 0 --matrix 0
        load "$label" --clients 64 --requests 200 --spmv 60 --solve 20
        load "$label" --clients 32 --requests 100 --spmv 0 --solve 100 --matrix 0
        load "$label" --clients 4 --requests 1000 --spmv 100 --solve 0 --matrix 0 \
          --background-solve 100 --background-maxiter 1000
        echo "== $label: python"
        timeout 60 python3 bench/service/py_roundtrip.py --server "127.0.0.1:$port" --calls 3000
        kill "$pid"; wait "$pid"
      done
      # this tree without its loop's and worker's spinning: what the spin buys
      serve . --spin-us 0
      load "now, --spin-us 0" --clients 1 --requests 300 --spmv 100 --solve 0 --matrix 0
      load "now, --spin-us 0" --clients 1 --requests 5000 --spmv 100 --solve 0 --matrix 0
      load "now, --spin-us 0" --clients 32 --requests 1000 --spmv 100 --solve 0 --matrix 0
      kill "$pid"; wait "$pid"; } 2>&1 | tee "$out/load.txt" ;;
  tests)
    (cd build-device && KD_TEST_DEVICE=gpu timeout 300 ctest -L 'kernel|e2e' -LE python \
      -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
    tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head) ;;
  esac
done
exit 0
