#!/usr/bin/env bash
# record_follow.sh: `loupe record` follows the process tree: a shell script running three
# programs, a server forking 3 workers (and the fork points it records), a killed child and
# grandchild and an _exit()ed one (recovered, the cause said), a child that records before and
# after an exec (one file set per image), --no-follow (also through bash -c); every process lands
# in the one run directory as <host>.<pid>[.<n>].* and `loupe summary RUN --json` reads the merged
# view (a process per file, with its parent pid and command line). record's report sums every
# process's files with a line each; -q, sh -c 'exit 3', a sampling-only run and a bad --spool
# say exactly what they should; children of system() and posix_spawn() are traced. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
[ -n "$sanitize" ] && { echo "record_follow: skipped: sanitizer build (a preloaded sanitizer runtime in every process of the tree)"; exit 77; }
probe=$build/tests/follow_probe
host=$(hostname)
# per process, sorted: "<slices> <zone names...>" lines, and the zone counts over the run
procs() {
  "$build/loupe" summary "$1" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
for p in sorted(d["processes"], key=lambda p: (p["slices"], p["cmdline"])):
    print(p["slices"], p["cmdline"].replace(sys.argv[1], "P"), "parent_ok" if p["parent_pid"] else "no_parent")
print("zones", " ".join("%s=%d" % (z["name"], z["count"]) for z in sorted(d["zones"], key=lambda z: z["name"])))' "$probe"
}

# 1. a shell script running three programs (fork + exec from bash)
cat >"$tmp/three.sh" <<SH
"$probe" zones alpha 10
"$probe" zones beta 20
"$probe" zones gamma 30
SH
"$build/loupe" record -q --print-run-dir "$tmp/run1" -o "$tmp/log1" -- bash "$tmp/three.sh" >/dev/null 2>"$tmp/err1" || fail "script: $(cat "$tmp/err1")"
run=$(cat "$tmp/run1" 2>/dev/null)
[ -d "$run" ] || fail "script: no run directory ($run)"
n=$(ls "$run" | grep -c "^$host\.[0-9]*\.trace\.json\.gz$")
[ "$n" = 4 ] || fail "script: $n trace files, want 4 (bash + 3 programs): $(ls "$run")"
got=$(procs "$run") || fail "script: summary failed"
want="0 bash $tmp/three.sh parent_ok
10 P zones alpha 10 parent_ok
20 P zones beta 20 parent_ok
30 P zones gamma 30 parent_ok
zones alpha=10 beta=20 gamma=30"
[ "$got" = "$want" ] || fail "script: got
$got
want
$want"
echo "record_follow: script: 4 processes (bash and its 3 programs), 10/20/30 zones"

# 2. a server forking 3 workers, 50 zones each, no exec
"$build/loupe" record -q --print-run-dir "$tmp/run2" -o "$tmp/log2" -- "$probe" server 3 50 >/dev/null 2>"$tmp/err2" || fail "server: $(cat "$tmp/err2")"
run=$(cat "$tmp/run2" 2>/dev/null)
got=$(procs "$run") || fail "server: summary failed"
want="1 P server 3 50 parent_ok
50 P server 3 50 parent_ok
50 P server 3 50 parent_ok
50 P server 3 50 parent_ok
zones serve=1 worker=150"
[ "$got" = "$want" ] || fail "server: got
$got
want
$want"
# the workers' parent is the server
"$build/loupe" summary "$run" --json | python3 -c '
import json, sys
ps = json.load(sys.stdin)["processes"]
root = [p for p in ps if p["slices"] == 1][0]
assert all(p["parent_pid"] == root["pid"] for p in ps if p is not root), ps
assert ps[0]["pid"] == root["pid"], "the root is processes[0]"' || fail "server: parent pids"
# the server's file says where it forked each worker (record.forks: pid:unix_ns, in fork
# order), between its own start and the worker's
python3 - "$run" <<'PY' || fail "server: record.forks"
import glob, gzip, json, sys
meta = [json.load(gzip.open(f))["metadata"] for f in glob.glob(sys.argv[1] + "/*.trace.json.gz")]
root = [m for m in meta if "record.forks" in m]
assert len(root) == 1, [m.get("record.forks") for m in meta]
forks = [tuple(int(x) for x in item.split(":")) for item in root[0]["record.forks"].split(",")]
kids = {int(m["pid"]): int(m["origin_unix_ns"]) for m in meta if m is not root[0]}
assert sorted(p for p, _ in forks) == sorted(kids), (forks, kids)
assert [t for _, t in forks] == sorted(t for _, t in forks), forks
for p, t in forks:
    assert int(root[0]["origin_unix_ns"]) <= t <= kids[p], (p, t, root[0]["origin_unix_ns"], kids[p])
PY
echo "record_follow: server: 4 processes, 3 workers x 50 zones, parent pids, 3 fork points"
# 2b. the report comes from the counts file each process's writer leaves in loupe record's
# counts directory (src/export/rundir.c, $LOUPE_RECORD_COUNTS_DIR), not from reading the traces
# back (0.4: 2.3 GB for 100 M events): under strace, loupe record (its first process) opens no
# trace file of the run, writes its report from the counts, and leaves no counts directory
if command -v strace >/dev/null; then
  strace -f -qq -e trace=openat,mkdir -o "$tmp/st2b" "$build/loupe" record --no-sample \
    --print-run-dir "$tmp/run2b" -o "$tmp/log2b" -- "$probe" server 3 50 >/dev/null 2>"$tmp/err2b" ||
    fail "server under strace: $(cat "$tmp/err2b")"
  rec=$(head -1 "$tmp/st2b" | cut -d' ' -f1)
  if grep "^$rec " "$tmp/st2b" | grep -E '\.(xplane\.pb|trace\.json\.gz|pftrace)", O_RDONLY' >"$tmp/reads"; then
    fail "loupe record read the traces back: $(head -2 "$tmp/reads")"
  fi
  n=$(grep -c '/loupe-counts-[A-Za-z0-9]*/[^"]*\.counts\.tmp", O_WRONLY' "$tmp/st2b")
  [ "$n" = 4 ] || fail "counts: $n counts files written, want 4 (one per process)"
  grep -qxF "loupe record: 4 processes, 452 events recorded, 0 dropped" "$tmp/err2b" ||
    fail "server under strace: the report: $(cat "$tmp/err2b")"
  dir=$(sed -n 's/.*mkdir("\([^"]*loupe-counts-[A-Za-z0-9]*\)".*/\1/p' "$tmp/st2b" | head -1)
  [ -n "$dir" ] && [ ! -e "$dir" ] || fail "counts: the directory '$dir' is left behind"
  echo "record_follow: counts: 4 counts files, the report from them (no trace read back), none left"
fi

# 3. --no-follow: only the direct process
"$build/loupe" record -q --print-run-dir "$tmp/run3" --no-follow -o "$tmp/log3" -- "$probe" server 3 50 >/dev/null 2>"$tmp/err3" || fail "no-follow: $(cat "$tmp/err3")"
run=$(cat "$tmp/run3" 2>/dev/null)
n=$(ls "$run" | grep -c '\.trace\.json\.gz$')
[ "$n" = 1 ] || fail "no-follow: $n trace files, want 1"
got=$("$build/loupe" summary "$run" --json | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(len(d["processes"]), " ".join("%s=%d" % (z["name"], z["count"]) for z in d["zones"]))')
[ "$got" = "1 serve=1" ] || fail "no-follow: $got"
echo "record_follow: --no-follow: 1 process"

# 4. a child killed by SIGKILL: loupe record recovers it from its region file (the cause from
# the parent's waitpid), beside the parent's own file
"$build/loupe" record -q --print-run-dir "$tmp/run4" -o "$tmp/log4" -- "$probe" killed 40 >/dev/null 2>"$tmp/err4" || fail "killed: $(cat "$tmp/err4")"
run=$(cat "$tmp/run4" 2>/dev/null)
n=$(ls "$run" | grep -c '\.trace\.json\.gz$')
[ "$n" = 2 ] || fail "killed: $n trace files, want 2 (the parent's, the child's recovered)"
got=$(procs "$run") || fail "killed: summary failed"
[ "$got" = "40 P killed 40 parent_ok
40 P killed 40 parent_ok
zones doomed=40 parent=40" ] || fail "killed: $got"
# -q: the recovery is a warning (said), nothing else but the run directory
grep -qxE "loupe record: pid [0-9]+ killed by SIGKILL: recovered 120 events" "$tmp/err4" || fail "killed: message: $(cat "$tmp/err4")"
[ "$(grep -cv '^loupe record: pid [0-9]* killed by SIGKILL' "$tmp/err4")" = 1 ] || fail "killed: -q printed more: $(cat "$tmp/err4")"
echo "record_follow: killed child: recovered (40 zones), the parent's 40 zones"

# 5. the merge of a 2-file run equals the two files' slices; convert reads the run whole
"$build/loupe" record -q --print-run-dir "$tmp/run5" -o "$tmp/log5" -- "$probe" server 1 25 >/dev/null 2>"$tmp/err5" || fail "two: $(cat "$tmp/err5")"
run=$(cat "$tmp/run5" 2>/dev/null)
sum=0
for f in "$run"/*.xplane.pb; do
  s=$("$build/loupe" summary "$f" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["slices"])')
  sum=$((sum + s))
done
merged=$("$build/loupe" summary "$run" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["slices"])')
[ "$sum" = 26 ] && [ "$merged" = 26 ] || fail "two: files $sum, merged $merged, want 26"
"$build/loupe" convert "$run" -o "$tmp/merged.trace.json.gz" 2>"$tmp/err5c" || fail "convert: $(cat "$tmp/err5c")"
got=$("$build/loupe" summary "$tmp/merged.trace.json.gz" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["slices"])')
[ "$got" = 26 ] || fail "convert: $got slices, want 26"
echo "record_follow: 2-file run: 1 + 25 slices merged, converted"
# 6. clock corrections (loupe_clock_offset_* metadata, hand-written): a fixed offset, and a
# drift interpolated between two measurements (the nearer one outside them)
mkdir -p "$tmp/ck"
python3 - "$tmp/ck" <<'PY'
import json, sys
def f(name, origin, meta, slices, pid):
    md = {"loupe_version": "0.2", "origin_unix_ns": str(origin), "pid": str(pid), "host": "h",
          "clock": "monotonic"}
    md.update(meta)
    ev = [{"ph": "X", "name": n, "ts": ts, "dur": 1, "pid": pid, "tid": pid} for n, ts in slices]
    open(sys.argv[1] + "/" + name, "w").write(json.dumps({"traceEvents": ev, "metadata": md}))
f("h.1.trace.json.gz", 1000000000, {}, [("a", 0)], 1)
f("h.2.trace.json.gz", 1000002000, {"loupe_clock_offset_ns": "3000"}, [("b", 1)], 2)
# the measurements' times are unix-epoch ns on the file's clock: its origin + 0 and + 10 us
f("h.3.trace.json.gz", 1000000000, {"loupe_clock_offset_ns": "0",
  "loupe_clock_offset_end_ns": "10000", "loupe_clock_offset_at_ns": "1000000000",
  "loupe_clock_offset_end_at_ns": "1000010000"}, [("c", 5), ("d", 20)], 3)
PY
"$build/loupe" convert "$tmp/ck" -o "$tmp/ck.json" 2>"$tmp/errck" || fail "clock: $(cat "$tmp/errck")"
got=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"] if isinstance(d, dict) else d
print(" ".join("%s=%g" % (e["name"], e["ts"]) for e in sorted(ev, key=lambda e: e.get("name", "")) if e.get("ph") == "X"))' "$tmp/ck.json")
# a: the origin; b: 2 us later + 1 us + 3 us offset; c: 5 us + 5 us (half-way); d: 20 + 10 us
[ "$got" = "a=0 b=6 c=10 d=30" ] || fail "clock: $got"
echo "record_follow: clock offsets: fixed and drift applied"
# main() ends with pthread_exit() and a worker ends later: the process ends with the worker (as
# exit(0), POSIX), not kept alive by loupe's keeper and sampler threads (it was: forever)
cat >"$tmp/pexit.c" <<'EOF2'
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>
static void *worker(void *a) { (void)a; usleep(200000); puts("worker done"); return NULL; }
int main(void) { pthread_t t; pthread_create(&t, NULL, worker, NULL); pthread_exit(0); }
EOF2
cc -std=c11 "$tmp/pexit.c" -o "$tmp/pexit" -lpthread
start=$(date +%s%N)
out=$(timeout 20 "$build/loupe" record -q -o "$tmp/log7" -- "$tmp/pexit" 2>"$tmp/err7"); st=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
[ "$st" = 0 ] || fail "pthread_exit: exit status $st after $ms ms: $(cat "$tmp/err7")"
[ "$out" = "worker done" ] || fail "pthread_exit: output '$out'"
[ "$ms" -lt 5000 ] || fail "pthread_exit: took $ms ms"
echo "record_follow: main's pthread_exit: the process ended with its worker ($ms ms)"
# 8. the report sums every process's counts, a line each: bash -c 'a; b; c' is bash, a and b
# (forked, exec'd) and c (exec'd by bash in its own pid: <host>.<pid>.1); 3 events a zone
# (its name, begin, end)
"$build/loupe" record --no-sample --print-run-dir "$tmp/run8" -o "$tmp/log8" -- bash -c "'$probe' zones a 10; '$probe' zones b 20; '$probe' zones c 30" >/dev/null 2>"$tmp/err8" || fail "report: $(cat "$tmp/err8")"
run=$(cat "$tmp/run8")
got=$(grep -v "^$run\$" "$tmp/err8" | sed -E 's/pid [0-9]+/pid N/; s/\(.*\)$/(F)/')
want="loupe record: bash exited with status 0
loupe record: 4 processes, 180 events recorded, 0 dropped
loupe record:   pid N bash: 0 events recorded, 0 dropped, 0 threads (F)
loupe record:   pid N follow_probe: 90 events recorded, 0 dropped, 1 thread (F)
loupe record:   pid N follow_probe: 30 events recorded, 0 dropped, 1 thread (F)
loupe record:   pid N follow_probe: 60 events recorded, 0 dropped, 1 thread (F)"
[ "$got" = "$want" ] || fail "report: got
$got
want
$want"
# bash's pid holds two file sets: bash's own (<host>.<pid>) and c's (<host>.<pid>.1)
root=$(ls "$run" | sed -n "s/^$host\.\([0-9]*\)\.1\.trace\.json\.gz$/\1/p")
[ -n "$root" ] && [ -f "$run/$host.$root.trace.json.gz" ] || fail "report: no <host>.<pid>.1 beside <host>.<pid>: $(ls "$run")"
echo "record_follow: report: 4 processes summed, a line each"
# beyond 8 processes, the ones that recorded nothing (9 command substitutions' subshells and
# bash itself) share a line
cat >"$tmp/many.sh" <<SH
for i in 1 2 3 4 5 6 7 8 9; do x=\$(echo \$i); done
"$probe" zones a 2
SH
"$build/loupe" record --no-sample --print-run-dir "$tmp/run8b" -o "$tmp/log8b" -- bash "$tmp/many.sh" >/dev/null 2>"$tmp/err8b" || fail "fold: $(cat "$tmp/err8b")"
got=$(grep -v "^$(cat "$tmp/run8b")\$" "$tmp/err8b" | sed -E 's/pid [0-9]+/pid N/; s/\(.*\)$/(F)/')
want="loupe record: bash exited with status 0
loupe record: 11 processes, 6 events recorded, 0 dropped
loupe record:   pid N follow_probe: 6 events recorded, 0 dropped, 1 thread (F)
loupe record:   10 other processes recorded nothing"
[ "$got" = "$want" ] || fail "fold: got
$got
want
$want"
echo "record_follow: report: 11 processes, the 10 empty ones on one line"

# 9. a forked child records 10 zones, then execs a traced program that records 20: the pid's
# two images are two file sets, <host>.<pid>.* (10 "pre") and <host>.<pid>.1.* (20 "post")
"$build/loupe" record -q --no-sample --print-run-dir "$tmp/run9" -o "$tmp/log9" -- "$probe" forkexec 10 20 >/dev/null 2>"$tmp/err9" || fail "forkexec: $(cat "$tmp/err9")"
run=$(cat "$tmp/run9")
child=$(ls "$run" | sed -n "s/^$host\.\([0-9]*\)\.1\.xplane\.pb$/\1/p")
[ -n "$child" ] || fail "forkexec: no <host>.<pid>.1 file: $(ls "$run")"
zones_of() { "$build/loupe" summary "$1" --json | python3 -c '
import json, sys
print(" ".join("%s=%d" % (z["name"], z["count"]) for z in sorted(json.load(sys.stdin)["zones"], key=lambda z: z["name"])))'; }
[ "$(zones_of "$run/$host.$child.xplane.pb")" = "pre=10" ] || fail "forkexec: pre-exec file: $(zones_of "$run/$host.$child.xplane.pb")"
[ "$(zones_of "$run/$host.$child.1.xplane.pb")" = "post=20" ] || fail "forkexec: exec'd file: $(zones_of "$run/$host.$child.1.xplane.pb")"
[ "$(zones_of "$run")" = "post=20 pre=10" ] || fail "forkexec: merged: $(zones_of "$run")"
echo "record_follow: forkexec: the child's 10 zones before its exec and 20 after, one file set each"

# 10. a grandchild killed by SIGKILL, and a child that ends with _exit(0): recovered, the cause
# said exactly
"$build/loupe" record -q --no-sample --print-run-dir "$tmp/run10" -o "$tmp/log10" -- "$probe" grandkill 40 >/dev/null 2>"$tmp/err10" || fail "grandkill: $(cat "$tmp/err10")"
run=$(cat "$tmp/run10")
got=$(grep -v "^$run\$" "$tmp/err10" | sed -E 's/pid [0-9]+/pid N/')
[ "$got" = "loupe record: pid N killed by SIGKILL: recovered 120 events" ] || fail "grandkill: $got"
[ "$(zones_of "$run")" = "doomed=40" ] || fail "grandkill: merged: $(zones_of "$run")"
"$build/loupe" record -q --no-sample --print-run-dir "$tmp/run11" -o "$tmp/log11" -- "$probe" quickexit 25 >/dev/null 2>"$tmp/err11" || fail "quickexit: $(cat "$tmp/err11")"
run=$(cat "$tmp/run11")
got=$(grep -v "^$run\$" "$tmp/err11" | sed -E 's/pid [0-9]+/pid N/')
[ "$got" = "loupe record: pid N exited without writing its trace: recovered 75 events" ] || fail "quickexit: $got"
[ "$(zones_of "$run")" = "quick=25" ] || fail "quickexit: merged: $(zones_of "$run")"
echo "record_follow: a killed grandchild and an _exit()ed child: recovered, the cause said"

# 11. messages: -q prints only the run directory; sh -c 'exit 3' (dash's exit calls _exit)
# exits 3 with no warning; a sampling-only run says its samples
"$build/loupe" record -q --no-sample --print-run-dir "$tmp/run12" -o "$tmp/log12" -- bash "$tmp/three.sh" >/dev/null 2>"$tmp/err12" || fail "-q: $(cat "$tmp/err12")"
[ "$(cat "$tmp/err12")" = "$(cat "$tmp/run12")" ] || fail "-q: printed more than the run directory: $(cat "$tmp/err12")"
"$build/loupe" record --no-sample --print-run-dir "$tmp/run13" -o "$tmp/log13" -- sh -c 'exit 3' >/dev/null 2>"$tmp/err13"; st=$?
[ "$st" = 3 ] || fail "sh exit 3: status $st"
got=$(grep -v "^$(cat "$tmp/run13")\$" "$tmp/err13")
[ "$got" = "loupe record: sh exited with status 3
loupe record: 0 events recorded, 0 dropped" ] || fail "sh exit 3: $got"
"$build/loupe" record --sample-hz 999 --print-run-dir "$tmp/run14" -o "$tmp/log14" -- bash -c 'i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done' >/dev/null 2>"$tmp/err14" || fail "sampling-only: $(cat "$tmp/err14")"
samples=$("$build/loupe" summary "$(cat "$tmp/run14")" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["samples"])')
if [ "$samples" -gt 0 ]; then
  grep -qxE "loupe record: [0-9,]+ samples?(, [0-9,]+ lost)?" "$tmp/err14" || fail "sampling-only: $(cat "$tmp/err14")"
  echo "record_follow: sampling-only: says its $samples samples"
  # two sampled processes without a zone: each line says its 1 thread (0.4: "0 threads")
  "$build/loupe" record --sample-hz 999 -o "$tmp/log14b" -- bash -c 'i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; bash -c "i=0; while [ \$i -lt 200000 ]; do i=\$((i+1)); done"' \
    >/dev/null 2>"$tmp/err14b" || fail "sampling-only, 2 processes: $(cat "$tmp/err14b")"
  n=$(grep -cE "^loupe record:   pid [0-9]+ bash: [0-9,]+ samples?(, [0-9,]+ lost)?, 1 thread \(" "$tmp/err14b")
  [ "$n" = 2 ] || fail "sampling-only, 2 processes: $(cat "$tmp/err14b")"
else
  echo "record_follow: sampling-only: not checked (no samples here: perf events not allowed)"
fi
echo "record_follow: -q quiet, sh -c 'exit 3' without a warning"

# 12. --no-follow through bash -c: bash's children are not traced (bash passes its own copy of
# the environment on); bash -c 'prog & wait' writes every trace, run after run
"$build/loupe" record -q --no-sample --no-follow --print-run-dir "$tmp/run15" -o "$tmp/log15" -- bash -c "'$probe' zones a 3; '$probe' zones b 4" >/dev/null 2>"$tmp/err15" || fail "no-follow bash: $(cat "$tmp/err15")"
n=$(ls "$(cat "$tmp/run15")" | grep -c '\.trace\.json\.gz$')
[ "$n" = 1 ] || fail "no-follow bash: $n trace files, want 1 (bash's): $(ls "$(cat "$tmp/run15")")"
for k in 1 2 3 4 5; do
  "$build/loupe" record --no-sample --print-run-dir "$tmp/run16" -o "$tmp/log16" -- bash -c "'$probe' zones bg 5 & wait" >/dev/null 2>"$tmp/err16" || fail "bg $k: $(cat "$tmp/err16")"
  grep -q "without writing" "$tmp/err16" && fail "bg $k: $(cat "$tmp/err16")"
  grep -qx "loupe record: 2 processes, 15 events recorded, 0 dropped" "$tmp/err16" || fail "bg $k: $(cat "$tmp/err16")"
done
echo "record_follow: --no-follow through bash: 1 process; 'prog & wait' x5: 2 processes each"

# 13. a bad --spool DIR is found before the program runs
"$build/loupe" record --spool=/proc/loupe-no-such -o "$tmp/log17" -- touch "$tmp/ran17" 2>"$tmp/err17"; st=$?
[ "$st" = 120 ] || fail "bad spool: status $st"
[ -e "$tmp/ran17" ] && fail "bad spool: the program ran"
grep -qxF "loupe record: --spool=/proc/loupe-no-such: cannot write spool files there: No such file or directory; nothing was run (give a writable directory, or --spool alone for the log directory)" "$tmp/err17" || fail "bad spool: $(cat "$tmp/err17")"
echo "record_follow: a bad --spool: 120 before running"

# 14. system() and posix_spawn(): glibc execs both children inside itself (not through the
# interposed exec family). The parent's 10 zones are kept, system()'s shell (sh -c, no zones)
# and its program (7 zones) and the spawned program (7 zones) are traced, each naming its
# parent; the parent's record.forks has exactly two spawn points, in order: system()'s shell
# (the preload's system() spawns it through its posix_spawn wrapper, src/preload/preload.c)
# and the posix_spawn child, each between the parent's start and the child's. Under
# --no-follow neither child is traced.
"$build/loupe" record -q --no-sample --print-run-dir "$tmp/run18" -o "$tmp/log18" -- "$probe" spawn 5 7 >/dev/null 2>"$tmp/err18" || fail "spawn: $(cat "$tmp/err18")"
run=$(cat "$tmp/run18")
# under -q, system()'s shell (dash ends with _exit(), having recorded nothing) is not reported:
# it lost nothing; stderr holds the run directory's path only
[ "$(cat "$tmp/err18")" = "$(cat "$tmp/run18")" ] || fail "spawn -q: stderr: $(cat "$tmp/err18")"
got=$(procs "$run") || fail "spawn: summary failed"
want="0 sh -c 'P' zones sys 7 parent_ok
7 P zones spawned 7 parent_ok
7 P zones sys 7 parent_ok
10 P spawn 5 7 parent_ok
zones parent=10 spawned=7 sys=7"
[ "$got" = "$want" ] || fail "spawn: got
$got
want
$want"
python3 - "$run" <<'PY' || fail "spawn: parents and record.forks"
import glob, gzip, json, sys
meta = {int(m["pid"]): m for m in
        (json.load(gzip.open(f))["metadata"] for f in glob.glob(sys.argv[1] + "/*.trace.json.gz"))}
root = [p for p, m in meta.items() if m["loupe_cmdline"].endswith(" spawn 5 7")]
assert len(root) == 1, meta
root = root[0]
spawned = [p for p, m in meta.items() if m["loupe_cmdline"].endswith(" zones spawned 7")]
shell = [p for p, m in meta.items() if m["loupe_cmdline"].startswith("sh -c ")]
prog = [p for p, m in meta.items() if m["loupe_cmdline"].endswith(" zones sys 7")
        and not m["loupe_cmdline"].startswith("sh -c ")]
assert len(spawned) == 1 and len(shell) == 1 and len(prog) == 1, meta
parents = {p: int(m["loupe_parent_pid"]) for p, m in meta.items()}
assert parents[spawned[0]] == root and parents[shell[0]] == root, parents
assert parents[prog[0]] == shell[0], parents
forks = [tuple(int(x) for x in item.split(":")) for item in meta[root]["record.forks"].split(",")]
assert [p for p, _ in forks] == shell + spawned, (forks, shell, spawned)
for (p, t) in forks:
    assert int(meta[root]["origin_unix_ns"]) <= t <= int(meta[p]["origin_unix_ns"]), (p, forks)
assert forks[0][1] < forks[1][1], forks
PY
"$build/loupe" record -q --no-sample --no-follow --print-run-dir "$tmp/run19" -o "$tmp/log19" -- "$probe" spawn 5 7 >/dev/null 2>"$tmp/err19" || fail "spawn --no-follow: $(cat "$tmp/err19")"
got=$(procs "$(cat "$tmp/run19")") || fail "spawn --no-follow: summary failed"
[ "$got" = "10 P spawn 5 7 parent_ok
zones parent=10" ] || fail "spawn --no-follow: $got"
echo "record_follow: system() and posix_spawn(): 4 processes (parent 10 zones kept, sh, 7 + 7), their 2 spawn points; --no-follow: 1"
# 15. Ctrl-C on `loupe record -- bash -c 'x & y & wait'`: the terminal's SIGINT reaches the whole
# process group; bash dies of it, its two background jobs (SIGINT ignored: POSIX, "Shell
# Execution Environment", asynchronous lists) outlive it. record says each one's region path,
# exactly (it stays while they run); each writes its own trace into the run directory when it
# ends, and the last one removes the regions' directory: nothing is left in it.
# (a job this script starts with & has SIGINT ignored, inherited through exec: python3 gives
# loupe record the terminal's default back, as a shell's foreground job has)
rm -f "$tmp/ready20"
setsid python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.argv[1], sys.argv[1:])' "$build/loupe" record -q --no-sample -o "$tmp/log20" -- \
    bash -c "sleep 3 & sleep 3 & sleep 0.7; echo \$! >$tmp/ready20; wait" 2>"$tmp/err20" &
rec=$!
for _ in $(seq 100); do [ -s "$tmp/ready20" ] && break; sleep 0.1; done
[ -s "$tmp/ready20" ] || fail "ctrl-c: the program did not start"
kill -INT -- -$rec
wait $rec; st=$?
[ "$st" = 130 ] || fail "ctrl-c: status $st, want 130 (bash killed by SIGINT): $(cat "$tmp/err20")"
# bash (no zones, --no-sample) is recovered from the memfd record passed it, and leaves no
# crash dump (bash's own getenv/setenv once kept it off the memfd: src/preload/preload.c)
grep -qxF "loupe record: bash killed by signal 2 (Interrupt); 0 events recovered, 0 dropped" "$tmp/err20" || fail "ctrl-c: $(cat "$tmp/err20")"
run=$(tail -1 "$tmp/err20")
case $run in "$tmp/log20/plugins/profile/"*) ;; *) fail "ctrl-c: run directory '$run': $(cat "$tmp/err20")" ;; esac
[ "$(ls "$tmp/log20")" = plugins ] || fail "ctrl-c: the log directory holds $(ls "$tmp/log20")"
regions=$(sed -n 's|^loupe record: pid [0-9]* is still running: its recording region \(/[^ ]*\)/[0-9.]* stays .*|\1|p' "$tmp/err20" | sort -u)
[ "$(echo "$regions" | wc -l)" = 1 ] && [ -n "$regions" ] || fail "ctrl-c: regions directory not named once: $(cat "$tmp/err20")"
pids=$(sed -n 's/^loupe record: pid \([0-9]*\) is still running.*/\1/p' "$tmp/err20" | sort -n | tr '\n' ' ')
want=""
for p in $pids; do
    r=$(ls "$regions" | grep "^$p\.[0-9]*\.0$")
    want="${want}loupe record: pid $p is still running: its recording region $regions/$r stays until it ends (it then writes its trace into $run and removes the region); if it dies first, \`loupe recover $regions/$r -o LOG_DIR\` reads it and \`rm -r $regions\` removes the rest
"
done
got=$(grep '^loupe record: pid ' "$tmp/err20" | sort -n -k4)
[ "$(echo $pids | wc -w)" = 2 ] && [ "$got" = "${want%
}" ] || fail "ctrl-c: stderr:
$got
want (2 orphans):
$want"
for p in $pids; do
    while kill -0 "$p" 2>/dev/null; do sleep 0.1; done
done
sleep 0.2
[ ! -e "$regions" ] || fail "ctrl-c: $regions is left after the orphans ended: $(ls -la "$regions")"
for p in $pids; do
    [ -e "$run/$host.$p.trace.json.gz" ] || fail "ctrl-c: orphan $p wrote no trace: $(ls "$run")"
done
echo "record_follow: Ctrl-C with 2 orphans: status 130, both region paths said, both traces written by the orphans, the regions directory gone"
echo "record_follow: ok"
