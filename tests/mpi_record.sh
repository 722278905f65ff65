#!/usr/bin/env bash
# mpi_record.sh: `mpirun -np N loupe record -- ./mpi_app` end to end (docs/mpi.md), with 2 and 4
# ranks: one run directory with rankNNNN files, exact per-rank zone counts, every message's
# send matched to its receive (and drawn as a flow in the merged run), collectives numbered, an
# injected clock offset measured and removed (tests/mpi/mpi_check.c), and
# `loupe summary --by-rank` on the known imbalance of mpi_app (rank r computes (r + 1) * 30 ms
# per round: rank N-1 arrives last at MPI_Allreduce);
# `mpi_app completions` with 3 ranks and with 1: the Wait/Test family, persistent requests,
# messages to itself and non-blocking collectives counted, every message a flow.
# Skipped (77) when this build has no libloupe_mpi.so or mpirun is missing.
set -u
build=$1
app=$build/tests/mpi_app
check=$build/tests/mpi_check
if [ ! -e "$build/libloupe_mpi.so" ] || [ ! -x "$app" ] || [ ! -x "$check" ]; then
    echo "skipped: this build has no libloupe_mpi.so (no MPI C bindings at configure time)"
    exit 77
fi
if ! command -v mpirun >/dev/null; then
    echo "skipped: no mpirun (apt-get install openmpi-bin libopenmpi-dev: tools/setup.sh)"
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# In containers: root needs --allow-run-as-root; fewer cores than ranks need --oversubscribe;
# shared-memory transport without CMA/ptrace (vader's single-copy mechanism off).
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
# A sanitizer build: the program is ASan-linked, but `loupe record` preloads libloupe ahead of
# the ASan runtime, which ASan refuses unless told the order does not matter here. Leak checks
# off: Open MPI 4.1 leaves about 120 KB allocated by its components at MPI_Finalize, in modules
# it has dlclose()d by then (frames a suppression file cannot name); loupe's own leaks are
# caught by the session and record tests.
if ldd "$build/loupe" | grep libasan >/dev/null; then # not -q: ldd would get SIGPIPE, failing the pipe
    export ASAN_OPTIONS="verify_asan_link_order=0:detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# waiting ranks yield the CPU (the machine may have fewer cores than ranks)
export OMPI_MCA_mpi_yield_when_idle=1
shift_ns=5000000000
iter=5
fail=0
for n in 2 4; do
    log=$tmp/log$n
    half=$((n / 2))
    # ranks >= n/2 run with their clock 5 s ahead (MPMD: the same program, another env)
    run_ranks() {
        timeout 120 mpirun --allow-run-as-root --oversubscribe -np $half \
            "$build/loupe" record -q -o "$log" -- "$app" : -np $((n - half)) \
            env LOUPE_TEST_CLOCK_SHIFT_NS=$shift_ns "$build/loupe" record -q -o "$log" -- "$app" \
            >"$tmp/out$n" 2>&1
    }
    run_ranks; st=$?
    if [ "$st" = 124 ]; then
        # mpirun did not end within 120 s (seen once in a heavily loaded fresh-clone run, after
        # every rank's loupe record had printed its run directory): say so loudly, show what
        # was left, and run once more; a second hang fails.
        echo "WARN: mpirun -np $n did not end within 120 s; its output:"
        cat "$tmp/out$n"
        ps -eo pid,ppid,stat,etime,args | grep -E "mpi_app|loupe|orted|prterun" | grep -v grep
        rm -rf "$log"
        run_ranks; st=$?
    fi
    if [ "$st" != 0 ]; then
        echo "FAIL: mpirun -np $n: exit status $st:"
        cat "$tmp/out$n"
        fail=1
        continue
    fi
    runs=$(ls -d "$log"/plugins/profile/* | wc -l)
    files=$(ls "$log"/plugins/profile/*/ | sort | tr '\n' ' ')
    want=""
    for ((r = 0; r < n; r++)); do
        want="$want$(printf 'rank%04d.trace.json.gz rank%04d.xplane.pb ' $r $r)"
    done
    want=$(echo $want | tr ' ' '\n' | sort | tr '\n' ' ')
    if [ "$runs" != 1 ] || [ "$files" != "$want" ]; then
        echo "FAIL: -np $n: $runs run directories, files: $files (want 1 run with: $want)"
        fail=1
        continue
    fi
    run=$(ls -d "$log"/plugins/profile/*)
    case $(basename "$run") in mpi_*) ;; *)
        echo "FAIL: -np $n: run directory $run is not named after the job (mpi_<jobid>)"
        fail=1
        ;;
    esac
    if ! "$check" "$run" $n $iter $half $shift_ns; then
        echo "FAIL: -np $n: mpi_check"
        fail=1
        continue
    fi
    sum=$("$build/loupe" summary "$run" --by-rank 2>&1)
    echo "$sum"
    last=$((n - 1))
    # the known imbalance: per-rank compute totals (r + 1) * 30 ms * 5, so max / mean is at most
    # 2n / (n + 1) (1.33 for 2 ranks, 1.60 for 4); sleeps overshoot on a loaded machine (OpenMPI's
    # ranks busy-poll in their collectives), which lowers it. Exact: --by-rank's ratio equals
    # max / mean of the per-rank totals read from each rank's own file (to its 2 decimals).
    ratio=$(echo "$sum" | awk '$NF == "compute" && $1 == '$((n * iter))' { print $(NF - 2) }')
    rank=$(echo "$sum" | awk '$NF == "compute" { print $(NF - 1) }')
    totals=$(for f in "$run"/rank*.trace.json.gz; do
        "$build/loupe" summary --json "$f" | python3 -c '
import json, sys
print(next(z["total_ns"] for z in json.load(sys.stdin)["zones"] if z["name"] == "compute"))'
    done)
    want_ratio=$(echo "$totals" | awk '{ s += $1; if ($1 > m) m = $1 } END { printf "%.2f", m / (s / NR) }')
    # the rank whose own file holds the largest compute total (rank n-1 by design)
    file_max=$(echo "$totals" | awk '{ if ($1 > m) { m = $1; r = NR - 1 } } END { print r }')
    max_ratio=$(awk -v n=$n 'BEGIN { printf "%.2f", 2 * n / (n + 1) }')
    ok=$(awk -v a="$ratio" -v b="$want_ratio" -v hi="$max_ratio" \
        'BEGIN { d = a - b; print (a != "" && d < 0.011 && d > -0.011 && a > 1.0) }')
    if [ "$ok" != 1 ] || [ "$rank" != "$file_max" ]; then
        echo "FAIL: -np $n: compute imbalance '$ratio' on rank '$rank', want $want_ratio (about $max_ratio less the sleeps' overshoot) on $file_max (the largest total in the rank files)"
        fail=1
    fi
    if [ "$file_max" != "$last" ]; then
        # the sleeps overshot so far on this loaded machine that the designed staircase is not in
        # the files: the design-specific checks below would test the scheduler, not loupe
        echo "note: -np $n: rank $file_max's compute total is the largest in its own file (by design rank $last): the critical-rank design checks are skipped"
        continue
    fi
    # rank n-1 arrives last at every MPI_Allreduce, (n - 1) * 30 ms after rank 0 (-1 ms, + 1 s
    # of scheduling: CI runs other tests beside this one, and a CPU-bound rank sharing a core
    # with them spins longer; 215 ms seen with 2 ranks)
    hint=$(echo "$sum" | grep '^critical rank: rank .* arrives last at MPI_Allreduce #')
    by_ms=$(echo "$hint" | sed -n 's/.* by \([0-9.]*\) ms .*/\1/p')
    ok=$(awk -v b="$by_ms" -v n=$n 'BEGIN { lo = (n - 1) * 30; print (b != "" && b >= lo - 1 && b <= lo + 1000) }')
    if ! echo "$hint" | grep -q "^critical rank: rank $last arrives" || [ "$ok" != 1 ]; then
        echo "FAIL: -np $n: critical-rank hint '$hint', want rank $last by about $(((n - 1) * 30)) ms"
        fail=1
    fi
    if ! echo "$sum" | grep -q "^critical rank: rank $last arrives last at [$iter-6] of 6 collectives"; then
        echo "FAIL: -np $n: rank $last should arrive last at the $iter MPI_Allreduce (of 6 collectives)"
        fail=1
    fi
done
# The rest of the Wait/Test family and the non-blocking collectives (mpi_app completions):
# exact counts per rank, and every message a flow in the merged run (tests/mpi/mpi_check.c).
log=$tmp/logcompl
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 3 \
    "$build/loupe" record -q -o "$log" -- "$app" completions >"$tmp/outcompl" 2>&1; then
    run=$(ls -d "$log"/plugins/profile/*)
    if ! "$check" "$run" 3 completions; then
        echo "FAIL: mpi_app completions: mpi_check"
        fail=1
    fi
else
    echo "FAIL: mpirun -np 3 mpi_app completions:"
    cat "$tmp/outcompl"
    fail=1
fi
# One rank (a run directory with a single rank file): every message it sends to itself is a
# flow of the run (the merge runs for one rank file too).
log=$tmp/logcompl1
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 1 \
    "$build/loupe" record -q -o "$log" -- "$app" completions >"$tmp/outcompl1" 2>&1; then
    run=$(ls -d "$log"/plugins/profile/*)
    if ! "$check" "$run" 1 completions; then
        echo "FAIL: mpi_app completions, 1 rank: mpi_check"
        fail=1
    fi
else
    echo "FAIL: mpirun -np 1 mpi_app completions:"
    cat "$tmp/outcompl1"
    fail=1
fi
# --no-mpi: the rank files still (compute zones, one run directory), but no MPI call zones.
log=$tmp/lognompi
if timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
    "$build/loupe" record -q --no-mpi -o "$log" -- "$app" >"$tmp/outnompi" 2>&1; then
    run=$(ls -d "$log"/plugins/profile/*)
    s0=$("$build/loupe" summary --top 0 "$run/rank0001.trace.json.gz")
    if [ "$(echo "$s0" | grep -c ' MPI_')" != 0 ] || ! echo "$s0" | grep -q ' compute$'; then
        echo "FAIL: --no-mpi: rank 1's zones:"
        echo "$s0"
        fail=1
    fi
else
    echo "FAIL: mpirun -np 2 --no-mpi:"
    cat "$tmp/outnompi"
    fail=1
fi
# 16 ranks with small traces, end to end: 16 rank files, every message matched.
log=$tmp/log16
# Frame-pointer stacks here: two 16-rank runs (of about ten) died of SIGSEGV in MPI after 196
# events with DWARF unwinding in 16 samplers at once; the cause is not found yet (see the issue
# note), and the 2- and 4-rank runs above keep the default.
if timeout 300 mpirun --allow-run-as-root --oversubscribe -np 16 \
    "$build/loupe" record -q --format json --sample-stacks fp -o "$log" -- "$app" \
    >"$tmp/out16" 2>&1; then
    run=$(ls -d "$log"/plugins/profile/*)
    if [ "$(ls "$run" | wc -l)" != 16 ] || ! "$check" "$run" 16 $iter 16 0 2000000; then
        echo "FAIL: -np 16: $(ls "$run" | wc -l) files"
        fail=1
    fi
else
    echo "FAIL: mpirun -np 16:"
    cat "$tmp/out16"
    fail=1
fi
[ $fail = 0 ] && echo "mpi_record: ok"
exit $fail
