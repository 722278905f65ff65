#!/usr/bin/env bash
# pprof_go.sh: `loupe convert RUN -o cpu.pb.gz` of a recorded program, read by Go's own pprof
# (`go tool pprof`, Debian golang-go): -top names the same functions as `loupe summary`'s hot
# functions with the same self and total shares (within 0.01 point: pprof prints two decimals),
# -traces holds every sample once (its samples sum to loupe's count), the program's mapping is
# pprof's main binary with the build-id readelf reads, an inlined function is marked inline,
# -sample_index=off_cpu reads the off-CPU time, and -lines names the hot loop's line. Skipped
# (77) without `go` or where perf events are not allowed. Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
name=pprof_go
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v go >/dev/null || { echo "$name: skipped: no go (Debian golang-go) for go tool pprof"; exit 77; }
export GOCACHE="$tmp/gocache" GOPATH="$tmp/gopath" GOFLAGS=-mod=mod GOTOOLCHAIN=local
pprof() { go tool pprof -symbolize=none "$@" 2>"$tmp/pprof.err" || fail "go tool pprof $*: $(cat "$tmp/pprof.err")"; }

cat >"$tmp/hot.c" <<'EOF'
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
static volatile double sink;
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static inline __attribute__((always_inline)) double mixer(double x) {
    return x * 1.0000001 + 0.5; /* inlined into spin_a */
}
__attribute__((noinline)) void spin_a(long n) {
    double s = 0;
    for (long i = 0; i < n; i++) s = mixer(s); /* the hot line */
    sink = s;
}
__attribute__((noinline)) void spin_b(long n) {
    double s = 1;
    for (long i = 0; i < n; i++) s = s / 1.0000001 + 1.0;
    sink = s;
}
int main(int argc, char **argv) {
    double until = cpu_s() + (argc > 1 ? atof(argv[1]) : 0.4);
    while (cpu_s() < until) {
        spin_a(300000);
        spin_b(100000);
        usleep(200); /* off the CPU, waiting */
    }
    return 0;
}
EOF
gcc -O2 -g -fno-omit-frame-pointer "$tmp/hot.c" -o "$tmp/hot"
set +e
"$loupe" record -q -o "$tmp/log" --print-run-dir "$tmp/run" -- "$tmp/hot" 0.4 >/dev/null 2>"$tmp/err"
st=$?
set -e
[ "$st" = 0 ] || fail "record: exit $st ($(cat "$tmp/err"))"
if grep -q "CPU sampling is unavailable" "$tmp/err"; then
  echo "$name: skipped: $(cat "$tmp/err")"
  exit 77
fi
run=$(cat "$tmp/run")
"$loupe" convert "$run" -o "$tmp/cpu.pb.gz" 2>"$tmp/conv" || fail "convert: $(cat "$tmp/conv")"
"$loupe" summary "$run" --json >"$tmp/sum.json" 2>"$tmp/sum.err" || fail "summary: $(cat "$tmp/sum.err")"
pprof -top -nodecount=100000 -nodefraction=0 -edgefraction=0 "$tmp/cpu.pb.gz" >"$tmp/top"
pprof -traces "$tmp/cpu.pb.gz" >"$tmp/traces"
pprof -lines -top -nodecount=3 "$tmp/cpu.pb.gz" >"$tmp/lines"
pprof -sample_index=off_cpu -top "$tmp/cpu.pb.gz" >"$tmp/off"
pprof -sample_index=samples -top -nodecount=100000 -nodefraction=0 "$tmp/cpu.pb.gz" >"$tmp/top_n"

python3 - "$tmp" <<'EOF' || fail "pprof and loupe summary differ (above)"
import json, re, sys
tmp = sys.argv[1]
summ = json.load(open(f"{tmp}/sum.json"))
hot = summ["hot_functions"]
total = summ["samples"]
assert total > 100, f"only {total} samples"
def rows(path):
    out = {}
    for line in open(path):
        m = re.match(r"\s*([\d.]+)[a-zµ]*\s+([\d.]+)%\s+[\d.]+%\s+([\d.]+)[a-zµ]*\s+([\d.]+)%\s+(.*)$",
                     line)
        if m:
            name = re.sub(r" \(inline\)$", "", m.group(5).strip())
            out[name] = (float(m.group(1)), float(m.group(2)), float(m.group(3)), float(m.group(4)),
                         m.group(5).endswith("(inline)"))
    return out
top = rows(f"{tmp}/top_n")  # values in samples: exact counts
bad = []
for h in hot:
    r = top.get(h["function"])
    if r is None:
        bad.append(f"{h['function']}: not in pprof -top")
        continue
    if r[0] != h["self_samples"] or r[2] != h["total_samples"]:
        bad.append(f"{h['function']}: pprof self/total {r[0]}/{r[2]} samples, loupe {h['self_samples']}/{h['total_samples']}")
    if abs(r[1] - h["self_percent"]) > 0.01 or abs(r[3] - h["total_percent"]) > 0.01:
        bad.append(f"{h['function']}: pprof {r[1]}%/{r[3]}%, loupe {h['self_percent']:.2f}%/{h['total_percent']:.2f}%")
extra = set(top) - {h["function"] for h in hot}
if extra:
    bad.append(f"pprof has functions loupe does not: {sorted(extra)}")
cpu = rows(f"{tmp}/top")  # values in ns: the same shares
for h in hot[:10]:
    r = cpu.get(h["function"])
    if r is None or abs(r[1] - h["self_percent"]) > 0.01:
        bad.append(f"{h['function']}: cpu self {r and r[1]}%, loupe {h['self_percent']:.2f}%")
names = [h["function"] for h in hot[:10]]
if "spin_a" not in names or "spin_b" not in names:
    bad.append(f"spin_a and spin_b not in loupe's top 10: {names}")
if "mixer" in top and not top["mixer"][4]:
    bad.append("mixer is not marked (inline) by pprof")
# -traces: every sample once
traced = 0
period = summ["sample_period_ns"]
for line in open(f"{tmp}/traces"):
    m = re.match(r"\s+([\d.]+)(ns|us|ms|s)\s+\S", line)
    if m:
        traced += float(m.group(1)) * {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[m.group(2)]
if abs(traced / period - total) > 0.5 + total * 0.001:
    bad.append(f"-traces holds {traced / period:.1f} samples, loupe {total}")
head = open(f"{tmp}/top").read()
if not re.search(r"^File: hot$", head, re.M):
    bad.append("pprof's main binary is not hot: " + head.splitlines()[0])
lines = open(f"{tmp}/lines").read()
if not re.search(r"(spin_a|mixer) \S*hot\.c:1[45]\b", lines):
    bad.append("-lines does not name spin_a's loop (hot.c:14 or 15):\n" + lines)
off = open(f"{tmp}/off").read()
if "[off-CPU: waiting]" not in off:
    bad.append("-sample_index=off_cpu has no waiting time:\n" + off)
if bad:
    print("\n".join(bad))
    print(open(f"{tmp}/top_n").read())
    print(json.dumps(hot[:12], indent=1))
    sys.exit(1)
print(f"pprof_go: {len(hot)} functions, {total} samples agree (traces: {traced / period:.1f}); top: {names[:4]}")
EOF
bid=$(readelf -n "$tmp/hot" | sed -n 's/.*Build ID: *//p')
grep -q "^Build ID: $bid\$" "$tmp/top" || fail "pprof's build-id is not readelf's $bid: $(head -3 "$tmp/top")"
echo "$name: all checks passed"
