#!/usr/bin/env bash
# record_death_samples.sh: the CPU samples of a program that dies under `loupe record` are in the
# trace loupe record recovers (the sampler's spool, src/record/sample_spool.c, read back by
# loupe_recover_trace()): a program that samples 0.4 s of CPU in hot_spin() and then dies of
# SIGKILL, SIGTERM, SIGINT (default actions) or _exit(), itself or as a forked child, has >= 150
# samples in its recovered file with hot_spin holding >= 80% of them, its zone recovered, the
# clean stop's metadata names, and no spool file left behind; a program with no zones at all,
# stopped by a SIGINT sent to loupe record (which passes it on), keeps its samples too. A spool
# that hit a full file system (simulated: LOUPE_TEST_SAMPLE_SPOOL_ENOSPC) says why in the
# trace's metadata and counts what it dropped. Python's multiprocessing.Pool workers, which end
# with os._exit(), have their samples (>= 50 each). Skipped (77) in a sanitizer build (the program
# dies on purpose) and where perf events are refused. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
src=$2
loupe=$build/loupe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
host=$(hostname)
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
[ -n "$sanitize" ] && { echo "record_death_samples: skipped: sanitizer build (the program dies on purpose, and a preloaded sanitizer runtime reports it)"; exit 77; }

cat >"$tmp/hot.c" <<'EOF'
#include <loupe/loupe.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
/* 400 ms of this thread's CPU time (task-clock samples CPU time) */
__attribute__((noinline)) static double hot_spin(void) {
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    volatile double x = 1.0;
    do {
        for (int i = 0; i < 10000; i++) {
            x = x * 1.0000001;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 400000000L);
    return x;
}
static void die(const char *how) {
    {
        LOUPE_ZONE("spin");
        hot_spin();
    }
    if (strcmp(how, "kill") == 0) raise(SIGKILL);
    if (strcmp(how, "term") == 0) raise(SIGTERM);
    if (strcmp(how, "int") == 0) raise(SIGINT);
    _exit(7);
}
int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "kill";
    if (strncmp(how, "fork-", 5) != 0) {
        die(how);
    }
    pid_t c = fork();
    if (c == 0) {
        die(how + 5);
    }
    int st = 0;
    waitpid(c, &st, 0);
    return 0;
}
EOF
# the same spinner without loupe: samples only, until a signal stops it
cat >"$tmp/spin.c" <<'EOF'
__attribute__((noinline)) static double hot_spin(void) {
    volatile double x = 1.0;
    for (;;) {
        x = x * 1.0000001;
    }
    return x;
}
int main(void) {
    return hot_spin() > 0;
}
EOF
gcc -O1 -g -fno-omit-frame-pointer -I"$src/include" "$tmp/hot.c" -o "$tmp/hot" -L"$build" \
  -lloupe -Wl,-rpath,"$build" || fail "cannot build the probe"
gcc -O1 -g -fno-omit-frame-pointer "$tmp/spin.c" -o "$tmp/spin" || fail "cannot build spin"

# check FILE WANT_ZONES: >= 150 samples, hot_spin >= 80% of them, the zone (or none), the
# metadata a clean stop writes, what the spool read
check() {
  "$loupe" summary "$1" --json >"$tmp/sum.json" 2>"$tmp/sumerr" || fail "summary $1: $(cat "$tmp/sumerr")"
  python3 - "$tmp/sum.json" "$2" <<'PY' || fail "$1: $(cat "$tmp/sum.json" | head -c 600)"
import json, sys
d = json.load(open(sys.argv[1]))
n = d["samples"]
hot = sum(f["self_samples"] for f in d["hot_functions"] if f["function"].startswith("hot_spin"))
assert n >= 150, "samples: %d" % n
assert hot * 10 >= n * 8, "hot_spin: %d of %d" % (hot, n)
assert d["sample_period_ns"] == 1001001, d["sample_period_ns"]
zones = {z["name"]: z["count"] for z in d["zones"]}
want = {"spin": 1} if sys.argv[2] == "1" else {}
assert zones == want, zones
PY
  # the metadata names are a clean stop's (loupe_sampling...), plus what the spool held
  "$loupe" convert "$1" -o "$tmp/meta.json" >/dev/null 2>&1 || fail "convert $1"
  python3 - "$tmp/meta.json" "${3:-ok}" <<'PY' || fail "$1: metadata"
import json, re, sys
m = json.load(open(sys.argv[1]))["metadata"]
assert m["loupe_sampling"] == "999 Hz task-clock, dwarf stacks", m["loupe_sampling"]
assert m["loupe_sampling_threads_missed"] == "0", m
s = m["loupe_samples_spool"]
if sys.argv[2] == "ok":
    assert re.fullmatch(r"[0-9]+ samples, [0-9]+ off-CPU intervals", s), s
    assert m["loupe_samples_spool_dropped"] == "0", m
else:
    assert re.search(sys.argv[2], s), s
    assert int(m["loupe_samples_spool_dropped"]) > 0, m
PY
}

# 1. the program itself dies
first=1
for how in kill term int _exit; do
  "$loupe" record -o "$tmp/log-$how" --print-run-dir "$tmp/run-$how" -- "$tmp/hot" "$how" \
    >/dev/null 2>"$tmp/err-$how"; st=$?
  if [ $first = 1 ] && grep -q "loupe: CPU sampling is unavailable" "$tmp/err-$how"; then
    echo "record_death_samples: skipped: perf events are refused here: $(head -1 "$tmp/err-$how")"
    exit 77
  fi
  first=0
  case $how in
    kill) want=137 ;; term) want=143 ;; int) want=130 ;; _exit) want=7 ;;
  esac
  [ "$st" = "$want" ] || fail "$how: exit $st, want $want: $(cat "$tmp/err-$how")"
  run=$(cat "$tmp/run-$how")
  f=$(ls "$run"/*.xplane.pb)
  [ "$(echo "$f" | wc -l)" = 1 ] || fail "$how: files: $(ls "$run")"
  check "$f" 1
  [ -z "$(ls "$run" | grep -v -e '\.xplane\.pb$' -e '\.trace\.json\.gz$')" ] || fail "$how: left in the run dir: $(ls "$run")"
  echo "record_death_samples: $how: exit $st, samples recovered with hot_spin named"
done

# 2. a forked child dies (its region and spool are files in /dev/shm/loupe-regions-*)
for how in kill term int _exit; do
  "$loupe" record -o "$tmp/log-f$how" --print-run-dir "$tmp/run-f$how" -- "$tmp/hot" "fork-$how" \
    >/dev/null 2>"$tmp/err-f$how"; st=$?
  [ "$st" = 0 ] || fail "fork-$how: exit $st: $(cat "$tmp/err-f$how")"
  run=$(cat "$tmp/run-f$how")
  pid=$(sed -n 's/^loupe record: pid \([0-9]*\) .*: recovered [0-9,]* events$/\1/p' "$tmp/err-f$how")
  [ -n "$pid" ] || fail "fork-$how: no recovery said: $(cat "$tmp/err-f$how")"
  check "$run/$host.$pid.xplane.pb" 1
  left=$(ls /dev/shm/loupe-regions-*/"$pid".*.samples 2>/dev/null)
  [ -z "$left" ] || fail "fork-$how: the child's spool is left: $left"
  echo "record_death_samples: fork-$how: the child's samples recovered with hot_spin named"
done

# 3. no zones: samples only, stopped by SIGINT sent to loupe record (passed on to the program)
# (a script's background job starts with SIGINT ignored, and exec keeps that: env puts the
# default action back, as a terminal's foreground job has it)
env --default-signal=INT "$loupe" record -o "$tmp/log-nz" --print-run-dir "$tmp/run-nz" -- \
  "$tmp/spin" >/dev/null 2>"$tmp/err-nz" &
rec=$!
sleep 1.5
kill -INT $rec
( sleep 20; kill -KILL $rec 2>/dev/null ) &
guard=$!
wait $rec; st=$?
kill $guard 2>/dev/null
[ "$st" = 130 ] || fail "no zones: exit $st, want 130: $(cat "$tmp/err-nz")"
run=$(cat "$tmp/run-nz")
f=$(ls "$run"/*.xplane.pb) || fail "no zones: nothing written: $(cat "$tmp/err-nz")"
check "$f" 0
# (a loaded machine may lose some: the sampler's ring overflowed, counted as lost)
grep -qE '^loupe record: [0-9,]+ samples(, [0-9,]+ lost)?$' "$tmp/err-nz" || fail "no zones: counts: $(cat "$tmp/err-nz")"
echo "record_death_samples: no zones, SIGINT: samples recovered with hot_spin named"

# 4. Python's multiprocessing.Pool: its workers end with os._exit() (multiprocessing's
# popen_fork.py); each one's samples are recovered from its spool
if python3 -c 'import multiprocessing' 2>/dev/null; then
  cat >"$tmp/pool.py" <<'EOF'
import multiprocessing as mp, time
def work(n):
    t = time.process_time()
    x = 0
    while time.process_time() - t < 0.4:
        x += 1
    return x
if __name__ == "__main__":
    mp.set_start_method("fork")
    p = mp.Pool(2)
    print(len(p.map(work, range(2))))
    p.close()  # no terminate(): the workers leave their loop and os._exit()
    p.join()
EOF
  "$loupe" record -o "$tmp/log-py" --print-run-dir "$tmp/run-py" -- python3 "$tmp/pool.py" \
    >"$tmp/out-py" 2>"$tmp/err-py"; st=$?
  [ "$st" = 0 ] && [ "$(cat "$tmp/out-py")" = 2 ] || fail "pool: exit $st: $(cat "$tmp/err-py")"
  run=$(cat "$tmp/run-py")
  pids=$(sed -n 's/^loupe record: pid \([0-9]*\) exited without writing its trace: recovered [0-9,]* events$/\1/p' "$tmp/err-py")
  [ "$(echo "$pids" | grep -c .)" -ge 2 ] || fail "pool: workers recovered: $(cat "$tmp/err-py")"
  for w in $pids; do
    n=$("$loupe" summary "$run/$host.$w.xplane.pb" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["samples"])')
    [ "$n" -ge 50 ] || fail "pool: worker $w has $n samples"
  done
  echo "record_death_samples: Pool workers (os._exit): their samples recovered"
fi

# 5. a full file system stops the spool: the reason is in the trace, the drop counted
LOUPE_TEST_SAMPLE_SPOOL_ENOSPC=20000 "$loupe" record -o "$tmp/log-ns" --print-run-dir \
  "$tmp/run-ns" -- "$tmp/hot" kill >/dev/null 2>"$tmp/err-ns"; st=$?
[ "$st" = 137 ] || fail "enospc: exit $st: $(cat "$tmp/err-ns")"
run=$(cat "$tmp/run-ns")
"$loupe" convert "$(ls "$run"/*.xplane.pb)" -o "$tmp/ns.json" >/dev/null 2>&1 || fail "enospc: convert"
python3 - "$tmp/ns.json" <<'PY' || fail "enospc: metadata"
import json, re, sys
m = json.load(open(sys.argv[1]))["metadata"]
s = m["loupe_samples_spool"]
assert re.fullmatch(r"[0-9]+ samples, [0-9]+ off-CPU intervals; (?:[0-9]+ off-CPU intervals dropped; )?stopped: write to /.*/loupe-samples-[0-9]+\.bin failed after [0-9]+ bytes: No space left on device \(errno 28\)", s), s
assert int(m["loupe_samples_spool_dropped"]) > 0, m
PY
echo "record_death_samples: a full file system: the spool stopped, the reason and the drop in the trace"
