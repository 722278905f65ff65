#!/usr/bin/env bash
# mpi_record_mpich.sh: tests/mpi_record.sh's shape under MPICH for real: `mpiexec.mpich -np N
# loupe record -- ./mpi_app_mpich` (mpi_app built with MPICH; `loupe record` preloads
# libloupe_mpi_mpich.so, the PMPI wrappers built with MPICH beside Open MPI's libloupe_mpi.so:
# cli/record_mpi.c picks the one whose libmpi the program links). Hydra on one host gives its
# ranks PMI_RANK / PMI_SIZE / PMI_FD and no job id: one run directory named after the ranks'
# shared launcher (mpi_ppid<Hydra's proxy>), exactly rank0000.* and rank0001.*; every message's
# send matched to its receive and drawn as a flow, an injected clock offset on rank 1 measured
# and removed (tests/mpi/mpi_check.c); `mpi_app completions` with 3 ranks: exact counts.
# Skipped (77) when this build has no libloupe_mpi_mpich.so (no MPICH beside another MPI at
# configure time) or mpiexec.mpich is missing.
set -u
build=$1
app=$build/tests/mpi_app_mpich
check=$build/tests/mpi_check
if [ ! -e "$build/libloupe_mpi_mpich.so" ] || [ ! -x "$app" ] || [ ! -x "$check" ]; then
    echo "skipped: this build has no libloupe_mpi_mpich.so (MPICH's mpich.pc not found beside another MPI at configure time: apt-get install mpich libmpich-dev, tools/setup.sh)"
    exit 77
fi
if ! command -v mpiexec.mpich >/dev/null; then
    echo "skipped: no mpiexec.mpich (apt-get install mpich libmpich-dev: tools/setup.sh)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# A sanitizer build: as in tests/mpi_record.sh (libloupe ahead of the ASan runtime; MPI's own
# allocations at finalize are not loupe's leaks).
if ldd "$build/loupe" | grep libasan >/dev/null; then # not -q: ldd would get SIGPIPE
    export ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
fail=0
shift_ns=5000000000
iter=5
log=$tmp/log2
# rank 1 runs with its clock 5 s ahead (MPMD: the same program, another env)
if ! timeout 120 mpiexec.mpich -np 1 "$build/loupe" record -q -o "$log" -- "$app" : \
    -np 1 env LOUPE_TEST_CLOCK_SHIFT_NS=$shift_ns "$build/loupe" record -q -o "$log" -- "$app" \
    >"$tmp/out2" 2>&1; then
    echo "FAIL: mpiexec.mpich -np 2:"
    cat "$tmp/out2"
    exit 1
fi
runs=$(ls "$log"/plugins/profile/)
files=$(ls "$log"/plugins/profile/*/ | sort | tr '\n' ' ')
want="rank0000.trace.json.gz rank0000.xplane.pb rank0001.trace.json.gz rank0001.xplane.pb "
if [ "$(echo "$runs" | wc -l)" != 1 ] || [ "$files" != "$want" ]; then
    echo "FAIL: -np 2: run directories '$runs', files: $files (want 1 run with: $want)"
    exit 1
fi
case $runs in mpi_ppid[0-9]*) ;; *)
    echo "FAIL: -np 2: run directory $runs is not named after the ranks' launcher (mpi_ppid<pid>)"
    fail=1
    ;;
esac
run=$log/plugins/profile/$runs
if ! "$check" "$run" 2 $iter 1 $shift_ns; then
    echo "FAIL: -np 2: mpi_check"
    fail=1
fi
# the MPI calls were recorded by the MPICH build of the wrappers: rank 1's 5 MPI_Allreduce zones
n=$("$build/loupe" summary --json "$run/rank0001.trace.json.gz" | python3 -c '
import json, sys
print(sum(z["count"] for z in json.load(sys.stdin)["zones"] if z["name"] == "MPI_Allreduce"))')
if [ "$n" != $iter ]; then
    echo "FAIL: -np 2: rank 1 has '$n' MPI_Allreduce zones, want $iter"
    fail=1
fi
log=$tmp/logcompl
if timeout 120 mpiexec.mpich -np 3 "$build/loupe" record -q -o "$log" -- "$app" completions \
    >"$tmp/outcompl" 2>&1; then
    run=$(ls -d "$log"/plugins/profile/*)
    if ! "$check" "$run" 3 completions; then
        echo "FAIL: mpi_app_mpich completions: mpi_check"
        fail=1
    fi
else
    echo "FAIL: mpiexec.mpich -np 3 mpi_app_mpich completions:"
    cat "$tmp/outcompl"
    fail=1
fi
[ $fail = 0 ] && echo "mpi_record_mpich: ok (2 ranks: one run directory, messages matched, offset removed; completions: 3 ranks)"
exit $fail
