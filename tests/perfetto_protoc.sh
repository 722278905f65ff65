#!/usr/bin/env bash
# perfetto_protoc.sh: `loupe record --format` and the .pftrace it writes, checked by protoc against
# loupe's schema subset (proto/perfetto_trace.proto, field numbers from Perfetto's protos):
# every packet decodes with the declared types, the sequence starts cleared with a clock
# snapshot, events are interned and incremental, and the slices match the JSON written beside
# it. protoc is blind to packing: tests/test_perfetto.c checks the wire types.
# Args: BUILD_DIR SOURCE_DIR. Needs protoc (Debian protobuf-compiler, in tools/setup.sh).
set -euo pipefail
build=$1
src=$2
loupe="$build/loupe"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
name=perfetto_protoc
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
command -v protoc >/dev/null || fail "protoc not found: install protobuf-compiler (tools/setup.sh)"

# 1. --format picks the files: here the .pftrace and the JSON, not perfetto_trace.json.gz
"$loupe" record -q -o "$tmp/log" --format perfetto,json --print-run-dir "$tmp/run" \
  -- "$build/examples/instrumented" >/dev/null
run_dir=$(cat "$tmp/run")
[ -d "$run_dir" ] || fail "no run directory printed: '$run_dir'"
pf=$(ls "$run_dir"/*.pftrace)
ls "$run_dir"/*.trace.json.gz >/dev/null || fail "json not written"
[ ! -e "$run_dir/perfetto_trace.json.gz" ] || fail "perfetto_trace.json.gz written unasked"
[ "$(head -c 1 "$pf" | od -An -tx1 | tr -d ' ')" = 0a ] || fail "not a Trace (first byte)"

# 2. protoc decodes it with loupe's subset: the file, whose packets are compressed_packets only,
# then the packets they hold (inflated with Python's zlib, joined: a Trace again)
protoc --decode=perfetto.protos.Trace -I "$src/proto" "$src/proto/perfetto_trace.proto" \
  < "$pf" > "$tmp/outer.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "protoc --decode (outer)"; }
outer=$(grep -c '^packet {' "$tmp/outer.txt")
[ "$outer" -ge 1 ] && [ "$(grep -c '^  compressed_packets: ' "$tmp/outer.txt")" = "$outer" ] &&
  [ "$(grep -vc '^packet {\|^  compressed_packets: \|^}' "$tmp/outer.txt")" = 0 ] ||
  fail "the file's packets are not all compressed_packets alone"
cat > "$tmp/inflate.py" <<'PY'
import sys, zlib
data, out, i = open(sys.argv[1], "rb").read(), b"", 0
def varint(i):
    v, s = 0, 0
    while True:
        b = data[i]; i += 1; v |= (b & 0x7F) << s; s += 7
        if b < 0x80:
            return v, i
while i < len(data):
    assert data[i] == 0x0A
    n, i = varint(i + 1)
    assert data[i:i + 2] == b"\x92\x03"  # field 50, length-delimited
    m, j = varint(i + 2)
    assert j + m == i + n, "compressed_packets alone in its packet"
    out += zlib.decompress(data[j:j + m])
    i += n
open(sys.argv[2], "wb").write(out)
PY
python3 "$tmp/inflate.py" "$pf" "$tmp/inner.pb" || fail "inflate"
protoc --decode=perfetto.protos.Trace -I "$src/proto" "$src/proto/perfetto_trace.proto" \
  < "$tmp/inner.pb" > "$tmp/decoded.txt" 2> "$tmp/err.txt" || { cat "$tmp/err.txt" >&2; fail "protoc --decode"; }
! grep -q "compressed_packets" "$tmp/decoded.txt" || fail "compressed_packets nested"
protoc --decode_raw < "$pf" > /dev/null || fail "protoc --decode_raw"
protoc --decode_raw < "$tmp/inner.pb" > /dev/null || fail "protoc --decode_raw (inner)"
python3 - "$tmp/decoded.txt" "$run_dir" <<'PY' || fail "decoded trace does not match"
import glob, gzip, json, re, sys
text = open(sys.argv[1]).read()
packets = text.split("\npacket {")
def need(cond, what):
    if not cond:
        print("FAIL:", what); sys.exit(1)
first = packets[0]
need("trusted_packet_sequence_id: 1" in first and "sequence_flags: 1" in first, "first packet clears")
need("clock_id: 64" in first and "is_incremental: true" in first, "incremental clock in the snapshot")
need("clock_id: 6" in first, "BOOTTIME in the snapshot")
need(len(re.findall(r"trusted_packet_sequence_id: (\d+)", text)) == len(packets), "every packet has a sequence id")
seqs = set(int(x) for x in re.findall(r"trusted_packet_sequence_id: (\d+)", text))
# 1: descriptors, metadata, counters; 2: the CPU samples (loupe record samples by default) when
# there are any; 3 onwards: one per track, each started with its defaults
need(1 in seqs and min(seqs) == 1 and (2 not in seqs or "perf_sample {" in text), f"sequences {seqs}")
track_seqs = sorted(x for x in seqs if x >= 3)
need(track_seqs and track_seqs == list(range(3, 3 + len(track_seqs))), f"track sequences {track_seqs}")
need(text.count("track_event_defaults {") == len(track_seqs), "one track default per track sequence")
need(text.count("sequence_flags: 1") == len(seqs), "each sequence cleared once")
need("timestamp_clock_id: 64" in text, "packet defaults: clock 64")
need('thread_name: "main"' in text, "the main thread's descriptor")
begins = text.count("type: TYPE_SLICE_BEGIN")
ends = text.count("type: TYPE_SLICE_END")
need(begins == ends and begins > 0, f"BEGIN {begins} / END {ends}")
names = dict(re.findall(r'event_names \{\s*iid: (\d+)\s*name: "((?:[^"\\]|\\.)*)"', text))
need("fib" in names.values() and "main" in names.values(), "function names interned")
need(len(names) == len(set(names)), "iids defined once")
trace = glob.glob(sys.argv[2] + "/*.trace.json.gz")[0]
d = json.load(gzip.open(trace))
xs = sum(1 for e in d["traceEvents"] if e.get("ph") == "X")
need(xs == begins, f"{xs} JSON slices vs {begins} BEGINs")
PY

# 3. the same model through the reader: summary reads the .pftrace
"$loupe" summary "$pf" > "$tmp/sum_pf.txt" || fail "loupe summary of the .pftrace"
"$loupe" summary "$(ls "$run_dir"/*.trace.json.gz)" > "$tmp/sum_json.txt" || fail "summary json"
diff <(grep -v -i "file\|trace:" "$tmp/sum_pf.txt") <(grep -v -i "file\|trace:" "$tmp/sum_json.txt") \
  || fail "summary of the .pftrace differs from the JSON's"

# 4. loupe convert --no-compress: the packets as they are (no compressed_packets), the same model
"$loupe" convert "$pf" -o "$tmp/plain.pftrace" --no-compress || fail "convert --no-compress"
"$loupe" convert "$pf" -o "$tmp/comp.pftrace" || fail "convert"
python3 "$tmp/inflate.py" "$tmp/comp.pftrace" "$tmp/comp_inner.pb" || fail "inflate the converted"
cmp "$tmp/plain.pftrace" "$tmp/comp_inner.pb" || fail "--no-compress differs from the inflated packets"
"$loupe" summary "$tmp/plain.pftrace" > "$tmp/sum_plain.txt" || fail "summary of the plain file"
diff <(grep -v -i "file\|trace:" "$tmp/sum_plain.txt") <(grep -v -i "file\|trace:" "$tmp/sum_pf.txt") \
  || fail "summary of the plain .pftrace differs"
set +e
"$loupe" convert "$pf" -o "$tmp/x.json" --no-compress 2> "$tmp/err3.txt"
rc=$?
set -e
[ "$rc" = 2 ] || fail "--no-compress to JSON: exit $rc"
grep -qxF "loupe convert: --no-compress is for the Perfetto protobuf, not json" "$tmp/err3.txt" \
  || fail "--no-compress message: $(cat "$tmp/err3.txt")"

# 5. --format errors
set +e
"$loupe" record -o "$tmp/log2" --format perfetto,bogus -- true 2> "$tmp/err2.txt"
rc=$?
set -e
[ "$rc" = 120 ] || fail "bad --format: exit $rc"
grep -qxF "loupe record: --format 'perfetto,bogus': 'bogus': unknown format (known: json, xplane, perfetto and perfetto-json)" "$tmp/err2.txt" || fail "bad --format message: $(cat "$tmp/err2.txt")"
echo "ok"
