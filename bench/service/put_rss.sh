#!/usr/bin/env bash
# What a matrix.put costs the server's host memory, against what it sent and what the matrix needs
# (issue 33): `bench/service/put_rss.sh [BIN [DEVICE]]` (default build/bin, auto). Starts one
# krylovd, and for each case writes a Matrix Market file, resets the daemon's peak RSS
# (/proc/PID/clear_refs, "5"), puts the file with `krylov put`, and prints the file's bytes, the CSR
# arrays' bytes (4 (rows + 1) + 12 nnz), the growth of peak RSS (VmHWM) over the RSS before, their
# ratio and the answer. Cases: headers declaring 2^20, 2^22, 2^24 and 2^31 - 2 rows with one entry
# (a request's bytes do not carry the rows it declares), and the bundled real matrices. The matrix
# is dropped after each put; a first put (not counted) builds the selection's programs. Linux only
# (clear_refs needs the daemon's owner).
set -uo pipefail
bin=${1:-build/bin}
device=${2:-auto}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/kd-put-rss.XXXXXX)
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work"' EXIT
"$bin/krylovd" --listen 127.0.0.1:0 --port-file "$work/port" --state-dir "$work/state" \
  --cache-dir "$work/cache" --device "$device" --warm-programs none --log-level warn &
pid=$!
for _ in $(seq 600); do [ -s "$work/port" ] && break; sleep 0.1; done
export KRYLOV_SERVER=127.0.0.1:$(cat "$work/port")
kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }
"$bin/krylov" status > /dev/null
# the first put builds the selection's programs (LLVM's memory on PoCL): not a put's cost
wid=$("$bin/krylov" put "$here/tests/matrices/watt_2.mtx" 2>/dev/null | grep -oE '[0-9a-f]{32}' | head -1)
"$bin/krylov" drop "$wid" > /dev/null
printf '%-28s %12s %12s %12s %7s  %s\n' case sent_bytes csr_bytes peak_growth ratio answer
one() { # name file rows nnz
  local before after csr out
  before=$(kb VmRSS)
  echo 5 > "/proc/$pid/clear_refs"
  out=$("$bin/krylov" put "$2" 2>&1 | tail -1)
  after=$(kb VmHWM)
  csr=$(( 4 * ($3 + 1) + 12 * $4 ))
  local grow=$(( (after - before) * 1024 ))
  printf '%-28s %12d %12d %12d %7.2f  %.90s\n' "$1" "$(stat -c %s "$2")" "$csr" "$grow" \
    "$(awk -v g="$grow" -v c="$csr" 'BEGIN { print g / c }')" "$out"
  id=$(echo "$out" | grep -oE '[0-9a-f]{32}' | head -1)
  [ -n "$id" ] && "$bin/krylov" drop "$id" > /dev/null
}
for k in 20 22 24; do
  n=$((1 << k))
  printf '%%%%MatrixMarket matrix coordinate real general\n%d %d 1\n1 1 1.0\n' $n $n > "$work/h$k.mtx"
  one "header 2^$k rows, 1 entry" "$work/h$k.mtx" $n 1
done
n=2147483646
printf '%%%%MatrixMarket matrix coordinate real general\n%d %d 1\n1 1 1.0\n' $n $n > "$work/h31.mtx"
one "header 2^31-2 rows, 1 entry" "$work/h31.mtx" $n 1
for f in bayer10 494_bus watt_2 dwt_878 rajat01; do
  m="$here/tests/matrices/$f.mtx"
  read -r rows _ nnz < <(grep -v '^%' "$m" | head -1)
  sym=$(head -1 "$m" | grep -qi symmetric && echo 2 || echo 1)
  one "$f" "$m" "$rows" $(( nnz * sym ))
done
kill -0 $pid && echo "krylovd alive after every case"
