#!/usr/bin/env bash
# record_limits.sh: a program's own RLIMIT_AS under `loupe record` (docs/record.md, "What loupe
# takes from your process"). loupe's recording region is reserved at the start; it must leave
# the program the address space it has untraced:
#   - a wrapper that lowers RLIMIT_AS and execs (prlimit --as=512M): the program runs, malloc
#     and deep recursion as untraced, and is traced (the region sized within an eighth);
#   - a program that lowers its own RLIMIT_AS to 512 MiB: it still gets its 320 MiB and its
#     stack (0.4: SIGSEGV), the region gives back what it never used; its zones recorded after
#     that are kept or counted.
# Args: BUILD_DIR SOURCE_DIR.
set -uo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
[ -n "$sanitize" ] && { echo "record_limits: skipped: sanitizer build (its shadow memory needs terabytes of address space)"; exit 77; }
command -v prlimit >/dev/null || { echo "record_limits: skipped: no prlimit(1)"; exit 77; }
loupe=$build/loupe

cat >"$tmp/as.c" <<'EOF'
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
static int deep(int n) {
    volatile char b[4096];
    b[0] = (char)n;
    return n == 0 ? b[0] : deep(n - 1) + b[0];
}
/* argv[1] "self": lowers its own RLIMIT_AS to 512 MiB first. Then 40 blocks of 8 MiB, touched,
 * 8 MiB of stack, and 1000 zones. "all": lowers it, then keeps every MiB malloc gives. */
int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "all") == 0) {
        struct rlimit rl = {(rlim_t)512 << 20, (rlim_t)512 << 20};
        if (setrlimit(RLIMIT_AS, &rl) != 0) {
            perror("setrlimit");
            return 2;
        }
        for (int i = 0; i < 10; i++) {
            LOUPE_ZONE("before_all");
        }
        size_t mib = 0;
        while (malloc((size_t)1 << 20) != NULL) {
            mib++;
        }
        printf("%s\n", mib > 100 ? "malloc'd the rest" : "malloc'd too little");
        return 0;
    }
    if (argc > 1 && strcmp(argv[1], "self") == 0) {
        struct rlimit rl = {(rlim_t)512 << 20, (rlim_t)512 << 20};
        if (setrlimit(RLIMIT_AS, &rl) != 0) {
            perror("setrlimit");
            return 2;
        }
    }
    size_t got = 0;
    for (int n = 0; n < 40; n++) {
        char *p = malloc((size_t)8 << 20);
        if (p == NULL) {
            break;
        }
        memset(p, 1, (size_t)8 << 20);
        got += 8;
    }
    for (int i = 0; i < 1000; i++) {
        LOUPE_ZONE("after_limit");
    }
    printf("malloc'd %zu MiB, stack %d\n", got, deep(2000));
    return 0;
}
EOF
cc -O0 -I"$2/include" "$tmp/as.c" -o "$tmp/as" -L"$build" -lloupe -Wl,-rpath,"$build" ||
  fail "cannot build the probe"

want="malloc'd 320 MiB, stack 104"
got=$("$tmp/as" self) || fail "untraced self: status $?"
[ "$got" = "$want" ] || fail "untraced self: $got"
got=$(prlimit --as=$((512 << 20)) "$tmp/as") || fail "untraced prlimit: status $?"
[ "$got" = "$want" ] || fail "untraced prlimit: $got"

# 1. its own setrlimit
out=$("$loupe" record --no-sample --print-run-dir "$tmp/run1" -o "$tmp/log1" -- "$tmp/as" self 2>"$tmp/err1"); st=$?
[ "$st" = 0 ] || fail "self: status $st: $(cat "$tmp/err1")"
[ "$out" = "$want" ] || fail "self: output '$out' under record: $(cat "$tmp/err1")"
grep -qx "loupe record: 2,000 events recorded, 0 dropped" "$tmp/err1" ||
  fail "self: the 1000 zones recorded after the limit: $(cat "$tmp/err1")"
echo "record_limits: setrlimit(RLIMIT_AS, 512 MiB) in the program: 320 MiB and its stack, as untraced"

# 2. a wrapper that lowers it and execs
out=$("$loupe" record --no-sample -o "$tmp/log2" -- prlimit --as=$((512 << 20)) "$tmp/as" 2>"$tmp/err2"); st=$?
[ "$st" = 0 ] || fail "prlimit: status $st: $(cat "$tmp/err2")"
[ "$out" = "$want" ] || fail "prlimit: output '$out' under record: $(cat "$tmp/err2")"
grep -q "RLIMIT_AS (ulimit -v) is 512 MiB: the recording region takes an eighth of it, so the session holds [0-9]* events, not 67108864; events past that are dropped and counted" "$tmp/err2" ||
  fail "prlimit: no note of the smaller session: $(cat "$tmp/err2")"
grep -q "as: 2,000 events recorded, 0 dropped" "$tmp/err2" || fail "prlimit: zones: $(cat "$tmp/err2")"
echo "record_limits: prlimit --as=512M wrapper: the program as untraced, its 1000 zones kept"

# 3. a program that uses up the address space it allowed itself: it runs as untraced, and the stop
# that finds no memory left names the limit (0.4 said "out of memory", and the recording's loss
# was blamed on nothing)
out=$("$loupe" record --no-sample -o "$tmp/log3" -- "$tmp/as" all 2>"$tmp/err3"); st=$?
[ "$st" = 0 ] && [ "$out" = "malloc'd the rest" ] || fail "all: status $st, output '$out': $(cat "$tmp/err3")"
line=$(grep "writing the trace failed" "$tmp/err3")
case "$line" in
  "loupe record: $tmp/as exited with status 0, but writing the trace failed: "*"; this process's RLIMIT_AS (ulimit -v) is 512.0 MiB, which the program's memory and the stop's share; the recording is lost: the program used the address space its RLIMIT_AS allows, and the stop found none left to write the trace") ;;
  *) fail "all: the stop's failure does not name RLIMIT_AS: $(cat "$tmp/err3")" ;;
esac
echo "record_limits: a program that uses up its own RLIMIT_AS: status 0, and the lost recording's cause named"
exit 0
