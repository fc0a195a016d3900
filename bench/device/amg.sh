#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 13's multigrid
# benchmark in one call. Builds krylovd (setup.sh) unless build-device/ is there, runs the AMG and
# SpGEMM tests on the GPU, then `krylov-bench amg --device gpu` (Jacobi-PCG and AMG-PCG to 1e-8,
# b = ones; setup apart) on the anchor table's five problems (bench/matgen/matgen_amg.c), and CuPy's
# cg (plain and Jacobi-scaled) on the same exported matrices. Files in $OUT: amg-ctest.log,
# amg-krylov.txt, amg-cupy.txt.
set -uo pipefail
out=${OUT:-/tmp/kd-amg}
mkdir -p "$out"
source bench/device/setup.sh
[ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
step=${KD_STEP_TIMEOUT:-200}
(cd build-device && KD_TEST_DEVICE=gpu timeout "$step" ctest -R "amg|spgemm|methods" \
  --output-on-failure > "$out/amg-ctest.log" 2>&1; tail -3 "$out/amg-ctest.log")
bench="timeout $step build-device/bin/krylov-bench amg --device gpu --repeat ${KD_BENCH_REPEAT:-3}"
{
  $bench lap3d:100 lap2d:1024 aniso2d:1024:0.001
  $bench --threshold 0.02 aniso2d:1024:0.001
  $bench --block-size 3 elast3d:40 kronlap3d:40
  $bench elast3d:40
} 2>&1 | grep -v "^info" | tee "$out/amg-krylov.txt"
mats=()
for s in lap3d:100 lap2d:1024 aniso2d:1024:0.001 elast3d:40 kronlap3d:40; do
  f=/tmp/kd-amg-${s//[:.]/_}.csr
  build-device/bin/krylov-bench export "$s" "$f" > /dev/null && mats+=("${s}=$f")
done
{
  timeout "$step" python3 bench/peers/cupy_cg_rtol.py --jacobi "${mats[@]}"
  timeout "$step" python3 bench/peers/cupy_cg_rtol.py "${mats[@]:0:2}"
} 2>&1 | tee "$out/amg-cupy.txt"
