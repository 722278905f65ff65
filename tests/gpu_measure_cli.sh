#!/usr/bin/env bash
# gpu_measure_cli.sh: `loupe gpu-measure` end to end: loupe record --gpu runs a program whose
# kernels come from the fake CUPTI (tests/probes/fake_cupti.c as LOUPE_CUPTI_LIBRARY; the probe
# launches them: tests/probes/gpu_measure_probe.c). The table's exact rows, the split by
# LOUPE_STEP steps (the kernel launched before them left out), --iterations with Mosaic's two
# messages, --json and --per-kernel, the spread warnings, -o keeping the trace, no CUPTI, no
# driver, usage. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
name=gpu_measure_cli
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
probe=$build/tests/gpu_measure_probe
export LOUPE_CUPTI_LIBRARY=$build/tests/libloupe_fake_cupti.so
export TMPDIR=$tmp
[ -x "$probe" ] && [ -f "$LOUPE_CUPTI_LIBRARY" ] || { echo "gpu_measure_cli: skipped: no probe"; exit 77; }

# 1. Steps: 5 steps, gemm 32.320 µs in step 0 and 3.232 µs after, relu 4.832 µs.
"$loupe" gpu-measure -- "$probe" 5 >"$tmp/o1" 2>"$tmp/e1" || fail "steps: $(cat "$tmp/e1")"
cat >"$tmp/w1" <<'T'
launched 5 steps
kernel                                   launches        total         mean          p50          min          max
gemm                                            5    45.248 µs     9.049 µs     3.232 µs     3.232 µs    32.320 µs
relu                                            5    24.160 µs     4.832 µs     4.832 µs     4.832 µs     4.832 µs

iterations: 5 (by the steps 'train'); per iteration: min 8.064 µs, median 8.064 µs, max 37.152 µs, spread 360.7%
clock: CUPTI activity timestamps (the GPU's timer, mapped by CUPTI to CLOCK_REALTIME ns); resolution 32 ns
T
diff "$tmp/w1" "$tmp/o1" || fail "steps: the table differs"
cat >"$tmp/we1" <<'T'
loupe gpu-measure: note: 1 of 11 kernels were launched outside the steps 'train' and are left out
loupe gpu-measure: warning: iterations spread 360.7% (min 8.064 µs, median 8.064 µs, max 37.152 µs): more than 5%
loupe gpu-measure: warning: the first iteration (37.152 µs) is 360.7% above the median of the others (8.064 µs): more warm-up may be needed
T
diff "$tmp/we1" "$tmp/e1" || fail "steps: stderr differs"
[ -z "$(ls "$tmp")" ] || [ "$(ls "$tmp" | grep -c loupe-gpu-measure)" = 0 ] || fail "the temporary trace was left: $(ls "$tmp")"

# 2. --iterations on unmarked launches: 10 kernels in 5, then Mosaic's two messages.
"$loupe" gpu-measure --iterations 5 -- "$probe" 5 flat >"$tmp/o2" 2>"$tmp/e2" || fail "iterations 5: $(cat "$tmp/e2")"
grep -qxF "iterations: 5 (5 equal runs of the launches); per iteration: min 8.064 µs, median 8.064 µs, max 37.152 µs, spread 360.7%" "$tmp/o2" || fail "iterations 5: $(cat "$tmp/o2")"
"$loupe" gpu-measure --iterations 3 -- "$probe" 5 flat >"$tmp/o3" 2>"$tmp/e3"; rc=$?
[ $rc = 1 ] || fail "not divisible: exit $rc"
grep -qxF "loupe gpu-measure: The number of kernel launches is not divisible by the number of iterations" "$tmp/e3" || fail "not divisible: $(cat "$tmp/e3")"
"$loupe" gpu-measure --iterations 2 -- "$probe" 5 flat >"$tmp/o4" 2>"$tmp/e4"; rc=$?
[ $rc = 1 ] || fail "inconsistent: exit $rc"
grep -qxF "loupe gpu-measure: Kernel names are not consistent across iterations" "$tmp/e4" || fail "inconsistent: $(cat "$tmp/e4")"
"$loupe" gpu-measure --iterations 0 -- "$probe" 1 2>"$tmp/e5"; rc=$?
[ $rc = 2 ] && grep -qxF "loupe gpu-measure: iterations=0 must be positive" "$tmp/e5" || fail "iterations 0: $rc $(cat "$tmp/e5")"

# 3. --json --per-kernel, and -o keeps the trace, whose kernels are on GPU tracks.
"$loupe" gpu-measure --json --per-kernel -o "$tmp/keep" -- "$probe" 3 >"$tmp/o6" 2>"$tmp/e6" || fail "json: $(cat "$tmp/e6")"
sed -n '2,$p' "$tmp/o6" >"$tmp/o6.json"
python3 - "$tmp/o6.json" <<'PY' || exit 1
import json, sys
j = json.load(open(sys.argv[1]))
want_k = [{"name": "gemm", "launches": 3, "total_ns": 38784, "mean_ns": 12928, "p50_ns": 3232,
           "min_ns": 3232, "max_ns": 32320},
          {"name": "relu", "launches": 3, "total_ns": 14496, "mean_ns": 4832, "p50_ns": 4832,
           "min_ns": 4832, "max_ns": 4832}]
assert j["kernels"] == want_k, j["kernels"]
assert j["iterations"] == 3 and j["iteration_ns"] == [37152, 8064, 8064], j
assert j["min_ns"] == 8064 and j["median_ns"] == 8064 and j["max_ns"] == 37152, j
assert j["resolution_ns"] == 32 and j["split"] == "by the steps 'train'", j
assert len(j["warnings"]) == 2 and j["warnings"][0].startswith("iterations spread 360.7%"), j
pk = j["per_kernel"]
assert [[k["name"] for k in it] for it in pk] == [["gemm", "relu"]] * 3, pk
assert pk[0][0]["dur_ns"] == 32320 and pk[1][0]["dur_ns"] == 3232 and pk[2][1]["stream"] == 7, pk
PY
grep -q "^loupe gpu-measure: the trace is in $tmp/keep/plugins/profile/" "$tmp/e6" || fail "-o: $(cat "$tmp/e6")"
"$loupe" summary "$tmp/keep" >"$tmp/s6" 2>&1 || fail "summary of the kept trace: $(cat "$tmp/s6")"
grep -q "gemm" "$tmp/s6" && grep -q "train" "$tmp/s6" || fail "the kept trace lacks the kernels or steps: $(cat "$tmp/s6")"

# 4. No CUPTI, no driver: the reason, exit 1 (the program's status when it failed).
LOUPE_CUPTI_LIBRARY=/nonexistent/libcupti.so "$loupe" gpu-measure -- /bin/true 2>"$tmp/e7"; rc=$?
[ $rc = 1 ] || fail "no CUPTI: exit $rc"
grep -qF "loupe gpu-measure: CUPTI profiling is not supported on this platform (CUPTI not found (LOUPE_CUPTI_LIBRARY=/nonexistent/libcupti.so: " "$tmp/e7" || fail "no CUPTI: $(cat "$tmp/e7")"
if [ ! -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ] && ! ldconfig -p 2>/dev/null | grep -q libcuda.so.1; then
  (unset LOUPE_CUPTI_LIBRARY; "$loupe" gpu-measure -- /bin/true) 2>"$tmp/e8"; rc=$?
  [ $rc = 1 ] || fail "no driver: exit $rc"
  grep -qxF "loupe gpu-measure: CUPTI profiling is not supported on this platform (no CUDA driver (libcuda.so.1 not found): no GPU activity is recorded)" "$tmp/e8" || fail "no driver: $(cat "$tmp/e8")"
fi

# 6. Records CUPTI dropped: loupe record names the cause (not a capacity), gpu-measure refuses.
"$loupe" record --gpu -o "$tmp/drop" -- "$probe" 2 flat drop3 >/dev/null 2>"$tmp/e11" || fail "record drop3: $(cat "$tmp/e11")"
grep -qxF "loupe record: 4 events recorded, 3 dropped (3 GPU activity records that CUPTI dropped, or gave without timestamps or starting outside the session, such as kernels still running at the program's exit: the trace's device_tracer metadata says which)" "$tmp/e11" || fail "record drop3: $(cat "$tmp/e11")"
"$loupe" gpu-measure -- "$probe" 2 flat drop3 >/dev/null 2>"$tmp/e12"; rc=$?
[ $rc = 1 ] || fail "gpu-measure drop3: exit $rc"
grep -qxF "loupe gpu-measure: 3 GPU activity records were lost (CUPTI: 4 kernels, 0 memcpys, 0 memsets, 3 records dropped by CUPTI, 0 without timestamps or outside the session): the timings would be incomplete" "$tmp/e12" || fail "gpu-measure drop3: $(cat "$tmp/e12")"

# 5. Usage.
"$loupe" gpu-measure 2>"$tmp/e9"; rc=$?
[ $rc = 2 ] && grep -qxF "loupe gpu-measure: no PROGRAM to run" "$tmp/e9" || fail "no program: $rc"
"$loupe" gpu-measure --help | grep -q "^usage: loupe gpu-measure" || fail "--help"
"$loupe" gpu-measure --bogus -- true 2>"$tmp/e10"; rc=$?
[ $rc = 2 ] && grep -qxF "loupe gpu-measure: unknown option '--bogus'" "$tmp/e10" || fail "unknown option: $rc"
"$loupe" --help | grep -q "gpu-measure" || fail "loupe --help lacks gpu-measure"
echo "gpu_measure_cli: ok"
