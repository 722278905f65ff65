#!/usr/bin/env bash
# server_shared.sh BUILD_DIR SOURCE_DIR: the profiler server as a library of its own
# (src/session/server_load.c): libloupe.so.0 needs none of the server's libraries (libmicrohttpd,
# jansson, gRPC, protobuf-c; 71 libraries per exec before, now libc, zlib, libelf and libdw), a
# process under `loupe record` maps no gRPC, and a program linked with libloupe.so gets its server
# from libloupe_server.so.0 beside it: /v1/status answers and `loupe capture` takes its zones.
# Without libloupe_server.so.0 beside the library, the start fails with the exact message and
# the program goes on (exit 1 from the probe, which stops there). Skipped (77) in a build without
# the server (LOUPE_WITH_SERVER=OFF).
set -uo pipefail
build=$1
name=server_shared
lib=$build/libloupe.so.0
probe=$build/tests/server_probe_shared
if [ ! -e "$build/libloupe_server.so.0" ] || [ ! -x "$probe" ]; then
  echo "$name: SKIPPED: this build has no profiler server (LOUPE_WITH_SERVER=OFF)"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/loupe-srvso.XXXXXX")
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "$name: FAIL: $*"
  exit 1
}
# 1. what libloupe.so.0 needs
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | sort | tr '\n' ' ')
for bad in microhttpd grpc gpr protobuf-c jansson curl; do
  case " $needed" in *" lib$bad"*) fail "libloupe.so.0 needs lib$bad: $needed" ;; esac
done
echo "libloupe.so.0 needs: $needed"
server_needed=$(readelf -d "$build/libloupe_server.so.0" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
echo "$server_needed" | grep -q '^libmicrohttpd' || fail "libloupe_server.so.0 needs no libmicrohttpd: $server_needed"
# 2. a traced process maps no gRPC (not in sanitizer builds: the recorded program would need the
# sanitizer runtime preloaded; record_cli.sh covers that)
if [ -z "$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")" ]; then
  "$build/loupe" record -q --no-sample -o "$tmp/rec" -- cat /proc/self/maps >"$tmp/maps" 2>"$tmp/rec.err" ||
    { cat "$tmp/rec.err"; fail "loupe record -- cat /proc/self/maps"; }
  grep -q 'libloupe\.so' "$tmp/maps" || fail "the traced cat maps no libloupe.so: $(cat "$tmp/maps")"
  if grep -E 'libgrpc|libmicrohttpd|libprotobuf-c|libjansson|libloupe_server' "$tmp/maps" >"$tmp/bad"; then
    fail "the traced cat maps the server's libraries: $(head -3 "$tmp/bad")"
  fi
  echo "loupe record -- cat: libloupe.so mapped, no gRPC, microhttpd, protobuf-c or jansson"
fi
# 3. the server of a program linked with libloupe.so
"$probe" 0 -1 >"$tmp/probe.out" 2>&1 &
pid=$!
for _ in $(seq 100); do grep -q ready "$tmp/probe.out" && break; sleep 0.1; done
port=$(sed -n 's/^ready http=\([0-9]*\) grpc=.*$/\1/p' "$tmp/probe.out")
[ -n "$port" ] || fail "server_probe_shared did not start: $(cat "$tmp/probe.out")"
status=$(python3 -c 'import sys, urllib.request
print(urllib.request.urlopen("http://127.0.0.1:%s/v1/status" % sys.argv[1], timeout=30).read().decode())' "$port") ||
  fail "GET /v1/status"
echo "$status" | grep -q '"clock_base": *true' || fail "/v1/status: $status"
timeout 60 "$build/loupe" capture "http://127.0.0.1:$port" --duration-ms 300 --log-dir "$tmp/cap" \
  >"$tmp/cap.out" 2>&1 || { cat "$tmp/cap.out"; fail "loupe capture of the shared-library server"; }
"$build/loupe" summary "$(tail -1 "$tmp/cap.out")" >"$tmp/sum" 2>&1 || { cat "$tmp/sum"; fail "summary"; }
grep -q 'zone 0' "$tmp/sum" || fail "the capture has no 'zone N' zones: $(head -20 "$tmp/sum")"
kill -TERM "$pid"
wait "$pid" || fail "server_probe_shared exited $? after SIGTERM: $(cat "$tmp/probe.out")"
pid=
echo "server_probe_shared (libloupe.so): /v1/status, loupe capture of its zones, a clean stop"
# 4. without libloupe_server.so.0 beside the library: the start's exact error
mkdir "$tmp/lonely"
cp "$lib" "$tmp/lonely/"
out=$(LD_LIBRARY_PATH=$tmp/lonely "$probe" 0 -1 2>&1)
st=$?
want="server_probe: Not supported: cannot load the profiler server: libloupe_server.so.0: cannot open shared object file: No such file or directory (it is installed beside libloupe.so.0)"
[ "$st" = 1 ] && [ "$out" = "$want" ] || fail "without libloupe_server.so.0: exit $st, '$out', want 1 and '$want'"
echo "without libloupe_server.so.0: exit 1, '$want'"
# 5. a fork while another thread's first start is loading libloupe_server.so.0: the fork waits
# for the load (server_load.c's atfork lock), so no child finds the library half relocated (a
# helper's children crashed with SIGSEGV in their own first start, 5-26 of 40 in 6 of 12 runs);
# 3 runs of 40 children, none may die of a signal other than the 5 s alarm of a child whose own
# start met the parent's thread inside the server's start (not the load: 2 of 1,280 seen). Not
# in sanitizer builds (the probe would need the sanitizer's runtime first)
if command -v cc >/dev/null && [ -z "$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")" ]; then
  cat >"$tmp/forkload.c" <<'C'
#include <loupe/loupe.h>
#include <signal.h>
#include <stdio.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
static void *t(void *a) { (void)a; loupe_start_server(0); return 0; }
int main(void) {
    pthread_t th;
    pthread_create(&th, 0, t, 0);
    int crashed = 0;
    for (int i = 0; i < 40; i++) {
        pid_t c = fork();
        if (c == 0) { alarm(5); int rc = loupe_start_server(0); loupe_stop_server(); _exit(rc ? 1 : 0); }
        int st;
        waitpid(c, &st, 0);
        crashed += WIFSIGNALED(st) && WTERMSIG(st) != SIGALRM;
    }
    pthread_join(th, 0);
    loupe_stop_server();
    printf("%d crashed\n", crashed);
    return 0;
}
C
  cc -std=c11 -D_GNU_SOURCE -I"$2/include" "$tmp/forkload.c" -o "$tmp/forkload" -L"$build" -lloupe \
    -lpthread -Wl,-rpath,"$build" || fail "forkload: cannot build"
  for k in 1 2 3; do
    got=$(timeout 120 "$tmp/forkload") || fail "forkload run $k: exit $?: $got"
    [ "$got" = "0 crashed" ] || fail "forkload run $k: $got (children killed by a signal)"
  done
  echo "fork during the server library's load: 3 x 40 children, none crashed"
fi
echo "$name: OK"
