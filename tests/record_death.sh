#!/usr/bin/env bash
# record_death.sh: nothing is lost when the traced program dies. Under `loupe record` a program
# killed by SIGKILL, a SIGSEGV, abort() or _exit() has every event it recorded written to a run
# directory by loupe record (from the memfd the program recorded into), with the open zone
# truncated at the death and the cause said; an exec writes the image's trace itself (the
# preload's exec wrappers); alone, a fatal signal dumps the region and
# `loupe recover` writes its run directory. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
[ -n "$sanitize" ] && { echo "record_death: skipped: sanitizer build (the probe dies on purpose, and a preloaded sanitizer runtime reports it)"; exit 77; }
probe=$build/tests/die_probe
summary() { # run dir -> "slices truncated" from loupe summary --json
  "$build/loupe" summary "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
z = {r["name"]: r for r in d["zones"]}
print(z["worker_zone"]["count"], z["main_zone"]["count"], z["open_at_death"]["count"], d["truncated_zones"])'
}
for how in kill segv abort _exit exec; do
  rm -f "$tmp/run-$how"
  "$build/loupe" record -o "$tmp/log-$how" --print-run-dir "$tmp/run-$how" -- "$probe" "$how" \
    >/dev/null 2>"$tmp/err-$how"; st=$?
  out=$(cat "$tmp/run-$how" 2>/dev/null)
  case $how in
    kill) want_st=137; cause="killed by signal 9 (Killed)" ;;
    segv) want_st=139; cause="killed by signal 11 (Segmentation fault)" ;;
    abort) want_st=134; cause="killed by signal 6 (Aborted)" ;;
    _exit) want_st=7; cause="exited with status 7 without stopping its session (_exit() or exec())" ;;
    exec) want_st=0; cause="" ;;
  esac
  [ "$st" = "$want_st" ] || fail "$how: exit status $st, want $want_st"
  if [ "$how" = exec ]; then
    # the preload's execl() writes the image's trace before the exec (the open zone truncated
    # at the stop), and /bin/true, traced from its start, writes <host>.<pid>.1.*
    grep -qxF "loupe record: 2 processes, 35,001 events recorded, 0 dropped" "$tmp/err-$how" ||
      fail "$how: message: $(cat "$tmp/err-$how")"
  else
    grep -qF "loupe record: $probe $cause; 35,001 events recovered, 0 dropped" "$tmp/err-$how" ||
      fail "$how: message: $(cat "$tmp/err-$how")"
  fi
  [ -d "$out" ] || fail "$how: no run directory printed ($out)"
  got=$(summary "$out" 2>"$tmp/sumerr-$how") || fail "$how: summary failed: $(cat "$tmp/sumerr-$how"; ls -la "$out")"
  [ "$got" = "5000 10000 1 1" ] || fail "$how: zones/truncated: $got"
  echo "record_death: $how: exit $st, 35,001 events recovered or written, the open zone truncated"
done
# alone: a SIGSEGV dumps the region, loupe recover writes the run directory
"$probe" segv "$tmp/alone" 2>"$tmp/err-alone"; st=$?
[ "$st" = 139 ] || fail "alone: exit status $st, want 139"
dump=$(ls "$tmp/alone"/loupe-crash-*.region 2>/dev/null)
[ -n "$dump" ] || fail "alone: no dump: $(cat "$tmp/err-alone")"
grep -qF "what it recorded is in $dump" "$tmp/err-alone" || fail "alone: message: $(cat "$tmp/err-alone")"
# the dump ends after its last used chunk (the 1 GiB pool is not in the file); a plain copy
# without --sparse (holes filled in) still recovers
size=$(stat -c %s "$dump")
[ "$size" -lt $((128 << 20)) ] || fail "alone: the dump is $size bytes"
cat "$dump" >"$tmp/plain.region"
"$build/loupe" recover "$tmp/plain.region" -o "$tmp/plain" 2>"$tmp/err-plain" ||
  fail "plain copy: $(cat "$tmp/err-plain")"
echo "record_death: the dump is $size bytes"
# a region of another layout version (3: arguments in two slots) is refused, naming both
# versions (the header's uint32 version follows its 8-byte magic, little-endian)
cp "$dump" "$tmp/v3.region"
printf '\003\000\000\000' | dd of="$tmp/v3.region" bs=1 seek=8 conv=notrunc status=none
"$build/loupe" recover "$tmp/v3.region" -o "$tmp/v3" 2>"$tmp/err-v3"; st=$?
[ "$st" = 1 ] || fail "v3: exit $st"
grep -qF "the region's layout is version 3, this loupe reads version 8 only (recover it with the loupe that recorded it)" "$tmp/err-v3" ||
  fail "v3: $(cat "$tmp/err-v3")"
# a dump cut short (a copy that stopped early) is recovered as far as it goes, what was lost
# said and counted as dropped, the dump kept. The worker (joined first) filled chunks 0..3 (15,000
# events), main chunks 4..8 (20,001: its last chunk 20,001 - 4 x 4,096 = 3,617 events).
size=$(stat -c %s "$dump")
chunk_off=$(od -An -t u8 -j 56 -N 8 "$dump" | tr -d ' ') # loupe__region_hdr.chunk_off
head -c 1000000 "$dump" >"$tmp/cut.region" # before the chunks: every event lost
"$build/loupe" recover "$tmp/cut.region" -o "$tmp/cut" 2>"$tmp/err-cut" >/dev/null; st=$?
[ "$st" = 0 ] || fail "cut: exit $st: $(cat "$tmp/err-cut")"
grep -qxF "loupe recover: warning: the region was cut short: its header says $size bytes, the file held 1000000; 9 chunks in use (35001 events) were past the cut, lost (the dump is kept)" "$tmp/err-cut" ||
  fail "cut: $(cat "$tmp/err-cut")"
grep -qxF "loupe recover: 0 events recovered, 35,001 dropped" "$tmp/err-cut" || fail "cut: $(cat "$tmp/err-cut")"
[ -e "$tmp/cut.region" ] || fail "cut: the dump was removed"
cut=$((chunk_off + 8 * 65536 + 100)) # main's last chunk only partly in the file: lost
head -c "$cut" "$dump" >"$tmp/cut8.region"
run=$("$build/loupe" recover "$tmp/cut8.region" -o "$tmp/cut8" 2>"$tmp/err-cut8") || fail "cut8: $(cat "$tmp/err-cut8")"
grep -qxF "loupe recover: warning: the region was cut short: its header says $size bytes, the file held $cut; 1 chunk in use (3617 events) was past the cut, lost (the dump is kept)" "$tmp/err-cut8" ||
  fail "cut8: $(cat "$tmp/err-cut8")"
grep -qxF "loupe recover: 31,384 events recovered, 3,617 dropped" "$tmp/err-cut8" || fail "cut8: $(cat "$tmp/err-cut8")"
# main's 4 whole chunks: 16,384 events, 8,192 zones; the open zone was in the lost chunk
got=$("$build/loupe" summary "$run" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
z = {r["name"]: r["count"] for r in d["zones"]}
print(z.get("worker_zone"), z.get("main_zone"), z.get("open_at_death"), d["events_dropped"])')
[ "$got" = "5000 8192 None 3617" ] || fail "cut8: zones/dropped: $got"
echo "record_death: cut dumps: 35,001 and 3,617 events lost, said and counted"
run=$("$build/loupe" recover "$dump" 2>"$tmp/err-recover") || fail "recover: $(cat "$tmp/err-recover")"
grep -qF "loupe recover: 35,001 events recovered, 0 dropped" "$tmp/err-recover" || fail "recover message: $(cat "$tmp/err-recover")"
[ ! -e "$dump" ] || fail "recover left the dump"
got=$(summary "$run") || fail "alone: summary failed"
[ "$got" = "5000 10000 1 1" ] || fail "alone: zones/truncated: $got"
echo "record_death: alone: SIGSEGV dump recovered, 35,001 events"
# a dump that is not a region is refused clearly
head -c 5000 /dev/urandom | tr -d 'L' >"$tmp/junk.region" # no "LOUPERGN" by chance
"$build/loupe" recover "$tmp/junk.region" 2>"$tmp/err-junk"; st=$?
[ "$st" = 1 ] || fail "junk: exit $st"
grep -qE "not a loupe recording region, or its header is damaged \([0-9]+ bytes\)" "$tmp/err-junk" || fail "junk: $(cat "$tmp/err-junk")"
echo "record_death: all checks passed"
