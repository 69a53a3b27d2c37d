#!/usr/bin/env bash
# On the lent GPU machine (carry .whl and .gpucarry from scripts/gpu-carry.sh with a
# BabelStream checkout): BabelStream's OpenMP model on offload's drop-in against its CUDA
# model and LLVM 19's own libomptarget on the same binary. Dot and Copy alone at 1,024
# doubles (best of 3,000, three rounds interleaved), then bench/babelstream.py at 2^28.
# Writes $OUT/babelstream-log.txt and $OUT/babelstream.png.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp}
exec > >(tee -a "$out/babelstream-log.txt") 2>&1
date; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD
tar -xJf .gpucarry/llvm19.tar.xz -C /tmp
# LLVM 19's CUDA plugin opens "libcuda.so", which driver-only machines lack
ln -sf "$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')" /tmp/llvm/libcuda.so
b=$PWD/.gpucarry/babelstream
python3 -c "import bench.babelstream as m; m.build_cuda('$b')" &
python3 -c "import bench.babelstream as m; m.build_cuda('$b', 'cuda-stream-1', unroll=1)" &
lib=$(python3 -m offload.capi --libdir)
wait
best() {   # best time in us of kernel $2 at 1,024 doubles, binary $1, LD_LIBRARY_PATH $3
  LD_LIBRARY_PATH=${3:-} timeout 60 "$1" -o "$2" -s 1024 -n 3000 --csv \
    | awk -F, -v k="$2" '$1==k{printf "%.2f", $6*1e6}'
}
echo "one construct at 1,024 doubles, best of 3,000 (us): CUDA model / offload / LLVM 19"
for r in 1 2 3; do for k in Copy Dot; do
  echo "round $r $k: $(best "$b/cuda-stream" $k) / $(best "$b/omp-stream" $k "$lib:$b")" \
       "/ $(best "$b/omp-stream" $k "/tmp/llvm:$b")"
done; done
for who in "$lib" /tmp/llvm; do
  echo "launch geometry at 2^28 (LIBOMPTARGET_INFO=16) on $who"
  LIBOMPTARGET_INFO=16 LD_LIBRARY_PATH=$who:$b timeout 120 "$b/omp-stream" -o Copy \
    -s 268435456 -n 1 2>&1 | grep -i -m 2 launching
done
timeout 400 python3 bench/babelstream.py "$b" --size 268435456 --times 3 --teams 2112 \
  --llvm-lib /tmp/llvm
