#!/usr/bin/env bash
# xprof_mpi.sh BUILD_DIR SOURCE_DIR: a 4-rank `mpirun ... loupe record` run read by the real
# XProf (tests/xprof_mpi_check.py): its Hosts selector lists the 4 ranks, its trace viewer shows
# them together with every MPI message as a flow between two ranks' processes (one rank's file
# alone: half-flows), overview_page converts them, the run merged into one .xplane.pb shows
# every message as a flow once, and the ranks' files are on one timeline (two ranks' clocks 3 s
# ahead): every MPI_Allreduce where the merged run has it. Uses the xprof venv of tests/xprof_validate.sh
# (tests/probes/xprof_venv.sh: skipped, 77, when pip cannot fill it). Skipped (77) when the build
# has no libloupe_mpi.so or mpirun is missing.
set -uo pipefail
build=$1
src=$2
name=xprof_mpi
if [ ! -e "$build/libloupe_mpi.so" ] || [ ! -x "$build/tests/mpi_app" ]; then
    echo "skipped: this build has no libloupe_mpi.so (no MPI C bindings at configure time)"
    exit 77
fi
if ! command -v mpirun >/dev/null; then
    echo "skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev: tools/setup.sh)"
    exit 77
fi
. "$src/tests/probes/xprof_venv.sh" # finds or fills the shared venv; sets $venv and $py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loupe-xprof-mpi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
# A sanitizer build: the program is ASan-linked, but `loupe record` preloads libloupe ahead of
# the ASan runtime, which ASan refuses unless told the order does not matter here. Leak checks
# off: Open MPI 4.1 leaves about 120 KB allocated by its components at MPI_Finalize, in modules
# it has dlclose()d by then (frames a suppression file cannot name); loupe's own leaks are
# caught by the session and record tests.
if ldd "$build/loupe" | grep libasan >/dev/null; then # not -q: ldd would get SIGPIPE, failing the pipe
    export ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
export OMPI_MCA_mpi_yield_when_idle=1
# ranks 2 and 3 run with their clocks 3 s ahead (MPMD: the same program, another env), which
# their files' times must not show in XProf's view (check 6)
if ! timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$build/loupe" record \
    --format xplane -o "$tmp/log" -- "$build/tests/mpi_app" : -np 2 \
    env LOUPE_TEST_CLOCK_SHIFT_NS=3000000000 "$build/loupe" record \
    --format xplane -o "$tmp/log" -- "$build/tests/mpi_app" >"$tmp/out" 2>&1; then
    cat "$tmp/out"
    echo "xprof_mpi: FAIL: mpirun -np 4"
    exit 1
fi
# each rank's loupe record reports its own process, from its counts, and reads no other rank's
# trace (a helper saw the 4 reports say 3, 3, 3 and 4 processes: each read the others back)
# (the ranks share mpirun's output, so their lines may interleave: the reports are counted where
# they are, not by line)
n=$(grep -oE '[0-9,]+ events recorded, [0-9,]+ dropped' "$tmp/out" | wc -l)
[ "$n" = 4 ] && ! grep -qE '[0-9]+ processes, [0-9,]+ events recorded' "$tmp/out" || {
  cat "$tmp/out"; echo "xprof_mpi: FAIL: the ranks' reports (want 4 reports, of one process each)"; exit 1; }
run=$(ls -d "$tmp"/log/plugins/profile/*)
# the merged run as one XSpace (the MPI messages as flows: src/model/merge.c)
if ! "$build/loupe" convert "$run" -o "$tmp/merged.xplane.pb" >"$tmp/convert.log" 2>&1; then
    cat "$tmp/convert.log"
    echo "xprof_mpi: FAIL: loupe convert RUN -o merged.xplane.pb"
    exit 1
fi
if ! timeout 120 "$py" "$src/tests/xprof_mpi_check.py" "$run" 4 5 "$tmp/merged.xplane.pb" \
    >"$tmp/check.log" 2>&1; then
    grep -v '^[IW]0000' "$tmp/check.log" | tail -20
    echo "xprof_mpi: FAIL"
    exit 1
fi
grep '^xprof' "$tmp/check.log"
