#!/usr/bin/env bash
# grpc_validate.sh BUILD_DIR SOURCE_DIR: loupe's gRPC ProfilerService and `loupe capture`'s gRPC
# client against the real tools (tests/grpc_check.py does the Python side):
#   1. python -m jax.collect_profile PORT 500 --log_dir D --no_perfetto_link against a loupe
#      process (tests/probes/server_probe) serving HTTP and gRPC on its one port, as
#      loupe_start_server(port) does (curl's GET /v1/status on that port too): exit 0, D holds
#      <host>_<port>.xplane.pb, xprof
#      converts it and every zone of the window is there (consecutive numbers, none missing; at
#      least 10 of the ~100 a quiet machine gives: the probe's 5 ms sleeps overshoot under load);
#   2. XProf's capture handler (ProfilePlugin.capture_route_impl, in-process) against one loupe
#      process, then against two (service_addr "A,B"): one run with one file per process;
#   3. the service's gRPC statuses (grpc_check.py service) and a Profile during a local trace;
#   4. `loupe capture` against jax.profiler.start_server (its clock offset, bounded by the
#      reply's session times, holds 0), against a server whose reply has no session times
#      (offset unknown, said), and `loupe capture JAX,LOUPE --merge`: one run directory with a
#      file per process and a merged trace with both processes.
# jax binds every interface: the whole test runs in a network namespace of its own
# (unshare -n, loopback only) when it may make one; otherwise every server it starts is given
# 127.0.0.1 and the jax one runs bounded in time. The venv: tests/probes/xprof_venv.sh (the one
# tests/xprof_validate.sh uses). Exit 77 only when pip cannot install xprof and jax.
set -uo pipefail
build=$1
src=$2
name=grpc_validate
if [ ! -x "$build/tests/server_probe" ] || ! grep -q '^LOUPE_WITH_GRPC:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "$name: SKIPPED: this build has no gRPC service (LOUPE_WITH_GRPC=OFF)"
  exit 77
fi
if [ -z "${LOUPE_GRPC_NETNS:-}" ]; then
  . "$src/tests/probes/xprof_venv.sh" # pip needs the network: before the namespace
  if unshare -n true 2>/dev/null; then
    LOUPE_GRPC_NETNS=1 LOUPE_XPROF_VENV=$venv exec timeout 300 unshare -n bash "$0" "$@"
  fi
  echo "$name: no network namespace (unshare -n); every server stays on 127.0.0.1"
else
  ip link set lo up
  py=$LOUPE_XPROF_VENV/bin/python
fi
check="$py $src/tests/grpc_check.py"
probe=$build/tests/server_probe
loupe=$build/loupe
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loupe-grpc.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "$name: FAIL: $*"
  exit 1
}
# start_probe NAME GRPC_PORT [LOG_DIR]: a loupe process (GRPC_PORT 0: on the HTTP port, -1: a
# free one of its own); sets $grpc_port and $http_port
start_probe() {
  "$probe" 0 "$2" ${3:+"$3"} >"$tmp/$1.out" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q ready "$tmp/$1.out" && break; sleep 0.1; done
  grpc_port=$(sed -n 's/^ready http=[0-9]* grpc=\([0-9]*\)$/\1/p' "$tmp/$1.out")
  http_port=$(sed -n 's/^ready http=\([0-9]*\) grpc=[0-9]*$/\1/p' "$tmp/$1.out")
  [ -n "$grpc_port" ] || fail "server_probe did not start: $(cat "$tmp/$1.out")"
}
# quiet: the consumers log to stderr (absl); keep the lines that matter
quiet() { grep -vE '^([IWE][0-9]{4} |WARNING: All log messages)'; }

start_probe a 0
pa=$grpc_port
ha=$http_port
[ "$pa" = "$ha" ] || fail "the default grpc_port: gRPC on $pa, HTTP on $ha"
start_probe b -1
pb=$grpc_port
hb=$http_port
[ "$pb" != "$hb" ] || fail "grpc_port -1: gRPC and HTTP both on $pb"
# HTTP on the one port, also while a connection that has sent nothing waits there
exec 7<>"/dev/tcp/127.0.0.1/$pa"
st=$(curl -s -m 20 "http://127.0.0.1:$pa/v1/status") || fail "curl /v1/status on the one port $pa"
case $st in *'"state":"IDLE"'*) ;; *) fail "GET /v1/status on the one port: $st" ;; esac
echo "GET /v1/status on the one port $pa: IDLE"

# 1. jax.collect_profile
timeout 120 $py -m jax.collect_profile "$pa" 500 --log_dir "$tmp/jc" --no_perfetto_link \
  >"$tmp/jc.log" 2>&1 || { cat "$tmp/jc.log"; fail "jax.collect_profile exited $?"; }
f=$(ls "$tmp"/jc/plugins/profile/*/127.0.0.1_"$pa".xplane.pb 2>/dev/null)
[ -n "$f" ] || { cat "$tmp/jc.log"; ls -R "$tmp/jc"; fail "collect_profile left no 127.0.0.1_$pa.xplane.pb"; }
echo "jax.collect_profile $pa 500 (HTTP's port): exit 0, $(basename "$f")"
exec 7>&-
timeout 120 $check zones "$f" 10 2>&1 | quiet || fail "zones of the collect_profile capture"

# 2. XProf's capture handler: one process, then two
timeout 120 $check capture_route "$tmp/x1" "127.0.0.1:$pa" 500 2>&1 | quiet || fail "capture_route, one host"
runs=$(ls "$tmp/x1/plugins/profile" | wc -l)
[ "$runs" = 1 ] || fail "capture_route, one host: $runs runs"
timeout 120 $check zones "$(ls "$tmp"/x1/plugins/profile/*/127.0.0.1_"$pa".xplane.pb)" 10 2>&1 | quiet ||
  fail "zones of the capture_route capture"
timeout 120 $check capture_route "$tmp/x2" "127.0.0.1:$pa,127.0.0.1:$pb" 500 2>&1 | quiet ||
  fail "capture_route, two hosts"
run=$(ls -d "$tmp"/x2/plugins/profile/*)
[ "$(echo "$run" | wc -l)" = 1 ] || fail "capture_route, two hosts: runs $run"
got=$(cd "$run" && ls *.xplane.pb | sort | tr '\n' ' ')
want=$(printf '%s\n' "127.0.0.1_$pa.xplane.pb" "127.0.0.1_$pb.xplane.pb" | sort | tr '\n' ' ')
[ "$got" = "$want" ] || fail "capture_route, two hosts: files '$got', want '$want'"
echo "xprof capture_route two hosts: one run with $got"
for x in "$run"/*.xplane.pb; do
  timeout 120 $check zones "$x" 10 2>&1 | quiet || fail "zones of $x"
done

# 3. the service's statuses; a capture during a local trace
timeout 120 $check service "127.0.0.1:$pb" "$tmp/svc" 2>&1 | quiet || fail "service statuses"
start_probe c -1 "$tmp/local"
timeout 60 $check busy "127.0.0.1:$grpc_port" "$tmp/local" 2>&1 | quiet || fail "busy"

# a stop during a capture answers it (UNAVAILABLE) and returns within its 2 s grace
start_probe d 0
pd_pid=${pids[-1]}
timeout 60 $check stopping "127.0.0.1:$grpc_port" >"$tmp/stop.log" 2>&1 &
st=$!
for _ in $(seq 100); do grep -q started "$tmp/stop.log" && break; sleep 0.1; done
sleep 0.5
t0=$(date +%s%N)
kill -TERM "$pd_pid"
wait "$pd_pid" || fail "server_probe exited $? after SIGTERM: $(cat "$tmp/d.out")"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$ms" -lt 3000 ] || fail "loupe_stop_server took $ms ms during a gRPC capture"
wait "$st" || { cat "$tmp/stop.log"; fail "the capture the stop ended"; }
quiet <"$tmp/stop.log" | grep -v '^started$'
echo "loupe_stop_server during a gRPC capture: returned after $ms ms"
# a busy port is an error, also one that another gRPC server holds (no SO_REUSEPORT sharing)
out=$("$probe" 0 "$pa" 2>&1)
want="server_probe: I/O error: loupe_start_server (gRPC): cannot listen on 127.0.0.1 port $pa: Address already in use (errno 98); another process holds the port"
[ "$out" = "$want" ] || fail "a busy gRPC port: got '$out', want '$want'"
echo "grpc_port $pa (in use): $out"

# 4. loupe capture against jax.profiler.start_server, alone and merged with a loupe process
jp=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 240 $py "$src/tests/grpc_check.py" jax_server "$jp" >"$tmp/jax.out" 2>&1 &
pids+=($!)
for _ in $(seq 300); do grep -q ready "$tmp/jax.out" && break; sleep 0.1; done
grep -q ready "$tmp/jax.out" || { cat "$tmp/jax.out"; fail "the JAX server did not start"; }
timeout 120 "$loupe" capture "grpc://127.0.0.1:$jp" --duration-ms 1500 --log-dir "$tmp/lj" \
  >"$tmp/lj.out" 2>&1 || { cat "$tmp/lj.out"; fail "loupe capture grpc:// against jax"; }
f=$(ls "$tmp"/lj/plugins/profile/*/127.0.0.1_"$jp".[0-9]*.xplane.pb 2>/dev/null)
[ -n "$f" ] || fail "loupe capture against jax: no 127.0.0.1_$jp.<pid>.xplane.pb"
grep -q jax_step <("$loupe" summary "$f" 2>&1) || fail "loupe summary of the jax capture has no jax_step"
out=$("$probe" 0 "$jp" 2>&1) # jax's server sets SO_REUSEPORT; loupe's does not share
want="server_probe: I/O error: loupe_start_server (gRPC): cannot listen on 127.0.0.1 port $jp: Address already in use (errno 98); another process holds the port"
[ "$out" = "$want" ] || fail "jax's gRPC port: got '$out', want '$want'"
echo "grpc_port $jp (jax.profiler.start_server's): refused"
echo "loupe capture grpc://127.0.0.1:$jp (jax.profiler.start_server): $(basename "$f") with jax_step"
# its clock: no clock call over gRPC; the XSpace's session times within the call bound the
# offset, which on one machine is 0
"$loupe" convert "$f" -o "$tmp/lj.trace.json.gz" >/dev/null 2>&1 || fail "loupe convert $f"
timeout 60 $check clock "$tmp/lj.trace.json.gz" "$tmp/lj.out" "127.0.0.1:$jp" 2>&1 | quiet ||
  fail "the clock offset of the jax capture"
# a server whose XSpace has no session times: said, offset 0, uncertainty unknown
tp=$($py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
timeout 120 $py "$src/tests/grpc_check.py" timeless_server "$tp" >"$tmp/timeless.out" 2>&1 &
pids+=($!)
for _ in $(seq 300); do grep -q ready "$tmp/timeless.out" && break; sleep 0.1; done
grep -q ready "$tmp/timeless.out" || { cat "$tmp/timeless.out"; fail "the timeless server did not start"; }
timeout 60 "$loupe" capture "grpc://127.0.0.1:$tp" --duration-ms 200 --log-dir "$tmp/lt" \
  >"$tmp/lt.out" 2>&1 || { cat "$tmp/lt.out"; fail "loupe capture of the timeless server"; }
want="127.0.0.1:$tp: clock offset unknown (0 assumed): it has no Task Environment plane (profile_start_time, profile_stop_time)"
grep -qxF "$want" "$tmp/lt.out" || { cat "$tmp/lt.out"; fail "no line '$want'"; }
f=$(ls "$tmp"/lt/plugins/profile/*/127.0.0.1_"$tp".[0-9]*.xplane.pb 2>/dev/null)
"$loupe" convert "$f" -o "$tmp/lt.trace.json.gz" >/dev/null 2>&1 || fail "loupe convert $f"
got=$($py -c 'import gzip, json, sys; m = json.load(gzip.open(sys.argv[1]))["metadata"]
print(" ".join(m.get(k, "-") for k in ("loupe_clock_offset_ns", "loupe_clock_offset_uncertainty_ns",
      "loupe_clock_offset_at_ns", "loupe_clock_method")))' "$tmp/lt.trace.json.gz")
[ "$got" = "0 unknown - unknown" ] || fail "the timeless capture's clock keys: '$got', want '0 unknown - unknown'"
echo "loupe capture grpc://127.0.0.1:$tp (no session times): $want"
# no scheme: HTTP first, then gRPC; a loupe process over gRPC beside it (b: its gRPC port is
# its own, so only gRPC answers there); --merge
timeout 120 "$loupe" capture "127.0.0.1:$jp,127.0.0.1:$pb" --duration-ms 500 --log-dir "$tmp/lm" \
  --merge >"$tmp/lm.out" 2>&1 || { cat "$tmp/lm.out"; fail "loupe capture JAX,LOUPE --merge"; }
grep -q "127.0.0.1:$jp: not an HTTP/1.1 server (Received HTTP/0.9 when not allowed); capturing over gRPC" \
  "$tmp/lm.out" || { cat "$tmp/lm.out"; fail "no auto-detection message"; }
run=$(tail -1 "$tmp/lm.out")
# loupe capture names a file <host>_<port>.<pid>.xplane.pb: the pid made "N" here
got=$(cd "$run" && ls | sed 's/\.[0-9][0-9]*\.xplane\.pb$/.N.xplane.pb/' | sort | tr '\n' ' ')
want=$(printf '%s\n' "127.0.0.1_$jp.N.xplane.pb" "127.0.0.1_$pb.N.xplane.pb" perfetto_trace.json.gz |
  sort | tr '\n' ' ')
[ "$got" = "$want" ] || fail "loupe capture --merge: files '$got', want '$want'"
timeout 60 $check merged "$run/perfetto_trace.json.gz" "127.0.0.1:$jp" "127.0.0.1:$pb" 2>&1 | quiet ||
  fail "merged trace"
# 5. one timeline (tests/xprof_timeline.py): `loupe capture` of the two processes over HTTP as
# xplane; XProf's view of the two files has every zone where the merged run has it (each server
# counts its times from the capture's base, its clock corrected: 0.4 counted each from its own
# capture start, 1.26 ms apart between two hosts)
timeout 120 "$loupe" capture "http://127.0.0.1:$ha,http://127.0.0.1:$hb" --duration-ms 500 \
  --format xplane --log-dir "$tmp/lx" >"$tmp/lx.out" 2>&1 || { cat "$tmp/lx.out"; fail "loupe capture A,B --format xplane"; }
run=$(tail -1 "$tmp/lx.out")
"$loupe" convert "$run" -o "$tmp/lx_merged.xplane.pb" >"$tmp/lx.conv" 2>&1 ||
  { cat "$tmp/lx.conv"; fail "loupe convert of the two-host capture"; }
timeout 120 $py "$src/tests/xprof_timeline.py" "zone *" 0 "$tmp/lx_merged.xplane.pb" "$run"/*.xplane.pb \
  >"$tmp/lx.log" 2>&1 || { quiet <"$tmp/lx.log" | tail -5; fail "one timeline of a two-host capture"; }
grep '^xprof' "$tmp/lx.log"
echo "$name: OK"
