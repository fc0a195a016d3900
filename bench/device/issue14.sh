#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: issue 14 in one call.
# KD_ISSUE14_PARTS picks among "peers tests solve methods" (default all):
#   peers    CuPy's gmres / minres / cgs / cg on lap3d:100, convdiff3d:100, shifted3d:100:0.5
#            (bench/peers/cupy_krylov.py: ms per inner iteration; to rtol 1e-8)      cupy.txt
#   tests    the kernel and end-to-end tests on the GPU                              ctest-gpu.log
#   solve    krylov-bench solve: ms per iteration of every method on the same matrices solve.txt
#   methods  krylov-bench methods: every method x preconditioner to 1e-8 on the real matrices
#            and the generated ones                                                  methods.txt
set -uo pipefail
out=${OUT:-/tmp/kd-issue14}
mkdir -p "$out"
parts=${KD_ISSUE14_PARTS:-peers tests solve methods}
step=${KD_STEP_TIMEOUT:-240}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
big="lap3d:100 convdiff3d:100 shifted3d:100:0.5"
if [[ $parts == *peers* ]]; then
  timeout "$step" python3 bench/peers/cupy_krylov.py --iterations 300 --rtol 1e-8 $big \
    2>&1 | tee "$out/cupy.txt"
fi
if [[ $parts == *tests* || $parts == *solve* || $parts == *methods* ]]; then
  [ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
fi
if [[ $parts == *tests* ]]; then
  (cd build-device && KD_TEST_DEVICE=gpu timeout "$step" ctest -L 'kernel|e2e' -LE python \
    -E test_solve_history --output-on-failure -j 4 > "$out/ctest-gpu.log" 2>&1
  tail -4 "$out/ctest-gpu.log"; grep -E "Failed|\*\*\*" "$out/ctest-gpu.log" | head)
fi
if [[ $parts == *solve* ]]; then
  timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 300 \
    --methods "${KD_SOLVE_METHODS:-cg,gmres,bicgstab,minres}" $big 2>&1 | grep -v "^info" \
    | tee "$out/solve.txt"
fi
if [[ $parts == *methods* ]]; then
  real=(ani4 bayer10 rajat01 adder_dcop_05 watt_2 494_bus dwt_878 can___24)
  mats=()
  for m in "${real[@]}"; do mats+=("tests/matrices/$m.mtx"); done
  timeout "$step" build-device/bin/krylov-bench methods --device gpu --repeat 3 \
    --methods "${KD_METHODS:-gmres,gmres+jacobi,bicgstab,bicgstab+jacobi}" "${mats[@]}" $big \
    2>&1 | grep -v "^info" | tee "$out/methods.txt"
fi
exit 0
