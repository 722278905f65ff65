"""xprof_check.py CASE.xplane.pb CASE.expect.json [CASE.summary.json]: checks a loupe XSpace
with the real consumers.

1. xprof's own trace-viewer converter (xprof.convert.raw_to_tool_data.xspace_to_tool_data, the
   C++ converter XProf and TensorBoard run): every track becomes a thread of the right process
   (/host:CPU -> pid 701, /device:GPU:<n> by plane), named (an unnamed track by the name the
   writer gives it: "shown"); every slice comes out with its name (a step as XProf's step
   group, "<name> <step_num>"), start and duration to the ns (zero-length slices as instants,
   as XProf shows them), every instant and counter sample at its time; CPU samples as their
   "CPU samples <tid>" lines' events, each with its "stack" argument.
2. jax.profiler.ProfileData.from_file (jaxlib's XSpace reader): the same events per plane and
   line (lines named), start_ns and duration_ns exact.
3. Steps (cases with "steps", host only): xprof's get_step_trace (the xprof CLI's tool, on the
   file) reports exactly those steps, named "<name> <step_num>", each step time within 1% of the
   slice's duration; overview_page's average step time agrees; with CASE.summary.json (`loupe
   summary --json` of the same file) the step zone's count, total, p50 and max equal xprof's.
4. Flows (cases with "flows"): xprof's trace_viewer@ binds each flow: its source event
   (flow_out) and its destination (flow_in) carry the same bind_id, and with steps the same
   group_id (the step's group follows the flow to the other thread).
5. `xprof_check.py --parts ZONES PART...`: a trace split into parts over the 2 GiB limit: each
   part converted alone, the zones "step" and "work" of all of them ZONES, each exactly once.
6. `xprof_check.py --gpu-processes FILE`: two processes' GPU planes (check_gpu_processes()).
7. `xprof_check.py --every-stat FILE...`: jax's ProfileData reads every stat of every plane,
   line and event of each file (as a script written for jax's profiles does) without an error;
   the samples' binary plane stats read as their base64 text. loupe 0.4's bytes_values there
   raised UnicodeDecodeError in ProfileData on every recorded file (its stats are read as text).
Prints what differs and exits 1; exits 0 when all matches. Run by tests/xprof_validate.sh.
"""
import collections
import json
import os
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
    # XProf's group_events names each step (a root event, _r) "<name> <step_num>"
    step_names = {}
    for t in want["tracks"]:
        for name, num, start, dur in want["steps"]:
            if [name, start, dur] in t["slices"] and t["plane"] == "/host:CPU":
                step_names[(t["plane"], t["tid"], start, dur, name)] = "%s %d" % (name, num)
    expect = collections.Counter()
    for t in want["tracks"]:
        pid = pid_of.get(t["plane"])
        if pid is None:
            fail("xprof: no process for plane %s (have %r)" % (t["plane"], pid_of))
        key = (pid, t["tid"])
        if not t["shown"]:
            fail("xprof: track %r has no name to show" % (key,))
        if pid == host and thread_names.get(key) != t["shown"]:
            fail("xprof: thread %r is named %r, want %r" % (key, thread_names.get(key), t["shown"]))
        if pid != host:
            if device_names[(pid, t["shown"])] < 1:
                fail("xprof: no thread named %r in %s" % (t["shown"], t["plane"]))
            device_names[(pid, t["shown"])] -= 1
        for name, start, dur in t["slices"]:
            ph = "X" if dur > 0 else "i"
            name = step_names.get((t["plane"], t["tid"], start, dur, name), name)
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
    # CPU samples (loupe's convention): each sample event's stack stat, outermost first
    stacks = collections.Counter(
        (e["name"], ns(e["ts"]), e.get("args", {}).get("stack"))
        for e in events
        if e.get("ph") == "X" and "stack" in e.get("args", {}))
    want_stacks = collections.Counter((n, t, s) for n, t, s in want.get("sample_stacks", []))
    if stacks != want_stacks:
        fail("xprof: sample stacks differ; missing %r; unexpected %r"
             % (list((want_stacks - stacks).items())[:5], list((stacks - want_stacks).items())[:5]))
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
            expect[(t["plane"], t["shown"], name, start, dur)] += 1
        for name, ts in t["instants"]:
            expect[(t["plane"], t["shown"], name, ts, 0)] += 1
    if got != expect:
        missing = list((expect - got).items())[:5]
        extra = list((got - expect).items())[:5]
        fail("jax ProfileData: events differ; missing %r; unexpected %r" % (missing, extra))
    print("jax.profiler.ProfileData: %d events match" % sum(got.values()))


def close(a, b):
    """Within 1% (and xprof's 0.1 us rounding of milliseconds to 4 decimals)."""
    return abs(a - b) <= 0.01 * abs(b) + 1e-4


def check_steps(path, want, summary):
    from xprof.cli.tools import get_step_trace_tool
    from xprof.convert import raw_to_tool_data

    steps = sorted(want["steps"], key=lambda s: s[2])
    # xprof keeps every step of up to 5 and drops the first and the last of more (they may be
    # incomplete: kDropIncomplteteStepThreshold in xprof/convert/step_events_to_steps_db.cc)
    dropped = len(steps) > 5
    if dropped:
        steps = steps[1:-1]
    # the tool resolves the session from the file's directory: an absolute path
    out = json.loads(get_step_trace_tool.get_step_trace(
        os.path.abspath(path), bypass_cache=True, limit=1000))
    if out.get("status") == "NO_DATA":
        fail("xprof get_step_trace: NO_DATA: %s" % out.get("message"))
    got = [(s["step_num"], s["step_time_ms"]) for s in out["step_breakdown"]]
    wants = [("%s %d" % (s[0], s[1]), s[3] / 1e6) for s in steps]
    if out["summary"]["total_steps"] != len(steps) or len(got) != len(wants) or any(
        g[0] != w[0] or not close(g[1], w[1]) for g, w in zip(got, wants)
    ):
        fail("xprof get_step_trace: steps %r (total_steps %r), want %r"
             % (got, out["summary"]["total_steps"], wants))
    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "overview_page", {})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    if "No step marker observed" in data:
        fail("xprof overview_page: No step marker observed")
    props = {}
    for table in json.loads(data):
        props.update(table.get("p", {}))
    mean_ms = sum(w[1] for w in wants) / len(wants)
    if abs(float(props.get("steptime_ms_average", "nan")) - mean_ms) > 0.01 * mean_ms + 0.05:
        fail("xprof overview_page: average step time %r ms, want %.4f"
             % (props.get("steptime_ms_average"), mean_ms))
    if summary is not None and not dropped:
        names = {s[0] for s in steps}
        for name in names:
            row = [z for z in summary["zones"] if z["name"] == name]
            ms = sorted(t for n, t in got if n.rsplit(" ", 1)[0] == name)
            if len(row) != 1 or row[0]["count"] != len(ms):
                fail("loupe summary: zone %r: %r, xprof has %d steps" % (name, row, len(ms)))
            z = row[0]
            checks = (("total", z["total_ns"] / 1e6, sum(ms)), ("max", z["max_ns"] / 1e6, ms[-1]),
                      ("p50", z["p50_ns"] / 1e6, ms[(len(ms) - 1) // 2]))
            for what, a, b in checks:
                if not close(b, a):
                    fail("loupe summary: %s %s %.4f ms, xprof %.4f ms" % (name, what, a, b))
    print("xprof get_step_trace/overview_page: %d steps match%s"
          % (len(steps), " loupe summary" if summary is not None and not dropped else ""))


def check_flows(path, want):
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer@", {})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    ends = collections.defaultdict(list)
    groups = {}
    for e in json.loads(data)["traceEvents"]:
        if "bind_id" in e:
            side = "out" if e.get("flow_out") else "in" if e.get("flow_in") else "?"
            ends[(e["tid"], e["name"], ns(e["ts"]), side)].append(e["bind_id"])
            groups[(e["tid"], e["name"], ns(e["ts"]))] = e.get("args", {}).get("group_id")
    # XProf binds one flow per event and side (one _p, one _c): an event with several flows
    # out (or in) gets one of them drawn; the others are checked where both ends are single.
    # Host to host only: device events bind to the host by correlation_id, not _p/_c.
    n_out = collections.Counter((f[0], f[1], f[2]) for f in want["flows"])
    n_in = collections.Counter((f[3], f[4], f[5]) for f in want["flows"])
    bound = 0
    for a_tid, a_name, a_ts, b_tid, b_name, b_ts, host in want["flows"]:
        if not host or n_out[(a_tid, a_name, a_ts)] > 1 or n_in[(b_tid, b_name, b_ts)] > 1:
            continue
        bound += 1
        outs = ends.get((a_tid, a_name, a_ts, "out"), [])
        ins = ends.get((b_tid, b_name, b_ts, "in"), [])
        if not set(outs) & set(ins):
            fail("xprof trace_viewer@: no flow from %r to %r (bind ids %r, %r)"
                 % ((a_tid, a_name, a_ts), (b_tid, b_name, b_ts), outs, ins))
        # a step's group reaches what its flows reach (group_events' producer/consumer links)
        ga, gb = groups.get((a_tid, a_name, a_ts)), groups.get((b_tid, b_name, b_ts))
        if want["steps"] and (ga is None or ga != gb):
            fail("xprof trace_viewer@: flow %r -> %r: group_id %r, then %r"
                 % ((a_tid, a_name, a_ts), (b_tid, b_name, b_ts), ga, gb))
    if bound == 0:  # the "steps" case has flows with single ends: this check runs there
        print("xprof trace_viewer@: no flow with single host ends in this case")
        return
    print("xprof trace_viewer@: %d of %d flows bound (the others share an event or a device)"
          % (bound, len(want["flows"])))


def check_parts(zones, paths):
    """A split trace: xprof's trace viewer converts every part on its own, each holds some of
    the zones "step" and "work" on /host:CPU, and together they hold each one exactly once."""
    from xprof.convert import raw_to_tool_data

    total = 0
    for path in paths:
        data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
        if isinstance(data, bytes):
            data = data.decode("utf-8")
        events = json.loads(data)["traceEvents"]
        seen = set()
        n = 0
        for e in events:
            if e.get("ph") == "X" and e.get("pid") == 701 and e.get("name") in ("step", "work"):
                key = (e["tid"], e["name"], e["ts"])
                if key in seen:
                    fail("xprof: %s: zone %r twice" % (path, key))
                seen.add(key)
                n += 1
        if n == 0:
            fail("xprof: %s: no zones" % path)
        print("xprof: %s: %d zones" % (os.path.basename(path), n))
        total += n
    if total != zones:
        fail("xprof: the parts hold %d zones, not %d" % (total, zones))
    # the hosts XProf lists for the run directory (profile_plugin._get_hosts, from the file
    # names): the first part as the host, each other part as "<host>.partK"
    from xprof import profile_plugin

    names = [os.path.basename(p) for p in paths]
    host = names[0][: -len(".xplane.pb")]
    want = {host} | {"%s.part%d" % (host, k) for k in range(2, len(paths) + 1)}
    got = profile_plugin._get_hosts(names)
    if got != want:
        fail("xprof: hosts %r, expected %r" % (sorted(got), sorted(want)))
    print("xprof: hosts %s" % ", ".join(sorted(got)))
    print("xprof: %d parts, %d zones in all, each once" % (len(paths), total))


def check_gpu_processes(path):
    """Two processes' GPUs (test_xplane.c gpu_model()): processes[0]'s device 0 and the second
    process's devices 0 and 1 are three device processes in xprof, each with its stream named
    (the second process's with its "helper (200) / " prefix) and its kernel on it."""
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    events = json.loads(data)["traceEvents"]
    pname, tname, got = {}, {}, set()
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "process_name":
            pname[e["pid"]] = e["args"]["name"]
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            tname[(e["pid"], e["tid"])] = e["args"]["name"]
    for e in events:
        if e.get("ph") == "X" and e["pid"] != 701:
            got.add((pname.get(e["pid"]), tname.get((e["pid"], e["tid"])), e["name"], e["ts"]))
    want = {
        ("/device:GPU:0", "stream 1", "k00", 1.0),
        ("/device:GPU:2", "helper (200) / stream 1", "k10", 2.0),
        ("/device:GPU:3", "helper (200) / stream 1", "k11", 3.0),
    }
    if got != want:
        fail("xprof: GPU kernels %r, expected %r" % (sorted(got), sorted(want)))
    print("xprof: 3 device planes of 2 processes, each kernel on its stream")


def check_every_stat(paths):
    import base64
    from jax.profiler import ProfileData

    for path in paths:
        pd = ProfileData.from_file(path)
        n = 0
        b64 = {}
        try:
            for plane in pd.planes:
                for k, v in plane.stats:
                    n += 1
                    if k in ("loupe_stack_nodes", "loupe_off_cpu", "loupe_off_cpu_kinds"):
                        b64[k] = len(base64.b64decode(v, validate=True))
                for line in plane.lines:
                    for e in line.events:
                        for k, v in e.stats:
                            n += 1
        except Exception as ex:  # what a jax user's script would get
            fail("jax ProfileData: %s: a stat raised %s: %s" % (path, type(ex).__name__, ex))
        print("jax.profiler.ProfileData: %s: %d stats read; base64 payloads %s"
              % (os.path.basename(path), n, sorted(b64.items())))


def main():
    if sys.argv[1] == "--every-stat":
        check_every_stat(sys.argv[2:])
        return
    if sys.argv[1] == "--gpu-processes":
        check_gpu_processes(sys.argv[2])
        return
    if sys.argv[1] == "--parts":
        check_parts(int(sys.argv[2]), sys.argv[3:])
        return
    path, expect_path = sys.argv[1], sys.argv[2]
    with open(expect_path) as f:
        want = json.load(f)
    summary = None
    if len(sys.argv) > 3:
        with open(sys.argv[3]) as f:
            summary = json.load(f)
    check_xprof(path, want)
    check_jax(path, want)
    host_only = all(t["plane"] == "/host:CPU" for t in want["tracks"])
    if want["steps"] and host_only:
        check_steps(path, want, summary)
    if want["flows"]:
        check_flows(path, want)


if __name__ == "__main__":
    main()
