#!/usr/bin/env bash
# Run THERE (the GPU host), sourced from the repository root with .debs carried:
#   source bench/device/setup.sh && kd_device_build
# Unpacks the carried .debs into $KD_PREFIX, points pkg-config, CMake and the loader at it,
# registers NVIDIA's OpenCL driver with the ICD loader, and builds krylovd into build-device/.
KD_PREFIX=${KD_PREFIX:-/tmp/kdprefix}
mkdir -p "$KD_PREFIX"
for f in .debs/*.deb; do dpkg -x "$f" "$KD_PREFIX"; done
KD_LIBDIR=$KD_PREFIX/usr/lib/x86_64-linux-gnu
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
  cmake -S . -B build-device -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$KD_PREFIX/usr" \
    -DOpenCL_INCLUDE_DIR="$KD_PREFIX/usr/include" -DOpenCL_LIBRARY="$KD_LIBDIR/libOpenCL.so" \
    -DOPENSSL_ROOT_DIR="$KD_PREFIX/usr" \
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
