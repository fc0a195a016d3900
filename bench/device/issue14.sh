#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 14 in one call.
# KD_ISSUE14_PARTS picks among "peers tests solve methods", run in the order given (default all):
#   peers    CuPy's gmres / minres / cgs / cg on lap3d:100, convdiff3d:100, shifted3d:100:0.5
#            (bench/peers/cupy_krylov.py: ms per inner iteration; to rtol 1e-8)      cupy.txt
#   tests    the kernel and end-to-end tests on the GPU                              ctest-gpu.log
#   solve    krylov-bench solve: ms per iteration of every method on the same matrices solve.txt
#   methods  krylov-bench methods: every method x preconditioner to 1e-8 on the real matrices
#            (repeat 3), then the generated ones (repeat 1, maxiter 5000)   methods.txt, methods-big.txt
set -uo pipefail
out=${OUT:-/tmp/kd-issue14}
mkdir -p "$out"
parts=${KD_ISSUE14_PARTS:-peers tests solve methods}
step=${KD_STEP_TIMEOUT:-240}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
big="lap3d:100 convdiff3d:100 shifted3d:100:0.5"
kd_part_peers() {
  timeout "$step" python3 bench/peers/cupy_krylov.py --iterations 300 --rtol 1e-8 $big \
    2>&1 | tee "$out/cupy.txt"
}
kd_part_tests() {
  (cd build-device && KD_TEST_DEVICE=gpu timeout "$step" ctest -L 'kernel|e2e' -LE python \
    -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
  tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head)
}
kd_part_solve() {
  timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 300 \
    --methods "${KD_SOLVE_METHODS:-cg,gmres,bicgstab,minres}" $big 2>&1 | grep -v "^info" \
    | tee "$out/solve.txt"
}
kd_part_methods() {
  local real=(ani4 bayer10 rajat01 adder_dcop_05 watt_2 494_bus dwt_878 can___24) mats=()
  for m in "${real[@]}"; do mats+=("tests/matrices/$m.mtx"); done
  local list=${KD_METHODS:-gmres,gmres+jacobi,gmres+ilu0,gmres+ilu0@sweeps=0,gmres+block_jacobi,bicgstab,bicgstab+jacobi,bicgstab+ilu0,minres,auto}
  timeout "$step" build-device/bin/krylov-bench methods --device gpu --repeat 3 \
    --methods "$list" "${mats[@]}" 2>&1 | grep -v "^info" | tee "$out/methods.txt"
  timeout "$step" build-device/bin/krylov-bench methods --device gpu --repeat 1 --maxiter 5000 \
    --methods "$list" $big 2>&1 | grep -v "^info" | tee "$out/methods-big.txt"
}
for part in $parts; do
  case $part in
  tests | solve | methods) [ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1 ;;
  esac
  "kd_part_$part"
done
exit 0
