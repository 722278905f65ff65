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
# Under sanitizers the preloaded library would need the sanitizer runtime first: skip there.
if grep -q '^LOUPE_SANITIZE:STRING=.\+' "$build/CMakeCache.txt"; then
  echo "skipped: sanitizer build (LD_PRELOAD of an instrumented library)"; exit 0
fi
count() { # file, exact JSON text to count
  python3 - "$1" "$2" <<'PY'
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
print(sum(1 for e in d["traceEvents"] if e.get("ph") == "X" and e.get("name") == sys.argv[2]))
PY
}

# 1. function tracing of an uninstrumented-by-loupe program
run_dir=$("$loupe" record -q -o "$tmp/log" -- "$build/examples/instrumented" | tail -n 1)
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
"$loupe" record -q -o "$tmp/log2" -- "$build/examples/compress_workload" --max-files 40 >"$tmp/out" \
  || fail "compress_workload failed"
run2=$(tail -n 1 "$tmp/out")
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
[ $st = 127 ] || fail "127 expected for a missing program, got $st"
grep -q "cannot run '/nonexistent/prog'" "$tmp/err" || fail "missing-program message"
"$loupe" record --level 9 -- true 2>"$tmp/err"; st=$?
[ $st = 2 ] || fail "bad --level should exit 2"
grep -q "must be 0, 1, 2 or 3, not '9'" "$tmp/err" || fail "--level message: $(cat "$tmp/err")"
"$loupe" record --buffer-events 10 -- true 2>"$tmp/err"; st=$?
[ $st = 2 ] || fail "bad --buffer-events should exit 2"
"$loupe" record 2>"$tmp/err"; st=$?
[ $st = 2 ] || fail "no program should exit 2"
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
grep -q "dropped (rerun with --buffer-events" "$tmp/err4" || fail "drop hint: $(cat "$tmp/err4")"
echo "record_cli: all checks passed"
