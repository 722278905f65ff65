#!/usr/bin/env bash
# perfetto_schema.sh: the .pftrace files loupe writes, parsed by Perfetto's own schema: the
# perfetto_trace_pb2 module that the `perfetto` PyPI package ships (generated from Perfetto's
# protos/perfetto/trace/perfetto_trace.proto; its trace_processor needs a download, so it is not
# run). Every packet of a recorded run (zones and CPU samples) and of a converted two-process
# trace with an async track and counters must parse with no field left unknown, and the packet
# counts must match the file's. A converted trace of 66,000 threads (more than the 65,536
# sequences loupe's reader takes, base/perfetto.h) keeps to that limit: its tracks share
# sequences, and each of its 66,000 slices lands, by Perfetto's rules (an event's track_uuid,
# else its sequence's track_event_defaults), on its own thread's track; loupe reads it back whole. Needs pip packages perfetto and protobuf in a venv:
# $LOUPE_PERFETTO_VENV when set, else BUILD_DIR/../.venv-perfetto when that directory is
# writable, else BUILD_DIR/perfetto-venv, filled once under an flock (bounded by
# LOUPE_PIP_TIMEOUT seconds, default 420). Skipped (77) when pip cannot fill it.
# Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
src=$2
name=perfetto_schema
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "$name: FAIL: $*" >&2; exit 1; }
. "$src/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)

if [ -n "${LOUPE_PERFETTO_VENV:-}" ]; then
  venv=$LOUPE_PERFETTO_VENV
elif [ -w "$build/.." ]; then
  venv=$(cd "$build/.." && pwd)/.venv-perfetto
else
  venv=$build/perfetto-venv
fi
py=$venv/bin/python
check_import() { "$py" -c 'from perfetto.protos.perfetto.trace import perfetto_trace_pb2' 2>/dev/null; }
if [ ! -f "$venv/.loupe-ready" ]; then
  mkdir -p "$(dirname "$venv")"
  exec 9>"$venv.lock"
  if command -v flock >/dev/null; then
    flock -w $(( ${LOUPE_PIP_TIMEOUT:-420} + 120 )) 9 || fail "$venv.lock still held"
  fi
  if [ -f "$venv/.loupe-ready" ]; then
    :
  elif [ -n "${LOUPE_PERFETTO_VENV:-}" ] && check_import; then
    touch "$venv/.loupe-ready"
  else
    rm -rf "$venv"
    echo "$name: installing perfetto and protobuf into $venv (pip, once)"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      echo "$name: SKIPPED: python3 -m venv failed (Debian: apt-get install python3-venv)"
      exit 77
    fi
    if ! timeout "${LOUPE_PIP_TIMEOUT:-420}" "$py" -m pip install -q --disable-pip-version-check \
        perfetto protobuf >"$venv.pip.log" 2>&1 || ! check_import; then
      echo "$name: SKIPPED: pip could not install perfetto and protobuf (see $venv.pip.log)"
      tail -3 "$venv.pip.log"
      rm -rf "$venv"
      exit 77
    fi
    touch "$venv/.loupe-ready"
  fi
  exec 9>&-
fi

# 1. a recorded run: zones on threads, CPU samples on their sequence
"$loupe" record -q -o "$tmp/log" --format perfetto --print-run-dir "$tmp/run" \
  -- "$build/examples/instrumented" >/dev/null || fail "loupe record"
rec=$(ls "$(cat "$tmp/run")"/*.pftrace) || fail "no .pftrace recorded"
# 2. a converted trace: two processes, an async track with two lanes, a counter
"$build/loupe" convert "$src/tests/data/perfetto_0.3.0.pftrace" -o "$tmp/conv.pftrace" \
  >/dev/null 2>&1 || fail "loupe convert"

# 3. a converted trace of 66,000 threads, one slice each
python3 - "$tmp/many.json" <<'PY' || fail "writing the 66,000-thread JSON"
import json, sys
ev = [{"ph": "X", "name": "z%d" % (i % 7), "pid": 1, "tid": i + 1, "ts": i * 0.5, "dur": 0.25}
      for i in range(66000)]
json.dump({"traceEvents": ev}, open(sys.argv[1], "w"))
PY
"$build/loupe" convert "$tmp/many.json" -o "$tmp/many.pftrace" >/dev/null 2>&1 ||
  fail "loupe convert of 66,000 threads"
out=$("$build/loupe" summary --json "$tmp/many.pftrace" 2>&1) || fail "loupe reading its own 66,000-thread .pftrace: $out"
case $out in
  *'"threads": 66000,'*) ;;
  *) fail "66,000 threads read back as: $(echo "$out" | head -c 300)" ;;
esac

"$py" - "$rec" "$tmp/conv.pftrace" "$tmp/many.pftrace" <<'PY' || fail "Perfetto's schema"
import sys
import zlib
from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

def unknown(msg, path):
    """Paths of fields Perfetto's schema does not know, in msg and every submessage."""
    out = []
    if len(unknown_fields.UnknownFieldSet(msg)) > 0:
        out.append(path)
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        rep = getattr(fd, "is_repeated", None)
        if rep is None:
            rep = fd.label == fd.LABEL_REPEATED
        items = value if rep else [value]
        for i, v in enumerate(items):
            out += unknown(v, f"{path}.{fd.name}[{i}]")
    return out

def raw_packets(data):
    """The number of Trace.packet fields, counted on the wire."""
    i, n = 0, 0
    while i < len(data):
        assert data[i] == 0x0A, f"offset {i}: not Trace.packet"
        i += 1
        ln, shift = 0, 0
        while True:
            b = data[i]; i += 1
            ln |= (b & 0x7F) << shift; shift += 7
            if b < 0x80:
                break
        i += ln
        n += 1
    return n

def inflated(path, data):
    """The packets inside the file's compressed_packets (TracePacket field 50: a zlib stream of
    a serialized Trace, as Perfetto's tracing service writes with COMPRESSION_TYPE_DEFLATE): every
    outer packet must be one and hold nothing else; the inner ones none (one level only)."""
    outer = pb.Trace()
    outer.ParseFromString(data)
    assert len(outer.packet) == raw_packets(data), f"{path}: outer packets"
    inner = b""
    for i, p in enumerate(outer.packet):
        fields = [fd.name for fd, _ in p.ListFields()]
        assert fields == ["compressed_packets"], f"{path}: packet[{i}] has {fields}"
        inner += zlib.decompress(p.compressed_packets)
    print(f"{path.rsplit('/', 1)[-1]}: {len(outer.packet)} compressed_packets, {len(data)} bytes "
          f"({len(inner)} inflated)")
    return inner

for path in sys.argv[1:]:
    data = inflated(path, open(path, "rb").read())
    t = pb.Trace()
    t.ParseFromString(data)
    n = raw_packets(data)
    assert len(t.packet) == n, f"{path}: {len(t.packet)} packets parsed, {n} in the file"
    nested = [i for i, p in enumerate(t.packet) if p.HasField("compressed_packets")]
    assert not nested, f"{path}: compressed_packets nested in {nested[:5]}"
    bad = [u for i, p in enumerate(t.packet) for u in unknown(p, f"packet[{i}]")]
    assert not bad, f"{path}: fields unknown to Perfetto's schema: {bad[:5]}"
    seqs = {p.trusted_packet_sequence_id for p in t.packet}
    assert 0 not in seqs, f"{path}: a packet without a sequence id"
    evs = sum(1 for p in t.packet if p.HasField("track_event"))
    shown = sorted(seqs) if len(seqs) <= 16 else f"{len(seqs)}, {min(seqs)} to {max(seqs)}"
    print(f"{path.rsplit('/', 1)[-1]}: {n} packets, {evs} track events, sequences {shown}")
    if path.endswith("conv.pftrace"):
        names = {}
        for p in t.packet:
            if p.HasField("track_descriptor"):
                d = p.track_descriptor
                names[d.uuid] = d
        procs = sorted(d.process.pid for d in names.values() if d.HasField("process"))
        assert procs == [10, 20], procs
        counters = [d for d in names.values() if d.HasField("counter")]
        # the 0.3.0 file had both processes' "mem" on one track: it reads back as one
        assert [d.name for d in counters] == ["mem"], counters
        lanes = [d for d in names.values() if d.parent_uuid in names and names[d.parent_uuid].name == "req" and not names[d.parent_uuid].HasField("process")]
        assert len(lanes) == 2, f"async lanes: {len(lanes)}"
    if path.endswith("many.pftrace"):
        assert len(seqs) <= 65536, f"{len(seqs)} sequences"
        assert len(seqs) > 65000, f"only {len(seqs)} sequences"
        tids = {p.track_descriptor.uuid: p.track_descriptor.thread.tid for p in t.packet
                if p.HasField("track_descriptor") and p.track_descriptor.HasField("thread")}
        assert len(tids) == 66000, f"{len(tids)} thread tracks"
        default = {}
        begins = {}
        for p in t.packet:
            if p.HasField("trace_packet_defaults"):
                d = p.trace_packet_defaults.track_event_defaults
                default[p.trusted_packet_sequence_id] = d.track_uuid
            if p.HasField("track_event") and p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                e = p.track_event
                u = e.track_uuid if e.HasField("track_uuid") else default[p.trusted_packet_sequence_id]
                begins[tids[u]] = begins.get(tids[u], 0) + 1
        assert sorted(begins) == list(range(1, 66001)), "slices on the wrong threads"
        assert set(begins.values()) == {1}, "a thread with more than one slice"
PY
echo "ok"
