#!/usr/bin/env bash
# record_cli.sh: `loupe record` end to end: a -finstrument-functions program not linked with
# loupe (names from ELF symbols, static functions included), the annotated workload, exit
# statuses passed through, and the CLI's errors. Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
loupe="$build/loupe"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
name=record_cli
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
count() { # file, exact JSON text to count
  python3 - "$1" "$2" <<'PY'
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
print(sum(1 for e in d["traceEvents"] if e.get("ph") == "X" and e.get("name") == sys.argv[2]))
PY
}

# 1. function tracing of an uninstrumented-by-loupe program
"$loupe" record -q -o "$tmp/log" --print-run-dir "$tmp/run1" -- "$build/examples/instrumented" \
  >/dev/null
run_dir=$(cat "$tmp/run1")
[ -d "$run_dir" ] || fail "no run directory printed: '$run_dir'"
trace=$(ls "$run_dir"/*.trace.json.gz)
for fn in main fib tree_insert tree_walk mix; do
  n=$(count "$trace" "$fn")
  [ "$n" -ge 1 ] || fail "function $fn not in the trace"
done
[ "$(count "$trace" main)" = 1 ] || fail "main should be one zone"
# zones resolve to names, never raw addresses
python3 - "$trace" <<'PY' || fail "unresolved function addresses"
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
bad = [e["name"] for e in d["traceEvents"] if e.get("ph") == "X" and e["name"].startswith("0x")]
sys.exit(1 if bad else 0)
PY

# 2. the annotated workload, through record, then summary
"$loupe" record -q -o "$tmp/log2" --print-run-dir "$tmp/run2" -- "$build/examples/compress_workload" \
  --max-files 40 >"$tmp/out" || fail "compress_workload failed"
run2=$(cat "$tmp/run2")
trace2=$(ls "$run2"/*.trace.json.gz)
[ "$(count "$trace2" deflate)" -ge 1 ] || fail "no deflate zones"
[ "$(count "$trace2" batch)" -ge 1 ] || fail "no batch steps"
"$loupe" summary "$run2" >"$tmp/sum" || fail "summary failed"
grep -q deflate "$tmp/sum" || fail "summary misses deflate"

# 3. exit statuses pass through
set +e
"$loupe" record -q -o "$tmp/log3" -- sh -c 'exit 7' >/dev/null; st=$?
[ $st = 7 ] || fail "exit status 7 expected, got $st"
"$loupe" record -o "$tmp/log3" -- /nonexistent/prog 2>"$tmp/err"; st=$?
[ $st = 123 ] || fail "123 expected for a missing program, got $st"
grep -q "cannot run '/nonexistent/prog'" "$tmp/err" || fail "missing-program message"
"$loupe" record --level 9 -- true 2>"$tmp/err"; st=$?
[ $st = 120 ] || fail "bad --level should exit 120"
grep -q "must be 0, 1, 2 or 3, not '9'" "$tmp/err" || fail "--level message: $(cat "$tmp/err")"
"$loupe" record --buffer-events 10 -- true 2>"$tmp/err"; st=$?
[ $st = 120 ] || fail "bad --buffer-events should exit 120"
"$loupe" record 2>"$tmp/err"; st=$?
[ $st = 120 ] || fail "no program should exit 120"
grep -q "no program to run" "$tmp/err" || fail "no-program message"
"$loupe" record --help >"$tmp/help"; st=$?
[ $st = 0 ] || fail "--help should exit 0"
grep -q -- "--buffer-events" "$tmp/help" || fail "help lists --buffer-events"
"$loupe" bogus 2>/dev/null; st=$?
[ $st = 2 ] || fail "unknown verb should exit 2"
set -e

# 4. a full buffer says how much would have held everything
"$loupe" record -o "$tmp/log4" --buffer-events 64 -- "$build/examples/instrumented" \
  >/dev/null 2>"$tmp/err4"
grep -qE "dropped \(to keep them all: the busiest thread needed [0-9]+ events, the session [0-9]+: rerun with --buffer-events and --session-events at least that\)" "$tmp/err4" ||
  fail "drop hint: $(cat "$tmp/err4")"
# 4b. SIGINT sent to loupe's own pid (not from a terminal) is passed on to the program (the
#     plain binary only: under ASan $loupe is a shell function, whose $! is a subshell)
if [ -x "$loupe" ]; then
printf '#include <signal.h>\n#include <unistd.h>\nint main(void) { signal(SIGINT, SIG_DFL); sleep(20); return 0; }\n' >"$tmp/intwait.c"
cc "$tmp/intwait.c" -o "$tmp/intwait"
set +e
"$loupe" record -o "$tmp/log4b" -- "$tmp/intwait" >/dev/null 2>"$tmp/err4b" &
lp=$!
sleep 1
kill -INT "$lp"
wait "$lp"; st=$?
set -e
[ "$st" = 130 ] || fail "SIGINT to loupe: exit $st, want 130 ($(cat "$tmp/err4b"))"
grep -qF "killed by signal 2 (Interrupt)" "$tmp/err4b" || fail "SIGINT message: $(cat "$tmp/err4b")"
fi
# 5. a program that stops the session itself (its cleanup path): status 0, the run dir printed
src=$2
cat >"$tmp/selfstop.c" <<'C'
#include <loupe/loupe.h>
int main(void) {
    { LOUPE_ZONE("self_zone"); }
    return loupe_stop_trace_if_active(NULL) == 0 ? 0 : 3;
}
C
cc -std=c11 -I"$src/include" "$tmp/selfstop.c" -o "$tmp/selfstop" -L"$build" -lloupe \
  -Wl,-rpath,"$build"
"$loupe" record -q -o "$tmp/log5" --print-run-dir "$tmp/run5" -- "$tmp/selfstop" ||
  fail "self-stopping program: exit $?"
run5=$(cat "$tmp/run5")
[ "$(count "$(ls "$run5"/*.trace.json.gz)" self_zone)" = 1 ] || fail "self_zone missing"
# the counts reported are that stop's, not zeros
"$loupe" record -o "$tmp/log5c" -- "$tmp/selfstop" >/dev/null 2>"$tmp/err5" || fail "self-stopping program (counts): exit $?"
grep -qF "loupe record: 2 events recorded, 0 dropped" "$tmp/err5" || fail "self-stop counts: $(cat "$tmp/err5")"

# 5b. C++ function names come out demangled
if command -v g++ >/dev/null; then
  printf 'namespace ns { struct Box { int v; int get() const { return v; } }; }\nint overloaded(int x) { return x + 1; }\nint main() { ns::Box b{overloaded(1)}; return b.get() - 2; }\n' >"$tmp/cpp.cpp"
  g++ -O0 -finstrument-functions "$tmp/cpp.cpp" -o "$tmp/cppfi"
  "$loupe" record -q -o "$tmp/log5b" --print-run-dir "$tmp/run5b" -- "$tmp/cppfi"
  run5b=$(cat "$tmp/run5b")
  t5b=$(ls "$run5b"/*.trace.json.gz)
  [ "$(count "$t5b" 'overloaded(int)')" = 1 ] || fail "overloaded(int) not demangled"
  [ "$(count "$t5b" 'ns::Box::get() const')" = 1 ] || fail "ns::Box::get() const not demangled"
fi

# 5c. a program whose forked child outlives it: no false error from the child, status 0;
#     and --lazy-buffers records the same
cat >"$tmp/forker.c" <<'C'
#include <unistd.h>
static int work(int x) { return x * 2; }
int main(void) {
    if (fork() == 0) {
        usleep(200000);
        return work(0);
    }
    return work(0);
}
C
cc -std=c11 -O0 -finstrument-functions "$tmp/forker.c" -o "$tmp/forker"
mkdir -p "$tmp/tmpdir"
TMPDIR="$tmp/tmpdir" "$loupe" record -q -o "$tmp/log5c" -- "$tmp/forker" >"$tmp/out5c" 2>"$tmp/err5c" \
  || fail "forker: exit $?"
sleep 0.4
grep -q "could not write" "$tmp/err5c" && fail "false error from the forked child: $(cat "$tmp/err5c")"
[ -z "$(ls -A "$tmp/tmpdir")" ] || fail "result file left behind: $(ls "$tmp/tmpdir")"
"$loupe" record -q --lazy-buffers -o "$tmp/log5l" --print-run-dir "$tmp/run5l" \
  -- "$build/examples/instrumented" >/dev/null
run5l=$(cat "$tmp/run5l")
[ "$(count "$(ls "$run5l"/*.trace.json.gz)" main)" = 1 ] || fail "--lazy-buffers lost main"

# 6. an unusable log directory is refused before the program runs
set +e
"$loupe" record -o /proc/loupe-no -- sh -c 'echo RAN' >"$tmp/out6" 2>"$tmp/err6"; st=$?
set -e
[ $st = 120 ] || fail "unusable log dir should exit 120, got $st"
grep -q "cannot use the log directory /proc/loupe-no" "$tmp/err6" || fail "log dir message: $(cat "$tmp/err6")"
grep -q RAN "$tmp/out6" && fail "the program ran despite the unusable log dir"
# 7. a split XPlane (its parts <x>.part<k>.xplane.pb beside it: the limit lowered) is one
# process in the report, with its events once (0.4: "2 processes" and each part's whole counts
# again, 4x here)
LOUPE_TEST_XPLANE_PART_BYTES=100000 "$loupe" record -o "$tmp/log7" --print-run-dir "$tmp/run7" \
  -- "$build/tests/sig_probe" forks 1 30000 >/dev/null 2>"$tmp/err7" || fail "split: $(cat "$tmp/err7")"
parts=$(ls "$(cat "$tmp/run7")" | grep -c '\.part[0-9]*\.xplane\.pb$')
[ "$parts" -ge 2 ] || fail "split: $parts parts written: $(ls "$(cat "$tmp/run7")")"
grep -qx "loupe record: 2 processes, 60,000 events recorded, 0 dropped" "$tmp/err7" ||
  fail "split: the report: $(cat "$tmp/err7")"
[ "$(grep -c '^loupe record:   pid [0-9]* sig_probe: 60,000 events recorded, 0 dropped,' "$tmp/err7")" = 1 ] ||
  fail "split: the child's line: $(cat "$tmp/err7")"
grep -q '\.part[0-9]' "$tmp/err7" && fail "split: a part as a process: $(cat "$tmp/err7")"
# 8. loupe record's stderr a pipe whose reader is gone (`2>&1 | true`): the program's status (7),
# not SIGPIPE's 141, and nothing left in TMPDIR (0.4 died of SIGPIPE; the counts directory was
# left); the program's SIGPIPE disposition is its own (loupe record ignores it for itself only)
mkdir "$tmp/td8"
set +e
TMPDIR=$tmp/td8 "$loupe" record --no-sample -o "$tmp/log8" -- "$build/tests/sig_probe" forks 3 5 2>&1 | true
st=${PIPESTATUS[0]}
TMPDIR=$tmp/td8 "$loupe" record --no-sample -o "$tmp/log8" -- sh -c 'exit 7' 2>&1 | true
st7=${PIPESTATUS[0]}
set -e
[ "$st" = 0 ] && [ "$st7" = 7 ] || fail "stderr pipe closed: exit $st and $st7, want 0 and 7"
[ -z "$(ls -A "$tmp/td8")" ] || fail "stderr pipe closed: left in TMPDIR: $(ls -A "$tmp/td8")"
want=$(grep SigIgn /proc/self/status)
got=$("$loupe" record -q --no-sample -o "$tmp/log8" -- grep SigIgn /proc/self/status 2>/dev/null)
[ "$got" = "$want" ] || fail "the program's ignored signals: '$got', untraced '$want'"
echo "record_cli: stderr pipe closed: the program's status, nothing left; SigIgn as untraced"
echo "record_cli: all checks passed"
