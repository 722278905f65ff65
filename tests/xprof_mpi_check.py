"""xprof_mpi_check.py RUN_DIR NRANKS ITER: a loupe MPI run directory (rankNNNN.xplane.pb per rank)
read by the real XProf, as its UI reads it (tests/xprof_mpi.sh):
1. the Hosts selector: xprof's profile_plugin.hosts_from_xplane_filenames (what its /hosts route
   answers for trace_viewer) lists exactly rank0000 .. rank<N-1>;
2. the trace viewer of all hosts together: xprof's converter (xspace_to_tool_data's
   trace_viewer@, the C++ one XProf's viewer runs, with every host selected) on the N files gives NRANKS * ITER MPI_Allreduce slices, ITER on each of NRANKS
   distinct processes (one per host);
3. overview_page converts the N files without an error.
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
    per_pid = collections.Counter(
        e["pid"] for e in events if e.get("ph") == "X" and e.get("name") == "MPI_Allreduce")
    if sorted(per_pid.values()) != [it] * n:
        fail("xprof trace_viewer@: MPI_Allreduce slices per process %r, want %d on each of %d"
             % (dict(per_pid), it, n))
    ov, _ = raw_to_tool_data.xspace_to_tool_data(paths, "overview_page", {})
    if not ov:
        fail("xprof overview_page: empty result for the %d hosts" % n)
    print("xprof: hosts %s; trace_viewer@: %d MPI_Allreduce on each of %d processes; "
          "overview_page: %d bytes" % (",".join(hosts), it, n, len(ov)))


main()
