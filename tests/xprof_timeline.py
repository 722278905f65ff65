"""xprof_timeline.py: one timeline across the files of a run, as XProf shows them.

XProf's trace viewer of several hosts' files places each file's events at its line timestamps
as they are, so the files of one run (MPI ranks, loupe record's process tree, a capture's hosts)
count their times from the run's base (metadata loupe_clock_base_unix_ns; src/export/xplane.c,
Times). The check: every zone NAME in XProf's view of the run's files starts and ends where it
does in XProf's view of the merged run (`loupe convert RUN -o merged.xplane.pb`: loupe's own
alignment of the parts), to within twice the largest clock offset uncertainty the files state
plus 2 us (an offset drifts between its two measurements; each file takes it at its middle).
Used by tests/xprof_mpi_check.py (MPI ranks) and, as a program, by tests/xprof_validate.sh:

  xprof_timeline.py NAME COUNT MERGED FILE...   exits 1 and says what differs, or 0

NAME ending in "*" is a prefix (server_probe's "zone NNNNNN"); COUNT 0 takes the merged run's
count, which must be at least 10.
"""
import json
import os
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def sample_line_ids(events):
    """(pid, tid) of the "CPU samples" lines: a sample whose leaf is a zone's function is an
    event of that name there."""
    return {(e["pid"], e["tid"]) for e in events
            if e.get("ph") == "M" and e.get("name") == "thread_name"
            and e.get("args", {}).get("name", "").startswith("CPU samples")}


def zone_times(events, name):
    """The sorted starts and the sorted ends (us) of the zones called name."""
    skip = sample_line_ids(events)
    if name.endswith("*"):
        match = lambda n: n.startswith(name[:-1])
    else:
        match = lambda n: n == name
    xs = [e for e in events if e.get("ph") == "X" and match(e.get("name", ""))
          and (e["pid"], e.get("tid")) not in skip]
    return sorted(e["ts"] for e in xs), sorted(e["ts"] + e["dur"] for e in xs)


def largest_uncertainty_us(paths):
    """The largest loupe_clock_offset_uncertainty_ns of the files, in us (jax's reader)."""
    from jax.profiler import ProfileData
    u = 0
    for path in paths:
        for plane in ProfileData.from_file(path).planes:
            if plane.name == "Task Environment":
                for k, v in plane.stats:
                    if k == "loupe_clock_offset_uncertainty_ns":
                        u = max(u, int(v))
    return u / 1000.0


def check_one_timeline(events, merged_events, paths, name, count):
    """Fails unless the count zones called name are where the merged run has them; returns the
    largest difference and the tolerance (us)."""
    parts = zone_times(events, name)
    whole = zone_times(merged_events, name)
    if count == 0:
        count = len(whole[0])
        if count < 10:
            fail("one timeline: the merged run has %d %s zones, want at least 10" % (count, name))
    tol = 2 * largest_uncertainty_us(paths) + 2.0
    worst = 0.0
    for what, a, b in (("start", parts[0], whole[0]), ("end", parts[1], whole[1])):
        if len(a) != count or len(b) != count:
            fail("one timeline: %d and %d %s %ss, want %d in each view"
                 % (len(a), len(b), name, what, count))
        for k, (x, y) in enumerate(zip(a, b)):
            worst = max(worst, abs(x - y))
            if abs(x - y) > tol:
                fail("one timeline: %s %s #%d at %.3f us in XProf's view of the %d files, "
                     "%.3f us in the merged run: %.3f us apart (allowed %.3f)"
                     % (name, what, k, x, len(paths), y, x - y, tol))
    return worst, tol, count


def trace_viewer(paths):
    """XProf's trace_viewer@ (its multi-host viewer) of the files, every host selected."""
    from xprof.convert import raw_to_tool_data
    hosts = [os.path.basename(p)[:-len(".xplane.pb")] for p in paths]
    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, "trace_viewer@", {"hosts": hosts})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    return json.loads(data)["traceEvents"]


def main():
    name, count, merged, paths = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
    worst, tol, count = check_one_timeline(trace_viewer(paths), trace_viewer([merged]), paths,
                                           name, count)
    print("xprof one timeline: %d files, %d %s zones within %.3f us of the merged run's "
          "(allowed %.3f)" % (len(paths), count, name, worst, tol))


if __name__ == "__main__":
    main()
