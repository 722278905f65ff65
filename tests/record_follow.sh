#!/usr/bin/env bash
# record_follow.sh: `loupe record` follows the process tree: a shell script running three
# programs, a server forking 3 workers, a killed child, --no-follow; every process lands in the
# one run directory as <host>.<pid>.* and `loupe summary RUN --json` reads the merged view (a
# process per file, with its parent pid and command line). Args: BUILD_DIR SOURCE_DIR.
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
echo "record_follow: server: 4 processes, 3 workers x 50 zones, parent pids"

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

# 4. a child killed by SIGKILL leaves no file; its parent's file is there
"$build/loupe" record -q --print-run-dir "$tmp/run4" -o "$tmp/log4" -- "$probe" killed 40 >/dev/null 2>"$tmp/err4" || fail "killed: $(cat "$tmp/err4")"
run=$(cat "$tmp/run4" 2>/dev/null)
n=$(ls "$run" | grep -c '\.trace\.json\.gz$')
[ "$n" = 1 ] || fail "killed: $n trace files, want 1 (the parent's)"
got=$(procs "$run") || fail "killed: summary failed"
[ "$got" = "40 P killed 40 parent_ok
zones parent=40" ] || fail "killed: $got"
echo "record_follow: killed child: the parent's 40 zones"

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
f("h.3.trace.json.gz", 1000000000, {"loupe_clock_offset_ns": "0",
  "loupe_clock_offset_end_ns": "10000", "loupe_clock_offset_at_ns": "0",
  "loupe_clock_offset_end_at_ns": "10000"}, [("c", 5), ("d", 20)], 3)
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
echo "record_follow: ok"
