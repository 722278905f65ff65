#!/usr/bin/env bash
# record_detect.sh: `loupe record` says, before running it, why a program cannot be traced: a
# statically linked one, set-user-ID / set-group-ID, file capabilities, a 32-bit ELF, a script
# (which runs, the interpreter traced); each with its exact message and exit status (121), and
# nothing run (a static or, as root, a set-user-ID program is sampled from outside unless
# sampling is off: tests/record_outside.sh; here with --no-sample). With --no-check the program runs; when the preload never started in it, loupe
# record exits with the program's status and leaves no run directory (nor the log directory it made). Statuses 120-123
# are loupe's own; a program's own 126 passes through. Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
skipped() { echo "record_detect: skipped: $*"; }
name=record_detect
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
no_check="nothing was run (--no-check runs it anyway)"

# PROGRAM prints RAN (stdout) and exits 3, so a run is seen
printf '#include <stdio.h>\nint main(void) { puts("RAN"); return 3; }\n' >"$tmp/p.c"
cc -std=c11 "$tmp/p.c" -o "$tmp/dyn"

# refused PROG MESSAGE [OPTION...]: exit 121, the exact message, the program not run, no log
# directory
refused() {
  local prog=$1 msg=$2 st
  shift 2
  set +e
  "$loupe" record "$@" -o "$tmp/log-refused" -- "$prog" >"$tmp/out" 2>"$tmp/err"; st=$?
  set -e
  [ "$st" = 121 ] || fail "$prog: exit $st, want 121 ($(cat "$tmp/err"))"
  [ "$(cat "$tmp/err")" = "loupe record: cannot trace $prog: it is $msg; $no_check" ] ||
    fail "$prog: message: $(cat "$tmp/err")"
  [ -s "$tmp/out" ] && fail "$prog: it ran"
  [ -e "$tmp/log-refused" ] && fail "$prog: a log directory was made"
  echo "record_detect: $(basename "$prog"): refused, exit 121"
}

# 1. statically linked
static_msg="statically linked: no dynamic loader runs in it, so nothing preloads loupe (link it dynamically, or call loupe_start_trace() in it)"
if cc -static "$tmp/p.c" -o "$tmp/static" 2>/dev/null; then
  refused "$tmp/static" "$static_msg" --no-sample
  # --no-check runs it: the preload never starts, its own exit status (3), no run directory, no log directory
  set +e
  "$loupe" record --no-sample --no-check -o "$tmp/new/log" -- "$tmp/static" >"$tmp/out" 2>"$tmp/err"; st=$?
  set -e
  [ "$st" = 3 ] || fail "--no-check static: exit $st ($(cat "$tmp/err"))"
  [ "$(cat "$tmp/out")" = RAN ] || fail "--no-check static: the program did not run"
  [ "$(sed -n 2p "$tmp/err")" = "loupe record: $tmp/static exited with status 3; loupe's preload never started in it, so nothing was recorded: it is $static_msg" ] ||
    fail "--no-check static: message: $(cat "$tmp/err")"
  [ -e "$tmp/new" ] && fail "--no-check static: left $(find "$tmp/new")"
  # a log directory that existed stays, with no run directory in it
  mkdir -p "$tmp/keep"
  set +e
  "$loupe" record --no-sample --no-check -o "$tmp/keep" -- "$tmp/static" >/dev/null 2>&1; st=$?
  set -e
  [ "$st" = 3 ] || fail "--no-check static (existing log dir): exit $st"
  [ -d "$tmp/keep" ] && [ -z "$(ls -A "$tmp/keep")" ] || fail "existing log dir: $(ls -R "$tmp/keep")"
  echo "record_detect: static --no-check: ran, its exit status 3, no run directory left"
  # a script whose interpreter cannot be traced is refused with the interpreter's reason
  printf '#!%s\n' "$tmp/static" >"$tmp/sscript"
  chmod +x "$tmp/sscript"
  refused "$tmp/sscript" "a script run by $tmp/static, which is $static_msg" --no-sample
else
  skipped "static binary (no libc.a for cc -static)"
fi

# 2. a 32-bit ELF (a header is enough: the check reads it before any exec)
if [ "$(getconf LONG_BIT)" = 64 ]; then
  { printf '\177ELF\001\001\001\000'; head -c 44 /dev/zero; } >"$tmp/elf32"
  chmod +x "$tmp/elf32"
  refused "$tmp/elf32" "a 32-bit ELF executable: loupe's preload library is 64-bit, so the loader would skip it"
else
  skipped "32-bit ELF (loupe itself is not 64-bit)"
fi

# 3. set-user-ID / set-group-ID to someone else (as root: owned by nobody, 65534)
if [ "$(id -u)" = 0 ]; then
  cp "$tmp/dyn" "$tmp/suid" && chown 65534 "$tmp/suid" && chmod u+s "$tmp/suid"
  refused "$tmp/suid" "set-user-ID (owner uid 65534, you are uid 0): the loader runs it in secure-execution mode and ignores LD_PRELOAD (ld.so(8))" --no-sample
  cp "$tmp/dyn" "$tmp/sgid" && chgrp 65534 "$tmp/sgid" && chmod g+s "$tmp/sgid"
  refused "$tmp/sgid" "set-group-ID (group gid 65534, yours is $(id -g)): the loader runs it in secure-execution mode and ignores LD_PRELOAD (ld.so(8))" --no-sample
  # --no-check: the kernel runs it (as uid 65534), the loader without the preload
  set +e
  "$loupe" record --no-sample --no-check -o "$tmp/log-suid" -- "$tmp/suid" >"$tmp/out" 2>"$tmp/err"; st=$?
  set -e
  [ "$st" = 3 ] || fail "--no-check setuid: exit $st ($(cat "$tmp/err"))"
  [ "$(cat "$tmp/out")" = RAN ] || fail "--no-check setuid: the program did not run"
  grep -qF "loupe's preload never started in it, so nothing was recorded: it is set-user-ID" "$tmp/err" ||
    fail "--no-check setuid: message: $(cat "$tmp/err")"
  [ -e "$tmp/log-suid" ] && fail "--no-check setuid: left a log directory"
else
  skipped "set-user-ID and set-group-ID (a file owned by another user needs root)"
fi

# 4. file capabilities (secure execution for a user other than root: run loupe as nobody)
if [ "$(id -u)" = 0 ] && command -v setcap >/dev/null && command -v setpriv >/dev/null &&
   [ -x "$loupe" ]; then
  chmod 755 "$tmp"
  cp "$tmp/dyn" "$tmp/caps" && setcap cap_net_raw+ep "$tmp/caps"
  if setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$loupe"; then
    set +e
    setpriv --reuid=65534 --regid=65534 --clear-groups "$loupe" record -o "$tmp/log-caps" \
      -- "$tmp/caps" >"$tmp/out" 2>"$tmp/err"; st=$?
    set -e
    [ "$st" = 121 ] || fail "caps: exit $st ($(cat "$tmp/err"))"
    [ "$(cat "$tmp/err")" = "loupe record: cannot trace $tmp/caps: it is given file capabilities (security.capability, see getcap(8)): the loader runs it in secure-execution mode and ignores LD_PRELOAD (ld.so(8)); $no_check" ] ||
      fail "caps: message: $(cat "$tmp/err")"
    [ -s "$tmp/out" ] && fail "caps: it ran"
    echo "record_detect: caps: refused, exit 121"
  else
    skipped "file capabilities (nobody cannot run $loupe)"
  fi
else
  skipped "file capabilities (needs root, setcap, setpriv and the plain loupe binary)"
fi

# 5. a script: it runs (its status passes), with a note saying what is traced
printf '#!/bin/sh\necho SCRIPT\nexit 5\n' >"$tmp/script.sh"
chmod +x "$tmp/script.sh"
set +e
"$loupe" record -o "$tmp/log-sh" --print-run-dir "$tmp/run-sh" -- "$tmp/script.sh" >"$tmp/out" \
  2>"$tmp/err"; st=$?
set -e
[ "$st" = 5 ] || fail "script: exit $st, want 5 ($(cat "$tmp/err"))"
[ "$(cat "$tmp/out")" = SCRIPT ] || fail "script: stdout: $(cat "$tmp/out")"
[ "$(head -n 1 "$tmp/err")" = "loupe record: note: $tmp/script.sh is a script run by /bin/sh: /bin/sh is what runs and what is traced, not the script (a program it starts is traced, into a run directory of its own, only when the shell passes loupe's environment on, as bash does): record the real program" ] ||
  fail "script: note: $(cat "$tmp/err")"
[ -d "$(cat "$tmp/run-sh")" ] || fail "script: no run directory"
echo "record_detect: script: ran, exit 5, noted"

# 6. loupe's own statuses: 123 not found, 122 not executable; a program's own 126 passes
set +e
"$loupe" record -o "$tmp/log6" -- no-such-program-loupe >/dev/null 2>"$tmp/err"; st=$?
[ "$st" = 123 ] || fail "not found: exit $st"
[ "$(cat "$tmp/err")" = "loupe record: cannot run 'no-such-program-loupe': not found in PATH" ] ||
  fail "not found: message: $(cat "$tmp/err")"
printf 'data\n' >"$tmp/noexec"
"$loupe" record -o "$tmp/log6" -- "$tmp/noexec" >/dev/null 2>"$tmp/err"; st=$?
[ "$st" = 122 ] || fail "not executable: exit $st"
[ "$(cat "$tmp/err")" = "loupe record: cannot run '$tmp/noexec': Permission denied" ] ||
  fail "not executable: message: $(cat "$tmp/err")"
[ -e "$tmp/log6" ] && fail "a log directory was made for a program that cannot run"
printf 'int main(void) { return 126; }\n' >"$tmp/e126.c"
cc "$tmp/e126.c" -o "$tmp/e126"
"$loupe" record -o "$tmp/log7" -- "$tmp/e126" >/dev/null 2>"$tmp/err"; st=$?
[ "$st" = 126 ] || fail "the program's own 126: exit $st"
grep -qxF "loupe record: $tmp/e126 exited with status 126" "$tmp/err" || fail "own 126: $(cat "$tmp/err")"
set -e
"$loupe" record --help >"$tmp/help"
grep -qF "121  PROGRAM cannot be traced" "$tmp/help" || fail "--help lacks the statuses"
echo "record_detect: all checks passed"
