#!/usr/bin/env bash
# record_fds.sh: a program that does to its fds what daemons, shells and supervisors do sees no
# difference under `loupe record` (DESIGN.md invariant 10; docs/record.md, "What loupe takes from
# your process"). Each case runs tests/probes/fd_probe.c untraced and under record (with and
# without --spool, with zones and with no loupe call at all) and compares its output, the file
# it writes and its exit status:
#   - closing every fd >= 3 (close() one by one, closefrom, close_range), then a pipe, a file,
#     a thread and a fork()ed child sending 2000 messages: the same numbers, every message;
#   - dup2 of a file onto every number of loupe's range: the file holds what the program wrote;
#   - started with fd 0, 1 or 2 closed: the same closed fds, the same number for a new file;
#   - RLIMIT_NOFILE: 600 threads, then files opened to the limit: the program opens exactly as
#     many as untraced (loupe's three numbers, the sampler's wake-up and the keeper's two /proc
#     files, lie above the soft limit; 0.4 took three of its numbers, two with --no-sample), and
#     at `ulimit -Sn 4` it runs as untraced (0.4: the loader had no number for libc, exit 127);
#   - the zones of those runs are all recorded, 0 dropped.
# Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
name=record_fds
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
probe=$build/tests/fd_probe
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# untraced and traced: stdout+stderr (loupe record's own lines left out), the file, the status
# run_pair LABEL REDIRECT RECORD-OPTIONS -- PROBE-ARGS (FILE is the probe's last argument)
run_pair() {
  local label=$1 redir=$2 opts=$3; shift 4
  local args=("$@")
  local n=${#args[@]}
  local f0="$tmp/$label.0" f1="$tmp/$label.1"
  ( eval "exec $redir"; "$probe" "${args[@]:0:n-1}" "$f0.file" ) >"$f0.out" 2>&1 </dev/null
  echo $? >"$f0.st"
  # shellcheck disable=SC2086 # opts is a word list
  ( eval "exec $redir"; $loupe record -q $opts --print-run-dir "$f1.run" -o "$tmp/log" -- \
      "$probe" "${args[@]:0:n-1}" "$f1.file" ) >"$f1.out" 2>&1 </dev/null
  echo $? >"$f1.st"
  grep -v -e '^loupe' -e "^$tmp/log/" "$f1.out" >"$f1.prog"
  [ "$(cat "$f0.st")" = 0 ] || fail "$label: untraced run failed: $(cat "$f0.out")"
  [ "$(cat "$f1.st")" = "$(cat "$f0.st")" ] ||
    fail "$label: exit status $(cat "$f1.st") under record, $(cat "$f0.st") untraced: $(cat "$f1.out")"
  diff "$f0.out" "$f1.prog" >"$tmp/d" || fail "$label: output differs under record: $(cat "$tmp/d")"
  if [ -f "$f0.file" ] || [ -f "$f1.file" ]; then
    cmp -s "$f0.file" "$f1.file" || fail "$label: the file differs: $(od -c "$f1.file" | head -5)"
  fi
  grep -q 'dropped' "$f1.out" && fail "$label: record said something was dropped: $(cat "$f1.out")"
}

# zone counts of a run: NAME=COUNT lines, sorted
zones() {
  "$build/loupe" summary "$(cat "$1")" --json 2>/dev/null | python3 -c '
import json, sys
z = {}
for r in json.load(sys.stdin)["zones"]:
    z[r["name"]] = z.get(r["name"], 0) + r["count"]
print(" ".join("%s=%d" % (k, z[k]) for k in sorted(z) if k != "parent_recv"))'
}

for mode in closeall closefrom closerange; do
  for zones in 0 1; do
    for spool in "" "--spool"; do
      label="$mode.$zones${spool:+.spool}"
      run_pair "$label" "" "$spool" -- "$mode" "$zones" FILE
      if [ "$zones" = 1 ]; then
        got=$(zones "$tmp/$label.1.run")
        [ "$got" = "child_send=2000 worker_step=20" ] || fail "$label: zones $got"
      fi
    done
  done
  # the numbers the program took over are said in the trace, with the first one's cause
  got=$(python3 - "$(cat "$tmp/$mode.1.spool.1.run")" <<'PY'
import glob, gzip, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.trace.json.gz")):
    v = json.load(gzip.open(f)).get("metadata", {}).get("loupe_fds_taken_over")
    if v:
        print(v.split(" (first: the program ")[0], v.split(" (first: the program ")[1].split(" fd ")[0])
        break
PY
)
  case "$mode" in
    closeall) [ "${got##* }" = closed ] && [ "${got%% *}" -ge 1 ] || fail "$mode: loupe_fds_taken_over: '$got'" ;;
    *) [ -z "$got" ] || fail "$mode: loupe_fds_taken_over: '$got' (close_range and closefrom leave loupe's fds open)" ;;
  esac
  echo "record_fds: $mode: the same fd numbers, 2000 of 2000 messages, the same file; zones all kept"
done

for zones in 0 1; do
  for spool in "" "--spool"; do
    label="dup2high.$zones${spool:+.spool}"
    run_pair "$label" "" "$spool" -- dup2high "$zones" FILE
    if [ "$zones" = 1 ]; then
      got=$(zones "$tmp/$label.1.run")
      [ "$got" = "worker_step=60" ] || fail "$label: zones $got"
    fi
  done
done
echo "record_fds: dup2 onto loupe's range: the file holds exactly what the program wrote"

# bash's `exec N>file` asks fcntl(N, F_GETFD) first and, when N is open and close-on-exec (as its
# own fds are, and loupe's), saves N and puts it back after the redirection: under record the
# script's file was never at 1025, and `echo >&1025` failed with EBADF. The preload's fcntl now
# answers EBADF for loupe's numbers, as the untraced run would. Every number of loupe's range and
# above it, at the script's own limit (its soft limit raised where the hard one allows).
script='ulimit -Sn 2048 2>/dev/null; [ "$(ulimit -Sn)" -ge 1100 ] || { echo low; exit 0; }
for n in $(seq 1020 1040); do eval "exec $n>$1.f.$n" && echo "line $n" >&$n || echo "no $n"; done
for n in $(seq 1020 1040); do eval "exec $n>&-"; done; cat "$1".f.*'
for spool in "" "--spool"; do
  bash -c "$script" sh "$tmp/bash0" >"$tmp/bash0.out" 2>&1 </dev/null
  # shellcheck disable=SC2086 # spool is a word list
  # (ASan: no leak report at bash's exit, which would be in its output)
  ASAN_OPTIONS=detect_leaks=0 $loupe record -q $spool -o "$tmp/logb" -- bash -c "$script" sh "$tmp/bash1" \
    >"$tmp/bash1.out" 2>&1 </dev/null || fail "bash exec N>file: status $?: $(cat "$tmp/bash1.out")"
  grep -v -e '^loupe' -e "^$tmp/logb/" "$tmp/bash1.out" >"$tmp/bash1.prog"
  diff "$tmp/bash0.out" "$tmp/bash1.prog" >"$tmp/d" ||
    fail "bash exec N>file${spool:+ with $spool}: output differs under record: $(cat "$tmp/d")"
done
if [ "$(cat "$tmp/bash0.out")" = low ]; then
  echo "record_fds: bash exec N>file: skipped (a hard RLIMIT_NOFILE below 1100)"
else
  [ "$(grep -c '^line ' "$tmp/bash0.out")" = 21 ] || fail "bash exec N>file: untraced: $(cat "$tmp/bash0.out")"
  echo "record_fds: bash exec N>file at 1020-1040: 21 of 21 files hold their line, as untraced"
fi

for fd in 0 1 2; do
  case $fd in 0) r='0<&-' ;; 1) r='1>&-' ;; 2) r='2>&-' ;; esac
  for spool in "" "--spool"; do
    run_pair "std$fd${spool:+.spool}" "$r" "$spool" -- std 1 FILE
  done
done
# the probe links libloupe, so its "untraced" run has libgrpc's load-time probe in it too: 0.4
# left that probe's eventfd at fd 0 in both ("open: 0=1", "read(0): non-blocking", a new file
# got fd 3), so the pair matched; what an untraced program has is asserted here
want0=$(printf 'open: 0=0 1=1 2=1\nwrite(1): ok\nread(0): Bad file descriptor\na new file gets fd 0')
for f in std0.0.out std0.1.prog std0.spool.1.prog; do
  [ "$(cat "$tmp/$f")" = "$want0" ] || fail "started with fd 0 closed ($f): $(cat "$tmp/$f")"
done
echo "record_fds: started with fd 0, 1 or 2 closed: the same fds closed, a new file the same number"

# xargs's child closes fd 0 and dup2()s /dev/null onto it before its exec; a loupe thread that
# took a number at that moment made the dup2 fail with EBUSY, and xargs stopped short (0.4: 8 of
# 12 runs ran 10-288 of the 300 commands). loupe's threads take no number of a child's now (the
# keeper's are opened before fork() returns, the sampler's are in its own table).
# Under ASan too: a fork while the sampler was inside the ASan runtime's malloc left the child's
# allocator lock held (the sampler now works under a lock the fork takes: sample.c s_work_lock).
for k in 1 2 3; do
  out=$($loupe record -q -o "$tmp/logx" -- sh -c 'seq 300 | xargs -P2 -n1 /bin/echo | wc -l' \
          </dev/null 2>"$tmp/errx"); st=$?
  [ "$st" = 0 ] && [ "$out" = 300 ] || fail "xargs run $k: $out commands, status $st: $(cat "$tmp/errx")"
done
echo "record_fds: seq 300 | xargs -P2 -n1: 300 commands in each of 3 runs"

if [ -n "$sanitize" ]; then
  echo "record_fds: RLIMIT_NOFILE: skipped in a sanitizer build (its runtime holds fds of its own)"
  exit 0
fi
# RLIMIT_NOFILE: loupe's fds in the program's table are the sampler's wake-up and the keeper's
# /proc/self/stat and /proc/self/task, whatever the thread count (the sampler's perf events are
# in an fd table of its own: base/ownfd.h), at numbers above the soft limit (ownfd.c's room)
count() { sed -n 's/^[0-9]* threads, \([0-9]*\) files opened.*/\1/p' "$1"; }
# the smallest limit the probe runs at untraced here (its loader needs one free number; the
# fds this test inherits vary): under record it must run there too
low=4
while [ "$low" -lt 16 ] && ! ( ulimit -Sn "$low"; "$probe" nofile 1 1 ) >/dev/null 2>&1; do
  low=$((low + 1))
done
for lim in 1024:600 16:4 "$low":1; do
  n=${lim%%:*} threads=${lim##*:}
  ( ulimit -Sn "$n"; "$probe" nofile 1 "$threads" ) >"$tmp/nf0" 2>&1 || fail "nofile $n: $(cat "$tmp/nf0")"
  ( ulimit -Sn "$n"; $loupe record -q -o "$tmp/log" -- "$probe" nofile 1 "$threads" ) >"$tmp/nf1" 2>&1 ||
    fail "nofile $n under record: $(cat "$tmp/nf1")"
  ( ulimit -Sn "$n"; $loupe record -q --no-sample -o "$tmp/log" -- "$probe" nofile 1 "$threads" ) \
    >"$tmp/nf2" 2>&1 || fail "nofile $n under record --no-sample: $(cat "$tmp/nf2")"
  a=$(count "$tmp/nf0") b=$(count "$tmp/nf1") c=$(count "$tmp/nf2")
  [ -n "$a" ] && [ "$b" = "$a" ] ||
    fail "RLIMIT_NOFILE $n, $threads threads: $b files under record, $a untraced: $(cat "$tmp/nf1")"
  [ "$c" = "$a" ] ||
    fail "RLIMIT_NOFILE $n: $c files under record --no-sample, $a untraced: $(cat "$tmp/nf2")"
  grep -q 'dropped\|could not' "$tmp/nf1" && fail "RLIMIT_NOFILE $n: $(cat "$tmp/nf1")"
  echo "record_fds: RLIMIT_NOFILE $n, $threads threads: $a files untraced, $b under record, $c with --no-sample"
done
# a hard limit loupe record cannot work under: said before the program runs, status 120
( ulimit -n 8; $loupe record -q -o "$tmp/log" -- sh -c 'echo RAN' ) >"$tmp/hard.out" 2>"$tmp/hard.err"
st=$?
[ "$st" = 120 ] || fail "hard RLIMIT_NOFILE 8: status $st: $(cat "$tmp/hard.err")"
[ "$(cat "$tmp/hard.err")" = "loupe record: the hard RLIMIT_NOFILE is 8: loupe record needs 16 file descriptors; start it under a hard limit of 16 or more (the program gets its own soft limit back before it runs)" ] ||
  fail "hard RLIMIT_NOFILE 8: $(cat "$tmp/hard.err")"
[ -s "$tmp/hard.out" ] && fail "hard RLIMIT_NOFILE 8: the program ran: $(cat "$tmp/hard.out")"
echo "record_fds: a hard RLIMIT_NOFILE of 8: refused before the program runs, status 120"
exit 0
