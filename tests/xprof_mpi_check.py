"""xprof_mpi_check.py RUN_DIR NRANKS ITER MERGED: a loupe MPI run directory (rankNNNN.xplane.pb per rank)
read by the real XProf, as its UI reads it (tests/xprof_mpi.sh):
1. the Hosts selector: xprof's profile_plugin.hosts_from_xplane_filenames (what its /hosts route
   answers for trace_viewer) lists exactly rank0000 .. rank<N-1>;
2. the trace viewer of all hosts together: xprof's converter (xspace_to_tool_data's
   trace_viewer@, the C++ one XProf's viewer runs, with every host selected) on the N files gives NRANKS * ITER MPI_Allreduce slices, ITER on each of NRANKS
   distinct processes (one per host);
3. overview_page converts the N files without an error;
4. the per-rank files' flows: each rank's file writes its message ends (args mpi_send_id /
   mpi_recv_id) as XProf flow stats too (src/export/xplane.c put_message_flow), and XProf's
   bind_id is the XPlane flow id alone, so trace_viewer@ on the N files together has exactly
   NRANKS * ITER flows (mpi_app's ring: one message per rank and round), each a flow_out on an
   MPI_Send and a flow_in on an MPI_Wait of two ranks' processes; rank0000's file alone has
   half-flows only: ITER flow_out and ITER flow_in, each the only end of its bind_id (XProf
   writes them as they are; a viewer has nothing to draw an arrow to);
5. MERGED (`loupe convert RUN -o merged.xplane.pb`: one XSpace, the messages as loupe's own
   flows, producer/consumer stats): its trace_viewer@ has exactly NRANKS * ITER flows, each a
   flow_out on an MPI_Send and a flow_in on an MPI_Wait with one bind_id, on two ranks' threads
   (one XSpace: XProf shows its threads as one host's), and no second arrow per message.
6. one timeline: XProf lines the rank files up by their times as they are, so each file counts
   them from the run's base on rank 0's clock (loupe_clock_base_unix_ns; tests/xprof_mpi.sh runs
   half the ranks with their clocks 3 s ahead): every MPI_Allreduce's start and end in the view
   of the N files is where the merged run (loupe's own alignment, checked against the injected
   shift by tests/mpi_record.sh) puts it, to within twice the largest clock offset uncertainty
   the ranks' files state plus 2 us (the offset drifts between its two measurements; each file
   takes it at its middle). On 0.4 the ranks were 13 ms apart (each file from its own start),
   and the shifted ones 3 s.
Prints what differs and exits 1; exits 0 when all matches."""
import collections
import json
import os
import sys

from xprof_timeline import check_one_timeline, sample_line_ids


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def flow_ends(events):
    """bind_id -> [(direction, name, (pid, tid))] of the complete events that carry one."""
    ends = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "bind_id" in e:
            ends[e["bind_id"]].append(
                ("out" if e.get("flow_out") else "in", e["name"], (e["pid"], e["tid"])))
    for v in ends.values():
        v.sort()
    return ends


def check_flows(ends, want, what, apart):
    """Exactly want flows, each an MPI_Send flow_out and an MPI_Wait flow_in, the two on other
    processes (apart == "pid") or other threads (apart == "thread")."""
    if len(ends) != want:
        fail("xprof %s: %d flows, want %d" % (what, len(ends), want))
    for bid, v in ends.items():
        other = (len(v) == 2 and
                 (v[0][2][0] != v[1][2][0] if apart == "pid" else v[0][2] != v[1][2]))
        if len(v) != 2 or v[0][:2] != ("in", "MPI_Wait") or v[1][:2] != ("out", "MPI_Send") \
                or not other:
            fail("xprof %s: flow %d has ends %r, want an MPI_Send flow_out and an MPI_Wait "
                 "flow_in on two ranks' %s" % (what, bid, v, "processes" if apart == "pid"
                                                else "threads"))


def main():
    run, n, it = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    from xprof import profile_plugin
    from xprof.convert import raw_to_tool_data

    names = sorted(os.listdir(run))
    hosts = list(profile_plugin.hosts_from_xplane_filenames(names, "trace_viewer"))
    want = ["rank%04d" % r for r in range(n)]
    if sorted(hosts) != want:
        fail("xprof hosts %r, want %r" % (hosts, want))
    paths = [os.path.join(run, "rank%04d.xplane.pb" % r) for r in range(n)]
    # trace_viewer@ is the viewer's multi-host tool (trace_viewer takes one XSpace only)
    data, _ = raw_to_tool_data.xspace_to_tool_data(paths, "trace_viewer@", {"hosts": want})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    events = json.loads(data)["traceEvents"]
    # zones only: a CPU sample whose leaf is the MPI_Allreduce wrapper is an event of that name
    # on a "CPU samples <tid>" line (loupe record samples by default)
    sample_lines = sample_line_ids(events)
    per_pid = collections.Counter(
        e["pid"] for e in events if e.get("ph") == "X" and e.get("name") == "MPI_Allreduce"
        and (e["pid"], e.get("tid")) not in sample_lines)
    if sorted(per_pid.values()) != [it] * n:
        fail("xprof trace_viewer@: MPI_Allreduce slices per process %r, want %d on each of %d"
             % (dict(per_pid), it, n))
    check_flows(flow_ends(events), n * it, "trace_viewer@ of the %d rank files" % n, "pid")
    one, _ = raw_to_tool_data.xspace_to_tool_data(paths[:1], "trace_viewer@", {"hosts": want[:1]})
    if isinstance(one, bytes):
        one = one.decode("utf-8")
    halves = flow_ends(json.loads(one)["traceEvents"])
    kinds = collections.Counter(tuple(x[:2] for x in v) for v in halves.values())
    if kinds != {(("out", "MPI_Send"),): it, (("in", "MPI_Wait"),): it}:
        fail("xprof trace_viewer@ of rank0000's file alone: flows %r, want %d half-flows of "
             "each side" % (dict(kinds), it))
    ov, _ = raw_to_tool_data.xspace_to_tool_data(paths, "overview_page", {})
    if not ov:
        fail("xprof overview_page: empty result for the %d hosts" % n)
    merged = sys.argv[4]
    host = os.path.basename(merged).split(".")[0]
    data, _ = raw_to_tool_data.xspace_to_tool_data([merged], "trace_viewer@", {"hosts": [host]})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    merged_events = json.loads(data)["traceEvents"]
    ends = flow_ends(merged_events)
    check_flows(ends, n * it, "trace_viewer@ of the merged run", "thread")
    worst, tol, _ = check_one_timeline(events, merged_events, paths, "MPI_Allreduce", n * it)
    print("xprof: hosts %s; trace_viewer@: %d MPI_Allreduce on each of %d processes; "
          "overview_page: %d bytes; the rank files: %d flows, MPI_Send to MPI_Wait across ranks; "
          "rank0000 alone: %d half-flows; merged run: %d flows; one timeline: every "
          "MPI_Allreduce within %.3f us of the merged run's (allowed %.3f)" % (
              ",".join(hosts), it, n, len(ov), n * it, 2 * it, len(ends), worst, tol))

main()
