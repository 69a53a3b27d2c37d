#!/usr/bin/env bash
# Build the OpenMP Validation & Verification suite's C/C++ tests with clang-19
# and run each under LLVM 19's libomptarget and under offload's drop-in.
#   scripts/validation-suite.sh VV_DIR OUT_DIR [TARGET]
# VV_DIR: a checkout of OpenMP-Validation-and-Verification/OpenMP_VV (tests/, ompvv/).
# TARGET: x86_64-unknown-linux-gnu (default) or nvptx64-nvidia-cuda.
# Writes OUT_DIR/results.tsv (test, built, llvm, offload) and prints the totals.
# With BUILD_ONLY=1 it only builds (for carrying nvptx binaries to a GPU machine);
# with RUN_ONLY=1 it runs binaries already in OUT_DIR/bin; RUNTIMES=offload runs offload's
# alone (where LLVM 19's libomptarget cannot run: LLVM_LIB then holds libomp.so.5 only).
set -u
vv=$(cd "$1" && pwd); out=$2; target=${3:-x86_64-unknown-linux-gnu}
mkdir -p "$out/bin" "$out/log"; out=$(cd "$out" && pwd)
here=$(cd "$(dirname "$0")/.." && pwd)
llvm=${LLVM_LIB:-/usr/lib/llvm-19/lib}
py=${PYTHON:-$here/.venv/bin/python}
jobs=${JOBS:-$(nproc)}
flags="-fopenmp -fopenmp-targets=$target -O1 -I$vv/ompvv -lm"
if [ "$target" = nvptx64-nvidia-cuda ]; then
  cuda=$(ls -d /usr/local/cuda-13* /usr/local/cuda 2>/dev/null | head -1)
  flags="$flags --offload-arch=${ARCH:-sm_90} --cuda-path=$cuda"
  export LIBRARY_PATH=$llvm      # the nvptx device runtime bitcode
fi

build() {  # one source file -> bin/NAME or log/NAME.build
  src=$1; name=$(echo "${src#"$vv"/tests/}" | tr / _); name=${name%.*}
  [ -e "${src%.*}.c" ] && [ -e "${src%.*}.cpp" ] && name=${name}_${src##*.}   # both exist
  case $src in *.cpp) cc=clang++-19 ;; *) cc=clang-19 ;; esac
  $cc $flags "$src" -o "$out/bin/$name" >"$out/log/$name.build" 2>&1 || rm -f "$out/bin/$name"
}
export -f build; export vv out flags
if [ "${RUN_ONLY:-0}" != 1 ]; then
  find "$vv/tests" \( -name '*.c' -o -name '*.cpp' \) | sort |
    xargs -P "$jobs" -I{} bash -c 'build "$1"' _ {}
fi
[ "${BUILD_ONLY:-0}" = 1 ] && { ls "$out/bin" | wc -l; exit 0; }

lib=${OFFLOAD_LIBDIR:-$(cd /tmp && "$py" -c 'from offload.capi import libdir; print(libdir())')}
runone() {  # NAME -> "NAME llvm offload" with PASS/FAIL/TIMEOUT
  name=$1; r=(- -)
  for which in ${RUNTIMES:-llvm offload}; do
    if [ "$which" = llvm ]; then lp=$llvm; else lp=$lib:$llvm; fi
    ( cd "$out/log" && LD_LIBRARY_PATH=$lp timeout "${VV_TIMEOUT:-120}" "$out/bin/$name" \
        >"$out/log/$name.$which" 2>&1 ); rc=$?
    i=0; [ "$which" = offload ] && i=1
    case $rc in 0) r[i]=PASS ;; 124) r[i]=TIMEOUT ;; *) r[i]="FAIL:$rc" ;; esac
  done
  printf '%s\t%s\t%s\n' "$name" "${r[0]}" "${r[1]}"
}
export -f runone; export lib llvm RUNTIMES VV_TIMEOUT
ls "$out/bin" | sort | xargs -P "$jobs" -I{} bash -c 'runone "$1"' _ {} | sort >"$out/results.tsv"
total=$(find "$vv/tests" \( -name '*.c' -o -name '*.cpp' \) | wc -l)
built=$(wc -l <"$out/results.tsv")
awk -F'\t' -v total="$total" -v built="$built" '
  $2=="PASS" {l++} $3=="PASS" {o++} $2=="PASS" && $3!="PASS" {lost++; print "offload fails where LLVM passes: " $1}
  END {printf "sources %d, built %d, LLVM 19 passes %d, offload passes %d, lost %d\n", total, built, l, o, lost}
' "$out/results.tsv"
