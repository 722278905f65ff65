#!/usr/bin/env bash
# hotpath_syscalls.sh: the record path makes no system call after a thread's first event
# (a design guard of the recorder): strace counts the calls between the probe's two getppid markers.
# Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
# TSan's runtime runs a background thread of its own whose system calls strace -f would count.
case "$sanitize" in *thread*) echo "hotpath_syscalls: skipped: TSan build (its runtime's own thread makes system calls)"; exit 77 ;; esac
# ASan/UBSan make no system call on the record path once the shadow memory is mapped, but
# LeakSanitizer cannot run under ptrace: leaks are left to the other tests.
export ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
command -v strace >/dev/null || { echo "FAIL: strace is not installed (tools/setup.sh installs it)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strace -f -qq -o "$tmp/trace" "$build/tests/syscall_probe" "$tmp/log" >"$tmp/out"
grep -q getppid "$tmp/trace" || { echo "FAIL: markers not seen"; exit 1; }
# The probe's thread only: loupe's keeper thread (populating chunks ahead of demand, off the
# record path) makes system calls of its own meanwhile. With -f, strace prefixes each line with
# the thread's id.
tid=$(awk '/getppid\(/ { print $1; exit }' "$tmp/trace")
# A marker interrupted by another thread's call shows as "getppid(<unfinished ...>" and
# "<... getppid resumed>": the second half is the marker too, not a call.
between=$(awk -v t="$tid" '$1 != t || /<\.\.\. getppid resumed>/ { next } /getppid\(/ { n++; next } n == 1 { c++ } END { print c + 0 }' "$tmp/trace")
if [ "$between" != 0 ]; then
  echo "FAIL: $between system calls on the record path:"
  awk -v t="$tid" '$1 != t || /<\.\.\. getppid resumed>/ { next } /getppid\(/ { n++; next } n == 1' "$tmp/trace" | head -20
  exit 1
fi
# 100001 iterations x (zone 2 + int arg 1 + string arg 2 + dyn zone 3 + counter 2 + instant 2
# + flow 2 + a zone with 2 arguments in one call 4) = 18 events each (an argument is one slot,
# its string one more per 15 bytes)
[ "$(cat "$tmp/out")" = 1800018 ] || { echo "FAIL: events recorded: $(cat "$tmp/out")"; exit 1; }
echo "hotpath_syscalls: 0 system calls in 100000 iterations (1800000 events)"
