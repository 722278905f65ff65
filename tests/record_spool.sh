#!/usr/bin/env bash
# record_spool.sh: `loupe record --spool` end to end. A program that records 5 times the
# session's capacity (--session-events) in paced bursts keeps every zone with the spool and by
# default (the spill spool), and drops most of them with --no-spool; a --spool-budget reached
# mid-run drops the rest, counted and named; the spool file is removed after the stop; --spool with
# --keep-last is refused; a program that dies after spooling is recovered whole, from its region
# and its spool file. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
name=record_spool
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
probe=$build/tests/spool_probe
zones=163840 # 327,680 events: 80 chunks, 5 times a capacity of 65,536 events (16 chunks)
meta() { # run dir, key -> the trace's metadata value ("" when absent)
  python3 - "$1" "$2" <<'PY'
import glob, gzip, json, sys
d = json.load(gzip.open(glob.glob(sys.argv[1] + "/*.trace.json.gz")[0]))
print(d.get("metadata", {}).get(sys.argv[2], ""))
PY
}
count() { # run dir -> spool_zone slices
  python3 - "$1" <<'PY'
import glob, gzip, json, sys
d = json.load(gzip.open(glob.glob(sys.argv[1] + "/*.trace.json.gz")[0]))
print(sum(1 for e in d["traceEvents"] if e.get("ph") == "X" and e.get("name") == "spool_zone"))
PY
}

# 1. with the spool: every zone
$loupe record -o "$tmp/log" --spool="$tmp/sp" --session-events 65536 --print-run-dir "$tmp/run1" \
  -- "$probe" $zones 512 2000 >/dev/null 2>"$tmp/err1" || fail "record --spool: $(cat "$tmp/err1")"
grep -qF "loupe record: 327,680 events recorded, 0 dropped" "$tmp/err1" ||
  fail "record --spool message: $(cat "$tmp/err1")"
run1=$(cat "$tmp/run1")
[ "$(count "$run1")" = $zones ] || fail "spool_zone count: $(count "$run1")"
[ -d "$tmp/sp" ] || fail "the spool directory was not made"
[ -z "$(ls "$tmp/sp")" ] || fail "spool files left: $(ls "$tmp/sp")"
[ -z "$(meta "$run1" loupe_spool_error)" ] || fail "loupe_spool_error: $(meta "$run1" loupe_spool_error)"
echo "record_spool: --spool: $zones zones, 0 dropped, the spool file removed"

# 2. --no-spool: the capacity holds 16 chunks of the 80 (16 x 4,096 events recorded)
$loupe record -o "$tmp/log" --no-spool --session-events 65536 --print-run-dir "$tmp/run2" \
  -- "$probe" $zones 512 2000 >/dev/null 2>"$tmp/err2" || fail "record: $(cat "$tmp/err2")"
grep -qF "loupe record: 65,536 events recorded, 262,144 dropped" "$tmp/err2" ||
  fail "record message: $(cat "$tmp/err2")"

# 2b. the default: past half the capacity the chunks spill to the log directory, every zone is
# kept (0.4 dropped 262,144 here), and the spool file is removed
$loupe record -o "$tmp/logd" --session-events 65536 --print-run-dir "$tmp/run2b" \
  -- "$probe" $zones 512 2000 >/dev/null 2>"$tmp/err2b" || fail "record: $(cat "$tmp/err2b")"
grep -qxF "loupe record: 327,680 events recorded, 0 dropped" "$tmp/err2b" ||
  fail "default spill message: $(cat "$tmp/err2b")"
[ "$(count "$(cat "$tmp/run2b")")" = $zones ] || fail "default spill: $(count "$(cat "$tmp/run2b")") zones"
[ -z "$(ls "$tmp/logd"/loupe-spool-*.bin 2>/dev/null)" ] || fail "default spill: the spool file was left"
echo "record_spool: the default spill: $zones zones in a capacity of 65,536 events, 0 dropped"

# 2c. a disk budget reached mid-run: 3 chunks fit 200K, then the spool stops; the capacity's 16
# chunks stay in memory and the rest is dropped, counted and named
$loupe record -o "$tmp/logb" --spool-budget 200K --session-events 65536 --print-run-dir "$tmp/run2c" \
  -- "$probe" $zones 512 2000 >/dev/null 2>"$tmp/err2c" || fail "record: $(cat "$tmp/err2c")"
grep -qxF "loupe record: 77,824 events recorded, 249,856 dropped" "$tmp/err2c" ||
  fail "budget message: $(cat "$tmp/err2c")"
grep -qx "loupe record: pid [0-9]*: the spool failed: the spool $tmp/logb/loupe-spool-[0-9]*\.bin reached its budget of 200.0 KiB (as given) after 3 chunks; later events past the session's capacity were dropped" "$tmp/err2c" ||
  fail "budget line: $(cat "$tmp/err2c")"
[ "$(count "$(cat "$tmp/run2c")")" = 38912 ] || fail "budget: $(count "$(cat "$tmp/run2c")") zones, want 38,912"
for bad in 0 10X -5 none5; do
  $loupe record --spool-budget "$bad" -- true 2>"$tmp/errbad"; st=$?
  [ $st = 120 ] && grep -qxF "loupe record: --spool-budget: \"$bad\" is not a size (a whole number of bytes, or with K, M, G or T: 20G; or none)" "$tmp/errbad" ||
    fail "--spool-budget $bad: exit $st: $(cat "$tmp/errbad")"
done
echo "record_spool: --spool-budget 200K: 3 chunks spooled, 16 in memory, 249,856 events dropped and named"

# 3. --spool (=log dir) with --keep-last
$loupe record -o "$tmp/log" --spool --keep-last -- true 2>"$tmp/err3"; st=$?
[ $st = 120 ] || fail "--spool --keep-last: exit $st, want 120"
grep -qF "loupe record: --spool keeps the first events; it cannot be combined with --keep-last" \
  "$tmp/err3" || fail "--spool --keep-last message: $(cat "$tmp/err3")"

# 4. a program that dies after spooling: recovered from its region and its spool file, every
# zone; the spool file is removed once the trace is written
if [ -n "$sanitize" ]; then
  echo "record_spool: death: skipped in a sanitizer build (the probe dies on purpose)"
  exit 0
fi
$loupe record -o "$tmp/log" --spool --session-events 65536 --print-run-dir "$tmp/run4" \
  -- "$probe" $zones 512 2000 die >/dev/null 2>"$tmp/err4"; st=$?
[ $st = 137 ] || fail "death: exit $st, want 137"
grep -qF "killed by signal 9 (Killed); 327,680 events recovered, 0 dropped" "$tmp/err4" ||
  fail "death: message: $(cat "$tmp/err4")"
run4=$(cat "$tmp/run4")
[ "$(count "$run4")" = $zones ] || fail "death: $(count "$run4") zones recovered, want $zones"
[ -z "$(ls "$tmp/log"/loupe-spool-*.bin 2>/dev/null)" ] || fail "death: the spool file was left"
[ -z "$(meta "$run4" loupe_spool_missing)" ] || fail "death: $(meta "$run4" loupe_spool_missing)"
echo "record_spool: death: $zones zones recovered from the region and the spool file"
