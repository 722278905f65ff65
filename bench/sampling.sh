#!/usr/bin/env bash
# bench/sampling.sh BUILD_DIR [REPS]: CPU sampling overhead on examples/compress_workload: loupe
# record with --no-sample, --sample-hz 999 and 10000 (dwarf, fp and no stacks), and `perf record`
# at -F 999 -g, -F 10000 -g and -F 10000 (no call graph: the kernel's own cost of the timer
# samples) on the same workload in the same run, interleaved, REPS rounds (default 3). Prints
# each run's wall and CPU (user + sys) seconds and the samples it collected, then the median of
# each row and its overhead over the row without sampling. With a build of the benchmarks
# (-DLOUPE_BUILD_BENCH=ON), also times the stop's symbolisation of 1 M samples
# (bench/symbolize.c). Each row also prints the 1-minute load average after it: the wall
# column means something only on an idle machine (load well under the CPU count). Figures:
# docs/performance.md.
set -euo pipefail
B=${1:?build dir}
REPS=${2:-3}
W=$B/examples/compress_workload
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run() { # label, command...
  local label=$1; shift
  local t0 t1 cpu n
  rm -rf "$T/run" "$T/perf.data"
  t0=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$T/time" "$@" >"$T/out" 2>&1
  t1=$(date +%s.%N)
  cpu=$(awk '{print $1 + $2}' "$T/time")
  n=0
  if [ -e "$T/perf.data" ]; then
    n=$(perf report -i "$T/perf.data" --stdio 2>/dev/null |
      sed -n 's/^# Samples: \([0-9.]*K*\).*/\1/p' | head -1) || true
  elif [ -d "$T/run" ]; then
    n=$("$B/loupe" summary "$T/run" 2>/dev/null |
      sed -n 's/^hot functions: \([0-9]*\) CPU samples.*/\1/p') || true
  fi
  printf '%-24s wall %6.2f s  cpu %6.2f s  samples %s  load %s\n' "$label" "$(echo "$t1 - $t0" | bc)" \
    "$cpu" "${n:-0}" "$(cut -d' ' -f1 /proc/loadavg)"
  printf '%s\t%s\t%s\n' "$label" "$(echo "$t1 - $t0" | bc)" "$cpu" >>"$T/all.tsv"
}
L="$B/loupe record -q -o $T/run"
for r in $(seq "$REPS"); do
  run "no sampling" $L --no-sample -- "$W"
  run "999 Hz dwarf" $L --sample-hz 999 -- "$W"
  run "999 Hz fp" $L --sample-hz 999 --sample-stacks fp -- "$W"
  run "10 kHz dwarf" $L --sample-hz 10000 -- "$W"
  run "10 kHz fp" $L --sample-hz 10000 --sample-stacks fp -- "$W"
  run "10 kHz no stacks" $L --sample-hz 10000 --sample-stacks none -- "$W"
  if command -v perf >/dev/null; then
    run "plain (no loupe)" "$W"
    run "perf -F 999 -g" perf record -q -F 999 -g -o "$T/perf.data" -- "$W"
    run "perf -F 10000 -g" perf record -q -F 10000 -g -o "$T/perf.data" -- "$W"
    run "perf -F 10000" perf record -q -F 10000 -o "$T/perf.data" -- "$W"
  fi
done
echo "medians over $REPS rounds (overhead: loupe's rows over 'no sampling', perf's over 'plain')"
python3 - "$T/all.tsv" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    label, wall, cpu = line.rstrip("\n").split("\t")
    rows.setdefault(label, []).append((float(wall), float(cpu)))
def med(label):
    return (statistics.median(w for w, _ in rows[label]), statistics.median(c for _, c in rows[label]))
for label in rows:
    bw, bc = med("plain (no loupe)" if label.startswith("perf") else "no sampling")
    w, c = med(label)
    print(f"{label:24s} wall {w:6.2f} s ({100 * (w / bw - 1):+5.1f}%)  cpu {c:6.2f} s ({100 * (c / bc - 1):+5.1f}%)")
PY
if [ -x "$B/bench/loupe_bench_symbolize" ]; then
  "$B/bench/loupe_bench_symbolize" 1000000
fi
