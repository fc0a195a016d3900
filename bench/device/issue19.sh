#!/usr/bin/env bash
# Issue 19 on a host with several GPUs (run THERE with .debs and .baseline carried; one rank per
# GPU, Open MPI over shared memory, no NCCL, NVLink multicast left alone):
#   strong scaling  lap3d 250^3 (109M nonzeros) and a power-law matrix, 1 vs 2 GPUs, SpMV and
#                   CG / cg1 per iteration; the tree before this change (.baseline) beside it
#   weak scaling    lap3d 200^3 on one GPU, 252^3 (twice the rows) on two
#   over budget     a matrix over --device-memory on one rank, served spread on two (krylovd
#                   under mpirun, the `krylov` CLI as client)
# Output under $OUT (default /tmp/kd-issue19). KD_I19_QUICK=1: small matrices (a dry run).
# KD_I19_PARTS: which parts (default "strong baseline powerlaw weak budget"); KD_I19_RANKS: rank
# counts (default "1 2"; "1 2 4" on four GPUs; weak scaling takes 200^3 rows per GPU).
set -uo pipefail
source bench/device/setup.sh
out=${OUT:-/tmp/kd-issue19}
mkdir -p "$out"
kd_mpi_setup && kd_device_build "${KD_MPI_FLAGS[@]}" || exit 1
if [ -d .baseline ]; then
  (cd .baseline && kd_device_build "${KD_MPI_FLAGS[@]}") || echo "issue19.sh: baseline build failed"
fi
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/gpus.txt" 2>&1
nvidia-smi topo -m > "$out/topo.txt" 2>&1
run() { # run NP NAME BIN ARGS...: every run's whole output into $out/runs.txt (few files
  # come back from the device), a summary on stdout
  local np=$1 name=$2 log=/tmp/kd-i19-run.txt; shift 2
  "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np "$np" -x OPAL_PREFIX \
    -x LD_LIBRARY_PATH -x OCL_ICD_VENDORS -x PATH --mca btl self,vader "$@" > "$log" 2>&1
  { echo "== $name"; grep -v "^info" "$log"; } >> "$out/runs.txt"
  echo "== $name"
  grep -vE "^info" "$log" | grep -E "ranks=|spmv:|cg1?:|single|alone|halo|round trip|reductions|device time|MPI|gather|ghosts\+|krylov-dist-bench:" | head -40
}
parts=" ${KD_I19_PARTS:-strong baseline powerlaw weak budget} "
has() { [[ $parts == *" $1 "* ]]; }
big=250 weak1=200 weak2=252 pl=4000000 it=200
if [ "${KD_I19_QUICK:-0}" = 1 ]; then big=60 weak1=50 weak2=63 pl=200000 it=50; fi
ranks=${KD_I19_RANKS:-1 2}
for np in $ranks; do
  has strong && run $np strong-lap3d$big-np$np build-device/bin/krylov-dist-bench --device local \
    --matrix lap3d:$big --iterations $it --spmv 100 --methods cg,cg1
  has baseline && [ -x .baseline/build-device/bin/krylov-dist-bench ] &&
    run $np baseline-lap3d$big-np$np .baseline/build-device/bin/krylov-dist-bench \
      --device local --matrix lap3d:$big --iterations $it --spmv 100
  [ $np -le 2 ] && has powerlaw && run $np strong-powerlaw$pl-np$np build-device/bin/krylov-dist-bench --device local \
    --matrix powerlaw:$pl --spmv 100
done
# the power-law halo (most of x) through Open MPI's single-copy shared memory (CMA), if allowed
has powerlaw && OMPI_MCA_btl_vader_single_copy_mechanism=cma run 2 strong-powerlaw$pl-np2-cma \
  build-device/bin/krylov-dist-bench --device local --matrix powerlaw:$pl --spmv 100
declare -A weak=([1]=$weak1 [2]=$weak2 [4]=317 [8]=400)  # n^3 ~ 200^3 x ranks
[ "${KD_I19_QUICK:-0}" = 1 ] && weak=([1]=50 [2]=63 [4]=79 [8]=100)
for np in $ranks; do
  has weak && run $np weak-lap3d${weak[$np]}-np$np build-device/bin/krylov-dist-bench \
    --device local --matrix lap3d:${weak[$np]} --iterations $it --spmv 100 --methods cg,cg1
done

# Over budget: lap3d 100^3 (1M rows, 6.9M nonzeros, about 85 MB on the device) against a 64 MB
# --device-memory: refused on one rank, spread over two and solved.
has budget || exit 0
n=${KD_I19_BUDGET_N:-100}
[ "${KD_I19_QUICK:-0}" = 1 ] && n=40
python3 bench/device/lap3d_mtx.py "$n" > /tmp/lap3d.mtx
for np in 1 2; do
  st=$(mktemp -d) port=$((7400 + np))
  "$mpirun" --allow-run-as-root --oversubscribe --bind-to none -np $np -x OPAL_PREFIX \
    -x LD_LIBRARY_PATH -x OCL_ICD_VENDORS -x PATH --mca btl self,vader \
    build-device/bin/krylovd --listen 127.0.0.1:$port --state-dir "$st" --device gpu \
    --device-memory 64M --distribute-nnz 1000000 > "/tmp/kd-i19-server-np$np.txt" 2>&1 &
  job=$!
  for i in $(seq 600); do build-device/bin/krylov --server 127.0.0.1:$port status >/dev/null 2>&1 && break; sleep 0.2; done
  {
    echo "== $np rank(s), --device-memory 64M, lap3d $n^3"
    cli="build-device/bin/krylov --server 127.0.0.1:$port"
    id=$($cli put /tmp/lap3d.mtx 2>&1 | tail -1)
    echo "put: $id"
    $cli info "$id" 2>&1 | head -30
    $cli solve "$id" --rhs ones --method cg1 --rtol 1e-8 2>&1 | tail -8
    $cli solve "$id" --rhs ones --method cg --rtol 1e-8 2>&1 | tail -8
    $cli status 2>&1 | grep -iE "device|memory|ranks" | head -8
  } > "/tmp/kd-i19-budget.txt" 2>&1
  cat /tmp/kd-i19-budget.txt | tee -a "$out/budget.txt"
  grep -E "spread|dist" "/tmp/kd-i19-server-np$np.txt" >> "$out/budget.txt"
  kill $job; wait $job 2>/dev/null
  rm -rf "$st"
done
