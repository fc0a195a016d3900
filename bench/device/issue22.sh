#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 22's benchmarks in one
# call, under 8 minutes (each part under `timeout`, and parts are skipped once the budget is spent).
# Builds build-device/ (incremental), then, with CuPy's peer in the same run:
#   heat       krylov-bench heat: 50 backward-Euler steps at 1M rows against a krylovd started here
#              with a state directory (heat.txt), then one it starts itself without (heat-nostate.txt)
#   putlike    krylov-bench putlike: lap3d 100^3 (6.9M nonzeros), full put against put with like,
#              without and with a state directory (putlike-nostate.txt, putlike-state.txt)
#   refresh    krylov-bench refresh: a preconditioner's setup against its refresh (refresh.txt)
#   wire       krylov-bench wire, when the tree has it (wire.txt)
#   cupy       bench/peers/cupy_heat.py: CuPy's cg + Jacobi on the same loop (cupy_heat.txt)
# Logs and results go to $OUT. Knobs (for a small local run on PoCL: see the end of this comment):
#   KD_ISSUE22_PARTS (default "heat putlike refresh wire cupy"), KD_HEAT_N (1000), KD_HEAT_STEPS
#   (50), KD_PUTLIKE_N (100), KD_PUTLIKE_REPEAT (5), KD_REFRESH_MATRICES ("lap2d:1000 lap3d:100"),
#   KD_DEVICE (gpu), KD_BUDGET_S (470), KD_BIN (use these binaries: no setup, no build),
#   KD_CUPY_FLAGS (e.g. --numpy where there is no GPU), KD_SPAWN_ARGS (more krylovd options;
#   default '--warm-programs none').
# Locally, on PoCL:
#   KD_BIN=build/bin KD_DEVICE=cpu KD_HEAT_N=200 KD_HEAT_STEPS=5 KD_PUTLIKE_N=30 \
#   KD_PUTLIKE_REPEAT=2 KD_REFRESH_MATRICES=lap2d:200 KD_CUPY_FLAGS=--numpy \
#   OUT=/tmp/kd-issue22 bash bench/device/issue22.sh
set -uo pipefail
out=${OUT:-/tmp/kd-issue22}
mkdir -p "$out"
parts=${KD_ISSUE22_PARTS:-heat putlike refresh wire cupy}
n=${KD_HEAT_N:-1000}
steps=${KD_HEAT_STEPS:-50}
pn=${KD_PUTLIKE_N:-100}
prep=${KD_PUTLIKE_REPEAT:-5}
device=${KD_DEVICE:-gpu}
budget=${KD_BUDGET_S:-470}
# the benchmarks warm up before timing: daemons build programs on first use and start at once
spawn_args=${KD_SPAWN_ARGS---warm-programs none}
if [ -n "${KD_BIN:-}" ]; then
  bin=$KD_BIN
else
  # shellcheck source=bench/device/setup.sh
  source bench/device/setup.sh
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
  # where the state directories live (tmpfs makes their writes free): $TMPDIR moves them
  df -T "${TMPDIR:-/tmp}" | tail -1 | tee -a "$out/gpu.txt"
  kd_device_build || exit 1
  bin=build-device/bin
fi
bench=$bin/krylov-bench
echo "built at ${SECONDS}s"

# `timeout` for a part: at most $1 seconds, and never past the budget (0: skip the part).
limit() {
  local left=$((budget - SECONDS))
  [ $left -lt 10 ] && { echo 0; return; }
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
run() { # run NAME LIMIT_S OUTFILE COMMAND...: one part, its output teed, its status said
  local name=$1 t outfile=$3
  t=$(limit "$2")
  shift 3
  if [ "$t" = 0 ]; then echo "== $name: skipped, the budget is spent (${SECONDS}s)"; return; fi
  echo "== $name (timeout ${t}s, at ${SECONDS}s)"
  timeout "$t" "$@" > "$outfile" 2>&1
  local rc=$?
  grep -Ev '^(a|b|device|host|full|like) +[0-9]+ |^(loop|put) +|^(warn|info) ' "$outfile" | tail -25
  echo "== $name: exit $rc"
}
spawn=(--spawn "$bin/krylovd" --spawn-device "$device")
[ -n "$spawn_args" ] && spawn+=(--spawn-args "$spawn_args")

for part in $parts; do
  case $part in
  heat)
    # the service as deployed: started here, with a state directory
    dir=$(mktemp -d)
    # shellcheck disable=SC2086
    "$bin/krylovd" --listen 127.0.0.1:0 --port-file "$dir/port" --state-dir "$dir/state" \
      --device "$device" --log-level warn $spawn_args > "$out/krylovd-heat.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 1200); do [ -s "$dir/port" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    if [ -s "$dir/port" ]; then
      run heat 200 "$out/heat.txt" "$bench" heat --server "127.0.0.1:$(cat "$dir/port")" \
        --n "$n" --steps "$steps"
    else
      echo "== heat: krylovd did not start"; tail -5 "$out/krylovd-heat.log"
    fi
    kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
    rm -rf "$dir"
    run heat-nostate 150 "$out/heat-nostate.txt" "$bench" heat "${spawn[@]}" --n "$n" \
      --steps "$steps" ;;
  putlike)
    run putlike-nostate 100 "$out/putlike-nostate.txt" "$bench" putlike "${spawn[@]}" \
      --n "$pn" --repeat "$prep"
    run putlike-state 120 "$out/putlike-state.txt" "$bench" putlike "${spawn[@]}" --spawn-state \
      --n "$pn" --repeat "$prep" ;;
  refresh)
    # shellcheck disable=SC2086
    run refresh 120 "$out/refresh.txt" "$bench" refresh --device "$device" \
      --precond amg,ilu0,jacobi ${KD_REFRESH_MATRICES:-lap2d:1000 lap3d:100} ;;
  wire)
    if "$bench" --help 2>&1 | grep -qE '^ +wire '; then
      KD_TEST_DEVICE=$device run wire 90 "$out/wire.txt" "$bench" wire
    else
      echo "== wire: not in this tree's krylov-bench, skipped"
    fi ;;
  cupy)
    # shellcheck disable=SC2086
    run cupy 120 "$out/cupy_heat.txt" python3 bench/peers/cupy_heat.py --n "$n" --steps "$steps" \
      ${KD_CUPY_FLAGS:-} ;;
  esac
done
echo "done at ${SECONDS}s; results in $out"
exit 0
