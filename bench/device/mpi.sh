#!/usr/bin/env bash
# Run THERE (the GPU host) with .debs carried (bench/device/fetch-debs.sh fetches Open MPI's with
# the rest): build with MPI from the unpacked prefix, then krylov-dist-bench
# (bench/dist/dist_bench.c) with 1, 2 and 4 ranks sharing the node's GPUs (--device local: local
# rank i takes GPU i modulo their count), on lap3d with >= 20M nonzeros and on one irregular matrix
# (SpMV only: it is not SPD). One command for the several-GPU run too: it spreads over whatever GPUs
# the node has.
#
#   KD_DIST_RANKS      rank counts (default "1 2 4")
#   KD_DIST_MATRICES   krylov-dist-bench --matrix specs (default "lap3d:150 powerlaw:2000000")
#   KD_DIST_DTYPE      f64 (default) or f32;  KD_DIST_ITERATIONS  CG iterations (default 200)
#   OPAL_PREFIX        Open MPI's relocated prefix (default: the carried .debs' $KD_PREFIX/usr)
set -uo pipefail
source bench/device/setup.sh
out=${OUT:-/tmp/kd-mpi}
mkdir -p "$out"
kd_mpi_setup && kd_device_build "${KD_MPI_FLAGS[@]}" || exit 1
grep -q "MPI ranks ON" build-device.log || { echo "mpi.sh: built without MPI" >&2; exit 1; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader > "$out/gpus.txt" 2>&1
for matrix in ${KD_DIST_MATRICES:-lap3d:150 powerlaw:2000000}; do
  for np in ${KD_DIST_RANKS:-1 2 4}; do
    log="$out/dist-${matrix//:/-}-np$np.txt"
    "$mpirun" --allow-run-as-root --oversubscribe -np "$np" -x OPAL_PREFIX -x LD_LIBRARY_PATH \
      -x OCL_ICD_VENDORS -x PATH --mca btl self,vader \
      build-device/bin/krylov-dist-bench --device local --matrix "$matrix" \
      --dtype "${KD_DIST_DTYPE:-f64}" --iterations "${KD_DIST_ITERATIONS:-200}" --spmv 100 \
      > "$log" 2>&1
    echo "== $matrix, $np ranks"
    grep -vE "^info" "$log" | grep -E "ranks=|spmv:|cg:|single|halo|reductions|MPI|gather|ghosts\+|krylov-dist-bench:"
  done
done
