#!/usr/bin/env bash
# Run test files again and again in both mapping cores, to show the suite does not flake
# (issue 30 item 6): scripts/repeat-runs.sh N [pytest arguments...]. Each run is bounded
# (a hang dumps every thread's stack through faulthandler and counts as a failure); prints
# one line per run and a summary, and exits non-zero if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."
n=$1; shift
py=.venv/bin/python
fails=0
for i in $(seq 1 "$n"); do
  for accel in 1 0; do
    log=$(mktemp)
    start=$(date +%s)
    OFFLOAD_ACCEL=$accel timeout 1800 "$py" -m pytest -q -p no:cacheprovider \
      -o faulthandler_timeout=600 "$@" > "$log" 2>&1
    rc=$?
    line=$(grep -E "^[0-9]+ (passed|failed)|passed|failed|error" "$log" | tail -1)
    echo "run $i OFFLOAD_ACCEL=$accel rc=$rc $(( $(date +%s) - start )) s: $line"
    if [ $rc -ne 0 ]; then
      fails=$((fails + 1))
      cp "$log" "/tmp/repeat-run-$i-accel$accel.log"
      echo "  log kept: /tmp/repeat-run-$i-accel$accel.log"
    fi
    rm -f "$log"
  done
done
echo "repeat-runs: $n x 2 modes, $fails failed"
[ $fails -eq 0 ]
