#!/usr/bin/env bash
# On the CPU machine (clang-19, clang-tools-19, libomp-19-dev, the CUDA toolkit): build what
# the GPU machine runs for the drop-in libomptarget's GPU checks, into DIR (default
# .gpucarry, to carry): tests/capi/*.c and *.cpp for nvptx (sm_90) with the output of each under
# LLVM 19's own runtime on the host (x86_64 offloading) to compare with, bench/capi_gpu.c,
# and libomp.so.5. There: OFFLOAD_NVPTX_PROGRAMS=DIR python3 -m pytest tests/capi/test_capi_gpu.py
# and python3 bench/capi_gpu.py DIR/bench/capi_gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-.gpucarry}
llvm=/usr/lib/llvm-19/lib
cuda=$(ls -d /usr/local/cuda-13* /usr/local/cuda 2>/dev/null | head -1)
# what this script builds is made anew; anything else in DIR (bench/babelstream.py's
# babelstream/, say) stays
rm -rf "$out/nvptx" "$out/expected" "$out/host" "$out/ompt" "$out/gpu" "$out/bench"
mkdir -p "$out/nvptx" "$out/expected" "$out/host"
cp "$llvm/libomp.so.5" "$out/"
for src in tests/capi/*.c tests/capi/*.cpp; do
  n=$(basename "${src%.*}")
  [ "$n" = shared_lib ] && continue
  # unified shared memory needs a GPU that reaches pageable memory (HMM): the lent H200
  # has none, and offload refuses the program there by name
  [ "$n" = requires_usm ] && continue
  # kernel_replay passes this program's own addresses as device memory: host devices only
  [ "$n" = kernel_replay ] && continue
  # OMPT tools see each runtime's devices (four host devices and their kind under LLVM's
  # host run, the H200's here): tests/capi/test_capi_gpu.py checks those apart
  case "$n" in ompt_*) continue ;; esac
  cc=clang-19
  [ "${src##*.}" = cpp ] && cc=clang++-19
  LIBRARY_PATH=$llvm $cc -O1 -fopenmp -fopenmp-targets=nvptx64-nvidia-cuda \
    --offload-arch=sm_90 --cuda-path="$cuda" "$src" -o "$out/nvptx/$n" 2>/dev/null
  $cc -O1 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu "$src" -o "$out/host/$n"
  rc=0
  (cd /tmp && LD_LIBRARY_PATH=$llvm timeout 120 "$OLDPWD/$out/host/$n" \
     > "$OLDPWD/$out/expected/$n.txt" 2>/dev/null) || rc=$?
  echo "rc=$rc" >> "$out/expected/$n.txt"
done
rm -rf "$out/host"
mkdir -p "$out/ompt"
LIBRARY_PATH=$llvm clang-19 -O1 -fopenmp -fopenmp-targets=nvptx64-nvidia-cuda \
  --offload-arch=sm_90 --cuda-path="$cuda" tests/capi/ompt_emi.c -o "$out/ompt/ompt_emi" 2>/dev/null
clang-19 -O1 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu tests/capi/ompt_emi.c \
  -o "$out/ompt/host"
(cd /tmp && LD_LIBRARY_PATH=$llvm "$OLDPWD/$out/ompt/host" > "$OLDPWD/$out/ompt/expected.txt" \
   2>/dev/null)
rm "$out/ompt/host"
LIBRARY_PATH=$llvm clang-19 -O1 -fopenmp -fopenmp-targets=nvptx64-nvidia-cuda \
  --offload-arch=sm_90 --cuda-path="$cuda" -x c tests/capi/record_replay_beyond_llvm.c.in \
  -o "$out/ompt/record_replay" 2>/dev/null
# GPU-only programs (their lines are stated in tests/capi/test_capi_gpu.py, from LLVM 19's rules)
mkdir -p "$out/gpu"
for src in tests/capi/gpu/*.c; do
  LIBRARY_PATH=$llvm clang-19 -O1 -fopenmp -fopenmp-targets=nvptx64-nvidia-cuda \
    --offload-arch=sm_90 --cuda-path="$cuda" "$src" -o "$out/gpu/$(basename "${src%.c}")"
done
.venv/bin/python bench/capi_gpu.py --build "$out/bench"
echo "built into $out"
