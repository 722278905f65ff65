#!/usr/bin/env bash
# gpu_check.sh: the GPU checks of the in-kernel recorder, in one short run on a machine with an
# NVIDIA GPU and nvcc (run it through the device tool from the repository root):
#   bash tools/gpu_check.sh [BUILD_DIR]
# Builds the CUDA examples, then prints a table: %globaltimer tick, cycles per %clock read and
# per record, the clock rate, kernel time A/B (compiled out / run-time off / on / on but never
# firing), events decoded vs expected, SM ids seen, the CUPTI device tracer's note, and the SASS
# of the record path (when cuobjdump exists), and loupe_gpu_measure() of a ~1 ms kernel against
# CUDA events around the same launches (within 2% or 2 µs). Exit status 0 when every check passed.
set -euo pipefail
B=${1:-build-gpucheck}
OUT=${OUT:-/tmp/loupe-gpucheck}
mkdir -p "$OUT"
command -v nvcc >/dev/null || export PATH=/usr/local/cuda/bin:$PATH
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=Release -DLOUPE_BUILD_TESTS=OFF -DLOUPE_BUILD_BENCH=OFF \
  -DLOUPE_BUILD_EXAMPLES=ON >"$OUT/cmake.log" 2>&1 || { tail -20 "$OUT/cmake.log"; exit 1; }
cmake --build "$B" -j"$(nproc)" --target gpu_timeline gpu_timeline_off gpu_probe gpu_measure loupe_cli \
  >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader || true

probe=$("$B/examples/cuda/gpu_probe")
echo "probe: $probe"
val() { sed -n "s/.*$1=\([^ ]*\).*/\1/p" <<<"$2"; }
declare -A run
for m in compiled_out off on idle; do
  if [ "$m" = compiled_out ]; then
    line=$("$B/examples/cuda/gpu_timeline_off" on "$OUT/$m")
  else
    line=$("$B/examples/cuda/gpu_timeline" "$m" "$OUT/$m")
  fi
  echo "$m: $line"
  run[$m]=$line
done
on=${run[on]}
grid=$(( (132 * 256 + 255) / 256 ))
"$B/loupe" gpu-decode "$OUT/on/buffer.u32" --grid "$grid" --block 256 --entries $((9 + 48)) \
  -o "$OUT/on/decoded.json" | tee "$OUT/decode.txt"

printf '\n%-34s %s\n' "check" "figure"
printf '%-34s %s\n' "globaltimer tick (ns)" "$(val globaltimer_tick_ns "$probe")"
printf '%-34s %s\n' "cycles per %clock read" "$(val clock_read_cycles "$probe")"
printf '%-34s %s\n' "cycles per record (leader)" "$(val record_cycles "$probe")"
printf '%-34s %s\n' "clock rate (GHz, clock64/globaltimer)" "$(val ghz "$probe")"
printf '%-34s %s\n' "clock rate decoded (GHz)" "$(val ghz "$on")"
printf '%-34s %s\n' "overhead estimated (cycles)" "$(val overhead "$on")"
for m in compiled_out off idle on; do
  printf '%-34s %s\n' "kernel us, best of 20: $m" "$(val kernel_us "${run[$m]}")"
done
printf '%-34s %s / %s (dropped %s)\n' "events decoded / expected" "$(val events "$on")" \
  "$(val expected "$on")" "$(val dropped "$on")"
printf '%-34s %s (max smid %s, nsmid %s, SMs %s)\n' "SMs seen" "$(val sms "$on")" \
  "$(val smid_max "$probe")" "$(val nsmid "$probe")" "$(val sm_count "$probe")"
printf '%-34s %s\n' "CUPTI note" "$(sed -n 's/.*note="\([^"]*\)".*/\1/p' <<<"$on")"
meas=$("$B/examples/cuda/gpu_measure" || true)
echo "gpu_measure: $meas"
printf '%-34s %s vs %s (diff %s us, %s%%)\n' "measure vs CUDA events (us)" \
  "$(val measure_us "$meas")" "$(val events_us "$meas")" "$(val diff_us "$meas")" \
  "$(val diff_pct "$meas")"
ok=1
if [ -z "$(val diff_us "$meas")" ]; then
  echo "FAIL: loupe_gpu_measure: $meas"; ok=0
elif ! awk -v d="$(val diff_us "$meas")" -v p="$(val diff_pct "$meas")" \
  'BEGIN { exit !(d <= 2.0 || p <= 2.0) }'; then
  echo "FAIL: loupe_gpu_measure differs from CUDA events by more than 2% and 2 us"; ok=0
fi
[ "$(val events "$on")" = "$(val expected "$on")" ] || { echo "FAIL: events != expected"; ok=0; }
[ "$(val dropped "$on")" = 0 ] || { echo "FAIL: dropped events"; ok=0; }
[ "$(val smid_max "$probe")" -lt "$(val nsmid "$probe")" ] || { echo "FAIL: smid >= nsmid"; ok=0; }
if command -v cuobjdump >/dev/null; then
  cuobjdump -sass -arch sm_90 "$B/examples/cuda/gpu_probe" 2>/dev/null |
    grep -E "CLOCK|GLOBALTIMER|STG" | head -12 >"$OUT/sass.txt" || true
  echo "SASS (record path excerpts):"; cat "$OUT/sass.txt"
  n=$(cuobjdump -sass -arch sm_90 "$B/examples/cuda/gpu_timeline_off" 2>/dev/null |
    grep -cE "SR_CLOCK|GLOBALTIMER" || true)
  printf '%-34s %s\n' "clock reads when compiled out" "$n"
  [ "$n" = 0 ] || { echo "FAIL: compiled-out kernel reads clocks"; ok=0; }
fi
[ $ok = 1 ] && echo "gpu_check: all checks passed" || { echo "gpu_check: FAILED"; exit 1; }
