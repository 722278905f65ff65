#!/usr/bin/env bash
# bench/run.sh: the one command for loupe's benchmarks (docs/performance.md explains the
# figures). Builds loupe_bench in Release under build-bench/ (incrementally), makes sure an LTTng
# session daemon runs for the LTTng-UST peer (starts one when lttng-tools is installed and none
# runs, and stops it again at the end), runs loupe_bench and prints its table.
#
# Usage: bench/run.sh [--json FILE] [--reps N] [--quick] [--no-peers] [--no-export] [--keep]
#   (the arguments go to loupe_bench; --help lists them)
# Environment: LOUPE_BENCH_BUILD (default <repo>/build-bench), CC.
# Needs (Debian 12): build-essential cmake pkg-config zlib1g-dev libjansson-dev libelf-dev, and for
# the peers liblttng-ust-dev lttng-tools uftrace (without them their rows print n/a and why).
# It installs nothing. The run takes about half a minute on a 2-core machine.
set -euo pipefail

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${LOUPE_BENCH_BUILD:-$src/build-bench}

for a in "$@"; do
  if [ "$a" = "--help" ] || [ "$a" = "-h" ]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}"
    echo
    echo "loupe_bench options:"
    if [ -x "$build/bench/loupe_bench" ]; then "$build/bench/loupe_bench" --help; fi
    exit 0
  fi
done

if [ ! -f "$build/CMakeCache.txt" ] ||
   ! grep -q '^CMAKE_BUILD_TYPE:STRING=Release$' "$build/CMakeCache.txt"; then
  echo "bench/run.sh: configuring a Release build in $build" >&2
  cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOUPE_BUILD_BENCH=ON \
    -DLOUPE_BUILD_TESTS=OFF -DLOUPE_BUILD_EXAMPLES=OFF >/dev/null
fi
echo "bench/run.sh: building loupe_bench" >&2
cmake --build "$build" -j"$(nproc)" --target loupe_bench >/dev/null

# LTTng-UST's recording case needs a session daemon running before loupe_bench starts (the
# tracepoint provider registers with it when the process loads).
sessiond_pid=""
stop_sessiond() {
  if [ -n "$sessiond_pid" ]; then
    kill "$sessiond_pid" 2>/dev/null || true
    for _ in $(seq 50); do # it exits within a second or two; the next run must not meet it
      kill -0 "$sessiond_pid" 2>/dev/null || break
      sleep 0.1
    done
  fi
}
trap stop_sessiond EXIT
if command -v lttng >/dev/null 2>&1 && command -v lttng-sessiond >/dev/null 2>&1; then
  if ! lttng list >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ]; then
      pidfile=/var/run/lttng/lttng-sessiond.pid
    else
      pidfile=${LTTNG_HOME:-$HOME}/.lttng/lttng-sessiond.pid
    fi
    if lttng-sessiond --daemonize --no-kernel >/dev/null 2>&1 && [ -f "$pidfile" ]; then
      sessiond_pid=$(cat "$pidfile")
      echo "bench/run.sh: started lttng-sessiond (pid $sessiond_pid) for the LTTng-UST case" >&2
    else
      echo "bench/run.sh: could not start lttng-sessiond: LTTng-UST recording will be n/a" >&2
    fi
  fi
else
  echo "bench/run.sh: lttng-tools is not installed: LTTng-UST recording will be n/a" >&2
fi

"$build/bench/loupe_bench" "$@"
