#!/usr/bin/env bash
# tools/test.sh: the whole test suite. Installs what is missing, then runs every stage and reports
# each, also after one failed (the exit status is non-zero when any stage failed):
#   format   clang-format --dry-run -Werror over the tracked C/C++/CUDA sources
#   normal   RelWithDebInfo with -Werror: the whole CTest suite
#   minimal  -DLOUPE_WITH_SERVER=OFF -DLOUPE_WITH_GPU=OFF (no libmicrohttpd, no GPU): its tests
#   asan-ubsan  Debug with ASan+UBSan: the whole suite
#   tsan     Debug with TSan: the threaded tests (`ctest -L threads`, labels in tests/CMakeLists.txt)
# Every stage's build lives in build-test/<stage>; the xprof_validate venv is one for all of them
# (build-test/.venv-xprof, made once, see tests/xprof_validate.sh).
# Usage: tools/test.sh [--quick]   (--quick: the format and normal stages only)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/tools/setup.sh" || { echo "tools/test.sh: tools/setup.sh failed" >&2; exit 1; }
jobs=$(nproc)
mkdir -p "$here/build-test"
export LOUPE_XPROF_VENV=${LOUPE_XPROF_VENV:-$here/build-test/.venv-xprof}
summary=()
failed=0

# record NAME RESULT PASSED FAILED SKIPPED SECONDS
record() {
  summary+=("$(printf '%-11s %-7s %6s %6s %7s %7ss' "$@")")
  [ "$2" = passed ] || failed=1
}

stage_format() {
  local t0=$SECONDS files
  echo "== format: clang-format --dry-run -Werror =="
  mapfile -t files < <(git -C "$here" ls-files '*.c' '*.h' '*.cpp' '*.cu' '*.cuh')
  local bad=0 ok=0 f
  for f in "${files[@]}"; do
    if clang-format --dry-run -Werror "$here/$f" >/dev/null 2>&1; then
      ok=$((ok + 1))
    else
      echo "format: $f is not clang-formatted (clang-format -i $f)"
      bad=$((bad + 1))
    fi
  done
  record format "$([ $bad = 0 ] && echo passed || echo FAILED)" "$ok" "$bad" 0 $((SECONDS - t0))
}

# stage NAME CTEST-FILTER-ARGS(one word, or "") CMAKE-ARGS...
stage() {
  local name=$1 filter=$2; shift 2
  local dir="$here/build-test/$name" t0=$SECONDS log
  log="$dir.ctest.log"
  echo "== $name: configure and build ($dir) =="
  if ! cmake -S "$here" -B "$dir" -DLOUPE_WERROR=ON -DLOUPE_BUILD_BENCH=OFF "$@" >"$dir.build.log" 2>&1 ||
     ! cmake --build "$dir" -j"$jobs" >>"$dir.build.log" 2>&1; then
    tail -40 "$dir.build.log"
    echo "== $name: build FAILED (log: $dir.build.log) =="
    record "$name" FAILED - - - $((SECONDS - t0))
    return
  fi
  echo "== $name: ctest =="
  local rc=0
  # shellcheck disable=SC2086 # the filter is one option pair or nothing
  (cd "$dir" && ctest --output-on-failure -j"$jobs" $filter) 2>&1 | tee "$log" || rc=$?
  local total nfail nskip
  total=$(sed -n 's/.*tests passed, [0-9]* tests\{0,1\} failed out of \([0-9]*\).*/\1/p' "$log")
  nfail=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of.*/\1/p' "$log")
  nskip=$(grep -c '(Skipped)$' "$log")
  total=${total:-0}
  nfail=${nfail:-0}
  if [ "$total" = 0 ]; then
    rc=1 # no tests ran: a stage that tests nothing has not passed
  fi
  record "$name" "$([ $rc = 0 ] && echo passed || echo FAILED)" $((total - nfail - nskip)) \
    "$nfail" "$nskip" $((SECONDS - t0))
}

stage_format
stage normal "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOUPE_BUILD_BENCH=ON # tools/main.sh builds bench/ too
if [ "${1:-}" != "--quick" ]; then
  stage minimal "" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLOUPE_WITH_SERVER=OFF -DLOUPE_WITH_GPU=OFF
  stage asan-ubsan "" -DCMAKE_BUILD_TYPE=Debug -DLOUPE_SANITIZE=address,undefined
  # die_after_fork=0: a session started in a fork child of a threaded process starts loupe's
  # keeper thread there, which TSan refuses by default ("starting new threads after
  # multi-threaded fork is not supported"); the child's locks were all taken across the fork.
  TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 die_after_fork=0" \
    stage tsan "-L threads" -DCMAKE_BUILD_TYPE=Debug -DLOUPE_SANITIZE=thread
fi

echo
echo "== summary =="
printf '%-11s %-7s %6s %6s %7s %8s\n' stage result passed failed skipped time
for line in "${summary[@]}"; do
  echo "$line"
done
if [ $failed != 0 ]; then
  echo "== some stages FAILED =="
  exit 1
fi
echo "== all stages passed =="
