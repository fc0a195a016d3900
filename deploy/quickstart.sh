#!/usr/bin/env bash
# `make run`: start krylovd on loopback TCP and on a Unix socket in a temporary folder, with the
# default device (a GPU if there is one, else PoCL on the CPU), upload a bundled real SPD matrix
# through the krylov CLI, multiply and solve with it, print the results, and stop the daemon. The
# CLI talks to it over the Unix socket, as a local client should (large arrays then go through
# shared memory); TCP serves anything else. krylovd listens within seconds and builds its OpenCL
# programs in the background (minutes on a fresh PoCL, docs/OPERATIONS.md "Start-up"); this
# waits for that, saying how far it is, so the demo's requests do not wait for a compiler.
set -euo pipefail

bin=${1:-build/bin}
matrix=${KRYLOV_DEMO_MATRIX:-tests/matrices/494_bus.mtx}
work=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/krylovd" --listen 127.0.0.1:0 --listen "unix:$work/krylovd.sock" --port-file "$work/port" \
  --state-dir "$work/state" \
  --device "${KRYLOV_DEVICE:-auto}" --log-level "${KRYLOV_LOG_LEVEL:-warn}" &
pid=$!
# The port file comes once it listens: after opening the device, seconds (not the compiler's time).
for _ in $(seq 1 600); do
  [ -s "$work/port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "krylovd exited during start-up" >&2; exit 1; }
  sleep 0.1
done
[ -s "$work/port" ] || { echo "krylovd did not start listening within 60 s" >&2; exit 1; }
export KRYLOV_SERVER="unix:$work/krylovd.sock"
krylov="$bin/krylov"

echo "== krylovd on $KRYLOV_SERVER and 127.0.0.1:$(cat "$work/port")"
# krylovd builds its OpenCL programs in the background; a request waits only for the ones it
# needs. KRYLOV_WARM_WAIT=SECONDS (0: no limit) waits for all of them first, with the progress.
if [ -n "${KRYLOV_WARM_WAIT:-}" ]; then
  "$krylov" status --wait-warm="$KRYLOV_WARM_WAIT"
else
  "$krylov" status
  echo "(each request below first builds the OpenCL programs it needs that the background"
  echo " warm-up has not built yet: with an empty kernel cache on a CPU, a minute or two)"
fi
echo
echo "== upload $matrix"
id=$("$krylov" put "$matrix" --name "$(basename "$matrix" .mtx)")
"$krylov" info "$id"
echo
echo "== y = A * ones"
"$krylov" spmv "$id" ones
echo
echo "== solve A x = ones with conjugate gradient, rtol 1e-8"
"$krylov" solve "$id" --rhs ones --method cg --rtol 1e-8 -o "$work/x.mtx"
echo
kill -TERM "$pid"
wait "$pid"
pid=
echo "== krylovd stopped"
