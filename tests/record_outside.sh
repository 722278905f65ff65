#!/usr/bin/env bash
# record_outside.sh: `loupe record` samples a program its preload cannot enter from outside it
# (loupe/outside.h): a statically linked CPU-bound program built here (gcc -static,
# -fno-omit-frame-pointer) runs, exits with its own status, and leaves <host>.<pid>.* files whose
# hot function holds >= 80% of the samples in `loupe summary`, its thread named from the kernel;
# the note line and the exit status are exact; its stacks end at the outermost true frame
# (__libc_start_call_main, never "[unknown];register_tm_clones" read past it). A forked child is a
# process of its own (<host>.<child pid>.*, its hot function, its parent's pid); --no-follow
# leaves it out and counts it; --sample-stacks none gives one-frame stacks and dwarf is refused
# with an exact message. A static program exec'd inside a traced tree (bash -c) is said once on
# stderr and in metadata. A kernel that refuses perf events: exit 121, the
# exact message, nothing run. As root, a set-user-ID program (owned by nobody) is sampled the
# same way. Skipped (77) without a static libc or where perf events are not allowed at all.
# Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
loupe=$build/loupe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
host=$(hostname)

cat >"$tmp/hot.c" <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
__attribute__((noinline)) static double hot_spin(long n) {
    volatile double x = 0;
    for (long i = 0; i < n; i++) {
        x += (double)i * 0.5;
    }
    return x;
}
__attribute__((noinline)) static double cold_setup(long n) {
    volatile double x = 0;
    for (long i = 0; i < n / 50; i++) {
        x += 1.0;
    }
    return x;
}
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    if (argc > 2 && strcmp(argv[2], "fork") == 0) {
        fflush(stdout);
        pid_t c = fork();
        if (c == 0) {
            _exit(hot_spin(n) > 0 ? 0 : 1);
        }
        int st = 0;
        waitpid(c, &st, 0);
        printf("%d\n", cold_setup(n * 50) > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        return 3;
    }
    printf("%d\n", cold_setup(n) + hot_spin(n) > 0);
    return 3;
}
EOF
if ! gcc -static -O1 -g -fno-omit-frame-pointer "$tmp/hot.c" -o "$tmp/hot" 2>"$tmp/ccerr"; then
  echo "record_outside: skipped: gcc -static failed (no static libc?): $(head -1 "$tmp/ccerr")"
  exit 77
fi
n=150000000 # about 0.3 s of CPU: 300 samples at 999 Hz

# hot_pct RUN_DIR: hot_spin's self % in `loupe summary`
hot_pct() {
  "$loupe" summary "$1" >"$tmp/sum" 2>&1 || fail "summary $1: $(cat "$tmp/sum")"
  awk '$5 == "hot_spin" { sub("%", "", $3); print $3 }' "$tmp/sum"
}
# folded FILE: its samples' stacks, "a;b;c count" a line, sorted
folded() {
  "$loupe" convert "$1" -o "$tmp/f.folded" --weight samples >/dev/null 2>&1 ||
    fail "convert $1 to folded stacks"
  sort "$tmp/f.folded"
}
# pids RUN_DIR: the pids of its <host>.<pid>.trace.json.gz files, one a line, sorted
pids() { (cd "$1" && ls) | sed -n "s/^$host\.\([0-9]*\)\.trace\.json\.gz$/\1/p" | sort -n; }

# 1. a static program
set +e
"$loupe" record -o "$tmp/log" --print-run-dir "$tmp/run" -- "$tmp/hot" "$n" >"$tmp/out" \
  2>"$tmp/err"; st=$?
set -e
if [ "$st" = 121 ] && grep -qE "sampling it from outside failed too: perf_event_open on pid [0-9]+: (Permission denied|Operation not permitted|No such file or directory|Function not implemented)" "$tmp/err"; then
  echo "record_outside: skipped: perf events are not allowed here: $(cat "$tmp/err")"
  exit 77
fi
[ "$st" = 3 ] || fail "static: exit $st, want 3 ($(cat "$tmp/err"))"
[ "$(cat "$tmp/out")" = 1 ] || fail "static: stdout: $(cat "$tmp/out")"
[ "$(sed -n 1p "$tmp/err")" = "loupe record: note: static binary: sampled from outside, no zones" ] ||
  fail "static: note: $(cat "$tmp/err")"
[ "$(sed -n 2p "$tmp/err")" = "loupe record: $tmp/hot exited with status 3" ] ||
  fail "static: status line: $(cat "$tmp/err")"
sed -n 3p "$tmp/err" | grep -qE '^loupe record: [0-9,]+ samples$' || fail "static: counts: $(cat "$tmp/err")"
run=$(cat "$tmp/run")
[ "$(sed -n 4p "$tmp/err")" = "$run" ] || fail "static: run dir line: $(cat "$tmp/err")"
[ "$(wc -l <"$tmp/err")" = 4 ] || fail "static: stderr: $(cat "$tmp/err")"
files=$(cd "$run" && ls)
pid=$(echo "$files" | sed -n "s/^$host\.\([0-9]*\)\.trace\.json\.gz$/\1/p")
[ -n "$pid" ] || fail "static: files: $files"
[ "$files" = "$(printf '%s\n%s' "$host.$pid.trace.json.gz" "$host.$pid.xplane.pb")" ] ||
  fail "static: files: $files"
pct=$(hot_pct "$run")
[ -n "$pct" ] && awk -v p="$pct" 'BEGIN { exit !(p >= 80) }' ||
  fail "static: hot_spin holds ${pct:-no}% of the samples, want >= 80: $(cat "$tmp/sum")"
grep -qF "no zones in this trace" "$tmp/sum" || fail "static: summary: $(cat "$tmp/sum")"
# every stack ends (at the root) at the outermost frame that a call made. The one exception is a
# sample inside libc's own code (printf's first buffer, built without frame pointers): the fp walk
# stops at that leaf, as perf's does, and shows a one-frame stack. Those are allowed when they are
# not one of the program's own functions (which have frame pointers), never "[unknown]", and at
# most 5% of the samples.
folded "$run/$host.$pid.xplane.pb" >"$tmp/stacks"
grep -qE '^hot;__libc_start_call_main;main;hot_spin [0-9]+$' "$tmp/stacks" &&
  ! grep -vqE '^hot;(__libc_start_call_main;main(;hot_spin|;cold_setup)?|[A-Za-z_][A-Za-z0-9_.]*) [0-9]+$' \
    "$tmp/stacks" &&
  ! grep -qE '^hot;(main|hot_spin|cold_setup|__libc_start_call_main) [0-9]+$' "$tmp/stacks" &&
  awk '{ n = $NF; all += n; if ($1 !~ /;main/) leaf += n }
       END { exit !(all > 0 && leaf * 20 <= all) }' "$tmp/stacks" ||
  fail "static: stacks: $(cat "$tmp/stacks")"
if command -v python3 >/dev/null; then
  python3 - "$run/$host.$pid.trace.json.gz" "$pid" "$tmp/hot $n" <<'EOF' || fail "static: trace metadata"
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
pid = int(sys.argv[2])
meta = {(e["name"], e["tid"]): e["args"] for e in d["traceEvents"] if e.get("ph") == "M"}
assert meta[("thread_name", pid)]["name"] == "hot", meta
assert meta[("process_name", pid)]["name"] == "hot", meta
assert meta[("loupe_process", pid)]["cmdline"] == sys.argv[3], meta
assert d["metadata"]["loupe_sampling"] == "999 Hz task-clock, fp stacks, from outside the process", d["metadata"]
EOF
fi
echo "record_outside: static: exit 3, hot_spin ${pct}% of the samples"

# 1b. a forked child: a process of its own, named, with its own hot function
set +e
"$loupe" record -o "$tmp/logf" --print-run-dir "$tmp/runf" -- "$tmp/hot" "$n" fork >"$tmp/out" \
  2>"$tmp/err"; st=$?
set -e
[ "$st" = 3 ] && [ "$(cat "$tmp/out")" = 1 ] || fail "fork: exit $st ($(cat "$tmp/err"))"
runf=$(cat "$tmp/runf")
ps=$(pids "$runf")
[ "$(echo "$ps" | wc -l)" = 2 ] || fail "fork: processes: $(cd "$runf" && ls)"
ppid=$(echo "$ps" | sed -n 1p)
cpid=$(echo "$ps" | sed -n 2p)
sed -n 3p "$tmp/err" | grep -qE '^loupe record: 2 processes, [0-9,]+ samples$' ||
  fail "fork: counts: $(cat "$tmp/err")"
folded "$runf/$host.$ppid.xplane.pb" >"$tmp/stacks"
grep -qE '^hot;__libc_start_call_main;main;cold_setup [0-9]+$' "$tmp/stacks" &&
  ! grep -q hot_spin "$tmp/stacks" || fail "fork: the parent's stacks: $(cat "$tmp/stacks")"
folded "$runf/$host.$cpid.xplane.pb" >"$tmp/stacks"
grep -qE '^hot;__libc_start_call_main;main;hot_spin [0-9]+$' "$tmp/stacks" &&
  ! grep -q cold_setup "$tmp/stacks" || fail "fork: the child's stacks: $(cat "$tmp/stacks")"
if command -v python3 >/dev/null; then
  python3 - "$runf/$host.$cpid.trace.json.gz" "$cpid" "$ppid" <<'EOF' || fail "fork: the child's metadata"
import gzip, json, sys
d = json.load(gzip.open(sys.argv[1]))
pid, ppid = int(sys.argv[2]), int(sys.argv[3])
meta = {(e["name"], e["tid"]): e["args"] for e in d["traceEvents"] if e.get("ph") == "M"}
assert meta[("thread_name", pid)]["name"] == "hot", meta
assert meta[("loupe_process", pid)]["parent_pid"] == ppid, meta
assert d["metadata"]["pid"] == str(pid), d["metadata"]
EOF
fi
echo "record_outside: fork: parent $ppid and child $cpid apart"

# 1c. --no-follow: the parent alone, the child counted; --sample-stacks none: one frame a sample
set +e
"$loupe" record -o "$tmp/logn" --no-follow --sample-stacks none --print-run-dir "$tmp/runn" -- \
  "$tmp/hot" "$n" fork >"$tmp/out" 2>"$tmp/err"; st=$?
set -e
[ "$st" = 3 ] || fail "no-follow: exit $st ($(cat "$tmp/err"))"
runn=$(cat "$tmp/runn")
ps=$(pids "$runn")
[ "$(echo "$ps" | wc -l)" = 1 ] || fail "no-follow: processes: $(cd "$runn" && ls)"
folded "$runn/$host.$ps.xplane.pb" >"$tmp/stacks"
grep -qE '^hot;cold_setup [0-9]+$' "$tmp/stacks" && ! grep -vqE '^hot;[^;]+ [0-9]+$' "$tmp/stacks" ||
  fail "no-follow: stacks: $(cat "$tmp/stacks")"
if command -v python3 >/dev/null; then
  python3 - "$runn/$host.$ps.trace.json.gz" <<'EOF' || fail "no-follow: metadata"
import gzip, json, sys
m = json.load(gzip.open(sys.argv[1]))["metadata"]
assert m["loupe_outside_children_not_followed"] == "1", m
assert m["loupe_sampling"] == "999 Hz task-clock, no stacks, from outside the process", m
EOF
fi
echo "record_outside: --no-follow: 1 process, 1 child not followed; --sample-stacks none: 1 frame"

# 1d. --sample-stacks dwarf cannot be honoured from outside: refused, nothing run
set +e
"$loupe" record -o "$tmp/logw" --sample-stacks dwarf -- "$tmp/hot" 1000 >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" = 120 ] || fail "dwarf: exit $st ($(cat "$tmp/err"))"
[ "$(cat "$tmp/err")" = "loupe record: --sample-stacks dwarf: $tmp/hot is a static binary, sampled from outside, where only frame-pointer stacks are taken; give --sample-stacks fp or none; nothing was run" ] ||
  fail "dwarf: message: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "dwarf: the program ran"
[ -e "$tmp/logw" ] && fail "dwarf: left $(find "$tmp/logw")"
echo "record_outside: --sample-stacks dwarf: refused, exit 120"

# 1e. a static program exec'd inside a traced tree: not traced, said once, in the exec'ing
# process's metadata (a shell's fork child that recorded nothing keeps its trace for it). Not in
# a sanitizer build (as record_follow.sh: the tree would need the runtime preloaded in every
# process; under ASan bash did not finish).
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
in_tree=1
[ -n "$sanitize" ] && in_tree=0
tree_loupe() { "$loupe" "$@"; }
if [ "$in_tree" = 0 ]; then
  echo "record_outside: in a tree: not checked (sanitizer build: $sanitize)"
else
set +e
tree_loupe record -o "$tmp/logt" --print-run-dir "$tmp/runt" -- bash -c "$tmp/hot 1000; true" \
  >"$tmp/out" 2>"$tmp/err"; st=$?
set -e
[ "$st" = 0 ] || fail "in a tree: exit $st ($(cat "$tmp/err"))"
want_re="^loupe record: note: pid [0-9]+ execs $tmp/hot: a static binary, which is not traced \(the preload cannot enter it; \`loupe record $tmp/hot\` samples it from outside\)$"
[ "$(grep -c "execs $tmp/hot" "$tmp/err")" = 1 ] && sed -n 1p "$tmp/err" | grep -qE "$want_re" ||
  fail "in a tree: note: $(cat "$tmp/err")"
epid=$(sed -n 1p "$tmp/err" | sed 's/^loupe record: note: pid \([0-9]*\) .*/\1/')
if command -v python3 >/dev/null; then
  python3 - "$(cat "$tmp/runt")/$host.$epid.trace.json.gz" "$tmp/hot" <<'EOF' || fail "in a tree: metadata"
import gzip, json, sys
m = json.load(gzip.open(sys.argv[1]))["metadata"]
assert m["record.untraced_exec"] == sys.argv[2] + ": a static binary", m
EOF
fi
set +e
tree_loupe record -q -o "$tmp/logt" -- bash -c "$tmp/hot 1000; true" >/dev/null 2>"$tmp/err"
st=$?
set -e
[ "$st" = 0 ] && [ "$(wc -l <"$tmp/err")" = 1 ] || fail "in a tree, -q: stderr: $(cat "$tmp/err")"
echo "record_outside: in a tree: exec of a static binary noted once, in metadata"
fi

# 2. -q: the run directory alone
set +e
"$loupe" record -q -o "$tmp/logq" -- "$tmp/hot" 1000 >/dev/null 2>"$tmp/err"; st=$?
set -e
[ "$st" = 3 ] || fail "-q: exit $st ($(cat "$tmp/err"))"
[ "$(wc -l <"$tmp/err")" = 1 ] && [ -d "$(cat "$tmp/err")" ] || fail "-q: stderr: $(cat "$tmp/err")"

# 3. perf events refused: 121, the exact message, nothing run, no log directory
set +e
LOUPE_TEST_PERF_DENY=1 "$loupe" record -o "$tmp/logd" -- "$tmp/hot" 1000 >"$tmp/out" 2>"$tmp/err"
st=$?
set -e
[ "$st" = 121 ] || fail "denied: exit $st ($(cat "$tmp/err"))"
par=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?')
want_re="^loupe record: cannot trace $tmp/hot: it is statically linked: no dynamic loader runs in it, so nothing preloads loupe \(link it dynamically, or call loupe_start_trace\(\) in it\); sampling it from outside failed too: perf_event_open on pid [0-9]+: Permission denied \(errno 13; kernel.perf_event_paranoid is $par\); nothing was run$"
[ "$(wc -l <"$tmp/err")" = 1 ] && grep -qE "$want_re" "$tmp/err" || fail "denied: message: $(cat "$tmp/err")"
[ -s "$tmp/out" ] && fail "denied: the program ran"
[ -e "$tmp/logd" ] && fail "denied: left $(find "$tmp/logd")"
echo "record_outside: perf denied: exit 121, nothing run"

# 4. as root: a set-user-ID program of another user (nobody), dynamically linked
if [ "$(id -u)" = 0 ]; then
  chmod 755 "$tmp"
  gcc -O1 -g -fno-omit-frame-pointer "$tmp/hot.c" -o "$tmp/suid"
  chown 65534 "$tmp/suid" && chmod u+s "$tmp/suid"
  set +e
  "$loupe" record -o "$tmp/logs" --print-run-dir "$tmp/runs" -- "$tmp/suid" "$n" >"$tmp/out" \
    2>"$tmp/err"; st=$?
  set -e
  [ "$st" = 3 ] || fail "setuid: exit $st ($(cat "$tmp/err"))"
  [ "$(cat "$tmp/out")" = 1 ] || fail "setuid: stdout: $(cat "$tmp/out")"
  [ "$(sed -n 1p "$tmp/err")" = "loupe record: note: set-user-ID program: sampled from outside, no zones" ] ||
    fail "setuid: note: $(cat "$tmp/err")"
  pct=$(hot_pct "$(cat "$tmp/runs")")
  [ -n "$pct" ] && awk -v p="$pct" 'BEGIN { exit !(p >= 80) }' ||
    fail "setuid: hot_spin holds ${pct:-no}% of the samples, want >= 80: $(cat "$tmp/sum")"
  echo "record_outside: setuid: exit 3, hot_spin ${pct}% of the samples"
else
  echo "record_outside: set-user-ID: not checked (a file owned by another user needs root)"
fi
echo "record_outside: all checks passed"
