#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issues 16 (item 3) and 32,
# the start-up and the first request. Starts krylovd with its caches empty, then warm, and reports
# the listen time (exec to the port file, written right before READY=1; programs are built in the
# background after it), the time until the warm-up is done,
# the warm-up's report (server.status programs) and the first against the tenth CG solve on
# lap2d 512^2 (targets: first <= tenth + 5%; warm restart READY <= 1.5 s). With the Python client
# (msgpack importable) through bench/service/startup.py, which also runs a coverage pass (every
# format, method x preconditioner, both types, a product) and prints programs.built_on_request (must
# be 0) and, first, the same starts with one builder thread (--warm-threads 1) against the default;
# without it, through the C CLI (each call a process: compare first and tenth only).
# Output: $OUT/startup.json or $OUT/startup-cli.txt, and the daemons' logs.
set -uo pipefail
out=${OUT:-/tmp/kd-startup}
mkdir -p "$out"
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -x build-device/bin/krylovd ] || kd_device_build || exit 1
bin=build-device/bin
# NVIDIA's compute cache (~/.nv/ComputeCache, PTX to SASS) stays on, as in production.
if python3 -c "import msgpack, numpy, scipy" 2>/dev/null; then
  # one builder thread against the default (one per CPU, at most 8): does NVIDIA's compiler gain?
  PYTHONPATH=client/python timeout 300 python3 bench/service/startup.py --bin "$bin" --device gpu \
    --n 512 --warm-threads 1 > "$out/startup-1thread.json" 2> "$out/startup-1thread.err"
  PYTHONPATH=client/python timeout 500 python3 bench/service/startup.py --bin "$bin" \
    --device gpu --n 512 --coverage --keep "$out/state" > "$out/startup.json" 2> "$out/startup.err"
  grep -E '"(start|listen_s|warm_s|first_solve_ms|tenth_solve_ms|median_solve_ms|warm_ms)"' \
    "$out/startup-1thread.json"
  cat "$out/startup.json"; tail -3 "$out/startup.err"
  exit 0
fi
state=$out/state
rm -rf "$state"
python3 - > "$out/lap2d.mtx" <<'EOF'
n = 512
N = n * n
rows = []
for i in range(n):
    for j in range(n):
        k = i * n + j
        rows.append((k, k, 4.0))
        for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)):
            if 0 <= i + di < n and 0 <= j + dj < n:
                rows.append((k, (i + di) * n + j + dj, -1.0))
print("%%MatrixMarket matrix coordinate real general")
print(N, N, len(rows))
for r, c, v in rows:
    print(r + 1, c + 1, v)
EOF
for which in cold warm; do
  rm -f "$out/port"
  t0=$(date +%s%N)
  "$bin/krylovd" --listen 127.0.0.1:0 \
    --port-file "$out/port" --state-dir "$state" --device gpu --log-level info \
    2> "$out/krylovd-$which.log" &
  pid=$!
  while [ ! -s "$out/port" ]; do kill -0 $pid || exit 1; sleep 0.002; done
  t1=$(date +%s%N)
  export KRYLOV_SERVER=127.0.0.1:$(cat "$out/port")
  id=$("$bin/krylov" put "$out/lap2d.mtx")
  { echo "$which: READY after $(( (t1 - t0) / 1000000 )) ms"
    grep "programs warmed" "$out/krylovd-$which.log"
    for i in $(seq 1 10); do
      s0=$(date +%s%N); "$bin/krylov" solve "$id" --rhs ones --rtol 1e-8 > /dev/null; s1=$(date +%s%N)
      echo "solve $i: $(( (s1 - s0) / 1000 )) us (CLI process included)"
    done
    "$bin/krylov" status | grep -A10 programs; } 2>&1 | tee -a "$out/startup-cli.txt"
  kill $pid; wait $pid
done
exit 0
