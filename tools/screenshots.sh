#!/usr/bin/env bash
# tools/screenshots.sh: regenerates the README's pictures of XProf on loupe's trace,
# docs/img/xprof-trace-viewer.png and docs/img/xprof-overview.png.
#
# What it does: installs Debian's chromium when it is missing (apt-get; sudo when not root),
# builds loupe (-j2) into BUILD (default ./build, as tools/main.sh), records tools/main.sh's
# workload (`loupe record` on examples/compress_workload, the README's), starts XProf's server
# (pip xprof, from the shared venv of tests/xprof_validate.sh, which it fills once when missing)
# on 127.0.0.1 on that log dir, takes headless Chromium screenshots (1600x1000) of the trace
# viewer and the overview page, and stops everything. As root the server and the browser run in
# a network namespace of their own (unshare -n: loopback only; XProf's gRPC worker port binds
# every interface otherwise).
#
# Usage: tools/screenshots.sh [BUILD]
# Environment: LOUPE_XPROF_VENV (the venv with xprof; default BUILD/../.venv-xprof, the one
# tests/xprof_validate.sh uses), LOUPE_SHOT_BUDGET_MS (Chromium's virtual time budget per page,
# default 30000).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(mkdir -p "${1:-$here/build}" && cd "${1:-$here/build}" && pwd)
budget=${LOUPE_SHOT_BUDGET_MS:-30000}
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! command -v chromium >/dev/null; then
  echo "screenshots: installing chromium (apt-get)" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j2 >/dev/null

# The venv: the shared one; tests/xprof_validate.sh creates it once (under its lock) when missing.
export LOUPE_XPROF_VENV=${LOUPE_XPROF_VENV:-$(cd "$build/.." && pwd)/.venv-xprof}
if [ ! -f "$LOUPE_XPROF_VENV/.loupe-ready" ]; then
  bash "$here/tests/xprof_validate.sh" "$build" "$here"
fi
py=$LOUPE_XPROF_VENV/bin/python

work=$(mktemp -d "${TMPDIR:-/tmp}/loupe-shots.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "== loupe record: examples/compress_workload (tools/main.sh's workload)"
"$build/loupe" record -o "$work/log" --print-run-dir "$work/run" \
  -- "$build/examples/compress_workload" >/dev/null
run_dir=$(cat "$work/run")
run=$(basename "$run_dir")
xplane=$(ls "$run_dir"/*.xplane.pb)
host=$(basename "$xplane" .xplane.pb)
echo "run $run, host $host"

# The pipeline that needs the network: XProf's server on 127.0.0.1, two screenshots, stop.
cat >"$work/shoot.sh" <<'EOF'
set -euo pipefail
work=$1 py=$2 run=$3 host=$4 budget=$5
if [ "${LOUPE_SHOT_NETNS:-0}" = 1 ]; then ip link set lo up; fi
port=18791 grpc=18792
# xprof.server binds its HTTP port to the wildcard address: this launcher binds 127.0.0.1.
"$py" -c '
import sys
import xprof.server as s
s._get_wildcard_address = lambda port: "127.0.0.1"
s.start_server(logdir=sys.argv[1], port=int(sys.argv[2]), grpc_port=int(sys.argv[3]),
               worker_service_address="127.0.0.1:" + sys.argv[3])
' "$work/log" $port $grpc >"$work/xprof.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
# up when /runs answers (Python's urllib: no curl binary needed), 20 s at most
up() { "$py" -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
  "http://127.0.0.1:$port/runs" 2>/dev/null; }
for _ in $(seq 1 100); do
  if up; then break; fi
  sleep 0.2
done
up || { echo "screenshots: XProf's server did not start:"; cat "$work/xprof.log"; exit 1; }
base="http://127.0.0.1:$port/data/plugin/profile"
for page in trace_viewer:xprof-trace-viewer overview_page:xprof-overview; do
  tool=${page%%:*} file=${page#*:}
  timeout 180 chromium --headless --no-sandbox --hide-scrollbars --enable-unsafe-swiftshader \
    --use-angle=swiftshader --window-size=1600,1000 --virtual-time-budget="$budget" \
    --screenshot="$work/$file.png" "$base/$tool?run=$run&tag=$tool&host=$host" \
    >"$work/chromium-$tool.log" 2>&1 || { tail -5 "$work/chromium-$tool.log"; exit 1; }
done
EOF
if [ "$(id -u)" = 0 ] && unshare -n true 2>/dev/null; then
  LOUPE_SHOT_NETNS=1 unshare -n bash "$work/shoot.sh" "$work" "$py" "$run" "$host" "$budget"
else
  bash "$work/shoot.sh" "$work" "$py" "$run" "$host" "$budget"
fi
mkdir -p "$here/docs/img"
cp "$work/xprof-trace-viewer.png" "$work/xprof-overview.png" "$here/docs/img/"
ls -l "$here/docs/img/xprof-trace-viewer.png" "$here/docs/img/xprof-overview.png"
