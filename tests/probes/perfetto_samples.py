#!/usr/bin/env python3
"""perfetto_samples.py FILE: checks a .pftrace's CPU-sample packets with Perfetto's own schema
(perfetto_trace_pb2 from the `perfetto` PyPI package): every packet parses, the sample sequence
starts cleared, every PerfSample's callstack, frame, function name and mapping iid was defined
before on its sequence, frame_ids resolve outermost first, and prints one line per sample:
"ts pid tid cpu | outermost;...;leaf" (ts relative to the first packet's timestamp)."""
import sys
import zlib
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

trace = pb.Trace()
trace.ParseFromString(open(sys.argv[1], "rb").read())
if any(p.HasField("compressed_packets") for p in trace.packet):
    # loupe's default: the packets deflated in TracePacket.compressed_packets chunks (a zlib
    # stream of a serialized Trace each), read as if they stood in the file
    inner = pb.Trace()
    inner.ParseFromString(b"".join(zlib.decompress(p.compressed_packets) for p in trace.packet))
    assert not any(p.HasField("compressed_packets") for p in inner.packet), "nested"
    trace = inner
names, frames, stacks, paths, maps = {}, {}, {}, {}, {}
cleared = set()
base = None
out = []
for p in trace.packet:
    seq = p.trusted_packet_sequence_id
    if p.sequence_flags & 1:
        cleared.add(seq)
    if base is None and p.HasField("timestamp"):
        base = p.timestamp
    if p.HasField("interned_data"):
        d = p.interned_data
        for s in d.function_names:
            names[(seq, s.iid)] = s.str.decode()
        for s in d.mapping_paths:
            paths[(seq, s.iid)] = s.str.decode()
        for m in d.mappings:
            maps[(seq, m.iid)] = "".join("/" + paths[(seq, i)] for i in m.path_string_ids)
        for f in d.frames:
            assert (seq, f.function_name_id) in names, f
            assert f.mapping_id == 0 or (seq, f.mapping_id) in maps, f
            frames[(seq, f.iid)] = names[(seq, f.function_name_id)]
        for c in d.callstacks:
            for i in c.frame_ids:
                assert (seq, i) in frames, c
            stacks[(seq, c.iid)] = [frames[(seq, i)] for i in c.frame_ids]
    if p.HasField("perf_sample"):
        s = p.perf_sample
        assert seq in cleared and p.sequence_flags & 2, "sample before its sequence was cleared"
        st = stacks[(seq, s.callstack_iid)] if s.HasField("callstack_iid") else []
        cpu = s.cpu if s.HasField("cpu") else -1
        out.append(f"{p.timestamp - base} {s.pid} {s.tid} {cpu} | {';'.join(st)}")
print("\n".join(out))
