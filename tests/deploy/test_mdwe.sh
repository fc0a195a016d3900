#!/usr/bin/env bash
# krylovd works under the memory-deny-write-execute policy that the unit's
# MemoryDenyWriteExecute=yes applies: the daemon runs under mdwe_exec (prctl PR_SET_MDWE), compiles
# its kernels afresh (no PoCL or NVIDIA kernel cache), and answers an upload and a CG solve correctly.
# Usage: test_mdwe.sh BIN_DIR MATRICES_DIR
set -euo pipefail
bin=$1
matrices=$2
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
export POCL_KERNEL_CACHE=0 CUDA_CACHE_DISABLE=1
"$bin/mdwe_exec" "$bin/krylovd" --listen 127.0.0.1:0 --port-file "$work/port" \
  --device "${KD_TEST_DEVICE:-auto}" --log-level warn --warm-programs none &
pid=$!
for _ in $(seq 1 600); do [ -s "$work/port" ] && break; kill -0 $pid || exit 1; sleep 0.1; done
export KRYLOV_SERVER=127.0.0.1:$(cat "$work/port")
id=$("$bin/krylov" put "$matrices/494_bus.mtx" 2>/dev/null)
out=$("$bin/krylov" solve "$id" --rhs ones --rtol 1e-8)
echo "$out"
grep -q '^status *converged' <<< "$out" || { echo "FAIL: solve under MDWE did not converge"; exit 1; }
kill -TERM $pid
wait $pid
pid=
echo "krylovd under memory-deny-write-execute: ok"
