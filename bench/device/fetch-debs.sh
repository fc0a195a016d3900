#!/usr/bin/env bash
# Run HERE (the Debian development machine), from the repository root: download the .deb files
# krylovd needs to build on the GPU host into .debs/ (git-ignored), which a `device` call carries.
# Nothing can be installed on the GPU host; bench/device/setup.sh unpacks these into a prefix there.
set -euo pipefail
mkdir -p .debs
cd .debs
apt-get download libuv1 libuv1-dev libmsgpackc2 libmsgpack-dev libxxhash0 libxxhash-dev \
  zlib1g-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers \
  pkgconf pkgconf-bin libpkgconf3 clinfo libmetis5 libmetis-dev libssl3 libssl-dev openssl
# sd_notify and socket activation (without them the startup and socket-activation tests fail)
apt-get download libsystemd0 libsystemd-dev
# Open MPI and what its libraries load (bench/device/mpi.sh; relocated with OPAL_PREFIX)
apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 libhwloc15 \
  libhwloc-plugins libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libibverbs1 \
  ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200 libnuma1 libpsm-infinipath1 \
  libpsm2-2 libmunge2
# method "direct" (SuiteSparse 5.12 on Debian 12: KLU, UMFPACK, CHOLMOD and the orderings and BLAS
# they load; `apt-cache depends libsuitesparse-dev libcholmod3` names them)
apt-get download libsuitesparse-dev libklu1 libumfpack5 libcholmod3 libamd2 libcolamd2 libbtf1 \
  libsuitesparseconfig5 libccolamd2 libcamd2 libcxsparse3 libldl2 libspqr2 librbio2 libsliplu1 \
  libmongoose2 libblas3 liblapack3 libgfortran5 libquadmath0
ls -l
