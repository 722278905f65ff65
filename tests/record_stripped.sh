#!/usr/bin/env bash
# record_stripped.sh: the samples of a function without a symbol (a stripped program) are named
# by the function that holds them, <module>+0x<start of its .eh_frame FDE>, in one row of
# `loupe summary`, in fp and in dwarf mode. The program's hot function is written in assembly
# with two CFI rows (a push in its middle), so that naming by the CFI row (dwarf_frame_info's
# range) gives two rows where there is one function. Skipped (77) where perf events are not
# allowed. Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
name=record_stripped
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

if [ "$(uname -m)" != x86_64 ]; then
  echo "record_stripped: skipped: the hot function is x86-64 assembly"
  exit 77
fi
cat >"$tmp/hot.c" <<'EOF'
#include <stdlib.h>
#include <time.h>
void hot(long n);
/* two loops of n iterations: the first at the entry's CFA (rsp + 8), the second after a push
 * (rsp + 16): two rows of the one FDE */
__asm__(".text\n"
        ".globl hot\n"
        ".type hot, @function\n"
        "hot:\n"
        ".cfi_startproc\n"
        "movq %rdi, %rax\n"
        "1: subq $1, %rax\n"
        "jnz 1b\n"
        "pushq %rbx\n"
        ".cfi_adjust_cfa_offset 8\n"
        ".cfi_offset %rbx, -16\n"
        "movq %rdi, %rbx\n"
        "2: subq $1, %rbx\n"
        "jnz 2b\n"
        "popq %rbx\n"
        ".cfi_adjust_cfa_offset -8\n"
        ".cfi_restore %rbx\n"
        "ret\n"
        ".cfi_endproc\n"
        ".size hot, .-hot\n");
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    double until = cpu_s() + (argc > 1 ? atof(argv[1]) : 0.3);
    while (cpu_s() < until) {
        hot(1000000);
    }
    return 0;
}
EOF
gcc -O1 -fno-omit-frame-pointer "$tmp/hot.c" -o "$tmp/hot_full"
# hot's start and end, from the unstripped copy (a PIE: the file's address is the module offset)
read -r start size < <(nm -S "$tmp/hot_full" | awk '$4 == "hot" { print $1, $2 }')
[ -n "$start" ] || fail "nm: no hot in $(nm -S "$tmp/hot_full")"
lo=$((16#$start))
hi=$((lo + 16#$size))
cp "$tmp/hot_full" "$tmp/hot_stripped"
strip "$tmp/hot_stripped"
nm "$tmp/hot_stripped" 2>&1 | grep -q "no symbols" || fail "strip left symbols"
want=$(printf 'hot_stripped+0x%x' "$lo")

for mode in fp dwarf; do
  set +e
  "$loupe" record -q -o "$tmp/log-$mode" --print-run-dir "$tmp/run-$mode" --sample-stacks "$mode" \
    -- "$tmp/hot_stripped" 0.3 >/dev/null 2>"$tmp/err"; st=$?
  set -e
  [ "$st" = 0 ] || fail "$mode: exit $st ($(cat "$tmp/err"))"
  if grep -q "CPU sampling is unavailable" "$tmp/err"; then
    echo "record_stripped: skipped: $(cat "$tmp/err")"
    exit 77
  fi
  "$loupe" summary "$(cat "$tmp/run-$mode")" >"$tmp/sum" 2>&1 || fail "summary: $(cat "$tmp/sum")"
  # every row of the hot function's range: exactly one, named by its start
  rows=$(awk '$5 ~ /^hot_stripped\+0x/ { print $5 }' "$tmp/sum" | while read -r f; do
    a=$((16#${f#hot_stripped+0x}))
    if [ "$a" -ge "$lo" ] && [ "$a" -lt "$hi" ]; then echo "$f"; fi
  done)
  [ "$rows" = "$want" ] || fail "$mode: rows of hot [$lo, $hi): '$rows', want '$want': $(cat "$tmp/sum")"
  pct=$(awk -v w="$want" '$5 == w { sub("%", "", $3); print $3 }' "$tmp/sum")
  awk -v p="$pct" 'BEGIN { exit !(p >= 80) }' ||
    fail "$mode: $want holds $pct% of the samples, want >= 80: $(cat "$tmp/sum")"
  echo "record_stripped: $mode: one row, $want, ${pct}% of the samples"
done
echo "record_stripped: all checks passed"
