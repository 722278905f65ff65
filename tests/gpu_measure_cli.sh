#!/usr/bin/env bash
# gpu_measure_cli.sh: `loupe gpu-measure` end to end: loupe record --gpu runs a program whose
# kernels come from the fake CUPTI (tests/probes/fake_cupti.c as LOUPE_CUPTI_LIBRARY; the probe
# launches them: tests/probes/gpu_measure_probe.c). The table's exact rows, the split by
# LOUPE_STEP steps (the kernel launched before them left out), --iterations with Mosaic's two
# messages, --json and --per-kernel, the spread warnings, -o keeping the trace, no CUPTI, no
# driver, steps on several threads, steps without kernels, --json=FILE, a program exiting with
# record's own 121 or killed, usage. Args: BUILD_DIR SOURCE_DIR.
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

# 7. Steps on several threads, which overlap: each kernel in the step of the thread that
#    launched it (before: the three earlier steps got none, the last all four). --json=FILE
#    keeps the JSON away from the program's stdout.
"$loupe" gpu-measure --json="$tmp/thr.json" -- "$probe" 4 threads >"$tmp/o13" 2>"$tmp/e13" || fail "threads: $(cat "$tmp/e13")"
[ "$(cat "$tmp/o13")" = "launched 0 steps" ] || fail "threads: stdout has more than the program's: $(cat "$tmp/o13")"
python3 - "$tmp/thr.json" <<'PY' || fail "threads: the JSON"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["iterations"] == 4 and sorted(j["iteration_ns"]) == [1000, 1032, 1064, 1096], j
assert j["kernels"][0]["launches"] == 4 and j["min_ns"] == 1000 and j["max_ns"] == 1096, j
PY
"$loupe" gpu-measure --json=/nonexistent/dir/x.json -- "$probe" 1 flat >/dev/null 2>"$tmp/e14"; rc=$?
[ $rc = 1 ] && grep -qxF "loupe gpu-measure: cannot write the result to /nonexistent/dir/x.json: No such file or directory" "$tmp/e14" || fail "json to an unwritable file: $rc $(cat "$tmp/e14")"

# 8. Steps that launched nothing are left out (their 0 ns made the median 0), said once.
"$loupe" gpu-measure -- "$probe" 4 odd >"$tmp/o15" 2>"$tmp/e15" || fail "odd: $(cat "$tmp/e15")"
grep -qxF "iterations: 2 (by the steps 'train'); per iteration: min 8.064 µs, median 8.064 µs, max 8.064 µs, spread 0.0%" "$tmp/o15" || fail "odd: $(cat "$tmp/o15")"
grep -qxF "loupe gpu-measure: note: 2 of 4 steps 'train' launched no GPU kernel and are left out of the iterations" "$tmp/e15" || fail "odd: $(cat "$tmp/e15")"

# 9. A program that exits 121 (one of loupe record's own statuses) is measured, its status
#    kept; one killed before its stop is told why its kernels are missing, not "none ran".
"$loupe" gpu-measure -- "$probe" 2 exit121 >"$tmp/o16" 2>"$tmp/e16"; rc=$?
[ $rc = 121 ] || fail "exit121: exit $rc"
grep -q "^iterations: 2 (by the steps 'train')" "$tmp/o16" || fail "exit121: no table: $(cat "$tmp/o16") $(cat "$tmp/e16")"
grep -qxF "loupe gpu-measure: PROGRAM exited with status 121" "$tmp/e16" || fail "exit121: $(cat "$tmp/e16")"
"$loupe" gpu-measure -- "$probe" 2 abort >/dev/null 2>"$tmp/e17"; rc=$?
[ $rc = 134 ] || fail "abort: exit $rc"
grep -qxF "loupe gpu-measure: PROGRAM died before its session stopped (killed by signal 6 (Aborted)): CUPTI hands its records over at the stop, so the kernels that ran are not in the trace" "$tmp/e17" || fail "abort: $(cat "$tmp/e17")"
"$loupe" gpu-measure -- "$tmp/no-such-program" 2>"$tmp/e18"; rc=$?
[ $rc = 123 ] || fail "missing program: exit $rc $(cat "$tmp/e18")"
grep -q "^loupe gpu-measure" "$tmp/e18" && fail "missing program: gpu-measure added to record's reason: $(cat "$tmp/e18")"

# 5. Usage.
"$loupe" gpu-measure -o -- "$probe" 1 2>"$tmp/e19"; rc=$?
[ $rc = 2 ] && grep -qxF "loupe gpu-measure: -o wants a log directory before '--'" "$tmp/e19" || fail "-o --: $rc $(cat "$tmp/e19")"
[ -e ./-- ] && fail "-o -- made a directory named --"

"$loupe" gpu-measure 2>"$tmp/e9"; rc=$?
[ $rc = 2 ] && grep -qxF "loupe gpu-measure: no PROGRAM to run" "$tmp/e9" || fail "no program: $rc"
"$loupe" gpu-measure --help | grep -q "^usage: loupe gpu-measure" || fail "--help"
"$loupe" gpu-measure --bogus -- true 2>"$tmp/e10"; rc=$?
[ $rc = 2 ] && grep -qxF "loupe gpu-measure: unknown option '--bogus'" "$tmp/e10" || fail "unknown option: $rc"
"$loupe" --help | grep -q "gpu-measure" || fail "loupe --help lacks gpu-measure"
echo "gpu_measure_cli: ok"
