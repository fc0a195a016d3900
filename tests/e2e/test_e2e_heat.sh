#!/usr/bin/env bash
# issue 22's benchmarks must not rot: `krylov-bench heat` and `krylov-bench putlike` against a real
# krylovd they start (--spawn), small. heat: the loop with put(like=) and the loop re-putting every
# step must give the same final u (1e-10 relative) and a last step whose true residual, computed on
# the host, is within 10 rtol; and the same check must fail when the re-put loop's last matrix is
# perturbed by 1e-6 (so it can catch a wrong answer). putlike, with and without a state directory:
# the server says each put's time_ms, a put with like sends 8 bytes a nonzero plus under 1%, and
# its matrix is the one a full put of the same values makes (same id, same SpMV).
# Usage: test_e2e_heat.sh BIN_DIR
set -uo pipefail
bin=$1
spawn=(--spawn "$bin/krylovd" --spawn-device "${KD_TEST_DEVICE:-auto}"
       --spawn-args '--warm-programs none')
fail() { echo "FAIL: $*"; exit 1; }

out=$("$bin/krylov-bench" heat --n 60 --steps 4 "${spawn[@]}" 2>&1)
rc=$?
echo "$out"
[ $rc = 0 ] || fail "heat exited $rc"
grep -q '^check: final u of (a) and (b) differ by .*(<= 1e-10: ok).*(<= 1e-07: ok)$' <<< "$out" \
  || fail "heat's check line"
# every step's put has a server time, and the like loop's steps 1.. sent the values alone
awk '$1 == "a" || $1 == "b" { if ($5 < 0) bad = 1 } $1 == "a" && $2 > 0 { like++ }
     END { exit bad || like != 3 }' <<< "$out" || fail "heat: a put without time_ms, or steps missing"

out=$("$bin/krylov-bench" heat --n 40 --steps 2 --perturb 1e-6 "${spawn[@]}" 2>&1)
rc=$?
[ $rc = 1 ] || { echo "$out"; fail "heat with a perturbed loop (b) exited $rc, not 1"; }
grep -q '(<= 1e-10: FAILED)' <<< "$out" || { echo "$out"; fail "the perturbation went unseen"; }
echo "heat --perturb 1e-6: the check failed, as it must"

for state in "" --spawn-state; do
  out=$("$bin/krylov-bench" putlike --n 16 --repeat 2 $state "${spawn[@]}" 2>&1)
  rc=$?
  echo "$out"
  [ $rc = 0 ] || fail "putlike $state exited $rc"
  grep -q '^check: .*(already held: ok).*(<= 1e-12: ok)$' <<< "$out" || fail "putlike's check"
  grep -q '^ratio like / full, server time: [0-9]' <<< "$out" || fail "putlike: no server times"
  awk '$1 == "like" && $2 ~ /^[0-9]+$/ { n++; if ($6 < 8 || $6 > 8.01) bad = 1 }
       END { exit bad || n != 2 }' <<< "$out" || fail "putlike: a put with like sent more than values"
done
echo "krylov-bench heat and putlike: ok"
