#!/usr/bin/env bash
# On the CPU machine (libomp-19-dev): pack LLVM 19's own libomptarget.so.19.1 (its CUDA
# plugin built in: it dlopens libcuda) with libomp.so.5 and every library they load that
# is not glibc's, as DIR/llvm19.tar.xz (default .llvmcarry; ~43 MB, to carry to the GPU
# machine). There: mkdir -p /tmp/llvm19 && tar -xJf DIR/llvm19.tar.xz -C /tmp/llvm19, then
# bench/babelstream.py DIR --llvm-lib /tmp/llvm19 and bench/capi_gpu.py --llvm-lib
# /tmp/llvm19 run the same clang-19 binaries under LLVM 19's runtime as the baseline.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.llvmcarry}
llvm=/usr/lib/llvm-19/lib
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
cp -L "$llvm/libomptarget.so.19.1" "$llvm/libomp.so.5" "$stage/"
# the dependencies, less the C library's own (the GPU machine's are newer)
ldd "$llvm/libomptarget.so.19.1" | awk '$3 ~ /^\// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libgcc_s.so.*|libstdc++.so.*|ld-linux*) ;;
    *) cp -L "$lib" "$stage/" ;;
  esac
done
mkdir -p "$out"
tar -C "$stage" -cf - . | xz -T2 -6 > "$out/llvm19.tar.xz"
ls -la "$out/llvm19.tar.xz"
