#!/usr/bin/env bash
# cli_reader_warnings.sh: loupe convert and loupe diff say what the reader dropped or repaired in
# their input, as loupe summary does (0.4's convert and diff said nothing of a cut file): the
# warning on stderr, in diff --json's "warnings", and in the converted file's metadata
# ("loupe_reader_warnings") in every format that has metadata, read back by summary --json and
# kept through a second conversion. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
name=cli_reader_warnings
. "$2/tests/probes/record_under_sanitizer.sh"
$loupe record -q -o "$tmp/log" --print-run-dir "$tmp/run" -- "$build/tests/sig_probe" forks 3 \
  >/dev/null 2>"$tmp/err0" || fail "record: $(cat "$tmp/err0")"
$loupe convert "$(cat "$tmp/run")" -o "$tmp/all.trace.json" 2>"$tmp/err1" || fail "convert: $(cat "$tmp/err1")"
grep -q warning "$tmp/err1" && fail "a whole run gave a warning: $(cat "$tmp/err1")"
size=$(stat -c %s "$tmp/all.trace.json")
cut=$((size - 100))
head -c "$cut" "$tmp/all.trace.json" >"$tmp/cut.trace.json"
want="cut.trace.json: the top-level object is not closed: the input ends at byte $cut; keys after that point (\"metadata\", loss accounting) are lost"
(cd "$tmp" && $loupe convert cut.trace.json -o cut.pftrace) 2>"$tmp/err2" || fail "convert cut: $(cat "$tmp/err2")"
grep -qxF "loupe convert: warning: $want" "$tmp/err2" || fail "convert: $(cat "$tmp/err2")"
# the mark in the output: each converted file, read back (a clean read: no warning) and written
# as JSON, carries the cut file's warning in its metadata
meta() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["metadata"].get("loupe_reader_warnings"))' "$1"; }
for out in cut.pftrace cut2.trace.json cut3.xplane.pb; do
  if [ "$out" != cut.pftrace ]; then
    (cd "$tmp" && $loupe convert cut.trace.json -o "$out") 2>/dev/null || fail "convert to $out"
  fi
  (cd "$tmp" && $loupe convert "$out" -o back.json) 2>"$tmp/err4" || fail "convert $out back: $(cat "$tmp/err4")"
  grep -q warning "$tmp/err4" && fail "$out read back with a warning: $(cat "$tmp/err4")"
  got=$(meta "$tmp/back.json")
  [ "$got" = "$want" ] || fail "$out: loupe_reader_warnings is '$got', want '$want'"
done
(cd "$tmp" && $loupe diff cut.trace.json all.trace.json --json) >"$tmp/diff.json" 2>"$tmp/err3"
st=$?
[ "$st" = 0 ] || [ "$st" = 1 ] || fail "diff: exit $st: $(cat "$tmp/err3")"
grep -qxF "loupe diff: warning: BASE: $want" "$tmp/err3" || fail "diff stderr: $(cat "$tmp/err3")"
got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["warnings"])' "$tmp/diff.json")
[ "$got" = "['BASE: ${want//\"/\"}']" ] || fail "diff --json warnings: $got"
echo "cli_reader_warnings: a file cut 100 bytes short: convert and diff (stderr and --json) say so"
