#!/usr/bin/env bash
# bench/fdo.sh BUILD_DIR [ROUNDS]: what a loupe sample profile buys clang, side by side in one
# run. zlib 1.2.13 (Debian bookworm's source package, fetched with apt-get source into a
# temporary directory) and its minigzip are built with clang -O2 -gline-tables-only
# -fdebug-info-for-profiling four ways:
#   base    no profile
#   loupe   -fprofile-sample-use= the profile `loupe record --fdo-profile` wrote of a training run
#   loupe+  the same with -fprofile-sample-accurate (functions without samples are cold)
#   pgo     instrumented PGO (-fprofile-instr-generate, the same training run, llvm-profdata
#           merge, -fprofile-instr-use): the upper bound
# Training input: the first 24 MiB of a tar of /usr/include, compressed at -6 and decompressed;
# measured input (a different one): the first 32 MiB of a tar of /usr/lib/python3.11, the same
# two steps. ROUNDS interleaved rounds (default 15), each build once per round in a rotating
# order; CPU time (user + sys, getrusage of the children). Prints each build's median and minimum
# and its ratio to base, and the share of PGO's gain the loupe profile recovers
# ((1 - loupe/base) / (1 - pgo/base), on the medians). Needs clang, llvm-profdata, apt-get with
# network access to deb.debian.org. Figures: docs/performance.md ("FDO").
set -euo pipefail
B=$(cd "${1:?build dir}" && pwd)
ROUNDS=${2:-15}
loupe=$B/loupe
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for tool in clang llvm-profdata apt-get python3; do
  command -v $tool >/dev/null || { echo "fdo.sh: needs $tool" >&2; exit 1; }
done

echo "== zlib from Debian's source package =="
mkdir -p "$T/apt/lists/partial"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main" >"$T/src.list"
aptsrc=(-o Dir::Etc::SourceList="$T/src.list" -o Dir::Etc::SourceParts=/dev/null
        -o Dir::State::Lists="$T/apt/lists" -qq)
apt-get "${aptsrc[@]}" update >/dev/null 2>&1
(cd "$T" && apt-get "${aptsrc[@]}" source --download-only zlib >/dev/null 2>&1)
tar -C "$T" -xjf "$T"/zlib_*.orig.tar.bz2
Z=$(echo "$T"/zlib-*/)
ls "$Z/deflate.c" >/dev/null

echo "== inputs =="
set +o pipefail # head's early exit stops tar with SIGPIPE
tar -C /usr -cf - include 2>/dev/null | head -c $((24 << 20)) >"$T/train.tar"
tar -C /usr/lib -cf - python3.11 2>/dev/null | head -c $((32 << 20)) >"$T/measure.tar"
set -o pipefail
# workload: compress at -6 and decompress what was compressed
cat >"$T/work.sh" <<'EOF'
#!/bin/sh
"$1" -6 <"$2" >"$2.gz" && "$1" -d <"$2.gz" >/dev/null
EOF
chmod +x "$T/work.sh"

SRCS="adler32 crc32 deflate infback inffast inflate inftrees trees zutil compress uncompr gzclose gzlib gzread gzwrite"
build() { # name, extra flags...
  local name=$1; shift
  local out="$T/$name"
  mkdir -p "$out"
  for s in $SRCS; do
    clang -O2 -gline-tables-only -fdebug-info-for-profiling -D_LARGEFILE64_SOURCE=1 \
      -DHAVE_HIDDEN "$@" -I"$Z" -c "$Z/$s.c" -o "$out/$s.o"
  done
  clang -O2 -gline-tables-only -fdebug-info-for-profiling "$@" -I"$Z" "$Z/test/minigzip.c" \
    "$out"/*.o -o "$out/minigzip"
}
echo "== builds =="
build base
"$loupe" record -q -o "$T/log" --sample-hz 9999 --fdo-profile "$T/zlib.afdo" -- \
  "$T/work.sh" "$T/base/minigzip" "$T/train.tar"
# the profile covers minigzip (named: the busiest process could be the shell on a short run);
# the samples of both its runs (compress, decompress) go into it
run=$(ls -d "$T"/log/plugins/profile/*/)
"$loupe" convert "$run" -o "$T/zlib.afdo" --module "$T/base/minigzip"
build loupe -fprofile-sample-use="$T/zlib.afdo"
build loupeacc -fprofile-sample-use="$T/zlib.afdo" -fprofile-sample-accurate
build gen -fprofile-instr-generate
LLVM_PROFILE_FILE="$T/pgo-%p.profraw" "$T/work.sh" "$T/gen/minigzip" "$T/train.tar"
llvm-profdata merge -o "$T/pgo.profdata" "$T"/pgo-*.profraw
build pgo -fprofile-instr-use="$T/pgo.profdata"
for b in base loupe loupeacc pgo; do
  "$T/work.sh" "$T/$b/minigzip" "$T/measure.tar" # each build compresses and round-trips
  cmp <("$T/$b/minigzip" -d <"$T/measure.tar.gz") "$T/measure.tar"
done

echo "== $ROUNDS interleaved rounds on the measured input (load $(cut -d' ' -f1 /proc/loadavg)) =="
python3 - "$T" "$ROUNDS" <<'EOF'
import os, resource, statistics, subprocess, sys
T, rounds = sys.argv[1], int(sys.argv[2])
builds = ["base", "loupe", "loupeacc", "pgo"]
label = {"base": "base", "loupe": "loupe profile", "loupeacc": "loupe, accurate", "pgo": "instr PGO"}
times = {b: [] for b in builds}
def cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
for i in range(rounds):
    order = builds[i % 4:] + builds[:i % 4]
    for b in order:
        t0 = cpu()
        subprocess.run([f"{T}/work.sh", f"{T}/{b}/minigzip", f"{T}/measure.tar"], check=True)
        times[b].append(cpu() - t0)
med = {b: statistics.median(times[b]) for b in builds}
print(f"{'build':<18}{'median s':>10}{'min s':>9}{'ratio':>8}{'min ratio':>11}")
for b in builds:
    print(f"{label[b]:<18}{med[b]:>10.3f}{min(times[b]):>9.3f}{med[b] / med['base']:>8.3f}"
          f"{min(times[b]) / min(times['base']):>11.3f}")
gain = 1 - med["pgo"] / med["base"]
for b in ("loupe", "loupeacc"):
    mine = 1 - med[b] / med["base"]
    share = f"{mine / gain:.2f}" if gain > 0.005 else "n/a (PGO gained under 0.5%)"
    print(f"{label[b]}: {100 * mine:.1f}% faster than base; PGO {100 * gain:.1f}%; share of PGO's gain {share}")
EOF
echo "load after: $(cut -d' ' -f1 /proc/loadavg)"
