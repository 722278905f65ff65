#!/usr/bin/env bash
# tools/main.sh: the main job. Installs what is missing, builds loupe, records the bundled
# real workload (examples/compress_workload: threads compressing and checksumming the files
# under /usr/share with zlib) with `loupe record`, prints the `loupe summary` table and the
# files written. Usage: tools/main.sh [LOG_DIR]   (default: ./loupe-log)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bash "$here/tools/setup.sh"
build="$here/build"
cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# Only what the main job runs: the CLI, the preload library (and libloupe.so, libloupe_server.so
# with them) and the workload; tools/test.sh builds everything, in build-test/.
cmake --build "$build" -j"$(nproc)" --target loupe_cli loupe_preload compress_workload >/dev/null
log_dir=${1:-"$PWD/loupe-log"}
echo "== loupe record: examples/compress_workload on /usr/share =="
# stdout is the program's; loupe writes the run directory's path to --print-run-dir's file.
last=$(mktemp)
"$build/loupe" record -o "$log_dir" --print-run-dir "$last" -- "$build/examples/compress_workload"
run_dir=$(cat "$last")
rm -f "$last"
echo
echo "== loupe summary $run_dir =="
"$build/loupe" summary "$run_dir" --top 15
echo
echo "== files written =="
ls -l "$run_dir"
