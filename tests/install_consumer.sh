#!/usr/bin/env bash
# install_consumer.sh: installs loupe into a temporary prefix and builds a tiny consumer against
# it twice, with CMake's find_package(loupe) and with pkg-config, then runs both.
# Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
# The consumers are built without sanitizers against the installed (instrumented) library:
# under ASan they run with the sanitizer runtime preloaded (it must come first); a TSan runtime
# cannot be preloaded (it must start with the process): skipped there.
sanitize=$(sed -n 's/^LOUPE_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
rt() { "$@"; }
case "$sanitize" in
  *thread*) echo "install_consumer: skipped: TSan build (a preloaded TSan runtime cannot start late)"; exit 77 ;;
  *address*)
    asan_rt=$(gcc -print-file-name=libasan.so)
    [ -f "$asan_rt" ] || { echo "install_consumer: skipped: ASan build and no gcc libasan.so to preload"; exit 77; }
    rt() {
      LD_PRELOAD="$asan_rt${LD_PRELOAD:+:$LD_PRELOAD}" \
        ASAN_OPTIONS="verify_asan_link_order=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" "$@"
    } ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
cmake --install "$build" --prefix "$prefix" >/dev/null
mkdir -p "$tmp/consumer"
cat >"$tmp/consumer/main.c" <<'C'
#include <loupe/loupe.h>
#include <stdio.h>
int main(int argc, char **argv) {
    (void)argc;
    loupe_trace_options o = {.log_dir = argv[1]};
    if (loupe_start_trace(&o) != 0) { return 1; }
    { LOUPE_ZONE("consumer_zone"); }
    loupe_trace_result r = {.size = sizeof r};
    if (loupe_stop_trace(&r) != 0) { return 2; }
    printf("%llu %s\n", (unsigned long long)r.events_recorded, loupe_version());
    loupe_trace_result_free(&r);
    return 0;
}
C
cat >"$tmp/consumer/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(loupe REQUIRED)
add_executable(consumer main.c)
target_link_libraries(consumer PRIVATE loupe::loupe)
CM
cmake -S "$tmp/consumer" -B "$tmp/cb" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cb" >/dev/null
out=$(LD_LIBRARY_PATH="$prefix/lib" rt "$tmp/cb/consumer" "$tmp/log1")
[ "$out" = "2 0.4.0" ] || { echo "FAIL: find_package consumer printed '$out'"; exit 1; }
libdir=$(ls -d "$prefix"/lib*/pkgconfig | head -n 1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs loupe)
cc -std=c11 "$tmp/consumer/main.c" -o "$tmp/pc_consumer" $flags -Wl,-rpath,"$(dirname "$libdir")"
out=$(rt "$tmp/pc_consumer" "$tmp/log2")
[ "$out" = "2 0.4.0" ] || { echo "FAIL: pkg-config consumer printed '$out'"; exit 1; }
ls "$tmp"/log2/plugins/profile/*/*.trace.json.gz >/dev/null
# the installed command runs from its prefix (RUNPATH $ORIGIN/../lib), no LD_LIBRARY_PATH
rt "$prefix/bin/loupe" --version | grep -q '^loupe ' || { echo "FAIL: installed loupe does not run"; exit 1; }
printf 'static int f(int x) { return x + 1; }\nint main(void) { return f(0) - 1; }\n' >"$tmp/fi.c"
cc -std=c11 -O0 -finstrument-functions "$tmp/fi.c" -o "$tmp/fi"
rt "$prefix/bin/loupe" record -q -o "$tmp/log3" --print-run-dir "$tmp/run3" -- "$tmp/fi"
run=$(cat "$tmp/run3")
[ -d "$run" ] || { echo "FAIL: installed loupe record gave '$run'"; exit 1; }
# the profiler server from the installed prefix: libloupe_server.so.0 beside libloupe.so.0 is
# what a -lloupe program's first start loads, and a static consumer links with pkg-config
# --static (its Libs.private name every library the server calls: 0.4's lacked -lgpr)
if grep -q '^LOUPE_WITH_SERVER:BOOL=ON' "$build/CMakeCache.txt"; then
  cat >"$tmp/consumer/srv.c" <<'C'
#include <loupe/loupe.h>
#include <stdio.h>
int main(void) {
    int rc = loupe_start_server(0);
    if (rc != 0) { printf("start: %s: %s\n", loupe_strerror(rc), loupe_last_error()); return 1; }
    int up = loupe_server_port() > 0;
    rc = loupe_stop_server();
    printf("%s %d\n", up ? "served" : "no port", rc);
    return 0;
}
C
  libs=$(dirname "$libdir")
  [ -e "$libs/libloupe_server.so.0" ] || { echo "FAIL: no libloupe_server.so.0 in $libs"; exit 1; }
  cc -std=c11 "$tmp/consumer/srv.c" -o "$tmp/srv" $flags -Wl,-rpath,"$libs"
  out=$(rt "$tmp/srv")
  [ "$out" = "served 0" ] || { echo "FAIL: the installed server: '$out'"; exit 1; }
  if [ -z "$sanitize" ]; then
    sflags=$(PKG_CONFIG_PATH="$libdir" pkg-config --static --cflags --libs loupe)
    cc -std=c11 "$tmp/consumer/srv.c" -o "$tmp/srv_static" -static-libgcc \
      $(echo "$sflags" | sed 's/-lloupe\b/-l:libloupe.a/') ||
      { echo "FAIL: a static consumer of the server does not link: $sflags"; exit 1; }
    out=$("$tmp/srv_static")
    [ "$out" = "served 0" ] || { echo "FAIL: the static consumer's server: '$out'"; exit 1; }
  fi
  echo "install_consumer: the server: loaded from the prefix, and linked statically"
fi
echo "install_consumer: find_package and pkg-config consumers work"
