"""grpc_check.py: the checks of tests/grpc_validate.sh that need Python (xprof, jax, grpcio).

  grpc_check.py zones FILE.xplane.pb MIN        xprof's trace-viewer converter reads the XSpace;
                                                server_probe's zones in it are consecutive
                                                ("zone <n>", no number missing), at least MIN
  grpc_check.py capture_route LOGDIR ADDRS MS   XProf's capture handler (ProfilePlugin.
                                                capture_route_impl, in-process) against ADDRS
  grpc_check.py service ADDR TMPDIR             the statuses of loupe's ProfilerService, by raw
                                                grpcio calls (the messages encoded here by hand
                                                from proto/profiler_service.proto's numbers)
  grpc_check.py busy ADDR LOG_DIR               Profile while a local trace runs
  grpc_check.py stopping ADDR                  a Profile that the server's stop ends
  grpc_check.py jax_server PORT                 a JAX process with jax.profiler.start_server
  grpc_check.py merged FILE ADDR...             a merged Chrome JSON has one process per ADDR,
                                                each with events, on overlapping time ranges
  grpc_check.py clock FILE LOG ADDR             `loupe capture`'s gRPC clock offset in FILE (a
                                                Chrome JSON of the capture) is 0 within its
                                                uncertainty (server and client on one machine),
                                                and LOG (its output) says the same figures
  grpc_check.py timeless_server PORT            a ProfilerService whose XSpace has one zone and
                                                no Task Environment plane (no session times)
Prints what it checked; exits 1 with "FAIL: ..." at the first difference.
"""
import gzip
import json
import os
import re
import sys
import threading
import time


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def expect(what, got, want):
    if got != want:
        fail("%s: got %r, want %r" % (what, got, want))


def zones(path, minimum):
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    events = json.loads(data)["traceEvents"]
    nums = sorted(int(e["name"][5:]) for e in events
                  if e.get("ph") == "X" and re.fullmatch(r"zone \d{6}", e.get("name", "")))
    if len(nums) < minimum:
        fail("xprof: %d zones in %s, want at least %d" % (len(nums), path, minimum))
    if nums != list(range(nums[0], nums[0] + len(nums))):
        missing = sorted(set(range(nums[0], nums[-1] + 1)) - set(nums))
        fail("xprof: zones missing in %s: %r" % (path, missing[:10]))
    print("xprof: %s: %d zones, zone %06d..%06d, none missing" %
          (os.path.basename(path), len(nums), nums[0], nums[-1]))


def capture_route(logdir, addrs, ms):
    import types
    from werkzeug.test import EnvironBuilder
    from werkzeug import wrappers
    from xprof import profile_plugin

    ctx = types.SimpleNamespace(logdir=logdir, data_provider=None,
                                flags=types.SimpleNamespace(master_tpu_unsecure_channel=""))
    plugin = profile_plugin.ProfilePlugin(ctx)
    env = EnvironBuilder(path="/data/plugin/profile/capture_profile",
                         query_string={"service_addr": addrs, "duration": ms, "num_retry": "2",
                                       "host_tracer_level": "2", "device_tracer_level": "1",
                                       "python_tracer_level": "0"}).get_environ()
    resp = plugin.capture_route_impl(wrappers.Request(env))
    raw = resp.get_data()
    body = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)  # xprof gzips
    expect("capture_route status", resp.status_code, 200)
    expect("capture_route reply", body, {"result": "Capture profile successfully. Please refresh."})
    print("xprof capture_route %s: %s" % (addrs, body["result"]))


# ---- protobuf by hand (proto/profiler_service.proto's field numbers) ----

def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field(num, value):
    if isinstance(value, bool) or isinstance(value, int):
        return varint(num << 3) + varint(int(value))
    if isinstance(value, str):
        value = value.encode()
    return varint(num << 3 | 2) + varint(len(value)) + value


def profile_request(ms, level=2, version=1, root="", session="", host="", emit=False):
    opts = field(5, version) + field(2, level) + field(3, 1) + field(9, ms)
    return (field(1, ms) + field(4, opts) + field(5, root) + field(6, session) +
            field(7, host) + (field(9, True) if emit else b""))


def parse(buf):
    """{field number: [values]} of one message level (varints and length-delimited only)."""
    out, i = {}, 0
    while i < len(buf):
        key, shift = 0, 0
        while True:
            b = buf[i]; i += 1
            key |= (b & 0x7F) << shift; shift += 7
            if b < 0x80:
                break
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, shift = 0, 0
            while True:
                b = buf[i]; i += 1
                v |= (b & 0x7F) << shift; shift += 7
                if b < 0x80:
                    break
        elif wt == 2:
            n, shift = 0, 0
            while True:
                b = buf[i]; i += 1
                n |= (b & 0x7F) << shift; shift += 7
                if b < 0x80:
                    break
            v = buf[i:i + n]; i += n
        else:
            fail("unexpected wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def call(ch, method, req, timeout=30):
    import grpc
    f = ch.unary_unary("/tensorflow.ProfilerService/" + method)
    try:
        return grpc.StatusCode.OK, "", f(req, timeout=timeout)
    except grpc.RpcError as e:
        return e.code(), e.details(), None


def expect_status(what, got, code, details):
    expect(what + " code", got[0].name, code)
    expect(what + " details", got[1], details)
    print("grpc %s: %s %r" % (what, code, details))


def service(addr, tmp):
    import grpc
    ch = grpc.insecure_channel(addr)
    expect_status("Monitor", call(ch, "Monitor", field(1, 100)), "UNIMPLEMENTED", "unimplemented.")
    expect_status("GetSnapshot", call(ch, "GetSnapshot", b""), "UNIMPLEMENTED",
                  "/tensorflow.ProfilerService/GetSnapshot is not served by loupe (it serves "
                  "Profile and Terminate of tensorflow.ProfilerService)")
    expect_status("Profile duration 0", call(ch, "Profile", profile_request(0, emit=True)),
                  "INVALID_ARGUMENT", "duration_ms must be greater than zero.")
    expect_status("Profile duration 70000", call(ch, "Profile", profile_request(70000, emit=True)),
                  "INVALID_ARGUMENT", "duration_ms: 70000 is over this server's limit of 60000 ms")
    expect_status("Profile level 7", call(ch, "Profile", profile_request(100, level=7, emit=True)),
                  "INVALID_ARGUMENT",
                  "host_tracer_level: 7 is not 0 (nothing), 1 (critical), 2 (info) or 3 (verbose)")
    expect_status("Profile session ..",
                  call(ch, "Profile", profile_request(100, root=tmp, session="..", host="h")),
                  "INVALID_ARGUMENT",
                  "session_id: \"..\" is not a directory name (empty, '.', '..' or with '/')")
    # emit_xspace: the XSpace comes back in field 8, with the probe's zones
    code, _, resp = call(ch, "Profile", profile_request(300, emit=True))
    expect("Profile emit_xspace code", code.name, "OK")
    m = parse(resp)
    expect("Profile emit_xspace empty_trace", m.get(7, [0])[0], 0)
    xs = m.get(8, [b""])[0]
    if not xs.startswith(b"\x0a") or b"zone " not in xs:
        fail("Profile emit_xspace: field 8 is not an XSpace with the probe's zones (%d bytes)"
             % len(xs))
    print("grpc Profile emit_xspace: OK, %d bytes of XSpace inline" % len(xs))
    # host_tracer_level 0 records nothing: empty_trace
    code, _, resp = call(ch, "Profile", profile_request(100, level=0, emit=True))
    expect("Profile level 0 code", code.name, "OK")
    expect("Profile level 0 empty_trace", parse(resp).get(7, [0])[0], 1)
    print("grpc Profile host_tracer_level 0: OK, empty_trace")
    # the file, as jax.collect_profile expects it; an empty response
    code, _, resp = call(ch, "Profile", profile_request(200, root=tmp + "/repo", session="s1",
                                                          host=addr))
    expect("Profile to file code", code.name, "OK")
    expect("Profile to file response", resp, b"")
    path = "%s/repo/s1/%s.xplane.pb" % (tmp, addr.replace(":", "_"))
    if not os.path.isfile(path):
        fail("Profile to file: no %s" % path)
    print("grpc Profile to file: OK, %s" % path[len(tmp) + 1:])
    # a second Profile while one runs: ABORTED; Terminate ends the first early
    first = {}

    def long_profile():
        first["t0"] = time.monotonic()
        first["r"] = call(ch, "Profile", profile_request(5000, session="long", emit=True))
        first["t"] = time.monotonic() - first["t0"]

    th = threading.Thread(target=long_profile)
    th.start()
    time.sleep(0.5)
    expect_status("Profile during a capture", call(ch, "Profile", profile_request(100, emit=True)),
                  "ABORTED",
                  "Profile has already been started. Only one profile may be run at a time. "
                  "(another capture is running in this process; try again when it ends)")
    code, _, resp = call(ch, "Terminate", field(1, "long"))
    expect("Terminate code", code.name, "OK")
    th.join()
    expect("terminated Profile code", first["r"][0].name, "OK")
    if first["t"] > 3.0:
        fail("Terminate did not end the 5000 ms Profile early (%.1f s)" % first["t"])
    print("grpc Terminate: the 5000 ms Profile ended after %.1f s" % first["t"])
    # a client that goes away ends its capture: the next one starts at once
    expect("abandoned Profile code",
           call(ch, "Profile", profile_request(20000, emit=True), timeout=0.5)[0].name,
           "DEADLINE_EXCEEDED")
    time.sleep(0.3)
    code, _, _ = call(ch, "Profile", profile_request(100, emit=True))
    expect("Profile after an abandoned one", code.name, "OK")
    print("grpc Profile after a client gave up: OK (its capture had ended)")


def busy(addr, log_dir):
    import grpc
    ch = grpc.insecure_channel(addr)
    expect_status("Profile during a local trace", call(ch, "Profile", profile_request(100, emit=True)),
                  "FAILED_PRECONDITION",
                  "Profile has already been started. Only one profile may be run at a time. (a "
                  "local trace is running in this process (loupe_start_trace() with log_dir %s); "
                  "it was not disturbed)" % log_dir)


def stopping(addr):
    import grpc
    ch = grpc.insecure_channel(addr)
    print("started", flush=True)
    expect_status("Profile during loupe_stop_server()",
                  call(ch, "Profile", profile_request(20000, emit=True)), "UNAVAILABLE",
                  "the profiler server is stopping; the capture was abandoned")


def jax_server(port):
    import jax
    import jax.numpy as jnp
    server = jax.profiler.start_server(port)  # kept: the server lives while its handle does
    x = jnp.ones((128, 128))
    (x @ x).block_until_ready()  # compiled before "ready": on a loaded machine the first
    print("ready", flush=True)   # compile took longer than the 500 ms capture
    while True:
        with jax.profiler.TraceAnnotation("jax_step"):
            x = (x @ x) / 128.0
            x.block_until_ready()
        time.sleep(0.002)
    del server


def merged(path, addrs):
    with gzip.open(path, "rt") as f:
        d = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in d["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    span = {}
    for e in d["traceEvents"]:
        if e.get("ph") == "X":
            a, b = span.get(e["pid"], (1e30, -1e30))
            span[e["pid"]] = (min(a, e["ts"]), max(b, e["ts"] + e["dur"]))
    for addr in addrs:
        pids = [p for p, n in names.items() if n.endswith("(%s)" % addr)]
        expect("processes named after %s" % addr, len(pids), 1)
        if pids[0] not in span:
            fail("merged: no events from %s" % addr)
    lo = max(span[p][0] for p in span)
    hi = min(span[p][1] for p in span)
    if lo >= hi:
        fail("merged: the processes' time ranges do not overlap: %r" % span)
    print("merged: %d processes (%s) on one timeline, overlapping for %.0f ms" %
          (len(addrs), ", ".join(names[p] for p in sorted(span)), (hi - lo) / 1000))


def clock(path, log, addr):
    with gzip.open(path, "rt") as f:
        meta = json.load(f)["metadata"]
    expect("loupe_clock_method", meta.get("loupe_clock_method"), "grpc_profile_times")
    off = int(meta["loupe_clock_offset_ns"])
    unc = int(meta["loupe_clock_offset_uncertainty_ns"])
    # the interval [off - unc, off + unc] holds the true offset, 0; it is as wide as the call's
    # overhead (a 1.5 s capture: well under a second even on a loaded machine)
    if not (0 < unc < 1000000000) or abs(off) > unc:
        fail("clock: offset %d ns +- %d ns does not hold 0" % (off, unc))
    want = "%s: clock %+.3f ms +- %.3f ms from this machine's (the trace's profile_start_time " \
           "and profile_stop_time within the " % (addr, -off / 1e6, unc / 1e6)
    with open(log) as f:
        if want not in f.read():
            fail("clock: no line '%s' in %s" % (want, log))
    print("clock: %s: offset %+.3f ms +- %.3f ms holds 0" % (addr, -off / 1e6, unc / 1e6))


def timeless_server(port):
    import grpc
    from concurrent import futures
    # XSpace { planes { name "/host:CPU", event_metadata {1: "timeless_zone"}, lines { id 1,
    # name "main", timestamp_ns 1000, events { metadata_id 1, offset_ps 0, duration_ps 1e6 } } } }
    md = field(1, 1) + field(2, "timeless_zone")
    line = (field(1, 1) + field(2, "main") + field(3, 1000) +
            field(4, field(1, 1) + field(2, 0) + field(3, 1000000)))
    plane = field(2, "/host:CPU") + field(4, field(1, 1) + field(2, md)) + field(3, line)
    reply = field(8, field(1, plane))

    def profile(req, ctx):
        ms = parse(parse(req)[4][0]).get(9, [100])[0]
        time.sleep(ms / 1000.0)
        return reply

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "tensorflow.ProfilerService", {"Profile": grpc.unary_unary_rpc_method_handler(profile)}),))
    server.add_insecure_port("127.0.0.1:%d" % port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "zones":
        zones(args[0], int(args[1]))
    elif cmd == "capture_route":
        capture_route(args[0], args[1], args[2])
    elif cmd == "service":
        service(args[0], args[1])
    elif cmd == "busy":
        busy(args[0], args[1])
    elif cmd == "stopping":
        stopping(args[0])
    elif cmd == "jax_server":
        jax_server(int(args[0]))
    elif cmd == "merged":
        merged(args[0], args[1:])
    elif cmd == "clock":
        clock(args[0], args[1], args[2])
    elif cmd == "timeless_server":
        timeless_server(int(args[0]))
    else:
        fail("unknown command " + cmd)
