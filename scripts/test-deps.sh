#!/usr/bin/env bash
# Debian packages the AMDGPU tests use: the real ROCr runtime and headers (ROCm 5.2.3),
# clang/lld 19 to build real AMDGPU code objects, a C++ compiler for the header check,
# Open MPI for the mpiexec -n 2 run of examples/mpi_stencil.py; clang-tools-19 (the
# offload packager and linker wrapper) and libomp-19-dev (libomp and LLVM 19's own
# libomptarget) for the drop-in C ABI's differential tests.
# Installs only what is missing, and only where it can (root with apt-get); without
# them those tests skip and say why.
set -euo pipefail
command -v apt-get >/dev/null && [ "$(id -u)" = 0 ] || exit 0
need=""
for p in libhsa-runtime64-1 libhsa-runtime-dev clang-19 lld-19 g++ openmpi-bin \
         clang-tools-19 libomp-19-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
[ -z "$need" ] && exit 0
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq && apt-get install -y -qq --no-install-recommends $need >/dev/null
