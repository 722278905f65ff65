#!/usr/bin/env bash
# record_shm.sh: every process of a tree is kept or counted, whatever room the regions' file
# system (/dev/shm) has. A shared region grows with what its process records (region.c), not
# by a whole session's 1.1 GiB per process: 0.4 gave a recoverable region to about 20
# processes on a 24 GB /dev/shm and recorded the rest where a death lost them, uncounted
# ("21 processes, 20 events recorded, 0 dropped" for 500 children). Cases:
#   1. 2,000 children, 50 alive at a time, each one zone and _exit(): 2,000 zones, 0 dropped;
#   2. in a 64 MiB /dev/shm (a mount namespace of the test's own; root only): 200 children of
#      20,000 zones each (40,000 events: 125 MiB of regions in all), 20 alive at a time, each
#      ending with _exit(). The file system fills: what did not fit is lost with its process
#      and counted, so kept + dropped is exactly 8,000,000, and the report names the cause.
# Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
loupe=$build/loupe
probe=$build/tests/sig_probe
name=record_shm
# Not under sanitizers: 2,000 forked children of a threaded parent with the preloaded ASan
# runtime hang in it (1,000 children stopped in the asan-ubsan stage; 500 finished in 2.6 s).
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
[ -n "$sanitize" ] && { echo "record_shm: skipped: sanitizer build (forked children hang in the preloaded ASan runtime)"; exit 77; }
. "$2/tests/probes/record_under_sanitizer.sh"

zones_dropped() { # RUN_DIR: "<child_work zones> <events dropped>" from loupe summary --json
  "$loupe" summary "$1" --json 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(sum(r["count"] for r in d["zones"] if r["name"] == "child_work"), d["events_dropped"])'
}

# 1. 2,000 short children, 50 at a time
"$loupe" record -q -o "$tmp/log1" --print-run-dir "$tmp/run1" -- "$probe" forks 2000 1 50 \
  >/dev/null 2>"$tmp/err1" || fail "2000 children: $(cat "$tmp/err1")"
got=$(zones_dropped "$(cat "$tmp/run1")")
[ "$got" = "2000 0" ] || fail "2000 children: child_work zones, dropped: $got; $(tail -3 "$tmp/err1")"
grep -q "events recorded" "$tmp/err1" && fail "2000 children: -q said a loss: $(cat "$tmp/err1")"
echo "record_shm: 2000 children that _exit(), 50 alive at a time: 2000 zones kept, 0 dropped"

# 2. a 64 MiB /dev/shm
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "record_shm: skipped the 64 MiB /dev/shm case: needs root and mount namespaces"
  exit 0
fi
cat >"$tmp/small.sh" <<EOF
mount -t tmpfs -o size=64m tmpfs /dev/shm || exit 99
"$loupe" record -q -o "$tmp/log2" --print-run-dir "$tmp/run2" -- "$probe" forks 200 20000 20
EOF
unshare -m sh "$tmp/small.sh" >/dev/null 2>"$tmp/err2"; st=$?
[ "$st" = 99 ] && { echo "record_shm: skipped the 64 MiB case: cannot mount a tmpfs"; exit 0; }
[ "$st" = 0 ] || fail "64 MiB: exit $st: $(tail -5 "$tmp/err2")"
read -r zones dropped <<<"$(zones_dropped "$(cat "$tmp/run2")")"
# A child that starts while the file system is full has no room for even its region's first
# pages: its events live in its own memory only, and its death loses them uncounted; loupe record
# says how many such processes there were ("N processes died with their events in their own
# memory, not counted"), and each of them recorded 40,000 events. Seen in 1 of 4 stage runs since
# the children start faster (the server libraries are no longer loaded into each): not counted
# yet (issue 20: counting them needs the dying process to say its count somewhere with room).
uncounted=$(sed -n 's/^loupe record: \([0-9]*\) process\(es\)\{0,1\} died with .* not counted: .*/\1/p' "$tmp/err2")
uncounted=${uncounted:-0}
[ $((zones * 2 + dropped + uncounted * 40000)) = 8000000 ] ||
  fail "64 MiB: $zones zones x 2 + $dropped dropped + $uncounted uncounted processes x 40000 is not 8000000: $(tail -3 "$tmp/err2")"
[ "$dropped" -gt 0 ] || fail "64 MiB: nothing dropped (the file system did not fill?)"
[ "$zones" -gt 400000 ] || fail "64 MiB: only $zones zones kept"
# -q: the one line of totals, with the cause and the count the summary has
line=$(grep "events recorded" "$tmp/err2")
kept=$(printf '%s' "$line" | sed -n 's/.*processes, \([0-9,]*\) events recorded.*/\1/p' | tr -d ,)
said=$(printf '%s' "$line" | sed -n 's/.* events recorded, \([0-9,]*\) dropped (\([0-9,]*\) lost with .*/\1 \2/p' | tr -d ,)
[ "$kept" = $((zones * 2)) ] && [ "$said" = "$dropped $dropped" ] || fail "64 MiB: the report: $line"
printf '%s' "$line" | grep -qF "processes that died: the regions' file system (/dev/shm) had no room for them, so they were recorded in the processes' own memory; a larger /dev/shm keeps them)" ||
  fail "64 MiB: the cause: $line"
grep -q "rerun with --buffer-events" "$tmp/err2" && fail "64 MiB: a capacity hint: $line"
echo "record_shm: 64 MiB /dev/shm, 200 children of 40000 events: $((zones * 2)) kept + $dropped counted lost + $uncounted processes said uncounted = 8000000"
