#!/usr/bin/env bash
# record_signals.sh: signals and exits under `loupe record`. The traced program sees exactly the
# signal dispositions it would have had (no handler of loupe's: CPython installs its
# KeyboardInterrupt handler only over SIG_DFL, Modules/signalmodule.c), fork()ed children that
# end with _exit() keep their zone names, and a full disk at the end (the trace, or --spool) is
# said as it is. Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
small=$tmp/small
cleanup() { rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
loupe=$build/loupe
probe=$build/tests/sig_probe
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
[ -n "$sanitize" ] && { echo "record_signals: skipped: sanitizer build (a preloaded sanitizer runtime installs its own SIGSEGV/SIGBUS handlers)"; exit 77; }

# 1. dispositions at main: what they are untraced, under record
want=$("$probe" dispositions) || fail "probe alone failed"
[ "$want" = "$(printf 'INT=DFL\nTERM=DFL\nHUP=DFL\nSEGV=DFL\nBUS=DFL\nABRT=DFL\nFPE=DFL\nILL=DFL')" ] ||
  fail "untraced dispositions: $want"
got=$("$loupe" record -q -o "$tmp/log1" -- "$probe" dispositions 2>"$tmp/err1") ||
  fail "record dispositions: $(cat "$tmp/err1")"
[ "$got" = "$want" ] || fail "dispositions under record: $got"
echo "record_signals: 8 dispositions at main are SIG_DFL under record"

# 2. Python's KeyboardInterrupt: its handler, the cleanup, its exit code
cat >"$tmp/ki3.py" <<'PY'
import os, signal, sys, time
h = signal.getsignal(signal.SIGINT)
print(getattr(h, "__name__", h))
try:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(1)
except KeyboardInterrupt:
    print("caught")
    sys.exit(3)
PY
if ! command -v python3 >/dev/null; then
  echo "record_signals: skipped the python case: no python3"
else
  out=$("$loupe" record -q -o "$tmp/log2" -- python3 "$tmp/ki3.py" 2>"$tmp/err2"); st=$?
  [ "$out" = "$(printf 'default_int_handler\ncaught')" ] || fail "python: output: $out; $(cat "$tmp/err2")"
  [ "$st" = 3 ] || fail "python: exit status $st, want 3: $(cat "$tmp/err2")"
  echo "record_signals: python under record: KeyboardInterrupt caught, exit 3"
fi

# 3. 20 children that _exit() right after their zone: 20 "child_work", no name lost
"$loupe" record -q -o "$tmp/log3" --print-run-dir "$tmp/run3" -- "$probe" forks 20 \
  >/dev/null 2>"$tmp/err3" || fail "record forks: $(cat "$tmp/err3")"
"$loupe" summary "$(cat "$tmp/run3")" --json >"$tmp/sum3.json" 2>"$tmp/sumerr3" ||
  fail "summary: $(cat "$tmp/sumerr3")"
got=$(python3 - "$tmp/sum3.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
z = {}
for r in d["zones"]:
    z[r["name"]] = z.get(r["name"], 0) + r["count"]
lost = sum(c for n, c in z.items() if n.startswith("(name lost"))
print(z.get("child_work", 0), lost)
PY
)
[ "$got" = "20 0" ] || fail "forks: child_work count, names lost: $got"
echo "record_signals: 20 children that _exit(): 20 child_work, 0 names lost"

# 3a. the same inside a pid namespace of the tree's own (unshare -p -f --mount-proc): loupe record
# tells a process's liveness by the lock its region holds, not by a pid (which the namespace
# renames: 0.4 took the tree's pids for dead host ones, removed the regions' directory, and
# kept 0 of the children's zones). 8 children: the regions' room rule keeps about 20 region
# files on this machine's /dev/shm (a limit of its own, not of namespaces).
if [ "$(id -u)" = 0 ] && unshare -p -f --mount-proc true 2>/dev/null; then
  "$loupe" record -q -o "$tmp/logns" --print-run-dir "$tmp/runns" -- \
    unshare -p -f --mount-proc "$probe" forks 8 >/dev/null 2>"$tmp/errns" ||
    fail "pid namespace: $(cat "$tmp/errns")"
  n=$("$loupe" summary "$(cat "$tmp/runns")" --json 2>/dev/null | python3 -c '
import json, sys
print(sum(r["count"] for r in json.load(sys.stdin)["zones"] if r["name"] == "child_work"))')
  [ "$n" = 8 ] || fail "pid namespace: $n child_work of 8: $(cat "$tmp/errns")"
  echo "record_signals: in a pid namespace: 8 children that _exit(), 8 child_work recovered"
  # 3c. /proc mounted anew while the process records (what unshare --mount-proc does between its
  # fork and its exec): the keeper's thread list is read from the new mount. 0.4 read the new
  # mount's per-thread files with the old one's tids, took every thread for ended and exit(0)ed
  # the program 100 ms later (in 1 of 10 runs of 3a above: "0 child_work of 8").
  out=$("$loupe" record -q -o "$tmp/logrm" --print-run-dir "$tmp/runrm" -- \
    "$probe" remount-proc 2>"$tmp/errrm") || fail "remount-proc: $out $(cat "$tmp/errrm")"
  [ "$out" = alive ] || fail "remount-proc: the program was ended early: '$out' $(cat "$tmp/errrm")"
  n=$("$loupe" summary "$(cat "$tmp/runrm")" --json 2>/dev/null | python3 -c '
import json, sys
print(sum(r["count"] for r in json.load(sys.stdin)["zones"] if r["name"] == "after"))')
  [ "$n" = 1 ] || fail "remount-proc: $n zones 'after' of 1"
  echo "record_signals: /proc mounted anew while recording: the program runs to its end, 1 zone after it"
else
  echo "record_signals: skipped the pid-namespace case: unshare -p needs root"
fi

# 3b. a signal sent to the process group (kill -INT -PGID: CI cancellation, supervisors, kill 0)
# reaches the program once, not once from the sender and once more from loupe record; one sent
# to loupe record alone is passed on, once. The group: a shell of its own (setsid), which
# ignores the two signals itself (the probe installs its own handlers).
group_run() { # $1: "group" or "record": where the two signals go
  rm -f "$tmp/ready3b"
  setsid bash -c '
    trap "" INT TERM
    "$1" record -q --no-sample -o "$2/log3b" -- "$3" count "$2/ready3b" >"$2/out3b" 2>"$2/err3b" &
    rec=$!
    for _ in $(seq 200); do [ -e "$2/ready3b" ] && break; sleep 0.05; done
    if [ "$4" = group ]; then kill -INT 0; sleep 0.2; kill -TERM 0; else kill -INT $rec; sleep 0.2; kill -TERM $rec; fi
    wait $rec; echo $? >"$2/st3b"' _ "$loupe" "$tmp" "$probe" "$1"
}
group_run group
[ "$(cat "$tmp/out3b")" = "INT=1 TERM=1" ] || fail "group signals: $(cat "$tmp/out3b") $(cat "$tmp/err3b")"
[ "$(cat "$tmp/st3b")" = 0 ] || fail "group signals: status $(cat "$tmp/st3b")"
group_run record
[ "$(cat "$tmp/out3b")" = "INT=1 TERM=1" ] || fail "signals to record: $(cat "$tmp/out3b") $(cat "$tmp/err3b")"
echo "record_signals: a group SIGINT and SIGTERM reach the program once each; sent to loupe record, passed on once each"

# 3d. execve() from a SIGALRM handler that interrupts a malloc/free loop (POSIX makes execve
# async-signal-safe): 0.4's exec wrapper wrote the trace first, with malloc, and hung on the
# allocator's lock in 4 of 12 runs. Now the recording is handed over (a marker beside the region)
# and recovered by loupe record: both images' zones are in the run. 10 runs as the root, 10 in a
# child of a shell (a region file's hand-over, not the root's memfd); each bounded by timeout.
exec_runs=0
for k in $(seq 20); do
  if [ "$k" -le 10 ]; then
    set -- "$probe" exec-in-handler
  else
    set -- sh -c '"$0" exec-in-handler; true' "$probe"
  fi
  rm -rf "$tmp/logx"
  out=$(timeout 60 "$loupe" record -q -o "$tmp/logx" --print-run-dir "$tmp/runx" -- "$@" 2>"$tmp/errx")
  rc=$?
  [ "$rc" = 124 ] && fail "exec in a handler: run $k hung (killed after 60 s): $(cat "$tmp/errx")"
  [ "$rc" = 0 ] && [ "$out" = "exec'd" ] || fail "exec in a handler: run $k: status $rc, '$out': $(cat "$tmp/errx")"
  got=$("$loupe" summary "$(cat "$tmp/runx")" --json 2>/dev/null | python3 -c '
import json, sys
z = {r["name"]: r["count"] for r in json.load(sys.stdin)["zones"]}
print("ok" if z.get("churn", 0) > 0 and z.get("target") == 1 else z)')
  [ "$got" = ok ] || fail "exec in a handler: run $k: zones $got: $(cat "$tmp/errx")"
  exec_runs=$((exec_runs + 1))
done
echo "record_signals: exec from a SIGALRM handler: $exec_runs of 20 runs ended, both images' zones kept"

# 3e. the same exec from a handler that lands in the exit's stop (SIGALRM armed just before
# main returns, 3 generations): before the stop's collect the region is handed over and
# recovered; after it the image's events are only in the stop's memory and loupe record says
# that image is lost. Never silent: each image that recorded (the probe prints "gen N" for each;
# 3 execs to gen 3, which exits 7) is in the run or said lost (0.4 lost the root's first image
# without a word).
for us in 100 3000 20000; do
  rm -rf "$tmp/logz"
  timeout 60 "$loupe" record -q -o "$tmp/logz" --print-run-dir "$tmp/runz" -- \
    "$probe" exec-at-exit 0 "$us" >"$tmp/outz" 2>"$tmp/errz"
  rc=$?
  [ "$rc" = 124 ] && fail "exec at exit ($us us): hung"
  images=$(grep -c '^gen [012]$' "$tmp/outz")
  lost=$(grep -c "exec'd from a signal handler while its trace was being written (at its exit): that image's trace is lost, uncounted" "$tmp/errz")
  kept=$("$loupe" summary "$(cat "$tmp/runz")" --json 2>/dev/null | python3 -c '
import json, sys
z = {r["name"]: r["count"] for r in json.load(sys.stdin)["zones"]}
print(sum(1 for g in range(3) if z.get("exit_w%d" % g) == 200000))')
  [ $((kept + lost)) = "$images" ] ||
    fail "exec at exit ($us us): $images images recorded, $kept in the run, $lost said lost: $(cat "$tmp/errz")"
  echo "record_signals: exec from a handler in the exit's stop ($us us): $images images, $kept kept, $lost said lost"
done

# 4. a full disk: 20,000 zones (a trace of some 100 KiB) into a 64 KiB tmpfs in a mount namespace of our own (root only; else skipped)
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
  echo "record_signals: skipped the full-disk cases: mounting a tmpfs needs root"
  exit 0
fi
mkdir -p "$small"
unshare -m bash -c '
  mount -t tmpfs -o size=64k none "$1" || exit 99
  "$2" record -q -o "$1/log" -- "$6" 20000 20000 0 >/dev/null 2>"$4/err4"; echo $? >"$4/st4"
  "$2" record -o "$5/log5" --spool="$1/sp" --spool-budget none --session-events 65536 --print-run-dir "$4/run5" \
    -- "$6" 163840 512 2000 >/dev/null 2>"$4/err5"; echo $? >"$4/st5"
' _ "$small" "$loupe" "$probe" "$tmp" "$tmp" "$build/tests/spool_probe"
[ $? = 99 ] && { echo "record_signals: skipped the full-disk cases: mount refused"; exit 0; }
err4=$(cat "$tmp/err4")
grep -q "writing the trace failed: .*No space left on device (errno 28); the recording is lost: free space in $small/log, or rerun with -o DIR on a file system with room\$" <<<"$err4" ||
  fail "full disk: message: $err4"
grep -qF "loupe_write_last_trace" <<<"$err4" && fail "full disk: the API's advice under record: $err4"
[ "$(cat "$tmp/st4")" = 0 ] || fail "full disk: exit status $(cat "$tmp/st4") (want the program's own 0)"
echo "record_signals: a full disk at the end: said, with what to do"
err5=$(cat "$tmp/err5")
grep -q "^loupe record: pid [0-9]*: the spool failed: write to $small/sp/loupe-spool-[0-9]*\.bin failed after 0 chunks: No space left on device (errno 28)\$" <<<"$err5" ||
  fail "full spool: message: $err5"
grep -qF -- "--buffer-events" <<<"$err5" && fail "full spool: capacity advice: $err5"
n=$("$loupe" summary "$(cat "$tmp/run5")" 2>&1 | grep -c "^warning: the spool failed, events that did not fit in memory after that were dropped: write to $small/sp/loupe-spool-[0-9]*\.bin failed after 0 chunks: No space left on device (errno 28)\$")
[ "$n" = 1 ] || fail "full spool: summary warnings: $n: $("$loupe" summary "$(cat "$tmp/run5")" 2>&1 | head -3)"
echo "record_signals: a full spool: its error said by record and by summary, no capacity advice"

# 6. drops from signal re-entry are said as re-entry, with no capacity advice (0.4 asked for a
# --buffer-events below the limit already set): a SIGUSR1 handler that records, 100,000 times a
# second, over 400,000 zones (within the default limits); up to 5 runs for one that re-entered
for try in 1 2 3 4 5; do
  "$loupe" record -o "$tmp/log6" -- "$probe" reenter >/dev/null 2>"$tmp/err6" || fail "reenter: $(cat "$tmp/err6")"
  line=$(grep "events recorded" "$tmp/err6")
  d=$(sed -n 's/.* events recorded, \([0-9,]*\) dropped.*/\1/p' <<<"$line" | tr -d ,)
  [ "${d:-0}" -gt 0 ] && break
done
[ "${d:-0}" -gt 0 ] || fail "reenter: nothing re-entered in 5 runs: $line"
g=$(python3 -c 'import sys; print(f"{int(sys.argv[1]):,}")' "$d")
grep -qF "events recorded, $g dropped ($g where a signal handler or the program's allocator interrupted a recording call on the same thread: re-entry, which a larger buffer would not keep)" <<<"$line" ||
  fail "reenter: the cause: $line"
grep -qF -- "--buffer-events" "$tmp/err6" && fail "reenter: capacity advice: $(cat "$tmp/err6")"
echo "record_signals: $d events dropped by signal re-entry, said as re-entry, no capacity advice"
exit 0
