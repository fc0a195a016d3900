#!/usr/bin/env bash
# Run THERE (the GPU host) from the repository root with .debs carried: where GMRES's iteration
# time goes (per-kernel device times) and the build options / group counts that change it, with
# CuPy's gmres on the same matrix in the same run. Output in $OUT/gmres-tune.txt.
set -uo pipefail
out=${OUT:-/tmp/kd-gmres}
mkdir -p "$out"
step=${KD_STEP_TIMEOUT:-120}
source bench/device/setup.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
[ -x build-device/bin/krylov-bench ] || kd_device_build || exit 1
m=${KD_GMRES_MATRIX:-lap3d:100}
{
  timeout "$step" python3 bench/peers/cupy_krylov.py --iterations 300 --methods gmres "$m"
  kb() { timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 300 \
    --methods gmres "$@" "$m" 2>&1 | grep -v "^info"; }
  echo "## default (profile)"; kb --profile 1
  echo "## groups";            kb --groups 132,264,1056
  echo "## pass A reads w once for 32 basis vectors"; kb --kernel-options -DKD_GMRES_CHUNK=32 --profile 1
  echo "## pass B reads V twice";                     kb --kernel-options -DKD_GMRES_NO_FUSE --profile 1
  echo "## ellpack_r, SpMV not fused";                kb --format ellpack_r --profile 1
  echo "## restart 10, 60";                           kb --restart 10; kb --restart 60
  echo "## minres, bicgstab, cg (profile)"
  timeout "$step" build-device/bin/krylov-bench solve --device gpu --iterations 300 \
    --methods cg,minres,bicgstab --profile 1 lap3d:100 2>&1 | grep -v "^info"
} 2>&1 | tee "$out/gmres-tune.txt"
