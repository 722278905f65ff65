#!/usr/bin/env bash
# bench/mpi_scale.sh BUILD_DIR: MPI at scale (docs/scale.md), in one run:
#   1. recording overhead per zone under mpirun: tests/mpi/mpi_app's scale mode (ZONES empty
#      LOUPE_ZONEs per rank, timed inside the program in thread CPU time) with 1 rank and with 4,
#      1 M zones each;
#      prints ns per zone per rank and the 4-rank mean over the 1-rank figure;
#      then 1 rank against a rank per core (as many ranks as CPUs), 3 rounds alternated;
#   2. the merged read of the 4-rank run directory (one model, src/model/merge.c) against
#      reading its 4 files one by one (bench/merge_read.c), best of 3 in CPU seconds (a shared
#      machine moves wall time far more); the bound is <= 2x;
#   3. what a rank writes: bytes per file and per zone, and per second of recording;
#   4. a 16-rank run of mpi_app's default mode (small traces) end to end: 16 rank files, their
#      merged read (processes, flows).
# BUILD_DIR: a loupe build with libloupe_mpi.so (any type; Release for figures), e.g. build-dev.
# Needs mpicc and mpirun (Debian: openmpi-bin libopenmpi-dev, tools/setup.sh). Installs nothing.
set -euo pipefail
B=$(cd "${1:?usage: bench/mpi_scale.sh BUILD_DIR}" && pwd)
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
zones=${LOUPE_BENCH_MPI_ZONES:-1000000}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
[ -e "$B/libloupe_mpi.so" ] || { echo "mpi_scale: $B has no libloupe_mpi.so" >&2; exit 1; }
# The programs, -O2 against this build's libloupe (the build's own when it has them).
app=$B/tests/mpi_app
if [ ! -x "$app" ]; then
  app=$T/mpi_app
  mpicc -std=c11 -O2 -D_GNU_SOURCE -I"$src/include" "$src/tests/mpi/mpi_app.c" -L"$B" -lloupe \
    -Wl,-rpath,"$B" -o "$app"
fi
merge=$B/bench/loupe_bench_merge
if [ ! -x "$merge" ]; then
  merge=$T/merge_read
  cc -std=c11 -O2 -D_GNU_SOURCE -I"$src/include" "$src/bench/merge_read.c" -L"$B" -lloupe \
    -Wl,-rpath,"$B" -o "$merge"
fi
# Containers: root, fewer cores than ranks, shared memory without CMA (as tests/mpi_record.sh).
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMPI_MCA_btl=self,vader
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
mpi() { # NP LOG ARGS...: mpirun NP ranks of loupe record -- mpi_app ARGS; output in $T/out
  local np=$1 log=$2
  shift 2
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$B/loupe" record -q \
    --buffer-events $((2 * zones + 100000)) -o "$log" -- "$app" "$@" >"$T/out" 2>&1 ||
    { cat "$T/out"; exit 1; }
}
per_zone() { awk '/ns per zone/ { s += $(NF - 3); n++ } END { printf "%.2f", s / n }' "$T/out"; }
echo "mpi_scale: $(nproc) cores, $zones zones per rank, build $B"

mpi 1 "$T/s1" "$zones"
one=$(per_zone)
mpi 4 "$T/s4" "$zones"
grep "ns per zone" "$T/out" | sed "s/^/  /"
four=$(per_zone)
echo "overhead: 1 rank $one ns/zone, 4 ranks $four ns/zone (mean), ratio" \
  "$(awk -v a="$four" -v b="$one" 'BEGIN { printf "%.2f", a / b }')" \
  "(ranks per core: $(awk -v c="$(nproc)" 'BEGIN { printf "%.1f", 4 / c }'))"

run=$(ls -d "$T"/s4/plugins/profile/*)
"$merge" "$run" 3

# a rank per core (as many ranks as CPUs, each alone on its core), against 1 rank: 3 rounds
# alternated, the median of each; the row that says whether mpirun itself adds to a zone's cost
c=$(nproc)
ones=() cores=()
for r in 1 2 3; do
  mpi 1 "$T/p1.$r" "$zones"
  ones+=("$(per_zone)")
  mpi "$c" "$T/pc.$r" "$zones"
  cores+=("$(per_zone)")
done
med() { printf '%s\n' "$@" | sort -g | sed -n 2p; }
m1=$(med "${ones[@]}") mc=$(med "${cores[@]}")
echo "a rank per core: 1 rank ${ones[*]} ns/zone, $c ranks ${cores[*]} ns/zone; medians $m1 and" \
  "$mc, ratio $(awk -v a="$mc" -v b="$m1" 'BEGIN { printf "%.2f", a / b }')"

# bytes: per rank file and per zone; per second at the rate each rank recorded at
ns=$four
for f in "$run"/rank0000.*; do
  b=$(stat -c %s "$f")
  awk -v f="$(basename "$f")" -v b="$b" -v z="$zones" -v ns="$ns" 'BEGIN {
    printf "bytes: %s: %d B, %.1f B/zone, %.0f MB/s at %s ns/zone\n", f, b, b / z,
      b / z * 1e9 / ns / 1e6, ns }'
done

# 16 ranks, small traces: files, then one merged model
mpi 16 "$T/s16"
run16=$(ls -d "$T"/s16/plugins/profile/*)
echo "16 ranks: $(ls "$run16" | wc -l) files, $(du -sb "$run16" | cut -f1) B in all"
"$B/loupe" summary "$run16" --top 3 | sed -n '1,6p' | sed 's/^/  /'
"$merge" "$run16" 3
