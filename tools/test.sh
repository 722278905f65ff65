#!/usr/bin/env bash
# tools/test.sh: the whole test suite. Installs what is missing, then builds and runs the CTest
# suite three times: a normal build (with -Werror), an ASan+UBSan build, and a TSan build that
# runs the threaded tests (test names containing "thread", "session", "record" or "server").
# Usage: tools/test.sh [--quick]   (--quick: the normal build only)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/tools/setup.sh"
jobs=$(nproc)
run() { # name, ctest filter, cmake args...
  local name=$1 filter=$2; shift 2
  local dir="$here/build-test/$name"
  echo "== $name: configure and build ($dir) =="
  cmake -S "$here" -B "$dir" -DLOUPE_WERROR=ON -DLOUPE_BUILD_BENCH=OFF "$@" >/dev/null
  cmake --build "$dir" -j"$jobs" >/dev/null
  echo "== $name: ctest =="
  (cd "$dir" && ctest --output-on-failure -j"$jobs" ${filter:+-R "$filter"})
}
run normal "" -DCMAKE_BUILD_TYPE=RelWithDebInfo
if [ "${1:-}" != "--quick" ]; then
  run asan-ubsan "" -DCMAKE_BUILD_TYPE=Debug -DLOUPE_SANITIZE=address,undefined
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
    run tsan "thread|session|record|server" -DCMAKE_BUILD_TYPE=Debug -DLOUPE_SANITIZE=thread
fi
echo "== all test builds passed =="
