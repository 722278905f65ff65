#!/usr/bin/env bash
# cli_progress.sh: loupe summary, convert and diff show a progress meter on stderr while they
# read, when stderr is a terminal (a pty from script(1) here), and nothing otherwise
# (cli/util.c loupe_cli_progress_begin; src/base/progress.h): one line redrawn with "\r", each
# draw ending in ESC[K, the reading of the file and then the XPlane's decoding, and the line
# cleared ("\r" ESC[K) before the command's own output. LOUPE_PROGRESS_AFTER_MS=0 shows it at
# once (the default waits 1 s, which a test cannot rely on); a wait longer than the read shows
# none. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v script >/dev/null || { echo "cli_progress: skipped: no script(1) for a terminal"; exit 77; }
loupe=$build/loupe
# 200,000 slices on one thread (more than the 65,536 events between two decoding reports)
python3 - "$tmp/t.trace.json" <<'PY'
import json, sys
ev = [{"ph": "X", "name": "z%d" % (i % 7), "ts": i * 2, "dur": 1, "pid": 1, "tid": 1}
      for i in range(200000)]
json.dump({"traceEvents": ev}, open(sys.argv[1], "w"))
PY
"$loupe" convert "$tmp/t.trace.json" -o "$tmp/t.xplane.pb" 2>"$tmp/err0" || fail "convert: $(cat "$tmp/err0")"
on_tty() { # OUT CMD...: CMD with stdout and stderr on a pty, its bytes into OUT
  local out=$1; shift
  script -qec "$*" /dev/null </dev/null >"$out" 2>&1
}
on_tty "$tmp/s.out" "LOUPE_PROGRESS_AFTER_MS=0 $loupe summary $tmp/t.xplane.pb" || fail "summary on a tty: $(cat "$tmp/s.out")"
python3 - "$tmp/s.out" <<'PY' || exit 1
import re, sys
b = open(sys.argv[1], "rb").read().decode()
head, sep, rest = b.partition("\r\x1b[K")
if not sep:
    sys.exit("FAIL: the meter's line was not cleared: %r" % b[:300])
draws = head.split("\r")[1:]
if not draws or head.split("\r")[0] != "":
    sys.exit("FAIL: no meter before the output: %r" % b[:300])
pat = re.compile(r"loupe summary: (reading|decoding) t\.xplane\.pb: +(\d+)% \(\d+\.\d of (\d+\.\d) MiB\)\x1b\[K$")
stages = []
for d in draws:
    m = pat.match(d)
    if not m:
        sys.exit("FAIL: a meter line reads %r" % d)
    stages.append((m.group(1), int(m.group(2))))
if "decoding" not in [s for s, _ in stages]:
    sys.exit("FAIL: no decoding stage in %r" % stages)
if any(p > 100 for _, p in stages):
    sys.exit("FAIL: a share over 100%%: %r" % stages)
if "200000 slices" not in rest.replace(",", ""):
    sys.exit("FAIL: the summary after the meter: %r" % rest[:300])
print("cli_progress: summary on a terminal: %d draws (%s), cleared before its output" %
      (len(draws), ", ".join(sorted(set(s for s, _ in stages)))))
PY
for verb in "convert $tmp/t.xplane.pb -o $tmp/back.trace.json" "diff $tmp/t.xplane.pb $tmp/t.xplane.pb"; do
  v=${verb%% *}
  on_tty "$tmp/$v.out" "LOUPE_PROGRESS_AFTER_MS=0 $loupe $verb" || fail "$v on a tty: $(cat "$tmp/$v.out")"
  grep -aq "loupe $v: decoding t.xplane.pb: " "$tmp/$v.out" || fail "$v: no meter: $(head -c 300 "$tmp/$v.out" | od -c | head)"
  grep -aqF $'\r\e[K' "$tmp/$v.out" || fail "$v: the meter's line was not cleared"
done
echo "cli_progress: convert and diff on a terminal: the meter, then cleared"
# not a terminal: nothing of the meter
LOUPE_PROGRESS_AFTER_MS=0 "$loupe" summary "$tmp/t.xplane.pb" >"$tmp/n.out" 2>"$tmp/n.err" || fail "summary: $(cat "$tmp/n.err")"
[ ! -s "$tmp/n.err" ] || fail "summary with stderr not a terminal wrote to it: $(od -c "$tmp/n.err" | head -3)"
# a wait longer than the read: nothing either
on_tty "$tmp/w.out" "LOUPE_PROGRESS_AFTER_MS=3600000 $loupe summary $tmp/t.xplane.pb" || fail "summary (wait)"
grep -aq "decoding" "$tmp/w.out" && fail "a meter before its wait: $(head -c 200 "$tmp/w.out")"
grep -aq "200000 slices" "$tmp/w.out" || fail "summary (wait): $(head -c 300 "$tmp/w.out")"
echo "cli_progress: not a terminal, or a read shorter than the wait: no meter"
