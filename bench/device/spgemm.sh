#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried (bench/device/fetch-debs.sh):
#   bash bench/device/spgemm.sh
# Issue 13's SpGEMM benchmark in one call: build krylovd (setup.sh), run the SpGEMM tests on the GPU
# (ctest -R spgemm; skip with KD_BENCH_TESTS=0), export every matrix once with `krylov-bench export`
# (the binary CSR of bench/bench.h, so that the three contenders multiply the same matrices), then
# per case krylovd (`krylov-bench spgemm --device gpu ... --json`), cuSPARSE's SpGEMM called
# directly (bench/peers/cusparse_spgemm.cu: every algorithm with cudaMalloc, and the default one
# with a warm stream-ordered pool) and CuPy's `A @ B` (bench/peers/cupy_spgemm.py), and print one
# table last (bench/peers/spgemm_report.py): nnz(C), the three times, krylovd/cuSPARSE, the peaks,
# and the geomean ratio against issue 13's target (<= 1.0).
#
# Cases: one line each, "OP DTYPE MATRIX...": OP aa (C = A A), ata (A^T A, for rectangular A) or
# rap (R A P with R = P^T: P is what `krylov-bench spgemm --op rap --export DIR` writes,
# DIR/NAME.P.csr or DIR/NAME.P.mtx; if it wrote none, bench/peers/spgemm_prolongator.py makes one,
# and the table says so: then krylovd's P may differ, as nnz(C) and "ck" will show).
# Files in $OUT (7 of the 8 that come back): ctest-gpu.log, spgemm-log.txt (every program's own
# output, in order), krylov-spgemm.jsonl, cusparse.jsonl, cupy.jsonl, spgemm-report.json,
# spgemm-table.txt.
# Env: KD_BENCH_RUNS (timed products per contender and case, default 20), KD_SPGEMM_CASES (replace
# the cases below, same lines), KD_SPGEMM_ALGS (cuSPARSE's, default default,alg1,alg2,alg3),
# KD_SPGEMM_POOL=0 (skip the pooled cuSPARSE run), KD_STEP_TIMEOUT (seconds per program, default
# 150), KD_BENCH_TESTS=0 (skip ctest).
# Reuse (the AMG benchmark): KD_SPGEMM_SOURCE_ONLY=1 source bench/device/spgemm.sh defines the
# steps below (kd_spgemm_setup, kd_spgemm_case OP DTYPE MATRIX..., kd_spgemm_report) and runs
# nothing.
set -uo pipefail

kd_spgemm_cases_default="\
aa float64 lap3d:64 lap2d:1024 powerlaw:200000:7 rmat:16:4 circuit:300 \
tests/matrices/bayer10.mtx tests/matrices/rajat01.mtx tests/matrices/adder_dcop_05.mtx \
tests/matrices/ani4.mtx tests/matrices/watt_2.mtx
ata float64 tests/matrices/Groebner_id2003_aug.mtx tests/matrices/Franz6_id1959_aug.mtx
rap float64 lap3d:64 lap2d:1024
aa float32 lap3d:64 lap2d:1024
rap float32 lap3d:64 lap2d:1024"
# The set, sizes from this machine's SciPy (A -> A A): lap3d:64 1.81M -> 6.38M nonzeros;
# lap2d:1024 5.24M -> 13.6M (issue 13's two); powerlaw:200000:7 1.55M -> 11.6M (the issue's 200k-row
# power-law matrix, 1.6M -> 11.8M; :8 gives 1.75M -> 15.1M); rmat:16:4 0.25M -> 24.5M (35.7M
# products; the irregular set's rmat:20:16 would need 20.9G); circuit:300 0.49M -> 14.3M (the
# irregular set's circuit:1000 would need 1.6G products: its 16 supply nets square into dense
# blocks); real matrices 0.01M-0.1M (launch-bound: arrow is left out, its A A is dense, 2.2G).
# A^T A: Groebner 0.17M -> 4.49M (52.8M products), Franz6 48k -> 0.19M. R A P with
# spgemm_prolongator.py's P: lap3d:64 -> 32768^2, 1.01M; lap2d:1024 -> 262144^2, 3.40M.

kd_name() { # kd_bench_matrix_name: "tests/matrices/arrow.mtx" -> arrow, "lap2d:1024" -> lap2d_1024
  local b=${1##*/}
  b=${b%%.mtx*}
  echo "${b//[: ]/_}"
}

# kd_run FILE CMD...: CMD under the step's time limit, its stdout appended to FILE and its stderr
# to the log; a failure is said in the log and on the terminal.
kd_run() {
  local o=$1
  shift
  timeout "$step" "$@" >> "$o" 2>> "$log" < /dev/null \
    || echo "${1##*/} ${*:2:4}: exit status $?" | tee -a "$log"
}

kd_spgemm_setup() {
  source bench/device/setup.sh
  out=${OUT:-/tmp/kd-spgemm}
  mkdir -p "$out"
  runs=${KD_BENCH_RUNS:-20}
  algs=${KD_SPGEMM_ALGS:-default,alg1,alg2,alg3}
  step=${KD_STEP_TIMEOUT:-150}
  log=$out/spgemm-log.txt
  dump=/tmp/kd-spgemm-mats
  jdir=/tmp/kd-spgemm-json
  rm -rf "$dump" "$jdir"
  mkdir -p "$dump" "$jdir"
  : > "$log"
  : > "$out/krylov-spgemm.jsonl"
  : > "$out/cusparse.jsonl"
  : > "$out/cupy.jsonl"
  notes=()
  kd_device_build || return 1

  command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
  peer=build-device/cusparse_spgemm
  if ! nvcc -O3 -arch=sm_90 -o $peer bench/peers/cusparse_spgemm.cu -lcusparse 2>/tmp/nvcc.log; then
    # cusparse from the Python wheel when the toolkit lacks it
    local nv
    nv=$(python3 -c 'import nvidia.cusparse as m, os; print(os.path.dirname(m.__file__))' 2>/dev/null)
    ln -sf "$nv"/lib/libcusparse.so.* /tmp/libcusparse.so 2>/dev/null
    nvcc -O3 -arch=sm_90 -I"$nv/include" -L/tmp -Xlinker -rpath="$nv/lib" -o $peer \
      bench/peers/cusparse_spgemm.cu -lcusparse 2>>/tmp/nvcc.log \
      || { tail -20 /tmp/nvcc.log; peer=; notes+=("the cuSPARSE peer did not build: /tmp/nvcc.log"); }
  fi
  gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader)
  echo "$gpu" | tee -a "$log"
  notes+=("GPU: $gpu; $runs timed products per contender and case (median; allocations inside)")

  have_spgemm=0
  if build-device/bin/krylov-bench --help 2>&1 | grep '^  spgemm ' > /dev/null; then
    have_spgemm=1
  else
    notes+=("krylov-bench has no spgemm subcommand in this tree: krylovd's column is empty")
  fi
  if [ "${KD_BENCH_TESTS:-1}" = 1 ]; then
    (cd build-device && KD_TEST_DEVICE=gpu timeout "$step" ctest -R spgemm --output-on-failure \
      -j 4 > "$out/ctest-gpu.log" 2>&1; tail -4 "$out/ctest-gpu.log")
  fi
}

# kd_spgemm_case OP DTYPE MATRIX...: export what is missing, then krylovd, cuSPARSE, CuPy.
kd_spgemm_case() {
  local op=$1 dt=$2 s f n
  shift 2
  local files=()
  for s in "$@"; do
    f=$dump/$(kd_name "$s").csr
    [ -f "$f" ] || build-device/bin/krylov-bench export "$s" "$f" >> "$log" 2>&1 \
      || { echo "export $s failed" | tee -a "$log"; continue; }
    files+=("$f")
  done
  echo "== $op $dt: $*" >> "$log"
  if [ "$have_spgemm" = 1 ]; then
    local j=$jdir/$op-$dt-$RANDOM.jsonl exp=()
    [ "$op" = rap ] && exp=(--export "$dump")
    kd_run "$log" build-device/bin/krylov-bench spgemm --op "$op" --dtype "$dt" --device gpu \
      --runs "$runs" --json "$j" ${exp[@]+"${exp[@]}"} "$@"
    cat "$j" >> "$out/krylov-spgemm.jsonl" 2>/dev/null
  fi
  if [ "$op" = rap ]; then
    for s in "$@"; do
      n=$(kd_name "$s")
      if [ ! -f "$dump/$n.P.csr" ] && [ ! -f "$dump/$n.P.mtx" ]; then
        kd_run "$log" python3 bench/peers/spgemm_prolongator.py "$s" "$dump/$n.csr" "$dump/$n.P.csr"
        notes+=("$n rap: krylov-bench exported no P; the peers used spgemm_prolongator.py's")
      fi
    done
  fi
  [ ${#files[@]} -gt 0 ] || return 0
  if [ -n "$peer" ]; then
    kd_run "$out/cusparse.jsonl" $peer --op "$op" --dtype "$dt" --runs "$runs" --algs "$algs" \
      "${files[@]}"
    [ "${KD_SPGEMM_POOL:-1}" = 1 ] && kd_run "$out/cusparse.jsonl" $peer --op "$op" --dtype "$dt" \
      --runs "$runs" --algs default --pool "${files[@]}"
  fi
  kd_run "$out/cupy.jsonl" python3 bench/peers/cupy_spgemm.py --op "$op" --dtype "$dt" \
    --runs "$runs" "${files[@]}"
}

kd_spgemm_report() {
  local args=()
  local n
  for n in ${notes[@]+"${notes[@]}"}; do args+=(--note "$n"); done
  python3 bench/peers/spgemm_report.py "$out/krylov-spgemm.jsonl" "$out/cusparse.jsonl" \
    "$out/cupy.jsonl" --json "$out/spgemm-report.json" ${args[@]+"${args[@]}"} \
    | tee "$out/spgemm-table.txt"
}

if [ "${KD_SPGEMM_SOURCE_ONLY:-0}" != 1 ]; then
  kd_spgemm_setup || exit 1
  mapfile -t kd_cases <<< "${KD_SPGEMM_CASES:-$kd_spgemm_cases_default}"
  for line in "${kd_cases[@]}"; do
    [ -n "$line" ] && kd_spgemm_case $line < /dev/null
  done
  kd_spgemm_report
fi
