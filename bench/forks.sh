#!/usr/bin/env bash
# bench/forks.sh BUILD_DIR [N [RUNS]]: N short processes (`seq N | xargs -P2 -n1 /bin/true`
# under sh) untraced, under `loupe record --no-sample` and under `loupe record` (sampling on),
# alternated RUNS times (default 3). Prints the CPU time of the whole process tree (user + sys
# of every waited-for descendant: getrusage(RUSAGE_CHILDREN), as bash's `times` reports it)
# per process and the ratio to the untraced run, each the median of the RUNS. CPU time, not
# wall time: a shared machine moves wall time far more. Figures: docs/performance.md.
set -euo pipefail
B=$(cd "${1:?usage: bench/forks.sh BUILD_DIR [N [RUNS]]}" && pwd)
N=${2:-300}
RUNS=${3:-3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
# The children's CPU seconds (user + sys) of one command, from bash's `times` (its second line:
# the children's user and system time, e.g. "0m0.071s 0m0.012s").
cpu() {
  bash -c '"$@" >/dev/null 2>&1; times' _ "$@" | sed -n 2p |
    awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]);
           n += a[1] * 60 + a[2] } printf "%.3f\n", n }'
}
work="seq $N | xargs -P2 -n1 /bin/true"
declare -a plain nosample sample
for r in $(seq "$RUNS"); do
  plain+=("$(cpu sh -c "$work")")
  rm -rf "$T/log"
  nosample+=("$(cpu "$B/loupe" record -q --no-sample -o "$T/log" -- sh -c "$work")")
  rm -rf "$T/log"
  sample+=("$(cpu "$B/loupe" record -q -o "$T/log" -- sh -c "$work")")
done
median() { printf '%s\n' "$@" | sort -g | sed -n "$(( ($# + 1) / 2 ))p"; }
p=$(median "${plain[@]}")
row() { # label, runs...
  local label=$1; shift
  local m; m=$(median "$@")
  awk -v l="$label" -v m="$m" -v p="$p" -v n="$N" -v all="$*" 'BEGIN {
    printf "%-28s %7.2f ms CPU per process  %6.1fx untraced  (runs, s: %s)\n", l, m * 1000 / n,
      (p > 0 ? m / p : 0), all }'
}
echo "forks: $N processes (sh -c 'seq $N | xargs -P2 -n1 /bin/true'), median of $RUNS"
row "untraced" "${plain[@]}"
row "loupe record --no-sample" "${nosample[@]}"
row "loupe record" "${sample[@]}"
