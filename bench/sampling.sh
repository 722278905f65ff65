#!/usr/bin/env bash
# bench/sampling.sh BUILD_DIR: CPU sampling overhead on examples/compress_workload: loupe record
# with --no-sample, --sample-hz 999 and 10000 (dwarf and fp stacks), and `perf record -F 999 -g`
# (when perf is installed) on the same workload in the same run. Prints wall and CPU seconds
# per run and the samples each collected. Figures: docs/performance.md.
set -euo pipefail
B=${1:?build dir}
W=$B/examples/compress_workload
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run() { # label, command...
  local label=$1; shift
  local t0 t1 u
  t0=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$T/time" "$@" >"$T/out" 2>&1
  t1=$(date +%s.%N)
  u=$(awk '{print $1 + $2}' "$T/time")
  printf '%-28s wall %6.2f s  cpu %6.2f s\n' "$label" "$(echo "$t1 - $t0" | bc)" "$u"
}
run "no sampling" "$B/loupe" record -q -o "$T/l0" --no-sample -- "$W"
run "999 Hz dwarf" "$B/loupe" record -q -o "$T/l1" --sample-hz 999 -- "$W"
run "999 Hz fp" "$B/loupe" record -q -o "$T/l2" --sample-hz 999 --sample-stacks fp -- "$W"
run "10 kHz dwarf" "$B/loupe" record -q -o "$T/l3" --sample-hz 10000 -- "$W"
run "10 kHz fp" "$B/loupe" record -q -o "$T/l4" --sample-hz 10000 --sample-stacks fp -- "$W"
if command -v perf >/dev/null; then
  run "perf record -F 999 -g" perf record -q -F 999 -g -o "$T/perf.data" -- "$W"
  echo "perf samples: $(perf script -i "$T/perf.data" -F ip 2>/dev/null | grep -c . || true)"
fi
