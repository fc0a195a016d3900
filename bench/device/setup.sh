#!/usr/bin/env bash
# Run THERE (the GPU host), sourced from the repository root with .debs carried:
#   source bench/device/setup.sh && kd_device_build
# Unpacks the carried .debs into $KD_PREFIX, points pkg-config, CMake and the loader at it,
# registers NVIDIA's OpenCL driver with the ICD loader, and builds krylovd into build-device/.
KD_PREFIX=${KD_PREFIX:-/tmp/kdprefix}
mkdir -p "$KD_PREFIX"
for f in .debs/*.deb; do dpkg -x "$f" "$KD_PREFIX"; done
KD_LIBDIR=$KD_PREFIX/usr/lib/x86_64-linux-gnu
# BLAS and LAPACK (CHOLMOD's and UMFPACK's) lie under blas/ and lapack/ behind Debian's
# alternatives, which dpkg -x does not make: the loader and the linker find them through these.
for l in blas/libblas.so.3 lapack/liblapack.so.3; do
  if [ -e "$KD_LIBDIR/$l" ]; then ln -sf "$l" "$KD_LIBDIR/${l#*/}"; fi
done
# The .pc files say prefix=/usr: make them point into the prefix.
for pc in "$KD_LIBDIR"/pkgconfig/*.pc "$KD_PREFIX"/usr/share/pkgconfig/*.pc; do
  [ -f "$pc" ] && sed -i "s|^prefix=/usr\$|prefix=$KD_PREFIX/usr|; s|=/usr/include|=$KD_PREFIX/usr/include|; s|=/usr/lib|=$KD_PREFIX/usr/lib|" "$pc"
done
export PKG_CONFIG_PATH=$KD_LIBDIR/pkgconfig:$KD_PREFIX/usr/share/pkgconfig
export LD_LIBRARY_PATH=$KD_LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PATH=$PATH:$KD_PREFIX/usr/bin
command -v pkg-config >/dev/null || ln -sf "$KD_PREFIX/usr/bin/pkgconf" "$KD_PREFIX/usr/bin/pkg-config"

# NVIDIA's OpenCL driver, registered next to whatever the image registers (it registers only PoCL).
nvcl=$(ldconfig -p 2>/dev/null | awk '/libnvidia-opencl.so.1 /{print $NF; exit}')
[ -n "$nvcl" ] || nvcl=/usr/lib/libnvidia-opencl.so.1
mkdir -p "$KD_PREFIX/vendors"
cp /etc/OpenCL/vendors/*.icd "$KD_PREFIX/vendors/" 2>/dev/null || true
echo "$nvcl" > "$KD_PREFIX/vendors/nvidia.icd"
export OCL_ICD_VENDORS=$KD_PREFIX/vendors

kd_device_build() {
  # method "direct" needs SuiteSparse (fetch-debs.sh carries it); .debs fetched before it was
  # added build without it rather than not at all (the caller's -DKD_DIRECT wins)
  local direct=()
  [ -e "$KD_PREFIX/usr/include/suitesparse/klu.h" ] || [ -e /usr/include/suitesparse/klu.h ] ||
    direct=(-DKD_DIRECT=OFF)
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$KD_PREFIX/usr" \
    -DOpenCL_INCLUDE_DIR="$KD_PREFIX/usr/include" -DOpenCL_LIBRARY="$KD_LIBDIR/libOpenCL.so" \
    -DOPENSSL_ROOT_DIR="$KD_PREFIX/usr" "${direct[@]}" \
    "$@" > build-device.log 2>&1 && cmake --build build-device -j 16 >> build-device.log 2>&1 \
    || { tail -40 build-device.log; return 1; }
}

# Open MPI from the carried .debs (relocated: OPAL_PREFIX): sets mpirun and KD_MPI_FLAGS, the
# CMake options of a build with MPI (no compiler wrapper: Debian's mpicc is an alternatives link
# that dpkg -x does not make). Then: kd_device_build "${KD_MPI_FLAGS[@]}".
kd_mpi_setup() {
  export OPAL_PREFIX=${OPAL_PREFIX:-$KD_PREFIX/usr}
  local ompi=$OPAL_PREFIX/lib/x86_64-linux-gnu/openmpi
  mpirun=$OPAL_PREFIX/bin/mpirun.openmpi
  [ -x "$mpirun" ] || mpirun=$(command -v mpirun) || { echo "no mpirun" >&2; return 1; }
  KD_MPI_FLAGS=(-DKD_MPI=ON -DMPI_SKIP_COMPILER_WRAPPER=ON -DMPI_C_HEADER_DIR="$ompi/include"
    -DMPI_C_LIB_NAMES=mpi -DMPI_mpi_LIBRARY="$ompi/lib/libmpi.so")
}

# The whole build for the suite: MPI, and the Python tests where this host's python3 imports
# numpy, scipy and msgpack (kd_py_args holds the CMake option, empty otherwise).
kd_suite_build() {
  kd_mpi_setup || return 1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  kd_py_args=()
  python3 -c "import numpy, scipy, msgpack" 2>/dev/null && kd_py_args=(-DKD_PYTHON="$(command -v python3)")
  kd_device_build "${KD_MPI_FLAGS[@]}" -DMPIEXEC_EXECUTABLE="$mpirun" "${kd_py_args[@]}"
}

# kd_suite OUT SECONDS: the kernel + end-to-end suite on the GPU (the Python tests where built),
# its log in OUT/ctest-gpu.log, the failures printed. test_solve_history pins PoCL's exact
# histories on the CI machine's CPU (its header): not a GPU's rounding.
kd_suite() {
  local skip='python'
  [ ${#kd_py_args[@]} -gt 0 ] && skip='soak'
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  (cd build-device && KD_TEST_DEVICE=gpu timeout "$2" ctest -L 'kernel|e2e' -LE "$skip" \
    -E test_solve_history --output-on-failure -j 8 > "$1/ctest-gpu.log" 2>&1)
  tail -4 "$1/ctest-gpu.log"
  grep -E "\*\*\*Failed|Timeout|Not Run" "$1/ctest-gpu.log" | head -20
}

