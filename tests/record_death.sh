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
grep -qF "the region's layout is version 3, this loupe reads version 4 only (recover it with the loupe that recorded it)" "$tmp/err-v3" ||
  fail "v3: $(cat "$tmp/err-v3")"
# a dump cut short (a copy that stopped early) is named as such
head -c 1000000 "$dump" >"$tmp/cut.region"
"$build/loupe" recover "$tmp/cut.region" 2>"$tmp/err-cut"; st=$?
[ "$st" = 1 ] || fail "cut: exit $st"
grep -qF "the region is cut short: its header says" "$tmp/err-cut" || fail "cut: $(cat "$tmp/err-cut")"
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
