#!/usr/bin/env bash
# fdo_profile.sh: the sample profile for clang's -fprofile-sample-use (loupe/fdo.h), made of a
# recorded C++ program's CPU samples, read by the consumers: `loupe record --fdo-profile` and
# `loupe convert RUN -o F.afdo` write the same bytes; each function's total is its self samples
# in `loupe summary --json` (exact), the totals add up to the samples the report says it placed,
# and those plus the left-out ones to the trace's samples; the inlined helper sits at its call
# line's offset from the function's first line, its body on its own lines; main's call sites
# name the hot functions as call targets; llvm-profdata reads it (show, and a round trip through
# the extbinary format keeps every total); clang -fprofile-sample-use turns it into entry counts
# and branch weights with no warning. Built with g++ -g (gcc's DWARF: lexical blocks,
# namespaces) and, where installed, clang++ -gline-tables-only -fdebug-info-for-profiling
# (clang's: no .debug_aranges, discriminators; summary's inlined rows need the sampler to find
# the CU without them). Skipped (77) where perf events are not allowed.
# Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
name=fdo_profile
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cat >"$tmp/app.cc" <<'EOF'
#include <cstdint>
#include <cstdlib>
#include <ctime>
static volatile uint64_t sink;
static double cpu_s() {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
namespace work {
static inline uint64_t mix(uint64_t x) { // MIX_DECL
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 29;
    return x;
}
__attribute__((noinline)) uint64_t hot(uint64_t n) { // HOT_DECL
    uint64_t s = 0;
    for (uint64_t i = 0; i < n; i++) {
        s += mix(i + s); // HOT_CALL
    }
    return s;
}
__attribute__((noinline)) uint64_t cold(uint64_t n) {
    uint64_t s = 1;
    for (uint64_t i = 0; i < n; i++) {
        s = s * 31 + (s >> 7) + i;
    }
    return s;
}
} // namespace work
int main(int argc, char **argv) {
    double until = cpu_s() + (argc > 1 ? atof(argv[1]) : 0.4);
    while (cpu_s() < until) {
        sink = work::hot(3000000 + (sink & 1)); // sink: no call hoisted out of the loop
        sink = work::cold(1000000 + (sink & 1));
    }
    return 0;
}
EOF
line_of() { grep -n "// $1" "$tmp/app.cc" | cut -d: -f1; }
mix_decl=$(line_of MIX_DECL); hot_decl=$(line_of HOT_DECL); hot_call=$(line_of HOT_CALL)
call_off=$((hot_call - hot_decl))

have_clang=0
command -v clang++ >/dev/null && have_clang=1
have_profdata=0
command -v llvm-profdata >/dev/null && have_profdata=1

check() { # $1: label, $2...: the compiler command
  local label=$1; shift
  local d="$tmp/$label"
  mkdir -p "$d"
  "$@" "$tmp/app.cc" -o "$d/app" || fail "$label: cannot build"
  set +e
  "$loupe" record -q -o "$d/log" --print-run-dir "$d/run" --fdo-profile "$d/rec.afdo" -- \
    "$d/app" 0.4 >/dev/null 2>"$d/err"
  local st=$?
  set -e
  [ "$st" = 0 ] || fail "$label: record: exit $st ($(cat "$d/err"))"
  if grep -q "CPU sampling is unavailable" "$d/err"; then
    echo "$name: skipped: $(cat "$d/err")"
    exit 77
  fi
  [ -s "$d/rec.afdo" ] || fail "$label: record --fdo-profile wrote nothing: $(cat "$d/err")"
  local run
  run=$(cat "$d/run")
  "$loupe" convert "$run" -o "$d/conv.afdo" 2>"$d/conv" || fail "$label: convert: $(cat "$d/conv")"
  cmp "$d/rec.afdo" "$d/conv.afdo" || fail "$label: record --fdo-profile and convert differ"
  "$loupe" summary "$run" --json >"$d/sum.json" 2>"$d/sum.err" || fail "summary: $(cat "$d/sum.err")"
  python3 - "$d" "$label" "$call_off" "$mix_decl" <<'EOF' || fail "$label: the profile is wrong (above)"
import json, re, sys
d, label, call_off, mix_decl = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
summ = json.load(open(f"{d}/sum.json"))
conv = open(f"{d}/conv").read()
m = re.search(r"(\d+) functions, (\d+) of (\d+) samples on its lines"
              r"(?:; left out: (\d+) on line 0, (\d+) without line tables)?(?:; (\d+) in other modules)?", conv)
assert m, f"no report line: {conv!r}"
nfn, used, samples = int(m.group(1)), int(m.group(2)), int(m.group(3))
left = sum(int(g or 0) for g in m.groups()[3:])
bad = []
if samples != summ["samples"]:
    bad.append(f"report says {samples} samples, summary {summ['samples']}")
if used + left != samples:
    bad.append(f"{used} used + {left} left out != {samples}")
# parse: top-level records and their nested lines
funcs, cur, stack = {}, None, []
for raw in open(f"{d}/conv.afdo"):
    line = raw.rstrip("\n")
    ind = len(line) - len(line.lstrip(" "))
    body = line.strip()
    if ind == 0:
        name, total, head = body.rsplit(":", 2)
        cur = {"total": int(total), "head": int(head), "lines": [], "targets": {}, "inl": []}
        funcs[name] = cur
        stack = [(0, cur)]
        continue
    while stack and stack[-1][0] >= ind:
        stack.pop()
    node = stack[-1][1]
    site, rest = body.split(":", 1)
    rest = rest.strip()
    m2 = re.match(r"^(\S+):(\d+)$", rest)
    if m2 and not rest.split(":")[0].isdigit():  # an inlined callee
        child = {"name": m2.group(1), "site": site, "total": int(m2.group(2)), "lines": [],
                 "targets": {}, "inl": []}
        node["inl"].append(child)
        stack.append((ind, child))
        continue
    parts = rest.split()
    node["lines"].append((site, int(parts[0])))
    for t in parts[1:]:
        tn, tc = t.rsplit(":", 1)
        node["targets"][tn] = node["targets"].get(tn, 0) + int(tc)
if len(funcs) != nfn:
    bad.append(f"{len(funcs)} functions in the file, the report says {nfn}")
tops = sum(f["total"] for f in funcs.values())
if tops != used:
    bad.append(f"the functions' totals add up to {tops}, the report placed {used}")
def node_sum(n):
    return sum(c for _, c in n["lines"]) + sum(node_sum(c) for c in n["inl"])
for fname, f in funcs.items():
    if node_sum(f) != f["total"]:
        bad.append(f"{fname}: total {f['total']} but its lines hold {node_sum(f)}")
self_of = {h["function"]: h["self_samples"] for h in summ["hot_functions"]}
hot, cold = funcs.get("_ZN4work3hotEm"), funcs.get("_ZN4work4coldEm")
if hot is None or cold is None:
    bad.append(f"work::hot or work::cold missing: {sorted(funcs)}")
else:
    # a function's total holds its inlined calls' samples, which summary counts as theirs
    mix_self = self_of.get("work::mix(unsigned long)", 0) + self_of.get("mix", 0)  # gcc: "mix"
    if mix_self == 0:  # clang writes no .debug_aranges: the sampler must find the CU itself
        bad.append(f"loupe summary has no inlined mix row: {sorted(self_of)}")
    for fn, f, want in (("work::hot", hot, self_of.get("work::hot(unsigned long)", 0) + mix_self),
                        ("work::cold", cold, self_of.get("work::cold(unsigned long)"))):
        if f["total"] != want:
            bad.append(f"{fn}: profile total {f['total']}, summary self {want} (hot: with mix)")
    if hot["total"] < 50:
        bad.append(f"work::hot has only {hot['total']} samples")
    # gcc gives a static function no DW_AT_linkage_name: its inlined copies go by DW_AT_name
    mix_name = "mix" if label == "gcc" else "_ZN4workL3mixEm"
    mixes = [c for c in hot["inl"] if c["name"] == mix_name]
    if not mixes:
        bad.append(f"no inlined {mix_name} in work::hot: {[c['name'] for c in hot['inl']]}")
    else:
        sites = {c["site"].split(".")[0] for c in mixes}
        if sites != {str(call_off)}:
            bad.append(f"mix inlined at offsets {sites}, its call is at {call_off}")
        offs = {int(s.split(".")[0]) for c in mixes for s, _ in c["lines"]}
        if not offs or not offs <= {1, 2, 3, 4}:
            bad.append(f"mix's body lines at offsets {sorted(offs)}, not within its 4 lines")
        if sum(c["total"] for c in mixes) * 2 < hot["total"]:
            bad.append(f"mix holds {sum(c['total'] for c in mixes)} of hot's {hot['total']}")
    main = funcs.get("main")
    t = main["targets"] if main else {}
    if not (0 < t.get("_ZN4work3hotEm", 0) <= hot["total"]):
        bad.append(f"main's call targets {t} do not name work::hot (at most its {hot['total']})")
if bad:
    print("\n".join(bad))
    print(open(f"{d}/conv.afdo").read())
    sys.exit(1)
print(f"{label}: {nfn} functions, {used} of {samples} samples; hot {hot['total']}, cold {cold['total']}")
EOF
  if [ "$have_profdata" = 1 ]; then
    llvm-profdata show --sample --all-functions "$d/conv.afdo" >"$d/show" 2>&1 ||
      fail "$label: llvm-profdata show: $(cat "$d/show")"
    local total
    total=$(sed -n 's/^_ZN4work3hotEm:\([0-9]*\):.*/\1/p' "$d/conv.afdo")
    grep -q "^Function: _ZN4work3hotEm: $total, " "$d/show" ||
      fail "$label: llvm-profdata show does not give work::hot $total samples: $(head -5 "$d/show")"
    llvm-profdata merge --sample --extbinary "$d/conv.afdo" -o "$d/x.extbin" &&
      llvm-profdata merge --sample --text "$d/x.extbin" -o "$d/back.txt" ||
      fail "$label: llvm-profdata merge round trip failed"
    [ "$(grep -v '^ ' "$d/back.txt" | sort)" = "$(grep -v '^ ' "$d/conv.afdo" | sort)" ] ||
      fail "$label: the extbinary round trip changed the functions' totals"
  fi
  if [ "$have_clang" = 1 ]; then
    clang++ -O2 -gline-tables-only -fdebug-info-for-profiling -fprofile-sample-use="$d/conv.afdo" \
      -Werror -S -emit-llvm "$tmp/app.cc" -o "$d/app.ll" 2>"$d/use.err" ||
      fail "$label: clang -fprofile-sample-use: $(cat "$d/use.err")"
    grep -Eq '^define .*@_ZN4work3hotEm\(.*!prof ' "$d/app.ll" ||
      fail "$label: clang gave work::hot no profile: $(grep '^define' "$d/app.ll")"
    grep -q '"branch_weights"' "$d/app.ll" || fail "$label: clang made no branch weights"
  fi
}

check gcc g++ -O2 -g -fno-omit-frame-pointer
# the program rebuilt after the run (another build-id at the path the run sampled): the trace
# knows the run's (loupe_module_build_ids), and a profile of it is refused, not written from the
# new binary's lines (0.4 wrote one without a word)
run=$(cat "$tmp/gcc/run")
ran=$(readelf -n "$tmp/gcc/app" | sed -n 's/.*Build ID: //p')
g++ -O1 -g -fno-omit-frame-pointer "$tmp/app.cc" -o "$tmp/gcc/app" -Wl,--build-id=0x0123456789abcdef ||
  fail "rebuilt: cannot build"
now=$(readelf -n "$tmp/gcc/app" | sed -n 's/.*Build ID: //p')
[ "$now" != "$ran" ] || fail "rebuilt: the same build-id ($now): the test cannot tell"
set +e
"$loupe" convert "$run" -o "$tmp/rebuilt.afdo" >"$tmp/rebuilt.out" 2>&1
st=$?
set -e
want="loupe convert: $tmp/rebuilt.afdo: Invalid argument: $tmp/gcc/app is not the file the run sampled: its build-id is $now, the run's was $ran (rebuilt since?), so the profile's lines would be another build's: record the program again"
[ "$st" = 1 ] && grep -qxF "$want" "$tmp/rebuilt.out" && [ ! -e "$tmp/rebuilt.afdo" ] ||
  fail "rebuilt: exit $st: $(cat "$tmp/rebuilt.out"), want 1 and '$want'"
echo "$name: a rebuilt program: refused, both build-ids said"
# a run that cannot make a profile (sh, built without DWARF, and too short for more than a
# sample or two) removes an earlier run's FILE and says so, and exits with the program's status:
# a build never takes the old one for this run's
echo stale >"$tmp/stale.afdo"
set +e
"$loupe" record -o "$tmp/stale-log" --fdo-profile "$tmp/stale.afdo" -- sh -c 'exit 3' \
  >/dev/null 2>"$tmp/stale.err"
st=$?
set -e
[ "$st" = 3 ] || fail "stale profile: exit $st, want the program's 3: $(cat "$tmp/stale.err")"
[ ! -e "$tmp/stale.afdo" ] || fail "stale profile: the earlier FILE is still there"
grep -qxF "loupe record: removed $tmp/stale.afdo, an earlier run's profile: this run wrote none" \
  "$tmp/stale.err" || fail "stale profile: $(cat "$tmp/stale.err")"
echo "$name: a run without a profile removes the earlier FILE, says so, exits 3 as its program"
if [ "$have_clang" = 1 ]; then
  check clang clang++ -O2 -gline-tables-only -fdebug-info-for-profiling -fno-omit-frame-pointer
else
  echo "$name: no clang++: the clang half is not run"
fi
echo "$name: all checks passed"
