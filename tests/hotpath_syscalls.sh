#!/usr/bin/env bash
# hotpath_syscalls.sh: the record path makes no system call after a thread's first event
# (issue 6's design guard): strace counts the calls between the probe's two getppid markers.
# Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
# Sanitizer runtimes make system calls of their own (shadow memory, reports): normal build only.
if grep -q '^LOUPE_SANITIZE:STRING=.\+' "$build/CMakeCache.txt"; then
  echo "skipped: sanitizer build"; exit 0
fi
command -v strace >/dev/null || { echo "FAIL: strace is not installed (tools/setup.sh installs it)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strace -f -qq -o "$tmp/trace" "$build/tests/syscall_probe" "$tmp/log" >"$tmp/out"
grep -q getppid "$tmp/trace" || { echo "FAIL: markers not seen"; exit 1; }
between=$(awk '/getppid\(/ { n++; next } n == 1 { c++ } END { print c + 0 }' "$tmp/trace")
if [ "$between" != 0 ]; then
  echo "FAIL: $between system calls on the record path:"
  awk '/getppid\(/ { n++; next } n == 1' "$tmp/trace" | head -20
  exit 1
fi
# 100001 iterations x (zone 2 + int arg 2 + string arg 3 + dyn zone 3 + counter 2 + instant 2
# + flow 2) = 16 events each
[ "$(cat "$tmp/out")" = 1600016 ] || { echo "FAIL: events recorded: $(cat "$tmp/out")"; exit 1; }
echo "hotpath_syscalls: 0 system calls in 100000 iterations (1600000 events)"
