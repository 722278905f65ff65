"""xprof_mpi_check.py RUN_DIR NRANKS ITER MERGED: a loupe MPI run directory (rankNNNN.xplane.pb per rank)
read by the real XProf, as its UI reads it (tests/xprof_mpi.sh):
1. the Hosts selector: xprof's profile_plugin.hosts_from_xplane_filenames (what its /hosts route
   answers for trace_viewer) lists exactly rank0000 .. rank<N-1>;
2. the trace viewer of all hosts together: xprof's converter (xspace_to_tool_data's
   trace_viewer@, the C++ one XProf's viewer runs, with every host selected) on the N files gives NRANKS * ITER MPI_Allreduce slices, ITER on each of NRANKS
   distinct processes (one per host);
3. overview_page converts the N files without an error;
4. MERGED (`loupe convert RUN -o merged.xplane.pb`: one XSpace, the messages as flows): its
   trace_viewer@ has exactly NRANKS * ITER flows (mpi_app's ring: one message per rank and
   round), each a flow_out on an MPI_Send and a flow_in on an MPI_Wait with one bind_id, on two
   ranks' threads (one XSpace: XProf shows its threads as one host's). XProf itself joins flows across files too (the bind_id it writes is a function of
   the XPlane flow id alone, the same in every file), but a rank's own file holds only its
   message ends as args (mpi_send_id / mpi_recv_id), not as XPlane flow stats: the flows exist
   once the run is merged, so the per-rank files show none (printed, not asserted).
Prints what differs and exits 1; exits 0 when all matches."""
import collections
import json
import os
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


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
    sample_lines = {(e["pid"], e["tid"]) for e in events
                    if e.get("ph") == "M" and e.get("name") == "thread_name"
                    and e.get("args", {}).get("name", "").startswith("CPU samples")}
    per_pid = collections.Counter(
        e["pid"] for e in events if e.get("ph") == "X" and e.get("name") == "MPI_Allreduce"
        and (e["pid"], e.get("tid")) not in sample_lines)
    if sorted(per_pid.values()) != [it] * n:
        fail("xprof trace_viewer@: MPI_Allreduce slices per process %r, want %d on each of %d"
             % (dict(per_pid), it, n))
    rank_flows = sum(1 for e in events if "bind_id" in e)
    ov, _ = raw_to_tool_data.xspace_to_tool_data(paths, "overview_page", {})
    if not ov:
        fail("xprof overview_page: empty result for the %d hosts" % n)
    merged = sys.argv[4]
    host = os.path.basename(merged).split(".")[0]
    data, _ = raw_to_tool_data.xspace_to_tool_data([merged], "trace_viewer@", {"hosts": [host]})
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    ends = collections.defaultdict(list)
    for e in json.loads(data)["traceEvents"]:
        if e.get("ph") == "X" and "bind_id" in e:
            ends[e["bind_id"]].append(
                ("out" if e.get("flow_out") else "in", e["name"], (e["pid"], e["tid"])))
    if len(ends) != n * it:
        fail("xprof trace_viewer@ of the merged run: %d flows, want %d" % (len(ends), n * it))
    for bid, v in ends.items():
        v.sort()
        if (len(v) != 2 or v[0][:2] != ("in", "MPI_Wait") or v[1][:2] != ("out", "MPI_Send")
                or v[0][2] == v[1][2]):
            fail("xprof trace_viewer@ of the merged run: flow %d has ends %r, want an MPI_Send "
                 "flow_out and an MPI_Wait flow_in on two ranks' threads" % (bid, v))
    print("xprof: hosts %s; trace_viewer@: %d MPI_Allreduce on each of %d processes; "
          "overview_page: %d bytes; merged run: %d flows, MPI_Send to MPI_Wait across ranks "
          "(the rank files: %d flow ends)" % (",".join(hosts), it, n, len(ov), len(ends),
                                               rank_flows))


main()
