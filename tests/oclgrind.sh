#!/usr/bin/env bash
# `make test-oclgrind`: kernel tests on Oclgrind, an OpenCL device simulator that reports what a
# real device may silently get wrong: data races in local and global memory, a barrier that not
# every work-item of a work-group reaches, reads and writes past a buffer, invalid API use. A
# kernel that is right on one device only because of how that device runs a work-group (lockstep
# lanes, one vectorised loop) fails here by the spec (issue 32). Fails when a test fails or when
# Oclgrind reports anything.
#   tests/oclgrind.sh BUILD_DIR [TEST ...]   (default: the quick set below)
set -uo pipefail
build=${1:-build}
shift || true
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test_spmv)
command -v oclgrind > /dev/null || { echo "oclgrind is not installed (deploy/install-deps.sh)" >&2; exit 2; }
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
rc=0
for t in "${tests[@]}"; do
  bin=$build/bin/$t
  [ -x "$bin" ] || { echo "$t: no $bin (build it first)" >&2; rc=1; continue; }
  start=$(date +%s)
  # KD_TEST_DEVICE=auto: the tests take the simulator's one device
  KD_TEST_DEVICE=auto oclgrind --data-races --check-api --log "$logs/$t.log" "$bin" \
    > "$logs/$t.out" 2>&1
  status=$?
  took=$(( $(date +%s) - start ))
  if [ $status -ne 0 ]; then
    echo "$t: FAILED (exit $status) in $took s"; tail -20 "$logs/$t.out"; rc=1
  elif [ -s "$logs/$t.log" ]; then
    echo "$t: Oclgrind reported errors in $took s"; head -40 "$logs/$t.log"; rc=1
  else
    echo "$t: ok in $took s, nothing reported"
  fi
done
exit $rc
