"""xprof_check.py CASE.xplane.pb CASE.expect.json: checks a loupe XSpace with the real consumers.

1. xprof's own trace-viewer converter (xprof.convert.raw_to_tool_data.xspace_to_tool_data, the
   C++ converter XProf and TensorBoard run): every track becomes a thread of the right process
   (/host:CPU -> pid 701, /device:GPU:<n> by plane), named as recorded; every slice comes out
   with its name, start and duration to the ns (zero-length slices as instants, as XProf shows
   them), every instant and counter sample at its time.
2. jax.profiler.ProfileData.from_file (jaxlib's XSpace reader): the same events per plane and
   line, start_ns and duration_ns exact.
Prints what differs and exits 1; exits 0 when all matches. Run by tests/xprof_validate.sh.
"""
import collections
import json
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def ns(us):
    return round(float(us) * 1000)


def check_xprof(path, want):
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    events = json.loads(data)["traceEvents"]
    pid_of = {}
    thread_names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pid_of[e["args"]["name"]] = e["pid"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            thread_names[(e["pid"], e["tid"])] = e["args"]["name"]
    if pid_of.get("/host:CPU") != 701:
        fail("xprof: /host:CPU is not pid 701: %r" % pid_of)
    # Device planes get tids 1..n in xprof's own line order: compared per plane (tid None).
    host = pid_of["/host:CPU"]

    def tid(pid, t):
        return t if pid == host else None

    got = collections.Counter()
    for e in events:
        if e.get("ph") == "X":
            got[(e["pid"], tid(e["pid"], e["tid"]), "X", e["name"], ns(e["ts"]), ns(e["dur"]))] += 1
        elif e.get("ph") == "i":
            got[(e["pid"], tid(e["pid"], e["tid"]), "i", e["name"], ns(e["ts"]), 0)] += 1
    device_names = collections.Counter(
        (p, n) for (p, t), n in thread_names.items() if p != host)
    expect = collections.Counter()
    for t in want["tracks"]:
        pid = pid_of.get(t["plane"])
        if pid is None:
            fail("xprof: no process for plane %s (have %r)" % (t["plane"], pid_of))
        key = (pid, t["tid"])
        if pid == host and t["name"] and thread_names.get(key) != t["name"]:
            fail("xprof: thread %r is named %r, want %r" % (key, thread_names.get(key), t["name"]))
        if pid != host and t["name"]:
            if device_names[(pid, t["name"])] < 1:
                fail("xprof: no thread named %r in %s" % (t["name"], t["plane"]))
            device_names[(pid, t["name"])] -= 1
        for name, start, dur in t["slices"]:
            ph = "X" if dur > 0 else "i"
            expect[(pid, tid(pid, t["tid"]), ph, name, start, dur if dur > 0 else 0)] += 1
        for name, ts in t["instants"]:
            expect[(pid, tid(pid, t["tid"]), "i", name, ts, 0)] += 1
    counters = [k for k, v in thread_names.items() if v == "_counters_"]
    if want["counters"]:
        if len(counters) != 1:
            fail("xprof: want one _counters_ thread, have %r" % counters)
        for name, ts, value in want["counters"]:
            expect[(counters[0][0], counters[0][1], "i", name, ts, 0)] += 1
        # xprof prints doubles with 6 significant digits
        vals = sorted(
            (e["name"], ns(e["ts"]), float(e["args"]["value"]))
            for e in events
            if e.get("ph") == "i" and (e["pid"], e["tid"]) == counters[0]
        )
        wants = sorted((n, t, float(v)) for n, t, v in want["counters"])
        if len(vals) != len(wants) or any(
            a[:2] != b[:2] or abs(a[2] - b[2]) > 1e-5 * max(1.0, abs(b[2]))
            for a, b in zip(vals, wants)
        ):
            fail("xprof: counter values differ: %r vs %r" % (vals[:5], wants[:5]))
    if got != expect:
        missing = list((expect - got).items())[:5]
        extra = list((got - expect).items())[:5]
        fail("xprof: events differ; missing %r; unexpected %r" % (missing, extra))
    print("xprof trace_viewer: %d events, %d threads match" % (sum(got.values()), len(thread_names)))


def check_jax(path, want):
    from jax.profiler import ProfileData

    pd = ProfileData.from_file(path)
    got = collections.Counter()
    for plane in pd.planes:
        for line in plane.lines:
            if line.name == "_counters_":
                continue
            for e in line.events:
                got[(plane.name, line.name, e.name, int(e.start_ns), int(e.duration_ns))] += 1
    expect = collections.Counter()
    for t in want["tracks"]:
        for name, start, dur in t["slices"]:
            expect[(t["plane"], t["name"], name, start, dur)] += 1
        for name, ts in t["instants"]:
            expect[(t["plane"], t["name"], name, ts, 0)] += 1
    if got != expect:
        missing = list((expect - got).items())[:5]
        extra = list((got - expect).items())[:5]
        fail("jax ProfileData: events differ; missing %r; unexpected %r" % (missing, extra))
    print("jax.profiler.ProfileData: %d events match" % sum(got.values()))


def main():
    path, expect_path = sys.argv[1], sys.argv[2]
    with open(expect_path) as f:
        want = json.load(f)
    check_xprof(path, want)
    check_jax(path, want)


if __name__ == "__main__":
    main()
