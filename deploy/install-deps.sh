#!/usr/bin/env bash
# Install what krylovd needs to build, test and run, from Debian's packages. Idempotent: packages
# already installed are left alone, and apt-get runs only when something is missing. Every
# dependency of the build and of the tests goes through this script.
#
#   deploy/install-deps.sh            build + test + run dependencies
#   KD_DEPS_DRY_RUN=1 deploy/...      print what would be installed
set -euo pipefail

packages=(
  # build
  cmake gcc make pkg-config
  # OpenCL: the ICD loader and headers; PoCL runs the kernels on the CPU where no GPU driver is
  ocl-icd-opencl-dev opencl-c-headers ocl-icd-libopencl1 pocl-opencl-icd clinfo
  # event loop, wire format, hashing, .mtx.gz, systemd notify
  libuv1-dev libmsgpack-dev libxxhash-dev zlib1g-dev libsystemd-dev
  # TLS and auth tokens (OpenSSL: libssl, libcrypto), and the openssl command that makes the TLS
  # tests' certificates
  libssl-dev openssl
  # reorder "metis" (optional at build: CMake finds it)
  libmetis-dev
  # tests: fuzzing and sanitizers (clang/libFuzzer), reference solutions and the Python client
  clang libclang-rt-dev python3 python3-numpy python3-scipy python3-msgpack
  # the Python client's local content id (put() asks before sending a matrix the server holds)
  python3-xxhash
  # the Python client's packaging (pip install client/python, offline) and `krylov solve --plot`
  python3-pip python3-venv python3-setuptools python3-wheel gnuplot-nox
  # tests: unit verification (systemd-analyze); kernels on a simulated device that reports races,
  # divergent barriers and out-of-bounds accesses (`make test-oclgrind`)
  systemd oclgrind
  # one matrix over several devices and hosts: krylovd ranks under mpirun (optional at build: CMake
  # finds MPI, -DKD_MPI=OFF builds without it)
  openmpi-bin libopenmpi-dev
  # method "direct": sparse LU and Cholesky factorisations on the host (KLU, UMFPACK, CHOLMOD;
  # optional at build: CMake finds them, -DKD_DIRECT=OFF builds without them)
  libsuitesparse-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ -n "${KD_DEPS_DRY_RUN:-}" ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then
    sudo=(sudo)
  else
    echo "install-deps: not root and no sudo; install these yourself: ${missing[*]}" >&2
    exit 1
  fi
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
