#!/usr/bin/env bash
# On the CPU machine: everything the lent GPU machine's runs need, into ignored folders to
# carry (.whl, .gpucarry): the cp312 wheels it lacks (cffi, pycparser, pyelftools), the
# clang-19 nvptx programs of scripts/build-capi-gpu.sh, BabelStream's OpenMP model when a
# checkout is given (UoB-HPC/BabelStream 57637d5), and LLVM 19's own libomptarget with the
# libraries it needs beyond glibc and libstdc++ (.gpucarry/llvm19.tar.xz, for --llvm-lib).
# There: bash scripts/gpu-babelstream.sh (carry .whl and .gpucarry).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.gpucarry/' .git/info/exclude 2>/dev/null || echo /.gpucarry/ >> .git/info/exclude
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl cffi==2.0.0 pycparser==2.22 pyelftools==0.33
bash scripts/build-capi-gpu.sh .gpucarry
if [ $# -ge 1 ]; then
  .venv/bin/python bench/babelstream.py --build "$1" .gpucarry/babelstream
fi
lib=/usr/lib/llvm-19/lib/libomptarget.so.19.1
tmp=$(mktemp -d)
mkdir "$tmp/llvm"
cp -L "$lib" /usr/lib/llvm-19/lib/libomp.so.5 "$tmp/llvm/"
ldd "$lib" | awk '/=>/{print $3}' \
  | grep -v -E '/(libc|libm|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|llvm-19/lib/libomp' \
  | xargs -r -I{} cp -L {} "$tmp/llvm/"
tar -cf - -C "$tmp" llvm | xz -T0 -6 > .gpucarry/llvm19.tar.xz
rm -rf "$tmp"
du -sh .whl .gpucarry
