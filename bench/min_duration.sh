#!/usr/bin/env bash
# bench/min_duration.sh BUILD_DIR [PROGRAM [KIB]]: function tracing with and without
# `--min-duration 5us` on the zstd-shaped program (bench/zstdlike.c, -finstrument-functions):
# the events each trace holds (slices in the XPlane file, as `loupe summary` counts them), the
# calls filtered, the trace files' size and the wall time of each run. BUILD_DIR holds the loupe
# command (a build with -DLOUPE_BUILD_BENCH=ON also has PROGRAM, the default). The buffers are
# sized to hold every call, so neither run drops one. Target (issue 13): >= 10x fewer events.
# Figures: docs/performance.md.
set -euo pipefail
B=${1:?build dir}
P=${2:-$B/bench/loupe_bench_zstdlike}
K=${3:-1024}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
run() { # label, out dir, extra options...
  local label=$1 out=$2; shift 2
  local t0 t1
  t0=$(date +%s.%N)
  "$B/loupe" record --no-sample --buffer-events 8388608 --session-events 16777216 -o "$out" \
    "$@" -- "$P" "$K" >"$T/out" 2>&1
  t1=$(date +%s.%N)
  local slices dropped filtered bytes
  slices=$("$B/loupe" summary "$out" 2>/dev/null | sed -n 's/.* \([0-9]*\) slices,.*/\1/p' | head -1)
  dropped=$(sed -n 's/.*recorded, \([0-9,]*\) dropped.*/\1/p' "$T/out" | tr -d ,)
  filtered=$(sed -n 's/.* \([0-9,]*\) calls filtered.*/\1/p' "$T/out" | tr -d ,)
  bytes=$(du -cb "$out"/plugins/profile/*/* | tail -1 | cut -f1)
  printf '%-26s %9s events  %9s filtered  %5s dropped  %10s bytes  wall %5.2f s\n' "$label" \
    "$slices" "${filtered:-0}" "${dropped:-0}" "$bytes" "$(echo "$t1 - $t0" | bc)"
  echo "$slices" >"$out.count"
}
run "all calls" "$T/all"
run "--min-duration 5us" "$T/min" --min-duration 5us
a=$(cat "$T/all.count") m=$(cat "$T/min.count")
echo "min_duration: $a events -> $m with --min-duration 5us: $(echo "scale=1; $a / $m" | bc)x fewer (target >= 10x)"
